//! One prometheus-client [`Registry`] per process; each subsystem registers into its own prefixed
//! sub-registry.

use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::registry::Registry;

/// Shared handle to the process registry. Cloning is cheap.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
}

impl Metrics {
    /// A registry whose metric names all start with `prefix_` (e.g. `kubeless`).
    pub fn new(prefix: &str) -> Self {
        Self {
            registry: Arc::new(Mutex::new(Registry::with_prefix(prefix))),
        }
    }

    /// Runs `f` with the sub-registry for `subsystem` (names become `<prefix>_<subsystem>_...`).
    pub fn register_with<R>(&self, subsystem: &str, f: impl FnOnce(&mut Registry) -> R) -> R {
        let mut guard = self.lock();
        f(guard.sub_registry_with_prefix(subsystem))
    }

    /// Runs `f` with the root registry (names become `<prefix>_...`).
    pub fn register_root<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.lock())
    }

    /// The OpenMetrics text exposition of every registered metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut out, &self.lock())?;
        Ok(out)
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while registering leaves the registry usable; keep serving it.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn sub_registries_are_prefixed() {
        let m = Metrics::new("kubeless");
        let c: Counter = Counter::default();
        m.register_with("invoker", |r| r.register("calls", "Calls made", c.clone()));
        c.inc_by(3);
        let text = m.encode().unwrap();
        assert!(text.contains("kubeless_invoker_calls_total 3"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
