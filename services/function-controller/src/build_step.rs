//! The build step, pure part: what goes into a Function's image (its hash and reference), the
//! build Job that makes it, and the Deployment that runs it. See [`kubeless_api::build`] for
//! the contract and `crate::reconcile` for the API calls.
//!
//! The build Job runs the same `prepare`, `install` and `compile` steps a function pod runs
//! without the build step, into the same `/kubeless` emptyDir, then the builder pushes the
//! runtime image plus one layer holding `/kubeless` (`kubeless-builder push`). So every runtime
//! the catalogue has is built the same way, compiled ones included.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::Deployment,
    batch::v1::{Job, JobSpec},
    core::v1::{
        Container, EnvVar, KeyToPath, LocalObjectReference, PodSpec, PodTemplateSpec,
        SecretVolumeSource, Volume,
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kubeless_api::labels::{CREATED_BY, CREATED_BY_VALUE, FUNCTION};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::builders::{INSTALL_DIR, INSTALL_VOLUME, SRC_VOLUME};

/// Label on build Jobs and their pods: the hash being built.
pub const BUILD_HASH_LABEL: &str = "kubeless.io/build-hash";
/// Label on build pods: the Function they build (not `function`, which the function's Service
/// selects on).
pub const BUILD_OF_LABEL: &str = "kubeless.io/build-of";
/// Name of the push container of a build Job.
pub const PUSH_CONTAINER: &str = "build";
/// Where the registry Secret is mounted in the push container.
pub const REGISTRY_DIR: &str = "/var/run/kubeless/registry";
/// Secret key of the registry credentials (a `kubernetes.io/dockerconfigjson` Secret).
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";
/// Secret key of the registry's CA bundle (optional).
pub const CA_KEY: &str = "ca.crt";
/// Volume of the registry Secret.
const REGISTRY_VOLUME: &str = "kubeless-registry";
/// Characters of the hash in the image tag and Job name.
const TAG_LEN: usize = 24;
const JOB_HASH_LEN: usize = 10;
/// A build that runs longer than this fails (a hung package index, a stuck registry).
pub const BUILD_DEADLINE_SECS: i64 = 1800;

/// Everything that decides the content of a Function's image layer. Its hash is the tag.
#[derive(Serialize)]
pub struct BuildInputs<'a> {
    /// The runtime image (the base of the built image).
    pub base: &'a str,
    /// The catalogue's phases of the runtime version (install and compile images, commands,
    /// environment).
    pub phases: &'a [crate::catalogue::PhaseImage],
    /// Runtime id and version as the Function names them.
    pub runtime: &'a str,
    /// Function content type (`text`, `base64`, `url+zip`, ...).
    pub content_type: String,
    /// The code ConfigMap's data: handler, source, dependency file.
    pub data: &'a BTreeMap<String, String>,
    /// `.spec.checksum`.
    pub checksum: &'a str,
    /// The prepare step's image (`provision-image`), which unpacks the code.
    pub prepare_image: &'a str,
}

/// The full sha256 (hex) of the inputs.
pub fn inputs_hash(inputs: &BuildInputs<'_>) -> String {
    // Plain structs and maps serialise; an empty input would only cost a rebuild.
    let bytes = serde_json::to_vec(inputs).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

/// `registry/namespace/name:tag`, the tag being the start of `hash`.
pub fn image_ref(registry: &str, namespace: &str, name: &str, hash: &str) -> String {
    let registry = registry.trim().trim_end_matches('/');
    let tag = &hash[..hash.len().min(TAG_LEN)];
    format!("{registry}/{namespace}/{name}:{tag}")
}

/// `<name>-build-<hash>`, shortened to fit a label value (63 characters), as Job names must.
pub fn job_name(name: &str, hash: &str) -> String {
    let suffix = format!("-build-{}", &hash[..hash.len().min(JOB_HASH_LEN)]);
    let room = 63 - suffix.len();
    let head: String = name.chars().take(room).collect();
    format!("{}{suffix}", head.trim_end_matches(['-', '.']))
}

/// What the registry Secret in the Function's namespace holds (read by the reconciler).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryAccess {
    /// The Secret's name, when it exists.
    pub secret: Option<String>,
    /// It has `.dockerconfigjson`.
    pub docker_config: bool,
    /// It has `ca.crt`.
    pub ca: bool,
}

/// The build of one Function's current code, computed by [`crate::builders::build`].
#[derive(Clone, Debug)]
pub struct BuildPlan {
    /// Hash of the inputs (full sha256 hex).
    pub hash: String,
    /// The image to build (`registry/namespace/name:tag`).
    pub image: String,
    /// The runtime image it is built on.
    pub base: String,
    /// The build Job's name.
    pub job_name: String,
    /// Talk plain HTTP to the registry.
    pub insecure: bool,
    /// Namespace and owner of the Job.
    pub(crate) meta: ObjectMeta,
    /// The steps that fill `/kubeless` (prepare, install, compile).
    pub(crate) steps: Vec<Container>,
    /// The function pod's volumes the steps use, security context and pull secrets.
    pub(crate) pod: PodSpec,
    /// The push container's image and pull Secret.
    pub(crate) builder_image: String,
    pub(crate) builder_image_secret: Option<String>,
}

impl BuildPlan {
    /// The build Job, given what the registry Secret holds.
    pub fn job(&self, access: &RegistryAccess) -> Job {
        let mut pod = self.pod.clone();
        pod.restart_policy = Some("Never".into());
        pod.init_containers = Some(self.steps.clone());
        let volumes = pod.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name == SRC_VOLUME || v.name == INSTALL_VOLUME);
        let mut env = vec![
            var("KUBELESS_BUILD_BASE", &self.base),
            var("KUBELESS_BUILD_TARGET", &self.image),
            var("KUBELESS_BUILD_DIR", INSTALL_DIR),
            // The layer's root is the builder's default, /kubeless (INSTALL_DIR): not passed, as
            // a value that is also a mount path is a path, not an image path, where a pod runner
            // maps mount paths (devcluster's process mode).
            var("KUBELESS_REGISTRY_INSECURE", &self.insecure.to_string()),
            // What the image is, for whoever finds it in the registry.
            var(
                "KUBELESS_BUILD_LABELS",
                &format!(
                    "io.kubeless.function={}/{},io.kubeless.build-hash={}",
                    self.meta.namespace.as_deref().unwrap_or_default(),
                    self.meta.name.as_deref().unwrap_or_default(),
                    self.hash
                ),
            ),
        ];
        let mut mounts = vec![crate::builders::mount(INSTALL_VOLUME, INSTALL_DIR, true)];
        if let Some(secret) = &access.secret {
            let mut items = Vec::new();
            if access.docker_config {
                items.push(key(DOCKER_CONFIG_KEY));
                env.push(var(
                    "KUBELESS_DOCKER_CONFIG",
                    &format!("{REGISTRY_DIR}/{DOCKER_CONFIG_KEY}"),
                ));
            }
            if access.ca {
                items.push(key(CA_KEY));
                env.push(var(
                    "KUBELESS_REGISTRY_CA_FILE",
                    &format!("{REGISTRY_DIR}/{CA_KEY}"),
                ));
            }
            if !items.is_empty() {
                volumes.push(Volume {
                    name: REGISTRY_VOLUME.into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret.clone()),
                        items: Some(items),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                });
                mounts.push(crate::builders::mount(REGISTRY_VOLUME, REGISTRY_DIR, true));
            }
        }
        let mut sc = crate::builders::restricted_security_context();
        sc.read_only_root_filesystem = Some(true);
        pod.containers = vec![Container {
            name: PUSH_CONTAINER.into(),
            image: Some(self.builder_image.clone()),
            args: Some(vec!["push".into()]),
            env: Some(env),
            volume_mounts: Some(mounts),
            security_context: Some(sc),
            termination_message_policy: Some("FallbackToLogsOnError".into()),
            ..Container::default()
        }];
        if let Some(s) = &self.builder_image_secret {
            let secrets = pod.image_pull_secrets.get_or_insert_with(Vec::new);
            if !secrets.iter().any(|x| &x.name == s) {
                secrets.push(LocalObjectReference { name: s.clone() });
            }
        }
        let name = self.meta.name.clone().unwrap_or_default();
        let labels = BTreeMap::from([
            (CREATED_BY.to_string(), CREATED_BY_VALUE.to_string()),
            (FUNCTION.to_string(), name.clone()),
            (BUILD_HASH_LABEL.to_string(), self.tag().to_string()),
        ]);
        let pod_labels = BTreeMap::from([
            (BUILD_OF_LABEL.to_string(), name),
            (BUILD_HASH_LABEL.to_string(), self.tag().to_string()),
        ]);
        Job {
            metadata: ObjectMeta {
                name: Some(self.job_name.clone()),
                namespace: self.meta.namespace.clone(),
                labels: Some(labels),
                owner_references: self.meta.owner_references.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                // A broken dependency file fails the same way twice: report it at once. A
                // transient failure is retried by deleting the Job (the controller makes a new one).
                backoff_limit: Some(0),
                active_deadline_seconds: Some(BUILD_DEADLINE_SECS),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod_labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(pod),
                },
                ..JobSpec::default()
            }),
            status: None,
        }
    }

    /// The image tag (the start of the hash).
    pub fn tag(&self) -> &str {
        &self.hash[..self.hash.len().min(TAG_LEN)]
    }

    /// The owner reference the Job carries (the Function).
    pub fn owner(&self) -> Option<&OwnerReference> {
        self.meta.owner_references.as_ref()?.first()
    }
}

/// The function's Deployment on the built `image`: no install steps, no code or install volume
/// (the image holds `/kubeless`), and `pull_secret` among its image pull Secrets.
pub fn run_built(dep: &mut Deployment, image: &str, pull_secret: Option<&str>) {
    let Some(pod) = dep.spec.as_mut().and_then(|s| s.template.spec.as_mut()) else {
        return;
    };
    if let Some(secret) = pull_secret {
        let secrets = pod.image_pull_secrets.get_or_insert_with(Vec::new);
        if !secrets.iter().any(|s| s.name == secret) {
            secrets.push(LocalObjectReference {
                name: secret.to_string(),
            });
        }
    }
    pod.init_containers = None;
    if let Some(v) = pod.volumes.as_mut() {
        v.retain(|v| v.name != SRC_VOLUME && v.name != INSTALL_VOLUME);
    }
    if pod.volumes.as_ref().is_some_and(Vec::is_empty) {
        pod.volumes = None;
    }
    if let Some(c) = pod.containers.first_mut() {
        c.image = Some(image.into());
        if let Some(m) = c.volume_mounts.as_mut() {
            m.retain(|m| m.name != INSTALL_VOLUME && m.name != SRC_VOLUME);
        }
        if c.volume_mounts.as_ref().is_some_and(Vec::is_empty) {
            c.volume_mounts = None;
        }
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn key(k: &str) -> KeyToPath {
    KeyToPath {
        key: k.into(),
        path: k.into(),
        mode: None,
    }
}
