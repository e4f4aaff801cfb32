//! Traffic records and wake-ups for functions that scale to zero (the writer side of the
//! contract in [`kubeless_api::scale`]).
//!
//! The gateway and the triggers feed [`Activity`] every Function they watch
//! ([`Activity::observe`]) and call [`Activity::record`] when they have a call or an event for
//! one. For a running function that patches the `kubeless.io/last-activity` annotation at most
//! once per interval; for a function at zero it patches at once (once per stay at zero), which
//! makes the function-controller scale it up. [`Activity::wait_ready`] holds a caller until the
//! function has a ready replica again.
//!
//! Functions without scale to zero (no `ScaledToZero` condition) cost a map lookup and nothing
//! else: no write ever happens for them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use kubeless_api::{
    Function,
    scale::{LAST_ACTIVITY, ScaleState, activity_now},
};
use tokio::sync::watch;

/// Sets a Function's `kubeless.io/last-activity` to `value` (RFC 3339; a future time announces
/// traffic to come: the function-controller keeps the function up until then plus its idle
/// period, and wakes it now if it is at zero).
pub async fn write_activity(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    value: &str,
) -> Result<(), kube::Error> {
    let api: Api<Function> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {LAST_ACTIVITY: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Default interval between two activity writes for a running function.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

struct Entry {
    state: ScaleState,
    /// A replica is ready and the function is not at zero.
    ready: watch::Sender<bool>,
    last_write: Option<Instant>,
    /// A wake-up was written for the current stay at zero.
    wake_sent: bool,
    writing: bool,
    /// The latest traffic not yet written (it came within the interval after a write).
    pending: Option<k8s_openapi::jiff::Timestamp>,
    /// A trailing write of `pending` is scheduled for the end of the interval.
    flush_scheduled: bool,
}

/// What a call or event for a function asks of the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// Nothing: no scale to zero, no client, or a write already covers it.
    Nothing,
    /// Write now (`true`: a wake-up for a function at zero).
    Write(bool),
    /// Write this traffic's time once the current interval ends, so the annotation reflects
    /// the whole interval's traffic rather than only its first call.
    Trailing(Duration),
}

impl Entry {
    fn new() -> Self {
        Self {
            state: ScaleState::Off,
            ready: watch::Sender::new(false),
            last_write: None,
            wake_sent: false,
            writing: false,
            pending: None,
            flush_scheduled: false,
        }
    }
}

/// Called with (namespace, name) when a wake-up was written.
type WakeHook = Box<dyn Fn(&str, &str) + Send + Sync>;

/// Records traffic on Functions and wakes those at zero. Cheap to share (`Arc`).
pub struct Activity {
    client: Option<kube::Client>,
    interval: Duration,
    /// namespace -> name -> entry (nested, so lookups by `&str` allocate nothing).
    entries: Mutex<HashMap<String, HashMap<String, Entry>>>,
    on_wake: WakeHook,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// Why a caller stopped waiting for a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The function did not get a ready replica within the wait.
    #[error("the function did not become ready within {0:?}")]
    Timeout(Duration),
}

impl Activity {
    /// Writes through `client` (which needs `patch` on `functions.kubeless.io`), at most once
    /// per `interval` for a running function.
    pub fn new(client: kube::Client, interval: Duration) -> Self {
        Self {
            client: Some(client),
            interval,
            entries: Mutex::new(HashMap::new()),
            on_wake: Box::new(|_, _| {}),
        }
    }

    /// An instance that tracks state but never writes (tests of callers, tools without RBAC).
    pub fn read_only() -> Self {
        Self {
            client: None,
            interval: DEFAULT_INTERVAL,
            entries: Mutex::new(HashMap::new()),
            on_wake: Box::new(|_, _| {}),
        }
    }

    /// Calls `f(namespace, name)` whenever a wake-up is written (for a metric).
    #[must_use]
    pub fn on_wake(mut self, f: impl Fn(&str, &str) + Send + Sync + 'static) -> Self {
        self.on_wake = Box::new(f);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Entry>>> {
        // Every update is a few field writes on one entry: consistent even after a panic.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<R>(&self, namespace: &str, name: &str, f: impl FnOnce(&mut Entry) -> R) -> Option<R> {
        self.lock()
            .get_mut(namespace)
            .and_then(|m| m.get_mut(name))
            .map(f)
    }

    /// Takes in the current state of a Function (call for every watch event).
    pub fn observe(&self, f: &Function) {
        let mut map = self.lock();
        Self::observe_locked(&mut map, f);
    }

    fn observe_locked(map: &mut HashMap<String, HashMap<String, Entry>>, f: &Function) {
        let state = ScaleState::of(f);
        let replicas = f
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        // A warm pool pod answering for it counts as a ready replica.
        let warm = f.status.as_ref().is_some_and(|s| s.warm_pod.is_some());
        let e = map
            .entry(f.namespace().unwrap_or_default())
            .or_default()
            .entry(f.name_any())
            .or_insert_with(Entry::new);
        if state != ScaleState::AtZero {
            e.wake_sent = false;
        }
        e.state = state;
        e.ready.send_if_modified(|r| {
            let now = state != ScaleState::AtZero && (replicas > 0 || warm);
            std::mem::replace(r, now) != now
        });
    }

    /// Takes in every current Function at once and forgets the ones no longer there (for
    /// callers that see a cache rather than watch events).
    pub fn observe_all<'a>(&self, functions: impl IntoIterator<Item = &'a Function>) {
        let mut map = self.lock();
        let mut seen: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
        for f in functions {
            Self::observe_locked(&mut map, f);
            seen.entry(f.namespace().unwrap_or_default())
                .or_default()
                .insert(f.name_any());
        }
        map.retain(|ns, names| {
            names.retain(|name, _| seen.get(ns).is_some_and(|s| s.contains(name)));
            !names.is_empty()
        });
    }

    /// Forgets a deleted Function.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut map = self.lock();
        if let Some(names) = map.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                map.remove(namespace);
            }
        }
    }

    /// The function's scale-to-zero state as last observed (`Off` when unknown).
    pub fn state(&self, namespace: &str, name: &str) -> ScaleState {
        self.with(namespace, name, |e| e.state)
            .unwrap_or(ScaleState::Off)
    }

    /// Whether the function has a ready replica and is not at zero, as last observed.
    pub fn is_ready(&self, namespace: &str, name: &str) -> bool {
        self.with(namespace, name, |e| *e.ready.borrow())
            .unwrap_or(false)
    }

    /// [`record`](Self::record), and whether the caller should hold its call (scale to zero is
    /// on and no replica is ready): then [`wait_ready`](Self::wait_ready). One lookup.
    pub fn note(self: &Arc<Self>, namespace: &str, name: &str) -> bool {
        let Some((hold, due)) = self.with(namespace, name, |e| {
            let hold = e.state != ScaleState::Off && !*e.ready.borrow();
            (hold, self.due(e))
        }) else {
            return false;
        };
        self.act(namespace, name, due);
        hold
    }

    /// Notes a call or event for the function: writes the activity annotation when due, and
    /// at once when the function is at zero. Never waits; the write runs in the background.
    pub fn record(self: &Arc<Self>, namespace: &str, name: &str) {
        if let Some(due) = self.with(namespace, name, |e| self.due(e)) {
            self.act(namespace, name, due);
        }
    }

    /// What the entry needs for one more call or event, marking a write in progress or a
    /// trailing write scheduled.
    fn due(&self, e: &mut Entry) -> Due {
        if self.client.is_none() {
            return Due::Nothing;
        }
        let wake = match e.state {
            ScaleState::Off => return Due::Nothing,
            ScaleState::AtZero if e.wake_sent || e.writing => return Due::Nothing,
            ScaleState::AtZero => true,
            ScaleState::Active => {
                let since = e.last_write.map(|t| t.elapsed());
                match since {
                    Some(since) if since < self.interval || e.writing => {
                        e.pending = Some(k8s_openapi::jiff::Timestamp::now());
                        if e.flush_scheduled {
                            return Due::Nothing;
                        }
                        e.flush_scheduled = true;
                        return Due::Trailing(self.interval.saturating_sub(since));
                    }
                    _ if e.writing => return Due::Nothing,
                    _ => false,
                }
            }
        };
        e.writing = true;
        e.pending = None;
        Due::Write(wake)
    }

    fn act(self: &Arc<Self>, namespace: &str, name: &str, due: Due) {
        match due {
            Due::Nothing => {}
            Due::Write(wake) => self.write(namespace, name, wake, activity_now()),
            Due::Trailing(after) => {
                let this = Arc::clone(self);
                let (ns, name) = (namespace.to_string(), name.to_string());
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let value = this.with(&ns, &name, |e| {
                        e.flush_scheduled = false;
                        if e.state != ScaleState::Active || e.writing {
                            return None;
                        }
                        let ts = e.pending.take()?;
                        e.writing = true;
                        Some(ts.to_string())
                    });
                    if let Some(Some(value)) = value {
                        this.write(&ns, &name, false, value);
                    }
                });
            }
        }
    }

    fn write(self: &Arc<Self>, namespace: &str, name: &str, wake: bool, value: String) {
        let Some(client) = self.client.clone() else {
            return;
        };
        let this = Arc::clone(self);
        let (ns, name) = (namespace.to_string(), name.to_string());
        tokio::spawn(async move {
            let result = write_activity(&client, &ns, &name, &value).await;
            let ok = result.is_ok();
            if let Err(e) = result {
                tracing::warn!(namespace = ns, function = name, error = %e, wake, "recording function activity failed");
            } else if wake {
                tracing::info!(
                    namespace = ns,
                    function = name,
                    "woke a function scaled to zero"
                );
                (this.on_wake)(&ns, &name);
            }
            this.with(&ns, &name, |e| {
                e.writing = false;
                if ok {
                    e.last_write = Some(Instant::now());
                    if wake && e.state == ScaleState::AtZero {
                        e.wake_sent = true;
                    }
                }
            });
        });
    }

    /// Waits until the function has a ready replica (at once if it has one), waking it if it
    /// is at zero. A function with scale to zero off is not waited for: its availability is
    /// the resolver's business.
    pub async fn wait_ready(
        self: &Arc<Self>,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<(), WaitError> {
        let rx = self.with(namespace, name, |e| {
            (e.state != ScaleState::Off).then(|| e.ready.subscribe())
        });
        let Some(Some(mut rx)) = rx else {
            return Ok(());
        };
        if *rx.borrow_and_update() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // A failed write clears `writing` without setting `wake_sent`: try again while
            // waiting, once a second.
            self.record(namespace, name);
            let step = tokio::time::Instant::now() + Duration::from_secs(1);
            match tokio::time::timeout_at(step.min(deadline), rx.changed()).await {
                Ok(Ok(())) if *rx.borrow_and_update() => return Ok(()),
                Ok(Ok(())) => {}
                // The entry was forgotten (Function deleted): nothing to wait for.
                Ok(Err(_)) => return Ok(()),
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(WaitError::Timeout(timeout));
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::{
        Condition, FunctionStatus,
        scale::{SCALED_TO_ZERO, reasons},
    };

    fn function(state: Option<bool>, ready: i32) -> Function {
        let mut f = Function::new("f", Default::default());
        f.metadata.namespace = Some("ns".into());
        let mut status = FunctionStatus {
            ready_replicas: Some(ready),
            ..Default::default()
        };
        if let Some(at_zero) = state {
            let reason = if at_zero {
                reasons::IDLE
            } else {
                reasons::ACTIVE
            };
            status
                .conditions
                .push(Condition::new(SCALED_TO_ZERO, at_zero, reason, ""));
        }
        f.status = Some(status);
        f
    }

    #[tokio::test]
    async fn traffic_within_the_interval_is_written_when_it_ends() {
        // A client that reaches nothing: only the bookkeeping is under test here.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let a = Activity::new(
            kube::Client::try_from(config).unwrap(),
            Duration::from_secs(10),
        );
        a.observe(&function(Some(false), 1));
        let due = |a: &Activity| a.with("ns", "f", |e| a.due(e)).unwrap();
        // First traffic: written at once.
        assert_eq!(due(&a), Due::Write(false));
        a.with("ns", "f", |e| {
            e.writing = false;
            e.last_write = Some(Instant::now());
        });
        // More traffic inside the interval: one trailing write, at the interval's end, of
        // the latest traffic's time.
        let Due::Trailing(after) = due(&a) else {
            panic!("a trailing write is scheduled")
        };
        assert!(after <= Duration::from_secs(10) && after > Duration::from_secs(9));
        let first = a.with("ns", "f", |e| e.pending).unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(due(&a), Due::Nothing, "already scheduled");
        let latest = a.with("ns", "f", |e| e.pending).unwrap().unwrap();
        assert!(
            latest > first,
            "the pending time follows the latest traffic"
        );
        // A function at zero is woken at once, whatever the interval.
        a.observe(&function(Some(true), 0));
        assert_eq!(due(&a), Due::Write(true));
        // Off: nothing, ever.
        a.observe(&function(None, 1));
        a.with("ns", "f", |e| e.writing = false);
        assert_eq!(due(&a), Due::Nothing);
    }

    #[tokio::test]
    async fn off_functions_are_never_waited_for() {
        let a = Arc::new(Activity::read_only());
        a.observe(&function(None, 0));
        assert_eq!(a.state("ns", "f"), ScaleState::Off);
        assert!(
            a.wait_ready("ns", "f", Duration::from_millis(10))
                .await
                .is_ok()
        );
        // Unknown functions neither.
        assert!(
            a.wait_ready("ns", "g", Duration::from_millis(10))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_caller_waits_until_the_function_is_ready() {
        let a = Arc::new(Activity::read_only());
        a.observe(&function(Some(true), 0));
        assert_eq!(a.state("ns", "f"), ScaleState::AtZero);
        assert_eq!(
            a.wait_ready("ns", "f", Duration::from_millis(50)).await,
            Err(WaitError::Timeout(Duration::from_millis(50)))
        );
        let waiter = {
            let a = Arc::clone(&a);
            tokio::spawn(async move { a.wait_ready("ns", "f", Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Woken but no replica ready yet: still waiting.
        a.observe(&function(Some(false), 0));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        a.observe(&function(Some(false), 1));
        assert_eq!(waiter.await.ok(), Some(Ok(())));
        assert!(a.is_ready("ns", "f"));
    }
}
