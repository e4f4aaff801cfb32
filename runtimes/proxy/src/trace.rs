//! The function's OpenTelemetry server span: one per call, the child of the caller's
//! `traceparent` (triggers send one), exported when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. The
//! function receives the span's own context in `traceparent`/`tracestate`, so whatever it calls
//! next continues the same trace.

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Extract<'a>(&'a HeaderMap);

impl Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct Inject<'a>(&'a mut HeaderMap);

impl Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// A server span for one call, parented to the request's trace context when it has one.
pub fn server_span(method: &Method, path: &str, headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        "function call",
        otel.kind = "server",
        otel.name = %format!("{method} {path}"),
        http.request.method = %method,
        url.path = %path,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Extract(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    span
}

/// Status code, and ERROR when the call failed (exception, timeout, worker died).
pub fn record_outcome(span: &tracing::Span, status: u16, failed: bool) {
    span.record("http.response.status_code", status);
    if failed {
        span.record("otel.status_code", "ERROR");
    }
}

/// Replaces `traceparent`/`tracestate` with the current span's context.
pub fn inject_current(headers: &mut HeaderMap) {
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        headers.remove("tracestate");
        TraceContextPropagator::new().inject_context(&cx, &mut Inject(headers));
    }
}
