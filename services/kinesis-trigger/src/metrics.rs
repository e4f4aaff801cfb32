//! Metrics under `kubeless_kinesis_trigger_*`, labelled by trigger (`<ns>/<name>`), function
//! and shard.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

type Labels2 = [(&'static str, String); 2];
type Labels3 = [(&'static str, String); 3];

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        300.0,
    ])
}

/// Delivery outcomes, the `outcome` label of `deliveries_total`.
pub mod outcome {
    /// The function answered 2xx.
    pub const SUCCESS: &str = "success";
    /// A failed attempt that was tried again.
    pub const RETRY: &str = "retry";
    /// Retries used up; the record went to the dead-letter stream.
    pub const DEAD_LETTER: &str = "dead_letter";
    /// Retries used up and no dead-letter stream: the record was skipped (logged).
    pub const SKIPPED: &str = "skipped";
}

/// Process-wide metric families.
#[derive(Clone)]
pub struct TriggerMetrics {
    deliveries: Family<Labels3, Counter>,
    latency: Family<Labels2, Histogram, fn() -> Histogram>,
    millis_behind: Family<Labels2, Gauge>,
    get_records: Family<Labels2, Counter>,
    shards: Family<[(&'static str, String); 1], Gauge>,
    /// Checkpoint ConfigMap writes by result (`ok`, `error`).
    pub checkpoint_writes: Family<[(&'static str, &'static str); 1], Counter>,
    /// Status patches by result (`ok`, `error`).
    pub status_writes: Family<[(&'static str, &'static str); 1], Counter>,
}

impl TriggerMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self {
            deliveries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            millis_behind: Family::default(),
            get_records: Family::default(),
            shards: Family::default(),
            checkpoint_writes: Family::default(),
            status_writes: Family::default(),
        };
        metrics.register_with("kinesis_trigger", |r| {
            r.register(
                "deliveries",
                "Records handled, by trigger, function and outcome (success, retry, dead_letter, skipped)",
                m.deliveries.clone(),
            );
            r.register(
                "delivery_seconds",
                "Time from reading a record to its final outcome (retries included)",
                m.latency.clone(),
            );
            r.register(
                "millis_behind_latest",
                "MillisBehindLatest of the last GetRecords, by trigger and shard (iterator age)",
                m.millis_behind.clone(),
            );
            r.register(
                "get_records",
                "GetRecords calls by trigger and result (ok, empty, throttled, expired, error)",
                m.get_records.clone(),
            );
            r.register(
                "shards",
                "Shards being read, by trigger",
                m.shards.clone(),
            );
            r.register(
                "checkpoint_writes",
                "Checkpoint ConfigMap patches by result",
                m.checkpoint_writes.clone(),
            );
            r.register(
                "status_writes",
                "KinesisTrigger status patches by result",
                m.status_writes.clone(),
            );
        });
        m
    }

    pub fn delivery(&self, trigger: &str, function: &str, outcome: &'static str, n: u64) {
        self.deliveries
            .get_or_create(&[
                ("trigger", trigger.to_string()),
                ("function", function.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc_by(n);
    }

    pub fn observe_latency(&self, trigger: &str, function: &str, seconds: f64) {
        self.latency
            .get_or_create(&[
                ("trigger", trigger.to_string()),
                ("function", function.to_string()),
            ])
            .observe(seconds);
    }

    pub fn millis_behind(&self, trigger: &str, shard: &str, millis: i64) {
        self.millis_behind
            .get_or_create(&[
                ("trigger", trigger.to_string()),
                ("shard", shard.to_string()),
            ])
            .set(millis);
    }

    /// Drops the gauge of a shard no longer read here.
    pub fn forget_shard(&self, trigger: &str, shard: &str) {
        self.millis_behind.remove(&[
            ("trigger", trigger.to_string()),
            ("shard", shard.to_string()),
        ]);
    }

    pub fn get_records(&self, trigger: &str, result: &'static str) {
        self.get_records
            .get_or_create(&[
                ("trigger", trigger.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }

    pub fn set_shards(&self, trigger: &str, n: usize) {
        self.shards
            .get_or_create(&[("trigger", trigger.to_string())])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
