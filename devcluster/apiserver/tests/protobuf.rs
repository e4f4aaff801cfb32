#![cfg(test)]
//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl sends them
//! for built-in kinds: encoded with k8s-pb, posted raw, read back as JSON.

use devcluster_apiserver::{ServerConfig, protobuf::envelope, start};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::api::rbac::v1 as pb_rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client};
use prost::Message;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

async fn post(
    client: &Client,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<String, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, PROTOBUF)
        .header(
            http::header::ACCEPT,
            format!("{PROTOBUF}, application/json"),
        )
        .body(body)
        .unwrap();
    client.request_text(req).await
}

fn meta(name: &str) -> Option<ObjectMeta> {
    Some(ObjectMeta {
        name: Some(name.into()),
        labels: [("app".to_string(), "x".to_string())].into(),
        ..Default::default()
    })
}

fn api_code(r: Result<String, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn protobuf_bodies_create_and_replace_builtin_objects() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();

    let secret = pb_core::Secret {
        metadata: meta("s1"),
        data: [("a".to_string(), vec![0, 1, 2, 255])].into(),
        string_data: [("b".to_string(), "plain".to_string())].into(),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    let out = post(
        &client,
        "POST",
        "/api/v1/namespaces/default/secrets",
        envelope("v1", "Secret", secret.encode_to_vec()),
    )
    .await
    .unwrap();
    // The answer is JSON, which client-go accepts.
    let created: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(created["metadata"]["name"], "s1");

    let stored = Api::<Secret>::namespaced(client.clone(), "default")
        .get("s1")
        .await
        .unwrap();
    let data = stored.data.unwrap();
    assert_eq!(data["a"].0, vec![0, 1, 2, 255]);
    assert_eq!(
        data["b"].0,
        b"plain".to_vec(),
        "stringData merged into data"
    );
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));
    assert_eq!(stored.metadata.labels.unwrap()["app"], "x");

    let cm = |v: &str| pb_core::ConfigMap {
        metadata: meta("c1"),
        data: [("k".to_string(), v.to_string())].into(),
        ..Default::default()
    };
    post(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        envelope("v1", "ConfigMap", cm("1").encode_to_vec()),
    )
    .await
    .unwrap();
    // PUT (replace) takes protobuf too.
    post(
        &client,
        "PUT",
        "/api/v1/namespaces/default/configmaps/c1",
        envelope("v1", "ConfigMap", cm("2").encode_to_vec()),
    )
    .await
    .unwrap();
    let stored = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get("c1")
        .await
        .unwrap();
    assert_eq!(stored.data.unwrap()["k"], "2");

    let svc = pb_core::Service {
        metadata: meta("web"),
        spec: Some(pb_core::ServiceSpec {
            ports: vec![pb_core::ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: Some(80),
                target_port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                    r#type: Some(1),
                    int_val: Some(0),
                    str_val: Some("web".into()),
                }),
                node_port: Some(0),
                ..Default::default()
            }],
            selector: [("app".to_string(), "web".to_string())].into(),
            r#type: Some("ClusterIP".into()),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        status: None,
    };
    let out = post(
        &client,
        "POST",
        "/api/v1/namespaces/default/services",
        envelope("v1", "Service", svc.encode_to_vec()),
    )
    .await
    .unwrap();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        out["spec"]["ports"],
        serde_json::json!([{"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web"}]),
        "Go's zero values (nodePort 0, publishNotReadyAddresses false) stay out"
    );
    assert!(
        out["spec"].get("publishNotReadyAddresses").is_none(),
        "{out}"
    );

    let rb = pb_rbac::RoleBinding {
        metadata: meta("rb1"),
        subjects: vec![pb_rbac::Subject {
            kind: Some("ServiceAccount".into()),
            name: Some("default".into()),
            namespace: Some("default".into()),
            ..Default::default()
        }],
        role_ref: Some(pb_rbac::RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: Some("ClusterRole".into()),
            name: Some("view".into()),
        }),
    };
    post(
        &client,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        envelope(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            rb.encode_to_vec(),
        ),
    )
    .await
    .unwrap();
    let stored = Api::<RoleBinding>::namespaced(client.clone(), "default")
        .get("rb1")
        .await
        .unwrap();
    assert_eq!(stored.role_ref.name, "view");
    assert_eq!(stored.subjects.unwrap()[0].kind, "ServiceAccount");
}

#[tokio::test]
async fn protobuf_bodies_keep_validation_and_clear_refusals() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();

    // The decoded object goes through the same validation as JSON: a bad name is a 422.
    let bad = pb_core::ConfigMap {
        metadata: meta("Not_A_Name"),
        ..Default::default()
    };
    let r = post(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        envelope("v1", "ConfigMap", bad.encode_to_vec()),
    )
    .await;
    assert_eq!(api_code(r), 422);

    // Garbage after the content type is a 400, not a panic.
    let r = post(
        &client,
        "POST",
        "/api/v1/namespaces/default/secrets",
        b"k8s\0\xff\xff\xff".to_vec(),
    )
    .await;
    assert_eq!(api_code(r), 400);

    // Kinds without a protobuf mapping keep the 415.
    let r = post(
        &client,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        envelope("apps/v1", "Deployment", Vec::new()),
    )
    .await;
    assert_eq!(api_code(r), 415);

    // So do patches.
    let r = post(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/c1",
        envelope("v1", "ConfigMap", Vec::new()),
    )
    .await;
    assert_eq!(api_code(r), 415);
}

#[tokio::test]
async fn protobuf_access_review_and_token_request() {
    use k8s_pb::api::authentication::v1 as pb_authn;
    use k8s_pb::api::authorization::v1 as pb_authz;

    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();

    let review = pb_authz::SelfSubjectAccessReview {
        spec: Some(pb_authz::SelfSubjectAccessReviewSpec {
            resource_attributes: Some(pb_authz::ResourceAttributes {
                namespace: Some("default".into()),
                verb: Some("create".into()),
                resource: Some("secrets".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = post(
        &client,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            review.encode_to_vec(),
        ),
    )
    .await
    .unwrap();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["status"]["allowed"], true, "{out}");
    assert_eq!(out["spec"]["resourceAttributes"]["resource"], "secrets");

    post(
        &client,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        envelope(
            "v1",
            "ServiceAccount",
            pb_core::ServiceAccount {
                metadata: meta("robot"),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
    )
    .await
    .unwrap();
    let tr = pb_authn::TokenRequest {
        spec: Some(pb_authn::TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = post(
        &client,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/robot/token",
        envelope(
            "authentication.k8s.io/v1",
            "TokenRequest",
            tr.encode_to_vec(),
        ),
    )
    .await
    .unwrap();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        out["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{out}"
    );
}
