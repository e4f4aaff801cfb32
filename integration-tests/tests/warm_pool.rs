//! The warm pool end to end on devcluster: the function-controller binary keeps one idle pool
//! pod per runtime (`--warm-pool python3.11,nodejs20`). A Python and a Node.js function idle to
//! zero; a NATS request through the nats-trigger binary wakes each, then (at zero again) an HTTP
//! request through the http-trigger-controller's gateway. The controller gives the
//! woken function a pool pod (Event `WarmStart`), which answers the request; once the
//! function's own pod is ready the pool pod is removed from its Service and deleted, the pool
//! starts a fresh one, and the function keeps answering from its own pod.
//!
//! Uses the binaries `cargo build --workspace --bins` left in this test's target dir and
//! nats-server (.ci/run installs it).
#![cfg(test)]

use std::time::{Duration, Instant};

use integration_tests::require_bins;
use integration_tests::scale::{
    NODE, PYTHON, function, idle_pool_pods, nats_call, start_gateway, start_service, wait_at_zero,
    wait_gone, wait_running,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kubeless_api::{Function, HttpTrigger, NatsTrigger};
use kubeless_testkit::{NS, NatsServer, TestCluster, eventually};
use serde_json::json;

/// A POST of `body` through the gateway to `name`'s HTTPTrigger, answered `ok`; how long it
/// took. The routes load in the background: a 404 before them never reached a function and is
/// sent again.
async fn gateway_call(gateway: &str, name: &str, body: &'static str) -> Duration {
    let http = reqwest::Client::new();
    let sent = Instant::now();
    loop {
        let t = Instant::now();
        let r = http
            .post(format!("http://{gateway}/{name}"))
            .header("host", format!("{name}.example.com"))
            .body(body)
            .send()
            .await;
        match r {
            Ok(r) if r.status().as_u16() == 404 && sent.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(r) => {
                let took = t.elapsed();
                let status = r.status().as_u16();
                assert_eq!(
                    (status, r.text().await.unwrap_or_default().as_str()),
                    (200, "ok"),
                    "{name} through the gateway"
                );
                return took;
            }
            Err(e) => panic!("{name} through the gateway: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn woken_functions_answer_from_the_warm_pool_then_from_their_own_pods() {
    require_bins(&[
        "function-controller",
        "nats-trigger",
        "http-trigger-controller",
        "kubeless-runtime",
    ]);
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
    let (_gateway, gateway_addr) = start_gateway(&c);
    let client = async_nats::connect(&nats.url)
        .await
        .unwrap_or_else(|e| panic!("connecting to NATS: {e}"));
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    let triggers: Api<NatsTrigger> = Api::namespaced(c.client.clone(), NS);
    let slices: Api<EndpointSlice> = Api::namespaced(c.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
    let https: Api<HttpTrigger> = Api::namespaced(c.client.clone(), NS);
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
        let ht: HttpTrigger = serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"function-name": name, "host-name": format!("{name}.example.com"),
                     "path": name}
        }))
        .unwrap();
        https.create(&PostParams::default(), &ht).await.unwrap();
        wait_running(&fns, name, Duration::from_secs(120)).await;
        // Woken once by a NATS request (nats-trigger), once by an HTTP request (the gateway).
        for (wakes, via, line) in [(1, "nats", "nats-warm"), (2, "http", "http-warm")] {
            wait_at_zero(&fns, name, Duration::from_secs(120)).await;
            // At zero and its old pod gone, so only a new pod can answer.
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
            let pool_before = eventually(
                &format!("an idle {runtime} pool pod"),
                Duration::from_secs(90),
                || async {
                    let idle = idle_pool_pods(&c.client, runtime).await;
                    (!idle.is_empty()).then_some(idle)
                },
            )
            .await;
            let took = match via {
                "nats" => nats_call(&client, &subject, line).await,
                _ => gateway_call(&gateway_addr, name, line).await,
            };
            println!(
                "{runtime}: zero to first answer through {via} {:.0} ms with the warm pool",
                took.as_secs_f64() * 1000.0
            );
            // The pool pod printed the event: it answered, not a pod of the function's own.
            // The print reaches the pod's log file a moment after the answer reaches us.
            let answered_by = eventually(
                &format!("{name} via {via}: a pool pod of {pool_before:?} printing the event"),
                Duration::from_secs(10),
                || async {
                    for p in &pool_before {
                        let log = pods
                            .logs(p, &LogParams::default())
                            .await
                            .unwrap_or_default();
                        if log.lines().any(|l| l.trim() == format!("EVENT {line}")) {
                            return Some(p.clone());
                        }
                    }
                    None
                },
            )
            .await;
            // The controller announced the warm start: the first Event names the pod; a
            // repeat joins its series (the Event recorder keeps one object per reason).
            let note = eventually(
                &format!("{name}: WarmStart Event number {wakes}"),
                Duration::from_secs(30),
                || async {
                    let events = kubeless_service::events::events_about(
                        &c.client,
                        NS,
                        "Function",
                        name,
                        "WarmStart",
                    )
                    .await
                    .ok()?;
                    let count: i32 = events
                        .iter()
                        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                        .sum();
                    (count >= wakes).then_some(events.first()?.note.clone()?)
                },
            )
            .await;
            if wakes == 1 {
                assert!(
                    note.contains(answered_by.as_str()),
                    "{note} does not name {answered_by}, the pool pod that answered"
                );
            }
            println!("{name}: {note}");
            // Once its own pod is ready the pool pod leaves the Service and is deleted; the
            // pool is refilled.
            wait_running(&fns, name, Duration::from_secs(120)).await;
            let what = format!("{name}: warm slice removed");
            wait_gone(
                &slices,
                &format!("{name}-warm"),
                &what,
                Duration::from_secs(60),
            )
            .await;
            let what = format!("{name}: used pool pod deleted");
            wait_gone(&pods, &answered_by, &what, Duration::from_secs(60)).await;
            eventually(
                &format!("{runtime}: pool refilled"),
                Duration::from_secs(90),
                || async { (!idle_pool_pods(&c.client, runtime).await.is_empty()).then_some(()) },
            )
            .await;
            // The function answers from its own pod now.
            nats_call(&client, &subject, "own").await;
        }
    }
    c.shutdown().await;
}
