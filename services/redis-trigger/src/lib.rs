//! Kubeless redis-trigger: delivers Redis stream entries to the functions a RedisTrigger selects,
//! one consumer group per (trigger, function). The worked example of docs/custom-trigger.md: this
//! file is the [`Source`] (flags, the pure plan, how a unit starts), [`reader`] the broker code;
//! the rest (watches, status, Events, Lease, retries, metrics, drain) is `kubeless-trigger`'s.

pub mod reader;

use std::sync::Arc;
use std::time::Duration;

use kube::{Resource, ResourceExt};
use kubeless_api::{Function, RedisTrigger, RedisTriggerStatus};
use kubeless_invoke::FunctionTarget;
use kubeless_service::{Context, LeaseConfig, ServiceArgs};
use kubeless_trigger::{Destination, FunctionSelector, Names, Parts, Plan, PlannedUnit, Problem};
use kubeless_trigger::{Source, TriggerArgs, TriggerPlan, UnitContext, UnitTask};

pub const SERVICE_NAME: &str = "redis-trigger";

/// The command line: the flags every service has, and every trigger's.
#[derive(Debug, clap::Parser)]
#[command(name = "redis-trigger", version, about = "Kubeless redis-trigger")]
pub struct Cli {
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub trigger: TriggerArgs,
}

/// What one reader, a (trigger, function) pair, needs; a change restarts it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderConfig {
    pub url: String,
    pub stream: String,
    /// `<consumerGroup, default namespace_trigger>_<function>`.
    pub group: String,
    /// Entries pending longer than this on another consumer are taken over: it died.
    pub claim_idle: Duration,
    pub to: Destination,
}

type Planned = Result<Vec<PlannedUnit<String, ReaderConfig>>, Problem>;
type Readers = Plan<String, ReaderConfig>;

/// The readers of one trigger (keys `<ns>/<trigger>-><function>`), or why it has none. Pure.
pub fn plan_trigger(t: &RedisTrigger, ns: &str, name: &str, fns: &[Arc<Function>]) -> Planned {
    let (spec, invalid) = (&t.spec, |m: String| Problem::invalid_spec(m));
    redis::Client::open(spec.url.as_str()).map_err(|e| invalid(format!("url: {e}")))?;
    if spec.stream.trim().is_empty() {
        return Err(invalid("stream is empty".into()));
    }
    let policy = spec.delivery_policy().map_err(|e| invalid(e.to_string()))?;
    let prefix = (spec.consumer_group.clone().filter(|g| !g.trim().is_empty()))
        .unwrap_or_else(|| format!("{ns}_{name}"));
    let selector = FunctionSelector::for_trigger(&spec.function_selector)?;
    let unit = |f: &Function| {
        let (function, target) = (f.name_any(), FunctionTarget::for_function(f, ns));
        // A healthy reader may hold an entry through every attempt and backoff.
        let busy = (target.timeout + policy.max_backoff) * policy.max_attempts;
        let config = ReaderConfig {
            url: spec.url.clone(),
            stream: spec.stream.clone(),
            group: format!("{prefix}_{function}"),
            claim_idle: busy + Duration::from_secs(60),
            to: Destination {
                dead_letter: spec.dead_letter_stream.clone().filter(|s| !s.is_empty()),
                trigger: t.object_ref(&()),
                target,
                policy,
            },
        };
        let key = format!("{ns}/{name}->{function}");
        PlannedUnit {
            key,
            function,
            config,
        }
    };
    Ok(selector.select(ns, fns).map(unit).collect())
}

/// The RedisTrigger source: what its readers share.
pub struct RedisSource(pub Arc<Parts>);

impl Source for RedisSource {
    type Trigger = RedisTrigger;
    type Status = RedisTriggerStatus;
    type Key = String;
    type Config = ReaderConfig;
    type Unit = UnitTask;

    fn field_manager(&self) -> &'static str {
        "kubeless-redis-trigger"
    }

    fn plan(&self, triggers: &[Arc<RedisTrigger>], fns: &[Arc<Function>]) -> Readers {
        Plan::build(triggers, |t, ns, name| plan_trigger(t, ns, name, fns))
    }

    fn start(&self, _: &String, cfg: Arc<ReaderConfig>, ctx: &UnitContext) -> UnitTask {
        let reader = reader::Reader {
            parts: Arc::clone(&self.0),
            cfg,
        };
        UnitTask::spawn(ctx, |state, stop| reader.run(state, stop)).with_drain(self.0.drain_timeout)
    }

    fn status(trigger: &RedisTrigger) -> Option<&RedisTriggerStatus> {
        trigger.status.as_ref()
    }

    fn ready_message(&self, t: &RedisTrigger, plan: &TriggerPlan<String>, _: &[String]) -> String {
        let functions = plan.functions.join(", ");
        format!("reading stream {} for {functions}", t.spec.stream)
    }
}

/// What the binary runs under [`kubeless_service::run`].
pub async fn serve(ctx: Context, cli: Cli, lease: Option<LeaseConfig>) -> Result<(), kube::Error> {
    let names = Names {
        prefix: "redis_trigger",
        kind: "RedisTrigger",
        units: "readers",
        units_help: "Stream readers (one per trigger and function) in this process",
    };
    let source = |parts| RedisSource(Arc::new(parts));
    kubeless_trigger::serve(ctx, cli.trigger, lease, names, source).await
}
