//! [`TriggerStatus`] for trigger statuses of kubeless-api (the orphan rule puts these impls here:
//! the trait is this crate's and the types are kubeless-api's).

use kubeless_api::conditions::Condition;
use kubeless_api::triggers::RedisTriggerStatus;

use crate::controller::TriggerStatus;

/// A RedisTrigger lists the functions it selects.
impl TriggerStatus for RedisTriggerStatus {
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
