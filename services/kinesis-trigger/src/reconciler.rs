//! KinesisTriggers on the trigger runtime: the [`Source`](kubeless_trigger::Source) whose
//! units are one [`trigger`](crate::trigger) reader per runnable trigger (restarted when its
//! configuration changes; it resumes from the checkpoints). The status lists the shards read.

use std::sync::Arc;

use kubeless_api::{Function, KinesisTrigger, KinesisTriggerStatus};
use kubeless_trigger::{TriggerPlan, UnitContext, UnitTask};

use crate::plan::{Plan, ReaderConfig};
use crate::trigger::Shared;

/// Field manager of status writes and reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-kinesis-trigger";

/// KinesisTriggers and their stream readers.
pub struct KinesisSource {
    pub shared: Shared,
}

impl kubeless_trigger::Source for KinesisSource {
    type Trigger = KinesisTrigger;
    type Status = KinesisTriggerStatus;
    type Key = String;
    type Config = ReaderConfig;
    type Unit = UnitTask;

    fn field_manager(&self) -> &'static str {
        FIELD_MANAGER
    }

    fn plan(&self, triggers: &[Arc<KinesisTrigger>], functions: &[Arc<Function>]) -> Plan {
        crate::plan::plan(triggers, functions)
    }

    fn start(&self, key: &String, config: Arc<ReaderConfig>, ctx: &UnitContext) -> UnitTask {
        tracing::info!(trigger = %key, stream = %config.stream, function = %config.function, "starting stream reader");
        crate::trigger::spawn(ctx, self.shared.clone(), config)
    }

    fn status(trigger: &KinesisTrigger) -> Option<&KinesisTriggerStatus> {
        trigger.status.as_ref()
    }

    fn ready_message(
        &self,
        trigger: &KinesisTrigger,
        _plan: &TriggerPlan<String>,
        shards: &[String],
    ) -> String {
        format!(
            "reading {} shard(s) of stream {}",
            shards.len(),
            trigger.spec.stream
        )
    }

    fn progressing_message(&self) -> &'static str {
        "connecting to the stream"
    }
}
