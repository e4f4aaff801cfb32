//! What a trigger binary runs: the flags every trigger has ([`TriggerArgs`]), the parts its
//! [`Source`] is built from ([`Parts`]) and [`serve`], which ties the control loop to the
//! kubeless-service scaffold (client, endpoint resolver, metrics, readiness once the caches
//! synced, drain on shutdown).

use std::sync::Arc;
use std::time::Duration;

use kubeless_invoke::{Activity, Invoker};
use kubeless_service::{ActivityArgs, Context, LeaseConfig, ThrottledEvents};

use crate::controller::{self, Settings, Source};
use crate::metrics::{Names, TriggerMetrics};
use crate::resolution::ResolutionArgs;

/// The flags of an event trigger besides the scaffold's.
#[derive(Debug, Clone, clap::Args)]
#[group(id = "kubeless-trigger-args")]
pub struct TriggerArgs {
    #[command(flatten)]
    pub resolution: ResolutionArgs,
    /// Seconds a stopping unit waits for the events in flight (they are delivered again later
    /// when it gives up).
    #[arg(
        long = "drain-timeout-seconds",
        env = "KUBELESS_DRAIN_TIMEOUT_SECONDS",
        default_value_t = 30
    )]
    pub drain_timeout_seconds: u64,
    /// Seconds between full recomputations (retries status writes; watch events trigger one
    /// at once).
    #[arg(
        long = "resync-seconds",
        env = "KUBELESS_RESYNC_SECONDS",
        default_value_t = 30
    )]
    pub resync_seconds: u64,
    #[command(flatten)]
    pub activity: ActivityArgs,
}

/// The traffic recorder of a service that calls functions (`interval`: [`ActivityArgs`]),
/// writing through `client`, counting the wake-ups it writes in `wakes`.
pub fn activity(
    interval: Duration,
    client: &kube::Client,
    wakes: prometheus_client::metrics::counter::Counter,
) -> Arc<Activity> {
    Arc::new(
        Activity::new(client.clone(), interval).on_wake(move |_, _| {
            wakes.inc();
        }),
    )
}

impl TriggerArgs {
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_timeout_seconds)
    }

    /// At least a second.
    pub fn resync(&self) -> Duration {
        Duration::from_secs(self.resync_seconds.max(1))
    }
}

/// What a source is built from.
pub struct Parts {
    pub invoker: Invoker,
    /// Warning Events (DeliveryFailed, DeadLettered), rate-limited per trigger and reason.
    pub events: ThrottledEvents,
    pub metrics: TriggerMetrics,
    /// This pod's name (`POD_NAME`, else `HOSTNAME`, else the service's): a stable consumer
    /// name, so a restarted pod finds what it left pending.
    pub pod: String,
    /// How long a stopping unit waits for the events in flight.
    pub drain_timeout: Duration,
    /// Traffic records and wake-ups of functions that scale to zero (fed by the control loop).
    pub activity: Arc<Activity>,
}

/// How a trigger calls functions, built the same way by every trigger: the invoker over its
/// endpoint resolution, rate-limited Warning Events, the delivery metrics and the scale-to-zero
/// traffic recorder.
pub struct Calls {
    pub invoker: Invoker,
    pub events: ThrottledEvents,
    pub metrics: TriggerMetrics,
    pub activity: Arc<Activity>,
    /// The EndpointSlice watch when resolving through EndpointSlices: keep it while running.
    pub endpoints: Option<tokio_util::task::AbortOnDropHandle<()>>,
}

impl Calls {
    /// Registers the metrics under `names` in `service_metrics`; Events name `reporter`.
    pub fn build(
        client: &kube::Client,
        namespace: Option<&str>,
        resolution: crate::Resolution,
        names: Names,
        service_metrics: &kubeless_service::Metrics,
        reporter: &str,
        activity_interval: Duration,
    ) -> Self {
        let (resolver, endpoints) = resolution.build(client, namespace);
        let metrics = TriggerMetrics::register(service_metrics, names);
        Self {
            invoker: Invoker::new(resolver),
            events: controller::throttled_events(client, reporter),
            activity: activity(activity_interval, client, metrics.wakes.clone()),
            metrics,
            endpoints,
        }
    }
}

/// This pod's name: `POD_NAME`, else `HOSTNAME`, else `fallback`.
pub fn pod_name(fallback: &str) -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|p| !p.is_empty()))
        .unwrap_or_else(|| fallback.to_string())
}

/// What a trigger binary runs under [`kubeless_service::run`]: builds the parts and the source,
/// runs the control loop (status written by the `lease` holder when one is given), marks the
/// pod ready once the caches synced, and returns once every unit drained.
pub async fn serve<S: Source>(
    ctx: Context,
    args: TriggerArgs,
    lease: Option<LeaseConfig>,
    names: Names,
    source: impl FnOnce(Parts) -> S,
) -> Result<(), kube::Error> {
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => kube::Client::try_default().await?,
    };
    let namespace = ctx.config.watch_namespace.clone();
    let Calls {
        invoker,
        events,
        metrics,
        activity,
        endpoints,
    } = Calls::build(
        &client,
        namespace.as_deref(),
        args.resolution.clone().resolution(),
        names,
        &ctx.metrics,
        &format!("kubeless-{}", ctx.name),
        args.activity.activity_interval,
    );
    let source = source(Parts {
        invoker,
        events,
        metrics: metrics.clone(),
        pod: pod_name(&ctx.name),
        drain_timeout: args.drain_timeout(),
        activity: Arc::clone(&activity),
    });
    let settings = Settings {
        namespace,
        resync: args.resync(),
        lease,
        activity: Some(activity),
        ..Settings::new()
    };
    let shutdown = ctx.shutdown.token().clone();
    let running = controller::run(client, source, settings, metrics, &ctx.metrics, shutdown)
        .keeping(endpoints);
    running.ready_on(ctx.readiness.clone());
    running.join().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A trigger's own flag struct is often called TriggerArgs too: the group ids must differ.
    #[derive(Debug, clap::Args)]
    struct OwnArgs {
        #[arg(long, default_value = "x")]
        topic: String,
        #[command(flatten)]
        common: TriggerArgs,
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        service: kubeless_service::ServiceArgs,
        #[command(flatten)]
        own: OwnArgs,
    }

    #[test]
    fn flags_flatten_beside_the_scaffold_and_a_trigger_of_its_own() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "t",
            "--resolver",
            "dns",
            "--drain-timeout-seconds",
            "5",
            "--resync-seconds",
            "0",
        ])
        .unwrap();
        let c = &cli.own.common;
        assert_eq!(
            c.resolution.endpoint_resolution,
            crate::EndpointResolution::Dns
        );
        assert_eq!(c.drain_timeout(), Duration::from_secs(5));
        assert_eq!(c.resync(), Duration::from_secs(1));
        assert_eq!(cli.own.topic, "x");
    }
}
