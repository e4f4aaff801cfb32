//! Running a command "in" a container for `exec`, whatever carries it: the command runs on the
//! host with the running container's env and working directory (or inside the container through
//! its `argv_prefix`, `podman exec ...`), its stdout and stderr go out on [`Streams::output`]
//! and the client's stdin comes in on [`Streams::input`]; the end is a `metav1.Status` as the
//! v4/v5 channel protocols carry it on their error stream.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Stream numbers of the channel protocols (`v4.channel.k8s.io`, `v5.channel.k8s.io`): the first
/// byte of each WebSocket message, and the ids [`Streams::output`] uses.
pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5: "the client closed stream N" (the next byte).
pub const CLOSE: u8 = 255;

/// The stdin pipe of a running `stdin: true` container; `None` inside once closed.
pub type ContainerStdin = Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>;

/// The env and working directory a running container's process has, and its stdin
/// when the container has `stdin: true` (for `kubectl attach -i`).
#[derive(Debug, Clone)]
pub struct ContainerProcess {
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub stdin: Option<ContainerStdin>,
    /// `stdinOnce`: the first attach session to close stdin closes it for good.
    pub stdin_once: bool,
    /// When set, the command runs as its arguments (`podman exec --interactive NAME`): a
    /// container's command runs inside it, not on the host.
    pub argv_prefix: Vec<String>,
}

/// The query of an exec or attach request.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub command: Vec<String>,
    pub container: Option<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Reads the query pairs of an exec or attach request to an API server, as kubectl sends them
/// (`stdin`, `stdout`, `stderr`, `tty`; `true` or `1`).
pub fn options(pairs: Vec<(String, String)>) -> Options {
    parse(pairs, ["stdin", "stdout", "stderr"])
}

/// Reads the query pairs of an exec or attach request to a kubelet, as an API server sends them
/// (`input`, `output`, `error`, `tty`, each `1`).
pub fn kubelet_options(pairs: Vec<(String, String)>) -> Options {
    parse(pairs, ["input", "output", "error"])
}

fn parse(pairs: Vec<(String, String)>, [stdin, stdout, stderr]: [&str; 3]) -> Options {
    let truthy = |v: &str| v == "true" || v == "1";
    let mut o = Options::default();
    for (k, v) in pairs {
        match k.as_str() {
            "command" => o.command.push(v),
            "container" => o.container = Some(v).filter(|c| !c.is_empty()),
            "tty" => o.tty = truthy(&v),
            k if k == stdin => o.stdin = truthy(&v),
            k if k == stdout => o.stdout = truthy(&v),
            k if k == stderr => o.stderr = truthy(&v),
            _ => {}
        }
    }
    o
}

/// What the client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Bytes for stdin.
    Stdin(Bytes),
    /// The client closed its stdin (EOF), and stays.
    StdinClosed,
}

/// The channels between a transport and a session. The transport keeps `input`'s sender for as
/// long as the client is connected: its closing means the client went away.
pub struct Streams {
    /// `(STDOUT | STDERR, bytes)` for the client.
    pub output: mpsc::Sender<(u8, Bytes)>,
    pub input: mpsc::Receiver<Input>,
}

/// A Success status.
pub fn success() -> meta::Status {
    meta::Status {
        status: Some("Success".into()),
        ..Default::default()
    }
}

/// A Failure status; with an exit code it carries the `ExitCode` cause the v4 protocol reads.
pub fn failure(message: String, reason: Option<&str>, exit_code: Option<i32>) -> meta::Status {
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

async fn pump(mut from: impl AsyncRead + Unpin, stream: u8, to: mpsc::Sender<(u8, Bytes)>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to
                    .send((stream, Bytes::copy_from_slice(&buf[..n])))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Runs `opts.command` for `process` until it exits; returns the status to send.
pub async fn run(process: &ContainerProcess, opts: &Options, streams: Streams) -> meta::Status {
    let Streams { output, mut input } = streams;
    let argv: Vec<&String> = process.argv_prefix.iter().chain(&opts.command).collect();
    let Some((program, args)) = argv.split_first() else {
        return failure("you must specify at least 1 command".into(), None, None);
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
            return failure(
                format!("failed to exec in container: starting {program}: {e}"),
                None,
                None,
            );
        }
    };
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(out, STDOUT, output.clone())));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(err, STDERR, output.clone())));
    }
    drop(output);
    let mut stdin = child.stdin.take();
    let feeder = tokio::spawn(async move {
        while let Some(msg) = input.recv().await {
            match msg {
                Input::Stdin(b) => {
                    if let Some(s) = stdin.as_mut()
                        && s.write_all(&b).await.is_err()
                    {
                        stdin = None;
                    }
                }
                Input::StdinClosed => stdin = None,
            }
        }
    });
    let status = child.wait().await;
    for p in pumps {
        let _ = p.await;
    }
    feeder.abort();
    match status {
        Ok(s) if s.success() => success(),
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
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn process() -> ContainerProcess {
        ContainerProcess {
            env: [("GREETING".to_string(), "hi".to_string())].into(),
            cwd: std::env::temp_dir(),
            stdin: None,
            stdin_once: false,
            argv_prefix: Vec::new(),
        }
    }

    #[tokio::test]
    async fn runs_with_the_container_env_feeds_stdin_and_reports_the_exit_code() {
        let opts = options(vec![
            ("command".into(), "/bin/sh".into()),
            ("command".into(), "-c".into()),
            (
                "command".into(),
                "read x; echo $GREETING $x; echo err >&2; exit 4".into(),
            ),
            ("stdin".into(), "1".into()),
            ("stdout".into(), "true".into()),
            ("stderr".into(), "1".into()),
            // A kubelet's names mean nothing to an API server.
            ("output".into(), "0".into()),
        ]);
        let kubelet = kubelet_options(vec![
            ("input".into(), "1".into()),
            ("output".into(), "1".into()),
            ("stdin".into(), "1".into()),
        ]);
        assert!(kubelet.stdin && kubelet.stdout && !kubelet.stderr);
        let (out_tx, mut out_rx) = mpsc::channel(8);
        let (in_tx, in_rx) = mpsc::channel(8);
        in_tx
            .send(Input::Stdin(Bytes::from_static(b"there\n")))
            .await
            .unwrap();
        in_tx.send(Input::StdinClosed).await.unwrap();
        let status = run(
            &process(),
            &opts,
            Streams {
                output: out_tx,
                input: in_rx,
            },
        )
        .await;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        while let Some((s, b)) = out_rx.recv().await {
            match s {
                STDOUT => stdout.extend_from_slice(&b),
                _ => stderr.extend_from_slice(&b),
            }
        }
        assert_eq!(String::from_utf8_lossy(&stdout), "hi there\n");
        assert_eq!(String::from_utf8_lossy(&stderr), "err\n");
        assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
        let cause = &status.details.unwrap().causes.unwrap()[0];
        assert_eq!(cause.reason.as_deref(), Some("ExitCode"));
        assert_eq!(cause.message.as_deref(), Some("4"));
    }
}
