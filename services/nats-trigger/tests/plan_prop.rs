//! Property tests of the pure planner: for any mix of NATSTriggers and Functions (bad subjects,
//! selectors with unknown operators, odd retry policies, JetStream settings and in-flight bounds,
//! objects being deleted) `plan` never panics, plans every live trigger once, gives a trigger
//! with a problem no subscription, subscribes only live functions of the trigger's namespace,
//! and does not depend on the order its inputs come in.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kubeless_api::{Function, NatsTrigger};
use nats_trigger::plan::plan;
use proptest::prelude::*;
use serde_json::{Value, json};

const NAMESPACES: [&str; 2] = ["default", "other"];

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        prop::sample::select(vec!["app", "tier", "team"]).prop_map(str::to_string),
        prop::sample::select(vec!["a", "b", ""]).prop_map(str::to_string),
        0..3,
    )
}

fn selector() -> impl Strategy<Value = Value> {
    let expression = (
        prop::sample::select(vec!["app", "tier"]),
        prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist", "Bogus"]),
        proptest::collection::vec(prop::sample::select(vec!["a", "b"]), 0..3),
    )
        .prop_map(|(k, op, vals)| json!({"key": k, "operator": op, "values": vals}));
    (labels(), proptest::collection::vec(expression, 0..2))
        .prop_map(|(m, e)| json!({"matchLabels": m, "matchExpressions": e}))
}

fn function() -> impl Strategy<Value = Function> {
    (
        0..5usize,
        prop::sample::select(NAMESPACES.to_vec()),
        labels(),
        any::<bool>(),
    )
        .prop_map(|(i, ns, labels, deleting)| {
            let mut meta = json!({"name": format!("f{i}"), "namespace": ns, "labels": labels});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                meta["finalizers"] = json!(["x"]);
            }
            serde_json::from_value(
                json!({"apiVersion": "kubeless.io/v1beta1", "kind": "Function",
                "metadata": meta,
                "spec": {"runtime": "python3.11", "handler": "h.f", "function": "x"}}),
            )
            .unwrap()
        })
}

fn trigger() -> impl Strategy<Value = NatsTrigger> {
    let retry = (
        0..20u32,
        prop::sample::select(vec!["1s", "100ms", "0s", "bad", ""]),
        -2.0..5.0f64,
    )
        .prop_map(|(n, ib, m)| json!({"maxAttempts": n, "initialBackoff": ib, "multiplier": m}));
    let jet_stream = (
        any::<bool>(),
        prop::sample::select(vec!["ORDERS", "", "bad stream"]),
        prop::sample::select(vec!["30s", "0s", "soon"]),
    )
        .prop_map(|(on, stream, ack)| json!({"enabled": on, "stream": stream, "ackWait": ack}));
    (
        0..4usize,
        prop::sample::select(NAMESPACES.to_vec()),
        prop::sample::select(vec!["orders.*", "", " ", "a.>", "bad subject"]),
        selector(),
        proptest::option::of(retry),
        proptest::option::of(jet_stream),
        proptest::option::of(0..5u32),
        any::<bool>(),
    )
        .prop_map(|(i, ns, topic, sel, retry, js, in_flight, deleting)| {
            let mut meta = json!({"name": format!("t{i}"), "namespace": ns});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                meta["finalizers"] = json!(["x"]);
            }
            let mut spec = json!({"topic": topic, "functionSelector": sel});
            if let Some(r) = retry {
                spec["retry"] = r;
            }
            if let Some(j) = js {
                spec["jetStream"] = j;
            }
            if let Some(n) = in_flight {
                spec["maxInFlight"] = json!(n);
            }
            serde_json::from_value(
                json!({"apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
                "metadata": meta, "spec": spec}),
            )
            .unwrap()
        })
}

/// Inputs without two objects of the same namespace and name (the API server's guarantee).
fn unique<T: kube::ResourceExt>(items: Vec<T>) -> Vec<Arc<T>> {
    let mut seen = BTreeSet::new();
    items
        .into_iter()
        .filter(|o| seen.insert((o.namespace(), o.name_any())))
        .map(Arc::new)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plans_are_sound_and_order_independent(
        triggers in proptest::collection::vec(trigger(), 0..6),
        functions in proptest::collection::vec(function(), 0..8),
    ) {
        use kube::ResourceExt;
        let triggers = unique(triggers);
        let functions = unique(functions);
        let p = plan(&triggers, &functions);

        let live = triggers.iter().filter(|t| t.metadata.deletion_timestamp.is_none()).count();
        prop_assert_eq!(p.triggers.len(), live);
        let live_functions: BTreeSet<(String, String)> = functions
            .iter()
            .filter(|f| f.metadata.deletion_timestamp.is_none())
            .map(|f| (f.namespace().unwrap_or_default(), f.name_any()))
            .collect();
        let mut subscriptions = 0;
        for ((ns, name), tp) in &p.triggers {
            if tp.problem.is_some() {
                prop_assert!(tp.functions.is_empty(), "{}/{} has a problem and functions", ns, name);
            }
            for f in &tp.functions {
                prop_assert!(live_functions.contains(&(ns.clone(), f.clone())),
                    "{}/{} selected {} which is not a live function of its namespace", ns, name, f);
            }
            subscriptions += tp.functions.len();
        }
        prop_assert_eq!(p.units.len(), subscriptions);
        for (key, sub) in &p.units {
            prop_assert!(sub.max_in_flight >= 1, "{}: maxInFlight {}", key, sub.max_in_flight);
            prop_assert!(!sub.topic.trim().is_empty(), "{}: empty subject planned", key);
            let tp = &p.triggers[&(key.namespace.clone(), key.trigger.clone())];
            prop_assert!(tp.functions.contains(&key.function));
        }

        // The same objects in the other order give the same plan.
        let mut rt = triggers.clone();
        rt.reverse();
        let mut rf = functions.clone();
        rf.reverse();
        let q = plan(&rt, &rf);
        prop_assert_eq!(&p.triggers, &q.triggers);
        prop_assert_eq!(&p.units, &q.units);
    }
}
