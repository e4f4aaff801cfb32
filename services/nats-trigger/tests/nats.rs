//! The trigger against a real nats-server (JetStream on) and devcluster, with local HTTP
//! functions registered through EndpointSlices.
#![cfg(test)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use support::*;

/// A client of the test's nats-server.
async fn nats_client(server: &NatsServer) -> async_nats::Client {
    async_nats::connect(&server.url).await.unwrap()
}

/// The uid of the NATSTrigger `name`.
async fn trigger_uid(client: &kube::Client, name: &str) -> Option<String> {
    kube::Api::<kubeless_api::NatsTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_to_two_functions_with_two_replicas() {
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let f1 = RecordingFunction::echo().await;
    let f2 = RecordingFunction::echo().await;
    let other = RecordingFunction::echo().await;
    register_function(&client, "f1", json!({"app": "orders"}), "10", f1.addr).await;
    register_function(&client, "f2", json!({"app": "orders"}), "10", f2.addr).await;
    register_function(
        &client,
        "other",
        json!({"app": "billing"}),
        "10",
        other.addr,
    )
    .await;
    create_trigger(
        &client,
        "orders",
        json!({"topic": "orders.*", "functionSelector": {"matchLabels": {"app": "orders"}}}),
        json!(null),
    )
    .await;
    create_trigger(
        &client,
        "nobody",
        json!({"topic": "x", "functionSelector": {"matchLabels": {"app": "none"}}}),
        json!(null),
    )
    .await;

    let a = Replica::start(&client, &nats_server.url).await;
    let b = Replica::start(&client, &nats_server.url).await;
    a.wait_active(2).await;
    b.wait_active(2).await;
    let status = wait_ready(&client, "orders").await;
    assert_eq!(status.functions, vec!["f1", "f2"]);
    let nobody = eventually("NoFunctionsSelected", Duration::from_secs(20), || async {
        trigger_status(&client, "nobody")
            .await
            .filter(|s| !s.conditions.is_empty())
    })
    .await;
    let c = kubeless_api::find_condition(&nobody.conditions, "Ready").unwrap();
    assert!(!c.is_true());
    assert_eq!(c.reason.as_deref(), Some("NoFunctionsSelected"));

    let publisher = nats_client(&nats_server).await;
    const N: usize = 60;
    for i in 0..N {
        let mut h = async_nats::HeaderMap::new();
        h.insert("X-Order", i.to_string().as_str());
        publisher
            .publish_with_headers(
                format!("orders.{}", if i.is_multiple_of(2) { "eu" } else { "us" }),
                h,
                format!("m{i}").into(),
            )
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();

    for f in [&f1, &f2] {
        eventually(
            "every message at both functions",
            Duration::from_secs(30),
            || async { (f.count() >= N).then_some(()) },
        )
        .await;
    }
    // Nothing more arrives: once per function, not once per replica.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for f in [&f1, &f2] {
        let mut bodies = f.bodies();
        bodies.sort();
        let mut want: Vec<String> = (0..N).map(|i| format!("m{i}")).collect();
        want.sort();
        assert_eq!(bodies, want, "each message exactly once per function");
        let received = f.received();
        for r in &received {
            let body = String::from_utf8_lossy(&r.body).into_owned();
            let i: usize = body[1..].parse().unwrap();
            assert_eq!(r.headers["event-namespace"], "natstriggers.kubeless.io");
            let want_topic = if i.is_multiple_of(2) {
                "orders.eu"
            } else {
                "orders.us"
            };
            assert_eq!(r.headers["event-topic"], want_topic);
            assert_eq!(r.headers["x-order"], i.to_string().as_str());
            assert!(!r.headers["event-id"].is_empty());
        }
    }
    assert_eq!(other.count(), 0, "unselected function got messages");
    // Both replicas took a share of the queue groups.
    let (a1, b1) = (a.deliveries("f1", "success"), b.deliveries("f1", "success"));
    assert_eq!(a1 + b1, N as u64);
    assert!(
        a1 > 0 && b1 > 0,
        "load shared between replicas: {a1} / {b1}"
    );
    assert!(
        a.metrics
            .encode()
            .unwrap()
            .contains("kubeless_nats_trigger_delivery_seconds_bucket")
    );

    a.stop().await;
    b.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_reply_round_trip() {
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let upper = RecordingFunction::start(|_, body, _| {
        Reply::text(200, String::from_utf8_lossy(body).to_uppercase())
    })
    .await;
    let broken = RecordingFunction::start(|_, _, _| Reply::text(503, "down")).await;
    register_function(&client, "upper", json!({"rpc": "upper"}), "5", upper.addr).await;
    register_function(
        &client,
        "broken",
        json!({"rpc": "broken"}),
        "5",
        broken.addr,
    )
    .await;
    create_trigger(
        &client,
        "upper",
        json!({"topic": "rpc.upper", "functionSelector": {"matchLabels": {"rpc": "upper"}}}),
        json!(null),
    )
    .await;
    create_trigger(
        &client,
        "broken",
        json!({"topic": "rpc.broken", "functionSelector": {"matchLabels": {"rpc": "broken"}}}),
        json!(null),
    )
    .await;
    let replica = Replica::start(&client, &nats_server.url).await;
    replica.wait_active(2).await;

    let caller = nats_client(&nats_server).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        caller.request("rpc.upper", "hello nats".into()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(&answer.payload[..], b"HELLO NATS");
    let h = answer.headers.unwrap();
    assert_eq!(h.get("Kubeless-Status").unwrap().as_str(), "200");
    assert!(!h.get("Kubeless-Event-Id").unwrap().as_str().is_empty());

    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        caller.request("rpc.broken", "x".into()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(&answer.payload[..], b"down");
    let h = answer.headers.unwrap();
    assert_eq!(h.get("Kubeless-Status").unwrap().as_str(), "503");
    assert_eq!(h.get("Kubeless-Error").unwrap().as_str(), "status_5xx");
    // A request gets one attempt: the caller is waiting and decides itself.
    assert_eq!(broken.count(), 1);

    replica.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_redelivers_after_the_trigger_is_killed() {
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    // The first call hangs (the trigger dies during it); later calls succeed.
    let f = RecordingFunction::start(|_, _, attempt| {
        if attempt == 1 {
            Reply::Text {
                status: 200,
                body: "late".into(),
                delay: Duration::from_secs(60),
            }
        } else {
            Reply::text(200, "ok")
        }
    })
    .await;
    register_function(&client, "worker", json!({"js": "yes"}), "1", f.addr).await;
    let publisher = nats_client(&nats_server).await;
    let js = async_nats::jetstream::new(publisher.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "JOBS".into(),
        subjects: vec!["jobs.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    create_trigger(
        &client,
        "jobs",
        json!({"topic": "jobs.>", "functionSelector": {"matchLabels": {"js": "yes"}},
               "jetStream": {"enabled": true, "stream": "JOBS", "ackWait": "1s"}}),
        json!(null),
    )
    .await;
    let first = Replica::start(&client, &nats_server.url).await;
    first.wait_active(1).await;
    js.publish("jobs.build", "job-1".into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually(
        "the first (hanging) call",
        Duration::from_secs(20),
        || async { (f.count() == 1).then_some(()) },
    )
    .await;
    first.kill();

    let second = Replica::start(&client, &nats_server.url).await;
    second.wait_active(1).await;
    // ack wait = function timeout 1 s + 2 s margin: redelivered within a few seconds.
    eventually("the redelivery", Duration::from_secs(30), || async {
        (f.count() >= 2).then_some(())
    })
    .await;
    eventually("the ack", Duration::from_secs(10), || async {
        (second.deliveries("worker", "success") == 1).then_some(())
    })
    .await;
    let received = f.received();
    assert_eq!(received[0].body, received[1].body);
    assert_eq!(&received[1].body[..], b"job-1");
    // Same event-id on redelivery (derived from stream and sequence).
    assert_eq!(
        received[0].headers["event-id"],
        received[1].headers["event-id"]
    );
    assert_eq!(received[1].headers["event-topic"], "jobs.build");
    // Acked: no further delivery after the ack wait has passed again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(f.count(), 2, "acked message was delivered again");
    let mut stream = js.get_stream("JOBS").await.unwrap();
    let durable = nats_trigger::plan::jetstream_name("default_jobs_worker_jobs.>");
    let mut consumer: async_nats::jetstream::consumer::PullConsumer =
        stream.get_consumer(&durable).await.unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(info.num_pending, 0);
    let _ = stream.info().await.unwrap();

    second.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_messages_go_to_the_dead_letter_subject() {
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let failing = RecordingFunction::start(|_, _, _| Reply::text(500, "boom")).await;
    let failing_core = RecordingFunction::start(|_, _, _| Reply::text(500, "boom")).await;
    register_function(&client, "fails", json!({"dl": "js"}), "5", failing.addr).await;
    register_function(
        &client,
        "fails-core",
        json!({"dl": "core"}),
        "5",
        failing_core.addr,
    )
    .await;
    // No stream exists: the annotation lets the service create one.
    create_trigger(
        &client,
        "payments",
        json!({"topic": "payments.in", "functionSelector": {"matchLabels": {"dl": "js"}},
               "retry": {"maxAttempts": 3, "initialBackoff": "100ms", "maxBackoff": "200ms"},
               "deadLetterSubject": "payments.dlq",
               "jetStream": {"enabled": true}}),
        json!({"kubeless.io/jetstream-create-stream": "true"}),
    )
    .await;
    create_trigger(
        &client,
        "payments-core",
        json!({"topic": "core.in", "functionSelector": {"matchLabels": {"dl": "core"}},
               "retry": {"maxAttempts": 2, "initialBackoff": "100ms", "maxBackoff": "100ms"},
               "deadLetterSubject": "core.dlq"}),
        json!(null),
    )
    .await;
    let watcher = nats_client(&nats_server).await;
    let mut dlq = watcher.subscribe("payments.dlq").await.unwrap();
    let mut core_dlq = watcher.subscribe("core.dlq").await.unwrap();
    watcher.flush().await.unwrap();

    let replica = Replica::start(&client, &nats_server.url).await;
    replica.wait_active(2).await;
    let js = async_nats::jetstream::new(watcher.clone());
    let stream_name = nats_trigger::plan::default_stream_name("default", "payments");
    let mut h = async_nats::HeaderMap::new();
    h.insert("X-Payment", "p-9");
    js.publish_with_headers("payments.in", h, "pay-9".into())
        .await
        .unwrap()
        .await
        .unwrap();
    watcher.publish("core.in", "core-1".into()).await.unwrap();

    let dead = tokio::time::timeout(Duration::from_secs(30), dlq.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&dead.payload[..], b"pay-9");
    let h = dead.headers.unwrap();
    assert_eq!(
        h.get("Kubeless-Original-Subject").unwrap().as_str(),
        "payments.in"
    );
    assert_eq!(h.get("Kubeless-Attempts").unwrap().as_str(), "3");
    assert_eq!(h.get("Kubeless-Status").unwrap().as_str(), "500");
    assert_eq!(
        h.get("Kubeless-Trigger").unwrap().as_str(),
        "default/payments"
    );
    assert_eq!(h.get("Kubeless-Function").unwrap().as_str(), "fails");
    assert_eq!(
        h.get("X-Payment").unwrap().as_str(),
        "p-9",
        "original headers kept"
    );
    assert_eq!(failing.count(), 3, "one call per attempt");

    let dead = tokio::time::timeout(Duration::from_secs(30), core_dlq.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&dead.payload[..], b"core-1");
    assert_eq!(
        dead.headers
            .unwrap()
            .get("Kubeless-Attempts")
            .unwrap()
            .as_str(),
        "2"
    );
    assert_eq!(failing_core.count(), 2);

    // Terminated after dead-lettering: never delivered again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(failing.count(), 3);
    assert_eq!(replica.deliveries("fails", "dead_letter"), 1);
    assert_eq!(replica.deliveries("fails", "retry"), 2);
    assert_eq!(replica.deliveries("fails-core", "dead_letter"), 1);
    // One DeliveryFailed and one DeadLettered Event on each trigger, naming the function, the
    // status, the message's coordinates and where it went.
    let cases = [
        (
            "payments",
            "on subject payments.in (stream ",
            "payments.dlq",
            "3 attempt(s)",
        ),
        (
            "payments-core",
            "on subject core.in",
            "core.dlq",
            "2 attempt(s)",
        ),
    ];
    for (trigger, coordinates, dlq, attempts) in cases {
        let uid = trigger_uid(&client, trigger).await;
        for reason in ["DeliveryFailed", "DeadLettered"] {
            let events = eventually(
                &format!("a {reason} Event on {trigger}"),
                Duration::from_secs(20),
                || async {
                    let ev = kubeless_service::events::events_about(
                        &client,
                        NS,
                        "NATSTrigger",
                        trigger,
                        reason,
                    )
                    .await
                    .unwrap();
                    (!ev.is_empty()).then_some(ev)
                },
            )
            .await;
            assert_eq!(events.len(), 1, "{trigger} {reason}: {events:?}");
            let e = &events[0];
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            assert_eq!(e.regarding.as_ref().unwrap().uid, uid);
            let note = e.note.as_deref().unwrap();
            eprintln!("{trigger} {reason}: {note}");
            for part in [coordinates, dlq, attempts, "status 500"] {
                assert!(
                    note.contains(part),
                    "{trigger} {reason} lacks {part:?}: {note}"
                );
            }
        }
    }
    // The stream was created from the trigger.
    let info = js
        .get_stream(&stream_name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.config.subjects, vec!["payments.in".to_string()]);
    let statuses: BTreeMap<_, _> = [("payments", wait_ready(&client, "payments").await)].into();
    assert_eq!(statuses["payments"].functions, vec!["fails"]);

    replica.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_stream_is_reported() {
    let nats_server = NatsServer::start();
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let f = RecordingFunction::echo().await;
    register_function(&client, "f", json!({"x": "y"}), "5", f.addr).await;
    create_trigger(
        &client,
        "nostream",
        json!({"topic": "nothing.here", "functionSelector": {"matchLabels": {"x": "y"}},
               "jetStream": {"enabled": true}}),
        json!(null),
    )
    .await;
    let replica = Replica::start(&client, &nats_server.url).await;
    let status = eventually("SourceNotFound", Duration::from_secs(30), || async {
        trigger_status(&client, "nostream").await.filter(|s| {
            kubeless_api::find_condition(&s.conditions, "Ready")
                .is_some_and(|c| c.reason.as_deref() == Some("SourceNotFound"))
        })
    })
    .await;
    assert_eq!(status.functions, vec!["f"]);
    replica.stop().await;
    cluster.shutdown().await;
}
