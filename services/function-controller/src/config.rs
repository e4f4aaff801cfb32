//! The controller configuration read from the `kubeless-config` ConfigMap.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::catalogue::Catalogue;

/// ConfigMap key holding the runtime catalogue JSON.
pub const KEY_RUNTIME_IMAGES: &str = "runtime-images";
/// ConfigMap key holding the default Deployment merged into every function.
pub const KEY_DEPLOYMENT: &str = "deployment";
/// ConfigMap key overriding the image of the `prepare` init container.
pub const KEY_PROVISION_IMAGE: &str = "provision-image";
/// ConfigMap key restricting the watched Functions to one namespace.
pub const KEY_FUNCTIONS_NAMESPACE: &str = "functions-namespace";
/// ConfigMap key (Kubeless's name) switching the build step on for every Function.
pub const KEY_ENABLE_BUILD_STEP: &str = "enable-build-step";
/// ConfigMap key (Kubeless's name): `"false"` talks plain HTTP to the function registry.
pub const KEY_REGISTRY_TLS_VERIFY: &str = "function-registry-tls-verify";
/// ConfigMap key (Kubeless's name): image of the build Job's push step.
pub const KEY_BUILDER_IMAGE: &str = "builder-image";
/// ConfigMap key (Kubeless's name): image pull Secret of the builder image.
pub const KEY_BUILDER_IMAGE_SECRET: &str = "builder-image-secret";
/// ConfigMap key (ours): the registry function images are pushed to, `host[:port][/path]`.
pub const KEY_FUNCTION_REGISTRY: &str = "function-registry";
/// ConfigMap key (ours): the Secret, in each Function's namespace, with the registry
/// credentials (`.dockerconfigjson`) and optionally a CA bundle (`ca.crt`).
pub const KEY_FUNCTION_REGISTRY_SECRET: &str = "function-registry-secret";

/// Secret Kubeless's build step read the registry credentials from, in the Function's namespace.
pub const DEFAULT_REGISTRY_SECRET: &str = "kubeless-registry-credentials";
/// Builder image of this release.
pub const DEFAULT_BUILDER_IMAGE: &str = concat!("kubeless-rs/builder:", env!("CARGO_PKG_VERSION"));

/// How Functions are built into images (the build step).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildSettings {
    /// Whether Functions without `.spec.build.enabled` are built.
    pub enabled: bool,
    /// Registry and repository prefix images are pushed to (`host[:port][/path]`); the build
    /// step cannot run without one.
    pub registry: Option<String>,
    /// Secret with the registry credentials and CA bundle, in each Function's namespace
    /// (optional: an anonymous registry needs none).
    pub registry_secret: String,
    /// Talk plain HTTP to the registry (a local registry without TLS).
    pub insecure: bool,
    /// Image of the push step of the build Job.
    pub builder_image: String,
    /// Image pull Secret of the builder image.
    pub builder_image_secret: Option<String>,
}

impl Default for BuildSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            registry: None,
            registry_secret: DEFAULT_REGISTRY_SECRET.into(),
            insecure: false,
            builder_image: DEFAULT_BUILDER_IMAGE.into(),
            builder_image_secret: None,
        }
    }
}

/// The build keys a ConfigMap sets; each one wins over the controller's flag.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildKeys {
    enabled: Option<bool>,
    registry: Option<String>,
    registry_secret: Option<String>,
    insecure: Option<bool>,
    builder_image: Option<String>,
    builder_image_secret: Option<String>,
}

impl BuildKeys {
    /// `base` (from the flags) with what the ConfigMap says on top.
    pub fn over(&self, base: &BuildSettings) -> BuildSettings {
        let mut out = base.clone();
        if let Some(v) = self.enabled {
            out.enabled = v;
        }
        if let Some(v) = &self.registry {
            out.registry = Some(v.clone());
        }
        if let Some(v) = &self.registry_secret {
            out.registry_secret.clone_from(v);
        }
        if let Some(v) = self.insecure {
            out.insecure = v;
        }
        if let Some(v) = &self.builder_image {
            out.builder_image.clone_from(v);
        }
        if let Some(v) = &self.builder_image_secret {
            out.builder_image_secret = Some(v.clone());
        }
        out
    }
}

/// What the ConfigMap tells the controller.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// Runtime catalogue (the built-in one when the ConfigMap has none).
    pub catalogue: Catalogue,
    /// Default Deployment (raw JSON) the function's own template is merged over.
    pub default_deployment: Option<Value>,
    /// Image of the `prepare` init container; the runtime image when `None`.
    pub provision_image: Option<String>,
    /// Only this namespace's Functions are reconciled; all when `None`.
    pub functions_namespace: Option<String>,
    /// Make the runtime listen on the pod IP (`KUBELESS_LISTEN_ADDRESS` from `status.podIP`).
    /// Set from a controller flag, not from the ConfigMap: needed on devcluster, where pods are
    /// processes sharing one network namespace.
    pub listen_on_pod_ip: bool,
    /// Cluster DNS domain of `status.url` (a controller flag, like `listen_on_pod_ip`).
    pub cluster_domain: String,
    /// Scale to zero for Functions that do not say (controller flags).
    pub scale_to_zero: kubeless_api::scale::ScaleToZeroDefaults,
    /// The build step (controller flags, then the ConfigMap's [`Self::build_keys`] over them).
    pub build: BuildSettings,
    /// The build keys the ConfigMap set.
    pub build_keys: BuildKeys,
    /// What a Function's pod template may ask for (controller flags).
    pub template_policy: crate::policy::TemplatePolicy,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            catalogue: Catalogue::builtin(),
            default_deployment: None,
            provision_image: None,
            functions_namespace: None,
            listen_on_pod_ip: false,
            cluster_domain: kubeless_api::function::DEFAULT_CLUSTER_DOMAIN.into(),
            scale_to_zero: Default::default(),
            build: BuildSettings::default(),
            build_keys: BuildKeys::default(),
            template_policy: Default::default(),
        }
    }
}

/// A key of the ConfigMap that could not be used; the rest of the ConfigMap still applies and
/// the key falls back to its default.
#[derive(Debug, thiserror::Error)]
pub enum ConfigProblem {
    /// `runtime-images` is not a valid catalogue.
    #[error("kubeless-config key runtime-images is not a valid runtime catalogue")]
    RuntimeImages(#[source] serde_yaml_ng::Error),
    /// `deployment` is not a JSON/YAML object.
    #[error("kubeless-config key deployment is not a Deployment object")]
    Deployment(#[source] serde_yaml_ng::Error),
    /// A true/false key holds something else.
    #[error("kubeless-config key {key} is {value:?}, not \"true\" or \"false\"")]
    NotABool {
        /// The key.
        key: &'static str,
        /// What it holds.
        value: String,
    },
}

impl ControllerConfig {
    /// Reads the ConfigMap data. Bad keys are reported and replaced by their defaults, so one
    /// typo does not stop every function from reconciling.
    pub fn from_data(data: &BTreeMap<String, String>) -> (Self, Vec<ConfigProblem>) {
        let mut cfg = Self::default();
        let mut problems = Vec::new();
        let non_empty = |key: &str| {
            data.get(key)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        if let Some(text) = non_empty(KEY_RUNTIME_IMAGES) {
            match Catalogue::parse(&text) {
                Ok(c) => cfg.catalogue = c,
                Err(e) => problems.push(ConfigProblem::RuntimeImages(e)),
            }
        }
        if let Some(text) = non_empty(KEY_DEPLOYMENT) {
            match serde_yaml_ng::from_str::<Value>(&text) {
                Ok(v @ Value::Object(_)) => cfg.default_deployment = Some(v),
                Ok(Value::Null) => {}
                Ok(_) => problems.push(ConfigProblem::Deployment(serde::de::Error::custom(
                    "expected a mapping",
                ))),
                Err(e) => problems.push(ConfigProblem::Deployment(e)),
            }
        }
        cfg.provision_image = non_empty(KEY_PROVISION_IMAGE);
        cfg.functions_namespace = non_empty(KEY_FUNCTIONS_NAMESPACE);
        let mut flag = |key: &'static str| {
            let v = non_empty(key)?;
            match v.to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                _ => {
                    problems.push(ConfigProblem::NotABool { key, value: v });
                    None
                }
            }
        };
        cfg.build_keys = BuildKeys {
            enabled: flag(KEY_ENABLE_BUILD_STEP),
            insecure: flag(KEY_REGISTRY_TLS_VERIFY).map(|verify| !verify),
            registry: non_empty(KEY_FUNCTION_REGISTRY),
            registry_secret: non_empty(KEY_FUNCTION_REGISTRY_SECRET),
            builder_image: non_empty(KEY_BUILDER_IMAGE),
            builder_image_secret: non_empty(KEY_BUILDER_IMAGE_SECRET),
        };
        cfg.build = cfg.build_keys.over(&cfg.build);
        (cfg, problems)
    }
}

/// Where the local setup and tools built for Kubeless look for the ConfigMap.
pub const CONFIG_NAMESPACE: &str = "kubeless";
/// Name of the ConfigMap.
pub const CONFIG_NAME: &str = "kubeless-config";

/// Where the chart keeps the built-in catalogue (relative to this crate): the function-controller
/// subchart's `kubeless-config` ConfigMap uses it when `config.data.runtime-images` is empty.
pub const CHART_RUNTIME_IMAGES: &str =
    "../../deploy/helm/kubeless/charts/function-controller/files/runtime-images.json";

/// The built-in runtimes in Kubeless's `runtime-images` JSON shape, ending with a newline.
pub fn builtin_runtime_images_json() -> Result<String, String> {
    let json = Catalogue::builtin().to_json().map_err(|e| e.to_string())?;
    Ok(format!("{json}\n"))
}

/// The `kubeless-config` ConfigMap describing the built-in runtimes in Kubeless's JSON shape, as
/// YAML (what `deploy/kubeless-config.yaml` holds).
pub fn builtin_config_map_yaml() -> Result<String, String> {
    let json = Catalogue::builtin().to_json().map_err(|e| e.to_string())?;
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(CONFIG_NAME.into()),
            namespace: Some(CONFIG_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(KEY_RUNTIME_IMAGES.to_string(), json)])),
        ..Default::default()
    };
    let body = serde_yaml_ng::to_string(&cm).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Generated by `cargo run -p function-controller --bin kubeless-config`: do not edit.\n\
         # The kubeless namespace, and the runtimes the function-controller runs where tools\n\
         # built for Kubeless read them (ConfigMap kubeless-config, key runtime-images).\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {CONFIG_NAMESPACE}\n---\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_kubeless_config_is_current_and_honoured() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/kubeless-config.yaml");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            committed,
            builtin_config_map_yaml().unwrap(),
            "{} is stale: run `cargo run -p function-controller --bin kubeless-config`",
            path.display()
        );
        let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CHART_RUNTIME_IMAGES);
        assert_eq!(
            std::fs::read_to_string(&chart).unwrap_or_default(),
            builtin_runtime_images_json().unwrap(),
            "{} is stale: run `cargo run -p function-controller --bin kubeless-config`",
            chart.display()
        );
        // The controller reads it back as the same catalogue.
        let (_, cm) = committed.split_once("\n---\n").unwrap();
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_yaml_ng::from_str(cm).unwrap();
        let (cfg, problems) = ControllerConfig::from_data(&cm.data.unwrap());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.catalogue, Catalogue::builtin());
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_configmap_gives_builtin_defaults() {
        let (cfg, problems) = ControllerConfig::from_data(&BTreeMap::new());
        assert!(problems.is_empty());
        assert_eq!(cfg, ControllerConfig::default());
        assert!(cfg.catalogue.resolve("python", "3.11").is_some());
    }

    #[test]
    fn keys_are_honoured() {
        let (cfg, problems) = ControllerConfig::from_data(&data(&[
            (
                KEY_RUNTIME_IMAGES,
                r#"[{"ID":"ruby","depName":"Gemfile","fileNameSuffix":".rb","versions":[{"name":"r","version":"3.3","images":[{"phase":"runtime","image":"ruby-rt:3.3"}]}]}]"#,
            ),
            (
                KEY_DEPLOYMENT,
                "spec:\n  template:\n    spec:\n      nodeSelector: {disk: ssd}\n",
            ),
            (KEY_PROVISION_IMAGE, "my/unzip:1"),
            (KEY_FUNCTIONS_NAMESPACE, " team-a "),
        ]));
        assert!(problems.is_empty(), "{problems:?}");
        assert!(cfg.catalogue.resolve("ruby", "3.3").is_some());
        assert!(cfg.catalogue.resolve("python", "3.11").is_none());
        assert_eq!(
            cfg.default_deployment.unwrap()["spec"]["template"]["spec"]["nodeSelector"]["disk"],
            "ssd"
        );
        assert_eq!(cfg.provision_image.as_deref(), Some("my/unzip:1"));
        assert_eq!(cfg.functions_namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn build_keys_use_kubeless_names_and_win_over_flags() {
        let flags = BuildSettings {
            enabled: false,
            registry: Some("flag.example:5000".into()),
            ..BuildSettings::default()
        };
        let (cfg, problems) = ControllerConfig::from_data(&data(&[
            (KEY_ENABLE_BUILD_STEP, "true"),
            (KEY_REGISTRY_TLS_VERIFY, "false"),
            (KEY_BUILDER_IMAGE, "my/builder:1"),
        ]));
        assert!(problems.is_empty(), "{problems:?}");
        let b = cfg.build_keys.over(&flags);
        assert!(b.enabled && b.insecure);
        assert_eq!(b.registry.as_deref(), Some("flag.example:5000"));
        assert_eq!(b.builder_image, "my/builder:1");
        assert_eq!(b.registry_secret, DEFAULT_REGISTRY_SECRET);
        // No keys: the flags stand.
        assert_eq!(BuildKeys::default().over(&flags), flags);
        let (_, problems) = ControllerConfig::from_data(&data(&[(KEY_ENABLE_BUILD_STEP, "yes")]));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().contains("enable-build-step"));
    }

    #[test]
    fn bad_keys_fall_back_and_are_reported() {
        let (cfg, problems) = ControllerConfig::from_data(&data(&[
            (KEY_RUNTIME_IMAGES, "{{{"),
            (KEY_DEPLOYMENT, "- a list"),
        ]));
        assert_eq!(problems.len(), 2);
        assert_eq!(cfg.catalogue, Catalogue::builtin());
        assert!(cfg.default_deployment.is_none());
    }
}
