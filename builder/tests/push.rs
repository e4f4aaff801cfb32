//! The kubeless-builder binary against Debian's docker-registry: push, then `exists` on the
//! second run; one-line errors with exit code 1. Skipped when docker-registry is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../shared/oci/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use common::{TestRegistry, write_tree};
use kubeless_oci::{ManifestFormat, PushScratch, Registry, RegistryOptions};

fn builder(envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubeless-builder"));
    cmd.arg("push").stdin(Stdio::null());
    for var in [
        "KUBELESS_BUILD_BASE",
        "KUBELESS_BUILD_TARGET",
        "KUBELESS_BUILD_DIR",
        "KUBELESS_BUILD_ROOT",
        "KUBELESS_BUILD_LABELS",
        "KUBELESS_REGISTRY_INSECURE",
        "KUBELESS_REGISTRY_CA_FILE",
        "KUBELESS_DOCKER_CONFIG",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(envs.iter().copied());
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn push_base(registry: &Registry, image: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[("usr/local/bin/runtime", "#!/bin/sh\n", 0o755)],
    );
    registry
        .push_scratch(&PushScratch {
            target: image,
            dir: dir.path(),
            root: "/",
            user: Some("65532:65532"),
            entrypoint: vec![],
            format: ManifestFormat::Oci,
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn push_then_exists() {
    let Some(reg) = TestRegistry::start(Some("builder:pa55")) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("config.json");
    std::fs::write(&config, reg.docker_config("builder", "pa55")).unwrap();
    let registry = Registry::new(RegistryOptions {
        insecure: true,
        ca_pem: None,
        docker_config: Some(reg.docker_config("builder", "pa55")),
    })
    .unwrap();
    let base = reg.image("kubeless-rs/runtime-python:3.11");
    push_base(&registry, &base).await;
    let src = work.path().join("kubeless");
    write_tree(
        &src,
        &[("handler.py", "print('hi')\n", 0o644), ("run", "x", 0o755)],
    );
    let target = reg.image("functions/hello:sha-1");
    let envs = [
        ("KUBELESS_BUILD_BASE", base.as_str()),
        ("KUBELESS_BUILD_TARGET", target.as_str()),
        ("KUBELESS_BUILD_DIR", src.to_str().unwrap()),
        ("KUBELESS_REGISTRY_INSECURE", "true"),
        ("KUBELESS_DOCKER_CONFIG", config.to_str().unwrap()),
        ("KUBELESS_BUILD_LABELS", "io.kubeless.function=hello"),
    ];

    let first = builder(&envs);
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}{}", text(&first.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with(&format!("base {base}@sha256:")),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("layer sha256:") && lines[1].ends_with(" bytes"),
        "{stdout}"
    );
    assert_eq!(lines[2], "mounted 1 blobs, uploaded 2");
    let digest = lines[3]
        .strip_prefix(&format!("pushed {target}@"))
        .unwrap_or_else(|| panic!("{stdout}"));

    let image = registry.inspect(&target).await.unwrap();
    assert_eq!(image.digest, digest);
    assert_eq!(
        image.config["config"]["Labels"]["io.kubeless.function"],
        "hello"
    );
    let dest = tempfile::tempdir().unwrap();
    registry.unpack_added(&target, dest.path()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dest.path().join("kubeless/handler.py")).unwrap(),
        "print('hi')\n"
    );

    let second = builder(&envs);
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), format!("exists {target}@{digest}\n"));

    // Flags instead of env vars, and a wrong password: one line, exit code 1.
    let wrong = work.path().join("wrong.json");
    std::fs::write(&wrong, reg.docker_config("builder", "wrong")).unwrap();
    let failed = builder(&[]);
    assert_eq!(failed.status.code(), Some(1));
    assert_eq!(
        text(&failed.stderr),
        "no base image: set --base or KUBELESS_BUILD_BASE\n"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kubeless-builder"))
        .args(["push", "--insecure", "--base", &base, "--target"])
        .arg(reg.image("functions/other:1"))
        .arg("--dir")
        .arg(&src)
        .arg("--docker-config")
        .arg(&wrong)
        .env_remove("KUBELESS_REGISTRY_INSECURE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("registry {} refused credentials", reg.addr)),
        "{stderr}"
    );
}

#[tokio::test]
async fn missing_base_is_one_line() {
    let Some(reg) = TestRegistry::start(None) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let base = reg.image("kubeless-rs/runtime-none:1");
    let out = builder(&[
        ("KUBELESS_BUILD_BASE", base.as_str()),
        ("KUBELESS_BUILD_TARGET", &reg.image("functions/x:1")),
        ("KUBELESS_BUILD_DIR", work.path().to_str().unwrap()),
        ("KUBELESS_REGISTRY_INSECURE", "1"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), format!("base image {base} not found\n"));
}
