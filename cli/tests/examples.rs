//! Every function in examples/ is deployed with the CLI on devcluster (with the real
//! function-controller and runtime) and called with GET and with a JSON POST. New examples are
//! picked up by themselves: each declares its runtime on its first line (`# runtime: python3.11`,
//! `// runtime: nodejs20`). Also: `function update --wait` returns once the new code answers.
//!
//! Needs the binaries `cargo build -p function-controller -p kubeless-runtime -p devcluster --bins`
//! leaves next to this test's kubeless binary.
#![cfg(test)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use common::Cluster;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A sibling binary of kubeless in the target dir.
fn bin(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_kubeless"))
        .parent()
        .unwrap()
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build -p {name} --bins`",
        p.display()
    );
    p
}

/// `(file, runtime, handler)` of every example function, from its `runtime:` header line.
pub fn example_functions() -> Vec<(PathBuf, String, String)> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_stem().and_then(|s| s.to_str()) == Some("hello"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap_or("");
        let runtime = first
            .split_once("runtime:")
            .map(|(_, r)| r.trim().to_string())
            .unwrap_or_else(|| {
                panic!(
                    "{}: the first line must name the runtime, e.g. `# runtime: python3.11`",
                    path.display()
                )
            });
        out.push((path, runtime, "hello.handler".to_string()));
    }
    out
}

/// devcluster with the CRDs and the `kubeless` namespace, and the function-controller.
pub async fn cluster_with_controller() -> (Cluster, tokio::process::Child) {
    let c = Cluster::start().await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kubeless"}})).unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(c.client.clone())
        .create(&Default::default(), &ns)
        .await
        .unwrap();
    let log = std::fs::File::create(c.dir.path().join("function-controller.log")).unwrap();
    let controller = tokio::process::Command::new(bin("function-controller"))
        .env("KUBECONFIG", &c.kubeconfig)
        .env_remove("KUBELESS_ADMIN_ADDR")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    (c, controller)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_deploys_and_answers() {
    bin("kubeless-runtime");
    let examples = example_functions();
    assert!(examples.len() >= 2, "{examples:?}");
    let (c, mut controller) = cluster_with_controller().await;
    for (path, runtime, handler) in &examples {
        let ext = path.extension().unwrap().to_str().unwrap();
        let name = format!("hello-{ext}");
        let file = path.to_str().unwrap();
        c.ok(&[
            "function",
            "deploy",
            &name,
            "--runtime",
            runtime,
            "--handler",
            handler,
            "--from-file",
            file,
            "--wait",
            "--wait-timeout",
            "240",
        ])
        .await;
        // GET: no data.
        let out = c.ok(&["function", "call", &name]).await;
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{}: GET answer is not JSON ({e}): {out}", path.display()));
        assert!(
            v["hello"].as_str().is_some_and(|h| h.starts_with("from ")),
            "{out}"
        );
        // Kubeless's context["function-name"] is the handler's function name.
        assert_eq!(v["function"], "handler", "{out}");
        // POST with JSON: echoed back as JSON.
        let out = c
            .ok(&["function", "call", &name, "--data", r#"{"greeting": "hi"}"#])
            .await;
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["data"]["greeting"], "hi", "{}: {out}", path.display());
        // POST with text.
        let out = c.ok(&["function", "call", &name, "--data", "plain"]).await;
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["data"], "plain", "{}: {out}", path.display());
    }

    // update --wait: when it says ready, the new code answers (not the old pod).
    let (first, runtime, handler) = examples
        .iter()
        .find(|(p, _, _)| p.extension().is_some_and(|e| e == "py"))
        .unwrap();
    let v2 = std::fs::read_to_string(first)
        .unwrap()
        .replace("from python", "from python v2");
    let v2_path = c.dir.path().join("hello.py");
    std::fs::write(&v2_path, v2).unwrap();
    c.ok(&[
        "function",
        "update",
        "hello-py",
        "--runtime",
        runtime,
        "--handler",
        handler,
        "--from-file",
        v2_path.to_str().unwrap(),
        "--wait",
        "--wait-timeout",
        "240",
    ])
    .await;
    let out = c.ok(&["function", "call", "hello-py"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["hello"], "from python v2", "the old code answered: {out}");

    controller.kill().await.unwrap();
    c.shutdown().await;
}

/// `(file, handler, Kubeless runtime id)` of the functions in examples/kubeless.
const KUBELESS_EXAMPLES: &[(&str, &str, &str)] = &[
    ("helloget.py", "helloget.foo", "python2.7"),
    ("hellowithdata.py", "hellowithdata.handler", "python3.7"),
    ("helloget.js", "helloget.foo", "nodejs8"),
    ("hellowithdata.js", "hellowithdata.handler", "nodejs12"),
];

const TABLE_START: &str = "<!-- migration-table:start (written by cli/tests/examples.rs) -->\n";
const TABLE_END: &str = "<!-- migration-table:end -->";

/// One line of a `kubeless` failure: the FATA line without its prefix.
fn fatal_line(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("FATA: "))
        .unwrap_or(stderr.trim())
        .to_string()
}

/// Deploys every Kubeless-style example unchanged, then with the runtime we run, calls it, and
/// checks that docs/migration.md's table is the one this run produced (`UPDATE_DOCS=1`
/// rewrites it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeless_examples_migration_table() {
    bin("kubeless-runtime");
    let (c, mut controller) = cluster_with_controller().await;
    let dir = repo_root().join("examples/kubeless");
    let mut table = String::from(
        "| example | Kubeless runtime | deployed unchanged | runtime to use | GET answer | POST `{\"a\":1}` answer |\n|---|---|---|---|---|---|\n",
    );
    for (i, (file, handler, old)) in KUBELESS_EXAMPLES.iter().enumerate() {
        let path = dir.join(file);
        let path = path.to_str().unwrap();
        let name = format!("kl-{i}");
        let out = c
            .kubeless(&[
                "function",
                "deploy",
                &name,
                "--runtime",
                old,
                "--handler",
                handler,
                "--from-file",
                path,
                "--no-wait",
            ])
            .await;
        assert!(!out.status.success(), "{file} with {old} was accepted");
        let refusal = fatal_line(&String::from_utf8_lossy(&out.stderr));
        let new = kubeless_api::legacy::replacement(old).unwrap();
        assert!(
            refusal.contains(&format!("Use --runtime {new}")),
            "{refusal}"
        );
        c.ok(&[
            "function",
            "deploy",
            &name,
            "--runtime",
            new,
            "--handler",
            handler,
            "--from-file",
            path,
            "--wait",
            "--wait-timeout",
            "240",
        ])
        .await;
        let get = c.ok(&["function", "call", &name]).await;
        let post = c
            .ok(&["function", "call", &name, "--data", r#"{"a":1}"#])
            .await;
        table.push_str(&format!(
            "| [{file}](../examples/kubeless/{file}) | `{old}` | refused: \"{refusal}\" | `{new}` | `{}` | `{}` |\n",
            get.trim(),
            post.trim()
        ));
    }
    // A Function manifest with a Kubeless runtime, applied as kubectl would: the controller
    // refuses it in the Ready condition with the same replacement.
    let manifest = r#"{"apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": "kl-manifest"},
        "spec": {"runtime": "python3.8", "handler": "helloget.foo",
                 "function": "def foo(event, context):\n    return 'hello world'\n",
                 "function-content-type": "text", "deps": ""}}"#;
    let manifest_path = c.dir.path().join("kl-manifest.json");
    std::fs::write(&manifest_path, manifest).unwrap();
    c.ok(&["apply", "-f", manifest_path.to_str().unwrap()])
        .await;
    let fns: kube::Api<kubeless_api::Function> = kube::Api::default_namespaced(c.client.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let message = loop {
        let f = fns.get("kl-manifest").await.unwrap();
        if let Some(cond) = f
            .status
            .as_ref()
            .and_then(|s| kubeless_api::find_condition(&s.conditions, "Ready"))
            .filter(|c| c.reason.as_deref() == Some("UnknownRuntime"))
        {
            break cond.message.clone().unwrap_or_default();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no UnknownRuntime condition"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert!(
        message.contains("set the runtime to python3.11"),
        "{message}"
    );
    table.push_str(&format!(
        "| a Function manifest with `runtime: python3.8` (kubectl or `kubeless apply`) | `python3.8` | Ready=False, reason UnknownRuntime: \"{message}\" | `python3.11` | | |\n"
    ));
    controller.kill().await.unwrap();
    c.shutdown().await;

    let doc_path = repo_root().join("docs/migration.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let start = doc
        .find(TABLE_START)
        .expect("docs/migration.md has the table start marker")
        + TABLE_START.len();
    let end = doc
        .find(TABLE_END)
        .expect("docs/migration.md has the table end marker");
    if std::env::var("UPDATE_DOCS").is_ok_and(|v| v == "1") {
        let new_doc = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&doc_path, new_doc).unwrap();
        return;
    }
    assert_eq!(
        &doc[start..end],
        table,
        "docs/migration.md's table is not what this run produced; rerun with UPDATE_DOCS=1"
    );
}
