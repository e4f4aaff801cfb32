//! Starting and stopping container processes.
//!
//! Each container instance runs in its own process group, led by a tiny
//! watchdog shell (`sh -c 'read; kill -KILL 0'`) whose stdin is a pipe held
//! by the runner. When the runner exits for any reason, even SIGKILL, the
//! kernel closes that pipe, `read` returns, and the watchdog kills the whole
//! group: no container process outlives devcluster. Normal stops signal the
//! group (SIGTERM, then SIGKILL after the grace period).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::spec::ProcessSpec;

const WATCHDOG_SCRIPT: &str = "trap '' TERM INT HUP; read -r _; kill -KILL 0";

/// A running container process and its process group.
pub struct Running {
    child: Child,
    watchdog: Child,
    // Dropping this closes the pipe, which makes the watchdog kill the group.
    watchdog_stdin: Option<ChildStdin>,
    pgid: i32,
    pid: Option<u32>,
    // The process's stdin pipe when its container has `stdin: true`.
    stdin: Option<ChildStdin>,
    log_tasks: Vec<JoinHandle<()>>,
    // Once the watchdog is reaped the group id may be reused: never signal it again.
    cleaned: bool,
}

/// Where a container's log lines go: the log file, and beside it `{log}.times`, an index of
/// when the lines were written (one `OFFSET MILLIS` line, both decimal, each time the
/// millisecond of writing changes: the line starting at byte OFFSET and those after it were
/// written at MILLIS since the Unix epoch). The API server reads it for `sinceSeconds`,
/// `sinceTime` and `timestamps` (devcluster-apiserver's logs module).
pub struct LogSink {
    file: Arc<Mutex<LogFiles>>,
}

struct LogFiles {
    log: tokio::fs::File,
    times: Option<tokio::fs::File>,
    /// Bytes in the log so far (the offset of the next line).
    len: u64,
    last_ms: i64,
}

impl LogFiles {
    async fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        if now_ms != self.last_ms {
            if let Some(times) = &mut self.times {
                // The index only refines timestamps: a failed write costs no log line.
                let _ = times
                    .write_all(format!("{} {now_ms}\n", self.len).as_bytes())
                    .await;
            }
            self.last_ms = now_ms;
        }
        self.log.write_all(line).await?;
        self.len += line.len() as u64;
        self.log.flush().await
    }
}

/// The time index of the log at `log_path`.
pub fn times_path(log_path: &Path) -> PathBuf {
    let mut name = log_path.as_os_str().to_owned();
    name.push(".times");
    PathBuf::from(name)
}

impl LogSink {
    /// Opens `path` for appending, creating parent folders.
    pub async fn open(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(io)?;
        }
        let append = |p: PathBuf| async move {
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .await
        };
        let log = append(path.to_path_buf()).await.map_err(io)?;
        let len = log.metadata().await.map(|m| m.len()).unwrap_or(0);
        let times = append(times_path(path)).await.ok();
        Ok(Self {
            file: Arc::new(Mutex::new(LogFiles {
                log,
                times,
                len,
                last_ms: i64::MIN,
            })),
        })
    }

    /// Appends one line written by the runner itself (e.g. a start error).
    pub async fn note(&self, line: &str) {
        let mut f = self.file.lock().await;
        let _ = f.append(format!("{line}\n").as_bytes()).await;
    }
}

/// Moves `{name}.log` to `{name}.previous.log` (and its time index) before a restart.
pub async fn rotate_log(log_path: &Path) {
    let previous = previous_log_path(log_path);
    if tokio::fs::metadata(log_path).await.is_ok() {
        let _ = tokio::fs::rename(log_path, &previous).await;
        let _ = tokio::fs::remove_file(times_path(&previous)).await;
        let _ = tokio::fs::rename(times_path(log_path), times_path(&previous)).await;
    }
}

pub fn previous_log_path(log_path: &Path) -> PathBuf {
    let stem = log_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    log_path.with_file_name(format!("{stem}.previous.log"))
}

fn copy_lines<R: AsyncRead + Unpin + Send + 'static>(
    reader: R,
    sink: Arc<Mutex<LogFiles>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(reader);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    // Whole lines only, so stdout and stderr do not interleave mid-line.
                    let mut f = sink.lock().await;
                    if f.append(&line).await.is_err() {
                        break;
                    }
                }
            }
        }
    })
}

/// Starts `spec` in `cwd` with its output appended to `log`.
pub async fn spawn(spec: &ProcessSpec, cwd: &Path, log: &LogSink) -> Result<Running> {
    let mut watchdog = Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("devcluster-watchdog")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            program: "/bin/sh (watchdog)".into(),
            source,
        })?;
    let watchdog_stdin = watchdog.stdin.take();
    let Some(pgid) = watchdog.id().and_then(|p| i32::try_from(p).ok()) else {
        return Err(Error::Spawn {
            program: "/bin/sh (watchdog)".into(),
            source: std::io::Error::other("watchdog exited at once"),
        });
    };
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(&spec.env)
        .current_dir(cwd)
        .stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(pgid)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(source) => {
            // Closing the pipe makes the watchdog exit (it kills only itself now).
            drop(watchdog_stdin);
            let _ = tokio::time::timeout(Duration::from_secs(2), watchdog.wait()).await;
            return Err(Error::Spawn {
                program: spec.program.clone(),
                source,
            });
        }
    };
    let pid = child.id();
    let stdin = child.stdin.take();
    let mut log_tasks = Vec::new();
    if let Some(out) = child.stdout.take() {
        log_tasks.push(copy_lines(out, log.file.clone()));
    }
    if let Some(err) = child.stderr.take() {
        log_tasks.push(copy_lines(err, log.file.clone()));
    }
    Ok(Running {
        child,
        watchdog,
        watchdog_stdin,
        pgid,
        pid,
        stdin,
        log_tasks,
        cleaned: false,
    })
}

impl Running {
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The stdin pipe of a `stdin: true` container (once).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// Waits for the main process to exit, then cleans up its group.
    pub async fn wait(&mut self) -> ExitStatus {
        let status = self.exited().await;
        self.cleanup().await;
        status
    }

    /// Waits for the main process to exit (cancel-safe; call [`Running::cleanup`] after).
    pub async fn exited(&mut self) -> ExitStatus {
        match self.child.wait().await {
            Ok(s) => s,
            Err(_) => {
                use std::os::unix::process::ExitStatusExt;
                ExitStatus::from_raw(255 << 8)
            }
        }
    }

    /// SIGTERM to the group, SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) -> ExitStatus {
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGTERM);
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(s)) => Some(s),
            _ => None,
        };
        let status = match status {
            Some(s) => s,
            None => {
                let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
                match self.child.wait().await {
                    Ok(s) => s,
                    Err(_) => {
                        use std::os::unix::process::ExitStatusExt;
                        ExitStatus::from_raw(9)
                    }
                }
            }
        };
        self.cleanup().await;
        status
    }

    /// Kills whatever the container left in its group and reaps the watchdog.
    pub async fn cleanup(&mut self) {
        if self.cleaned {
            return;
        }
        // The watchdog leads the group and is not yet reaped, so the group id
        // cannot have been reused.
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        self.watchdog_stdin.take();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.watchdog.wait()).await;
        self.cleaned = true;
        for t in self.log_tasks.drain(..) {
            // Output pipes close once every group member is gone.
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Last resort when a task is aborted: the group must not survive.
        if !self.cleaned {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sh(script: &str) -> ProcessSpec {
        ProcessSpec {
            program: "sh".into(),
            stdin: false,
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::from([(
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            )]),
            working_dir: None,
            exec_prefix: Vec::new(),
        }
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn output_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("ns/pod/c.log");
        let log = LogSink::open(&log_path).await.unwrap();
        let mut r = spawn(&sh("echo out; echo err >&2; exit 3"), dir.path(), &log)
            .await
            .unwrap();
        let st = r.wait().await;
        assert_eq!(st.code(), Some(3));
        let text = std::fs::read_to_string(&log_path).unwrap();
        assert!(text.contains("out\n") && text.contains("err\n"), "{text}");
        rotate_log(&log_path).await;
        assert!(dir.path().join("ns/pod/c.previous.log").exists());
        assert!(dir.path().join("ns/pod/c.previous.log.times").exists());
        assert!(!log_path.exists());
    }

    #[tokio::test]
    async fn the_time_index_points_at_line_starts_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("c.log");
        let log = LogSink::open(&log_path).await.unwrap();
        log.note("first").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        log.note("second line").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        log.note("third").await;
        let index = std::fs::read_to_string(times_path(&log_path)).unwrap();
        let entries: Vec<(u64, i64)> = index
            .lines()
            .map(|l| {
                let (o, t) = l.split_once(' ').unwrap();
                (o.parse().unwrap(), t.parse().unwrap())
            })
            .collect();
        let offsets: Vec<u64> = entries.iter().map(|e| e.0).collect();
        assert_eq!(offsets, vec![0, 6, 18], "{index}");
        assert!(entries.windows(2).all(|w| w[0].1 < w[1].1), "{index}");
        // A reopened sink goes on from the file's end.
        drop(log);
        let log = LogSink::open(&log_path).await.unwrap();
        log.note("fourth").await;
        let index = std::fs::read_to_string(times_path(&log_path)).unwrap();
        assert!(index.lines().last().unwrap().starts_with("24 "), "{index}");
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogSink::open(&dir.path().join("c.log")).await.unwrap();
        // A child that ignores TERM and a grandchild in the background.
        let mut r = spawn(
            &sh("trap '' TERM; sleep 300 & echo $! > bg.pid; while true; do sleep 1; done"),
            dir.path(),
            &log,
        )
        .await
        .unwrap();
        let pid_file = dir.path().join("bg.pid");
        for _ in 0..100 {
            if pid_file.exists()
                && !std::fs::read_to_string(&pid_file)
                    .unwrap()
                    .trim()
                    .is_empty()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let bg: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let main = r.pid().unwrap() as i32;
        assert!(alive(bg));
        let st = r.stop(Duration::from_millis(300)).await;
        assert_eq!(crate::podstatus::exit_code_of(&st).0, 137);
        for _ in 0..50 {
            if !alive(bg) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(bg), "background grandchild must die with the group");
        assert!(!alive(main));
    }

    #[tokio::test]
    async fn natural_exit_kills_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogSink::open(&dir.path().join("c.log")).await.unwrap();
        let mut r = spawn(
            &sh("sleep 300 >/dev/null 2>&1 & echo $! > bg.pid"),
            dir.path(),
            &log,
        )
        .await
        .unwrap();
        assert_eq!(r.wait().await.code(), Some(0));
        let bg: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        for _ in 0..50 {
            if !alive(bg) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(bg));
    }

    #[tokio::test]
    async fn missing_program_is_a_spawn_error() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogSink::open(&dir.path().join("c.log")).await.unwrap();
        let mut spec = sh("true");
        spec.program = "definitely-not-a-program-xyz".into();
        assert!(matches!(
            spawn(&spec, dir.path(), &log).await,
            Err(Error::Spawn { .. })
        ));
    }
}

/// Runs only when started by `runner_sigkill_leaves_no_orphans`: spawns a
/// container process, prints its pid and hangs until killed.
#[cfg(test)]
mod sigkill_helper {
    use super::*;

    #[tokio::test]
    #[ignore = "helper process for runner_sigkill_leaves_no_orphans"]
    async fn sigkill_helper_process() {
        let Ok(dir) = std::env::var("DEVCLUSTER_SIGKILL_HELPER_DIR") else {
            return;
        };
        let dir = PathBuf::from(dir);
        let log = LogSink::open(&dir.join("c.log")).await.unwrap();
        let spec = ProcessSpec {
            program: "sh".into(),
            stdin: false,
            args: vec![
                "-c".into(),
                "sleep 300 & echo $! > bg.pid; sleep 300".into(),
            ],
            env: [(
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            )]
            .into(),
            working_dir: None,
            exec_prefix: Vec::new(),
        };
        let r = spawn(&spec, &dir, &log).await.unwrap();
        std::fs::write(dir.join("main.pid"), r.pid().unwrap().to_string()).unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    #[test]
    fn runner_sigkill_leaves_no_orphans() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut helper = std::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "process::sigkill_helper::sigkill_helper_process",
                "--nocapture",
            ])
            .env("DEVCLUSTER_SIGKILL_HELPER_DIR", dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let read_pid = |name: &str| -> Option<i32> {
            std::fs::read_to_string(dir.path().join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let mut pids = None;
        for _ in 0..500 {
            if let (Some(m), Some(b)) = (read_pid("main.pid"), read_pid("bg.pid")) {
                pids = Some((m, b));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (main, bg) = pids.expect("helper started its container");
        assert!(alive(main) && alive(bg));
        helper.kill().unwrap(); // SIGKILL: no cleanup code in the helper runs
        let _ = helper.wait();
        let mut gone = false;
        for _ in 0..250 {
            if !alive(main) && !alive(bg) {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone, "container processes must die with the runner");
    }
}
