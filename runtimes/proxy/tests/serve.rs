//! The runtime contract, checked against the real binary for Python, Node.js, Ruby, PHP, Go and
//! Java.
#![cfg(test)]

mod common;

use std::time::{Duration, Instant};

use common::{Lang, Opts, Runtime, client, metric, otlp_receiver, post_text};

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
    let pid1 = post_text(&c, &rt.url("/"), "x").await;
    let r = c.post(rt.url("/")).body("boom").send().await.unwrap();
    assert_eq!(r.status(), 500);
    let pid2 = post_text(&c, &rt.url("/"), "x").await;
    assert!(pid1.parse::<u32>().is_ok(), "{pid1}");
    assert_eq!(pid1, pid2, "the worker must survive an exception");
    assert!(
        rt.stderr().contains("kaboom"),
        "the exception is logged: {}",
        rt.stderr()
    );
}

async fn big_and_binary_bodies(lang: Lang) {
    let rt = Runtime::serving(lang, "echo").await;
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
    let rt = Runtime::serving(lang, "boom").await;
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
    let rt = Runtime::serving(lang, "respond").await;
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

macro_rules! every_language {
    ($($case:ident),* $(,)?) => {
        mod python {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Python).await })*
        }
        mod nodejs {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Nodejs).await })*
        }
        mod ruby {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Ruby).await })*
        }
        mod php {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Php).await })*
        }
        mod go {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Go).await })*
        }
        mod java {
            $(#[tokio::test] async fn $case() { super::$case(super::Lang::Java).await })*
        }
    };
}

every_language!(
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

/// A header sent twice reaches a Python function once, its values joined with ", ", and the
/// header dict answers any case.
#[tokio::test]
async fn python_joins_repeated_headers() {
    let rt = Runtime::serving(Lang::Python, "describe").await;
    let describe = |headers: &[(&str, &str)]| {
        let mut req = client().get(rt.url("/"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        async move {
            let r = req.send().await.unwrap();
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let v = describe(&[
        ("event-id", "id-2"),
        ("X-Repeated", "one"),
        ("x-repeated", "two"),
    ])
    .await;
    assert_eq!(v["repeated"], "one, two");
    assert_eq!(v["headers-mixed-case"], "id-2");
    assert_eq!(v["has-mixed-case"], true);
    assert_eq!(v["event-id"], "id-2");
    // Without a repeated header the names stay distinct.
    let v = describe(&[("event-id", "id-3"), ("X-Repeated", "only")]).await;
    assert_eq!(v["repeated"], "only");
    assert_eq!(v["event-id"], "id-3");
    // Without the header: None, and not in the dict.
    let v = describe(&[]).await;
    assert_eq!(v["repeated"], serde_json::Value::Null);
    assert_eq!(v["has-mixed-case"], false);
}

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

async fn oversized_reply_fails_cleanly(lang: Lang) {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "big_reply",
            workers: 1,
            env: vec![("KUBELESS_MAX_REPLY_BYTES", "1000000".into())],
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let start = Instant::now();
    let r = c.post(rt.url("/")).body("big").send().await.unwrap();
    assert_eq!(r.status(), 500);
    assert!(
        r.text().await.unwrap().contains("reply size limit"),
        "the answer names the limit"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    // The worker was replaced; the next call is served.
    let r = c.post(rt.url("/")).body("small").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "small");
    assert!(
        rt.stderr().contains("over the 1000000 byte limit"),
        "{}",
        rt.stderr()
    );
}

macro_rules! every_language_more {
    ($($case:ident),* $(,)?) => {
        mod each_language {
            $(mod $case {
                #[tokio::test] async fn python() { super::super::$case(super::super::Lang::Python).await }
                #[tokio::test] async fn nodejs() { super::super::$case(super::super::Lang::Nodejs).await }
                #[tokio::test] async fn ruby() { super::super::$case(super::super::Lang::Ruby).await }
                #[tokio::test] async fn php() { super::super::$case(super::super::Lang::Php).await }
            })*
        }
    };
}

every_language_more!(
    oversized_reply_fails_cleanly,
    server_span_is_child_of_the_callers_traceparent
);

/// Time a call takes, with its status and body.
async fn timed_call(rt: &Runtime, body: &'static str) -> (u16, String, Duration) {
    let start = Instant::now();
    let r = client().post(rt.url("/")).body(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap(), start.elapsed())
}

#[tokio::test]
async fn node_throw_in_a_timer_answers_500_at_once_and_replaces_the_worker() {
    let rt = Runtime::start(
        Lang::Nodejs,
        Opts {
            handler: "async_throw",
            workers: 1,
            timeout: "60",
            ..Opts::default()
        },
    )
    .await;
    let (_, pid1, _) = timed_call(&rt, "x").await;
    // The timer from that call throws after the answer: the worker retires after its next one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, pid2, _) = timed_call(&rt, "x").await;
    assert_eq!(status, 200, "an error between calls fails no call");
    assert_eq!(
        pid1, pid2,
        "the same worker answers once more, then retires"
    );
    // A call whose promise never settles: the throw answers it with 500, not the 60 s timeout.
    let (status, _, took) = timed_call(&rt, "hang").await;
    assert_eq!(status, 500);
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (status, pid3, _) = timed_call(&rt, "x").await;
    assert_eq!(status, 200);
    assert_ne!(pid3, pid2, "the worker was replaced");
    assert!(rt.stderr().contains("async kaboom"), "{}", rt.stderr());
}

#[tokio::test]
async fn node_unhandled_rejection_answers_500_at_once() {
    let rt = Runtime::start(
        Lang::Nodejs,
        Opts {
            handler: "reject_later",
            workers: 1,
            timeout: "60",
            ..Opts::default()
        },
    )
    .await;
    let (status, _, took) = timed_call(&rt, "x").await;
    assert_eq!(status, 500);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(rt.stderr().contains("rejected kaboom"), "{}", rt.stderr());
    let m = client()
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
}

#[tokio::test]
async fn node_response_is_a_writable_stream() {
    let rt = Runtime::serving(Lang::Nodejs, "stream_pipe").await;
    let r = client().get(rt.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/x-fixture");
    let want = std::fs::read(Lang::Nodejs.fixtures().join("funcs.js")).unwrap();
    assert_eq!(&r.bytes().await.unwrap()[..], &want[..], "the piped file");
    let rt = Runtime::serving(Lang::Nodejs, "stream_write").await;
    let r = client().get(rt.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.text().await.unwrap(), "abc");
}

#[tokio::test]
async fn python_thread_exception_fails_its_call_not_the_worker() {
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            handler: "thread_boom",
            workers: 1,
            timeout: "60",
            ..Opts::default()
        },
    )
    .await;
    // The handler waits for a thread that died: 500 at once instead of the 60 s timeout.
    let (status, _, took) = timed_call(&rt, "wait").await;
    assert_eq!(status, 500);
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (status, pid1, _) = timed_call(&rt, "x").await;
    assert_eq!(status, 200);
    // That call's thread raises after the answer: logged, and the worker serves on.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, pid2, _) = timed_call(&rt, "x").await;
    assert_eq!(status, 200);
    assert_eq!(pid1, pid2);
    let err = rt.stderr();
    assert!(err.matches("thread kaboom").count() >= 2, "{err}");
}

async fn wait_workers(rt: &Runtime, want: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let n = rt.worker_pids().len();
        if n == want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn pool_grows_with_concurrent_calls_and_shrinks_when_idle() {
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            handler: "slow",
            workers: 0,
            env: vec![
                ("KUBELESS_MAX_WORKERS", "3".into()),
                ("KUBELESS_WORKER_IDLE_TIMEOUT", "1.5".into()),
                // No CPU limit here, whatever the machine's cgroup says.
                ("KUBELESS_CGROUP_ROOT", "/nonexistent".into()),
            ],
            ..Opts::default()
        },
    )
    .await;
    assert_eq!(
        rt.worker_pids().len(),
        1,
        "an idle pool starts with one worker"
    );
    // Rounds of 3 concurrent 0.3 s calls: the pool grows to the cap, never past it.
    let mut pids = std::collections::HashSet::new();
    for _ in 0..4 {
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let c = client();
                let url = rt.url("/");
                tokio::spawn(async move { c.get(url).send().await.unwrap().text().await.unwrap() })
            })
            .collect();
        for h in calls {
            pids.insert(h.await.unwrap());
        }
        assert!(rt.worker_pids().len() <= 3, "over the cap");
    }
    assert_eq!(pids.len(), 3, "calls ran on 3 workers: {pids:?}");
    assert_eq!(rt.worker_pids().len(), 3);
    // Idle for longer than the idle timeout: back to the minimum.
    let n = wait_workers(&rt, 1, Duration::from_secs(15)).await;
    assert_eq!(n, 1, "idle workers above the minimum exit");
    let r = client().get(rt.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn cpu_limit_sizes_the_pool() {
    let cgroup = tempfile::tempdir().unwrap();
    std::fs::write(cgroup.path().join("cpu.max"), "250000 100000\n").unwrap();
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            workers: 0,
            env: vec![("KUBELESS_CGROUP_ROOT", cgroup.path().display().to_string())],
            ..Opts::default()
        },
    )
    .await;
    // 2.5 CPUs -> 3 workers, all started up front.
    assert_eq!(wait_workers(&rt, 3, Duration::from_secs(10)).await, 3);
    assert!(
        rt.stderr().contains("cpu_limit=Some(2.5)"),
        "{}",
        rt.stderr()
    );
}

#[tokio::test]
async fn access_log_is_kubeless_combined_by_default_and_timed_on_request() {
    let rt = Runtime::start(Lang::Python, Opts::default()).await;
    let r = client()
        .get(rt.url("/a/b?c=d"))
        .header("user-agent", "fixture-agent/1.0")
        .header("referer", "http://example.test/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = rt.stdout();
    let line = log.lines().find(|l| l.contains("/a/b?c=d")).expect(&log);
    // 127.0.0.1 - - [24/Nov/2026:18:29:13 +0000] "GET /a/b?c=d HTTP/1.1" 200 11 "http://example.test/" "fixture-agent/1.0"
    let (ip, rest) = line.split_once(" - - [").unwrap();
    assert_eq!(ip, "127.0.0.1");
    let (date, rest) = rest.split_once("] ").unwrap();
    assert!(
        chrono::DateTime::parse_from_str(date, "%d/%b/%Y:%H:%M:%S %z").is_ok(),
        "{date}"
    );
    assert_eq!(
        rest,
        "\"GET /a/b?c=d HTTP/1.1\" 200 11 \"http://example.test/\" \"fixture-agent/1.0\""
    );
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            env: vec![("KUBELESS_ACCESS_LOG_FORMAT", "timed".into())],
            ..Opts::default()
        },
    )
    .await;
    client().get(rt.url("/t")).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = rt.stdout();
    let line = log.lines().find(|l| l.contains("\"GET /t ")).expect(&log);
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{line}");
    assert!(
        rest.starts_with("127.0.0.1 \"GET /t HTTP/1.1\" 200 11 ") && rest.ends_with("ms"),
        "{line}"
    );
}

async fn server_span_is_child_of_the_callers_traceparent(lang: Lang) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let (endpoint, got) = otlp_receiver().await;
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "trace",
            workers: 1,
            env: vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                ("OTEL_SERVICE_NAME", "fixture-fn".into()),
                ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
            ],
            ..Opts::default()
        },
    )
    .await;
    let v: serde_json::Value = client()
        .get(rt.url("/"))
        .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The function sees the proxy's span as its parent: same trace, a new span id.
    let tp = v["header"].as_str().expect("traceparent header").to_owned();
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    assert_eq!(parts[1], TRACE, "{tp}");
    assert_ne!(parts[2], PARENT, "{tp}");
    assert_eq!(
        v["context"], v["header"],
        "context carries the same trace context"
    );
    let span_id = parts[2].to_owned();
    // The exported server span: child of the caller's span, parent of the function's context.
    let deadline = Instant::now() + Duration::from_secs(30);
    let span = loop {
        let bodies: Vec<bytes::Bytes> = got.lock().unwrap().clone();
        let found = bodies.iter().find_map(|b| {
            let req = ExportTraceServiceRequest::decode(b.clone()).unwrap();
            req.resource_spans.into_iter().find_map(|rs| {
                let service = rs.resource.as_ref().and_then(|r| {
                    r.attributes
                        .iter()
                        .find(|a| a.key == "service.name")
                        .map(|a| format!("{:?}", a.value))
                });
                rs.scope_spans
                    .into_iter()
                    .flat_map(|s| s.spans)
                    .find(|s| hex::encode(&s.trace_id) == TRACE)
                    .map(|s| (s, service))
            })
        });
        if let Some(f) = found {
            break f;
        }
        assert!(Instant::now() < deadline, "no span exported within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (span, service) = span;
    assert_eq!(hex::encode(&span.parent_span_id), PARENT);
    assert_eq!(hex::encode(&span.span_id), span_id);
    assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(span.name, "GET /");
    assert!(service.unwrap_or_default().contains("fixture-fn"));
}

#[tokio::test]
async fn without_an_otlp_endpoint_the_callers_traceparent_passes_through() {
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let rt = Runtime::serving(Lang::Python, "trace").await;
    let v: serde_json::Value = client()
        .get(rt.url("/"))
        .header("traceparent", tp)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["header"], tp);
    assert_eq!(v["context"], tp);
}

/// Four Python workers printing at once: every line of the log is one whole `print`, never two
/// workers' pieces in one line (PYTHONUNBUFFERED alone wrote each argument separately).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_print_lines_never_interleave() {
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            handler: "shout",
            workers: 4,
            ..Opts::default()
        },
    )
    .await;
    let (calls, senders) = (1500, 30);
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..senders {
        let (c, url) = (client(), rt.url("/"));
        tasks.spawn(async move {
            for i in (s..calls).step_by(senders) {
                let r = c.post(&url).body(format!("e{i}")).send().await.unwrap();
                assert_eq!(r.status(), 200);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let mut events = 0;
    let log = rt.stdout();
    let padding = "x".repeat(200);
    for line in log
        .lines()
        .filter(|l| l.contains("EVENT") || l.contains("END"))
    {
        let parts: Vec<&str> = line.split(' ').collect();
        assert!(
            parts.len() == 5
                && parts[0] == "EVENT"
                && parts[2] == padding
                && parts[3] == "END"
                && parts[1] == parts[4],
            "a line holds one print, whole: {line:?}"
        );
        events += 1;
    }
    assert_eq!(events, calls, "every print is a line of its own");
}
