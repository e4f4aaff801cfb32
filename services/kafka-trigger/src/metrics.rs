//! Metrics under `kubeless_kafka_trigger_*`. Each consumer resolves its label sets once
//! ([`ConsumerMetrics`]) so the record path only touches atomics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

type FnLabels = [(&'static str, String); 3];
type OutcomeLabels = [(&'static str, String); 4];
type PartitionLabels = [(&'static str, String); 5];

/// The `outcome` label of `deliveries_total`.
pub mod outcome {
    /// The function answered 2xx.
    pub const DELIVERED: &str = "delivered";
    /// Retries used up (or a permanent 4xx); the record went to the dead-letter topic.
    pub const DEAD_LETTERED: &str = "dead_lettered";
    /// Retries used up and the trigger has no dead-letter topic: logged and skipped.
    pub const SKIPPED: &str = "skipped";
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0, 300.0,
    ])
}

/// The runtime's names for this service: it registers `consumers` (consumer groups, trigger x
/// function, running in this process) and `status_writes`; the delivery families below are
/// this service's own, since they carry the topic.
pub const METRICS: kubeless_trigger::Names = kubeless_trigger::Names {
    prefix: "kafka_trigger",
    kind: "KafkaTrigger",
    units: "consumers",
    units_help: "Consumer groups (trigger x function) running in this process",
};

/// Process-wide metric families.
#[derive(Clone)]
pub struct TriggerMetrics {
    deliveries: Family<OutcomeLabels, Counter>,
    retries: Family<FnLabels, Counter>,
    latency: Family<FnLabels, Histogram, fn() -> Histogram>,
    lag: Family<PartitionLabels, Gauge>,
    in_flight: Gauge,
    /// Commit requests that failed.
    pub commit_failures: Counter,
    /// Partition assignments and revocations by the group coordinator.
    rebalances: Family<OutcomeLabels, Counter>,
}

impl TriggerMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self {
            deliveries: Family::default(),
            retries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            lag: Family::default(),
            in_flight: Gauge::default(),
            commit_failures: Counter::default(),
            rebalances: Family::default(),
        };
        metrics.register_with("kafka_trigger", |r| {
            r.register(
                "deliveries",
                "Records finished, by trigger, function and outcome (delivered, dead_lettered, skipped)",
                m.deliveries.clone(),
            );
            r.register(
                "retries",
                "Failed function calls that were tried again",
                m.retries.clone(),
            );
            r.register(
                "delivery_duration_seconds",
                "Time from a record's dispatch to its outcome (retries and dead-lettering included)",
                m.latency.clone(),
            );
            r.register(
                "consumer_lag",
                "Records behind the partition's high watermark (high watermark - oldest record not done)",
                m.lag.clone(),
            );
            r.register("in_flight", "Records being delivered now", m.in_flight.clone());
            r.register(
                "commit_failures",
                "Offset commits the broker refused or that failed",
                m.commit_failures.clone(),
            );
            r.register(
                "rebalances",
                "Partition assignments and revocations of a consumer group, by kind (assign, revoke); \
                 a rise while records flow means a rejoin, and the partitions restart from their \
                 last commit",
                m.rebalances.clone(),
            );
        });
        m
    }

    /// Label sets of one consumer.
    pub fn consumer(
        &self,
        namespace: &str,
        trigger: &str,
        function: &str,
        topic: &str,
    ) -> ConsumerMetrics {
        let base = [
            ("namespace", namespace.to_string()),
            ("trigger", trigger.to_string()),
            ("function", function.to_string()),
        ];
        let with_outcome = |o: &str| {
            let [a, b, c] = base.clone();
            [a, b, c, ("outcome", o.to_string())]
        };
        // One statement per lookup: `get_or_create` returns a read guard, and a second lookup
        // that inserts while a guard of the same family is alive would deadlock.
        let delivered = self
            .deliveries
            .get_or_create(&with_outcome(outcome::DELIVERED))
            .clone();
        let dead_lettered = self
            .deliveries
            .get_or_create(&with_outcome(outcome::DEAD_LETTERED))
            .clone();
        let skipped = self
            .deliveries
            .get_or_create(&with_outcome(outcome::SKIPPED))
            .clone();
        let with_kind = |k: &str| {
            let [a, b, c] = base.clone();
            [a, b, c, ("kind", k.to_string())]
        };
        let assigned = self.rebalances.get_or_create(&with_kind("assign")).clone();
        let revoked = self.rebalances.get_or_create(&with_kind("revoke")).clone();
        let retries = self.retries.get_or_create(&base).clone();
        let latency = self.latency.get_or_create(&base).clone();
        ConsumerMetrics {
            assigned,
            revoked,
            delivered,
            dead_lettered,
            skipped,
            retries,
            latency,
            in_flight: self.in_flight.clone(),
            lag_family: self.lag.clone(),
            commit_failures: self.commit_failures.clone(),
            base,
            topic: topic.to_string(),
        }
    }
}

/// One consumer's handles into the families.
#[derive(Clone)]
pub struct ConsumerMetrics {
    /// Assignments received from the group coordinator.
    pub assigned: Counter,
    /// Revocations received from the group coordinator.
    pub revoked: Counter,
    pub delivered: Counter,
    pub dead_lettered: Counter,
    pub skipped: Counter,
    pub retries: Counter,
    pub latency: Histogram,
    pub in_flight: Gauge,
    pub commit_failures: Counter,
    lag_family: Family<PartitionLabels, Gauge>,
    base: FnLabels,
    topic: String,
}

impl ConsumerMetrics {
    fn lag_labels(&self, partition: i32) -> PartitionLabels {
        let [a, b, c] = self.base.clone();
        [
            a,
            b,
            c,
            ("topic", self.topic.clone()),
            ("partition", partition.to_string()),
        ]
    }

    pub fn set_lag(&self, partition: i32, lag: i64) {
        self.lag_family
            .get_or_create(&self.lag_labels(partition))
            .set(lag.max(0));
    }

    /// Drops the series of a partition this consumer no longer owns.
    pub fn forget_partition(&self, partition: i32) {
        self.lag_family.remove(&self.lag_labels(partition));
    }
}
