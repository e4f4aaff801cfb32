//! API-level tests: devcluster with the pod runner OFF (no pods run), the controller in-process.
//! They check the objects, status, write counts, restarts, HPA, config changes and deletion.
#![cfg(test)]

mod common;

use std::time::Duration;

use common::{Env, NS, wait_for};
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Namespace},
    events::v1::Event,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

fn python(name: &str, code: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": "hello.handler", "runtime": "python3.12",
                 "function": code, "function-content-type": "text"}
    })
}

async fn resource_versions(env: &Env, name: &str) -> Vec<String> {
    let c = &env.client;
    vec![
        Api::<ConfigMap>::namespaced(c.clone(), NS)
            .get(name)
            .await
            .unwrap()
            .resource_version()
            .unwrap(),
        Api::<Deployment>::namespaced(c.clone(), NS)
            .get(name)
            .await
            .unwrap()
            .resource_version()
            .unwrap(),
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.clone(), NS)
            .get(name)
            .await
            .unwrap()
            .resource_version()
            .unwrap(),
        env.fns()
            .get(name)
            .await
            .unwrap()
            .resource_version()
            .unwrap(),
    ]
}

/// Waits until the controller made no write for `quiet`.
async fn settle(env: &Env, quiet: Duration) {
    let mut last = env.writes.count();
    let mut since = std::time::Instant::now();
    let start = std::time::Instant::now();
    while since.elapsed() < quiet {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "controller keeps writing: {:?}",
            env.writes.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = env.writes.count();
        if now != last {
            last = now;
            since = std::time::Instant::now();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_writes_restart_hpa_and_delete() {
    let mut env = Env::start(false).await;
    env.start_controller().await;
    env.create(python(
        "hello",
        "def handler(event, context):\n    return 'v1'\n",
    ))
    .await;
    wait_for("the three children", Duration::from_secs(10), || async {
        (env.children("hello").await.len() == 3).then_some(())
    })
    .await;
    let f = env
        .wait_condition("hello", "Progressing", Duration::from_secs(10), |c| {
            c.reason.as_deref() == Some("Progressing")
        })
        .await;
    assert!(f.finalizers().iter().any(|x| x == "kubeless.io/function"));
    let status = f.status.unwrap();
    assert_eq!(status.observed_generation, f.metadata.generation);
    assert_eq!(
        status.url.as_deref(),
        Some("http://hello.default.svc.cluster.local:8080")
    );
    let dep = Api::<Deployment>::namespaced(env.client.clone(), NS)
        .get("hello")
        .await
        .unwrap();
    assert_eq!(dep.labels()["created-by"], "kubeless");
    assert_eq!(dep.owner_references()[0].kind, "Function");
    let managers: Vec<_> = dep
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    eprintln!("managers of the Deployment: {managers:?}");

    // A change that is not in the spec (an annotation) reconciles but writes nothing.
    settle(&env, Duration::from_secs(1)).await;
    env.writes.reset();
    env.fns()
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(env.writes.count(), 0, "writes: {:?}", env.writes.log());

    // A restarted controller writes nothing and changes nothing.
    let before = resource_versions(&env, "hello").await;
    env.stop_controller().await;
    env.writes.reset();
    env.start_controller().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        env.writes.count(),
        0,
        "writes after restart: {:?}",
        env.writes.log()
    );
    assert_eq!(resource_versions(&env, "hello").await, before);

    // New code: new ConfigMap data and a new pod template (the Deployment rolls).
    let old_template = dep.spec.as_ref().unwrap().template.clone();
    env.fns()
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"function": "def handler(event, context):\n    return 'v2'\n"}}),
            ),
        )
        .await
        .unwrap();
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    wait_for(
        "the Deployment to roll",
        Duration::from_secs(10),
        || async {
            let d = deps.get("hello").await.unwrap();
            (d.spec.unwrap().template != old_template).then_some(())
        },
    )
    .await;
    let cm = Api::<ConfigMap>::namespaced(env.client.clone(), NS)
        .get("hello")
        .await
        .unwrap();
    assert!(cm.data.unwrap()["hello.py"].contains("v2"));

    // HPA appears when asked for and goes away when the field is removed.
    env.fns()
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"horizontalPodAutoscaler": {"spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hello"},
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 70}}]}}}})),
        )
        .await
        .unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(env.client.clone(), NS);
    let hpa = wait_for("the HPA", Duration::from_secs(10), || async {
        hpas.get_opt("hello").await.unwrap()
    })
    .await;
    assert_eq!(hpa.spec.unwrap().max_replicas, 4);
    env.fns()
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"horizontalPodAutoscaler": null}})),
        )
        .await
        .unwrap();
    wait_for("the HPA to be removed", Duration::from_secs(10), || async {
        hpas.get_opt("hello").await.unwrap().is_none().then_some(())
    })
    .await;

    // Deletion removes every child and then the Function itself.
    env.fns()
        .delete("hello", &Default::default())
        .await
        .unwrap();
    wait_for(
        "every child and the Function to go",
        Duration::from_secs(15),
        || async {
            let gone = env.children("hello").await.is_empty()
                && env.fns().get_opt("hello").await.unwrap().is_none();
            gone.then_some(())
        },
    )
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runtime_is_a_condition_and_an_event() {
    let mut env = Env::start(false).await;
    env.start_controller().await;
    let mut f = python("odd", "x");
    f["spec"]["runtime"] = json!("cobol85");
    env.create(f).await;
    let f = env
        .wait_condition("odd", "UnknownRuntime", Duration::from_secs(10), |c| {
            c.reason.as_deref() == Some("UnknownRuntime") && !c.is_true()
        })
        .await;
    let msg = kubeless_api::find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(
        msg.contains("cobol85") && msg.contains("python3.12"),
        "{msg}"
    );
    assert!(env.children("odd").await.is_empty());
    let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
    wait_for("a Warning Event", Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("UnknownRuntime")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("odd")
            })
            .then_some(())
    })
    .await;
    // Fixing the runtime recovers (the controller did not crash).
    env.fns()
        .patch(
            "odd",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runtime": "python3.11"}})),
        )
        .await
        .unwrap();
    env.wait_condition("odd", "Progressing", Duration::from_secs(10), |c| {
        c.reason.as_deref() == Some("Progressing")
    })
    .await;
    assert_eq!(env.children("odd").await.len(), 3);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_changes_apply_without_restart() {
    let mut env = Env::start(false).await;
    let nss: Api<Namespace> = Api::all(env.client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "kubeless"}})).unwrap(),
    )
    .await
    .unwrap();
    env.start_controller().await;
    env.create(python("cfg", "def handler(e, c):\n    return 1\n"))
        .await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    let image = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    };
    let first = wait_for("the Deployment", Duration::from_secs(10), || async {
        deps.get_opt("cfg").await.unwrap()
    })
    .await;
    assert_eq!(image(first), "kubeless-rs/runtime-python:3.12");
    let catalogue = json!([{"ID": "python", "depName": "requirements.txt", "fileNameSuffix": ".py",
        "versions": [{"name": "py312", "version": "3.12", "runtimeImage": [
            {"phase": "installation", "image": "example/py:3.12-custom"},
            {"phase": "runtime", "image": "example/py:3.12-custom"}]}]}]);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kubeless-config", "namespace": "kubeless"},
        "data": {"runtime-images": catalogue.to_string(),
                 "deployment": "{\"spec\": {\"template\": {\"spec\": {\"nodeSelector\": {\"pool\": \"functions\"}}}}}"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(env.client.clone(), "kubeless")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let updated = wait_for("the new runtime image", Duration::from_secs(10), || async {
        let d = deps.get("cfg").await.unwrap();
        (image(d.clone()) == "example/py:3.12-custom").then_some(d)
    })
    .await;
    let pod = updated.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.node_selector.unwrap()["pool"], "functions");
    env.shutdown().await;
}
