#![cfg(test)]
//! CustomResourceDefinitions: registration at run time, schema validation,
//! status and scale subresources, printer columns, server-side apply, and a
//! kube-runtime Controller reconciling a custom resource.

use std::sync::Arc;
use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "test.devcluster.io",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[kube(scale(
    spec_replicas_path = ".spec.replicas",
    status_replicas_path = ".status.replicas"
))]
#[kube(printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#)]
#[kube(printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#)]
pub struct WidgetSpec {
    size: i32,
    color: String,
    #[serde(default)]
    replicas: i32,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    phase: String,
    observed: i32,
    #[serde(default)]
    replicas: i32,
}

async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Widget::crd())
        .await
        .unwrap();
    let established = await_condition(
        crds,
        "widgets.test.devcluster.io",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(10), established)
        .await
        .unwrap()
        .unwrap();
}

fn widget(name: &str, size: i32) -> Widget {
    Widget::new(
        name,
        WidgetSpec {
            size,
            color: "blue".into(),
            replicas: 1,
        },
    )
}

#[tokio::test]
async fn crd_serves_validates_and_prints() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    install_crd(&client).await;

    // Discovery shows the new resource.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "test.devcluster.io",
            "v1",
            "Widget",
        ))
        .unwrap();
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);

    let api: Api<Widget> = Api::namespaced(client.clone(), "default");
    let w = api
        .create(&PostParams::default(), &widget("w1", 3))
        .await
        .unwrap();
    assert_eq!(w.spec.size, 3);

    // Schema validation: wrong type and missing required field give 422.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::erase::<Widget>(&()),
    );
    let bad_type = json!({"apiVersion": "test.devcluster.io/v1", "kind": "Widget", "metadata": {"name": "bad1"}, "spec": {"size": "big", "color": "red"}});
    let err = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad_type).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("spec.size")),
        "{err:?}"
    );
    let missing = json!({"apiVersion": "test.devcluster.io/v1", "kind": "Widget", "metadata": {"name": "bad2"}, "spec": {"size": 1}});
    let err = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(missing).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("spec.color: Required value")),
        "{err:?}"
    );
    // Unknown fields are pruned.
    let extra = json!({"apiVersion": "test.devcluster.io/v1", "kind": "Widget", "metadata": {"name": "extra"}, "spec": {"size": 1, "color": "c", "junk": 1}});
    let created = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(extra).unwrap(),
        )
        .await
        .unwrap();
    assert!(created.data["spec"].get("junk").is_none());

    // Status subresource: status is ignored on the main resource.
    let w = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready", "observed": 1, "replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(w.status.unwrap().phase, "Ready");
    let w = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Hacked", "observed": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(w.status.unwrap().phase, "Ready");

    // Scale subresource declared by the CRD.
    let scale = api.get_scale("w1").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    api.patch_scale(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    assert_eq!(api.get("w1").await.unwrap().spec.replicas, 4);

    // Table output with the CRD's printer columns.
    let req = http::Request::get("/apis/test.devcluster.io/v1/namespaces/default/widgets")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value =
        serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Size", "Phase"]);
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "w1")
        .unwrap();
    assert_eq!(row["cells"], json!(["w1", 3, "Ready"]));

    // Deleting the CRD removes the resource and its objects.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.test.devcluster.io", &Default::default())
        .await
        .unwrap();
    let err = api.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn server_side_apply() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    install_crd(&client).await;
    let api: Api<Widget> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("test-manager");
    // Creates when missing.
    let applied = json!({"apiVersion": "test.devcluster.io/v1", "kind": "Widget", "metadata": {"name": "ssa", "labels": {"a": "1"}}, "spec": {"size": 1, "color": "red"}});
    let w = api
        .patch("ssa", &pp, &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(w.spec.size, 1);
    // A later apply by the same manager: what it no longer applies (label a) is removed, as
    // on a real server, since nobody else owns it.
    let applied = json!({"apiVersion": "test.devcluster.io/v1", "kind": "Widget", "metadata": {"name": "ssa", "labels": {"b": "2"}}, "spec": {"size": 2, "color": "red"}});
    let w = api
        .patch("ssa", &pp.clone().force(), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(w.spec.size, 2);
    assert_eq!(w.labels().get("a"), None);
    assert_eq!(w.labels().get("b").map(String::as_str), Some("2"));
    let managed = w.managed_fields();
    assert_eq!(managed.len(), 1, "{managed:?}");
    assert_eq!(managed[0].manager.as_deref(), Some("test-manager"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
    // Status apply through /status.
    let st = json!({"apiVersion": "test.devcluster.io/v1", "kind": "Widget", "status": {"phase": "Applied", "observed": 2}});
    let w = api
        .patch_status("ssa", &pp, &Patch::Apply(&st))
        .await
        .unwrap();
    assert_eq!(w.status.unwrap().phase, "Applied");
    // Apply without a field manager is the real server's 422 on PatchOptions.
    let err = api
        .patch("ssa", &PatchParams::default(), &Patch::Apply(&applied))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422
            && s.message == "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"),
        "{err:?}"
    );
    // Built-in kinds too, with strategic merge on container lists.
    let deps: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
        "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}}});
    deps.patch("d", &pp, &Patch::Apply(&d)).await.unwrap();
    let smp =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:2"}]}}}});
    let d = deps
        .patch("d", &PatchParams::default(), &Patch::Strategic(smp))
        .await
        .unwrap();
    let images: Vec<String> = d
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert_eq!(images, ["a:1", "b:2"]);
    server.shutdown().await;
}

#[derive(Clone)]
struct Ctx {
    client: Client,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &w.namespace().unwrap_or_default());
    let status = json!({"status": {"phase": "Reconciled", "observed": w.spec.size}});
    api.patch_status(
        &w.name_any(),
        &PatchParams::default(),
        &Patch::Merge(status),
    )
    .await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Widget>, _: &ReconcileError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

#[tokio::test]
async fn controller_reconciles_custom_resource() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    install_crd(&client).await;
    let api: Api<Widget> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &widget("before-start", 5))
        .await
        .unwrap();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
    });
    let controller = tokio::spawn(
        Controller::new(api.clone(), Default::default())
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {}),
    );
    api.create(&PostParams::default(), &widget("after-start", 7))
        .await
        .unwrap();
    let mut done = false;
    for _ in 0..100 {
        let a = api.get("before-start").await.unwrap();
        let b = api.get("after-start").await.unwrap();
        let ok = |w: &Widget, size| {
            w.status
                .as_ref()
                .is_some_and(|s| s.phase == "Reconciled" && s.observed == size)
        };
        if ok(&a, 5) && ok(&b, 7) {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(done, "controller did not reconcile both widgets");
    // A spec change is reconciled again.
    api.patch(
        "after-start",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 9}})),
    )
    .await
    .unwrap();
    let mut updated = false;
    for _ in 0..100 {
        if api
            .get("after-start")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.observed == 9)
        {
            updated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(updated);
    controller.abort();
    server.shutdown().await;
}
