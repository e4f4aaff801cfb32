//! `pods/attach` over WebSocket (`kubectl attach`), on the transport and channel
//! protocol of [`crate::exec`]: from the moment of attach, what the running container
//! writes comes down the stdout channel, followed from the log the pod runner keeps
//! (`{logs_dir}/{ns}/{pod}/{container}.log`, one file for stdout and stderr), until the
//! container stops. With `stdin=true`, what the client sends on the stdin channel goes
//! to the container's stdin, which the runner keeps open for containers with
//! `stdin: true` (closed for good when the first session closes it if `stdinOnce`);
//! other containers have none, and containers never have a TTY, so asking for
//! either gets a Failure status naming the reason.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use axum::extract::{Query, Request};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::app::App;
use crate::errors::ApiError;
use crate::exec::{self, CLOSE, ContainerStdin, STDIN, STDOUT};
use crate::registry::GroupResource;

const POLL: Duration = Duration::from_millis(100);
/// How long the runner may take to copy a stopped container's last output to its log.
const DRAIN: Duration = Duration::from_millis(300);

/// What the attach session follows.
struct Target {
    ns: String,
    pod: String,
    container: String,
    log: PathBuf,
    /// The container's stdin when the client attached it.
    stdin: Option<ContainerStdin>,
    stdin_once: bool,
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
    let opts = exec::options(pairs);
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let container = exec::pick_container(&pod, name, opts.container.clone())?;
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
                "container {container} is not running in pod {name} (attach needs the pod runner)"
            ))
        })?;
    exec::authorize_websocket_create(app, &req)?;
    let refusal = if opts.stdin && process.stdin.is_none() {
        Some(format!(
            "container {container} has no stdin to attach to: it needs stdin: true in the pod spec (or attach without -i)"
        ))
    } else if opts.tty {
        Some(format!(
            "devcluster cannot attach a TTY to container {container}: its containers run without one"
        ))
    } else {
        None
    };
    let target = Target {
        log: app
            .logs_dir
            .join(ns)
            .join(name)
            .join(format!("{container}.log")),
        ns: ns.to_string(),
        pod: name.to_string(),
        container,
        stdin: process.stdin.filter(|_| opts.stdin),
        stdin_once: process.stdin_once,
    };
    let ws = exec::websocket_upgrade(req, "attach").await?;
    let app = app.clone();
    Ok(ws
        .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| run(socket, app, target, refusal))
        .into_response())
}

fn running(app: &App, ns: &str, pod: &str, container: &str) -> bool {
    app.exec
        .get()
        .and_then(|b| b.container(ns, pod, container))
        .is_some()
}

/// Sends what was appended to `file` since `offset`; returns the new offset.
async fn forward(
    file: &mut tokio::fs::File,
    offset: &mut u64,
    sink: &mut futures::stream::SplitSink<WebSocket, Message>,
) -> Result<(), axum::Error> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match file.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => n,
        };
        *offset += n as u64;
        sink.send(exec::frame(STDOUT, &buf[..n])).await?;
    }
}

async fn run(socket: WebSocket, app: Arc<App>, t: Target, refusal: Option<String>) {
    let (mut sink, mut incoming) = socket.split();
    let status = match refusal {
        Some(msg) => exec::failure(msg, Some("BadRequest"), None),
        None => follow(&app, &t, &mut sink, &mut incoming).await,
    };
    let _ = sink.send(exec::status_frame(&status)).await;
    // A normal closure ends every stream with EOF for client-go.
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: close_code::NORMAL,
            reason: "".into(),
        })))
        .await;
}

/// Streams the container's output until it stops (Success) or the client leaves.
async fn follow(
    app: &App,
    t: &Target,
    sink: &mut futures::stream::SplitSink<WebSocket, Message>,
    incoming: &mut futures::stream::SplitStream<WebSocket>,
) -> meta::Status {
    let failure = |m: String| exec::failure(m, None, None);
    let mut file = match tokio::fs::File::open(&t.log).await {
        Ok(f) => f,
        Err(e) => return failure(format!("opening the log of {}: {e}", t.container)),
    };
    // From the moment of attach: earlier output is `kubectl logs`'s.
    let mut offset = match file.seek(std::io::SeekFrom::End(0)).await {
        Ok(o) => o,
        Err(e) => return failure(format!("reading the log of {}: {e}", t.container)),
    };
    let inode = |m: std::io::Result<std::fs::Metadata>| {
        use std::os::unix::fs::MetadataExt;
        m.ok().map(|m| m.ino())
    };
    let attached = inode(file.metadata().await);
    loop {
        if forward(&mut file, &mut offset, sink).await.is_err() {
            return failure("the client went away".into());
        }
        // A restart moves the log aside and starts a new one: the attached instance is gone.
        let restarted = inode(tokio::fs::metadata(&t.log).await) != attached;
        if restarted || !running(app, &t.ns, &t.pod, &t.container) {
            tokio::time::sleep(DRAIN).await;
            let _ = forward(&mut file, &mut offset, sink).await;
            return meta::Status {
                status: Some("Success".into()),
                ..Default::default()
            };
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            msg = incoming.next() => match msg {
                Some(Ok(Message::Binary(b))) => match (b.first(), b.get(1)) {
                    (Some(&STDIN), _) => write_stdin(t, &b[1..]).await,
                    // v5: the client closed its stdin (EOF of `kubectl attach -i`).
                    (Some(&CLOSE), Some(&STDIN)) => close_stdin(t).await,
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    close_stdin(t).await;
                    return failure("the client closed the connection".into());
                }
                Some(Ok(_)) => {}
            },
        }
    }
}

async fn write_stdin(t: &Target, data: &[u8]) {
    use tokio::io::AsyncWriteExt;
    if let Some(stdin) = &t.stdin {
        let mut pipe = stdin.lock().await;
        // A container that closed its end (or exited) just loses the input, as on a
        // real node.
        if let Some(p) = pipe.as_mut()
            && (p.write_all(data).await.is_err() || p.flush().await.is_err())
        {
            *pipe = None;
        }
    }
}

/// The session's end of stdin: with `stdinOnce` the container sees EOF; otherwise
/// its stdin stays open for the next session, as the kubelet keeps it.
async fn close_stdin(t: &Target) {
    if t.stdin_once
        && let Some(stdin) = &t.stdin
    {
        stdin.lock().await.take();
    }
}
