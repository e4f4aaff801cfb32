//! Shared by the integration tests: a moto Kinesis emulator, devcluster, tiny local function
//! servers registered through EndpointSlices, and the trigger service started in process.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::Client as KinesisClient;
use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::ShardIteratorType;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kinesis_trigger::{Polling, Resolution, Running, Settings, Timing};
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kubeless_api::{Function, KinesisTrigger, KinesisTriggerSpec};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";
pub const REGION: &str = "us-east-1";

// ------------------------------------------------------------------ moto

/// A moto Kinesis emulator on a free loopback port, killed (by PID) on drop.
pub struct Moto {
    child: Child,
    pub endpoint: String,
}

fn moto_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MOTO_SERVER_BIN") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("moto_server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "moto_server not found (set MOTO_SERVER_BIN or put it on PATH): \
         pip install 'moto[server]' (scripts/test.sh installs it)"
    );
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Moto {
    pub fn start() -> Self {
        let bin = moto_bin();
        // A port can be taken between picking and binding; try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Self {
                        child,
                        endpoint: format!("http://{addr}"),
                    };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("moto_server did not start");
    }

    pub fn client(&self) -> KinesisClient {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let conf = aws_sdk_kinesis::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
            .endpoint_url(&self.endpoint)
            .http_client(http)
            .build();
        KinesisClient::from_conf(conf)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn create_stream(k: &KinesisClient, name: &str, shards: i32) -> Vec<String> {
    k.create_stream()
        .stream_name(name)
        .shard_count(shards)
        .send()
        .await
        .unwrap();
    eventually("stream ACTIVE", Duration::from_secs(20), || async {
        let s = k
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .ok()?;
        (s.stream_description_summary()?.stream_status()
            == &aws_sdk_kinesis::types::StreamStatus::Active)
            .then_some(())
    })
    .await;
    shard_ids(k, name).await
}

pub async fn shard_ids(k: &KinesisClient, stream: &str) -> Vec<String> {
    let out = k.list_shards().stream_name(stream).send().await.unwrap();
    out.shards()
        .iter()
        .map(|s| s.shard_id().to_string())
        .collect()
}

/// Puts one record; returns (shard id, sequence number).
pub async fn put(k: &KinesisClient, stream: &str, key: &str, body: &str) -> (String, String) {
    let o = k
        .put_record()
        .stream_name(stream)
        .partition_key(key)
        .data(Blob::new(body.as_bytes().to_vec()))
        .send()
        .await
        .unwrap();
    (o.shard_id().to_string(), o.sequence_number().to_string())
}

/// Every record of every shard of `stream`, from TRIM_HORIZON (bounded number of calls).
pub async fn read_all(k: &KinesisClient, stream: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for shard in shard_ids(k, stream).await {
        let mut it = k
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(&shard)
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator()
            .map(str::to_string);
        for _ in 0..20 {
            let Some(i) = it.take() else { break };
            let r = k.get_records().shard_iterator(i).send().await.unwrap();
            if r.records().is_empty() {
                break;
            }
            out.extend(r.records().iter().map(|r| r.data().as_ref().to_vec()));
            it = r.next_shard_iterator().map(str::to_string);
        }
    }
    out
}

/// Compares Kinesis sequence numbers (decimal strings of up to 128 bits).
pub fn seq_less(a: &str, b: &str) -> bool {
    (a.len(), a) < (b.len(), b)
}

// ------------------------------------------------------------------ fake function

/// One request a fake function received.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }
}

/// What the fake function answers: status for the n-th request.
pub type Behaviour = Arc<dyn Fn(usize, &Received) -> u16 + Send + Sync>;

/// A tiny HTTP function on 127.0.0.1 recording every request in arrival order.
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
                            let status = behaviour(n, &r);
                            let mut resp = http::Response::new(Full::new(Bytes::from("ok")));
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

    pub async fn ok() -> Self {
        Self::start(Arc::new(|_, _| 200)).await
    }

    pub fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
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

// ------------------------------------------------------------------ cluster

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

/// The AWS keys Secret (dummy values; moto accepts any).
pub async fn create_aws_secret(client: &Client, name: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        // base64 of AKIDTEST and secret (devcluster does not turn stringData into data).
        "data": {"aws_access_key_id": "QUtJRFRFU1Q=", "aws_secret_access_key": "c2VjcmV0"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A Function object backed by a selector-less Service and an EndpointSlice pointing at
/// `addr` (what the function-controller and the endpoints controller would give).
pub async fn register_function(client: &Client, name: &str, addr: SocketAddr) {
    let functions: Api<Function> = Api::namespaced(client.clone(), NS);
    let f: Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name},
        "spec": {"runtime": "python3.11", "handler": "h.f", "timeout": "5", "function": ""}
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

pub async fn create_trigger(client: &Client, name: &str, spec: serde_json::Value) {
    let spec: KinesisTriggerSpec = serde_json::from_value(spec).unwrap();
    let mut t = KinesisTrigger::new(name, spec);
    t.metadata.namespace = Some(NS.into());
    Api::<KinesisTrigger>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
}

pub async fn trigger_status(
    client: &Client,
    name: &str,
) -> Option<kubeless_api::KinesisTriggerStatus> {
    Api::<KinesisTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .ok()
        .and_then(|t| t.status)
}

pub async fn wait_ready(client: &Client, name: &str) -> kubeless_api::KinesisTriggerStatus {
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

/// The Ready condition's reason once it is `reason`.
pub async fn wait_reason(client: &Client, name: &str, reason: &str) -> String {
    eventually(
        &format!("trigger {name} reason {reason}"),
        Duration::from_secs(30),
        || async {
            let s = trigger_status(client, name).await?;
            let c = kubeless_api::find_condition(&s.conditions, "Ready")?;
            (c.reason.as_deref() == Some(reason)).then(|| c.message.clone().unwrap_or_default())
        },
    )
    .await
}

/// The checkpoint ConfigMap's data.
pub async fn checkpoints(client: &Client, trigger: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get_opt(&format!("{trigger}-kinesis-checkpoints"))
        .await
        .unwrap()
        .and_then(|c| c.data)
        .unwrap_or_default()
}

// ------------------------------------------------------------------ the service

/// Fast timing for tests (the limits still hold: 200 ms between GetRecords per shard).
pub fn test_timing() -> Timing {
    Timing {
        polling: Polling {
            min_interval: Duration::from_millis(200),
            idle_interval: Duration::from_millis(200),
            records_limit: 100,
            max_backoff: Duration::from_secs(2),
        },
        list_shards_interval: Duration::from_millis(500),
        checkpoint_interval: Duration::from_millis(200),
        max_backoff: Duration::from_secs(2),
    }
}

/// One instance of the service with its own metrics.
pub struct Replica {
    pub running: Option<Running>,
    pub token: CancellationToken,
    pub metrics: kubeless_service::Metrics,
}

impl Replica {
    pub async fn start(client: &Client) -> Self {
        Self::start_with(client, None).await
    }

    /// A replica sharing shards through shard Leases (3 s) under `identity`.
    pub async fn start_sharing(client: &Client, identity: &str) -> Self {
        let leases = kinesis_trigger::leases::ShardLeaseSettings {
            identity: identity.to_string(),
            duration: Duration::from_secs(3),
        };
        Self::start_with(client, Some(leases)).await
    }

    pub async fn start_with(
        client: &Client,
        shard_leases: Option<kinesis_trigger::leases::ShardLeaseSettings>,
    ) -> Self {
        let token = CancellationToken::new();
        let metrics = kubeless_service::Metrics::new("kubeless");
        let mut settings = Settings::new(Resolution::EndpointSlices);
        settings.timing = test_timing();
        settings.resync = Duration::from_secs(2);
        settings.shard_leases = shard_leases;
        let mut running = kinesis_trigger::run(client.clone(), settings, &metrics, token.clone());
        running.wait_synced().await;
        Self {
            running: Some(running),
            token,
            metrics,
        }
    }

    /// The value of `kubeless_kinesis_trigger_deliveries_total` for an outcome.
    pub fn deliveries(&self, outcome: &str) -> u64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("kubeless_kinesis_trigger_deliveries_total{"))
            .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// `kubeless_kinesis_trigger_shards` of a trigger: shards this replica reads.
    pub fn shards(&self, trigger: &str) -> i64 {
        let text = self.metrics.encode().unwrap();
        let prefix = format!("kubeless_kinesis_trigger_shards{{trigger=\"{NS}/{trigger}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
            .unwrap_or(0)
    }

    pub fn metrics_text(&self) -> String {
        self.metrics.encode().unwrap()
    }

    /// Graceful stop: readers cancelled, checkpoints flushed.
    pub async fn stop(mut self) {
        self.token.cancel();
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(20), r.join())
                .await
                .expect("service stopped in time");
        }
    }

    /// A crash: every task aborted, nothing flushed.
    pub fn kill(mut self) {
        if let Some(r) = self.running.take() {
            r.abort();
        }
    }
}
