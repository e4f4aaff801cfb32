//! Conversion between served versions of built-in kinds that are stored once.
//!
//! HorizontalPodAutoscalers are stored as autoscaling/v2 and served as v2 and v1, converted
//! the way the real server converts them: v1's `targetCPUUtilizationPercentage` is v2's
//! `Resource` cpu `Utilization` metric, and whatever v1 has no field for (other metrics,
//! `behavior`, current metrics, conditions) travels in v1 as JSON in the
//! `autoscaling.alpha.kubernetes.io/*` annotations, in v1's older metric shapes.
//!
//! Events are one resource with two API groups, as on the real server: stored as core/v1
//! Events and also served as events.k8s.io/v1 (`note` is `message`, `regarding` is
//! `involvedObject`, `reportingController` is `reportingComponent`, `deprecated*` are the core
//! `count`, `firstTimestamp`, `lastTimestamp` and `source`). A request to events.k8s.io/v1 is
//! served by the core resource with the version `events.k8s.io/v1` (see [`served_by`]).

use serde_json::{Map, Value, json};

use crate::registry::GroupResource;

/// v2 metrics other than the cpu utilization target, as a JSON list of v1 MetricSpecs.
pub const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// v2 current metrics other than cpu utilization, as a JSON list of v1 MetricStatuses.
pub const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// v2 status conditions, as a JSON list.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// v2 `spec.behavior`, as JSON.
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

const STORED_HPA: &str = "autoscaling/v2";
const STORED_EVENT: &str = "v1";
/// The other API version core Events are served in.
pub const EVENTS_V1: &str = "events.k8s.io/v1";

fn is_hpa(gr: &GroupResource) -> bool {
    gr.group == "autoscaling" && gr.resource == "horizontalpodautoscalers"
}

/// The core Event resource (which also serves events.k8s.io/v1).
pub fn is_core_event(gr: &GroupResource) -> bool {
    gr.group.is_empty() && gr.resource == "events"
}

/// The resource that serves `group/version/resource` when it is stored under another group:
/// events.k8s.io/v1 events are the core events. The caller then uses the version
/// `group/version` with that resource.
pub fn served_by(group: &str, version: &str, resource: &str) -> Option<GroupResource> {
    (group == "events.k8s.io" && version == "v1" && resource == "events")
        .then(|| GroupResource::new("", "events"))
}

/// The apiVersion objects of `gr` are stored in, when it differs from the request's.
pub fn storage_api_version(gr: &GroupResource) -> Option<&'static str> {
    if is_hpa(gr) {
        Some(STORED_HPA)
    } else if is_core_event(gr) {
        Some(STORED_EVENT)
    } else {
        None
    }
}

/// Converts `obj` (of kind `gr`, in whatever served version its apiVersion names) to
/// `api_version`. Kinds stored once in one version are returned unchanged but for apiVersion.
pub fn convert(gr: &GroupResource, obj: &Value, api_version: &str) -> Value {
    let from = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let mut out = if storage_api_version(gr).is_none() || from == api_version {
        obj.clone()
    } else {
        match (from, api_version) {
            ("autoscaling/v1", "autoscaling/v2") => hpa_v1_to_v2(obj),
            ("autoscaling/v2", "autoscaling/v1") => hpa_v2_to_v1(obj),
            (EVENTS_V1, STORED_EVENT) => event_v1_to_core(obj),
            (STORED_EVENT, EVENTS_V1) => event_core_to_v1(obj),
            _ => obj.clone(),
        }
    };
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
    }
    out
}

fn annotations_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = obj.as_object_mut()?.entry("metadata").or_insert(json!({}));
    let meta = meta.as_object_mut()?;
    meta.entry("annotations")
        .or_insert(json!({}))
        .as_object_mut()
}

/// Removes `key` from the annotations and parses it (ignored when it is not JSON, as the real
/// server ignores an annotation it cannot read).
fn take_annotation(obj: &mut Value, key: &str) -> Option<Value> {
    let anns = annotations_mut(obj)?;
    let raw = anns.remove(key)?;
    raw.as_str().and_then(|s| serde_json::from_str(s).ok())
}

fn set_annotation(obj: &mut Value, key: &str, value: &Value) {
    if let Some(anns) = annotations_mut(obj) {
        anns.insert(key.into(), json!(value.to_string()));
    }
}

/// Drops an empty annotations map (added on the way and not needed).
fn tidy_annotations(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(v) = v.filter(|v| !v.is_null()) {
        m.insert(key.into(), v.clone());
    }
}

/// Field names that differ between events.k8s.io/v1 and core/v1 Events; every other field
/// (metadata, eventTime, series, reportingInstance, action, reason, related, type) is the same.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("note", "message"),
    ("regarding", "involvedObject"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Renames the fields of `obj` by `pairs` (`from` -> `to`); a field of the target's name that
/// the source version does not have is dropped (it was never this version's field).
fn rename_fields(obj: &Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = m.clone();
    let pairs: Vec<_> = pairs.collect();
    for (_, to) in &pairs {
        out.remove(*to);
    }
    for (from, to) in pairs {
        if let Some(v) = out.remove(from) {
            out.insert(to.into(), v);
        }
    }
    Value::Object(out)
}

fn event_v1_to_core(ev: &Value) -> Value {
    let mut out = rename_fields(ev, EVENT_RENAMES.iter().copied());
    // The core type always has these (as the real server's JSON shows them, empty).
    if let Some(m) = out.as_object_mut() {
        m.entry("involvedObject").or_insert(json!({}));
        m.entry("source").or_insert(json!({}));
    }
    out
}

fn event_core_to_v1(ev: &Value) -> Value {
    rename_fields(ev, EVENT_RENAMES.iter().map(|(a, b)| (*b, *a)))
}

/// The stored (core) paths a field selector label reads for Events served in `api_version`,
/// as the real server's field label conversions say; None for a label that version does not
/// support. Core's `source` is `source.component`, or `reportingComponent` when that is empty.
pub fn event_field_label(api_version: &str, label: &str) -> Option<Vec<&'static str>> {
    const OBJECT_FIELDS: &[&str] = &[
        "kind",
        "namespace",
        "name",
        "uid",
        "apiVersion",
        "resourceVersion",
        "fieldPath",
    ];
    let core = |l: &str| -> Option<Vec<&'static str>> {
        Some(vec![match l {
            "metadata.name" => "metadata.name",
            "metadata.namespace" => "metadata.namespace",
            "reason" => "reason",
            "type" => "type",
            "reportingComponent" => "reportingComponent",
            "source" => return Some(vec!["source.component", "reportingComponent"]),
            _ => {
                let field = l.strip_prefix("involvedObject.")?;
                let i = OBJECT_FIELDS.iter().position(|f| *f == field)?;
                return Some(vec![INVOLVED[i]]);
            }
        }])
    };
    const INVOLVED: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
    ];
    if api_version == EVENTS_V1 {
        match label {
            "metadata.name" | "metadata.namespace" | "reason" | "type" => core(label),
            "reportingController" => core("reportingComponent"),
            _ => {
                let field = label.strip_prefix("regarding.")?;
                let i = OBJECT_FIELDS.iter().position(|f| *f == field)?;
                Some(vec![INVOLVED[i]])
            }
        }
    } else {
        core(label)
    }
}

fn hpa_v1_to_v2(v1: &Value) -> Value {
    let mut out = v1.clone();
    let metrics_ann = take_annotation(&mut out, METRICS_ANNOTATION);
    let current_ann = take_annotation(&mut out, CURRENT_METRICS_ANNOTATION);
    let conditions_ann = take_annotation(&mut out, CONDITIONS_ANNOTATION);
    let behavior_ann = take_annotation(&mut out, BEHAVIOR_ANNOTATION);
    tidy_annotations(&mut out);
    if let Some(spec) = v1.get("spec") {
        let mut s = Map::new();
        put(&mut s, "scaleTargetRef", spec.get("scaleTargetRef"));
        put(&mut s, "minReplicas", spec.get("minReplicas"));
        put(&mut s, "maxReplicas", spec.get("maxReplicas"));
        let mut metrics = Vec::new();
        if let Some(pct) = spec
            .get("targetCPUUtilizationPercentage")
            .filter(|v| !v.is_null())
        {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": pct}}}));
        }
        for m in metrics_ann
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            metrics.push(metric_spec_v1_to_v2(m));
        }
        if !metrics.is_empty() {
            s.insert("metrics".into(), Value::Array(metrics));
        }
        if let Some(b) = behavior_ann {
            s.insert("behavior".into(), b);
        }
        out["spec"] = Value::Object(s);
    }
    if let Some(status) = v1.get("status") {
        let mut s = Map::new();
        for k in [
            "observedGeneration",
            "lastScaleTime",
            "currentReplicas",
            "desiredReplicas",
        ] {
            put(&mut s, k, status.get(k));
        }
        let mut current = Vec::new();
        if let Some(pct) = status
            .get("currentCPUUtilizationPercentage")
            .filter(|v| !v.is_null())
        {
            current.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": pct}}}));
        }
        for m in current_ann
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            current.push(metric_status_v1_to_v2(m));
        }
        if !current.is_empty() {
            s.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(c) = conditions_ann.filter(Value::is_array) {
            s.insert("conditions".into(), c);
        }
        out["status"] = Value::Object(s);
    }
    out
}

fn hpa_v2_to_v1(v2: &Value) -> Value {
    let mut out = v2.clone();
    if let Some(spec) = v2.get("spec") {
        let mut s = Map::new();
        put(&mut s, "scaleTargetRef", spec.get("scaleTargetRef"));
        put(&mut s, "minReplicas", spec.get("minReplicas"));
        put(&mut s, "maxReplicas", spec.get("maxReplicas"));
        let mut others = Vec::new();
        for m in spec
            .get("metrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let cpu_pct = (m.get("type").and_then(Value::as_str) == Some("Resource")
                && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
                && m.pointer("/resource/target/type").and_then(Value::as_str)
                    == Some("Utilization"))
            .then(|| m.pointer("/resource/target/averageUtilization"))
            .flatten();
            match cpu_pct {
                Some(p) if !s.contains_key("targetCPUUtilizationPercentage") => {
                    s.insert("targetCPUUtilizationPercentage".into(), p.clone());
                }
                _ => others.push(metric_spec_v2_to_v1(m)),
            }
        }
        if !others.is_empty() {
            set_annotation(&mut out, METRICS_ANNOTATION, &Value::Array(others));
        }
        if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
            set_annotation(&mut out, BEHAVIOR_ANNOTATION, b);
        }
        out["spec"] = Value::Object(s);
    }
    if let Some(status) = v2.get("status") {
        let mut s = Map::new();
        for k in [
            "observedGeneration",
            "lastScaleTime",
            "currentReplicas",
            "desiredReplicas",
        ] {
            put(&mut s, k, status.get(k));
        }
        // desiredReplicas is required in v1.
        s.entry("desiredReplicas").or_insert(json!(0));
        s.entry("currentReplicas").or_insert(json!(0));
        let mut others = Vec::new();
        for m in status
            .get("currentMetrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let cpu_pct = (m.get("type").and_then(Value::as_str) == Some("Resource")
                && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu"))
            .then(|| m.pointer("/resource/current/averageUtilization"))
            .flatten();
            match cpu_pct {
                Some(p) if !s.contains_key("currentCPUUtilizationPercentage") => {
                    s.insert("currentCPUUtilizationPercentage".into(), p.clone());
                }
                _ => others.push(metric_status_v2_to_v1(m)),
            }
        }
        if !others.is_empty() {
            set_annotation(&mut out, CURRENT_METRICS_ANNOTATION, &Value::Array(others));
        }
        if let Some(c) = status
            .get("conditions")
            .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
        {
            set_annotation(&mut out, CONDITIONS_ANNOTATION, c);
        }
        out["status"] = Value::Object(s);
    }
    out
}

/// A v2 MetricSpec in v1's (v2beta1-like) shape.
fn metric_spec_v2_to_v1(m: &Value) -> Value {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    let mut out = Map::new();
    out.insert("type".into(), json!(ty));
    let target = |src: &Value| src.get("target").cloned().unwrap_or_default();
    match ty {
        "Object" => {
            let src = m.get("object").cloned().unwrap_or_default();
            let t = target(&src);
            let mut o = Map::new();
            put(&mut o, "target", src.get("describedObject"));
            put(&mut o, "metricName", src.pointer("/metric/name"));
            put(&mut o, "selector", src.pointer("/metric/selector"));
            put(&mut o, "targetValue", t.get("value"));
            put(&mut o, "averageValue", t.get("averageValue"));
            out.insert("object".into(), Value::Object(o));
        }
        "Pods" => {
            let src = m.get("pods").cloned().unwrap_or_default();
            let t = target(&src);
            let mut o = Map::new();
            put(&mut o, "metricName", src.pointer("/metric/name"));
            put(&mut o, "selector", src.pointer("/metric/selector"));
            put(&mut o, "targetAverageValue", t.get("averageValue"));
            out.insert("pods".into(), Value::Object(o));
        }
        "Resource" | "ContainerResource" => {
            let key = if ty == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = m.get(key).cloned().unwrap_or_default();
            let t = target(&src);
            let mut o = Map::new();
            put(&mut o, "name", src.get("name"));
            put(&mut o, "container", src.get("container"));
            put(
                &mut o,
                "targetAverageUtilization",
                t.get("averageUtilization"),
            );
            put(&mut o, "targetAverageValue", t.get("averageValue"));
            out.insert(key.into(), Value::Object(o));
        }
        "External" => {
            let src = m.get("external").cloned().unwrap_or_default();
            let t = target(&src);
            let mut o = Map::new();
            put(&mut o, "metricName", src.pointer("/metric/name"));
            put(&mut o, "metricSelector", src.pointer("/metric/selector"));
            put(&mut o, "targetValue", t.get("value"));
            put(&mut o, "targetAverageValue", t.get("averageValue"));
            out.insert("external".into(), Value::Object(o));
        }
        _ => return m.clone(),
    }
    Value::Object(out)
}

fn metric_id(src: &Value, name: &str, selector: &str) -> Value {
    let mut id = Map::new();
    put(&mut id, "name", src.get(name));
    put(&mut id, "selector", src.get(selector));
    Value::Object(id)
}

/// A v1 (annotation) MetricSpec back in v2's shape.
fn metric_spec_v1_to_v2(m: &Value) -> Value {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    let mut out = Map::new();
    out.insert("type".into(), json!(ty));
    match ty {
        "Object" => {
            let src = m.get("object").cloned().unwrap_or_default();
            let mut t = Map::new();
            if let Some(v) = src.get("targetValue").filter(|v| !v.is_null()) {
                t.insert("type".into(), json!("Value"));
                t.insert("value".into(), v.clone());
            } else {
                t.insert("type".into(), json!("AverageValue"));
            }
            put(&mut t, "averageValue", src.get("averageValue"));
            let mut o = Map::new();
            put(&mut o, "describedObject", src.get("target"));
            o.insert("metric".into(), metric_id(&src, "metricName", "selector"));
            o.insert("target".into(), Value::Object(t));
            out.insert("object".into(), Value::Object(o));
        }
        "Pods" => {
            let src = m.get("pods").cloned().unwrap_or_default();
            let mut t = Map::new();
            t.insert("type".into(), json!("AverageValue"));
            put(&mut t, "averageValue", src.get("targetAverageValue"));
            let mut o = Map::new();
            o.insert("metric".into(), metric_id(&src, "metricName", "selector"));
            o.insert("target".into(), Value::Object(t));
            out.insert("pods".into(), Value::Object(o));
        }
        "Resource" | "ContainerResource" => {
            let key = if ty == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = m.get(key).cloned().unwrap_or_default();
            let mut t = Map::new();
            if let Some(u) = src.get("targetAverageUtilization").filter(|v| !v.is_null()) {
                t.insert("type".into(), json!("Utilization"));
                t.insert("averageUtilization".into(), u.clone());
            } else {
                t.insert("type".into(), json!("AverageValue"));
                put(&mut t, "averageValue", src.get("targetAverageValue"));
            }
            let mut o = Map::new();
            put(&mut o, "name", src.get("name"));
            put(&mut o, "container", src.get("container"));
            o.insert("target".into(), Value::Object(t));
            out.insert(key.into(), Value::Object(o));
        }
        "External" => {
            let src = m.get("external").cloned().unwrap_or_default();
            let mut t = Map::new();
            if let Some(v) = src.get("targetValue").filter(|v| !v.is_null()) {
                t.insert("type".into(), json!("Value"));
                t.insert("value".into(), v.clone());
            } else {
                t.insert("type".into(), json!("AverageValue"));
                put(&mut t, "averageValue", src.get("targetAverageValue"));
            }
            let mut o = Map::new();
            o.insert(
                "metric".into(),
                metric_id(&src, "metricName", "metricSelector"),
            );
            o.insert("target".into(), Value::Object(t));
            out.insert("external".into(), Value::Object(o));
        }
        _ => return m.clone(),
    }
    Value::Object(out)
}

/// A v2 MetricStatus in v1's shape.
fn metric_status_v2_to_v1(m: &Value) -> Value {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    let mut out = Map::new();
    out.insert("type".into(), json!(ty));
    let current = |src: &Value| src.get("current").cloned().unwrap_or_default();
    match ty {
        "Object" => {
            let src = m.get("object").cloned().unwrap_or_default();
            let c = current(&src);
            let mut o = Map::new();
            put(&mut o, "target", src.get("describedObject"));
            put(&mut o, "metricName", src.pointer("/metric/name"));
            put(&mut o, "selector", src.pointer("/metric/selector"));
            put(&mut o, "currentValue", c.get("value"));
            put(&mut o, "averageValue", c.get("averageValue"));
            out.insert("object".into(), Value::Object(o));
        }
        "Pods" => {
            let src = m.get("pods").cloned().unwrap_or_default();
            let c = current(&src);
            let mut o = Map::new();
            put(&mut o, "metricName", src.pointer("/metric/name"));
            put(&mut o, "selector", src.pointer("/metric/selector"));
            put(&mut o, "currentAverageValue", c.get("averageValue"));
            out.insert("pods".into(), Value::Object(o));
        }
        "Resource" | "ContainerResource" => {
            let key = if ty == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = m.get(key).cloned().unwrap_or_default();
            let c = current(&src);
            let mut o = Map::new();
            put(&mut o, "name", src.get("name"));
            put(&mut o, "container", src.get("container"));
            put(
                &mut o,
                "currentAverageUtilization",
                c.get("averageUtilization"),
            );
            put(&mut o, "currentAverageValue", c.get("averageValue"));
            out.insert(key.into(), Value::Object(o));
        }
        "External" => {
            let src = m.get("external").cloned().unwrap_or_default();
            let c = current(&src);
            let mut o = Map::new();
            put(&mut o, "metricName", src.pointer("/metric/name"));
            put(&mut o, "metricSelector", src.pointer("/metric/selector"));
            put(&mut o, "currentValue", c.get("value"));
            put(&mut o, "currentAverageValue", c.get("averageValue"));
            out.insert("external".into(), Value::Object(o));
        }
        _ => return m.clone(),
    }
    Value::Object(out)
}

/// A v1 (annotation) MetricStatus back in v2's shape.
fn metric_status_v1_to_v2(m: &Value) -> Value {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    let mut out = Map::new();
    out.insert("type".into(), json!(ty));
    match ty {
        "Object" => {
            let src = m.get("object").cloned().unwrap_or_default();
            let mut c = Map::new();
            put(&mut c, "value", src.get("currentValue"));
            put(&mut c, "averageValue", src.get("averageValue"));
            let mut o = Map::new();
            put(&mut o, "describedObject", src.get("target"));
            o.insert("metric".into(), metric_id(&src, "metricName", "selector"));
            o.insert("current".into(), Value::Object(c));
            out.insert("object".into(), Value::Object(o));
        }
        "Pods" => {
            let src = m.get("pods").cloned().unwrap_or_default();
            let mut c = Map::new();
            put(&mut c, "averageValue", src.get("currentAverageValue"));
            let mut o = Map::new();
            o.insert("metric".into(), metric_id(&src, "metricName", "selector"));
            o.insert("current".into(), Value::Object(c));
            out.insert("pods".into(), Value::Object(o));
        }
        "Resource" | "ContainerResource" => {
            let key = if ty == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let src = m.get(key).cloned().unwrap_or_default();
            let mut c = Map::new();
            put(
                &mut c,
                "averageUtilization",
                src.get("currentAverageUtilization"),
            );
            put(&mut c, "averageValue", src.get("currentAverageValue"));
            let mut o = Map::new();
            put(&mut o, "name", src.get("name"));
            put(&mut o, "container", src.get("container"));
            o.insert("current".into(), Value::Object(c));
            out.insert(key.into(), Value::Object(o));
        }
        "External" => {
            let src = m.get("external").cloned().unwrap_or_default();
            let mut c = Map::new();
            put(&mut c, "value", src.get("currentValue"));
            put(&mut c, "averageValue", src.get("currentAverageValue"));
            let mut o = Map::new();
            o.insert(
                "metric".into(),
                metric_id(&src, "metricName", "metricSelector"),
            );
            o.insert("current".into(), Value::Object(c));
            out.insert("external".into(), Value::Object(o));
        }
        _ => return m.clone(),
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa() -> GroupResource {
        GroupResource::new("autoscaling", "horizontalpodautoscalers")
    }

    #[test]
    fn events_k8s_io_fields_are_the_core_fields_and_back() {
        let gr = GroupResource::new("", "events");
        let new = json!({"apiVersion": EVENTS_V1, "kind": "Event", "metadata": {"name": "e"},
            "eventTime": "2026-11-28T10:00:00.000000Z", "series": {"count": 2,
            "lastObservedTime": "2026-11-28T10:01:00.000000Z"}, "reportingController": "c",
            "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p"}, "related": {"kind": "Node", "name": "n"},
            "note": "hello", "deprecatedCount": 3, "deprecatedSource": {"component": "k"},
            "deprecatedFirstTimestamp": "2026-11-28T09:00:00Z",
            "deprecatedLastTimestamp": "2026-11-28T09:30:00Z"});
        let core = convert(&gr, &new, "v1");
        assert_eq!(
            core,
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": "2026-11-28T10:00:00.000000Z", "series": {"count": 2,
            "lastObservedTime": "2026-11-28T10:01:00.000000Z"}, "reportingComponent": "c",
            "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal",
            "involvedObject": {"kind": "Pod", "name": "p"}, "related": {"kind": "Node", "name": "n"},
            "message": "hello", "count": 3, "source": {"component": "k"},
            "firstTimestamp": "2026-11-28T09:00:00Z", "lastTimestamp": "2026-11-28T09:30:00Z"})
        );
        assert_eq!(convert(&gr, &core, EVENTS_V1), new);
        // The core type always has an involved object and a source (empty, as the real JSON).
        let bare = convert(&gr, &json!({"apiVersion": EVENTS_V1, "reason": "R"}), "v1");
        assert_eq!(bare["involvedObject"], json!({}));
        assert_eq!(bare["source"], json!({}));
        // A core name in an events.k8s.io object is not carried over as that core field.
        let odd = convert(&gr, &json!({"apiVersion": EVENTS_V1, "message": "x"}), "v1");
        assert!(odd.get("message").is_none());
    }

    #[test]
    fn event_field_labels_per_version() {
        assert_eq!(
            event_field_label(EVENTS_V1, "regarding.name"),
            Some(vec!["involvedObject.name"])
        );
        assert_eq!(
            event_field_label(EVENTS_V1, "reportingController"),
            Some(vec!["reportingComponent"])
        );
        assert_eq!(event_field_label(EVENTS_V1, "involvedObject.name"), None);
        assert_eq!(event_field_label(EVENTS_V1, "source"), None);
        assert_eq!(event_field_label(EVENTS_V1, "regarding.bogus"), None);
        assert_eq!(
            event_field_label("v1", "source"),
            Some(vec!["source.component", "reportingComponent"])
        );
        assert_eq!(
            event_field_label("v1", "involvedObject.fieldPath"),
            Some(vec!["involvedObject.fieldPath"])
        );
        assert_eq!(event_field_label("v1", "regarding.name"), None);
        assert_eq!(event_field_label("v1", "message"), None);
    }

    #[test]
    fn v1_cpu_target_is_the_v2_cpu_utilization_metric_and_back() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "f"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "f"},
                "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}});
        let v2 = convert(&hpa(), &v1, "autoscaling/v2");
        assert_eq!(
            v2["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 70}}}])
        );
        assert!(v2["metadata"].get("annotations").is_none());
        assert_eq!(convert(&hpa(), &v2, "autoscaling/v1"), v1);
    }

    #[test]
    fn other_metrics_behavior_and_status_ride_in_annotations() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "f", "labels": {"a": "b"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "f"}, "maxReplicas": 3,
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 5}},
                "metrics": [{"type": "Object", "object": {
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "f"},
                    "metric": {"name": "function_calls"},
                    "target": {"type": "Value", "value": "10"}}}]},
            "status": {"currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [{"type": "Object", "object": {
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "f"},
                    "metric": {"name": "function_calls"}, "current": {"value": "12"}}}],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale"}]}});
        let v1 = convert(&hpa(), &v2, "autoscaling/v1");
        let anns = &v1["metadata"]["annotations"];
        let metrics: Value =
            serde_json::from_str(anns[METRICS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(
            metrics,
            json!([{"type": "Object", "object": {
                "target": {"apiVersion": "v1", "kind": "Service", "name": "f"},
                "metricName": "function_calls", "targetValue": "10"}}])
        );
        assert!(v1["spec"].get("targetCPUUtilizationPercentage").is_none());
        assert!(anns.get(CURRENT_METRICS_ANNOTATION).is_some());
        assert!(anns.get(CONDITIONS_ANNOTATION).is_some());
        assert!(anns.get(BEHAVIOR_ANNOTATION).is_some());
        assert_eq!(convert(&hpa(), &v1, "autoscaling/v2"), v2);
    }
}
