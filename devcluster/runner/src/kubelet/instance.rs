//! One run of a started container and what follows it, in both pod runtimes: probes while it
//! runs, its terminated state, and the backoff before a restart.

use std::net::Ipv4Addr;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::container::ContainerRuntime;
use crate::podstatus::{RunState, exit_code_of};
use crate::process::Running;
use crate::spec::ProcessSpec;

use super::probes::{first_tcp_port, probe_loop};
use super::status::pod_event;
use super::{Kind, PodEnv, backoff_delay};

/// The state of a container whose process could not be started (`StartError`, exit 128).
pub(super) fn start_error(e: &dyn std::fmt::Display) -> RunState {
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
pub(super) async fn after_exit(
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

/// Runs a started instance until it exits, fails liveness, or the pod stops.
/// Returns the Terminated state, or None when the pod was stopped.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_instance(
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

/// Sleeps for `d`; true when cancelled first.
pub(super) async fn wait_or_cancel(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}
