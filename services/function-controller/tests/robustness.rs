//! Robustness regression tests (issues 16, 19, 20), API level (devcluster without the pod
//! runner, the controller in-process):
//! - a Function that does not deserialize costs only itself (guarded watch) and is marked
//!   InvalidSpec, and deleting it still cleans up its children and its finalizer;
//! - a child object the API server refuses becomes `Ready=False` with the server's message and
//!   a Warning Event, and the retries back off exponentially instead of every 5 s.
#![cfg(test)]

mod common;

use std::time::{Duration, Instant};

use common::{Env, NS, wait_for};
use k8s_openapi::api::{apps::v1::Deployment, events::v1::Event};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use kubeless_api::Function;
use serde_json::json;

fn python(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": "hello.handler", "runtime": "python3.12",
                 "function": "def handler(e, c):\n    return 'hi'\n"}
    })
}

fn dynamic_fns(env: &Env) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), NS, &ApiResource::erase::<Function>(&()))
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

/// Kubeless 1.0's Function CRD had no schema, so clusters migrating from it hold Functions our
/// schema would refuse and a real API server keeps serving them. The test serves the Function
/// CRD with an open `spec` and without our CEL rules (the name rule among them), which is that
/// situation, however strict the schema becomes.
async fn open_function_schema(env: &Env) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let mut crd = serde_json::to_value(crds.get("functions.kubeless.io").await.unwrap()).unwrap();
    for v in crd["spec"]["versions"].as_array_mut().unwrap() {
        v["schema"]["openAPIV3Schema"]["properties"]["spec"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        if let Some(schema) = v["schema"]["openAPIV3Schema"].as_object_mut() {
            schema.remove("x-kubernetes-validations");
        }
    }
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace("functions.kubeless.io", &PostParams::default(), &crd)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_function_costs_only_itself() {
    let mut env = Env::start(false).await;
    open_function_schema(&env).await;
    // `timeout` as a number: Kubeless's schema-less CRD let it in, our type holds a string.
    let mut malformed = python("bad");
    malformed["spec"]["timeout"] = json!(180);
    assert!(
        serde_json::from_value::<Function>(malformed.clone()).is_err(),
        "the object must not deserialize, or the test proves nothing"
    );
    let obj: DynamicObject = serde_json::from_value(malformed).unwrap();
    dynamic_fns(&env)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    env.create(python("good")).await;
    env.start_controller().await;

    // The valid Function is reconciled as if the bad one were not there.
    env.wait_condition("good", "Progressing", Duration::from_secs(20), |c| {
        c.reason.as_deref() == Some("Progressing")
    })
    .await;
    Api::<Deployment>::namespaced(env.client.clone(), NS)
        .get("good")
        .await
        .unwrap();
    // The malformed one is marked, with the deserialization message, and a Warning Event.
    let cond = wait_for("InvalidSpec on bad", Duration::from_secs(20), || async {
        let f = dynamic_fns(&env).get("bad").await.ok()?;
        let conds = f.data["status"]["conditions"].as_array()?.clone();
        conds
            .into_iter()
            .find(|c| c["type"] == "Ready" && c["reason"] == "InvalidSpec")
    })
    .await;
    assert_eq!(cond["status"], "False");
    assert!(cond["message"].as_str().unwrap().contains("180"), "{cond}");
    wait_for("an InvalidSpec Event", Duration::from_secs(20), || async {
        let e = events_about(&env, "bad", "InvalidSpec").await;
        (!e.is_empty()).then_some(())
    })
    .await;
    assert!(env.children("bad").await.is_empty());

    // A Function that turns malformed while it has children and our finalizer: deleting it
    // still removes the children and the finalizer, so it does not hang in deletion.
    env.wait_condition("good", "Progressing", Duration::from_secs(20), |c| {
        c.reason.as_deref() == Some("Progressing")
    })
    .await;
    dynamic_fns(&env)
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"timeout": 99}})),
        )
        .await
        .unwrap();
    wait_for(
        "good turns InvalidSpec",
        Duration::from_secs(20),
        || async {
            let f = dynamic_fns(&env).get("good").await.ok()?;
            (f.data["status"]["conditions"][0]["reason"] == "InvalidSpec").then_some(())
        },
    )
    .await;
    dynamic_fns(&env)
        .delete("good", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "good and its children gone",
        Duration::from_secs(20),
        || async {
            let gone = dynamic_fns(&env).get_opt("good").await.unwrap().is_none();
            (gone && env.children("good").await.is_empty()).then_some(())
        },
    )
    .await;
    env.stop_controller().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_child_is_reported_and_retried_with_backoff() {
    let mut env = Env::start(false).await;
    // Our schema refuses this name at apply time now; a Function stored under Kubeless 1.0's
    // schema-less CRD can still carry it.
    open_function_schema(&env).await;
    // Dots are fine in a Function name but not in a Service name (a DNS label): the API server
    // refuses the Service with 422, as a real one does.
    env.create(python("refused.fn")).await;
    env.start_controller().await;
    let f = env
        .wait_condition("refused.fn", "ApplyFailed", Duration::from_secs(20), |c| {
            c.reason.as_deref() == Some("ApplyFailed")
        })
        .await;
    let cond = kubeless_api::find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert!(!cond.is_true());
    let msg = cond.message.unwrap();
    // The first child the server refuses is named in the message with its own 422 text (the
    // Deployment's container name or the Service's name: both carry the dot).
    assert!(
        msg.contains("422") && msg.contains("is invalid") && msg.contains("refused.fn"),
        "the server's own message: {msg}"
    );
    wait_for("an ApplyFailed Event", Duration::from_secs(20), || async {
        let e = events_about(&env, "refused.fn", "ApplyFailed").await;
        (!e.is_empty()).then_some(())
    })
    .await;

    // Retries of the refused child over a window: 1 s, 2 s, 4 s, 8 s apart, not every 5 s. The
    // child the server refuses first is the Deployment (container name) or, when the Deployment
    // is written after it, the Service: count the writes of whichever one is refused.
    let window = Duration::from_secs(17);
    let start = Instant::now();
    tokio::time::sleep(window).await;
    let log = env.writes.timed_log();
    let writes_of = |path: &str| -> Vec<Instant> {
        log.iter()
            .filter(|(_, line)| line.starts_with("PATCH") && line.contains(path))
            .map(|(t, _)| *t)
            .collect()
    };
    let refused = if msg.contains("Deployment") {
        "/deployments/refused.fn"
    } else {
        "/services/refused.fn"
    };
    let tries = writes_of(refused);
    let gaps: Vec<f64> = tries
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    eprintln!(
        "refused child ({refused}): {} tries in {:.0?} from the first; gaps {gaps:.2?}",
        tries.len(),
        start.elapsed() + (start - tries[0])
    );
    assert!(tries.len() >= 4, "it keeps retrying: {gaps:?}");
    assert!(
        tries.len() <= 7,
        "no fixed fast retry: {} tries, gaps {gaps:?}",
        tries.len()
    );
    for w in gaps.windows(2) {
        assert!(
            w[1] > w[0] * 1.5,
            "each wait about doubles the previous one: {gaps:?}"
        );
    }
    assert!(
        gaps.last().unwrap() >= &3.5,
        "the waits grow past the old fixed 5 s pace: {gaps:?}"
    );
    env.stop_controller().await;
    env.shutdown().await;
}
