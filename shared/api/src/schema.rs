//! Schema helpers: the generator settings kube-derive uses, relaxing `required` inside embedded
//! Kubernetes templates, and the schema-driven "fill required fields" pass that lets typed
//! accessors parse partial templates.

use std::sync::OnceLock;

use schemars::{JsonSchema, Schema, generate::SchemaSettings, json_schema};
use serde_json::{Map, Value};

use crate::constraints::{Embedded, harden};

/// The same settings `#[derive(CustomResource)]` uses, so schemas generated here match the
/// schemas inside the CRDs (inline, no `$ref`, `nullable` instead of `null` types).
pub fn structural_settings() -> SchemaSettings {
    SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
}

/// Inline, untransformed schema of `T` (descriptions kept): the source of truth for which fields
/// are required, and what devcluster publishes for built-in kinds in /openapi/v3.
pub fn plain_schema_for<T: JsonSchema>() -> Value {
    SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// Calls `f` on `schema` and every subschema below it, following only schema-valued keywords
/// (so a property that happens to be called `required` or `description` is left alone).
pub fn visit_schemas(schema: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Value::Object(map) = schema else { return };
    f(map);
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(props)) = map.get_mut(key) {
            props.values_mut().for_each(|p| visit_schemas(p, f));
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        match map.get_mut(key) {
            Some(Value::Array(list)) => list.iter_mut().for_each(|p| visit_schemas(p, f)),
            Some(child @ Value::Object(_)) => visit_schemas(child, f),
            _ => {}
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(list)) = map.get_mut(key) {
            list.iter_mut().for_each(|p| visit_schemas(p, f));
        }
    }
}

/// Removes every `required` list at and below `schema`. Used for embedded templates whose
/// Kubeless users legitimately leave out fields the full Kubernetes type requires
/// (`selector`, container `name`, ...); the controller fills them in.
pub fn relax_required(schema: &mut Value) {
    visit_schemas(schema, &mut |node| {
        node.remove("required");
    });
}

/// Removes descriptions below the root of `schema`. The embedded Kubernetes types are
/// documented upstream; their descriptions would make the Function CRD over 600 KB, past what
/// client-side `kubectl apply` can store in its last-applied annotation.
pub fn strip_nested_descriptions(schema: &mut Value) {
    let root = schema
        .as_object()
        .and_then(|m| m.get("description"))
        .cloned();
    visit_schemas(schema, &mut |node| {
        node.remove("description");
    });
    if let (Some(desc), Value::Object(map)) = (root, schema) {
        map.insert("description".into(), desc);
    }
}

/// Removes `nullable` at and below `schema` from typed and int-or-string nodes; a node without
/// a type (a preserve-unknown-fields value, which may be anything, null included) keeps it.
pub fn strip_nullable(schema: &mut Value) {
    visit_schemas(schema, &mut |node| {
        if node.contains_key("type") || node.contains_key("x-kubernetes-int-or-string") {
            node.remove("nullable");
        }
    });
}

/// Schema of an embedded Kubernetes object: `T`'s schema with `required` relaxed throughout
/// and nested descriptions removed.
/// The API server's value constraints are added for the kind of template (see
/// [`crate::constraints`]).
pub fn relaxed_schema_for<T: JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
    description: &str,
    embedded: Embedded,
) -> Schema {
    let mut value = generator.subschema_for::<T>().to_value();
    relax_required(&mut value);
    harden(&mut value, embedded);
    strip_nested_descriptions(&mut value);
    // No `nullable`: the real server publishes a nullable field in its OpenAPI v2 document
    // without a type (`kubectl explain` then shows `<>`). Kubeless `--dryrun -o yaml` output
    // still applies: its nulls (`containers: null`, `creationTimestamp: null`) are pruned by
    // the server, as for every field that is not nullable.
    strip_nullable(&mut value);
    if let Value::Object(map) = &mut value {
        map.insert("description".into(), Value::String(description.into()));
    }
    Schema::try_from(value).unwrap_or_else(|_| preserve_unknown_object(description))
}

/// An object whose content is not validated or pruned by the API server.
pub fn preserve_unknown_object(description: &str) -> Schema {
    json_schema!({
        "description": description,
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `schema_with` target for "any JSON value" fields (e.g. a cron payload).
pub fn any_json(_: &mut schemars::SchemaGenerator) -> Schema {
    json_schema!({
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Resolves the effective object schema of a node: follows a single non-null `anyOf`/`oneOf`
/// branch, which is how schemars renders `Option<T>` for some `T`.
fn effective(schema: &Value) -> &Value {
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            let mut non_null = branches.iter().filter(|b| {
                b.get("type") != Some(&Value::String("null".into()))
                    && b.get("const") != Some(&Value::Null)
                    && b.get("enum") != Some(&Value::Array(vec![Value::Null]))
            });
            if let (Some(first), None) = (non_null.next(), non_null.next()) {
                return effective(first);
            }
        }
    }
    schema
}

fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(s) => Some(s.as_str()),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    }
}

/// The zero value a Go client would have sent for a missing required field.
fn zero_value(schema: &Value) -> Value {
    let schema = effective(schema);
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return Value::from(0);
    }
    match type_of(schema) {
        Some("string") => Value::String(String::new()),
        Some("integer") | Some("number") => Value::from(0),
        Some("boolean") => Value::Bool(false),
        Some("array") => Value::Array(Vec::new()),
        _ => {
            let mut obj = Value::Object(Map::new());
            fill_required(&mut obj, schema);
            obj
        }
    }
}

/// Inserts zero values for required fields that are missing or `null`, walking `value` along
/// `schema`. This mirrors what Go's typed structs did for Kubeless: a missing `name` was `""`.
pub fn fill_required(value: &mut Value, schema: &Value) {
    let schema = effective(schema);
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            if let Some(Value::Array(required)) = schema.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    let missing = map.get(name).is_none_or(Value::is_null);
                    if missing && let Some(prop) = props.get(name) {
                        map.insert(name.to_string(), zero_value(prop));
                    }
                }
            }
            for (key, child) in map.iter_mut() {
                if let Some(prop) = props.get(key) {
                    fill_required(child, prop);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items.iter_mut() {
                    fill_required(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

macro_rules! cached_plain_schema {
    ($name:ident, $ty:ty) => {
        pub(crate) fn $name() -> &'static Value {
            static CELL: OnceLock<Value> = OnceLock::new();
            CELL.get_or_init(plain_schema_for::<$ty>)
        }
    };
}

cached_plain_schema!(deployment_schema, k8s_openapi::api::apps::v1::Deployment);
cached_plain_schema!(service_spec_schema, k8s_openapi::api::core::v1::ServiceSpec);
cached_plain_schema!(
    object_meta_schema,
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta
);
cached_plain_schema!(
    hpa_behavior_schema,
    k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerBehavior
);

/// `schema_with` target for free-form objects that are kept but not validated.
pub fn preserve_object(_: &mut schemars::SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Declares `metadata.name` (a string, nothing more) on a CRD's root schema when one of the
/// root's CEL rules reports at `.metadata.name` through `fieldPath`: the API server refuses a
/// CRD whose `fieldPath` names a field the schema does not declare, and the root may declare
/// `metadata` with only `name` and `generateName`.
pub fn declare_metadata_name(root: &mut Value) {
    let names_metadata = root
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .is_some_and(|rules| {
            rules.iter().any(|r| {
                r.get("fieldPath")
                    .and_then(Value::as_str)
                    .is_some_and(|p| p.starts_with(".metadata."))
            })
        });
    if !names_metadata {
        return;
    }
    if let Some(Value::Object(props)) = root.get_mut("properties") {
        props.insert(
            "metadata".into(),
            // maxLength: the API server's own limit on names; without one, a rule reading the
            // name has an unbounded estimated cost and the CRD is refused.
            serde_json::json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 253}}}),
        );
    }
}
