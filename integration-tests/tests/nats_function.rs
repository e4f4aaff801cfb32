//! NATS end to end on devcluster with a real Python function pod (kubeless-runtime): a NATS
//! request through the nats-trigger binary reaches the function, and its answer comes back
//! with the Kubeless headers the function saw. Uses the binaries `cargo build --workspace
//! --bins` left in this test's target dir and nats-server (scripts/test.sh installs it).
#![cfg(test)]

use std::time::Duration;

use kubeless_api::NatsTrigger;
use kubeless_testkit::{NatsServer, PythonFunction, TestCluster, create, eventually, wait_ready};
use serde_json::json;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_request_reaches_a_real_python_function_pod() {
    let nats_server = NatsServer::start();
    let c = TestCluster::with_pods(&["kubeless-runtime"]).await;
    PythonFunction::new("greeter", HANDLER, "handler")
        .label("topic", "greetings")
        .deploy(&c.client)
        .await;
    let trigger: NatsTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "greetings"},
        "spec": {"topic": "greetings.*", "functionSelector": {"matchExpressions": [
            {"key": "topic", "operator": "In", "values": ["greetings"]}]}}
    }))
    .unwrap();
    create(&c.client, &trigger).await;
    let service = c.start_service(
        "nats-trigger",
        &[
            ("NATS_URL", nats_server.url.clone()),
            ("KUBELESS_DRAIN_TIMEOUT_SECONDS", "5".into()),
        ],
    );
    wait_ready::<NatsTrigger>(&c.client, "greetings").await;

    let caller = async_nats::connect(&nats_server.url).await.unwrap();
    // 502 (no endpoints) until the pod is ready, and no answer until the trigger subscribed;
    // bounded by the deadline.
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

    tokio::task::block_in_place(|| service.terminate(Duration::from_secs(20)))
        .expect("nats-trigger stopped in time");
    c.shutdown().await;
}
