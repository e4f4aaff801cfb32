//! `exec` and `attach` over SPDY/3.1, as a kube-apiserver asks them of a kubelet (also when
//! kubectl spoke WebSocket to the API server: the API server translates) and as older kubectl
//! versions speak them: the `v4.channel.k8s.io` stream protocol. After the upgrade the client
//! opens one SPDY stream per channel, named by its `streamType` header (`error`, and `stdin`,
//! `stdout`, `stderr`, `resize` as the query asked); once all are there the session runs, its
//! output goes out as data on the stdout and stderr streams, and its end is a `metav1.Status`
//! (JSON) on the error stream. Every stream is then closed, and the connection.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::conn::{self, FrameReader, SessionError, data, fin};
use crate::exec::{Input, Options, STDERR, STDOUT, Streams};
use crate::spdy::{self, Frame};

/// The stream protocol served: client-go offers v5 to v1 and a kubelet picks v4 over SPDY.
pub const PROTOCOL_V4: &str = "v4.channel.k8s.io";
/// Protocols to offer [`crate::upgrade::negotiate`].
pub const PROTOCOLS: &[&str] = &[PROTOCOL_V4];

/// How long the client may take to open its streams (a kubelet's stream creation timeout).
const STREAM_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Error,
    Stdin,
    Stdout,
    Stderr,
    Resize,
}

impl Kind {
    fn parse(headers: &spdy::Headers) -> Option<Self> {
        let value = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("streamtype"))
            .map(|(_, v)| v.as_str())?;
        Some(match value {
            "error" => Self::Error,
            "stdin" => Self::Stdin,
            "stdout" => Self::Stdout,
            "stderr" => Self::Stderr,
            "resize" => Self::Resize,
            _ => return None,
        })
    }
}

/// The streams a client opens for `opts`, as client-go's v4 protocol does.
fn expected(opts: &Options) -> Vec<Kind> {
    let mut kinds = vec![Kind::Error];
    if opts.stdin {
        kinds.push(Kind::Stdin);
    }
    if opts.stdout {
        kinds.push(Kind::Stdout);
    }
    if opts.stderr && !opts.tty {
        kinds.push(Kind::Stderr);
    }
    if opts.tty {
        kinds.push(Kind::Resize);
    }
    kinds
}

/// Serves one exec or attach connection: waits for the streams `opts` calls for, runs
/// `session` on them, then writes its status and closes everything.
pub async fn serve<S, F, Fut>(io: S, opts: Options, session: F) -> Result<(), SessionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
    F: FnOnce(Streams) -> Fut,
    Fut: Future<Output = meta::Status>,
{
    let (reader, writer) = tokio::io::split(io);
    let (out, writer_task) = conn::writer(writer)?;
    let mut frames = FrameReader::new(reader);
    let wanted = expected(&opts);
    let mut streams: HashMap<Kind, u32> = HashMap::new();
    let mut last_stream = 0u32;
    // Bytes for stdin that came before every stream was open.
    let mut early: Vec<Input> = Vec::new();
    let deadline = tokio::time::sleep(STREAM_WAIT);
    tokio::pin!(deadline);
    while !wanted.iter().all(|k| streams.contains_key(k)) {
        let frame = tokio::select! {
            f = frames.next() => f?,
            _ = &mut deadline => {
                tracing::debug!("exec/attach: the client did not open its streams in time");
                None
            }
        };
        let Some(frame) = frame else {
            drop(out);
            let _ = writer_task.await;
            return Ok(());
        };
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                let kind = Kind::parse(&headers);
                let fresh = kind.is_some_and(|k| !streams.contains_key(&k));
                if stream_id.is_multiple_of(2) || stream_id <= last_stream || !fresh {
                    let _ = out
                        .send(Frame::RstStream {
                            stream_id,
                            status: spdy::rst::PROTOCOL_ERROR,
                        })
                        .await;
                    continue;
                }
                last_stream = stream_id;
                if let Some(k) = kind {
                    streams.insert(k, stream_id);
                }
                let _ = out
                    .send(Frame::SynReply {
                        stream_id,
                        flags: 0,
                        headers: Vec::new(),
                    })
                    .await;
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } if streams.get(&Kind::Stdin) == Some(&stream_id) => {
                if !data.is_empty() {
                    early.push(Input::Stdin(data));
                }
                if flags & spdy::FLAG_FIN != 0 {
                    early.push(Input::StdinClosed);
                }
            }
            Frame::Ping { id } if !id.is_multiple_of(2) => {
                let _ = out.send(Frame::Ping { id }).await;
            }
            _ => {}
        }
    }

    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Bytes)>(32);
    let (in_tx, in_rx) = mpsc::channel::<Input>(8 + early.len());
    for input in early {
        let _ = in_tx.try_send(input);
    }
    let mut in_tx = Some(in_tx);
    let running = session(Streams {
        output: out_tx,
        input: in_rx,
    });
    tokio::pin!(running);
    let mut status: Option<meta::Status> = None;
    let mut output_open = true;
    let mut connected = true;
    let stdin_id = streams.get(&Kind::Stdin).copied();
    while status.is_none() || output_open {
        tokio::select! {
            st = &mut running, if status.is_none() => status = Some(st),
            chunk = out_rx.recv(), if output_open => match chunk {
                Some((channel, bytes)) => {
                    let kind = match channel {
                        STDOUT => Kind::Stdout,
                        STDERR => Kind::Stderr,
                        _ => continue,
                    };
                    // With a TTY, stderr goes to stdout, as the kubelet merges them.
                    let id = streams.get(&kind).or_else(|| streams.get(&Kind::Stdout));
                    if let Some(id) = id {
                        let _ = out.send(data(*id, bytes, 0)).await;
                    }
                }
                None => output_open = false,
            },
            frame = frames.next(), if connected => match frame {
                Ok(Some(Frame::Data { stream_id, flags, data })) if Some(stream_id) == stdin_id => {
                    if let Some(tx) = &in_tx {
                        if !data.is_empty() {
                            let _ = tx.send(Input::Stdin(data)).await;
                        }
                        if flags & spdy::FLAG_FIN != 0 {
                            let _ = tx.send(Input::StdinClosed).await;
                        }
                    }
                }
                Ok(Some(Frame::RstStream { stream_id, .. })) if Some(stream_id) == stdin_id => {
                    if let Some(tx) = &in_tx {
                        let _ = tx.send(Input::StdinClosed).await;
                    }
                }
                Ok(Some(Frame::Ping { id })) if !id.is_multiple_of(2) => {
                    let _ = out.send(Frame::Ping { id }).await;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    // The client is gone: the session sees its input end.
                    connected = false;
                    in_tx = None;
                }
            },
        }
    }
    drop(in_tx);
    for kind in [Kind::Stdout, Kind::Stderr] {
        if let Some(id) = streams.get(&kind) {
            let _ = out.send(fin(*id)).await;
        }
    }
    if let (Some(id), Some(status)) = (streams.get(&Kind::Error), status) {
        let body = serde_json::to_vec(&status).unwrap_or_default();
        let _ = out.send(data(*id, Bytes::from(body), spdy::FLAG_FIN)).await;
    }
    for kind in [Kind::Stdin, Kind::Resize] {
        if let Some(id) = streams.get(&kind) {
            let _ = out.send(fin(*id)).await;
        }
    }
    let _ = out
        .send(Frame::GoAway {
            last_good_stream_id: last_stream,
            status: spdy::goaway::OK,
        })
        .await;
    drop(out);
    match writer_task.await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::exec::{ContainerProcess, kubelet_options};
    use bytes::BytesMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The client end, as client-go's SPDY executor drives it.
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
        async fn open(&mut self, id: u32, kind: &str) {
            self.send(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                slot: 0,
                flags: 0,
                headers: vec![("streamtype".into(), kind.into())],
            })
            .await;
        }
    }

    #[tokio::test]
    async fn exec_over_spdy_streams_output_and_ends_with_the_exit_status() {
        let (server, client) = tokio::io::duplex(64 * 1024);
        let opts = kubelet_options(vec![
            ("command".into(), "/bin/sh".into()),
            ("command".into(), "-c".into()),
            ("command".into(), "cat; echo oops >&2; exit 7".into()),
            ("input".into(), "1".into()),
            ("output".into(), "1".into()),
            ("error".into(), "1".into()),
        ]);
        let process = ContainerProcess {
            env: Default::default(),
            cwd: std::env::temp_dir(),
            stdin: None,
            stdin_once: false,
            argv_prefix: Vec::new(),
        };
        let session_opts = opts.clone();
        let server = tokio::spawn(serve(server, opts, move |streams| async move {
            crate::exec::run(&process, &session_opts, streams).await
        }));
        let mut c = Client {
            io: client,
            enc: spdy::Encoder::new().unwrap(),
            dec: spdy::Decoder::new(),
            buf: BytesMut::new(),
        };
        for (id, kind) in [(1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")] {
            c.open(id, kind).await;
        }
        c.send(data(3, Bytes::from_static(b"typed\n"), spdy::FLAG_FIN))
            .await;
        let mut replies = 0;
        let mut out: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut finished = Vec::new();
        while let Some(f) = c.next().await {
            match f {
                Frame::SynReply { .. } => replies += 1,
                Frame::Data {
                    stream_id,
                    flags,
                    data,
                } => {
                    out.entry(stream_id).or_default().extend_from_slice(&data);
                    if flags & spdy::FLAG_FIN != 0 {
                        finished.push(stream_id);
                    }
                }
                Frame::GoAway { .. } => break,
                _ => {}
            }
        }
        assert_eq!(replies, 4);
        assert_eq!(out.get(&5).map(Vec::as_slice), Some(b"typed\n".as_slice()));
        assert_eq!(out.get(&7).map(Vec::as_slice), Some(b"oops\n".as_slice()));
        let status: meta::Status = serde_json::from_slice(&out[&1]).unwrap();
        assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
        let causes = status.details.unwrap().causes.unwrap();
        assert_eq!(causes[0].message.as_deref(), Some("7"));
        for id in [1, 5, 7] {
            assert!(finished.contains(&id), "stream {id} closed: {finished:?}");
        }
        server.await.unwrap().unwrap();
    }
}
