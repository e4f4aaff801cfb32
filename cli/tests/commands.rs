//! The commands a user of today's tools expects (issue 18): `function init`, `apply -f`,
//! `call --method --header -i --data @file|-`, `logs --tail`, `top --watch`, `version`.
#![cfg(test)]

mod common;

use std::{process::Stdio, time::Duration};

use common::Cluster;
use kube::Api;
use kubeless_api::{CronJobTrigger, Function, HttpTrigger};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_apply_and_version() {
    let c = Cluster::start().await;
    let dir = c.dir.path().join("work");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();

    // init writes code, dependency file and manifest; it needs no cluster.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .args(["function", "init", "python3.11", "greet", "--dir", d])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let code = std::fs::read_to_string(dir.join("greet.py")).unwrap();
    assert!(code.contains("def handler(event, context)"));
    assert!(dir.join("requirements.txt").exists());
    assert!(String::from_utf8_lossy(&out.stdout).contains("kubeless apply -f"));
    let again = c
        .fails(&["function", "init", "python3.11", "greet", "--dir", d])
        .await;
    assert!(again.contains("exists already"), "{again}");
    let err = c
        .fails(&["function", "init", "cobol85", "x", "--dir", d])
        .await;
    assert!(err.contains("knows python* and nodejs*"), "{err}");

    // apply -f FILE: the Function the manifest describes, with the code inline.
    let manifest = dir.join("greet.yaml");
    let out = c.ok(&["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(
        out.contains("Function greet applied in namespace default"),
        "{out}"
    );
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    let f = fns.get("greet").await.unwrap();
    assert_eq!(f.spec.runtime.as_deref(), Some("python3.11"));
    assert_eq!(f.spec.handler.as_deref(), Some("greet.handler"));
    assert_eq!(f.spec.function.as_deref(), Some(code.as_str()));

    // apply -f DIR: every manifest of the folder, triggers included; applying twice is fine.
    let triggers = c.dir.path().join("manifests");
    std::fs::create_dir(&triggers).unwrap();
    std::fs::copy(&manifest, triggers.join("a-function.yaml")).unwrap();
    std::fs::write(
        triggers.join("b-triggers.yaml"),
        "apiVersion: kubeless.io/v1beta1\nkind: HTTPTrigger\nmetadata:\n  name: greet\nspec:\n  function-name: greet\n  host-name: greet.example.com\n---\napiVersion: kubeless.io/v1beta1\nkind: CronJobTrigger\nmetadata:\n  name: greet-tick\nspec:\n  function-name: greet\n  schedule: \"*/5 * * * *\"\n",
    )
    .unwrap();
    std::fs::write(triggers.join("notes.txt"), "not a manifest").unwrap();
    for _ in 0..2 {
        let out = c.ok(&["apply", "-f", triggers.to_str().unwrap()]).await;
        assert_eq!(out.lines().count(), 3, "{out}");
    }
    let http: Api<HttpTrigger> = Api::default_namespaced(c.client.clone());
    assert_eq!(
        http.get("greet").await.unwrap().spec.host_name.as_deref(),
        Some("greet.example.com")
    );
    let cron: Api<CronJobTrigger> = Api::default_namespaced(c.client.clone());
    assert_eq!(
        cron.get("greet-tick").await.unwrap().spec.schedule,
        "*/5 * * * *"
    );

    // Kinds kubeless does not apply are refused before anything is sent.
    let bad = c.dir.path().join("deployment.yaml");
    std::fs::write(
        &bad,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
    )
    .unwrap();
    let err = c.fails(&["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(err.contains("use kubectl apply for it"), "{err}");

    // version: this command, the server and the CRD.
    let v = c.ok(&["version"]).await;
    assert!(
        v.starts_with(&format!(
            "Kubeless version: {}\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{v}"
    );
    assert!(v.contains("Kubernetes server: v"), "{v}");
    assert!(v.contains("Function CRD: kubeless.io v1beta1"), "{v}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_options_logs_tail_and_top_watch() {
    let c = Cluster::start().await;
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

    // --data @file sends the file's content; -H adds headers; --method overrides.
    let event = c.dir.path().join("event.json");
    std::fs::write(&event, r#"{"from": "file"}"#).unwrap();
    let at = format!("@{}", event.display());
    let out = c
        .ok(&[
            "function",
            "call",
            "echo",
            "--data",
            &at,
            "-H",
            "event-namespace: mine",
            "--method",
            "put",
        ])
        .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["method"], "PUT");
    assert_eq!(v["data"], r#"{"from": "file"}"#);
    assert_eq!(v["headers"]["content-type"], "application/json");
    assert_eq!(v["headers"]["event-namespace"], "mine");

    // --data - reads stdin; -i prints the status line and headers first.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["function", "call", "echo", "--data", "-", "-i"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"from stdin").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(text.starts_with("HTTP/1.1 200 OK\n"), "{text}");
    let (head, body) = text.split_once("\n\n").unwrap();
    assert!(
        head.to_ascii_lowercase().contains("content-length:"),
        "{head}"
    );
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["data"], "from stdin");
    assert_eq!(v["method"], "POST");

    // logs --tail: only the last lines.
    let all = c.ok(&["function", "logs", "echo"]).await;
    assert!(all.lines().count() > 2, "{all}");
    let tail = c.ok(&["function", "logs", "echo", "--tail", "1"]).await;
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert_eq!(tail.lines().next(), all.lines().last());
    let err = c
        .fails(&["function", "logs", "echo", "--since", "soon"])
        .await;
    assert!(err.contains("Invalid --since \"soon\""), "{err}");

    // top --watch prints a fresh table every interval until stopped.
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["function", "top", "--watch", "--interval", "1"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let tables = tokio::time::timeout(Duration::from_secs(60), async {
        let mut headers = 0;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("NAME") {
                headers += 1;
                if headers == 2 {
                    break;
                }
            }
        }
        headers
    })
    .await
    .expect("two tables within 60 s");
    assert_eq!(tables, 2);
    watch.kill().await.unwrap();
    c.shutdown().await;
}
