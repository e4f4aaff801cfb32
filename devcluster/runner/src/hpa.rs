//! HorizontalPodAutoscaler controller: every sync period, reads each HPA's metrics, computes
//! the desired replica count as the real controller does (ratio of current to target with a
//! 10% tolerance, min/max bounds, `behavior` policies and stabilization windows with the real
//! defaults), scales the target through its scale subresource and writes the HPA's status,
//! conditions and Events.
//!
//! Metric sources (see podmetrics.rs): `Resource` cpu is the pods' CPU from `/proc` against
//! their containers' cpu requests, as metrics-server would report it; `Object` and `Pods`
//! metrics are the rate per second of the counter of that name scraped from the pods'
//! Prometheus `/metrics` (the devcluster stand-in for a Prometheus adapter: an Object metric
//! on a Service is the summed rate over the Service's pods).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::{
    HPAScalingRules, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, MetricSpec,
};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::ctx::{Ctx, ns_name};
use crate::podmetrics::{self, Rates};
use crate::util::{is_terminating, pod_phase, pod_ready, selector_matches};

/// The real controller's tolerance: ratios within 10% of 1 change nothing.
pub const TOLERANCE: f64 = 0.1;
/// Default scale-down stabilization window.
pub const DEFAULT_SCALE_DOWN_WINDOW: i64 = 300;

/// One scaling policy: at most `value` pods or percent per `period` seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub percent: bool,
    pub value: i32,
    pub period: i64,
}

/// The rules for one direction, with the real defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    pub window: i64,
    /// "Max", "Min" or "Disabled".
    pub select: String,
    pub policies: Vec<Policy>,
}

impl Rules {
    fn of(r: Option<&HPAScalingRules>, up: bool) -> Self {
        let default = if up {
            Rules {
                window: 0,
                select: "Max".into(),
                policies: vec![
                    Policy {
                        percent: true,
                        value: 100,
                        period: 15,
                    },
                    Policy {
                        percent: false,
                        value: 4,
                        period: 15,
                    },
                ],
            }
        } else {
            Rules {
                window: DEFAULT_SCALE_DOWN_WINDOW,
                select: "Max".into(),
                policies: vec![Policy {
                    percent: true,
                    value: 100,
                    period: 15,
                }],
            }
        };
        let Some(r) = r else { return default };
        Rules {
            window: r
                .stabilization_window_seconds
                .map_or(default.window, i64::from),
            select: r.select_policy.clone().unwrap_or(default.select),
            policies: match &r.policies {
                Some(p) if !p.is_empty() => p
                    .iter()
                    .map(|p| Policy {
                        percent: p.type_ == "Percent",
                        value: p.value,
                        period: i64::from(p.period_seconds),
                    })
                    .collect(),
                _ => default.policies,
            },
        }
    }
}

/// What the controller remembers per HPA between passes.
#[derive(Default)]
pub struct Memory {
    /// (when, pre-normalization recommendation).
    recommendations: Vec<(Instant, i32)>,
    /// (when, replicas added (+) or removed (-)).
    scale_events: Vec<(Instant, i32)>,
}

/// Replicas from a usage ratio: unchanged within the tolerance, else ceil(ratio * pods).
pub fn replicas_for_ratio(ratio: f64, current: i32, pods: i32) -> i32 {
    if (ratio - 1.0).abs() <= TOLERANCE {
        current
    } else {
        (ratio * f64::from(pods)).ceil() as i32
    }
}

/// The outcome of bounding and rate-limiting a recommendation.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalized {
    pub replicas: i32,
    /// ScalingLimited reason and message.
    pub limited: Option<(&'static str, String)>,
    /// The stabilization window held a scale-down back.
    pub stabilized: bool,
}

/// An HPA's bounds and scaling rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub min: i32,
    pub max: i32,
    pub up: Rules,
    pub down: Rules,
}

/// Stabilization, policies and min/max, as the real controller's behavior path.
pub fn normalize(
    mem: &mut Memory,
    now: Instant,
    current: i32,
    recommended: i32,
    limits: &Limits,
) -> Normalized {
    let Limits { min, max, up, down } = limits;
    let (min, max) = (*min, *max);
    let longest = up.window.max(down.window).max(0) as u64;
    mem.recommendations
        .retain(|(t, _)| now.duration_since(*t) <= Duration::from_secs(longest));
    let (mut up_rec, mut down_rec) = (recommended, recommended);
    for (t, r) in &mem.recommendations {
        let age = now.duration_since(*t).as_secs_f64();
        if age <= up.window as f64 {
            up_rec = up_rec.min(*r);
        }
        if age <= down.window as f64 {
            down_rec = down_rec.max(*r);
        }
    }
    mem.recommendations.push((now, recommended));
    let mut desired = current;
    if desired < up_rec {
        desired = up_rec;
    }
    if desired > down_rec {
        desired = down_rec;
    }
    let stabilized = desired != recommended && recommended < current;

    let longest_period = up
        .policies
        .iter()
        .chain(&down.policies)
        .map(|p| p.period)
        .max()
        .unwrap_or(0)
        .max(0) as u64;
    mem.scale_events
        .retain(|(t, _)| now.duration_since(*t) <= Duration::from_secs(longest_period));
    let changed_in = |period: i64, sign: i32| -> i32 {
        mem.scale_events
            .iter()
            .filter(|(t, d)| {
                now.duration_since(*t).as_secs_f64() <= period as f64 && d.signum() == sign
            })
            .map(|(_, d)| d.abs())
            .sum()
    };
    let mut limited = None;
    if desired > current {
        let limit = if up.select == "Disabled" {
            current
        } else {
            let limits = up.policies.iter().map(|p| {
                let start = current - changed_in(p.period, 1);
                if p.percent {
                    (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
                } else {
                    start + p.value
                }
            });
            let l = if up.select == "Min" {
                limits.min()
            } else {
                limits.max()
            };
            l.unwrap_or(i32::MAX)
        };
        if desired > limit.min(max) {
            limited = Some(if limit < max {
                (
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate"
                        .to_string(),
                )
            } else {
                (
                    "TooManyReplicas",
                    "the desired replica count is more than the maximum replica count".to_string(),
                )
            });
            desired = limit.min(max);
        }
    } else if desired < current {
        let limit = if down.select == "Disabled" {
            current
        } else {
            let limits = down.policies.iter().map(|p| {
                let start = current + changed_in(p.period, -1);
                if p.percent {
                    (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)).floor() as i32
                } else {
                    start - p.value
                }
            });
            // "Max" picks the policy allowing the biggest change: the lowest count.
            let l = if down.select == "Min" {
                limits.max()
            } else {
                limits.min()
            };
            l.unwrap_or(i32::MIN)
        };
        if desired < limit.max(min) {
            limited = Some(if limit > min {
                (
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate"
                        .to_string(),
                )
            } else {
                (
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count".to_string(),
                )
            });
            desired = limit.max(min);
        }
    }
    if desired > max {
        desired = max;
        limited = Some((
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count".to_string(),
        ));
    }
    if desired < min {
        desired = min;
        limited = Some((
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count".to_string(),
        ));
    }
    Normalized {
        replicas: desired,
        limited,
        stabilized,
    }
}

/// The controller's state across passes.
#[derive(Default)]
pub struct State {
    memory: HashMap<String, Memory>,
    cpu: Rates,
    counters: Rates,
}

/// Runs a pass over every HPA every `period`, until cancelled.
pub async fn run(ctx: Arc<Ctx>, period: Duration, cancel: CancellationToken) {
    let mut state = State::default();
    loop {
        sync_all(&ctx, &mut state).await;
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
    }
}

async fn sync_all(ctx: &Ctx, state: &mut State) {
    let hpas = ctx.stores.hpas.state();
    let keys: BTreeSet<String> = hpas
        .iter()
        .map(|h| {
            let (ns, n) = ns_name(h.as_ref());
            format!("{ns}/{n}")
        })
        .collect();
    state.memory.retain(|k, _| keys.contains(k));
    let now = Instant::now();
    // Sample every running pod once per pass, so each rate spans one period.
    let pods = ctx.stores.pods.state();
    let mut cpu_now: HashMap<String, f64> = HashMap::new();
    let mut calls_now: HashMap<(String, String), f64> = HashMap::new();
    let mut live = BTreeSet::new();
    let wanted = wanted_counters(&hpas);
    for pod in &pods {
        let (ns, name) = ns_name(pod.as_ref());
        let key = format!("{ns}/{name}");
        live.insert(key.clone());
        if let Some(secs) = podmetrics::cpu_seconds(&ctx.config.running.pod_pids(&ns, &name))
            && let Some(rate) = state.cpu.observe(&key, secs, now)
        {
            cpu_now.insert(key.clone(), rate);
        }
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok())
        else {
            continue;
        };
        let metrics: Vec<&String> = wanted
            .iter()
            .filter(|(n, _)| *n == ns)
            .map(|(_, m)| m)
            .collect();
        if metrics.is_empty() || pod_phase(pod) != "Running" {
            continue;
        }
        let Some(port) = podmetrics::metrics_port(pod) else {
            continue;
        };
        let Some(text) = podmetrics::scrape(ip, port, Duration::from_secs(2)).await else {
            continue;
        };
        for m in metrics {
            if let Some(v) = podmetrics::counter_value(&text, m) {
                let ckey = format!("{key}#{m}");
                live.insert(ckey.clone());
                if let Some(rate) = state.counters.observe(&ckey, v, now) {
                    calls_now.insert((key.clone(), m.clone()), rate);
                }
            }
        }
    }
    state.cpu.retain(&live);
    state.counters.retain(&live);
    let samples = Samples {
        cpu: cpu_now,
        counters: calls_now,
    };
    for hpa in hpas {
        let (ns, name) = ns_name(hpa.as_ref());
        let mem = state.memory.entry(format!("{ns}/{name}")).or_default();
        if let Err(e) = sync_one(ctx, &hpa, mem, &samples, &pods, now).await {
            tracing::warn!(hpa = %format!("{ns}/{name}"), error = %e, "hpa sync failed; retrying next period");
        }
    }
}

/// (namespace, metric name) of every Object and Pods metric.
fn wanted_counters(hpas: &[Arc<HorizontalPodAutoscaler>]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for h in hpas {
        let ns = h.namespace().unwrap_or_default();
        for m in h.spec.iter().flat_map(|s| s.metrics.iter().flatten()) {
            let name = match m.type_.as_str() {
                "Object" => m.object.as_ref().map(|o| o.metric.name.clone()),
                "Pods" => m.pods.as_ref().map(|o| o.metric.name.clone()),
                _ => None,
            };
            if let Some(n) = name {
                out.insert((ns.clone(), n));
            }
        }
    }
    out
}

struct Samples {
    /// Pod key -> CPU cores used.
    cpu: HashMap<String, f64>,
    /// (pod key, metric) -> rate per second.
    counters: HashMap<(String, String), f64>,
}

/// The result of one metric: its proposal, the status entry, and a name for messages.
struct MetricResult {
    replicas: i32,
    status: Value,
    name: String,
}

fn pod_key(p: &Pod) -> String {
    let (ns, n) = ns_name(p);
    format!("{ns}/{n}")
}

fn compute_metric(
    m: &MetricSpec,
    current: i32,
    target_pods: &[&Arc<Pod>],
    ns: &str,
    ctx: &Ctx,
    s: &Samples,
) -> Result<MetricResult, (&'static str, String)> {
    match m.type_.as_str() {
        "Resource" => {
            let Some(r) = m.resource.as_ref().filter(|r| r.name == "cpu") else {
                return Err((
                    "FailedGetResourceMetric",
                    "devcluster measures only the cpu resource".into(),
                ));
            };
            let ready: Vec<&&Arc<Pod>> = target_pods.iter().filter(|p| pod_ready(p)).collect();
            let mut used = 0.0;
            let mut requested = 0.0;
            let mut counted = 0;
            for p in &ready {
                let Some(u) = s.cpu.get(&pod_key(p)) else {
                    continue;
                };
                let Some(req) = podmetrics::cpu_request(p) else {
                    return Err((
                        "FailedGetResourceMetric",
                        format!(
                            "failed to get cpu utilization: missing request for cpu in container of Pod {}",
                            p.name_any()
                        ),
                    ));
                };
                used += u;
                requested += req;
                counted += 1;
            }
            if counted == 0 || requested <= 0.0 {
                return Err((
                    "FailedGetResourceMetric",
                    "failed to get cpu utilization: did not receive metrics for targeted pods (pods might be unready)".into(),
                ));
            }
            let avg_value = used / f64::from(counted);
            let status_current;
            let replicas = if r.target.type_ == "Utilization" {
                let target = f64::from(r.target.average_utilization.unwrap_or(80));
                let util = (used / requested * 100.0).round();
                status_current = json!({"averageUtilization": util as i64,
                    "averageValue": podmetrics::format_quantity(avg_value)});
                replicas_for_ratio(util / target, current, counted)
            } else {
                let target = r
                    .target
                    .average_value
                    .as_ref()
                    .and_then(|q| podmetrics::parse_quantity(&q.0))
                    .unwrap_or(1.0);
                status_current = json!({"averageValue": podmetrics::format_quantity(avg_value)});
                replicas_for_ratio(avg_value / target, current, counted)
            };
            Ok(MetricResult {
                replicas,
                status: json!({"type": "Resource", "resource": {"name": "cpu", "current": status_current}}),
                name: "cpu resource utilization (percentage of request)".into(),
            })
        }
        "Object" | "Pods" => {
            let (metric, pods): (String, Vec<Arc<Pod>>) = if let Some(o) = &m.object {
                let d = &o.described_object;
                let pods = if d.kind == "Service" {
                    let svc = ctx.stores.services.get(&ObjectRef::new(&d.name).within(ns));
                    let sel = svc
                        .and_then(|s| s.spec.clone())
                        .and_then(|s| s.selector)
                        .unwrap_or_default();
                    if sel.is_empty() {
                        Vec::new()
                    } else {
                        live_pods(ctx, ns)
                            .into_iter()
                            .filter(|p| crate::util::map_selector_matches(&sel, p.labels()))
                            .collect()
                    }
                } else {
                    target_pods.iter().map(|p| Arc::clone(p)).collect()
                };
                (o.metric.name.clone(), pods)
            } else if let Some(p) = &m.pods {
                (
                    p.metric.name.clone(),
                    target_pods.iter().map(|p| Arc::clone(p)).collect(),
                )
            } else {
                return Err(("FailedGetObjectMetric", "metric source missing".into()));
            };
            let rates: Vec<f64> = pods
                .iter()
                .filter_map(|p| s.counters.get(&(pod_key(p), metric.clone())).copied())
                .collect();
            let reason = if m.type_ == "Object" {
                "FailedGetObjectMetric"
            } else {
                "FailedGetPodsMetric"
            };
            if rates.is_empty() {
                return Err((
                    reason,
                    format!(
                        "unable to get metric {metric}: no samples yet from the pods' /metrics"
                    ),
                ));
            }
            let total: f64 = rates.iter().sum();
            let n = rates.len() as i32;
            if let Some(o) = &m.object {
                let target = &o.target;
                let ready = target_pods.iter().filter(|p| pod_ready(p)).count() as i32;
                let (replicas, current_v) = if target.type_ == "AverageValue" {
                    let t = target
                        .average_value
                        .as_ref()
                        .and_then(|q| podmetrics::parse_quantity(&q.0))
                        .unwrap_or(1.0);
                    let avg = total / f64::from(current.max(1));
                    let r = if ((total / f64::from(current.max(1))) / t - 1.0).abs() <= TOLERANCE {
                        current
                    } else {
                        (total / t).ceil() as i32
                    };
                    (r, json!({"averageValue": podmetrics::format_quantity(avg)}))
                } else {
                    let t = target
                        .value
                        .as_ref()
                        .and_then(|q| podmetrics::parse_quantity(&q.0))
                        .unwrap_or(1.0);
                    (
                        replicas_for_ratio(total / t, current, ready.max(1)),
                        json!({"value": podmetrics::format_quantity(total)}),
                    )
                };
                Ok(MetricResult {
                    replicas,
                    status: json!({"type": "Object", "object": {
                        "describedObject": o.described_object, "metric": {"name": metric},
                        "current": current_v}}),
                    name: format!("{} metric {metric}", o.described_object.kind),
                })
            } else {
                let t = m
                    .pods
                    .as_ref()
                    .and_then(|p| p.target.average_value.as_ref())
                    .and_then(|q| podmetrics::parse_quantity(&q.0))
                    .unwrap_or(1.0);
                let avg = total / f64::from(n);
                Ok(MetricResult {
                    replicas: replicas_for_ratio(avg / t, current, n),
                    status: json!({"type": "Pods", "pods": {"metric": {"name": metric},
                        "current": {"averageValue": podmetrics::format_quantity(avg)}}}),
                    name: format!("pods metric {metric}"),
                })
            }
        }
        other => Err((
            "FailedGetExternalMetric",
            format!("devcluster serves no {other} metrics"),
        )),
    }
}

fn live_pods(ctx: &Ctx, ns: &str) -> Vec<Arc<Pod>> {
    ctx.stores
        .pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| !is_terminating(p) && !matches!(pod_phase(p), "Succeeded" | "Failed"))
        .collect()
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    old: &[HorizontalPodAutoscalerCondition],
    now: Timestamp,
) -> HorizontalPodAutoscalerCondition {
    let status = if status { "True" } else { "False" }.to_string();
    let since = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    HorizontalPodAutoscalerCondition {
        type_: type_.into(),
        status,
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(since),
    }
}

async fn event(ctx: &Ctx, hpa: &HorizontalPodAutoscaler, warning: bool, reason: &str, msg: &str) {
    let (ns, name) = ns_name(hpa);
    let now = Time(Timestamp::now());
    let ev = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("autoscaling/v2".into()),
            kind: Some("HorizontalPodAutoscaler".into()),
            name: Some(name),
            namespace: Some(ns.clone()),
            uid: hpa.metadata.uid.clone(),
            resource_version: hpa.metadata.resource_version.clone(),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(msg.into()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("horizontal-pod-autoscaler".into()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &ev).await {
        tracing::debug!(error = %e, "hpa event not written");
    }
}

async fn sync_one(
    ctx: &Ctx,
    hpa: &HorizontalPodAutoscaler,
    mem: &mut Memory,
    samples: &Samples,
    _pods: &[Arc<Pod>],
    now: Instant,
) -> crate::Result<()> {
    let (ns, name) = ns_name(hpa);
    let Some(spec) = hpa.spec.as_ref() else {
        return Ok(());
    };
    let wall = Timestamp::now();
    let old_status = hpa.status.clone().unwrap_or_default();
    let old_conds = old_status.conditions.clone().unwrap_or_default();
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), &ns);
    let write_status = |status: Value| {
        let hpas = hpas.clone();
        let name = name.clone();
        async move {
            hpas.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        }
    };
    let target = &spec.scale_target_ref;
    let dep = (target.kind == "Deployment")
        .then(|| {
            ctx.stores
                .deployments
                .get(&ObjectRef::<Deployment>::new(&target.name).within(&ns))
        })
        .flatten();
    let Some(dep) = dep else {
        let msg = format!(
            "the HPA controller was unable to get the target's current scale: {} {:?} not found",
            target.kind, target.name
        );
        let conds = vec![condition(
            "AbleToScale",
            false,
            "FailedGetScale",
            msg.clone(),
            &old_conds,
            wall,
        )];
        if old_conds
            .iter()
            .all(|c| c.reason.as_deref() != Some("FailedGetScale"))
        {
            event(ctx, hpa, true, "FailedGetScale", &msg).await;
        }
        write_status(
            json!({"currentReplicas": old_status.current_replicas.unwrap_or(0),
            "desiredReplicas": old_status.desired_replicas, "conditions": conds,
            "observedGeneration": hpa.metadata.generation}),
        )
        .await?;
        return Ok(());
    };
    let current = dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let sel = dep
        .spec
        .as_ref()
        .map(|s| s.selector.clone())
        .unwrap_or_default();
    let pods = live_pods(ctx, &ns);
    let target_pods: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| selector_matches(&sel, p.labels()))
        .collect();
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut conds = Vec::new();
    let able = condition(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
        &old_conds,
        wall,
    );
    if current == 0 && min > 0 {
        conds.push(able);
        conds.push(condition(
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero".into(),
            &old_conds,
            wall,
        ));
        write_status(
            json!({"currentReplicas": 0, "desiredReplicas": 0, "conditions": conds,
            "observedGeneration": hpa.metadata.generation}),
        )
        .await?;
        return Ok(());
    }
    let default_cpu = MetricSpec {
        type_: "Resource".into(),
        resource: Some(k8s_openapi::api::autoscaling::v2::ResourceMetricSource {
            name: "cpu".into(),
            target: k8s_openapi::api::autoscaling::v2::MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(80),
                ..Default::default()
            },
        }),
        ..MetricSpec::default()
    };
    let metrics: Vec<&MetricSpec> = match &spec.metrics {
        Some(m) if !m.is_empty() => m.iter().collect(),
        _ => vec![&default_cpu],
    };
    let mut best: Option<(i32, String)> = None;
    let mut current_metrics = Vec::new();
    let mut failure = None;
    for m in metrics {
        match compute_metric(m, current, &target_pods, &ns, ctx, samples) {
            Ok(r) => {
                current_metrics.push(r.status);
                if best.as_ref().is_none_or(|(b, _)| r.replicas > *b) {
                    best = Some((r.replicas, r.name));
                }
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    let Some((proposal, metric_name)) = best else {
        let (reason, msg) = failure.unwrap_or(("FailedGetResourceMetric", "no metrics".into()));
        if old_conds
            .iter()
            .all(|c| !(c.type_ == "ScalingActive" && c.reason.as_deref() == Some(reason)))
        {
            event(ctx, hpa, true, reason, &msg).await;
        }
        conds.push(able);
        conds.push(condition(
            "ScalingActive",
            false,
            reason,
            format!("the HPA was unable to compute the replica count: {msg}"),
            &old_conds,
            wall,
        ));
        write_status(json!({"currentReplicas": current,
            "desiredReplicas": if hpa.status.is_some() { old_status.desired_replicas } else { current }, "conditions": conds,
            "observedGeneration": hpa.metadata.generation}))
            .await?;
        return Ok(());
    };
    let behavior = spec.behavior.as_ref();
    let limits = Limits {
        min,
        max,
        up: Rules::of(behavior.and_then(|b| b.scale_up.as_ref()), true),
        down: Rules::of(behavior.and_then(|b| b.scale_down.as_ref()), false),
    };
    let n = normalize(mem, now, current, proposal, &limits);
    let desired = n.replicas;
    let mut last_scale = old_status.last_scale_time.clone();
    let able = if desired != current {
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
        match deployments
            .patch_scale(
                &target.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": desired}})),
            )
            .await
        {
            Ok(_) => {
                mem.scale_events.push((now, desired - current));
                last_scale = Some(Time(wall));
                let reason = if desired > current {
                    format!("{metric_name} above target")
                } else {
                    "All metrics below target".to_string()
                };
                event(
                    ctx,
                    hpa,
                    false,
                    "SuccessfulRescale",
                    &format!("New size: {desired}; reason: {reason}"),
                )
                .await;
                condition(
                    "AbleToScale",
                    true,
                    "SucceededRescale",
                    format!("the HPA controller was able to update the target scale to {desired}"),
                    &old_conds,
                    wall,
                )
            }
            Err(e) => {
                let msg = format!("the HPA controller was unable to update the target scale: {e}");
                event(
                    ctx,
                    hpa,
                    true,
                    "FailedRescale",
                    &format!("New size: {desired}; error: {e}"),
                )
                .await;
                condition(
                    "AbleToScale",
                    false,
                    "FailedUpdateScale",
                    msg,
                    &old_conds,
                    wall,
                )
            }
        }
    } else if n.stabilized {
        condition("AbleToScale", true, "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation".into(), &old_conds, wall)
    } else {
        condition(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size".into(),
            &old_conds,
            wall,
        )
    };
    conds.push(able);
    conds.push(condition(
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {metric_name}"),
        &old_conds,
        wall,
    ));
    conds.push(match &n.limited {
        Some((reason, msg)) => condition(
            "ScalingLimited",
            true,
            reason,
            msg.clone(),
            &old_conds,
            wall,
        ),
        None => condition(
            "ScalingLimited",
            false,
            "DesiredWithinRange",
            "the desired count is within the acceptable range".into(),
            &old_conds,
            wall,
        ),
    });
    let mut status = json!({"currentReplicas": current, "desiredReplicas": desired,
        "currentMetrics": current_metrics, "conditions": conds,
        "observedGeneration": hpa.metadata.generation});
    if let Some(t) = last_scale {
        status["lastScaleTime"] = json!(t);
    }
    write_status(status).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(window: i64, pods: i32) -> Rules {
        Rules {
            window,
            select: "Max".into(),
            policies: vec![Policy {
                percent: false,
                value: pods,
                period: 15,
            }],
        }
    }

    fn lim(min: i32, max: i32, up: &Rules, down: &Rules) -> Limits {
        Limits {
            min,
            max,
            up: up.clone(),
            down: down.clone(),
        }
    }

    #[test]
    fn tolerance_keeps_the_count_and_ratios_round_up() {
        assert_eq!(replicas_for_ratio(1.05, 3, 3), 3);
        assert_eq!(replicas_for_ratio(0.91, 3, 3), 3);
        assert_eq!(replicas_for_ratio(1.5, 2, 2), 3);
        assert_eq!(replicas_for_ratio(0.2, 4, 4), 1);
    }

    #[test]
    fn defaults_are_the_real_ones() {
        let up = Rules::of(None, true);
        let down = Rules::of(None, false);
        assert_eq!(up.window, 0);
        assert_eq!(down.window, 300);
        assert_eq!(up.policies.len(), 2);
    }

    #[test]
    fn scale_down_waits_for_the_window_and_up_is_rate_limited() {
        let mut mem = Memory::default();
        let t0 = Instant::now();
        let (up, down) = (rules(0, 2), rules(10, 100));
        // Up from 1 to 10 wanted: 2 pods per period allowed, ScaleUpLimit.
        let n = normalize(&mut mem, t0, 1, 10, &lim(1, 8, &up, &down));
        assert_eq!(n.replicas, 3);
        assert_eq!(n.limited.map(|l| l.0), Some("ScaleUpLimit"));
        mem.scale_events.push((t0, 2));
        // Load gone 5 s later: the 10 recommended within the window holds the count.
        let n = normalize(
            &mut mem,
            t0 + Duration::from_secs(5),
            3,
            1,
            &lim(1, 8, &up, &down),
        );
        assert_eq!(n.replicas, 3);
        assert!(n.stabilized);
        // Past the window: down to the minimum.
        let n = normalize(
            &mut mem,
            t0 + Duration::from_secs(20),
            3,
            1,
            &lim(1, 8, &up, &down),
        );
        assert_eq!(n.replicas, 1);
        // Bounds.
        let mut mem = Memory::default();
        let n = normalize(&mut mem, t0, 2, 50, &lim(1, 4, &rules(0, 100), &down));
        assert_eq!(n.replicas, 4);
        assert_eq!(n.limited.map(|l| l.0), Some("TooManyReplicas"));
    }
}
