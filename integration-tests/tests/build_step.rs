//! The build step end to end on devcluster, with Debian's docker-registry on loopback: the
//! function-controller binary (`--build-step`) builds a Python function with a requirements file
//! and a Node.js function with a package.json in a build Job (the prepare and install steps, then
//! `kubeless-builder push`), pushes the runtime image plus one layer to the registry, and runs
//! the built image with no install step; the functions answer with their dependencies.
//! `kubeless function deploy --wait` shows the build's progress and `describe` the image.
//! A change outside the image (timeout) builds nothing, a code change builds once, a rollback
//! reuses the first image without a Job (in a namespace enforcing PodSecurity `restricted`, so
//! the build pods pass it); a broken dependency file is Ready=False BuildFailed with
//! the install log, an Event, and a failing `deploy --wait`, within seconds.
//!
//! Needs the runtime images of `scripts/images.sh build` in buildah's storage (scripts/test.sh
//! builds them before the tests), docker-registry, and the binaries of
//! `cargo build --workspace --bins`; pip and npm reach their registries (PyPI, npm).
#![cfg(test)]

use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::build::BuildEnv;
use integration_tests::target_debug_dir;
use k8s_openapi::api::{apps::v1::Deployment, batch::v1::Job};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use kubeless_api::{Function, find_condition};
use kubeless_testkit::{NS, TestCluster, eventually, report};
use serde_json::json;

const PY_V1: &str =
    "import six\n\ndef handler(event, context):\n    return 'v1 six ' + six.__version__\n";
const PY_V2: &str =
    "import six\n\ndef handler(event, context):\n    return 'v2 six ' + six.__version__\n";
const NODE: &str = "const leftPad = require('left-pad');\nmodule.exports = { handler: (event, context) => leftPad('built', 8, '-') };\n";

/// Runs the CLI against the cluster; (success, stdout, stderr).
async fn kubeless(c: &TestCluster, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(target_debug_dir().join("kubeless"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn call(c: &TestCluster, dir: &Path, name: &str) -> String {
    let (ok, out, err) = kubeless(c, dir, &["function", "call", name, "-n", NS]).await;
    assert!(ok, "kubeless function call {name}: {out}{err}");
    out.trim().to_string()
}

/// Waits until `name` answers `want` (a rollout replaces the pod).
async fn wait_answer(c: &TestCluster, dir: &Path, name: &str, want: &str) {
    eventually(
        &format!("{name} answers {want:?}"),
        Duration::from_secs(120),
        || async {
            let (ok, out, _) = kubeless(c, dir, &["function", "call", name, "-n", NS]).await;
            (ok && out.trim() == want).then_some(())
        },
    )
    .await;
}

/// `kubeless function update NAME --from-file hello.py --wait` with `code`, then waits for the
/// answer `want`; how long both took.
async fn update_code(c: &TestCluster, dir: &Path, name: &str, code: &str, want: &str) -> Duration {
    std::fs::write(dir.join("hello.py"), code).unwrap();
    let started = Instant::now();
    let (ok, out, err) = kubeless(
        c,
        dir,
        &[
            "function",
            "update",
            name,
            "-n",
            NS,
            "--from-file",
            "hello.py",
            "--wait",
        ],
    )
    .await;
    assert!(ok, "update {name}: {out}{err}");
    wait_answer(c, dir, name, want).await;
    started.elapsed()
}

async fn build_status(fns: &Api<Function>, name: &str) -> kubeless_api::build::BuildStatus {
    fns.get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.build)
        .unwrap_or_default()
}

async fn jobs_of(client: &Client, name: &str) -> Vec<String> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let mut names: Vec<String> = jobs
        .list(&ListParams::default().labels(&format!("function={name}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// Waits until the controller saw the Function's latest generation and it is Ready.
async fn wait_ready_generation(fns: &Api<Function>, name: &str) -> Function {
    eventually(
        &format!("{name} ready"),
        Duration::from_secs(240),
        || async {
            let f = fns.get(name).await.ok()?;
            let status = f.status.as_ref()?;
            let ready = find_condition(&status.conditions, "Ready")?;
            (ready.is_true() && status.observed_generation == f.metadata.generation).then_some(f)
        },
    )
    .await
}

/// How many times an Event with `reason` was published about the Function (a repeat within a
/// few minutes is one Event whose series counts it).
async fn events(client: &Client, name: &str, reason: &str) -> usize {
    kubeless_service::events::events_about(client, NS, "Function", name, reason)
        .await
        .unwrap()
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count as usize))
        .sum()
}

async fn patch_spec(fns: &Api<Function>, name: &str, spec: serde_json::Value) {
    fns.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": spec})),
    )
    .await
    .unwrap();
}

struct Setup {
    env: BuildEnv,
    work: tempfile::TempDir,
}

async fn setup() -> Setup {
    let env = BuildEnv::start(true).await;
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("hello.py"), PY_V1).unwrap();
    std::fs::write(work.path().join("requirements.txt"), "six==1.16.0\n").unwrap();
    std::fs::write(work.path().join("handler.js"), NODE).unwrap();
    std::fs::write(
        work.path().join("package.json"),
        r#"{"name": "fn", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}}"#,
    )
    .unwrap();
    std::fs::write(
        work.path().join("broken.txt"),
        "kubeless-rs-no-such-package-anywhere==0.0.1\n",
    )
    .unwrap();
    Setup { env, work }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_node_are_built_pushed_and_run_and_rebuilt_only_on_change() {
    let s = setup().await;
    let (c, dir) = (&s.env.cluster, s.work.path());
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);

    // Deploy both; the CLI waits and shows the build's steps on the way.
    let started = Instant::now();
    let (ok, out, err) = kubeless(
        c,
        dir,
        &[
            "function",
            "deploy",
            "pyb",
            "-n",
            NS,
            "--runtime",
            "python3.11",
            "--handler",
            "hello.handler",
            "--from-file",
            "hello.py",
            "--dependencies",
            "requirements.txt",
            "--wait",
        ],
    )
    .await;
    assert!(ok, "deploy pyb: {out}{err}");
    report!(
        "build step: pyb deployed, built and ready in {:?}",
        started.elapsed()
    );
    assert!(err.contains("Building"), "the wait shows the build: {err}");
    assert!(err.contains("build step"), "and its step: {err}");
    let (ok, out, err) = kubeless(
        c,
        dir,
        &[
            "function",
            "deploy",
            "ndb",
            "-n",
            NS,
            "--runtime",
            "nodejs20",
            "--handler",
            "handler.handler",
            "--from-file",
            "handler.js",
            "--dependencies",
            "package.json",
            "--wait",
        ],
    )
    .await;
    assert!(ok, "deploy ndb: {out}{err}");

    assert_eq!(call(c, dir, "pyb").await, "v1 six 1.16.0");
    assert_eq!(call(c, dir, "ndb").await, "---built");

    let registry = kubeless_oci::Registry::new(kubeless_oci::RegistryOptions {
        insecure: true,
        ..Default::default()
    })
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), NS);
    let mut first_py = String::new();
    for name in ["pyb", "ndb"] {
        let b = build_status(&fns, name).await;
        assert_eq!(b.state, "Built", "{b:?}");
        let image = b.image.clone().unwrap();
        let prefix = format!("{}/functions/{NS}/{name}:", s.env.registry.addr);
        assert!(image.starts_with(&prefix), "{image}");
        assert!(
            registry.exists(&image).await.unwrap().is_some(),
            "{image} pushed"
        );
        // The Deployment runs the built image with no install step.
        let pod = deployments
            .get(name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        assert_eq!(pod.containers[0].image.as_deref(), Some(image.as_str()));
        assert!(pod.init_containers.is_none(), "{:?}", pod.init_containers);
        assert_eq!(
            fns.get(name)
                .await
                .unwrap()
                .status
                .unwrap()
                .image
                .as_deref(),
            Some(image.as_str())
        );
        assert_eq!(events(&c.client, name, "Building").await, 1, "{name}");
        assert_eq!(events(&c.client, name, "Built").await, 1, "{name}");
        assert_eq!(jobs_of(&c.client, name).await.len(), 1, "{name}");
        if name == "pyb" {
            first_py = image;
        }
    }
    // describe shows the image and the build.
    let (ok, out, _) = kubeless(c, dir, &["function", "describe", "pyb", "-n", NS]).await;
    assert!(ok);
    assert!(out.contains(&format!("Image:        {first_py}")), "{out}");
    assert!(out.contains("Build:        Built"), "{out}");

    // A change outside the image (the timeout) builds nothing: same image, same one Job.
    let job = jobs_of(&c.client, "pyb").await;
    patch_spec(&fns, "pyb", json!({"timeout": "30"})).await;
    wait_ready_generation(&fns, "pyb").await;
    assert_eq!(
        build_status(&fns, "pyb").await.image.as_deref(),
        Some(first_py.as_str())
    );
    assert_eq!(jobs_of(&c.client, "pyb").await, job, "no new build Job");
    assert_eq!(events(&c.client, "pyb", "Building").await, 1);

    // New code builds once, and the function answers with it.
    let took = update_code(c, dir, "pyb", PY_V2, "v2 six 1.16.0").await;
    report!("build step: pyb v2 rebuilt and serving in {took:?}");
    let v2 = build_status(&fns, "pyb").await;
    assert_ne!(v2.image.as_deref(), Some(first_py.as_str()));
    assert_eq!(events(&c.client, "pyb", "Building").await, 2);

    // Rolling back to v1 reuses its image: no Job, a Reused Event, the v1 answer.
    let took = update_code(c, dir, "pyb", PY_V1, "v1 six 1.16.0").await;
    report!("build step: pyb rolled back to v1 (image reused) in {took:?}");
    let back = build_status(&fns, "pyb").await;
    assert_eq!(back.image.as_deref(), Some(first_py.as_str()));
    assert!(back.job.is_none(), "{back:?}");
    assert_eq!(
        events(&c.client, "pyb", "Building").await,
        2,
        "nothing built"
    );
    assert_eq!(events(&c.client, "pyb", "Reused").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_dependency_file_is_build_failed_within_seconds() {
    let s = setup().await;
    let (c, dir) = (&s.env.cluster, s.work.path());
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    let started = Instant::now();
    let (ok, out, err) = kubeless(
        c,
        dir,
        &[
            "function",
            "deploy",
            "broken",
            "-n",
            NS,
            "--runtime",
            "python3.11",
            "--handler",
            "hello.handler",
            "--from-file",
            "hello.py",
            "--dependencies",
            "broken.txt",
            "--wait",
        ],
    )
    .await;
    let took = started.elapsed();
    report!("build step: a broken requirements file failed the deploy after {took:?}");
    assert!(!ok, "deploy --wait fails: {out}{err}");
    assert!(err.contains("BuildFailed"), "{err}");
    assert!(
        err.contains("kubeless-rs-no-such-package-anywhere"),
        "the install log: {err}"
    );
    let f = fns.get("broken").await.unwrap();
    let status = f.status.unwrap();
    let ready = find_condition(&status.conditions, "Ready").unwrap();
    assert!(!ready.is_true());
    assert_eq!(ready.reason.as_deref(), Some("BuildFailed"));
    let message = ready.message.clone().unwrap_or_default();
    assert!(message.contains("install"), "{message}");
    assert_eq!(status.build.unwrap().state, "Failed");
    assert_eq!(events(&c.client, "broken", "BuildFailed").await, 1);
    // No Deployment for a function whose image could not be built.
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), NS);
    assert!(deployments.get_opt("broken").await.unwrap().is_none());
    assert!(took < Duration::from_secs(90), "{took:?}");

    // Fixing the file builds and runs it.
    let (ok, out, err) = kubeless(
        c,
        dir,
        &[
            "function",
            "update",
            "broken",
            "-n",
            NS,
            "--dependencies",
            "requirements.txt",
            "--wait",
        ],
    )
    .await;
    assert!(ok, "update broken: {out}{err}");
    assert_eq!(call(c, dir, "broken").await, "v1 six 1.16.0");
}

const GO_HELLO: &str = "package kubeless\n\n\
import \"github.com/kubeless/kubeless/pkg/functions\"\n\n\
func Hello(event functions.Event, context functions.Context) (string, error) {\n\
\treturn \"built go \" + context.Runtime, nil\n}\n";

/// A registry that asks for credentials, given in the `kubeless-registry-credentials` Secret
/// (Kubeless's name): the build pushes with them, the controller finds images with them, and the
/// function pods pull the built image with them (the controller adds the Secret to the pods'
/// imagePullSecrets). The function is a Go one: its compile step's output is what the layer
/// carries, and the built image runs it with no compile step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_credentials_and_a_compiled_go_function() {
    let up = "builder:s3cret-pass";
    let env = BuildEnv::start_with(true, Some(up), &["runtime-go"]).await;
    let c = &env.cluster;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let fns: Api<Function> = Api::namespaced(c.client.clone(), NS);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(c.client.clone(), NS);
    let (user, password) = up.split_once(':').unwrap();
    let config =
        json!({"auths": {env.registry.addr.clone(): {"username": user, "password": password}}});
    secrets
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "kubeless-registry-credentials"},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": config.to_string()}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    std::fs::write(dir.join("hello.go"), GO_HELLO).unwrap();
    let started = Instant::now();
    let (ok, out, err) = kubeless(
        c,
        dir,
        &[
            "function",
            "deploy",
            "gob",
            "-n",
            NS,
            "--runtime",
            "go1.19",
            "--handler",
            "hello.Hello",
            "--from-file",
            "hello.go",
            "--wait",
        ],
    )
    .await;
    assert!(ok, "deploy gob: {out}{err}");
    report!(
        "build step: a Go function built, pushed with credentials and ready in {:?}",
        started.elapsed()
    );
    assert_eq!(call(c, dir, "gob").await, "built go go1.19");
    let b = build_status(&fns, "gob").await;
    assert_eq!(b.state, "Built");
    let image = b.image.unwrap();
    // The registry refuses anonymous reads, and has the image for the Secret's credentials.
    let anonymous = kubeless_oci::Registry::new(kubeless_oci::RegistryOptions {
        insecure: true,
        ..Default::default()
    })
    .unwrap();
    assert!(
        anonymous.exists(&image).await.is_err(),
        "anonymous read refused"
    );
    let authed = kubeless_oci::Registry::new(kubeless_oci::RegistryOptions {
        insecure: true,
        docker_config: Some(config.to_string().into_bytes()),
        ..Default::default()
    })
    .unwrap();
    assert!(authed.exists(&image).await.unwrap().is_some());
    // The pods pull with the Secret and run no compile step.
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), NS);
    let pod = deployments
        .get("gob")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert!(pod.init_containers.is_none());
    let pull: Vec<String> = pod
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(pull, vec!["kubeless-registry-credentials".to_string()]);
}
