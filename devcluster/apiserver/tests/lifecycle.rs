#![cfg(test)]
//! Deletion: finalizers, ownerReference cascade (background, foreground, orphan), namespaces.

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn make(
    api: &Api<ConfigMap>,
    name: &str,
    owner: Option<&ConfigMap>,
    finalizers: &[&str],
) -> ConfigMap {
    let mut obj = json!({"metadata": {"name": name, "finalizers": finalizers}});
    if let Some(o) = owner {
        obj["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid, "blockOwnerDeletion": true}]);
    }
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap()
}

async fn gone(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_none()
}

#[tokio::test]
async fn finalizers_hold_objects() {
    let server = start(ServerConfig::default()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    make(&api, "held", None, &["example.com/cleanup"]).await;
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let held = api.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    // Deleting again keeps it; removing the finalizer lets it go.
    api.delete("held", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("held").await.unwrap().is_some());
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert!(gone(&api, "held").await);
    server.shutdown().await;
}

#[tokio::test]
async fn cascade_background_foreground_orphan() {
    let server = start(ServerConfig::default()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");

    // Background: owner goes at once, dependents (and theirs) follow.
    let owner = make(&api, "bg-owner", None, &[]).await;
    let child = make(&api, "bg-child", Some(&owner), &[]).await;
    make(&api, "bg-grandchild", Some(&child), &[]).await;
    api.delete("bg-owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(gone(&api, "bg-owner").await);
    eventually("background cascade", || async {
        gone(&api, "bg-child").await && gone(&api, "bg-grandchild").await
    })
    .await;

    // Foreground: the owner stays (deletionTimestamp, foregroundDeletion) until dependents are gone.
    let owner = make(&api, "fg-owner", None, &[]).await;
    make(&api, "fg-child", Some(&owner), &["example.com/slow"]).await;
    api.delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = api.get("fg-owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(
        o.metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("child marked for deletion", || async {
        api.get("fg-child")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        api.get_opt("fg-owner").await.unwrap().is_some(),
        "owner must wait for its dependents"
    );
    api.patch(
        "fg-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("foreground owner removed", || async {
        gone(&api, "fg-owner").await && gone(&api, "fg-child").await
    })
    .await;

    // Orphan: dependents stay, without the owner reference.
    let owner = make(&api, "or-owner", None, &[]).await;
    make(&api, "or-child", Some(&owner), &[]).await;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    api.delete("or-owner", &dp).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let child = api.get("or-child").await.unwrap();
    assert!(
        child
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client: Client = server.client().await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "tmp"}})).unwrap(),
    )
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    make(&api, "one", None, &[]).await;
    make(&api, "two", None, &["example.com/x"]).await;
    nss.delete("tmp", &DeleteParams::default()).await.unwrap();
    let ns = nss.get("tmp").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    // New content is refused while terminating.
    let err = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "three"}})).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err:?}"
    );
    eventually("contents deleted", || async { gone(&api, "one").await }).await;
    assert!(
        nss.get_opt("tmp").await.unwrap().is_some(),
        "namespace waits for the finalized object"
    );
    api.patch(
        "two",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("namespace removed", || async {
        nss.get_opt("tmp").await.unwrap().is_none()
    })
    .await;
    server.shutdown().await;
}
