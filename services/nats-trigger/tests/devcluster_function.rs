//! End to end on devcluster with a real Python function pod (kubeless-runtime): a NATS request
//! through the trigger reaches the function and its answer comes back.
#![cfg(test)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

const HANDLER: &str = r#"
def handler(event, context):
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode()
    req = event["extensions"]["request"]
    return {
        "data": data,
        "ns": event["event-namespace"],
        "topic": req.get_header("event-topic"),
        "tenant": req.get_header("x-tenant"),
    }
"#;

/// What the function-controller would create: code ConfigMap, Deployment running
/// kubeless-runtime, Service, and the Function object.
async fn deploy_python_function(client: &kube::Client, name: &str) {
    let labels = json!({"function": name, "created-by": "kubeless", "topic": "greetings"});
    create_dynamic(
        client,
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"greet.py": HANDLER}}),
    )
    .await;
    create_dynamic(
        client,
        "apps",
        "v1",
        "Deployment",
        "deployments",
        json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"function": name}},
          "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": name, "image": "kubeless-rs/runtime-python:3.11",
              "env": [
                {"name": "FUNC_HANDLER", "value": "handler"},
                {"name": "MOD_NAME", "value": "greet"},
                {"name": "FUNC_PORT", "value": "8080"},
                {"name": "FUNC_RUNTIME", "value": "python3.11"},
                {"name": "FUNC_TIMEOUT", "value": "10"},
                {"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"},
                {"name": "KUBELESS_WORKERS", "value": "1"},
                {"name": "KUBELESS_LISTEN_ADDRESS",
                 "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
              "ports": [{"name": "http", "containerPort": 8080}],
              "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
              "volumeMounts": [{"name": "code", "mountPath": "/kubeless"}]}],
            "volumes": [{"name": "code", "configMap": {"name": name}}]}}}}),
    )
    .await;
    create_dynamic(client, "", "v1", "Service", "services", json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"function": name},
                 "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]}})).await;
    let functions: kube::Api<kubeless_api::Function> = kube::Api::namespaced(client.clone(), NS);
    let f: kubeless_api::Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runtime": "python3.11", "handler": "greet.handler", "timeout": "10", "function": HANDLER}
    }))
    .unwrap();
    functions
        .create(&kube::api::PostParams::default(), &f)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_request_reaches_a_real_python_function_pod() {
    let nats_server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let images = kubeless_testkit::image_map(dir.path(), &["kubeless-runtime"]);
    let (cluster, client, _state) = cluster(Some(images)).await;
    deploy_python_function(&client, "greeter").await;
    create_trigger(
        &client,
        "greetings",
        json!({"topic": "greetings.*", "functionSelector": {"matchExpressions": [
            {"key": "topic", "operator": "In", "values": ["greetings"]}]}}),
        json!(null),
    )
    .await;
    let replica = Replica::start(&client, &nats_server.url).await;
    replica.wait_active(1).await;
    wait_ready(&client, "greetings").await;

    let caller = nats_client(&nats_server).await;
    // 502 (no endpoints) until the pod is ready; bounded by the deadline.
    let answer = eventually(
        "the function pod to answer",
        Duration::from_secs(90),
        || {
            let caller = caller.clone();
            async move {
                let mut h = async_nats::HeaderMap::new();
                h.insert("X-Tenant", "acme");
                let req =
                    caller.request_with_headers("greetings.hello", h, r#"{"name":"nats"}"#.into());
                let msg = tokio::time::timeout(Duration::from_secs(15), req)
                    .await
                    .ok()?
                    .ok()?;
                let status = msg
                    .headers
                    .as_ref()?
                    .get("Kubeless-Status")?
                    .as_str()
                    .to_string();
                if status != "200" {
                    eprintln!(
                        "waiting: {status} {}",
                        String::from_utf8_lossy(&msg.payload)
                    );
                    return None;
                }
                Some(msg)
            }
        },
    )
    .await;
    let body: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(body["data"], json!({"name": "nats"}), "{body}");
    assert_eq!(body["ns"], "natstriggers.kubeless.io");
    assert_eq!(body["topic"], "greetings.hello");
    assert_eq!(body["tenant"], "acme");

    replica.stop().await;
    cluster.shutdown().await;
}
