//! Scale to zero in the gateway, without a cluster: the Function states are fed to the
//! gateway's activity records by hand (as the Function watch does), the function is a local
//! echo server. Held requests are forwarded exactly once with their bodies intact, also when
//! the woken pod does not listen yet; a full queue and a timeout answer 503 with Retry-After.
#![cfg(test)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use http_trigger_controller::gateway::Gateway;
use http_trigger_controller::gateway::routes::{Route, RouteTable};
use http_trigger_controller::gateway::secrets::SecretStore;
use http_trigger_controller::gateway::wake::{RETRY_AFTER_SECONDS, Wake};
use http_trigger_controller::metrics::GatewayMetrics;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubeless_api::scale::{SCALED_TO_ZERO, reasons};
use kubeless_api::{Condition, Function, FunctionStatus};
use kubeless_invoke::{Activity, Endpoint, FunctionTarget, StaticResolver};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const FUNCTION: &str = "sleepy";

/// Bodies the function received, in order.
type Received = Arc<Mutex<Vec<Bytes>>>;

/// An echo function serving `listener`: answers each body back, and keeps it.
fn serve_echo(listener: TcpListener, token: CancellationToken) -> Received {
    let got: Received = Arc::default();
    let g = Arc::clone(&got);
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let g = Arc::clone(&g);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let g = Arc::clone(&g);
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            g.lock().unwrap().push(body.clone());
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(body)))
                        }
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    got
}

/// The Function as its status tells the gateway: `at_zero` is the ScaledToZero condition
/// (`None`: scale to zero off), `ready` the ready replicas.
fn function(at_zero: Option<bool>, ready: i32) -> Function {
    let mut f = Function::new(FUNCTION, Default::default());
    f.metadata.namespace = Some(NS.into());
    let mut status = FunctionStatus {
        ready_replicas: Some(ready),
        ..Default::default()
    };
    if let Some(z) = at_zero {
        let reason = if z { reasons::IDLE } else { reasons::ACTIVE };
        status
            .conditions
            .push(Condition::new(SCALED_TO_ZERO, z, reason, ""));
    }
    f.status = Some(status);
    f
}

struct Setup {
    gw: Arc<Gateway>,
    addr: SocketAddr,
    metrics: GatewayMetrics,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    token: CancellationToken,
}

impl Setup {
    /// A gateway routing `/f` to the function at `function`, with scale to zero on.
    async fn start(function: SocketAddr, timeout: Duration, queue: usize) -> Self {
        let token = CancellationToken::new();
        let resolver = StaticResolver::default().with_function(
            NS,
            FUNCTION,
            vec![Endpoint::parse(&format!("http://{function}/")).unwrap()],
        );
        let metrics = GatewayMetrics::default();
        let gw = Gateway::with_wake(
            Arc::new(resolver),
            SecretStore::fixed([]),
            metrics.clone(),
            Wake::new(Arc::new(Activity::read_only()), timeout, queue),
        );
        gw.set_routes(RouteTable::from_routes(vec![Route {
            namespace: NS.into(),
            trigger: FUNCTION.into(),
            host: None,
            prefix: "/f".into(),
            cors: false,
            basic_auth_secret: None,
            target: Some(FunctionTarget::new(NS, FUNCTION).with_timeout(Duration::from_secs(10))),
            scale_to_zero: true,
            runtime_paths: false,
        }]));
        let (addr, _server) = gw
            .bind("127.0.0.1:0".parse().unwrap(), token.clone())
            .await
            .unwrap();
        Self {
            gw,
            addr,
            metrics,
            http: HttpClient::builder(TokioExecutor::new()).build_http(),
            token,
        }
    }

    fn observe(&self, f: &Function) {
        self.gw.wake().activity.observe(f);
    }

    fn held(&self) -> usize {
        self.gw.wake().queue.held(NS, FUNCTION)
    }

    fn outcome(&self, outcome: &'static str) -> u64 {
        self.metrics
            .requests
            .get_or_create(&[("outcome", outcome)])
            .get()
    }

    /// POSTs `body` to `/f/x`: status, Retry-After, body.
    fn post(&self, body: Bytes) -> tokio::task::JoinHandle<(u16, Option<String>, Bytes)> {
        let (http, addr) = (self.http.clone(), self.addr);
        tokio::spawn(async move {
            let req = http::Request::post(format!("http://{addr}/f/x"))
                .body(Full::new(body))
                .unwrap();
            let resp = http.request(req).await.unwrap();
            let status = resp.status().as_u16();
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, retry, body)
        })
    }

    async fn until_held(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.held() < n {
            assert!(
                Instant::now() < deadline,
                "{} requests held, not {n}",
                self.held()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn body(i: usize) -> Bytes {
    Bytes::from(format!("request {i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_are_forwarded_exactly_once_when_the_function_is_ready() {
    let token = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let function_addr = listener.local_addr().unwrap();
    let got = serve_echo(listener, token.clone());
    let s = Setup::start(function_addr, Duration::from_secs(20), 100).await;
    s.observe(&function(Some(true), 0));

    let calls: Vec<_> = (0..20).map(|i| s.post(body(i))).collect();
    s.until_held(20).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        got.lock().unwrap().is_empty(),
        "nothing reaches a function at zero"
    );
    assert!(calls.iter().all(|c| !c.is_finished()));

    // The controller scales it up: first Active with no ready replica (still held)...
    s.observe(&function(Some(false), 0));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.held(), 20);
    // ...then a ready replica.
    s.observe(&function(Some(false), 1));
    for (i, c) in calls.into_iter().enumerate() {
        let (status, _, answer) = c.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer, body(i), "each request gets its own answer");
    }
    let mut bodies = got.lock().unwrap().clone();
    bodies.sort();
    let mut expected: Vec<_> = (0..20).map(body).collect();
    expected.sort();
    assert_eq!(bodies, expected, "every request reached the function once");
    assert_eq!(s.held(), 0);
    assert_eq!(s.metrics.wake_holds.get(), 20);
    assert_eq!(s.outcome("2xx"), 20);

    // Ready now: the next request goes straight through, without a hold.
    let (status, _, _) = s.post(body(99)).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(s.metrics.wake_holds.get(), 20);
    s.token.cancel();
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_pod_that_does_not_listen_yet_is_retried_and_the_body_arrives_intact() {
    // Reserve a port, then close it: the endpoint refuses connections until the function
    // starts on it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let function_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let s = Setup::start(function_addr, Duration::from_secs(20), 100).await;
    s.observe(&function(Some(true), 0));
    // Bodies bigger than a socket buffer, so they are streamed, not sent in one write.
    let big = |i: usize| Bytes::from(format!("{i}:").repeat(200_000));
    let calls: Vec<_> = (0..3).map(|i| s.post(big(i))).collect();
    s.until_held(3).await;

    // Ready by its status, but the process is not listening for another 500 ms.
    s.observe(&function(Some(false), 1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(calls.iter().all(|c| !c.is_finished()));
    let token = CancellationToken::new();
    let got = serve_echo(
        TcpListener::bind(function_addr).await.unwrap(),
        token.clone(),
    );

    for (i, c) in calls.into_iter().enumerate() {
        let (status, _, answer) = c.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer, big(i));
    }
    assert_eq!(got.lock().unwrap().len(), 3, "each request was sent once");
    s.token.cancel();
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queue_bound_a_request_gets_503_at_once() {
    let token = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let function_addr = listener.local_addr().unwrap();
    let got = serve_echo(listener, token.clone());
    let s = Setup::start(function_addr, Duration::from_secs(20), 2).await;
    s.observe(&function(Some(true), 0));
    let held: Vec<_> = (0..2).map(|i| s.post(body(i))).collect();
    s.until_held(2).await;

    let started = Instant::now();
    let (status, retry, text) = s.post(body(2)).await.unwrap();
    assert_eq!(status, 503);
    assert!(started.elapsed() < Duration::from_secs(2), "not held");
    assert_eq!(retry, Some(RETRY_AFTER_SECONDS.to_string()));
    assert!(
        String::from_utf8_lossy(&text).contains("too many requests are waiting"),
        "{text:?}"
    );
    assert_eq!(s.outcome("wake_queue_full"), 1);

    // The held ones still go through once the function is ready.
    s.observe(&function(Some(false), 1));
    for c in held {
        assert_eq!(c.await.unwrap().0, 200);
    }
    assert_eq!(got.lock().unwrap().len(), 2);
    s.token.cancel();
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_that_does_not_wake_in_time_gets_503_with_retry_after() {
    let token = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let function_addr = listener.local_addr().unwrap();
    let got = serve_echo(listener, token.clone());
    let s = Setup::start(function_addr, Duration::from_millis(400), 10).await;
    s.observe(&function(Some(true), 0));

    let started = Instant::now();
    let (status, retry, text) = s.post(body(0)).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(status, 503);
    assert!(
        waited >= Duration::from_millis(400),
        "held for the wake timeout: {waited:?}"
    );
    assert_eq!(retry, Some(RETRY_AFTER_SECONDS.to_string()));
    assert!(
        String::from_utf8_lossy(&text).contains("did not scale up in time"),
        "{text:?}"
    );
    assert_eq!(s.outcome("wake_timeout"), 1);
    assert_eq!(s.metrics.wake_holds.get(), 1);
    assert_eq!(s.held(), 0, "the slot is freed");
    assert!(got.lock().unwrap().is_empty());
    s.token.cancel();
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_without_scale_to_zero_are_never_held() {
    let token = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let function_addr = listener.local_addr().unwrap();
    let got = serve_echo(listener, token.clone());
    let s = Setup::start(function_addr, Duration::from_secs(20), 10).await;
    // The route still says scale to zero (a rebuild behind), the Function no longer does,
    // and it reports no ready replica: the request is sent as without scale to zero.
    s.observe(&function(None, 0));
    let (status, _, answer) = s.post(body(7)).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer, body(7));
    assert_eq!(s.metrics.wake_holds.get(), 0);
    assert_eq!(got.lock().unwrap().len(), 1);
    s.token.cancel();
    token.cancel();
}
