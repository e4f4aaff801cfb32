//! Supervising a container run as a local process from the image map (container mode goes
//! to `podman`): start it, run it until it ends, and restart it as its restart policy says.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::jiff::Timestamp;

use crate::container::PodRuntime;
use crate::podstatus::RunState;
use crate::process::{LogSink, rotate_log, spawn};
use crate::spec::{PathMap, build_process};

use super::instance::{after_exit, run_instance, start_error, wait_or_cancel};
use super::podman::supervise_container;
use super::volumes::{fetch_refs, working_dir};
use super::{Kind, PodEnv};

/// Runs one container, restarting it per `restart(exit_code)` with backoff.
/// Returns the final exit code, or None when cancelled.
pub(super) async fn supervise(
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
