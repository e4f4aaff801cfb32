//! Stock `kubectl attach` to pods the runner started: the output from the moment of
//! attach until the container stops, stdin to a `stdin: true` container, and the real
//! errors for a missing pod, a stopped container and stdin where there is none.
#![cfg(test)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use devcluster::{DevCluster, Options};
use kubeless_testkit::{kubectl_cmd, output_text as text};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    kubeless_testkit::kubectl(kubeconfig, args, None)
}

fn apply(kubeconfig: &Path, yaml: &str) {
    let out = kubeless_testkit::kubectl(kubeconfig, &["apply", "-f", "-"], Some(yaml));
    assert!(out.status.success(), "{}", text(&out));
}

fn wait_for(kc: &Path, pod: &str, condition: &str) {
    let ready = kubectl(
        kc,
        &["wait", condition, &format!("pod/{pod}"), "--timeout=30s"],
    );
    assert!(ready.status.success(), "{}", text(&ready));
}

const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: ticker}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo before-attach; sleep 2; i=0; while [ $i -lt 600 ]; do echo tick $i; i=$((i+1)); sleep 0.2; done"]
  - name: done
    image: busybox
    command: ["sh", "-c", "exit 0"]
---
apiVersion: v1
kind: Pod
metadata: {name: short}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "sleep 5; echo to-stdout; echo to-stderr >&2; exit 0"]
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    stdin: true
    stdinOnce: true
    command: ["sh", "-c", "while read l; do echo got $l; done; echo eof"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_attach_follows_a_runner_pod() {
    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()))
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        apply(&kc, PODS);
        // `short` ends on its own: attach returns when its container stops. kubectl attaches
        // to a pod at once, without waiting for it to run (a real cluster refuses a container
        // that has not started), so wait for it to run first, as a user would.
        wait_for(&kc, "short", "--for=jsonpath={.status.phase}=Running");
        let short = kubectl_cmd(&kc, &["attach", "short"]).spawn().unwrap();
        let ticker_ready = {
            let kc = kc.clone();
            // Running but never Ready: its `done` container exits at once.
            std::thread::spawn(move || {
                wait_for(&kc, "ticker", "--for=jsonpath={.status.phase}=Running");
                wait_for(
                    &kc,
                    "ticker",
                    r#"--for=jsonpath={.status.containerStatuses[?(@.name=="done")].state.terminated.reason}=Completed"#,
                );
            })
        };
        let out = short.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("to-stdout"), "{}", text(&out));
        assert!(stdout.contains("to-stderr"), "{}", text(&out));

        ticker_ready.join().unwrap();
        // From the moment of attach: what the container wrote before is not repeated.
        let mut ticker = kubectl_cmd(&kc, &["attach", "ticker", "-c", "main"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(4));
        ticker.kill().unwrap();
        let mut stdout = String::new();
        ticker
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        ticker.wait().unwrap();
        assert!(stdout.contains("tick "), "{stdout}");
        assert!(!stdout.contains("before-attach"), "{stdout}");

        let missing = kubectl(&kc, &["attach", "nosuch"]);
        assert!(!missing.status.success(), "{}", text(&missing));
        assert!(
            String::from_utf8_lossy(&missing.stderr).contains(r#"pods "nosuch" not found"#),
            "{}",
            text(&missing)
        );
        // The `done` container has exited while the pod runs on.
        let stopped = kubectl(&kc, &["attach", "ticker", "-c", "done"]);
        assert!(!stopped.status.success(), "{}", text(&stopped));
        assert!(
            String::from_utf8_lossy(&stopped.stderr)
                .contains("container done is not running in pod ticker"),
            "{}",
            text(&stopped)
        );
        let stdin = kubectl(&kc, &["attach", "-i", "ticker", "-c", "main"]);
        assert!(!stdin.status.success(), "{}", text(&stdin));
        assert!(
            String::from_utf8_lossy(&stdin.stderr).contains("it needs stdin: true"),
            "{}",
            text(&stdin)
        );

        // stdin: true with stdinOnce: the input reaches the container, and the end of
        // it is the container's EOF, so it finishes and attach exits 0.
        wait_for(&kc, "reader", "--for=condition=Ready");
        let mut reader = kubectl_cmd(&kc, &["attach", "-i", "reader"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        reader
            .stdin
            .take()
            .unwrap()
            .write_all(b"hello\nworld\n")
            .unwrap();
        let out = reader.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("got hello") && stdout.contains("got world") && stdout.contains("eof"),
            "{}",
            text(&out)
        );
    })
    .await
    .unwrap();
    cluster.shutdown().await;
}
