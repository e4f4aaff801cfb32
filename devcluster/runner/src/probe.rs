//! Readiness, liveness and startup probes (httpGet, tcpSocket, exec).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::spec::ProcessSpec;

/// Timing parameters of a probe, with Kubernetes defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Self {
        let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(0) as u64);
        Self {
            initial_delay: secs(p.initial_delay_seconds, 0),
            period: secs(p.period_seconds, 10).max(Duration::from_millis(100)),
            timeout: secs(p.timeout_seconds, 1).max(Duration::from_millis(100)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// Resolves a port number or a named container port.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(i) => u16::try_from(*i).ok(),
        IntOrString::String(s) => s.parse().ok().or_else(|| {
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
        }),
    }
}

fn host_of(host: Option<&str>, pod_ip: Ipv4Addr) -> IpAddr {
    host.and_then(|h| h.parse().ok())
        .unwrap_or(IpAddr::V4(pod_ip))
}

/// Runs a probe once. `Ok(())` is success; `Err` carries the failure message.
pub async fn probe_once(
    probe: &Probe,
    container: &Container,
    pod_ip: Ipv4Addr,
    exec_env: Option<&ProcessSpec>,
    cwd: &std::path::Path,
) -> Result<(), String> {
    let timing = Timing::of(probe);
    let attempt = async {
        if let Some(h) = &probe.http_get {
            let port = resolve_port(&h.port, container)
                .ok_or_else(|| format!("unknown port {:?}", h.port))?;
            if h.scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
            {
                return Err("HTTPS probes are not supported by devcluster".to_string());
            }
            let addr = SocketAddr::new(host_of(h.host.as_deref(), pod_ip), port);
            let headers: Vec<(String, String)> = h
                .http_headers
                .iter()
                .flatten()
                .map(|hh| (hh.name.clone(), hh.value.clone()))
                .collect();
            return http_get(addr, h.path.as_deref().unwrap_or("/"), &headers).await;
        }
        if let Some(t) = &probe.tcp_socket {
            let port = resolve_port(&t.port, container)
                .ok_or_else(|| format!("unknown port {:?}", t.port))?;
            let addr = SocketAddr::new(host_of(t.host.as_deref(), pod_ip), port);
            return TcpStream::connect(addr)
                .await
                .map(|_| ())
                .map_err(|e| format!("dial {addr}: {e}"));
        }
        if let Some(e) = &probe.exec {
            let argv = e.command.clone().unwrap_or_default();
            let Some((program, args)) = argv.split_first() else {
                return Err("exec probe without command".into());
            };
            let prefix = exec_env.and_then(|s| s.exec_prefix.split_first());
            let mut cmd = match prefix {
                // A container: the command runs inside it, with its own env.
                Some((runner, runner_args)) => {
                    let mut cmd = tokio::process::Command::new(runner);
                    cmd.args(runner_args).arg(program).args(args);
                    cmd
                }
                None => {
                    let mut cmd = tokio::process::Command::new(program);
                    cmd.args(args);
                    if let Some(spec) = exec_env {
                        cmd.env_clear().envs(&spec.env);
                    }
                    cmd
                }
            };
            cmd.current_dir(cwd)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true);
            let status = cmd
                .status()
                .await
                .map_err(|e| format!("exec {program}: {e}"))?;
            return if status.success() {
                Ok(())
            } else {
                Err(format!("command exited with {status}"))
            };
        }
        Err("probe has no handler (grpc is not supported)".to_string())
    };
    match tokio::time::timeout(timing.timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out after {:?}", timing.timeout)),
    }
}

/// A minimal HTTP/1.1 GET: success is a status in 200..400.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("dial {addr}: {e}"))?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 128];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed HTTP response from {addr}"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn serve(status: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..4 {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        addr
    }

    fn container() -> Container {
        serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn http_probe_status_codes() {
        let ok = serve("200 OK").await;
        assert!(http_get(ok, "/healthz", &[]).await.is_ok());
        let bad = serve("503 Service Unavailable").await;
        let err = http_get(bad, "/", &[]).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
    }

    #[tokio::test]
    async fn probe_kinds() {
        let ok = serve("204 No Content").await;
        let ip = Ipv4Addr::LOCALHOST;
        let c = container();
        let dir = std::env::temp_dir();
        let p: Probe = serde_json::from_value(
            serde_json::json!({"httpGet": {"path": "/", "port": ok.port()}}),
        )
        .unwrap();
        assert!(probe_once(&p, &c, ip, None, &dir).await.is_ok());
        let p: Probe =
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": ok.port()}})).unwrap();
        assert!(probe_once(&p, &c, ip, None, &dir).await.is_ok());
        // Port 1 on loopback: nothing listens.
        let p: Probe =
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": 1}})).unwrap();
        assert!(probe_once(&p, &c, ip, None, &dir).await.is_err());
        let p: Probe = serde_json::from_value(
            serde_json::json!({"exec": {"command": ["sh", "-c", "exit 1"]}}),
        )
        .unwrap();
        assert!(probe_once(&p, &c, ip, None, &dir).await.is_err());
        let p: Probe =
            serde_json::from_value(serde_json::json!({"exec": {"command": ["true"]}})).unwrap();
        assert!(probe_once(&p, &c, ip, None, &dir).await.is_ok());
    }

    #[test]
    fn named_ports_and_timing_defaults() {
        let c = container();
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Some(8080)
        );
        assert_eq!(resolve_port(&IntOrString::String("nope".into()), &c), None);
        assert_eq!(resolve_port(&IntOrString::Int(81), &c), Some(81));
        let t = Timing::of(&Probe::default());
        assert_eq!(
            (t.period, t.failure_threshold, t.success_threshold),
            (Duration::from_secs(10), 3, 1)
        );
    }
}
