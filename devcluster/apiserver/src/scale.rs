//! The scale subresource (autoscaling/v1 Scale) over Deployments and CRDs that declare one.

use bytes::Bytes;
use http::Method;
use serde_json::{Map, Value, json};

use crate::app::{App, json_response};
use crate::errors::ApiError;
use crate::patch::{self, PatchKind};
use crate::registry::ResourceDef;
use crate::selectors::LabelSelector;
use crate::store::Sub;
use crate::table::json_path;

fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let Some(spec) = &def.scale else {
        return Value::Null;
    };
    let m = obj.get("metadata").cloned().unwrap_or_default();
    let mut meta = Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = m.get(f) {
            meta.insert(f.into(), v.clone());
        }
    }
    let selector = spec
        .label_selector_path
        .as_deref()
        .and_then(|p| read_path(obj, p))
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => LabelSelector::from_label_selector(other).to_query(),
        });
    let mut status = json!({"replicas": read_path(obj, &spec.status_replicas_path).and_then(Value::as_i64).unwrap_or(0)});
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
        "spec": {"replicas": read_path(obj, &spec.spec_replicas_path).and_then(Value::as_i64).unwrap_or(0)},
        "status": status,
    })
}

/// `{"spec": {"replicas": n}}` for the path `.spec.replicas`.
fn nested(path: &str, value: Value) -> Value {
    let parts: Vec<&str> = path.split('.').filter(|p| !p.is_empty()).collect();
    parts.iter().rev().fold(value, |acc, p| json!({ *p: acc }))
}

#[allow(clippy::too_many_arguments)]
pub fn handle(
    app: &App,
    def: &ResourceDef,
    version: &str,
    ns: &str,
    name: &str,
    method: &Method,
    ct: &str,
    body: &Bytes,
) -> Result<axum::response::Response, ApiError> {
    let Some(spec) = &def.scale else {
        return Err(ApiError::path_not_found());
    };
    let obj = app
        .store
        .get(&def.gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
    let current = scale_of(def, &obj);
    let wanted = match *method {
        Method::GET => return Ok(json_response(200, &current)),
        Method::PUT => serde_json::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        Method::PATCH => {
            let p: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut s = current.clone();
            match PatchKind::from_content_type(ct)
                .ok_or_else(|| ApiError::unsupported_media_type(ct))?
            {
                PatchKind::Json => patch::json_patch(&mut s, &p).map_err(ApiError::bad_request)?,
                PatchKind::Merge => patch::merge_patch(&mut s, &p),
                PatchKind::Strategic | PatchKind::Apply => patch::strategic_merge(&mut s, &p),
            }
            s
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let replicas = wanted
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                &["spec.replicas: Required value".into()],
            )
        })?;
    if replicas < 0 {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            name,
            &[format!(
                "spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
            )],
        ));
    }
    let mut merge = nested(&spec.spec_replicas_path, json!(replicas));
    if let Some(rv) = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        merge["metadata"] = json!({"resourceVersion": rv});
    }
    let (updated, _) =
        app.store
            .patch(def, version, ns, name, PatchKind::Merge, &merge, Sub::Main)?;
    Ok(json_response(200, &scale_of(def, &updated)))
}

/// Reads `.a.b` style paths (scale subresource paths) from an object.
fn read_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    json_path(obj, path)
}
