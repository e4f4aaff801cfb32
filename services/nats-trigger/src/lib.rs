//! Kubeless nats-trigger: delivers NATS messages to the functions each NATSTrigger selects.
//!
//! * [`plan`]: pure desired state, (triggers, functions) -> one subscription per
//!   (trigger, function) with Kubeless's queue group `<ns>_<trigger>_<fn>_<topic>`.
//! * [`reconciler`]: the [`kubeless_trigger::Source`] of NATSTriggers: the runtime's control
//!   loop watches both kinds, starts/stops [`subscription`] units to match and writes status.
//! * [`subscription`]: a core NATS queue subscription (at most once) or a durable JetStream
//!   pull consumer (at least once), bounded by `maxInFlight`.
//! * [`pull`]: the JetStream pull loop (requests counted in the task that reads the answers).
//! * [`deliver`]: one message -> the function call, reply, ack/nak, dead letter.
//!
//! [`serve`] is what the binary runs under the kubeless-service scaffold; [`run`] is the
//! library entry point tests call.

pub mod connect;
pub mod deliver;
pub mod plan;
pub mod pull;
pub mod reconciler;
pub mod subscription;

use std::time::Duration;

use kube::Client;
use kubeless_service::{LeaseConfig, ServiceArgs};
use tokio_util::sync::CancellationToken;

pub use connect::{ConnectError, NatsArgs};
pub use kubeless_trigger::{Resolution, Running};

/// Name of the service (OTel service name, default Lease name).
pub const SERVICE_NAME: &str = "nats-trigger";

/// Errors that stop the service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating the Kubernetes client failed")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Nats(#[from] ConnectError),
}

/// This service's flags (besides the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The flags every trigger has (endpoint resolution, drain timeout, resync).
    #[command(flatten)]
    pub common: kubeless_trigger::TriggerArgs,
}

/// The whole command line.
#[derive(Debug, clap::Parser)]
#[command(name = "nats-trigger", version, about = "Kubeless nats-trigger")]
pub struct Cli {
    /// Flags every kubeless service has.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// This service's flags.
    #[command(flatten)]
    pub trigger: TriggerArgs,
}

impl Cli {
    /// Every replica consumes (queue groups and a shared durable spread the load); only the
    /// Lease holder writes status. The scaffold's election would hold whole replicas back, so
    /// it is switched off there and done here, around status writes only.
    pub fn split_leader_election(self) -> (ServiceArgs, TriggerArgs, Option<LeaseConfig>) {
        let Self {
            mut service,
            trigger,
        } = self;
        let lease = service.take_lease(SERVICE_NAME);
        (service, trigger, lease)
    }
}

/// Resolved settings of [`run`].
#[derive(Clone)]
pub struct Settings {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    pub resolution: Resolution,
    pub drain_timeout: Duration,
    pub resync: Duration,
    /// Lease gating status writes.
    pub lease: Option<LeaseConfig>,
    /// Scale to zero: how often a running function's activity is written at most.
    pub activity_interval: Duration,
}

impl Settings {
    /// Test-friendly defaults: all namespaces, EndpointSlices, 5 s drain, no Lease.
    pub fn new(resolution: Resolution) -> Self {
        Self {
            namespace: None,
            resolution,
            drain_timeout: Duration::from_secs(5),
            resync: Duration::from_secs(30),
            lease: None,
            activity_interval: Duration::from_secs(10),
        }
    }
}

/// Longest wait for the final flush of buffered replies and dead letters at exit.
const FINAL_FLUSH: Duration = Duration::from_secs(1);

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(
    ctx: kubeless_service::Context,
    args: TriggerArgs,
    lease: Option<LeaseConfig>,
) -> Result<(), Error> {
    let TriggerArgs { nats, common } = args;
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::Client)?,
    };
    let nats_client = nats.connect().await?;
    let settings = Settings {
        namespace: ctx.config.watch_namespace.clone(),
        resolution: common.resolution.clone().resolution(),
        drain_timeout: common.drain_timeout(),
        resync: common.resync(),
        lease,
        activity_interval: common.activity.activity_interval,
    };
    let running = run(
        client,
        nats_client.clone(),
        settings,
        &ctx.metrics,
        ctx.shutdown.token().clone(),
    );
    running.ready_on(ctx.readiness.clone());
    running.join().await;
    // Deliver what is buffered (replies, dead letters) before exiting.
    // Bounded: with the server unreachable a flush would wait for it forever.
    match tokio::time::timeout(FINAL_FLUSH, nats_client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "final NATS flush failed"),
        Err(_) => tracing::warn!("NATS unreachable; exiting without the final flush"),
    }
    Ok(())
}

/// Starts the reconciler (and the EndpointSlice watch or the Lease when configured); stops
/// when `shutdown` is cancelled.
pub fn run(
    client: Client,
    nats: async_nats::Client,
    settings: Settings,
    metrics: &kubeless_service::Metrics,
    shutdown: CancellationToken,
) -> Running {
    let kubeless_trigger::Calls {
        invoker,
        events,
        metrics: trigger_metrics,
        activity,
        endpoints: endpoint_watch,
    } = kubeless_trigger::Calls::build(
        &client,
        settings.namespace.as_deref(),
        settings.resolution,
        reconciler::METRICS,
        metrics,
        reconciler::FIELD_MANAGER,
        settings.activity_interval,
    );
    let source = reconciler::NatsSource {
        events,
        nats,
        invoker,
        metrics: trigger_metrics,
        drain_timeout: settings.drain_timeout,
        activity: std::sync::Arc::clone(&activity),
    };
    let units = source.metrics.clone();
    kubeless_trigger::run(
        client,
        source,
        kubeless_trigger::Settings {
            namespace: settings.namespace,
            resync: settings.resync,
            lease: settings.lease,
            activity: Some(activity),
            ..kubeless_trigger::Settings::new()
        },
        units,
        metrics,
        shutdown,
    )
    .keeping(endpoint_watch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
