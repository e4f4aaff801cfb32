//! Every function in examples/ is deployed with the CLI on devcluster (with the real
//! function-controller and runtime) and called with GET and with a JSON POST. New examples are
//! picked up by themselves: each declares its runtime on its first line (`# runtime: python3.11`,
//! `// runtime: nodejs20`). Also: `function update --wait` returns once the new code answers.
//!
//! Needs the binaries `cargo build -p function-controller -p kubeless-runtime -p devcluster --bins`
//! leaves next to this test's kubeless binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
