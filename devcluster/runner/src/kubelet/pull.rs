//! What both pod runtimes do around an image pull: read the pod's image pull Secrets, and wait
//! out a failed pull (`ErrImagePull`, then `ImagePullBackOff`) with Events, as the kubelet does.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::container::Problem;
use crate::podstatus::RunState;

use super::instance::wait_or_cancel;
use super::status::pod_event;
use super::{Kind, PodEnv, backoff_delay};

/// The registry credentials of the pod's image pull Secrets as one Docker config document
/// (`{"auths": {...}}`, see [`crate::container::pull_auths`]), read again before every pull as
/// the kubelet does; None when the pod names none. A missing or unusable Secret gets a warning
/// Event and the pull goes on with the rest, as on a cluster.
pub(super) async fn pull_secret_auths(env: &PodEnv, container: &str) -> Option<serde_json::Value> {
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
    Some(auths)
}

/// Reports a failed pull: `ErrImagePull` (or the problem's own reason) with a `Failed` Event,
/// then `ImagePullBackOff` with a `BackOff` Event for the backoff of `failures` (counted up).
/// True when the pod was stopped meanwhile.
pub(super) async fn pull_back_off(
    env: &PodEnv,
    kind: Kind,
    idx: usize,
    container: &str,
    image: &str,
    problem: Problem,
    failures: &mut u32,
) -> bool {
    pod_event(env, container, true, "Failed", &problem.message).await;
    env.rep.update(kind, idx, |c| {
        c.state = RunState::waiting(problem.reason, Some(problem.message.clone()))
    });
    if wait_or_cancel(&env.cancel, Duration::from_secs(1)).await {
        return true;
    }
    let delay = backoff_delay(
        env.ctx.config.restart_backoff_base,
        env.ctx.config.restart_backoff_max,
        *failures,
    );
    *failures += 1;
    let msg = format!("Back-off pulling image {image:?}: {}", problem.message);
    pod_event(env, container, true, "BackOff", &msg).await;
    env.rep.update(kind, idx, |c| {
        c.state = RunState::waiting("ImagePullBackOff", Some(msg))
    });
    wait_or_cancel(&env.cancel, delay).await
}
