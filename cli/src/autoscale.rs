//! `kubeless autoscale ...`: the HPA lives in the Function's `spec.horizontalPodAutoscaler`
//! (as in Kubeless), so the function-controller creates, updates and deletes the real object.

use k8s_openapi::{
    api::autoscaling::v2::{
        CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
        MetricIdentifier, MetricSpec, MetricTarget, ObjectMetricSource, ResourceMetricSource,
    },
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    ResourceExt,
    api::{ListParams, ObjectMeta, Patch, PatchParams},
};
use kubeless_api::{Function, labels::function_labels};
use serde_json::Value;

use crate::{
    args::{AutoscaleCmd, AutoscaleCreateArgs, Metric, OutArgs},
    ctx::Ctx,
    error::{Error, Result},
    output::{self, ItemList, Table},
};

pub async fn run(ctx: &Ctx, cmd: AutoscaleCmd) -> Result<()> {
    match cmd {
        AutoscaleCmd::Create(a) => create(ctx, a).await,
        AutoscaleCmd::List(a) => list(ctx, a).await,
        AutoscaleCmd::Delete(a) => set_hpa(ctx, &a.name, Value::Null).await,
    }
}

/// The autoscaling/v2 HPA for a function: CPU utilisation, or `function_calls` per second on
/// the function's Service (needs a custom-metrics adapter such as prometheus-adapter).
pub fn build(
    name: &str,
    namespace: &str,
    a: &AutoscaleCreateArgs,
) -> Result<HorizontalPodAutoscaler> {
    if a.min < 1 || a.max < a.min {
        return Err(Error::usage("need 1 <= --min <= --max"));
    }
    let metric = match a.metric {
        Metric::Cpu => {
            let pct: i32 = a.value.trim().trim_end_matches('%').parse().map_err(|_| {
                Error::usage(format!("--value {:?} is not a CPU percentage", a.value))
            })?;
            MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(pct),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }
        }
        Metric::Qps => {
            if a.value.trim().is_empty() {
                return Err(Error::usage("--value is required"));
            }
            MetricSpec {
                type_: "Object".into(),
                object: Some(ObjectMetricSource {
                    described_object: CrossVersionObjectReference {
                        api_version: Some("v1".into()),
                        kind: "Service".into(),
                        name: name.to_string(),
                    },
                    metric: MetricIdentifier {
                        name: "function_calls".into(),
                        selector: None,
                    },
                    target: MetricTarget {
                        type_: "Value".into(),
                        value: Some(Quantity(a.value.trim().to_string())),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }
        }
    };
    Ok(HorizontalPodAutoscaler {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(function_labels(name)),
            ..ObjectMeta::default()
        },
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: name.to_string(),
            },
            min_replicas: Some(a.min),
            max_replicas: a.max,
            metrics: Some(vec![metric]),
            behavior: None,
        }),
        status: None,
    })
}

async fn set_hpa(ctx: &Ctx, name: &str, hpa: Value) -> Result<()> {
    let removing = hpa.is_null();
    let patch = serde_json::json!({ "spec": { "horizontalPodAutoscaler": hpa } });
    ctx.api::<Function>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            Error::kube(
                format!(
                    "Unable to find function {name} in namespace {}",
                    ctx.namespace
                ),
                e,
            )
        })?;
    if removing {
        eprintln!("Removed autoscaling of function {name}");
    } else {
        eprintln!("Autoscaling of function {name} set");
    }
    Ok(())
}

async fn create(ctx: &Ctx, a: AutoscaleCreateArgs) -> Result<()> {
    let hpa = build(&a.name, &ctx.namespace, &a)?;
    let mut value = serde_json::to_value(&hpa).map_err(|source| Error::Json {
        what: "HPA".into(),
        source,
    })?;
    if let Value::Object(m) = &mut value {
        m.insert("apiVersion".into(), "autoscaling/v2".into());
        m.insert("kind".into(), "HorizontalPodAutoscaler".into());
    }
    set_hpa(ctx, &a.name, value).await
}

/// One autoscaled function: its HPA as autoscaling/v2.
fn hpas(functions: &[Function]) -> Vec<HorizontalPodAutoscaler> {
    functions
        .iter()
        .filter_map(|f| match f.hpa_v2() {
            Ok(h) => h.map(|mut h| {
                h.metadata.namespace = f.namespace();
                h
            }),
            Err(e) => {
                eprintln!("WARNING: function {}: {e}", f.name_any());
                None
            }
        })
        .collect()
}

pub fn table(hpas: &[HorizontalPodAutoscaler]) -> Table {
    let mut t = Table::new(&[
        "NAME",
        "NAMESPACE",
        "TARGET",
        "MIN",
        "MAX",
        "METRIC",
        "VALUE",
    ]);
    for h in hpas {
        let spec = h.spec.clone().unwrap_or_default();
        let (metric, value) = spec
            .metrics
            .unwrap_or_default()
            .into_iter()
            .next()
            .map(|m| {
                if let Some(r) = m.resource {
                    let v = r
                        .target
                        .average_utilization
                        .map(|u| u.to_string())
                        .or(r.target.average_value.map(|q| q.0))
                        .unwrap_or_default();
                    (r.name, v)
                } else if let Some(o) = m.object {
                    let v = o.target.value.or(o.target.average_value).map(|q| q.0);
                    (o.metric.name, v.unwrap_or_default())
                } else if let Some(p) = m.pods {
                    let v = p.target.average_value.map(|q| q.0);
                    (p.metric.name, v.unwrap_or_default())
                } else {
                    (m.type_, String::new())
                }
            })
            .unwrap_or_default();
        let metric = match metric.as_str() {
            "function_calls" => "qps".to_string(),
            _ => metric,
        };
        t.row(vec![
            h.name_any(),
            h.namespace().unwrap_or_default(),
            spec.scale_target_ref.name,
            spec.min_replicas.unwrap_or(1).to_string(),
            spec.max_replicas.to_string(),
            metric,
            value,
        ]);
    }
    t
}

async fn list(ctx: &Ctx, a: OutArgs) -> Result<()> {
    let mut functions = ctx
        .api::<Function>()
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing functions", e))?
        .items;
    functions.sort_by_key(|f| f.name_any());
    let hpas = hpas(&functions);
    match a.out {
        Some(format) => output::print(&output::render(&ItemList::new(hpas), format)?),
        None => output::print(&table(&hpas).render()),
    }
}

#[cfg(test)]
mod tests {
    use kubeless_api::HpaTemplate;

    use super::*;

    fn args(metric: Metric, value: &str) -> AutoscaleCreateArgs {
        AutoscaleCreateArgs {
            name: "f".into(),
            min: 1,
            max: 3,
            metric,
            value: value.into(),
        }
    }

    #[test]
    fn cpu_and_qps_round_trip_through_the_function_template() {
        for (metric, value, col) in [(Metric::Cpu, "70", "cpu"), (Metric::Qps, "10", "qps")] {
            let hpa = build("f", "ns", &args(metric, value)).unwrap();
            let mut f = Function::new("f", Default::default());
            f.spec.horizontal_pod_autoscaler =
                Some(HpaTemplate(serde_json::to_value(&hpa).unwrap()));
            let back = f.hpa_v2().unwrap().unwrap();
            assert_eq!(back.spec, hpa.spec);
            let rendered = table(&[back]).render();
            assert!(rendered.contains(&format!("  {col}  ")), "{rendered}");
            assert!(rendered.contains(&format!("  {value}\n")), "{rendered}");
        }
        assert!(build("f", "ns", &args(Metric::Cpu, "lots")).is_err());
        let mut bad = args(Metric::Cpu, "50");
        bad.max = 0;
        assert!(build("f", "ns", &bad).is_err());
    }
}
