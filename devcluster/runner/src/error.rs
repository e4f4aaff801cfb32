//! The runner's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the runner.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading image map {path}: {source}")]
    ImageMapRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing image map {path}: {source}")]
    ImageMapParse {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("image map {path}: entry {index} has an empty image pattern")]
    ImageMapEntry { path: PathBuf, index: usize },
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("file system operation on {path} failed: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting process {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid cron schedule {schedule:?}: {message}")]
    Cron { schedule: String, message: String },
    #[error("configuration for container {container}: {message}")]
    ContainerConfig { container: String, message: String },
    #[error("pod IP range exhausted")]
    IpExhausted,
    #[error("serializing status: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the kubelet API's TLS settings: {0}")]
    KubeletTls(String),
    #[error("binding the kubelet API to {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Short, stable category for logs and status reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::ImageMapRead { .. }
            | Error::ImageMapParse { .. }
            | Error::ImageMapEntry { .. } => "ImageMap",
            Error::Kube(_) => "KubeApi",
            Error::Io { .. } => "Io",
            Error::Spawn { .. } => "Spawn",
            Error::Cron { .. } => "Cron",
            Error::ContainerConfig { .. } => "CreateContainerConfigError",
            Error::IpExhausted => "IpExhausted",
            Error::Json(_) => "Json",
            Error::KubeletTls(_) | Error::Bind { .. } => "KubeletApi",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
