//! SPDY/3.1 framing, the part of SPDY that `kubectl port-forward` speaks (draft 3.1 of
//! the SPDY protocol, as Go's `spdystream` implements it): DATA, SYN_STREAM, SYN_REPLY,
//! RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS and WINDOW_UPDATE frames, their header
//! blocks compressed with zlib and the SPDY/3 dictionary, one compression context per
//! direction for the connection's life.
//!
//! The framing is written here because no maintained Rust crate offers SPDY (it was
//! superseded by HTTP/2 and dropped by browsers; the crates that spoke it are
//! abandoned). The compression is the `flate2` crate's, on its `zlib-rs` backend: the
//! default miniz backend cannot take a preset dictionary, which SPDY requires.
//!
//! The [`Decoder`] takes bytes as they come and hands out whole frames; the
//! [`Encoder`] appends frames to a buffer. Neither knows about streams: that is the
//! session's business ([`super::session`]).

use std::sync::LazyLock;

use bytes::{Buf, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;

/// A frame's FIN flag: the sender sends nothing more on the stream.
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM's UNIDIRECTIONAL flag: the receiver sends nothing on the stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// Control frame types.
pub mod kind {
    pub const SYN_STREAM: u16 = 1;
    pub const SYN_REPLY: u16 = 2;
    pub const RST_STREAM: u16 = 3;
    pub const SETTINGS: u16 = 4;
    pub const PING: u16 = 6;
    pub const GOAWAY: u16 = 7;
    pub const HEADERS: u16 = 8;
    pub const WINDOW_UPDATE: u16 = 9;
}

/// RST_STREAM status codes.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const FLOW_CONTROL_ERROR: u32 = 7;
    pub const STREAM_IN_USE: u32 = 8;
}

/// GOAWAY status codes.
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

/// The SETTINGS id of the initial window of new streams.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// The window each stream and the session start with (64 KiB), until SETTINGS says
/// otherwise.
pub const DEFAULT_WINDOW: u32 = 64 * 1024;

/// The largest length a frame can declare (24 bits).
pub const MAX_FRAME_LENGTH: usize = (1 << 24) - 1;

/// The most a header block may take once decompressed: far above what any client sends,
/// and a bound on what a client can make this side allocate.
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// A header block: lowercase names and their values (several values of one name are
/// joined by NUL bytes, as SPDY sends them).
pub type Headers = Vec<(String, String)>;

/// The value of header `name` (lowercase) in `headers`.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// One SPDY frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream: u32,
        associated: u32,
        /// 0 (highest) to 7.
        priority: u8,
        fin: bool,
        unidirectional: bool,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    /// `(flags, id, value)` entries.
    Settings {
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    /// A control frame of another type: ignored, as the protocol asks.
    Unknown {
        kind: u16,
    },
}

/// What makes a connection's frames unreadable: the session ends (with a GOAWAY).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SPDY version {0} is not supported; this server speaks SPDY/3.1")]
    UnsupportedVersion(u16),
    #[error("a malformed SPDY frame: {0}")]
    Malformed(&'static str),
    #[error("a SPDY header block that does not decompress: {0}")]
    Compression(String),
    #[error("a SPDY header block over {MAX_HEADER_BLOCK} bytes")]
    HeadersTooLarge,
}

/// The SPDY/3 header compression dictionary: length-prefixed header names and values,
/// then status texts, dates and common values, byte for byte as the protocol defines it.
pub static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    const WORDS: [&str; 65] = [
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
        "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct",
        " Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,",
        "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8",
        "charset=iso-8859-1,utf-,*,enq=0.",
    );
    let mut d = Vec::with_capacity(1423);
    for w in WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(TAIL.as_bytes());
    d
});

/// Reads frames from the bytes of one direction of a connection.
pub struct Decoder {
    buf: BytesMut,
    inflate: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Decoder {
            buf: BytesMut::new(),
            inflate: Decompress::new(true),
        }
    }

    /// Takes the next bytes of the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, if the bytes so far hold one. Every frame with a header
    /// block must pass through here in order: they share one decompression context.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([0, self.buf[5], self.buf[6], self.buf[7]]) as usize;
        if self.buf.len() < 8 + len {
            self.buf.reserve(8 + len - self.buf.len());
            return Ok(None);
        }
        let head = self.buf.split_to(8);
        let body = self.buf.split_to(len).freeze();
        let flags = head[4];
        let word = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if word & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream: word & 0x7fff_ffff,
                fin: flags & FLAG_FIN != 0,
                data: body,
            }));
        }
        let version = ((word >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(Error::UnsupportedVersion(version));
        }
        self.control((word & 0xffff) as u16, flags, body).map(Some)
    }

    fn control(&mut self, kind: u16, flags: u8, mut body: Bytes) -> Result<Frame, Error> {
        let fin = flags & FLAG_FIN != 0;
        let need = |n: usize, body: &Bytes, what| {
            if body.len() < n {
                Err(Error::Malformed(what))
            } else {
                Ok(())
            }
        };
        Ok(match kind {
            kind::SYN_STREAM => {
                need(10, &body, "SYN_STREAM shorter than 10 bytes")?;
                let stream = body.get_u32() & 0x7fff_ffff;
                let associated = body.get_u32() & 0x7fff_ffff;
                let priority = body.get_u8() >> 5;
                let _slot = body.get_u8();
                Frame::SynStream {
                    stream,
                    associated,
                    priority,
                    fin,
                    unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                    headers: self.headers(&body)?,
                }
            }
            kind::SYN_REPLY => {
                need(4, &body, "SYN_REPLY shorter than 4 bytes")?;
                let stream = body.get_u32() & 0x7fff_ffff;
                Frame::SynReply {
                    stream,
                    fin,
                    headers: self.headers(&body)?,
                }
            }
            kind::HEADERS => {
                need(4, &body, "HEADERS shorter than 4 bytes")?;
                let stream = body.get_u32() & 0x7fff_ffff;
                Frame::Headers {
                    stream,
                    fin,
                    headers: self.headers(&body)?,
                }
            }
            kind::RST_STREAM => {
                need(8, &body, "RST_STREAM shorter than 8 bytes")?;
                Frame::RstStream {
                    stream: body.get_u32() & 0x7fff_ffff,
                    status: body.get_u32(),
                }
            }
            kind::SETTINGS => {
                need(4, &body, "SETTINGS shorter than 4 bytes")?;
                let n = body.get_u32() as usize;
                if body.len() != n.saturating_mul(8) {
                    return Err(Error::Malformed(
                        "SETTINGS whose length is not its entries'",
                    ));
                }
                let entries = (0..n)
                    .map(|_| {
                        let flags_id = body.get_u32();
                        ((flags_id >> 24) as u8, flags_id & 0xff_ffff, body.get_u32())
                    })
                    .collect();
                Frame::Settings { entries }
            }
            kind::PING => {
                need(4, &body, "PING shorter than 4 bytes")?;
                Frame::Ping { id: body.get_u32() }
            }
            kind::GOAWAY => {
                need(8, &body, "GOAWAY shorter than 8 bytes")?;
                Frame::GoAway {
                    last_good: body.get_u32() & 0x7fff_ffff,
                    status: body.get_u32(),
                }
            }
            kind::WINDOW_UPDATE => {
                need(8, &body, "WINDOW_UPDATE shorter than 8 bytes")?;
                Frame::WindowUpdate {
                    stream: body.get_u32() & 0x7fff_ffff,
                    delta: body.get_u32() & 0x7fff_ffff,
                }
            }
            kind => Frame::Unknown { kind },
        })
    }

    /// Decompresses and parses one header block.
    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, Error> {
        let raw = self.inflate(compressed)?;
        parse_block(&raw)
    }

    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, Error> {
        let start = self.inflate.total_in();
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        loop {
            let consumed = (self.inflate.total_in() - start) as usize;
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            match self
                .inflate
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync)
            {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&DICTIONARY)
                        .map_err(|e| Error::Compression(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(Error::Compression(e.to_string())),
            }
            let consumed = (self.inflate.total_in() - start) as usize;
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(Error::HeadersTooLarge);
                }
                out.reserve(out.len());
            } else if (self.inflate.total_in(), self.inflate.total_out()) == (before_in, before_out)
            {
                return Err(Error::Compression("the block ends mid-stream".into()));
            }
        }
    }
}

/// Parses an uncompressed header block.
fn parse_block(raw: &[u8]) -> Result<Headers, Error> {
    let mut b = raw;
    let take = |b: &mut &[u8]| -> Result<String, Error> {
        if b.len() < 4 {
            return Err(Error::Malformed("a header block cut short"));
        }
        let n = b.get_u32() as usize;
        if b.len() < n {
            return Err(Error::Malformed("a header block cut short"));
        }
        let s = String::from_utf8_lossy(&b[..n]).into_owned();
        b.advance(n);
        Ok(s)
    };
    if b.len() < 4 {
        return Err(Error::Malformed("a header block without its count"));
    }
    let count = b.get_u32() as usize;
    if count > b.len() / 8 {
        return Err(Error::Malformed(
            "a header block with more headers than bytes",
        ));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = take(&mut b)?.to_ascii_lowercase();
        let value = take(&mut b)?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// Writes frames for one direction of a connection.
pub struct Encoder {
    deflate: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        let mut deflate = Compress::new(Compression::default(), true);
        deflate
            .set_dictionary(&DICTIONARY)
            .expect("a fresh deflate stream takes a dictionary");
        Encoder { deflate }
    }

    /// Appends `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) {
        match frame {
            Frame::Data { stream, fin, data } => {
                out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
                length(out, flag(*fin, FLAG_FIN), data.len());
                out.extend_from_slice(data);
            }
            Frame::SynStream {
                stream,
                associated,
                priority,
                fin,
                unidirectional,
                headers,
            } => {
                let block = self.compress(headers);
                let flags = flag(*fin, FLAG_FIN) | flag(*unidirectional, FLAG_UNIDIRECTIONAL);
                control(out, kind::SYN_STREAM, flags, 10 + block.len());
                out.extend_from_slice(&stream.to_be_bytes());
                out.extend_from_slice(&associated.to_be_bytes());
                out.extend_from_slice(&[(priority & 7) << 5, 0]);
                out.extend_from_slice(&block);
            }
            Frame::SynReply {
                stream,
                fin,
                headers,
            }
            | Frame::Headers {
                stream,
                fin,
                headers,
            } => {
                let block = self.compress(headers);
                let kind = match frame {
                    Frame::SynReply { .. } => kind::SYN_REPLY,
                    _ => kind::HEADERS,
                };
                control(out, kind, flag(*fin, FLAG_FIN), 4 + block.len());
                out.extend_from_slice(&stream.to_be_bytes());
                out.extend_from_slice(&block);
            }
            Frame::RstStream { stream, status } => {
                control(out, kind::RST_STREAM, 0, 8);
                out.extend_from_slice(&stream.to_be_bytes());
                out.extend_from_slice(&status.to_be_bytes());
            }
            Frame::Settings { entries } => {
                control(out, kind::SETTINGS, 0, 4 + 8 * entries.len());
                out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
                for (flags, id, value) in entries {
                    out.extend_from_slice(
                        &((u32::from(*flags) << 24) | (id & 0xff_ffff)).to_be_bytes(),
                    );
                    out.extend_from_slice(&value.to_be_bytes());
                }
            }
            Frame::Ping { id } => {
                control(out, kind::PING, 0, 4);
                out.extend_from_slice(&id.to_be_bytes());
            }
            Frame::GoAway { last_good, status } => {
                control(out, kind::GOAWAY, 0, 8);
                out.extend_from_slice(&last_good.to_be_bytes());
                out.extend_from_slice(&status.to_be_bytes());
            }
            Frame::WindowUpdate { stream, delta } => {
                control(out, kind::WINDOW_UPDATE, 0, 8);
                out.extend_from_slice(&stream.to_be_bytes());
                out.extend_from_slice(&delta.to_be_bytes());
            }
            Frame::Unknown { kind } => control(out, *kind, 0, 0),
        }
    }

    /// A header block, compressed and flushed so that the receiver can read it whole.
    fn compress(&mut self, headers: &Headers) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            for s in [name.to_ascii_lowercase().as_str(), value.as_str()] {
                raw.extend_from_slice(&(s.len() as u32).to_be_bytes());
                raw.extend_from_slice(s.as_bytes());
            }
        }
        let start = self.deflate.total_in();
        let mut out = Vec::with_capacity(raw.len() + 64);
        loop {
            let consumed = (self.deflate.total_in() - start) as usize;
            self.deflate
                .compress_vec(&raw[consumed..], &mut out, FlushCompress::Sync)
                .expect("deflating into a buffer does not fail");
            let consumed = (self.deflate.total_in() - start) as usize;
            if consumed == raw.len() && out.len() < out.capacity() {
                return out;
            }
            out.reserve(out.capacity().max(64));
        }
    }
}

fn flag(on: bool, bit: u8) -> u8 {
    if on { bit } else { 0 }
}

/// A control frame's 8-byte header.
fn control(out: &mut Vec<u8>, kind: u16, flags: u8, len: usize) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    length(out, flags, len);
}

/// The flags byte and 24-bit length that end every frame header.
fn length(out: &mut Vec<u8>, flags: u8, len: usize) {
    assert!(len <= MAX_FRAME_LENGTH, "a SPDY frame over 16 MiB");
    out.push(flags);
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &x in data {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_dictionary_is_the_protocols_byte_for_byte() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert_eq!(adler32(&DICTIONARY), 0xe3c6_a7c2);
    }

    #[test]
    fn every_frame_round_trips_through_shared_compression_contexts() {
        let frames = vec![
            Frame::SynStream {
                stream: 1,
                associated: 0,
                priority: 3,
                fin: false,
                unidirectional: false,
                headers: h(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0"),
                ]),
            },
            Frame::SynReply {
                stream: 1,
                fin: false,
                headers: Vec::new(),
            },
            Frame::SynStream {
                stream: 3,
                associated: 0,
                priority: 0,
                fin: true,
                unidirectional: true,
                headers: h(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
            },
            Frame::Data {
                stream: 3,
                fin: true,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Headers {
                stream: 3,
                fin: false,
                headers: h(&[("x", "a\0b")]),
            },
            Frame::RstStream {
                stream: 3,
                status: rst::CANCEL,
            },
            Frame::Settings {
                entries: vec![(0, SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)],
            },
            Frame::Ping { id: 7 },
            Frame::GoAway {
                last_good: 3,
                status: goaway::OK,
            },
            Frame::WindowUpdate {
                stream: 0,
                delta: 4096,
            },
        ];
        let mut enc = Encoder::new();
        let mut wire = Vec::new();
        for f in &frames {
            enc.encode(f, &mut wire);
        }
        // The zlib stream names the dictionary (FDICT and its Adler-32), as Go's reader
        // expects.
        let first_block = &wire[8 + 10..];
        assert_eq!(first_block[1] & 0x20, 0x20, "FDICT is set");
        assert_eq!(
            u32::from_be_bytes(first_block[2..6].try_into().unwrap()),
            adler32(&DICTIONARY)
        );
        // Bytes arrive in pieces of any size.
        let mut dec = Decoder::new();
        let mut got = Vec::new();
        for piece in wire.chunks(5) {
            dec.push(piece);
            while let Some(f) = dec.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
    }

    #[test]
    fn unknown_types_are_skipped_and_other_versions_refused() {
        let mut dec = Decoder::new();
        dec.push(&[0x80, 3, 0, 42, 0, 0, 0, 2, 9, 9]);
        assert_eq!(dec.next_frame().unwrap(), Some(Frame::Unknown { kind: 42 }));
        assert_eq!(dec.next_frame().unwrap(), None);
        dec.push(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]);
        assert!(matches!(
            dec.next_frame(),
            Err(Error::UnsupportedVersion(2))
        ));
        let mut dec = Decoder::new();
        dec.push(&[0x80, 3, 0, 6, 0, 0, 0, 2, 0, 1]);
        assert!(matches!(dec.next_frame(), Err(Error::Malformed(_))));
    }

    #[test]
    fn a_header_block_claiming_more_than_it_holds_is_refused() {
        assert!(parse_block(&[0, 0, 0, 9, 0, 0, 0, 1]).is_err());
        assert!(parse_block(&[0, 0, 0, 1, 0, 0, 0, 9, b'a', 0, 0, 0, 0]).is_err());
        assert_eq!(
            parse_block(&[0, 0, 0, 1, 0, 0, 0, 1, b'A', 0, 0, 0, 1, b'b']).unwrap(),
            h(&[("a", "b")])
        );
    }
}
