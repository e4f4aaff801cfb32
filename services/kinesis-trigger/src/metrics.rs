//! The stream-side metrics under `kubeless_kinesis_trigger_*`, labelled by trigger
//! (`<ns>/<name>`) and shard. Deliveries, delivery time, calls in flight, readers and status
//! writes are the trigger runtime's families ([`METRICS`]).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

type Labels2 = [(&'static str, String); 2];

/// The runtime's metric names for this service.
pub const METRICS: kubeless_trigger::Names = kubeless_trigger::Names {
    prefix: "kinesis_trigger",
    kind: "KinesisTrigger",
    units: "readers",
    units_help: "Trigger stream readers running in this process",
};

/// Process-wide stream metric families.
#[derive(Clone)]
pub struct StreamMetrics {
    millis_behind: Family<Labels2, Gauge>,
    get_records: Family<Labels2, Counter>,
    shards: Family<[(&'static str, String); 1], Gauge>,
    /// Checkpoint ConfigMap writes by result (`ok`, `error`).
    pub checkpoint_writes: Family<[(&'static str, &'static str); 1], Counter>,
}

impl StreamMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self {
            millis_behind: Family::default(),
            get_records: Family::default(),
            shards: Family::default(),
            checkpoint_writes: Family::default(),
        };
        metrics.register_with("kinesis_trigger", |r| {
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
            r.register("shards", "Shards being read, by trigger", m.shards.clone());
            r.register(
                "checkpoint_writes",
                "Checkpoint ConfigMap patches by result",
                m.checkpoint_writes.clone(),
            );
        });
        m
    }

    /// The iterator age of a shard.
    pub fn millis_behind(&self, trigger: &str, shard: &str, millis: i64) {
        self.millis_behind
            .get_or_create(&[
                ("trigger", trigger.to_string()),
                ("shard", shard.to_string()),
            ])
            .set(millis);
    }

    /// Drops the series of a shard no longer read here.
    pub fn forget_shard(&self, trigger: &str, shard: &str) {
        self.millis_behind.remove(&[
            ("trigger", trigger.to_string()),
            ("shard", shard.to_string()),
        ]);
    }

    /// Counts a GetRecords call.
    pub fn get_records(&self, trigger: &str, result: &'static str) {
        self.get_records
            .get_or_create(&[
                ("trigger", trigger.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }

    /// Shards a trigger reads in this process.
    pub fn set_shards(&self, trigger: &str, n: usize) {
        self.shards
            .get_or_create(&[("trigger", trigger.to_string())])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
