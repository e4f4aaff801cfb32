#![cfg(test)]
//! Stock `kubectl port-forward` into a pod the runner started: over the WebSocket
//! tunnel (kubectl 1.32's first choice) and the SPDY upgrade (its fallback), to a pod
//! and through a Service, with concurrent connections, a closed port and RBAC.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Options};
use kubeless_testkit::{kubectl, output_text};

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", output_text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An HTTP/1.1 server on the pod address that echoes method, path and body, one
/// thread per connection, keep-alive.
const MANIFESTS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - name: main
    image: python:3
    command: ["python3", "-c"]
    args:
    - |
      import http.server, os
      class H(http.server.BaseHTTPRequestHandler):
          protocol_version = "HTTP/1.1"
          def answer(self, body):
              self.send_response(200)
              self.send_header("Content-Length", str(len(body)))
              self.end_headers()
              self.wfile.write(body)
          def do_GET(self):
              self.answer(("GET %s" % self.path).encode())
          def do_POST(self):
              n = int(self.headers.get("Content-Length") or 0)
              self.answer(("POST %s " % self.path).encode() + self.rfile.read(n))
          def log_message(self, *args):
              pass
      addr = (os.environ["DEVCLUSTER_POD_IP"], 8080)
      http.server.ThreadingHTTPServer(addr, H).serve_forever()
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

/// A running `kubectl port-forward`, killed when dropped.
#[derive(Debug)]
struct PortForward {
    child: Child,
    local: u16,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PortForward {
    fn output(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            self.stdout.lock().unwrap(),
            self.stderr.lock().unwrap()
        )
    }

    /// Waits for kubectl to exit by itself.
    fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn collect(
    stream: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            into.lock().unwrap().push_str(&format!("{line}\n"));
            let _ = tx.send(line);
        }
    });
    rx
}

/// Starts `kubectl port-forward TARGET LOCAL:REMOTE` and waits until it listens.
fn port_forward(
    kubeconfig: &Path,
    auth: &[&str],
    target: &str,
    remote: u16,
    env: &[(&str, &str)],
) -> Result<PortForward, String> {
    let local = free_port();
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(auth)
        .args(["-v=6", "port-forward", target, &format!("{local}:{remote}")])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is missing: apt-get install -y kubernetes-client");
    let stdout = Arc::new(Mutex::new(String::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let lines = collect(child.stdout.take().unwrap(), stdout.clone());
    collect(child.stderr.take().unwrap(), stderr.clone());
    let mut pf = PortForward {
        child,
        local,
        stdout,
        stderr,
    };
    // For a Service kubectl shows the pod's port its target port resolves to.
    let want = format!("Forwarding from 127.0.0.1:{local} -> ");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.starts_with(&want) => return Ok(pf),
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if pf.child.try_wait().unwrap().is_some() {
            break;
        }
    }
    let _ = pf.wait_exit(Duration::from_secs(5));
    Err(pf.output())
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn send(conn: &mut TcpStream, method: &str, path: &str, body: &str) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
}

/// Reads one response with a Content-Length and returns its body.
fn receive(conn: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = conn.read(&mut byte).unwrap();
        assert!(
            n > 0,
            "connection closed after {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn call(port: u16, method: &str, path: &str, body: &str) -> String {
    let mut c = connect(port);
    send(&mut c, method, path, body);
    receive(&mut c)
}

fn run(kc: PathBuf) {
    ok(&kubectl(&kc, &["apply", "-f", "-"], Some(MANIFESTS)));
    ok(&kubectl(
        &kc,
        &["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"],
        None,
    ));

    // WebSocket tunnel: several requests, each on its own forwarded connection.
    let pf = port_forward(&kc, &[], "pod/web", 8080, &[]).unwrap();
    assert_eq!(call(pf.local, "GET", "/one", ""), "GET /one");
    assert_eq!(call(pf.local, "POST", "/two", "a body"), "POST /two a body");
    assert_eq!(call(pf.local, "GET", "/three?x=1", ""), "GET /three?x=1");
    // Two connections open at once, requests interleaved on both.
    let (mut a, mut b) = (connect(pf.local), connect(pf.local));
    send(&mut a, "GET", "/a1", "");
    send(&mut b, "POST", "/b1", "from b");
    assert_eq!(receive(&mut b), "POST /b1 from b");
    assert_eq!(receive(&mut a), "GET /a1");
    send(&mut b, "GET", "/b2", "");
    send(&mut a, "POST", "/a2", &"x".repeat(100_000));
    assert_eq!(receive(&mut a), format!("POST /a2 {}", "x".repeat(100_000)));
    assert_eq!(receive(&mut b), "GET /b2");
    drop((a, b));
    let out = pf.output();
    assert!(
        out.contains("GET https://")
            && out.contains("/pods/web/portforward 101 Switching Protocols"),
        "the WebSocket upgrade (a GET) is what kubectl used\n{out}"
    );
    assert_eq!(out.matches("Handling connection for").count(), 5, "{out}");
    drop(pf);

    // The SPDY upgrade, kubectl's fallback for servers without the tunnel.
    let pf = port_forward(
        &kc,
        &[],
        "pod/web",
        8080,
        &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")],
    )
    .unwrap();
    assert_eq!(
        call(pf.local, "POST", "/spdy", "over spdy"),
        "POST /spdy over spdy"
    );
    assert_eq!(call(pf.local, "GET", "/spdy2", ""), "GET /spdy2");
    let out = pf.output();
    assert!(
        out.contains("POST https://")
            && out.contains("/pods/web/portforward 101 Switching Protocols"),
        "{out}"
    );
    drop(pf);

    // A Service: kubectl picks a pod behind it and maps port 80 to the target port.
    let pf = port_forward(&kc, &[], "svc/web", 80, &[]).unwrap();
    assert_eq!(
        call(pf.local, "GET", "/via-service", ""),
        "GET /via-service"
    );
    let out = pf.output();
    assert!(
        out.contains(&format!("127.0.0.1:{} -> 8080", pf.local)),
        "{out}"
    );
    drop(pf);

    // A port nobody listens on: kubectl shows the pod-side error, and (client-go since
    // 1.29 closes the session after an error on the error stream) exits.
    let mut pf = port_forward(&kc, &[], "pod/web", 9999, &[]).unwrap();
    let mut c = connect(pf.local);
    send(&mut c, "GET", "/", "");
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    let status = pf.wait_exit(Duration::from_secs(20));
    let out = pf.output();
    assert!(
        out.contains("error forwarding port 9999 to pod web, uid ")
            && out.contains("failed to connect to"),
        "{out}"
    );
    assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{out}");
    assert!(out.contains("lost connection to pod"), "{out}");
    drop(pf);

    // RBAC: a ServiceAccount with `get` on pods and pods/portforward is refused
    // (port-forward needs `create`, for the WebSocket GET too), then admitted.
    ok(&kubectl(&kc, &["create", "serviceaccount", "viewer"], None));
    ok(&kubectl(
        &kc,
        &[
            "create",
            "role",
            "pf-get",
            "--verb=get,list",
            "--resource=pods,pods/portforward",
        ],
        None,
    ));
    ok(&kubectl(
        &kc,
        &[
            "create",
            "rolebinding",
            "pf-get",
            "--role=pf-get",
            "--serviceaccount=default:viewer",
        ],
        None,
    ));
    let token = ok(&kubectl(&kc, &["create", "token", "viewer"], None));
    let token_arg = format!("--token={}", token.trim());
    let refused = port_forward(&kc, &[&token_arg], "pod/web", 8080, &[]).unwrap_err();
    assert!(
        refused.contains(
            r#"pods "web" is forbidden: User "system:serviceaccount:default:viewer" cannot create resource "pods/portforward" in API group "" in the namespace "default""#
        ),
        "{refused}"
    );
    ok(&kubectl(
        &kc,
        &[
            "create",
            "role",
            "pf-create",
            "--verb=create",
            "--resource=pods/portforward",
        ],
        None,
    ));
    ok(&kubectl(
        &kc,
        &[
            "create",
            "rolebinding",
            "pf-create",
            "--role=pf-create",
            "--serviceaccount=default:viewer",
        ],
        None,
    ));
    let pf = port_forward(&kc, &[&token_arg], "pod/web", 8080, &[]).unwrap();
    assert_eq!(call(pf.local, "GET", "/allowed", ""), "GET /allowed");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_port_forward_into_a_runner_pod() {
    let state = tempfile::tempdir().unwrap();
    let cluster = DevCluster::start(Options::for_tests(state.path()))
        .await
        .unwrap();
    let kc = cluster.kubeconfig_path().to_path_buf();
    let result = tokio::task::spawn_blocking(move || run(kc)).await;
    cluster.shutdown().await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}
