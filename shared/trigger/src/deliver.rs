//! One event to one function, the way every trigger delivers: the trigger's retry policy with
//! equal jitter, holding (not failing) while the function has no endpoint, then a Warning
//! Event and the dead letters (or a skip when the trigger names none). The dead-letter write
//! is the broker's; it is retried with backoff until it lands or the delivery is cancelled,
//! so a failed event is never lost in between.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kubeless_api::DeliveryPolicy;
use kubeless_api::conditions::reasons;
use kubeless_invoke::{
    Activity, Event, FunctionTarget, InvokeError, Invoker, Jitter, Outcome, ResolveError,
    RetryPolicy,
};
use kubeless_service::ThrottledEvents;
use tokio_util::sync::CancellationToken;

use crate::metrics::{PairMetrics, TriggerMetrics, outcome};
use crate::service::Parts;

/// Pause before the next round for a function with scale to zero whose endpoint was gone.
const UNAVAILABLE_PAUSE: Duration = Duration::from_millis(100);
/// First wait between dead-letter write attempts.
const DEAD_LETTER_FIRST_WAIT: Duration = Duration::from_millis(500);

/// How an event finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Delivered,
    DeadLettered,
    /// Failed and the trigger has no dead-letter destination: the source moves on.
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
/// not the event's fault, so it is not dead-lettered: delivery waits, keeping order.
pub fn function_unavailable(o: &Outcome) -> bool {
    matches!(
        o.error,
        Some(InvokeError::Resolve(ResolveError::NoEndpoints { .. }))
            | Some(InvokeError::Connect { .. })
    )
}

/// `<metric label>: <error>` of a failed outcome ("" when it has an HTTP answer only).
pub fn error_text(o: &Outcome) -> String {
    o.error
        .as_ref()
        .map(|e| format!("{}: {e}", e.metric_label()))
        .unwrap_or_default()
}

/// What the function last answered, for messages: its status, the error, or both.
pub fn last_answer(o: &Outcome) -> String {
    let error = o
        .error
        .as_ref()
        .map(|e| format!("{}: {e}", e.metric_label()));
    match (o.status, error) {
        (Some(s), None) => format!("status {}", s.as_u16()),
        (Some(s), Some(e)) => format!("status {}, {e}", s.as_u16()),
        (None, Some(e)) => e,
        (None, None) => "no answer: the process died during the last attempt".into(),
    }
}

/// Where one (trigger, function) pair delivers, and how.
pub struct Delivery<'a> {
    pub invoker: &'a Invoker,
    pub target: &'a FunctionTarget,
    pub policy: &'a RetryPolicy,
    /// The function's name (the Events are in its namespace), for messages.
    pub function: &'a str,
    /// The dead-letter destination (topic, subject, stream); `None`: failed events are skipped.
    pub dead_letter: Option<&'a str>,
    /// What the destination is called in messages ("topic", "stream").
    pub dead_letter_noun: &'static str,
    /// The trigger, which Warning Events name; `None`: no Events (benches).
    pub regarding: Option<(&'a ThrottledEvents, &'a ObjectReference)>,
    /// Ceiling of the wait between "function unavailable" rounds and dead-letter attempts.
    pub max_wait: Duration,
    /// Functions that scale to zero: traffic is recorded, and an event for a function with no
    /// ready replica waits for it (waking it) without spending attempts. `None`: benches.
    pub activity: Option<&'a Arc<Activity>>,
    /// The calling task's own function connections ([`kubeless_invoke::Lane`]), for a source
    /// that delivers one event at a time and runs its loop in `Lane::run`; `None`: the shared
    /// pool.
    pub lane: Option<&'a kubeless_invoke::Lane<kubeless_invoke::CallBody>>,
}

/// Why an event goes to the dead letters, for the broker's dead-letter record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub attempts: u32,
    /// HTTP status of the last answer; `None` when there was none (timeout, connection error).
    pub status: Option<u16>,
    /// `<metric label>: <error>` ("" when the function answered with an error status).
    pub error: String,
}

/// What [`Delivery::deliver`] did.
#[derive(Debug)]
pub struct Delivered {
    pub finished: Finished,
    /// Failed attempts that were retried (for the `retry` count).
    pub retries: u64,
}

impl Delivery<'_> {
    /// Delivers `event` until it is done; `None` when `cancel` fired first (not done: the
    /// source delivers it again later). `coordinates` names the event in logs and Events (it is
    /// formatted only when something goes wrong, so the success path allocates nothing for it)
    /// (`topic/partition@offset`); `dead_letter` writes the failed event to the destination.
    pub async fn deliver<F, Fut>(
        &self,
        event: &Event,
        coordinates: &(dyn std::fmt::Display + Sync),
        cancel: &CancellationToken,
        mut dead_letter: F,
    ) -> Option<Delivered>
    where
        F: FnMut(String, Failure) -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let mut retries = 0u64;
        let mut unavailable_rounds = 0u32;
        let outcome = loop {
            if let Some(a) = self.activity {
                let (ns, name) = (&self.target.namespace, &self.target.name);
                if a.note(ns, name) {
                    // At zero or waking: hold, without spending attempts, until a replica is
                    // ready (the wait renews the wake-up), then go round again.
                    tokio::select! {
                        _ = a.wait_ready(ns, name, self.max_wait) => {}
                        _ = cancel.cancelled() => return None,
                    }
                    continue;
                }
            }
            let o = tokio::select! {
                o = self.invoker.invoke_with_retry_in(self.lane, self.target, event, self.policy) => o,
                _ = cancel.cancelled() => return None,
            };
            retries += u64::from(o.attempts.saturating_sub(1));
            if o.is_success() {
                return Some(Delivered {
                    finished: Finished::Delivered,
                    retries,
                });
            }
            if !function_unavailable(&o) {
                break o;
            }
            if let Some(a) = self.activity
                && a.state(&self.target.namespace, &self.target.name)
                    != kubeless_api::scale::ScaleState::Off
            {
                // Scale to zero: the function is scaling down (or waking) and this trigger has
                // not seen it yet. Nothing reached it; the next round holds for the wake.
                tokio::select! {
                    _ = tokio::time::sleep(UNAVAILABLE_PAUSE) => {}
                    _ = cancel.cancelled() => return None,
                }
                continue;
            }
            unavailable_rounds += 1;
            if unavailable_rounds == 1 || unavailable_rounds.is_multiple_of(10) {
                tracing::warn!(
                    function = %self.function, event = %coordinates,
                    error = o.error.as_ref().map(|e| e.to_string()),
                    "function unavailable; holding the event until it answers"
                );
            }
            let wait = self
                .policy
                .base_backoff(unavailable_rounds)
                .min(self.max_wait);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = cancel.cancelled() => return None,
            }
        };
        let answer = last_answer(&outcome);
        let noun = self.dead_letter_noun;
        let fate = match self.dead_letter {
            Some(dlq) => format!("it goes to the dead-letter {noun} {dlq}"),
            None => format!("the trigger has no dead-letter {noun}: it is skipped"),
        };
        self.warn(
            reasons::DELIVERY_FAILED,
            "Deliver",
            format!(
                "function {} failed on {coordinates} after {} attempt(s) ({answer}); {fate}",
                self.function, outcome.attempts,
            ),
        );
        let Some(dlq) = self.dead_letter else {
            tracing::error!(
                function = %self.function, event = %coordinates, attempts = outcome.attempts,
                error = %answer, "delivery failed and the trigger has no dead letters: SKIPPED"
            );
            return Some(Delivered {
                finished: Finished::Skipped,
                retries,
            });
        };
        let failure = Failure {
            attempts: outcome.attempts,
            status: outcome.status.map(|s| s.as_u16()),
            error: error_text(&outcome),
        };
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let put = tokio::select! {
                r = dead_letter(dlq.to_string(), failure.clone()) => r,
                _ = cancel.cancelled() => return None,
            };
            match put {
                Ok(()) => {
                    tracing::warn!(
                        function = %self.function, event = %coordinates,
                        attempts = outcome.attempts, error = %answer, dead_letter = dlq,
                        "delivery failed; event written to the dead letters"
                    );
                    self.warn(
                        reasons::DEAD_LETTERED,
                        "DeadLetter",
                        format!(
                            "{coordinates} written to the dead-letter {noun} {dlq} (function {}, \
                             {} attempt(s), {answer})",
                            self.function, outcome.attempts,
                        ),
                    );
                    return Some(Delivered {
                        finished: Finished::DeadLettered,
                        retries,
                    });
                }
                Err(e) => tracing::error!(
                    function = %self.function, event = %coordinates, dead_letter = dlq,
                    attempt, error = %e,
                    "writing the dead letter failed; retrying (the source waits)"
                ),
            }
            let wait = kubeless_api::delivery::exponential_backoff(
                DEAD_LETTER_FIRST_WAIT,
                2.0,
                self.max_wait,
                attempt.saturating_add(1),
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }

    fn warn(&self, reason: &'static str, action: &'static str, note: String) {
        if let Some((events, regarding)) = self.regarding {
            events.warning(regarding, reason, action, note);
        }
    }
}

/// Where and how a unit delivers, as its plan gives it (a change restarts the unit).
#[derive(Clone, Debug, PartialEq)]
pub struct Destination {
    pub target: FunctionTarget,
    pub policy: DeliveryPolicy,
    /// The dead-letter destination (stream, topic, subject); `None`: failed events are skipped.
    pub dead_letter: Option<String>,
    /// The trigger, which Events and metrics name.
    pub trigger: ObjectReference,
}

/// One unit's delivery: [`Delivery`] for its (trigger, function) pair, with the pair's metrics
/// (in flight, retries, outcome, latency) counted around each event.
pub struct PairDelivery {
    pub to: Destination,
    pub policy: RetryPolicy,
    pub metrics: PairMetrics,
    invoker: Invoker,
    events: ThrottledEvents,
    max_wait: Duration,
    activity: Option<Arc<Activity>>,
}

impl PairDelivery {
    /// From the parts [`serve`](crate::serve) gives a source.
    pub fn new(parts: &Parts, to: &Destination) -> Self {
        let mut d = Self::with(
            parts.invoker.clone(),
            parts.events.clone(),
            &parts.metrics,
            to,
        );
        d.activity = Some(Arc::clone(&parts.activity));
        d
    }

    /// From an invoker, Events and metrics of the service's own making.
    pub fn with(
        invoker: Invoker,
        events: ThrottledEvents,
        metrics: &TriggerMetrics,
        to: &Destination,
    ) -> Self {
        let (ns, name) = (&to.target.namespace, &to.target.name);
        let trigger = format!("{ns}/{}", to.trigger.name.as_deref().unwrap_or_default());
        Self {
            policy: retry_policy(&to.policy),
            metrics: metrics.pair(&trigger, name),
            to: to.clone(),
            invoker,
            events,
            max_wait: Duration::from_secs(30),
            activity: None,
        }
    }

    /// Records traffic and holds events for functions that scale to zero (`None`: never).
    pub fn with_activity(mut self, activity: Option<Arc<Activity>>) -> Self {
        self.activity = activity;
        self
    }

    /// Caps the wait between "function unavailable" rounds and dead-letter attempts (30 s).
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// [`Delivery::deliver`] of `event` (`at` names it in logs and Events; the dead-letter
    /// destination is a `noun`), counted in the pair's metrics. `lane`: the calling task's own
    /// function connections, for a source that delivers one event at a time and runs its loop
    /// in [`kubeless_invoke::Lane::run`]; `None`: the invoker's pool.
    pub async fn deliver<F, Fut>(
        &self,
        lane: Option<&kubeless_invoke::Lane<kubeless_invoke::CallBody>>,
        event: &Event,
        at: &(dyn std::fmt::Display + Sync),
        noun: &'static str,
        cancel: &CancellationToken,
        dead_letter: F,
    ) -> Option<Delivered>
    where
        F: FnMut(String, Failure) -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let delivery = Delivery {
            invoker: &self.invoker,
            target: &self.to.target,
            policy: &self.policy,
            function: &self.to.target.name,
            dead_letter: self.to.dead_letter.as_deref(),
            dead_letter_noun: noun,
            regarding: Some((&self.events, &self.to.trigger)),
            max_wait: self.max_wait,
            activity: self.activity.as_ref(),
            lane,
        };
        let (started, pair) = (Instant::now(), &self.metrics);
        pair.in_flight.inc();
        let done = delivery.deliver(event, at, cancel, dead_letter).await;
        pair.in_flight.dec();
        let done = done?;
        pair.retry.inc_by(done.retries);
        pair.latency.observe(started.elapsed().as_secs_f64());
        pair.outcome(match done.finished {
            Finished::Delivered => outcome::SUCCESS,
            Finished::DeadLettered => outcome::DEAD_LETTER,
            Finished::Skipped => outcome::SKIPPED,
        })
        .inc();
        Some(done)
    }
}
