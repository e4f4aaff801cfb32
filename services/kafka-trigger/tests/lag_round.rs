//! The lag and health round (topic metadata, then each partition's high watermark) must not hold
//! up delivery. A broker answers one connection's requests in order, and holds a fetch at the end
//! of a partition for `fetch.wait.max.ms`; every request of the round waits behind such a fetch.
//! When the round ran on the poll thread, no record was handed to the lanes meanwhile: the
//! "2.47 s gaps" of the throughput bench (a metadata request and 4 watermark queries, each behind
//! a fetch held 500 ms).
//!
//! Here partition 1 stays empty, so its fetch is always held (1 s), and partition 0 has a backlog
//! of 60 times `max_queued`: it must be read again and again while lag rounds run every 100 ms.
//! With the round on the poll thread this took minutes; it must take seconds, and lag must still
//! be reported.
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::producer::FutureRecord;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const MAX_QUEUED: usize = 50;
const RECORDS: usize = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_rounds_behind_held_fetches_do_not_hold_up_delivery() {
    init_logs();
    let broker = Tansu::start();
    broker.create_topic("held", 2).await;
    let c = Cluster::start(None).await;
    let sink = fn_server(Duration::ZERO).await;
    register_function(&c.client, "sink", json!({"app": "held"}), "30", sink.addr).await;

    let producer = broker.producer();
    let sends = (0..RECORDS).map(|i| {
        let producer = &producer;
        async move {
            producer
                .send(
                    FutureRecord::to("held")
                        .partition(0)
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
        json!({"topic": "held", "functionSelector": {"matchLabels": {"app": "held"}}}),
    )
    .await;
    let mut settings = settings(&broker, kafka_trigger::Ordering::Partition);
    settings.tuning.max_queued = MAX_QUEUED;
    settings.tuning.lag_interval = Duration::from_millis(100);
    // The empty partition's fetch is held this long by the broker, and each request of a lag
    // round queued behind it waits as long.
    settings.brokers.extra = vec!["fetch.wait.max.ms=1000".into()];
    let metrics = kubeless_service::Metrics::new("kubeless");
    let token = CancellationToken::new();
    let running = kafka_trigger::run(c.client.clone(), settings, &metrics, token.clone())
        .await
        .unwrap();

    // From the first record on: the group's join is not what is measured.
    eventually("the first record", Duration::from_secs(60), || async {
        (!sink.received().is_empty()).then_some(())
    })
    .await;
    let started = Instant::now();
    eventually(
        "every record delivered",
        Duration::from_secs(120),
        || async { (sink.received().len() >= RECORDS).then_some(()) },
    )
    .await;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{RECORDS} records in {secs:.2} s with max_queued {MAX_QUEUED} and a lag round every 100 ms behind fetches held 1 s"
    );
    // About 60 refills of the lanes; with a round of 2-3 s on the poll thread between refills
    // this took minutes.
    assert!(
        secs < 20.0,
        "delivery took {secs:.1} s: the lag rounds held it up"
    );

    // Once each, in order.
    let mut by_part: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in sink.received() {
        by_part.entry(r.partition()).or_default().push(r.offset());
    }
    assert_eq!(by_part[&0], (0..RECORDS as i64).collect::<Vec<_>>());

    // Lag is still reported, now by the lag thread: 0 once all is delivered. (Partition 1 never
    // had a record, so it has no position and no lag series.)
    eventually("lag 0 on partition 0", Duration::from_secs(30), || async {
        let text = metrics.encode().unwrap_or_default();
        text.lines()
            .any(|l| {
                l.starts_with("kubeless_kafka_trigger_consumer_lag{")
                    && l.contains("partition=\"0\"")
                    && l.ends_with(" 0")
            })
            .then_some(())
    })
    .await;

    token.cancel();
    tokio::time::timeout(Duration::from_secs(30), running.join())
        .await
        .expect("drained in time")
        .unwrap();
}
