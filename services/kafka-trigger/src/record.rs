//! A consumed record, detached from librdkafka's buffers, and the event sent for it.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use kubeless_invoke::Event;
use rdkafka::Message;
use rdkafka::message::Headers;

/// `event-namespace` of every event (Kubeless's value).
pub const EVENT_NAMESPACE: &str = "kafkatriggers.kubeless.io";
/// Prefix of Kafka record headers passed to the function.
pub const KAFKA_HEADER_PREFIX: &str = "kafka-header-";

/// One record as delivery needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub payload: Option<Bytes>,
    /// Milliseconds since the epoch (create or log-append time), when the broker gave one.
    pub timestamp_ms: Option<i64>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl Record {
    /// Copies what delivery needs out of a consumed message.
    pub fn from_message<M: Message>(m: &M) -> Self {
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.map(Bytes::copy_from_slice)))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(Bytes::copy_from_slice),
            payload: m.payload().map(Bytes::copy_from_slice),
            timestamp_ms: m.timestamp().to_millis(),
            headers,
        }
    }

    /// The value of the first record header named `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_deref())
    }

    /// `event-key` value and whether it is base64: text keys are sent as they are, keys that
    /// are not valid header text (binary, control characters) as standard base64.
    pub fn key_header(&self) -> Option<(HeaderValue, bool)> {
        let key = self.key.as_ref()?;
        let text_ok = std::str::from_utf8(key)
            .is_ok_and(|s| s.chars().all(|c| c == '\t' || (' '..='~').contains(&c)));
        if text_ok && let Ok(v) = HeaderValue::from_bytes(key) {
            return Some((v, false));
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(key);
        HeaderValue::from_str(&encoded).ok().map(|v| (v, true))
    }

    /// The stable `event-id` of this record: `<topic>-<partition>-<offset>`. A redelivery after
    /// a restart carries the same id, so functions can deduplicate.
    pub fn event_id(&self) -> String {
        format!("{}-{}-{}", self.topic, self.partition, self.offset)
    }

    /// The event for the function: body = the record value, the Kubeless headers (added by
    /// the invoker), `event-topic`, `event-key` (+ `event-key-encoding: base64` for binary
    /// keys), `event-partition`, `event-offset`, `event-timestamp`, and every record header as
    /// `kafka-header-<name>` (headers whose name or value HTTP cannot carry are left out).
    pub fn to_event(&self) -> Event {
        let mut ev = Event::new(EVENT_NAMESPACE)
            .with_body(self.payload.clone().unwrap_or_default())
            .with_event_id(self.event_id());
        if let Some(ct) = self
            .header("content-type")
            .and_then(|v| std::str::from_utf8(v).ok())
        {
            ev = ev.with_content_type(ct);
        }
        let h = &mut ev.headers;
        if let Ok(v) = HeaderValue::from_str(&self.topic) {
            h.insert(HeaderName::from_static("event-topic"), v);
        }
        h.insert(
            HeaderName::from_static("event-partition"),
            HeaderValue::from(self.partition),
        );
        h.insert(
            HeaderName::from_static("event-offset"),
            HeaderValue::from(self.offset),
        );
        if let Some(ts) = self.timestamp_ms {
            h.insert(
                HeaderName::from_static("event-timestamp"),
                HeaderValue::from(ts),
            );
        }
        if let Some((v, b64)) = self.key_header() {
            h.insert(HeaderName::from_static("event-key"), v);
            if b64 {
                h.insert(
                    HeaderName::from_static("event-key-encoding"),
                    HeaderValue::from_static("base64"),
                );
            }
        }
        for (name, value) in &self.headers {
            let Some(value) = value else { continue };
            let full = format!("{KAFKA_HEADER_PREFIX}{}", name.to_ascii_lowercase());
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(full.as_bytes()),
                HeaderValue::from_bytes(value),
            ) {
                h.append(n, v);
            }
        }
        // A producer that traced its record: the call continues that trace.
        if let Some(tp) = self.header("traceparent") {
            ev = ev.with_parent(extract_parent(tp, self.header("tracestate")));
        }
        ev
    }
}

struct OneHeader<'a>(&'a [u8], Option<&'a [u8]>);

impl opentelemetry::propagation::Extractor for OneHeader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => std::str::from_utf8(self.0).ok(),
            "tracestate" => self.1.and_then(|v| std::str::from_utf8(v).ok()),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

fn extract_parent(traceparent: &[u8], tracestate: Option<&[u8]>) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|p| {
        p.extract(&OneHeader(traceparent, tracestate))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            topic: "orders".into(),
            partition: 3,
            offset: 42,
            key: Some(Bytes::from_static(b"user-7")),
            payload: Some(Bytes::from_static(br#"{"a":1}"#)),
            timestamp_ms: Some(1_700_000_000_123),
            headers: vec![
                ("Source".into(), Some(Bytes::from_static(b"web"))),
                ("bad name".into(), Some(Bytes::from_static(b"x"))),
                ("nullvalue".into(), None),
            ],
        }
    }

    #[test]
    fn event_carries_record_coordinates_and_headers() {
        let ev = record().to_event();
        assert_eq!(ev.event_namespace, "kafkatriggers.kubeless.io");
        assert_eq!(ev.event_id.as_deref(), Some("orders-3-42"));
        assert_eq!(ev.body.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(ev.headers["event-topic"], "orders");
        assert_eq!(ev.headers["event-partition"], "3");
        assert_eq!(ev.headers["event-offset"], "42");
        assert_eq!(ev.headers["event-timestamp"], "1700000000123");
        assert_eq!(ev.headers["event-key"], "user-7");
        assert!(!ev.headers.contains_key("event-key-encoding"));
        assert_eq!(ev.headers["kafka-header-source"], "web");
        assert_eq!(ev.headers.len(), 6, "{:?}", ev.headers);
    }

    #[test]
    fn binary_keys_are_base64_and_missing_ones_absent() {
        let mut r = record();
        r.key = Some(Bytes::from_static(&[0, 159, 146, 150]));
        let ev = r.to_event();
        assert_eq!(ev.headers["event-key"], "AJ+Slg==");
        assert_eq!(ev.headers["event-key-encoding"], "base64");
        r.key = None;
        r.payload = None;
        let ev = r.to_event();
        assert!(!ev.headers.contains_key("event-key"));
        assert_eq!(
            ev.body.as_deref(),
            Some(&b""[..]),
            "a null value is an empty POST"
        );
    }

    #[test]
    fn content_type_header_is_used_for_non_json_bodies() {
        let mut r = record();
        r.payload = Some(Bytes::from_static(b"plain"));
        r.headers.push((
            "content-type".into(),
            Some(Bytes::from_static(b"text/plain")),
        ));
        let ev = r.to_event();
        assert_eq!(ev.content_type.as_deref(), Some("text/plain"));
    }
}
