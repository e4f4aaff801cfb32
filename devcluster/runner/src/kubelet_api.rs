//! The kubelet API of a node agent: HTTPS on a loopback address, for clients with a certificate
//! from the configured CA (the API server's kubelet client certificate), serving what a
//! kube-apiserver asks of a kubelet:
//!
//! - `GET /containerLogs/{ns}/{pod}/{container}` (`follow`, `tailLines`, `sinceSeconds`,
//!   `sinceTime`, `timestamps`, `previous`, `limitBytes`), from the runner's log files;
//! - `/exec/{ns}/{pod}[/{uid}]/{container}` and `/attach/...` over SPDY/3.1
//!   (`v4.channel.k8s.io`), what the API server speaks to a kubelet, also when kubectl spoke
//!   WebSocket to it;
//! - `/portForward/{ns}/{pod}[/{uid}]` over SPDY/3.1 (`portforward.k8s.io`);
//! - `GET /healthz`.
//!
//! Any client with a certificate from the CA may call every endpoint: there is no
//! SubjectAccessReview (a real kubelet's webhook authorization).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use devcluster_streaming::exec::{self, Options};
use devcluster_streaming::{attach, logs, portforward, remotecommand, upgrade};
use http::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::ctx::Ctx;
use crate::node_agent::{KubeletTls, NodeAgent};
use crate::{Error, Result};

/// The bound socket and its TLS settings, before the pods are known.
pub(crate) struct Listener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    pub port: u16,
}

fn tls_config(tls: &KubeletTls) -> Result<rustls::ServerConfig> {
    let bad = |what: &str, e: &dyn std::fmt::Display| Error::KubeletTls(format!("{what}: {e}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.client_ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| bad("the client CA", &e))?;
        roots.add(cert).map_err(|e| bad("the client CA", &e))?;
    }
    if roots.is_empty() {
        return Err(Error::KubeletTls(
            "the client CA holds no certificate".into(),
        ));
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| bad("the client CA", &e))?;
    let chain = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad("the serving certificate", &e))?;
    let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes())
        .map_err(|e| bad("the serving key", &e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", &e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| bad("the serving certificate", &e))?;
    // SPDY upgrades need HTTP/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Binds the kubelet API's address (loopback only).
pub(crate) async fn bind(agent: &NodeAgent) -> Result<Listener> {
    let addr = agent.kubelet_bind;
    if !addr.ip().is_loopback() {
        return Err(Error::Bind {
            addr,
            source: std::io::Error::other("the kubelet API listens on loopback addresses only"),
        });
    }
    let config = tls_config(&agent.tls)?;
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let port = tcp
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?
        .port();
    Ok(Listener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        port,
    })
}

/// Serves until `stop`.
pub(crate) async fn serve(listener: Listener, ctx: Arc<Ctx>, stop: CancellationToken) {
    let router = router(ctx);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let tcp = tokio::select! {
            r = listener.tcp.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!("kubelet API: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = listener.acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let stop = stop.clone();
        conns.spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!("kubelet API: TLS handshake refused: {e}");
                    return;
                }
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
}

fn router(ctx: Arc<Ctx>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/exec/{ns}/{pod}/{container}", get(exec3).post(exec3))
        .route("/exec/{ns}/{pod}/{uid}/{container}", get(exec4).post(exec4))
        .route("/attach/{ns}/{pod}/{container}", get(attach3).post(attach3))
        .route(
            "/attach/{ns}/{pod}/{uid}/{container}",
            get(attach4).post(attach4),
        )
        .route("/portForward/{ns}/{pod}", get(forward2).post(forward2))
        .route(
            "/portForward/{ns}/{pod}/{uid}",
            get(forward3).post(forward3),
        )
        .fallback(|| async { text(StatusCode::NOT_FOUND, "404 page not found".into()) })
        .with_state(ctx)
}

fn text(status: StatusCode, message: String) -> Response {
    let mut resp = Response::new(Body::from(message));
    *resp.status_mut() = status;
    resp
}

/// The pod, when it runs here (and is the one with `uid`, when given).
fn pod(ctx: &Ctx, ns: &str, name: &str, uid: Option<&str>) -> Option<Arc<Pod>> {
    let pod = ctx.stores.pods.get(&ObjectRef::new(name).within(ns))?;
    match uid {
        Some(uid) if pod.metadata.uid.as_deref() != Some(uid) => None,
        _ => Some(pod),
    }
}

fn pod_not_found(ns: &str, name: &str) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!("pod {ns}/{name} does not run on this node"),
    )
}

async fn container_logs(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, name, container)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(p) = pod(&ctx, &ns, &name, None) else {
        return pod_not_found(&ns, &name);
    };
    let uid = p.metadata.uid.clone();
    let (store, key) = (
        ctx.stores.pods.clone(),
        ObjectRef::<Pod>::new(&name).within(&ns),
    );
    let alive = move || store.get(&key).is_some_and(|p| p.metadata.uid == uid);
    match logs::read(&ctx.config.logs_dir, &ns, &name, &container, &q, alive).await {
        Ok(resp) => resp,
        Err(e) => text(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Session {
    Exec,
    Attach,
}

async fn exec3(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    stream(ctx, Session::Exec, ns, pod, None, container, req).await
}

async fn exec4(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, pod, uid, container)): Path<(String, String, String, String)>,
    req: Request,
) -> Response {
    stream(ctx, Session::Exec, ns, pod, Some(uid), container, req).await
}

async fn attach3(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    stream(ctx, Session::Attach, ns, pod, None, container, req).await
}

async fn attach4(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, pod, uid, container)): Path<(String, String, String, String)>,
    req: Request,
) -> Response {
    stream(ctx, Session::Attach, ns, pod, Some(uid), container, req).await
}

/// Exec or attach: checks, then the SPDY upgrade and the session.
async fn stream(
    ctx: Arc<Ctx>,
    session: Session,
    ns: String,
    name: String,
    uid: Option<String>,
    container: String,
    mut req: Request,
) -> Response {
    if pod(&ctx, &ns, &name, uid.as_deref()).is_none() {
        return pod_not_found(&ns, &name);
    }
    let pairs = Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let mut opts: Options = exec::kubelet_options(pairs);
    opts.container = Some(container.clone());
    if session == Session::Exec && opts.command.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 command".into(),
        );
    }
    if !(opts.stdin || opts.stdout || opts.stderr) {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr".into(),
        );
    }
    let running = ctx.config.running.clone();
    let Some(process) = running
        .get(&ns, &name, &container)
        .map(|p| p.session_process())
    else {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container} is not running in pod {ns}/{name}"),
        );
    };
    if !upgrade::is_spdy_upgrade(&req) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required".into());
    }
    let protocol = match upgrade::negotiate(req.headers(), remotecommand::PROTOCOLS) {
        Ok(p) => p,
        Err(e) => return upgrade::refuse(&e),
    };
    let log = logs::file(&ctx.config.logs_dir, &ns, &name, &container, false);
    upgrade::switch(&mut req, protocol, move |io| async move {
        let session_opts = opts.clone();
        let result = remotecommand::serve(io, opts, move |streams| async move {
            match session {
                Session::Exec => exec::run(&process, &session_opts, streams).await,
                Session::Attach => {
                    if let Some(msg) = attach::refusal(&container, &process, &session_opts) {
                        return exec::failure(msg, Some("BadRequest"), None);
                    }
                    let target =
                        attach::Target::new(container.clone(), log, &process, &session_opts);
                    let still = move || running.get(&ns, &name, &container).is_some();
                    attach::follow(&target, still, streams).await
                }
            }
        })
        .await;
        if let Err(e) = result {
            tracing::debug!("exec/attach session ended: {e}");
        }
    })
}

async fn forward2(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, pod)): Path<(String, String)>,
    req: Request,
) -> Response {
    port_forward(ctx, ns, pod, None, req).await
}

async fn forward3(
    State(ctx): State<Arc<Ctx>>,
    Path((ns, pod, uid)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    port_forward(ctx, ns, pod, Some(uid), req).await
}

async fn port_forward(
    ctx: Arc<Ctx>,
    ns: String,
    name: String,
    uid: Option<String>,
    mut req: Request,
) -> Response {
    let Some(p) = pod(&ctx, &ns, &name, uid.as_deref()) else {
        return pod_not_found(&ns, &name);
    };
    let Some(ip) = p
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("pod {name} is not running: it has no IP address yet"),
        );
    };
    if !upgrade::is_spdy_upgrade(&req) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required".into());
    }
    if let Err(e) = upgrade::negotiate(req.headers(), &[portforward::PROTOCOL]) {
        return upgrade::refuse(&e);
    }
    let target = portforward::Target {
        name,
        uid: p.metadata.uid.clone().unwrap_or_default(),
        ip,
    };
    upgrade::switch(&mut req, portforward::PROTOCOL, move |io| async move {
        if let Err(e) = portforward::serve(io, target).await {
            tracing::debug!("port-forward session ended: {e}");
        }
    })
    .into_response()
}
