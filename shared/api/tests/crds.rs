//! The generated CRDs: structural-schema rules a real API server (apiextensions.k8s.io/v1)
//! enforces, names and printer columns, and that deploy/crds/ is up to date.
#![cfg(test)]

use std::path::PathBuf;

use serde_json::Value;

/// Formats the API server knows (k8s.io/kube-openapi strfmt registry).
const FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "date-time",
    "int32",
    "int64",
    "float",
    "double",
];
const TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];
const FORBIDDEN: &[&str] = &[
    "$ref",
    "$schema",
    "$defs",
    "definitions",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "const",
    "examples",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "$id",
    "id",
];

fn check(node: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        errors.push(format!("{path}: schema is not an object"));
        return;
    };
    for key in FORBIDDEN {
        if map.contains_key(*key) {
            errors.push(format!("{path}: has `{key}`"));
        }
    }
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let ty = map.get("type");
    match ty {
        None if !(int_or_string || preserve) => errors.push(format!("{path}: no type")),
        None => {}
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) && int_or_string => {
            errors.push(format!("{path}: int-or-string must not set type"))
        }
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => {}
        Some(other) => errors.push(format!("{path}: invalid type {other}")),
    }
    let ty = ty.and_then(Value::as_str);
    if let Some(f) = map.get("format").and_then(Value::as_str)
        && !FORMATS.contains(&f)
    {
        errors.push(format!("{path}: unknown format {f}"));
    }
    for (key, want) in [("nullable", "bool"), ("description", "string")] {
        if let Some(v) = map.get(key) {
            let ok = if want == "bool" {
                v.is_boolean()
            } else {
                v.is_string()
            };
            if !ok {
                errors.push(format!("{path}: {key} must be a {want}"));
            }
        }
    }
    if map.get("uniqueItems") == Some(&Value::Bool(true)) {
        errors.push(format!("{path}: uniqueItems true is not allowed"));
    }
    let props = map.get("properties");
    let additional = map.get("additionalProperties");
    if (props.is_some() || additional.is_some()) && ty != Some("object") {
        errors.push(format!("{path}: properties on a non-object"));
    }
    if props.is_some() && additional.is_some() {
        errors.push(format!(
            "{path}: properties and additionalProperties together"
        ));
    }
    if let Some(req) = map.get("required") {
        let names: Vec<&str> = req
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for name in names {
            if props.and_then(|p| p.get(name)).is_none() {
                errors.push(format!("{path}: required `{name}` is not a property"));
            }
        }
    }
    if let Some(p) = props {
        for (name, child) in p.as_object().into_iter().flatten() {
            check(child, &format!("{path}.{name}"), errors);
        }
    }
    match additional {
        Some(child @ Value::Object(_)) => check(child, &format!("{path}.<value>"), errors),
        Some(other) => errors.push(format!(
            "{path}: additionalProperties {other} (use a schema)"
        )),
        None => {}
    }
    match (ty, map.get("items")) {
        (Some("array"), Some(items @ Value::Object(_))) => {
            check(items, &format!("{path}[]"), errors)
        }
        (Some("array"), _) => errors.push(format!("{path}: array without a single items schema")),
        (_, Some(_)) => errors.push(format!("{path}: items on a non-array")),
        _ => {}
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        let ok = values.iter().all(|v| match ty {
            Some("string") => v.is_string(),
            Some("integer") => v.is_i64() || v.is_u64(),
            _ => true,
        });
        if !ok {
            errors.push(format!("{path}: enum values do not match type"));
        }
    }
    if map.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        let keys = map
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array);
        let item_required = map
            .get("items")
            .and_then(|i| i.get("required"))
            .and_then(Value::as_array);
        match (keys, item_required) {
            (Some(keys), Some(req)) if !keys.is_empty() => {
                for k in keys {
                    if !req.contains(k) {
                        errors.push(format!("{path}: list-map key {k} is not required"));
                    }
                }
            }
            _ => errors.push(format!(
                "{path}: list-type map needs keys that items require"
            )),
        }
    }
}

#[test]
fn every_crd_schema_is_structural() {
    let crds = kubeless_api::all();
    assert_eq!(crds.len(), 7);
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap();
        let version = &crd.spec.versions[0];
        let schema = serde_json::to_value(
            version
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let mut errors = Vec::new();
        check(&schema, &name, &mut errors);
        assert_eq!(schema["type"], "object", "{name}: root must be an object");
        // Only name/generateName restrictions are allowed under the root metadata.
        if let Some(meta) = schema["properties"].get("metadata") {
            let extra: Vec<_> = meta
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| !["type", "properties", "description"].contains(&k.as_str()))
                .collect();
            assert!(extra.is_empty(), "{name}: metadata schema has {extra:?}");
        }
        // The status subresource needs a status schema with conditions as a list-map.
        let status = &schema["properties"]["status"];
        assert_eq!(status["type"], "object", "{name}: status schema");
        assert_eq!(
            status["properties"]["conditions"]["x-kubernetes-list-type"], "map",
            "{name}"
        );
        assert_eq!(
            status["properties"]["observedGeneration"]["type"], "integer",
            "{name}"
        );
        assert!(
            errors.is_empty(),
            "{name} is not structural:\n{}",
            errors.join("\n")
        );
    }
}

/// A real server publishes a `nullable` field in /openapi/v2 without its type, so `kubectl
/// explain` would show `<>`: only untyped (preserve-unknown-fields) values may be nullable.
#[test]
fn typed_fields_are_not_nullable() {
    fn walk(node: &Value, path: &str, out: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                let typed =
                    map.contains_key("type") || map.contains_key("x-kubernetes-int-or-string");
                if typed && map.get("nullable") == Some(&Value::Bool(true)) {
                    out.push(path.to_string());
                }
                for (k, v) in map {
                    walk(v, &format!("{path}/{k}"), out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, path, out)),
            _ => {}
        }
    }
    for crd in kubeless_api::all() {
        let mut nullable = Vec::new();
        walk(&serde_json::to_value(&crd).unwrap(), "", &mut nullable);
        assert!(nullable.is_empty(), "{:?}: {nullable:?}", crd.metadata.name);
    }
}

#[test]
fn the_checker_rejects_non_structural_schemas() {
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "b": {"$ref": "#/definitions/B"},
            "c": {"type": "array"},
            "d": {"description": "no type"},
            "e": {"type": "string", "format": "uint32"},
            "f": {"type": "string", "properties": {}},
        }
    });
    let mut errors = Vec::new();
    check(&bad, "bad", &mut errors);
    for field in ["bad.a", "bad.b", "bad.c", "bad.d", "bad.e", "bad.f"] {
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{field}:"))),
            "{field} not flagged: {errors:?}"
        );
    }
}

#[test]
fn names_scope_subresources_and_columns() {
    let expected = [
        ("functions", "Function", "fn"),
        ("httptriggers", "HTTPTrigger", "httptrig"),
        ("cronjobtriggers", "CronJobTrigger", "crontrig"),
        ("kafkatriggers", "KafkaTrigger", "kafkatrig"),
        ("natstriggers", "NATSTrigger", "natstrig"),
        ("kinesistriggers", "KinesisTrigger", "kinesistrig"),
        ("redistriggers", "RedisTrigger", "redistrig"),
    ];
    let crds = kubeless_api::all();
    for (crd, (plural, kind, short)) in crds.iter().zip(expected) {
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.kubeless.io").as_str())
        );
        assert_eq!(crd.spec.group, "kubeless.io");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..])
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["kubeless".to_string()][..])
        );
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1beta1");
        assert!(v.served && v.storage);
        assert!(
            v.subresources.as_ref().unwrap().status.is_some(),
            "{kind}: status subresource"
        );
        let cols = v.additional_printer_columns.as_ref().unwrap();
        let ready = cols.iter().find(|c| c.name == "Ready").unwrap();
        assert_eq!(
            ready.json_path,
            ".status.conditions[?(@.type==\"Ready\")].status"
        );
        assert_eq!(cols.last().unwrap().name, "Age");
    }
}

#[test]
fn committed_crd_yaml_is_up_to_date() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let files = kubeless_api::crd_yaml_files().unwrap();
    let hint = "run `cargo run -p kubeless-api --bin crdgen` and commit deploy/crds/";
    for (name, want) in &files {
        let have = std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("deploy/crds/{name} missing ({e}); {hint}"));
        assert!(have == *want, "deploy/crds/{name} is stale; {hint}");
    }
    let generated: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".kubeless.io.yaml") {
            assert!(
                generated.contains(&name.as_str()),
                "deploy/crds/{name} is not generated by crdgen any more; delete it ({hint})"
            );
        }
    }
}

#[test]
fn committed_yaml_parses_back_into_the_same_crds() {
    for ((_, yaml), crd) in kubeless_api::crd_yaml_files()
        .unwrap()
        .iter()
        .zip(kubeless_api::all())
    {
        let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(parsed, crd);
    }
}

/// CEL functions and the oldest Kubernetes minor that accepts them in a new CRD's rules (a CRD
/// is checked against the previous minor's CEL library, so a function added in 1.N is usable
/// from 1.N+1). Short on purpose: a function not listed fails the test below until someone
/// looks up its version and adds it.
const CEL_FUNCTIONS: &[(&str, u32)] = &[
    // Standard CEL and the list, regex and strings libraries: CRD validation rules are on by
    // default since 1.25.
    ("has", 25),
    ("size", 25),
    ("matches", 25),
    ("string", 25),
    ("int", 25),
    ("double", 25),
    ("duration", 25),
    ("all", 25),
    ("exists", 25),
    ("exists_one", 25),
    ("map", 25),
    ("filter", 25),
    ("startsWith", 25),
    ("endsWith", 25),
    ("contains", 25),
    ("find", 25),
    ("findAll", 25),
    ("lowerAscii", 25),
    ("upperAscii", 25),
    // Kubernetes quantity library (added 1.28).
    ("quantity", 29),
    ("isQuantity", 29),
    ("compareTo", 29),
    ("isGreaterThan", 29),
    ("isLessThan", 29),
    // Kubernetes IP and CIDR libraries (added 1.30).
    ("ip", 31),
    ("cidr", 31),
    ("isIP", 31),
    ("isCIDR", 31),
    // Kubernetes format library (added 1.30).
    ("format", 31),
];

/// The oldest minor the umbrella chart claims (`kubeVersion: ">=1.N.0-0"` in Chart.yaml).
fn chart_floor_minor() -> u32 {
    let chart = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/kubeless/Chart.yaml"),
    )
    .unwrap();
    let re = regex::Regex::new(r#"(?m)^kubeVersion:\s*"?>=\s*1\.([0-9]+)\."#).unwrap();
    re.captures(&chart)
        .and_then(|c| c[1].parse().ok())
        .expect("Chart.yaml has kubeVersion: \">=1.N.0-0\"")
}

fn collect_cel(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                for rule in rules {
                    for key in ["rule", "messageExpression"] {
                        if let Some(Value::String(expr)) = rule.get(key) {
                            out.push(expr.clone());
                        }
                    }
                }
            }
            map.values().for_each(|v| collect_cel(v, out));
        }
        Value::Array(list) => list.iter().for_each(|v| collect_cel(v, out)),
        _ => {}
    }
}

/// The names called in a CEL expression (`f(` and `.f(`), string literals left out.
fn cel_calls(expr: &str) -> Vec<String> {
    let strings = regex::Regex::new(r#"'(\\.|[^'\\])*'|"(\\.|[^"\\])*""#).unwrap();
    let code = strings.replace_all(expr, "''");
    let calls = regex::Regex::new(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(").unwrap();
    calls
        .captures_iter(&code)
        .map(|c| c[1].to_string())
        .collect()
}

#[test]
fn cel_functions_exist_in_the_oldest_kubernetes_the_chart_claims() {
    let floor = chart_floor_minor();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let crd: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut exprs = Vec::new();
        collect_cel(&crd, &mut exprs);
        for expr in exprs {
            for call in cel_calls(&expr) {
                let since = CEL_FUNCTIONS
                    .iter()
                    .find(|(name, _)| *name == call)
                    .map(|(_, minor)| *minor)
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: CEL function {call}() is not in CEL_FUNCTIONS; add it with the \
                             Kubernetes minor that first accepts it in a CRD ({expr})",
                            path.display()
                        )
                    });
                assert!(
                    since <= floor,
                    "{}: {call}() needs Kubernetes 1.{since}, but the chart claims 1.{floor} \
                     (deploy/helm/kubeless/Chart.yaml kubeVersion): {expr}",
                    path.display()
                );
                seen.insert(call);
            }
        }
    }
    // The scan finds the calls the Function CRD is known to make.
    for call in ["duration", "matches", "size", "has"] {
        assert!(
            seen.contains(call),
            "no {call}() found in deploy/crds: {seen:?}"
        );
    }
}

#[test]
fn cel_call_scan_skips_string_literals() {
    assert_eq!(
        cel_calls("'\"' + self.x + 'label (a, b)' + string(self.y.size())"),
        vec!["string", "size"]
    );
}
