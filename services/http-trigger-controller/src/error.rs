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
    #[error("the HTTPTrigger {0} has no namespace")]
    NoNamespace(String),
    #[error("invalid host policy")]
    HostPolicy(#[source] crate::claims::BadClaim),
    #[error("binding the gateway to {addr} failed")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Client(_) => "client",
            Self::Api { kind, .. } => match *kind {
                "Ingress" => "ingress",
                "HTTPTrigger" => "status",
                "Function" => "function",
                "Service" => "service",
                _ => "api",
            },
            Self::NoNamespace(_) => "no_namespace",
            Self::Bind { .. } => "bind",
            Self::HostPolicy(_) => "host_policy",
        }
    }
}
