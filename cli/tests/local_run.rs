//! `kubeless function run`: a function served from local files with no cluster at all (no
//! kubeconfig either), through the real runtime and this machine's python3 and node; the
//! commands of docs/cli.md's example (`function init`, then `function run`), with a free port.
#![cfg(test)]

use std::{path::Path, process::Stdio, time::Duration};

use tokio::io::{AsyncBufReadExt, BufReader};

fn kubeless(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"));
    // No cluster: a kubeconfig that does not exist proves none is read.
    cmd.current_dir(dir)
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .kill_on_drop(true);
    cmd
}

/// reqwest is built without a default TLS provider (the CLI installs ring); plain HTTP here.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn ok(dir: &Path, args: &[&str]) -> String {
    let out = kubeless(dir).args(args).output().await.unwrap();
    assert!(
        out.status.success(),
        "kubeless {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn fails(dir: &Path, args: &[&str]) -> String {
    let out = kubeless(dir).args(args).output().await.unwrap();
    assert!(!out.status.success(), "kubeless {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts `kubeless function run ARGS --port 0` and returns the child and its base URL.
async fn serve(dir: &Path, args: &[&str]) -> (tokio::process::Child, String) {
    let mut child = kubeless(dir)
        .args(["function", "run"])
        .args(args)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("no banner within 30 s")
        .unwrap()
        .unwrap_or_default();
    assert!(first.starts_with("Serving "), "{first}");
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    // The rest of stdout (the access log) is drained so the server never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

#[tokio::test]
async fn init_then_run_serves_python_and_node_without_a_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let http = http_client();

    ok(dir, &["function", "init", "python3.12", "hello"]).await;
    let (mut py, url) = serve(dir, &["hello.py"]).await;
    let answer = http.post(&url).body("Ada").send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["hello"], "world");
    assert_eq!(body["data"], "Ada");
    py.kill().await.unwrap();

    // A second function file: the folder no longer says which one, --handler does.
    ok(dir, &["function", "init", "nodejs22", "hi"]).await;
    let err = fails(dir, &["function", "run", "--port", "0"]).await;
    assert!(err.contains("2 function files"), "{err}");
    let (mut node, url) = serve(dir, &["--handler", "hi.handler"]).await;
    let body: serde_json::Value = http
        .post(&url)
        .body("Grace")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["data"], "Grace");
    node.kill().await.unwrap();

    let err = fails(dir, &["function", "run", "hello.py", "-r", "go1.19"]).await;
    assert!(err.contains("compile step"), "{err}");
}

#[tokio::test]
async fn run_passes_env_and_reports_broken_code() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("greet.py"),
        "import os\n\ndef hi(event, context):\n    return os.environ['GREETING'] + ' ' + context['function-name']\n",
    )
    .unwrap();
    let (mut child, url) = serve(dir, &["--handler", "greet.hi", "-e", "GREETING=hola"]).await;
    let text = http_client()
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "hola hi");
    child.kill().await.unwrap();

    std::fs::write(
        dir.join("greet.py"),
        "def hi(event, context)\n    return 1\n",
    )
    .unwrap();
    let err = fails(
        dir,
        &["function", "run", "--handler", "greet.hi", "--port", "0"],
    )
    .await;
    assert!(err.contains("Cannot start greet.hi"), "{err}");
}
