//! The two halves of a server's SPDY connection: a reader that decodes frames, and a writer task
//! that encodes the frames sent to it (batching what is queued) until every sender is gone.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::spdy::{self, Frame};

/// Bytes read or written at once.
pub const CHUNK: usize = 32 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("reading from the client: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing to the client: {0}")]
    Write(#[source] std::io::Error),
    #[error(transparent)]
    Frame(#[from] spdy::FrameError),
}

/// Decodes the frames the client sends.
pub struct FrameReader<R> {
    reader: R,
    decoder: spdy::Decoder,
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            decoder: spdy::Decoder::new(),
            buf: BytesMut::with_capacity(CHUNK),
        }
    }

    /// The next frame; `None` once the client closed the connection. Cancel-safe: a read
    /// cancelled half-way keeps what it read for the next call.
    pub async fn next(&mut self) -> Result<Option<Frame>, SessionError> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf)? {
                return Ok(Some(frame));
            }
            match self.reader.read_buf(&mut self.buf).await {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(e) => return Err(SessionError::Read(e)),
            }
        }
    }
}

/// The writer task: its result says whether every frame was written.
pub type WriterTask = JoinHandle<Result<(), SessionError>>;

/// Starts the writer task; it ends (closing the write side) when every sender is dropped.
pub fn writer<W>(mut writer: W) -> Result<(mpsc::Sender<Frame>, WriterTask), SessionError>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, mut rx) = mpsc::channel::<Frame>(64);
    let mut encoder = spdy::Encoder::new()?;
    let task = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(CHUNK + 64);
        while let Some(frame) = rx.recv().await {
            buf.clear();
            encoder.encode(&frame, &mut buf)?;
            // Write whatever else is queued in the same go.
            while let Ok(more) = rx.try_recv() {
                encoder.encode(&more, &mut buf)?;
                if buf.len() >= CHUNK {
                    break;
                }
            }
            writer.write_all(&buf).await.map_err(SessionError::Write)?;
            writer.flush().await.map_err(SessionError::Write)?;
        }
        let _ = writer.shutdown().await;
        Ok::<(), SessionError>(())
    });
    Ok((out, task))
}

/// A data frame.
pub fn data(stream_id: u32, data: bytes::Bytes, flags: u8) -> Frame {
    Frame::Data {
        stream_id,
        flags,
        data,
    }
}

/// The end of our side of a stream (an empty data frame with FLAG_FIN).
pub fn fin(stream_id: u32) -> Frame {
    data(stream_id, bytes::Bytes::new(), spdy::FLAG_FIN)
}
