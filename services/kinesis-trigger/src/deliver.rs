//! Delivering one record: call the function through the shared invoker with the trigger's
//! retry policy; when retries are used up, put the record (wrapped with the failure details)
//! to the dead-letter stream, or, without one, skip it loudly. Only then is the record "done"
//! and its sequence number may be checkpointed.

use aws_sdk_kinesis::Client as KinesisClient;
use aws_sdk_kinesis::primitives::Blob;
use base64::Engine;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use kubeless_invoke::{CallBody, Event, Lane};
use kubeless_trigger::deliver::Failure;
use kubeless_trigger::{Destination, Finished, PairDelivery};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::metrics::StreamMetrics;
use crate::plan::ReaderConfig;

/// `event-namespace` of every event this trigger sends.
pub const EVENT_NAMESPACE: &str = "kinesistriggers.kubeless.io";

/// Extra headers on each event.
pub mod headers {
    pub const STREAM: &str = "event-stream";
    pub const SHARD_ID: &str = "event-shard-id";
    pub const PARTITION_KEY: &str = "event-partition-key";
    pub const SEQUENCE_NUMBER: &str = "event-sequence-number";
}

/// One record read from a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub shard_id: String,
    pub sequence_number: String,
    pub partition_key: String,
    pub data: Bytes,
}

impl Record {
    /// The event for the function. The event id is derived from shard and sequence number, so
    /// a redelivery (retry, or after a restart) carries the same id and functions can dedupe.
    pub fn to_event(&self, stream: &str) -> Event {
        let mut e = Event::new(EVENT_NAMESPACE)
            .with_body(self.data.clone())
            .with_event_id(format!("{}-{}", self.shard_id, self.sequence_number));
        for (name, value) in [
            (headers::STREAM, stream),
            (headers::SHARD_ID, self.shard_id.as_str()),
            (headers::PARTITION_KEY, self.partition_key.as_str()),
            (headers::SEQUENCE_NUMBER, self.sequence_number.as_str()),
        ] {
            // Kinesis partition keys are Unicode; one that is not a valid header value is left
            // out rather than failing the record.
            if let Ok(v) = HeaderValue::from_str(value) {
                e = e.with_header(HeaderName::from_static(name), v);
            }
        }
        e
    }
}

/// What goes to the dead-letter stream: the original record and why it failed. JSON, since
/// Kinesis records have no headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub stream: String,
    pub shard_id: String,
    pub sequence_number: String,
    pub partition_key: String,
    /// The original data, base64.
    pub data: String,
    pub attempts: u32,
    /// HTTP status of the last answer; absent when there was none (timeout, connection error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    pub error: String,
    /// `<namespace>/<function>`.
    pub function: String,
    /// `<namespace>/<trigger>`.
    pub trigger: String,
}

impl DeadLetter {
    pub fn new(config: &ReaderConfig, record: &Record, failure: Failure) -> Self {
        Self {
            stream: config.stream.clone(),
            shard_id: record.shard_id.clone(),
            sequence_number: record.sequence_number.clone(),
            partition_key: record.partition_key.clone(),
            data: base64::engine::general_purpose::STANDARD.encode(&record.data),
            attempts: failure.attempts,
            last_status: failure.status,
            error: failure.error,
            function: format!("{}/{}", config.namespace, config.function),
            trigger: config.label(),
        }
    }

    /// The original data.
    pub fn original_data(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .ok()
    }
}

/// `record <stream>/<shard>@<sequence>`, how logs and Events name a record.
struct At<'a>(&'a str, &'a Record);

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let At(stream, r) = self;
        write!(f, "record {stream}/{}@{}", r.shard_id, r.sequence_number)
    }
}

/// Calls the function and writes dead letters for one trigger.
pub struct Deliverer {
    pub kinesis: KinesisClient,
    pub config: std::sync::Arc<ReaderConfig>,
    /// The stream-side metrics (GetRecords, iterator age, shards).
    pub metrics: StreamMetrics,
    /// The runtime's delivery of this (trigger, function) pair, with its metrics.
    pub delivery: PairDelivery,
}

impl Deliverer {
    /// The deliverer of one trigger's reader.
    pub fn new(
        shared: &crate::trigger::Shared,
        kinesis: KinesisClient,
        config: std::sync::Arc<ReaderConfig>,
    ) -> Self {
        let to = Destination {
            target: config.target.clone(),
            policy: config.policy,
            dead_letter: config.dead_letter_stream.clone(),
            trigger: kubeless_service::object_reference::<kubeless_api::KinesisTrigger>(
                &config.namespace,
                &config.trigger,
                Some(config.trigger_uid.as_str()).filter(|u| !u.is_empty()),
            ),
        };
        let delivery = PairDelivery::with(
            shared.invoker.clone(),
            shared.events.clone(),
            &shared.runtime_metrics,
            &to,
        )
        .with_max_wait(shared.timing.max_backoff)
        .with_activity(shared.activity.clone());
        Self {
            kinesis,
            config,
            metrics: shared.metrics.clone(),
            delivery,
        }
    }

    /// Delivers `record` until it is done; `None` when `cancel` fired first (not done: it is
    /// read again from the checkpoint next time). `lane`: the shard reader's own function
    /// connections (its loop runs in `Lane::run`).
    pub async fn deliver(
        &self,
        record: &Record,
        cancel: &CancellationToken,
        lane: Option<&Lane<CallBody>>,
    ) -> Option<Finished> {
        let config = &*self.config;
        // Formatted only when the delivery fails: no allocation per record.
        let coordinates = At(&config.stream, record);
        let event = record.to_event(&config.stream);
        let dead_letter = |dlq: String, failure| {
            let letter = DeadLetter::new(config, record, failure);
            let put = serde_json::to_vec(&letter).map(|body| {
                self.kinesis
                    .put_record()
                    .stream_name(dlq)
                    .partition_key(&record.partition_key)
                    .data(Blob::new(body))
                    .send()
            });
            async move {
                match put {
                    Ok(send) => send.await.map(|_| ()).map_err(|e| crate::aws::describe(&e)),
                    Err(e) => Err(format!("encoding the dead letter: {e}")),
                }
            }
        };
        let done = (self.delivery)
            .deliver(lane, &event, &coordinates, "stream", cancel, dead_letter)
            .await?;
        Some(done.finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_carries_the_record_coordinates() {
        let r = Record {
            shard_id: "shardId-000000000001".into(),
            sequence_number: "4959".into(),
            partition_key: "user-7".into(),
            data: Bytes::from_static(br#"{"n":1}"#),
        };
        let e = r.to_event("orders");
        assert_eq!(e.event_namespace, EVENT_NAMESPACE);
        assert_eq!(e.event_id.as_deref(), Some("shardId-000000000001-4959"));
        assert_eq!(e.body.as_deref(), Some(&br#"{"n":1}"#[..]));
        let h = |n: &str| e.headers.get(n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(h(headers::STREAM).as_deref(), Some("orders"));
        assert_eq!(
            h(headers::SHARD_ID).as_deref(),
            Some("shardId-000000000001")
        );
        assert_eq!(h(headers::PARTITION_KEY).as_deref(), Some("user-7"));
        assert_eq!(h(headers::SEQUENCE_NUMBER).as_deref(), Some("4959"));

        // A partition key that is no valid header value is left out, not fatal.
        let odd = Record {
            partition_key: "a\nb".into(),
            ..r
        };
        let e = odd.to_event("orders");
        assert!(e.headers.get(headers::PARTITION_KEY).is_none());
    }

    #[test]
    fn dead_letter_round_trips_the_data() {
        let l = DeadLetter {
            stream: "s".into(),
            shard_id: "x".into(),
            sequence_number: "1".into(),
            partition_key: "k".into(),
            data: base64::engine::general_purpose::STANDARD.encode(b"\x00hello"),
            attempts: 3,
            last_status: Some(500),
            error: "status_5xx".into(),
            function: "ns/f".into(),
            trigger: "ns/t".into(),
        };
        let json = serde_json::to_string(&l).unwrap();
        assert!(json.contains("\"lastStatus\":500"), "{json}");
        let back: DeadLetter = serde_json::from_str(&json).unwrap();
        assert_eq!(back.original_data().unwrap(), b"\x00hello");
        assert_eq!(back, l);
    }
}
