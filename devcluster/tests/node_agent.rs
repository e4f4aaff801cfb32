#![cfg(test)]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! devcluster's runner as a node of a real control plane (kube-apiserver, kube-controller-manager,
//! kube-scheduler and etcd built by scripts/k8s/build.sh), through the `devcluster node` binary:
//! the Node registers and stays Ready (its Lease renewed), the real scheduler binds a
//! Deployment's pod to it, the pod runs as a local process at its own address, the real
//! EndpointSlice controller lists that address, stock kubectl's logs, exec, attach and
//! port-forward go through the API server to the node's kubelet API, the pod's ServiceAccount
//! token authenticates to the API server, and deleting the Deployment stops the process.
//!
//! A real API server refuses loopback addresses in EndpointSlices, so the test runs in a network
//! namespace of its own where `10.244.0.0/16` is local (a `local` route on its `lo`), and node-a
//! gives its pods addresses there. A second node, node-b, keeps devcluster's loopback pod
//! addresses, and the test shows the API server refusing its pod's address.
//! Skipped, with a line saying how to build them, when the binaries are not built.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_control_plane::{ControlPlane, ControlPlaneOptions, TESTED_VERSIONS, bin_dir, is_built};
use kubeless_testkit::{jsonpath, kubectl, output_text, report};

const NODE: &str = "node-a";
/// The node whose pods keep loopback addresses.
const LOOPBACK_NODE: &str = "node-b";
/// node-a's pod addresses, local in the test's network namespace.
const POD_RANGE: &str = "10.244.0.0/16";
/// Set in the test process that runs inside the network namespace: the namespace's name.
const NETNS_ENV: &str = "DEVCLUSTER_NODE_TEST_NETNS";

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
      nodeSelector: {kubernetes.io/hostname: node-a}
      volumes:
      - name: secret
        secret: {secretName: web-secret}
      containers:
      - name: echo
        image: hashicorp/http-echo:1.0
        args: ["-text=hello from node-a", "-listen=:5678"]
        ports: [{name: http, containerPort: 5678}]
        env:
        - name: GREETING
          valueFrom: {configMapKeyRef: {name: web-settings, key: greeting}}
        - name: PASSWORD
          valueFrom: {secretKeyRef: {name: web-secret, key: password}}
        - {name: PASSWORD_FILE, value: /etc/web/password}
        volumeMounts: [{name: secret, mountPath: /etc/web}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-settings}
data: {greeting: bonjour}
---
apiVersion: v1
kind: Secret
metadata: {name: web-secret}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

/// A pod on the node with loopback pod addresses, behind a Service.
const LOOPBACK_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: loop, labels: {app: loop}}
spec:
  nodeSelector: {kubernetes.io/hostname: node-b}
  containers:
  - name: echo
    image: hashicorp/http-echo:1.0
    args: ["-text=hello from node-b", "-listen=:5678"]
    ports: [{name: http, containerPort: 5678}]
---
apiVersion: v1
kind: Service
metadata: {name: loop}
spec:
  selector: {app: loop}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

/// A container that reads its stdin (`kubectl attach -i`) until EOF.
const READER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: node-a}
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
    for node in [NODE, LOOPBACK_NODE] {
        ok(
            admin,
            &[
                "wait",
                "--for=condition=Ready",
                &format!("node/{node}"),
                "--timeout=60s",
            ],
        );
    }
    times.push(("nodes Ready", t0.elapsed()));
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
        pod_ip.starts_with("10.244."),
        "pod IP {pod_ip:?} from {POD_RANGE}"
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

    // The real EndpointSlice controller reads the pod's status.
    let t2 = Instant::now();
    let ready_addresses = || {
        jsonpath(
            admin,
            &["endpointslices", "-l", "kubernetes.io/service-name=web"],
            "{range .items[*].endpoints[*]}{.addresses[0]} {.conditions.ready}{end}",
        )
    };
    let filled = (0..240).any(|_| {
        ready_addresses() == format!("{pod_ip} true") || {
            std::thread::sleep(Duration::from_millis(250));
            false
        }
    });
    assert!(
        filled,
        "the Service's EndpointSlice lists {pod_ip}, ready: {:?}\n{}",
        ready_addresses(),
        ok(admin, &["get", "events"])
    );
    times.push(("EndpointSlice filled", t2.elapsed()));

    // On node-b the pod has a loopback address, which the controller lists and the API server
    // refuses: endpoint addresses "may not be in the loopback range".
    let applied = kubectl(admin, &["apply", "-f", "-"], Some(LOOPBACK_POD));
    assert!(applied.status.success(), "{}", output_text(&applied));
    ok(
        admin,
        &["wait", "--for=condition=Ready", "pod/loop", "--timeout=60s"],
    );
    let loop_ip = jsonpath(admin, &["pod/loop"], "{.status.podIP}");
    assert!(loop_ip.starts_with("127."), "node-b's pod IP {loop_ip:?}");
    let refused = (0..240).any(|_| {
        let events = jsonpath(
            admin,
            &[
                "events",
                "--field-selector",
                "involvedObject.kind=Service,involvedObject.name=loop,reason=FailedToUpdateEndpointSlices",
            ],
            "{.items[*].message}",
        );
        events.contains(&format!("\"{loop_ip}\": may not be in the loopback range")) || {
            std::thread::sleep(Duration::from_millis(250));
            false
        }
    });
    assert!(
        refused,
        "the EndpointSlice controller tried to list {loop_ip} and was refused:\n{}",
        ok(admin, &["get", "events"])
    );
    let listed = jsonpath(
        admin,
        &["endpointslices", "-l", "kubernetes.io/service-name=loop"],
        "{.items[*].endpoints[*].addresses[*]}",
    );
    assert_eq!(listed, "", "no loopback address in an EndpointSlice");
    ok(admin, &["delete", "pod", "loop", "--wait"]);

    // logs, exec and port-forward go API server -> kubelet API.
    let logs = ok(admin, &["logs", &pod]);
    assert!(logs.contains("listening on"), "{logs}");
    let tail = ok(admin, &["logs", &pod, "--tail=1", "--timestamps"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("20"), "a timestamp first: {tail}");
    let hi = ok(admin, &["exec", &pod, "--", "echo", "hi"]);
    assert_eq!(hi, "hi\n");
    // The ConfigMap and Secret the pod refers to, read by the node (the Node authorizer lets
    // it read exactly those).
    let refs = ok(
        admin,
        &[
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            "echo $GREETING $PASSWORD; cat $PASSWORD_FILE",
        ],
    );
    assert_eq!(refs, "bonjour s3cret\ns3cret");
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

/// `devcluster node ...` (the binary), logging to a file; stopped by PID.
struct NodeProcess(std::process::Child);

impl NodeProcess {
    /// SIGTERM, as Ctrl-C: the agent stops its pods and exits; SIGKILL after 30 s.
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.0.try_wait() {
            return Some(status);
        }
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        None
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Node<'a> {
    name: &'a str,
    pod_ip_range: Option<&'a str>,
    /// `--pods`: process (the default) or container.
    pods: &'a str,
    state: PathBuf,
    log: PathBuf,
}

fn start_node(
    creds: &kube_control_plane::NodeCredentials,
    client_ca: &Path,
    node: &Node,
) -> NodeProcess {
    let log = std::fs::File::create(&node.log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devcluster"));
    cmd.arg("node")
        .arg("--kubeconfig")
        .arg(&creds.kubeconfig)
        .args(["--node-name", node.name])
        .arg("--kubelet-cert")
        .arg(&creds.serving.cert_path)
        .arg("--kubelet-key")
        .arg(&creds.serving.key_path)
        .arg("--client-ca")
        .arg(client_ca)
        .arg("--state-dir")
        .arg(&node.state);
    if let Some(range) = node.pod_ip_range {
        cmd.args(["--pod-ip-range", range]);
    }
    cmd.args(["--pods", node.pods]);
    // Heartbeats every 2 s, so the test sees them (60 s by default).
    cmd.args(["--node-status-period", "2"]);
    let child = cmd
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

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output();
    match out {
        Ok(o) if o.status.success() => {}
        other => panic!(
            "ip {args:?} failed ({other:?}): this test makes a network namespace, which needs root and iproute2"
        ),
    }
}

/// Deletes the network namespace when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

const TEST: &str = "the_runner_is_a_node_of_a_real_control_plane";

/// One control plane at a time: each starts four processes on a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn the_runner_is_a_node_of_a_real_control_plane() {
    let versions: Vec<&str> = TESTED_VERSIONS
        .into_iter()
        .filter(|v| is_built(&bin_dir(v)))
        .collect();
    if std::env::var_os(NETNS_ENV).is_none() {
        let _serial = SERIAL.lock().await;
        for v in TESTED_VERSIONS.iter().filter(|v| !versions.contains(v)) {
            report!(
                "SKIP {TEST} at Kubernetes {v}: not built in {} (run scripts/k8s/build.sh {v})",
                bin_dir(v).display()
            );
        }
        if versions.is_empty() {
            return;
        }
        // Run again inside a network namespace where POD_RANGE is local.
        let netns = Netns(format!("devcluster-node-test-{}", std::process::id()));
        ip(&["netns", "add", &netns.0]);
        ip(&["-n", &netns.0, "link", "set", "lo", "up"]);
        ip(&[
            "-n", &netns.0, "route", "add", "local", POD_RANGE, "dev", "lo",
        ]);
        let exe = std::env::current_exe().unwrap();
        let status = Command::new("ip")
            .args(["netns", "exec", &netns.0])
            .arg(exe)
            .args(["--exact", TEST, "--nocapture"])
            .env(NETNS_ENV, &netns.0)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "{TEST} in network namespace {}: {status}",
            netns.0
        );
        return;
    }
    for version in versions {
        in_namespace(version).await;
    }
}

/// One version, inside the test's network namespace.
async fn in_namespace(version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions::new(
        bin_dir(version),
        dir.path().join("cp"),
    ))
    .await
    .unwrap_or_else(|e| panic!("starting Kubernetes {version}: {e}"));
    report!("Kubernetes {version} started: {}", cp.times());
    let client_ca = dir.path().join("kubelet-client-ca.crt");
    let ca = dir.path().join("ca.crt");
    let mut nodes = Vec::new();
    let mut logs = Vec::new();
    for (name, range) in [(NODE, Some(POD_RANGE)), (LOOPBACK_NODE, None)] {
        let creds = cp.node_credentials(name).unwrap();
        std::fs::write(&client_ca, &creds.kubelet_client_ca_pem).unwrap();
        std::fs::write(&ca, &creds.ca_pem).unwrap();
        let node = Node {
            name,
            pod_ip_range: range,
            pods: "process",
            state: dir.path().join(name),
            log: dir.path().join(format!("{name}.log")),
        };
        nodes.push(start_node(&creds, &client_ca, &node));
        logs.push(node.log);
    }
    let admin = cp.admin_kubeconfig().to_path_buf();
    let server = cp.server_url().to_string();
    let state = dir.path().join(NODE);
    let checked = {
        let (admin, ca) = (admin.clone(), ca.clone());
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
            for log in &logs {
                report!("--- end of {}\n{}", log.display(), tail(log, 40));
            }
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
    for (mut node, log) in nodes.into_iter().zip(&logs) {
        let status = node.stop();
        assert!(
            status.is_some_and(|s| s.success()),
            "devcluster node exits cleanly on SIGTERM: {status:?}\n{}",
            tail(log, 40)
        );
    }
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
    let ready = |field: &str| {
        jsonpath(
            admin,
            &["node", NODE],
            &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
        )
    };
    assert_eq!(ready("status"), "True");
    // Status heartbeats: the Ready condition's heartbeat moves, its transition stays.
    let (beat, transition) = (ready("lastHeartbeatTime"), ready("lastTransitionTime"));
    poll("a status heartbeat", Duration::from_secs(10), || {
        (ready("lastHeartbeatTime") != beat).then_some(())
    });
    assert_eq!(ready("lastTransitionTime"), transition);
    assert_eq!(
        jsonpath(admin, &["node", NODE], "{.spec.taints}"),
        "",
        "no taint"
    );
}

/// The image scripts/images.sh builds first: a Debian base with a shell.
const BASE_IMAGE: &str = "localhost/kubeless-rs/debian-base:bookworm";

const CONTAINER_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: boxed}
spec:
  containers:
  - name: main
    image: localhost/kubeless-rs/debian-base:bookworm
    imagePullPolicy: Never
    command: ["sh", "-c", "echo started in a container; exec sleep 600"]
"#;

/// `devcluster node --pods container`: a pod runs from its image with podman, and logs, exec
/// and the ServiceAccount volume at its real path work through the real API server.
#[tokio::test(flavor = "multi_thread")]
async fn a_container_mode_node_runs_pods_from_their_images() {
    const NAME: &str = "container_mode";
    if std::env::var_os(NETNS_ENV).is_some() {
        return;
    }
    let Some(version) = TESTED_VERSIONS.into_iter().find(|v| is_built(&bin_dir(v))) else {
        report!("SKIP {NAME}: no Kubernetes built (run scripts/k8s/build.sh)");
        return;
    };
    let image = Command::new("podman")
        .args(["image", "exists", BASE_IMAGE])
        .status();
    if !image.is_ok_and(|s| s.success()) {
        report!(
            "SKIP {NAME}: podman has no {BASE_IMAGE} (install podman and run scripts/images.sh build)"
        );
        return;
    }
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let cp = ControlPlane::start(ControlPlaneOptions::new(
        bin_dir(version),
        dir.path().join("cp"),
    ))
    .await
    .unwrap_or_else(|e| panic!("starting Kubernetes {version}: {e}"));
    let creds = cp.node_credentials(NODE).unwrap();
    let client_ca = dir.path().join("kubelet-client-ca.crt");
    std::fs::write(&client_ca, &creds.kubelet_client_ca_pem).unwrap();
    let node = Node {
        name: NODE,
        pod_ip_range: None,
        pods: "container",
        state: dir.path().join("node"),
        log: dir.path().join("node.log"),
    };
    let mut process = start_node(&creds, &client_ca, &node);
    let admin = cp.admin_kubeconfig().to_path_buf();
    let checked = tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        poll("the Node", Duration::from_secs(30), || {
            (!jsonpath(&admin, &["node", NODE], "{.metadata.name}").is_empty()).then_some(())
        });
        ok(
            &admin,
            &[
                "wait",
                "--for=condition=Ready",
                "node/node-a",
                "--timeout=60s",
            ],
        );
        let applied = kubectl(&admin, &["apply", "-f", "-"], Some(CONTAINER_POD));
        assert!(applied.status.success(), "{}", output_text(&applied));
        let ready = kubectl(
            &admin,
            &[
                "wait",
                "--for=condition=Ready",
                "pod/boxed",
                "--timeout=120s",
            ],
            None,
        );
        assert!(
            ready.status.success(),
            "{}\n{}",
            output_text(&ready),
            ok(&admin, &["get", "pod", "boxed", "-o", "yaml"])
        );
        let running = t0.elapsed();
        let id = jsonpath(
            &admin,
            &["pod/boxed"],
            "{.status.containerStatuses[0].containerID}",
        );
        assert!(id.starts_with("podman://"), "{id}");
        assert_eq!(ok(&admin, &["logs", "boxed"]), "started in a container\n");
        let inside = ok(
            &admin,
            &[
                "exec",
                "boxed",
                "--",
                "sh",
                "-c",
                "grep ^ID= /etc/os-release; ls /var/run/secrets/kubernetes.io/serviceaccount",
            ],
        );
        assert_eq!(inside, "ID=debian\nca.crt\nnamespace\ntoken\n");
        ok(&admin, &["delete", "pod", "boxed", "--timeout=60s"]);
        running
    })
    .await;
    let status = process.stop();
    match checked {
        Ok(running) => report!(
            "Kubernetes {version}: container-mode node: pod Running {:.1} s after the Node appeared",
            running.as_secs_f64()
        ),
        Err(e) => {
            report!("--- end of devcluster node's log\n{}", tail(&node.log, 40));
            std::panic::resume_unwind(e.into_panic());
        }
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        tail(&node.log, 40)
    );
    cp.shutdown();
}
