//! The pure reconciler: KafkaTriggers + Functions -> the consumers that should run (one per
//! (trigger, selected function), keyed by Kubeless's consumer-group name) and what each
//! trigger's status should say. No I/O here, so every rule is unit-tested.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use kube::ResourceExt;
use kubeless_api::conditions::reasons;
use kubeless_api::labels::consumer_group_name;
use kubeless_api::{DeliveryPolicy, Function, KafkaTrigger};
use kubeless_invoke::FunctionTarget;
use kubeless_trigger::{FunctionSelector, PlannedUnit, Problem};

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
    /// The trigger as Events name it (built once here, not per record).
    pub regarding: k8s_openapi::api::core::v1::ObjectReference,
    pub function: String,
    pub topic: String,
    pub dead_letter_topic: Option<String>,
    pub policy: DeliveryPolicy,
    pub ordering: Ordering,
    pub target: FunctionTarget,
}

/// The desired consumers, keyed by consumer group, and what each trigger's status should say.
pub type Plan = kubeless_trigger::Plan<String, ConsumerSpec>;

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
pub fn plan(
    triggers: &[Arc<KafkaTrigger>],
    functions: &[Arc<Function>],
    defaults: &Defaults,
) -> Plan {
    Plan::build(triggers, |t, namespace, name| {
        plan_trigger(t, namespace, name, functions, defaults)
    })
}

fn plan_trigger(
    t: &KafkaTrigger,
    namespace: &str,
    name: &str,
    functions: &[Arc<Function>],
    defaults: &Defaults,
) -> Result<Vec<PlannedUnit<String, ConsumerSpec>>, Problem> {
    if t.spec.topic.trim().is_empty() {
        return Err(Problem::invalid_spec("topic is empty"));
    }
    let mut policy = t
        .spec
        .delivery_policy()
        .map_err(|e| Problem::invalid_spec(e.to_string()))?;
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
            Problem::invalid_spec(format!("annotation {ORDERING_ANNOTATION}: {e}"))
        })?,
        None => defaults.ordering,
    };
    let selector = FunctionSelector::for_trigger(&t.spec.function_selector)?;
    let dead_letter_topic = t
        .spec
        .dead_letter_topic
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let units: Vec<PlannedUnit<String, ConsumerSpec>> = selector
        .select(namespace, functions)
        .map(|f| {
            let function = f.name_any();
            let group = consumer_group_name(namespace, name, &function, &t.spec.topic);
            PlannedUnit {
                key: group.clone(),
                function: function.clone(),
                config: ConsumerSpec {
                    group,
                    namespace: namespace.to_string(),
                    trigger: name.to_string(),
                    trigger_uid: t.metadata.uid.clone(),
                    regarding: kubeless_service::object_reference::<KafkaTrigger>(
                        namespace,
                        name,
                        t.metadata.uid.as_deref(),
                    ),
                    function,
                    topic: t.spec.topic.clone(),
                    dead_letter_topic: dead_letter_topic.clone(),
                    policy,
                    ordering,
                    target: FunctionTarget::for_function(f, namespace),
                },
            }
        })
        .collect();
    if units.is_empty() {
        return Err(Problem {
            reason: reasons::NO_FUNCTIONS_SELECTED,
            message: format!("no Function in namespace {namespace} matches {selector}"),
        });
    }
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(triggers: &[KafkaTrigger], functions: &[Function], d: &Defaults) -> Plan {
        let t: Vec<_> = triggers.iter().cloned().map(Arc::new).collect();
        let f: Vec<_> = functions.iter().cloned().map(Arc::new).collect();
        super::plan(&t, &f, d)
    }

    fn problem(p: &Plan, name: &str) -> Problem {
        p.triggers[&("ns".to_string(), name.to_string())]
            .problem
            .clone()
            .unwrap()
    }

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
        let groups: Vec<&str> = p.units.keys().map(String::as_str).collect();
        assert_eq!(groups, vec!["default_kt_a_orders", "default_kt_b_orders"]);
        let b = &p.units["default_kt_b_orders"];
        assert_eq!(b.target.name, "b");
        assert_eq!(b.target.timeout, std::time::Duration::from_secs(7));
        assert_eq!(b.target.port, 8080);
        assert_eq!(b.target.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(b.dead_letter_topic.as_deref(), Some("orders-dlq"));
        assert_eq!(b.policy.max_attempts, 3);
        assert_eq!(b.ordering, Ordering::Partition);
        let a = &p.units["default_kt_a_orders"];
        assert_eq!(a.target.timeout, std::time::Duration::from_secs(180));
        assert_eq!(p.triggers.len(), 1);
        let tp = &p.triggers[&("default".to_string(), "kt".to_string())];
        assert_eq!(tp.functions, vec!["a", "b"]);
        assert_eq!(tp.generation, Some(3));
        assert_eq!(tp.problem, None);
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
        let c = &p.units["default_kt_f_t"];
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
            p.units.keys().collect::<Vec<_>>(),
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
        assert!(p.units.is_empty());
        let none = problem(&p, "none");
        assert_eq!(none.reason, reasons::NO_FUNCTIONS_SELECTED);
        assert!(none.message.contains("app=y"), "{none:?}");
        let bad_sel = problem(&p, "badsel");
        assert_eq!(bad_sel.reason, reasons::INVALID_SELECTOR);
        assert!(bad_sel.message.contains("Near"));
        let bad_retry = problem(&p, "badretry");
        assert_eq!(bad_retry.reason, reasons::INVALID_SPEC);
        assert!(bad_retry.message.contains("maxAttempts"));
        let no_topic = problem(&p, "notopic");
        assert_eq!(no_topic.reason, reasons::INVALID_SPEC);
        assert!(no_topic.message.contains("topic"));
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
        let a = &p.units["ns_a_f_t"].policy;
        assert_eq!(a.max_backoff, std::time::Duration::from_millis(500));
        assert_eq!(a.initial_backoff, std::time::Duration::from_millis(500));
        let b = &p.units["ns_b_f_t"].policy;
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
        assert_eq!(p.units["ns_kt_f_t"].ordering, Ordering::None);
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
        assert!(p.units.is_empty());
        let p = problem(&p, "kt");
        assert_eq!(p.reason, reasons::INVALID_SPEC);
        assert!(p.message.contains("random"));
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
        assert_eq!(before.units.len(), 1);
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
            .units
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
            .units
            .is_empty()
        );
        // a timeout change changes the spec (the runtime restarts that consumer)
        let h = function("ns", "f", json!({"app": "x"}), json!({"timeout": "9"}));
        let after = plan(
            &[t],
            &[h],
            &Defaults {
                ordering: Ordering::Partition,
                max_backoff: None,
            },
        );
        assert_ne!(after.units["ns_kt_f_t"], before.units["ns_kt_f_t"]);
    }
}
