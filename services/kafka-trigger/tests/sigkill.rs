//! The real binary, killed with SIGKILL in the middle of a stream and started again, loses
//! nothing: every record reaches the function at least once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

const RECORDS: usize = 3000;

fn spawn_trigger(c: &Cluster, broker: &Broker, log: &str) -> Child {
    let log = std::fs::File::create(c.dir.path().join(log)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_kafka-trigger"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", c.cluster.kubeconfig_path())
        .env("KAFKA_BROKERS", &broker.addr)
        .env("KAFKA_SESSION_TIMEOUT_MS", "6000")
        .env("KAFKA_COMMIT_INTERVAL_MS", "100")
        .env("KUBELESS_ADMIN_ADDR", "127.0.0.1:0")
        .env("KUBELESS_RESOLVER", "endpointslices")
        .env("KUBELESS_LOG_LEVEL", "info")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap()
}

fn distinct_ids(server: &FnServer) -> BTreeSet<usize> {
    server
        .received()
        .iter()
        .filter_map(|r| serde_json::from_str::<serde_json::Value>(&r.body).ok())
        .filter_map(|v| v["id"].as_u64().map(|i| i as usize))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_and_restart_loses_nothing() {
    let broker = Broker::start();
    broker.create_topic("events", 4).await;
    let c = cluster(None).await;
    // A little work per call so the stream is still running when the kill comes.
    let sink = FnServer::start(Duration::from_millis(2)).await;
    register_function(&c.client, "sink", &[("app", "events")], sink.addr).await;
    create_trigger(
        &c.client,
        "kt",
        json!({"topic": "events", "functionSelector": {"matchLabels": {"app": "events"}}}),
    )
    .await;

    let producer = broker.producer();
    for i in 0..RECORDS {
        produce(
            &producer,
            "events",
            (i % 4) as i32,
            &format!("k{i}"),
            &format!("{{\"id\":{i}}}"),
            &[],
        )
        .await;
    }

    let mut first = spawn_trigger(&c, &broker, "first.log");
    eventually(
        "some records delivered",
        Duration::from_secs(90),
        || async { (distinct_ids(&sink).len() >= RECORDS / 5).then_some(()) },
    )
    .await;
    first.kill().unwrap(); // SIGKILL: no drain, no commit, no leave-group
    first.wait().unwrap();
    let at_kill = distinct_ids(&sink).len();
    eprintln!("killed after {at_kill} distinct records");
    assert!(at_kill < RECORDS, "the kill must come mid-stream");

    let mut second = spawn_trigger(&c, &broker, "second.log");
    let result = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if distinct_ids(&sink).len() == RECORDS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let _ = second.kill();
    let _ = second.wait();
    let ids = distinct_ids(&sink);
    let missing: Vec<usize> = (0..RECORDS).filter(|i| !ids.contains(i)).take(20).collect();
    assert!(
        result.is_ok(),
        "records lost after SIGKILL + restart: {} missing, e.g. {missing:?}; logs in {}",
        RECORDS - ids.len(),
        c.dir.path().display()
    );
    let total = sink.received().len();
    eprintln!(
        "all {RECORDS} delivered; {} redelivered after the kill (at-least-once)",
        total - RECORDS
    );
    sink.stop();
    c.cluster.shutdown().await;
}
