//! Several replicas share one trigger's shards through a Lease per shard (moto + devcluster):
//! the shards are split between the replicas, no record is delivered twice, and when a replica
//! crashes the other takes its shards over after the Leases expire, from the checkpoints.
#![cfg(test)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use support::*;

const KEYS: [&str; 8] = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];

async fn put_round(k: &aws_sdk_kinesis::Client, round: usize) {
    for key in KEYS {
        put_record(
            k,
            "shared",
            key,
            &json!({"key": key, "n": round}).to_string(),
        )
        .await;
    }
}

fn distinct(f: &RecordingFunction) -> BTreeSet<String> {
    f.received()
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r.header("event-shard-id"),
                r.header("event-sequence-number")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_shards_without_double_delivery_and_take_over_after_a_crash() {
    let moto = Moto::start();
    let k = moto.kinesis();
    create_stream(&k, "shared", 4).await;
    let TestCluster {
        cluster,
        client,
        dir: _dir,
    } = TestCluster::start(None).await;
    let function = RecordingFunction::ok().await;
    register_function(&client, "consumer", function.addr).await;
    create_aws_secret(&client, "aws").await;
    create_trigger(&client, "shared", json!({
        "function-name": "consumer", "stream": "shared", "secret": "aws", "endpoint": moto.endpoint,
        "startingPosition": "TRIM_HORIZON"
    }))
    .await;
    let a = Replica::start_sharing(&client, "replica-a").await;
    let b = Replica::start_sharing(&client, "replica-b").await;
    eventually("two shards each", Duration::from_secs(30), || async {
        (a.shards("shared") == 2 && b.shards("shared") == 2).then_some(())
    })
    .await;

    // Status lists every readable shard, whichever replica reads it.
    let status = wait_ready(&client, "shared").await;
    assert_eq!(status.shards.len(), 4, "{:?}", status.shards);

    for round in 1..=5 {
        put_round(&k, round).await;
    }
    eventually("40 records", Duration::from_secs(30), || async {
        (distinct(&function).len() == 40).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(function.count(), 40, "no record delivered twice");
    let (sa, sb) = (a.deliveries("success"), b.deliveries("success"));
    assert_eq!(sa + sb, 40);
    assert!(sa > 0 && sb > 0, "both replicas delivered: {sa} and {sb}");

    // Crash one replica (its Leases are not released): the other takes its shards over once
    // they expire, resuming from the checkpoints.
    tokio::time::sleep(Duration::from_millis(600)).await; // let the last checkpoints land
    a.kill();
    for round in 6..=8 {
        put_round(&k, round).await;
    }
    eventually(
        "the survivor reads all four shards",
        Duration::from_secs(30),
        || async { (b.shards("shared") == 4).then_some(()) },
    )
    .await;
    eventually("64 records", Duration::from_secs(30), || async {
        (distinct(&function).len() == 64).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        function.count() <= 66,
        "taken over from the checkpoints: {} deliveries for 64 records",
        function.count()
    );
    b.stop().await;
    cluster.shutdown().await;
}
