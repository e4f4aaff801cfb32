//! Which containers are running right now, with the env and working directory
//! their process got: what `kubectl exec` needs to run a command "in" a container.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// The stdin pipe of a `stdin: true` container, shared by the attach sessions; `None`
/// inside once it was closed (`stdinOnce`).
pub type ContainerStdin = Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>;

/// The env and working directory of a running container's process.
#[derive(Clone, Debug)]
pub struct RunningProcess {
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// The container's main process (what `kubectl top` measures, with its descendants).
    pub pid: Option<i32>,
    /// Its stdin when the container has `stdin: true` (for `kubectl attach -i`).
    pub stdin: Option<ContainerStdin>,
    /// `stdinOnce`: the first attach session that closes stdin closes it for good.
    pub stdin_once: bool,
    /// Runs a command inside the container (`podman exec NAME`); empty for a process.
    pub argv_prefix: Vec<String>,
}

impl PartialEq for RunningProcess {
    fn eq(&self, other: &Self) -> bool {
        let same_stdin = match (&self.stdin, &other.stdin) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        self.env == other.env
            && self.cwd == other.cwd
            && self.pid == other.pid
            && same_stdin
            && self.stdin_once == other.stdin_once
            && self.argv_prefix == other.argv_prefix
    }
}

impl RunningProcess {
    /// What an exec or attach session needs of it.
    pub fn session_process(&self) -> devcluster_streaming::exec::ContainerProcess {
        devcluster_streaming::exec::ContainerProcess {
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            stdin: self.stdin.clone(),
            stdin_once: self.stdin_once,
            argv_prefix: self.argv_prefix.clone(),
        }
    }
}

type Key = (String, String, String);

/// Shared registry, keyed by namespace, pod and container name. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct RunningContainers(Arc<Mutex<HashMap<Key, RunningProcess>>>);

impl RunningContainers {
    pub fn get(&self, ns: &str, pod: &str, container: &str) -> Option<RunningProcess> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&(ns.to_string(), pod.to_string(), container.to_string()))
            .cloned()
    }

    /// Every running container with a known main process id.
    pub fn pids(&self) -> Vec<(Key, i32)> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter_map(|(k, p)| Some((k.clone(), p.pid?)))
            .collect()
    }

    /// The main process ids of a pod's running containers.
    pub fn pod_pids(&self, ns: &str, pod: &str) -> Vec<i32> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter(|((n, p, _), _)| n == ns && p == pod)
            .filter_map(|(_, p)| p.pid)
            .collect()
    }

    /// Records a started container; the entry goes when the guard is dropped.
    pub(crate) fn register(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        process: RunningProcess,
    ) -> RunningGuard {
        let key = (ns.to_string(), pod.to_string(), container.to_string());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), process);
        RunningGuard {
            registry: self.clone(),
            key,
        }
    }
}

/// Removes its container from the registry when the container's instance ends.
pub(crate) struct RunningGuard {
    registry: RunningContainers,
    key: Key,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.registry
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_live_as_long_as_their_guard() {
        let reg = RunningContainers::default();
        let p = RunningProcess {
            env: BTreeMap::from([("A".into(), "1".into())]),
            cwd: PathBuf::from("/tmp"),
            pid: Some(1),
            stdin: None,
            stdin_once: false,
            argv_prefix: Vec::new(),
        };
        let guard = reg.register("ns", "pod", "main", p.clone());
        assert_eq!(reg.clone().get("ns", "pod", "main"), Some(p));
        assert_eq!(reg.get("ns", "pod", "other"), None);
        drop(guard);
        assert_eq!(reg.get("ns", "pod", "main"), None);
    }
}
