//! Kubeless kinesis-trigger: delivers the records of a Kinesis stream to the function each
//! KinesisTrigger names, at least once and in order per shard, resuming from checkpoints.
//!
//! * [`plan`]: pure, (triggers, functions) -> one reader configuration per trigger or a problem.
//! * [`reconciler`]: the [`kubeless_trigger::Source`] of KinesisTriggers: the runtime's control
//!   loop watches both kinds, starts/stops [`trigger`] readers and writes status.
//! * [`trigger`]: one trigger: credentials, checkpoint store, ListShards, a [`reader`] per shard.
//! * [`shards`]: pure, which shards may be read now (parents before children) and from where.
//! * [`reader`]: one shard: GetRecords within the limits, deliver, checkpoint.
//! * [`deliver`]: one record -> the function call with retries, dead letter or skip.
//! * [`checkpoint`]: the ConfigMap `<trigger>-kinesis-checkpoints`, coalesced writes.
//!
//! [`serve`] is what the binary runs under the kubeless-service scaffold; [`run`] is the
//! library entry point tests call.

pub mod aws;
pub mod checkpoint;
pub mod deliver;
pub mod leases;
pub mod metrics;
pub mod plan;
pub mod reader;
pub mod reconciler;
pub mod shards;
pub mod trigger;

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

pub use kubeless_trigger::{Resolution, ResolutionArgs, Running};

pub use reader::Polling;
pub use trigger::Timing;

/// Name of the service (OTel service name, default Lease name).
pub const SERVICE_NAME: &str = "kinesis-trigger";

/// Errors that stop the service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating the Kubernetes client failed")]
    Client(#[source] kube::Error),
}

/// This service's flags (besides the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub resolution: ResolutionArgs,
    #[command(flatten)]
    pub activity: kubeless_service::ActivityArgs,
    /// Seconds between full recomputations (retries status writes; watch events trigger one
    /// at once).
    #[arg(
        long = "resync-seconds",
        env = "KUBELESS_RESYNC_SECONDS",
        default_value_t = 30
    )]
    pub resync_seconds: u64,
    /// Least milliseconds between two GetRecords calls on one shard (Kinesis allows 5 per
    /// second per shard; values below 200 are raised to 200).
    #[arg(
        long = "poll-interval-ms",
        env = "KUBELESS_KINESIS_POLL_INTERVAL_MS",
        default_value_t = 250
    )]
    pub poll_interval_ms: u64,
    /// Milliseconds to wait after a GetRecords call that returned nothing.
    #[arg(
        long = "idle-poll-interval-ms",
        env = "KUBELESS_KINESIS_IDLE_POLL_INTERVAL_MS",
        default_value_t = 1000
    )]
    pub idle_poll_interval_ms: u64,
    /// GetRecords `Limit` (1..=10000).
    #[arg(
        long = "records-limit",
        env = "KUBELESS_KINESIS_RECORDS_LIMIT",
        default_value_t = 1000
    )]
    pub records_limit: i32,
    /// Seconds between ListShards calls (finds the children of a split or merge).
    #[arg(
        long = "list-shards-seconds",
        env = "KUBELESS_KINESIS_LIST_SHARDS_SECONDS",
        default_value_t = 10
    )]
    pub list_shards_seconds: u64,
    /// Checkpoint writes are coalesced to at most one per this many milliseconds (a crash
    /// redelivers what finished within the last interval).
    #[arg(
        long = "checkpoint-interval-ms",
        env = "KUBELESS_KINESIS_CHECKPOINT_INTERVAL_MS",
        default_value_t = 1000
    )]
    pub checkpoint_interval_ms: u64,
    /// Share shards between replicas with a Lease per shard (run without --leader-elect).
    #[arg(
        long = "shard-leases",
        env = "KUBELESS_KINESIS_SHARD_LEASES",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub shard_leases: bool,
    /// Seconds a shard Lease stays valid without renewal (renewed every ListShards round).
    #[arg(
        long = "shard-lease-seconds",
        env = "KUBELESS_KINESIS_SHARD_LEASE_SECONDS",
        default_value_t = 30
    )]
    pub shard_lease_seconds: u64,
    /// Holder identity in shard Leases (the pod name).
    #[arg(long = "shard-lease-identity", env = "POD_NAME")]
    pub shard_lease_identity: Option<String>,
}

impl TriggerArgs {
    /// The timing settings the flags describe, clamped to the service limits.
    pub fn timing(&self) -> Timing {
        let d = Timing::default();
        Timing {
            polling: Polling {
                min_interval: Duration::from_millis(self.poll_interval_ms.max(200)),
                idle_interval: Duration::from_millis(
                    self.idle_poll_interval_ms
                        .max(self.poll_interval_ms.max(200)),
                ),
                records_limit: self.records_limit.clamp(1, 10_000),
                max_backoff: d.polling.max_backoff,
            },
            list_shards_interval: Duration::from_secs(self.list_shards_seconds.max(1)),
            checkpoint_interval: Duration::from_millis(self.checkpoint_interval_ms.max(50)),
            max_backoff: d.max_backoff,
        }
    }
}

/// The whole command line.
#[derive(Debug, clap::Parser)]
#[command(name = "kinesis-trigger", version, about = "Kubeless kinesis-trigger")]
pub struct Cli {
    /// Flags every kubeless service has (`--leader-elect` makes this one active replica).
    #[command(flatten)]
    pub service: kubeless_service::ServiceArgs,
    /// This service's flags.
    #[command(flatten)]
    pub trigger: TriggerArgs,
}

/// Resolved settings of [`run`].
#[derive(Clone)]
pub struct Settings {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    pub resolution: Resolution,
    pub resync: Duration,
    pub timing: Timing,
    /// `Some`: replicas share shards through a Lease per shard (instead of one active replica).
    pub shard_leases: Option<leases::ShardLeaseSettings>,
    /// Scale to zero: how often a running function's activity is written at most.
    pub activity_interval: Duration,
}

impl Settings {
    /// All namespaces, default timing, 30 s resync.
    pub fn new(resolution: Resolution) -> Self {
        Self {
            namespace: None,
            resolution,
            resync: Duration::from_secs(30),
            timing: Timing::default(),
            shard_leases: None,
            activity_interval: Duration::from_secs(10),
        }
    }
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(ctx: kubeless_service::Context, args: TriggerArgs) -> Result<(), Error> {
    let timing = args.timing();
    let TriggerArgs {
        resolution,
        activity,
        resync_seconds,
        poll_interval_ms: _,
        idle_poll_interval_ms: _,
        records_limit: _,
        list_shards_seconds: _,
        checkpoint_interval_ms: _,
        shard_leases,
        shard_lease_seconds,
        shard_lease_identity,
    } = args;
    let shard_leases = shard_leases.then(|| leases::ShardLeaseSettings {
        identity: shard_lease_identity
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| format!("kinesis-trigger-{}", std::process::id())),
        duration: Duration::from_secs(
            shard_lease_seconds.max(timing.list_shards_interval.as_secs() * 2 + 1),
        ),
    });
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::Client)?,
    };
    let settings = Settings {
        namespace: ctx.config.watch_namespace.clone(),
        resolution: resolution.resolution(),
        resync: Duration::from_secs(resync_seconds.max(1)),
        timing,
        shard_leases,
        activity_interval: activity.activity_interval,
    };
    let running = run(client, settings, &ctx.metrics, ctx.shutdown.token().clone());
    running.ready_on(ctx.readiness.clone());
    running.join().await;
    Ok(())
}

/// Starts the reconciler (and the EndpointSlice watch when configured); stops when
/// `shutdown` is cancelled.
pub fn run(
    client: Client,
    settings: Settings,
    metrics: &kubeless_service::Metrics,
    shutdown: CancellationToken,
) -> Running {
    let kubeless_trigger::Calls {
        invoker,
        events,
        metrics: runtime_metrics,
        activity,
        endpoints: endpoint_watch,
    } = kubeless_trigger::Calls::build(
        &client,
        settings.namespace.as_deref(),
        settings.resolution,
        metrics::METRICS,
        metrics,
        reconciler::FIELD_MANAGER,
        settings.activity_interval,
    );
    let source = reconciler::KinesisSource {
        shared: trigger::Shared {
            events,
            client: client.clone(),
            invoker,
            metrics: metrics::StreamMetrics::register(metrics),
            runtime_metrics: runtime_metrics.clone(),
            timing: settings.timing,
            shard_leases: settings.shard_leases,
            activity: Some(std::sync::Arc::clone(&activity)),
        },
    };
    kubeless_trigger::run(
        client,
        source,
        kubeless_trigger::Settings {
            namespace: settings.namespace,
            resync: settings.resync,
            // One active replica (the scaffold's election) or shard leases: every replica
            // that runs writes status.
            lease: None,
            activity: Some(activity),
            ..kubeless_trigger::Settings::new()
        },
        runtime_metrics,
        metrics,
        shutdown,
    )
    .keeping(endpoint_watch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flags_parse_and_timing_respects_the_kinesis_limits() {
        let cli = Cli::try_parse_from([
            "kinesis-trigger",
            "--leader-elect",
            "--endpoint-resolution",
            "dns",
            "--poll-interval-ms",
            "50",
            "--idle-poll-interval-ms",
            "10",
            "--records-limit",
            "20000",
            "--list-shards-seconds",
            "0",
        ])
        .unwrap();
        assert_eq!(
            cli.trigger.resolution.endpoint_resolution,
            kubeless_trigger::EndpointResolution::Dns
        );
        assert!(cli.service.leader_elect);
        let t = cli.trigger.timing();
        // Never more than 5 GetRecords per second per shard, whatever the flags say.
        assert_eq!(t.polling.min_interval, Duration::from_millis(200));
        assert_eq!(t.polling.idle_interval, Duration::from_millis(200));
        assert_eq!(t.polling.records_limit, 10_000);
        assert_eq!(t.list_shards_interval, Duration::from_secs(1));

        // What the Helm chart passes with shardLeases: true.
        let cli = Cli::try_parse_from([
            "kinesis-trigger",
            "--leader-elect=false",
            "--shard-leases",
            "--shard-lease-seconds=30",
        ])
        .unwrap();
        assert!(!cli.service.leader_elect);
        assert!(cli.trigger.shard_leases);
        assert_eq!(cli.trigger.shard_lease_seconds, 30);

        let cli = Cli::try_parse_from(["kinesis-trigger"]).unwrap();
        assert!(!cli.trigger.shard_leases);
        assert_eq!(
            cli.trigger.resolution.endpoint_resolution,
            kubeless_trigger::EndpointResolution::Endpointslices
        );
        let t = cli.trigger.timing();
        assert_eq!(t.polling.min_interval, Duration::from_millis(250));
        assert_eq!(t.polling.idle_interval, Duration::from_secs(1));
        assert_eq!(t.checkpoint_interval, Duration::from_secs(1));
    }
}
