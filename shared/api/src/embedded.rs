//! Embedded Kubernetes templates of a Function: `deployment`, `service` and
//! `horizontalPodAutoscaler`.
//!
//! Representation choice: each template is kept as the raw JSON the user wrote
//! (`serde_json::Value`), not as the typed k8s-openapi struct. Kubeless users write partial
//! templates (a Deployment without `selector`, containers without `name`, Service ports without
//! `name`, `containers: null` from `--dryrun` output) and Kubeless 1.0.8 stored the HPA as
//! autoscaling/v2beta1, which the typed autoscaling/v2 struct cannot hold. Typed structs would
//! reject such manifests or rewrite them on serialisation; raw JSON round-trips them unchanged.
//!
//! Typed access goes through converting accessors: the raw value is completed with zero values
//! for required fields that are missing (what Go's typed structs did implicitly) and then
//! decoded into the current k8s-openapi type. The CRD schema for each template is generated from
//! the upstream type with every `required` removed, so the API server validates field types
//! without rejecting partial templates.

use k8s_openapi::api::{apps::v1::Deployment, core::v1::ServiceSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    Error,
    constraints::Embedded,
    schema::{deployment_schema, fill_required, relaxed_schema_for, service_spec_schema},
};

const DEPLOYMENT_DESC: &str = "apps/v1 Deployment template merged into the function's Deployment \
(env, resources, volumes, nodeSelector, serviceAccountName, securityContext, ...). Partial \
templates are allowed: required fields may be left out. A custom containers[0].image marks a \
prebuilt function image.";
const SERVICE_DESC: &str = "core/v1 ServiceSpec of the function's Service. Partial specs are \
allowed. Default: ClusterIP, one port named http-function-port, 8080 -> 8080.";

/// Raw `deployment` template of a Function; see the module docs for why it is raw JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct DeploymentTemplate(pub Value);

impl JsonSchema for DeploymentTemplate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DeploymentTemplate".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        relaxed_schema_for::<Deployment>(generator, DEPLOYMENT_DESC, Embedded::Deployment)
    }
}

impl DeploymentTemplate {
    /// Decodes the template as an apps/v1 Deployment. Missing required fields (selector,
    /// template, containers, container names, ...) become empty values, so the result is
    /// suitable for merging into the Deployment the controller builds.
    pub fn to_deployment(&self) -> Result<Deployment, Error> {
        let mut value = object_or_empty(&self.0);
        if let Value::Object(map) = &mut value {
            map.insert("apiVersion".into(), "apps/v1".into());
            map.insert("kind".into(), "Deployment".into());
        }
        fill_required(&mut value, deployment_schema());
        serde_json::from_value(value).map_err(|source| Error::Template {
            what: "deployment",
            source,
        })
    }

    /// Whether the template is absent in substance (`{}` or only empty objects / nulls).
    pub fn is_empty(&self) -> bool {
        is_vacuous(&self.0)
    }
}

/// Raw `service` spec of a Function; see the module docs for why it is raw JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct ServiceTemplate(pub Value);

impl JsonSchema for ServiceTemplate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ServiceTemplate".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        relaxed_schema_for::<ServiceSpec>(generator, SERVICE_DESC, Embedded::Service)
    }
}

impl ServiceTemplate {
    /// Decodes the spec as a core/v1 ServiceSpec, filling missing required fields (a port's
    /// `port`) with zero values.
    pub fn to_service_spec(&self) -> Result<ServiceSpec, Error> {
        let mut value = object_or_empty(&self.0);
        fill_required(&mut value, service_spec_schema());
        serde_json::from_value(value).map_err(|source| Error::Template {
            what: "service",
            source,
        })
    }

    /// Whether the spec is absent in substance (`{}` or only empty objects / nulls).
    pub fn is_empty(&self) -> bool {
        is_vacuous(&self.0)
    }
}

/// `null` becomes `{}` so an explicit `null` template still decodes.
pub(crate) fn object_or_empty(value: &Value) -> Value {
    match value {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    }
}

/// True for null, `{}`, `[]`, and objects whose every value is vacuous
/// (e.g. Kubeless's `{metadata: {creationTimestamp: null}, spec: {}}` dry-run output).
pub(crate) fn is_vacuous(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().all(is_vacuous),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}
