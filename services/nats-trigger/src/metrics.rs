//! Metrics under `kubeless_nats_trigger_*`, labelled by trigger (`<ns>/<name>`) and function.
//! Each subscription resolves its label sets once ([`SubscriptionMetrics`]), so the message path
//! only bumps atomics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

type PairLabels = [(&'static str, String); 2];
type OutcomeLabels = [(&'static str, String); 3];

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ])
}

/// Delivery outcomes, the `outcome` label.
pub mod outcome {
    /// The function answered 2xx (and the message was acked / the reply sent).
    pub const SUCCESS: &str = "success";
    /// A failed attempt that will be tried again (in-process retry or JetStream nak).
    pub const RETRY: &str = "retry";
    /// Retries used up (or a permanent failure); the message went to the dead-letter subject.
    pub const DEAD_LETTER: &str = "dead_letter";
    /// Retries used up and no dead-letter subject (or publishing there failed): dropped.
    pub const FAILED: &str = "failed";
}

/// Process-wide metric families.
#[derive(Clone)]
pub struct TriggerMetrics {
    deliveries: Family<OutcomeLabels, Counter>,
    latency: Family<PairLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<PairLabels, Gauge>,
    /// Subscriptions currently running.
    pub subscriptions: Gauge,
    /// Status writes by result (`ok`, `error`).
    pub status_writes: Family<[(&'static str, &'static str); 1], Counter>,
}

impl TriggerMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self {
            deliveries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
            subscriptions: Gauge::default(),
            status_writes: Family::default(),
        };
        metrics.register_with("nats_trigger", |r| {
            r.register(
                "deliveries",
                "Messages handled, by trigger, function and outcome (success, retry, dead_letter, failed)",
                m.deliveries.clone(),
            );
            r.register(
                "delivery_seconds",
                "Time from receiving a message to its final outcome for this delivery (retries included)",
                m.latency.clone(),
            );
            r.register(
                "in_flight",
                "Function calls in progress",
                m.in_flight.clone(),
            );
            r.register(
                "subscriptions",
                "(trigger, function) subscriptions running in this process",
                m.subscriptions.clone(),
            );
            r.register(
                "status_writes",
                "NATSTrigger status patches by result",
                m.status_writes.clone(),
            );
        });
        m
    }

    /// Handles for one (trigger, function) pair.
    pub fn subscription(&self, trigger: &str, function: &str) -> SubscriptionMetrics {
        let pair = || {
            [
                ("trigger", trigger.to_string()),
                ("function", function.to_string()),
            ]
        };
        let counter = |o: &str| {
            self.deliveries
                .get_or_create(&[
                    ("trigger", trigger.to_string()),
                    ("function", function.to_string()),
                    ("outcome", o.to_string()),
                ])
                .clone()
        };
        SubscriptionMetrics {
            success: counter(outcome::SUCCESS),
            retry: counter(outcome::RETRY),
            dead_letter: counter(outcome::DEAD_LETTER),
            failed: counter(outcome::FAILED),
            latency: self.latency.get_or_create(&pair()).clone(),
            in_flight: self.in_flight.get_or_create(&pair()).clone(),
        }
    }
}

/// Metric handles of one subscription.
#[derive(Clone)]
pub struct SubscriptionMetrics {
    pub success: Counter,
    pub retry: Counter,
    pub dead_letter: Counter,
    pub failed: Counter,
    pub latency: Histogram,
    pub in_flight: Gauge,
}

impl SubscriptionMetrics {
    /// Detached handles (benches and tests that do not export metrics).
    pub fn detached() -> Self {
        Self {
            success: Counter::default(),
            retry: Counter::default(),
            dead_letter: Counter::default(),
            failed: Counter::default(),
            latency: latency_histogram(),
            in_flight: Gauge::default(),
        }
    }
}
