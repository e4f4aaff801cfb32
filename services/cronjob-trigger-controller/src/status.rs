//! Trigger status: the result of the newest finished run, the `LastRunSucceeded` condition,
//! how status is written (server-side apply of only the fields a writer owns) and the Events
//! published on the trigger.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use kubeless_api::{Condition, CronJobTrigger, CronJobTriggerStatus, set_condition};
use serde::Serialize;

/// Condition type: whether the last finished run called the function successfully.
pub const LAST_RUN: &str = "LastRunSucceeded";
/// `lastResult` of a run that got a 2xx answer.
pub const SUCCEEDED: &str = "Succeeded";
/// `lastResult` of a run that did not.
pub const FAILED: &str = "Failed";
/// Scheduled-time annotation Kubernetes puts on a CronJob's Jobs.
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// One finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The Job name (CronJob mode) or the scheduled time (scheduler mode).
    pub run: String,
    pub succeeded: bool,
    /// Reason of the result: `Succeeded`, or why it failed (`BackoffLimitExceeded`,
    /// `DeadlineExceeded`, `RetriesExhausted`, ...).
    pub reason: String,
    pub message: String,
}

impl RunResult {
    /// `lastResult`.
    pub fn result(&self) -> &'static str {
        if self.succeeded { SUCCEEDED } else { FAILED }
    }

    /// The `LastRunSucceeded` condition.
    pub fn condition(&self) -> Condition {
        Condition::new(
            LAST_RUN,
            self.succeeded,
            self.reason.clone(),
            self.message.clone(),
        )
    }
}

fn finished_condition(job: &Job) -> Option<(bool, String, String)> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds.iter().find_map(|c| {
        if c.status != "True" {
            return None;
        }
        match c.type_.as_str() {
            "Complete" => Some((true, SUCCEEDED.to_string(), String::new())),
            "Failed" => Some((
                false,
                c.reason
                    .clone()
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| FAILED.to_string()),
                c.message.clone().unwrap_or_default(),
            )),
            _ => None,
        }
    })
}

/// When a Job was scheduled: the CronJob annotation, else its creation time.
pub fn scheduled_time(job: &Job) -> Option<Timestamp> {
    job.annotations()
        .get(SCHEDULED_ANNOTATION)
        .and_then(|s| s.parse::<Timestamp>().ok())
        .or_else(|| job.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The newest finished Job (by scheduled time, then name) as a run result.
pub fn newest_finished(jobs: &[Job]) -> Option<RunResult> {
    jobs.iter()
        .filter_map(|j| finished_condition(j).map(|f| (scheduled_time(j), j.name_any(), f)))
        .max_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
        .map(|(_, name, (succeeded, reason, detail))| {
            let message = if succeeded {
                format!("Job {name} called the function successfully")
            } else if detail.is_empty() {
                format!("Job {name} failed ({reason}); see its Pod's log for the invoker's outcome")
            } else {
                format!("Job {name} failed ({reason}: {detail}); see its Pod's log for the invoker's outcome")
            };
            RunResult {
                run: name,
                succeeded,
                reason,
                message,
            }
        })
}

/// The status fields one writer owns. Only these are sent, so the reconciler (Ready) and the
/// scheduler (last run) never overwrite each other's fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Owned {
    pub observed_generation: Option<i64>,
    pub conditions: Vec<Condition>,
    pub last_schedule_time: Option<Timestamp>,
    pub last_result: Option<String>,
}

/// Merges `owned` into `old` the way the API server will (conditions by type, keeping the
/// transition time of an unchanged status). Returns the merged status and the owned fields with
/// their transition times settled; `None` when nothing but times would change.
pub fn merge(
    old: &CronJobTriggerStatus,
    owned: Owned,
) -> Option<(CronJobTriggerStatus, CronJobTriggerStatus)> {
    let mut new = old.clone();
    let mut types = Vec::new();
    for c in owned.conditions {
        types.push(c.type_.clone());
        set_condition(&mut new.conditions, c);
    }
    if owned.observed_generation.is_some() {
        new.observed_generation = owned.observed_generation;
    }
    if let Some(t) = owned.last_schedule_time {
        new.last_schedule_time = Some(Time(t));
    }
    if owned.last_result.is_some() {
        new.last_result = owned.last_result;
    }
    if new == *old {
        return None;
    }
    let patch = CronJobTriggerStatus {
        observed_generation: owned.observed_generation,
        conditions: new
            .conditions
            .iter()
            .filter(|c| types.contains(&c.type_))
            .cloned()
            .collect(),
        last_schedule_time: owned.last_schedule_time.map(Time),
        last_result: new.last_result.clone().filter(|_| {
            // Only send lastResult when this writer owns it.
            owned_result_present(&types)
        }),
    };
    Some((new, patch))
}

// The writer that owns lastResult is the one writing LastRunSucceeded.
fn owned_result_present(types: &[String]) -> bool {
    types.iter().any(|t| t == LAST_RUN)
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct StatusApply<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ApplyMeta<'a>,
    status: &'a CronJobTriggerStatus,
}

#[derive(Serialize, Debug)]
struct ApplyMeta<'a> {
    name: &'a str,
    namespace: &'a str,
}

/// Server-side applies `status` (only the fields it holds) with field manager `manager`.
pub async fn apply(
    client: &Client,
    namespace: &str,
    name: &str,
    manager: &str,
    status: &CronJobTriggerStatus,
) -> Result<(), kube::Error> {
    let api: Api<CronJobTrigger> = Api::namespaced(client.clone(), namespace);
    let body = StatusApply {
        api_version: kubeless_api::API_VERSION,
        kind: "CronJobTrigger",
        metadata: ApplyMeta { name, namespace },
        status,
    };
    api.patch_status(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(drop)
}

/// Publishes an Event on the trigger; best effort (a missing permission must not block status).
/// The reconciler and the scheduler both report through it.
pub(crate) async fn publish_event(
    recorder: &Recorder,
    t: &CronJobTrigger,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &t.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing an Event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::conditions::{READY, find_condition};
    use serde_json::json;

    fn job(name: &str, scheduled: &str, cond: Option<(&str, &str)>) -> Job {
        let conditions: Vec<serde_json::Value> = cond
            .map(|(t, reason)| {
                vec![json!({"type": t, "status": "True", "reason": reason, "message": "m"})]
            })
            .unwrap_or_default();
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {SCHEDULED_ANNOTATION: scheduled}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn newest_finished_job_wins() {
        let jobs = vec![
            job("t-3", "2026-01-01T00:03:00Z", None), // still running
            job(
                "t-2",
                "2026-01-01T00:02:00Z",
                Some(("Failed", "BackoffLimitExceeded")),
            ),
            job(
                "t-1",
                "2026-01-01T00:01:00Z",
                Some(("Complete", "CompletionsReached")),
            ),
        ];
        let r = newest_finished(&jobs).unwrap();
        assert_eq!(r.run, "t-2");
        assert!(!r.succeeded);
        assert_eq!(r.result(), "Failed");
        assert_eq!(r.reason, "BackoffLimitExceeded");
        assert!(r.message.contains("t-2"));
        let c = r.condition();
        assert_eq!(c.type_, LAST_RUN);
        assert_eq!(c.status, "False");

        let jobs = vec![
            job(
                "t-1",
                "2026-01-01T00:01:00Z",
                Some(("Failed", "DeadlineExceeded")),
            ),
            job(
                "t-2",
                "2026-01-01T00:02:00Z",
                Some(("Complete", "CompletionsReached")),
            ),
        ];
        let r = newest_finished(&jobs).unwrap();
        assert_eq!((r.run.as_str(), r.result()), ("t-2", "Succeeded"));
        assert!(r.condition().is_true());
        assert!(newest_finished(&[job("x", "2026-01-01T00:00:00Z", None)]).is_none());
        assert!(newest_finished(&[]).is_none());
    }

    #[test]
    fn merge_sends_only_owned_fields_and_skips_no_ops() {
        let old = CronJobTriggerStatus {
            conditions: vec![Condition::ready("Reconciled", "ok")],
            observed_generation: Some(2),
            ..Default::default()
        };
        let run = RunResult {
            run: "r".into(),
            succeeded: false,
            reason: "RetriesExhausted".into(),
            message: "500".into(),
        };
        let t: Timestamp = "2026-01-01T00:00:02Z".parse().unwrap();
        let (merged, patch) = merge(
            &old,
            Owned {
                conditions: vec![run.condition()],
                last_schedule_time: Some(t),
                last_result: Some(run.result().into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(merged.conditions.len(), 2);
        assert!(find_condition(&merged.conditions, READY).is_some());
        assert_eq!(patch.conditions.len(), 1, "Ready belongs to the reconciler");
        assert_eq!(patch.conditions[0].type_, LAST_RUN);
        assert_eq!(patch.last_result.as_deref(), Some("Failed"));
        assert_eq!(patch.observed_generation, None);
        // the same again changes nothing
        assert!(
            merge(
                &merged,
                Owned {
                    conditions: vec![run.condition()],
                    last_schedule_time: Some(t),
                    last_result: Some("Failed".into()),
                    ..Default::default()
                }
            )
            .is_none()
        );
        // the reconciler's write does not carry lastResult
        let (_, patch) = merge(
            &merged,
            Owned {
                observed_generation: Some(3),
                conditions: vec![Condition::ready("Reconciled", "ok")],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(patch.last_result, None);
        assert_eq!(patch.observed_generation, Some(3));
        assert_eq!(patch.conditions.len(), 1);
    }
}
