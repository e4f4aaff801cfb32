//! A trigger's `functionSelector`: a metav1 LabelSelector, checked as the API server checks one
//! and matched with kube's own [`Selector`], so every trigger selects Functions the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Expression, Selector, SelectorExt};

/// Why a selector cannot be used: what the API server refuses in a LabelSelector (kube's own
/// conversion lets `In` with an empty list and `Exists` with values through).
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

/// A checked selector: every `matchLabels` pair and every `matchExpressions` requirement must
/// hold; an empty selector selects every Function, as in Kubernetes.
#[derive(Debug, Clone)]
pub struct FunctionSelector(Selector);

impl FunctionSelector {
    /// Checks `selector` once, so a bad one is reported even when no Function exists.
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut expressions: Vec<Expression> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Expression::Equal(k.clone(), v.clone()))
            .collect();
        for req in selector.match_expressions.iter().flatten() {
            let (key, operator) = (req.key.clone(), req.operator.clone());
            if key.is_empty() {
                return Err(SelectorError::EmptyKey);
            }
            let values: BTreeSet<String> = req.values.iter().flatten().cloned().collect();
            expressions.push(match req.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError::MissingValues { key, operator });
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::UnexpectedValues { key, operator });
                }
                "In" => Expression::In(key, values),
                "NotIn" => Expression::NotIn(key, values),
                "Exists" => Expression::Exists(key),
                "DoesNotExist" => Expression::DoesNotExist(key),
                _ => return Err(SelectorError::UnknownOperator { key, operator }),
            });
        }
        Ok(Self(expressions.into_iter().collect()))
    }

    /// [`FunctionSelector::new`] for a trigger's plan: a bad selector is the trigger's
    /// `InvalidSelector` problem.
    pub fn for_trigger(selector: &LabelSelector) -> Result<Self, crate::Problem> {
        Self::new(selector).map_err(|e| crate::Problem {
            reason: kubeless_api::conditions::reasons::INVALID_SELECTOR,
            message: e.to_string(),
        })
    }

    /// The live Functions of `namespace` this selects (those being deleted are left out).
    pub fn select<'a>(
        &'a self,
        namespace: &'a str,
        functions: &'a [std::sync::Arc<kubeless_api::Function>],
    ) -> impl Iterator<Item = &'a kubeless_api::Function> + 'a {
        functions.iter().map(|f| &**f).filter(move |f| {
            f.metadata.deletion_timestamp.is_none()
                && f.metadata.namespace.as_deref() == Some(namespace)
                && self.matches(f.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
        })
    }

    /// Whether a Function with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }
}

/// `k=v,k2 in (a,b),!k3` as kubectl writes selectors; `<everything>` for the empty one.
impl fmt::Display for FunctionSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.selects_all() {
            f.write_str("<everything>")
        } else {
            self.0.fmt(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn expressions(reqs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: None,
            match_expressions: Some(reqs),
        }
    }

    #[test]
    fn match_labels_must_all_match() {
        let sel = FunctionSelector::new(&LabelSelector {
            match_labels: Some(labels(&[("function", "hello"), ("tier", "a")])),
            match_expressions: None,
        })
        .unwrap();
        assert!(sel.matches(&labels(&[("function", "hello"), ("tier", "a"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[("function", "hello")])));
        assert!(!sel.matches(&labels(&[("function", "other"), ("tier", "a")])));
        assert_eq!(sel.to_string(), "function=hello,tier=a");
    }

    #[test]
    fn the_empty_selector_selects_everything() {
        for empty in [
            LabelSelector::default(),
            LabelSelector {
                match_labels: Some(BTreeMap::new()),
                match_expressions: Some(vec![]),
            },
        ] {
            let sel = FunctionSelector::new(&empty).unwrap();
            assert!(sel.matches(&labels(&[])));
            assert!(sel.matches(&labels(&[("a", "b")])));
            assert_eq!(sel.to_string(), "<everything>");
        }
    }

    #[test]
    fn every_operator_as_the_api_server_has_it() {
        let sel = FunctionSelector::new(&expressions(vec![
            req("env", "In", Some(&["prod", "staging"])),
            req("skip", "DoesNotExist", None),
            req("team", "Exists", Some(&[])),
            req("tier", "NotIn", Some(&["batch"])),
        ]))
        .unwrap();
        assert!(sel.matches(&labels(&[("env", "prod"), ("team", "x")])));
        // A missing label satisfies NotIn.
        assert!(sel.matches(&labels(&[
            ("env", "staging"),
            ("team", "x"),
            ("tier", "web")
        ])));
        assert!(!sel.matches(&labels(&[("env", "dev"), ("team", "x")])));
        assert!(!sel.matches(&labels(&[("env", "prod")])));
        assert!(!sel.matches(&labels(&[("env", "prod"), ("team", "x"), ("skip", "1")])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("team", "x"),
            ("tier", "batch")
        ])));
        assert_eq!(
            sel.to_string(),
            "env in (prod,staging),!skip,team,tier notin (batch)"
        );
    }

    #[test]
    fn what_the_api_server_refuses_is_refused() {
        let cases = [
            (
                req("a", "Like", Some(&["x"])),
                SelectorError::UnknownOperator {
                    key: "a".into(),
                    operator: "Like".into(),
                },
            ),
            (
                req("a", "In", Some(&[])),
                SelectorError::MissingValues {
                    key: "a".into(),
                    operator: "In".into(),
                },
            ),
            (
                req("a", "NotIn", None),
                SelectorError::MissingValues {
                    key: "a".into(),
                    operator: "NotIn".into(),
                },
            ),
            (
                req("a", "Exists", Some(&["x"])),
                SelectorError::UnexpectedValues {
                    key: "a".into(),
                    operator: "Exists".into(),
                },
            ),
            (req("", "Exists", None), SelectorError::EmptyKey),
        ];
        for (bad, want) in cases {
            let err = FunctionSelector::new(&expressions(vec![bad])).unwrap_err();
            assert_eq!(err, want);
        }
    }
}
