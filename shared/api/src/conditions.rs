//! Status conditions shared by every kind, and the condition types and reasons the controllers
//! write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type: the object is fully reconciled and serving.
pub const READY: &str = "Ready";

/// Condition status values (Kubernetes convention).
pub const STATUS_TRUE: &str = "True";
/// See [`STATUS_TRUE`].
pub const STATUS_FALSE: &str = "False";
/// See [`STATUS_TRUE`].
pub const STATUS_UNKNOWN: &str = "Unknown";

/// Condition reasons (CamelCase, stable: they are also used as Event reasons and metric labels).
pub mod reasons {
    /// Everything the object asks for exists and is ready.
    pub const RECONCILED: &str = "Reconciled";
    /// Children exist but are not ready yet (e.g. the Deployment is rolling out).
    pub const PROGRESSING: &str = "Progressing";
    /// Ready reason of a function scaled to zero: it has no replica, and the next call or
    /// event wakes it (see [`crate::scale`]).
    pub const SCALED_TO_ZERO: &str = "ScaledToZero";
    /// `.spec.runtime` is not in the runtime catalogue.
    pub const UNKNOWN_RUNTIME: &str = "UnknownRuntime";
    /// A field cannot be interpreted (timeout, handler, content type, template...).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The function source does not match `.spec.checksum`.
    pub const CHECKSUM_MISMATCH: &str = "ChecksumMismatch";
    /// Installing the dependencies failed.
    pub const DEPENDENCIES_FAILED: &str = "DependenciesFailed";
    /// The function's image is being built (the build step) and no earlier image runs yet.
    pub const BUILDING: &str = "Building";
    /// Building or compiling the function failed (also the build step's Job).
    pub const BUILD_FAILED: &str = "BuildFailed";
    /// The function's pods crash or fail their probes.
    pub const DEPLOYMENT_FAILED: &str = "DeploymentFailed";
    /// The API server refuses the function's pods (the Deployment's `ReplicaFailure`
    /// condition, reason `FailedCreate`: PodSecurity admission, a quota, a webhook).
    pub const PODS_REFUSED: &str = "PodsRefused";
    /// A trigger names a function that does not exist.
    pub const FUNCTION_NOT_FOUND: &str = "FunctionNotFound";
    /// An HTTPTrigger names a host (or, without one, every host) that belongs to another
    /// namespace: the install's host policy gives it away, or another namespace claimed it
    /// first. The trigger is not served.
    pub const ROUTE_CONFLICT: &str = "RouteConflict";
    /// A selector-based trigger matches no function.
    pub const NO_FUNCTIONS_SELECTED: &str = "NoFunctionsSelected";
    /// The label selector of a trigger is invalid.
    pub const INVALID_SELECTOR: &str = "InvalidSelector";
    /// A CronJobTrigger's schedule is not a valid cron expression.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// A Secret the object refers to does not exist or lacks keys.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// The broker (Kafka, NATS, Kinesis) cannot be reached.
    pub const BROKER_UNAVAILABLE: &str = "BrokerUnavailable";
    /// The topic, subject or stream does not exist.
    pub const SOURCE_NOT_FOUND: &str = "SourceNotFound";
    /// Writing a child object (Ingress, CronJob, ...) failed.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// Event only: a message's delivery to a function failed after its last attempt.
    pub const DELIVERY_FAILED: &str = "DeliveryFailed";
    /// Event only: a message that failed every attempt was sent to the dead-letter destination.
    pub const DEAD_LETTERED: &str = "DeadLettered";
}

/// One observation of an object's state (Kubernetes condition convention).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, e.g. `Ready`. Unique within the list.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable CamelCase reason for the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The `.metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition stamped with the current time.
    pub fn new(
        type_: impl Into<String>,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status: if status { STATUS_TRUE } else { STATUS_FALSE }.to_string(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: Some(now()),
            observed_generation: None,
        }
    }

    /// `Ready=True` with the given reason and message.
    pub fn ready(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(READY, true, reason, message)
    }

    /// `Ready=False` with the given reason and message.
    pub fn not_ready(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(READY, false, reason, message)
    }

    /// Sets `observedGeneration`.
    #[must_use]
    pub fn with_generation(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }

    /// Whether `status` is `True`.
    pub fn is_true(&self) -> bool {
        self.status == STATUS_TRUE
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Inserts or replaces the condition of the same type. When the status did not change, the
/// previous `lastTransitionTime` is kept (only reason/message/generation are updated), so the
/// time says when the state actually flipped. Returns whether anything changed apart from time.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            let changed = *existing != condition;
            *existing = condition;
            changed
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// The condition of the given type, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the `Ready` condition is `True`.
pub fn is_ready(conditions: &[Condition]) -> bool {
    find_condition(conditions, READY).is_some_and(Condition::is_true)
}

/// Schema transform for `conditions` fields: a list-map keyed on `type`, so server-side apply
/// merges conditions by type instead of replacing the whole list.
pub(crate) fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Option<Time> {
        Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(secs).unwrap(),
        ))
    }

    #[test]
    fn keeps_transition_time_when_status_unchanged() {
        let mut conds = vec![Condition {
            last_transition_time: at(100),
            ..Condition::not_ready(reasons::PROGRESSING, "rolling out")
        }];
        let changed = set_condition(
            &mut conds,
            Condition::not_ready(reasons::DEPLOYMENT_FAILED, "crash loop"),
        );
        assert!(changed);
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time, at(100));
        assert_eq!(conds[0].reason.as_deref(), Some(reasons::DEPLOYMENT_FAILED));
    }

    #[test]
    fn updates_transition_time_when_status_flips() {
        let mut conds = vec![Condition {
            last_transition_time: at(100),
            ..Condition::not_ready(reasons::PROGRESSING, "rolling out")
        }];
        set_condition(&mut conds, Condition::ready(reasons::RECONCILED, "ok"));
        assert_ne!(conds[0].last_transition_time, at(100));
        assert!(is_ready(&conds));
    }

    #[test]
    fn identical_condition_reports_no_change_and_other_types_are_appended() {
        let mut conds = vec![Condition {
            last_transition_time: at(5),
            ..Condition::ready(reasons::RECONCILED, "ok")
        }];
        assert!(!set_condition(
            &mut conds,
            Condition::ready(reasons::RECONCILED, "ok")
        ));
        assert!(set_condition(
            &mut conds,
            Condition::new("Delivering", false, reasons::BROKER_UNAVAILABLE, "down")
        ));
        assert_eq!(conds.len(), 2);
        assert!(find_condition(&conds, "Delivering").is_some_and(|c| !c.is_true()));
        assert!(is_ready(&conds));
    }
}
