//! Issue 20: a JetStream trigger with `maxInFlight: 1` must hand every message to the function
//! as soon as it is free, never after a stall of the pull request expiry (30 s) or the ack
//! wait. Against a real nats-server and devcluster.
//!
//! The stall came from async-nats's pull stream: when messages were waiting on the server, the
//! answers to a pull request could be read before the stream counted the request, and it then
//! waited 35 s for a batch the server did not owe it (see `nats_trigger::pull`). A backlog is
//! what exposes it, so the test publishes one message at a time (the report) and then
//! a backlog the trigger works through while more arrive.
#![cfg(test)]

mod support;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::json;
use support::*;

/// The longest the function may wait for a message that is published while it is free: far
/// above a normal delivery here (milliseconds, tens on a loaded machine), far below the pull
/// expiry and the ack wait (30 s each) a lost request or message waits for.
const SLOW: Duration = Duration::from_secs(5);
/// How long the test waits for one message before giving up (past the 35 s stall, so a stall
/// is measured rather than cut short).
const GIVE_UP: Duration = Duration::from_secs(45);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

async fn publish(js: &jetstream::Context, body: String) -> Instant {
    let sent = Instant::now();
    js.publish("serial.one", body.into())
        .await
        .unwrap()
        .await
        .unwrap();
    sent
}

/// Waits until the function got `n` messages; bounded by [`GIVE_UP`] after the last progress.
async fn wait_count(f: &RecordingFunction, n: usize, what: &str) {
    let mut last = (f.count(), Instant::now());
    while f.count() < n {
        let c = f.count();
        if c != last.0 {
            last = (c, Instant::now());
        }
        assert!(
            last.1.elapsed() < GIVE_UP,
            "{what}: stuck at {c} of {n} messages for {GIVE_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_one_never_stalls() {
    let one_by_one = env_usize("NATS_LATENCY_ONE_BY_ONE", 200);
    let backlog = env_usize("NATS_LATENCY_BACKLOG", 4000);
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let f = RecordingFunction::ok().await;
    register_function(&client, "one", json!({"serial": "yes"}), "1", f.addr).await;
    let publisher = async_nats::connect(&nats_server.url).await.unwrap();
    let js = jetstream::new(publisher.clone());
    js.create_stream(jetstream::stream::Config {
        name: "SERIAL".into(),
        subjects: vec!["serial.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    create_trigger(
        &client,
        "serial",
        json!({"topic": "serial.>", "maxInFlight": 1,
               "functionSelector": {"matchLabels": {"serial": "yes"}},
               "jetStream": {"enabled": true, "stream": "SERIAL", "ackWait": "30s"}}),
        json!(null),
    )
    .await;
    let replica = Replica::start(&client, &nats_server.url).await;
    replica.wait_active(1).await;

    // One at a time: each message is published once the previous one reached the function.
    let mut sent = Vec::new();
    for i in 0..one_by_one {
        sent.push(publish(&js, format!("m{i}")).await);
        wait_count(&f, i + 1, "one by one").await;
    }
    // A backlog: published as fast as the server confirms, consumed meanwhile.
    for i in one_by_one..one_by_one + backlog {
        sent.push(publish(&js, format!("m{i}")).await);
    }
    wait_count(&f, sent.len(), "backlog").await;

    // Every message once, in order: nothing was redelivered.
    let received = f.received();
    let bodies: Vec<String> = received.iter().map(|r| r.body_text()).collect();
    let expected: Vec<String> = (0..sent.len()).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected);
    // Each message waited for from the moment it was published and the previous one had
    // reached the function: a backlog drains slowly on a loaded machine, but never stops.
    let slow: Vec<(usize, Duration)> = received
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let ready = match i.checked_sub(1) {
                Some(prev) => sent[i].max(received[prev].at),
                None => sent[i],
            };
            (i, r.at.saturating_duration_since(ready))
        })
        .filter(|(_, waited)| *waited > SLOW)
        .collect();
    assert!(
        slow.is_empty(),
        "{} of {} messages waited longer than {SLOW:?} for a free trigger (first: {:?})",
        slow.len(),
        sent.len(),
        slow.first()
    );
    replica.stop().await;
    cluster.shutdown().await;
}

/// Messages a stopping trigger had pulled but not taken are given back at once: the next
/// replica gets them well before the ack wait (30 s) would have let the server redeliver them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_trigger_gives_back_what_it_had_pulled() {
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    // Slow enough that the trigger holds pulled messages while the first call runs.
    let f = RecordingFunction::start(|_, _, _| Reply::Answer {
        status: 200,
        delay: Duration::from_millis(500),
    })
    .await;
    register_function(&client, "one", json!({"serial": "yes"}), "1", f.addr).await;
    let publisher = async_nats::connect(&nats_server.url).await.unwrap();
    let js = jetstream::new(publisher.clone());
    js.create_stream(jetstream::stream::Config {
        name: "SERIAL".into(),
        subjects: vec!["serial.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    create_trigger(
        &client,
        "serial",
        json!({"topic": "serial.>", "maxInFlight": 1,
               "functionSelector": {"matchLabels": {"serial": "yes"}},
               "jetStream": {"enabled": true, "stream": "SERIAL", "ackWait": "30s"}}),
        json!(null),
    )
    .await;
    let first = Replica::start(&client, &nats_server.url).await;
    first.wait_active(1).await;
    for i in 0..4 {
        publish(&js, format!("m{i}")).await;
    }
    wait_count(&f, 1, "the first call").await;
    let stopped = Instant::now();
    first.stop().await;

    let second = Replica::start(&client, &nats_server.url).await;
    second.wait_active(1).await;
    wait_count(&f, 4, "after the restart").await;
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "the messages the stopped trigger held came back after {took:?} (the ack wait is 30 s)"
    );
    let mut bodies = f.bodies();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3"]);
    second.stop().await;
    cluster.shutdown().await;
}
