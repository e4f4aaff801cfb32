//! Container mode: a Pod's containers run from their real images with podman, instead of as
//! local processes chosen by the image map.
//!
//! Every container shares the host network (`--network host`) and is told to bind its pod
//! address (`DEVCLUSTER_POD_IP`, `KUBELESS_LISTEN_ADDRESS`), so Services, Endpoints and probes
//! reach it exactly as they reach a process. Volumes are bind mounts of the same pod folders
//! process mode uses, at their real `mountPath`s, and the ServiceAccount files are mounted at
//! `/var/run/secrets/kubernetes.io/serviceaccount` with `KUBERNETES_SERVICE_HOST/PORT` naming
//! the devcluster API server, so in-cluster clients work unchanged.
//!
//! A container is made with `podman create` (its errors become `CreateContainerError`) and run
//! with `podman start --attach`, whose output goes to the container's log as a process's does.
//! Stopping is `podman stop --time GRACE` (SIGTERM, SIGKILL after the grace period). Every
//! container carries the label [`STATE_LABEL`] naming the runner's work folder, so a runner
//! that died without cleaning up removes its leftovers when it starts again.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSecurityContext};
use tokio::process::Command;

use crate::spec::{
    ConfigProblem, ENV_BIND_ADDRESS, ENV_POD_IP, PodFacts, RefData, expand_dollar_vars,
    resolve_container_env,
};

/// Label on every container devcluster creates: the runner's work folder.
pub const STATE_LABEL: &str = "io.devcluster.state-dir";
/// Label with the pod's uid.
pub const POD_UID_LABEL: &str = "io.devcluster.pod-uid";

/// How pods run.
#[derive(Clone, Debug, Default)]
pub enum PodRuntime {
    /// As local processes chosen by the image map (the default).
    #[default]
    Process,
    /// From their images, with podman.
    Container(ContainerRuntime),
}

/// Settings of container mode.
#[derive(Clone, Debug)]
pub struct ContainerRuntime {
    /// The podman program (`podman`, found on PATH, unless a path is given).
    pub podman: String,
}

impl Default for ContainerRuntime {
    fn default() -> Self {
        Self {
            podman: "podman".into(),
        }
    }
}

/// Why a container could not be made ready to start: its waiting reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

impl From<ConfigProblem> for Problem {
    fn from(p: ConfigProblem) -> Self {
        Self {
            reason: p.reason,
            message: p.message,
        }
    }
}

/// The image pull policy Kubernetes applies: the given one, else `Always` for `:latest` or
/// no tag, `IfNotPresent` otherwise.
pub fn pull_policy(image: &str, policy: Option<&str>) -> &'static str {
    match policy {
        Some("Always") => "Always",
        Some("Never") => "Never",
        Some("IfNotPresent") => "IfNotPresent",
        _ => {
            if image.contains('@') {
                return "IfNotPresent";
            }
            let last = image.rsplit('/').next().unwrap_or(image);
            match last.split_once(':') {
                Some((_, tag)) if tag != "latest" => "IfNotPresent",
                _ => "Always",
            }
        }
    }
}

/// True when the image's registry is on this machine (plain HTTP is fine there).
pub fn is_loopback_registry(image: &str) -> bool {
    let Some((host, _)) = image.split_once('/') else {
        return false;
    };
    let host_only = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    host_only == "localhost"
        || host_only == "[::1]"
        || host_only
            .parse::<Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What the runner learns about an image before it creates a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// `sha256:...`
    pub id: String,
    /// The manifest digest podman pulled it by (`sha256:...`); empty when it does not know one.
    pub digest: String,
    /// The image's `USER`, as written (may be empty, a name, or `uid[:gid]`).
    pub user: String,
}

async fn podman_output(
    rt: &ContainerRuntime,
    args: &[&str],
) -> Result<std::process::Output, String> {
    Command::new(&rt.podman)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("running {} {}: {e}", rt.podman, args.join(" ")))
}

fn stderr_text(out: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if text.is_empty() {
        format!("exit status {}", out.status)
    } else {
        text
    }
}

async fn inspect_image(rt: &ContainerRuntime, image: &str) -> Result<Option<ImageInfo>, String> {
    let out = podman_output(
        rt,
        &[
            "image",
            "inspect",
            "--format",
            "{{.Id}} {{.Digest}} {{.User}}",
            image,
        ],
    )
    .await?;
    if !out.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.lines().next().unwrap_or("").splitn(3, ' ');
    let id = fields.next().unwrap_or("").trim();
    let digest = fields.next().unwrap_or("").trim();
    Ok(Some(ImageInfo {
        id: format!("sha256:{}", id.trim_start_matches("sha256:")),
        digest: if digest.starts_with("sha256:") {
            digest.to_string()
        } else {
            String::new()
        },
        user: fields.next().unwrap_or("").trim().to_string(),
    }))
}

/// Makes `image` present in podman's storage as `policy` says: pulls it (`--tls-verify=false`
/// for loopback registries, logged in with the auth file `authfile` gives, which is asked for
/// only when a pull happens) or uses what is there. Errors are `ErrImagePull` /
/// `ErrImageNeverPull` problems.
pub async fn ensure_image(
    rt: &ContainerRuntime,
    image: &str,
    policy: &str,
    authfile: impl std::future::Future<Output = Option<std::path::PathBuf>>,
) -> Result<ImageInfo, Problem> {
    let pull_failed = |message: String| Problem {
        reason: "ErrImagePull",
        message,
    };
    if image.is_empty() {
        return Err(Problem {
            reason: "InvalidImageName",
            message: "the container has no image".into(),
        });
    }
    if policy != "Always"
        && let Some(info) = inspect_image(rt, image).await.map_err(pull_failed)?
    {
        return Ok(info);
    }
    if policy == "Never" {
        return Err(Problem {
            reason: "ErrImageNeverPull",
            message: format!("container image {image:?} is not present with pull policy of Never"),
        });
    }
    let mut args = vec!["pull", "--quiet"];
    if is_loopback_registry(image) {
        args.push("--tls-verify=false");
    }
    let authfile = authfile.await.map(|p| p.to_string_lossy().into_owned());
    if let Some(path) = &authfile {
        args.extend(["--authfile", path.as_str()]);
    }
    args.push(image);
    let out = podman_output(rt, &args).await.map_err(pull_failed)?;
    if !out.status.success() {
        return Err(pull_failed(format!(
            "failed to pull image {image:?}: {}",
            stderr_text(&out)
        )));
    }
    inspect_image(rt, image)
        .await
        .map_err(pull_failed)?
        .ok_or_else(|| pull_failed(format!("image {image:?} is not in storage after its pull")))
}

/// The registry credentials of a pod's image pull Secrets as one auth file for
/// `podman pull --authfile` (`{"auths": {REGISTRY: {"auth": ...}}}`). A
/// `kubernetes.io/dockerconfigjson` Secret holds that document under `.dockerconfigjson`, a
/// legacy `kubernetes.io/dockercfg` one the inner map under `.dockercfg`. The first Secret naming
/// a registry wins (the kubelet tries them in order). A Secret holding neither is an error
/// naming it; the others still count.
pub fn pull_auths(
    secrets: &[k8s_openapi::api::core::v1::Secret],
) -> (serde_json::Value, Vec<String>) {
    let mut auths = serde_json::Map::new();
    let mut problems = Vec::new();
    for secret in secrets {
        let name = secret.metadata.name.as_deref().unwrap_or("");
        let data = secret.data.as_ref();
        let entries = if let Some(v) = data.and_then(|d| d.get(".dockerconfigjson")) {
            serde_json::from_slice::<serde_json::Value>(&v.0)
                .ok()
                .and_then(|doc| doc.get("auths").and_then(|a| a.as_object()).cloned())
        } else if let Some(v) = data.and_then(|d| d.get(".dockercfg")) {
            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&v.0).ok()
        } else {
            None
        };
        match entries {
            Some(entries) => {
                for (registry, auth) in entries {
                    auths.entry(registry).or_insert(auth);
                }
            }
            None => problems.push(format!(
                "image pull secret {name:?} holds no registry credentials (.dockerconfigjson or .dockercfg in JSON)"
            )),
        }
    }
    (serde_json::json!({ "auths": auths }), problems)
}

/// A volume mount: container path, host path, read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub container_path: String,
    pub host_path: std::path::PathBuf,
    pub read_only: bool,
}

/// Everything `podman create` needs besides the image.
#[derive(Clone, Debug)]
pub struct CreateInput<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub image_info: &'a ImageInfo,
    pub container: &'a Container,
    pub pod_security: Option<&'a PodSecurityContext>,
    pub facts: &'a PodFacts,
    pub refs: &'a RefData,
    pub mounts: &'a [Mount],
    /// Env every container gets first (the runner's extra env).
    pub extra_env: &'a BTreeMap<String, String>,
    /// The API server as in-cluster clients see it: host and port.
    pub api_server: Option<(String, u16)>,
    pub grace: Duration,
    pub state_dir: &'a str,
}

/// `podman create` arguments and the env the podman process must carry: values go through
/// podman's own environment (`--env NAME`), so secrets never show on a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSpec {
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// Builds the `podman create` command for one container (pure).
pub fn create_spec(input: &CreateInput<'_>) -> Result<CreateSpec, Problem> {
    let c = input.container;
    let mut env: BTreeMap<String, String> = input.extra_env.clone();
    if let Some(ip) = input.facts.pod_ip {
        env.insert(ENV_BIND_ADDRESS.to_string(), ip.to_string());
    }
    env.insert("HOSTNAME".into(), input.facts.name.clone());
    if let Some((host, port)) = &input.api_server {
        env.insert("KUBERNETES_SERVICE_HOST".into(), host.clone());
        env.insert("KUBERNETES_SERVICE_PORT".into(), port.to_string());
        env.insert("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string());
    }
    for (k, v) in resolve_container_env(c, input.facts, input.refs)? {
        env.insert(k, v);
    }
    // The pod address is authoritative: nothing may override it.
    if let Some(ip) = input.facts.pod_ip {
        env.insert(ENV_POD_IP.to_string(), ip.to_string());
    }

    let mut args: Vec<String> = vec![
        "create".into(),
        "--name".into(),
        input.name.into(),
        "--network".into(),
        "host".into(),
        "--pull".into(),
        "never".into(),
        "--label".into(),
        format!("{STATE_LABEL}={}", input.state_dir),
        "--label".into(),
        format!("{POD_UID_LABEL}={}", input.facts.uid),
        "--stop-timeout".into(),
        input.grace.as_secs().to_string(),
        // Kubernetes gives a read-only root file system no writable /tmp or /run.
        "--read-only-tmpfs=false".into(),
    ];
    // `stdin: true`: the container's stdin stays open for `kubectl attach -i`, fed through the
    // runner's `podman start --attach --interactive`.
    if c.stdin == Some(true) {
        args.push("--interactive".into());
    }
    for k in env.keys() {
        args.push("--env".into());
        args.push(k.clone());
    }
    for m in input.mounts {
        let mut spec = format!("{}:{}", m.host_path.display(), m.container_path);
        if m.read_only {
            spec.push_str(":ro");
        }
        args.push("--volume".into());
        args.push(spec);
    }
    if let Some(w) = c.working_dir.as_deref().filter(|w| !w.is_empty()) {
        args.push("--workdir".into());
        args.push(w.to_string());
    }
    security_args(input, &mut args)?;
    resource_args(c, &mut args)?;

    // Kubernetes rules: command replaces ENTRYPOINT (and drops CMD), args replaces CMD.
    let expand = |v: &Vec<String>| -> Vec<String> {
        v.iter().map(|s| expand_dollar_vars(s, &env)).collect()
    };
    if let Some(command) = &c.command {
        let json = serde_json::to_string(&expand(command)).map_err(|e| Problem {
            reason: "CreateContainerConfigError",
            message: format!("container {:?} command: {e}", c.name),
        })?;
        args.push("--entrypoint".into());
        args.push(json);
    }
    args.push(input.image.to_string());
    if let Some(a) = &c.args {
        args.extend(expand(a));
    }
    Ok(CreateSpec { args, env })
}

fn config_problem(message: String) -> Problem {
    Problem {
        reason: "CreateContainerConfigError",
        message,
    }
}

/// securityContext, container values over pod values, as the kubelet merges them.
fn security_args(input: &CreateInput<'_>, args: &mut Vec<String>) -> Result<(), Problem> {
    let c = input.container;
    let sc = c.security_context.as_ref();
    let psc = input.pod_security;
    let run_as_user = sc
        .and_then(|s| s.run_as_user)
        .or(psc.and_then(|p| p.run_as_user));
    let run_as_group = sc
        .and_then(|s| s.run_as_group)
        .or(psc.and_then(|p| p.run_as_group));
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|p| p.run_as_non_root))
        .unwrap_or(false);
    if non_root {
        match run_as_user {
            Some(0) => {
                return Err(config_problem(
                    "container's runAsUser breaks non-root policy".into(),
                ));
            }
            Some(_) => {}
            None => {
                let user = input.image_info.user.split(':').next().unwrap_or("");
                match user {
                    "" | "root" | "0" => {
                        return Err(config_problem(
                            "container has runAsNonRoot and image will run as root".into(),
                        ));
                    }
                    u if u.parse::<u32>().is_err() => {
                        return Err(config_problem(format!(
                            "container has runAsNonRoot and image has non-numeric user ({u}), cannot verify user is non-root"
                        )));
                    }
                    _ => {}
                }
            }
        }
    }
    match (run_as_user, run_as_group) {
        (Some(u), Some(g)) => args.extend(["--user".into(), format!("{u}:{g}")]),
        (Some(u), None) => args.extend(["--user".into(), u.to_string()]),
        (None, Some(g)) => {
            // Only the group is set: keep the image's user.
            let user = input.image_info.user.split(':').next().unwrap_or("");
            let user = if user.is_empty() { "0" } else { user };
            args.extend(["--user".into(), format!("{user}:{g}")]);
        }
        (None, None) => {}
    }
    let mut groups: Vec<i64> = psc
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(fs_group) = psc.and_then(|p| p.fs_group) {
        groups.push(fs_group);
    }
    for g in groups {
        args.extend(["--group-add".into(), g.to_string()]);
    }
    let Some(sc) = sc else {
        return seccomp_args(None, psc, args);
    };
    if sc.privileged == Some(true) {
        args.push("--privileged".into());
    }
    if sc.read_only_root_filesystem == Some(true) {
        args.push("--read-only".into());
    }
    if sc.allow_privilege_escalation == Some(false) {
        args.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    if let Some(caps) = &sc.capabilities {
        for cap in caps.drop.iter().flatten() {
            args.extend(["--cap-drop".into(), cap.to_string()]);
        }
        for cap in caps.add.iter().flatten() {
            args.extend(["--cap-add".into(), cap.to_string()]);
        }
    }
    seccomp_args(Some(sc), psc, args)
}

fn seccomp_args(
    sc: Option<&k8s_openapi::api::core::v1::SecurityContext>,
    psc: Option<&PodSecurityContext>,
    args: &mut Vec<String>,
) -> Result<(), Problem> {
    let profile = sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .or(psc.and_then(|p| p.seccomp_profile.as_ref()));
    match profile.map(|p| p.type_.as_str()) {
        // podman's default profile is the runtime default.
        None | Some("RuntimeDefault") => Ok(()),
        Some("Unconfined") => {
            args.extend(["--security-opt".into(), "seccomp=unconfined".into()]);
            Ok(())
        }
        Some(other) => Err(config_problem(format!(
            "seccomp profile type {other:?} is not supported by devcluster's container mode"
        ))),
    }
}

/// Memory and CPU limits become podman's `--memory` and `--cpus`.
fn resource_args(c: &Container, args: &mut Vec<String>) -> Result<(), Problem> {
    let Some(limits) = c.resources.as_ref().and_then(|r| r.limits.as_ref()) else {
        return Ok(());
    };
    if let Some(q) = limits.get("memory") {
        let bytes = crate::podmetrics::parse_quantity(&q.0)
            .ok_or_else(|| config_problem(format!("memory limit {:?} is not a quantity", q.0)))?;
        args.extend(["--memory".into(), format!("{}", bytes.round() as u64)]);
    }
    if let Some(q) = limits.get("cpu") {
        let cpus = crate::podmetrics::parse_quantity(&q.0)
            .ok_or_else(|| config_problem(format!("cpu limit {:?} is not a quantity", q.0)))?;
        args.extend(["--cpus".into(), format!("{cpus:.3}")]);
    }
    Ok(())
}

/// A podman container name for a pod's container (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`).
pub fn container_name(ns: &str, pod: &str, container: &str, uid: &str) -> String {
    let short: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect();
    let raw = format!("devcluster_{ns}_{pod}_{container}_{short}");
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Runs `podman create`; returns the container id, or a `CreateContainerError` problem.
pub async fn create(rt: &ContainerRuntime, spec: &CreateSpec) -> Result<String, Problem> {
    let problem = |message: String| Problem {
        reason: "CreateContainerError",
        message,
    };
    let out = Command::new(&rt.podman)
        .args(&spec.args)
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| {
            matches!(
                k.as_str(),
                "PATH" | "HOME" | "XDG_RUNTIME_DIR" | "CONTAINERS_CONF"
            )
        }))
        .envs(&spec.env)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| problem(format!("running {}: {e}", rt.podman)))?;
    if !out.status.success() {
        return Err(problem(stderr_text(&out)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `podman stop --time GRACE`: SIGTERM (or the image's stop signal), SIGKILL after `grace`.
pub async fn stop(rt: &ContainerRuntime, name: &str, grace: Duration) {
    let secs = grace.as_secs().to_string();
    let bound = grace + Duration::from_secs(15);
    match tokio::time::timeout(bound, podman_output(rt, &["stop", "--time", &secs, name])).await {
        Ok(Ok(out)) if !out.status.success() => {
            tracing::debug!(container = %name, error = %stderr_text(&out), "podman stop failed");
        }
        Ok(Err(e)) => tracing::warn!(container = %name, error = %e, "podman stop failed"),
        Err(_) => tracing::warn!(container = %name, "podman stop timed out"),
        Ok(Ok(_)) => {}
    }
}

/// `podman rm --force` (the container may be gone already).
pub async fn remove(rt: &ContainerRuntime, name: &str) {
    let bound = Duration::from_secs(30);
    if let Ok(Err(e)) = tokio::time::timeout(
        bound,
        podman_output(rt, &["rm", "--force", "--time", "0", name]),
    )
    .await
    {
        tracing::warn!(container = %name, error = %e, "podman rm failed");
    }
}

/// Removes containers a former runner with the same work folder left behind.
pub async fn remove_leftovers(rt: &ContainerRuntime, state_dir: &str) {
    let filter = format!("label={STATE_LABEL}={state_dir}");
    let out = match podman_output(rt, &["ps", "--all", "--quiet", "--filter", &filter]).await {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            tracing::warn!(error = %stderr_text(&o), "listing leftover containers failed");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "listing leftover containers failed");
            return;
        }
    };
    for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        tracing::info!(container = %id, "removing a container a former runner left");
        remove(rt, id).await;
    }
}

/// Whether podman runs at all (`podman version`), with its error when not.
pub async fn check(rt: &ContainerRuntime) -> Result<(), String> {
    let out = podman_output(rt, &["version", "--format", "{{.Client.Version}}"]).await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(stderr_text(&out))
    }
}

/// How a container ended, as podman recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExitState {
    pub exit_code: i32,
    /// The runtime's error, when it recorded one.
    pub error: String,
    pub oom_killed: bool,
    /// False when the command never ran (not found, not executable): podman leaves such a
    /// container `created`, exit code 0.
    pub started: bool,
}

/// The host pid of a started container's main process (`kubectl top` and the HPA measure it
/// and its descendants), waiting up to 5 s for podman to report it; None when the container
/// ended first or podman does not say.
pub async fn main_pid(rt: &ContainerRuntime, name: &str) -> Option<i32> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let out = podman_output(
            rt,
            &[
                "container",
                "inspect",
                "--format",
                "{{.State.Pid}}|{{.State.Status}}",
                name,
            ],
        )
        .await
        .ok()
        .filter(|o| o.status.success())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (pid, status) = text.trim().split_once('|')?;
        match pid.trim().parse::<i32>() {
            Ok(pid) if pid > 0 => return Some(pid),
            _ if matches!(status, "exited" | "stopped" | "removing") => return None,
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The exit code, start error and OOM kill of a finished container.
pub async fn exit_state(rt: &ContainerRuntime, name: &str) -> Option<ExitState> {
    let out = podman_output(
        rt,
        &[
            "container",
            "inspect",
            "--format",
            "{{.State.ExitCode}}|{{.State.OOMKilled}}|{{.State.Status}}|{{.State.Error}}",
            name,
        ],
    )
    .await
    .ok()
    .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.trim().splitn(4, '|');
    let exit_code = parts.next()?.trim().parse().ok()?;
    let oom_killed = parts.next() == Some("true");
    let started = parts.next() != Some("created");
    let error = parts.next().unwrap_or("").trim().to_string();
    Some(ExitState {
        exit_code,
        error,
        oom_killed,
        started,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;

    #[test]
    fn pull_policy_defaults_follow_kubernetes() {
        assert_eq!(pull_policy("a/b", None), "Always");
        assert_eq!(pull_policy("a/b:latest", None), "Always");
        assert_eq!(pull_policy("127.0.0.1:5000/a/b", None), "Always");
        assert_eq!(pull_policy("127.0.0.1:5000/a/b:1.0", None), "IfNotPresent");
        assert_eq!(pull_policy("a/b@sha256:00", None), "IfNotPresent");
        assert_eq!(pull_policy("a/b", Some("Never")), "Never");
    }

    #[test]
    fn loopback_registries() {
        assert!(is_loopback_registry("127.0.0.1:5000/a/b:1"));
        assert!(is_loopback_registry("localhost:5000/a"));
        assert!(is_loopback_registry("localhost/kubeless-rs/x:1"));
        assert!(!is_loopback_registry("docker.io/library/python:3"));
        assert!(!is_loopback_registry("python:3"));
    }

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).unwrap()
    }

    fn spec_of(c: &Container, info: &ImageInfo) -> Result<CreateSpec, Problem> {
        let facts = PodFacts {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u1".into(),
            pod_ip: Some(Ipv4Addr::new(127, 3, 0, 4)),
            ..Default::default()
        };
        let mut refs = RefData::default();
        refs.secrets.insert(
            "s".into(),
            Secret {
                data: Some([("pw".to_string(), ByteString(b"hunter2".to_vec()))].into()),
                ..Default::default()
            },
        );
        let mounts = [Mount {
            container_path: "/etc/cfg".into(),
            host_path: "/w/vol/cfg".into(),
            read_only: true,
        }];
        let extra = BTreeMap::new();
        create_spec(&CreateInput {
            name: "n",
            image: "img:1",
            image_info: info,
            container: c,
            pod_security: None,
            facts: &facts,
            refs: &refs,
            mounts: &mounts,
            extra_env: &extra,
            api_server: Some(("127.0.0.1".into(), 6443)),
            grace: Duration::from_secs(5),
            state_dir: "/state",
        })
    }

    #[test]
    fn create_args_carry_command_env_mounts_and_limits() {
        let c = container(serde_json::json!({
            "name": "main",
            "command": ["sh", "-c"],
            "args": ["echo $(DEVCLUSTER_POD_IP) $$PW"],
            "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}}],
            "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}},
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": true,
                "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                "seccompProfile": {"type": "RuntimeDefault"}}
        }));
        let s = spec_of(&c, &ImageInfo::default()).unwrap();
        let joined = s.args.join(" ");
        assert_eq!(s.env["PW"], "hunter2");
        assert_eq!(s.env[ENV_POD_IP], "127.3.0.4");
        assert_eq!(s.env["KUBERNETES_SERVICE_PORT"], "6443");
        assert!(!joined.contains("hunter2"), "{joined}");
        for part in [
            "--network host",
            "--env PW",
            "--volume /w/vol/cfg:/etc/cfg:ro",
            "--memory 67108864",
            "--cpus 0.500",
            "--user 1000",
            "--read-only ",
            "--security-opt no-new-privileges",
            "--cap-drop ALL",
            "--cap-add NET_BIND_SERVICE",
            "--stop-timeout 5",
            r#"--entrypoint ["sh","-c"] img:1"#,
        ] {
            assert!(joined.contains(part), "{part:?} not in {joined}");
        }
        // $(VAR) expands in args, after the image name; `$$` escapes.
        assert_eq!(s.args.last().unwrap(), "echo 127.3.0.4 $PW");
    }

    #[test]
    fn run_as_non_root_checks_the_image_user() {
        let c =
            container(serde_json::json!({"name": "m", "securityContext": {"runAsNonRoot": true}}));
        let root = ImageInfo {
            id: "sha256:1".into(),
            digest: String::new(),
            user: String::new(),
        };
        let e = spec_of(&c, &root).unwrap_err();
        assert_eq!(e.reason, "CreateContainerConfigError");
        assert!(e.message.contains("will run as root"), "{}", e.message);
        let named = ImageInfo {
            user: "app".into(),
            ..root.clone()
        };
        assert!(
            spec_of(&c, &named)
                .unwrap_err()
                .message
                .contains("non-numeric")
        );
        let numeric = ImageInfo {
            user: "65532:65532".into(),
            ..root
        };
        let s = spec_of(&c, &numeric).unwrap();
        assert!(!s.args.iter().any(|a| a == "--user"));
        assert!(!s.args.iter().any(|a| a == "--entrypoint"));
        assert_eq!(s.args.last().unwrap(), "img:1");
    }

    #[test]
    fn pull_secrets_merge_into_one_auth_file() {
        let secret = |name: &str, key: &str, value: serde_json::Value| Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                key.to_string(),
                ByteString(value.to_string().into_bytes()),
            )])),
            ..Default::default()
        };
        let secrets = [
            secret(
                "new",
                ".dockerconfigjson",
                serde_json::json!({"auths": {"r1:5000": {"auth": "first"}}}),
            ),
            secret(
                "legacy",
                ".dockercfg",
                serde_json::json!({"r1:5000": {"auth": "second"}, "r2": {"auth": "legacy"}}),
            ),
            secret("opaque", "token", serde_json::json!("x")),
        ];
        let (auths, problems) = pull_auths(&secrets);
        assert_eq!(
            auths,
            serde_json::json!({"auths": {"r1:5000": {"auth": "first"}, "r2": {"auth": "legacy"}}})
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("\"opaque\""), "{problems:?}");
    }

    #[test]
    fn names_are_podman_safe() {
        assert_eq!(
            container_name("ns", "web-1", "main", "ab-cd-ef12-34"),
            "devcluster_ns_web-1_main_abcdef12"
        );
    }
}
