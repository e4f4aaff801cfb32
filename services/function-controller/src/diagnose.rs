//! Pure status logic: reading pods and the Deployment into the Function's Ready condition.

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ContainerStatus, Pod},
};
use kubeless_api::conditions::reasons;

use crate::builders::{INIT_COMPILE, INIT_INSTALL, INIT_PREPARE};

/// Text the `prepare` step prints when the content does not match `.spec.checksum`.
pub const CHECKSUM_MISMATCH_TEXT: &str = "checksum mismatch";
/// How much of a failure message ends up in the condition.
pub const MESSAGE_TAIL_BYTES: usize = 600;

/// A failed init (or crashing runtime) container found in the function's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Exit code of the last failed run.
    pub exit_code: i32,
    /// Termination message, when the runtime recorded one.
    pub message: Option<String>,
    /// Whether the failed run is the previous instance (the container was restarted since).
    pub previous: bool,
    /// Init container (true) or the runtime container (false).
    pub init: bool,
}

/// The first failed container of the given pods, init containers first.
pub fn find_failure<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Option<Failure> {
    let mut runtime_failure = None;
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(status) = &pod.status else { continue };
        for cs in status.init_container_statuses.iter().flatten() {
            if let Some(f) = failed(cs, &name, true) {
                return Some(f);
            }
        }
        for cs in status.container_statuses.iter().flatten() {
            if runtime_failure.is_none()
                && let Some(f) = failed(cs, &name, false)
                && is_crash_looping(cs)
            {
                runtime_failure = Some(f);
            }
        }
    }
    runtime_failure
}

fn failed(cs: &ContainerStatus, pod: &str, init: bool) -> Option<Failure> {
    let state = cs.state.as_ref();
    let (term, previous) = match state.and_then(|s| s.terminated.as_ref()) {
        Some(t) => (t, false),
        None => {
            // Restarted after a failure: the failure is in lastState.
            let t = cs.last_state.as_ref()?.terminated.as_ref()?;
            if state.and_then(|s| s.running.as_ref()).is_some() && !init {
                return None;
            }
            (t, true)
        }
    };
    if term.exit_code == 0 {
        return None;
    }
    Some(Failure {
        pod: pod.to_string(),
        container: cs.name.clone(),
        exit_code: term.exit_code,
        message: term.message.clone().filter(|m| !m.trim().is_empty()),
        previous,
        init,
    })
}

fn is_crash_looping(cs: &ContainerStatus) -> bool {
    cs.state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.as_deref())
        == Some("CrashLoopBackOff")
        || cs
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()
}

/// The condition reason for a failure of `container` whose output is `text`.
pub fn classify(failure: &Failure, text: &str) -> &'static str {
    if !failure.init {
        return reasons::DEPLOYMENT_FAILED;
    }
    match failure.container.as_str() {
        INIT_PREPARE if text.to_ascii_lowercase().contains(CHECKSUM_MISMATCH_TEXT) => {
            reasons::CHECKSUM_MISMATCH
        }
        INIT_INSTALL => reasons::DEPENDENCIES_FAILED,
        INIT_PREPARE | INIT_COMPILE => reasons::BUILD_FAILED,
        _ => reasons::DEPLOYMENT_FAILED,
    }
}

/// The end of `text`, at most [`MESSAGE_TAIL_BYTES`], cut at a character boundary and trimmed.
pub fn tail(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MESSAGE_TAIL_BYTES {
        return text.to_string();
    }
    let mut start = text.len() - MESSAGE_TAIL_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

/// Desired and ready replicas of the Deployment, and whether it counts as ready: the
/// `Available` condition is true and at least one replica (or every desired one, if fewer) is
/// ready.
pub fn deployment_readiness(dep: &Deployment) -> (i32, i32, bool) {
    let desired = dep.spec.as_ref().and_then(|s| s.replicas);
    let status = dep.status.as_ref();
    let replicas = status.and_then(|s| s.replicas).or(desired).unwrap_or(0);
    let ready = status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let available = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        });
    let enough = ready >= 1 || desired == Some(0);
    (replicas, ready, available && enough)
}

/// The message of the Deployment's `ReplicaFailure` condition (reason `FailedCreate`: the
/// API server refused its pods; the ReplicaSet controller puts the server's answer there),
/// when it describes the Deployment's current generation.
pub fn replica_failure(dep: &Deployment) -> Option<String> {
    let status = dep.status.as_ref()?;
    if status.observed_generation.is_some()
        && dep.metadata.generation.is_some()
        && status.observed_generation < dep.metadata.generation
    {
        return None;
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| {
            format!(
                "the API server refuses the function's pods ({}): {}",
                c.reason.as_deref().unwrap_or("FailedCreate"),
                c.message.as_deref().unwrap_or_default()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replica_failure_reads_the_current_condition() {
        let dep = |generation: i64, observed: i64, status: &str| -> Deployment {
            serde_json::from_value(json!({"metadata": {"name": "f", "generation": generation},
                "status": {"observedGeneration": observed, "conditions": [
                    {"type": "Available", "status": "False"},
                    {"type": "ReplicaFailure", "status": status, "reason": "FailedCreate",
                     "message": "pods \"f-1-\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true"}]}}))
            .unwrap()
        };
        let m = replica_failure(&dep(2, 2, "True")).unwrap();
        assert!(
            m.contains("FailedCreate") && m.contains("runAsNonRoot != true"),
            "{m}"
        );
        assert_eq!(replica_failure(&dep(2, 2, "False")), None);
        // A condition about the previous template says nothing about the new one.
        assert_eq!(replica_failure(&dep(3, 2, "True")), None);
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p1"}, "status": status})).unwrap()
    }

    #[test]
    fn failed_install_is_dependencies_failed() {
        let p = pod(json!({"initContainerStatuses": [
            {"name": "prepare", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"terminated": {"exitCode": 0}}},
            {"name": "install", "ready": false, "restartCount": 2, "image": "i", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "message": "No matching distribution"}}}
        ]}));
        let f = find_failure([&p]).unwrap();
        assert_eq!(f.container, "install");
        assert!(f.previous);
        assert_eq!(f.message.as_deref(), Some("No matching distribution"));
        assert_eq!(classify(&f, ""), reasons::DEPENDENCIES_FAILED);
    }

    #[test]
    fn prepare_checksum_text_is_recognised() {
        let p = pod(json!({"initContainerStatuses": [
            {"name": "prepare", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"terminated": {"exitCode": 1}}}
        ]}));
        let f = find_failure([&p]).unwrap();
        assert!(!f.previous);
        assert_eq!(
            classify(
                &f,
                "kubeless-runtime: error: checksum mismatch: the function content has sha256:ab"
            ),
            reasons::CHECKSUM_MISMATCH
        );
        assert_eq!(classify(&f, "not valid base64"), reasons::BUILD_FAILED);
    }

    #[test]
    fn healthy_and_running_pods_have_no_failure() {
        let p = pod(json!({
            "initContainerStatuses": [{"name": "prepare", "ready": false, "restartCount": 0,
               "image": "i", "imageID": "", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [{"name": "fn", "ready": true, "restartCount": 1, "image": "i",
               "imageID": "", "state": {"running": {}},
               "lastState": {"terminated": {"exitCode": 137}}}]
        }));
        assert_eq!(find_failure([&p]), None);
        let crash = pod(json!({
            "containerStatuses": [{"name": "fn", "ready": false, "restartCount": 3, "image": "i",
               "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
               "lastState": {"terminated": {"exitCode": 1}}}]
        }));
        let f = find_failure([&crash]).unwrap();
        assert_eq!(classify(&f, ""), reasons::DEPLOYMENT_FAILED);
    }

    #[test]
    fn tails_long_messages_on_char_boundaries() {
        let long = "é".repeat(1000);
        let t = tail(&long);
        assert!(t.starts_with("..."));
        assert!(t.len() <= MESSAGE_TAIL_BYTES + 4);
        assert_eq!(tail("  short \n"), "short");
    }

    #[test]
    fn readiness_needs_available_and_a_ready_replica() {
        let d = |status: serde_json::Value| -> Deployment {
            serde_json::from_value(
                json!({"spec": {"replicas": 1, "selector": {}, "template": {}}, "status": status}),
            )
            .unwrap()
        };
        assert_eq!(
            deployment_readiness(&d(json!({"replicas": 1, "readyReplicas": 1,
                "conditions": [{"type": "Available", "status": "True"}]}))),
            (1, 1, true)
        );
        assert!(
            !deployment_readiness(&d(json!({"replicas": 1, "readyReplicas": 0,
                "conditions": [{"type": "Available", "status": "True"}]})))
            .2
        );
        assert!(!deployment_readiness(&d(json!({"replicas": 1, "readyReplicas": 1}))).2);
    }
}
