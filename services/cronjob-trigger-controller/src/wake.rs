//! Waking functions that scale to zero before their schedule fires: a task per trigger
//! announces each fire `--wake-ahead` early, by setting the function's
//! `kubeless.io/last-activity` to the fire time (see [`kubeless_api::scale`]). The
//! function-controller wakes a function at zero on that write and keeps it up until the fire
//! time plus its idle period. Both modes use it: the CronJob's call and the in-process
//! scheduler's call go straight to the function's Service, which must have a pod by then.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client};
use kubeless_api::{CronJobTrigger, Function, scale::ScaleState};
use tokio_util::sync::CancellationToken;

use crate::schedule::{Precision, Schedule};

/// What a trigger's task runs on; a change restarts it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spec {
    uid: String,
    schedule: String,
    function: String,
}

struct Entry {
    spec: Spec,
    task: tokio::task::JoinHandle<()>,
}

/// The wake-ahead tasks of every trigger this process reconciles.
pub struct WakeAhead {
    client: Client,
    lead: Duration,
    tasks: Mutex<HashMap<(String, String), Entry>>,
    token: CancellationToken,
}

impl WakeAhead {
    /// Announces fires `lead` ahead; tasks stop when `token` is cancelled.
    pub fn new(client: Client, lead: Duration, token: CancellationToken) -> Self {
        Self {
            client,
            lead,
            tasks: Mutex::new(HashMap::new()),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        // Inserts and removes only: consistent even after a panic.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts (or keeps, or restarts on change) the task of trigger `t`.
    pub fn upsert(&self, ns: &str, t: &CronJobTrigger) {
        let name = t.metadata.name.clone().unwrap_or_default();
        let Ok(schedule) = Schedule::parse(&t.spec.schedule, Precision::Seconds) else {
            self.remove(ns, &name);
            return;
        };
        let spec = Spec {
            uid: t.metadata.uid.clone().unwrap_or_default(),
            schedule: t.spec.schedule.trim().to_string(),
            function: t.spec.function_name.trim().to_string(),
        };
        let key = (ns.to_string(), name.clone());
        let mut tasks = self.lock();
        if tasks
            .get(&key)
            .is_some_and(|e| e.spec == spec && !e.task.is_finished())
        {
            return;
        }
        let task = tokio::spawn(run(
            self.client.clone(),
            key.clone(),
            spec.clone(),
            schedule,
            self.lead,
            self.token.child_token(),
        ));
        if let Some(old) = tasks.insert(key, Entry { spec, task }) {
            old.task.abort();
        }
    }

    /// Stops the task of a deleted trigger.
    pub fn remove(&self, ns: &str, name: &str) {
        if let Some(e) = self.lock().remove(&(ns.to_string(), name.to_string())) {
            e.task.abort();
        }
    }
}

impl Drop for WakeAhead {
    fn drop(&mut self) {
        for (_, e) in self.lock().drain() {
            e.task.abort();
        }
    }
}

async fn sleep_until(t: Timestamp, token: &CancellationToken) -> bool {
    let wait = Duration::try_from(t.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = token.cancelled() => false,
    }
}

async fn run(
    client: Client,
    (ns, trigger): (String, String),
    spec: Spec,
    schedule: Schedule,
    lead: Duration,
    token: CancellationToken,
) {
    let triggers: Api<CronJobTrigger> = Api::namespaced(client.clone(), &ns);
    let functions: Api<Function> = Api::namespaced(client.clone(), &ns);
    let lead = SignedDuration::try_from(lead).unwrap_or(SignedDuration::ZERO);
    let mut after = Timestamp::now();
    loop {
        let Some(fire) = schedule.next_after(after) else {
            return;
        };
        after = fire;
        if !sleep_until(fire - lead, &token).await {
            return;
        }
        match triggers.get_opt(&trigger).await {
            Ok(Some(t)) if t.metadata.uid.as_deref() == Some(spec.uid.as_str()) => {}
            // Deleted or replaced: its reconcile starts a new task if needed.
            Ok(_) => return,
            Err(e) => {
                tracing::debug!(namespace = ns, trigger, error = %e, "reading the trigger before its fire");
                continue;
            }
        }
        let state = match functions.get_opt(&spec.function).await {
            Ok(Some(f)) => ScaleState::of(&f),
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(namespace = ns, function = spec.function, error = %e, "reading the function before a fire");
                continue;
            }
        };
        if state == ScaleState::Off {
            continue;
        }
        match kubeless_invoke::activity::write_activity(
            &client,
            &ns,
            &spec.function,
            &fire.to_string(),
        )
        .await
        {
            Ok(()) => {
                tracing::info!(namespace = ns, trigger, function = spec.function, %fire, at_zero = state == ScaleState::AtZero, "announced the next fire to the function")
            }
            Err(e) => {
                tracing::warn!(namespace = ns, trigger, function = spec.function, error = %e, "announcing the next fire failed")
            }
        }
    }
}
