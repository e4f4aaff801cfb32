//! The Redis Streams trigger end to end, the worked example of docs/custom-trigger.md:
//! devcluster running a Python function deployed with `kubeless function deploy` (the
//! function-controller as a process), Debian's redis-server on loopback and the redis-trigger
//! binary as a process. A trigger whose Redis is unreachable is `BrokerUnavailable`; entries
//! reach the function; an entry the function fails on goes to the dead-letter stream with the
//! error; and after a SIGKILL of the trigger mid-stream, with entries read but not acknowledged,
//! a new process delivers every entry at least once and leaves nothing pending; SIGTERM ends
//! it cleanly. Uses the binaries `cargo build --workspace --bins` left in this
//! test's target dir (scripts/test.sh builds them first) and redis-server (.ci/run installs it).
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use integration_tests::{require_bins, target_debug_dir};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use kubeless_api::conditions::reasons;
use kubeless_api::{RedisTrigger, find_condition, is_ready};
use kubeless_testkit::{
    NS, RedisServer, ServiceProcess, TestCluster, eventually, free_port, report,
};
use redis::Commands;
use redis::streams::{StreamPendingReply, StreamRangeReply};
use serde_json::json;

const HANDLER: &str = r#"
import time

def handler(event, context):
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    print("EVENT", event["event-id"], data, flush=True)
    if data == "poison":
        raise Exception("poison entry")
    time.sleep(0.02)
    return "ok"
"#;

const STREAM: &str = "events";
const DEAD: &str = "events-dead";
/// `<namespace>_<trigger>_<function>`: the default consumer group.
const GROUP: &str = "default_events_hello";

fn env<'a>(c: &TestCluster, pod: &str, extra: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
    let mut env = vec![
        ("KUBECONFIG", c.kubeconfig()),
        ("KUBELESS_ADMIN_ADDR", "127.0.0.1:0".into()),
        ("KUBELESS_LEADER_ELECT", "false".into()),
        ("KUBELESS_LOG_LEVEL", "info".into()),
        ("POD_NAMESPACE", NS.into()),
        ("POD_NAME", pod.into()),
    ];
    env.extend_from_slice(extra);
    env
}

/// The trigger process; the same pod name each time, as a restarted pod keeps its name.
fn start_trigger(c: &TestCluster) -> ServiceProcess {
    let env = env(
        c,
        "redis-trigger-0",
        &[("KUBELESS_DRAIN_TIMEOUT_SECONDS", "5".into())],
    );
    ServiceProcess::start("redis-trigger", c.dir.path(), "redis-trigger", &env)
}

/// `kubeless function deploy hello` from a source file, waiting for it to be Ready.
async fn deploy_function(c: &TestCluster) {
    let file = c.dir.path().join("handler.py");
    std::fs::write(&file, HANDLER).unwrap();
    let out = tokio::process::Command::new(target_debug_dir().join("kubeless"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .args(["function", "deploy", "hello", "--namespace", NS])
        .args(["--runtime", "python3.11", "--handler", "handler.handler"])
        .arg("--from-file")
        .arg(&file)
        .args(["--label", "stream=events"])
        .args(["--timeout", "10", "--wait", "--wait-timeout", "300"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "kubeless function deploy hello:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every `EVENT <id> <data>` line the function's pods printed: id -> times seen.
async fn function_log(client: &Client) -> BTreeMap<String, usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut seen = BTreeMap::new();
    let list = pods
        .list(&ListParams::default().labels("function=hello"))
        .await
        .unwrap();
    for p in list {
        let log = pods
            .logs(&p.name_any(), &LogParams::default())
            .await
            .unwrap_or_default();
        for line in log.lines() {
            if let Some(id) = line
                .split("EVENT ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
            {
                *seen.entry(id.to_string()).or_insert(0) += 1;
            }
        }
    }
    seen
}

fn xadd(con: &mut redis::Connection, data: &str) -> String {
    con.xadd(STREAM, "*", &[("data", data)]).unwrap()
}

fn pending(con: &mut redis::Connection) -> usize {
    let reply: StreamPendingReply = con.xpending(STREAM, GROUP).unwrap();
    reply.count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_reach_the_function_dead_letters_and_survive_a_trigger_kill() {
    require_bins(&[
        "redis-trigger",
        "function-controller",
        "kubeless",
        "kubeless-runtime",
    ]);
    let redis_server = RedisServer::start();
    let mut con = redis::Client::open(redis_server.url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    let fc_env = env(&c, "function-controller-0", &[]);
    let _controller = ServiceProcess::start(
        "function-controller",
        c.dir.path(),
        "function-controller",
        &fc_env,
    );
    deploy_function(&c).await;
    let trigger = start_trigger(&c);

    let triggers: Api<RedisTrigger> = Api::namespaced(c.client.clone(), NS);
    let t: RedisTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "RedisTrigger",
        "metadata": {"name": "events", "namespace": NS},
        "spec": {"url": redis_server.url, "stream": STREAM,
                 "functionSelector": {"matchLabels": {"stream": "events"}},
                 "retry": {"maxAttempts": 2, "initialBackoff": "100ms", "maxBackoff": "200ms"},
                 "deadLetterStream": DEAD}
    }))
    .unwrap();
    triggers.create(&PostParams::default(), &t).await.unwrap();
    eventually("the RedisTrigger Ready", Duration::from_secs(60), || {
        let triggers = triggers.clone();
        async move {
            let t = triggers.get("events").await.ok()?;
            let status = t.status?;
            (is_ready(&status.conditions) && status.functions == ["hello"]).then_some(())
        }
    })
    .await;

    // A trigger whose Redis is unreachable says so, and the service keeps running.
    let offline: RedisTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "RedisTrigger",
        "metadata": {"name": "offline", "namespace": NS},
        "spec": {"url": format!("redis://127.0.0.1:{}", free_port()), "stream": STREAM,
                 "functionSelector": {"matchLabels": {"stream": "events"}}}
    }))
    .unwrap();
    triggers
        .create(&PostParams::default(), &offline)
        .await
        .unwrap();
    eventually(
        "the offline trigger BrokerUnavailable",
        Duration::from_secs(60),
        || {
            let triggers = triggers.clone();
            async move {
                let status = triggers.get("offline").await.ok()?.status?;
                let ready = find_condition(&status.conditions, "Ready")?;
                (ready.reason.as_deref() == Some(reasons::BROKER_UNAVAILABLE)).then_some(())
            }
        },
    )
    .await;
    triggers
        .delete("offline", &Default::default())
        .await
        .unwrap();

    // Delivery, and an entry the function fails on goes to the dead letters.
    let first: Vec<String> = (1..=5)
        .map(|i| xadd(&mut con, &format!("hello-{i}")))
        .collect();
    let poison = xadd(&mut con, "poison");
    let client = c.client.clone();
    eventually(
        "the first entries in the function log",
        Duration::from_secs(60),
        || {
            let (client, first) = (client.clone(), first.clone());
            async move {
                let seen = function_log(&client).await;
                first.iter().all(|id| seen.contains_key(id)).then_some(())
            }
        },
    )
    .await;
    let dead: StreamRangeReply = eventually("a dead letter", Duration::from_secs(60), || {
        let r: StreamRangeReply = con.xrange_all(DEAD).unwrap();
        std::future::ready((!r.ids.is_empty()).then_some(r))
    })
    .await;
    let letter = &dead.ids[0];
    assert_eq!(dead.ids.len(), 1, "one dead letter: {dead:?}");
    assert_eq!(letter.get::<String>("data").as_deref(), Some("poison"));
    assert_eq!(letter.get::<String>("source-id"), Some(poison.clone()));
    assert_eq!(
        letter.get::<String>("source-stream").as_deref(),
        Some(STREAM)
    );
    assert_eq!(
        letter.get::<String>("function").as_deref(),
        Some("default/hello")
    );
    let error = letter.get::<String>("error").unwrap_or_default();
    assert!(error.contains("500"), "the dead letter says why: {error}");

    // At least once across a SIGKILL with entries read but not acknowledged.
    let burst: Vec<String> = (1..=150)
        .map(|i| xadd(&mut con, &format!("n-{i}")))
        .collect();
    eventually("the trigger mid-stream", Duration::from_secs(60), || {
        let (client, burst) = (client.clone(), burst.clone());
        async move {
            let seen = function_log(&client).await;
            (burst.iter().filter(|id| seen.contains_key(*id)).count() >= 20).then_some(())
        }
    })
    .await;
    trigger.kill();
    let left_pending = pending(&mut con);
    let delivered_before = {
        let seen = function_log(&client).await;
        burst.iter().filter(|id| seen.contains_key(*id)).count()
    };
    assert!(
        left_pending > 0 && delivered_before < burst.len(),
        "the kill left entries read but not acknowledged ({left_pending} pending, {delivered_before} of {} delivered)",
        burst.len()
    );
    let mut trigger = start_trigger(&c);
    let seen = eventually(
        "every entry in the function log",
        Duration::from_secs(120),
        || {
            let (client, burst) = (client.clone(), burst.clone());
            async move {
                let seen = function_log(&client).await;
                burst.iter().all(|id| seen.contains_key(id)).then_some(seen)
            }
        },
    )
    .await;
    eventually("nothing pending", Duration::from_secs(30), || {
        std::future::ready((pending(&mut con) == 0).then_some(()))
    })
    .await;
    let all: BTreeSet<&String> = burst.iter().chain(&first).collect();
    let again = all
        .iter()
        .filter(|id| seen.get(**id).copied().unwrap_or(0) > 1)
        .count();
    report!(
        "redis-trigger restart: {} entries, {delivered_before} delivered before the SIGKILL with {left_pending} pending, all delivered after it, {again} delivered twice",
        burst.len()
    );
    assert!(trigger.running(), "{}", trigger.log_tail(30));
    // SIGTERM: the readers stop, draining, and the process exits.
    let log = trigger.log.clone();
    assert!(
        trigger.terminate(Duration::from_secs(20)).is_some(),
        "the trigger did not exit on SIGTERM: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    c.shutdown().await;
}
