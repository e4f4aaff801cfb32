//! KafkaTrigger status: the Ready condition (Reconciled, NoFunctionsSelected, InvalidSpec,
//! InvalidSelector, BrokerUnavailable, Progressing) and the selected functions.

use kubeless_api::conditions::{self, Condition, reasons};
use kubeless_api::triggers::KafkaTriggerStatus;

use crate::consumer::Health;
use crate::plan::{TriggerPlan, TriggerProblem};

/// The Ready condition of a trigger, given the health of its consumers (`None`: not started).
pub fn ready_condition(plan: &TriggerPlan, health: &[Option<Health>]) -> Condition {
    let c = match &plan.problem {
        Some(TriggerProblem::InvalidSpec(m)) => {
            Condition::not_ready(reasons::INVALID_SPEC, m.clone())
        }
        Some(TriggerProblem::InvalidSelector(m)) => {
            Condition::not_ready(reasons::INVALID_SELECTOR, m.clone())
        }
        Some(TriggerProblem::NoFunctionsSelected(m)) => {
            Condition::not_ready(reasons::NO_FUNCTIONS_SELECTED, m.clone())
        }
        None => {
            let unavailable: Vec<&str> = health
                .iter()
                .filter_map(|h| match h {
                    Some(Health::Unavailable(m)) => Some(m.as_str()),
                    _ => None,
                })
                .collect();
            if let Some(first) = unavailable.first() {
                Condition::not_ready(reasons::BROKER_UNAVAILABLE, first.to_string())
            } else if health.iter().any(|h| !matches!(h, Some(Health::Ok))) {
                Condition::not_ready(reasons::PROGRESSING, "consumers are joining their groups")
            } else {
                Condition::ready(
                    reasons::RECONCILED,
                    format!(
                        "consuming for {} function(s): {}",
                        plan.functions.len(),
                        plan.functions.join(", ")
                    ),
                )
            }
        }
    };
    c.with_generation(plan.generation)
}

/// The status to write, keeping `lastTransitionTime` of an unchanged condition. `None` when
/// the current status already says this.
pub fn desired_status(
    current: Option<&KafkaTriggerStatus>,
    plan: &TriggerPlan,
    health: &[Option<Health>],
) -> Option<KafkaTriggerStatus> {
    let mut next = current.cloned().unwrap_or_default();
    let changed_condition =
        conditions::set_condition(&mut next.conditions, ready_condition(plan, health));
    let changed = changed_condition
        || next.functions != plan.functions
        || next.observed_generation != plan.generation;
    next.functions = plan.functions.clone();
    next.observed_generation = plan.generation;
    changed.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(problem: Option<TriggerProblem>, functions: &[&str]) -> TriggerPlan {
        TriggerPlan {
            namespace: "ns".into(),
            name: "kt".into(),
            generation: Some(2),
            functions: functions.iter().map(|s| s.to_string()).collect(),
            groups: functions.iter().map(|f| format!("ns_kt_{f}_t")).collect(),
            problem,
        }
    }

    #[test]
    fn reasons_follow_problems_and_health() {
        let p = plan(
            Some(TriggerProblem::NoFunctionsSelected("none".into())),
            &[],
        );
        let c = ready_condition(&p, &[]);
        assert!(!c.is_true());
        assert_eq!(c.reason.as_deref(), Some("NoFunctionsSelected"));

        let p = plan(None, &["a", "b"]);
        let c = ready_condition(
            &p,
            &[
                Some(Health::Ok),
                Some(Health::Unavailable("topic t does not exist".into())),
            ],
        );
        assert_eq!(c.reason.as_deref(), Some("BrokerUnavailable"));
        assert_eq!(c.message.as_deref(), Some("topic t does not exist"));
        let c = ready_condition(&p, &[Some(Health::Ok), Some(Health::Starting)]);
        assert_eq!(c.reason.as_deref(), Some("Progressing"));
        let c = ready_condition(&p, &[Some(Health::Ok), Some(Health::Ok)]);
        assert!(c.is_true());
        assert_eq!(c.reason.as_deref(), Some("Reconciled"));
        assert_eq!(c.observed_generation, Some(2));
    }

    #[test]
    fn unchanged_status_is_not_rewritten() {
        let p = plan(None, &["a"]);
        let first = desired_status(None, &p, &[Some(Health::Ok)]).unwrap();
        assert_eq!(first.functions, vec!["a"]);
        assert_eq!(first.observed_generation, Some(2));
        assert!(desired_status(Some(&first), &p, &[Some(Health::Ok)]).is_none());
        let p2 = plan(None, &["a", "b"]);
        let second =
            desired_status(Some(&first), &p2, &[Some(Health::Ok), Some(Health::Ok)]).unwrap();
        assert_eq!(second.functions, vec!["a", "b"]);
    }
}
