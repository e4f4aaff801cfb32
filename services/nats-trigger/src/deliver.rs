//! What happens to one message: build the Kubeless event, call the function, then reply,
//! ack/nak, or dead-letter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap as NatsHeaders;
use async_nats::jetstream::AckKind;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use kubeless_api::NatsTrigger;
use kubeless_api::conditions::reasons;
use kubeless_invoke::{Activity, Class, Event, Invoker, Outcome, RetryPolicy};
use kubeless_service::ThrottledEvents;

use crate::plan::{SubscriptionConfig, SubscriptionKey};
use kubeless_trigger::PairMetrics;
use kubeless_trigger::deliver::last_answer;

/// How often a held message reports progress (JetStream ack waits are at least a second, and
/// 30 s by default).
const HOLD_STEP: Duration = Duration::from_secs(5);
/// Pause before calling again a function with scale to zero whose endpoint was gone.
const UNAVAILABLE_PAUSE: Duration = Duration::from_millis(100);

/// `event-namespace` of every event this service sends (Kubeless's value).
pub const EVENT_NAMESPACE: &str = "natstriggers.kubeless.io";
/// The subject the message was published on (wildcards resolved).
pub const EVENT_TOPIC: HeaderName = HeaderName::from_static("event-topic");

/// Reply / dead-letter header: the function's HTTP status (empty when it gave none).
pub const STATUS_HEADER: &str = "Kubeless-Status";
/// Reply / dead-letter header: why the call failed (a stable label, e.g. `status_5xx`, `timeout`).
pub const ERROR_HEADER: &str = "Kubeless-Error";
/// Reply / dead-letter header: the `event-id` the function saw.
pub const EVENT_ID_HEADER: &str = "Kubeless-Event-Id";
/// Dead-letter header: the subject the message came from.
pub const ORIGINAL_SUBJECT_HEADER: &str = "Kubeless-Original-Subject";
/// Dead-letter header: how many attempts were made.
pub const ATTEMPTS_HEADER: &str = "Kubeless-Attempts";
/// Dead-letter header: `<namespace>/<trigger>`.
pub const TRIGGER_HEADER: &str = "Kubeless-Trigger";
/// Dead-letter header: the function that failed.
pub const FUNCTION_HEADER: &str = "Kubeless-Function";

/// NATS headers that must not become HTTP request headers: hop-by-hop, framing, or set by the
/// invoker itself.
const SKIPPED_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// Everything a subscription's message handler needs; cheap to clone.
#[derive(Clone)]
pub struct Deliverer {
    pub key: Arc<SubscriptionKey>,
    pub config: Arc<SubscriptionConfig>,
    pub invoker: Invoker,
    pub nats: async_nats::Client,
    pub metrics: PairMetrics,
    retry: RetryPolicy,
    /// Warning Events on the trigger (DeliveryFailed, DeadLettered); `None`: none published.
    events: Option<ThrottledEvents>,
    /// Scale to zero: traffic records, and holding messages for a function being woken.
    activity: Option<Arc<Activity>>,
}

impl Deliverer {
    pub fn new(
        key: Arc<SubscriptionKey>,
        config: Arc<SubscriptionConfig>,
        invoker: Invoker,
        nats: async_nats::Client,
        metrics: PairMetrics,
    ) -> Self {
        let retry = kubeless_trigger::retry_policy(&config.policy);
        Self {
            key,
            config,
            invoker,
            nats,
            metrics,
            retry,
            events: None,
            activity: None,
        }
    }

    /// Records traffic and holds messages while the function scales up from zero.
    pub fn with_activity(mut self, activity: Arc<Activity>) -> Self {
        self.activity = Some(activity);
        self
    }

    /// Waits while the function is at zero or waking (it has scale to zero on and no ready
    /// replica), at most `limit`; `progress` is called every few seconds meanwhile (a
    /// JetStream message reports progress, so its ack wait does not run out). Attempts are not
    /// spent while holding.
    async fn hold<F, Fut>(&self, limit: Option<Duration>, progress: &mut F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let Some(a) = &self.activity else { return };
        let (ns, name) = (&self.config.target.namespace, &self.config.target.name);
        let started = Instant::now();
        while a.note(ns, name) {
            let step =
                HOLD_STEP.min(limit.map_or(HOLD_STEP, |l| l.saturating_sub(started.elapsed())));
            if step.is_zero() {
                return;
            }
            if a.wait_ready(ns, name, step).await.is_err() {
                progress().await;
            }
        }
    }

    /// Publishes DeliveryFailed and DeadLettered Events on the trigger through `events`.
    pub fn with_events(mut self, events: ThrottledEvents) -> Self {
        self.events = Some(events);
        self
    }

    /// A Warning Event on the trigger, rate-limited per trigger and reason.
    fn warn(&self, reason: &'static str, action: &'static str, note: String) {
        if let Some(events) = &self.events {
            let regarding = kubeless_service::object_reference::<NatsTrigger>(
                &self.key.namespace,
                &self.key.trigger,
                self.config.trigger_uid.as_deref(),
            );
            events.warning(&regarding, reason, action, note);
        }
    }

    /// DeliveryFailed: the message at `coordinates` failed its last attempt; says what happens
    /// to it next.
    fn warn_failed(&self, coordinates: &str, outcome: &Outcome, next: &str) {
        self.warn(
            reasons::DELIVERY_FAILED,
            "Deliver",
            format!(
                "function {} failed on message {coordinates} after {} attempt(s) ({}); {next}",
                self.key.function,
                outcome.attempts,
                last_answer(outcome),
            ),
        );
    }

    /// What happens to a message that failed for good.
    fn fate(&self) -> String {
        match &self.config.dead_letter_subject {
            Some(dl) => format!("sending it to the dead-letter subject {dl}"),
            None => "the trigger has no deadLetterSubject: message dropped".into(),
        }
    }

    /// Calls the function (through `retry`, or once), holding first while it is at zero or
    /// waking. A function with scale to zero whose endpoint is gone (it is scaling down and this
    /// trigger has not seen it yet) is held and called again rather than failed: nothing reached
    /// it. `limit` bounds the whole wait (a request's caller), `progress` runs while holding.
    async fn call_held<F, Fut>(
        &self,
        event: &Event,
        limit: Option<Duration>,
        retry: Option<&RetryPolicy>,
        mut progress: F,
    ) -> Outcome
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let started = Instant::now();
        let target = &self.config.target;
        loop {
            let left = limit.map(|l| l.saturating_sub(started.elapsed()));
            self.hold(left, &mut progress).await;
            let outcome = match retry {
                Some(p) => self.invoker.invoke_with_retry(target, event, p).await,
                None => self.invoker.invoke(target, event).await,
            };
            let held = self.activity.as_ref().is_some_and(|a| {
                a.state(&target.namespace, &target.name) != kubeless_api::scale::ScaleState::Off
            });
            let in_time = limit.is_none_or(|l| started.elapsed() < l);
            if !(held && in_time && kubeless_trigger::deliver::function_unavailable(&outcome)) {
                return outcome;
            }
            // Let the Function watch catch up with the scale-down (or the wake).
            tokio::time::sleep(UNAVAILABLE_PAUSE).await;
        }
    }

    /// A core NATS message. A request (reply subject set) gets one attempt and the answer is
    /// sent back, because its caller is waiting and retries itself. Other messages are retried
    /// in process per the trigger's policy, then dead-lettered.
    pub async fn core(&self, msg: async_nats::Message) {
        let started = Instant::now();
        self.metrics.in_flight.inc();
        let event = build_event(
            &msg.subject,
            msg.headers.as_ref(),
            msg.payload.clone(),
            None,
        );
        match msg.reply.clone() {
            Some(reply) => {
                // The caller waits at most about the function's timeout.
                let limit = Some(self.config.target.timeout);
                let outcome = self.call_held(&event, limit, None, || async {}).await;
                if let Err(e) = self.reply(reply, &outcome).await {
                    tracing::warn!(subscription = %self.key, error = %e, "sending the reply failed");
                }
                if outcome.is_success() {
                    self.metrics.success.inc();
                } else {
                    // The caller got the error; nothing is dead-lettered.
                    self.metrics.failed.inc();
                }
            }
            None => {
                let outcome = self
                    .call_held(&event, None, Some(&self.retry), || async {})
                    .await;
                self.metrics
                    .retry
                    .inc_by(u64::from(outcome.attempts.saturating_sub(1)));
                if outcome.is_success() {
                    self.metrics.success.inc();
                } else {
                    log_failure(&self.key, &outcome);
                    let coordinates = format!("on subject {}", msg.subject);
                    self.warn_failed(&coordinates, &outcome, &self.fate());
                    self.dead_letter_or_drop(
                        &msg.subject,
                        msg.headers.as_ref(),
                        &msg.payload,
                        &outcome,
                        &coordinates,
                    )
                    .await;
                }
            }
        }
        self.metrics
            .latency
            .observe(started.elapsed().as_secs_f64());
        self.metrics.in_flight.dec();
    }

    /// A JetStream message: one attempt per delivery. 2xx acks; a retryable failure naks with
    /// the policy's backoff; the last attempt (or a permanent failure) dead-letters and
    /// terminates. JetStream messages are never request/reply: their reply subject is the ack
    /// subject.
    pub async fn jetstream(&self, msg: async_nats::jetstream::Message) {
        let started = Instant::now();
        self.metrics.in_flight.inc();
        let (delivered, event_id, coordinates) = match msg.info() {
            Ok(info) => (
                u32::try_from(info.delivered).unwrap_or(1).max(1),
                Some(format!("{}-{}", info.stream, info.stream_sequence)),
                format!(
                    "on subject {} (stream {} sequence {})",
                    msg.subject, info.stream, info.stream_sequence
                ),
            ),
            Err(_) => (1, None, format!("on subject {}", msg.subject)),
        };
        let max = self.config.policy.max_attempts;
        let event = build_event(
            &msg.subject,
            msg.headers.as_ref(),
            msg.payload.clone(),
            event_id,
        );
        let ack = if delivered > max {
            // The process died during the last attempt: do not call again, dead-letter it.
            let outcome = Outcome {
                event_id: event.event_id.clone().unwrap_or_default(),
                status: None,
                body: Bytes::new(),
                latency: Default::default(),
                elapsed: Default::default(),
                attempts: delivered,
                endpoint: None,
                error: None,
            };
            self.final_failure(&msg, &outcome, max, &coordinates).await
        } else {
            let progress = || async {
                if let Err(e) = msg.ack_with(AckKind::Progress).await {
                    tracing::debug!(subscription = %self.key, error = %e, "reporting progress while the function wakes");
                }
            };
            let mut outcome = self.call_held(&event, None, None, progress).await;
            outcome.attempts = delivered;
            match outcome.class() {
                Class::Success => {
                    self.metrics.success.inc();
                    AckKind::Ack
                }
                Class::Retryable if delivered < max => {
                    self.metrics.retry.inc();
                    tracing::debug!(subscription = %self.key, delivered, error = ?outcome.error, "function failed; nak");
                    AckKind::Nak(Some(self.config.policy.backoff(delivered)))
                }
                _ => {
                    log_failure(&self.key, &outcome);
                    self.final_failure(&msg, &outcome, max, &coordinates).await
                }
            }
        };
        if let Err(e) = msg.ack_with(ack).await {
            // The server redelivers after the ack wait; at least once still holds.
            tracing::warn!(subscription = %self.key, error = %e, "acknowledging a message failed");
        }
        self.metrics
            .latency
            .observe(started.elapsed().as_secs_f64());
        self.metrics.in_flight.dec();
    }

    /// Dead-letters (when configured) and returns Term, or Nak when the dead-letter publish
    /// failed so the message is not lost.
    async fn final_failure(
        &self,
        msg: &async_nats::jetstream::Message,
        outcome: &Outcome,
        max: u32,
        coordinates: &str,
    ) -> AckKind {
        self.warn_failed(coordinates, outcome, &self.fate());
        if self.config.dead_letter_subject.is_none() {
            self.metrics.failed.inc();
            return AckKind::Term;
        }
        if self
            .dead_letter_or_drop(
                &msg.subject,
                msg.headers.as_ref(),
                &msg.payload,
                outcome,
                coordinates,
            )
            .await
        {
            AckKind::Term
        } else {
            AckKind::Nak(Some(self.config.policy.backoff(max)))
        }
    }

    /// Publishes the failed message to the dead-letter subject with headers describing the
    /// failure, and flushes so the server has it. Returns false when that failed.
    async fn dead_letter_or_drop(
        &self,
        subject: &async_nats::Subject,
        headers: Option<&NatsHeaders>,
        payload: &Bytes,
        outcome: &Outcome,
        coordinates: &str,
    ) -> bool {
        let Some(dl) = &self.config.dead_letter_subject else {
            self.metrics.failed.inc();
            return true;
        };
        let mut h = headers.cloned().unwrap_or_default();
        h.insert(ORIGINAL_SUBJECT_HEADER, subject.as_str());
        h.insert(ATTEMPTS_HEADER, outcome.attempts.to_string().as_str());
        h.insert(
            STATUS_HEADER,
            outcome
                .status
                .map(|s| s.as_u16().to_string())
                .unwrap_or_default()
                .as_str(),
        );
        h.insert(
            ERROR_HEADER,
            outcome
                .error
                .as_ref()
                .map_or("retries_exhausted", |e| e.metric_label()),
        );
        h.insert(EVENT_ID_HEADER, outcome.event_id.as_str());
        h.insert(
            TRIGGER_HEADER,
            format!("{}/{}", self.key.namespace, self.key.trigger).as_str(),
        );
        h.insert(FUNCTION_HEADER, self.key.function.as_str());
        let published = async {
            self.nats
                .publish_with_headers(dl.clone(), h, payload.clone())
                .await
                .map_err(|e| e.to_string())?;
            self.nats.flush().await.map_err(|e| e.to_string())
        }
        .await;
        match published {
            Ok(()) => {
                self.metrics.dead_letter.inc();
                self.warn(
                    reasons::DEAD_LETTERED,
                    "DeadLetter",
                    format!(
                        "message {coordinates} sent to the dead-letter subject {dl} (function {}, \
                         {} attempt(s), {})",
                        self.key.function,
                        outcome.attempts,
                        last_answer(outcome),
                    ),
                );
                true
            }
            Err(e) => {
                tracing::warn!(subscription = %self.key, dead_letter = %dl, error = %e, "dead-lettering failed");
                self.metrics.failed.inc();
                false
            }
        }
    }

    /// Sends the function's answer to a request's reply subject: its body, with the HTTP status
    /// in `Kubeless-Status` (502 when no answer came, 504 on timeout) and the failure label in
    /// `Kubeless-Error`.
    async fn reply(
        &self,
        reply: async_nats::Subject,
        outcome: &Outcome,
    ) -> Result<(), async_nats::PublishError> {
        let mut h = NatsHeaders::new();
        let status = outcome
            .status
            .map(|s| s.as_u16())
            .unwrap_or_else(|| match &outcome.error {
                Some(kubeless_invoke::InvokeError::Timeout { .. }) => 504,
                _ => 502,
            });
        h.insert(STATUS_HEADER, status.to_string().as_str());
        h.insert(EVENT_ID_HEADER, outcome.event_id.as_str());
        if let Some(e) = &outcome.error {
            h.insert(ERROR_HEADER, e.metric_label());
        }
        self.nats
            .publish_with_headers(reply, h, outcome.body.clone())
            .await
    }
}

fn log_failure(key: &SubscriptionKey, outcome: &Outcome) {
    tracing::warn!(
        subscription = %key,
        event_id = %outcome.event_id,
        attempts = outcome.attempts,
        status = outcome.status.map(|s| s.as_u16()),
        error = outcome.error.as_ref().map(|e| e.metric_label()),
        "delivery failed after the last attempt"
    );
}

/// The Kubeless event for a NATS message: the payload as a POST body, `event-topic` = the
/// subject, and every NATS header that is a valid HTTP header passed on as-is (hop-by-hop and
/// framing headers are dropped). `Content-Type` from the NATS headers is used for non-JSON
/// bodies. Pure.
pub fn build_event(
    subject: &str,
    headers: Option<&NatsHeaders>,
    payload: Bytes,
    event_id: Option<String>,
) -> Event {
    let mut event = Event::new(EVENT_NAMESPACE).with_body(payload);
    if let Some(id) = event_id {
        event = event.with_event_id(id);
    }
    if let Some(headers) = headers {
        for (name, values) in headers.iter() {
            let name_str: &str = name.as_ref();
            let Ok(http_name) = HeaderName::from_bytes(name_str.as_bytes()) else {
                continue;
            };
            if SKIPPED_HEADERS.contains(&http_name.as_str()) {
                continue;
            }
            if http_name == http::header::CONTENT_TYPE {
                if let Some(v) = values.last() {
                    event = event.with_content_type(v.as_str());
                }
                continue;
            }
            for v in values {
                if let Ok(value) = HeaderValue::from_str(v.as_str()) {
                    event.headers.append(http_name.clone(), value);
                }
            }
        }
    }
    if let Ok(topic) = HeaderValue::from_str(subject) {
        event.headers.insert(EVENT_TOPIC, topic);
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_carries_topic_namespace_and_headers() {
        let mut h = NatsHeaders::new();
        h.insert("X-Trace", "abc");
        h.append("X-Multi", "1");
        h.append("X-Multi", "2");
        h.insert("Content-Type", "text/csv");
        h.insert("Content-Length", "99");
        h.insert("event-topic", "spoofed");
        let e = build_event(
            "orders.eu",
            Some(&h),
            Bytes::from_static(b"a,b"),
            Some("S-7".into()),
        );
        assert_eq!(e.event_namespace, "natstriggers.kubeless.io");
        assert_eq!(e.event_id.as_deref(), Some("S-7"));
        assert_eq!(e.body.as_deref(), Some(&b"a,b"[..]));
        assert_eq!(e.content_type.as_deref(), Some("text/csv"));
        assert_eq!(e.headers.get("x-trace").unwrap(), "abc");
        let multi: Vec<_> = e.headers.get_all("x-multi").iter().collect();
        assert_eq!(multi.len(), 2);
        assert!(e.headers.get("content-length").is_none());
        assert!(e.headers.get("content-type").is_none());
        assert_eq!(e.headers.get("event-topic").unwrap(), "orders.eu");

        // The invoker's headers: Kubeless's event-* set, body sent as POST.
        let built =
            kubeless_invoke::event::event_headers(&e, "S-7", std::time::SystemTime::now().into())
                .unwrap();
        assert_eq!(
            built.get("event-namespace").unwrap(),
            "natstriggers.kubeless.io"
        );
        assert_eq!(built.get("content-type").unwrap(), "text/csv");
        assert_eq!(built.get("x-trace").unwrap(), "abc");
    }

    #[test]
    fn json_payload_without_headers() {
        let e = build_event("a", None, Bytes::from_static(br#"{"k":1}"#), None);
        assert!(e.event_id.is_none());
        let built =
            kubeless_invoke::event::event_headers(&e, "id", std::time::SystemTime::now().into())
                .unwrap();
        assert_eq!(built.get("content-type").unwrap(), "application/json");
        assert_eq!(built.get("event-type").unwrap(), "application/json");
    }
}
