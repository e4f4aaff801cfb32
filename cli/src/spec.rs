//! Pure builders: command-line flags -> Function, as Kubeless mapped them (env, resources,
//! secrets, node selectors, service account, image, ports go into the deployment and service
//! templates).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        EnvVar, ResourceRequirements, SecretVolumeSource, ServicePort, ServiceSpec, Volume,
        VolumeMount,
    },
    apimachinery::pkg::{api::resource::Quantity, util::intstr::IntOrString},
};
use kube::api::ObjectMeta;
use kubeless_api::function::DEFAULT_PORT;
use kubeless_api::{
    DeploymentTemplate, Function, FunctionSpec, ServiceTemplate, labels::function_labels,
};
use serde_json::{Map, Value};

use crate::{
    args::{FunctionFlags, PullPolicy},
    error::{Error, Result},
    source::Source,
};

/// Kubeless's default call timeout.
pub const DEFAULT_TIMEOUT: &str = "180";
/// Name of the function Service's port (the `http-` prefix is for Istio).
pub const PORT_NAME: &str = "http-function-port";

/// Splits `k=v` or `k:v` (a `=` wins over a `:`, so `URL=http://x` works).
pub fn parse_key_values(items: &[String], what: &str) -> Result<BTreeMap<String, String>> {
    parse_pairs(items, what, false)
}

/// Labels: like [`parse_key_values`], and a bare key is a label with an empty value (as
/// Kubeless and kubectl accept `--label foobar`).
pub fn parse_labels(items: &[String]) -> Result<BTreeMap<String, String>> {
    parse_pairs(items, "label", true)
}

fn parse_pairs(
    items: &[String],
    what: &str,
    bare_key_ok: bool,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let (k, v) = match item.split_once('=').or_else(|| item.split_once(':')) {
            Some(kv) => kv,
            None if bare_key_ok => (item, ""),
            None => {
                return Err(Error::usage(format!(
                    "Invalid {what} {item:?}: write it as key=value (or key:value)"
                )));
            }
        };
        if k.trim().is_empty() {
            return Err(Error::usage(format!("{what} {item:?} has an empty key")));
        }
        out.insert(k.trim().to_string(), v.to_string());
    }
    Ok(out)
}

/// Everything the flags say, resolved (files read) but not yet applied.
#[derive(Debug, Default, Clone)]
pub struct Resolved {
    pub source: Option<Source>,
    pub deps: Option<String>,
}

/// Checks the flag combinations Kubeless required for a new function.
pub fn validate_deploy(flags: &FunctionFlags) -> Result<()> {
    if flags.runtime.is_none() && flags.runtime_image.is_none() {
        return Err(Error::usage(
            "You must specify a runtime (--runtime) or a custom runtime image (--runtime-image)",
        ));
    }
    if flags.runtime.is_some() && flags.handler.is_none() {
        return Err(Error::usage(
            "You must specify a handler (--handler) for the runtime",
        ));
    }
    if flags.runtime_image.is_none() && flags.from_file.is_none() {
        return Err(Error::usage(
            "You must specify the function source (--from-file)",
        ));
    }
    Ok(())
}

/// Builds a new Function (`base` = None) or applies the flags to an existing one. Only what the
/// flags set changes; on deploy the Kubeless defaults fill the rest.
pub fn apply(
    name: &str,
    namespace: &str,
    flags: &FunctionFlags,
    resolved: Resolved,
    base: Option<Function>,
) -> Result<Function> {
    let is_new = base.is_none();
    let mut function = base.unwrap_or_else(|| Function {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        spec: FunctionSpec::default(),
        status: None,
    });
    let user_labels = parse_labels(&flags.labels)?;
    let labels = function.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(user_labels);
    labels.extend(function_labels(name));
    let pod_labels = labels.clone();

    let spec = &mut function.spec;
    if let Some(h) = &flags.handler {
        spec.handler = Some(h.clone());
    }
    if let Some(r) = &flags.runtime {
        spec.runtime = Some(r.clone());
    }
    if let Some(src) = resolved.source {
        spec.function = Some(src.function);
        spec.function_content_type = Some(src.content_type);
        spec.checksum = Some(src.checksum);
    }
    if let Some(deps) = resolved.deps {
        spec.deps = Some(deps);
    }
    match (&flags.timeout, is_new) {
        (Some(t), _) => spec.timeout = Some(t.clone()),
        (None, true) => spec.timeout = Some(DEFAULT_TIMEOUT.to_string()),
        (None, false) => {}
    }
    if let Some(t) = &spec.timeout {
        kubeless_api::parse::parse_timeout(Some(t))?;
    }

    let mut deployment = spec
        .deployment
        .take()
        .map(|d| d.0)
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    apply_deployment(&mut deployment, name, flags, is_new)?;
    spec.deployment = Some(DeploymentTemplate(deployment));

    let port_flags_given = flags.port.is_some() || flags.service_port.is_some() || flags.headless;
    if is_new || port_flags_given || spec.service.as_ref().is_none_or(|s| s.is_empty()) {
        let old = spec.service_spec()?;
        let old_port = old
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|p| p.first())
            .and_then(|p| match &p.target_port {
                Some(IntOrString::Int(i)) => Some(*i),
                _ => None,
            });
        let port = flags.port.or(old_port).unwrap_or(DEFAULT_PORT);
        let service_port = match flags.service_port {
            Some(p) if p > 0 => p,
            _ => port,
        };
        let headless = flags.headless
            || old
                .as_ref()
                .is_some_and(|s| s.cluster_ip.as_deref() == Some("None"));
        let svc = ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_string()),
                port: service_port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            selector: Some(pod_labels),
            type_: Some("ClusterIP".into()),
            cluster_ip: headless.then(|| "None".to_string()),
            ..ServiceSpec::default()
        };
        spec.service = Some(ServiceTemplate(to_value(&svc, "service")?));
    }
    Ok(function)
}

fn to_value<T: serde::Serialize>(v: &T, what: &str) -> Result<Value> {
    serde_json::to_value(v).map_err(|source| Error::Json {
        what: what.to_string(),
        source,
    })
}

/// `obj[key]` as an object, created (or replaced when not an object) on the way.
fn child<'a>(obj: &'a mut Value, key: &str) -> &'a mut Value {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    match obj {
        Value::Object(map) => {
            let slot = map.entry(key.to_string()).or_insert(Value::Null);
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            slot
        }
        // Not reachable: `obj` was made an object above.
        other => other,
    }
}

fn set(obj: &mut Value, key: &str, value: Value) {
    if let Value::Object(map) = obj {
        map.insert(key.to_string(), value);
    }
}

fn apply_deployment(
    deployment: &mut Value,
    name: &str,
    flags: &FunctionFlags,
    is_new: bool,
) -> Result<()> {
    let pod = child(child(child(deployment, "spec"), "template"), "spec");

    if !flags.node_selectors.is_empty() {
        let sel = parse_key_values(&flags.node_selectors, "node selector")?;
        set(pod, "nodeSelector", to_value(&sel, "nodeSelector")?);
    }
    if let Some(sa) = &flags.service_account {
        set(pod, "serviceAccountName", Value::String(sa.clone()));
    }
    // Each secret is a volume mounted at /<secret>, as Kubeless did.
    let mut mounts = Vec::new();
    if !flags.secrets.is_empty() {
        let volumes = pod
            .as_object_mut()
            .map(|m| m.entry("volumes").or_insert_with(|| Value::Array(vec![])));
        if let Some(Value::Array(volumes)) = volumes {
            for secret in flags.secrets.iter().filter(|s| !s.is_empty()) {
                let vol_name = format!("{secret}-vol");
                let exists = volumes
                    .iter()
                    .any(|v| v.get("name").and_then(Value::as_str) == Some(&vol_name));
                if !exists {
                    volumes.push(to_value(
                        &Volume {
                            name: vol_name.clone(),
                            secret: Some(SecretVolumeSource {
                                secret_name: Some(secret.clone()),
                                ..SecretVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                        "volume",
                    )?);
                }
                mounts.push(VolumeMount {
                    name: vol_name,
                    mount_path: format!("/{secret}"),
                    ..VolumeMount::default()
                });
            }
        }
    }

    let containers = pod
        .as_object_mut()
        .map(|m| m.entry("containers").or_insert(Value::Null));
    let Some(containers) = containers else {
        return Ok(());
    };
    if !matches!(containers, Value::Array(a) if !a.is_empty()) {
        *containers = Value::Array(vec![Value::Object(Map::new())]);
    }
    let Some(container) = containers.get_mut(0) else {
        return Ok(());
    };
    if container
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        set(container, "name", Value::String(name.to_string()));
    }
    if let Some(image) = &flags.runtime_image {
        set(container, "image", Value::String(image.clone()));
    }
    match (flags.image_pull_policy, is_new) {
        (Some(p), _) => set(container, "imagePullPolicy", p.as_str().into()),
        (None, true) => set(
            container,
            "imagePullPolicy",
            PullPolicy::Always.as_str().into(),
        ),
        (None, false) => {}
    }
    if !flags.env.is_empty() {
        let env: Vec<EnvVar> = parse_key_values(&flags.env, "env")?
            .into_iter()
            .map(|(name, value)| EnvVar {
                name,
                value: Some(value),
                value_from: None,
            })
            .collect();
        set(container, "env", to_value(&env, "env")?);
    }
    if flags.memory.is_some() || flags.cpu.is_some() {
        let old: ResourceRequirements = container
            .get("resources")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let mut limits = old.limits.unwrap_or_default();
        if let Some(m) = &flags.memory {
            limits.insert("memory".into(), Quantity(m.clone()));
        }
        if let Some(c) = &flags.cpu {
            limits.insert("cpu".into(), Quantity(c.clone()));
        }
        // Requests equal limits, as Kubeless set them.
        let res = ResourceRequirements {
            limits: Some(limits.clone()),
            requests: Some(limits),
            ..ResourceRequirements::default()
        };
        set(container, "resources", to_value(&res, "resources")?);
    }
    if let Some(port) = flags.port {
        set(
            container,
            "ports",
            serde_json::json!([{ "containerPort": port }]),
        );
    }
    if !mounts.is_empty() {
        let existing = container.as_object_mut().map(|m| {
            m.entry("volumeMounts")
                .or_insert_with(|| Value::Array(vec![]))
        });
        if let Some(Value::Array(existing)) = existing {
            for m in mounts {
                let present = existing
                    .iter()
                    .any(|v| v.get("name").and_then(Value::as_str) == Some(&m.name));
                if !present {
                    existing.push(to_value(&m, "volumeMount")?);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> FunctionFlags {
        FunctionFlags {
            runtime: Some("python3.11".into()),
            handler: Some("hello.handler".into()),
            from_file: Some("hello.py".into()),
            ..FunctionFlags::default()
        }
    }

    #[test]
    fn key_values() {
        let kv = parse_key_values(
            &["a=1".into(), "b:2".into(), "URL=http://x:1".into()],
            "env",
        )
        .unwrap();
        assert_eq!(kv["a"], "1");
        assert_eq!(kv["b"], "2");
        assert_eq!(kv["URL"], "http://x:1");
        assert!(parse_key_values(&["novalue".into()], "env").is_err());
        let labels = parse_labels(&["foobar".into(), "team=x".into()]).unwrap();
        assert_eq!(labels["foobar"], "");
        assert_eq!(labels["team"], "x");
    }

    #[test]
    fn validation() {
        assert!(validate_deploy(&flags()).is_ok());
        let mut f = flags();
        f.handler = None;
        assert!(validate_deploy(&f).is_err());
        let mut f = flags();
        f.runtime = None;
        assert!(validate_deploy(&f).is_err());
        f.runtime_image = Some("img".into());
        assert!(validate_deploy(&f).is_ok());
    }

    #[test]
    fn deploy_defaults_and_flags() {
        let mut f = flags();
        f.env = vec!["A=1".into()];
        f.memory = Some("128Mi".into());
        f.secrets = vec!["creds".into()];
        f.node_selectors = vec!["disk=ssd".into()];
        f.labels = vec!["team=x".into()];
        f.service_port = Some(80);
        let src = Source {
            function: "code".into(),
            content_type: "text".into(),
            checksum: "sha256:00".into(),
        };
        let func = apply(
            "hello",
            "ns",
            &f,
            Resolved {
                source: Some(src),
                deps: None,
            },
            None,
        )
        .unwrap();
        let labels = func.metadata.labels.clone().unwrap();
        assert_eq!(labels["created-by"], "kubeless");
        assert_eq!(labels["function"], "hello");
        assert_eq!(labels["team"], "x");
        assert_eq!(func.spec.timeout.as_deref(), Some("180"));
        let d = func.spec.deployment_template().unwrap();
        let pod = d.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.name, "hello");
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(c.env.as_ref().unwrap()[0].name, "A");
        let res = c.resources.as_ref().unwrap();
        assert_eq!(res.limits, res.requests);
        assert_eq!(res.limits.as_ref().unwrap()["memory"].0, "128Mi");
        assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/creds");
        assert_eq!(pod.node_selector.unwrap()["disk"], "ssd");
        let svc = func.spec.service_spec().unwrap().unwrap();
        let p = &svc.ports.unwrap()[0];
        assert_eq!(p.port, 80);
        assert_eq!(p.target_port, Some(IntOrString::Int(8080)));
        assert_eq!(p.name.as_deref(), Some(PORT_NAME));
        assert_eq!(svc.cluster_ip, None);
    }

    #[test]
    fn update_keeps_what_flags_do_not_set() {
        let base = apply("hello", "ns", &flags(), Resolved::default(), None).unwrap();
        let mut f = FunctionFlags {
            memory: Some("256Mi".into()),
            headless: true,
            ..FunctionFlags::default()
        };
        f.timeout = None;
        let updated = apply("hello", "ns", &f, Resolved::default(), Some(base)).unwrap();
        assert_eq!(updated.spec.runtime.as_deref(), Some("python3.11"));
        assert_eq!(updated.spec.timeout.as_deref(), Some("180"));
        let svc = updated.spec.service_spec().unwrap().unwrap();
        assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
        let d = updated.spec.deployment_template().unwrap();
        let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(
            c.resources.as_ref().unwrap().requests.as_ref().unwrap()["memory"].0,
            "256Mi"
        );
    }
}
