//! Starts and stops consumers so that the running set matches the plan. A consumer whose spec
//! changed (function timeout or port, retry policy, dead-letter topic, ordering) is stopped
//! (drained and committed) before its replacement joins the same group, so no record is lost
//! or delivered by both.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::consumer::{self, ConsumerHandle, Health, Shared};
use crate::plan::ConsumerSpec;

pub struct Supervisor {
    shared: Arc<Shared>,
    running: HashMap<String, (ConsumerSpec, ConsumerHandle)>,
}

impl Supervisor {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            running: HashMap::new(),
        }
    }

    /// Groups running now.
    pub fn groups(&self) -> Vec<String> {
        let mut g: Vec<String> = self.running.keys().cloned().collect();
        g.sort();
        g
    }

    pub async fn apply(&mut self, desired: &BTreeMap<String, ConsumerSpec>) {
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(g, (spec, _))| desired.get(*g) != Some(spec))
            .map(|(g, _)| g.clone())
            .collect();
        let stopping: Vec<ConsumerHandle> = stale
            .iter()
            .filter_map(|g| self.running.remove(g))
            .map(|(spec, h)| {
                tracing::info!(group = %spec.group, "stopping consumer (removed or changed)");
                h
            })
            .collect();
        futures::future::join_all(stopping.into_iter().map(ConsumerHandle::stop)).await;
        for (group, spec) in desired {
            if self.running.contains_key(group) {
                continue;
            }
            match consumer::start(spec.clone(), Arc::clone(&self.shared)) {
                Ok(h) => {
                    self.running.insert(group.clone(), (spec.clone(), h));
                }
                Err(e) => {
                    tracing::error!(group = %group, error = %e, source = ?std::error::Error::source(&e), "starting consumer failed");
                    let mut m = self.shared.health.lock().unwrap_or_else(|e| e.into_inner());
                    m.insert(group.clone(), Health::Unavailable(e.to_string()));
                }
            }
        }
    }

    /// Drains and commits every consumer (shutdown).
    pub async fn stop_all(&mut self) {
        let all: Vec<ConsumerHandle> = self.running.drain().map(|(_, (_, h))| h).collect();
        futures::future::join_all(all.into_iter().map(ConsumerHandle::stop)).await;
    }
}
