//! The reconciler: validate the trigger, read its function, then either apply the CronJob
//! (CronJob mode) or hand the schedule to the in-process scheduler (scheduler mode), and write
//! the trigger's status and Events.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::core::DeserializeGuard;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
    runtime::{
        Controller,
        controller::Action,
        events::{EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use kubeless_api::{
    Condition, CronJobTrigger, Function,
    conditions::{READY, find_condition, reasons},
    labels::{CREATED_BY, CREATED_BY_VALUE},
};
use tokio_util::sync::CancellationToken;

use crate::cronjob::{self, BuilderConfig, CRONJOB_LABEL};
use crate::error::{Error, api_err};
use crate::metrics::ControllerMetrics;
use crate::schedule::{Precision, Schedule};
use crate::scheduler::{Plan, Scheduler};
use crate::status::{self, LAST_RUN, Owned};

/// The field manager of every write of the reconciler.
pub const FIELD_MANAGER: &str = "kubeless-cronjob-trigger-controller";
/// Requeue of a ready trigger (a safety net; the watches do the real work).
const READY_RESYNC: Duration = Duration::from_secs(600);
/// Requeue while the function is missing (its watch usually fires first).
const MISSING_RESYNC: Duration = Duration::from_secs(120);

/// How scheduled calls are made.
#[derive(Clone)]
pub enum Mode {
    /// A batch/v1 CronJob per trigger.
    CronJob(BuilderConfig),
    /// The in-process scheduler.
    Scheduler(Arc<Scheduler>),
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: ControllerMetrics,
    pub mode: Mode,
    /// Retry delays of failing triggers.
    pub backoff: kubeless_service::Backoff,
    /// Wakes functions that scale to zero before each fire.
    pub wake: Arc<crate::wake::WakeAhead>,
}

/// Runs the controller until `shutdown` is cancelled.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    instance: Option<String>,
    metrics: ControllerMetrics,
    mode: Mode,
    wake: Arc<crate::wake::WakeAhead>,
    shutdown: CancellationToken,
) {
    fn api<K>(c: &Client, ns: Option<&str>) -> Api<K>
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
    let triggers: Api<CronJobTrigger> = api(&client, ns);
    // Guarded: a Function that does not deserialize must not stop this watch (its mapping only
    // needs the metadata, which a malformed object still has).
    let functions: Api<DeserializeGuard<Function>> = api(&client, ns);
    let cronjobs: Api<CronJob> = api(&client, ns);
    let jobs: Api<Job> = api(&client, ns);
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
        mode: mode.clone(),
        backoff: kubeless_service::Backoff::default(),
        wake,
    });
    let controller = Controller::new(triggers, watcher::Config::default());
    let store = controller.store();
    if let Mode::Scheduler(s) = &mode {
        s.set_store(store.clone());
    }
    let by_function = store.clone();
    let by_job = store;
    let ours = format!("{CREATED_BY}={CREATED_BY_VALUE}");
    let mut controller = controller.watches(
        functions,
        watcher::Config::default(),
        move |f: DeserializeGuard<Function>| {
            triggers_of(&by_function, f.namespace().as_deref(), &f.name_any())
        },
    );
    if matches!(mode, Mode::CronJob(_)) {
        controller = controller
            // Only the CronJobs we made.
            .owns(cronjobs, watcher::Config::default().labels(&ours))
            // Finished Jobs give lastResult; they belong to the CronJob, so map by its label.
            .watches(
                jobs,
                watcher::Config::default().labels(CRONJOB_LABEL),
                move |j: Job| trigger_of_job(&by_job, &j),
            );
    }
    controller
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
    store: &Store<CronJobTrigger>,
    namespace: Option<&str>,
    function: &str,
) -> Vec<ObjectRef<CronJobTrigger>> {
    store
        .state()
        .iter()
        .filter(|t| {
            t.namespace().as_deref() == namespace && t.spec.function_name.trim() == function
        })
        .map(|t| ObjectRef::from_obj(t.as_ref()))
        .collect()
}

/// The trigger whose CronJob made `job`.
pub fn trigger_of_job(
    store: &Store<CronJobTrigger>,
    job: &Job,
) -> Option<ObjectRef<CronJobTrigger>> {
    let cj = job.labels().get(CRONJOB_LABEL)?;
    let ns = job.namespace();
    store
        .state()
        .iter()
        .find(|t| t.namespace() == ns && cronjob::cronjob_name(&t.name_any()) == *cj)
        .map(|t| ObjectRef::from_obj(t.as_ref()))
}

/// What to do after a failed reconcile: count it and retry with exponential backoff per
/// trigger (1 s doubling up to 5 min, reset by the next success).
pub fn error_policy(t: Arc<CronJobTrigger>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.result(err.metric_label());
    let delay = ctx
        .backoff
        .next(&t.namespace().unwrap_or_default(), &t.name_any());
    tracing::warn!(trigger = %t.name_any(), error = %err, source = ?std::error::Error::source(err), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Reconciles one CronJobTrigger.
#[tracing::instrument(skip_all, fields(trigger = %t.name_any(), namespace = t.namespace().unwrap_or_default()))]
pub async fn reconcile(t: Arc<CronJobTrigger>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = t
        .namespace()
        .ok_or_else(|| Error::NoNamespace(t.name_any()))?;
    if t.meta().deletion_timestamp.is_some() {
        // The CronJob goes with it through its owner reference; the scheduler drops it itself.
        if let Mode::Scheduler(s) = &ctx.mode {
            s.remove(&ns, &t.name_any());
        }
        ctx.wake.remove(&ns, &t.name_any());
        return Ok(Action::await_change());
    }
    let action = match &ctx.mode {
        Mode::CronJob(cfg) => reconcile_cronjob(&t, &ns, cfg, &ctx).await?,
        Mode::Scheduler(s) => reconcile_scheduled(&t, &ns, s, &ctx).await?,
    };
    ctx.wake.upsert(&ns, &t);
    ctx.metrics.result("ok");
    ctx.backoff.reset(&ns, &t.name_any());
    Ok(action)
}

async fn get_function(ctx: &Context, ns: &str, name: &str) -> Result<Option<Function>, Error> {
    let functions: Api<Function> = Api::namespaced(ctx.client.clone(), ns);
    functions
        .get_opt(name)
        .await
        .map_err(api_err("reading", "Function", ns, name))
}

async fn reconcile_cronjob(
    t: &CronJobTrigger,
    ns: &str,
    cfg: &BuilderConfig,
    ctx: &Context,
) -> Result<Action, Error> {
    let cj_name = cronjob::cronjob_name(&t.name_any());
    // Schedule first: an invalid one is reported even while the function is missing.
    if let Err(e) = Schedule::parse(&t.spec.schedule, Precision::Minutes) {
        delete_owned_cronjob(t, ns, &cj_name, ctx).await?;
        let err = cronjob::BuildError::Schedule(e);
        write_ready(
            t,
            ctx,
            Condition::not_ready(err.reason(), err.to_string()),
            Owned::default(),
        )
        .await?;
        return Ok(Action::await_change());
    }
    let fname = t.spec.function_name.trim().to_string();
    let Some(function) = get_function(ctx, ns, &fname).await? else {
        // A CronJob that exists stays: the function may be on its way back (redeploy).
        let msg = format!("function {fname} not found in namespace {ns}");
        let runs = last_runs(t, ns, &cj_name, ctx).await?;
        write_ready(
            t,
            ctx,
            Condition::not_ready(reasons::FUNCTION_NOT_FOUND, msg),
            runs,
        )
        .await?;
        return Ok(Action::requeue(MISSING_RESYNC));
    };
    let desired = match cronjob::build_cronjob(t, &function, cfg) {
        Ok(cj) => cj,
        Err(e) => {
            delete_owned_cronjob(t, ns, &cj_name, ctx).await?;
            write_ready(
                t,
                ctx,
                Condition::not_ready(e.reason(), e.to_string()),
                Owned::default(),
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), ns);
    let applied = match api
        .patch(
            &cj_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
    {
        Ok(cj) => cj,
        Err(source) => {
            let err = api_err("applying", "CronJob", ns, &cj_name)(source);
            let msg = crate::invoker::error_chain(&err);
            write_ready(
                t,
                ctx,
                Condition::not_ready(reasons::APPLY_FAILED, msg),
                Owned::default(),
            )
            .await?;
            return Err(err);
        }
    };
    let mut runs = last_runs(t, ns, &cj_name, ctx).await?;
    if runs.last_schedule_time.is_none() {
        runs.last_schedule_time = applied
            .status
            .as_ref()
            .and_then(|s| s.last_schedule_time.as_ref())
            .map(|t| t.0);
    }
    let msg = format!(
        "CronJob {cj_name} calls function {fname} on schedule {:?}",
        t.spec.schedule.trim()
    );
    write_ready(t, ctx, Condition::ready(reasons::RECONCILED, msg), runs).await?;
    Ok(Action::requeue(READY_RESYNC))
}

/// lastScheduleTime, lastResult and LastRunSucceeded from the CronJob and its Jobs.
async fn last_runs(
    t: &CronJobTrigger,
    ns: &str,
    cj_name: &str,
    ctx: &Context,
) -> Result<Owned, Error> {
    let cronjobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), ns);
    let cj = cronjobs
        .get_opt(cj_name)
        .await
        .map_err(api_err("reading", "CronJob", ns, cj_name))?;
    let mut owned = Owned {
        last_schedule_time: cj
            .as_ref()
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.last_schedule_time.as_ref())
            .map(|t| t.0),
        ..Owned::default()
    };
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let list = jobs
        .list(&ListParams::default().labels(&format!("{CRONJOB_LABEL}={cj_name}")))
        .await
        .map_err(api_err("listing", "Job", ns, cj_name))?;
    if let Some(run) = status::newest_finished(&list.items) {
        let old = t.status.as_ref();
        let old_message = old
            .and_then(|s| find_condition(&s.conditions, LAST_RUN))
            .and_then(|c| c.message.clone());
        let cond = run.condition();
        if old_message != cond.message {
            ctx.metrics
                .job_results
                .get_or_create(&[("result", if run.succeeded { "succeeded" } else { "failed" })])
                .inc();
            // One Event per newly finished run that failed; success is only announced when it
            // ends a series of failures.
            let was_ok = old
                .and_then(|s| find_condition(&s.conditions, LAST_RUN))
                .map(Condition::is_true);
            if !run.succeeded || was_ok == Some(false) {
                let (type_, reason) = if run.succeeded {
                    (EventType::Normal, "RunSucceeded")
                } else {
                    (EventType::Warning, "RunFailed")
                };
                publish(ctx, t, type_, reason, &run.message).await;
            }
        }
        owned.last_result = Some(run.result().to_string());
        owned.conditions.push(cond);
    }
    Ok(owned)
}

async fn reconcile_scheduled(
    t: &CronJobTrigger,
    ns: &str,
    scheduler: &Scheduler,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = t.name_any();
    // Switching from CronJob mode: the old CronJob would call the function a second time.
    delete_owned_cronjob(t, ns, &cronjob::cronjob_name(&name), ctx).await?;
    let schedule = match Schedule::parse(&t.spec.schedule, Precision::Seconds) {
        Ok(s) => s,
        Err(e) => {
            scheduler.remove(ns, &name);
            let err = cronjob::BuildError::Schedule(e);
            write_ready(
                t,
                ctx,
                Condition::not_ready(err.reason(), err.to_string()),
                Owned::default(),
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    let fname = t.spec.function_name.trim().to_string();
    let Some(function) = get_function(ctx, ns, &fname).await? else {
        // Like a CronJob, a running schedule stays: the function may be on its way back.
        let msg = format!("function {fname} not found in namespace {ns}");
        write_ready(
            t,
            ctx,
            Condition::not_ready(reasons::FUNCTION_NOT_FOUND, msg),
            Owned::default(),
        )
        .await?;
        return Ok(Action::requeue(MISSING_RESYNC));
    };
    let plan = match Plan::new(t, &function, schedule) {
        Ok(p) => p,
        Err(e) => {
            scheduler.remove(ns, &name);
            write_ready(
                t,
                ctx,
                Condition::not_ready(e.reason(), e.to_string()),
                Owned::default(),
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    scheduler.upsert(ns, &name, plan);
    let msg = format!(
        "the in-process scheduler calls function {fname} on schedule {:?}",
        t.spec.schedule.trim()
    );
    write_ready(
        t,
        ctx,
        Condition::ready(reasons::RECONCILED, msg),
        Owned::default(),
    )
    .await?;
    Ok(Action::requeue(READY_RESYNC))
}

async fn delete_owned_cronjob(
    t: &CronJobTrigger,
    ns: &str,
    name: &str,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), ns);
    let Some(existing) = api
        .get_opt(name)
        .await
        .map_err(api_err("reading", "CronJob", ns, name))?
    else {
        return Ok(());
    };
    let ours = existing
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == t.metadata.uid.as_ref());
    if ours {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(api_err("deleting", "CronJob", ns, name)(source)),
        }
    }
    Ok(())
}

/// Writes the Ready condition (plus, in CronJob mode, the last-run fields) when something
/// other than timestamps changed, and publishes an Event when the Ready reason changes.
async fn write_ready(
    t: &CronJobTrigger,
    ctx: &Context,
    cond: Condition,
    mut owned: Owned,
) -> Result<(), Error> {
    let old = t.status.clone().unwrap_or_default();
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
    owned.observed_generation = generation;
    owned.conditions.insert(0, cond.with_generation(generation));
    if let Some((_, patch)) = status::merge(&old, owned) {
        let name = t.name_any();
        let ns = t.namespace().unwrap_or_default();
        status::apply(&ctx.client, &ns, &name, FIELD_MANAGER, &patch)
            .await
            .map_err(api_err("patching status of", "CronJobTrigger", &ns, &name))?;
    }
    if let Some((type_, reason, note)) = event {
        publish(ctx, t, type_, &reason, &note).await;
    }
    Ok(())
}

/// Publishes an Event on the trigger with the reconciler's recorder ([`status::publish_event`]).
pub(crate) async fn publish(
    ctx: &Context,
    t: &CronJobTrigger,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    status::publish_event(&ctx.recorder, t, type_, reason, note).await;
}
