#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Container mode end to end: the runtime-python image built by scripts/images.sh (buildah),
//! pushed to Debian's docker-registry on loopback, and run by devcluster with podman
//! (`Options::with_containers`, `devcluster up --pods container`).
//!
//! (a) A Pod from the registry image reads a ConfigMap volume, a Secret env var, its pod
//! address (fieldRef `status.podIP`) and its ServiceAccount token, and calls the API server
//! in-cluster (KUBERNETES_SERVICE_HOST/PORT, the mounted ca.crt and token), under a restricted
//! securityContext and limits; checked through `kubectl logs` and the pod status. A Pod that
//! exits 3 reports it; a Pod whose image is not in the registry waits with ErrImagePull /
//! ImagePullBackOff and an Event.
//! (b) A Python function (the runtime image with its handler in a ConfigMap volume) answers
//! HTTP at its pod address and through its Service.
//!
//! (c) The umbrella Helm chart (deploy/helm, rendered by the real Helm engine) with the
//! function-controller and the http-trigger-controller (gateway on), its images from the
//! registry: the controllers run from their images under the chart's ServiceAccounts and RBAC
//! with kube-rs's in-cluster config, in namespaces that enforce PodSecurity `restricted`, and a
//! Function they deploy runs from the runtime image and answers at its pod address and through
//! the gateway (an HTTPTrigger).
//!
//! Needs root, podman (runc), buildah, docker-registry and debootstrap (`ensure_containers` in
//! scripts/lib.sh); skipped with a message when podman does not run. `scripts/images.sh build`
//! compiles every image's binary first (cached after scripts/test.sh's `images.sh build`);
//! `KUBELESS_IMAGE_CARGO=selected` limits it to these images' binaries on a cold target dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Options};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out));
    out
}

fn images_sh(args: &[&str]) -> Output {
    run(Command::new("bash")
        .arg(repo_root().join("scripts/images.sh"))
        .args(args))
}

/// Why podman cannot run containers here, or None when it can.
fn podman_unusable() -> Option<String> {
    match Command::new("podman")
        .args(["info", "--format", "{{.Host.OCIRuntime.Name}}"])
        .stdin(Stdio::null())
        .output()
    {
        Err(e) => Some(format!("podman is not installed ({e})")),
        Ok(o) if !o.status.success() => Some(format!("`podman info` failed: {}", text(&o))),
        Ok(_) => None,
    }
}

/// The registry of the test, stopped by the PID it wrote when dropped.
struct Registry {
    dir: tempfile::TempDir,
    addr: String,
}

impl Registry {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = images_sh(&["registry-start", dir.path().to_str().unwrap()]);
        let addr = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{}", text(&out));
        Self { dir, addr }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // The copies podman pulled from this registry go with it (their layers are shared with
        // the local images, the names would pile up run after run).
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
            .arg(repo_root().join("scripts/images.sh"))
            .args(["registry-stop", self.dir.path().to_str().unwrap()])
            .output();
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=30s")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is missing: apt-get install -y kubernetes-client");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn jsonpath(kubeconfig: &Path, what: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    let expr = format!("jsonpath={path}");
    args.extend(["-o", &expr]);
    let out = kubectl(kubeconfig, &args, None);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls `f` every 200 ms until it returns Some, at most `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn objects(image: &str, missing_image: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
data: {{greeting: hello-from-configmap}}
---
apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData: {{password: s3cret-value}}
---
apiVersion: v1
kind: Pod
metadata: {{name: reader}}
spec:
  restartPolicy: Never
  securityContext:
    runAsNonRoot: true
    seccompProfile: {{type: RuntimeDefault}}
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["python3", "-c"]
    args:
    - |
      import json, os, ssl, urllib.request, urllib.error
      sa = "/var/run/secrets/kubernetes.io/serviceaccount"
      print("greeting=" + open("/etc/settings/greeting").read())
      print("password=" + os.environ["PASSWORD"])
      print("ip=" + os.environ["MY_IP"] + " bind=" + os.environ["KUBELESS_LISTEN_ADDRESS"])
      print("uid=%d" % os.getuid())
      print("token-bytes=%d" % len(open(sa + "/token").read()))
      print("namespace=" + open(sa + "/namespace").read())
      try:
          open("/written", "w")
          print("rootfs=writable")
      except OSError:
          print("rootfs=read-only")
      url = "https://%s:%s/api/v1/namespaces/default/pods/reader" % (
          os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
      req = urllib.request.Request(url, headers={{"Authorization": "Bearer " + open(sa + "/token").read()}})
      ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
      try:
          code = urllib.request.urlopen(req, context=ctx).status
          body = ""
      except urllib.error.HTTPError as e:
          code = e.code
          body = json.loads(e.read()).get("message", "")
      print("api=%d %s" % (code, body))
    env:
    - name: PASSWORD
      valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}
    - name: MY_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    volumeMounts:
    - {{name: settings, mountPath: /etc/settings}}
    resources:
      limits: {{memory: 128Mi, cpu: 500m}}
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL]}}
  volumes:
  - name: settings
    configMap: {{name: settings}}
---
apiVersion: v1
kind: Pod
metadata: {{name: exits}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: {image}
    command: ["sh", "-c", "echo bye; exit 3"]
  - name: nocmd
    image: {image}
    command: ["/no/such/binary"]
  # Over its memory limit: the kernel kills it.
  - name: hog
    image: {image}
    command: ["python3", "-c", "x = bytearray(256 * 1024 * 1024); print(len(x))"]
    resources:
      limits: {{memory: 32Mi}}
---
apiVersion: v1
kind: Pod
metadata: {{name: missing}}
spec:
  containers:
  - name: main
    image: {missing_image}
"#
    )
}

const HANDLER: &str = r#"
def hello(event, context):
    return "hello " + event["data"].decode() if isinstance(event["data"], bytes) else "hello " + str(event["data"])
"#;

fn function_objects(image: &str) -> String {
    let handler = HANDLER
        .lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: hello-code}}
data:
  handler.py: |
{handler}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: hello}}
spec:
  replicas: 1
  selector: {{matchLabels: {{function: hello}}}}
  template:
    metadata: {{labels: {{function: hello}}}}
    spec:
      securityContext: {{runAsNonRoot: true}}
      containers:
      - name: hello
        image: {image}
        env:
        - {{name: FUNC_HANDLER, value: hello}}
        - {{name: MOD_NAME, value: handler}}
        - {{name: FUNC_RUNTIME, value: python3.11}}
        - {{name: KUBELESS_INSTALL_VOLUME, value: /kubeless}}
        ports: [{{containerPort: 8080, name: http}}]
        readinessProbe:
          httpGet: {{path: /healthz, port: 8080}}
          periodSeconds: 1
        # Runs inside the container (podman exec): the file is only there.
        livenessProbe:
          exec: {{command: [cat, /kubeless/handler.py]}}
          periodSeconds: 1
          failureThreshold: 2
        volumeMounts: [{{name: code, mountPath: /kubeless}}]
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {{drop: [ALL]}}
      volumes:
      - name: code
        configMap: {{name: hello-code}}
---
apiVersion: v1
kind: Service
metadata: {{name: hello}}
spec:
  selector: {{function: hello}}
  ports: [{{name: http, port: 8080, targetPort: 8080}}]
"#
    )
}

/// The tests build and push images with buildah: one at a time.
static IMAGES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn pods_run_from_registry_images_with_podman() {
    let _one_at_a_time = IMAGES.lock().await;
    if let Some(why) = podman_unusable() {
        eprintln!(
            "SKIPPED container_mode: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    // Build (cached when nothing changed) and push the runtime image.
    let start = Instant::now();
    let built = images_sh(&[
        "build",
        "function-controller",
        "http-trigger-controller",
        "runtime-python",
    ]);
    eprintln!(
        "images.sh build function-controller http-trigger-controller runtime-python: {:.1}s\n{}",
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&built.stdout)
    );
    let registry = Registry::start();
    let pushed = images_sh(&["push", &registry.addr, "runtime-python"]);
    eprintln!("{}", String::from_utf8_lossy(&pushed.stdout).trim());
    let image = format!("{}/kubeless-rs/runtime-python:3.11", registry.addr);
    let missing = format!("{}/kubeless-rs/not-pushed:1.0", registry.addr);
    // A locally stored copy must not stand in for the registry: `Always` pulls.
    let _ = Command::new("podman")
        .args(["rmi", "--force", &image])
        .output();

    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()).with_containers())
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    let result = tokio::task::spawn_blocking(move || {
        checks(&kc, &image, &missing);
    })
    .await;
    cluster.shutdown().await;
    // No container of this cluster is left behind.
    let filter = format!(
        "label=io.devcluster.state-dir={}",
        std::path::absolute(state.path().join("pods"))
            .unwrap()
            .display()
    );
    let left = run(Command::new("podman").args(["ps", "--all", "--quiet", "--filter", &filter]));
    drop(registry);
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
    assert!(
        left.stdout.is_empty(),
        "containers left after shutdown: {}",
        text(&left)
    );
}

fn checks(kc: &Path, image: &str, missing: &str) {
    let applied = kubectl(kc, &["apply", "-f", "-"], Some(&objects(image, missing)));
    assert!(applied.status.success(), "{}", text(&applied));

    // (a) The reader runs to completion from the registry image.
    let phase = wait_for(Duration::from_secs(180), "pod reader to finish", || {
        let p = jsonpath(kc, &["pod", "reader"], "{.status.phase}");
        matches!(p.as_str(), "Succeeded" | "Failed").then_some(p)
    });
    let logs = kubectl(kc, &["logs", "reader"], None);
    let log = String::from_utf8_lossy(&logs.stdout).to_string();
    assert_eq!(phase, "Succeeded", "{}", text(&logs));
    let pod_ip = jsonpath(kc, &["pod", "reader"], "{.status.podIP}");
    for want in [
        "greeting=hello-from-configmap".to_string(),
        "password=s3cret-value".to_string(),
        format!("ip={pod_ip} bind={pod_ip}"),
        "uid=65532".to_string(),
        "namespace=default".to_string(),
        "rootfs=read-only".to_string(),
        // The token and CA work in-cluster; the default ServiceAccount may not read pods.
        "api=403".to_string(),
        "system:serviceaccount:default:default".to_string(),
    ] {
        assert!(
            log.contains(&want),
            "{want:?} not in the reader's log:\n{log}"
        );
    }
    assert!(!log.contains("token-bytes=0"), "{log}");
    let image_id = jsonpath(
        kc,
        &["pod", "reader"],
        "{.status.containerStatuses[0].imageID}",
    );
    assert!(image_id.contains("@sha256:"), "{image_id}");
    let id = jsonpath(
        kc,
        &["pod", "reader"],
        "{.status.containerStatuses[0].containerID}",
    );
    assert!(id.starts_with("podman://"), "{id}");

    // Exit codes reach the status.
    wait_for(Duration::from_secs(120), "pod exits to fail", || {
        (jsonpath(kc, &["pod", "exits"], "{.status.phase}") == "Failed").then_some(())
    });
    let terminated = jsonpath(
        kc,
        &["pod", "exits"],
        "{.status.containerStatuses[?(@.name==\"main\")].state.terminated.exitCode} {.status.containerStatuses[?(@.name==\"main\")].state.terminated.reason}",
    );
    assert_eq!(terminated, "3 Error");
    let start_error = jsonpath(
        kc,
        &["pod", "exits"],
        "{.status.containerStatuses[?(@.name==\"nocmd\")].state.terminated}",
    );
    assert!(
        start_error.contains(r#""exitCode":128"#)
            && start_error.contains(r#""reason":"StartError""#)
            && start_error.contains("/no/such/binary"),
        "{start_error}"
    );
    let hog = jsonpath(
        kc,
        &["pod", "exits"],
        "{.status.containerStatuses[?(@.name==\"hog\")].state.terminated.exitCode}",
    );
    assert_eq!(hog, "137", "the memory limit did not stop the container");
    let logs = kubectl(kc, &["logs", "exits", "-c", "main"], None);
    assert_eq!(String::from_utf8_lossy(&logs.stdout).trim(), "bye");

    // An image the registry does not have: waiting, with the reason and an Event.
    let reason = wait_for(Duration::from_secs(60), "pod missing to wait", || {
        let r = jsonpath(
            kc,
            &["pod", "missing"],
            "{.status.containerStatuses[0].state.waiting.reason}",
        );
        matches!(r.as_str(), "ErrImagePull" | "ImagePullBackOff").then_some(r)
    });
    eprintln!("missing image: {reason}");
    wait_for(
        Duration::from_secs(30),
        "a Failed event for pod missing",
        || {
            let ev = kubectl(
                kc,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=missing",
                    "-o",
                    "jsonpath={.items[*].reason}",
                ],
                None,
            );
            String::from_utf8_lossy(&ev.stdout)
                .contains("Failed")
                .then_some(())
        },
    );

    // (b) A Python function from the runtime image, through its Service.
    let applied = kubectl(kc, &["apply", "-f", "-"], Some(&function_objects(image)));
    assert!(applied.status.success(), "{}", text(&applied));
    let ip = wait_for(
        Duration::from_secs(120),
        "a ready endpoint of service hello",
        || {
            let ip = jsonpath(kc, &["endpoints", "hello"], "{.subsets[0].addresses[0].ip}");
            (!ip.is_empty()).then_some(ip)
        },
    );
    let direct = wait_for(
        Duration::from_secs(30),
        "the function at its pod address",
        || {
            let out = Command::new("curl")
                .args(["-sS", "--max-time", "5", "-d", "world"])
                .arg(format!("http://{ip}:8080/"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).to_string())
        },
    );
    assert_eq!(direct.trim(), "hello world");
    let proxied = kubectl(
        kc,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/services/hello:http/proxy/?probe=1",
        ],
        None,
    );
    assert!(proxied.status.success(), "{}", text(&proxied));
    assert!(
        String::from_utf8_lossy(&proxied.stdout).starts_with("hello"),
        "{}",
        text(&proxied)
    );
    // kubectl exec runs inside the container.
    let pod = jsonpath(
        kc,
        &["pods", "-l", "function=hello"],
        "{.items[0].metadata.name}",
    );
    // The exec liveness probe has passed all along.
    std::thread::sleep(Duration::from_secs(3));
    let restarts = jsonpath(
        kc,
        &["pod", &pod],
        "{.status.containerStatuses[0].restartCount}",
    );
    assert_eq!(
        restarts, "0",
        "the exec liveness probe failed in the container"
    );
    let exec = kubectl(
        kc,
        &["exec", &pod, "--", "cat", "/kubeless/handler.py"],
        None,
    );
    assert!(
        String::from_utf8_lossy(&exec.stdout).contains("def hello"),
        "{}",
        text(&exec)
    );
    // Deleting the pod stops its container (SIGTERM, grace period) and the status goes.
    let deleted = kubectl(kc, &["delete", "deployment", "hello", "--wait=true"], None);
    assert!(deleted.status.success(), "{}", text(&deleted));
    wait_for(Duration::from_secs(60), "the function pod to go", || {
        jsonpath(
            kc,
            &["pods", "-l", "function=hello"],
            "{.items[*].metadata.name}",
        )
        .is_empty()
        .then_some(())
    });
}

/// The chart rendered by the real Helm engine (helm-python-sdk), as one YAML stream.
fn render_chart(values: &serde_json::Value) -> String {
    let script = r#"
import json, sys
import helm_python
chart = helm_python.Chart.load(sys.argv[1])
out = chart.render(values=json.loads(sys.argv[2]), name="kubeless", namespace=sys.argv[3], is_install=True)
print("\n---\n".join(t for p, t in sorted(out.items()) if p.endswith((".yaml", ".yml")) and t.strip()))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(repo_root().join("deploy/helm/kubeless"))
        .arg(values.to_string())
        .arg("kubeless")
        .stdin(Stdio::null())
        .output()
        .expect("python3 must be installed");
    assert!(
        out.status.success(),
        "rendering the chart failed (needs `pip install helm-python-sdk pyyaml`, which scripts/test.sh does):\n{}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_runs_from_the_registry_in_container_mode() {
    let _one_at_a_time = IMAGES.lock().await;
    if let Some(why) = podman_unusable() {
        eprintln!(
            "SKIPPED container_mode chart: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    let start = Instant::now();
    let built = images_sh(&[
        "build",
        "function-controller",
        "http-trigger-controller",
        "runtime-python",
    ]);
    eprintln!(
        "images.sh build function-controller http-trigger-controller runtime-python: {:.1}s\n{}",
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&built.stdout)
    );
    let registry = Registry::start();
    let pushed = images_sh(&[
        "push",
        &registry.addr,
        "function-controller",
        "http-trigger-controller",
        "runtime-python",
    ]);
    eprintln!("{}", String::from_utf8_lossy(&pushed.stdout).trim());

    // Host networking: each service binds its pod's address (a POD_IP fieldRef), as in
    // integration-tests/tests/chart_rbac.rs.
    let pod_ip = serde_json::json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}});
    let admin = serde_json::json!({"name": "KUBELESS_ADMIN_ADDR", "value": "$(POD_IP):8081"});
    let off = serde_json::json!({"enabled": false});
    let values = serde_json::json!({
        "global": {"imageRegistry": registry.addr, "imagePullPolicy": "Always", "logFormat": "text",
                   "probes": {"periodSeconds": 2, "timeoutSeconds": 2}},
        "function-controller": {"enabled": true, "extraEnv": [pod_ip, admin]},
        "http-trigger-controller": {"enabled": true, "gateway": {"enabled": true},
            "extraEnv": [pod_ip, admin, {"name": "KUBELESS_GATEWAY_ADDR", "value": "$(POD_IP):8080"}]},
        "cronjob-trigger-controller": off, "nats-trigger": off,
        "kafka-trigger": off, "kinesis-trigger": off, "dashboard": off,
    });
    let manifest = render_chart(&values);

    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()).with_containers())
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    let reg = registry.addr.clone();
    let result = tokio::task::spawn_blocking(move || chart_checks(&kc, &manifest, &reg)).await;
    cluster.shutdown().await;
    drop(registry);
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

const FUNCTION: &str = r#"
apiVersion: kubeless.io/v1beta1
kind: Function
metadata: {name: hello, namespace: functions}
spec:
  runtime: python3.11
  handler: handler.hello
  timeout: "10"
  function: |
    def hello(event, context):
        data = event["data"]
        if isinstance(data, bytes):
            data = data.decode()
        return "hello " + str(data)
---
apiVersion: kubeless.io/v1beta1
kind: HTTPTrigger
metadata: {name: hello, namespace: functions}
spec: {function-name: hello, path: hello}
"#;

fn chart_checks(kc: &Path, manifest: &str, registry: &str) {
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", text(&o));
        o
    };
    for ns in ["kubeless", "functions"] {
        ok(kubectl(kc, &["create", "namespace", ns], None));
        ok(kubectl(
            kc,
            &[
                "label",
                "namespace",
                ns,
                "pod-security.kubernetes.io/enforce=restricted",
            ],
            None,
        ));
    }
    let crds = repo_root().join("deploy/helm/kubeless/crds");
    ok(kubectl(kc, &["apply", "-f", crds.to_str().unwrap()], None));
    ok(kubectl(
        kc,
        &[
            "wait",
            "--for=condition=established",
            "crd/functions.kubeless.io",
            "--timeout=60s",
        ],
        None,
    ));
    ok(kubectl(kc, &["apply", "-f", "-"], Some(manifest)));
    for service in ["function-controller", "http-trigger-controller"] {
        wait_for(
            Duration::from_secs(180),
            &format!("the {service} pod Ready"),
            || {
                let ready = jsonpath(
                    kc,
                    &[
                        "pods",
                        "-n",
                        "kubeless",
                        "-l",
                        &format!("app.kubernetes.io/name={service}"),
                    ],
                    "{.items[0].status.conditions[?(@.type==\"Ready\")].status}",
                );
                (ready == "True").then_some(())
            },
        );
    }
    let controller = wait_for(
        Duration::from_secs(180),
        "the function-controller pod Ready",
        || {
            let ready = jsonpath(
                kc,
                &[
                    "pods",
                    "-n",
                    "kubeless",
                    "-l",
                    "app.kubernetes.io/name=function-controller",
                ],
                "{.items[0].metadata.name} {.items[0].status.conditions[?(@.type==\"Ready\")].status}",
            );
            ready.strip_suffix(" True").map(str::to_string)
        },
    );
    let image = jsonpath(
        kc,
        &["pod", "-n", "kubeless", &controller],
        "{.status.containerStatuses[0].imageID}",
    );
    assert!(
        image.starts_with(&format!("{registry}/kubeless-rs/function-controller:")),
        "{image}"
    );

    ok(kubectl(kc, &["apply", "-f", "-"], Some(FUNCTION)));
    let ip = wait_for(Duration::from_secs(180), "the function's pod Ready", || {
        let out = jsonpath(
            kc,
            &["pods", "-n", "functions", "-l", "function=hello"],
            "{.items[0].status.podIP} {.items[0].status.conditions[?(@.type==\"Ready\")].status}",
        );
        out.strip_suffix(" True").map(str::to_string)
    });
    let answer = wait_for(Duration::from_secs(30), "the function to answer", || {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5", "-d", "chart"])
            .arg(format!("http://{ip}:8080/"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    });
    assert_eq!(answer.trim(), "hello chart");
    let fn_image = jsonpath(
        kc,
        &["pods", "-n", "functions", "-l", "function=hello"],
        "{.items[0].status.containerStatuses[0].imageID}",
    );
    assert!(
        fn_image.starts_with(&format!("{registry}/kubeless-rs/runtime-python:")),
        "{fn_image}"
    );
    // Through the gateway of the http-trigger-controller, routed by the HTTPTrigger.
    let gateway = jsonpath(
        kc,
        &[
            "pods",
            "-n",
            "kubeless",
            "-l",
            "app.kubernetes.io/name=http-trigger-controller",
        ],
        "{.items[0].status.podIP}",
    );
    let via_gateway = wait_for(
        Duration::from_secs(60),
        "the function through the gateway",
        || {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "--fail",
                    "--max-time",
                    "5",
                    "-H",
                    "content-type: text/plain",
                    "-d",
                    "gateway",
                ])
                .arg(format!("http://{gateway}:8080/hello"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).to_string())
        },
    );
    assert_eq!(via_gateway.trim(), "hello gateway");
    for service in ["function-controller", "http-trigger-controller"] {
        let log = kubectl(
            kc,
            &[
                "logs",
                "-n",
                "kubeless",
                "-l",
                &format!("app.kubernetes.io/name={service}"),
                "--tail=-1",
            ],
            None,
        );
        let log = String::from_utf8_lossy(&log.stdout).to_string();
        assert!(!log.is_empty(), "no log from {service}");
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "{service}: {log}"
        );
    }
}
