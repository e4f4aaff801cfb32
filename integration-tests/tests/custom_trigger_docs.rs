//! docs/custom-trigger.md stays true: every command of its ```bash blocks is run here, as
//! written or as the equivalent that needs no nested cargo build and no cluster (listed in the
//! page's last section). A command this test does not know fails it. Uses the binaries
//! `cargo build --workspace --bins` left in this test's target dir (scripts/test.sh builds them).
#![cfg(test)]

use std::process::Command;

use integration_tests::images::{images_sh, podman_unusable};
use integration_tests::{repo_root, target_debug_dir, yaml_documents};

/// The commands of the page's ```bash blocks (indented ones included), one per line.
fn commands() -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("docs/custom-trigger.md")).unwrap();
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        match (inside, line) {
            (false, "```bash") => inside = true,
            (true, "```") => inside = false,
            (true, l) if !l.is_empty() => out.push(l.to_string()),
            _ => {}
        }
    }
    out
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.current_dir(repo_root()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cargo run -p kubeless-api --bin crdgen` runs the crdgen binary: run it into a temporary
/// folder and compare with what is committed.
fn crdgen() {
    let dir = tempfile::tempdir().unwrap();
    ok(Command::new(target_debug_dir().join("crdgen")).arg(dir.path()));
    let redis = std::fs::read_to_string(dir.path().join("redistriggers.kubeless.io.yaml")).unwrap();
    let committed =
        std::fs::read_to_string(repo_root().join("deploy/crds/redistriggers.kubeless.io.yaml"))
            .unwrap();
    assert_eq!(
        redis, committed,
        "run `cargo run -p kubeless-api --bin crdgen`"
    );
}

/// `helm install NAME CHART ARGS` replayed by render.py with the same values.
fn helm_install(command: &str) {
    let args: Vec<&str> = command.split_whitespace().skip(2).collect();
    let out = ok(Command::new("python3")
        .arg("deploy/helm/render.py")
        .arg("template")
        .args(args));
    let objects = yaml_documents(&out).unwrap();
    let named = |kind: &str| {
        objects.iter().any(|o| {
            o["kind"] == kind
                && o["metadata"]["labels"]["app.kubernetes.io/name"] == "redis-trigger"
        })
    };
    for kind in ["Deployment", "ServiceAccount", "ClusterRole", "Role"] {
        assert!(named(kind), "{command}: no redis-trigger {kind}");
    }
    let rules = objects
        .iter()
        .find(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["labels"]["app.kubernetes.io/name"] == "redis-trigger"
        })
        .map(|o| o["rules"].to_string())
        .unwrap_or_default();
    assert!(
        rules.contains("redistriggers/status") && !rules.contains("secrets"),
        "{rules}"
    );
}

#[test]
fn every_command_of_the_custom_trigger_page_runs() {
    let commands = commands();
    assert!(commands.len() >= 5, "{commands:?}");
    for command in &commands {
        match command.as_str() {
            "cargo run -p kubeless-api --bin crdgen" => crdgen(),
            "cargo build -p redis-trigger" => {
                let help = ok(Command::new(target_debug_dir().join("redis-trigger"))
                    .arg("--help")
                    .env_clear());
                assert!(help.contains("--drain-timeout-seconds"), "{help}");
            }
            "python3 deploy/helm/gen_values.py" => {
                ok(Command::new("python3").args(["deploy/helm/gen_values.py", "--check"]));
            }
            "scripts/images.sh build redis-trigger" => match podman_unusable() {
                Some(why) => kubeless_testkit::report!(
                    "SKIPPED `{command}`: {why} (docs/images.md says how to install podman)"
                ),
                None => {
                    images_sh(&["build", "redis-trigger"]);
                }
            },
            c if c.starts_with("helm install ") => helm_install(c),
            other => {
                panic!("docs/custom-trigger.md shows `{other}`, which no test runs: add it here")
            }
        }
    }
}
