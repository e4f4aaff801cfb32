//! Request bodies in the Kubernetes protobuf encoding
//! (`application/vnd.kubernetes.protobuf`), which kubectl and client-go send for
//! built-in kinds (`kubectl create secret|configmap|namespace|serviceaccount|role|...`).
//!
//! The body is the envelope the real server reads: the magic bytes `k8s\0`, then a
//! `runtime.Unknown` whose `raw` holds the object's own message. The messages come
//! from `k8s-pb`; each supported kind is mapped onto its `k8s-openapi` type and
//! serialized, so the rest of the server only ever sees JSON. Kinds not listed in
//! [`decode_object`] keep the 415 the server gave every protobuf body before.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1 as authn;
use k8s_openapi::api::authorization::v1 as authz;
use k8s_openapi::api::autoscaling::v1 as autoscaling;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::api::apps::v1 as pb_apps;
use k8s_pb::api::authentication::v1 as pb_authn;
use k8s_pb::api::authorization::v1 as pb_authz;
use k8s_pb::api::autoscaling::v1 as pb_autoscaling;
use k8s_pb::api::batch::v1 as pb_batch;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::api::rbac::v1 as pb_rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr as pb_intstr;
use prost::Message;
use serde_json::Value;

use crate::errors::ApiError;

mod workloads;

/// The four bytes that open every protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Whether a Content-Type header names the Kubernetes protobuf encoding.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|mt| mt.trim() == "application/vnd.kubernetes.protobuf")
}

#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf magic bytes")]
    Magic,
    #[error("the protobuf envelope could not be decoded: {0}")]
    Envelope(#[source] prost::DecodeError),
    #[error("the protobuf envelope has no object bytes")]
    NoRaw,
    #[error("the {kind} in the protobuf body could not be decoded: {source}")]
    Object {
        kind: String,
        #[source]
        source: prost::DecodeError,
    },
    #[error("the body is {found} but the request is for {expected}")]
    KindMismatch { expected: String, found: String },
    #[error("protobuf bodies are not supported for {0}; send JSON")]
    Unsupported(String),
    #[error("protobuf bodies with {0} are not supported; send JSON")]
    UnsupportedField(&'static str),
    #[error("protobuf bodies with a {0} volume are not supported; send JSON")]
    UnsupportedVolume(&'static str),
    #[error("the decoded object could not be converted to JSON: {0}")]
    Json(#[source] serde_json::Error),
}

impl ProtobufError {
    pub fn into_api_error(self, content_type: &str) -> ApiError {
        match self {
            ProtobufError::Unsupported(_) => ApiError::unsupported_media_type(content_type),
            e @ (ProtobufError::UnsupportedField(_) | ProtobufError::UnsupportedVolume(_)) => {
                let mut err = ApiError::unsupported_media_type(content_type);
                err.message = format!("{e}: {}", err.message);
                err
            }
            ProtobufError::Json(e) => ApiError::internal(e.to_string()),
            other => ApiError::bad_request(format!(
                "the body of the request could not be decoded: {other}"
            )),
        }
    }
}

/// Decodes a protobuf request body for `group/version` `kind` into the JSON object
/// the real server would have decoded from the equivalent JSON body.
pub fn decode_object(
    body: &[u8],
    group: &str,
    version: &str,
    kind: &str,
) -> Result<Value, ProtobufError> {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    // Check the kind first, so an unsupported kind is a 415 whatever its bytes.
    if !supports(group, version, kind) {
        return Err(ProtobufError::Unsupported(format!("{api_version} {kind}")));
    }
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::Magic)?;
    let unknown = Unknown::decode(rest).map_err(ProtobufError::Envelope)?;
    if let Some(tm) = &unknown.type_meta {
        let found_kind = tm.kind.as_deref().unwrap_or("");
        let found_av = tm.api_version.as_deref().unwrap_or("");
        // client-go leaves TypeMeta empty for typed objects; check it only when set.
        if (!found_kind.is_empty() && found_kind != kind)
            || (!found_av.is_empty() && found_av != api_version)
        {
            return Err(ProtobufError::KindMismatch {
                expected: format!("{api_version} {kind}"),
                found: format!("{found_av} {found_kind}"),
            });
        }
    }
    let raw = unknown.raw.ok_or(ProtobufError::NoRaw)?;
    let obj_err = |source| ProtobufError::Object {
        kind: kind.to_string(),
        source,
    };
    let json = match kind {
        "Secret" => to_json(secret(
            pb_core::Secret::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "ConfigMap" => to_json(config_map(
            pb_core::ConfigMap::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "Service" => to_json(service(
            pb_core::Service::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "Namespace" => to_json(namespace(
            pb_core::Namespace::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "ServiceAccount" => to_json(service_account(
            pb_core::ServiceAccount::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "Role" => to_json(role(
            pb_rbac::Role::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "ClusterRole" => to_json(cluster_role(
            pb_rbac::ClusterRole::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "RoleBinding" => to_json(role_binding(
            pb_rbac::RoleBinding::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "ClusterRoleBinding" => to_json(cluster_role_binding(
            pb_rbac::ClusterRoleBinding::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "SelfSubjectAccessReview" => to_json(self_subject_access_review(
            pb_authz::SelfSubjectAccessReview::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "SubjectAccessReview" => to_json(subject_access_review(
            pb_authz::SubjectAccessReview::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "HorizontalPodAutoscaler" => to_json(hpa_v1(
            pb_autoscaling::HorizontalPodAutoscaler::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "TokenRequest" => to_json(token_request(
            pb_authn::TokenRequest::decode(raw.as_slice()).map_err(obj_err)?,
        )),
        "Pod" => to_json(workloads::pod(
            pb_core::Pod::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        "Deployment" => to_json(workloads::deployment(
            pb_apps::Deployment::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        "ReplicaSet" => to_json(workloads::replica_set(
            pb_apps::ReplicaSet::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        "StatefulSet" => to_json(workloads::stateful_set(
            pb_apps::StatefulSet::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        "DaemonSet" => to_json(workloads::daemon_set(
            pb_apps::DaemonSet::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        "Job" => to_json(workloads::job(
            pb_batch::Job::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        "CronJob" => to_json(workloads::cron_job(
            pb_batch::CronJob::decode(raw.as_slice()).map_err(obj_err)?,
        )?),
        _ => return Err(ProtobufError::Unsupported(format!("{api_version} {kind}"))),
    }?;
    Ok(workloads::template_timestamps(json))
}

/// The kinds whose protobuf bodies are understood.
pub fn supports(group: &str, version: &str, kind: &str) -> bool {
    match (group, version) {
        ("", "v1") => matches!(
            kind,
            "Secret" | "ConfigMap" | "Namespace" | "ServiceAccount" | "Service" | "Pod"
        ),
        ("apps", "v1") => matches!(
            kind,
            "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet"
        ),
        ("batch", "v1") => matches!(kind, "Job" | "CronJob"),
        ("rbac.authorization.k8s.io", "v1") => matches!(
            kind,
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
        ),
        ("authorization.k8s.io", "v1") => {
            matches!(kind, "SelfSubjectAccessReview" | "SubjectAccessReview")
        }
        ("authentication.k8s.io", "v1") => kind == "TokenRequest",
        // `kubectl autoscale` sends v1 HPAs.
        ("autoscaling", "v1") => kind == "HorizontalPodAutoscaler",
        _ => false,
    }
}

fn to_json<T: serde::Serialize>(obj: T) -> Result<Value, ProtobufError> {
    serde_json::to_value(obj).map_err(ProtobufError::Json)
}

/// Empty repeated fields and maps are absent in JSON, as the real server renders them.
fn opt_vec<T, U>(v: Vec<T>, f: impl Fn(T) -> U) -> Option<Vec<U>> {
    if v.is_empty() {
        None
    } else {
        Some(v.into_iter().map(f).collect())
    }
}

fn opt_map<V, U>(m: BTreeMap<String, V>, f: impl Fn(V) -> U) -> Option<BTreeMap<String, U>> {
    if m.is_empty() {
        None
    } else {
        Some(m.into_iter().map(|(k, v)| (k, f(v))).collect())
    }
}

fn opt_str(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Only the fields a client may set on create or update; the server owns the rest
/// (uid, creationTimestamp, managedFields, ...) and fills them itself.
fn object_meta(m: Option<pb_meta::ObjectMeta>) -> meta::ObjectMeta {
    let Some(m) = m else {
        return meta::ObjectMeta::default();
    };
    meta::ObjectMeta {
        name: opt_str(m.name),
        generate_name: opt_str(m.generate_name),
        namespace: opt_str(m.namespace),
        uid: opt_str(m.uid),
        resource_version: opt_str(m.resource_version),
        labels: opt_map(m.labels, |v| v),
        annotations: opt_map(m.annotations, |v| v),
        owner_references: opt_vec(m.owner_references, |o| meta::OwnerReference {
            api_version: o.api_version.unwrap_or_default(),
            kind: o.kind.unwrap_or_default(),
            name: o.name.unwrap_or_default(),
            uid: o.uid.unwrap_or_default(),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        }),
        finalizers: opt_vec(m.finalizers, |f| f),
        ..Default::default()
    }
}

fn label_selector(s: pb_meta::LabelSelector) -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: opt_map(s.match_labels, |v| v),
        match_expressions: opt_vec(s.match_expressions, label_requirement),
    }
}

fn label_requirement(r: pb_meta::LabelSelectorRequirement) -> meta::LabelSelectorRequirement {
    meta::LabelSelectorRequirement {
        key: r.key.unwrap_or_default(),
        operator: r.operator.unwrap_or_default(),
        values: opt_vec(r.values, |v| v),
    }
}

fn secret(s: pb_core::Secret) -> core::Secret {
    core::Secret {
        metadata: object_meta(s.metadata),
        immutable: s.immutable,
        data: opt_map(s.data, ByteString),
        string_data: opt_map(s.string_data, |v| v),
        type_: opt_str(s.r#type),
    }
}

fn config_map(c: pb_core::ConfigMap) -> core::ConfigMap {
    core::ConfigMap {
        metadata: object_meta(c.metadata),
        immutable: c.immutable,
        data: opt_map(c.data, |v| v),
        binary_data: opt_map(c.binary_data, ByteString),
    }
}

fn namespace(n: pb_core::Namespace) -> core::Namespace {
    core::Namespace {
        metadata: object_meta(n.metadata),
        spec: n.spec.and_then(|s| {
            opt_vec(s.finalizers, |f| f).map(|finalizers| core::NamespaceSpec {
                finalizers: Some(finalizers),
            })
        }),
        // Status is the server's to set.
        status: None,
    }
}

/// Go writes unset non-pointer numbers as 0; JSON leaves them out.
fn opt_nonzero(n: Option<i32>) -> Option<i32> {
    n.filter(|n| *n != 0)
}

fn int_or_string(v: pb_intstr::IntOrString) -> Option<IntOrString> {
    // type 0 is Int, 1 is String, as intstr.Type.
    match v.r#type.unwrap_or(0) {
        1 => Some(IntOrString::String(v.str_val.unwrap_or_default())),
        _ => v.int_val.map(IntOrString::Int),
    }
}

/// Every ServiceSpec field; the status is the server's to set.
fn service(svc: pb_core::Service) -> core::Service {
    let spec = svc.spec.map(|s| core::ServiceSpec {
        ports: opt_vec(s.ports, |p| core::ServicePort {
            name: opt_str(p.name),
            protocol: opt_str(p.protocol),
            app_protocol: opt_str(p.app_protocol),
            port: p.port.unwrap_or_default(),
            target_port: p.target_port.and_then(int_or_string),
            node_port: opt_nonzero(p.node_port),
        }),
        selector: opt_map(s.selector, |v| v),
        cluster_ip: opt_str(s.cluster_ip),
        cluster_ips: opt_vec(s.cluster_ips, |v| v),
        type_: opt_str(s.r#type),
        external_ips: opt_vec(s.external_ips, |v| v),
        session_affinity: opt_str(s.session_affinity),
        load_balancer_ip: opt_str(s.load_balancer_ip),
        load_balancer_source_ranges: opt_vec(s.load_balancer_source_ranges, |v| v),
        external_name: opt_str(s.external_name),
        external_traffic_policy: opt_str(s.external_traffic_policy),
        health_check_node_port: opt_nonzero(s.health_check_node_port),
        // A plain bool with omitempty in Go: false is left out of JSON.
        publish_not_ready_addresses: s.publish_not_ready_addresses.filter(|b| *b),
        session_affinity_config: s
            .session_affinity_config
            .map(|c| core::SessionAffinityConfig {
                client_ip: c.client_ip.map(|ip| core::ClientIPConfig {
                    timeout_seconds: ip.timeout_seconds,
                }),
            }),
        ip_families: opt_vec(s.ip_families, |v| v),
        ip_family_policy: opt_str(s.ip_family_policy),
        allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
        load_balancer_class: opt_str(s.load_balancer_class),
        internal_traffic_policy: opt_str(s.internal_traffic_policy),
        traffic_distribution: opt_str(s.traffic_distribution),
    });
    core::Service {
        metadata: object_meta(svc.metadata),
        spec,
        status: None,
    }
}

fn service_account(sa: pb_core::ServiceAccount) -> core::ServiceAccount {
    core::ServiceAccount {
        metadata: object_meta(sa.metadata),
        automount_service_account_token: sa.automount_service_account_token,
        image_pull_secrets: opt_vec(sa.image_pull_secrets, |r| core::LocalObjectReference {
            name: r.name.unwrap_or_default(),
        }),
        secrets: opt_vec(sa.secrets, |r| core::ObjectReference {
            api_version: opt_str(r.api_version),
            field_path: opt_str(r.field_path),
            kind: opt_str(r.kind),
            name: opt_str(r.name),
            namespace: opt_str(r.namespace),
            resource_version: opt_str(r.resource_version),
            uid: opt_str(r.uid),
        }),
    }
}

/// The spec of an autoscaling/v1 HPA (a status in a create body is dropped by the server).
fn hpa_v1(h: pb_autoscaling::HorizontalPodAutoscaler) -> autoscaling::HorizontalPodAutoscaler {
    autoscaling::HorizontalPodAutoscaler {
        metadata: object_meta(h.metadata),
        spec: h.spec.map(|s| autoscaling::HorizontalPodAutoscalerSpec {
            scale_target_ref: s
                .scale_target_ref
                .map(|r| autoscaling::CrossVersionObjectReference {
                    api_version: opt_str(r.api_version),
                    kind: r.kind.unwrap_or_default(),
                    name: r.name.unwrap_or_default(),
                })
                .unwrap_or_default(),
            min_replicas: s.min_replicas,
            max_replicas: s.max_replicas.unwrap_or_default(),
            target_cpu_utilization_percentage: s.target_cpu_utilization_percentage,
        }),
        status: None,
    }
}

fn policy_rule(r: pb_rbac::PolicyRule) -> rbac::PolicyRule {
    rbac::PolicyRule {
        verbs: r.verbs,
        api_groups: opt_vec(r.api_groups, |v| v),
        resources: opt_vec(r.resources, |v| v),
        resource_names: opt_vec(r.resource_names, |v| v),
        non_resource_urls: opt_vec(r.non_resource_ur_ls, |v| v),
    }
}

fn subject(s: pb_rbac::Subject) -> rbac::Subject {
    rbac::Subject {
        kind: s.kind.unwrap_or_default(),
        api_group: opt_str(s.api_group),
        name: s.name.unwrap_or_default(),
        namespace: opt_str(s.namespace),
    }
}

fn role_ref(r: Option<pb_rbac::RoleRef>) -> rbac::RoleRef {
    let r = r.unwrap_or_default();
    rbac::RoleRef {
        api_group: r.api_group.unwrap_or_default(),
        kind: r.kind.unwrap_or_default(),
        name: r.name.unwrap_or_default(),
    }
}

fn role(r: pb_rbac::Role) -> rbac::Role {
    rbac::Role {
        metadata: object_meta(r.metadata),
        rules: opt_vec(r.rules, policy_rule),
    }
}

fn cluster_role(r: pb_rbac::ClusterRole) -> rbac::ClusterRole {
    rbac::ClusterRole {
        metadata: object_meta(r.metadata),
        rules: opt_vec(r.rules, policy_rule),
        aggregation_rule: r.aggregation_rule.map(|a| rbac::AggregationRule {
            cluster_role_selectors: opt_vec(a.cluster_role_selectors, label_selector),
        }),
    }
}

fn role_binding(b: pb_rbac::RoleBinding) -> rbac::RoleBinding {
    rbac::RoleBinding {
        metadata: object_meta(b.metadata),
        subjects: opt_vec(b.subjects, subject),
        role_ref: role_ref(b.role_ref),
    }
}

fn cluster_role_binding(b: pb_rbac::ClusterRoleBinding) -> rbac::ClusterRoleBinding {
    rbac::ClusterRoleBinding {
        metadata: object_meta(b.metadata),
        subjects: opt_vec(b.subjects, subject),
        role_ref: role_ref(b.role_ref),
    }
}

fn resource_attributes(a: pb_authz::ResourceAttributes) -> authz::ResourceAttributes {
    authz::ResourceAttributes {
        namespace: opt_str(a.namespace),
        verb: opt_str(a.verb),
        group: opt_str(a.group),
        version: opt_str(a.version),
        resource: opt_str(a.resource),
        subresource: opt_str(a.subresource),
        name: opt_str(a.name),
        field_selector: a.field_selector.map(|f| authz::FieldSelectorAttributes {
            raw_selector: opt_str(f.raw_selector),
            requirements: opt_vec(f.requirements, |r| meta::FieldSelectorRequirement {
                key: r.key.unwrap_or_default(),
                operator: r.operator.unwrap_or_default(),
                values: opt_vec(r.values, |v| v),
            }),
        }),
        label_selector: a.label_selector.map(|l| authz::LabelSelectorAttributes {
            raw_selector: opt_str(l.raw_selector),
            requirements: opt_vec(l.requirements, label_requirement),
        }),
    }
}

fn non_resource_attributes(a: pb_authz::NonResourceAttributes) -> authz::NonResourceAttributes {
    authz::NonResourceAttributes {
        path: opt_str(a.path),
        verb: opt_str(a.verb),
    }
}

/// `kubectl auth can-i` sends its review as protobuf.
fn self_subject_access_review(
    r: pb_authz::SelfSubjectAccessReview,
) -> authz::SelfSubjectAccessReview {
    let spec = r.spec.unwrap_or_default();
    authz::SelfSubjectAccessReview {
        metadata: object_meta(r.metadata),
        spec: authz::SelfSubjectAccessReviewSpec {
            resource_attributes: spec.resource_attributes.map(resource_attributes),
            non_resource_attributes: spec.non_resource_attributes.map(non_resource_attributes),
        },
        status: None,
    }
}

fn subject_access_review(r: pb_authz::SubjectAccessReview) -> authz::SubjectAccessReview {
    let spec = r.spec.unwrap_or_default();
    authz::SubjectAccessReview {
        metadata: object_meta(r.metadata),
        spec: authz::SubjectAccessReviewSpec {
            resource_attributes: spec.resource_attributes.map(resource_attributes),
            non_resource_attributes: spec.non_resource_attributes.map(non_resource_attributes),
            user: opt_str(spec.user),
            groups: opt_vec(spec.groups, |g| g),
            extra: opt_map(spec.extra, |v| v.items),
            uid: opt_str(spec.uid),
        },
        status: None,
    }
}

/// `kubectl create token` sends its TokenRequest as protobuf.
fn token_request(r: pb_authn::TokenRequest) -> authn::TokenRequest {
    let spec = r.spec.unwrap_or_default();
    authn::TokenRequest {
        metadata: object_meta(r.metadata),
        spec: authn::TokenRequestSpec {
            audiences: spec.audiences,
            expiration_seconds: spec.expiration_seconds,
            bound_object_ref: spec.bound_object_ref.map(|b| authn::BoundObjectReference {
                api_version: opt_str(b.api_version),
                kind: opt_str(b.kind),
                name: opt_str(b.name),
                uid: opt_str(b.u_id),
            }),
        },
        status: None,
    }
}

/// Encodes `raw` (an object's own protobuf message) in the envelope kubectl sends.
/// Public for tests that post real protobuf bodies.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str) -> Option<pb_meta::ObjectMeta> {
        Some(pb_meta::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        })
    }

    #[test]
    fn secret_bytes_become_base64_data() {
        let s = pb_core::Secret {
            metadata: meta("s1"),
            data: [("a".to_string(), b"b".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let body = envelope("v1", "Secret", s.encode_to_vec());
        let v = decode_object(&body, "", "v1", "Secret").unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"]["name"], "s1");
        assert_eq!(v["data"]["a"], "Yg==");
        assert_eq!(v["type"], "Opaque");
        assert!(v.get("stringData").is_none());
    }

    #[test]
    fn empty_fields_are_absent() {
        let body = envelope(
            "v1",
            "Namespace",
            pb_core::Namespace {
                metadata: meta("n"),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let v = decode_object(&body, "", "v1", "Namespace").unwrap();
        assert_eq!(
            v,
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
        );
    }

    #[test]
    fn unsupported_kind_and_bad_bytes_are_typed() {
        let err = decode_object(b"k8s\0", "networking.k8s.io", "v1", "Ingress").unwrap_err();
        assert!(matches!(err, ProtobufError::Unsupported(_)));
        assert_eq!(err.into_api_error("x").code, 415);
        let err = decode_object(b"{}", "", "v1", "Secret").unwrap_err();
        assert!(matches!(err, ProtobufError::Magic));
        assert_eq!(err.into_api_error("x").code, 400);
        let err = decode_object(b"k8s\0\xff\xff", "", "v1", "Secret").unwrap_err();
        assert!(matches!(err, ProtobufError::Envelope(_)));
        let body = envelope("v1", "ConfigMap", vec![]);
        let err = decode_object(&body, "", "v1", "Secret").unwrap_err();
        assert!(matches!(err, ProtobufError::KindMismatch { .. }));
    }

    fn decode<M: Message>(api_version: &str, kind: &str, m: &M) -> Result<Value, ProtobufError> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        decode_object(
            &envelope(api_version, kind, m.encode_to_vec()),
            group,
            version,
            kind,
        )
    }

    fn container() -> pb_core::Container {
        use k8s_pb::apimachinery::pkg::api::resource::Quantity;
        pb_core::Container {
            name: Some("c".into()),
            image: Some("busybox".into()),
            // Go's zero values for non-pointer fields, as gogo-protobuf writes them.
            working_dir: Some(String::new()),
            stdin: Some(false),
            tty: Some(false),
            termination_message_path: Some(String::new()),
            resources: Some(pb_core::ResourceRequirements {
                limits: [(
                    "memory".to_string(),
                    Quantity {
                        string: Some("1.5Gi".into()),
                    },
                )]
                .into(),
                ..Default::default()
            }),
            liveness_probe: Some(pb_core::Probe {
                handler: Some(pb_core::ProbeHandler {
                    tcp_socket: Some(pb_core::TcpSocketAction {
                        port: Some(pb_intstr::IntOrString {
                            r#type: Some(0),
                            int_val: Some(8080),
                            str_val: Some(String::new()),
                        }),
                        host: Some(String::new()),
                    }),
                    ..Default::default()
                }),
                period_seconds: Some(0),
                termination_grace_period_seconds: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_fields_convert_with_go_zero_values_left_out() {
        let pod = pb_core::Pod {
            metadata: meta("p"),
            spec: Some(pb_core::PodSpec {
                containers: vec![container()],
                host_network: Some(false),
                dns_policy: Some(String::new()),
                enable_service_links: Some(false),
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        let v = decode("v1", "Pod", &pod).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {
                    // A pointer (*bool) keeps its explicit false.
                    "enableServiceLinks": false,
                    "containers": [{
                        "name": "c", "image": "busybox",
                        "resources": {"limits": {"memory": "1.5Gi"}},
                        "livenessProbe": {
                            "tcpSocket": {"port": 8080},
                            "terminationGracePeriodSeconds": 0
                        }
                    }]
                }
            })
        );
    }

    #[test]
    fn deployment_keeps_empty_structs_and_int_or_string() {
        use k8s_pb::api::apps::v1 as pb_apps;
        let d = pb_apps::Deployment {
            metadata: meta("d"),
            spec: Some(pb_apps::DeploymentSpec {
                replicas: Some(1),
                template: Some(pb_core::PodTemplateSpec {
                    metadata: Some(Default::default()),
                    spec: Some(pb_core::PodSpec {
                        containers: vec![pb_core::Container {
                            name: Some("c".into()),
                            resources: Some(Default::default()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }),
                strategy: Some(pb_apps::DeploymentStrategy {
                    r#type: Some(String::new()),
                    rolling_update: Some(pb_apps::RollingUpdateDeployment {
                        max_surge: Some(pb_intstr::IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: Some("50%".into()),
                        }),
                        max_unavailable: None,
                    }),
                }),
                min_ready_seconds: Some(0),
                paused: Some(false),
                ..Default::default()
            }),
            status: None,
        };
        let v = decode("apps/v1", "Deployment", &d).unwrap();
        assert_eq!(
            v["spec"],
            serde_json::json!({
                "replicas": 1,
                "selector": {},
                "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": [{"name": "c", "resources": {}}]}},
                "strategy": {"rollingUpdate": {"maxSurge": "50%"}}
            })
        );
    }

    #[test]
    fn unmapped_fields_are_refused_by_name() {
        use k8s_pb::api::batch::v1 as pb_batch;
        let job = pb_batch::Job {
            metadata: meta("j"),
            spec: Some(pb_batch::JobSpec {
                pod_failure_policy: Some(Default::default()),
                ..Default::default()
            }),
            status: None,
        };
        let err = decode("batch/v1", "Job", &job).unwrap_err();
        assert!(matches!(
            err,
            ProtobufError::UnsupportedField("spec.podFailurePolicy")
        ));
        let api = err.into_api_error("application/vnd.kubernetes.protobuf");
        assert_eq!(api.code, 415);
        assert!(
            api.message.contains("spec.podFailurePolicy"),
            "{}",
            api.message
        );

        let pod = pb_core::Pod {
            metadata: meta("p"),
            spec: Some(pb_core::PodSpec {
                volumes: vec![pb_core::Volume {
                    name: Some("v".into()),
                    volume_source: Some(pb_core::VolumeSource {
                        nfs: Some(Default::default()),
                        ..Default::default()
                    }),
                }],
                ..Default::default()
            }),
            status: None,
        };
        let err = decode("v1", "Pod", &pod).unwrap_err();
        assert!(matches!(err, ProtobufError::UnsupportedVolume("nfs")));
    }

    #[test]
    fn is_protobuf_matches_the_media_type_only() {
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert!(is_protobuf(
            "application/vnd.kubernetes.protobuf; charset=x"
        ));
        assert!(!is_protobuf("application/json"));
    }
}
