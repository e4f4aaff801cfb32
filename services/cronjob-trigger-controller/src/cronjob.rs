//! The pure builder: CronJobTrigger + Function -> batch/v1 CronJob whose Job runs
//! `kubeless-cron-invoker`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use kubeless_api::conditions::reasons;
use kubeless_api::function::DEFAULT_PORT_NAME;
use kubeless_api::labels::{CREATED_BY, CREATED_BY_VALUE, FUNCTION};
use kubeless_api::{CronJobTrigger, DeliveryPolicy, Function};
use sha2::Digest;

use crate::invoker::{EVENT_ID_ENV, ResolverKind};
use crate::schedule::{Precision, Schedule, ScheduleError};

/// Label on the Jobs (and their Pods) of a trigger's CronJob: the CronJob's name.
pub const CRONJOB_LABEL: &str = "kubeless.io/cronjob";
/// Name of the invoker container.
pub const CONTAINER_NAME: &str = "invoker";
/// Numeric non-root user and group the invoker runs as (the images' user).
pub const INVOKER_UID: i64 = 65532;
/// Prefix of the CronJob name (Kubeless: `trigger-<function>`).
pub const NAME_PREFIX: &str = "trigger-";
/// Longest CronJob name: Jobs get an 11-character suffix and must stay within 63.
pub const MAX_CRONJOB_NAME: usize = 52;

/// Settings of the CronJobs this controller writes (from its flags).
#[derive(Debug, Clone, PartialEq)]
pub struct BuilderConfig {
    /// Image of `kubeless-cron-invoker`.
    pub invoker_image: String,
    /// `imagePullPolicy` of the invoker; `None` leaves the Kubernetes default.
    pub image_pull_policy: Option<String>,
    /// How the invoker finds the function.
    pub resolver: ResolverKind,
    /// Cluster DNS domain (resolver `dns`).
    pub cluster_domain: String,
    /// Extra env of the invoker container (e.g. `KUBECONFIG` on devcluster).
    pub extra_env: Vec<(String, String)>,
    /// ServiceAccount of the Job's Pod (needed for resolver `endpointslices` in a cluster).
    pub service_account: Option<String>,
}

impl Default for BuilderConfig {
    fn default() -> Self {
        Self {
            invoker_image: default_invoker_image(),
            image_pull_policy: None,
            resolver: ResolverKind::Dns,
            cluster_domain: "cluster.local".to_string(),
            extra_env: Vec::new(),
            service_account: None,
        }
    }
}

/// `kubeless-rs/cron-invoker:<crate version>`.
pub fn default_invoker_image() -> String {
    format!("kubeless-rs/cron-invoker:{}", env!("CARGO_PKG_VERSION"))
}

/// Why a trigger cannot become a CronJob.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Schedule(ScheduleError),
    #[error("invalid retry policy: {0}")]
    Retry(String),
    #[error("function {function}: {message}")]
    Function { function: String, message: String },
    #[error("payload cannot be serialized: {0}")]
    Payload(String),
    #[error("the trigger has no name, namespace or uid yet")]
    Unsaved,
}

impl BuildError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Schedule(_) => reasons::INVALID_SCHEDULE,
            _ => reasons::INVALID_SPEC,
        }
    }
}

/// The deterministic CronJob name of a trigger: `trigger-<trigger name>`. A trigger named after
/// its function (what `kubeless function deploy --schedule` creates) gets Kubeless's
/// `trigger-<function>`. Names that would pass [`MAX_CRONJOB_NAME`] are cut and end with a hash
/// of the full name, so they stay unique.
pub fn cronjob_name(trigger: &str) -> String {
    let full = format!("{NAME_PREFIX}{trigger}");
    if full.len() <= MAX_CRONJOB_NAME {
        return full;
    }
    let hash = hex::encode(sha2::Sha256::digest(trigger.as_bytes()));
    let keep = MAX_CRONJOB_NAME - 9; // "-" + 8 hex
    let mut cut: String = full.chars().take(keep).collect();
    while cut.ends_with(['-', '.']) {
        cut.pop();
    }
    format!("{cut}-{}", &hash[..8])
}

/// What the invoker needs from the function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    pub port: u16,
    pub port_name: Option<String>,
    pub timeout: Duration,
}

impl FunctionCall {
    /// Port, port name and timeout of a function (Kubeless defaults where unset).
    pub fn of(function: &Function) -> Result<Self, BuildError> {
        let fname = function.name_any();
        let bad = |message: String| BuildError::Function {
            function: fname.clone(),
            message,
        };
        let timeout = function
            .spec
            .timeout_duration()
            .map_err(|e| bad(e.to_string()))?;
        let spec = function
            .spec
            .service_spec()
            .map_err(|e| bad(e.to_string()))?;
        let port = function
            .spec
            .service_port()
            .map_err(|e| bad(e.to_string()))?;
        let port =
            u16::try_from(port).map_err(|_| bad(format!("service port {port} is out of range")))?;
        // The function-controller names the default port; a user-written service keeps its own.
        let port_name = match spec {
            None => Some(DEFAULT_PORT_NAME.to_string()),
            Some(s) => s
                .ports
                .and_then(|p| p.into_iter().next())
                .and_then(|p| p.name)
                .filter(|n| !n.is_empty()),
        };
        Ok(Self {
            port,
            port_name,
            timeout,
        })
    }
}

/// Longest a Job may run: every attempt may take the whole timeout, plus the backoffs between
/// them. With one attempt this is the function timeout, as in Kubeless.
pub fn active_deadline(timeout: Duration, policy: &DeliveryPolicy) -> i64 {
    let attempts = policy.max_attempts.max(1);
    let mut total = timeout.saturating_mul(attempts);
    for n in 1..attempts {
        total = total.saturating_add(policy.backoff(n));
    }
    // Round partial seconds up; a deadline of 0 would mean "no time at all".
    let secs = total.as_secs() + u64::from(total.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// The payload as the invoker's `--payload` value: JSON text, or empty for none (GET).
pub fn payload_arg(trigger: &CronJobTrigger) -> Result<String, BuildError> {
    match &trigger.spec.payload {
        None | Some(serde_json::Value::Null) => Ok(String::new()),
        Some(v) => serde_json::to_string(v).map_err(|e| BuildError::Payload(e.to_string())),
    }
}

fn duration_arg(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// The invoker's arguments for a trigger and its function.
pub fn invoker_args(
    trigger: &CronJobTrigger,
    call: &FunctionCall,
    policy: &DeliveryPolicy,
    cfg: &BuilderConfig,
) -> Result<Vec<String>, BuildError> {
    let ns = trigger.namespace().ok_or(BuildError::Unsaved)?;
    let mut args = vec![
        format!("--namespace={ns}"),
        format!("--function={}", trigger.spec.function_name.trim()),
        format!("--port={}", call.port),
        format!("--port-name={}", call.port_name.as_deref().unwrap_or("")),
        format!("--timeout={}", call.timeout.as_secs().max(1)),
        format!("--max-attempts={}", policy.max_attempts.max(1)),
        format!("--initial-backoff={}", duration_arg(policy.initial_backoff)),
        format!("--max-backoff={}", duration_arg(policy.max_backoff)),
        format!("--multiplier={}", policy.multiplier),
        format!("--resolver={}", cfg.resolver.as_str()),
    ];
    if cfg.resolver == ResolverKind::Dns {
        args.push(format!("--cluster-domain={}", cfg.cluster_domain));
    }
    args.push(format!("--payload={}", payload_arg(trigger)?));
    Ok(args)
}

/// Labels of the Jobs and Pods. Never `function=<name>`: the function's Service selects its
/// pods by that label, and the invoker Pod must not become an endpoint of the function.
fn run_labels(cronjob: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CREATED_BY.to_string(), CREATED_BY_VALUE.to_string()),
        (CRONJOB_LABEL.to_string(), cronjob.to_string()),
    ])
}

/// Labels of the CronJob itself: also the function it calls, as Kubeless's children have.
fn cronjob_labels(trigger: &CronJobTrigger, cronjob: &str) -> BTreeMap<String, String> {
    let mut l = run_labels(cronjob);
    l.insert(
        FUNCTION.to_string(),
        trigger.spec.function_name.trim().to_string(),
    );
    l
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.to_string())),
        ("memory".to_string(), Quantity(memory.to_string())),
    ])
}

/// Builds the CronJob of a trigger. The schedule must be a five-field one.
pub fn build_cronjob(
    trigger: &CronJobTrigger,
    function: &Function,
    cfg: &BuilderConfig,
) -> Result<CronJob, BuildError> {
    let schedule = Schedule::parse(&trigger.spec.schedule, Precision::Minutes)
        .map_err(BuildError::Schedule)?;
    let policy = trigger
        .spec
        .delivery_policy()
        .map_err(|e| BuildError::Retry(e.to_string()))?;
    let call = FunctionCall::of(function)?;
    let owner = trigger
        .controller_owner_ref(&())
        .ok_or(BuildError::Unsaved)?;
    let ns = trigger.namespace().ok_or(BuildError::Unsaved)?;
    let name = cronjob_name(&trigger.name_any());
    let labels = run_labels(&name);
    let args = invoker_args(trigger, &call, &policy, cfg)?;

    // Job name as event-id: the same for every attempt of one scheduled run.
    let mut env = vec![EnvVar {
        name: EVENT_ID_ENV.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.labels['job-name']".to_string(),
                // What the API server defaults it to: left out, an apply's field set
                // differs from the stored object's.
                api_version: Some("v1".to_string()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }];
    env.extend(cfg.extra_env.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        ..Default::default()
    }));

    let container = Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(cfg.invoker_image.clone()),
        image_pull_policy: cfg.image_pull_policy.clone(),
        args: Some(args),
        env: Some(env),
        // Kubeless's sizes for its curl container; the invoker needs less.
        resources: Some(ResourceRequirements {
            requests: Some(quantities("10m", "16Mi")),
            limits: Some(quantities("100m", "64Mi")),
            ..Default::default()
        }),
        // PodSecurity `restricted`: the invoker writes nothing, so its root can be read-only.
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(INVOKER_UID),
            run_as_group: Some(INVOKER_UID),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Default::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    // Only EndpointSlice resolution talks to the API server.
    let needs_token = cfg.resolver == ResolverKind::Endpointslices;
    let pod = PodSpec {
        restart_policy: Some("Never".to_string()),
        containers: vec![container],
        service_account_name: cfg.service_account.clone(),
        automount_service_account_token: Some(needs_token),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(INVOKER_UID),
            run_as_group: Some(INVOKER_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let job = JobSpec {
        active_deadline_seconds: Some(active_deadline(call.timeout, &policy)),
        // The invoker retries itself; a failed Pod is a failed run, not a reason for another Pod.
        backoff_limit: Some(0),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels.clone()),
                ..Default::default()
            }),
            spec: Some(pod),
        },
        ..Default::default()
    };
    Ok(CronJob {
        metadata: ObjectMeta {
            labels: Some(cronjob_labels(trigger, &name)),
            name: Some(name),
            namespace: Some(ns),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(CronJobSpec {
            schedule: schedule.as_str().to_string(),
            concurrency_policy: Some(trigger.spec.concurrency().as_str().to_string()),
            successful_jobs_history_limit: Some(trigger.spec.successful_history()),
            failed_jobs_history_limit: Some(trigger.spec.failed_history()),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(job),
            },
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests;
