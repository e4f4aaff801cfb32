//! The warm pool end to end on devcluster: the function-controller binary keeps one idle pool
//! pod per runtime (`--warm-pool python3.11,nodejs20`). A Python and a Node.js function idle to
//! zero; a NATS request through the nats-trigger binary wakes each. The controller gives the
//! woken function a pool pod (Event `WarmStart`), which answers the request; once the
//! function's own pod is ready the pool pod is removed from its Service and deleted, the pool
//! starts a fresh one, and the function keeps answering from its own pod.
//!
//! Uses the binaries `cargo build --workspace --bins` left in this test's target dir and
//! nats-server (.ci/run installs it).
#![cfg(test)]

use std::time::Duration;

use integration_tests::require_bins;
use integration_tests::scale::{
    NODE, PYTHON, function, idle_pool_pods, nats_call, start_service, wait_at_zero, wait_running,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kubeless_api::{Function, NatsTrigger};
use kubeless_testkit::{NS, NatsServer, TestCluster, eventually};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn woken_functions_answer_from_the_warm_pool_then_from_their_own_pods() {
    require_bins(&["function-controller", "nats-trigger", "kubeless-runtime"]);
    let nats = NatsServer::start();
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    let _controller = start_service(
        &c,
        "function-controller",
        &[
            ("KUBELESS_WARM_POOL", "python3.11,nodejs20".into()),
            ("KUBELESS_NAMESPACE", NS.into()),
        ],
    );
    let _trigger = start_service(&c, "nats-trigger", &[("NATS_URL", nats.url.clone())]);
    let client = async_nats::connect(&nats.url)
        .await
        .unwrap_or_else(|e| panic!("connecting to NATS: {e}"));
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    let triggers: Api<NatsTrigger> = Api::namespaced(c.client.clone(), NS);
    let slices: Api<EndpointSlice> = Api::namespaced(c.client.clone(), NS);
    for (name, runtime, code) in [("py", "python3.11", PYTHON), ("node", "nodejs20", NODE)] {
        eventually(
            &format!("an idle {runtime} pool pod"),
            Duration::from_secs(90),
            || async { (!idle_pool_pods(&c.client, runtime).await.is_empty()).then_some(()) },
        )
        .await;
        let mut f = function(name, runtime, code, "3s");
        f.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("warm".into(), name.into());
        fns.create(&PostParams::default(), &f).await.unwrap();
        let subject = format!("warm.{name}");
        let t: NatsTrigger = serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"topic": subject, "functionSelector": {"matchLabels": {"warm": name}},
                     "retry": {"maxAttempts": 1}}
        }))
        .unwrap();
        triggers.create(&PostParams::default(), &t).await.unwrap();
        wait_running(&fns, name, Duration::from_secs(120)).await;
        wait_at_zero(&fns, name, Duration::from_secs(120)).await;

        // At zero and its old pod gone, so only a new pod can answer.
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
        eventually(
            &format!("{name}: no pod left"),
            Duration::from_secs(60),
            || async {
                let list = pods
                    .list(&ListParams::default().labels(&format!("function={name}")))
                    .await
                    .ok()?;
                list.items.is_empty().then_some(())
            },
        )
        .await;
        let pool_before = idle_pool_pods(&c.client, runtime).await;
        let took = nats_call(&client, &subject, "warm").await;
        println!(
            "{runtime}: zero to first answer {:.0} ms with the warm pool",
            took.as_secs_f64() * 1000.0
        );
        // The controller announced the warm start, naming the pool pod it took.
        let note = eventually(
            &format!("{name}: WarmStart Event"),
            Duration::from_secs(30),
            || async {
                kubeless_service::events::events_about(&c.client, NS, "Function", name, "WarmStart")
                    .await
                    .ok()?
                    .pop()
                    .and_then(|e| e.note)
            },
        )
        .await;
        println!("{name}: {note}");
        // The pool pod printed the event: it answered, not a pod of the function's own.
        let mut answered_by = None;
        for p in &pool_before {
            let log = pods
                .logs(p, &LogParams::default())
                .await
                .unwrap_or_default();
            if log.lines().any(|l| l.trim() == "EVENT warm") {
                answered_by = Some(p.clone());
            }
        }
        let answered_by = answered_by
            .unwrap_or_else(|| panic!("no pool pod of {pool_before:?} printed the event"));
        assert!(
            note.contains(answered_by.as_str()),
            "{note} does not name {answered_by}, the pool pod that answered"
        );
        // Once its own pod is ready the pool pod leaves the Service and is deleted; the pool
        // is refilled.
        wait_running(&fns, name, Duration::from_secs(120)).await;
        eventually(
            &format!("{name}: warm slice removed"),
            Duration::from_secs(60),
            || async {
                slices
                    .get_opt(&format!("{name}-warm"))
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
        eventually(
            &format!("{name}: used pool pod deleted"),
            Duration::from_secs(60),
            || async {
                for p in &pool_before {
                    if note.contains(p.as_str()) && pods.get_opt(p).await.ok()?.is_some() {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
        eventually(
            &format!("{runtime}: pool refilled"),
            Duration::from_secs(90),
            || async { (!idle_pool_pods(&c.client, runtime).await.is_empty()).then_some(()) },
        )
        .await;
        // The function answers from its own pod now.
        nats_call(&client, &subject, "warm").await;
    }
    c.shutdown().await;
}
