//! Pure translation of a container spec into a local process: command line,
//! environment and working directory, with volume mount paths mapped to the
//! pod's folders.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, ObjectFieldSelector, Secret};

use crate::image_map::ImageEntry;

/// Env var holding the pod's loopback address in every container.
pub const ENV_POD_IP: &str = "DEVCLUSTER_POD_IP";
/// Env var the kubeless runtime reads for its bind address; set to the pod IP.
pub const ENV_BIND_ADDRESS: &str = "KUBELESS_LISTEN_ADDRESS";

/// Facts about the pod that env `fieldRef`s and `$(VAR)`s may refer to.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub pod_ip: Option<Ipv4Addr>,
    pub host_ip: String,
    pub node_name: String,
    pub service_account: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// ConfigMaps and Secrets of the pod's namespace that env and volumes refer to.
#[derive(Clone, Debug, Default)]
pub struct RefData {
    pub config_maps: BTreeMap<String, ConfigMap>,
    pub secrets: BTreeMap<String, Secret>,
}

impl RefData {
    /// The value of `key` in ConfigMap `name` (data, then binaryData as UTF-8).
    pub fn config_map_value(&self, name: &str, key: &str) -> Option<String> {
        let cm = self.config_maps.get(name)?;
        if let Some(v) = cm.data.as_ref().and_then(|d| d.get(key)) {
            return Some(v.clone());
        }
        cm.binary_data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    }

    /// The decoded value of `key` in Secret `name` (data, then stringData).
    pub fn secret_value(&self, name: &str, key: &str) -> Option<String> {
        let s = self.secrets.get(name)?;
        if let Some(v) = s.data.as_ref().and_then(|d| d.get(key)) {
            return Some(String::from_utf8_lossy(&v.0).into_owned());
        }
        s.string_data.as_ref().and_then(|d| d.get(key)).cloned()
    }
}

/// Mount paths of a container and the host folders they stand for.
#[derive(Clone, Debug, Default)]
pub struct PathMap {
    /// (mountPath without trailing '/', host path), longest mountPath first.
    mounts: Vec<(String, String)>,
}

impl PathMap {
    pub fn new(pairs: impl IntoIterator<Item = (String, PathBuf)>) -> Self {
        let mut mounts: Vec<(String, String)> = pairs
            .into_iter()
            .filter_map(|(m, p)| {
                let m = m.trim_end_matches('/').to_string();
                // Mapping "/" itself would rewrite every absolute path.
                (!m.is_empty()).then(|| (m, p.to_string_lossy().into_owned()))
            })
            .collect();
        mounts.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Self { mounts }
    }

    /// Rewrites every occurrence of a mount path that stands as a path of its
    /// own (the whole string, a prefix followed by `/`, or a word inside a
    /// shell command line such as `--prefix=/kubeless` or `cp /src/a /kubeless/`).
    pub fn map(&self, s: &str) -> String {
        if self.mounts.is_empty() {
            return s.to_string();
        }
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        let bytes = s.as_bytes();
        while i < s.len() {
            let prev_ok = i == 0 || is_left_boundary(bytes[i - 1]);
            let mut replaced = false;
            if prev_ok && bytes[i] == b'/' {
                for (mount, host) in &self.mounts {
                    if s[i..].starts_with(mount.as_str()) {
                        let end = i + mount.len();
                        if end == s.len() || is_right_boundary(bytes[end]) {
                            out.push_str(host);
                            i = end;
                            replaced = true;
                            break;
                        }
                    }
                }
            }
            if !replaced {
                // Advance by one whole char to stay on UTF-8 boundaries.
                let ch_len = s[i..].chars().next().map(char::len_utf8).unwrap_or(1);
                out.push_str(&s[i..i + ch_len]);
                i += ch_len;
            }
        }
        out
    }
}

fn is_left_boundary(b: u8) -> bool {
    b.is_ascii_whitespace() || b"=:'\"(;,`<>|&".contains(&b)
}

fn is_right_boundary(b: u8) -> bool {
    b.is_ascii_whitespace() || b"/'\":;),`<>|&".contains(&b)
}

/// What to start for one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Working directory as mapped; may not exist yet.
    pub working_dir: Option<String>,
    /// `stdin: true`: the process gets a pipe that `kubectl attach -i` writes to.
    pub stdin: bool,
    /// For a container: the command that runs an exec probe's command inside it
    /// (`podman exec NAME`); empty for a process, whose probes run on the host with its env.
    pub exec_prefix: Vec<String>,
}

/// Why a container cannot be started (status reason + message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    pub reason: &'static str,
    pub message: String,
}

impl ConfigProblem {
    fn config(message: String) -> Self {
        Self {
            reason: "CreateContainerConfigError",
            message,
        }
    }
}

/// Base environment the runner gives every container before image and container env.
#[derive(Clone, Debug, Default)]
pub struct BaseEnv {
    pub vars: BTreeMap<String, String>,
}

/// Builds the process for `container` run from image `entry`.
pub fn build_process(
    container: &Container,
    entry: &ImageEntry,
    pod: &PodFacts,
    refs: &RefData,
    base: &BaseEnv,
    paths: &PathMap,
) -> Result<ProcessSpec, ConfigProblem> {
    let mut env: BTreeMap<String, String> = base.vars.clone();
    if let Some(ip) = pod.pod_ip {
        env.insert(ENV_BIND_ADDRESS.to_string(), ip.to_string());
    }
    for (k, v) in &entry.env {
        env.insert(k.clone(), v.clone());
    }
    let container_env = resolve_container_env(container, pod, refs)?;
    for (k, v) in container_env {
        env.insert(k, v);
    }
    // The pod address is authoritative: nothing may override it.
    if let Some(ip) = pod.pod_ip {
        env.insert(ENV_POD_IP.to_string(), ip.to_string());
    }

    // Kubernetes rules: command replaces ENTRYPOINT (and drops CMD), args replaces CMD.
    let (head, tail): (Vec<String>, Vec<String>) = match (&container.command, &container.args) {
        (Some(c), Some(a)) => (c.clone(), a.clone()),
        (Some(c), None) => (c.clone(), Vec::new()),
        (None, Some(a)) => (entry.entrypoint.clone(), a.clone()),
        (None, None) => (entry.entrypoint.clone(), entry.cmd.clone()),
    };
    let expand_from = env.clone();
    let mut argv: Vec<String> = head
        .iter()
        .chain(tail.iter())
        .map(|s| paths.map(&expand_dollar_vars(s, &expand_from)))
        .collect();
    if argv.is_empty() {
        return Err(ConfigProblem::config(format!(
            "container {:?} has no command: the image map entry {:?} ({}) has no entrypoint or cmd and the container sets no command or args",
            container.name,
            entry.image,
            entry.source.display()
        )));
    }
    let program = argv.remove(0);
    let env = env.into_iter().map(|(k, v)| (k, paths.map(&v))).collect();
    let working_dir = container
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| entry.working_dir.clone())
        .map(|w| paths.map(&w));
    Ok(ProcessSpec {
        program,
        args: argv,
        env,
        working_dir,
        stdin: container.stdin == Some(true),
        exec_prefix: Vec::new(),
    })
}

/// The container's own env (envFrom, then env), `$(VAR)` expanded as Kubernetes does.
pub fn resolve_container_env(
    container: &Container,
    pod: &PodFacts,
    refs: &RefData,
) -> Result<Vec<(String, String)>, ConfigProblem> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |out: &mut BTreeMap<String, String>, k: String, v: String| {
        if !out.contains_key(&k) {
            order.push(k.clone());
        }
        out.insert(k, v);
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match refs.config_maps.get(&r.name) {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        set(&mut out, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(ConfigProblem::config(format!(
                        "configmap {:?} not found",
                        r.name
                    )));
                }
            }
        }
        if let Some(r) = &from.secret_ref {
            match refs.secrets.get(&r.name) {
                Some(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        set(
                            &mut out,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(ConfigProblem::config(format!(
                        "secret {:?} not found",
                        r.name
                    )));
                }
            }
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(value) = env_var_value(var, pod, refs, &out)? {
            set(&mut out, var.name.clone(), value);
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|k| out.get(&k).map(|v| (k.clone(), v.clone())))
        .collect())
}

fn env_var_value(
    var: &EnvVar,
    pod: &PodFacts,
    refs: &RefData,
    earlier: &BTreeMap<String, String>,
) -> Result<Option<String>, ConfigProblem> {
    let Some(from) = &var.value_from else {
        return Ok(Some(expand_dollar_vars(
            var.value.as_deref().unwrap_or(""),
            earlier,
        )));
    };
    if let Some(r) = &from.config_map_key_ref {
        return match refs.config_map_value(&r.name, &r.key) {
            Some(v) => Ok(Some(v)),
            None if r.optional == Some(true) => Ok(None),
            None => Err(ConfigProblem::config(format!(
                "env {}: key {:?} of configmap {:?} not found",
                var.name, r.key, r.name
            ))),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        return match refs.secret_value(&r.name, &r.key) {
            Some(v) => Ok(Some(v)),
            None if r.optional == Some(true) => Ok(None),
            None => Err(ConfigProblem::config(format!(
                "env {}: key {:?} of secret {:?} not found",
                var.name, r.key, r.name
            ))),
        };
    }
    if let Some(f) = &from.field_ref {
        return field_value(f, pod).map(Some).ok_or_else(|| {
            ConfigProblem::config(format!(
                "env {}: unsupported fieldRef {:?}",
                var.name, f.field_path
            ))
        });
    }
    if from.resource_field_ref.is_some() {
        // No resource accounting here: report "unlimited" as 0, like a node without limits would.
        return Ok(Some("0".to_string()));
    }
    Ok(Some(String::new()))
}

/// The value of a downward-API field path.
pub fn field_value(f: &ObjectFieldSelector, pod: &PodFacts) -> Option<String> {
    let path = f.field_path.as_str();
    let map_key = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(rest.to_string())
    };
    match path {
        "metadata.name" => Some(pod.name.clone()),
        "metadata.namespace" => Some(pod.namespace.clone()),
        "metadata.uid" => Some(pod.uid.clone()),
        "status.podIP" | "status.podIPs" => {
            Some(pod.pod_ip.map(|i| i.to_string()).unwrap_or_default())
        }
        "status.hostIP" | "status.hostIPs" => Some(pod.host_ip.clone()),
        "spec.nodeName" => Some(pod.node_name.clone()),
        "spec.serviceAccountName" => Some(pod.service_account.clone()),
        _ => {
            if let Some(k) = map_key("metadata.labels['") {
                return Some(pod.labels.get(&k).cloned().unwrap_or_default());
            }
            if let Some(k) = map_key("metadata.annotations['") {
                return Some(pod.annotations.get(&k).cloned().unwrap_or_default());
            }
            None
        }
    }
}

/// Kubernetes `$(VAR)` expansion: known vars are replaced, `$$` escapes `$`,
/// unknown references stay as written.
pub fn expand_dollar_vars(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(close) => {
                    let name = &inner[..close];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[close + 1..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapKeySelector, EnvFromSource, EnvVarSource, SecretEnvSource, SecretKeySelector,
    };

    fn paths() -> PathMap {
        PathMap::new([
            ("/kubeless".to_string(), PathBuf::from("/w/p/vol/kubeless")),
            ("/src".to_string(), PathBuf::from("/w/p/vol/src")),
            ("/src/deep/".to_string(), PathBuf::from("/w/p/vol/deep")),
        ])
    }

    #[test]
    fn path_mapping_whole_prefix_and_words() {
        let p = paths();
        assert_eq!(p.map("/kubeless"), "/w/p/vol/kubeless");
        assert_eq!(p.map("/kubeless/a.py"), "/w/p/vol/kubeless/a.py");
        assert_eq!(p.map("/kubelessx"), "/kubelessx");
        assert_eq!(p.map("/usr/kubeless"), "/usr/kubeless");
        assert_eq!(p.map("--prefix=/kubeless"), "--prefix=/w/p/vol/kubeless");
        assert_eq!(
            p.map("cp /src/* /kubeless/ && cat '/src/x'"),
            "cp /w/p/vol/src/* /w/p/vol/kubeless/ && cat '/w/p/vol/src/x'"
        );
        // Longest mount wins.
        assert_eq!(p.map("/src/deep/f"), "/w/p/vol/deep/f");
        assert_eq!(p.map("ünï /src"), "ünï /w/p/vol/src");
        assert_eq!(PathMap::default().map("/src"), "/src");
    }

    #[test]
    fn dollar_expansion() {
        let vars: BTreeMap<String, String> = [
            ("A".to_string(), "1".to_string()),
            ("POD_IP".to_string(), "127.1.0.2".to_string()),
        ]
        .into();
        assert_eq!(
            expand_dollar_vars("--bind=$(POD_IP)", &vars),
            "--bind=127.1.0.2"
        );
        assert_eq!(expand_dollar_vars("$(A)$(B)$$(A)$", &vars), "1$(B)$(A)$");
        assert_eq!(expand_dollar_vars("$(A", &vars), "$(A");
        assert_eq!(expand_dollar_vars("$HOME", &vars), "$HOME");
    }

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).unwrap()
    }

    fn facts() -> PodFacts {
        PodFacts {
            name: "web-abc".into(),
            namespace: "ns1".into(),
            uid: "u-1".into(),
            pod_ip: Some(Ipv4Addr::new(127, 1, 0, 7)),
            host_ip: "127.0.0.1".into(),
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        }
    }

    fn refs() -> RefData {
        let mut r = RefData::default();
        r.config_maps.insert(
            "cfg".into(),
            ConfigMap {
                data: Some(
                    [
                        ("k".to_string(), "cv".to_string()),
                        ("x".to_string(), "xv".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
        );
        r.secrets.insert(
            "sec".into(),
            Secret {
                data: Some([("pw".to_string(), ByteString(b"s3cret".to_vec()))].into()),
                ..Default::default()
            },
        );
        r
    }

    #[test]
    fn env_sources_resolve() {
        let mut c = container(serde_json::json!({"name": "c", "env": [
            {"name": "PLAIN", "value": "v-$(FROM_CM)"},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        ]}));
        c.env_from = Some(vec![EnvFromSource {
            config_map_ref: Some(k8s_openapi::api::core::v1::ConfigMapEnvSource {
                name: "cfg".into(),
                optional: None,
            }),
            prefix: Some("CM_".into()),
            secret_ref: Some(SecretEnvSource {
                name: "nope".into(),
                optional: Some(true),
            }),
        }]);
        let env = c.env.get_or_insert_with(Vec::new);
        env.insert(
            0,
            EnvVar {
                name: "FROM_CM".into(),
                value_from: Some(EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "cfg".into(),
                        key: "k".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                value: None,
            },
        );
        env.push(EnvVar {
            name: "PW".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "sec".into(),
                    key: "pw".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            value: None,
        });
        let got: BTreeMap<_, _> = resolve_container_env(&c, &facts(), &refs())
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(got["FROM_CM"], "cv");
        assert_eq!(got["PLAIN"], "v-cv");
        assert_eq!(got["NAME"], "web-abc");
        assert_eq!(got["NS"], "ns1");
        assert_eq!(got["IP"], "127.1.0.7");
        assert_eq!(got["APP"], "web");
        assert_eq!(got["PW"], "s3cret");
        assert_eq!(got["CM_x"], "xv");
    }

    #[test]
    fn missing_refs_are_config_errors_unless_optional() {
        let c = container(serde_json::json!({"name": "c", "env": [
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "missing"}}}]}));
        let err = resolve_container_env(&c, &facts(), &refs()).unwrap_err();
        assert_eq!(err.reason, "CreateContainerConfigError");
        assert!(err.message.contains("missing"), "{}", err.message);
        let c = container(serde_json::json!({"name": "c", "env": [
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "zz", "key": "k", "optional": true}}}]}));
        assert!(
            resolve_container_env(&c, &facts(), &refs())
                .unwrap()
                .is_empty()
        );
    }

    fn entry() -> ImageEntry {
        ImageEntry {
            image: "py:*".into(),
            entrypoint: vec!["python3".into()],
            cmd: vec!["-V".into()],
            working_dir: Some("/app".into()),
            env: [
                ("IMG".to_string(), "i".to_string()),
                ("NAME".to_string(), "img".to_string()),
            ]
            .into(),
            source: PathBuf::from("/m/base.yaml"),
        }
    }

    #[test]
    fn command_rules_follow_kubernetes() {
        let base = BaseEnv::default();
        let p = paths();
        let run = |c: serde_json::Value| {
            build_process(&container(c), &entry(), &facts(), &refs(), &base, &p).unwrap()
        };
        let s = run(serde_json::json!({"name": "c"}));
        assert_eq!(
            (s.program.as_str(), s.args.clone()),
            ("python3", vec!["-V".to_string()])
        );
        let s = run(
            serde_json::json!({"name": "c", "args": ["-m", "http.server", "--directory", "/src"]}),
        );
        assert_eq!(s.program, "python3");
        assert_eq!(
            s.args,
            vec!["-m", "http.server", "--directory", "/w/p/vol/src"]
        );
        let s = run(serde_json::json!({"name": "c", "command": ["sh", "-c"]}));
        assert_eq!(
            (s.program.as_str(), s.args.clone()),
            ("sh", vec!["-c".to_string()])
        );
        let s = run(
            serde_json::json!({"name": "c", "command": ["sh"], "args": ["-c", "echo $(NAME) > /kubeless/out"],
            "env": [{"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "DIR", "value": "/kubeless"}], "workingDir": "/src/sub"}),
        );
        assert_eq!(s.args, vec!["-c", "echo web-abc > /w/p/vol/kubeless/out"]);
        assert_eq!(
            s.env["NAME"], "web-abc",
            "container env wins over image env"
        );
        assert_eq!(s.env["IMG"], "i");
        assert_eq!(s.env["DIR"], "/w/p/vol/kubeless");
        assert_eq!(s.env[ENV_POD_IP], "127.1.0.7");
        assert_eq!(s.env[ENV_BIND_ADDRESS], "127.1.0.7");
        assert_eq!(s.working_dir.as_deref(), Some("/w/p/vol/src/sub"));
        let s = run(serde_json::json!({"name": "c"}));
        assert_eq!(s.working_dir.as_deref(), Some("/app"));
    }

    #[test]
    fn empty_command_is_reported() {
        let mut e = entry();
        e.entrypoint.clear();
        e.cmd.clear();
        let err = build_process(
            &container(serde_json::json!({"name": "c"})),
            &e,
            &facts(),
            &refs(),
            &BaseEnv::default(),
            &paths(),
        )
        .unwrap_err();
        assert!(err.message.contains("no command"));
    }
}
