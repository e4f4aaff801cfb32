#![cfg(test)]
//! Deployments on devcluster: served through the service proxy, scaled,
//! rolled, with init containers feeding the main container through an emptyDir.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{eventually, proxy_get, start};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const NS: &str = "default";

/// A python http.server Deployment whose init container writes the page it serves.
fn web_deployment(name: &str, replicas: i32, version: &str, marker: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "volumes": [{"name": "www", "emptyDir": {}}],
                    "initContainers": [{
                        "name": "write-page",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", "echo \"$VERSION from $POD_NAME\" > /www/index.html"],
                        "env": [
                            {"name": "VERSION", "value": version},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                        ],
                        "volumeMounts": [{"name": "www", "mountPath": "/www"}]
                    }],
                    "containers": [{
                        "name": "web",
                        "image": "python:3.11",
                        // The python image has no ENTRYPOINT (CMD python3), so name the program.
                        "command": ["python3"],
                        "args": ["-m", "http.server", "--bind", "$(POD_IP)", "--directory", "/www", "8000"],
                        // The orphan check finds this process by its env.
                        "env": [{"name": "MARKER", "value": marker}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "http", "containerPort": 8000}],
                        "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "www", "mountPath": "/www"}]
                    }]
                }
            }
        }
    }))
    .unwrap()
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .unwrap()
}

async fn ready_replicas(client: &Client, name: &str) -> i32 {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.get(name)
        .await
        .ok()
        .and_then(|d| d.status)
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

async fn pods_of(client: &Client, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

async fn ready_addresses(client: &Client, svc: &str) -> Vec<String> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), NS);
    let Ok(Some(eps)) = api.get_opt(svc).await else {
        return vec![];
    };
    let mut ips: Vec<String> = eps
        .subsets
        .unwrap_or_default()
        .iter()
        .flat_map(|s| s.addresses.clone().unwrap_or_default())
        .map(|a| a.ip)
        .collect();
    ips.sort();
    ips
}

async fn scale(client: &Client, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_answers_through_service_proxy_and_scales() {
    let h = start(Ipv4Addr::new(127, 21, 0, 0), |_| {}).await;
    let client = h.client.clone();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let svcs: Api<Service> = Api::namespaced(client.clone(), NS);
    svcs.create(&PostParams::default(), &service("web"))
        .await
        .unwrap();
    deps.create(
        &PostParams::default(),
        &web_deployment("web", 1, "v1", &h.marker),
    )
    .await
    .unwrap();

    eventually("1 ready replica", 60, || async {
        (ready_replicas(&client, "web").await == 1).then_some(())
    })
    .await;
    // The init container's page, consumed by the main container through the emptyDir.
    let body = eventually("page through the service proxy", 20, || async {
        proxy_get(&client, NS, "web:http", "/index.html").await.ok()
    })
    .await;
    let pods = pods_of(&client, "web").await;
    assert_eq!(pods.len(), 1);
    assert_eq!(body.trim(), format!("v1 from {}", pods[0].name_any()));
    let pod = &pods[0];
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    assert!(
        ip.starts_with("127.21."),
        "pod IP {ip} from the runner's range"
    );
    assert_eq!(
        pod.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Deployment"
    );
    assert!(pod.labels().contains_key("pod-template-hash"));
    let init = &pod
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        init.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );
    assert_eq!(ready_addresses(&client, "web").await, vec![ip.clone()]);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let sl = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(sl.len(), 1);
    assert_eq!(sl[0].endpoints[0].addresses, vec![ip.clone()]);
    assert_eq!(sl[0].ports.as_ref().unwrap()[0].port, Some(8000));

    // 1 -> 3: three pods on three addresses, all on port 8000.
    scale(&client, "web", 3).await;
    eventually("3 ready replicas", 60, || async {
        (ready_replicas(&client, "web").await == 3).then_some(())
    })
    .await;
    let addrs = eventually("3 endpoint addresses", 20, || async {
        let a = ready_addresses(&client, "web").await;
        (a.len() == 3).then_some(a)
    })
    .await;
    let mut unique = addrs.clone();
    unique.dedup();
    assert_eq!(unique.len(), 3);
    let dep = deps.get("web").await.unwrap();
    let st = dep.status.unwrap();
    assert_eq!(
        (st.replicas, st.updated_replicas, st.available_replicas),
        (Some(3), Some(3), Some(3))
    );
    let conds = st.conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
    );
    // Every replica answers (through the pod proxy of the API server).
    for pod in pods_of(&client, "web").await {
        let url = format!(
            "/api/v1/namespaces/{NS}/pods/{}:8000/proxy/index.html",
            pod.name_any()
        );
        let text = client
            .request_text(http::Request::get(url).body(Vec::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(text.trim(), format!("v1 from {}", pod.name_any()));
    }

    // 3 -> 0: no pods, no endpoints, no processes.
    scale(&client, "web", 0).await;
    eventually("no pods", 30, || async {
        pods_of(&client, "web").await.is_empty().then_some(())
    })
    .await;
    eventually("no endpoint addresses", 10, || async {
        ready_addresses(&client, "web")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let st = deps.get("web").await.unwrap().status.unwrap();
    assert_eq!((st.replicas, st.ready_replicas), (Some(0), Some(0)));
    eventually("server processes gone", 10, || async {
        common::processes_with(&h.marker).is_empty().then_some(())
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_without_a_failed_request() {
    let h = start(Ipv4Addr::new(127, 22, 0, 0), |_| {}).await;
    let client = h.client.clone();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let svcs: Api<Service> = Api::namespaced(client.clone(), NS);
    svcs.create(&PostParams::default(), &service("roll"))
        .await
        .unwrap();
    deps.create(
        &PostParams::default(),
        &web_deployment("roll", 2, "v1", &h.marker),
    )
    .await
    .unwrap();
    eventually("2 ready replicas", 60, || async {
        (ready_replicas(&client, "roll").await == 2).then_some(())
    })
    .await;
    eventually("2 endpoint addresses", 20, || async {
        (ready_addresses(&client, "roll").await.len() == 2).then_some(())
    })
    .await;
    let old_pods: Vec<String> = pods_of(&client, "roll")
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();

    // Requests run all through the rollout; count failures and versions seen.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let v1 = Arc::new(AtomicUsize::new(0));
    let v2 = Arc::new(AtomicUsize::new(0));
    let load = {
        let (client, stop, failures, v1, v2) = (
            client.clone(),
            stop.clone(),
            failures.clone(),
            v1.clone(),
            v2.clone(),
        );
        tokio::spawn(async move {
            let mut errors = Vec::new();
            for _ in 0..3000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match proxy_get(&client, NS, "roll:http", "/index.html").await {
                    Ok(body) if body.starts_with("v1 ") => _ = v1.fetch_add(1, Ordering::SeqCst),
                    Ok(body) if body.starts_with("v2 ") => _ = v2.fetch_add(1, Ordering::SeqCst),
                    other => {
                        failures.fetch_add(1, Ordering::SeqCst);
                        errors.push(format!("{other:?}"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            errors
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let new = web_deployment("roll", 2, "v2", &h.marker);
    deps.patch(
        "roll",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": new.spec.unwrap().template}})),
    )
    .await
    .unwrap();
    eventually("rollout complete", 90, || async {
        let st = deps.get("roll").await.ok()?.status?;
        let pods = pods_of(&client, "roll").await;
        let all_new = pods.len() == 2 && pods.iter().all(|p| !old_pods.contains(&p.name_any()));
        (all_new
            && st.updated_replicas == Some(2)
            && st.ready_replicas == Some(2)
            && st.replicas == Some(2))
        .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let errors = load.await.unwrap();
    assert!(
        errors.is_empty(),
        "failed requests during the rollout: {errors:?}"
    );
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    assert!(
        v1.load(Ordering::SeqCst) > 0 && v2.load(Ordering::SeqCst) > 0,
        "both versions answered"
    );
    let conds = deps
        .get("roll")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Progressing"
                && c.reason.as_deref() == Some("NewReplicaSetAvailable"))
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_removes_its_pods_and_processes() {
    let h = start(Ipv4Addr::new(127, 23, 0, 0), |_| {}).await;
    let client = h.client.clone();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deps.create(
        &PostParams::default(),
        &web_deployment("gone", 2, "v1", &h.marker),
    )
    .await
    .unwrap();
    eventually("2 ready replicas", 60, || async {
        (ready_replicas(&client, "gone").await == 2).then_some(())
    })
    .await;
    assert!(!common::processes_with(&h.marker).is_empty());
    deps.delete("gone", &Default::default()).await.unwrap();
    eventually("pods removed", 30, || async {
        pods_of(&client, "gone").await.is_empty().then_some(())
    })
    .await;
    eventually("processes gone", 15, || async {
        common::processes_with(&h.marker).is_empty().then_some(())
    })
    .await;
    h.stop().await;
}
