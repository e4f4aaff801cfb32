//! Function pods under PodSecurity `restricted`, on devcluster with the pod runner on (its
//! admission enforces the namespace's `pod-security.kubernetes.io/enforce` label as a real API
//! server does): template securityContexts merged with the restricted defaults, refused pods
//! shown on the Function, the install's pod template policy, and children completed after a
//! refusal.
#![cfg(test)]

mod common;

use std::time::Duration;

use common::{Env, NS, wait_for};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Pod, Service, ServiceAccount},
    events::v1::Event,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use kubeless_api::conditions::reasons;
use serde_json::{Value, json};

fn function(name: &str, extra: Value) -> Value {
    let mut f = json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": "hello.handler", "runtime": "python3.11",
                 "function": "def handler(event, context):\n    return 'hello'\n",
                 "function-content-type": "text", "timeout": "30"}
    });
    function_controller::builders::merge_json(&mut f["spec"], &extra, "");
    f
}

fn template(pod: Value) -> Value {
    json!({"deployment": {"spec": {"template": {"spec": pod}}}})
}

async fn restricted_namespace(env: &Env) {
    Api::<Namespace>::all(env.client.clone())
        .patch(
            NS,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}})),
        )
        .await
        .unwrap();
}

async fn events_about(env: &Env, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

async fn running_pod(env: &Env, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    wait_for("a Running pod", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels(&format!("function={name}")))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        }
    })
    .await
}

/// A template that sets only `runAsUser: 1000` in its container keeps every other restricted
/// default, so PodSecurity `restricted` admits the pod and it runs; one whose template is
/// refused by PodSecurity (an `Unconfined` seccomp profile, which the install's policy does
/// not judge) shows `PodsRefused` with the server's message and one Warning Event, and
/// recovers when the template is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_namespace_merges_defaults_and_reports_refused_pods() {
    let mut env = Env::start(true).await;
    restricted_namespace(&env).await;
    env.start_controller().await;

    env.create(function(
        "uid1000",
        template(json!({"containers": [{"name": "uid1000",
            "securityContext": {"runAsUser": 1000}}]})),
    ))
    .await;
    env.wait_ready("uid1000").await;
    let pod = running_pod(&env, "uid1000").await;
    let sc = pod.spec.unwrap().containers[0]
        .security_context
        .clone()
        .unwrap();
    assert_eq!(sc.run_as_user, Some(1000));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    env.wait_answer("uid1000", "hello", Duration::from_secs(20))
        .await;

    env.create(function(
        "unconfined",
        template(json!({"containers": [{"name": "unconfined",
            "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]})),
    ))
    .await;
    let f = env
        .wait_condition(
            "unconfined",
            "Ready=False PodsRefused",
            Duration::from_secs(60),
            |c| c.reason.as_deref() == Some(reasons::PODS_REFUSED),
        )
        .await;
    let message = f.status.unwrap().conditions[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(
        message.contains("FailedCreate")
            && message.contains("PodSecurity")
            && message.contains("seccompProfile"),
        "{message}"
    );
    let dep: Deployment = Api::namespaced(env.client.clone(), NS)
        .get("unconfined")
        .await
        .unwrap();
    assert!(
        dep.status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "ReplicaFailure"
                && c.status == "True"
                && c.reason.as_deref() == Some("FailedCreate")),
        "the Deployment carries ReplicaFailure as on a real cluster"
    );
    wait_for("the PodsRefused Event", Duration::from_secs(10), || async {
        (!events_about(&env, "unconfined", reasons::PODS_REFUSED)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    // The runner retries the create; the Event is published once per change, not per retry.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let events = events_about(&env, "unconfined", reasons::PODS_REFUSED).await;
    assert_eq!(
        events
            .iter()
            .map(|e| e.deprecated_count.unwrap_or(1))
            .sum::<i32>(),
        1,
        "{events:?}"
    );

    env.fns()
        .patch(
            "unconfined",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"deployment": {"spec": {"template": {"spec": {
                "containers": [{"name": "unconfined",
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]}}}}}}),
            ),
        )
        .await
        .unwrap();
    env.wait_ready("unconfined").await;
    env.shutdown().await;
}

/// The install's pod template policy: by default a template asking for the node's network is
/// refused (`InvalidSpec` naming the field, a Warning Event, no children); a ServiceAccount the
/// install allows goes through and its pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_policy_refuses_host_access_and_allows_what_the_install_allows() {
    let mut env = Env::start(true).await;
    restricted_namespace(&env).await;
    env.start_controller_with(|s| {
        s.template_policy.allowed_service_accounts = vec!["fn-runner".into()];
    })
    .await;

    env.create(function("hostnet", template(json!({"hostNetwork": true}))))
        .await;
    let f = env
        .wait_condition(
            "hostnet",
            "Ready=False InvalidSpec",
            Duration::from_secs(30),
            |c| c.reason.as_deref() == Some(reasons::INVALID_SPEC),
        )
        .await;
    let message = f.status.unwrap().conditions[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(
        message.contains("spec.deployment.spec.template.spec.hostNetwork")
            && message.contains("templatePolicy.allowHostNetwork"),
        "{message}"
    );
    wait_for("the InvalidSpec Event", Duration::from_secs(10), || async {
        (!events_about(&env, "hostnet", reasons::INVALID_SPEC)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(
        Api::<Deployment>::namespaced(env.client.clone(), NS)
            .get_opt("hostnet")
            .await
            .unwrap()
            .is_none(),
        "a refused template makes no Deployment"
    );

    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "fn-runner", "namespace": NS}}))
            .unwrap();
    Api::<ServiceAccount>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    env.create(function(
        "withsa",
        template(json!({"serviceAccountName": "fn-runner"})),
    ))
    .await;
    env.wait_ready("withsa").await;
    let pod = running_pod(&env, "withsa").await;
    assert_eq!(
        pod.spec.unwrap().service_account_name.as_deref(),
        Some("fn-runner")
    );
    env.shutdown().await;
}

/// A child the API server refuses (here the Service: two ports without names, which the
/// Function's schema lets through and a Service may not have)
/// leaves the Function `ApplyFailed` naming that child and no pods running behind it; fixing
/// the Function completes every child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_child_is_named_and_completed_after_the_fix() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(function(
        "badsvc",
        json!({"service": {"ports": [
            {"port": 8080, "targetPort": 8080, "protocol": "TCP"},
            {"port": 9090, "targetPort": 9090, "protocol": "TCP"}]}}),
    ))
    .await;
    let f = env
        .wait_condition(
            "badsvc",
            "Ready=False ApplyFailed",
            Duration::from_secs(30),
            |c| c.reason.as_deref() == Some(reasons::APPLY_FAILED),
        )
        .await;
    let message = f.status.unwrap().conditions[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(
        message.contains("Service badsvc") && message.contains("spec.ports[0].name"),
        "{message}"
    );
    assert!(
        Api::<Deployment>::namespaced(env.client.clone(), NS)
            .get_opt("badsvc")
            .await
            .unwrap()
            .is_none(),
        "no Deployment runs pods behind a Service that does not exist"
    );
    env.fns()
        .patch(
            "badsvc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"service": {"ports": [
                {"name": "http-function-port", "port": 8080, "targetPort": 8080, "protocol": "TCP"},
                {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]}}})),
        )
        .await
        .unwrap();
    env.wait_ready("badsvc").await;
    assert!(
        Api::<Service>::namespaced(env.client.clone(), NS)
            .get_opt("badsvc")
            .await
            .unwrap()
            .is_some()
    );
    env.wait_answer("badsvc", "hello", Duration::from_secs(30))
        .await;
    env.shutdown().await;
}
