//! A real function pod: devcluster runs the Python runtime (kubeless-runtime + worker) from a
//! Deployment, the trigger finds it through its EndpointSlice and delivers Kafka records to it.
#![cfg(test)]

mod common;

use std::time::Duration;

use common::*;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const HANDLER: &str = r#"
import json, os

def handler(event, context):
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode()
    with open(os.environ["OUT_FILE"], "a") as f:
        f.write(json.dumps({"id": event["event-id"], "ns": event["event-namespace"], "data": data}) + "\n")
    return "ok"
"#;

async fn create(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    v: serde_json::Value,
) {
    let ar = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
    api.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_to_a_python_function_pod() {
    init_logs();
    let images_tmp = tempfile::tempdir().unwrap();
    let images = kubeless_testkit::image_map(images_tmp.path(), &["kubeless-runtime"]);
    let broker = Broker::start();
    broker.create_topic("greetings", 2).await;
    let c = cluster(Some(images)).await;
    let out_file = c.dir.path().join("calls.jsonl");
    let name = "greeter";
    let labels = json!({"function": name, "created-by": "kubeless", "app": "greet"});
    create(
        &c.client,
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"handler.py": HANDLER}}),
    )
    .await;
    create(&c.client, "apps", "v1", "Deployment", "deployments", json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"function": name}},
          "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": name, "image": "kubeless-rs/runtime-python:3.11",
              "env": [
                {"name": "FUNC_HANDLER", "value": "handler"},
                {"name": "MOD_NAME", "value": "handler"},
                {"name": "FUNC_PORT", "value": "8080"},
                {"name": "FUNC_RUNTIME", "value": "python3.11"},
                {"name": "FUNC_TIMEOUT", "value": "30"},
                {"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"},
                {"name": "KUBELESS_WORKERS", "value": "1"},
                {"name": "OUT_FILE", "value": out_file.to_string_lossy()},
                {"name": "KUBELESS_LISTEN_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
              "ports": [{"name": "http", "containerPort": 8080}],
              "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
              "volumeMounts": [{"name": "code", "mountPath": "/kubeless"}]}],
            "volumes": [{"name": "code", "configMap": {"name": name}}]}}}})).await;
    create(&c.client, "", "v1", "Service", "services", json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"function": name},
                 "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]}})).await;
    create(&c.client, "kubeless.io", "v1beta1", "Function", "functions", json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runtime": "python3.11", "handler": "handler.handler", "timeout": "30", "function": HANDLER}})).await;
    create_trigger(
        &c.client,
        "greet",
        json!({"topic": "greetings", "functionSelector": {"matchLabels": {"app": "greet"}},
               "retry": {"maxAttempts": 10, "initialBackoff": "200ms", "maxBackoff": "2s"}}),
    )
    .await;

    let metrics = kubeless_service::Metrics::new("kubeless");
    let token = CancellationToken::new();
    let running = kafka_trigger::run(
        c.client.clone(),
        settings(&broker, kafka_trigger::Ordering::Partition),
        &metrics,
        token.clone(),
    )
    .await
    .unwrap();

    // Produced before the pod is ready: the records wait (no endpoint is not the record's
    // fault) and arrive once it is.
    let producer = broker.producer();
    for i in 0..20 {
        produce(
            &producer,
            "greetings",
            i % 2,
            &format!("k{i}"),
            &format!("hello {i}"),
            &[],
        )
        .await;
    }
    let lines = eventually(
        "20 calls in the function's file",
        Duration::from_secs(120),
        || async {
            let text = std::fs::read_to_string(&out_file).ok()?;
            let lines: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            (lines.len() >= 20).then_some(lines)
        },
    )
    .await;
    let mut data: Vec<String> = lines
        .iter()
        .map(|l| l["data"].as_str().unwrap().to_string())
        .collect();
    data.sort();
    data.dedup();
    assert_eq!(data.len(), 20, "{lines:?}");
    for l in &lines {
        assert_eq!(l["ns"], "kafkatriggers.kubeless.io");
        assert!(l["id"].as_str().unwrap().starts_with("greetings-"), "{l}");
    }
    // Per partition, the function saw the records in produce order.
    for p in 0..2 {
        let seq: Vec<usize> = lines
            .iter()
            .filter(|l| {
                l["id"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("greetings-{p}-"))
            })
            .map(|l| {
                l["data"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("hello ")
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(
            seq.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: {seq:?}"
        );
    }

    token.cancel();
    tokio::time::timeout(Duration::from_secs(60), running.join())
        .await
        .expect("drained in time")
        .unwrap();
    c.cluster.shutdown().await;
}
