//! Against a real Kafka-protocol broker (tansu) and devcluster: every record delivered with
//! the Kubeless headers, order kept per partition, failing records retried and then
//! dead-lettered while the stream moves on, selector changes start and stop consumers, status.
#![cfg(test)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use common::*;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubeless_api::{Function, KafkaTrigger, conditions};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RECORDS: usize = 400;

fn is_fail(i: usize) -> bool {
    i % 50 == 7
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_in_order_retries_dead_letters_and_follows_selectors() {
    init_logs();
    let broker = Tansu::start();
    broker.create_topic("orders", 4).await;
    broker.create_topic("orders-dlq", 1).await;
    let c = Cluster::start(None).await;
    let sink = fn_server(Duration::ZERO).await;
    let audit = fn_server(Duration::ZERO).await;
    register_function(&c.client, "sink", json!({"app": "orders"}), "5", sink.addr).await;
    register_function(&c.client, "audit", json!({"app": "none"}), "5", audit.addr).await;
    create_trigger(
        &c.client,
        "kt",
        json!({"topic": "orders", "functionSelector": {"matchLabels": {"app": "orders"}},
               "retry": {"maxAttempts": 3, "initialBackoff": "10ms", "maxBackoff": "40ms"},
               "deadLetterTopic": "orders-dlq"}),
    )
    .await;
    create_trigger(
        &c.client,
        "lonely",
        json!({"topic": "orders", "functionSelector": {"matchLabels": {"app": "nobody"}}}),
    )
    .await;

    let metrics = kubeless_service::Metrics::new("kubeless");
    let token = CancellationToken::new();
    let running = kafka_trigger::run(
        c.client.clone(),
        settings(&broker, kafka_trigger::Ordering::Partition),
        &metrics,
        token.clone(),
    )
    .await
    .unwrap();
    let mut groups = running.groups.clone();

    let producer = broker.producer();
    for i in 0..RECORDS {
        let partition = (i % 4) as i32;
        let body = if is_fail(i) {
            format!("fail-{i}")
        } else {
            format!("{{\"id\":{i}}}")
        };
        produce(
            &producer,
            "orders",
            partition,
            &format!("k{}", i % 8),
            &body,
            &[("Trace-Tag", "t1")],
        )
        .await;
    }

    // Every good record arrives; every failing one was tried exactly 3 times.
    eprintln!("produced {RECORDS} records");
    let ok_ids: BTreeSet<usize> = (0..RECORDS).filter(|i| !is_fail(*i)).collect();
    let fail_ids: BTreeSet<usize> = (0..RECORDS).filter(|i| is_fail(*i)).collect();
    eventually(
        "every good record delivered",
        Duration::from_secs(90),
        || async {
            let seen: BTreeSet<usize> = sink
                .received()
                .iter()
                .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
                .filter_map(|v| v["id"].as_u64().map(|i| i as usize))
                .collect();
            (seen == ok_ids).then_some(())
        },
    )
    .await;
    let got = sink.received();
    let mut attempts: HashMap<String, usize> = HashMap::new();
    for r in &got {
        *attempts.entry(r.body_text()).or_default() += 1;
    }
    for i in &fail_ids {
        assert_eq!(attempts[&format!("fail-{i}")], 3, "fail-{i} attempts");
    }

    // Headers.
    let first = got.iter().find(|r| r.body_text() == "{\"id\":0}").unwrap();
    assert_eq!(first.header("event-namespace"), "kafkatriggers.kubeless.io");
    assert_eq!(first.header("event-topic"), "orders");
    assert_eq!(first.header("event-key"), "k0");
    assert_eq!(first.header("event-partition"), "0");
    assert_eq!(first.header("event-offset"), "0");
    assert_eq!(first.header("event-id"), "orders-0-0");
    assert_eq!(first.header("content-type"), "application/json");
    assert_eq!(first.header("kafka-header-trace-tag"), "t1");
    assert!(!first.header("event-time").is_empty());
    assert!(!first.header("traceparent").is_empty());

    // Order per partition: offsets arrive in increasing order (retries repeat the same offset),
    // and a failing record's retries all come before the next offset of its partition.
    let mut by_part: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in &got {
        by_part.entry(r.partition()).or_default().push(r.offset());
    }
    assert_eq!(by_part.len(), 4);
    for (p, offsets) in &by_part {
        assert!(
            offsets.windows(2).all(|w| w[0] <= w[1]),
            "partition {p} out of order: {offsets:?}"
        );
        assert_eq!(
            offsets.len(),
            RECORDS / 4 + 2 * fail_ids.iter().filter(|i| (**i % 4) as i32 == *p).count()
        );
    }

    // The dead-letter topic holds each failing record once, with the failure headers.
    let dlq: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("group.id", "dlq-reader")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    dlq.subscribe(&["orders-dlq"]).unwrap();
    let mut dead: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while dead.len() < fail_ids.len() && std::time::Instant::now() < deadline {
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(5), dlq.recv()).await else {
            continue;
        };
        let body = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        let mut h = BTreeMap::new();
        if let Some(hs) = m.headers() {
            for x in hs.iter() {
                h.insert(
                    x.key.to_string(),
                    String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned(),
                );
            }
        }
        h.insert(
            "key".into(),
            String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
        );
        assert!(
            dead.insert(body, h).is_none(),
            "a dead letter arrived twice"
        );
    }
    let expected: BTreeSet<String> = fail_ids.iter().map(|i| format!("fail-{i}")).collect();
    assert_eq!(dead.keys().cloned().collect::<BTreeSet<_>>(), expected);
    let h = &dead["fail-7"];
    assert_eq!(h["kubeless-original-topic"], "orders");
    assert_eq!(h["kubeless-original-partition"], "3");
    assert_eq!(h["kubeless-original-offset"], "1");
    assert_eq!(h["kubeless-attempts"], "3");
    assert_eq!(h["kubeless-last-status"], "500");
    assert_eq!(h["kubeless-function"], "default/sink");
    assert_eq!(h["kubeless-trigger"], "default/kt");
    assert_eq!(h["Trace-Tag"], "t1", "the record's own headers are kept");
    assert_eq!(h["key"], "k7");

    // Events on the trigger: each failure is a DeliveryFailed and a DeadLettered occurrence,
    // rate-limited per trigger and reason (fewer Events than failures; a summary Event at the
    // end of the interval counts the held ones).
    let uid = Api::<KafkaTrigger>::namespaced(c.client.clone(), NS)
        .get("kt")
        .await
        .unwrap()
        .metadata
        .uid;
    for reason in ["DeliveryFailed", "DeadLettered"] {
        let events = eventually(
            &format!("{reason} Events counting every failure"),
            Duration::from_secs(30),
            || async {
                let ev = kubeless_service::events::events_about(
                    &c.client,
                    NS,
                    "KafkaTrigger",
                    "kt",
                    reason,
                )
                .await
                .unwrap();
                let n = kubeless_service::events::total_occurrences(&ev);
                (n == fail_ids.len() as u64).then_some(ev)
            },
        )
        .await;
        eprintln!(
            "{reason}: {} Event(s) for {} failures: {:?}",
            events.len(),
            fail_ids.len(),
            events.iter().map(|e| e.note.clone()).collect::<Vec<_>>()
        );
        assert!(events.len() < fail_ids.len(), "not rate-limited");
        for e in &events {
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            let r = e.regarding.as_ref().unwrap();
            assert_eq!(r.namespace.as_deref(), Some(NS));
            assert_eq!(r.uid, uid);
            assert_eq!(r.api_version.as_deref(), Some("kubeless.io/v1beta1"));
            let note = e.note.as_deref().unwrap();
            assert!(note.contains("function sink"), "{note}");
            assert!(note.contains("orders-dlq"), "{note}");
            assert!(note.contains("status 500"), "{note}");
            assert!(note.contains("3 attempt(s)"), "{note}");
            // topic/partition@offset of a failing record (partitions 1 and 3 hold them).
            assert!(
                note.contains("record orders/1@") || note.contains("record orders/3@"),
                "{note}"
            );
        }
    }

    // Status: Ready with the selected function; the other trigger selects nothing.
    let triggers: Api<KafkaTrigger> = Api::namespaced(c.client.clone(), NS);
    eventually("kt Ready", Duration::from_secs(30), || async {
        let s = triggers.get("kt").await.ok()?.status?;
        (conditions::is_ready(&s.conditions) && s.functions == vec!["sink".to_string()])
            .then_some(())
    })
    .await;
    eventually(
        "lonely NoFunctionsSelected",
        Duration::from_secs(30),
        || async {
            let s = triggers.get("lonely").await.ok()?.status?;
            let c = conditions::find_condition(&s.conditions, conditions::READY)?;
            (c.reason.as_deref() == Some("NoFunctionsSelected")).then_some(())
        },
    )
    .await;

    // Metrics: outcomes and lag.
    let text = metrics.encode().unwrap();
    let line = |outcome: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("kubeless_kafka_trigger_deliveries_total")
                    && l.contains("function=\"sink\"")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse::<f64>().unwrap())
    };
    assert_eq!(line("delivered"), Some(ok_ids.len() as f64), "{text}");
    assert_eq!(line("dead_lettered"), Some(fail_ids.len() as f64));
    assert!(text.contains("kubeless_kafka_trigger_delivery_duration_seconds_bucket"));
    eventually(
        "lag 0 on every partition",
        Duration::from_secs(20),
        || async {
            let text = metrics.encode().unwrap();
            let lags: Vec<&str> = text
                .lines()
                .filter(|l| {
                    l.starts_with("kubeless_kafka_trigger_consumer_lag{")
                        && l.contains("function=\"sink\"")
                })
                .collect();
            (lags.len() == 4 && lags.iter().all(|l| l.ends_with(" 0"))).then_some(())
        },
    )
    .await;

    // Selector change: label "audit" -> its own group starts from the earliest record and gets
    // every record too.
    let functions: Api<Function> = Api::namespaced(c.client.clone(), NS);
    functions
        .patch(
            "audit",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "orders"}}})),
        )
        .await
        .unwrap();
    groups
        .wait_for(|g| g.iter().any(|g| g == "default_kt_audit_orders"))
        .await
        .unwrap();
    eventually(
        "audit got every good record",
        Duration::from_secs(90),
        || async {
            let seen: BTreeSet<String> = audit.received().iter().map(|r| r.body_text()).collect();
            ok_ids
                .iter()
                .all(|i| seen.contains(&format!("{{\"id\":{i}}}")))
                .then_some(())
        },
    )
    .await;
    eventually(
        "kt lists both functions",
        Duration::from_secs(30),
        || async {
            let s = triggers.get("kt").await.ok()?.status?;
            (s.functions == vec!["audit".to_string(), "sink".to_string()]).then_some(())
        },
    )
    .await;
    // ... and unlabel it: its consumer stops (drained and committed), the sink keeps going.
    functions
        .patch(
            "audit",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
        )
        .await
        .unwrap();
    groups
        .wait_for(|g| !g.iter().any(|g| g == "default_kt_audit_orders"))
        .await
        .unwrap();
    let audit_before = audit.received().len();
    produce(&producer, "orders", 1, "late", "{\"id\":\"late\"}", &[]).await;
    eventually(
        "sink got the late record",
        Duration::from_secs(30),
        || async {
            sink.received()
                .iter()
                .any(|r| r.body_text() == "{\"id\":\"late\"}")
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        audit.received().len(),
        audit_before,
        "a stopped consumer delivers nothing"
    );

    token.cancel();
    tokio::time::timeout(Duration::from_secs(60), running.join())
        .await
        .expect("drained in time")
        .unwrap();
    drop(sink);
    drop(audit);
    c.cluster.shutdown().await;
}
