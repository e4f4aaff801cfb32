//! `pods/exec` over WebSocket, the way kubectl (1.30+) talks to it: the
//! `v5.channel.k8s.io` (or `v4.channel.k8s.io`) subprotocol, binary frames whose
//! first byte is the stream (0 stdin, 1 stdout, 2 stderr, 3 error/status, 255
//! close in v5). The command runs on the host with the running container's env and
//! working directory, which the pod runner hands over through [`ExecBackend`].

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Query, Request};
use axum::response::{IntoResponse, Response};
pub use devcluster_streaming::exec::options;
use devcluster_streaming::exec::{self as core, CLOSE, ERROR, Input, STDIN, Streams};
use futures::{SinkExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::app::App;
pub use crate::backend::{ContainerProcess, ContainerStdin, ExecBackend};
use crate::errors::ApiError;
use crate::registry::GroupResource;

/// Picks the container as the real server does: the named one, or the only one.
pub(crate) fn pick_container(
    pod: &Value,
    name: &str,
    wanted: Option<String>,
) -> Result<String, ApiError> {
    let names: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    match wanted {
        Some(c) if names.contains(&c) => Ok(c),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if names.len() == 1 => Ok(names.into_iter().next().unwrap_or_default()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

pub async fn handle(
    app: &Arc<App>,
    ns: &str,
    name: &str,
    req: Request,
) -> Result<Response, ApiError> {
    let pairs = Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let opts = options(pairs);
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let container = pick_container(&pod, name, opts.container.clone())?;
    if opts.command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    if !(opts.stdin || opts.stdout || opts.stderr) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let process = app
        .exec
        .get()
        .and_then(|b| b.container(ns, name, &container))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "container {container} is not running in pod {name} (exec needs the pod runner)"
            ))
        })?;
    authorize_websocket_create(app, &req)?;
    let ws = websocket_upgrade(req, "exec").await?;
    Ok(ws
        .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| {
            over_websocket(socket, move |streams| async move {
                core::run(&process, &opts, streams).await
            })
        })
        .into_response())
}

/// The WebSocket upgrade of an exec or attach request. devcluster streams these over WebSocket
/// only, which kubectl 1.30 and later ask for first; a real server also takes SPDY/3.1, what
/// kubectl falls back to when the WebSocket request fails, so an SPDY request is told why it
/// is refused instead of only "Upgrade request required".
pub(crate) async fn websocket_upgrade(
    req: Request,
    subresource: &str,
) -> Result<WebSocketUpgrade, ApiError> {
    let (mut parts, _body) = req.into_parts();
    match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => Ok(ws),
        Err(_) => {
            let spdy = parts
                .headers
                .get_all(http::header::UPGRADE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().to_ascii_lowercase().starts_with("spdy/"));
            Err(ApiError::bad_request(if spdy {
                format!(
                    "Upgrade request required: devcluster serves pods/{subresource} over \
                     WebSocket (v5.channel.k8s.io, kubectl 1.30 and later), not SPDY"
                )
            } else {
                "Upgrade request required".to_string()
            }))
        }
    }
}

/// As the real server (AuthorizePodWebsocketUpgradeCreatePermission, on since
/// 1.31): a WebSocket exec or port-forward is a GET, yet it needs `create` on its
/// subresource too.
pub(crate) fn authorize_websocket_create(app: &App, req: &Request) -> Result<(), ApiError> {
    if let Some(user) = req.extensions().get::<crate::auth::User>()
        && !user.is_superuser()
    {
        let create =
            crate::auth::Attributes::from_request("POST", req.uri().path(), &Default::default());
        app.authorizer.authorize(&app.store, user, &create)?;
    }
    Ok(())
}

pub(crate) fn frame(stream: u8, data: &[u8]) -> Message {
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(stream);
    b.extend_from_slice(data);
    Message::Binary(Bytes::from(b))
}

pub(crate) fn status_frame(status: &meta::Status) -> Message {
    let body = serde_json::to_vec(status).unwrap_or_default();
    frame(ERROR, &body)
}

/// Carries a session's streams over the WebSocket, in the channel protocol: its output as
/// stdout/stderr messages, the client's stdin (and, in v5, the close of its stdin) as input;
/// then the session's status on the error channel and a normal closure, which ends every stream
/// with EOF for client-go (a close without a code is an error to it).
pub(crate) async fn over_websocket<F, Fut>(socket: WebSocket, session: F)
where
    F: FnOnce(Streams) -> Fut,
    Fut: Future<Output = meta::Status>,
{
    let (mut sink, mut incoming) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Bytes)>(32);
    let (in_tx, in_rx) = mpsc::channel::<Input>(8);
    let writer = tokio::spawn(async move {
        while let Some((stream, data)) = out_rx.recv().await {
            if sink.send(frame(stream, &data)).await.is_err() {
                return None;
            }
        }
        Some(sink)
    });
    let reader = tokio::spawn(async move {
        while let Some(Ok(msg)) = incoming.next().await {
            match msg {
                Message::Binary(b) => match (b.first(), b.get(1)) {
                    (Some(&STDIN), _) if in_tx.send(Input::Stdin(b.slice(1..))).await.is_err() => {
                        return;
                    }
                    (Some(&STDIN), _) => {}
                    // v5: the client closed one of its streams; only stdin matters.
                    (Some(&CLOSE), Some(&STDIN)) => {
                        let _ = in_tx.send(Input::StdinClosed).await;
                    }
                    _ => {}
                },
                Message::Close(_) => return,
                _ => {}
            }
        }
    });
    let status = session(Streams {
        output: out_tx,
        input: in_rx,
    })
    .await;
    reader.abort();
    if let Ok(Some(mut sink)) = writer.await {
        let _ = sink.send(status_frame(&status)).await;
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
    }
}
