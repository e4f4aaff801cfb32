//! `metrics.k8s.io/v1beta1` with a test backend standing in for the pod runner:
//! discovery, PodMetrics per namespace, across namespaces, by name and by label,
//! NodeMetrics, and the real errors.
#![cfg(test)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use devcluster_apiserver::metrics::{ContainerUsage, MetricsBackend, Usage};
use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

struct Fixed;

fn usage(cpu_cores: f64, mib: u64) -> Usage {
    Usage {
        cpu_cores,
        memory_bytes: mib * 1024 * 1024,
        timestamp: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        window: Duration::from_secs(5),
    }
}

impl MetricsBackend for Fixed {
    fn containers(&self) -> Vec<ContainerUsage> {
        let c = |ns: &str, pod: &str, container: &str, cpu, mib| ContainerUsage {
            namespace: ns.into(),
            pod: pod.into(),
            container: container.into(),
            usage: usage(cpu, mib),
        };
        vec![
            c("default", "web", "main", 0.25, 40),
            c("default", "web", "sidecar", 0.001, 2),
            c("other", "db", "main", 1.5, 100),
            // A container of a pod the store no longer has is left out.
            c("default", "gone", "main", 0.1, 1),
        ]
    }

    fn node(&self) -> Option<(String, Usage)> {
        Some(("devcluster".into(), usage(2.0, 4096)))
    }
}

async fn get(client: &kube::Client, path: &str) -> Result<Value, kube::Error> {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    client
        .request_text(req)
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
}

fn code(r: Result<Value, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn metrics_api_serves_the_backends_measurements() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();

    // Without a backend (no runner) the lists are empty.
    let empty = get(&client, "/apis/metrics.k8s.io/v1beta1/pods")
        .await
        .unwrap();
    assert_eq!(empty["items"], json!([]));

    assert!(server.set_metrics_backend(Arc::new(Fixed)));
    for ns in ["default", "other"] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await;
    }
    for (ns, name, app) in [("default", "web", "web"), ("other", "db", "db")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}
        }))
        .unwrap();
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    let groups = get(&client, "/apis").await.unwrap();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "metrics.k8s.io"),
        "{groups}"
    );
    let resources = get(&client, "/apis/metrics.k8s.io/v1beta1").await.unwrap();
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nodes", "pods"]);

    let web = get(
        &client,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web",
    )
    .await
    .unwrap();
    assert_eq!(web["kind"], "PodMetrics");
    assert_eq!(web["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(web["timestamp"], "2023-11-14T22:13:20Z");
    assert_eq!(web["window"], "5s");
    assert_eq!(
        web["containers"],
        json!([
            {"name": "main", "usage": {"cpu": "250000000n", "memory": "40960Ki"}},
            {"name": "sidecar", "usage": {"cpu": "1000000n", "memory": "2048Ki"}}
        ])
    );

    let all = get(&client, "/apis/metrics.k8s.io/v1beta1/pods")
        .await
        .unwrap();
    assert_eq!(all["kind"], "PodMetricsList");
    let pods: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(pods, ["web", "db"], "the pod the store lacks is left out");
    let selected = get(
        &client,
        "/apis/metrics.k8s.io/v1beta1/pods?labelSelector=app%3Ddb",
    )
    .await
    .unwrap();
    assert_eq!(selected["items"].as_array().unwrap().len(), 1);
    let in_ns = get(
        &client,
        "/apis/metrics.k8s.io/v1beta1/namespaces/other/pods",
    )
    .await
    .unwrap();
    assert_eq!(in_ns["items"][0]["metadata"]["name"], "db");

    let node = get(&client, "/apis/metrics.k8s.io/v1beta1/nodes/devcluster")
        .await
        .unwrap();
    assert_eq!(node["kind"], "NodeMetrics");
    assert_eq!(
        node["usage"],
        json!({"cpu": "2000000000n", "memory": "4194304Ki"})
    );

    // The real errors: a pod without metrics, an unknown path, a write.
    let r = get(
        &client,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/gone",
    )
    .await;
    assert_eq!(code(r), 404);
    let r = get(&client, "/apis/metrics.k8s.io/v1beta1/nodes/other").await;
    assert_eq!(code(r), 404);
    let r = get(&client, "/apis/metrics.k8s.io/v1beta1/services").await;
    assert_eq!(code(r), 404);
    let req = http::Request::post("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
        .body(b"{}".to_vec())
        .unwrap();
    match client.request_text(req).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 405),
        other => panic!("expected 405, got {other:?}"),
    }
}
