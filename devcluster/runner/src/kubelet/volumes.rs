//! The files a container sees: its pod's volumes (ConfigMap, Secret, downward API, projected,
//! emptyDir, hostPath), its working folder, and the ConfigMaps and Secrets its env refers to.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, ProjectedVolumeSource, Secret, Volume,
};
use kube::Api;

use crate::container::PodRuntime;
use crate::ctx::Ctx;
use crate::spec::{PodFacts, RefData};

/// The folder a container runs in: the mapped workingDir when it exists on
/// this machine, else the same path under the pod's private root; the pod's
/// home folder when none is set.
pub(super) async fn working_dir(pod_dir: &Path, wanted: Option<&str>) -> PathBuf {
    let Some(w) = wanted.filter(|w| !w.is_empty()) else {
        return pod_dir.join("home");
    };
    let p = PathBuf::from(w);
    if p.is_absolute() && tokio::fs::metadata(&p).await.is_ok_and(|m| m.is_dir()) {
        return p;
    }
    let under_root = pod_dir.join("rootfs").join(w.trim_start_matches('/'));
    let _ = tokio::fs::create_dir_all(&under_root).await;
    under_root
}

/// Reads the ConfigMaps and Secrets a container's env refers to.
pub(super) async fn fetch_refs(ctx: &Ctx, ns: &str, c: &Container) -> Result<RefData, String> {
    let mut cms: BTreeMap<String, ()> = BTreeMap::new();
    let mut secrets: BTreeMap<String, ()> = BTreeMap::new();
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            cms.insert(r.name.clone(), ());
        }
        if let Some(r) = &from.secret_ref {
            secrets.insert(r.name.clone(), ());
        }
    }
    for v in c.env.iter().flatten() {
        if let Some(f) = &v.value_from {
            if let Some(r) = &f.config_map_key_ref {
                cms.insert(r.name.clone(), ());
            }
            if let Some(r) = &f.secret_key_ref {
                secrets.insert(r.name.clone(), ());
            }
        }
    }
    let mut out = RefData::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    for name in cms.keys() {
        if let Some(cm) = cm_api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading configmap {name:?}: {e}"))?
        {
            out.config_maps.insert(name.clone(), cm);
        }
    }
    let s_api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    for name in secrets.keys() {
        if let Some(s) = s_api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading secret {name:?}: {e}"))?
        {
            out.secrets.insert(name.clone(), s);
        }
    }
    Ok(out)
}

/// Writes a file with `mode` (default 0644): created with it, so a secret is never readable by
/// others in between, and set again when the file was already there.
pub(super) fn write_file(path: &Path, data: &[u8], mode: Option<i32>) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let mode = mode.unwrap_or(0o644) as u32 & 0o777;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .and_then(|mut f| f.write_all(data))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Safe relative file name inside a volume (no `..`, no absolute paths).
fn safe_rel(p: &str) -> Option<&str> {
    let ok = !p.is_empty() && !p.starts_with('/') && !p.split('/').any(|s| s == "..");
    ok.then_some(p)
}

/// Writes key/value files of a ConfigMap/Secret volume.
fn materialise(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    default_mode: Option<i32>,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let value = data
                    .get(&item.key)
                    .ok_or_else(|| format!("key {:?} not found", item.key))?;
                if let Some(rel) = safe_rel(&item.path) {
                    write_file(&dir.join(rel), value, item.mode.or(default_mode))?;
                }
            }
        }
        _ => {
            for (k, v) in data {
                if let Some(rel) = safe_rel(k) {
                    write_file(&dir.join(rel), v, default_mode)?;
                }
            }
        }
    }
    Ok(())
}

/// A ConfigMap's data and binary data as bytes; `None` when it does not exist.
async fn config_map_data(
    ctx: &Ctx,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let Some(obj) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut data: BTreeMap<String, Vec<u8>> = obj
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (k, b) in obj.binary_data.unwrap_or_default() {
        data.insert(k, b.0);
    }
    Ok(Some(data))
}

/// A Secret's data as bytes; `None` when it does not exist.
async fn secret_data(
    ctx: &Ctx,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let Some(obj) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut data: BTreeMap<String, Vec<u8>> = obj
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, sv) in obj.string_data.unwrap_or_default() {
        data.insert(k, sv.into_bytes());
    }
    Ok(Some(data))
}

/// Writes downward-API items (field references) into `dir`.
fn downward_items(
    dir: &Path,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    facts: &PodFacts,
) -> Result<(), String> {
    for item in items {
        let value = item
            .field_ref
            .as_ref()
            .and_then(|f| crate::spec::field_value(f, facts))
            .unwrap_or_default();
        if let Some(rel) = safe_rel(&item.path) {
            write_file(&dir.join(rel), value.as_bytes(), item.mode.or(default_mode))?;
        }
    }
    Ok(())
}

/// Fills a projected volume from its sources, as the kubelet does; the token of a
/// `serviceAccountToken` source is requested for the pod's ServiceAccount and bound to the pod.
async fn project(
    ctx: &Ctx,
    pod: &Pod,
    dir: &Path,
    projected: &ProjectedVolumeSource,
    facts: &PodFacts,
) -> Result<(), String> {
    let ns = &facts.namespace;
    let mode = projected.default_mode;
    for source in projected.sources.iter().flatten() {
        if let Some(cm) = &source.config_map {
            match config_map_data(ctx, ns, &cm.name).await? {
                Some(data) => materialise(dir, &data, cm.items.as_deref(), mode)
                    .map_err(|e| format!("configmap {:?}: {e}", cm.name))?,
                None if cm.optional == Some(true) => {}
                None => return Err(format!("configmap {:?} not found", cm.name)),
            }
        }
        if let Some(secret) = &source.secret {
            match secret_data(ctx, ns, &secret.name).await? {
                Some(data) => materialise(dir, &data, secret.items.as_deref(), mode)
                    .map_err(|e| format!("secret {:?}: {e}", secret.name))?,
                None if secret.optional == Some(true) => {}
                None => return Err(format!("secret {:?} not found", secret.name)),
            }
        }
        if let Some(d) = &source.downward_api {
            downward_items(dir, d.items.as_deref().unwrap_or(&[]), mode, facts)?;
        }
        if let Some(t) = &source.service_account_token {
            let audiences = t
                .audience
                .iter()
                .filter(|a| !a.is_empty())
                .cloned()
                .collect();
            let token = crate::service_account::request_token(
                &ctx.client,
                pod,
                &facts.service_account,
                audiences,
                t.expiration_seconds.unwrap_or(3600),
            )
            .await?;
            if let Some(rel) = safe_rel(&t.path) {
                write_file(&dir.join(rel), token.as_bytes(), mode)?;
            }
        }
        if source.cluster_trust_bundle.is_some() {
            tracing::warn!(
                "clusterTrustBundle volume sources are not supported by devcluster; skipped"
            );
        }
    }
    Ok(())
}

/// Creates one folder per volume and fills ConfigMap, Secret, downward-API and projected volumes.
pub(super) async fn prepare_volumes(
    ctx: &Ctx,
    pod: &Pod,
    volumes: &[Volume],
    pod_dir: &Path,
    facts: &PodFacts,
) -> Result<HashMap<String, PathBuf>, String> {
    let ns = facts.namespace.as_str();
    let mut out = HashMap::new();
    for v in volumes {
        let dir = pod_dir.join("volumes").join(&v.name);
        if let Some(h) = &v.host_path {
            // hostPath is the one volume that is the host's own folder.
            out.insert(v.name.clone(), PathBuf::from(&h.path));
            continue;
        }
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Some(cm) = &v.config_map {
            match config_map_data(ctx, ns, &cm.name).await? {
                Some(data) => materialise(&dir, &data, cm.items.as_deref(), cm.default_mode)
                    .map_err(|e| format!("configmap volume {:?}: {e}", v.name))?,
                None if cm.optional == Some(true) => {}
                None => return Err(format!("configmap {:?} not found", cm.name)),
            }
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            match secret_data(ctx, ns, &name).await? {
                Some(data) => materialise(&dir, &data, s.items.as_deref(), s.default_mode)
                    .map_err(|e| format!("secret volume {:?}: {e}", v.name))?,
                None if s.optional == Some(true) => {}
                None => return Err(format!("secret {name:?} not found")),
            }
        } else if let Some(d) = &v.downward_api {
            downward_items(
                &dir,
                d.items.as_deref().unwrap_or(&[]),
                d.default_mode,
                facts,
            )?;
        } else if let Some(p) = &v.projected {
            project(ctx, pod, &dir, p, facts)
                .await
                .map_err(|e| format!("projected volume {:?}: {e}", v.name))?;
        } else if v.empty_dir.is_some() {
            if matches!(ctx.config.pods, PodRuntime::Container(_)) {
                // As the kubelet makes it: writable by whatever user the image runs as.
                use std::os::unix::fs::PermissionsExt;
                tokio::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                    .await
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
            }
        } else {
            tracing::warn!(volume = %v.name, "volume type not supported by devcluster; using an empty folder");
        }
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_files_items_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data: BTreeMap<String, Vec<u8>> = [
            ("a".to_string(), b"A".to_vec()),
            ("b".to_string(), b"B".to_vec()),
        ]
        .into();
        materialise(&dir.path().join("all"), &data, None, Some(0o600)).unwrap();
        assert_eq!(std::fs::read(dir.path().join("all/a")).unwrap(), b"A");
        let mode = std::fs::metadata(dir.path().join("all/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let items = vec![k8s_openapi::api::core::v1::KeyToPath {
            key: "b".into(),
            path: "sub/bee".into(),
            mode: None,
        }];
        materialise(&dir.path().join("some"), &data, Some(&items), None).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("some/sub/bee")).unwrap(),
            b"B"
        );
        assert!(!dir.path().join("some/a").exists());
        let bad = vec![k8s_openapi::api::core::v1::KeyToPath {
            key: "zz".into(),
            path: "x".into(),
            mode: None,
        }];
        assert!(materialise(&dir.path().join("bad"), &data, Some(&bad), None).is_err());
        assert_eq!(safe_rel("../x"), None);
        assert_eq!(safe_rel("/x"), None);
    }

    #[tokio::test]
    async fn working_dir_falls_back_under_pod_root() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(working_dir(dir.path(), None).await, dir.path().join("home"));
        let existing = dir.path().to_string_lossy().into_owned();
        assert_eq!(working_dir(dir.path(), Some(&existing)).await, dir.path());
        let w = working_dir(dir.path(), Some("/app/srv")).await;
        assert_eq!(w, dir.path().join("rootfs/app/srv"));
        assert!(w.is_dir());
    }
}
