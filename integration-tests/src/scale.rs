//! What the scale-to-zero test and bench share: the function manifests, the service processes'
//! environment, and reading a Function's scale state.

use std::time::{Duration, Instant};

use kube::Api;
use kubeless_api::{Function, find_condition};
use kubeless_testkit::{NS, ServiceProcess, TestCluster, eventually};
use serde_json::json;

/// A Python handler printing `EVENT <data>` and answering `ok`.
pub const PYTHON: &str = r#"
def handler(event, context):
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    print("EVENT", data, flush=True)
    return "ok"
"#;

/// The same in Node.js.
pub const NODE: &str = r#"
module.exports = {
  handler: (event, context) => {
    let data = event.data;
    if (Buffer.isBuffer(data)) data = data.toString("utf8");
    if (typeof data !== "string") data = JSON.stringify(data);
    console.log("EVENT", data);
    return "ok";
  },
};
"#;

/// A Function labelled `wake=yes` with scale to zero on after `idle_after`.
pub fn function(name: &str, runtime: &str, code: &str, idle_after: &str) -> Function {
    let value = json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS, "labels": {"wake": "yes"}},
        "spec": {"runtime": runtime, "handler": "handler.handler", "function": code,
                 "function-content-type": "text", "timeout": "10",
                 "scaleToZero": {"enabled": true, "idleAfter": idle_after}}
    });
    // A fixed, valid manifest: it always deserializes.
    serde_json::from_value(value).unwrap_or_else(|e| panic!("function manifest: {e}"))
}

/// Starts the service binary `bin` against `c` ([`TestCluster::start_service`]) as pod
/// `<bin>-0`: no Lease, EndpointSlice resolution, activity written at most once a second, and
/// `extra` besides.
pub fn start_service(c: &TestCluster, bin: &str, extra: &[(&str, String)]) -> ServiceProcess {
    let mut env = vec![
        ("KUBELESS_LEADER_ELECT", "false".to_string()),
        ("KUBELESS_ENDPOINT_RESOLUTION", "endpointslices".into()),
        ("KUBELESS_ACTIVITY_INTERVAL", "1s".into()),
        ("POD_NAMESPACE", NS.into()),
        ("POD_NAME", format!("{bin}-0")),
    ];
    env.extend_from_slice(extra);
    c.start_service(bin, &env)
}

/// The http-trigger-controller with only its built-in gateway (no Ingresses), listening on a
/// free port; the process and the gateway's `host:port`.
pub fn start_gateway(c: &TestCluster) -> (ServiceProcess, String) {
    let addr = format!("127.0.0.1:{}", kubeless_testkit::free_port());
    let process = start_service(
        c,
        "http-trigger-controller",
        &[
            ("KUBELESS_INGRESS", "false".into()),
            ("KUBELESS_GATEWAY", "true".into()),
            ("KUBELESS_GATEWAY_ADDR", addr.clone()),
        ],
    );
    (process, addr)
}

/// Waits until `api` has no object `name` (`what` names the wait in a timeout's panic).
pub async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(what, timeout, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// `(at zero, ready replicas)` of a Function with scale to zero on.
pub async fn scale_state(fns: &Api<Function>, name: &str) -> Option<(bool, i32)> {
    let status = fns.get(name).await.ok()?.status?;
    let at_zero = find_condition(&status.conditions, "ScaledToZero")?.is_true();
    Some((at_zero, status.ready_replicas.unwrap_or(0)))
}

/// Waits until the function is at zero with no ready replica.
pub async fn wait_at_zero(fns: &Api<Function>, name: &str, timeout: Duration) {
    eventually(&format!("{name} scaled to zero"), timeout, || async {
        (scale_state(fns, name).await? == (true, 0)).then_some(())
    })
    .await;
}

/// Waits until the function runs with a ready replica.
pub async fn wait_running(fns: &Api<Function>, name: &str, timeout: Duration) {
    eventually(&format!("{name} running"), timeout, || async {
        (scale_state(fns, name).await? == (false, 1)).then_some(())
    })
    .await;
}

/// A NATS request on `subject` (through a nats-trigger to [`PYTHON`] or [`NODE`]), which must be
/// answered `ok` within 60 s; how long the answer took.
pub async fn nats_call(
    nats: &async_nats::Client,
    subject: &str,
    payload: &'static str,
) -> Duration {
    let t = Instant::now();
    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        nats.request(subject.to_string(), payload.into()),
    )
    .await
    .unwrap_or_else(|_| panic!("no reply on {subject} within 60 s"))
    .unwrap_or_else(|e| panic!("request on {subject}: {e}"));
    let took = t.elapsed();
    assert_eq!(
        reply.payload.as_ref(),
        b"ok",
        "{subject}: the function answered {:?} (headers {:?})",
        String::from_utf8_lossy(&reply.payload),
        reply.headers
    );
    took
}

/// Names of the idle, ready warm pool pods of `runtime` (`python3.11`) in [`NS`].
pub async fn idle_pool_pods(client: &kube::Client, runtime: &str) -> Vec<String> {
    use kubeless_api::warm::{POOL_LABEL, STATE_IDLE, STATE_LABEL, runtime_label};
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let selector = format!(
        "{POOL_LABEL}={},{STATE_LABEL}={STATE_IDLE}",
        runtime_label(runtime)
    );
    let list = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.name)
        .collect()
}
