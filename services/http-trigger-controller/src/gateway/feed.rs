//! Keeps the gateway's routing table and endpoint resolver in step with the cluster: watches
//! HTTPTriggers, Functions, function Services and EndpointSlices. Every Function event also
//! goes to the scale-to-zero [`Activity`] records.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use kubeless_api::{
    Condition, Function, FunctionStatus, HttpTrigger,
    conditions::{READY, find_condition, reasons, set_condition},
    labels::{CREATED_BY, CREATED_BY_VALUE},
    scale::SCALED_TO_ZERO,
};
use kubeless_invoke::{Activity, EndpointSliceResolver};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Gateway;
use super::routes::RouteTable;
use crate::claims::{HostPolicy, Refusal, refusals};

/// Changes arriving within this window are folded into one rebuild.
const DEBOUNCE: Duration = Duration::from_millis(20);

fn api_in<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A guarded watch stream whose every event pokes `notify`.
fn poke(
    stream: impl Stream<Item = Result<(), watcher::Error>> + Send + 'static,
    notify: Arc<Notify>,
) -> impl Stream<Item = ()> + Send + 'static {
    stream.map(move |ev| {
        if let Err(e) = ev {
            tracing::warn!(error = %e, "gateway watch failed; retrying");
        }
        notify.notify_one();
    })
}

/// A reflector whose every event pokes `notify`.
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    notify: Arc<Notify>,
) -> (Store<K>, impl Stream<Item = ()> + Send + 'static)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .map(move |ev| {
            if let Err(e) = ev {
                tracing::warn!(error = %e, "gateway watch failed; retrying");
            }
            notify.notify_one();
        });
    (store, stream)
}

/// Feeds [`Activity`] from the Function watch: each applied Function is observed, a deleted
/// one forgotten, and so is one that vanished while the watch was relisting.
pub struct ActivityFeed {
    activity: Arc<Activity>,
    known: HashSet<(String, String)>,
    relisted: Option<HashSet<(String, String)>>,
}

impl ActivityFeed {
    pub fn new(activity: Arc<Activity>) -> Self {
        Self {
            activity,
            known: HashSet::new(),
            relisted: None,
        }
    }

    /// Takes in one event of the Function watch.
    pub fn event(&mut self, event: &watcher::Event<Function>) {
        let key = |f: &Function| (f.namespace().unwrap_or_default(), f.name_any());
        match event {
            watcher::Event::Apply(f) => {
                self.activity.observe(f);
                self.known.insert(key(f));
            }
            watcher::Event::Delete(f) => {
                let (ns, name) = key(f);
                self.activity.forget(&ns, &name);
                self.known.remove(&(ns, name));
            }
            watcher::Event::Init => self.relisted = Some(HashSet::new()),
            watcher::Event::InitApply(f) => {
                self.activity.observe(f);
                self.relisted.get_or_insert_default().insert(key(f));
            }
            watcher::Event::InitDone => {
                let fresh = self.relisted.take().unwrap_or_default();
                for (ns, name) in self.known.difference(&fresh) {
                    self.activity.forget(ns, name);
                }
                self.known = fresh;
            }
        }
    }
}

/// What the gateway keeps of a Function: its timeout and Service for the routes, and the
/// `ScaledToZero` condition (whether requests record activity). Code, deps, templates and
/// the rest of the status are dropped.
fn strip_function(f: &mut Function) {
    f.metadata.managed_fields = None;
    f.metadata.annotations = None;
    f.spec.function = None;
    f.spec.deps = None;
    f.spec.deployment = None;
    f.spec.horizontal_pod_autoscaler = None;
    f.status = f.status.take().and_then(|s| {
        let conditions: Vec<_> = s
            .conditions
            .into_iter()
            .filter(|c| c.type_ == SCALED_TO_ZERO)
            .collect();
        (!conditions.is_empty()).then(|| FunctionStatus {
            conditions,
            ..FunctionStatus::default()
        })
    });
}

/// Which triggers the gateway serves, and whether it reports the ones it refuses.
#[derive(Clone, Debug, Default)]
pub struct RouteSettings {
    /// The install's host policy.
    pub hosts: Arc<HostPolicy>,
    /// Write `Ready=False RouteConflict` (and a Warning Event) on refused triggers, and clear
    /// it when the conflict ends. On when no Ingress controller runs to do it.
    pub report_conflicts: bool,
    /// Reporting instance of the Events (the pod name).
    pub instance: Option<String>,
}

/// Runs the watches and rebuilds the routes until `shutdown`. `ready` is called once every
/// cache (EndpointSlices included) has its initial list and the first table is in place.
/// Every Function event is shown to `activity` first.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    gateway: Arc<Gateway>,
    resolver: Arc<EndpointSliceResolver>,
    activity: Arc<Activity>,
    client: Client,
    namespace: Option<String>,
    routes: RouteSettings,
    shutdown: CancellationToken,
    ready: impl FnOnce() + Send,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: crate::controller::FIELD_MANAGER.into(),
            instance: routes.instance.clone(),
        },
    );
    let ns = namespace.as_deref();
    let notify = Arc::new(Notify::new());
    // Guarded: one trigger or Function that does not deserialize must not take every route
    // down (the controller marks it InvalidSpec).
    let (triggers, _, t_stream) = kubeless_service::guarded_watch_stripped::<HttpTrigger>(
        client.clone(),
        ns,
        watcher::Config::default(),
        |t| {
            t.metadata.managed_fields = None;
        },
    );
    let t_stream = poke(t_stream, notify.clone());
    let mut feed = ActivityFeed::new(activity);
    let (functions, _, f_stream) = kubeless_service::guarded_watch_inspect::<Function>(
        client.clone(),
        ns,
        watcher::Config::default(),
        strip_function,
        move |event| feed.event(event),
    );
    let f_stream = poke(f_stream, notify.clone());
    let (services, s_stream) = reflect::<Service>(
        api_in(&client, ns),
        watcher::Config::default().labels(&format!("{CREATED_BY}={CREATED_BY_VALUE}")),
        |s| {
            s.metadata.managed_fields = None;
            s.status = None;
        },
        notify.clone(),
    );
    let slices = resolver.spawn_watch(client.clone(), ns);

    let watches = futures::stream::select(futures::stream::select(t_stream, f_stream), s_stream)
        .for_each(|()| async {});
    let rebuild = async {
        let _ = triggers.wait_until_ready().await;
        let _ = functions.wait_until_ready().await;
        let _ = services.wait_until_ready().await;
        resolver.wait_synced().await;
        let (t, mut refused) = table(&triggers, &functions, &services, &routes.hosts);
        gateway.set_routes(t);
        ready();
        let mut reported = BTreeMap::new();
        loop {
            if routes.report_conflicts {
                report_conflicts(&client, &recorder, &triggers, &refused, &mut reported).await;
            }
            notify.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
            let (t, r) = table(&triggers, &functions, &services, &routes.hosts);
            tracing::debug!(
                routes = t.len(),
                refused = r.len(),
                "gateway routes rebuilt"
            );
            gateway.set_routes(t);
            refused = r;
        }
    };
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = watches => {}
        _ = rebuild => {}
    }
    slices.abort();
}

fn table(
    triggers: &Store<HttpTrigger>,
    functions: &Store<Function>,
    services: &Store<Service>,
    hosts: &HostPolicy,
) -> (RouteTable, Refusals) {
    let state = triggers.state();
    let refused = refusals(state.iter().map(|t| t.as_ref()), hosts);
    let table = RouteTable::build(
        state.iter().map(|t| t.as_ref()),
        &refused,
        |ns, name| functions.get(&ObjectRef::new(name).within(ns)),
        |ns, name| services.get(&ObjectRef::new(name).within(ns)),
    );
    (table, refused)
}

type Refusals = BTreeMap<(String, String), Refusal>;

/// Marks refused triggers `Ready=False RouteConflict` with a Warning Event, and triggers whose
/// conflict ended `Ready=True` again. `reported` remembers what was written, so a steady state
/// costs no write; a failed write is tried again on the next pass.
async fn report_conflicts(
    client: &Client,
    recorder: &Recorder,
    triggers: &Store<HttpTrigger>,
    refused: &Refusals,
    reported: &mut Refusals,
) {
    for t in triggers.state() {
        let key = (t.namespace().unwrap_or_default(), t.name_any());
        let current = t
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, READY));
        let in_conflict =
            current.is_some_and(|c| c.reason.as_deref() == Some(reasons::ROUTE_CONFLICT));
        let condition = match refused.get(&key) {
            Some(r) => {
                let message = r.message();
                let said =
                    in_conflict && current.and_then(|c| c.message.as_deref()) == Some(&message);
                if said && reported.get(&key) == Some(r) {
                    continue;
                }
                Condition::not_ready(reasons::ROUTE_CONFLICT, message)
            }
            None if in_conflict => Condition::ready(
                reasons::RECONCILED,
                format!(
                    "served by the gateway: host {} is this namespace's",
                    host_shown(&t)
                ),
            ),
            None => {
                reported.remove(&key);
                continue;
            }
        };
        let refusal = refused.get(&key).cloned();
        if write_condition(client, recorder, &t, condition).await {
            match refusal {
                Some(r) => {
                    reported.insert(key, r);
                }
                None => {
                    reported.remove(&key);
                }
            }
        }
    }
    reported.retain(|k, _| refused.contains_key(k));
}

fn host_shown(t: &HttpTrigger) -> String {
    let h = crate::claims::host_key(t);
    if h.is_empty() { "(any)".into() } else { h }
}

/// Writes `condition` as the trigger's Ready condition and publishes it as an Event (Warning
/// when not ready). `true` when the status was written.
async fn write_condition(
    client: &Client,
    recorder: &Recorder,
    t: &HttpTrigger,
    condition: Condition,
) -> bool {
    let mut status = t.status.clone().unwrap_or_default();
    let generation = t.metadata.generation;
    let (ready, reason, note) = (
        condition.is_true(),
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    );
    set_condition(
        &mut status.conditions,
        condition.with_generation(generation),
    );
    status.observed_generation = generation;
    let api: Api<HttpTrigger> = Api::namespaced(client.clone(), &t.namespace().unwrap_or_default());
    let patch = serde_json::json!({ "status": status });
    if let Err(e) = api
        .patch_status(
            &t.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        tracing::warn!(trigger = %t.name_any(), error = %e, "writing the route status failed");
        return false;
    }
    let event = KubeEvent {
        type_: if ready {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason,
        note: Some(note.chars().take(1000).collect()),
        action: "Route".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &t.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing the route Event failed");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::{
        Condition,
        scale::{ScaleState, reasons},
    };

    fn function(name: &str, at_zero: Option<bool>, ready: i32) -> Function {
        let mut f = Function::new(name, Default::default());
        f.metadata.namespace = Some("ns".into());
        let mut status = FunctionStatus {
            ready_replicas: Some(ready),
            ..Default::default()
        };
        status
            .conditions
            .push(Condition::new("Ready", ready > 0, "Deployed", ""));
        if let Some(z) = at_zero {
            let reason = if z { reasons::IDLE } else { reasons::ACTIVE };
            status
                .conditions
                .push(Condition::new(SCALED_TO_ZERO, z, reason, ""));
        }
        f.status = Some(status);
        f
    }

    #[test]
    fn the_feed_observes_applies_and_forgets_deletes_and_vanished_functions() {
        let activity = Arc::new(Activity::read_only());
        let mut feed = ActivityFeed::new(Arc::clone(&activity));
        feed.event(&watcher::Event::Init);
        feed.event(&watcher::Event::InitApply(function("a", Some(true), 0)));
        feed.event(&watcher::Event::InitApply(function("b", Some(false), 1)));
        feed.event(&watcher::Event::InitDone);
        assert_eq!(activity.state("ns", "a"), ScaleState::AtZero);
        assert!(activity.is_ready("ns", "b"));
        feed.event(&watcher::Event::Apply(function("a", Some(false), 1)));
        assert!(activity.is_ready("ns", "a"));
        feed.event(&watcher::Event::Delete(function("a", Some(false), 1)));
        assert_eq!(activity.state("ns", "a"), ScaleState::Off);
        // b was deleted while the watch was down: the relist no longer has it.
        feed.event(&watcher::Event::Init);
        feed.event(&watcher::Event::InitApply(function("c", None, 1)));
        assert!(activity.is_ready("ns", "b"), "kept until the relist ends");
        feed.event(&watcher::Event::InitDone);
        assert_eq!(activity.state("ns", "b"), ScaleState::Off);
        assert!(!activity.is_ready("ns", "b"));
    }

    #[test]
    fn the_stored_function_keeps_only_the_scale_to_zero_condition() {
        let mut f = function("a", Some(true), 0);
        strip_function(&mut f);
        let status = f.status.as_ref().unwrap();
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.ready_replicas, None);
        assert_eq!(ScaleState::of(&f), ScaleState::AtZero);
        let mut off = function("b", None, 1);
        strip_function(&mut off);
        assert!(off.status.is_none());
    }
}
