//! The runtime catalogue: which images build and run each runtime version.
//!
//! The JSON shape is Kubeless's `runtime-images` ConfigMap key, so a Kubeless catalogue can be
//! pasted in unchanged. Where Kubeless releases disagreed on the key of the per-phase image
//! list (`images` vs `runtimeImage`), both are accepted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The image phase that runs the function.
pub const PHASE_RUNTIME: &str = "runtime";
/// The image phase that installs dependencies.
pub const PHASE_INSTALLATION: &str = "installation";
/// The image phase that compiles the function (Go, Java, ...).
pub const PHASE_COMPILATION: &str = "compilation";

/// One runtime id (e.g. `python`) with its versions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// Runtime id, e.g. `python`, `nodejs`.
    #[serde(rename = "ID")]
    pub id: String,
    /// Versions of this runtime.
    #[serde(default)]
    pub versions: Vec<RuntimeVersion>,
    /// Name of the dependency file (`requirements.txt`, `package.json`).
    #[serde(rename = "depName", default)]
    pub dep_name: String,
    /// Suffix of the source file (`.py`, `.js`).
    #[serde(rename = "fileNameSuffix", default)]
    pub file_name_suffix: String,
    /// Overrides the default `/healthz` liveness probe timing.
    #[serde(
        rename = "livenessProbeInfo",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub liveness_probe_info: Option<LivenessProbeInfo>,
}

/// Probe timing of a runtime (the subset of Kubeless's `livenessProbeInfo` we honour).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LivenessProbeInfo {
    /// Seconds before the first probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    /// Seconds between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<i32>,
}

/// One version of a runtime and its image per phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeVersion {
    /// Free-form name, e.g. `python311`.
    #[serde(default)]
    pub name: String,
    /// Version as written after the id in `.spec.runtime` (`3.11`, `20`).
    pub version: String,
    /// Image per phase.
    #[serde(default, alias = "runtimeImage")]
    pub images: Vec<PhaseImage>,
    /// Pull secrets for this version's images.
    #[serde(
        rename = "imagePullSecrets",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub image_pull_secrets: Vec<ImagePullSecret>,
}

/// Image of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseImage {
    /// `installation`, `compilation` or `runtime`.
    pub phase: String,
    /// Image reference.
    pub image: String,
    /// Shell command for init phases (Kubeless catalogues); when absent our runtime image's own
    /// subcommand (`install`, `compile`) runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Extra environment of the container of this phase.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// Kubeless's pull-secret entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImagePullSecret {
    /// Name of the Secret.
    #[serde(rename = "ImageSecret")]
    pub image_secret: String,
}

/// The catalogue: every known runtime.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Catalogue {
    /// Runtimes in catalogue order.
    pub runtimes: Vec<RuntimeInfo>,
}

/// A runtime version resolved from the catalogue.
#[derive(Clone, Copy, Debug)]
pub struct Resolved<'a> {
    /// The runtime id entry.
    pub info: &'a RuntimeInfo,
    /// The version entry.
    pub version: &'a RuntimeVersion,
}

impl<'a> Resolved<'a> {
    /// The image of `phase`, if the version has that phase.
    pub fn phase(&self, phase: &str) -> Option<&'a PhaseImage> {
        self.version.images.iter().find(|i| i.phase == phase)
    }
}

impl Catalogue {
    /// Parses Kubeless's `runtime-images` JSON (YAML is accepted too, as it is a superset).
    pub fn parse(text: &str) -> Result<Self, serde_yaml_ng::Error> {
        let runtimes: Vec<RuntimeInfo> = serde_yaml_ng::from_str(text)?;
        Ok(Self { runtimes })
    }

    /// The built-in catalogue: Python 3.11/3.12, Node.js 20/22, Ruby 3.1, PHP 8.2, Go 1.19 and
    /// Java 17 on our runtime images.
    pub fn builtin() -> Self {
        fn versions(image: &str, versions: &[&str], id: &str) -> Vec<RuntimeVersion> {
            versions
                .iter()
                .map(|v| {
                    let image = format!("{image}:{v}");
                    RuntimeVersion {
                        name: format!("{id}{}", v.replace('.', "")),
                        version: (*v).to_string(),
                        images: vec![
                            PhaseImage {
                                phase: PHASE_INSTALLATION.into(),
                                image: image.clone(),
                                command: None,
                                env: BTreeMap::new(),
                            },
                            PhaseImage {
                                phase: PHASE_RUNTIME.into(),
                                image,
                                command: None,
                                env: BTreeMap::new(),
                            },
                        ],
                        image_pull_secrets: Vec::new(),
                    }
                })
                .collect()
        }
        // Compiled runtimes: `prepare`, then `compile` (which also resolves go.mod / pom.xml
        // dependencies) in the runtime image; no separate install step.
        fn compiled(image: &str, version: &str, id: &str) -> Vec<RuntimeVersion> {
            let image = format!("{image}:{version}");
            let phase = |phase: &str| PhaseImage {
                phase: phase.into(),
                image: image.clone(),
                command: None,
                env: BTreeMap::new(),
            };
            vec![RuntimeVersion {
                name: format!("{id}{}", version.replace('.', "")),
                version: version.to_string(),
                images: vec![phase(PHASE_COMPILATION), phase(PHASE_RUNTIME)],
                image_pull_secrets: Vec::new(),
            }]
        }
        Self {
            runtimes: vec![
                RuntimeInfo {
                    id: "python".into(),
                    versions: versions("kubeless-rs/runtime-python", &["3.11", "3.12"], "python"),
                    dep_name: "requirements.txt".into(),
                    file_name_suffix: ".py".into(),
                    liveness_probe_info: None,
                },
                RuntimeInfo {
                    id: "nodejs".into(),
                    versions: versions("kubeless-rs/runtime-nodejs", &["20", "22"], "nodejs"),
                    dep_name: "package.json".into(),
                    file_name_suffix: ".js".into(),
                    liveness_probe_info: None,
                },
                RuntimeInfo {
                    id: "ruby".into(),
                    versions: versions("kubeless-rs/runtime-ruby", &["3.1"], "ruby"),
                    dep_name: "Gemfile".into(),
                    file_name_suffix: ".rb".into(),
                    liveness_probe_info: None,
                },
                RuntimeInfo {
                    id: "php".into(),
                    versions: versions("kubeless-rs/runtime-php", &["8.2"], "php"),
                    dep_name: "composer.json".into(),
                    file_name_suffix: ".php".into(),
                    liveness_probe_info: None,
                },
                RuntimeInfo {
                    id: "go".into(),
                    versions: compiled("kubeless-rs/runtime-go", "1.19", "go"),
                    dep_name: "go.mod".into(),
                    file_name_suffix: ".go".into(),
                    liveness_probe_info: None,
                },
                RuntimeInfo {
                    id: "java".into(),
                    versions: compiled("kubeless-rs/runtime-java", "17", "java"),
                    dep_name: "pom.xml".into(),
                    file_name_suffix: ".java".into(),
                    liveness_probe_info: None,
                },
            ],
        }
    }

    /// The catalogue as Kubeless's `runtime-images` JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(&self.runtimes)
    }

    /// Runtime ids, for splitting `.spec.runtime` into id and version.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.runtimes.iter().map(|r| r.id.as_str())
    }

    /// Looks up `<id>` + `<version>`.
    pub fn resolve(&self, id: &str, version: &str) -> Option<Resolved<'_>> {
        let info = self.runtimes.iter().find(|r| r.id == id)?;
        let version = info.versions.iter().find(|v| v.version == version)?;
        Some(Resolved { info, version })
    }

    /// Every `<id><version>` the catalogue knows, for error messages.
    pub fn known(&self) -> Vec<String> {
        self.runtimes
            .iter()
            .flat_map(|r| {
                r.versions
                    .iter()
                    .map(move |v| format!("{}{}", r.id, v.version))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_resolves_our_runtimes() {
        let c = Catalogue::builtin();
        let py = c.resolve("python", "3.12").unwrap();
        assert_eq!(
            py.phase(PHASE_RUNTIME).unwrap().image,
            "kubeless-rs/runtime-python:3.12"
        );
        assert_eq!(py.info.dep_name, "requirements.txt");
        assert!(py.phase(PHASE_COMPILATION).is_none());
        let node = c.resolve("nodejs", "22").unwrap();
        assert_eq!(node.info.file_name_suffix, ".js");
        assert!(c.resolve("python", "2.7").is_none());
        assert!(c.resolve("ruby", "3.3").is_none());
        let ruby = c.resolve("ruby", "3.1").unwrap();
        assert_eq!(
            ruby.phase(PHASE_INSTALLATION).unwrap().image,
            "kubeless-rs/runtime-ruby:3.1"
        );
        assert_eq!(
            (
                ruby.info.dep_name.as_str(),
                ruby.info.file_name_suffix.as_str()
            ),
            ("Gemfile", ".rb")
        );
        let php = c.resolve("php", "8.2").unwrap();
        assert_eq!(
            php.phase(PHASE_RUNTIME).unwrap().image,
            "kubeless-rs/runtime-php:8.2"
        );
        assert_eq!(
            (
                php.info.dep_name.as_str(),
                php.info.file_name_suffix.as_str()
            ),
            ("composer.json", ".php")
        );
        for id in [
            "python3.11",
            "python3.12",
            "nodejs20",
            "nodejs22",
            "ruby3.1",
            "php8.2",
        ] {
            assert!(c.known().iter().any(|k| k == id), "{id}");
        }
        let go = c.resolve("go", "1.19").unwrap();
        assert_eq!(
            go.phase(PHASE_COMPILATION).unwrap().image,
            "kubeless-rs/runtime-go:1.19"
        );
        assert!(go.phase(PHASE_INSTALLATION).is_none());
        assert_eq!(go.info.dep_name, "go.mod");
        let java = c.resolve("java", "17").unwrap();
        assert_eq!(
            java.phase(PHASE_RUNTIME).unwrap().image,
            "kubeless-rs/runtime-java:17"
        );
        assert_eq!(java.info.file_name_suffix, ".java");
        assert_eq!(c.known().len(), 8);
    }

    #[test]
    fn parses_kubeless_catalogue_with_both_image_keys() {
        let text = r#"[
          {"ID": "go", "depName": "go.mod", "fileNameSuffix": ".go",
           "livenessProbeInfo": {"initialDelaySeconds": 5, "periodSeconds": 10},
           "versions": [{"name": "go114", "version": "1.14",
             "images": [
               {"phase": "compilation", "image": "kubeless/go-init:1.14", "command": "/compile-function.sh",
                "env": {"GOPATH": "$(KUBELESS_INSTALL_VOLUME)/.gopath"}},
               {"phase": "runtime", "image": "kubeless/go:1.14"}],
             "imagePullSecrets": [{"ImageSecret": "regcred"}]}]},
          {"ID": "ruby", "depName": "Gemfile", "fileNameSuffix": ".rb",
           "versions": [{"name": "ruby26", "version": "2.6",
             "runtimeImage": [{"phase": "runtime", "image": "kubeless/ruby:2.6"}]}]}
        ]"#;
        let c = Catalogue::parse(text).unwrap();
        let go = c.resolve("go", "1.14").unwrap();
        let compile = go.phase(PHASE_COMPILATION).unwrap();
        assert_eq!(compile.command.as_deref(), Some("/compile-function.sh"));
        assert_eq!(
            compile.env.get("GOPATH").map(String::as_str),
            Some("$(KUBELESS_INSTALL_VOLUME)/.gopath")
        );
        assert_eq!(go.version.image_pull_secrets[0].image_secret, "regcred");
        assert_eq!(
            go.info.liveness_probe_info.as_ref().unwrap().period_seconds,
            Some(10)
        );
        let ruby = c.resolve("ruby", "2.6").unwrap();
        assert_eq!(
            ruby.phase(PHASE_RUNTIME).unwrap().image,
            "kubeless/ruby:2.6"
        );
        // Round trip through our JSON keeps everything.
        assert_eq!(Catalogue::parse(&c.to_json().unwrap()).unwrap(), c);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Catalogue::parse("{not a list").is_err());
        assert!(Catalogue::parse(r#"[{"versions": []}]"#).is_err());
    }
}
