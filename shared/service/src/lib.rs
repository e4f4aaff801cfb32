//! The scaffold every kubeless service binary uses: shared flags ([`ServiceArgs`]), logging and
//! tracing ([`telemetry`]), one metrics registry ([`Metrics`]), the admin server
//! (/metrics, /healthz, /readyz), graceful shutdown ([`Shutdown`]), Lease leader election
//! ([`lease`]) and [`run`], which ties them together for a service's `main`.

pub mod admin;
pub mod args;
pub mod backoff;
pub mod events;
pub mod guard;
pub mod lease;
pub mod metrics;
pub mod pod_security;
pub mod run;
pub mod shutdown;
pub mod telemetry;

pub use admin::{AdminServer, Readiness};
pub use args::{ActivityArgs, ServiceArgs, ServiceConfig, duration_flag};
pub use backoff::Backoff;
pub use events::{DEFAULT_EVENT_INTERVAL, ThrottledEvents, object_reference};
pub use guard::{
    InvalidObjects, guarded_watch, guarded_watch_inspect, guarded_watch_notify,
    guarded_watch_stripped, report_all_invalid, report_invalid,
};
pub use lease::{LeaderElector, LeaseConfig};
pub use metrics::Metrics;
pub use run::{Context, METRICS_PREFIX, RunError, run, run_inner};
pub use shutdown::Shutdown;

/// Installs ring as the process's rustls crypto provider, once; later calls do nothing.
///
/// Some crates of the workspace enable reqwest's `rustls-no-provider` feature, and cargo unifies
/// features across a build, so any reqwest client (the OTLP exporter, tests) panics at
/// construction unless a provider is installed. Every service calls this through `run`.
pub fn install_crypto_provider() {
    // Err only means a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
