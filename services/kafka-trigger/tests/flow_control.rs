//! Flow control against a real broker (tansu): a backlog many times `max_queued` is delivered
//! whole and in order, and a slow partition does not hold back a fast one. With the earlier
//! pause/resume flow control a backlog over `max_queued` stalled on tansu (35 records/s after the
//! second resume); each partition now has its own librdkafka queue that is simply not read while
//! its lanes are full.
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::producer::FutureRecord;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const MAX_QUEUED: usize = 50;
/// Records on the fast partition: 60 times `MAX_QUEUED`.
const FAST: usize = 3_000;
/// Records on the slow partition, each answered after `SLOW_CALL`.
const SLOW: usize = 200;
const SLOW_CALL: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_far_over_max_queued_flows_and_a_slow_partition_holds_nobody_back() {
    init_logs();
    let broker = Tansu::start();
    broker.create_topic("backlog", 2).await;
    let c = Cluster::start(None).await;
    let sink = RecordingFunction::start(|_, body, _| Reply::Answer {
        status: 200,
        delay: if body.starts_with(b"slow") {
            SLOW_CALL
        } else {
            Duration::ZERO
        },
    })
    .await;
    register_function(
        &c.client,
        "sink",
        json!({"app": "backlog"}),
        "30",
        sink.addr,
    )
    .await;

    // The whole backlog is in the topic before the trigger starts: partition 0 slow, 1 fast.
    let producer = broker.producer();
    let sends = (0..SLOW)
        .map(|i| (0, format!("slow-{i}")))
        .chain((0..FAST).map(|i| (1, format!("fast-{i}"))))
        .map(|(partition, body)| {
            let producer = &producer;
            async move {
                producer
                    .send(
                        FutureRecord::to("backlog")
                            .partition(partition)
                            .key("k")
                            .payload(&body),
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
        json!({"topic": "backlog", "functionSelector": {"matchLabels": {"app": "backlog"}}}),
    )
    .await;
    let mut settings = settings(&broker, kafka_trigger::Ordering::Partition);
    settings.tuning.max_queued = MAX_QUEUED;
    let metrics = kubeless_service::Metrics::new("kubeless");
    let token = CancellationToken::new();
    let running = kafka_trigger::run(c.client.clone(), settings, &metrics, token.clone())
        .await
        .unwrap();
    let started = Instant::now();

    let count = |prefix: &str| {
        sink.received()
            .iter()
            .filter(|r| r.body.starts_with(prefix.as_bytes()))
            .count()
    };
    let fast_done = eventually(
        "every record of the fast partition delivered",
        Duration::from_secs(90),
        || async { (count("fast") >= FAST).then(|| count("slow")) },
    )
    .await;
    let fast_secs = started.elapsed().as_secs_f64();
    eprintln!(
        "fast partition: {FAST} records in {fast_secs:.2} s ({:.0} records/s) with max_queued {MAX_QUEUED}; slow partition had {fast_done} of {SLOW} by then",
        FAST as f64 / fast_secs
    );
    // The slow partition needs SLOW x SLOW_CALL = 20 s on its one lane; the fast one must not
    // have waited for it.
    assert!(
        fast_done < SLOW / 2,
        "the fast partition finished only after the slow one had delivered {fast_done} of {SLOW}"
    );
    eventually(
        "every record of the slow partition delivered",
        Duration::from_secs(90),
        || async { (count("slow") >= SLOW).then_some(()) },
    )
    .await;

    // Once each, in order, per partition.
    let mut by_part: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in sink.received() {
        by_part.entry(r.partition()).or_default().push(r.offset());
    }
    assert_eq!(by_part[&0], (0..SLOW as i64).collect::<Vec<_>>());
    assert_eq!(by_part[&1], (0..FAST as i64).collect::<Vec<_>>());

    token.cancel();
    tokio::time::timeout(Duration::from_secs(30), running.join())
        .await
        .expect("drained in time")
        .unwrap();
}
