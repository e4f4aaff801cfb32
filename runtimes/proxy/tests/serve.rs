//! The runtime contract, checked against the real binary for Python, Node.js, Go and Java.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Lang, Opts, Runtime, client, metric};

async fn hello_any_method_and_path(lang: Lang) {
    let rt = Runtime::start(lang, Opts::default()).await;
    let c = client();
    let r = c.get(rt.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
        let r = c
            .request(method.parse().unwrap(), rt.url("/some/deep/path?x=1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{method}");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(r.text().await.unwrap(), "hello world");
    }
    // One access-log line per request (5 calls + /healthz polls), each with method, path and status.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = rt.stdout();
    let calls: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("/some/deep/path?x=1"))
        .collect();
    assert_eq!(calls.len(), 5, "{log}");
    assert!(
        calls
            .iter()
            .any(|l| l.contains("\"PATCH /some/deep/path?x=1") && l.contains(" 200 ")),
        "{log}"
    );
}

async fn event_and_context(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "describe",
            timeout: "42",
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let v: serde_json::Value = c
        .post(rt.url("/path?q=1&r=two"))
        .header("content-type", "application/json")
        .header("event-id", "id-1")
        .header("event-type", "application/json")
        .header("event-time", "2026-01-01T00:00:00Z")
        .header("event-namespace", "kafkatriggers.kubeless.io")
        .header("X-Test", "yes")
        .body(r#"{"a":[1,2]}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"], serde_json::json!({"a": [1, 2]}));
    assert_eq!(v["event-id"], "id-1");
    assert_eq!(v["event-type"], "application/json");
    assert_eq!(v["event-time"], "2026-01-01T00:00:00Z");
    assert_eq!(v["event-namespace"], "kafkatriggers.kubeless.io");
    assert_eq!(v["context"]["function-name"], lang.handler("describe"));
    assert_eq!(v["context"]["timeout"], "42");
    assert_eq!(v["context"]["runtime"], lang.runtime());
    assert_eq!(v["context"]["memory-limit"], "128Mi");
    assert_eq!(v["method"], "POST");
    assert_eq!(v["path"], "/path");
    assert_eq!(v["query"], serde_json::json!({"q": "1", "r": "two"}));
    assert_eq!(v["header"], "yes");
    // Not JSON: the body arrives as text.
    let v: serde_json::Value = c
        .put(rt.url("/"))
        .header("content-type", "text/plain")
        .body("just text")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"], "just text");
    assert_eq!(v["method"], "PUT");
}

async fn timeout_then_next_call_works(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "spin",
            workers: 1,
            timeout: "1",
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let start = Instant::now();
    let r = c.post(rt.url("/")).body("spin").send().await.unwrap();
    assert_eq!(r.status(), 408);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // The only worker was killed and replaced; the next call must work.
    let r = c.post(rt.url("/")).body("fine").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ok");
    let m = c
        .get(rt.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(&m, "function_failures_total{method=\"POST\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "function_calls_total{method=\"POST\"}"),
        Some(2.0),
        "{m}"
    );
}

async fn exception_500_and_worker_lives(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "boom",
            workers: 1,
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let pid1 = c
        .post(rt.url("/"))
        .body("x")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let r = c.post(rt.url("/")).body("boom").send().await.unwrap();
    assert_eq!(r.status(), 500);
    let pid2 = c
        .post(rt.url("/"))
        .body("x")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(pid1.parse::<u32>().is_ok(), "{pid1}");
    assert_eq!(pid1, pid2, "the worker must survive an exception");
    assert!(
        rt.stderr().contains("kaboom"),
        "the exception is logged: {}",
        rt.stderr()
    );
}

async fn big_and_binary_bodies(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "echo",
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    // 10 MB of pseudo-random bytes, every byte value present.
    let mut x: u32 = 12345;
    let big: Vec<u8> = (0..10 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    let r = c
        .post(rt.url("/"))
        .header("content-type", "application/octet-stream")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    let back = r.bytes().await.unwrap();
    assert_eq!(back.len(), big.len());
    assert!(back[..] == big[..], "10 MB body changed on the way");
    // Small binary body that is not valid UTF-8, no content type.
    let bin: Vec<u8> = (0..=255u8).rev().chain(0..=255u8).collect();
    let back = c
        .post(rt.url("/"))
        .body(bin.clone())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&back[..], &bin[..]);
}

async fn concurrent_calls_queue(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "slow",
            workers: 3,
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let start = Instant::now();
    let calls = (0..6).map(|_| {
        let c = c.clone();
        let url = rt.url("/");
        tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    });
    let results = futures_join(calls.collect()).await;
    let took = start.elapsed();
    assert!(results.iter().all(|(s, _)| *s == 200), "{results:?}");
    // 6 calls of 0.3 s on 3 workers: two rounds, in parallel but queued.
    assert!(
        took >= Duration::from_millis(580),
        "calls did not queue: {took:?}"
    );
    assert!(
        took < Duration::from_millis(1700),
        "calls did not run in parallel: {took:?}"
    );
    let pids: std::collections::HashSet<_> = results.iter().map(|(_, p)| p.clone()).collect();
    assert!(pids.len() >= 2 && pids.len() <= 3, "{pids:?}");
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

async fn metrics_after_n_calls(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "boom",
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    for _ in 0..5 {
        assert_eq!(c.get(rt.url("/")).send().await.unwrap().status(), 200);
    }
    for body in ["a", "boom", "b"] {
        c.post(rt.url("/")).body(body).send().await.unwrap();
    }
    let r = c.get(rt.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let m = r.text().await.unwrap();
    assert_eq!(
        metric(&m, "function_calls_total{method=\"GET\"}"),
        Some(5.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "function_calls_total{method=\"POST\"}"),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "function_failures_total{method=\"GET\"}"),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "function_failures_total{method=\"POST\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "function_duration_seconds_count{method=\"GET\"}"),
        Some(5.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "function_duration_seconds_bucket{le=\"+Inf\",method=\"POST\"}"
        ),
        Some(3.0),
        "{m}"
    );
    assert!(
        m.contains("# TYPE function_duration_seconds histogram"),
        "{m}"
    );
    // /healthz and /metrics are not function calls.
    assert!(!m.contains("method=\"HEAD\""));
}

async fn response_objects(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "respond",
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let r = c.get(rt.url("/?kind=object")).send().await.unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["x-custom"], "yes");
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!({"created": true})
    );
    let r = c.get(rt.url("/?kind=tuple")).send().await.unwrap();
    assert_eq!(r.status(), 418);
    assert_eq!(r.headers()["x-custom"], "tuple");
    assert_eq!(r.text().await.unwrap(), "teapot");
    let r = c.get(rt.url("/?kind=bytes")).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(&r.bytes().await.unwrap()[..], &[0u8, 1, 2, 255]);
    let r = c.get(rt.url("/?kind=list")).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!([1, 2, 3])
    );
    let r = c.get(rt.url("/?kind=html")).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/html");
    assert_eq!(r.text().await.unwrap(), "<b>hi</b>");
    let r = c.get(rt.url("/")).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.text().await.unwrap(), "plain");
}

async fn async_handler(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "asleep",
            workers: 1,
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    for i in 0..3 {
        let v: serde_json::Value = c
            .post(rt.url("/"))
            .header("content-type", "text/plain")
            .body(format!("n{i}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"async": true, "data": format!("n{i}")})
        );
    }
}

async fn load_failure_exits_nonzero(lang: Lang) {
    if lang == Lang::Go {
        // Go resolves the handler when it compiles: the compile step fails and names it,
        // and the runtime then refuses to start without a worker binary.
        let vol = tempfile::tempdir().unwrap();
        common::fixture_copy(lang, vol.path());
        let out = common::compile(lang, vol.path(), "No_such_function");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("No_such_function"), "{stderr}");
        let opts = Opts {
            handler: "No_such_function",
            volume: Some(vol.path().to_path_buf()),
            ..Opts::default()
        };
        let out = common::serve_command(lang, &opts, common::free_port())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(".kubeless-go/function"), "{stderr}");
        return;
    }
    let opts = Opts {
        handler: "no_such_function",
        ..Opts::default()
    };
    let out = common::serve_command(lang, &opts, common::free_port())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no_such_function"), "{stderr}");
}

macro_rules! all_languages {
    ($($case:ident),* $(,)?) => {
        mod python {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Python).await })*
        }
        mod nodejs {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Nodejs).await })*
        }
        mod go {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Go).await })*
        }
        mod java {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Java).await })*
        }
    };
}

all_languages!(
    hello_any_method_and_path,
    event_and_context,
    timeout_then_next_call_works,
    exception_500_and_worker_lives,
    big_and_binary_bodies,
    concurrent_calls_queue,
    metrics_after_n_calls,
    response_objects,
    async_handler,
    load_failure_exits_nonzero,
);

#[tokio::test]
async fn noop_worker_serves() {
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            env: vec![("KUBELESS_WORKER", "noop".into())],
            ..Opts::default()
        },
    )
    .await;
    let r = client().get(rt.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello world");
}
