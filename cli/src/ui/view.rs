//! What the pages show, built from API objects by pure functions.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{apps::v1::Deployment, events::v1::Event},
    jiff::Timestamp,
};
use kube::ResourceExt;
use kubeless_api::{Condition, Function, conditions::READY, find_condition};
use serde::Serialize;

use crate::function::status_of;

/// Seconds from `t` to `now`.
pub fn secs_since(t: Timestamp, now: Timestamp) -> i64 {
    now.as_second() - t.as_second()
}

#[derive(Debug, Clone, PartialEq)]
pub struct FunctionRow {
    pub name: String,
    pub runtime: String,
    /// `True`, `False` or `Unknown` (the Ready condition).
    pub ready: String,
    pub reason: String,
    pub message: String,
    /// Ready pods of the Deployment, as `function ls` prints them.
    pub pods: String,
    pub age_secs: Option<i64>,
}

fn ready_of(conditions: &[Condition]) -> (String, String, String) {
    match find_condition(conditions, READY) {
        Some(c) => (
            c.status.clone(),
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        ),
        None => ("Unknown".into(), String::new(), String::new()),
    }
}

pub fn function_rows(
    functions: &[Function],
    deployments: &BTreeMap<String, Deployment>,
    now: Timestamp,
) -> Vec<FunctionRow> {
    let mut rows: Vec<FunctionRow> = functions
        .iter()
        .map(|f| {
            let name = f.name_any();
            let conditions = f
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let (ready, reason, message) = ready_of(&conditions);
            FunctionRow {
                runtime: f.spec.runtime.clone().unwrap_or_default(),
                ready,
                reason,
                message,
                pods: status_of(deployments.get(&name)),
                age_secs: f
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| secs_since(t.0, now)),
                name,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cond {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub age_secs: Option<i64>,
}

pub fn conds(conditions: &[Condition], now: Timestamp) -> Vec<Cond> {
    conditions
        .iter()
        .map(|c| Cond {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
            age_secs: c
                .last_transition_time
                .as_ref()
                .map(|t| secs_since(t.0, now)),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub kind: String,
    pub name: String,
    pub type_: String,
    pub reason: String,
    pub note: String,
    pub age_secs: Option<i64>,
}

/// The events about objects of `kinds` (all when empty) and, when given, one object name; the
/// newest first, at most `limit`.
pub fn event_rows(
    events: &[Event],
    kinds: &[&str],
    name: Option<&str>,
    now: Timestamp,
    limit: usize,
) -> Vec<EventRow> {
    let mut rows: Vec<(i64, EventRow)> = events
        .iter()
        .filter_map(|e| {
            let regarding = e.regarding.as_ref()?;
            let kind = regarding.kind.clone().unwrap_or_default();
            let obj = regarding.name.clone().unwrap_or_default();
            if !kinds.is_empty() && !kinds.contains(&kind.as_str()) {
                return None;
            }
            if name.is_some_and(|n| n != obj) {
                return None;
            }
            let when = e
                .event_time
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0))
                .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
            let age = when.map(|t| secs_since(t, now));
            Some((
                age.unwrap_or(i64::MAX),
                EventRow {
                    kind,
                    name: obj,
                    type_: e.type_.clone().unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                    note: e.note.clone().unwrap_or_default(),
                    age_secs: age,
                },
            ))
        })
        .collect();
    rows.sort_by_key(|(age, _)| *age);
    rows.into_iter().take(limit).map(|(_, r)| r).collect()
}

/// The function page.
#[derive(Debug, Clone, Default)]
pub struct FunctionPage {
    pub name: String,
    pub runtime: String,
    pub handler: String,
    pub ready: String,
    pub pods: String,
    pub generation: Option<i64>,
    /// The code as text; None when it is an archive or a URL.
    pub code: Option<String>,
    pub content_type: String,
    pub conditions: Vec<Cond>,
    pub events: Vec<EventRow>,
    /// A call's answer (rendered HTML) when the call form was posted without JavaScript.
    pub answer: Option<String>,
}

/// The function's code when it is text (plain, or base64 of text that is not an archive).
pub fn code_text(f: &Function) -> Option<String> {
    use base64::Engine;
    let content_type = f.spec.function_content_type.as_deref().unwrap_or("text");
    let code = f.spec.function.as_deref().unwrap_or("");
    match content_type {
        "text" | "" => Some(code.to_string()),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(code.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        _ => None,
    }
}

pub fn function_page(
    f: &Function,
    deployment: Option<&Deployment>,
    events: Vec<EventRow>,
    now: Timestamp,
) -> FunctionPage {
    let conditions = f
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let (ready, _, _) = ready_of(&conditions);
    FunctionPage {
        name: f.name_any(),
        runtime: f.spec.runtime.clone().unwrap_or_default(),
        handler: f.spec.handler.clone().unwrap_or_default(),
        ready,
        pods: status_of(deployment),
        generation: f.metadata.generation,
        code: code_text(f),
        content_type: f
            .spec
            .function_content_type
            .clone()
            .unwrap_or_else(|| "text".into()),
        conditions: conds(&conditions, now),
        events,
        answer: None,
    }
}

/// The "new function" form.
#[derive(Debug, Clone, Default)]
pub struct NewFunction {
    pub runtimes: Vec<String>,
    pub name: String,
    pub runtime: String,
    pub handler: String,
    pub code: String,
    /// `{runtime: {handler, code}}` for the script that swaps templates.
    pub templates_json: String,
}

#[derive(Serialize)]
struct TemplateJson {
    handler: &'static str,
    code: &'static str,
}

pub fn new_function(runtimes: Vec<String>, runtime: Option<&str>) -> NewFunction {
    let runtime = runtime
        .filter(|r| runtimes.iter().any(|x| x == r))
        .map(str::to_string)
        .or_else(|| runtimes.first().cloned())
        .unwrap_or_default();
    let t = super::templates::for_runtime(&runtime);
    let map: BTreeMap<&str, TemplateJson> = runtimes
        .iter()
        .map(|r| {
            let t = super::templates::for_runtime(r);
            (
                r.as_str(),
                TemplateJson {
                    handler: t.handler,
                    code: t.code,
                },
            )
        })
        .collect();
    NewFunction {
        templates_json: serde_json::to_string(&map).unwrap_or_else(|_| "{}".into()),
        runtimes,
        name: String::new(),
        handler: t.handler.to_string(),
        code: t.code.to_string(),
        runtime,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRow {
    pub name: String,
    /// The function name, or the function selector.
    pub target: String,
    /// Host/path, schedule, topic or stream.
    pub detail: String,
    pub ready: String,
    pub reason: String,
    pub message: String,
    pub age_secs: Option<i64>,
}

impl TriggerRow {
    pub fn new(
        name: String,
        target: String,
        detail: String,
        conditions: &[Condition],
        age_secs: Option<i64>,
    ) -> Self {
        let (ready, reason, message) = ready_of(conditions);
        Self {
            name,
            target,
            detail,
            ready,
            reason,
            message,
            age_secs,
        }
    }
}

/// One input of a trigger's create form.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub label: &'static str,
    pub placeholder: &'static str,
    pub required: bool,
}

const fn field(
    name: &'static str,
    label: &'static str,
    placeholder: &'static str,
    required: bool,
) -> Field {
    Field {
        name,
        label,
        placeholder,
        required,
    }
}

/// A trigger kind as the triggers page shows it.
#[derive(Debug)]
pub struct TriggerKind {
    /// URL segment and anchor.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail_header: &'static str,
    pub fields: &'static [Field],
}

const FUNCTION: Field = field("function", "Function", "", true);

static KINDS: [TriggerKind; 5] = [
    TriggerKind {
        kind: "http",
        title: "HTTP trigger",
        detail_header: "Host and path",
        fields: &[
            FUNCTION,
            field(
                "hostname",
                "Host name",
                "default: <function>.<API host>.nip.io",
                false,
            ),
            field("path", "Path", "/", false),
            field("gateway", "Gateway", "nginx, traefik or kong", false),
        ],
    },
    TriggerKind {
        kind: "cronjob",
        title: "Cronjob trigger",
        detail_header: "Schedule",
        fields: &[
            FUNCTION,
            field("schedule", "Schedule", "*/5 * * * *", true),
            field("payload", "Payload (JSON)", "{\"hello\": \"world\"}", false),
        ],
    },
    TriggerKind {
        kind: "kafka",
        title: "Kafka trigger",
        detail_header: "Topic",
        fields: &[
            field("topic", "Topic", "orders", true),
            field("selector", "Function selector", "function=hello", true),
        ],
    },
    TriggerKind {
        kind: "nats",
        title: "NATS trigger",
        detail_header: "Subject",
        fields: &[
            field("topic", "Subject", "orders", true),
            field("selector", "Function selector", "function=hello", true),
        ],
    },
    TriggerKind {
        kind: "kinesis",
        title: "Kinesis trigger",
        detail_header: "Stream",
        fields: &[
            FUNCTION,
            field("stream", "Stream", "orders", true),
            field("region", "AWS region", "us-east-1", true),
            field("secret", "Secret with AWS keys", "aws-keys", false),
            field(
                "endpoint",
                "Endpoint URL",
                "https://kinesis.us-east-1.amazonaws.com",
                false,
            ),
        ],
    },
];

pub fn trigger_kinds() -> &'static [TriggerKind] {
    &KINDS
}

/// One kind's list on the triggers page.
#[derive(Debug)]
pub struct TriggerSection {
    pub kind: &'static str,
    pub title: &'static str,
    pub detail_header: &'static str,
    pub fields: &'static [Field],
    pub rows: Vec<TriggerRow>,
    /// Why the list could not be read (e.g. the CRD is not installed).
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use kubeless_api::{FunctionSpec, FunctionStatus};

    use super::*;

    #[test]
    fn rows_from_functions() {
        let mut f = Function::new("hello", FunctionSpec::default());
        f.spec.runtime = Some("python3.11".into());
        f.status = Some(FunctionStatus {
            conditions: vec![Condition::not_ready("Progressing", "0/1 ready")],
            ..FunctionStatus::default()
        });
        let now = Timestamp::now();
        let rows = function_rows(&[f.clone()], &BTreeMap::new(), now);
        assert_eq!(rows[0].ready, "False");
        assert_eq!(rows[0].reason, "Progressing");
        assert_eq!(rows[0].pods, "MISSING: Check controller logs");
        let page = function_page(&f, None, vec![], now);
        assert_eq!(page.conditions.len(), 1);
        assert_eq!(page.code.as_deref(), Some(""));
    }

    #[test]
    fn code_of_each_content_type() {
        let mut f = Function::new("x", FunctionSpec::default());
        f.spec.function = Some("aGk=".into());
        f.spec.function_content_type = Some("base64".into());
        assert_eq!(code_text(&f).as_deref(), Some("hi"));
        f.spec.function_content_type = Some("base64+zip".into());
        assert_eq!(code_text(&f), None);
    }

    #[test]
    fn new_function_form_uses_the_runtime_template() {
        let form = new_function(
            vec!["nodejs20".into(), "python3.11".into()],
            Some("python3.11"),
        );
        assert_eq!(form.runtime, "python3.11");
        assert!(form.code.contains("def handler"));
        let form = new_function(vec!["nodejs20".into()], Some("cobol"));
        assert_eq!(form.runtime, "nodejs20");
        let v: serde_json::Value = serde_json::from_str(&form.templates_json).unwrap();
        assert!(
            v["nodejs20"]["code"]
                .as_str()
                .unwrap()
                .contains("module.exports")
        );
    }
}
