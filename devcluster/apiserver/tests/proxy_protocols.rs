#![cfg(test)]
//! The service and pod proxies with HTTP/2 clients (an h2-only hyper client, ALPN
//! `h2` and nothing to fall back to, and stock kubectl, which negotiates h2 too),
//! and with an HTTP/1.1 upgrade passed through to the backend. The backend is
//! spoken to in HTTP/1.1 whatever the client used.

use std::sync::Arc;

use bytes::Bytes;
use devcluster_apiserver::{ServerConfig, start};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls::pki_types::pem::PemObject;
use serde_json::json;

const TOKEN: &str = "h2-test-token";

/// A loopback HTTP/1.1 backend that answers with what it got: version, method, path
/// and query, Host, whether credentials or connection headers came through, and the body.
async fn echo_backend() -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
        let h = req.headers();
        let line = format!(
            "{:?} {} {} host={} auth={} connection={} te={}",
            req.version(),
            req.method(),
            req.uri().path_and_query().map(|p| p.as_str()).unwrap_or(""),
            h.get("host").and_then(|v| v.to_str().ok()).unwrap_or("-"),
            h.contains_key("authorization"),
            h.get("connection")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-"),
            h.get("transfer-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-"),
        );
        let body = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        // A hop-by-hop header the proxy must not hand to an HTTP/2 client.
        (
            [("keep-alive", "timeout=5"), ("x-backend", "echo")],
            format!("{line} body={}", String::from_utf8_lossy(&body)),
        )
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A TLS connection to the server offering only `alpn` (and checking it was chosen).
async fn tls_connect(
    server: &devcluster_apiserver::RunningServer,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(server.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
    tls
}

/// An HTTP/2-only connection to the server (ALPN offers nothing else).
async fn h2_client(
    server: &devcluster_apiserver::RunningServer,
) -> hyper::client::conn::http2::SendRequest<H2Body> {
    let tls = tls_connect(server, b"h2").await;
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

type H2Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

async fn h2_call(
    send: &mut hyper::client::conn::http2::SendRequest<H2Body>,
    method: &str,
    path: &str,
    body: H2Body,
) -> (u16, http::HeaderMap, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(body)
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn full(s: &'static str) -> H2Body {
    Full::new(Bytes::from_static(s.as_bytes()))
        .map_err(|never| match never {})
        .boxed()
}

/// A body of two DATA frames and no content-length, as kubectl sends one over h2.
fn streamed(a: &'static str, b: &'static str) -> H2Body {
    let chunks =
        [a, b].map(|s| Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(s.as_bytes()))));
    StreamBody::new(futures::stream::iter(chunks)).boxed()
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str], stdin: &str) -> std::process::Output {
    kubeless_testkit::kubectl(kubeconfig, args, Some(stdin))
}

#[tokio::test]
async fn service_and_pod_proxies_serve_http2_clients() {
    let server = start(ServerConfig {
        token: Some(TOKEN.into()),
        ..ServerConfig::default()
    })
    .await
    .unwrap();
    let client = server.client().await.unwrap();
    let backend = echo_backend().await;
    let port = backend.port();
    Api::<Service>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "echo"}, "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<Endpoints>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "echo"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": port}]}]})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": port}]}]}})).unwrap(),
    )
    .await
    .unwrap();
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": "127.0.0.1"}})),
    )
    .await
    .unwrap();

    let svc = "/api/v1/namespaces/default/services/echo:http/proxy";
    let pod = format!("/api/v1/namespaces/default/pods/p:{port}/proxy");
    let host = format!("host=127.0.0.1:{port}");
    let mut h2 = h2_client(&server).await;
    for base in [svc, pod.as_str()] {
        let (status, headers, body) =
            h2_call(&mut h2, "GET", &format!("{base}/call/me?x=1"), full("")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            format!("HTTP/1.1 GET /call/me?x=1 {host} auth=false connection=- te=- body="),
            "{base}"
        );
        assert_eq!(headers.get("x-backend").unwrap(), "echo");
        assert!(!headers.contains_key("keep-alive"), "{headers:?}");
        let (status, _, body) =
            h2_call(&mut h2, "POST", &format!("{base}/submit"), full("hello")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            format!("HTTP/1.1 POST /submit {host} auth=false connection=- te=- body=hello")
        );
        // Without a content-length the body goes on chunked, as the real proxy sends it.
        let (status, _, body) = h2_call(
            &mut h2,
            "PUT",
            &format!("{base}/s"),
            streamed("one ", "two"),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            format!("HTTP/1.1 PUT /s {host} auth=false connection=- te=chunked body=one two")
        );
    }

    // Stock kubectl: `get --raw` and `create --raw` go over h2 (ALPN) too.
    let kc = server.kubeconfig_path().to_path_buf();
    let pod_base = pod.clone();
    let outs = tokio::task::spawn_blocking(move || {
        [svc, pod_base.as_str()]
            .iter()
            .flat_map(|base| {
                [
                    kubectl(&kc, &["get", "--raw", &format!("{base}/k?y=2")], ""),
                    kubectl(
                        &kc,
                        &["create", "--raw", &format!("{base}/k"), "-f", "-"],
                        "from-kubectl",
                    ),
                ]
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (i, o) in outs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "kubectl {i}: {stdout} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let want = if i % 2 == 0 {
            // kubectl adds its --request-timeout; the query goes on as sent.
            format!("HTTP/1.1 GET /k?timeout=30s&y=2 {host} auth=false connection=- te=- body=")
        } else {
            format!(
                "HTTP/1.1 POST /k?timeout=30s {host} auth=false connection=- te=chunked body=from-kubectl"
            )
        };
        assert_eq!(stdout, want, "kubectl {i}");
    }
    server.shutdown().await;
}

/// A backend that switches to a toy protocol, `shout`, and then answers every read
/// in upper case.
async fn upgrading_backend() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if !(head.contains("\r\nupgrade: shout\r\n")
                    && head.contains("\r\nconnection: upgrade\r\n")
                    && !head.contains("authorization"))
                {
                    let _ = s
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                }
                s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n")
                    .await
                    .unwrap();
                let mut buf = [0u8; 1024];
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    if s.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_http1_upgrade_goes_through_the_proxies() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = start(ServerConfig {
        token: Some(TOKEN.into()),
        ..ServerConfig::default()
    })
    .await
    .unwrap();
    let client = server.client().await.unwrap();
    let port = upgrading_backend().await.port();
    Api::<Service>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "up"}, "spec": {"ports": [{"port": 80, "targetPort": port}]}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<Endpoints>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "up"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]}]})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "up"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).unwrap(),
    )
    .await
    .unwrap();
    pods.patch_status(
        "up",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": "127.0.0.1"}})),
    )
    .await
    .unwrap();
    for path in [
        "/api/v1/namespaces/default/services/up/proxy/chat".to_string(),
        format!("/api/v1/namespaces/default/pods/up:{port}/proxy/chat"),
    ] {
        let tls = tls_connect(&server, b"http/1.1").await;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn.with_upgrades());
        let req = http::Request::builder()
            .uri(&path)
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("connection", "Upgrade")
            .header("upgrade", "shout")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 101, "{path}");
        assert_eq!(resp.headers().get("upgrade").unwrap(), "shout");
        let mut io = TokioIo::new(hyper::upgrade::on(resp).await.unwrap());
        for word in ["hello", "again"] {
            io.write_all(word.as_bytes()).await.unwrap();
            let mut got = [0u8; 5];
            io.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, word.to_ascii_uppercase().as_bytes(), "{path}");
        }
    }
    server.shutdown().await;
}
