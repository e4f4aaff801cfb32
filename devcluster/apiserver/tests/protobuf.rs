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
        "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
        envelope("networking.k8s.io/v1", "Ingress", Vec::new()),
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

mod workloads {
    //! The kinds holding a pod template: what `kubectl create deployment|job|cronjob`
    //! sends. Bodies carry Go's zero values for every non-pointer field, as
    //! gogo-protobuf writes them, and must store exactly what the same object sent as
    //! JSON stores.

    use super::*;
    use k8s_pb::api::apps::v1 as pb_apps;
    use k8s_pb::api::batch::v1 as pb_batch;
    use k8s_pb::apimachinery::pkg::api::resource::Quantity;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::{Value, json};

    fn int(i: i32) -> Option<IntOrString> {
        Some(IntOrString {
            r#type: Some(0),
            int_val: Some(i),
            str_val: Some(String::new()),
        })
    }

    fn string(s: &str) -> Option<IntOrString> {
        Some(IntOrString {
            r#type: Some(1),
            int_val: Some(0),
            str_val: Some(s.into()),
        })
    }

    fn q(s: &str) -> Quantity {
        Quantity {
            string: Some(s.into()),
        }
    }

    /// A container as kubectl encodes it: every non-pointer field written.
    fn container() -> pb_core::Container {
        pb_core::Container {
            name: Some("app".into()),
            image: Some("busybox".into()),
            command: vec!["sleep".into(), "3600".into()],
            working_dir: Some(String::new()),
            ports: vec![pb_core::ContainerPort {
                name: Some("http".into()),
                host_port: Some(0),
                container_port: Some(8080),
                protocol: Some("TCP".into()),
                host_ip: Some(String::new()),
            }],
            env: vec![pb_core::EnvVar {
                name: Some("A".into()),
                value: Some("1".into()),
                value_from: None,
            }],
            resources: Some(pb_core::ResourceRequirements {
                limits: [
                    ("cpu".to_string(), q("500m")),
                    ("memory".to_string(), q("64Mi")),
                ]
                .into(),
                requests: [("cpu".to_string(), q("100m"))].into(),
                claims: vec![],
            }),
            readiness_probe: Some(pb_core::Probe {
                handler: Some(pb_core::ProbeHandler {
                    http_get: Some(pb_core::HttpGetAction {
                        path: Some("/healthz".into()),
                        port: string("http"),
                        host: Some(String::new()),
                        scheme: Some(String::new()),
                        http_headers: vec![],
                    }),
                    ..Default::default()
                }),
                initial_delay_seconds: Some(0),
                timeout_seconds: Some(0),
                period_seconds: Some(5),
                success_threshold: Some(0),
                failure_threshold: Some(0),
                termination_grace_period_seconds: None,
            }),
            termination_message_path: Some(String::new()),
            termination_message_policy: Some(String::new()),
            image_pull_policy: Some(String::new()),
            stdin: Some(false),
            stdin_once: Some(false),
            tty: Some(false),
            ..Default::default()
        }
    }

    fn pod_spec(restart: &str) -> pb_core::PodSpec {
        pb_core::PodSpec {
            containers: vec![container()],
            restart_policy: Some(restart.into()),
            dns_policy: Some(String::new()),
            service_account_name: Some(String::new()),
            service_account: Some(String::new()),
            node_name: Some(String::new()),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            hostname: Some(String::new()),
            subdomain: Some(String::new()),
            scheduler_name: Some(String::new()),
            priority_class_name: Some(String::new()),
            ..Default::default()
        }
    }

    fn template(restart: &str) -> Option<pb_core::PodTemplateSpec> {
        Some(pb_core::PodTemplateSpec {
            metadata: meta("unused").map(|m| ObjectMeta { name: None, ..m }),
            spec: Some(pod_spec(restart)),
        })
    }

    /// The same objects as JSON, written the way `kubectl create --dry-run=client -o json`
    /// prints them.
    fn json_container() -> Value {
        json!({
            "name": "app", "image": "busybox", "command": ["sleep", "3600"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"}],
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "100m"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5}
        })
    }

    fn json_template(restart: &str) -> Value {
        json!({
            "metadata": {"creationTimestamp": null, "labels": {"app": "x"}},
            "spec": {"containers": [json_container()], "restartPolicy": restart}
        })
    }

    async fn post_json(client: &Client, path: &str, body: Value) -> Value {
        let req = http::Request::builder()
            .method("POST")
            .uri(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
    }

    /// The stored object minus what differs by name (metadata, status).
    fn spec(v: &Value) -> Value {
        v["spec"].clone()
    }

    #[tokio::test]
    async fn deployment_job_cronjob_from_protobuf_equal_their_json_twins() {
        let server = start(ServerConfig::default()).await.unwrap();
        let client = server.client().await.unwrap();

        let deploy = pb_apps::Deployment {
            metadata: meta("web-pb"),
            spec: Some(pb_apps::DeploymentSpec {
                replicas: Some(0),
                selector: Some(LabelSelector {
                    match_labels: [("app".to_string(), "x".to_string())].into(),
                    match_expressions: vec![],
                }),
                template: template("Always"),
                strategy: Some(pb_apps::DeploymentStrategy {
                    r#type: Some("RollingUpdate".into()),
                    rolling_update: Some(pb_apps::RollingUpdateDeployment {
                        max_unavailable: int(1),
                        max_surge: string("25%"),
                    }),
                }),
                min_ready_seconds: Some(0),
                revision_history_limit: None,
                paused: Some(false),
                progress_deadline_seconds: None,
            }),
            status: Some(Default::default()),
        };
        let path = "/apis/apps/v1/namespaces/default/deployments";
        let from_pb: Value = serde_json::from_str(
            &post(
                &client,
                "POST",
                path,
                envelope("apps/v1", "Deployment", deploy.encode_to_vec()),
            )
            .await
            .unwrap(),
        )
        .unwrap();
        let from_json = post_json(
            &client,
            path,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web-json", "labels": {"app": "x"}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "x"}},
                    "template": json_template("Always"),
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}}
                }
            }),
        )
        .await;
        assert_eq!(spec(&from_pb), spec(&from_json));
        assert_eq!(from_pb["spec"]["replicas"], 0, "a pointer's zero is kept");
        assert_eq!(
            from_pb["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "64Mi"
        );
        assert_eq!(
            from_pb["metadata"]["labels"], from_json["metadata"]["labels"],
            "{from_pb}"
        );

        // PUT (replace) takes protobuf too, with the same validation as JSON.
        let mut replaced = deploy.clone();
        replaced.metadata.as_mut().unwrap().resource_version =
            from_pb["metadata"]["resourceVersion"]
                .as_str()
                .map(String::from);
        replaced.spec.as_mut().unwrap().replicas = Some(2);
        let out: Value = serde_json::from_str(
            &post(
                &client,
                "PUT",
                &format!("{path}/web-pb"),
                envelope("apps/v1", "Deployment", replaced.encode_to_vec()),
            )
            .await
            .unwrap(),
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 2);
        let mut invalid = replaced.clone();
        invalid.metadata.as_mut().unwrap().resource_version = None;
        invalid.spec.as_mut().unwrap().template = template("Never");
        let r = post(
            &client,
            "PUT",
            &format!("{path}/web-pb"),
            envelope("apps/v1", "Deployment", invalid.encode_to_vec()),
        )
        .await;
        assert_eq!(api_code(r), 422, "a Deployment's pods must restart Always");

        let job_spec = |restart: &str| pb_batch::JobSpec {
            backoff_limit: Some(0),
            template: template(restart),
            ..Default::default()
        };
        let job = pb_batch::Job {
            metadata: meta("job-pb"),
            spec: Some(job_spec("Never")),
            status: None,
        };
        let path = "/apis/batch/v1/namespaces/default/jobs";
        let from_pb: Value = serde_json::from_str(
            &post(
                &client,
                "POST",
                path,
                envelope("batch/v1", "Job", job.encode_to_vec()),
            )
            .await
            .unwrap(),
        )
        .unwrap();
        let from_json = post_json(
            &client,
            path,
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "job-json", "labels": {"app": "x"}},
                "spec": {"backoffLimit": 0, "template": json_template("Never")}
            }),
        )
        .await;
        // The selector and its label are generated from each Job's own uid.
        let strip = |v: &Value| {
            let mut s = spec(v);
            s.as_object_mut().unwrap().remove("selector");
            let labels = s["template"]["metadata"]["labels"].as_object_mut().unwrap();
            labels.retain(|k, _| k == "app");
            s
        };
        assert_eq!(strip(&from_pb), strip(&from_json));
        assert_eq!(from_pb["spec"]["backoffLimit"], 0);

        let cron = pb_batch::CronJob {
            metadata: meta("cron-pb"),
            spec: Some(pb_batch::CronJobSpec {
                schedule: Some("*/5 * * * *".into()),
                concurrency_policy: Some(String::new()),
                job_template: Some(pb_batch::JobTemplateSpec {
                    metadata: Some(ObjectMeta::default()),
                    spec: Some(job_spec("OnFailure")),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let path = "/apis/batch/v1/namespaces/default/cronjobs";
        let from_pb: Value = serde_json::from_str(
            &post(
                &client,
                "POST",
                path,
                envelope("batch/v1", "CronJob", cron.encode_to_vec()),
            )
            .await
            .unwrap(),
        )
        .unwrap();
        let from_json = post_json(
            &client,
            path,
            json!({
                "apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "cron-json", "labels": {"app": "x"}},
                "spec": {
                    "schedule": "*/5 * * * *",
                    "jobTemplate": {"metadata": {"creationTimestamp": null}, "spec": {"backoffLimit": 0, "template": json_template("OnFailure")}}
                }
            }),
        )
        .await;
        assert_eq!(spec(&from_pb), spec(&from_json));

        // A field with no protobuf mapping is refused by name, never dropped.
        let mut spec_with_affinity = pod_spec("Always");
        spec_with_affinity.affinity = Some(Default::default());
        let pod = pb_core::Pod {
            metadata: meta("p"),
            spec: Some(spec_with_affinity),
            status: None,
        };
        let r = post(
            &client,
            "POST",
            "/api/v1/namespaces/default/pods",
            envelope("v1", "Pod", pod.encode_to_vec()),
        )
        .await;
        match r {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 415);
                assert!(s.message.contains("spec.affinity"), "{}", s.message);
            }
            other => panic!("expected a 415, got {other:?}"),
        }
    }
}
