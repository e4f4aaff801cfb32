//! Delivering one record: call the function through the shared invoker with the trigger's
//! retry policy; when retries are used up, produce the record to the dead-letter topic (and
//! wait for the broker's acknowledgement) or, without one, skip it loudly. Only then is the
//! record "done" and its offset may be committed.

use std::sync::Arc;
use std::time::Duration;

use kubeless_invoke::{CallBody, Invoker, Lane};
use kubeless_service::ThrottledEvents;
pub use kubeless_trigger::Finished;
use kubeless_trigger::deliver::Failure;
use kubeless_trigger::{Delivery, retry_policy};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use crate::metrics::ConsumerMetrics;
use crate::plan::ConsumerSpec;
use crate::record::Record;

/// Failure headers added to a dead-lettered record (next to its own headers).
pub mod dlq_headers {
    pub const TOPIC: &str = "kubeless-original-topic";
    pub const PARTITION: &str = "kubeless-original-partition";
    pub const OFFSET: &str = "kubeless-original-offset";
    pub const ATTEMPTS: &str = "kubeless-attempts";
    /// HTTP status of the last answer; absent when there was none (timeout, connection error).
    pub const LAST_STATUS: &str = "kubeless-last-status";
    pub const ERROR: &str = "kubeless-error";
    /// `<namespace>/<function>`.
    pub const FUNCTION: &str = "kubeless-function";
    /// `<namespace>/<trigger>`.
    pub const TRIGGER: &str = "kubeless-trigger";
}

/// Calls functions and writes dead letters. One per process.
pub struct Deliverer {
    pub invoker: Invoker,
    /// `None` only in tests that never dead-letter.
    pub producer: Option<FutureProducer>,
    /// Ceiling of the wait between dead-letter produce attempts and "function unavailable" rounds.
    pub max_wait: Duration,
    /// Warning Events on the trigger (DeliveryFailed, DeadLettered); `None` in tests without
    /// an API server.
    pub events: Option<ThrottledEvents>,
    /// Scale to zero: traffic records and wake-ups; `None` in benches.
    pub activity: Option<Arc<kubeless_invoke::Activity>>,
}

/// `record <topic>/<partition>@<offset>`, how logs and Events name a record (formatted only
/// when a delivery fails).
struct At<'a>(&'a Record);

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.0;
        write!(f, "record {}/{}@{}", r.topic, r.partition, r.offset)
    }
}

impl Deliverer {
    /// Delivers `record` until it is done; `None` when `cancel` fired first (not done: it will
    /// be redelivered by whoever consumes the partition next). `lane`: the calling task's own
    /// function connections (an ordered lane running in `Lane::run`).
    pub async fn deliver(
        &self,
        spec: &ConsumerSpec,
        record: &Record,
        cancel: &CancellationToken,
        metrics: &ConsumerMetrics,
        lane: Option<&Lane<CallBody>>,
    ) -> Option<Finished> {
        let event = record.to_event();
        let policy = retry_policy(&spec.policy);
        let delivery = Delivery {
            invoker: &self.invoker,
            target: &spec.target,
            policy: &policy,
            function: &spec.function,
            dead_letter: spec.dead_letter_topic.as_deref(),
            dead_letter_noun: "topic",
            regarding: self.events.as_ref().map(|e| (e, &spec.regarding)),
            max_wait: self.max_wait,
            activity: self.activity.as_ref(),
            lane,
        };
        let done = delivery
            .deliver(&event, &At(record), cancel, |topic, outcome| {
                self.dead_letter(topic, spec, record, outcome)
            })
            .await?;
        metrics.retries.inc_by(done.retries);
        Some(done.finished)
    }

    /// Produces the failed record to `topic` and waits for the broker's acknowledgement.
    async fn dead_letter(
        &self,
        topic: String,
        spec: &ConsumerSpec,
        record: &Record,
        failure: Failure,
    ) -> Result<(), String> {
        let Some(producer) = &self.producer else {
            return Err("no dead-letter producer configured".into());
        };
        let Failure {
            attempts, error, ..
        } = failure;
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 8);
        for (k, v) in &record.headers {
            headers = headers.insert(Header {
                key: k.as_str(),
                value: v.as_deref(),
            });
        }
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let attempts = attempts.to_string();
        let status = failure.status.map(|s| s.to_string());
        let function = format!("{}/{}", spec.namespace, spec.function);
        let trigger = format!("{}/{}", spec.namespace, spec.trigger);
        let mut add = |k: &str, v: &str| {
            let h = std::mem::take(&mut headers);
            headers = h.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        };
        add(dlq_headers::TOPIC, &record.topic);
        add(dlq_headers::PARTITION, &partition);
        add(dlq_headers::OFFSET, &offset);
        add(dlq_headers::ATTEMPTS, &attempts);
        if let Some(s) = &status {
            add(dlq_headers::LAST_STATUS, s);
        }
        add(dlq_headers::ERROR, &error);
        add(dlq_headers::FUNCTION, &function);
        add(dlq_headers::TRIGGER, &trigger);
        let mut fr: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic).headers(headers);
        if let Some(k) = record.key.as_deref() {
            fr = fr.key(k);
        }
        if let Some(p) = record.payload.as_deref() {
            fr = fr.payload(p);
        }
        if let Some(ts) = record.timestamp_ms {
            fr = fr.timestamp(ts);
        }
        producer
            .send(fr, Duration::from_secs(30))
            .await
            .map(|_| ())
            .map_err(|(e, _)| e.to_string())
    }
}
