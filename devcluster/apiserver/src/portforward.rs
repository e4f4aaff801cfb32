//! `pods/portforward`, as `kubectl port-forward` speaks it: the `portforward.k8s.io`
//! protocol over SPDY/3.1 streams, either tunnelled in WebSocket binary messages
//! (subprotocol `SPDY/3.1+portforward.k8s.io`, what kubectl 1.30+ asks first) or on
//! the connection itself after an HTTP `Upgrade: SPDY/3.1` (its fallback).
//!
//! For every local connection the client opens an error stream and a data stream
//! with the same `requestID`. The server then dials the port at the pod's address
//! and copies bytes both ways on the data stream; a failure is written on the error
//! stream. Both streams are closed when the forward ends.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use devcluster_streaming::conn::CHUNK;
use devcluster_streaming::portforward::{PROTOCOL, Target, WEBSOCKET_PROTOCOL, serve};
use devcluster_streaming::upgrade;
use futures::{SinkExt, StreamExt};
use http::header;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::app::App;
use crate::errors::ApiError;
use crate::registry::GroupResource;

pub async fn handle(
    app: &Arc<App>,
    ns: &str,
    name: &str,
    mut req: Request,
) -> Result<Response, ApiError> {
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<IpAddr>().ok())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "pod {name} is not running: it has no IP address yet"
            ))
        })?;
    let target = Target {
        name: name.to_string(),
        uid: pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        ip,
    };
    let websocket = upgrade::header_has(req.headers(), header::UPGRADE, "websocket");
    if websocket {
        crate::exec::authorize_websocket_create(app, &req)?;
        if !upgrade::header_has(
            req.headers(),
            header::SEC_WEBSOCKET_PROTOCOL,
            WEBSOCKET_PROTOCOL,
        ) {
            return Err(ApiError::bad_request(format!(
                "unable to upgrade: the WebSocket sub-protocol must be {WEBSOCKET_PROTOCOL}"
            )));
        }
        let (mut parts, _body) = req.into_parts();
        let ws = WebSocketUpgrade::from_request_parts(&mut parts, &())
            .await
            .map_err(|_| ApiError::bad_request("Upgrade request required"))?;
        return Ok(ws
            .protocols([WEBSOCKET_PROTOCOL])
            .on_upgrade(move |socket| over_websocket(socket, target))
            .into_response());
    }
    if !upgrade::is_spdy_upgrade(&req) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    if let Err(e) = upgrade::negotiate(req.headers(), &[PROTOCOL]) {
        return Err(ApiError::forbidden(e.to_string()));
    }
    Ok(upgrade::switch(&mut req, PROTOCOL, move |io| async move {
        if let Err(e) = serve(io, target).await {
            tracing::debug!("port-forward session ended: {e}");
        }
    }))
}

/// Runs the SPDY session over the byte stream the WebSocket's binary messages carry.
async fn over_websocket(socket: WebSocket, target: Target) {
    let (ours, theirs) = tokio::io::duplex(2 * CHUNK);
    let (mut from_ws, mut to_ws) = tokio::io::split(theirs);
    let (mut sink, mut incoming) = socket.split();
    let inbound = async move {
        while let Some(Ok(msg)) = incoming.next().await {
            match msg {
                Message::Binary(b) if to_ws.write_all(&b).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = to_ws.shutdown().await;
    };
    let outbound = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from_ws.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let msg = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
                    if sink.send(msg).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
    };
    let session = async move {
        if let Err(e) = serve(ours, target).await {
            tracing::debug!("port-forward session ended: {e}");
        }
    };
    futures::join!(inbound, outbound, session);
}
