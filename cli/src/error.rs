//! The one error type of the `kubeless` command.

use std::path::PathBuf;

/// Everything that can make a command fail. `main` prints it (with its sources) and exits 1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("reading the kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error("building the Kubernetes client")]
    Client(#[source] kube::Error),
    #[error("{what}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing to stdout")]
    Stdout(#[source] std::io::Error),
    #[error("downloading {url}")]
    Download {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("downloading {url}: HTTP {status}")]
    DownloadStatus { url: String, status: u16 },
    #[error("encoding the output as {format}: {message}")]
    Encode {
        format: &'static str,
        message: String,
    },
    #[error("invalid {what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Api(#[from] kubeless_api::Error),
    /// The object breaks its CRD's schema or CEL rules: refused before it is sent, with the
    /// message the API server would give.
    #[error(transparent)]
    Invalid(#[from] kubeless_api::validate::Invalid),
    /// The function reported a failure while we waited for it; the message is already printed.
    #[error("function {name} failed: {reason}: {message}")]
    FunctionFailed {
        name: String,
        reason: String,
        message: String,
    },
    #[error("timed out after {secs}s waiting for function {name} to become ready")]
    WaitTimeout { name: String, secs: u64 },
    #[error("Request timeout exceeded")]
    CallTimeout,
    #[error("the function answered HTTP {status}: {body}")]
    CallFailed { status: u16, body: String },
    #[error("{what}: {message}")]
    Broker { what: String, message: String },
    #[error("{0} support is not compiled in (build with --features {0})")]
    FeatureMissing(&'static str),
}

impl Error {
    pub(crate) fn kube(what: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn usage(msg: impl Into<String>) -> Self {
        Self::Usage(msg.into())
    }

    // Unused when every broker feature is off.
    #[allow(dead_code)]
    pub(crate) fn broker(what: impl Into<String>, message: impl ToString) -> Self {
        Self::Broker {
            what: what.into(),
            message: message.to_string(),
        }
    }

    /// True when the API server answered 404 for the object.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(s), .. } if s.code == 404)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
