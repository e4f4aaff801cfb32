//! Flags every service shares. A service flattens [`ServiceArgs`] into its own clap struct.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::lease::LeaseConfig;
use crate::telemetry::{LogFormat, TelemetryConfig};

/// Default address of the admin server (/metrics, /healthz, /readyz).
///
/// Loopback so that a service started by hand never listens on every interface, and port 0 (a
/// free port, logged at start) so that several services run side by side on one machine; the
/// Helm charts set `KUBELESS_ADMIN_ADDR=0.0.0.0:8081` so kubelet probes and Prometheus reach it.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:0";

/// Flags shared by every kubeless service. Every flag can also be set through its env variable.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// Log filter: a level (`info`, `debug`, ...) or an `EnvFilter` directive list.
    /// When unset, RUST_LOG is used, then `info`.
    #[arg(long = "log-level", env = "KUBELESS_LOG_LEVEL")]
    pub log_level: Option<String>,

    /// Log line format.
    #[arg(long = "log-format", env = "KUBELESS_LOG_FORMAT", value_enum, default_value_t = LogFormatArg::Text)]
    pub log_format: LogFormatArg,

    /// Address of the admin HTTP server serving /metrics, /healthz and /readyz.
    #[arg(long = "admin-addr", env = "KUBELESS_ADMIN_ADDR", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: SocketAddr,

    /// OTLP/HTTP endpoint for trace export (e.g. `http://otel-collector:4318`). Empty: no export.
    #[arg(
        long = "otlp-endpoint",
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        default_value = ""
    )]
    pub otlp_endpoint: String,

    /// Only watch objects in this namespace. Empty: all namespaces.
    #[arg(
        long = "watch-namespace",
        env = "KUBELESS_WATCH_NAMESPACE",
        default_value = ""
    )]
    pub watch_namespace: String,

    /// Run only while holding the leader Lease (for controllers with more than one replica).
    #[arg(
        long = "leader-elect",
        env = "KUBELESS_LEADER_ELECT",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub leader_elect: bool,

    /// Name of the leader Lease. Empty: the service name.
    #[arg(long = "lease-name", env = "KUBELESS_LEASE_NAME", default_value = "")]
    pub lease_name: String,

    /// Namespace of the leader Lease.
    #[arg(
        long = "lease-namespace",
        env = "POD_NAMESPACE",
        default_value = "kubeless"
    )]
    pub lease_namespace: String,

    /// Identity written into the Lease. Empty: the host name.
    #[arg(long = "lease-identity", env = "POD_NAME", default_value = "")]
    pub lease_identity: String,

    /// Seconds a Lease stays valid without renewal.
    #[arg(
        long = "lease-duration-seconds",
        env = "KUBELESS_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    pub lease_duration_seconds: u32,

    /// Seconds between renewals (and between acquisition attempts while not leader).
    #[arg(
        long = "lease-renew-seconds",
        env = "KUBELESS_LEASE_RENEW_SECONDS",
        default_value_t = 5
    )]
    pub lease_renew_seconds: u32,

    /// Longest time from SIGTERM to exit. A service drains calls in flight within it; whatever
    /// still hangs then (an unreachable broker or API server) is abandoned. Keep it below the
    /// pod's terminationGracePeriodSeconds.
    #[arg(
        long = "shutdown-grace-seconds",
        env = "KUBELESS_SHUTDOWN_GRACE_SECONDS",
        default_value_t = 25
    )]
    pub shutdown_grace_seconds: u32,
}

/// Log format flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The shared flags, split into the config each subsystem needs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub telemetry: TelemetryConfig,
    pub admin_addr: SocketAddr,
    /// `None` means all namespaces.
    pub watch_namespace: Option<String>,
    /// `None` when leader election is off.
    pub lease: Option<LeaseConfig>,
    /// Longest time from the shutdown signal to exit (see `--shutdown-grace-seconds`).
    pub shutdown_grace: Duration,
}

impl ServiceArgs {
    /// For services whose every replica works (consumer groups, queue groups): the Lease
    /// only picks the status writer. Returns that Lease (with `--leader-elect`) and switches
    /// the scaffold's election, which would hold whole replicas back, off.
    pub fn take_lease(&mut self, service_name: &str) -> Option<LeaseConfig> {
        let lease = self.clone().into_config(service_name).lease;
        self.leader_elect = false;
        lease
    }

    /// Turns the flags into configuration. `service_name` names the OTel service and the default Lease.
    pub fn into_config(self, service_name: &str) -> ServiceConfig {
        // Destructured so that adding a flag without using it fails to compile.
        let Self {
            log_level,
            log_format,
            admin_addr,
            otlp_endpoint,
            watch_namespace,
            leader_elect,
            lease_name,
            lease_namespace,
            lease_identity,
            lease_duration_seconds,
            lease_renew_seconds,
            shutdown_grace_seconds,
        } = self;
        let filter = log_filter(
            log_level.as_deref(),
            std::env::var("RUST_LOG").ok().as_deref(),
        );
        let telemetry = TelemetryConfig {
            service_name: service_name.to_string(),
            filter,
            format: match log_format {
                LogFormatArg::Text => LogFormat::Text,
                LogFormatArg::Json => LogFormat::Json,
            },
            otlp_endpoint: non_empty(otlp_endpoint),
        };
        let lease = leader_elect.then(|| LeaseConfig {
            name: non_empty(lease_name).unwrap_or_else(|| service_name.to_string()),
            namespace: lease_namespace,
            identity: non_empty(lease_identity).unwrap_or_else(hostname),
            lease_duration: Duration::from_secs(u64::from(lease_duration_seconds.max(1))),
            renew_interval: Duration::from_secs(u64::from(lease_renew_seconds.max(1))),
        });
        ServiceConfig {
            telemetry,
            admin_addr,
            watch_namespace: non_empty(watch_namespace),
            lease,
            shutdown_grace: Duration::from_secs(u64::from(shutdown_grace_seconds.max(1))),
        }
    }
}

/// The log filter directives: the flag/KUBELESS_LOG_LEVEL wins, then RUST_LOG, then `info`.
pub fn log_filter(flag: Option<&str>, rust_log: Option<&str>) -> String {
    [flag, rust_log]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or("info")
        .to_string()
}

fn non_empty(s: String) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// Host name from the kernel, then $HOSTNAME, then a fixed fallback.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "kubeless-unknown-host".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        service: ServiceArgs,
    }

    #[test]
    fn log_filter_precedence() {
        assert_eq!(log_filter(Some("debug"), Some("warn")), "debug");
        assert_eq!(log_filter(None, Some("warn,kube=debug")), "warn,kube=debug");
        assert_eq!(log_filter(Some("  "), Some("warn")), "warn");
        assert_eq!(log_filter(None, None), "info");
    }

    #[test]
    fn flags_map_to_config() {
        let cli = Cli::try_parse_from([
            "svc",
            "--log-level",
            "debug",
            "--log-format",
            "json",
            "--admin-addr",
            "127.0.0.1:9999",
            "--otlp-endpoint",
            "http://collector:4318",
            "--watch-namespace",
            "team-a",
            "--leader-elect",
            "--lease-namespace",
            "ops",
            "--lease-identity",
            "pod-1",
            "--lease-duration-seconds",
            "20",
            "--lease-renew-seconds",
            "4",
        ])
        .unwrap();
        let cfg = cli.service.into_config("function-controller");
        assert_eq!(cfg.telemetry.filter, "debug");
        assert_eq!(cfg.telemetry.format, LogFormat::Json);
        assert_eq!(
            cfg.telemetry.otlp_endpoint.as_deref(),
            Some("http://collector:4318")
        );
        assert_eq!(cfg.admin_addr, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(cfg.watch_namespace.as_deref(), Some("team-a"));
        let lease = cfg.lease.unwrap();
        assert_eq!(lease.name, "function-controller");
        assert_eq!(lease.namespace, "ops");
        assert_eq!(lease.identity, "pod-1");
        assert_eq!(lease.lease_duration, Duration::from_secs(20));
        assert_eq!(lease.renew_interval, Duration::from_secs(4));
    }

    #[test]
    fn defaults_are_off() {
        // Only assert on flags whose env variables are unlikely to be set in a test run.
        let cli =
            Cli::try_parse_from(["svc", "--otlp-endpoint", "", "--watch-namespace", ""]).unwrap();
        let cfg = cli.service.into_config("x");
        assert!(cfg.telemetry.otlp_endpoint.is_none());
        assert!(cfg.watch_namespace.is_none());
        let cli = Cli::try_parse_from(["svc", "--leader-elect", "false"]).unwrap();
        assert!(cli.service.into_config("x").lease.is_none());
    }

    #[test]
    fn default_admin_port_is_any_free_port() {
        // Several services on one machine must not clash on a fixed default port.
        let addr: SocketAddr = DEFAULT_ADMIN_ADDR.parse().unwrap();
        assert!(addr.ip().is_loopback());
        assert_eq!(addr.port(), 0);
    }

    #[test]
    fn bad_admin_addr_is_rejected() {
        assert!(Cli::try_parse_from(["svc", "--admin-addr", "nope"]).is_err());
        assert!(Cli::try_parse_from(["svc", "--log-format", "xml"]).is_err());
    }
}

/// A Go-style duration flag (`500ms`, `10s`, `1m30s`), for clap's `value_parser`; clap names
/// the flag in its error.
pub fn duration_flag(s: &str) -> Result<std::time::Duration, String> {
    kubeless_api::delivery::parse_duration("the flag", s).map_err(|e| e.to_string())
}

/// How a service that calls functions (the gateway, every trigger) records their traffic for
/// scale to zero (`kubeless_invoke::Activity`).
#[derive(Debug, Clone, clap::Args)]
#[group(id = "kubeless-activity-args")]
pub struct ActivityArgs {
    /// Scale to zero: least time between two writes of a running function's
    /// `kubeless.io/last-activity` (a function at zero is woken at once), e.g. `10s`, `1m`.
    #[arg(
        long = "activity-interval",
        env = "KUBELESS_ACTIVITY_INTERVAL",
        default_value = "10s",
        value_parser = duration_flag
    )]
    pub activity_interval: std::time::Duration,
}
