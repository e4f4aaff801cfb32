//! Watches NATSTriggers and Functions, keeps the running subscriptions equal to
//! [`plan`](crate::plan::plan)'s desired set, and writes each trigger's status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::{Api, Client};
use kubeless_api::conditions::{Condition, reasons, set_condition};
use kubeless_api::{Function, NatsTrigger, NatsTriggerStatus};
use kubeless_invoke::Invoker;
use kubeless_service::ThrottledEvents;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::deliver::Deliverer;
use crate::metrics::TriggerMetrics;
use crate::plan::{Mode, Plan, SubscriptionConfig, SubscriptionKey, TriggerPlan, plan};
use crate::subscription::{SubState, Subscription};

/// Field manager of status writes and reporting controller of Events.
pub const FIELD_MANAGER: &str = "kubeless-nats-trigger";
/// Pause after a change before recomputing, so a burst of watch events costs one pass.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// What the reconciler needs.
pub struct Reconciler {
    pub client: Client,
    pub nats: async_nats::Client,
    pub invoker: Invoker,
    pub metrics: TriggerMetrics,
    /// `None`: all namespaces.
    pub namespace: Option<String>,
    pub drain_timeout: Duration,
    /// Recompute (and retry status writes) at least this often.
    pub resync: Duration,
    /// `Some`: status is written only while this is `true` (the Lease holder).
    pub leader: Option<watch::Receiver<bool>>,
    /// Set after every pass to the number of subscriptions in the Running state.
    pub active: Arc<std::sync::atomic::AtomicUsize>,
}

struct Running {
    config: Arc<SubscriptionConfig>,
    sub: Subscription,
}

impl Reconciler {
    /// Runs until `shutdown`; then stops every subscription, draining calls in flight.
    /// `synced` is called once both caches are filled and the first pass is done.
    pub async fn run(self, shutdown: CancellationToken, synced: impl FnOnce() + Send) {
        let changed = Arc::new(Notify::new());
        // Guarded: a malformed NATSTrigger (or Function) costs only itself.
        let (triggers, bad_triggers, trigger_task) =
            kubeless_service::guarded_watch_notify::<NatsTrigger>(
                self.client.clone(),
                self.namespace.as_deref(),
                Arc::clone(&changed),
            );
        let (functions, _, function_task) = kubeless_service::guarded_watch_notify::<Function>(
            self.client.clone(),
            self.namespace.as_deref(),
            Arc::clone(&changed),
        );
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
        };
        let recorder = Recorder::new(self.client.clone(), reporter.clone());
        // Delivery failures and dead letters: every replica reports what it delivered.
        let events = ThrottledEvents::new(
            self.client.clone(),
            reporter,
            kubeless_service::DEFAULT_EVENT_INTERVAL,
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
        let mut running: BTreeMap<SubscriptionKey, Running> = BTreeMap::new();
        let mut stopping = JoinSet::new();
        let mut synced = Some(synced);
        loop {
            let desired = plan(&triggers.state(), &functions.state());
            self.apply(&desired, &mut running, &mut stopping, &changed, &events);
            self.metrics.subscriptions.set(running.len() as i64);
            let active = running
                .values()
                .filter(|r| *r.sub.state.borrow() == SubState::Running)
                .count();
            self.active
                .store(active, std::sync::atomic::Ordering::Relaxed);
            if self.may_write_status() {
                self.write_statuses(&desired, &running, &triggers).await;
                // Malformed triggers get Ready=False InvalidSpec and a Warning Event, once per
                // generation.
                kubeless_service::report_all_invalid::<NatsTrigger>(
                    &self.client,
                    &recorder,
                    &bad_triggers,
                    FIELD_MANAGER,
                )
                .await;
            }
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
        tracing::info!(subscriptions = running.len(), "stopping subscriptions");
        for (_, r) in std::mem::take(&mut running) {
            stopping.spawn(r.sub.stop());
        }
        while stopping.join_next().await.is_some() {}
        self.metrics.subscriptions.set(0);
    }

    fn may_write_status(&self) -> bool {
        self.leader.as_ref().is_none_or(|l| *l.borrow())
    }

    /// Starts missing subscriptions, stops unwanted ones, restarts changed ones.
    fn apply(
        &self,
        desired: &Plan,
        running: &mut BTreeMap<SubscriptionKey, Running>,
        stopping: &mut JoinSet<()>,
        changed: &Arc<Notify>,
        events: &ThrottledEvents,
    ) {
        let stale: Vec<SubscriptionKey> = running
            .iter()
            .filter(|(k, r)| desired.subscriptions.get(*k) != Some(&*r.config))
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(r) = running.remove(&key) {
                tracing::info!(subscription = %key, "stopping subscription");
                stopping.spawn(r.sub.stop());
            }
        }
        for (key, config) in &desired.subscriptions {
            if running.contains_key(key) {
                continue;
            }
            tracing::info!(subscription = %key, topic = %config.topic, jetstream = matches!(config.mode, Mode::JetStream(_)), "starting subscription");
            let config = Arc::new(config.clone());
            let trigger = format!("{}/{}", key.namespace, key.trigger);
            let deliverer = Deliverer::new(
                Arc::new(key.clone()),
                Arc::clone(&config),
                self.invoker.clone(),
                self.nats.clone(),
                self.metrics.subscription(&trigger, &key.function),
            )
            .with_events(events.clone());
            let sub = Subscription::spawn(deliverer, Arc::clone(changed), self.drain_timeout);
            running.insert(key.clone(), Running { config, sub });
        }
    }

    async fn write_statuses(
        &self,
        desired: &Plan,
        running: &BTreeMap<SubscriptionKey, Running>,
        triggers: &reflector::Store<NatsTrigger>,
    ) {
        for t in triggers.state() {
            let key = (
                t.metadata.namespace.clone().unwrap_or_default(),
                t.metadata.name.clone().unwrap_or_default(),
            );
            let Some(tp) = desired.triggers.get(&key) else {
                continue;
            };
            let states: Vec<(String, SubState)> = running
                .iter()
                .filter(|(k, _)| k.namespace == key.0 && k.trigger == key.1)
                .map(|(k, r)| (k.function.clone(), r.sub.state.borrow().clone()))
                .collect();
            let current = t.status.clone().unwrap_or_default();
            let Some(status) = desired_status(&current, tp, &states, &t.spec.topic) else {
                continue;
            };
            let api: Api<NatsTrigger> = Api::namespaced(self.client.clone(), &key.0);
            let patch = serde_json::json!({ "status": status });
            match api
                .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.metrics
                        .status_writes
                        .get_or_create(&[("result", "ok")])
                        .inc();
                }
                Err(e) => {
                    self.metrics
                        .status_writes
                        .get_or_create(&[("result", "error")])
                        .inc();
                    tracing::warn!(trigger = %format!("{}/{}", key.0, key.1), error = %e, "writing status failed");
                }
            }
        }
    }
}

/// The status a trigger should have, or `None` when `current` already says it (ignoring
/// transition times). Pure.
pub fn desired_status(
    current: &NatsTriggerStatus,
    tp: &TriggerPlan,
    states: &[(String, SubState)],
    topic: &str,
) -> Option<NatsTriggerStatus> {
    let ready = match &tp.problem {
        Some(p) => Condition::not_ready(p.reason, p.message.clone()),
        None => {
            let failed = states.iter().find_map(|(f, s)| match s {
                SubState::Failed { reason, message } => Some((f, *reason, message)),
                _ => None,
            });
            if let Some((f, reason, message)) = failed {
                Condition::not_ready(reason, format!("function {f}: {message}"))
            } else if states.iter().any(|(_, s)| *s == SubState::Starting)
                || states.len() < tp.functions.len()
            {
                Condition::not_ready(reasons::PROGRESSING, "subscribing")
            } else {
                Condition::ready(
                    reasons::RECONCILED,
                    format!("delivering {topic:?} to {} function(s)", tp.functions.len()),
                )
            }
        }
    }
    .with_generation(tp.generation);
    let mut next = current.clone();
    let mut changed = set_condition(&mut next.conditions, ready);
    if next.functions != tp.functions {
        next.functions = tp.functions.clone();
        changed = true;
    }
    if next.observed_generation != tp.generation {
        next.observed_generation = tp.generation;
        changed = true;
    }
    changed.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Problem;
    use kubeless_api::conditions::{find_condition, is_ready};

    fn tp(functions: &[&str], problem: Option<Problem>) -> TriggerPlan {
        TriggerPlan {
            generation: Some(2),
            functions: functions.iter().map(|s| s.to_string()).collect(),
            problem,
        }
    }

    #[test]
    fn ready_when_every_subscription_runs() {
        let states = vec![
            ("a".to_string(), SubState::Running),
            ("b".into(), SubState::Running),
        ];
        let s = desired_status(
            &NatsTriggerStatus::default(),
            &tp(&["a", "b"], None),
            &states,
            "x",
        )
        .unwrap();
        assert!(is_ready(&s.conditions));
        assert_eq!(s.functions, vec!["a", "b"]);
        assert_eq!(s.observed_generation, Some(2));
        // Same again: nothing to write.
        assert!(desired_status(&s, &tp(&["a", "b"], None), &states, "x").is_none());
    }

    #[test]
    fn broker_failures_and_problems_are_reported() {
        let states = vec![
            ("a".to_string(), SubState::Running),
            (
                "b".into(),
                SubState::Failed {
                    reason: reasons::BROKER_UNAVAILABLE,
                    message: "connection refused".into(),
                },
            ),
        ];
        let s = desired_status(
            &NatsTriggerStatus::default(),
            &tp(&["a", "b"], None),
            &states,
            "x",
        )
        .unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert!(!c.is_true());
        assert_eq!(c.reason.as_deref(), Some(reasons::BROKER_UNAVAILABLE));
        assert!(c.message.as_deref().unwrap().contains("function b"));

        let none = Problem {
            reason: reasons::NO_FUNCTIONS_SELECTED,
            message: "none".into(),
        };
        let s = desired_status(&s, &tp(&[], Some(none)), &[], "x").unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::NO_FUNCTIONS_SELECTED));
        assert!(s.functions.is_empty());

        let starting = vec![("a".to_string(), SubState::Starting)];
        let s = desired_status(&s, &tp(&["a"], None), &starting, "x").unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::PROGRESSING));
    }
}
