//! The proxy <-> worker wire protocol.
//!
//! Every message is one frame: `u32 BE header length`, a JSON header, `u32 BE
//! body length`, then the raw body bytes. Bodies are never re-encoded, so
//! binary and large payloads cost one copy. The worker connects to a unix
//! socket the proxy created for it, sends a [`Hello`] frame, then answers each
//! [`RequestHead`] frame with exactly one [`ResponseHead`] frame.

use std::io::{Read, Write};

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest JSON header accepted; headers only carry HTTP metadata.
pub const MAX_HEADER_BYTES: u32 = 16 * 1024 * 1024;

/// Bodies below this size are written together with the header in one write.
const COALESCE_BYTES: usize = 64 * 1024;

/// Errors reading or writing frames.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("worker connection I/O failed")]
    Io(#[from] std::io::Error),
    #[error("frame header is {0} bytes, over the {MAX_HEADER_BYTES} byte limit")]
    HeaderTooLarge(u32),
    #[error("frame body of {0} bytes does not fit the u32 length field")]
    BodyTooLarge(usize),
    #[error("frame body is {len} bytes, over the {max} byte limit")]
    BodyOverLimit { len: usize, max: usize },
    #[error("frame header is not valid JSON")]
    Json(#[source] serde_json::Error),
}

/// The first frame a worker sends once its function is loaded (or failed to load).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// One HTTP call handed to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestHead {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Raw query string without `?` (may be empty).
    pub query: String,
    /// Path and query as received.
    pub url: String,
    /// Header names are lower case; repeated headers appear repeatedly.
    pub headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<String>,
}

/// A [`RequestHead`] that borrows the HTTP request's strings: what the proxy encodes per call,
/// without copying every header name and value first.
#[derive(Debug, Serialize)]
pub struct RequestHeadRef<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub url: &'a str,
    pub headers: HeaderPairs<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<String>,
}

/// A header map encoded as [`RequestHead::headers`]: `[name, value]` pairs in order, names in
/// lower case, a value that is not UTF-8 with its invalid bytes replaced.
#[derive(Debug)]
pub struct HeaderPairs<'a>(pub &'a http::HeaderMap);

impl Serialize for HeaderPairs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v.as_bytes()))),
        )
    }
}

/// A worker's answer to one call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ResponseHead {
    pub status: u16,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Set when the function raised: the status is then 500 and the call counts as a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The worker will exit after this answer (its state is no longer trusted, e.g. after an
    /// uncaught exception); the pool sends it no further call and starts a replacement.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retire: bool,
}

/// Encode the length-prefixed header part of a frame (`hlen`, header, `blen`).
pub fn encode_prefix<T: Serialize>(head: &T, body_len: usize) -> Result<Vec<u8>, FrameError> {
    let json = serde_json::to_vec(head).map_err(FrameError::Json)?;
    let hlen = u32::try_from(json.len()).map_err(|_| FrameError::HeaderTooLarge(u32::MAX))?;
    if hlen > MAX_HEADER_BYTES {
        return Err(FrameError::HeaderTooLarge(hlen));
    }
    let blen = u32::try_from(body_len).map_err(|_| FrameError::BodyTooLarge(body_len))?;
    let mut out = Vec::with_capacity(8 + json.len() + body_len.min(COALESCE_BYTES));
    out.extend_from_slice(&hlen.to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&blen.to_be_bytes());
    Ok(out)
}

/// Write a frame whose prefix was built by [`encode_prefix`].
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut prefix: Vec<u8>,
    body: &[u8],
) -> Result<(), FrameError> {
    if body.len() <= COALESCE_BYTES {
        // One syscall for the common small call.
        prefix.extend_from_slice(body);
        w.write_all(&prefix).await?;
    } else {
        w.write_all(&prefix).await?;
        w.write_all(body).await?;
    }
    w.flush().await?;
    Ok(())
}

/// Read one frame; `Ok(None)` on a clean end of stream before a frame starts. A body over
/// `max_body` bytes is refused before anything is allocated for it (the stream is then out of
/// step and must be dropped).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max_body: usize,
) -> Result<Option<(Vec<u8>, Bytes)>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let hlen = u32::from_be_bytes(len);
    if hlen > MAX_HEADER_BYTES {
        return Err(FrameError::HeaderTooLarge(hlen));
    }
    let mut head = vec![0u8; hlen as usize];
    r.read_exact(&mut head).await?;
    r.read_exact(&mut len).await?;
    let blen = u32::from_be_bytes(len) as usize;
    if blen > max_body {
        return Err(FrameError::BodyOverLimit {
            len: blen,
            max: max_body,
        });
    }
    let mut body = BytesMut::zeroed(blen);
    r.read_exact(&mut body).await?;
    Ok(Some((head, body.freeze())))
}

/// A frame's JSON header bytes and body.
pub type RawFrame = (Vec<u8>, Vec<u8>);

/// Blocking variant of [`read_frame`], for the built-in no-op worker: the same limits (a body
/// over `max_body` is refused before anything is allocated for it).
pub fn read_frame_blocking<R: Read>(
    r: &mut R,
    max_body: usize,
) -> Result<Option<RawFrame>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let hlen = u32::from_be_bytes(len);
    if hlen > MAX_HEADER_BYTES {
        return Err(FrameError::HeaderTooLarge(hlen));
    }
    let mut head = vec![0u8; hlen as usize];
    r.read_exact(&mut head)?;
    r.read_exact(&mut len)?;
    let blen = u32::from_be_bytes(len) as usize;
    if blen > max_body {
        return Err(FrameError::BodyOverLimit {
            len: blen,
            max: max_body,
        });
    }
    let mut body = vec![0u8; blen];
    r.read_exact(&mut body)?;
    Ok(Some((head, body)))
}

/// Blocking variant of [`write_frame`].
pub fn write_frame_blocking<W: Write, T: Serialize>(
    w: &mut W,
    head: &T,
    body: &[u8],
) -> Result<(), FrameError> {
    let mut buf = encode_prefix(head, body.len())?;
    buf.extend_from_slice(body);
    w.write_all(&buf)?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frame_round_trip_keeps_binary_body() {
        let head = ResponseHead {
            status: 201,
            headers: vec![("x-a".into(), "b".into())],
            error: None,
            retire: false,
        };
        let body: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
        let mut buf = Vec::new();
        write_frame(&mut buf, encode_prefix(&head, body.len()).unwrap(), &body)
            .await
            .unwrap();
        let mut r = buf.as_slice();
        let (h, b) = read_frame(&mut r, usize::MAX).await.unwrap().unwrap();
        let back: ResponseHead = serde_json::from_slice(&h).unwrap();
        assert_eq!(back.status, 201);
        assert_eq!(back.headers, head.headers);
        assert!(!back.retire);
        assert_eq!(&b[..], &body[..]);
        assert!(read_frame(&mut r, usize::MAX).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn body_over_the_cap_is_refused_before_allocating() {
        // A frame that claims a 4 GiB body but carries none: the cap must trip on the length.
        let mut bytes = encode_prefix(&ResponseHead::default(), 0).unwrap();
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
        let err = read_frame(&mut bytes.as_slice(), 1024).await.unwrap_err();
        assert!(
            matches!(err, FrameError::BodyOverLimit { len, max: 1024 } if len == u32::MAX as usize),
            "{err}"
        );
    }

    #[test]
    fn a_borrowed_head_encodes_as_the_owned_one() {
        let mut map = http::HeaderMap::new();
        map.insert("event-id", http::HeaderValue::from_static("id-1"));
        map.append("x-repeated", http::HeaderValue::from_static("one"));
        map.append("x-repeated", http::HeaderValue::from_static("two"));
        map.insert(
            "x-binary",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        let borrowed = RequestHeadRef {
            method: "POST",
            path: "/a",
            query: "q=1",
            url: "/a?q=1",
            headers: HeaderPairs(&map),
            remote_addr: Some("127.0.0.1:9".into()),
        };
        let owned = RequestHead {
            method: "POST".into(),
            path: "/a".into(),
            query: "q=1".into(),
            url: "/a?q=1".into(),
            headers: vec![
                ("event-id".into(), "id-1".into()),
                ("x-repeated".into(), "one".into()),
                ("x-repeated".into(), "two".into()),
                ("x-binary".into(), "caf\u{fffd}".into()),
            ],
            remote_addr: Some("127.0.0.1:9".into()),
        };
        assert_eq!(
            serde_json::to_string(&borrowed).unwrap(),
            serde_json::to_string(&owned).unwrap()
        );
    }

    #[test]
    fn oversized_header_is_rejected() {
        let mut bytes = (MAX_HEADER_BYTES + 1).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        let err = read_frame_blocking(&mut bytes.as_slice(), 1024).unwrap_err();
        assert!(matches!(err, FrameError::HeaderTooLarge(_)));
    }
}
