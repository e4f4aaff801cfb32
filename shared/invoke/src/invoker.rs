//! The invoker: one pooled HTTP/1.1 client, a resolver, and the call/retry logic.
//!
//! The client is hyper-util's pooled client rather than reqwest: reqwest adds a redirect and a
//! retry layer that re-parse the URL on every request, which cost about a third on top of a bare
//! hyper call in `benches/overhead.rs`; function calls need none of it (plain in-cluster http,
//! no redirects, no proxies, our own retries).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, USER_AGENT};
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::event::{self, Event, HeaderError};
use crate::lane::{Lane, Sent};
use crate::resolve::{Endpoint, Resolve, ResolveError};
use crate::retry::{Class, RetryPolicy, classify_status};
use crate::target::FunctionTarget;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why an attempt did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("function answered HTTP {status}")]
    Status { status: StatusCode },
    #[error("no complete answer from {endpoint} within {timeout:?}")]
    Timeout { endpoint: String, timeout: Duration },
    #[error("connecting to {endpoint} failed")]
    Connect {
        endpoint: String,
        #[source]
        source: BoxError,
    },
    #[error("request to {endpoint} failed")]
    Transport {
        endpoint: String,
        #[source]
        source: BoxError,
    },
    #[error("finding the function's endpoint failed")]
    Resolve(#[source] ResolveError),
    #[error("the event cannot be sent")]
    InvalidEvent(#[source] HeaderError),
}

impl InvokeError {
    pub fn class(&self) -> Class {
        match self {
            Self::Status { status } => classify_status(*status),
            Self::Timeout { .. } | Self::Connect { .. } | Self::Transport { .. } => {
                Class::Retryable
            }
            Self::Resolve(e) if e.is_retryable() => Class::Retryable,
            Self::Resolve(_) | Self::InvalidEvent(_) => Class::Permanent,
        }
    }

    /// Short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Status { status } if status.is_server_error() => "status_5xx",
            Self::Status { status } if status.is_client_error() => "status_4xx",
            Self::Status { .. } => "status_other",
            Self::Timeout { .. } => "timeout",
            Self::Connect { .. } => "connect",
            Self::Transport { .. } => "transport",
            Self::Resolve(_) => "resolve",
            Self::InvalidEvent(_) => "invalid_event",
        }
    }
}

/// The result of [`Invoker::invoke`] or [`Invoker::invoke_with_retry`].
#[derive(Debug)]
pub struct Outcome {
    /// The `event-id` sent (the same on every attempt).
    pub event_id: String,
    /// Status of the last attempt that got an answer.
    pub status: Option<StatusCode>,
    /// Body of the last answer (empty without one).
    pub body: Bytes,
    /// Duration of the last attempt.
    pub latency: Duration,
    /// Time from the first attempt to the end of the last, backoff included.
    pub elapsed: Duration,
    pub attempts: u32,
    /// Endpoint of the last attempt.
    pub endpoint: Option<Endpoint>,
    /// `None` on success.
    pub error: Option<InvokeError>,
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        self.error.is_none()
    }

    pub fn class(&self) -> Class {
        self.error
            .as_ref()
            .map_or(Class::Success, InvokeError::class)
    }
}

/// HTTP client tuning.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Idle keep-alive connections kept per endpoint.
    pub pool_max_idle_per_host: usize,
    /// How long an idle connection is kept.
    pub pool_idle_timeout: Duration,
    /// Connect timeout (within the per-call timeout).
    pub connect_timeout: Duration,
    pub tcp_keepalive: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            pool_max_idle_per_host: 32,
            pool_idle_timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(5),
            tcp_keepalive: Duration::from_secs(30),
        }
    }
}

/// The body of a call to a function.
pub type CallBody = Full<Bytes>;

/// Sends events to functions. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Invoker {
    client: Client<HttpConnector, CallBody>,
    resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for Invoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invoker").finish_non_exhaustive()
    }
}

/// An event ready to send: headers computed once, reused by every attempt.
struct Prepared {
    event_id: String,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
}

const USER_AGENT_VALUE: HeaderValue =
    HeaderValue::from_static(concat!("kubeless-invoke/", env!("CARGO_PKG_VERSION")));

impl Invoker {
    /// An invoker with default client options.
    pub fn new(resolver: Arc<dyn Resolve>) -> Self {
        Self::with_options(resolver, &ClientOptions::default())
    }

    pub fn with_options(resolver: Arc<dyn Resolve>, opts: &ClientOptions) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_keepalive(Some(opts.tcp_keepalive));
        connector.set_connect_timeout(Some(opts.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(opts.pool_idle_timeout)
            .pool_max_idle_per_host(opts.pool_max_idle_per_host)
            .build(connector);
        Self { client, resolver }
    }

    pub fn resolver(&self) -> &Arc<dyn Resolve> {
        &self.resolver
    }

    /// One attempt.
    pub async fn invoke(&self, target: &FunctionTarget, event: &Event) -> Outcome {
        self.invoke_with_retry(target, event, &RetryPolicy::no_retry())
            .await
    }

    /// Attempts until success, a permanent failure, or `policy.max_attempts`, sleeping the
    /// policy's backoff in between. Every attempt carries the same `event-id` and `event-time`
    /// so the function can recognise a redelivery.
    pub async fn invoke_with_retry(
        &self,
        target: &FunctionTarget,
        event: &Event,
        policy: &RetryPolicy,
    ) -> Outcome {
        self.invoke_with_retry_in(None, target, event, policy).await
    }

    /// [`Invoker::invoke_with_retry`] over `lane`'s connections when given: for a task that
    /// calls one event at a time (an ordered lane) and runs its loop in [`Lane::run`]. The
    /// shared pool serves the calls the lane has no room for.
    pub async fn invoke_with_retry_in(
        &self,
        lane: Option<&Lane<CallBody>>,
        target: &FunctionTarget,
        event: &Event,
        policy: &RetryPolicy,
    ) -> Outcome {
        let started = Instant::now();
        let event_id = event.event_id.clone().unwrap_or_else(event::new_event_id);
        let mut prepared = match prepare(event, event_id) {
            Ok(p) => p,
            Err((event_id, err)) => {
                return Outcome {
                    event_id,
                    status: None,
                    body: Bytes::new(),
                    latency: Duration::ZERO,
                    elapsed: started.elapsed(),
                    attempts: 0,
                    endpoint: None,
                    error: Some(InvokeError::InvalidEvent(err)),
                };
            }
        };
        let max = policy.attempts();
        let mut attempt = 1;
        loop {
            // The last attempt takes the headers instead of copying them.
            let headers = if attempt < max {
                prepared.headers.clone()
            } else {
                std::mem::take(&mut prepared.headers)
            };
            let mut outcome = self.attempt(lane, target, &prepared, headers, event).await;
            outcome.attempts = attempt;
            let class = outcome.class();
            if class != Class::Retryable || attempt >= max {
                outcome.elapsed = started.elapsed();
                return outcome;
            }
            // ThreadRng is not Send: draw the delay before awaiting.
            let delay = policy.backoff(attempt, &mut rand::rng());
            tracing::debug!(
                event_id = %prepared.event_id,
                attempt,
                error = outcome.error.as_ref().map(|e| e.metric_label()),
                ?delay,
                "retrying function call"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn attempt(
        &self,
        lane: Option<&Lane<CallBody>>,
        target: &FunctionTarget,
        prepared: &Prepared,
        mut headers: HeaderMap,
        event: &Event,
    ) -> Outcome {
        let start = Instant::now();
        let mut outcome = Outcome {
            event_id: prepared.event_id.clone(),
            status: None,
            body: Bytes::new(),
            latency: Duration::ZERO,
            elapsed: Duration::ZERO,
            attempts: 1,
            endpoint: None,
            error: None,
        };
        let endpoint = match self.resolver.resolve(target) {
            Ok(e) => e,
            Err(err) => {
                outcome.error = Some(InvokeError::Resolve(err));
                return outcome;
            }
        };
        // The client span of this attempt (exported when the process exports OTLP): a child of
        // the event's parent, else of the current span; the function's span becomes its child.
        let span = tracing::info_span!(
            "invoke",
            otel.name = %prepared.method,
            otel.kind = "client",
            event.id = %prepared.event_id,
            faas.invoked_name = %target.name,
            faas.invoked_namespace = %target.namespace,
            http.response.status_code = tracing::field::Empty,
        );
        if let Some(parent) = &event.parent {
            // Fails only when the span is disabled or no OpenTelemetry layer is installed.
            let _ = span.set_parent(parent.clone());
        }
        let own = span.context();
        let parent = if own.span().span_context().is_valid() {
            Some(&own)
        } else {
            event.parent.as_ref()
        };
        event::inject_traceparent(&mut headers, parent);
        let mut request = http::Request::new(Full::new(prepared.body.clone()));
        *request.method_mut() = prepared.method.clone();
        *request.uri_mut() = endpoint.uri().clone();
        *request.headers_mut() = headers;

        let call = async {
            let pooled = |e: hyper_util::client::legacy::Error| {
                if e.is_connect() {
                    Failure::Connect(e.into())
                } else {
                    Failure::Transport(e.into())
                }
            };
            let response = match lane {
                None => self.client.request(request).await.map_err(pooled)?,
                Some(lane) => {
                    // A lane's connection takes the origin-form target (its Host is added).
                    let origin = endpoint
                        .uri()
                        .path_and_query()
                        .map_or_else(|| http::Uri::from_static("/"), |pq| pq.clone().into());
                    *request.uri_mut() = origin;
                    match lane.send(&endpoint, request).await {
                        Sent::Answer(r) => r,
                        Sent::Failed(e) if e.is_connect() => {
                            return Err(Failure::Connect(e.into()));
                        }
                        Sent::Failed(e) => return Err(Failure::Transport(e.into())),
                        Sent::Full(mut request) => {
                            *request.uri_mut() = endpoint.uri().clone();
                            self.client.request(request).await.map_err(pooled)?
                        }
                    }
                }
            };
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| Failure::Transport(e.into()))?
                .to_bytes();
            Ok::<_, Failure>((parts.status, body))
        };
        let result = match tokio::time::timeout(target.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Timeout),
        };
        outcome.latency = start.elapsed();
        match result {
            Ok((status, body)) => {
                span.record("http.response.status_code", status.as_u16());
                outcome.status = Some(status);
                outcome.body = body;
                if classify_status(status) != Class::Success {
                    outcome.error = Some(InvokeError::Status { status });
                }
            }
            Err(failure) => {
                let endpoint_s = endpoint.to_string();
                outcome.error = Some(match failure {
                    Failure::Timeout => InvokeError::Timeout {
                        endpoint: endpoint_s,
                        timeout: target.timeout,
                    },
                    Failure::Connect(source) => {
                        self.resolver.report_failure(target, &endpoint);
                        InvokeError::Connect {
                            endpoint: endpoint_s,
                            source,
                        }
                    }
                    Failure::Transport(source) => InvokeError::Transport {
                        endpoint: endpoint_s,
                        source,
                    },
                });
            }
        }
        outcome.endpoint = Some(endpoint);
        outcome
    }
}

enum Failure {
    Timeout,
    Connect(BoxError),
    Transport(BoxError),
}

fn prepare(event: &Event, event_id: String) -> Result<Prepared, (String, HeaderError)> {
    match event::event_headers(event, &event_id, chrono::Utc::now()) {
        Ok(mut headers) => {
            headers.insert(USER_AGENT, USER_AGENT_VALUE);
            let method = if event.body.is_some() {
                Method::POST
            } else {
                Method::GET
            };
            Ok(Prepared {
                event_id,
                method,
                headers,
                body: event.body.clone().unwrap_or_default(),
            })
        }
        Err(e) => Err((event_id, e)),
    }
}
