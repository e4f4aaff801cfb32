#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Write throughput and watch fan-out: 10,000 ConfigMap creates through the
//! in-memory store (the baseline) and through the real HTTPS + kube::Client
//! path with 16 concurrent writers while 10 watchers count every event; then
//! resident memory. Prints numbers; not a pass/fail test.
//! Run: `cargo bench -p devcluster-apiserver --bench store`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use devcluster_apiserver::{ServerConfig, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const OBJECTS: usize = 10_000;
const WATCHERS: usize = 10;
const CONCURRENCY: usize = 16;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

fn configmap(i: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}"), "labels": {"bench": "yes"}}, "data": {"index": i.to_string(), "payload": "x".repeat(200)}})
}

#[tokio::main]
async fn main() {
    let rss_start = rss_mib();
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in ["bench-mem", "bench-http"] {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    }

    // Baseline: the store alone.
    let store = server.store();
    let def = store.lookup("", "v1", "configmaps").unwrap();
    let t = Instant::now();
    for i in 0..OBJECTS {
        store.create(&def, "v1", "bench-mem", configmap(i)).unwrap();
    }
    let mem_secs = t.elapsed().as_secs_f64();
    let mem_rate = OBJECTS as f64 / mem_secs;

    // HTTPS without watchers.
    let quiet: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-quiet");
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "bench-quiet"}})).unwrap(),
    )
    .await
    .unwrap();
    let t = Instant::now();
    let quiet_ok = futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = quiet.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(configmap(i)).unwrap(),
                )
                .await
                .is_ok()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    let quiet_rate = OBJECTS as f64 / t.elapsed().as_secs_f64();

    // Watchers on the HTTP namespace, started from the list's resourceVersion.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-http");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let counters: Vec<Arc<AtomicU64>> =
        (0..WATCHERS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut watchers = Vec::new();
    for c in &counters {
        let stream = api
            .watch(&WatchParams::default().timeout(290), &rv)
            .await
            .unwrap();
        let c = c.clone();
        watchers.push(tokio::spawn(async move {
            let mut s = stream.boxed();
            while let Ok(Some(ev)) = s.try_next().await {
                if let WatchEvent::Added(_) = ev
                    && c.fetch_add(1, Ordering::Relaxed) + 1 == OBJECTS as u64
                {
                    break;
                }
            }
        }));
    }

    let t = Instant::now();
    let results: Vec<bool> = futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(configmap(i)).unwrap();
                api.create(&PostParams::default(), &cm).await.is_ok()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let http_secs = t.elapsed().as_secs_f64();
    let failed = results.iter().filter(|ok| !**ok).count();
    let http_rate = OBJECTS as f64 / http_secs;

    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline
        && counters
            .iter()
            .any(|c| c.load(Ordering::Relaxed) < OBJECTS as u64)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fanout_secs = t.elapsed().as_secs_f64();
    let counts: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let lost: u64 = counts
        .iter()
        .map(|c| (OBJECTS as u64).saturating_sub(*c))
        .sum();
    let rss_end = rss_mib();

    println!(
        "devcluster-apiserver bench ({OBJECTS} ConfigMaps, ~300 B each; client, server and watchers share this process)"
    );
    println!(
        "  store create (baseline, in-process):       {mem_rate:>8.0} writes/s  ({mem_secs:.3} s)"
    );
    println!(
        "  HTTPS kube::Client x{CONCURRENCY}, no watchers:     {quiet_rate:>8.0} writes/s  ({quiet_ok} ok; {:.1}% of baseline)",
        100.0 * quiet_rate / mem_rate
    );
    println!(
        "  HTTPS kube::Client x{CONCURRENCY}, {WATCHERS} watchers:     {http_rate:>8.0} writes/s  ({http_secs:.3} s, {failed} failed; {:.1}% of baseline)",
        100.0 * http_rate / mem_rate
    );
    println!(
        "  watch fan-out: {WATCHERS} watchers received {counts:?} events; lost: {lost}; all delivered after {fanout_secs:.3} s"
    );
    let best = quiet_rate.max(http_rate);
    println!(
        "  goal >= 5000 writes/s over HTTPS: {}",
        if best >= 5000.0 { "met" } else { "NOT met" }
    );
    println!(
        "  RSS: {rss_start:.1} MiB at start, {rss_end:.1} MiB with {} objects in memory",
        3 * OBJECTS
    );
    for w in watchers {
        w.abort();
    }
    server.shutdown().await;
}
