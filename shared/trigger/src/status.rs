//! [`TriggerStatus`] for the trigger kinds of kubeless-api.

use kubeless_api::conditions::Condition;
use kubeless_api::triggers::{
    KafkaTriggerStatus, KinesisTriggerStatus, NatsTriggerStatus, RedisTriggerStatus,
};

use crate::controller::TriggerStatus;

/// Statuses that list the selected functions.
macro_rules! lists_functions {
    ($($t:ty),*) => {$(
        impl TriggerStatus for $t {
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.conditions
            }
            fn observed_generation_mut(&mut self) -> &mut Option<i64> {
                &mut self.observed_generation
            }
            fn set_list(&mut self, functions: &[String], _details: &[String]) -> bool {
                let changed = self.functions != functions;
                self.functions = functions.to_vec();
                changed
            }
        }
    )*};
}

lists_functions!(NatsTriggerStatus, KafkaTriggerStatus, RedisTriggerStatus);

/// A KinesisTrigger lists the shards its reader reads.
impl TriggerStatus for KinesisTriggerStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
    fn observed_generation_mut(&mut self) -> &mut Option<i64> {
        &mut self.observed_generation
    }
    fn set_list(&mut self, _functions: &[String], details: &[String]) -> bool {
        let changed = self.shards != details;
        self.shards = details.to_vec();
        changed
    }
}
