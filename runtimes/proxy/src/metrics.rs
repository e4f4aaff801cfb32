//! The Kubeless function metrics: `function_duration_seconds` (histogram),
//! `function_calls_total` and `function_failures_total`, labelled by `method`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Same bucket bounds as the Prometheus client defaults Kubeless used.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Content type of [`Metrics::encode`] output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: String,
}

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

pub struct Metrics {
    registry: Registry,
    calls: Family<MethodLabels, Counter>,
    failures: Family<MethodLabels, Counter>,
    duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let calls = Family::<MethodLabels, Counter>::default();
        let failures = Family::<MethodLabels, Counter>::default();
        let duration = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            new_histogram,
        );
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "function_calls",
            "Number of calls to the function",
            calls.clone(),
        );
        registry.register(
            "function_failures",
            "Number of calls that raised, timed out or lost their worker",
            failures.clone(),
        );
        registry.register(
            "function_duration_seconds",
            "Duration of function calls in seconds",
            duration.clone(),
        );
        Self {
            registry,
            calls,
            failures,
            duration,
        }
    }

    /// Record one finished function call.
    pub fn observe(&self, method: &str, seconds: f64, failed: bool) {
        let labels = MethodLabels {
            method: method.to_owned(),
        };
        self.calls.get_or_create(&labels).inc();
        self.duration.get_or_create(&labels).observe(seconds);
        // Touch the failure series even on success, so scrapers see an explicit 0.
        let failures = self.failures.get_or_create(&labels);
        if failed {
            failures.inc();
        }
    }

    /// OpenMetrics text exposition of all function metrics.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_and_failures_per_method() {
        let m = Metrics::new();
        m.observe("GET", 0.001, false);
        m.observe("GET", 0.2, true);
        m.observe("POST", 0.02, false);
        let text = m.encode().unwrap();
        assert!(
            text.contains("function_calls_total{method=\"GET\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("function_calls_total{method=\"POST\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("function_failures_total{method=\"GET\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("function_failures_total{method=\"POST\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("function_duration_seconds_count{method=\"GET\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("function_duration_seconds_bucket{le=\"0.005\",method=\"GET\"} 1"),
            "{text}"
        );
    }
}
