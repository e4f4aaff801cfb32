//! `devcluster up` with its defaults, run from a fresh directory as the README says: the
//! default (relative) state directory must work for pods that mount volumes.
#![cfg(test)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use common::Cluster;
use tokio::io::AsyncBufReadExt;

/// The devcluster binary next to the kubeless one (`cargo build -p devcluster --bins`).
pub fn devcluster_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_kubeless"))
        .parent()
        .unwrap()
        .join("devcluster");
    assert!(
        bin.exists(),
        "{} is missing: build it first with `cargo build -p devcluster --bins`",
        bin.display()
    );
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_up_with_default_state_dir_runs_functions() {
    let cwd = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(devcluster_bin())
        .arg("up")
        .current_dir(cwd.path())
        .env_remove("DEVCLUSTER_STATE_DIR")
        .env_remove("DEVCLUSTER_KUBECONFIG")
        .env_remove("DEVCLUSTER_DATA_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let kubeconfig = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("devcluster printed its kubeconfig in time")
        .unwrap()
        .expect("a kubeconfig line");
    let kubeconfig = PathBuf::from(kubeconfig);
    // The path printed is absolute and inside the default state dir of the current directory.
    assert!(kubeconfig.is_absolute(), "{}", kubeconfig.display());
    assert_eq!(
        kubeconfig.canonicalize().unwrap(),
        cwd.path()
            .canonicalize()
            .unwrap()
            .join(".devcluster/kubeconfig")
    );

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    common::install_crds(&client).await;
    let c = Cluster {
        dir: tempfile::tempdir().unwrap(),
        cluster: None,
        kubeconfig: kubeconfig.clone(),
        client,
    };
    // A function pod mounting its code from a ConfigMap volume answers through the proxy.
    c.ok(&[
        "function",
        "deploy",
        "echo",
        "--runtime-image",
        "example/echo:1",
        "--no-wait",
    ])
    .await;
    c.fake_function_pods("default", "echo").await;
    let out = c.ok(&["function", "call", "echo", "--data", "hi"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"], "hi");
    child.kill().await.unwrap();
}
