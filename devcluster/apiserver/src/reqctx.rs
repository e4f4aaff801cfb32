//! What one request carries through the store without being passed to every call: who sent
//! it, the client's `fieldValidation` directive, and the warnings the answer sends back in `Warning`
//! headers (unknown fields, PodSecurity `warn`), as the real API server does.
//!
//! The HTTP layer runs each request's handler inside [`scope`]; store code calls [`warn`] and
//! [`field_validation`], which do nothing (and answer the default) outside a request.

use std::cell::RefCell;
use std::future::Future;

use http::HeaderValue;

/// How unknown and duplicate fields in a request body are treated (`?fieldValidation=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Dropped silently.
    Ignore,
    /// Dropped, with a warning per field (the server's default).
    #[default]
    Warn,
    /// The request fails with 400 naming each field (what kubectl asks for).
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter; `None` for a value the real server refuses.
    pub fn parse(raw: Option<&str>) -> Option<Self> {
        match raw {
            None | Some("") => Some(Self::default()),
            Some("Ignore") => Some(Self::Ignore),
            Some("Warn") => Some(Self::Warn),
            Some("Strict") => Some(Self::Strict),
            Some(_) => None,
        }
    }
}

/// Who a write is recorded for in `managedFields`, and how (see `fieldmanager.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// `?fieldManager=`, else the client's program name from its User-Agent.
    pub field_manager: String,
    /// `?force=true` on an apply.
    pub force: bool,
    /// The subresource the request is for (`status`, `scale`), empty for the object.
    pub subresource: String,
}

#[derive(Default)]
struct Ctx {
    user: Option<crate::auth::User>,
    validation: FieldValidation,
    write: Option<WriteOptions>,
    warnings: Vec<String>,
    unknown: Vec<String>,
}

tokio::task_local! {
    static CTX: RefCell<Ctx>;
}

/// Runs `fut` as one request of `user` with `validation`; returns its output and the
/// warnings raised.
pub async fn scope<F: Future>(
    user: Option<crate::auth::User>,
    validation: FieldValidation,
    fut: F,
) -> (F::Output, Vec<String>) {
    let cell = RefCell::new(Ctx {
        user,
        validation,
        ..Ctx::default()
    });
    CTX.scope(cell, async move {
        let out = fut.await;
        let warnings = CTX.with(|c| std::mem::take(&mut c.borrow_mut().warnings));
        (out, warnings)
    })
    .await
}

/// Sets the current request's write options.
pub fn set_write_options(options: WriteOptions) {
    let _ = CTX.try_with(|c| c.borrow_mut().write = Some(options));
}

/// Notes the subresource the current request is for.
pub fn set_subresource(sub: &str) {
    let _ = CTX.try_with(|c| {
        if let Some(w) = c.borrow_mut().write.as_mut() {
            w.subresource = sub.to_string();
        }
    });
}

/// The current request's write options (None outside a request: the server's own writes).
pub fn write_options() -> Option<WriteOptions> {
    CTX.try_with(|c| c.borrow().write.clone()).ok().flatten()
}

/// Adds a warning to the current request's answer (once per distinct text).
pub fn warn(text: impl Into<String>) {
    let text = text.into();
    let _ = CTX.try_with(|c| {
        let mut c = c.borrow_mut();
        if !c.warnings.contains(&text) {
            c.warnings.push(text);
        }
    });
}

/// Who sent the current request (`None` outside a request and for unauthenticated paths).
pub fn user() -> Option<crate::auth::User> {
    CTX.try_with(|c| c.borrow().user.clone()).ok().flatten()
}

/// Notes an unknown field a built-in kind's decoder skipped (see [`take_unknown`]).
pub fn note_unknown(path: String) {
    let _ = CTX.try_with(|c| c.borrow_mut().unknown.push(path));
}

/// The unknown fields noted since the last call.
pub fn take_unknown() -> Vec<String> {
    CTX.try_with(|c| std::mem::take(&mut c.borrow_mut().unknown))
        .unwrap_or_default()
}

/// The current request's `fieldValidation` directive (the default outside a request).
pub fn field_validation() -> FieldValidation {
    CTX.try_with(|c| c.borrow().validation).unwrap_or_default()
}

/// A `Warning` header value (RFC 7234 code 299, agent `-`), as the real server writes it:
/// the text quoted with `"` and `\` escaped; characters a header cannot carry are dropped.
pub fn header_value(text: &str) -> Option<HeaderValue> {
    let mut quoted = String::with_capacity(text.len() + 8);
    quoted.push_str("299 - \"");
    for ch in text.chars() {
        match ch {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(ch);
            }
            c if c == '\t' || (' '..='~').contains(&c) => quoted.push(c),
            _ => {}
        }
    }
    quoted.push('"');
    HeaderValue::from_str(&quoted).ok()
}

/// What to do with the unknown fields found in a body of `kind` at `version`: nothing, a
/// warning each, or the 400 the real server answers under `fieldValidation=Strict`.
pub fn unknown_fields(
    kind: &str,
    version: &str,
    unknown: &[String],
) -> Result<(), crate::errors::ApiError> {
    if unknown.is_empty() {
        return Ok(());
    }
    match field_validation() {
        FieldValidation::Ignore => Ok(()),
        FieldValidation::Warn => {
            unknown
                .iter()
                .for_each(|f| warn(format!("unknown field {f:?}")));
            Ok(())
        }
        FieldValidation::Strict => {
            let fields: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field {f:?}"))
                .collect();
            Err(crate::errors::ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn warnings_are_collected_per_request_and_deduplicated() {
        let ((), warnings) = scope(None, FieldValidation::Warn, async {
            warn("a");
            warn("b");
            warn("a");
        })
        .await;
        assert_eq!(warnings, ["a", "b"]);
        // Outside a request nothing is kept and nothing fails.
        warn("lost");
        assert_eq!(field_validation(), FieldValidation::Warn);
    }

    #[tokio::test]
    async fn strict_refuses_unknown_fields_with_the_real_message() {
        let (r, _) = scope(None, FieldValidation::Strict, async {
            unknown_fields("Function", "v1beta1", &["spec.handeler".into()])
        })
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.status()["message"].as_str().unwrap().ends_with(
                "Function in version \"v1beta1\" cannot be handled as a Function: strict decoding error: unknown field \"spec.handeler\""
            ),
            "{:?}",
            e.status()
        );
        let (r, w) = scope(None, FieldValidation::Ignore, async {
            unknown_fields("Function", "v1beta1", &["spec.x".into()])
        })
        .await;
        assert!(r.is_ok() && w.is_empty());
    }

    #[test]
    fn header_values_quote_and_escape() {
        let v = header_value("unknown field \"spec.a\\b\"").unwrap();
        assert_eq!(
            v.to_str().unwrap(),
            r#"299 - "unknown field \"spec.a\\b\"""#
        );
        assert_eq!(
            FieldValidation::parse(Some("Strict")),
            Some(FieldValidation::Strict)
        );
        assert_eq!(FieldValidation::parse(Some("strict")), None);
    }
}
