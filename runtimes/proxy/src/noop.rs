//! The built-in no-op worker: answers every call with "hello world".
//! It speaks the same protocol as the language workers, so a benchmark of
//! `serve --worker noop` measures the proxy plus the worker hop.

use std::io::{BufReader, BufWriter};
use std::os::unix::net::UnixStream;

use crate::protocol::{self, FrameError, Hello, ResponseHead};

#[derive(Debug, thiserror::Error)]
pub enum NoopError {
    #[error("KUBELESS_WORKER_SOCKET is not set")]
    NoSocket,
    #[error("cannot connect to the proxy")]
    Connect(#[source] std::io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
}

pub fn run() -> Result<(), NoopError> {
    let path = std::env::var_os("KUBELESS_WORKER_SOCKET").ok_or(NoopError::NoSocket)?;
    let stream = UnixStream::connect(path).map_err(NoopError::Connect)?;
    let mut reader =
        BufReader::with_capacity(64 * 1024, stream.try_clone().map_err(NoopError::Connect)?);
    let mut writer = BufWriter::new(stream);
    let hello = Hello {
        ready: true,
        error: None,
        pid: Some(std::process::id()),
    };
    protocol::write_frame_blocking(&mut writer, &hello, &[])?;
    let head = ResponseHead {
        status: 200,
        headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
        error: None,
        retire: false,
    };
    // The proxy enforces the body limit before it frames a call; the same cap here only guards
    // the allocation (the default of `serve --max-body-bytes`).
    let max_body = std::env::var("KUBELESS_MAX_BODY_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100 * 1024 * 1024);
    while protocol::read_frame_blocking(&mut reader, max_body)?.is_some() {
        protocol::write_frame_blocking(&mut writer, &head, b"hello world")?;
    }
    Ok(())
}
