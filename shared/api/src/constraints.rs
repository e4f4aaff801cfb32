//! Value constraints for the CRD schemas: the patterns, ranges, enums and CEL rules that make a
//! real API server (and devcluster) refuse a bad Function or trigger at apply time, instead of
//! the function-controller meeting the refusal later when it writes the child objects.
//!
//! The embedded Kubernetes templates (`deployment`, `service`, `horizontalPodAutoscaler`) are
//! generated from k8s-openapi types, whose schemas carry no constraints; [`harden`] adds the
//! ones the real server checks on those objects for the fields users set in a Function. Field
//! constraints of our own types are schemars attributes on the types themselves.

use kube::core::{Message, Reason, Rule};
use serde_json::{Map, Value, json};

/// A resource quantity (`500m`, `128Mi`, `1.5`, `2e3`), the same grammar the API server parses.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A DNS-1035 label: what a Service name must be (lower case, starts with a letter).
pub const DNS1035_LABEL_PATTERN: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 label: container names, Service port names.
pub const DNS1123_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Empty or a DNS-1123 label.
pub const OPTIONAL_DNS1123_LABEL_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$";
/// A DNS-1123 subdomain: Secret, ConfigMap and most object names, host names.
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// An IANA service name: a container port name (at most 15 characters, at least one letter).
pub const IANA_SVC_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// An environment variable name: printable ASCII except `=` (the rule since Kubernetes 1.34).
pub const ENV_NAME_PATTERN: &str = r"^[ -<>-~]+$";
/// `.spec.handler`: `<module>.<function>` (empty for a prebuilt image).
pub const HANDLER_PATTERN: &str = r"^(\S+\.[^.\s]+)?$";
/// `.spec.timeout`: whole seconds from 1 to 86400 (one day, the function-controller's
/// `MAX_TIMEOUT`), as a string (empty means the default).
pub const TIMEOUT_PATTERN: &str =
    r"^([1-9][0-9]{0,3}|[1-7][0-9]{4}|8[0-5][0-9]{3}|86[0-3][0-9]{2}|86400)?$";
/// Most replicas a Function's Deployment template may ask for (the function-controller's
/// `MAX_REPLICAS`): more is a typo, and the Function would sit at Progressing forever.
pub const MAX_REPLICAS: i64 = 1000;
/// `.spec.runtime`: `<id><version>`, e.g. python3.11 (empty for a prebuilt image).
pub const RUNTIME_PATTERN: &str = r"^([A-Za-z][^\s0-9]*[0-9]\S*)?$";
/// `.spec.checksum`: `sha256:<64 hex digits>` (empty skips the check).
pub const CHECKSUM_PATTERN: &str = r"^(sha256:[0-9a-fA-F]{64})?$";
/// `.spec.function-content-type`: text, base64 or url, then +zip or +compressedtar, then +deps.
pub const CONTENT_TYPE_PATTERN: &str =
    r"^((text|base64|url)(\+(zip|compressedtar)(\+deps)?|\+deps\+(zip|compressedtar))?)?$";
/// A cron schedule: five fields (six with leading seconds, which only the controller's
/// scheduler mode runs) or one of the @ aliases.
pub const CRON_SCHEDULE_PATTERN: &str = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([0-9A-Za-z*?/,#-]+[ \t]+){4,5}[0-9A-Za-z*?/,#-]+)$";
/// HTTPTrigger gateway (empty keeps the controller's default).
pub const GATEWAY_PATTERN: &str = r"^(nginx|traefik|kong)?$";
/// An optional object name (Secret): empty or a DNS-1123 subdomain.
pub const OPTIONAL_SUBDOMAIN_PATTERN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";
/// An Ingress host: empty, or a DNS-1123 subdomain, optionally behind a `*.` wildcard.
pub const HOST_PATTERN: &str =
    r"^((\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";
/// A duration as [`crate::delivery::parse_duration`] reads it (retry backoffs, JetStream
/// ackWait): `0`, or one or more `<number><unit>` with units `ms`, `s`, `m`, `h` (`500ms`,
/// `1.5s`, `1m30s`); no sign, so never negative. The whole part has at most 12 digits so the
/// sum always fits a `Duration` (with [`MAX_DURATION_LENGTH`]).
pub const DURATION_PATTERN: &str = r"^(0|(([0-9]{1,12}(\.[0-9]*)?|\.[0-9]+)(ms|s|m|h))+)$";
/// Longest duration string.
pub const MAX_DURATION_LENGTH: u32 = 64;
/// Largest value of an int32 field (what the Go types behind Kubernetes and Kubeless hold).
pub const INT32_MAX: i64 = i32::MAX as i64;
/// Smallest value of an int32 field.
pub const INT32_MIN: i64 = i32::MIN as i64;
/// Longest label value, and so longest Function name (it is the `function` label's value).
pub const MAX_LABEL_VALUE: u64 = 63;

/// Which embedded template a schema belongs to; a few constraints depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedded {
    /// `spec.deployment` (apps/v1 Deployment).
    Deployment,
    /// `spec.service` (core/v1 ServiceSpec).
    Service,
    /// `spec.horizontalPodAutoscaler`.
    Hpa,
}

/// CEL rule on an HPA spec: minReplicas at most maxReplicas (a zero maxReplicas is Kubeless's
/// "unset", refused by [`HPA_BOUNDS_RULE`] once the HPA is created).
pub const MIN_LE_MAX_REPLICAS_RULE: &str = "!has(self.minReplicas) || !has(self.maxReplicas) || \
self.maxReplicas == 0 || self.minReplicas <= self.maxReplicas";
/// Message of [`MIN_LE_MAX_REPLICAS_RULE`].
pub const MIN_LE_MAX_REPLICAS_MESSAGE: &str =
    "minReplicas must be less than or equal to maxReplicas";
/// CEL rule on an HPA spec: an HPA that will be created (it names its target) has
/// maxReplicas >= 1 and, when set, minReplicas >= 1, as autoscaling/v2 demands.
pub const HPA_BOUNDS_RULE: &str = "!has(self.scaleTargetRef) || !has(self.scaleTargetRef.name) || \
self.scaleTargetRef.name == '' || (has(self.maxReplicas) && self.maxReplicas >= 1 && \
(!has(self.minReplicas) || self.minReplicas >= 1))";
/// Message of [`HPA_BOUNDS_RULE`].
pub const HPA_BOUNDS_MESSAGE: &str =
    "an HPA with a scaleTargetRef needs maxReplicas >= 1, and minReplicas >= 1 when set";

/// Function root rule: the name becomes the value of the `function` label, so at most 63
/// characters. Reported at `metadata.name` with the name in the message (a rule on the root
/// would otherwise be reported at `<nil>`).
pub fn function_name_length_rule() -> Rule {
    // A static message: a messageExpression reading the name costs more than the API server's
    // CEL budget allows on a root rule.
    Rule::new(format!("self.metadata.name.size() <= {MAX_LABEL_VALUE}"))
        .message(Message::Message(format!(
            "a Function name must be no more than {MAX_LABEL_VALUE} characters: it becomes the value of the function label"
        )))
        .field_path(".metadata.name")
        .reason(Reason::FieldValueInvalid)
}

/// Function root rule: the name becomes a Service name, so a DNS-1035 label. Reported at
/// `metadata.name` with the name in the message.
pub fn function_name_format_rule() -> Rule {
    Rule::new(format!("self.metadata.name.matches('{DNS1035_LABEL_PATTERN}')"))
        .message(Message::Message(
            "a Function name must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter): it becomes a Service name".into(),
        ))
        .field_path(".metadata.name")
        .reason(Reason::FieldValueInvalid)
}

/// Adds the API server's constraints to an embedded template's schema (before descriptions are
/// stripped: quantities are recognised by theirs).
pub fn harden(schema: &mut Value, embedded: Embedded) {
    walk(schema, &mut Vec::new(), embedded);
}

fn walk(node: &mut Value, path: &mut Vec<String>, embedded: Embedded) {
    let Value::Object(map) = node else { return };
    constrain(map, path, embedded);
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (name, child) in props.iter_mut() {
            path.push(name.clone());
            walk(child, path, embedded);
            path.pop();
        }
    }
    for (key, marker) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(child @ Value::Object(_)) = map.get_mut(key) {
            path.push(marker.to_string());
            walk(child, path, embedded);
            path.pop();
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(list)) = map.get_mut(key) {
            list.iter_mut().for_each(|c| walk(c, path, embedded));
        }
    }
}

fn is_type(map: &Map<String, Value>, ty: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == ty,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

fn set(map: &mut Map<String, Value>, key: &str, value: Value) {
    map.insert(key.to_string(), value);
}

fn enum_of(values: &[&str]) -> Value {
    Value::Array(values.iter().map(|v| Value::String((*v).into())).collect())
}

fn add_rule(map: &mut Map<String, Value>, rule: &str, message: &str) {
    let entry = json!({"rule": rule, "message": message});
    match map.get_mut("x-kubernetes-validations") {
        Some(Value::Array(rules)) => rules.push(entry),
        _ => set(map, "x-kubernetes-validations", Value::Array(vec![entry])),
    }
}

fn constrain(map: &mut Map<String, Value>, path: &[String], embedded: Embedded) {
    let is_quantity = map
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| d.starts_with("Quantity is a fixed-point"));
    if is_quantity {
        set(map, "pattern", QUANTITY_PATTERN.into());
        return;
    }
    let name = path.last().map(String::as_str).unwrap_or("");
    let parent = path.len().checked_sub(2).map(|i| path[i].as_str());
    let grandparent = path.len().checked_sub(3).map(|i| path[i].as_str());
    let in_container = matches!(
        (parent, grandparent),
        (
            Some("[]"),
            Some("containers" | "initContainers" | "ephemeralContainers")
        )
    );
    let integer = is_type(map, "integer");
    let string = is_type(map, "string");
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    // The HPA's numbers are int32 in autoscaling/v2: a larger one would be refused when the
    // function-controller writes the HPA, long after the Function was accepted. (Only the HPA:
    // bounding every int32 of the pod template would push the Function CRD towards the size
    // client-side apply can keep.)
    if integer && embedded == Embedded::Hpa && map.get("format") == Some(&json!("int32")) {
        set(map, "minimum", INT32_MIN.into());
        set(map, "maximum", INT32_MAX.into());
    }
    match name {
        // Network ports. Probe and Service targetPort ports are int-or-string: the range only
        // applies to the number form.
        "containerPort" | "port" if integer || int_or_string => {
            set(map, "minimum", 1.into());
            set(map, "maximum", 65535.into());
        }
        "hostPort" | "nodePort" | "targetPort" if integer || int_or_string => {
            set(map, "minimum", 0.into());
            set(map, "maximum", 65535.into());
        }
        "protocol" if string && parent == Some("[]") => {
            set(map, "enum", enum_of(&["TCP", "UDP", "SCTP"]));
        }
        "imagePullPolicy" if string => {
            set(map, "enum", enum_of(&["Always", "IfNotPresent", "Never"]));
        }
        // A Deployment's pods (and sidecar init containers) always restart.
        "restartPolicy" if string && embedded == Embedded::Deployment => {
            set(map, "enum", enum_of(&["Always"]));
        }
        "terminationMessagePolicy" if string => {
            set(map, "enum", enum_of(&["File", "FallbackToLogsOnError"]));
        }
        "dnsPolicy" if string => {
            set(
                map,
                "enum",
                enum_of(&["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]),
            );
        }
        "type" if string && embedded == Embedded::Service && path.len() == 1 => {
            set(
                map,
                "enum",
                enum_of(&["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
            );
        }
        "sessionAffinity" if string && embedded == Embedded::Service => {
            set(map, "enum", enum_of(&["ClientIP", "None"]));
        }
        "externalTrafficPolicy" | "internalTrafficPolicy"
            if string && embedded == Embedded::Service =>
        {
            set(map, "enum", enum_of(&["Cluster", "Local"]));
        }
        // Empty is allowed: Kubeless's dry-run output has `name: ""` and the controller names
        // the container after the function.
        "name" if string && in_container => {
            set(map, "pattern", OPTIONAL_DNS1123_LABEL_PATTERN.into());
            set(map, "maxLength", 63.into());
        }
        "name" if string && parent == Some("[]") && grandparent == Some("ports") => {
            if embedded == Embedded::Service {
                set(map, "pattern", DNS1123_LABEL_PATTERN.into());
                set(map, "maxLength", 63.into());
            } else {
                set(map, "pattern", IANA_SVC_NAME_PATTERN.into());
                set(map, "maxLength", 15.into());
            }
        }
        "name" if string && parent == Some("[]") && grandparent == Some("env") => {
            set(map, "pattern", ENV_NAME_PATTERN.into());
        }
        "replicas" if integer && embedded == Embedded::Deployment && path.len() == 2 => {
            set(map, "minimum", 0.into());
            set(map, "maximum", MAX_REPLICAS.into());
        }
        // 0 is Go's zero value in Kubeless's output for an HPA that is not created; the rule
        // on the spec demands at least 1 once the HPA has a target.
        "minReplicas" | "maxReplicas" if integer => {
            set(map, "minimum", 0.into());
        }
        "targetAverageUtilization" | "averageUtilization" if integer => {
            set(map, "minimum", 1.into());
        }
        "spec" if embedded == Embedded::Hpa && path.len() == 1 => {
            add_rule(map, MIN_LE_MAX_REPLICAS_RULE, MIN_LE_MAX_REPLICAS_MESSAGE);
            add_rule(map, HPA_BOUNDS_RULE, HPA_BOUNDS_MESSAGE);
        }
        _ => {}
    }
}
