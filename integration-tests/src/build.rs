//! What the build-step test and bench share: Debian's docker-registry on loopback with the
//! runtime images pushed, devcluster with the runtime catalogue behind that registry (as the
//! chart's `global.imageRegistry` writes it), and the function-controller binary with the build
//! step pointed at the registry.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, PostParams};
use kubeless_testkit::{ServiceProcess, TestCluster};
use serde_json::json;

use crate::images::{Registry, image_tag, images_sh};
use crate::{repo_root, require_bins};

/// The registry, the cluster and the controller, stopped in reverse order when dropped.
pub struct BuildEnv {
    /// The controller process (dropped first).
    pub controller: ServiceProcess,
    /// devcluster with the pod runner.
    pub cluster: TestCluster,
    /// The registry the runtime images are in and function images go to.
    pub registry: Registry,
}

impl BuildEnv {
    /// Starts everything; `build_default` is the controller's `--build-step` (Functions can
    /// still say otherwise in `spec.build.enabled`).
    pub async fn start(build_default: bool) -> Self {
        Self::start_with(build_default, None, &["runtime-python", "runtime-nodejs"]).await
    }

    /// With a registry that asks for `user_password` (`user:password`) when given, and the
    /// runtime images `runtimes` (scripts/images.sh names) pushed.
    pub async fn start_with(
        build_default: bool,
        user_password: Option<&str>,
        runtimes: &[&str],
    ) -> Self {
        let registry = match user_password {
            Some(up) => Registry::with_auth(up),
            None => Registry::start(),
        };
        push(&registry, runtimes);
        let cluster = TestCluster::start(Some(devcluster::repo_images_dir())).await;
        Self::on(cluster, registry, build_default, Vec::new(), &[]).await
    }

    /// devcluster in container mode (podman): the images `runtimes` and the builder, packed by
    /// `scripts/images.sh build` from the binaries it compiled, pushed to the registry, and the
    /// controller's builder image that registry's copy, so every step of a build Job and the
    /// function pods run from the registry; `install_env` is added to the install steps (a
    /// package index the containers can use). Stop it with [`shutdown`](Self::shutdown).
    pub async fn start_in_containers(runtimes: &[&str], install_env: &[(&str, String)]) -> Self {
        let mut images = runtimes.to_vec();
        images.push("builder");
        let mut build = vec!["build"];
        build.extend(&images);
        let started = Instant::now();
        images_sh(&build);
        kubeless_testkit::report!(
            "images.sh build {}: {:.1}s",
            images.join(" "),
            started.elapsed().as_secs_f64()
        );
        let registry = Registry::start();
        push(&registry, &images);
        let builder = format!(
            "{}/kubeless-rs/builder:{}",
            registry.addr,
            image_tag("builder")
        );
        let cluster = TestCluster::with_containers().await;
        Self::on(
            cluster,
            registry,
            true,
            vec![("KUBELESS_BUILDER_IMAGE", builder)],
            install_env,
        )
        .await
    }

    /// The runtime catalogue behind `registry` in `cluster` (`install_env` in its install
    /// steps), and the controller (`env` added to its environment) building into
    /// `<registry>/functions`.
    async fn on(
        cluster: TestCluster,
        registry: Registry,
        build_default: bool,
        env: Vec<(&str, String)>,
        install_env: &[(&str, String)],
    ) -> Self {
        require_bins(&[
            "function-controller",
            "kubeless",
            "kubeless-runtime",
            "kubeless-builder",
        ]);
        use_registry_runtimes(&cluster.client, &registry.addr, install_env).await;
        // The functions' namespace admits only pods that pass PodSecurity `restricted`: the
        // build Job's pods too.
        let nss: Api<Namespace> = Api::all(cluster.client.clone());
        nss.patch(
            kubeless_testkit::NS,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling namespace {}: {e}", kubeless_testkit::NS));
        let mut all = vec![
            ("KUBELESS_LEADER_ELECT", "false".to_string()),
            ("KUBELESS_LISTEN_ON_POD_IP", "true".into()),
            ("KUBELESS_BUILD_STEP", build_default.to_string()),
            (
                "KUBELESS_BUILD_REGISTRY",
                format!("{}/functions", registry.addr),
            ),
            ("KUBELESS_BUILD_INSECURE_REGISTRY", "true".into()),
            ("POD_NAMESPACE", "kubeless".into()),
            ("POD_NAME", "function-controller-0".into()),
        ];
        all.extend(env);
        let controller = cluster.start_service("function-controller", &all);
        Self {
            controller,
            cluster,
            registry,
        }
    }

    /// Stops the controller, then the cluster (its pods' containers), then the registry.
    pub async fn shutdown(self) {
        let Self {
            controller,
            cluster,
            registry,
        } = self;
        drop(controller);
        cluster.shutdown().await;
        drop(registry);
    }
}

/// Pushes the images `names` (scripts/images.sh names) to `registry`.
fn push(registry: &Registry, names: &[&str]) {
    let out = registry.push(names);
    assert!(
        out.status.success(),
        "pushing the images (build them first: scripts/images.sh build {}): {}",
        names.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The built-in runtime catalogue with every image behind `registry`, in the `kubeless-config`
/// ConfigMap, as the chart writes it with `global.imageRegistry` (the builder takes the runtime
/// image from there as its base). `install_env` goes into every install step's environment
/// (the catalogue's per-phase `env`).
pub async fn use_registry_runtimes(
    client: &Client,
    registry: &str,
    install_env: &[(&str, String)],
) {
    let path = repo_root()
        .join("deploy/helm/kubeless/charts/function-controller/files/runtime-images.json");
    let json = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut images = json.replace("\"image\": \"", &format!("\"image\": \"{registry}/"));
    assert_ne!(images, json, "the catalogue names its images");
    if !install_env.is_empty() {
        let mut catalogue: serde_json::Value =
            serde_json::from_str(&images).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let env: serde_json::Map<String, serde_json::Value> = install_env
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        for runtime in catalogue.as_array_mut().into_iter().flatten() {
            for version in runtime["versions"].as_array_mut().into_iter().flatten() {
                for phase in version["images"].as_array_mut().into_iter().flatten() {
                    if phase["phase"] == "installation" {
                        phase["env"] = json!(env);
                    }
                }
            }
        }
        images = catalogue.to_string();
    }
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kubeless"}}))
        .unwrap_or_else(|e| panic!("namespace manifest: {e}"));
    nss.create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace kubeless: {e}"));
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kubeless-config", "namespace": "kubeless"},
        "data": {"runtime-images": images}
    }))
    .unwrap_or_else(|e| panic!("config manifest: {e}"));
    Api::<ConfigMap>::namespaced(client.clone(), "kubeless")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("creating kubeless-config: {e}"));
}

/// POSTs `data` to the function's Service through the API server's service proxy; the answer
/// when it is a 200.
pub async fn call_via_proxy(client: &Client, ns: &str, name: &str, data: &str) -> Option<String> {
    let path = format!("/api/v1/namespaces/{ns}/services/{name}:http-function-port/proxy/");
    let req = http::Request::post(path)
        .header("content-type", "text/plain")
        .body(data.as_bytes().to_vec())
        .ok()?;
    tokio::time::timeout(Duration::from_secs(10), client.request_text(req))
        .await
        .ok()?
        .ok()
}
