//! The README's main job (scripts/demo.sh): devcluster, the CRDs, the function-controller, a
//! Python function deployed and called with the kubeless CLI. Uses the binaries `cargo build
//! --workspace --bins` left in this test's target dir (scripts/test.sh builds them first).
#![cfg(test)]

use std::{process::Command, time::Duration};

use integration_tests::{repo_root, target_debug_dir};

#[test]
fn demo_script_deploys_and_calls_the_example_function() {
    let debug = target_debug_dir();
    for bin in [
        "devcluster",
        "kubeless-runtime",
        "function-controller",
        "kubeless",
    ] {
        assert!(
            debug.join(bin).exists(),
            "{} is missing: run `cargo build --workspace --bins` first (scripts/test.sh does)",
            debug.join(bin).display()
        );
    }
    let target = debug.parent().unwrap();
    let mut child = Command::new("bash")
        .arg(repo_root().join("scripts/demo.sh"))
        .env("KUBELESS_SKIP_BUILD", "1")
        .env("CARGO_TARGET_DIR", target)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The script bounds its own waits (devcluster start, --wait-timeout); this is a backstop.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/demo.sh did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1/1 READY"),
        "function list shows it ready:\n{stdout}"
    );
    let answer = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON answer in:\n{stdout}"));
    let answer: serde_json::Value = serde_json::from_str(answer).unwrap();
    assert_eq!(answer["hello"], "from python");
    assert_eq!(answer["data"]["greeting"], "hi", "the event data came back");
}
