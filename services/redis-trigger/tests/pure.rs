//! The pure parts of the redis-trigger: the plan (which readers, with which consumer group and
//! settings, or why none) and how an entry becomes an event and a dead letter.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kubeless_api::conditions::reasons;
use kubeless_api::{Function, RedisTrigger};
use kubeless_trigger::Plan;
use redis::Value;
use redis::streams::StreamId;
use redis_trigger::reader::{EVENT_NAMESPACE, body, dlq_fields, event};
use redis_trigger::{ReaderConfig, plan_trigger};
use serde_json::json;

fn function(name: &str, ns: &str, labels: serde_json::Value) -> Arc<Function> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"runtime": "python3.11", "handler": "h.f", "function": "x", "timeout": "7"}
        }))
        .unwrap(),
    )
}

fn trigger(spec: serde_json::Value) -> Arc<RedisTrigger> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "RedisTrigger",
            "metadata": {"name": "orders", "namespace": "shop", "generation": 2, "uid": "u-1"},
            "spec": spec
        }))
        .unwrap(),
    )
}

fn functions() -> Vec<Arc<Function>> {
    vec![
        function("a", "shop", json!({"stream": "orders"})),
        function("b", "shop", json!({"stream": "orders", "tier": "batch"})),
        function("c", "shop", json!({"stream": "other"})),
        function("d", "elsewhere", json!({"stream": "orders"})),
    ]
}

fn plan(spec: serde_json::Value) -> Plan<String, ReaderConfig> {
    Plan::build(&[trigger(spec)], |t, ns, name| {
        plan_trigger(t, ns, name, &functions())
    })
}

#[test]
fn one_reader_per_selected_function_in_the_trigger_namespace() {
    let p = plan(json!({
        "url": "redis://redis:6379/2", "stream": "orders",
        "functionSelector": {"matchLabels": {"stream": "orders"}},
        "retry": {"maxAttempts": 3, "maxBackoff": "2s"},
        "deadLetterStream": "orders-dead"
    }));
    let keys: Vec<&String> = p.units.keys().collect();
    assert_eq!(keys, ["shop/orders->a", "shop/orders->b"]);
    let a = p.units.values().next().unwrap();
    assert_eq!(
        a.group, "shop_orders_a",
        "default group: <ns>_<trigger>_<function>"
    );
    assert_eq!(a.stream, "orders");
    assert_eq!(a.to.dead_letter.as_deref(), Some("orders-dead"));
    assert_eq!(a.to.policy.max_attempts, 3);
    assert_eq!(a.to.target.timeout, Duration::from_secs(7));
    // Idle longer than every attempt with its backoff, plus a minute.
    assert_eq!(a.claim_idle, Duration::from_secs(3 * (7 + 2) + 60));
    assert_eq!(a.to.trigger.uid.as_deref(), Some("u-1"));
    assert_eq!(a.to.trigger.kind.as_deref(), Some("RedisTrigger"));
    let t = &p.triggers[&("shop".to_string(), "orders".to_string())];
    assert_eq!(t.functions, ["a", "b"]);
    assert_eq!(t.generation, Some(2));
    assert!(t.problem.is_none());
}

#[test]
fn a_consumer_group_is_a_prefix_per_function() {
    let p = plan(json!({
        "url": "redis://redis:6379", "stream": "orders", "consumerGroup": "billing",
        "functionSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}
    }));
    let groups: Vec<&str> = p.units.values().map(|c| c.group.as_str()).collect();
    assert_eq!(groups, ["billing_b"]);
    assert_eq!(p.units.values().next().unwrap().to.dead_letter, None);
}

#[test]
fn bad_specs_and_empty_selections_are_problems() {
    let problem = |spec| {
        let p = plan(spec);
        assert!(p.units.is_empty());
        let t = p.triggers.into_values().next().unwrap();
        t.problem.unwrap()
    };
    let sel = json!({"matchLabels": {"stream": "orders"}});
    let p = problem(json!({"url": "http://x", "stream": "s", "functionSelector": sel}));
    assert_eq!(p.reason, reasons::INVALID_SPEC);
    assert!(p.message.contains("url"), "{}", p.message);
    let p = problem(json!({"url": "redis://x", "stream": " ", "functionSelector": sel}));
    assert_eq!(p.reason, reasons::INVALID_SPEC);
    let p = problem(
        json!({"url": "redis://x", "stream": "s", "functionSelector": sel,
                           "retry": {"initialBackoff": "soon"}}),
    );
    assert_eq!(p.reason, reasons::INVALID_SPEC);
    let p = problem(
        json!({"url": "redis://x", "stream": "s", "functionSelector":
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}}),
    );
    assert_eq!(p.reason, reasons::INVALID_SELECTOR);
    let p = problem(json!({"url": "redis://x", "stream": "s",
                           "functionSelector": {"matchLabels": {"stream": "none"}}}));
    assert_eq!(p.reason, reasons::NO_FUNCTIONS_SELECTED);
}

fn entry(fields: &[(&str, &str)]) -> StreamId {
    StreamId {
        id: "1700000000000-3".into(),
        map: fields
            .iter()
            .map(|(k, v)| (k.to_string(), Value::BulkString(v.as_bytes().to_vec())))
            .collect::<HashMap<_, _>>(),
        ..StreamId::default()
    }
}

#[test]
fn the_body_is_the_data_field_else_every_field_as_json() {
    assert_eq!(body(&entry(&[("data", "hi"), ("other", "x")])), b"hi");
    let all: serde_json::Value =
        serde_json::from_slice(&body(&entry(&[("user", "ann"), ("n", "2")]))).unwrap();
    assert_eq!(all, json!({"n": "2", "user": "ann"}));
    let ev = event(&entry(&[("data", "{\"a\":1}")]));
    assert_eq!(ev.event_id.as_deref(), Some("1700000000000-3"));
    assert_eq!(ev.event_namespace, EVENT_NAMESPACE);
    assert_eq!(ev.body.as_deref(), Some(&b"{\"a\":1}"[..]));
}

#[test]
fn a_dead_letter_keeps_the_fields_and_says_what_failed_where() {
    let fields = dlq_fields(
        &entry(&[("data", "x"), ("a", "1")]),
        "orders",
        "shop/a",
        "status 500",
    );
    let text: Vec<(String, String)> = fields
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
        .collect();
    let want = [
        ("a", "1"),
        ("data", "x"),
        ("error", "status 500"),
        ("function", "shop/a"),
        ("source-stream", "orders"),
        ("source-id", "1700000000000-3"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(text, want);
}
