//! PodSecurity admission: a Pod created in a namespace labelled
//! `pod-security.kubernetes.io/enforce: baseline|restricted` is refused with 403 when it breaks
//! that level, worded like the real admission plugin. The `warn` label adds a `Warning` to the
//! answer instead, for Pods and for the pod templates of workload objects (Deployments, Jobs,
//! CronJobs, ...), which the real plugin checks in `warn` and `audit` modes only; a namespace
//! whose enforce level is raised gets warnings naming the pods already breaking it. There is no
//! audit log, so the `audit` label has nothing to write to.
//!
//! The checks are the Pod Security Standards' (latest version) for the fields pods use.

use serde_json::Value;

/// Capabilities baseline allows a container to add.
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Volume types restricted allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Sysctls baseline allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The enforced level of a namespace, when it is baseline or restricted.
pub fn enforced_level(namespace: &Value) -> Option<&str> {
    level(namespace, "enforce")
}

/// The level a namespace sets for `mode` (`enforce`, `warn`, `audit`), when it checks anything.
fn level<'a>(namespace: &'a Value, mode: &str) -> Option<&'a str> {
    namespace
        .pointer("/metadata/labels")
        .and_then(|l| l.get(format!("pod-security.kubernetes.io/{mode}")))
        .and_then(Value::as_str)
        .filter(|l| matches!(*l, "baseline" | "restricted"))
}

/// `restricted:latest`, or the version the namespace pins for `mode` (`restricted:v1.30`),
/// as messages name the policy. The checks themselves are always the latest ones.
pub fn policy_name(namespace: &Value, mode: &str, level: &str) -> String {
    let version = namespace
        .pointer("/metadata/labels")
        .and_then(|l| l.get(format!("pod-security.kubernetes.io/{mode}-version")))
        .and_then(Value::as_str)
        .filter(|v| *v == "latest" || v.strip_prefix('v').is_some_and(|r| r.contains('.')))
        .unwrap_or("latest");
    format!("{level}:{version}")
}

/// The pod template inside an object of a workload kind (its `spec`, `metadata`), or the
/// object itself for a Pod.
fn pod_like<'a>(group: &str, resource: &str, obj: &'a Value) -> Option<&'a Value> {
    match (group, resource) {
        ("", "pods") => Some(obj),
        ("", "podtemplates") => obj.get("template"),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => obj.pointer("/spec/template"),
        ("batch", "cronjobs") => obj.pointer("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// The `Warning`s the real plugin adds when `obj` (a Pod or a workload object of
/// `group`/`resource`) is written in `namespace`: for the `warn` level, and for workload
/// objects also the `enforce` level (which refuses only Pods).
pub fn write_warnings(namespace: &Value, group: &str, resource: &str, obj: &Value) -> Vec<String> {
    let Some(pod) = pod_like(group, resource, obj) else {
        return Vec::new();
    };
    let is_pod = resource == "pods" && group.is_empty();
    let mut modes = vec!["warn"];
    if !is_pod {
        modes.push("enforce");
    }
    let mut out: Vec<String> = Vec::new();
    for mode in modes {
        let Some(lvl) = level(namespace, mode) else {
            continue;
        };
        let found = violations(lvl, pod);
        if found.is_empty() {
            continue;
        }
        let text = format!(
            "would violate PodSecurity {:?}: {}",
            policy_name(namespace, mode, lvl),
            found.join(", ")
        );
        if !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

/// The `Warning`s for a namespace update that sets or raises its enforce level while pods
/// in it break the new level: one line naming the policy, then one per pod.
pub fn namespace_warnings<'a>(
    old: &Value,
    new: &Value,
    pods: impl Iterator<Item = &'a Value>,
) -> Vec<String> {
    let Some(lvl) = enforced_level(new) else {
        return Vec::new();
    };
    let policy = policy_name(new, "enforce", lvl);
    if enforced_level(old).map(|l| policy_name(old, "enforce", l)) == Some(policy.clone()) {
        return Vec::new();
    }
    let ns = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut lines: Vec<String> = pods
        .filter_map(|pod| {
            let found = violations(lvl, pod);
            let name = pod.pointer("/metadata/name").and_then(Value::as_str)?;
            (!found.is_empty()).then(|| format!("{name}: {}", found.join(", ")))
        })
        .collect();
    if lines.is_empty() {
        return lines;
    }
    lines.sort();
    lines.insert(
        0,
        format!(
            "existing pods in namespace {ns:?} violate the new PodSecurity enforce level {policy:?}"
        ),
    );
    lines
}

fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(|k| spec.get(k).and_then(Value::as_array))
        .flatten()
}

fn cname(c: &Value) -> &str {
    c.get("name").and_then(Value::as_str).unwrap_or("")
}

fn quoted_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "container \"a\"" or "containers \"a\", \"b\"".
fn which(names: &[&str]) -> String {
    if names.len() == 1 {
        format!("container {}", quoted_list(names))
    } else {
        format!("containers {}", quoted_list(names))
    }
}

/// The violations of `level` by the pod, as the real plugin lists them (empty: allowed).
pub fn violations(level: &str, pod: &Value) -> Vec<String> {
    let Some(spec) = pod.get("spec") else {
        return Vec::new();
    };
    let restricted = level == "restricted";
    let mut out = Vec::new();
    let psc = spec.get("securityContext");
    let truthy = |v: Option<&Value>| v.and_then(Value::as_bool) == Some(true);

    // Baseline.
    let host: Vec<&str> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|k| truthy(spec.get(*k)))
        .collect();
    if !host.is_empty() {
        out.push(format!(
            "host namespaces ({})",
            host.iter()
                .map(|h| format!("{h}=true"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let privileged: Vec<&str> = containers(spec)
        .filter(|c| truthy(c.pointer("/securityContext/privileged")))
        .map(cname)
        .collect();
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} must not set securityContext.privileged=true)",
            which(&privileged)
        ));
    }
    let mut bad_caps: Vec<&str> = Vec::new();
    for c in containers(spec) {
        for cap in c
            .pointer("/securityContext/capabilities/add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let allowed = if restricted {
                cap == "NET_BIND_SERVICE"
            } else {
                BASELINE_CAPS.contains(&cap)
            };
            if !allowed && !bad_caps.contains(&cap) {
                bad_caps.push(cap);
            }
        }
    }
    if !bad_caps.is_empty() && !restricted {
        out.push(format!(
            "non-default capabilities ({})",
            quoted_list(&bad_caps)
        ));
    }
    let host_path: Vec<&str> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("hostPath").is_some())
        .map(|v| v.get("name").and_then(Value::as_str).unwrap_or(""))
        .collect();
    if !host_path.is_empty() {
        out.push(format!("hostPath volumes ({})", quoted_list(&host_path)));
    }
    let host_ports: Vec<String> = containers(spec)
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
        .filter(|p| *p != 0)
        .map(|p| p.to_string())
        .collect();
    if !host_ports.is_empty() {
        out.push(format!("hostPort ({})", host_ports.join(", ")));
    }
    let unconfined = |sc: Option<&Value>| {
        sc.and_then(|s| s.pointer("/seccompProfile/type"))
            .and_then(Value::as_str)
            == Some("Unconfined")
    };
    if unconfined(psc) || containers(spec).any(|c| unconfined(c.get("securityContext"))) {
        out.push(
            "seccompProfile (securityContext.seccompProfile.type must not be \"Unconfined\")"
                .into(),
        );
    }
    let proc_mount: Vec<&str> = containers(spec)
        .filter(|c| {
            c.pointer("/securityContext/procMount")
                .and_then(Value::as_str)
                .is_some_and(|m| m != "Default")
        })
        .map(cname)
        .collect();
    if !proc_mount.is_empty() {
        out.push(format!(
            "procMount ({} must not set securityContext.procMount)",
            which(&proc_mount)
        ));
    }
    let sysctls: Vec<&str> = psc
        .and_then(|s| s.get("sysctls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .collect();
    if !sysctls.is_empty() {
        out.push(format!("forbidden sysctls ({})", sysctls.join(", ")));
    }
    if !restricted {
        return out;
    }

    // Restricted.
    let bad_volumes: Vec<String> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let obj = v.as_object()?;
            let ty = obj.keys().find(|k| k.as_str() != "name")?;
            (!RESTRICTED_VOLUMES.contains(&ty.as_str()) && ty != "hostPath")
                .then(|| format!("{:?}", v.get("name").and_then(Value::as_str).unwrap_or("")))
        })
        .collect();
    if !bad_volumes.is_empty() {
        out.push(format!(
            "restricted volume types (volumes {} use restricted volume types)",
            bad_volumes.join(", ")
        ));
    }
    let escalation: Vec<&str> = containers(spec)
        .filter(|c| {
            c.pointer("/securityContext/allowPrivilegeEscalation")
                .and_then(Value::as_bool)
                != Some(false)
        })
        .map(cname)
        .collect();
    if !escalation.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
            which(&escalation)
        ));
    }
    let no_drop_all: Vec<&str> = containers(spec)
        .filter(|c| {
            !c.pointer("/securityContext/capabilities/drop")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|x| x == "ALL"))
        })
        .map(cname)
        .collect();
    if !no_drop_all.is_empty() || !bad_caps.is_empty() {
        let mut parts = Vec::new();
        if !no_drop_all.is_empty() {
            parts.push(format!(
                "{} must set securityContext.capabilities.drop=[\"ALL\"]",
                which(&no_drop_all)
            ));
        }
        if !bad_caps.is_empty() {
            parts.push(format!(
                "containers must not include {} in securityContext.capabilities.add",
                quoted_list(&bad_caps)
            ));
        }
        out.push(format!("unrestricted capabilities ({})", parts.join("; ")));
    }
    let pod_non_root = psc
        .and_then(|s| s.get("runAsNonRoot"))
        .and_then(Value::as_bool);
    let not_non_root: Vec<&str> = containers(spec)
        .filter(|c| {
            match c
                .pointer("/securityContext/runAsNonRoot")
                .and_then(Value::as_bool)
            {
                Some(v) => !v,
                None => pod_non_root != Some(true),
            }
        })
        .map(cname)
        .collect();
    if pod_non_root == Some(false) || !not_non_root.is_empty() {
        out.push(format!(
            "runAsNonRoot != true (pod or {} must set securityContext.runAsNonRoot=true)",
            which(&not_non_root)
        ));
    }
    let root_user =
        |sc: Option<&Value>| sc.and_then(|s| s.get("runAsUser")).and_then(Value::as_i64) == Some(0);
    let root_containers: Vec<&str> = containers(spec)
        .filter(|c| root_user(c.get("securityContext")))
        .map(cname)
        .collect();
    if root_user(psc) || !root_containers.is_empty() {
        out.push("runAsUser=0 (pod and containers must not set runAsUser=0)".into());
    }
    let pod_seccomp = psc
        .and_then(|s| s.pointer("/seccompProfile/type"))
        .and_then(Value::as_str);
    let no_seccomp: Vec<&str> = containers(spec)
        .filter(|c| {
            let t = c
                .pointer("/securityContext/seccompProfile/type")
                .and_then(Value::as_str)
                .or(pod_seccomp);
            !matches!(t, Some("RuntimeDefault" | "Localhost"))
        })
        .map(cname)
        .collect();
    if !no_seccomp.is_empty() {
        out.push(format!(
            "seccompProfile (pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            which(&no_seccomp)
        ));
    }
    out
}
