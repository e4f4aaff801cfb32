//! The pure reconciler: KafkaTriggers + Functions -> the consumers that should run (one per
//! (trigger, selected function), keyed by Kubeless's consumer-group name) and what each
//! trigger's status should say. No I/O here, so every rule is unit-tested.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use kube::ResourceExt;
use kubeless_api::labels::consumer_group_name;
use kubeless_api::{DeliveryPolicy, Function, KafkaTrigger};
use kubeless_invoke::FunctionTarget;

use kubeless_trigger::FunctionSelector;

/// Annotation on a KafkaTrigger that overrides the service-wide `--ordering` for it.
pub const ORDERING_ANNOTATION: &str = "kafkatriggers.kubeless.io/ordering";

/// How records of one partition may overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// One call at a time per partition: strict partition order (Kubeless's behaviour).
    #[default]
    Partition,
    /// Records with the same key in order; different keys of a partition run concurrently.
    /// Records without a key are spread like `none`.
    Key,
    /// No order within a partition; only the bound on calls in flight applies.
    None,
}

impl Ordering {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Partition => "partition",
            Self::Key => "key",
            Self::None => "none",
        }
    }
}

impl fmt::Display for Ordering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Ordering {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "partition" => Ok(Self::Partition),
            "key" => Ok(Self::Key),
            "none" => Ok(Self::None),
            other => Err(format!(
                "unknown ordering {other:?} (expected partition, key or none)"
            )),
        }
    }
}

/// Everything a consumer needs; a change of any field restarts the consumer.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerSpec {
    /// `<ns>_<trigger>_<fn>_<topic>`.
    pub group: String,
    pub namespace: String,
    pub trigger: String,
    /// The trigger's uid, so its Events name it exactly (`kubectl describe` matches on it).
    pub trigger_uid: Option<String>,
    pub function: String,
    pub topic: String,
    pub dead_letter_topic: Option<String>,
    pub policy: DeliveryPolicy,
    pub ordering: Ordering,
    pub target: FunctionTarget,
}

/// Why a trigger has no consumers (or fewer than it selects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerProblem {
    /// Bad retry policy, empty topic, bad ordering annotation.
    InvalidSpec(String),
    InvalidSelector(String),
    /// The selector matches no live Function in the trigger's namespace.
    NoFunctionsSelected(String),
}

/// What one trigger's status should show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerPlan {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    /// Selected function names, sorted.
    pub functions: Vec<String>,
    /// Consumer groups of this trigger (same order as `functions`).
    pub groups: Vec<String>,
    pub problem: Option<TriggerProblem>,
}

/// The desired state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub consumers: BTreeMap<String, ConsumerSpec>,
    pub triggers: Vec<TriggerPlan>,
}

/// Service-wide defaults the plan applies.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Defaults {
    /// `--ordering`, unless the trigger's annotation says otherwise.
    pub ordering: Ordering,
    /// `BACKOFF_INTERVAL`: Kubeless's cap on the wait after a failure. Used as `maxBackoff` of
    /// triggers whose `retry.maxBackoff` is unset (and lowers `initialBackoff` if needed).
    pub max_backoff: Option<std::time::Duration>,
}

/// Computes the desired consumers and trigger statuses. Objects being deleted are ignored:
/// their consumers stop (after draining and committing).
pub fn plan(triggers: &[KafkaTrigger], functions: &[Function], defaults: &Defaults) -> Plan {
    let default_ordering = defaults.ordering;
    let mut out = Plan::default();
    for t in triggers {
        if t.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let namespace = t.namespace().unwrap_or_default();
        let name = t.name_any();
        let mut tp = TriggerPlan {
            namespace: namespace.clone(),
            name: name.clone(),
            generation: t.metadata.generation,
            functions: Vec::new(),
            groups: Vec::new(),
            problem: None,
        };
        let spec_problem = (|| {
            if t.spec.topic.trim().is_empty() {
                return Err(TriggerProblem::InvalidSpec("topic is empty".into()));
            }
            let mut policy = t
                .spec
                .delivery_policy()
                .map_err(|e| TriggerProblem::InvalidSpec(e.to_string()))?;
            let own_max = t
                .spec
                .retry
                .as_ref()
                .is_some_and(|r| r.max_backoff.is_some());
            if let (false, Some(max)) = (own_max, defaults.max_backoff) {
                policy.max_backoff = max;
                policy.initial_backoff = policy.initial_backoff.min(max);
            }
            let ordering = match t.annotations().get(ORDERING_ANNOTATION) {
                Some(v) => v.parse().map_err(|e: String| {
                    TriggerProblem::InvalidSpec(format!("annotation {ORDERING_ANNOTATION}: {e}"))
                })?,
                None => default_ordering,
            };
            let selector = FunctionSelector::new(&t.spec.function_selector)
                .map_err(|e| TriggerProblem::InvalidSelector(e.to_string()))?;
            Ok((policy, ordering, selector))
        })();
        let (policy, ordering, selector) = match spec_problem {
            Ok(v) => v,
            Err(p) => {
                tp.problem = Some(p);
                out.triggers.push(tp);
                continue;
            }
        };
        let dead_letter_topic = t
            .spec
            .dead_letter_topic
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let mut selected: Vec<&Function> = functions
            .iter()
            .filter(|f| {
                f.metadata.deletion_timestamp.is_none()
                    && f.namespace().as_deref() == Some(namespace.as_str())
                    && selector.matches(f.labels())
            })
            .collect();
        selected.sort_by_key(|f| f.name_any());
        if selected.is_empty() {
            tp.problem = Some(TriggerProblem::NoFunctionsSelected(format!(
                "no Function in namespace {namespace} matches {}",
                selector
            )));
        }
        for f in selected {
            let fname = f.name_any();
            let group = consumer_group_name(&namespace, &name, &fname, &t.spec.topic);
            tp.functions.push(fname.clone());
            tp.groups.push(group.clone());
            out.consumers.insert(
                group.clone(),
                ConsumerSpec {
                    group,
                    namespace: namespace.clone(),
                    trigger: name.clone(),
                    trigger_uid: t.metadata.uid.clone(),
                    function: fname,
                    topic: t.spec.topic.clone(),
                    dead_letter_topic: dead_letter_topic.clone(),
                    policy,
                    ordering,
                    target: FunctionTarget::for_function(f, &namespace),
                },
            );
        }
        out.triggers.push(tp);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn function(
        ns: &str,
        name: &str,
        labels: serde_json::Value,
        extra: serde_json::Value,
    ) -> Function {
        let mut spec = json!({"runtime": "python3.11", "handler": "h.f", "function": "x"});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": spec,
        }))
        .unwrap()
    }

    fn trigger(ns: &str, name: &str, spec: serde_json::Value) -> KafkaTrigger {
        serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
            "metadata": {"name": name, "namespace": ns, "generation": 3},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn one_consumer_per_selected_function_with_kubeless_group_names() {
        let fns = vec![
            function(
                "default",
                "b",
                json!({"app": "orders"}),
                json!({"timeout": "7"}),
            ),
            function("default", "a", json!({"app": "orders"}), json!({})),
            function("default", "c", json!({"app": "other"}), json!({})),
            function("other-ns", "d", json!({"app": "orders"}), json!({})),
        ];
        let t = trigger(
            "default",
            "kt",
            json!({"topic": "orders", "functionSelector": {"matchLabels": {"app": "orders"}},
                   "deadLetterTopic": "orders-dlq", "retry": {"maxAttempts": 3}}),
        );
        let p = plan(
            &[t],
            &fns,
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        let groups: Vec<&str> = p.consumers.keys().map(String::as_str).collect();
        assert_eq!(groups, vec!["default_kt_a_orders", "default_kt_b_orders"]);
        let b = &p.consumers["default_kt_b_orders"];
        assert_eq!(b.target.name, "b");
        assert_eq!(b.target.timeout, std::time::Duration::from_secs(7));
        assert_eq!(b.target.port, 8080);
        assert_eq!(b.target.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(b.dead_letter_topic.as_deref(), Some("orders-dlq"));
        assert_eq!(b.policy.max_attempts, 3);
        assert_eq!(b.ordering, Ordering::Partition);
        let a = &p.consumers["default_kt_a_orders"];
        assert_eq!(a.target.timeout, std::time::Duration::from_secs(180));
        assert_eq!(p.triggers.len(), 1);
        assert_eq!(p.triggers[0].functions, vec!["a", "b"]);
        assert_eq!(p.triggers[0].generation, Some(3));
        assert_eq!(p.triggers[0].problem, None);
    }

    #[test]
    fn service_port_and_name_come_from_the_function() {
        let fns = vec![function(
            "default",
            "f",
            json!({"app": "x"}),
            json!({"service": {"ports": [{"name": "web", "port": 9000, "targetPort": 9000}]}}),
        )];
        let t = trigger(
            "default",
            "kt",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}}),
        );
        let p = plan(
            &[t],
            &fns,
            &Defaults {
                ordering: Ordering::Key,
                max_backoff: None,
            },
        );
        let c = &p.consumers["default_kt_f_t"];
        assert_eq!(c.target.port, 9000);
        assert_eq!(c.target.port_name.as_deref(), Some("web"));
        assert_eq!(c.ordering, Ordering::Key);
        assert_eq!(c.dead_letter_topic, None);
    }

    #[test]
    fn two_triggers_selecting_one_function_get_separate_groups() {
        let fns = vec![function("ns", "f", json!({"app": "x"}), json!({}))];
        let spec = json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}});
        let p = plan(
            &[
                trigger("ns", "one", spec.clone()),
                trigger("ns", "two", spec),
            ],
            &fns,
            &Defaults::default(),
        );
        assert_eq!(
            p.consumers.keys().collect::<Vec<_>>(),
            vec!["ns_one_f_t", "ns_two_f_t"]
        );
    }

    #[test]
    fn no_match_invalid_selector_and_invalid_spec_are_reported() {
        let fns = vec![function("ns", "f", json!({"app": "x"}), json!({}))];
        let none = trigger(
            "ns",
            "none",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "y"}}}),
        );
        let bad_sel = trigger(
            "ns",
            "badsel",
            json!({"topic": "t", "functionSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}}),
        );
        let bad_retry = trigger(
            "ns",
            "badretry",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}, "retry": {"maxAttempts": 0}}),
        );
        let empty_topic = trigger(
            "ns",
            "notopic",
            json!({"topic": " ", "functionSelector": {}}),
        );
        let p = plan(
            &[none, bad_sel, bad_retry, empty_topic],
            &fns,
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        assert!(p.consumers.is_empty());
        let problems: Vec<_> = p
            .triggers
            .iter()
            .map(|t| t.problem.clone().unwrap())
            .collect();
        assert!(
            matches!(&problems[0], TriggerProblem::NoFunctionsSelected(m) if m.contains("app=y"))
        );
        assert!(matches!(&problems[1], TriggerProblem::InvalidSelector(m) if m.contains("Near")));
        assert!(
            matches!(&problems[2], TriggerProblem::InvalidSpec(m) if m.contains("maxAttempts"))
        );
        assert!(matches!(&problems[3], TriggerProblem::InvalidSpec(m) if m.contains("topic")));
    }

    #[test]
    fn backoff_interval_caps_triggers_without_their_own_max() {
        let fns = vec![function("ns", "f", json!({"app": "x"}), json!({}))];
        let d = Defaults {
            ordering: Ordering::Partition,
            max_backoff: Some(std::time::Duration::from_millis(500)),
        };
        let plain = trigger(
            "ns",
            "a",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}}),
        );
        let own = trigger(
            "ns",
            "b",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}, "retry": {"maxBackoff": "10s"}}),
        );
        let p = plan(&[plain, own], &fns, &d);
        let a = &p.consumers["ns_a_f_t"].policy;
        assert_eq!(a.max_backoff, std::time::Duration::from_millis(500));
        assert_eq!(a.initial_backoff, std::time::Duration::from_millis(500));
        let b = &p.consumers["ns_b_f_t"].policy;
        assert_eq!(b.max_backoff, std::time::Duration::from_secs(10));
        assert_eq!(b.initial_backoff, std::time::Duration::from_secs(1));
    }

    #[test]
    fn ordering_annotation_overrides_the_default() {
        let fns = vec![function("ns", "f", json!({"app": "x"}), json!({}))];
        let mut t = trigger(
            "ns",
            "kt",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}}),
        );
        t.metadata.annotations =
            Some([(ORDERING_ANNOTATION.to_string(), "none".to_string())].into());
        let p = plan(
            std::slice::from_ref(&t),
            &fns,
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        assert_eq!(p.consumers["ns_kt_f_t"].ordering, Ordering::None);
        t.metadata.annotations =
            Some([(ORDERING_ANNOTATION.to_string(), "random".to_string())].into());
        let p = plan(
            &[t],
            &fns,
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        assert!(p.consumers.is_empty());
        assert!(
            matches!(&p.triggers[0].problem, Some(TriggerProblem::InvalidSpec(m)) if m.contains("random"))
        );
    }

    #[test]
    fn deleted_objects_are_ignored_and_label_changes_change_the_plan() {
        let mut f = function("ns", "f", json!({"app": "x"}), json!({}));
        let t = trigger(
            "ns",
            "kt",
            json!({"topic": "t", "functionSelector": {"matchLabels": {"app": "x"}}}),
        );
        let before = plan(
            std::slice::from_ref(&t),
            std::slice::from_ref(&f),
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        assert_eq!(before.consumers.len(), 1);
        // relabel: the function leaves the selector
        f.metadata.labels = Some([("app".to_string(), "y".to_string())].into());
        assert!(
            plan(
                std::slice::from_ref(&t),
                std::slice::from_ref(&f),
                &Defaults {
                    ordering: Ordering::Partition,
                    max_backoff: None
                }
            )
            .consumers
            .is_empty()
        );
        // deleting function
        let mut g = function("ns", "f", json!({"app": "x"}), json!({}));
        g.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        assert!(
            plan(
                std::slice::from_ref(&t),
                &[g],
                &Defaults {
                    ordering: Ordering::Partition,
                    max_backoff: None
                }
            )
            .consumers
            .is_empty()
        );
        // a timeout change changes the spec (the supervisor restarts that consumer)
        let h = function("ns", "f", json!({"app": "x"}), json!({"timeout": "9"}));
        let after = plan(
            &[t],
            &[h],
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        assert_ne!(after.consumers["ns_kt_f_t"], before.consumers["ns_kt_f_t"]);
    }
}
