//! Bench: 1,000 Functions created at once on devcluster (pod runner off); how long until every
//! one has its ConfigMap, Deployment and Service, the per-Function latency, and the controller's
//! memory idle and at 1,000. The controller is the real binary, run as a child process.
//!
//! Baseline in the same run: the time this process needs to create 1,000 plain ConfigMaps
//! itself (the API server's write floor for one object per function).
//!
//! Run: `cargo bench -p function-controller --bench thousand_functions`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Options};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Service},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use kubeless_api::Function;
use serde_json::json;

const N: usize = 1000;
const PARALLEL: usize = 64;

fn controller_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "build",
        "-p",
        "function-controller",
        "--bin",
        "function-controller",
    ]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("cargo build of the controller");
    assert!(status.success(), "building function-controller failed");
    profile_dir.join("function-controller")
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        // Our own child, by PID.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn create_namespace(client: &Client, name: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bin = controller_binary();
    let dir = tempfile::Builder::new()
        .prefix("fcb")
        .tempdir_in("/tmp")
        .unwrap();
    let mut options = Options::for_tests(dir.path().join("s"));
    options.images_dir = None;
    let cluster = DevCluster::start(options).await.expect("devcluster");
    let client = cluster.client().await.unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &kubeless_api::crd::<Function>())
        .await
        .unwrap();
    for ns in ["bench", "baseline"] {
        create_namespace(&client, ns).await;
    }
    let fns: Api<Function> = Api::namespaced(client.clone(), "bench");
    for _ in 0..50 {
        if fns.list(&ListParams::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Baseline: N plain ConfigMaps written by this process.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "baseline");
    let t = Instant::now();
    stream::iter(0..N)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i}")},
                    "data": {"handler": "hello.handler", "hello.py": "def handler(e, c):\n    return 1\n"}
                }))
                .unwrap();
                cms.create(&PostParams::default(), &cm).await.map(drop)
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let baseline = t.elapsed();

    let child = Command::new(&bin)
        .args(["--admin-addr", "127.0.0.1:0", "--log-level", "warn"])
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("KUBELESS_NAMESPACE", "kubeless")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the controller");
    let pid = child.id();
    let controller = Controller(child);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle = rss_kib(pid, "VmRSS:");

    // Watch the children and note when each first appears.
    let seen: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let done = Arc::new(tokio::sync::Notify::new());
    let wc = watcher::Config::default().labels("created-by=kubeless");
    let streams = vec![
        watcher(
            Api::<ConfigMap>::namespaced(client.clone(), "bench"),
            wc.clone(),
        )
        .applied_objects()
        .map_ok(|o| ("ConfigMap".to_string(), o.name_any()))
        .boxed(),
        watcher(
            Api::<Deployment>::namespaced(client.clone(), "bench"),
            wc.clone(),
        )
        .applied_objects()
        .map_ok(|o| ("Deployment".to_string(), o.name_any()))
        .boxed(),
        watcher(Api::<Service>::namespaced(client.clone(), "bench"), wc)
            .applied_objects()
            .map_ok(|o| ("Service".to_string(), o.name_any()))
            .boxed(),
    ];
    let (s, d) = (seen.clone(), done.clone());
    let watch_task = tokio::spawn(async move {
        let mut all = stream::select_all(streams);
        while let Some(item) = all.next().await {
            if let Ok(key) = item {
                let mut m = s.lock().unwrap();
                m.entry(key).or_insert_with(Instant::now);
                if m.len() >= 3 * N {
                    d.notify_one();
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let t0 = Instant::now();
    let st = started.clone();
    stream::iter(0..N)
        .map(|i| {
            let fns = fns.clone();
            let st = st.clone();
            async move {
                let name = format!("fn-{i}");
                let f: Function = serde_json::from_value(json!({
                    "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
                    "metadata": {"name": name},
                    "spec": {"handler": "hello.handler", "runtime": "python3.12",
                             "function": format!("def handler(e, c):\n    return {i}\n")}
                }))
                .unwrap();
                st.lock().unwrap().insert(name, Instant::now());
                fns.create(&PostParams::default(), &f).await.map(drop)
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let created_in = t0.elapsed();
    let finished = tokio::time::timeout(Duration::from_secs(120), done.notified()).await;
    let total = t0.elapsed();
    let rss_loaded = rss_kib(pid, "VmRSS:");
    let rss_peak = rss_kib(pid, "VmHWM:");
    watch_task.abort();

    let seen = seen.lock().unwrap().clone();
    let started = started.lock().unwrap().clone();
    let mut per_fn: Vec<Duration> = started
        .iter()
        .filter_map(|(name, t)| {
            let last = ["ConfigMap", "Deployment", "Service"]
                .iter()
                .map(|k| seen.get(&(k.to_string(), name.clone())).copied())
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .max()?;
            Some(last.saturating_duration_since(*t))
        })
        .collect();
    per_fn.sort();
    drop(controller);
    cluster.shutdown().await;

    println!("function-controller bench: {N} Functions, devcluster, pod runner off");
    if finished.is_err() {
        println!(
            "  NOT COMPLETE after 120 s: {} of {} children seen",
            seen.len(),
            3 * N
        );
    }
    println!(
        "  baseline: this process creating {N} ConfigMaps: {:.2} s",
        baseline.as_secs_f64()
    );
    println!(
        "  creating the {N} Functions took          {:.2} s",
        created_in.as_secs_f64()
    );
    println!(
        "  all have ConfigMap+Deployment+Service:  {:.2} s  (goal <= 10 s; {:.1}x the baseline)",
        total.as_secs_f64(),
        total.as_secs_f64() / baseline.as_secs_f64().max(1e-9)
    );
    println!(
        "  amortized per Function (total / {N}):   {:.2} ms",
        total.as_secs_f64() * 1e3 / N as f64
    );
    println!(
        "  per Function (create -> 3 children):    p50 {:.1} ms  p90 {:.1} ms  max {:.1} ms  (goal p50 <= 50 ms; {} measured)",
        percentile(&per_fn, 0.5).as_secs_f64() * 1e3,
        percentile(&per_fn, 0.9).as_secs_f64() * 1e3,
        per_fn.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        per_fn.len()
    );
    println!(
        "  controller RSS: idle {:.1} MiB (goal <= 15 MiB), at {N} {:.1} MiB, peak {:.1} MiB",
        mib(rss_idle),
        mib(rss_loaded),
        mib(rss_peak)
    );
}
