//! The in-process scheduler (`--scheduler-mode`): one task per trigger fires on its schedule
//! (seconds allowed) and calls the function directly through `kubeless-invoke`, with the
//! function's ready pods taken from its EndpointSlices. No Pod per tick.
//!
//! Only one replica may schedule: run the service with `--leader-elect` when it has more than
//! one (the Helm chart does), so that only the Lease holder's scheduler fires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use kubeless_api::conditions::find_condition;
use kubeless_api::triggers::ConcurrencyPolicy;
use kubeless_api::{CronJobTrigger, Function};
use kubeless_invoke::{Class, FunctionTarget, Invoker, Jitter, RetryPolicy};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cronjob::{self, BuildError, FunctionCall};
use crate::invoker::{self as inv, outcome_label};
use crate::metrics::SchedulerMetrics;
use crate::schedule::Schedule;
use crate::status::{self, LAST_RUN, Owned, RunResult};

/// Field manager of the scheduler's status writes (lastScheduleTime, lastResult,
/// LastRunSucceeded); the reconciler's Ready condition has its own.
pub const SCHEDULER_FIELD_MANAGER: &str = "kubeless-cronjob-trigger-scheduler";
/// How often entries of deleted triggers are dropped.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);
/// How long in-flight calls may finish after shutdown started.
const DRAIN: Duration = Duration::from_secs(10);

/// Everything one trigger's schedule needs; compared to decide whether to restart its task.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub uid: String,
    pub schedule: Schedule,
    pub target: FunctionTarget,
    pub payload: Option<bytes::Bytes>,
    pub retry: RetryPolicy,
    pub concurrency: ConcurrencyPolicy,
    /// Prefix of event ids: the CronJob name the trigger would have.
    pub event_prefix: String,
}

impl Plan {
    /// The plan of a trigger and its function.
    pub fn new(
        t: &CronJobTrigger,
        function: &Function,
        schedule: Schedule,
    ) -> Result<Self, BuildError> {
        let call = FunctionCall::of(function)?;
        let policy = t
            .spec
            .delivery_policy()
            .map_err(|e| BuildError::Retry(e.to_string()))?;
        let payload = inv::payload_body(&cronjob::payload_arg(t)?)
            .map_err(|e| BuildError::Payload(e.to_string()))?;
        let ns = t.namespace().ok_or(BuildError::Unsaved)?;
        let uid = t.metadata.uid.clone().ok_or(BuildError::Unsaved)?;
        let mut target = FunctionTarget::new(ns, t.spec.function_name.trim())
            .with_port(call.port)
            .with_timeout(call.timeout);
        if let Some(n) = call.port_name {
            target = target.with_port_name(n);
        }
        Ok(Self {
            uid,
            schedule,
            target,
            payload,
            retry: RetryPolicy {
                max_attempts: policy.max_attempts.max(1),
                initial_backoff: policy.initial_backoff,
                max_backoff: policy.max_backoff,
                multiplier: policy.multiplier,
                jitter: Jitter::Equal,
            },
            concurrency: t.spec.concurrency(),
            event_prefix: cronjob::cronjob_name(&t.name_any()),
        })
    }
}

struct Shared {
    client: Client,
    invoker: Invoker,
    metrics: SchedulerMetrics,
    recorder: Recorder,
    store: OnceLock<Store<CronJobTrigger>>,
}

impl Shared {
    fn trigger(&self, ns: &str, name: &str) -> Option<Arc<CronJobTrigger>> {
        self.store.get()?.get(&ObjectRef::new(name).within(ns))
    }

    fn is_current(&self, ns: &str, name: &str, uid: &str) -> bool {
        self.trigger(ns, name)
            .is_some_and(|t| t.metadata.uid.as_deref() == Some(uid))
    }
}

struct Entry {
    plan: Plan,
    task: tokio::task::JoinHandle<()>,
}

type Key = (String, String);

/// The schedules of every trigger this process fires.
pub struct Scheduler {
    shared: Arc<Shared>,
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
    token: CancellationToken,
}

impl Scheduler {
    /// A scheduler calling functions through `invoker`; its tasks stop when `token` is cancelled.
    pub fn new(
        client: Client,
        invoker: Invoker,
        metrics: SchedulerMetrics,
        recorder: Recorder,
        token: CancellationToken,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                invoker,
                metrics,
                recorder,
                store: OnceLock::new(),
            }),
            entries: Arc::new(Mutex::new(HashMap::new())),
            token,
        }
    }

    /// The controller's trigger cache: the scheduler reads current status from it and drops
    /// the schedules of triggers that left it.
    pub fn set_store(&self, store: Store<CronJobTrigger>) {
        let _ = self.shared.store.set(store);
        let entries = Arc::clone(&self.entries);
        let shared = Arc::clone(&self.shared);
        let token = self.token.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
                }
                let mut map = lock(&entries);
                map.retain(|(ns, name), e| {
                    let keep = shared.is_current(ns, name, &e.plan.uid) && !e.task.is_finished();
                    if !keep {
                        tracing::info!(namespace = %ns, trigger = %name, "schedule dropped");
                        e.task.abort();
                    }
                    keep
                });
            }
        });
    }

    /// Starts or replaces the schedule of a trigger; a plan equal to the running one is left
    /// alone (so a status write does not restart the clock).
    pub fn upsert(&self, ns: &str, name: &str, plan: Plan) {
        let key = (ns.to_string(), name.to_string());
        let mut map = lock(&self.entries);
        if let Some(e) = map.get(&key) {
            if e.plan == plan && !e.task.is_finished() {
                return;
            }
            e.task.abort();
        }
        tracing::info!(namespace = %ns, trigger = %name, schedule = %plan.schedule.as_str(), "scheduling");
        let task = tokio::spawn(run_schedule(
            Arc::clone(&self.shared),
            key.clone(),
            plan.clone(),
            self.token.child_token(),
        ));
        map.insert(key, Entry { plan, task });
    }

    /// Stops the schedule of a trigger (in-flight calls are cancelled).
    pub fn remove(&self, ns: &str, name: &str) {
        if let Some(e) = lock(&self.entries).remove(&(ns.to_string(), name.to_string())) {
            e.task.abort();
        }
    }

    /// Names of the scheduled triggers (for tests and logs).
    pub fn scheduled(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = lock(&self.entries).keys().cloned().collect();
        v.sort();
        v
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        for e in lock(&self.entries).values() {
            e.task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single map operation; a panic cannot leave it half-done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the runs of one schedule share: ordering of status writes and the last outcome.
#[derive(Default)]
struct RunState {
    /// Scheduled time of the newest run whose status was written.
    latest: Option<Timestamp>,
    /// Whether the last recorded run succeeded (for Events on transitions).
    last_ok: Option<bool>,
}

async fn run_schedule(shared: Arc<Shared>, key: Key, plan: Plan, token: CancellationToken) {
    let (ns, name) = key;
    let state = Arc::new(Mutex::new(RunState {
        latest: None,
        last_ok: shared.trigger(&ns, &name).and_then(|t| {
            t.status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, LAST_RUN).map(|c| c.is_true()))
        }),
    }));
    let mut runs = JoinSet::new();
    let mut last_fired: Option<Timestamp> = None;
    loop {
        while runs.try_join_next().is_some() {}
        let now = Timestamp::now();
        // Never fire the same time twice, even if the timer wakes a hair early.
        let from = last_fired.map_or(now, |l| l.max(now));
        let Some(next) = plan.schedule.next_after(from) else {
            tracing::warn!(namespace = %ns, trigger = %name, "schedule has no next time");
            break;
        };
        let wait = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = token.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
        last_fired = Some(next);
        if !shared.is_current(&ns, &name, &plan.uid) {
            break;
        }
        match plan.concurrency {
            ConcurrencyPolicy::Forbid if !runs.is_empty() => {
                shared.metrics.skipped.inc();
                tracing::info!(namespace = %ns, trigger = %name, "previous run still running: skipped (Forbid)");
                continue;
            }
            ConcurrencyPolicy::Replace if !runs.is_empty() => {
                shared.metrics.replaced.inc();
                runs.abort_all();
            }
            _ => {}
        }
        runs.spawn(run_once(
            Arc::clone(&shared),
            ns.clone(),
            name.clone(),
            plan.clone(),
            next,
            Arc::clone(&state),
        ));
    }
    // Let calls in flight finish (bounded) so their outcome is recorded.
    let _ = tokio::time::timeout(DRAIN, async { while runs.join_next().await.is_some() {} }).await;
}

async fn run_once(
    shared: Arc<Shared>,
    ns: String,
    name: String,
    plan: Plan,
    scheduled: Timestamp,
    state: Arc<Mutex<RunState>>,
) {
    let mut event = inv::cron_event(plan.payload.clone());
    event = event.with_event_id(format!("{}-{}", plan.event_prefix, scheduled.as_second()));
    let started = Instant::now();
    let outcome = shared
        .invoker
        .invoke_with_retry(&plan.target, &event, &plan.retry)
        .await;
    let class = outcome.class();
    shared
        .metrics
        .invocations
        .get_or_create(&[("outcome", outcome_label(class))])
        .inc();
    shared
        .metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    let succeeded = class == Class::Success;
    let status = outcome.status.map_or_else(
        || "no answer".to_string(),
        |s| format!("HTTP {}", s.as_u16()),
    );
    let run = RunResult {
        run: scheduled.to_string(),
        succeeded,
        reason: match class {
            Class::Success => status::SUCCEEDED.to_string(),
            Class::Permanent => "Failed".to_string(),
            Class::Retryable => "RetriesExhausted".to_string(),
        },
        message: match &outcome.error {
            None => format!(
                "call scheduled at {scheduled} answered {status} after {} attempt(s)",
                outcome.attempts
            ),
            Some(e) => format!(
                "call scheduled at {scheduled} failed after {} attempt(s): {}",
                outcome.attempts,
                inv::error_chain(e)
            ),
        },
    };
    if succeeded {
        tracing::debug!(namespace = %ns, trigger = %name, %scheduled, "scheduled call succeeded");
    } else {
        tracing::warn!(namespace = %ns, trigger = %name, %scheduled, message = %run.message, "scheduled call failed");
    }
    record(&shared, &ns, &name, scheduled, &run, &state).await;
}

/// Writes lastScheduleTime, lastResult and LastRunSucceeded, unless a newer run already did;
/// publishes an Event when the outcome flips.
async fn record(
    shared: &Shared,
    ns: &str,
    name: &str,
    scheduled: Timestamp,
    run: &RunResult,
    state: &Mutex<RunState>,
) {
    let transition = {
        let mut st = lock(state);
        if st.latest.is_some_and(|l| l > scheduled) {
            return;
        }
        st.latest = Some(scheduled);
        let flipped = st.last_ok != Some(run.succeeded);
        st.last_ok = Some(run.succeeded);
        flipped
    };
    let Some(t) = shared.trigger(ns, name) else {
        return;
    };
    let old = t.status.clone().unwrap_or_default();
    let owned = Owned {
        conditions: vec![run.condition()],
        last_schedule_time: Some(scheduled),
        last_result: Some(run.result().to_string()),
        ..Owned::default()
    };
    if let Some((_, patch)) = status::merge(&old, owned)
        && let Err(e) =
            status::apply(&shared.client, ns, name, SCHEDULER_FIELD_MANAGER, &patch).await
    {
        tracing::warn!(namespace = %ns, trigger = %name, error = %e, "writing the run's status failed");
    }
    if transition {
        let (type_, reason) = if run.succeeded {
            (EventType::Normal, "RunSucceeded")
        } else {
            (EventType::Warning, "RunFailed")
        };
        status::publish_event(&shared.recorder, &t, type_, reason, &run.message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Precision;
    use serde_json::json;

    fn trigger(spec: serde_json::Value) -> CronJobTrigger {
        serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "CronJobTrigger",
            "metadata": {"name": "tick", "namespace": "ns", "uid": "u1"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn function() -> Function {
        serde_json::from_value(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
            "metadata": {"name": "f", "namespace": "ns"},
            "spec": {"handler": "h.f", "runtime": "python3.11", "function": "x", "timeout": "9"},
        }))
        .unwrap()
    }

    #[test]
    fn plan_reads_trigger_and_function() {
        let t = trigger(json!({
            "schedule": "*/2 * * * * *", "function-name": "f", "payload": {"a": 1},
            "concurrencyPolicy": "Forbid", "retry": {"maxAttempts": 2, "initialBackoff": "100ms"},
        }));
        let s = Schedule::parse(&t.spec.schedule, Precision::Seconds).unwrap();
        let p = Plan::new(&t, &function(), s).unwrap();
        assert_eq!(p.target.namespace, "ns");
        assert_eq!(p.target.name, "f");
        assert_eq!(p.target.port, 8080);
        assert_eq!(p.target.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(p.target.timeout, Duration::from_secs(9));
        assert_eq!(p.payload.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(p.retry.max_attempts, 2);
        assert_eq!(p.retry.initial_backoff, Duration::from_millis(100));
        assert_eq!(p.concurrency, ConcurrencyPolicy::Forbid);
        assert_eq!(p.event_prefix, "trigger-tick");
        assert_eq!(p.uid, "u1");

        let get = trigger(json!({"schedule": "* * * * *", "function-name": "f"}));
        let s = Schedule::parse(&get.spec.schedule, Precision::Seconds).unwrap();
        let p2 = Plan::new(&get, &function(), s).unwrap();
        assert!(p2.payload.is_none());
        assert_ne!(p, p2);
    }
}
