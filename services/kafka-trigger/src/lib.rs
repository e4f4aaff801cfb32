//! Kubeless kafka-trigger: for every KafkaTrigger and every Function its selector matches, a
//! Kafka consumer group named like Kubeless's (`<ns>_<trigger>_<fn>_<topic>`) that delivers
//! each record to the function, at least once: an offset is committed only after the
//! function answered 2xx, or after the record went to the trigger's dead-letter topic.
//!
//! Layers: [`plan`] (pure: objects -> desired consumers and statuses), [`source`] (the
//! trigger runtime's [`kubeless_trigger::Source`]: its control loop starts and stops consumers
//! to match and writes status), [`consumer`] (one group: poll thread, partition lanes,
//! offsets, rebalances), [`deliver`] (one record through the runtime's delivery, dead letters
//! to Kafka).

pub mod broker;
pub mod consumer;
pub mod deliver;
pub mod metrics;
pub mod offsets;
pub mod plan;
pub mod record;
pub mod source;

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser};
use kube::Client;
use kubeless_invoke::{ClientOptions, Invoker};
use kubeless_service::{LeaseConfig, ServiceArgs};
use rdkafka::producer::FutureProducer;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

pub use kubeless_trigger::{Resolution, ResolutionArgs};
pub use source::FIELD_MANAGER;

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
    #[command(flatten)]
    pub resolution: ResolutionArgs,
    #[command(flatten)]
    pub activity: kubeless_service::ActivityArgs,
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
        let lease = service.take_lease(SERVICE_NAME);
        (service, brokers, trigger, lease)
    }
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
    pub resolver: Resolution,
    /// Lease picking the status writer (several replicas); `None`: this process writes.
    pub lease: Option<LeaseConfig>,
    /// Scale to zero: how often a running function's activity is written at most.
    pub activity_interval: Duration,
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
            resolution,
            activity,
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
            resolver: resolution.resolution(),
            lease,
            activity_interval: activity.activity_interval,
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
    running.inner.ready_on(ctx.readiness.clone());
    running.join().await
}

/// A running service.
pub struct Running {
    inner: kubeless_trigger::Running,
    /// Consumer health per group.
    pub health: Arc<HealthMap>,
    /// Turns true once caches are synced and the first plan is applied.
    pub ready: watch::Receiver<bool>,
    /// Consumer groups running in this process, sorted.
    pub groups: watch::Receiver<Vec<String>>,
}

impl Running {
    /// Waits until the service stopped (after the token is cancelled: drained and committed).
    pub async fn join(self) -> Result<(), Error> {
        self.inner.join().await;
        tracing::info!("all consumers drained and committed");
        Ok(())
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
    let (resolver, endpoint_watch) = settings
        .resolver
        .build(&client, settings.namespace.as_deref());
    let invoker = Invoker::with_options(
        resolver,
        &ClientOptions {
            pool_max_idle_per_host: settings.max_in_flight,
            ..ClientOptions::default()
        },
    );
    let changed = Arc::new(Notify::new());
    let health = Arc::new(HealthMap::new(Arc::clone(&changed)));
    let control = kubeless_trigger::TriggerMetrics::register_control(metrics, metrics::METRICS);
    let activity =
        kubeless_trigger::activity(settings.activity_interval, &client, control.wakes.clone());
    let shared = Arc::new(consumer::Shared {
        brokers: settings.brokers.clone(),
        deliverer: Arc::new(deliver::Deliverer {
            invoker,
            producer: Some(producer),
            max_wait: Duration::from_secs(30),
            events: Some(kubeless_trigger::controller::throttled_events(
                &client,
                FIELD_MANAGER,
            )),
            activity: Some(Arc::clone(&activity)),
        }),
        in_flight: Arc::new(tokio::sync::Semaphore::new(settings.max_in_flight)),
        metrics: metrics::TriggerMetrics::register(metrics),
        runtime: tokio::runtime::Handle::current(),
        tuning: settings.tuning.clone(),
        health: Arc::clone(&health),
    });
    let (groups_tx, groups) = watch::channel(Vec::new());
    let source = source::KafkaSource {
        shared,
        defaults: settings.defaults,
        groups: groups_tx,
    };
    let inner = kubeless_trigger::run(
        client,
        source,
        kubeless_trigger::Settings {
            namespace: settings.namespace,
            resync: Duration::from_secs(30),
            lease: settings.lease,
            changed,
            activity: Some(activity),
        },
        control,
        metrics,
        token,
    )
    .keeping(endpoint_watch);
    Ok(Running {
        ready: inner.synced.clone(),
        inner,
        health,
        groups,
    })
}
