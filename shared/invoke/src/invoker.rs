//! The invoker: one HTTP client, a resolver, and the call/retry logic.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};

use crate::event::{self, Event, HeaderError};
use crate::resolve::{Endpoint, Resolve, ResolveError};
use crate::retry::{Class, RetryPolicy, classify_status};
use crate::target::FunctionTarget;

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
        source: reqwest::Error,
    },
    #[error("request to {endpoint} failed")]
    Transport {
        endpoint: String,
        #[source]
        source: reqwest::Error,
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

/// Sends events to functions. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Invoker {
    client: reqwest::Client,
    resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for Invoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invoker").finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("building the HTTP client failed")]
pub struct BuildError(#[source] reqwest::Error);

/// An event ready to send: headers computed once, reused by every attempt.
struct Prepared {
    event_id: String,
    method: Method,
    headers: HeaderMap,
    body: Option<Bytes>,
}

impl Invoker {
    /// An invoker with default client options.
    pub fn new(resolver: Arc<dyn Resolve>) -> Result<Self, BuildError> {
        Self::with_options(resolver, &ClientOptions::default())
    }

    pub fn with_options(
        resolver: Arc<dyn Resolve>,
        opts: &ClientOptions,
    ) -> Result<Self, BuildError> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(opts.pool_max_idle_per_host)
            .pool_idle_timeout(opts.pool_idle_timeout)
            .connect_timeout(opts.connect_timeout)
            .tcp_keepalive(opts.tcp_keepalive)
            .tcp_nodelay(true)
            // Function calls stay inside the cluster: environment proxies must not capture them,
            // and a redirect from a function is an answer, not something to follow.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("kubeless-invoke/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(BuildError)?;
        Ok(Self { client, resolver })
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
        let started = Instant::now();
        let event_id = event.event_id.clone().unwrap_or_else(event::new_event_id);
        let prepared = match prepare(event, event_id) {
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
            let mut outcome = self.attempt(target, &prepared, event).await;
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
        target: &FunctionTarget,
        prepared: &Prepared,
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
        let mut request = reqwest::Request::new(prepared.method.clone(), endpoint.url().clone());
        let mut headers = prepared.headers.clone();
        event::inject_traceparent(&mut headers, event.parent.as_ref());
        *request.headers_mut() = headers;
        if let Some(body) = &prepared.body {
            *request.body_mut() = Some(body.clone().into());
        }
        *request.timeout_mut() = Some(target.timeout);

        let result = async {
            let response = self.client.execute(request).await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        }
        .await;
        outcome.latency = start.elapsed();
        match result {
            Ok((status, body)) => {
                outcome.status = Some(status);
                outcome.body = body;
                if classify_status(status) != Class::Success {
                    outcome.error = Some(InvokeError::Status { status });
                }
            }
            Err(err) => {
                let endpoint_s = endpoint.to_string();
                outcome.error = Some(if err.is_timeout() {
                    InvokeError::Timeout {
                        endpoint: endpoint_s,
                        timeout: target.timeout,
                    }
                } else if err.is_connect() {
                    self.resolver.report_failure(target, &endpoint);
                    InvokeError::Connect {
                        endpoint: endpoint_s,
                        source: err,
                    }
                } else {
                    InvokeError::Transport {
                        endpoint: endpoint_s,
                        source: err,
                    }
                });
            }
        }
        outcome.endpoint = Some(endpoint);
        outcome
    }
}

fn prepare(event: &Event, event_id: String) -> Result<Prepared, (String, HeaderError)> {
    let time = event::event_time_now();
    match event::event_headers(event, &event_id, &time) {
        Ok(headers) => Ok(Prepared {
            event_id,
            method: if event.body.is_some() {
                Method::POST
            } else {
                Method::GET
            },
            headers,
            body: event.body.clone(),
        }),
        Err(e) => Err((event_id, e)),
    }
}
