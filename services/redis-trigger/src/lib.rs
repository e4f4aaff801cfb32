//! Kubeless redis-trigger: delivers Redis stream entries to the functions a RedisTrigger selects,
//! one consumer group per (trigger, function). The worked example of docs/custom-trigger.md: this
//! file is the [`Source`] (flags, the pure plan, how a unit starts), [`reader`] the broker code;
//! the rest (watches, status, Events, Lease, retries, metrics, drain) is `kubeless-trigger`'s,
//! and [`runtime_gaps`] what it does not have yet.

pub mod reader;
pub mod runtime_gaps;

use std::sync::Arc;
use std::time::Duration;

use kube::{Resource, ResourceExt};
use kubeless_api::conditions::reasons;
use kubeless_api::{DeliveryPolicy, Function, RedisTrigger, RedisTriggerStatus};
use kubeless_invoke::FunctionTarget;
use kubeless_service::{Context, LeaseConfig, ServiceArgs};
use kubeless_trigger::{FunctionSelector, Names, Plan, PlannedUnit, Problem, ResolutionArgs};
use kubeless_trigger::{Source, TriggerPlan, UnitContext};

use runtime_gaps::{Parts, UnitTask};

pub const SERVICE_NAME: &str = "redis-trigger";

/// The command line: the flags every service has, endpoint resolution, and these.
#[derive(Debug, clap::Parser)]
#[command(name = "redis-trigger", version, about = "Kubeless redis-trigger")]
pub struct Cli {
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub resolution: ResolutionArgs,
    /// Seconds a stopping reader waits for the entry in flight (then it stays pending).
    #[arg(long, env = "KUBELESS_DRAIN_TIMEOUT_SECONDS", default_value_t = 30)]
    pub drain_timeout_seconds: u64,
    /// Seconds between full recomputations (watch events trigger one at once).
    #[arg(long, env = "KUBELESS_RESYNC_SECONDS", default_value_t = 30)]
    pub resync_seconds: u64,
}

/// What one reader, a (trigger, function) pair, needs; a change restarts it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderConfig {
    pub url: String,
    pub stream: String,
    /// `<consumerGroup, default namespace_trigger>_<function>`.
    pub group: String,
    pub dead_letter: Option<String>,
    pub target: FunctionTarget,
    pub policy: DeliveryPolicy,
    /// Entries pending longer than this on another consumer are taken over: it died.
    pub claim_idle: Duration,
    /// The trigger, which Events and metrics name.
    pub trigger: k8s_openapi::api::core::v1::ObjectReference,
}

type Planned = PlannedUnit<String, ReaderConfig>;

/// The readers of one trigger (keys `<ns>/<trigger>-><function>`), or why it has none. Pure.
pub fn plan_trigger(
    t: &RedisTrigger,
    ns: &str,
    name: &str,
    functions: &[Arc<Function>],
) -> Result<Vec<Planned>, Problem> {
    let (spec, invalid) = (&t.spec, |m: String| Problem::invalid_spec(m));
    redis::Client::open(spec.url.as_str()).map_err(|e| invalid(format!("url: {e}")))?;
    if spec.stream.trim().is_empty() {
        return Err(invalid("stream is empty".into()));
    }
    let policy = spec.delivery_policy().map_err(|e| invalid(e.to_string()))?;
    let selector = FunctionSelector::new(&spec.function_selector).map_err(|e| Problem {
        reason: reasons::INVALID_SELECTOR,
        message: e.to_string(),
    })?;
    let prefix = (spec.consumer_group.clone().filter(|g| !g.trim().is_empty()))
        .unwrap_or_else(|| format!("{ns}_{name}"));
    let selected = functions.iter().filter(|f| {
        f.metadata.deletion_timestamp.is_none()
            && f.namespace().as_deref() == Some(ns)
            && selector.matches(f.labels())
    });
    let unit = |f: &Arc<Function>| {
        let (function, target) = (f.name_any(), FunctionTarget::for_function(f, ns));
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
            trigger: t.object_ref(&()),
        };
        let key = format!("{ns}/{name}->{function}");
        PlannedUnit {
            key,
            function,
            config,
        }
    };
    Ok(selected.map(unit).collect())
}

/// The RedisTrigger source: what its readers share.
pub struct RedisSource {
    pub parts: Arc<Parts>,
    /// The consumer name in every group: the pod's, so a restarted pod finds its pending entries.
    pub consumer: String,
    pub drain_timeout: Duration,
}

impl Source for RedisSource {
    type Trigger = RedisTrigger;
    type Status = RedisTriggerStatus;
    type Key = String;
    type Config = ReaderConfig;
    type Unit = UnitTask;

    fn field_manager(&self) -> &'static str {
        "kubeless-redis-trigger"
    }

    fn plan(
        &self,
        triggers: &[Arc<RedisTrigger>],
        functions: &[Arc<Function>],
    ) -> Plan<String, ReaderConfig> {
        Plan::build(triggers, |t, ns, name| plan_trigger(t, ns, name, functions))
    }

    fn start(&self, _: &String, cfg: Arc<ReaderConfig>, ctx: &UnitContext) -> UnitTask {
        let (parts, consumer) = (Arc::clone(&self.parts), self.consumer.clone());
        UnitTask::spawn(ctx, self.drain_timeout, |state, stop| {
            reader::run(parts, consumer, cfg, state, stop)
        })
    }

    fn status(trigger: &RedisTrigger) -> Option<&RedisTriggerStatus> {
        trigger.status.as_ref()
    }

    fn ready_message(&self, t: &RedisTrigger, plan: &TriggerPlan<String>) -> String {
        format!(
            "reading stream {} for {}",
            t.spec.stream,
            plan.functions.join(", ")
        )
    }
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(ctx: Context, cli: Cli, lease: Option<LeaseConfig>) -> Result<(), kube::Error> {
    let pod = ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok());
    let source = |parts| RedisSource {
        parts: Arc::new(parts),
        consumer: pod
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| SERVICE_NAME.into()),
        drain_timeout: Duration::from_secs(cli.drain_timeout_seconds),
    };
    let names = Names {
        prefix: "redis_trigger",
        kind: "RedisTrigger",
        units: "readers",
        units_help: "Stream readers (one per trigger and function) in this process",
    };
    let resync = Duration::from_secs(cli.resync_seconds);
    runtime_gaps::serve(ctx, cli.resolution, resync, lease, names, source).await
}
