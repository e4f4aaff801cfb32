//! Validation and pruning of custom resources against their CRD's structural schema, as the
//! real server does it: every OpenAPI v3 value constraint (type, required, enum, nullable,
//! pattern, format, minimum/maximum, lengths, item and property counts, int-or-string,
//! preserve-unknown-fields) and the CEL `x-kubernetes-validations` rules, through
//! `kubeless_api::validate` (CEL on the `kube-cel` crate). The CLI runs the same code before it
//! sends, so both word errors alike.

use kubeless_api::validate::{CrdSchema, FieldError};
use serde_json::Value;

#[derive(Debug)]
pub struct Schema {
    inner: CrdSchema,
}

impl Schema {
    /// Compiles a version's `openAPIV3Schema`; a CEL rule that does not compile makes the CRD
    /// invalid, as on the real server.
    pub fn parse(v: &Value) -> Result<Self, String> {
        if !v.is_object() {
            return Err("spec.versions[].schema.openAPIV3Schema must be an object".into());
        }
        let inner = CrdSchema::new(v.clone());
        let rule_errors = inner.rule_errors();
        if !rule_errors.is_empty() {
            return Err(format!(
                "spec.versions[].schema.openAPIV3Schema: Invalid value: \"object\": x-kubernetes-validations rule compilation failed: {}",
                rule_errors.join("; ")
            ));
        }
        Ok(Self { inner })
    }

    /// Validates `obj` (a whole custom resource) and removes fields the schema does not
    /// declare. `old` is the stored object on updates (CEL transition rules). Returns the field
    /// errors.
    /// The `openAPIV3Schema` itself.
    pub fn schema(&self) -> &Value {
        self.inner.schema()
    }

    pub fn validate_and_prune(
        &self,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> (Vec<FieldError>, Vec<String>) {
        self.inner.validate_reporting_unknown(obj, old)
    }
}

#[cfg(test)]
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
        let (errors, mut unknown) = schema().validate_and_prune(&mut obj, None);
        assert!(errors.is_empty(), "{errors:?}");
        unknown.sort();
        assert_eq!(unknown, ["other", "spec.env[0].junk", "spec.unknown"]);
        // A nullable field keeps its null.
        assert_eq!(obj["spec"].get("replicas"), Some(&Value::Null));
        assert!(obj.get("other").is_none());
        assert!(obj["spec"].get("unknown").is_none());
        assert!(obj["spec"]["env"][0].get("junk").is_none());
        assert_eq!(obj["spec"]["free"]["x"]["y"], 1);
        assert_eq!(obj["metadata"]["name"], "a");
    }

    #[test]
    fn prunes_nulls_where_the_schema_is_not_nullable() {
        // As the real server does before defaulting: the null is dropped, not refused, and
        // a required field dropped so is then missing.
        let mut obj = json!({"spec": {"runtime": null, "labels": null, "env": null}});
        let (errors, unknown) = schema().validate_and_prune(&mut obj, None);
        assert_eq!(obj, json!({"spec": {}}));
        assert!(unknown.is_empty());
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0]
                .to_string()
                .starts_with("spec.runtime: Required value")
        );
    }

    #[test]
    fn reports_type_and_required_errors() {
        let mut obj = json!({"spec": {"replicas": "three", "labels": {"a": 1}}});
        let errors: Vec<String> = schema()
            .validate_and_prune(&mut obj, None)
            .0
            .iter()
            .map(ToString::to_string)
            .collect();
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
