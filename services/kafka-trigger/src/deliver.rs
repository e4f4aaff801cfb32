//! Delivering one record: call the function through the shared invoker with the trigger's
//! retry policy; when retries are used up, produce the record to the dead-letter topic (and
//! wait for the broker's acknowledgement) or, without one, skip it loudly. Only then is the
//! record "done" and its offset may be committed.

use std::time::Duration;

use kubeless_api::conditions::reasons;
use kubeless_api::{DeliveryPolicy, KafkaTrigger};
use kubeless_invoke::{InvokeError, Invoker, Jitter, Outcome, ResolveError, RetryPolicy};
use kubeless_service::ThrottledEvents;
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

/// How a record finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Delivered,
    DeadLettered,
    Skipped,
}

/// The trigger's policy as the invoker's (equal jitter, so replicas do not retry in step).
pub fn retry_policy(p: &DeliveryPolicy) -> RetryPolicy {
    RetryPolicy {
        max_attempts: p.max_attempts,
        initial_backoff: p.initial_backoff,
        max_backoff: p.max_backoff,
        multiplier: p.multiplier,
        jitter: Jitter::Equal,
    }
}

/// The function has no endpoint to take the call (no ready pod, connection refused). That is
/// not the record's fault, so it is not dead-lettered: delivery waits, keeping order.
fn function_unavailable(o: &Outcome) -> bool {
    matches!(
        o.error,
        Some(InvokeError::Resolve(ResolveError::NoEndpoints { .. }))
            | Some(InvokeError::Connect { .. })
    )
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
}

/// `topic/partition@offset`, how Events and logs name a record.
fn coordinates(record: &Record) -> String {
    format!("{}/{}@{}", record.topic, record.partition, record.offset)
}

/// What the last attempt got: its HTTP status when there was one, and the error.
fn last_answer(outcome: &Outcome, error: &str) -> String {
    match (outcome.status, error.is_empty()) {
        (Some(s), true) => format!("status {}", s.as_u16()),
        (Some(s), false) => format!("status {}, {error}", s.as_u16()),
        (None, false) => error.to_string(),
        (None, true) => "no answer".to_string(),
    }
}

impl Deliverer {
    /// Delivers `record` until it is done; `None` when `cancel` fired first (not done: it will
    /// be redelivered by whoever consumes the partition next).
    pub async fn deliver(
        &self,
        spec: &ConsumerSpec,
        record: &Record,
        cancel: &CancellationToken,
        metrics: &ConsumerMetrics,
    ) -> Option<Finished> {
        let event = record.to_event();
        let policy = retry_policy(&spec.policy);
        let mut unavailable_rounds = 0u32;
        let outcome = loop {
            let outcome = tokio::select! {
                o = self.invoker.invoke_with_retry(&spec.target, &event, &policy) => o,
                _ = cancel.cancelled() => return None,
            };
            if outcome.attempts > 1 {
                metrics.retries.inc_by(u64::from(outcome.attempts - 1));
            }
            if outcome.is_success() {
                return Some(Finished::Delivered);
            }
            if !function_unavailable(&outcome) {
                break outcome;
            }
            unavailable_rounds += 1;
            if unavailable_rounds == 1 || unavailable_rounds.is_multiple_of(10) {
                tracing::warn!(
                    group = %spec.group, partition = record.partition, offset = record.offset,
                    error = outcome.error.as_ref().map(|e| e.to_string()),
                    "function unavailable; holding the record until it answers"
                );
            }
            let wait = policy.base_backoff(unavailable_rounds).min(self.max_wait);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = cancel.cancelled() => return None,
            }
        };
        let error = outcome
            .error
            .as_ref()
            .map(|e| format!("{}: {e}", e.metric_label()))
            .unwrap_or_default();
        let answer = last_answer(&outcome, &error);
        let next = match spec.dead_letter_topic.as_deref() {
            Some(dlq) => format!("sending it to the dead-letter topic {dlq}"),
            None => "the trigger has no deadLetterTopic: record skipped".to_string(),
        };
        self.warn(
            spec,
            reasons::DELIVERY_FAILED,
            "Deliver",
            format!(
                "function {} failed on record {} after {} attempt(s) ({answer}); {next}",
                spec.function,
                coordinates(record),
                outcome.attempts,
            ),
        );
        let Some(dlq) = spec.dead_letter_topic.as_deref() else {
            tracing::error!(
                group = %spec.group, topic = %record.topic, partition = record.partition,
                offset = record.offset, attempts = outcome.attempts, %error,
                "delivery failed and the trigger has no deadLetterTopic: record SKIPPED"
            );
            return Some(Finished::Skipped);
        };
        let mut produce_attempt = 0u32;
        loop {
            produce_attempt += 1;
            match self
                .dead_letter(dlq, spec, record, &outcome, &error, cancel)
                .await
            {
                Some(Ok(())) => {
                    tracing::warn!(
                        group = %spec.group, partition = record.partition, offset = record.offset,
                        attempts = outcome.attempts, %error, dead_letter_topic = dlq,
                        "delivery failed; record sent to the dead-letter topic"
                    );
                    self.warn(
                        spec,
                        reasons::DEAD_LETTERED,
                        "DeadLetter",
                        format!(
                            "record {} sent to the dead-letter topic {dlq} (function {}, {} \
                             attempt(s), {answer})",
                            coordinates(record),
                            spec.function,
                            outcome.attempts,
                        ),
                    );
                    return Some(Finished::DeadLettered);
                }
                Some(Err(e)) => {
                    tracing::error!(
                        group = %spec.group, partition = record.partition, offset = record.offset,
                        dead_letter_topic = dlq, error = %e, attempt = produce_attempt,
                        "producing to the dead-letter topic failed; retrying (the partition waits)"
                    );
                }
                None => return None,
            }
            let wait = kubeless_api::delivery::exponential_backoff(
                Duration::from_millis(500),
                2.0,
                self.max_wait,
                produce_attempt.saturating_add(1),
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }

    /// A Warning Event on the trigger, rate-limited per trigger and reason.
    fn warn(&self, spec: &ConsumerSpec, reason: &'static str, action: &'static str, note: String) {
        if let Some(events) = &self.events {
            let regarding = kubeless_service::object_reference::<KafkaTrigger>(
                &spec.namespace,
                &spec.trigger,
                spec.trigger_uid.as_deref(),
            );
            events.warning(&regarding, reason, action, note);
        }
    }

    async fn dead_letter(
        &self,
        topic: &str,
        spec: &ConsumerSpec,
        record: &Record,
        outcome: &Outcome,
        error: &str,
        cancel: &CancellationToken,
    ) -> Option<Result<(), String>> {
        let Some(producer) = &self.producer else {
            return Some(Err("no dead-letter producer configured".into()));
        };
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 8);
        for (k, v) in &record.headers {
            headers = headers.insert(Header {
                key: k.as_str(),
                value: v.as_deref(),
            });
        }
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let attempts = outcome.attempts.to_string();
        let status = outcome.status.map(|s| s.as_u16().to_string());
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
        add(dlq_headers::ERROR, error);
        add(dlq_headers::FUNCTION, &function);
        add(dlq_headers::TRIGGER, &trigger);
        let mut fr: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(headers);
        if let Some(k) = record.key.as_deref() {
            fr = fr.key(k);
        }
        if let Some(p) = record.payload.as_deref() {
            fr = fr.payload(p);
        }
        if let Some(ts) = record.timestamp_ms {
            fr = fr.timestamp(ts);
        }
        let send = producer.send(fr, Duration::from_secs(30));
        tokio::select! {
            r = send => Some(r.map(|_| ()).map_err(|(e, _)| e.to_string())),
            _ = cancel.cancelled() => None,
        }
    }
}
