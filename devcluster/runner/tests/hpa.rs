#![cfg(test)]
//! The HPA controller on real pods: CPU measured from /proc against cpu requests, and a
//! counter scraped from the pods' /metrics (the stand-in for a Prometheus adapter). Replicas
//! go up under load and back down once it stops (short scale-down window via `behavior`).

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::{eventually, start};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NS: &str = "default";

async fn replicas(client: &Client, name: &str) -> i32 {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.get(name)
        .await
        .ok()
        .and_then(|d| d.spec.and_then(|s| s.replicas))
        .unwrap_or(-1)
}

fn hpa(name: &str, metric: serde_json::Value) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [metric],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 2}},
        }
    }))
    .unwrap()
}

async fn status_of(client: &Client, name: &str) -> serde_json::Value {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), NS);
    serde_json::to_value(api.get(name).await.unwrap().status).unwrap()
}

/// The HPA's status once it records `desired` replicas. The controller scales first and
/// writes its status after (with an Event between), so a read right after the Deployment
/// shows the new size may still see the status of the sync before.
async fn status_at(client: &Client, name: &str, desired: i64) -> serde_json::Value {
    eventually("the status of the rescale", 30, || async {
        let status = status_of(client, name).await;
        (status["desiredReplicas"] == desired).then_some(status)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_load_scales_a_deployment_up_and_back_down() {
    let h = start(Ipv4Addr::new(127, 71, 0, 0), |c| {
        c.hpa_sync_period = Duration::from_secs(1);
    })
    .await;
    let client = h.client.clone();
    let flag = h.dir.path().join("burn");
    std::fs::write(&flag, "").unwrap();
    // Busy while the flag file exists, idle after.
    let script = format!(
        "while :; do if [ -e {} ]; then :; else sleep 0.5; fi; done",
        flag.display()
    );
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "burner", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "burner"}},
            "template": {"metadata": {"labels": {"app": "burner"}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1",
                    "command": ["sh", "-c", script],
                    "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))
    .unwrap();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deps.create(&PostParams::default(), &dep).await.unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), NS);
    hpas.create(
        &PostParams::default(),
        &hpa(
            "burner",
            json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50}}}),
        ),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    eventually("scaled up to 3 on cpu", 60, || async {
        (replicas(&client, "burner").await == 3).then_some(())
    })
    .await;
    eprintln!("cpu: 1 -> 3 replicas in {:?}", started.elapsed());
    let status = status_at(&client, "burner", 3).await;
    let util = status["currentMetrics"][0]["resource"]["current"]["averageUtilization"]
        .as_i64()
        .unwrap();
    eprintln!("cpu utilization measured: {util}%");
    assert!(util > 100, "a busy loop against 100m: {status}");
    assert!(status["lastScaleTime"].is_string());
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let evs = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        evs.iter()
            .any(|e| e.reason.as_deref() == Some("SuccessfulRescale")
                && e.message.as_deref().is_some_and(
                    |m| m.starts_with("New size: 3; reason: cpu resource utilization")
                )),
        "{:?}",
        evs.iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    let conds = status["conditions"].as_array().unwrap();
    let cond = |t: &str| conds.iter().find(|c| c["type"] == t).cloned().unwrap();
    assert_eq!(cond("ScalingActive")["reason"], "ValidMetricFound");
    std::fs::remove_file(&flag).unwrap();
    let stopped = std::time::Instant::now();
    eventually("back down to 1", 60, || async {
        (replicas(&client, "burner").await == 1).then_some(())
    })
    .await;
    eprintln!(
        "cpu: 3 -> 1 replicas in {:?} after the load stopped",
        stopped.elapsed()
    );
    let status = status_at(&client, "burner", 1).await;
    let conds = status["conditions"].as_array().unwrap().clone();
    assert!(
        conds.iter().any(|c| c["type"] == "ScalingLimited"),
        "{status}"
    );
    h.stop().await;
}

/// Counts requests and serves the count as `function_calls_total`, like the runtimes.
const COUNTER: &str = r#"
import http.server, os
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        if self.path == "/metrics":
            body = ('# TYPE function_calls counter\nfunction_calls_total{method="GET"} %d\n' % n).encode()
        else:
            n += 1
            body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((os.environ["DEVCLUSTER_POD_IP"], 8080), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_per_second_on_the_service_scale_up_and_back_down() {
    let h = start(Ipv4Addr::new(127, 72, 0, 0), |c| {
        c.hpa_sync_period = Duration::from_secs(1);
    })
    .await;
    let client = h.client.clone();
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "counter", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "counter"}},
            "template": {"metadata": {"labels": {"app": "counter"}},
                "spec": {"containers": [{"name": "main", "image": "python:3",
                    "command": ["python3", "-c", COUNTER],
                    "ports": [{"containerPort": 8080}]}]}}}
    }))
    .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "counter", "namespace": NS},
        "spec": {"selector": {"app": "counter"}, "ports": [{"port": 8080}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &dep)
        .await
        .unwrap();
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &hpa(
                "counter",
                json!({"type": "Object", "object": {
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "counter"},
                    "metric": {"name": "function_calls"},
                    "target": {"type": "Value", "value": "5"}}}),
            ),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let ip = eventually("a running counter pod", 60, || async {
        let list = pods
            .list(&ListParams::default().labels("app=counter"))
            .await
            .ok()?;
        let p = list.items.into_iter().next()?;
        let ip = p.status?.pod_ip?;
        tokio::net::TcpStream::connect((ip.as_str(), 8080))
            .await
            .ok()?;
        Some(ip)
    })
    .await;
    // About 40 calls a second against a target of 5 in total.
    let stop = tokio_util::sync::CancellationToken::new();
    let load = {
        let stop = stop.clone();
        let ip = ip.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Ok(mut s) = tokio::net::TcpStream::connect((ip.as_str(), 8080)).await {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n").await;
                    let mut b = Vec::new();
                    let _ = s.read_to_end(&mut b).await;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };
    let started = std::time::Instant::now();
    eventually("scaled up on function_calls", 60, || async {
        (replicas(&client, "counter").await == 3).then_some(())
    })
    .await;
    eprintln!("qps: 1 -> 3 replicas in {:?}", started.elapsed());
    let status = status_at(&client, "counter", 3).await;
    eprintln!(
        "qps measured: {}",
        status["currentMetrics"][0]["object"]["current"]["value"]
    );
    assert_eq!(status["currentMetrics"][0]["type"], "Object", "{status}");
    stop.cancel();
    load.await.unwrap();
    let stopped = std::time::Instant::now();
    eventually("back down to 1", 60, || async {
        (replicas(&client, "counter").await == 1).then_some(())
    })
    .await;
    eprintln!(
        "qps: 3 -> 1 replicas in {:?} after the load stopped",
        stopped.elapsed()
    );
    h.stop().await;
}
