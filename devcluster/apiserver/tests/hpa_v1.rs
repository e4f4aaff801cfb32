#![cfg(test)]
//! HorizontalPodAutoscalers served as autoscaling/v1 beside v2, stored once: discovery,
//! CRUD, patch, status and list in both versions, the real conversion (cpu target <->
//! Resource metric, other metrics and status in the `autoscaling.alpha.kubernetes.io/*`
//! annotations), v1 validation, and `kubectl autoscale` (which sends v1).

use std::process::Command;

use devcluster_apiserver::{ServerConfig, start};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn hpas(client: &Client, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("autoscaling", version, "HorizontalPodAutoscaler");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn v1(name: &str, min: i64, max: i64, pct: i64) -> DynamicObject {
    obj(
        json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": min, "maxReplicas": max, "targetCPUUtilizationPercentage": pct}}),
    )
}

async fn refused(api: &Api<DynamicObject>, o: &DynamicObject, field: &str, text: &str) {
    let err = api.create(&PostParams::default(), o).await.unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("not an API error: {err}")
    };
    assert_eq!(s.code, 422, "{s:?}");
    let causes = s.details.map(|d| d.causes).unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c.field == field && c.message.contains(text)),
        "no cause on {field} with {text:?}: {causes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_and_v2_are_one_object_converted_like_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(ServerConfig {
        logs_dir: dir.path().join("logs"),
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = server.client().await.unwrap();

    // Discovery: both versions, v2 preferred.
    let group: Value = client
        .request(
            http::Request::get("/apis/autoscaling")
                .body(vec![])
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(group["preferredVersion"]["version"], "v2");
    assert!(
        group["versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["version"] == "v1")
    );
    let list: Value = client
        .request(
            http::Request::get("/apis/autoscaling/v1")
                .body(vec![])
                .unwrap(),
        )
        .await
        .unwrap();
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"horizontalpodautoscalers"), "{names:?}");
    assert!(names.contains(&"horizontalpodautoscalers/status"));

    let a1 = hpas(&client, "v1");
    let a2 = hpas(&client, "v2");
    // Created as v1, answered as v1, read as v2 with the cpu metric.
    let created = a1
        .create(&PostParams::default(), &v1("web", 1, 4, 70))
        .await
        .unwrap();
    assert_eq!(
        created.types.as_ref().unwrap().api_version,
        "autoscaling/v1"
    );
    assert_eq!(created.data["spec"]["targetCPUUtilizationPercentage"], 70);
    let as_v2 = a2.get("web").await.unwrap();
    assert_eq!(
        as_v2.data["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 70}}}])
    );
    // A merge patch through v1 changes the one object.
    a1.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"targetCPUUtilizationPercentage": 50}})),
    )
    .await
    .unwrap();
    let as_v2 = a2.get("web").await.unwrap();
    assert_eq!(
        as_v2.data["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        50
    );
    // Status written in v2 shows in v1's fields and annotations.
    a2.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"currentReplicas": 2, "desiredReplicas": 3,
            "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": 90, "averageValue": "90m"}}}],
            "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        ),
    )
    .await
    .unwrap();
    let as_v1 = a1.get_status("web").await.unwrap();
    assert_eq!(as_v1.types.as_ref().unwrap().api_version, "autoscaling/v1");
    assert_eq!(as_v1.data["status"]["currentCPUUtilizationPercentage"], 90);
    assert_eq!(as_v1.data["status"]["desiredReplicas"], 3);
    let conds: Value = serde_json::from_str(
        as_v1.metadata.annotations.as_ref().unwrap()["autoscaling.alpha.kubernetes.io/conditions"]
            .as_str(),
    )
    .unwrap();
    assert_eq!(conds[0]["reason"], "SucceededRescale");

    // The qps HPA Kubeless creates (an Object metric) travels in v1's metrics annotation,
    // and a v1 client writing the object back keeps it.
    let qps = obj(
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "fn"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "fn"},
            "minReplicas": 1, "maxReplicas": 3,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 10}},
            "metrics": [{"type": "Object", "object": {
                "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "fn"},
                "metric": {"name": "function_calls"},
                "target": {"type": "Value", "value": "10"}}}]}}),
    );
    a2.create(&PostParams::default(), &qps).await.unwrap();
    let mut old = a1.get("fn").await.unwrap();
    let anns = old.metadata.annotations.clone().unwrap();
    let metrics: Value =
        serde_json::from_str(&anns["autoscaling.alpha.kubernetes.io/metrics"]).unwrap();
    assert_eq!(metrics[0]["object"]["metricName"], "function_calls");
    assert_eq!(metrics[0]["object"]["targetValue"], "10");
    assert!(
        old.data["spec"]
            .get("targetCPUUtilizationPercentage")
            .is_none()
    );
    old.data["spec"]["maxReplicas"] = json!(5);
    a1.replace("fn", &PostParams::default(), &old)
        .await
        .unwrap();
    let back = a2.get("fn").await.unwrap();
    assert_eq!(back.data["spec"]["maxReplicas"], 5);
    assert_eq!(back.data["spec"]["metrics"], qps.data["spec"]["metrics"]);
    assert_eq!(back.data["spec"]["behavior"], qps.data["spec"]["behavior"]);
    assert!(back.metadata.annotations.is_none_or(|a| a.is_empty()));

    // Lists in v1 are v1 objects.
    let l = a1.list(&Default::default()).await.unwrap();
    assert_eq!(l.items.len(), 2);
    assert!(
        l.items
            .iter()
            .all(|i| i.types.as_ref().unwrap().api_version == "autoscaling/v1")
    );

    // Watches in v1 send v1 objects.
    {
        use futures::TryStreamExt;
        let stream = a1
            .watch(&kube::api::WatchParams::default(), "0")
            .await
            .unwrap();
        let mut stream = std::pin::pin!(stream);
        let ev = stream.try_next().await.unwrap().unwrap();
        let kube::api::WatchEvent::Added(o) = ev else {
            panic!("not an ADDED event: {ev:?}")
        };
        assert_eq!(o.types.as_ref().unwrap().api_version, "autoscaling/v1");
    }

    // Tables from v1 embed v1 objects.
    let table: Value = client
        .request(
            http::Request::get(
                "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers?includeObject=Object",
            )
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(vec![])
            .unwrap(),
        )
        .await
        .unwrap();
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r["object"]["apiVersion"] == "autoscaling/v1"),
        "{table}"
    );

    // v1 validation, as the real server (the cpu target is checked as the metric it becomes).
    refused(
        &a1,
        &v1("min0", 0, 3, 50),
        "spec.minReplicas",
        "greater than or equal to 1",
    )
    .await;
    refused(
        &a1,
        &v1("max0", 1, 0, 50),
        "spec.maxReplicas",
        "greater than or equal to 1",
    )
    .await;
    refused(
        &a1,
        &v1("inverted", 5, 2, 50),
        "spec.minReplicas",
        "maxReplicas",
    )
    .await;
    refused(
        &a1,
        &v1("pct0", 1, 3, 0),
        "spec.metrics[0].resource.target.averageUtilization",
        "must be greater than 0",
    )
    .await;

    // kubectl autoscale sends autoscaling/v1.
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "api"}},
            "template": {"metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}});
    let deps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    deps.create(&PostParams::default(), &obj(dep))
        .await
        .unwrap();
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", server.kubeconfig_path())
            .output()
            .expect("kubectl is installed (apt-get install -y kubernetes-client)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, out) = kubectl(&[
        "autoscale",
        "deployment",
        "api",
        "--min=2",
        "--max=6",
        "--cpu-percent=65",
    ]);
    assert!(ok, "{out}");
    let made = a2.get("api").await.unwrap();
    assert_eq!(made.data["spec"]["minReplicas"], 2);
    assert_eq!(
        made.data["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        65
    );
    let (ok, out) = kubectl(&[
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "api",
        "-o",
        "json",
    ]);
    assert!(ok, "{out}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["spec"]["targetCPUUtilizationPercentage"], 65);
    let (ok, out) = kubectl(&["get", "hpa"]);
    assert!(
        ok && out.contains("api") && out.contains("Deployment/api"),
        "{out}"
    );
    let (ok, out) = kubectl(&[
        "autoscale",
        "deployment",
        "api",
        "--name=bad",
        "--min=3",
        "--max=2",
    ]);
    assert!(!ok, "{out}");
    server.shutdown().await;
}
