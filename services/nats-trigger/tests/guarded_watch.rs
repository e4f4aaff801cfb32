//! Regression test (issue 20): one malformed NATSTrigger must cost only itself. Before the
//! guarded watch, a trigger whose `maxInFlight` did not fit our type made the whole list fail
//! to deserialize, so valid triggers delivered nothing.
//!
//! How the malformed object gets in: our CRD refuses `maxInFlight: -1` (`minimum: 1`), and a
//! real API server would too. But a server keeps serving objects stored under an older, looser
//! CRD version: an upgrade does not re-validate what is already stored. The test installs the
//! NATSTrigger CRD with the `maxInFlight` constraint removed, which is that situation, so it
//! stays valid however strict devcluster's schema validation becomes.
#![cfg(test)]

mod support;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::{Client, CustomResourceExt};
use kubeless_api::NatsTrigger;
use serde_json::{Value, json};
use support::*;

/// The CRD of `K` with the schema of `spec.<field>` reduced to a bare integer, as an older CRD
/// version without the constraint would have it.
fn crd_without_constraint<K: CustomResourceExt>(field: &str) -> CustomResourceDefinition {
    let mut v = serde_json::to_value(kubeless_api::crd::<K>()).unwrap();
    for version in v["spec"]["versions"].as_array_mut().unwrap() {
        let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(
            spec["properties"].get(field).is_some(),
            "{field} not in the schema"
        );
        spec["properties"][field] = json!({"type": "integer"});
        // CEL rules of the spec may refer to the field too.
        if let Some(o) = spec.as_object_mut() {
            o.remove("x-kubernetes-validations");
        }
    }
    serde_json::from_value(v).unwrap()
}

async fn cluster_with_loose_trigger_crd(
    state: &std::path::Path,
) -> (devcluster::DevCluster, Client) {
    let cluster = devcluster::DevCluster::start(devcluster::Options::for_tests(state))
        .await
        .unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let loose = crd_without_constraint::<NatsTrigger>("maxInFlight");
    for crd in kubeless_api::all() {
        let crd = if crd.metadata.name == loose.metadata.name {
            loose.clone()
        } else {
            crd
        };
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    (cluster, client)
}

fn trigger_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<NatsTrigger>(&());
    Api::namespaced_with(client.clone(), NS, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_trigger_costs_only_itself() {
    let nats_server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (_cluster, client) = cluster_with_loose_trigger_crd(&dir.path().join("state")).await;
    let f1 = RecordingFunction::echo().await;
    register_function(&client, "f1", json!({"app": "orders"}), "10", f1.addr).await;
    create_trigger(
        &client,
        "good",
        json!({"topic": "good", "functionSelector": {"matchLabels": {"app": "orders"}}}),
        json!(null),
    )
    .await;
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "bad", "namespace": NS},
        "spec": {"topic": "bad", "maxInFlight": -1,
                 "functionSelector": {"matchLabels": {"app": "orders"}}}
    }))
    .unwrap();
    trigger_api(&client)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();

    let replica = Replica::start(&client, &nats_server.url).await;
    replica.wait_active(1).await;
    wait_ready(&client, "good").await;
    for i in 0..10 {
        replica
            .nats
            .publish("good", format!("m{i}").into())
            .await
            .unwrap();
    }
    replica.nats.flush().await.unwrap();
    eventually(
        "10 messages delivered by the valid trigger",
        Duration::from_secs(30),
        || async { (f1.count() == 10).then_some(()) },
    )
    .await;

    // The malformed one: Ready=False, InvalidSpec, the deserialization message, and an Event.
    let (cond, _) = kubeless_testkit::invalid_spec_reported(
        &client,
        &trigger_api(&client),
        "NATSTrigger",
        "bad",
    )
    .await;
    let message = cond["message"].as_str().unwrap();
    assert!(message.contains("-1"), "message names the value: {message}");

    // Fixing the object brings it in: it subscribes and turns Ready.
    let mut fixed = trigger_api(&client).get("bad").await.unwrap();
    fixed.data["spec"]["maxInFlight"] = Value::from(2);
    trigger_api(&client)
        .replace("bad", &PostParams::default(), &fixed)
        .await
        .unwrap();
    replica.wait_active(2).await;
    wait_ready(&client, "bad").await;
    replica.stop().await;
}
