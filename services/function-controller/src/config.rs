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
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            catalogue: Catalogue::builtin(),
            default_deployment: None,
            provision_image: None,
            functions_namespace: None,
            listen_on_pod_ip: false,
        }
    }
}

/// A key of the ConfigMap that could not be used; the rest of the ConfigMap still applies and
/// the key falls back to its default.
#[derive(Debug, thiserror::Error)]
pub enum ConfigProblem {
    /// `runtime-images` is not a valid catalogue.
    #[error("kubeless-config key runtime-images is not a valid runtime catalogue")]
    RuntimeImages(#[source] serde_yaml::Error),
    /// `deployment` is not a JSON/YAML object.
    #[error("kubeless-config key deployment is not a Deployment object")]
    Deployment(#[source] serde_yaml::Error),
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
            match serde_yaml::from_str::<Value>(&text) {
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
        (cfg, problems)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
