//! Regression test (issue 20): a request whose chunked body is malformed is the client's
//! fault, so the gateway answers 400 (it answered 502, as if the function had failed). A raw
//! TCP client sends the broken encoding, which no HTTP client library would produce.
#![cfg(test)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use http_trigger_controller::gateway::Gateway;
use http_trigger_controller::gateway::routes::{Route, RouteTable};
use http_trigger_controller::gateway::secrets::SecretStore;
use http_trigger_controller::metrics::GatewayMetrics;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubeless_invoke::{Endpoint, FunctionTarget, StaticResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A function that reads the whole body and echoes it.
async fn echo_function(token: CancellationToken) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async {
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let resp = match body {
                            Ok(b) => hyper::Response::new(Full::new(b)),
                            Err(_) => hyper::Response::builder()
                                .status(499)
                                .body(Full::new(Bytes::new()))
                                .unwrap(),
                        };
                        Ok::<_, Infallible>(resp)
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Sends `raw` on a fresh connection and returns the status line of the answer.
async fn raw_request(gw: SocketAddr, raw: &str) -> String {
    let mut s = TcpStream::connect(gw).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_chunked_body_is_400_not_502() {
    let token = CancellationToken::new();
    let echo = echo_function(token.clone()).await;
    let resolver = StaticResolver::default().with_function(
        "default",
        "echo",
        vec![Endpoint::parse(&format!("http://{echo}/")).unwrap()],
    );
    let gw = Gateway::new(
        std::sync::Arc::new(resolver),
        SecretStore::fixed([]),
        GatewayMetrics::default(),
    );
    gw.set_routes(RouteTable::from_routes(vec![Route {
        namespace: "default".into(),
        trigger: "echo".into(),
        host: Some("fn.example.com".into()),
        prefix: "/echo".into(),
        cors: false,
        basic_auth_secret: None,
        target: Some(FunctionTarget::new("default", "echo").with_timeout(Duration::from_secs(10))),
        scale_to_zero: false,
        runtime_paths: false,
    }]));
    let (addr, server) = gw
        .bind("127.0.0.1:0".parse().unwrap(), token.clone())
        .await
        .unwrap();

    // A well-formed chunked body goes through: the route and the function work.
    let good = raw_request(
        addr,
        "POST /echo HTTP/1.1\r\nHost: fn.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert!(good.starts_with("HTTP/1.1 200"), "well-formed: {good}");
    // A chunk size that is not hex.
    let bad = raw_request(
        addr,
        "POST /echo HTTP/1.1\r\nHost: fn.example.com\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert!(
        bad.starts_with("HTTP/1.1 400"),
        "malformed chunk size: {bad}"
    );
    // A chunk longer than its declared size.
    let bad = raw_request(
        addr,
        "POST /echo HTTP/1.1\r\nHost: fn.example.com\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert!(bad.starts_with("HTTP/1.1 400"), "chunk overrun: {bad}");

    token.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
}
