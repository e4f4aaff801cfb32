//! End to end on devcluster with a real Python function pod (kubeless-runtime) and the moto
//! Kinesis emulator: records of a 2-shard stream reach the function in order per shard, and a
//! restart resumes from the checkpoint with nothing lost.
#![cfg(test)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::*;

/// Appends what it received to the file named by RECORD_LOG (the pod is a local process), so
/// the test sees the arrival order.
const HANDLER: &str = r#"
import json, os

def handler(event, context):
    data = event["data"]
    if isinstance(data, (bytes, str)):
        data = json.loads(data)
    req = event["extensions"]["request"]
    line = {
        "key": data["key"], "n": data["n"],
        "shard": req.get_header("event-shard-id"),
        "seq": req.get_header("event-sequence-number"),
        "ns": event["event-namespace"],
    }
    with open(os.environ["RECORD_LOG"], "a") as f:
        f.write(json.dumps(line) + "\n")
    return "ok"
"#;

/// What the function-controller would create: code ConfigMap, Deployment running
/// kubeless-runtime, Service, and the Function object.
async fn deploy_python_function(client: &kube::Client, name: &str, record_log: &Path) {
    let labels = json!({"function": name, "created-by": "kubeless"});
    create_dynamic(
        client,
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"consume.py": HANDLER}}),
    )
    .await;
    create_dynamic(
        client,
        "apps",
        "v1",
        "Deployment",
        "deployments",
        json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"function": name}},
          "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": name, "image": "kubeless-rs/runtime-python:3.11",
              "env": [
                {"name": "FUNC_HANDLER", "value": "handler"},
                {"name": "MOD_NAME", "value": "consume"},
                {"name": "FUNC_PORT", "value": "8080"},
                {"name": "FUNC_RUNTIME", "value": "python3.11"},
                {"name": "FUNC_TIMEOUT", "value": "10"},
                {"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"},
                {"name": "KUBELESS_WORKERS", "value": "1"},
                {"name": "RECORD_LOG", "value": record_log.to_string_lossy()},
                {"name": "KUBELESS_LISTEN_ADDRESS",
                 "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
              "ports": [{"name": "http", "containerPort": 8080}],
              "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
              "volumeMounts": [{"name": "code", "mountPath": "/kubeless"}]}],
            "volumes": [{"name": "code", "configMap": {"name": name}}]}}}}),
    )
    .await;
    create_dynamic(client, "", "v1", "Service", "services", json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"function": name},
                 "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]}})).await;
    let functions: kube::Api<kubeless_api::Function> = kube::Api::namespaced(client.clone(), NS);
    let f: kubeless_api::Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runtime": "python3.11", "handler": "consume.handler", "timeout": "10", "function": HANDLER}
    }))
    .unwrap();
    functions
        .create(&kube::api::PostParams::default(), &f)
        .await
        .unwrap();
}

/// Lines the function wrote, in arrival order.
fn arrivals(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn distinct(lines: &[serde_json::Value]) -> BTreeSet<String> {
    // Sequence numbers are unique per shard (moto numbers each shard from 1).
    lines
        .iter()
        .map(|l| {
            format!(
                "{}/{}",
                l["shard"].as_str().unwrap(),
                l["seq"].as_str().unwrap()
            )
        })
        .collect()
}

/// Per shard, first deliveries come in sequence order; per key, n grows.
fn assert_ordered(lines: &[serde_json::Value]) -> usize {
    let mut seen = BTreeSet::new();
    let mut last_seq: BTreeMap<String, String> = BTreeMap::new();
    let mut last_n: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines {
        let seq = l["seq"].as_str().unwrap().to_string();
        let shard = l["shard"].as_str().unwrap().to_string();
        if !seen.insert((shard.clone(), seq.clone())) {
            continue;
        }
        if let Some(prev) = last_seq.get(&shard) {
            assert!(seq_less(prev, &seq), "shard {shard}: {seq} after {prev}");
        }
        last_seq.insert(shard, seq);
        let key = l["key"].as_str().unwrap().to_string();
        let n = l["n"].as_u64().unwrap();
        if let Some(prev) = last_n.get(&key) {
            assert!(*prev < n, "key {key}: {n} after {prev}");
        }
        last_n.insert(key, n);
    }
    last_seq.len()
}

async fn put_round(k: &aws_sdk_kinesis::Client, round: usize) -> BTreeSet<String> {
    let mut shards = BTreeSet::new();
    for key in ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"] {
        let (shard, _) = put(
            k,
            "readings",
            key,
            &json!({"key": key, "n": round}).to_string(),
        )
        .await;
        shards.insert(shard);
    }
    shards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_reach_a_real_python_function_pod_in_order_and_survive_a_restart() {
    let moto = Moto::start();
    let k = kinesis_client(&moto);
    create_stream(&k, "readings", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let record_log = dir.path().join("arrivals.jsonl");
    let images = kubeless_testkit::image_map(dir.path(), &["kubeless-runtime"]);
    let (cluster, client, _state) = cluster(Some(images)).await;
    deploy_python_function(&client, "reader", &record_log).await;
    create_aws_secret(&client, "aws").await;
    let mut shards = BTreeSet::new();
    for round in 1..=3 {
        shards.extend(put_round(&k, round).await);
    }
    assert_eq!(shards.len(), 2, "the keys land on both shards");
    create_trigger(&client, "readings", json!({
        "function-name": "reader", "stream": "readings", "secret": "aws", "endpoint": moto.endpoint,
        "aws-region": REGION, "startingPosition": "TRIM_HORIZON"
    }))
    .await;
    let replica = Replica::start(&client).await;
    wait_ready(&client, "readings").await;
    // Delivery waits (in order) until the pod is ready; bounded by the deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while distinct(&arrivals(&record_log)).len() < 18 {
        if std::time::Instant::now() > deadline {
            let m = replica.metrics_text();
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(client.clone(), NS);
            let mut logs = String::new();
            for p in pods.list(&Default::default()).await.unwrap() {
                let name = p.metadata.name.clone().unwrap();
                logs.push_str(
                    &pods
                        .logs(&name, &Default::default())
                        .await
                        .unwrap_or_default(),
                );
            }
            panic!(
                "timed out: {} arrivals; metrics:\n{}\npod logs:\n{logs}",
                arrivals(&record_log).len(),
                m.lines()
                    .filter(|l| l.contains("deliveries") || l.contains("get_records"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lines = arrivals(&record_log);
    assert_eq!(assert_ordered(&lines), 2, "both shards delivered");
    assert!(
        lines
            .iter()
            .all(|l| l["ns"] == "kinesistriggers.kubeless.io")
    );

    // Restart: stop the trigger, write more, start again: all new records, no re-delivery.
    replica.stop().await;
    for round in 4..=5 {
        put_round(&k, round).await;
    }
    let replica = Replica::start(&client).await;
    eventually("30 records in the pod", Duration::from_secs(60), || async {
        (distinct(&arrivals(&record_log)).len() == 30).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let lines = arrivals(&record_log);
    assert_ordered(&lines);
    assert_eq!(
        lines.len(),
        30,
        "resumed after the checkpoint: nothing delivered twice"
    );
    replica.stop().await;
    cluster.shutdown().await;
}
