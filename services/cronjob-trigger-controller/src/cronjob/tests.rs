use super::*;
use crate::invoker::{EVENT_NAMESPACE, InvokerArgs};
use clap::Parser;
use http::header::CONTENT_TYPE;
use kubeless_api::triggers::ConcurrencyPolicy;
use kubeless_invoke::event::{EVENT_NAMESPACE as H_NS, EVENT_TYPE as H_TYPE, event_headers};
use serde_json::json;

fn trigger(spec: serde_json::Value) -> CronJobTrigger {
    let mut t: CronJobTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1",
        "kind": "CronJobTrigger",
        "metadata": {"name": "nightly", "namespace": "team", "uid": "uid-1"},
        "spec": spec,
    }))
    .unwrap();
    t.metadata.generation = Some(1);
    t
}

fn basic() -> CronJobTrigger {
    trigger(json!({"schedule": "*/5 * * * *", "function-name": "hello"}))
}

fn function(spec: serde_json::Value) -> Function {
    serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1",
        "kind": "Function",
        "metadata": {"name": "hello", "namespace": "team"},
        "spec": spec,
    }))
    .unwrap()
}

fn hello() -> Function {
    function(
        json!({"handler": "h.hello", "runtime": "python3.11", "function": "x", "timeout": "30"}),
    )
}

fn build(t: &CronJobTrigger) -> CronJob {
    build_cronjob(t, &hello(), &BuilderConfig::default()).unwrap()
}

fn pod(cj: &CronJob) -> &PodSpec {
    cj.spec
        .as_ref()
        .unwrap()
        .job_template
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

fn job(cj: &CronJob) -> &JobSpec {
    cj.spec
        .as_ref()
        .unwrap()
        .job_template
        .spec
        .as_ref()
        .unwrap()
}

/// The container's args parsed back by the invoker's own command line.
fn invoker_of(cj: &CronJob) -> InvokerArgs {
    let mut argv = vec!["kubeless-cron-invoker".to_string()];
    argv.extend(pod(cj).containers[0].args.clone().unwrap());
    InvokerArgs::try_parse_from(argv).unwrap()
}

#[test]
fn name_owner_labels_and_schedule() {
    let cj = build(&basic());
    assert_eq!(cj.metadata.name.as_deref(), Some("trigger-nightly"));
    assert_eq!(cj.metadata.namespace.as_deref(), Some("team"));
    let owners = cj.metadata.owner_references.as_ref().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "CronJobTrigger");
    assert_eq!(owners[0].api_version, "kubeless.io/v1beta1");
    assert_eq!(owners[0].name, "nightly");
    assert_eq!(owners[0].uid, "uid-1");
    assert_eq!(owners[0].controller, Some(true));
    let spec = cj.spec.as_ref().unwrap();
    assert_eq!(spec.schedule, "*/5 * * * *");
    let labels = cj.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["created-by"], "kubeless");
    assert_eq!(labels["function"], "hello");
    // Jobs and Pods carry the CronJob label the controller finds them by.
    let job_labels = spec
        .job_template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(job_labels[CRONJOB_LABEL], "trigger-nightly");
    let pod_labels = job(&cj)
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(pod_labels[CRONJOB_LABEL], "trigger-nightly");
    // The function's Service selects `function=<name>`: the invoker must not match it.
    assert!(!pod_labels.contains_key("function"));
    assert!(!job_labels.contains_key("function"));
}

#[test]
fn trigger_named_after_its_function_keeps_the_kubeless_name() {
    let mut t = basic();
    t.metadata.name = Some("hello".into());
    assert_eq!(build(&t).metadata.name.as_deref(), Some("trigger-hello"));
}

#[test]
fn long_names_are_cut_with_a_hash() {
    let long = "a".repeat(80);
    let other = format!("{}b", "a".repeat(79));
    let n1 = cronjob_name(&long);
    let n2 = cronjob_name(&other);
    assert!(n1.len() <= MAX_CRONJOB_NAME, "{n1}");
    assert!(n1.starts_with("trigger-aaaa"));
    assert_ne!(n1, n2);
    assert_eq!(n1, cronjob_name(&long), "deterministic");
    assert_eq!(cronjob_name("x"), "trigger-x");
}

#[test]
fn defaults_allow_history_restart_never_and_small_resources() {
    let cj = build(&basic());
    let spec = cj.spec.as_ref().unwrap();
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Allow"));
    assert_eq!(spec.successful_jobs_history_limit, Some(3));
    assert_eq!(spec.failed_jobs_history_limit, Some(1));
    let p = pod(&cj);
    assert_eq!(p.restart_policy.as_deref(), Some("Never"));
    assert_eq!(p.automount_service_account_token, Some(false));
    assert_eq!(job(&cj).backoff_limit, Some(0));
    let c = &p.containers[0];
    assert_eq!(c.name, "invoker");
    assert_eq!(
        c.image.as_deref(),
        Some(format!("kubeless-rs/cron-invoker:{}", env!("CARGO_PKG_VERSION")).as_str())
    );
    let r = c.resources.as_ref().unwrap();
    assert_eq!(r.requests.as_ref().unwrap()["memory"].0, "16Mi");
    assert_eq!(r.requests.as_ref().unwrap()["cpu"].0, "10m");
    assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "64Mi");
    assert_eq!(r.limits.as_ref().unwrap()["cpu"].0, "100m");
    // event-id comes from the Job name
    let env = c.env.as_ref().unwrap();
    let id = env.iter().find(|e| e.name == EVENT_ID_ENV).unwrap();
    assert_eq!(
        id.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "metadata.labels['job-name']"
    );
}

#[test]
fn overrides_of_concurrency_and_history() {
    let t = trigger(json!({
        "schedule": "0 * * * *", "function-name": "hello",
        "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": 0, "failedJobsHistoryLimit": 5,
    }));
    assert_eq!(t.spec.concurrency(), ConcurrencyPolicy::Forbid);
    let cj = build(&t);
    let spec = cj.spec.as_ref().unwrap();
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(spec.successful_jobs_history_limit, Some(0));
    assert_eq!(spec.failed_jobs_history_limit, Some(5));
    let t = trigger(json!({"schedule": "0 * * * *", "function-name": "hello",
                           "concurrencyPolicy": "Replace"}));
    assert_eq!(
        build(&t).spec.unwrap().concurrency_policy.as_deref(),
        Some("Replace")
    );
}

#[test]
fn payload_is_posted_as_json() {
    let t = trigger(json!({
        "schedule": "* * * * *", "function-name": "hello",
        "payload": {"msg": "hi", "n": [1, 2]},
    }));
    let args = invoker_of(&build(&t));
    let sent: serde_json::Value = serde_json::from_str(&args.payload).unwrap();
    assert_eq!(sent, json!({"msg": "hi", "n": [1, 2]}));
    let call = args.call().unwrap();
    assert!(call.event.body.is_some(), "a payload means POST");
    let h = event_headers(&call.event, "id", std::time::SystemTime::now().into()).unwrap();
    assert_eq!(h[CONTENT_TYPE], "application/json");
    assert_eq!(h[H_TYPE], "application/json");
    assert_eq!(h[H_NS], EVENT_NAMESPACE);
    assert_eq!(EVENT_NAMESPACE, "cronjobtrigger.kubeless.io");
}

#[test]
fn scalar_payloads_are_json_too() {
    let t = trigger(json!({"schedule": "* * * * *", "function-name": "hello", "payload": "text"}));
    let call = invoker_of(&build(&t)).call().unwrap();
    assert_eq!(call.event.body.as_deref(), Some(&b"\"text\""[..]));
    let h = event_headers(&call.event, "id", std::time::SystemTime::now().into()).unwrap();
    assert_eq!(h[CONTENT_TYPE], "application/json");
}

#[test]
fn no_payload_or_null_is_a_get() {
    for t in [
        basic(),
        trigger(json!({"schedule": "* * * * *", "function-name": "hello", "payload": null})),
    ] {
        let args = invoker_of(&build(&t));
        assert_eq!(args.payload, "");
        let call = args.call().unwrap();
        assert!(call.event.body.is_none(), "no payload means GET");
        let h = event_headers(&call.event, "id", std::time::SystemTime::now().into()).unwrap();
        assert!(!h.contains_key(CONTENT_TYPE));
        assert_eq!(h[H_NS], "cronjobtrigger.kubeless.io");
        assert_eq!(h[H_TYPE], "application/json");
    }
}

#[test]
fn target_retry_and_resolver_reach_the_invoker() {
    let t = trigger(json!({
        "schedule": "* * * * *", "function-name": "hello",
        "retry": {"maxAttempts": 3, "initialBackoff": "500ms", "maxBackoff": "4s", "multiplier": 3.0},
    }));
    let f = function(json!({
        "handler": "h.hello", "runtime": "python3.11", "function": "x", "timeout": "12",
        "service": {"ports": [{"name": "web", "port": 9000, "targetPort": 8080}]},
    }));
    let cfg = BuilderConfig {
        resolver: ResolverKind::Endpointslices,
        service_account: Some("cron-invoker".into()),
        extra_env: vec![("KUBECONFIG".into(), "/tmp/kc".into())],
        invoker_image: "registry.example/cron-invoker:9".into(),
        image_pull_policy: Some("IfNotPresent".into()),
        ..BuilderConfig::default()
    };
    let cj = build_cronjob(&t, &f, &cfg).unwrap();
    let a = invoker_of(&cj);
    assert_eq!(a.namespace, "team");
    assert_eq!(a.function, "hello");
    assert_eq!(a.port, 9000);
    assert_eq!(a.port_name, "web");
    assert_eq!(a.timeout, 12);
    assert_eq!(a.resolver, ResolverKind::Endpointslices);
    let call = a.call().unwrap();
    assert_eq!(call.retry.max_attempts, 3);
    assert_eq!(call.retry.initial_backoff, Duration::from_millis(500));
    assert_eq!(call.retry.max_backoff, Duration::from_secs(4));
    assert_eq!(call.retry.multiplier, 3.0);
    let p = pod(&cj);
    assert_eq!(p.service_account_name.as_deref(), Some("cron-invoker"));
    assert_eq!(p.automount_service_account_token, Some(true));
    let c = &p.containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example/cron-invoker:9"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let env = c.env.as_ref().unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "KUBECONFIG" && e.value.as_deref() == Some("/tmp/kc"))
    );
    // attempts * timeout + backoffs (0.5 s, 1.5 s) = 36 + 2
    assert_eq!(job(&cj).active_deadline_seconds, Some(38));
}

#[test]
fn deadline_is_the_timeout_without_retries() {
    let t = trigger(json!({"schedule": "* * * * *", "function-name": "hello",
                           "retry": {"maxAttempts": 1}}));
    assert_eq!(job(&build(&t)).active_deadline_seconds, Some(30));
    // default policy: 5 attempts of 30 s + 1 + 2 + 4 + 8 s of backoff
    assert_eq!(job(&build(&basic())).active_deadline_seconds, Some(165));
    // an unset timeout is Kubeless's 180 s
    let f = function(json!({"handler": "h.hello", "runtime": "python3.11", "function": "x"}));
    let cj = build_cronjob(&t, &f, &BuilderConfig::default()).unwrap();
    assert_eq!(job(&cj).active_deadline_seconds, Some(180));
    let a = invoker_of(&cj);
    assert_eq!(a.timeout, 180);
    // default Service: port 8080 named http-function-port
    assert_eq!(a.port, 8080);
    assert_eq!(a.port_name, "http-function-port");
}

#[test]
fn dns_resolver_gets_the_cluster_domain() {
    let cfg = BuilderConfig {
        cluster_domain: "corp.local".into(),
        ..BuilderConfig::default()
    };
    let cj = build_cronjob(&basic(), &hello(), &cfg).unwrap();
    let a = invoker_of(&cj);
    assert_eq!(a.resolver, ResolverKind::Dns);
    assert_eq!(a.cluster_domain, "corp.local");
}

#[test]
fn invalid_inputs_are_errors_with_reasons() {
    let bad = trigger(json!({"schedule": "every minute", "function-name": "hello"}));
    let e = build_cronjob(&bad, &hello(), &BuilderConfig::default()).unwrap_err();
    assert_eq!(e.reason(), "InvalidSchedule");
    let secs = trigger(json!({"schedule": "*/2 * * * * *", "function-name": "hello"}));
    let e = build_cronjob(&secs, &hello(), &BuilderConfig::default()).unwrap_err();
    assert_eq!(e.reason(), "InvalidSchedule");
    assert!(e.to_string().contains("--scheduler-mode"), "{e}");
    let retry = trigger(json!({"schedule": "* * * * *", "function-name": "hello",
                               "retry": {"maxAttempts": 0}}));
    let e = build_cronjob(&retry, &hello(), &BuilderConfig::default()).unwrap_err();
    assert_eq!(e.reason(), "InvalidSpec");
    let f = function(
        json!({"handler": "h.hello", "runtime": "python3.11", "function": "x",
                            "timeout": "soon"}),
    );
    let e = build_cronjob(&basic(), &f, &BuilderConfig::default()).unwrap_err();
    assert!(matches!(e, BuildError::Function { .. }));
    let mut unsaved = basic();
    unsaved.metadata.uid = None;
    assert_eq!(
        build_cronjob(&unsaved, &hello(), &BuilderConfig::default()).unwrap_err(),
        BuildError::Unsaved
    );
}

use kubeless_service::pod_security::restricted_violations;

#[test]
fn invoker_pod_passes_pod_security_restricted() {
    let cj = build(&basic());
    let p = pod(&cj);
    assert_eq!(restricted_violations(p), Vec::<String>::new());
    let sc = p.containers[0].security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.run_as_group, Some(65532));
    let psc = p.security_context.as_ref().unwrap();
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    // The checker itself catches a container that allows escalation.
    let mut broken = p.clone();
    broken.containers[0]
        .security_context
        .as_mut()
        .unwrap()
        .allow_privilege_escalation = None;
    assert_eq!(
        restricted_violations(&broken),
        vec!["invoker: allowPrivilegeEscalation".to_string()]
    );
}
