#![cfg(test)]
//! The Kubeless CRDs as shipped (deploy/crds/) installed on devcluster, which validates custom
//! resources with their schema and CEL rules as a real API server does: every trigger field the
//! docs call checked is refused with its field path, and a Function name rule names
//! `metadata.name` and the name instead of printing the object.

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

async fn install_kubeless_crds(client: &Client) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let crd: CustomResourceDefinition =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = crd.metadata.name.clone().unwrap();
        crds.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(10), established)
            .await
            .unwrap()
            .unwrap();
    }
}

fn api(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubeless.io", "v1beta1", kind);
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn base(kind: &str, name: &str) -> Value {
    let spec = match kind {
        "CronJobTrigger" => json!({"schedule": "*/5 * * * *", "function-name": "hello"}),
        "KafkaTrigger" | "NATSTrigger" => {
            json!({"topic": "t", "functionSelector": {"matchLabels": {"function": "hello"}}})
        }
        "KinesisTrigger" => json!({"function-name": "hello", "stream": "s"}),
        "RedisTrigger" => json!({"url": "redis://127.0.0.1:6379", "stream": "s",
            "functionSelector": {"matchLabels": {"function": "hello"}}}),
        "Function" => json!({"runtime": "python3.11", "handler": "hello.handler",
            "function": "def handler(event, context):\n    return 'hi'\n",
            "function-content-type": "text", "deps": "", "timeout": "180"}),
        other => panic!("no base object for {other}"),
    };
    json!({"apiVersion": "kubeless.io/v1beta1", "kind": kind,
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

/// Sets `value` at `pointer`, creating the objects on the way.
fn set(obj: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let mut node = obj;
    for part in &parts[..parts.len() - 1] {
        node = node
            .as_object_mut()
            .unwrap()
            .entry(part.to_string())
            .or_insert_with(|| json!({}));
    }
    node.as_object_mut()
        .unwrap()
        .insert(parts[parts.len() - 1].to_string(), value);
}

/// Creates `obj` and returns the API server's 422 message (panics when it is accepted).
async fn refused(api: &Api<DynamicObject>, obj: Value) -> String {
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    match api.create(&PostParams::default(), &dynamic).await {
        Err(kube::Error::Api(s)) if s.code == 422 => s.message,
        other => panic!("{obj} should be refused with a 422, got {other:?}"),
    }
}

#[tokio::test]
async fn kubeless_crds_refuse_bad_trigger_fields_and_names_with_the_field() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    install_kubeless_crds(&client).await;

    let kinds = [
        ("CronJobTrigger", "cronjobtriggers"),
        ("KafkaTrigger", "kafkatriggers"),
        ("NATSTrigger", "natstriggers"),
        ("KinesisTrigger", "kinesistriggers"),
        ("RedisTrigger", "redistriggers"),
    ];
    let mut n = 0;
    for (kind, plural) in kinds {
        let api = api(&client, kind, plural);
        let mut cases: Vec<(&str, Value, &str)> = Vec::new();
        for d in ["-1s", "forever"] {
            cases.push((
                "/spec/retry/initialBackoff",
                json!(d),
                "spec.retry.initialBackoff",
            ));
            cases.push(("/spec/retry/maxBackoff", json!(d), "spec.retry.maxBackoff"));
        }
        cases.push((
            "/spec/retry/multiplier",
            json!(-2.0),
            "spec.retry.multiplier",
        ));
        cases.push((
            "/spec/retry/maxAttempts",
            json!(1e12),
            "spec.retry.maxAttempts",
        ));
        if kind == "NATSTrigger" {
            cases.push((
                "/spec/jetStream/ackWait",
                json!("-1s"),
                "spec.jetStream.ackWait",
            ));
            cases.push(("/spec/maxInFlight", json!(1e12), "spec.maxInFlight"));
        }
        if kind == "CronJobTrigger" {
            cases.push((
                "/spec/successfulJobsHistoryLimit",
                json!(1e12),
                "spec.successfulJobsHistoryLimit",
            ));
            cases.push((
                "/spec/failedJobsHistoryLimit",
                json!(1e12),
                "spec.failedJobsHistoryLimit",
            ));
        }
        for (pointer, value, path) in cases {
            let mut obj = base(kind, "t");
            set(&mut obj, pointer, value.clone());
            let message = refused(&api, obj).await;
            assert!(
                message.contains(&format!("{path}: Invalid value")),
                "{kind} {path} = {value}: the message does not name the field: {message}"
            );
            if value == json!(1e12) {
                assert!(
                    message.contains("should be less than or equal to 2147483647"),
                    "{kind} {path}: {message}"
                );
            }
            n += 1;
        }
        // A good retry policy is accepted.
        let mut ok = base(kind, "good");
        set(
            &mut ok,
            "/spec/retry",
            json!({"maxAttempts": 3, "initialBackoff": "500ms",
            "maxBackoff": "1m30s", "multiplier": 1.5}),
        );
        api.create(&PostParams::default(), &serde_json::from_value(ok).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{kind}: a valid retry policy was refused: {e}"));
    }
    assert_eq!(n, 34, "bad values tried");

    // A trigger's function-name with `_` names the field.
    let cron = api(&client, "CronJobTrigger", "cronjobtriggers");
    let mut obj = base("CronJobTrigger", "c");
    set(&mut obj, "/spec/function-name", json!("hello_world"));
    let message = refused(&cron, obj).await;
    assert!(
        message.contains("spec.function-name: Invalid value: \"hello_world\""),
        "{message}"
    );

    // The Function name rules: at metadata.name, with the name, short, never the object.
    let functions = api(&client, "Function", "functions");
    for (name, says) in [
        ("my.func", "must be a DNS-1035 label"),
        ("1func", "must be a DNS-1035 label"),
        (&*"f".repeat(70), "no more than 63 characters"),
    ] {
        let message = refused(&functions, base("Function", name)).await;
        assert!(
            message.contains("metadata.name: Invalid value: \"object\": ")
                && message.contains(says),
            "{name}: {message}"
        );
        assert!(
            !message.contains("<nil>") && !message.contains("function-content-type"),
            "{name}: {message}"
        );
        assert!(
            message.len() < 500,
            "{name}: {} characters: {message}",
            message.len()
        );
    }
    // Not even a DNS-1123 subdomain: the API server's own name check speaks first.
    let message = refused(&functions, base("Function", "Hello_World")).await;
    assert!(
        message.contains("metadata.name: Invalid value: \"Hello_World\""),
        "{message}"
    );
    assert!(
        !message.contains("function-content-type") && message.len() < 800,
        "{message}"
    );
}
