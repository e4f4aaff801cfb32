//! `pods/exec` over WebSocket, the way kubectl (1.30+) talks to it: the
//! `v5.channel.k8s.io` (or `v4.channel.k8s.io`) subprotocol, binary frames whose
//! first byte is the stream (0 stdin, 1 stdout, 2 stderr, 3 error/status, 255
//! close in v5). The command runs on the host with the running container's env and
//! working directory, which the pod runner hands over through [`ExecBackend`].

use std::process::Stdio;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Query, Request};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::app::App;
pub use crate::backend::{ContainerProcess, ContainerStdin, ExecBackend};
use crate::errors::ApiError;
use crate::registry::GroupResource;

pub(crate) const STDIN: u8 = 0;
pub(crate) const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
pub(crate) const CLOSE: u8 = 255;

pub(crate) struct Options {
    command: Vec<String>,
    pub(crate) container: Option<String>,
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
    pub(crate) tty: bool,
}

pub(crate) fn options(pairs: Vec<(String, String)>) -> Options {
    let truthy = |v: &str| v == "true" || v == "1";
    let mut o = Options {
        command: Vec::new(),
        container: None,
        stdin: false,
        stdout: false,
        stderr: false,
        tty: false,
    };
    for (k, v) in pairs {
        match k.as_str() {
            "command" => o.command.push(v),
            "container" => o.container = Some(v).filter(|c| !c.is_empty()),
            "stdin" => o.stdin = truthy(&v),
            "stdout" => o.stdout = truthy(&v),
            "stderr" => o.stderr = truthy(&v),
            "tty" => o.tty = truthy(&v),
            _ => {}
        }
    }
    o
}

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
        .on_upgrade(move |socket| run(socket, opts, process))
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

pub(crate) fn failure(
    message: String,
    reason: Option<&str>,
    exit_code: Option<i32>,
) -> meta::Status {
    meta::Status {
        status: Some("Failure".into()),
        message: Some(message),
        reason: reason.map(str::to_string),
        details: exit_code.map(|code| meta::StatusDetails {
            causes: Some(vec![meta::StatusCause {
                reason: Some("ExitCode".into()),
                message: Some(code.to_string()),
                field: None,
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn pump(mut from: impl AsyncRead + Unpin, stream: u8, to: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send(frame(stream, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn run(socket: WebSocket, opts: Options, process: ContainerProcess) {
    let (mut sink, mut incoming) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(32);
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if sink.send(m).await.is_err() {
                return;
            }
        }
        // A normal closure ends every stream with EOF for client-go; a close
        // without a code is an error to it.
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
    });

    // A container runs the command inside itself (`podman exec ... NAME`), with its own env.
    let argv: Vec<&String> = process.argv_prefix.iter().chain(&opts.command).collect();
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let io = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    if process.argv_prefix.is_empty() {
        command.env_clear().envs(&process.env);
    }
    let spawned = command
        .current_dir(&process.cwd)
        .stdin(io(opts.stdin))
        .stdout(io(opts.stdout))
        .stderr(io(opts.stderr))
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("failed to exec in container: starting {program}: {e}");
            let _ = out_tx.send(status_frame(&failure(msg, None, None))).await;
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(out, STDOUT, out_tx.clone())));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(err, STDERR, out_tx.clone())));
    }
    let mut stdin = child.stdin.take();
    let reader = tokio::spawn(async move {
        while let Some(Ok(msg)) = incoming.next().await {
            match msg {
                Message::Binary(b) => match (b.first(), b.get(1)) {
                    (Some(&STDIN), _) => {
                        if let Some(s) = stdin.as_mut()
                            && s.write_all(&b[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    // v5: the client closed one of its streams; only stdin matters.
                    (Some(&CLOSE), Some(&STDIN)) => stdin = None,
                    _ => {}
                },
                Message::Close(_) => return,
                _ => {}
            }
        }
    });
    let status = child.wait().await;
    for p in pumps {
        let _ = p.await;
    }
    reader.abort();
    let st = match status {
        Ok(s) if s.success() => meta::Status {
            status: Some("Success".into()),
            ..Default::default()
        },
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            // Killed by a signal: 128 + the signal, as the container runtime reports it.
            let code = s
                .code()
                .or_else(|| s.signal().map(|n| 128 + n))
                .unwrap_or(137);
            failure(
                format!(
                    "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                    opts.command.join(" ")
                ),
                Some("NonZeroExitCode"),
                Some(code),
            )
        }
        Err(e) => failure(format!("waiting for the command: {e}"), None, None),
    };
    let _ = out_tx.send(status_frame(&st)).await;
    drop(out_tx);
    let _ = writer.await;
}
