//! Label selector matching (metav1 LabelSelector semantics: matchLabels AND every
//! matchExpressions requirement; an empty selector selects everything, as in Kubernetes).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unknown selector operator {0:?} (expected In, NotIn, Exists or DoesNotExist)")]
    UnknownOperator(String),
    #[error("operator {operator} on key {key:?} needs at least one value")]
    MissingValues { key: String, operator: String },
    #[error("operator {operator} on key {key:?} must not have values")]
    UnexpectedValues { key: String, operator: String },
}

/// Checks the selector once so that an invalid one is reported instead of matching nothing.
pub fn validate(selector: &LabelSelector) -> Result<(), SelectorError> {
    for req in selector.match_expressions.iter().flatten() {
        let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
        match req.operator.as_str() {
            "In" | "NotIn" if !has_values => {
                return Err(SelectorError::MissingValues {
                    key: req.key.clone(),
                    operator: req.operator.clone(),
                });
            }
            "Exists" | "DoesNotExist" if has_values => {
                return Err(SelectorError::UnexpectedValues {
                    key: req.key.clone(),
                    operator: req.operator.clone(),
                });
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(SelectorError::UnknownOperator(other.to_string())),
        }
    }
    Ok(())
}

/// Whether `labels` satisfy `selector`. Call [`validate`] first; an invalid requirement
/// matches nothing here.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && selector.match_expressions.iter().flatten().all(|req| {
            let values = req.values.as_deref().unwrap_or_default();
            let value = labels.get(&req.key);
            match req.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// `k=v,k2 in (a,b)` rendering for logs and status messages.
pub fn describe(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default().join(",");
        parts.push(match req.operator.as_str() {
            "In" => format!("{} in ({values})", req.key),
            "NotIn" => format!("{} notin ({values})", req.key),
            "Exists" => req.key.clone(),
            "DoesNotExist" => format!("!{}", req.key),
            other => format!("{} {other} ({values})", req.key),
        });
    }
    if parts.is_empty() {
        "<everything>".to_string()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_must_all_match() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("function", "hello"), ("tier", "a")])),
            ..Default::default()
        };
        assert!(matches(
            &sel,
            &labels(&[("function", "hello"), ("tier", "a"), ("x", "y")])
        ));
        assert!(!matches(&sel, &labels(&[("function", "hello")])));
        assert!(!matches(
            &sel,
            &labels(&[("function", "other"), ("tier", "a")])
        ));
    }

    #[test]
    fn empty_selector_selects_everything() {
        let sel = LabelSelector::default();
        assert!(matches(&sel, &labels(&[])));
        assert!(matches(&sel, &labels(&[("a", "b")])));
        assert_eq!(describe(&sel), "<everything>");
    }

    #[test]
    fn expressions() {
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                req("env", "In", &["prod", "staging"]),
                req("skip", "DoesNotExist", &[]),
                req("team", "Exists", &[]),
                req("tier", "NotIn", &["batch"]),
            ]),
        };
        validate(&sel).unwrap();
        assert!(matches(&sel, &labels(&[("env", "prod"), ("team", "x")])));
        assert!(matches(
            &sel,
            &labels(&[("env", "staging"), ("team", "x"), ("tier", "web")])
        ));
        assert!(!matches(&sel, &labels(&[("env", "dev"), ("team", "x")])));
        assert!(!matches(&sel, &labels(&[("env", "prod")])));
        assert!(!matches(
            &sel,
            &labels(&[("env", "prod"), ("team", "x"), ("skip", "1")])
        ));
        assert!(!matches(
            &sel,
            &labels(&[("env", "prod"), ("team", "x"), ("tier", "batch")])
        ));
        assert_eq!(
            describe(&sel),
            "env in (prod,staging),!skip,team,tier notin (batch)"
        );
    }

    #[test]
    fn invalid_selectors_are_reported_and_match_nothing() {
        let bad_op = LabelSelector {
            match_expressions: Some(vec![req("a", "Like", &["x"])]),
            ..Default::default()
        };
        assert_eq!(
            validate(&bad_op),
            Err(SelectorError::UnknownOperator("Like".into()))
        );
        assert!(!matches(&bad_op, &labels(&[("a", "x")])));
        let no_values = LabelSelector {
            match_expressions: Some(vec![req("a", "In", &[])]),
            ..Default::default()
        };
        assert!(matches!(
            validate(&no_values),
            Err(SelectorError::MissingValues { .. })
        ));
        let extra_values = LabelSelector {
            match_expressions: Some(vec![req("a", "Exists", &["x"])]),
            ..Default::default()
        };
        assert!(matches!(
            validate(&extra_values),
            Err(SelectorError::UnexpectedValues { .. })
        ));
    }
}
