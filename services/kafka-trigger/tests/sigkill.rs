//! Faults in the middle of a stream lose nothing: the real binary killed with SIGKILL and started
//! again, and the broker frozen (SIGSTOP) for longer than the consumer's session timeout and then
//! resumed; every record reaches the function at least once, and the redeliveries are counted.
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

/// A broker with RECORDS records waiting in 4 partitions of `topic`, and a recording function
/// selected by a KafkaTrigger on it; no trigger service runs yet.
async fn records_waiting(topic: &str) -> (Broker, Cluster, FnServer) {
    let broker = Broker::start();
    broker.create_topic(topic, 4).await;
    let c = cluster(None).await;
    // A little work per call so the stream is still running when the fault comes.
    let sink = FnServer::start(Duration::from_millis(2)).await;
    register_function(&c.client, "sink", &[("app", topic)], sink.addr).await;
    create_trigger(
        &c.client,
        "kt",
        json!({"topic": topic, "functionSelector": {"matchLabels": {"app": topic}}}),
    )
    .await;
    let producer = broker.producer();
    for i in 0..RECORDS {
        produce(
            &producer,
            topic,
            (i % 4) as i32,
            &format!("k{i}"),
            &format!("{{\"id\":{i}}}"),
            &[],
        )
        .await;
    }
    (broker, c, sink)
}

async fn a_fifth_delivered(sink: &FnServer) {
    eventually(
        "some records delivered",
        Duration::from_secs(90),
        || async { (distinct_ids(sink).len() >= RECORDS / 5).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_and_restart_loses_nothing() {
    let (broker, c, sink) = records_waiting("events").await;
    let mut first = spawn_trigger(&c, &broker, "first.log");
    a_fifth_delivered(&sink).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_frozen_mid_stream_loses_nothing() {
    let (broker, c, sink) = records_waiting("frozen").await;
    let mut trigger = spawn_trigger(&c, &broker, "trigger.log");
    a_fifth_delivered(&sink).await;
    // Frozen past the 6 s session timeout: the group coordinator and the fetches both stall.
    signal(broker.pid(), "-STOP");
    let at_freeze = distinct_ids(&sink).len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    signal(broker.pid(), "-CONT");
    eprintln!("broker frozen for 10 s after {at_freeze} distinct records");
    assert!(at_freeze < RECORDS, "the freeze must come mid-stream");

    let result = tokio::time::timeout(Duration::from_secs(120), async {
        while distinct_ids(&sink).len() < RECORDS {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let still_running = trigger.try_wait().unwrap().is_none();
    let _ = trigger.kill();
    let _ = trigger.wait();
    let ids = distinct_ids(&sink);
    assert!(
        result.is_ok(),
        "records lost after the broker froze: {} missing; logs in {}",
        RECORDS - ids.len(),
        c.dir.path().display()
    );
    assert!(still_running, "kafka-trigger exited during the freeze");
    eprintln!(
        "all {RECORDS} delivered after a 10 s broker freeze; {} redelivered",
        sink.received().len() - RECORDS
    );
    sink.stop();
    c.cluster.shutdown().await;
}
