//! `pods/log`: the pod and container are checked here, the log itself is read by
//! [`devcluster_streaming::logs`] from the files the runner writes.

use axum::response::Response;
use devcluster_streaming::logs::{self, LogError};
use serde_json::Value;

use crate::app::{App, Q};
use crate::errors::ApiError;
use crate::registry::GroupResource;

fn names(pod: &Value, field: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub async fn handle(app: &App, ns: &str, name: &str, q: &Q) -> Result<Response, ApiError> {
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let containers = names(&pod, "containers");
    let all: Vec<String> = containers
        .iter()
        .cloned()
        .chain(names(&pod, "initContainers"))
        .collect();
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if all.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None => {
            let default = pod
                .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
                .and_then(Value::as_str)
                .map(str::to_string);
            default
                .or_else(|| containers.first().cloned())
                .ok_or_else(|| ApiError::bad_request(format!("pod {name} has no containers")))?
        }
    };
    let store = app.store.clone();
    let uid = pod.pointer("/metadata/uid").cloned();
    let (ns2, name2) = (ns.to_string(), name.to_string());
    let alive = move || {
        store
            .get(&gr, &ns2, &name2)
            .is_some_and(|p| p.pointer("/metadata/uid").cloned() == uid)
    };
    logs::read(&app.logs_dir, ns, name, &container, q, alive)
        .await
        .map_err(|e| match e {
            LogError::BadRequest(m) => ApiError::bad_request(m),
            LogError::Invalid(cause) => ApiError::invalid("PodLogOptions", "", name, &[cause]),
        })
}
