#![cfg(test)]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! devcluster's runner as a node of a real control plane (kube-apiserver, kube-controller-manager,
//! kube-scheduler and etcd built by scripts/k8s/build.sh): the Node registers and stays Ready,
//! the real scheduler binds a Deployment's pod to it, the pod runs as a local process with a
//! 127.x address, the real EndpointSlice controller tries to list that address (and the API
//! server refuses it: no endpoint may be a loopback address), stock kubectl's logs,
//! exec and port-forward go through the API server to the node's kubelet API, the pod's
//! ServiceAccount token authenticates to the API server, and deleting the Deployment stops the
//! process. Skipped, with a line saying how to build them, when the binaries are not built.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_control_plane::{ControlPlane, ControlPlaneOptions, TESTED_VERSIONS, bin_dir, is_built};
use kubeless_testkit::{jsonpath, kubectl, output_text, report};

const NODE: &str = "node-a";

const MANIFESTS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: echo
        image: hashicorp/http-echo:1.0
        args: ["-text=hello from node-a", "-listen=:5678"]
        ports: [{name: http, containerPort: 5678}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

/// A container that reads its stdin (`kubectl attach -i`) until EOF.
const READER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    stdin: true
    stdinOnce: true
    command: ["sh", "-c", "while read l; do echo got $l; done; echo eof"]
"#;

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args, None);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `f` every 250 ms until it returns Some, for at most `limit`.
fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not seen within {limit:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// One HTTP GET; the body.
fn get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or(response))
}

/// Live processes whose environment mentions `needle` (the pods' HOME lies under the state dir).
fn processes_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if String::from_utf8_lossy(&environ).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// `kubectl port-forward POD LOCAL:REMOTE` until dropped.
struct PortForward(std::process::Child);

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn port_forward(kubeconfig: &Path, pod: &str, remote: u16) -> (PortForward, u16) {
    let local = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["port-forward", pod, &format!("{local}:{remote}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl is missing: apt-get install -y kubernetes-client");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let forward = PortForward(child);
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("kubectl port-forward says where it listens");
    assert!(line.starts_with("Forwarding from"), "{line}");
    (forward, local)
}

struct Checked {
    pod: String,
    pod_ip: String,
    times: Vec<(&'static str, Duration)>,
}

/// Everything asked of the node, through stock kubectl as cluster admin.
fn node_checks(admin: &Path, server: &str, ca: &Path, state: &Path) -> Checked {
    let t0 = Instant::now();
    let mut times = Vec::new();
    ok(
        admin,
        &[
            "wait",
            "--for=condition=Ready",
            &format!("node/{NODE}"),
            "--timeout=60s",
        ],
    );
    times.push(("node Ready", t0.elapsed()));
    let port = jsonpath(
        admin,
        &["node", NODE],
        "{.status.daemonEndpoints.kubeletEndpoint.Port}",
    );
    assert!(
        port.parse::<u16>().is_ok_and(|p| p > 0),
        "kubelet port {port:?}"
    );
    let address = jsonpath(
        admin,
        &["node", NODE],
        "{.status.addresses[?(@.type==\"InternalIP\")].address}",
    );
    assert_eq!(address, "127.0.0.1");
    let holder = jsonpath(
        admin,
        &["lease", "-n", "kube-node-lease", NODE],
        "{.spec.holderIdentity}",
    );
    assert_eq!(holder, NODE, "the node's Lease");

    let applied = kubectl(admin, &["apply", "-f", "-"], Some(MANIFESTS));
    assert!(applied.status.success(), "{}", output_text(&applied));
    let t1 = Instant::now();
    ok(
        admin,
        &["rollout", "status", "deployment/web", "--timeout=90s"],
    );
    times.push(("Deployment available", t1.elapsed()));
    let pod = jsonpath(
        admin,
        &["pods", "-l", "app=web"],
        "{.items[0].metadata.name}",
    );
    assert!(!pod.is_empty(), "the Deployment's pod");
    let pod_ref = format!("pod/{pod}");
    assert_eq!(
        jsonpath(admin, &[&pod_ref], "{.spec.nodeName}"),
        NODE,
        "scheduled by the real scheduler to the node"
    );
    assert_eq!(jsonpath(admin, &[&pod_ref], "{.status.phase}"), "Running");
    assert_eq!(
        jsonpath(admin, &[&pod_ref], "{.status.hostIP}"),
        "127.0.0.1"
    );
    let pod_ip = jsonpath(admin, &[&pod_ref], "{.status.podIP}");
    assert!(
        pod_ip.starts_with("127.") && pod_ip != "127.0.0.1",
        "pod IP {pod_ip:?}"
    );
    assert_eq!(
        jsonpath(admin, &[&pod_ref], "{.status.containerStatuses[0].ready}"),
        "true"
    );
    assert_eq!(
        get(&format!("{pod_ip}:5678"), "/").unwrap(),
        "hello from node-a\n",
        "the pod answers on its own address"
    );

    // The real EndpointSlice controller reads the pod's status and lists its address, which the
    // API server refuses: endpoint addresses "may not be in the loopback range". A real control
    // plane never holds endpoints of pods on 127.x addresses (docs/devcluster.md, "Node agent").
    let t2 = Instant::now();
    let refused = (0..240).any(|_| {
        let events = jsonpath(
            admin,
            &[
                "events",
                "--field-selector",
                "involvedObject.kind=Service,involvedObject.name=web,reason=FailedToUpdateEndpointSlices",
            ],
            "{.items[*].message}",
        );
        events.contains(&format!("\"{pod_ip}\": may not be in the loopback range")) || {
            std::thread::sleep(Duration::from_millis(250));
            false
        }
    });
    assert!(
        refused,
        "the EndpointSlice controller tried to list {pod_ip} and was refused:\n{}",
        ok(admin, &["get", "events", "-o", "wide"])
    );
    times.push(("EndpointSlice update refused", t2.elapsed()));
    let listed = jsonpath(
        admin,
        &["endpointslices", "-l", "kubernetes.io/service-name=web"],
        "{.items[*].endpoints[*].addresses[*]}",
    );
    assert_eq!(listed, "", "no loopback address in an EndpointSlice");

    // logs, exec and port-forward go API server -> kubelet API.
    let logs = ok(admin, &["logs", &pod]);
    assert!(logs.contains("listening on"), "{logs}");
    let tail = ok(admin, &["logs", &pod, "--tail=1", "--timestamps"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("20"), "a timestamp first: {tail}");
    let hi = ok(admin, &["exec", &pod, "--", "echo", "hi"]);
    assert_eq!(hi, "hi\n");
    let failed = kubectl(
        admin,
        &["exec", &pod, "--", "sh", "-c", "echo out; exit 3"],
        None,
    );
    assert_eq!(failed.status.code(), Some(3), "{}", output_text(&failed));
    assert_eq!(String::from_utf8_lossy(&failed.stdout), "out\n");
    let piped = kubectl(
        admin,
        &["exec", "-i", &pod, "--", "cat"],
        Some("through stdin\n"),
    );
    assert_eq!(
        String::from_utf8_lossy(&piped.stdout),
        "through stdin\n",
        "{}",
        output_text(&piped)
    );
    // attach: the container's output from the moment of attach, and its stdin.
    let applied = kubectl(admin, &["apply", "-f", "-"], Some(READER));
    assert!(applied.status.success(), "{}", output_text(&applied));
    ok(
        admin,
        &[
            "wait",
            "--for=jsonpath={.status.phase}=Running",
            "pod/reader",
            "--timeout=60s",
        ],
    );
    let attached = kubectl(admin, &["attach", "-i", "reader"], Some("one\ntwo\n"));
    let out = String::from_utf8_lossy(&attached.stdout);
    assert!(
        out.contains("got one\ngot two\neof"),
        "{}",
        output_text(&attached)
    );
    ok(admin, &["delete", "pod", "reader", "--wait"]);
    {
        let (_forward, local) = port_forward(admin, &pod, 5678);
        assert_eq!(
            get(&format!("127.0.0.1:{local}"), "/").unwrap(),
            "hello from node-a\n"
        );
    }

    // The pod's ServiceAccount token (TokenRequest bound to the pod): its kubeconfig, and the
    // token volume the API server's admission added.
    let whoami = ok(
        admin,
        &[
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            "kubectl auth whoami -o jsonpath='{.status.userInfo.username}'",
        ],
    );
    assert_eq!(whoami, "system:serviceaccount:default:default");
    let volumes: Vec<PathBuf> = std::fs::read_dir(state.join("pods/default"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&pod))
        .flat_map(|e| {
            std::fs::read_dir(e.path().join("volumes"))
                .unwrap()
                .flatten()
        })
        .map(|v| v.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("kube-api-access-"))
        })
        .collect();
    assert_eq!(volumes.len(), 1, "the kube-api-access volume");
    let token = std::fs::read_to_string(volumes[0].join("token")).unwrap();
    assert_eq!(
        std::fs::read_to_string(volumes[0].join("namespace")).unwrap(),
        "default"
    );
    assert_eq!(
        std::fs::read(volumes[0].join("ca.crt")).unwrap(),
        std::fs::read(ca).unwrap(),
        "kube-root-ca.crt"
    );
    let review = Command::new("kubectl")
        .env("KUBECONFIG", "/dev/null")
        .args(["--server", server, "--certificate-authority"])
        .arg(ca)
        .args([
            "--token",
            token.trim(),
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.extra}",
        ])
        .output()
        .unwrap();
    let extra = String::from_utf8_lossy(&review.stdout);
    assert!(review.status.success(), "{}", output_text(&review));
    assert!(
        extra.contains(&pod) && extra.contains(NODE),
        "the token is bound to the pod on the node: {extra}"
    );

    // Deleting the Deployment stops the process; the node agent removes the pod at the end.
    let pods_dir = state.join("pods").to_string_lossy().into_owned();
    assert!(
        !processes_with(&pods_dir).is_empty(),
        "the pod's process runs"
    );
    let t3 = Instant::now();
    ok(admin, &["delete", "deployment", "web"]);
    ok(admin, &["wait", "--for=delete", &pod_ref, "--timeout=60s"]);
    times.push(("pod deleted", t3.elapsed()));
    poll("the pod's process gone", Duration::from_secs(20), || {
        processes_with(&pods_dir).is_empty().then_some(())
    });
    assert!(
        get(&format!("{pod_ip}:5678"), "/").is_err(),
        "nothing listens any more"
    );
    Checked { pod, pod_ip, times }
}

/// `devcluster node ...` (the binary), logging to `log`; stopped by PID.
struct NodeProcess(std::process::Child);

impl NodeProcess {
    /// SIGTERM, as Ctrl-C: the agent stops its pods and exits.
    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("devcluster node did not stop within 30 s of SIGTERM");
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_node(
    kubeconfig: &Path,
    cert: &Path,
    key: &Path,
    client_ca: &Path,
    state: &Path,
    log: &Path,
) -> NodeProcess {
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .arg("node")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-name", NODE])
        .arg("--kubelet-cert")
        .arg(cert)
        .arg("--kubelet-key")
        .arg(key)
        .arg("--client-ca")
        .arg(client_ca)
        .arg("--state-dir")
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    NodeProcess(child)
}

/// The end of a log file, for failure messages.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let kept: Vec<&str> = text
        .lines()
        .rev()
        .filter(|l| !l.contains("extension-apiserver-authentication"))
        .take(lines)
        .collect();
    kept.into_iter().rev().collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_runner_is_a_node_of_a_real_control_plane() {
    let mut built = 0;
    for version in TESTED_VERSIONS {
        if !is_built(&bin_dir(version)) {
            report!(
                "SKIP the_runner_is_a_node_of_a_real_control_plane at Kubernetes {version}: not built in {} (run scripts/k8s/build.sh {version})",
                bin_dir(version).display()
            );
            continue;
        }
        built += 1;
        let dir = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let cp = ControlPlane::start(ControlPlaneOptions::new(
            bin_dir(version),
            dir.path().join("cp"),
        ))
        .await
        .unwrap_or_else(|e| panic!("starting Kubernetes {version}: {e}"));
        report!("Kubernetes {version} started: {}", cp.times());
        let creds = cp.node_credentials(NODE).unwrap();
        let client_ca = dir.path().join("kubelet-client-ca.crt");
        std::fs::write(&client_ca, &creds.kubelet_client_ca_pem).unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, &creds.ca_pem).unwrap();
        let state = dir.path().join("node");
        let node_log = dir.path().join("node.log");
        let node = start_node(
            &creds.kubeconfig,
            &creds.serving.cert_path,
            &creds.serving.key_path,
            &client_ca,
            &state,
            &node_log,
        );
        let admin = cp.admin_kubeconfig().to_path_buf();
        let server = cp.server_url().to_string();
        let checked = {
            let (admin, state, ca) = (admin.clone(), state.clone(), ca.clone());
            tokio::task::spawn_blocking(move || {
                let checked = node_checks(&admin, &server, &ca, &state);
                keeps_alive(&admin);
                checked
            })
            .await
        };
        let checked = match checked {
            Ok(c) => c,
            Err(e) => {
                report!("--- end of devcluster node's log\n{}", tail(&node_log, 40));
                for log in [
                    "kube-apiserver",
                    "kube-controller-manager",
                    "kube-scheduler",
                ] {
                    report!("--- end of {log}.log\n{}", tail(&cp.log_file(log), 30));
                }
                std::panic::resume_unwind(e.into_panic());
            }
        };
        let status = node.stop();
        assert!(
            status.success(),
            "devcluster node exits cleanly: {status:?}\n{}",
            tail(&node_log, 40)
        );
        let times: Vec<String> = checked
            .times
            .iter()
            .map(|(what, t)| format!("{what} {:.1} s", t.as_secs_f64()))
            .collect();
        report!(
            "Kubernetes {version}: node agent: pod {} at {}; {}; whole test {:.1} s",
            checked.pod,
            checked.pod_ip,
            times.join(", "),
            t0.elapsed().as_secs_f64()
        );
        cp.shutdown();
    }
    if built == 0 {
        report!(
            "SKIP the_runner_is_a_node_of_a_real_control_plane: no Kubernetes built (run scripts/k8s/build.sh)"
        );
    }
}

/// The node's Lease is renewed (every 10 s) and the Node stays Ready.
fn keeps_alive(admin: &Path) {
    let renewed = || {
        jsonpath(
            admin,
            &["lease", "-n", "kube-node-lease", NODE],
            "{.spec.renewTime}",
        )
    };
    let first = renewed();
    poll(
        "a renewal of the node's Lease",
        Duration::from_secs(20),
        || {
            let now = renewed();
            (!now.is_empty() && now != first).then_some(())
        },
    );
    assert_eq!(
        jsonpath(
            admin,
            &["node", NODE],
            "{.status.conditions[?(@.type==\"Ready\")].status}"
        ),
        "True"
    );
    assert_eq!(
        jsonpath(admin, &["node", NODE], "{.spec.taints}"),
        "",
        "no taint"
    );
}
