//! Messages per second through the trigger to a trivial local function, in core NATS and
//! JetStream mode, against a real nats-server and devcluster's API server. The baseline is the
//! invoker calling the same function directly with the same concurrency, measured in the same
//! run. Prints numbers; not a pass/fail test.
//!
//! `cargo bench -p nats-trigger --bench throughput` (NATS_BENCH_MESSAGES, default 20000).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kubeless_invoke::{Endpoint, Event, FunctionTarget, Invoker, StaticResolver};
use serde_json::json;
use support::*;

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

async fn wait_count(f: &RecordingFunction, n: usize, limit: Duration) -> Duration {
    let start = Instant::now();
    while f.count() < n {
        assert!(
            start.elapsed() < limit,
            "only {} of {n} messages arrived",
            f.count()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

async fn baseline(n: usize, concurrency: usize) -> f64 {
    let f = RecordingFunction::echo().await;
    let resolver = StaticResolver::single(Endpoint::parse(&format!("http://{}/", f.addr)).unwrap());
    let invoker = Invoker::new(Arc::new(resolver));
    let target = FunctionTarget::new("default", "base").with_timeout(Duration::from_secs(10));
    let start = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let (invoker, target) = (invoker.clone(), target.clone());
            async move {
                let e = Event::new("natstriggers.kubeless.io").with_body(format!("m{i}"));
                assert!(invoker.invoke(&target, &e).await.is_success());
            }
        })
        .await;
    rate(n, start.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("NATS_BENCH_MESSAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let publisher = async_nats::connect(&nats_server.url).await.unwrap();
    let js = async_nats::jetstream::new(publisher.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "BENCH".into(),
        subjects: vec!["bench.js.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();

    println!("nats-trigger throughput, {n} messages per row, trivial local HTTP function");
    println!("{:<34} {:>12}", "mode", "messages/s");
    let replica = Replica::start(&client, &nats_server.url).await;
    let mut active = 0;
    for in_flight in [1usize, 32] {
        let base = baseline(n, in_flight).await;
        println!(
            "{:<34} {:>12.0}",
            format!("baseline: invoker direct, c={in_flight}"),
            base
        );

        // core NATS
        let name = format!("core{in_flight}");
        let f = RecordingFunction::echo().await;
        register_function(&client, &name, json!({"bench": name}), "10", f.addr).await;
        create_trigger(
            &client,
            &name,
            json!({"topic": format!("bench.{name}"),
            "functionSelector": {"matchLabels": {"bench": name}}, "maxInFlight": in_flight}),
            json!(null),
        )
        .await;
        active += 1;
        replica.wait_active(active).await;
        let start = Instant::now();
        for i in 0..n {
            publisher
                .publish(format!("bench.{name}"), format!("m{i}").into())
                .await
                .unwrap();
        }
        publisher.flush().await.unwrap();
        wait_count(&f, n, Duration::from_secs(300)).await;
        let core = rate(n, start.elapsed());
        println!(
            "{:<34} {:>12.0}  ({:.0}% of baseline)",
            format!("core NATS, maxInFlight={in_flight}"),
            core,
            100.0 * core / base
        );

        // JetStream
        let name = format!("js{in_flight}");
        let f = RecordingFunction::echo().await;
        register_function(&client, &name, json!({"bench": name}), "10", f.addr).await;
        create_trigger(
            &client,
            &name,
            json!({"topic": format!("bench.js.{name}"),
            "functionSelector": {"matchLabels": {"bench": name}}, "maxInFlight": in_flight,
            "jetStream": {"enabled": true, "stream": "BENCH"}}),
            json!(null),
        )
        .await;
        active += 1;
        replica.wait_active(active).await;
        let start = Instant::now();
        let mut acks = Vec::with_capacity(1000);
        for i in 0..n {
            acks.push(
                js.publish(format!("bench.js.{name}"), format!("m{i}").into())
                    .await
                    .unwrap(),
            );
            if acks.len() == 1000 {
                for a in acks.drain(..) {
                    a.await.unwrap();
                }
            }
        }
        for a in acks.drain(..) {
            a.await.unwrap();
        }
        wait_count(&f, n, Duration::from_secs(300)).await;
        let jet = rate(n, start.elapsed());
        println!(
            "{:<34} {:>12.0}  ({:.0}% of baseline)",
            format!("JetStream, maxInFlight={in_flight}"),
            jet,
            100.0 * jet / base
        );
    }
    replica.stop().await;
    cluster.shutdown().await;
}
