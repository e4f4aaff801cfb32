//! Pure builders: Function + catalogue + config -> the ConfigMap, Deployment, Service and HPA
//! that run it. No API calls here, so every rule is unit-tested.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{
        Affinity, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
        EnvVar, EnvVarSource, HTTPGetAction, LocalObjectReference, ObjectFieldSelector,
        PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec, Probe, ResourceRequirements,
        SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
        WeightedPodAffinityTerm,
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use kubeless_api::function::{DEFAULT_PORT, in_cluster_url};
use kubeless_api::{
    Function,
    embedded::DeploymentTemplate,
    labels::function_labels,
    parse::{Archive, ContentType, Handler, RuntimeRef},
};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::catalogue::{PHASE_COMPILATION, PHASE_INSTALLATION, PHASE_RUNTIME, Resolved};
use crate::config::ControllerConfig;

/// Annotation on every child: hash of what the controller applied. Equal hash, nothing to write.
pub const APPLIED_HASH: &str = "kubeless.io/applied-hash";
/// Pod-template annotation: hash of the code ConfigMap's data, so new code rolls the pods.
pub const CONTENT_HASH: &str = "kubeless.io/content-hash";
/// Where the code ConfigMap is mounted in the init containers.
pub const SRC_DIR: &str = "/src";
/// The emptyDir shared by init containers and the runtime (`KUBELESS_INSTALL_VOLUME`).
pub const INSTALL_DIR: &str = "/kubeless";
/// Name of the default Service port (the `http-` prefix is for Istio, as in Kubeless).
pub const SERVICE_PORT_NAME: &str = "http-function-port";
/// Name of the runtime container port (container port names are at most 15 characters).
pub const CONTAINER_PORT_NAME: &str = "http";
/// Volume holding the code ConfigMap.
pub const SRC_VOLUME: &str = "kubeless-src";
/// The install emptyDir volume.
pub const INSTALL_VOLUME: &str = "kubeless-install";
/// Init container names.
pub const INIT_PREPARE: &str = "prepare";
/// See [`INIT_PREPARE`].
pub const INIT_INSTALL: &str = "install";
/// See [`INIT_PREPARE`].
pub const INIT_COMPILE: &str = "compile";
/// Non-root user and group of function pods: the numeric user our images run as.
pub const FUNCTION_UID: i64 = 65532;

/// Longest `.spec.timeout` accepted: one day (a call that needs longer is not a function call).
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(86_400);
/// Most replicas a Function's deployment template may ask for.
pub const MAX_REPLICAS: i32 = kubeless_api::constraints::MAX_REPLICAS as i32;

/// Refuses a template replica count a Deployment cannot reach (negative) or that is surely a
/// mistake (above [`MAX_REPLICAS`]); otherwise the Function would sit at Progressing forever.
fn check_replicas(dep: &Deployment) -> Result<(), BuildError> {
    match dep.spec.as_ref().and_then(|s| s.replicas) {
        Some(n) if n < 0 => Err(BuildError::invalid(
            "deployment.spec.replicas",
            format!("{n} is negative"),
        )),
        Some(n) if n > MAX_REPLICAS => Err(BuildError::invalid(
            "deployment.spec.replicas",
            format!("{n} is more than the maximum of {MAX_REPLICAS}"),
        )),
        _ => Ok(()),
    }
}

/// Why a Function cannot be turned into objects. Each maps to a condition reason.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `.spec.runtime` is not in the catalogue.
    #[error("runtime {runtime:?} is not in the runtime catalogue (known: {known}){hint}")]
    UnknownRuntime {
        /// The requested runtime.
        runtime: String,
        /// What the catalogue offers.
        known: String,
        /// For one of Kubeless's runtime ids: `; ` and the runtime to use instead.
        hint: String,
    },
    /// The build step is on for the Function but no registry is configured.
    #[error(
        "the build step is on but no registry is configured: set the function-controller's --build-registry (chart value function-controller.build.registry) or the kubeless-config key function-registry, or switch the build step off for this Function (spec.build.enabled: false)"
    )]
    NoRegistry,
    /// The install's pod template policy refuses fields of the template (`InvalidSpec`).
    #[error("{}", crate::policy::message(.0))]
    TemplateRefused(Vec<crate::policy::Refusal>),
    /// A field cannot be interpreted.
    #[error("invalid {field}: {message}")]
    InvalidSpec {
        /// Which field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl BuildError {
    /// The condition reason (also Event reason and metric label).
    pub fn reason(&self) -> &'static str {
        use kubeless_api::conditions::reasons;
        match self {
            Self::UnknownRuntime { .. } => reasons::UNKNOWN_RUNTIME,
            Self::InvalidSpec { .. } | Self::TemplateRefused(_) => reasons::INVALID_SPEC,
            Self::NoRegistry => reasons::BUILD_FAILED,
        }
    }

    fn invalid(field: &'static str, err: impl std::fmt::Display) -> Self {
        // The chain of the api crate's error is short; keep its text, not the type.
        Self::InvalidSpec {
            field,
            message: err.to_string(),
        }
    }
}

/// Everything a Function needs, ready to apply.
#[derive(Clone, Debug)]
pub struct Desired {
    /// Code, handler and deps.
    pub config_map: ConfigMap,
    /// The function's pods.
    pub deployment: Deployment,
    /// The function's Service.
    pub service: Service,
    /// Present when the Function asks for autoscaling.
    pub hpa: Option<HorizontalPodAutoscaler>,
    /// Image of the runtime container (for status).
    pub image: String,
    /// In-cluster URL of the function (for status).
    pub url: String,
    /// The image build, when the build step is on for the Function.
    pub build: Option<crate::build_step::BuildPlan>,
}

/// What the runtime part of the spec resolved to.
struct RuntimePlan<'a> {
    runtime: String,
    resolved: Option<Resolved<'a>>,
    custom_image: Option<String>,
}

/// Builds every child object of `f`.
pub fn build(f: &Function, cfg: &ControllerConfig) -> Result<Desired, BuildError> {
    let name = f.name_any();
    let namespace = f.namespace().unwrap_or_else(|| "default".into());
    let owner = f
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::invalid("metadata", "the Function has no uid yet"))?;
    let plan = runtime_plan(f, cfg)?;
    let content_type = f
        .spec
        .content_type()
        .map_err(|e| BuildError::invalid("function-content-type", e))?;
    let handler = match f.spec.handler.as_deref().map(str::trim) {
        None | Some("") if plan.custom_image.is_some() => None,
        _ => Some(
            f.spec
                .handler_parts()
                .map_err(|e| BuildError::invalid("handler", e))?,
        ),
    };
    let timeout = f
        .spec
        .timeout_duration()
        .map_err(|e| BuildError::invalid("timeout", e))?;
    if timeout > MAX_TIMEOUT {
        // The runtime would crash-loop on a value it cannot hold; refuse it here instead.
        return Err(BuildError::invalid(
            "timeout",
            format!(
                "{} seconds is more than the maximum of {} (one day)",
                timeout.as_secs(),
                MAX_TIMEOUT.as_secs()
            ),
        ));
    }
    let hpa = f
        .hpa_v2()
        .map_err(|e| BuildError::invalid("horizontalPodAutoscaler", e))?;
    let service_spec = service_spec(f)?;
    let port = function_port(&service_spec);

    let mut labels = f.labels().clone();
    labels.extend(function_labels(&name));
    let meta = |obj_name: String| ObjectMeta {
        name: Some(obj_name),
        namespace: Some(namespace.clone()),
        labels: Some(labels.clone()),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };

    let (dep_name, suffix) = plan
        .resolved
        .map(|r| (r.info.dep_name.clone(), r.info.file_name_suffix.clone()))
        .unwrap_or_default();
    let source_key = handler
        .as_ref()
        .map(|h| source_key(&h.module, &suffix, content_type));
    let deps = f.spec.deps.clone().unwrap_or_default();
    let has_deps = !deps.trim().is_empty() && !dep_name.is_empty();

    let mut data = BTreeMap::new();
    if let Some(h) = &f.spec.handler {
        data.insert("handler".to_string(), h.clone());
    }
    if let Some(key) = &source_key {
        data.insert(key.clone(), f.spec.function.clone().unwrap_or_default());
    }
    if has_deps {
        data.insert(dep_name.clone(), deps);
    }
    let content_hash = short_hash(&data);
    let config_map = stamp(ConfigMap {
        metadata: meta(name.clone()),
        data: Some(data),
        ..ConfigMap::default()
    });

    let image = plan
        .custom_image
        .clone()
        .or_else(|| {
            plan.resolved
                .and_then(|r| r.phase(PHASE_RUNTIME))
                .map(|p| p.image.clone())
        })
        .ok_or_else(|| {
            BuildError::invalid("runtime", "the catalogue has no runtime-phase image for it")
        })?;

    let ctx = PodContext {
        name: &name,
        runtime: &plan.runtime,
        handler: handler.as_ref(),
        timeout_secs: timeout.as_secs(),
        port,
        image: &image,
        content_type,
        source_key: source_key.as_deref(),
        dep_name: &dep_name,
        has_deps,
        checksum: f.spec.checksum.as_deref().unwrap_or(""),
    };
    let mut deployment = deployment_base(f, cfg)?;
    check_replicas(&deployment)?;
    check_policy(f, cfg)?;
    deployment.metadata = ObjectMeta {
        annotations: deployment.metadata.annotations.take(),
        labels: Some(merged(deployment.metadata.labels.take(), &labels)),
        ..meta(name.clone())
    };
    shape_deployment(
        &mut deployment,
        &ctx,
        &plan,
        cfg,
        hpa.is_some(),
        &content_hash,
    );
    let build = build_plan(
        f,
        cfg,
        &plan,
        &ctx,
        &config_map,
        &deployment,
        &meta(name.clone()),
    )?;
    let deployment = stamp(deployment);

    let service_port = service_spec
        .ports
        .as_ref()
        .and_then(|p| p.first())
        .map(|p| p.port)
        .unwrap_or(DEFAULT_PORT);
    let service = stamp(Service {
        metadata: meta(name.clone()),
        spec: Some(service_spec),
        ..Service::default()
    });

    let hpa = hpa.map(|mut h| {
        let hpa_name = h.metadata.name.clone().unwrap_or_else(|| name.clone());
        h.metadata = ObjectMeta {
            labels: Some(merged(h.metadata.labels.take(), &labels)),
            annotations: h.metadata.annotations.take(),
            ..meta(hpa_name)
        };
        h.status = None;
        stamp(h)
    });

    Ok(Desired {
        config_map,
        deployment,
        service,
        hpa,
        url: in_cluster_url(&name, &namespace, service_port, &cfg.cluster_domain),
        image,
        build,
    })
}

/// The image build of `f`, when the build step is on for it and it runs on a catalogue runtime
/// (a custom image is prebuilt: nothing to build, as in Kubeless).
fn build_plan(
    f: &Function,
    cfg: &ControllerConfig,
    plan: &RuntimePlan<'_>,
    ctx: &PodContext<'_>,
    config_map: &ConfigMap,
    deployment: &Deployment,
    meta: &ObjectMeta,
) -> Result<Option<crate::build_step::BuildPlan>, BuildError> {
    use crate::build_step::{self as step, BuildInputs};
    let (Some(resolved), None) = (plan.resolved, &plan.custom_image) else {
        return Ok(None);
    };
    if !kubeless_api::build::enabled(f.spec.build.as_ref(), cfg.build.enabled) {
        return Ok(None);
    }
    let registry = cfg
        .build
        .registry
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .ok_or(BuildError::NoRegistry)?;
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
    else {
        return Ok(None);
    };
    let steps = pod.init_containers.clone().unwrap_or_default();
    let prepare_image = steps
        .iter()
        .find(|c| c.name == INIT_PREPARE)
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let empty = BTreeMap::new();
    let data = config_map.data.as_ref().unwrap_or(&empty);
    let hash = step::inputs_hash(&BuildInputs {
        base: ctx.image,
        phases: &resolved.version.images,
        runtime: &plan.runtime,
        content_type: ctx.content_type.to_string(),
        data,
        checksum: ctx.checksum,
        prepare_image: &prepare_image,
    });
    let namespace = meta.namespace.clone().unwrap_or_default();
    Ok(Some(step::BuildPlan {
        image: step::image_ref(registry, &namespace, ctx.name, &hash),
        job_name: step::job_name(ctx.name, &hash),
        hash,
        base: ctx.image.to_string(),
        insecure: cfg.build.insecure,
        meta: meta.clone(),
        steps,
        pod: PodSpec {
            containers: Vec::new(),
            init_containers: None,
            ..pod
        },
        builder_image: cfg.build.builder_image.clone(),
        builder_image_secret: cfg.build.builder_image_secret.clone(),
    }))
}

/// Adjusts the Deployment for scale to zero: zero replicas while `at_zero`, else at least
/// `min_replicas` (the Function's `scaleToZero.minReplicas`). With an HPA the replica count is
/// left to the autoscaler and the reconciler moves it through the scale subresource instead.
pub fn with_scale(mut d: Desired, at_zero: bool, min_replicas: Option<i32>) -> Desired {
    if d.hpa.is_some() {
        return d;
    }
    let Some(spec) = d.deployment.spec.as_mut() else {
        return d;
    };
    let want = if at_zero {
        0
    } else {
        spec.replicas.unwrap_or(1).max(min_replicas.unwrap_or(1))
    };
    if spec.replicas != Some(want) {
        spec.replicas = Some(want);
        d.deployment = stamp(d.deployment);
    }
    d
}

/// The Desired objects running the built `image` (the build step): the Deployment without
/// install steps or code volume, pulling with `pull_secret` (the registry Secret), and the image
/// in the status.
pub fn with_built_image(mut d: Desired, image: &str, pull_secret: Option<&str>) -> Desired {
    crate::build_step::run_built(&mut d.deployment, image, pull_secret);
    d.deployment = stamp(d.deployment);
    d.image = image.to_string();
    d
}

/// Replicas a function with an HPA is woken to: the larger of `scaleToZero.minReplicas` and
/// the HPA's `minReplicas` (1 when neither is set).
pub fn wake_replicas(d: &Desired, min_replicas: Option<i32>) -> i32 {
    let hpa_min = d
        .hpa
        .as_ref()
        .and_then(|h| h.spec.as_ref())
        .and_then(|s| s.min_replicas);
    hpa_min.unwrap_or(1).max(min_replicas.unwrap_or(1))
}

fn runtime_plan<'a>(
    f: &Function,
    cfg: &'a ControllerConfig,
) -> Result<RuntimePlan<'a>, BuildError> {
    let custom_image = f.spec.custom_image().map(str::to_string);
    let runtime = f.spec.runtime.as_deref().map(str::trim).unwrap_or("");
    if runtime.is_empty() {
        if custom_image.is_none() {
            return Err(BuildError::invalid(
                "runtime",
                "either runtime or deployment.spec.template.spec.containers[0].image is required",
            ));
        }
        return Ok(RuntimePlan {
            runtime: String::new(),
            resolved: None,
            custom_image,
        });
    }
    let unknown = || BuildError::UnknownRuntime {
        runtime: runtime.to_string(),
        known: cfg.catalogue.known().join(", "),
        hint: kubeless_api::legacy::refusal(runtime)
            .map(|r| format!("; {r}"))
            .unwrap_or_default(),
    };
    let resolved = match RuntimeRef::parse_with_ids(runtime, cfg.catalogue.ids()) {
        Ok(r) => cfg.catalogue.resolve(&r.id, &r.version),
        Err(_) => None,
    };
    // A custom image runs whatever runtime it likes; the catalogue only matters without one.
    if resolved.is_none() && custom_image.is_none() {
        return Err(unknown());
    }
    Ok(RuntimePlan {
        runtime: runtime.to_string(),
        resolved,
        custom_image,
    })
}

/// ConfigMap key of the source: `<module><suffix>` for single files (the runtime loads that
/// file), a neutral archive name otherwise.
fn source_key(module: &str, suffix: &str, ct: ContentType) -> String {
    match ct.archive {
        Archive::None => format!("{module}{suffix}"),
        Archive::Zip => format!("{module}.zip"),
        Archive::CompressedTar => format!("{module}.tar.gz"),
    }
}

fn service_spec(f: &Function) -> Result<ServiceSpec, BuildError> {
    let mut spec = f
        .spec
        .service_spec()
        .map_err(|e| BuildError::invalid("service", e))?
        .unwrap_or_default();
    let ports = spec.ports.get_or_insert_with(Vec::new);
    if ports.is_empty() {
        ports.push(ServicePort {
            name: Some(SERVICE_PORT_NAME.into()),
            port: DEFAULT_PORT,
            target_port: Some(IntOrString::Int(DEFAULT_PORT)),
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        });
    }
    for p in ports.iter_mut() {
        if p.port == 0 {
            p.port = DEFAULT_PORT;
        }
        if p.target_port.is_none() {
            p.target_port = Some(IntOrString::Int(p.port));
        }
        if p.protocol.is_none() {
            p.protocol = Some("TCP".into());
        }
    }
    if spec.type_.is_none() {
        spec.type_ = Some("ClusterIP".into());
    }
    // The Service must reach this function's pods, whatever the template said.
    spec.selector = Some(function_labels(&f.name_any()));
    Ok(spec)
}

/// `FUNC_PORT`: the first Service port's numeric targetPort (Kubeless's rule), else 8080.
fn function_port(spec: &ServiceSpec) -> i32 {
    spec.ports
        .as_ref()
        .and_then(|p| p.first())
        .and_then(|p| match &p.target_port {
            Some(IntOrString::Int(n)) if *n > 0 => Some(*n),
            _ => None,
        })
        .unwrap_or(DEFAULT_PORT)
}

/// The config's default Deployment with the Function's template merged over it.
fn deployment_base(f: &Function, cfg: &ControllerConfig) -> Result<Deployment, BuildError> {
    let mut raw = cfg
        .default_deployment
        .clone()
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(t) = &f.spec.deployment {
        merge_json(&mut raw, &t.0, "");
    }
    let mut dep = DeploymentTemplate(raw)
        .to_deployment()
        .map_err(|e| BuildError::invalid("deployment", error_text(&e)))?;
    dep.status = None;
    Ok(dep)
}

/// Checks the Function's own template (not the install's default Deployment, which the
/// install chose) against the install's pod template policy.
fn check_policy(f: &Function, cfg: &ControllerConfig) -> Result<(), BuildError> {
    let Some(t) = &f.spec.deployment else {
        return Ok(());
    };
    let template = DeploymentTemplate(t.0.clone())
        .to_deployment()
        .map_err(|e| BuildError::invalid("deployment", error_text(&e)))?;
    let refused = cfg.template_policy.check(&template);
    if refused.is_empty() {
        Ok(())
    } else {
        Err(BuildError::TemplateRefused(refused))
    }
}

/// Merges `over` into `base`, `over` winning. Objects merge key by key; `containers` merge by
/// position (the first one is the function's) and `env` by name, so a config default env var
/// and a function env var can coexist; other lists are replaced. Nulls in `over` are ignored,
/// as Kubeless's dry-run output writes `containers: null`.
pub fn merge_json(base: &mut Value, over: &Value, key: &str) {
    match (base, over) {
        (_, Value::Null) => {}
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) => merge_json(existing, v, k),
                    None if !v.is_null() => {
                        b.insert(k.clone(), v.clone());
                    }
                    None => {}
                }
            }
        }
        (Value::Array(b), Value::Array(o)) if key == "containers" => {
            for (i, v) in o.iter().enumerate() {
                match b.get_mut(i) {
                    Some(existing) => merge_json(existing, v, ""),
                    None => b.push(v.clone()),
                }
            }
        }
        (Value::Array(b), Value::Array(o)) if key == "env" => {
            for v in o {
                let name = v.get("name");
                match b
                    .iter_mut()
                    .find(|e| name.is_some() && e.get("name") == name)
                {
                    Some(existing) => *existing = v.clone(),
                    None => b.push(v.clone()),
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

struct PodContext<'a> {
    name: &'a str,
    runtime: &'a str,
    handler: Option<&'a Handler>,
    timeout_secs: u64,
    port: i32,
    image: &'a str,
    content_type: ContentType,
    source_key: Option<&'a str>,
    dep_name: &'a str,
    has_deps: bool,
    checksum: &'a str,
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// Sets `vars` over `list`: same name replaced, new names appended.
fn upsert_env(list: &mut Vec<EnvVar>, vars: impl IntoIterator<Item = EnvVar>) {
    for v in vars {
        match list.iter_mut().find(|e| e.name == v.name) {
            Some(e) => *e = v,
            None => list.push(v),
        }
    }
}

pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn shape_deployment(
    dep: &mut Deployment,
    ctx: &PodContext<'_>,
    plan: &RuntimePlan<'_>,
    cfg: &ControllerConfig,
    has_hpa: bool,
    content_hash: &str,
) {
    let pod_labels = function_labels(ctx.name);
    let spec = dep.spec.get_or_insert_with(Default::default);
    spec.selector = LabelSelector {
        match_labels: Some(pod_labels.clone()),
        match_expressions: None,
    };
    if has_hpa {
        // The HPA owns the replica count; writing it here would fight the autoscaler.
        spec.replicas = None;
    } else if spec.replicas.is_none() {
        spec.replicas = Some(1);
    }
    if spec.strategy.is_none() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_unavailable: Some(IntOrString::Int(0)),
                max_surge: None,
            }),
        });
    }
    let template = &mut spec.template;
    let tmeta = template.metadata.get_or_insert_with(Default::default);
    let mut tlabels = dep.metadata.labels.clone().unwrap_or_default();
    tlabels.extend(tmeta.labels.take().unwrap_or_default());
    tlabels.extend(pod_labels.clone());
    tmeta.labels = Some(tlabels);
    let annotations = tmeta.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in [
        ("prometheus.io/scrape", "true".to_string()),
        ("prometheus.io/path", "/metrics".to_string()),
        ("prometheus.io/port", ctx.port.to_string()),
        (CONTENT_HASH, content_hash.to_string()),
    ] {
        annotations.entry(k.to_string()).or_insert(v);
    }
    // The content hash always reflects the current code, even if a template set the key.
    annotations.insert(CONTENT_HASH.into(), content_hash.into());

    let pod = template.spec.get_or_insert_with(Default::default);
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| v.name != SRC_VOLUME && v.name != INSTALL_VOLUME);
    volumes.push(Volume {
        name: SRC_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: ctx.name.into(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    });
    volumes.push(Volume {
        name: INSTALL_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    });
    pod.security_context = Some(restricted_pod_security_context(
        pod.security_context.take().unwrap_or_default(),
    ));
    if pod.affinity.is_none() {
        // Spread replicas over nodes when possible, as Kubeless did.
        pod.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(LabelSelector {
                                match_labels: Some(pod_labels),
                                match_expressions: None,
                            }),
                            topology_key: "kubernetes.io/hostname".into(),
                            ..PodAffinityTerm::default()
                        },
                    },
                ]),
                required_during_scheduling_ignored_during_execution: None,
            }),
            ..Affinity::default()
        });
    }
    if let Some(r) = plan.resolved {
        let secrets = pod.image_pull_secrets.get_or_insert_with(Vec::new);
        for s in &r.version.image_pull_secrets {
            if !secrets.iter().any(|x| x.name == s.image_secret) {
                secrets.push(LocalObjectReference {
                    name: s.image_secret.clone(),
                });
            }
        }
        if secrets.is_empty() {
            pod.image_pull_secrets = None;
        }
    }

    // Init containers: the template's first one only carries resources for all of ours.
    let init_resources = pod
        .init_containers
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|c| c.resources.clone());
    pod.init_containers = if plan.custom_image.is_some() {
        None
    } else {
        let list = init_containers(ctx, plan, cfg, init_resources);
        (!list.is_empty()).then_some(list)
    };

    if pod.containers.is_empty() {
        pod.containers.push(Container::default());
    }
    runtime_container(&mut pod.containers[0], ctx, plan);
    // Every container, sidecars of the template included: PodSecurity checks each one.
    let pod_sc = pod.security_context.clone();
    for c in &mut pod.containers {
        c.security_context = Some(restricted_container_security_context(
            c.security_context.take().unwrap_or_default(),
            pod_sc.as_ref(),
        ));
    }
    let c = &mut pod.containers[0];
    if cfg.listen_on_pod_ip {
        let vars = c.env.get_or_insert_with(Vec::new);
        upsert_env(
            vars,
            [EnvVar {
                name: "KUBELESS_LISTEN_ADDRESS".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "status.podIP".into(),
                        // What the API server defaults it to: left out, an apply's
                        // field set differs from the stored object's.
                        api_version: Some("v1".into()),
                    }),
                    ..EnvVarSource::default()
                }),
            }],
        );
    }
}

fn runtime_container(c: &mut Container, ctx: &PodContext<'_>, plan: &RuntimePlan<'_>) {
    c.name = ctx.name.into();
    c.image = Some(ctx.image.into());
    let memory_limit = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "0".into());
    let (module, function) = ctx
        .handler
        .map(|h| (h.module.clone(), h.function.clone()))
        .unwrap_or_default();
    let mut vars = vec![
        env("FUNC_HANDLER", function),
        env("MOD_NAME", module),
        env("FUNC_TIMEOUT", ctx.timeout_secs.to_string()),
        env("FUNC_RUNTIME", ctx.runtime),
        env("FUNC_MEMORY_LIMIT", memory_limit),
        env("FUNC_PORT", ctx.port.to_string()),
        env("KUBELESS_INSTALL_VOLUME", INSTALL_DIR),
    ];
    if let Some(p) = plan.resolved.and_then(|r| r.phase(PHASE_RUNTIME)) {
        vars.extend(p.env.iter().map(|(k, v)| env(k, v.clone())));
    }
    // The template's env comes last so users can override what they need to.
    let user = c.env.take().unwrap_or_default();
    upsert_env(&mut vars, user);
    c.env = Some(vars);
    let ports = c.ports.get_or_insert_with(Vec::new);
    if !ports.iter().any(|p| p.container_port == ctx.port) {
        ports.push(ContainerPort {
            container_port: ctx.port,
            name: Some(CONTAINER_PORT_NAME.into()),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        });
    }
    if c.liveness_probe.is_none() {
        let info = plan
            .resolved
            .and_then(|r| r.info.liveness_probe_info.clone())
            .unwrap_or_default();
        c.liveness_probe = Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::Int(ctx.port),
                ..HTTPGetAction::default()
            }),
            initial_delay_seconds: Some(info.initial_delay_seconds.unwrap_or(3)),
            period_seconds: Some(info.period_seconds.unwrap_or(30)),
            ..Probe::default()
        });
    }
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    mounts.retain(|m| m.name != INSTALL_VOLUME && m.name != SRC_VOLUME);
    mounts.push(mount(INSTALL_VOLUME, INSTALL_DIR, false));
}

/// The pod securityContext of a function pod: every field the template left out takes the
/// value PodSecurity `restricted` asks for (non-root user and group [`FUNCTION_UID`], seccomp
/// `RuntimeDefault`); the fields the template set are kept.
pub(crate) fn restricted_pod_security_context(mut sc: PodSecurityContext) -> PodSecurityContext {
    // A template that runs as root (allowed by the install's policy) must not be contradicted:
    // runAsNonRoot true with runAsUser 0 is a pod the kubelet refuses to start.
    let root = sc.run_as_user == Some(0);
    if sc.run_as_user.is_none() {
        sc.run_as_user = Some(FUNCTION_UID);
    }
    if sc.run_as_group.is_none() {
        sc.run_as_group = Some(FUNCTION_UID);
    }
    if sc.fs_group.is_none() {
        sc.fs_group = Some(FUNCTION_UID);
    }
    if sc.run_as_non_root.is_none() && !root {
        sc.run_as_non_root = Some(true);
    }
    if sc.seccomp_profile.is_none() {
        sc.seccomp_profile = Some(runtime_default_seccomp());
    }
    sc
}

/// A container securityContext merged field by field with [`restricted_security_context`]:
/// what the template set is kept, every other field takes the restricted default, so a
/// template that only sets `runAsUser: 1000` still gives a pod PodSecurity `restricted` admits.
/// Defaults that would contradict what the template set (an install that allows it) are left
/// out: no `allowPrivilegeEscalation: false` beside `privileged: true` or an added
/// `SYS_ADMIN` (the API server refuses the pair), no `runAsNonRoot: true` for a root user.
pub(crate) fn restricted_container_security_context(
    mut sc: SecurityContext,
    pod: Option<&PodSecurityContext>,
) -> SecurityContext {
    let defaults = restricted_security_context();
    let caps = sc.capabilities.get_or_insert_with(Default::default);
    if caps.drop.is_none() {
        caps.drop = defaults.capabilities.and_then(|c| c.drop);
    }
    let sys_admin = caps.add.iter().flatten().any(|c| {
        c.trim_start_matches("CAP_")
            .eq_ignore_ascii_case("SYS_ADMIN")
    });
    if sc.allow_privilege_escalation.is_none() && sc.privileged != Some(true) && !sys_admin {
        sc.allow_privilege_escalation = defaults.allow_privilege_escalation;
    }
    let user = sc.run_as_user.or(pod.and_then(|p| p.run_as_user));
    let pod_says_root = pod.and_then(|p| p.run_as_non_root) == Some(false);
    if sc.run_as_non_root.is_none() && user != Some(0) && !pod_says_root {
        sc.run_as_non_root = defaults.run_as_non_root;
    }
    if sc.seccomp_profile.is_none() {
        sc.seccomp_profile = defaults.seccomp_profile;
    }
    sc
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// What PodSecurity `restricted` asks of each container. Set per container (seccomp too) so a
/// template that brings its own pod securityContext still passes.
pub(crate) fn restricted_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        run_as_non_root: Some(true),
        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..SecurityContext::default()
    }
}

fn init_containers(
    ctx: &PodContext<'_>,
    plan: &RuntimePlan<'_>,
    cfg: &ControllerConfig,
    resources: Option<ResourceRequirements>,
) -> Vec<Container> {
    let mut out = Vec::new();
    let Some(resolved) = plan.resolved else {
        return out;
    };
    let Some(source_key) = ctx.source_key else {
        return out;
    };
    let base = |name: &str, image: &str| Container {
        name: name.into(),
        image: Some(image.into()),
        resources: resources.clone(),
        security_context: Some(restricted_security_context()),
        // The runner and kubectl show why a step failed without digging in logs.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    let install_phase = resolved.phase(PHASE_INSTALLATION);
    let prepare_image = cfg
        .provision_image
        .clone()
        .or_else(|| install_phase.map(|p| p.image.clone()))
        .unwrap_or_else(|| ctx.image.to_string());
    let mut prepare = base(INIT_PREPARE, &prepare_image);
    prepare.args = Some(vec!["prepare".into()]);
    // It only writes into the install volume. (The install and compile steps run package
    // managers and the runtime runs user code, which write to $HOME and /tmp: their root stays
    // writable unless a template says otherwise.)
    if let Some(sc) = prepare.security_context.as_mut() {
        sc.read_only_root_filesystem = Some(true);
    }
    let mut vars = vec![
        env("KUBELESS_FUNC_SOURCE", format!("{SRC_DIR}/{source_key}")),
        env("KUBELESS_FUNC_CONTENT_TYPE", ctx.content_type.to_string()),
        env("KUBELESS_FUNC_CHECKSUM", ctx.checksum),
        env("KUBELESS_INSTALL_VOLUME", INSTALL_DIR),
    ];
    if ctx.has_deps {
        vars.push(env(
            "KUBELESS_DEPS_FILE",
            format!("{SRC_DIR}/{}", ctx.dep_name),
        ));
    }
    prepare.env = Some(vars);
    prepare.volume_mounts = Some(vec![
        mount(SRC_VOLUME, SRC_DIR, true),
        mount(INSTALL_VOLUME, INSTALL_DIR, false),
    ]);
    out.push(prepare);

    let deps_wanted =
        ctx.has_deps || (ctx.content_type.deps_in_archive && !ctx.dep_name.is_empty());
    if let (true, Some(phase)) = (deps_wanted, install_phase) {
        let mut install = base(INIT_INSTALL, &phase.image);
        let mut vars = vec![
            env("FUNC_RUNTIME", ctx.runtime),
            env(
                "KUBELESS_DEPS_FILE",
                format!("{INSTALL_DIR}/{}", ctx.dep_name),
            ),
            env("KUBELESS_INSTALL_VOLUME", INSTALL_DIR),
        ];
        upsert_env(&mut vars, phase.env.iter().map(|(k, v)| env(k, v.clone())));
        install.env = Some(vars);
        set_step_command(&mut install, phase.command.as_deref(), "install");
        install.volume_mounts = Some(vec![mount(INSTALL_VOLUME, INSTALL_DIR, false)]);
        out.push(install);
    }

    if let Some(phase) = resolved.phase(PHASE_COMPILATION) {
        let mut compile = base(INIT_COMPILE, &phase.image);
        let (module, function) = ctx
            .handler
            .map(|h| (h.module.clone(), h.function.clone()))
            .unwrap_or_default();
        let mut vars = vec![
            env("FUNC_RUNTIME", ctx.runtime),
            env("KUBELESS_INSTALL_VOLUME", INSTALL_DIR),
            env("KUBELESS_FUNC_NAME", function.clone()),
            env("FUNC_HANDLER", function),
            env("MOD_NAME", module),
        ];
        upsert_env(&mut vars, phase.env.iter().map(|(k, v)| env(k, v.clone())));
        compile.env = Some(vars);
        set_step_command(&mut compile, phase.command.as_deref(), "compile");
        compile.volume_mounts = Some(vec![mount(INSTALL_VOLUME, INSTALL_DIR, false)]);
        out.push(compile);
    }
    out
}

/// Kubeless catalogues give a shell command per phase; our runtime image takes a subcommand.
fn set_step_command(c: &mut Container, command: Option<&str>, subcommand: &str) {
    match command.map(str::trim).filter(|s| !s.is_empty()) {
        Some(cmd) => {
            c.command = Some(vec!["sh".into(), "-c".into(), cmd.into()]);
        }
        None => c.args = Some(vec![subcommand.into()]),
    }
}

fn merged(
    base: Option<BTreeMap<String, String>>,
    over: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = base.unwrap_or_default();
    out.extend(over.clone());
    out
}

fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text.push_str(": ");
        text.push_str(&s.to_string());
        cur = s.source();
    }
    text
}

/// First 16 hex digits of the sha256 of `value`'s JSON.
pub fn short_hash<T: Serialize>(value: &T) -> String {
    // Serialising plain k8s structs and maps cannot fail; an empty hash would only force an
    // extra apply, never skip one.
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    hex::encode(&digest[..8])
}

/// Sets [`APPLIED_HASH`] to the hash of the object without that annotation.
fn stamp<T: Resource + Serialize>(mut obj: T) -> T {
    if let Some(a) = obj.meta_mut().annotations.as_mut() {
        a.remove(APPLIED_HASH);
    }
    let hash = short_hash(&obj);
    obj.meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(APPLIED_HASH.into(), hash);
    obj
}

/// The hash a live child carries, if any.
pub fn applied_hash<T: Resource>(obj: &T) -> Option<&str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(APPLIED_HASH)
        .map(String::as_str)
}

/// Owner reference check: the child belongs to this Function.
pub fn owned_by<T: Resource>(obj: &T, owner: &OwnerReference) -> bool {
    obj.owner_references().iter().any(|o| o.uid == owner.uid)
}

#[cfg(test)]
mod tests;
