//! The process kubelet: runs every Pod's containers as local processes and
//! keeps the Pod's status true.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, PodCondition, PodStatus, Secret, Volume,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::container::{ContainerRuntime, Mount, PodRuntime};
use crate::ctx::{Ctx, is_not_found, ns_name};
use crate::podstatus::{ContainerRt, PodRt, RunState, compute_status, exit_code_of};
use crate::probe::{Timing, probe_once};
use crate::process::{LogSink, Running, rotate_log, spawn};
use crate::spec::{BaseEnv, PathMap, PodFacts, ProcessSpec, RefData, build_process};
use crate::util::{IpAllocator, pod_phase};

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

fn status_patch(status: &PodStatus) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(status)?;
    if let Some(obj) = value.as_object_mut() {
        // A merge patch keeps fields it does not mention: clear them explicitly.
        for key in ["reason", "message"] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    Ok(serde_json::json!({ "status": value }))
}

/// Writes the pod status whenever the runtime state changes.
async fn status_writer(
    ctx: Arc<Ctx>,
    ns: String,
    name: String,
    rep: Arc<Reporter>,
    stop: CancellationToken,
) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut last: Option<PodStatus> = None;
    let mut conditions: Option<Vec<PodCondition>> = None;
    loop {
        tokio::select! {
            _ = rep.notify.notified() => {}
            _ = stop.cancelled() => return,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        loop {
            let Some(rt) = rep.snapshot() else { return };
            let status = compute_status(&rt, conditions.as_deref(), Timestamp::now());
            if last.as_ref() == Some(&status) {
                break;
            }
            let result = match status_patch(&status) {
                Ok(p) => {
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&p))
                        .await
                }
                Err(e) => {
                    tracing::error!(error = %e, "serializing pod status");
                    break;
                }
            };
            match result {
                Ok(_) => {
                    conditions = status.conditions.clone();
                    last = Some(status);
                    break;
                }
                Err(e) if is_not_found(&e) => return,
                Err(e) => {
                    tracing::warn!(%ns, pod = %name, error = %e, "writing pod status failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }
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

async fn run_pod(
    ctx: Arc<Ctx>,
    pod: Arc<Pod>,
    ip: Ipv4Addr,
    cancel: CancellationToken,
    deleted: Arc<AtomicBool>,
) {
    let (ns, name) = ns_name(pod.as_ref());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let short_uid: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect();
    let pod_dir = ctx
        .config
        .work_dir
        .join(&ns)
        .join(format!("{name}-{short_uid}"));
    let logs_dir = ctx.config.logs_dir.join(&ns).join(&name);
    // A fresh pod starts with fresh logs (a former pod may have had this name).
    let _ = tokio::fs::remove_dir_all(&logs_dir).await;
    for d in [pod_dir.join("home"), pod_dir.join("tmp"), logs_dir.clone()] {
        if let Err(e) = tokio::fs::create_dir_all(&d).await {
            tracing::error!(path = %d.display(), error = %e, "creating pod folder failed");
        }
    }
    let spec = pod.spec.clone().unwrap_or_default();
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let rep = Arc::new(Reporter {
        rt: Mutex::new(PodRt {
            init: init_specs
                .iter()
                .map(|c| ContainerRt::new(&c.name, c.image.as_deref().unwrap_or("")))
                .collect(),
            main: spec
                .containers
                .iter()
                .map(|c| ContainerRt::new(&c.name, c.image.as_deref().unwrap_or("")))
                .collect(),
            initialized: init_specs.is_empty(),
            finished: false,
            pod_ip: Some(ip),
            host_ip: crate::HOST_IP.to_string(),
            start_time: Timestamp::now(),
            failed_reason: None,
        }),
        notify: Notify::new(),
    });
    let writer_stop = CancellationToken::new();
    let writer = tokio::spawn(status_writer(
        ctx.clone(),
        ns.clone(),
        name.clone(),
        rep.clone(),
        writer_stop.clone(),
    ));
    rep.notify.notify_one();

    let facts = PodFacts {
        name: name.clone(),
        namespace: ns.clone(),
        uid: uid.clone(),
        pod_ip: Some(ip),
        host_ip: crate::HOST_IP.to_string(),
        node_name: spec
            .node_name
            .clone()
            .unwrap_or_else(|| crate::NODE_NAME.to_string()),
        service_account: spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
        labels: pod.labels().clone(),
        annotations: pod.annotations().clone(),
    };
    let mut base_env = BaseEnv::default();
    for key in ["PATH", "LANG", "LC_ALL", "TZ"] {
        if let Ok(v) = std::env::var(key) {
            base_env.vars.insert(key.into(), v);
        }
    }
    base_env.vars.insert(
        "HOME".into(),
        pod_dir.join("home").to_string_lossy().into_owned(),
    );
    base_env.vars.insert(
        "TMPDIR".into(),
        pod_dir.join("tmp").to_string_lossy().into_owned(),
    );
    base_env.vars.insert("HOSTNAME".into(), name.clone());
    for (k, v) in &ctx.config.extra_env {
        base_env.vars.insert(k.clone(), v.clone());
    }
    let grace_secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or(spec.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0) as u64;
    let grace = Duration::from_secs(grace_secs).min(ctx.config.max_grace_period);

    let volumes = loop {
        let prepared = match prepare_volumes(
            &ctx,
            &ns,
            spec.volumes.as_deref().unwrap_or(&[]),
            &pod_dir,
            &facts,
        )
        .await
        {
            Ok(v) => match &ctx.config.api_access {
                Some(access) => crate::service_account::mount(&ctx.client, access, &pod, &pod_dir)
                    .await
                    .map(|kubeconfig| (v, kubeconfig)),
                None => Ok((v, None)),
            },
            Err(message) => Err(message),
        };
        match prepared {
            Ok(v) => break Some(v),
            Err(message) => {
                rep.update_pod(|rt| {
                    for c in rt.init.iter_mut().chain(rt.main.iter_mut()) {
                        c.state = RunState::waiting("ContainerCreating", Some(message.clone()));
                    }
                });
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = cancel.cancelled() => break None,
                }
            }
        }
    };
    if let Some((volumes, kubeconfig)) = volumes {
        if let Some(kc) = &kubeconfig {
            base_env
                .vars
                .insert("KUBECONFIG".into(), kc.to_string_lossy().into_owned());
        }
        let service_account_dir = kubeconfig.map(|_| pod_dir.join("serviceaccount"));
        let env = Arc::new(PodEnv {
            ctx: ctx.clone(),
            facts,
            pod_dir: pod_dir.clone(),
            logs_dir: logs_dir.clone(),
            volumes,
            read_only_volumes: spec
                .volumes
                .iter()
                .flatten()
                .filter(|v| {
                    v.config_map.is_some()
                        || v.secret.is_some()
                        || v.downward_api.is_some()
                        || v.projected.is_some()
                })
                .map(|v| v.name.clone())
                .collect(),
            pod_security: spec.security_context.clone(),
            image_pull_secrets: spec
                .image_pull_secrets
                .iter()
                .flatten()
                .map(|r| r.name.clone())
                .filter(|n| !n.is_empty())
                .collect(),
            service_account_dir,
            base_env,
            rep: rep.clone(),
            cancel: cancel.clone(),
            deleted: deleted.clone(),
            grace,
        });
        run_containers(env, &spec, &init_specs).await;
    }
    // Stay until the pod is deleted or the runner stops.
    cancel.cancelled().await;
    writer_stop.cancel();
    let _ = writer.await;
    if deleted.load(Ordering::SeqCst) {
        if let Some(cur) = ctx
            .stores
            .pods
            .get(&kube::runtime::reflector::ObjectRef::new(&name).within(&ns))
            && cur.metadata.uid.as_deref() == Some(uid.as_str())
        {
            finalize_delete(&ctx, &cur).await;
        }
        let _ = tokio::fs::remove_dir_all(&pod_dir).await;
        let _ = tokio::fs::remove_dir_all(&logs_dir).await;
    }
}

async fn run_containers(
    env: Arc<PodEnv>,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    init_specs: &[Container],
) {
    let policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    for (idx, c) in init_specs.iter().enumerate() {
        // Init containers are retried unless the pod never restarts anything.
        let retry = policy != "Never";
        let result = supervise(env.clone(), Kind::Init, idx, c.clone(), move |code| {
            retry && code != 0
        })
        .await;
        match result {
            Some(0) => {}
            Some(code) => {
                env.rep.update_pod(|rt| {
                    rt.failed_reason = Some((
                        "InitContainerFailed".into(),
                        format!("init container {:?} exited with code {code}", c.name),
                    ));
                    rt.finished = true;
                    for m in rt.main.iter_mut() {
                        m.state = RunState::waiting("PodInitializing", None);
                    }
                });
                return;
            }
            None => return,
        }
    }
    env.rep.update_pod(|rt| rt.initialized = true);
    let mut set = tokio::task::JoinSet::new();
    for (idx, c) in spec.containers.iter().enumerate() {
        let policy = policy.clone();
        let restart = move |code: i32| match policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        set.spawn(supervise(env.clone(), Kind::Main, idx, c.clone(), restart));
    }
    let mut all_done = true;
    while let Some(r) = set.join_next().await {
        if !matches!(r, Ok(Some(_))) {
            all_done = false;
        }
    }
    if all_done && !env.cancel.is_cancelled() {
        env.rep.update_pod(|rt| rt.finished = true);
    }
}

/// Runs one container, restarting it per `restart(exit_code)` with backoff.
/// Returns the final exit code, or None when cancelled.
async fn supervise(
    env: Arc<PodEnv>,
    kind: Kind,
    idx: usize,
    container: Container,
    restart: impl Fn(i32) -> bool,
) -> Option<i32> {
    if let PodRuntime::Container(rt) = &env.ctx.config.pods {
        return supervise_container(env.clone(), rt.clone(), kind, idx, container, restart).await;
    }
    let mut consecutive_failures: u32 = 0;
    let mut first = true;
    loop {
        let image = container.image.clone().unwrap_or_default();
        let Some(entry) = env.ctx.config.image_map.resolve(&image).cloned() else {
            let msg = format!(
                "image {image:?} is not in the devcluster image map ({}); add an entry whose `image` pattern matches it",
                env.ctx.config.image_map.describe_sources()
            );
            env.rep.update(kind, idx, |c| {
                c.state = RunState::waiting("ErrImagePull", Some(msg))
            });
            if wait_or_cancel(&env.cancel, Duration::from_secs(5)).await {
                return None;
            }
            continue;
        };
        let refs = match fetch_refs(&env.ctx, &env.facts.namespace, &container).await {
            Ok(r) => r,
            Err(msg) => {
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting("CreateContainerConfigError", Some(msg))
                });
                if wait_or_cancel(&env.cancel, Duration::from_secs(2)).await {
                    return None;
                }
                continue;
            }
        };
        let mut mounts: Vec<(String, PathBuf)> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter_map(|m| {
                let base = env.volumes.get(&m.name)?;
                let dir = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    Some(sub) => base.join(sub),
                    None => base.clone(),
                };
                Some((m.mount_path.clone(), dir))
            })
            .collect();
        if let Some(dir) = &env.service_account_dir
            && !mounts
                .iter()
                .any(|(m, _)| m.trim_end_matches('/') == crate::service_account::MOUNT_PATH)
        {
            mounts.push((crate::service_account::MOUNT_PATH.to_string(), dir.clone()));
        }
        let paths = PathMap::new(mounts);
        let spec = match build_process(&container, &entry, &env.facts, &refs, &env.base_env, &paths)
        {
            Ok(s) => s,
            Err(p) => {
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting(p.reason, Some(p.message))
                });
                if wait_or_cancel(&env.cancel, Duration::from_secs(2)).await {
                    return None;
                }
                continue;
            }
        };
        let cwd = working_dir(&env.pod_dir, spec.working_dir.as_deref()).await;
        let log_path = env.logs_dir.join(format!("{}.log", container.name));
        if !first {
            rotate_log(&log_path).await;
        }
        let sink = match LogSink::open(&log_path).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "opening container log failed");
                if wait_or_cancel(&env.cancel, Duration::from_secs(2)).await {
                    return None;
                }
                continue;
            }
        };
        let image_id = format!(
            "devcluster-image-map://{}#{}",
            entry.source.display(),
            entry.image
        );
        if !first {
            env.rep.update(kind, idx, |c| c.restart_count += 1);
        }
        first = false;
        let started_at = Timestamp::now();
        let began = Instant::now();
        let outcome = match spawn(&spec, &cwd, &sink).await {
            Ok(running) => {
                run_instance(
                    &env, kind, idx, &container, &spec, &cwd, running, started_at, image_id, None,
                )
                .await
            }
            Err(e) => {
                sink.note(&format!("devcluster: {e}")).await;
                Some(start_error(&e))
            }
        };
        let terminated = outcome?;
        if let ControlFlow::Break(done) = after_exit(
            &env,
            kind,
            idx,
            &container.name,
            terminated,
            &restart,
            began,
            &mut consecutive_failures,
            false,
        )
        .await
        {
            return done;
        }
    }
}

/// [`supervise`] for container mode: pulls the image, creates the container with podman and
/// runs it attached, restarting it per `restart(exit_code)` with backoff.
async fn supervise_container(
    env: Arc<PodEnv>,
    rt: ContainerRuntime,
    kind: Kind,
    idx: usize,
    container: Container,
    restart: impl Fn(i32) -> bool,
) -> Option<i32> {
    let image = container.image.clone().unwrap_or_default();
    let policy = crate::container::pull_policy(&image, container.image_pull_policy.as_deref());
    let name = crate::container::container_name(
        &env.facts.namespace,
        &env.facts.name,
        &container.name,
        &env.facts.uid,
    );
    let api_server = env
        .ctx
        .config
        .api_access
        .as_ref()
        .and_then(|a| api_host_port(&a.server));
    let state_dir = env.ctx.config.work_dir.to_string_lossy().into_owned();
    let backoff = |n: u32| {
        backoff_delay(
            env.ctx.config.restart_backoff_base,
            env.ctx.config.restart_backoff_max,
            n,
        )
    };
    let mut consecutive_failures: u32 = 0;
    let mut pull_failures: u32 = 0;
    let mut first = true;
    loop {
        let authfile = pull_authfile(&env, &container.name);
        let info = match crate::container::ensure_image(&rt, &image, policy, authfile).await {
            Ok(info) => {
                if pull_failures > 0 || first {
                    pod_event(
                        &env,
                        &container.name,
                        false,
                        "Pulled",
                        &format!("Container image {image:?} is present ({policy})"),
                    )
                    .await;
                }
                pull_failures = 0;
                info
            }
            Err(p) => {
                pod_event(&env, &container.name, true, "Failed", &p.message).await;
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting(p.reason, Some(p.message.clone()))
                });
                if wait_or_cancel(&env.cancel, Duration::from_secs(1)).await {
                    return None;
                }
                let delay = backoff(pull_failures);
                pull_failures += 1;
                let msg = format!("Back-off pulling image {image:?}: {}", p.message);
                pod_event(&env, &container.name, true, "BackOff", &msg).await;
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting("ImagePullBackOff", Some(msg))
                });
                if wait_or_cancel(&env.cancel, delay).await {
                    return None;
                }
                continue;
            }
        };
        let refs = match fetch_refs(&env.ctx, &env.facts.namespace, &container).await {
            Ok(r) => r,
            Err(msg) => {
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting("CreateContainerConfigError", Some(msg))
                });
                if wait_or_cancel(&env.cancel, Duration::from_secs(2)).await {
                    return None;
                }
                continue;
            }
        };
        let mut mounts: Vec<Mount> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter_map(|m| {
                let base = env.volumes.get(&m.name)?;
                let host_path = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    Some(sub) => base.join(sub),
                    None => base.clone(),
                };
                Some(Mount {
                    container_path: m.mount_path.clone(),
                    host_path,
                    read_only: m.read_only == Some(true) || env.read_only_volumes.contains(&m.name),
                })
            })
            .collect();
        if let Some(dir) = &env.service_account_dir
            && !mounts.iter().any(|m| {
                m.container_path.trim_end_matches('/') == crate::service_account::MOUNT_PATH
            })
        {
            mounts.push(Mount {
                container_path: crate::service_account::MOUNT_PATH.to_string(),
                host_path: dir.clone(),
                read_only: true,
            });
        }
        let input = crate::container::CreateInput {
            name: &name,
            image: &image,
            image_info: &info,
            container: &container,
            pod_security: env.pod_security.as_ref(),
            facts: &env.facts,
            refs: &refs,
            mounts: &mounts,
            extra_env: &env.ctx.config.extra_env,
            api_server: api_server.clone(),
            grace: env.grace,
            state_dir: &state_dir,
        };
        let created = match crate::container::create_spec(&input) {
            Ok(spec) => {
                // A former instance of this container (or of a runner that died) goes first.
                crate::container::remove(&rt, &name).await;
                crate::container::create(&rt, &spec).await
            }
            Err(p) => Err(p),
        };
        let id = match created {
            Ok(id) => id,
            Err(p) => {
                pod_event(
                    &env,
                    &container.name,
                    true,
                    "Failed",
                    &format!("Error: {}", p.message),
                )
                .await;
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting(p.reason, Some(p.message))
                });
                let delay = backoff(consecutive_failures).max(Duration::from_secs(2));
                consecutive_failures += 1;
                if wait_or_cancel(&env.cancel, delay).await {
                    return None;
                }
                continue;
            }
        };
        let log_path = env.logs_dir.join(format!("{}.log", container.name));
        if !first {
            rotate_log(&log_path).await;
        }
        let sink = match LogSink::open(&log_path).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "opening container log failed");
                crate::container::remove(&rt, &name).await;
                if wait_or_cancel(&env.cancel, Duration::from_secs(2)).await {
                    return None;
                }
                continue;
            }
        };
        if !first {
            env.rep.update(kind, idx, |c| c.restart_count += 1);
        }
        first = false;
        // The podman client stays attached: its output is the container's log, its exit the
        // container's exit.
        let stdin = container.stdin == Some(true);
        let mut start_args = vec!["start".into(), "--attach".into()];
        if stdin {
            start_args.push("--interactive".into());
        }
        start_args.push(name.clone());
        let attach = ProcessSpec {
            program: rt.podman.clone(),
            args: start_args,
            env: std::env::vars()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "PATH" | "HOME" | "XDG_RUNTIME_DIR" | "CONTAINERS_CONF"
                    )
                })
                .collect(),
            working_dir: None,
            // `kubectl attach -i` writes to the attached client's stdin, which podman passes on.
            stdin,
            exec_prefix: vec![
                rt.podman.clone(),
                "exec".into(),
                "--interactive".into(),
                name.clone(),
            ],
        };
        let cwd = env.pod_dir.join("home");
        let image_id = format!("{image}@{}", info.id);
        let started_at = Timestamp::now();
        let began = Instant::now();
        let outcome = match spawn(&attach, &cwd, &sink).await {
            Ok(running) => {
                run_instance(
                    &env,
                    kind,
                    idx,
                    &container,
                    &attach,
                    &cwd,
                    running,
                    started_at,
                    image_id,
                    Some((&rt, &name, id)),
                )
                .await
            }
            Err(e) => {
                crate::container::remove(&rt, &name).await;
                sink.note(&format!("devcluster: {e}")).await;
                Some(start_error(&e))
            }
        };
        let terminated = outcome?;
        if let ControlFlow::Break(done) = after_exit(
            &env,
            kind,
            idx,
            &container.name,
            terminated,
            &restart,
            began,
            &mut consecutive_failures,
            true,
        )
        .await
        {
            return done;
        }
    }
}

/// The pod's image pull Secrets as an auth file for podman (read again before every pull, as
/// the kubelet does), or None when it has none. A missing or unusable Secret gets a warning
/// Event and the pull goes on with the rest, as on a cluster.
async fn pull_authfile(env: &PodEnv, container: &str) -> Option<PathBuf> {
    if env.image_pull_secrets.is_empty() {
        return None;
    }
    let api: Api<Secret> = Api::namespaced(env.ctx.client.clone(), &env.facts.namespace);
    let mut secrets = Vec::new();
    let mut problems = Vec::new();
    for name in &env.image_pull_secrets {
        match api.get_opt(name).await {
            Ok(Some(s)) => secrets.push(s),
            Ok(None) => problems.push(format!("image pull secret {name:?} does not exist")),
            Err(e) => problems.push(format!("reading image pull secret {name:?}: {e}")),
        }
    }
    let (auths, unusable) = crate::container::pull_auths(&secrets);
    problems.extend(unusable);
    if !problems.is_empty() {
        let message = format!(
            "{}; pulling the image without them may fail",
            problems.join("; ")
        );
        pod_event(
            env,
            container,
            true,
            "FailedToRetrieveImagePullSecret",
            &message,
        )
        .await;
    }
    let path = env.pod_dir.join("registry-auth.json");
    match write_file(&path, auths.to_string().as_bytes(), Some(0o600)) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!(error = %e, "writing the registry auth file failed");
            None
        }
    }
}

/// The state of a container whose process could not be started (`StartError`, exit 128).
fn start_error(e: &dyn std::fmt::Display) -> RunState {
    RunState::Terminated {
        exit_code: 128,
        signal: None,
        reason: "StartError".into(),
        message: Some(e.to_string()),
        started_at: None,
        finished_at: Timestamp::now(),
        container_id: None,
    }
}

/// What follows a container run that ended as `terminated`, in both pod runtimes. When
/// `restart(exit code)` says no, the state is final and supervision ends with that code.
/// Otherwise the container waits in `CrashLoopBackOff` (with a `BackOff` Event when `event`)
/// for its backoff, counted from zero again after a run longer than twice the longest backoff;
/// `Break(None)` when the pod is stopped meanwhile.
#[allow(clippy::too_many_arguments)]
async fn after_exit(
    env: &PodEnv,
    kind: Kind,
    idx: usize,
    container: &str,
    terminated: RunState,
    restart: &impl Fn(i32) -> bool,
    began: Instant,
    consecutive_failures: &mut u32,
    event: bool,
) -> ControlFlow<Option<i32>> {
    let code = match &terminated {
        RunState::Terminated { exit_code, .. } => *exit_code,
        _ => 255,
    };
    if !restart(code) {
        env.rep.update(kind, idx, |c| {
            c.state = terminated;
            c.ready = false;
        });
        return ControlFlow::Break(Some(code));
    }
    let config = &env.ctx.config;
    if began.elapsed() > config.restart_backoff_max * 2 {
        *consecutive_failures = 0;
    }
    let delay = backoff_delay(
        config.restart_backoff_base,
        config.restart_backoff_max,
        *consecutive_failures,
    );
    *consecutive_failures += 1;
    let msg = format!(
        "back-off {delay:?} restarting failed container={container} pod={}",
        env.facts.name
    );
    if event {
        pod_event(env, container, true, "BackOff", &msg).await;
    }
    env.rep.update(kind, idx, |c| {
        c.last_state = Some(terminated);
        c.state = RunState::waiting("CrashLoopBackOff", Some(msg));
        c.ready = false;
    });
    if wait_or_cancel(&env.cancel, delay).await {
        return ControlFlow::Break(None);
    }
    ControlFlow::Continue(())
}

/// Host and port of `https://HOST:PORT`, for `KUBERNETES_SERVICE_HOST/PORT`.
fn api_host_port(server: &str) -> Option<(String, u16)> {
    let rest = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    Some((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port.parse().ok()?,
    ))
}

/// An Event about one of the pod's containers, as the kubelet writes them.
async fn pod_event(env: &PodEnv, container: &str, warning: bool, reason: &str, message: &str) {
    use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    let now = Time(Timestamp::now());
    let ns = env.facts.namespace.clone();
    let ev = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", env.facts.name)),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(env.facts.name.clone()),
            namespace: Some(ns.clone()),
            uid: Some(env.facts.uid.clone()),
            field_path: Some(format!("spec.containers{{{container}}}")),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(crate::NODE_NAME.into()),
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(env.ctx.client.clone(), &ns);
    if let Err(e) = api.create(&kube::api::PostParams::default(), &ev).await {
        tracing::debug!(error = %e, "pod event not written");
    }
}

/// Runs a started instance until it exits, fails liveness, or the pod stops.
/// Returns the Terminated state, or None when the pod was stopped.
#[allow(clippy::too_many_arguments)]
async fn run_instance(
    env: &Arc<PodEnv>,
    kind: Kind,
    idx: usize,
    container: &Container,
    spec: &ProcessSpec,
    cwd: &Path,
    mut running: Running,
    started_at: Timestamp,
    image_id: String,
    podman: Option<(&ContainerRuntime, &str, String)>,
) -> Option<RunState> {
    let container_id = match &podman {
        Some((_, _, id)) => Some(format!("podman://{id}")),
        None => running.pid().map(|p| format!("devcluster://{p}")),
    };
    let has_startup = container.startup_probe.is_some() && kind == Kind::Main;
    let needs_ready_check = kind == Kind::Main
        && (container.readiness_probe.is_some()
            || (env.ctx.config.implicit_port_readiness && first_tcp_port(container).is_some()));
    // In container mode the spawned process is the podman client; the container's own main
    // process is what `kubectl top` and the HPA measure.
    let pid = match &podman {
        Some((rt, name, _)) => crate::container::main_pid(rt, name).await,
        None => running.pid().and_then(|p| i32::try_from(p).ok()),
    };
    // Lets `kubectl exec` run commands with this container's env while it runs.
    let _exec_entry = env.ctx.config.running.register(
        &env.facts.namespace,
        &env.facts.name,
        &container.name,
        crate::running::RunningProcess {
            env: spec.env.clone(),
            cwd: cwd.to_path_buf(),
            pid,
            stdin: running
                .take_stdin()
                .map(|s| std::sync::Arc::new(tokio::sync::Mutex::new(Some(s)))),
            stdin_once: container.stdin_once == Some(true),
            argv_prefix: spec.exec_prefix.clone(),
        },
    );
    // Running once exec, attach and top can find it.
    env.rep.update(kind, idx, |c| {
        c.state = RunState::Running { started_at };
        c.container_id = container_id.clone();
        c.image_id = image_id;
        c.started = !has_startup;
        c.ready = kind == Kind::Main && !has_startup && !needs_ready_check;
    });
    let live_fail = Arc::new(Notify::new());
    let probes = if kind == Kind::Main {
        let ip = env.facts.pod_ip.unwrap_or(Ipv4Addr::LOCALHOST);
        Some(tokio::spawn(probe_loop(
            env.rep.clone(),
            idx,
            container.clone(),
            ip,
            spec.clone(),
            cwd.to_path_buf(),
            live_fail.clone(),
            env.ctx.config.implicit_port_readiness,
        )))
    } else {
        None
    };
    let exited = tokio::select! {
        st = running.exited() => Some(st),
        _ = env.cancel.cancelled() => None,
        _ = live_fail.notified() => None,
    };
    if let Some(p) = &probes {
        p.abort();
    }
    env.rep.update(kind, idx, |c| c.ready = false);
    let cancelled = env.cancel.is_cancelled();
    let (status, reason_override) = match exited {
        Some(st) => {
            running.cleanup().await;
            (st, None)
        }
        None => {
            if cancelled && env.deleted.load(Ordering::SeqCst) {
                // Give endpoints and proxies a moment to stop routing here.
                tokio::time::sleep(env.ctx.config.termination_drain).await;
            }
            let st = match &podman {
                Some((rt, name, _)) => {
                    // podman stop signals the container; `podman start --attach` then ends.
                    crate::container::stop(rt, name, env.grace).await;
                    running.stop(Duration::from_secs(5)).await
                }
                None => running.stop(env.grace).await,
            };
            (
                st,
                (!cancelled).then_some("container killed after failing its liveness probe"),
            )
        }
    };
    let exited_as = match &podman {
        Some((rt, name, _)) => {
            let state = crate::container::exit_state(rt, name).await;
            crate::container::remove(rt, name).await;
            state
        }
        None => None,
    };
    if cancelled {
        return None;
    }
    let (mut exit_code, signal) = exit_code_of(&status);
    let mut reason = if exit_code == 0 { "Completed" } else { "Error" };
    let mut message = reason_override.map(str::to_string);
    if let Some(state) = exited_as {
        exit_code = state.exit_code;
        reason = if exit_code == 0 { "Completed" } else { "Error" };
        if state.oom_killed {
            reason = "OOMKilled";
        } else if !state.started || !state.error.is_empty() {
            // The runtime could not start the command (as a real kubelet reports it).
            reason = "StartError";
            exit_code = 128;
            // podman's own message (its last `Error:` line in the log) says why.
            let log = env.logs_dir.join(format!("{}.log", container.name));
            let text = tokio::fs::read_to_string(&log).await.unwrap_or_default();
            message = Some(
                text.lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("Error: "))
                    .map(str::to_string)
                    .unwrap_or(state.error),
            );
        }
    }
    Some(RunState::Terminated {
        exit_code,
        signal,
        reason: reason.to_string(),
        message,
        started_at: Some(started_at),
        finished_at: Timestamp::now(),
        container_id,
    })
}

fn first_tcp_port(c: &Container) -> Option<u16> {
    c.ports
        .iter()
        .flatten()
        .find(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .and_then(|p| u16::try_from(p.container_port).ok())
}

#[allow(clippy::too_many_arguments)]
async fn probe_loop(
    rep: Arc<Reporter>,
    idx: usize,
    container: Container,
    ip: Ipv4Addr,
    spec: ProcessSpec,
    cwd: PathBuf,
    live_fail: Arc<Notify>,
    implicit_port_readiness: bool,
) {
    if let Some(p) = &container.startup_probe {
        let t = Timing::of(p);
        tokio::time::sleep(t.initial_delay).await;
        let mut failures = 0;
        loop {
            match probe_once(p, &container, ip, Some(&spec), &cwd).await {
                Ok(()) => break,
                Err(_) => {
                    failures += 1;
                    if failures >= t.failure_threshold {
                        live_fail.notify_one();
                        return;
                    }
                }
            }
            tokio::time::sleep(t.period).await;
        }
        let has_ready_check = container.readiness_probe.is_some()
            || (implicit_port_readiness && first_tcp_port(&container).is_some());
        rep.update(Kind::Main, idx, |c| {
            c.started = true;
            c.ready = !has_ready_check;
        });
    }
    let readiness = async {
        if let Some(p) = &container.readiness_probe {
            let t = Timing::of(p);
            tokio::time::sleep(t.initial_delay).await;
            let (mut ok, mut bad) = (0u32, 0u32);
            loop {
                match probe_once(p, &container, ip, Some(&spec), &cwd).await {
                    Ok(()) => {
                        ok += 1;
                        bad = 0;
                        if ok >= t.success_threshold {
                            rep.update(Kind::Main, idx, |c| c.ready = true);
                        }
                    }
                    Err(_) => {
                        bad += 1;
                        ok = 0;
                        if bad >= t.failure_threshold {
                            rep.update(Kind::Main, idx, |c| c.ready = false);
                        }
                    }
                }
                tokio::time::sleep(t.period).await;
            }
        } else if implicit_port_readiness && let Some(port) = first_tcp_port(&container) {
            // No readiness probe: ready once the declared port accepts connections.
            let addr = std::net::SocketAddr::from((ip, port));
            for _ in 0..6000 {
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    rep.update(Kind::Main, idx, |c| c.ready = true);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Never ready within 10 minutes: stay not ready like a failing probe.
        }
    };
    let liveness = async {
        if let Some(p) = &container.liveness_probe {
            let t = Timing::of(p);
            tokio::time::sleep(t.initial_delay).await;
            let mut bad = 0u32;
            loop {
                match probe_once(p, &container, ip, Some(&spec), &cwd).await {
                    Ok(()) => bad = 0,
                    Err(e) => {
                        bad += 1;
                        if bad >= t.failure_threshold {
                            tracing::info!(container = %container.name, error = %e, "liveness probe failed; restarting");
                            live_fail.notify_one();
                            return;
                        }
                    }
                }
                tokio::time::sleep(t.period).await;
            }
        }
    };
    tokio::join!(readiness, liveness);
}

/// Sleeps for `d`; true when cancelled first.
async fn wait_or_cancel(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// The folder a container runs in: the mapped workingDir when it exists on
/// this machine, else the same path under the pod's private root; the pod's
/// home folder when none is set.
async fn working_dir(pod_dir: &Path, wanted: Option<&str>) -> PathBuf {
    let Some(w) = wanted.filter(|w| !w.is_empty()) else {
        return pod_dir.join("home");
    };
    let p = PathBuf::from(w);
    if p.is_absolute() && tokio::fs::metadata(&p).await.is_ok_and(|m| m.is_dir()) {
        return p;
    }
    let under_root = pod_dir.join("rootfs").join(w.trim_start_matches('/'));
    let _ = tokio::fs::create_dir_all(&under_root).await;
    under_root
}

/// Reads the ConfigMaps and Secrets a container's env refers to.
async fn fetch_refs(ctx: &Ctx, ns: &str, c: &Container) -> Result<RefData, String> {
    let mut cms: BTreeMap<String, ()> = BTreeMap::new();
    let mut secrets: BTreeMap<String, ()> = BTreeMap::new();
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            cms.insert(r.name.clone(), ());
        }
        if let Some(r) = &from.secret_ref {
            secrets.insert(r.name.clone(), ());
        }
    }
    for v in c.env.iter().flatten() {
        if let Some(f) = &v.value_from {
            if let Some(r) = &f.config_map_key_ref {
                cms.insert(r.name.clone(), ());
            }
            if let Some(r) = &f.secret_key_ref {
                secrets.insert(r.name.clone(), ());
            }
        }
    }
    let mut out = RefData::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    for name in cms.keys() {
        if let Some(cm) = cm_api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading configmap {name:?}: {e}"))?
        {
            out.config_maps.insert(name.clone(), cm);
        }
    }
    let s_api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    for name in secrets.keys() {
        if let Some(s) = s_api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading secret {name:?}: {e}"))?
        {
            out.secrets.insert(name.clone(), s);
        }
    }
    Ok(out)
}

/// Writes a file with `mode` (default 0644): created with it, so a secret is never readable by
/// others in between, and set again when the file was already there.
fn write_file(path: &Path, data: &[u8], mode: Option<i32>) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let mode = mode.unwrap_or(0o644) as u32 & 0o777;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .and_then(|mut f| f.write_all(data))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Safe relative file name inside a volume (no `..`, no absolute paths).
fn safe_rel(p: &str) -> Option<&str> {
    let ok = !p.is_empty() && !p.starts_with('/') && !p.split('/').any(|s| s == "..");
    ok.then_some(p)
}

/// Writes key/value files of a ConfigMap/Secret volume.
fn materialise(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    default_mode: Option<i32>,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let value = data
                    .get(&item.key)
                    .ok_or_else(|| format!("key {:?} not found", item.key))?;
                if let Some(rel) = safe_rel(&item.path) {
                    write_file(&dir.join(rel), value, item.mode.or(default_mode))?;
                }
            }
        }
        _ => {
            for (k, v) in data {
                if let Some(rel) = safe_rel(k) {
                    write_file(&dir.join(rel), v, default_mode)?;
                }
            }
        }
    }
    Ok(())
}

/// Creates one folder per volume and fills ConfigMap, Secret and downward-API volumes.
async fn prepare_volumes(
    ctx: &Ctx,
    ns: &str,
    volumes: &[Volume],
    pod_dir: &Path,
    facts: &PodFacts,
) -> Result<HashMap<String, PathBuf>, String> {
    let mut out = HashMap::new();
    for v in volumes {
        let dir = pod_dir.join("volumes").join(&v.name);
        if let Some(h) = &v.host_path {
            // hostPath is the one volume that is the host's own folder.
            out.insert(v.name.clone(), PathBuf::from(&h.path));
            continue;
        }
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Some(cm) = &v.config_map {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
            match api.get_opt(&cm.name).await.map_err(|e| e.to_string())? {
                Some(obj) => {
                    let mut data: BTreeMap<String, Vec<u8>> = obj
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    for (k, b) in obj.binary_data.unwrap_or_default() {
                        data.insert(k, b.0);
                    }
                    materialise(&dir, &data, cm.items.as_deref(), cm.default_mode)
                        .map_err(|e| format!("configmap volume {:?}: {e}", v.name))?;
                }
                None if cm.optional == Some(true) => {}
                None => return Err(format!("configmap {:?} not found", cm.name)),
            }
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
            match api.get_opt(&name).await.map_err(|e| e.to_string())? {
                Some(obj) => {
                    let mut data: BTreeMap<String, Vec<u8>> = obj
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect();
                    for (k, sv) in obj.string_data.unwrap_or_default() {
                        data.insert(k, sv.into_bytes());
                    }
                    materialise(&dir, &data, s.items.as_deref(), s.default_mode)
                        .map_err(|e| format!("secret volume {:?}: {e}", v.name))?;
                }
                None if s.optional == Some(true) => {}
                None => return Err(format!("secret {name:?} not found")),
            }
        } else if let Some(d) = &v.downward_api {
            for item in d.items.iter().flatten() {
                let value = item
                    .field_ref
                    .as_ref()
                    .and_then(|f| crate::spec::field_value(f, facts))
                    .unwrap_or_default();
                if let Some(rel) = safe_rel(&item.path) {
                    write_file(
                        &dir.join(rel),
                        value.as_bytes(),
                        item.mode.or(d.default_mode),
                    )?;
                }
            }
        } else if v.empty_dir.is_some() {
            if matches!(ctx.config.pods, PodRuntime::Container(_)) {
                // As the kubelet makes it: writable by whatever user the image runs as.
                use std::os::unix::fs::PermissionsExt;
                tokio::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                    .await
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
            }
        } else {
            tracing::warn!(volume = %v.name, "volume type not supported by devcluster; using an empty folder");
        }
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
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

    #[test]
    fn volume_files_items_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data: BTreeMap<String, Vec<u8>> = [
            ("a".to_string(), b"A".to_vec()),
            ("b".to_string(), b"B".to_vec()),
        ]
        .into();
        materialise(&dir.path().join("all"), &data, None, Some(0o600)).unwrap();
        assert_eq!(std::fs::read(dir.path().join("all/a")).unwrap(), b"A");
        let mode = std::fs::metadata(dir.path().join("all/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let items = vec![k8s_openapi::api::core::v1::KeyToPath {
            key: "b".into(),
            path: "sub/bee".into(),
            mode: None,
        }];
        materialise(&dir.path().join("some"), &data, Some(&items), None).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("some/sub/bee")).unwrap(),
            b"B"
        );
        assert!(!dir.path().join("some/a").exists());
        let bad = vec![k8s_openapi::api::core::v1::KeyToPath {
            key: "zz".into(),
            path: "x".into(),
            mode: None,
        }];
        assert!(materialise(&dir.path().join("bad"), &data, Some(&bad), None).is_err());
        assert_eq!(safe_rel("../x"), None);
        assert_eq!(safe_rel("/x"), None);
    }

    #[tokio::test]
    async fn working_dir_falls_back_under_pod_root() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(working_dir(dir.path(), None).await, dir.path().join("home"));
        let existing = dir.path().to_string_lossy().into_owned();
        assert_eq!(working_dir(dir.path(), Some(&existing)).await, dir.path());
        let w = working_dir(dir.path(), Some("/app/srv")).await;
        assert_eq!(w, dir.path().join("rootfs/app/srv"));
        assert!(w.is_dir());
    }
}
