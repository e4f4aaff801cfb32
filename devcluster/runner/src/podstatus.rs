//! Pure computation of a Pod's status from what the runner knows about its
//! processes.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The state of one container instance as the runner sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        reason: String,
        message: Option<String>,
        started_at: Option<Timestamp>,
        finished_at: Timestamp,
        container_id: Option<String>,
    },
}

impl RunState {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        RunState::Waiting {
            reason: reason.to_string(),
            message,
        }
    }

    fn to_api(&self) -> ContainerState {
        match self {
            RunState::Waiting { reason, message } => ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            RunState::Running { started_at } => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*started_at)),
                }),
                ..Default::default()
            },
            RunState::Terminated {
                exit_code,
                signal,
                reason,
                message,
                started_at,
                finished_at,
                container_id,
            } => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: *exit_code,
                    signal: *signal,
                    reason: Some(reason.clone()),
                    message: message.clone(),
                    started_at: started_at.map(Time),
                    finished_at: Some(Time(*finished_at)),
                    container_id: container_id.clone(),
                }),
                ..Default::default()
            },
        }
    }
}

/// One container's runtime record.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerRt {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub state: RunState,
    pub last_state: Option<RunState>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
}

impl ContainerRt {
    pub fn new(name: &str, image: &str) -> Self {
        Self {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            container_id: None,
            state: RunState::waiting("ContainerCreating", None),
            last_state: None,
            restart_count: 0,
            ready: false,
            started: false,
        }
    }

    fn to_api(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            image_id: self.image_id.clone(),
            container_id: self.container_id.clone(),
            state: Some(self.state.to_api()),
            last_state: Some(
                self.last_state
                    .as_ref()
                    .map(RunState::to_api)
                    .unwrap_or_default(),
            ),
            restart_count: self.restart_count,
            ready: self.ready,
            started: Some(self.started),
            ..Default::default()
        }
    }
}

/// Everything the runner tracks about a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRt {
    pub init: Vec<ContainerRt>,
    pub main: Vec<ContainerRt>,
    pub initialized: bool,
    /// Set when the runner will not start anything more (all done, or failed for good).
    pub finished: bool,
    pub pod_ip: Option<Ipv4Addr>,
    pub host_ip: String,
    pub start_time: Timestamp,
    /// Pod-level failure (e.g. an init container failed with restartPolicy Never).
    pub failed_reason: Option<(String, String)>,
}

/// Phase per the Kubernetes rules, as far as they apply here.
pub fn compute_phase(rt: &PodRt) -> &'static str {
    if rt.failed_reason.is_some() {
        return "Failed";
    }
    if !rt.initialized {
        return "Pending";
    }
    let all_terminated = !rt.main.is_empty()
        && rt
            .main
            .iter()
            .all(|c| matches!(c.state, RunState::Terminated { .. }));
    if all_terminated && rt.finished {
        let all_ok = rt
            .main
            .iter()
            .all(|c| matches!(c.state, RunState::Terminated { exit_code: 0, .. }));
        return if all_ok { "Succeeded" } else { "Failed" };
    }
    // Running once any container has started at least once.
    if rt.main.iter().any(|c| c.started || c.restart_count > 0) {
        "Running"
    } else {
        "Pending"
    }
}

/// Builds the PodStatus; condition transition times are kept from `previous`
/// when a condition's status did not change.
pub fn compute_status(rt: &PodRt, previous: Option<&[PodCondition]>, now: Timestamp) -> PodStatus {
    let phase = compute_phase(rt);
    let done = phase == "Succeeded" || phase == "Failed";
    let containers_ready = !done && !rt.main.is_empty() && rt.main.iter().all(|c| c.ready);
    let cond = |type_: &str, ok: bool, reason: Option<&str>| -> PodCondition {
        let status = if ok { "True" } else { "False" };
        let since = previous
            .and_then(|p| p.iter().find(|c| c.type_ == type_ && c.status == status))
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.map(str::to_string),
            last_transition_time: Some(since),
            ..Default::default()
        }
    };
    let not_ready_reason = if done {
        Some("PodCompleted")
    } else if containers_ready {
        None
    } else {
        Some("ContainersNotReady")
    };
    let conditions = vec![
        cond("PodScheduled", true, None),
        cond(
            "Initialized",
            rt.initialized,
            (!rt.initialized).then_some("ContainersNotInitialized"),
        ),
        cond("ContainersReady", containers_ready, not_ready_reason),
        cond("Ready", containers_ready, not_ready_reason),
    ];
    let (reason, message) = match &rt.failed_reason {
        Some((r, m)) => (Some(r.clone()), Some(m.clone())),
        None => (None, None),
    };
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        pod_ip: rt.pod_ip.map(|i| i.to_string()),
        pod_ips: rt.pod_ip.map(|i| vec![PodIP { ip: i.to_string() }]),
        host_ip: Some(rt.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: rt.host_ip.clone(),
        }]),
        start_time: Some(Time(rt.start_time)),
        init_container_statuses: (!rt.init.is_empty())
            .then(|| rt.init.iter().map(ContainerRt::to_api).collect()),
        container_statuses: Some(rt.main.iter().map(ContainerRt::to_api).collect()),
        // Set by the API server at creation and immutable: a merge patch leaves it.
        qos_class: None,
        reason,
        message,
        ..Default::default()
    }
}

/// Exit code the way Kubernetes reports it: 128 + signal for a killed process.
pub fn exit_code_of(status: &std::process::ExitStatus) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        (None, Some(sig)) => (128 + sig, Some(sig)),
        (None, None) => (255, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> PodRt {
        PodRt {
            init: vec![],
            main: vec![
                ContainerRt::new("a", "python:3"),
                ContainerRt::new("b", "busybox"),
            ],
            initialized: true,
            finished: false,
            pod_ip: Some(Ipv4Addr::new(127, 1, 0, 2)),
            host_ip: "127.0.0.1".into(),
            start_time: Timestamp::UNIX_EPOCH,
            failed_reason: None,
        }
    }

    fn term(code: i32) -> RunState {
        RunState::Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: None,
            finished_at: Timestamp::UNIX_EPOCH,
            container_id: None,
        }
    }

    #[test]
    fn phases() {
        let mut r = rt();
        r.initialized = false;
        assert_eq!(compute_phase(&r), "Pending");
        r.initialized = true;
        assert_eq!(compute_phase(&r), "Pending");
        r.main[0].started = true;
        r.main[0].state = RunState::Running {
            started_at: Timestamp::UNIX_EPOCH,
        };
        assert_eq!(compute_phase(&r), "Running");
        r.main[0].state = term(0);
        r.main[1].state = term(0);
        assert_eq!(
            compute_phase(&r),
            "Running",
            "not finished: restarts may follow"
        );
        r.finished = true;
        assert_eq!(compute_phase(&r), "Succeeded");
        r.main[1].state = term(3);
        assert_eq!(compute_phase(&r), "Failed");
        let mut r = rt();
        r.failed_reason = Some(("InitFailed".into(), "x".into()));
        assert_eq!(compute_phase(&r), "Failed");
    }

    #[test]
    fn ready_condition_and_transition_times() {
        let mut r = rt();
        let t0 = Timestamp::from_second(1000).unwrap();
        let s = compute_status(&r, None, t0);
        let ready = |s: &PodStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .clone()
        };
        assert_eq!(ready(&s).status, "False");
        assert_eq!(s.pod_ip.as_deref(), Some("127.1.0.2"));
        r.main[0].ready = true;
        r.main[1].ready = true;
        let t1 = Timestamp::from_second(2000).unwrap();
        let s2 = compute_status(&r, s.conditions.as_deref(), t1);
        assert_eq!(ready(&s2).status, "True");
        assert_eq!(ready(&s2).last_transition_time, Some(Time(t1)));
        let t2 = Timestamp::from_second(3000).unwrap();
        let s3 = compute_status(&r, s2.conditions.as_deref(), t2);
        assert_eq!(
            ready(&s3).last_transition_time,
            Some(Time(t1)),
            "unchanged status keeps its time"
        );
        let cs = s3.container_statuses.unwrap();
        assert!(cs.iter().all(|c| c.ready));
    }

    #[test]
    fn exit_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            exit_code_of(&std::process::ExitStatus::from_raw(3 << 8)),
            (3, None)
        );
        assert_eq!(
            exit_code_of(&std::process::ExitStatus::from_raw(9)),
            (137, Some(9))
        );
    }
}
