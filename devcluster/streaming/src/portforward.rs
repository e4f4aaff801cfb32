//! Port-forward sessions: the `portforward.k8s.io` protocol over SPDY/3.1 streams, as
//! `kubectl port-forward` speaks it to an API server and an API server to a kubelet. The
//! transport is any byte stream: a connection after an HTTP `Upgrade: SPDY/3.1`, or the bytes
//! that WebSocket binary messages carry (subprotocol [`WEBSOCKET_PROTOCOL`], what kubectl 1.30+
//! asks an API server first).
//!
//! For every local connection the client opens an error stream and a data stream
//! with the same `requestID`. The server then dials the port at the pod's address
//! and copies bytes both ways on the data stream; a failure is written on the error
//! stream. Both streams are closed when the forward ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::conn::{self, CHUNK, FrameReader, SessionError, data, fin};
use crate::spdy::{self, Frame};

/// The one sub-protocol served, as client-go names it.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket sub-protocol of SPDY tunnelled in WebSocket.
pub const WEBSOCKET_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// How long the second stream of a pair may lag behind the first (the kubelet's
/// stream creation timeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams open at once on one connection; more are refused.
const MAX_STREAMS: usize = 1000;

/// Where the streams go: the pod's address, and its name and uid for messages.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub uid: String,
    pub ip: IpAddr,
}

/// One stream's role in a forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Error,
    Data,
}

/// A pair being assembled: the streams seen so far for one request id.
struct Pending {
    port: u16,
    error: Option<u32>,
    data: Option<(u32, mpsc::Receiver<Bytes>)>,
    since: Instant,
}

struct Open {
    /// Bytes from the client for the pod (data streams until the client's FIN).
    to_pod: Option<mpsc::Sender<Bytes>>,
    /// Ends the forward when the client resets the stream.
    cancel: Option<oneshot::Sender<()>>,
    request: String,
}

struct Session {
    out: mpsc::Sender<Frame>,
    /// Forwards that ended report their two stream ids here, to be forgotten.
    done: mpsc::UnboundedSender<[u32; 2]>,
    target: Target,
    streams: HashMap<u32, Open>,
    pending: HashMap<String, Pending>,
    last_stream: u32,
    going_away: bool,
}

fn stream_headers(headers: &spdy::Headers) -> Result<(Kind, u16, String), String> {
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    let kind = match get("streamtype") {
        Some("error") => Kind::Error,
        Some("data") => Kind::Data,
        Some(other) => return Err(format!("invalid stream type {other:?}")),
        None => return Err("\"streamType\" header is required".into()),
    };
    let port = get("port").ok_or("\"port\" header is required")?;
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port header {port:?}"))?;
    let request = get("requestid")
        .ok_or("\"requestID\" header is required")?
        .to_string();
    Ok((kind, port, request))
}

impl Session {
    async fn send(&self, frame: Frame) {
        // A closed writer means the client is gone; the reader notices too.
        let _ = self.out.send(frame).await;
    }

    async fn on_frame(&mut self, frame: Frame) {
        match frame {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => self.on_syn_stream(stream_id, flags, &headers).await,
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                let Some(open) = self.streams.get_mut(&stream_id) else {
                    return;
                };
                if !data.is_empty()
                    && let Some(tx) = &open.to_pod
                    && tx.send(data).await.is_err()
                {
                    open.to_pod = None;
                }
                if flags & spdy::FLAG_FIN != 0 {
                    open.to_pod = None;
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if let Some(mut open) = self.streams.remove(&stream_id) {
                    if let Some(cancel) = open.cancel.take() {
                        let _ = cancel.send(());
                    }
                    if let Some(p) = self.pending.get_mut(&open.request) {
                        if p.error == Some(stream_id) {
                            p.error = None;
                        }
                        if p.data.as_ref().is_some_and(|(id, _)| *id == stream_id) {
                            p.data = None;
                        }
                    }
                }
            }
            // Client pings have odd ids and are echoed; the server sends none.
            Frame::Ping { id } if !id.is_multiple_of(2) => self.send(Frame::Ping { id }).await,
            Frame::GoAway { .. } => self.going_away = true,
            // Flow control is not used by client-go's SPDY streams; settings,
            // replies and extra headers change nothing here.
            _ => {}
        }
    }

    async fn on_syn_stream(&mut self, stream_id: u32, flags: u8, headers: &spdy::Headers) {
        if stream_id.is_multiple_of(2) || stream_id <= self.last_stream {
            self.send(Frame::RstStream {
                stream_id,
                status: spdy::rst::PROTOCOL_ERROR,
            })
            .await;
            return;
        }
        self.last_stream = stream_id;
        if self.going_away || self.streams.len() >= MAX_STREAMS {
            self.send(Frame::RstStream {
                stream_id,
                status: spdy::rst::REFUSED_STREAM,
            })
            .await;
            return;
        }
        let (kind, port, request) = match stream_headers(headers) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!("port-forward stream {stream_id} refused: {e}");
                self.send(Frame::RstStream {
                    stream_id,
                    status: spdy::rst::CANCEL,
                })
                .await;
                return;
            }
        };
        let entry = self.pending.entry(request.clone()).or_insert(Pending {
            port,
            error: None,
            data: None,
            since: Instant::now(),
        });
        let taken = match kind {
            Kind::Error => entry.error.is_some(),
            Kind::Data => entry.data.is_some(),
        };
        if taken || entry.port != port {
            self.send(Frame::RstStream {
                stream_id,
                status: spdy::rst::PROTOCOL_ERROR,
            })
            .await;
            return;
        }
        let mut open = Open {
            to_pod: None,
            cancel: None,
            request: request.clone(),
        };
        match kind {
            Kind::Error => entry.error = Some(stream_id),
            Kind::Data => {
                let (tx, rx) = mpsc::channel(8);
                if flags & spdy::FLAG_FIN == 0 {
                    open.to_pod = Some(tx);
                }
                entry.data = Some((stream_id, rx));
            }
        }
        let complete = entry.error.is_some() && entry.data.is_some();
        self.streams.insert(stream_id, open);
        self.send(Frame::SynReply {
            stream_id,
            flags: 0,
            headers: Vec::new(),
        })
        .await;
        if complete && let Some(p) = self.pending.remove(&request) {
            self.start(p);
        }
    }

    fn start(&mut self, p: Pending) {
        let (Some(error), Some((data, from_client))) = (p.error, p.data) else {
            return;
        };
        let (cancel_tx, cancel_rx) = oneshot::channel();
        if let Some(open) = self.streams.get_mut(&data) {
            open.cancel = Some(cancel_tx);
        }
        let forward = Forward {
            pod: self.target.clone(),
            port: p.port,
            error,
            data,
            from_client,
            cancel: cancel_rx,
            out: self.out.clone(),
            done: self.done.clone(),
        };
        tokio::spawn(forward.run());
    }

    /// Ends pairs whose second stream never came, as the kubelet does.
    async fn expire(&mut self) {
        let late: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.since.elapsed() >= PAIR_TIMEOUT)
            .map(|(k, _)| k.clone())
            .collect();
        for key in late {
            let Some(p) = self.pending.remove(&key) else {
                continue;
            };
            if let Some(error) = p.error {
                let msg = format!(
                    "timed out waiting for the data stream of request {key} (port {})",
                    p.port
                );
                self.send(data(error, msg.into_bytes().into(), 0)).await;
                self.send(fin(error)).await;
                self.streams.remove(&error);
            }
            if let Some((id, _)) = p.data {
                self.send(fin(id)).await;
                self.streams.remove(&id);
            }
        }
    }
}

/// One forwarded connection: the client's data stream <-> the pod's TCP port.
struct Forward {
    pod: Target,
    port: u16,
    error: u32,
    data: u32,
    from_client: mpsc::Receiver<Bytes>,
    cancel: oneshot::Receiver<()>,
    out: mpsc::Sender<Frame>,
    done: mpsc::UnboundedSender<[u32; 2]>,
}

impl Forward {
    async fn run(self) {
        let ids = [self.error, self.data];
        let done = self.done.clone();
        self.copy().await;
        let _ = done.send(ids);
    }

    /// Writes `message` on the error stream and closes both streams.
    async fn fail(&self, message: String) {
        let _ = self
            .out
            .send(data(self.error, message.into_bytes().into(), 0))
            .await;
        let _ = self.out.send(fin(self.error)).await;
        let _ = self.out.send(fin(self.data)).await;
    }

    async fn copy(mut self) {
        let (port, pod) = (self.port, &self.pod);
        let addr = std::net::SocketAddr::new(pod.ip, port);
        let prefix = format!(
            "error forwarding port {port} to pod {}, uid {}",
            pod.name, pod.uid
        );
        let conn =
            match tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    return self
                        .fail(format!("{prefix}: failed to connect to {addr}: {e}"))
                        .await;
                }
                Err(_) => {
                    return self
                        .fail(format!("{prefix}: timed out connecting to {addr}"))
                        .await;
                }
            };
        let _ = conn.set_nodelay(true);
        let (mut pod_read, mut pod_write) = conn.into_split();
        let (data_id, out) = (self.data, &self.out);
        let from_client = &mut self.from_client;
        let up = async move {
            while let Some(chunk) = from_client.recv().await {
                if pod_write.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            // The client closed its side: the pod sees EOF, and may still answer.
            let _ = pod_write.shutdown().await;
        };
        let down = async move {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match pod_read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let chunk = Bytes::copy_from_slice(&buf[..n]);
                        if out.send(data(data_id, chunk, 0)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = out.send(fin(data_id)).await;
        };
        tokio::select! {
            _ = async { futures::join!(up, down) } => {}
            // The client reset the data stream: it has what it wanted.
            _ = &mut self.cancel => {}
        }
        let _ = self.out.send(fin(self.error)).await;
    }
}

/// Serves one SPDY session on `io` until the client goes away.
pub async fn serve<S>(io: S, target: Target) -> Result<(), SessionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, writer) = tokio::io::split(io);
    let (out, writer_task) = conn::writer(writer)?;
    let (done, mut finished) = mpsc::unbounded_channel();
    let mut session = Session {
        out,
        done,
        target,
        streams: HashMap::new(),
        pending: HashMap::new(),
        last_stream: 0,
        going_away: false,
    };
    let mut frames = FrameReader::new(reader);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let result = loop {
        tokio::select! {
            frame = frames.next() => match frame {
                Ok(Some(frame)) => session.on_frame(frame).await,
                Ok(None) => break Ok(()),
                Err(SessionError::Frame(e)) => {
                    session
                        .send(Frame::GoAway {
                            last_good_stream_id: session.last_stream,
                            status: spdy::goaway::PROTOCOL_ERROR,
                        })
                        .await;
                    break Err(SessionError::Frame(e));
                }
                Err(e) => break Err(e),
            },
            _ = tick.tick() => session.expire().await,
            Some(ids) = finished.recv() => {
                for id in ids {
                    session.streams.remove(&id);
                }
            }
        }
    };
    // Ends every forward: their cancel senders and client data senders go away.
    for (_, open) in session.streams.drain() {
        if let Some(cancel) = open.cancel {
            let _ = cancel.send(());
        }
    }
    drop(session);
    match writer_task.await {
        Ok(Err(e)) if result.is_ok() => Err(e),
        _ => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    /// A client end of a session: encodes frames to the server and decodes its answers.
    struct Client {
        io: tokio::io::DuplexStream,
        enc: spdy::Encoder,
        dec: spdy::Decoder,
        buf: BytesMut,
    }

    impl Client {
        async fn send(&mut self, f: Frame) {
            let mut b = BytesMut::new();
            self.enc.encode(&f, &mut b).unwrap();
            self.io.write_all(&b).await.unwrap();
        }
        async fn next(&mut self) -> Option<Frame> {
            loop {
                if let Some(f) = self.dec.decode(&mut self.buf).unwrap() {
                    return Some(f);
                }
                let n =
                    tokio::time::timeout(Duration::from_secs(10), self.io.read_buf(&mut self.buf))
                        .await
                        .expect("a frame within 10 s")
                        .unwrap();
                if n == 0 {
                    return None;
                }
            }
        }
        async fn open(&mut self, id: u32, kind: &str, port: u16, request: &str) {
            let headers = vec![
                ("streamtype".to_string(), kind.to_string()),
                ("port".to_string(), port.to_string()),
                ("requestid".to_string(), request.to_string()),
            ];
            self.send(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                slot: 0,
                flags: 0,
                headers,
            })
            .await;
        }
    }

    fn start() -> Client {
        let (server, client) = tokio::io::duplex(64 * 1024);
        let target = Target {
            name: "web".into(),
            uid: "u1".into(),
            ip: IpAddr::from([127, 0, 0, 1]),
        };
        tokio::spawn(serve(server, target));
        Client {
            io: client,
            enc: spdy::Encoder::new().unwrap(),
            dec: spdy::Decoder::new(),
            buf: BytesMut::new(),
        }
    }

    #[tokio::test]
    async fn forwards_bytes_both_ways_and_closes_both_streams() {
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(&[b"echo:".as_slice(), &got].concat())
                .await
                .unwrap();
        });
        let mut c = start();
        c.send(Frame::Ping { id: 1 }).await;
        assert_eq!(c.next().await, Some(Frame::Ping { id: 1 }));
        c.open(1, "error", port, "0").await;
        c.open(3, "data", port, "0").await;
        for id in [1, 3] {
            assert!(
                matches!(c.next().await, Some(Frame::SynReply { stream_id, .. }) if stream_id == id)
            );
        }
        c.send(data(3, Bytes::from_static(b"hello"), 0)).await;
        c.send(fin(3)).await;
        let mut got = Vec::new();
        let mut fins = Vec::new();
        while fins.len() < 2 {
            match c.next().await.unwrap() {
                Frame::Data {
                    stream_id: 3,
                    data,
                    flags,
                } => {
                    got.extend_from_slice(&data);
                    if flags & spdy::FLAG_FIN != 0 {
                        fins.push(3);
                    }
                }
                Frame::Data {
                    stream_id: 1,
                    data,
                    flags,
                } => {
                    assert!(data.is_empty(), "no error: {data:?}");
                    if flags & spdy::FLAG_FIN != 0 {
                        fins.push(1);
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, b"echo:hello");
    }

    #[tokio::test]
    async fn a_closed_port_is_reported_on_the_error_stream() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let mut c = start();
        c.open(1, "error", port, "7").await;
        c.open(3, "data", port, "7").await;
        let mut message = Vec::new();
        let mut closed = 0;
        while closed < 2 {
            match c.next().await.unwrap() {
                Frame::Data {
                    stream_id: 1,
                    data,
                    flags,
                } => {
                    message.extend_from_slice(&data);
                    closed += usize::from(flags & spdy::FLAG_FIN != 0);
                }
                Frame::Data { flags, .. } => closed += usize::from(flags & spdy::FLAG_FIN != 0),
                Frame::SynReply { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let message = String::from_utf8(message).unwrap();
        assert!(
            message.starts_with(&format!("error forwarding port {port} to pod web, uid u1:")),
            "{message}"
        );
    }

    #[tokio::test]
    async fn bad_streams_are_reset_and_garbage_ends_the_session() {
        let mut c = start();
        // No port header.
        c.send(Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers: vec![("streamtype".into(), "data".into())],
        })
        .await;
        assert!(matches!(
            c.next().await,
            Some(Frame::RstStream { stream_id: 1, .. })
        ));
        // An even (server-side) stream id.
        c.open(2, "data", 80, "1").await;
        assert!(matches!(
            c.next().await,
            Some(Frame::RstStream {
                stream_id: 2,
                status: spdy::rst::PROTOCOL_ERROR
            })
        ));
        c.io.write_all(&[0x80, 3, 0, 1, 0, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        assert!(matches!(
            c.next().await,
            Some(Frame::GoAway {
                status: spdy::goaway::PROTOCOL_ERROR,
                ..
            })
        ));
        assert_eq!(c.next().await, None);
    }
}
