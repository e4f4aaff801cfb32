//! The install's pod template policy: what a Function's `spec.deployment` template may ask
//! of the node. One install serves many namespaces, so by default a template cannot reach
//! the host (privileged containers, host namespaces, hostPath, host ports, added capabilities,
//! root) or borrow another ServiceAccount of its namespace; the install loosens it field by
//! field, or copies templates through as Kubeless did (`kubeless` mode).

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Container, PodSecurityContext, PodSpec, SecurityContext},
};

/// The capability a restricted pod may add (PodSecurity `restricted` allows it too).
pub const ALWAYS_ALLOWED_CAPABILITY: &str = "NET_BIND_SERVICE";
/// Where the template sits in a Function, the start of every field path in a refusal.
const TEMPLATE_PATH: &str = "spec.deployment.spec.template.spec";

/// How templates are checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyMode {
    /// Refuse host access unless an allow setting permits it.
    #[default]
    Restricted,
    /// Copy templates through unchecked, as Kubeless did.
    Kubeless,
}

/// The install-level policy (controller flags, chart values `function-controller.templatePolicy`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplatePolicy {
    /// Restricted (checked) or Kubeless (copied through).
    pub mode: PolicyMode,
    /// `privileged: true` containers.
    pub allow_privileged: bool,
    /// `allowPrivilegeEscalation: true`.
    pub allow_privilege_escalation: bool,
    /// `hostNetwork: true`.
    pub allow_host_network: bool,
    /// `hostPID: true`.
    pub allow_host_pid: bool,
    /// `hostIPC: true`.
    pub allow_host_ipc: bool,
    /// `hostPath` volumes.
    pub allow_host_path: bool,
    /// Container ports with a `hostPort`.
    pub allow_host_ports: bool,
    /// `runAsUser: 0` or `runAsNonRoot: false`.
    pub allow_root: bool,
    /// Capabilities a container may add besides [`ALWAYS_ALLOWED_CAPABILITY`] (`ALL` allows any).
    pub allowed_capabilities: Vec<String>,
    /// ServiceAccounts a template may name besides its namespace's `default`.
    pub allowed_service_accounts: Vec<String>,
}

/// One field of a template the policy refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Field path in the Function, e.g. `spec.deployment.spec.template.spec.hostNetwork`.
    pub path: String,
    /// What it asks for.
    pub what: String,
    /// The chart value that allows it.
    pub allow_with: &'static str,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} asks for {} (the install allows it with function-controller.templatePolicy.{})",
            self.path, self.what, self.allow_with
        )
    }
}

impl TemplatePolicy {
    /// Every field of `template` (the Function's own `spec.deployment`, before the controller's
    /// defaults) this policy refuses; empty when it passes.
    pub fn check(&self, template: &Deployment) -> Vec<Refusal> {
        let mut out = Vec::new();
        if self.mode == PolicyMode::Kubeless {
            return out;
        }
        let Some(pod) = template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
        else {
            return out;
        };
        self.check_pod(pod, &mut out);
        out
    }

    fn check_pod(&self, pod: &PodSpec, out: &mut Vec<Refusal>) {
        let mut refuse = |field: &str, what: &str, allow_with: &'static str| {
            out.push(Refusal {
                path: format!("{TEMPLATE_PATH}.{field}"),
                what: what.into(),
                allow_with,
            });
        };
        for (on, allowed, field, what, allow_with) in [
            (
                pod.host_network,
                self.allow_host_network,
                "hostNetwork",
                "the node's network namespace",
                "allowHostNetwork",
            ),
            (
                pod.host_pid,
                self.allow_host_pid,
                "hostPID",
                "the node's process namespace",
                "allowHostPID",
            ),
            (
                pod.host_ipc,
                self.allow_host_ipc,
                "hostIPC",
                "the node's IPC namespace",
                "allowHostIPC",
            ),
        ] {
            if on == Some(true) && !allowed {
                refuse(field, what, allow_with);
            }
        }
        if !self.allow_host_path {
            for (i, v) in pod.volumes.iter().flatten().enumerate() {
                if let Some(hp) = &v.host_path {
                    refuse(
                        &format!("volumes[{i}].hostPath"),
                        &format!("a directory of the node ({})", hp.path),
                        "allowHostPath",
                    );
                }
            }
        }
        for (field, name) in [
            ("serviceAccountName", pod.service_account_name.as_deref()),
            ("serviceAccount", pod.service_account.as_deref()),
        ] {
            if let Some(sa) = name.filter(|n| !n.is_empty() && *n != "default")
                && !self.allowed_service_accounts.iter().any(|a| a == sa)
            {
                refuse(
                    field,
                    &format!("ServiceAccount {sa:?} instead of the namespace's default"),
                    "allowedServiceAccounts",
                );
            }
        }
        if let Some(sc) = &pod.security_context {
            self.check_pod_security(sc, out);
        }
        for (list, containers) in [
            ("containers", Some(&pod.containers)),
            ("initContainers", pod.init_containers.as_ref()),
        ] {
            for (i, c) in containers.into_iter().flatten().enumerate() {
                self.check_container(&format!("{list}[{i}]"), c, out);
            }
        }
    }

    fn check_pod_security(&self, sc: &PodSecurityContext, out: &mut Vec<Refusal>) {
        if self.allow_root {
            return;
        }
        if sc.run_as_user == Some(0) {
            out.push(root("securityContext.runAsUser"));
        }
        if sc.run_as_non_root == Some(false) {
            out.push(root("securityContext.runAsNonRoot"));
        }
    }

    fn check_container(&self, at: &str, c: &Container, out: &mut Vec<Refusal>) {
        let path = |field: &str| format!("{TEMPLATE_PATH}.{at}.{field}");
        if !self.allow_host_ports {
            for (i, p) in c.ports.iter().flatten().enumerate() {
                if p.host_port.is_some_and(|h| h != 0) {
                    out.push(Refusal {
                        path: path(&format!("ports[{i}].hostPort")),
                        what: "a port of the node".into(),
                        allow_with: "allowHostPorts",
                    });
                }
            }
        }
        let Some(sc) = &c.security_context else {
            return;
        };
        self.check_container_security(sc, &path, out);
    }

    fn check_container_security(
        &self,
        sc: &SecurityContext,
        path: &dyn Fn(&str) -> String,
        out: &mut Vec<Refusal>,
    ) {
        if sc.privileged == Some(true) && !self.allow_privileged {
            out.push(Refusal {
                path: path("securityContext.privileged"),
                what: "a privileged container".into(),
                allow_with: "allowPrivileged",
            });
        }
        if sc.allow_privilege_escalation == Some(true) && !self.allow_privilege_escalation {
            out.push(Refusal {
                path: path("securityContext.allowPrivilegeEscalation"),
                what: "privilege escalation".into(),
                allow_with: "allowPrivilegeEscalation",
            });
        }
        for (i, cap) in sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            if !self.capability_allowed(cap) {
                out.push(Refusal {
                    path: path(&format!("securityContext.capabilities.add[{i}]")),
                    what: format!("the capability {cap}"),
                    allow_with: "allowedCapabilities",
                });
            }
        }
        if !self.allow_root {
            let mut r = |field: &str| {
                let mut refusal = root("");
                refusal.path = path(field);
                out.push(refusal);
            };
            if sc.run_as_user == Some(0) {
                r("securityContext.runAsUser");
            }
            if sc.run_as_non_root == Some(false) {
                r("securityContext.runAsNonRoot");
            }
        }
    }

    fn capability_allowed(&self, cap: &str) -> bool {
        let norm = |c: &str| c.trim_start_matches("CAP_").to_ascii_uppercase();
        let cap = norm(cap);
        cap == ALWAYS_ALLOWED_CAPABILITY
            || self
                .allowed_capabilities
                .iter()
                .any(|a| norm(a) == cap || norm(a) == "ALL")
    }
}

fn root(field: &str) -> Refusal {
    Refusal {
        path: format!("{TEMPLATE_PATH}.{field}"),
        what: "running as root".into(),
        allow_with: "allowRoot",
    }
}

/// The refusals as one condition message.
pub fn message(refusals: &[Refusal]) -> String {
    let list: Vec<String> = refusals.iter().map(ToString::to_string).collect();
    format!(
        "the install's pod template policy refuses the template: {}",
        list.join("; ")
    )
}

/// Flags of the policy (flattened into the controller's flags).
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// `restricted`: refuse templates that ask for host access unless allowed below;
    /// `kubeless`: copy templates through unchecked, as Kubeless did.
    #[arg(
        long = "template-policy",
        env = "KUBELESS_TEMPLATE_POLICY",
        value_enum,
        default_value_t = PolicyMode::Restricted
    )]
    pub mode: PolicyMode,
    /// Allow `privileged: true` containers.
    #[arg(long = "template-allow-privileged", env = "KUBELESS_TEMPLATE_ALLOW_PRIVILEGED", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_privileged: bool,
    /// Allow `allowPrivilegeEscalation: true`.
    #[arg(long = "template-allow-privilege-escalation", env = "KUBELESS_TEMPLATE_ALLOW_PRIVILEGE_ESCALATION", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_privilege_escalation: bool,
    /// Allow `hostNetwork: true`.
    #[arg(long = "template-allow-host-network", env = "KUBELESS_TEMPLATE_ALLOW_HOST_NETWORK", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_host_network: bool,
    /// Allow `hostPID: true`.
    #[arg(long = "template-allow-host-pid", env = "KUBELESS_TEMPLATE_ALLOW_HOST_PID", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_host_pid: bool,
    /// Allow `hostIPC: true`.
    #[arg(long = "template-allow-host-ipc", env = "KUBELESS_TEMPLATE_ALLOW_HOST_IPC", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_host_ipc: bool,
    /// Allow `hostPath` volumes.
    #[arg(long = "template-allow-host-path", env = "KUBELESS_TEMPLATE_ALLOW_HOST_PATH", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_host_path: bool,
    /// Allow container ports with a `hostPort`.
    #[arg(long = "template-allow-host-ports", env = "KUBELESS_TEMPLATE_ALLOW_HOST_PORTS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_host_ports: bool,
    /// Allow `runAsUser: 0` and `runAsNonRoot: false`.
    #[arg(long = "template-allow-root", env = "KUBELESS_TEMPLATE_ALLOW_ROOT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_root: bool,
    /// Capabilities a template may add besides NET_BIND_SERVICE, comma-separated (`ALL`: any).
    #[arg(
        long = "template-allowed-capabilities",
        env = "KUBELESS_TEMPLATE_ALLOWED_CAPABILITIES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub allowed_capabilities: Vec<String>,
    /// ServiceAccounts a template may name besides `default`, comma-separated.
    #[arg(
        long = "template-allowed-service-accounts",
        env = "KUBELESS_TEMPLATE_ALLOWED_SERVICE_ACCOUNTS",
        value_delimiter = ',',
        default_value = ""
    )]
    pub allowed_service_accounts: Vec<String>,
}

impl From<PolicyArgs> for TemplatePolicy {
    fn from(a: PolicyArgs) -> Self {
        let PolicyArgs {
            mode,
            allow_privileged,
            allow_privilege_escalation,
            allow_host_network,
            allow_host_pid,
            allow_host_ipc,
            allow_host_path,
            allow_host_ports,
            allow_root,
            allowed_capabilities,
            allowed_service_accounts,
        } = a;
        let list = |v: Vec<String>| -> Vec<String> {
            v.into_iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        Self {
            mode,
            allow_privileged,
            allow_privilege_escalation,
            allow_host_network,
            allow_host_pid,
            allow_host_ipc,
            allow_host_path,
            allow_host_ports,
            allow_root,
            allowed_capabilities: list(allowed_capabilities),
            allowed_service_accounts: list(allowed_service_accounts),
        }
    }
}

#[cfg(test)]
mod tests;
