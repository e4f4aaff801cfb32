//! `kubeless ui`: a web dashboard over the same API calls as the other commands, with the
//! user's kubeconfig (their kubectl rights) or, in a cluster, the pod's ServiceAccount.
//!
//! Every asset is compiled into the binary. The server binds loopback by default and answers
//! only a caller holding this run's token (see `access`): the browser that opened the printed
//! URL, or a script sending it as a bearer token.

mod access;
mod chart;
mod html;
mod templates;
mod view;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Extension, Form, Json, Router,
    extract::{Path, Query, Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::{self, Next},
    response::{
        Html, IntoResponse, Redirect, Response,
        sse::{Event as SseEvent, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::{
    api::{apps::v1::Deployment, events::v1::Event},
    jiff::Timestamp,
};
use kube::{
    ResourceExt,
    api::{ListParams, PostParams},
};
use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger, KafkaTrigger, KinesisTrigger, NatsTrigger,
};
use serde::{Deserialize, Serialize};

use crate::{
    args::{
        CronjobArgs, CronjobCmd, DryrunArgs, DryrunFormat, FunctionFlags, HttpCmd, HttpCreateArgs,
        KafkaCmd, KinesisCmd, KinesisTriggerArgs, KubeArgs, NameArg, NatsCmd, SelectorTriggerArgs,
        TriggerCmd,
    },
    ctx::Ctx,
    error::{Error, Result},
    function::{self, CallRequest},
    selector, source, spec, wait,
};

/// `kubeless ui`.
#[derive(Debug, Clone, clap::Args)]
pub struct UiArgs {
    /// Port to serve the dashboard on (0 picks a free one).
    #[arg(long, env = "KUBELESS_UI_PORT", default_value_t = 8090)]
    pub port: u16,
    /// Address to bind. Keep the loopback default on a workstation; in a cluster, bind
    /// loopback too and reach it with `kubectl port-forward` or an authenticating proxy.
    #[arg(long, env = "KUBELESS_UI_ADDRESS", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub address: IpAddr,
    /// More Host names to answer to, e.g. the name an authenticating proxy forwards
    /// (comma separated). Loopback names are always accepted.
    #[arg(
        long = "allowed-host",
        env = "KUBELESS_UI_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Also serve /healthz and /readyz on this address (for a pod's probes).
    #[arg(long = "admin-addr", env = "KUBELESS_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Read the access token from this file (at least 16 letters, digits or `-._~`) instead of
    /// making a random one, e.g. from a Secret mounted in the dashboard's pod.
    #[arg(long = "token-file", env = "KUBELESS_UI_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

struct AppState {
    ctx: Ctx,
    keys: access::Keys,
    started: Instant,
    /// Metric samples per function, for the charts.
    samples: Mutex<HashMap<String, VecDeque<chart::Sample>>>,
}

type Shared = Arc<AppState>;

/// Connects like the other commands; inside a pod with no kubeconfig, uses its ServiceAccount.
async fn connect(kube: &KubeArgs) -> Result<Ctx> {
    let no_kubeconfig = kube.kubeconfig.is_none()
        && std::env::var_os("KUBECONFIG").is_none()
        && std::env::var_os("HOME")
            .map(|h| !std::path::Path::new(&h).join(".kube/config").exists())
            .unwrap_or(true);
    if no_kubeconfig && std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        let config = kube::Config::incluster().map_err(|e| {
            Error::usage(format!("reading the pod's ServiceAccount credentials: {e}"))
        })?;
        let namespace = kube
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| config.default_namespace.clone());
        let api_host = config.cluster_url.host().unwrap_or("localhost").to_string();
        let client = kube::Client::try_from(config).map_err(Error::Client)?;
        return Ok(Ctx {
            client,
            namespace,
            api_host,
        });
    }
    Ctx::connect(kube).await
}

/// Serves until Ctrl-C. Prints the URL on stdout once listening.
pub async fn run(kube: &KubeArgs, args: UiArgs) -> Result<()> {
    let UiArgs {
        port,
        address,
        allowed_hosts,
        admin_addr,
        token_file,
    } = args;
    let token = match &token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::usage(format!("reading the token file {}: {e}", path.display()))
            })?;
            let token = text.trim().to_string();
            access::check_token(&token)
                .map_err(|why| Error::usage(format!("the token file {}: {why}", path.display())))?;
            token
        }
        None => access::random_secret(48),
    };
    let ctx = connect(kube).await?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(address, port))
        .await
        .map_err(|e| Error::usage(format!("listening on {address}:{port}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::usage(format!("listening on {address}:{port}: {e}")))?;
    let state = Arc::new(AppState {
        ctx,
        keys: access::Keys::new(token, local.port()),
        started: Instant::now(),
        samples: Mutex::new(HashMap::new()),
    });
    let shown = if address.is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        address
    };
    // The one place the token is shown: whoever started the command opens this URL.
    let url = match shown {
        IpAddr::V6(a) => format!("http://[{a}]:{}/?token={}", local.port(), state.keys.access),
        IpAddr::V4(a) => format!("http://{a}:{}/?token={}", local.port(), state.keys.access),
    };
    crate::output::println(&format!("Kubeless dashboard on {url} (Ctrl-C stops it)"))?;
    if let Some(addr) = admin_addr {
        let admin = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::usage(format!("listening on {addr}: {e}")))?;
        let health = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(|| async { "ok" }));
        tokio::spawn(async move {
            let _ = axum::serve(admin, health).await;
        });
    }
    let hosts = access::Hosts {
        bind: address,
        extra: allowed_hosts,
    };
    let app = router(state, hosts);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Error::usage(format!("serving the dashboard: {e}")))
}

fn router(state: Shared, hosts: access::Hosts) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/functions") }))
        .route("/assets/style.css", get(style))
        .route("/assets/app.js", get(script))
        .route("/functions", get(functions_page).post(create_function))
        .route("/functions/new", get(new_function_page))
        .route("/functions/{name}", get(function_page))
        .route("/functions/{name}/code", post(save_code_form))
        .route("/functions/{name}/call", post(call_form))
        .route("/functions/{name}/delete", post(delete_function))
        .route("/functions/{name}/logs", get(logs_text))
        .route("/functions/{name}/charts", get(charts))
        .route("/functions/{name}/status", get(status_fragment))
        .route("/api/functions/{name}/code", post(save_code_api))
        .route("/api/functions/{name}/rollout", get(rollout))
        .route("/api/functions/{name}/call", post(call_api))
        .route("/api/functions/{name}/logs", get(logs_sse))
        .route("/triggers", get(triggers_page))
        .route("/triggers/{kind}", post(create_trigger))
        .route("/triggers/{kind}/{name}/delete", post(delete_trigger))
        .layer(middleware::from_fn_with_state(
            (state.clone(), hosts),
            guard,
        ))
        .with_state(state)
}

// ---------------------------------------------------------------- protection

async fn guard(
    State((state, hosts)): State<(Shared, access::Hosts)>,
    mut request: Request,
    next: Next,
) -> Response {
    let verdict = access::check(
        request.method(),
        request.uri(),
        request.headers(),
        &state.keys,
        &hosts,
    );
    let mut response = match verdict {
        access::Verdict::Allow(auth) => {
            request.extensions_mut().insert(auth);
            next.run(request).await
        }
        access::Verdict::Login { location } => {
            let mut r = Redirect::to(&location).into_response();
            if let Ok(v) = HeaderValue::from_str(&state.keys.set_cookie()) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        access::Verdict::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            [
                (header::WWW_AUTHENTICATE, "Bearer realm=\"kubeless-ui\""),
                (header::CACHE_CONTROL, "no-store"),
            ],
            Html(access::unauthorized_page()),
        )
            .into_response(),
        access::Verdict::Refuse(why) => (StatusCode::FORBIDDEN, why).into_response(),
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: with it, browsers send `Origin: null` on form posts.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The refusal of a form posted with a session cookie but without this run's anti-forgery
/// token, if it was.
fn refuse_bad_token(state: &AppState, auth: access::Auth, given: &str) -> Option<Response> {
    if access::form_allowed(auth, &state.keys, given) {
        None
    } else {
        Some(
            (
                StatusCode::FORBIDDEN,
                "missing or wrong dashboard token: reload the page",
            )
                .into_response(),
        )
    }
}

// ---------------------------------------------------------------- errors

fn status_of_error(e: &Error) -> StatusCode {
    match e {
        Error::Kube {
            source: kube::Error::Api(s),
            ..
        } => StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_GATEWAY),
        Error::Kube { .. } | Error::Client(_) => StatusCode::BAD_GATEWAY,
        _ => StatusCode::BAD_REQUEST,
    }
}

#[derive(Serialize)]
struct ApiError {
    error: String,
}

fn api_error(e: &Error) -> Response {
    (status_of_error(e), Json(ApiError { error: e.human() })).into_response()
}

impl AppState {
    fn page(&self, title: &str, nav: html::Nav, body: &str) -> Html<String> {
        Html(html::layout(
            title,
            &self.ctx.namespace,
            &self.keys.csrf,
            nav,
            body,
        ))
    }

    fn error_page(&self, e: &Error) -> Response {
        (
            status_of_error(e),
            self.page(
                "Something went wrong",
                html::Nav::None,
                &html::error_box(Some(&e.human())),
            ),
        )
            .into_response()
    }
}

// ---------------------------------------------------------------- assets

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/style.css"),
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/app.js"),
    )
}

// ---------------------------------------------------------------- reads

async fn list<K>(ctx: &Ctx, what: &str) -> Result<Vec<K>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    <K as kube::Resource>::DynamicType: Default,
{
    ctx.api::<K>()
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| Error::kube(format!("listing {what}"), e))
}

/// Events are extra information: a cluster that refuses them still gets its pages.
async fn events(ctx: &Ctx) -> Vec<Event> {
    list::<Event>(ctx, "events").await.unwrap_or_default()
}

async fn deployments(ctx: &Ctx) -> Result<BTreeMap<String, Deployment>> {
    Ok(list::<Deployment>(ctx, "deployments")
        .await?
        .into_iter()
        .map(|d| (d.name_any(), d))
        .collect())
}

async fn functions_page(State(s): State<Shared>) -> Response {
    let ctx = &s.ctx;
    let result = async {
        let functions = list::<Function>(ctx, "functions").await?;
        let deployments = deployments(ctx).await.unwrap_or_default();
        Ok::<_, Error>((functions, deployments))
    }
    .await;
    match result {
        Ok((functions, deployments)) => {
            let now = Timestamp::now();
            let rows = view::function_rows(&functions, &deployments, now);
            let ev = view::event_rows(&events(ctx).await, &["Function"], None, now, 15);
            s.page(
                "Functions",
                html::Nav::Functions,
                &html::functions_page(&rows, &ev),
            )
            .into_response()
        }
        Err(e) => s.error_page(&e),
    }
}

async fn runtimes(ctx: &Ctx) -> Vec<String> {
    crate::config::supported_runtimes(ctx)
        .await
        .unwrap_or_else(|| {
            crate::config::DEFAULT_RUNTIMES
                .iter()
                .map(|s| s.to_string())
                .collect()
        })
}

#[derive(Deserialize)]
struct NewQuery {
    runtime: Option<String>,
    name: Option<String>,
}

async fn new_function_page(State(s): State<Shared>, Query(q): Query<NewQuery>) -> Response {
    let mut form = view::new_function(runtimes(&s.ctx).await, q.runtime.as_deref());
    form.name = q.name.unwrap_or_default();
    s.page(
        "New function",
        html::Nav::NewFunction,
        &html::new_function_page(&form, &s.keys.csrf, None),
    )
    .into_response()
}

async fn load_function_page(s: &AppState, name: &str) -> Result<view::FunctionPage> {
    let ctx = &s.ctx;
    let f = function::get_function(ctx, name).await?;
    let deployment = ctx.api::<Deployment>().get_opt(name).await.ok().flatten();
    let now = Timestamp::now();
    let ev = view::event_rows(
        &events(ctx).await,
        &["Function", "Deployment", "Pod"],
        None,
        now,
        200,
    )
    .into_iter()
    .filter(|e| e.name == name || e.name.starts_with(&format!("{name}-")))
    .take(15)
    .collect();
    Ok(view::function_page(&f, deployment.as_ref(), ev, now))
}

async fn function_page(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    render_function_page(&s, &name, None).await
}

/// The function page, with a call's answer when the call form was posted without JavaScript.
async fn render_function_page(s: &AppState, name: &str, answer: Option<String>) -> Response {
    match load_function_page(s, name).await {
        Ok(mut page) => {
            page.answer = answer;
            let charts = chart::render(&samples_of(s, name), None);
            s.page(
                &format!("Function {name}"),
                html::Nav::None,
                &html::function_page(&page, &s.keys.csrf, &charts),
            )
            .into_response()
        }
        Err(e) => s.error_page(&e),
    }
}

/// The status part of the function page, for the script's live refresh.
async fn status_fragment(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    match load_function_page(&s, &name).await {
        Ok(page) => (
            [(header::CACHE_CONTROL, "no-store")],
            Html(html::function_status(&page)),
        )
            .into_response(),
        Err(e) => (status_of_error(&e), Html(html::error_box(Some(&e.human())))).into_response(),
    }
}

// ---------------------------------------------------------------- function writes

#[derive(Deserialize)]
struct CreateForm {
    #[serde(rename = "_token", default)]
    token: String,
    name: String,
    runtime: String,
    handler: String,
    code: String,
}

/// The code as `--from-file <module>.<ext>` would give it (content type, checksum).
fn resolved_source(runtime: &str, handler: &str, code: &str) -> (String, spec::Resolved) {
    let file = format!(
        "{}.{}",
        handler.split('.').next().unwrap_or("handler"),
        templates::extension(runtime)
    );
    let resolved = spec::Resolved {
        source: Some(source::from_bytes(&file, code.as_bytes())),
        deps: None,
    };
    (file, resolved)
}

/// Builds and creates the Function with the same builder as `kubeless function deploy`.
async fn create(ctx: &Ctx, name: &str, runtime: &str, handler: &str, code: &str) -> Result<()> {
    let (file, resolved) = resolved_source(runtime, handler, code);
    let flags = FunctionFlags {
        runtime: Some(runtime.to_string()),
        handler: Some(handler.to_string()),
        from_file: Some(file),
        ..FunctionFlags::default()
    };
    spec::validate_deploy(&flags)?;
    crate::config::check_runtime(ctx, runtime).await?;
    let f = spec::apply(name, &ctx.namespace, &flags, resolved, None)?;
    ctx.api::<Function>()
        .create(&PostParams::default(), &f)
        .await
        .map_err(|e| Error::kube(format!("Failed to deploy {name}"), e))?;
    Ok(())
}

async fn create_function(
    State(s): State<Shared>,
    Extension(auth): Extension<access::Auth>,
    Form(f): Form<CreateForm>,
) -> Response {
    if let Some(r) = refuse_bad_token(&s, auth, &f.token) {
        return r;
    }
    let name = f.name.trim().to_string();
    match create(&s.ctx, &name, &f.runtime, f.handler.trim(), &f.code).await {
        Ok(()) => Redirect::to(&format!("/functions/{}", html::seg(&name))).into_response(),
        Err(e) => {
            let mut form = view::new_function(runtimes(&s.ctx).await, Some(&f.runtime));
            form.name = name;
            form.handler = f.handler;
            form.code = f.code;
            (
                status_of_error(&e),
                s.page(
                    "New function",
                    html::Nav::NewFunction,
                    &html::new_function_page(&form, &s.keys.csrf, Some(&e.human())),
                ),
            )
                .into_response()
        }
    }
}

/// Replaces the function's code (same path as `kubeless function update --from-file`).
async fn save_code(ctx: &Ctx, name: &str, code: &str) -> Result<Option<i64>> {
    let current = function::get_function(ctx, name).await?;
    let runtime = current.spec.runtime.clone().unwrap_or_default();
    let handler = current.spec.handler.clone().unwrap_or_default();
    let (_, resolved) = resolved_source(&runtime, &handler, code);
    let updated = function::submit_update(ctx, name, &FunctionFlags::default(), resolved).await?;
    Ok(updated.metadata.generation)
}

#[derive(Deserialize)]
struct CodeForm {
    #[serde(rename = "_token", default)]
    token: String,
    code: String,
}

async fn save_code_form(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Extension(auth): Extension<access::Auth>,
    Form(f): Form<CodeForm>,
) -> Response {
    if let Some(r) = refuse_bad_token(&s, auth, &f.token) {
        return r;
    }
    match save_code(&s.ctx, &name, &f.code).await {
        Ok(_) => Redirect::to(&format!("/functions/{}", html::seg(&name))).into_response(),
        Err(e) => s.error_page(&e),
    }
}

#[derive(Deserialize)]
struct CodeJson {
    code: String,
}

#[derive(Serialize)]
struct Saved {
    generation: Option<i64>,
}

async fn save_code_api(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Json(body): Json<CodeJson>,
) -> Response {
    match save_code(&s.ctx, &name, &body.code).await {
        Ok(generation) => Json(Saved { generation }).into_response(),
        Err(e) => api_error(&e),
    }
}

#[derive(Deserialize)]
struct RolloutQuery {
    generation: Option<i64>,
}

#[derive(Serialize)]
struct Rollout {
    /// `pending`, `ready` or `failed`.
    state: &'static str,
    message: String,
}

/// The rollout of a saved generation: the Ready condition for it, and the Deployment's pods.
async fn rollout(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Query(q): Query<RolloutQuery>,
) -> Response {
    let ctx = &s.ctx;
    let f = match function::get_function(ctx, &name).await {
        Ok(f) => f,
        Err(e) => return api_error(&e),
    };
    let deployment = ctx.api::<Deployment>().get_opt(&name).await.ok().flatten();
    let rolled_out = deployment.as_ref().is_some_and(rolled_out);
    let pods = deployment
        .and_then(|d| d.status)
        .map(|st| {
            format!(
                "pods: {} updated, {} ready of {}",
                st.updated_replicas.unwrap_or(0),
                st.ready_replicas.unwrap_or(0),
                st.replicas.unwrap_or(0)
            )
        })
        .unwrap_or_else(|| "no Deployment yet".into());
    let (state, message) = match wait::phase(&f, q.generation) {
        wait::Phase::Ready if !rolled_out => ("pending", format!("old pods still serve ({pods})")),
        wait::Phase::Ready => ("ready", format!("the new code serves ({pods})")),
        wait::Phase::Failed { reason, message } => ("failed", format!("{reason}: {message}")),
        wait::Phase::Pending(what) => ("pending", format!("{what} ({pods})")),
    };
    Json(Rollout { state, message }).into_response()
}

/// As `kubectl rollout status` decides: the controller saw the latest spec, every replica runs
/// it and is available, and no old replica is left.
fn rolled_out(d: &Deployment) -> bool {
    let Some(st) = d.status.as_ref() else {
        return false;
    };
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = st.updated_replicas.unwrap_or(0);
    st.observed_generation >= d.metadata.generation
        && updated >= want
        && st.replicas.unwrap_or(0) <= updated
        && st.available_replicas.unwrap_or(0) >= updated
}

#[derive(Deserialize)]
struct DeleteForm {
    #[serde(rename = "_token", default)]
    token: String,
}

async fn delete_function(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Extension(auth): Extension<access::Auth>,
    Form(f): Form<DeleteForm>,
) -> Response {
    if let Some(r) = refuse_bad_token(&s, auth, &f.token) {
        return r;
    }
    match function::delete(&s.ctx, &name).await {
        Ok(()) => {
            if let Ok(mut m) = s.samples.lock() {
                m.remove(&name);
            }
            Redirect::to("/functions").into_response()
        }
        Err(e) => s.error_page(&e),
    }
}

// ---------------------------------------------------------------- call

#[derive(Deserialize)]
struct CallInput {
    method: String,
    #[serde(default)]
    headers: String,
    #[serde(default)]
    body: String,
}

#[derive(Serialize)]
struct CallOutput {
    status: u16,
    millis: f64,
    headers: Vec<(String, String)>,
    body: String,
}

/// `Name: value` lines.
fn parse_headers(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| Error::usage(format!("header line {line:?} is not \"Name: value\"")))?;
        let k = k.trim();
        if k.is_empty() || header::HeaderName::from_bytes(k.as_bytes()).is_err() {
            return Err(Error::usage(format!("{k:?} is not a valid header name")));
        }
        if HeaderValue::from_str(v.trim()).is_err() {
            return Err(Error::usage(format!(
                "the value of header {k} is not valid"
            )));
        }
        out.push((k.to_string(), v.trim().to_string()));
    }
    Ok(out)
}

async fn do_call(ctx: &Ctx, name: &str, input: CallInput) -> Result<CallOutput> {
    let method = Method::from_bytes(input.method.trim().to_ascii_uppercase().as_bytes())
        .map_err(|_| Error::usage(format!("{:?} is not an HTTP method", input.method)))?;
    let headers = parse_headers(&input.headers)?;
    let body = if method == Method::GET || method == Method::HEAD {
        Vec::new()
    } else {
        input.body.into_bytes()
    };
    let answer = function::send_call(
        ctx,
        name,
        CallRequest {
            method,
            headers,
            body,
            event_namespace: "ui.kubeless.io",
        },
    )
    .await?;
    Ok(CallOutput {
        status: answer.status.as_u16(),
        millis: answer.elapsed.as_secs_f64() * 1000.0,
        headers: answer.headers,
        body: String::from_utf8_lossy(&answer.body).into_owned(),
    })
}

async fn call_api(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Json(input): Json<CallInput>,
) -> Response {
    match do_call(&s.ctx, &name, input).await {
        Ok(out) => Json(out).into_response(),
        Err(e) => api_error(&e),
    }
}

#[derive(Deserialize)]
struct CallForm {
    #[serde(rename = "_token", default)]
    token: String,
    #[serde(flatten)]
    input: CallInput,
}

async fn call_form(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Extension(auth): Extension<access::Auth>,
    Form(f): Form<CallForm>,
) -> Response {
    if let Some(r) = refuse_bad_token(&s, auth, &f.token) {
        return r;
    }
    let answer = match do_call(&s.ctx, &name, f.input).await {
        Ok(out) => html::call_answer(out.status, out.millis, &out.headers, &out.body),
        Err(e) => html::error_box(Some(&e.human())),
    };
    render_function_page(&s, &name, Some(answer)).await
}

// ---------------------------------------------------------------- logs

/// The log so far, as plain text (for browsers without JavaScript).
async fn logs_text(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    let read = async {
        let mut text = Vec::new();
        let mut stream = function::log_stream(&s.ctx, &name, false, None, None).await?;
        futures::AsyncReadExt::read_to_end(&mut stream, &mut text)
            .await
            .map_err(|e| Error::usage(format!("reading the log of {name}: {e}")))?;
        Ok::<_, Error>(String::from_utf8_lossy(&text).into_owned())
    };
    match read.await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(e) => (status_of_error(&e), e.human()).into_response(),
    }
}

/// The log followed live as server-sent events: `line` events, and a `status` event when no pod
/// can be read yet (the browser reconnects after `retry`).
async fn logs_sse(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    type Item = std::result::Result<SseEvent, std::convert::Infallible>;
    let stream: futures::stream::BoxStream<'static, Item> =
        match function::log_stream(&s.ctx, &name, true, None, None).await {
            Ok(reader) => {
                let opened = futures::stream::once(async {
                    Ok(SseEvent::default().event("status").data("following"))
                });
                let lines = reader.lines().map(|line| match line {
                    Ok(l) => Ok(SseEvent::default().event("line").data(l)),
                    Err(e) => Ok(SseEvent::default()
                        .event("status")
                        .data(format!("log stream ended: {e}"))),
                });
                opened.chain(lines).boxed()
            }
            Err(e) => {
                let msg = e.human();
                futures::stream::once(async move {
                    Ok(SseEvent::default()
                        .event("status")
                        .retry(Duration::from_secs(3))
                        .data(msg))
                })
                .boxed()
            }
        };
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

// ---------------------------------------------------------------- charts

fn samples_of(s: &AppState, name: &str) -> Vec<chart::Sample> {
    s.samples
        .lock()
        .map(|m| {
            m.get(name)
                .map(|q| q.iter().cloned().collect())
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

/// Scrapes the function once, records the sample and answers the charts fragment.
async fn charts(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    let scraped = function::scrape(&s.ctx, &name).await;
    let error = match scraped {
        Ok(text) => {
            let sample = chart::Sample::from_metrics(s.started.elapsed().as_secs_f64(), &text);
            if let Ok(mut m) = s.samples.lock() {
                let q = m.entry(name.clone()).or_default();
                q.push_back(sample);
                while q.len() > chart::MAX_SAMPLES {
                    q.pop_front();
                }
            }
            None
        }
        Err(e) => Some(e.human()),
    };
    (
        [(header::CACHE_CONTROL, "no-store")],
        Html(chart::render(&samples_of(&s, &name), error.as_deref())),
    )
        .into_response()
}

// ---------------------------------------------------------------- triggers

fn conditions_of<T: Serialize>(obj: &T) -> Vec<kubeless_api::Condition> {
    serde_json::to_value(obj)
        .ok()
        .and_then(|v| v.pointer("/status/conditions").cloned())
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default()
}

fn age_of<K: kube::Resource>(obj: &K, now: Timestamp) -> Option<i64> {
    obj.meta()
        .creation_timestamp
        .as_ref()
        .map(|t| view::secs_since(t.0, now))
}

async fn section<K, F>(
    ctx: &Ctx,
    kind: &view::TriggerKind,
    now: Timestamp,
    row: F,
) -> view::TriggerSection
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Serialize,
    <K as kube::Resource>::DynamicType: Default,
    F: Fn(&K) -> (String, String),
{
    let (rows, error) = match list::<K>(ctx, &format!("{}s", kind.title)).await {
        Ok(mut items) => {
            items.sort_by_key(|i| i.name_any());
            let rows = items
                .iter()
                .map(|i| {
                    let (target, detail) = row(i);
                    view::TriggerRow::new(
                        i.name_any(),
                        target,
                        detail,
                        &conditions_of(i),
                        age_of(i, now),
                    )
                })
                .collect();
            (rows, None)
        }
        Err(e) => (Vec::new(), Some(e.human())),
    };
    view::TriggerSection {
        kind: kind.kind,
        title: kind.title,
        detail_header: kind.detail_header,
        fields: kind.fields,
        rows,
        error,
    }
}

async fn render_triggers(s: &AppState, error: Option<&str>) -> String {
    let ctx = &s.ctx;
    let now = Timestamp::now();
    let kinds = view::trigger_kinds();
    let mut sections = Vec::new();
    for k in kinds {
        let sec = match k.kind {
            "http" => {
                section::<HttpTrigger, _>(ctx, k, now, |t| {
                    (
                        t.spec.function_name.clone(),
                        format!(
                            "{}{}",
                            t.spec.host_name.clone().unwrap_or_default(),
                            t.spec.path.clone().unwrap_or_else(|| "/".into())
                        ),
                    )
                })
                .await
            }
            "cronjob" => {
                section::<CronJobTrigger, _>(ctx, k, now, |t| {
                    (t.spec.function_name.clone(), t.spec.schedule.clone())
                })
                .await
            }
            "kafka" => {
                section::<KafkaTrigger, _>(ctx, k, now, |t| {
                    (
                        selector::to_query(&t.spec.function_selector),
                        t.spec.topic.clone(),
                    )
                })
                .await
            }
            "nats" => {
                section::<NatsTrigger, _>(ctx, k, now, |t| {
                    (
                        selector::to_query(&t.spec.function_selector),
                        t.spec.topic.clone(),
                    )
                })
                .await
            }
            _ => {
                section::<KinesisTrigger, _>(ctx, k, now, |t| {
                    (t.spec.function_name.clone(), t.spec.stream.clone())
                })
                .await
            }
        };
        sections.push(sec);
    }
    let mut functions: Vec<String> = list::<Function>(ctx, "functions")
        .await
        .unwrap_or_default()
        .iter()
        .map(|f| f.name_any())
        .collect();
    functions.sort();
    let ev = view::event_rows(
        &events(ctx).await,
        &[
            "HTTPTrigger",
            "CronJobTrigger",
            "KafkaTrigger",
            "NATSTrigger",
            "KinesisTrigger",
        ],
        None,
        now,
        15,
    );
    html::triggers_page(&sections, &functions, &ev, &s.keys.csrf, error)
}

async fn triggers_page(State(s): State<Shared>) -> Response {
    let body = render_triggers(&s, None).await;
    s.page("Triggers", html::Nav::Triggers, &body)
        .into_response()
}

/// The create form of any trigger kind: every field is optional here, the command checks them.
#[derive(Debug, Deserialize, Default)]
struct TriggerForm {
    #[serde(rename = "_token", default)]
    token: String,
    name: String,
    function: Option<String>,
    hostname: Option<String>,
    path: Option<String>,
    gateway: Option<String>,
    schedule: Option<String>,
    payload: Option<String>,
    topic: Option<String>,
    selector: Option<String>,
    stream: Option<String>,
    region: Option<String>,
    secret: Option<String>,
    endpoint: Option<String>,
}

fn given(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

const WRITE: DryrunArgs = DryrunArgs {
    dryrun: false,
    output: DryrunFormat::Yaml,
};

/// The `kubeless trigger <kind> create` command the form stands for; it runs the same code.
fn create_command(kind: &str, f: TriggerForm) -> Result<TriggerCmd> {
    let name = f.name.trim().to_string();
    Ok(match kind {
        "http" => TriggerCmd::Http(HttpCmd::Create(HttpCreateArgs {
            name,
            function_name: given(f.function)
                .ok_or_else(|| Error::usage("choose the function to call"))?,
            path: given(f.path),
            hostname: given(f.hostname),
            enable_tls_acme: false,
            gateway: given(f.gateway).unwrap_or_else(|| "nginx".into()),
            basic_auth_secret: None,
            tls_secret: None,
            cors_enable: false,
            dry: WRITE,
        })),
        "cronjob" => TriggerCmd::Cronjob(CronjobCmd::Create(CronjobArgs {
            name,
            schedule: given(f.schedule),
            function: given(f.function),
            payload: given(f.payload),
            payload_from_file: None,
            dry: WRITE,
        })),
        "kafka" => TriggerCmd::Kafka(KafkaCmd::Create(SelectorTriggerArgs {
            name,
            trigger_topic: given(f.topic),
            function_selector: given(f.selector),
            dry: WRITE,
        })),
        "nats" => TriggerCmd::Nats(NatsCmd::Create(SelectorTriggerArgs {
            name,
            trigger_topic: given(f.topic),
            function_selector: given(f.selector),
            dry: WRITE,
        })),
        "kinesis" => TriggerCmd::Kinesis(KinesisCmd::Create(KinesisTriggerArgs {
            name,
            stream: given(f.stream),
            aws_region: given(f.region),
            shard_id: None,
            function_name: given(f.function),
            secret: given(f.secret),
            endpoint: given(f.endpoint),
            dry: WRITE,
        })),
        other => return Err(Error::usage(format!("unknown trigger kind {other:?}"))),
    })
}

fn delete_command(kind: &str, name: String) -> Result<TriggerCmd> {
    let a = NameArg { name };
    Ok(match kind {
        "http" => TriggerCmd::Http(HttpCmd::Delete(a)),
        "cronjob" => TriggerCmd::Cronjob(CronjobCmd::Delete(a)),
        "kafka" => TriggerCmd::Kafka(KafkaCmd::Delete(a)),
        "nats" => TriggerCmd::Nats(NatsCmd::Delete(a)),
        "kinesis" => TriggerCmd::Kinesis(KinesisCmd::Delete(a)),
        other => return Err(Error::usage(format!("unknown trigger kind {other:?}"))),
    })
}

async fn trigger_write(s: &AppState, cmd: Result<TriggerCmd>) -> Response {
    let result = match cmd {
        Ok(cmd) => crate::trigger::run(&s.ctx, cmd).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Redirect::to("/triggers").into_response(),
        Err(e) => {
            let body = render_triggers(s, Some(&e.human())).await;
            (
                status_of_error(&e),
                s.page("Triggers", html::Nav::Triggers, &body),
            )
                .into_response()
        }
    }
}

async fn create_trigger(
    State(s): State<Shared>,
    Path(kind): Path<String>,
    Extension(auth): Extension<access::Auth>,
    Form(f): Form<TriggerForm>,
) -> Response {
    if let Some(r) = refuse_bad_token(&s, auth, &f.token) {
        return r;
    }
    trigger_write(&s, create_command(&kind, f)).await
}

async fn delete_trigger(
    State(s): State<Shared>,
    Path((kind, name)): Path<(String, String)>,
    Extension(auth): Extension<access::Auth>,
    Form(f): Form<DeleteForm>,
) -> Response {
    if let Some(r) = refuse_bad_token(&s, auth, &f.token) {
        return r;
    }
    trigger_write(&s, delete_command(&kind, name)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_are_one_human_sentence() {
        let status = kube::core::Status::failure(
            "functions.kubeless.io \"x\" already exists",
            "AlreadyExists",
        )
        .with_code(409);
        let e = Error::kube("Failed to deploy x", kube::Error::Api(Box::new(status)));
        // The CLI's one sentence: what failed, the server's answer, what to do next.
        assert_eq!(
            e.human(),
            "Failed to deploy x: the API server answered 409 (functions.kubeless.io \"x\" \
             already exists). Change the existing object with the matching `update` command, \
             or delete it first"
        );
        assert_eq!(status_of_error(&e), StatusCode::CONFLICT);
        assert!(!e.human().contains("ErrorResponse") && !e.human().contains("Status {"));
    }

    #[test]
    fn rollout_is_done_when_only_new_pods_serve() {
        let d = |observed: i64, replicas: i32, updated: i32, available: i32| Deployment {
            metadata: kube::api::ObjectMeta {
                generation: Some(2),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                replicas: Some(1),
                ..Default::default()
            }),
            status: Some(k8s_openapi::api::apps::v1::DeploymentStatus {
                observed_generation: Some(observed),
                replicas: Some(replicas),
                updated_replicas: Some(updated),
                available_replicas: Some(available),
                ..Default::default()
            }),
        };
        assert!(rolled_out(&d(2, 1, 1, 1)));
        assert!(!rolled_out(&d(1, 1, 1, 1)), "old spec");
        assert!(!rolled_out(&d(2, 2, 1, 2)), "an old pod still serves");
        assert!(!rolled_out(&d(2, 1, 1, 0)), "the new pod is not available");
    }

    #[test]
    fn header_lines() {
        let h = parse_headers("Content-Type: application/json\n\nX-A:  b \n").unwrap();
        assert_eq!(
            h,
            vec![
                ("Content-Type".into(), "application/json".into()),
                ("X-A".into(), "b".into())
            ]
        );
        assert!(parse_headers("no colon").is_err());
        assert!(parse_headers("bad name: x").is_err());
    }

    #[test]
    fn trigger_forms_become_the_cli_commands() {
        let f = TriggerForm {
            name: " t1 ".into(),
            function: Some("hello".into()),
            path: Some("".into()),
            ..TriggerForm::default()
        };
        match create_command("http", f).unwrap() {
            TriggerCmd::Http(HttpCmd::Create(a)) => {
                assert_eq!(a.name, "t1");
                assert_eq!(a.function_name, "hello");
                assert_eq!(a.path, None);
                assert_eq!(a.gateway, "nginx");
                assert!(!a.dry.dryrun);
            }
            other => panic!("{other:?}"),
        }
        assert!(create_command("http", TriggerForm::default()).is_err());
        assert!(create_command("smtp", TriggerForm::default()).is_err());
        assert!(matches!(
            delete_command("nats", "n".into()).unwrap(),
            TriggerCmd::Nats(NatsCmd::Delete(_))
        ));
    }
}
