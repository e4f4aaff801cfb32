//! Gateway overhead: a tiny local Rust "function" (an HTTP echo server) called directly and
//! through the built-in gateway, in the same run, with the same load: N keep-alive connections
//! for a bounded time each. Prints p50 / p99 / req/s of both and the ratios
//! (goals: p50 at most 1.3x direct, throughput at least 70% of direct).
//!
//! A third row calls the echo server through a route with scale to zero on (the function
//! running and ready): the per-request activity bookkeeping on top of the plain gateway path.
//! Its activity records cannot write (no cluster), so the throttled annotation write, once per
//! interval, is not part of it.
//!
//! `cargo bench -p http-trigger-controller --bench gateway_overhead [-- <connections> <seconds>]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use http_trigger_controller::gateway::Gateway;
use http_trigger_controller::gateway::routes::{Route, RouteTable};
use http_trigger_controller::gateway::secrets::SecretStore;
use http_trigger_controller::gateway::wake::Wake;
use http_trigger_controller::metrics::GatewayMetrics;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubeless_api::scale::{SCALED_TO_ZERO, reasons};
use kubeless_api::{Condition, Function, FunctionStatus};
use kubeless_invoke::{Endpoint, FunctionTarget, StaticResolver};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const BODY: &[u8] = b"{\"hello\":\"world\"}";

async fn echo_server(token: CancellationToken) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(BODY))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

struct Stats {
    p50: Duration,
    p99: Duration,
    rps: f64,
    errors: usize,
}

/// `conns` keep-alive HTTP/1.1 connections, each sending requests back to back for `secs`.
async fn load(
    addr: SocketAddr,
    host: &str,
    path: &str,
    conns: usize,
    secs: f64,
    expect: Option<&'static [u8]>,
) -> Stats {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (host, path) = (host.to_string(), path.to_string());
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut lat = Vec::with_capacity(65536);
            let mut errors = 0usize;
            while Instant::now() < deadline {
                let req = hyper::Request::get(&path)
                    .header("host", &host)
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let t = Instant::now();
                match sender.send_request(req).await {
                    Ok(resp) if resp.status().is_success() => {
                        let body = resp.into_body().collect().await.unwrap().to_bytes();
                        if let Some(e) = expect {
                            assert_eq!(&body[..], e);
                        }
                        lat.push(t.elapsed());
                    }
                    _ => {
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.unwrap();
        all.extend(lat);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Stats {
        p50: pct(0.50),
        p99: pct(0.99),
        rps: all.len() as f64 / elapsed,
        errors,
    }
}

fn row(name: &str, s: &Stats) {
    println!(
        "{name:<10} p50 {:>8.1} µs   p99 {:>8.1} µs   {:>9.0} req/s   errors {}",
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6,
        s.rps,
        s.errors
    );
}

/// Loads `function` directly and through the gateway at `gw_addr` (route `/<name>`, and
/// `/<name>-stz` with scale to zero on when `stz`).
async fn compare(
    gw_addr: SocketAddr,
    function: SocketAddr,
    name: &str,
    conns: usize,
    secs: f64,
    expect: Option<&'static [u8]>,
    stz: bool,
) {
    let path = format!("/{name}");
    let stz_path = format!("/{name}-stz");
    // Warm both paths (connection pools, allocator) before measuring.
    load(function, "fn", "/", conns, 0.5, expect).await;
    load(gw_addr, "fn.example.com", &path, conns, 0.5, expect).await;
    let direct = load(function, "fn", "/", conns, secs, expect).await;
    let via = load(gw_addr, "fn.example.com", &path, conns, secs, expect).await;
    let via_stz = match stz {
        true => Some(load(gw_addr, "fn.example.com", &stz_path, conns, secs, expect).await),
        false => None,
    };
    row("direct", &direct);
    row("gateway", &via);
    let ratios = |what: &str, via: &Stats| {
        println!(
            "{what}: p50 {:.2}x direct (goal <= 1.3x), p99 {:.2}x, throughput {:.0}% of direct (goal >= 70%)",
            via.p50.as_secs_f64() / direct.p50.as_secs_f64(),
            via.p99.as_secs_f64() / direct.p99.as_secs_f64(),
            100.0 * via.rps / direct.rps
        )
    };
    if let Some(s) = &via_stz {
        row("gw+stz", s);
    }
    ratios("ratios", &via);
    if let Some(s) = &via_stz {
        ratios("ratios, scale to zero on", s);
    }
}

/// A Function with scale to zero on, running with a ready replica, as its status says.
fn running_function(name: &str) -> Function {
    let mut f = Function::new(name, Default::default());
    f.metadata.namespace = Some("default".into());
    f.status = Some(FunctionStatus {
        ready_replicas: Some(1),
        conditions: vec![Condition::new(SCALED_TO_ZERO, false, reasons::ACTIVE, "")],
        ..Default::default()
    });
    f
}

fn route(name: &str) -> Route {
    Route {
        namespace: "default".into(),
        trigger: name.into(),
        host: Some("fn.example.com".into()),
        prefix: format!("/{name}"),
        cors: false,
        basic_auth_secret: None,
        target: Some(FunctionTarget::new("default", name).with_timeout(Duration::from_secs(30))),
        scale_to_zero: false,
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The release kubeless-runtime with the noop worker, when it has been built.
async fn start_runtime(dir: &std::path::Path) -> Option<(tokio::process::Child, SocketAddr)> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("kubeless-runtime");
    if !bin.exists() {
        return None;
    }
    let port = free_port();
    let child = tokio::process::Command::new(bin)
        .env("KUBELESS_WORKER", "noop")
        .env("KUBELESS_WORKERS", "2")
        .env("FUNC_PORT", port.to_string())
        .env("KUBELESS_LISTEN_ADDRESS", "127.0.0.1")
        .env("KUBELESS_INSTALL_VOLUME", dir)
        .env("KUBELESS_ACCESS_LOG", "false")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_ok() {
            return Some((child, addr));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let conns: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(16);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let token = CancellationToken::new();
        let dir = tempfile::tempdir().unwrap();
        let echo = echo_server(token.clone()).await;
        let runtime = start_runtime(dir.path()).await;
        let mut resolver = StaticResolver::default()
            .with_function(
                "default",
                "echo",
                vec![Endpoint::parse(&format!("http://{echo}/")).unwrap()],
            )
            .with_function(
                "default",
                "echo-stz",
                vec![Endpoint::parse(&format!("http://{echo}/")).unwrap()],
            );
        let mut routes = vec![
            route("echo"),
            Route {
                scale_to_zero: true,
                ..route("echo-stz")
            },
        ];
        let wake = Wake::default();
        wake.activity.observe(&running_function("echo-stz"));
        assert!(wake.activity.is_ready("default", "echo-stz"));
        if let Some((_, addr)) = &runtime {
            resolver = resolver.with_function(
                "default",
                "runtime",
                vec![Endpoint::parse(&format!("http://{addr}/")).unwrap()],
            );
            routes.push(route("runtime"));
        }
        let gw = Gateway::with_wake(
            Arc::new(resolver),
            SecretStore::fixed([]),
            GatewayMetrics::default(),
            wake,
        );
        gw.set_routes(RouteTable::from_routes(routes));
        let (gw_addr, server) = gw
            .bind("127.0.0.1:0".parse().unwrap(), token.clone())
            .await
            .unwrap();

        println!("gateway overhead: {conns} connections, {secs} s per run, HTTP/1.1 keep-alive");
        println!("-- function: a Rust echo server (the gateway's own cost, nothing to hide it)");
        compare(gw_addr, echo, "echo", conns, secs, Some(BODY), true).await;
        match runtime {
            Some((mut child, addr)) => {
                println!(
                    "-- function: kubeless-runtime serve, noop worker (the real function proxy)"
                );
                compare(gw_addr, addr, "runtime", conns, secs, None, false).await;
                let _ = child.kill().await;
            }
            None => println!(
                "-- skipped the kubeless-runtime case: `cargo build --release -p kubeless-runtime` first"
            ),
        }
        token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    });
}
