//! Supervising a container run as a local process from the image map, or from a registry image
//! built on a mapped base (see [`crate::image_cache`]; container mode goes to `podman`): start
//! it, run it until it ends, and restart it as its restart policy says.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::jiff::Timestamp;

use crate::container::{PodRuntime, Problem, is_loopback_registry};
use crate::image_cache::{
    ENV_REGISTRY_CA_FILE, copy_tree, image_mounts, registry_host, repository, resolve_base,
};
use crate::image_map::ImageEntry;
use crate::podstatus::RunState;
use crate::process::{LogSink, rotate_log, spawn};
use crate::spec::{PathMap, build_process};

use super::instance::{after_exit, run_instance, start_error, wait_or_cancel};
use super::podman::supervise_container;
use super::pull::{pull_back_off, pull_secret_auths};
use super::status::pod_event;
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
    let mut pull_failures: u32 = 0;
    let mut first = true;
    loop {
        let image = container.image.clone().unwrap_or_default();
        let (entry, image_root, image_id) = match crate::image_cache::resolve_local(
            &env.ctx.config.image_map,
            &image,
        ) {
            Some(entry) => {
                let id = format!(
                    "devcluster-image-map://{}#{}",
                    entry.source.display(),
                    entry.image
                );
                (entry.clone(), None, id)
            }
            None if registry_host(&image).is_some() => {
                let announce = first || pull_failures > 0;
                // A pod deleted during a long pull stops waiting for it (the cache cleans up).
                let pulled = tokio::select! {
                    r = pull_registry_image(&env, &container, &image, announce) => r,
                    _ = env.cancel.cancelled() => return None,
                };
                match pulled {
                    Ok((entry, root, id)) => {
                        pull_failures = 0;
                        (entry, Some(root), id)
                    }
                    Err(p) => {
                        let name = &container.name;
                        if pull_back_off(&env, kind, idx, name, &image, p, &mut pull_failures).await
                        {
                            return None;
                        }
                        continue;
                    }
                }
            }
            None => {
                let msg = format!(
                    "image {image:?} is not in the devcluster image map ({}); add an entry whose `image` pattern matches it, or name an image in a registry (with its host) built on an image the map has",
                    env.ctx.config.image_map.describe_sources()
                );
                env.rep.update(kind, idx, |c| {
                    c.state = RunState::waiting("ErrImagePull", Some(msg))
                });
                if wait_or_cancel(&env.cancel, Duration::from_secs(5)).await {
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
        if let Some(root) = &image_root {
            let image_dirs = match container_copy(&env, &container.name, root).await {
                Ok(dirs) => dirs,
                Err(msg) => {
                    env.rep.update(kind, idx, |c| {
                        c.state = RunState::waiting("CreateContainerError", Some(msg))
                    });
                    if wait_or_cancel(&env.cancel, Duration::from_secs(2)).await {
                        return None;
                    }
                    continue;
                }
            };
            // A volume mounted at the same path hides the image's folder, as on a cluster.
            for (path, dir) in image_dirs {
                if !mounts.iter().any(|(m, _)| m.trim_end_matches('/') == path) {
                    mounts.push((path, dir));
                }
            }
        }
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

/// Process mode's pull of a registry image that is not in the image map (see
/// [`crate::image_cache`]): its added layers unpacked (or found in the cache), its base resolved
/// through the image map. The base's entry, the unpacked tree and the image ID
/// (`REPOSITORY@sha256:...`, the manifest digest). A `Pulled` Event when `announce`.
async fn pull_registry_image(
    env: &PodEnv,
    container: &Container,
    image: &str,
    announce: bool,
) -> Result<(ImageEntry, PathBuf, String), Problem> {
    let policy = crate::container::pull_policy(image, container.image_pull_policy.as_deref());
    let started = Instant::now();
    let options = registry_options(env, &container.name, image);
    let map = &env.ctx.config.image_map;
    let pulled = env
        .ctx
        .config
        .image_cache
        .pull(image, policy, options)
        .await
        .map_err(|mut p| {
            // Say why it went to a registry at all: a missing map entry is the usual mistake.
            p.message.push_str(&format!(
                " (the image is not in the devcluster image map ({}), so it is pulled from its registry)",
                map.describe_sources()
            ));
            p
        })?;
    let entry = resolve_base(map, image, &pulled.image.base)?.clone();
    if announce {
        let digest = &pulled.image.digest;
        let message = if pulled.unpacked {
            format!(
                "Successfully pulled image {image:?} in {:.1}s: {digest}, {} added layer(s) unpacked, running as its base {:?} (image map entry {:?})",
                started.elapsed().as_secs_f64(),
                pulled.image.layers,
                pulled.image.base,
                entry.image
            )
        } else {
            format!("Container image {image:?} already present on machine: {digest}")
        };
        pod_event(env, &container.name, false, "Pulled", &message).await;
    }
    let id = format!("{}@{}", repository(image), pulled.image.digest);
    Ok((entry, pulled.image.rootfs, id))
}

/// How to reach the registry of `image`: plain HTTP when it is on this machine (as container
/// mode's `--tls-verify=false`), the CA file env [`ENV_REGISTRY_CA_FILE`] names, and the pod's
/// image pull Secrets.
async fn registry_options(
    env: &PodEnv,
    container: &str,
    image: &str,
) -> Result<kubeless_oci::RegistryOptions, Problem> {
    let ca_pem = match std::env::var_os(ENV_REGISTRY_CA_FILE).filter(|p| !p.is_empty()) {
        Some(path) => Some(tokio::fs::read(&path).await.map_err(|e| Problem {
            reason: "ErrImagePull",
            message: format!(
                "reading the registry CA file {} (env {ENV_REGISTRY_CA_FILE}): {e}",
                Path::new(&path).display()
            ),
        })?),
        None => None,
    };
    Ok(kubeless_oci::RegistryOptions {
        insecure: is_loopback_registry(image),
        ca_pem,
        docker_config: pull_secret_auths(env, container)
            .await
            .map(|auths| auths.to_string().into_bytes()),
    })
}

/// A fresh writable copy of an unpacked image for one start of a container (a restarted
/// container starts from the image again, as on a cluster), and the mount paths its top-level
/// folders stand for.
async fn container_copy(
    env: &PodEnv,
    container: &str,
    root: &Path,
) -> Result<Vec<(String, PathBuf)>, String> {
    let dest = env.pod_dir.join("images").join(container);
    let (src, to) = (root.to_path_buf(), dest.clone());
    let copied = tokio::task::spawn_blocking(move || {
        copy_tree(&src, &to)?;
        image_mounts(&to)
    })
    .await;
    match copied {
        Ok(Ok(dirs)) => Ok(dirs),
        Ok(Err(e)) => Err(format!(
            "copying the image's files to {}: {e}",
            dest.display()
        )),
        Err(e) => Err(format!("copying the image's files: {e}")),
    }
}
