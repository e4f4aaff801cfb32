#![cfg(test)]
//! Runs devcluster/tests-kubectl/run.sh: stock kubectl against the server binary.

use std::process::Command;

#[test]
fn kubectl_script_passes() {
    let have_kubectl = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        have_kubectl,
        "kubectl is missing: install it with `apt-get install -y kubernetes-client`"
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests-kubectl/run.sh");
    let out = Command::new("bash")
        .arg(script)
        .env(
            "DEVCLUSTER_APISERVER_BIN",
            env!("CARGO_BIN_EXE_devcluster-apiserver"),
        )
        .output()
        .expect("running bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl script failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}
