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
    /// Requests by answer class (`2xx`, `4xx`, ... and the gateway's own outcomes, such as
    /// `wake_queue_full` and `wake_timeout` for requests refused while a function woke).
    pub requests: Family<StaticLabels, Counter>,
    /// Time to the response head, in seconds.
    pub duration: Histogram,
    /// Requests held because their function was scaled to zero or not ready yet.
    pub wake_holds: Counter,
    /// Time a held request waited, until it was sent to the function or refused.
    pub wake_wait: Histogram,
    /// Wake-up writes (the activity annotation on a function at zero) this gateway made.
    pub wakes: Counter,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            wake_holds: Counter::default(),
            // From a pod that is already starting (tens of ms) to the wake timeout (60 s).
            wake_wait: Histogram::new([
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
            ]),
            wakes: Counter::default(),
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
            r.register(
                "wake_holds",
                "Requests held while their function scaled up from zero",
                m.wake_holds.clone(),
            );
            r.register(
                "wake_wait_seconds",
                "Time a held request waited for its function, until sent or refused",
                m.wake_wait.clone(),
            );
            r.register(
                "wakes",
                "Wake-ups written for functions scaled to zero",
                m.wakes.clone(),
            );
        });
        m
    }

    pub fn outcome(&self, outcome: &'static str) {
        self.requests.get_or_create(&[("outcome", outcome)]).inc();
    }
}
