//! `kubeless apply -f FILE|DIR` and `kubeless function init RUNTIME NAME`: manifests of
//! Functions and triggers, written and applied without kubectl.

use std::path::{Path, PathBuf};

use kube::{
    Resource,
    api::{Api, ApiResource, DynamicObject, Patch, PatchParams},
};
use kubeless_api::{
    CronJobTrigger, Function, FunctionSpec, HttpTrigger, KafkaTrigger, KinesisTrigger, NatsTrigger,
    RedisTrigger,
};

use crate::{
    ctx::Ctx,
    error::{Error, Result},
    source,
};

/// Field manager of the CLI's server-side applies.
pub const FIELD_MANAGER: &str = "kubeless-cli";

/// The API resource of a kind `kubeless apply` handles.
pub fn resource_of(kind: &str) -> Option<ApiResource> {
    Some(match kind {
        "Function" => ApiResource::erase::<Function>(&()),
        "HTTPTrigger" => ApiResource::erase::<HttpTrigger>(&()),
        "CronJobTrigger" => ApiResource::erase::<CronJobTrigger>(&()),
        "KafkaTrigger" => ApiResource::erase::<KafkaTrigger>(&()),
        "NATSTrigger" => ApiResource::erase::<NatsTrigger>(&()),
        "KinesisTrigger" => ApiResource::erase::<KinesisTrigger>(&()),
        "RedisTrigger" => ApiResource::erase::<RedisTrigger>(&()),
        _ => return None,
    })
}

/// The manifest files of `path`: the file itself, or the `.yaml`/`.yml`/`.json` files of a
/// directory in name order.
pub fn manifest_files(path: &Path) -> Result<Vec<PathBuf>> {
    let read_err = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Every object of a YAML (or JSON) text; empty documents are skipped.
pub fn parse_documents(text: &str, file: &Path) -> Result<Vec<serde_json::Value>> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(doc).map_err(|e| {
            Error::usage(format!(
                "{} is not valid YAML: {e}. Fix the file and apply it again",
                file.display()
            ))
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

pub async fn apply(ctx: &Ctx, path: &Path) -> Result<()> {
    let files = manifest_files(path)?;
    if files.is_empty() {
        return Err(Error::usage(format!(
            "{} holds no .yaml, .yml or .json file to apply",
            path.display()
        )));
    }
    // Read and check everything first, so a bad document applies nothing.
    let mut objects = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|source| Error::Read {
            path: file.clone(),
            source,
        })?;
        for value in parse_documents(&text, file)? {
            let kind = value["kind"].as_str().unwrap_or("").to_string();
            let Some(ar) = resource_of(&kind) else {
                return Err(Error::usage(format!(
                    "{}: kind {kind:?} is not one kubeless applies (Function, HTTPTrigger, \
                     CronJobTrigger, KafkaTrigger, NATSTrigger, KinesisTrigger, RedisTrigger); use kubectl apply for it",
                    file.display()
                )));
            };
            if value["apiVersion"].as_str() != Some(ar.api_version.as_str()) {
                return Err(Error::usage(format!(
                    "{}: {kind} needs apiVersion {} (found {})",
                    file.display(),
                    ar.api_version,
                    value["apiVersion"]
                )));
            }
            let obj: DynamicObject =
                serde_json::from_value(value).map_err(|source| Error::Json {
                    what: format!("{kind} in {}", file.display()),
                    source,
                })?;
            if obj.metadata.name.as_deref().unwrap_or("").is_empty() {
                return Err(Error::usage(format!(
                    "{}: a {kind} without metadata.name; give it a name",
                    file.display()
                )));
            }
            objects.push((ar, obj));
        }
    }
    for (ar, mut obj) in objects {
        let ns = obj
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| ctx.namespace.clone());
        obj.metadata.namespace = Some(ns.clone());
        let name = obj.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ar);
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|e| {
            Error::kube(
                format!("Cannot apply {} {name} in namespace {ns}", ar.kind),
                e,
            )
        })?;
        crate::output::println(&format!("{} {name} applied in namespace {ns}", ar.kind))?;
    }
    Ok(())
}

/// The starter code of `kubeless function init`: `(file suffix, code, dependency file name,
/// dependency file)`.
pub fn starter(runtime: &str) -> Option<(&'static str, &'static str, &'static str, &'static str)> {
    if runtime.starts_with("python") {
        Some((
            ".py",
            "def handler(event, context):\n    \"\"\"Answers with a greeting; event[\"data\"] is the request body.\"\"\"\n    data = event[\"data\"]\n    if isinstance(data, bytes):\n        data = data.decode(\"utf-8\", errors=\"replace\")\n    return {\"hello\": \"world\", \"data\": data}\n",
            "requirements.txt",
            "",
        ))
    } else if runtime.starts_with("nodejs") {
        Some((
            ".js",
            "module.exports = {\n  // Answers with a greeting; event.data is the request body.\n  handler: (event, context) => ({\n    hello: 'world',\n    data: Buffer.isBuffer(event.data) ? event.data.toString('utf8') : event.data,\n  }),\n};\n",
            "package.json",
            "{\n  \"name\": \"function\",\n  \"version\": \"1.0.0\",\n  \"dependencies\": {}\n}\n",
        ))
    } else {
        None
    }
}

/// The Function manifest `kubeless function init` writes next to the code.
pub fn init_manifest(runtime: &str, name: &str, code: &str, deps: &str) -> Function {
    let mut f = Function::new(
        name,
        FunctionSpec {
            runtime: Some(runtime.to_string()),
            handler: Some(format!("{name}.handler")),
            function: Some(code.to_string()),
            function_content_type: Some("text".into()),
            checksum: Some(source::sha256_checksum(code.as_bytes())),
            deps: Some(deps.to_string()),
            timeout: Some(crate::spec::DEFAULT_TIMEOUT.into()),
            ..FunctionSpec::default()
        },
    );
    f.meta_mut().labels = Some(kubeless_api::labels::function_labels(name));
    f
}

pub fn init(runtime: &str, name: &str, dir: &Path) -> Result<()> {
    let (suffix, code, dep_name, deps) = starter(runtime).ok_or_else(|| {
        Error::usage(format!(
            "kubeless function init knows python* and nodejs* runtimes, not {runtime:?}; \
             e.g. `kubeless function init python3.11 {name}`"
        ))
    })?;
    let write = |file: PathBuf, text: &str| -> Result<()> {
        if file.exists() {
            return Err(Error::usage(format!(
                "{} exists already; remove it or pick another NAME",
                file.display()
            )));
        }
        std::fs::write(&file, text).map_err(|source| Error::Write { path: file, source })
    };
    let code_file = dir.join(format!("{name}{suffix}"));
    let manifest_file = dir.join(format!("{name}.yaml"));
    let manifest = crate::output::to_yaml(&init_manifest(runtime, name, code, deps))?;
    write(code_file.clone(), code)?;
    // One dependency file serves every function of a folder: keep an existing one.
    if !dir.join(dep_name).exists() {
        write(dir.join(dep_name), deps)?;
    }
    write(manifest_file.clone(), &manifest)?;
    crate::output::println(&format!(
        "Wrote {code}, {deps} and {manifest}.\nDeploy it with one of:\n  kubeless function deploy {name} --runtime {runtime} --handler {name}.handler --from-file {code}\n  kubeless apply -f {manifest}",
        code = code_file.display(),
        deps = dir.join(dep_name).display(),
        manifest = manifest_file.display(),
    ))
}
