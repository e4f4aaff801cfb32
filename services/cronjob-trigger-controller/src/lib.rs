//! Kubeless cronjob-trigger-controller.
//!
//! * CronJob mode (default): each CronJobTrigger becomes a batch/v1 CronJob ([`cronjob`] is the
//!   pure builder) whose Job runs `kubeless-cron-invoker` ([`invoker`]), a small binary that calls
//!   the function once with the trigger's retry policy and exits non-zero unless it got a 2xx.
//!   The controller ([`controller`]) follows the Jobs to report `lastScheduleTime`, `lastResult`
//!   and the `LastRunSucceeded` condition.
//! * Scheduler mode (`--scheduler-mode`): no CronJobs; the [`scheduler`] fires each trigger
//!   in-process (seconds allowed in the schedule) and calls the function directly.
//!
//! [`serve`] is what the binary runs under the kubeless-service scaffold; [`run`] is the library
//! entry point integration tests call.

pub mod controller;
pub mod cronjob;
mod error;
pub mod invoker;
pub mod metrics;
pub mod schedule;
pub mod scheduler;
pub mod status;
pub mod wake;

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kubeless_invoke::{EndpointSliceResolver, Invoker};
use kubeless_service::ServiceArgs;
use tokio_util::sync::CancellationToken;

pub use error::{ConfigError, Error};

use crate::controller::Mode;
use crate::cronjob::BuilderConfig;
use crate::invoker::ResolverKind;
use crate::metrics::{ControllerMetrics, SchedulerMetrics};
use crate::scheduler::Scheduler;

/// Name of the service (OTel service name, default Lease name).
pub const SERVICE_NAME: &str = "cronjob-trigger-controller";

/// Flags of this service (besides the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Fire triggers in-process instead of writing CronJobs (seconds allowed in schedules).
    /// With more than one replica, also set --leader-elect.
    #[arg(
        long = "scheduler-mode",
        env = "KUBELESS_CRON_SCHEDULER_MODE",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub scheduler_mode: bool,
    /// How long before each fire a function that scales to zero is told to be up (a function
    /// at zero is woken then): longer than its cold start.
    #[arg(
        long = "wake-ahead",
        env = "KUBELESS_CRON_WAKE_AHEAD",
        default_value = "30s",
        value_parser = kubeless_service::duration_flag
    )]
    pub wake_ahead: std::time::Duration,
    /// Image of kubeless-cron-invoker, run by every CronJob's Job.
    #[arg(long = "invoker-image", env = "KUBELESS_CRON_INVOKER_IMAGE", default_value_t = cronjob::default_invoker_image())]
    pub invoker_image: String,
    /// imagePullPolicy of the invoker container; empty: the Kubernetes default.
    #[arg(
        long = "invoker-image-pull-policy",
        env = "KUBELESS_CRON_INVOKER_PULL_POLICY",
        default_value = ""
    )]
    pub invoker_image_pull_policy: String,
    /// How the invoker finds the function: `dns` (the Service's cluster DNS name, as Kubeless)
    /// or `endpointslices` (ready pod addresses read through the API server).
    #[arg(
        long = "invoker-resolver",
        env = "KUBELESS_CRON_INVOKER_RESOLVER",
        value_enum,
        default_value_t = ResolverKind::Dns
    )]
    pub invoker_resolver: ResolverKind,
    /// Cluster DNS domain the invoker uses with resolver `dns`.
    #[arg(
        long = "cluster-domain",
        env = "KUBELESS_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    pub cluster_domain: String,
    /// Extra env of the invoker container, `KEY=VALUE` (repeat the flag, or comma-separate in
    /// the env variable). On devcluster: `KUBECONFIG=<its kubeconfig>`.
    #[arg(
        long = "invoker-env",
        env = "KUBELESS_CRON_INVOKER_ENV",
        value_delimiter = ','
    )]
    pub invoker_env: Vec<String>,
    /// ServiceAccount of the invoker's Pods (resolver `endpointslices` needs one that may list
    /// and watch EndpointSlices); empty: the namespace's default.
    #[arg(
        long = "invoker-service-account",
        env = "KUBELESS_CRON_INVOKER_SERVICE_ACCOUNT",
        default_value = ""
    )]
    pub invoker_service_account: String,
}

/// The whole command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "cronjob-trigger-controller",
    version,
    about = "Kubeless cronjob-trigger-controller"
)]
pub struct Cli {
    /// Flags every kubeless service has.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// This service's flags.
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// Resolved settings of [`run`].
#[derive(Debug, Clone)]
pub struct Settings {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Reporting instance of Events (the pod name).
    pub instance: Option<String>,
    /// `None`: scheduler mode. `Some`: CronJob mode with these CronJob settings.
    pub cronjobs: Option<BuilderConfig>,
    /// See [`ControllerArgs::wake_ahead`].
    pub wake_ahead: std::time::Duration,
}

impl Settings {
    pub fn from_args(args: ControllerArgs, namespace: Option<String>) -> Result<Self, ConfigError> {
        let ControllerArgs {
            scheduler_mode,
            wake_ahead,
            invoker_image,
            invoker_image_pull_policy,
            invoker_resolver,
            cluster_domain,
            invoker_env,
            invoker_service_account,
        } = args;
        if invoker_resolver == ResolverKind::Url {
            return Err(ConfigError(
                "--invoker-resolver takes dns or endpointslices".to_string(),
            ));
        }
        let mut extra_env = Vec::new();
        for kv in invoker_env.iter().filter(|s| !s.trim().is_empty()) {
            match kv.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    extra_env.push((k.trim().to_string(), v.to_string()))
                }
                _ => {
                    return Err(ConfigError(format!(
                        "--invoker-env {kv:?} is not KEY=VALUE"
                    )));
                }
            }
        }
        let non_empty = |s: String| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let cronjobs = (!scheduler_mode).then(|| BuilderConfig {
            invoker_image,
            image_pull_policy: non_empty(invoker_image_pull_policy),
            resolver: invoker_resolver,
            cluster_domain,
            extra_env,
            service_account: non_empty(invoker_service_account),
        });
        Ok(Self {
            namespace,
            instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
            cronjobs,
            wake_ahead,
        })
    }
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(ctx: kubeless_service::Context, args: ControllerArgs) -> Result<(), Error> {
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => Client::try_default().await.map_err(Error::Client)?,
    };
    let settings = Settings::from_args(args, ctx.config.watch_namespace.clone())?;
    let running = run(client, settings, &ctx.metrics, ctx.shutdown.token().clone());
    ctx.readiness.set_ready(true);
    running.join().await;
    Ok(())
}

/// A started service.
pub struct Running {
    /// The in-process scheduler (scheduler mode only).
    pub scheduler: Option<Arc<Scheduler>>,
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

/// Starts the controller (and in scheduler mode the scheduler and its EndpointSlice watch);
/// everything stops when `shutdown` is cancelled.
pub fn run(
    client: Client,
    settings: Settings,
    metrics: &kubeless_service::Metrics,
    shutdown: CancellationToken,
) -> Running {
    let Settings {
        namespace,
        instance,
        cronjobs,
        wake_ahead,
    } = settings;
    let wake = Arc::new(wake::WakeAhead::new(
        client.clone(),
        wake_ahead,
        shutdown.clone(),
    ));
    let mut tasks = Vec::new();
    let mut scheduler = None;
    let mode = match cronjobs {
        Some(cfg) => Mode::CronJob(cfg),
        None => {
            let resolver = Arc::new(EndpointSliceResolver::default());
            let watch = resolver.spawn_watch(client.clone(), namespace.as_deref());
            let token = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                token.cancelled().await;
                watch.abort();
            }));
            let recorder = Recorder::new(
                client.clone(),
                Reporter {
                    controller: scheduler::SCHEDULER_FIELD_MANAGER.into(),
                    instance: instance.clone(),
                },
            );
            let s = Arc::new(Scheduler::new(
                client.clone(),
                Invoker::new(resolver),
                SchedulerMetrics::register(metrics),
                recorder,
                shutdown.clone(),
            ));
            scheduler = Some(Arc::clone(&s));
            Mode::Scheduler(s)
        }
    };
    tasks.push(tokio::spawn(controller::run(
        client,
        namespace,
        instance,
        ControllerMetrics::register(metrics),
        mode,
        wake,
        shutdown,
    )));
    Running { scheduler, tasks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(extra: &[&str]) -> Result<Settings, ConfigError> {
        let mut argv = vec!["cronjob-trigger-controller"];
        argv.extend_from_slice(extra);
        Settings::from_args(Cli::try_parse_from(argv).unwrap().controller, None)
    }

    #[test]
    fn flags_to_settings() {
        let s = settings(&[
            "--invoker-image=reg/inv:1",
            "--invoker-resolver=endpointslices",
            "--invoker-env=KUBECONFIG=/tmp/kc",
            "--invoker-env=A=b=c",
            "--invoker-service-account=inv",
            "--invoker-image-pull-policy=Never",
        ])
        .unwrap();
        let c = s.cronjobs.unwrap();
        assert_eq!(c.invoker_image, "reg/inv:1");
        assert_eq!(c.resolver, ResolverKind::Endpointslices);
        assert_eq!(
            c.extra_env,
            vec![
                ("KUBECONFIG".to_string(), "/tmp/kc".to_string()),
                ("A".to_string(), "b=c".to_string())
            ]
        );
        assert_eq!(c.service_account.as_deref(), Some("inv"));
        assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
        assert!(settings(&["--scheduler-mode"]).unwrap().cronjobs.is_none());
        assert!(
            settings(&["--scheduler-mode=false"])
                .unwrap()
                .cronjobs
                .is_some()
        );
    }

    #[test]
    fn bad_flags_are_errors() {
        assert!(matches!(
            settings(&["--invoker-env=NOEQUALS"]),
            Err(ConfigError(_))
        ));
        assert!(matches!(
            settings(&["--invoker-resolver=url"]),
            Err(ConfigError(_))
        ));
    }
}
