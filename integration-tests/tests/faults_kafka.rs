//! Fault suite, Kafka (issue 20): 20,000 keyed records through the real kafka-trigger binary
//! into a recording function that fails some events once, hangs on some past the timeout and
//! always fails a few (poison), while the trigger is SIGKILLed three times and restarted and
//! tansu is frozen (SIGSTOP) for 20 s — tansu keeps its log in memory, so a freeze stands in for
//! a restart. Counted and printed: lost (must be 0), duplicated, out of order within a key
//! (must be 0: the default `partition` ordering keeps a partition's order and each key stays in
//! one partition), and dead-lettered (exactly the poison events).
//! Uses the binaries `cargo build --workspace --bins` left in the target dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use integration_tests::faults::{self, Counts, EVENTS, Faults, KEYS, MAX_ATTEMPTS};
use kube::api::{Api, PostParams};
use kubeless_api::KafkaTrigger;
use kubeless_testkit::{
    NS, RecordingFunction, ServiceProcess, Tansu, TestCluster, register_function, signal,
};
use nix::sys::signal::Signal;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

const PARTITIONS: usize = 4;
const TOPIC: &str = "events";
const DLQ: &str = "events-dlq";
const FREEZE: Duration = Duration::from_secs(20);

struct KafkaFaults<'a> {
    cluster: &'a TestCluster,
    broker: &'a Tansu,
    trigger: Option<ServiceProcess>,
    runs: usize,
}

impl KafkaFaults<'_> {
    fn start_trigger(&mut self) {
        self.runs += 1;
        self.trigger = Some(ServiceProcess::start(
            "kafka-trigger",
            self.cluster.dir.path(),
            &format!("kafka-trigger-{}", self.runs),
            &[
                ("KUBECONFIG", self.cluster.kubeconfig()),
                ("KAFKA_BROKERS", self.broker.addr.clone()),
                // tansu holds a join for about half the session timeout.
                ("KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
                ("KAFKA_COMMIT_INTERVAL_MS", "100".into()),
                ("KUBELESS_ADMIN_ADDR", "127.0.0.1:0".into()),
                ("KUBELESS_RESOLVER", "endpointslices".into()),
                ("KUBELESS_LOG_LEVEL", "info".into()),
            ],
        ));
    }
}

impl Faults for KafkaFaults<'_> {
    fn kill_trigger(&mut self) {
        if let Some(t) = self.trigger.take() {
            t.kill();
        }
        self.start_trigger();
    }

    async fn broker_fault(&mut self) {
        signal(self.broker.pid(), Signal::SIGSTOP);
        tokio::time::sleep(FREEZE).await;
        signal(self.broker.pid(), Signal::SIGCONT);
    }
}

async fn create_topics(broker: &Tansu) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    let topics = [
        NewTopic::new(TOPIC, PARTITIONS as i32, TopicReplication::Fixed(1)),
        NewTopic::new(DLQ, 1, TopicReplication::Fixed(1)),
    ];
    for r in admin
        .create_topics(&topics, &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
}

/// The events, each key in one partition (key index modulo the partitions).
async fn produce_all(broker: &Tansu) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("linger.ms", "5")
        .create()
        .unwrap();
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

/// The ids in the dead-letter topic, one per record, read until `want` distinct ids came and
/// nothing more arrives for 2 s, or 30 s passed.
async fn read_dead_letters(broker: &Tansu, want: usize) -> Vec<usize> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("group.id", "fault-suite-dlq-reader")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    consumer.subscribe(&[DLQ]).unwrap();
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let distinct = ids.iter().collect::<std::collections::BTreeSet<_>>().len();
        let wait = if distinct >= want {
            Duration::from_secs(2)
        } else {
            deadline.saturating_duration_since(Instant::now())
        };
        match tokio::time::timeout(wait, consumer.recv()).await {
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
    create_topics(&broker).await;
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
    eprintln!(
        "kafka: {EVENTS} records produced in {:.1} s",
        produced.elapsed().as_secs_f64()
    );

    let mut faults_ = KafkaFaults {
        cluster: &cluster,
        broker: &broker,
        trigger: None,
        runs: 0,
    };
    faults_.start_trigger();
    let seed = faults::seed();
    let run = faults::run_schedule(
        "kafka",
        &function,
        &mut faults_,
        seed,
        Duration::from_secs(240),
    )
    .await;
    let dead_letters = read_dead_letters(&broker, faults::poison().len()).await;
    let counts = function.with_received(|all| Counts::from(all, &dead_letters));
    eprintln!("kafka: {counts}");
    let logs = cluster.dir.path().display().to_string();
    let trigger_alive = faults_.trigger.as_mut().is_some_and(|t| t.running());
    drop(faults_);
    run.unwrap_or_else(|e| panic!("{e}; logs in {logs}"));
    assert!(
        trigger_alive,
        "the last kafka-trigger exited; logs in {logs}"
    );
    assert_eq!(counts.lost, 0, "events lost: {counts}");
    assert_eq!(
        counts.out_of_order, 0,
        "order within a key broken: {counts}"
    );
    assert_eq!(counts.dead_letter_mismatch, 0, "dead letters: {counts}");
    assert_eq!(counts.poison_delivered, 0, "{counts}");
    cluster.shutdown().await;
}
