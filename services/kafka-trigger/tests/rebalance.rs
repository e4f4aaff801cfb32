//! A rebalance in the middle of a backlog: a second member joins the trigger's group, takes
//! half of the partitions, reads some of their records without committing, and leaves. The
//! trigger must get the partitions back and resume them from its own last commit (an offset in
//! the middle of a produced batch) at full speed. Consumers that restarted a partition there used
//! to trickle on tansu (tens of records/s), so a bench run ended near its 240 s deadline.
//!
//! Each rebalance costs the broker's join wait (tansu holds a join for about half of
//! `session.timeout.ms`, 3 s here); the backlog must then drain in seconds, with every record
//! delivered, in order per partition.
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 4;
const PER_PARTITION: usize = 2_000;

/// Assignments the trigger's consumer group has seen (its metric).
fn assignments(metrics: &kubeless_service::Metrics) -> u64 {
    metrics
        .encode()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("kubeless_kafka_trigger_rebalances_total{"))
        .filter(|l| l.contains("kind=\"assign\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_mid_backlog_resumes_at_full_speed() {
    init_logs();
    let broker = Tansu::start();
    broker.create_topic("moved", PARTITIONS).await;
    let c = Cluster::start(None).await;
    // 2 ms per call: with one call in flight per partition the backlog takes several seconds,
    // so the rebalance falls in the middle of it.
    let sink = fn_server(Duration::from_millis(2)).await;
    register_function(&c.client, "sink", json!({"app": "moved"}), "30", sink.addr).await;

    let producer = broker.producer();
    let sends = (0..PER_PARTITION * PARTITIONS as usize).map(|i| {
        let producer = &producer;
        async move {
            let partition = (i % PARTITIONS as usize) as i32;
            producer
                .send(
                    FutureRecord::to("moved")
                        .partition(partition)
                        .key("k")
                        .payload(&format!("r-{i}")),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
        }
    });
    futures::future::join_all(sends).await;

    create_trigger(
        &c.client,
        "kt",
        json!({"topic": "moved", "functionSelector": {"matchLabels": {"app": "moved"}}}),
    )
    .await;
    let mut settings = settings(&broker, kafka_trigger::Ordering::Partition);
    // Small, so each partition is refetched from the middle of a batch many times.
    settings.tuning.max_queued = 100;
    let metrics = kubeless_service::Metrics::new("kubeless");
    let token = CancellationToken::new();
    let running = kafka_trigger::run(c.client.clone(), settings, &metrics, token.clone())
        .await
        .unwrap();
    eventually("the first records", Duration::from_secs(60), || async {
        (sink.received().len() >= 200).then_some(())
    })
    .await;
    let assigned_before = assignments(&metrics);

    // The second member: joins, holds its share for a second once it has one, leaves.
    let group = kubeless_api::labels::consumer_group_name(NS, "kt", "sink", "moved");
    let addr = broker.addr.clone();
    let intruder = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &addr)
            .set("group.id", &group)
            .set("session.timeout.ms", "6000")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&["moved"]).unwrap();
        let t0 = Instant::now();
        let mut held: Option<(usize, Instant)> = None;
        while t0.elapsed() < Duration::from_secs(60) {
            let _ = consumer.poll(Duration::from_millis(50));
            let n = consumer.assignment().map(|a| a.count()).unwrap_or(0);
            match held {
                None if n > 0 => held = Some((n, Instant::now())),
                Some((_, since)) if since.elapsed() >= Duration::from_secs(1) => break,
                _ => {}
            }
        }
        drop(consumer); // leaves the group
        held.map(|(n, _)| n).unwrap_or(0)
    });
    let held = intruder.await.unwrap();
    let left = Instant::now();
    let delivered_when_left = sink.received().len();
    assert!(
        held > 0,
        "the second member never got a partition: no rebalance was tested"
    );

    let total = PER_PARTITION * PARTITIONS as usize;
    eventually(
        "every record delivered after the rebalance",
        Duration::from_secs(120),
        || async { (sink.received().len() >= total).then_some(()) },
    )
    .await;
    let secs = left.elapsed().as_secs_f64();
    let rest = total - delivered_when_left;
    eprintln!(
        "the second member held {held} partition(s); after it left, {rest} records in {secs:.2} s \
         ({} assignments meanwhile)",
        assignments(&metrics) - assigned_before
    );
    // Two rebalances (join, leave), each held about 3 s by tansu, then a few seconds of calls.
    // Restarting from the middle of a batch at a trickle took minutes.
    assert!(
        secs < 30.0,
        "{rest} records took {secs:.1} s after the rebalance: the partitions resumed slowly"
    );
    assert!(
        assignments(&metrics) > assigned_before,
        "the trigger did not get the partitions back"
    );

    // Every record, in order per partition, each once: the revoke drained the calls in flight
    // and committed exactly what was done, and the second member committed nothing.
    let mut by_part: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in sink.received() {
        by_part.entry(r.partition()).or_default().push(r.offset());
    }
    for p in 0..PARTITIONS {
        assert_eq!(
            by_part.get(&p).cloned().unwrap_or_default(),
            (0..PER_PARTITION as i64).collect::<Vec<_>>(),
            "partition {p}"
        );
    }

    token.cancel();
    tokio::time::timeout(Duration::from_secs(30), running.join())
        .await
        .expect("drained in time")
        .unwrap();
}
