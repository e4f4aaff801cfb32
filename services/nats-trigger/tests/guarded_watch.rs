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

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kubeless_api::NatsTrigger;
use serde_json::{Value, json};
use support::*;

fn trigger_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<NatsTrigger>(&());
    Api::namespaced_with(client.clone(), NS, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_trigger_costs_only_itself() {
    let nats_server = NatsServer::start();
    let loose =
        kubeless_testkit::loosened_crd::<NatsTrigger>("maxInFlight", json!({"type": "integer"}));
    let c = TestCluster::with_crd(loose).await;
    let client = c.client.clone();
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

/// A trigger that deserializes but whose field does not parse (`retry.initialBackoff: banana`,
/// stored under a looser CRD as above) gets `Ready=False InvalidSpec` naming the field, and a
/// Warning Event, as docs/troubleshooting.md promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_that_does_not_parse_gets_invalid_spec_and_an_event() {
    let nats_server = NatsServer::start();
    let loose = kubeless_testkit::loosened_crd::<NatsTrigger>(
        "retry",
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    let c = TestCluster::with_crd(loose).await;
    let client = c.client.clone();
    let f1 = RecordingFunction::echo().await;
    register_function(&client, "f1", json!({"app": "orders"}), "10", f1.addr).await;
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "banana", "namespace": NS},
        "spec": {"topic": "b", "retry": {"initialBackoff": "banana"},
                 "functionSelector": {"matchLabels": {"app": "orders"}}}
    }))
    .unwrap();
    trigger_api(&client)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();
    let replica = Replica::start(&client, &nats_server.url).await;
    let (cond, events) = kubeless_testkit::invalid_spec_reported(
        &client,
        &trigger_api(&client),
        "NATSTrigger",
        "banana",
    )
    .await;
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.contains("initialBackoff") && message.contains("banana"),
        "the condition names the field and the value: {message}"
    );
    let note = events[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("banana"), "the Event says why: {note}");
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    replica.stop().await;
}
