//! Scale to zero under steady traffic: a function with `idleAfter: 30s`, the install's default
//! activity interval (10 s: the nats-trigger and the function-controller as the chart runs
//! them) and a steady stream of 40 NATS messages a second for 2 minutes. The function must never
//! go to zero while the stream flows (no `Idle` Event, its one pod never replaced, every message
//! printed once), and must go to zero once the stream stops (so scale to zero was on all along).
//!
//! Before the idle period had to span 3 activity intervals and the writers recorded the whole
//! interval's traffic, `idleAfter: 10s` with the same stream went to zero 11 times in 133 s.
#![cfg(test)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use integration_tests::require_bins;
use integration_tests::scale::{PYTHON, function, start_service, wait_at_zero, wait_running};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kubeless_api::{Function, NatsTrigger};
use kubeless_testkit::{NS, NatsServer, TestCluster, eventually, report, wait_ready};
use serde_json::json;

const SUBJECT: &str = "steady";
const RATE_PER_SEC: u64 = 40;
const STREAM_FOR: Duration = Duration::from_secs(120);

async fn pod_uids(client: &kube::Client) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.list(&ListParams::default().labels("function=steady"))
        .await
        .map(|l| l.items.iter().filter_map(|p| p.uid()).collect())
        .unwrap_or_default()
}

async fn idle_events(client: &kube::Client) -> usize {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(kubeless_api::scale::reasons::IDLE)
                        && e.regarding
                            .as_ref()
                            .is_some_and(|r| r.name.as_deref() == Some("steady"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_never_goes_to_zero() {
    require_bins(&["function-controller", "nats-trigger", "kubeless-runtime"]);
    let nats = NatsServer::start();
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    // The defaults an install runs with: activity written at most every 10 s.
    let interval = [("KUBELESS_ACTIVITY_INTERVAL", "10s".to_string())];
    let _controller = start_service(&c, "function-controller", &interval);
    let mut trigger_env = interval.to_vec();
    trigger_env.push(("NATS_URL", nats.url.clone()));
    let _trigger = start_service(&c, "nats-trigger", &trigger_env);

    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    fns.create(
        &PostParams::default(),
        &function("steady", "python3.11", PYTHON, "30s"),
    )
    .await
    .unwrap();
    wait_running(&fns, "steady", Duration::from_secs(180)).await;
    let nt: NatsTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "steady", "namespace": NS},
        "spec": {"topic": SUBJECT, "functionSelector": {"matchLabels": {"wake": "yes"}}}
    }))
    .unwrap();
    Api::<NatsTrigger>::namespaced(c.client.clone(), NS)
        .create(&PostParams::default(), &nt)
        .await
        .unwrap();
    wait_ready::<NatsTrigger>(&c.client, "steady").await;
    let before = pod_uids(&c.client).await;
    assert_eq!(before.len(), 1, "one pod before the stream: {before:?}");

    let publisher = async_nats::connect(&nats.url).await.unwrap();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / RATE_PER_SEC));
    let mut pods_seen = before.clone();
    while start.elapsed() < STREAM_FOR {
        tick.tick().await;
        publisher
            .publish(SUBJECT, format!("m{sent}").into())
            .await
            .unwrap();
        sent += 1;
        if sent.is_multiple_of(RATE_PER_SEC * 5) {
            pods_seen.extend(pod_uids(&c.client).await);
        }
    }
    publisher.flush().await.unwrap();
    let downs = idle_events(&c.client).await;
    pods_seen.extend(pod_uids(&c.client).await);
    report!(
        "steady stream: {sent} messages over {:?}, scale-downs {downs}, pods seen {}",
        start.elapsed(),
        pods_seen.len()
    );
    assert_eq!(downs, 0, "the function went to zero under steady traffic");
    assert_eq!(pods_seen, before, "the function's pod was replaced");

    // Every message reached the one pod, once.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
    let pod = before.iter().next().cloned().unwrap_or_default();
    let name = pods
        .list(&ListParams::default().labels("function=steady"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.uid().as_deref() == Some(pod.as_str()))
        .map(|p| p.name_any())
        .unwrap();
    let printed = eventually("every message printed", Duration::from_secs(60), || async {
        let log = pods.logs(&name, &LogParams::default()).await.ok()?;
        let lines: Vec<String> = log
            .lines()
            .filter_map(|l| l.split("EVENT ").nth(1).map(|d| d.trim().to_string()))
            .collect();
        (lines.len() as u64 >= sent).then_some(lines)
    })
    .await;
    let distinct: BTreeSet<&String> = printed.iter().collect();
    assert_eq!(distinct.len() as u64, sent, "each message printed");
    assert_eq!(printed.len() as u64, sent, "each message printed once");

    // Stream stopped: the function does go to zero (30 s idle, checked every few seconds).
    let stopped = Instant::now();
    wait_at_zero(&fns, "steady", Duration::from_secs(120)).await;
    report!(
        "steady stream: at zero {:?} after the last message (idleAfter 30s)",
        stopped.elapsed()
    );
    assert_eq!(idle_events(&c.client).await, 1);
}
