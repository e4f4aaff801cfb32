//! Shared by the integration tests: a real nats-server, devcluster, tiny local function servers
//! registered through EndpointSlices, and the trigger service started in process.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Future;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use kubeless_api::{Function, NatsTrigger, NatsTriggerSpec};
use nats_trigger::{Resolution, Running, Settings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";

/// A nats-server with JetStream, on a free loopback port, killed on drop.
pub struct NatsServer {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

fn nats_server_bin() -> PathBuf {
    if let Ok(p) = std::env::var("NATS_SERVER_BIN") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain(["/usr/sbin".into(), "/usr/bin".into()]) {
        let candidate = dir.join("nats-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "nats-server not found (set NATS_SERVER_BIN or put it on PATH): \
         apt-get install -y nats-server (scripts/test.sh installs it)"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl NatsServer {
    pub fn start() -> Self {
        let bin = nats_server_bin();
        let dir = tempfile::tempdir().unwrap();
        // A port can be taken between picking and binding; try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(&bin)
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Self {
                        child,
                        url: format!("nats://{addr}"),
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("nats-server did not start");
    }

    /// The server's process id (to freeze it with SIGSTOP in tests).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(&self.url).await.unwrap()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // Stopped by its PID (the Child handle), never by name.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `sig` (e.g. "-STOP", "-CONT", "-TERM") to process `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

/// One request a fake function received.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// What the fake function answers: (status, body), after an optional delay.
pub type Behaviour = Arc<dyn Fn(usize, &Received) -> (u16, String, Duration) + Send + Sync>;

/// A tiny HTTP function on 127.0.0.1 recording every request.
pub struct FakeFunction {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    token: CancellationToken,
}

impl FakeFunction {
    pub async fn start(behaviour: Behaviour) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let token = CancellationToken::new();
        let (rec, tok) = (Arc::clone(&received), token.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                    _ = tok.cancelled() => return,
                };
                let (rec, behaviour, tok) = (Arc::clone(&rec), Arc::clone(&behaviour), tok.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (rec, behaviour) = (Arc::clone(&rec), Arc::clone(&behaviour));
                        async move {
                            let headers = req.headers().clone();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let r = Received { headers, body };
                            let n = {
                                let mut g = rec.lock().unwrap();
                                g.push(r.clone());
                                g.len()
                            };
                            let (status, body, delay) = behaviour(n, &r);
                            tokio::time::sleep(delay).await;
                            let mut resp = http::Response::new(Full::new(Bytes::from(body)));
                            *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = tok.cancelled() => {}
                    }
                });
            }
        });
        Self {
            addr,
            received,
            token,
        }
    }

    /// Answers 200 with the request body.
    pub async fn echo() -> Self {
        Self::start(Arc::new(|_, r| {
            (
                200,
                String::from_utf8_lossy(&r.body).into_owned(),
                Duration::ZERO,
            )
        }))
        .await
    }

    pub fn bodies(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .collect()
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

impl Drop for FakeFunction {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// devcluster with the CRDs installed. `images_dir` None: API server only.
pub async fn cluster(
    state: &std::path::Path,
    images_dir: Option<PathBuf>,
) -> (devcluster::DevCluster, Client) {
    let mut options = devcluster::Options::for_tests(state);
    options.images_dir = images_dir;
    let cluster = devcluster::DevCluster::start(options).await.unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kubeless_api::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    (cluster, client)
}

pub async fn create_dynamic(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    v: serde_json::Value,
) {
    let ar = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

/// A Function object labelled `labels`, backed by a selector-less Service and an EndpointSlice
/// pointing at `addr` (what the function-controller and the endpoints controller would give).
pub async fn register_function(
    client: &Client,
    name: &str,
    labels: serde_json::Value,
    timeout: &str,
    addr: SocketAddr,
) {
    let functions: Api<Function> = Api::namespaced(client.clone(), NS);
    let f: Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runtime": "python3.11", "handler": "h.f", "timeout": timeout, "function": ""}
    }))
    .unwrap();
    functions.create(&PostParams::default(), &f).await.unwrap();
    create_dynamic(client, "", "v1", "Service", "services", json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"name": "http-function-port", "port": 8080, "targetPort": addr.port(), "protocol": "TCP"}]}
    }))
    .await;
    create_dynamic(client, "discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-fake"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "http-function-port", "port": addr.port(), "protocol": "TCP"}]
    }))
    .await;
}

pub async fn create_trigger(
    client: &Client,
    name: &str,
    spec: serde_json::Value,
    annotations: serde_json::Value,
) {
    let spec: NatsTriggerSpec = serde_json::from_value(spec).unwrap();
    let mut t = NatsTrigger::new(name, spec);
    t.metadata.namespace = Some(NS.into());
    t.metadata.annotations = serde_json::from_value(annotations).unwrap();
    Api::<NatsTrigger>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
}

/// One instance ("replica") of the service, with its own NATS connection and metrics.
pub struct Replica {
    pub running: Option<Running>,
    pub token: CancellationToken,
    pub metrics: kubeless_service::Metrics,
    pub nats: async_nats::Client,
}

impl Replica {
    pub async fn start(client: &Client, nats_url: &str) -> Self {
        let nats = nats_trigger::NatsArgs::url(nats_url)
            .connect()
            .await
            .unwrap();
        let token = CancellationToken::new();
        let metrics = kubeless_service::Metrics::new("kubeless");
        let mut settings = Settings::new(Resolution::EndpointSlices);
        settings.drain_timeout = Duration::from_secs(5);
        let mut running = nats_trigger::run(
            client.clone(),
            nats.clone(),
            settings,
            &metrics,
            token.clone(),
        );
        running.wait_synced().await;
        Self {
            running: Some(running),
            token,
            metrics,
            nats,
        }
    }

    /// Waits until `n` subscriptions are running in this replica.
    pub async fn wait_active(&self, n: usize) {
        let r = self.running.as_ref().unwrap();
        eventually(
            &format!("{n} running subscriptions"),
            Duration::from_secs(30),
            || async { (r.active_subscriptions() == n).then_some(()) },
        )
        .await;
    }

    /// The value of `kubeless_nats_trigger_deliveries_total` for a function and outcome.
    pub fn deliveries(&self, function: &str, outcome: &str) -> u64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("kubeless_nats_trigger_deliveries_total{"))
            .filter(|l| {
                l.contains(&format!("function=\"{function}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    pub async fn stop(mut self) {
        self.token.cancel();
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(20), r.join())
                .await
                .expect("service stopped in time");
        }
    }

    /// A crash: tasks killed, connection dropped, nothing acked.
    pub fn kill(mut self) {
        if let Some(r) = self.running.take() {
            r.abort();
        }
    }
}

pub async fn trigger_status(
    client: &Client,
    name: &str,
) -> Option<kubeless_api::NatsTriggerStatus> {
    Api::<NatsTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .ok()
        .and_then(|t| t.status)
}

pub async fn wait_ready(client: &Client, name: &str) -> kubeless_api::NatsTriggerStatus {
    eventually(
        &format!("trigger {name} Ready"),
        Duration::from_secs(30),
        || async {
            trigger_status(client, name)
                .await
                .filter(|s| kubeless_api::is_ready(&s.conditions))
        },
    )
    .await
}

pub fn name_of(t: &NatsTrigger) -> String {
    t.name_any()
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

/// The uid of the NATSTrigger `name`.
pub async fn trigger_uid(client: &Client, name: &str) -> Option<String> {
    Api::<NatsTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid
}
