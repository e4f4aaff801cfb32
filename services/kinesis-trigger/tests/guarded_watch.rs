//! Regression test (issue 20): one malformed KinesisTrigger must cost only itself. A trigger
//! that does not deserialize used to fail the whole list, so valid triggers read nothing.
//!
//! How the malformed object gets in: our CRD refuses `retry.maxAttempts: -1`, and a real API
//! server would too. But a server keeps serving objects stored under an older, looser CRD
//! version: an upgrade does not re-validate what is already stored. The test installs the
//! KinesisTrigger CRD with the `retry` schema left open, which is that situation, so it stays
//! valid however strict devcluster's schema validation becomes.
#![cfg(test)]

mod support;

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kubeless_api::KinesisTrigger;
use serde_json::json;
use support::*;

fn trigger_api(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::erase::<KinesisTrigger>(&()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_trigger_costs_only_itself() {
    let moto = Moto::start();
    let k = moto.kinesis();
    create_stream(&k, "orders", 1).await;
    // `spec.retry` open, as an older CRD version without the constraints would have it.
    let loose = kubeless_testkit::loosened_crd::<KinesisTrigger>(
        "retry",
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    let c = TestCluster::with_crd(loose).await;
    let client = c.client.clone();
    let function = RecordingFunction::ok().await;
    register_function(&client, "consumer", function.addr).await;
    create_aws_secret(&client, "aws").await;
    create_trigger(
        &client,
        "good",
        json!({"function-name": "consumer", "stream": "orders", "secret": "aws",
               "endpoint": moto.endpoint, "startingPosition": "TRIM_HORIZON"}),
    )
    .await;
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KinesisTrigger",
        "metadata": {"name": "bad", "namespace": NS},
        "spec": {"function-name": "consumer", "stream": "orders", "secret": "aws",
                 "endpoint": moto.endpoint, "retry": {"maxAttempts": -1}}
    }))
    .unwrap();
    trigger_api(&client)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();

    let replica = Replica::start(&client).await;
    wait_ready(&client, "good").await;
    for i in 0..5 {
        put_record(&k, "orders", "key", &format!("{{\"n\":{i}}}")).await;
    }
    eventually(
        "5 records delivered by the valid trigger",
        Duration::from_secs(30),
        || async { (function.count() >= 5).then_some(()) },
    )
    .await;

    let (cond, _) = kubeless_testkit::invalid_spec_reported(
        &client,
        &trigger_api(&client),
        "KinesisTrigger",
        "bad",
    )
    .await;
    assert!(cond["message"].as_str().unwrap().contains("-1"), "{cond}");
    replica.stop().await;
    c.shutdown().await;
}
