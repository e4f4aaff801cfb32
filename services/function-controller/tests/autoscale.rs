//! Autoscaling end to end on devcluster: a Python function with a cpu request and the HPA
//! `kubeless autoscale create` writes into the Function (cpu, then qps), the real
//! function-controller and runtime, and devcluster's HPA controller (period 1 s). Load through
//! the service proxy scales the Deployment up; once it stops (a 3 s scale-down window set
//! through `behavior`) it comes back down.
#![cfg(test)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Env, NS, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::{Value, json};

/// The Function `kubeless function deploy NAME --runtime python3.11 --cpu 100m` writes, with
/// the HPA `kubeless autoscale create NAME --min 1 --max 3 --metric M --value V` adds.
fn function(name: &str, code: &str, metric: Value) -> Value {
    json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": "h.handler", "runtime": "python3.11", "function": code,
            "function-content-type": "text", "timeout": "30",
            "deployment": {"spec": {"template": {"spec": {"containers": [{
                "resources": {"requests": {"cpu": "100m"}}}]}}}},
            "horizontalPodAutoscaler": {
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": 1, "maxReplicas": 3, "metrics": [metric],
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 3}}}}}
    })
}

async fn replicas(env: &Env, name: &str) -> i32 {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    api.get(name)
        .await
        .ok()
        // Unset replicas run one pod (the real server would have defaulted it to 1).
        .map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(1))
        .unwrap_or(-1)
}

/// Calls the function in a loop until `stop` is set.
fn load(env: &Env, name: &'static str, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    let client = env.client.clone();
    tokio::spawn(async move {
        let mut n = 0;
        while !stop.load(Ordering::SeqCst) {
            let req = http::Request::get(format!(
                "/api/v1/namespaces/{NS}/services/{name}:http-function-port/proxy/"
            ))
            .body(Vec::new())
            .unwrap();
            if client.request_text(req).await.is_ok() {
                n += 1;
            }
        }
        n
    })
}

async fn up_and_down(env: &Env, name: &'static str) {
    env.wait_ready(name).await;
    assert_eq!(replicas(env, name).await, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let loader = load(env, name, stop.clone());
    let t = Instant::now();
    wait_for(
        &format!("{name} scaled up"),
        Duration::from_secs(90),
        || async { (replicas(env, name).await >= 2).then_some(()) },
    )
    .await;
    eprintln!(
        "{name}: 1 -> {} replicas in {:?} under load",
        replicas(env, name).await,
        t.elapsed()
    );
    stop.store(true, Ordering::SeqCst);
    let calls = loader.await.unwrap();
    eprintln!("{name}: {calls} calls in {:?}", t.elapsed());
    let t = Instant::now();
    wait_for(
        &format!("{name} back to 1"),
        Duration::from_secs(60),
        || async { (replicas(env, name).await == 1).then_some(()) },
    )
    .await;
    eprintln!(
        "{name}: back to 1 replica {:?} after the load stopped",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_scale_on_cpu_and_on_qps() {
    let mut env = Env::start_with_hpa_period(true, Duration::from_secs(1)).await;
    env.start_controller().await;

    env.create(function(
        "burn",
        "def handler(event, context):\n    return str(sum(i * i for i in range(200000)))\n",
        json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}),
    ))
    .await;
    up_and_down(&env, "burn").await;
    env.fns().delete("burn", &Default::default()).await.unwrap();

    env.create(function(
        "hits",
        "def handler(event, context):\n    return 'ok'\n",
        json!({"type": "Object", "object": {
            "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "hits"},
            "metric": {"name": "function_calls"},
            "target": {"type": "Value", "value": "2"}}}),
    ))
    .await;
    up_and_down(&env, "hits").await;
    env.shutdown().await;
}
