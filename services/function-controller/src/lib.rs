//! Kubeless function-controller: watches Functions and the `kubeless-config` ConfigMap and keeps
//! each Function's ConfigMap, Deployment, Service and HPA in shape, with status conditions.
//!
//! Layout: [`catalogue`] and [`config`] read the configuration, [`builders`] turn a Function
//! into objects (pure), [`diagnose`] reads pods into conditions (pure), [`reconcile`] talks to
//! the API. [`run_controller`] is the library entry point tests use; [`serve`] is what the
//! binary runs under the kubeless-service scaffold.

pub mod build_step;
pub mod builders;
pub mod building;
pub mod catalogue;
pub mod config;
pub mod diagnose;
mod error;
pub mod metrics;
pub mod policy;
pub mod reconcile;
pub mod scale;
pub mod warm;

use std::sync::{Arc, RwLock};

use futures::{StreamExt, channel::mpsc};
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::Job,
    core::v1::{ConfigMap, Pod, Service},
};
use kube::{
    Api, Client, Resource,
    core::DeserializeGuard,
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerRunConfig,
        events::{Recorder, Reporter},
        reflector, watcher,
    },
};
use kubeless_api::{
    Function,
    labels::{CREATED_BY, CREATED_BY_VALUE},
};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub use config::ControllerConfig;
pub use error::Error;
pub use reconcile::FIELD_MANAGER;

use crate::metrics::ControllerMetrics;
use crate::reconcile::{Context, Stores, error_policy, function_of, reconcile, strip_meta};

/// Name of the service (OTel service name, default Lease name).
pub const SERVICE_NAME: &str = "function-controller";

/// Flags of the function-controller (besides the shared service flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Namespace of the kubeless-config ConfigMap (the controller's own namespace).
    #[arg(
        long = "kubeless-namespace",
        env = "KUBELESS_NAMESPACE",
        default_value = "kubeless"
    )]
    pub kubeless_namespace: String,
    /// Name of the controller ConfigMap.
    #[arg(
        long = "kubeless-config",
        env = "KUBELESS_CONFIG",
        default_value = "kubeless-config"
    )]
    pub kubeless_config: String,
    /// Make function runtimes listen on their pod IP (devcluster, where pods share the host
    /// network; leave off on Kubernetes).
    #[arg(
        long = "listen-on-pod-ip",
        env = "KUBELESS_LISTEN_ON_POD_IP",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub listen_on_pod_ip: bool,
    /// Cluster DNS domain, for the in-cluster URL in each Function's `status.url`.
    #[arg(
        long = "cluster-domain",
        env = "KUBELESS_CLUSTER_DOMAIN",
        default_value = kubeless_api::function::DEFAULT_CLUSTER_DOMAIN
    )]
    pub cluster_domain: String,
    /// How many Functions are reconciled at the same time.
    #[arg(
        long = "concurrency",
        env = "KUBELESS_CONCURRENCY",
        default_value_t = 64
    )]
    pub concurrency: u16,
    /// Scale idle Functions to zero unless they set `scaleToZero.enabled: false` (Functions
    /// can also opt in one by one with `scaleToZero.enabled: true`).
    #[arg(
        long = "scale-to-zero",
        env = "KUBELESS_SCALE_TO_ZERO",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub scale_to_zero: bool,
    /// Idle period after which a Function scales to zero, unless it sets
    /// `scaleToZero.idleAfter`: e.g. 90s, 5m, 1h.
    #[arg(
        long = "scale-to-zero-idle",
        env = "KUBELESS_SCALE_TO_ZERO_IDLE",
        default_value = "5m",
        value_parser = parse_idle
    )]
    pub scale_to_zero_idle: std::time::Duration,
    /// The activity interval the gateway and triggers of this install write at (set it to
    /// their `--activity-interval`): idle periods shorter than 3 times it are refused.
    #[command(flatten)]
    pub activity: kubeless_service::args::ActivityArgs,
    /// Build every Function into an image with its code and dependencies (the build step)
    /// unless it says otherwise; the `kubeless-config` key `enable-build-step` wins.
    #[arg(
        long = "build-step",
        env = "KUBELESS_BUILD_STEP",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub build_step: bool,
    /// Registry (and repository prefix) function images are pushed to, `host[:port][/path]`.
    #[arg(long = "build-registry", env = "KUBELESS_BUILD_REGISTRY")]
    pub build_registry: Option<String>,
    /// Secret in each Function's namespace with the registry credentials (`.dockerconfigjson`)
    /// and an optional CA bundle (`ca.crt`).
    #[arg(
        long = "build-registry-secret",
        env = "KUBELESS_BUILD_REGISTRY_SECRET",
        default_value = config::DEFAULT_REGISTRY_SECRET
    )]
    pub build_registry_secret: String,
    /// Talk plain HTTP to the registry (a local registry without TLS).
    #[arg(
        long = "build-insecure-registry",
        env = "KUBELESS_BUILD_INSECURE_REGISTRY",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub build_insecure_registry: bool,
    /// Image of the build Job's push step.
    #[arg(
        long = "builder-image",
        env = "KUBELESS_BUILDER_IMAGE",
        default_value = config::DEFAULT_BUILDER_IMAGE
    )]
    pub builder_image: String,
    /// Warm pool: idle runtime pods to keep per runtime, `python3.11=2,nodejs20=1` (a runtime
    /// alone keeps one). A Function woken from zero runs on one until its own pod is ready.
    /// Empty: no pool.
    #[arg(
        long = "warm-pool",
        env = "KUBELESS_WARM_POOL",
        default_value = "",
        value_parser = warm::parse_pool
    )]
    pub warm_pool: std::collections::BTreeMap<String, u32>,
    /// Secret (in the kubeless namespace) with the token of the pool pods' specialize call;
    /// created with a random token when missing.
    #[arg(
        long = "warm-pool-secret",
        env = "KUBELESS_WARM_POOL_SECRET",
        default_value = kubeless_api::warm::DEFAULT_TOKEN_SECRET
    )]
    pub warm_pool_secret: String,
    /// The pod template policy.
    #[command(flatten)]
    pub template_policy: policy::PolicyArgs,
}

fn parse_idle(s: &str) -> Result<std::time::Duration, String> {
    kubeless_api::scale::parse_idle_after(s).map_err(|e| e.to_string())
}

/// The whole command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "function-controller",
    version,
    about = "Kubeless function-controller"
)]
pub struct Cli {
    /// Flags every kubeless service has.
    #[command(flatten)]
    pub service: kubeless_service::ServiceArgs,
    /// This controller's flags.
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// Resolved settings of [`run_controller`].
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespace of the kubeless-config ConfigMap.
    pub config_namespace: String,
    /// Name of the kubeless-config ConfigMap.
    pub config_name: String,
    /// Only this namespace (flag); when `None`, the ConfigMap's functions-namespace, else all.
    pub watch_namespace: Option<String>,
    /// Parallel reconciles.
    pub concurrency: u16,
    /// Reporting instance of Events (the pod name).
    pub instance: Option<String>,
    /// See [`ControllerArgs::listen_on_pod_ip`].
    pub listen_on_pod_ip: bool,
    /// See [`ControllerArgs::cluster_domain`].
    pub cluster_domain: String,
    /// See [`ControllerArgs::scale_to_zero`] and [`ControllerArgs::scale_to_zero_idle`].
    pub scale_to_zero: kubeless_api::scale::ScaleToZeroDefaults,
    pub build: config::BuildSettings,
    /// See [`ControllerArgs::warm_pool`]; the pool lives in `config_namespace`.
    pub warm: warm::WarmSettings,
    /// See [`ControllerArgs::template_policy`].
    pub template_policy: policy::TemplatePolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            config_namespace: "kubeless".into(),
            config_name: "kubeless-config".into(),
            watch_namespace: None,
            concurrency: 64,
            instance: None,
            listen_on_pod_ip: false,
            cluster_domain: kubeless_api::function::DEFAULT_CLUSTER_DOMAIN.into(),
            scale_to_zero: Default::default(),
            build: Default::default(),
            warm: Default::default(),
            template_policy: Default::default(),
        }
    }
}

impl Settings {
    /// Settings from the flags; `watch_namespace` comes from the shared `--watch-namespace`.
    pub fn from_args(args: ControllerArgs, watch_namespace: Option<String>) -> Self {
        let ControllerArgs {
            kubeless_namespace,
            kubeless_config,
            listen_on_pod_ip,
            cluster_domain,
            concurrency,
            scale_to_zero,
            scale_to_zero_idle,
            activity,
            build_step,
            build_registry,
            build_registry_secret,
            build_insecure_registry,
            builder_image,
            warm_pool,
            warm_pool_secret,
            template_policy,
        } = args;
        Self {
            template_policy: template_policy.into(),
            warm: warm::WarmSettings {
                runtimes: warm_pool,
                namespace: kubeless_namespace.clone(),
                token_secret: warm_pool_secret,
            },
            config_namespace: kubeless_namespace,
            config_name: kubeless_config,
            watch_namespace,
            concurrency: concurrency.max(1),
            instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
            listen_on_pod_ip,
            cluster_domain,
            scale_to_zero: kubeless_api::scale::ScaleToZeroDefaults {
                enabled: scale_to_zero,
                idle_after: scale_to_zero_idle,
                activity_interval: activity.activity_interval,
            },
            build: config::BuildSettings {
                enabled: build_step,
                registry: build_registry.filter(|r| !r.trim().is_empty()),
                registry_secret: build_registry_secret,
                insecure: build_insecure_registry,
                builder_image: Some(builder_image)
                    .filter(|i| !i.trim().is_empty())
                    .unwrap_or_else(|| config::DEFAULT_BUILDER_IMAGE.into()),
                builder_image_secret: None,
            },
        }
    }
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(ctx: kubeless_service::Context, args: ControllerArgs) -> Result<(), Error> {
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::Client)?,
    };
    let settings = Settings::from_args(args, ctx.config.watch_namespace.clone());
    // A default idle period that every Function would inherit and fail on: refuse to start.
    settings
        .scale_to_zero
        .check_idle("--scale-to-zero-idle", settings.scale_to_zero.idle_after)
        .map_err(Error::Settings)?;
    ctx.readiness.set_ready(true);
    run_controller(client, settings, &ctx.metrics, ctx.shutdown.token().clone()).await
}

/// Runs the controller until `shutdown` is cancelled. Restarts its watches when the
/// ConfigMap's functions-namespace changes (and no namespace flag pins it).
pub async fn run_controller(
    client: Client,
    settings: Settings,
    metrics: &kubeless_service::Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let metrics = ControllerMetrics::register(metrics);
    loop {
        let cfg = load_config(&client, &settings).await?;
        let namespace = settings
            .watch_namespace
            .clone()
            .or_else(|| cfg.functions_namespace.clone());
        tracing::info!(
            namespace = namespace.as_deref().unwrap_or("<all>"),
            "watching Functions"
        );
        let restart = shutdown.child_token();
        run_once(&client, &settings, cfg, namespace, metrics.clone(), restart).await;
        if shutdown.is_cancelled() {
            return Ok(());
        }
        tracing::info!("functions-namespace changed; restarting the watches");
    }
}

async fn load_config(client: &Client, s: &Settings) -> Result<ControllerConfig, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &s.config_namespace);
    match api.get_opt(&s.config_name).await {
        Ok(Some(cm)) => Ok(config_from(&cm, s)),
        Ok(None) => {
            tracing::info!(
                namespace = s.config_namespace,
                name = s.config_name,
                "no controller ConfigMap; using the built-in runtime catalogue"
            );
            Ok(default_config(s))
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(error = %e, "may not read the controller ConfigMap; using defaults");
            Ok(default_config(s))
        }
        Err(source) => Err(Error::Config {
            namespace: s.config_namespace.clone(),
            name: s.config_name.clone(),
            source,
        }),
    }
}

fn config_from(cm: &ConfigMap, s: &Settings) -> ControllerConfig {
    let (mut cfg, problems) = ControllerConfig::from_data(&cm.data.clone().unwrap_or_default());
    for p in problems {
        tracing::warn!(error = %p, source = ?std::error::Error::source(&p), "ignoring a bad controller ConfigMap key");
    }
    cfg.listen_on_pod_ip = s.listen_on_pod_ip;
    cfg.cluster_domain.clone_from(&s.cluster_domain);
    cfg.scale_to_zero = s.scale_to_zero;
    cfg.build = cfg.build_keys.over(&s.build);
    cfg.template_policy.clone_from(&s.template_policy);
    cfg
}

fn default_config(s: &Settings) -> ControllerConfig {
    ControllerConfig {
        listen_on_pod_ip: s.listen_on_pod_ip,
        cluster_domain: s.cluster_domain.clone(),
        scale_to_zero: s.scale_to_zero,
        build: s.build.clone(),
        template_policy: s.template_policy.clone(),
        ..ControllerConfig::default()
    }
}

fn api_in<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One cached, stripped watch of a child kind: returns its store and the trigger stream.
fn child_watch<K>(
    client: &Client,
    namespace: Option<&str>,
    strip: fn(&mut K),
) -> (
    reflector::Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    // Only what Kubeless creates: other ConfigMaps, Services and Pods are none of our business.
    let wc = watcher::Config::default().labels(&format!("{CREATED_BY}={CREATED_BY_VALUE}"));
    let stream = watcher(api_in::<K>(client, namespace), wc)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

async fn run_once(
    client: &Client,
    settings: &Settings,
    cfg: ControllerConfig,
    namespace: Option<String>,
    metrics: ControllerMetrics,
    restart: CancellationToken,
) {
    let ns = namespace.as_deref();
    let (config_maps, cm_stream) = child_watch::<ConfigMap>(client, ns, |o| {
        o.data = None;
        o.binary_data = None;
        strip_meta(o);
    });
    let (deployments, dep_stream) = child_watch::<Deployment>(client, ns, |o| {
        o.spec = None;
        strip_meta(o);
    });
    let (services, svc_stream) = child_watch::<Service>(client, ns, |o| {
        o.spec = None;
        strip_meta(o);
    });
    let (hpas, hpa_stream) = child_watch::<HorizontalPodAutoscaler>(client, ns, |o| {
        o.spec = None;
        strip_meta(o);
    });
    let (pods, pod_stream) = child_watch::<Pod>(client, ns, |o| {
        o.spec = None;
        strip_meta(o);
    });
    // Build Jobs (the build step): their state, not their pod template.
    let (jobs, job_stream) = child_watch::<Job>(client, ns, |o| {
        o.spec = None;
        strip_meta(o);
    });
    let shared = Arc::new(RwLock::new(Arc::new(cfg)));
    let (trigger_tx, trigger_rx) = mpsc::unbounded::<()>();
    let watch_task = tokio::spawn(watch_config(
        client.clone(),
        settings.clone(),
        shared.clone(),
        trigger_tx,
        restart.clone(),
    ));
    let stores = Stores {
        config_maps,
        deployments,
        services,
        hpas,
        pods,
        jobs,
    };
    let warm = warm::Warm::start(client, settings.warm.clone()).map(|(w, watch)| {
        tokio::spawn(warm::run_pool(
            Arc::clone(&w),
            Arc::clone(&shared),
            watch,
            restart.clone(),
        ));
        w
    });
    let (filled_tx, caches_filled) = tokio::sync::watch::channel(false);
    tokio::spawn(stores.clone().signal_filled(filled_tx));
    let ctx = Arc::new(Context {
        client: client.clone(),
        config: shared,
        stores,
        caches_filled,
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: settings.instance.clone(),
            },
        ),
        metrics,
        backoff: Default::default(),
        stopping: restart.clone(),
        waking: Default::default(),
        build_events: Default::default(),
        warm,
    });
    // Guarded: a Function that does not deserialize reaches the reconciler as an error (and is
    // marked InvalidSpec) instead of failing the list of every Function.
    let functions = api_in::<DeserializeGuard<Function>>(client, ns);
    Controller::new(functions, watcher::Config::default())
        .with_config(ControllerRunConfig::default().concurrency(settings.concurrency))
        .owns_stream(cm_stream)
        .owns_stream(dep_stream)
        .owns_stream(svc_stream)
        .owns_stream(hpa_stream)
        .owns_stream(job_stream)
        .watches_stream(pod_stream, |p: Pod| function_of(&p))
        .reconcile_all_on(trigger_rx)
        .graceful_shutdown_on(restart.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    restart.cancel();
    let _ = watch_task.await;
}

/// Follows the controller ConfigMap: a changed config replaces the shared one and requeues
/// every Function; a changed functions-namespace restarts the watches.
async fn watch_config(
    client: Client,
    settings: Settings,
    shared: Arc<RwLock<Arc<ControllerConfig>>>,
    trigger: mpsc::UnboundedSender<()>,
    restart: CancellationToken,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &settings.config_namespace);
    let wc = watcher::Config::default().fields(&format!("metadata.name={}", settings.config_name));
    let mut events = watcher(api, wc).default_backoff().boxed();
    loop {
        let event = tokio::select! {
            _ = restart.cancelled() => return,
            e = events.next() => e,
        };
        let new = match event {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching the controller ConfigMap");
                continue;
            }
            Some(Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm))) => {
                config_from(&cm, &settings)
            }
            Some(Ok(watcher::Event::Delete(_))) => default_config(&settings),
            Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => continue,
        };
        let old = match shared.read() {
            Ok(c) => c.clone(),
            Err(e) => e.into_inner().clone(),
        };
        if *old == new {
            continue;
        }
        let ns_changed = old.functions_namespace != new.functions_namespace;
        match shared.write() {
            Ok(mut c) => *c = Arc::new(new),
            Err(e) => *e.into_inner() = Arc::new(new),
        }
        if ns_changed && settings.watch_namespace.is_none() {
            restart.cancel();
            return;
        }
        tracing::info!("controller ConfigMap changed; reconciling every Function");
        let _ = trigger.unbounded_send(());
    }
}
