//! Warning Events about things that can happen once per message (a delivery that failed after
//! its retries, a record sent to a dead-letter destination), kept bounded: at most one Event per
//! object and reason per interval. The first occurrence is published at once; later ones within
//! the interval are held and counted, and one Event at the end of the interval says how many
//! there were and shows the latest. A function that fails on every message therefore costs one
//! Event per trigger and reason every interval, not one per message.
//!
//! Publishing never blocks the caller: it runs on a spawned task, and a failure (a missing
//! permission, an API server away) is logged, never returned, because Events are best effort
//! and must not hold up delivery.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tokio::time::Instant;

/// The default interval: at most one Event per object and reason every 10 s.
pub const DEFAULT_EVENT_INTERVAL: Duration = Duration::from_secs(10);

/// The API server refuses an Event note longer than 1 kB.
const MAX_NOTE_CHARS: usize = 1000;

/// A reference to the object an Event is about (its `regarding`), for kinds whose
/// `DynamicType` is `()` (every kubeless CRD). `uid` lets `kubectl describe` find the Event.
pub fn object_reference<K: Resource<DynamicType = ()>>(
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        uid: uid.map(str::to_string),
        resource_version: None,
        field_path: None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: String,
    namespace: String,
    name: String,
    reason: &'static str,
}

/// The rate limit of one (object, reason): pure, driven by the instants it is given.
#[derive(Debug, Default)]
struct Window {
    /// When the last Event was published.
    last_sent: Option<Instant>,
    /// Occurrences held since then, and the latest one's note.
    held: u64,
    latest: Option<String>,
    /// When the held occurrences will be published (a flush is scheduled).
    flush_at: Option<Instant>,
}

#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Publish this note now.
    Publish(String),
    /// Held; schedule a flush at this instant (`None`: one is scheduled already).
    Held(Option<Instant>),
}

impl Window {
    fn occur(&mut self, now: Instant, interval: Duration, note: String) -> Step {
        let quiet = self.last_sent.is_none_or(|t| now >= t + interval);
        if self.flush_at.is_none() && quiet {
            self.last_sent = Some(now);
            return Step::Publish(note);
        }
        self.held += 1;
        self.latest = Some(note);
        if self.flush_at.is_some() {
            return Step::Held(None);
        }
        let at = self.last_sent.map_or(now, |t| t + interval);
        self.flush_at = Some(at);
        Step::Held(Some(at))
    }

    /// The note summing up what was held, if anything; the interval restarts at `now`.
    fn flush(&mut self, now: Instant, interval: Duration) -> Option<String> {
        self.flush_at = None;
        let latest = self.latest.take()?;
        let held = std::mem::take(&mut self.held);
        self.last_sent = Some(now);
        Some(summary(held, interval, &latest))
    }

    /// Nothing held and the interval over: the entry can be forgotten.
    fn idle(&self, now: Instant, interval: Duration) -> bool {
        self.flush_at.is_none() && self.last_sent.is_none_or(|t| now >= t + interval)
    }
}

/// The note of an Event that stands for `held` occurrences. One occurrence keeps its own note;
/// more say how many (parse it back with [`occurrences`]).
fn summary(held: u64, interval: Duration, latest: &str) -> String {
    if held <= 1 {
        latest.to_string()
    } else {
        format!(
            "{held} times in the last {}s; latest: {latest}",
            interval.as_secs().max(1)
        )
    }
}

/// How many occurrences an Event note written here stands for (1 unless it is a summary).
pub fn occurrences(note: &str) -> u64 {
    note.split_once(" times in the last ")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(1)
}

/// The Events (events.k8s.io/v1) in `namespace` with `reason` about the object `name` of
/// `kind` (their `regarding`), oldest first: how tests and tools read what was published here.
pub async fn events_about(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> Result<Vec<k8s_openapi::api::events::v1::Event>, kube::Error> {
    let list =
        kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), namespace)
            .list(&Default::default())
            .await?;
    let mut found: Vec<_> = list
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
        })
        .collect();
    found.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(found)
}

/// How many occurrences `events` stand for (a summary note counts several).
pub fn total_occurrences(events: &[k8s_openapi::api::events::v1::Event]) -> u64 {
    events
        .iter()
        .map(|e| occurrences(e.note.as_deref().unwrap_or_default()))
        .sum()
}

/// Warning Events on objects, at most one per object and reason per interval (see the module
/// docs). Cheap to clone; one per process is enough.
#[derive(Clone)]
pub struct ThrottledEvents {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    reporter: Reporter,
    interval: Duration,
    windows: Mutex<HashMap<Key, Window>>,
}

impl ThrottledEvents {
    pub fn new(client: Client, reporter: Reporter, interval: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                reporter,
                interval,
                windows: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Records one occurrence of `reason` on `regarding`: published now, or counted into the
    /// Event at the end of the current interval. Returns at once.
    pub fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(reason, "no tokio runtime to publish an Event on; dropped");
            return;
        };
        let key = Key {
            kind: regarding.kind.clone().unwrap_or_default(),
            namespace: regarding.namespace.clone().unwrap_or_default(),
            name: regarding.name.clone().unwrap_or_default(),
            reason,
        };
        let now = Instant::now();
        let interval = self.inner.interval;
        let step = {
            let mut windows = self.lock();
            if !windows.contains_key(&key) {
                // Forget objects that went quiet (deleted triggers, healed functions).
                windows.retain(|_, w| !w.idle(now, interval));
            }
            windows
                .entry(key.clone())
                .or_default()
                .occur(now, interval, note)
        };
        match step {
            Step::Publish(note) => {
                let this = self.clone();
                let regarding = regarding.clone();
                handle.spawn(async move { this.publish(&regarding, reason, action, note).await });
            }
            Step::Held(Some(at)) => {
                let this = self.clone();
                let regarding = regarding.clone();
                handle.spawn(async move {
                    tokio::time::sleep_until(at).await;
                    let note = this
                        .lock()
                        .get_mut(&key)
                        .and_then(|w| w.flush(Instant::now(), interval));
                    if let Some(note) = note {
                        this.publish(&regarding, reason, action, note).await;
                    }
                });
            }
            Step::Held(None) => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Window>> {
        // The map holds counters only; a panic elsewhere cannot leave it inconsistent.
        self.inner
            .windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.chars().take(MAX_NOTE_CHARS).collect()),
            action: action.into(),
            secondary: None,
        };
        // A fresh Recorder per Event: a shared one would turn every later Event of this object
        // and reason into a series patch of the first, which keeps the first note, so the count
        // and the latest record's coordinates would never show.
        let recorder = Recorder::new(self.inner.client.clone(), self.inner.reporter.clone());
        if let Err(e) = recorder.publish(&event, regarding).await {
            tracing::warn!(reason, error = %e, "publishing an Event failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Duration = Duration::from_secs(10);

    #[test]
    fn first_occurrence_is_published_then_held_until_the_interval_ends() {
        let t0 = Instant::now();
        let mut w = Window::default();
        assert_eq!(w.occur(t0, I, "a".into()), Step::Publish("a".into()));
        // Within the interval: held, one flush scheduled at its end.
        assert_eq!(
            w.occur(t0 + Duration::from_secs(1), I, "b".into()),
            Step::Held(Some(t0 + I))
        );
        for i in 0..998 {
            assert_eq!(
                w.occur(t0 + Duration::from_secs(2), I, format!("c{i}")),
                Step::Held(None)
            );
        }
        let note = w.flush(t0 + I, I).unwrap();
        assert_eq!(note, "999 times in the last 10s; latest: c997");
        assert_eq!(occurrences(&note), 999);
        // A new interval started at the flush: the next one is held again.
        assert_eq!(
            w.occur(t0 + I + Duration::from_secs(1), I, "d".into()),
            Step::Held(Some(t0 + I + I))
        );
        assert_eq!(w.flush(t0 + I + I, I).unwrap(), "d");
        assert_eq!(occurrences("d"), 1);
        // After a quiet interval: published at once.
        assert!(w.idle(t0 + I * 3, I));
        assert_eq!(
            w.occur(t0 + I * 3, I, "e".into()),
            Step::Publish("e".into())
        );
    }

    #[test]
    fn flush_without_held_occurrences_publishes_nothing() {
        let t0 = Instant::now();
        let mut w = Window::default();
        assert_eq!(w.flush(t0, I), None);
        assert!(w.idle(t0, I));
    }

    #[test]
    fn references_name_the_kind() {
        let r = object_reference::<kubeless_api::KafkaTrigger>("ns", "kt", Some("u1"));
        assert_eq!(r.kind.as_deref(), Some("KafkaTrigger"));
        assert_eq!(r.api_version.as_deref(), Some("kubeless.io/v1beta1"));
        assert_eq!(r.uid.as_deref(), Some("u1"));
    }
}
