//! devcluster pod runner.
//!
//! Makes the workload objects stored in a Kubernetes API server run on this
//! machine: a Deployment controller (Pods directly, no
//! ReplicaSets), Job and CronJob controllers, an Endpoints/EndpointSlice
//! controller, and a "kubelet" that runs each Pod's containers as local
//! processes chosen by an image map (a registry image built on a mapped base runs as that base
//! with its added layers unpacked, [`image_cache`]), or (container mode,
//! [`PodRuntime::Container`]) from their images with podman. It talks to the API server only through
//! `kube::Client`. For local development and tests, never production.
//!
//! As a node agent ([`Mode::NodeAgent`]) it is a node of a real control plane instead: no
//! controllers (the kube-controller-manager runs them), only the Pods bound to its node, its
//! Node object kept alive, and a kubelet API for the API server's logs, exec, attach and
//! port-forward ([`NodeAgent`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub mod container;
pub mod cronjob;
mod ctx;
pub mod deployment;
pub mod endpoints;
mod error;
pub mod hpa;
pub mod image_cache;
pub mod image_map;
pub mod job;
mod kubelet;
mod kubelet_api;
mod node;
mod node_agent;
pub mod podmetrics;
pub mod podstatus;
pub mod probe;
pub mod process;
pub mod running;
pub mod service_account;
pub mod spec;
pub mod usage;
pub mod util;

pub use container::{ContainerRuntime, PodRuntime};
pub use error::{Error, Result};
pub use image_cache::ImageCache;
pub use image_map::{ImageEntry, ImageMap};
pub use node::KeepAlive;
pub use node_agent::{KubeletTls, NodeAgent};
pub use running::{ContainerStdin, RunningContainers, RunningProcess};
pub use service_account::ApiAccess;
pub use spec::{ENV_BIND_ADDRESS, ENV_POD_IP};

/// Node name reported in endpoints and `spec.nodeName` fieldRefs.
pub const NODE_NAME: &str = "devcluster";
/// Host IP reported in pod status.
pub const HOST_IP: &str = "127.0.0.1";

/// Settings of the runner.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// Image name -> local command.
    pub image_map: ImageMap,
    /// Pod folders (volumes, HOME, TMPDIR) go under `{work_dir}/{namespace}/{pod}-{uid}`.
    pub work_dir: PathBuf,
    /// Container logs: `{logs_dir}/{namespace}/{pod}/{container}.log` (+ `.previous.log`).
    pub logs_dir: PathBuf,
    /// Pods get addresses in this /16 of 127.0.0.0/8 (e.g. 127.1.0.0 -> 127.1.x.y).
    pub pod_ip_base: Ipv4Addr,
    /// First restart delay of a crashing container; doubles per crash.
    pub restart_backoff_base: Duration,
    /// Longest restart delay.
    pub restart_backoff_max: Duration,
    /// Upper bound for terminationGracePeriodSeconds (SIGTERM -> SIGKILL).
    pub max_grace_period: Duration,
    /// Wait between a pod's deletion and SIGTERM, so endpoints and proxies stop routing first.
    pub termination_drain: Duration,
    /// A container with declared ports and no readiness probe is ready only once
    /// its first TCP port accepts connections (a real kubelet marks it ready at start).
    pub implicit_port_readiness: bool,
    /// Extra env for every container.
    pub extra_env: BTreeMap<String, String>,
    /// When set, every pod gets a token for its ServiceAccount (TokenRequest, bound to the pod)
    /// in `{pod_dir}/serviceaccount/` and a kubeconfig for it in `KUBECONFIG`, unless
    /// `automountServiceAccountToken` is false. When unset, pods get no credentials.
    pub api_access: Option<ApiAccess>,
    /// Filled with the running containers (env, working dir) for `kubectl exec`.
    pub running: RunningContainers,
    /// How often the HPA controller reads metrics and scales (the real default: 15 s).
    pub hpa_sync_period: Duration,
    /// Filled with the containers' and the node's CPU and memory for `metrics.k8s.io`.
    pub usage: usage::UsageSampler,
    /// How often `usage` is sampled.
    pub metric_resolution: Duration,
    /// Whether pods run as local processes (image map) or from their images with podman.
    pub pods: PodRuntime,
    /// Process mode: registry images not in the image map, unpacked once per manifest digest.
    pub image_cache: ImageCache,
    /// devcluster's runner (every controller, every pod) or a node agent of a real control plane.
    pub mode: Mode,
}

/// What the runner is.
#[derive(Clone, Debug, Default)]
pub enum Mode {
    /// devcluster's runner: the Deployment, Job, CronJob, Endpoints and HPA controllers, and
    /// every Pod of the cluster on its one node, [`NODE_NAME`].
    #[default]
    Devcluster,
    /// A node of a real control plane: only the Pods bound to the node, no controllers.
    NodeAgent(NodeAgent),
}

impl RunnerConfig {
    /// The node the pods run on.
    pub fn node_name(&self) -> &str {
        match &self.mode {
            Mode::Devcluster => NODE_NAME,
            Mode::NodeAgent(agent) => &agent.node_name,
        }
    }
}

impl Default for RunnerConfig {
    fn default() -> Self {
        let base = std::env::temp_dir().join("devcluster");
        Self {
            image_map: ImageMap::empty(),
            work_dir: base.join("pods"),
            logs_dir: base.join("logs"),
            pod_ip_base: Ipv4Addr::new(127, 1, 0, 0),
            restart_backoff_base: Duration::from_secs(1),
            restart_backoff_max: Duration::from_secs(60),
            max_grace_period: Duration::from_secs(10),
            termination_drain: Duration::from_secs(1),
            implicit_port_readiness: true,
            extra_env: BTreeMap::new(),
            api_access: None,
            running: RunningContainers::default(),
            hpa_sync_period: Duration::from_secs(15),
            usage: usage::UsageSampler::default(),
            metric_resolution: usage::DEFAULT_RESOLUTION,
            pods: PodRuntime::Process,
            image_cache: ImageCache::new(base.join("images")),
            mode: Mode::Devcluster,
        }
    }
}

/// The pod runner.
pub struct Runner;

impl Runner {
    /// Runs every controller until `shutdown` is cancelled, then kills every
    /// process it started and returns. As a node agent, runs the node instead
    /// ([`Mode::NodeAgent`]).
    pub async fn run(
        client: Client,
        config: RunnerConfig,
        shutdown: CancellationToken,
    ) -> Result<()> {
        if let Mode::NodeAgent(agent) = &config.mode {
            let agent = agent.clone();
            return node_agent::run(client, config, agent, shutdown).await;
        }
        for dir in [&config.work_dir, &config.logs_dir] {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| Error::Io {
                    path: dir.clone(),
                    source,
                })?;
        }
        if let PodRuntime::Container(rt) = &config.pods {
            container::remove_leftovers(rt, &config.work_dir.to_string_lossy()).await;
        }
        let wakers = Arc::new(ctx::Wakers::default());
        let watchers = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        let managed = format!("{}={}", ctx::MANAGED_BY_LABEL, ctx::MANAGED_BY);
        let stores = ctx::Stores {
            pods: reflect::<Pod>(&client, None, None, &wakers, &watchers, &mut tasks),
            deployments: reflect::<Deployment>(&client, None, None, &wakers, &watchers, &mut tasks),
            services: reflect::<Service>(&client, None, None, &wakers, &watchers, &mut tasks),
            jobs: reflect::<Job>(&client, None, None, &wakers, &watchers, &mut tasks),
            cronjobs: reflect::<CronJob>(&client, None, None, &wakers, &watchers, &mut tasks),
            endpoints: reflect::<Endpoints>(
                &client,
                Some(&managed),
                None,
                &wakers,
                &watchers,
                &mut tasks,
            ),
            slices: reflect::<EndpointSlice>(
                &client,
                Some(&managed),
                None,
                &wakers,
                &watchers,
                &mut tasks,
            ),
            hpas: reflect::<HorizontalPodAutoscaler>(
                &client, None, None, &wakers, &watchers, &mut tasks,
            ),
        };
        let ready = async {
            let s = &stores;
            let _ = tokio::join!(
                s.pods.wait_until_ready(),
                s.deployments.wait_until_ready(),
                s.services.wait_until_ready(),
                s.jobs.wait_until_ready(),
                s.cronjobs.wait_until_ready(),
                s.endpoints.wait_until_ready(),
                s.slices.wait_until_ready(),
                s.hpas.wait_until_ready(),
            );
        };
        tokio::select! {
            _ = ready => {}
            _ = shutdown.cancelled() => {
                watchers.cancel();
                while tasks.join_next().await.is_some() {}
                return Ok(());
            }
        }
        let ctx = Arc::new(ctx::Ctx {
            client,
            stores,
            config,
            wakers,
        });
        // Every watch event wakes every controller (see reflect).
        let controllers = CancellationToken::new();
        let tick = Duration::from_secs(1);
        // Deployments and Jobs: one task per object, so none waits behind another.
        let deployments = ctx::KeyedWorkers::new("deployment", controllers.clone());
        tasks.spawn(ctx::control_loop(
            ctx.clone(),
            tick,
            controllers.clone(),
            "deployment",
            move |ctx| deployment::reconcile_all(ctx, Arc::clone(&deployments)),
        ));
        let jobs = ctx::KeyedWorkers::new("job", controllers.clone());
        tasks.spawn(ctx::control_loop(
            ctx.clone(),
            tick,
            controllers.clone(),
            "job",
            move |ctx| job::reconcile_all(ctx, Arc::clone(&jobs)),
        ));
        tasks.spawn(ctx::control_loop(
            ctx.clone(),
            tick,
            controllers.clone(),
            "cronjob",
            cronjob::reconcile_all,
        ));
        tasks.spawn(ctx::control_loop(
            ctx.clone(),
            tick,
            controllers.clone(),
            "endpoints",
            endpoints::reconcile_all,
        ));
        tasks.spawn(ctx.config.usage.clone().run(
            ctx.config.running.clone(),
            ctx.config.metric_resolution,
            controllers.clone(),
        ));
        if let Err(e) = node::register(&ctx.client, &node::Identity::devcluster()).await {
            tracing::warn!(error = %e, "registering the node failed");
        }
        tasks.spawn(hpa::run(
            ctx.clone(),
            ctx.config.hpa_sync_period,
            controllers.clone(),
        ));
        let kubelet_cancel = CancellationToken::new();
        let kubelet = tokio::spawn(kubelet::run(ctx.clone(), kubelet_cancel.clone()));
        tracing::info!("devcluster runner started");

        shutdown.cancelled().await;
        tracing::info!("devcluster runner stopping");
        controllers.cancel();
        kubelet_cancel.cancel();
        if let Err(e) = kubelet.await {
            tracing::error!(error = %e, "kubelet task failed");
        }
        watchers.cancel();
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// Starts a reflector for `K` in all namespaces (the objects `labels` and `fields` select);
/// every event wakes the controllers.
fn reflect<K>(
    client: &Client,
    labels: Option<&str>,
    fields: Option<&str>,
    wakers: &Arc<ctx::Wakers>,
    stop: &CancellationToken,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let api: Api<K> = Api::all(client.clone());
    let mut cfg = watcher::Config::default();
    if let Some(l) = labels {
        cfg = cfg.labels(l);
    }
    if let Some(f) = fields {
        cfg = cfg.fields(f);
    }
    let wakers = wakers.clone();
    let stop = stop.clone();
    tasks.spawn(async move {
        let stream = reflector::reflector(writer, watcher(api, cfg).default_backoff());
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.next() => match item {
                    Some(Ok(_)) => wakers.wake_all(),
                    Some(Err(e)) => tracing::debug!(kind = %K::kind(&()), error = %e, "watch error; retrying"),
                    None => return,
                }
            }
        }
    });
    reader
}
