//! The desired state, as a pure function: NATSTriggers + Functions -> the set of
//! (trigger, function) subscriptions with their configuration, and what each trigger's status
//! should say.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kubeless_api::labels::consumer_group_name;
use kubeless_api::{DeliveryPolicy, Function, NatsTrigger};
use kubeless_invoke::FunctionTarget;
use kubeless_trigger::{FunctionSelector, PlannedUnit, Problem};

/// The desired subscriptions and what each trigger's status should say.
pub type Plan = kubeless_trigger::Plan<SubscriptionKey, SubscriptionConfig>;

/// Trigger annotation that lets the service create a missing JetStream stream (there is no
/// spec field for it, and creating streams silently would hide typos in subjects).
pub const CREATE_STREAM_ANNOTATION: &str = "kubeless.io/jetstream-create-stream";

/// Added to the function timeout to get the minimum ack wait, so the server does not redeliver
/// a message while its call may still be running.
pub const ACK_WAIT_MARGIN: Duration = Duration::from_secs(2);

/// Longest durable/stream name we produce (JetStream names become file names on the server).
const MAX_NAME_LEN: usize = 200;

/// One subscription: a (trigger, function) pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubscriptionKey {
    pub namespace: String,
    pub trigger: String,
    pub function: String,
}

impl std::fmt::Display for SubscriptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}->{}", self.namespace, self.trigger, self.function)
    }
}

/// How a subscription receives messages.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Core NATS queue subscription (Kubeless's behaviour): at most once.
    Core,
    /// Durable JetStream pull consumer: at least once.
    JetStream(JetStreamConfig),
}

/// JetStream settings of one subscription.
#[derive(Clone, Debug, PartialEq)]
pub struct JetStreamConfig {
    /// Stream named in the trigger; `None`: looked up by subject.
    pub stream: Option<String>,
    /// Name of the stream to create when none holds the subject and creation is allowed.
    pub create_stream: Option<String>,
    /// Durable consumer name.
    pub durable: String,
    pub ack_wait: Duration,
    /// Server-side delivery limit: attempts + 1, so a process that dies during the last attempt
    /// still sees the message once more and dead-letters it.
    pub max_deliver: i64,
}

/// Everything a subscription task needs.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriptionConfig {
    /// Subject (wildcards allowed).
    pub topic: String,
    /// Kubeless's queue group `<ns>_<trigger>_<fn>_<topic>`.
    pub queue_group: String,
    pub target: FunctionTarget,
    pub policy: DeliveryPolicy,
    pub max_in_flight: u32,
    pub dead_letter_subject: Option<String>,
    pub mode: Mode,
    /// The trigger's uid, so its Events name it exactly (`kubectl describe` matches on it).
    pub trigger_uid: Option<String>,
}

/// Computes the desired subscriptions. Functions and triggers being deleted are left out.
pub fn plan(triggers: &[Arc<NatsTrigger>], functions: &[Arc<Function>]) -> Plan {
    Plan::build(triggers, |t, namespace, name| {
        plan_trigger(t, namespace, name, functions)
    })
}

fn plan_trigger(
    t: &NatsTrigger,
    namespace: &str,
    name: &str,
    functions: &[Arc<Function>],
) -> Result<Vec<PlannedUnit<SubscriptionKey, SubscriptionConfig>>, Problem> {
    let invalid = Problem::invalid_spec;
    let spec = &t.spec;
    let topic = spec.topic.trim();
    if topic.is_empty() || topic.contains(char::is_whitespace) {
        return Err(invalid(format!(
            "topic {:?} is not a NATS subject",
            spec.topic
        )));
    }
    let policy = spec.delivery_policy().map_err(|e| invalid(e.to_string()))?;
    let js_ack_wait = match &spec.jet_stream {
        Some(js) if js.is_enabled() => {
            Some(js.ack_wait_duration().map_err(|e| invalid(e.to_string()))?)
        }
        _ => None,
    };
    let selector = FunctionSelector::for_trigger(&spec.function_selector)?;
    let dead_letter_subject = spec
        .dead_letter_subject
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if let Some(dl) = &dead_letter_subject
        && (dl.contains(['*', '>']) || dl.contains(char::is_whitespace))
    {
        return Err(invalid(format!(
            "deadLetterSubject {dl:?} must be a subject without wildcards"
        )));
    }
    let create_stream = t
        .annotations()
        .get(CREATE_STREAM_ANNOTATION)
        .is_some_and(|v| v == "true");

    let mut subs = Vec::new();
    for f in selector.select(namespace, functions) {
        let function = f.name_any();
        let target = FunctionTarget::for_function(f, namespace);
        let queue_group = consumer_group_name(namespace, name, &function, &spec.topic);
        let mode = match (&spec.jet_stream, js_ack_wait) {
            (Some(js), Some(ack_wait)) => {
                let stream = js
                    .stream
                    .as_deref()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string);
                let durable = match js.durable.as_deref().map(str::trim) {
                    Some(prefix) if !prefix.is_empty() => {
                        jetstream_name(&format!("{prefix}_{function}"))
                    }
                    _ => jetstream_name(&queue_group),
                };
                Mode::JetStream(JetStreamConfig {
                    create_stream: create_stream.then(|| {
                        stream
                            .clone()
                            .unwrap_or_else(|| default_stream_name(namespace, name))
                    }),
                    stream,
                    durable,
                    ack_wait: ack_wait.max(target.timeout + ACK_WAIT_MARGIN),
                    max_deliver: i64::from(policy.max_attempts) + 1,
                })
            }
            _ => Mode::Core,
        };
        subs.push(PlannedUnit {
            key: SubscriptionKey {
                namespace: namespace.to_string(),
                trigger: name.to_string(),
                function: function.clone(),
            },
            function: function.clone(),
            config: SubscriptionConfig {
                topic: spec.topic.clone(),
                queue_group,
                target,
                policy,
                max_in_flight: spec.max_in_flight(),
                dead_letter_subject: dead_letter_subject.clone(),
                mode,
                trigger_uid: t.metadata.uid.clone(),
            },
        });
    }
    Ok(subs)
}

/// The stream name used when a trigger lets us create its stream and names none:
/// `KUBELESS_<ns>_<trigger>`, sanitised.
pub fn default_stream_name(namespace: &str, trigger: &str) -> String {
    jetstream_name(&format!("KUBELESS_{namespace}_{trigger}"))
}

/// A valid JetStream stream/consumer name: `.`, `*`, `>`, path separators, whitespace and
/// control characters become `_`; names longer than 200 bytes are cut and get a hash suffix so
/// distinct inputs stay distinct.
pub fn jetstream_name(raw: &str) -> String {
    let clean: String = raw
        .chars()
        .map(|c| {
            if matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if clean.len() <= MAX_NAME_LEN {
        return clean;
    }
    let mut cut = MAX_NAME_LEN - 17;
    while !clean.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}_{:016x}", &clean[..cut], fnv1a(raw.as_bytes()))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::NatsTriggerSpec;
    use kubeless_api::conditions::reasons;
    use serde_json::json;

    fn function(
        ns: &str,
        name: &str,
        labels: serde_json::Value,
        spec: serde_json::Value,
    ) -> Arc<Function> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    fn trigger(ns: &str, name: &str, spec: serde_json::Value) -> Arc<NatsTrigger> {
        let spec: NatsTriggerSpec = serde_json::from_value(spec).unwrap();
        let mut t = NatsTrigger::new(name, spec);
        t.metadata.namespace = Some(ns.into());
        t.metadata.generation = Some(3);
        Arc::new(t)
    }

    fn fns() -> Vec<Arc<Function>> {
        vec![
            function(
                "default",
                "a",
                json!({"app": "x", "env": "prod"}),
                json!({"timeout": "10"}),
            ),
            function("default", "b", json!({"app": "x", "env": "dev"}), json!({})),
            function("default", "c", json!({"app": "y"}), json!({})),
            function("other", "a", json!({"app": "x", "env": "prod"}), json!({})),
        ]
    }

    #[test]
    fn fans_out_to_every_selected_function_in_the_namespace() {
        let t = trigger(
            "default",
            "t",
            json!({"topic": "orders.*", "functionSelector": {"matchLabels": {"app": "x"}}}),
        );
        let p = plan(&[t], &fns());
        let keys: Vec<String> = p.units.keys().map(|k| k.to_string()).collect();
        assert_eq!(keys, vec!["default/t->a", "default/t->b"]);
        let a = &p.units[&SubscriptionKey {
            namespace: "default".into(),
            trigger: "t".into(),
            function: "a".into(),
        }];
        assert_eq!(a.queue_group, "default_t_a_orders.*");
        assert_eq!(a.topic, "orders.*");
        assert_eq!(a.mode, Mode::Core);
        assert_eq!(a.target.timeout, Duration::from_secs(10));
        assert_eq!(a.target.port, 8080);
        assert_eq!(a.target.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(a.max_in_flight, 1);
        assert_eq!(a.policy.max_attempts, 5);
        let tp = &p.triggers[&("default".to_string(), "t".to_string())];
        assert_eq!(tp.functions, vec!["a", "b"]);
        assert_eq!(tp.problem, None);
        assert_eq!(tp.generation, Some(3));
    }

    #[test]
    fn expressions_select_and_no_match_is_reported() {
        let t = trigger(
            "default",
            "t",
            json!({"topic": "x", "functionSelector": {
            "matchExpressions": [
                {"key": "app", "operator": "In", "values": ["x", "y"]},
                {"key": "env", "operator": "NotIn", "values": ["dev"]}]}}),
        );
        let none = trigger(
            "default",
            "none",
            json!({"topic": "x", "functionSelector": {
            "matchExpressions": [{"key": "nope", "operator": "Exists"}]}}),
        );
        let absent = trigger(
            "default",
            "absent",
            json!({"topic": "x", "functionSelector": {
            "matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}}),
        );
        let p = plan(&[t, none, absent], &fns());
        let get = |n: &str| p.triggers[&("default".to_string(), n.to_string())].clone();
        // c has no env label: NotIn holds for it.
        assert_eq!(get("t").functions, vec!["a", "c"]);
        assert_eq!(get("absent").functions, vec!["c"]);
        let none = get("none");
        assert!(none.functions.is_empty());
        assert_eq!(none.problem.unwrap().reason, reasons::NO_FUNCTIONS_SELECTED);
        assert_eq!(p.units.len(), 3);
    }

    #[test]
    fn invalid_specs_get_no_subscriptions() {
        let bad_sel = trigger(
            "default",
            "s",
            json!({"topic": "x", "functionSelector": {
            "matchExpressions": [{"key": "app", "operator": "Has"}]}}),
        );
        let bad_retry = trigger(
            "default",
            "r",
            json!({"topic": "x", "functionSelector": {},
            "retry": {"maxAttempts": 0}}),
        );
        let bad_ack = trigger(
            "default",
            "k",
            json!({"topic": "x", "functionSelector": {},
            "jetStream": {"enabled": true, "ackWait": "soon"}}),
        );
        let bad_topic = trigger(
            "default",
            "p",
            json!({"topic": " ", "functionSelector": {}}),
        );
        let bad_dl = trigger(
            "default",
            "d",
            json!({"topic": "x", "functionSelector": {},
            "deadLetterSubject": "dl.>"}),
        );
        let p = plan(&[bad_sel, bad_retry, bad_ack, bad_topic, bad_dl], &fns());
        assert!(p.units.is_empty());
        let reason = |n: &str| {
            p.triggers[&("default".to_string(), n.to_string())]
                .problem
                .clone()
                .unwrap()
                .reason
        };
        assert_eq!(reason("s"), reasons::INVALID_SELECTOR);
        for n in ["r", "k", "p", "d"] {
            assert_eq!(reason(n), reasons::INVALID_SPEC, "{n}");
        }
    }

    #[test]
    fn jetstream_mode() {
        let t = trigger(
            "default",
            "t",
            json!({"topic": "orders.>", "functionSelector": {"matchLabels": {"env": "prod"}},
            "retry": {"maxAttempts": 3}, "deadLetterSubject": " orders.dlq ",
            "jetStream": {"enabled": true, "ackWait": "5s"}, "maxInFlight": 4}),
        );
        let p = plan(&[t], &fns());
        assert_eq!(p.units.len(), 1);
        let s = p.units.values().next().unwrap();
        assert_eq!(s.dead_letter_subject.as_deref(), Some("orders.dlq"));
        assert_eq!(s.max_in_flight, 4);
        let Mode::JetStream(js) = &s.mode else {
            panic!("not jetstream")
        };
        assert_eq!(js.durable, "default_t_a_orders__");
        assert_eq!(js.stream, None);
        assert_eq!(js.create_stream, None);
        // the function's 10 s timeout + margin beats the 5 s ack wait
        assert_eq!(js.ack_wait, Duration::from_secs(12));
        assert_eq!(js.max_deliver, 4);

        let mut t = NatsTrigger::clone(&trigger(
            "default",
            "t",
            json!({"topic": "orders", "functionSelector": {"matchLabels": {"app": "y"}},
            "jetStream": {"enabled": true, "stream": "ORDERS", "durable": "my.durable", "ackWait": "1m"}}),
        ));
        t.metadata.annotations =
            Some([(CREATE_STREAM_ANNOTATION.to_string(), "true".to_string())].into());
        let p = plan(&[Arc::new(t)], &fns());
        let s = p.units.values().next().unwrap();
        let Mode::JetStream(js) = &s.mode else {
            panic!("not jetstream")
        };
        assert_eq!(js.durable, "my_durable_c");
        assert_eq!(js.stream.as_deref(), Some("ORDERS"));
        assert_eq!(js.create_stream.as_deref(), Some("ORDERS"));
        assert_eq!(js.ack_wait, Duration::from_secs(182));
        assert_eq!(js.max_deliver, 6);

        // disabled jetStream block means core
        let t = trigger(
            "default",
            "t",
            json!({"topic": "o", "functionSelector": {"matchLabels": {"app": "y"}},
            "jetStream": {"enabled": false}}),
        );
        assert_eq!(
            plan(&[t], &fns()).units.values().next().unwrap().mode,
            Mode::Core
        );
    }

    #[test]
    fn deleted_objects_are_left_out() {
        let mut f = Function::clone(&fns()[0]);
        f.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
        ));
        let t = trigger(
            "default",
            "t",
            json!({"topic": "o", "functionSelector": {"matchLabels": {"env": "prod"}}}),
        );
        let p = plan(&[t], &[Arc::new(f)]);
        assert!(p.units.is_empty());
    }

    #[test]
    fn names_are_sanitised() {
        assert_eq!(jetstream_name("ns_t_f_a.b.*.>"), "ns_t_f_a_b____");
        assert_eq!(
            default_stream_name("default", "my.trigger"),
            "KUBELESS_default_my_trigger"
        );
        let long_a = jetstream_name(&format!("{}a", "x".repeat(300)));
        let long_b = jetstream_name(&format!("{}b", "x".repeat(300)));
        assert!(long_a.len() <= 200);
        assert_ne!(long_a, long_b);
    }

    #[test]
    fn custom_service_port_is_used() {
        let f = function(
            "default",
            "p",
            json!({}),
            json!({"service": {"ports": [{"name": "web", "port": 9000, "targetPort": 9000}]}}),
        );
        let t = FunctionTarget::for_function(&f, "default");
        assert_eq!(t.port, 9000);
        assert_eq!(t.port_name.as_deref(), Some("web"));
        assert_eq!(t.timeout, Duration::from_secs(180));
    }
}
