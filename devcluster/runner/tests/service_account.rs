#![cfg(test)]
//! ServiceAccount credentials in pods: the token, ca.crt, namespace and kubeconfig the runner
//! writes reach the API server with exactly the RBAC of the pod's ServiceAccount, commands find
//! them at the kubelet's mount path, and `automountServiceAccountToken: false` leaves a pod
//! without any.

mod common;

use std::net::Ipv4Addr;

use common::{eventually, start};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{LogParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const NS: &str = "default";

/// Reads the kubeconfig from $KUBECONFIG as any client would, then asks the API server for
/// configmaps (granted) and secrets (not granted) and prints the HTTP codes.
const PROBE: &str = r#"
import json, os, re, ssl, urllib.request, urllib.error
kc = os.environ.get("KUBECONFIG")
if not kc or not os.path.exists(kc):
    print("no-kubeconfig", kc)
    raise SystemExit(0)
text = open(kc).read()
field = lambda k: json.loads(re.search(r"\b" + k + r": (\".*\")", text).group(1))
server, ca, token_file = field("server"), field("certificate-authority"), field("tokenFile")
sa_dir = os.path.dirname(token_file)
print("namespace", open(os.path.join(sa_dir, "namespace")).read())
ctx = ssl.create_default_context(cafile=ca)
token = open(token_file).read().strip()
for res in ["configmaps", "secrets"]:
    req = urllib.request.Request(server + "/api/v1/namespaces/default/" + res,
                                 headers={"Authorization": "Bearer " + token})
    try:
        code = urllib.request.urlopen(req, context=ctx).status
    except urllib.error.HTTPError as e:
        code = e.code
    print(res, code)
"#;

async fn create(client: &Client, ns: Option<&str>, v: Value) {
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        v["apiVersion"]
            .as_str()
            .unwrap()
            .split_once('/')
            .map_or("", |(g, _)| g),
        v["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap(),
        v["kind"].as_str().unwrap(),
    ));
    let api: Api<kube::api::DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
        .await
        .unwrap();
}

fn probe_pod(name: &str, sa: &str, automount: Option<bool>) -> Value {
    let mut spec = json!({
        "serviceAccountName": sa,
        "restartPolicy": "Never",
        "containers": [{"name": "probe", "image": "python:3.12", "command": ["python3", "-c", PROBE]}]
    });
    if let Some(a) = automount {
        spec["automountServiceAccountToken"] = json!(a);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

async fn finished_log(client: &Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(&format!("pod {name} to finish"), 30, || async {
        let p = pods.get(name).await.ok()?;
        let phase = p.status?.phase?;
        (phase == "Succeeded" || phase == "Failed").then_some(())
    })
    .await;
    pods.logs(name, &LogParams::default()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_token_kubeconfig_works_and_is_limited() {
    let h = start(Ipv4Addr::new(127, 62, 0, 0), |_| {}).await;
    let c = &h.client;
    create(
        c,
        Some(NS),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}),
    )
    .await;
    create(
        c,
        Some(NS),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
               "automountServiceAccountToken": false}),
    )
    .await;
    create(
        c,
        Some(NS),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "cm-reader"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await;
    create(
        c,
        Some(NS),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]}),
    )
    .await;

    let pods: Api<Pod> = Api::namespaced(c.clone(), NS);
    for (name, sa, automount) in [
        ("as-reader", "reader", None),
        ("as-default", "default", None),
        ("opted-out", "reader", Some(false)),
        ("sa-opted-out", "quiet", None),
    ] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(probe_pod(name, sa, automount)).unwrap(),
        )
        .await
        .unwrap();
    }

    // The kubelet's mount path works in commands, as for volume mounts.
    let sh = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "by-path"},
        "spec": {"serviceAccountName": "reader", "restartPolicy": "Never",
            "containers": [{"name": "sh", "image": "busybox:1.36", "command": ["sh", "-c",
                "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
                 test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo has-token; \
                 test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt && echo has-ca"]}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(sh).unwrap())
        .await
        .unwrap();
    let log = finished_log(c, "by-path").await;
    assert_eq!(
        log.split_whitespace().collect::<Vec<_>>(),
        ["default", "has-token", "has-ca"],
        "{log}"
    );

    let log = finished_log(c, "as-reader").await;
    assert!(log.contains("namespace default"), "{log}");
    assert!(log.contains("configmaps 200"), "{log}");
    assert!(log.contains("secrets 403"), "{log}");
    // The default ServiceAccount has no rights at all.
    let log = finished_log(c, "as-default").await;
    assert!(log.contains("configmaps 403"), "{log}");
    assert!(log.contains("secrets 403"), "{log}");
    // automountServiceAccountToken: false on the pod, or on its ServiceAccount: nothing.
    for name in ["opted-out", "sa-opted-out"] {
        let log = finished_log(c, name).await;
        assert!(log.starts_with("no-kubeconfig"), "{name}: {log}");
    }
    h.stop().await;
}

/// A projected volume gets its ConfigMap, downward-API and ServiceAccount-token sources in one
/// folder, as the kubelet fills the `kube-api-access` volume a real API server adds to pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_volume_holds_a_configmap_the_namespace_and_a_token() {
    let h = start(Ipv4Addr::new(127, 63, 0, 0), |_| {}).await;
    let c = &h.client;
    create(
        c,
        Some(NS),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
               "data": {"greeting": "hello", "other": "unused"}}),
    )
    .await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "projected"},
        "spec": {"restartPolicy": "Never",
            "volumes": [{"name": "bundle", "projected": {"defaultMode": 0o440, "sources": [
                {"configMap": {"name": "settings", "items": [{"key": "greeting", "path": "greeting.txt"}]}},
                {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 600}}
            ]}}],
            "containers": [{"name": "sh", "image": "busybox:1.36",
                "volumeMounts": [{"name": "bundle", "mountPath": "/bundle"}],
                "command": ["sh", "-c",
                    "cat /bundle/greeting.txt; echo; cat /bundle/ns; echo; \
                     test -s /bundle/token && echo has-token; test -e /bundle/other || echo no-other; \
                     stat -c %a /bundle/token"]}]}});
    let pods: Api<Pod> = Api::namespaced(c.clone(), NS);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
    let log = finished_log(c, "projected").await;
    assert_eq!(
        log.split_whitespace().collect::<Vec<_>>(),
        ["hello", "default", "has-token", "no-other", "440"],
        "{log}"
    );
    h.stop().await;
}
