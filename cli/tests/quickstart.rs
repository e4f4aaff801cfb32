//! Walks docs/quickstart.md: every ```bash block, in order, exactly as written, in one bash
//! from the repository root. Needs kubectl and the tansu broker (`scripts/lib.sh`'s
//! ensure_tools installs both).
#![cfg(test)]

use std::{path::Path, process::Stdio, time::Duration};

/// The ```bash blocks of a markdown text, in order.
pub fn bash_blocks(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```bash") => current = Some(String::new()),
            (Some(block), "```") => {
                out.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

#[test]
fn blocks_are_found_in_order() {
    let md = "text\n```bash\na\nb\n```\n```text\nno\n```\n```bash\nc\n```\n";
    assert_eq!(bash_blocks(md), vec!["a\nb\n", "c\n"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let doc = std::fs::read_to_string(root.join("docs/quickstart.md")).unwrap();
    let blocks = bash_blocks(&doc);
    assert!(blocks.len() >= 6, "{blocks:?}");
    assert!(
        which("kubectl"),
        "kubectl is missing: apt-get install kubernetes-client (scripts/lib.sh ensure_tools)"
    );
    // Whatever happens, the background processes the walk-through started are stopped.
    let script = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{}",
        blocks.join("")
    );
    let target = Path::new(env!("CARGO_BIN_EXE_kubeless"))
        .parent()
        .and_then(Path::parent)
        .unwrap();
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("KUBECONFIG")
        .env_remove("KAFKA_BROKERS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(1200), cmd.output())
        .await
        .expect("the quickstart finished within 20 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the quickstart failed:\n{stdout}\n{stderr}"
    );
    // Step 4's answer, as the page shows it.
    let answer = stdout
        .lines()
        .find(|l| l.starts_with("{\"hello\""))
        .unwrap_or_else(|| panic!("no answer in:\n{stdout}"));
    let v: serde_json::Value = serde_json::from_str(answer).unwrap();
    assert_eq!(v["data"]["greeting"], "hi");
    // Step 5: the Kafka record reached the function (two POST calls).
    let top = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" POST "))
        .unwrap_or_else(|| panic!("no top row in:\n{stdout}"));
    let calls: Vec<&str> = top.split_whitespace().collect();
    assert_eq!(calls[3], "2", "{top}");
}

fn which(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).exists()))
}
