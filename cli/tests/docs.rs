//! The docs stay true: every Kubeless manifest shown in docs/ applies to devcluster (whose CRD
//! schemas are the real ones), every condition reason is explained in docs/troubleshooting.md,
//! and docs/configuration.md holds each service's current `--help`.
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};

use common::Cluster;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The ```yaml blocks of a markdown text.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_manifest_in_docs_applies() {
    let c = Cluster::start().await;
    let mut applied = 0;
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (i, block) in yaml_blocks(&text).into_iter().enumerate() {
            // Fragments (a field shown alone) have no apiVersion; manifests do.
            if !block.contains("apiVersion: kubeless.io/") {
                continue;
            }
            let file = c.dir.path().join(format!(
                "{}-{i}.yaml",
                doc.file_stem().unwrap().to_string_lossy()
            ));
            std::fs::write(&file, &block).unwrap();
            let out = c.kubeless(&["apply", "-f", file.to_str().unwrap()]).await;
            assert!(
                out.status.success(),
                "{} block {i} does not apply: {}\n{block}",
                doc.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            applied += 1;
        }
    }
    assert!(applied >= 1, "no manifest found in docs/");
    c.shutdown().await;
}

#[test]
fn every_condition_reason_is_explained() {
    let src = std::fs::read_to_string(repo_root().join("shared/api/src/conditions.rs")).unwrap();
    let page = std::fs::read_to_string(repo_root().join("docs/troubleshooting.md")).unwrap();
    let reasons: Vec<&str> = src
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once("= \"").map(|(_, v)| v.trim_end_matches("\";")))
        .filter(|r| !matches!(*r, "Ready" | "True" | "False" | "Unknown"))
        .collect();
    assert!(reasons.len() >= 10, "{reasons:?}");
    for r in reasons {
        assert!(
            page.contains(&format!("| `{r}` |")),
            "docs/troubleshooting.md does not explain reason {r}"
        );
    }
}

/// The services whose `--help` docs/configuration.md carries.
const SERVICES: &[(&str, &[&str])] = &[
    ("function-controller", &[]),
    ("http-trigger-controller", &[]),
    ("cronjob-trigger-controller", &[]),
    ("kafka-trigger", &[]),
    ("nats-trigger", &[]),
    ("kinesis-trigger", &[]),
    ("redis-trigger", &[]),
    ("kubeless-builder", &["push"]),
    ("devcluster", &["up"]),
];

const START: &str = "<!-- help:start (written by cli/tests/docs.rs) -->\n";
const END: &str = "<!-- help:end -->";

#[test]
fn configuration_reference_is_current() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_kubeless")).parent().unwrap();
    let mut generated = String::new();
    for (service, sub) in SERVICES {
        let bin = bin_dir.join(service);
        assert!(
            bin.exists(),
            "{} is missing: `cargo build --workspace --bins` first (scripts/test.sh does)",
            bin.display()
        );
        // A clean environment, so no env value leaks into the `[env: X=...]` notes.
        let out = std::process::Command::new(&bin)
            .args(*sub)
            .arg("--help")
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success(), "{service} --help failed");
        let help = String::from_utf8(out.stdout).unwrap();
        let title = if sub.is_empty() {
            service.to_string()
        } else {
            format!("{service} {}", sub.join(" "))
        };
        generated.push_str(&format!(
            "### {title}\n\n```text\n{}\n```\n\n",
            help.trim_end()
        ));
    }
    let path = repo_root().join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(START).expect("start marker") + START.len();
    let end = doc.find(END).expect("end marker");
    if std::env::var("UPDATE_DOCS").is_ok_and(|v| v == "1") {
        std::fs::write(
            &path,
            format!("{}{generated}{}", &doc[..start], &doc[end..]),
        )
        .unwrap();
        return;
    }
    assert_eq!(
        &doc[start..end],
        generated,
        "docs/configuration.md is stale: rerun with UPDATE_DOCS=1 after building every binary"
    );
}

#[test]
fn metrics_reference_lists_every_documented_metric() {
    let reference = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    for entry in std::fs::read_dir(repo_root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") || path.ends_with("metrics.md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let metric = word.starts_with("kubeless_")
                && [
                    "_total",
                    "_seconds",
                    "_lag",
                    "_in_flight",
                    "_consumers",
                    "_subscriptions",
                    "_shards",
                    "_is_leader",
                    "_latest",
                ]
                .iter()
                .any(|s| word.ends_with(s));
            if metric {
                assert!(
                    reference.contains(&format!("`{word}`")),
                    "{} names {word}, which docs/metrics.md does not list",
                    path.display()
                );
            }
        }
    }
}
