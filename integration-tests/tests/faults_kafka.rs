//! Fault suite, Kafka (issue 20): 20,000 keyed records through the real kafka-trigger binary
//! into a recording function that fails some events once, hangs on some past the timeout and
//! always fails a few (poison), while the trigger is SIGKILLed three times and restarted and
//! tansu is frozen (SIGSTOP) for 20 s — tansu keeps its log in memory, so a freeze stands in for
//! a restart. Counted and printed: lost (must be 0), duplicated, out of order within a key
//! (must be 0: the default `partition` ordering keeps a partition's order and each key stays in
//! one partition), and dead-lettered (exactly the poison events).
//! Uses the binaries `cargo build --workspace --bins` left in the target dir.
#![cfg(test)]

use std::time::{Duration, Instant};

use integration_tests::faults::{self, EVENTS, Freeze, KEYS, MAX_ATTEMPTS, Trigger};
use kube::api::{Api, PostParams};
use kubeless_api::KafkaTrigger;
use kubeless_testkit::{NS, RecordingFunction, Tansu, TestCluster, register_function};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::json;

const PARTITIONS: usize = 4;
const TOPIC: &str = "events";
const DLQ: &str = "events-dlq";
const FREEZE: Duration = Duration::from_secs(20);

/// The events, each key in one partition (key index modulo the partitions).
async fn produce_all(broker: &Tansu) {
    let producer = broker.producer();
    let bodies: Vec<String> = (0..EVENTS).map(faults::body).collect();
    let keys: Vec<String> = (0..EVENTS).map(faults::key).collect();
    for chunk in (0..EVENTS).collect::<Vec<_>>().chunks(1000) {
        let sends = chunk.iter().map(|&i| {
            producer.send(
                FutureRecord::to(TOPIC)
                    .partition(((i % KEYS) % PARTITIONS) as i32)
                    .key(&keys[i])
                    .payload(&bodies[i]),
                Duration::from_secs(30),
            )
        });
        for r in futures::future::join_all(sends).await {
            r.map_err(|(e, _)| e).unwrap();
        }
    }
}

/// The ids in the dead-letter topic (one partition), one per record: everything there until
/// nothing more comes for 2 s.
async fn read_dead_letters(broker: &Tansu) -> Vec<usize> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("group.id", "fault-suite-dlq-reader")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    // Assigned, not subscribed: no group join to wait for.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(DLQ, 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut ids = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(2), consumer.recv()).await {
            Ok(Ok(m)) => {
                if let Some(id) = m.payload().and_then(faults::id_of) {
                    ids.push(id);
                }
            }
            Ok(Err(e)) => panic!("reading {DLQ}: {e}"),
            Err(_) => return ids,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_trigger_loses_nothing_through_kills_a_frozen_broker_and_failing_calls() {
    let broker = Tansu::start();
    broker.create_topic(TOPIC, PARTITIONS as i32).await;
    broker.create_topic(DLQ, 1).await;
    let cluster = TestCluster::start(None).await;
    let function = RecordingFunction::start(|_, body, attempt| faults::reply(body, attempt)).await;
    register_function(
        &cluster.client,
        "sink",
        json!({"faults": "kafka"}),
        &faults::FUNCTION_TIMEOUT_SECS.to_string(),
        function.addr,
    )
    .await;
    let trigger: KafkaTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": "events", "namespace": NS},
        "spec": {"topic": TOPIC, "functionSelector": {"matchLabels": {"faults": "kafka"}},
                 "retry": {"maxAttempts": MAX_ATTEMPTS, "initialBackoff": "100ms", "maxBackoff": "400ms"},
                 "deadLetterTopic": DLQ}
    }))
    .unwrap();
    Api::<KafkaTrigger>::namespaced(cluster.client.clone(), NS)
        .create(&PostParams::default(), &trigger)
        .await
        .unwrap();
    let produced = Instant::now();
    produce_all(&broker).await;
    kubeless_testkit::report!(
        "kafka: {EVENTS} records produced in {:.1} s",
        produced.elapsed().as_secs_f64()
    );

    let mut trigger = Trigger::start(
        "kafka-trigger",
        &cluster,
        vec![
            ("KAFKA_BROKERS", broker.addr.clone()),
            // tansu holds a join for about half the session timeout.
            ("KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
            ("KAFKA_COMMIT_INTERVAL_MS", "100".into()),
            ("KUBELESS_ENDPOINT_RESOLUTION", "endpointslices".into()),
        ],
    );
    let mut freeze = Freeze {
        pid: broker.pid(),
        for_: FREEZE,
    };
    faults::run_case(
        "kafka",
        &function,
        &mut trigger,
        &mut freeze,
        Duration::from_secs(240),
        true,
        &cluster,
        || read_dead_letters(&broker),
    )
    .await;
    drop(trigger);
    cluster.shutdown().await;
}
