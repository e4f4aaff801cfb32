#![cfg(test)]
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
//! The umbrella chart with every service from its image in container mode is
//! `chart_rbac.rs`'s `every_service_runs_from_its_image_in_container_mode`.
//!
//! Needs root, podman (runc), buildah, docker-registry and debootstrap (`ensure_containers` in
//! scripts/lib.sh); skipped with a message when podman does not run. Packs the binaries of a
//! former `scripts/images.sh build` (scripts/test.sh runs it before the tests) into the image.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Options};
use integration_tests::images::{Registry, images_sh, podman_unusable, run, text};
use kubeless_testkit::{jsonpath, kubectl};

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

#[tokio::test(flavor = "multi_thread")]
async fn pods_run_from_registry_images_with_podman() {
    if let Some(why) = podman_unusable() {
        kubeless_testkit::report!(
            "SKIPPED container_mode: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    let registry = Registry::start();
    let image = python_image_in(&registry);
    let missing = format!("{}/kubeless-rs/not-pushed:1.0", registry.addr);
    let left = in_container_cluster(move |kc| checks(kc, &image, &missing)).await;
    assert!(
        left.stdout.is_empty(),
        "containers left after shutdown: {}",
        text(&left)
    );
}

/// Packs and pushes runtime-python to `registry` and removes any local copy of the pushed name,
/// so that pods really pull it (pull policy `Always`); its reference.
fn python_image_in(registry: &Registry) -> String {
    let start = Instant::now();
    let built = images_sh(&["build", "runtime-python"]);
    kubeless_testkit::report!(
        "images.sh build runtime-python: {:.1}s\n{}",
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&built.stdout)
    );
    let pushed = registry.push(&["runtime-python"]);
    kubeless_testkit::report!("{}", String::from_utf8_lossy(&pushed.stdout).trim());
    let image = format!("{}/kubeless-rs/runtime-python:3.11", registry.addr);
    let _ = Command::new("podman")
        .args(["rmi", "--force", &image])
        .output();
    image
}

/// Runs `checks` (with the kubeconfig) against a new devcluster in container mode, shuts it
/// down, and re-raises a failed check; `podman ps` of the containers the cluster left.
async fn in_container_cluster(checks: impl FnOnce(&Path) + Send + 'static) -> Output {
    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()).with_containers())
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    let result = tokio::task::spawn_blocking(move || checks(&kc)).await;
    cluster.shutdown().await;
    let filter = format!(
        "label=io.devcluster.state-dir={}",
        std::path::absolute(state.path().join("pods"))
            .unwrap()
            .display()
    );
    let left = run(Command::new("podman").args(["ps", "--all", "--quiet", "--filter", &filter]));
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
    left
}

/// Waits for pod `name` to end; its phase.
fn finished(kc: &Path, name: &str, limit: Duration) -> String {
    wait_for(limit, &format!("pod {name} to finish"), || {
        let p = jsonpath(kc, &["pod", name], "{.status.phase}");
        matches!(p.as_str(), "Succeeded" | "Failed").then_some(p)
    })
}

fn checks(kc: &Path, image: &str, missing: &str) {
    let applied = kubectl(kc, &["apply", "-f", "-"], Some(&objects(image, missing)));
    assert!(applied.status.success(), "{}", text(&applied));

    // (a) The reader runs to completion from the registry image.
    let phase = finished(kc, "reader", Duration::from_secs(180));
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

/// Image pull secrets: from a registry that asks for basic auth, a pod whose
/// `imagePullSecrets` name a `kubernetes.io/dockerconfigjson` Secret for it pulls and runs; a pod
/// naming a Secret that does not exist gets a `FailedToRetrieveImagePullSecret` Event and, like
/// a pod with no secret, waits in `ErrImagePull`/`ImagePullBackOff`. Then `kubectl attach -i`
/// into a `stdin: true, stdinOnce: true` container of that image: its input reaches the
/// container, whose EOF ends it.
#[tokio::test(flavor = "multi_thread")]
async fn image_pull_secrets_and_attach_stdin() {
    if let Some(why) = podman_unusable() {
        kubeless_testkit::report!(
            "SKIPPED container_mode pull secrets: {why}. Install podman and runc: `source scripts/lib.sh && ensure_containers` (docs/images.md)."
        );
        return;
    }
    let registry = Registry::with_auth("puller:pull-s3cret");
    let image = python_image_in(&registry);
    let addr = registry.addr.clone();
    in_container_cluster(move |kc| {
        pull_secret_checks(kc, &addr, &image);
        attach_stdin_checks(kc, &image);
    })
    .await;
}

fn pull_secret_checks(kc: &Path, registry: &str, image: &str) {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = serde_json::json!({"auths": {registry: {"auth": b64("puller:pull-s3cret")}}});
    let pod = |name: &str, secret: Option<&str>| {
        let secrets = secret.map_or(String::new(), |s| {
            format!("\n  imagePullSecrets: [{{name: {s}}}]")
        });
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: Never{secrets}
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["python3", "-c", "print('pulled with credentials')"]
"#
        )
    };
    let objects = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: regcred}}
type: kubernetes.io/dockerconfigjson
data:
  .dockerconfigjson: {}
---{}---{}---{}"#,
        b64(&config.to_string()),
        pod("with-secret", Some("regcred")),
        pod("missing-secret", Some("no-such-secret")),
        pod("no-secret", None),
    );
    let applied = kubectl(kc, &["apply", "-f", "-"], Some(&objects));
    assert!(applied.status.success(), "{}", text(&applied));

    let phase = finished(kc, "with-secret", Duration::from_secs(180));
    let logs = kubectl(kc, &["logs", "with-secret"], None);
    assert_eq!(phase, "Succeeded", "{}", text(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("pulled with credentials"),
        "{}",
        text(&logs)
    );
    for pod in ["missing-secret", "no-secret"] {
        let (reason, message) = wait_for(
            Duration::from_secs(60),
            &format!("pod {pod} refused by the registry"),
            || {
                let r = jsonpath(
                    kc,
                    &["pod", pod],
                    "{.status.containerStatuses[0].state.waiting.reason}|{.status.containerStatuses[0].state.waiting.message}",
                );
                let (reason, message) = r.split_once('|')?;
                matches!(reason, "ErrImagePull" | "ImagePullBackOff")
                    .then(|| (reason.to_string(), message.to_string()))
            },
        );
        assert!(
            message.contains("unauthorized") || message.contains("authentication required"),
            "{pod}: {reason}: {message}"
        );
    }
    let events = kubectl(
        kc,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=missing-secret",
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ],
        None,
    );
    let events = String::from_utf8_lossy(&events.stdout).to_string();
    assert!(
        events.contains("FailedToRetrieveImagePullSecret") && events.contains("no-such-secret"),
        "{events}"
    );
}

fn attach_stdin_checks(kc: &Path, image: &str) {
    use std::io::Write;
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: reader}}
spec:
  restartPolicy: Never
  imagePullSecrets: [{{name: regcred}}]
  containers:
  - name: main
    image: {image}
    stdin: true
    stdinOnce: true
    command: ["python3", "-c", "import sys\nfor line in sys.stdin: print('got', line.strip().upper(), flush=True)\nprint('eof', flush=True)"]
"#
    );
    let applied = kubectl(kc, &["apply", "-f", "-"], Some(&pod));
    assert!(applied.status.success(), "{}", text(&applied));
    wait_for(Duration::from_secs(120), "pod reader running", || {
        (jsonpath(kc, &["pod", "reader"], "{.status.phase}") == "Running").then_some(())
    });
    let mut attach = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .args(["attach", "-i", "reader"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    attach
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\nworld\n")
        .unwrap();
    let out = attach.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let phase = finished(kc, "reader", Duration::from_secs(60));
    let logs = kubectl(kc, &["logs", "reader"], None);
    let log = String::from_utf8_lossy(&logs.stdout);
    assert_eq!(phase, "Succeeded", "{}", text(&logs));
    for want in ["got HELLO", "got WORLD", "eof"] {
        assert!(log.contains(want), "{want:?} not in:\n{log}");
    }
}
