//! The `Function` kind (`functions.kubeless.io`).

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler, core::v1::ServiceSpec,
};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Condition, Error,
    embedded::{DeploymentTemplate, ServiceTemplate},
    hpa::HpaTemplate,
    parse::{ContentType, Handler, RuntimeRef, parse_timeout},
    scale::ScaleToZero,
};

/// Default port of a function's Service and container (`FUNC_PORT`).
pub const DEFAULT_PORT: i32 = 8080;
/// Default Service port name; the `http-` prefix lets Istio detect the protocol.
pub const DEFAULT_PORT_NAME: &str = "http-function-port";

/// Kubernetes's default cluster DNS domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// In-cluster URL of a function's Service: `http://<name>.<namespace>.svc.<cluster_domain>:<port>`.
pub fn in_cluster_url(name: &str, namespace: &str, port: i32, cluster_domain: &str) -> String {
    let domain = cluster_domain.trim_matches('.');
    format!("http://{name}.{namespace}.svc.{domain}:{port}")
}

/// A function: source code (or a prebuilt image), its runtime, and templates for the
/// Deployment, Service and HPA that run it. Field names are Kubeless v1.0.x's.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeless.io",
    version = "v1beta1",
    kind = "Function",
    plural = "functions",
    singular = "function",
    namespaced,
    status = "FunctionStatus",
    derive = "PartialEq",
    shortname = "fn",
    category = "kubeless",
    doc = "A Kubeless function: source code or image, runtime, and Deployment/Service/HPA templates.",
    validation = crate::constraints::function_name_length_rule(),
    validation = crate::constraints::function_name_format_rule(),
    validation = crate::scale::idle_after_rule(),
    printcolumn(name = "Runtime", type_ = "string", json_path = ".spec.runtime"),
    printcolumn(name = "Handler", type_ = "string", json_path = ".spec.handler"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct FunctionSpec {
    /// Entry point as `<file>.<function>`; for zip or tar content `<file>` picks the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::HANDLER_PATTERN), length(max = 253))]
    pub handler: Option<String>,
    /// The function source: plain text, base64 or a URL, as told by function-content-type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Encoding of `function`: text, base64 or url, optionally followed by +zip or
    /// +compressedtar, and +deps when the dependency file is inside the archive. Default text.
    #[serde(
        rename = "function-content-type",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = crate::constraints::CONTENT_TYPE_PATTERN))]
    pub function_content_type: Option<String>,
    /// `sha256:<hex>` of the decoded function content, verified before it runs. Empty skips the
    /// check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::CHECKSUM_PATTERN))]
    pub checksum: Option<String>,
    /// Runtime as `<id><version>`, e.g. python3.11 or nodejs20. May be empty when
    /// deployment.spec.template.spec.containers[0].image names a prebuilt image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::RUNTIME_PATTERN), length(max = 63))]
    pub runtime: Option<String>,
    /// Maximum duration of one call in whole seconds (1 to 86400), as a string. Default "180".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::TIMEOUT_PATTERN))]
    pub timeout: Option<String>,
    /// Content of the runtime's dependency file (requirements.txt, package.json, go.mod, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deps: Option<String>,
    /// apps/v1 Deployment template merged into the function's Deployment. Partial templates
    /// are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentTemplate>,
    /// core/v1 ServiceSpec of the function's Service. Default: ClusterIP, port
    /// http-function-port 8080 -> 8080.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceTemplate>,
    /// HorizontalPodAutoscaler (autoscaling/v2beta1 as Kubeless wrote it, or autoscaling/v2).
    #[serde(
        rename = "horizontalPodAutoscaler",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub horizontal_pod_autoscaler: Option<HpaTemplate>,
    /// Scale the function to zero replicas when idle and wake it on the next call or event
    /// (our addition). Unset follows the install's default.
    #[serde(
        rename = "scaleToZero",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub scale_to_zero: Option<ScaleToZero>,
    /// Bake the code and dependencies into an image (the build step) instead of installing
    /// them at every pod start (our addition). Unset follows the install's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::build::BuildSpec>,
}

/// Observed state of a Function.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionStatus {
    /// The `.metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Ready` tells whether the function serves calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Desired replicas of the function's Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready replicas of the function's Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// In-cluster URL of the function, `http://<name>.<namespace>.svc.<cluster-domain>:<port>`
    /// (the function-controller's `--cluster-domain`, `cluster.local` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Image the function runs on: the runtime image, or the built image with the build step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The `kubeless.io/last-activity` annotation value the controller last acted on (scaling
    /// to zero or waking): a different value on a function at zero wakes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
    /// The image build of the current code, while the build step is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::build::BuildStatus>,
    /// The warm pool pod (`namespace/name`) answering for the function after a wake, until its
    /// own pod is ready. Callers treat the function as ready while it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pod: Option<String>,
}

impl FunctionSpec {
    /// Call timeout: `.spec.timeout` seconds, 180 s when absent or empty.
    pub fn timeout_duration(&self) -> Result<Duration, Error> {
        parse_timeout(self.timeout.as_deref())
    }

    /// `.spec.runtime` split into id and version; `None` when absent or empty (custom image).
    pub fn runtime_ref(&self) -> Result<Option<RuntimeRef>, Error> {
        match self.runtime.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(r) => RuntimeRef::parse(r).map(Some),
        }
    }

    /// Parsed `.spec.function-content-type` (text when absent).
    pub fn content_type(&self) -> Result<ContentType, Error> {
        ContentType::parse(self.function_content_type.as_deref())
    }

    /// `.spec.handler` split into module and function.
    pub fn handler_parts(&self) -> Result<Handler, Error> {
        Handler::parse(self.handler.as_deref().unwrap_or(""))
    }

    /// The `deployment` template as an apps/v1 Deployment; an empty Deployment when absent.
    /// Tolerates missing required fields (filled with empty values).
    pub fn deployment_template(&self) -> Result<Deployment, Error> {
        self.deployment.clone().unwrap_or_default().to_deployment()
    }

    /// The `service` spec as a core/v1 ServiceSpec; `None` when absent or empty.
    pub fn service_spec(&self) -> Result<Option<ServiceSpec>, Error> {
        match &self.service {
            Some(s) if !s.is_empty() => s.to_service_spec().map(Some),
            _ => Ok(None),
        }
    }

    /// Port callers use: `service.ports[0].port` (as Kubeless triggers did), 8080 by default.
    pub fn service_port(&self) -> Result<i32, Error> {
        Ok(self
            .service_spec()?
            .and_then(|s| s.ports)
            .and_then(|p| p.first().map(|p| p.port))
            .filter(|p| *p > 0)
            .unwrap_or(DEFAULT_PORT))
    }

    /// The custom image of `deployment.spec.template.spec.containers[0].image`, which makes
    /// the function "prebuilt" (no build, no code ConfigMap).
    pub fn custom_image(&self) -> Option<&str> {
        self.deployment
            .as_ref()?
            .0
            .pointer("/spec/template/spec/containers/0/image")?
            .as_str()
            .filter(|s| !s.is_empty())
    }
}

impl Function {
    /// The HPA as autoscaling/v2 (converting v2beta1 metrics); `None` when no autoscaling is
    /// asked for. An unnamed HPA is named after the function.
    pub fn hpa_v2(&self) -> Result<Option<HorizontalPodAutoscaler>, Error> {
        match &self.spec.horizontal_pod_autoscaler {
            Some(h) => h.to_v2(&self.name_any()),
            None => Ok(None),
        }
    }

    /// See [`FunctionSpec::deployment_template`].
    pub fn deployment_template(&self) -> Result<Deployment, Error> {
        self.spec.deployment_template()
    }
}
