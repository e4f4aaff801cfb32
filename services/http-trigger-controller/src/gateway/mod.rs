//! The built-in gateway: an HTTP/1.1 + h2c server that serves HTTPTriggers itself, routing by
//! host and longest path prefix to the function's ready endpoints (EndpointSlices, balanced
//! here), with basic auth, CORS, the function's timeout and the Kubeless event headers.
//!
//! It makes HTTP triggers work where no ingress controller runs (devcluster), and it wakes
//! functions scaled to zero: their requests are held while they scale up ([`wake`]).

pub mod auth;
pub mod cors;
pub mod feed;
pub mod routes;
pub mod secrets;
pub mod wake;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{
    AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER, TE,
    TRAILER, TRANSFER_ENCODING, UPGRADE, WWW_AUTHENTICATE,
};
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kubeless_api::scale::ScaleState;
use kubeless_invoke::event::{
    EVENT_ID, EVENT_NAMESPACE, EVENT_TIME, EVENT_TYPE, FORM_URLENCODED, event_time_now,
    new_event_id,
};
use kubeless_invoke::lane::CONNECT_TIMEOUT;
use kubeless_invoke::{Endpoint, FunctionTarget, Lane, Resolve, Sent};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::Error;
use crate::metrics::GatewayMetrics;
use routes::{RouteTable, normalised_host};
use secrets::SecretStore;
use wake::{CONNECT_RETRY_STEP, RETRY_AFTER_SECONDS, Ticket, Wake};

/// `event-namespace` of calls that come through an HTTPTrigger.
pub const EVENT_NAMESPACE_HTTP: &str = "httptriggers.kubeless.io";
/// How long open connections may finish their requests after shutdown starts.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Response body: the function's, streamed, or one the gateway wrote.
pub type Body = Either<Incoming, Full<Bytes>>;

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The gateway: current routes, endpoint resolver, secrets, pooled backend client.
pub struct Gateway {
    routes: RwLock<Arc<RouteTable>>,
    resolver: Arc<dyn Resolve>,
    secrets: SecretStore,
    client: Client<HttpConnector, CheckedBody>,
    metrics: GatewayMetrics,
    wake: Wake,
}

/// A request held for a function that was not ready, now that it is.
struct Held {
    /// Its place in the function's wake queue, given up once the request is sent.
    ticket: Ticket,
    started: Instant,
    deadline: tokio::time::Instant,
}

/// What the client side of a request tells about it, for a held request's forwarding.
#[derive(Clone, Copy)]
struct Front<'a> {
    remote: SocketAddr,
    /// The host as sent.
    raw_host: &'a str,
    /// The path to forward (route prefix stripped).
    path: &'a str,
    /// The CORS origin to answer, when the route has CORS on.
    origin: Option<&'a HeaderValue>,
}

/// Why a request for a function at zero was answered without reaching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// The function's wake queue is full.
    QueueFull,
    /// No ready replica (or none listening) within the wake timeout.
    Timeout,
    /// The Function went away while the request waited, or its endpoint is unusable.
    Gone,
}

impl Refused {
    fn answer(self) -> (&'static str, Response<Body>) {
        match self {
            Refused::QueueFull => (
                "wake_queue_full",
                retry_later("too many requests are waiting for the function to scale up\n"),
            ),
            Refused::Timeout => (
                "wake_timeout",
                retry_later("the function did not scale up in time\n"),
            ),
            Refused::Gone => (
                "no_endpoint",
                plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no ready endpoint for the function\n",
                ),
            ),
        }
    }
}

impl Gateway {
    /// A gateway with no routes yet and no scale-to-zero records (routes with
    /// `scale_to_zero` on are held only for Functions fed to [`Gateway::wake`]'s activity).
    pub fn new(
        resolver: Arc<dyn Resolve>,
        secrets: SecretStore,
        metrics: GatewayMetrics,
    ) -> Arc<Self> {
        Self::with_wake(resolver, secrets, metrics, Wake::default())
    }

    /// A gateway with no routes yet that holds requests for functions at zero through `wake`.
    pub fn with_wake(
        resolver: Arc<dyn Resolve>,
        secrets: SecretStore,
        metrics: GatewayMetrics,
        wake: Wake,
    ) -> Arc<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_keepalive(Some(Duration::from_secs(60)));
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .build(connector);
        Arc::new(Self {
            routes: RwLock::new(Arc::new(RouteTable::default())),
            resolver,
            secrets,
            client,
            metrics,
            wake,
        })
    }

    /// The scale-to-zero side: activity records and the wake queue.
    pub fn wake(&self) -> &Wake {
        &self.wake
    }

    /// Replaces the routing table.
    pub fn set_routes(&self, table: RouteTable) {
        let table = Arc::new(table);
        match self.routes.write() {
            Ok(mut r) => *r = table,
            // Swapping an Arc cannot leave it half-written.
            Err(e) => *e.into_inner() = table,
        }
    }

    /// The current routing table.
    pub fn routes(&self) -> Arc<RouteTable> {
        match self.routes.read() {
            Ok(r) => r.clone(),
            Err(e) => e.into_inner().clone(),
        }
    }

    /// Binds `addr` and serves until `shutdown` is cancelled, then drains open connections
    /// (up to [`DRAIN_TIMEOUT`]). Returns the bound address and the server task.
    pub async fn bind(
        self: &Arc<Self>,
        addr: SocketAddr,
        shutdown: CancellationToken,
    ) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        let me = Arc::clone(self);
        let task = tokio::spawn(async move { me.accept_loop(listener, shutdown).await });
        tracing::info!(addr = %local, "gateway listening");
        Ok((local, task))
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30));
        builder.http2().timer(TokioTimer::new());
        let builder = Arc::new(builder);
        let tracker = TaskTracker::new();
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            let (stream, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Usually EMFILE: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let me = Arc::clone(&self);
            let builder = Arc::clone(&builder);
            let token = shutdown.clone();
            tracker.spawn(async move {
                let lane = Arc::new(Lane::default());
                let svc_lane = Arc::clone(&lane);
                let svc = hyper::service::service_fn(move |req| {
                    let me = Arc::clone(&me);
                    let lane = Arc::clone(&svc_lane);
                    async move { Ok::<_, Infallible>(me.handle_in(req, remote, &lane).await) }
                });
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                lane.run(async move {
                    tokio::pin!(conn);
                    tokio::select! {
                        r = conn.as_mut() => {
                            if let Err(e) = r {
                                tracing::debug!(error = %e, "connection ended with an error");
                            }
                        }
                        _ = token.cancelled() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                })
                .await;
            });
        }
        tracker.close();
        if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
        }
    }

    /// Serves one request, through the shared pool.
    pub async fn handle(&self, req: Request<Incoming>, remote: SocketAddr) -> Response<Body> {
        self.serve(req, remote, None).await
    }

    /// Serves one request of an HTTP/1 client connection whose task drives `lane`
    /// ([`Lane::run`]).
    pub async fn handle_in(
        &self,
        req: Request<Incoming>,
        remote: SocketAddr,
        lane: &Lane<CheckedBody>,
    ) -> Response<Body> {
        self.serve(req, remote, Some(lane)).await
    }

    async fn serve(
        &self,
        req: Request<Incoming>,
        remote: SocketAddr,
        lane: Option<&Lane<CheckedBody>>,
    ) -> Response<Body> {
        let started = Instant::now();
        let (outcome, resp) = self.route(req, remote, lane).await;
        self.metrics.outcome(outcome);
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        resp
    }

    async fn route(
        &self,
        req: Request<Incoming>,
        remote: SocketAddr,
        lane: Option<&Lane<CheckedBody>>,
    ) -> (&'static str, Response<Body>) {
        let raw_host = request_host(&req);
        let host = normalised_host(raw_host.str());
        let table = self.routes();
        // Dot segments go before matching, so `/public/../admin` cannot pass a prefix it does
        // not really stand under; a path above the root is refused.
        let Ok(normalised) = routes::normalise_path(req.uri().path()) else {
            return (
                "bad_path",
                plain(StatusCode::BAD_REQUEST, "the path climbs above the root\n"),
            );
        };
        // `route` and `path` borrow the table and the request: nothing is copied to route.
        let Some((route, path)) = table.lookup(&host, &normalised) else {
            return (
                "no_route",
                plain(StatusCode::NOT_FOUND, "no HTTP trigger matches\n"),
            );
        };
        // The runtime's own metrics and health are not the function's to publish.
        if !route.runtime_paths && routes::RUNTIME_PATHS.contains(&path) {
            return (
                "no_route",
                plain(StatusCode::NOT_FOUND, "no HTTP trigger matches\n"),
            );
        }

        if route.cors && cors::is_preflight(req.method(), req.headers()) {
            let mut resp = plain(StatusCode::NO_CONTENT, "");
            *resp.headers_mut() = cors::preflight_headers(req.headers());
            return ("preflight", resp);
        }
        let origin = route
            .cors
            .then(|| req.headers().get(http::header::ORIGIN).cloned())
            .flatten();

        if let Some(secret) = &route.basic_auth_secret {
            match self.secrets.get(&route.namespace, secret).await {
                Ok(Some(creds)) => {
                    let ok = req
                        .headers()
                        .get(AUTHORIZATION)
                        .is_some_and(|h| creds.verify_header(h.as_bytes()));
                    if !ok {
                        let mut resp = plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
                        resp.headers_mut().insert(
                            WWW_AUTHENTICATE,
                            HeaderValue::from_static("Basic realm=\"Authentication Required\""),
                        );
                        return ("unauthorized", with_cors(resp, origin.as_ref()));
                    }
                }
                // Fail closed: a trigger that asks for auth is never served without it.
                Ok(None) => {
                    return (
                        "auth_secret_missing",
                        plain(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "basic auth secret missing or without credentials\n",
                        ),
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, secret, namespace = route.namespace, "reading the basic auth secret failed");
                    return (
                        "auth_secret_error",
                        plain(StatusCode::SERVICE_UNAVAILABLE, "basic auth unavailable\n"),
                    );
                }
            }
        }

        let Some(target) = &route.target else {
            return (
                "no_function",
                plain(StatusCode::SERVICE_UNAVAILABLE, "function not found\n"),
            );
        };
        // Functions without scale to zero pass this one boolean and nothing else; running ones
        // with it, a few lookups. Holding is boxed so its state does not weigh on every request.
        if route.scale_to_zero && self.must_hold(target) {
            let path = path.to_string();
            let front = Front {
                remote,
                raw_host: raw_host.str(),
                path: &path,
                origin: origin.as_ref(),
            };
            return Box::pin(self.hold_and_forward(req, &front, target)).await;
        }
        let endpoint = match self.resolver.resolve(target) {
            Ok(e) => e,
            Err(_) => {
                return (
                    "no_endpoint",
                    with_cors(
                        plain(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "no ready endpoint for the function\n",
                        ),
                        origin.as_ref(),
                    ),
                );
            }
        };

        // HTTP/1 requests go over the client connection's own function connections when its
        // lane has room; HTTP/2 streams (a task each) and the rest over the shared pool.
        let lane = lane.filter(|_| req.version() < Version::HTTP_2);
        let uri = match lane {
            Some(_) => origin_form(path, req.uri()),
            None => backend_uri(endpoint.uri(), path, req.uri()),
        };
        let Some(uri) = uri else {
            return (
                "bad_uri",
                plain(StatusCode::BAD_REQUEST, "bad request URI\n"),
            );
        };
        let (mut parts, body) = req.into_parts();
        prepare_headers(&mut parts.headers, raw_host.value(), remote);
        parts.uri = uri;
        // h2c clients are proxied over HTTP/1.1 connections.
        parts.version = Version::HTTP_11;
        // A request body that breaks while it is forwarded (a malformed chunked encoding) is the
        // client's fault: 400, not the 502 a failed call to the function gets.
        let body_failed = Arc::new(AtomicBool::new(false));
        let body = CheckedBody {
            inner: body,
            failed: Arc::clone(&body_failed),
        };
        let req = Request::from_parts(parts, body);
        let called = match lane {
            Some(lane) => {
                let call = self.call_in_lane(lane, &endpoint, req);
                tokio::time::timeout(target.timeout, call).await
            }
            None => {
                let call = self.client.request(req);
                tokio::time::timeout(target.timeout, call)
                    .await
                    .map(|r| r.map_err(CallFailed::from))
            }
        };
        match called {
            Err(_) => (
                "timeout",
                with_cors(
                    plain(StatusCode::GATEWAY_TIMEOUT, "function timed out\n"),
                    origin.as_ref(),
                ),
            ),
            Ok(Err(_)) if body_failed.load(Ordering::Relaxed) => (
                "bad_request_body",
                with_cors(
                    plain(StatusCode::BAD_REQUEST, "malformed request body\n"),
                    origin.as_ref(),
                ),
            ),
            Ok(Err(e)) => {
                if e.connect {
                    self.resolver.report_failure(target, &endpoint);
                }
                tracing::debug!(error = %e.error, %endpoint, "function call failed");
                (
                    "bad_gateway",
                    with_cors(
                        plain(StatusCode::BAD_GATEWAY, "calling the function failed\n"),
                        origin.as_ref(),
                    ),
                )
            }
            Ok(Ok(resp)) => relay(resp, origin.as_ref()),
        }
    }

    /// Sends `req` (origin-form) over the lane, or over the shared pool when the lane is full.
    async fn call_in_lane(
        &self,
        lane: &Lane<CheckedBody>,
        endpoint: &Endpoint,
        req: Request<CheckedBody>,
    ) -> Result<Response<Incoming>, CallFailed> {
        match lane.send(endpoint, req).await {
            Sent::Answer(resp) => Ok(resp),
            Sent::Failed(e) => Err(CallFailed {
                connect: e.is_connect(),
                error: Box::new(e),
            }),
            Sent::Full(mut req) => {
                let Some(uri) = absolute(endpoint.uri(), req.uri()) else {
                    return Err(CallFailed::other("bad request URI"));
                };
                *req.uri_mut() = uri;
                self.client.request(req).await.map_err(CallFailed::from)
            }
        }
    }

    /// For a function with scale to zero on: records the call (the write is throttled, and for
    /// a function at zero it is the wake-up), and tells whether the request must wait for a
    /// ready replica.
    fn must_hold(&self, target: &FunctionTarget) -> bool {
        // One lookup: `Off` (the route can be a rebuild behind the Function, scale to zero just
        // turned off) records nothing and holds nothing.
        self.wake
            .activity
            .note(target.namespace.as_str(), target.name.as_str())
    }

    /// Holds a request until its function is ready, then sends it once; or refuses it.
    async fn hold_and_forward(
        &self,
        req: Request<Incoming>,
        front: &Front<'_>,
        target: &FunctionTarget,
    ) -> (&'static str, Response<Body>) {
        match self.hold(target).await {
            Ok(held) => self.forward_held(req, front, target, held).await,
            Err(refused) => {
                let (outcome, resp) = refused.answer();
                (outcome, with_cors(resp, front.origin))
            }
        }
    }

    /// Takes a place in the function's queue and waits for a ready replica.
    async fn hold(&self, target: &FunctionTarget) -> Result<Held, Refused> {
        let (ns, name) = (target.namespace.as_str(), target.name.as_str());
        let activity = &self.wake.activity;
        let ticket = self.wake.queue.enter(ns, name).ok_or(Refused::QueueFull)?;
        self.metrics.wake_holds.inc();
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.wake.timeout;
        if activity
            .wait_ready(ns, name, self.wake.timeout)
            .await
            .is_err()
        {
            self.metrics
                .wake_wait
                .observe(started.elapsed().as_secs_f64());
            tracing::info!(
                namespace = ns,
                function = name,
                "a held request timed out waiting for its function to scale up"
            );
            return Err(Refused::Timeout);
        }
        Ok(Held {
            ticket,
            started,
            deadline,
        })
    }

    /// Sends a held request once, on a connection of its own: its pod may have just become
    /// ready while the gateway's EndpointSlices lag, or not listen yet. Resolving and
    /// connecting are retried until the wake deadline, which is safe because nothing was sent;
    /// after the connection is up the request is sent once and never retried.
    async fn forward_held(
        &self,
        req: Request<Incoming>,
        front: &Front<'_>,
        target: &FunctionTarget,
        held: Held,
    ) -> (&'static str, Response<Body>) {
        let Front {
            remote,
            raw_host,
            path,
            origin,
        } = *front;
        let Held {
            ticket,
            started,
            deadline,
        } = held;
        let connected = self.connect_when_up(target, deadline).await;
        self.metrics
            .wake_wait
            .observe(started.elapsed().as_secs_f64());
        drop(ticket);
        let (endpoint, stream) = match connected {
            Ok(c) => c,
            Err(refused) => {
                let (outcome, resp) = refused.answer();
                return (outcome, with_cors(resp, origin));
            }
        };
        let (mut parts, body) = req.into_parts();
        let Some(uri) = origin_form(path, &parts.uri) else {
            return (
                "bad_uri",
                plain(StatusCode::BAD_REQUEST, "bad request URI\n"),
            );
        };
        let host_value = HostValue::parse(raw_host);
        prepare_headers(&mut parts.headers, host_value.value(), remote);
        if !parts.headers.contains_key(HOST)
            && let Some(a) = endpoint.uri().authority()
            && let Ok(v) = HeaderValue::from_str(a.as_str())
        {
            parts.headers.insert(HOST, v);
        }
        parts.uri = uri;
        parts.version = Version::HTTP_11;
        let body_failed = Arc::new(AtomicBool::new(false));
        let body = CheckedBody {
            inner: body,
            failed: Arc::clone(&body_failed),
        };
        let (mut sender, conn) =
            match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
                Ok(h) => h,
                Err(e) => {
                    tracing::debug!(error = %e, %endpoint, "function connection failed");
                    return (
                        "bad_gateway",
                        with_cors(
                            plain(StatusCode::BAD_GATEWAY, "calling the function failed\n"),
                            origin,
                        ),
                    );
                }
            };
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "function connection ended with an error");
            }
        });
        let call = sender.send_request(Request::from_parts(parts, body));
        match tokio::time::timeout(target.timeout, call).await {
            Err(_) => (
                "timeout",
                with_cors(
                    plain(StatusCode::GATEWAY_TIMEOUT, "function timed out\n"),
                    origin,
                ),
            ),
            Ok(Err(_)) if body_failed.load(Ordering::Relaxed) => (
                "bad_request_body",
                with_cors(
                    plain(StatusCode::BAD_REQUEST, "malformed request body\n"),
                    origin,
                ),
            ),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, %endpoint, "function call failed");
                (
                    "bad_gateway",
                    with_cors(
                        plain(StatusCode::BAD_GATEWAY, "calling the function failed\n"),
                        origin,
                    ),
                )
            }
            Ok(Ok(resp)) => relay(resp, origin),
        }
    }

    /// An endpoint of the woken function and an open connection to it, trying again every
    /// [`CONNECT_RETRY_STEP`] until `deadline`.
    async fn connect_when_up(
        &self,
        target: &FunctionTarget,
        deadline: tokio::time::Instant,
    ) -> Result<(Endpoint, TcpStream), Refused> {
        let (ns, name) = (target.namespace.as_str(), target.name.as_str());
        loop {
            match self.resolver.resolve(target) {
                Ok(endpoint) => match connect(&endpoint, deadline).await {
                    Ok(stream) => return Ok((endpoint, stream)),
                    Err(e) => {
                        tracing::debug!(error = %e, %endpoint, "a woken function is not listening yet");
                        self.resolver.report_failure(target, &endpoint);
                    }
                },
                Err(e) if !e.is_retryable() => {
                    tracing::warn!(error = %e, "a held request cannot be resolved");
                    return Err(Refused::Gone);
                }
                Err(_) => {}
            }
            // Deleted while waiting (or scale to zero switched off): nothing more to wait for.
            if self.wake.activity.state(ns, name) == ScaleState::Off {
                return Err(Refused::Gone);
            }
            if tokio::time::Instant::now() + CONNECT_RETRY_STEP >= deadline {
                return Err(Refused::Timeout);
            }
            tokio::time::sleep(CONNECT_RETRY_STEP).await;
        }
    }
}

/// A TCP connection to `endpoint`, given up at `deadline` (5 s per try at most, as the pool's).
async fn connect(
    endpoint: &Endpoint,
    deadline: tokio::time::Instant,
) -> std::io::Result<TcpStream> {
    let limit = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .min(CONNECT_TIMEOUT);
    kubeless_invoke::lane::connect(endpoint, limit).await
}

/// The function's answer, hop-by-hop headers removed, with its outcome label.
fn relay(resp: Response<Incoming>, origin: Option<&HeaderValue>) -> (&'static str, Response<Body>) {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let outcome = match parts.status.as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    let resp = Response::from_parts(parts, Either::Left(body));
    (outcome, with_cors(resp, origin))
}

/// The client's request body on its way to the function; remembers whether reading it failed.
pub struct CheckedBody {
    inner: Incoming,
    failed: Arc<AtomicBool>,
}

impl hyper::body::Body for CheckedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Err(_))) = &polled {
            self.failed.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The request's host as sent: the URI authority (HTTP/2, absolute-form) or the Host header.
fn request_host<B>(req: &Request<B>) -> HostValue {
    match req.uri().authority() {
        Some(a) => HostValue::parse(a.as_str()),
        // A clone shares the header's bytes: no copy on the common path.
        None => HostValue::from_header(req.headers().get(HOST)),
    }
}

/// The host as sent, as text (empty when absent or not visible ASCII) and as the header value
/// to forward (`None` when empty).
struct HostValue(Option<HeaderValue>);

impl HostValue {
    fn parse(raw: &str) -> Self {
        Self(
            (!raw.is_empty())
                .then(|| HeaderValue::from_str(raw).ok())
                .flatten(),
        )
    }

    fn from_header(h: Option<&HeaderValue>) -> Self {
        Self(h.filter(|v| !v.is_empty() && v.to_str().is_ok()).cloned())
    }

    fn str(&self) -> &str {
        self.0.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    fn value(&self) -> Option<&HeaderValue> {
        self.0.as_ref()
    }
}

/// `<path>[?query of original]`: the request target for the function (origin-form).
/// `original`'s path and query are reused without a copy when the route strips nothing.
fn origin_form(path: &str, original: &Uri) -> Option<Uri> {
    let pq = match original.path_and_query() {
        Some(pq) if pq.path() == path => pq.clone(),
        _ => {
            let pq = match original.query() {
                Some(q) => format!("{path}?{q}"),
                None => path.to_string(),
            };
            PathAndQuery::try_from(pq).ok()?
        }
    };
    Some(Uri::from(pq))
}

/// `http://<endpoint authority>` + [`origin_form`]: the pooled client takes absolute URIs.
fn backend_uri(endpoint: &Uri, path: &str, original: &Uri) -> Option<Uri> {
    absolute(endpoint, &origin_form(path, original)?)
}

/// `http://<endpoint authority>` + the path and query of an origin-form `uri`.
fn absolute(endpoint: &Uri, uri: &Uri) -> Option<Uri> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = Some(endpoint.authority()?.clone());
    parts.path_and_query = uri.path_and_query().cloned();
    Uri::from_parts(parts).ok()
}

/// A call to the function that got no answer.
#[derive(Debug)]
struct CallFailed {
    /// The connection could not be opened: the endpoint is reported to the resolver.
    connect: bool,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl CallFailed {
    fn other(text: &'static str) -> Self {
        Self {
            connect: false,
            error: text.into(),
        }
    }
}

impl From<hyper_util::client::legacy::Error> for CallFailed {
    fn from(e: hyper_util::client::legacy::Error) -> Self {
        Self {
            connect: e.is_connect(),
            error: Box::new(e),
        }
    }
}

impl From<hyper::Error> for CallFailed {
    fn from(e: hyper::Error) -> Self {
        Self {
            connect: false,
            error: Box::new(e),
        }
    }
}

fn strip_hop_by_hop(h: &mut HeaderMap) {
    // Headers named by Connection are hop-by-hop too.
    let named: Vec<HeaderName> = h
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        &CONNECTION,
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &TE,
        &TRAILER,
        &TRANSFER_ENCODING,
        &UPGRADE,
    ] {
        h.remove(n);
    }
}

/// Request headers for the function: hop-by-hop removed, Host kept, X-Forwarded-*, and the
/// Kubeless event headers when the client did not send them. `host` is the host as sent.
/// (Values built here take their `String`'s buffer: `HeaderValue::try_from(String)` copies
/// nothing.)
fn prepare_headers(h: &mut HeaderMap, host: Option<&HeaderValue>, remote: SocketAddr) {
    strip_hop_by_hop(h);
    if !h.contains_key(HOST)
        && let Some(v) = host
    {
        h.insert(HOST, v.clone());
    }
    let ip = remote.ip().to_string();
    let xff = match h.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip,
    };
    if let Ok(v) = HeaderValue::try_from(xff) {
        h.insert(X_FORWARDED_FOR.clone(), v);
    }
    if let Some(v) = host {
        h.insert(X_FORWARDED_HOST.clone(), v.clone());
    }
    h.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static("http"));

    if !h.contains_key(EVENT_ID)
        && let Ok(v) = HeaderValue::try_from(new_event_id())
    {
        h.insert(EVENT_ID, v);
    }
    if !h.contains_key(EVENT_TIME)
        && let Ok(v) = HeaderValue::try_from(event_time_now())
    {
        h.insert(EVENT_TIME, v);
    }
    if !h.contains_key(EVENT_TYPE) {
        let v = h
            .get(CONTENT_TYPE)
            .cloned()
            .unwrap_or(HeaderValue::from_static(FORM_URLENCODED));
        h.insert(EVENT_TYPE, v);
    }
    if !h.contains_key(EVENT_NAMESPACE) {
        h.insert(
            EVENT_NAMESPACE,
            HeaderValue::from_static(EVENT_NAMESPACE_HTTP),
        );
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut resp = Response::new(Either::Right(Full::new(Bytes::from_static(
        text.as_bytes(),
    ))));
    *resp.status_mut() = status;
    if !text.is_empty() {
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    resp
}

/// 503 with `Retry-After`: the function is scaling up, or too many requests wait for it.
fn retry_later(text: &'static str) -> Response<Body> {
    let mut resp = plain(StatusCode::SERVICE_UNAVAILABLE, text);
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    resp
}

fn with_cors(mut resp: Response<Body>, origin: Option<&HeaderValue>) -> Response<Body> {
    if let Some(o) = origin {
        let mut req = HeaderMap::with_capacity(1);
        req.insert(http::header::ORIGIN, o.clone());
        cors::decorate_response(&req, resp.headers_mut());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_form_keeps_query() {
        let original: Uri = "/fn/a/b?x=1&y=2".parse().unwrap();
        assert_eq!(
            origin_form("/a/b", &original).unwrap().to_string(),
            "/a/b?x=1&y=2"
        );
        // Nothing stripped: the original path and query as they are.
        let original: Uri = "/a/b?x=1&y=2".parse().unwrap();
        assert_eq!(
            origin_form("/a/b", &original).unwrap().to_string(),
            "/a/b?x=1&y=2"
        );
        let original: Uri = "/fn".parse().unwrap();
        assert_eq!(origin_form("/", &original).unwrap().to_string(), "/");
        // HTTP/2 and absolute-form requests: only the path and query go to the function.
        let original: Uri = "http://fn.example.com/x?q".parse().unwrap();
        assert_eq!(origin_form("/x", &original).unwrap().to_string(), "/x?q");
    }

    #[test]
    fn backend_uri_keeps_query() {
        let ep: Uri = "http://127.0.0.5:8080/".parse().unwrap();
        let original: Uri = "/fn/a/b?x=1&y=2".parse().unwrap();
        assert_eq!(
            backend_uri(&ep, "/a/b", &original).unwrap().to_string(),
            "http://127.0.0.5:8080/a/b?x=1&y=2"
        );
        let original: Uri = "/fn".parse().unwrap();
        assert_eq!(
            backend_uri(&ep, "/", &original).unwrap().to_string(),
            "http://127.0.0.5:8080/"
        );
    }

    #[test]
    fn headers_are_prepared() {
        let mut h = HeaderMap::new();
        h.insert(
            CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert(&KEEP_ALIVE, HeaderValue::from_static("timeout=5"));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(EVENT_ID, HeaderValue::from_static("given-id"));
        h.insert(&X_FORWARDED_FOR, HeaderValue::from_static("10.0.0.1"));
        prepare_headers(
            &mut h,
            HostValue::parse("fn.example.com:8080").value(),
            "127.0.0.9:5555".parse().unwrap(),
        );
        assert!(!h.contains_key(CONNECTION));
        assert!(!h.contains_key("x-secret-hop"));
        assert!(!h.contains_key(&KEEP_ALIVE));
        assert_eq!(h[HOST], "fn.example.com:8080");
        assert_eq!(h[&X_FORWARDED_FOR], "10.0.0.1, 127.0.0.9");
        assert_eq!(h[&X_FORWARDED_PROTO], "http");
        // kept when given, added when absent
        assert_eq!(h[EVENT_ID], "given-id");
        assert_eq!(h[EVENT_TYPE], "application/json");
        assert_eq!(h[EVENT_NAMESPACE], EVENT_NAMESPACE_HTTP);
        assert!(h[EVENT_TIME].to_str().unwrap().ends_with(" +0000 UTC"));
        // no content type: Kubeless's default event type
        let mut h = HeaderMap::new();
        prepare_headers(
            &mut h,
            HostValue::parse("").value(),
            "127.0.0.1:1".parse().unwrap(),
        );
        assert_eq!(h[EVENT_TYPE], FORM_URLENCODED);
        assert_eq!(h[EVENT_ID].len(), kubeless_invoke::event::EVENT_ID_LEN);
        assert!(!h.contains_key(HOST));
    }
}
