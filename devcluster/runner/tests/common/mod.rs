//! Test harness: an in-memory API server plus the runner, and the orphan check.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use devcluster_apiserver::{RunningServer, ServerConfig};
use devcluster_runner::{ImageCache, ImageMap, Runner, RunnerConfig};
use kube::Client;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct Harness {
    pub server: RunningServer,
    pub client: Client,
    pub marker: String,
    pub dir: tempfile::TempDir,
    cancel: CancellationToken,
    runner: JoinHandle<devcluster_runner::Result<()>>,
}

/// Starts an API server and a runner whose pods live in `ip_base`/16.
/// Every container gets env `DEVCLUSTER_TEST_MARKER=<marker>` for the orphan check.
pub async fn start(ip_base: Ipv4Addr, tweak: impl FnOnce(&mut RunnerConfig)) -> Harness {
    // RUST_LOG=devcluster_runner=debug shows what the runner does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let logs_dir = dir.path().join("logs");
    let server = devcluster_apiserver::start(ServerConfig {
        logs_dir: logs_dir.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = server.client().await.unwrap();
    let marker = format!("devcluster-test-marker-{}-{}", std::process::id(), ip_base);
    let base_map = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images.d/base.yaml");
    let mut config = RunnerConfig {
        image_map: ImageMap::load_file(&base_map).unwrap(),
        work_dir: dir.path().join("pods"),
        logs_dir,
        pod_ip_base: ip_base,
        max_grace_period: Duration::from_secs(2),
        termination_drain: Duration::from_millis(500),
        image_cache: ImageCache::new(dir.path().join("images")),
        ..Default::default()
    };
    config
        .extra_env
        .insert("DEVCLUSTER_TEST_MARKER".into(), marker.clone());
    // Pods get ServiceAccount tokens, as under `devcluster up`.
    config.api_access = Some(devcluster_runner::ApiAccess {
        server: server.url(),
        ca_pem: server.ca_pem().to_string(),
    });
    tweak(&mut config);
    let cancel = CancellationToken::new();
    let runner = tokio::spawn(Runner::run(client.clone(), config, cancel.clone()));
    Harness {
        server,
        client,
        marker,
        dir,
        cancel,
        runner,
    }
}

impl Harness {
    /// Prints every pod's status (for failing tests).
    pub async fn dump(&self) {
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(self.client.clone());
        for p in api
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            eprintln!(
                "pod {:?}: {}",
                p.metadata.name,
                serde_json::to_string(&p.status).unwrap_or_default()
            );
        }
    }

    /// Stops the runner and the server, then asserts no process of this test survives.
    pub async fn stop(self) {
        self.cancel.cancel();
        let result = tokio::time::timeout(Duration::from_secs(30), self.runner).await;
        assert!(
            matches!(result, Ok(Ok(Ok(())))),
            "runner stops cleanly: {result:?}"
        );
        self.server.shutdown().await;
        assert_no_process_with(&self.marker);
    }
}

/// Pids of live processes whose command line or environment contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.contains(") Z ") || stat.is_empty() {
            continue;
        }
        let has = |f: &str| {
            std::fs::read(e.path().join(f))
                .map(|b| b.windows(marker.len()).any(|w| w == marker.as_bytes()))
                .unwrap_or(false)
        };
        if has("cmdline") || has("environ") {
            out.push(pid);
        }
    }
    out
}

pub fn assert_no_process_with(marker: &str) {
    // Give the kernel a moment to finish delivering SIGKILLs.
    let mut left = processes_with(marker);
    for _ in 0..50 {
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_with(marker);
    }
    panic!("orphan processes left behind: {left:?}");
}

/// Polls `f` every 100 ms until it returns Some, for at most `secs` seconds.
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {secs}s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GET through the API server's service proxy.
pub async fn proxy_get(
    client: &Client,
    ns: &str,
    svc_port: &str,
    path: &str,
) -> Result<String, String> {
    let url = format!(
        "/api/v1/namespaces/{ns}/services/{svc_port}/proxy/{}",
        path.trim_start_matches('/')
    );
    let req = http::Request::get(url)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client.request_text(req).await.map_err(|e| e.to_string())
}
