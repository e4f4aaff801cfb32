//! API errors rendered as metav1.Status with the codes and reasons the real
//! server uses.

use serde_json::{Value, json};

use crate::registry::GroupResource;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, gr: &GroupResource, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": gr.group, "kind": gr.resource}));
        self
    }

    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", gr.qualified()),
        )
        .with_details(gr, name)
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gr.qualified()),
        )
        .with_details(gr, name)
    }

    pub fn conflict(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                gr.qualified()
            ),
        )
        .with_details(gr, name)
    }

    pub fn conflict_msg(gr: &GroupResource, name: &str, msg: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {msg}",
                gr.qualified()
            ),
        )
        .with_details(gr, name)
    }

    /// 409 for an apply that would change fields other managers own: the real server's
    /// message and one `FieldManagerConflict` cause per field.
    pub fn apply_conflict(conflicts: &crate::fieldmanager::Conflicts) -> Self {
        let causes: Vec<Value> = conflicts
            .0
            .iter()
            .map(|c| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", c.manager), "field": c.field})
            })
            .collect();
        let mut e = Self::new(409, "Conflict", conflicts.message());
        e.details = Some(json!({ "causes": causes }));
        e
    }

    /// 422 Invalid with field causes, worded like the real server.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[String]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = if causes.len() == 1 {
            format!("{qualified} \"{name}\" is invalid: {}", causes[0])
        } else {
            format!("{qualified} \"{name}\" is invalid: [{}]", causes.join(", "))
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| {
                let field = c.split(':').next().unwrap_or("").to_string();
                json!({"reason": "FieldValueInvalid", "message": c, "field": field})
            })
            .collect();
        let mut e = Self::new(422, "Invalid", message);
        e.details =
            Some(json!({"name": name, "group": group, "kind": kind, "causes": causes_json}));
        e
    }

    /// 422 Invalid from typed field errors: each cause carries its own reason and field, and
    /// its message without the field, as the real server's Status does.
    pub fn invalid_fields(
        kind: &str,
        group: &str,
        name: &str,
        errors: &[kubeless_api::validate::FieldError],
    ) -> Self {
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let mut e = Self::invalid(kind, group, name, &texts);
        let causes: Vec<Value> = errors
            .iter()
            .map(|f| json!({"reason": f.kind.reason(), "message": f.detail, "field": f.field}))
            .collect();
        e.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
        e
    }

    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }

    pub fn gone(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }

    pub fn forbidden(msg: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", msg)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {ct}"
            ),
        )
    }

    /// 406: none of the media types the client accepts can be served.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf; got {accept}"
            ),
        )
    }

    pub fn unavailable(msg: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", msg)
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(500, "InternalError", msg)
    }

    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
