//! Faults in the middle of a JetStream stream lose nothing (issue 20's fault suite): the trigger
//! crashing (its tasks aborted, nothing acked, connection dropped) and a second instance taking
//! over, then the NATS server frozen (SIGSTOP) past the ack wait and resumed. Every message
//! reaches the function at least once; the redeliveries are counted and printed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::*;

const MESSAGES: usize = 2000;

fn distinct(f: &FakeFunction) -> BTreeSet<String> {
    f.bodies().into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_crash_and_server_freeze_lose_nothing() {
    let nats_server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (cluster, client) = cluster(&dir.path().join("state"), None).await;
    // A little work per call so the stream is still running when the faults come.
    let f = FakeFunction::start(Arc::new(|_, _| {
        (200, "ok".into(), Duration::from_millis(2))
    }))
    .await;
    register_function(&client, "sink", json!({"faults": "js"}), "3", f.addr).await;
    let publisher = nats_server.client().await;
    let js = async_nats::jetstream::new(publisher.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "EVENTS".into(),
        subjects: vec!["events.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    create_trigger(
        &client,
        "events",
        json!({"topic": "events.>", "functionSelector": {"matchLabels": {"faults": "js"}},
               "jetStream": {"enabled": true, "stream": "EVENTS", "ackWait": "2s"}}),
        json!(null),
    )
    .await;
    for i in 0..MESSAGES {
        js.publish(format!("events.k{}", i % 8), format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    // Fault 1: the trigger crashes mid-stream; another instance takes over.
    let first = Replica::start(&client, &nats_server.url).await;
    first.wait_active(1).await;
    eventually("a fifth delivered", Duration::from_secs(90), || async {
        (distinct(&f).len() >= MESSAGES / 5).then_some(())
    })
    .await;
    first.kill();
    let at_crash = distinct(&f).len();
    assert!(at_crash < MESSAGES, "the crash must come mid-stream");
    let second = Replica::start(&client, &nats_server.url).await;
    second.wait_active(1).await;

    // Fault 2: the server freezes for longer than the ack wait, then resumes.
    eventually("half delivered", Duration::from_secs(90), || async {
        (distinct(&f).len() >= MESSAGES / 2).then_some(())
    })
    .await;
    let at_freeze = distinct(&f).len();
    signal(nats_server.pid(), "-STOP");
    tokio::time::sleep(Duration::from_secs(8)).await;
    signal(nats_server.pid(), "-CONT");
    eprintln!("crash after {at_crash} distinct messages, server frozen 8 s after {at_freeze}");

    let done = tokio::time::timeout(Duration::from_secs(120), async {
        while distinct(&f).len() < MESSAGES {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let got = distinct(&f);
    let missing: Vec<String> = (0..MESSAGES)
        .map(|i| format!("m{i}"))
        .filter(|m| !got.contains(m))
        .take(20)
        .collect();
    assert!(
        done.is_ok(),
        "messages lost: {} missing, e.g. {missing:?}",
        MESSAGES - got.len()
    );
    eprintln!(
        "all {MESSAGES} delivered after a crash and an 8 s server freeze; {} redelivered",
        f.count() - MESSAGES
    );
    second.stop().await;
    cluster.shutdown().await;
}
