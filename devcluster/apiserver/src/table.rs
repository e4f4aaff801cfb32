//! `meta.k8s.io/v1` Table output (what `kubectl get` asks for): printer
//! columns from CRDs, and a few fixed columns per built-in kind.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::registry::{PrinterColumn, ResourceDef};

/// Human-readable age like the real server's duration.HumanDuration.
pub fn human_age(ts: Option<&str>) -> String {
    let Some(t) = ts.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) else {
        return "<unknown>".into();
    };
    let secs = (Utc::now() - t.with_timezone(&Utc)).num_seconds().max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

/// Evaluates the JSONPath forms printer columns use: `.a.b`, `.a[0].b`, and filters such as
/// `.status.conditions[?(@.type=="Ready")].status` (with the serde_json_path crate; the first
/// match is shown, as kubectl does for a single-valued column).
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    if path.contains("[?") {
        let query = serde_json_path::JsonPath::parse(&format!("${path}")).ok()?;
        return query.query(obj).first();
    }
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, idx) = match part.find('[') {
            Some(i) => (
                &part[..i],
                part[i + 1..].trim_end_matches(']').parse::<usize>().ok(),
            ),
            None => (part, None),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

fn col(name: &str, ty: &str, priority: i64) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": ty, "format": format, "description": name, "priority": priority})
}

fn s(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "<none>".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A string field, empty when absent.
fn txt(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_string()
}

fn n(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn len(v: Option<&Value>) -> usize {
    match v {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn age(obj: &Value) -> Value {
    json!(human_age(
        obj.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
    ))
}

fn name(obj: &Value) -> Value {
    obj.pointer("/metadata/name").cloned().unwrap_or(json!(""))
}

type Cells = fn(&Value) -> Vec<Value>;

/// Column definitions and the cell function for a built-in kind.
fn builtin(def: &ResourceDef) -> (Vec<Value>, Cells) {
    match (def.gr.group.as_str(), def.gr.resource.as_str()) {
        ("", "pods") => (
            vec![
                col("Name", "string", 0),
                col("Ready", "string", 0),
                col("Status", "string", 0),
                col("Restarts", "string", 0),
                col("Age", "string", 0),
                col("IP", "string", 1),
            ],
            |o| {
                let total = len(o.pointer("/spec/containers"));
                let statuses = o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array);
                let ready = statuses
                    .map(|a| {
                        a.iter()
                            .filter(|c| c.get("ready").and_then(Value::as_bool).unwrap_or(false))
                            .count()
                    })
                    .unwrap_or(0);
                let restarts: i64 = statuses
                    .map(|a| a.iter().map(|c| n(c.get("restartCount"))).sum())
                    .unwrap_or(0);
                let waiting = statuses.and_then(|a| {
                    a.iter()
                        .find_map(|c| c.pointer("/state/waiting/reason").and_then(Value::as_str))
                });
                let status = if o.pointer("/metadata/deletionTimestamp").is_some() {
                    "Terminating".to_string()
                } else if let Some(w) = waiting {
                    w.to_string()
                } else {
                    s(o.pointer("/status/phase"))
                };
                vec![
                    name(o),
                    json!(format!("{ready}/{total}")),
                    json!(status),
                    json!(restarts.to_string()),
                    age(o),
                    json!(s(o.pointer("/status/podIP"))),
                ]
            },
        ),
        // As the real server prints Events (both APIs: they are one resource, stored as core).
        ("", "events") => (
            vec![
                col("Last Seen", "string", 0),
                col("Type", "string", 0),
                col("Reason", "string", 0),
                col("Object", "string", 0),
                col("Subobject", "string", 1),
                col("Source", "string", 1),
                col("Message", "string", 0),
                col("First Seen", "string", 1),
                col("Count", "string", 1),
                col("Name", "string", 1),
            ],
            |o| {
                let time = |p: &str| {
                    o.pointer(p)
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                };
                let last = time("/series/lastObservedTime")
                    .or_else(|| time("/lastTimestamp"))
                    .or_else(|| time("/eventTime"));
                let first = time("/firstTimestamp").or_else(|| time("/eventTime"));
                let component = txt(o.pointer("/source/component"));
                let source = if component.is_empty() {
                    txt(o.get("reportingComponent"))
                } else {
                    match txt(o.pointer("/source/host")) {
                        h if h.is_empty() => component,
                        h => format!("{component}, {h}"),
                    }
                };
                let count = [o.pointer("/series/count"), o.get("count")]
                    .into_iter()
                    .map(n)
                    .find(|c| *c > 0)
                    .unwrap_or(1);
                vec![
                    json!(human_age(last)),
                    json!(txt(o.get("type"))),
                    json!(txt(o.get("reason"))),
                    json!(format!(
                        "{}/{}",
                        txt(o.pointer("/involvedObject/kind")).to_lowercase(),
                        txt(o.pointer("/involvedObject/name"))
                    )),
                    json!(txt(o.pointer("/involvedObject/fieldPath"))),
                    json!(source),
                    json!(txt(o.get("message"))),
                    json!(human_age(first)),
                    json!(count.to_string()),
                    name(o),
                ]
            },
        ),
        ("apps", "deployments") => (
            vec![
                col("Name", "string", 0),
                col("Ready", "string", 0),
                col("Up-to-date", "string", 0),
                col("Available", "string", 0),
                col("Age", "string", 0),
            ],
            |o| {
                vec![
                    name(o),
                    json!(format!(
                        "{}/{}",
                        n(o.pointer("/status/readyReplicas")),
                        n(o.pointer("/spec/replicas"))
                    )),
                    json!(n(o.pointer("/status/updatedReplicas"))),
                    json!(n(o.pointer("/status/availableReplicas"))),
                    age(o),
                ]
            },
        ),
        ("", "services") => (
            vec![
                col("Name", "string", 0),
                col("Type", "string", 0),
                col("Cluster-IP", "string", 0),
                col("External-IP", "string", 0),
                col("Port(s)", "string", 0),
                col("Age", "string", 0),
            ],
            |o| {
                let ports: Vec<String> = o
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|p| {
                                format!(
                                    "{}/{}",
                                    n(p.get("port")),
                                    p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let ports = if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                };
                vec![
                    name(o),
                    json!(s(o.pointer("/spec/type"))),
                    json!(s(o.pointer("/spec/clusterIP"))),
                    json!("<none>"),
                    json!(ports),
                    age(o),
                ]
            },
        ),
        ("", "configmaps") => (
            vec![
                col("Name", "string", 0),
                col("Data", "integer", 0),
                col("Age", "string", 0),
            ],
            |o| {
                vec![
                    name(o),
                    json!(len(o.get("data")) + len(o.get("binaryData"))),
                    age(o),
                ]
            },
        ),
        ("", "secrets") => (
            vec![
                col("Name", "string", 0),
                col("Type", "string", 0),
                col("Data", "integer", 0),
                col("Age", "string", 0),
            ],
            |o| {
                vec![
                    name(o),
                    json!(s(o.get("type"))),
                    json!(len(o.get("data")) + len(o.get("stringData"))),
                    age(o),
                ]
            },
        ),
        ("", "namespaces") => (
            vec![
                col("Name", "string", 0),
                col("Status", "string", 0),
                col("Age", "string", 0),
            ],
            |o| vec![name(o), json!(s(o.pointer("/status/phase"))), age(o)],
        ),
        ("", "serviceaccounts") => (
            vec![
                col("Name", "string", 0),
                col("Secrets", "integer", 0),
                col("Age", "string", 0),
            ],
            |o| vec![name(o), json!(len(o.get("secrets"))), age(o)],
        ),
        ("", "endpoints") => (
            vec![
                col("Name", "string", 0),
                col("Endpoints", "string", 0),
                col("Age", "string", 0),
            ],
            |o| {
                let mut eps = Vec::new();
                for sub in o
                    .get("subsets")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    for a in sub
                        .get("addresses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        for p in sub
                            .get("ports")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            eps.push(format!("{}:{}", s(a.get("ip")), n(p.get("port"))));
                        }
                    }
                }
                let eps = if eps.is_empty() {
                    "<none>".to_string()
                } else {
                    eps.join(",")
                };
                vec![name(o), json!(eps), age(o)]
            },
        ),
        ("batch", "jobs") => (
            vec![
                col("Name", "string", 0),
                col("Completions", "string", 0),
                col("Age", "string", 0),
            ],
            |o| {
                vec![
                    name(o),
                    json!(format!(
                        "{}/{}",
                        n(o.pointer("/status/succeeded")),
                        o.pointer("/spec/completions")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    )),
                    age(o),
                ]
            },
        ),
        ("batch", "cronjobs") => (
            vec![
                col("Name", "string", 0),
                col("Schedule", "string", 0),
                col("Suspend", "boolean", 0),
                col("Active", "integer", 0),
                col("Last Schedule", "string", 0),
                col("Age", "string", 0),
            ],
            |o| {
                let last = o
                    .pointer("/status/lastScheduleTime")
                    .and_then(Value::as_str)
                    .map(|t| human_age(Some(t)))
                    .unwrap_or_else(|| "<none>".into());
                vec![
                    name(o),
                    json!(s(o.pointer("/spec/schedule"))),
                    json!(
                        o.pointer("/spec/suspend")
                            .and_then(Value::as_bool)
                            .unwrap_or(false)
                    ),
                    json!(len(o.pointer("/status/active"))),
                    json!(last),
                    age(o),
                ]
            },
        ),
        ("networking.k8s.io", "ingresses") => (
            vec![
                col("Name", "string", 0),
                col("Class", "string", 0),
                col("Hosts", "string", 0),
                col("Address", "string", 0),
                col("Ports", "string", 0),
                col("Age", "string", 0),
            ],
            |o| {
                let hosts: Vec<String> = o
                    .pointer("/spec/rules")
                    .and_then(Value::as_array)
                    .map(|r| {
                        r.iter()
                            .map(|r| {
                                r.get("host")
                                    .and_then(Value::as_str)
                                    .unwrap_or("*")
                                    .to_string()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let ports = if o.pointer("/spec/tls").is_some() {
                    "80, 443"
                } else {
                    "80"
                };
                vec![
                    name(o),
                    json!(s(o.pointer("/spec/ingressClassName"))),
                    json!(if hosts.is_empty() {
                        "*".to_string()
                    } else {
                        hosts.join(",")
                    }),
                    json!(""),
                    json!(ports),
                    age(o),
                ]
            },
        ),
        ("autoscaling", "horizontalpodautoscalers") => (
            vec![
                col("Name", "string", 0),
                col("Reference", "string", 0),
                col("MinPods", "integer", 0),
                col("MaxPods", "integer", 0),
                col("Replicas", "integer", 0),
                col("Age", "string", 0),
            ],
            |o| {
                let r = format!(
                    "{}/{}",
                    s(o.pointer("/spec/scaleTargetRef/kind")),
                    s(o.pointer("/spec/scaleTargetRef/name"))
                );
                vec![
                    name(o),
                    json!(r),
                    json!(
                        o.pointer("/spec/minReplicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    ),
                    json!(n(o.pointer("/spec/maxReplicas"))),
                    json!(n(o.pointer("/status/currentReplicas"))),
                    age(o),
                ]
            },
        ),
        ("apiextensions.k8s.io", "customresourcedefinitions") => (
            vec![col("Name", "string", 0), col("Created At", "date", 0)],
            |o| vec![name(o), json!(s(o.pointer("/metadata/creationTimestamp")))],
        ),
        _ => (
            vec![col("Name", "string", 0), col("Age", "string", 0)],
            |o| vec![name(o), age(o)],
        ),
    }
}

/// Converts objects into a Table (for list, get and each watch event).
pub struct TableBuilder {
    columns: Vec<Value>,
    crd_columns: Option<Vec<PrinterColumn>>,
    cells: Cells,
    include: String,
    /// Kinds stored in another version: the embedded object is shown in the requested one.
    convert_to: Option<(crate::registry::GroupResource, String)>,
}

impl TableBuilder {
    pub fn new(def: &ResourceDef, version: &str, include: Option<&str>) -> Self {
        let include = include.unwrap_or("Metadata").to_string();
        if def.is_crd {
            let cols = def.columns.get(version).cloned().unwrap_or_default();
            let cols = if cols.is_empty() {
                vec![PrinterColumn {
                    name: "Age".into(),
                    type_: "date".into(),
                    json_path: ".metadata.creationTimestamp".into(),
                    priority: 0,
                    description: "".into(),
                }]
            } else {
                cols
            };
            let mut columns = vec![col("Name", "string", 0)];
            for c in &cols {
                columns.push(json!({"name": c.name, "type": c.type_, "format": "", "description": c.description, "priority": c.priority}));
            }
            return Self {
                columns,
                crd_columns: Some(cols),
                cells: |_| Vec::new(),
                include,
                convert_to: None,
            };
        }
        let (columns, cells) = builtin(def);
        let convert_to = crate::convert::storage_api_version(&def.gr)
            .map(|_| (def.gr.clone(), def.api_version(version)));
        Self {
            columns,
            crd_columns: None,
            cells,
            include,
            convert_to,
        }
    }

    pub fn row(&self, obj: &Value) -> Value {
        let cells = match &self.crd_columns {
            Some(cols) => {
                let mut out = vec![name(obj)];
                for c in cols {
                    let v = json_path(obj, &c.json_path);
                    out.push(match (c.type_.as_str(), v) {
                        ("date", Some(Value::String(t))) => json!(human_age(Some(t))),
                        (_, Some(v)) => v.clone(),
                        (_, None) => Value::Null,
                    });
                }
                out
            }
            None => (self.cells)(obj),
        };
        let converted = self
            .convert_to
            .as_ref()
            .map(|(gr, av)| crate::convert::convert(gr, obj, av));
        let obj = converted.as_ref().unwrap_or(obj);
        let object = match self.include.as_str() {
            "None" => Value::Null,
            "Object" => obj.clone(),
            _ => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
            }
        };
        json!({"cells": cells, "object": object})
    }

    pub fn table(&self, rows: Vec<Value>, metadata: Value) -> Value {
        json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": self.columns, "rows": rows})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_forms() {
        let o = json!({"spec": {"a": [{"b": 3}]}});
        assert_eq!(json_path(&o, ".spec.a[0].b"), Some(&json!(3)));
        assert_eq!(json_path(&o, "{.spec.a[0].b}"), Some(&json!(3)));
        assert_eq!(json_path(&o, ".spec.x"), None);
        let f = json!({"status": {"conditions": [
            {"type": "Available", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "Reconciled"}]}});
        assert_eq!(
            json_path(&f, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(
            json_path(&f, ".status.conditions[?(@.type==\"Ready\")].reason"),
            Some(&json!("Reconciled"))
        );
        assert_eq!(
            json_path(&f, ".status.conditions[?(@.type==\"Gone\")].status"),
            None
        );
    }

    #[test]
    fn ages() {
        let t = (Utc::now() - chrono::Duration::seconds(30)).to_rfc3339();
        assert_eq!(human_age(Some(&t)), "30s");
        let t = (Utc::now() - chrono::Duration::seconds(3 * 3600 + 60 * 5)).to_rfc3339();
        assert_eq!(human_age(Some(&t)), "3h5m");
    }
}
