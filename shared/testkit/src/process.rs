//! Service binaries as child processes, signals, free ports and polling.

use std::fs::File;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// A free TCP port on 127.0.0.1 (free when asked; callers retry if it is taken meanwhile).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: Signal) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, sig).unwrap_or_else(|e| panic!("kill -{sig} {pid}: {e}"));
}

/// `<target>/debug` of the running test binary (`<target>/debug/deps/<test>-<hash>`): where
/// `cargo build --workspace --bins` left the service binaries the tests start.
pub fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target/debug"))
}

/// The workspace binary `name` in [`target_dir`]. Tests never run cargo themselves: the suite
/// builds every binary first (`cargo build --workspace --bins`, scripts/test.sh), so a missing
/// one panics with that command.
pub fn workspace_bin(name: &str) -> PathBuf {
    let path = target_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests (scripts/test.sh does)",
        path.display()
    );
    path
}

/// devcluster's image map of the repository (`devcluster/images.d`) written into `<into>/images.d`
/// with `${BIN_DIR}` set to [`target_dir`] (checked to hold `needs`) and `${MAP_DIR}` to the
/// repository's map: what a test passes as the cluster's image map to run images as local
/// processes.
pub fn image_map(into: &Path, needs: &[&str]) -> PathBuf {
    for name in needs {
        workspace_bin(name);
    }
    let src = devcluster::repo_images_dir();
    let out = into.join("images.d");
    std::fs::create_dir_all(&out).unwrap();
    let bin = target_dir();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("${BIN_DIR}", &bin.to_string_lossy())
            .replace("${MAP_DIR}", &src.to_string_lossy());
        std::fs::write(out.join(path.file_name().unwrap()), text).unwrap();
    }
    out
}

/// Polls `f` every 100 ms until it gives a value; panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A service binary run as a child process with a clean environment (PATH plus what the test
/// gives), its output appended to `<log_dir>/<name>.log`. Killed on drop.
pub struct ServiceProcess {
    child: Child,
    pub log: PathBuf,
}

impl ServiceProcess {
    /// Starts the binary `bin` from [`target_dir`].
    pub fn start(bin: &str, log_dir: &Path, name: &str, env: &[(&str, String)]) -> Self {
        let path = target_dir().join(bin);
        let log = log_dir.join(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut cmd = Command::new(&path);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `cargo build --workspace --bins` first; scripts/test.sh does)",
                path.display()
            )
        });
        Self { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running?
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL: no drain, no commit, no goodbye to the broker.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `limit` for the exit; SIGKILL past it. Returns how long the
    /// process took, or `None` if it had to be killed.
    pub fn terminate(mut self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        signal(self.pid(), Signal::SIGTERM);
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// The last `lines` lines of the log (for failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
