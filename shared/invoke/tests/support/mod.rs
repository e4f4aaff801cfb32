//! A small hyper HTTP/1.1 server on 127.0.0.1 that records what it receives and answers with a
//! programmable status, body and delay. Dropping it stops the accept loop and its connections.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// What to answer to request number `n` (0-based).
pub type Plan = Arc<dyn Fn(usize) -> (StatusCode, Duration) + Send + Sync>;

pub struct TestServer {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    count: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub async fn start(plan: Plan) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let count = Arc::new(AtomicUsize::new(0));
        let (seen2, count2) = (seen.clone(), count.clone());
        let task = tokio::spawn(async move {
            // Connections live in the JoinSet, so aborting this task closes them too.
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                let _ = stream.set_nodelay(true);
                let (seen, count, plan) = (seen2.clone(), count2.clone(), plan.clone());
                conns.spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (seen, count, plan) = (seen.clone(), count.clone(), plan.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let n = count.fetch_add(1, Ordering::SeqCst);
                            seen.lock().unwrap().push(Seen {
                                method: parts.method.to_string(),
                                headers: parts.headers,
                                body,
                            });
                            let (status, delay) = plan(n);
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            let mut resp =
                                Response::new(Full::new(Bytes::from(format!("answer {n}"))));
                            *resp.status_mut() = status;
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            seen,
            count,
            task,
        }
    }

    /// Always 200 at once.
    pub async fn ok() -> Self {
        Self::start(Arc::new(|_| (StatusCode::OK, Duration::ZERO))).await
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn calls(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A loopback address nothing listens on (bound, then released).
pub async fn dead_addr() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}
