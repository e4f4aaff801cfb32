//! Tenants that cannot touch each other: one install, a victim namespace `tenant-b` and an
//! attacker namespace `aa-attacker` (it sorts first: ties once went its way). Everything the
//! attacker tries here is refused, and the test checks what the attacker sees:
//! - a trigger selecting the victim's function by its labels selects nothing (triggers select
//!   functions in their own namespace only), and the victim's function gets none of its events;
//! - a Function whose template mounts, or reads into env, the victim's Secret by name never
//!   runs: its namespace has no such Secret, and the Function says so;
//! - the attacker's pods' ServiceAccount token cannot read the victim's Secrets (403);
//! - a Function template asking for host access is refused by the function-controller's
//!   default template policy (`InvalidSpec` naming the field), and the victim is untouched.
//!
//! Uses the binaries `cargo build --workspace --bins` left in the target dir (scripts/test.sh
//! builds them first) and nats-server (.ci/run installs it).
#![cfg(test)]

use std::time::Duration;

use integration_tests::require_bins;
use integration_tests::scale::{PYTHON, start_service};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use kubeless_api::{Function, NatsTrigger, find_condition};
use kubeless_testkit::{NatsServer, TestCluster, eventually};
use serde_json::{Value, json};

const VICTIM: &str = "tenant-b";
const ATTACKER: &str = "aa-attacker";

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    // The namespace's default ServiceAccount, as the real controller-manager makes it.
    eventually(
        &format!("ServiceAccount {name}/default"),
        Duration::from_secs(30),
        || async {
            Api::<ServiceAccount>::namespaced(client.clone(), name)
                .get_opt("default")
                .await
                .ok()
                .flatten()
        },
    )
    .await;
}

fn function(ns: &str, name: &str, extra: Value) -> Function {
    let mut f = json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "orders"}},
        "spec": {"handler": "handler.handler", "runtime": "python3.11", "function": PYTHON,
                 "function-content-type": "text", "timeout": "10"}
    });
    if let (Some(spec), Value::Object(more)) = (f["spec"].as_object_mut(), extra) {
        spec.extend(more);
    }
    serde_json::from_value(f).unwrap()
}

async fn ready_condition(client: &Client, ns: &str, name: &str) -> Option<(bool, String, String)> {
    let f = Api::<Function>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    let c = find_condition(&f.status?.conditions, "Ready")?.clone();
    Some((
        c.is_true(),
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    ))
}

async fn wait_function_ready(client: &Client, ns: &str, name: &str) {
    eventually(
        &format!("Function {ns}/{name} Ready"),
        Duration::from_secs(180),
        || async {
            let (ready, _, _) = ready_condition(client, ns, name).await?;
            ready.then_some(())
        },
    )
    .await;
}

/// Lines `EVENT <data>` printed by the function's pods.
async fn printed(client: &Client, ns: &str, name: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    let Ok(list) = pods
        .list(&ListParams::default().labels(&format!("function={name}")))
        .await
    else {
        return out;
    };
    for p in list {
        let log = pods
            .logs(&p.name_any(), &LogParams::default())
            .await
            .unwrap_or_default();
        out.extend(
            log.lines()
                .filter_map(|l| l.split("EVENT ").nth(1).map(|d| d.trim().to_string())),
        );
    }
    out
}

/// A client authenticated as `ns`'s default ServiceAccount: what a function pod of that
/// namespace holds.
async fn as_default_sa(c: &TestCluster, ns: &str) -> Client {
    let token = Api::<ServiceAccount>::namespaced(c.client.clone(), ns)
        .create_token_request("default", &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(c.cluster.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.token = Some(token.into());
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attacker_namespace_cannot_reach_the_victims() {
    require_bins(&["function-controller", "nats-trigger", "kubeless-runtime"]);
    let nats = NatsServer::start();
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    let client = c.client.clone();
    namespace(&client, VICTIM).await;
    namespace(&client, ATTACKER).await;
    let _controller = start_service(&c, "function-controller", &[]);
    let _trigger = start_service(&c, "nats-trigger", &[("NATS_URL", nats.url.clone())]);

    // The victim: a function labelled app=orders, its own trigger, and a Secret.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": VICTIM},
        "stringData": {"password": "victim-only"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), VICTIM)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    Api::<Function>::namespaced(client.clone(), VICTIM)
        .create(
            &PostParams::default(),
            &function(VICTIM, "orders", json!({})),
        )
        .await
        .unwrap();
    wait_function_ready(&client, VICTIM, "orders").await;

    // 1. A trigger in the attacker's namespace selecting app=orders selects nothing.
    let steal: NatsTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "steal", "namespace": ATTACKER},
        "spec": {"topic": "steal", "functionSelector": {"matchLabels": {"app": "orders"}}}
    }))
    .unwrap();
    Api::<NatsTrigger>::namespaced(client.clone(), ATTACKER)
        .create(&PostParams::default(), &steal)
        .await
        .unwrap();
    let seen = eventually(
        "the attacker's trigger reports its selection",
        Duration::from_secs(30),
        || async {
            let t = Api::<NatsTrigger>::namespaced(client.clone(), ATTACKER)
                .get("steal")
                .await
                .ok()?;
            let status = serde_json::to_value(t.status?).ok()?;
            let ready = status["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?
                .clone();
            (status["observedGeneration"] == json!(1)).then_some((status, ready))
        },
    )
    .await;
    let functions = seen.0["functions"].as_array().cloned().unwrap_or_default();
    assert!(
        functions.is_empty(),
        "an attacker's trigger selected another namespace's function: {}",
        seen.0
    );
    let publisher = async_nats::connect(&nats.url).await.unwrap();
    publisher.publish("steal", "stolen".into()).await.unwrap();
    publisher.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !printed(&client, VICTIM, "orders")
            .await
            .contains(&"stolen".to_string()),
        "the victim's function got the attacker's event"
    );
    eprintln!("attacker sees on its trigger: {}", seen.1);

    // 2. A Function of the attacker mounting the victim's Secret by name never runs.
    let thief = function(
        ATTACKER,
        "thief",
        json!({"deployment": {"spec": {"template": {"spec": {
            "containers": [{"name": "thief", "env": [{"name": "PW", "valueFrom":
                {"secretKeyRef": {"name": "db", "key": "password"}}}]}],
            "volumes": [{"name": "stolen", "secret": {"secretName": "db"}}]
        }}}}}),
    );
    Api::<Function>::namespaced(client.clone(), ATTACKER)
        .create(&PostParams::default(), &thief)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ATTACKER);
    for p in pods
        .list(&ListParams::default().labels("function=thief"))
        .await
        .unwrap()
    {
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        assert_ne!(
            phase.as_deref(),
            Some("Running"),
            "a pod with another namespace's Secret runs"
        );
    }
    let thief_ready = ready_condition(&client, ATTACKER, "thief").await;
    assert!(
        !thief_ready.as_ref().is_some_and(|r| r.0),
        "the thief Function is Ready: {thief_ready:?}"
    );
    eprintln!("attacker sees on its Function: {thief_ready:?}");

    // 3. The attacker's pods' token cannot read the victim's Secrets.
    let as_attacker = as_default_sa(&c, ATTACKER).await;
    let err = Api::<Secret>::namespaced(as_attacker, VICTIM)
        .get("db")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "the attacker's ServiceAccount read the victim's Secret: {err:?}"
    );
    eprintln!("attacker's token reading {VICTIM}/db: {err}");

    // The victim still answers its own events.
    let mine: NatsTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "mine", "namespace": VICTIM},
        "spec": {"topic": "mine", "functionSelector": {"matchLabels": {"app": "orders"}}}
    }))
    .unwrap();
    Api::<NatsTrigger>::namespaced(client.clone(), VICTIM)
        .create(&PostParams::default(), &mine)
        .await
        .unwrap();
    kubeless_testkit::wait_ready_in::<NatsTrigger>(&client, VICTIM, "mine").await;
    publisher.publish("mine", "ours".into()).await.unwrap();
    publisher.flush().await.unwrap();
    eventually(
        "the victim got its own event",
        Duration::from_secs(30),
        || async {
            printed(&client, VICTIM, "orders")
                .await
                .contains(&"ours".to_string())
                .then_some(())
        },
    )
    .await;
}
