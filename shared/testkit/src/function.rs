//! A recording HTTP function: every request is kept with the answer it got, and a behaviour
//! decides each answer from the request and how often the same body came before.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;

/// What the function does with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Answers `status` with the body `ok` after `delay`.
    Answer { status: u16, delay: Duration },
    /// Answers `status` with `body` after `delay`.
    Text {
        status: u16,
        body: String,
        delay: Duration,
    },
    /// Answers nothing for `Duration` (longer than the caller's timeout), then 504.
    Hang(Duration),
}

impl Reply {
    pub const OK: Reply = Reply::Answer {
        status: 200,
        delay: Duration::ZERO,
    };

    pub fn status(status: u16) -> Self {
        Reply::Answer {
            status,
            delay: Duration::ZERO,
        }
    }

    /// `status` with `body`, at once.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Reply::Text {
            status,
            body: body.into(),
            delay: Duration::ZERO,
        }
    }
}

/// One request the function got, with the outcome it gave (`status` 0 for [`Reply::Hang`]).
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub at: Instant,
    pub status: u16,
    /// 1 for the first time this body came, 2 for the second, ...
    pub attempt: u32,
}

impl Received {
    /// A header's value, empty when missing or not UTF-8.
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

type Behaviour = Arc<dyn Fn(&http::HeaderMap, &Bytes, u32) -> Reply + Send + Sync>;

/// A function server on [`devcluster::test_server_ip`] (HTTP/1.1 and HTTP/2), stopped on drop.
pub struct RecordingFunction {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    stop: CancellationToken,
}

impl RecordingFunction {
    /// `behaviour(headers, body, attempt)` decides each answer; `attempt` counts the requests
    /// with this body so far, this one included.
    pub async fn start(
        behaviour: impl Fn(&http::HeaderMap, &Bytes, u32) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let behaviour: Behaviour = Arc::new(behaviour);
        // The address a pod would have: loopback on devcluster, 10.127.0.1 with a real control
        // plane (which refuses loopback endpoint addresses).
        let listener = tokio::net::TcpListener::bind((devcluster::test_server_ip(), 0))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "binding {}: {e} (with a real control plane, run inside scripts/netns.sh)",
                    devcluster::test_server_ip()
                )
            });
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let seen: Arc<Mutex<HashMap<Bytes, u32>>> = Arc::default();
        let stop = CancellationToken::new();
        let (g, s) = (Arc::clone(&got), stop.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(v) => v, Err(_) => continue },
                    _ = s.cancelled() => return,
                };
                let (g, seen, behaviour, s) = (
                    Arc::clone(&g),
                    Arc::clone(&seen),
                    Arc::clone(&behaviour),
                    s.clone(),
                );
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<Incoming>| {
                        let (g, seen, behaviour) =
                            (Arc::clone(&g), Arc::clone(&seen), Arc::clone(&behaviour));
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let attempt = {
                                let mut seen = seen.lock().unwrap();
                                let n = seen.entry(body.clone()).or_insert(0);
                                *n += 1;
                                *n
                            };
                            let reply = behaviour(&parts.headers, &body, attempt);
                            let (status, delay, text) = match reply {
                                Reply::Answer { status, delay } => {
                                    (status, delay, Bytes::from_static(b"ok"))
                                }
                                Reply::Text {
                                    status,
                                    body,
                                    delay,
                                } => (status, delay, Bytes::from(body)),
                                Reply::Hang(d) => (0, d, Bytes::new()),
                            };
                            g.lock().unwrap().push(Received {
                                headers: parts.headers,
                                body,
                                at: Instant::now(),
                                status,
                                attempt,
                            });
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            let code = if status == 0 { 504 } else { status };
                            Ok::<_, Infallible>(
                                hyper::Response::builder()
                                    .status(code)
                                    .body(Full::new(text))
                                    .unwrap(),
                            )
                        }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = s.cancelled() => {}
                    }
                });
            }
        });
        Self { addr, got, stop }
    }

    /// Answers 200 at once to everything.
    pub async fn ok() -> Self {
        Self::start(|_, _, _| Reply::OK).await
    }

    /// Answers 200 with the request's body.
    pub async fn echo() -> Self {
        Self::start(|_, body, _| Reply::text(200, String::from_utf8_lossy(body))).await
    }

    /// The bodies of every request so far, as text, in arrival order.
    pub fn bodies(&self) -> Vec<String> {
        self.with_received(|all| all.iter().map(Received::body_text).collect())
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    /// Runs `f` over the requests without copying them.
    pub fn with_received<T>(&self, f: impl FnOnce(&[Received]) -> T) -> T {
        f(&self.got.lock().unwrap())
    }
}

impl Drop for RecordingFunction {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
