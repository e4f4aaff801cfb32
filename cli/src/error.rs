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
        /// What to do next when the API server refuses; a generic hint by status code otherwise.
        next: Option<String>,
    },
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}")]
    Write {
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
    #[error(
        "Function {name} failed: {reason}: {message}. Fix it and run `kubeless function update {name}`; \
         `kubeless function describe {name}` shows the status"
    )]
    FunctionFailed {
        name: String,
        reason: String,
        message: String,
    },
    #[error(
        "timed out after {secs}s waiting for function {name} to become ready; see why with \
         `kubeless function describe {name}` and `kubeless function logs {name}`"
    )]
    WaitTimeout { name: String, secs: u64 },
    #[error("Request timeout exceeded")]
    CallTimeout,
    #[error("the function answered HTTP {status}: {body}")]
    CallFailed { status: u16, body: String },
    #[error("{what}: {message}")]
    Broker { what: String, message: String },
    /// Nothing can answer a call: no ready endpoint behind the function's Service.
    #[error(
        "Function {name} cannot answer: it has no ready pod ({why}). See `kubeless function describe {name}` \
         and `kubeless function logs {name}`"
    )]
    NoEndpoint { name: String, why: String },
    /// A pod of the function cannot start (image pull, crash loop, failing init step).
    #[error(
        "Function {name} cannot start: pod {pod} is in {reason} ({message}). Fix the image, the code \
         or the dependencies and run `kubeless function update {name}`; `kubeless function logs {name}` \
         shows the pod's output"
    )]
    PodFailing {
        name: String,
        pod: String,
        reason: String,
        message: String,
    },
    #[error("{0} support is not compiled in (build with --features {0})")]
    FeatureMissing(&'static str),
}

impl Error {
    pub(crate) fn kube(what: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            what: what.into(),
            source,
            next: None,
        }
    }

    /// Like [`Error::kube`], with the next step to print when the API server answers `code`.
    pub(crate) fn kube_on(
        what: impl Into<String>,
        source: kube::Error,
        code: u16,
        next: impl Into<String>,
    ) -> Self {
        let matches = matches!(&source, kube::Error::Api(s) if s.code == code);
        Self::Kube {
            what: what.into(),
            source,
            next: matches.then(|| next.into()),
        }
    }

    /// One sentence for a person: what failed, why, and what to do next. `-v` adds [`detail`].
    ///
    /// [`detail`]: Error::detail
    pub fn human(&self) -> String {
        match self {
            Self::Kube { what, source, next } => {
                let (cause, hint) = kube_cause(source);
                let next = next.clone().unwrap_or(hint);
                format!("{what}: {cause}. {}", capitalise(&next))
            }
            Self::Client(source) => {
                let (cause, hint) = kube_cause(source);
                format!(
                    "Cannot connect to the cluster: {cause}. {}",
                    capitalise(&hint)
                )
            }
            Self::Kubeconfig(source) => format!(
                "Cannot read the kubeconfig: {source}. Give one with --kubeconfig PATH or \
                 KUBECONFIG=PATH (`devcluster up` prints the path of its kubeconfig)"
            ),
            Self::Read { path, source } => format!(
                "Cannot read {}: {source}. Check the path (relative paths start from the current \
                 directory)",
                path.display()
            ),
            Self::Write { path, source } => format!(
                "Cannot write {}: {source}. Check that the folder exists and is writable",
                path.display()
            ),
            Self::Download { url, source } => format!(
                "Cannot download {url}: {}. Check the URL, or download it and give the local file",
                crate::error_chain(source)
            ),
            other => crate::error_chain(other),
        }
    }

    /// Everything we know, for `-v`: the error chain with the API server's full answer.
    pub fn detail(&self) -> String {
        match self {
            Self::Kube { source, .. } | Self::Client(source) => format!("{source:?}"),
            other => format!("{other:?}"),
        }
    }

    /// True when the API server answered 404 for the object.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(s), .. } if s.code == 404)
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
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// Why the API call failed, and the generic next step, in words.
fn kube_cause(e: &kube::Error) -> (String, String) {
    match e {
        kube::Error::Api(s) => {
            let message = if s.message.is_empty() {
                s.reason.clone()
            } else {
                s.message.clone()
            };
            let hint = match s.code {
                404 => {
                    "check the name and the namespace (-n); `kubeless function ls` lists functions"
                }
                409 => {
                    "change the existing object with the matching `update` command, or delete it first"
                }
                401 => "check the credentials of your kubeconfig context",
                403 => "ask for access (RBAC) to this object, or use another --context",
                400 | 422 => "fix the value the API server names and try again",
                500..=599 => "the cluster is unhealthy: try again, or look at the API server's log",
                _ => "run again with -v for the API server's full answer",
            };
            (
                format!("the API server answered {} ({message})", s.code),
                hint.to_string(),
            )
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => (
            format!(
                "the Kubernetes API server cannot be reached ({})",
                crate::error_chain(e)
            ),
            "check that the cluster runs (e.g. `devcluster up`) and that --kubeconfig or \
             KUBECONFIG points at its kubeconfig"
                .to_string(),
        ),
        other => (
            crate::error_chain(other),
            "run again with -v for the details".to_string(),
        ),
    }
}
pub type Result<T, E = Error> = std::result::Result<T, E>;
