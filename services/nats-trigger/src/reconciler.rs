//! NATSTriggers on the trigger runtime: the [`Source`] whose units are the (trigger, function)
//! [`subscription`](crate::subscription)s of [`plan`](crate::plan::plan).

use std::sync::Arc;
use std::time::Duration;

use kubeless_api::{Function, NatsTrigger, NatsTriggerStatus};
use kubeless_invoke::Invoker;
use kubeless_service::ThrottledEvents;
use kubeless_trigger::{TriggerMetrics, TriggerPlan, UnitContext, UnitTask};

use crate::deliver::Deliverer;
use crate::plan::{Mode, Plan, SubscriptionConfig, SubscriptionKey};

/// Field manager of status writes and reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-nats-trigger";

/// The metric names (`kubeless_nats_trigger_*`).
pub const METRICS: kubeless_trigger::Names = kubeless_trigger::Names {
    prefix: "nats_trigger",
    kind: "NATSTrigger",
    units: "subscriptions",
    units_help: "(trigger, function) subscriptions running in this process",
};

/// What the units need.
pub struct NatsSource {
    pub nats: async_nats::Client,
    pub invoker: Invoker,
    pub metrics: TriggerMetrics,
    /// Delivery failures and dead letters: every replica reports what it delivered.
    pub events: ThrottledEvents,
    pub drain_timeout: Duration,
    /// Scale to zero: traffic records and wake-ups.
    pub activity: Arc<kubeless_invoke::Activity>,
}

impl kubeless_trigger::Source for NatsSource {
    type Trigger = NatsTrigger;
    type Status = NatsTriggerStatus;
    type Key = SubscriptionKey;
    type Config = SubscriptionConfig;
    type Unit = UnitTask;

    fn field_manager(&self) -> &'static str {
        FIELD_MANAGER
    }

    fn plan(&self, triggers: &[Arc<NatsTrigger>], functions: &[Arc<Function>]) -> Plan {
        crate::plan::plan(triggers, functions)
    }

    fn start(
        &self,
        key: &SubscriptionKey,
        config: Arc<SubscriptionConfig>,
        ctx: &UnitContext,
    ) -> UnitTask {
        tracing::info!(subscription = %key, topic = %config.topic, jetstream = matches!(config.mode, Mode::JetStream(_)), "starting subscription");
        let trigger = format!("{}/{}", key.namespace, key.trigger);
        let deliverer = Deliverer::new(
            Arc::new(key.clone()),
            config,
            self.invoker.clone(),
            self.nats.clone(),
            self.metrics.pair(&trigger, &key.function),
        )
        .with_events(self.events.clone())
        .with_activity(Arc::clone(&self.activity));
        crate::subscription::spawn(ctx, deliverer, self.drain_timeout)
    }

    fn status(trigger: &NatsTrigger) -> Option<&NatsTriggerStatus> {
        trigger.status.as_ref()
    }

    fn ready_message(
        &self,
        trigger: &NatsTrigger,
        plan: &TriggerPlan<SubscriptionKey>,
        _details: &[String],
    ) -> String {
        format!(
            "delivering {:?} to {} function(s)",
            trigger.spec.topic,
            plan.functions.len()
        )
    }

    fn progressing_message(&self) -> &'static str {
        "subscribing"
    }
}
