//! Scale to zero end to end on devcluster: a Python and a Node.js function (real runtime pods,
//! deployed by the function-controller process with `scaleToZero`) idle to zero, then an HTTP
//! request (through the http-trigger-controller binary's gateway), a NATS message (through the
//! nats-trigger binary), a Kafka record (through the kafka-trigger binary, tansu) and a Kinesis
//! record (through the kinesis-trigger binary, moto) wake each of them, and each function's log
//! shows every request and event exactly once.
//! The triggers hold the events while the functions wake, without spending retries (the
//! triggers allow one attempt only, so a delivery tried before the pod answered would fail for
//! good: a DeliveryFailed Event, and for Kinesis a record in its dead-letter stream, which must
//! stay empty).
//!
//! `kubeless function call` wakes a function at zero and its call arrives once.
//! The cronjob-trigger-controller (scheduler mode, a fire every 15 s) wakes a function at zero
//! ahead of each fire, so every scheduled call succeeds on its only attempt although the
//! function idles to zero between them (with `--wake-ahead 0s` the first fire fails: no ready
//! endpoint).
//!
//! Uses the binaries `cargo build --workspace --bins` left in this test's target dir
//! (scripts/test.sh builds them first), nats-server, tansu and moto_server (.ci/run installs
//! them).
#![cfg(test)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration_tests::scale::{
    NODE, PYTHON, function, start_gateway, start_service, wait_at_zero, wait_running,
};
use integration_tests::{require_bins, target_debug_dir};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger, KafkaTrigger, KinesisTrigger, NatsTrigger,
    find_condition,
};
use kubeless_testkit::{
    MOTO_REGION, Moto, NS, NatsServer, Tansu, TestCluster, create_aws_secret, create_stream,
    eventually, put_record, read_stream, report, wait_ready,
};
use rdkafka::producer::FutureRecord;
use serde_json::json;

const TOPIC: &str = "wake";
const SUBJECT: &str = "wake";
const STREAM: &str = "wake";
/// Where a Kinesis record whose only attempt failed would go.
const DEAD_LETTERS: &str = "wake-dlq";
const FUNCTIONS: [&str; 2] = ["py", "node"];

async fn wait_all_at_zero(fns: &Api<Function>) {
    for name in FUNCTIONS {
        wait_at_zero(fns, name, Duration::from_secs(90)).await;
    }
}

/// `data -> times printed` over the function's current pods.
async fn function_log(client: &Client, name: &str) -> BTreeMap<String, usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut seen = BTreeMap::new();
    let Ok(list) = pods
        .list(&ListParams::default().labels(&format!("function={name}")))
        .await
    else {
        return seen;
    };
    for p in list {
        let log = pods
            .logs(&p.name_any(), &LogParams::default())
            .await
            .unwrap_or_default();
        for line in log.lines() {
            if let Some(data) = line.split("EVENT ").nth(1) {
                *seen.entry(data.trim().to_string()).or_insert(0) += 1;
            }
        }
    }
    seen
}

/// Waits until each function printed `data`, then checks it did so exactly once (read again a
/// second later, before the function can idle away with its log). Returns the time to the
/// first function that printed it and to the last.
async fn delivered_once_to_each(client: &Client, data: &str, since: Instant) -> Vec<Duration> {
    let mut took = Vec::new();
    for name in FUNCTIONS {
        eventually(
            &format!("{name} printed {data}"),
            Duration::from_secs(120),
            || async {
                function_log(client, name)
                    .await
                    .contains_key(data)
                    .then_some(())
            },
        )
        .await;
        took.push(since.elapsed());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in FUNCTIONS {
        let log = function_log(client, name).await;
        assert_eq!(
            log.get(data),
            Some(&1),
            "{name} must print {data} exactly once: {log:?}"
        );
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_at_zero_wake_for_http_nats_kafka_and_kinesis_and_get_each_once() {
    require_bins(&[
        "function-controller",
        "nats-trigger",
        "kafka-trigger",
        "kinesis-trigger",
        "http-trigger-controller",
        "kubeless",
        "kubeless-runtime",
    ]);
    let nats = NatsServer::start();
    let broker = Tansu::start();
    broker.create_topic(TOPIC, 1).await;
    let moto = Moto::start();
    let kinesis = moto.kinesis();
    create_stream(&kinesis, STREAM, 1).await;
    create_stream(&kinesis, DEAD_LETTERS, 1).await;
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    let _controller = start_service(&c, "function-controller", &[]);
    let _nats_trigger = start_service(&c, "nats-trigger", &[("NATS_URL", nats.url.clone())]);
    let _kafka_trigger = start_service(
        &c,
        "kafka-trigger",
        &[
            ("KAFKA_BROKERS", broker.addr.clone()),
            ("KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
        ],
    );
    // Polls an idle shard every 200 ms (default 1 s), so the wake time below is mostly the
    // function's. Its metrics tell how each delivery ended.
    let kinesis_admin = format!("127.0.0.1:{}", kubeless_testkit::free_port());
    let _kinesis_trigger = start_service(
        &c,
        "kinesis-trigger",
        &[
            ("KUBELESS_KINESIS_POLL_INTERVAL_MS", "200".into()),
            ("KUBELESS_KINESIS_IDLE_POLL_INTERVAL_MS", "200".into()),
            ("KUBELESS_ADMIN_ADDR", kinesis_admin.clone()),
        ],
    );
    create_aws_secret(&c.client, "aws").await;

    let (_gateway, gateway_addr) = start_gateway(&c);

    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    for f in [
        function("py", "python3.11", PYTHON, "5s"),
        function("node", "nodejs20", NODE, "5s"),
    ] {
        fns.create(&PostParams::default(), &f).await.unwrap();
    }
    for name in FUNCTIONS {
        wait_running(&fns, name, Duration::from_secs(180)).await;
    }
    // One attempt only: a delivery tried before the function answered would fail for good.
    let nats_triggers: Api<NatsTrigger> = Api::namespaced(c.client.clone(), NS);
    let nt: NatsTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "NATSTrigger",
        "metadata": {"name": "wake", "namespace": NS},
        "spec": {"topic": SUBJECT, "functionSelector": {"matchLabels": {"wake": "yes"}},
                 "retry": {"maxAttempts": 1}}
    }))
    .unwrap();
    nats_triggers
        .create(&PostParams::default(), &nt)
        .await
        .unwrap();
    let kafka_triggers: Api<KafkaTrigger> = Api::namespaced(c.client.clone(), NS);
    let kt: KafkaTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": "wake", "namespace": NS},
        "spec": {"topic": TOPIC, "functionSelector": {"matchLabels": {"wake": "yes"}},
                 "retry": {"maxAttempts": 1}}
    }))
    .unwrap();
    kafka_triggers
        .create(&PostParams::default(), &kt)
        .await
        .unwrap();
    // A KinesisTrigger names one function: one per function on the same stream, each with its
    // own checkpoints, so one record reaches both.
    let kinesis_triggers: Api<KinesisTrigger> = Api::namespaced(c.client.clone(), NS);
    for name in FUNCTIONS {
        let t: KinesisTrigger = serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "KinesisTrigger",
            "metadata": {"name": format!("wake-{name}"), "namespace": NS},
            "spec": {"function-name": name, "stream": STREAM, "secret": "aws",
                     "endpoint": moto.endpoint, "aws-region": MOTO_REGION,
                     "startingPosition": "TRIM_HORIZON",
                     "retry": {"maxAttempts": 1}, "deadLetterStream": DEAD_LETTERS}
        }))
        .unwrap();
        kinesis_triggers
            .create(&PostParams::default(), &t)
            .await
            .unwrap();
    }
    let http_triggers: Api<HttpTrigger> = Api::namespaced(c.client.clone(), NS);
    for name in FUNCTIONS {
        let ht: HttpTrigger = serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"function-name": name, "host-name": format!("{name}.example.com"),
                     "path": name}
        }))
        .unwrap();
        http_triggers
            .create(&PostParams::default(), &ht)
            .await
            .unwrap();
    }
    wait_ready::<NatsTrigger>(&c.client, "wake").await;
    wait_ready::<KafkaTrigger>(&c.client, "wake").await;
    for name in FUNCTIONS {
        wait_ready::<KinesisTrigger>(&c.client, &format!("wake-{name}")).await;
    }

    // HTTP: both functions at zero, one request each through the gateway wakes it, is answered
    // and reaches it once. The gateway's routes load in the background: a request before them
    // gets 404, which a retry covers (it never reached a function).
    wait_all_at_zero(&fns).await;
    let http = reqwest::Client::new();
    let sent = Instant::now();
    let calls = FUNCTIONS.map(|name| {
        let http = http.clone();
        let url = format!("http://{gateway_addr}/{name}");
        async move {
            loop {
                let resp = http
                    .post(&url)
                    .header("host", format!("{name}.example.com"))
                    .body("http-1")
                    .send()
                    .await;
                match resp {
                    Ok(r)
                        if r.status().as_u16() == 404
                            || sent.elapsed() > Duration::from_secs(60) =>
                    {
                        assert!(sent.elapsed() < Duration::from_secs(60), "{name}: no route");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Ok(r) => {
                        return (
                            name,
                            r.status().as_u16(),
                            r.text().await.unwrap_or_default(),
                        );
                    }
                    Err(e) if sent.elapsed() < Duration::from_secs(60) => {
                        eprintln!("{name}: {e}; again");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("{name}: {e}"),
                }
            }
        }
    });
    for (name, status, body) in futures::future::join_all(calls).await {
        assert_eq!(
            (status, body.as_str()),
            (200, "ok"),
            "{name} through the gateway"
        );
    }
    let took = delivered_once_to_each(&c.client, "http-1", sent).await;
    report!("scale to zero: an HTTP request woke py and node, answered after {took:?}");

    // NATS: both functions at zero, one message wakes each and reaches each once.
    wait_all_at_zero(&fns).await;
    let nats_client = async_nats::connect(&nats.url).await.unwrap();
    let sent = Instant::now();
    nats_client.publish(SUBJECT, "nats-1".into()).await.unwrap();
    nats_client.flush().await.unwrap();
    let took = delivered_once_to_each(&c.client, "nats-1", sent).await;
    report!("scale to zero: a NATS message woke py and node, delivered after {took:?}");

    // Kafka: at zero again, one record wakes each and reaches each once.
    wait_all_at_zero(&fns).await;
    let producer = broker.producer();
    let sent = Instant::now();
    producer
        .send(
            FutureRecord::to(TOPIC).key("k").payload("kafka-1"),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    let took = delivered_once_to_each(&c.client, "kafka-1", sent).await;
    report!("scale to zero: a Kafka record woke py and node, delivered after {took:?}");

    // Kinesis: at zero again, one record wakes each (through its own trigger) and reaches each
    // once.
    wait_all_at_zero(&fns).await;
    let sent = Instant::now();
    put_record(&kinesis, STREAM, "k", "kinesis-1").await;
    let took = delivered_once_to_each(&c.client, "kinesis-1", sent).await;
    // One delivery per trigger, a success on its only attempt: no retry, no dead letter.
    // Counted once the function answered, which can be a moment after it printed.
    let metrics = eventually(
        "kinesis-trigger counted both deliveries",
        Duration::from_secs(10),
        || async {
            let text = reqwest::get(format!("http://{kinesis_admin}/metrics"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            let successes: f64 = text
                .lines()
                .filter(|l| l.starts_with("kubeless_kinesis_trigger_deliveries_total{"))
                .filter(|l| l.contains(r#"outcome="success""#))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            (successes >= FUNCTIONS.len() as f64).then_some(text)
        },
    )
    .await;
    // Every (trigger, function, outcome) series is listed, most of them at 0.
    let mut counted: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kubeless_kinesis_trigger_deliveries_total{"))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    counted.sort_unstable();
    let mut expected: Vec<String> = FUNCTIONS
        .map(|name| {
            format!(
                r#"kubeless_kinesis_trigger_deliveries_total{{trigger="{NS}/wake-{name}",function="{name}",outcome="success"}} 1"#
            )
        })
        .into();
    expected.sort_unstable();
    assert_eq!(counted, expected, "kinesis-trigger deliveries");
    let wakes = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubeless_kinesis_trigger_function_wakes_total "))
        .unwrap_or("none");
    report!(
        "scale to zero: a Kinesis record woke py and node, delivered after {took:?} \
         (kinesis-trigger wake-ups written: {wakes})"
    );

    // `kubeless function call` wakes a function at zero too, and its call arrives once.
    wait_all_at_zero(&fns).await;
    let sent = Instant::now();
    let out = tokio::process::Command::new(target_debug_dir().join("kubeless"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .args([
            "function",
            "call",
            "py",
            "--namespace",
            NS,
            "--data",
            "cli-1",
        ])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubeless function call py: {stdout}{stderr}"
    );
    assert_eq!(stdout.trim(), "ok");
    assert!(stderr.contains("scaled to zero: waking it"), "{stderr}");
    report!(
        "scale to zero: kubeless function call woke py, answered after {:?}",
        sent.elapsed()
    );
    let log = function_log(&c.client, "py").await;
    assert_eq!(log.get("cli-1"), Some(&1), "{log:?}");

    // Nothing failed on the way: no DeliveryFailed Event on any trigger, no dead letter.
    for (kind, name) in [
        ("NATSTrigger", "wake"),
        ("KafkaTrigger", "wake"),
        ("KinesisTrigger", "wake-py"),
        ("KinesisTrigger", "wake-node"),
    ] {
        let failed =
            kubeless_service::events::events_about(&c.client, NS, kind, name, "DeliveryFailed")
                .await
                .unwrap();
        assert!(failed.is_empty(), "{kind} {name}: {failed:?}");
    }
    let dead_letters = read_stream(&kinesis, DEAD_LETTERS).await;
    assert!(
        dead_letters.is_empty(),
        "Kinesis dead letters: {:?}",
        dead_letters
            .iter()
            .map(|d| String::from_utf8_lossy(d))
            .collect::<Vec<_>>()
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_wakes_a_function_at_zero_ahead_of_each_fire() {
    require_bins(&[
        "function-controller",
        "cronjob-trigger-controller",
        "kubeless-runtime",
    ]);
    let c = TestCluster::start(Some(devcluster::repo_images_dir())).await;
    let _controller = start_service(&c, "function-controller", &[]);
    let _cron = start_service(
        &c,
        "cronjob-trigger-controller",
        &[
            ("KUBELESS_CRON_SCHEDULER_MODE", "true".into()),
            ("KUBELESS_CRON_WAKE_AHEAD", "6s".into()),
        ],
    );
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    // Idles 3 s after each fire: at zero well before the next one (15 s later).
    let f = function("ticker", "python3.11", PYTHON, "3s");
    fns.create(&PostParams::default(), &f).await.unwrap();
    wait_at_zero(&fns, "ticker", Duration::from_secs(180)).await;
    let triggers: Api<CronJobTrigger> = Api::namespaced(c.client.clone(), NS);
    let t: CronJobTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "CronJobTrigger",
        "metadata": {"name": "tick", "namespace": NS},
        "spec": {"function-name": "ticker", "schedule": "*/15 * * * * *",
                 "retry": {"maxAttempts": 1}}
    }))
    .unwrap();
    triggers.create(&PostParams::default(), &t).await.unwrap();

    // Two fires, each preceded by a stay at zero, each answered on its only attempt.
    let mut fires = Vec::new();
    let started = Instant::now();
    while fires.len() < 2 {
        wait_at_zero(&fns, "ticker", Duration::from_secs(60)).await;
        let before = fires.last().cloned();
        let (last, status) = eventually(
            "the next fire recorded",
            Duration::from_secs(60),
            || async {
                let status = triggers.get("tick").await.ok()?.status?;
                let last = status
                    .last_schedule_time
                    .as_ref()
                    .map(|t| t.0.to_string())?;
                (Some(&last) != before.as_ref()).then_some((last, status))
            },
        )
        .await;
        let run = find_condition(&status.conditions, "LastRunSucceeded")
            .cloned()
            .unwrap();
        assert!(run.is_true(), "the fire at {last} failed: {run:?}");
        fires.push(last);
    }
    report!(
        "scale to zero: cron woke ticker ahead of {} fires, each answered at once ({:?})",
        fires.len(),
        started.elapsed()
    );
    c.shutdown().await;
}
