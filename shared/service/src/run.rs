//! [`run`]: what a service's `main` calls, so that main.rs stays a few lines.

use std::future::Future;

use tokio::sync::watch;

use crate::admin::{AdminError, AdminServer, Readiness};
use crate::args::{ServiceArgs, ServiceConfig};
use crate::lease::{LeaderElector, LeaseMetrics};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::telemetry::{self, TelemetryError};

/// Prefix of every metric a kubeless service exports.
pub const METRICS_PREFIX: &str = "kubeless";

/// What the service future gets.
#[derive(Clone)]
pub struct Context {
    /// The service name given to [`run`].
    pub name: String,
    pub config: ServiceConfig,
    /// Cancelled on the first SIGTERM/SIGINT, or when leadership is lost: drain and return.
    pub shutdown: Shutdown,
    /// Set it once caches are synced; /readyz answers 200 from then on.
    pub readiness: Readiness,
    /// Register the service's metrics here (a sub-registry per subsystem).
    pub metrics: Metrics,
    /// Where the admin server actually listens (differs from the flag with port 0).
    pub admin_addr: std::net::SocketAddr,
    /// `Some` under leader election: `true` while this process holds the Lease.
    pub leader: Option<watch::Receiver<bool>>,
    /// The client leader election uses, when it is on; otherwise create one with
    /// `kube::Client::try_default()`.
    pub kube_client: Option<kube::Client>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("setting up telemetry failed")]
    Telemetry(#[source] TelemetryError),
    #[error("installing signal handlers failed")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Admin(AdminError),
    #[error("creating the Kubernetes client for leader election failed")]
    KubeClient(#[source] kube::Error),
    #[error("leadership was lost; exiting so a fresh process can compete again")]
    LostLeadership,
    #[error("the service did not stop within the shutdown grace period of {0:?}")]
    DrainTimedOut(std::time::Duration),
    #[error("the service failed")]
    Service(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Sets up telemetry, signals, the admin server and (when enabled) leader election, runs
/// `service` until it returns, then releases the Lease, stops the admin server and flushes traces.
///
/// With leader election on, `service` starts only once this process leads; while it waits,
/// /readyz answers 200 (a healthy standby). Losing leadership cancels the shutdown token and
/// `run` returns [`RunError::LostLeadership`] after the service drained.
pub async fn run<F, Fut, E>(name: &str, args: ServiceArgs, service: F) -> Result<(), RunError>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let config = args.into_config(name);
    let telemetry = telemetry::init(&config.telemetry).map_err(RunError::Telemetry)?;
    let result = run_inner(name, config, service).await;
    if let Err(err) = &result {
        tracing::error!(error = %err, source = ?std::error::Error::source(err), "service stopped with an error");
    }
    telemetry.shutdown().await;
    result
}

/// [`run`] without telemetry setup, for tests and for callers that installed their own subscriber.
pub async fn run_inner<F, Fut, E>(
    name: &str,
    config: ServiceConfig,
    service: F,
) -> Result<(), RunError>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    crate::install_crypto_provider();
    let shutdown = Shutdown::new();
    // Signals stop being handled here once `run_inner` returns, whichever way it returns.
    let _signals = AbortOnDrop(shutdown.spawn_signal_handler().map_err(RunError::Signals)?);
    let metrics = Metrics::new(METRICS_PREFIX);
    let readiness = Readiness::new();

    // The admin server and the Lease outlive the service's drain: separate tokens, cancelled last.
    let admin_token = tokio_util::sync::CancellationToken::new();
    let admin = AdminServer::start(
        config.admin_addr,
        metrics.clone(),
        readiness.clone(),
        admin_token.clone(),
    )
    .await
    .map_err(RunError::Admin)?;
    tracing::info!(addr = %admin.local_addr(), "admin server (/metrics /healthz /readyz) listening");

    let mut kube_client = None;
    let mut election = None;
    let mut leader_rx = None;
    if let Some(lease) = config.lease.clone() {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                admin_token.cancel();
                let _ = admin.join().await;
                return Err(RunError::KubeClient(e));
            }
        };
        let lease_token = tokio_util::sync::CancellationToken::new();
        let elector = LeaderElector::new(client.clone(), lease, LeaseMetrics::register(&metrics));
        let (rx, task) = elector.spawn(lease_token.clone());
        kube_client = Some(client);
        election = Some((lease_token, task));
        leader_rx = Some(rx);
    }

    let mut lost_leadership = false;
    let mut service_result = Ok(());
    let may_start = match leader_rx.clone() {
        None => true,
        Some(mut rx) => {
            readiness.set_ready(true);
            tracing::info!("waiting for leadership");
            let became_leader = tokio::select! {
                r = rx.wait_for(|l| *l) => r.is_ok(),
                _ = shutdown.cancelled() => false,
            };
            readiness.set_ready(false);
            became_leader
        }
    };

    let config_grace = config.shutdown_grace;
    if may_start {
        let ctx = Context {
            name: name.to_string(),
            config,
            shutdown: shutdown.clone(),
            readiness: readiness.clone(),
            metrics,
            admin_addr: admin.local_addr(),
            leader: leader_rx.clone(),
            kube_client,
        };
        let fut = service(ctx);
        // Losing leadership drains the service like a signal would.
        let watch_leadership = async {
            match leader_rx.clone() {
                Some(mut rx) => {
                    if rx.wait_for(|l| !*l).await.is_ok() && !shutdown.is_triggered() {
                        tracing::warn!("lost leadership; draining");
                        shutdown.trigger();
                        return true;
                    }
                    false
                }
                None => std::future::pending().await,
            }
        };
        // The service drains on the token; past the grace period it is abandoned, so no broker
        // or API server that stopped answering can hold the process.
        let grace = config_grace;
        let grace_over = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::pin!(fut);
        tokio::pin!(watch_leadership);
        tokio::pin!(grace_over);
        let mut leadership_watched = false;
        service_result = loop {
            tokio::select! {
                r = &mut fut => break r.map_err(|e| RunError::Service(e.into())),
                () = &mut grace_over => {
                    tracing::warn!(?grace, "the service did not drain within the shutdown grace period; exiting anyway");
                    break Err(RunError::DrainTimedOut(grace));
                }
                lost = &mut watch_leadership, if !leadership_watched => {
                    // Polled to completion once; from here on only the service is awaited.
                    leadership_watched = true;
                    lost_leadership = lost;
                }
            }
        };
    }
    readiness.set_ready(false);

    if let Some((token, task)) = election {
        token.cancel();
        if task.await.is_err() {
            tracing::warn!("leader election task panicked");
        }
    }
    admin_token.cancel();
    let admin_result = admin.join().await.map_err(RunError::Admin);

    service_result?;
    if lost_leadership {
        return Err(RunError::LostLeadership);
    }
    admin_result
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
