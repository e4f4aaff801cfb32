//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and an
//! approximation of strategic-merge patch that merges lists by the merge keys
//! Kubernetes declares for the common fields. Server-side apply is in
//! `fieldmanager.rs`.

use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// RFC 7386 merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch_map {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// RFC 6902 JSON patch.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let p: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
    // The real server treats a missing path as null in a `test` op, so `test /x == null` passes
    // when /x is absent; kube-runtime's finalizer helper relies on that to add the first
    // finalizer. The json-patch crate fails such a test, so those ops are checked here. All or
    // nothing, as on the server: the ops run on a copy.
    let mut work = target.clone();
    for op in p.0 {
        if let json_patch::PatchOperation::Test(t) = &op
            && t.value.is_null()
            && work.pointer(t.path.as_str()).is_none_or(Value::is_null)
        {
            continue;
        }
        json_patch::patch(&mut work, &[op]).map_err(|e| e.to_string())?;
    }
    *target = work;
    Ok(())
}

/// The merge key Kubernetes declares for a list field, when it has one.
pub(crate) fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        "hostAliases" => Some("ip"),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                Some("containerPort")
            } else {
                Some("port")
            }
        }
        _ => None,
    }
}

/// Strategic-merge patch, approximated: maps merge recursively, `null`
/// deletes, lists with a known merge key merge item by item (`$patch: delete`
/// removes an item), other lists are replaced, other directives are ignored.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = patch.clone();
        if let Some(m) = p.as_object_mut() {
            m.remove("$patch");
        }
        *target = p;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch_map {
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Array(items) => {
                let key = merge_key(k, items);
                match (key, t.get_mut(k)) {
                    (Some(key), Some(Value::Array(existing))) => merge_list(existing, items, key),
                    _ => {
                        let cleaned: Vec<Value> = items
                            .iter()
                            .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                            .map(strip_directives)
                            .collect();
                        t.insert(k.clone(), Value::Array(cleaned));
                    }
                }
            }
            Value::Object(_) => {
                strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn merge_list(existing: &mut Vec<Value>, patch_items: &[Value], key: &str) {
    for item in patch_items {
        let Some(id) = item.get(key) else {
            existing.push(strip_directives(item));
            continue;
        };
        let pos = existing.iter().position(|e| e.get(key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(p), true) => {
                existing.remove(p);
            }
            (None, true) => {}
            (Some(p), false) => strategic_merge(&mut existing[p], item),
            (None, false) => existing.push(strip_directives(item)),
        }
    }
}

/// An applied configuration without the metadata only the server sets.
pub fn apply_config(config: &Value) -> Value {
    let mut cfg = config.clone();
    if let Some(meta) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
        meta.remove("uid");
        meta.remove("creationTimestamp");
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}], "args": ["x"]}});
        strategic_merge(
            &mut t,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "a", "image": "3"}, {"name": "b", "$patch": "delete"}, {"name": "c", "image": "4"}], "args": ["y"]}}),
        );
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "3"}, {"name": "c", "image": "4"}], "args": ["y"]}})
        );
    }

    #[test]
    fn json_patch_test_null_matches_a_missing_path() {
        let mut obj = json!({"metadata": {"name": "a"}});
        json_patch(
            &mut obj,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
            ]),
        )
        .unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["f"]));
        // A non-null test on the same missing path still fails, and nothing is changed.
        let mut obj = json!({"metadata": {"name": "a"}});
        let before = obj.clone();
        assert!(
            json_patch(
                &mut obj,
                &json!([
                    {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
                    {"op": "test", "path": "/metadata/finalizers", "value": ["f"]}
                ]),
            )
            .is_err()
        );
        assert_eq!(obj, before);
    }

    #[test]
    fn json_patch_test_op_fails() {
        let mut t = json!({"metadata": {"finalizers": ["a"]}});
        let err = json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": ["b"]}]),
        );
        assert!(err.is_err());
        json_patch(
            &mut t,
            &json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
        )
        .unwrap();
        assert_eq!(t, json!({"metadata": {"finalizers": []}}));
    }
}
