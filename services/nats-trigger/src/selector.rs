//! metav1 LabelSelector matching, with the API server's semantics: every `matchLabels` pair and
//! every `matchExpressions` requirement must hold; an empty selector matches everything.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Why a selector cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "unknown operator {operator:?} for key {key:?} (expected In, NotIn, Exists or DoesNotExist)"
    )]
    UnknownOperator { key: String, operator: String },
    #[error("operator {operator} for key {key:?} needs at least one value")]
    MissingValues { key: String, operator: String },
    #[error("operator {operator} for key {key:?} takes no values")]
    UnexpectedValues { key: String, operator: String },
    #[error("a requirement has an empty key")]
    EmptyKey,
}

/// Checks a selector without matching anything, so a bad one is reported even when no
/// function exists.
pub fn validate(selector: &LabelSelector) -> Result<(), SelectorError> {
    for req in selector.match_expressions.iter().flatten() {
        check(req)?;
    }
    Ok(())
}

/// Whether `labels` satisfy `selector`.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    validate(selector)?;
    let pairs_hold = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    if !pairs_hold {
        return Ok(false);
    }
    Ok(selector
        .match_expressions
        .iter()
        .flatten()
        .all(|req| requirement_holds(req, labels)))
}

fn check(req: &LabelSelectorRequirement) -> Result<(), SelectorError> {
    if req.key.is_empty() {
        return Err(SelectorError::EmptyKey);
    }
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => Err(SelectorError::MissingValues {
            key: req.key.clone(),
            operator: req.operator.clone(),
        }),
        "Exists" | "DoesNotExist" if !values.is_empty() => Err(SelectorError::UnexpectedValues {
            key: req.key.clone(),
            operator: req.operator.clone(),
        }),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => Ok(()),
        other => Err(SelectorError::UnknownOperator {
            key: req.key.clone(),
            operator: other.to_string(),
        }),
    }
}

fn requirement_holds(req: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let value = labels.get(&req.key);
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        // A missing label satisfies NotIn, as in Kubernetes.
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

    fn exprs(reqs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: None,
            match_expressions: Some(reqs),
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = LabelSelector::default();
        assert!(matches(&s, &labels(&[])).unwrap());
        assert!(matches(&s, &labels(&[("a", "b")])).unwrap());
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = LabelSelector {
            match_labels: Some(
                labels(&[("function", "hello"), ("tier", "web")])
                    .into_iter()
                    .collect(),
            ),
            match_expressions: None,
        };
        assert!(
            matches(
                &s,
                &labels(&[("function", "hello"), ("tier", "web"), ("x", "y")])
            )
            .unwrap()
        );
        assert!(!matches(&s, &labels(&[("function", "hello")])).unwrap());
        assert!(!matches(&s, &labels(&[("function", "hello"), ("tier", "db")])).unwrap());
    }

    #[test]
    fn expressions() {
        let l = labels(&[("env", "prod"), ("team", "a")]);
        assert!(matches(&exprs(vec![req("env", "In", &["prod", "staging"])]), &l).unwrap());
        assert!(!matches(&exprs(vec![req("env", "In", &["dev"])]), &l).unwrap());
        assert!(!matches(&exprs(vec![req("missing", "In", &["x"])]), &l).unwrap());
        assert!(matches(&exprs(vec![req("env", "NotIn", &["dev"])]), &l).unwrap());
        assert!(!matches(&exprs(vec![req("env", "NotIn", &["prod"])]), &l).unwrap());
        assert!(matches(&exprs(vec![req("missing", "NotIn", &["x"])]), &l).unwrap());
        assert!(matches(&exprs(vec![req("team", "Exists", &[])]), &l).unwrap());
        assert!(!matches(&exprs(vec![req("missing", "Exists", &[])]), &l).unwrap());
        assert!(matches(&exprs(vec![req("missing", "DoesNotExist", &[])]), &l).unwrap());
        assert!(!matches(&exprs(vec![req("team", "DoesNotExist", &[])]), &l).unwrap());
        // All requirements together, plus matchLabels.
        let both = LabelSelector {
            match_labels: Some(labels(&[("team", "a")])),
            match_expressions: Some(vec![
                req("env", "In", &["prod"]),
                req("canary", "DoesNotExist", &[]),
            ]),
        };
        assert!(matches(&both, &l).unwrap());
        let mut canary = l.clone();
        canary.insert("canary".into(), "true".into());
        assert!(!matches(&both, &canary).unwrap());
    }

    #[test]
    fn invalid_requirements_are_errors() {
        let l = labels(&[("a", "b")]);
        for (r, want) in [
            (
                req("a", "Equals", &["b"]),
                SelectorError::UnknownOperator {
                    key: "a".into(),
                    operator: "Equals".into(),
                },
            ),
            (
                req("a", "In", &[]),
                SelectorError::MissingValues {
                    key: "a".into(),
                    operator: "In".into(),
                },
            ),
            (
                req("a", "Exists", &["b"]),
                SelectorError::UnexpectedValues {
                    key: "a".into(),
                    operator: "Exists".into(),
                },
            ),
            (req("", "Exists", &[]), SelectorError::EmptyKey),
        ] {
            assert_eq!(matches(&exprs(vec![r]), &l).unwrap_err(), want);
        }
    }
}
