#![cfg(test)]
//! Jobs and CronJobs on devcluster.

mod common;

use std::net::Ipv4Addr;

use common::{eventually, start};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const NS: &str = "default";

fn condition(job: &Job, type_: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .and_then(|c| c.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_fires_and_keeps_history_limits() {
    let h = start(Ipv4Addr::new(127, 41, 0, 0), |_| {}).await;
    let client = h.client.clone();
    let cjs: Api<CronJob> = Api::namespaced(client.clone(), NS);
    cjs.create(&PostParams::default(), &serde_json::from_value(json!({
        // Every 2 seconds: devcluster's schedule annotation (the API server, like a real one,
        // takes only five fields in spec.schedule).
        "metadata": {"name": "tick", "annotations": {"devcluster.kubeless.io/schedule": "*/2 * * * * *"}},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 2,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "tick", "image": "busybox:1.36", "command": ["sh", "-c", "echo tick from $HOSTNAME"]}]
            }}}}
        }
    })).unwrap()).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    // Jobs are trimmed by the history limit, so remember every name seen.
    let names = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    eventually("three scheduled jobs", 60, || {
        let jobs = jobs.clone();
        let names = names.clone();
        async move {
            let items = jobs.list(&ListParams::default()).await.ok()?.items;
            let mut names = names.lock().unwrap();
            for j in items {
                if j.metadata
                    .owner_references
                    .as_ref()?
                    .iter()
                    .any(|o| o.kind == "CronJob")
                {
                    names.insert(j.name_any());
                }
            }
            (names.len() >= 3).then_some(())
        }
    })
    .await;
    let cj = eventually("lastSuccessfulTime", 30, || async {
        let cj = cjs.get("tick").await.ok()?;
        cj.status.as_ref()?.last_successful_time.as_ref()?;
        Some(cj)
    })
    .await;
    assert!(cj.status.unwrap().last_schedule_time.is_some());
    // A completed job ran its pod, whose log shows the output.
    let done = eventually("a complete job", 30, || async {
        jobs.list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|j| condition(j, "Complete").is_some())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = pods
        .list(&ListParams::default().labels(&format!("job-name={}", done.name_any())))
        .await
        .unwrap()
        .items
        .remove(0);
    let log = pods
        .logs(&pod.name_any(), &LogParams::default())
        .await
        .unwrap();
    assert_eq!(log.trim(), format!("tick from {}", pod.name_any()));
    // History: never more than 2 completed jobs kept (one more may be finishing).
    eventually("history trimmed", 20, || async {
        let complete = jobs
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|j| condition(j, "Complete").is_some())
            .count();
        (complete <= 2).then_some(())
    })
    .await;
    for _ in 0..10 {
        let complete = jobs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|j| condition(j, "Complete").is_some())
            .count();
        assert!(complete <= 3, "history limit is applied (got {complete})");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    cjs.delete("tick", &Default::default()).await.unwrap();
    eventually("jobs removed with their cronjob", 30, || async {
        jobs.list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_fails_after_backoff_limit() {
    let h = start(Ipv4Addr::new(127, 42, 0, 0), |c| {
        c.restart_backoff_base = std::time::Duration::from_millis(100);
    })
    .await;
    let client = h.client.clone();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    jobs.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "doomed"},
        "spec": {"backoffLimit": 1, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", "exit 7"]}]
        }}}
    })).unwrap()).await.unwrap();
    let job = eventually("Failed condition", 60, || async {
        let j = jobs.get("doomed").await.ok()?;
        condition(&j, "Failed").map(|r| (j, r))
    })
    .await;
    assert_eq!(job.1, "BackoffLimitExceeded");
    let st = job.0.status.unwrap();
    assert_eq!(st.failed, Some(2));
    assert_eq!(st.succeeded, Some(0));
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels("job-name=doomed"))
        .await
        .unwrap()
        .items;
    assert_eq!(list.len(), 2);
    for p in list {
        let st = p.status.unwrap();
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(
            st.container_statuses.unwrap()[0]
                .state
                .clone()
                .unwrap()
                .terminated
                .unwrap()
                .exit_code,
            7
        );
    }
    h.stop().await;
}
