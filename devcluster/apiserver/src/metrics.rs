//! The `metrics.k8s.io/v1beta1` API that metrics-server serves on a real cluster and
//! `kubectl top pod|node` reads: PodMetrics (per namespace and across namespaces, one
//! by name) and NodeMetrics. The numbers come from the pod runner through
//! [`MetricsBackend`] (CPU rates and resident memory measured from `/proc`); without a
//! runner there are no pod metrics and no node.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::app::{App, Q, json_response};
pub use crate::backend::{ContainerUsage, MetricsBackend, MetricsSlot, Usage};
use crate::errors::ApiError;
use crate::registry::GroupResource;
use crate::selectors::LabelSelector;

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";

/// The APIResourceList of `/apis/metrics.k8s.io/v1beta1`.
pub fn api_resources() -> Vec<Value> {
    vec![
        json!({"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]}),
        json!({"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}),
    ]
}

/// CPU as metrics-server writes it: nanocores.
fn cpu(cores: f64) -> String {
    format!("{}n", (cores * 1e9).round() as u64)
}

/// Memory as metrics-server writes it: KiB.
fn memory(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

fn rfc3339(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn window(d: Duration) -> String {
    // Go's Duration.String() for whole and fractional seconds ("5s", "5.002s").
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

fn labels_of(obj: &Value) -> Value {
    obj.pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// One PodMetrics per running pod in the store (in `ns`, or all), with the pod's labels.
fn pod_metrics(app: &App, ns: Option<&str>) -> Vec<Value> {
    let Some(backend) = app.metrics.get() else {
        return Vec::new();
    };
    let mut by_pod: std::collections::BTreeMap<(String, String), Vec<ContainerUsage>> =
        Default::default();
    for c in backend.containers() {
        if ns.is_none_or(|n| n == c.namespace) {
            by_pod
                .entry((c.namespace.clone(), c.pod.clone()))
                .or_default()
                .push(c);
        }
    }
    let pods = GroupResource::new("", "pods");
    let now = rfc3339(SystemTime::now());
    by_pod
        .into_iter()
        .filter_map(|((ns, name), containers)| {
            let pod = app.store.get(&pods, &ns, &name)?;
            // The window of the pod is its latest container's.
            let latest = containers.iter().map(|c| c.usage).max_by_key(|u| u.timestamp)?;
            let cs: Vec<Value> = containers
                .iter()
                .map(|c| {
                    json!({"name": c.container, "usage": {
                        "cpu": cpu(c.usage.cpu_cores), "memory": memory(c.usage.memory_bytes)}})
                })
                .collect();
            Some(json!({
                "kind": "PodMetrics",
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": now, "labels": labels_of(&pod)},
                "timestamp": rfc3339(latest.timestamp),
                "window": window(latest.window),
                "containers": cs,
            }))
        })
        .collect()
}

fn node_metrics(app: &App) -> Vec<Value> {
    let Some((name, usage)) = app.metrics.get().and_then(|b| b.node()) else {
        return Vec::new();
    };
    let node = app
        .store
        .get(&GroupResource::new("", "nodes"), "", &name)
        .map(|n| labels_of(&n))
        .unwrap_or_else(|| json!({}));
    vec![json!({
        "kind": "NodeMetrics",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": name, "creationTimestamp": rfc3339(SystemTime::now()), "labels": node},
        "timestamp": rfc3339(usage.timestamp),
        "window": window(usage.window),
        "usage": {"cpu": cpu(usage.cpu_cores), "memory": memory(usage.memory_bytes)},
    })]
}

fn list(kind: &str, items: Vec<Value>, q: &Q) -> Result<Value, ApiError> {
    let sel = match q.get("labelSelector") {
        Some(s) => LabelSelector::parse(s).map_err(ApiError::bad_request)?,
        None => LabelSelector::default(),
    };
    let items: Vec<Value> = items.into_iter().filter(|i| sel.matches(i)).collect();
    Ok(json!({
        "kind": kind,
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {},
        "items": items,
    }))
}

fn one(items: Vec<Value>, resource: &str, name: &str) -> Result<Value, ApiError> {
    items
        .into_iter()
        .find(|i| i.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| ApiError::not_found(&GroupResource::new(GROUP, resource), name))
}

/// Serves `rest`, the path after `/apis/metrics.k8s.io/v1beta1/`. GET only, as
/// metrics-server.
pub fn handle(
    app: &Arc<App>,
    method: &http::Method,
    rest: &[&str],
    q: &Q,
) -> Result<axum::response::Response, ApiError> {
    if method != http::Method::GET {
        return Err(ApiError::method_not_allowed());
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return Err(ApiError::method_not_allowed());
    }
    let body = match rest {
        ["pods"] => list("PodMetricsList", pod_metrics(app, None), q)?,
        ["namespaces", ns, "pods"] => list("PodMetricsList", pod_metrics(app, Some(ns)), q)?,
        ["namespaces", ns, "pods", name] => one(pod_metrics(app, Some(ns)), "pods", name)?,
        ["nodes"] => list("NodeMetricsList", node_metrics(app), q)?,
        ["nodes", name] => one(node_metrics(app), "nodes", name)?,
        _ => return Err(ApiError::path_not_found()),
    };
    Ok(json_response(200, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_windows_as_metrics_server_writes_them() {
        assert_eq!(cpu(0.0123), "12300000n");
        assert_eq!(memory(10 * 1024 * 1024 + 5), "10240Ki");
        assert_eq!(window(Duration::from_secs(5)), "5s");
        assert_eq!(window(Duration::from_millis(5250)), "5.25s");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400);
        assert_eq!(rfc3339(t), "1970-01-02T00:00:00Z");
    }
}
