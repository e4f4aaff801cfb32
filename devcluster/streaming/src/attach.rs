//! Attaching to a running container, whatever carries it: from the moment of attach, what the
//! container writes comes out on the stdout stream, followed from the log the pod runner keeps
//! (`{logs_dir}/{ns}/{pod}/{container}.log`, one file for stdout and stderr), until the container
//! stops. What the client sends on stdin goes to the container's stdin, which the runner keeps
//! open for containers with `stdin: true` (closed for good when the first session closes it if
//! `stdinOnce`); other containers have none, and containers never have a TTY, so asking for
//! either is refused with the reason ([`refusal`]).

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::exec::{self, ContainerProcess, ContainerStdin, Input, Options, STDOUT, Streams};

const POLL: Duration = Duration::from_millis(100);
/// How long the runner may take to copy a stopped container's last output to its log.
const DRAIN: Duration = Duration::from_millis(300);

/// What an attach session follows.
pub struct Target {
    pub container: String,
    pub log: PathBuf,
    /// The container's stdin when the client attached it.
    pub stdin: Option<ContainerStdin>,
    pub stdin_once: bool,
}

impl Target {
    pub fn new(
        container: String,
        log: PathBuf,
        process: &ContainerProcess,
        opts: &Options,
    ) -> Self {
        Self {
            container,
            log,
            stdin: process.stdin.clone().filter(|_| opts.stdin),
            stdin_once: process.stdin_once,
        }
    }
}

/// Why an attach is refused once connected, if it is.
pub fn refusal(container: &str, process: &ContainerProcess, opts: &Options) -> Option<String> {
    if opts.stdin && process.stdin.is_none() {
        Some(format!(
            "container {container} has no stdin to attach to: it needs stdin: true in the pod spec (or attach without -i)"
        ))
    } else if opts.tty {
        Some(format!(
            "devcluster cannot attach a TTY to container {container}: its containers run without one"
        ))
    } else {
        None
    }
}

/// Sends what was appended to `file` since the last read; false when the client is gone.
async fn forward(file: &mut tokio::fs::File, out: &tokio::sync::mpsc::Sender<(u8, Bytes)>) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match file.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(n) => n,
        };
        if out
            .send((STDOUT, Bytes::copy_from_slice(&buf[..n])))
            .await
            .is_err()
        {
            return false;
        }
    }
}

/// Streams the container's output until it stops (Success) or the client leaves. `running`
/// says whether the attached container still runs.
pub async fn follow(t: &Target, running: impl Fn() -> bool, streams: Streams) -> meta::Status {
    let Streams { output, mut input } = streams;
    let failure = |m: String| exec::failure(m, None, None);
    let mut file = match tokio::fs::File::open(&t.log).await {
        Ok(f) => f,
        Err(e) => return failure(format!("opening the log of {}: {e}", t.container)),
    };
    // From the moment of attach: earlier output is `kubectl logs`'s.
    if let Err(e) = file.seek(std::io::SeekFrom::End(0)).await {
        return failure(format!("reading the log of {}: {e}", t.container));
    }
    let inode = |m: std::io::Result<std::fs::Metadata>| {
        use std::os::unix::fs::MetadataExt;
        m.ok().map(|m| m.ino())
    };
    let attached = inode(file.metadata().await);
    loop {
        if !forward(&mut file, &output).await {
            return failure("the client went away".into());
        }
        // A restart moves the log aside and starts a new one: the attached instance is gone.
        let restarted = inode(tokio::fs::metadata(&t.log).await) != attached;
        if restarted || !running() {
            tokio::time::sleep(DRAIN).await;
            let _ = forward(&mut file, &output).await;
            return exec::success();
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            msg = input.recv() => match msg {
                Some(Input::Stdin(b)) => write_stdin(t, &b).await,
                // The client closed its stdin (EOF of `kubectl attach -i`).
                Some(Input::StdinClosed) => close_stdin(t).await,
                None => {
                    close_stdin(t).await;
                    return failure("the client closed the connection".into());
                }
            },
        }
    }
}

async fn write_stdin(t: &Target, data: &[u8]) {
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
