//! What every request handler shares: the server's state ([`App`]), the query map
//! ([`Q`]) and the JSON responses. The router (`http`) and the subresource handlers
//! (logs, proxy, scale, exec, attach, port-forward, metrics) all build on this module,
//! so none of them needs the router.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

pub use crate::backend::{ExecSlot, MetricsSlot};
use crate::errors::ApiError;
use crate::store::Store;

/// The server's state, shared by every request handler.
pub struct App {
    pub store: Arc<Store>,
    pub auth: crate::auth::Authenticator,
    pub authorizer: crate::auth::Authorizer,
    pub logs_dir: PathBuf,
    pub addr: std::net::SocketAddr,
    pub proxy: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Body,
    >,
    pub rr: AtomicUsize,
    /// Running containers for `pods/exec`; set by the pod runner when there is one.
    pub exec: ExecSlot,
    /// Container and node usage for `metrics.k8s.io`; set by the pod runner.
    pub metrics: MetricsSlot,
}

pub type Q = HashMap<String, String>;

pub fn json_response(code: u16, body: &Value) -> Response {
    bytes_response(code, Bytes::from(body.to_string()))
}

pub fn bytes_response(code: u16, body: Bytes) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}
