//! Shared test harness: a devcluster, the Function CRD, the controller run in-process, a client
//! that counts API writes, and bounded waits.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Options};
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Pod, Service},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use kubeless_api::{Function, conditions::READY, find_condition};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";

/// Counts every request that is not a read (GET): creates, patches, deletes.
#[derive(Clone, Default)]
pub struct WriteCounter {
    count: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
    times: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl WriteCounter {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    /// When each write was sent, with its method and URI.
    pub fn timed_log(&self) -> Vec<(Instant, String)> {
        self.times.lock().unwrap().clone()
    }
    pub fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
        self.log.lock().unwrap().clear();
        self.times.lock().unwrap().clear();
    }
}

pub struct Env {
    pub cluster: Option<DevCluster>,
    pub client: Client,
    pub dir: tempfile::TempDir,
    controller: Option<(CancellationToken, JoinHandle<()>)>,
    pub writes: WriteCounter,
}

pub async fn counting_client(kubeconfig: &Path, counter: &WriteCounter) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let c = counter.clone();
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        if req.method() != http::Method::GET {
            c.count.fetch_add(1, Ordering::SeqCst);
            let line = format!("{} {}", req.method(), req.uri());
            c.times.lock().unwrap().push((Instant::now(), line.clone()));
            c.log.lock().unwrap().push(line);
        }
        req
    });
    kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build()
}

impl Env {
    /// A devcluster (pod runner on or off) with the Function CRD installed.
    pub async fn start(runner: bool) -> Self {
        Self::start_with_hpa_period(runner, Duration::from_secs(15)).await
    }

    /// Like [`Env::start`], with devcluster's HPA controller passing every `hpa_period`.
    pub async fn start_with_hpa_period(runner: bool, hpa_period: Duration) -> Self {
        let _ = tracing_subscriber_init();
        // Short: the runtime's worker sockets live under the pod folder, and Unix socket paths
        // are limited to 107 bytes.
        let dir = tempfile::Builder::new()
            .prefix("fc")
            .tempdir_in("/tmp")
            .unwrap();
        let mut options = Options::for_tests(dir.path().join("s"));
        options.images_dir =
            runner.then(|| kubeless_testkit::image_map(dir.path(), &["kubeless-runtime"]));
        options.hpa_sync_period = hpa_period;
        let cluster = DevCluster::start(options).await.expect("devcluster starts");
        let client = cluster.client().await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &kubeless_api::crd::<Function>())
            .await
            .expect("creating the Function CRD");
        let fns: Api<Function> = Api::namespaced(client.clone(), NS);
        wait_for(
            "the Function CRD to be served",
            Duration::from_secs(10),
            || {
                let fns = fns.clone();
                async move { fns.list(&ListParams::default()).await.is_ok().then_some(()) }
            },
        )
        .await;
        Self {
            cluster: Some(cluster),
            client,
            dir,
            controller: None,
            writes: WriteCounter::default(),
        }
    }

    /// When this host's npm needs a CA file (a TLS-intercepting proxy), pass it to the install
    /// step through the catalogue's installation-phase env: `install` runs npm with `--prefix`,
    /// which makes npm skip the host's global npmrc where the CA is configured.
    pub async fn host_ca_config(&self) {
        let cafile = ["/usr/etc/npmrc", "/etc/npmrc"].iter().find_map(|p| {
            let text = std::fs::read_to_string(p).ok()?;
            text.lines()
                .find_map(|l| l.trim().strip_prefix("cafile="))
                .map(|v| v.trim().to_string())
        });
        let Some(cafile) = cafile else { return };
        let mut catalogue = function_controller::catalogue::Catalogue::builtin();
        for r in &mut catalogue.runtimes {
            for v in &mut r.versions {
                for i in &mut v.images {
                    i.env.insert("npm_config_cafile".into(), cafile.clone());
                }
            }
        }
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let _ = nss
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": "kubeless"}}))
                    .unwrap(),
            )
            .await;
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubeless-config", "namespace": "kubeless"},
            "data": {"runtime-images": catalogue.to_json().unwrap()}
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(self.client.clone(), "kubeless")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.cluster
            .as_ref()
            .unwrap()
            .kubeconfig_path()
            .to_path_buf()
    }

    /// Starts the controller in-process, on a client that counts its writes.
    pub async fn start_controller(&mut self) {
        self.start_controller_with(function_controller::Settings::default())
            .await;
    }

    /// Like [`Env::start_controller`], with these settings (listening on the pod IP, as
    /// devcluster needs).
    pub async fn start_controller_with(&mut self, settings: function_controller::Settings) {
        assert!(self.controller.is_none(), "controller already running");
        let client = counting_client(&self.kubeconfig(), &self.writes).await;
        let token = CancellationToken::new();
        let settings = function_controller::Settings {
            listen_on_pod_ip: true,
            ..settings
        };
        let t = token.clone();
        let handle = tokio::spawn(async move {
            let metrics = kubeless_service::Metrics::new("kubeless");
            if let Err(e) = function_controller::run_controller(client, settings, &metrics, t).await
            {
                panic!("controller failed: {e:?}");
            }
        });
        self.controller = Some((token, handle));
    }

    pub async fn stop_controller(&mut self) {
        let (token, handle) = self.controller.take().expect("controller running");
        token.cancel();
        tokio::time::timeout(Duration::from_secs(20), handle)
            .await
            .expect("controller stops within 20 s")
            .expect("controller task ended cleanly");
    }

    pub fn fns(&self) -> Api<Function> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create(&self, f: serde_json::Value) -> Function {
        let f: Function = serde_json::from_value(f).unwrap();
        self.fns().create(&PostParams::default(), &f).await.unwrap()
    }

    /// Waits until the Function's Ready condition satisfies `check`; returns the Function.
    pub async fn wait_condition(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&kubeless_api::Condition) -> bool,
    ) -> Function {
        let fns = self.fns();
        let last = Arc::new(Mutex::new(None));
        let l = last.clone();
        let check = &check;
        let found = wait_for_opt(timeout, || {
            let fns = fns.clone();
            let l = l.clone();
            async move {
                let f = fns.get_opt(name).await.ok().flatten()?;
                let cond = f
                    .status
                    .as_ref()
                    .and_then(|s| find_condition(&s.conditions, READY))
                    .cloned();
                *l.lock().unwrap() = cond.clone();
                check(&cond?).then_some(f)
            }
        })
        .await;
        match found {
            Some(f) => f,
            None => {
                let logs = self.pod_logs(name);
                panic!(
                    "Function {name}: timed out after {timeout:?} waiting for {what}; last Ready condition: {:?}\npod logs:\n{logs}",
                    last.lock().unwrap()
                )
            }
        }
    }

    pub async fn wait_ready(&self, name: &str) -> Function {
        self.wait_condition(name, "Ready=True", Duration::from_secs(90), |c| c.is_true())
            .await
    }

    /// GET through the API server's service proxy.
    pub async fn call(&self, name: &str) -> Result<String, kube::Error> {
        let req = http::Request::get(format!(
            "/api/v1/namespaces/{NS}/services/{name}:http-function-port/proxy/"
        ))
        .body(Vec::new())
        .unwrap();
        self.client.request_text(req).await
    }

    /// Calls until the answer is `want` (a rollout replaces pods gradually).
    pub async fn wait_answer(&self, name: &str, want: &str, timeout: Duration) {
        let last = Arc::new(Mutex::new(String::new()));
        let l = last.clone();
        let got = wait_for_opt(timeout, || {
            let l = l.clone();
            async move {
                let r = self.call(name).await;
                let text = match r {
                    Ok(t) => t,
                    Err(e) => format!("error: {e}"),
                };
                *l.lock().unwrap() = text.clone();
                (text.trim() == want).then_some(())
            }
        })
        .await;
        if got.is_none() {
            panic!(
                "Function {name}: expected answer {want:?} within {timeout:?}, last answer {:?}\npod logs:\n{}",
                last.lock().unwrap(),
                self.pod_logs(name)
            );
        }
    }

    /// Every log file of the function's pods (for failure messages).
    pub fn pod_logs(&self, name: &str) -> String {
        let mut out = String::new();
        let root = self.dir.path().join("s").join("logs").join(NS);
        let Ok(pods) = std::fs::read_dir(&root) else {
            return "(no pod logs)".into();
        };
        for pod in pods.flatten() {
            if !pod.file_name().to_string_lossy().starts_with(name) {
                continue;
            }
            for f in std::fs::read_dir(pod.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                let tail: String = text
                    .lines()
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push_str(&format!("--- {}\n{tail}\n", f.path().display()));
            }
        }
        out
    }

    /// Names of the children that still exist.
    pub async fn children(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        let c = &self.client;
        if Api::<ConfigMap>::namespaced(c.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
        {
            out.push("ConfigMap".into());
        }
        if Api::<Deployment>::namespaced(c.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
        {
            out.push("Deployment".into());
        }
        if Api::<Service>::namespaced(c.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
        {
            out.push("Service".into());
        }
        if Api::<HorizontalPodAutoscaler>::namespaced(c.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
        {
            out.push("HorizontalPodAutoscaler".into());
        }
        let pods = Api::<Pod>::namespaced(c.clone(), NS)
            .list(&ListParams::default().labels(&format!("function={name}")))
            .await
            .unwrap();
        for p in pods.items {
            out.push(format!("Pod/{}", p.metadata.name.unwrap_or_default()));
        }
        out
    }

    pub async fn shutdown(mut self) {
        if self.controller.is_some() {
            self.stop_controller().await;
        }
        if let Some(c) = self.cluster.take() {
            c.shutdown().await;
        }
    }
}

fn tracing_subscriber_init() -> Option<()> {
    // RUST_LOG=function_controller=debug shows the controller's view; "already set" by another
    // test of this process is fine.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init()
        .ok()
}

/// Polls `f` every 200 ms until it returns `Some`, or `timeout` passes.
pub async fn wait_for_opt<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match wait_for_opt(timeout, f).await {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}
