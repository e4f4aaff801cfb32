//! The control loop every event trigger runs: watch the trigger kind and Functions (guarded, so
//! a malformed object costs only itself), compute the desired set of units with the source's
//! pure [`Source::plan`], start, stop and restart units to match, and write each trigger's
//! status (Ready condition with observedGeneration; only on the Lease holder when one is set)
//! and InvalidSpec Events. On shutdown every unit is stopped, draining its calls in flight.
//!
//! A unit is whatever the broker needs per (trigger, function) or per trigger: a NATS
//! subscription, a Kinesis stream reader, a Redis consumer-group reader.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use kubeless_api::Function;
use kubeless_api::conditions::{Condition, reasons, set_condition};
use kubeless_service::{LeaseConfig, ThrottledEvents, lease::LeaderElector, lease::LeaseMetrics};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::metrics::TriggerMetrics;

/// Pause after a change before recomputing, so a burst of watch events costs one pass.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Why a trigger has no units (or not all it should have).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// A `kubeless_api::conditions::reasons` value.
    pub reason: &'static str,
    pub message: String,
}

impl Problem {
    /// `InvalidSpec` with `message`.
    pub fn invalid_spec(message: impl Into<String>) -> Self {
        Self {
            reason: reasons::INVALID_SPEC,
            message: message.into(),
        }
    }
}

/// (namespace, name) of a trigger.
pub type TriggerRef = (String, String);

/// What one trigger's status should say, besides the state of its units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerPlan<K> {
    pub generation: Option<i64>,
    /// Selected functions, sorted.
    pub functions: Vec<String>,
    /// The units this trigger has in the plan, sorted.
    pub units: Vec<K>,
    pub problem: Option<Problem>,
}

/// The desired state: the units to run and what each trigger's status should say.
#[derive(Clone, Debug)]
pub struct Plan<K, C> {
    pub units: BTreeMap<K, C>,
    pub triggers: BTreeMap<TriggerRef, TriggerPlan<K>>,
}

impl<K, C> Default for Plan<K, C> {
    fn default() -> Self {
        Self {
            units: BTreeMap::new(),
            triggers: BTreeMap::new(),
        }
    }
}

/// One unit the source wants: its key, the function it delivers to, its configuration.
pub struct PlannedUnit<K, C> {
    pub key: K,
    pub function: String,
    pub config: C,
}

impl<K: Ord + Clone, C> Plan<K, C> {
    /// Builds the plan trigger by trigger: `plan_trigger` gives a trigger's units or why it has
    /// none. Triggers being deleted are left out; a trigger with no unit and no problem is
    /// `NoFunctionsSelected`.
    pub fn build<T: Resource>(
        triggers: &[Arc<T>],
        mut plan_trigger: impl FnMut(&T, &str, &str) -> Result<Vec<PlannedUnit<K, C>>, Problem>,
    ) -> Self {
        let mut out = Self::default();
        for t in triggers {
            if t.meta().deletion_timestamp.is_some() {
                continue;
            }
            let namespace = t.meta().namespace.clone().unwrap_or_default();
            let name = t.meta().name.clone().unwrap_or_default();
            let mut tp = TriggerPlan {
                generation: t.meta().generation,
                functions: Vec::new(),
                units: Vec::new(),
                problem: None,
            };
            match plan_trigger(t, &namespace, &name) {
                Ok(units) if units.is_empty() => {
                    tp.problem = Some(Problem {
                        reason: reasons::NO_FUNCTIONS_SELECTED,
                        message: "the function selector matches no function in this namespace"
                            .into(),
                    });
                }
                Ok(units) => {
                    for u in units {
                        tp.functions.push(u.function);
                        tp.units.push(u.key.clone());
                        out.units.insert(u.key, u.config);
                    }
                    tp.functions.sort();
                    tp.functions.dedup();
                    tp.units.sort();
                }
                Err(problem) => tp.problem = Some(problem),
            }
            out.triggers.insert((namespace, name), tp);
        }
        out
    }
}

/// The state a unit reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitState {
    Starting,
    /// Running; `detail` is what the status lists beside the condition when the source's
    /// status has such a list (a Kinesis trigger's shards).
    Running {
        detail: Vec<String>,
    },
    Failed {
        /// A `kubeless_api::conditions::reasons` value.
        reason: &'static str,
        message: String,
    },
}

impl UnitState {
    /// Running with nothing to list.
    pub fn running() -> Self {
        Self::Running { detail: Vec::new() }
    }
}

/// A running unit.
pub trait Unit: Send + Sync + 'static {
    /// Its current state (units wake the loop through [`UnitContext::changed`] when it changes).
    fn state(&self) -> UnitState;
    /// Stops it: drains calls in flight and acknowledges or checkpoints what was delivered.
    fn stop(self) -> impl Future<Output = ()> + Send + 'static;
    /// `true` when the unit gave up (it could not start): the loop starts it again on its next
    /// pass.
    fn needs_restart(&self) -> bool {
        false
    }
}

/// What the loop hands a source when it starts a unit.
#[derive(Clone)]
pub struct UnitContext {
    /// Notify this when the unit's state changes, so the status follows at once.
    pub changed: Arc<Notify>,
}

/// A trigger status with a Ready condition, observedGeneration and a list beside them.
pub trait TriggerStatus: Clone + Default + Serialize + Send + Sync {
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    fn observed_generation_mut(&mut self) -> &mut Option<i64>;
    /// Sets the list the status shows (selected functions, or the units' details); `true` when
    /// it changed.
    fn set_list(&mut self, functions: &[String], details: &[String]) -> bool;
}

/// A trigger kind and the broker code behind it: all a trigger implements besides its CRD.
pub trait Source: Send + Sync + 'static {
    /// The trigger's CRD.
    type Trigger: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static;
    type Status: TriggerStatus;
    /// Identifies a unit; units with equal keys and configurations keep running.
    type Key: Ord + Clone + fmt::Display + Send + Sync + 'static;
    /// A unit's configuration; a changed one restarts the unit.
    type Config: PartialEq + Send + Sync + 'static;
    type Unit: Unit;

    /// Field manager of status writes and reporting controller of Events
    /// (`kubeless-<service>`).
    fn field_manager(&self) -> &'static str;
    /// The desired units. Pure.
    fn plan(
        &self,
        triggers: &[Arc<Self::Trigger>],
        functions: &[Arc<Function>],
    ) -> Plan<Self::Key, Self::Config>;
    /// Starts one unit.
    fn start(&self, key: &Self::Key, config: Arc<Self::Config>, ctx: &UnitContext) -> Self::Unit;
    /// The trigger's current status.
    fn status(trigger: &Self::Trigger) -> Option<&Self::Status>;
    /// The Ready message of a trigger whose units all run; `details` are what they list.
    fn ready_message(
        &self,
        trigger: &Self::Trigger,
        plan: &TriggerPlan<Self::Key>,
        details: &[String],
    ) -> String;
    /// The Progressing message while units start.
    fn progressing_message(&self) -> &'static str {
        "starting"
    }
}

/// The Ready condition of a trigger given its units' states (`None`: not started).
pub fn ready_condition<K: fmt::Display>(
    plan: &TriggerPlan<K>,
    states: &[(&K, Option<UnitState>)],
    ready_message: impl FnOnce() -> String,
    progressing_message: &str,
) -> Condition {
    let c = match &plan.problem {
        Some(p) => Condition::not_ready(p.reason, p.message.clone()),
        None => {
            let failed = states.iter().find_map(|(k, s)| match s {
                Some(UnitState::Failed { reason, message }) => Some((k, *reason, message)),
                _ => None,
            });
            if let Some((k, reason, message)) = failed {
                let message = if states.len() > 1 {
                    format!("{k}: {message}")
                } else {
                    message.clone()
                };
                Condition::not_ready(reason, message)
            } else if states
                .iter()
                .any(|(_, s)| !matches!(s, Some(UnitState::Running { .. })))
            {
                Condition::not_ready(reasons::PROGRESSING, progressing_message)
            } else {
                Condition::ready(reasons::RECONCILED, ready_message())
            }
        }
    };
    c.with_generation(plan.generation)
}

/// What the running units list (a Kinesis reader's shards), in unit order.
pub fn details<K>(states: &[(&K, Option<UnitState>)]) -> Vec<String> {
    states
        .iter()
        .filter_map(|(_, s)| match s {
            Some(UnitState::Running { detail }) => Some(detail.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The status to write, keeping `lastTransitionTime` of an unchanged condition; `None` when
/// `current` already says it. Pure.
pub fn desired_status<S: TriggerStatus, K: fmt::Display>(
    current: Option<&S>,
    plan: &TriggerPlan<K>,
    states: &[(&K, Option<UnitState>)],
    ready: Condition,
) -> Option<S> {
    let mut next = current.cloned().unwrap_or_default();
    let mut changed = set_condition(next.conditions_mut(), ready);
    changed |= next.set_list(&plan.functions, &details(states));
    if *next.observed_generation_mut() != plan.generation {
        *next.observed_generation_mut() = plan.generation;
        changed = true;
    }
    changed.then_some(next)
}

/// The Warning Event a status change calls for: the plan's problem (`InvalidSpec`, a missing
/// function, ...) when the trigger's Ready condition did not already say it. So a trigger whose
/// field fails to parse gets its Event once, as a malformed one does, not on every pass.
pub fn problem_event<S: TriggerStatus, K>(
    current: Option<&S>,
    plan: &TriggerPlan<K>,
) -> Option<Problem> {
    let p = plan.problem.as_ref()?;
    let mut current = current.cloned().unwrap_or_default();
    let said = kubeless_api::conditions::find_condition(
        current.conditions_mut(),
        kubeless_api::conditions::READY,
    )
    .is_some_and(|c| {
        c.reason.as_deref() == Some(p.reason) && c.message.as_deref() == Some(&p.message)
    });
    (!said).then(|| p.clone())
}

/// Settings of [`run`].
#[derive(Clone)]
pub struct Settings {
    /// Only this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Recompute (and retry status writes) at least this often.
    pub resync: Duration,
    /// `Some`: status is written only while this replica holds the Lease. Units run on every
    /// replica (consumer groups and leases spread the work).
    pub lease: Option<LeaseConfig>,
    /// Wakes the loop for a new pass; units get it in [`UnitContext::changed`]. Pass your
    /// own when parts of the source outside units report changes.
    pub changed: Arc<Notify>,
    /// Fed every Function on each pass, so deliveries can hold for (and wake) functions that
    /// scale to zero.
    pub activity: Option<Arc<kubeless_invoke::Activity>>,
}

impl Settings {
    /// All namespaces, 30 s resync, no Lease.
    pub fn new() -> Self {
        Self {
            namespace: None,
            resync: Duration::from_secs(30),
            lease: None,
            changed: Arc::new(Notify::new()),
            activity: None,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self::new()
    }
}

/// A started trigger service.
pub struct Running {
    /// `true` once the caches are synced and the first pass ran.
    pub synced: watch::Receiver<bool>,
    main: AbortOnDropHandle<()>,
    election: Option<AbortOnDropHandle<()>>,
    /// Background tasks that run until dropped (an EndpointSlice watch).
    keep: Vec<AbortOnDropHandle<()>>,
    active: Arc<AtomicUsize>,
}

impl Running {
    /// Keeps `task` (an EndpointSlice watch, say) running until this is joined or dropped.
    pub fn keeping(mut self, task: Option<AbortOnDropHandle<()>>) -> Self {
        self.keep.extend(task);
        self
    }

    /// Waits until every unit stopped (after the shutdown token is cancelled).
    pub async fn join(self) {
        let Self {
            main,
            election,
            keep,
            ..
        } = self;
        for t in std::iter::once(main).chain(election) {
            if let Err(e) = t.await
                && e.is_panic()
            {
                tracing::warn!("a task of the trigger runtime panicked");
            }
        }
        drop(keep);
    }

    /// Marks `readiness` ready once the caches are synced and the first pass ran.
    pub fn ready_on(&self, readiness: kubeless_service::Readiness) {
        let mut synced = self.synced.clone();
        tokio::spawn(async move {
            if synced.wait_for(|s| *s).await.is_ok() {
                readiness.set_ready(true);
            }
        });
    }

    /// Units in the Running state after the last pass.
    pub fn active_units(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Waits until the first pass is done.
    pub async fn wait_synced(&mut self) {
        let _ = self.synced.wait_for(|s| *s).await;
    }

    /// Kills everything at once, without draining or acknowledging: what a crash does. For
    /// tests.
    pub fn abort(self) {
        drop(self);
    }
}

/// The reporter of Events a trigger service sends (`POD_NAME` as instance).
pub fn reporter(field_manager: &str) -> Reporter {
    Reporter {
        controller: field_manager.into(),
        instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
    }
}

/// Warning Events (DeliveryFailed, DeadLettered) rate-limited per object and reason.
pub fn throttled_events(client: &Client, field_manager: &str) -> ThrottledEvents {
    ThrottledEvents::new(
        client.clone(),
        reporter(field_manager),
        kubeless_service::DEFAULT_EVENT_INTERVAL,
    )
}

/// Starts the control loop for `source` (and the Lease election when configured); it stops
/// every unit when `shutdown` is cancelled.
pub fn run<S: Source>(
    client: Client,
    source: S,
    settings: Settings,
    metrics: TriggerMetrics,
    service_metrics: &kubeless_service::Metrics,
    shutdown: CancellationToken,
) -> Running {
    let active = Arc::new(AtomicUsize::new(0));
    let mut election = None;
    let leader = settings.lease.map(|lease| {
        let (rx, task) = LeaderElector::new(
            client.clone(),
            lease,
            LeaseMetrics::register(service_metrics),
        )
        .spawn(shutdown.child_token());
        election = Some(AbortOnDropHandle::new(task));
        rx
    });
    let (synced_tx, synced) = watch::channel(false);
    let looped = Loop {
        client,
        source,
        changed: settings.changed,
        namespace: settings.namespace,
        resync: settings.resync,
        leader,
        metrics,
        active: Arc::clone(&active),
        activity: settings.activity,
    };
    let main = tokio::spawn(async move {
        looped
            .run(shutdown, move || {
                synced_tx.send_replace(true);
            })
            .await
    });
    Running {
        synced,
        main: AbortOnDropHandle::new(main),
        election,
        keep: Vec::new(),
        active,
    }
}

struct Loop<S: Source> {
    client: Client,
    source: S,
    changed: Arc<Notify>,
    namespace: Option<String>,
    resync: Duration,
    leader: Option<watch::Receiver<bool>>,
    metrics: TriggerMetrics,
    active: Arc<AtomicUsize>,
    activity: Option<Arc<kubeless_invoke::Activity>>,
}

struct RunningUnit<S: Source> {
    config: Arc<S::Config>,
    unit: S::Unit,
}

impl<S: Source> Loop<S> {
    async fn run(self, shutdown: CancellationToken, synced: impl FnOnce() + Send) {
        let changed = Arc::clone(&self.changed);
        let ns = self.namespace.as_deref();
        let (triggers, bad_triggers, trigger_task) =
            kubeless_service::guarded_watch_notify::<S::Trigger>(
                self.client.clone(),
                ns,
                Arc::clone(&changed),
            );
        let (functions, _, function_task) = kubeless_service::guarded_watch_notify::<Function>(
            self.client.clone(),
            ns,
            Arc::clone(&changed),
        );
        let field_manager = self.source.field_manager();
        let recorder = Recorder::new(self.client.clone(), reporter(field_manager));
        let _tasks = (
            AbortOnDropHandle::new(trigger_task),
            AbortOnDropHandle::new(function_task),
        );
        let ready = async {
            let _ = triggers.wait_until_ready().await;
            let _ = functions.wait_until_ready().await;
        };
        tokio::select! {
            _ = ready => {}
            _ = shutdown.cancelled() => return,
        }
        let ctx = UnitContext {
            changed: Arc::clone(&changed),
        };
        let mut running: BTreeMap<S::Key, RunningUnit<S>> = BTreeMap::new();
        let mut stopping = JoinSet::new();
        let mut synced = Some(synced);
        loop {
            let trigger_state = triggers.state();
            let function_state = functions.state();
            if let Some(a) = &self.activity {
                a.observe_all(function_state.iter().map(Arc::as_ref));
            }
            let desired = self.source.plan(&trigger_state, &function_state);
            self.apply(desired.units, &mut running, &mut stopping, &ctx)
                .await;
            self.metrics.units.set(running.len() as i64);
            let active = running
                .values()
                .filter(|r| matches!(r.unit.state(), UnitState::Running { .. }))
                .count();
            self.active.store(active, Ordering::Relaxed);
            if self.leader.as_ref().is_none_or(|l| *l.borrow()) {
                self.write_statuses(&desired.triggers, &running, &trigger_state, &recorder)
                    .await;
                // Malformed triggers: Ready=False InvalidSpec and a Warning Event, once per
                // generation.
                kubeless_service::report_all_invalid::<S::Trigger>(
                    &self.client,
                    &recorder,
                    &bad_triggers,
                    field_manager,
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
        tracing::info!(units = running.len(), "stopping");
        for (_, r) in std::mem::take(&mut running) {
            stopping.spawn(r.unit.stop());
        }
        while stopping.join_next().await.is_some() {}
        self.metrics.units.set(0);
        self.active.store(0, Ordering::Relaxed);
    }

    /// Starts missing units, stops unwanted ones, restarts changed ones. A unit being replaced
    /// (same key, new configuration, or given up) is stopped before its successor starts, so
    /// the two never consume side by side; removed units stop in the background.
    async fn apply(
        &self,
        desired: BTreeMap<S::Key, S::Config>,
        running: &mut BTreeMap<S::Key, RunningUnit<S>>,
        stopping: &mut JoinSet<()>,
        ctx: &UnitContext,
    ) {
        let stale: Vec<S::Key> = running
            .iter()
            .filter(|(k, r)| desired.get(*k) != Some(&*r.config) || r.unit.needs_restart())
            .map(|(k, _)| k.clone())
            .collect();
        let mut replaced = Vec::new();
        for key in stale {
            if let Some(r) = running.remove(&key) {
                tracing::info!(unit = %key, "stopping");
                if desired.contains_key(&key) {
                    replaced.push(r.unit.stop());
                } else {
                    stopping.spawn(r.unit.stop());
                }
            }
        }
        futures::future::join_all(replaced).await;
        for (key, config) in desired {
            if running.contains_key(&key) {
                continue;
            }
            tracing::info!(unit = %key, "starting");
            let config = Arc::new(config);
            let unit = self.source.start(&key, Arc::clone(&config), ctx);
            running.insert(key, RunningUnit { config, unit });
        }
    }

    async fn write_statuses(
        &self,
        plans: &BTreeMap<TriggerRef, TriggerPlan<S::Key>>,
        running: &BTreeMap<S::Key, RunningUnit<S>>,
        triggers: &[Arc<S::Trigger>],
        recorder: &Recorder,
    ) {
        for t in triggers {
            let key = (t.namespace().unwrap_or_default(), t.name_any());
            let Some(tp) = plans.get(&key) else { continue };
            let states: Vec<(&S::Key, Option<UnitState>)> = tp
                .units
                .iter()
                .map(|k| (k, running.get(k).map(|r| r.unit.state())))
                .collect();
            let ready = ready_condition(
                tp,
                &states,
                || self.source.ready_message(t, tp, &details(&states)),
                self.source.progressing_message(),
            );
            let event = problem_event(S::status(t), tp);
            let Some(status) = desired_status(S::status(t), tp, &states, ready) else {
                continue;
            };
            let api: Api<S::Trigger> = Api::namespaced(self.client.clone(), &key.0);
            let patch = serde_json::json!({ "status": status });
            let result = api
                .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            self.metrics.status_write(result.is_ok());
            match result {
                Err(e) => {
                    tracing::warn!(trigger = %format!("{}/{}", key.0, key.1), error = %e, "writing status failed");
                }
                Ok(_) => {
                    if let Some(p) = event {
                        publish_problem(recorder, t.as_ref(), &p).await;
                    }
                }
            }
        }
    }
}

/// Publishes `p` as a Warning Event on `t` (best effort: a missing permission must not hide
/// the condition, which is already written).
async fn publish_problem<K: Resource<DynamicType = ()>>(recorder: &Recorder, t: &K, p: &Problem) {
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: p.reason.into(),
        note: Some(p.message.chars().take(1000).collect()),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &t.object_ref(&())).await {
        tracing::warn!(reason = p.reason, error = %e, "publishing the trigger's Event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::conditions::{find_condition, is_ready};

    #[derive(Clone, Default, Serialize)]
    struct St {
        conditions: Vec<Condition>,
        generation: Option<i64>,
        functions: Vec<String>,
    }

    impl TriggerStatus for St {
        fn conditions_mut(&mut self) -> &mut Vec<Condition> {
            &mut self.conditions
        }
        fn observed_generation_mut(&mut self) -> &mut Option<i64> {
            &mut self.generation
        }
        fn set_list(&mut self, functions: &[String], _: &[String]) -> bool {
            let changed = self.functions != functions;
            self.functions = functions.to_vec();
            changed
        }
    }

    fn tp(problem: Option<Problem>) -> TriggerPlan<String> {
        TriggerPlan {
            generation: Some(3),
            functions: vec!["a".into(), "b".into()],
            units: vec!["ns/t->a".into(), "ns/t->b".into()],
            problem,
        }
    }

    fn status(
        current: Option<&St>,
        plan: &TriggerPlan<String>,
        states: &[Option<UnitState>],
    ) -> Option<St> {
        let states: Vec<(&String, Option<UnitState>)> =
            plan.units.iter().zip(states.iter().cloned()).collect();
        let ready = ready_condition(plan, &states, || "all good".into(), "starting");
        desired_status(current, plan, &states, ready)
    }

    #[test]
    fn ready_when_every_unit_runs_and_unchanged_means_no_write() {
        let p = tp(None);
        let run = [Some(UnitState::running()), Some(UnitState::running())];
        let s = status(None, &p, &run).unwrap();
        assert!(is_ready(&s.conditions));
        assert_eq!(s.functions, ["a", "b"]);
        assert_eq!(s.generation, Some(3));
        assert!(status(Some(&s), &p, &run).is_none());
    }

    #[test]
    fn a_problem_gets_one_event_per_change() {
        let bad = tp(Some(Problem::invalid_spec("retry.initialBackoff: banana")));
        // First time: the Ready condition does not say it yet.
        let e = problem_event::<St, String>(None, &bad).unwrap();
        assert_eq!(e.reason, reasons::INVALID_SPEC);
        assert_eq!(e.message, "retry.initialBackoff: banana");
        // Once written, the same problem is not published again.
        let written = status(None, &bad, &[]).unwrap();
        assert!(problem_event(Some(&written), &bad).is_none());
        // A different message (the user fixed one field, broke another) is a new Event.
        let worse = tp(Some(Problem::invalid_spec("retry.maxBackoff: forever")));
        assert!(problem_event(Some(&written), &worse).is_some());
        // No problem, no Event.
        assert!(problem_event(Some(&written), &tp(None)).is_none());
    }

    #[test]
    fn failures_starting_units_and_problems_are_not_ready() {
        let p = tp(None);
        let failed = Some(UnitState::Failed {
            reason: reasons::BROKER_UNAVAILABLE,
            message: "connection refused".into(),
        });
        let s = status(None, &p, &[Some(UnitState::running()), failed]).unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::BROKER_UNAVAILABLE));
        assert_eq!(c.message.as_deref(), Some("ns/t->b: connection refused"));

        let s = status(Some(&s), &p, &[Some(UnitState::running()), None]).unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::PROGRESSING));

        let p = tp(Some(Problem::invalid_spec("bad topic")));
        let s = status(Some(&s), &p, &[]).unwrap();
        let c = find_condition(&s.conditions, "Ready").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::INVALID_SPEC));
        assert_eq!(c.message.as_deref(), Some("bad topic"));
    }

    #[test]
    fn plan_skips_deleted_triggers_and_reports_empty_selection() {
        let t = |name: &str, deleting: bool| {
            let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
            cm.metadata.name = Some(name.into());
            cm.metadata.namespace = Some("ns".into());
            cm.metadata.generation = Some(1);
            if deleting {
                cm.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
                );
            }
            Arc::new(cm)
        };
        let triggers = [t("one", false), t("none", false), t("gone", true)];
        let plan: Plan<String, u8> = Plan::build(&triggers, |_, ns, name| {
            Ok(if name == "one" {
                vec![PlannedUnit {
                    key: format!("{ns}/{name}->f"),
                    function: "f".into(),
                    config: 1,
                }]
            } else {
                Vec::new()
            })
        });
        assert_eq!(plan.units.len(), 1);
        assert_eq!(plan.triggers.len(), 2);
        let none = &plan.triggers[&("ns".to_string(), "none".to_string())];
        assert_eq!(
            none.problem.as_ref().map(|p| p.reason),
            Some(reasons::NO_FUNCTIONS_SELECTED)
        );
        let one = &plan.triggers[&("ns".to_string(), "one".to_string())];
        assert_eq!(one.functions, ["f"]);
    }
}
