//! The Kubernetes PodSecurity `restricted` rules that concern the pods our controllers build,
//! as a check builders (and their tests) can run: non-root, no privilege escalation, every
//! capability dropped, a RuntimeDefault or Localhost seccomp profile (pod or container level).

use k8s_openapi::api::core::v1::PodSpec;

/// What in `pod` breaks `restricted`, one line per container and rule; empty when it passes.
pub fn restricted_violations(pod: &PodSpec) -> Vec<String> {
    let psc = pod.security_context.clone().unwrap_or_default();
    let pod_seccomp = psc.seccomp_profile.as_ref().map(|p| p.type_.as_str());
    let mut out = Vec::new();
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let sc = c.security_context.clone().unwrap_or_default();
        if sc.allow_privilege_escalation != Some(false) {
            out.push(format!("{}: allowPrivilegeEscalation", c.name));
        }
        if sc.run_as_non_root.or(psc.run_as_non_root) != Some(true) {
            out.push(format!("{}: runAsNonRoot", c.name));
        }
        if sc.run_as_user.or(psc.run_as_user) == Some(0) {
            out.push(format!("{}: runAsUser 0", c.name));
        }
        let drops_all = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|x| x == "ALL"));
        if !drops_all {
            out.push(format!("{}: capabilities drop ALL", c.name));
        }
        let seccomp = sc
            .seccomp_profile
            .as_ref()
            .map(|p| p.type_.as_str())
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            out.push(format!("{}: seccompProfile", c.name));
        }
    }
    out
}
