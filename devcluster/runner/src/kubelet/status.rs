//! What the kubelet reports: the Pod's status, written whenever its containers' state
//! changes, and Events about its containers.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use crate::ctx::{Ctx, is_not_found};
use crate::podstatus::compute_status;

use super::{PodEnv, Reporter};

fn status_patch(status: &PodStatus) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(status)?;
    if let Some(obj) = value.as_object_mut() {
        // A merge patch keeps fields it does not mention: clear them explicitly.
        for key in ["reason", "message"] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    Ok(serde_json::json!({ "status": value }))
}

/// Writes the pod status whenever the runtime state changes.
pub(super) async fn status_writer(
    ctx: Arc<Ctx>,
    ns: String,
    name: String,
    rep: Arc<Reporter>,
    stop: CancellationToken,
) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut last: Option<PodStatus> = None;
    let mut conditions: Option<Vec<PodCondition>> = None;
    loop {
        tokio::select! {
            _ = rep.notify.notified() => {}
            _ = stop.cancelled() => return,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        loop {
            let Some(rt) = rep.snapshot() else { return };
            let status = compute_status(&rt, conditions.as_deref(), Timestamp::now());
            if last.as_ref() == Some(&status) {
                break;
            }
            let result = match status_patch(&status) {
                Ok(p) => {
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&p))
                        .await
                }
                Err(e) => {
                    tracing::error!(error = %e, "serializing pod status");
                    break;
                }
            };
            match result {
                Ok(_) => {
                    conditions = status.conditions.clone();
                    last = Some(status);
                    break;
                }
                Err(e) if is_not_found(&e) => return,
                Err(e) => {
                    tracing::warn!(%ns, pod = %name, error = %e, "writing pod status failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// An Event about one of the pod's containers, as the kubelet writes them.
pub(super) async fn pod_event(
    env: &PodEnv,
    container: &str,
    warning: bool,
    reason: &str,
    message: &str,
) {
    use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    let now = Time(Timestamp::now());
    let ns = env.facts.namespace.clone();
    let ev = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", env.facts.name)),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(env.facts.name.clone()),
            namespace: Some(ns.clone()),
            uid: Some(env.facts.uid.clone()),
            field_path: Some(format!("spec.containers{{{container}}}")),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(env.ctx.config.node_name().to_string()),
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(env.ctx.client.clone(), &ns);
    if let Err(e) = api.create(&kube::api::PostParams::default(), &ev).await {
        tracing::debug!(error = %e, "pod event not written");
    }
}
