//! Shared by the service's tests: the testkit fixtures (a real nats-server, devcluster, local
//! recording functions registered through EndpointSlices), the trigger's own objects and status,
//! and the trigger service started in process.
#![allow(dead_code, unused_imports)]

use std::time::Duration;

use kube::Client;
use kube::api::{Api, PostParams};
use kubeless_api::{NatsTrigger, NatsTriggerSpec};
pub use kubeless_testkit::{
    NS, NatsServer, Received, RecordingFunction, Reply, TestCluster, eventually, register_function,
    signal,
};
use nats_trigger::{Resolution, Running, Settings};
use tokio_util::sync::CancellationToken;

pub async fn create_trigger(
    client: &Client,
    name: &str,
    spec: serde_json::Value,
    annotations: serde_json::Value,
) {
    let spec: NatsTriggerSpec = serde_json::from_value(spec).unwrap();
    let mut t = NatsTrigger::new(name, spec);
    t.metadata.namespace = Some(NS.into());
    t.metadata.annotations = serde_json::from_value(annotations).unwrap();
    Api::<NatsTrigger>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
}

/// One instance ("replica") of the service, with its own NATS connection and metrics.
pub struct Replica {
    pub running: Option<Running>,
    pub token: CancellationToken,
    pub metrics: kubeless_service::Metrics,
    pub nats: async_nats::Client,
}

impl Replica {
    pub async fn start(client: &Client, nats_url: &str) -> Self {
        let nats = nats_trigger::NatsArgs::url(nats_url)
            .connect()
            .await
            .unwrap();
        let token = CancellationToken::new();
        let metrics = kubeless_service::Metrics::new("kubeless");
        let mut settings = Settings::new(Resolution::EndpointSlices);
        settings.drain_timeout = Duration::from_secs(5);
        let mut running = nats_trigger::run(
            client.clone(),
            nats.clone(),
            settings,
            &metrics,
            token.clone(),
        );
        running.wait_synced().await;
        Self {
            running: Some(running),
            token,
            metrics,
            nats,
        }
    }

    /// Waits until `n` subscriptions are running in this replica.
    pub async fn wait_active(&self, n: usize) {
        let r = self.running.as_ref().unwrap();
        eventually(
            &format!("{n} running subscriptions"),
            Duration::from_secs(30),
            || async { (r.active_units() == n).then_some(()) },
        )
        .await;
    }

    /// The value of `kubeless_nats_trigger_deliveries_total` for a function and outcome.
    pub fn deliveries(&self, function: &str, outcome: &str) -> u64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("kubeless_nats_trigger_deliveries_total{"))
            .filter(|l| {
                l.contains(&format!("function=\"{function}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    pub async fn stop(mut self) {
        self.token.cancel();
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(20), r.join())
                .await
                .expect("service stopped in time");
        }
    }

    /// A crash: tasks killed, connection dropped, nothing acked.
    pub fn kill(mut self) {
        if let Some(r) = self.running.take() {
            r.abort();
        }
    }
}

pub async fn trigger_status(
    client: &Client,
    name: &str,
) -> Option<kubeless_api::NatsTriggerStatus> {
    Api::<NatsTrigger>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .ok()
        .and_then(|t| t.status)
}

pub async fn wait_ready(client: &Client, name: &str) -> kubeless_api::NatsTriggerStatus {
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
