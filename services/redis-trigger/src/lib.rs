//! Kubeless redis-trigger: delivers the entries of a Redis stream to the functions each
//! RedisTrigger selects, one consumer group per (trigger, function). The worked example of a
//! trigger on the trigger runtime (docs/custom-trigger.md): this file is the [`Source`] (the
//! pure plan and how a unit starts), [`reader`] the broker code; watching, status, Events,
//! Lease, retries, dead-letter policy, metrics and shutdown are `kubeless-trigger`'s.

pub mod reader;
mod unit;

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kubeless_api::conditions::reasons;
use kubeless_api::{DeliveryPolicy, Function, RedisTrigger, RedisTriggerStatus};
use kubeless_invoke::{FunctionTarget, Invoker};
use kubeless_service::{LeaseConfig, ServiceArgs, ThrottledEvents};
use kubeless_trigger::{
    FunctionSelector, Names, Plan, PlannedUnit, Problem, ResolutionArgs, Source, TriggerMetrics,
    TriggerPlan, UnitContext,
};

pub use unit::UnitTask;

/// Name of the service (OTel service name, default Lease name).
pub const SERVICE_NAME: &str = "redis-trigger";
/// Field manager of status writes, reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-redis-trigger";

/// This service's flags (besides the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub resolution: ResolutionArgs,
    /// Seconds a stopping reader waits for the entry in flight before leaving it pending.
    #[arg(long, env = "KUBELESS_DRAIN_TIMEOUT_SECONDS", default_value_t = 30)]
    pub drain_timeout_seconds: u64,
    /// Seconds between full recomputations (watch events trigger one at once).
    #[arg(long, env = "KUBELESS_RESYNC_SECONDS", default_value_t = 30)]
    pub resync_seconds: u64,
}

/// The whole command line.

#[derive(Debug, clap::Parser)]
#[command(name = "redis-trigger", version, about = "Kubeless redis-trigger")]
pub struct Cli {
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub trigger: TriggerArgs,
}

impl Cli {
    /// Every replica reads (consumer groups spread entries); the Lease only gates status
    /// writes, so the scaffold's whole-process election is switched off.
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

/// One reader: a (trigger, function) pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReaderKey {
    pub namespace: String,
    pub trigger: String,
    pub function: String,
}

impl std::fmt::Display for ReaderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}->{}", self.namespace, self.trigger, self.function)
    }
}

/// What a reader needs; a change restarts it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderConfig {
    pub url: String,
    pub stream: String,
    /// `<consumerGroup or namespace_trigger>_<function>`.
    pub group: String,
    pub dead_letter: Option<String>,
    pub target: FunctionTarget,
    pub policy: DeliveryPolicy,
    /// Entries pending longer than this on another consumer are taken over (it died).
    pub claim_idle: Duration,
    pub trigger_uid: Option<String>,
}

/// The desired readers of one trigger, or why it has none. Pure.
pub fn plan_trigger(
    t: &RedisTrigger,
    namespace: &str,
    name: &str,
    functions: &[Arc<Function>],
) -> Result<Vec<PlannedUnit<ReaderKey, ReaderConfig>>, Problem> {
    let spec = &t.spec;
    redis::Client::open(spec.url.as_str())
        .map_err(|e| Problem::invalid_spec(format!("url {:?}: {e}", spec.url)))?;
    if spec.stream.trim().is_empty() {
        return Err(Problem::invalid_spec("stream is empty"));
    }
    let policy = spec
        .delivery_policy()
        .map_err(|e| Problem::invalid_spec(e.to_string()))?;
    let selector = FunctionSelector::new(&spec.function_selector).map_err(|e| Problem {
        reason: reasons::INVALID_SELECTOR,
        message: e.to_string(),
    })?;
    let prefix = (spec.consumer_group.as_deref().map(str::trim))
        .filter(|g| !g.is_empty())
        .map_or_else(|| format!("{namespace}_{name}"), str::to_string);
    let selected = functions.iter().filter(|f| {
        f.metadata.deletion_timestamp.is_none()
            && f.namespace().as_deref() == Some(namespace)
            && selector.matches(f.labels())
    });
    Ok(selected
        .map(|f| {
            let function = f.name_any();
            let target = FunctionTarget::for_function(f, namespace);
            // A healthy reader may hold an entry through every attempt and backoff.
            let busy = (target.timeout + policy.max_backoff) * policy.max_attempts;
            let config = ReaderConfig {
                url: spec.url.clone(),
                stream: spec.stream.clone(),
                group: format!("{prefix}_{function}"),
                dead_letter: spec.dead_letter_stream.clone().filter(|s| !s.is_empty()),
                claim_idle: busy + Duration::from_secs(60),
                target,
                policy,
                trigger_uid: t.metadata.uid.clone(),
            };
            let key = ReaderKey {
                namespace: namespace.into(),
                trigger: name.into(),
                function: function.clone(),
            };
            PlannedUnit {
                key,
                function,
                config,
            }
        })
        .collect())
}

/// The RedisTrigger source: the plan, and readers started with what they share.
pub struct RedisSource(pub Arc<Shared>);

/// What every reader of the process shares.
pub struct Shared {
    pub invoker: Invoker,
    pub events: Option<ThrottledEvents>,
    pub metrics: TriggerMetrics,
    /// Consumer name in every group: the pod name, so a restarted pod finds its pending entries.
    pub consumer: String,
    pub drain_timeout: Duration,
}

/// The metric names: `kubeless_redis_trigger_*`.
pub const METRIC_NAMES: Names = Names {
    prefix: "redis_trigger",
    kind: "RedisTrigger",
    units: "readers",
    units_help: "Stream readers (one per trigger and function) in this process",
};

impl Source for RedisSource {
    type Trigger = RedisTrigger;
    type Status = RedisTriggerStatus;
    type Key = ReaderKey;
    type Config = ReaderConfig;
    type Unit = UnitTask;

    fn field_manager(&self) -> &'static str {
        FIELD_MANAGER
    }

    fn plan(
        &self,
        triggers: &[Arc<RedisTrigger>],
        functions: &[Arc<Function>],
    ) -> Plan<ReaderKey, ReaderConfig> {
        Plan::build(triggers, |t, ns, name| plan_trigger(t, ns, name, functions))
    }

    fn start(&self, key: &ReaderKey, config: Arc<ReaderConfig>, ctx: &UnitContext) -> UnitTask {
        let (shared, key) = (Arc::clone(&self.0), key.clone());
        UnitTask::spawn(ctx, move |state, stop| {
            reader::run(shared, key, config, state, stop)
        })
    }

    fn status(trigger: &RedisTrigger) -> Option<&RedisTriggerStatus> {
        trigger.status.as_ref()
    }

    fn ready_message(&self, t: &RedisTrigger, plan: &TriggerPlan<ReaderKey>) -> String {
        format!(
            "reading stream {} for {}",
            t.spec.stream,
            plan.functions.join(", ")
        )
    }
}

/// Errors that stop the service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating the Kubernetes client failed")]
    Client(#[source] kube::Error),
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(
    ctx: kubeless_service::Context,
    args: TriggerArgs,
    lease: Option<LeaseConfig>,
) -> Result<(), Error> {
    let TriggerArgs {
        resolution,
        drain_timeout_seconds,
        resync_seconds,
    } = args;
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => kube::Client::try_default().await.map_err(Error::Client)?,
    };
    let namespace = ctx.config.watch_namespace.clone();
    let (resolver, endpoint_watch) = resolution.resolution().build(&client, namespace.as_deref());
    let metrics = TriggerMetrics::register(&ctx.metrics, METRIC_NAMES);
    let consumer = ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()));
    let source = RedisSource(Arc::new(Shared {
        invoker: Invoker::new(resolver),
        events: Some(kubeless_trigger::controller::throttled_events(
            &client,
            FIELD_MANAGER,
        )),
        metrics: metrics.clone(),
        consumer: consumer.unwrap_or_else(|| SERVICE_NAME.into()),
        drain_timeout: Duration::from_secs(drain_timeout_seconds),
    }));
    let settings = kubeless_trigger::Settings {
        namespace,
        resync: Duration::from_secs(resync_seconds.max(1)),
        lease,
    };
    let shutdown = ctx.shutdown.token().clone();
    let mut running =
        kubeless_trigger::run(client, source, settings, metrics, &ctx.metrics, shutdown);
    if let Some(watch) = endpoint_watch {
        running.keep(watch);
    }
    running.wait_synced().await;
    ctx.readiness.set_ready(true);
    running.join().await;
    Ok(())
}
