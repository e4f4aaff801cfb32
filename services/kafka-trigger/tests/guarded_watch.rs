//! Regression test (issue 20): one malformed KafkaTrigger must cost only itself. Before the
//! guarded watch, a trigger with `retry.maxAttempts: -1` made the whole list fail to
//! deserialize, so valid triggers delivered nothing (0 of 20 records after a restart).
//!
//! How the malformed object gets in: our CRD refuses `maxAttempts: -1` (`minimum: 1`), and a
//! real API server would too. But a server keeps serving objects stored under an older, looser
//! CRD version: an upgrade does not re-validate what is already stored. The test installs the
//! KafkaTrigger CRD with the `retry` schema left open, which is that situation, so it stays
//! valid however strict devcluster's schema validation becomes.
#![cfg(test)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kubeless_api::KafkaTrigger;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RECORDS: usize = 20;

fn trigger_api(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &ApiResource::erase::<KafkaTrigger>(&()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_trigger_costs_only_itself() {
    init_logs();
    let broker = Tansu::start();
    broker.create_topic("good", 1).await;
    // `spec.retry` open, as an older CRD version without the constraints would have it.
    let loose = kubeless_testkit::loosened_crd::<KafkaTrigger>(
        "retry",
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    let c = Cluster::with_crd(loose).await;
    let client = c.client.clone();
    let sink = fn_server(Duration::ZERO).await;
    register_function(&client, "sink", json!({"app": "orders"}), "5", sink.addr).await;
    create_trigger(
        &client,
        "good",
        json!({"topic": "good", "functionSelector": {"matchLabels": {"app": "orders"}}}),
    )
    .await;
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": "bad", "namespace": NS},
        "spec": {"topic": "good", "retry": {"maxAttempts": -1},
                 "functionSelector": {"matchLabels": {"app": "orders"}}}
    }))
    .unwrap();
    trigger_api(&client)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();

    let metrics = kubeless_service::Metrics::new("kubeless");
    let token = CancellationToken::new();
    let running = kafka_trigger::run(
        client.clone(),
        settings(&broker, kafka_trigger::Ordering::Partition),
        &metrics,
        token.clone(),
    )
    .await
    .unwrap();
    let producer = broker.producer();
    for i in 0..RECORDS {
        produce(&producer, "good", 0, "k", &format!("{{\"id\":{i}}}"), &[]).await;
    }
    eventually(
        "every record delivered by the valid trigger",
        Duration::from_secs(90),
        || async { (sink.received().len() >= RECORDS).then_some(()) },
    )
    .await;

    let (cond, _) = kubeless_testkit::invalid_spec_reported(
        &client,
        &trigger_api(&client),
        "KafkaTrigger",
        "bad",
    )
    .await;
    assert!(cond["message"].as_str().unwrap().contains("-1"), "{cond}");
    // Only one report per generation, however many passes ran since.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let count = Api::<KubeEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum::<i32>();
    assert_eq!(count, 1, "one InvalidSpec Event, not one per pass");

    token.cancel();
    tokio::time::timeout(Duration::from_secs(20), running.join())
        .await
        .expect("stopped in time")
        .unwrap();
}
