//! Guarded watches: an object that does not deserialize into our type costs only itself.
//!
//! A plain `watcher::<K>` fails the whole list when one object is malformed (for example a
//! value stored under an older, looser CRD schema that our Rust type cannot hold), so every
//! valid object of the kind stops being served. Here the watch runs over
//! [`DeserializeGuard<K>`]: valid objects go to an ordinary [`Store<K>`], malformed ones to an
//! [`InvalidObjects`] set, and [`report_invalid`] marks each of those `Ready=False` with reason
//! `InvalidSpec` and the deserialization message, plus a Warning Event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    core::{DeserializeGuard, error_boundary::InvalidObject},
    runtime::{
        WatchStreamExt,
        events::{Event, EventType, Recorder},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use kubeless_api::{
    Condition,
    conditions::{READY, find_condition, reasons, set_condition},
};
use serde::de::DeserializeOwned;

/// The objects of one kind that failed to deserialize, keyed by namespace/name.
#[derive(Clone, Default)]
pub struct InvalidObjects {
    inner: Arc<Mutex<InvalidState>>,
}

#[derive(Default)]
struct InvalidState {
    current: BTreeMap<(String, String), InvalidObject>,
    /// Filled during a relist; replaces `current` when the relist ends.
    relisting: Option<BTreeMap<(String, String), InvalidObject>>,
    /// (uid, generation) already reported, so a status write (which changes the
    /// resourceVersion but not the generation) does not trigger another report.
    reported: BTreeMap<(String, String), (String, Option<i64>)>,
}

fn key_of(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl InvalidObjects {
    fn lock(&self) -> std::sync::MutexGuard<'_, InvalidState> {
        // The state is a plain map: a panic elsewhere cannot leave it half-updated.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every malformed object currently known.
    pub fn snapshot(&self) -> Vec<InvalidObject> {
        self.lock().current.values().cloned().collect()
    }

    /// Whether `namespace/name` is currently malformed.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.lock()
            .current
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// The malformed objects not reported yet at their current generation.
    pub fn unreported(&self) -> Vec<InvalidObject> {
        let s = self.lock();
        s.current
            .iter()
            .filter(|(k, o)| {
                s.reported.get(*k)
                    != Some(&(
                        o.metadata.uid.clone().unwrap_or_default(),
                        o.metadata.generation,
                    ))
            })
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Records that `obj` was reported at its current generation.
    pub fn mark_reported(&self, obj: &InvalidObject) {
        let mut s = self.lock();
        s.reported.insert(
            key_of(&obj.metadata),
            (
                obj.metadata.uid.clone().unwrap_or_default(),
                obj.metadata.generation,
            ),
        );
    }

    fn insert(&self, obj: InvalidObject) {
        let mut s = self.lock();
        let key = key_of(&obj.metadata);
        match s.relisting.as_mut() {
            Some(r) => {
                r.insert(key, obj);
            }
            None => {
                s.current.insert(key, obj);
            }
        }
    }

    fn remove(&self, meta: &kube::api::ObjectMeta) {
        let mut s = self.lock();
        let key = key_of(meta);
        s.current.remove(&key);
        s.reported.remove(&key);
    }

    fn start_relist(&self) {
        self.lock().relisting = Some(BTreeMap::new());
    }

    fn end_relist(&self) {
        let mut s = self.lock();
        if let Some(r) = s.relisting.take() {
            s.reported.retain(|k, _| r.contains_key(k));
            s.current = r;
        }
    }
}

/// Watches `K` (in `namespace`, or everywhere) through [`DeserializeGuard`]: returns the store
/// of valid objects, the set of malformed ones, and the stream to drive. Each item of the stream
/// says something changed (an object, valid or not), or that the watch failed and is retried
/// with backoff; the watch itself never stops because of one object.
pub fn guarded_watch<K>(
    client: Client,
    namespace: Option<&str>,
    config: watcher::Config,
) -> (
    Store<K>,
    InvalidObjects,
    impl Stream<Item = Result<(), watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    guarded_watch_stripped(client, namespace, config, |_| {})
}

/// [`guarded_watch`] driven by its own task, which wakes `changed` after every change: what a
/// trigger needs to recompute its plan. A failing watch is logged and retried with backoff.
pub fn guarded_watch_notify<K>(
    client: Client,
    namespace: Option<&str>,
    changed: Arc<tokio::sync::Notify>,
) -> (Store<K>, InvalidObjects, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, invalid, stream) =
        guarded_watch::<K>(client, namespace, watcher::Config::default());
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(()) => changed.notify_one(),
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying")
                }
            }
        }
    });
    (store, invalid, task)
}

/// [`guarded_watch`] that applies `strip` to each valid object before caching it (drop what
/// the service never reads, to keep many objects cheap).
pub fn guarded_watch_stripped<K>(
    client: Client,
    namespace: Option<&str>,
    config: watcher::Config,
    strip: fn(&mut K),
) -> (
    Store<K>,
    InvalidObjects,
    impl Stream<Item = Result<(), watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    guarded_watch_inspect(client, namespace, config, strip, |_| {})
}

/// [`guarded_watch_stripped`] that also shows `inspect` every event of valid objects (relist
/// markers included), whole (before `strip`) and before the store takes it in: for state kept
/// beside the store that must follow each change rather than diff the store (the gateway's
/// scale-to-zero records). An object that turns malformed arrives as the `Delete` of its last
/// valid version.
pub fn guarded_watch_inspect<K>(
    client: Client,
    namespace: Option<&str>,
    config: watcher::Config,
    strip: fn(&mut K),
    mut inspect: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (
    Store<K>,
    InvalidObjects,
    impl Stream<Item = Result<(), watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<DeserializeGuard<K>> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let (store, mut writer) = reflector::store::<K>();
    let invalid = InvalidObjects::default();
    let reader = store.clone();
    let set = invalid.clone();
    let stream = watcher(api, config).default_backoff().map(move |event| {
        let event = event?;
        for mut valid in split_event(event, &reader, &set) {
            inspect(&valid);
            match &mut valid {
                watcher::Event::Apply(k)
                | watcher::Event::InitApply(k)
                | watcher::Event::Delete(k) => strip(k),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            writer.apply_watcher_event(&valid);
        }
        Ok(())
    });
    (store, invalid, stream)
}

/// Turns one guarded event into the events of valid objects, recording malformed objects in
/// `invalid`. An object that turns malformed leaves the valid store (a Delete of its last valid
/// version), so nothing acts on stale data.
fn split_event<K>(
    event: watcher::Event<DeserializeGuard<K>>,
    store: &Store<K>,
    invalid: &InvalidObjects,
) -> Vec<watcher::Event<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let last_valid = |meta: &kube::api::ObjectMeta| {
        let r = ObjectRef::<K>::new(meta.name.as_deref().unwrap_or_default());
        let r = match meta.namespace.as_deref() {
            Some(ns) => r.within(ns),
            None => r,
        };
        store.get(&r).map(|k| k.as_ref().clone())
    };
    match event {
        watcher::Event::Init => {
            invalid.start_relist();
            vec![watcher::Event::Init]
        }
        watcher::Event::InitDone => {
            invalid.end_relist();
            vec![watcher::Event::InitDone]
        }
        watcher::Event::InitApply(DeserializeGuard(Ok(k))) => vec![watcher::Event::InitApply(k)],
        watcher::Event::InitApply(DeserializeGuard(Err(bad))) => {
            log_invalid::<K>(&bad);
            invalid.insert(bad);
            // Left out of the relist, so the store drops any earlier valid version.
            Vec::new()
        }
        watcher::Event::Apply(DeserializeGuard(Ok(k))) => {
            invalid.remove(k.meta());
            vec![watcher::Event::Apply(k)]
        }
        watcher::Event::Apply(DeserializeGuard(Err(bad))) => {
            log_invalid::<K>(&bad);
            let gone = last_valid(&bad.metadata);
            invalid.insert(bad);
            gone.map(watcher::Event::Delete).into_iter().collect()
        }
        watcher::Event::Delete(DeserializeGuard(Ok(k))) => {
            invalid.remove(k.meta());
            vec![watcher::Event::Delete(k)]
        }
        watcher::Event::Delete(DeserializeGuard(Err(bad))) => {
            invalid.remove(&bad.metadata);
            last_valid(&bad.metadata)
                .map(watcher::Event::Delete)
                .into_iter()
                .collect()
        }
    }
}

fn log_invalid<K: Resource<DynamicType = ()>>(bad: &InvalidObject) {
    tracing::warn!(
        kind = %K::kind(&()),
        namespace = bad.metadata.namespace.as_deref().unwrap_or_default(),
        name = bad.metadata.name.as_deref().unwrap_or_default(),
        error = %bad.error,
        "ignoring an object that does not deserialize"
    );
}

/// The message of the `InvalidSpec` condition for a malformed object.
pub fn invalid_message(bad: &InvalidObject) -> String {
    format!("the object does not match its schema: {}", bad.error)
}

/// Marks a malformed object `Ready=False` (reason `InvalidSpec`, the deserialization message)
/// and publishes a Warning Event, unless its Ready condition already says so for this
/// generation. Other conditions in its status are kept.
pub async fn report_invalid<K>(
    client: &Client,
    recorder: &Recorder,
    bad: &InvalidObject,
    field_manager: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let ns = bad.metadata.namespace.clone().unwrap_or_default();
    let name = bad.metadata.name.clone().unwrap_or_default();
    let ar = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let live = api.get_status(&name).await?;
    let mut conditions: Vec<Condition> = live
        .data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let message = invalid_message(bad);
    let generation = live.metadata.generation;
    let already = find_condition(&conditions, READY).is_some_and(|c| {
        c.reason.as_deref() == Some(reasons::INVALID_SPEC)
            && c.message.as_deref() == Some(message.as_str())
            && c.observed_generation == generation
    });
    if already {
        return Ok(());
    }
    set_condition(
        &mut conditions,
        Condition::not_ready(reasons::INVALID_SPEC, message.clone()).with_generation(generation),
    );
    let patch = StatusConditions {
        status: ConditionsOnly {
            conditions: &conditions,
        },
    };
    api.patch_status(
        &name,
        &PatchParams {
            field_manager: Some(field_manager.to_string()),
            ..PatchParams::default()
        },
        &Patch::Merge(&patch),
    )
    .await?;
    let reference = ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(name),
        namespace: Some(ns),
        uid: live.metadata.uid.clone(),
        resource_version: live.metadata.resource_version.clone(),
        field_path: None,
    };
    let event = Event {
        type_: EventType::Warning,
        reason: reasons::INVALID_SPEC.into(),
        note: Some(message.chars().take(1000).collect()),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        // Events are best effort: a missing permission must not hide the condition.
        tracing::warn!(error = %e, "publishing the InvalidSpec Event failed");
    }
    Ok(())
}

/// Reports every not-yet-reported malformed object of `invalid` (see [`report_invalid`]).
/// Failures are logged and retried on the next call.
pub async fn report_all_invalid<K>(
    client: &Client,
    recorder: &Recorder,
    invalid: &InvalidObjects,
    field_manager: &str,
) where
    K: Resource<DynamicType = ()>,
{
    for bad in invalid.unreported() {
        match report_invalid::<K>(client, recorder, &bad, field_manager).await {
            Ok(()) => invalid.mark_reported(&bad),
            Err(e) => tracing::warn!(
                kind = %K::kind(&()),
                name = bad.metadata.name.as_deref().unwrap_or_default(),
                error = %e,
                "marking a malformed object InvalidSpec failed; retrying later"
            ),
        }
    }
}

#[derive(serde::Serialize, Debug)]
struct StatusConditions<'a> {
    status: ConditionsOnly<'a>,
}

#[derive(serde::Serialize, Debug)]
struct ConditionsOnly<'a> {
    conditions: &'a [Condition],
}

/// The name of a malformed object, for logs.
pub fn display_name(bad: &InvalidObject) -> String {
    let m = &bad.metadata;
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}
