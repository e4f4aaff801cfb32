//! Kubeless http-trigger-controller.
//!
//! * The controller ([`controller`]) turns each HTTPTrigger into a networking.k8s.io/v1 Ingress
//!   for nginx, traefik or kong ([`ingress`] is the pure builder) and reports a `Ready`
//!   condition with the URL.
//! * The built-in gateway ([`gateway`], switched on with `--gateway`) serves HTTPTriggers
//!   itself, for clusters (and devcluster) without an ingress controller, and wakes functions
//!   scaled to zero, holding their requests meanwhile ([`gateway::wake`]).
//!
//! [`serve`] is what the binary runs under the kubeless-service scaffold; [`run`] is the
//! library entry point integration tests call.

pub mod claims;
pub mod controller;
mod error;
pub mod gateway;
pub mod ingress;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kubeless_invoke::{Activity, EndpointSliceResolver};
use kubeless_service::{LeaseConfig, ServiceArgs, lease::LeaderElector, lease::LeaseMetrics};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use error::Error;

use crate::gateway::wake::{Wake, WakeSettings};
use crate::gateway::{Gateway, secrets::SecretStore};
use crate::metrics::{ControllerMetrics, GatewayMetrics};

/// Name of the service (OTel service name, default Lease name).
pub const SERVICE_NAME: &str = "http-trigger-controller";

/// Flags of this service (besides the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Write an Ingress per HTTPTrigger (the Kubeless behaviour).
    #[arg(
        long = "ingress",
        env = "KUBELESS_INGRESS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub ingress: bool,
    /// Serve HTTPTriggers with the built-in gateway.
    #[arg(
        long = "gateway",
        env = "KUBELESS_GATEWAY",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub gateway: bool,
    /// Address the gateway listens on.
    #[arg(
        long = "gateway-addr",
        env = "KUBELESS_GATEWAY_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub gateway_addr: SocketAddr,
    /// Seconds a basic-auth Secret read is reused by the gateway.
    #[arg(
        long = "secret-cache-seconds",
        env = "KUBELESS_SECRET_CACHE_SECONDS",
        default_value_t = 10
    )]
    pub secret_cache_seconds: u64,
    #[command(flatten)]
    pub activity: kubeless_service::ActivityArgs,
    /// Scale to zero: how long the gateway holds a request for a function at zero before it
    /// answers 503, e.g. `60s`, `2m`.
    #[arg(
        long = "wake-timeout",
        env = "KUBELESS_WAKE_TIMEOUT",
        default_value = "60s",
        value_parser = kubeless_service::duration_flag
    )]
    pub wake_timeout: Duration,
    /// Scale to zero: most requests held for one function at once; more get 503 at once.
    #[arg(
        long = "wake-queue",
        env = "KUBELESS_WAKE_QUEUE",
        default_value_t = 1000
    )]
    pub wake_queue: usize,
    /// Tenancy: a host `*.NS.DOMAIN` (and `NS.DOMAIN`) may be routed only by triggers of
    /// namespace `NS`, e.g. `apps.example.com`. Empty: no such rule.
    #[arg(
        long = "tenant-domain",
        env = "KUBELESS_TENANT_DOMAIN",
        default_value = ""
    )]
    pub tenant_domain: String,
    /// Tenancy: hosts that belong to a namespace, `NAMESPACE=HOST` or `NAMESPACE=*.SUFFIX`,
    /// comma separated. Hosts no rule gives away belong to the namespace that claimed them
    /// first.
    #[arg(long = "host-claims", env = "KUBELESS_HOST_CLAIMS", default_value = "")]
    pub host_claims: String,
}

/// The whole command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "http-trigger-controller",
    version,
    about = "Kubeless http-trigger-controller"
)]
pub struct Cli {
    /// Flags every kubeless service has.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// This service's flags.
    #[command(flatten)]
    pub controller: ControllerArgs,
}

impl Cli {
    /// With the gateway on, every replica must serve traffic while only the Lease holder
    /// writes Ingresses and status. The scaffold's election would hold the whole service back
    /// on standbys, so it is switched off there and done here, around the controller only.
    /// Returns the args for the scaffold and the Lease this service runs itself.
    pub fn split_leader_election(self) -> (ServiceArgs, ControllerArgs, Option<LeaseConfig>) {
        let Self {
            mut service,
            controller,
        } = self;
        let lease = if controller.gateway {
            service.take_lease(SERVICE_NAME)
        } else {
            None
        };
        (service, controller, lease)
    }
}

/// Resolved settings of [`run`].
#[derive(Debug, Clone)]
pub struct Settings {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Run the Ingress controller.
    pub ingress: bool,
    /// Serve triggers on this address.
    pub gateway_addr: Option<SocketAddr>,
    /// Basic-auth Secret cache time.
    pub secret_ttl: Duration,
    /// Reporting instance of Events (the pod name).
    pub instance: Option<String>,
    /// Lease gating the controller (the gateway always serves).
    pub lease: Option<LeaseConfig>,
    /// How the gateway records activity and holds requests for functions at zero.
    pub wake: WakeSettings,
    /// Which namespace may route which host (gateway and Ingresses alike).
    pub hosts: Arc<claims::HostPolicy>,
}

impl Settings {
    pub fn from_args(
        args: ControllerArgs,
        namespace: Option<String>,
        lease: Option<LeaseConfig>,
    ) -> Result<Self, claims::BadClaim> {
        let ControllerArgs {
            ingress,
            gateway,
            gateway_addr,
            secret_cache_seconds,
            activity,
            wake_timeout,
            wake_queue,
            tenant_domain,
            host_claims,
        } = args;
        let hosts = claims::HostPolicy::from_flags(&tenant_domain, &host_claims)?;
        Ok(Self {
            namespace,
            ingress,
            gateway_addr: gateway.then_some(gateway_addr),
            secret_ttl: Duration::from_secs(secret_cache_seconds),
            instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
            lease,
            wake: WakeSettings {
                activity_interval: activity.activity_interval,
                timeout: wake_timeout,
                queue: wake_queue,
            },
            hosts: Arc::new(hosts),
        })
    }
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(
    ctx: kubeless_service::Context,
    args: ControllerArgs,
    lease: Option<LeaseConfig>,
) -> Result<(), Error> {
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::Client)?,
    };
    let settings = Settings::from_args(args, ctx.config.watch_namespace.clone(), lease)
        .map_err(Error::HostPolicy)?;
    let running = run(client, settings, &ctx.metrics, ctx.shutdown.token().clone()).await?;
    // Ready once the gateway has its routes (at once without a gateway).
    let readiness = ctx.readiness.clone();
    let mut synced = running.synced.clone();
    let _ = synced.wait_for(|s| *s).await;
    readiness.set_ready(true);
    running.join().await;
    Ok(())
}

/// A started service: where the gateway listens, and the tasks to wait for.
pub struct Running {
    /// The gateway's bound address, when it runs.
    pub gateway_addr: Option<SocketAddr>,
    /// `true` once the gateway routes are loaded (immediately without a gateway).
    pub synced: watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Waits for every task (they end after the shutdown token is cancelled).
    pub async fn join(self) {
        for t in self.tasks {
            if let Err(e) = t.await {
                tracing::warn!(error = %e, "a task of the service failed");
            }
        }
    }
}

/// Starts the controller and/or the gateway; they stop when `shutdown` is cancelled.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: &kubeless_service::Metrics,
    shutdown: CancellationToken,
) -> Result<Running, Error> {
    let mut tasks = Vec::new();
    let (synced_tx, synced) = watch::channel(settings.gateway_addr.is_none());
    let mut gateway_addr = None;

    if let Some(addr) = settings.gateway_addr {
        let resolver = Arc::new(EndpointSliceResolver::default());
        let gateway_metrics = GatewayMetrics::register(metrics);
        let wakes = gateway_metrics.wakes.clone();
        // Every replica records and wakes: the writes are idempotent, and each replica holds
        // its own requests.
        let activity = Arc::new(
            Activity::new(client.clone(), settings.wake.activity_interval).on_wake(move |_, _| {
                wakes.inc();
            }),
        );
        let wake = Wake::new(
            Arc::clone(&activity),
            settings.wake.timeout,
            settings.wake.queue,
        );
        let gw = Gateway::with_wake(
            resolver.clone(),
            SecretStore::kube(client.clone(), settings.secret_ttl),
            gateway_metrics,
            wake,
        );
        let (local, server) = gw.bind(addr, shutdown.clone()).await?;
        gateway_addr = Some(local);
        tasks.push(server);
        let (client, ns, token) = (client.clone(), settings.namespace.clone(), shutdown.clone());
        // Without the Ingress controller nobody else reports refused routes: the feed does.
        let routes = gateway::feed::RouteSettings {
            hosts: Arc::clone(&settings.hosts),
            report_conflicts: !settings.ingress,
            instance: settings.instance.clone(),
        };
        tasks.push(tokio::spawn(async move {
            gateway::feed::run(
                gw,
                resolver,
                activity,
                client,
                ns,
                routes,
                token,
                move || {
                    synced_tx.send_replace(true);
                },
            )
            .await
        }));
    }

    if settings.ingress {
        let cm = ControllerMetrics::register(metrics);
        let (ns, instance) = (settings.namespace.clone(), settings.instance.clone());
        let token = shutdown.clone();
        match settings.lease.clone() {
            None => tasks.push(tokio::spawn(controller::run(
                client,
                ns,
                instance,
                cm,
                Arc::clone(&settings.hosts),
                token,
            ))),
            Some(lease) => {
                let lease_metrics = LeaseMetrics::register(metrics);
                tasks.push(tokio::spawn(run_while_leader(
                    client,
                    lease,
                    lease_metrics,
                    ns,
                    instance,
                    cm,
                    Arc::clone(&settings.hosts),
                    token,
                )))
            }
        }
    }
    Ok(Running {
        gateway_addr,
        synced,
        tasks,
    })
}

/// Runs the controller only while this replica holds the Lease.
// What `controller::run` takes, plus the Lease: a struct would only rename them.
#[allow(clippy::too_many_arguments)]
async fn run_while_leader(
    client: Client,
    lease: LeaseConfig,
    lease_metrics: LeaseMetrics,
    namespace: Option<String>,
    instance: Option<String>,
    metrics: ControllerMetrics,
    hosts: Arc<claims::HostPolicy>,
    shutdown: CancellationToken,
) {
    let election_token = CancellationToken::new();
    let (mut leader, election) =
        LeaderElector::new(client.clone(), lease, lease_metrics).spawn(election_token.clone());
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = leader.wait_for(|l| *l) => if r.is_err() { break },
        }
        tracing::info!("leading: starting the Ingress controller");
        let term = shutdown.child_token();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let ctrl = tokio::spawn({
            let (client, ns, instance, metrics, hosts, term) = (
                client.clone(),
                namespace.clone(),
                instance.clone(),
                metrics.clone(),
                Arc::clone(&hosts),
                term.clone(),
            );
            async move {
                controller::run(client, ns, instance, metrics, hosts, term).await;
                let _ = done_tx.send(());
            }
        });
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = leader.wait_for(|l| !*l) => tracing::warn!("lost the Lease: stopping the Ingress controller"),
            _ = done_rx => {}
        }
        term.cancel();
        let _ = ctrl.await;
        if shutdown.is_cancelled() {
            break;
        }
    }
    election_token.cancel();
    let _ = election.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn scale_to_zero_flags_parse_durations_and_have_defaults() {
        let cli = Cli::try_parse_from(["http-trigger-controller"]).unwrap();
        let s = Settings::from_args(cli.controller, None, None).unwrap();
        assert_eq!(s.wake, WakeSettings::default());
        let cli = Cli::try_parse_from([
            "http-trigger-controller",
            "--activity-interval",
            "1m30s",
            "--wake-timeout",
            "500ms",
            "--wake-queue",
            "3",
        ])
        .unwrap();
        let s = Settings::from_args(cli.controller, None, None).unwrap();
        assert_eq!(
            s.wake,
            WakeSettings {
                activity_interval: Duration::from_secs(90),
                timeout: Duration::from_millis(500),
                queue: 3,
            }
        );
        let err = Cli::try_parse_from(["http-trigger-controller", "--wake-timeout", "soon"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--wake-timeout"), "{err}");
    }
}
