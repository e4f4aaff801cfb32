//! `horizontalPodAutoscaler` of a Function.
//!
//! Kubeless 1.0.8 stored an autoscaling/v2beta1 HPA here (metrics with
//! `targetAverageUtilization`, `targetAverageValue`, `metricName`, `targetValue`). That API is
//! gone from Kubernetes (and from k8s-openapi), so the raw JSON is kept and the CRD schema is
//! generated from the lenient structs below, which hold the v2beta1 fields AND the autoscaling/v2
//! fields (`target: {type, value, averageValue, averageUtilization}`, `metric`,
//! `describedObject`, `behavior`) side by side. [`HpaTemplate::to_v2`] converts either shape to
//! an autoscaling/v2 HorizontalPodAutoscaler.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::autoscaling::v2,
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{LabelSelector, ObjectMeta},
    },
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::{
    Error,
    constraints::Embedded,
    embedded::{is_vacuous, object_or_empty},
    schema::{fill_required, hpa_behavior_schema, object_meta_schema, relaxed_schema_for},
};

const HPA_DESC: &str = "HorizontalPodAutoscaler for the function. Accepts the autoscaling/v2beta1 \
shape Kubeless wrote (targetAverageUtilization, targetAverageValue, metricName, targetValue) and \
the autoscaling/v2 shape (target, metric, describedObject, behavior); it is converted to \
autoscaling/v2. Created when spec.scaleTargetRef.name is set, removed otherwise.";

/// Raw `horizontalPodAutoscaler` of a Function; see the module docs.
#[derive(serde::Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct HpaTemplate(pub Value);

impl JsonSchema for HpaTemplate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HpaTemplate".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        relaxed_schema_for::<HpaCompat>(generator, HPA_DESC, Embedded::Hpa)
    }
}

/// HorizontalPodAutoscaler accepting both autoscaling/v2beta1 and autoscaling/v2 fields.
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HpaCompat {
    /// Ignored: the controller always writes autoscaling/v2.
    pub api_version: Option<String>,
    /// Ignored: always HorizontalPodAutoscaler.
    pub kind: Option<String>,
    /// Name (defaults to the function name), labels and annotations of the HPA.
    #[schemars(with = "Option<ObjectMeta>")]
    pub metadata: Option<Value>,
    /// Scaling target, bounds and metrics.
    pub spec: Option<HpaSpecCompat>,
    /// Status as reported by Kubernetes in old manifests; ignored.
    #[schemars(schema_with = "crate::schema::preserve_object")]
    pub status: Option<Value>,
}

/// HPA spec accepting both autoscaling/v2beta1 and autoscaling/v2 fields.
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HpaSpecCompat {
    /// The object to scale, normally the function's Deployment.
    pub scale_target_ref: Option<ObjectRefCompat>,
    /// Lower bound of replicas (default 1).
    pub min_replicas: Option<i32>,
    /// Upper bound of replicas.
    pub max_replicas: Option<i32>,
    /// Metrics, in v2beta1 or v2 shape.
    pub metrics: Option<Vec<MetricCompat>>,
    /// autoscaling/v2 scaling behavior.
    #[schemars(with = "Option<v2::HorizontalPodAutoscalerBehavior>")]
    pub behavior: Option<Value>,
}

/// Reference to an object (scale target, v2 describedObject).
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRefCompat {
    /// API version of the referent.
    pub api_version: Option<String>,
    /// Kind of the referent.
    pub kind: Option<String>,
    /// Name of the referent.
    pub name: Option<String>,
}

/// One metric, in v2beta1 or v2 shape.
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricCompat {
    /// Resource, ContainerResource, Pods, Object or External.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Per-pod resource metric (cpu, memory).
    pub resource: Option<ResourceCompat>,
    /// Per-container resource metric.
    pub container_resource: Option<ResourceCompat>,
    /// Per-pod custom metric.
    pub pods: Option<SourceCompat>,
    /// Metric describing another object.
    pub object: Option<SourceCompat>,
    /// Metric from outside the cluster.
    pub external: Option<SourceCompat>,
}

/// Resource / ContainerResource metric source in v2beta1 or v2 shape.
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCompat {
    /// Resource name (cpu, memory).
    pub name: Option<String>,
    /// Container name (ContainerResource only).
    pub container: Option<String>,
    /// v2beta1: target average utilization in percent of the request.
    pub target_average_utilization: Option<i32>,
    /// v2beta1: target average value.
    pub target_average_value: Option<Quantity>,
    /// v2: target.
    pub target: Option<TargetCompat>,
}

/// Pods / Object / External metric source in v2beta1 or v2 shape.
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceCompat {
    /// v2beta1: metric name.
    pub metric_name: Option<String>,
    /// v2beta1: metric label selector (Pods, Object).
    pub selector: Option<LabelSelector>,
    /// v2beta1: metric label selector (External).
    pub metric_selector: Option<LabelSelector>,
    /// v2beta1: target value (Object, External).
    pub target_value: Option<Quantity>,
    /// v2beta1: target average value (Pods, External).
    pub target_average_value: Option<Quantity>,
    /// v2beta1: target average value (Object).
    pub average_value: Option<Quantity>,
    /// v2: the metric.
    pub metric: Option<MetricIdCompat>,
    /// v2: the described object (Object).
    pub described_object: Option<ObjectRefCompat>,
    /// v2: the target value; in a v2beta1 Object metric: the described object
    /// (apiVersion, kind, name).
    pub target: Option<TargetCompat>,
}

/// v2 metric identifier.
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricIdCompat {
    /// Metric name.
    pub name: Option<String>,
    /// Metric label selector.
    pub selector: Option<LabelSelector>,
}

/// v2 MetricTarget, merged with the v2beta1 Object metric's object reference (both were
/// called `target`).
#[derive(Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetCompat {
    /// v2: Utilization, Value or AverageValue.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// v2: target value.
    pub value: Option<Quantity>,
    /// v2: target average value.
    pub average_value: Option<Quantity>,
    /// v2: target average utilization in percent.
    pub average_utilization: Option<i32>,
    /// v2beta1 Object metric: API version of the described object.
    pub api_version: Option<String>,
    /// v2beta1 Object metric: kind of the described object.
    pub kind: Option<String>,
    /// v2beta1 Object metric: name of the described object.
    pub name: Option<String>,
}

fn invalid(msg: String) -> Error {
    Error::Template {
        what: "horizontalPodAutoscaler",
        source: <serde_json::Error as serde::de::Error>::custom(msg),
    }
}

fn target_v2(t: &TargetCompat) -> v2::MetricTarget {
    let inferred = if t.average_utilization.is_some() {
        "Utilization"
    } else if t.average_value.is_some() {
        "AverageValue"
    } else {
        "Value"
    };
    v2::MetricTarget {
        type_: t.type_.clone().unwrap_or_else(|| inferred.to_string()),
        value: t.value.clone(),
        average_value: t.average_value.clone(),
        average_utilization: t.average_utilization,
    }
}

fn legacy_target(
    utilization: Option<i32>,
    average: Option<&Quantity>,
    value: Option<&Quantity>,
) -> Option<v2::MetricTarget> {
    let (type_, average_utilization, average_value, value) = match (utilization, average, value) {
        (Some(u), _, _) => ("Utilization", Some(u), None, None),
        (None, Some(a), _) => ("AverageValue", None, Some(a.clone()), None),
        (None, None, Some(v)) => ("Value", None, None, Some(v.clone())),
        (None, None, None) => return None,
    };
    Some(v2::MetricTarget {
        type_: type_.into(),
        average_utilization,
        average_value,
        value,
    })
}

/// Old manifests point at Deployments through API groups that no longer serve them.
fn modern_api_version(kind: &str, api_version: Option<String>) -> Option<String> {
    match (kind, api_version.as_deref()) {
        ("Deployment", Some("extensions/v1beta1" | "apps/v1beta1" | "apps/v1beta2")) => {
            Some("apps/v1".into())
        }
        _ => api_version,
    }
}

fn object_ref(r: &ObjectRefCompat) -> v2::CrossVersionObjectReference {
    let kind = r.kind.clone().unwrap_or_default();
    v2::CrossVersionObjectReference {
        api_version: modern_api_version(&kind, r.api_version.clone()),
        kind,
        name: r.name.clone().unwrap_or_default(),
    }
}

fn resource_v2(r: &ResourceCompat, what: &str) -> Result<(String, v2::MetricTarget), Error> {
    let target = match &r.target {
        Some(t) => target_v2(t),
        None => legacy_target(
            r.target_average_utilization,
            r.target_average_value.as_ref(),
            None,
        )
        .ok_or_else(|| invalid(format!("{what} metric without a target")))?,
    };
    Ok((r.name.clone().unwrap_or_default(), target))
}

fn metric_id(s: &SourceCompat, legacy_selector: Option<&LabelSelector>) -> v2::MetricIdentifier {
    match &s.metric {
        Some(m) => v2::MetricIdentifier {
            name: m.name.clone().unwrap_or_default(),
            selector: m.selector.clone(),
        },
        None => v2::MetricIdentifier {
            name: s.metric_name.clone().unwrap_or_default(),
            selector: legacy_selector.cloned(),
        },
    }
}

fn metric_v2(m: &MetricCompat) -> Result<v2::MetricSpec, Error> {
    let mut out = v2::MetricSpec::default();
    let inferred_type;
    if let Some(r) = &m.resource {
        let (name, target) = resource_v2(r, "Resource")?;
        out.resource = Some(v2::ResourceMetricSource { name, target });
        inferred_type = "Resource";
    } else if let Some(r) = &m.container_resource {
        let (name, target) = resource_v2(r, "ContainerResource")?;
        out.container_resource = Some(v2::ContainerResourceMetricSource {
            name,
            container: r.container.clone().unwrap_or_default(),
            target,
        });
        inferred_type = "ContainerResource";
    } else if let Some(p) = &m.pods {
        let target = match (&p.metric, &p.target) {
            (Some(_), Some(t)) => Some(target_v2(t)),
            _ => legacy_target(None, p.target_average_value.as_ref(), None),
        }
        .ok_or_else(|| invalid("Pods metric without a target".into()))?;
        out.pods = Some(v2::PodsMetricSource {
            metric: metric_id(p, p.selector.as_ref()),
            target,
        });
        inferred_type = "Pods";
    } else if let Some(o) = &m.object {
        let v2_shape = o.described_object.is_some() || o.metric.is_some();
        let source = if v2_shape {
            v2::ObjectMetricSource {
                described_object: o
                    .described_object
                    .as_ref()
                    .map(object_ref)
                    .unwrap_or_default(),
                metric: metric_id(o, None),
                target: o
                    .target
                    .as_ref()
                    .map(target_v2)
                    .ok_or_else(|| invalid("Object metric without a target".into()))?,
            }
        } else {
            let described = o.target.as_ref().map(|t| ObjectRefCompat {
                api_version: t.api_version.clone(),
                kind: t.kind.clone(),
                name: t.name.clone(),
            });
            v2::ObjectMetricSource {
                described_object: described.as_ref().map(object_ref).unwrap_or_default(),
                metric: metric_id(o, o.selector.as_ref()),
                target: legacy_target(None, o.average_value.as_ref(), o.target_value.as_ref())
                    .ok_or_else(|| invalid("Object metric without a target value".into()))?,
            }
        };
        out.object = Some(source);
        inferred_type = "Object";
    } else if let Some(e) = &m.external {
        let target = match (&e.metric, &e.target) {
            (Some(_), Some(t)) => Some(target_v2(t)),
            _ => legacy_target(
                None,
                e.target_average_value.as_ref(),
                e.target_value.as_ref(),
            ),
        }
        .ok_or_else(|| invalid("External metric without a target".into()))?;
        out.external = Some(v2::ExternalMetricSource {
            metric: metric_id(e, e.metric_selector.as_ref()),
            target,
        });
        inferred_type = "External";
    } else {
        return Err(invalid(format!(
            "metric of type {:?} has no source",
            m.type_.as_deref().unwrap_or("")
        )));
    }
    out.type_ = m
        .type_
        .clone()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| inferred_type.to_string());
    Ok(out)
}

impl HpaTemplate {
    /// Converts to an autoscaling/v2 HPA. `Ok(None)` when no autoscaling is asked for: the
    /// template is absent or empty, or `spec.scaleTargetRef.name` is empty (Kubeless created
    /// the HPA only when a target was set; its dry-run output carries an all-empty HPA).
    /// An empty `metadata.name` defaults to `default_name` (the function name).
    pub fn to_v2(&self, default_name: &str) -> Result<Option<v2::HorizontalPodAutoscaler>, Error> {
        if is_vacuous(&self.0) {
            return Ok(None);
        }
        let compat: HpaCompat =
            serde_json::from_value(self.0.clone()).map_err(|source| Error::Template {
                what: "horizontalPodAutoscaler",
                source,
            })?;
        let Some(spec) = compat.spec else {
            return Ok(None);
        };
        let Some(target) = spec
            .scale_target_ref
            .as_ref()
            .filter(|t| t.name.as_deref().is_some_and(|n| !n.is_empty()))
        else {
            return Ok(None);
        };
        let max_replicas = spec
            .max_replicas
            .filter(|m| *m > 0)
            .ok_or_else(|| invalid("spec.maxReplicas must be at least 1".into()))?;
        let metrics = spec
            .metrics
            .as_deref()
            .map(|ms| ms.iter().map(metric_v2).collect::<Result<Vec<_>, _>>())
            .transpose()?;
        let behavior = spec
            .behavior
            .map(|mut b| {
                fill_required(&mut b, hpa_behavior_schema());
                serde_json::from_value(b)
            })
            .transpose()
            .map_err(|source| Error::Template {
                what: "horizontalPodAutoscaler.spec.behavior",
                source,
            })?;
        let mut meta_value = object_or_empty(compat.metadata.as_ref().unwrap_or(&Value::Null));
        fill_required(&mut meta_value, object_meta_schema());
        let meta: ObjectMeta =
            serde_json::from_value(meta_value).map_err(|source| Error::Template {
                what: "horizontalPodAutoscaler.metadata",
                source,
            })?;
        let name = meta
            .name
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| default_name.to_string());
        let non_empty = |m: Option<BTreeMap<String, String>>| m.filter(|m| !m.is_empty());
        Ok(Some(v2::HorizontalPodAutoscaler {
            metadata: ObjectMeta {
                name: Some(name),
                labels: non_empty(meta.labels),
                annotations: non_empty(meta.annotations),
                ..Default::default()
            },
            spec: Some(v2::HorizontalPodAutoscalerSpec {
                scale_target_ref: object_ref(target),
                min_replicas: spec.min_replicas,
                max_replicas,
                metrics,
                behavior,
            }),
            status: None,
        }))
    }
}
