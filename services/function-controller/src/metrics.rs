//! The controller's metrics, registered under `kubeless_function_controller_`.

use std::time::Duration;

use kubeless_service::Metrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family, histogram::Histogram};

/// Label of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Error or condition reason, e.g. `UnknownRuntime`, `ApplyFailed`.
    pub reason: String,
}

/// Label of the child-write counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    /// Kind written, e.g. `Deployment`, `Function/status`.
    pub kind: String,
    /// `apply` or `delete`.
    pub op: String,
}

/// Reconcile counters and timings.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    /// Reconciles started.
    pub reconciles: Counter,
    /// Failures by reason (reconcile errors and Function spec problems).
    pub errors: Family<ReasonLabel, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// API writes the controller made.
    pub writes: Family<WriteLabel, Counter>,
    /// Functions scaled to zero after idling.
    pub scaled_to_zero: Counter,
    /// Functions woken from zero by traffic.
    pub wakes: Counter,
    /// Seconds from a wake decision to the first ready replica.
    pub wake_duration: Histogram,
    /// Build Jobs created (the build step).
    pub builds: Counter,
    /// Wakes answered by a warm pool pod.
    pub warm_starts: Counter,
    /// Seconds from claiming a warm pool pod to it serving the function.
    pub warm_start_duration: Histogram,
}

impl ControllerMetrics {
    /// Creates the metrics and registers them in `metrics` under `function_controller`.
    pub fn register(metrics: &Metrics) -> Self {
        let this = Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            writes: Family::default(),
            scaled_to_zero: Counter::default(),
            wakes: Counter::default(),
            wake_duration: Histogram::new([
                0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
            ]),
            builds: Counter::default(),
            warm_starts: Counter::default(),
            warm_start_duration: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
        };
        metrics.register_with("function_controller", |r| {
            r.register(
                "reconciles",
                "Function reconciles started",
                this.reconciles.clone(),
            );
            r.register(
                "reconcile_errors",
                "Failed reconciles and Function problems, by reason",
                this.errors.clone(),
            );
            r.register(
                "reconcile_duration_seconds",
                "Time one Function reconcile took",
                this.duration.clone(),
            );
            r.register(
                "api_writes",
                "Writes to the API server, by kind and operation",
                this.writes.clone(),
            );
            r.register(
                "scaled_to_zero",
                "Functions scaled to zero after idling",
                this.scaled_to_zero.clone(),
            );
            r.register(
                "wakes",
                "Functions woken from zero by a call or an event",
                this.wakes.clone(),
            );
            r.register(
                "wake_duration_seconds",
                "Time from a wake decision to the function's first ready replica",
                this.wake_duration.clone(),
            );
            r.register(
                "builds",
                "Build Jobs created by the build step (an image found in the registry is not built)",
                this.builds.clone(),
            );
            r.register(
                "warm_starts",
                "Wakes answered by a warm pool pod until the function's own pod was ready",
                this.warm_starts.clone(),
            );
            r.register(
                "warm_start_duration_seconds",
                "Time from claiming a warm pool pod to it serving the function",
                this.warm_start_duration.clone(),
            );
        });
        this
    }

    /// Counts one failure with `reason`.
    pub fn error(&self, reason: &str) {
        self.errors
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts one API write.
    pub fn write(&self, kind: &str, op: &str) {
        self.writes
            .get_or_create(&WriteLabel {
                kind: kind.to_string(),
                op: op.to_string(),
            })
            .inc();
    }

    /// Records a reconcile's duration.
    pub fn observe(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }
}
