//! The cronjob-trigger-controller end to end on devcluster: real Python function pods
//! (kubeless-runtime), the controller in-process, and in CronJob mode real Jobs running
//! kubeless-cron-invoker as local processes (binaries `cargo build --workspace --bins` left in
//! this test's target dir).
//!
//! * CronJob mode: the CronJob is built as expected, devcluster fires it at the next minute
//!   boundary (bounded wait), the function receives the payload by POST with the Kubeless
//!   headers, and a function answering 500 gives a failed Job, `lastResult: Failed`, a
//!   `LastRunSucceeded=False` condition and a Warning Event. Invalid schedules and missing
//!   functions are conditions.
//! * Scheduler mode: a `*/2 * * * * *` schedule calls the function every two seconds without
//!   any CronJob, with the same status.
#![cfg(test)]

use std::path::Path;
use std::time::Duration;

use cronjob_trigger_controller::status::{LAST_RUN, SCHEDULED_ANNOTATION};
use cronjob_trigger_controller::{Settings, cronjob::BuilderConfig, invoker::ResolverKind, run};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Client};
use kubeless_api::CronJobTrigger;
use kubeless_api::conditions::{READY, find_condition};
use kubeless_testkit::{NS, PythonFunction, TestCluster, eventually};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const HANDLER: &str = r#"
import json

def echo(event, context):
    req = event["extensions"]["request"]
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode()
    seen = {
        "method": req.method,
        "content_type": req.headers.get("content-type"),
        "event_namespace": event["event-namespace"],
        "event_type": event["event-type"],
        "event_id": event["event-id"],
        "event_time": event["event-time"],
        "data": data,
    }
    print("RECEIVED " + json.dumps(seen), flush=True)
    return seen

def broken(event, context):
    print("FAILING", flush=True)
    return ("boom", 500)
"#;

/// A Python function `name` with the entry point `handler` of [`HANDLER`], as the
/// function-controller would deploy it.
fn function(name: &str, handler: &str) -> PythonFunction {
    PythonFunction::new(name, HANDLER, handler)
}

/// The function's pod, with its worker sockets in `sockets`: pod folders are deep, and worker
/// sockets need a path shorter than SUN_LEN.
async fn deploy_function(client: &Client, name: &str, handler: &str, sockets: &Path) {
    let socket_dir = sockets.join(name);
    std::fs::create_dir_all(&socket_dir).unwrap();
    function(name, handler)
        .env("KUBELESS_SOCKET_DIR", socket_dir.to_string_lossy())
        .deploy(client)
        .await;
}

async fn create_trigger(client: &Client, name: &str, spec: Value) {
    let api: Api<CronJobTrigger> = Api::namespaced(client.clone(), NS);
    let t: CronJobTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "CronJobTrigger",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &t).await.unwrap();
}

async fn get_trigger(client: &Client, name: &str) -> CronJobTrigger {
    Api::<CronJobTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap()
}

/// Waits for the trigger's Ready condition to have `status` and `reason`.
async fn wait_ready(client: &Client, name: &str, status: &str, reason: &str) -> CronJobTrigger {
    eventually(
        &format!("{name} Ready={status} ({reason})"),
        Duration::from_secs(30),
        || async {
            let t = get_trigger(client, name).await;
            let ok = t
                .status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, READY))
                .is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason));
            ok.then_some(t)
        },
    )
    .await
}

/// Waits for `lastResult` to be `result`, with the LastRunSucceeded condition to match.
async fn wait_result(
    client: &Client,
    name: &str,
    result: &str,
    timeout: Duration,
) -> CronJobTrigger {
    eventually(&format!("{name} lastResult={result}"), timeout, || async {
        let t = get_trigger(client, name).await;
        let s = t.status.as_ref()?;
        (s.last_result.as_deref() == Some(result)
            && find_condition(&s.conditions, LAST_RUN).is_some())
        .then_some(t)
    })
    .await
}

async fn pod_log(client: &Client, pod: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), NS)
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default()
}

/// The log of the function's (only) pod.
async fn function_log(client: &Client, function: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut out = String::new();
    for p in pods
        .list(&ListParams::default().labels(&format!("function={function}")))
        .await
        .unwrap()
    {
        out.push_str(&pod_log(client, p.metadata.name.as_deref().unwrap()).await);
    }
    out
}

/// Every `RECEIVED {...}` line the echo function printed.
fn received(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| l.split_once("RECEIVED ").map(|(_, j)| j))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

async fn events_for(client: &Client, name: &str) -> Vec<KubeEvent> {
    Api::<KubeEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// devcluster with the pod runner and the functions `echo` and `broken` (answering 500); the
/// folder of their worker sockets, to keep while they run.
async fn start_cluster() -> (TestCluster, tempfile::TempDir) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        ))
        .with_test_writer()
        .try_init();
    let c = TestCluster::with_pods(&["kubeless-runtime", "kubeless-cron-invoker"]).await;
    let sockets = tempfile::Builder::new()
        .prefix("cj")
        .tempdir_in("/tmp")
        .unwrap();
    deploy_function(&c.client, "echo", "echo", sockets.path()).await;
    deploy_function(&c.client, "broken", "broken", sockets.path()).await;
    (c, sockets)
}

fn check_received_payload(seen: &Value, payload: &Value) {
    assert_eq!(seen["method"], "POST", "{seen}");
    assert_eq!(seen["content_type"], "application/json", "{seen}");
    assert_eq!(
        seen["event_namespace"], "cronjobtrigger.kubeless.io",
        "{seen}"
    );
    assert_eq!(seen["event_type"], "application/json", "{seen}");
    assert!(
        seen["event_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{seen}"
    );
    let time = seen["event_time"].as_str().unwrap();
    assert!(
        kubeless_event_time(time),
        "event-time {time} is not Kubeless's format (Go's time.String() in UTC)"
    );
    // The runtime decodes a JSON body into the object it was.
    assert_eq!(&seen["data"], payload, "{seen}");
}

/// `2026-01-02 03:04:05.6789 +0000 UTC`, as Kubeless's triggers sent it.
fn kubeless_event_time(s: &str) -> bool {
    s.strip_suffix(" +0000 UTC").is_some_and(|t| {
        t.replacen(' ', "T", 1)
            .parse::<k8s_openapi::jiff::civil::DateTime>()
            .is_ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_mode_runs_jobs_on_schedule() {
    let (c, _sockets) = start_cluster().await;
    let client = c.client.clone();

    let token = CancellationToken::new();
    let metrics = kubeless_service::Metrics::new("kubeless");
    // No cluster DNS on devcluster: the invoker reads EndpointSlices with devcluster's kubeconfig.
    let cfg = BuilderConfig {
        resolver: ResolverKind::Endpointslices,
        extra_env: vec![("KUBECONFIG".into(), c.kubeconfig())],
        ..BuilderConfig::default()
    };
    let running = run(
        client.clone(),
        Settings {
            namespace: None,
            instance: None,
            cronjobs: Some(cfg),
            wake_ahead: Duration::from_secs(30),
        },
        &metrics,
        token.clone(),
    );

    let payload = json!({"msg": "hello cron", "n": 42, "list": [1, 2, 3]});
    create_trigger(
        &client,
        "echo",
        json!({"schedule": "* * * * *", "function-name": "echo", "payload": payload,
               "successfulJobsHistoryLimit": 2}),
    )
    .await;
    create_trigger(
        &client,
        "broken",
        json!({"schedule": "* * * * *", "function-name": "broken",
               "retry": {"maxAttempts": 2, "initialBackoff": "200ms"}}),
    )
    .await;
    create_trigger(
        &client,
        "typo",
        json!({"schedule": "61 * * * *", "function-name": "echo"}),
    )
    .await;
    create_trigger(
        &client,
        "early",
        json!({"schedule": "0 0 1 1 *", "function-name": "late"}),
    )
    .await;

    // The CronJob as built, read back from the API server.
    wait_ready(&client, "echo", "True", "Reconciled").await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), NS);
    let cj = cronjobs.get("trigger-echo").await.unwrap();
    let owner = &cj.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("CronJobTrigger", "echo")
    );
    let spec = cj.spec.as_ref().unwrap();
    assert_eq!(spec.schedule, "* * * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Allow"));
    assert_eq!(spec.successful_jobs_history_limit, Some(2));
    let job_spec = spec.job_template.spec.as_ref().unwrap();
    let pod_spec = job_spec.template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
    let args = pod_spec.containers[0].args.clone().unwrap();
    let sent = args
        .iter()
        .find_map(|a| a.strip_prefix("--payload="))
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(sent).unwrap(), payload);
    // 5 attempts of 10 s + 1 + 2 + 4 + 8 s backoff
    assert_eq!(job_spec.active_deadline_seconds, Some(65));

    // Invalid schedule and missing function are conditions (and Events), not crashes.
    let typo = wait_ready(&client, "typo", "False", "InvalidSchedule").await;
    assert!(
        find_condition(&typo.status.unwrap().conditions, READY)
            .unwrap()
            .message
            .as_deref()
            .unwrap()
            .contains("61 * * * *")
    );
    assert!(cronjobs.get_opt("trigger-typo").await.unwrap().is_none());
    wait_ready(&client, "early", "False", "FunctionNotFound").await;
    eventually(
        "FunctionNotFound Event",
        Duration::from_secs(10),
        || async {
            events_for(&client, "early")
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("FunctionNotFound"))
                .then_some(())
        },
    )
    .await;
    // A function created later makes the trigger Ready.
    function("late", "echo").create_function(&client).await;
    wait_ready(&client, "early", "True", "Reconciled").await;
    assert!(cronjobs.get_opt("trigger-early").await.unwrap().is_some());

    // devcluster fires at the next minute boundary: at most ~60 s, plus pod start-up.
    let echo = wait_result(&client, "echo", "Succeeded", Duration::from_secs(110)).await;
    let status = echo.status.unwrap();
    assert!(status.last_schedule_time.is_some(), "{status:?}");
    assert!(
        find_condition(&status.conditions, LAST_RUN)
            .unwrap()
            .is_true()
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let echo_jobs = jobs
        .list(&ListParams::default().labels("kubeless.io/cronjob=trigger-echo"))
        .await
        .unwrap();
    let job = echo_jobs
        .items
        .iter()
        .find(|j| {
            let scheduled = j
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(SCHEDULED_ANNOTATION));
            let complete = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                });
            scheduled && complete
        })
        .expect("a completed Job of trigger-echo");
    let job_name = job.metadata.name.clone().unwrap();
    // The invoker's outcome line, from the Job pod's log.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = pods
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("the Job's pod");
    let log = pod_log(&client, pod.metadata.name.as_deref().unwrap()).await;
    let report: Value = serde_json::from_str(log.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(report["outcome"], "succeeded", "{log}");
    assert_eq!(report["status"], 200, "{log}");
    assert_eq!(
        report["eventId"],
        job_name.as_str(),
        "event-id is the Job name"
    );
    // What the function received.
    let flog = function_log(&client, "echo").await;
    let seen = received(&flog);
    assert!(!seen.is_empty(), "the function printed nothing:\n{flog}");
    check_received_payload(&seen[0], &payload);
    assert_eq!(seen[0]["event_id"], job_name.as_str());

    // The 500 function: a failed Job, lastResult Failed, condition and Event.
    let broken = wait_result(&client, "broken", "Failed", Duration::from_secs(60)).await;
    let cond = find_condition(&broken.status.as_ref().unwrap().conditions, LAST_RUN)
        .unwrap()
        .clone();
    assert_eq!(cond.status, "False");
    assert_eq!(cond.reason.as_deref(), Some("BackoffLimitExceeded"));
    // Ready stays True: the trigger works, the function fails.
    assert!(kubeless_api::is_ready(&broken.status.unwrap().conditions));
    let failed_job = jobs
        .list(&ListParams::default().labels("kubeless.io/cronjob=trigger-broken"))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("a Job of trigger-broken");
    let failed = failed_job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
    assert!(failed, "{:?}", failed_job.status);
    let bpod = pods
        .list(&ListParams::default().labels(&format!(
            "job-name={}",
            failed_job.metadata.name.as_deref().unwrap()
        )))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("the failed Job's pod");
    let blog = pod_log(&client, bpod.metadata.name.as_deref().unwrap()).await;
    let report: Value = serde_json::from_str(blog.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(report["outcome"], "retries-exhausted", "{blog}");
    assert_eq!(report["status"], 500, "{blog}");
    assert_eq!(report["attempts"], 2, "{blog}");
    let exit = bpod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c[0].state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(exit, Some(4), "retries exhausted exits 4");
    assert!(
        function_log(&client, "broken")
            .await
            .matches("FAILING")
            .count()
            >= 2
    );
    eventually("RunFailed Event", Duration::from_secs(10), || async {
        events_for(&client, "broken")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("RunFailed"))
            .then_some(())
    })
    .await;
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(r#"kubeless_cronjob_trigger_job_results_total{result="failed"}"#),
        "{text}"
    );

    token.cancel();
    running.join().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_mode_calls_every_two_seconds() {
    let (c, _sockets) = start_cluster().await;
    let client = c.client.clone();

    let token = CancellationToken::new();
    let metrics = kubeless_service::Metrics::new("kubeless");
    let running = run(
        client.clone(),
        Settings {
            namespace: None,
            instance: None,
            cronjobs: None,
            wake_ahead: Duration::from_secs(30),
        },
        &metrics,
        token.clone(),
    );
    let payload = json!({"tick": "tock", "nested": {"ok": true}});
    create_trigger(
        &client,
        "echo",
        json!({"schedule": "*/2 * * * * *", "function-name": "echo", "payload": payload,
               "concurrencyPolicy": "Forbid"}),
    )
    .await;
    create_trigger(
        &client,
        "broken",
        json!({"schedule": "*/2 * * * * *", "function-name": "broken",
               "retry": {"maxAttempts": 1}}),
    )
    .await;
    create_trigger(
        &client,
        "typo",
        // The CRD's pattern refuses a wrong field count at apply time; a value out of range
        // passes the pattern and is the controller's to report.
        json!({"schedule": "*/2 99 * * * *", "function-name": "echo"}),
    )
    .await;
    wait_ready(&client, "echo", "True", "Reconciled").await;
    wait_ready(&client, "typo", "False", "InvalidSchedule").await;

    // Several calls within seconds, each with the payload.
    let seen = eventually("three calls of echo", Duration::from_secs(40), || async {
        let seen = received(&function_log(&client, "echo").await);
        (seen.len() >= 3).then_some(seen)
    })
    .await;
    for s in &seen {
        check_received_payload(s, &payload);
    }
    let ids: std::collections::BTreeSet<&str> = seen
        .iter()
        .map(|s| s["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), seen.len(), "one event id per scheduled time");
    let echo = wait_result(&client, "echo", "Succeeded", Duration::from_secs(10)).await;
    let st = echo.status.unwrap();
    let last = st.last_schedule_time.unwrap().0;
    assert_eq!(last.as_second() % 2, 0, "fires on even seconds: {last}");
    assert!(find_condition(&st.conditions, LAST_RUN).unwrap().is_true());
    assert!(
        kubeless_api::is_ready(&st.conditions),
        "Ready survives the scheduler's writes"
    );

    let broken = wait_result(&client, "broken", "Failed", Duration::from_secs(20)).await;
    let cond = find_condition(&broken.status.unwrap().conditions, LAST_RUN)
        .unwrap()
        .clone();
    assert_eq!(cond.status, "False");
    assert_eq!(cond.reason.as_deref(), Some("RetriesExhausted"));
    assert!(cond.message.unwrap().contains("500"));
    eventually("RunFailed Event", Duration::from_secs(10), || async {
        events_for(&client, "broken")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("RunFailed"))
            .then_some(())
    })
    .await;

    // No CronJob, no Job: everything ran in-process.
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), NS);
    assert!(
        cronjobs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(r#"kubeless_cron_scheduler_invocations_total{outcome="succeeded"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kubeless_cron_scheduler_invocations_total{outcome="retries-exhausted"}"#),
        "{text}"
    );

    // Deleting a trigger stops its calls.
    let scheduler = running.scheduler.clone().unwrap();
    Api::<CronJobTrigger>::namespaced(client.clone(), NS)
        .delete("echo", &Default::default())
        .await
        .unwrap();
    eventually("echo unscheduled", Duration::from_secs(10), || async {
        (!scheduler
            .scheduled()
            .contains(&(NS.to_string(), "echo".to_string())))
        .then_some(())
    })
    .await;
    let before = received(&function_log(&client, "echo").await).len();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = received(&function_log(&client, "echo").await).len();
    assert!(
        after <= before + 1,
        "calls went on after delete: {before} -> {after}"
    );

    drop(scheduler);
    token.cancel();
    running.join().await;
    c.shutdown().await;
}
