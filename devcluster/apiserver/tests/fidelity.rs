#![cfg(test)]
//! devcluster refuses what a real API server refuses: every bad Function input named in
//! issue 16 is applied through kube::Client and through kubectl, and each must come back as a
//! 422 Invalid whose causes name the field, from the CRD's schema constraints and CEL rules.

use std::{process::Command, time::Duration};

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Client,
    api::{Api, DynamicObject, PostParams},
    core::{ApiResource, GroupVersionKind},
    runtime::wait::{await_condition, conditions},
};
use serde_json::{Value, json};

async fn install_kubeless_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kubeless_api::all() {
        let name = crd.metadata.name.clone().unwrap();
        crds.create(&PostParams::default(), &crd).await.unwrap();
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .unwrap()
            .unwrap();
    }
}

fn function_api(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubeless.io", "v1beta1", "Function");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn good_spec() -> Value {
    json!({
        "runtime": "python3.11",
        "handler": "hello.handler",
        "function": "def handler(event, context):\n    return 'hi'\n",
        "deployment": {"spec": {"template": {"spec": {"containers": [{
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"cpu": "500m", "memory": "128Mi"}}
        }]}}}},
        "service": {"type": "ClusterIP", "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080}]},
        "horizontalPodAutoscaler": {"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "minReplicas": 1, "maxReplicas": 3}}
    })
}

fn function(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kubeless.io/v1beta1", "kind": "Function",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn with(pointer: &str, value: Value) -> Value {
    let mut spec = good_spec();
    *spec.pointer_mut(pointer).unwrap() = value;
    spec
}

/// (case, name, spec, field named by a cause, text in the message)
fn bad_inputs() -> Vec<(&'static str, String, Value, &'static str, &'static str)> {
    let containers = "/deployment/spec/template/spec/containers/0";
    vec![
        (
            "--memory lots",
            "mem".into(),
            with(
                &format!("{containers}/resources/limits/memory"),
                json!("lots"),
            ),
            "spec.deployment.spec.template.spec.containers[0].resources.limits.memory",
            "should match",
        ),
        (
            "port 70000",
            "port".into(),
            with("/service/ports/0/port", json!(70000)),
            "spec.service.ports[0].port",
            "less than or equal to 65535",
        ),
        (
            "Service type Bogus",
            "svctype".into(),
            with("/service/type", json!("Bogus")),
            "spec.service.type",
            "Unsupported value: \"Bogus\"",
        ),
        (
            "HPA minReplicas above maxReplicas",
            "hpa".into(),
            with("/horizontalPodAutoscaler/spec/minReplicas", json!(5)),
            "spec.horizontalPodAutoscaler.spec",
            "minReplicas must be less than or equal to maxReplicas",
        ),
        (
            "handler without a dot",
            "handler".into(),
            with("/handler", json!("nodot")),
            "spec.handler",
            "should match",
        ),
        (
            "name 1func",
            "1func".into(),
            good_spec(),
            "metadata.name",
            "DNS-1035 label",
        ),
        (
            "name my.func",
            "my.func".into(),
            good_spec(),
            "metadata.name",
            "DNS-1035 label",
        ),
        (
            "69-character name",
            "f".repeat(69),
            good_spec(),
            "metadata.name",
            "no more than 63 characters",
        ),
    ]
}

#[tokio::test]
async fn bad_functions_are_refused_with_422_and_the_field() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    install_kubeless_crds(&client).await;
    let api = function_api(&client);

    let good: DynamicObject = serde_json::from_value(function("good", good_spec())).unwrap();
    api.create(&PostParams::default(), &good).await.unwrap();

    for (case, name, spec, field, text) in bad_inputs() {
        let obj: DynamicObject = serde_json::from_value(function(&name, spec)).unwrap();
        let err = api
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(case);
        let kube::Error::Api(status) = err else {
            panic!("{case}: not an API error: {err}")
        };
        assert_eq!(status.code, 422, "{case}: {status:?}");
        assert_eq!(status.reason, "Invalid", "{case}");
        let causes = status
            .details
            .as_ref()
            .map(|d| d.causes.clone())
            .unwrap_or_default();
        assert!(
            causes
                .iter()
                .any(|c| c.field == field && c.message.contains(text)),
            "{case}: no cause on {field} containing {text:?}: {causes:?}"
        );
        assert!(status.message.contains(text), "{case}: {}", status.message);
    }

    // Updates are checked too, and a transition that breaks a rule is refused.
    let mut cur = api.get("good").await.unwrap();
    cur.data["spec"]["service"]["type"] = json!("Bogus");
    let err = api
        .replace("good", &PostParams::default(), &cur)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );

    // A custom resource name is a DNS-1123 subdomain of up to 253 characters: a 69-character
    // HTTPTrigger name is fine (only Function names are limited by our own rules).
    let gvk = GroupVersionKind::gvk("kubeless.io", "v1beta1", "HTTPTrigger");
    let triggers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
    let long = "t".repeat(69);
    let trigger: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
        "metadata": {"name": long, "namespace": "default"},
        "spec": {"function-name": "good"}
    }))
    .unwrap();
    triggers
        .create(&PostParams::default(), &trigger)
        .await
        .unwrap();

    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_apply_refuses_bad_functions() {
    let have_kubectl = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        have_kubectl,
        "kubectl is missing: install it with `apt-get install -y kubernetes-client` (scripts/lib.sh ensure_tools does)"
    );
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    install_kubeless_crds(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig_path().to_path_buf();

    for (case, name, spec, field, text) in bad_inputs() {
        let file = dir
            .path()
            .join(format!("{}.json", case.replace([' ', '-'], "_")));
        std::fs::write(&file, function(&name, spec).to_string()).unwrap();
        let out = tokio::task::spawn_blocking({
            let kubeconfig = kubeconfig.clone();
            move || {
                Command::new("kubectl")
                    .env("KUBECONFIG", kubeconfig)
                    .args(["apply", "--validate=false", "-f"])
                    .arg(&file)
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case}: kubectl apply succeeded");
        assert!(
            stderr.contains("is invalid") && stderr.contains(text),
            "{case}: {stderr}"
        );
        assert!(stderr.contains(field), "{case}: {field} not in {stderr}");
    }

    // Printer columns with JSONPath filters show their values in `kubectl get`.
    let api = function_api(&client);
    let good: DynamicObject = serde_json::from_value(function("shown", good_spec())).unwrap();
    api.create(&PostParams::default(), &good).await.unwrap();
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "DeploymentRefused",
         "message": "m", "lastTransitionTime": "2026-11-24T00:00:00Z"}]}});
    api.patch_status(
        "shown",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .args(["get", "functions", "shown"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("shown"))
        .unwrap_or("");
    assert!(
        row.contains("False") && row.contains("DeploymentRefused"),
        "READY and REASON missing: {stdout}"
    );
    server.shutdown().await;
}

/// (case, (group, version, kind), object, field named by a cause, text in the message)
type BuiltinCase = (
    &'static str,
    (&'static str, &'static str, &'static str),
    Value,
    String,
    &'static str,
);

/// Built-in kinds are checked as the real server checks them, for the fields our controllers,
/// charts and CLI write.
#[tokio::test]
async fn bad_builtin_objects_are_refused_with_422_and_the_field() {
    use kube::core::GroupVersionKind as Gvk;
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let api_for = |group: &str, version: &str, kind: &str| -> Api<DynamicObject> {
        let gvk = Gvk::gvk(group, version, kind);
        let mut ar = ApiResource::from_gvk(&gvk);
        if kind == "HorizontalPodAutoscaler" {
            ar.plural = "horizontalpodautoscalers".into();
        }
        Api::namespaced_with(client.clone(), "default", &ar)
    };
    let container = |extra: Value| {
        let mut c = json!({"name": "f", "image": "python:3.11"});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        c
    };
    let deployment = |name: &str, c: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
               "spec": {"selector": {"matchLabels": {"function": name}},
                        "template": {"metadata": {"labels": {"function": name}},
                                     "spec": {"containers": [c]}}}})
    };
    let service = |name: &str, ty: &str, port: i64| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"type": ty, "ports": [{"name": "http", "port": port, "targetPort": 8080}],
                        "selector": {"function": name}}})
    };
    let hpa = |min: i64, max: i64| {
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                        "minReplicas": min, "maxReplicas": max,
                        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 70}}}]}})
    };
    let cronjob = |schedule: &str| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
               "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "call", "image": "curl"}]}}}}}})
    };
    let path = "spec.template.spec.containers[0]";
    let cases: Vec<BuiltinCase> = vec![
        (
            "Service type Bogus",
            ("", "v1", "Service"),
            service("s1", "Bogus", 80),
            "spec.type".into(),
            "Unsupported value: \"Bogus\"",
        ),
        (
            "Service port 70000",
            ("", "v1", "Service"),
            service("s2", "ClusterIP", 70000),
            "spec.ports[0].port".into(),
            "must be between 1 and 65535",
        ),
        (
            "Service named 1func",
            ("", "v1", "Service"),
            service("1func", "ClusterIP", 80),
            "metadata.name".into(),
            "DNS-1035 label",
        ),
        (
            "memory lots",
            ("apps", "v1", "Deployment"),
            deployment(
                "d1",
                container(json!({"resources": {"limits": {"memory": "lots"}}})),
            ),
            format!("{path}.resources.limits[memory]"),
            "quantities must match",
        ),
        (
            "cpu request above limit",
            ("apps", "v1", "Deployment"),
            deployment(
                "d2",
                container(json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}})),
            ),
            format!("{path}.resources.requests"),
            "must be less than or equal to cpu limit",
        ),
        (
            "containerPort 70000",
            ("apps", "v1", "Deployment"),
            deployment(
                "d3",
                container(json!({"ports": [{"containerPort": 70000}]})),
            ),
            format!("{path}.ports[0].containerPort"),
            "must be between 1 and 65535",
        ),
        (
            "imagePullPolicy Sometimes",
            ("apps", "v1", "Deployment"),
            deployment("d4", container(json!({"imagePullPolicy": "Sometimes"}))),
            format!("{path}.imagePullPolicy"),
            "Unsupported value",
        ),
        (
            "container name with a dot",
            ("apps", "v1", "Deployment"),
            deployment("d5", json!({"name": "my.func", "image": "x"})),
            format!("{path}.name"),
            "RFC 1123 label",
        ),
        (
            "label value of 69 characters",
            ("apps", "v1", "Deployment"),
            deployment(&"d".repeat(69), container(json!({}))),
            "spec.template.metadata.labels".into(),
            "must be no more than 63 characters",
        ),
        (
            "probe with no handler",
            ("apps", "v1", "Deployment"),
            deployment(
                "d6",
                container(json!({"readinessProbe": {"periodSeconds": 5}})),
            ),
            format!("{path}.readinessProbe.handler"),
            "Required value",
        ),
        (
            "HPA minReplicas above maxReplicas",
            ("autoscaling", "v2", "HorizontalPodAutoscaler"),
            hpa(5, 2),
            "spec.minReplicas".into(),
            "must be less than or equal to maxReplicas",
        ),
        (
            "HPA maxReplicas 0",
            ("autoscaling", "v2", "HorizontalPodAutoscaler"),
            hpa(1, 0),
            "spec.maxReplicas".into(),
            "must be greater than or equal to 1",
        ),
        (
            "CronJob schedule",
            ("batch", "v1", "CronJob"),
            cronjob("every minute"),
            "spec.schedule".into(),
            "unparseable schedule",
        ),
    ];
    for (case, (group, version, kind), obj, field, text) in cases {
        let api = api_for(group, version, kind);
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        let err = api
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(case);
        let kube::Error::Api(status) = err else {
            panic!("{case}: not an API error: {err}")
        };
        assert_eq!(status.code, 422, "{case}: {status:?}");
        let causes = status.details.map(|d| d.causes).unwrap_or_default();
        assert!(
            causes
                .iter()
                .any(|c| c.field == field && c.message.contains(text)),
            "{case}: no cause on {field} containing {text:?}: {causes:?}"
        );
    }
    // The good versions pass.
    for (group, version, kind, obj) in [
        ("", "v1", "Service", service("s1", "ClusterIP", 8080)),
        (
            "apps",
            "v1",
            "Deployment",
            deployment(
                "d1",
                container(
                    json!({"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": 1, "memory": "128Mi"}}}),
                ),
            ),
        ),
        ("autoscaling", "v2", "HorizontalPodAutoscaler", hpa(1, 3)),
        ("batch", "v1", "CronJob", cronjob("*/5 * * * *")),
    ] {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        api_for(group, version, kind)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    server.shutdown().await;
}

/// PodSecurity admission: a namespace's `pod-security.kubernetes.io/enforce` level refuses
/// pods that break it with 403, as the real admission plugin does.
#[tokio::test]
async fn pod_security_enforce_levels() {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (name, level) in [
        ("restricted", Some("restricted")),
        ("baseline", Some("baseline")),
        ("open", None),
    ] {
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        if let Some(level) = level {
            ns["metadata"]["labels"] = json!({"pod-security.kubernetes.io/enforce": level});
        }
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
            .await
            .unwrap();
    }
    let pod = |name: &str, pod_sc: Value, sc: Value, extra: Value| -> Pod {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"securityContext": pod_sc,
                     "containers": [{"name": "f", "image": "python:3.11", "securityContext": sc}]}});
        if let (Some(spec), Some(e)) = (p["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(e.clone());
        }
        serde_json::from_value(p).unwrap()
    };
    let restricted_sc =
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let restricted_pod_sc = json!({"runAsNonRoot": true, "runAsUser": 65532,
        "seccompProfile": {"type": "RuntimeDefault"}});
    let create = |ns: &str, p: Pod| {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        async move { api.create(&PostParams::default(), &p).await }
    };
    let forbidden = |r: Result<Pod, kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => s.message,
        other => panic!("expected 403, got {other:?}"),
    };

    // restricted: a pod with no securityContext breaks four rules, named in the message.
    let msg = forbidden(create("restricted", pod("bare", json!({}), json!({}), json!({}))).await);
    for part in [
        "violates PodSecurity \"restricted:latest\"",
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "runAsNonRoot != true",
        "seccompProfile",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    // The same pod with the restricted securityContext is admitted.
    create(
        "restricted",
        pod(
            "ok",
            restricted_pod_sc.clone(),
            restricted_sc.clone(),
            json!({}),
        ),
    )
    .await
    .unwrap();
    // runAsUser 0 and a hostPath volume are refused even with the rest in place.
    let mut root = restricted_pod_sc.clone();
    root["runAsUser"] = json!(0);
    let msg = forbidden(
        create(
            "restricted",
            pod("root", root, restricted_sc.clone(), json!({})),
        )
        .await,
    );
    assert!(msg.contains("runAsUser=0"), "{msg}");

    // baseline: privileged containers, host namespaces and hostPath volumes are refused.
    let msg = forbidden(
        create(
            "baseline",
            pod("priv", json!({}), json!({"privileged": true}), json!({})),
        )
        .await,
    );
    assert!(
        msg.contains("violates PodSecurity \"baseline:latest\": privileged"),
        "{msg}"
    );
    let msg = forbidden(
        create(
            "baseline",
            pod(
                "host",
                json!({}),
                json!({}),
                json!({"hostNetwork": true, "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
            ),
        )
        .await,
    );
    assert!(msg.contains("host namespaces (hostNetwork=true)"), "{msg}");
    assert!(msg.contains("hostPath volumes (\"root\")"), "{msg}");
    // A plain pod passes baseline, and anything passes an unlabelled namespace.
    create("baseline", pod("plain", json!({}), json!({}), json!({})))
        .await
        .unwrap();
    create(
        "open",
        pod("priv", json!({}), json!({"privileged": true}), json!({})),
    )
    .await
    .unwrap();
    server.shutdown().await;
}

/// The real server defaults `fieldRef.apiVersion` to `v1` whenever it decodes a pod spec
/// (create, update, patch, apply), so an object applied without it reads back with it, and
/// applying the same manifest again changes nothing.
#[tokio::test]
async fn field_ref_api_version_defaults_to_v1() {
    use k8s_openapi::api::{apps::v1::Deployment, batch::v1::CronJob};
    use kube::api::{Patch, PatchParams};
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let pod_spec = json!({
        "containers": [{"name": "f", "image": "python:3.11",
            "env": [{"name": "ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NS", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}]}],
        "volumes": [
            {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "proj", "projected": {"sources": [{"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}
        ]
    });
    let assert_defaulted = |spec: &Value| {
        for p in [
            "/containers/0/env/0/valueFrom/fieldRef/apiVersion",
            "/containers/0/env/1/valueFrom/fieldRef/apiVersion",
            "/volumes/0/downwardAPI/items/0/fieldRef/apiVersion",
            "/volumes/1/projected/sources/0/downwardAPI/items/0/fieldRef/apiVersion",
        ] {
            assert_eq!(spec.pointer(p), Some(&json!("v1")), "{p} in {spec}");
        }
    };
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fr"},
        "spec": {"selector": {"matchLabels": {"app": "fr"}},
                 "template": {"metadata": {"labels": {"app": "fr"}}, "spec": pod_spec}}});
    let pp = PatchParams::apply("field-ref-test");
    let created = deps.patch("fr", &pp, &Patch::Apply(&dep)).await.unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert_defaulted(&v["spec"]["template"]["spec"]);
    // The same manifest again: nothing changes, so the resourceVersion stays.
    let again = deps.patch("fr", &pp, &Patch::Apply(&dep)).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        created.metadata.resource_version
    );
    // A merge patch that sets a fieldRef without apiVersion is defaulted too.
    let patched = deps
        .patch(
            "fr",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"spec": {"volumes": pod_spec["volumes"]}}}}),
            ),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&patched).unwrap();
    assert_defaulted(&v["spec"]["template"]["spec"]);

    let cjs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "fr"},
        "spec": {"schedule": "*/5 * * * *",
                 "jobTemplate": {"spec": {"template": {"spec": {
                     "restartPolicy": "Never",
                     "containers": pod_spec["containers"], "volumes": pod_spec["volumes"]}}}}}});
    let created = cjs
        .create(&PostParams::default(), &serde_json::from_value(cj).unwrap())
        .await
        .unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert_defaulted(&v["spec"]["jobTemplate"]["spec"]["template"]["spec"]);
}

/// The real server sets a Pod's `status.qosClass` when it is created, from its containers'
/// requests and limits, and refuses a status write that changes it (a kubelet that reported
/// BestEffort for every pod had all its status writes refused by a real server).
#[tokio::test]
async fn pod_qos_class_is_set_at_creation_and_immutable() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cases = [
        ("best-effort", json!({}), None, "BestEffort"),
        (
            "burstable",
            json!({"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}),
            None,
            "Burstable",
        ),
        // Requests left out are the limits; 1 and 1000m are the same cpu.
        (
            "guaranteed",
            json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1000m", "memory": "64Mi"}}),
            None,
            "Guaranteed",
        ),
        // An init container without limits makes the pod Burstable.
        (
            "init-burstable",
            json!({"limits": {"cpu": "1", "memory": "64Mi"}}),
            Some(json!({"requests": {"cpu": "10m"}})),
            "Burstable",
        ),
    ];
    for (name, resources, init, want) in cases {
        let mut spec =
            json!({"containers": [{"name": "c", "image": "busybox", "resources": resources}]});
        if let Some(init) = init {
            spec["initContainers"] = json!([{"name": "i", "image": "busybox", "resources": init}]);
        }
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        let created = pods.create(&PostParams::default(), &pod).await.unwrap();
        let qos = created.status.and_then(|s| s.qos_class);
        assert_eq!(qos.as_deref(), Some(want), "{name}");
    }
    // A status write that keeps it is fine; one that changes it is a 422 naming the field.
    let keep = json!({"status": {"phase": "Running"}});
    pods.patch_status("burstable", &PatchParams::default(), &Patch::Merge(&keep))
        .await
        .unwrap();
    let change = json!({"status": {"qosClass": "BestEffort"}});
    let err = pods
        .patch_status("burstable", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("status.qosClass") && status.message.contains("field is immutable"),
        "{}",
        status.message
    );
}
