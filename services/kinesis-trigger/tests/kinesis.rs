//! Integration tests against a real Kinesis emulator (moto_server on 127.0.0.1) and devcluster:
//! order per shard over a 2-shard stream, checkpoints in the ConfigMap, a graceful restart and a
//! crash resuming from the checkpoint with nothing lost, a failing function's records retried
//! then dead-lettered, status reasons, and a shard split followed parent-first.
//!
//! moto_server comes from `pip install 'moto[server]'` (or env MOTO_SERVER_BIN).
#![cfg(test)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kinesis_trigger::deliver::DeadLetter;
use serde_json::json;
use support::*;

/// Records per key: `{"key": k, "n": n}`, n increasing per key.
fn body(key: &str, n: usize) -> String {
    json!({"key": key, "n": n}).to_string()
}

fn parsed(r: &Received) -> (String, u64) {
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    (
        v["key"].as_str().unwrap().to_string(),
        v["n"].as_u64().unwrap(),
    )
}

/// Asserts that, per shard, sequence numbers only grow, and per key, n only grows, looking at
/// first deliveries (a redelivery after a crash repeats a suffix, which is allowed).
fn assert_ordered(received: &[Received]) -> BTreeMap<String, usize> {
    let mut last_seq: BTreeMap<String, String> = BTreeMap::new();
    let mut last_n: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut per_shard: BTreeMap<String, usize> = BTreeMap::new();
    for r in received {
        let seq = r.header("event-sequence-number");
        let shard = r.header("event-shard-id");
        // Sequence numbers are unique per shard (moto numbers each shard from 1).
        if !seen.insert((shard.clone(), seq.clone())) {
            continue;
        }
        *per_shard.entry(shard.clone()).or_default() += 1;
        if let Some(prev) = last_seq.get(&shard) {
            assert!(
                seq_less(prev, &seq),
                "shard {shard}: {seq} delivered after {prev}"
            );
        }
        last_seq.insert(shard, seq);
        let (key, n) = parsed(r);
        if let Some(prev) = last_n.get(&key) {
            assert!(*prev < n, "key {key}: n={n} delivered after n={prev}");
        }
        last_n.insert(key, n);
    }
    per_shard
}

fn distinct(received: &[Received]) -> BTreeSet<(String, u64)> {
    received.iter().map(parsed).collect()
}

/// Keys spread over both shards of a 2-shard stream (checked by the shard ids PutRecord
/// reports).
const KEYS: [&str; 6] = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];

async fn put_batch(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    next: &mut BTreeMap<&'static str, usize>,
    per_key: usize,
) -> BTreeSet<String> {
    let mut shards = BTreeSet::new();
    for _ in 0..per_key {
        for key in KEYS {
            let n = next.entry(key).or_default();
            *n += 1;
            let (shard, _) = put_record(k, stream, key, &body(key, *n)).await;
            shards.insert(shard);
        }
    }
    shards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_in_order_per_shard_and_resumes_from_checkpoints() {
    let moto = Moto::start();
    let k = moto.kinesis();
    let shard_list = create_stream(&k, "orders", 2).await;
    assert_eq!(shard_list.len(), 2);
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let function = RecordingFunction::ok().await;
    register_function(&client, "consumer", function.addr).await;
    create_aws_secret(&client, "aws").await;

    // Written before the trigger exists: TRIM_HORIZON must deliver them.
    let mut next = BTreeMap::new();
    let used = put_batch(&k, "orders", &mut next, 4).await;
    assert_eq!(used.len(), 2, "the keys land on both shards");
    create_trigger(
        &client,
        "orders",
        json!({
            "function-name": "consumer", "stream": "orders", "aws-region": REGION, "secret": "aws",
            "endpoint": moto.endpoint, "startingPosition": "TRIM_HORIZON"
        }),
    )
    .await;
    let replica = Replica::start(&client).await;
    let status = wait_ready(&client, "orders").await;
    let mut sorted = shard_list.clone();
    sorted.sort();
    assert_eq!(status.shards, sorted);
    eventually("24 records delivered", Duration::from_secs(30), || async {
        (distinct(&function.received()).len() == 24).then_some(())
    })
    .await;
    let per_shard = assert_ordered(&function.received());
    assert_eq!(per_shard.len(), 2, "both shards delivered: {per_shard:?}");
    let first = function.received()[0].clone();
    assert_eq!(
        first.header("event-namespace"),
        "kinesistriggers.kubeless.io"
    );
    assert_eq!(first.header("event-stream"), "orders");
    assert!(!first.header("event-partition-key").is_empty());
    assert_eq!(replica.deliveries("success"), 24);
    assert!(
        replica
            .metrics_text()
            .contains("kubeless_kinesis_trigger_millis_behind_latest{")
    );

    // Checkpoints reach the ConfigMap (coalesced, 200 ms in tests).
    let cps = eventually(
        "checkpoints of both shards",
        Duration::from_secs(10),
        || async {
            let c = checkpoints(&client, "orders").await;
            (c.len() == 2 && c.values().all(|v| v.chars().all(|ch| ch.is_ascii_digit())))
                .then_some(c)
        },
    )
    .await;
    assert_eq!(cps.keys().cloned().collect::<Vec<_>>(), sorted);

    // Graceful restart: stop, write more, start again: only the new records arrive.
    replica.stop().await;
    let before = function.count();
    put_batch(&k, "orders", &mut next, 2).await;
    let replica = Replica::start(&client).await;
    eventually("36 records delivered", Duration::from_secs(30), || async {
        (distinct(&function.received()).len() == 36).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        function.count() - before,
        12,
        "after a graceful stop nothing is delivered twice"
    );
    assert_ordered(&function.received());

    // Crash: tasks killed without a final flush. Records written while it is down are still
    // delivered; duplicates are bounded by the checkpoint interval.
    tokio::time::sleep(Duration::from_millis(600)).await; // let the last checkpoint land
    replica.kill();
    put_batch(&k, "orders", &mut next, 2).await;
    let before = function.count();
    let replica = Replica::start(&client).await;
    eventually("48 records delivered", Duration::from_secs(30), || async {
        (distinct(&function.received()).len() == 48).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after_crash = function.count() - before;
    assert!(
        (12..=14).contains(&after_crash),
        "resumed from the checkpoint, not from TRIM_HORIZON: {after_crash} deliveries for 12 new records"
    );
    assert_ordered(&function.received());
    replica.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_start_survives_a_restart_before_the_first_record() {
    let moto = Moto::start();
    let k = moto.kinesis();
    create_stream(&k, "clicks", 2).await;
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let function = RecordingFunction::ok().await;
    register_function(&client, "consumer", function.addr).await;
    create_aws_secret(&client, "aws").await;
    let mut next = BTreeMap::new();
    put_batch(&k, "clicks", &mut next, 1).await; // before the trigger: not delivered (LATEST)
    create_trigger(&client, "clicks", json!({
        "function-name": "consumer", "stream": "clicks", "secret": "aws", "endpoint": moto.endpoint
    }))
    .await;
    let replica = Replica::start(&client).await;
    wait_ready(&client, "clicks").await;
    // The start position is pinned in the checkpoints before anything arrives.
    eventually("start markers", Duration::from_secs(10), || async {
        let c = checkpoints(&client, "clicks").await;
        (c.len() == 2 && c.values().all(|v| v.starts_with("at:"))).then_some(())
    })
    .await;
    replica.stop().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    put_batch(&k, "clicks", &mut next, 2).await; // while down: must not be lost
    let replica = Replica::start(&client).await;
    eventually("12 records delivered", Duration::from_secs(30), || async {
        (distinct(&function.received()).len() == 12).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = distinct(&function.received());
    assert!(
        got.iter().all(|(_, n)| *n >= 2),
        "records from before the trigger were not delivered: {got:?}"
    );
    assert_eq!(function.count(), 12);
    replica.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_function_is_retried_then_dead_lettered() {
    let moto = Moto::start();
    let k = moto.kinesis();
    create_stream(&k, "payments", 2).await;
    create_stream(&k, "payments-dlq", 1).await;
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    // Fails every record except "ok" ones.
    let function = RecordingFunction::start(|_, body, _| {
        Reply::status(if String::from_utf8_lossy(body).contains("\"ok\"") {
            200
        } else {
            500
        })
    })
    .await;
    register_function(&client, "payer", function.addr).await;
    create_aws_secret(&client, "aws").await;
    create_trigger(&client, "payments", json!({
        "function-name": "payer", "stream": "payments", "secret": "aws", "endpoint": moto.endpoint,
        "startingPosition": "TRIM_HORIZON", "deadLetterStream": "payments-dlq",
        "retry": {"maxAttempts": 3, "initialBackoff": "10ms", "maxBackoff": "50ms"}
    }))
    .await;
    for (key, what) in [("a", "bad-1"), ("b", "bad-2"), ("c", "bad-3"), ("a", "ok")] {
        put_record(
            &k,
            "payments",
            key,
            &json!({"what": what, "status": if what == "ok" {"ok"} else {"bad"}}).to_string(),
        )
        .await;
    }
    let replica = Replica::start(&client).await;
    let letters = eventually("3 dead letters", Duration::from_secs(30), || async {
        let all = read_stream(&k, "payments-dlq").await;
        (all.len() == 3).then_some(all)
    })
    .await;
    let mut whats = BTreeSet::new();
    for raw in letters {
        let l: DeadLetter = serde_json::from_slice(&raw).unwrap();
        assert_eq!(l.attempts, 3);
        assert_eq!(l.last_status, Some(500));
        assert_eq!(l.stream, "payments");
        assert_eq!(l.function, "default/payer");
        assert_eq!(l.trigger, "default/payments");
        assert!(l.error.contains("5xx"), "{}", l.error);
        let original: serde_json::Value =
            serde_json::from_slice(&l.original_data().unwrap()).unwrap();
        whats.insert(original["what"].as_str().unwrap().to_string());
    }
    assert_eq!(
        whats,
        BTreeSet::from(["bad-1".into(), "bad-2".into(), "bad-3".into()])
    );
    // 3 attempts per failing record, the same event id on each; the good record once, after
    // the failing one of its key (order kept across a dead letter).
    eventually("the good record", Duration::from_secs(10), || async {
        (function.count() == 10).then_some(())
    })
    .await;
    let all = function.received();
    let mut attempts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &all {
        *attempts.entry(r.header("event-id")).or_default() += 1;
    }
    let mut counts: Vec<usize> = attempts.values().copied().collect();
    counts.sort();
    assert_eq!(counts, vec![1, 3, 3, 3]);
    let pos = |w: &str| {
        all.iter()
            .rposition(|r| String::from_utf8_lossy(&r.body).contains(w))
            .unwrap()
    };
    assert!(
        pos("bad-1") < pos("\"ok\""),
        "key a: the dead-lettered record came first"
    );
    eventually("metrics", Duration::from_secs(5), || async {
        (replica.deliveries("dead_letter") == 3
            && replica.deliveries("success") == 1
            && replica.deliveries("retry") == 6)
            .then_some(())
    })
    .await;
    // Warning Events on the trigger, rate-limited: the first of each reason at once, the
    // others summed up in one Event after the 10 s interval.
    let (failed, lettered) = eventually("the Events", Duration::from_secs(30), || async {
        let about = |reason: &'static str| {
            kubeless_service::events::events_about(
                &client,
                "default",
                "KinesisTrigger",
                "payments",
                reason,
            )
        };
        let failed = about("DeliveryFailed").await.unwrap();
        let lettered = about("DeadLettered").await.unwrap();
        use kubeless_service::events::total_occurrences as n;
        (n(&failed) == 3 && n(&lettered) == 3).then_some((failed, lettered))
    })
    .await;
    let first = failed[0].note.clone().unwrap_or_default();
    assert!(
        first.contains("function payer failed on record payments/shardId-")
            && first.contains("after 3 attempt(s)")
            && first.contains("dead-letter stream payments-dlq"),
        "{first}"
    );
    assert!(
        lettered[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("written to the dead-letter stream payments-dlq")),
        "{lettered:?}"
    );
    assert!(
        failed[0]
            .regarding
            .as_ref()
            .and_then(|r| r.uid.as_deref())
            .is_some_and(|u| !u.is_empty()),
        "the Event names the trigger's uid"
    );
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    replica.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_missing_function_secret_and_stream() {
    let moto = Moto::start();
    let k = moto.kinesis();
    create_stream(&k, "present", 1).await;
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let function = RecordingFunction::ok().await;
    register_function(&client, "f", function.addr).await;
    create_aws_secret(&client, "aws").await;
    create_trigger(&client, "no-fn", json!({"function-name": "missing", "stream": "present", "secret": "aws", "endpoint": moto.endpoint})).await;
    create_trigger(&client, "no-secret", json!({"function-name": "f", "stream": "present", "secret": "nope", "endpoint": moto.endpoint})).await;
    create_trigger(&client, "no-stream", json!({"function-name": "f", "stream": "absent", "secret": "aws", "endpoint": moto.endpoint})).await;
    let replica = Replica::start(&client).await;
    wait_reason(&client, "no-fn", "FunctionNotFound").await;
    let m = wait_reason(&client, "no-secret", "SecretNotFound").await;
    assert!(m.contains("nope"), "{m}");
    let m = wait_reason(&client, "no-stream", "SourceNotFound").await;
    assert!(m.contains("absent"), "{m}");
    replica.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_parent_is_drained_then_children_are_read() {
    // moto closes the parent on SplitShard and lists the children with ParentShardId, but keeps
    // routing PutRecord to the (closed) parent and never ends its iterator chain; so this test
    // covers draining a closed parent up to its EndingSequenceNumber, marking it SHARD_END and
    // starting the children. The parent-before-child order itself is unit-tested (shards.rs).
    let moto = Moto::start();
    let k = moto.kinesis();
    let shards = create_stream(&k, "events", 1).await;
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let function = RecordingFunction::ok().await;
    register_function(&client, "consumer", function.addr).await;
    create_aws_secret(&client, "aws").await;
    let mut next = BTreeMap::new();
    put_batch(&k, "events", &mut next, 3).await;
    create_trigger(&client, "events", json!({
        "function-name": "consumer", "stream": "events", "secret": "aws", "endpoint": moto.endpoint,
        "startingPosition": "TRIM_HORIZON"
    }))
    .await;
    let replica = Replica::start(&client).await;
    let status = wait_ready(&client, "events").await;
    assert_eq!(status.shards, shards);
    eventually("18 records delivered", Duration::from_secs(30), || async {
        (distinct(&function.received()).len() == 18).then_some(())
    })
    .await;
    // Split the only shard in the middle of its hash range while it is being read.
    k.split_shard()
        .stream_name("events")
        .shard_to_split(&shards[0])
        .new_starting_hash_key("170141183460469231731687303715884105728")
        .send()
        .await
        .unwrap();
    let children: Vec<String> = shard_ids(&k, "events")
        .await
        .into_iter()
        .filter(|s| *s != shards[0])
        .collect();
    assert_eq!(children.len(), 2);
    let status = eventually("children read", Duration::from_secs(30), || async {
        let s = trigger_status(&client, "events").await?;
        (s.shards == children).then_some(s)
    })
    .await;
    assert!(kubeless_api::is_ready(&status.conditions));
    let cps = checkpoints(&client, "events").await;
    assert_eq!(
        cps.get(&shards[0]).map(String::as_str),
        Some("SHARD_END"),
        "{cps:?}"
    );
    assert_ordered(&function.received());
    assert_eq!(
        function.count(),
        18,
        "nothing delivered twice across the split"
    );
    replica.stop().await;
    cluster.shutdown().await;
}
