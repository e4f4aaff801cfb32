//! A pushed function image is a normal image for podman: pulled from the loopback registry and,
//! when the local runtime-python image of `scripts/images.sh build` is there, run with the
//! function's files in /kubeless (owner 65532, executable bits kept). Skipped, with a message,
//! without docker-registry, podman or buildah.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use common::{TestRegistry, write_tree};
use kubeless_oci::{ManifestFormat, PushLayer, PushScratch, Registry, RegistryOptions};

const RUNTIME_PYTHON: &str = "localhost/kubeless-rs/runtime-python:3.11";

fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the images podman pulled from the test registry (podman's storage is the machine's).
struct Pulled(Vec<String>);

impl Drop for Pulled {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = run(&["podman", "rmi", "--ignore", name]);
        }
    }
}

#[tokio::test]
async fn podman_pulls_and_runs_a_pushed_function_image() {
    let podman_works = run(&["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"])
        .status
        .success();
    if !podman_works {
        eprintln!(
            "SKIP: podman is not usable here (docs/images.md: scripts/lib.sh ensure_containers)"
        );
        return;
    }
    let Some(reg) = TestRegistry::start(None) else {
        return;
    };
    let registry = Registry::new(RegistryOptions {
        insecure: true,
        ..Default::default()
    })
    .unwrap();
    let mut pulled = Pulled(Vec::new());
    let fn_dir = tempfile::tempdir().unwrap();
    write_tree(
        fn_dir.path(),
        &[
            (
                "handler.py",
                "def hello(event, context):\n    return 'hello from the layer'\n",
                0o644,
            ),
            ("tool.sh", "#!/bin/sh\necho tool ran\n", 0o755),
        ],
    );

    // A scratch base: pull only (nothing in it can run).
    let base_dir = tempfile::tempdir().unwrap();
    write_tree(base_dir.path(), &[("etc/base.txt", "base", 0o644)]);
    let base = reg.image("kubeless-rs/scratch:1");
    registry
        .push_scratch(&PushScratch {
            target: &base,
            dir: base_dir.path(),
            root: "/",
            user: Some("65532:65532"),
            entrypoint: vec![],
            format: ManifestFormat::Oci,
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    let target = reg.image("functions/scratch:1");
    let pushed = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &target,
            dir: fn_dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    pulled.0.push(target.clone());
    ok(&["podman", "pull", "-q", "--tls-verify=false", &target]);
    let digest = ok(&[
        "podman",
        "image",
        "inspect",
        "--format",
        "{{.Digest}}",
        &target,
    ]);
    assert_eq!(digest.trim(), pushed.digest);

    // The real runtime image, when built here: the function's files are usable in a container.
    if !run(&["podman", "image", "exists", RUNTIME_PYTHON])
        .status
        .success()
    {
        eprintln!(
            "SKIP the run part: {RUNTIME_PYTHON} is not built (scripts/images.sh build runtime-python)"
        );
        return;
    }
    let runtime = reg.image("kubeless-rs/runtime-python:3.11");
    ok(&[
        "buildah",
        "push",
        "--quiet",
        "--tls-verify=false",
        RUNTIME_PYTHON,
        &format!("docker://{runtime}"),
    ]);
    let target = reg.image("functions/python:1");
    let pushed = registry
        .push_layer(&PushLayer {
            base: &runtime,
            target: &target,
            dir: fn_dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert!(pushed.mounted > 0 && pushed.uploaded == 2, "{pushed:?}");
    pulled.0.push(target.clone());
    ok(&["podman", "pull", "-q", "--tls-verify=false", &target]);
    let out = ok(&[
        "timeout",
        "120",
        "podman",
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "/bin/sh",
        &target,
        "-c",
        "stat -c '%u:%g %a %n' /kubeless/handler.py /kubeless/tool.sh && /kubeless/tool.sh && cd /kubeless && python3 -c 'import handler; print(handler.hello(None, None))'",
    ]);
    assert_eq!(
        out,
        "65532:65532 644 /kubeless/handler.py\n65532:65532 755 /kubeless/tool.sh\ntool ran\nhello from the layer\n"
    );
}
