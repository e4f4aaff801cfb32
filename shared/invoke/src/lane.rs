//! Function connections owned by one task that calls a function one request at a time, and
//! driven by that task.
//!
//! The gateway's HTTP/1 client connections and the triggers' ordered lanes send one request at
//! a time. Each keeps the function connections its requests used and polls them from its own
//! task ([`Lane::run`]). A request and its answer then never leave the task: no pool lock, no
//! hand-off to a connection task and back, and the wake-ups between the request and its
//! connection are flags set in the task that is already running ([`Signal`]), not trips
//! through the scheduler and across threads. What is left of a call is its system calls and the
//! function's side.
//!
//! A lane keeps at most [`MAX_ENDPOINTS`] function connections, one per endpoint. A request
//! for another endpoint while the lane is full goes to the caller's shared pool
//! ([`Sent::Full`]), so a function with many replicas is still balanced per request without
//! opening a connection per request.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::task::AtomicWaker;
use http::header::{HOST, HeaderValue};
use http::uri::Authority;
use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::resolve::Endpoint;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Function connections one lane keeps (one per endpoint).
pub const MAX_ENDPOINTS: usize = 4;

/// How long opening a connection to a function may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type ConnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The function connections of one task (a client connection, an ordered lane).
pub struct Lane<B> {
    inner: Mutex<Inner<B>>,
    signal: Arc<Signal>,
    signal_waker: Waker,
}

struct Inner<B> {
    /// One sender per endpoint, with its connection in `conns`.
    senders: Vec<(Authority, SendRequest<B>)>,
    /// Endpoints whose sender is lent to a request now.
    lent: Vec<Authority>,
    conns: FuturesUnordered<ConnFuture>,
}

/// What became of a request given to [`Lane::send`].
pub enum Sent<B> {
    /// The function's answer (its body still streams over the lane's connection).
    Answer(Response<Incoming>),
    /// No answer.
    Failed(LaneError),
    /// The lane is full, or its connection to the endpoint is busy: the request, untouched, for
    /// the caller's shared pool.
    Full(Request<B>),
}

/// Why a request sent over a lane got no answer.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The connection could not be opened (nothing was sent).
    #[error("connecting to the function failed")]
    Connect(#[source] BoxError),
    /// The request or its answer broke on the way.
    #[error("request to the function failed")]
    Request(#[source] BoxError),
}

impl LaneError {
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_))
    }
}

/// What a request gets from [`Lane::take`].
pub enum Taken<B> {
    /// The lane's connection to that endpoint; give it back with [`Lane::give_back`].
    Sender(SendRequest<B>),
    /// The lane has no connection to the endpoint and room for one: open it and
    /// [`Lane::add`] it.
    Room,
    /// The lane is full (or its connection to the endpoint is busy): use the shared pool.
    Full,
}

impl<B> Default for Lane<B> {
    fn default() -> Self {
        let signal = Arc::new(Signal::default());
        Self {
            inner: Mutex::new(Inner {
                senders: Vec::new(),
                lent: Vec::new(),
                conns: FuturesUnordered::new(),
            }),
            signal_waker: Waker::from(Arc::clone(&signal)),
            signal,
        }
    }
}

impl<B> Lane<B>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// Sends `req` (origin-form: path and query only) to `endpoint` over the lane's connection,
    /// opening it when the lane has room. A Host header naming the endpoint is added when the
    /// request has none. A reused connection that turns out closed before the request was
    /// written is replaced once; a request that may have been written is never sent again.
    /// The lane's task must be running [`Lane::run`] for the answer to arrive.
    pub async fn send(&self, endpoint: &Endpoint, mut req: Request<B>) -> Sent<B> {
        let Some(authority) = endpoint.uri().authority() else {
            return Sent::Full(req);
        };
        let mut sender = match self.take(authority) {
            Taken::Full => return Sent::Full(req),
            Taken::Sender(s) => Some(s),
            Taken::Room => None,
        };
        if !req.headers().contains_key(HOST)
            && let Ok(v) = HeaderValue::from_str(authority.as_str())
        {
            req.headers_mut().insert(HOST, v);
        }
        // Ends the loan however this ends (an answer, an error, the caller's timeout).
        let mut loan = Loan {
            lane: self,
            authority,
            sender: None,
        };
        loop {
            let reused = sender.is_some();
            let mut s = match sender.take() {
                Some(s) => s,
                None => match self.open(endpoint).await {
                    Ok(s) => s,
                    Err(e) => return Sent::Failed(e),
                },
            };
            if s.ready().await.is_err() {
                if reused {
                    continue;
                }
                return Sent::Failed(LaneError::Request("the function connection closed".into()));
            }
            match s.try_send_request(req).await {
                Ok(resp) => {
                    loan.sender = Some(s);
                    return Sent::Answer(resp);
                }
                Err(mut e) => match e.take_message() {
                    // Not written: the reused connection had closed. Once more on a new one.
                    Some(unsent) if reused => req = unsent,
                    _ => return Sent::Failed(LaneError::Request(e.into_error().into())),
                },
            }
        }
    }

    /// Opens a connection to `endpoint` and hands it to the lane's task.
    async fn open(&self, endpoint: &Endpoint) -> Result<SendRequest<B>, LaneError> {
        let stream = connect(endpoint, CONNECT_TIMEOUT)
            .await
            .map_err(|e| LaneError::Connect(e.into()))?;
        let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| LaneError::Connect(e.into()))?;
        self.add(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "function connection ended with an error");
            }
        });
        Ok(s)
    }
}

/// A TCP connection to `endpoint` (port 80 when it names none), given up after `limit`.
pub async fn connect(endpoint: &Endpoint, limit: Duration) -> std::io::Result<TcpStream> {
    let authority = endpoint
        .uri()
        .authority()
        .ok_or_else(|| std::io::Error::other("endpoint without host"))?;
    let addr = match authority.port_u16() {
        Some(_) => authority.as_str().to_string(),
        None => format!("{}:80", authority.host()),
    };
    let stream = tokio::time::timeout(limit, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A lane's connection lent to one request; given back when the request ends.
struct Loan<'a, B: Body + Send + 'static> {
    lane: &'a Lane<B>,
    authority: &'a Authority,
    /// Set once the request got its answer: the connection can take the next one.
    sender: Option<SendRequest<B>>,
}

impl<B: Body + Send + 'static> Drop for Loan<'_, B> {
    fn drop(&mut self) {
        self.lane.give_back(self.authority, self.sender.take());
    }
}

impl<B: Send + 'static> Lane<B> {
    fn lock(&self) -> MutexGuard<'_, Inner<B>> {
        // Nothing here can leave the lists half-changed: a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lane's connection to `endpoint`, if it has a usable one; or whether it has room.
    pub fn take(&self, endpoint: &Authority) -> Taken<B> {
        let mut inner = self.lock();
        inner.senders.retain(|(_, s)| !s.is_closed());
        if inner.lent.iter().any(|a| a == endpoint) {
            return Taken::Full;
        }
        if let Some(i) = inner.senders.iter().position(|(a, _)| a == endpoint) {
            let (a, s) = inner.senders.swap_remove(i);
            inner.lent.push(a);
            return Taken::Sender(s);
        }
        if inner.senders.len() + inner.lent.len() < MAX_ENDPOINTS {
            inner.lent.push(endpoint.clone());
            Taken::Room
        } else {
            Taken::Full
        }
    }

    /// Adds a new connection to the lane (after [`Taken::Room`]); the lane's task drives it.
    pub fn add(&self, conn: impl Future<Output = ()> + Send + 'static) {
        self.lock().conns.push(Box::pin(conn));
        // The task may be waiting on everything but this connection: poll it again.
        self.signal.wake_by_ref_inner();
    }

    /// Ends a loan from [`Lane::take`]: `sender` (when the call left the connection reusable)
    /// goes back to the lane; without one the lane makes room for a new connection.
    pub fn give_back(&self, endpoint: &Authority, sender: Option<SendRequest<B>>) {
        let mut inner = self.lock();
        if let Some(i) = inner.lent.iter().position(|a| a == endpoint) {
            inner.lent.swap_remove(i);
        }
        if let Some(s) = sender.filter(|s| !s.is_closed()) {
            inner.senders.push((endpoint.clone(), s));
        }
    }

    /// Runs `fut` (the client connection) and the lane's function connections together on
    /// the calling task, until `fut` ends. The connections are dropped with the lane.
    pub async fn run<F: Future>(&self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        std::future::poll_fn(|cx| self.poll_run(fut.as_mut(), cx)).await
    }

    fn poll_run<F: Future>(&self, mut fut: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let signal = &self.signal;
        signal.waker.register(cx.waker());
        let mut inner_cx = Context::from_waker(&self.signal_waker);
        // Wake-ups raised while polling (the connection handing an answer to the request, the
        // request handing a body to the connection) only set a flag; poll again while one is
        // set instead of going through the scheduler. Bounded, so a busy lane still yields.
        for _ in 0..16 {
            signal.polling.store(true, Ordering::SeqCst);
            signal.woken.store(false, Ordering::SeqCst);
            {
                let mut inner = self.lock();
                while let Poll::Ready(Some(())) = inner.conns.poll_next_unpin(&mut inner_cx) {}
            }
            if let Poll::Ready(out) = fut.as_mut().poll(&mut inner_cx) {
                signal.polling.store(false, Ordering::SeqCst);
                return Poll::Ready(out);
            }
            signal.polling.store(false, Ordering::SeqCst);
            if !signal.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The waker a lane's futures see: inside [`Lane::run`]'s poll it sets a flag, outside it
/// wakes the task.
#[derive(Default)]
struct Signal {
    polling: AtomicBool,
    woken: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    fn wake_by_ref_inner(&self) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.waker.wake();
        }
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref_inner();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_by_ref_inner();
    }
}

#[cfg(test)]
mod tests;
