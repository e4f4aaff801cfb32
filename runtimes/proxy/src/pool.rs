//! A fixed pool of language worker processes.
//!
//! Calls wait in one queue; each pool slot takes the next call when its
//! worker is idle, so a slow call never blocks the others. A call that runs
//! past the timeout gets 408, and its worker (with its whole process group)
//! is killed and replaced while the other slots keep serving.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::BufReader;
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::protocol::{self, FrameError, Hello, ResponseHead};

/// How to start one worker process.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Extra environment on top of the proxy's own.
    pub env: Vec<(OsString, OsString)>,
    /// Folder for the per-worker unix sockets.
    pub socket_dir: PathBuf,
    /// How long a worker may take to load the function and say hello.
    pub start_timeout: Duration,
}

/// Errors starting a worker.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot bind worker socket {path}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start worker {program:?}")]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    #[error("worker exited before connecting ({0})")]
    ExitedEarly(String),
    #[error("worker did not connect within {0:?}")]
    StartTimeout(Duration),
    #[error("worker handshake failed")]
    Handshake(#[source] FrameError),
    #[error("worker closed the connection during the handshake")]
    HandshakeEof,
    #[error("worker hello is not valid JSON")]
    HelloJson(#[source] serde_json::Error),
    #[error("function failed to load: {0}")]
    LoadFailed(String),
}

/// Pool start-up failure: the first worker generation could not load.
#[derive(Debug, thiserror::Error)]
#[error("worker {slot} failed to start")]
pub struct PoolStartError {
    pub slot: usize,
    #[source]
    pub source: SpawnError,
}

/// What happened to one call.
#[derive(Debug)]
pub enum CallOutcome {
    Response {
        head: ResponseHead,
        body: Bytes,
    },
    Timeout,
    /// The worker died or broke the protocol mid-call.
    WorkerFailed(String),
    /// The pool is shutting down.
    Unavailable,
}

struct Job {
    prefix: Vec<u8>,
    body: Bytes,
    reply: oneshot::Sender<CallOutcome>,
}

/// Handle to the running pool; cheap to clone.
#[derive(Clone)]
pub struct Pool {
    tx: mpsc::Sender<Job>,
    size: usize,
}

impl Pool {
    /// Start `size` workers and wait until each has loaded the function.
    pub async fn start(
        spec: WorkerSpec,
        size: usize,
        timeout: Duration,
    ) -> Result<Self, PoolStartError> {
        let size = size.max(1);
        let (tx, rx) = mpsc::channel::<Job>(size * 1024);
        let rx = Arc::new(Mutex::new(rx));
        let spec = Arc::new(spec);
        let generation = Arc::new(AtomicU64::new(0));
        let mut ready = Vec::with_capacity(size);
        for slot in 0..size {
            let (ready_tx, ready_rx) = oneshot::channel();
            ready.push(ready_rx);
            tokio::spawn(run_slot(
                slot,
                spec.clone(),
                rx.clone(),
                timeout,
                generation.clone(),
                ready_tx,
            ));
        }
        for (slot, r) in ready.into_iter().enumerate() {
            match r.await {
                Ok(Ok(())) => {}
                Ok(Err(source)) => return Err(PoolStartError { slot, source }),
                Err(_) => {
                    return Err(PoolStartError {
                        slot,
                        source: SpawnError::ExitedEarly("slot task ended".into()),
                    });
                }
            }
        }
        Ok(Self { tx, size })
    }

    /// Number of worker slots.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Queue a call (prefix from [`protocol::encode_prefix`]) and wait for its outcome.
    pub async fn call(&self, prefix: Vec<u8>, body: Bytes) -> CallOutcome {
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(Job {
                prefix,
                body,
                reply,
            })
            .await
            .is_err()
        {
            return CallOutcome::Unavailable;
        }
        rx.await.unwrap_or(CallOutcome::Unavailable)
    }
}

struct Worker {
    child: Child,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Worker {
    async fn spawn(spec: &WorkerSpec, slot: usize, generation: u64) -> Result<Self, SpawnError> {
        let path = spec
            .socket_dir
            .join(format!("worker-{slot}-{generation}.sock"));
        // A stale socket from an earlier run would make bind fail.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(|source| SpawnError::Bind {
            path: path.clone(),
            source,
        })?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("KUBELESS_WORKER_SOCKET", &path)
            .env("KUBELESS_WORKER_ID", slot.to_string())
            .stdin(std::process::Stdio::null())
            // Function output goes straight to the container log.
            .stdout(std::process::Stdio::inherit())
            .stderr(std::process::Stdio::inherit())
            // Own process group, so a timeout also kills anything the function forked.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| SpawnError::Spawn {
            program: spec.program.clone(),
            source,
        })?;
        let accepted = tokio::select! {
            r = tokio::time::timeout(spec.start_timeout, listener.accept()) => r,
            status = child.wait() => {
                let _ = std::fs::remove_file(&path);
                let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                return Err(SpawnError::ExitedEarly(status));
            }
        };
        let _ = std::fs::remove_file(&path);
        let stream = match accepted {
            Ok(Ok((stream, _))) => stream,
            Ok(Err(source)) => {
                kill_group(&mut child);
                return Err(SpawnError::Bind { path, source });
            }
            Err(_) => {
                kill_group(&mut child);
                return Err(SpawnError::StartTimeout(spec.start_timeout));
            }
        };
        let (r, writer) = stream.into_split();
        let mut reader = BufReader::with_capacity(64 * 1024, r);
        let hello =
            tokio::time::timeout(spec.start_timeout, protocol::read_frame(&mut reader)).await;
        let head = match hello {
            Ok(Ok(Some((head, _)))) => head,
            Ok(Ok(None)) => {
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                kill_group(&mut child);
                return Err(SpawnError::HandshakeEof);
            }
            Ok(Err(e)) => {
                kill_group(&mut child);
                return Err(SpawnError::Handshake(e));
            }
            Err(_) => {
                kill_group(&mut child);
                return Err(SpawnError::StartTimeout(spec.start_timeout));
            }
        };
        let hello: Hello = match serde_json::from_slice(&head) {
            Ok(h) => h,
            Err(e) => {
                kill_group(&mut child);
                return Err(SpawnError::HelloJson(e));
            }
        };
        if !hello.ready {
            kill_group(&mut child);
            return Err(SpawnError::LoadFailed(
                hello.error.unwrap_or_else(|| "no reason given".into()),
            ));
        }
        Ok(Self {
            child,
            reader,
            writer,
        })
    }

    async fn call(
        &mut self,
        prefix: Vec<u8>,
        body: &[u8],
    ) -> Result<(ResponseHead, Bytes), String> {
        protocol::write_frame(&mut self.writer, prefix, body)
            .await
            .map_err(|e| format!("sending the call failed: {e}"))?;
        match protocol::read_frame(&mut self.reader).await {
            Ok(Some((head, body))) => {
                let head: ResponseHead = serde_json::from_slice(&head)
                    .map_err(|e| format!("worker answer is not valid JSON: {e}"))?;
                Ok((head, body))
            }
            Ok(None) => Err("worker exited during the call".into()),
            Err(e) => Err(format!("reading the answer failed: {e}")),
        }
    }

    fn kill(mut self) {
        kill_group(&mut self.child);
        // Reap in the background so no zombie is left behind.
        tokio::spawn(async move {
            let _ = self.child.wait().await;
        });
    }
}

fn kill_group(child: &mut Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.start_kill();
}

async fn run_slot(
    slot: usize,
    spec: Arc<WorkerSpec>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    timeout: Duration,
    generation: Arc<AtomicU64>,
    ready: oneshot::Sender<Result<(), SpawnError>>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let g = generation.fetch_add(1, Ordering::Relaxed);
        let mut worker = match Worker::spawn(&spec, slot, g).await {
            Ok(w) => {
                backoff = Duration::from_millis(100);
                if let Some(r) = ready.take() {
                    let _ = r.send(Ok(()));
                }
                w
            }
            Err(e) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e));
                    return;
                }
                tracing::error!(slot, error = %crate::error_chain(&e), "worker restart failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        loop {
            // Also watch the idle worker, so a crash is repaired before the next call.
            let next = tokio::select! {
                job = async { rx.lock().await.recv().await } => Ok(job),
                status = worker.child.wait() => Err(status),
            };
            let job = match next {
                Ok(job) => job,
                Err(status) => {
                    let status = status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    tracing::error!(slot, %status, "idle worker exited; replacing it");
                    worker.kill();
                    break;
                }
            };
            let Some(job) = job else {
                worker.kill();
                return;
            };
            if job.reply.is_closed() {
                // The client went away while the call was queued.
                continue;
            }
            match tokio::time::timeout(timeout, worker.call(job.prefix, &job.body)).await {
                Ok(Ok((head, body))) => {
                    let _ = job.reply.send(CallOutcome::Response { head, body });
                }
                Ok(Err(reason)) => {
                    tracing::error!(slot, %reason, "worker failed during a call; replacing it");
                    let _ = job.reply.send(CallOutcome::WorkerFailed(reason));
                    worker.kill();
                    break;
                }
                Err(_) => {
                    tracing::warn!(
                        slot,
                        timeout_s = timeout.as_secs_f64(),
                        "call timed out; killing and replacing the worker"
                    );
                    let _ = job.reply.send(CallOutcome::Timeout);
                    worker.kill();
                    break;
                }
            }
        }
    }
}
