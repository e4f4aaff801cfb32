//! The process kubelet: runs every Pod's containers as local processes and
//! keeps the Pod's status true.

mod instance;
mod pod;
mod podman;
mod probes;
mod pull;
mod status;
mod supervise;
mod volumes;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::ctx::{Ctx, is_not_found, ns_name};
use crate::podstatus::{ContainerRt, PodRt};
use crate::spec::{BaseEnv, PodFacts};
use crate::util::{IpAllocator, pod_phase};

use pod::run_pod;

/// `base * 2^n`, at most `cap`.
pub fn backoff_delay(base: Duration, cap: Duration, n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.min(20)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

struct Worker {
    ns: String,
    name: String,
    ip: Ipv4Addr,
    cancel: CancellationToken,
    deleted: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Runs until `cancel`, then stops every pod and returns once all processes are gone.
pub async fn run(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let wake = ctx.wakers.register();
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let mut ips = IpAllocator::new(ctx.config.pod_ip_base);
    let mut finalizing: HashSet<String> = HashSet::new();
    loop {
        sync(&ctx, &mut workers, &mut ips, &mut finalizing).await;
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = wake.notified() => tokio::time::sleep(Duration::from_millis(10)).await,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    for w in workers.values() {
        w.cancel.cancel();
    }
    for (_, w) in workers.drain() {
        if let Err(e) = w.task.await {
            tracing::warn!(error = %e, "pod worker ended abnormally");
        }
    }
}

async fn sync(
    ctx: &Arc<Ctx>,
    workers: &mut HashMap<String, Worker>,
    ips: &mut IpAllocator,
    finalizing: &mut HashSet<String>,
) {
    let pods = ctx.stores.pods.state();
    let mut present: HashSet<String> = HashSet::new();
    for pod in &pods {
        let Some(uid) = pod.metadata.uid.clone() else {
            continue;
        };
        present.insert(uid.clone());
        if pod.metadata.deletion_timestamp.is_some() {
            match workers.get(&uid) {
                Some(w) => {
                    if !w.cancel.is_cancelled() {
                        w.deleted.store(true, Ordering::SeqCst);
                        w.cancel.cancel();
                    }
                }
                None => {
                    if finalizing.insert(uid.clone()) {
                        let ctx = ctx.clone();
                        let pod = pod.clone();
                        tokio::spawn(async move { finalize_delete(&ctx, &pod).await });
                    }
                }
            }
            continue;
        }
        if workers.contains_key(&uid) || matches!(pod_phase(pod), "Succeeded" | "Failed") {
            continue;
        }
        let existing = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| ips.reserve(*ip));
        let Some(ip) = existing.or_else(|| ips.allocate()) else {
            tracing::error!("pod IP range exhausted; pod {} waits", pod.name_any());
            continue;
        };
        let (ns, name) = ns_name(pod.as_ref());
        let cancel = CancellationToken::new();
        let deleted = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run_pod(
            ctx.clone(),
            pod.clone(),
            ip,
            cancel.clone(),
            deleted.clone(),
        ));
        tracing::info!(%ns, pod = %name, %ip, "starting pod");
        workers.insert(
            uid,
            Worker {
                ns,
                name,
                ip,
                cancel,
                deleted,
                task,
            },
        );
    }
    // Pods that vanished without a graceful deletion.
    for (uid, w) in workers.iter() {
        if !present.contains(uid) && !w.cancel.is_cancelled() {
            w.deleted.store(true, Ordering::SeqCst);
            w.cancel.cancel();
        }
    }
    let done: Vec<String> = workers
        .iter()
        .filter(|(uid, w)| !present.contains(*uid) && w.task.is_finished())
        .map(|(uid, _)| uid.clone())
        .collect();
    for uid in done {
        if let Some(w) = workers.remove(&uid) {
            tracing::info!(ns = %w.ns, pod = %w.name, "pod stopped and removed");
            ips.release(w.ip);
        }
    }
    finalizing.retain(|uid| present.contains(uid));
}

/// Completes a graceful deletion once the pod's processes are gone.
async fn finalize_delete(ctx: &Ctx, pod: &Pod) {
    let (ns, name) = ns_name(pod);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    if let Err(e) = api.delete(&name, &dp).await
        && !is_not_found(&e)
    {
        tracing::debug!(%ns, pod = %name, error = %e, "final pod delete failed");
    }
}

/// Shared runtime state of one pod, and the wake-up for its status writer.
struct Reporter {
    rt: Mutex<PodRt>,
    notify: Notify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Init,
    Main,
}

impl Reporter {
    fn update(&self, kind: Kind, idx: usize, f: impl FnOnce(&mut ContainerRt)) {
        if let Ok(mut rt) = self.rt.lock() {
            let list = match kind {
                Kind::Init => &mut rt.init,
                Kind::Main => &mut rt.main,
            };
            if let Some(c) = list.get_mut(idx) {
                let before = c.clone();
                f(c);
                if *c != before {
                    self.notify.notify_one();
                }
            }
        }
    }

    fn update_pod(&self, f: impl FnOnce(&mut PodRt)) {
        if let Ok(mut rt) = self.rt.lock() {
            f(&mut rt);
            self.notify.notify_one();
        }
    }

    fn snapshot(&self) -> Option<PodRt> {
        self.rt.lock().ok().map(|r| r.clone())
    }
}

/// Everything a container supervisor needs.
struct PodEnv {
    ctx: Arc<Ctx>,
    facts: PodFacts,
    pod_dir: PathBuf,
    logs_dir: PathBuf,
    volumes: HashMap<String, PathBuf>,
    /// Volumes a container always sees read-only (ConfigMap, Secret, downward API, projected).
    read_only_volumes: HashSet<String>,
    pod_security: Option<k8s_openapi::api::core::v1::PodSecurityContext>,
    /// `spec.imagePullSecrets` (container mode logs in to registries with them).
    image_pull_secrets: Vec<String>,
    /// The ServiceAccount files, when the pod has them: stands for the kubelet's
    /// `/var/run/secrets/kubernetes.io/serviceaccount` mount in every container.
    service_account_dir: Option<PathBuf>,
    base_env: BaseEnv,
    rep: Arc<Reporter>,
    cancel: CancellationToken,
    deleted: Arc<AtomicBool>,
    grace: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Duration::from_millis(100);
        let cap = Duration::from_secs(1);
        assert_eq!(backoff_delay(b, cap, 0), Duration::from_millis(100));
        assert_eq!(backoff_delay(b, cap, 1), Duration::from_millis(200));
        assert_eq!(backoff_delay(b, cap, 3), Duration::from_millis(800));
        assert_eq!(backoff_delay(b, cap, 4), cap);
        assert_eq!(backoff_delay(b, cap, 400), cap);
    }
}
