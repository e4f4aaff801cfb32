//! The build step, API part: finds or makes the image of a Function's current code.
//!
//! In order: the Function's status already names the image for this hash (nothing to do); the
//! build Job for this hash exists (its state decides); the registry already has the image (a
//! rollback, or a Function created again: reused, nothing built); else the build Job is created.

use std::sync::Arc;

use k8s_openapi::api::{
    batch::v1::Job,
    core::v1::{Pod, Secret},
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
    runtime::{events::EventType, reflector::ObjectRef},
};
use kubeless_api::{
    Function,
    build::{BuildStatus, reasons as build_reasons, states},
};

use crate::build_step::{BuildPlan, CA_KEY, DOCKER_CONFIG_KEY, PUSH_CONTAINER, RegistryAccess};
use crate::diagnose;
use crate::error::Error;
use crate::reconcile::{Context, publish};

/// Where the build of a Function's current code is.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The image exists: run it.
    Ready(BuildStatus),
    /// The build Job runs.
    Building(BuildStatus),
    /// The build failed; the status message holds why (the end of the build log).
    Failed(BuildStatus),
}

impl Outcome {
    /// The status to record.
    pub fn status(&self) -> &BuildStatus {
        match self {
            Self::Ready(s) | Self::Building(s) | Self::Failed(s) => s,
        }
    }
}

/// Finds or makes the image of `plan`.
pub async fn ensure(f: &Function, ctx: &Context, plan: &BuildPlan) -> Result<Outcome, Error> {
    let previous = f.status.as_ref().and_then(|s| s.build.clone());
    if let Some(s) = previous.as_ref().filter(|s| s.built(&plan.hash)) {
        return Ok(Outcome::Ready(s.clone()));
    }
    let ns = f.namespace().unwrap_or_default();
    let status = |state: &str, job: Option<&str>, message: Option<String>| BuildStatus {
        state: state.into(),
        hash: plan.hash.clone(),
        image: Some(plan.image.clone()),
        job: job.map(str::to_string),
        message,
    };
    let job = ctx
        .stores
        .jobs
        .get(&ObjectRef::new(&plan.job_name).within(&ns));
    if let Some(job) = job {
        return Ok(match job_state(&job) {
            JobState::Running => {
                Outcome::Building(status(states::BUILDING, Some(&plan.job_name), None))
            }
            JobState::Succeeded => {
                announce(
                    ctx,
                    f,
                    &plan.hash,
                    build_reasons::BUILT,
                    &format!("built and pushed {} (Job {})", plan.image, plan.job_name),
                )
                .await;
                prune(f, ctx, &plan.job_name).await;
                Outcome::Ready(status(states::BUILT, Some(&plan.job_name), None))
            }
            JobState::Failed(why) => {
                // The log is read once per failed build; the status keeps it.
                let message = match previous.as_ref() {
                    Some(s) if s.state == states::FAILED && s.hash == plan.hash => {
                        s.message.clone().unwrap_or_default()
                    }
                    _ => failure_text(ctx, &ns, &plan.job_name, &why).await,
                };
                Outcome::Failed(status(states::FAILED, Some(&plan.job_name), Some(message)))
            }
        });
    }
    let secret = registry_secret(ctx, &ns).await?;
    let access = &secret.access;
    match exists(plan, &secret).await {
        Ok(Some(digest)) => {
            announce(
                ctx,
                f,
                &plan.hash,
                build_reasons::REUSED,
                &format!(
                    "{} is already in the registry ({digest}): nothing to build",
                    plan.image
                ),
            )
            .await;
            prune(f, ctx, &plan.job_name).await;
            return Ok(Outcome::Ready(status(states::BUILT, None, Some(digest))));
        }
        Ok(None) => {}
        // The builder checks again and reports what is wrong with the registry in its log.
        Err(e) => tracing::info!(error = %e, image = plan.image, "registry check failed; building"),
    }
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.metrics.write("Job", "create");
    match api.create(&PostParams::default(), &plan.job(access)).await {
        Ok(_) => {
            ctx.metrics.builds.inc();
            announce(
                ctx,
                f,
                &plan.hash,
                kubeless_api::conditions::reasons::BUILDING,
                &format!("building {} (Job {})", plan.image, plan.job_name),
            )
            .await;
        }
        // Made by an earlier reconcile the cache has not seen yet: already announced.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => {
            return Err(Error::Apply {
                kind: "Job",
                namespace: ns,
                name: plan.job_name.clone(),
                source,
            });
        }
    }
    Ok(Outcome::Building(status(
        states::BUILDING,
        Some(&plan.job_name),
        None,
    )))
}

enum JobState {
    Running,
    Succeeded,
    Failed(String),
}

fn job_state(job: &Job) -> JobState {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let on = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    if on("Complete").is_some() {
        return JobState::Succeeded;
    }
    if let Some(c) = on("Failed") {
        return JobState::Failed(
            c.message
                .clone()
                .or_else(|| c.reason.clone())
                .unwrap_or_else(|| "the build Job failed".into()),
        );
    }
    JobState::Running
}

/// The registry Secret of a namespace: what the build Job mounts, and the credentials and CA
/// the controller asks the registry with (read once per reconcile).
#[derive(Default)]
pub(crate) struct RegistrySecret {
    /// Which keys the Job mounts.
    pub access: RegistryAccess,
    docker_config: Option<Vec<u8>>,
    ca: Option<Vec<u8>>,
}

/// The registry Secret in `ns`; a missing Secret is an anonymous registry.
pub(crate) async fn registry_secret(ctx: &Context, ns: &str) -> Result<RegistrySecret, Error> {
    let name = ctx.config_build().registry_secret;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(&name).await {
        Ok(Some(s)) => {
            let data = s.data.unwrap_or_default();
            let docker_config = data.get(DOCKER_CONFIG_KEY).map(|b| b.0.clone());
            let ca = data.get(CA_KEY).map(|b| b.0.clone());
            Ok(RegistrySecret {
                access: RegistryAccess {
                    docker_config: docker_config.is_some(),
                    ca: ca.is_some(),
                    secret: Some(name),
                },
                docker_config,
                ca,
            })
        }
        Ok(None) => Ok(RegistrySecret::default()),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(error = %e, namespace = ns, "may not read the registry Secret; building anonymously");
            Ok(RegistrySecret::default())
        }
        Err(source) => Err(Error::Read {
            kind: "Secret",
            namespace: ns.to_string(),
            name,
            source,
        }),
    }
}

/// Asks the registry for the image, with the Secret's credentials and CA.
async fn exists(plan: &BuildPlan, secret: &RegistrySecret) -> Result<Option<String>, String> {
    let registry = kubeless_oci::Registry::new(kubeless_oci::RegistryOptions {
        insecure: plan.insecure,
        docker_config: secret.docker_config.clone(),
        ca_pem: secret.ca.clone(),
    })
    .map_err(|e| e.to_string())?;
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        registry.exists(&plan.image),
    )
    .await
    .map_err(|_| "the registry did not answer within 10 s".to_string())?
    .map_err(|e| e.to_string())
}

/// Why a build Job failed: the failed step and the end of its log.
async fn failure_text(ctx: &Context, ns: &str, job: &str, why: &str) -> String {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pods = match api
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
    {
        Ok(l) => l.items,
        Err(e) => return format!("{why} (its pod could not be listed: {e})"),
    };
    let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
    let Some(failure) = diagnose::find_failure(pods.iter().map(Arc::as_ref)) else {
        return why.to_string();
    };
    let mut text = failure.message.clone().unwrap_or_default();
    if text.trim().is_empty() {
        let params = kube::api::LogParams {
            container: Some(failure.container.clone()),
            tail_lines: Some(20),
            ..Default::default()
        };
        text = api.logs(&failure.pod, &params).await.unwrap_or_default();
    }
    let step = if failure.container == PUSH_CONTAINER {
        "push".to_string()
    } else {
        failure.container.clone()
    };
    format!(
        "build step {step:?} of Job {job} exited with {}: {}",
        failure.exit_code,
        diagnose::tail(&text)
    )
}

/// The build Jobs `f` owns.
pub fn owned_jobs(f: &Function, ctx: &Context) -> Vec<Arc<Job>> {
    let uid = f.uid().unwrap_or_default();
    let ns = f.namespace();
    ctx.stores
        .jobs
        .state_filter(|j| j.namespace() == ns && j.owner_references().iter().any(|o| o.uid == uid))
}

/// Deletes the finished build Jobs of older code once the current image runs (a running one is
/// left to finish: its image may be wanted again by a rollback).
async fn prune(f: &Function, ctx: &Context, keep: &str) {
    for job in owned_jobs(f, ctx) {
        if job.name_any() == keep || matches!(job_state(&job), JobState::Running) {
            continue;
        }
        let name = job.name_any();
        if let Err(e) = crate::reconcile::delete_child::<Job>(ctx, "Job", &name, f).await {
            tracing::info!(error = %e, job = name, "deleting an old build Job failed");
        }
    }
}

/// Publishes a Normal build Event once per Function, hash and reason.
async fn announce(ctx: &Context, f: &Function, hash: &str, reason: &str, note: &str) {
    let key = format!(
        "{}/{}/{hash}/{reason}",
        f.namespace().unwrap_or_default(),
        f.name_any()
    );
    let first = ctx
        .build_events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key);
    if first {
        publish(ctx, f, EventType::Normal, reason, note).await;
    }
}
