//! Shared by the service's tests: the testkit fixtures (moto, devcluster, local recording
//! functions registered through EndpointSlices, Kinesis clients), the trigger's own objects and
//! status, and the trigger service started in process.
#![allow(dead_code, unused_imports)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use aws_sdk_kinesis::Client as KinesisClient;
use k8s_openapi::api::core::v1::ConfigMap;
use kinesis_trigger::{Polling, Resolution, Running, Settings, Timing};
use kube::Client;
use kube::api::{Api, PostParams};
use kubeless_api::{KinesisTrigger, KinesisTriggerSpec};
pub use kubeless_testkit::{
    Moto, NS, Received, RecordingFunction, Reply, TestCluster, create_aws_secret, eventually,
    put_record, read_stream, seq_less,
};
use tokio_util::sync::CancellationToken;

/// The region of the test clients and triggers.
pub const REGION: &str = kubeless_testkit::MOTO_REGION;

/// Creates an ACTIVE stream (testkit) and returns its shard ids.
pub async fn create_stream(k: &KinesisClient, name: &str, shards: i32) -> Vec<String> {
    kubeless_testkit::create_stream(k, name, shards).await;
    shard_ids(k, name).await
}

pub async fn shard_ids(k: &KinesisClient, stream: &str) -> Vec<String> {
    let out = k.list_shards().stream_name(stream).send().await.unwrap();
    out.shards()
        .iter()
        .map(|s| s.shard_id().to_string())
        .collect()
}

/// A Function object with no labels (a KinesisTrigger names its function), reached through an
/// EndpointSlice pointing at `addr`.
pub async fn register_function(client: &Client, name: &str, addr: SocketAddr) {
    kubeless_testkit::register_function(client, name, serde_json::json!({}), "5", addr).await;
}

pub async fn create_trigger(client: &Client, name: &str, spec: serde_json::Value) {
    let spec: KinesisTriggerSpec = serde_json::from_value(spec).unwrap();
    let mut t = KinesisTrigger::new(name, spec);
    t.metadata.namespace = Some(NS.into());
    Api::<KinesisTrigger>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
}

pub async fn trigger_status(
    client: &Client,
    name: &str,
) -> Option<kubeless_api::KinesisTriggerStatus> {
    Api::<KinesisTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .ok()
        .and_then(|t| t.status)
}

pub async fn wait_ready(client: &Client, name: &str) -> kubeless_api::KinesisTriggerStatus {
    eventually(
        &format!("trigger {name} Ready"),
        Duration::from_secs(30),
        || async {
            trigger_status(client, name)
                .await
                .filter(|s| kubeless_api::is_ready(&s.conditions))
        },
    )
    .await
}

/// The Ready condition's reason once it is `reason`.
pub async fn wait_reason(client: &Client, name: &str, reason: &str) -> String {
    eventually(
        &format!("trigger {name} reason {reason}"),
        Duration::from_secs(30),
        || async {
            let s = trigger_status(client, name).await?;
            let c = kubeless_api::find_condition(&s.conditions, "Ready")?;
            (c.reason.as_deref() == Some(reason)).then(|| c.message.clone().unwrap_or_default())
        },
    )
    .await
}

/// The checkpoint ConfigMap's data.
pub async fn checkpoints(client: &Client, trigger: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get_opt(&format!("{trigger}-kinesis-checkpoints"))
        .await
        .unwrap()
        .and_then(|c| c.data)
        .unwrap_or_default()
}

// ------------------------------------------------------------------ the service

/// Fast timing for tests (the limits still hold: 200 ms between GetRecords per shard).
pub fn test_timing() -> Timing {
    Timing {
        polling: Polling {
            min_interval: Duration::from_millis(200),
            idle_interval: Duration::from_millis(200),
            records_limit: 100,
            max_backoff: Duration::from_secs(2),
        },
        list_shards_interval: Duration::from_millis(500),
        checkpoint_interval: Duration::from_millis(200),
        max_backoff: Duration::from_secs(2),
    }
}

/// One instance of the service with its own metrics.
pub struct Replica {
    pub running: Option<Running>,
    pub token: CancellationToken,
    pub metrics: kubeless_service::Metrics,
}

impl Replica {
    pub async fn start(client: &Client) -> Self {
        Self::start_with(client, None).await
    }

    /// A replica sharing shards through shard Leases (3 s) under `identity`.
    pub async fn start_sharing(client: &Client, identity: &str) -> Self {
        let leases = kinesis_trigger::leases::ShardLeaseSettings {
            identity: identity.to_string(),
            duration: Duration::from_secs(3),
        };
        Self::start_with(client, Some(leases)).await
    }

    pub async fn start_with(
        client: &Client,
        shard_leases: Option<kinesis_trigger::leases::ShardLeaseSettings>,
    ) -> Self {
        let token = CancellationToken::new();
        let metrics = kubeless_service::Metrics::new("kubeless");
        let mut settings = Settings::new(Resolution::EndpointSlices);
        settings.timing = test_timing();
        settings.resync = Duration::from_secs(2);
        settings.shard_leases = shard_leases;
        let mut running = kinesis_trigger::run(client.clone(), settings, &metrics, token.clone());
        running.wait_synced().await;
        Self {
            running: Some(running),
            token,
            metrics,
        }
    }

    /// The value of `kubeless_kinesis_trigger_deliveries_total` for an outcome.
    pub fn deliveries(&self, outcome: &str) -> u64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("kubeless_kinesis_trigger_deliveries_total{"))
            .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// `kubeless_kinesis_trigger_shards` of a trigger: shards this replica reads.
    pub fn shards(&self, trigger: &str) -> i64 {
        let text = self.metrics.encode().unwrap();
        let prefix = format!("kubeless_kinesis_trigger_shards{{trigger=\"{NS}/{trigger}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
            .unwrap_or(0)
    }

    pub fn metrics_text(&self) -> String {
        self.metrics.encode().unwrap()
    }

    /// Graceful stop: readers cancelled, checkpoints flushed.
    pub async fn stop(mut self) {
        self.token.cancel();
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(20), r.join())
                .await
                .expect("service stopped in time");
        }
    }

    /// A crash: every task aborted, nothing flushed.
    pub fn kill(mut self) {
        if let Some(r) = self.running.take() {
            r.abort();
        }
    }
}
