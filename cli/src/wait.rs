//! Waiting after deploy/update until the Function's Ready condition settles.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ContainerStatus, Pod},
};
use kube::{Api, ResourceExt, api::ListParams};
use kubeless_api::{
    Function,
    conditions::{READY, find_condition, reasons},
};

use crate::{
    args::WaitArgs,
    ctx::Ctx,
    error::{Error, Result},
};

/// Reasons of a `Ready=False` condition that will not fix themselves.
const FAILURE_REASONS: &[&str] = &[
    reasons::UNKNOWN_RUNTIME,
    reasons::INVALID_SPEC,
    reasons::CHECKSUM_MISMATCH,
    reasons::DEPENDENCIES_FAILED,
    reasons::BUILD_FAILED,
    reasons::DEPLOYMENT_FAILED,
    reasons::PODS_REFUSED,
    reasons::APPLY_FAILED,
];

/// Waiting reasons of a container that will not start by itself.
const STUCK_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// How long a pod problem must last before the wait gives up with it (a pull or a crash can
/// be retried once by the kubelet and succeed).
const PROBLEM_GRACE: Duration = Duration::from_secs(5);

/// Why a pod of the function does not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProblem {
    pub pod: String,
    pub container: String,
    pub reason: String,
    pub message: String,
}

fn container_problem(pod: &str, cs: &ContainerStatus, init: bool) -> Option<PodProblem> {
    let state = cs.state.as_ref()?;
    if init {
        // An init step that exited non-zero, now or before its restart (back-off).
        let failed = state
            .terminated
            .as_ref()
            .or_else(|| cs.last_state.as_ref().and_then(|l| l.terminated.as_ref()))
            .filter(|t| t.exit_code != 0);
        if let Some(t) = failed
            && state.running.is_none()
        {
            return Some(PodProblem {
                pod: pod.to_string(),
                container: cs.name.clone(),
                reason: "InitStepFailed".into(),
                message: format!(
                    "init step {} exited with code {}{}",
                    cs.name,
                    t.exit_code,
                    t.message
                        .as_deref()
                        .filter(|m| !m.trim().is_empty())
                        .map(|m| format!(": {}", m.trim()))
                        .unwrap_or_default()
                ),
            });
        }
    }
    if let Some(w) = &state.waiting {
        let reason = w.reason.clone().unwrap_or_default();
        if STUCK_REASONS.contains(&reason.as_str()) {
            let mut message = w.message.clone().unwrap_or_default();
            if reason == "CrashLoopBackOff"
                && let Some(t) = cs.last_state.as_ref().and_then(|l| l.terminated.as_ref())
            {
                message = format!(
                    "container {} exited with code {}{}",
                    cs.name,
                    t.exit_code,
                    t.message
                        .as_deref()
                        .filter(|m| !m.trim().is_empty())
                        .map(|m| format!(": {}", m.trim()))
                        .unwrap_or_default()
                );
            }
            return Some(PodProblem {
                pod: pod.to_string(),
                container: cs.name.clone(),
                reason,
                message,
            });
        }
    }
    None
}

/// The first problem of the pods that are not being deleted: a failing init step first, then a
/// container that cannot be pulled, configured or kept running.
pub fn pod_problem(pods: &[Pod]) -> Option<PodProblem> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find_map(|p| {
            let st = p.status.as_ref()?;
            let name = p.name_any();
            st.init_container_statuses
                .iter()
                .flatten()
                .find_map(|cs| container_problem(&name, cs, true))
                .or_else(|| {
                    st.container_statuses
                        .iter()
                        .flatten()
                        .find_map(|cs| container_problem(&name, cs, false))
                })
        })
}

/// The pods of function `name` (label `function=<name>`).
pub async fn function_pods(ctx: &Ctx, name: &str) -> Result<Vec<Pod>> {
    Ok(ctx
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("function={name}")))
        .await
        .map_err(|e| Error::kube(format!("listing the pods of function {name}"), e))?
        .items)
}

/// Whether the Deployment finished rolling out its current template: every replica updated,
/// available, and no old pod left. `None` when the rollout is done.
pub fn rollout_pending(d: &Deployment) -> Option<String> {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    if st.observed_generation.unwrap_or(0) < d.metadata.generation.unwrap_or(0) {
        return Some("the new version is being rolled out".into());
    }
    let updated = st.updated_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let available = st.available_replicas.unwrap_or(0);
    if updated < want {
        return Some(format!("{updated}/{want} pods run the new version"));
    }
    if total > updated {
        return Some(format!("{} old pods still answer", total - updated));
    }
    if available < want {
        return Some(format!("{available}/{want} new pods ready"));
    }
    None
}

/// Wait by default on a terminal; `--wait` / `--no-wait` override.
pub fn should_wait(args: &WaitArgs) -> bool {
    if args.no_wait {
        false
    } else {
        args.wait || std::io::stdout().is_terminal()
    }
}

/// What the Function's status says about the generation we wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Ready,
    Failed { reason: String, message: String },
    Pending(String),
}

pub fn phase(f: &Function, generation: Option<i64>) -> Phase {
    let status = f.status.clone().unwrap_or_default();
    let Some(cond) = find_condition(&status.conditions, READY) else {
        return Phase::Pending("waiting for the controller".into());
    };
    let observed = cond.observed_generation.or(status.observed_generation);
    if let (Some(want), Some(seen)) = (generation, observed)
        && seen < want
    {
        return Phase::Pending("waiting for the controller to see the change".into());
    }
    let reason = cond.reason.clone().unwrap_or_default();
    let message = cond.message.clone().unwrap_or_default();
    if cond.is_true() {
        Phase::Ready
    } else if cond.status == kubeless_api::conditions::STATUS_FALSE
        && FAILURE_REASONS.contains(&reason.as_str())
    {
        Phase::Failed { reason, message }
    } else if message.is_empty() {
        Phase::Pending(reason)
    } else {
        Phase::Pending(format!("{reason}: {message}"))
    }
}

/// The running step of the Function's build Job and the last line it printed, while the build
/// step builds its image.
async fn build_progress(ctx: &Ctx, f: &Function) -> Option<String> {
    let b = f.status.as_ref()?.build.as_ref()?;
    if b.state != kubeless_api::build::states::BUILDING {
        return None;
    }
    let job = b.job.as_deref()?;
    let pods: Api<Pod> = ctx.api();
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .ok()?;
    let pod = list.items.into_iter().next()?;
    let st = pod.status.as_ref()?;
    let running = st
        .init_container_statuses
        .iter()
        .flatten()
        .chain(st.container_statuses.iter().flatten())
        .find(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))?;
    let params = kube::api::LogParams {
        container: Some(running.name.clone()),
        tail_lines: Some(1),
        ..Default::default()
    };
    let line = pods
        .logs(&pod.name_any(), &params)
        .await
        .unwrap_or_default()
        .trim()
        .chars()
        .take(120)
        .collect::<String>();
    Some(if line.is_empty() {
        format!("build step {}", running.name)
    } else {
        format!("build step {}: {line}", running.name)
    })
}

/// Whether two waiting reasons are one problem: a failing pull alternates between
/// `ErrImagePull` and `ImagePullBackOff` (as a kubelet does), which must not restart the grace.
fn same_problem(a: &str, b: &str) -> bool {
    let pull = |r: &str| matches!(r, "ErrImagePull" | "ImagePullBackOff");
    a == b || (pull(a) && pull(b))
}

/// Polls the Function until Ready (prints "Function <name> is ready") or a failure.
pub async fn wait_ready(
    ctx: &Ctx,
    name: &str,
    generation: Option<i64>,
    timeout: u64,
) -> Result<()> {
    let api: Api<Function> = ctx.api();
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let spinner = ['|', '/', '-', '\\'];
    let mut tick = 0usize;
    let mut last_line = String::new();
    let mut problem_since: Option<(PodProblem, Instant)> = None;
    let deployments: Api<Deployment> = ctx.api();
    loop {
        let f = api
            .get(name)
            .await
            .map_err(|e| Error::kube(format!("reading function {name}"), e))?;
        let mut phase = phase(&f, generation);
        // Ready counts once the new version serves: an update keeps the old pods answering
        // until the Deployment has rolled out.
        if phase == Phase::Ready
            && let Ok(Some(d)) = deployments.get_opt(name).await
            && let Some(what) = rollout_pending(&d)
        {
            phase = Phase::Pending(what);
        }
        // While the image is built, the spinner shows the build's step and its last log line.
        if let Phase::Pending(what) = &phase
            && let Some(progress) = build_progress(ctx, &f).await
        {
            phase = Phase::Pending(format!("{what}; {progress}"));
        }
        // A pod that cannot start says why on the spinner, and the wait gives up with it.
        if let Phase::Pending(what) = &phase {
            // Between restarts the problem can vanish for a moment: its start is kept.
            if let Some(p) = pod_problem(&function_pods(ctx, name).await?) {
                let since = match &problem_since {
                    Some((seen, at)) if same_problem(&seen.reason, &p.reason) => *at,
                    _ => Instant::now(),
                };
                if since.elapsed() >= PROBLEM_GRACE {
                    if tty {
                        eprint!("\r\x1b[K");
                    }
                    return Err(Error::PodFailing {
                        name: name.to_string(),
                        pod: p.pod,
                        reason: p.reason,
                        message: p.message,
                    });
                }
                phase = Phase::Pending(format!(
                    "{what}; pod {}: {}: {}",
                    p.pod, p.reason, p.message
                ));
                problem_since = Some((p, since));
            }
        }
        match phase {
            Phase::Ready => {
                if tty {
                    eprint!("\r\x1b[K");
                }
                return crate::output::println(&format!("Function {name} is ready"));
            }
            Phase::Failed { reason, message } => {
                if tty {
                    eprint!("\r\x1b[K");
                }
                return Err(Error::FunctionFailed {
                    name: name.to_string(),
                    reason,
                    message,
                });
            }
            Phase::Pending(what) => {
                let elapsed = started.elapsed().as_secs();
                if tty {
                    eprint!(
                        "\r\x1b[K{} Waiting for function {name} ({elapsed}s): {what}",
                        spinner[tick % spinner.len()]
                    );
                    let _ = std::io::stderr().flush();
                } else if what != last_line {
                    eprintln!("Waiting for function {name}: {what}");
                }
                last_line = what;
            }
        }
        if started.elapsed() >= Duration::from_secs(timeout) {
            if tty {
                eprintln!();
            }
            return Err(Error::WaitTimeout {
                name: name.to_string(),
                secs: timeout,
            });
        }
        tick += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use kubeless_api::{Condition, FunctionSpec, FunctionStatus};

    use super::*;

    fn with(cond: Option<Condition>, observed: Option<i64>) -> Function {
        let mut f = Function::new("f", FunctionSpec::default());
        f.status = Some(FunctionStatus {
            observed_generation: observed,
            conditions: cond.into_iter().collect(),
            ..FunctionStatus::default()
        });
        f
    }

    #[test]
    fn a_pull_failing_and_backing_off_is_one_problem() {
        assert!(same_problem("ErrImagePull", "ImagePullBackOff"));
        assert!(same_problem("CrashLoopBackOff", "CrashLoopBackOff"));
        assert!(!same_problem("ErrImagePull", "CrashLoopBackOff"));
    }

    #[test]
    fn phases() {
        assert!(matches!(
            phase(&with(None, None), Some(1)),
            Phase::Pending(_)
        ));
        let ready = Condition::ready(reasons::RECONCILED, "ok");
        assert_eq!(
            phase(&with(Some(ready.clone()), Some(2)), Some(2)),
            Phase::Ready
        );
        // A Ready condition of an older generation does not count.
        assert!(matches!(
            phase(&with(Some(ready), Some(1)), Some(2)),
            Phase::Pending(_)
        ));
        let bad = Condition::not_ready(reasons::CHECKSUM_MISMATCH, "sha differs");
        assert_eq!(
            phase(&with(Some(bad), None), Some(1)),
            Phase::Failed {
                reason: "ChecksumMismatch".into(),
                message: "sha differs".into()
            }
        );
        // Pods the API server refuses (PodSecurity, quota) will not come by waiting.
        let refused = Condition::not_ready(
            reasons::PODS_REFUSED,
            "the API server refuses the function's pods (FailedCreate): violates PodSecurity",
        );
        assert!(matches!(
            phase(&with(Some(refused), None), Some(1)),
            Phase::Failed { reason, message } if reason == "PodsRefused" && message.contains("PodSecurity")
        ));
        let progressing = Condition::not_ready(reasons::PROGRESSING, "1/2 ready");
        assert_eq!(
            phase(&with(Some(progressing), None), None),
            Phase::Pending("Progressing: 1/2 ready".into())
        );
    }
}
