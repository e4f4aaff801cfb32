//! KafkaTriggers on the trigger runtime: the [`Source`](kubeless_trigger::Source) whose units
//! are the consumer groups of [`plan`](crate::plan::plan). A consumer whose spec changed is
//! stopped (drained and committed) by the runtime before its replacement joins the same group,
//! so no record is lost or delivered by both.

use std::sync::Arc;

use kubeless_api::{Function, KafkaTrigger, KafkaTriggerStatus};
use kubeless_trigger::{TriggerPlan, Unit, UnitContext, UnitState};
use tokio::sync::watch;

use crate::consumer::{self, ConsumerHandle, Health, Shared};
use crate::plan::{ConsumerSpec, Defaults, Plan};

/// Field manager of status writes and reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-kafka-trigger";

/// KafkaTriggers and their consumers.
pub struct KafkaSource {
    pub shared: Arc<Shared>,
    pub defaults: Defaults,
    /// Consumer groups running in this process (sorted), for tests and benches.
    pub groups: watch::Sender<Vec<String>>,
}

/// One consumer group.
pub struct ConsumerUnit {
    group: String,
    handle: Result<ConsumerHandle, String>,
    shared: Arc<Shared>,
    groups: watch::Sender<Vec<String>>,
}

impl Unit for ConsumerUnit {
    fn state(&self) -> UnitState {
        let failed = |message: &str| UnitState::Failed {
            reason: kubeless_api::conditions::reasons::BROKER_UNAVAILABLE,
            message: message.to_string(),
        };
        match (&self.handle, self.shared.health.get(&self.group)) {
            (Err(message), _) => failed(message),
            (Ok(_), Some(Health::Unavailable(message))) => failed(&message),
            (Ok(_), Some(Health::Ok)) => UnitState::running(),
            (Ok(_), _) => UnitState::Starting,
        }
    }

    async fn stop(self) {
        if let Ok(h) = self.handle {
            tracing::info!(group = %self.group, "stopping consumer (removed or changed)");
            h.stop().await;
        }
        self.groups.send_modify(|g| g.retain(|x| *x != self.group));
    }

    fn needs_restart(&self) -> bool {
        self.handle.is_err()
    }
}

impl kubeless_trigger::Source for KafkaSource {
    type Trigger = KafkaTrigger;
    type Status = KafkaTriggerStatus;
    type Key = String;
    type Config = ConsumerSpec;
    type Unit = ConsumerUnit;

    fn field_manager(&self) -> &'static str {
        FIELD_MANAGER
    }

    fn plan(&self, triggers: &[Arc<KafkaTrigger>], functions: &[Arc<Function>]) -> Plan {
        crate::plan::plan(triggers, functions, &self.defaults)
    }

    fn start(&self, group: &String, spec: Arc<ConsumerSpec>, _: &UnitContext) -> ConsumerUnit {
        let handle = consumer::start((*spec).clone(), Arc::clone(&self.shared)).map_err(|e| {
            tracing::error!(%group, error = %e, source = ?std::error::Error::source(&e), "starting consumer failed");
            e.to_string()
        });
        if handle.is_ok() {
            self.groups.send_modify(|g| {
                g.push(group.clone());
                g.sort();
            });
        }
        ConsumerUnit {
            group: group.clone(),
            handle,
            shared: Arc::clone(&self.shared),
            groups: self.groups.clone(),
        }
    }

    fn status(trigger: &KafkaTrigger) -> Option<&KafkaTriggerStatus> {
        trigger.status.as_ref()
    }

    fn ready_message(&self, _: &KafkaTrigger, plan: &TriggerPlan<String>, _: &[String]) -> String {
        format!(
            "consuming for {} function(s): {}",
            plan.functions.len(),
            plan.functions.join(", ")
        )
    }

    fn progressing_message(&self) -> &'static str {
        "consumers are joining their groups"
    }
}
