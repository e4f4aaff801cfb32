//! devcluster: a local Kubernetes for development and tests, never for production.
//!
//! [`DevCluster::start`] starts the in-memory API server (`devcluster-apiserver`) and, unless
//! switched off, the pod runner (`devcluster-runner`) that turns Deployments, Jobs and CronJobs
//! into local processes. Integration tests use this library; people use the `devcluster` binary.
//!
//! [`NodeAgentHandle::start`] runs the pod runner as a node of a real control plane instead
//! (`devcluster node`): see docs/devcluster.md, "Node agent".
//!
//! With [`Options::kubernetes`] set (`DEVCLUSTER_KUBERNETES=v1.34.4`, the one switch of the
//! end-to-end tests), [`DevCluster::start`] starts a real control plane built by
//! `scripts/k8s/build.sh` and this pod runner as its node instead, behind the same API: tests,
//! scripts and `devcluster up` run unchanged against either. See docs/devcluster.md, "The real
//! control plane".

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use devcluster_apiserver::{RunningServer, ServerConfig};
pub use devcluster_runner::{ContainerRuntime, PodRuntime};
use devcluster_runner::{ImageMap, Runner, RunnerConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the API server")]
    ApiServer(#[source] devcluster_apiserver::Error),
    #[error("loading the image map from {path}")]
    ImageMap {
        path: PathBuf,
        #[source]
        source: devcluster_runner::Error,
    },
    #[error("creating {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the kubeconfig {path}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("a client for {path}")]
    Client {
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the kubeconfig {path} names no CA for its server (certificate-authority or certificate-authority-data)"
    )]
    NoCa { path: PathBuf },
    #[error("Kubernetes {version} is not built in {dir}: run scripts/k8s/build.sh {version}")]
    NotBuilt { version: String, dir: PathBuf },
    #[error("starting Kubernetes {version}")]
    ControlPlane {
        version: String,
        #[source]
        source: Box<kube_control_plane::Error>,
    },
    #[error(
        "pod address {addr} is not local here: a real API server refuses loopback pod addresses, so \
         with a real control plane pods take addresses in {POD_NETWORK}, which must be routed to \
         the loopback device: run inside scripts/netns.sh (a network namespace with that route)"
    )]
    PodNetworkNotLocal {
        addr: std::net::Ipv4Addr,
        #[source]
        source: std::io::Error,
    },
    #[error("copying the kubeconfig to {path}")]
    CopyKubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The environment variable that switches [`Options::for_tests`] (and `devcluster up`) to a real
/// control plane: a version `scripts/k8s/build.sh` built, `v1.34.4`.
pub const KUBERNETES_ENV: &str = "DEVCLUSTER_KUBERNETES";

/// The addresses pods and test servers take with a real control plane (a real API server refuses
/// loopback addresses in Endpoints and EndpointSlices). scripts/netns.sh routes them to `lo` in a
/// network namespace of their own; each cluster's pods take a /16 of `10.64.0.0`-`10.126.0.0`.
pub const POD_NETWORK: &str = "10.64.0.0/10";

/// `DEVCLUSTER_KUBERNETES`, when set and not empty.
pub fn kubernetes_from_env() -> Option<String> {
    std::env::var(KUBERNETES_ENV).ok().filter(|v| !v.is_empty())
}

/// Where a test serves what it registers as a pod's address by hand (a function it records):
/// 127.0.0.1 on devcluster; with a real control plane ([`KUBERNETES_ENV`] set), `10.127.0.1`,
/// in [`POD_NETWORK`] and outside every cluster's pod range.
pub fn test_server_ip() -> std::net::IpAddr {
    if kubernetes_from_env().is_some() {
        std::net::IpAddr::from([10, 127, 0, 1])
    } else {
        std::net::IpAddr::from([127, 0, 0, 1])
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address the API server listens on; port 0 picks a free one.
    pub bind: SocketAddr,
    /// Keeps API state across restarts when set; in memory otherwise.
    pub data_dir: Option<PathBuf>,
    /// Where to write the kubeconfig; a file in `state_dir` when unset.
    pub kubeconfig_path: Option<PathBuf>,
    /// Pod folders (volumes) and pod logs live here.
    pub state_dir: PathBuf,
    /// Folder of image-map files (`*.yaml`); `None` runs no pods (API server only).
    pub images_dir: Option<PathBuf>,
    /// How often the HPA controller reads metrics and scales (15 s, as on a real cluster).
    pub hpa_sync_period: std::time::Duration,
    /// Pods as local processes (the default) or from their images with podman (container
    /// mode, docs/devcluster.md "Container mode").
    pub pods: PodRuntime,
    /// A real control plane of this version (`v1.34.4`, built by scripts/k8s/build.sh) in place
    /// of the devcluster API server, with the pod runner as its node; `bind` and `data_dir` are
    /// then unused, and the HPA sync period is the controller manager's.
    pub kubernetes: Option<String>,
}

impl Options {
    /// Defaults for a test: free port, in memory, everything under `state_dir`, the repository's
    /// image map.
    pub fn for_tests(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            kubeconfig_path: None,
            state_dir: state_dir.into(),
            images_dir: Some(repo_images_dir()),
            hpa_sync_period: std::time::Duration::from_secs(15),
            pods: PodRuntime::Process,
            kubernetes: kubernetes_from_env(),
        }
    }

    /// Runs pods from their images with podman instead of as local processes.
    pub fn with_containers(mut self) -> Self {
        self.pods = PodRuntime::Container(ContainerRuntime::default());
        self
    }
}

/// The repository's image map folder, `devcluster/images.d`.
pub fn repo_images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images.d")
}

/// `p` made absolute: pods run in their own folders and mount volumes by path, so a relative
/// path would point somewhere else from inside each pod.
fn absolute(p: PathBuf) -> Result<PathBuf, Error> {
    std::path::absolute(&p).map_err(|source| Error::Dir { path: p, source })
}

/// Creates `state_dir` with its `logs` and `pods` folders; returns those two.
fn state_folders(state_dir: &Path) -> Result<(PathBuf, PathBuf), Error> {
    let logs_dir = state_dir.join("logs");
    let work_dir = state_dir.join("pods");
    for dir in [state_dir, &logs_dir, &work_dir] {
        std::fs::create_dir_all(dir).map_err(|source| Error::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok((logs_dir, work_dir))
}

/// A random number, different in each process (for picking address ranges).
fn random_seed() -> u64 {
    use std::hash::BuildHasher as _;
    std::collections::hash_map::RandomState::new().hash_one(std::process::id())
}

/// A /16 of loopback addresses for this devcluster's pods, 127.<1..=254>.0.0, picked at random.
/// Pods of one devcluster never share an address, but two devclusters on one machine (parallel
/// tests, a test beside `devcluster up`) would if they used the same range, and their pods would
/// then clash on the same ports.
fn pod_ip_range() -> std::net::Ipv4Addr {
    let seed = random_seed();
    let second = u8::try_from(seed % 254).unwrap_or(0) + 1;
    std::net::Ipv4Addr::new(127, second, 0, 0)
}

/// A running devcluster: API server plus (optionally) the pod runner; or a real control plane
/// with the pod runner as its node ([`Options::kubernetes`]).
pub struct DevCluster(Inner);

enum Inner {
    Dev {
        server: Box<RunningServer>,
        runner: Option<(
            CancellationToken,
            JoinHandle<Result<(), devcluster_runner::Error>>,
        )>,
    },
    Kubernetes(Box<RealCluster>),
}

/// A real control plane, the pod runner as its node (none without an image map), and the
/// kubeconfig handed out.
struct RealCluster {
    version: String,
    control_plane: kube_control_plane::ControlPlane,
    node: Option<NodeAgentHandle>,
    kubeconfig: PathBuf,
}

/// A /16 of [`POD_NETWORK`] for one real cluster's pods (`10.64.0.0`-`10.126.0.0`), at random,
/// so clusters side by side in one network namespace never share pod addresses.
fn real_pod_range() -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(10, 64 + u8::try_from(random_seed() % 63).unwrap_or(0), 0, 0)
}

impl DevCluster {
    pub async fn start(options: Options) -> Result<Self, Error> {
        if let Some(version) = options.kubernetes.clone() {
            return start_real(options, version)
                .await
                .map(|c| Self(Inner::Kubernetes(Box::new(c))));
        }
        let Options {
            bind,
            data_dir,
            kubeconfig_path,
            state_dir,
            images_dir,
            hpa_sync_period,
            pods,
            kubernetes: _,
        } = options;
        let state_dir = absolute(state_dir)?;
        let data_dir = data_dir.map(absolute).transpose()?;
        let kubeconfig_path = kubeconfig_path.map(absolute).transpose()?;
        let images_dir = images_dir.map(absolute).transpose()?;
        let (logs_dir, work_dir) = state_folders(&state_dir)?;
        let server = devcluster_apiserver::start(ServerConfig {
            bind,
            data_dir,
            kubeconfig_path: Some(kubeconfig_path.unwrap_or_else(|| state_dir.join("kubeconfig"))),
            logs_dir: logs_dir.clone(),
            ..ServerConfig::default()
        })
        .await
        .map_err(Error::ApiServer)?;

        let runner = match images_dir {
            None => None,
            Some(dir) => {
                let image_map = ImageMap::load_dir(&dir).map_err(|source| Error::ImageMap {
                    path: dir.clone(),
                    source,
                })?;
                if let PodRuntime::Container(rt) = &pods
                    && let Err(e) = devcluster_runner::container::check(rt).await
                {
                    // Not fatal: every pod then waits with the error in its status.
                    tracing::warn!(podman = %rt.podman, error = %e, "container mode: podman does not run");
                }
                let client = server.client().await.map_err(Error::ApiServer)?;
                // Each pod gets a token for its own ServiceAccount and a kubeconfig using it, so
                // in-pod clients (kube's Client::try_default, kubectl) have exactly the rights
                // RBAC gives that ServiceAccount, as on a real cluster.
                let api_access = devcluster_runner::ApiAccess {
                    server: server.url(),
                    ca_pem: server.ca_pem().to_string(),
                };
                let config = RunnerConfig {
                    image_map,
                    work_dir,
                    logs_dir,
                    api_access: Some(api_access),
                    pod_ip_base: pod_ip_range(),
                    hpa_sync_period,
                    pods,
                    image_cache: devcluster_runner::ImageCache::new(state_dir.join("images")),
                    ..RunnerConfig::default()
                };
                server.set_exec_backend(Arc::new(RunnerExec(config.running.clone())));
                server.set_metrics_backend(Arc::new(RunnerMetrics(config.usage.clone())));
                let token = CancellationToken::new();
                let handle = tokio::spawn(Runner::run(client, config, token.clone()));
                Some((token, handle))
            }
        };
        Ok(Self(Inner::Dev {
            server: Box::new(server),
            runner,
        }))
    }

    /// The API server's address.
    pub fn addr(&self) -> SocketAddr {
        match &self.0 {
            Inner::Dev { server, .. } => server.addr(),
            Inner::Kubernetes(real) => real
                .control_plane
                .server_url()
                .trim_start_matches("https://")
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 443))),
        }
    }

    pub fn kubeconfig_path(&self) -> &Path {
        match &self.0 {
            Inner::Dev { server, .. } => server.kubeconfig_path(),
            Inner::Kubernetes(real) => &real.kubeconfig,
        }
    }

    /// The real control plane's Kubernetes version; `None` for devcluster's API server.
    pub fn kubernetes_version(&self) -> Option<&str> {
        match &self.0 {
            Inner::Dev { .. } => None,
            Inner::Kubernetes(real) => Some(&real.version),
        }
    }

    /// The real control plane, when this is one ([`Options::kubernetes`]).
    pub fn control_plane(&self) -> Option<&kube_control_plane::ControlPlane> {
        match &self.0 {
            Inner::Dev { .. } => None,
            Inner::Kubernetes(real) => Some(&real.control_plane),
        }
    }

    pub async fn client(&self) -> Result<kube::Client, Error> {
        match &self.0 {
            Inner::Dev { server, .. } => server.client().await.map_err(Error::ApiServer),
            Inner::Kubernetes(real) => Ok(real.control_plane.client()),
        }
    }

    /// Stops the runner first (it kills every process it started), then the API server (with
    /// a real control plane: the node agent, then the control plane's processes).
    pub async fn shutdown(self) {
        match self.0 {
            Inner::Dev { server, runner } => {
                if let Some((token, handle)) = runner {
                    token.cancel();
                    match handle.await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "pod runner stopped with an error")
                        }
                        Err(e) => tracing::warn!(error = %e, "pod runner task failed"),
                    }
                }
                server.shutdown().await;
            }
            Inner::Kubernetes(real) => {
                let RealCluster {
                    control_plane,
                    node,
                    ..
                } = *real;
                if let Some(node) = node
                    && let Err(e) = node.shutdown().await
                {
                    tracing::warn!(error = %e, "node agent stopped with an error");
                }
                // Stopping waits for each process (up to 10 s): off the async threads.
                let stopped = tokio::task::spawn_blocking(move || control_plane.shutdown()).await;
                if let Err(e) = stopped {
                    tracing::warn!(error = %e, "stopping the control plane failed");
                }
            }
        }
    }
}

/// [`DevCluster::start`] with [`Options::kubernetes`]: the control plane under
/// `STATE_DIR/control-plane`, then (with an image map) the pod runner as node `devcluster`.
async fn start_real(options: Options, version: String) -> Result<RealCluster, Error> {
    let Options {
        kubeconfig_path,
        state_dir,
        images_dir,
        pods,
        ..
    } = options;
    let bins = kube_control_plane::bin_dir(&version);
    if !kube_control_plane::is_built(&bins) {
        return Err(Error::NotBuilt { version, dir: bins });
    }
    let state_dir = absolute(state_dir)?;
    // Pods must be reachable at addresses a real API server accepts: checked before anything
    // starts, so the error says what to do instead of a pod that never gets an endpoint.
    let pod_base = real_pod_range();
    let probe = std::net::Ipv4Addr::from(u32::from(pod_base) + 1);
    std::net::TcpListener::bind((probe, 0)).map_err(|source| Error::PodNetworkNotLocal {
        addr: probe,
        source,
    })?;
    let control_plane = kube_control_plane::ControlPlane::start(
        kube_control_plane::ControlPlaneOptions::new(bins, state_dir.join("control-plane")),
    )
    .await
    .map_err(|source| Error::ControlPlane {
        version: version.clone(),
        source: Box::new(source),
    })?;
    tracing::info!(%version, times = %control_plane.times(), "real control plane ready");
    let kubeconfig = match kubeconfig_path {
        None => control_plane.admin_kubeconfig().to_path_buf(),
        Some(path) => {
            std::fs::copy(control_plane.admin_kubeconfig(), &path).map_err(|source| {
                Error::CopyKubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            path
        }
    };
    let node = match images_dir {
        None => None,
        Some(images_dir) => {
            let creds = control_plane
                .node_credentials(devcluster_runner::NODE_NAME)
                .map_err(|source| Error::ControlPlane {
                    version: version.clone(),
                    source: Box::new(source),
                })?;
            let client_ca = state_dir.join("kubelet-client-ca.crt");
            std::fs::write(&client_ca, &creds.kubelet_client_ca_pem).map_err(|source| {
                Error::Dir {
                    path: client_ca.clone(),
                    source,
                }
            })?;
            let mut node = NodeOptions::new(
                creds.kubeconfig,
                devcluster_runner::NODE_NAME,
                creds.serving.cert_path,
                creds.serving.key_path,
                client_ca,
                state_dir.clone(),
            );
            node.images_dir = images_dir;
            node.pods = pods;
            node.pod_ip_base = Some(pod_base);
            Some(NodeAgentHandle::start(node).await?)
        }
    };
    Ok(RealCluster {
        version,
        control_plane,
        node,
        kubeconfig,
    })
}

/// `metrics.k8s.io` serves what the runner measures.
struct RunnerMetrics(devcluster_runner::usage::UsageSampler);

fn api_usage(u: devcluster_runner::usage::Usage) -> devcluster_apiserver::metrics::Usage {
    devcluster_apiserver::metrics::Usage {
        cpu_cores: u.cpu_cores,
        memory_bytes: u.memory_bytes,
        timestamp: u.timestamp,
        window: u.window,
    }
}

impl devcluster_apiserver::metrics::MetricsBackend for RunnerMetrics {
    fn containers(&self) -> Vec<devcluster_apiserver::metrics::ContainerUsage> {
        self.0
            .containers()
            .into_iter()
            .map(
                |((namespace, pod, container), u)| devcluster_apiserver::metrics::ContainerUsage {
                    namespace,
                    pod,
                    container,
                    usage: api_usage(u),
                },
            )
            .collect()
    }

    fn node(&self) -> Option<(String, devcluster_apiserver::metrics::Usage)> {
        self.0
            .node()
            .map(|u| (devcluster_runner::NODE_NAME.to_string(), api_usage(u)))
    }
}

/// `pods/exec` reaches the containers the runner started.
struct RunnerExec(devcluster_runner::RunningContainers);

impl devcluster_apiserver::exec::ExecBackend for RunnerExec {
    fn container(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
    ) -> Option<devcluster_apiserver::exec::ContainerProcess> {
        self.0.get(ns, pod, container).map(|p| p.session_process())
    }
}

/// What a node agent needs to join a real control plane.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// A kubeconfig as `system:node:NAME` (group `system:nodes`).
    pub kubeconfig: PathBuf,
    pub node_name: String,
    /// Where the kubelet API listens (loopback); port 0 picks a free port, which the Node reports.
    pub kubelet_bind: SocketAddr,
    /// The kubelet API's serving certificate and key (PEM files), for 127.0.0.1.
    pub kubelet_cert: PathBuf,
    pub kubelet_key: PathBuf,
    /// The CA (PEM file) of the API server's kubelet client certificate.
    pub client_ca: PathBuf,
    /// Pod folders and logs.
    pub state_dir: PathBuf,
    /// Folder of image-map files (process mode).
    pub images_dir: PathBuf,
    pub pods: PodRuntime,
    /// The /16 pods get their addresses from (`10.244.0.0` gives `10.244.0.2` and up); a random
    /// loopback /16 (127.x.0.0) when unset. A real API server refuses loopback addresses in
    /// Endpoints and EndpointSlices: a range that is not loopback needs a local route for it
    /// (docs/devcluster.md, "Node agent").
    pub pod_ip_base: Option<std::net::Ipv4Addr>,
    /// Lease renewals and status heartbeats (10 s and 60 s by default).
    pub keep_alive: devcluster_runner::KeepAlive,
}

impl NodeOptions {
    /// A node `node_name` with the repository's image map, its state under `state_dir`.
    pub fn new(
        kubeconfig: impl Into<PathBuf>,
        node_name: impl Into<String>,
        kubelet_cert: impl Into<PathBuf>,
        kubelet_key: impl Into<PathBuf>,
        client_ca: impl Into<PathBuf>,
        state_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            kubeconfig: kubeconfig.into(),
            node_name: node_name.into(),
            kubelet_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubelet_cert: kubelet_cert.into(),
            kubelet_key: kubelet_key.into(),
            client_ca: client_ca.into(),
            state_dir: state_dir.into(),
            images_dir: repo_images_dir(),
            pods: PodRuntime::Process,
            pod_ip_base: None,
            keep_alive: devcluster_runner::KeepAlive::default(),
        }
    }
}

/// A running node agent.
pub struct NodeAgentHandle {
    token: CancellationToken,
    handle: JoinHandle<Result<(), devcluster_runner::Error>>,
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The server URL and CA (PEM) of the kubeconfig's current context: what pods get.
fn api_access(
    path: &Path,
    kubeconfig: &kube::config::Kubeconfig,
) -> Result<devcluster_runner::ApiAccess, Error> {
    use base64::Engine as _;
    let context = kubeconfig
        .current_context
        .as_deref()
        .and_then(|name| kubeconfig.contexts.iter().find(|c| c.name == name))
        .and_then(|c| c.context.as_ref());
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| context.is_none_or(|ctx| c.name == ctx.cluster))
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| Error::NoCa {
            path: path.to_path_buf(),
        })?;
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        (None, Some(file)) => Some(read(Path::new(file))?),
        (None, None) => None,
    }
    .ok_or_else(|| Error::NoCa {
        path: path.to_path_buf(),
    })?;
    Ok(devcluster_runner::ApiAccess {
        server: cluster.server.clone().unwrap_or_default(),
        ca_pem,
    })
}

impl NodeAgentHandle {
    /// Joins the control plane the kubeconfig names as node `options.node_name`, and runs the
    /// pods bound to it until [`NodeAgentHandle::shutdown`].
    pub async fn start(options: NodeOptions) -> Result<Self, Error> {
        let NodeOptions {
            kubeconfig,
            node_name,
            kubelet_bind,
            kubelet_cert,
            kubelet_key,
            client_ca,
            state_dir,
            images_dir,
            pods,
            pod_ip_base,
            keep_alive,
        } = options;
        let state_dir = absolute(state_dir)?;
        let images_dir = absolute(images_dir)?;
        let (logs_dir, work_dir) = state_folders(&state_dir)?;
        let image_map = ImageMap::load_dir(&images_dir).map_err(|source| Error::ImageMap {
            path: images_dir.clone(),
            source,
        })?;
        let tls = devcluster_runner::KubeletTls {
            cert_pem: read(&kubelet_cert)?,
            key_pem: read(&kubelet_key)?,
            client_ca_pem: read(&client_ca)?,
        };
        let parsed = kube::config::Kubeconfig::read_from(&kubeconfig).map_err(|source| {
            Error::Kubeconfig {
                path: kubeconfig.clone(),
                source,
            }
        })?;
        let api_access = api_access(&kubeconfig, &parsed)?;
        let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
            .await
            .map_err(|source| Error::Kubeconfig {
                path: kubeconfig.clone(),
                source,
            })?;
        let client = kube::Client::try_from(config).map_err(|source| Error::Client {
            path: kubeconfig.clone(),
            source,
        })?;
        if let PodRuntime::Container(rt) = &pods
            && let Err(e) = devcluster_runner::container::check(rt).await
        {
            tracing::warn!(podman = %rt.podman, error = %e, "container mode: podman does not run");
        }
        let mut agent = devcluster_runner::NodeAgent::new(node_name, tls);
        agent.kubelet_bind = kubelet_bind;
        agent.keep_alive = keep_alive;
        let config = RunnerConfig {
            image_map,
            work_dir,
            logs_dir,
            api_access: Some(api_access),
            pod_ip_base: pod_ip_base.unwrap_or_else(pod_ip_range),
            pods,
            image_cache: devcluster_runner::ImageCache::new(state_dir.join("images")),
            mode: devcluster_runner::Mode::NodeAgent(agent),
            ..RunnerConfig::default()
        };
        let token = CancellationToken::new();
        let handle = tokio::spawn(Runner::run(client, config, token.clone()));
        Ok(Self { token, handle })
    }

    /// Whether the agent stopped by itself (it could not start: [`NodeAgentHandle::shutdown`] says why).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stops every pod's processes, then the agent. The Node and the pods stay in the API, as
    /// when a kubelet stops.
    pub async fn shutdown(self) -> Result<(), devcluster_runner::Error> {
        self.token.cancel();
        match self.handle.await {
            Ok(result) => result,
            Err(e) => {
                tracing::warn!(error = %e, "node agent task failed");
                Ok(())
            }
        }
    }
}
