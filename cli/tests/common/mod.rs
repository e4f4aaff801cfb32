//! Shared helpers of the CLI integration tests: a devcluster with the Kubeless CRDs, a runner
//! for the real `kubeless` binary, snapshot comparison and a stand-in function deployment.
#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Output,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Service},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub cluster: Option<devcluster::DevCluster>,
    pub kubeconfig: PathBuf,
    pub client: Client,
}

impl Cluster {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cluster = devcluster::DevCluster::start(devcluster::Options::for_tests(dir.path()))
            .await
            .expect("devcluster starts");
        let client = cluster.client().await.unwrap();
        install_crds(&client).await;
        let kubeconfig = cluster.kubeconfig_path().to_path_buf();
        Self {
            dir,
            cluster: Some(cluster),
            kubeconfig,
            client,
        }
    }

    /// Runs `kubeless --kubeconfig <cfg> <args>`.
    pub async fn kubeless(&self, args: &[&str]) -> Output {
        self.kubeless_env(args, &[]).await
    }

    pub async fn kubeless_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd.env_remove("KUBECONFIG")
            .env_remove("KUBELESS_NAMESPACE")
            .env_remove("KUBELESS_CONFIG")
            .env_remove("NATS_URL")
            .env_remove("KAFKA_BROKERS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("kubeless finished in time")
            .expect("kubeless ran")
    }

    /// Runs the command and returns stdout, failing the test when it fails.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.kubeless(args).await;
        assert!(
            out.status.success(),
            "kubeless {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs the command, expects it to fail, and returns stderr.
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.kubeless(args).await;
        assert!(
            !out.status.success(),
            "kubeless {args:?} should have failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    pub async fn shutdown(mut self) {
        if let Some(c) = self.cluster.take() {
            c.shutdown().await;
        }
    }

    /// A stand-in for what the function-controller would create for `name`: a ConfigMap with
    /// the fake runtime, a Deployment running it (image python:3.11 in devcluster's image
    /// map) and a Service with Kubeless's port name. Waits until the proxy reaches it.
    pub async fn fake_function_pods(&self, ns: &str, name: &str) {
        let script = include_str!("../fixtures/fake_function.py");
        let labels = BTreeMap::from([
            ("function".to_string(), name.to_string()),
            ("created-by".to_string(), "kubeless".to_string()),
        ]);
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "server.py".to_string(),
                script.to_string(),
            )])),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        let deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"function": name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [{
                            "name": name,
                            "image": "python:3.11",
                            "command": ["python3", "-u", "/src/server.py"],
                            "env": [{"name": "FUNC_PORT", "value": "8080"}],
                            "ports": [{"containerPort": 8080}],
                            "volumeMounts": [{"name": "src", "mountPath": "/src"}]
                        }],
                        "volumes": [{"name": "src", "configMap": {"name": name}}]
                    }
                }
            }
        }))
        .unwrap();
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {"function": name},
                "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]
            }
        }))
        .unwrap();
        Api::<Service>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
        let path =
            format!("/api/v1/namespaces/{ns}/services/{name}:http-function-port/proxy/healthz");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let req = http::Request::get(&path).body(Vec::new()).unwrap();
            if self.client.request_text(req).await.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "fake function {name} never became reachable"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Installs the Kubeless CRDs and waits until they are served.
pub async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kubeless_api::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    // The new resources are served once discovery knows them.
    let fns: Api<kubeless_api::Function> = Api::default_namespaced(client.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    while fns.list(&ListParams::default()).await.is_err() {
        assert!(Instant::now() < deadline, "CRDs not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Compares `actual` with `tests/snapshots/<name>.txt`; `UPDATE_SNAPSHOTS=1` rewrites it.
pub fn assert_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var("UPDATE_SNAPSHOTS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "snapshot {} missing ({e}); run with UPDATE_SNAPSHOTS=1 to create it. Actual:\n{actual}",
            path.display()
        )
    });
    if expected != actual {
        let mut diff = String::new();
        let (e, a): (Vec<_>, Vec<_>) = (expected.lines().collect(), actual.lines().collect());
        for i in 0..e.len().max(a.len()) {
            let (l, r) = (e.get(i).copied(), a.get(i).copied());
            if l != r {
                diff.push_str(&format!("line {}:\n  - {:?}\n  + {:?}\n", i + 1, l, r));
            }
        }
        panic!("snapshot {name} differs:\n{diff}\nactual:\n{actual}");
    }
}

/// Replaces values that change from run to run (times, uids, versions, ports) in YAML/JSON.
pub fn normalise(text: &str) -> String {
    const KEYS: &[&str] = &[
        "creationTimestamp",
        "resourceVersion",
        "uid",
        "lastTransitionTime",
        "generation",
    ];
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start().trim_start_matches("- ");
            for k in KEYS {
                for (pre, sep) in [(format!("{k}:"), ":"), (format!("\"{k}\":"), ":")] {
                    if trimmed.starts_with(&pre) {
                        let at = line.find(&pre).unwrap_or(0) + pre.len();
                        let comma = if line.trim_end().ends_with(',') {
                            ","
                        } else {
                            ""
                        };
                        let _ = sep;
                        return format!("{} <{k}>{comma}", &line[..at]);
                    }
                }
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A free 127.0.0.1 port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
