//! The event sent to a function and the Kubeless headers that carry it.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rand::Rng;
use rand::distr::Alphanumeric;

pub const EVENT_ID: HeaderName = HeaderName::from_static("event-id");
pub const EVENT_TIME: HeaderName = HeaderName::from_static("event-time");
pub const EVENT_TYPE: HeaderName = HeaderName::from_static("event-type");
pub const EVENT_NAMESPACE: HeaderName = HeaderName::from_static("event-namespace");
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

// CloudEvents 1.0 HTTP binary mode: the same event in the standard form, beside Kubeless's
// headers (`Content-Type` is the CloudEvent's `datacontenttype`).
pub const CE_SPECVERSION: HeaderName = HeaderName::from_static("ce-specversion");
pub const CE_ID: HeaderName = HeaderName::from_static("ce-id");
pub const CE_SOURCE: HeaderName = HeaderName::from_static("ce-source");
pub const CE_TYPE: HeaderName = HeaderName::from_static("ce-type");
pub const CE_TIME: HeaderName = HeaderName::from_static("ce-time");

pub const APPLICATION_JSON: &str = "application/json";
/// What Kubeless sends for anything that is not a JSON object.
pub const FORM_URLENCODED: &str = "application/x-www-form-urlencoded";

/// Length of a generated `event-id` (Kubeless uses 11 characters; 20 alphanumerics is ~119 bits).
pub const EVENT_ID_LEN: usize = 20;

/// One event to deliver.
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// Request body; `None` sends a GET, `Some` a POST.
    pub body: Option<Bytes>,
    /// Content type of the body as the source knew it (used when the body is not JSON).
    pub content_type: Option<String>,
    /// `event-type` override; defaults to the content type sent.
    pub event_type: Option<String>,
    /// `event-namespace`, e.g. `kafkatriggers.kubeless.io`.
    pub event_namespace: String,
    /// `event-id` to reuse (e.g. one derived from a broker record); generated when `None`.
    pub event_id: Option<String>,
    /// Extra headers, e.g. `event-topic`, `event-key`, `event-partition`, `event-offset`.
    pub headers: HeaderMap,
    /// Trace context the call continues; when `None`, the current `tracing` span's.
    pub parent: Option<opentelemetry::Context>,
}

impl Event {
    pub fn new(event_namespace: impl Into<String>) -> Self {
        Self {
            event_namespace: event_namespace.into(),
            ..Self::default()
        }
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    pub fn with_event_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_type = Some(event_type.into());
        self
    }

    pub fn with_event_id(mut self, id: impl Into<String>) -> Self {
        self.event_id = Some(id.into());
        self
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    pub fn with_parent(mut self, cx: opentelemetry::Context) -> Self {
        self.parent = Some(cx);
        self
    }
}

/// Whether the body is a JSON object or array (sent as `application/json`).
///
/// Kubeless only recognised objects; arrays are JSON documents a function can parse too, so
/// they count here. Scalars (`42`, `"text"`, `true`) are left to the given content type: they
/// are just as likely to be plain text that happens to parse.
pub fn is_json_document(body: &[u8]) -> bool {
    let first = body.iter().copied().find(|b| !b.is_ascii_whitespace());
    matches!(first, Some(b'{' | b'['))
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
}

/// The `Content-Type` to send: JSON documents are `application/json`, anything else keeps the
/// source's content type or falls back to Kubeless's `application/x-www-form-urlencoded`.
pub fn content_type_for<'a>(body: &[u8], given: Option<&'a str>) -> &'a str {
    if is_json_document(body) {
        APPLICATION_JSON
    } else {
        given.filter(|c| !c.is_empty()).unwrap_or(FORM_URLENCODED)
    }
}

/// A new random `event-id`: [`EVENT_ID_LEN`] ASCII letters and digits.
pub fn new_event_id() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(EVENT_ID_LEN)
        .map(char::from)
        .collect()
}

/// `event-time` as Kubeless's triggers wrote it: Go's `time.Time.String()` of a UTC time,
/// `2026-01-02 03:04:05.678901234 +0000 UTC` (fraction without trailing zeros, left out when
/// zero). Functions written for Kubeless parse this; the standard form is in `ce-time`.
pub fn event_time_now() -> String {
    format_event_time(chrono::Utc::now())
}

/// `YYYY-MM-DD<sep>HH:MM:SS` of `t`, written by hand: it runs twice for every event and the
/// generic formatter costs several times more. `None` outside years 0-9999.
fn date_time(t: &chrono::DateTime<chrono::Utc>, sep: u8) -> Option<[u8; 19]> {
    use chrono::{Datelike, Timelike};
    let year = t.year();
    if !(0..=9999).contains(&year) {
        return None;
    }
    let mut buf = *b"0000-00-00T00:00:00";
    buf[10] = sep;
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (at..at + width).rev() {
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year.unsigned_abs());
    put(5, 2, t.month());
    put(8, 2, t.day());
    put(11, 2, t.hour());
    put(14, 2, t.minute());
    put(17, 2, t.second());
    Some(buf)
}

fn ascii(bytes: &[u8]) -> &str {
    // Only ASCII digits and separators are ever written.
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// Formats `t` like [`event_time_now`].
pub fn format_event_time(t: chrono::DateTime<chrono::Utc>) -> String {
    let Some(head) = date_time(&t, b' ') else {
        return format!("{} +0000 UTC", t.format("%Y-%m-%d %H:%M:%S%.f"));
    };
    let mut out = String::with_capacity(40);
    out.push_str(ascii(&head));
    // A leap second shows as nanosecond >= 1e9; clamp it into .999999999.
    let mut nanos = t.timestamp_subsec_nanos().min(999_999_999);
    if nanos > 0 {
        let mut digits = *b".000000000";
        for d in digits[1..].iter_mut().rev() {
            *d = b'0' + (nanos % 10) as u8;
            nanos /= 10;
        }
        let len = digits.iter().rposition(|d| *d != b'0').map_or(0, |i| i + 1);
        out.push_str(ascii(&digits[..len]));
    }
    out.push_str(" +0000 UTC");
    out
}

/// `ce-time`: RFC 3339 UTC with millisecond precision, e.g. `2026-01-02T03:04:05.678Z`.
pub fn format_ce_time(t: chrono::DateTime<chrono::Utc>) -> String {
    let Some(head) = date_time(&t, b'T') else {
        return t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    };
    let millis = (t.timestamp_subsec_nanos() / 1_000_000).min(999);
    format!("{}.{millis:03}Z", ascii(&head))
}

/// `ce-type` of an event from `event_namespace` (`kafkatriggers.kubeless.io` gives
/// `io.kubeless.kafkatriggers`): reverse-DNS, as CloudEvents recommends.
pub fn ce_type(event_namespace: &str) -> String {
    let source = event_namespace
        .strip_suffix(".kubeless.io")
        .unwrap_or(event_namespace);
    format!("io.kubeless.{source}")
}

/// A fresh W3C traceparent (version 00, random ids, sampled) for events with no trace context.
pub fn new_traceparent() -> HeaderValue {
    let mut rng = rand::rng();
    // All-zero ids are invalid in W3C trace context.
    let trace_id: u128 = rng.random_range(1..=u128::MAX);
    let span_id: u64 = rng.random_range(1..=u64::MAX);
    let mut buf = *b"00-00000000000000000000000000000000-0000000000000000-01";
    write_hex(&mut buf[3..35], trace_id);
    write_hex(&mut buf[36..52], u128::from(span_id));
    HeaderValue::from_bytes(&buf).unwrap_or(HeaderValue::from_static(
        "00-00000000000000000000000000000001-0000000000000001-01",
    ))
}

fn write_hex(out: &mut [u8], mut v: u128) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in out.iter_mut().rev() {
        *b = HEX[(v & 0xf) as usize];
        v >>= 4;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("header {name} has a value that cannot be sent: {value:?}")]
    InvalidValue {
        name: &'static str,
        value: String,
        #[source]
        source: http::header::InvalidHeaderValue,
    },
}

/// Builds the headers of an event: the Kubeless `event-*` headers, `Content-Type` (only with a
/// body) and the caller's extra headers. `traceparent` is added per attempt, see
/// [`inject_traceparent`].
pub fn event_headers(
    event: &Event,
    event_id: &str,
    time: chrono::DateTime<chrono::Utc>,
) -> Result<HeaderMap, HeaderError> {
    let mut headers = HeaderMap::with_capacity(11 + event.headers.len());
    // Extra headers first so the Kubeless headers below win over accidental duplicates.
    for (name, value) in &event.headers {
        headers.append(name.clone(), value.clone());
    }
    let content_type = event
        .body
        .as_ref()
        .map(|body| content_type_for(body, event.content_type.as_deref()));
    let event_type = event
        .event_type
        .as_deref()
        .or(content_type)
        .or(event.content_type.as_deref())
        .unwrap_or(FORM_URLENCODED);
    headers.insert(EVENT_ID, value("event-id", event_id)?);
    headers.insert(EVENT_TIME, value("event-time", &format_event_time(time))?);
    headers.insert(EVENT_TYPE, static_or_value("event-type", event_type)?);
    headers.insert(
        EVENT_NAMESPACE,
        value("event-namespace", &event.event_namespace)?,
    );
    headers.insert(CE_SPECVERSION, HeaderValue::from_static("1.0"));
    headers.insert(CE_ID, value("ce-id", event_id)?);
    headers.insert(CE_SOURCE, value("ce-source", &event.event_namespace)?);
    headers.insert(CE_TYPE, value("ce-type", &ce_type(&event.event_namespace))?);
    headers.insert(CE_TIME, value("ce-time", &format_ce_time(time))?);
    if let Some(ct) = content_type {
        headers.insert(CONTENT_TYPE, static_or_value("content-type", ct)?);
    }
    Ok(headers)
}

fn value(name: &'static str, v: &str) -> Result<HeaderValue, HeaderError> {
    HeaderValue::from_str(v).map_err(|source| HeaderError::InvalidValue {
        name,
        value: v.to_string(),
        source,
    })
}

/// The two common content types are static values: no allocation per event.
fn static_or_value(name: &'static str, v: &str) -> Result<HeaderValue, HeaderError> {
    match v {
        APPLICATION_JSON => Ok(HeaderValue::from_static(APPLICATION_JSON)),
        FORM_URLENCODED => Ok(HeaderValue::from_static(FORM_URLENCODED)),
        other => value(name, other),
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Writes `traceparent` (and `tracestate`) from `parent`, else from the current `tracing` span,
/// through the global propagator. When neither yields a valid context (no tracing set up), a
/// fresh traceparent is written so that every event carries one. Returns whether one was
/// generated.
pub fn inject_traceparent(
    headers: &mut HeaderMap,
    parent: Option<&opentelemetry::Context>,
) -> bool {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let current;
    let cx = match parent {
        Some(cx) => cx,
        None => {
            current = tracing::Span::current().context();
            &current
        }
    };
    if cx.span().span_context().is_valid() {
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(cx, &mut HeaderInjector(headers))
        });
    }
    if headers.contains_key(TRACEPARENT) {
        return false;
    }
    headers.insert(TRACEPARENT, new_traceparent());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_detection() {
        assert!(is_json_document(br#"{"a":1}"#));
        assert!(is_json_document(b"  \n[1, 2, {\"b\": null}] "));
        assert!(is_json_document(b"[]"));
        // scalars are valid JSON but not treated as documents
        assert!(!is_json_document(b"42"));
        assert!(!is_json_document(br#""text""#));
        assert!(!is_json_document(b"true"));
        // invalid
        assert!(!is_json_document(br#"{"a":1"#));
        assert!(!is_json_document(b"[1,]"));
        assert!(!is_json_document(b"{} trailing"));
        assert!(!is_json_document(b"a=1&b=2"));
        assert!(!is_json_document(b""));
    }

    #[test]
    fn content_type_choice() {
        assert_eq!(
            content_type_for(b"{}", Some("text/plain")),
            APPLICATION_JSON
        );
        assert_eq!(content_type_for(b"[1]", None), APPLICATION_JSON);
        assert_eq!(content_type_for(b"hello", Some("text/plain")), "text/plain");
        assert_eq!(content_type_for(b"hello", None), FORM_URLENCODED);
        assert_eq!(content_type_for(b"hello", Some("")), FORM_URLENCODED);
        assert_eq!(
            content_type_for(b"7", Some("application/octet-stream")),
            "application/octet-stream"
        );
    }

    #[test]
    fn headers_for_json_post() {
        let ev = Event::new("kafkatriggers.kubeless.io")
            .with_body(r#"{"hello":"world"}"#)
            .with_header(
                HeaderName::from_static("event-topic"),
                HeaderValue::from_static("orders"),
            );
        let t = chrono::DateTime::from_timestamp(1_767_225_600, 120_000_000).unwrap();
        let h = event_headers(&ev, "abc", t).unwrap();
        assert_eq!(h[EVENT_ID], "abc");
        assert_eq!(h[EVENT_TIME], "2026-01-01 00:00:00.12 +0000 UTC");
        // The same event in CloudEvents binary mode.
        assert_eq!(h[CE_SPECVERSION], "1.0");
        assert_eq!(h[CE_ID], "abc");
        assert_eq!(h[CE_SOURCE], "kafkatriggers.kubeless.io");
        assert_eq!(h[CE_TYPE], "io.kubeless.kafkatriggers");
        assert_eq!(h[CE_TIME], "2026-01-01T00:00:00.120Z");
        assert_eq!(h[EVENT_TYPE], APPLICATION_JSON);
        assert_eq!(h[EVENT_NAMESPACE], "kafkatriggers.kubeless.io");
        assert_eq!(h[CONTENT_TYPE], APPLICATION_JSON);
        assert_eq!(h["event-topic"], "orders");
    }

    #[test]
    fn headers_for_text_with_event_type_override() {
        let ev = Event::new("natstriggers.kubeless.io")
            .with_body("plain words")
            .with_content_type("text/plain")
            .with_event_type("com.example.thing");
        let h = event_headers(&ev, "id", chrono::Utc::now()).unwrap();
        assert_eq!(h[CONTENT_TYPE], "text/plain");
        assert_eq!(h[EVENT_TYPE], "com.example.thing");
    }

    #[test]
    fn headers_for_get_have_no_content_type() {
        let ev = Event::new("cronjobtrigger.kubeless.io");
        let h = event_headers(&ev, "id", chrono::Utc::now()).unwrap();
        assert!(!h.contains_key(CONTENT_TYPE));
        assert_eq!(h[EVENT_TYPE], FORM_URLENCODED);
    }

    #[test]
    fn extra_headers_cannot_override_kubeless_ones() {
        let ev =
            Event::new("ns.kubeless.io").with_header(EVENT_ID, HeaderValue::from_static("spoofed"));
        let h = event_headers(&ev, "real", chrono::Utc::now()).unwrap();
        assert_eq!(h.get_all(EVENT_ID).iter().count(), 1);
        assert_eq!(h[EVENT_ID], "real");
    }

    #[test]
    fn invalid_header_values_are_errors() {
        let ev = Event::new("bad\nnamespace");
        assert!(matches!(
            event_headers(&ev, "id", chrono::Utc::now()),
            Err(HeaderError::InvalidValue {
                name: "event-namespace",
                ..
            })
        ));
    }

    #[test]
    fn event_ids_are_random_alphanumerics() {
        let a = new_event_id();
        let b = new_event_id();
        assert_eq!(a.len(), EVENT_ID_LEN);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

    #[test]
    fn ce_time_format_matches_chrono() {
        use chrono::TimeZone;
        for (secs, nanos) in [
            (0i64, 0u32),
            (1_767_323_045, 678_000_000),
            (253_402_300_799, 999_999_999),
            (951_782_400, 5_000_000),
        ] {
            let t = chrono::Utc.timestamp_opt(secs, nanos).unwrap();
            assert_eq!(
                format_ce_time(t),
                t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
        }
    }

    #[test]
    fn event_time_is_what_go_time_string_prints_in_utc() {
        use chrono::TimeZone;
        let at = |secs, nanos| format_event_time(chrono::Utc.timestamp_opt(secs, nanos).unwrap());
        assert_eq!(
            at(1_767_323_045, 678_900_000),
            "2026-01-02 03:04:05.6789 +0000 UTC"
        );
        assert_eq!(at(1_767_323_045, 0), "2026-01-02 03:04:05 +0000 UTC");
        assert_eq!(
            at(1_767_323_045, 1),
            "2026-01-02 03:04:05.000000001 +0000 UTC"
        );
        assert_eq!(at(0, 0), "1970-01-01 00:00:00 +0000 UTC");
        let now = event_time_now();
        assert!(now.ends_with(" +0000 UTC"), "{now}");
        assert!(
            chrono::NaiveDateTime::parse_from_str(
                now.trim_end_matches(" +0000 UTC"),
                "%Y-%m-%d %H:%M:%S%.f"
            )
            .is_ok(),
            "{now}"
        );
    }

    #[test]
    fn ce_type_is_reverse_dns_of_the_namespace() {
        assert_eq!(
            ce_type("cronjobtriggers.kubeless.io"),
            "io.kubeless.cronjobtriggers"
        );
        assert_eq!(ce_type("custom"), "io.kubeless.custom");
    }

    fn assert_traceparent_shape(tp: &str) {
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!(parts[0], "00");
        assert_eq!(parts[1].len(), 32);
        assert_eq!(parts[2].len(), 16);
        assert!(parts[1].chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(parts[1], "0".repeat(32));
        assert_ne!(parts[2], "0".repeat(16));
    }

    #[test]
    fn traceparent_generated_without_context() {
        let mut h = HeaderMap::new();
        assert!(inject_traceparent(&mut h, None));
        assert_traceparent_shape(h[TRACEPARENT].to_str().unwrap());
        assert_ne!(new_traceparent(), new_traceparent());
    }

    #[test]
    fn traceparent_continues_an_explicit_parent() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(sc);
        let mut h = HeaderMap::new();
        assert!(!inject_traceparent(&mut h, Some(&cx)));
        assert_eq!(
            h[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
    }
}
