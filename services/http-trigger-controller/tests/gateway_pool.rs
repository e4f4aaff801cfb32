//! The gateway's connections to functions: a client connection's calls share one kept-alive
//! function connection (its lane's), each client connection has its own, endpoints beyond a
//! lane's room and h2c streams go through the shared pool, and a function that closes idle
//! connections without a word (its keep-alive timeout) still gets every call exactly once, on
//! new connections.
#![cfg(test)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use http_trigger_controller::gateway::Gateway;
use http_trigger_controller::gateway::routes::{Route, RouteTable};
use http_trigger_controller::gateway::secrets::SecretStore;
use http_trigger_controller::metrics::GatewayMetrics;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubeless_invoke::{Endpoint, FunctionTarget, StaticResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    calls: AtomicUsize,
}

/// A bare HTTP/1.1 function answering `ok` to bodiless requests; with `close_after`, it closes
/// each connection that long after answering, without saying so in the response.
async fn function(
    close_after: Option<Duration>,
    token: CancellationToken,
) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            s.connections.fetch_add(1, Ordering::SeqCst);
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        s.calls.fetch_add(1, Ordering::SeqCst);
                        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(resp).await.is_err() {
                            return;
                        }
                        if let Some(d) = close_after {
                            tokio::time::sleep(d).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

async fn gateway(function: SocketAddr, token: CancellationToken) -> SocketAddr {
    gateway_over(&[function], token).await
}

/// A gateway routing `/f` to a function with these endpoints (round robin).
async fn gateway_over(functions: &[SocketAddr], token: CancellationToken) -> SocketAddr {
    let endpoints = functions
        .iter()
        .map(|a| Endpoint::parse(&format!("http://{a}/")).unwrap())
        .collect();
    let resolver = StaticResolver::default().with_function("default", "f", endpoints);
    let gw = Gateway::new(
        Arc::new(resolver),
        SecretStore::fixed([]),
        GatewayMetrics::default(),
    );
    gw.set_routes(RouteTable::from_routes([Route {
        namespace: "default".into(),
        trigger: "f".into(),
        host: None,
        prefix: "/f".into(),
        cors: false,
        basic_auth_secret: None,
        target: Some(FunctionTarget::new("default", "f").with_timeout(Duration::from_secs(10))),
        scale_to_zero: false,
        runtime_paths: false,
    }]));
    gw.bind("127.0.0.1:0".parse().unwrap(), token)
        .await
        .unwrap()
        .0
}

/// `n` calls one after the other on one client connection, `pause` apart; their bodies.
async fn calls(gw: SocketAddr, n: usize, pause: Duration) -> Vec<(u16, Bytes)> {
    let stream = TcpStream::connect(gw).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::new();
    for _ in 0..n {
        let req = hyper::Request::get("/f")
            .header("host", "fn.example.com")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
            .await
            .unwrap()
            .unwrap();
        let status = resp.status().as_u16();
        out.push((status, resp.into_body().collect().await.unwrap().to_bytes()));
        tokio::time::sleep(pause).await;
    }
    out
}

/// Every call was answered 200 with the function's body.
fn assert_all_ok(got: &[(u16, Bytes)]) {
    assert!(
        got.iter().all(|(s, b)| *s == 200 && &b[..] == b"ok"),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reuse_one_function_connection() {
    let token = CancellationToken::new();
    let (addr, seen) = function(None, token.clone()).await;
    let gw = gateway(addr, token.clone()).await;
    let got = calls(gw, 20, Duration::ZERO).await;
    assert_all_ok(&got);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 20);
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "sequential calls share one kept-alive connection"
    );
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_closing_idle_connections_gets_every_call_once() {
    let token = CancellationToken::new();
    let (addr, seen) = function(Some(Duration::from_millis(20)), token.clone()).await;
    let gw = gateway(addr, token.clone()).await;
    let got = calls(gw, 5, Duration::from_millis(100)).await;
    assert_all_ok(&got);
    assert_eq!(
        seen.calls.load(Ordering::SeqCst),
        5,
        "each call exactly once"
    );
    assert_eq!(seen.connections.load(Ordering::SeqCst), 5);
    token.cancel();
}

/// Each HTTP/1 client connection has its own function connection (its lane), reused by its
/// calls in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_connection_keeps_its_own_function_connection() {
    let token = CancellationToken::new();
    let (addr, seen) = function(None, token.clone()).await;
    let gw = gateway(addr, token.clone()).await;
    let (a, b) = tokio::join!(calls(gw, 10, Duration::ZERO), calls(gw, 10, Duration::ZERO));
    assert_all_ok(&a);
    assert_all_ok(&b);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 20);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    token.cancel();
}

/// h2c clients (prior knowledge) get their concurrent streams through the shared pool of
/// HTTP/1.1 connections, each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_streams_are_proxied_each_once() {
    let token = CancellationToken::new();
    let (addr, seen) = function(None, token.clone()).await;
    let gw = gateway(addr, token.clone()).await;
    let stream = TcpStream::connect(gw).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let streams = (0..10).map(|_| {
        let mut sender = sender.clone();
        async move {
            let req = hyper::Request::get("http://fn.example.com/f")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
                .await
                .unwrap()
                .unwrap();
            let status = resp.status().as_u16();
            (status, resp.into_body().collect().await.unwrap().to_bytes())
        }
    });
    let got = futures::future::join_all(streams).await;
    assert_all_ok(&got);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 10);
    token.cancel();
}

/// A function with more endpoints than a lane keeps: calls are still balanced over all of them,
/// the ones beyond the lane's room go through the shared pool, and no call opens a connection
/// of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_beyond_a_lanes_room_go_through_the_pool() {
    let token = CancellationToken::new();
    let n = kubeless_invoke::lane::MAX_ENDPOINTS + 1;
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(function(None, token.clone()).await);
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|(a, _)| *a).collect();
    let addr = gateway_over(&addrs, token.clone()).await;
    let got = calls(addr, 3 * n, Duration::ZERO).await;
    assert_all_ok(&got);
    for (i, (_, seen)) in servers.iter().enumerate() {
        assert_eq!(seen.calls.load(Ordering::SeqCst), 3, "endpoint {i}");
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1, "endpoint {i}");
    }
    token.cancel();
}
