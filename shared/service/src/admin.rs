//! The admin HTTP server: `/metrics` (OpenMetrics text), `/healthz` (200 while the process runs)
//! and `/readyz` (200 once the service said it is ready).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Readiness flag served on /readyz. Starts not ready.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "the admin server cannot listen on {addr}; choose another address with --admin-addr \
         (or KUBELESS_ADMIN_ADDR), e.g. 127.0.0.1:0 for any free port"
    )]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the admin server failed")]
    Serve(#[source] std::io::Error),
}

#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    readiness: Readiness,
}

/// A running admin server.
#[derive(Debug)]
pub struct AdminServer {
    local_addr: SocketAddr,
    task: tokio::task::JoinHandle<Result<(), AdminError>>,
}

impl AdminServer {
    /// Binds `addr` and serves until `token` is cancelled.
    pub async fn start(
        addr: SocketAddr,
        metrics: Metrics,
        readiness: Readiness,
        token: CancellationToken,
    ) -> Result<Self, AdminError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| AdminError::Bind { addr, source })?;
        let app = router(AdminState { metrics, readiness });
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
                .map_err(AdminError::Serve)
        });
        tracing::info!(%local_addr, "admin server listening");
        Ok(Self { local_addr, task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits for the server to stop (after its token was cancelled).
    pub async fn join(self) -> Result<(), AdminError> {
        match self.task.await {
            Ok(res) => res,
            Err(join) => Err(AdminError::Serve(std::io::Error::other(join))),
        }
    }
}

fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(state): State<AdminState>) -> Response {
    match state.metrics.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "encoding metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn readyz(State(state): State<AdminState>) -> Response {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::gauge::Gauge;

    #[tokio::test]
    async fn endpoints_answer() {
        let metrics = Metrics::new("kubeless");
        let g: Gauge = Gauge::default();
        metrics.register_with("test", |r| r.register("things", "Things", g.clone()));
        g.set(7);
        let readiness = Readiness::new();
        let token = CancellationToken::new();
        let server = AdminServer::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics,
            readiness.clone(),
            token.clone(),
        )
        .await
        .unwrap();
        let base = format!("http://{}", server.local_addr());
        crate::install_crypto_provider();
        let client = reqwest::Client::new();

        let r = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);

        let r = client.get(format!("{base}/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        readiness.set_ready(true);
        let r = client.get(format!("{base}/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 200);

        let r = client.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("application/openmetrics-text")
        );
        let body = r.text().await.unwrap();
        assert!(body.contains("kubeless_test_things 7"), "{body}");

        token.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), server.join())
            .await
            .expect("server stops after cancel")
            .unwrap();
    }
}
