//! Keeps the gateway's routing table and endpoint resolver in step with the cluster: watches
//! HTTPTriggers, Functions, function Services and EndpointSlices.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Client, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use kubeless_api::{
    Function, HttpTrigger,
    labels::{CREATED_BY, CREATED_BY_VALUE},
};
use kubeless_invoke::EndpointSliceResolver;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Gateway;
use super::routes::RouteTable;

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

/// Runs the watches and rebuilds the routes until `shutdown`. `ready` is called once every
/// cache (EndpointSlices included) has its initial list and the first table is in place.
pub async fn run(
    gateway: Arc<Gateway>,
    resolver: Arc<EndpointSliceResolver>,
    client: Client,
    namespace: Option<String>,
    shutdown: CancellationToken,
    ready: impl FnOnce() + Send,
) {
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
    let (functions, _, f_stream) = kubeless_service::guarded_watch_stripped::<Function>(
        client.clone(),
        ns,
        watcher::Config::default(),
        // Only timeout and service are needed: drop the code, deps and templates.
        |f| {
            f.metadata.managed_fields = None;
            f.metadata.annotations = None;
            f.spec.function = None;
            f.spec.deps = None;
            f.spec.deployment = None;
            f.spec.horizontal_pod_autoscaler = None;
            f.status = None;
        },
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
        gateway.set_routes(table(&triggers, &functions, &services));
        ready();
        loop {
            notify.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
            let t = table(&triggers, &functions, &services);
            tracing::debug!(routes = t.len(), "gateway routes rebuilt");
            gateway.set_routes(t);
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
) -> RouteTable {
    let state = triggers.state();
    RouteTable::build(
        state.iter().map(|t| t.as_ref()),
        |ns, name| functions.get(&ObjectRef::new(name).within(ns)),
        |ns, name| services.get(&ObjectRef::new(name).within(ns)),
    )
}
