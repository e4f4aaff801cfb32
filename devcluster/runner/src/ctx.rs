//! Shared state of the controllers: the client, the watch caches and a
//! wake-up signal that fires on every watch event.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use tokio::sync::Notify;

use crate::RunnerConfig;

/// Label put on the Endpoints and EndpointSlices this runner writes.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "devcluster-runner";

/// Watch caches of every kind the controllers read.
#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    pub deployments: Store<Deployment>,
    pub services: Store<Service>,
    pub jobs: Store<Job>,
    pub cronjobs: Store<CronJob>,
    pub endpoints: Store<Endpoints>,
    pub slices: Store<EndpointSlice>,
}

/// Wakes every controller loop.
#[derive(Default)]
pub struct Wakers {
    list: std::sync::Mutex<Vec<Arc<Notify>>>,
}

impl Wakers {
    pub fn register(&self) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        if let Ok(mut l) = self.list.lock() {
            l.push(n.clone());
        }
        n
    }

    pub fn wake_all(&self) {
        if let Ok(l) = self.list.lock() {
            for n in l.iter() {
                // notify_one keeps a permit when the loop is busy, so no event is lost.
                n.notify_one();
            }
        }
    }
}

pub struct Ctx {
    pub client: Client,
    pub stores: Stores,
    pub config: RunnerConfig,
    pub wakers: Arc<Wakers>,
}

impl Ctx {
    /// Waits (bounded) until the cache shows `name` present (or absent / terminating).
    pub async fn wait_pod_cache(&self, ns: &str, name: &str, present: bool) {
        let key = ObjectRef::<Pod>::new(name).within(ns);
        for _ in 0..100 {
            let got = self.stores.pods.get(&key);
            let is_present = got
                .as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none());
            if is_present == present {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Same as [`Ctx::wait_pod_cache`] for Jobs.
    pub async fn wait_job_cache(&self, ns: &str, name: &str, present: bool) {
        let key = ObjectRef::<Job>::new(name).within(ns);
        for _ in 0..100 {
            if self.stores.jobs.get(&key).is_some() == present {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Namespace and name of an object, for logs and API calls.
pub fn ns_name<K: Resource>(obj: &K) -> (String, String) {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

/// A 404 from the API server.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// A 409 from the API server.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// Runs `step` on every wake-up (and at least every `tick`), until cancelled.
pub async fn control_loop<F, Fut>(
    ctx: Arc<Ctx>,
    tick: Duration,
    cancel: tokio_util::sync::CancellationToken,
    name: &'static str,
    mut step: F,
) where
    F: FnMut(Arc<Ctx>) -> Fut,
    Fut: std::future::Future<Output = crate::error::Result<()>>,
{
    let wake = ctx.wakers.register();
    loop {
        if let Err(err) = step(ctx.clone()).await {
            tracing::warn!(controller = name, error = %err, "reconcile failed; retrying");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = wake.notified() => {
                // Let a burst of watch events settle into one pass.
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            _ = tokio::time::sleep(tick) => {}
        }
    }
}
