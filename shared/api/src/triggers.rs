//! The trigger kinds: HTTPTrigger, CronJobTrigger, KafkaTrigger, NATSTrigger, KinesisTrigger, and
//! RedisTrigger (new: the worked example of a custom trigger, docs/custom-trigger.md).
//!
//! Kubeless field names are kept verbatim (kebab-case for HTTP, Cron and Kinesis; camelCase
//! `functionSelector` for Kafka and NATS). Fields added by us are camelCase and optional, so
//! Kubeless manifests deserialize and serialize back unchanged.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{
    Condition, Error,
    delivery::{DeliveryPolicy, RetryPolicy, parse_duration},
};

// ---------------------------------------------------------------- HTTPTrigger

/// Which ingress controller serves an HTTPTrigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gateway {
    /// ingress-nginx (default).
    Nginx,
    /// Traefik.
    Traefik,
    /// Kong.
    Kong,
}

/// Exposes one function over HTTP through an Ingress.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "HTTPTrigger",
    root = "HttpTrigger",
    plural = "httptriggers",
    singular = "httptrigger",
    namespaced,
    status = "HttpTriggerStatus",
    derive = "PartialEq",
    shortname = "httptrig",
    category = "kubeless",
    doc = "Exposes a Kubeless function over HTTP through an Ingress.",
    printcolumn(name = "Function", type_ = "string", json_path = ".spec.function-name"),
    printcolumn(name = "Host", type_ = "string", json_path = ".spec.host-name"),
    printcolumn(name = "Path", type_ = "string", json_path = ".spec.path"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct HttpTriggerSpec {
    /// Name of the Function (same namespace) that receives the requests.
    #[serde(rename = "function-name")]
    #[schemars(regex(pattern = crate::constraints::DNS1035_LABEL_PATTERN), length(min = 1, max = 63))]
    pub function_name: String,
    /// Host of the Ingress rule. Empty: `<function>.<ingress-ip>.nip.io` with nginx.
    #[serde(rename = "host-name", default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::HOST_PATTERN), length(max = 253))]
    pub host_name: Option<String>,
    /// Request a certificate through ACME (kubernetes.io/tls-acme); the secret is
    /// `<trigger>-tls`. Exclusive with tls-secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
    /// Name of an existing TLS Secret for the host.
    #[serde(
        rename = "tls-secret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = crate::constraints::OPTIONAL_SUBDOMAIN_PATTERN), length(max = 253))]
    pub tls_secret: Option<String>,
    /// URL path routed to the function (without the leading slash). Default: root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Secret with htpasswd-style `auth` data for basic authentication (nginx, traefik).
    #[serde(
        rename = "basic-auth-secret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = crate::constraints::OPTIONAL_SUBDOMAIN_PATTERN), length(max = 253))]
    pub basic_auth_secret: Option<String>,
    /// Ingress controller: nginx (default), traefik or kong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::GATEWAY_PATTERN))]
    pub gateway: Option<String>,
    /// Enable CORS annotations on the Ingress.
    #[serde(
        rename = "cors-enable",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cors_enable: Option<bool>,
}

/// Observed state of an HTTPTrigger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpTriggerStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether the Ingress exists and routes to the function.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// External URL of the function, e.g. `https://hello.example.com/path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl HttpTriggerSpec {
    /// The gateway; absent or empty means nginx. Unknown values are returned as `Err(value)`.
    pub fn gateway_kind(&self) -> Result<Gateway, String> {
        match self.gateway.as_deref().map(str::trim).unwrap_or("") {
            "" | "nginx" => Ok(Gateway::Nginx),
            "traefik" => Ok(Gateway::Traefik),
            "kong" => Ok(Gateway::Kong),
            other => Err(other.to_string()),
        }
    }
}

// ------------------------------------------------------------- CronJobTrigger

/// What to do when a scheduled call is due while the previous one still runs
/// (batch/v1 CronJob concurrencyPolicy).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Run concurrently (default, as in Kubeless).
    #[default]
    Allow,
    /// Skip the new run.
    Forbid,
    /// Cancel the running call and start the new one.
    Replace,
}

impl ConcurrencyPolicy {
    /// The value as written in a CronJob.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "Allow",
            Self::Forbid => "Forbid",
            Self::Replace => "Replace",
        }
    }
}

/// Default `successfulJobsHistoryLimit` (Kubeless used 3).
pub const DEFAULT_SUCCESSFUL_JOBS_HISTORY: i32 = 3;
/// Default `failedJobsHistoryLimit` (Kubeless used 1).
pub const DEFAULT_FAILED_JOBS_HISTORY: i32 = 1;

/// Calls one function on a cron schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "CronJobTrigger",
    plural = "cronjobtriggers",
    singular = "cronjobtrigger",
    namespaced,
    status = "CronJobTriggerStatus",
    derive = "PartialEq",
    shortname = "crontrig",
    category = "kubeless",
    doc = "Calls a Kubeless function on a cron schedule.",
    printcolumn(name = "Function", type_ = "string", json_path = ".spec.function-name"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Last Schedule",
        type_ = "date",
        json_path = ".status.lastScheduleTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct CronJobTriggerSpec {
    /// Cron schedule in the five-field crontab format, e.g. `*/5 * * * *`, or an alias such as
    /// `@hourly`. Six fields (leading seconds) only run in the controller's scheduler mode.
    #[schemars(regex(pattern = crate::constraints::CRON_SCHEDULE_PATTERN))]
    pub schedule: String,
    /// Name of the Function (same namespace) to call.
    #[serde(rename = "function-name")]
    #[schemars(regex(pattern = crate::constraints::DNS1035_LABEL_PATTERN), length(min = 1, max = 63))]
    pub function_name: String,
    /// JSON sent as the request body (POST). Absent or null: the call is a GET without body.
    #[serde(
        default,
        deserialize_with = "present_value",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub payload: Option<Value>,
    /// Retry policy of a failed call within one scheduled run (new; default 5 attempts,
    /// 1s..60s exponential backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Allow (default), Forbid or Replace runs that overlap (new).
    #[serde(
        rename = "concurrencyPolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// Finished successful runs to keep (new; default 3).
    #[serde(
        rename = "successfulJobsHistoryLimit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = crate::constraints::INT32_MAX))]
    pub successful_jobs_history_limit: Option<i32>,
    /// Failed runs to keep (new; default 1).
    #[serde(
        rename = "failedJobsHistoryLimit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = crate::constraints::INT32_MAX))]
    pub failed_jobs_history_limit: Option<i32>,
}

/// Observed state of a CronJobTrigger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobTriggerStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether the CronJob exists with a valid schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// When the function was last called by schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// Outcome of the last finished run: Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
}

impl CronJobTriggerSpec {
    /// Concurrency policy with the default applied.
    pub fn concurrency(&self) -> ConcurrencyPolicy {
        self.concurrency_policy.unwrap_or_default()
    }

    /// `successfulJobsHistoryLimit` with the default applied.
    pub fn successful_history(&self) -> i32 {
        self.successful_jobs_history_limit
            .unwrap_or(DEFAULT_SUCCESSFUL_JOBS_HISTORY)
    }

    /// `failedJobsHistoryLimit` with the default applied.
    pub fn failed_history(&self) -> i32 {
        self.failed_jobs_history_limit
            .unwrap_or(DEFAULT_FAILED_JOBS_HISTORY)
    }

    /// Retry policy with defaults applied.
    pub fn delivery_policy(&self) -> Result<DeliveryPolicy, Error> {
        RetryPolicy::resolve(self.retry.as_ref())
    }
}

/// Keeps an explicit `null` as `Some(Value::Null)` so `payload: null` round-trips; an absent
/// field stays `None` through `#[serde(default)]`.
fn present_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

// --------------------------------------------------------------- KafkaTrigger

/// Delivers each record of a Kafka topic to every function the selector matches.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "KafkaTrigger",
    plural = "kafkatriggers",
    singular = "kafkatrigger",
    namespaced,
    status = "KafkaTriggerStatus",
    derive = "PartialEq",
    shortname = "kafkatrig",
    category = "kubeless",
    doc = "Delivers Kafka records to the Kubeless functions a label selector matches.",
    printcolumn(
        name = "Selector",
        type_ = "string",
        json_path = ".spec.functionSelector.matchLabels"
    ),
    printcolumn(name = "Topic", type_ = "string", json_path = ".spec.topic"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTriggerSpec {
    /// Topic to consume.
    pub topic: String,
    /// Functions (same namespace) that receive every record; each gets its own consumer group
    /// `<ns>_<trigger>_<function>_<topic>`.
    pub function_selector: LabelSelector,
    /// Retry policy before a record goes to the dead-letter topic (new; default 5 attempts,
    /// 1s..60s exponential backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Topic that receives records whose delivery failed after all retries (new). Without it
    /// such records are logged, counted and skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
}

/// Observed state of a KafkaTrigger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTriggerStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether consumers run for the selected functions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Names of the functions currently selected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
}

impl KafkaTriggerSpec {
    /// Retry policy with defaults applied.
    pub fn delivery_policy(&self) -> Result<DeliveryPolicy, Error> {
        RetryPolicy::resolve(self.retry.as_ref())
    }
}

// ---------------------------------------------------------------- NATSTrigger

/// Default JetStream ack wait.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);
/// Default number of messages delivered concurrently per function.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 1;

/// JetStream mode of a NATSTrigger (new): durable consumer with acknowledgements instead of a
/// core NATS queue subscription.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JetStreamSpec {
    /// Use JetStream (default false: core NATS queue group, as Kubeless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Stream holding the subject. Default: looked up by subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// Durable consumer name prefix. Default: the Kubeless queue-group name per function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable: Option<String>,
    /// How long the server waits for an ack before redelivering, e.g. `30s` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::DURATION_PATTERN), length(max = crate::constraints::MAX_DURATION_LENGTH))]
    pub ack_wait: Option<String>,
}

impl JetStreamSpec {
    /// Whether JetStream mode is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(false)
    }

    /// Ack wait with the default applied.
    pub fn ack_wait_duration(&self) -> Result<Duration, Error> {
        match &self.ack_wait {
            Some(s) => parse_duration("jetStream.ackWait", s),
            None => Ok(DEFAULT_ACK_WAIT),
        }
    }
}

/// Delivers each message of a NATS subject to every function the selector matches.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "NATSTrigger",
    root = "NatsTrigger",
    plural = "natstriggers",
    singular = "natstrigger",
    namespaced,
    status = "NatsTriggerStatus",
    derive = "PartialEq",
    shortname = "natstrig",
    category = "kubeless",
    doc = "Delivers NATS messages to the Kubeless functions a label selector matches.",
    printcolumn(
        name = "Selector",
        type_ = "string",
        json_path = ".spec.functionSelector.matchLabels"
    ),
    printcolumn(name = "Topic", type_ = "string", json_path = ".spec.topic"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NatsTriggerSpec {
    /// Subject to subscribe to (wildcards allowed).
    pub topic: String,
    /// Functions (same namespace) that receive every message; each gets its own queue group
    /// `<ns>_<trigger>_<function>_<topic>`.
    pub function_selector: LabelSelector,
    /// Retry policy before a message goes to the dead-letter subject (new; default 5 attempts,
    /// 1s..60s exponential backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Subject that receives messages whose delivery failed after all retries (new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_subject: Option<String>,
    /// JetStream mode (new): at-least-once delivery through a durable consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jet_stream: Option<JetStreamSpec>,
    /// Messages delivered concurrently to each function (new; default 1, which keeps order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::constraints::INT32_MAX), extend("format" = "int32"))]
    pub max_in_flight: Option<u32>,
}

/// Observed state of a NATSTrigger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NatsTriggerStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether subscriptions run for the selected functions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Names of the functions currently selected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
}

impl NatsTriggerSpec {
    /// Retry policy with defaults applied.
    pub fn delivery_policy(&self) -> Result<DeliveryPolicy, Error> {
        RetryPolicy::resolve(self.retry.as_ref())
    }

    /// `maxInFlight` with the default applied (at least 1).
    pub fn max_in_flight(&self) -> u32 {
        self.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT).max(1)
    }

    /// Whether JetStream mode is on.
    pub fn jet_stream_enabled(&self) -> bool {
        self.jet_stream
            .as_ref()
            .is_some_and(JetStreamSpec::is_enabled)
    }
}

// ------------------------------------------------------------- KinesisTrigger

/// Where a Kinesis shard is read from when no checkpoint exists yet (new).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StartingPosition {
    /// Only records written after the trigger starts (default, as Kubeless).
    #[default]
    #[serde(rename = "LATEST")]
    Latest,
    /// The oldest record still in the shard.
    #[serde(rename = "TRIM_HORIZON")]
    TrimHorizon,
    /// Records from `startingTimestamp` on.
    #[serde(rename = "AT_TIMESTAMP")]
    AtTimestamp,
}

impl StartingPosition {
    /// The Kinesis ShardIteratorType value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Latest => "LATEST",
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::AtTimestamp => "AT_TIMESTAMP",
        }
    }
}

/// Delivers the records of a Kinesis stream to one function.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "KinesisTrigger",
    plural = "kinesistriggers",
    singular = "kinesistrigger",
    namespaced,
    status = "KinesisTriggerStatus",
    derive = "PartialEq",
    shortname = "kinesistrig",
    category = "kubeless",
    doc = "Delivers AWS Kinesis records to a Kubeless function.",
    printcolumn(name = "Function", type_ = "string", json_path = ".spec.function-name"),
    printcolumn(name = "Stream", type_ = "string", json_path = ".spec.stream"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct KinesisTriggerSpec {
    /// Name of the Function (same namespace) that receives the records.
    #[serde(rename = "function-name")]
    #[schemars(regex(pattern = crate::constraints::DNS1035_LABEL_PATTERN), length(min = 1, max = 63))]
    pub function_name: String,
    /// AWS region of the stream.
    #[serde(
        rename = "aws-region",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub aws_region: Option<String>,
    /// Secret with `aws_access_key_id` and `aws_secret_access_key`. Empty: the default AWS
    /// credential chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Name of the stream.
    pub stream: String,
    /// Shard to read. Kubeless read exactly this shard; empty means every shard (new), following
    /// resharding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Endpoint override, e.g. a local Kinesis emulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Retry policy before a record goes to the dead-letter stream (new; default 5 attempts,
    /// 1s..60s exponential backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Stream that receives records whose delivery failed after all retries (new).
    #[serde(
        rename = "deadLetterStream",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dead_letter_stream: Option<String>,
    /// Where to start reading a shard that has no checkpoint: LATEST (default), TRIM_HORIZON or
    /// AT_TIMESTAMP (new).
    #[serde(
        rename = "startingPosition",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub starting_position: Option<StartingPosition>,
    /// Timestamp for AT_TIMESTAMP, RFC 3339 (new).
    #[serde(
        rename = "startingTimestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub starting_timestamp: Option<Time>,
}

/// Observed state of a KinesisTrigger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KinesisTriggerStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether every shard has a running consumer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Shards currently being read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<String>,
}

impl KinesisTriggerSpec {
    /// Retry policy with defaults applied.
    pub fn delivery_policy(&self) -> Result<DeliveryPolicy, Error> {
        RetryPolicy::resolve(self.retry.as_ref())
    }

    /// Starting position with the default applied.
    pub fn starting(&self) -> StartingPosition {
        self.starting_position.unwrap_or_default()
    }
}

// --------------------------------------------------------------- RedisTrigger

/// Delivers the entries of a Redis stream to every function the selector matches (new; the
/// worked example of a trigger written on the trigger runtime, docs/custom-trigger.md).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "RedisTrigger",
    plural = "redistriggers",
    singular = "redistrigger",
    namespaced,
    status = "RedisTriggerStatus",
    derive = "PartialEq",
    shortname = "redistrig",
    category = "kubeless",
    doc = "Delivers Redis stream entries to the Kubeless functions a label selector matches.",
    printcolumn(
        name = "Selector",
        type_ = "string",
        json_path = ".spec.functionSelector.matchLabels"
    ),
    printcolumn(name = "Stream", type_ = "string", json_path = ".spec.stream"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RedisTriggerSpec {
    /// The Redis server, `redis://host:port[/db]` (`rediss://` is refused: the example trigger
    /// is built without TLS). There is no passwordSecret: a password in the URL
    /// (`redis://:PASSWORD@host`) works but anyone who can read the trigger can read it.
    #[schemars(regex(pattern = r"^redis://[^\s]+$"))]
    pub url: String,
    /// Stream to read (created empty when missing).
    #[schemars(length(min = 1))]
    pub stream: String,
    /// Functions (same namespace) that receive every entry; each reads in its own consumer
    /// group `<consumerGroup>_<function>`.
    pub function_selector: LabelSelector,
    /// Prefix of the consumer groups (default `<namespace>_<trigger>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group: Option<String>,
    /// Retry policy before an entry goes to the dead-letter stream (default 5 attempts,
    /// 1s..60s exponential backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Stream that receives entries whose delivery failed after all retries: the entry's fields
    /// plus `error`, `function`, `source-stream` and `source-id`. Unset: such entries are
    /// acknowledged and skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_stream: Option<String>,
}

/// Observed state of a RedisTrigger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisTriggerStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether a reader runs for every selected function.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Names of the functions currently selected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
}

impl RedisTriggerSpec {
    /// Retry policy with defaults applied.
    pub fn delivery_policy(&self) -> Result<DeliveryPolicy, Error> {
        RetryPolicy::resolve(self.retry.as_ref())
    }
}
