//! Metrics, registered under `kubeless_cronjob_trigger_*` and `kubeless_cron_scheduler_*`.

use prometheus_client::metrics::{counter::Counter, family::Family, histogram::Histogram};

/// A label set with one static pair (no allocation per observation).
pub type StaticLabels = [(&'static str, &'static str); 1];

/// Controller metrics.
#[derive(Clone, Default)]
pub struct ControllerMetrics {
    /// Reconciles by result (`ok` or an error label).
    pub reconciles: Family<StaticLabels, Counter>,
    /// Finished runs seen on Jobs (CronJob mode), by result (`succeeded`, `failed`).
    pub job_results: Family<StaticLabels, Counter>,
}

impl ControllerMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self::default();
        metrics.register_with("cronjob_trigger", |r| {
            r.register(
                "reconciles",
                "CronJobTrigger reconciles by result",
                m.reconciles.clone(),
            );
            r.register(
                "job_results",
                "Newly finished invoker Jobs seen, by result",
                m.job_results.clone(),
            );
        });
        m
    }

    pub fn result(&self, result: &'static str) {
        self.reconciles.get_or_create(&[("result", result)]).inc();
    }
}

/// In-process scheduler metrics.
#[derive(Clone)]
pub struct SchedulerMetrics {
    /// Scheduled calls by outcome: `succeeded`, `failed`, `retries-exhausted`.
    pub invocations: Family<StaticLabels, Counter>,
    /// Duration of a scheduled call, retries and backoff included, in seconds.
    pub duration: Histogram,
    /// Runs skipped because the previous one still ran (`concurrencyPolicy: Forbid`).
    pub skipped: Counter,
    /// Runs cancelled by a newer one (`concurrencyPolicy: Replace`).
    pub replaced: Counter,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        Self {
            invocations: Family::default(),
            duration: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0,
            ]),
            skipped: Counter::default(),
            replaced: Counter::default(),
        }
    }
}

impl SchedulerMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self::default();
        metrics.register_with("cron_scheduler", |r| {
            r.register(
                "invocations",
                "Scheduled function calls by outcome",
                m.invocations.clone(),
            );
            r.register(
                "invocation_seconds",
                "Duration of a scheduled call, retries included",
                m.duration.clone(),
            );
            r.register(
                "skipped",
                "Runs skipped because the previous run still ran (Forbid)",
                m.skipped.clone(),
            );
            r.register(
                "replaced",
                "Running calls cancelled by a newer run (Replace)",
                m.replaced.clone(),
            );
        });
        m
    }
}
