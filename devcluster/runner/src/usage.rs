//! What metrics-server serves as `metrics.k8s.io` on a real cluster, measured here:
//! every `resolution` the runner reads each running container's CPU time and resident
//! memory from `/proc` (see [`crate::podmetrics::usage`]) and the host's CPU time and
//! memory in use (`/proc/stat`, `/proc/meminfo`). A CPU rate is the difference of the
//! last two samples over their window, so a container shows up after its second sample,
//! as with metrics-server ("metrics not available yet" before).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::podmetrics::{ProcTable, ProcessUsage};
use crate::running::RunningContainers;

/// How often usage is sampled (metrics-server's `--metric-resolution`).
pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(5);

/// A measurement over one window: CPU in cores (a rate), memory in bytes (at its end).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    pub cpu_cores: f64,
    pub memory_bytes: u64,
    /// When the window ended.
    pub timestamp: SystemTime,
    pub window: Duration,
}

/// (namespace, pod, container)
pub type ContainerKey = (String, String, String);

#[derive(Clone, Copy)]
struct Sample {
    at: Instant,
    wall: SystemTime,
    cpu_seconds: f64,
    memory_bytes: u64,
}

impl Sample {
    fn rate_since(&self, prev: &Sample) -> Option<Usage> {
        let window = self.at.checked_duration_since(prev.at)?;
        if window.is_zero() {
            return None;
        }
        Some(Usage {
            cpu_cores: ((self.cpu_seconds - prev.cpu_seconds) / window.as_secs_f64()).max(0.0),
            memory_bytes: self.memory_bytes,
            timestamp: self.wall,
            window,
        })
    }
}

#[derive(Default)]
struct State {
    /// The last two samples of each running container (same process id).
    containers: HashMap<ContainerKey, (i32, Option<Sample>, Sample)>,
    node: Option<(Option<Sample>, Sample)>,
}

/// The latest usage of running containers and of the node. Cloning shares it.
#[derive(Clone, Default)]
pub struct UsageSampler(Arc<Mutex<State>>);

impl std::fmt::Debug for UsageSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageSampler").finish_non_exhaustive()
    }
}

impl UsageSampler {
    /// Every running container with a full window, sorted by key.
    pub fn containers(&self) -> Vec<(ContainerKey, Usage)> {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(ContainerKey, Usage)> = state
            .containers
            .iter()
            .filter_map(|(k, (_, prev, last))| Some((k.clone(), last.rate_since(prev.as_ref()?)?)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The node's usage over the last window, once two samples exist.
    pub fn node(&self) -> Option<Usage> {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (prev, last) = state.node.as_ref()?;
        last.rate_since(prev.as_ref()?)
    }

    /// Takes one sample of every running container and of the node.
    pub fn sample(&self, running: &RunningContainers) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let sample = |u: ProcessUsage| Sample {
            at: now,
            wall,
            cpu_seconds: u.cpu_seconds,
            memory_bytes: u.memory_bytes,
        };
        // One scan of /proc for every container (the memory of each of their
        // processes is read too, and nothing else).
        let table = ProcTable::read();
        let measured: Vec<(ContainerKey, i32, Sample)> = running
            .pids()
            .into_iter()
            .filter_map(|(key, pid)| {
                let u = table.as_ref()?.usage(&[pid])?;
                Some((key, pid, sample(u)))
            })
            .collect();
        let node = node_usage().map(sample);
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = HashMap::with_capacity(measured.len());
        for (key, pid, s) in measured {
            // A restarted container (new process) starts a new window.
            let prev = state
                .containers
                .remove(&key)
                .filter(|(old_pid, _, _)| *old_pid == pid)
                .map(|(_, _, last)| last);
            next.insert(key, (pid, prev, s));
        }
        state.containers = next;
        if let Some(s) = node {
            let prev = state.node.take().map(|(_, last)| last);
            state.node = Some((prev, s));
        }
    }

    /// Samples every `resolution` until `cancel`.
    pub async fn run(
        self,
        running: RunningContainers,
        resolution: Duration,
        cancel: CancellationToken,
    ) {
        loop {
            let (s, r) = (self.clone(), running.clone());
            // /proc reads block; keep them off the async workers.
            let _ = tokio::task::spawn_blocking(move || s.sample(&r)).await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(resolution) => {}
            }
        }
    }
}

/// The host's CPU seconds spent outside idle and iowait (`/proc/stat`) and its memory in
/// use (`MemTotal - MemAvailable` of `/proc/meminfo`).
fn node_usage() -> Option<ProcessUsage> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    let mem = meminfo()?;
    Some(ProcessUsage {
        cpu_seconds: busy as f64 / 100.0,
        memory_bytes: mem.total.saturating_sub(mem.available),
    })
}

/// The host's memory in bytes.
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
}

pub fn meminfo() -> Option<MemInfo> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some(MemInfo {
        total: field("MemTotal:")?,
        available: field("MemAvailable:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_needs_two_samples_of_the_same_process() {
        let running = RunningContainers::default();
        let me = std::process::id() as i32;
        let _guard = running.register(
            "ns",
            "pod",
            "main",
            crate::running::RunningProcess {
                env: Default::default(),
                cwd: std::env::temp_dir(),
                pid: Some(me),
                stdin: None,
                stdin_once: false,
                argv_prefix: Vec::new(),
            },
        );
        let sampler = UsageSampler::default();
        sampler.sample(&running);
        assert!(sampler.containers().is_empty(), "one sample is no window");
        // Burn some CPU so the rate is above zero.
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(200) {
            x = x.wrapping_mul(31).wrapping_add(1);
        }
        std::hint::black_box(x);
        sampler.sample(&running);
        let all = sampler.containers();
        assert_eq!(all.len(), 1);
        let (key, u) = &all[0];
        assert_eq!(key, &("ns".into(), "pod".into(), "main".into()));
        assert!(u.cpu_cores > 0.0, "{u:?}");
        assert!(u.memory_bytes > 0, "{u:?}");
        let node = sampler.node().unwrap();
        assert!(node.memory_bytes > 0 && node.cpu_cores > 0.0, "{node:?}");
    }
}
