//! `serve`: the HTTP side of the runtime.

use std::convert::Infallible;
use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::cli::{AccessLogFormat, ServeArgs, WorkerKind};
use crate::compile;
use crate::metrics::{self, Metrics};
use crate::pool::{CallOutcome, Pool, PoolStartError, Standby, WorkerSpec};
use crate::protocol::{self, HeaderPairs, RequestHeadRef};

/// Sub-folder of the install volume that `install` fills with pip packages.
pub const PYTHON_PACKAGES_DIR: &str = ".python-packages";

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0} is required (flag --{1} or env {2})")]
    Missing(&'static str, &'static str, &'static str),
    #[error("FUNC_TIMEOUT {0:?} is not a positive number of seconds")]
    BadTimeout(String),
    #[error("cannot tell the worker language from FUNC_RUNTIME {0:?}; set KUBELESS_WORKER")]
    UnknownRuntime(String),
    #[error("cannot create the worker socket folder")]
    SocketDir(#[source] std::io::Error),
    #[error(transparent)]
    Pool(#[from] PoolStartError),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

struct State {
    /// The function's workers: set at start, or by the specialize call in pool mode.
    served: std::sync::OnceLock<Served>,
    /// Pool mode: waiting for a function (see [`kubeless_api::warm`]).
    pool_mode: Option<PoolMode>,
    metrics: Metrics,
    max_body: usize,
    access_log: Option<AccessLogFormat>,
    /// Spans are exported: each call gets a server span, and the function sees its context.
    tracing: bool,
}

/// A running function: its worker pool and settings.
struct Served {
    pool: Pool,
    timeout: Duration,
    /// The CPU limit the pool was sized from.
    cpu_limit: Option<f64>,
    // Kept alive so the socket folder lives as long as the workers.
    _socket_dir: Option<tempfile::TempDir>,
}

/// A pool pod's state before it is given a function.
struct PoolMode {
    token: String,
    /// The pod's own settings; the specialize call adds the function's.
    args: ServeArgs,
    /// One specialize call at a time.
    specializing: tokio::sync::Mutex<()>,
    /// A worker started ahead (Python and Node.js), so the function's first worker does not
    /// wait for its interpreter to start.
    standby: Option<Arc<std::sync::Mutex<Option<Standby>>>>,
}

impl State {
    /// How long a stop waits for in-flight calls.
    fn drain_timeout(&self) -> Duration {
        self.served
            .get()
            .map(|s| s.timeout)
            .unwrap_or(DEFAULT_DRAIN)
    }
}

/// Drain timeout of a pool pod that has no function yet.
const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// A bound, ready server; `run` serves until SIGTERM/SIGINT.
pub struct Server {
    listener: TcpListener,
    state: Arc<State>,
}

/// The standby worker of a pool runtime whose language supports it (Python, Node.js).
fn start_standby(args: &ServeArgs) -> Option<Arc<std::sync::Mutex<Option<Standby>>>> {
    let (program, wargs) = worker_command(args).ok()?;
    let supported = args.runtime.starts_with("python") || args.runtime.starts_with("node");
    if !supported
        || !matches!(
            args.worker,
            WorkerKind::Auto | WorkerKind::Python | WorkerKind::Nodejs
        )
    {
        return None;
    }
    match Standby::start(
        program,
        &wargs,
        vec![("PYTHONUNBUFFERED".into(), "1".into())],
    ) {
        Ok(s) => Some(Arc::new(std::sync::Mutex::new(Some(s)))),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a standby worker; the function's workers start on specialize");
            None
        }
    }
}

/// Validates the function settings and starts its workers (the first one from `standby` when
/// it fits).
async fn start_function(
    args: &ServeArgs,
    standby: Option<Arc<std::sync::Mutex<Option<Standby>>>>,
) -> Result<Served, ServeError> {
    let timeout = parse_timeout(&args.timeout)?;
    let (program, wargs) = worker_command(args)?;
    let noop = args.worker == WorkerKind::Noop;
    let handler = match (&args.handler, noop) {
        (Some(h), _) => h.clone(),
        (None, true) => String::new(),
        (None, false) => {
            return Err(ServeError::Missing(
                "the function name",
                "handler",
                "FUNC_HANDLER",
            ));
        }
    };
    let module = match (&args.module, noop) {
        (Some(m), _) => m.clone(),
        (None, true) => String::new(),
        (None, false) => {
            return Err(ServeError::Missing("the module name", "module", "MOD_NAME"));
        }
    };
    let volume: PathBuf = match (&args.install_volume, noop) {
        (Some(v), _) => v.clone(),
        (None, true) => PathBuf::from("."),
        (None, false) => {
            return Err(ServeError::Missing(
                "the install volume",
                "install-volume",
                "KUBELESS_INSTALL_VOLUME",
            ));
        }
    };
    // Workers resolve the function relative to this, whatever their cwd.
    let volume = std::path::absolute(&volume).unwrap_or(volume);
    let (socket_dir, tmp) = match &args.socket_dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(ServeError::SocketDir)?;
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("kubeless-runtime-")
                .tempdir_in(socket_parent())
                .map_err(ServeError::SocketDir)?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let mut env: Vec<(OsString, OsString)> = vec![
        ("FUNC_HANDLER".into(), handler.into()),
        ("MOD_NAME".into(), module.into()),
        ("FUNC_TIMEOUT".into(), args.timeout.clone().into()),
        ("FUNC_RUNTIME".into(), args.runtime.clone().into()),
        ("FUNC_MEMORY_LIMIT".into(), args.memory_limit.clone().into()),
        (
            "KUBELESS_INSTALL_VOLUME".into(),
            volume.clone().into_os_string(),
        ),
        (
            "KUBELESS_PYTHON_PACKAGES".into(),
            volume.join(PYTHON_PACKAGES_DIR).into_os_string(),
        ),
        ("PYTHONUNBUFFERED".into(), "1".into()),
    ];
    env.extend(
        args.worker_env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    let cpu_limit = crate::sizing::cgroup_cpu_limit(&args.cgroup_root);
    let size = crate::sizing::pool_size(crate::sizing::SizingInput {
        workers: args.workers,
        min_workers: args.min_workers,
        max_workers: args.max_workers,
        idle_timeout: Duration::try_from_secs_f64(args.worker_idle_timeout)
            .unwrap_or(Duration::MAX),
        cpu_limit,
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    });
    let spec = WorkerSpec {
        program,
        args: wargs,
        env,
        socket_dir,
        start_timeout: Duration::try_from_secs_f64(args.worker_start_timeout)
            .unwrap_or(Duration::from_secs(60)),
        max_reply_bytes: args.max_reply_bytes.unwrap_or(args.max_body_bytes),
        standby,
    };
    let pool = Pool::start(spec, size, timeout).await?;
    Ok(Served {
        pool,
        timeout,
        cpu_limit,
        _socket_dir: tmp,
    })
}

fn parse_timeout(s: &str) -> Result<Duration, ServeError> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| ServeError::BadTimeout(s.into()))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(ServeError::BadTimeout(s.into()));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| ServeError::BadTimeout(s.into()))
}

fn worker_command(args: &ServeArgs) -> Result<(OsString, Vec<OsString>), ServeError> {
    let kind = match args.worker {
        WorkerKind::Auto if args.runtime.starts_with("python") => WorkerKind::Python,
        WorkerKind::Auto
            if args.runtime.starts_with("nodejs") || args.runtime.starts_with("node") =>
        {
            WorkerKind::Nodejs
        }
        WorkerKind::Auto if args.runtime.starts_with("ruby") => WorkerKind::Ruby,
        WorkerKind::Auto if args.runtime.starts_with("php") => WorkerKind::Php,
        WorkerKind::Auto if args.runtime.starts_with("go") => WorkerKind::Go,
        WorkerKind::Auto if args.runtime.starts_with("java") => WorkerKind::Java,
        WorkerKind::Auto => return Err(ServeError::UnknownRuntime(args.runtime.clone())),
        k => k,
    };
    Ok(match kind {
        WorkerKind::Python => (
            args.python.clone().into_os_string(),
            vec![args.python_worker.clone().into_os_string()],
        ),
        WorkerKind::Nodejs => (
            args.node.clone().into_os_string(),
            vec![args.nodejs_worker.clone().into_os_string()],
        ),
        WorkerKind::Ruby => (
            args.ruby.clone().into_os_string(),
            vec![args.ruby_worker.clone().into_os_string()],
        ),
        WorkerKind::Php => (
            args.php.clone().into_os_string(),
            vec![args.php_worker.clone().into_os_string()],
        ),
        WorkerKind::Go => (
            install_volume(args)
                .join(compile::GO_BINARY)
                .into_os_string(),
            vec![],
        ),
        WorkerKind::Java => {
            let vol = install_volume(args);
            let mut wargs: Vec<OsString> =
                args.java_opts.split_whitespace().map(Into::into).collect();
            let mut cp = vol.join(compile::JAVA_CLASSES).into_os_string();
            cp.push(":");
            cp.push(vol.join(compile::JAVA_LIB).join("*"));
            wargs.extend(["-cp".into(), cp, compile::JAVA_WORKER_CLASS.into()]);
            (args.java.clone().into_os_string(), wargs)
        }
        WorkerKind::Noop | WorkerKind::Auto => {
            let exe = std::env::current_exe().map_err(ServeError::SocketDir)?;
            (exe.into_os_string(), vec!["noop-worker".into()])
        }
    })
}

/// The install volume as an absolute path (compiled workers live in it).
fn install_volume(args: &ServeArgs) -> PathBuf {
    let vol = args.install_volume.clone().unwrap_or_default();
    std::path::absolute(&vol).unwrap_or(vol)
}

impl Server {
    /// Validate the config, start the workers and bind the port. With a pool token and no
    /// handler (pool mode), only bind: the workers start when a function arrives.
    pub async fn bind(args: ServeArgs) -> Result<Self, ServeError> {
        let pool_mode = match args.pool_token.as_deref().map(str::trim) {
            Some(token) if !token.is_empty() && args.handler.is_none() => Some(PoolMode {
                token: token.to_string(),
                args: args.clone(),
                specializing: tokio::sync::Mutex::new(()),
                standby: start_standby(&args),
            }),
            _ => None,
        };
        let served = std::sync::OnceLock::new();
        if pool_mode.is_none() {
            let _ = served.set(start_function(&args, None).await?);
        }
        let addr = SocketAddr::new(args.listen_address, args.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        match served.get() {
            Some(s) => {
                let size = s.pool.size();
                tracing::info!(%addr, min_workers = size.min, max_workers = size.max, cpu_limit = ?s.cpu_limit, timeout_s = s.timeout.as_secs_f64(), "function runtime ready");
            }
            None => {
                tracing::info!(%addr, runtime = %args.runtime, "warm pool runtime ready; waiting for a function")
            }
        }
        Ok(Self {
            listener,
            state: Arc::new(State {
                served,
                pool_mode,
                metrics: Metrics::new(),
                max_body: args.max_body_bytes,
                access_log: args.access_log.then_some(args.access_log_format),
                tracing: !args.otlp_endpoint.trim().is_empty(),
            }),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accept connections until SIGTERM/SIGINT, then let open connections
    /// finish their calls (up to the function timeout) and stop.
    pub async fn run(self) {
        self.run_until(shutdown_signal()).await;
    }

    /// Like [`Server::run`], with a caller-supplied shutdown trigger.
    pub async fn run_until(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                () = &mut shutdown => break,
            };
            let (stream, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Typically EMFILE: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let state = self.state.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(state, req, remote).await) }
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            });
        }
        tracing::info!("shutting down: finishing in-flight calls");
        drop(self.listener);
        if tokio::time::timeout(self.state.drain_timeout(), graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("in-flight calls did not finish within the timeout");
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
        }
        _ => std::future::pending().await,
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Headers the proxy manages itself; a worker's value for them is dropped.
fn is_managed_header(name: &str) -> bool {
    matches!(
        name,
        "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "upgrade"
            | "te"
            | "trailer"
    )
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    remote: SocketAddr,
) -> Response<Full<Bytes>> {
    let start = Instant::now();
    let method = req.method().clone();
    let version = req.version();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let header_text = |name: header::HeaderName| {
        state.access_log.and_then(|_| {
            req.headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        })
    };
    let referer = header_text(header::REFERER);
    let user_agent = header_text(header::USER_AGENT);
    let resp = match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "OK"),
        kubeless_api::warm::SPECIALIZE_PATH if state.pool_mode.is_some() => {
            specialize(&state, req).await
        }
        "/metrics" => match state.metrics.encode() {
            Ok(body) => {
                let mut r = Response::new(Full::new(Bytes::from(body)));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(metrics::CONTENT_TYPE),
                );
                r
            }
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics"),
        },
        _ if state.tracing => {
            let span = crate::trace::server_span(&method, req.uri().path(), req.headers());
            let (resp, failed) = call_function(&state, req, remote)
                .instrument(span.clone())
                .await;
            crate::trace::record_outcome(&span, resp.status().as_u16(), failed);
            state
                .metrics
                .observe(method.as_str(), start.elapsed().as_secs_f64(), failed);
            resp
        }
        _ => {
            let (resp, failed) = call_function(&state, req, remote).await;
            state
                .metrics
                .observe(method.as_str(), start.elapsed().as_secs_f64(), failed);
            resp
        }
    };
    if let Some(format) = state.access_log {
        let bytes = hyper::body::Body::size_hint(resp.body())
            .exact()
            .unwrap_or(0);
        let line = match format {
            AccessLogFormat::Combined => format!(
                "{} - - [{}] \"{} {} {:?}\" {} {} \"{}\" \"{}\"\n",
                remote.ip(),
                chrono::Utc::now().format("%d/%b/%Y:%H:%M:%S %z"),
                method,
                path_and_query,
                version,
                resp.status().as_u16(),
                bytes,
                referer.as_deref().unwrap_or("-"),
                user_agent.as_deref().unwrap_or("-"),
            ),
            AccessLogFormat::Timed => format!(
                "{} {} \"{} {} {:?}\" {} {} {:.3}ms\n",
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                remote.ip(),
                method,
                path_and_query,
                version,
                resp.status().as_u16(),
                bytes,
                start.elapsed().as_secs_f64() * 1000.0,
            ),
        };
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
    }
    resp
}

/// Returns the response and whether the call counts as a failure.
async fn call_function(
    state: &State,
    req: Request<Incoming>,
    remote: SocketAddr,
) -> (Response<Full<Bytes>>, bool) {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, state.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return (
                    text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n"),
                    false,
                );
            }
            return (
                text(StatusCode::BAD_REQUEST, "cannot read the request body\n"),
                false,
            );
        }
    };
    let mut req_headers = parts.headers;
    if state.tracing {
        // The function continues the proxy's span, not the caller's.
        crate::trace::inject_current(&mut req_headers);
    }
    let head = RequestHeadRef {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        url: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        headers: HeaderPairs(&req_headers),
        remote_addr: Some(remote.to_string()),
    };
    let prefix = match protocol::encode_prefix(&head, body.len()) {
        Ok(p) => p,
        Err(_) => {
            return (
                text(StatusCode::PAYLOAD_TOO_LARGE, "request too large\n"),
                false,
            );
        }
    };
    let Some(served) = state.served.get() else {
        return (
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "this warm pool runtime has no function yet\n",
            ),
            true,
        );
    };
    match served.pool.call(prefix, body).await {
        CallOutcome::Response { head, body } => {
            let failed = head.error.is_some();
            if let Some(err) = &head.error {
                tracing::error!(error = %err, "function raised");
            }
            let mut r = Response::new(Full::new(body));
            *r.status_mut() =
                StatusCode::from_u16(head.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let h = r.headers_mut();
            for (k, v) in head.headers {
                let name = k.to_ascii_lowercase();
                if is_managed_header(&name) {
                    continue;
                }
                match (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&v),
                ) {
                    (Ok(n), Ok(v)) => {
                        h.append(n, v);
                    }
                    _ => {
                        tracing::warn!(header = %k, "dropping an invalid response header from the function")
                    }
                }
            }
            (r, failed)
        }
        CallOutcome::Timeout => (
            text(
                StatusCode::REQUEST_TIMEOUT,
                "Timeout while processing the function\n",
            ),
            true,
        ),
        CallOutcome::ReplyTooLarge(_) => (
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the function's answer is over the reply size limit (KUBELESS_MAX_REPLY_BYTES)\n",
            ),
            true,
        ),
        CallOutcome::WorkerFailed(_) => (
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the function's worker process died\n",
            ),
            true,
        ),
        CallOutcome::Unavailable => (
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the function runtime is shutting down\n",
            ),
            true,
        ),
    }
}

/// Largest specialize body: the function's code (a ConfigMap holds at most 1 MiB) and its
/// environment, with room for JSON escaping.
const MAX_SPECIALIZE_BYTES: usize = 8 * 1024 * 1024;

fn json_text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error_json(status: StatusCode, message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    json_text(
        status,
        serde_json::json!({ "error": message.to_string() }).to_string(),
    )
}

/// The specialize call of a pool pod: checks the token, writes the function's code into the
/// install volume (as the `prepare` init step does), then starts its workers. The pod answers
/// the function's calls from then on; a second call is refused.
async fn specialize(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let Some(mode) = &state.pool_mode else {
        return text(StatusCode::NOT_FOUND, "not a warm pool runtime\n");
    };
    if req.method() != http::Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !kubeless_api::warm::token_matches(&mode.token, given) {
        return text(StatusCode::UNAUTHORIZED, "bad or missing token\n");
    }
    let started = Instant::now();
    let _one = mode.specializing.lock().await;
    if state.served.get().is_some() {
        return text(
            StatusCode::CONFLICT,
            "this runtime already has a function\n",
        );
    }
    let body = match Limited::new(req.into_body(), MAX_SPECIALIZE_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_json(StatusCode::BAD_REQUEST, e),
    };
    let request: kubeless_api::warm::SpecializeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, e),
    };
    let args = specialized_args(&mode.args, &request);
    if let Err(e) = write_source(&args, &request.source).await {
        return error_json(StatusCode::UNPROCESSABLE_ENTITY, crate::error_chain(&e));
    }
    match start_function(&args, mode.standby.clone()).await {
        Ok(served) => {
            let _ = state.served.set(served);
            let ready_ms = started.elapsed().as_secs_f64() * 1000.0;
            tracing::info!(handler = ?args.handler, module = ?args.module, ready_ms, "specialized: serving the function");
            json_text(
                StatusCode::OK,
                serde_json::json!({ "readyMs": ready_ms }).to_string(),
            )
        }
        Err(e) => error_json(StatusCode::UNPROCESSABLE_ENTITY, crate::error_chain(&e)),
    }
}

/// The pool pod's settings with the function's environment: the `FUNC_*` variables set the
/// function, the others reach its workers. The pod's own port, address and volume stay.
fn specialized_args(base: &ServeArgs, req: &kubeless_api::warm::SpecializeRequest) -> ServeArgs {
    let mut args = base.clone();
    for kubeless_api::warm::EnvPair { name, value } in &req.env {
        match name.as_str() {
            "FUNC_HANDLER" => args.handler = Some(value.clone()),
            "MOD_NAME" => args.module = Some(value.clone()),
            "FUNC_TIMEOUT" => args.timeout.clone_from(value),
            "FUNC_RUNTIME" => args.runtime.clone_from(value),
            "FUNC_MEMORY_LIMIT" => args.memory_limit.clone_from(value),
            "FUNC_PORT" | "KUBELESS_INSTALL_VOLUME" | "KUBELESS_LISTEN_ADDRESS" => {}
            n if n == kubeless_api::warm::TOKEN_ENV => {}
            _ => args.worker_env.push((name.clone(), value.clone())),
        }
    }
    args.pool_token = None;
    args
}

#[derive(Debug, thiserror::Error)]
enum SourceError {
    #[error("the pool runtime has no install volume (KUBELESS_INSTALL_VOLUME)")]
    NoVolume,
    #[error("the source file name {0:?} is not a plain file name")]
    BadName(String),
    #[error("cannot stage the function source")]
    Stage(#[source] std::io::Error),
    #[error(transparent)]
    Prepare(#[from] crate::prepare::PrepareError),
    #[error("the prepare task failed")]
    Join(#[source] tokio::task::JoinError),
}

/// Runs the `prepare` step on the code the specialize call brought.
async fn write_source(
    args: &ServeArgs,
    source: &kubeless_api::warm::Source,
) -> Result<(), SourceError> {
    let dest = args.install_volume.clone().ok_or(SourceError::NoVolume)?;
    let file = std::path::Path::new(&source.file);
    let plain = file.components().count() == 1
        && matches!(
            file.components().next(),
            Some(std::path::Component::Normal(_))
        );
    if !plain {
        return Err(SourceError::BadName(source.file.clone()));
    }
    let staging = tempfile::tempdir().map_err(SourceError::Stage)?;
    let staged = staging.path().join(file);
    tokio::fs::write(&staged, source.content.as_bytes())
        .await
        .map_err(SourceError::Stage)?;
    let prepare = crate::cli::PrepareArgs {
        source: staged,
        content_type: source.content_type.clone(),
        checksum: source.checksum.clone(),
        dest,
        deps: None,
        file_name: Some(source.file.clone()),
    };
    // Downloads (`url`) run their own small runtime: keep them off this one.
    tokio::task::spawn_blocking(move || crate::prepare::prepare(&prepare))
        .await
        .map_err(SourceError::Join)??;
    Ok(())
}

/// Longest socket directory we accept: sun_path holds 108 bytes, and the file name
/// (`worker-<slot>-<generation>.sock`) and the temp folder's own name need room too.
const MAX_SOCKET_PARENT_LEN: usize = 60;

/// Where the per-run socket folder goes: the temp dir, unless its path is so long that socket
/// paths would not fit in sun_path (a deep TMPDIR, as devcluster's per-pod folders are); then /tmp.
fn socket_parent() -> PathBuf {
    let tmp = std::env::temp_dir();
    if tmp.as_os_str().len() <= MAX_SOCKET_PARENT_LEN {
        tmp
    } else {
        PathBuf::from("/tmp")
    }
}
