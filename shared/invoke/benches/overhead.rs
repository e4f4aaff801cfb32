//! Invoker overhead: sequential POSTs to a local hyper server through
//!   * a bare hyper-util client sending the same Kubeless headers with fixed values (baseline),
//!   * the invoker (ids, time, JSON detection, traceparent, resolver, timeout, classification),
//!   * a bare reqwest client with the same headers (for reference: why the invoker is not on it),
//!   * the invoker over a [`Lane`](kubeless_invoke::Lane): the calling task's own connection,
//!     driven by that task (what an ordered lane of a trigger uses), instead of the pool's
//!     connection task,
//!
//! in alternating blocks so all see the same machine noise. Prints p50/p99/throughput and the
//! invoker/baseline p50 ratio. Not a pass/fail test.
//!
//! Env: `BENCH_CURRENT=1` runs on a current-thread runtime (less scheduler noise);
//! `BENCH_ONLY=direct|reqwest|invoker` runs 2,000 calls of one client only (for profilers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kubeless_invoke::{
    CallBody, Endpoint, Event, FunctionTarget, Invoker, Lane, RetryPolicy, StaticResolver,
};

const WARMUP: usize = 500;
const BLOCK: usize = 500;
const BLOCKS: usize = 10;
const BODY: &str = r#"{"order":42,"items":["a","b"]}"#;

struct Stats {
    p50: Duration,
    p99: Duration,
    per_sec: f64,
}

fn stats(mut samples: Vec<Duration>, total: Duration) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    Stats {
        p50: at(0.50),
        p99: at(0.99),
        per_sec: samples.len() as f64 / total.as_secs_f64(),
    }
}

fn print(name: &str, s: &Stats) {
    println!(
        "{name:<22}: p50 {:>7.1} us  p99 {:>8.1} us  {:>7.0} calls/s",
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6,
        s.per_sec
    );
}

/// The headers the invoker sends, with fixed values.
fn fixed_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("event-id", "aaaaaaaaaaaaaaaaaaaa"),
        ("event-time", "2026-01-02 03:04:05.678 +0000 UTC"),
        ("event-type", "application/json"),
        ("event-namespace", "bench.kubeless.io"),
        ("ce-specversion", "1.0"),
        ("ce-id", "aaaaaaaaaaaaaaaaaaaa"),
        ("ce-source", "bench.kubeless.io"),
        ("ce-type", "io.kubeless.bench"),
        ("ce-time", "2026-01-02T03:04:05.678Z"),
        ("content-type", "application/json"),
        ("user-agent", "kubeless-invoke/0.1.0"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    h
}

fn main() {
    let rt = if std::env::var_os("BENCH_CURRENT").is_some() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    rt.block_on(async {
        let server = support::TestServer::ok().await;
        let url: hyper::Uri = server.url().parse().unwrap();
        let headers = fixed_headers();

        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.set_nodelay(true);
        let direct: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(http);
        let direct_call = || {
            let mut req = hyper::Request::post(url.clone())
                .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                .unwrap();
            *req.headers_mut() = headers.clone();
            let fut = direct.request(req);
            async move {
                let resp = fut.await.unwrap();
                assert!(resp.status().is_success());
                resp.into_body().collect().await.unwrap();
            }
        };

        // Cargo unifies reqwest's features across the workspace, and some crates ask for
        // `rustls-no-provider`: install one so the client can be built.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let raw = reqwest::Client::builder()
            .tcp_nodelay(true)
            .no_proxy()
            .build()
            .unwrap();
        let raw_url = reqwest::Url::parse(&server.url()).unwrap();
        let raw_call = || async {
            let resp = raw
                .post(raw_url.clone())
                .headers(headers.clone())
                .body(Bytes::from_static(BODY.as_bytes()))
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success());
            resp.bytes().await.unwrap();
        };

        let invoker = Invoker::new(Arc::new(StaticResolver::single(
            Endpoint::parse(&server.url()).unwrap(),
        )));
        let target = FunctionTarget::new("default", "bench");
        let event = Event::new("bench.kubeless.io").with_body(Bytes::from_static(BODY.as_bytes()));
        let invoke_call = || async {
            let out = invoker.invoke(&target, &event).await;
            assert!(out.is_success(), "{:?}", out.error);
        };

        let lane: Lane<CallBody> = Lane::default();
        let once = RetryPolicy::no_retry();
        let lane_call = || async {
            let out = invoker
                .invoke_with_retry_in(Some(&lane), &target, &event, &once)
                .await;
            assert!(out.is_success(), "{:?}", out.error);
        };

        for _ in 0..WARMUP {
            direct_call().await;
            invoke_call().await;
            raw_call().await;
        }
        lane.run(async {
            for _ in 0..WARMUP {
                lane_call().await;
            }
        })
        .await;
        if let Ok(only) = std::env::var("BENCH_ONLY") {
            for _ in 0..2000 {
                match only.as_str() {
                    "direct" => direct_call().await,
                    "reqwest" => raw_call().await,
                    _ => invoke_call().await,
                }
            }
            return;
        }

        let mut samples: [Vec<Duration>; 4] = Default::default();
        let mut totals = [Duration::ZERO; 4];
        for _ in 0..BLOCKS {
            for which in 0..4 {
                let start = Instant::now();
                let block = async {
                    let mut taken = Vec::with_capacity(BLOCK);
                    for _ in 0..BLOCK {
                        let t = Instant::now();
                        match which {
                            0 => direct_call().await,
                            1 => invoke_call().await,
                            2 => raw_call().await,
                            _ => lane_call().await,
                        }
                        taken.push(t.elapsed());
                    }
                    taken
                };
                let taken = if which == 3 {
                    lane.run(block).await
                } else {
                    block.await
                };
                samples[which].extend(taken);
                totals[which] += start.elapsed();
            }
        }
        let [d, i, r, l] = samples;
        let n = d.len();
        let (d, i, r, l) = (
            stats(d, totals[0]),
            stats(i, totals[1]),
            stats(r, totals[2]),
            stats(l, totals[3]),
        );
        println!(
            "sequential POSTs to a local hyper server, {n} per client after {WARMUP} warm-up each"
        );
        print("direct hyper-util", &d);
        print("kubeless invoker", &i);
        print("bare reqwest (ref.)", &r);
        print("invoker in a lane", &l);
        println!(
            "p50 ratio invoker/direct: {:.3} (goal < 1.2); bare reqwest/direct: {:.3}; invoker in a lane/invoker: {:.3}",
            i.p50.as_secs_f64() / d.p50.as_secs_f64(),
            r.p50.as_secs_f64() / d.p50.as_secs_f64(),
            l.p50.as_secs_f64() / i.p50.as_secs_f64()
        );
    });
}
