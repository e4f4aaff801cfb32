//! Job controller: runs a Job's pod template to completion.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::ctx::{Ctx, KeyedWorkers, is_not_found, ns_name};
use crate::error::Result;
use crate::util::{controller_ref, controller_uid, generate_name, pod_phase, pod_ready};

/// What the Job planner needs to know about one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct JobPodView {
    pub name: String,
    pub phase: String,
    pub ready: bool,
    pub terminating: bool,
    pub restarts: i32,
    pub finished_at: Option<Timestamp>,
}

impl JobPodView {
    pub fn of(pod: &Pod) -> Self {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        let restarts = statuses
            .iter()
            .flat_map(|v| v.iter())
            .map(|c| c.restart_count)
            .sum();
        let finished_at = statuses
            .iter()
            .flat_map(|v| v.iter())
            .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
            .map(|t| t.0)
            .max();
        Self {
            name: pod.name_any(),
            phase: pod_phase(pod).to_string(),
            ready: pod_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            restarts,
            finished_at,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobPlan {
    pub create: usize,
    pub delete: Vec<String>,
    pub status: JobStatus,
}

/// Whether a Job carries a True Complete or Failed condition.
pub fn job_finished(job: &Job) -> Option<&'static str> {
    let conds = job.status.as_ref().and_then(|s| s.conditions.as_ref())?;
    for c in conds {
        if c.status == "True" {
            if c.type_ == "Complete" {
                return Some("Complete");
            }
            if c.type_ == "Failed" {
                return Some("Failed");
            }
        }
    }
    None
}

fn condition(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Plans the next step of a Job. `backoff` is the delay before the pod that
/// replaces the n-th failure (n >= 1).
pub fn plan_job(
    job: &Job,
    pods: &[JobPodView],
    now: Timestamp,
    backoff: &dyn Fn(i32) -> std::time::Duration,
) -> JobPlan {
    let spec = job.spec.clone().unwrap_or_default();
    let prev = job.status.clone().unwrap_or_default();
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    let active: Vec<&JobPodView> = pods
        .iter()
        .filter(|p| !p.terminating && !matches!(p.phase.as_str(), "Succeeded" | "Failed"))
        .collect();
    let succeeded = pods.iter().filter(|p| p.phase == "Succeeded").count() as i32;
    let failed_pods = pods.iter().filter(|p| p.phase == "Failed").count() as i32;
    let failed = failed_pods
        + if on_failure {
            active.iter().map(|p| p.restarts).sum::<i32>()
        } else {
            0
        };
    let ready = active.iter().filter(|p| p.ready).count() as i32;
    let terminating = pods.iter().filter(|p| p.terminating).count() as i32;
    let start_time = prev.start_time.clone().map(|t| t.0).unwrap_or(now);
    let mut status = JobStatus {
        active: Some(active.len() as i32),
        succeeded: Some(succeeded),
        failed: Some(failed),
        ready: Some(ready),
        terminating: Some(terminating),
        start_time: Some(Time(start_time)),
        completion_time: prev.completion_time.clone(),
        conditions: Some(prev.conditions.clone().unwrap_or_default()),
        ..Default::default()
    };
    let mut out = JobPlan::default();
    let kill_active = |out: &mut JobPlan| {
        out.delete.extend(active.iter().map(|p| p.name.clone()));
    };
    if job_finished(job).is_some() {
        kill_active(&mut out);
        status.active = Some(0);
        out.status = status;
        return out;
    }
    if spec.suspend == Some(true) {
        kill_active(&mut out);
        status.active = Some(0);
        out.status = status;
        return out;
    }
    let completions = spec.completions.unwrap_or(1).max(1);
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let mut finish = |type_: &str, reason: &str, message: &str, out: &mut JobPlan| {
        let conds = status.conditions.get_or_insert_with(Vec::new);
        let criteria = if type_ == "Complete" {
            "SuccessCriteriaMet"
        } else {
            "FailureTarget"
        };
        conds.push(condition(criteria, reason, message, now));
        conds.push(condition(type_, reason, message, now));
        if type_ == "Complete" {
            status.completion_time = Some(Time(now));
        }
        kill_active(out);
        status.active = Some(0);
    };
    if succeeded >= completions {
        finish(
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &mut out,
        );
    } else if failed > backoff_limit {
        finish(
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            &mut out,
        );
    } else if spec
        .active_deadline_seconds
        .is_some_and(|d| now.as_second() - start_time.as_second() >= d)
    {
        finish(
            "Failed",
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
            &mut out,
        );
    } else {
        let want =
            (parallelism - active.len() as i32).min(completions - succeeded - active.len() as i32);
        let last_failure = pods
            .iter()
            .filter(|p| p.phase == "Failed")
            .filter_map(|p| p.finished_at)
            .max();
        let waiting_backoff = failed_pods > 0
            && last_failure.is_some_and(|t| {
                let delay = backoff(failed_pods);
                (now.as_millisecond() - t.as_millisecond()) < delay.as_millis() as i64
            });
        if !waiting_backoff {
            out.create = want.max(0) as usize;
        }
    }
    out.status = status;
    out
}

/// The pod a Job runs.
pub fn build_job_pod(job: &Job) -> Pod {
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tmeta.labels.unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    labels.insert("batch.kubernetes.io/job-name".into(), job.name_any());
    labels.insert("job-name".into(), job.name_any());
    labels.insert("batch.kubernetes.io/controller-uid".into(), uid.clone());
    labels.insert("controller-uid".into(), uid);
    Pod {
        metadata: ObjectMeta {
            name: Some(generate_name(&format!("{}-", job.name_any()))),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: tmeta.annotations,
            owner_references: controller_ref(job).map(|r| vec![r]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// One pass over every Job, plus removal of pods whose Job or Deployment is gone.
///
/// Each Job runs on its own task (see [`KeyedWorkers`]), so one Job waiting for the cache
/// never holds up another's pods.
pub async fn reconcile_all(ctx: Arc<Ctx>, workers: Arc<KeyedWorkers>) -> Result<()> {
    for job in ctx.stores.jobs.state() {
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(uid) = job.metadata.uid.clone() else {
            continue;
        };
        let (ns, name) = ns_name(job.as_ref());
        let ctx = Arc::clone(&ctx);
        workers.dispatch(uid.clone(), move || {
            let ctx = Arc::clone(&ctx);
            let (ns, name, uid) = (ns.clone(), name.clone(), uid.clone());
            async move {
                match live(&ctx, &ns, &name, &uid) {
                    Some(job) => reconcile(&ctx, &job).await,
                    None => Ok(()),
                }
            }
        });
    }
    collect_orphans(&ctx).await;
    Ok(())
}

/// The Job `ns/name` with this uid as the cache has it now, unless it is gone or being deleted.
fn live(ctx: &Ctx, ns: &str, name: &str, uid: &str) -> Option<Arc<Job>> {
    ctx.stores
        .jobs
        .get(&ObjectRef::new(name).within(ns))
        .filter(|j| {
            j.metadata.uid.as_deref() == Some(uid) && j.metadata.deletion_timestamp.is_none()
        })
}

async fn reconcile(ctx: &Ctx, job: &Job) -> Result<()> {
    let (ns, name) = ns_name(job);
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let owned = |p: &Pod| {
        p.metadata.namespace.as_deref() == Some(ns.as_str())
            && controller_uid(&p.metadata, "Job") == Some(uid.as_str())
    };
    let views: Vec<JobPodView> = ctx
        .stores
        .pods
        .state()
        .iter()
        .filter(|p| owned(p))
        .map(|p| JobPodView::of(p))
        .collect();
    let base = ctx.config.restart_backoff_base;
    let cap = ctx.config.restart_backoff_max;
    let backoff = move |n: i32| crate::kubelet::backoff_delay(base, cap, n.max(1) as u32 - 1);
    let step = plan_job(job, &views, Timestamp::now(), &backoff);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for victim in &step.delete {
        match pods.delete(victim, &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for _ in 0..step.create {
        if live(ctx, &ns, &name, &uid).is_none() {
            return Ok(());
        }
        let created = pods
            .create(&PostParams::default(), &build_job_pod(job))
            .await?;
        tracing::info!(%ns, job = %name, pod = %created.name_any(), "created job pod");
        ctx.wait_pod_cache(&ns, &created.name_any(), true).await;
    }
    if job.status.as_ref() != Some(&step.status) {
        let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({ "status": step.status });
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

/// Deletes pods whose controlling Deployment or Job no longer exists, in case
/// the API server does not cascade deletions.
async fn collect_orphans(ctx: &Ctx) {
    let deployments: std::collections::HashSet<String> = ctx
        .stores
        .deployments
        .state()
        .iter()
        .filter_map(|d| d.metadata.uid.clone())
        .collect();
    let jobs: std::collections::HashSet<String> = ctx
        .stores
        .jobs
        .state()
        .iter()
        .filter_map(|j| j.metadata.uid.clone())
        .collect();
    for pod in ctx.stores.pods.state() {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let orphan = controller_uid(&pod.metadata, "Deployment")
            .is_some_and(|u| !deployments.contains(u))
            || controller_uid(&pod.metadata, "Job").is_some_and(|u| !jobs.contains(u));
        if orphan {
            let (ns, name) = ns_name(pod.as_ref());
            tracing::info!(%ns, pod = %name, "deleting pod whose owner is gone");
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            if let Err(e) = api.delete(&name, &DeleteParams::default()).await
                && !is_not_found(&e)
            {
                tracing::warn!(%ns, pod = %name, error = %e, "deleting orphan pod failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn job(spec: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j", "namespace": "ns", "uid": "ju"},
            "spec": spec}))
        .unwrap()
    }

    fn pv(name: &str, phase: &str) -> JobPodView {
        JobPodView {
            name: name.into(),
            phase: phase.into(),
            ready: false,
            terminating: false,
            restarts: 0,
            finished_at: None,
        }
    }

    fn nob(_: i32) -> Duration {
        Duration::ZERO
    }

    #[test]
    fn creates_then_completes() {
        let j = job(
            serde_json::json!({"template": {"spec": {"restartPolicy": "Never", "containers": []}}}),
        );
        let now = Timestamp::from_second(100).unwrap();
        let p = plan_job(&j, &[], now, &nob);
        assert_eq!(p.create, 1);
        assert_eq!(p.status.active, Some(0));
        let p = plan_job(&j, &[pv("a", "Running")], now, &nob);
        assert_eq!((p.create, p.status.active), (0, Some(1)));
        let p = plan_job(&j, &[pv("a", "Succeeded")], now, &nob);
        assert_eq!(p.create, 0);
        let conds = p.status.conditions.unwrap();
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        );
        assert_eq!(p.status.succeeded, Some(1));
        assert!(p.status.completion_time.is_some());
    }

    #[test]
    fn backoff_limit_and_retry() {
        let j = job(
            serde_json::json!({"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": []}}}),
        );
        let now = Timestamp::from_second(100).unwrap();
        let p = plan_job(&j, &[pv("a", "Failed")], now, &nob);
        assert_eq!(p.create, 1, "one retry allowed");
        let mut f = pv("a", "Failed");
        f.finished_at = Some(Timestamp::from_second(99).unwrap());
        let p = plan_job(&j, &[f], now, &|_| Duration::from_secs(10));
        assert_eq!(p.create, 0, "retry waits for the backoff");
        let p = plan_job(&j, &[pv("a", "Failed"), pv("b", "Failed")], now, &nob);
        assert_eq!(p.create, 0);
        let conds = p.status.conditions.unwrap();
        assert!(conds.iter().any(|c| c.type_ == "Failed" && c.reason.as_deref() == Some("BackoffLimitExceeded")));
    }

    #[test]
    fn deadline_and_suspend() {
        let mut j = job(
            serde_json::json!({"activeDeadlineSeconds": 5, "template": {"spec": {"containers": []}}}),
        );
        j.status = Some(JobStatus {
            start_time: Some(Time(Timestamp::from_second(0).unwrap())),
            ..Default::default()
        });
        let p = plan_job(
            &j,
            &[pv("a", "Running")],
            Timestamp::from_second(10).unwrap(),
            &nob,
        );
        assert_eq!(p.delete, vec!["a".to_string()]);
        assert!(
            p.status
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.reason.as_deref() == Some("DeadlineExceeded"))
        );
        let j = job(serde_json::json!({"suspend": true, "template": {"spec": {"containers": []}}}));
        let p = plan_job(
            &j,
            &[pv("a", "Running")],
            Timestamp::from_second(10).unwrap(),
            &nob,
        );
        assert_eq!((p.create, p.delete.len()), (0, 1));
    }

    #[test]
    fn parallel_completions() {
        let j = job(
            serde_json::json!({"completions": 3, "parallelism": 2, "template": {"spec": {"containers": []}}}),
        );
        let now = Timestamp::from_second(1).unwrap();
        assert_eq!(plan_job(&j, &[], now, &nob).create, 2);
        assert_eq!(
            plan_job(
                &j,
                &[
                    pv("a", "Succeeded"),
                    pv("b", "Succeeded"),
                    pv("c", "Running")
                ],
                now,
                &nob
            )
            .create,
            0
        );
        assert_eq!(
            plan_job(&j, &[pv("a", "Succeeded"), pv("b", "Running")], now, &nob).create,
            1
        );
    }

    #[test]
    fn job_pod_labels() {
        let j = job(
            serde_json::json!({"template": {"metadata": {"labels": {"x": "y"}}, "spec": {"containers": []}}}),
        );
        let pod = build_job_pod(&j);
        assert_eq!(pod.labels().get("job-name").map(String::as_str), Some("j"));
        assert_eq!(
            pod.labels().get("controller-uid").map(String::as_str),
            Some("ju")
        );
        assert_eq!(pod.labels().get("x").map(String::as_str), Some("y"));
        assert!(pod.name_any().starts_with("j-"));
    }
}
