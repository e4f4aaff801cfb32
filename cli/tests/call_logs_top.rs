//! `kubeless function call|logs|top` through devcluster's service proxy and pod log API, with
//! a stand-in runtime (tests/fixtures/fake_function.py) in place of the controller's pods.
#![cfg(test)]

mod common;

use std::time::Duration;

use common::{Cluster, assert_snapshot};
use tokio::io::AsyncBufReadExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_logs_and_top() {
    let c = Cluster::start().await;
    c.ok(&[
        "function",
        "deploy",
        "echo",
        "--runtime-image",
        "example/echo:1",
    ])
    .await;
    c.fake_function_pods("default", "echo").await;

    // GET without data.
    let out = c.ok(&["function", "call", "echo"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["method"], "GET");
    assert_eq!(v["headers"]["event-namespace"], "cli.kubeless.io");
    let id = v["headers"]["event-id"].as_str().unwrap();
    assert_eq!(id.len(), 11);
    let time = v["headers"]["event-time"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{time}");

    // POST with JSON (objects and arrays) and with plain text.
    let v: serde_json::Value = serde_json::from_str(
        &c.ok(&["function", "call", "echo", "-d", r#"{"a":1}"#])
            .await,
    )
    .unwrap();
    assert_eq!(v["method"], "POST");
    assert_eq!(v["data"], r#"{"a":1}"#);
    assert_eq!(v["headers"]["content-type"], "application/json");
    assert_eq!(v["headers"]["event-type"], "application/json");
    let v: serde_json::Value =
        serde_json::from_str(&c.ok(&["function", "call", "echo", "--data", "[1,2]"]).await)
            .unwrap();
    assert_eq!(v["headers"]["content-type"], "application/json");
    let v: serde_json::Value =
        serde_json::from_str(&c.ok(&["function", "call", "echo", "-d", "hi"]).await).unwrap();
    assert_eq!(
        v["headers"]["content-type"],
        "application/x-www-form-urlencoded"
    );

    // 408 and 500: a message and a non-zero exit.
    let err = c
        .fails(&["function", "call", "echo", "-d", "timeout"])
        .await;
    assert!(err.contains("Request timeout exceeded"), "{err}");
    let err = c.fails(&["function", "call", "echo", "-d", "fail"]).await;
    assert!(err.contains("HTTP 500") && err.contains("boom"), "{err}");
    let err = c.fails(&["function", "call", "nope"]).await;
    assert!(
        err.contains("Unable to find the service for function nope"),
        "{err}"
    );

    // 1 GET + 5 POSTs so far (timeout and fail counted as failures).
    assert_snapshot("function_top", &c.ok(&["function", "top"]).await);
    assert_snapshot(
        "function_top_one",
        &c.ok(&["function", "stats", "-f", "echo"]).await,
    );
    let rows: serde_json::Value =
        serde_json::from_str(&c.ok(&["function", "top", "-o", "json"]).await).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    assert_eq!(rows[1]["method"], "POST");
    assert_eq!(rows[1]["total_calls"], 5.0);
    assert_eq!(rows[1]["total_failures"], 2.0);
    let yaml = c.ok(&["function", "top", "-o", "yaml"]).await;
    assert!(yaml.contains("method: GET"), "{yaml}");

    // logs: the pod's log, through the pod log API.
    let logs = c.ok(&["function", "logs", "echo"]).await;
    assert!(logs.contains("fake function listening"), "{logs}");
    assert!(logs.contains("POST / 408"), "{logs}");
    let err = c.fails(&["function", "logs", "nope"]).await;
    assert!(err.contains("nope"), "{err}");

    // logs -f: keeps streaming new lines.
    let mut follow = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["function", "logs", "echo", "-f"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    c.ok(&["function", "call", "echo", "-d", "followed"]).await;
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        let mut posts = 0;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("POST / 200") {
                posts += 1;
                // 3 earlier POSTs with 200 plus the one sent after -f started.
                if posts == 4 {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(found.ok(), Some(true), "logs -f did not show the new call");
    follow.kill().await.unwrap();

    // logs --since: only the lines written in the last 2 seconds (the pod log API's
    // sinceSeconds, which devcluster answers from the times the lines were written).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    c.ok(&["function", "call", "echo", "-d", "recent"]).await;
    let recent = c.ok(&["function", "logs", "echo", "--since", "2s"]).await;
    assert_eq!(recent.matches("POST / 200").count(), 1, "{recent}");
    assert!(!recent.contains("fake function listening"), "{recent}");
    let all = c.ok(&["function", "logs", "echo", "--since", "1h"]).await;
    assert_eq!(all.matches("POST / 200").count(), 5, "{all}");
    c.shutdown().await;
}
