#![cfg(test)]
//! Field ownership as a real API server keeps it: `metadata.managedFields` after every kind of
//! write, server-side apply removing what a manager stops applying, conflicts (409 with the
//! real message and causes) and `force`, shared ownership of equal values, keyed lists owned
//! item by item (built-in containers, a CRD's `x-kubernetes-list-type: map`), the upgrade from
//! client-side `kubectl apply`, the reset of managed fields, and the fieldManager length limit.

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The managedFields entries of an object, as JSON.
fn managed(obj: &impl serde::Serialize) -> Vec<Value> {
    let v = serde_json::to_value(obj).unwrap();
    v.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The entry of `manager` with `operation` on the object itself (not a subresource).
fn entry<'a>(entries: &'a [Value], manager: &str, operation: &str) -> Option<&'a Value> {
    entries.iter().find(|e| {
        e["manager"] == manager && e["operation"] == operation && e["subresource"].is_null()
    })
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn api_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn managed_fields_follow_create_update_patch_and_apply() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Create: an Update entry owning what it set; added maps are owned themselves (`.`).
    let pp = PostParams {
        field_manager: Some("creator".into()),
        ..PostParams::default()
    };
    let created = cms
        .create(
            &pp,
            &serde_json::from_value(cm("c", json!({"a": "1", "b": "2"}))).unwrap(),
        )
        .await
        .unwrap();
    let mf = managed(&created);
    assert_eq!(mf.len(), 1, "{mf:?}");
    assert_eq!(mf[0]["manager"], "creator");
    assert_eq!(mf[0]["operation"], "Update");
    assert_eq!(mf[0]["apiVersion"], "v1");
    assert_eq!(mf[0]["fieldsType"], "FieldsV1");
    assert!(mf[0]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        mf[0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}})
    );
    // GET returns them too.
    assert_eq!(managed(&cms.get("c").await.unwrap()), mf);

    // A PUT by another manager takes the field it changes.
    let mut changed = created.clone();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("a".into(), "10".into());
    let pp = PostParams {
        field_manager: Some("updater".into()),
        ..PostParams::default()
    };
    let updated = cms.replace("c", &pp, &changed).await.unwrap();
    let mf = managed(&updated);
    assert_eq!(
        entry(&mf, "creator", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {".": {}, "f:b": {}}})
    );
    assert_eq!(
        entry(&mf, "updater", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );

    // A merge patch is an Update too, and a write that changes nothing changes nothing.
    let patched = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("labeler".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"l": "x"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        entry(&managed(&patched), "labeler", "Update").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:labels": {".": {}, "f:l": {}}}})
    );
    let again = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("labeler".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"l": "x"}}})),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), patched.resource_version());

    // Apply: an Apply entry with exactly the applied fields.
    let applied = cms
        .patch(
            "c",
            &PatchParams::apply("applier"),
            &Patch::Apply(cm("c", json!({"z": "26"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        entry(&managed(&applied), "applier", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:z": {}}})
    );
    assert_eq!(managed(&applied).len(), 4);
    server.shutdown().await;
}

#[tokio::test]
async fn apply_removes_dropped_fields_unless_someone_else_owns_them() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = PatchParams::apply("first");
    cms.patch(
        "d",
        &first,
        &Patch::Apply(cm("d", json!({"a": "1", "b": "2", "c": "3"}))),
    )
    .await
    .unwrap();
    // Another manager applies c with the same value: shared, no conflict.
    cms.patch(
        "d",
        &PatchParams::apply("second"),
        &Patch::Apply(cm("d", json!({"c": "3"}))),
    )
    .await
    .unwrap();
    // The first drops b and c: b goes, c stays (second still owns it).
    let d = cms
        .patch("d", &first, &Patch::Apply(cm("d", json!({"a": "1"}))))
        .await
        .unwrap();
    let data = d.data.unwrap();
    assert_eq!(data.get("a").map(String::as_str), Some("1"));
    assert_eq!(data.get("b"), None);
    assert_eq!(data.get("c").map(String::as_str), Some("3"));
    let mf = managed(&cms.get("d").await.unwrap());
    assert_eq!(
        entry(&mf, "first", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        entry(&mf, "second", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:c": {}}})
    );
    // A field set by a plain update is not removed by an applier that never applied it.
    cms.patch(
        "d",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"u": "x"}})),
    )
    .await
    .unwrap();
    let d = cms
        .patch("d", &first, &Patch::Apply(cm("d", json!({"a": "1"}))))
        .await
        .unwrap();
    assert_eq!(d.data.unwrap().get("u").map(String::as_str), Some("x"));
    server.shutdown().await;
}

#[tokio::test]
async fn conflicts_are_409_with_causes_and_force_takes_ownership() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.patch(
        "e",
        &PatchParams::apply("owner"),
        &Patch::Apply(cm("e", json!({"a": "1", "b": "2"}))),
    )
    .await
    .unwrap();
    // Same values: shared ownership, no conflict.
    cms.patch(
        "e",
        &PatchParams::apply("sharer"),
        &Patch::Apply(cm("e", json!({"a": "1"}))),
    )
    .await
    .unwrap();
    // One different value: 409 naming both owners of a.
    let err = cms
        .patch(
            "e",
            &PatchParams::apply("other"),
            &Patch::Apply(cm("e", json!({"a": "9"}))),
        )
        .await
        .unwrap_err();
    let status = api_status(err);
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Apply failed with 2 conflicts: conflicts with \"owner\":\n- .data.a\nconflicts with \"sharer\":\n- .data.a"
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes.len(), 2);
    assert!(causes.iter().all(|c| c.reason == "FieldManagerConflict"
        && c.field == ".data.a"
        && c.message.starts_with("conflict with \"")));
    // One conflict with an updater: the real single-conflict wording, `using` its version.
    cms.patch(
        "e",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"data": {"b": "3"}})),
    )
    .await
    .unwrap();
    let err = cms
        .patch(
            "e",
            &PatchParams::apply("owner"),
            &Patch::Apply(cm("e", json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(err).message,
        "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.b"
    );
    // Nothing was written by the refused applies.
    let e = cms.get("e").await.unwrap();
    assert_eq!(e.data.as_ref().unwrap().get("a").unwrap(), "1");
    assert_eq!(e.data.as_ref().unwrap().get("b").unwrap(), "3");
    // Forced: the value changes and the field moves to the forcing manager.
    let forced = cms
        .patch(
            "e",
            &PatchParams::apply("other").force(),
            &Patch::Apply(cm("e", json!({"a": "9"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap().get("a").unwrap(), "9");
    let mf = managed(&forced);
    assert_eq!(
        entry(&mf, "other", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    // The owner lost b to the editor before and a now: it owns nothing and is gone, as is
    // the sharer.
    assert!(entry(&mf, "owner", "Apply").is_none(), "{mf:?}");
    assert!(entry(&mf, "sharer", "Apply").is_none(), "{mf:?}");
    assert_eq!(
        entry(&mf, "editor", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:b": {}}})
    );
    server.shutdown().await;
}

fn deployment(containers: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}})
}

#[tokio::test]
async fn containers_are_owned_item_by_item() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deps.patch(
        "web",
        &PatchParams::apply("app"),
        &Patch::Apply(deployment(json!([{"name": "app", "image": "app:1"}]))),
    )
    .await
    .unwrap();
    // A second manager adds its own container; it shares the keys it repeats.
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("mesh"),
            &Patch::Apply(deployment(
                json!([{"name": "proxy", "image": "proxy:1", "ports": [{"containerPort": 15001}]}]),
            )),
        )
        .await
        .unwrap();
    let names: Vec<String> = d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, ["app", "proxy"]);
    let mf = managed(&d);
    let containers = |m: &str| {
        entry(&mf, m, "Apply").unwrap()["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
            ["f:containers"]
            .clone()
    };
    assert_eq!(
        containers("app"),
        json!({"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}})
    );
    assert_eq!(
        containers("mesh"),
        json!({"k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {},
            "f:ports": {"k:{\"containerPort\":15001,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}})
    );
    // The selector is atomic: owned whole.
    assert_eq!(
        entry(&mf, "app", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:selector"],
        json!({})
    );
    // Changing the other manager's container conflicts on that item's field only.
    let err = deps
        .patch(
            "web",
            &PatchParams::apply("app"),
            &Patch::Apply(deployment(json!([
                {"name": "app", "image": "app:2"},
                {"name": "proxy", "image": "proxy:2"}
            ]))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(err).message,
        "Apply failed with 1 conflict: conflict with \"mesh\": .spec.template.spec.containers[name=\"proxy\"].image"
    );
    // The app manager dropping nothing of the mesh's: its container stays when app re-applies.
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("app"),
            &Patch::Apply(deployment(json!([{"name": "app", "image": "app:2"}]))),
        )
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
    assert_eq!(images, ["app:2", "proxy:1"]);
    // The mesh manager stops applying its container: it is removed.
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("mesh"),
            &Patch::Apply(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
            ),
        )
        .await
        .unwrap();
    let names: Vec<String> = d
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["app"]);
    // A write through /scale is an Update of the scale subresource, owning spec.replicas.
    deps.patch_scale(
        "web",
        &PatchParams {
            field_manager: Some("autoscaler".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    let mf = managed(&deps.get("web").await.unwrap());
    let scale = mf.iter().find(|e| e["manager"] == "autoscaler").unwrap();
    assert_eq!(scale["subresource"], "scale");
    assert_eq!(scale["operation"], "Update");
    assert_eq!(scale["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    server.shutdown().await;
}

/// A CRD with a keyed list (`x-kubernetes-list-type: map`), an atomic list and a status.
async fn install_gadgets(client: &Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.ssa.devcluster.io"},
        "spec": {"group": "ssa.devcluster.io", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer"},
                        "parts": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string"}, "count": {"type": "integer"}}}},
                        "tags": {"type": "array", "items": {"type": "string"}}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}});
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(
            crds,
            "gadgets.ssa.devcluster.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ssa.devcluster.io", "v1", "Gadget"),
        "gadgets",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn gadget(spec: Value) -> Value {
    json!({"apiVersion": "ssa.devcluster.io/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": spec})
}

#[tokio::test]
async fn crd_list_map_keys_atomic_lists_and_status_applies() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let gadgets = install_gadgets(&client).await;
    gadgets
        .patch(
            "g",
            &PatchParams::apply("a"),
            &Patch::Apply(gadget(
                json!({"size": 1, "parts": [{"name": "x", "count": 1}], "tags": ["t1"]}),
            )),
        )
        .await
        .unwrap();
    let g = gadgets
        .patch(
            "g",
            &PatchParams::apply("b"),
            &Patch::Apply(gadget(json!({"parts": [{"name": "y", "count": 2}]}))),
        )
        .await
        .unwrap();
    assert_eq!(
        g.data["spec"]["parts"],
        json!([{"name": "x", "count": 1}, {"name": "y", "count": 2}])
    );
    let mf = managed(&g);
    assert_eq!(
        entry(&mf, "a", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:parts": {"k:{\"name\":\"x\"}": {".": {}, "f:count": {}, "f:name": {}}},
            "f:size": {}, "f:tags": {}}})
    );
    // An atomic list is one field: another value from another manager conflicts.
    let err = gadgets
        .patch(
            "g",
            &PatchParams::apply("b"),
            &Patch::Apply(gadget(json!({"tags": ["t2"]}))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(err).message,
        "Apply failed with 1 conflict: conflict with \"a\": .spec.tags"
    );
    // Status applies are tracked on their own, with the subresource named.
    let g = gadgets
        .patch_status(
            "g",
            &PatchParams::apply("a"),
            &Patch::Apply(
                json!({"apiVersion": "ssa.devcluster.io/v1", "kind": "Gadget",
                "metadata": {"name": "g"}, "status": {"phase": "Ready"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(g.data["status"]["phase"], "Ready");
    let mf = managed(&g);
    let status_entry = mf
        .iter()
        .find(|e| e["manager"] == "a" && e["subresource"] == "status")
        .unwrap();
    assert_eq!(status_entry["operation"], "Apply");
    assert_eq!(
        status_entry["fieldsV1"],
        json!({"f:status": {"f:phase": {}}})
    );
    // The main-resource entry of the same manager is untouched.
    assert!(entry(&mf, "a", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:size"].is_object());
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_server_side_apply_takes_over_from_client_side_apply() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // What `kubectl apply` (client-side) sends: the object with its last-applied annotation,
    // under the field manager kubectl-client-side-apply.
    let config = cm("csa", json!({"a": "1", "b": "2"}));
    let mut with_annotation = config.clone();
    with_annotation["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": config.to_string()
    });
    let csa = PostParams {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..PostParams::default()
    };
    let created = cms
        .create(&csa, &serde_json::from_value(with_annotation).unwrap())
        .await
        .unwrap();
    assert_eq!(
        entry(&managed(&created), "kubectl-client-side-apply", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}, "f:metadata": {"f:annotations": {".": {},
            "f:kubectl.kubernetes.io/last-applied-configuration": {}}}})
    );
    // `kubectl apply --server-side` of the same file, one value changed: no conflict, since
    // kubectl set that field itself by client-side apply.
    let ssa = cms
        .patch(
            "csa",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(cm("csa", json!({"a": "10", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(ssa.data.as_ref().unwrap().get("a").unwrap(), "10");
    assert_eq!(
        entry(&managed(&ssa), "kubectl", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}, "f:b": {}}})
    );
    // kubectl then moves the client-side entry into its own Apply entry (a JSON patch of
    // managedFields, the map `data` owned as a node) and applies again: nothing it still
    // applies may go.
    let upgraded = json!([{"op": "replace", "path": "/metadata/managedFields", "value": [
        {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}, "f:a": {}, "f:b": {}},
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}}}}]}]);
    cms.patch(
        "csa",
        &PatchParams {
            field_manager: Some("kubectl".into()),
            ..PatchParams::default()
        },
        &Patch::Json::<()>(serde_json::from_value(upgraded).unwrap()),
    )
    .await
    .unwrap();
    let again = cms
        .patch(
            "csa",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(cm("csa", json!({"a": "10", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        again.data.as_ref().unwrap().get("a").map(String::as_str),
        Some("10")
    );
    assert_eq!(
        again.data.as_ref().unwrap().get("b").map(String::as_str),
        Some("2")
    );
    // The annotation it no longer applies (and nobody else owns) is gone.
    assert!(again.annotations().is_empty(), "{:?}", again.annotations());

    // Another manager gets no such pass.
    let err = cms
        .patch(
            "csa",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(cm("csa", json!({"b": "20"}))),
        )
        .await
        .unwrap_err();
    let status = api_status(err);
    assert_eq!(status.code, 409);
    assert!(status.message.contains(".data.b"), "{}", status.message);

    // Once something else changed a field behind the last-applied annotation, the annotation
    // no longer vouches for it: kubectl conflicts like anyone else.
    let config = cm("csa2", json!({"a": "1"}));
    let mut with_annotation = config.clone();
    with_annotation["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": config.to_string()
    });
    cms.create(&csa, &serde_json::from_value(with_annotation).unwrap())
        .await
        .unwrap();
    cms.patch(
        "csa2",
        &PatchParams {
            field_manager: Some("kubectl-client-side-apply".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"data": {"a": "5"}})),
    )
    .await
    .unwrap();
    let err = cms
        .patch(
            "csa2",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(cm("csa2", json!({"a": "7"}))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(err).message,
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn defaulted_field_ref_api_version_does_not_conflict() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let env = |api_version: Option<&str>| {
        let mut field_ref = json!({"fieldPath": "metadata.name"});
        if let Some(v) = api_version {
            field_ref["apiVersion"] = json!(v);
        }
        deployment(json!([{"name": "app", "image": "app:1",
            "env": [{"name": "POD", "valueFrom": {"fieldRef": field_ref}}]}]))
    };
    // One manager leaves apiVersion out (the server defaults it), another writes it.
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("old-controller"),
            &Patch::Apply(env(None)),
        )
        .await
        .unwrap();
    let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
    let field_ref = c.env.as_ref().unwrap()[0]
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(field_ref.api_version.as_deref(), Some("v1"));
    deps.patch(
        "web",
        &PatchParams::apply("controller"),
        &Patch::Apply(env(Some("v1"))),
    )
    .await
    .unwrap();
    deps.patch(
        "web",
        &PatchParams::apply("old-controller"),
        &Patch::Apply(env(None)),
    )
    .await
    .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn managed_fields_reset_and_manager_name_limit() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.patch(
        "r",
        &PatchParams::apply("m"),
        &Patch::Apply(cm("r", json!({"a": "1"}))),
    )
    .await
    .unwrap();
    // An empty list is ignored (a client unaware of the field cannot clear it by mistake).
    let kept = cms
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": []}})),
        )
        .await
        .unwrap();
    assert!(entry(&managed(&kept), "m", "Apply").is_some());
    // A list of one empty entry clears them.
    let cleared = cms
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/metadata/managedFields", "value": [{}]}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert!(managed(&cleared).is_empty(), "{:?}", managed(&cleared));
    // Managed fields sent in an update replace the stored ones.
    let mut obj = cms.get("r").await.unwrap();
    obj.metadata.managed_fields = Some(vec![serde_json::from_value(json!({
        "manager": "restored", "operation": "Apply", "apiVersion": "v1",
        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}
    }))
    .unwrap()]);
    let replaced = cms
        .replace("r", &PostParams::default(), &obj)
        .await
        .unwrap();
    let mf = managed(&replaced);
    assert_eq!(mf.len(), 1, "{mf:?}");
    assert_eq!(mf[0]["manager"], "restored");
    // Now `restored` owns a: another applier conflicts with it.
    let err = cms
        .patch(
            "r",
            &PatchParams::apply("m"),
            &Patch::Apply(cm("r", json!({"a": "2"}))),
        )
        .await
        .unwrap_err();
    assert_eq!(api_status(err).code, 409);

    // fieldManager is at most 128 bytes, as on the real server (kube-rs checks it before
    // sending, so these requests are sent raw).
    let long = "m".repeat(129);
    let raw = |method: &str, uri: String, content_type: &str, body: Value| {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("Content-Type", content_type)
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap()
    };
    let err = client
        .request::<Value>(raw(
            "PATCH",
            format!("/api/v1/namespaces/default/configmaps/r?fieldManager={long}"),
            "application/apply-patch+yaml",
            cm("r", json!({"a": "1"})),
        ))
        .await
        .unwrap_err();
    let status = api_status(err);
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes"
    );
    let err = client
        .request::<Value>(raw(
            "POST",
            format!("/api/v1/namespaces/default/configmaps?fieldManager={long}"),
            "application/json",
            cm("r2", json!({})),
        ))
        .await
        .unwrap_err();
    assert!(
        api_status(err)
            .message
            .starts_with("CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long")
    );
    let exactly = "m".repeat(128);
    cms.patch(
        "r",
        &PatchParams::apply(&exactly).force(),
        &Patch::Apply(cm("r", json!({"a": "1"}))),
    )
    .await
    .unwrap();
    server.shutdown().await;
}
