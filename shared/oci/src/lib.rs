//! OCI images of the build step (issue 23).
//!
//! The function-controller runs a build Job per Function: init containers prepare the code and
//! install its dependencies into `/kubeless`, then `kubeless-builder` (the `builder/` crate)
//! calls [`Registry::push_layer`]: the function image is the runtime image plus one layer
//! holding `/kubeless`, pushed to the registry without a Docker daemon. The runtime image's
//! layers are mounted from its repository (cross-repository blob mount, same registry), not
//! copied, so a push sends only the new layer and the new config. devcluster runs such images
//! without a container runtime: [`Registry::unpack_added`] pulls only the layers above the base
//! and unpacks them, checked entry by entry.
//!
//! The pushed image:
//! - layer: a deterministic tar (sorted entries, mtime 0), gzip'ed; every entry is owned by the
//!   base config's numeric `User` (e.g. `65532:65532`), else root; modes as on disk, so compiled
//!   output stays executable;
//! - config: the base config with the layer's diff_id appended to `rootfs.diff_ids`, a history
//!   entry and the requested labels;
//! - manifest: the base's media-type family (OCI or Docker schema 2) and the annotations
//!   `org.opencontainers.image.base.name` / `org.opencontainers.image.base.digest`, by which
//!   [`Registry::unpack_added`] finds the base again. A base that is an image index (or Docker
//!   manifest list) is resolved to its linux/amd64 image.
//!
//! Credentials come from the content of a `kubernetes.io/dockerconfigjson` Secret
//! ([`docker_config_auth`]); `insecure` means plain HTTP.

mod auth;
mod error;
mod layer;
mod unpack;

use std::collections::BTreeMap;
use std::path::Path;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{
    IMAGE_CONFIG_MEDIA_TYPE, IMAGE_DOCKER_CONFIG_MEDIA_TYPE, IMAGE_DOCKER_LAYER_GZIP_MEDIA_TYPE,
    IMAGE_LAYER_GZIP_MEDIA_TYPE, IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::Deserialize;
use serde_json::Value;

pub use auth::docker_config_auth;
use error::Context;
pub use error::Error;
use layer::sha256_digest;

/// Manifest annotation naming the base image (written by [`Registry::push_layer`]).
pub const ANNOTATION_BASE_NAME: &str = "org.opencontainers.image.base.name";
/// Manifest annotation holding the base image's manifest digest.
pub const ANNOTATION_BASE_DIGEST: &str = "org.opencontainers.image.base.digest";

const MANIFEST_TYPES: &[&str] = &[
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// How to reach the registries.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// Plain HTTP instead of HTTPS (a registry on loopback or inside the cluster).
    pub insecure: bool,
    /// PEM certificates trusted besides the system roots (a registry with its own CA).
    pub ca_pem: Option<Vec<u8>>,
    /// The content of a `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`:
    /// credentials per registry. Registries not in it are accessed anonymously.
    pub docker_config: Option<Vec<u8>>,
}

/// A client for the registries an image reference names. Cheap to clone (one connection pool).
#[derive(Clone)]
pub struct Registry {
    client: Client,
    docker_config: Option<Vec<u8>>,
}

/// What [`Registry::push_layer`] pushes.
#[derive(Clone, Debug)]
pub struct PushLayer<'a> {
    /// The runtime image the function image builds on (`host[:port]/repo:tag`).
    pub base: &'a str,
    /// The function image to push.
    pub target: &'a str,
    /// The directory whose files make the new layer.
    pub dir: &'a Path,
    /// Where those files are in the image, e.g. `/kubeless`.
    pub root: &'a str,
    /// Labels added to the image config (over the base's).
    pub labels: BTreeMap<String, String>,
}

/// An image pushed from a directory alone, without a base (test fixtures, runtime images made
/// from a file tree).
#[derive(Clone, Debug)]
pub struct PushScratch<'a> {
    /// The image to push.
    pub target: &'a str,
    /// The directory whose files make the only layer.
    pub dir: &'a Path,
    /// Where those files are in the image.
    pub root: &'a str,
    /// The config's `User` (also the owner of the files when numeric).
    pub user: Option<&'a str>,
    /// The config's `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// OCI or Docker schema 2 media types.
    pub format: ManifestFormat,
    /// The config's labels.
    pub labels: BTreeMap<String, String>,
}

/// The media-type family of a manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ManifestFormat {
    /// `application/vnd.oci.image.manifest.v1+json` (what buildah pushes by default).
    #[default]
    Oci,
    /// `application/vnd.docker.distribution.manifest.v2+json`.
    Docker,
}

impl ManifestFormat {
    fn manifest_media_type(self) -> &'static str {
        match self {
            ManifestFormat::Oci => OCI_IMAGE_MEDIA_TYPE,
            ManifestFormat::Docker => IMAGE_MANIFEST_MEDIA_TYPE,
        }
    }
    fn config_media_type(self) -> &'static str {
        match self {
            ManifestFormat::Oci => IMAGE_CONFIG_MEDIA_TYPE,
            ManifestFormat::Docker => IMAGE_DOCKER_CONFIG_MEDIA_TYPE,
        }
    }
    fn layer_media_type(self) -> &'static str {
        match self {
            ManifestFormat::Oci => IMAGE_LAYER_GZIP_MEDIA_TYPE,
            ManifestFormat::Docker => IMAGE_DOCKER_LAYER_GZIP_MEDIA_TYPE,
        }
    }
}

/// The result of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest digest of the pushed image (`sha256:...`).
    pub digest: String,
    /// The digest of the new (gzip'ed) layer.
    pub layer_digest: String,
    /// Its compressed size.
    pub layer_bytes: u64,
    /// Base blobs mounted from the base repository (nothing sent).
    pub mounted: usize,
    /// Blobs sent: the new layer, the config, and base layers copied because the registry
    /// refused the mount or the base is in another registry.
    pub uploaded: usize,
    /// Blobs the target repository already had (nothing sent).
    pub existing: usize,
    /// The base image manifest digest (for an index: the linux/amd64 image's); empty for a
    /// scratch image.
    pub base_digest: String,
    /// The media type of the pushed manifest.
    pub media_type: String,
}

/// The result of [`Registry::unpack_added`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unpacked {
    /// The base image, as the `org.opencontainers.image.base.name` annotation names it.
    pub base: String,
    /// The manifest digest of the unpacked image.
    pub digest: String,
    /// How many layers (those above the base) were unpacked.
    pub layers: usize,
    /// The base manifest digest (`org.opencontainers.image.base.digest`).
    pub base_digest: String,
}

/// What [`Registry::inspect`] reads of an image.
#[derive(Clone, Debug)]
pub struct Inspected {
    /// The manifest digest (for an index: the linux/amd64 image's).
    pub digest: String,
    /// The manifest media type.
    pub media_type: String,
    /// The manifest annotations.
    pub annotations: BTreeMap<String, String>,
    /// The layers, bottom first.
    pub layers: Vec<LayerInfo>,
    /// The image config (`config.Entrypoint`, `config.User`, `rootfs.diff_ids`, ...).
    pub config: Value,
}

/// One layer of an [`Inspected`] image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerInfo {
    pub digest: String,
    pub media_type: String,
    pub size: u64,
}

/// One image of an index pushed by [`Registry::push_index`].
#[derive(Clone, Debug)]
pub struct IndexImage<'a> {
    /// An image in the same repository as the index.
    pub image: &'a str,
    pub os: &'a str,
    pub architecture: &'a str,
}

/// An image manifest read from a registry, an index already resolved to linux/amd64.
struct Resolved {
    /// `registry/repo@digest` of the image manifest.
    reference: Reference,
    digest: String,
    manifest: OciImageManifest,
    format: ManifestFormat,
}

#[derive(Deserialize)]
struct IndexManifest {
    #[serde(default)]
    manifests: Vec<IndexEntry>,
}

#[derive(Deserialize)]
struct IndexEntry {
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

fn parse_reference(image: &str) -> Result<Reference, Error> {
    image
        .parse::<Reference>()
        .map_err(|source| Error::InvalidReference {
            image: image.to_string(),
            source,
        })
}

impl Registry {
    /// A client with these options; fails on a bad CA certificate or docker config.
    pub fn new(opts: RegistryOptions) -> Result<Self, Error> {
        // reqwest is built without a default crypto provider (ring, as in the rest of the
        // workspace); installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let RegistryOptions {
            insecure,
            ca_pem,
            docker_config,
        } = opts;
        if let Some(json) = &docker_config {
            // Validate once, so a broken Secret fails before any network call.
            docker_config_auth(json, "")?;
        }
        let mut config = ClientConfig {
            protocol: if insecure {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            // Only linux/amd64 images are built and run.
            platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(120)),
            ..ClientConfig::default()
        };
        if let Some(pem) = ca_pem {
            // reqwest takes PEM without a certificate in it silently; say so instead.
            use rustls::pki_types::{CertificateDer, pem::PemObject};
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error::Options {
                    reason: format!("the CA certificates are not valid PEM: {e}"),
                })?;
            if certs.is_empty() {
                return Err(Error::Options {
                    reason: "the CA file holds no PEM certificate".into(),
                });
            }
            config.extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem,
            });
        }
        let client = Client::try_from(config).map_err(|e| Error::Options {
            reason: error::chain(&e),
        })?;
        Ok(Registry {
            client,
            docker_config,
        })
    }

    /// The credentials for the registry of `reference`, stored in the client for its calls.
    async fn login(&self, reference: &Reference) -> Result<RegistryAuth, Error> {
        let registry = reference.resolve_registry();
        let creds = match &self.docker_config {
            Some(json) => docker_config_auth(json, registry)?,
            None => None,
        };
        let auth = match creds {
            Some((user, password)) => RegistryAuth::Basic(user, password),
            None => RegistryAuth::Anonymous,
        };
        self.client.store_auth_if_needed(registry, &auth).await;
        Ok(auth)
    }

    fn context<'a>(
        reference: &'a Reference,
        image: &'a str,
        action: &'static str,
        what: &'static str,
        auth: &RegistryAuth,
    ) -> Context<'a> {
        Context {
            registry: reference.resolve_registry(),
            action,
            image,
            what,
            with_credentials: *auth != RegistryAuth::Anonymous,
        }
    }

    /// The manifest digest when `image` exists in its registry, None when the registry answers
    /// it does not (404 / MANIFEST_UNKNOWN / NAME_UNKNOWN). Network/auth errors are Err.
    pub async fn exists(&self, image: &str) -> Result<Option<String>, Error> {
        let reference = parse_reference(image)?;
        let auth = self.login(&reference).await?;
        let ctx = Self::context(&reference, image, "looking up", "image", &auth);
        match self.client.fetch_manifest_digest(&reference, &auth).await {
            Ok(digest) => Ok(Some(digest)),
            Err(e) => match ctx.error(e) {
                Error::NotFound { .. } => Ok(None),
                e => Err(e),
            },
        }
    }

    /// Reads the manifest of `reference`; an index is resolved to its linux/amd64 image.
    async fn resolve(
        &self,
        reference: &Reference,
        image: &str,
        what: &'static str,
    ) -> Result<Resolved, Error> {
        let auth = self.login(reference).await?;
        let ctx = Self::context(reference, image, "reading", what, &auth);
        let bad = |reason: String| Error::Image {
            image: image.to_string(),
            reason,
        };
        let mut reference = reference.clone();
        // At most one index level: index → image.
        for _ in 0..2 {
            let (body, digest) = self
                .client
                .pull_manifest_raw(&reference, &auth, MANIFEST_TYPES)
                .await
                .map_err(|e| ctx.error(e))?;
            let value: Value = serde_json::from_slice(&body)
                .map_err(|e| bad(format!("manifest is not JSON: {e}")))?;
            let media_type = value
                .get("mediaType")
                .and_then(Value::as_str)
                .map(str::to_string);
            let is_index = match media_type.as_deref() {
                Some(OCI_IMAGE_INDEX_MEDIA_TYPE | IMAGE_MANIFEST_LIST_MEDIA_TYPE) => true,
                Some(_) => false,
                None => value.get("manifests").is_some(),
            };
            let by_digest = |digest: String| {
                Reference::with_digest(
                    reference.registry().to_string(),
                    reference.repository().to_string(),
                    digest,
                )
            };
            if is_index {
                let index: IndexManifest = serde_json::from_value(value)
                    .map_err(|e| bad(format!("invalid image index: {e}")))?;
                let entry = index
                    .manifests
                    .into_iter()
                    .find(|m| {
                        m.platform
                            .as_ref()
                            .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                    })
                    .ok_or_else(|| bad("the image index has no linux/amd64 image".into()))?;
                reference = by_digest(entry.digest);
                continue;
            }
            let manifest: OciImageManifest = serde_json::from_value(value)
                .map_err(|e| bad(format!("invalid image manifest: {e}")))?;
            let format = match media_type.as_deref() {
                Some(IMAGE_MANIFEST_MEDIA_TYPE) => ManifestFormat::Docker,
                Some(OCI_IMAGE_MEDIA_TYPE) => ManifestFormat::Oci,
                None if manifest.config.media_type == IMAGE_DOCKER_CONFIG_MEDIA_TYPE => {
                    ManifestFormat::Docker
                }
                None => ManifestFormat::Oci,
                Some(other) => return Err(bad(format!("unsupported manifest type {other}"))),
            };
            return Ok(Resolved {
                reference: by_digest(digest.clone()),
                digest,
                manifest,
                format,
            });
        }
        Err(bad("an image index points to another index".into()))
    }

    async fn pull_blob(
        &self,
        reference: &Reference,
        desc: &OciDescriptor,
        ctx: Context<'_>,
    ) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(usize::try_from(desc.size).unwrap_or(0).min(1 << 28));
        self.client
            .pull_blob(reference, desc, &mut out)
            .await
            .map_err(|e| ctx.error(e))?;
        Ok(out)
    }

    /// Pushes `target` = the image `base` plus one layer: the files of `dir` placed under `root`
    /// (e.g. "/kubeless") in the image. Base blobs are mounted from the base repository (same
    /// registry) — copied only when the registry refuses the mount (or base is in another
    /// registry); [`Pushed`] reports which happened.
    pub async fn push_layer(&self, req: &PushLayer<'_>) -> Result<Pushed, Error> {
        let base_ref = parse_reference(req.base)?;
        let target_ref = parse_reference(req.target)?;
        let base = self.resolve(&base_ref, req.base, "base image").await?;
        let base_auth = self.login(&base_ref).await?;
        let config_ctx = Self::context(
            &base_ref,
            req.base,
            "reading the config of",
            "config of base image",
            &base_auth,
        );
        let config_bytes = self
            .pull_blob(&base.reference, &base.manifest.config, config_ctx)
            .await?;
        let mut config: Value =
            serde_json::from_slice(&config_bytes).map_err(|e| Error::Image {
                image: req.base.to_string(),
                reason: format!("the image config is not JSON: {e}"),
            })?;
        let user = config
            .pointer("/config/User")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let layer = build_layer_blocking(req.dir, req.root, layer::owner_of_user(&user)).await?;
        add_layer_to_config(&mut config, &layer.diff_id, req.root, &req.labels).map_err(
            |reason| Error::Image {
                image: req.base.to_string(),
                reason,
            },
        )?;

        let mut pushed = Pushed {
            digest: String::new(),
            layer_digest: layer.digest.clone(),
            layer_bytes: layer.gzip.len() as u64,
            mounted: 0,
            uploaded: 0,
            existing: 0,
            base_digest: base.digest.clone(),
            media_type: base.format.manifest_media_type().to_string(),
        };
        for desc in &base.manifest.layers {
            self.transfer_base_blob(&base, req.base, desc, &target_ref, req.target, &mut pushed)
                .await?;
        }

        let mut manifest = base.manifest.clone();
        manifest.media_type = Some(base.format.manifest_media_type().to_string());
        manifest.layers.push(OciDescriptor {
            media_type: base.format.layer_media_type().to_string(),
            digest: layer.digest.clone(),
            size: layer.gzip.len() as i64,
            urls: None,
            annotations: None,
            artifact_type: None,
        });
        let mut annotations = manifest.annotations.take().unwrap_or_default();
        annotations.insert(ANNOTATION_BASE_NAME.to_string(), base_ref.whole());
        annotations.insert(ANNOTATION_BASE_DIGEST.to_string(), base.digest.clone());
        manifest.annotations = Some(annotations);
        let config_bytes = serde_json::to_vec(&config).map_err(|e| Error::Image {
            image: req.target.to_string(),
            reason: format!("cannot write the image config: {e}"),
        })?;
        manifest.config = OciDescriptor {
            media_type: base.manifest.config.media_type.clone(),
            digest: sha256_digest(&config_bytes),
            size: config_bytes.len() as i64,
            urls: None,
            annotations: None,
            artifact_type: None,
        };
        pushed.digest = self
            .push_blobs_and_manifest(
                &target_ref,
                req.target,
                [
                    (layer.gzip, layer.digest),
                    (config_bytes, manifest.config.digest.clone()),
                ],
                &manifest,
                &mut pushed,
            )
            .await?;
        Ok(pushed)
    }

    /// Pushes an image made of one layer (the files of `dir` under `root`) and a minimal
    /// linux/amd64 config: no base.
    pub async fn push_scratch(&self, req: &PushScratch<'_>) -> Result<Pushed, Error> {
        let target_ref = parse_reference(req.target)?;
        let user = req.user.unwrap_or("");
        let layer = build_layer_blocking(req.dir, req.root, layer::owner_of_user(user)).await?;
        let mut inner = serde_json::Map::new();
        if !user.is_empty() {
            inner.insert("User".into(), Value::from(user));
        }
        if !req.entrypoint.is_empty() {
            inner.insert("Entrypoint".into(), Value::from(req.entrypoint.clone()));
        }
        if !req.labels.is_empty() {
            inner.insert(
                "Labels".into(),
                serde_json::to_value(&req.labels).unwrap_or_default(),
            );
        }
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": inner,
            "rootfs": { "type": "layers", "diff_ids": [layer.diff_id] },
            "history": [{
                "created": "1970-01-01T00:00:00Z",
                "created_by": format!("kubeless-oci: the files of a directory under {}", req.root),
            }],
        });
        let config_bytes = serde_json::to_vec(&config).map_err(|e| Error::Image {
            image: req.target.to_string(),
            reason: format!("cannot write the image config: {e}"),
        })?;
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(req.format.manifest_media_type().to_string()),
            config: OciDescriptor {
                media_type: req.format.config_media_type().to_string(),
                digest: sha256_digest(&config_bytes),
                size: config_bytes.len() as i64,
                urls: None,
                annotations: None,
                artifact_type: None,
            },
            layers: vec![OciDescriptor {
                media_type: req.format.layer_media_type().to_string(),
                digest: layer.digest.clone(),
                size: layer.gzip.len() as i64,
                urls: None,
                annotations: None,
                artifact_type: None,
            }],
            subject: None,
            artifact_type: None,
            annotations: None,
        };
        let mut pushed = Pushed {
            digest: String::new(),
            layer_digest: layer.digest.clone(),
            layer_bytes: layer.gzip.len() as u64,
            mounted: 0,
            uploaded: 0,
            existing: 0,
            base_digest: String::new(),
            media_type: req.format.manifest_media_type().to_string(),
        };
        let config_digest = manifest.config.digest.clone();
        pushed.digest = self
            .push_blobs_and_manifest(
                &target_ref,
                req.target,
                [(layer.gzip, layer.digest), (config_bytes, config_digest)],
                &manifest,
                &mut pushed,
            )
            .await?;
        Ok(pushed)
    }

    /// Makes one base layer available in the target repository: already there, mounted, or
    /// (mount refused, other registry) copied.
    async fn transfer_base_blob(
        &self,
        base: &Resolved,
        base_name: &str,
        desc: &OciDescriptor,
        target_ref: &Reference,
        target_name: &str,
        pushed: &mut Pushed,
    ) -> Result<(), Error> {
        let target_auth = self.login(target_ref).await?;
        let push_ctx = Self::context(target_ref, target_name, "pushing", "image", &target_auth);
        if self
            .client
            .blob_exists(target_ref, &desc.digest)
            .await
            .map_err(|e| push_ctx.error(e))?
        {
            pushed.existing += 1;
            return Ok(());
        }
        if base.reference.resolve_registry() == target_ref.resolve_registry()
            && self
                .client
                .mount_blob(target_ref, &base.reference, &desc.digest)
                .await
                .is_ok()
        {
            pushed.mounted += 1;
            return Ok(());
        }
        let base_auth = self.login(&base.reference).await?;
        let pull_ctx = Self::context(
            &base.reference,
            base_name,
            "copying a layer of",
            "layer of base image",
            &base_auth,
        );
        let data = self.pull_blob(&base.reference, desc, pull_ctx).await?;
        self.client
            .push_blob(target_ref, data, &desc.digest)
            .await
            .map_err(|e| push_ctx.error(e))?;
        pushed.uploaded += 1;
        Ok(())
    }

    /// Pushes the new blobs (skipping those the repository has) and then the manifest; returns
    /// the manifest digest.
    async fn push_blobs_and_manifest<const N: usize>(
        &self,
        target_ref: &Reference,
        target_name: &str,
        blobs: [(Vec<u8>, String); N],
        manifest: &OciImageManifest,
        pushed: &mut Pushed,
    ) -> Result<String, Error> {
        let auth = self.login(target_ref).await?;
        let ctx = Self::context(target_ref, target_name, "pushing", "repository of", &auth);
        for (data, digest) in blobs {
            if self
                .client
                .blob_exists(target_ref, &digest)
                .await
                .map_err(|e| ctx.error(e))?
            {
                pushed.existing += 1;
                continue;
            }
            self.client
                .push_blob(target_ref, data, &digest)
                .await
                .map_err(|e| ctx.error(e))?;
            pushed.uploaded += 1;
        }
        let body = serde_json::to_vec(manifest).map_err(|e| Error::Image {
            image: target_name.to_string(),
            reason: format!("cannot write the manifest: {e}"),
        })?;
        let media_type = manifest
            .media_type
            .clone()
            .unwrap_or_else(|| OCI_IMAGE_MEDIA_TYPE.to_string());
        let content_type = media_type.parse().map_err(|_| Error::Image {
            image: target_name.to_string(),
            reason: format!("invalid manifest media type {media_type:?}"),
        })?;
        let digest = sha256_digest(&body);
        self.client
            .push_manifest_raw(target_ref, body, content_type)
            .await
            .map_err(|e| ctx.error(e))?;
        Ok(digest)
    }

    /// The manifest and config of `image` (an index resolved to linux/amd64).
    pub async fn inspect(&self, image: &str) -> Result<Inspected, Error> {
        let reference = parse_reference(image)?;
        let resolved = self.resolve(&reference, image, "image").await?;
        let auth = self.login(&reference).await?;
        let ctx = Self::context(
            &reference,
            image,
            "reading the config of",
            "config of image",
            &auth,
        );
        let config = self
            .pull_blob(&resolved.reference, &resolved.manifest.config, ctx)
            .await?;
        let config = serde_json::from_slice(&config).map_err(|e| Error::Image {
            image: image.to_string(),
            reason: format!("the image config is not JSON: {e}"),
        })?;
        Ok(Inspected {
            digest: resolved.digest,
            media_type: resolved.format.manifest_media_type().to_string(),
            annotations: resolved.manifest.annotations.unwrap_or_default(),
            layers: resolved
                .manifest
                .layers
                .iter()
                .map(|l| LayerInfo {
                    digest: l.digest.clone(),
                    media_type: l.media_type.clone(),
                    size: u64::try_from(l.size).unwrap_or(0),
                })
                .collect(),
            config,
        })
    }

    /// Pushes an OCI image index `target` over images of its repository (multi-platform
    /// fixtures); returns its digest.
    pub async fn push_index(
        &self,
        target: &str,
        images: &[IndexImage<'_>],
    ) -> Result<String, Error> {
        let target_ref = parse_reference(target)?;
        let mut manifests = Vec::new();
        for entry in images {
            let reference = parse_reference(entry.image)?;
            let auth = self.login(&reference).await?;
            let ctx = Self::context(&reference, entry.image, "reading", "image", &auth);
            let (body, digest) = self
                .client
                .pull_manifest_raw(
                    &reference,
                    &auth,
                    &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
                )
                .await
                .map_err(|e| ctx.error(e))?;
            let media_type = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| {
                    v.get("mediaType")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(|| OCI_IMAGE_MEDIA_TYPE.to_string());
            manifests.push(serde_json::json!({
                "mediaType": media_type,
                "digest": digest,
                "size": body.len(),
                "platform": { "os": entry.os, "architecture": entry.architecture },
            }));
        }
        let body = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE,
            "manifests": manifests,
        }))
        .map_err(|e| Error::Image {
            image: target.to_string(),
            reason: format!("cannot write the index: {e}"),
        })?;
        let auth = self.login(&target_ref).await?;
        let ctx = Self::context(&target_ref, target, "pushing", "repository of", &auth);
        let content_type = OCI_IMAGE_INDEX_MEDIA_TYPE
            .parse()
            .map_err(|_| Error::Image {
                image: target.to_string(),
                reason: "invalid index media type".into(),
            })?;
        let digest = sha256_digest(&body);
        self.client
            .push_manifest_raw(&target_ref, body, content_type)
            .await
            .map_err(|e| ctx.error(e))?;
        Ok(digest)
    }

    /// Pulls `image`, finds its base by the manifest annotations
    /// `org.opencontainers.image.base.name` / `.base.digest` (which [`Registry::push_layer`]
    /// writes), and unpacks only the layers above the base into `dest`, at their image paths
    /// (the layer of `push_layer` with root `/kubeless` gives `dest/kubeless/...`). Refuses
    /// path traversal, symlinks pointing outside `dest` (absolute ones included) and device
    /// files.
    pub async fn unpack_added(&self, image: &str, dest: &Path) -> Result<Unpacked, Error> {
        let reference = parse_reference(image)?;
        let resolved = self.resolve(&reference, image, "image").await?;
        let annotations = resolved.manifest.annotations.clone().unwrap_or_default();
        let (Some(base_name), Some(base_digest)) = (
            annotations.get(ANNOTATION_BASE_NAME),
            annotations.get(ANNOTATION_BASE_DIGEST),
        ) else {
            return Err(Error::Image {
                image: image.to_string(),
                reason: format!(
                    "the manifest has no {ANNOTATION_BASE_NAME} / {ANNOTATION_BASE_DIGEST} annotations (not pushed by kubeless-builder?)"
                ),
            });
        };
        let base_named = parse_reference(base_name)?;
        let base_ref = Reference::with_digest(
            base_named.registry().to_string(),
            base_named.repository().to_string(),
            base_digest.clone(),
        );
        let base_image = format!("{}@{base_digest}", base_named.whole());
        let base = self.resolve(&base_ref, &base_image, "base image").await?;
        let base_layers: Vec<&str> = base
            .manifest
            .layers
            .iter()
            .map(|l| l.digest.as_str())
            .collect();
        let layers = &resolved.manifest.layers;
        let starts_with_base = layers.len() >= base_layers.len()
            && layers.iter().zip(&base_layers).all(|(l, b)| l.digest == *b);
        if !starts_with_base {
            return Err(Error::Image {
                image: image.to_string(),
                reason: format!("its layers do not start with those of its base {base_image}"),
            });
        }
        let auth = self.login(&reference).await?;
        let ctx = Self::context(&reference, image, "pulling", "layer of image", &auth);
        let added = &layers[base_layers.len()..];
        for desc in added {
            let gzip = if desc.media_type.ends_with("gzip") {
                true
            } else if desc.media_type.ends_with(".tar") {
                false
            } else {
                return Err(Error::Image {
                    image: image.to_string(),
                    reason: format!(
                        "layer {} has media type {}, only tar and tar+gzip are unpacked",
                        desc.digest, desc.media_type
                    ),
                });
            };
            let data = self.pull_blob(&resolved.reference, desc, ctx).await?;
            let dest = dest.to_path_buf();
            let name = image.to_string();
            tokio::task::spawn_blocking(move || {
                if gzip {
                    unpack::unpack_tar(flate2::read::GzDecoder::new(&data[..]), &dest, &name)
                } else {
                    unpack::unpack_tar(&data[..], &dest, &name)
                }
            })
            .await
            .map_err(|e| Error::Image {
                image: image.to_string(),
                reason: format!("unpacking was interrupted: {e}"),
            })??;
        }
        Ok(Unpacked {
            base: base_name.clone(),
            digest: resolved.digest,
            layers: added.len(),
            base_digest: base_digest.clone(),
        })
    }
}

async fn build_layer_blocking(
    dir: &Path,
    root: &str,
    owner: (u64, u64),
) -> Result<layer::Layer, Error> {
    let (dir_owned, root_owned) = (dir.to_path_buf(), root.to_string());
    tokio::task::spawn_blocking(move || layer::build_layer(&dir_owned, &root_owned, owner))
        .await
        .map_err(|e| Error::Io {
            action: "building the layer of",
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?
}

/// The base config plus the new layer: its diff_id, a history entry (when the base keeps a
/// history) and the labels.
fn add_layer_to_config(
    config: &mut Value,
    diff_id: &str,
    root: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    let obj = config
        .as_object_mut()
        .ok_or("the image config is not a JSON object")?;
    let rootfs = obj
        .entry("rootfs")
        .or_insert_with(|| serde_json::json!({ "type": "layers", "diff_ids": [] }));
    let diff_ids = rootfs
        .as_object_mut()
        .ok_or("rootfs is not an object")?
        .entry("diff_ids")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or("rootfs.diff_ids is not a list")?;
    diff_ids.push(Value::from(diff_id));
    if let Some(history) = obj.get_mut("history").and_then(Value::as_array_mut) {
        history.push(serde_json::json!({
            "created": "1970-01-01T00:00:00Z",
            "created_by": format!("kubeless-builder: the function's files under {root}"),
        }));
    }
    if !labels.is_empty() {
        let inner = obj
            .entry("config")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        let inner = inner
            .as_object_mut()
            .ok_or("config.config is not an object")?;
        let existing = inner
            .entry("Labels")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if existing.is_null() {
            *existing = Value::Object(serde_json::Map::new());
        }
        let existing = existing
            .as_object_mut()
            .ok_or("config.Labels is not an object")?;
        for (k, v) in labels {
            existing.insert(k.clone(), Value::from(v.as_str()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_gets_diff_id_history_and_labels() {
        let mut config = serde_json::json!({
            "architecture": "amd64",
            "config": { "User": "65532:65532", "Labels": null },
            "rootfs": { "type": "layers", "diff_ids": ["sha256:a"] },
            "history": [{ "created_by": "base" }],
        });
        let labels = BTreeMap::from([("function".to_string(), "hello".to_string())]);
        add_layer_to_config(&mut config, "sha256:b", "/kubeless", &labels).unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"],
            serde_json::json!(["sha256:a", "sha256:b"])
        );
        assert_eq!(config["history"].as_array().unwrap().len(), 2);
        assert_eq!(config["config"]["Labels"]["function"], "hello");
        assert_eq!(config["config"]["User"], "65532:65532");
    }

    #[test]
    fn config_without_rootfs_or_history() {
        let mut config = serde_json::json!({});
        add_layer_to_config(&mut config, "sha256:b", "/k", &BTreeMap::new()).unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"],
            serde_json::json!(["sha256:b"])
        );
        assert!(config.get("history").is_none());
        assert!(
            add_layer_to_config(&mut serde_json::json!([]), "x", "/k", &BTreeMap::new()).is_err()
        );
    }
}
