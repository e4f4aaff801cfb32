//! `kubeless-cron-invoker`: what a CronJob's Job runs. It calls one function once (with the
//! trigger's retries) through `kubeless-invoke`, prints one JSON line describing the outcome and
//! exits 0 only when the function answered 2xx.
//!
//! Kubeless ran `curl` without `-f`, so a function answering 5xx still gave a successful Job.
//! Here the exit code tells the outcome apart: see [`EXIT_PERMANENT`] and [`EXIT_EXHAUSTED`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kubeless_api::delivery::parse_duration;
use kubeless_invoke::{
    Class, ClusterDnsResolver, Endpoint, EndpointSliceResolver, Event, FunctionTarget, Invoker,
    Jitter, Outcome, Resolve, RetryPolicy, StaticResolver,
};
use serde::Serialize;

/// `event-namespace` of every cron call (the value Kubeless used).
pub const EVENT_NAMESPACE: &str = "cronjobtrigger.kubeless.io";
/// `event-type` and, with a payload, `Content-Type` of every cron call.
pub const EVENT_TYPE: &str = "application/json";

/// Exit code: the function answered 2xx.
pub const EXIT_SUCCESS: u8 = 0;
/// Exit code: a failure retrying cannot fix (a 4xx other than 408/429, a 3xx, an unusable URL).
pub const EXIT_PERMANENT: u8 = 3;
/// Exit code: every attempt failed with a retryable error (5xx, 408, 429, timeout, connection).
pub const EXIT_EXHAUSTED: u8 = 4;
/// Exit code: the arguments cannot be used (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// Env var the Job sets to the Job name, used as `event-id` (stable for one scheduled run).
pub const EVENT_ID_ENV: &str = "KUBELESS_EVENT_ID";

/// Longest answer body echoed into the outcome line.
pub const MAX_BODY_ECHO: usize = 4096;

/// How the invoker finds the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResolverKind {
    /// `http://<fn>.<ns>.svc.<cluster-domain>:<port>/` (Kubeless's behaviour; needs cluster DNS).
    Dns,
    /// The ready pod addresses of the function's EndpointSlices, read through the API server
    /// (in-cluster service account, or KUBECONFIG). Needs no DNS; needs RBAC to list slices.
    Endpointslices,
    /// A fixed `--url`.
    Url,
}

impl ResolverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dns => "dns",
            Self::Endpointslices => "endpointslices",
            Self::Url => "url",
        }
    }
}

/// The invoker's command line. Every flag has an env variable too.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "kubeless-cron-invoker",
    version,
    about = "Calls a Kubeless function once (with retries) and exits non-zero unless it answered 2xx"
)]
pub struct InvokerArgs {
    /// Namespace of the function.
    #[arg(long, env = "KUBELESS_FUNCTION_NAMESPACE")]
    pub namespace: String,
    /// Name of the function (its Service).
    #[arg(long, env = "KUBELESS_FUNCTION_NAME")]
    pub function: String,
    /// Service port of the function.
    #[arg(long, env = "KUBELESS_FUNCTION_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Service port name (matches EndpointSlice ports); empty: match by number.
    #[arg(
        long = "port-name",
        env = "KUBELESS_FUNCTION_PORT_NAME",
        default_value = ""
    )]
    pub port_name: String,
    /// Seconds one attempt may take (the function's timeout).
    #[arg(long, env = "KUBELESS_FUNCTION_TIMEOUT", default_value_t = 180)]
    pub timeout: u64,
    /// JSON payload to POST; empty: a GET without body.
    #[arg(long, env = "KUBELESS_PAYLOAD", default_value = "")]
    pub payload: String,
    /// `event-id` to send; empty: a random one.
    #[arg(long = "event-id", env = EVENT_ID_ENV, default_value = "")]
    pub event_id: String,
    /// Attempts including the first.
    #[arg(
        long = "max-attempts",
        env = "KUBELESS_RETRY_MAX_ATTEMPTS",
        default_value_t = 5
    )]
    pub max_attempts: u32,
    /// Backoff before the second attempt (`500ms`, `1s`, `1m30s`).
    #[arg(
        long = "initial-backoff",
        env = "KUBELESS_RETRY_INITIAL_BACKOFF",
        default_value = "1s"
    )]
    pub initial_backoff: String,
    /// Upper bound of the backoff.
    #[arg(
        long = "max-backoff",
        env = "KUBELESS_RETRY_MAX_BACKOFF",
        default_value = "60s"
    )]
    pub max_backoff: String,
    /// Backoff growth factor (>= 1).
    #[arg(long, env = "KUBELESS_RETRY_MULTIPLIER", default_value_t = 2.0)]
    pub multiplier: f64,
    /// How to find the function.
    #[arg(long, env = "KUBELESS_RESOLVER", value_enum, default_value_t = ResolverKind::Dns)]
    pub resolver: ResolverKind,
    /// Cluster DNS domain (resolver `dns`).
    #[arg(
        long = "cluster-domain",
        env = "KUBELESS_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    pub cluster_domain: String,
    /// The function's URL (resolver `url`).
    #[arg(long, env = "KUBELESS_FUNCTION_URL", default_value = "")]
    pub url: String,
    /// Seconds to wait for the EndpointSlice list (resolver `endpointslices`).
    #[arg(
        long = "sync-timeout",
        env = "KUBELESS_SYNC_TIMEOUT",
        default_value_t = 30
    )]
    pub sync_timeout: u64,
}

/// Why the invoker could not even try.
#[derive(Debug, thiserror::Error)]
pub enum InvokerError {
    #[error("invalid retry setting")]
    Retry(#[source] kubeless_api::Error),
    #[error("--timeout must be at least 1 second")]
    Timeout,
    #[error("--multiplier must be a number >= 1")]
    Multiplier,
    #[error("--payload is not JSON")]
    Payload(#[source] serde_json::Error),
    #[error("--url is required with --resolver url")]
    NoUrl,
    #[error("invalid --url")]
    Url(#[source] kubeless_invoke::ResolveError),
    #[error("creating the Kubernetes client for EndpointSlice resolution failed")]
    Client(#[source] kube::Error),
}

/// One call, fully resolved from the arguments.
#[derive(Debug, Clone)]
pub struct Call {
    pub target: FunctionTarget,
    pub event: Event,
    pub retry: RetryPolicy,
}

impl InvokerArgs {
    /// Validates the arguments into a call (no I/O).
    pub fn call(&self) -> Result<Call, InvokerError> {
        if self.timeout == 0 {
            return Err(InvokerError::Timeout);
        }
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(InvokerError::Multiplier);
        }
        let initial = parse_duration("--initial-backoff", &self.initial_backoff)
            .map_err(InvokerError::Retry)?;
        let max =
            parse_duration("--max-backoff", &self.max_backoff).map_err(InvokerError::Retry)?;
        let mut target = FunctionTarget::new(&self.namespace, &self.function)
            .with_port(self.port)
            .with_timeout(Duration::from_secs(self.timeout));
        if !self.port_name.is_empty() {
            target = target.with_port_name(&self.port_name);
        }
        let payload = payload_body(&self.payload)?;
        let mut event = cron_event(payload);
        if !self.event_id.trim().is_empty() {
            event = event.with_event_id(self.event_id.trim());
        }
        Ok(Call {
            target,
            event,
            retry: RetryPolicy {
                max_attempts: self.max_attempts.max(1),
                initial_backoff: initial,
                max_backoff: max.max(initial),
                multiplier: self.multiplier,
                jitter: Jitter::Equal,
            },
        })
    }
}

/// The request body for a payload given as JSON text: empty or `null` means no body (GET).
pub fn payload_body(text: &str) -> Result<Option<Bytes>, InvokerError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(InvokerError::Payload)?;
    if value.is_null() {
        return Ok(None);
    }
    Ok(Some(Bytes::from(text.to_string())))
}

/// The event of a cron call: Kubeless headers, JSON content type, POST with a body, GET without.
pub fn cron_event(body: Option<Bytes>) -> Event {
    let mut event = Event::new(EVENT_NAMESPACE)
        .with_event_type(EVENT_TYPE)
        .with_content_type(EVENT_TYPE);
    event.body = body;
    event
}

/// The resolver the arguments ask for.
pub async fn resolver(args: &InvokerArgs) -> Result<Arc<dyn Resolve>, InvokerError> {
    Ok(match args.resolver {
        ResolverKind::Dns => Arc::new(ClusterDnsResolver::new(&args.cluster_domain)),
        ResolverKind::Url => {
            if args.url.trim().is_empty() {
                return Err(InvokerError::NoUrl);
            }
            Arc::new(StaticResolver::single(
                Endpoint::parse(args.url.trim()).map_err(InvokerError::Url)?,
            ))
        }
        ResolverKind::Endpointslices => {
            let client = kube::Client::try_default()
                .await
                .map_err(InvokerError::Client)?;
            let resolver = Arc::new(EndpointSliceResolver::default());
            // The watch task ends with the process; one call needs no cleanup.
            let _watch = resolver.spawn_watch(client, Some(&args.namespace));
            if tokio::time::timeout(
                Duration::from_secs(args.sync_timeout),
                resolver.wait_synced(),
            )
            .await
            .is_err()
            {
                tracing::warn!(
                    "EndpointSlices not listed within {}s; calling anyway",
                    args.sync_timeout
                );
            }
            resolver
        }
    })
}

/// The JSON line printed after a call.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub namespace: String,
    pub function: String,
    /// `succeeded`, `failed` (permanent) or `retries-exhausted`.
    pub outcome: &'static str,
    pub status: Option<u16>,
    pub attempts: u32,
    pub event_id: String,
    pub endpoint: Option<String>,
    pub latency_ms: u128,
    pub elapsed_ms: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer body (lossy UTF-8, cut at [`MAX_BODY_ECHO`] bytes).
    pub body: String,
}

/// The outcome label of a class.
pub fn outcome_label(class: Class) -> &'static str {
    match class {
        Class::Success => "succeeded",
        Class::Permanent => "failed",
        Class::Retryable => "retries-exhausted",
    }
}

/// The process exit code for a class.
pub fn exit_code(class: Class) -> u8 {
    match class {
        Class::Success => EXIT_SUCCESS,
        Class::Permanent => EXIT_PERMANENT,
        Class::Retryable => EXIT_EXHAUSTED,
    }
}

impl Report {
    pub fn new(target: &FunctionTarget, outcome: &Outcome) -> Self {
        let body = &outcome.body[..outcome.body.len().min(MAX_BODY_ECHO)];
        Self {
            namespace: target.namespace.clone(),
            function: target.name.clone(),
            outcome: outcome_label(outcome.class()),
            status: outcome.status.map(|s| s.as_u16()),
            attempts: outcome.attempts,
            event_id: outcome.event_id.clone(),
            endpoint: outcome.endpoint.as_ref().map(ToString::to_string),
            latency_ms: outcome.latency.as_millis(),
            elapsed_ms: outcome.elapsed.as_millis(),
            error: outcome.error.as_ref().map(|e| error_chain(e)),
            body: String::from_utf8_lossy(body).into_owned(),
        }
    }
}

/// An error and its sources on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// Runs one call and returns the report and the exit code.
pub async fn run(args: &InvokerArgs) -> Result<(Report, u8), InvokerError> {
    let call = args.call()?;
    let resolver = resolver(args).await?;
    let invoker = Invoker::new(resolver);
    let outcome = invoker
        .invoke_with_retry(&call.target, &call.event, &call.retry)
        .await;
    Ok((
        Report::new(&call.target, &outcome),
        exit_code(outcome.class()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> InvokerArgs {
        let mut argv = vec!["kubeless-cron-invoker", "--namespace=ns", "--function=f"];
        argv.extend_from_slice(extra);
        InvokerArgs::try_parse_from(argv).unwrap()
    }

    #[test]
    fn payload_means_post_and_none_means_get() {
        assert_eq!(payload_body("").unwrap(), None);
        assert_eq!(payload_body(" null ").unwrap(), None);
        assert_eq!(
            payload_body(r#"{"a":1}"#).unwrap(),
            Some(Bytes::from(r#"{"a":1}"#))
        );
        assert_eq!(payload_body("42").unwrap(), Some(Bytes::from("42")));
        assert!(payload_body("{nope").is_err());
    }

    #[test]
    fn call_from_args() {
        let a = parse(&[
            "--port=9090",
            "--port-name=http-function-port",
            "--timeout=7",
            "--payload=[1,2]",
            "--event-id=job-1",
            "--max-attempts=3",
            "--initial-backoff=250ms",
            "--max-backoff=2s",
            "--multiplier=3",
        ]);
        let c = a.call().unwrap();
        assert_eq!(c.target.port, 9090);
        assert_eq!(c.target.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(c.target.timeout, Duration::from_secs(7));
        assert_eq!(c.event.body, Some(Bytes::from("[1,2]")));
        assert_eq!(c.event.event_id.as_deref(), Some("job-1"));
        assert_eq!(c.event.event_namespace, EVENT_NAMESPACE);
        assert_eq!(c.retry.max_attempts, 3);
        assert_eq!(c.retry.initial_backoff, Duration::from_millis(250));
        assert_eq!(c.retry.max_backoff, Duration::from_secs(2));
        assert_eq!(c.retry.multiplier, 3.0);
    }

    #[test]
    fn bad_args_are_errors() {
        assert!(matches!(
            parse(&["--timeout=0"]).call(),
            Err(InvokerError::Timeout)
        ));
        assert!(matches!(
            parse(&["--multiplier=0.5"]).call(),
            Err(InvokerError::Multiplier)
        ));
        assert!(matches!(
            parse(&["--initial-backoff=soon"]).call(),
            Err(InvokerError::Retry(_))
        ));
        assert!(matches!(
            parse(&["--payload={"]).call(),
            Err(InvokerError::Payload(_))
        ));
    }

    #[test]
    fn exit_codes_are_distinct() {
        let codes = [
            exit_code(Class::Success),
            exit_code(Class::Permanent),
            exit_code(Class::Retryable),
            EXIT_USAGE,
        ];
        assert_eq!(codes, [0, 3, 4, 64]);
        assert_eq!(outcome_label(Class::Retryable), "retries-exhausted");
    }
}
