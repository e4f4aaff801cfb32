//! Which containers are running right now, with the env and working directory
//! their process got: what `kubectl exec` needs to run a command "in" a container.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// The env and working directory of a running container's process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningProcess {
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Runs a command inside the container (`podman exec NAME`); empty for a process.
    pub argv_prefix: Vec<String>,
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
            argv_prefix: Vec::new(),
        };
        let guard = reg.register("ns", "pod", "main", p.clone());
        assert_eq!(reg.clone().get("ns", "pod", "main"), Some(p));
        assert_eq!(reg.get("ns", "pod", "other"), None);
        drop(guard);
        assert_eq!(reg.get("ns", "pod", "main"), None);
    }
}
