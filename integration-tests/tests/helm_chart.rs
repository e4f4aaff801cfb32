//! The umbrella chart, linted and rendered by the real Helm engine (deploy/helm/render.py, through
//! helm-python-sdk): every values case renders, every rendered object parses as its Kubernetes
//! type, a disabled subchart renders nothing, and the chart's CRDs are the generated ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, fs, process::Command};

use integration_tests::{repo_root, yaml_documents};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        autoscaling::v2::HorizontalPodAutoscaler,
        core::v1::{ConfigMap, Service, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};

fn parse_as_kind(doc: &serde_json::Value) -> Result<(), String> {
    let kind = doc["kind"].as_str().ok_or("object without kind")?;
    let v = doc.clone();
    let res = match kind {
        "Deployment" => serde_json::from_value::<Deployment>(v).map(drop),
        "Service" => serde_json::from_value::<Service>(v).map(drop),
        "ServiceAccount" => serde_json::from_value::<ServiceAccount>(v).map(drop),
        "ConfigMap" => serde_json::from_value::<ConfigMap>(v).map(drop),
        "ClusterRole" => serde_json::from_value::<ClusterRole>(v).map(drop),
        "ClusterRoleBinding" => serde_json::from_value::<ClusterRoleBinding>(v).map(drop),
        "Role" => serde_json::from_value::<Role>(v).map(drop),
        "RoleBinding" => serde_json::from_value::<RoleBinding>(v).map(drop),
        "HorizontalPodAutoscaler" => serde_json::from_value::<HorizontalPodAutoscaler>(v).map(drop),
        "CustomResourceDefinition" => {
            serde_json::from_value::<CustomResourceDefinition>(v).map(drop)
        }
        other => return Err(format!("kind {other} has no parser in this test: add one")),
    };
    res.map_err(|e| format!("{kind}: {e}"))
}

#[test]
fn chart_lints_renders_and_parses() {
    let out = tempfile_dir();
    let script = repo_root().join("deploy/helm/render.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(&out)
        .output()
        .expect("python3 must be installed");
    assert!(
        output.status.success(),
        "deploy/helm/render.py failed (needs `pip install helm-python-sdk pyyaml`, which scripts/test.sh does):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let values: serde_json::Value = serde_yaml::from_str(
        &fs::read_to_string(repo_root().join("deploy/helm/kubeless/values.yaml")).unwrap(),
    )
    .unwrap();
    let services: Vec<String> = values
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.get("enabled").is_some())
        .map(|(k, _)| k.clone())
        .collect();
    assert!(services.len() >= 6, "values.yaml lists every service");
    let subcharts: BTreeSet<String> = fs::read_dir(repo_root().join("deploy/helm/kubeless/charts"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "common")
        .collect();

    for case in std::iter::once("all-on".to_string())
        .chain(std::iter::once("all-off".to_string()))
        .chain(services.iter().map(|s| format!("only-{s}")))
    {
        let text = fs::read_to_string(out.join(format!("{case}.yaml"))).unwrap();
        let docs = yaml_documents(&text).unwrap();
        let mut apps = BTreeSet::new();
        for doc in &docs {
            parse_as_kind(doc).unwrap_or_else(|e| panic!("case {case}: {e}"));
            if let Some(app) = doc["metadata"]["labels"]["app.kubernetes.io/name"].as_str() {
                apps.insert(app.to_string());
            }
        }
        let expected: BTreeSet<String> = match case.as_str() {
            "all-on" => subcharts.clone(),
            "all-off" => BTreeSet::new(),
            only => subcharts
                .iter()
                .filter(|s| only == format!("only-{s}"))
                .cloned()
                .collect(),
        };
        assert_eq!(apps, expected, "case {case}: services rendered");
        for app in &expected {
            let kinds: BTreeSet<&str> = docs
                .iter()
                .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/name"] == app.as_str())
                .filter_map(|d| d["kind"].as_str())
                .collect();
            for needed in ["Deployment", "ServiceAccount"] {
                assert!(
                    kinds.contains(needed),
                    "case {case}: {app} renders a {needed}"
                );
            }
        }
    }

    // The chart ships exactly the generated CRDs.
    let chart_crds = yaml_documents(&fs::read_to_string(out.join("crds.yaml")).unwrap()).unwrap();
    let mut generated = Vec::new();
    let mut files: Vec<_> = fs::read_dir(repo_root().join("deploy/crds"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        generated.extend(yaml_documents(&fs::read_to_string(f).unwrap()).unwrap());
    }
    assert_eq!(generated.len(), 6, "six generated CRDs in deploy/crds");
    assert_eq!(
        chart_crds, generated,
        "deploy/helm/kubeless/crds differs from deploy/crds: run `cargo run -p kubeless-api --bin crdgen`"
    );
    for crd in &chart_crds {
        parse_as_kind(crd).unwrap();
    }
    let _ = fs::remove_dir_all(&out);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kubeless-helm-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}
