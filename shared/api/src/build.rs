//! The build step: a Function's code and dependencies baked into an image once, instead of
//! being installed by an init container in every pod.
//!
//! The contract: while the build step is on for a Function (the install's default, or
//! `.spec.build.enabled`), the function-controller runs a build Job that prepares the code,
//! installs the dependencies (and compiles, for compiled runtimes) into `/kubeless`, and pushes
//! the runtime image plus one layer holding `/kubeless` to the configured registry. The tag is
//! content-addressed ([`BuildStatus::hash`]): the same runtime, code and dependency file give the
//! same image, so an unchanged Function is never rebuilt and a rollback reuses its image.
//! `.status.build` tells where the build is; the Deployment runs the built image with no
//! install step once it exists.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `.spec.build` of a Function (our addition; Kubeless had only the install-wide switch).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildSpec {
    /// Build an image with the code and dependencies baked in (`true`) or install them at every
    /// pod start (`false`). Unset follows the install's default (the function-controller's
    /// `--build-step`, or `enable-build-step` in the `kubeless-config` ConfigMap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Where a Function's image build is (`.status.build.state`).
pub mod states {
    /// The build Job runs.
    pub const BUILDING: &str = "Building";
    /// The image exists in the registry (built now, or found there from an earlier build).
    pub const BUILT: &str = "Built";
    /// The build Job failed; `.status.build.message` holds the end of its log.
    pub const FAILED: &str = "Failed";
}

/// Event reasons of the build step (the condition reasons are
/// [`crate::conditions::reasons::BUILDING`] and [`crate::conditions::reasons::BUILD_FAILED`]).
pub mod reasons {
    /// Event: the image was built and pushed.
    pub const BUILT: &str = "Built";
    /// Event: the image for this code was already in the registry (a rollback, or a Function
    /// deleted and created again), so nothing was built.
    pub const REUSED: &str = "Reused";
}

/// `.status.build` of a Function: the image build of its current code.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildStatus {
    /// `Building`, `Built` or `Failed`.
    pub state: String,
    /// Hash of what goes into the image (runtime, install and compile steps, code, dependency
    /// file): the image tag.
    pub hash: String,
    /// The image built for that hash (`registry/namespace/name:tag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The build Job (absent when the image was found in the registry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// What happened: the registry digest when built, the end of the build log when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl BuildStatus {
    /// True when this status says the image for `hash` exists.
    pub fn built(&self, hash: &str) -> bool {
        self.state == states::BUILT && self.hash == hash && self.image.is_some()
    }
}

/// Whether the build step applies: the Function's own choice, else the install's default.
pub fn enabled(spec: Option<&BuildSpec>, default: bool) -> bool {
    spec.and_then(|b| b.enabled).unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_function_overrides_the_install_default() {
        let on = BuildSpec {
            enabled: Some(true),
        };
        let off = BuildSpec {
            enabled: Some(false),
        };
        assert!(enabled(Some(&on), false));
        assert!(!enabled(Some(&off), true));
        assert!(enabled(Some(&BuildSpec::default()), true));
        assert!(!enabled(None, false));
    }

    #[test]
    fn built_needs_the_same_hash_and_an_image() {
        let s = BuildStatus {
            state: states::BUILT.into(),
            hash: "a".into(),
            image: Some("r/x:a".into()),
            ..BuildStatus::default()
        };
        assert!(s.built("a"));
        assert!(!s.built("b"));
        let failed = BuildStatus {
            state: states::FAILED.into(),
            ..s.clone()
        };
        assert!(!failed.built("a"));
    }
}
