//! Watches KinesisTriggers and Functions, keeps one [`TriggerReader`] per runnable trigger
//! (restarted when its configuration changes; it resumes from the checkpoints), and writes each
//! trigger's status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kubeless_api::conditions::{Condition, reasons, set_condition};
use kubeless_api::{Function, KinesisTrigger, KinesisTriggerStatus};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::plan::{TriggerKey, TriggerPlan, plan};
use crate::trigger::{ReaderState, Shared, TriggerReader};

/// Field manager of status writes and reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-kinesis-trigger";
/// Pause after a change before recomputing, so a burst of watch events costs one pass.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// What the reconciler needs.
pub struct Reconciler {
    pub shared: Shared,
    /// `None`: all namespaces.
    pub namespace: Option<String>,
    /// Recompute (and retry status writes) at least this often.
    pub resync: Duration,
    /// Set after every pass to the number of triggers whose reader is running.
    pub active: Arc<std::sync::atomic::AtomicUsize>,
}

impl Reconciler {
    /// Runs until `shutdown`, then stops every reader (their checkpoints are flushed).
    pub async fn run(self, shutdown: CancellationToken, synced: impl FnOnce() + Send) {
        let changed = Arc::clone(&self.shared.changed);
        // Guarded: a malformed KinesisTrigger (or Function) costs only itself.
        let (triggers, bad_triggers, trigger_task) =
            kubeless_service::guarded_watch_notify::<KinesisTrigger>(
                self.shared.client.clone(),
                self.namespace.as_deref(),
                Arc::clone(&changed),
            );
        let (functions, _, function_task) = kubeless_service::guarded_watch_notify::<Function>(
            self.shared.client.clone(),
            self.namespace.as_deref(),
            Arc::clone(&changed),
        );
        let recorder = Recorder::new(
            self.shared.client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
            },
        );
        let _tasks = (
            tokio_util::task::AbortOnDropHandle::new(trigger_task),
            tokio_util::task::AbortOnDropHandle::new(function_task),
        );
        let ready = async {
            let _ = triggers.wait_until_ready().await;
            let _ = functions.wait_until_ready().await;
        };
        tokio::select! {
            _ = ready => {}
            _ = shutdown.cancelled() => return,
        }
        let mut running: BTreeMap<TriggerKey, TriggerReader> = BTreeMap::new();
        let mut stopping = JoinSet::new();
        let mut synced = Some(synced);
        loop {
            let desired = plan(&triggers.state(), &functions.state());
            self.apply(&desired, &mut running, &mut stopping);
            let active = running
                .values()
                .filter(|r| matches!(*r.state.borrow(), ReaderState::Running { .. }))
                .count();
            self.active
                .store(active, std::sync::atomic::Ordering::Relaxed);
            self.write_statuses(&desired, &running, &triggers).await;
            // Malformed triggers: Ready=False InvalidSpec and a Warning Event, once per generation.
            kubeless_service::report_all_invalid::<KinesisTrigger>(
                &self.shared.client,
                &recorder,
                &bad_triggers,
                FIELD_MANAGER,
            )
            .await;
            if let Some(f) = synced.take() {
                f();
            }
            while stopping.try_join_next().is_some() {}
            tokio::select! {
                _ = changed.notified() => tokio::time::sleep(DEBOUNCE).await,
                _ = tokio::time::sleep(self.resync) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        tracing::info!(triggers = running.len(), "stopping trigger readers");
        for (_, r) in std::mem::take(&mut running) {
            stopping.spawn(r.stop());
        }
        while stopping.join_next().await.is_some() {}
        self.active.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Starts missing readers, stops unwanted ones, restarts changed ones.
    fn apply(
        &self,
        desired: &BTreeMap<TriggerKey, TriggerPlan>,
        running: &mut BTreeMap<TriggerKey, TriggerReader>,
        stopping: &mut JoinSet<()>,
    ) {
        let stale: Vec<TriggerKey> = running
            .iter()
            .filter(|(k, r)| {
                desired
                    .get(*k)
                    .and_then(|p| p.reader.as_ref().ok())
                    .is_none_or(|c| *c != *r.config)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(r) = running.remove(&key) {
                tracing::info!(trigger = %r.config.label(), "stopping stream reader");
                stopping.spawn(r.stop());
            }
        }
        for (key, p) in desired {
            let Ok(config) = &p.reader else { continue };
            if running.contains_key(key) {
                continue;
            }
            tracing::info!(trigger = %config.label(), stream = %config.stream, function = %config.function, "starting stream reader");
            running.insert(
                key.clone(),
                TriggerReader::spawn(self.shared.clone(), config.clone()),
            );
        }
    }

    async fn write_statuses(
        &self,
        desired: &BTreeMap<TriggerKey, TriggerPlan>,
        running: &BTreeMap<TriggerKey, TriggerReader>,
        triggers: &reflector::Store<KinesisTrigger>,
    ) {
        for t in triggers.state() {
            let key = (
                t.metadata.namespace.clone().unwrap_or_default(),
                t.metadata.name.clone().unwrap_or_default(),
            );
            let Some(p) = desired.get(&key) else { continue };
            let state = running.get(&key).map(|r| r.state.borrow().clone());
            let current = t.status.clone().unwrap_or_default();
            let Some(status) = desired_status(&current, p, state.as_ref(), &t.spec.stream) else {
                continue;
            };
            let api: Api<KinesisTrigger> = Api::namespaced(self.shared.client.clone(), &key.0);
            let patch = serde_json::json!({ "status": status });
            let result = api
                .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            let label = if result.is_ok() { "ok" } else { "error" };
            self.shared
                .metrics
                .status_writes
                .get_or_create(&[("result", label)])
                .inc();
            if let Err(e) = result {
                tracing::warn!(trigger = %format!("{}/{}", key.0, key.1), error = %e, "writing status failed");
            }
        }
    }
}

/// The status a trigger should have, or `None` when `current` already says it (ignoring
/// transition times). Pure.
pub fn desired_status(
    current: &KinesisTriggerStatus,
    p: &TriggerPlan,
    state: Option<&ReaderState>,
    stream: &str,
) -> Option<KinesisTriggerStatus> {
    let (ready, shards) = match (&p.reader, state) {
        (Err(problem), _) => (
            Condition::not_ready(problem.reason, problem.message.clone()),
            Vec::new(),
        ),
        (Ok(_), Some(ReaderState::Running { shards })) => (
            Condition::ready(
                reasons::RECONCILED,
                format!("reading {} shard(s) of stream {stream}", shards.len()),
            ),
            shards.clone(),
        ),
        (Ok(_), Some(ReaderState::Failed { reason, message })) => {
            (Condition::not_ready(*reason, message.clone()), Vec::new())
        }
        (Ok(_), Some(ReaderState::Starting) | None) => (
            Condition::not_ready(reasons::PROGRESSING, "connecting to the stream"),
            Vec::new(),
        ),
    };
    let mut next = current.clone();
    let mut changed = set_condition(&mut next.conditions, ready.with_generation(p.generation));
    if next.shards != shards {
        next.shards = shards;
        changed = true;
    }
    if next.observed_generation != p.generation {
        next.observed_generation = p.generation;
        changed = true;
    }
    changed.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Problem;
    use kubeless_api::conditions::{find_condition, is_ready};

    fn ok_plan() -> TriggerPlan {
        // The reader config content does not matter for the status.
        let t: KinesisTrigger = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "KinesisTrigger",
            "metadata": {"name": "t", "namespace": "ns", "generation": 4},
            "spec": {"function-name": "f", "stream": "s"}
        }))
        .unwrap();
        let f: Function = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
            "metadata": {"name": "f", "namespace": "ns"},
            "spec": {"runtime": "python3.11", "handler": "h.f", "function": ""}
        }))
        .unwrap();
        plan(&[Arc::new(t)], &[Arc::new(f)])
            .into_values()
            .next()
            .unwrap()
    }

    #[test]
    fn running_reader_is_ready_with_its_shards() {
        let p = ok_plan();
        let state = ReaderState::Running {
            shards: vec!["shardId-0".into(), "shardId-1".into()],
        };
        let s = desired_status(&KinesisTriggerStatus::default(), &p, Some(&state), "s").unwrap();
        assert!(is_ready(&s.conditions));
        assert_eq!(s.shards, vec!["shardId-0", "shardId-1"]);
        assert_eq!(s.observed_generation, Some(4));
        assert!(
            desired_status(&s, &p, Some(&state), "s").is_none(),
            "no change, no write"
        );
    }

    #[test]
    fn problems_and_failures_are_not_ready() {
        let p = ok_plan();
        let failed = ReaderState::Failed {
            reason: reasons::SOURCE_NOT_FOUND,
            message: "stream s not found".into(),
        };
        let s = desired_status(&KinesisTriggerStatus::default(), &p, Some(&failed), "s").unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert!(!c.is_true());
        assert_eq!(c.reason.as_deref(), Some(reasons::SOURCE_NOT_FOUND));

        let s = desired_status(&s, &p, Some(&ReaderState::Starting), "s").unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::PROGRESSING));

        let missing = TriggerPlan {
            generation: Some(5),
            reader: Err(Problem {
                reason: reasons::FUNCTION_NOT_FOUND,
                message: "function f not found".into(),
            }),
        };
        let s = desired_status(&s, &missing, None, "s").unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::FUNCTION_NOT_FOUND));
        assert_eq!(s.observed_generation, Some(5));
    }
}
