//! Shared state of the controllers: the client, the watch caches and a
//! wake-up signal that fires on every watch event.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
    pub hpas: Store<HorizontalPodAutoscaler>,
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

/// One reconcile task per object, so that a slow object (one whose pods are being deleted, one
/// that waits for the cache to show what it just wrote) never holds up another: a pass hands
/// each object to its own task and returns at once. An object whose task is still running is
/// marked dirty instead, and its task runs once more when it is done, so no wake-up is lost and
/// there is never more than one task per object.
pub struct KeyedWorkers {
    name: &'static str,
    /// Key -> "dirty": run again after the current run.
    running: Mutex<HashMap<String, bool>>,
    cancel: CancellationToken,
}

impl KeyedWorkers {
    /// Workers whose tasks stop when `cancel` fires.
    pub fn new(name: &'static str, cancel: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            name,
            running: Mutex::new(HashMap::new()),
            cancel,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        // A map of flags: a panic elsewhere cannot leave it half-written.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work` for `key` on its own task, or marks the running one dirty.
    pub fn dispatch<F, Fut>(self: &Arc<Self>, key: String, work: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = crate::error::Result<()>> + Send + 'static,
    {
        {
            let mut running = self.lock();
            if let Some(dirty) = running.get_mut(&key) {
                *dirty = true;
                return;
            }
            running.insert(key.clone(), false);
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    result = work() => if let Err(err) = result {
                        tracing::warn!(controller = this.name, %key, error = %err, "reconcile failed; retrying");
                    },
                    _ = this.cancel.cancelled() => {
                        this.lock().remove(&key);
                        return;
                    }
                }
                let mut running = this.lock();
                match running.get_mut(&key) {
                    Some(dirty) if *dirty => *dirty = false,
                    _ => {
                        running.remove(&key);
                        return;
                    }
                }
            }
        });
    }

    /// How many objects have a task right now.
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_slow_key_holds_up_only_itself_and_reruns_once_when_dirty() {
        let workers = KeyedWorkers::new("test", CancellationToken::new());
        let slow_runs = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let slow = {
            let (runs, release) = (Arc::clone(&slow_runs), Arc::clone(&release));
            move || {
                let (runs, release) = (Arc::clone(&runs), Arc::clone(&release));
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    release.notified().await;
                    Ok(())
                }
            }
        };
        workers.dispatch("slow".into(), slow.clone());
        // Three more passes while it runs: one rerun, not three, and no second task.
        for _ in 0..3 {
            workers.dispatch("slow".into(), slow.clone());
        }
        let fast_done = Arc::new(Notify::new());
        let done = Arc::clone(&fast_done);
        workers.dispatch("fast".into(), move || {
            let done = Arc::clone(&done);
            async move {
                done.notify_one();
                Ok(())
            }
        });
        tokio::time::timeout(Duration::from_secs(5), fast_done.notified())
            .await
            .expect("the fast key ran while the slow one was busy");
        assert_eq!(slow_runs.load(Ordering::SeqCst), 1);
        release.notify_one();
        for _ in 0..100 {
            if slow_runs.load(Ordering::SeqCst) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(slow_runs.load(Ordering::SeqCst), 2, "dirty: ran once more");
        release.notify_one();
        for _ in 0..100 {
            if workers.in_flight() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(workers.in_flight(), 0);
        assert_eq!(slow_runs.load(Ordering::SeqCst), 2);
    }
}
