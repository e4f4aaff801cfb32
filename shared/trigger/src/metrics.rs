//! The metrics every trigger exports under `kubeless_<service>_*` (for example
//! `kubeless_nats_trigger_deliveries_total`): deliveries by trigger, function and outcome,
//! delivery time, calls in flight, running units and status writes. A unit resolves its label
//! sets once ([`PairMetrics`]), so the message path only bumps atomics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

type PairLabels = [(&'static str, String); 2];
type OutcomeLabels = [(&'static str, String); 3];

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0, 300.0,
    ])
}

/// Delivery outcomes, the `outcome` label.
pub mod outcome {
    /// The function answered 2xx (and the event was acknowledged).
    pub const SUCCESS: &str = "success";
    /// A failed attempt that will be tried again.
    pub const RETRY: &str = "retry";
    /// Retries used up (or a permanent failure); the event went to the dead letters.
    pub const DEAD_LETTER: &str = "dead_letter";
    /// Retries used up and no dead-letter destination (or writing there failed): dropped.
    pub const FAILED: &str = "failed";
    /// Retries used up and no dead-letter destination: skipped, the source moves on.
    pub const SKIPPED: &str = "skipped";
}

/// What a service calls its units in the `<prefix>_<units>` gauge ("subscriptions",
/// "readers").
#[derive(Clone, Copy, Debug)]
pub struct Names {
    /// `nats_trigger`, `kinesis_trigger`, ...
    pub prefix: &'static str,
    /// The trigger's kind, for help texts.
    pub kind: &'static str,
    pub units: &'static str,
    pub units_help: &'static str,
}

/// Process-wide metric families.
#[derive(Clone)]
pub struct TriggerMetrics {
    deliveries: Family<OutcomeLabels, Counter>,
    latency: Family<PairLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<PairLabels, Gauge>,
    /// Units running in this process.
    pub units: Gauge,
    /// Status writes by result (`ok`, `error`).
    status_writes: Family<[(&'static str, &'static str); 1], Counter>,
    /// Wake-ups this trigger wrote for functions scaled to zero.
    pub wakes: Counter,
}

impl TriggerMetrics {
    /// Registers the families under `names.prefix`.
    pub fn register(metrics: &kubeless_service::Metrics, names: Names) -> Self {
        let m = Self::detached();
        metrics.register_with(names.prefix, |r| {
            r.register(
                "deliveries",
                "Events handled, by trigger, function and outcome (success, retry, dead_letter, failed, skipped)",
                m.deliveries.clone(),
            );
            r.register(
                "delivery_seconds",
                "Time from receiving an event to its final outcome (retries included)",
                m.latency.clone(),
            );
            r.register(
                "in_flight",
                "Function calls in progress",
                m.in_flight.clone(),
            );
            r.register(names.units, names.units_help, m.units.clone());
            r.register(
                "status_writes",
                format!("{} status patches by result", names.kind),
                m.status_writes.clone(),
            );
            r.register(
                "function_wakes",
                "Wake-ups written for functions scaled to zero that had events waiting",
                m.wakes.clone(),
            );
        });
        m
    }

    /// Registers only what the control loop writes (the units gauge and status writes), for a
    /// service that keeps delivery families of its own (kafka-trigger's carry the topic).
    pub fn register_control(metrics: &kubeless_service::Metrics, names: Names) -> Self {
        let m = Self::detached();
        metrics.register_with(names.prefix, |r| {
            r.register(names.units, names.units_help, m.units.clone());
            r.register(
                "status_writes",
                format!("{} status patches by result", names.kind),
                m.status_writes.clone(),
            );
            r.register(
                "function_wakes",
                "Wake-ups written for functions scaled to zero that had events waiting",
                m.wakes.clone(),
            );
        });
        m
    }

    /// Families not yet registered anywhere.
    fn detached() -> Self {
        Self {
            deliveries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
            units: Gauge::default(),
            status_writes: Family::default(),
            wakes: Counter::default(),
        }
    }

    /// Counts one status write.
    pub fn status_write(&self, ok: bool) {
        self.status_writes
            .get_or_create(&[("result", if ok { "ok" } else { "error" })])
            .inc();
    }

    /// Handles for one (trigger, function) pair; `trigger` is `<namespace>/<name>`.
    pub fn pair(&self, trigger: &str, function: &str) -> PairMetrics {
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
        PairMetrics {
            success: counter(outcome::SUCCESS),
            retry: counter(outcome::RETRY),
            dead_letter: counter(outcome::DEAD_LETTER),
            failed: counter(outcome::FAILED),
            skipped: counter(outcome::SKIPPED),
            latency: self.latency.get_or_create(&pair()).clone(),
            in_flight: self.in_flight.get_or_create(&pair()).clone(),
        }
    }
}

/// Metric handles of one (trigger, function) pair.
#[derive(Clone)]
pub struct PairMetrics {
    pub success: Counter,
    pub retry: Counter,
    pub dead_letter: Counter,
    pub failed: Counter,
    pub skipped: Counter,
    pub latency: Histogram,
    pub in_flight: Gauge,
}

impl PairMetrics {
    /// The counter of a final outcome.
    pub fn outcome(&self, outcome: &str) -> &Counter {
        match outcome {
            outcome::SUCCESS => &self.success,
            outcome::DEAD_LETTER => &self.dead_letter,
            outcome::SKIPPED => &self.skipped,
            outcome::RETRY => &self.retry,
            _ => &self.failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exported_under_the_prefix() {
        let registry = kubeless_service::Metrics::new("kubeless");
        let m = TriggerMetrics::register(
            &registry,
            Names {
                prefix: "demo_trigger",
                kind: "DemoTrigger",
                units: "readers",
                units_help: "Readers running",
            },
        );
        let p = m.pair("ns/t", "f");
        p.success.inc();
        p.outcome(outcome::SKIPPED).inc();
        m.units.set(2);
        m.status_write(true);
        let text = registry.encode().unwrap();
        for needle in [
            "kubeless_demo_trigger_deliveries_total{trigger=\"ns/t\",function=\"f\",outcome=\"success\"} 1",
            "kubeless_demo_trigger_deliveries_total{trigger=\"ns/t\",function=\"f\",outcome=\"skipped\"} 1",
            "kubeless_demo_trigger_readers 2",
            "kubeless_demo_trigger_status_writes_total{result=\"ok\"} 1",
        ] {
            assert!(text.contains(needle), "{needle} missing in\n{text}");
        }
    }
}
