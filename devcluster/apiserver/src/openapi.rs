//! The OpenAPI v3 documents (`/openapi/v3` and one per group version), which `kubectl explain`
//! reads and from which kubectl learns that the server validates fields itself
//! (`fieldValidation`). Built-in kinds are described by their k8s-openapi types (through
//! schemars, with the upstream descriptions); custom resources by their CRD's
//! `openAPIV3Schema`, with `apiVersion`, `kind` and `metadata` added as the real server adds
//! them.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceDef, Validator};

/// The URL path of a group version's document: `api/v1` or `apis/GROUP/VERSION`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every group version served, with the resources it holds.
fn group_versions(reg: &Registry) -> BTreeMap<(String, String), Vec<&ResourceDef>> {
    let mut out: BTreeMap<(String, String), Vec<&ResourceDef>> = BTreeMap::new();
    for def in reg.defs.values() {
        for v in &def.versions {
            out.entry((def.gr.group.clone(), v.clone()))
                .or_default()
                .push(def);
        }
    }
    out
}

/// `/openapi/v3`: where each group version's document is, with a hash that changes with it
/// (clients cache documents by that URL).
pub fn root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for ((group, version), defs) in group_versions(reg) {
        let doc = document(&group, &version, &defs);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        doc.to_string().hash(&mut h);
        let path = gv_path(&group, &version);
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", h.finish())}),
        );
    }
    json!({ "paths": paths })
}

/// The document of one group version (`segs` after `openapi/v3`), or None when not served.
pub fn group_version(reg: &Registry, segs: &[&str]) -> Option<Value> {
    let (group, version) = match segs {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let gvs = group_versions(reg);
    let defs = gvs.get(&(group.clone(), version.clone()))?;
    Some(document(&group, &version, defs))
}

/// `io.k8s.api.apps.v1.Deployment` for built-ins, `io.kubeless.v1beta1.Function` for CRDs
/// (the group reversed), as the real server names its schemas.
fn schema_name(def: &ResourceDef, version: &str) -> String {
    if !def.is_crd {
        let group = if def.gr.group.is_empty() {
            "core"
        } else {
            def.gr
                .group
                .strip_suffix(".k8s.io")
                .unwrap_or(&def.gr.group)
        };
        let prefix = match def.gr.group.as_str() {
            "apiextensions.k8s.io" => "io.k8s.apiextensions-apiserver.pkg.apis".to_string(),
            _ => "io.k8s.api".to_string(),
        };
        return format!("{prefix}.{group}.{version}.{}", def.kind);
    }
    let reversed: Vec<&str> = def.gr.group.split('.').rev().collect();
    format!("{}.{version}.{}", reversed.join("."), def.kind)
}

fn document(group: &str, version: &str, defs: &[&ResourceDef]) -> Value {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for def in defs {
        let gvk = json!([{"group": group, "version": version, "kind": def.kind}]);
        let Some(mut schema) = kind_schema(def, version) else {
            continue;
        };
        if let Some(m) = schema.as_object_mut() {
            m.insert("x-kubernetes-group-version-kind".into(), gvk.clone());
        }
        let name = schema_name(def, version);
        schemas.insert(name.clone(), schema);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let base = format!("/{}", gv_path(group, version));
        let collection = if def.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", def.gr.resource)
        } else {
            format!("{base}/{}", def.gr.resource)
        };
        let body =
            json!({"required": true, "content": {"application/json": {"schema": reference}}});
        let params = |extra: &[&str]| -> Value {
            let mut p: Vec<Value> = extra
                .iter()
                .map(|n| json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
                .collect();
            p.push(json!({"name": "fieldValidation", "in": "query", "description": "Ignore, Warn or Strict: what to do with unknown or duplicate fields in the body.", "schema": {"type": "string", "uniqueItems": true}}));
            Value::Array(p)
        };
        let op = |verb: &str| {
            json!({"operationId": format!("{verb}{}", def.kind), "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": def.kind},
                "parameters": params(&["dryRun", "fieldManager"]),
                "requestBody": body.clone(),
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference.clone()}}}}})
        };
        paths.insert(collection.clone(), json!({"post": op("post")}));
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({"put": op("put"), "patch": op("patch")}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": schemas},
        "x-devcluster-api-version": api_version,
    })
}

/// `/openapi/v2`: one Swagger 2.0 document for everything served, with the same kind schemas
/// as the v3 documents (`x-kubernetes-group-version-kind` on each, which `kubectl explain
/// --output plaintext-openapiv2` looks kinds up by) made into Swagger 2.0 schemas, and the
/// create, replace and patch operations of each resource.
pub fn swagger(reg: &Registry) -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for ((group, version), defs) in group_versions(reg) {
        for def in defs {
            let Some(schema) = kind_schema(def, &version) else {
                continue;
            };
            let name = schema_name(def, &version);
            let mut schema = to_swagger(schema, &mut definitions);
            if let Some(m) = schema.as_object_mut() {
                m.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": group, "version": version, "kind": def.kind}]),
                );
            }
            definitions.insert(name.clone(), schema);
            let reference = json!({"$ref": format!("#/definitions/{name}")});
            let base = format!("/{}", gv_path(&group, &version));
            let collection = if def.namespaced {
                format!("{base}/namespaces/{{namespace}}/{}", def.gr.resource)
            } else {
                format!("{base}/{}", def.gr.resource)
            };
            let op = |verb: &str| {
                let mut parameters = vec![
                    json!({"name": "body", "in": "body", "required": true, "schema": reference.clone()}),
                ];
                parameters.extend(["dryRun", "fieldManager", "fieldValidation"].map(
                    |p| json!({"name": p, "in": "query", "type": "string", "uniqueItems": true}),
                ));
                json!({"operationId": format!("{verb}{}", def.kind),
                    "consumes": ["application/json"], "produces": ["application/json"],
                    "parameters": parameters,
                    "responses": {"200": {"description": "OK", "schema": reference.clone()}},
                    "x-kubernetes-action": verb,
                    "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": def.kind}})
            };
            paths.insert(collection.clone(), json!({"post": op("post")}));
            paths.insert(
                format!("{collection}/{{name}}"),
                json!({"put": op("put"), "patch": op("patch")}),
            );
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "paths": paths,
        "definitions": definitions,
    })
}

/// An OpenAPI v3 schema as Swagger 2.0 has it: a nullable field keeps its `type` (the
/// `nullable` flag goes), `anyOf`/`oneOf` with one non-null choice becomes that choice (others
/// go), and `$defs` move into the document's `definitions`.
fn to_swagger(mut schema: Value, definitions: &mut Map<String, Value>) -> Value {
    let Value::Object(map) = &mut schema else {
        return schema;
    };
    // Types schemars left as references (recursive ones: JSONSchemaProps) become definitions.
    let mut hoisted: Vec<(String, Value)> = Vec::new();
    if let Some(Value::Object(defs)) = map.remove("$defs") {
        hoisted.extend(defs);
    }
    if let Some(Value::Object(mut components)) = map.remove("components")
        && let Some(Value::Object(defs)) = components.remove("schemas")
    {
        hoisted.extend(defs);
    }
    for (name, def) in hoisted {
        if !definitions.contains_key(&name) {
            // Claimed before converting, so a type that refers to itself stops here.
            definitions.insert(name.clone(), Value::Null);
            let converted = to_swagger(def, definitions);
            definitions.insert(name, converted);
        }
    }
    for key in ["nullable", "$schema", "not", "x-kubernetes-validations"] {
        map.remove(key);
    }
    if let Some(Value::Array(types)) = map.get("type") {
        let one = types.iter().find(|t| t.as_str() != Some("null")).cloned();
        match one {
            Some(t) => map.insert("type".into(), t),
            None => map.remove("type"),
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(choices)) = map.remove(key) {
            let real: Vec<Value> = choices
                .into_iter()
                .filter(|c| c.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if let [only] = real.as_slice()
                && let Value::Object(choice) = to_swagger(only.clone(), definitions)
            {
                for (k, v) in choice {
                    map.entry(k).or_insert(v);
                }
            }
        }
    }
    if let Some(Value::String(r)) = map.get_mut("$ref")
        && let Some(name) = r
            .strip_prefix("#/$defs/")
            .or_else(|| r.strip_prefix("#/components/schemas/"))
    {
        *r = format!("#/definitions/{name}");
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for v in props.values_mut() {
            *v = to_swagger(std::mem::take(v), definitions);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v @ Value::Object(_)) = map.get_mut(key) {
            *v = to_swagger(std::mem::take(v), definitions);
        }
    }
    if let Some(Value::Array(list)) = map.get_mut("allOf") {
        for v in list {
            *v = to_swagger(std::mem::take(v), definitions);
        }
    }
    schema
}

/// The schema of one kind at one version.
fn kind_schema(def: &ResourceDef, version: &str) -> Option<Value> {
    match &def.validator {
        Validator::Crd(schemas) => {
            let mut schema = schemas
                .get(version)
                .cloned()
                .flatten()
                .map(|s| s.schema().clone())
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            if let Some(props) = schema
                .as_object_mut()
                .map(|m| m.entry("properties").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
            {
                props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
                props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
                props.insert("metadata".into(), (*object_meta()).clone());
            }
            Some(schema)
        }
        Validator::Builtin(_) => {
            builtin_schema(&def.gr.group, version, &def.kind).map(|s| (*s).clone())
        }
    }
}

/// The schema of `T`, inlined, with its descriptions (built once per type).
fn builtin<T: JsonSchema>() -> Arc<Value> {
    static CACHE: OnceLock<Mutex<BTreeMap<String, Arc<Value>>>> = OnceLock::new();
    let key = T::schema_name().into_owned();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
    {
        return v.clone();
    }
    let value = Arc::new(kubeless_api::schema::plain_schema_for::<T>());
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, value.clone());
    value
}

/// ObjectMeta's schema (every kind's `metadata`).
pub(crate) fn object_meta() -> Arc<Value> {
    builtin::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>()
}

/// What field ownership needs to know of a kind's shape at a version: its CRD schema, or
/// its k8s-openapi type's.
pub(crate) fn field_schema(def: &ResourceDef, version: &str) -> crate::fieldmanager::KindSchema {
    let meta = object_meta();
    match &def.validator {
        Validator::Crd(schemas) => crate::fieldmanager::KindSchema::new(
            None,
            schemas.get(version).cloned().flatten(),
            meta,
        ),
        Validator::Builtin(_) => crate::fieldmanager::KindSchema::new(
            // `group/version` when served under another group (events.k8s.io/v1 Events).
            match version.split_once('/') {
                Some((group, v)) => builtin_schema(group, v, &def.kind),
                None => builtin_schema(&def.gr.group, version, &def.kind),
            },
            None,
            meta,
        ),
    }
}

/// The k8s-openapi type behind each built-in kind devcluster serves.
fn builtin_schema(group: &str, version: &str, kind: &str) -> Option<Arc<Value>> {
    use k8s_openapi::api as a;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    Some(match (group, version, kind) {
        ("", "v1", "Pod") => builtin::<a::core::v1::Pod>(),
        ("", "v1", "Service") => builtin::<a::core::v1::Service>(),
        ("", "v1", "ConfigMap") => builtin::<a::core::v1::ConfigMap>(),
        ("", "v1", "Secret") => builtin::<a::core::v1::Secret>(),
        ("", "v1", "Namespace") => builtin::<a::core::v1::Namespace>(),
        ("", "v1", "ServiceAccount") => builtin::<a::core::v1::ServiceAccount>(),
        ("", "v1", "Endpoints") => builtin::<a::core::v1::Endpoints>(),
        ("", "v1", "Event") => builtin::<a::core::v1::Event>(),
        ("apps", "v1", "Deployment") => builtin::<a::apps::v1::Deployment>(),
        ("batch", "v1", "Job") => builtin::<a::batch::v1::Job>(),
        ("batch", "v1", "CronJob") => builtin::<a::batch::v1::CronJob>(),
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
            builtin::<a::autoscaling::v2::HorizontalPodAutoscaler>()
        }
        ("autoscaling", "v1", "HorizontalPodAutoscaler") => {
            builtin::<a::autoscaling::v1::HorizontalPodAutoscaler>()
        }
        ("networking.k8s.io", "v1", "Ingress") => builtin::<a::networking::v1::Ingress>(),
        ("coordination.k8s.io", "v1", "Lease") => builtin::<a::coordination::v1::Lease>(),
        ("discovery.k8s.io", "v1", "EndpointSlice") => builtin::<a::discovery::v1::EndpointSlice>(),
        ("events.k8s.io", "v1", "Event") => builtin::<a::events::v1::Event>(),
        ("rbac.authorization.k8s.io", "v1", "Role") => builtin::<a::rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => builtin::<a::rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => builtin::<a::rbac::v1::RoleBinding>(),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            builtin::<a::rbac::v1::ClusterRoleBinding>()
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            builtin::<ext::CustomResourceDefinition>()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swagger_keeps_types_of_nullable_fields_and_names_kinds() {
        let reg = Registry::with_builtins();
        let doc = swagger(&reg);
        assert_eq!(doc["swagger"], "2.0");
        let dep = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            dep["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        assert_eq!(
            dep["properties"]["spec"]["properties"]["replicas"]["type"],
            "integer"
        );
        assert!(
            doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["post"].is_object()
        );
        let mut defs = Map::new();
        let converted = to_swagger(
            json!({"type": "object", "properties": {
                "a": {"type": "string", "nullable": true},
                "b": {"type": ["integer", "null"]},
                "c": {"anyOf": [{"type": "object", "properties": {"d": {"type": "boolean"}}}, {"type": "null"}]},
                "e": {"$ref": "#/$defs/E"}, "f": {"$ref": "#/components/schemas/F"}},
                "$defs": {"E": {"type": "string", "nullable": true}},
                "components": {"schemas": {"F": {"type": "object", "properties": {"g": {"$ref": "#/components/schemas/F"}}}}}}),
            &mut defs,
        );
        assert_eq!(converted["properties"]["a"], json!({"type": "string"}));
        assert_eq!(converted["properties"]["b"], json!({"type": "integer"}));
        assert_eq!(converted["properties"]["c"]["type"], "object");
        assert_eq!(converted["properties"]["e"]["$ref"], "#/definitions/E");
        assert_eq!(defs["E"], json!({"type": "string"}));
        assert_eq!(converted["properties"]["f"]["$ref"], "#/definitions/F");
        assert_eq!(defs["F"]["properties"]["g"]["$ref"], "#/definitions/F");
        assert!(converted.get("components").is_none());
    }

    #[test]
    fn builtin_documents_name_their_kinds_and_carry_descriptions() {
        let reg = Registry::with_builtins();
        let doc = group_version(&reg, &["apis", "apps", "v1"]).unwrap();
        let dep = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            dep["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        assert_eq!(
            dep["properties"]["spec"]["properties"]["replicas"]["type"],
            "integer"
        );
        assert!(dep["description"].as_str().unwrap().contains("Deployment"));
        let root = root(&reg);
        assert!(
            root["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/apis/apps/v1?hash=")
        );
        assert!(group_version(&reg, &["apis", "nope", "v1"]).is_none());
    }
}
