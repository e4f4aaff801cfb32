#![cfg(test)]
//! Process mode runs registry images that are not in the image map: a function image (a base
//! plus one layer under `/kubeless`, pushed with kubeless-oci as the build step does) runs as
//! its base's mapped command, with `/kubeless` pointing at an unpacked copy of the added layer.
//! The layer is unpacked once and shared by later pods; each container writes to its own copy.
//! A missing tag, a base the map does not have, a registry that is down and a registry that
//! refuses a pod without credentials give `ErrImagePull` / `ImagePullBackOff` with the reason.
//!
//! Container mode (podman) runs the same kind of image from a registry that asks for
//! credentials.
//!
//! Needs Debian's docker-registry (`scripts/images.sh registry-start`), and podman with runc
//! for container mode; each test is skipped with a message when what it needs is missing.

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{eventually, start};
use devcluster_runner::ImageCache;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Client};
use kubeless_oci::{ManifestFormat, PushLayer, PushScratch, Registry, RegistryOptions};
use serde_json::json;

const NS: &str = "default";
/// The repository the test's own image map entry matches (the base of the function images).
const BASE_REPO: &str = "devcluster-test/base-sh";

fn images_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/images.sh")
}

/// Why the loopback registry cannot run here, or None.
fn registry_unusable() -> Option<String> {
    match Command::new("docker-registry").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "docker-registry --version failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Some(format!("docker-registry is not installed ({e})")),
    }
}

/// Debian's docker-registry on 127.0.0.1, stopped by its PID when dropped.
struct LoopbackRegistry {
    dir: tempfile::TempDir,
    addr: String,
    creds: Option<String>,
}

impl LoopbackRegistry {
    fn start(creds: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg(images_sh())
            .arg("registry-start")
            .arg(dir.path())
            .args(creds);
        let out = cmd.output().unwrap();
        let addr = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && addr.starts_with("127.0.0.1:"),
            "registry-start: {addr} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            dir,
            addr,
            creds: creds.map(str::to_string),
        }
    }

    /// The `.dockerconfigjson` content for this registry's user.
    fn docker_config(&self) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let creds = self.creds.as_deref()?;
        let auth = base64::engine::general_purpose::STANDARD.encode(creds);
        Some(
            json!({"auths": {self.addr.clone(): {"auth": auth}}})
                .to_string()
                .into_bytes(),
        )
    }

    fn client(&self) -> Registry {
        Registry::new(RegistryOptions {
            insecure: true,
            ca_pem: None,
            docker_config: self.docker_config(),
        })
        .unwrap()
    }

    /// Pushes a base image `{addr}/{name}` (one layer holding `/base/marker.txt`); its reference.
    async fn push_base(&self, name: &str) -> String {
        let files = tempfile::tempdir().unwrap();
        std::fs::write(files.path().join("marker.txt"), "base layer\n").unwrap();
        let target = format!("{}/{name}", self.addr);
        self.client()
            .push_scratch(&PushScratch {
                target: &target,
                dir: files.path(),
                root: "/base",
                user: None,
                entrypoint: vec!["sh".into()],
                format: ManifestFormat::Oci,
                labels: BTreeMap::new(),
            })
            .await
            .unwrap();
        target
    }

    /// Pushes `target` = `base` plus one layer: `/kubeless/hello.txt` holding `hello`.
    async fn push_function(&self, base: &str, target: &str, hello: &str) -> String {
        let files = tempfile::tempdir().unwrap();
        std::fs::write(files.path().join("hello.txt"), format!("{hello}\n")).unwrap();
        let pushed = self
            .client()
            .push_layer(&PushLayer {
                base,
                target,
                dir: files.path(),
                root: "/kubeless",
                labels: BTreeMap::new(),
            })
            .await
            .unwrap();
        pushed.digest
    }
}

impl Drop for LoopbackRegistry {
    fn drop(&mut self) {
        // What podman pulled from this registry (container mode) goes with it.
        if let Ok(out) = Command::new("podman")
            .args(["images", "--format", "{{.Repository}}:{{.Tag}}"])
            .output()
        {
            let prefix = format!("{}/", self.addr);
            for name in String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with(&prefix))
            {
                let _ = Command::new("podman")
                    .args(["rmi", "--ignore", name])
                    .output();
            }
        }
        let _ = Command::new("bash")
            .arg(images_sh())
            .arg("registry-stop")
            .arg(self.dir.path())
            .output();
    }
}

/// An image map file of the test's own: the base runs `sh -c` with the container's args (its
/// default CMD prints `base-default-cmd`).
fn test_map(dir: &Path) -> PathBuf {
    let path = dir.join("test-images.yaml");
    std::fs::write(
        &path,
        format!(
            "- image: \"{BASE_REPO}:*\"\n  entrypoint: [sh, -c]\n  cmd: [\"echo base-default-cmd\"]\n"
        ),
    )
    .unwrap();
    path
}

async fn create_pod(client: &Client, pod: serde_json::Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
}

async fn pod(client: &Client, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

async fn phase(client: &Client, name: &str) -> String {
    pod(client, name)
        .await
        .and_then(|p| p.status?.phase)
        .unwrap_or_default()
}

/// Waits for pod `name` to succeed; its log.
async fn succeeded_log(client: &Client, name: &str) -> String {
    let ph = eventually(&format!("pod {name} to finish"), 60, || async {
        let ph = phase(client, name).await;
        matches!(ph.as_str(), "Succeeded" | "Failed").then_some(ph)
    })
    .await;
    let log = Api::<Pod>::namespaced(client.clone(), NS)
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_default();
    assert_eq!(ph, "Succeeded", "pod {name}: {log}");
    log
}

/// The first container's status field `field` (e.g. `imageID`).
async fn container_status(client: &Client, name: &str) -> serde_json::Value {
    let p = pod(client, name).await.unwrap();
    let statuses = p.status.and_then(|s| s.container_statuses).unwrap();
    serde_json::to_value(&statuses[0]).unwrap()
}

/// Waits until pod `name` waits in ErrImagePull / ImagePullBackOff; the waiting message.
async fn pull_failure(client: &Client, name: &str) -> String {
    eventually(&format!("pod {name} to fail its pull"), 30, || async {
        let p = pod(client, name).await?;
        let cs = p.status?.container_statuses?.into_iter().next()?;
        let waiting = cs.state?.waiting?;
        let reason = waiting.reason.unwrap_or_default();
        matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff")
            .then(|| waiting.message.unwrap_or_default())
    })
    .await
}

async fn events_of(client: &Client, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_images_run_as_their_base_with_the_added_layer() {
    if let Some(why) = registry_unusable() {
        eprintln!(
            "SKIPPED registry_images: {why}. Install it with `source scripts/lib.sh && ensure_containers`."
        );
        return;
    }
    let registry = LoopbackRegistry::start(None);
    let base = registry.push_base(&format!("{BASE_REPO}:1")).await;
    let image = format!("{}/devcluster-test/fn:1", registry.addr);
    let digest = registry
        .push_function(&base, &image, "hello from the added layer")
        .await;
    // A function image on a base the image map does not have.
    let unmapped_base = registry.push_base("devcluster-test/unmapped:1").await;
    let unmapped = format!("{}/devcluster-test/on-unmapped:1", registry.addr);
    registry
        .push_function(&unmapped_base, &unmapped, "never read")
        .await;

    let maps = tempfile::tempdir().unwrap();
    let map_file = test_map(maps.path());
    let mut cache: Option<ImageCache> = None;
    let h = start(Ipv4Addr::new(127, 81, 0, 0), |c| {
        c.image_map.append_file(&map_file).unwrap();
        c.restart_backoff_base = Duration::from_millis(300);
        c.restart_backoff_max = Duration::from_secs(2);
        cache = Some(c.image_cache.clone());
    })
    .await;
    let cache = cache.unwrap();
    let client = h.client.clone();

    // Two pods of one image at once: one unpack. `first` (pull policy IfNotPresent, the default
    // for a tag) writes into its copy of /kubeless; `second` (Always: asks the registry for the
    // digest again) must not see that file.
    let reader = |name: &str, policy: &str, script: &str| {
        json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": image, "imagePullPolicy": policy,
                "args": [script],
                "env": [{"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"}]
            }]}
        })
    };
    create_pod(
        &client,
        reader(
            "first",
            "IfNotPresent",
            "cat /kubeless/hello.txt; cat $KUBELESS_INSTALL_VOLUME/hello.txt; echo mine > /kubeless/first.txt && echo wrote",
        ),
    )
    .await;
    create_pod(
        &client,
        reader(
            "second",
            "Always",
            "sleep 1; cat /kubeless/hello.txt; test -e /kubeless/first.txt && echo shared || echo own-copy",
        ),
    )
    .await;
    let first = succeeded_log(&client, "first").await;
    assert_eq!(
        first,
        "hello from the added layer\nhello from the added layer\nwrote\n"
    );
    let second = succeeded_log(&client, "second").await;
    assert_eq!(second, "hello from the added layer\nown-copy\n");
    // The base's default command runs when the pod sets neither command nor args.
    create_pod(
        &client,
        json!({
            "metadata": {"name": "default-cmd", "namespace": NS},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]}
        }),
    )
    .await;
    assert_eq!(
        succeeded_log(&client, "default-cmd").await,
        "base-default-cmd\n"
    );
    assert_eq!(cache.unpacks(), 1, "three pods of one image: one unpack");
    let status = container_status(&client, "first").await;
    assert_eq!(
        status["imageID"],
        format!("{}/devcluster-test/fn@{digest}", registry.addr)
    );
    let mut pulled = Vec::new();
    for name in ["first", "second", "default-cmd"] {
        for (reason, message) in events_of(&client, name).await {
            if reason == "Pulled" {
                pulled.push(message);
            }
        }
    }
    let fresh = pulled
        .iter()
        .filter(|m| m.contains("Successfully pulled"))
        .count();
    let present = pulled
        .iter()
        .filter(|m| m.contains("already present on machine"))
        .count();
    assert_eq!((fresh, present), (1, 2), "{pulled:#?}");

    // Pulls that fail wait with the reason, and do not crash or hang the runner.
    let missing_tag = format!("{}/devcluster-test/fn:no-such-tag", registry.addr);
    let unreachable = "127.0.0.1:9/devcluster-test/fn:1".to_string();
    for (name, img) in [
        ("missing-tag", missing_tag.as_str()),
        ("unmapped-base", unmapped.as_str()),
        ("registry-down", unreachable.as_str()),
    ] {
        create_pod(
            &client,
            json!({
                "metadata": {"name": name, "namespace": NS},
                "spec": {"containers": [{"name": "main", "image": img}]}
            }),
        )
        .await;
    }
    let message = pull_failure(&client, "missing-tag").await;
    assert!(message.contains("manifest unknown"), "{message}");
    assert!(message.contains("no-such-tag"), "{message}");
    assert!(
        message.contains("not in the devcluster image map"),
        "{message}"
    );
    let message = pull_failure(&client, "unmapped-base").await;
    assert!(
        message.contains("devcluster-test/unmapped:1")
            && message.contains("not in the devcluster image map"),
        "{message}"
    );
    let message = pull_failure(&client, "registry-down").await;
    assert!(message.contains("127.0.0.1:9"), "{message}");
    eprintln!("registry down: {message}");
    // The failed pulls back off and come back as ImagePullBackOff with an Event.
    eventually("ImagePullBackOff for missing-tag", 20, || async {
        let s = container_status(&client, "missing-tag").await;
        (s["state"]["waiting"]["reason"] == "ImagePullBackOff").then_some(())
    })
    .await;
    let events = events_of(&client, "missing-tag").await;
    assert!(
        events.iter().any(|(r, _)| r == "Failed") && events.iter().any(|(r, _)| r == "BackOff"),
        "{events:?}"
    );
    // The image on an unmapped base was unpacked too: its base is known only from its manifest.
    assert_eq!(cache.unpacks(), 2);
    h.stop().await;
}

/// A registry that asks for basic auth: a pod whose imagePullSecrets hold the credentials
/// pulls and runs; one without waits in ErrImagePull with the registry's refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_credentials_come_from_image_pull_secrets() {
    if let Some(why) = registry_unusable() {
        eprintln!(
            "SKIPPED registry_images (auth): {why}. Install it with `source scripts/lib.sh && ensure_containers`."
        );
        return;
    }
    let registry = LoopbackRegistry::start(Some("puller:pull-s3cret"));
    let base = registry.push_base(&format!("{BASE_REPO}:1")).await;
    let image = format!("{}/devcluster-test/private-fn:1", registry.addr);
    registry
        .push_function(&base, &image, "hello from a private registry")
        .await;
    let maps = tempfile::tempdir().unwrap();
    let map_file = test_map(maps.path());
    let h = start(Ipv4Addr::new(127, 82, 0, 0), |c| {
        c.image_map.append_file(&map_file).unwrap();
    })
    .await;
    let client = h.client.clone();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred", "namespace": NS},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": k8s_openapi::ByteString(registry.docker_config().unwrap())}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let pod_with = |name: &str, secrets: serde_json::Value| {
        json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {"restartPolicy": "Never", "imagePullSecrets": secrets, "containers": [{
                "name": "main", "image": image, "args": ["cat /kubeless/hello.txt"]
            }]}
        })
    };
    let wrong: Secret = serde_json::from_value(json!({
        "metadata": {"name": "wrongcred", "namespace": NS},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json!({"auths": {registry.addr.clone(): {
            "username": "puller", "password": "not-the-password"}}}).to_string()}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap();
    create_pod(
        &client,
        pod_with("with-secret", json!([{"name": "regcred"}])),
    )
    .await;
    create_pod(&client, pod_with("no-secret", json!([]))).await;
    create_pod(
        &client,
        pod_with("missing-secret", json!([{"name": "no-such-secret"}])),
    )
    .await;
    create_pod(
        &client,
        pod_with("wrong-secret", json!([{"name": "wrongcred"}])),
    )
    .await;
    assert_eq!(
        succeeded_log(&client, "with-secret").await,
        "hello from a private registry\n"
    );
    for name in ["no-secret", "missing-secret"] {
        let message = pull_failure(&client, name).await;
        assert!(
            message.contains("requires credentials"),
            "{name}: {message}"
        );
    }
    let message = pull_failure(&client, "wrong-secret").await;
    eprintln!("wrong credentials: {message}");
    let lower = message.to_lowercase();
    assert!(
        lower.contains("unauthorized") || lower.contains("refused") || lower.contains("denied"),
        "{message}"
    );
    let events = events_of(&client, "missing-secret").await;
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "FailedToRetrieveImagePullSecret" && m.contains("no-such-secret")),
        "{events:?}"
    );
    h.stop().await;
}

/// Why podman cannot run containers here, or None.
fn podman_unusable() -> Option<String> {
    match Command::new("podman")
        .args(["info", "--format", "{{.Host.OCIRuntime.Name}}"])
        .output()
    {
        Err(e) => Some(format!("podman is not installed ({e})")),
        Ok(o) if !o.status.success() => Some(format!(
            "`podman info` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Ok(_) => None,
    }
}

/// A root file system of a few MB from this machine: `/bin/sh` (dash), `/bin/cat` and the
/// shared libraries `ldd` lists for them.
fn mini_rootfs(dir: &Path) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let mut files = vec![
        (PathBuf::from("/bin/sh"), PathBuf::from("bin/sh")),
        (PathBuf::from("/bin/cat"), PathBuf::from("bin/cat")),
    ];
    let ldd = Command::new("ldd")
        .args(["/bin/sh", "/bin/cat"])
        .output()
        .unwrap();
    for word in String::from_utf8_lossy(&ldd.stdout).split_whitespace() {
        if word.starts_with('/') && !word.ends_with(':') {
            files.push((PathBuf::from(word), PathBuf::from(&word[1..])));
        }
    }
    for (from, to) in files {
        let to = dir.join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        // Follows links: the image holds the files themselves.
        std::fs::copy(&from, &to).unwrap();
    }
}

/// Container mode: podman pulls a function image (a base plus the layer kubeless-oci added)
/// from a loopback registry that asks for credentials (plain HTTP, the pod's imagePullSecrets)
/// and the added files are in the container; without the Secret the pull is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_mode_runs_function_images_from_the_registry() {
    if let Some(why) = registry_unusable().or_else(podman_unusable) {
        eprintln!(
            "SKIPPED registry_images (container mode): {why}. Install podman, runc and docker-registry with `source scripts/lib.sh && ensure_containers`."
        );
        return;
    }
    let registry = LoopbackRegistry::start(Some("puller:pull-s3cret"));
    let rootfs = tempfile::tempdir().unwrap();
    mini_rootfs(rootfs.path());
    let base = format!("{}/devcluster-test/mini:1", registry.addr);
    registry
        .client()
        .push_scratch(&PushScratch {
            target: &base,
            dir: rootfs.path(),
            root: "/",
            user: None,
            entrypoint: vec!["/bin/sh".into(), "-c".into()],
            format: ManifestFormat::Oci,
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    let image = format!("{}/devcluster-test/container-fn:1", registry.addr);
    let digest = registry
        .push_function(&base, &image, "hello from the added layer in a container")
        .await;
    let h = start(Ipv4Addr::new(127, 83, 0, 0), |c| {
        c.pods = devcluster_runner::PodRuntime::Container(Default::default());
    })
    .await;
    let client = h.client.clone();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred", "namespace": NS},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": k8s_openapi::ByteString(registry.docker_config().unwrap())}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let pod_with = |name: &str, secrets: serde_json::Value| {
        json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {"restartPolicy": "Never", "imagePullSecrets": secrets, "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Always",
                "args": ["cat $KUBELESS_INSTALL_VOLUME/hello.txt"],
                "env": [{"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"}]
            }]}
        })
    };
    create_pod(
        &client,
        pod_with("with-secret", json!([{"name": "regcred"}])),
    )
    .await;
    create_pod(&client, pod_with("no-secret", json!([]))).await;
    let log = eventually("pod with-secret to finish", 120, || async {
        let ph = phase(&client, "with-secret").await;
        matches!(ph.as_str(), "Succeeded" | "Failed").then_some(ph)
    })
    .await;
    let text = Api::<Pod>::namespaced(client.clone(), NS)
        .logs("with-secret", &LogParams::default())
        .await
        .unwrap_or_default();
    assert_eq!(log, "Succeeded", "{text}");
    assert_eq!(text, "hello from the added layer in a container\n");
    let status = container_status(&client, "with-secret").await;
    assert_eq!(
        status["imageID"],
        format!("{}/devcluster-test/container-fn@{digest}", registry.addr)
    );
    let message = pull_failure(&client, "no-secret").await;
    let lower = message.to_lowercase();
    assert!(
        lower.contains("unauthorized") || lower.contains("authentication"),
        "{message}"
    );
    h.stop().await;
}

/// The build step's real case in process mode: a Python function image whose base is
/// `{registry}/kubeless-rs/runtime-python:3.11` runs as the repository's `runtimes.yaml` entry
/// (the `kubeless-runtime` binary), which loads the handler from `KUBELESS_INSTALL_VOLUME=/kubeless`
/// with no volume there, and answers HTTP at the pod address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_function_image_answers_with_the_real_runtime() {
    let runtime = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("kubeless-runtime");
    let missing = (!runtime.exists()).then(|| {
        format!(
            "{} is missing (`cargo build -p kubeless-runtime`)",
            runtime.display()
        )
    });
    if let Some(why) = registry_unusable().or(missing) {
        eprintln!(
            "SKIPPED registry_images (python function): {why}. docker-registry: `source scripts/lib.sh && ensure_containers`."
        );
        return;
    }
    let registry = LoopbackRegistry::start(None);
    // The base only has to exist in the registry: process mode runs the image map's command.
    let base = registry.push_base("kubeless-rs/runtime-python:3.11").await;
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("handler.py"),
        "def hello(event, context):\n    data = event['data']\n    return 'hello ' + (data.decode() if isinstance(data, bytes) else str(data))\n",
    )
    .unwrap();
    let image = format!("{}/kubeless-rs/fn-hello:1", registry.addr);
    registry
        .client()
        .push_layer(&PushLayer {
            base: &base,
            target: &image,
            dir: code.path(),
            root: "/kubeless",
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    let runtimes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images.d/runtimes.yaml");
    let h = start(Ipv4Addr::new(127, 84, 0, 0), |c| {
        c.image_map.append_file(&runtimes).unwrap();
    })
    .await;
    let client = h.client.clone();
    create_pod(
        &client,
        json!({
            "metadata": {"name": "hello", "namespace": NS},
            "spec": {"containers": [{
                "name": "hello", "image": image,
                "env": [
                    {"name": "FUNC_HANDLER", "value": "hello"},
                    {"name": "MOD_NAME", "value": "handler"},
                    {"name": "FUNC_RUNTIME", "value": "python3.11"},
                    {"name": "FUNC_PORT", "value": "8080"},
                    {"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"}
                ],
                "ports": [{"containerPort": 8080}]
            }]}
        }),
    )
    .await;
    let ip = eventually("pod hello ready", 60, || async {
        let p = pod(&client, "hello").await?;
        let status = p.status?;
        let ready = status
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(status.pod_ip?)
    })
    .await;
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect((ip.as_str(), 8080)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nHost: fn\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nworld")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    })
    .await
    .unwrap();
    let log = Api::<Pod>::namespaced(client.clone(), NS)
        .logs("hello", &LogParams::default())
        .await
        .unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}\nlog:\n{log}");
    assert!(answer.ends_with("hello world"), "{answer}\nlog:\n{log}");
    h.stop().await;
}
