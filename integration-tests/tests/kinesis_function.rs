//! Kinesis end to end on devcluster with a real Python function pod (kubeless-runtime), the
//! kinesis-trigger binary and the moto Kinesis emulator: records of a 2-shard stream reach the
//! function in order per shard, and a restart (SIGTERM, checkpoints flushed) resumes from the
//! checkpoint with nothing lost and nothing delivered twice. Uses the binaries `cargo build
//! --workspace --bins` left in this test's target dir and moto_server (scripts/test.sh installs
//! it).
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use kubeless_api::KinesisTrigger;
use kubeless_testkit::{
    MOTO_REGION, Moto, PythonFunction, ServiceProcess, TestCluster, create, create_aws_secret,
    create_stream, eventually, put_record, seq_less, wait_ready,
};
use serde_json::json;

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
        let body = json!({"key": key, "n": round}).to_string();
        let (shard, _) = put_record(k, "readings", key, &body).await;
        shards.insert(shard);
    }
    shards
}

/// The trigger with fast timing for tests (the limits still hold: 200 ms between GetRecords
/// per shard).
fn start_trigger(c: &TestCluster) -> ServiceProcess {
    let env = [
        ("KUBELESS_KINESIS_POLL_INTERVAL_MS", "200"),
        ("KUBELESS_KINESIS_IDLE_POLL_INTERVAL_MS", "200"),
        ("KUBELESS_KINESIS_RECORDS_LIMIT", "100"),
        ("KUBELESS_KINESIS_LIST_SHARDS_SECONDS", "1"),
        ("KUBELESS_KINESIS_CHECKPOINT_INTERVAL_MS", "200"),
        ("KUBELESS_RESYNC_SECONDS", "2"),
    ];
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.to_string())).collect();
    c.start_service("kinesis-trigger", &env)
}

/// Graceful stop: readers cancelled, checkpoints flushed.
fn stop(trigger: ServiceProcess) {
    tokio::task::block_in_place(|| trigger.terminate(Duration::from_secs(20)))
        .expect("kinesis-trigger stopped in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_reach_a_real_python_function_pod_in_order_and_survive_a_restart() {
    let moto = Moto::start();
    let k = moto.kinesis();
    create_stream(&k, "readings", 2).await;
    let c = TestCluster::with_pods(&["kubeless-runtime"]).await;
    let record_log = c.dir.path().join("arrivals.jsonl");
    PythonFunction::new("reader", HANDLER, "handler")
        .env("RECORD_LOG", record_log.to_string_lossy())
        .deploy(&c.client)
        .await;
    create_aws_secret(&c.client, "aws").await;
    let mut shards = BTreeSet::new();
    for round in 1..=3 {
        shards.extend(put_round(&k, round).await);
    }
    assert_eq!(shards.len(), 2, "the keys land on both shards");
    let trigger: KinesisTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KinesisTrigger",
        "metadata": {"name": "readings"},
        "spec": {"function-name": "reader", "stream": "readings", "secret": "aws",
                 "endpoint": moto.endpoint, "aws-region": MOTO_REGION,
                 "startingPosition": "TRIM_HORIZON"}
    }))
    .unwrap();
    create(&c.client, &trigger).await;
    let trigger = start_trigger(&c);
    wait_ready::<KinesisTrigger>(&c.client, "readings").await;
    // Delivery waits (in order) until the pod is ready; bounded by the deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while distinct(&arrivals(&record_log)).len() < 18 {
        if std::time::Instant::now() > deadline {
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(c.client.clone(), kubeless_testkit::NS);
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
                "timed out: {} arrivals; kinesis-trigger log:\n{}\npod logs:\n{logs}",
                arrivals(&record_log).len(),
                trigger.log_tail(40)
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
    stop(trigger);
    for round in 4..=5 {
        put_round(&k, round).await;
    }
    let trigger = start_trigger(&c);
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
    stop(trigger);
    c.shutdown().await;
}
