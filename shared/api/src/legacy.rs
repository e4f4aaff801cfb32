//! Runtime ids Kubeless 1.0 shipped that we do not run, and the runtime to use instead.
//!
//! We refuse these ids rather than silently running the code on another interpreter: Python 2
//! code and old Node.js code can break on a newer one, and a refusal that names the exact
//! replacement costs one edit. The CLI refuses before sending; the function-controller puts the
//! same sentence in the `UnknownRuntime` condition for manifests applied with kubectl.

/// `(Kubeless runtime id, the runtime to use here)`.
pub const LEGACY_RUNTIMES: &[(&str, &str)] = &[
    ("python2.7", "python3.11"),
    ("python3.4", "python3.11"),
    ("python3.6", "python3.11"),
    ("python3.7", "python3.11"),
    ("python3.8", "python3.11"),
    ("nodejs6", "nodejs20"),
    ("nodejs8", "nodejs20"),
    ("nodejs10", "nodejs20"),
    ("nodejs12", "nodejs20"),
    ("nodejs14", "nodejs20"),
    ("nodejs_distroless8", "nodejs20"),
];

/// The runtime to use instead of Kubeless's `runtime`, if it was one of Kubeless's.
pub fn replacement(runtime: &str) -> Option<&'static str> {
    LEGACY_RUNTIMES
        .iter()
        .find(|(old, _)| *old == runtime.trim())
        .map(|(_, new)| *new)
}

/// The sentence both the CLI and the controller print for a Kubeless runtime id.
pub fn refusal(runtime: &str) -> Option<String> {
    replacement(runtime).map(|new| {
        format!(
            "runtime {runtime} was Kubeless's and is not run here: set the runtime to {new}, the \
             nearest one we run (check the code and its dependencies against {new})"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kubeless_id_has_a_replacement() {
        assert_eq!(replacement("python2.7"), Some("python3.11"));
        assert_eq!(replacement("nodejs_distroless8"), Some("nodejs20"));
        assert_eq!(replacement("python3.11"), None);
        assert!(
            refusal("nodejs12")
                .unwrap()
                .contains("set the runtime to nodejs20")
        );
    }
}
