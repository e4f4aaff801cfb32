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
    while protocol::read_frame_blocking(&mut reader)?.is_some() {
        protocol::write_frame_blocking(&mut writer, &head, b"hello world")?;
    }
    Ok(())
}
