//! Validation of built-in kinds beyond their JSON shape, for the fields our controllers, charts
//! and CLI write, worded like the real API server's field errors: label values, resource
//! quantities and request <= limit, ports, enums (Service type, restartPolicy,
//! imagePullPolicy, protocol, concurrencyPolicy, dnsPolicy), container, port and env names,
//! probes, Deployment selectors, HPA bounds and metrics, CronJob schedules and names.
//! The shape itself is checked by deserializing into the k8s-openapi type first.

use kubeless_api::validate::{ErrorType, FieldError};
use serde_json::{Map, Value};

type Errors = Vec<FieldError>;

fn push(errs: &mut Errors, field: &str, kind: ErrorType, detail: String) {
    errs.push(FieldError {
        field: field.to_string(),
        kind,
        detail,
    });
}

fn invalid(errs: &mut Errors, field: &str, value: &Value, why: &str) {
    push(
        errs,
        field,
        ErrorType::Invalid,
        format!("Invalid value: {}: {why}", show(value)),
    );
}

fn required(errs: &mut Errors, field: &str) {
    push(errs, field, ErrorType::Required, "Required value".into());
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn not_supported(errs: &mut Errors, field: &str, value: &Value, allowed: &[&str]) {
    let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
    push(
        errs,
        field,
        ErrorType::NotSupported,
        format!(
            "Unsupported value: {}: supported values: {}",
            show(value),
            list.join(", ")
        ),
    );
}

fn check_enum(errs: &mut Errors, obj: &Value, key: &str, path: &str, allowed: &[&str]) {
    if let Some(v) = obj.get(key)
        && !v.is_null()
        && !v.as_str().is_some_and(|s| allowed.contains(&s))
    {
        not_supported(errs, &format!("{path}.{key}"), v, allowed);
    }
}

fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

use crate::store::is_dns_label as is_dns1123_label;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// An IANA service name: at most 15 characters, lower case letters, digits and '-', at least one
/// letter, no leading, trailing or double '-'.
fn iana_svc_name_error(s: &str) -> Option<&'static str> {
    if s.is_empty() || s.len() > 15 {
        return Some("must be no more than 15 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if s.contains("--") {
        return Some("must not contain consecutive hyphens");
    }
    if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        return Some("must contain at least one letter (a-z)");
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("must not begin or end with a hyphen");
    }
    None
}

/// A label value: at most 63 characters, alphanumerics, '-', '_' or '.', starting and ending
/// with an alphanumeric (empty allowed).
fn label_value_error(s: &str) -> Option<&'static str> {
    if s.len() > 63 {
        return Some("must be no more than 63 characters");
    }
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = s.is_empty()
        || (s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if !ok_chars || !ends_ok {
        return Some(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        );
    }
    None
}

fn check_label_map(errs: &mut Errors, labels: Option<&Value>, path: &str) {
    let Some(Value::Object(map)) = labels else {
        return;
    };
    for (k, v) in map {
        let name = k.rsplit('/').next().unwrap_or(k);
        if name.is_empty() || name.len() > 63 || label_value_error(name).is_some() {
            invalid(
                errs,
                path,
                &Value::String(k.clone()),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            );
        }
        if let Some(s) = v.as_str()
            && let Some(why) = label_value_error(s)
        {
            invalid(errs, path, v, why);
        }
    }
}

fn check_metadata(errs: &mut Errors, meta: Option<&Value>, path: &str) {
    if let Some(m) = meta {
        check_label_map(errs, m.get("labels"), &format!("{path}.labels"));
    }
}

/// A parsed quantity as a number, for comparisons (the exact value is not needed here).
fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mul = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(n * mul)
}

fn quantity_value(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => quantity(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// The Pod's QoS class, as the real API server sets `status.qosClass` at creation: BestEffort
/// when no container (init containers included) requests or limits cpu or memory; Guaranteed
/// when every container limits both and every request equals its limit (a missing request is
/// its limit, as defaulting makes it); Burstable otherwise.
pub(crate) fn pod_qos_class(pod: &Value) -> &'static str {
    let containers = ["initContainers", "containers"].into_iter().flat_map(|k| {
        pod.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    });
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let get = |kind: &str, res: &str| {
            c.pointer(&format!("/resources/{kind}/{res}"))
                .and_then(quantity_value)
                .filter(|q| *q != 0.0)
        };
        for res in ["cpu", "memory"] {
            let (request, limit) = (get("requests", res), get("limits", res));
            any |= request.is_some() || limit.is_some();
            match limit {
                None => guaranteed = false,
                Some(l) => guaranteed &= request.is_none_or(|r| r == l),
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

const QUANTITY_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn check_resources(errs: &mut Errors, res: &Value, path: &str) {
    let mut parsed: [Map<String, Value>; 2] = Default::default();
    for (i, key) in ["limits", "requests"].into_iter().enumerate() {
        let Some(Value::Object(map)) = res.get(key) else {
            continue;
        };
        for (name, v) in map {
            let field = format!("{path}.{key}[{name}]");
            match quantity_value(v) {
                None => invalid(errs, &field, v, QUANTITY_MSG),
                Some(q) if q < 0.0 => {
                    invalid(errs, &field, v, "must be greater than or equal to 0")
                }
                Some(q) => {
                    parsed[i].insert(name.clone(), Value::from(q));
                }
            }
        }
    }
    let [limits, requests] = &parsed;
    for (name, req) in requests {
        if let (Some(r), Some(l)) = (req.as_f64(), limits.get(name).and_then(Value::as_f64))
            && r > l
        {
            let shown = res
                .pointer(&format!("/requests/{name}"))
                .cloned()
                .unwrap_or(Value::Null);
            let limit = res
                .pointer(&format!("/limits/{name}"))
                .map(show)
                .unwrap_or_default();
            invalid(
                errs,
                &format!("{path}.requests"),
                &shown,
                &format!(
                    "must be less than or equal to {name} limit of {}",
                    limit.trim_matches('"')
                ),
            );
        }
    }
}

fn check_port_range(errs: &mut Errors, v: Option<&Value>, field: &str, min: i64) {
    if let Some(n) = v.and_then(Value::as_i64)
        && (n < min || n > 65535)
        && !(min == 0 && n == 0)
    {
        invalid(
            errs,
            field,
            &Value::from(n),
            &format!("must be between {} and 65535, inclusive", min.max(1)),
        );
    }
}

fn check_int_or_name_port(errs: &mut Errors, v: Option<&Value>, field: &str) {
    match v {
        Some(Value::String(s)) => {
            if let Some(why) = iana_svc_name_error(s) {
                invalid(errs, field, &Value::String(s.clone()), why);
            }
        }
        other => check_port_range(errs, other, field, 1),
    }
}

fn check_probe(errs: &mut Errors, probe: Option<&Value>, path: &str) {
    let Some(p) = probe.filter(|p| !p.is_null()) else {
        return;
    };
    let handlers = ["exec", "httpGet", "tcpSocket", "grpc"]
        .iter()
        .filter(|h| p.get(**h).is_some_and(|v| !v.is_null()))
        .count();
    if handlers == 0 {
        required(errs, &format!("{path}.handler"));
    } else if handlers > 1 {
        push(
            errs,
            &format!("{path}.handler"),
            ErrorType::Invalid,
            "Forbidden: may not specify more than 1 handler type".into(),
        );
    }
    check_int_or_name_port(
        errs,
        p.pointer("/httpGet/port"),
        &format!("{path}.httpGet.port"),
    );
    check_int_or_name_port(
        errs,
        p.pointer("/tcpSocket/port"),
        &format!("{path}.tcpSocket.port"),
    );
    check_port_range(
        errs,
        p.pointer("/grpc/port"),
        &format!("{path}.grpc.port"),
        1,
    );
    for key in [
        "periodSeconds",
        "timeoutSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        if let Some(n) = p.get(key).and_then(Value::as_i64)
            && n < 1
        {
            invalid(
                errs,
                &format!("{path}.{key}"),
                &Value::from(n),
                "must be greater than or equal to 1",
            );
        }
    }
    if let Some(n) = p.get("initialDelaySeconds").and_then(Value::as_i64)
        && n < 0
    {
        invalid(
            errs,
            &format!("{path}.initialDelaySeconds"),
            &Value::from(n),
            "must be greater than or equal to 0",
        );
    }
}

fn check_container(errs: &mut Errors, c: &Value, path: &str) {
    match c.get("name").and_then(Value::as_str) {
        None | Some("") => required(errs, &format!("{path}.name")),
        Some(n) if !is_dns1123_label(n) => invalid(
            errs,
            &format!("{path}.name"),
            &Value::from(n),
            DNS1123_LABEL_MSG,
        ),
        _ => {}
    }
    if c.get("image")
        .and_then(Value::as_str)
        .is_none_or(|s| s.trim().is_empty())
    {
        required(errs, &format!("{path}.image"));
    }
    check_enum(
        errs,
        c,
        "imagePullPolicy",
        path,
        &["Always", "IfNotPresent", "Never"],
    );
    check_enum(
        errs,
        c,
        "terminationMessagePolicy",
        path,
        &["File", "FallbackToLogsOnError"],
    );
    for (i, p) in items(c, "ports") {
        let pp = format!("{path}.ports[{i}]");
        match p.get("containerPort") {
            None => required(errs, &format!("{pp}.containerPort")),
            v => check_port_range(errs, v, &format!("{pp}.containerPort"), 1),
        }
        check_port_range(errs, p.get("hostPort"), &format!("{pp}.hostPort"), 0);
        check_enum(errs, p, "protocol", &pp, &["SCTP", "TCP", "UDP"]);
        if let Some(n) = p.get("name").and_then(Value::as_str)
            && let Some(why) = iana_svc_name_error(n)
        {
            invalid(errs, &format!("{pp}.name"), &Value::from(n), why);
        }
    }
    for (i, e) in items(c, "env") {
        let name = e.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            required(errs, &format!("{path}.env[{i}].name"));
        } else if name.contains('=') || !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            invalid(
                errs,
                &format!("{path}.env[{i}].name"),
                &Value::from(name),
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            );
        }
    }
    if let Some(res) = c.get("resources") {
        check_resources(errs, res, &format!("{path}.resources"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        check_probe(errs, c.get(probe), &format!("{path}.{probe}"));
    }
}

/// A pod spec at `path`; `restart` lists the restart policies this owner allows.
fn check_pod_spec(errs: &mut Errors, spec: Option<&Value>, path: &str, restart: &[&str]) {
    let Some(spec) = spec else {
        required(errs, path);
        return;
    };
    if items(spec, "containers").next().is_none() {
        required(errs, &format!("{path}.containers"));
    }
    for key in ["initContainers", "containers"] {
        for (i, c) in items(spec, key) {
            check_container(errs, c, &format!("{path}.{key}[{i}]"));
        }
    }
    check_enum(errs, spec, "restartPolicy", path, restart);
    check_enum(
        errs,
        spec,
        "dnsPolicy",
        path,
        &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
    );
}

fn check_template(errs: &mut Errors, tmpl: Option<&Value>, path: &str, restart: &[&str]) {
    let Some(t) = tmpl else {
        required(errs, path);
        return;
    };
    check_metadata(errs, t.get("metadata"), &format!("{path}.metadata"));
    check_pod_spec(errs, t.get("spec"), &format!("{path}.spec"), restart);
}

fn selector_matches(selector: &Value, labels: Option<&Value>) -> bool {
    let empty = Map::new();
    let labels = labels.and_then(Value::as_object).unwrap_or(&empty);
    let exact = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let exprs = items(selector, "matchExpressions").all(|(_, e)| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = items(e, "values").filter_map(|(_, v)| v.as_str()).collect();
        let have = labels.get(key).and_then(Value::as_str);
        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => !have.is_some_and(|h| values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    exact && exprs
}

fn check_selector(errs: &mut Errors, selector: Option<&Value>, path: &str) {
    let Some(sel) = selector else { return };
    check_label_map(errs, sel.get("matchLabels"), &format!("{path}.matchLabels"));
    for (i, e) in items(sel, "matchExpressions") {
        let ep = format!("{path}.matchExpressions[{i}]");
        check_enum(
            errs,
            e,
            "operator",
            &ep,
            &["In", "NotIn", "Exists", "DoesNotExist"],
        );
        let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
        let n = items(e, "values").count();
        if matches!(op, "In" | "NotIn") && n == 0 {
            required(errs, &format!("{ep}.values"));
        }
        if matches!(op, "Exists" | "DoesNotExist") && n > 0 {
            push(
                errs,
                &format!("{ep}.values"),
                ErrorType::Invalid,
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    .into(),
            );
        }
    }
}

pub fn service(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    let Some(spec) = obj.get("spec") else {
        return errs;
    };
    check_enum(
        &mut errs,
        spec,
        "type",
        "spec",
        &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
    );
    check_enum(
        &mut errs,
        spec,
        "sessionAffinity",
        "spec",
        &["ClientIP", "None"],
    );
    check_enum(
        &mut errs,
        spec,
        "externalTrafficPolicy",
        "spec",
        &["Cluster", "Local"],
    );
    check_enum(
        &mut errs,
        spec,
        "internalTrafficPolicy",
        "spec",
        &["Cluster", "Local"],
    );
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports: Vec<(usize, &Value)> = items(spec, "ports").collect();
    if ports.is_empty() && ty != "ExternalName" && !headless {
        required(&mut errs, "spec.ports");
    }
    for (i, p) in &ports {
        let pp = format!("spec.ports[{i}]");
        match p.get("port") {
            None => required(&mut errs, &format!("{pp}.port")),
            v => check_port_range(&mut errs, v, &format!("{pp}.port"), 1),
        }
        check_enum(&mut errs, p, "protocol", &pp, &["SCTP", "TCP", "UDP"]);
        check_int_or_name_port(&mut errs, p.get("targetPort"), &format!("{pp}.targetPort"));
        check_port_range(&mut errs, p.get("nodePort"), &format!("{pp}.nodePort"), 0);
        match p.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && !is_dns1123_label(n) => invalid(
                &mut errs,
                &format!("{pp}.name"),
                &Value::from(n),
                DNS1123_LABEL_MSG,
            ),
            None | Some("") if ports.len() > 1 => required(&mut errs, &format!("{pp}.name")),
            _ => {}
        }
    }
    check_label_map(&mut errs, spec.get("selector"), "spec.selector");
    errs
}

pub fn pod(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    check_pod_spec(
        &mut errs,
        obj.get("spec"),
        "spec",
        &["Always", "OnFailure", "Never"],
    );
    errs
}

pub fn deployment(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    let Some(spec) = obj.get("spec") else {
        required(&mut errs, "spec");
        return errs;
    };
    if let Some(n) = spec.get("replicas").and_then(Value::as_i64)
        && n < 0
    {
        invalid(
            &mut errs,
            "spec.replicas",
            &Value::from(n),
            "must be greater than or equal to 0",
        );
    }
    match spec.get("selector") {
        None => required(&mut errs, "spec.selector"),
        Some(sel) => {
            check_selector(&mut errs, Some(sel), "spec.selector");
            let labels = spec.pointer("/template/metadata/labels");
            if !selector_matches(sel, labels) {
                invalid(
                    &mut errs,
                    "spec.template.metadata.labels",
                    &Value::String(
                        labels
                            .and_then(Value::as_object)
                            .map(|m| {
                                m.iter()
                                    .map(|(k, v)| format!("{k}:{}", v.as_str().unwrap_or("")))
                                    .collect::<Vec<_>>()
                                    .join(",")
                            })
                            .unwrap_or_default(),
                    ),
                    "`selector` does not match template `labels`",
                );
            }
        }
    }
    check_template(
        &mut errs,
        spec.get("template"),
        "spec.template",
        &["Always"],
    );
    errs
}

pub fn job(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    check_template(
        &mut errs,
        obj.pointer("/spec/template"),
        "spec.template",
        &["OnFailure", "Never"],
    );
    errs
}

pub fn cronjob(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    // Jobs are named <cronjob>-<11 characters>, and a Job name must stay a label value.
    if let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str)
        && name.len() > 52
    {
        invalid(
            &mut errs,
            "metadata.name",
            &Value::from(name),
            "must be no more than 52 characters",
        );
    }
    let Some(spec) = obj.get("spec") else {
        required(&mut errs, "spec");
        return errs;
    };
    match spec.get("schedule").and_then(Value::as_str) {
        None | Some("") => required(&mut errs, "spec.schedule"),
        Some(s) => {
            if s.contains("TZ=") {
                invalid(
                    &mut errs,
                    "spec.schedule",
                    &Value::from(s),
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                );
            } else if let Err(e) = parse_cron(s) {
                invalid(
                    &mut errs,
                    "spec.schedule",
                    &Value::from(s),
                    &format!("unparseable schedule: {e}"),
                );
            }
        }
    }
    check_enum(
        &mut errs,
        spec,
        "concurrencyPolicy",
        "spec",
        &["Allow", "Forbid", "Replace"],
    );
    for key in [
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
        "startingDeadlineSeconds",
    ] {
        if let Some(n) = spec.get(key).and_then(Value::as_i64)
            && n < 0
        {
            invalid(
                &mut errs,
                &format!("spec.{key}"),
                &Value::from(n),
                "must be greater than or equal to 0",
            );
        }
    }
    check_template(
        &mut errs,
        spec.pointer("/jobTemplate/spec/template"),
        "spec.jobTemplate.spec.template",
        &["OnFailure", "Never"],
    );
    errs
}

/// Standard five-field cron or an @ descriptor, as the real server's parser accepts.
fn parse_cron(s: &str) -> Result<(), String> {
    let s = s.trim();
    if let Some(d) = s.strip_prefix('@') {
        return match d {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            _ if d.starts_with("every ") => Ok(()),
            _ => Err(format!("unrecognized descriptor: {s}")),
        };
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: {s}",
            fields.len()
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(s)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub fn hpa(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    let Some(spec) = obj.get("spec") else {
        required(&mut errs, "spec");
        return errs;
    };
    let max = spec.get("maxReplicas").and_then(Value::as_i64);
    match max {
        None => required(&mut errs, "spec.maxReplicas"),
        Some(m) if m < 1 => invalid(
            &mut errs,
            "spec.maxReplicas",
            &Value::from(m),
            "must be greater than or equal to 1",
        ),
        _ => {}
    }
    if let Some(min) = spec.get("minReplicas").and_then(Value::as_i64) {
        if min < 1 {
            invalid(
                &mut errs,
                "spec.minReplicas",
                &Value::from(min),
                "must be greater than or equal to 1",
            );
        }
        if max.is_some_and(|m| min > m) {
            invalid(
                &mut errs,
                "spec.minReplicas",
                &Value::from(min),
                "must be less than or equal to maxReplicas",
            );
        }
    }
    for key in ["kind", "name"] {
        if spec
            .pointer(&format!("/scaleTargetRef/{key}"))
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            required(&mut errs, &format!("spec.scaleTargetRef.{key}"));
        }
    }
    for (i, m) in items(spec, "metrics") {
        let mp = format!("spec.metrics[{i}]");
        let types = [
            ("Object", "object"),
            ("Pods", "pods"),
            ("Resource", "resource"),
            ("ContainerResource", "containerResource"),
            ("External", "external"),
        ];
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        let Some((_, source)) = types.iter().find(|(t, _)| *t == ty) else {
            match m.get("type") {
                None => required(&mut errs, &format!("{mp}.type")),
                Some(v) => not_supported(
                    &mut errs,
                    &format!("{mp}.type"),
                    v,
                    &[
                        "ContainerResource",
                        "External",
                        "Object",
                        "Pods",
                        "Resource",
                    ],
                ),
            }
            continue;
        };
        let Some(src) = m.get(*source).filter(|v| !v.is_null()) else {
            required(&mut errs, &format!("{mp}.{source}"));
            continue;
        };
        let sp = format!("{mp}.{source}");
        let Some(target) = src.get("target") else {
            required(&mut errs, &format!("{sp}.target"));
            continue;
        };
        let tp = format!("{sp}.target");
        check_enum(
            &mut errs,
            target,
            "type",
            &tp,
            &["AverageValue", "Utilization", "Value"],
        );
        match target.get("type").and_then(Value::as_str) {
            Some("Utilization") => match target.get("averageUtilization").and_then(Value::as_i64) {
                None => required(&mut errs, &format!("{tp}.averageUtilization")),
                Some(u) if u < 1 => invalid(
                    &mut errs,
                    &format!("{tp}.averageUtilization"),
                    &Value::from(u),
                    "must be greater than 0",
                ),
                _ => {}
            },
            Some("AverageValue") if target.get("averageValue").is_none() => {
                required(&mut errs, &format!("{tp}.averageValue"))
            }
            Some("Value") if target.get("value").is_none() => {
                required(&mut errs, &format!("{tp}.value"))
            }
            _ => {}
        }
        for key in ["value", "averageValue"] {
            if let Some(v) = target.get(key)
                && quantity_value(v).is_none_or(|q| q <= 0.0)
            {
                invalid(&mut errs, &format!("{tp}.{key}"), v, "must be positive");
            }
        }
        if ty == "Object" && src.pointer("/describedObject/name").is_none() {
            required(&mut errs, &format!("{sp}.describedObject.name"));
        }
        if matches!(ty, "Object" | "Pods" | "External")
            && src
                .pointer("/metric/name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            required(&mut errs, &format!("{sp}.metric.name"));
        }
    }
    errs
}

/// Metadata checks only (label values) for the kinds with nothing else we write.
pub fn metadata_only(obj: &Value) -> Errors {
    let mut errs = Errors::new();
    check_metadata(&mut errs, obj.get("metadata"), "metadata");
    errs
}

/// ConfigMap and Secret keys: `[-._a-zA-Z0-9]+`, at most 253 characters.
pub fn config_data(obj: &Value) -> Errors {
    let mut errs = metadata_only(obj);
    for section in ["data", "binaryData", "stringData"] {
        if let Some(Value::Object(map)) = obj.get(section) {
            for k in map.keys() {
                let ok = !k.is_empty()
                    && k.len() <= 253
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !ok {
                    invalid(
                        &mut errs,
                        &format!("{section}[{k}]"),
                        &Value::String(k.clone()),
                        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                    );
                }
            }
        }
    }
    errs
}

/// Where a built-in kind keeps its pod spec, for defaulting.
fn pod_spec_pointer(group: &str, resource: &str) -> Option<&'static str> {
    match (group, resource) {
        ("", "pods") => Some("/spec"),
        ("apps", "deployments") | ("batch", "jobs") => Some("/spec/template/spec"),
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

/// The real server's decode-time defaults that our controllers' server-side applies depend
/// on: an `ObjectFieldSelector` without `apiVersion` gets `v1` (in env `valueFrom.fieldRef`
/// and in downward-API volume items, plain or projected). Without it an apply that leaves
/// `apiVersion` out differs from what a real server stores and returns.
pub fn default_pod_template(group: &str, resource: &str, obj: &mut Value) {
    let Some(spec) = pod_spec_pointer(group, resource).and_then(|p| obj.pointer_mut(p)) else {
        return;
    };
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for c in items_mut(spec, key) {
            for env in items_mut(c, "env") {
                if let Some(sel) = env.pointer_mut("/valueFrom/fieldRef") {
                    default_field_selector(sel);
                }
            }
        }
    }
    for vol in items_mut(spec, "volumes") {
        if let Some(dapi) = vol.get_mut("downwardAPI") {
            default_downward_items(dapi);
        }
        if let Some(projected) = vol.get_mut("projected") {
            for src in items_mut(projected, "sources") {
                if let Some(dapi) = src.get_mut("downwardAPI") {
                    default_downward_items(dapi);
                }
            }
        }
    }
}

fn items_mut<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn default_downward_items(dapi: &mut Value) {
    for item in items_mut(dapi, "items") {
        if let Some(sel) = item.get_mut("fieldRef") {
            default_field_selector(sel);
        }
    }
}

fn default_field_selector(sel: &mut Value) {
    if let Some(m) = sel.as_object_mut()
        && m.get("apiVersion")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        m.insert("apiVersion".into(), Value::String("v1".into()));
    }
}
