//! The malformed-object sweep of issue 20, on the schema side: every field of every CRD, given a
//! value of the wrong type or past its bounds, is refused with an error naming that field;
//! unicode, control characters and a 1 MiB string never make the validator panic. This is the
//! code devcluster's API server and the CLI's pre-send check both run, so what it refuses is
//! refused at apply time. (That one bad object costs only itself in the running controllers is
//! checked by each service's `guarded_watch` test.)
#![cfg(test)]

use std::path::Path;

use kubeless_api::validate::CrdSchema;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index,
}

fn path_text(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index => out.push_str("[0]"),
        }
    }
    out
}

/// Every schema node below `schema` that has a type, with its path (arrays through their
/// first element). Preserved-unknown and int-or-string nodes are leaves.
fn leaves(schema: &Value, path: Vec<Seg>, out: &mut Vec<(Vec<Seg>, Value)>) {
    if path.len() > 9 {
        return;
    }
    if !path.is_empty() && schema.get("type").is_some() {
        out.push((path.clone(), schema.clone()));
    }
    let opaque = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .is_some_and(|v| v == true)
        || schema.get("x-kubernetes-int-or-string").is_some();
    if opaque {
        return;
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            let mut p = path.clone();
            p.push(Seg::Key(k.clone()));
            leaves(sub, p, out);
        }
    }
    if let Some(items) = schema.get("items") {
        let mut p = path;
        p.push(Seg::Index);
        leaves(items, p, out);
    }
}

/// Sets `value` at `path` in `obj`, creating objects and one-element arrays on the way.
fn set(obj: &mut Value, path: &[Seg], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        *obj = value;
        return;
    };
    let child = match first {
        Seg::Key(k) => {
            if !obj.is_object() {
                *obj = json!({});
            }
            obj.as_object_mut()
                .unwrap()
                .entry(k.clone())
                .or_insert(Value::Null)
        }
        Seg::Index => {
            if obj.as_array().is_none_or(|a| a.is_empty()) {
                *obj = json!([{}]);
            }
            &mut obj.as_array_mut().unwrap()[0]
        }
    };
    if rest.is_empty() {
        *child = value;
    } else {
        if child.is_null() {
            *child = match rest[0] {
                Seg::Key(_) => json!({}),
                Seg::Index => json!([{}]),
            };
        }
        set(child, rest, value);
    }
}

/// Values that must be refused at a node of this schema.
fn wrong_values(schema: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => {
            out.extend([json!(42), json!({"a": 1}), json!(["a"])]);
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                out.push(json!("a".repeat(max as usize + 1)));
            }
            if schema.get("enum").is_some() {
                out.push(json!("not-one-of-the-values"));
            }
        }
        Some("integer") => {
            out.extend([json!("12"), json!(1.5), json!({"a": 1})]);
            if let Some(min) = num("minimum") {
                out.push(json!(min as i64 - 1));
            }
            if let Some(max) = num("maximum") {
                out.push(json!(max as i64 + 1));
            }
        }
        Some("number") => out.extend([json!("1.5"), json!([1])]),
        Some("boolean") => out.extend([json!("yes"), json!(1)]),
        Some("array") => out.extend([json!("a"), json!(5), json!({"a": 1})]),
        Some("object") => out.extend([json!("a"), json!(5), json!(["a"])]),
        _ => {}
    }
    out
}

/// The `openAPIV3Schema` of the CRD's storage version.
fn storage_schema(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    let version = crd.spec.versions.iter().find(|v| v.storage).unwrap();
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap(),
    )
    .unwrap()
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn every_field_refuses_wrong_types_and_bounds_by_name() {
    let bases = [
        ("Function", "function-full.yaml"),
        ("HTTPTrigger", "httptrigger-full.yaml"),
        ("CronJobTrigger", "cronjobtrigger-full.yaml"),
        ("KafkaTrigger", "kafkatrigger.yaml"),
        ("NATSTrigger", "natstrigger-jetstream.yaml"),
        ("KinesisTrigger", "kinesistrigger-new-fields.yaml"),
        ("RedisTrigger", "redistrigger.yaml"),
    ];
    let mut checked = 0usize;
    let mut misses = Vec::new();
    for crd in kubeless_api::all() {
        let kind = crd.spec.names.kind.clone();
        let file = bases
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, f)| *f)
            .unwrap_or_else(|| panic!("no base object for {kind}: add a fixture"));
        let schema = storage_schema(&crd);
        let validator = CrdSchema::new(schema.clone());
        let base = fixture(file);
        let clean = validator.validate(&mut base.clone(), None);
        assert!(clean.is_empty(), "{file} is not valid: {clean:?}");

        let mut nodes = Vec::new();
        leaves(&schema, Vec::new(), &mut nodes);
        for (path, node) in &nodes {
            let at = path_text(path);
            for bad in wrong_values(node) {
                let mut obj = base.clone();
                set(&mut obj, path, bad.clone());
                let errors = validator.validate(&mut obj, None);
                checked += 1;
                // The error names the field (or, for a parent made up on the way, a field on
                // the path to it).
                let named = errors.iter().any(|e| {
                    let f = e.field.replace(['[', ']'], ".");
                    let want = at.replace(['[', ']'], ".");
                    f.trim_end_matches('.') == want.trim_end_matches('.')
                        || want.starts_with(&f)
                        || f.starts_with(&want)
                });
                if !named {
                    let shown = bad.to_string().chars().take(40).collect::<String>();
                    misses.push(format!("{kind} {at} = {shown}: {errors:?}"));
                }
            }
        }
    }
    println!("{checked} malformed values checked");
    assert!(
        checked > 500,
        "only {checked} values checked: the walk found too few fields"
    );
    assert!(
        misses.is_empty(),
        "{} malformed values were not refused by name, e.g.:\n{}",
        misses.len(),
        misses
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn unicode_control_characters_and_huge_strings_never_panic() {
    let weird = [
        json!("héllo wörld ✓ 🙂"),
        json!("\u{0}\u{7}\u{1b}[31m\r\n\t"),
        json!("\u{202e}reversed"),
        json!("a".repeat(1 << 20)),
    ];
    for crd in kubeless_api::all() {
        let schema = storage_schema(&crd);
        let validator = CrdSchema::new(schema.clone());
        let mut nodes = Vec::new();
        leaves(&schema, Vec::new(), &mut nodes);
        let base = json!({"apiVersion": "kubeless.io/v1beta1", "kind": crd.spec.names.kind,
                          "metadata": {"name": "x", "namespace": "default"}, "spec": {}});
        for (path, _) in nodes
            .iter()
            .filter(|(_, n)| n.get("type").and_then(Value::as_str) == Some("string"))
        {
            for value in &weird {
                let mut obj = base.clone();
                set(&mut obj, path, value.clone());
                // Accepted or refused, never a panic; a refusal names a field.
                for e in validator.validate(&mut obj, None) {
                    assert!(!e.field.is_empty(), "{}: {e:?}", path_text(path));
                }
            }
        }
    }
}
