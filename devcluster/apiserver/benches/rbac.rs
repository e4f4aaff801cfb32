#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What RBAC costs per request: GET of one ConfigMap over HTTPS through kube::Client, one at a
//! time, with the admin token (no authorization: `system:masters`) and with a ServiceAccount
//! token whose rights come from 100 RoleBindings and ClusterRoleBindings (the one that grants
//! the GET is looked at last), once with the authorizer's cache warm and once cold (an RBAC
//! object changes before each timed request). Prints latency percentiles; not a pass/fail test.
//! Run: `cargo bench -p devcluster-apiserver --bench rbac`.

use std::time::{Duration, Instant};

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

const REQUESTS: usize = 2_000;
const WARMUP: usize = 200;
const BINDINGS: usize = 100;
const COLD_REQUESTS: usize = 300;
const NS: &str = "bench";

async fn create<K: Resource<DynamicType = ()>>(client: &Client, ns: Option<&str>, mut v: Value) {
    let ar = ApiResource::erase::<K>(&());
    v["apiVersion"] = json!(ar.api_version);
    v["kind"] = json!(ar.kind);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
        .await
        .unwrap();
}

/// Sequential GETs; returns the sorted latencies.
async fn measure(client: &Client) -> Vec<Duration> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for _ in 0..WARMUP {
        api.get("target").await.unwrap();
    }
    let mut out = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let t = Instant::now();
        api.get("target").await.unwrap();
        out.push(t.elapsed());
    }
    out.sort();
    out
}

fn line(label: &str, d: &[Duration]) -> String {
    let us = |x: Duration| x.as_secs_f64() * 1e6;
    let mean = d.iter().map(|x| us(*x)).sum::<f64>() / d.len() as f64;
    let pct = |p: f64| us(d[((d.len() as f64 * p) as usize).min(d.len() - 1)]);
    format!(
        "{label:<44} mean {mean:>7.0} us  p50 {:>7.0} us  p99 {:>7.0} us",
        pct(0.5),
        pct(0.99)
    )
}

#[tokio::main]
async fn main() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = server.client().await.unwrap();
    use k8s_openapi::api::core::v1::Namespace;
    create::<Namespace>(&admin, None, json!({"metadata": {"name": NS}})).await;
    create::<ServiceAccount>(&admin, Some(NS), json!({"metadata": {"name": "app"}})).await;
    create::<ConfigMap>(
        &admin,
        Some(NS),
        json!({"metadata": {"name": "target"}, "data": {"k": "v"}}),
    )
    .await;
    let subject = json!([{"kind": "ServiceAccount", "name": "app", "namespace": NS}]);
    // Half the bindings cluster-wide, half in the namespace; each grants something else.
    for i in 0..BINDINGS - 1 {
        let rules = json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [format!("s{i}")], "verbs": ["get"]}]);
        if i % 2 == 0 {
            let name = format!("other-{i}");
            create::<ClusterRole>(
                &admin,
                None,
                json!({"metadata": {"name": name}, "rules": rules}),
            )
            .await;
            create::<ClusterRoleBinding>(&admin, None, json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": subject})).await;
        } else {
            let name = format!("other-{i}");
            create::<Role>(
                &admin,
                Some(NS),
                json!({"metadata": {"name": name}, "rules": rules}),
            )
            .await;
            create::<RoleBinding>(
                &admin,
                Some(NS),
                json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": subject}),
            )
            .await;
        }
    }
    // The grant, in the namespace (RoleBindings are looked at after ClusterRoleBindings), and
    // named last in name order.
    create::<Role>(
        &admin,
        Some(NS),
        json!({"metadata": {"name": "zz-read"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
    )
    .await;
    create::<RoleBinding>(
        &admin,
        Some(NS),
        json!({"metadata": {"name": "zz-read"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "zz-read"},
        "subjects": subject}),
    )
    .await;

    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let token = sas
        .create_token_request("app", &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let mut config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .unwrap();
    config.auth_info.token = Some(token.into());
    let sa = Client::try_from(config).unwrap();

    let admin_lat = measure(&admin).await;
    let sa_lat = measure(&sa).await;
    let admin_again = measure(&admin).await;
    // Cold: a ClusterRole's label changes (not timed) before each timed GET.
    let crs: Api<ClusterRole> = Api::all(admin.clone());
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), NS);
    let mut cold = Vec::with_capacity(COLD_REQUESTS);
    for i in 0..COLD_REQUESTS {
        crs.patch(
            "other-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"bench-round": i.to_string()}}}),
            ),
        )
        .await
        .unwrap();
        let t = Instant::now();
        cms.get("target").await.unwrap();
        cold.push(t.elapsed());
    }
    cold.sort();
    println!("GET one ConfigMap over HTTPS, {REQUESTS} sequential requests each:");
    println!("{}", line("admin token (no authorization)", &admin_lat));
    println!(
        "{}",
        line(&format!("ServiceAccount, {BINDINGS} bindings"), &sa_lat)
    );
    println!("{}", line("admin token again", &admin_again));
    println!(
        "{}",
        line(
            &format!("ServiceAccount, {BINDINGS} bindings, cold (of {COLD_REQUESTS})"),
            &cold
        )
    );
    // Medians: the machine is shared, and a mean follows whatever else ran at the time.
    let p50 = |d: &[Duration]| d[d.len() / 2].as_secs_f64() * 1e6;
    let base = p50(&admin_lat).min(p50(&admin_again));
    println!(
        "median over the faster admin run: warm RBAC {:+.0} us ({:.2}x), cold RBAC {:+.0} us ({:.2}x)",
        p50(&sa_lat) - base,
        p50(&sa_lat) / base,
        p50(&cold) - base,
        p50(&cold) / base
    );
    server.shutdown().await;
}
