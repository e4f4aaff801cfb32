//! Kafka end to end on devcluster with a real Python function pod: devcluster runs the Python
//! runtime (kubeless-runtime + worker) from a Deployment, the kafka-trigger binary finds it
//! through its EndpointSlice and delivers tansu's records to it, in order per partition, and
//! drains on SIGTERM. Uses the binaries `cargo build --workspace --bins` left in this test's
//! target dir and tansu (scripts/test.sh installs it).
#![cfg(test)]

use std::time::Duration;

use kubeless_api::KafkaTrigger;
use kubeless_testkit::{PythonFunction, Tansu, TestCluster, create, eventually, produce};
use serde_json::json;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_to_a_python_function_pod() {
    let broker = Tansu::start();
    broker.create_topic("greetings", 2).await;
    let c = TestCluster::with_pods(&["kubeless-runtime"]).await;
    let out_file = c.dir.path().join("calls.jsonl");
    PythonFunction::new("greeter", HANDLER, "handler")
        .label("app", "greet")
        .env("OUT_FILE", out_file.to_string_lossy())
        .timeout(30)
        .deploy(&c.client)
        .await;
    let trigger: KafkaTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": "greet"},
        "spec": {"topic": "greetings", "functionSelector": {"matchLabels": {"app": "greet"}},
                 "retry": {"maxAttempts": 10, "initialBackoff": "200ms", "maxBackoff": "2s"}}
    }))
    .unwrap();
    create(&c.client, &trigger).await;
    let service = c.start_service(
        "kafka-trigger",
        &[
            ("KAFKA_BROKERS", broker.addr.clone()),
            // tansu holds a join for about half the session timeout.
            ("KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
            ("KAFKA_ORDERING", "partition".into()),
            ("KAFKA_MAX_IN_FLIGHT", "64".into()),
            ("KAFKA_COMMIT_INTERVAL_MS", "200".into()),
            ("KAFKA_LAG_INTERVAL_SECONDS", "1".into()),
            ("KAFKA_DRAIN_TIMEOUT_SECONDS", "10".into()),
        ],
    );

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

    tokio::task::block_in_place(|| service.terminate(Duration::from_secs(60)))
        .expect("kafka-trigger drained in time");
    c.shutdown().await;
}
