//! Metrics of the controller and of the gateway, registered under `kubeless_http_trigger_*`.

use prometheus_client::metrics::{counter::Counter, family::Family, histogram::Histogram};

/// Label set `result` / `code` with static values (no allocation on the request path).
pub type StaticLabels = [(&'static str, &'static str); 1];

/// Controller metrics.
#[derive(Clone)]
pub struct ControllerMetrics {
    /// Reconciles by result (`ok` or an error label).
    pub reconciles: Family<StaticLabels, Counter>,
}

impl ControllerMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self {
            reconciles: Family::default(),
        };
        metrics.register_with("http_trigger_controller", |r| {
            r.register(
                "reconciles",
                "HTTPTrigger reconciles by result",
                m.reconciles.clone(),
            );
        });
        m
    }

    pub fn result(&self, result: &'static str) {
        self.reconciles.get_or_create(&[("result", result)]).inc();
    }
}

/// Gateway metrics.
#[derive(Clone)]
pub struct GatewayMetrics {
    /// Requests by answer class (`2xx`, `4xx`, ... and the gateway's own outcomes).
    pub requests: Family<StaticLabels, Counter>,
    /// Time to the response head, in seconds.
    pub duration: Histogram,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
        }
    }
}

impl GatewayMetrics {
    pub fn register(metrics: &kubeless_service::Metrics) -> Self {
        let m = Self::default();
        metrics.register_with("http_gateway", |r| {
            r.register(
                "requests",
                "Requests served by the built-in gateway, by outcome",
                m.requests.clone(),
            );
            r.register(
                "response_seconds",
                "Time from request to the function's response head",
                m.duration.clone(),
            );
        });
        m
    }

    pub fn outcome(&self, outcome: &'static str) {
        self.requests.get_or_create(&[("outcome", outcome)]).inc();
    }
}
