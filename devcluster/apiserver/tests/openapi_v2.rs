#![cfg(test)]
//! `/openapi/v2`: a Swagger 2.0 document with every kind, built-in and custom, named by
//! `x-kubernetes-group-version-kind`, nullable fields keeping their type; served as JSON and
//! in the protobuf kubectl asks for, and 406 for anything else. (`kubectl explain --output
//! plaintext-openapiv2` against it is in the kubectl script.)

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::client::Body;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

fn get(accept: &str) -> http::Request<Body> {
    http::Request::get("/openapi/v2")
        .header("Accept", accept)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn openapi_v2_describes_builtin_and_custom_kinds() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.openapi.devcluster.io"},
        "spec": {"group": "openapi.devcluster.io", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "description": "What the thing is.", "properties": {
                        "note": {"type": "string", "nullable": true, "description": "May be null."},
                        "count": {"type": "integer", "format": "int32", "nullable": true}}}}}}}]}});
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
            "things.openapi.devcluster.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();

    let text = client
        .request_text(
            http::Request::get("/openapi/v2")
                .header("Accept", "application/json")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    let thing = &doc["definitions"]["io.devcluster.openapi.v1.Thing"];
    assert_eq!(
        thing["x-kubernetes-group-version-kind"],
        json!([{"group": "openapi.devcluster.io", "version": "v1", "kind": "Thing"}])
    );
    let spec = &thing["properties"]["spec"]["properties"];
    assert_eq!(
        spec["note"],
        json!({"type": "string", "description": "May be null."})
    );
    assert_eq!(spec["count"], json!({"type": "integer", "format": "int32"}));
    assert_eq!(thing["properties"]["metadata"]["type"], "object");
    let cm = &doc["definitions"]["io.k8s.api.core.v1.ConfigMap"];
    assert_eq!(
        cm["x-kubernetes-group-version-kind"],
        json!([{"group": "", "version": "v1", "kind": "ConfigMap"}])
    );
    assert_eq!(
        cm["properties"]["data"]["additionalProperties"]["type"],
        "string"
    );
    // The CRD kind refers to JSONSchemaProps, which is among the definitions.
    assert!(doc["definitions"]["io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"].is_object());
    assert!(!text.contains("#/components/") && !text.contains("#/$defs/"));
    assert!(
        doc["paths"]["/apis/openapi.devcluster.io/v1/namespaces/{namespace}/things"]["post"]
            .is_object()
    );

    // What kubectl asks for: gnostic's protobuf.
    let res = client
        .send(get(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    let bytes = res.into_body().collect_bytes().await.unwrap();
    // Field 1 (swagger), length 3, "2.0".
    assert_eq!(&bytes[..5], b"\x0a\x032.0");
    assert!(
        bytes
            .windows(b"io.devcluster.openapi.v1.Thing".len())
            .any(|w| w == b"io.devcluster.openapi.v1.Thing")
    );

    // Anything else: 406.
    let res = client.send(get("application/xml")).await.unwrap();
    assert_eq!(res.status(), 406);
    server.shutdown().await;
}
