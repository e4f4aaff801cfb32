//! The service's error type.

/// Everything that can stop a reconcile or the service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating the Kubernetes client failed")]
    Client(#[source] kube::Error),
    #[error("{action} {kind} {namespace}/{name} failed")]
    Api {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the CronJobTrigger {0} has no namespace")]
    NoNamespace(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A flag value the service cannot use.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl Error {
    /// Short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Client(_) => "client",
            Self::Api { kind, .. } => match *kind {
                "CronJob" => "cronjob",
                "CronJobTrigger" => "status",
                "Function" => "function",
                "Job" => "job",
                _ => "api",
            },
            Self::NoNamespace(_) => "no_namespace",
            Self::Config(_) => "config",
        }
    }
}

/// Maps a kube error to [`Error::Api`] naming the object.
pub(crate) fn api_err<'a>(
    action: &'static str,
    kind: &'static str,
    ns: &'a str,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Api {
        action,
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
        source,
    }
}
