//! Property tests of the pure planner: for any mix of KafkaTriggers and Functions (bad topics,
//! selectors with unknown operators, odd retry policies and ordering annotations, objects being
//! deleted) `plan` never panics, plans every live trigger once, gives a trigger with a problem
//! no consumer, selects only live functions of the trigger's namespace, and does not depend on
//! the order its inputs come in.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};

use kafka_trigger::plan::{Defaults, Ordering, plan};
use kubeless_api::{Function, KafkaTrigger};
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

fn trigger() -> impl Strategy<Value = KafkaTrigger> {
    let retry = (
        0..20u32,
        prop::sample::select(vec!["1s", "100ms", "0s", "bad", ""]),
        prop::sample::select(vec!["30s", "1ms", "nope"]),
        -2.0..5.0f64,
    )
        .prop_map(|(n, ib, mb, m)| {
            json!({"maxAttempts": n, "initialBackoff": ib, "maxBackoff": mb, "multiplier": m})
        });
    (
        0..4usize,
        prop::sample::select(NAMESPACES.to_vec()),
        prop::sample::select(vec!["orders", "", "  ", "a.b-c_d"]),
        selector(),
        proptest::option::of(retry),
        proptest::option::of(prop::sample::select(vec![
            "key",
            "partition",
            "none",
            "bogus",
        ])),
        any::<bool>(),
    )
        .prop_map(|(i, ns, topic, sel, retry, ordering, deleting)| {
            let mut meta = json!({"name": format!("t{i}"), "namespace": ns});
            if let Some(o) = ordering {
                meta["annotations"] = json!({kafka_trigger::plan::ORDERING_ANNOTATION: o});
            }
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                meta["finalizers"] = json!(["x"]);
            }
            let mut spec = json!({"topic": topic, "functionSelector": sel});
            if let Some(r) = retry {
                spec["retry"] = r;
            }
            serde_json::from_value(
                json!({"apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
                "metadata": meta, "spec": spec}),
            )
            .unwrap()
        })
}

/// Inputs without two objects of the same namespace and name (the API server's guarantee).
fn unique<T: kube::ResourceExt>(items: Vec<T>) -> Vec<T> {
    let mut seen = BTreeSet::new();
    items
        .into_iter()
        .filter(|o| seen.insert((o.namespace(), o.name_any())))
        .collect()
}

fn arcs<T: Clone>(v: &[T]) -> Vec<std::sync::Arc<T>> {
    v.iter().cloned().map(std::sync::Arc::new).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plans_are_sound_and_order_independent(
        triggers in proptest::collection::vec(trigger(), 0..6),
        functions in proptest::collection::vec(function(), 0..8),
        ordering in prop::sample::select(vec![Ordering::Partition, Ordering::Key, Ordering::None]),
    ) {
        use kube::ResourceExt;
        let triggers = unique(triggers);
        let functions = unique(functions);
        let defaults = Defaults { ordering, max_backoff: None };
        let p = plan(&arcs(&triggers), &arcs(&functions), &defaults);

        let live: Vec<&KafkaTrigger> =
            triggers.iter().filter(|t| t.metadata.deletion_timestamp.is_none()).collect();
        prop_assert_eq!(p.triggers.len(), live.len());
        let live_functions: BTreeSet<(String, String)> = functions
            .iter()
            .filter(|f| f.metadata.deletion_timestamp.is_none())
            .map(|f| (f.namespace().unwrap_or_default(), f.name_any()))
            .collect();
        let mut consumers = 0;
        for ((namespace, name), tp) in &p.triggers {
            prop_assert_eq!(tp.functions.len(), tp.units.len());
            if tp.problem.is_some() {
                prop_assert!(tp.functions.is_empty(), "{:?}", tp);
            }
            for f in &tp.functions {
                prop_assert!(live_functions.contains(&(namespace.clone(), f.clone())),
                    "{}/{} selected {} which is not a live function of its namespace", namespace, name, f);
            }
            let distinct: BTreeSet<_> = tp.units.iter().collect();
            prop_assert_eq!(distinct.len(), tp.units.len());
            consumers += tp.units.len();
        }
        prop_assert_eq!(p.units.len(), consumers);

        // The same objects in the other order give the same plan.
        let mut rt = triggers.clone();
        rt.reverse();
        let mut rf = functions.clone();
        rf.reverse();
        let q = plan(&arcs(&rt), &arcs(&rf), &defaults);
        prop_assert_eq!(&p.triggers, &q.triggers);
        prop_assert_eq!(&p.units, &q.units);
    }
}
