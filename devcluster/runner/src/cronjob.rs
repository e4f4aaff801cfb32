//! CronJob controller: creates Jobs on schedule (UTC), with concurrency
//! policies, history limits and status.

use std::str::FromStr;
use std::sync::Arc;

use croner::Cron;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};

use crate::ctx::{Ctx, is_conflict, is_not_found, ns_name};
use crate::error::{Error, Result};
use crate::job::job_finished;
use crate::util::{controller_ref, controller_uid};

pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// A devcluster-only schedule that replaces `spec.schedule` and may have a leading seconds
/// field, so tests can fire every few seconds. The API server, like a real one, accepts only
/// five-field schedules in `spec.schedule`; an annotation is accepted anywhere (a real cluster
/// ignores it and runs `spec.schedule`).
pub const SCHEDULE_OVERRIDE_ANNOTATION: &str = "devcluster.kubeless.io/schedule";

/// Parses a 5-field cron schedule (a leading seconds field is also accepted,
/// as a devcluster extension), `@hourly`-style aliases, and a `TZ=`/`CRON_TZ=`
/// prefix naming UTC.
pub fn parse_schedule(schedule: &str) -> Result<Cron> {
    let mut s = schedule.trim();
    if let Some(rest) = s.strip_prefix("CRON_TZ=").or_else(|| s.strip_prefix("TZ=")) {
        let (zone, tail) = rest.split_once(' ').unwrap_or((rest, ""));
        if !matches!(zone, "UTC" | "Etc/UTC" | "GMT") {
            return Err(Error::Cron {
                schedule: schedule.into(),
                message: format!(
                    "time zone {zone:?} not supported (devcluster runs CronJobs in UTC)"
                ),
            });
        }
        s = tail.trim();
    }
    Cron::from_str(s).map_err(|e| Error::Cron {
        schedule: schedule.into(),
        message: e.to_string(),
    })
}

/// The most recent scheduled time in `(since, now]`, if any.
pub fn most_recent_due(cron: &Cron, since: Timestamp, now: Timestamp) -> Option<Timestamp> {
    let now_z = now.to_zoned(TimeZone::UTC);
    let prev = cron
        .find_previous_occurrence(&now_z, true)
        .ok()?
        .timestamp();
    (prev > since).then_some(prev)
}

/// The next scheduled time after `after`.
pub fn next_after(cron: &Cron, after: Timestamp) -> Option<Timestamp> {
    let z = after.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&z, false)
        .ok()
        .map(|t| t.timestamp())
}

/// Job name for a scheduled time: minutes since the epoch like Kubernetes,
/// seconds when the schedule has second granularity.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    let secs = scheduled.as_second();
    let n = if secs % 60 == 0 { secs / 60 } else { secs };
    format!("{cronjob}-{n}")
}

/// Builds the Job for a scheduled run.
pub fn build_job(cj: &CronJob, scheduled: Timestamp) -> Job {
    let template = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_ANNOTATION.into(), scheduled.to_string());
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&cj.name_any(), scheduled)),
            namespace: cj.namespace(),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: controller_ref(cj).map(|r| vec![r]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn job_time(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .or(job.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
}

/// Finished jobs beyond the history limits, oldest first.
pub fn history_to_delete(jobs: &[&Job], successful_limit: i32, failed_limit: i32) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, limit) in [("Complete", successful_limit), ("Failed", failed_limit)] {
        let mut finished: Vec<&&Job> = jobs
            .iter()
            .filter(|j| job_finished(j) == Some(kind))
            .collect();
        finished.sort_by_key(|j| (job_time(j), j.name_any()));
        let extra = finished.len().saturating_sub(limit.max(0) as usize);
        out.extend(finished.iter().take(extra).map(|j| j.name_any()));
    }
    out
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: Some(job.name_any()),
        namespace: job.namespace(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

pub async fn reconcile_all(ctx: Arc<Ctx>) -> Result<()> {
    for cj in ctx.stores.cronjobs.state() {
        if cj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Err(err) = reconcile(&ctx, &cj).await {
            let (ns, name) = ns_name(cj.as_ref());
            tracing::warn!(%ns, %name, error = %err, "cronjob reconcile failed");
        }
    }
    // Jobs whose CronJob is gone.
    let cronjobs: std::collections::HashSet<String> = ctx
        .stores
        .cronjobs
        .state()
        .iter()
        .filter_map(|c| c.metadata.uid.clone())
        .collect();
    for job in ctx.stores.jobs.state() {
        if job.metadata.deletion_timestamp.is_none()
            && controller_uid(&job.metadata, "CronJob").is_some_and(|u| !cronjobs.contains(u))
        {
            let (ns, name) = ns_name(job.as_ref());
            delete_job(&ctx, &ns, &name).await;
        }
    }
    Ok(())
}

async fn delete_job(ctx: &Ctx, ns: &str, name: &str) {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    if let Err(e) = api.delete(name, &dp).await
        && !is_not_found(&e)
    {
        tracing::warn!(%ns, job = %name, error = %e, "deleting job failed");
    }
}

async fn reconcile(ctx: &Ctx, cj: &CronJob) -> Result<()> {
    let (ns, name) = ns_name(cj);
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let Some(spec) = cj.spec.as_ref() else {
        return Ok(());
    };
    let owned: Vec<Arc<Job>> = ctx
        .stores
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|j| controller_uid(&j.metadata, "CronJob") == Some(uid.as_str()))
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect();
    let mut active: Vec<Arc<Job>> = owned
        .iter()
        .filter(|j| job_finished(j).is_none())
        .cloned()
        .collect();
    let prev = cj.status.clone().unwrap_or_default();
    let mut last_schedule = prev.last_schedule_time.clone();
    let now = Timestamp::now();
    if let Some(tz) = spec.time_zone.as_deref()
        && !matches!(tz, "UTC" | "Etc/UTC" | "GMT" | "Etc/GMT")
    {
        return Err(Error::Cron {
            schedule: spec.schedule.clone(),
            message: format!("timeZone {tz:?} not supported (devcluster runs CronJobs in UTC)"),
        });
    }
    if spec.suspend != Some(true) {
        let schedule = cj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SCHEDULE_OVERRIDE_ANNOTATION))
            .unwrap_or(&spec.schedule);
        let cron = parse_schedule(schedule)?;
        let since = prev
            .last_schedule_time
            .as_ref()
            .or(cj.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
            .unwrap_or(now);
        if let Some(due) = most_recent_due(&cron, since, now) {
            let too_late = spec
                .starting_deadline_seconds
                .is_some_and(|d| now.as_second() - due.as_second() > d);
            let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
            if too_late {
                tracing::info!(%ns, cronjob = %name, "missed schedule past startingDeadlineSeconds");
            } else if policy == "Forbid" && !active.is_empty() {
                // Stays due; runs once the active job has finished.
            } else {
                if policy == "Replace" {
                    for j in active.drain(..) {
                        delete_job(ctx, &ns, &j.name_any()).await;
                    }
                }
                let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
                let job = build_job(cj, due);
                let job_name = job.name_any();
                match api.create(&PostParams::default(), &job).await {
                    Ok(created) => {
                        tracing::info!(%ns, cronjob = %name, job = %job_name, "scheduled job");
                        ctx.wait_job_cache(&ns, &job_name, true).await;
                        active.push(Arc::new(created));
                    }
                    // Already created by an earlier pass that did not get to write status.
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(e.into()),
                }
                last_schedule = Some(Time(due));
            }
        }
    }
    // History limits.
    let refs: Vec<&Job> = owned.iter().map(|j| j.as_ref()).collect();
    for victim in history_to_delete(
        &refs,
        spec.successful_jobs_history_limit.unwrap_or(3),
        spec.failed_jobs_history_limit.unwrap_or(1),
    ) {
        delete_job(ctx, &ns, &victim).await;
    }
    let last_successful = owned
        .iter()
        .filter(|j| job_finished(j) == Some("Complete"))
        .filter_map(|j| j.status.as_ref().and_then(|s| s.completion_time.clone()))
        .max_by_key(|t| t.0)
        .or(prev.last_successful_time.clone());
    let mut active_refs: Vec<ObjectReference> = active.iter().map(|j| job_ref(j)).collect();
    active_refs.sort_by(|a, b| a.name.cmp(&b.name));
    let status = CronJobStatus {
        active: Some(active_refs),
        last_schedule_time: last_schedule,
        last_successful_time: last_successful,
    };
    let same = {
        let strip = |s: &CronJobStatus| {
            let mut s = s.clone();
            for r in s.active.iter_mut().flatten() {
                r.resource_version = None;
            }
            if s.active.as_ref().is_some_and(|a| a.is_empty()) {
                s.active = None;
            }
            s
        };
        strip(&prev) == strip(&status)
    };
    if !same {
        let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({ "status": status });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_field_next_fire() {
        let c = parse_schedule("*/15 * * * *").unwrap();
        assert_eq!(
            next_after(&c, ts("2024-05-01T10:07:30Z")),
            Some(ts("2024-05-01T10:15:00Z"))
        );
        let c = parse_schedule("0 3 * * 1").unwrap();
        // 2024-05-01 is a Wednesday; next Monday is 2024-05-06.
        assert_eq!(
            next_after(&c, ts("2024-05-01T10:00:00Z")),
            Some(ts("2024-05-06T03:00:00Z"))
        );
        let c = parse_schedule("@hourly").unwrap();
        assert_eq!(
            next_after(&c, ts("2024-05-01T10:00:00Z")),
            Some(ts("2024-05-01T11:00:00Z"))
        );
        let c = parse_schedule("TZ=UTC 30 1 * * *").unwrap();
        assert_eq!(
            next_after(&c, ts("2024-05-01T10:00:00Z")),
            Some(ts("2024-05-02T01:30:00Z"))
        );
    }

    #[test]
    fn seconds_extension_and_errors() {
        let c = parse_schedule("*/2 * * * * *").unwrap();
        assert_eq!(
            next_after(&c, ts("2024-05-01T10:00:01Z")),
            Some(ts("2024-05-01T10:00:02Z"))
        );
        assert!(parse_schedule("not a schedule").is_err());
        assert!(parse_schedule("CRON_TZ=Europe/Paris * * * * *").is_err());
    }

    #[test]
    fn due_times() {
        let c = parse_schedule("*/5 * * * *").unwrap();
        let since = ts("2024-05-01T10:00:00Z");
        assert_eq!(most_recent_due(&c, since, ts("2024-05-01T10:04:59Z")), None);
        assert_eq!(
            most_recent_due(&c, since, ts("2024-05-01T10:05:00Z")),
            Some(ts("2024-05-01T10:05:00Z"))
        );
        // Many missed runs: only the latest is started.
        assert_eq!(
            most_recent_due(&c, since, ts("2024-05-01T10:27:00Z")),
            Some(ts("2024-05-01T10:25:00Z"))
        );
    }

    #[test]
    fn names_and_history() {
        assert_eq!(
            job_name("cj", ts("2024-05-01T10:05:00Z")),
            format!("cj-{}", ts("2024-05-01T10:05:00Z").as_second() / 60)
        );
        assert_eq!(
            job_name("cj", ts("2024-05-01T10:05:02Z")),
            format!("cj-{}", ts("2024-05-01T10:05:02Z").as_second())
        );
        let mk = |name: &str, kind: &str, secs: i64| -> Job {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "status": {"completionTime": Timestamp::from_second(secs).unwrap().to_string(),
                           "conditions": [{"type": kind, "status": "True"}]}}))
            .unwrap()
        };
        let jobs = [
            mk("a", "Complete", 1),
            mk("b", "Complete", 3),
            mk("c", "Complete", 2),
            mk("d", "Failed", 1),
            mk("e", "Failed", 5),
        ];
        let refs: Vec<&Job> = jobs.iter().collect();
        assert_eq!(
            history_to_delete(&refs, 2, 1),
            vec!["a".to_string(), "d".to_string()]
        );
        assert_eq!(history_to_delete(&refs, 0, 0).len(), 5);
    }

    #[test]
    fn built_job() {
        let cj: CronJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tick", "namespace": "n", "uid": "cu"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"metadata": {"labels": {"a": "b"}},
                "spec": {"template": {"spec": {"containers": []}}}}}}))
        .unwrap();
        let j = build_job(&cj, ts("2024-05-01T10:05:00Z"));
        assert!(j.name_any().starts_with("tick-"));
        assert_eq!(
            j.metadata.owner_references.as_ref().unwrap()[0].kind,
            "CronJob"
        );
        assert!(j.annotations().contains_key(SCHEDULED_ANNOTATION));
        assert_eq!(j.labels().get("a").map(String::as_str), Some("b"));
    }
}
