//! The controller's `kubeless-config` ConfigMap: where it is, and the runtimes it supports.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::ConfigMap,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::Api;
use kubeless_api::labels::{CONFIG_ANNOTATION, NAMESPACE_ANNOTATION};
use serde_json::Value;

use crate::{
    ctx::Ctx,
    error::{Error, Result},
};

/// Runtimes assumed when the cluster has no kubeless-config ConfigMap.
pub const DEFAULT_RUNTIMES: &[&str] = &[
    "python3.11",
    "python3.12",
    "nodejs20",
    "nodejs22",
    "ruby3.1",
    "php8.2",
    "go1.19",
    "java17",
];

/// Where the controller configuration lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub namespace: String,
    pub name: String,
}

/// The ConfigMap as far as we could read it.
#[derive(Debug)]
pub enum Lookup {
    Found(Box<ConfigMap>),
    Missing,
    /// Not readable (RBAC, network): validation is skipped.
    Unreadable(Error),
}

/// KUBELESS_NAMESPACE / KUBELESS_CONFIG, then the annotations on the functions CRD, then
/// kubeless / kubeless-config.
pub async fn locate(ctx: &Ctx) -> Location {
    let env_ns = std::env::var("KUBELESS_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty());
    let env_name = std::env::var("KUBELESS_CONFIG")
        .ok()
        .filter(|s| !s.is_empty());
    let (mut ann_ns, mut ann_name) = (None, None);
    if env_ns.is_none() || env_name.is_none() {
        let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        if let Ok(crd) = crds.get("functions.kubeless.io").await
            && let Some(ann) = crd.metadata.annotations
        {
            ann_ns = ann
                .get(NAMESPACE_ANNOTATION)
                .cloned()
                .filter(|s| !s.is_empty());
            ann_name = ann
                .get(CONFIG_ANNOTATION)
                .cloned()
                .filter(|s| !s.is_empty());
        }
    }
    Location {
        namespace: env_ns.or(ann_ns).unwrap_or_else(|| "kubeless".into()),
        name: env_name
            .or(ann_name)
            .unwrap_or_else(|| "kubeless-config".into()),
    }
}

pub async fn lookup(ctx: &Ctx, at: &Location) -> Lookup {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &at.namespace);
    match api.get(&at.name).await {
        Ok(cm) => Lookup::Found(Box::new(cm)),
        Err(kube::Error::Api(s)) if s.code == 404 => Lookup::Missing,
        Err(e) => Lookup::Unreadable(Error::kube(
            format!("reading ConfigMap {}/{}", at.namespace, at.name),
            e,
        )),
    }
}

/// `<ID><version>` of every entry of `runtime-images` (JSON or YAML, Kubeless's shape).
pub fn runtimes_of(data: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let Some(raw) = data.get("runtime-images").filter(|s| !s.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let value: Value = serde_yaml_ng::from_str(raw).map_err(|e| Error::Encode {
        format: "runtime-images",
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for rt in value.as_array().into_iter().flatten() {
        let id = rt
            .get("ID")
            .or_else(|| rt.get("id"))
            .and_then(Value::as_str)
            .unwrap_or("");
        for v in rt
            .get("versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(version) = v.get("version").and_then(Value::as_str) {
                out.push(format!("{id}{version}"));
            }
        }
    }
    Ok(out)
}

/// The supported runtimes, or `None` when they cannot be known (validation is then skipped).
pub async fn supported_runtimes(ctx: &Ctx) -> Option<Vec<String>> {
    let at = locate(ctx).await;
    match lookup(ctx, &at).await {
        Lookup::Found(cm) => runtimes_of(&cm.data.unwrap_or_default())
            .ok()
            .filter(|r| !r.is_empty()),
        Lookup::Missing => Some(DEFAULT_RUNTIMES.iter().map(|s| s.to_string()).collect()),
        Lookup::Unreadable(e) => {
            eprintln!(
                "WARNING: not checking the runtime: {}",
                crate::error_chain(&e)
            );
            None
        }
    }
}

/// Fails when `runtime` is not supported by the cluster.
pub async fn check_runtime(ctx: &Ctx, runtime: &str) -> Result<()> {
    let supported = supported_runtimes(ctx).await;
    // A Kubeless runtime id is refused with its replacement, unless this cluster's catalogue
    // still offers it.
    if let Some(refusal) = kubeless_api::legacy::refusal(runtime)
        && !supported
            .as_ref()
            .is_some_and(|list| list.iter().any(|r| r == runtime))
    {
        let new = kubeless_api::legacy::replacement(runtime).unwrap_or_default();
        return Err(Error::usage(format!(
            "Function runtime \"{runtime}\" is refused: {refusal}. Use --runtime {new}"
        )));
    }
    match supported {
        Some(list) if !list.iter().any(|r| r == runtime) => Err(Error::usage(format!(
            "Function runtime \"{runtime}\" is not supported. Supported runtimes are: {}",
            list.join(", ")
        ))),
        _ => Ok(()),
    }
}

/// `kubeless get-server-config`.
pub async fn get_server_config(ctx: &Ctx) -> Result<()> {
    let at = locate(ctx).await;
    let (data, runtimes) = match lookup(ctx, &at).await {
        Lookup::Found(cm) => {
            let data = cm.data.unwrap_or_default();
            let runtimes = runtimes_of(&data)?;
            (Some(data), runtimes)
        }
        Lookup::Missing => (
            None,
            DEFAULT_RUNTIMES.iter().map(|s| s.to_string()).collect(),
        ),
        Lookup::Unreadable(e) => return Err(e),
    };
    let mut text = format!("Current Server Config ({}/{}):\n", at.namespace, at.name);
    match data {
        None => {
            text.push_str("  (ConfigMap not found: the controller uses its built-in defaults)\n")
        }
        Some(data) => {
            for (k, v) in data.iter().filter(|(k, _)| k.as_str() != "runtime-images") {
                let v = v.trim();
                if v.contains('\n') {
                    text.push_str(&format!("  {k}:\n"));
                    for line in v.lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                } else {
                    text.push_str(&format!("  {k}: {v}\n"));
                }
            }
        }
    }
    text.push_str(&format!(
        "Supported Runtimes are: {}\n",
        runtimes.join(", ")
    ));
    crate::output::print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kubeless_runtime_images() {
        let data = BTreeMap::from([(
            "runtime-images".to_string(),
            r#"[{"ID":"python","versions":[{"name":"python311","version":"3.11"},{"name":"p","version":"3.12"}],"depName":"requirements.txt"},{"ID":"nodejs","versions":[{"version":"20"}]}]"#.to_string(),
        )]);
        assert_eq!(
            runtimes_of(&data).unwrap(),
            ["python3.11", "python3.12", "nodejs20"]
        );
        assert!(runtimes_of(&BTreeMap::new()).unwrap().is_empty());
    }
}
