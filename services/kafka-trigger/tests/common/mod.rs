//! Test support for kafka-trigger: the shared fixtures of `kubeless-testkit` (devcluster with the
//! CRDs, a recording function, tansu) plus what only Kafka tests need: topics, a producer,
//! the service's settings and its Events.
#![allow(dead_code, unused_imports)]

use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, Client};
use kubeless_api::KafkaTrigger;
pub use kubeless_testkit::{
    NS, Received, RecordingFunction, Reply, TestCluster as Cluster, eventually, register_function,
    signal,
};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

/// A tansu broker (testkit) with the Kafka-side helpers.
pub struct Broker {
    tansu: kubeless_testkit::Tansu,
    pub addr: String,
}

impl Broker {
    pub fn start() -> Self {
        let tansu = kubeless_testkit::Tansu::start();
        let addr = tansu.addr.clone();
        Self { tansu, addr }
    }

    /// The broker's process id (to freeze it with SIGSTOP in tests).
    pub fn pid(&self) -> u32 {
        self.tansu.pid()
    }

    pub async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let res = admin
            .create_topics(&[topic], &AdminOptions::new())
            .await
            .unwrap();
        for r in res {
            r.unwrap();
        }
    }

    pub fn producer(&self) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .set("linger.ms", "5")
            .create()
            .unwrap()
    }

    /// Broker flags for the service: short session timeout (tansu holds joins for about half of it).
    pub fn broker_args(&self) -> kafka_trigger::BrokerArgs {
        kafka_trigger::BrokerArgs {
            brokers: self.addr.clone(),
            session_timeout_ms: 6000,
            ..kafka_trigger::BrokerArgs::default()
        }
    }
}

pub async fn produce(
    p: &FutureProducer,
    topic: &str,
    partition: i32,
    key: &str,
    body: &str,
    headers: &[(&str, &str)],
) {
    let mut h = rdkafka::message::OwnedHeaders::new();
    for (k, v) in headers {
        h = h.insert(rdkafka::message::Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    p.send(
        FutureRecord::to(topic)
            .partition(partition)
            .key(key)
            .payload(body)
            .headers(h),
        Duration::from_secs(10),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
}

/// The Kafka coordinates the trigger puts in a call's headers.
pub trait KafkaCall {
    fn partition(&self) -> i32;
    fn offset(&self) -> i64;
}

impl KafkaCall for Received {
    fn partition(&self) -> i32 {
        self.header("event-partition").parse().unwrap()
    }
    fn offset(&self) -> i64 {
        self.header("event-offset").parse().unwrap()
    }
}

/// A recording function answering 500 to bodies starting with `fail`, 200 otherwise, after
/// `delay`.
pub async fn fn_server(delay: Duration) -> RecordingFunction {
    RecordingFunction::start(move |_, body, _| Reply::Answer {
        status: if body.starts_with(b"fail") { 500 } else { 200 },
        delay,
    })
    .await
}

/// Logs of the service under test (RUST_LOG, default info for this crate) in the test output.
pub fn init_logs() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "kafka_trigger=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

/// devcluster without the pod runner (API server only) unless `images` is given.
pub async fn cluster(images: Option<std::path::PathBuf>) -> Cluster {
    Cluster::start(images).await
}

pub async fn create_trigger(client: &Client, name: &str, spec: serde_json::Value) {
    let api: Api<KafkaTrigger> = Api::namespaced(client.clone(), NS);
    let t: KafkaTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "KafkaTrigger",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &t).await.unwrap();
}

/// Settings for an in-process service in tests: EndpointSlice resolution, quick commits.
pub fn settings(broker: &Broker, ordering: kafka_trigger::Ordering) -> kafka_trigger::Settings {
    kafka_trigger::Settings {
        namespace: None,
        brokers: broker.broker_args(),
        defaults: kafka_trigger::Defaults {
            ordering,
            max_backoff: None,
        },
        max_in_flight: 64,
        tuning: kafka_trigger::Tuning {
            commit_interval: Duration::from_millis(200),
            lag_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
            ..kafka_trigger::Tuning::default()
        },
        resolver: kafka_trigger::Resolution::EndpointSlices,
        lease: None,
        activity_interval: Duration::from_secs(10),
    }
}

/// The Events of `reason` about the trigger `name` of `kind`, oldest first.
pub async fn trigger_events(
    client: &Client,
    kind: &str,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    kubeless_service::events::events_about(client, NS, kind, name, reason)
        .await
        .unwrap()
}

/// How many occurrences the rate-limited Events stand for (a summary note counts several).
pub fn occurrences(events: &[k8s_openapi::api::events::v1::Event]) -> u64 {
    kubeless_service::events::total_occurrences(events)
}
