//! The HTTP side of a SPDY session: checking an `Upgrade: SPDY/3.1` request, negotiating the
//! stream protocol (`X-Stream-Protocol-Version`) as client-go's `httpstream.Handshake` does, and
//! the `101 Switching Protocols` answer that hands the connection to a session.

use std::future::Future;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use hyper_util::rt::TokioIo;

pub const SPDY_UPGRADE: &str = "SPDY/3.1";
pub const STREAM_PROTOCOL_HEADER: &str = "x-stream-protocol-version";
/// Sent with a refusal: the protocols the server accepts.
pub const ACCEPTED_PROTOCOLS_HEADER: &str = "x-accepted-stream-protocol-versions";

/// The connection as a session reads and writes it.
pub type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

/// Whether a comma-separated header lists `token` (case-insensitive), in any of its values.
pub fn header_has(headers: &HeaderMap, name: impl header::AsHeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// An HTTP/1.1 request that asks to switch to SPDY/3.1.
pub fn is_spdy_upgrade<B>(req: &http::Request<B>) -> bool {
    req.version() == http::Version::HTTP_11
        && header_has(req.headers(), header::CONNECTION, "upgrade")
        && header_has(req.headers(), header::UPGRADE, SPDY_UPGRADE)
}

/// Why a protocol could not be agreed on; the message is the one a kubelet gives (403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {accepted:?}"
)]
pub struct NoProtocol {
    pub offered: Vec<String>,
    pub accepted: Vec<&'static str>,
}

/// The first protocol the client offers that the server supports.
pub fn negotiate(headers: &HeaderMap, server: &[&'static str]) -> Result<&'static str, NoProtocol> {
    let offered: Vec<String> = headers
        .get_all(STREAM_PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    offered
        .iter()
        .find_map(|o| server.iter().find(|s| s.eq_ignore_ascii_case(o)).copied())
        .ok_or_else(|| NoProtocol {
            offered,
            accepted: server.to_vec(),
        })
}

/// A 403 naming the protocols the server accepts, as a kubelet refuses them.
pub fn refuse(err: &NoProtocol) -> Response {
    let mut resp = Response::new(Body::from(err.to_string()));
    *resp.status_mut() = StatusCode::FORBIDDEN;
    for p in &err.accepted {
        resp.headers_mut()
            .append(ACCEPTED_PROTOCOLS_HEADER, HeaderValue::from_static(p));
    }
    resp
}

/// Answers `101 Switching Protocols` with `protocol`, and runs `session` on the connection once
/// hyper hands it over.
pub fn switch<B, F, Fut>(req: &mut http::Request<B>, protocol: &'static str, session: F) -> Response
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => session(TokioIo::new(upgraded)).await,
            Err(e) => tracing::debug!("SPDY upgrade failed: {e}"),
        }
    });
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(SPDY_UPGRADE));
    h.insert(STREAM_PROTOCOL_HEADER, HeaderValue::from_static(protocol));
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn negotiates_the_first_offered_protocol_the_server_has() {
        let mut h = HeaderMap::new();
        h.append(
            STREAM_PROTOCOL_HEADER,
            HeaderValue::from_static("v5.channel.k8s.io"),
        );
        h.append(
            STREAM_PROTOCOL_HEADER,
            HeaderValue::from_static("v4.channel.k8s.io"),
        );
        h.append(
            STREAM_PROTOCOL_HEADER,
            HeaderValue::from_static("v3.channel.k8s.io"),
        );
        assert_eq!(
            negotiate(&h, &["v3.channel.k8s.io", "v4.channel.k8s.io"]),
            Ok("v4.channel.k8s.io")
        );
        let err = negotiate(&h, &["portforward.k8s.io"]).unwrap_err();
        assert_eq!(err.offered.len(), 3);
        assert!(
            err.to_string()
                .contains("server accepts [\"portforward.k8s.io\"]")
        );
    }
}
