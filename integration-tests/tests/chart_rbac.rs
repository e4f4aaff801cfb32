//! Every service under exactly its chart's RBAC: the umbrella chart rendered by the real Helm
//! engine (helm-python-sdk), its ServiceAccounts, Roles, ClusterRoles, bindings, ConfigMaps,
//! Services and Deployments applied to devcluster, which runs each Deployment as a pod with a
//! token for the chart's ServiceAccount and enforces RBAC and PodSecurity `restricted` in the
//! release and function namespaces. A Python and a Node.js function are deployed with the
//! `kubeless` CLI; the Python one gets one event through each trigger: HTTP (the built-in
//! gateway), cron (scheduler mode), NATS, Kafka (tansu), Kinesis (moto) and Redis Streams
//! (redis-server, the redis-trigger of docs/custom-trigger.md). The test fails if a
//! service log mentions "forbidden". Uses the binaries `cargo build --workspace --bins` left in
//! this test's target dir (scripts/test.sh builds them first) and the brokers .ci/run installs.
//!
//! `every_service_runs_from_its_image_in_container_mode` does the same with every service and
//! runtime from its image: built by scripts/images.sh (buildah), pushed to Debian's
//! docker-registry on loopback, the chart rendered with `global.imageRegistry` pointing there
//! and devcluster running pods with podman (container mode). It prints each service's idle
//! memory from the metrics API (`kubectl top`) in both modes.
#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::images::{Registry, images_sh, podman_unusable};
use integration_tests::{render_chart, repo_root, target_debug_dir, yaml_documents};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams, LogParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use kubeless_testkit::{Moto, NatsServer, RedisServer, Tansu, free_port};
use serde_json::{Value, json};

const RELEASE_NS: &str = "kubeless";
const FUNCTIONS_NS: &str = "functions";
const TOPIC: &str = "rbac-events";

const HANDLER: &str = r#"
def handler(event, context):
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    print("EVENT", data, flush=True)
    return {"got": data}
"#;

const NODE_HANDLER: &str = r#"
module.exports = {
  handler: (event, context) => ({
    node: true,
    got: Buffer.isBuffer(event.data) ? event.data.toString('utf8') : event.data,
  }),
};
"#;

/// Every subchart on, pointed at the test's brokers. devcluster pods share the machine's ports,
/// so each service binds its pod's address (`global.bindPodIP`) instead of 0.0.0.0.
fn values(nats: &str, kafka: &str, dashboard_port: u16, mode: Mode, registry: &str) -> Value {
    let mut global = json!({"logFormat": "text", "logLevel": "info", "bindPodIP": true,
                   "functionsNamespace": if mode == Mode::Namespaced { FUNCTIONS_NS } else { "" },
                   "probes": {"periodSeconds": 2, "timeoutSeconds": 2}});
    if mode == Mode::Images {
        global["imageRegistry"] = json!(registry);
        global["imagePullPolicy"] = json!("Always");
    }
    json!({
        "global": global,
        // A warm pool pod runs under the chart's RBAC and PodSecurity too.
        "function-controller": {"enabled": true, "warmPool": {"runtimes": {"python3.11": 1}}},
        "http-trigger-controller": {"enabled": true, "gateway": {"enabled": true}},
        "cronjob-trigger-controller": {"enabled": true, "schedulerMode": true},
        "nats-trigger": {"enabled": true, "nats": {"url": nats}},
        "kafka-trigger": {"enabled": true, "kafka": {"brokers": kafka, "sessionTimeoutMs": 6000}},
        "kinesis-trigger": {"enabled": true},
        "redis-trigger": {"enabled": true},
        // The dashboard listens on the pod's loopback, which here is the machine's: a free port.
        "dashboard": {"enabled": true, "namespace": FUNCTIONS_NS, "port": dashboard_port},
    })
}

/// The chart rendered by the real Helm engine, one JSON value per object, in Helm's install
/// order (the shared [`render_chart`]).
fn render(values: &Value) -> Vec<Value> {
    render_chart(values, RELEASE_NS)
}

/// Creates `obj` with the admin client, resolving its kind through discovery.
async fn apply(client: &Client, discovery: &Discovery, obj: &Value) {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("devcluster does not serve {api_version} {kind}"));
    let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(RELEASE_NS);
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    if let Err(e) = api.create(&PostParams::default(), &o).await {
        panic!(
            "creating {kind} {}: {e}",
            obj["metadata"]["name"].as_str().unwrap_or("?")
        );
    }
}

async fn create(client: &Client, discovery: &Discovery, obj: Value) {
    apply(client, discovery, &obj).await;
}

async fn pods_in(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn log_of(client: &Client, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), ns)
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default()
}

/// Every service pod's log, for failure messages and the "forbidden" check.
async fn service_logs(client: &Client) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for p in pods_in(client, RELEASE_NS, "app.kubernetes.io/instance=kubeless").await {
        let name = p.name_any();
        let log = log_of(client, RELEASE_NS, &name).await;
        out.insert(name, log);
    }
    out
}

async fn dump(client: &Client) -> String {
    let mut s = String::new();
    for ns in [RELEASE_NS, FUNCTIONS_NS] {
        for p in pods_in(client, ns, "").await {
            s.push_str(&format!(
                "--- pod {ns}/{} status {}\n",
                p.name_any(),
                serde_json::to_string(&p.status).unwrap_or_default()
            ));
            s.push_str(&log_of(client, ns, &p.name_any()).await);
        }
    }
    s
}

async fn eventually<T, F, Fut>(client: &Client, what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {secs} s waiting for {what}\n{}",
                dump(client).await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// POSTs `body` as text to the gateway pod at `/path` until a 2xx answer comes back.
async fn post_gateway(client: &Client, gateway_ip: &str, path: &str, body: &str) -> String {
    let http = reqwest::Client::new();
    let url = format!("http://{gateway_ip}:8080/{path}");
    eventually(client, &format!("an answer from {url}"), 30, || {
        let (http, url, body) = (http.clone(), url.clone(), body.to_string());
        async move {
            let r = http
                .post(url)
                .header("content-type", "text/plain")
                .body(body)
                .send()
                .await
                .ok()?;
            if !r.status().is_success() {
                return None;
            }
            r.text().await.ok()
        }
    })
    .await
}

async fn create_kafka_topic(brokers: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1));
    let res = admin
        .create_topics(&[topic], &AdminOptions::new())
        .await
        .unwrap();
    for r in res {
        r.unwrap();
    }
}

async fn produce_kafka(brokers: &str, payload: &str) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("message.timeout.ms", "10000")
        .create()
        .unwrap();
    producer
        .send(
            FutureRecord::<(), str>::to(TOPIC).payload(payload),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

/// devcluster with the chart installed: CRDs, the release and function namespaces (both
/// enforcing PodSecurity `restricted`), then the rendered objects, and every service pod Ready.
struct Installed {
    cluster: devcluster::DevCluster,
    client: Client,
    discovery: Discovery,
    deployments: Vec<String>,
    _state: tempfile::TempDir,
}

fn assert_binaries(bins: &[&str]) {
    let debug = target_debug_dir();
    for bin in bins {
        assert!(
            debug.join(bin).exists(),
            "{} is missing: run `cargo build --workspace --bins` first (scripts/test.sh does)",
            debug.join(bin).display()
        );
    }
}

async fn install(objects: &[Value], mode: Mode) -> Installed {
    let state = tempfile::Builder::new()
        .prefix("rbac")
        .tempdir_in("/tmp")
        .unwrap();
    let mut options = devcluster::Options::for_tests(state.path());
    if mode == Mode::Images {
        options = options.with_containers();
    }
    let cluster = devcluster::DevCluster::start(options).await.unwrap();
    let client = cluster.client().await.unwrap();

    // CRDs first (Helm installs the chart's crds/ before anything else), then the namespaces.
    let crd_dir = repo_root().join("deploy/crds");
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(&crd_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            for crd in yaml_documents(&std::fs::read_to_string(&path).unwrap()).unwrap() {
                apply(&client, &discovery, &crd).await;
                let group = crd["spec"]["group"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
                    let version = v["name"].as_str().unwrap_or_default().to_string();
                    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
                    kinds.push(kube::api::GroupVersionKind::gvk(&group, &version, kind));
                }
            }
        }
    }
    for ns in [RELEASE_NS, FUNCTIONS_NS] {
        create(
            &client,
            &discovery,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
        )
        .await;
    }
    // Established CRDs show up in discovery a moment later, each kind on its own.
    let discovery = eventually(&client, "every CRD's kind in discovery", 30, || {
        let (client, kinds) = (client.clone(), kinds.clone());
        async move {
            let d = Discovery::new(client).run().await.ok()?;
            kinds
                .iter()
                .all(|gvk| d.resolve_gvk(gvk).is_some())
                .then_some(d)
        }
    })
    .await;

    // The chart, in the order render.py gives: Helm's install order by kind.
    let deployments: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for o in objects {
        apply(&client, &discovery, o).await;
    }

    // Every service pod starts and passes its probes under its own ServiceAccount (pulling
    // its image first in container mode).
    let secs = if mode == Mode::Images { 300 } else { 120 };
    eventually(&client, "every service pod Ready", secs, || {
        let client = client.clone();
        let want = deployments.len();
        async move {
            let pods = pods_in(&client, RELEASE_NS, "app.kubernetes.io/instance=kubeless").await;
            (pods.iter().filter(|p| ready(p)).count() >= want).then_some(())
        }
    })
    .await;
    for p in pods_in(&client, RELEASE_NS, "app.kubernetes.io/instance=kubeless").await {
        let sa = p.spec.as_ref().and_then(|s| s.service_account_name.clone());
        assert!(
            sa.as_deref().is_some_and(|s| s.starts_with("kubeless-")),
            "pod {} runs as the chart's ServiceAccount, not {sa:?}",
            p.name_any()
        );
    }

    Installed {
        cluster,
        client,
        discovery,
        deployments,
        _state: state,
    }
}

/// The Python function `hello` in the functions namespace, deployed with the CLI.
async fn deploy_function(kubeconfig: &Path, labels: &str) {
    deploy(
        kubeconfig,
        "hello",
        "python3.11",
        "handler.py",
        HANDLER,
        labels,
    )
    .await;
}

/// `kubeless function deploy NAME` from a source file, waiting (`--wait`) for it to be Ready.
async fn deploy(
    kubeconfig: &Path,
    name: &str,
    runtime: &str,
    file: &str,
    source: &str,
    labels: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    let mut cmd = tokio::process::Command::new(target_debug_dir().join("kubeless"));
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["function", "deploy", name, "--namespace", FUNCTIONS_NS])
        .args(["--runtime", runtime, "--handler", "handler.handler"])
        .arg("--from-file")
        .arg(&path)
        .args(["--timeout", "10", "--wait", "--wait-timeout", "300"]);
    if !labels.is_empty() {
        cmd.args(["--label", labels]);
    }
    let out = cmd.output().await.unwrap();
    assert!(
        out.status.success(),
        "kubeless function deploy {name}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn gvk_api(client: &Client, discovery: &Discovery, kind: &str) -> Api<DynamicObject> {
    let (ar, _) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "kubeless.io",
            "v1beta1",
            kind,
        ))
        .unwrap_or_else(|| panic!("{kind} is not served"));
    Api::<DynamicObject>::namespaced_with(client.clone(), FUNCTIONS_NS, &ar)
}

/// Waits for the object `name` of this kind to have the condition Ready=True.
async fn wait_ready(client: &Client, api: &Api<DynamicObject>, kind: &str, name: &str, secs: u64) {
    eventually(client, &format!("{kind} {name} Ready"), secs, || {
        let api = api.clone();
        async move {
            let t = api.get(name).await.ok()?;
            let conds = t.data.pointer("/status/conditions")?.as_array()?.clone();
            conds
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                .then_some(())
        }
    })
    .await;
}

/// Waits for the function's log to hold every string of `wanted`.
async fn wait_function_log(client: &Client, wanted: &[String], secs: u64) {
    eventually(
        client,
        &format!("{wanted:?} in the function's log"),
        secs,
        || {
            let client = client.clone();
            let wanted = wanted.to_vec();
            async move {
                let mut log = String::new();
                for p in pods_in(&client, FUNCTIONS_NS, "function=hello").await {
                    log.push_str(&log_of(&client, FUNCTIONS_NS, &p.name_any()).await);
                }
                wanted
                    .iter()
                    .all(|w| log.contains(w.as_str()))
                    .then_some(())
            }
        },
    )
    .await;
}

/// Fails when a service log mentions "forbidden": a rule its chart lacks.
async fn assert_nothing_forbidden(client: &Client, deployments: usize) {
    let logs = service_logs(client).await;
    assert_eq!(logs.len(), deployments, "{:?}", logs.keys());
    for (pod, log) in &logs {
        eprintln!("{pod}: {} log lines", log.lines().count());
        if std::env::var_os("CHART_RBAC_SHOW_LOGS").is_some() {
            eprintln!("{log}");
        }
        assert!(!log.is_empty(), "{pod} logged nothing");
    }
    let refused: Vec<String> = logs
        .iter()
        .filter(|(_, log)| log.to_lowercase().contains("forbidden"))
        .map(|(pod, log)| format!("--- {pod}\n{log}"))
        .collect();
    assert!(
        refused.is_empty(),
        "services were refused by RBAC:\n{}",
        refused.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_runs_under_its_charts_rbac() {
    all_triggers(Mode::Processes).await;
}

/// The same with `global.functionsNamespace`: Roles in the function namespace instead of
/// ClusterRoles, and the services watch that namespace only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_scoped_install_runs_under_its_roles() {
    all_triggers(Mode::Namespaced).await;
}

/// The same with every service and runtime from its image, pulled from a loopback registry and
/// run by podman (devcluster's container mode): what a user installs on a cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_runs_from_its_image_in_container_mode() {
    if let Some(why) = podman_unusable() {
        kubeless_testkit::report!(
            "SKIPPED every_service_runs_from_its_image_in_container_mode: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    all_triggers(Mode::Images).await;
}

/// How the chart is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Cluster-wide, the services as processes (devcluster's default).
    Processes,
    /// `global.functionsNamespace` set: Roles instead of ClusterRoles.
    Namespaced,
    /// Cluster-wide, every service and runtime from its image in container mode.
    Images,
}

/// The images of the services and of the two runtimes the test deploys.
const IMAGES: [&str; 10] = [
    "function-controller",
    "http-trigger-controller",
    "cronjob-trigger-controller",
    "nats-trigger",
    "kafka-trigger",
    "kinesis-trigger",
    "redis-trigger",
    "dashboard",
    "runtime-python",
    "runtime-nodejs",
];

/// Builds (cached after scripts/test.sh's image stage) and pushes the images to a new loopback
/// registry, printing the times.
fn registry_with_images() -> Registry {
    let start = Instant::now();
    let built = images_sh(&[&["build"][..], &IMAGES[..]].concat());
    kubeless_testkit::report!(
        "images.sh build ({} images): {:.1} s\n{}",
        IMAGES.len(),
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&built.stdout).trim()
    );
    let registry = Registry::start();
    let start = Instant::now();
    let pushed = registry.push(&IMAGES);
    kubeless_testkit::report!(
        "images.sh push to {}: {:.1} s\n{}",
        registry.addr,
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&pushed.stdout).trim()
    );
    registry
}

/// Each service pod's memory from the metrics API (what `kubectl top pod` shows), printed.
async fn print_idle_memory(client: &Client, mode: Mode, pods: usize) {
    if let Some(version) = devcluster::kubernetes_from_env() {
        kubeless_testkit::report!(
            "SKIP idle memory of each service on Kubernetes {version}: the real control plane \
             here has no metrics API (no metrics-server; docs/devcluster.md, \"End-to-end tests \
             on a real control plane\")"
        );
        return;
    }
    // The runner samples every few seconds: wait until each service pod has been measured.
    let list = eventually(client, "a PodMetrics for every service pod", 60, || {
        let client = client.clone();
        async move {
            let request = http::Request::get(format!(
                "/apis/metrics.k8s.io/v1beta1/namespaces/{RELEASE_NS}/pods"
            ))
            .body(Vec::new())
            .ok()?;
            let list: Value = client.request(request).await.ok()?;
            (list["items"].as_array()?.len() >= pods).then_some(list)
        }
    })
    .await;
    let mut lines = Vec::new();
    for pod in list["items"].as_array().into_iter().flatten() {
        let name = pod["metadata"]["labels"]["app.kubernetes.io/name"]
            .as_str()
            .or(pod["metadata"]["name"].as_str())
            .unwrap_or("?");
        for c in pod["containers"].as_array().into_iter().flatten() {
            let memory = c["usage"]["memory"].as_str().unwrap_or("");
            let kib: f64 = memory
                .strip_suffix("Ki")
                .and_then(|k| k.parse().ok())
                .unwrap_or_else(|| panic!("{name}: memory {memory:?} is not in Ki"));
            assert!(kib > 0.0, "{name}: no memory measured");
            let mib = kib / 1024.0;
            // The goal is for the images' optimised binaries; process mode runs debug builds.
            let over = if mode == Mode::Images && mib > 10.0 {
                "  [over the 10 MiB goal]"
            } else {
                ""
            };
            lines.push(format!("  {name}: {mib:.1} MiB{over}"));
        }
    }
    lines.sort();
    kubeless_testkit::report!(
        "idle memory of each service ({mode:?}, metrics API, {} binaries):\n{}",
        if mode == Mode::Images {
            "image"
        } else {
            "debug"
        },
        lines.join("\n")
    );
    assert!(!lines.is_empty(), "the metrics API listed no service pod");
}

async fn all_triggers(mode: Mode) {
    assert_binaries(&[
        "function-controller",
        "http-trigger-controller",
        "cronjob-trigger-controller",
        "nats-trigger",
        "kafka-trigger",
        "kinesis-trigger",
        "redis-trigger",
        "kubeless",
        "kubeless-runtime",
    ]);
    let nats = NatsServer::start();
    let redis_server = RedisServer::start();
    let kafka = Tansu::start();
    let moto = Moto::start();
    let nats_url = nats.url.clone();
    let kafka_addr = kafka.addr.clone();
    let moto_url = moto.endpoint.clone();

    let dashboard_port = free_port();
    let registry = (mode == Mode::Images).then(registry_with_images);
    let registry_addr = registry
        .as_ref()
        .map(|r| r.addr.clone())
        .unwrap_or_default();
    let objects = render(&values(
        &nats_url,
        &kafka_addr,
        dashboard_port,
        mode,
        &registry_addr,
    ));
    if mode == Mode::Namespaced {
        assert!(
            objects
                .iter()
                .all(|o| o["kind"] != "ClusterRole" && o["kind"] != "ClusterRoleBinding"),
            "a namespace-scoped install has no cluster-wide RBAC"
        );
    }
    let Installed {
        cluster,
        client,
        discovery,
        deployments,
        _state,
    } = install(&objects, mode).await;
    assert_eq!(
        deployments.len(),
        8,
        "every subchart renders its Deployment: {deployments:?}"
    );
    // Idle: installed and Ready, no function or trigger yet.
    tokio::time::sleep(Duration::from_secs(3)).await;
    print_idle_memory(&client, mode, deployments.len()).await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let labels = json!({"app": "rbac-hello"});
    deploy_function(&kubeconfig, "app=rbac-hello").await;

    // A Node.js function beside it, called through the gateway too.
    deploy(
        &kubeconfig,
        "hello-js",
        "nodejs20",
        "handler.js",
        NODE_HANDLER,
        "",
    )
    .await;
    if mode == Mode::Images {
        // Every service and both functions run from the registry's images.
        for (ns, selector) in [
            (RELEASE_NS, "app.kubernetes.io/instance=kubeless"),
            (FUNCTIONS_NS, "function"),
        ] {
            for p in pods_in(&client, ns, selector).await {
                let images: Vec<String> = p
                    .status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
                    .map(|c| c.image_id.clone())
                    .collect();
                assert!(
                    !images.is_empty()
                        && images
                            .iter()
                            .all(|i| i.starts_with(&format!("{registry_addr}/kubeless-rs/"))),
                    "pod {ns}/{} runs {images:?}, not images from {registry_addr}",
                    p.name_any()
                );
            }
        }
    }
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
               "metadata": {"name": "hello-js", "namespace": FUNCTIONS_NS},
               "spec": {"function-name": "hello-js", "path": "js"}}),
    )
    .await;

    // One trigger of each kind.
    let marker = format!("m{}", std::process::id());
    let selector = json!({"matchLabels": labels});
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
        "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
        "spec": {"function-name": "hello", "path": "hello"}}),
    )
    .await;
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "CronJobTrigger",
        "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
        "spec": {"function-name": "hello", "schedule": "*/2 * * * * *",
                 "payload": format!("via-cron-{marker}")}}),
    )
    .await;
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
        "spec": {"topic": TOPIC, "functionSelector": selector}}),
    )
    .await;
    create_kafka_topic(&kafka_addr).await;
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
        "spec": {"topic": TOPIC, "functionSelector": selector}}),
    )
    .await;
    let kinesis = moto.kinesis();
    kinesis
        .create_stream()
        .stream_name(TOPIC)
        .shard_count(1)
        .send()
        .await
        .unwrap();
    create(
        &client,
        &discovery,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "aws", "namespace": FUNCTIONS_NS},
        "data": {"aws_access_key_id": "QUtJRFRFU1Q=", "aws_secret_access_key": "c2VjcmV0"}}),
    )
    .await;
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "KinesisTrigger",
        "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
        "spec": {"function-name": "hello", "stream": TOPIC, "aws-region": "us-east-1",
                 "secret": "aws", "endpoint": moto_url, "startingPosition": "TRIM_HORIZON"}}),
    )
    .await;

    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "RedisTrigger",
        "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
        "spec": {"url": redis_server.url, "stream": TOPIC, "functionSelector": selector}}),
    )
    .await;

    // Every trigger reports Ready before events are sent.
    for kind in [
        "HTTPTrigger",
        "CronJobTrigger",
        "NATSTrigger",
        "KafkaTrigger",
        "KinesisTrigger",
        "RedisTrigger",
    ] {
        wait_ready(
            &client,
            &gvk_api(&client, &discovery, kind),
            kind,
            "hello",
            60,
        )
        .await;
    }

    // Events: HTTP through the gateway pod, NATS, Kafka and Kinesis; cron fires by itself.
    let gateway_ip = pods_in(
        &client,
        RELEASE_NS,
        "app.kubernetes.io/name=http-trigger-controller",
    )
    .await
    .first()
    .and_then(|p| p.status.as_ref()?.pod_ip.clone())
    .expect("the gateway pod has an address");
    let http = reqwest::Client::new();
    let answer = post_gateway(&client, &gateway_ip, "hello", &format!("via-http-{marker}")).await;
    assert!(answer.contains(&format!("via-http-{marker}")), "{answer}");
    let answer = post_gateway(&client, &gateway_ip, "js", &format!("via-http-js-{marker}")).await;
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["node"], true, "{answer}");
    assert_eq!(answer["got"], format!("via-http-js-{marker}"), "{answer}");
    let nc = async_nats::connect(&nats_url).await.unwrap();
    nc.publish(TOPIC, format!("via-nats-{marker}").into())
        .await
        .unwrap();
    nc.flush().await.unwrap();
    produce_kafka(&kafka_addr, &format!("via-kafka-{marker}")).await;
    kinesis
        .put_record()
        .stream_name(TOPIC)
        .partition_key("k")
        .data(aws_sdk_kinesis::primitives::Blob::new(format!(
            "via-kinesis-{marker}"
        )))
        .send()
        .await
        .unwrap();

    let mut redis_con = redis::Client::open(redis_server.url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: String = redis::Commands::xadd(
        &mut redis_con,
        TOPIC,
        "*",
        &[("data", format!("via-redis-{marker}"))],
    )
    .unwrap();

    let wanted: Vec<String> = ["http", "cron", "nats", "kafka", "kinesis", "redis"]
        .iter()
        .map(|via| format!("via-{via}-{marker}"))
        .collect();
    wait_function_log(&client, &wanted, 120).await;

    // The dashboard shows the function and its triggers with its Role's rights, to the holder
    // of the token its pod printed in its log (as docs/dashboard.md tells users to read it).
    let dashboard_pod = pods_in(&client, RELEASE_NS, "app.kubernetes.io/name=dashboard")
        .await
        .first()
        .map(|p| p.name_any())
        .expect("the dashboard pod");
    let dashboard_log = log_of(&client, RELEASE_NS, &dashboard_pod).await;
    let token = dashboard_log
        .split_whitespace()
        .find_map(|w| w.split_once("/?token=").map(|(_, t)| t.to_string()))
        .unwrap_or_else(|| panic!("no dashboard URL in its log:\n{dashboard_log}"));
    let unauthorized = http
        .get(format!("http://127.0.0.1:{dashboard_port}/functions"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        unauthorized.status(),
        401,
        "the dashboard without its token"
    );
    for page in ["/functions", "/functions/hello", "/triggers"] {
        let r = http
            .get(format!("http://127.0.0.1:{dashboard_port}{page}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        assert!(
            status.is_success() && body.contains("hello"),
            "dashboard {page}: {status}\n{body}"
        );
    }

    // RBAC is enforced for these pods: the function-controller's ServiceAccount may not read
    // Secrets, which its chart does not grant.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), RELEASE_NS);
    let token = sas
        .create_token_request(
            "kubeless-function-controller",
            &PostParams::default(),
            &TokenRequest::default(),
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let as_controller = kubeless_testkit::client_with_token(cluster.kubeconfig_path(), token).await;
    let err = Api::<Secret>::namespaced(as_controller, FUNCTIONS_NS)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "the function-controller must not list Secrets: {err:?}"
    );

    // No service was refused anything its work needed.
    assert_nothing_forbidden(&client, deployments.len()).await;
    cluster.shutdown().await;
}

/// CronJob mode: the cronjob-trigger-controller writes a CronJob whose invoker Pods run in the
/// function's restricted namespace as their own ServiceAccount, bound (by the user, as
/// docs/cronjob-trigger-controller.md says) to the chart's `-invoker` ClusterRole, and read the
/// function's EndpointSlices with that token only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_invoker_pods_run_under_the_invoker_role() {
    assert_binaries(&[
        "function-controller",
        "cronjob-trigger-controller",
        "kubeless-cron-invoker",
        "kubeless-runtime",
    ]);
    let off = json!({"enabled": false});
    let objects = render(&json!({
        "global": {"logFormat": "text", "bindPodIP": true,
                   "probes": {"periodSeconds": 2, "timeoutSeconds": 2}},
        "function-controller": {"enabled": true},
        "cronjob-trigger-controller": {"enabled": true, "schedulerMode": false,
            "invoker": {"resolver": "endpointslices", "serviceAccount": "cron-invoker"}},
        "http-trigger-controller": off, "nats-trigger": off, "kafka-trigger": off,
        "kinesis-trigger": off, "dashboard": off,
    }));
    let Installed {
        cluster,
        client,
        discovery,
        deployments,
        _state,
    } = install(&objects, Mode::Processes).await;
    assert_eq!(deployments.len(), 2, "{deployments:?}");
    deploy_function(cluster.kubeconfig_path(), "app=rbac-hello").await;

    create(
        &client,
        &discovery,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "cron-invoker", "namespace": FUNCTIONS_NS}}),
    )
    .await;
    create(
        &client,
        &discovery,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "cron-invoker", "namespace": FUNCTIONS_NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "kubeless-cronjob-trigger-controller-invoker"},
               "subjects": [{"kind": "ServiceAccount", "name": "cron-invoker",
                             "namespace": FUNCTIONS_NS}]}),
    )
    .await;
    let marker = format!("via-cronjob-{}", std::process::id());
    create(
        &client,
        &discovery,
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": "CronJobTrigger",
               "metadata": {"name": "hello", "namespace": FUNCTIONS_NS},
               "spec": {"function-name": "hello", "schedule": "* * * * *", "payload": marker}}),
    )
    .await;
    wait_ready(
        &client,
        &gvk_api(&client, &discovery, "CronJobTrigger"),
        "CronJobTrigger",
        "hello",
        60,
    )
    .await;
    // The next minute's Job: its Pod gets the invoker's token and calls the function.
    wait_function_log(&client, std::slice::from_ref(&marker), 150).await;
    let invoker_pods = pods_in(&client, FUNCTIONS_NS, "").await;
    let invoker = invoker_pods
        .iter()
        .find(|p| p.name_any().starts_with("trigger-hello"))
        .expect("the invoker Job's Pod");
    assert_eq!(
        invoker
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some("cron-invoker")
    );
    let log = log_of(&client, FUNCTIONS_NS, &invoker.name_any()).await;
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the invoker was refused:\n{log}"
    );
    assert_nothing_forbidden(&client, deployments.len()).await;
    cluster.shutdown().await;
}
