//! The interfaces the pod runner plugs into the API server: running containers for
//! `pods/exec` and `pods/attach` ([`ExecBackend`]) and their usage for `metrics.k8s.io`
//! ([`MetricsBackend`]), each in a slot the runner fills once. `exec` and `metrics`
//! re-export them under their old paths.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use devcluster_streaming::exec::{ContainerProcess, ContainerStdin};

/// Finds running containers for exec; the pod runner implements it.
pub trait ExecBackend: Send + Sync + 'static {
    /// The running container `container` of pod `ns/pod`, or None when it is not running.
    fn container(&self, ns: &str, pod: &str, container: &str) -> Option<ContainerProcess>;
}

/// Where the pod runner's [`ExecBackend`] goes; empty without a runner.
pub type ExecSlot = Arc<std::sync::OnceLock<Arc<dyn ExecBackend>>>;

/// CPU (a rate in cores) and memory (bytes) over a window that ended at `timestamp`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    pub cpu_cores: f64,
    pub memory_bytes: u64,
    pub timestamp: SystemTime,
    pub window: Duration,
}

/// The usage of one running container.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerUsage {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub usage: Usage,
}

/// Measures running containers and the node; the pod runner implements it.
pub trait MetricsBackend: Send + Sync + 'static {
    /// Every running container that has a full measurement window.
    fn containers(&self) -> Vec<ContainerUsage>;
    /// The node `name` (devcluster has one), once it has a full window.
    fn node(&self) -> Option<(String, Usage)>;
}

pub type MetricsSlot = Arc<std::sync::OnceLock<Arc<dyn MetricsBackend>>>;
