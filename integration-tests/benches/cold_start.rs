//! Cold start of a function scaled to zero, beside the warm call, measured in the same run:
//! devcluster with process pods, the function-controller and nats-trigger binaries, a Python
//! and a Node.js function with scale to zero (`idleAfter: 3s`; activity is written every second while calls flow). A NATS request through the
//! trigger is the call: the trigger holds it while the function wakes, so its latency is zero
//! to first answer. Prints p50 and p99 over `COLD_START_WAKES` wakes (default 20) and over
//! `COLD_START_WARM` warm calls (default 200).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p integration-tests --bench
//! cold_start` (the binaries are taken from the bench's own profile directory; with
//! `--profile dev` it measures the debug binaries `cargo build --workspace --bins` left).
//! Then the function-controller is restarted with a warm pool (`--warm-pool
//! python3.11,nodejs20`) and each function is woken `COLD_START_WAKES` times again: the
//! "warm pool" rows.

use std::time::{Duration, Instant};

use integration_tests::scale::{
    NODE, PYTHON, function, idle_pool_pods, nats_call, start_service, wait_at_zero,
};
use integration_tests::{require_bins, target_debug_dir};
use kube::Api;
use kube::api::PostParams;
use kubeless_api::{Function, NatsTrigger};
use kubeless_testkit::{NS, NatsServer, TestCluster};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut d: Vec<Duration>) -> String {
    d.sort();
    format!(
        "p50 {:>8.1} ms  p99 {:>8.1} ms  (n={})",
        percentile(&d, 0.5).as_secs_f64() * 1000.0,
        percentile(&d, 0.99).as_secs_f64() * 1000.0,
        d.len()
    )
}

/// Waits until `runtime`'s pool has an idle, ready pod (the pool refills after each wake).
async fn wait_pool_ready(client: &kube::Client, runtime: &str) {
    kubeless_testkit::eventually(
        &format!("an idle {runtime} pool pod"),
        Duration::from_secs(120),
        || async { (!idle_pool_pods(client, runtime).await.is_empty()).then_some(()) },
    )
    .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let wakes = env_usize("COLD_START_WAKES", 20);
    let warm_calls = env_usize("COLD_START_WARM", 200);
    require_bins(&["function-controller", "nats-trigger", "kubeless-runtime"]);
    println!("binaries from {}", target_debug_dir().display());
    let nats = NatsServer::start();
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    let controller = start_service(&c, "function-controller", &[]);
    let _trigger = start_service(&c, "nats-trigger", &[("NATS_URL", nats.url.clone())]);
    let client = async_nats::connect(&nats.url)
        .await
        .unwrap_or_else(|e| panic!("connecting to NATS: {e}"));
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    let triggers: Api<NatsTrigger> = Api::namespaced(c.client.clone(), NS);
    let functions = [("py", "python3.11", PYTHON), ("node", "nodejs20", NODE)];
    let mut rows = Vec::new();
    for (name, runtime, code) in functions {
        let mut f = function(name, runtime, code, "3s");
        f.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("bench".into(), name.into());
        fns.create(&PostParams::default(), &f)
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
        let subject = format!("cold.{name}");
        let t: NatsTrigger = serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"topic": subject, "functionSelector": {"matchLabels": {"bench": name}}}
        }))
        .unwrap_or_else(|e| panic!("trigger manifest: {e}"));
        triggers
            .create(&PostParams::default(), &t)
            .await
            .unwrap_or_else(|e| panic!("creating the trigger {name}: {e}"));
        // Up (or woken: 2 s after its creation it may already be at zero) and subscribed once
        // a request is answered "ok". Until the trigger and the function are both there, a
        // request gets no answer or an error reply: ask again.
        let first = Instant::now();
        loop {
            let reply = tokio::time::timeout(
                Duration::from_secs(5),
                client.request(subject.clone(), "bench".into()),
            )
            .await;
            if let Ok(Ok(m)) = reply
                && m.payload.as_ref() == b"ok"
            {
                break;
            }
            assert!(
                first.elapsed() < Duration::from_secs(180),
                "{name} never answered"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let mut warm = Vec::with_capacity(warm_calls);
        for _ in 0..warm_calls {
            warm.push(nats_call(&client, &subject, "bench").await);
        }
        let mut cold = Vec::with_capacity(wakes);
        for _ in 0..wakes {
            wait_at_zero(&fns, name, Duration::from_secs(120)).await;
            cold.push(nats_call(&client, &subject, "bench").await);
        }
        rows.push(format!(
            "{runtime:<11} warm call              {}",
            summary(warm)
        ));
        rows.push(format!(
            "{runtime:<11} cold start, no pool    {}",
            summary(cold)
        ));
    }
    // The same wakes with a warm pool of one pod per runtime.
    drop(controller);
    let _controller = start_service(
        &c,
        "function-controller",
        &[
            ("KUBELESS_WARM_POOL", "python3.11,nodejs20".into()),
            ("KUBELESS_NAMESPACE", NS.into()),
        ],
    );
    for (name, runtime, _) in functions {
        let subject = format!("cold.{name}");
        let mut cold = Vec::with_capacity(wakes);
        for _ in 0..wakes {
            wait_at_zero(&fns, name, Duration::from_secs(120)).await;
            wait_pool_ready(&c.client, runtime).await;
            cold.push(nats_call(&client, &subject, "bench").await);
        }
        rows.push(format!(
            "{runtime:<11} cold start, warm pool  {}",
            summary(cold)
        ));
    }
    rows.sort();
    for r in rows {
        println!("{r}");
    }
    c.shutdown().await;
}
