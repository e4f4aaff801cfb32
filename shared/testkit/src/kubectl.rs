//! Stock kubectl against a test cluster, and what failure messages show of its runs.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `kubectl --kubeconfig KC --request-timeout=30s ARGS...`, stdin closed, output captured.
pub fn kubectl_cmd(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=30s")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs kubectl to its end, writing `stdin` to it when given.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = kubectl_cmd(kubeconfig, args);
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd
        .spawn()
        .expect("kubectl is missing: apt-get install -y kubernetes-client");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

/// `kubectl get WHAT... -o jsonpath=PATH`, trimmed (empty when it failed).
pub fn jsonpath(kubeconfig: &Path, what: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    let expr = format!("jsonpath={path}");
    args.extend(["-o", &expr]);
    let out = kubectl(kubeconfig, &args, None);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The exit status, stdout and stderr of a finished command, for failure messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
