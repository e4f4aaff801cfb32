//! A small SPDY/3.1 framer, the transport of `kubectl port-forward` and of what a kube-apiserver asks of a kubelet (see
//! [`crate::portforward`], [`crate::remotecommand`]): the frame layout of the SPDY/3 draft, with name/value
//! header blocks compressed by one zlib stream per direction primed with the SPDY/3
//! dictionary. Only what a server of client-go's SPDY streams needs; the decoder
//! refuses oversized frames and never panics on bad input.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

pub const VERSION: u16 = 3;

/// FLAG_FIN on data frames and SYN_STREAM, SYN_REPLY, HEADERS.
pub const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL on SYN_STREAM.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM status codes.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
}

/// GOAWAY status codes.
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

const HEADER_LEN: usize = 8;
const STREAM_ID_MASK: u32 = 0x7fff_ffff;
/// Largest control frame accepted; client-go's are a few hundred bytes.
pub const MAX_CONTROL_FRAME: usize = 64 * 1024;
/// Largest data frame accepted (the protocol allows 16 MiB; client-go writes 32 KiB).
pub const MAX_DATA_FRAME: usize = 1024 * 1024;
/// Largest header block once inflated, and the most name/value pairs in one.
const MAX_HEADER_BLOCK: usize = 256 * 1024;
const MAX_HEADER_PAIRS: usize = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("{kind} frame of {len} bytes is larger than the {max} allowed")]
    TooLarge {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{kind} frame has a bad length {len}")]
    Length { kind: &'static str, len: usize },
    #[error("stream id 0 is not valid on a {0} frame")]
    StreamZero(&'static str),
    #[error("header block: {0}")]
    HeaderBlock(&'static str),
    #[error("header block compression: {0}")]
    Compression(String),
}

/// Name/value pairs of a header block, names lowercase as the protocol requires.
pub type Headers = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        slot: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        flags: u8,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Bytes,
    },
    /// A control frame of a type this framer does not know; the protocol says to ignore it.
    Unknown {
        kind: u16,
    },
}

/// The SPDY/3 header compression dictionary: length-prefixed header names and
/// values, then status lines, dates and common values as plain text (1423 bytes).
pub fn dictionary() -> &'static [u8] {
    static DICT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: &[&str] = &[
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const TAIL: &str = concat!(
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
            "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently",
            "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error",
            "501 Not Implemented503 Service Unavailable",
            "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
            "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
            "chunked,text/html,image/png,image/jpg,image/gif,application/xml,",
            "application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
            "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        );
        let mut d = Vec::with_capacity(1423);
        for w in WORDS {
            d.extend_from_slice(&u32::try_from(w.len()).unwrap_or(0).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(TAIL.as_bytes());
        d
    })
}

fn compression_error(e: impl std::fmt::Display) -> FrameError {
    FrameError::Compression(e.to_string())
}

/// Encodes frames; owns the compressing half of the header block zlib stream.
pub struct Encoder {
    deflate: Compress,
}

impl Encoder {
    pub fn new() -> Result<Self, FrameError> {
        let mut deflate = Compress::new(Compression::default(), true);
        deflate
            .set_dictionary(dictionary())
            .map_err(compression_error)?;
        Ok(Self { deflate })
    }

    fn header_block(&mut self, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        let mut raw = Vec::new();
        let len32 = |n: usize| {
            u32::try_from(n).map_err(|_| FrameError::HeaderBlock("header block is too large"))
        };
        raw.put_u32(len32(headers.len())?);
        for (name, value) in headers {
            raw.put_u32(len32(name.len())?);
            raw.extend_from_slice(name.as_bytes());
            raw.put_u32(len32(value.len())?);
            raw.extend_from_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut consumed = 0usize;
        // A sync flush needs calls until zlib leaves output space unused.
        for _ in 0..64 {
            if out.capacity() - out.len() < 64 {
                out.reserve(raw.len() / 2 + 64);
            }
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(&raw[consumed..], &mut out, FlushCompress::Sync)
                .map_err(compression_error)?;
            consumed += usize::try_from(self.deflate.total_in() - before).unwrap_or(0);
            if consumed >= raw.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
        Err(FrameError::Compression("deflate made no progress".into()))
    }

    /// Appends the frame's bytes to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        let mut body = Vec::new();
        let (kind, flags) = match frame {
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                if data.len() > 0x00ff_ffff {
                    return Err(FrameError::TooLarge {
                        kind: "DATA",
                        len: data.len(),
                        max: 0x00ff_ffff,
                    });
                }
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.put_u32((u32::from(*flags) << 24) | data.len() as u32);
                out.extend_from_slice(data);
                return Ok(());
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                flags,
                headers,
            } => {
                body.put_u32(stream_id & STREAM_ID_MASK);
                body.put_u32(associated_to & STREAM_ID_MASK);
                body.put_u8((priority & 0x7) << 5);
                body.put_u8(*slot);
                body.extend_from_slice(&self.header_block(headers)?);
                (SYN_STREAM, *flags)
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                body.put_u32(stream_id & STREAM_ID_MASK);
                body.extend_from_slice(&self.header_block(headers)?);
                (SYN_REPLY, *flags)
            }
            Frame::RstStream { stream_id, status } => {
                body.put_u32(stream_id & STREAM_ID_MASK);
                body.put_u32(*status);
                (RST_STREAM, 0)
            }
            Frame::Settings { flags, entries } => {
                body.put_u32(u32::try_from(entries.len()).unwrap_or(u32::MAX));
                for e in entries {
                    body.put_u32((u32::from(e.flags) << 24) | (e.id & 0x00ff_ffff));
                    body.put_u32(e.value);
                }
                (SETTINGS, *flags)
            }
            Frame::Ping { id } => {
                body.put_u32(*id);
                (PING, 0)
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                body.put_u32(last_good_stream_id & STREAM_ID_MASK);
                body.put_u32(*status);
                (GOAWAY, 0)
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                body.put_u32(stream_id & STREAM_ID_MASK);
                body.extend_from_slice(&self.header_block(headers)?);
                (HEADERS, *flags)
            }
            Frame::WindowUpdate { stream_id, delta } => {
                body.put_u32(stream_id & STREAM_ID_MASK);
                body.put_u32(delta & STREAM_ID_MASK);
                (WINDOW_UPDATE, 0)
            }
            Frame::Unknown { kind } => (*kind, 0),
        };
        if body.len() > 0x00ff_ffff {
            return Err(FrameError::TooLarge {
                kind: "control",
                len: body.len(),
                max: 0x00ff_ffff,
            });
        }
        out.put_u16(0x8000 | VERSION);
        out.put_u16(kind);
        out.put_u32((u32::from(flags) << 24) | body.len() as u32);
        out.extend_from_slice(&body);
        Ok(())
    }
}

/// Decodes frames; owns the inflating half of the header block zlib stream.
pub struct Decoder {
    inflate: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self {
            inflate: Decompress::new(true),
        }
    }

    fn inflate_block(&mut self, block: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity((block.len() * 4).clamp(256, MAX_HEADER_BLOCK));
        let mut pos = 0usize;
        // Each round either consumes input, produces output, or sets the dictionary;
        // the bound only guards against a backend that does none of them.
        for _ in 0..4096 {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(FrameError::HeaderBlock(
                        "inflated header block is too large",
                    ));
                }
                out.reserve((out.len()).min(MAX_HEADER_BLOCK - out.len()).max(256));
            }
            let (in0, out0) = (self.inflate.total_in(), self.inflate.total_out());
            let result =
                self.inflate
                    .decompress_vec(&block[pos..], &mut out, FlushDecompress::Sync);
            pos += usize::try_from(self.inflate.total_in() - in0).unwrap_or(0);
            let progressed = self.inflate.total_in() != in0 || self.inflate.total_out() != out0;
            match result {
                Ok(flate2::Status::StreamEnd) => {
                    return Err(FrameError::HeaderBlock("zlib stream ended"));
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(dictionary())
                        .map_err(|_| FrameError::HeaderBlock("wrong compression dictionary"))?;
                    continue;
                }
                Err(e) => return Err(compression_error(e)),
            }
            if pos >= block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if !progressed {
                return Err(FrameError::HeaderBlock("truncated compressed header block"));
            }
        }
        Err(FrameError::HeaderBlock("header block does not inflate"))
    }

    fn headers(&mut self, block: &[u8]) -> Result<Headers, FrameError> {
        let raw = self.inflate_block(block)?;
        let mut b = &raw[..];
        let take = |b: &mut &[u8]| -> Result<String, FrameError> {
            if b.remaining() < 4 {
                return Err(FrameError::HeaderBlock("truncated header block"));
            }
            let n = b.get_u32() as usize;
            if b.remaining() < n {
                return Err(FrameError::HeaderBlock("truncated header block"));
            }
            let s = std::str::from_utf8(&b[..n])
                .map_err(|_| FrameError::HeaderBlock("header is not UTF-8"))?
                .to_string();
            b.advance(n);
            Ok(s)
        };
        if b.remaining() < 4 {
            return Err(FrameError::HeaderBlock("truncated header block"));
        }
        let count = b.get_u32() as usize;
        if count > MAX_HEADER_PAIRS {
            return Err(FrameError::HeaderBlock("too many headers"));
        }
        let mut headers = Vec::with_capacity(count);
        for _ in 0..count {
            let name = take(&mut b)?;
            if name.is_empty() {
                return Err(FrameError::HeaderBlock("empty header name"));
            }
            let value = take(&mut b)?;
            headers.push((name, value));
        }
        Ok(headers)
    }

    /// Takes one whole frame off the front of `buf`; `Ok(None)` when more bytes are needed.
    /// After an error the session is unusable (the header stream may be out of step).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let first = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let flags = buf[4];
        let len = usize::from(buf[5]) << 16 | usize::from(buf[6]) << 8 | usize::from(buf[7]);
        let control = first & 0x8000_0000 != 0;
        if control {
            let version = ((first >> 16) & 0x7fff) as u16;
            if version != VERSION {
                return Err(FrameError::Version(version));
            }
            if len > MAX_CONTROL_FRAME {
                return Err(FrameError::TooLarge {
                    kind: "control",
                    len,
                    max: MAX_CONTROL_FRAME,
                });
            }
        } else if len > MAX_DATA_FRAME {
            return Err(FrameError::TooLarge {
                kind: "DATA",
                len,
                max: MAX_DATA_FRAME,
            });
        }
        if buf.len() < HEADER_LEN + len {
            buf.reserve(HEADER_LEN + len - buf.len());
            return Ok(None);
        }
        buf.advance(HEADER_LEN);
        let mut body = buf.split_to(len).freeze();
        if !control {
            let stream_id = first & STREAM_ID_MASK;
            if stream_id == 0 {
                return Err(FrameError::StreamZero("DATA"));
            }
            return Ok(Some(Frame::Data {
                stream_id,
                flags,
                data: body,
            }));
        }
        let kind = (first & 0xffff) as u16;
        let need = |name: &'static str, min: usize, exact: bool| {
            if len < min || (exact && len != min) {
                Err(FrameError::Length { kind: name, len })
            } else {
                Ok(())
            }
        };
        let frame = match kind {
            SYN_STREAM => {
                need("SYN_STREAM", 10, false)?;
                let stream_id = body.get_u32() & STREAM_ID_MASK;
                let associated_to = body.get_u32() & STREAM_ID_MASK;
                let priority = body.get_u8() >> 5;
                let slot = body.get_u8();
                if stream_id == 0 {
                    return Err(FrameError::StreamZero("SYN_STREAM"));
                }
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    slot,
                    flags,
                    headers: self.headers(&body)?,
                }
            }
            SYN_REPLY | HEADERS => {
                need(
                    if kind == SYN_REPLY {
                        "SYN_REPLY"
                    } else {
                        "HEADERS"
                    },
                    4,
                    false,
                )?;
                let stream_id = body.get_u32() & STREAM_ID_MASK;
                let headers = self.headers(&body)?;
                if kind == SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            RST_STREAM => {
                need("RST_STREAM", 8, true)?;
                Frame::RstStream {
                    stream_id: body.get_u32() & STREAM_ID_MASK,
                    status: body.get_u32(),
                }
            }
            SETTINGS => {
                need("SETTINGS", 4, false)?;
                let count = body.get_u32() as usize;
                if body.remaining() != count.saturating_mul(8) {
                    return Err(FrameError::Length {
                        kind: "SETTINGS",
                        len,
                    });
                }
                let entries = (0..count)
                    .map(|_| {
                        let head = body.get_u32();
                        Setting {
                            flags: (head >> 24) as u8,
                            id: head & 0x00ff_ffff,
                            value: body.get_u32(),
                        }
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            PING => {
                need("PING", 4, true)?;
                Frame::Ping { id: body.get_u32() }
            }
            GOAWAY => {
                need("GOAWAY", 8, true)?;
                Frame::GoAway {
                    last_good_stream_id: body.get_u32() & STREAM_ID_MASK,
                    status: body.get_u32(),
                }
            }
            WINDOW_UPDATE => {
                need("WINDOW_UPDATE", 8, true)?;
                Frame::WindowUpdate {
                    stream_id: body.get_u32() & STREAM_ID_MASK,
                    delta: body.get_u32() & STREAM_ID_MASK,
                }
            }
            kind => Frame::Unknown { kind },
        };
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn all_frames() -> Vec<Frame> {
        vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                slot: 0,
                flags: 0,
                headers: h(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0"),
                ]),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 1,
                priority: 7,
                slot: 2,
                flags: FLAG_FIN | FLAG_UNIDIRECTIONAL,
                headers: h(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: vec![],
            },
            Frame::RstStream {
                stream_id: 3,
                status: rst::CANCEL,
            },
            Frame::Settings {
                flags: 1,
                entries: vec![
                    Setting {
                        flags: 0,
                        id: 4,
                        value: 100,
                    },
                    Setting {
                        flags: 1,
                        id: 7,
                        value: 65536,
                    },
                ],
            },
            Frame::Ping { id: 0xffff_fffe },
            Frame::GoAway {
                last_good_stream_id: 5,
                status: goaway::OK,
            },
            Frame::Headers {
                stream_id: 5,
                flags: FLAG_FIN,
                headers: h(&[("x", "a\0b")]),
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 1 << 20,
            },
            Frame::Data {
                stream_id: 3,
                flags: 0,
                data: Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n"),
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Bytes::new(),
            },
        ]
    }

    #[test]
    fn dictionary_is_the_spdy3_one() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        // Its Adler-32, the dictionary id in every SPDY/3 zlib header.
        let mut a = 1u32;
        let mut b = 0u32;
        for &x in d {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    #[test]
    fn frames_round_trip_one_by_one_and_back_to_back() {
        let mut enc = Encoder::new().unwrap();
        let mut dec = Decoder::new();
        let mut all = BytesMut::new();
        for f in all_frames() {
            let mut one = BytesMut::new();
            enc.encode(&f, &mut one).unwrap();
            all.extend_from_slice(&one);
            assert_eq!(dec.decode(&mut one).unwrap(), Some(f));
            assert!(one.is_empty());
        }
        // The same frames again through a fresh pair, fed one byte at a time.
        let mut enc = Encoder::new().unwrap();
        let mut dec = Decoder::new();
        let mut wire = BytesMut::new();
        for f in all_frames() {
            enc.encode(&f, &mut wire).unwrap();
        }
        let mut got = Vec::new();
        let mut buf = BytesMut::new();
        for byte in wire.iter() {
            buf.put_u8(*byte);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, all_frames());
    }

    #[test]
    fn wire_layout_of_control_and_data_frames() {
        let mut enc = Encoder::new().unwrap();
        let mut out = BytesMut::new();
        enc.encode(&Frame::Ping { id: 7 }, &mut out).unwrap();
        assert_eq!(&out[..], &[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 7]);
        out.clear();
        enc.encode(
            &Frame::Data {
                stream_id: 5,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"ab"),
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(&out[..], &[0, 0, 0, 5, 1, 0, 0, 2, b'a', b'b']);
    }

    #[test]
    fn header_blocks_use_the_dictionary_and_one_stream_per_direction() {
        let mut enc = Encoder::new().unwrap();
        let headers = h(&[("streamtype", "data"), ("port", "80"), ("requestid", "1")]);
        let mut out = BytesMut::new();
        enc.encode(
            &Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: headers.clone(),
            },
            &mut out,
        )
        .unwrap();
        let block = &out[12..];
        // zlib header with FDICT set, then the dictionary's Adler-32.
        assert_eq!(block[0] & 0x0f, 8, "deflate");
        assert_ne!(block[1] & 0x20, 0, "FDICT");
        assert_eq!(&block[2..6], &0xe3c6_a7c2u32.to_be_bytes());
        // A plain zlib inflater without the dictionary cannot read it.
        let mut plain = Decompress::new(true);
        let mut sink = Vec::with_capacity(1024);
        let e = plain
            .decompress_vec(block, &mut sink, FlushDecompress::Sync)
            .unwrap_err();
        assert_eq!(e.needs_dictionary(), Some(0xe3c6_a7c2));
        // The second block continues the stream: no zlib header, and shorter, since
        // the first one is in the window now.
        let first_len = block.len();
        out.clear();
        enc.encode(
            &Frame::SynReply {
                stream_id: 3,
                flags: 0,
                headers: headers.clone(),
            },
            &mut out,
        )
        .unwrap();
        assert!(out.len() - 12 < first_len);
        // A decoder that missed the first block cannot read the second.
        let mut late = Decoder::new();
        assert!(late.decode(&mut out.clone()).is_err());
    }

    #[test]
    fn oversized_and_malformed_frames_are_refused() {
        let mut dec = Decoder::new();
        let mut big = BytesMut::from(&[0x80, 3, 0, 1, 0, 0x01, 0, 1][..]);
        assert!(matches!(
            dec.decode(&mut big),
            Err(FrameError::TooLarge { .. })
        ));
        let mut big_data = BytesMut::from(&[0, 0, 0, 1, 0, 0x7f, 0xff, 0xff][..]);
        assert!(matches!(
            dec.decode(&mut big_data),
            Err(FrameError::TooLarge { .. })
        ));
        let mut v2 = BytesMut::from(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert_eq!(dec.decode(&mut v2), Err(FrameError::Version(2)));
        let mut short_ping = BytesMut::from(&[0x80, 3, 0, 6, 0, 0, 0, 2, 0, 1][..]);
        assert!(matches!(
            dec.decode(&mut short_ping),
            Err(FrameError::Length { .. })
        ));
        let mut garbage_block =
            BytesMut::from(&[0x80, 3, 0, 2, 0, 0, 0, 8, 0, 0, 0, 1, 1, 2, 3, 4][..]);
        assert!(dec.decode(&mut garbage_block).is_err());
        // An unknown control type is skipped, not an error.
        let mut unknown = BytesMut::from(&[0x80, 3, 0, 10, 0, 0, 0, 1, 9][..]);
        assert_eq!(
            dec.decode(&mut unknown),
            Ok(Some(Frame::Unknown { kind: 10 }))
        );
    }

    #[test]
    fn a_header_count_beyond_the_block_is_refused() {
        // A valid zlib stream whose block claims more pairs than it holds.
        let mut deflate = Compress::new(Compression::default(), true);
        deflate.set_dictionary(dictionary()).unwrap();
        let raw = [0u8, 0, 0, 9, 0, 0, 0, 1, b'a'];
        let mut block = Vec::with_capacity(256);
        deflate
            .compress_vec(&raw, &mut block, FlushCompress::Sync)
            .unwrap();
        let mut frame = BytesMut::new();
        frame.put_u16(0x8003);
        frame.put_u16(2);
        frame.put_u32(4 + block.len() as u32);
        frame.put_u32(1);
        frame.extend_from_slice(&block);
        assert_eq!(
            Decoder::new().decode(&mut frame),
            Err(FrameError::HeaderBlock("truncated header block"))
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_decoder(chunks in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..300), 1..8)) {
            let mut dec = Decoder::new();
            let mut buf = BytesMut::new();
            for c in chunks {
                buf.extend_from_slice(&c);
                // Errors leave the decoder unusable; feeding it more must not panic either.
                while let Ok(Some(_)) = dec.decode(&mut buf) {}
            }
        }

        #[test]
        fn random_bytes_after_a_valid_control_header_never_panic(
            kind in 0u16..12, flags in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut dec = Decoder::new();
            let mut buf = BytesMut::new();
            buf.put_u16(0x8003);
            buf.put_u16(kind);
            buf.put_u32((u32::from(flags) << 24) | body.len() as u32);
            buf.extend_from_slice(&body);
            let _ = dec.decode(&mut buf);
        }

        #[test]
        fn header_blocks_round_trip(pairs in proptest::collection::vec(
            ("[a-z][a-z0-9-]{0,20}", "[ -~]{0,40}"), 0..20)) {
            let mut enc = Encoder::new().unwrap();
            let mut dec = Decoder::new();
            let frame = Frame::SynStream {
                stream_id: 1, associated_to: 0, priority: 0, slot: 0, flags: 0,
                headers: pairs.clone(),
            };
            for _ in 0..3 {
                let mut out = BytesMut::new();
                enc.encode(&frame, &mut out).unwrap();
                prop_assert_eq!(dec.decode(&mut out).unwrap(), Some(frame.clone()));
            }
        }
    }
}
