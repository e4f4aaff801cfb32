//! devcluster with the project's CRDs, and functions registered by hand.

use std::net::SocketAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use kubeless_api::Function;
use serde_json::{Value, json};

/// The namespace the fixtures use.
pub const NS: &str = "default";

/// A devcluster in a temporary folder with the CRDs installed; `dir` also holds service logs.
pub struct TestCluster {
    pub cluster: devcluster::DevCluster,
    pub client: Client,
    pub dir: TestDir,
}

/// A temporary folder that a failing test keeps (state and service logs), saying where.
pub struct TestDir(tempfile::TempDir);

impl std::ops::Deref for TestDir {
    type Target = tempfile::TempDir;
    fn deref(&self) -> &tempfile::TempDir {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.disable_cleanup(true);
            eprintln!("test folder kept: {}", self.0.path().display());
        }
    }
}

impl TestCluster {
    /// The API server only (no pod runner) when `images` is `None`.
    pub async fn start(images: Option<PathBuf>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut options = devcluster::Options::for_tests(dir.path().join("state"));
        options.images_dir = images;
        let cluster = devcluster::DevCluster::start(options).await.unwrap();
        let client = cluster.client().await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in kubeless_api::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        Self {
            cluster,
            client,
            dir: TestDir(dir),
        }
    }

    /// The kubeconfig path a service process gets in `KUBECONFIG`.
    pub fn kubeconfig(&self) -> String {
        self.cluster.kubeconfig_path().display().to_string()
    }

    pub async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

/// A Function object (`labels` a JSON object, `timeout` in seconds as Kubeless writes it) plus
/// a selector-less Service and a hand-written EndpointSlice pointing at `addr`: the way a
/// function pod's address shows up in a cluster, with the function served by the test.
pub async fn register_function(
    client: &Client,
    name: &str,
    labels: Value,
    timeout: &str,
    addr: SocketAddr,
) {
    let functions: Api<Function> = Api::namespaced(client.clone(), NS);
    let f: Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"runtime": "python3.11", "handler": "h.f", "function": "x", "timeout": timeout}
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

/// Waits (30 s at most) until the `kind` object `name` in [`NS`] reads through `api` with
/// Ready=False `InvalidSpec` and a Warning `InvalidSpec` Event names it: what the services do
/// with an object their guarded watch could not decode. Returns the condition and the Events.
pub async fn invalid_spec_reported(
    client: &Client,
    api: &Api<kube::api::DynamicObject>,
    kind: &str,
    name: &str,
) -> (Value, Vec<k8s_openapi::api::events::v1::Event>) {
    let timeout = std::time::Duration::from_secs(30);
    let cond = crate::eventually(
        &format!("InvalidSpec on {kind} {name}"),
        timeout,
        || async {
            let o = api.get(name).await.ok()?;
            let conds = o.data["status"]["conditions"].as_array()?.clone();
            conds
                .into_iter()
                .find(|c| c["type"] == "Ready" && c["reason"] == "InvalidSpec")
        },
    )
    .await;
    assert_eq!(cond["status"], "False", "{cond}");
    let events = crate::eventually(
        &format!("an InvalidSpec Event about {kind} {name}"),
        timeout,
        || async {
            let list = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .ok()?;
            let found: Vec<_> = list
                .items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some("InvalidSpec")
                        && e.regarding.as_ref().is_some_and(|r| {
                            r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                        })
                })
                .collect();
            (!found.is_empty()).then_some(found)
        },
    )
    .await;
    assert!(
        events.iter().all(|e| e.type_.as_deref() == Some("Warning")),
        "{events:?}"
    );
    (cond, events)
}
