//! Test support for kafka-trigger: the shared fixtures of `kubeless-testkit` (devcluster with the
//! CRDs, a recording function, tansu with topics and a producer) plus what only this service's
//! tests need: its triggers, its settings and the Kafka coordinates of a call.
#![allow(dead_code, unused_imports)]

use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, Client};
use kubeless_api::KafkaTrigger;
pub use kubeless_testkit::{
    NS, Received, RecordingFunction, Reply, Tansu, TestCluster as Cluster, eventually, produce,
    register_function, signal,
};
use serde_json::json;

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
pub fn settings(broker: &Tansu, ordering: kafka_trigger::Ordering) -> kafka_trigger::Settings {
    kafka_trigger::Settings {
        namespace: None,
        // A short session timeout: tansu holds joins for about half of it.
        brokers: kafka_trigger::BrokerArgs {
            brokers: broker.addr.clone(),
            session_timeout_ms: 6000,
            ..kafka_trigger::BrokerArgs::default()
        },
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
