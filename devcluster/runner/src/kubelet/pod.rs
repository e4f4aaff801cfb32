//! One pod's life: its folders, environment and volumes, then its init containers in order
//! and its containers side by side, until the pod is deleted or the runner stops.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::ctx::{Ctx, ns_name};
use crate::podstatus::{ContainerRt, PodRt, RunState};
use crate::spec::{BaseEnv, PodFacts};

use super::status::status_writer;
use super::supervise::supervise;
use super::volumes::prepare_volumes;
use super::{Kind, PodEnv, Reporter, finalize_delete};

pub(super) async fn run_pod(
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
            .unwrap_or_else(|| ctx.config.node_name().to_string()),
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
            &pod,
            spec.volumes.as_deref().unwrap_or(&[]),
            &pod_dir,
            &facts,
        )
        .await
        {
            Ok(v) => match &ctx.config.api_access {
                Some(access) => {
                    // A node may not read ServiceAccounts: the API server's admission already
                    // decided, by adding the token volume or not.
                    let automount =
                        matches!(ctx.config.mode, crate::Mode::NodeAgent(_)).then(|| {
                            spec.automount_service_account_token != Some(false)
                                && crate::service_account::has_projected_token(&pod)
                        });
                    crate::service_account::mount(&ctx.client, access, &pod, &pod_dir, automount)
                        .await
                        .map(|kubeconfig| (v, kubeconfig))
                }
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
