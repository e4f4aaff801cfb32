//! The malformed-object sweep of issue 20 against running controllers: the function-controller,
//! http-trigger-controller and cronjob-trigger-controller binaries run against devcluster while
//! every top-level field of each kind's full fixture is given hostile values (wrong types,
//! negative and huge numbers, a 1 MiB string, unicode and control characters, 10,000 labels, a
//! 1 MiB function body). Each object is refused at apply time (422) or accepted; the server
//! never answers 5xx, no controller exits, none spins afterwards (its CPU time is sampled from
//! /proc), and each still reconciles a valid object created after the sweep.
//! Uses the binaries `cargo build --workspace --bins` left in the target dir.
#![cfg(test)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::{repo_root, target_debug_dir, yaml_documents};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

const SERVICES: [&str; 3] = [
    "function-controller",
    "http-trigger-controller",
    "cronjob-trigger-controller",
];
/// Average CPU share of one core a controller may use while idle after the sweep; a spinning
/// reconcile loop uses about 1.0.
const IDLE_CPU_LIMIT: f64 = 0.25;

fn spawn(bin: &str, kubeconfig: &std::path::Path, dir: &std::path::Path) -> Child {
    let log = std::fs::File::create(dir.join(format!("{bin}.log"))).unwrap();
    Command::new(target_debug_dir().join(bin))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", kubeconfig)
        .env("KUBELESS_ADMIN_ADDR", "127.0.0.1:0")
        .env("KUBELESS_LEADER_ELECT", "false")
        .env("KUBELESS_LOG_LEVEL", "info")
        .env("POD_NAMESPACE", "default")
        .env("POD_NAME", bin)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{bin}: {e} (run `cargo build --workspace --bins` first; scripts/test.sh does)")
        })
}

/// User plus system CPU time of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_second() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn fixture(name: &str) -> Value {
    let path = repo_root().join("shared/api/tests/fixtures").join(name);
    yaml_documents(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .remove(0)
}

/// Hostile values for a field whose valid value is `valid`.
fn hostile(valid: &Value) -> Vec<Value> {
    let mut out = vec![
        json!(-1),
        json!(1e300),
        json!(i64::MAX),
        json!("a".repeat(1 << 20)),
        json!("\u{0}\u{7}\u{1b}[31m\r\n\u{202e}é🙂"),
        json!(null),
        json!([]),
        json!({}),
        json!(true),
    ];
    if let Value::Object(map) = valid {
        // Each sub-field given a wrong type, one at a time.
        for k in map.keys() {
            let mut v = valid.clone();
            v[k] = json!([[{"deep": -1}]]);
            out.push(v);
        }
    }
    out
}

fn api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubeless.io", "v1beta1", kind);
    let plural = match kind {
        "NATSTrigger" => "natstriggers".to_string(),
        "HTTPTrigger" => "httptriggers".to_string(),
        other => format!("{}s", other.to_ascii_lowercase()),
    };
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_objects_cost_only_themselves_in_running_controllers() {
    let state = tempfile::tempdir().unwrap();
    let cluster = devcluster::DevCluster::start(devcluster::Options::for_tests(state.path()))
        .await
        .unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for text in std::fs::read_dir(repo_root().join("deploy/crds")).unwrap() {
        let text = std::fs::read_to_string(text.unwrap().path()).unwrap();
        for doc in yaml_documents(&text).unwrap() {
            crds.create(
                &PostParams::default(),
                &serde_json::from_value(doc).unwrap(),
            )
            .await
            .unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut children: Vec<(&str, Child)> = SERVICES
        .iter()
        .map(|s| (*s, spawn(s, cluster.kubeconfig_path(), state.path())))
        .collect();

    let bases = [
        ("Function", "function-full.yaml"),
        ("HTTPTrigger", "httptrigger-full.yaml"),
        ("CronJobTrigger", "cronjobtrigger-full.yaml"),
        ("KafkaTrigger", "kafkatrigger.yaml"),
        ("NATSTrigger", "natstrigger.yaml"),
        ("KinesisTrigger", "kinesistrigger.yaml"),
    ];
    let started = Instant::now();
    let mut tally: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut n = 0;
    for (kind, file) in bases {
        let base = fixture(file);
        let api = api(&client, kind);
        let mut variants: Vec<Value> = Vec::new();
        let spec = base["spec"].as_object().cloned().unwrap_or_default();
        for (key, valid) in &spec {
            for value in hostile(valid) {
                let mut obj = base.clone();
                obj["spec"][key] = value;
                variants.push(obj);
            }
        }
        // An unknown field, 10,000 labels, and (for Functions) a 1 MiB body.
        let mut unknown = base.clone();
        unknown["spec"]["bogus"] = json!({"x": 1});
        variants.push(unknown);
        let mut labels = base.clone();
        labels["metadata"]["labels"] =
            Value::Object((0..10_000).map(|i| (format!("l{i}"), json!("v"))).collect());
        variants.push(labels);
        if kind == "Function" {
            let mut body = base.clone();
            body["spec"]["function"] = json!("#".repeat(1 << 20));
            variants.push(body);
        }
        for mut obj in variants {
            n += 1;
            obj["metadata"]["name"] = json!(format!("bad-{n}"));
            obj["metadata"]["namespace"] = json!("default");
            let obj: DynamicObject = serde_json::from_value(obj).unwrap();
            let entry = tally.entry(kind).or_default();
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => entry.0 += 1,
                Err(kube::Error::Api(s)) if (400..500).contains(&s.code) => entry.1 += 1,
                Err(e) => panic!("{kind} bad-{n}: the server failed instead of refusing: {e}"),
            }
        }
    }
    kubeless_testkit::report!(
        "sweep: {n} hostile objects in {:.1} s; per kind (accepted, refused): {tally:?}",
        started.elapsed().as_secs_f64()
    );
    for (_, refused) in tally.values() {
        assert!(
            *refused > 0,
            "every kind refuses some hostile values: {tally:?}"
        );
    }

    // Let the controllers work through what was accepted, then sample their CPU while idle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (name, child) in &mut children {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{name} exited during the sweep: see {}",
            state.path().join(format!("{name}.log")).display()
        );
    }
    let hz = clock_ticks_per_second();
    let before: Vec<u64> = children.iter().map(|(_, c)| cpu_ticks(c.id())).collect();
    let window = Duration::from_secs(8);
    tokio::time::sleep(window).await;
    for ((name, child), b) in children.iter().zip(before) {
        let share = (cpu_ticks(child.id()) - b) as f64 / hz / window.as_secs_f64();
        kubeless_testkit::report!(
            "{name}: {:.1}% of a core while idle after the sweep",
            share * 100.0
        );
        assert!(
            share < IDLE_CPU_LIMIT,
            "{name} spins after the sweep: {:.0}% of a core",
            share * 100.0
        );
    }

    // Every controller still watches: a valid object of each of its kinds gets a status.
    for (kind, file) in [
        ("Function", "function-full.yaml"),
        ("HTTPTrigger", "httptrigger-full.yaml"),
        ("CronJobTrigger", "cronjobtrigger-full.yaml"),
    ] {
        let api = api(&client, kind);
        let mut obj = fixture(file);
        obj["metadata"]["name"] = json!(format!("good-{}", kind.to_ascii_lowercase()));
        obj["metadata"]["namespace"] = json!("default");
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        api.create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = api.get(&name).await.unwrap();
            let conditions = got.data["status"]["conditions"].as_array().map(Vec::len);
            if conditions.unwrap_or(0) > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{kind} {name} got no status condition after the sweep: {}",
                got.data["status"]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for (_, mut child) in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    cluster.shutdown().await;
}
