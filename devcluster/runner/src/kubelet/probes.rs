//! Startup, readiness and liveness probes of a running container (and readiness from the
//! first declared TCP port when the container has no readiness probe).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::sync::Notify;

use crate::probe::{Timing, probe_once};
use crate::spec::ProcessSpec;

use super::{Kind, Reporter};

pub(super) fn first_tcp_port(c: &Container) -> Option<u16> {
    c.ports
        .iter()
        .flatten()
        .find(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .and_then(|p| u16::try_from(p.container_port).ok())
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn probe_loop(
    rep: Arc<Reporter>,
    idx: usize,
    container: Container,
    ip: Ipv4Addr,
    spec: ProcessSpec,
    cwd: PathBuf,
    live_fail: Arc<Notify>,
    implicit_port_readiness: bool,
) {
    if let Some(p) = &container.startup_probe {
        let t = Timing::of(p);
        tokio::time::sleep(t.initial_delay).await;
        let mut failures = 0;
        loop {
            match probe_once(p, &container, ip, Some(&spec), &cwd).await {
                Ok(()) => break,
                Err(_) => {
                    failures += 1;
                    if failures >= t.failure_threshold {
                        live_fail.notify_one();
                        return;
                    }
                }
            }
            tokio::time::sleep(t.period).await;
        }
        let has_ready_check = container.readiness_probe.is_some()
            || (implicit_port_readiness && first_tcp_port(&container).is_some());
        rep.update(Kind::Main, idx, |c| {
            c.started = true;
            c.ready = !has_ready_check;
        });
    }
    let readiness = async {
        if let Some(p) = &container.readiness_probe {
            let t = Timing::of(p);
            tokio::time::sleep(t.initial_delay).await;
            let (mut ok, mut bad) = (0u32, 0u32);
            loop {
                match probe_once(p, &container, ip, Some(&spec), &cwd).await {
                    Ok(()) => {
                        ok += 1;
                        bad = 0;
                        if ok >= t.success_threshold {
                            rep.update(Kind::Main, idx, |c| c.ready = true);
                        }
                    }
                    Err(_) => {
                        bad += 1;
                        ok = 0;
                        if bad >= t.failure_threshold {
                            rep.update(Kind::Main, idx, |c| c.ready = false);
                        }
                    }
                }
                tokio::time::sleep(t.period).await;
            }
        } else if implicit_port_readiness && let Some(port) = first_tcp_port(&container) {
            // No readiness probe: ready once the declared port accepts connections.
            let addr = std::net::SocketAddr::from((ip, port));
            for _ in 0..6000 {
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    rep.update(Kind::Main, idx, |c| c.ready = true);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Never ready within 10 minutes: stay not ready like a failing probe.
        }
    };
    let liveness = async {
        if let Some(p) = &container.liveness_probe {
            let t = Timing::of(p);
            tokio::time::sleep(t.initial_delay).await;
            let mut bad = 0u32;
            loop {
                match probe_once(p, &container, ip, Some(&spec), &cwd).await {
                    Ok(()) => bad = 0,
                    Err(e) => {
                        bad += 1;
                        if bad >= t.failure_threshold {
                            tracing::info!(container = %container.name, error = %e, "liveness probe failed; restarting");
                            live_fail.notify_one();
                            return;
                        }
                    }
                }
                tokio::time::sleep(t.period).await;
            }
        }
    };
    tokio::join!(readiness, liveness);
}
