//! The one error type of the crate. Every variant names the image (or file) and what failed, so
//! `Display` alone makes a status message a user can act on.

use std::path::PathBuf;

use oci_client::errors::{OciDistributionError, OciErrorCode};

/// What went wrong talking to a registry, building a layer or unpacking one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not an image reference (`host[:port]/repository[:tag][@digest]`).
    #[error("invalid image reference {image:?}")]
    InvalidReference {
        image: String,
        #[source]
        source: oci_client::ParseError,
    },
    /// The registry options cannot be used (bad CA certificate, TLS setup).
    #[error("invalid registry options: {reason}")]
    Options { reason: String },
    /// The `.dockerconfigjson` content is not valid.
    #[error("invalid docker config (.dockerconfigjson): {reason}")]
    DockerConfig { reason: String },
    /// 401: wrong or missing credentials.
    #[error("{}", unauthorized_message(registry, action, image, *with_credentials))]
    Unauthorized {
        registry: String,
        action: &'static str,
        image: String,
        with_credentials: bool,
    },
    /// 403: the credentials are valid but may not do this.
    #[error("registry {registry} denied {action} {image}")]
    Denied {
        registry: String,
        action: &'static str,
        image: String,
    },
    /// 404, MANIFEST_UNKNOWN, NAME_UNKNOWN or BLOB_UNKNOWN.
    #[error("{what} {image} not found")]
    NotFound { what: &'static str, image: String },
    /// Connection refused, TLS failure, timeout.
    #[error(
        "cannot reach registry {registry} ({action} {image}): {}",
        chain(source)
    )]
    Unreachable {
        registry: String,
        action: &'static str,
        image: String,
        #[source]
        source: OciDistributionError,
    },
    /// The TLS handshake failed: an untrusted certificate (see `RegistryOptions::ca_pem`), or a
    /// plain-HTTP registry spoken to over HTTPS (see `RegistryOptions::insecure`).
    #[error(
        "TLS with registry {registry} failed ({action} {image}): {}",
        chain(source)
    )]
    Tls {
        registry: String,
        action: &'static str,
        image: String,
        #[source]
        source: OciDistributionError,
    },
    /// Any other answer of the registry.
    #[error("registry {registry} failed {action} {image}: {}", chain(source))]
    Registry {
        registry: String,
        action: &'static str,
        image: String,
        #[source]
        source: OciDistributionError,
    },
    /// The manifest, index or config of an image is not what it has to be.
    #[error("image {image}: {reason}")]
    Image { image: String, reason: String },
    /// Reading the directory of the layer, or writing the unpacked files.
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A layer entry that would write outside the destination or is not a plain file, directory
    /// or link.
    #[error("refusing to unpack {image}: {entry:?} {reason}")]
    Unsafe {
        image: String,
        entry: String,
        reason: String,
    },
}

fn unauthorized_message(
    registry: &str,
    action: &str,
    image: &str,
    with_credentials: bool,
) -> String {
    if with_credentials {
        format!("registry {registry} refused credentials ({action} {image})")
    } else {
        format!(
            "registry {registry} requires credentials and the docker config has none for it ({action} {image})"
        )
    }
}

/// An error and its sources on one line ("a: b: c"), skipping a source whose text the previous
/// one already contains.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

impl Error {
    /// A short stable category, for metric labels and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::InvalidReference { .. } => "InvalidReference",
            Error::Options { .. } | Error::DockerConfig { .. } => "InvalidOptions",
            Error::Unauthorized { .. } => "Unauthorized",
            Error::Denied { .. } => "Denied",
            Error::NotFound { .. } => "NotFound",
            Error::Unreachable { .. } => "Unreachable",
            Error::Tls { .. } => "Tls",
            Error::Registry { .. } => "RegistryError",
            Error::Image { .. } => "InvalidImage",
            Error::Io { .. } => "Io",
            Error::Unsafe { .. } => "UnsafeLayer",
        }
    }

    /// True for the registry's "no such manifest / repository / blob".
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}

/// What a registry call was doing, for the message.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub registry: &'a str,
    pub action: &'static str,
    pub image: &'a str,
    /// The noun of a 404: "image", "base image", "blob of".
    pub what: &'static str,
    pub with_credentials: bool,
}

impl Context<'_> {
    /// Sorts an oci-client error into the variant a user can act on.
    pub(crate) fn error(&self, source: OciDistributionError) -> Error {
        let status = match &source {
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => Some(401),
            OciDistributionError::ImageManifestNotFoundError(_) => Some(404),
            OciDistributionError::ServerError { code, .. } => Some(*code),
            OciDistributionError::RegistryError { envelope, .. } => {
                envelope.errors.iter().find_map(|e| match e.code {
                    OciErrorCode::Unauthorized => Some(401),
                    OciErrorCode::Denied => Some(403),
                    OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
                    | OciErrorCode::BlobUnknown => Some(404),
                    _ => None,
                })
            }
            _ => None,
        };
        let (registry, action, image) = (
            self.registry.to_string(),
            self.action,
            self.image.to_string(),
        );
        match status {
            Some(401) => Error::Unauthorized {
                registry,
                action,
                image,
                with_credentials: self.with_credentials,
            },
            Some(403) => Error::Denied {
                registry,
                action,
                image,
            },
            Some(404) => Error::NotFound {
                what: self.what,
                image,
            },
            _ => {
                let unreachable = matches!(&source,
                    OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout());
                let text = chain(&source).to_ascii_lowercase();
                let tls = ["certificate", "tls", "handshake", "corrupt message"]
                    .iter()
                    .any(|w| text.contains(w));
                if unreachable && tls {
                    Error::Tls {
                        registry,
                        action,
                        image,
                        source,
                    }
                } else if unreachable {
                    Error::Unreachable {
                        registry,
                        action,
                        image,
                        source,
                    }
                } else {
                    Error::Registry {
                        registry,
                        action,
                        image,
                        source,
                    }
                }
            }
        }
    }
}
