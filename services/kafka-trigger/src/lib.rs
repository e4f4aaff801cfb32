//! Kubeless kafka-trigger: for every KafkaTrigger and every Function its selector matches, a
//! Kafka consumer group named like Kubeless's (`<ns>_<trigger>_<fn>_<topic>`) that delivers
//! each record to the function, at least once: an offset is committed only after the
//! function answered 2xx, or after the record went to the trigger's dead-letter topic.
//!
//! Layers: [`plan`] (pure: objects -> desired consumers and statuses), [`supervisor`] (start
//! and stop consumers to match), [`consumer`] (one group: poll thread, partition lanes,
//! offsets, rebalances), [`deliver`] (invoker call, retries, dead letters), [`status`].

pub mod broker;
pub mod consumer;
pub mod deliver;
pub mod metrics;
pub mod offsets;
pub mod plan;
pub mod record;

pub mod status;
pub mod supervisor;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use kubeless_api::{Function, KafkaTrigger};
use kubeless_invoke::{ClientOptions, ClusterDnsResolver, EndpointSliceResolver, Invoker, Resolve};
use kubeless_service::lease::{LeaderElector, LeaseMetrics};
use kubeless_service::{LeaseConfig, ServiceArgs};
use rdkafka::producer::FutureProducer;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Field manager of status writes and reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-kafka-trigger";

pub use broker::BrokerArgs;
pub use consumer::{Health, HealthMap, Tuning};
pub use plan::{Defaults, Ordering};

/// Name of the service (metrics, Lease, logs).
pub const SERVICE_NAME: &str = "kafka-trigger";

/// Command line: the scaffold's flags, the broker flags and this service's own.
#[derive(Parser, Debug)]
#[command(
    name = "kafka-trigger",
    version,
    about = "Delivers Kafka records to the functions KafkaTriggers select, at least once"
)]
pub struct Cli {
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub brokers: BrokerArgs,
    #[command(flatten)]
    pub trigger: TriggerArgs,
}

/// How functions are found.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolverKind {
    /// `<fn>.<ns>.svc.<cluster-domain>`; kube-proxy balances (per connection).
    Dns,
    /// Ready pod addresses from the function Service's EndpointSlices, balanced per call here.
    Endpointslices,
}

#[derive(Args, Debug, Clone)]
pub struct TriggerArgs {
    /// Order within a partition: `partition` (one call at a time per partition), `key`
    /// (per-key order, keys in parallel) or `none`. A trigger's annotation
    /// `kafkatriggers.kubeless.io/ordering` overrides it.
    #[arg(long, env = "KAFKA_ORDERING", default_value = "partition")]
    pub ordering: Ordering,
    /// Function calls in flight at most, over all consumers of this process.
    #[arg(long, env = "KAFKA_MAX_IN_FLIGHT", default_value_t = 256)]
    pub max_in_flight: usize,
    /// Parallel lanes per partition with `key` or `none` ordering.
    #[arg(long, env = "KAFKA_PARTITION_LANES", default_value_t = 32)]
    pub lanes: usize,
    /// Records waiting per partition before it is no longer read (also librdkafka's prefetch per partition).
    #[arg(long, env = "KAFKA_MAX_QUEUED", default_value_t = 2_000)]
    pub max_queued: usize,
    /// Seconds a rebalance or stop waits for in-flight calls before abandoning them.
    #[arg(long, env = "KAFKA_DRAIN_TIMEOUT_SECONDS", default_value_t = 30)]
    pub drain_timeout_seconds: u64,
    /// Milliseconds between offset commits.
    #[arg(long, env = "KAFKA_COMMIT_INTERVAL_MS", default_value_t = 500)]
    pub commit_interval_ms: u64,
    /// Seconds between lag (watermark) and topic health checks.
    #[arg(long, env = "KAFKA_LAG_INTERVAL_SECONDS", default_value_t = 5)]
    pub lag_interval_seconds: u64,
    /// Kubeless's BACKOFF_INTERVAL (e.g. `30s`): the longest wait after a failed call, for
    /// triggers whose `retry.maxBackoff` is unset.
    #[arg(long, env = "BACKOFF_INTERVAL")]
    pub backoff_interval: Option<String>,
    #[arg(
        long,
        env = "KUBELESS_RESOLVER",
        value_enum,
        default_value = "endpointslices"
    )]
    pub resolver: ResolverKind,
    /// Cluster domain for the dns resolver.
    #[arg(long, env = "KUBELESS_CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
}

impl Cli {
    /// Every replica consumes (the groups balance partitions between them), so the scaffold
    /// must not gate the service on the Lease; the Lease only picks the status writer.
    pub fn split_leader_election(
        self,
    ) -> (ServiceArgs, BrokerArgs, TriggerArgs, Option<LeaseConfig>) {
        let Self {
            mut service,
            brokers,
            trigger,
        } = self;
        let mut lease = None;
        if service.leader_elect {
            lease = service.clone().into_config(SERVICE_NAME).lease;
            service.leader_elect = false;
        }
        (service, brokers, trigger, lease)
    }
}

/// How [`run`] finds function endpoints.
#[derive(Clone)]
pub enum ResolverChoice {
    Dns(String),
    EndpointSlices,
    /// Any resolver (tests, benches).
    Custom(Arc<dyn Resolve>),
}

/// Resolved settings of [`run`].
#[derive(Clone)]
pub struct Settings {
    /// Watch only this namespace; all when `None`.
    pub namespace: Option<String>,
    pub brokers: BrokerArgs,
    pub defaults: Defaults,
    pub max_in_flight: usize,
    pub tuning: Tuning,
    pub resolver: ResolverChoice,
    /// Lease picking the status writer (several replicas); `None`: this process writes.
    pub lease: Option<LeaseConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid broker settings")]
    BrokerConfig(#[from] broker::BrokerConfigError),
    #[error("invalid BACKOFF_INTERVAL")]
    BackoffInterval(#[source] kubeless_api::Error),
    #[error("creating the dead-letter producer failed")]
    Producer(#[source] rdkafka::error::KafkaError),
    #[error("creating the Kubernetes client failed")]
    KubeClient(#[source] kube::Error),
    #[error("the service task failed")]
    Join(#[source] tokio::task::JoinError),
}

impl Settings {
    pub fn from_args(
        brokers: BrokerArgs,
        args: TriggerArgs,
        namespace: Option<String>,
        lease: Option<LeaseConfig>,
    ) -> Result<Self, Error> {
        let TriggerArgs {
            ordering,
            max_in_flight,
            lanes,
            max_queued,
            drain_timeout_seconds,
            commit_interval_ms,
            lag_interval_seconds,
            backoff_interval,
            resolver,
            cluster_domain,
        } = args;
        let max_backoff = backoff_interval
            .as_deref()
            .map(|s| kubeless_api::delivery::parse_duration("BACKOFF_INTERVAL", s))
            .transpose()
            .map_err(Error::BackoffInterval)?;
        Ok(Self {
            namespace,
            brokers,
            defaults: Defaults {
                ordering,
                max_backoff,
            },
            max_in_flight: max_in_flight.max(1),
            tuning: Tuning {
                lanes: lanes.max(1),
                max_queued: max_queued.max(2),
                drain_timeout: Duration::from_secs(drain_timeout_seconds),
                commit_interval: Duration::from_millis(commit_interval_ms.max(10)),
                lag_interval: Duration::from_secs(lag_interval_seconds.max(1)),
            },
            resolver: match resolver {
                ResolverKind::Dns => ResolverChoice::Dns(cluster_domain),
                ResolverKind::Endpointslices => ResolverChoice::EndpointSlices,
            },
            lease,
        })
    }
}

/// The scaffold entry point (see main.rs).
pub async fn serve(
    ctx: kubeless_service::Context,
    brokers: BrokerArgs,
    args: TriggerArgs,
    lease: Option<LeaseConfig>,
) -> Result<(), Error> {
    let settings = Settings::from_args(brokers, args, ctx.config.watch_namespace.clone(), lease)?;
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::KubeClient)?,
    };
    let running = run(client, settings, &ctx.metrics, ctx.shutdown.token().clone()).await?;
    let mut ready = running.ready.clone();
    let readiness = ctx.readiness.clone();
    tokio::spawn(async move {
        if ready.wait_for(|r| *r).await.is_ok() {
            readiness.set_ready(true);
        }
    });
    running.join().await
}

/// A running service.
pub struct Running {
    task: JoinHandle<()>,
    /// Consumer health per group.
    pub health: HealthMap,
    /// Turns true once caches are synced and the first plan is applied.
    pub ready: watch::Receiver<bool>,
    /// Groups running after each applied plan.
    pub groups: watch::Receiver<Vec<String>>,
}

impl Running {
    /// Waits until the service stopped (after the token is cancelled: drained and committed).
    pub async fn join(self) -> Result<(), Error> {
        self.task.await.map_err(Error::Join)
    }
}

/// Starts watching, consuming and writing status until `token` is cancelled.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: &kubeless_service::Metrics,
    token: CancellationToken,
) -> Result<Running, Error> {
    let producer: FutureProducer = settings
        .brokers
        .producer_config()?
        .create()
        .map_err(Error::Producer)?;
    let ns = settings.namespace.as_deref();
    let mut background: Vec<JoinHandle<()>> = Vec::new();
    let resolver: Arc<dyn Resolve> = match &settings.resolver {
        ResolverChoice::Dns(domain) => Arc::new(ClusterDnsResolver::new(domain.clone())),
        ResolverChoice::Custom(r) => Arc::clone(r),
        ResolverChoice::EndpointSlices => {
            let r = Arc::new(EndpointSliceResolver::default());
            background.push(r.spawn_watch(client.clone(), ns));
            r
        }
    };
    let invoker = Invoker::with_options(
        resolver,
        &ClientOptions {
            pool_max_idle_per_host: settings.max_in_flight,
            ..ClientOptions::default()
        },
    );
    let trigger_metrics = metrics::TriggerMetrics::register(metrics);
    let health: HealthMap = Arc::new(Mutex::new(Default::default()));
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
    };
    let events = kubeless_service::ThrottledEvents::new(
        client.clone(),
        reporter.clone(),
        kubeless_service::DEFAULT_EVENT_INTERVAL,
    );
    let shared = Arc::new(consumer::Shared {
        brokers: settings.brokers.clone(),
        deliverer: Arc::new(deliver::Deliverer {
            invoker,
            producer: Some(producer),
            max_wait: Duration::from_secs(30),
            events: Some(events),
        }),
        in_flight: Arc::new(tokio::sync::Semaphore::new(settings.max_in_flight)),
        metrics: trigger_metrics.clone(),
        runtime: tokio::runtime::Handle::current(),
        tuning: settings.tuning.clone(),
        health: Arc::clone(&health),
    });

    // Caches of triggers and functions; any change wakes the reconcile loop.
    let notify = Arc::new(Notify::new());
    // Guarded watches: a malformed KafkaTrigger (or Function) costs only itself.
    let (trig_reader, bad_triggers, trig_task) = kubeless_service::guarded_watch_notify::<
        KafkaTrigger,
    >(client.clone(), ns, Arc::clone(&notify));
    let (fn_reader, _, fn_task) =
        kubeless_service::guarded_watch_notify::<Function>(client.clone(), ns, Arc::clone(&notify));
    background.push(trig_task);
    background.push(fn_task);
    let recorder = Recorder::new(client.clone(), reporter);

    let leader = settings.lease.clone().map(|lease| {
        let (rx, task) = LeaderElector::new(client.clone(), lease, LeaseMetrics::register(metrics))
            .spawn(token.child_token());
        background.push(task);
        rx
    });

    let (ready_tx, ready_rx) = watch::channel(false);
    let (groups_tx, groups_rx) = watch::channel(Vec::new());
    let defaults = settings.defaults;
    let task_health = Arc::clone(&health);
    let task = tokio::spawn(async move {
        let mut supervisor = supervisor::Supervisor::new(shared);
        let ready = async {
            let _ = trig_reader.wait_until_ready().await;
            let _ = fn_reader.wait_until_ready().await;
        };
        let synced = tokio::select! {
            _ = ready => true,
            _ = token.cancelled() => false,
        };
        if synced {
            tracing::info!("caches synced");
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            loop {
                let triggers: Vec<KafkaTrigger> =
                    trig_reader.state().iter().map(|t| (**t).clone()).collect();
                let functions: Vec<Function> =
                    fn_reader.state().iter().map(|f| (**f).clone()).collect();
                let desired = plan::plan(&triggers, &functions, &defaults);
                tracing::debug!(
                    triggers = triggers.len(), functions = functions.len(),
                    consumers = ?desired.consumers.keys().collect::<Vec<_>>(), "plan"
                );
                supervisor.apply(&desired.consumers).await;
                groups_tx.send_replace(supervisor.groups());
                ready_tx.send_replace(true);
                let may_write = leader.as_ref().is_none_or(|l| *l.borrow());
                if may_write {
                    write_statuses(&client, &triggers, &desired, &task_health, &trigger_metrics)
                        .await;
                    kubeless_service::report_all_invalid::<KafkaTrigger>(
                        &client,
                        &recorder,
                        &bad_triggers,
                        FIELD_MANAGER,
                    )
                    .await;
                }
                tokio::select! {
                    _ = notify.notified() => {
                        // Let a burst of watch events settle into one pass.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    _ = tick.tick() => {}
                    _ = token.cancelled() => break,
                }
            }
        }
        tracing::info!("shutting down: draining consumers");
        supervisor.stop_all().await;
        for b in background {
            b.abort();
        }
        tracing::info!("all consumers drained and committed");
    });
    Ok(Running {
        task,
        health,
        ready: ready_rx,
        groups: groups_rx,
    })
}

/// Drives one guarded watch; every change (or error, retried with backoff) wakes the loop.
async fn write_statuses(
    client: &Client,
    triggers: &[KafkaTrigger],
    desired: &plan::Plan,
    health: &HealthMap,
    metrics: &metrics::TriggerMetrics,
) {
    for tp in &desired.triggers {
        let Some(current) = triggers.iter().find(|t| {
            t.metadata.name.as_deref() == Some(tp.name.as_str())
                && t.metadata.namespace.as_deref() == Some(tp.namespace.as_str())
        }) else {
            continue;
        };
        let h: Vec<Option<Health>> = {
            let m = health.lock().unwrap_or_else(|e| e.into_inner());
            tp.groups.iter().map(|g| m.get(g).cloned()).collect()
        };
        let Some(status) = status::desired_status(current.status.as_ref(), tp, &h) else {
            continue;
        };
        let api: Api<KafkaTrigger> = Api::namespaced(client.clone(), &tp.namespace);
        let patch = serde_json::json!({ "status": status });
        match api
            .patch_status(&tp.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                metrics
                    .status_writes
                    .get_or_create(&[("result", "ok")])
                    .inc();
            }
            Err(e) => {
                metrics
                    .status_writes
                    .get_or_create(&[("result", "error")])
                    .inc();
                tracing::warn!(trigger = %tp.name, namespace = %tp.namespace, error = %e, "status write failed");
            }
        }
    }
}
