//! Records per second through the trigger to a trivial local function, from a backlog on a
//! 4-shard stream of a real Kinesis emulator (moto_server) and devcluster's API server. The
//! baseline is the invoker calling the same function directly, one call at a time per shard
//! (the order the trigger keeps), measured in the same run. Prints numbers; not a pass/fail
//! test.
//!
//! `cargo bench -p kinesis-trigger --bench throughput` (KINESIS_BENCH_RECORDS, default 20000;
//! KINESIS_BENCH_RUNS, default 3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use futures::StreamExt;
use kubeless_invoke::{Endpoint, Event, FunctionTarget, Invoker, StaticResolver};
use serde_json::json;
use support::*;

const SHARDS: i32 = 4;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `n` records with keys spread over the shards, in batches of 500 (PutRecords' limit).
async fn fill(k: &aws_sdk_kinesis::Client, stream: &str, n: usize) {
    let entries: Vec<PutRecordsRequestEntry> = (0..n)
        .map(|i| {
            PutRecordsRequestEntry::builder()
                .partition_key(format!("key-{}", i % 64))
                .data(Blob::new(json!({ "n": i }).to_string().into_bytes()))
                .build()
                .unwrap()
        })
        .collect();
    for chunk in entries.chunks(500) {
        let out = k
            .put_records()
            .stream_name(stream)
            .set_records(Some(chunk.to_vec()))
            .send()
            .await
            .unwrap();
        assert_eq!(out.failed_record_count(), Some(0));
    }
}

async fn baseline(n: usize) -> f64 {
    let f = RecordingFunction::ok().await;
    let resolver = StaticResolver::single(Endpoint::parse(&format!("http://{}/", f.addr)).unwrap());
    let invoker = Invoker::new(Arc::new(resolver));
    let target = FunctionTarget::new(NS, "base").with_timeout(Duration::from_secs(10));
    let start = Instant::now();
    futures::stream::iter(0..SHARDS as usize)
        .for_each_concurrent(None, |shard| {
            let (invoker, target) = (invoker.clone(), target.clone());
            async move {
                for i in (shard..n).step_by(SHARDS as usize) {
                    let e = Event::new("kinesistriggers.kubeless.io").with_body(format!("r{i}"));
                    assert!(invoker.invoke(&target, &e).await.is_success());
                }
            }
        })
        .await;
    n as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env("KINESIS_BENCH_RECORDS", 20_000);
    let runs = env("KINESIS_BENCH_RUNS", 3);
    let moto = Moto::start();
    let k = moto.kinesis();
    let TestCluster {
        cluster: _cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    create_aws_secret(&client, "aws").await;
    let mut trigger_rates = Vec::new();
    let mut direct_rates = Vec::new();
    for run in 0..runs {
        let stream = format!("bench-{run}");
        create_stream(&k, &stream, SHARDS).await;
        fill(&k, &stream, n).await;
        let function = RecordingFunction::ok().await;
        let name = format!("sink-{run}");
        register_function(&client, &name, function.addr).await;
        // The service as deployed, but for GetRecords' Limit: 10,000 (Kinesis's most) so the
        // bench measures the trigger, not 100 records per 200 ms poll.
        let mut settings =
            kinesis_trigger::Settings::new(kinesis_trigger::Resolution::EndpointSlices);
        settings.timing = test_timing();
        settings.timing.polling.records_limit = 10_000;
        let token = tokio_util::sync::CancellationToken::new();
        let metrics = kubeless_service::Metrics::new("kubeless");
        let mut running = kinesis_trigger::run(client.clone(), settings, &metrics, token.clone());
        running.wait_synced().await;
        let start = Instant::now();
        create_trigger(
            &client,
            &stream,
            json!({
                "function-name": name, "stream": stream, "aws-region": REGION, "secret": "aws",
                "endpoint": moto.endpoint, "startingPosition": "TRIM_HORIZON"
            }),
        )
        .await;
        eventually(
            &format!("{n} records delivered"),
            Duration::from_secs(600),
            || async { (function.count() >= n).then_some(()) },
        )
        .await;
        let took = start.elapsed();
        token.cancel();
        running.join().await;
        let rate = n as f64 / took.as_secs_f64();
        let direct = baseline(n).await;
        println!(
            "run {run}: trigger {rate:.0} records/s ({n} records, {SHARDS} shards, {took:.2?}); \
             direct invoker {direct:.0} calls/s"
        );
        trigger_rates.push(rate);
        direct_rates.push(direct);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "kinesis-trigger median {:.0} records/s; direct invoker median {:.0} calls/s (same run)",
        median(&mut trigger_rates),
        median(&mut direct_rates)
    );
}
