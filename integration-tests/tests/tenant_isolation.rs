//! Tenants that cannot touch each other: one install, a victim namespace `tenant-b` and an
//! attacker namespace `aa-attacker` (it sorts first: ties once went its way). Everything the
//! attacker tries here is refused, and the test checks what the attacker sees:
//! - a trigger selecting the victim's function by its labels selects nothing (triggers select
//!   functions in their own namespace only), and the victim's function gets none of its events;
//! - a Function whose template mounts, or reads into env, the victim's Secret by name never
//!   runs: its namespace has no such Secret, and the Function says so;
//! - the attacker's pods' ServiceAccount token cannot read the victim's Secrets (403);
//! - an HTTPTrigger of the attacker on the victim's gateway host (same path, and a longer
//!   prefix) is refused: `Ready=False RouteConflict` and a Warning Event on the attacker's
//!   trigger, while every request to that host, with the victim's basic-auth credentials, still
//!   reaches the victim's function only; a `/../` path is normalised before matching, and the
//!   runtime's own `/metrics` is not served; a host-less catch-all of the attacker gets hosts
//!   nobody routes, but no path (matched or not) of a host the victim routes;
//! - a Function template asking for host access is refused by the function-controller's
//!   default template policy (`InvalidSpec` naming the field), and no pod of it runs;
//! - a function of the attacker calling the dashboard (`kubeless ui`, on the same machine as on
//!   devcluster every pod is) gets 401 for the page and for a delete of the victim's Function,
//!   which is still there.
//!
//! Uses the binaries `cargo build --workspace --bins` left in the target dir (scripts/test.sh
//! builds them first) and nats-server (.ci/run installs it).
#![cfg(test)]

use std::time::Duration;

use integration_tests::require_bins;
use integration_tests::scale::{PYTHON, start_gateway, start_service};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use kubeless_api::{Function, HttpTrigger, NatsTrigger, find_condition};
use kubeless_testkit::{NatsServer, TestCluster, eventually};
use serde_json::{Value, json};

/// The attacker's probe: fetches (GET) or posts to the URL it is sent and answers the status.
/// It prints what it gets, so the test sees any request of the victim's that reaches it.
const PROBE: &str = r#"
import urllib.error
import urllib.request


def handler(event, context):
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode()
    print("EVENT", data, flush=True)
    method, url = data.split(" ", 1)
    body = b"_token=stolen" if method == "POST" else None
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return "status %d" % r.status
    except urllib.error.HTTPError as e:
        return "status %d" % e.code
    except Exception as e:
        return "error %s" % e
"#;

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
    kubeless_testkit::client_with_token(c.cluster.kubeconfig_path(), token).await
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

    // 4. Host access in a template: refused by the install's default policy, naming the field.
    let escalate = function(
        ATTACKER,
        "escalate",
        json!({"deployment": {"spec": {"template": {"spec": {
            "hostNetwork": true,
            "volumes": [{"name": "etc", "hostPath": {"path": "/etc"}}]
        }}}}}),
    );
    Api::<Function>::namespaced(client.clone(), ATTACKER)
        .create(&PostParams::default(), &escalate)
        .await
        .unwrap();
    let refused = eventually(
        "the escalating Function refused",
        Duration::from_secs(30),
        || async {
            let (ready, reason, message) = ready_condition(&client, ATTACKER, "escalate").await?;
            (!ready && reason == "InvalidSpec").then_some(message)
        },
    )
    .await;
    assert!(
        refused.contains("hostNetwork") || refused.contains("hostPath"),
        "the refusal names the field: {refused}"
    );
    assert!(
        pods.list(&ListParams::default().labels("function=escalate"))
            .await
            .unwrap()
            .items
            .is_empty(),
        "no pod of a refused template"
    );
    eprintln!("attacker sees on its escalating Function: {refused}");

    // 5. The dashboard, from a pod of the attacker: 401 for the page and for a delete.
    let ui_port = kubeless_testkit::free_port();
    let mut ui =
        tokio::process::Command::new(integration_tests::target_debug_dir().join("kubeless"))
            .arg("ui")
            .arg("--kubeconfig")
            .arg(c.cluster.kubeconfig_path())
            .args(["--namespace", VICTIM, "--port", &ui_port.to_string()])
            .env_remove("KUBECONFIG")
            .env_remove("KUBELESS_UI_TOKEN_FILE")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(ui.stdout.take().unwrap()));
    let printed_url = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_default();
    assert!(printed_url.contains("?token="), "{printed_url}");
    let base = format!("http://127.0.0.1:{ui_port}");
    let mut prober = function(ATTACKER, "prober", json!({"function": PROBE}));
    prober.metadata.labels = Some([("app".to_string(), "prober".to_string())].into());
    Api::<Function>::namespaced(client.clone(), ATTACKER)
        .create(&PostParams::default(), &prober)
        .await
        .unwrap();
    let probe: NatsTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "probe", "namespace": ATTACKER},
        "spec": {"topic": "probe", "functionSelector": {"matchLabels": {"app": "prober"}}}
    }))
    .unwrap();
    Api::<NatsTrigger>::namespaced(client.clone(), ATTACKER)
        .create(&PostParams::default(), &probe)
        .await
        .unwrap();
    wait_function_ready(&client, ATTACKER, "prober").await;
    kubeless_testkit::wait_ready_in::<NatsTrigger>(&client, ATTACKER, "probe").await;
    let ask = |what: String| {
        let publisher = publisher.clone();
        async move {
            let reply = tokio::time::timeout(
                Duration::from_secs(30),
                publisher.request("probe", what.into()),
            )
            .await
            .unwrap()
            .unwrap();
            String::from_utf8_lossy(&reply.payload).to_string()
        }
    };
    let page = ask(format!("GET {base}/functions/orders")).await;
    let delete = ask(format!("POST {base}/functions/orders/delete")).await;
    eprintln!("attacker's pod asking the dashboard: page {page}, delete {delete}");
    assert_eq!(page, "status 401", "the dashboard served a page to a pod");
    assert_eq!(delete, "status 401", "the dashboard took a post from a pod");
    assert!(
        Api::<Function>::namespaced(client.clone(), VICTIM)
            .get_opt("orders")
            .await
            .unwrap()
            .is_some(),
        "the victim's Function was deleted"
    );
    drop(ui);

    // 6. The victim's gateway host, claimed again by the attacker.
    let (_gateway, gateway_addr) = start_gateway(&c);
    let creds: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds", "namespace": VICTIM},
        // alice / s3cret! ({SHA} htpasswd entry)
        "stringData": {"auth": "alice:{SHA}YWXIkDPDfrJ6I4yV+0kqTJdT5SE=\n"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), VICTIM)
        .create(&PostParams::default(), &creds)
        .await
        .unwrap();
    let http_trigger = |ns: &str, name: &str, function: &str, path: &str, auth: bool| {
        let mut spec = json!({"function-name": function, "host-name": "shop.example.com",
                              "path": path, "gateway": "nginx"});
        if auth {
            spec["basic-auth-secret"] = json!("creds");
        }
        serde_json::from_value::<HttpTrigger>(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        }))
        .unwrap()
    };
    Api::<HttpTrigger>::namespaced(client.clone(), VICTIM)
        .create(
            &PostParams::default(),
            &http_trigger(VICTIM, "shop", "orders", "/", true),
        )
        .await
        .unwrap();
    // Later, from a namespace that sorts first: the same host and path, and a longer prefix.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (name, path) in [("steal", "/"), ("deeper", "/api")] {
        Api::<HttpTrigger>::namespaced(client.clone(), ATTACKER)
            .create(
                &PostParams::default(),
                &http_trigger(ATTACKER, name, "prober", path, false),
            )
            .await
            .unwrap();
    }
    for name in ["steal", "deeper"] {
        let message = eventually(
            &format!("RouteConflict on the attacker's {name}"),
            Duration::from_secs(30),
            || async {
                let t = Api::<HttpTrigger>::namespaced(client.clone(), ATTACKER)
                    .get(name)
                    .await
                    .ok()?;
                let c = find_condition(&t.status?.conditions, "Ready")?.clone();
                (c.reason.as_deref() == Some("RouteConflict") && !c.is_true())
                    .then(|| c.message.unwrap_or_default())
            },
        )
        .await;
        assert!(
            message.contains("shop.example.com") && message.contains(VICTIM),
            "{name}: {message}"
        );
        eprintln!("attacker sees on its HTTPTrigger {name}: {message}");
    }
    eventually(
        "a RouteConflict Warning Event",
        Duration::from_secs(30),
        || async {
            let list =
                Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ATTACKER)
                    .list(&ListParams::default())
                    .await
                    .ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("RouteConflict")
                        && e.type_.as_deref() == Some("Warning")
                })
                .then_some(())
        },
    )
    .await;
    let http = reqwest::Client::new();
    let get = |path: &'static str, auth: bool| {
        let mut req = http
            .post(format!("http://{gateway_addr}{path}"))
            .header("host", "shop.example.com")
            .body(format!("via {path}"));
        if auth {
            req = req.basic_auth("alice", Some("s3cret!"));
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        }
    };
    // The gateway loads routes in the background: wait for the victim's to answer.
    eventually(
        "the victim's route answers",
        Duration::from_secs(60),
        || async { (get("/", true).await.0 == 200).then_some(()) },
    )
    .await;
    for path in ["/", "/api/x"] {
        let (status, body) = get(path, false).await;
        assert_eq!(status, 401, "{path} without credentials: {body}");
        let (status, body) = get(path, true).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body, "ok", "{path} answered by the victim's function");
    }
    // Sent as written (an HTTP client library would resolve the dots itself first).
    let raw = |path: &'static str| {
        let addr = gateway_addr.clone();
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            // alice:s3cret!
            let req = format!(
                "GET {path} HTTP/1.1\r\nHost: shop.example.com\r\n\
                 Authorization: Basic YWxpY2U6czNjcmV0IQ==\r\nConnection: close\r\n\r\n"
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out).await;
            out.lines().next().unwrap_or_default().to_string()
        }
    };
    let above = raw("/../../etc/passwd").await;
    assert!(
        above.contains(" 400 "),
        "a path above the root is refused: {above}"
    );
    let dotted = raw("/public/%2e%2e/api/z").await;
    assert!(
        dotted.contains(" 200 "),
        "dot segments resolve before matching: {dotted}"
    );
    let (status, _) = get("/metrics", true).await;
    assert_eq!(status, 404, "the runtime's own metrics are not routed");

    // A catch-all of the attacker (no host: the first such claim, so it is served) gets the
    // hosts nobody routes, but no path of a host the victim routes, not even one the victim's
    // triggers do not match.
    let send = |host: &'static str, path: &'static str, body: &'static str| {
        let req = http
            .post(format!("http://{gateway_addr}{path}"))
            .header("host", host)
            .basic_auth("alice", Some("s3cret!"))
            .body(body);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        }
    };
    let catch_all: HttpTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
        "metadata": {"name": "catch-all", "namespace": ATTACKER},
        "spec": {"function-name": "prober", "path": "/", "gateway": "nginx"}
    }))
    .unwrap();
    Api::<HttpTrigger>::namespaced(client.clone(), ATTACKER)
        .create(&PostParams::default(), &catch_all)
        .await
        .unwrap();
    let mut narrow = http_trigger(VICTIM, "orders-api", "orders", "/api", true);
    narrow.spec.host_name = Some("orders.example.com".into());
    Api::<HttpTrigger>::namespaced(client.clone(), VICTIM)
        .create(&PostParams::default(), &narrow)
        .await
        .unwrap();
    eventually(
        "the attacker's catch-all answers a host nobody routes",
        Duration::from_secs(60),
        || async {
            // A probe of a closed port: the prober answers "error ..." (or a status).
            let probe = "GET http://127.0.0.1:9/";
            let (status, body) = send("unclaimed.example.com", "/", probe).await;
            (status == 200 && (body.starts_with("error") || body.starts_with("status")))
                .then_some(())
        },
    )
    .await;
    eventually(
        "the victim's orders.example.com/api answers",
        Duration::from_secs(60),
        || async {
            let (status, body) = send("orders.example.com", "/api/x", "via orders /api/x").await;
            (status == 200 && body == "ok").then_some(())
        },
    )
    .await;
    for path in ["/other", "/"] {
        let (status, body) = send("orders.example.com", path, "via orders elsewhere").await;
        assert_eq!(
            status, 404,
            "orders.example.com{path} is the victim's host: {body}"
        );
    }
    eventually(
        "the victim's function printed the gateway's calls",
        Duration::from_secs(30),
        || async {
            let log = printed(&client, VICTIM, "orders").await;
            (log.iter().any(|l| l == "via /api/x")).then_some(())
        },
    )
    .await;
    assert!(
        printed(&client, ATTACKER, "prober")
            .await
            .iter()
            .all(|l| !l.starts_with("via ")),
        "the attacker's function got a request for the victim's host"
    );

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
