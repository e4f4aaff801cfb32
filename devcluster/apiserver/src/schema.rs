//! Structural-schema validation and pruning for custom resources: the subset
//! of OpenAPI v3 that the real server enforces for CRDs (types, required,
//! enum, nullable, items, properties, additionalProperties, int-or-string,
//! preserve-unknown-fields).

use serde_json::{Map, Value};

#[derive(Debug, Clone)]
pub struct Schema {
    root: Value,
}

impl Schema {
    pub fn parse(v: &Value) -> Result<Self, String> {
        if !v.is_object() {
            return Err("spec.versions[].schema.openAPIV3Schema must be an object".into());
        }
        Ok(Self { root: v.clone() })
    }

    /// Validates `obj` (a whole custom resource) and removes fields the schema
    /// does not declare. Returns the list of field errors.
    pub fn validate_and_prune(&self, obj: &mut Value) -> Vec<String> {
        let mut errors = Vec::new();
        let Some(map) = obj.as_object_mut() else {
            return vec!["must be an object".into()];
        };
        let props = self.root.get("properties").and_then(Value::as_object);
        let preserve = flag(&self.root, "x-kubernetes-preserve-unknown-fields");
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match props.and_then(|p| p.get(&key)) {
                Some(sub) => {
                    if let Some(v) = map.get_mut(&key) {
                        check(sub, v, &key, &mut errors);
                    }
                }
                None if preserve => {}
                None => {
                    map.remove(&key);
                }
            }
        }
        required(&self.root, map, "", &mut errors);
        errors
    }
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn required(schema: &Value, map: &Map<String, Value>, path: &str, errors: &mut Vec<String>) {
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if matches!(r, "apiVersion" | "kind" | "metadata") && path.is_empty() {
                continue;
            }
            if !map.contains_key(r) {
                let p = if path.is_empty() {
                    r.to_string()
                } else {
                    format!("{path}.{r}")
                };
                errors.push(format!("{p}: Required value"));
            }
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(schema: &Value, v: &mut Value, path: &str, errors: &mut Vec<String>) {
    if v.is_null() {
        if flag(schema, "nullable") {
            return;
        }
        // Real servers drop nulls for non-nullable fields when pruning; reject only
        // when a concrete type is demanded, like apiextensions does.
        if schema.get("type").is_some() {
            errors.push(format!(
                "{path}: Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                schema
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("object")
            ));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errors.push(format!(
                "{path}: Invalid value: \"{}\": {path} in body must be of type integer-or-string",
                type_name(v)
            ));
        }
        return;
    }
    if let Some(enm) = schema.get("enum").and_then(Value::as_array)
        && !enm.contains(v)
    {
        let allowed: Vec<String> = enm.iter().map(Value::to_string).collect();
        errors.push(format!(
            "{path}: Unsupported value: {v}: supported values: {}",
            allowed.join(", ")
        ));
    }
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        return;
    };
    let actual = type_name(v);
    let ok = match ty {
        "number" => actual == "number" || actual == "integer",
        "integer" => {
            actual == "integer"
                || v.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && actual == "number")
        }
        t => t == actual,
    };
    if !ok {
        errors.push(format!(
            "{path}: Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""
        ));
        return;
    }
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let sub_path = format!("{path}.{key}");
                let sub_schema = props.and_then(|p| p.get(&key));
                match (sub_schema, additional) {
                    (Some(s), _) => {
                        if let Some(child) = map.get_mut(&key) {
                            check(s, child, &sub_path, errors);
                        }
                    }
                    (None, Some(Value::Object(s))) => {
                        if let Some(child) = map.get_mut(&key) {
                            check(&Value::Object(s.clone()), child, &sub_path, errors);
                        }
                    }
                    (None, Some(Value::Bool(true))) => {}
                    _ if preserve => {}
                    _ if props.is_none()
                        && additional.is_none()
                        && !schema_has_structure(schema) => {}
                    _ => {
                        map.remove(&key);
                    }
                }
            }
            required(schema, map, path, errors);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// An object schema with neither properties nor additionalProperties only
/// keeps its content when it says so; apiextensions prunes it otherwise. We
/// keep content for `type: object` with no other constraints only if
/// preserve-unknown-fields is set, matching the real pruning rules.
fn schema_has_structure(schema: &Value) -> bool {
    schema.get("type").is_some()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["runtime"],
                    "properties": {
                        "runtime": {"type": "string"},
                        "replicas": {"type": "integer", "nullable": true},
                        "port": {"x-kubernetes-int-or-string": true},
                        "env": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        }))
        .unwrap()
    }

    #[test]
    fn accepts_valid_and_prunes_unknown() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"runtime": "python", "replicas": null, "port": "http", "unknown": 1,
                     "env": [{"name": "A", "junk": true}], "labels": {"a": "b"}, "free": {"x": {"y": 1}}},
            "other": 5});
        let errors = schema().validate_and_prune(&mut obj);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(obj.get("other").is_none());
        assert!(obj["spec"].get("unknown").is_none());
        assert!(obj["spec"]["env"][0].get("junk").is_none());
        assert_eq!(obj["spec"]["free"]["x"]["y"], 1);
        assert_eq!(obj["metadata"]["name"], "a");
    }

    #[test]
    fn reports_type_and_required_errors() {
        let mut obj = json!({"spec": {"replicas": "three", "labels": {"a": 1}}});
        let errors = schema().validate_and_prune(&mut obj);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.runtime: Required value"))
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("spec.replicas in body must be of type integer"))
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("spec.labels.a in body must be of type string"))
        );
    }
}
