//! Kubeless nats-trigger: delivers NATS messages to the functions each NATSTrigger selects.
//!
//! * [`plan`]: pure desired state, (triggers, functions) -> one subscription per
//!   (trigger, function) with Kubeless's queue group `<ns>_<trigger>_<fn>_<topic>`.
//! * [`reconciler`]: watches both kinds, starts/stops [`subscription`] tasks to match, writes
//!   trigger status.
//! * [`subscription`]: a core NATS queue subscription (at most once) or a durable JetStream
//!   pull consumer (at least once), bounded by `maxInFlight`.
//! * [`deliver`]: one message -> the function call, reply, ack/nak, dead letter.
//!
//! [`serve`] is what the binary runs under the kubeless-service scaffold; [`run`] is the
//! library entry point tests call.

pub mod connect;
pub mod deliver;
pub mod metrics;
pub mod plan;
pub mod reconciler;
pub mod subscription;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kubeless_invoke::{ClusterDnsResolver, EndpointSliceResolver, Invoker, Resolve};
use kubeless_service::{LeaseConfig, ServiceArgs, lease::LeaderElector, lease::LeaseMetrics};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

pub use connect::{ConnectError, NatsArgs};

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

/// How function endpoints are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EndpointResolution {
    /// `http://<fn>.<ns>.svc.<cluster-domain>:<port>` through the Service's cluster IP.
    Dns,
    /// The Service's EndpointSlices, balanced per call across ready pods (needs list/watch on
    /// endpointslices).
    Endpointslices,
}

/// This service's flags (besides the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub nats: NatsArgs,
    /// How to find a function's pods.
    #[arg(
        long = "endpoint-resolution",
        env = "KUBELESS_ENDPOINT_RESOLUTION",
        value_enum,
        default_value_t = EndpointResolution::Endpointslices
    )]
    pub endpoint_resolution: EndpointResolution,
    /// Cluster DNS domain (with --endpoint-resolution dns).
    #[arg(
        long = "cluster-domain",
        env = "KUBELESS_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    pub cluster_domain: String,
    /// Seconds a stopping subscription waits for its calls in flight.
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
        let lease = service.clone().into_config(SERVICE_NAME).lease;
        service.leader_elect = false;
        (service, trigger, lease)
    }
}

/// Where function endpoints come from.
#[derive(Clone)]
pub enum Resolution {
    Dns {
        cluster_domain: String,
    },
    EndpointSlices,
    /// A resolver the caller built (benches, tests).
    Custom(Arc<dyn Resolve>),
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
    let TriggerArgs {
        nats,
        endpoint_resolution,
        cluster_domain,
        drain_timeout_seconds,
        resync_seconds,
    } = args;
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::Client)?,
    };
    let nats_client = nats.connect().await?;
    let settings = Settings {
        namespace: ctx.config.watch_namespace.clone(),
        resolution: match endpoint_resolution {
            EndpointResolution::Dns => Resolution::Dns { cluster_domain },
            EndpointResolution::Endpointslices => Resolution::EndpointSlices,
        },
        drain_timeout: Duration::from_secs(drain_timeout_seconds),
        resync: Duration::from_secs(resync_seconds.max(1)),
        lease,
    };
    let running = run(
        client,
        nats_client.clone(),
        settings,
        &ctx.metrics,
        ctx.shutdown.token().clone(),
    );
    let mut synced = running.synced.clone();
    let readiness = ctx.readiness.clone();
    tokio::spawn(async move {
        if synced.wait_for(|s| *s).await.is_ok() {
            readiness.set_ready(true);
        }
    });
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

/// A started service instance.
pub struct Running {
    /// `true` once the caches are synced and the first reconcile pass ran.
    pub synced: watch::Receiver<bool>,
    reconciler: AbortOnDropHandle<()>,
    /// Ends by itself after shutdown (it releases the Lease).
    election: Option<AbortOnDropHandle<()>>,
    /// Runs until dropped.
    endpoint_watch: Option<AbortOnDropHandle<()>>,
    active: Arc<std::sync::atomic::AtomicUsize>,
}

impl Running {
    /// Waits for every task (they end after the shutdown token is cancelled and the
    /// subscriptions drained).
    pub async fn join(self) {
        let Self {
            reconciler,
            election,
            endpoint_watch,
            ..
        } = self;
        for t in std::iter::once(reconciler).chain(election) {
            if let Err(e) = t.await
                && e.is_panic()
            {
                tracing::warn!("a task of the service panicked");
            }
        }
        drop(endpoint_watch);
    }

    /// Subscriptions in the Running state after the last reconcile pass.
    pub fn active_subscriptions(&self) -> usize {
        self.active.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until the first reconcile pass is done.
    pub async fn wait_synced(&mut self) {
        let _ = self.synced.wait_for(|s| *s).await;
    }

    /// Kills everything at once, without draining or acking: what a crash does. For tests.
    pub fn abort(self) {
        drop(self);
    }
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
    let mut endpoint_watch = None;
    let resolver: Arc<dyn Resolve> = match settings.resolution {
        Resolution::Dns { cluster_domain } => Arc::new(ClusterDnsResolver::new(cluster_domain)),
        Resolution::EndpointSlices => {
            let r = Arc::new(EndpointSliceResolver::default());
            endpoint_watch = Some(AbortOnDropHandle::new(
                r.spawn_watch(client.clone(), settings.namespace.as_deref()),
            ));
            r
        }
        Resolution::Custom(r) => r,
    };
    let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut election = None;
    let leader = settings.lease.map(|lease| {
        let election_token = shutdown.child_token();
        let (rx, task) = LeaderElector::new(client.clone(), lease, LeaseMetrics::register(metrics))
            .spawn(election_token);
        election = Some(AbortOnDropHandle::new(task));
        rx
    });
    let reconciler = reconciler::Reconciler {
        client,
        nats,
        invoker: Invoker::new(resolver),
        metrics: metrics::TriggerMetrics::register(metrics),
        namespace: settings.namespace,
        drain_timeout: settings.drain_timeout,
        resync: settings.resync,
        leader,
        active: Arc::clone(&active),
    };
    let (synced_tx, synced) = watch::channel(false);
    let main = tokio::spawn(async move {
        reconciler
            .run(shutdown, move || {
                synced_tx.send_replace(true);
            })
            .await
    });
    Running {
        synced,
        reconciler: AbortOnDropHandle::new(main),
        election,
        endpoint_watch,
        active,
    }
}
