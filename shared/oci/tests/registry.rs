//! kubeless-oci against Debian's docker-registry (distribution 2.8) on loopback: push a base
//! image, push a function layer onto it in another repository (base blobs mounted), read it
//! back; credentials; errors. Skipped, with a message, when docker-registry is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{TestRegistry, write_tree};
use kubeless_oci::{
    Error, IndexImage, ManifestFormat, PushLayer, PushScratch, Registry, RegistryOptions,
};

fn insecure(docker_config: Option<Vec<u8>>) -> Registry {
    Registry::new(RegistryOptions {
        insecure: true,
        ca_pem: None,
        docker_config,
    })
    .unwrap()
}

/// A "runtime" base image of two files, owned by 65532, at `image`.
async fn push_base(
    registry: &Registry,
    image: &str,
    format: ManifestFormat,
    marker: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("usr/local/bin/runtime", "#!/bin/sh\necho runtime\n", 0o755),
            ("etc/base.txt", marker, 0o644),
        ],
    );
    let pushed = registry
        .push_scratch(&PushScratch {
            target: image,
            dir: dir.path(),
            root: "/",
            user: Some("65532:65532"),
            entrypoint: vec!["/usr/local/bin/runtime".into()],
            format,
            labels: BTreeMap::from([("org.opencontainers.image.title".into(), "runtime".into())]),
        })
        .await
        .unwrap();
    assert_eq!(pushed.uploaded, 2, "{pushed:?}");
    pushed.digest
}

/// What the build step puts in /kubeless: code, an executable, a nested file, a symlink.
fn function_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            (
                "handler.py",
                "def hello(event, context):\n    return 'hi'\n",
                0o644,
            ),
            ("bin/tool", "\x7fELF-ish compiled output", 0o755),
            ("lib/python/pkg/__init__.py", "", 0o644),
        ],
    );
    std::os::unix::fs::symlink("handler.py", dir.path().join("main.py")).unwrap();
    dir
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn push_layer_mounts_the_base_and_unpack_gives_back_only_the_added_files() {
    let Some(reg) = TestRegistry::start(None) else {
        return;
    };
    let registry = insecure(None);
    let base = reg.image("kubeless-rs/runtime-test:1");
    let base_digest = push_base(&registry, &base, ManifestFormat::Oci, "base").await;
    let target = reg.image("functions/hello:abc123");
    assert_eq!(registry.exists(&target).await.unwrap(), None);
    assert_eq!(
        registry.exists(&reg.image("never/pushed:1")).await.unwrap(),
        None
    );

    let dir = function_dir();
    let labels = BTreeMap::from([("io.kubeless.function".to_string(), "hello".to_string())]);
    let pushed = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &target,
            dir: dir.path(),
            root: "/kubeless",
            labels,
        })
        .await
        .unwrap();
    // The base's one layer mounted; the new layer and the new config sent.
    assert_eq!(
        (pushed.mounted, pushed.uploaded, pushed.existing),
        (1, 2, 0),
        "{pushed:?}"
    );
    assert_eq!(pushed.base_digest, base_digest);
    assert_eq!(
        registry.exists(&target).await.unwrap(),
        Some(pushed.digest.clone())
    );

    let image = registry.inspect(&target).await.unwrap();
    assert_eq!(image.digest, pushed.digest);
    assert_eq!(
        image.media_type,
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        image.annotations["org.opencontainers.image.base.name"],
        base
    );
    assert_eq!(
        image.annotations["org.opencontainers.image.base.digest"],
        base_digest
    );
    assert_eq!(image.layers.len(), 2);
    assert_eq!(image.layers[1].digest, pushed.layer_digest);
    assert_eq!(image.layers[1].size, pushed.layer_bytes);
    assert_eq!(
        image.layers[1].media_type,
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let config = &image.config;
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"][0], "/usr/local/bin/runtime");
    assert_eq!(config["config"]["Labels"]["io.kubeless.function"], "hello");
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.title"],
        "runtime"
    );
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
    assert_eq!(config["history"].as_array().unwrap().len(), 2);

    // The same inputs make the same image (deterministic layer and config).
    let again = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &reg.image("functions/hello:again"),
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::from([("io.kubeless.function".into(), "hello".into())]),
        })
        .await
        .unwrap();
    assert_eq!(again.digest, pushed.digest);
    assert_eq!(
        (again.mounted, again.uploaded, again.existing),
        (0, 0, 3),
        "{again:?}"
    );

    let dest = tempfile::tempdir().unwrap();
    let unpacked = registry.unpack_added(&target, dest.path()).await.unwrap();
    assert_eq!(unpacked.base, base);
    assert_eq!(unpacked.base_digest, base_digest);
    assert_eq!(unpacked.digest, pushed.digest);
    assert_eq!(unpacked.layers, 1);
    let k = dest.path().join("kubeless");
    assert_eq!(
        std::fs::read_to_string(k.join("handler.py")).unwrap(),
        "def hello(event, context):\n    return 'hi'\n"
    );
    assert_eq!(
        std::fs::read(k.join("bin/tool")).unwrap(),
        b"\x7fELF-ish compiled output"
    );
    assert_eq!(mode(&k.join("bin/tool")), 0o755);
    assert_eq!(mode(&k.join("handler.py")), 0o644);
    assert!(k.join("lib/python/pkg/__init__.py").is_file());
    assert_eq!(
        std::fs::read_link(k.join("main.py")).unwrap(),
        Path::new("handler.py")
    );
    // Nothing of the base.
    assert!(!dest.path().join("usr").exists());
    assert!(!dest.path().join("etc").exists());

    // An image without the base annotations is refused with a reason.
    let err = registry.unpack_added(&base, dest.path()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("org.opencontainers.image.base.name"),
        "{err}"
    );
}

#[tokio::test]
async fn docker_schema2_base_keeps_its_media_types() {
    let Some(reg) = TestRegistry::start(None) else {
        return;
    };
    let registry = insecure(None);
    let base = reg.image("kubeless-rs/runtime-docker:1");
    push_base(&registry, &base, ManifestFormat::Docker, "docker").await;
    let target = reg.image("functions/docker:1");
    let dir = function_dir();
    let pushed = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &target,
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert_eq!(
        pushed.media_type,
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    let image = registry.inspect(&target).await.unwrap();
    assert_eq!(image.media_type, pushed.media_type);
    assert!(
        image
            .layers
            .iter()
            .all(|l| l.media_type == "application/vnd.docker.image.rootfs.diff.tar.gzip")
    );
    let dest = tempfile::tempdir().unwrap();
    let unpacked = registry.unpack_added(&target, dest.path()).await.unwrap();
    assert_eq!(unpacked.layers, 1);
    assert!(dest.path().join("kubeless/handler.py").is_file());
}

#[tokio::test]
async fn a_base_index_resolves_to_linux_amd64() {
    let Some(reg) = TestRegistry::start(None) else {
        return;
    };
    let registry = insecure(None);
    let arm = reg.image("kubeless-rs/runtime-multi:arm64");
    let amd = reg.image("kubeless-rs/runtime-multi:amd64");
    push_base(&registry, &arm, ManifestFormat::Oci, "arm64").await;
    let amd_digest = push_base(&registry, &amd, ManifestFormat::Oci, "amd64").await;
    let index = reg.image("kubeless-rs/runtime-multi:1");
    registry
        .push_index(
            &index,
            &[
                IndexImage {
                    image: &arm,
                    os: "linux",
                    architecture: "arm64",
                },
                IndexImage {
                    image: &amd,
                    os: "linux",
                    architecture: "amd64",
                },
            ],
        )
        .await
        .unwrap();
    let target = reg.image("functions/multi:1");
    let dir = function_dir();
    let pushed = registry
        .push_layer(&PushLayer {
            base: &index,
            target: &target,
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert_eq!(pushed.base_digest, amd_digest);
    assert_eq!(pushed.mounted, 1);
    let dest = tempfile::tempdir().unwrap();
    let unpacked = registry.unpack_added(&target, dest.path()).await.unwrap();
    assert_eq!(
        (unpacked.base.as_str(), unpacked.layers),
        (index.as_str(), 1)
    );
}

#[tokio::test]
async fn a_base_in_another_registry_is_copied() {
    let (Some(one), Some(two)) = (TestRegistry::start(None), TestRegistry::start(None)) else {
        return;
    };
    let registry = insecure(None);
    let base = one.image("kubeless-rs/runtime-test:1");
    push_base(&registry, &base, ManifestFormat::Oci, "base").await;
    let target = two.image("functions/hello:1");
    let dir = function_dir();
    let pushed = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &target,
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert_eq!((pushed.mounted, pushed.uploaded), (0, 3), "{pushed:?}");
    let dest = tempfile::tempdir().unwrap();
    registry.unpack_added(&target, dest.path()).await.unwrap();
    assert!(dest.path().join("kubeless/bin/tool").is_file());
}

#[tokio::test]
async fn basic_auth_with_docker_config_and_clear_errors() {
    let Some(reg) = TestRegistry::start(Some("alice:wonderland")) else {
        return;
    };
    let registry = insecure(Some(reg.docker_config("alice", "wonderland")));
    let base = reg.image("kubeless-rs/runtime-test:1");
    push_base(&registry, &base, ManifestFormat::Oci, "base").await;
    let target = reg.image("functions/private:1");
    let dir = function_dir();
    let pushed = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &target,
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert_eq!((pushed.mounted, pushed.uploaded), (1, 2), "{pushed:?}");
    assert_eq!(registry.exists(&target).await.unwrap(), Some(pushed.digest));

    let wrong = insecure(Some(reg.docker_config("alice", "nope")));
    let err = wrong.exists(&target).await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "registry {} refused credentials (looking up {target})",
            reg.addr
        )
    );
    let err = wrong
        .push_layer(&PushLayer {
            base: &base,
            target: &reg.image("functions/other:1"),
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refused credentials"), "{err}");

    let anonymous = insecure(None);
    let err = anonymous.exists(&target).await.unwrap_err();
    assert!(err.to_string().contains("requires credentials"), "{err}");
}

#[tokio::test]
async fn missing_base_and_unreachable_registry_are_named() {
    let Some(reg) = TestRegistry::start(None) else {
        return;
    };
    let registry = insecure(None);
    let dir = function_dir();
    let base = reg.image("kubeless-rs/nothing:1");
    let err = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &reg.image("functions/x:1"),
            dir: dir.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), format!("base image {base} not found"));

    let err = registry
        .exists("127.0.0.1:1/functions/x:1")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot reach registry 127.0.0.1:1"),
        "{err}"
    );

    let err = registry.exists("Not A Reference").await.unwrap_err();
    assert!(matches!(err, Error::InvalidReference { .. }), "{err:?}");
}
