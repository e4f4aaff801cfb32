//! The control plane's processes: started with their output in a log file, stopped by PID.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;

/// How many bytes of a log an error quotes.
const LOG_TAIL: usize = 3000;

/// One running component (etcd, kube-apiserver, ...).
#[derive(Debug)]
pub(crate) struct Proc {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Proc {
    pub fn spawn(
        name: &'static str,
        bin_dir: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<Self, Error> {
        let bin = bin_dir.join(name);
        let out = File::create(&log).map_err(|source| Error::Io {
            path: log.clone(),
            source,
        })?;
        let err = out.try_clone().map_err(|source| Error::Io {
            path: log.clone(),
            source,
        })?;
        let child = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| Error::Spawn { bin, source })?;
        Ok(Self { name, log, child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error if the process has exited (it should run until stopped).
    pub fn check_running(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(Error::Exited {
                name: self.name,
                status: status.to_string(),
                log: self.log.clone(),
                log_tail: self.log_tail(),
            }),
            _ => Ok(()),
        }
    }

    /// The error for "did not get ready within `waited`", with the end of its log.
    pub fn not_ready(&mut self, what: &str, waited: Duration) -> Error {
        if let Err(exited) = self.check_running() {
            return exited;
        }
        Error::NotReady {
            name: self.name,
            what: what.to_string(),
            waited,
            log: self.log.clone(),
            log_tail: self.log_tail(),
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(LOG_TAIL);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for the exit either way.
    pub fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> Result<u16, Error> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(Error::Port)
}
