//! Scale to zero, the controller's side, end to end on devcluster with the real runtime: a
//! Python function idles to zero, a new `kubeless.io/last-activity` value (what the gateway and
//! the triggers write) wakes it and it answers again; with an HPA the replica count moves
//! through the scale subresource and the HPA stands aside at zero; a bad `scaleToZero` is
//! InvalidSpec.
#![cfg(test)]

mod common;

use std::time::{Duration, Instant};

use common::{Env, NS, wait_for, wait_for_opt};
use k8s_openapi::api::{
    apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler, core::v1::Pod,
    events::v1::Event,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use kubeless_api::{
    Function, find_condition,
    scale::{LAST_ACTIVITY, SCALED_TO_ZERO, activity_now},
};
use serde_json::{Value, json};

fn function(name: &str, extra: Value) -> Value {
    let mut f = json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": "h.handler", "runtime": "python3.11",
            "function": "def handler(event, context):\n    return 'awake'\n",
            "function-content-type": "text", "timeout": "30",
            "scaleToZero": {"enabled": true, "idleAfter": "3s"}}
    });
    if let (Some(spec), Value::Object(more)) = (f["spec"].as_object_mut(), extra) {
        spec.extend(more);
    }
    f
}

async fn spec_replicas(env: &Env, name: &str) -> Option<i32> {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    api.get(name).await.ok()?.spec?.replicas
}

async fn pods(env: &Env, name: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    api.list(&ListParams::default().labels(&format!("function={name}")))
        .await
        .map_or(usize::MAX, |l| l.items.len())
}

async fn scale_condition(env: &Env, name: &str) -> Option<(bool, String)> {
    let f: Function = env.fns().get(name).await.ok()?;
    let c = find_condition(&f.status?.conditions, SCALED_TO_ZERO)?.clone();
    Some((c.is_true(), c.reason.unwrap_or_default()))
}

async fn has_event(env: &Env, name: &str, reason: &str) -> bool {
    let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
    events
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        })
        .unwrap_or(false)
}

/// Waits for the function to reach zero: condition, Deployment, pods, Ready reason, Event.
async fn wait_at_zero(env: &Env, name: &str, hpa: bool) -> Duration {
    let t = Instant::now();
    wait_for(
        &format!("{name} ScaledToZero=True"),
        Duration::from_secs(60),
        || async { scale_condition(env, name).await.filter(|c| c.0).map(|_| ()) },
    )
    .await;
    let took = t.elapsed();
    wait_for(
        &format!("{name}'s Deployment at 0 and its pods gone"),
        Duration::from_secs(30),
        || async {
            (spec_replicas(env, name).await == Some(0) && pods(env, name).await == 0).then_some(())
        },
    )
    .await;
    let f = env.fns().get(name).await.unwrap();
    let ready = find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert!(
        ready.is_true(),
        "a function at zero still serves: {ready:?}"
    );
    assert_eq!(ready.reason.as_deref(), Some("ScaledToZero"));
    wait_for(
        &format!("{name}'s Idle Event"),
        Duration::from_secs(10),
        || async { has_event(env, name, "Idle").await.then_some(()) },
    )
    .await;
    if hpa {
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(env.client.clone(), NS);
        wait_for(
            &format!("{name}'s HPA standing aside at zero"),
            Duration::from_secs(20),
            || async {
                let h = api.get(name).await.ok()?;
                let conds = h.status?.conditions?;
                conds
                    .iter()
                    .any(|c| c.type_ == "ScalingActive" && c.status == "False")
                    .then_some(())
            },
        )
        .await;
    }
    took
}

/// Writes a new activity value, as the gateway or a trigger would, and waits for an answer.
async fn wake(env: &Env, name: &str, want_replicas: i32) -> Duration {
    let t = Instant::now();
    let patch = json!({"metadata": {"annotations": {LAST_ACTIVITY: activity_now()}}});
    env.fns()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.wait_answer(name, "awake", Duration::from_secs(60))
        .await;
    let took = t.elapsed();
    // The controller writes the condition in the reconcile that scales up; the first answer
    // can still reach the test before that write does. A function that went back to zero
    // instead stays Idle and fails here.
    let active = wait_for_opt(Duration::from_secs(10), || async {
        (scale_condition(env, name).await == Some((false, "Active".into()))).then_some(())
    })
    .await;
    if active.is_none() {
        let f = env.fns().get(name).await.unwrap();
        panic!(
            "{name} answered after the wake, but ScaledToZero is not False/Active 10 s later: {:?}",
            f.status
        );
    }
    wait_for(
        &format!("{name} at {want_replicas} replicas"),
        Duration::from_secs(20),
        || async { (spec_replicas(env, name).await == Some(want_replicas)).then_some(()) },
    )
    .await;
    assert!(has_event(env, name, "Woken").await);
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_functions_go_to_zero_and_activity_wakes_them() {
    let mut env = Env::start_with_hpa_period(true, Duration::from_secs(1)).await;
    env.start_controller().await;

    // Without an HPA: the Deployment's replicas follow the decision.
    env.create(function(
        "sleepy",
        json!({"scaleToZero": {"enabled": true, "idleAfter": "3s", "minReplicas": 2}}),
    ))
    .await;
    env.wait_ready("sleepy").await;
    assert_eq!(
        scale_condition(&env, "sleepy").await,
        Some((false, "Active".into()))
    );
    let down = wait_at_zero(&env, "sleepy", false).await;
    eprintln!("sleepy: scaled to zero {down:?} after it was ready (idleAfter 3s)");
    let up = wake(&env, "sleepy", 2).await;
    kubeless_testkit::report!("sleepy: woken, first answer {up:?} after the activity write");
    // It idles again and goes back to zero.
    wait_at_zero(&env, "sleepy", false).await;

    // With an HPA: the scale subresource moves it, the HPA stands aside at zero.
    env.create(function(
        "auto",
        json!({"horizontalPodAutoscaler": {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "auto", "namespace": NS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "auto"},
                "minReplicas": 1, "maxReplicas": 3,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]}},
            "deployment": {"spec": {"template": {"spec": {"containers": [{
                "resources": {"requests": {"cpu": "100m"}}}]}}}}}),
    ))
    .await;
    env.wait_ready("auto").await;
    wait_at_zero(&env, "auto", true).await;
    let up = wake(&env, "auto", 1).await;
    kubeless_testkit::report!("auto (HPA): woken, first answer {up:?} after the activity write");

    // Switching it off brings a function at zero back.
    wait_at_zero(&env, "sleepy", false).await;
    let off = json!({"spec": {"scaleToZero": {"enabled": false}}});
    env.fns()
        .patch("sleepy", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .unwrap();
    env.wait_answer("sleepy", "awake", Duration::from_secs(60))
        .await;
    wait_for(
        "the ScaledToZero condition removed",
        Duration::from_secs(10),
        || async {
            scale_condition(&env, "sleepy")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_scale_to_zero_is_invalid_spec() {
    let mut env = Env::start(false).await;
    // Below the schema's floor (3 s): refused at apply time, naming the field.
    let api: kube::Api<Function> = kube::Api::namespaced(env.client.clone(), NS);
    let err = api
        .create(
            &Default::default(),
            &serde_json::from_value(function(
                "short",
                json!({"scaleToZero": {"enabled": true, "idleAfter": "1s"}}),
            ))
            .unwrap(),
        )
        .await
        .expect_err("idleAfter 1s is refused by the schema");
    let text = err.to_string();
    assert!(
        text.contains("spec.scaleToZero.idleAfter") && text.contains("at least 3s"),
        "{text}"
    );
    // Above the floor but below 3 activity intervals of this install (the test controller
    // writes every second: 3 s; one with 2 s intervals needs 6 s): the controller refuses it.
    env.start_controller_with(|s| s.scale_to_zero.activity_interval = Duration::from_secs(2))
        .await;
    env.create(function(
        "bad",
        json!({"scaleToZero": {"enabled": true, "idleAfter": "5s"}}),
    ))
    .await;
    let f = env
        .wait_condition("bad", "InvalidSpec", Duration::from_secs(20), |c| {
            c.reason.as_deref() == Some("InvalidSpec")
        })
        .await;
    let ready = find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    let message = ready.message.clone().unwrap_or_default();
    assert!(
        message.contains("scaleToZero.idleAfter")
            && message.contains("3 times the activity interval (2s)")
            && message.contains("use 6s or more"),
        "{message}"
    );
    assert!(!ready.is_true());
    env.shutdown().await;
}
