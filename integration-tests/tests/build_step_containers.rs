#![cfg(test)]
//! The build step end to end with devcluster in container mode (podman): the runtime-python and
//! builder images, packed by `scripts/images.sh build`, in Debian's docker-registry on loopback,
//! the runtime catalogue behind that registry, and the function-controller binary with the build
//! step on and the registry's builder image. A Python function with a requirements file is built
//! by a Job whose steps (prepare, pip install, `kubeless-builder push`) run in podman
//! containers, in a namespace enforcing PodSecurity `restricted`; the Function is Ready with the
//! built image, its pod runs that image (pulled by podman, by the digest the registry has) with
//! no install step, and it answers with its dependency.
//!
//! Needs root, podman (runc), buildah, docker-registry (`ensure_containers` in scripts/lib.sh),
//! the binaries of a former `scripts/images.sh build` (scripts/test.sh runs it before the tests)
//! and of `cargo build --workspace --bins`, and the host's pip reaching PyPI (the install step
//! reads a package index on loopback filled from it, see [`PackageIndex`]); skipped with a
//! message when podman does not run.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::build::{BuildEnv, call_via_proxy};
use integration_tests::images::{podman_unusable, run};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use kubeless_api::{Function, find_condition};
use kubeless_testkit::{NS, eventually, report};
use serde_json::json;

const NAME: &str = "pybc";
const CODE: &str =
    "import six\n\ndef handler(event, context):\n    return 'containers six ' + six.__version__\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_function_is_built_and_run_in_podman_containers() {
    if let Some(why) = podman_unusable() {
        report!(
            "SKIPPED build_step_containers: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    let index = PackageIndex::start("six==1.16.0");
    let started = Instant::now();
    let env =
        BuildEnv::start_in_containers(&["runtime-python"], &[("PIP_INDEX_URL", index.url.clone())])
            .await;
    report!(
        "build step in containers: images, registry, cluster and controller up in {:?}",
        started.elapsed()
    );
    let pods_dir = std::path::absolute(env.cluster.dir.path().join("state/pods")).unwrap();
    let client = env.cluster.client.clone();
    let registry = env.registry.addr.clone();
    // The checks run in their own task, so a failed one still stops the containers below.
    let result = tokio::spawn(checks(client, registry)).await;
    env.shutdown().await;
    let left = run(Command::new("podman").args([
        "ps",
        "--all",
        "--quiet",
        "--filter",
        &format!("label=io.devcluster.state-dir={}", pods_dir.display()),
    ]));
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
    assert!(
        left.stdout.is_empty(),
        "containers left after shutdown: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    report!(
        "build step in containers: whole test {:?}",
        started.elapsed()
    );
    drop(index);
}

/// A PEP 503 package index on loopback (`python3 -m http.server` over `simple/<name>/<wheel>`)
/// holding the wheel of `requirement`, downloaded by the host's pip. The containers reach PyPI,
/// but here TLS to it goes through an egress proxy whose CA only the host trusts
/// (/etc/pip.conf), not the runtime image; a private index is also what a cluster without
/// internet access uses. Stopped by PID when dropped.
struct PackageIndex {
    server: std::process::Child,
    _dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT/simple/`.
    url: String,
}

impl PackageIndex {
    fn start(requirement: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let name = requirement.split("==").next().unwrap();
        let project = dir.path().join("simple").join(name);
        run(Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
            ])
            .arg(&project)
            .arg(requirement));
        let port = kubeless_testkit::free_port();
        let server = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1"])
            .arg(port.to_string())
            .arg("--directory")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}/simple/");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(10), "{url} not up");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            server,
            _dir: dir,
            url,
        }
    }
}

impl Drop for PackageIndex {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

async fn checks(client: Client, registry: String) {
    let fns: Api<Function> = Api::namespaced(client.clone(), NS);
    let function: Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "runtime": "python3.11",
            "handler": "hello.handler",
            "function": CODE,
            "deps": "six==1.16.0\n",
        }
    }))
    .unwrap();
    let started = Instant::now();
    fns.create(&PostParams::default(), &function).await.unwrap();

    // Built and Ready (or the build's failure, with its log tail, at once).
    let f = eventually(
        &format!("{NAME} built and Ready"),
        Duration::from_secs(420),
        || async {
            let f = fns.get(NAME).await.ok()?;
            let status = f.status.as_ref()?;
            let ready = find_condition(&status.conditions, "Ready")?;
            assert_ne!(
                ready.reason.as_deref(),
                Some("BuildFailed"),
                "{:?}",
                ready.message
            );
            ready.is_true().then_some(f)
        },
    )
    .await;
    report!(
        "build step in containers: {NAME} built and Ready in {:?}",
        started.elapsed()
    );
    let status = f.status.unwrap();
    let build = status.build.unwrap_or_default();
    assert_eq!(build.state, "Built", "{build:?}");
    let image = build.image.clone().unwrap();
    let repository = format!("{registry}/functions/{NS}/{NAME}");
    assert!(image.starts_with(&format!("{repository}:")), "{image}");
    assert_eq!(status.image.as_deref(), Some(image.as_str()));
    let digest = kubeless_oci::Registry::new(kubeless_oci::RegistryOptions {
        insecure: true,
        ..Default::default()
    })
    .unwrap()
    .exists(&image)
    .await
    .unwrap()
    .unwrap_or_else(|| panic!("{image} not in the registry"));

    // The build Job's steps ran in podman containers.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let build_pods = pods
        .list(&ListParams::default().labels(&format!("kubeless.io/build-of={NAME}")))
        .await
        .unwrap()
        .items;
    assert_eq!(build_pods.len(), 1, "one build pod");
    let build_pod = &build_pods[0];
    let ps = build_pod.status.clone().unwrap_or_default();
    assert_eq!(ps.phase.as_deref(), Some("Succeeded"), "{ps:?}");
    let statuses: Vec<_> = ps
        .init_container_statuses
        .iter()
        .flatten()
        .chain(ps.container_statuses.iter().flatten())
        .collect();
    let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"install") && names.contains(&"build"),
        "{names:?}"
    );
    for s in &statuses {
        let id = s.container_id.as_deref().unwrap_or_default();
        assert!(id.starts_with("podman://"), "{}: {id}", s.name);
    }
    let builder = ps
        .container_statuses
        .iter()
        .flatten()
        .find(|s| s.name == "build")
        .unwrap();
    assert!(
        builder
            .image
            .starts_with(&format!("{registry}/kubeless-rs/builder:")),
        "{}",
        builder.image
    );

    // The function's pod runs the built image, pulled by podman, with no install step.
    let deployment = Api::<Deployment>::namespaced(client.clone(), NS)
        .get(NAME)
        .await
        .unwrap();
    let template = deployment.spec.unwrap().template.spec.unwrap();
    assert!(
        template.init_containers.is_none(),
        "{:?}",
        template.init_containers
    );
    let pod = eventually(
        &format!("a running pod of {NAME}"),
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&format!("function={NAME}")))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        },
    )
    .await;
    assert!(
        pod.spec.as_ref().unwrap().init_containers.is_none(),
        "{}",
        pod.name_any()
    );
    let cs = pod.status.unwrap().container_statuses.unwrap().remove(0);
    assert_eq!(cs.image, image);
    assert_eq!(cs.image_id, format!("{repository}@{digest}"));
    let id = cs.container_id.unwrap_or_default();
    assert!(id.starts_with("podman://"), "{id}");

    // And it answers with its dependency, from the image.
    let answer = eventually(&format!("{NAME} answers"), Duration::from_secs(60), || {
        call_via_proxy(&client, NS, NAME, "x")
    })
    .await;
    assert_eq!(answer.trim(), "containers six 1.16.0");
    report!(
        "build step in containers: {NAME} created to first answer in {:?}",
        started.elapsed()
    );
}
