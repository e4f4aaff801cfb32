#![cfg(test)]
//! A pod start must not wait behind unrelated deletions: 200 Deployments whose pods ignore
//! SIGTERM are deleted (each pod takes its grace period to stop), and a new Deployment created
//! at that moment must have its pod running within seconds. Prints the start time beside the
//! same start with nothing in flight, measured in the same run.

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{eventually, processes_with, start};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NS: &str = "default";
const BULK: usize = 200;
/// A generous bound; without deletions in flight a start takes well under a second.
const START_BOUND: Duration = Duration::from_secs(10);

/// A one-replica Deployment whose pod needs its whole grace period to stop: SIGTERM is
/// ignored (by the sleep too). `tag` ends up in the shell's command line, so the test can count
/// the pods whose processes are still alive.
fn deployment(name: &str, tag: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "batch": tag}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{
                        "name": "main", "image": "busybox:1.36",
                        "command": ["sh", "-c", format!("trap '' TERM; sleep 300; echo {tag}")]
                    }]
                }
            }
        }
    }))
    .unwrap()
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Creates Deployment `name` and returns how long until its pod shows phase Running.
async fn time_to_running(client: &Client, name: &str) -> Duration {
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let t0 = Instant::now();
    deps.create(&PostParams::default(), &deployment(name, "probe"))
        .await
        .unwrap();
    let mine = ListParams::default().labels(&format!("app={name}"));
    loop {
        let list = pods.list(&mine).await.unwrap();
        if list.items.iter().any(running) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{name}'s pod did not run within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_start_does_not_wait_behind_200_deletions() {
    let h = start(Ipv4Addr::new(127, 51, 0, 0), |c| {
        c.max_grace_period = Duration::from_secs(2);
    })
    .await;
    let client = h.client.clone();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let tag = format!("stall-bulk-{}", std::process::id());

    // Baseline: the same kind of start, nothing else going on.
    let baseline = time_to_running(&client, "probe-idle").await;

    // 200 Deployments, every pod running.
    let t0 = Instant::now();
    futures::stream::iter(0..BULK)
        .map(|i| {
            let deps = deps.clone();
            let d = deployment(&format!("bulk-{i}"), &tag);
            async move {
                deps.create(&PostParams::default(), &d).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let bulk = ListParams::default().labels(&format!("batch={tag}"));
    eventually("200 pods running", 180, || async {
        let list = pods.list(&bulk).await.ok()?;
        (list.items.iter().filter(|p| running(p)).count() == BULK).then_some(())
    })
    .await;
    eprintln!("{BULK} pods running after {:?}", t0.elapsed());

    // Delete them all (the garbage collector removes their pods), then start a new one.
    let t_delete = Instant::now();
    futures::stream::iter(0..BULK)
        .map(|i| {
            let deps = deps.clone();
            async move {
                deps.delete(&format!("bulk-{i}"), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    eprintln!("{BULK} deletions accepted in {:?}", t_delete.elapsed());
    let during = time_to_running(&client, "probe-busy").await;
    let stopping = processes_with(&tag).len();
    eprintln!(
        "pod start: {during:?} with {BULK} deletions in flight ({stopping} of their processes \
         still stopping when it ran); {baseline:?} with nothing in flight (same run)"
    );
    assert!(
        during < START_BOUND,
        "a pod start waited {during:?} behind deletions (baseline {baseline:?})"
    );
    assert!(
        stopping > 0,
        "the deletions were over before the start was measured: the test measured nothing"
    );

    // Every deleted pod's processes stop (grace period, then SIGKILL).
    eventually("the deleted pods' processes gone", 120, || async {
        processes_with(&tag).is_empty().then_some(())
    })
    .await;
    eprintln!(
        "{BULK} pods' processes gone {:?} after the deletions",
        t_delete.elapsed()
    );
    h.stop().await;
}

/// A Service with a selector and no pods (its Endpoints and EndpointSlice are still written,
/// empty).
fn service(name: &str, app: &str) -> k8s_openapi::api::core::v1::Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"app": app}, "ports": [{"port": 8080}]}
    }))
    .unwrap()
}

/// Creates Service `name` and returns how long until the endpoints controller wrote its
/// Endpoints.
async fn time_to_endpoints(client: &Client, name: &str) -> Duration {
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), NS);
    let eps: Api<k8s_openapi::api::core::v1::Endpoints> = Api::namespaced(client.clone(), NS);
    let t0 = Instant::now();
    svcs.create(&PostParams::default(), &service(name, name))
        .await
        .unwrap();
    eventually(&format!("Endpoints of {name}"), 60, || async {
        eps.get_opt(name).await.ok().flatten()
    })
    .await;
    t0.elapsed()
}

/// 200 Services select one pod; the pod's Deployment and the Services are deleted at once, so
/// the endpoints controller has 200 Endpoints and 200 slices to rewrite (the pod terminating)
/// and then to delete. That must not hold back the Endpoints of a Service created meanwhile (one
/// sequential pass over everything made new functions wait 36-40 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_endpoints_do_not_wait_behind_200_deleted_services() {
    let h = start(Ipv4Addr::new(127, 52, 0, 0), |c| {
        c.max_grace_period = Duration::from_secs(2);
    })
    .await;
    let deps: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    deps.create(&PostParams::default(), &deployment("shared", "shared-pod"))
        .await
        .unwrap();
    let client = h.client.clone();
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), NS);
    let eps: Api<k8s_openapi::api::core::v1::Endpoints> = Api::namespaced(client.clone(), NS);
    let baseline = time_to_endpoints(&client, "probe-idle").await;
    futures::stream::iter(0..BULK)
        .map(|i| {
            let svcs = svcs.clone();
            async move {
                svcs.create(
                    &PostParams::default(),
                    &service(&format!("bulk-{i}"), "shared"),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    eventually(
        "200 Endpoints with the shared pod's address",
        180,
        || async {
            let list = eps.list(&ListParams::default()).await.ok()?.items;
            let filled = list
                .iter()
                .filter(|e| {
                    e.metadata
                        .name
                        .as_deref()
                        .unwrap_or("")
                        .starts_with("bulk-")
                        && e.subsets.as_ref().is_some_and(|s| {
                            s.iter()
                                .any(|s| s.addresses.as_ref().is_some_and(|a| !a.is_empty()))
                        })
                })
                .count();
            (filled == BULK).then_some(())
        },
    )
    .await;
    deps.delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    futures::stream::iter(0..BULK)
        .map(|i| {
            let svcs = svcs.clone();
            async move {
                svcs.delete(&format!("bulk-{i}"), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let during = time_to_endpoints(&client, "probe-busy").await;
    eprintln!(
        "new Endpoints: {during:?} with {BULK} Services' Endpoints and slices being deleted; \
         {baseline:?} with nothing in flight (same run)"
    );
    assert!(
        during < START_BOUND,
        "a new Service's Endpoints waited {during:?} behind deletions (baseline {baseline:?})"
    );
    eventually("the stale Endpoints deleted", 120, || async {
        let n = eps.list(&ListParams::default()).await.ok()?.items;
        n.iter()
            .all(|e| {
                !e.metadata
                    .name
                    .as_deref()
                    .unwrap_or("")
                    .starts_with("bulk-")
            })
            .then_some(())
    })
    .await;
}
