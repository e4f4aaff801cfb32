//! Helpers shared by the end-to-end tests in `tests/`.

use std::path::{Path, PathBuf};

/// The repository root (the workspace this crate lives in).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// `<target>/debug` of the running test binary (`<target>/debug/deps/<test>-<hash>`): where
/// `cargo build --workspace --bins` left the binaries the tests start.
pub fn target_debug_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target/debug"))
}

/// Fails the test unless every binary in `bins` was built ([`kubeless_testkit::workspace_bin`]
/// checks each).
pub fn require_bins(bins: &[&str]) {
    for bin in bins {
        kubeless_testkit::workspace_bin(bin);
    }
}

/// Splits a multi-document YAML text into JSON values, skipping empty documents.
pub fn yaml_documents(text: &str) -> Result<Vec<serde_json::Value>, serde_yaml_ng::Error> {
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}
/// The umbrella chart rendered by the real Helm engine with `values` for a release `kubeless`
/// in `namespace`, one JSON value per object, in Helm's install order by kind (ServiceAccounts,
/// RBAC, ConfigMaps and Services before Deployments): the order to apply them in. It runs
/// `deploy/helm/render.py template`, the same code docs/helm.md's `helm template` replays, so
/// every test that applies the chart applies it in that one order. Panics with how to install
/// helm-python-sdk when rendering fails.
pub fn render_chart(values: &serde_json::Value, namespace: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    let file = dir.path().join("values.json");
    std::fs::write(&file, values.to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
    let out = std::process::Command::new("python3")
        .current_dir(repo_root())
        .arg("deploy/helm/render.py")
        .args([
            "template",
            "kubeless",
            "deploy/helm/kubeless",
            "-n",
            namespace,
            "-f",
        ])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("python3 must be installed: {e}"));
    assert!(
        out.status.success(),
        "rendering the chart failed (needs `pip install helm-python-sdk pyyaml`, which scripts/test.sh does):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_documents(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| panic!("render.py printed YAML that does not parse: {e}"))
}

/// Helm's install order by kind (`InstallOrder` of Helm's kind sorter; deploy/helm/render.py
/// sorts with the same list): the position of `kind`, unknown kinds after every known one.
pub fn helm_install_rank(kind: &str) -> usize {
    const INSTALL_ORDER: &[&str] = &[
        "PriorityClass",
        "Namespace",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PodSecurityPolicy",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Secret",
        "SecretList",
        "ConfigMap",
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleList",
        "ClusterRoleBinding",
        "ClusterRoleBindingList",
        "Role",
        "RoleList",
        "RoleBinding",
        "RoleBindingList",
        "Service",
        "DaemonSet",
        "Pod",
        "ReplicationController",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Job",
        "CronJob",
        "IngressClass",
        "Ingress",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    INSTALL_ORDER
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(INSTALL_ORDER.len())
}

pub mod build;
pub mod faults;
pub mod images;
pub mod scale;
