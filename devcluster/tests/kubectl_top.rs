//! Stock `kubectl top pod` and `kubectl top node` against the `metrics.k8s.io` API the
//! runner's measurements feed: a pod that holds 40 MiB and spins a CPU shows them.
#![cfg(test)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Options};
use kubeless_testkit::output_text as text;

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    kubeless_testkit::kubectl(kubeconfig, args, None)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burner, labels: {app: burner}}
spec:
  containers:
  - name: main
    image: python:3
    command: ["python3", "-c", "b = b'a' * (40 * 1024 * 1024)\nwhile True:\n    pass\n"]
"#;

/// `kubectl top` until it succeeds (a pod has metrics after its second sample).
fn top_until_ok(kc: &Path, args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let out = kubectl(kc, args);
        if out.status.success() || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// "250m" -> 250, "1" -> 1000 (kubectl top prints millicores).
fn millicores(s: &str) -> u64 {
    s.strip_suffix('m')
        .map(|m| m.parse().unwrap())
        .unwrap_or_else(|| s.parse::<u64>().unwrap() * 1000)
}

/// "41Mi" -> 41
fn mebibytes(s: &str) -> u64 {
    s.strip_suffix("Mi").unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_top_pod_and_node_show_measured_usage() {
    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()))
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut apply = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        apply
            .stdin
            .take()
            .unwrap()
            .write_all(POD.as_bytes())
            .unwrap();
        let applied = apply.wait_with_output().unwrap();
        assert!(applied.status.success(), "{}", text(&applied));

        // Discovery lists the group, as with metrics-server installed.
        let versions = kubectl(&kc, &["api-versions"]);
        assert!(
            stdout(&versions).contains("metrics.k8s.io/v1beta1"),
            "{}",
            text(&versions)
        );

        let top = top_until_ok(&kc, &["top", "pod", "burner", "--no-headers"]);
        assert!(top.status.success(), "{}", text(&top));
        let line = stdout(&top);
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], "burner", "{line}");
        // Spinning takes most of a CPU; the 40 MiB string is resident.
        assert!(millicores(cols[1]) >= 200, "cpu {line}");
        assert!(mebibytes(cols[2]) >= 40, "memory {line}");

        let containers = kubectl(&kc, &["top", "pod", "--containers", "-l", "app=burner"]);
        assert!(
            stdout(&containers).contains("burner   main"),
            "{}",
            text(&containers)
        );
        let all = kubectl(&kc, &["top", "pod", "--all-namespaces", "--no-headers"]);
        assert!(
            stdout(&all)
                .lines()
                .any(|l| l.starts_with("default ") && l.contains("burner")),
            "{}",
            text(&all)
        );
        let none = kubectl(&kc, &["top", "pod", "-l", "app=nothing"]);
        assert!(
            String::from_utf8_lossy(&none.stderr).contains("No resources found"),
            "{}",
            text(&none)
        );
        let missing = kubectl(&kc, &["top", "pod", "nosuch"]);
        assert!(!missing.status.success(), "{}", text(&missing));
        assert!(
            String::from_utf8_lossy(&missing.stderr).contains("not found"),
            "{}",
            text(&missing)
        );

        // The raw object, as metrics-server writes it.
        let raw = kubectl(
            &kc,
            &[
                "get",
                "--raw",
                "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burner",
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
        assert_eq!(v["kind"], "PodMetrics");
        assert_eq!(v["metadata"]["labels"]["app"], "burner");
        assert!(
            v["containers"][0]["usage"]["cpu"]
                .as_str()
                .unwrap()
                .ends_with('n'),
            "{v}"
        );

        let node = top_until_ok(&kc, &["top", "node", "--no-headers"]);
        assert!(node.status.success(), "{}", text(&node));
        let line = stdout(&node);
        let cols: Vec<&str> = line.split_whitespace().collect();
        // NAME CPU(cores) CPU% MEMORY(bytes) MEMORY%: percentages from the Node's
        // allocatable resources.
        assert_eq!(cols.len(), 5, "{line}");
        assert_eq!(cols[0], "devcluster");
        assert!(millicores(cols[1]) >= 200, "node cpu {line}");
        assert!(cols[2].ends_with('%') && cols[4].ends_with('%'), "{line}");
        assert!(mebibytes(cols[3]) >= 40, "node memory {line}");
        let nodes = kubectl(&kc, &["get", "nodes", "--no-headers"]);
        assert!(stdout(&nodes).starts_with("devcluster"), "{}", text(&nodes));

        let deleted = kubectl(&kc, &["delete", "pod", "burner", "--wait=false"]);
        assert!(deleted.status.success(), "{}", text(&deleted));
    })
    .await
    .unwrap();
    cluster.shutdown().await;
}
