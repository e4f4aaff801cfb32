//! What the scale-to-zero test and bench share: the function manifests, the service processes'
//! environment, and reading a Function's scale state.

use std::time::Duration;

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
