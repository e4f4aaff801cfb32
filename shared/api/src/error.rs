//! Errors of the pure helpers and typed accessors in this crate.

/// Why a field of a Kubeless object could not be interpreted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `.spec.timeout` is not a positive whole number of seconds.
    #[error("invalid function timeout {value:?}: expected a positive whole number of seconds")]
    InvalidTimeout {
        /// The rejected value.
        value: String,
    },
    /// `.spec.runtime` is not `<id><version>`.
    #[error("invalid runtime {value:?}: expected <id><version>, e.g. python3.11")]
    InvalidRuntime {
        /// The rejected value.
        value: String,
    },
    /// `.spec.function-content-type` is not `text|base64|url` with known suffixes.
    #[error("invalid function content type {value:?}: {reason}")]
    InvalidContentType {
        /// The rejected value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `.spec.handler` is not `<module>.<function>`.
    #[error("invalid handler {value:?}: expected <module>.<function>")]
    InvalidHandler {
        /// The rejected value.
        value: String,
    },
    /// A duration field (retry backoff, ack wait) could not be parsed.
    #[error("invalid duration {value:?} in {field}: expected e.g. 500ms, 30s, 1m30s")]
    InvalidDuration {
        /// The field path.
        field: &'static str,
        /// The rejected value.
        value: String,
    },
    /// An idle period too short for the install's activity interval (scale to zero would take
    /// a busy function down between two activity writes).
    #[error(
        "{field} {idle_after:?} is shorter than 3 times the activity interval ({activity_interval:?}) at which the gateway and triggers record traffic; use {least:?} or more, or lower the install's activity interval"
    )]
    IdleShorterThanActivity {
        /// The field path (or flag).
        field: &'static str,
        /// The idle period asked for.
        idle_after: std::time::Duration,
        /// The install's activity interval.
        activity_interval: std::time::Duration,
        /// The shortest idle period accepted.
        least: std::time::Duration,
    },
    /// A number or duration is outside its accepted range.
    #[error("{field} {value} is out of range: expected {range}")]
    OutOfRange {
        /// The field path.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// The accepted range, in words.
        range: &'static str,
    },
    /// A numeric retry setting is out of range.
    #[error("invalid retry policy: {0}")]
    InvalidRetry(&'static str),
    /// An embedded template (`deployment`, `service`, `horizontalPodAutoscaler`) does not
    /// match its Kubernetes type even after missing required fields were filled in.
    #[error("invalid {what} template")]
    Template {
        /// Which template.
        what: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}
