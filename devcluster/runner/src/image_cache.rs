//! Process mode's registry images: an image that is not in the image map but lives in a
//! registry (a function image from the build step: a runtime image plus the layers the build
//! added) runs as the base image's mapped command, with the added layers' files in place.
//!
//! The added layers (those above the base named by the manifest's
//! `org.opencontainers.image.base.name` annotation) are unpacked once per manifest digest into
//! `{cache}/sha256-{hex}/rootfs` and shared by every pod of that image. Unpacking goes into a
//! temporary folder renamed into place at the end, so a crash never leaves a half-unpacked
//! image and two runners sharing a cache never see each other's partial work; within one
//! runner a lock per digest makes concurrent pods wait for one unpack. Each container then
//! runs on its own writable copy of that tree (see [`copy_tree`]), as each container of a real
//! cluster gets its own writable layer.
//!
//! The base reference is matched against the image map as written first, then (for a registry
//! on this machine only) without its registry host: `127.0.0.1:5000/kubeless-rs/runtime-python:3.11`
//! finds the `kubeless-rs/runtime-python:*` entry, because a loopback registry holds the images
//! this checkout built, which is what that entry stands for. A base in any other registry must
//! be named with its host in the map. A digest after a tag (`repo:tag@sha256:...`) is also
//! tried as `repo:tag`, since map entries name tags.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::container::{Problem, is_loopback_registry};
use crate::image_map::{ImageEntry, ImageMap};

/// Env var naming a PEM file of extra CA certificates for registries (process mode).
pub const ENV_REGISTRY_CA_FILE: &str = "DEVCLUSTER_REGISTRY_CA_FILE";

/// How long a manifest lookup may take, and a whole unpack.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(60);
const UNPACK_TIMEOUT: Duration = Duration::from_secs(600);

/// The unpacked images of one runner, shared by its pods (cheap to clone).
#[derive(Clone, Debug)]
pub struct ImageCache {
    dir: PathBuf,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    unpacks: AtomicU64,
    /// One lock per manifest digest: one unpack at a time per image.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// What `{cache}/sha256-{hex}/image.json` records about an unpacked image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PulledImage {
    /// The reference it was pulled by first.
    pub reference: String,
    /// The manifest digest, `sha256:...`.
    pub digest: String,
    /// The base image reference of the manifest annotation.
    pub base: String,
    /// How many added layers were unpacked.
    pub layers: usize,
    /// The unpacked tree (not serialized: it is beside the record).
    #[serde(skip)]
    pub rootfs: PathBuf,
}

/// The outcome of [`ImageCache::pull`]: the image, and whether this call unpacked it.
#[derive(Clone, Debug)]
pub struct Pull {
    pub image: PulledImage,
    pub unpacked: bool,
}

impl ImageCache {
    /// A cache in `dir` (created on first use).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            shared: Arc::default(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many images this runner unpacked (a cached image counts once).
    pub fn unpacks(&self) -> u64 {
        self.shared.unpacks.load(Ordering::SeqCst)
    }

    fn image_dir(&self, digest: &str) -> PathBuf {
        self.dir.join(digest.replace(':', "-"))
    }

    fn ref_file(&self, image: &str) -> PathBuf {
        let hash = hex::encode(sha2::Sha256::digest(image.as_bytes()));
        self.dir.join("refs").join(hash)
    }

    /// The unpacked image with manifest `digest`, when it is in the cache.
    pub async fn cached(&self, digest: &str) -> Option<PulledImage> {
        let dir = self.image_dir(digest);
        let text = tokio::fs::read(dir.join("image.json")).await.ok()?;
        let mut image: PulledImage = serde_json::from_slice(&text).ok()?;
        image.rootfs = dir.join("rootfs");
        Some(image)
    }

    /// The image `image` was last pulled as, when it is still in the cache.
    async fn cached_ref(&self, image: &str) -> Option<PulledImage> {
        let digest = tokio::fs::read_to_string(self.ref_file(image)).await.ok()?;
        self.cached(digest.trim()).await
    }

    /// Makes `image` present as `policy` (`Always`, `IfNotPresent`, `Never`) says: asks the
    /// registry for its digest (unless the policy lets a cached copy do) and unpacks its added
    /// layers unless that digest is cached. `options` (how to reach the registry) is awaited
    /// only when the registry is asked. Errors are `ErrImagePull` / `ErrImageNeverPull`
    /// problems with the registry's answer.
    pub async fn pull(
        &self,
        image: &str,
        policy: &str,
        options: impl Future<Output = Result<kubeless_oci::RegistryOptions, Problem>>,
    ) -> Result<Pull, Problem> {
        if policy != "Always"
            && let Some(cached) = self.cached_ref(image).await
        {
            return Ok(Pull {
                image: cached,
                unpacked: false,
            });
        }
        if policy == "Never" {
            return Err(Problem {
                reason: "ErrImageNeverPull",
                message: format!(
                    "container image {image:?} is not present with pull policy of Never"
                ),
            });
        }
        let failed = |message: String| Problem {
            reason: "ErrImagePull",
            message: format!("failed to pull image {image:?}: {message}"),
        };
        let registry =
            kubeless_oci::Registry::new(options.await?).map_err(|e| failed(chain(&e)))?;
        let digest = match tokio::time::timeout(LOOKUP_TIMEOUT, registry.exists(image)).await {
            Err(_) => {
                return Err(failed(format!(
                    "the registry did not answer in {LOOKUP_TIMEOUT:?}"
                )));
            }
            Ok(Err(e)) => return Err(failed(chain(&e))),
            Ok(Ok(None)) => {
                return Err(failed(
                    "manifest unknown: the registry has no image by this name and tag".into(),
                ));
            }
            Ok(Ok(Some(digest))) => digest,
        };
        let lock = {
            let mut locks = self
                .shared
                .locks
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            locks.entry(digest.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        let (pulled, unpacked) = match self.cached(&digest).await {
            Some(cached) => (cached, false),
            None => (
                self.unpack(&registry, image, &digest)
                    .await
                    .map_err(failed)?,
                true,
            ),
        };
        let ref_file = self.ref_file(image);
        if let Err(e) = write_atomically(&ref_file, pulled.digest.as_bytes()).await {
            // Only IfNotPresent's shortcut is lost: the next start asks the registry.
            tracing::warn!(path = %ref_file.display(), error = %e, "recording the image digest failed");
        }
        Ok(Pull {
            image: pulled,
            unpacked,
        })
    }

    async fn unpack(
        &self,
        registry: &kubeless_oci::Registry,
        image: &str,
        digest: &str,
    ) -> Result<PulledImage, String> {
        let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(|e| io(&self.dir, e))?;
        self.remove_abandoned_unpacks().await;
        let tmp = self
            .dir
            .join(format!(".unpacking-{}", crate::util::generate_name("")));
        let rootfs = tmp.join("rootfs");
        tokio::fs::create_dir_all(&rootfs)
            .await
            .map_err(|e| io(&rootfs, e))?;
        let result = tokio::time::timeout(UNPACK_TIMEOUT, registry.unpack_added(image, &rootfs))
            .await
            .map_err(|_| format!("unpacking its layers took longer than {UNPACK_TIMEOUT:?}"))
            .and_then(|r| r.map_err(|e| chain(&e)));
        let unpacked = match result {
            Ok(u) => u,
            Err(e) => {
                let _ = tokio::fs::remove_dir_all(&tmp).await;
                return Err(e);
            }
        };
        let record = PulledImage {
            reference: image.to_string(),
            // The digest the registry named first keys the cache (unpack_added reads the same
            // manifest, so it reports the same one unless the tag moved in between).
            digest: digest.to_string(),
            base: unpacked.base,
            layers: unpacked.layers,
            rootfs: PathBuf::new(),
        };
        if unpacked.digest != digest {
            tracing::info!(%image, looked_up = %digest, unpacked = %unpacked.digest, "the tag moved while it was pulled");
        }
        let json = serde_json::to_vec_pretty(&record).map_err(|e| e.to_string())?;
        let record_path = tmp.join("image.json");
        tokio::fs::write(&record_path, json)
            .await
            .map_err(|e| io(&record_path, e))?;
        let dest = self.image_dir(digest);
        if let Err(e) = tokio::fs::rename(&tmp, &dest).await {
            let _ = tokio::fs::remove_dir_all(&tmp).await;
            // Another runner sharing this cache finished first: its copy is as good.
            if self.cached(digest).await.is_none() {
                return Err(io(&dest, e));
            }
        } else {
            self.shared.unpacks.fetch_add(1, Ordering::SeqCst);
            tracing::info!(%image, %digest, base = %record.base, layers = record.layers, "unpacked the image's added layers");
        }
        self.cached(digest)
            .await
            .ok_or_else(|| format!("{} vanished after its unpack", dest.display()))
    }
}

impl ImageCache {
    /// Removes the temporary folders of unpacks that cannot still be running (older than twice
    /// the unpack timeout): what a runner killed in the middle of an unpack, or a pod deleted
    /// during its pull, left behind.
    async fn remove_abandoned_unpacks(&self) {
        let Ok(mut entries) = tokio::fs::read_dir(&self.dir).await else {
            return;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let abandoned = entry
                .file_name()
                .to_string_lossy()
                .starts_with(".unpacking-")
                && entry
                    .metadata()
                    .await
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > UNPACK_TIMEOUT * 2);
            if abandoned {
                tracing::info!(path = %entry.path().display(), "removing an abandoned unpack");
                let _ = tokio::fs::remove_dir_all(entry.path()).await;
            }
        }
    }
}

/// Writes `data` to `path` through a temporary file and a rename (readers never see a part).
async fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let tmp = path.with_extension(format!("tmp-{}", crate::util::generate_name("")));
    tokio::fs::write(&tmp, data).await?;
    tokio::fs::rename(&tmp, path).await
}

/// An error and its sources, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// The registry host of an image reference, as Docker reads it: the first path component when
/// it has a `.` or a `:` or is `localhost`; None for Docker Hub names (`python:3`, `a/b`).
pub fn registry_host(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}

/// The repository of a reference, without tag or digest (`host/a/b:1@sha256:x` -> `host/a/b`).
pub fn repository(image: &str) -> &str {
    let no_digest = image.split_once('@').map_or(image, |(r, _)| r);
    let slash = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[slash..].find(':') {
        Some(colon) => &no_digest[..slash + colon],
        None => no_digest,
    }
}

/// The names a base reference is looked up under in the image map, in order (module docs).
pub fn base_candidates(base: &str) -> Vec<String> {
    let mut out = vec![base.to_string()];
    if let Some((tagged, _)) = base.split_once('@')
        && repository(tagged) != tagged
    {
        out.push(tagged.to_string());
    }
    if is_loopback_registry(base) {
        let without_host: Vec<String> = out
            .iter()
            .filter_map(|r| r.split_once('/').map(|(_, rest)| rest.to_string()))
            .collect();
        out.extend(without_host);
    }
    out
}

/// The image map entry `image` runs as without a pull: the names of [`base_candidates`], so an
/// image of a registry on this machine (`127.0.0.1:5000/kubeless-rs/runtime-python:3.11`, what
/// the chart's `global.imageRegistry` makes of the runtime catalogue) runs as the entry of the
/// image this checkout built, as its base would.
pub fn resolve_local<'a>(map: &'a ImageMap, image: &str) -> Option<&'a ImageEntry> {
    base_candidates(image).iter().find_map(|c| map.resolve(c))
}

/// The image map entry a pulled image's base runs as, or an `ErrImagePull` problem naming it.
pub fn resolve_base<'a>(
    map: &'a ImageMap,
    image: &str,
    base: &str,
) -> Result<&'a ImageEntry, Problem> {
    if base.is_empty() {
        return Err(Problem {
            reason: "ErrImagePull",
            message: format!(
                "image {image:?} names no base image (manifest annotation org.opencontainers.image.base.name): devcluster's process mode runs only images built on a base in its image map"
            ),
        });
    }
    let candidates = base_candidates(base);
    candidates
        .iter()
        .find_map(|c| map.resolve(c))
        .ok_or_else(|| Problem {
            reason: "ErrImagePull",
            message: format!(
                "image {image:?} is built on {base:?}, which is not in the devcluster image map ({}; tried {}); add an entry whose `image` pattern matches it",
                map.describe_sources(),
                candidates.join(", ")
            ),
        })
}

/// The mount paths an unpacked tree stands for: `/NAME` for each top-level folder of `rootfs`
/// (files at the top level are not mapped: a path rewrite needs a folder to point into).
pub fn image_mounts(rootfs: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(rootfs)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            let name = entry.file_name().to_string_lossy().into_owned();
            out.push((format!("/{name}"), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Copies `src` to a fresh `dest` (removed first): folders, files with their permissions, and
/// symbolic links as links. Blocking; run it off the async threads.
pub fn copy_tree(src: &Path, dest: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    copy_dir(src, dest)
}

fn copy_dir(src: &Path, dest: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    std::fs::set_permissions(dest, std::fs::metadata(src)?.permissions())?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let to = dest.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &to)?;
        } else if kind.is_file() {
            // std::fs::copy keeps the permissions (and reflinks where the file system can).
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts_as_docker_reads_them() {
        assert_eq!(
            registry_host("127.0.0.1:5000/a/b:1"),
            Some("127.0.0.1:5000")
        );
        assert_eq!(registry_host("localhost/a:1"), Some("localhost"));
        assert_eq!(registry_host("quay.io/a/b"), Some("quay.io"));
        assert_eq!(registry_host("kubeless-rs/runtime-python:3.11"), None);
        assert_eq!(registry_host("python:3"), None);
    }

    #[test]
    fn repositories_drop_tag_and_digest() {
        assert_eq!(repository("127.0.0.1:5000/a/b:1"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("127.0.0.1:5000/a/b"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("a/b:1@sha256:00"), "a/b");
        assert_eq!(repository("b@sha256:00"), "b");
    }

    #[test]
    fn base_candidates_strip_only_a_loopback_host() {
        assert_eq!(
            base_candidates("127.0.0.1:5000/kubeless-rs/runtime-python:3.11@sha256:ab"),
            vec![
                "127.0.0.1:5000/kubeless-rs/runtime-python:3.11@sha256:ab",
                "127.0.0.1:5000/kubeless-rs/runtime-python:3.11",
                "kubeless-rs/runtime-python:3.11@sha256:ab",
                "kubeless-rs/runtime-python:3.11",
            ]
        );
        assert_eq!(
            base_candidates("quay.io/kubeless-rs/runtime-python:3.11"),
            vec!["quay.io/kubeless-rs/runtime-python:3.11"]
        );
        // A bare digest has no tag to fall back to.
        assert_eq!(base_candidates("a/b@sha256:00"), vec!["a/b@sha256:00"]);
    }

    #[test]
    fn loopback_registry_images_run_as_their_map_entry_without_a_pull() {
        let map = ImageMap::parse(
            "- image: \"kubeless-rs/runtime-python:*\"\n  cmd: [\"py\"]\n",
            Path::new("t.yaml"),
        )
        .unwrap();
        assert!(resolve_local(&map, "127.0.0.1:5000/kubeless-rs/runtime-python:3.11").is_some());
        assert!(resolve_local(&map, "kubeless-rs/runtime-python:3.11").is_some());
        // A function image there is not a map entry: it is pulled.
        assert!(resolve_local(&map, "127.0.0.1:5000/functions/default/hello:abc").is_none());
        // Another registry's image is never matched by repository name alone.
        assert!(resolve_local(&map, "quay.io/kubeless-rs/runtime-python:3.11").is_none());
    }

    #[test]
    fn bases_resolve_through_the_map() {
        let map = ImageMap::parse(
            "- image: \"kubeless-rs/runtime-python:*\"\n  cmd: [python3]\n- image: \"quay.io/x/y:*\"\n  cmd: [sh]\n",
            Path::new("/m/a.yaml"),
        )
        .unwrap();
        let e = resolve_base(
            &map,
            "img",
            "127.0.0.1:40000/kubeless-rs/runtime-python:3.11",
        )
        .unwrap();
        assert_eq!(e.cmd, vec!["python3"]);
        assert_eq!(
            resolve_base(&map, "img", "quay.io/x/y:1").unwrap().cmd,
            vec!["sh"]
        );
        let p = resolve_base(&map, "img", "quay.io/kubeless-rs/runtime-python:3.11").unwrap_err();
        assert_eq!(p.reason, "ErrImagePull");
        assert!(
            p.message.contains("not in the devcluster image map"),
            "{}",
            p.message
        );
        let p = resolve_base(&map, "img", "").unwrap_err();
        assert!(p.message.contains("names no base image"), "{}", p.message);
    }

    #[test]
    fn copies_are_independent_and_mounts_are_top_level_folders() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("rootfs");
        std::fs::create_dir_all(src.join("kubeless/lib")).unwrap();
        std::fs::write(src.join("kubeless/run.sh"), "echo hi").unwrap();
        std::fs::set_permissions(
            src.join("kubeless/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("run.sh", src.join("kubeless/link")).unwrap();
        std::fs::write(src.join("top-file"), "x").unwrap();
        let dest = dir.path().join("copy");
        std::fs::create_dir_all(dest.join("stale")).unwrap();
        copy_tree(&src, &dest).unwrap();
        assert!(!dest.join("stale").exists());
        assert_eq!(
            std::fs::read_to_string(dest.join("kubeless/link")).unwrap(),
            "echo hi"
        );
        let mode = std::fs::metadata(dest.join("kubeless/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::write(dest.join("kubeless/run.sh"), "changed").unwrap();
        assert_eq!(
            std::fs::read_to_string(src.join("kubeless/run.sh")).unwrap(),
            "echo hi"
        );
        assert_eq!(
            image_mounts(&dest).unwrap(),
            vec![("/kubeless".to_string(), dest.join("kubeless"))]
        );
    }
}
