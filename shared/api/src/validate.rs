//! Validation of an object against a CRD's OpenAPI v3 schema, as the API server does it: the
//! structural checks and value constraints (type, required, enum, nullable, pattern, format,
//! minimum/maximum, lengths, item and property counts, int-or-string, preserve-unknown-fields),
//! pruning of unknown fields, and the CEL `x-kubernetes-validations` rules (evaluated with the
//! `kube-cel` crate, the Kubernetes CEL libraries on the `cel` crate).
//!
//! devcluster's API server uses [`validate_object`] for every custom resource, and the CLI calls
//! [`function`] and the trigger checks before it sends, so both report the same messages, worded
//! like the real server's (`spec.timeout: Invalid value: "abc": spec.timeout in body should
//! match '...'`).

use std::{fmt, sync::OnceLock};

use kube::CustomResourceExt;
use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value};

/// The kind of a field error, as the API server names it in `details.causes[].reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// `FieldValueInvalid`: a value that breaks a type, pattern, range or CEL rule.
    Invalid,
    /// `FieldValueTypeInvalid`: a value of the wrong JSON type (this blocks the CEL rules).
    TypeInvalid,
    /// `FieldValueRequired`: a required field is missing.
    Required,
    /// `FieldValueNotSupported`: a value outside an enum.
    NotSupported,
    /// `FieldValueTooLong`: a string over maxLength.
    TooLong,
    /// `FieldValueTooMany`: a list or map over maxItems / maxProperties.
    TooMany,
}

impl ErrorType {
    /// The `reason` of a Status cause.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::Required => "FieldValueRequired",
            Self::NotSupported => "FieldValueNotSupported",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
        }
    }
}

/// One refused field: its path (`spec.deployment.spec.replicas`), the kind of error and the
/// message without the path (`Invalid value: "x": ...`), as in a 422 Status cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted field path; `<nil>` for a rule on the object's root, as the real server says.
    pub field: String,
    /// What kind of error it is.
    pub kind: ErrorType,
    /// The message after the path.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}

/// Every error found in one object, printed as the real server words a 422.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name:?} is invalid: {}", join(.errors))]
pub struct Invalid {
    /// Qualified kind, e.g. `Function.kubeless.io`.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// The field errors (never empty).
    pub errors: Vec<FieldError>,
}

fn join(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A CRD version's `openAPIV3Schema` with its CEL rules compiled once, for validating many
/// objects (devcluster keeps one per served version).
pub struct CrdSchema {
    schema: Value,
    compiled: kube_cel::CompiledSchema,
}

impl fmt::Debug for CrdSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrdSchema").finish_non_exhaustive()
    }
}

impl CrdSchema {
    /// Compiles the CEL rules of `schema`.
    pub fn new(schema: Value) -> Self {
        let compiled = kube_cel::compile_schema(&schema);
        Self { schema, compiled }
    }

    /// The schema itself.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The CEL rules that do not compile, as the real server would refuse the CRD for them.
    pub fn rule_errors(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_rule_errors(&self.compiled, &mut out);
        out
    }

    /// Validates `obj` and prunes the fields the schema does not declare (unless preserved).
    /// `old` is the stored object on updates, for CEL transition rules (`oldSelf`). Returns
    /// every error found; CEL rules are skipped only when a value has the wrong type, as on
    /// the real server.
    pub fn validate(&self, obj: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
        self.validate_reporting_unknown(obj, old).0
    }

    /// [`CrdSchema::validate`], also returning the paths of the unknown fields it pruned
    /// (`spec.handeler`, `spec.deployment.spec.template.spec.containers[0].foo`), which the
    /// API server reports as warnings or, with `fieldValidation=Strict`, refuses.
    pub fn validate_reporting_unknown(
        &self,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> (Vec<FieldError>, Vec<String>) {
        let Walk {
            mut errors,
            unknown,
        } = structural(&self.schema, obj);
        if !blocks_cel(&errors) {
            static VALIDATOR: OnceLock<kube_cel::Validator> = OnceLock::new();
            let validator = VALIDATOR.get_or_init(kube_cel::Validator::new);
            let result = validator.validate_compiled(&self.compiled, obj, old);
            errors.extend(cel_errors(&self.schema, result));
        }
        (errors, unknown)
    }
}

fn collect_rule_errors(node: &kube_cel::CompiledSchema, out: &mut Vec<String>) {
    out.extend(node.compilation_errors().iter().map(|e| e.to_string()));
    node.properties
        .values()
        .chain(node.items.as_deref())
        .chain(node.additional_properties.as_deref())
        .chain(node.all_of.iter())
        .chain(node.one_of.iter())
        .chain(node.any_of.iter())
        .for_each(|child| collect_rule_errors(child, out));
}

/// Validates `obj` against a CRD version's `openAPIV3Schema` (compiling its CEL rules on each
/// call; use [`CrdSchema`] for many objects). See [`CrdSchema::validate`].
pub fn validate_object(schema: &Value, obj: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = structural(schema, obj).errors;
    if !blocks_cel(&errors) {
        errors.extend(cel(schema, obj, old));
    }
    errors
}

/// What one structural pass found: the field errors, and the unknown fields it pruned.
#[derive(Default)]
struct Walk {
    errors: Vec<FieldError>,
    unknown: Vec<String>,
}

/// The structural checks, value constraints and pruning (no CEL).
fn structural(schema: &Value, obj: &mut Value) -> Walk {
    let mut w = Walk::default();
    let Some(map) = obj.as_object_mut() else {
        w.errors.push(invalid("<nil>", "must be an object".into()));
        return w;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => check_field(sub, map, &key, &key, &mut w),
            None if preserve => {}
            None => {
                map.remove(&key);
                w.unknown.push(key);
            }
        }
    }
    required(schema, map, "", &mut w.errors);
    w
}

/// Checks the field `key` of `map` against `schema`. A `null` where the schema is not
/// `nullable` is pruned, as the real server prunes it before defaulting and validation.
fn check_field(schema: &Value, map: &mut Map<String, Value>, key: &str, path: &str, w: &mut Walk) {
    if map.get(key).is_some_and(Value::is_null) && !flag(schema, "nullable") {
        map.remove(key);
        return;
    }
    if let Some(child) = map.get_mut(key) {
        check(schema, child, path, w);
    }
}

/// Evaluates the CEL `x-kubernetes-validations` rules of `schema` on `obj` (and `old` for
/// transition rules).
pub fn cel(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    static VALIDATOR: OnceLock<kube_cel::Validator> = OnceLock::new();
    let validator = VALIDATOR.get_or_init(kube_cel::Validator::new);
    cel_errors(schema, validator.validate(schema, obj, old))
}

fn cel_errors(schema: &Value, result: Result<(), kube_cel::ValidationErrors>) -> Vec<FieldError> {
    match result {
        Ok(()) => Vec::new(),
        Err(errs) => errs
            .into_vec()
            .into_iter()
            .map(|e| {
                // A rule with `fieldPath` reports at that field, and the real server prints it
                // without a leading dot; the value shown stays the type of the node the rule
                // sits on (`"object"` for a rule on the root), as the real server's does.
                let path = e.field_path.trim_start_matches('.');
                let field = if path.is_empty() {
                    "<nil>".to_string()
                } else {
                    path.to_string()
                };
                let node = rule_field_path(schema, &e.rule)
                    .and_then(|fp| path.strip_suffix(fp.trim_start_matches('.')))
                    .map_or(path, |base| base.trim_end_matches('.'));
                let ty = schema_type_at(schema, node);
                FieldError {
                    field,
                    kind: ErrorType::Invalid,
                    detail: format!("Invalid value: \"{ty}\": {}", e.message),
                }
            })
            .collect(),
    }
}

/// The `fieldPath` of the CEL rule whose expression is `rule`, if it has one.
fn rule_field_path<'a>(schema: &'a Value, rule: &str) -> Option<&'a str> {
    let Value::Object(map) = schema else {
        return None;
    };
    let own = map
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r.get("rule").and_then(Value::as_str) == Some(rule))
        .and_then(|r| r.get("fieldPath"))
        .and_then(Value::as_str);
    own.or_else(|| {
        map.get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|p| p.values())
            .chain(
                ["items", "additionalProperties"]
                    .iter()
                    .filter_map(|k| map.get(*k)),
            )
            .find_map(|child| rule_field_path(child, rule))
    })
}

/// The schema `type` of the node at a dotted path, for CEL error messages ("object").
fn schema_type_at(schema: &Value, path: &str) -> String {
    let mut node = schema;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let name = part.split('[').next().unwrap_or(part);
        node = match node.pointer(&format!("/properties/{name}")) {
            Some(n) => n,
            None => return "object".into(),
        };
        if part.contains('[') {
            node = node.get("items").unwrap_or(node);
        }
    }
    node.get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_string()
}

/// Validates a typed custom resource against the schema of its own CRD (first version).
pub fn resource<K: CustomResourceExt + Serialize>(obj: &K, name: &str) -> Result<(), Invalid> {
    use std::{
        collections::HashMap,
        sync::{Arc, Mutex},
    };
    static SCHEMAS: OnceLock<Mutex<HashMap<String, Arc<Mutex<CrdSchema>>>>> = OnceLock::new();
    let crd = crate::crd::<K>();
    let kind = format!("{}.{}", crd.spec.names.kind, crd.spec.group);
    let mut value = serde_json::to_value(obj).map_err(|e| Invalid {
        kind: kind.clone(),
        name: name.to_string(),
        errors: vec![invalid("<nil>", e.to_string())],
    })?;
    let schema = {
        let mut cache = SCHEMAS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        cache
            .entry(kind.clone())
            .or_insert_with(|| {
                let schema = crd
                    .spec
                    .versions
                    .first()
                    .and_then(|v| v.schema.as_ref())
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or(Value::Null);
                Arc::new(Mutex::new(CrdSchema::new(schema)))
            })
            .clone()
    };
    let errors = schema
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .validate(&mut value, None);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Invalid {
            kind,
            name: name.to_string(),
            errors,
        })
    }
}

/// Validates a Function as the API server will: what `kubectl apply` or the CLI would be
/// refused.
pub fn function(f: &crate::Function) -> Result<(), Invalid> {
    resource(f, f.metadata.name.as_deref().unwrap_or(""))
}

/// Validates an HTTPTrigger.
pub fn http_trigger(t: &crate::HttpTrigger) -> Result<(), Invalid> {
    resource(t, t.metadata.name.as_deref().unwrap_or(""))
}

/// Validates a CronJobTrigger.
pub fn cronjob_trigger(t: &crate::CronJobTrigger) -> Result<(), Invalid> {
    resource(t, t.metadata.name.as_deref().unwrap_or(""))
}

/// Validates a KafkaTrigger.
pub fn kafka_trigger(t: &crate::KafkaTrigger) -> Result<(), Invalid> {
    resource(t, t.metadata.name.as_deref().unwrap_or(""))
}

/// Validates a NATSTrigger.
pub fn nats_trigger(t: &crate::NatsTrigger) -> Result<(), Invalid> {
    resource(t, t.metadata.name.as_deref().unwrap_or(""))
}

/// Validates a KinesisTrigger.
pub fn kinesis_trigger(t: &crate::KinesisTrigger) -> Result<(), Invalid> {
    resource(t, t.metadata.name.as_deref().unwrap_or(""))
}

/// Validates a RedisTrigger.
pub fn redis_trigger(t: &crate::RedisTrigger) -> Result<(), Invalid> {
    resource(t, t.metadata.name.as_deref().unwrap_or(""))
}

fn invalid(field: &str, detail: String) -> FieldError {
    FieldError {
        field: field.to_string(),
        kind: ErrorType::Invalid,
        detail,
    }
}

fn type_invalid(field: &str, detail: String) -> FieldError {
    FieldError {
        field: field.to_string(),
        kind: ErrorType::TypeInvalid,
        detail,
    }
}

/// The real server skips the CEL rules only when a value has the wrong type (the rules could
/// not be evaluated on it); other errors are reported together with the rules' own.
fn blocks_cel(errors: &[FieldError]) -> bool {
    errors.iter().any(|e| e.kind == ErrorType::TypeInvalid)
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn join_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn required(schema: &Value, map: &Map<String, Value>, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if matches!(r, "apiVersion" | "kind" | "metadata") && path.is_empty() {
                continue;
            }
            if !map.contains_key(r) {
                errors.push(FieldError {
                    field: join_path(path, r),
                    kind: ErrorType::Required,
                    detail: "Required value".into(),
                });
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

/// A value as the real server quotes it in messages: strings in quotes, numbers bare.
fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) | Value::Object(_) => format!("\"{}\"", type_name(v)),
        other => other.to_string(),
    }
}

fn compiled(pattern: &str) -> Option<Regex> {
    use std::{collections::HashMap, sync::Mutex};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .clone()
}

fn check(schema: &Value, v: &mut Value, path: &str, w: &mut Walk) {
    let errors = &mut w.errors;
    if v.is_null() {
        if flag(schema, "nullable") {
            return;
        }
        if let Some(ty) = schema.get("type").and_then(Value::as_str) {
            errors.push(type_invalid(
                path,
                format!("Invalid value: \"null\": {path} in body must be of type {ty}: \"null\""),
            ));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errors.push(type_invalid(
                path,
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type integer-or-string",
                    type_name(v)
                ),
            ));
            return;
        }
        constraints(schema, v, path, errors);
        return;
    }
    if let Some(enm) = schema.get("enum").and_then(Value::as_array)
        && !enm.contains(v)
    {
        let allowed: Vec<String> = enm.iter().map(quoted).collect();
        errors.push(FieldError {
            field: path.to_string(),
            kind: ErrorType::NotSupported,
            detail: format!(
                "Unsupported value: {}: supported values: {}",
                quoted(v),
                allowed.join(", ")
            ),
        });
    }
    // A node without a type (not structural) keeps its content as it is.
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        constraints(schema, v, path, errors);
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
        errors.push(invalid(
            path,
            format!(
                "Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""
            ),
        ));
        return;
    }
    constraints(schema, v, path, errors);
    descend(schema, v, path, w);
}

fn descend(schema: &Value, v: &mut Value, path: &str, w: &mut Walk) {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let sub_path = join_path(path, &key);
                match (props.and_then(|p| p.get(&key)), additional) {
                    (Some(s), _) | (None, Some(s @ Value::Object(_))) => {
                        check_field(s, map, &key, &sub_path, w);
                    }
                    (None, Some(Value::Bool(true))) => {}
                    _ if preserve => {}
                    _ => {
                        map.remove(&key);
                        w.unknown.push(sub_path);
                    }
                }
            }
            required(schema, map, path, &mut w.errors);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), w);
                }
            }
        }
        _ => {}
    }
}

fn number(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

fn count(schema: &Value, key: &str) -> Option<usize> {
    schema
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

/// The value validations of one node (the type already matched).
fn constraints(schema: &Value, v: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let mut push = |kind, detail: String| {
        errors.push(FieldError {
            field: path.to_string(),
            kind,
            detail,
        })
    };
    match v {
        Value::Number(n) => {
            let Some(x) = n.as_f64() else { return };
            let excl_min = flag(schema, "exclusiveMinimum");
            let excl_max = flag(schema, "exclusiveMaximum");
            if let Some(min) = number(schema, "minimum")
                && (x < min || (excl_min && x == min))
            {
                let word = if excl_min {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                push(
                    ErrorType::Invalid,
                    format!("Invalid value: {n}: {path} in body should be {word} {min}"),
                );
            }
            if let Some(max) = number(schema, "maximum")
                && (x > max || (excl_max && x == max))
            {
                let word = if excl_max {
                    "less than"
                } else {
                    "less than or equal to"
                };
                push(
                    ErrorType::Invalid,
                    format!("Invalid value: {n}: {path} in body should be {word} {max}"),
                );
            }
            if let Some(m) = number(schema, "multipleOf")
                && m > 0.0
                && (x / m).fract() != 0.0
            {
                push(
                    ErrorType::Invalid,
                    format!("Invalid value: {n}: {path} in body should be a multiple of {m}"),
                );
            }
            if let Some(fmt) = schema.get("format").and_then(Value::as_str) {
                let fits = match fmt {
                    "int32" => i32::try_from(n.as_i64().unwrap_or(i64::MAX)).is_ok(),
                    "int64" => n.as_i64().is_some(),
                    _ => true,
                };
                if !fits {
                    push(
                        ErrorType::Invalid,
                        format!("Invalid value: {n}: {path} in body must be of type {fmt}"),
                    );
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count();
            if let Some(max) = count(schema, "maxLength")
                && len > max
            {
                push(
                    ErrorType::TooLong,
                    format!("Too long: may not be more than {max} bytes"),
                );
            }
            if let Some(min) = count(schema, "minLength")
                && len < min
            {
                push(
                    ErrorType::Invalid,
                    format!(
                        "Invalid value: {s:?}: {path} in body should be at least {min} chars long"
                    ),
                );
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && compiled(pattern).is_some_and(|re| !re.is_match(s))
            {
                push(
                    ErrorType::Invalid,
                    format!("Invalid value: {s:?}: {path} in body should match '{pattern}'"),
                );
            }
            if let Some(fmt) = schema.get("format").and_then(Value::as_str)
                && !format_ok(fmt, s)
            {
                push(
                    ErrorType::Invalid,
                    format!("Invalid value: {s:?}: {path} in body must be of type {fmt}: {s:?}"),
                );
            }
        }
        Value::Array(items) => {
            if let Some(max) = count(schema, "maxItems")
                && items.len() > max
            {
                push(
                    ErrorType::TooMany,
                    format!("Too many: {}: must have at most {max} items", items.len()),
                );
            }
            if let Some(min) = count(schema, "minItems")
                && items.len() < min
            {
                push(
                    ErrorType::Invalid,
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} items",
                        items.len()
                    ),
                );
            }
            if flag(schema, "uniqueItems") {
                let dup = items
                    .iter()
                    .enumerate()
                    .any(|(i, a)| items[..i].contains(a));
                if dup {
                    push(
                        ErrorType::Invalid,
                        format!(
                            "Invalid value: \"array\": {path} in body shouldn't contain duplicates"
                        ),
                    );
                }
            }
        }
        Value::Object(map) => {
            if let Some(max) = count(schema, "maxProperties")
                && map.len() > max
            {
                push(
                    ErrorType::TooMany,
                    format!("Too many: {}: must have at most {max} items", map.len()),
                );
            }
            if let Some(min) = count(schema, "minProperties")
                && map.len() < min
            {
                push(
                    ErrorType::Invalid,
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} properties",
                        map.len()
                    ),
                );
            }
        }
        _ => {}
    }
}

/// The string formats the API server checks (unknown formats pass, as there).
fn format_ok(fmt: &str, s: &str) -> bool {
    match fmt {
        "date-time" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "byte" => {
            s.len().is_multiple_of(4)
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        }
        "int-or-string" => true,
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "uuid" => {
            s.len() == 36
                && s.chars().enumerate().all(|(i, c)| {
                    if matches!(i, 8 | 13 | 18 | 23) {
                        c == '-'
                    } else {
                        c.is_ascii_hexdigit()
                    }
                })
        }
        _ => true,
    }
}
