#![cfg(test)]
//! Stock kubectl into a pod the runner started: `kubectl exec` runs the command
//! with the container's env and working directory and returns its exit code.

use devcluster::{DevCluster, Options};
use kubeless_testkit::{kubectl, output_text as text};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: box}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo started; exec sleep 600"]
    env: [{name: GREETING, value: from-the-pod}]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_exec_into_a_runner_pod() {
    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()))
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    let (exit, env, missing) = tokio::task::spawn_blocking(move || {
        let applied = kubectl(&kc, &["apply", "-f", "-"], Some(POD));
        assert!(applied.status.success(), "{}", text(&applied));
        let ready = kubectl(
            &kc,
            &["wait", "--for=condition=Ready", "pod/box", "--timeout=30s"],
            None,
        );
        assert!(ready.status.success(), "{}", text(&ready));
        let exit = kubectl(
            &kc,
            &["exec", "box", "--", "sh", "-c", "echo hi; exit 3"],
            None,
        );
        let env = kubectl(
            &kc,
            &["exec", "box", "--", "sh", "-c", "echo $GREETING; pwd"],
            None,
        );
        let stopped = kubectl(&kc, &["exec", "box", "-c", "nope", "--", "true"], None);
        (exit, env, stopped)
    })
    .await
    .unwrap();
    assert_eq!(exit.status.code(), Some(3), "{}", text(&exit));
    assert_eq!(
        String::from_utf8_lossy(&exit.stdout),
        "hi\n",
        "{}",
        text(&exit)
    );
    assert!(env.status.success(), "{}", text(&env));
    let out = String::from_utf8_lossy(&env.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("from-the-pod"), "{}", text(&env));
    // The container's working directory: its pod folder, `{state}/pods/{ns}/{pod}-{uid}`.
    let cwd = lines.next().unwrap_or_default();
    assert!(cwd.contains("/pods/default/box-"), "{}", text(&env));
    assert!(!missing.status.success(), "{}", text(&missing));
    cluster.shutdown().await;
}
