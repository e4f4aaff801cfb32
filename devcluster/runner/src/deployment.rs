//! Deployment controller: Deployment -> Pods directly (no ReplicaSets), with
//! scaling, rolling updates and status.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::ctx::{Ctx, KeyedWorkers, is_not_found, ns_name};
use crate::error::Result;
use crate::util::{
    POD_TEMPLATE_HASH, controller_ref, controller_uid, generate_name, pod_phase, pod_ready,
    template_hash,
};

/// What the planner needs to know about one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub name: String,
    pub hash: String,
    pub ready: bool,
    /// When the pod became Ready (for minReadySeconds).
    pub ready_since: Option<Timestamp>,
    pub terminating: bool,
    /// Succeeded or Failed: will never run again.
    pub finished: bool,
    pub created: Option<Timestamp>,
}

impl PodView {
    pub fn of(pod: &Pod) -> Self {
        let ready_since = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0));
        Self {
            name: pod.name_any(),
            hash: pod
                .labels()
                .get(POD_TEMPLATE_HASH)
                .cloned()
                .unwrap_or_default(),
            ready: pod_ready(pod),
            ready_since,
            terminating: pod.metadata.deletion_timestamp.is_some(),
            finished: matches!(pod_phase(pod), "Succeeded" | "Failed"),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }
}

/// The rollout parameters of a Deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Strategy {
    pub recreate: bool,
    pub max_surge: i32,
    pub max_unavailable: i32,
}

/// Resolves an int-or-percent against `total` (surge rounds up, unavailable down).
pub fn scaled_value(v: Option<&IntOrString>, total: i32, round_up: bool, default: &str) -> i32 {
    let owned = IntOrString::String(default.to_string());
    match v.unwrap_or(&owned) {
        IntOrString::Int(i) => (*i).max(0),
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').trim().parse().unwrap_or(25);
            let scaled = i64::from(total.max(0)) * pct;
            let v = if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            };
            i32::try_from(v).unwrap_or(i32::MAX)
        }
    }
}

impl Strategy {
    pub fn of(dep: &Deployment, replicas: i32) -> Self {
        let strategy = dep.spec.as_ref().and_then(|s| s.strategy.as_ref());
        let recreate = strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate");
        let ru = strategy.and_then(|s| s.rolling_update.as_ref());
        let mut max_surge =
            scaled_value(ru.and_then(|r| r.max_surge.as_ref()), replicas, true, "25%");
        let max_unavailable = scaled_value(
            ru.and_then(|r| r.max_unavailable.as_ref()),
            replicas,
            false,
            "25%",
        );
        if max_surge == 0 && max_unavailable == 0 {
            // Kubernetes refuses both zero; progress needs one of them.
            max_surge = 1;
        }
        Self {
            recreate,
            max_surge,
            max_unavailable,
        }
    }
}

/// What to do next for one Deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Number of new-template pods to create.
    pub create: usize,
    /// Pods to delete.
    pub delete: Vec<String>,
}

/// Plans one step of scaling / rolling update from the current pods.
pub fn plan(replicas: i32, strategy: &Strategy, hash: &str, pods: &[PodView]) -> Plan {
    let mut out = Plan::default();
    let replicas = replicas.max(0) as usize;
    // Finished pods never come back: replace them.
    for p in pods.iter().filter(|p| !p.terminating && p.finished) {
        out.delete.push(p.name.clone());
    }
    let alive: Vec<&PodView> = pods
        .iter()
        .filter(|p| !p.terminating && !p.finished)
        .collect();
    let mut new: Vec<&PodView> = alive.iter().copied().filter(|p| p.hash == hash).collect();
    let mut old: Vec<&PodView> = alive.iter().copied().filter(|p| p.hash != hash).collect();
    // Delete order: not ready first, then the youngest (like a ReplicaSet scale-down).
    let delete_order = |v: &mut Vec<&PodView>| {
        v.sort_by(|a, b| {
            a.ready
                .cmp(&b.ready)
                .then(b.created.cmp(&a.created))
                .then(a.name.cmp(&b.name))
        });
    };
    delete_order(&mut new);
    delete_order(&mut old);

    if new.len() > replicas {
        let extra = new.len() - replicas;
        out.delete
            .extend(new.iter().take(extra).map(|p| p.name.clone()));
        new.drain(..extra);
    }
    if old.is_empty() {
        out.create = replicas.saturating_sub(new.len());
        return out;
    }
    if strategy.recreate {
        out.delete.extend(old.iter().map(|p| p.name.clone()));
        // New pods only once every old pod is gone (next pass).
        return out;
    }
    let total = new.len() + old.len();
    let max_total = replicas + strategy.max_surge.max(0) as usize;
    out.create = max_total
        .saturating_sub(total)
        .min(replicas.saturating_sub(new.len()));
    let ready_new = new.iter().filter(|p| p.ready).count();
    if ready_new >= replicas {
        out.delete.extend(old.iter().map(|p| p.name.clone()));
        return out;
    }
    // Unready old pods give no availability: they may go at once.
    let (old_unready, old_ready): (Vec<&PodView>, Vec<&PodView>) =
        old.iter().partition(|p| !p.ready);
    out.delete
        .extend(old_unready.iter().map(|p| p.name.clone()));
    let min_available = replicas.saturating_sub(strategy.max_unavailable.max(0) as usize);
    let ready_total = ready_new + old_ready.len();
    let removable = ready_total.saturating_sub(min_available);
    out.delete
        .extend(old_ready.iter().take(removable).map(|p| p.name.clone()));
    out
}

/// Computes the status the Deployment should show.
pub fn compute_status(
    dep: &Deployment,
    hash: &str,
    pods: &[PodView],
    now: Timestamp,
) -> DeploymentStatus {
    let spec = dep.spec.as_ref();
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(1).max(0);
    let min_ready = i64::from(spec.and_then(|s| s.min_ready_seconds).unwrap_or(0));
    let strategy = Strategy::of(dep, replicas);
    let alive: Vec<&PodView> = pods
        .iter()
        .filter(|p| !p.terminating && !p.finished)
        .collect();
    let count = |f: &dyn Fn(&PodView) -> bool| -> i32 {
        i32::try_from(alive.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
    };
    let total = count(&|_| true);
    let updated = count(&|p| p.hash == hash);
    let ready = count(&|p| p.ready);
    let available = count(&|p| {
        p.ready
            && p.ready_since
                .is_none_or(|t| now.as_second() - t.as_second() >= min_ready)
    });
    let updated_available = count(&|p| p.hash == hash && p.ready);
    let terminating = i32::try_from(pods.iter().filter(|p| p.terminating).count()).unwrap_or(0);
    let previous = dep.status.as_ref().and_then(|s| s.conditions.as_ref());
    let cond = |type_: &str, ok: bool, reason: &str, message: String| -> DeploymentCondition {
        let status = if ok { "True" } else { "False" };
        let prev = previous.and_then(|p| p.iter().find(|c| c.type_ == type_));
        let same_status = prev.is_some_and(|c| c.status == status);
        let same_reason = prev.is_some_and(|c| same_status && c.reason.as_deref() == Some(reason));
        DeploymentCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message),
            last_transition_time: if same_status {
                prev.and_then(|c| c.last_transition_time.clone())
            } else {
                Some(Time(now))
            },
            last_update_time: if same_reason {
                prev.and_then(|c| c.last_update_time.clone())
            } else {
                Some(Time(now))
            },
        }
    };
    let available_ok = available >= replicas - strategy.max_unavailable;
    let name = dep.name_any();
    let complete = updated == replicas && total == replicas && updated_available == replicas;
    let conditions = vec![
        if available_ok {
            cond(
                "Available",
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            )
        } else {
            cond(
                "Available",
                false,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            )
        },
        if complete {
            cond(
                "Progressing",
                true,
                "NewReplicaSetAvailable",
                format!("Pods of {name}-{hash} have successfully progressed."),
            )
        } else {
            cond(
                "Progressing",
                true,
                "ReplicaSetUpdated",
                format!("Pods of {name}-{hash} are progressing."),
            )
        },
    ];
    DeploymentStatus {
        observed_generation: dep.metadata.generation,
        replicas: Some(total),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        unavailable_replicas: Some((replicas - available).max(0)),
        terminating_replicas: Some(terminating),
        conditions: Some(conditions),
        collision_count: None,
    }
}

/// The Pod a Deployment wants for template `hash`.
pub fn build_pod(dep: &Deployment, hash: &str) -> Pod {
    let template = dep
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tmeta.labels.unwrap_or_default();
    labels.insert(POD_TEMPLATE_HASH.to_string(), hash.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(generate_name(&format!("{}-{hash}-", dep.name_any()))),
            namespace: dep.namespace(),
            labels: Some(labels),
            annotations: tmeta.annotations,
            owner_references: controller_ref(dep).map(|r| vec![r]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// One pass: hands every Deployment to its own task and returns. A Deployment whose pods are
/// being deleted, or one that waits for the cache to show a pod it created, holds up only
/// itself: a new Deployment's pod is created at once whatever the others are doing.
pub async fn reconcile_all(ctx: Arc<Ctx>, workers: Arc<KeyedWorkers>) -> Result<()> {
    for dep in ctx.stores.deployments.state() {
        if dep.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(uid) = dep.metadata.uid.clone() else {
            continue;
        };
        let (ns, name) = ns_name(dep.as_ref());
        let ctx = Arc::clone(&ctx);
        let key = uid.clone();
        workers.dispatch(key, move || {
            let ctx = Arc::clone(&ctx);
            let (ns, name, uid) = (ns.clone(), name.clone(), uid.clone());
            async move {
                // The latest state from the cache, not the pass's snapshot.
                match live(&ctx, &ns, &name, &uid) {
                    Some(dep) => reconcile(&ctx, &dep).await,
                    None => Ok(()),
                }
            }
        });
    }
    Ok(())
}

/// The Deployment `ns/name` with this uid as the cache has it now, unless it is gone or being
/// deleted (then its pods are garbage: creating one would only start a process to kill).
fn live(ctx: &Ctx, ns: &str, name: &str, uid: &str) -> Option<Arc<Deployment>> {
    ctx.stores
        .deployments
        .get(&ObjectRef::new(name).within(ns))
        .filter(|d| {
            d.metadata.uid.as_deref() == Some(uid) && d.metadata.deletion_timestamp.is_none()
        })
}

async fn reconcile(ctx: &Ctx, dep: &Deployment) -> Result<()> {
    let (ns, name) = ns_name(dep);
    let uid = dep.metadata.uid.clone().unwrap_or_default();
    let Some(spec) = dep.spec.as_ref() else {
        return Ok(());
    };
    let replicas = spec.replicas.unwrap_or(1);
    let hash = template_hash(&spec.template);
    let owned = |p: &Pod| {
        p.metadata.namespace.as_deref() == Some(ns.as_str())
            && controller_uid(&p.metadata, "Deployment") == Some(uid.as_str())
    };
    let views: Vec<PodView> = ctx
        .stores
        .pods
        .state()
        .iter()
        .filter(|p| owned(p))
        .map(|p| PodView::of(p))
        .collect();
    let strategy = Strategy::of(dep, replicas);
    let step = if spec.paused == Some(true) {
        Plan::default()
    } else {
        plan(replicas, &strategy, &hash, &views)
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for victim in &step.delete {
        match pods.delete(victim, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(%ns, deployment = %name, pod = %victim, "deleting pod");
    }
    for victim in &step.delete {
        ctx.wait_pod_cache(&ns, victim, false).await;
    }
    // A create the API server refuses (PodSecurity, quota, invalid template) is shown on the
    // Deployment as a real cluster shows it: the ReplicaSet controller's `ReplicaFailure`
    // condition (reason FailedCreate, the server's message), copied to the Deployment.
    let mut refused: Option<kube::Error> = None;
    for _ in 0..step.create {
        if live(ctx, &ns, &name, &uid).is_none() {
            // Deleted meanwhile (each create below waits for the cache).
            return Ok(());
        }
        let pod = build_pod(dep, &hash);
        let created = match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => p,
            Err(mut e) => {
                // A real server names the pod by its generateName prefix here (the name is
                // generated after admission); this runner makes names itself. The prefix
                // keeps the message the same from one retry to the next.
                if let (kube::Error::Api(s), Some(generated)) = (&mut e, &pod.metadata.name) {
                    let prefix = format!("{}-{hash}-", dep.name_any());
                    s.message = s
                        .message
                        .replace(&format!("{generated:?}"), &format!("{prefix:?}"));
                }
                refused = Some(e);
                break;
            }
        };
        let pod_name = created.name_any();
        tracing::info!(%ns, deployment = %name, pod = %pod_name, "created pod");
        ctx.wait_pod_cache(&ns, &pod_name, true).await;
    }
    // Status from the cache as it is now (after our own writes settled).
    let views: Vec<PodView> = ctx
        .stores
        .pods
        .state()
        .iter()
        .filter(|p| owned(p))
        .map(|p| PodView::of(p))
        .collect();
    let mut status = compute_status(dep, &hash, &views, Timestamp::now());
    let failure = refused.as_ref().map(|e| match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    });
    with_replica_failure(&mut status, dep, failure.as_deref(), Timestamp::now());
    if dep.status.as_ref() != Some(&status) {
        let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({ "status": status });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match refused {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Sets (refused create) or clears (the creates went through) the `ReplicaFailure` condition,
/// keeping its transition time while it stays.
pub fn with_replica_failure(
    status: &mut DeploymentStatus,
    dep: &Deployment,
    failure: Option<&str>,
    now: Timestamp,
) {
    let previous = dep
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "ReplicaFailure"));
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "ReplicaFailure");
    let Some(message) = failure else {
        return;
    };
    let kept = previous.filter(|c| c.status == "True");
    conditions.push(DeploymentCondition {
        type_: "ReplicaFailure".into(),
        status: "True".into(),
        reason: Some("FailedCreate".into()),
        message: Some(message.to_string()),
        last_transition_time: kept
            .and_then(|c| c.last_transition_time.clone())
            .or(Some(Time(now))),
        last_update_time: kept
            .filter(|c| c.message.as_deref() == Some(message))
            .and_then(|c| c.last_update_time.clone())
            .or(Some(Time(now))),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(name: &str, hash: &str, ready: bool) -> PodView {
        PodView {
            name: name.into(),
            hash: hash.into(),
            ready,
            ready_since: None,
            terminating: false,
            finished: false,
            created: None,
        }
    }

    fn rolling(surge: i32, unavail: i32) -> Strategy {
        Strategy {
            recreate: false,
            max_surge: surge,
            max_unavailable: unavail,
        }
    }

    #[test]
    fn a_refused_create_sets_replica_failure_until_creates_succeed() {
        let dep = Deployment::default();
        let mut status = compute_status(&dep, "h", &[], Timestamp::UNIX_EPOCH);
        with_replica_failure(
            &mut status,
            &dep,
            Some("forbidden: quota"),
            Timestamp::UNIX_EPOCH,
        );
        let conds = status.conditions.clone().unwrap();
        let rf = conds.iter().find(|c| c.type_ == "ReplicaFailure").unwrap();
        assert_eq!(
            (
                rf.status.as_str(),
                rf.reason.as_deref(),
                rf.message.as_deref()
            ),
            ("True", Some("FailedCreate"), Some("forbidden: quota"))
        );
        let dep = Deployment {
            status: Some(status),
            ..Deployment::default()
        };
        let mut next = compute_status(&dep, "h", &[], Timestamp::UNIX_EPOCH);
        with_replica_failure(&mut next, &dep, None, Timestamp::UNIX_EPOCH);
        assert!(
            next.conditions
                .unwrap()
                .iter()
                .all(|c| c.type_ != "ReplicaFailure")
        );
    }

    #[test]
    fn scale_up_and_down() {
        let s = rolling(1, 0);
        assert_eq!(plan(3, &s, "h", &[]).create, 3);
        let pods = vec![pv("a", "h", true), pv("b", "h", false), pv("c", "h", true)];
        let p = plan(1, &s, "h", &pods);
        assert_eq!(p.create, 0);
        assert_eq!(p.delete.len(), 2);
        assert!(p.delete.contains(&"b".to_string()), "unready pods go first");
        let p = plan(0, &s, "h", &pods);
        assert_eq!(p.delete.len(), 3);
    }

    #[test]
    fn rolling_update_keeps_availability() {
        // maxUnavailable 0, maxSurge 1, like kubeless function deployments.
        let s = rolling(1, 0);
        let mut pods = vec![pv("o1", "old", true), pv("o2", "old", true)];
        let p = plan(2, &s, "new", &pods);
        assert_eq!(
            p,
            Plan {
                create: 1,
                delete: vec![]
            }
        );
        pods.push(pv("n1", "new", false));
        assert_eq!(
            plan(2, &s, "new", &pods),
            Plan::default(),
            "wait for the new pod to be ready"
        );
        pods[2].ready = true;
        let p = plan(2, &s, "new", &pods);
        assert_eq!(p.create, 0);
        assert_eq!(
            p.delete.len(),
            1,
            "one old pod may go once a new one is ready"
        );
        pods.remove(0);
        let p = plan(2, &s, "new", &pods);
        assert_eq!(p.create, 1);
        pods.push(pv("n2", "new", true));
        let p = plan(2, &s, "new", &pods);
        assert_eq!(p.delete, vec!["o2".to_string()]);
    }

    #[test]
    fn recreate_and_finished_pods() {
        let s = Strategy {
            recreate: true,
            max_surge: 0,
            max_unavailable: 0,
        };
        let pods = vec![pv("o1", "old", true)];
        assert_eq!(
            plan(1, &s, "new", &pods),
            Plan {
                create: 0,
                delete: vec!["o1".into()]
            }
        );
        let mut done = pv("d", "new", false);
        done.finished = true;
        let p = plan(1, &rolling(1, 0), "new", &[done]);
        assert_eq!(
            p,
            Plan {
                create: 1,
                delete: vec!["d".into()]
            }
        );
    }

    #[test]
    fn percentages() {
        assert_eq!(scaled_value(None, 4, true, "25%"), 1);
        assert_eq!(scaled_value(None, 3, false, "25%"), 0);
        assert_eq!(scaled_value(None, 3, true, "25%"), 1);
        assert_eq!(scaled_value(Some(&IntOrString::Int(2)), 3, true, "25%"), 2);
        assert_eq!(
            scaled_value(Some(&IntOrString::String("50%".into())), 5, false, "25%"),
            2
        );
    }

    #[test]
    fn status_counts() {
        let dep: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "d", "generation": 4},
            "spec": {"replicas": 2, "selector": {}, "template": {}}}))
        .unwrap();
        let pods = vec![
            pv("a", "h", true),
            pv("b", "old", true),
            pv("c", "h", false),
        ];
        let s = compute_status(&dep, "h", &pods, Timestamp::UNIX_EPOCH);
        assert_eq!(s.replicas, Some(3));
        assert_eq!(s.updated_replicas, Some(2));
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(2));
        assert_eq!(s.observed_generation, Some(4));
        let conds = s.conditions.unwrap();
        assert_eq!(conds[0].status, "True");
        assert_eq!(conds[1].reason.as_deref(), Some("ReplicaSetUpdated"));
        let pods = vec![pv("a", "h", true), pv("c", "h", true)];
        let s = compute_status(&dep, "h", &pods, Timestamp::UNIX_EPOCH);
        assert_eq!(
            s.conditions.unwrap()[1].reason.as_deref(),
            Some("NewReplicaSetAvailable")
        );
    }

    #[test]
    fn built_pod_has_owner_labels_and_name() {
        let dep: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "d", "uid": "u1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}}})).unwrap();
        let pod = build_pod(&dep, "abc");
        assert!(
            pod.metadata
                .name
                .as_deref()
                .unwrap()
                .starts_with("web-abc-")
        );
        assert_eq!(
            pod.labels().get(POD_TEMPLATE_HASH).map(String::as_str),
            Some("abc")
        );
        assert_eq!(pod.labels().get("app").map(String::as_str), Some("web"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Deployment", "u1", Some(true))
        );
    }
}
