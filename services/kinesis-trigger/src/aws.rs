//! The Kinesis client of one trigger: credentials from the trigger's Secret, region, endpoint
//! override; and ListShards into [`ShardInfo`]s.

use aws_sdk_kinesis::Client as KinesisClient;
use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_kinesis::error::{DisplayErrorContext, SdkError};
use aws_smithy_http_client::tls;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use kubeless_api::conditions::reasons;

use crate::plan::ReaderConfig;
use crate::shards::ShardInfo;

/// Secret keys, as Kubeless named them.
pub const ACCESS_KEY_ID: &str = "aws_access_key_id";
pub const SECRET_ACCESS_KEY: &str = "aws_secret_access_key";

/// Why a trigger cannot read its stream; each maps to a condition reason.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    #[error("secret {name}: {message}")]
    Secret { name: String, message: String },
    #[error(
        "no AWS credentials: set the trigger's secret (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the service)"
    )]
    NoCredentials,
    #[error("stream {0} not found")]
    StreamNotFound(String),
    #[error("Kinesis unavailable: {0}")]
    Unavailable(String),
    #[error("checkpoint ConfigMap {name}")]
    Checkpoints {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ReaderError {
    /// The condition reason (and metric label) of this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Secret { .. } | Self::NoCredentials => reasons::SECRET_NOT_FOUND,
            Self::StreamNotFound(_) => reasons::SOURCE_NOT_FOUND,
            Self::Unavailable(_) => reasons::BROKER_UNAVAILABLE,
            Self::Checkpoints { .. } => reasons::APPLY_FAILED,
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads the keys from the Secret (or, without one, from the process environment).
pub async fn credentials(
    client: &Client,
    namespace: &str,
    secret: Option<&str>,
) -> Result<Credentials, ReaderError> {
    let Some(name) = secret else {
        return match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(key)) => Ok(Credentials::new(
                id,
                key,
                env("AWS_SESSION_TOKEN"),
                None,
                "environment",
            )),
            _ => Err(ReaderError::NoCredentials),
        };
    };
    let err = |message: String| ReaderError::Secret {
        name: name.to_string(),
        message,
    };
    let s = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| err(format!("reading it failed: {e}")))?
        .ok_or_else(|| err("not found".into()))?;
    let data = s.data.unwrap_or_default();
    let field = |k: &str| {
        data.get(k)
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| err(format!("has no key {k}")))
    };
    Ok(Credentials::new(
        field(ACCESS_KEY_ID)?,
        field(SECRET_ACCESS_KEY)?,
        None,
        None,
        "kubernetes-secret",
    ))
}

/// A client for the trigger's region and endpoint. TLS through rustls with ring (the SDK's
/// default would pull in aws-lc-rs).
pub fn client(config: &ReaderConfig, credentials: Credentials) -> KinesisClient {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut b = aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .credentials_provider(credentials)
        .http_client(http);
    if let Some(ep) = &config.endpoint {
        b = b.endpoint_url(ep);
    }
    KinesisClient::from_conf(b.build())
}

/// A one-line description of an SDK error with its causes.
pub fn describe<E: std::error::Error + 'static>(e: &SdkError<E>) -> String {
    DisplayErrorContext(e).to_string()
}

/// Every shard of the stream (all pages).
pub async fn list_shards(
    kinesis: &KinesisClient,
    stream: &str,
) -> Result<Vec<ShardInfo>, ReaderError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    // Bounded: a stream has at most a few thousand shards, 1000 per page.
    for _ in 0..100 {
        let req = match &token {
            Some(t) => kinesis.list_shards().next_token(t),
            None => kinesis.list_shards().stream_name(stream),
        };
        let page = req.send().await.map_err(|e| {
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception())
            {
                ReaderError::StreamNotFound(stream.to_string())
            } else {
                ReaderError::Unavailable(describe(&e))
            }
        })?;
        out.extend(page.shards().iter().map(|s| {
            let ending = s
                .sequence_number_range()
                .and_then(|r| r.ending_sequence_number())
                .map(str::to_string);
            ShardInfo {
                id: s.shard_id().to_string(),
                parent: s.parent_shard_id().map(str::to_string),
                adjacent_parent: s.adjacent_parent_shard_id().map(str::to_string),
                closed: ending.is_some(),
                ending,
            }
        }));
        match page.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => break,
        }
    }
    Ok(out)
}
