//! The warm pool contract between the function-controller and the runtimes.
//!
//! A pool pod runs a catalogue runtime image with no function (`kubeless-runtime` in pool
//! mode: [`TOKEN_ENV`] set, no `FUNC_HANDLER`). When a Function at zero is woken, the controller
//! claims an idle pool pod, sends it the function's code and environment with one
//! authenticated `POST` to [`SPECIALIZE_PATH`], and adds the pod's address to the Function's
//! Service through an extra EndpointSlice ([`SLICE_SUFFIX`]). Once the Function's own pod is
//! ready, the slice and the pool pod are deleted; the pool starts a fresh pod meanwhile.

use serde::{Deserialize, Serialize};

/// Path of the specialize call on a pool pod.
pub const SPECIALIZE_PATH: &str = "/kubeless/specialize";
/// Env var of a pool pod holding the bearer token the specialize call must carry.
pub const TOKEN_ENV: &str = "KUBELESS_POOL_TOKEN";
/// Key of the token in the pool Secret.
pub const TOKEN_KEY: &str = "token";
/// Default name of the Secret with the token, in the pool's namespace.
pub const DEFAULT_TOKEN_SECRET: &str = "kubeless-warm-pool";
/// Label on pool pods: the runtime they run, as a label value (see [`runtime_label`]).
pub const POOL_LABEL: &str = "kubeless.io/warm-pool";
/// Label on pool pods: [`STATE_IDLE`] or [`STATE_CLAIMED`].
pub const STATE_LABEL: &str = "kubeless.io/warm-state";
/// A pool pod waiting for a function.
pub const STATE_IDLE: &str = "idle";
/// A pool pod that was given to a function.
pub const STATE_CLAIMED: &str = "claimed";
/// Annotation on a claimed pool pod: the Function it serves, `namespace/name`.
pub const FUNCTION_ANNOTATION: &str = "kubeless.io/warm-function";
/// Annotation on the warm EndpointSlice: the pool pod it points at, `namespace/name`.
pub const POD_ANNOTATION: &str = "kubeless.io/warm-pod";
/// The warm EndpointSlice of Function `f` is named `<f>` + this.
pub const SLICE_SUFFIX: &str = "-warm";
/// `endpointslice.kubernetes.io/managed-by` of the warm EndpointSlices (not the EndpointSlice
/// controller's value, so that controller leaves them alone).
pub const SLICE_MANAGER: &str = "function-controller.kubeless.io";

/// Body of the specialize call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecializeRequest {
    /// The function container's environment (`FUNC_HANDLER`, `MOD_NAME`, `FUNC_TIMEOUT`, the
    /// user's variables...), literal values only.
    pub env: Vec<EnvPair>,
    /// The function's code, as its ConfigMap holds it.
    pub source: Source,
}

/// One environment variable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvPair {
    pub name: String,
    pub value: String,
}

/// The function's code and how to unpack it (what the `prepare` init step gets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// File name in the install volume (`handler.py`).
    pub file: String,
    /// The ConfigMap value: text, base64 or a URL.
    pub content: String,
    /// `text`, `base64` or `url`, with `+zip` / `+compressedtar`.
    pub content_type: String,
    /// `sha256:<hex>` or empty.
    pub checksum: String,
}

/// Answer of a successful specialize call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecializeResponse {
    /// Milliseconds from the request to the workers being ready.
    pub ready_ms: f64,
}

/// A runtime id as a label value and pod name part: `python3.11` → `python3-11`.
pub fn runtime_label(runtime: &str) -> String {
    let mut out: String = runtime
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(40);
    out.trim_matches('-').to_string()
}

/// Compares two tokens in time independent of where they differ.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() || a.is_empty() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_labels() {
        assert_eq!(runtime_label("python3.11"), "python3-11");
        assert_eq!(runtime_label("nodejs20"), "nodejs20");
        assert_eq!(runtime_label("Go1.19"), "go1-19");
    }

    #[test]
    fn tokens() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abc", "abd"));
        assert!(!token_matches("abc", "ab"));
        assert!(!token_matches("", ""));
    }

    #[test]
    fn request_round_trips_in_camel_case() {
        let r = SpecializeRequest {
            env: vec![EnvPair {
                name: "FUNC_HANDLER".into(),
                value: "foo".into(),
            }],
            source: Source {
                file: "h.py".into(),
                content: "def foo(e, c): return 1".into(),
                content_type: "text".into(),
                checksum: String::new(),
            },
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["source"]["contentType"], "text");
        assert_eq!(
            serde_json::from_value::<SpecializeRequest>(json).unwrap(),
            r
        );
    }
}
