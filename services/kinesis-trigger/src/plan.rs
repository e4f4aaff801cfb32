//! The pure part of reconciling: KinesisTriggers + Functions -> one stream reader per trigger
//! (what it reads, where it delivers, with which policy) or the reason it cannot run. No I/O,
//! so every rule is unit-tested.

use std::sync::Arc;

use kube::ResourceExt;
use kubeless_api::conditions::reasons;
use kubeless_api::triggers::StartingPosition;
use kubeless_api::{DeliveryPolicy, Function, KinesisTrigger};
use kubeless_invoke::FunctionTarget;
use kubeless_trigger::{PlannedUnit, Problem};

/// Everything a trigger's reader needs; a change of any field restarts the reader (it resumes
/// from the checkpoints, so a restart loses nothing).
#[derive(Debug, Clone, PartialEq)]
pub struct ReaderConfig {
    pub namespace: String,
    pub trigger: String,
    /// UID of the trigger: owner of the checkpoint ConfigMap.
    pub trigger_uid: String,
    pub function: String,
    pub stream: String,
    /// `Some`: only this shard (Kubeless's behaviour); `None`: every shard, following resharding.
    pub shard: Option<String>,
    pub region: String,
    pub endpoint: Option<String>,
    /// Secret with the AWS keys; `None`: the AWS environment variables of the process.
    pub secret: Option<String>,
    pub dead_letter_stream: Option<String>,
    pub policy: DeliveryPolicy,
    pub starting: StartingPosition,
    /// Milliseconds since the epoch, for AT_TIMESTAMP.
    pub starting_timestamp_ms: Option<i64>,
    pub target: FunctionTarget,
}

impl ReaderConfig {
    /// `<namespace>/<trigger>`, the metric and log label.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.trigger)
    }
}

/// The desired readers, one per runnable trigger keyed by `<namespace>/<trigger>`, and what
/// each trigger's status should say.
pub type Plan = kubeless_trigger::Plan<String, ReaderConfig>;

/// Default region when the trigger names none (Kubeless required the field).
pub const DEFAULT_REGION: &str = "us-east-1";

/// Name of the ConfigMap holding a trigger's checkpoints.
pub fn checkpoint_configmap_name(trigger: &str) -> String {
    format!("{trigger}-kinesis-checkpoints")
}

fn non_empty(s: Option<&String>) -> Option<String> {
    s.map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn plan_one(t: &KinesisTrigger, functions: &[Arc<Function>]) -> Result<ReaderConfig, Problem> {
    let namespace = t.namespace().unwrap_or_default();
    let invalid = Problem::invalid_spec;
    let stream = t.spec.stream.trim();
    if stream.is_empty() {
        return Err(invalid("stream is empty".into()));
    }
    if t.spec.function_name.trim().is_empty() {
        return Err(invalid("function-name is empty".into()));
    }
    let policy = t
        .spec
        .delivery_policy()
        .map_err(|e| invalid(e.to_string()))?;
    let starting = t.spec.starting();
    let starting_timestamp_ms = t
        .spec
        .starting_timestamp
        .as_ref()
        .map(|ts| ts.0.as_millisecond());
    if starting == StartingPosition::AtTimestamp && starting_timestamp_ms.is_none() {
        return Err(invalid(
            "startingPosition AT_TIMESTAMP needs startingTimestamp".into(),
        ));
    }
    let endpoint = non_empty(t.spec.endpoint.as_ref());
    if let Some(ep) = &endpoint
        && !(ep.starts_with("http://") || ep.starts_with("https://"))
    {
        return Err(invalid(format!(
            "endpoint {ep:?} must start with http:// or https://"
        )));
    }
    let dead_letter_stream = non_empty(t.spec.dead_letter_stream.as_ref());
    if dead_letter_stream.as_deref() == Some(stream) {
        return Err(invalid(
            "deadLetterStream must differ from stream (failed records would loop)".into(),
        ));
    }
    let function = functions.iter().find(|f| {
        f.metadata.deletion_timestamp.is_none()
            && f.namespace().as_deref() == Some(namespace.as_str())
            && f.name_any() == t.spec.function_name
    });
    let Some(function) = function else {
        return Err(Problem {
            reason: reasons::FUNCTION_NOT_FOUND,
            message: format!(
                "function {} not found in namespace {namespace}",
                t.spec.function_name
            ),
        });
    };
    Ok(ReaderConfig {
        namespace: namespace.clone(),
        trigger: t.name_any(),
        trigger_uid: t.uid().unwrap_or_default(),
        function: function.name_any(),
        stream: stream.to_string(),
        shard: non_empty(t.spec.shard.as_ref()),
        region: non_empty(t.spec.aws_region.as_ref()).unwrap_or_else(|| DEFAULT_REGION.into()),
        endpoint,
        secret: non_empty(t.spec.secret.as_ref()),
        dead_letter_stream,
        policy,
        starting,
        starting_timestamp_ms,
        target: FunctionTarget::for_function(function, &namespace),
    })
}

/// Desired readers and statuses of every live trigger. Triggers being deleted are left out:
/// their readers stop (and flush their checkpoints).
pub fn plan(triggers: &[Arc<KinesisTrigger>], functions: &[Arc<Function>]) -> Plan {
    Plan::build(triggers, |t, _, _| {
        let config = plan_one(t, functions)?;
        Ok(vec![PlannedUnit {
            key: config.label(),
            function: config.function.clone(),
            config,
        }])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::function::DEFAULT_PORT_NAME;
    use serde_json::json;

    fn trigger(spec: serde_json::Value) -> Arc<KinesisTrigger> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kubeless.io/v1beta1", "kind": "KinesisTrigger",
                "metadata": {"name": "t", "namespace": "ns", "uid": "u-1", "generation": 3},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    fn function(name: &str, ns: &str) -> Arc<Function> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"runtime": "python3.11", "handler": "h.f", "timeout": "7", "function": ""}
            }))
            .unwrap(),
        )
    }

    fn one(spec: serde_json::Value) -> Result<ReaderConfig, Problem> {
        let p = plan(
            &[trigger(spec)],
            &[function("f", "ns"), function("g", "other")],
        );
        let tp = &p.triggers[&("ns".to_string(), "t".to_string())];
        match &tp.problem {
            Some(problem) => Err(problem.clone()),
            None => Ok(p.units["ns/t"].clone()),
        }
    }

    #[test]
    fn kubeless_fields_and_defaults() {
        let r = one(json!({"function-name": "f", "stream": "s", "aws-region": "eu-west-1",
            "secret": "creds", "shard": "shardId-000000000001", "endpoint": "http://127.0.0.1:5000"}))
        .unwrap();
        assert_eq!(r.stream, "s");
        assert_eq!(r.region, "eu-west-1");
        assert_eq!(r.secret.as_deref(), Some("creds"));
        assert_eq!(r.shard.as_deref(), Some("shardId-000000000001"));
        assert_eq!(r.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(r.starting, StartingPosition::Latest);
        assert_eq!(r.policy, DeliveryPolicy::default());
        assert_eq!(r.trigger_uid, "u-1");
        assert_eq!(r.target.timeout, std::time::Duration::from_secs(7));
        assert_eq!(r.target.port_name.as_deref(), Some(DEFAULT_PORT_NAME));
        assert_eq!(r.label(), "ns/t");

        // Empty shard means every shard; missing region gets the default.
        let r = one(json!({"function-name": "f", "stream": "s", "shard": ""})).unwrap();
        assert_eq!(r.shard, None);
        assert_eq!(r.region, DEFAULT_REGION);
        assert_eq!(r.secret, None);
    }

    #[test]
    fn problems() {
        let e = one(json!({"function-name": "g", "stream": "s"})).unwrap_err();
        assert_eq!(e.reason, reasons::FUNCTION_NOT_FOUND, "other namespace");
        let e = one(json!({"function-name": "f", "stream": " "})).unwrap_err();
        assert_eq!(e.reason, reasons::INVALID_SPEC);
        let e =
            one(json!({"function-name": "f", "stream": "s", "startingPosition": "AT_TIMESTAMP"}))
                .unwrap_err();
        assert!(e.message.contains("startingTimestamp"), "{e:?}");
        let e =
            one(json!({"function-name": "f", "stream": "s", "deadLetterStream": "s"})).unwrap_err();
        assert!(e.message.contains("deadLetterStream"));
        let e = one(json!({"function-name": "f", "stream": "s", "endpoint": "localhost:4567"}))
            .unwrap_err();
        assert!(e.message.contains("endpoint"));
        let e = one(json!({"function-name": "f", "stream": "s", "retry": {"maxAttempts": 0}}))
            .unwrap_err();
        assert_eq!(e.reason, reasons::INVALID_SPEC);
    }

    #[test]
    fn starting_position_and_dead_letters() {
        let r = one(
            json!({"function-name": "f", "stream": "s", "startingPosition": "AT_TIMESTAMP",
            "startingTimestamp": "2026-01-02T03:04:05Z", "deadLetterStream": "dlq",
            "retry": {"maxAttempts": 2, "initialBackoff": "10ms"}}),
        )
        .unwrap();
        assert_eq!(r.starting, StartingPosition::AtTimestamp);
        assert_eq!(r.starting_timestamp_ms, Some(1_767_323_045_000));
        assert_eq!(r.dead_letter_stream.as_deref(), Some("dlq"));
        assert_eq!(r.policy.max_attempts, 2);
    }

    #[test]
    fn deleted_triggers_are_left_out() {
        let mut t = (*trigger(json!({"function-name": "f", "stream": "s"}))).clone();
        t.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        let p = plan(&[Arc::new(t)], &[function("f", "ns")]);
        assert!(p.units.is_empty() && p.triggers.is_empty());
        assert_eq!(checkpoint_configmap_name("t"), "t-kinesis-checkpoints");
    }
}
