//! devcluster with the project's CRDs, and functions registered by hand.

use std::net::SocketAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use kubeless_api::Function;
use serde_json::{Value, json};

use crate::ServiceProcess;

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
        Self::start_in(tempfile::tempdir().unwrap(), images).await
    }

    /// With the pod runner, running images as local processes from the repository's image map
    /// ([`image_map`](crate::image_map), written into the cluster's folder) with the binaries of
    /// this target dir, `needs` among them (`kubeless-runtime` for a
    /// [`PythonFunction`](crate::PythonFunction)).
    pub async fn with_pods(needs: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let images = crate::image_map(dir.path(), needs);
        Self::start_in(dir, Some(images)).await
    }

    /// With the pod runner in container mode: pods run from their images with podman
    /// (docs/devcluster.md "Container mode"); a test calls [`shutdown`](Self::shutdown) to stop
    /// their containers.
    pub async fn with_containers() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let options = devcluster::Options::for_tests(dir.path().join("state")).with_containers();
        Self::start_with(dir, options, None).await
    }

    /// The API server only, with `crd` installed in place of the project's CRD of the same
    /// name (a [`loosened_crd`]).
    pub async fn with_crd(crd: CustomResourceDefinition) -> Self {
        Self::start_in_with(tempfile::tempdir().unwrap(), None, Some(crd)).await
    }

    async fn start_in(dir: tempfile::TempDir, images: Option<PathBuf>) -> Self {
        Self::start_in_with(dir, images, None).await
    }

    async fn start_in_with(
        dir: tempfile::TempDir,
        images: Option<PathBuf>,
        replace: Option<CustomResourceDefinition>,
    ) -> Self {
        let mut options = devcluster::Options::for_tests(dir.path().join("state"));
        options.images_dir = images;
        Self::start_with(dir, options, replace).await
    }

    async fn start_with(
        dir: tempfile::TempDir,
        options: devcluster::Options,
        replace: Option<CustomResourceDefinition>,
    ) -> Self {
        let cluster = devcluster::DevCluster::start(options).await.unwrap();
        if let (Some(version), Some(cp)) = (cluster.kubernetes_version(), cluster.control_plane()) {
            // scripts/e2e.sh sums these lines up.
            crate::report!("Kubernetes {version} started: {}", cp.times());
        }
        let client = cluster.client().await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in kubeless_api::all() {
            let crd = match &replace {
                Some(r) if r.metadata.name == crd.metadata.name => r.clone(),
                _ => crd,
            };
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        // A real API server serves a new CRD's objects only once it is Established.
        for crd in kubeless_api::all() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crate::eventually(
                &format!("CRD {name} Established"),
                std::time::Duration::from_secs(30),
                || async {
                    let crd = crds.get(&name).await.ok()?;
                    crd.status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                        .then_some(())
                },
            )
            .await;
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

    /// The service binary `bin` as a process of this cluster: its kubeconfig, an admin server on
    /// a free port, info logs, and `env` besides; it logs to `<dir>/<bin>.log` (appended to by
    /// each start).
    pub fn start_service(&self, bin: &str, env: &[(&str, String)]) -> ServiceProcess {
        let mut all = vec![
            ("KUBECONFIG", self.kubeconfig()),
            ("KUBELESS_ADMIN_ADDR", "127.0.0.1:0".to_string()),
            ("KUBELESS_LOG_LEVEL", "info".to_string()),
        ];
        all.extend_from_slice(env);
        ServiceProcess::start(bin, self.dir.path(), bin, &all)
    }

    pub async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

/// A client of the cluster `kubeconfig` names that authenticates with `token` alone (a
/// ServiceAccount's): the kubeconfig's own credentials, such as the admin client certificate of a
/// real control plane, are dropped, or they would authenticate the requests instead.
pub async fn client_with_token(kubeconfig: &std::path::Path, token: String) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Client::try_from(config).unwrap()
}

/// The CRD of `K` with the schema of `spec.<field>` replaced by `schema` and the spec's CEL
/// rules (which may refer to the field) dropped: what an older, looser CRD version would have.
/// A real API server keeps serving objects stored under such a version, so with it a test
/// stores an object today's CRD refuses, however strict devcluster's validation becomes.
pub fn loosened_crd<K: kube::CustomResourceExt>(
    field: &str,
    schema: Value,
) -> CustomResourceDefinition {
    let mut v = serde_json::to_value(kubeless_api::crd::<K>()).unwrap();
    for version in v["spec"]["versions"].as_array_mut().unwrap() {
        let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(
            spec["properties"].get(field).is_some(),
            "{field} not in the schema"
        );
        spec["properties"][field] = schema.clone();
        if let Some(o) = spec.as_object_mut() {
            o.remove("x-kubernetes-validations");
        }
    }
    serde_json::from_value(v).unwrap()
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

/// The Secret `name` with the AWS keys a KinesisTrigger's `secret` names: dummy values, which
/// moto accepts.
pub async fn create_aws_secret(client: &Client, name: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        // base64 of AKIDTEST and secret.
        "data": {"aws_access_key_id": "QUtJRFRFU1Q=", "aws_secret_access_key": "c2VjcmV0"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A namespaced API object that [`create`] and [`wait_ready`] handle (typed objects: the
/// Kubernetes kinds and ours).
pub trait Namespaced:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned
{
}

/// Creates `object` in [`NS`]; what the API server made of it.
pub async fn create<K: Namespaced>(client: &Client, object: &K) -> K {
    Api::<K>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|e| panic!("creating {object:?}: {e}"))
}

/// Waits (60 s at most) until the object `name` of kind `K` in [`NS`] has the condition
/// Ready=True (a trigger's status); returns it.
pub async fn wait_ready<K: Namespaced>(client: &Client, name: &str) -> K {
    wait_ready_in(client, NS, name).await
}

/// [`wait_ready`] in namespace `ns`.
pub async fn wait_ready_in<K: Namespaced>(client: &Client, ns: &str, name: &str) -> K {
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let what = format!("{} {ns}/{name} Ready", K::kind(&()));
    crate::eventually(&what, std::time::Duration::from_secs(60), || async {
        let object = api.get(name).await.ok()?;
        let v = serde_json::to_value(&object).ok()?;
        let ready = v["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(object)
    })
    .await
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
