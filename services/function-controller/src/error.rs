//! The controller's one error type.

/// Why a reconcile (or the controller) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags contradict each other.
    #[error("invalid settings")]
    Settings(#[source] kubeless_api::Error),
    /// Server-side apply of a child object failed.
    #[error("applying {kind} {namespace}/{name} failed")]
    Apply {
        /// Kind of the child.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deleting a child object failed.
    #[error("deleting {kind} {namespace}/{name} failed")]
    Delete {
        /// Kind of the child.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the Function's status failed.
    #[error("writing the status of Function {namespace}/{name} failed")]
    Status {
        /// Namespace of the Function.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading an object the reconcile needs (the registry Secret) failed.
    #[error("reading {kind} {namespace}/{name} failed")]
    Read {
        /// Kind of the object.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A Function without a namespace (the CRD is namespaced, so only a broken server sends one).
    #[error("Function {0} has no namespace")]
    NoNamespace(String),
    /// Removing the finalizer failed, or the wrapped reconcile failed.
    #[error("finalizer handling failed")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// Creating the Kubernetes client failed.
    #[error("creating the Kubernetes client failed")]
    Client(#[source] kube::Error),
    /// The warm pool failed to release a Function's pool pod.
    #[error(transparent)]
    Warm(crate::warm::WarmError),
    /// Reading the kubeless-config ConfigMap at start failed.
    #[error("reading ConfigMap {namespace}/{name} failed")]
    Config {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// When the API server refused a write (it answered with a status, e.g. 422 Invalid,
    /// 403 Forbidden, 409 Conflict, 500): what to show on the Function, with its message.
    pub fn refusal_message(&self) -> Option<String> {
        let (action, kind, name, source) = match self {
            Self::Apply {
                kind, name, source, ..
            } => ("applying", *kind, name, source),
            Self::Delete {
                kind, name, source, ..
            } => ("deleting", *kind, name, source),
            _ => return None,
        };
        match source {
            kube::Error::Api(status) => Some(format!(
                "{action} {kind} {name}: the API server refused it ({} {}): {}",
                status.code, status.reason, status.message
            )),
            _ => None,
        }
    }

    /// Short, stable label for metrics and Event reasons.
    pub fn metric_label(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            Self::Apply { .. } => "ApplyFailed",
            Self::Delete { .. } => "DeleteFailed",
            Self::Status { .. } => "StatusFailed",
            Self::Read { .. } => "ReadFailed",
            Self::NoNamespace(_) => "NoNamespace",
            Self::Config { .. } => "ConfigFailed",
            Self::Client(_) => "ClientFailed",
            Self::Warm(_) => "WarmPoolFailed",
            Self::Settings(_) => "InvalidSettings",
            Self::Finalizer(inner) => match inner.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.metric_label(),
                F::AddFinalizer(_) | F::RemoveFinalizer(_) => "FinalizerFailed",
                F::UnnamedObject | F::InvalidFinalizer => "FinalizerFailed",
            },
        }
    }
}
