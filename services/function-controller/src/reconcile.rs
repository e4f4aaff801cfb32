//! The reconciler: read the Function and the config, build the children with the pure
//! builders, apply what changed, then write status.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::Job,
    core::v1::{ConfigMap, Pod, Service},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, LogParams, Patch, PatchParams},
    core::{
        DeserializeGuard, PartialObjectMeta, PartialObjectMetaExt, error_boundary::InvalidObject,
    },
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as Finalizer, finalizer},
        reflector::{ObjectRef, Store},
    },
};
use kubeless_api::{
    Condition, Function, FunctionSpec, FunctionStatus,
    conditions::{READY, find_condition, reasons, set_condition},
    labels::{FUNCTION, FUNCTION_FINALIZER},
    scale::{SCALED_TO_ZERO, ScaleToZero},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::builders::{self, APPLIED_HASH, CONTENT_HASH, Desired};
use crate::config::ControllerConfig;
use crate::diagnose::{self, Failure};
use crate::error::Error;
use crate::metrics::ControllerMetrics;
use crate::scale;

/// The one field manager of every write.
pub const FIELD_MANAGER: &str = "kubeless-function-controller";
/// Requeue interval of a ready Function (a safety net; watches do the real work).
const READY_RESYNC: Duration = Duration::from_secs(600);
/// Requeue interval while a Function is not ready yet.
const PENDING_RESYNC: Duration = Duration::from_secs(30);
/// How long a reconcile waits for the child caches after a (re)start.
const CACHE_WAIT: Duration = Duration::from_secs(30);

/// Caches of the objects the reconciler reads instead of asking the API server.
#[derive(Clone)]
pub struct Stores {
    /// Code ConfigMaps (data stripped).
    pub config_maps: Store<ConfigMap>,
    /// Deployments (spec stripped, status kept).
    pub deployments: Store<Deployment>,
    /// Services.
    pub services: Store<Service>,
    /// HPAs.
    pub hpas: Store<HorizontalPodAutoscaler>,
    /// Function pods (spec stripped, status kept).
    pub pods: Store<Pod>,
    /// Build Jobs (spec stripped, status kept).
    pub jobs: Store<Job>,
}

/// What every reconcile shares.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Current config; replaced when the kubeless-config ConfigMap changes.
    pub config: Arc<RwLock<Arc<ControllerConfig>>>,
    /// Child caches.
    pub stores: Stores,
    /// True once every child cache is filled (see [`Stores::signal_filled`]).
    pub caches_filled: tokio::sync::watch::Receiver<bool>,
    /// Event publisher.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: ControllerMetrics,
    /// Retry delays of failing Functions.
    pub backoff: kubeless_service::Backoff,
    /// Cancelled when the controller stops (or restarts its watches).
    pub stopping: tokio_util::sync::CancellationToken,
    /// Functions woken from zero and not ready yet, with when (for the wake-time metric).
    pub waking: std::sync::Mutex<std::collections::HashMap<(String, String), Instant>>,
    /// Build Events already published (`namespace/name/hash/reason`): a reconcile that reads
    /// a Function before its new status reached the cache does not announce a build twice.
    pub build_events: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The warm pool, when one is configured.
    pub warm: Option<Arc<crate::warm::Warm>>,
}

impl Context {
    /// The build step's settings now.
    pub(crate) fn config_build(&self) -> crate::config::BuildSettings {
        self.config().build.clone()
    }

    fn config(&self) -> Arc<ControllerConfig> {
        match self.config.read() {
            Ok(c) => c.clone(),
            // A panic while swapping the Arc cannot leave it half-written.
            Err(e) => e.into_inner().clone(),
        }
    }

    async fn caches_ready(&self) {
        let mut ready = self.caches_filled.clone();
        // A stop must not wait for caches that may never fill (a watch the server refuses).
        tokio::select! {
            r = tokio::time::timeout(CACHE_WAIT, ready.wait_for(|filled| *filled)) => if r.is_err() {
                tracing::warn!("child caches not ready after {CACHE_WAIT:?}; reconciling anyway");
            },
            _ = self.stopping.cancelled() => {}
        }
    }
}

impl Stores {
    /// Flips `filled` to true once every child cache holds its first full list.
    ///
    /// One task waits here, and reconciles wait on the watch channel. `Store::wait_until_ready`
    /// (kube-runtime 5.0) wakes only the task that polled it last: with many reconciles waiting
    /// on it at once, all but one slept until their timeout (30 s after a restart with a
    /// backlog of Functions).
    pub async fn signal_filled(self, filled: tokio::sync::watch::Sender<bool>) {
        let _ = self.config_maps.wait_until_ready().await;
        let _ = self.deployments.wait_until_ready().await;
        let _ = self.services.wait_until_ready().await;
        let _ = self.hpas.wait_until_ready().await;
        let _ = self.pods.wait_until_ready().await;
        let _ = self.jobs.wait_until_ready().await;
        let _ = filled.send(true);
    }
}

/// Reconciles one Function (the `Controller::run` callback). The watch is guarded: a Function
/// that does not deserialize arrives as an error and is marked `InvalidSpec` instead of
/// stopping the watch of every other Function.
pub async fn reconcile(
    guard: Arc<DeserializeGuard<Function>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let key = key_of(&guard);
    let result = match &guard.0 {
        Ok(f) => reconcile_function(Arc::new(f.clone()), Arc::clone(&ctx)).await,
        Err(bad) => reconcile_invalid(bad, &ctx).await,
    };
    if result.is_ok() {
        ctx.backoff.reset(&key.0, &key.1);
    }
    result
}

fn key_of(guard: &DeserializeGuard<Function>) -> (String, String) {
    (
        guard.meta().namespace.clone().unwrap_or_default(),
        guard.meta().name.clone().unwrap_or_default(),
    )
}

#[tracing::instrument(skip_all, fields(function = %f.name_any(), namespace = f.namespace().unwrap_or_default()))]
async fn reconcile_function(f: Arc<Function>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let ns = f
        .namespace()
        .ok_or_else(|| Error::NoNamespace(f.name_any()))?;
    ctx.caches_ready().await;
    if ctx.stopping.is_cancelled() {
        // Stopping: the next leader (or start) reconciles it.
        return Ok(Action::await_change());
    }
    let api: Api<Function> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FUNCTION_FINALIZER, f, |event| async {
        match event {
            Finalizer::Apply(f) => apply(&f, &ctx).await,
            Finalizer::Cleanup(f) => cleanup(&f, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics.observe(started.elapsed());
    result
}

/// A Function that does not deserialize: `Ready=False` `InvalidSpec` and a Warning Event;
/// when it is being deleted, its children are still cleaned up (they are found by name and
/// owner uid, which the metadata carries) so the finalizer does not hold it forever.
#[tracing::instrument(skip_all, fields(function = bad.metadata.name.as_deref().unwrap_or_default()))]
async fn reconcile_invalid(bad: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    ctx.metrics.error(reasons::INVALID_SPEC);
    let ns = bad
        .metadata
        .namespace
        .clone()
        .ok_or_else(|| Error::NoNamespace(bad.metadata.name.clone().unwrap_or_default()))?;
    let name = bad.metadata.name.clone().unwrap_or_default();
    if bad.metadata.deletion_timestamp.is_some() {
        // kube's finalizer helper over the metadata alone (the spec is what does not
        // deserialize): it runs the cleanup only while our finalizer is there, then removes it.
        let meta = Arc::new(bad.metadata.clone().into_request_partial::<Function>());
        let api: Api<PartialObjectMeta<Function>> = Api::namespaced(ctx.client.clone(), &ns);
        return finalizer(&api, FUNCTION_FINALIZER, meta, |event| async move {
            match event {
                Finalizer::Cleanup(_) => {
                    ctx.caches_ready().await;
                    let shell = Function {
                        metadata: bad.metadata.clone(),
                        spec: FunctionSpec::default(),
                        status: None,
                    };
                    let action = cleanup(&shell, ctx).await?;
                    // The helper removes the finalizer next.
                    ctx.metrics.write("Function", "finalizer");
                    Ok(action)
                }
                // Not reached while the object is being deleted.
                Finalizer::Apply(_) => Ok(Action::await_change()),
            }
        })
        .await
        .map_err(|e| Error::Finalizer(Box::new(e)));
    }
    ctx.metrics.write("Function/status", "patch");
    kubeless_service::report_invalid::<Function>(&ctx.client, &ctx.recorder, bad, FIELD_MANAGER)
        .await
        .map_err(|source| Error::Status {
            namespace: ns,
            name,
            source,
        })?;
    Ok(Action::await_change())
}

/// What to do after a failed reconcile: count it and retry with exponential backoff per
/// Function (1 s doubling up to 5 min, reset by the next successful reconcile), so a write the
/// server keeps refusing does not turn into a request every few seconds.
pub fn error_policy(f: Arc<DeserializeGuard<Function>>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(err.metric_label());
    let (ns, name) = key_of(&f);
    let delay = ctx.backoff.next(&ns, &name);
    tracing::warn!(function = %f.name_any(), error = %err, source = ?std::error::Error::source(err), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

async fn apply(f: &Function, ctx: &Context) -> Result<Action, Error> {
    let cfg = ctx.config();
    let built = ScaleToZero::effective(f.spec.scale_to_zero.as_ref(), cfg.scale_to_zero)
        .map_err(|e| builders::BuildError::InvalidSpec {
            field: "scaleToZero",
            message: e.to_string(),
        })
        .and_then(|effective| Ok((effective, builders::build(f, &cfg)?)));
    let (effective, desired) = match built {
        Ok(d) => d,
        Err(e) => {
            // A spec problem is the user's to fix: report it, do not retry in a loop.
            ctx.metrics.error(e.reason());
            let cond = Condition::not_ready(e.reason(), e.to_string());
            write_status(f, ctx, cond, None, None).await?;
            return Ok(Action::await_change());
        }
    };
    let decision = scale::decide(f, effective, k8s_openapi::jiff::Timestamp::now());
    let min_replicas = effective.and_then(|e| e.min_replicas);
    let mut desired = builders::with_scale(desired, decision.at_zero, min_replicas);
    // The build step: the Deployment runs the built image once it exists; until then a running
    // Deployment keeps its previous image and a new one is not created.
    let build = match desired.build.clone() {
        Some(plan) => Some(crate::building::ensure(f, ctx, &plan).await?),
        None => None,
    };
    if let Some(crate::building::Outcome::Ready(b)) = &build {
        // The function's pods pull the built image with the registry Secret the build pushed
        // with, when there is one.
        let access = crate::building::registry_secret(ctx, &f.namespace().unwrap_or_default())
            .await?
            .access;
        let pull_secret = access.secret.filter(|_| access.docker_config);
        desired = builders::with_built_image(
            desired,
            b.image.as_deref().unwrap_or_default(),
            pull_secret.as_deref(),
        );
    }
    let hold = matches!(
        build,
        Some(crate::building::Outcome::Building(_) | crate::building::Outcome::Failed(_))
    );
    if decision.transition == Some(scale::Transition::Woken) && !hold {
        warm_start(f, ctx, &desired).await;
    }
    if let Err(e) = apply_children(f, ctx, &desired, hold).await {
        // What the server refused (invalid child, quota, admission webhook, conflict) is shown
        // on the Function with the server's own message; the error then backs off.
        if let Some(message) = e.refusal_message() {
            let cond = Condition::not_ready(reasons::APPLY_FAILED, message);
            if let Err(status_err) = write_status(f, ctx, cond, None, None).await {
                tracing::warn!(error = %status_err, "recording the refused write failed");
            }
        }
        return Err(e);
    }

    let ns = f.namespace().unwrap_or_default();
    let name = f.name_any();
    let key = ObjectRef::<Deployment>::new(&name).within(&ns);
    let dep = ctx.stores.deployments.get(&key);
    if desired.hpa.is_some() {
        let running = dep
            .as_deref()
            .and_then(|d| d.status.as_ref())
            .and_then(|s| s.replicas);
        let wanted = if decision.at_zero {
            // Also after a restart that found the Deployment still running.
            (running.unwrap_or(0) > 0 || decision.transition.is_some()).then_some(0)
        } else {
            decision
                .transition
                .is_some()
                .then(|| builders::wake_replicas(&desired, min_replicas))
        };
        if let Some(n) = wanted {
            set_replicas(ctx, &ns, &name, n).await?;
        }
    }
    let (replicas, ready_replicas, ready) = dep
        .as_deref()
        .map(diagnose::deployment_readiness)
        .unwrap_or((0, 0, false));
    let waking_key = (ns.clone(), name.clone());
    if ready_replicas > 0 && !decision.at_zero {
        let woke = ctx
            .waking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&waking_key);
        if let Some(t) = woke {
            ctx.metrics.wake_duration.observe(t.elapsed().as_secs_f64());
        }
    }
    if ready_replicas > 0 || decision.at_zero {
        warm_release(f, ctx).await?;
    }
    let cond = if let Some(crate::building::Outcome::Failed(b)) = &build {
        Condition::not_ready(reasons::BUILD_FAILED, b.message.clone().unwrap_or_default())
    } else if let (Some(crate::building::Outcome::Building(b)), false) = (&build, ready) {
        Condition::not_ready(
            reasons::BUILDING,
            format!(
                "building {} (Job {})",
                b.image.as_deref().unwrap_or_default(),
                b.job.as_deref().unwrap_or_default()
            ),
        )
    } else if decision.at_zero {
        Condition::ready(
            reasons::SCALED_TO_ZERO,
            decision
                .condition
                .as_ref()
                .and_then(|c| c.message.clone())
                .unwrap_or_default(),
        )
    } else if ready {
        Condition::ready(
            reasons::RECONCILED,
            format!("{ready_replicas}/{replicas} replicas ready"),
        )
    } else if let Some(message) = dep.as_deref().and_then(diagnose::replica_failure) {
        Condition::not_ready(reasons::PODS_REFUSED, message)
    } else {
        match current_failure(f, ctx, &desired).await {
            Some((reason, message)) => Condition::not_ready(reason, message),
            None => Condition::not_ready(
                reasons::PROGRESSING,
                format!("waiting for the Deployment: {ready_replicas}/{replicas} replicas ready"),
            ),
        }
    };
    let extra = StatusExtra {
        replicas: Some(replicas),
        ready_replicas: Some(ready_replicas),
        url: desired.url.clone(),
        image: desired.image.clone(),
        build: build.as_ref().map(|b| b.status().clone()),
        warm_pod: ctx.warm.as_ref().and_then(|w| w.claimed(&ns, &name)),
    };
    write_status(f, ctx, cond, Some(extra), Some(&decision)).await?;
    if let Some(t) = &decision.transition {
        report_transition(ctx, f, t, waking_key).await;
    }
    let resync = if matches!(build, Some(crate::building::Outcome::Failed(_))) {
        // Nothing changes until the Function does (or the Job is deleted to retry).
        READY_RESYNC
    } else if ready || decision.at_zero {
        READY_RESYNC
    } else {
        PENDING_RESYNC
    };
    Ok(Action::requeue(
        decision.recheck.map_or(resync, |r| r.min(resync)),
    ))
}

/// Moves the replica count of a Deployment an HPA manages, through its scale subresource (as
/// the HPA itself does): to zero when idle, back when woken. At zero replicas the HPA stands
/// aside (ScalingActive=False) until the count is above zero again.
async fn set_replicas(ctx: &Context, ns: &str, name: &str, replicas: i32) -> Result<(), Error> {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    ctx.metrics.write("Deployment/scale", "patch");
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Apply {
            kind: "Deployment/scale",
            namespace: ns.to_string(),
            name: name.to_string(),
            source,
        })?;
    Ok(())
}

/// The Event and metric of a scale-to-zero transition.
async fn report_transition(
    ctx: &Context,
    f: &Function,
    t: &scale::Transition,
    key: (String, String),
) {
    let (reason, note) = match t {
        scale::Transition::ScaledDown { idle_after } => {
            ctx.metrics.scaled_to_zero.inc();
            (
                kubeless_api::scale::reasons::IDLE,
                format!(
                    "scaled to zero after {} without calls or events",
                    scale::humanize(*idle_after)
                ),
            )
        }
        scale::Transition::Woken => {
            ctx.metrics.wakes.inc();
            ctx.waking
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, Instant::now());
            (
                kubeless_api::scale::reasons::WOKEN,
                "a call or an event is waiting: scaling up from zero".to_string(),
            )
        }
        scale::Transition::Disabled => (
            kubeless_api::scale::reasons::WOKEN,
            "scale to zero was switched off: scaling up from zero".to_string(),
        ),
    };
    tracing::info!(reason, note, "scale to zero");
    publish(ctx, f, EventType::Normal, reason, &note).await;
}

/// Applies each child whose applied hash differs from the desired one, and removes an HPA
/// the Function no longer asks for.
/// `hold_deployment`: leave the Deployment as it is (its image is being built).
async fn apply_children(
    f: &Function,
    ctx: &Context,
    d: &Desired,
    hold_deployment: bool,
) -> Result<(), Error> {
    let s = &ctx.stores;
    // What the pods need comes first: the code ConfigMap they mount and the Service that
    // routes to them. A refusal stops here, so a Deployment never runs pods nobody can reach
    // (a Service without pods is harmless); the condition names the refused child and the
    // next reconcile (backoff) completes the rest.
    apply_if_changed(ctx, &s.config_maps, &d.config_map, "ConfigMap").await?;
    apply_if_changed(ctx, &s.services, &d.service, "Service").await?;
    if !hold_deployment {
        apply_if_changed(ctx, &s.deployments, &d.deployment, "Deployment").await?;
    }
    if let Some(hpa) = &d.hpa {
        apply_if_changed(ctx, &s.hpas, hpa, "HorizontalPodAutoscaler").await?;
    }
    let keep = d.hpa.as_ref().map(|h| h.name_any());
    for stale in owned_hpas(f, ctx) {
        if Some(stale.name_any()) != keep {
            delete_child::<HorizontalPodAutoscaler>(
                ctx,
                "HorizontalPodAutoscaler",
                &stale.name_any(),
                f,
            )
            .await?;
        }
    }
    Ok(())
}

fn owned_hpas(f: &Function, ctx: &Context) -> Vec<Arc<HorizontalPodAutoscaler>> {
    let uid = f.uid().unwrap_or_default();
    let ns = f.namespace();
    ctx.stores
        .hpas
        .state_filter(|h| h.namespace() == ns && h.owner_references().iter().any(|o| o.uid == uid))
}

async fn apply_if_changed<K>(
    ctx: &Context,
    store: &Store<K>,
    desired: &K,
    kind: &'static str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let name = desired.name_any();
    let ns = desired.namespace().unwrap_or_default();
    let live = store.get(&ObjectRef::new(&name).within(&ns));
    let want = builders::applied_hash(desired);
    if live.as_deref().and_then(builders::applied_hash) == want && want.is_some() {
        return Ok(());
    }
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.metrics.write(kind, "apply");
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(desired),
    )
    .await
    .map_err(|source| Error::Apply {
        kind,
        namespace: ns.clone(),
        name: name.clone(),
        source,
    })?;
    tracing::debug!(kind, name, "applied");
    Ok(())
}

pub(crate) async fn delete_child<K>(
    ctx: &Context,
    kind: &'static str,
    name: &str,
    f: &Function,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let ns = f.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.metrics.write(kind, "delete");
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        // Already gone: cleanup is idempotent.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            namespace: ns,
            name: name.to_string(),
            source,
        }),
    }
}

/// Deletes every child (owner references would too, but not every cluster runs the garbage
/// collector promptly, and Kubeless deleted them explicitly).
/// On a wake, runs the Function on a warm pool pod until its own pod is ready (when a pool is
/// configured for its runtime and the Function qualifies). A failure only costs the head start.
async fn warm_start(f: &Function, ctx: &Context, desired: &builders::Desired) {
    let Some(warm) = &ctx.warm else {
        return;
    };
    match crate::warm::claim(warm, f, desired).await {
        Ok(Some(c)) => {
            // The claim's label patch on the pool pod.
            ctx.metrics.write("Pod", "patch");
            ctx.metrics.warm_starts.inc();
            ctx.metrics.warm_start_duration.observe(c.ready_ms / 1000.0);
            publish(
                ctx,
                f,
                EventType::Normal,
                crate::warm::WARM_START,
                &format!(
                    "answering from warm pool pod {} (ready in {:.0} ms) until its own pod is ready",
                    c.pod, c.ready_ms
                ),
            )
            .await;
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "warm start failed; waiting for the function's own pod");
            publish(
                ctx,
                f,
                EventType::Warning,
                crate::warm::WARM_START_FAILED,
                &format!("{e}; waiting for the function's own pod"),
            )
            .await;
        }
    }
}

/// Removes the Function's warm pool pod, if it has one (its own pod is ready, it is back at
/// zero, or it is being deleted).
async fn warm_release(f: &Function, ctx: &Context) -> Result<(), Error> {
    match &ctx.warm {
        Some(warm) => crate::warm::release(warm, f).await.map_err(Error::Warm),
        None => Ok(()),
    }
}

async fn cleanup(f: &Function, ctx: &Context) -> Result<Action, Error> {
    warm_release(f, ctx).await?;
    let name = f.name_any();
    let ns = f.namespace().unwrap_or_default();
    for hpa in owned_hpas(f, ctx) {
        delete_child::<HorizontalPodAutoscaler>(ctx, "HorizontalPodAutoscaler", &hpa.name_any(), f)
            .await?;
    }
    // Only delete what this Function owns: a same-named object someone else made stays.
    let owned = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        refs.iter().any(|o| Some(&o.uid) == f.uid().as_ref())
    };
    let n = name.clone();
    let s = &ctx.stores;
    let cm = s.config_maps.get(&ObjectRef::new(&n).within(&ns));
    if cm.as_deref().is_none_or(|o| owned(o.owner_references())) {
        delete_child::<ConfigMap>(ctx, "ConfigMap", &name, f).await?;
    }
    let dep = s.deployments.get(&ObjectRef::new(&n).within(&ns));
    if dep.as_deref().is_none_or(|o| owned(o.owner_references())) {
        delete_child::<Deployment>(ctx, "Deployment", &name, f).await?;
    }
    let svc = s.services.get(&ObjectRef::new(&n).within(&ns));
    if svc.as_deref().is_none_or(|o| owned(o.owner_references())) {
        delete_child::<Service>(ctx, "Service", &name, f).await?;
    }
    for job in crate::building::owned_jobs(f, ctx) {
        delete_child::<Job>(ctx, "Job", &job.name_any(), f).await?;
    }
    tracing::info!(function = %name, namespace = %ns, "deleted the function's objects");
    Ok(Action::await_change())
}

/// The failure of the function's current pods, as (reason, message).
async fn current_failure(
    f: &Function,
    ctx: &Context,
    d: &Desired,
) -> Option<(&'static str, String)> {
    let name = f.name_any();
    let ns = f.namespace();
    let content_hash = d
        .deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(CONTENT_HASH))
        .cloned();
    // Only pods of the current code: an old pod's failure says nothing about the new one.
    let pods = ctx.stores.pods.state_filter(|p| {
        p.namespace() == ns
            && p.labels().get(FUNCTION) == Some(&name)
            && p.metadata.deletion_timestamp.is_none()
            && p.annotations().get(CONTENT_HASH) == content_hash.as_ref()
    });
    let failure = diagnose::find_failure(pods.iter().map(Arc::as_ref))?;
    let text = failure_text(ctx, f, &failure).await;
    let reason = diagnose::classify(&failure, &text);
    let message = format!(
        "{} container {:?} of pod {} exited with {}: {}",
        if failure.init { "init" } else { "runtime" },
        failure.container,
        failure.pod,
        failure.exit_code,
        diagnose::tail(&text)
    );
    Some((reason, message))
}

/// The termination message, else the tail of the container's log.
async fn failure_text(ctx: &Context, f: &Function, failure: &Failure) -> String {
    if let Some(m) = &failure.message {
        return m.clone();
    }
    // The same failure is already reported with its output: no need to read the log again.
    if let Some(c) = f
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, READY))
        && let Some(m) = c.message.as_deref()
        && m.contains(&format!("{:?} of pod {} ", failure.container, failure.pod))
        && let Some((_, text)) = m.split_once(&format!("exited with {}: ", failure.exit_code))
        && !text.trim().is_empty()
    {
        return text.to_string();
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &f.namespace().unwrap_or_default());
    // A restarted container's current log may still be empty: then the previous one tells.
    for previous in [failure.previous, !failure.previous] {
        let params = LogParams {
            container: Some(failure.container.clone()),
            previous,
            tail_lines: Some(20),
            ..LogParams::default()
        };
        match api.logs(&failure.pod, &params).await {
            Ok(log) if !log.trim().is_empty() => return log,
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, previous, "reading the failed container's log"),
        }
    }
    String::new()
}

struct StatusExtra {
    replicas: Option<i32>,
    ready_replicas: Option<i32>,
    url: String,
    image: String,
    build: Option<kubeless_api::build::BuildStatus>,
    warm_pod: Option<String>,
}

/// Writes status only when something other than timestamps changed; publishes a Warning
/// Event when the Ready reason turns into a failure.
async fn write_status(
    f: &Function,
    ctx: &Context,
    cond: Condition,
    extra: Option<StatusExtra>,
    scale: Option<&scale::Decision>,
) -> Result<(), Error> {
    let old = f.status.clone().unwrap_or_default();
    let mut new = old.clone();
    let generation = f.metadata.generation;
    let old_reason = find_condition(&old.conditions, READY).and_then(|c| c.reason.clone());
    let failing = !cond.is_true()
        && cond.reason.as_deref() != Some(reasons::PROGRESSING)
        && cond.reason.as_deref() != Some(reasons::BUILDING);
    let event = (failing && old_reason != cond.reason).then(|| {
        (
            cond.reason.clone().unwrap_or_default(),
            cond.message.clone().unwrap_or_default(),
        )
    });
    set_condition(&mut new.conditions, cond.with_generation(generation));
    new.observed_generation = generation;
    if let Some(d) = scale {
        match &d.condition {
            Some(c) => {
                set_condition(&mut new.conditions, c.clone().with_generation(generation));
            }
            None => new.conditions.retain(|c| c.type_ != SCALED_TO_ZERO),
        }
        new.last_activity.clone_from(&d.last_activity);
    }
    match extra {
        Some(x) => {
            new.replicas = x.replicas;
            new.ready_replicas = x.ready_replicas;
            new.url = Some(x.url);
            new.image = Some(x.image);
            new.build = x.build;
            new.warm_pod = x.warm_pod;
        }
        None => {
            new.replicas = None;
            new.ready_replicas = None;
        }
    }
    if new != old {
        let name = f.name_any();
        let ns = f.namespace().unwrap_or_default();
        let api: Api<Function> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = status_patch(&old, &new);
        ctx.metrics.write("Function/status", "patch");
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Status {
                namespace: ns,
                name,
                source,
            })?;
    }
    if let Some((reason, note)) = event {
        publish(ctx, f, EventType::Warning, &reason, &note).await;
    }
    Ok(())
}

#[derive(Serialize, Debug)]
struct StatusPatch<'a> {
    status: &'a FunctionStatus,
}

/// The merge patch turning `old` into `new`. Absent optional fields are left out of the JSON,
/// which a merge patch reads as "keep": the build status's fields that went away (a reused image
/// has no Job, a new build no message yet) and a build status that went away are sent as null.
fn status_patch(old: &FunctionStatus, new: &FunctionStatus) -> serde_json::Value {
    let mut patch = serde_json::to_value(StatusPatch { status: new }).unwrap_or_default();
    let Some(status) = patch.get_mut("status").and_then(|s| s.as_object_mut()) else {
        return patch;
    };
    match (
        &old.build,
        status.get_mut("build").and_then(|b| b.as_object_mut()),
    ) {
        (_, Some(build)) => {
            for key in ["image", "job", "message"] {
                build.entry(key).or_insert(serde_json::Value::Null);
            }
        }
        (Some(_), None) => {
            status.insert("build".into(), serde_json::Value::Null);
        }
        (None, None) => {}
    }
    if old.warm_pod.is_some() && new.warm_pod.is_none() {
        status.insert("warmPod".into(), serde_json::Value::Null);
    }
    patch
}

pub(crate) async fn publish(
    ctx: &Context,
    f: &Function,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    ctx.metrics.write("Event", "create");
    if let Err(e) = ctx.recorder.publish(&ev, &f.object_ref(&())).await {
        // Events are best effort: a missing permission must not block the status.
        tracing::warn!(error = %e, "publishing an Event failed");
    }
}

/// Maps a child object to the Function named by its `function` label (pods are not owned by
/// the Function directly).
pub fn function_of<K: Resource, F: Resource<DynamicType = ()>>(obj: &K) -> Option<ObjectRef<F>> {
    let name = obj.meta().labels.as_ref()?.get(FUNCTION)?;
    let ns = obj.meta().namespace.as_deref()?;
    Some(ObjectRef::new(name).within(ns))
}

/// Drops what the reconciler never reads, so 1,000 functions stay cheap in memory.
pub fn strip_meta<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        // Keep only our own annotations; `last-applied-configuration` can be as big as the spec.
        let keep: BTreeMap<String, String> = a
            .iter()
            .filter(|(k, _)| *k == APPLIED_HASH || *k == CONTENT_HASH)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        *a = keep;
    }
}

#[cfg(test)]
mod tests {
    use kubeless_api::build::BuildStatus;

    use super::*;

    #[test]
    fn a_status_patch_clears_build_fields_that_went_away() {
        let built = |job: Option<&str>| FunctionStatus {
            build: Some(BuildStatus {
                state: "Built".into(),
                hash: "h".into(),
                image: Some("r/x:h".into()),
                job: job.map(str::to_string),
                message: None,
            }),
            ..FunctionStatus::default()
        };
        let p = status_patch(&built(Some("x-build-1")), &built(None));
        assert_eq!(p["status"]["build"]["job"], serde_json::Value::Null);
        assert_eq!(p["status"]["build"]["image"], "r/x:h");
        // A function whose build step was switched off drops the whole build status.
        let p = status_patch(&built(Some("j")), &FunctionStatus::default());
        assert_eq!(p["status"]["build"], serde_json::Value::Null);
        // Never built: nothing about builds in the patch.
        let p = status_patch(&FunctionStatus::default(), &FunctionStatus::default());
        assert!(p["status"].get("build").is_none());
    }
}
