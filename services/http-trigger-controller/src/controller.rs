//! The reconciler: read the function and its Service, build the Ingress with the pure builder,
//! apply it by server-side apply, then write the trigger's status.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    core::DeserializeGuard,
    runtime::{
        Controller,
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use kubeless_api::{
    Condition, Function, HttpTrigger, HttpTriggerStatus,
    conditions::{READY, find_condition, reasons, set_condition},
    labels::{CREATED_BY, CREATED_BY_VALUE},
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::ingress::{self, BuildError, FunctionPort};
use crate::metrics::ControllerMetrics;

use crate::claims::{HostPolicy, refusals};

/// The one field manager of every write.
pub const FIELD_MANAGER: &str = "kubeless-http-trigger-controller";
/// Requeue of a ready trigger (a safety net; the watches do the real work).
const READY_RESYNC: Duration = Duration::from_secs(600);
/// Requeue while the function is missing (its watch usually fires first).
const MISSING_RESYNC: Duration = Duration::from_secs(120);

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: ControllerMetrics,
    /// Retry delays of failing triggers.
    pub backoff: kubeless_service::Backoff,
    /// Every watched trigger, for the host claims.
    pub triggers: Store<DeserializeGuard<HttpTrigger>>,
    /// Which namespace may route which host.
    pub hosts: Arc<HostPolicy>,
}

/// Runs the controller until `shutdown` is cancelled.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    instance: Option<String>,
    metrics: ControllerMetrics,
    hosts: Arc<HostPolicy>,
    shutdown: CancellationToken,
) {
    // Triggers and Functions are watched guarded: one object that does not deserialize costs
    // only itself (it is marked InvalidSpec) instead of stopping the whole watch.
    type Guarded<K> = DeserializeGuard<K>;
    fn api_of<K>(c: &Client, ns: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match ns {
            Some(ns) => Api::namespaced(c.clone(), ns),
            None => Api::all(c.clone()),
        }
    }
    let ns = namespace.as_deref();
    let triggers: Api<Guarded<HttpTrigger>> = api_of(&client, ns);
    let functions: Api<Guarded<Function>> = api_of(&client, ns);
    let services: Api<Service> = api_of(&client, ns);
    let ingresses: Api<Ingress> = api_of(&client, ns);
    let controller = Controller::new(triggers, watcher::Config::default());
    let store = controller.store();
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance,
            },
        ),
        metrics,
        backoff: kubeless_service::Backoff::default(),
        triggers: store.clone(),
        hosts,
    });
    let by_function = store.clone();
    let by_service = store;
    controller
        // Only the Ingresses we made: labelled like every Kubeless child.
        .owns(
            ingresses,
            watcher::Config::default().labels(&format!("{CREATED_BY}={CREATED_BY_VALUE}")),
        )
        .watches(
            functions,
            watcher::Config::default(),
            move |f: Guarded<Function>| {
                triggers_of(&by_function, f.namespace().as_deref(), &f.name_any())
            },
        )
        .watches(
            services,
            watcher::Config::default().labels(&format!("{CREATED_BY}={CREATED_BY_VALUE}")),
            move |s: Service| triggers_of(&by_service, s.namespace().as_deref(), &s.name_any()),
        )
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
}

/// The triggers in `namespace` that name `function`.
pub fn triggers_of(
    store: &Store<DeserializeGuard<HttpTrigger>>,
    namespace: Option<&str>,
    function: &str,
) -> Vec<ObjectRef<DeserializeGuard<HttpTrigger>>> {
    store
        .state()
        .iter()
        .filter(|g| {
            g.0.as_ref().is_ok_and(|t| {
                t.namespace().as_deref() == namespace && t.spec.function_name.trim() == function
            })
        })
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect()
}

/// What to do after a failed reconcile: count it and retry with exponential backoff per
/// trigger (1 s doubling up to 5 min, reset by the next success).
pub fn error_policy(
    t: Arc<DeserializeGuard<HttpTrigger>>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.result(err.metric_label());
    let delay = ctx
        .backoff
        .next(&t.namespace().unwrap_or_default(), &t.name_any());
    tracing::warn!(trigger = %t.name_any(), error = %err, source = ?std::error::Error::source(err), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The `Controller::run` callback: a trigger that does not deserialize is marked InvalidSpec
/// (with the deserialization message and a Warning Event); a valid one is reconciled.
pub async fn reconcile(
    guard: Arc<DeserializeGuard<HttpTrigger>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let (ns, name) = (guard.namespace().unwrap_or_default(), guard.name_any());
    let result = match &guard.0 {
        Ok(t) => reconcile_trigger(Arc::new(t.clone()), Arc::clone(&ctx)).await,
        Err(bad) => {
            ctx.metrics.result(reasons::INVALID_SPEC);
            kubeless_service::report_invalid::<HttpTrigger>(
                &ctx.client,
                &ctx.recorder,
                bad,
                FIELD_MANAGER,
            )
            .await
            .map_err(|source| Error::Api {
                action: "marking InvalidSpec",
                kind: "HTTPTrigger",
                namespace: ns.clone(),
                name: name.clone(),
                source,
            })
            .map(|()| Action::await_change())
        }
    };
    if result.is_ok() {
        ctx.backoff.reset(&ns, &name);
    }
    result
}

/// Reconciles one HTTPTrigger.
#[tracing::instrument(skip_all, fields(trigger = %t.name_any(), namespace = t.namespace().unwrap_or_default()))]
async fn reconcile_trigger(t: Arc<HttpTrigger>, ctx: Arc<Context>) -> Result<Action, Error> {
    if t.meta().deletion_timestamp.is_some() {
        // The Ingress goes with it through its owner reference.
        return Ok(Action::await_change());
    }
    let ns = t
        .namespace()
        .ok_or_else(|| Error::NoNamespace(t.name_any()))?;
    let action = apply(&t, &ns, &ctx).await?;
    ctx.metrics.result("ok");
    Ok(action)
}

async fn apply(t: &HttpTrigger, ns: &str, ctx: &Context) -> Result<Action, Error> {
    // Another namespace's host: no Ingress (fail closed: one made before the conflict goes).
    let all: Vec<Arc<DeserializeGuard<HttpTrigger>>> = ctx.triggers.state();
    let valid = all.iter().filter_map(|g| g.0.as_ref().ok());
    if let Some(r) = refusals(valid, &ctx.hosts).remove(&(ns.to_string(), t.name_any())) {
        delete_owned_ingress(t, ns, ctx).await?;
        write_status(
            t,
            ctx,
            Condition::not_ready(reasons::ROUTE_CONFLICT, r.message()),
            None,
        )
        .await?;
        // The owner's trigger going away is not a change of this one: look again later.
        return Ok(Action::requeue(MISSING_RESYNC));
    }
    if let Err(e) = ingress::validate(t) {
        if e == BuildError::BasicAuthUnsupported {
            // Fail closed: an Ingress from before the secret was added would expose the
            // function without authentication.
            delete_owned_ingress(t, ns, ctx).await?;
        }
        write_status(
            t,
            ctx,
            Condition::not_ready(e.reason(), e.to_string()),
            None,
        )
        .await?;
        return Ok(Action::await_change());
    }

    let fname = t.spec.function_name.trim().to_string();
    let functions: Api<Function> = Api::namespaced(ctx.client.clone(), ns);
    let function = functions
        .get_opt(&fname)
        .await
        .map_err(api_err("reading", "Function", ns, &fname))?;
    let Some(function) = function else {
        // The Ingress (if any) stays: the function may be on its way (e.g. redeployed).
        let msg = format!("function {fname} not found in namespace {ns}");
        write_status(
            t,
            ctx,
            Condition::not_ready(reasons::FUNCTION_NOT_FOUND, msg),
            None,
        )
        .await?;
        return Ok(Action::requeue(MISSING_RESYNC));
    };

    let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let service = services
        .get_opt(&fname)
        .await
        .map_err(api_err("reading", "Service", ns, &fname))?;
    let port = FunctionPort::resolve(service.as_ref(), Some(&function));
    let desired = match ingress::build_ingress(t, &port) {
        Ok(i) => i,
        Err(e) => {
            write_status(
                t,
                ctx,
                Condition::not_ready(e.reason(), e.to_string()),
                None,
            )
            .await?;
            return Ok(Action::await_change());
        }
    };

    let name = t.name_any();
    let ingresses: Api<Ingress> = Api::namespaced(ctx.client.clone(), ns);
    let applied = match ingresses
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
    {
        Ok(i) => i,
        Err(source) => {
            let err = api_err("applying", "Ingress", ns, &name)(source);
            write_status(
                t,
                ctx,
                Condition::not_ready(reasons::APPLY_FAILED, err_chain(&err)),
                None,
            )
            .await?;
            return Err(err);
        }
    };

    let url = ingress::trigger_url(t, load_balancer_host(&applied).as_deref());
    let msg = format!(
        "Ingress {name} routes {url} to function {fname} port {}",
        port.port
    );
    write_status(
        t,
        ctx,
        Condition::ready(reasons::RECONCILED, msg),
        Some(url),
    )
    .await?;
    Ok(Action::requeue(READY_RESYNC))
}

/// The first load-balancer address the ingress controller published, if any.
pub fn load_balancer_host(i: &Ingress) -> Option<String> {
    let lb = i
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?;
    lb.iter()
        .find_map(|e| e.hostname.clone().or_else(|| e.ip.clone()))
        .filter(|h| !h.is_empty())
}

async fn delete_owned_ingress(t: &HttpTrigger, ns: &str, ctx: &Context) -> Result<(), Error> {
    let name = t.name_any();
    let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), ns);
    let existing = api
        .get_opt(&name)
        .await
        .map_err(api_err("reading", "Ingress", ns, &name))?;
    let Some(existing) = existing else {
        return Ok(());
    };
    let ours = existing
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == t.metadata.uid.as_ref());
    if ours {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(api_err("deleting", "Ingress", ns, &name)(source)),
        }
    }
    Ok(())
}

fn api_err<'a>(
    action: &'static str,
    kind: &'static str,
    ns: &'a str,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Api {
        action,
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
        source,
    }
}

fn err_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

#[derive(Serialize, Debug)]
struct StatusPatch<'a> {
    status: &'a HttpTriggerStatus,
}

/// Writes status when something other than timestamps changed; publishes a Warning Event when
/// the Ready reason turns into a failure, and a Normal one when it becomes ready.
async fn write_status(
    t: &HttpTrigger,
    ctx: &Context,
    cond: Condition,
    url: Option<String>,
) -> Result<(), Error> {
    let old = t.status.clone().unwrap_or_default();
    let mut new = old.clone();
    let generation = t.metadata.generation;
    let old_cond = find_condition(&old.conditions, READY).cloned();
    let transition = old_cond
        .as_ref()
        .map(|c| (c.status.clone(), c.reason.clone()))
        != Some((cond.status.clone(), cond.reason.clone()));
    let event = transition.then(|| {
        (
            if cond.is_true() {
                EventType::Normal
            } else {
                EventType::Warning
            },
            cond.reason.clone().unwrap_or_default(),
            cond.message.clone().unwrap_or_default(),
        )
    });
    set_condition(&mut new.conditions, cond.with_generation(generation));
    new.observed_generation = generation;
    if url.is_some() {
        new.url = url;
    }
    if new != old {
        let name = t.name_any();
        let ns = t.namespace().unwrap_or_default();
        let api: Api<HttpTrigger> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&StatusPatch { status: &new }),
        )
        .await
        .map_err(api_err("patching status of", "HTTPTrigger", &ns, &name))?;
    }
    if let Some((type_, reason, note)) = event {
        let ev = KubeEvent {
            type_,
            reason,
            note: Some(note.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&ev, &t.object_ref(&())).await {
            // Events are best effort: a missing permission must not block the status.
            tracing::warn!(error = %e, "publishing an Event failed");
        }
    }
    Ok(())
}
