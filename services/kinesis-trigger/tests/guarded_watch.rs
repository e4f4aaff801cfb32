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

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kubeless_api::KinesisTrigger;
use serde_json::json;
use support::*;

fn loose_crd() -> CustomResourceDefinition {
    let mut v = serde_json::to_value(kubeless_api::crd::<KinesisTrigger>()).unwrap();
    for version in v["spec"]["versions"].as_array_mut().unwrap() {
        let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(spec["properties"].get("retry").is_some());
        spec["properties"]["retry"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        if let Some(o) = spec.as_object_mut() {
            o.remove("x-kubernetes-validations");
        }
    }
    serde_json::from_value(v).unwrap()
}

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
    let k = kinesis_client(&moto);
    create_stream(&k, "orders", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster =
        devcluster::DevCluster::start(devcluster::Options::for_tests(dir.path().join("state")))
            .await
            .unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let loose = loose_crd();
    for crd in kubeless_api::all() {
        let crd = if crd.metadata.name == loose.metadata.name {
            loose.clone()
        } else {
            crd
        };
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
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
        put(&k, "orders", "key", &format!("{{\"n\":{i}}}")).await;
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
    cluster.shutdown().await;
}
