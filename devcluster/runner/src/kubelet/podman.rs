//! Supervising a container in container mode (`--pods container`): pull its image with the
//! pod's pull Secrets, create it with podman and run it attached, restarting it with backoff.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::jiff::Timestamp;

use crate::container::{ContainerRuntime, Mount};
use crate::podstatus::RunState;
use crate::process::{LogSink, rotate_log, spawn};
use crate::spec::ProcessSpec;

use super::instance::{after_exit, run_instance, start_error, wait_or_cancel};
use super::pull::{pull_back_off, pull_secret_auths};
use super::status::pod_event;
use super::volumes::{fetch_refs, write_file};
use super::{Kind, PodEnv, backoff_delay};

/// [`supervise`](super::supervise::supervise) for container mode: pulls the image, creates the
/// container with podman and runs it attached, restarting it per `restart(exit_code)` with backoff.
pub(super) async fn supervise_container(
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
                if pull_back_off(
                    &env,
                    kind,
                    idx,
                    &container.name,
                    &image,
                    p,
                    &mut pull_failures,
                )
                .await
                {
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
        // As a kubelet reports it: the repository and the manifest digest it was pulled by.
        let image_id = if info.digest.is_empty() {
            format!("{image}@{}", info.id)
        } else {
            format!("{}@{}", crate::image_cache::repository(&image), info.digest)
        };
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

/// The pod's image pull Secrets as an auth file for podman, or None when it has none.
async fn pull_authfile(env: &PodEnv, container: &str) -> Option<PathBuf> {
    let auths = pull_secret_auths(env, container).await?;
    let path = env.pod_dir.join("registry-auth.json");
    match write_file(&path, auths.to_string().as_bytes(), Some(0o600)) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!(error = %e, "writing the registry auth file failed");
            None
        }
    }
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
