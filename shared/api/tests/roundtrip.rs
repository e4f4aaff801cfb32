//! Manifests written for Kubeless 1.0.8 (and ones using our new fields) must deserialize into
//! the typed CRDs and serialize back unchanged.
#![cfg(test)]

use std::{collections::BTreeSet, path::PathBuf};

use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger, KafkaTrigger, KinesisTrigger, NatsTrigger, RedisTrigger,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn load(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join(name)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The one place output may differ: kube's ObjectMeta drops `metadata.creationTimestamp: null`
/// (as Kubernetes itself does); everything under `spec` must be identical.
fn normalise(mut v: Value) -> Value {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut)
        && meta.get("creationTimestamp") == Some(&Value::Null)
    {
        meta.remove("creationTimestamp");
    }
    v
}

fn roundtrip<T: DeserializeOwned + Serialize>(name: &str, input: &Value) {
    let typed: T = serde_json::from_value(input.clone())
        .unwrap_or_else(|e| panic!("{name}: does not deserialize: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        back,
        normalise(input.clone()),
        "{name}: changed by a deserialize/serialize round-trip"
    );
    // And through YAML text, as kubectl users see it.
    let yaml = serde_yaml_ng::to_string(&typed).unwrap();
    let again: T = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(serde_json::to_value(&again).unwrap(), back, "{name}: YAML");
}

#[test]
fn every_fixture_round_trips_unchanged() {
    let mut kinds = BTreeSet::new();
    let mut count = 0;
    let mut names: Vec<_> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    for name in &names {
        let input = load(name);
        let kind = input["kind"].as_str().unwrap().to_string();
        assert_eq!(input["apiVersion"], "kubeless.io/v1beta1", "{name}");
        match kind.as_str() {
            "Function" => roundtrip::<Function>(name, &input),
            "HTTPTrigger" => roundtrip::<HttpTrigger>(name, &input),
            "CronJobTrigger" => roundtrip::<CronJobTrigger>(name, &input),
            "KafkaTrigger" => roundtrip::<KafkaTrigger>(name, &input),
            "NATSTrigger" => roundtrip::<NatsTrigger>(name, &input),
            "KinesisTrigger" => roundtrip::<KinesisTrigger>(name, &input),
            "RedisTrigger" => roundtrip::<RedisTrigger>(name, &input),
            other => panic!("{name}: unknown kind {other}"),
        }
        kinds.insert(kind);
        count += 1;
    }
    assert_eq!(
        kinds.len(),
        7,
        "fixtures must cover all seven kinds: {kinds:?}"
    );
    assert!(count >= 20, "expected the full fixture set, found {count}");
}

#[test]
fn null_payload_is_kept_distinct_from_absent_payload() {
    let with_null: CronJobTrigger =
        serde_json::from_value(load("cronjobtrigger-null-payload.yaml")).unwrap();
    assert_eq!(with_null.spec.payload, Some(Value::Null));
    let mut without = load("cronjobtrigger-null-payload.yaml");
    without["spec"].as_object_mut().unwrap().remove("payload");
    let absent: CronJobTrigger = serde_json::from_value(without.clone()).unwrap();
    assert_eq!(absent.spec.payload, None);
    assert_eq!(serde_json::to_value(&absent).unwrap(), without);
}

#[test]
fn required_trigger_fields_are_enforced() {
    let mut v = load("httptrigger-minimal.yaml");
    v["spec"].as_object_mut().unwrap().remove("function-name");
    assert!(serde_json::from_value::<HttpTrigger>(v).is_err());
    let mut v = load("kafkatrigger.yaml");
    v["spec"].as_object_mut().unwrap().remove("topic");
    assert!(serde_json::from_value::<KafkaTrigger>(v).is_err());
}
