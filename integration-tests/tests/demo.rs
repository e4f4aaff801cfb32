//! The README's main job (scripts/demo.sh): devcluster, the CRDs, the function-controller, a
//! Python function deployed and called with the kubeless CLI; and `demo.sh --images`, the steps
//! of docs/helm.md's "Try it on your machine": the images pushed to a loopback registry, the
//! chart applied to devcluster in container mode, the function called through the chart's
//! gateway. Uses the binaries `cargo build --workspace --bins` left in this test's target dir
//! (scripts/test.sh builds them first).
#![cfg(test)]

use std::{process::Command, time::Duration};

use integration_tests::images::podman_unusable;
use integration_tests::{repo_root, target_debug_dir};

/// Runs scripts/demo.sh with `args`; its stdout once it succeeded.
fn demo(args: &[&str], limit: Duration) -> String {
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
        .args(args)
        .env("KUBELESS_SKIP_BUILD", "1")
        .env("CARGO_TARGET_DIR", target)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The script bounds its own waits (devcluster start, --wait-timeout); this is a backstop.
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/demo.sh {args:?} did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1/1 READY"),
        "function list shows it ready:\n{stdout}"
    );
    stdout
}

/// The function's JSON answer in the demo's output.
fn answer(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON answer in:\n{stdout}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn demo_script_deploys_and_calls_the_example_function() {
    let answer = answer(&demo(&[], Duration::from_secs(300)));
    assert_eq!(answer["hello"], "from python");
    assert_eq!(answer["data"]["greeting"], "hi", "the event data came back");
}

#[test]
fn demo_images_installs_the_chart_from_a_registry_in_container_mode() {
    if let Some(why) = podman_unusable() {
        kubeless_testkit::report!(
            "SKIPPED demo --images: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    // Building the images cold takes long; scripts/test.sh built them before the tests.
    let stdout = demo(&["--images"], Duration::from_secs(3600));
    // Every service pod of the default install was Running from its image.
    for service in [
        "kubeless-function-controller",
        "kubeless-http-trigger-controller",
        "kubeless-cronjob-trigger-controller",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(service) && l.contains("1/1") && l.contains("Running")),
            "{service} not Running:\n{stdout}"
        );
    }
    let answer = answer(&stdout);
    assert_eq!(answer["hello"], "from python");
    assert_eq!(answer["data"]["greeting"], "hi", "the event data came back");
}
