//! A pool of language worker processes that grows with concurrent calls.
//!
//! Calls wait in one queue; each pool slot takes the next call when its
//! worker is idle, so a slow call never blocks the others. A call that runs
//! past the timeout gets 408, and its worker (with its whole process group)
//! is killed and replaced while the other slots keep serving.
//!
//! The pool starts `min` workers. When a call arrives and no worker is idle,
//! one more is started, up to `max`; a worker idle for `idle_timeout` exits
//! while more than `min` are running. `min == max` is a fixed pool.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Largest reply body accepted from a worker; a bigger one fails the call.
    pub max_reply_bytes: usize,
    /// A worker started ahead of the function (warm pool): the first spawn takes it.
    pub standby: Option<Arc<std::sync::Mutex<Option<Standby>>>>,
}

/// Env var that starts a worker in standby: it loads its language runtime, then reads one
/// JSON line of environment variables (the function's, and its socket) from stdin and goes on
/// as if started with them.
pub const STANDBY_ENV: &str = "KUBELESS_WORKER_STANDBY";

/// A worker process started before its function was known (warm pool).
#[derive(Debug)]
pub struct Standby {
    program: OsString,
    child: Child,
    stdin: tokio::process::ChildStdin,
    /// Variables the interpreter read at its start; a function that sets them differently
    /// gets a fresh worker.
    startup_env: Vec<(OsString, OsString)>,
}

/// Whether an env var is read by the interpreter itself at start.
fn read_at_startup(name: &std::ffi::OsStr) -> bool {
    let n = name.to_string_lossy();
    n.starts_with("PYTHON") || n.starts_with("NODE_") || n == "LD_PRELOAD"
}

impl Standby {
    /// Starts `program args` in standby with `env` on top of the proxy's environment.
    pub fn start(
        program: OsString,
        args: &[OsString],
        env: Vec<(OsString, OsString)>,
    ) -> Result<Self, SpawnError> {
        let mut child = Command::new(&program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(STANDBY_ENV, "1")
            .env_remove(kubeless_api::warm::TOKEN_ENV)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::inherit())
            .stderr(std::process::Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| SpawnError::Spawn {
                program: program.clone(),
                source,
            })?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| SpawnError::ExitedEarly("no stdin pipe".into()))?;
        let startup_env = std::env::vars_os()
            .chain(env)
            .filter(|(k, _)| read_at_startup(k))
            .collect();
        Ok(Self {
            program,
            child,
            stdin,
            startup_env,
        })
    }

    /// Whether this standby can become a worker of `spec`.
    fn fits(&self, spec: &WorkerSpec) -> bool {
        self.program == spec.program
            && spec
                .env
                .iter()
                .filter(|(k, _)| read_at_startup(k))
                .all(|kv| self.startup_env.contains(kv))
    }

    /// Hands the worker its environment; it then connects like a fresh one.
    async fn wake(mut self, env: &[(OsString, OsString)]) -> Option<Child> {
        use tokio::io::AsyncWriteExt;
        let map: serde_json::Map<String, serde_json::Value> = env
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    serde_json::Value::String(v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        let mut line = serde_json::Value::Object(map).to_string().into_bytes();
        line.push(b'\n');
        if self.stdin.write_all(&line).await.is_err() || self.stdin.flush().await.is_err() {
            kill_group(&mut self.child);
            return None;
        }
        drop(self.stdin);
        Some(self.child)
    }
}

/// How many workers the pool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// Workers started up front and always kept.
    pub min: usize,
    /// Most workers at once.
    pub max: usize,
    /// An idle worker above `min` exits after this long.
    pub idle_timeout: Duration,
}

impl PoolSize {
    /// A pool of exactly `n` workers.
    pub fn fixed(n: usize) -> Self {
        let n = n.max(1);
        Self {
            min: n,
            max: n,
            idle_timeout: Duration::MAX,
        }
    }
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
    /// The worker's answer was over the reply size limit; the worker was replaced.
    ReplyTooLarge(String),
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
    shared: Arc<Shared>,
}

/// What every slot task and the call path share.
struct Shared {
    rx: Mutex<mpsc::Receiver<Job>>,
    spec: WorkerSpec,
    size: PoolSize,
    timeout: Duration,
    generation: AtomicU64,
    next_slot: AtomicUsize,
    /// Slots running (or starting) a worker.
    live: AtomicUsize,
    /// Slots waiting for a call.
    idle: AtomicUsize,
}

impl Pool {
    /// Start `size.min` workers and wait until each has loaded the function.
    pub async fn start(
        spec: WorkerSpec,
        size: PoolSize,
        timeout: Duration,
    ) -> Result<Self, PoolStartError> {
        let size = PoolSize {
            min: size.min.max(1),
            max: size.max.max(size.min.max(1)),
            idle_timeout: size.idle_timeout,
        };
        let (tx, rx) = mpsc::channel::<Job>(size.max * 1024);
        let shared = Arc::new(Shared {
            rx: Mutex::new(rx),
            spec,
            size,
            timeout,
            generation: AtomicU64::new(0),
            next_slot: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
        });
        let mut ready = Vec::with_capacity(size.min);
        for _ in 0..size.min {
            let (ready_tx, ready_rx) = oneshot::channel();
            ready.push(ready_rx);
            shared.live.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(run_slot(shared.clone(), Some(ready_tx)));
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
        Ok(Self { tx, shared })
    }

    /// The pool's configured size.
    pub fn size(&self) -> PoolSize {
        self.shared.size
    }

    /// Workers running or starting now.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Queue a call (prefix from [`protocol::encode_prefix`]) and wait for its outcome.
    pub async fn call(&self, prefix: Vec<u8>, body: Bytes) -> CallOutcome {
        self.grow_if_busy();
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

    /// No worker is free for this call: start one more, if the cap allows.
    fn grow_if_busy(&self) {
        let sh = &self.shared;
        if sh.idle.load(Ordering::SeqCst) > 0 {
            return;
        }
        let grew = sh
            .live
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < sh.size.max).then_some(n + 1)
            })
            .is_ok();
        if grew {
            tracing::debug!(
                live = sh.live.load(Ordering::SeqCst),
                "all workers busy; starting one more"
            );
            tokio::spawn(run_slot(sh.clone(), None));
        }
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
        let standby = spec
            .standby
            .as_ref()
            .and_then(|s| s.lock().ok().and_then(|mut s| s.take()))
            .filter(|s| s.fits(spec));
        if let Some(standby) = standby {
            let mut env = spec.env.clone();
            env.push((
                "KUBELESS_WORKER_SOCKET".into(),
                path.clone().into_os_string(),
            ));
            env.push(("KUBELESS_WORKER_ID".into(), slot.to_string().into()));
            if let Some(child) = standby.wake(&env).await {
                return Self::connect(spec, child, listener, path).await;
            }
        }
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("KUBELESS_WORKER_SOCKET", &path)
            .env("KUBELESS_WORKER_ID", slot.to_string())
            // A pool pod's token is not the function's business.
            .env_remove(kubeless_api::warm::TOKEN_ENV)
            .stdin(std::process::Stdio::null())
            // Function output goes straight to the container log.
            .stdout(std::process::Stdio::inherit())
            .stderr(std::process::Stdio::inherit())
            // Own process group, so a timeout also kills anything the function forked.
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|source| SpawnError::Spawn {
            program: spec.program.clone(),
            source,
        })?;
        Self::connect(spec, child, listener, path).await
    }

    /// Waits for a started worker to connect and say it loaded the function.
    async fn connect(
        spec: &WorkerSpec,
        mut child: Child,
        listener: UnixListener,
        path: PathBuf,
    ) -> Result<Self, SpawnError> {
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
        let hello = tokio::time::timeout(
            spec.start_timeout,
            protocol::read_frame(&mut reader, spec.max_reply_bytes),
        )
        .await;
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
        max_reply: usize,
    ) -> Result<(ResponseHead, Bytes), CallOutcome> {
        protocol::write_frame(&mut self.writer, prefix, body)
            .await
            .map_err(|e| CallOutcome::WorkerFailed(format!("sending the call failed: {e}")))?;
        match protocol::read_frame(&mut self.reader, max_reply).await {
            Ok(Some((head, body))) => {
                let head: ResponseHead = serde_json::from_slice(&head).map_err(|e| {
                    CallOutcome::WorkerFailed(format!("worker answer is not valid JSON: {e}"))
                })?;
                Ok((head, body))
            }
            Ok(None) => Err(CallOutcome::WorkerFailed(
                "worker exited during the call".into(),
            )),
            Err(e @ FrameError::BodyOverLimit { .. }) => {
                Err(CallOutcome::ReplyTooLarge(e.to_string()))
            }
            Err(e) => Err(CallOutcome::WorkerFailed(format!(
                "reading the answer failed: {e}"
            ))),
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

/// One pool slot: runs a worker, replaces it when it fails, and ends when the pool shrinks
/// or shuts down. The slot was counted in `live` by whoever spawned it.
async fn run_slot(sh: Arc<Shared>, ready: Option<oneshot::Sender<Result<(), SpawnError>>>) {
    let slot = sh.next_slot.fetch_add(1, Ordering::SeqCst);
    let mut ready = ready;
    let mut backoff = Duration::from_millis(100);
    loop {
        let g = sh.generation.fetch_add(1, Ordering::Relaxed);
        let mut worker = match Worker::spawn(&sh.spec, slot, g).await {
            Ok(w) => {
                backoff = Duration::from_millis(100);
                if let Some(r) = ready.take() {
                    let _ = r.send(Ok(()));
                }
                w
            }
            Err(e) => {
                if let Some(r) = ready.take() {
                    sh.live.fetch_sub(1, Ordering::SeqCst);
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
            sh.idle.fetch_add(1, Ordering::SeqCst);
            let next = tokio::select! {
                job = async { sh.rx.lock().await.recv().await } => Next::Job(job),
                status = worker.child.wait() => Next::Exited(status),
                () = tokio::time::sleep(sh.size.idle_timeout), if sh.size.idle_timeout < Duration::MAX => Next::IdleTooLong,
            };
            sh.idle.fetch_sub(1, Ordering::SeqCst);
            let job = match next {
                Next::Job(job) => job,
                Next::Exited(status) => {
                    let status = status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    tracing::error!(slot, %status, "idle worker exited; replacing it");
                    worker.kill();
                    break;
                }
                Next::IdleTooLong => {
                    let shrunk = sh
                        .live
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                            (n > sh.size.min).then(|| n - 1)
                        })
                        .is_ok();
                    if shrunk {
                        tracing::debug!(slot, "worker idle too long; stopping it");
                        worker.kill();
                        return;
                    }
                    continue;
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
            let call = worker.call(job.prefix, &job.body, sh.spec.max_reply_bytes);
            match tokio::time::timeout(sh.timeout, call).await {
                Ok(Ok((head, body))) => {
                    let retire = head.retire;
                    let _ = job.reply.send(CallOutcome::Response { head, body });
                    if retire {
                        tracing::warn!(slot, "worker asked to be replaced after its answer");
                        worker.kill();
                        break;
                    }
                }
                Ok(Err(outcome)) => {
                    // The stream is out of step (or gone): this worker cannot take another call.
                    tracing::error!(slot, ?outcome, "worker failed during a call; replacing it");
                    let _ = job.reply.send(outcome);
                    worker.kill();
                    break;
                }
                Err(_) => {
                    tracing::warn!(
                        slot,
                        timeout_s = sh.timeout.as_secs_f64(),
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

enum Next {
    Job(Option<Job>),
    Exited(std::io::Result<std::process::ExitStatus>),
    IdleTooLong,
}
