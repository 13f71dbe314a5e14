//! The server side of HTTP/2 (RFC 9113): one task per connection that reads frames, runs
//! each request's handler and response body itself, and writes frames.
//!
//! Why our own: a watch event fanned out to a thousand watches on one connection (what a
//! Go client or an informer-heavy process does) is a thousand DATA frames of the same
//! line. A general-purpose stack pays for each of them with a task wake, a lock on a
//! shared stream table, flow-control bookkeeping through that lock and a copy into a
//! queue; here a woken stream is an id pushed onto a list, its body is polled in place
//! and its frame is a 9-byte header and a copy into the connection's one write buffer.
//!
//! Handlers and bodies run inside the connection's task: a stream woken by its future is
//! queued, and the task polls the queued streams a turn at a time, writing after each turn,
//! so that the first frames of a burst leave while the rest are still being made. Header
//! blocks are decoded with `loona-hpack`; responses are encoded as literals that never
//! touch the peer's dynamic table.
//!
//! What is supported: everything a client needs to send requests and read responses,
//! with flow control both ways, CONTINUATION, padding, trailers, PING, GOAWAY (both ways)
//! and RST_STREAM. Not supported (and not advertised): server push and extended CONNECT;
//! upgrades (WebSockets) use HTTP/1.1 connections, as with most servers.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri};
use bytes::{Bytes, BytesMut};
use futures_util::task::AtomicWaker;
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a client sends first.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

// Error codes.
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const INTERNAL_ERROR: u32 = 0x2;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
#[cfg(test)]
const CANCEL: u32 = 0x8;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

// Settings.
const SETTINGS_ENABLE_PUSH: u16 = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Open streams per connection, at most (as kube-apiserver: room for many watches).
pub const MAX_STREAMS: usize = 1000;
/// The largest frame we accept (the protocol's default; we do not raise it).
const MAX_FRAME_RECV: usize = 16_384;
/// What a client may send on one stream before we hand the window back.
const STREAM_WINDOW: u32 = 1 << 20;
/// What a client may send on the whole connection before we hand the window back.
const CONN_WINDOW: u32 = 16 << 20;
/// The largest header list we accept, and the largest header block (with CONTINUATION).
const MAX_HEADER_LIST: usize = 1 << 20;
/// The largest window the protocol allows.
const MAX_WINDOW: i64 = (1 << 31) - 1;
/// Bytes waiting to be written beyond which no stream is polled and no frame is read
/// until the socket has taken some.
const WRITE_HIGH: usize = 256 * 1024;
/// What the write buffer keeps of its capacity while the connection is idle.
const IDLE_BUFFER: usize = 16 * 1024;
/// Streams polled per turn; after each turn the connection writes what they made.
/// Small enough that the first frames of one event to a thousand watches leave while the
/// rest are still being made, large enough that they leave in few large writes.
const STREAMS_PER_TURN: usize = 128;
/// Frames one stream may make per poll before the others get their turn.
const FRAMES_PER_POLL: usize = 16;
/// Turns per poll of the connection's task before it lets other tasks run.
const TURNS_PER_POLL: usize = 4;
/// Streams a client may cancel per second before the connection is closed (rapid reset).
const RESETS_PER_SECOND: u32 = 2000;

type Handling = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// Streams by id. Ids come from the client but are unique per connection, and a lookup
/// happens for every frame a stream sends: a multiplicative hash instead of SipHash.
type StreamMap = HashMap<u32, Stream, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u32(u32::from(*b));
        }
    }

    fn write_u32(&mut self, id: u32) {
        // Fibonacci hashing: spreads ids over the high bits, which the table's probe
        // tags come from.
        self.0 = (self.0 ^ u64::from(id)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Serves one HTTP/2 connection until the client closes it, a connection error, or
/// `shutdown` completes and the streams then open have ended. `io` must have been
/// negotiated as `h2`; the client's preface is expected first.
pub async fn serve_connection<IO, H, F>(
    io: IO,
    handler: H,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Request<Body>) -> F,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    tracing::trace!("serving an HTTP/2 connection");
    let mut conn = Conn::new(io, Box::pin(shutdown));
    // Our turns bound how long one poll runs; the cooperative budget would otherwise
    // make ready bodies look pending in the middle of a burst.
    let result = tokio::task::coop::unconstrained(std::future::poll_fn(|cx| {
        conn.poll(cx, &|req| Box::pin(handler(req)) as Handling)
    }))
    .await;
    // Close the session cleanly (TLS close_notify), unless the client is not reading.
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        tokio::io::AsyncWriteExt::shutdown(&mut conn.io),
    )
    .await;
    result
}

/// A connection error: the GOAWAY code and what it says.
#[derive(Debug)]
struct ConnError(u32, &'static str);

/// What wakes the connection: its streams, and request bodies handing window back.
struct Wakes {
    conn: AtomicWaker,
    ready: Mutex<Vec<u32>>,
    /// Bytes of request bodies consumed (or dropped), by stream.
    released: Mutex<Vec<(u32, usize)>>,
}

impl Wakes {
    fn release(&self, id: u32, n: usize) {
        if n > 0 {
            self.released.lock().expect("release list").push((id, n));
            self.conn.wake();
        }
    }
}

/// A stream's waker: queues the stream once until it is polled.
struct Node {
    id: u32,
    queued: AtomicBool,
    wakes: Weak<Wakes>,
}

impl Wake for Node {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            if let Some(w) = self.wakes.upgrade() {
                let first = {
                    let mut ready = w.ready.lock().expect("ready list");
                    ready.push(self.id);
                    ready.len() == 1
                };
                // Whoever made the list non-empty wakes the connection, which takes
                // the whole list: a publish that wakes a thousand streams wakes it once.
                if first {
                    w.conn.wake();
                }
            }
        }
    }
}

/// A request body as the connection receives it.
#[derive(Default)]
struct Inbound {
    chunks: VecDeque<Bytes>,
    end: bool,
    /// The stream was reset or the connection ended before the body did.
    broken: bool,
    /// The handler dropped the body: what arrives is handed back at once.
    dropped: bool,
    waker: Option<Waker>,
}

/// The body of a request that came over HTTP/2.
struct RequestBody {
    id: u32,
    state: Arc<Mutex<Inbound>>,
    wakes: Weak<Wakes>,
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        let mut s = self.state.lock().expect("request body");
        if let Some(chunk) = s.chunks.pop_front() {
            drop(s);
            if let Some(w) = self.wakes.upgrade() {
                w.release(self.id, chunk.len());
            }
            return Poll::Ready(Some(Ok(http_body::Frame::data(chunk))));
        }
        if s.end {
            return Poll::Ready(None);
        }
        if s.broken {
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the client ended the request before its body",
            ))));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let s = self.state.lock().expect("request body");
        s.end && s.chunks.is_empty()
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let mut s = self.state.lock().expect("request body");
        s.dropped = true;
        let unread: usize = s.chunks.drain(..).map(|c| c.len()).sum();
        drop(s);
        if let Some(w) = self.wakes.upgrade() {
            w.release(self.id, unread);
        }
    }
}

enum Phase {
    Handling(Handling),
    Sending(Body),
}

struct Stream {
    node: Arc<Node>,
    waker: Waker,
    /// While the client may still send the request body.
    inbound: Option<Arc<Mutex<Inbound>>>,
    /// What the client may still send on this stream.
    recv_window: i64,
    /// Bytes of the body still to come, if the request said `content-length`.
    remaining: Option<u64>,
    /// A HEAD request: the response has no body.
    head: bool,
    phase: Phase,
    /// What we may still send on this stream.
    send_window: i64,
    /// Data made but not yet sent for want of window, and whether it ends the stream.
    pending: Option<(Bytes, bool)>,
    /// Waiting for window.
    blocked: bool,
}

/// What polling a stream came to.
enum Step {
    /// Waiting for its future or body to wake it.
    Idle,
    /// It has more to make: poll it again after others have had their turn.
    Again,
    /// Waiting for the client to open its window.
    Blocked,
    /// The response has been sent whole.
    Finished,
    /// The stream is to be reset with this code.
    Reset(u32),
}

/// The connection's write side: the frames made and not yet written.
struct Out {
    buf: Vec<u8>,
    /// Bytes at the front of `buf` already written.
    written: usize,
    /// What we may still send on the connection.
    window: i64,
    /// The client's largest frame.
    max_frame: usize,
}

impl Out {
    fn waiting(&self) -> usize {
        self.buf.len() - self.written
    }

    fn full(&self) -> bool {
        self.waiting() >= WRITE_HIGH
    }

    fn head(&mut self, len: usize, kind: u8, flags: u8, id: u32) {
        let len = len as u32;
        self.buf
            .extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
        self.buf
            .extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    }

    fn settings(&mut self, settings: &[(u16, u32)]) {
        self.head(settings.len() * 6, SETTINGS, 0, 0);
        for (k, v) in settings {
            self.buf.extend_from_slice(&k.to_be_bytes());
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    fn window_update(&mut self, id: u32, n: u32) {
        self.head(4, WINDOW_UPDATE, 0, id);
        self.buf.extend_from_slice(&n.to_be_bytes());
    }

    fn reset(&mut self, id: u32, code: u32) {
        self.head(4, RST_STREAM, 0, id);
        self.buf.extend_from_slice(&code.to_be_bytes());
    }

    fn goaway(&mut self, last: u32, code: u32, debug: &str) {
        self.head(8 + debug.len(), GOAWAY, 0, 0);
        self.buf.extend_from_slice(&last.to_be_bytes());
        self.buf.extend_from_slice(&code.to_be_bytes());
        self.buf.extend_from_slice(debug.as_bytes());
    }

    /// A header block, split into HEADERS and CONTINUATION frames as the client's frame
    /// size requires.
    fn header_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let mut chunks = block.chunks(self.max_frame).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let mut flags = if end_stream { END_STREAM } else { 0 };
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        self.head(first.len(), HEADERS, flags, id);
        self.buf.extend_from_slice(first);
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            self.head(chunk.len(), CONTINUATION, flags, id);
            self.buf.extend_from_slice(chunk);
        }
    }

    /// Sends as much of `data` as the windows allow; returns what is left, if any.
    fn data(&mut self, id: u32, window: &mut i64, mut data: Bytes, end: bool) -> Option<Bytes> {
        loop {
            let room = (*window).min(self.window).max(0) as usize;
            let n = data.len().min(room).min(self.max_frame);
            if n == 0 && !data.is_empty() {
                return Some(data);
            }
            let chunk = data.split_to(n);
            let last = data.is_empty();
            self.head(n, DATA, if last && end { END_STREAM } else { 0 }, id);
            self.buf.extend_from_slice(&chunk);
            *window -= n as i64;
            self.window -= n as i64;
            if last {
                return None;
            }
        }
    }
}

/// Appends an HPACK integer with an `prefix`-bit prefix whose other bits are `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u8, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(first | n as u8);
        return;
    }
    out.push(first | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// Appends a header field as a literal that is not indexed: the client's dynamic table is
/// never touched, so no table size needs agreeing on.
fn hpack_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    hpack_int(out, 0, 7, name.len());
    out.extend_from_slice(name);
    hpack_int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

/// The header block of a response (or, with no status, of trailers).
fn encode_headers(status: Option<u16>, headers: &HeaderMap, length: Option<u64>) -> Vec<u8> {
    let mut block = Vec::with_capacity(64 + headers.len() * 32);
    if let Some(status) = status {
        // `:status` by its index in the static table (8), value as a literal.
        block.push(0x08);
        block.push(3);
        block.extend_from_slice(status.to_string().as_bytes());
    }
    for (name, value) in headers {
        if is_connection_specific(name) {
            continue;
        }
        hpack_literal(&mut block, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(n) = length {
        if !headers.contains_key(axum::http::header::CONTENT_LENGTH) {
            hpack_literal(&mut block, b"content-length", n.to_string().as_bytes());
        }
    }
    block
}

/// Fields that HTTP/2 forbids, as they describe an HTTP/1.1 connection.
fn is_connection_specific(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

/// A decoded request head.
#[derive(Default)]
struct Head {
    method: Option<Method>,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Option<Bytes>,
    headers: HeaderMap,
    /// Why the request is malformed, if it is.
    malformed: Option<&'static str>,
}

impl Head {
    fn field(&mut self, name: &[u8], value: &[u8], regular_seen: &mut bool) {
        if self.malformed.is_some() {
            return;
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if *regular_seen {
                self.malformed = Some("pseudo-header after a regular header");
                return;
            }
            let slot = match pseudo {
                b"method" => {
                    if self.method.is_some() {
                        self.malformed = Some("duplicate :method");
                        return;
                    }
                    match Method::from_bytes(value) {
                        Ok(m) => self.method = Some(m),
                        Err(_) => self.malformed = Some("invalid :method"),
                    }
                    return;
                }
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => &mut self.path,
                _ => {
                    self.malformed = Some("unknown pseudo-header");
                    return;
                }
            };
            if slot.is_some() {
                self.malformed = Some("duplicate pseudo-header");
                return;
            }
            *slot = Some(Bytes::copy_from_slice(value));
            return;
        }
        *regular_seen = true;
        if name.iter().any(u8::is_ascii_uppercase) {
            self.malformed = Some("uppercase header name");
            return;
        }
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            self.malformed = Some("invalid header field");
            return;
        };
        if is_connection_specific(&name) || (name == axum::http::header::TE && value != "trailers")
        {
            self.malformed = Some("connection-specific header field");
            return;
        }
        self.headers.append(name, value);
    }

    fn into_request(self) -> Result<(axum::http::request::Parts, bool), &'static str> {
        if let Some(why) = self.malformed {
            return Err(why);
        }
        let method = self.method.ok_or("missing :method")?;
        if method == Method::CONNECT {
            return Err("CONNECT is not supported");
        }
        let path = self.path.filter(|p| !p.is_empty()).ok_or("missing :path")?;
        let mut uri = Uri::builder().path_and_query(&path[..]);
        if let Some(authority) = self.authority {
            let scheme = self.scheme.ok_or("missing :scheme")?;
            uri = uri.scheme(&scheme[..]).authority(&authority[..]);
        } else if self.scheme.is_none() {
            return Err("missing :scheme");
        }
        let uri = uri.build().map_err(|_| "invalid :path or :authority")?;
        let head = method == Method::HEAD;
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .version(axum::http::Version::HTTP_2)
            .body(())
            .map_err(|_| "invalid request")?;
        *req.headers_mut() = self.headers;
        Ok((req.into_parts().0, head))
    }
}

/// A header block being gathered from HEADERS and CONTINUATION frames.
struct Gathering {
    id: u32,
    end_stream: bool,
    block: BytesMut,
}

struct Conn<IO> {
    io: IO,
    rd: BytesMut,
    scratch: Box<[u8]>,
    out: Out,
    decoder: loona_hpack::Decoder<'static>,
    streams: StreamMap,
    wakes: Arc<Wakes>,
    /// Streams to poll, in the order they became ready.
    runnable: VecDeque<u32>,
    /// The ready list last taken from `wakes`, kept for its capacity.
    woken: Vec<u32>,
    /// Streams waiting for window.
    blocked: Vec<u32>,
    /// The highest stream the client has opened.
    last_id: u32,
    preface: bool,
    got_settings: bool,
    /// The client's initial stream window.
    peer_window: i64,
    /// What the client may still send on the connection.
    recv_window: i64,
    gathering: Option<Gathering>,
    /// Streams above this id are ignored: a GOAWAY has been sent.
    accept_upto: u32,
    /// No new streams: we sent a GOAWAY or received one. Ends once the streams have.
    closing: bool,
    /// The client closed its side, or a connection error was sent: end now.
    done: bool,
    error: Option<ConnError>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
    shutdown_seen: bool,
    resets: (Instant, u32),
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<IO> {
    fn new(io: IO, shutdown: Pin<Box<dyn Future<Output = ()> + Send>>) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(4096);
        let mut out = Out {
            buf: Vec::with_capacity(IDLE_BUFFER),
            written: 0,
            window: 65_535,
            max_frame: 16_384,
        };
        out.settings(&[
            (SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS as u32),
            (SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
        ]);
        out.window_update(0, CONN_WINDOW - 65_535);
        Conn {
            io,
            rd: BytesMut::with_capacity(16 * 1024),
            scratch: vec![0; 16 * 1024].into_boxed_slice(),
            out,
            decoder,
            streams: StreamMap::default(),
            wakes: Arc::new(Wakes {
                conn: AtomicWaker::new(),
                ready: Mutex::new(Vec::new()),
                released: Mutex::new(Vec::new()),
            }),
            runnable: VecDeque::new(),
            woken: Vec::new(),
            blocked: Vec::new(),
            last_id: 0,
            preface: false,
            got_settings: false,
            peer_window: 65_535,
            recv_window: i64::from(CONN_WINDOW),
            gathering: None,
            accept_upto: u32::MAX,
            closing: false,
            done: false,
            error: None,
            shutdown,
            shutdown_seen: false,
            resets: (Instant::now(), 0),
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        handler: &dyn Fn(Request<Body>) -> Handling,
    ) -> Poll<io::Result<()>> {
        self.wakes.conn.register(cx.waker());
        if !self.shutdown_seen && self.shutdown.as_mut().poll(cx).is_ready() {
            self.shutdown_seen = true;
            self.go_away(NO_ERROR, "server shutting down");
        }
        for _ in 0..TURNS_PER_POLL {
            let reading = if self.done || self.out.waiting() >= 4 * WRITE_HIGH {
                Poll::Pending
            } else {
                match self.read(cx, handler) {
                    Ok(r) => r,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            };
            if let Some(ConnError(code, why)) = self.error.take() {
                self.out.goaway(self.last_id, code, why);
                self.done = true;
            }
            if !self.done {
                self.take_wakes();
                self.run_streams();
            }
            if let Poll::Ready(Err(e)) = self.write(cx) {
                return Poll::Ready(Err(e));
            }
            if self.done {
                // The client has gone, or a connection error was sent (as far as the socket
                // would take it): what is left is dropped.
                self.streams.clear();
                return Poll::Ready(Ok(()));
            }
            if self.closing && self.streams.is_empty() && self.out.waiting() == 0 {
                return Poll::Ready(Ok(()));
            }
            // Another turn if streams are waiting and there is room for what they make, or
            // if the read stopped for its budget rather than for want of bytes.
            let more_streams = !self.runnable.is_empty() && !self.out.full();
            if !more_streams && reading.is_pending() {
                // Everything we wait for (socket, streams, bodies) has our waker. An idle
                // connection does not keep the write buffer a burst grew.
                if self.out.waiting() == 0 && self.out.buf.capacity() > IDLE_BUFFER {
                    self.out.buf = Vec::with_capacity(IDLE_BUFFER);
                }
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Reads and handles frames until the socket has no more (pending) or a budget is
    /// spent (ready: more may be waiting).
    fn read(
        &mut self,
        cx: &mut Context<'_>,
        handler: &dyn Fn(Request<Body>) -> Handling,
    ) -> io::Result<Poll<()>> {
        for _ in 0..8 {
            let mut buf = ReadBuf::new(&mut self.scratch);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Pending => return Ok(Poll::Pending),
                Poll::Ready(Err(e)) => {
                    self.done = true;
                    return match e.kind() {
                        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => {
                            Ok(Poll::Ready(()))
                        }
                        _ => Err(e),
                    };
                }
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    if n == 0 {
                        self.done = true;
                        return Ok(Poll::Ready(()));
                    }
                    self.rd.extend_from_slice(&self.scratch[..n]);
                    if let Err(e) = self.frames(handler) {
                        self.error = Some(e);
                        return Ok(Poll::Ready(()));
                    }
                    if self.out.waiting() >= 4 * WRITE_HIGH {
                        return Ok(Poll::Ready(()));
                    }
                }
            }
        }
        Ok(Poll::Ready(()))
    }

    /// Handles the whole frames in the read buffer.
    fn frames(&mut self, handler: &dyn Fn(Request<Body>) -> Handling) -> Result<(), ConnError> {
        if !self.preface {
            let n = self.rd.len().min(PREFACE.len());
            if self.rd[..n] != PREFACE[..n] {
                return Err(ConnError(PROTOCOL_ERROR, "expected the HTTP/2 preface"));
            }
            if n < PREFACE.len() {
                return Ok(());
            }
            let _ = self.rd.split_to(PREFACE.len());
            self.preface = true;
        }
        while self.rd.len() >= 9 {
            let len = (usize::from(self.rd[0]) << 16)
                | (usize::from(self.rd[1]) << 8)
                | usize::from(self.rd[2]);
            if len > MAX_FRAME_RECV {
                return Err(ConnError(FRAME_SIZE_ERROR, "frame larger than allowed"));
            }
            if self.rd.len() < 9 + len {
                self.rd.reserve(9 + len - self.rd.len());
                break;
            }
            let frame = self.rd.split_to(9 + len).freeze();
            let (kind, flags) = (frame[3], frame[4]);
            let id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
            let payload = frame.slice(9..);
            if !self.got_settings && (kind != SETTINGS || flags & ACK != 0) {
                return Err(ConnError(
                    PROTOCOL_ERROR,
                    "the first frame must be SETTINGS",
                ));
            }
            if let Some(g) = &self.gathering {
                if kind != CONTINUATION || id != g.id {
                    return Err(ConnError(PROTOCOL_ERROR, "expected CONTINUATION"));
                }
            }
            match kind {
                DATA => self.on_data(id, flags, payload)?,
                HEADERS => self.on_headers(id, flags, payload, handler)?,
                PRIORITY => {
                    if id == 0 {
                        return Err(ConnError(PROTOCOL_ERROR, "PRIORITY on stream 0"));
                    }
                    if payload.len() != 5 && self.streams.contains_key(&id) {
                        self.reset(id, FRAME_SIZE_ERROR);
                    }
                }
                RST_STREAM => self.on_reset(id, &payload)?,
                SETTINGS => self.on_settings(id, flags, &payload)?,
                PUSH_PROMISE => return Err(ConnError(PROTOCOL_ERROR, "clients cannot push")),
                PING => {
                    if id != 0 {
                        return Err(ConnError(PROTOCOL_ERROR, "PING on a stream"));
                    }
                    if payload.len() != 8 {
                        return Err(ConnError(FRAME_SIZE_ERROR, "PING must be 8 bytes"));
                    }
                    if flags & ACK == 0 {
                        self.out.head(8, PING, ACK, 0);
                        self.out.buf.extend_from_slice(&payload);
                    }
                }
                GOAWAY => {
                    if id != 0 {
                        return Err(ConnError(PROTOCOL_ERROR, "GOAWAY on a stream"));
                    }
                    if payload.len() < 8 {
                        return Err(ConnError(FRAME_SIZE_ERROR, "GOAWAY too short"));
                    }
                    self.closing = true;
                }
                WINDOW_UPDATE => self.on_window_update(id, &payload)?,
                CONTINUATION => self.on_continuation(id, flags, &payload, handler)?,
                // Unknown frame types are ignored.
                _ => {}
            }
        }
        Ok(())
    }

    fn on_settings(&mut self, id: u32, flags: u8, payload: &[u8]) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError(PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if flags & ACK != 0 {
            if !payload.is_empty() {
                return Err(ConnError(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"));
            }
            return Ok(());
        }
        if payload.len() % 6 != 0 {
            return Err(ConnError(FRAME_SIZE_ERROR, "SETTINGS length"));
        }
        for s in payload.chunks_exact(6) {
            let key = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match key {
                SETTINGS_ENABLE_PUSH if value > 1 => {
                    return Err(ConnError(PROTOCOL_ERROR, "ENABLE_PUSH must be 0 or 1"));
                }
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(ConnError(FLOW_CONTROL_ERROR, "initial window too large"));
                    }
                    let delta = i64::from(value) - self.peer_window;
                    self.peer_window = i64::from(value);
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > MAX_WINDOW {
                            return Err(ConnError(FLOW_CONTROL_ERROR, "stream window overflow"));
                        }
                    }
                    if delta > 0 {
                        self.unblock();
                    }
                }
                SETTINGS_MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(ConnError(PROTOCOL_ERROR, "MAX_FRAME_SIZE out of range"));
                    }
                    self.out.max_frame = value as usize;
                }
                // The header table size only matters to an encoder that indexes (ours does
                // not); the others limit what we do not do, and unknown ones are ignored.
                _ => {}
            }
        }
        self.got_settings = true;
        self.out.head(0, SETTINGS, ACK, 0);
        Ok(())
    }

    fn on_window_update(&mut self, id: u32, payload: &[u8]) -> Result<(), ConnError> {
        if payload.len() != 4 {
            return Err(ConnError(FRAME_SIZE_ERROR, "WINDOW_UPDATE must be 4 bytes"));
        }
        let inc = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
        );
        if id == 0 {
            if inc == 0 {
                return Err(ConnError(PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
            }
            self.out.window += inc;
            if self.out.window > MAX_WINDOW {
                return Err(ConnError(FLOW_CONTROL_ERROR, "connection window overflow"));
            }
            self.unblock();
            return Ok(());
        }
        if id > self.last_id {
            return Err(ConnError(PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if inc == 0 {
            self.reset(id, PROTOCOL_ERROR);
            return Ok(());
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            self.reset(id, FLOW_CONTROL_ERROR);
            return Ok(());
        }
        if s.blocked && self.out.window > 0 {
            s.blocked = false;
            self.runnable.push_back(id);
        }
        Ok(())
    }

    /// Streams that waited for window get their turn again.
    fn unblock(&mut self) {
        if self.out.window <= 0 {
            return;
        }
        for id in std::mem::take(&mut self.blocked) {
            if let Some(s) = self.streams.get_mut(&id) {
                if s.blocked && s.send_window > 0 {
                    s.blocked = false;
                    self.runnable.push_back(id);
                } else if s.blocked {
                    self.blocked.push(id);
                }
            }
        }
    }

    fn on_reset(&mut self, id: u32, payload: &[u8]) -> Result<(), ConnError> {
        if payload.len() != 4 {
            return Err(ConnError(FRAME_SIZE_ERROR, "RST_STREAM must be 4 bytes"));
        }
        if id == 0 || id > self.last_id {
            return Err(ConnError(PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
        }
        if self.forget(id) {
            // Rapid reset: opening streams and cancelling them at once costs us their
            // handlers; a client that does so faster than any real one is cut off.
            let now = Instant::now();
            if now.duration_since(self.resets.0).as_secs() >= 1 {
                self.resets = (now, 0);
            }
            self.resets.1 += 1;
            if self.resets.1 > RESETS_PER_SECOND {
                return Err(ConnError(ENHANCE_YOUR_CALM, "too many streams reset"));
            }
        }
        Ok(())
    }

    fn break_body(inbound: &Mutex<Inbound>) {
        let mut b = inbound.lock().expect("request body");
        if !b.end {
            b.broken = true;
        }
        if let Some(w) = b.waker.take() {
            w.wake();
        }
    }

    fn on_data(&mut self, id: u32, flags: u8, payload: Bytes) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError(PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let flow = payload.len();
        self.recv_window -= flow as i64;
        if self.recv_window < 0 {
            return Err(ConnError(FLOW_CONTROL_ERROR, "connection window exceeded"));
        }
        let data = match strip_padding(flags, payload) {
            Some(d) => d,
            None => return Err(ConnError(PROTOCOL_ERROR, "padding longer than the frame")),
        };
        let Some(s) = self.streams.get_mut(&id).filter(|s| s.inbound.is_some()) else {
            if id > self.last_id {
                return Err(ConnError(PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            // A stream that has ended or been reset: the data may have been in flight.
            self.release(0, flow);
            if !self.streams.contains_key(&id) {
                return Ok(());
            }
            self.reset(id, STREAM_CLOSED);
            return Ok(());
        };
        s.recv_window -= flow as i64;
        let overrun = s.recv_window < 0;
        let too_long = match &mut s.remaining {
            Some(left) => match left.checked_sub(data.len() as u64) {
                Some(l) => {
                    *left = l;
                    flags & END_STREAM != 0 && l > 0
                }
                None => true,
            },
            None => false,
        };
        if overrun || too_long {
            self.release(0, flow);
            self.reset(
                id,
                if overrun {
                    FLOW_CONTROL_ERROR
                } else {
                    PROTOCOL_ERROR
                },
            );
            return Ok(());
        }
        let inbound = s.inbound.as_ref().expect("checked").clone();
        let padding = flow - data.len();
        let mut b = inbound.lock().expect("request body");
        let handed_back = if b.dropped { flow } else { padding };
        if !b.dropped && !data.is_empty() {
            b.chunks.push_back(data);
        }
        if flags & END_STREAM != 0 {
            b.end = true;
            s.inbound = None;
        }
        if let Some(w) = b.waker.take() {
            w.wake();
        }
        drop(b);
        if handed_back > 0 {
            self.release(id, handed_back);
        }
        Ok(())
    }

    /// Hands `n` bytes of window back: the connection's, and the stream's while it
    /// still receives.
    fn release(&mut self, id: u32, n: usize) {
        if n == 0 {
            return;
        }
        self.recv_window += n as i64;
        self.out.window_update(0, n as u32);
        if let Some(s) = self.streams.get_mut(&id) {
            if s.inbound.is_some() {
                s.recv_window += n as i64;
                self.out.window_update(id, n as u32);
            }
        }
    }

    fn on_headers(
        &mut self,
        id: u32,
        flags: u8,
        payload: Bytes,
        handler: &dyn Fn(Request<Body>) -> Handling,
    ) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError(PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        let mut block = strip_padding(flags, payload)
            .ok_or(ConnError(PROTOCOL_ERROR, "padding longer than the frame"))?;
        if flags & PRIORITY_FLAG != 0 {
            if block.len() < 5 {
                return Err(ConnError(FRAME_SIZE_ERROR, "HEADERS priority too short"));
            }
            let _ = block.split_to(5);
        }
        let end_stream = flags & END_STREAM != 0;
        if flags & END_HEADERS == 0 {
            self.gathering = Some(Gathering {
                id,
                end_stream,
                block: BytesMut::from(&block[..]),
            });
            return Ok(());
        }
        self.on_header_block(id, end_stream, &block, handler)
    }

    fn on_continuation(
        &mut self,
        id: u32,
        flags: u8,
        payload: &[u8],
        handler: &dyn Fn(Request<Body>) -> Handling,
    ) -> Result<(), ConnError> {
        let Some(g) = self.gathering.as_mut().filter(|g| g.id == id) else {
            return Err(ConnError(PROTOCOL_ERROR, "unexpected CONTINUATION"));
        };
        if g.block.len() + payload.len() > MAX_HEADER_LIST {
            return Err(ConnError(ENHANCE_YOUR_CALM, "header block too large"));
        }
        g.block.extend_from_slice(payload);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let g = self.gathering.take().expect("gathering");
        self.on_header_block(id, g.end_stream, &g.block, handler)
    }

    fn on_header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        handler: &dyn Fn(Request<Body>) -> Handling,
    ) -> Result<(), ConnError> {
        // Every block is decoded, even one that is then refused: the decoder's table must
        // follow the client's encoder.
        let mut head = Head::default();
        let mut regular_seen = false;
        let mut size = 0usize;
        self.decoder
            .decode_with_cb(block, |name, value| {
                size += name.len() + value.len() + 32;
                if size > MAX_HEADER_LIST {
                    head.malformed = Some("header list too large");
                }
                head.field(&name, &value, &mut regular_seen);
            })
            .map_err(|_| ConnError(COMPRESSION_ERROR, "invalid header block"))?;
        if id % 2 == 0 {
            return Err(ConnError(PROTOCOL_ERROR, "even stream id from a client"));
        }
        if let Some(s) = self.streams.get_mut(&id) {
            // Trailers: they end the request body; their fields are not kept.
            let Some(inbound) = s.inbound.take() else {
                self.reset(id, STREAM_CLOSED);
                return Ok(());
            };
            if !end_stream {
                self.reset(id, PROTOCOL_ERROR);
                return Ok(());
            }
            let mut b = inbound.lock().expect("request body");
            b.end = true;
            if let Some(w) = b.waker.take() {
                w.wake();
            }
            return Ok(());
        }
        if id <= self.last_id {
            // A stream that has ended.
            self.reset(id, STREAM_CLOSED);
            return Ok(());
        }
        self.last_id = id;
        if self.closing || id > self.accept_upto {
            return Ok(());
        }
        if self.streams.len() >= MAX_STREAMS {
            self.reset(id, REFUSED_STREAM);
            return Ok(());
        }
        let remaining = head
            .headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let (parts, is_head) = match head.into_request() {
            Ok(p) => p,
            Err(why) => {
                tracing::debug!(stream = id, why, "malformed HTTP/2 request");
                self.reset(id, PROTOCOL_ERROR);
                return Ok(());
            }
        };
        if end_stream && remaining.is_some_and(|n| n > 0) {
            self.reset(id, PROTOCOL_ERROR);
            return Ok(());
        }
        let inbound = (!end_stream).then(|| Arc::new(Mutex::new(Inbound::default())));
        let body = match &inbound {
            None => Body::empty(),
            Some(state) => Body::new(RequestBody {
                id,
                state: state.clone(),
                wakes: Arc::downgrade(&self.wakes),
            }),
        };
        let node = Arc::new(Node {
            id,
            queued: AtomicBool::new(true),
            wakes: Arc::downgrade(&self.wakes),
        });
        let future = handler(Request::from_parts(parts, body));
        self.streams.insert(
            id,
            Stream {
                waker: Waker::from(node.clone()),
                node,
                inbound,
                recv_window: i64::from(STREAM_WINDOW),
                remaining,
                head: is_head,
                phase: Phase::Handling(future),
                send_window: self.peer_window,
                pending: None,
                blocked: false,
            },
        );
        self.runnable.push_back(id);
        Ok(())
    }

    /// Resets a stream and forgets it.
    fn reset(&mut self, id: u32, code: u32) {
        self.out.reset(id, code);
        self.forget(id);
    }

    /// Drops a stream (its handler or body with it); a request body still being read
    /// ends with an error. Whether the stream was open.
    fn forget(&mut self, id: u32) -> bool {
        let Some(s) = self.streams.remove(&id) else {
            return false;
        };
        if let Some(inbound) = &s.inbound {
            Self::break_body(inbound);
        }
        true
    }

    /// No new streams; the open ones finish.
    fn go_away(&mut self, code: u32, why: &'static str) {
        if !self.closing {
            self.out.goaway(self.last_id, code, why);
            self.accept_upto = self.last_id;
            self.closing = true;
        }
    }

    /// Moves what woke since the last turn into the run queue, and hands back the window
    /// of consumed request bodies.
    fn take_wakes(&mut self) {
        std::mem::swap(
            &mut *self.wakes.ready.lock().expect("ready list"),
            &mut self.woken,
        );
        self.runnable.extend(self.woken.drain(..));
        let released = std::mem::take(&mut *self.wakes.released.lock().expect("release list"));
        for (id, n) in released {
            self.release(id, n);
        }
    }

    /// Polls up to a turn's worth of runnable streams.
    fn run_streams(&mut self) {
        let mut polled = 0;
        while polled < STREAMS_PER_TURN && !self.out.full() {
            let Some(id) = self.runnable.pop_front() else {
                break;
            };
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            if s.blocked {
                continue;
            }
            polled += 1;
            s.node.queued.store(false, Ordering::Release);
            match poll_stream(&mut self.out, id, s) {
                Step::Idle => {}
                Step::Again => self.runnable.push_back(id),
                Step::Blocked => {
                    s.blocked = true;
                    self.blocked.push(id);
                }
                Step::Finished => {
                    if let Some(s) = self.streams.remove(&id) {
                        if s.inbound.is_some() {
                            // The response is whole; the rest of the request is not needed.
                            self.out.reset(id, NO_ERROR);
                        }
                    }
                }
                Step::Reset(code) => self.reset(id, code),
            }
        }
    }

    /// Writes what is waiting. Ready once all of it has been written and flushed.
    fn write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out.written < self.out.buf.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.out.buf[self.out.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.out.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.buf.clear();
        self.out.written = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

/// The payload of a DATA or HEADERS frame without its padding; `None` if the padding
/// claims more than the frame holds.
fn strip_padding(flags: u8, mut payload: Bytes) -> Option<Bytes> {
    if flags & PADDED == 0 {
        return Some(payload);
    }
    let pad = usize::from(*payload.first()?);
    let _ = payload.split_to(1);
    if pad > payload.len() {
        return None;
    }
    payload.truncate(payload.len() - pad);
    Some(payload)
}

/// Sends `data` as the windows allow, keeping what they do not in `pending`: the step the
/// stream comes to (blocked, or finished with `end`), or `None` to go on.
fn send(
    out: &mut Out,
    id: u32,
    window: &mut i64,
    pending: &mut Option<(Bytes, bool)>,
    data: Bytes,
    end: bool,
) -> Option<Step> {
    match out.data(id, window, data, end) {
        Some(rest) => {
            *pending = Some((rest, end));
            Some(Step::Blocked)
        }
        None => end.then_some(Step::Finished),
    }
}

/// Polls one stream's handler or body and frames what it makes.
fn poll_stream(out: &mut Out, id: u32, s: &mut Stream) -> Step {
    let mut cx = Context::from_waker(&s.waker);
    if let Phase::Handling(future) = &mut s.phase {
        let response =
            match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                Err(_) => {
                    tracing::error!(stream = id, "a request handler panicked");
                    return Step::Reset(INTERNAL_ERROR);
                }
                Ok(Poll::Pending) => return Step::Idle,
                Ok(Poll::Ready(response)) => response,
            };
        let (parts, body) = response.into_parts();
        let end = s.head || body.is_end_stream();
        // As HTTP/1.1 would: a body of known size says so, except where none may be.
        let length = body
            .size_hint()
            .exact()
            .filter(|_| !matches!(parts.status.as_u16(), 100..=199 | 204 | 304));
        let block = encode_headers(Some(parts.status.as_u16()), &parts.headers, length);
        out.header_block(id, &block, end);
        if end {
            return Step::Finished;
        }
        s.phase = Phase::Sending(body);
    }
    let Phase::Sending(body) = &mut s.phase else {
        unreachable!("a stream past its handler sends its body");
    };
    if let Some((data, end)) = s.pending.take() {
        if let Some(step) = send(out, id, &mut s.send_window, &mut s.pending, data, end) {
            return step;
        }
    }
    for _ in 0..FRAMES_PER_POLL {
        if out.full() {
            return Step::Again;
        }
        let frame = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            Pin::new(&mut *body).poll_frame(&mut cx)
        })) {
            Err(_) => {
                tracing::error!(stream = id, "a response body panicked");
                return Step::Reset(INTERNAL_ERROR);
            }
            Ok(Poll::Pending) => return Step::Idle,
            Ok(Poll::Ready(None)) => {
                out.data(id, &mut s.send_window, Bytes::new(), true);
                return Step::Finished;
            }
            Ok(Poll::Ready(Some(Err(e)))) => {
                tracing::debug!(stream = id, error = %e, "a response body failed");
                return Step::Reset(INTERNAL_ERROR);
            }
            Ok(Poll::Ready(Some(Ok(frame)))) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                let end = body.is_end_stream();
                if data.is_empty() && !end {
                    continue;
                }
                if let Some(step) = send(out, id, &mut s.send_window, &mut s.pending, data, end) {
                    return step;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let block = encode_headers(None, &trailers, None);
                    out.header_block(id, &block, true);
                    return Step::Finished;
                }
            }
        }
    }
    Step::Again
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A raw HTTP/2 client over an in-memory pipe to a served connection.
    struct Peer {
        io: DuplexStream,
        buf: BytesMut,
        decoder: loona_hpack::Decoder<'static>,
        server: tokio::task::JoinHandle<io::Result<()>>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
    }

    #[derive(Debug)]
    struct Frame {
        kind: u8,
        flags: u8,
        id: u32,
        payload: Bytes,
    }

    /// Answers by path: `/echo` returns the request body; `/stream/N` sends N bytes in
    /// chunks of 10; `/pending` never answers (and counts its drops); `/panic` panics;
    /// `/trailers` sends a body and trailers.
    fn handler(dropped: Arc<AtomicUsize>) -> impl Fn(Request<Body>) -> Handling {
        move |req: Request<Body>| {
            let dropped = dropped.clone();
            Box::pin(async move {
                let path = req.uri().path().to_string();
                if path == "/echo" {
                    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                        .await
                        .map(|b| b.to_vec())
                        .unwrap_or_else(|e| format!("error: {e}").into_bytes());
                    return Response::new(Body::from(body));
                }
                if let Some(n) = path.strip_prefix("/stream/") {
                    let n: usize = n.parse().unwrap();
                    let chunks = (0..n.div_ceil(10)).map(move |i| {
                        Ok::<_, io::Error>(Bytes::from(vec![b'a'; (n - i * 10).min(10)]))
                    });
                    return Response::new(Body::from_stream(futures_util::stream::iter(chunks)));
                }
                if path == "/pending" {
                    struct Guard(Arc<AtomicUsize>);
                    impl Drop for Guard {
                        fn drop(&mut self) {
                            self.0.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let _guard = Guard(dropped);
                    std::future::pending::<()>().await;
                }
                if path == "/panic" {
                    panic!("handler panic");
                }
                if path == "/trailers" {
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                    let frames = vec![
                        Ok::<_, io::Error>(http_body::Frame::data(Bytes::from_static(b"hi"))),
                        Ok(http_body::Frame::trailers(trailers)),
                    ];
                    return Response::new(Body::new(http_body_util::StreamBody::new(
                        futures_util::stream::iter(frames),
                    )));
                }
                let mut r = Response::new(Body::from("not found"));
                *r.status_mut() = axum::http::StatusCode::NOT_FOUND;
                r
            })
        }
    }

    impl Peer {
        /// Connects with the given settings and completes the handshake.
        async fn start(settings: &[(u16, u32)]) -> (Self, Arc<AtomicUsize>) {
            let (mut p, dropped) = Self::raw().await;
            p.io.write_all(PREFACE).await.unwrap();
            let mut payload = Vec::new();
            for (k, v) in settings {
                payload.extend_from_slice(&k.to_be_bytes());
                payload.extend_from_slice(&v.to_be_bytes());
            }
            p.send(SETTINGS, 0, 0, &payload).await;
            // Our settings, the connection window, the ACK of theirs.
            let s = p.next().await;
            assert_eq!((s.kind, s.flags), (SETTINGS, 0));
            let w = p.next().await;
            assert_eq!((w.kind, w.id), (WINDOW_UPDATE, 0));
            let ack = p.next().await;
            assert_eq!((ack.kind, ack.flags), (SETTINGS, ACK));
            (p, dropped)
        }

        async fn raw() -> (Self, Arc<AtomicUsize>) {
            let (client, server) = tokio::io::duplex(1 << 22);
            let dropped = Arc::new(AtomicUsize::new(0));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let h = handler(dropped.clone());
            let server = tokio::spawn(serve_connection(server, h, async move {
                let _ = stopped.await;
            }));
            let peer = Peer {
                io: client,
                buf: BytesMut::new(),
                decoder: loona_hpack::Decoder::new(),
                server,
                stop: Some(stop),
            };
            (peer, dropped)
        }

        async fn send(&mut self, kind: u8, flags: u8, id: u32, payload: &[u8]) {
            let mut out = Out {
                buf: Vec::new(),
                written: 0,
                window: 0,
                max_frame: 16_384,
            };
            out.head(payload.len(), kind, flags, id);
            out.buf.extend_from_slice(payload);
            self.io.write_all(&out.buf).await.unwrap();
        }

        async fn request(
            &mut self,
            id: u32,
            method: &str,
            path: &str,
            extra: &[(&str, &str)],
            end: bool,
        ) {
            let block = request_block(method, path, extra);
            let flags = END_HEADERS | if end { END_STREAM } else { 0 };
            self.send(HEADERS, flags, id, &block).await;
        }

        /// The next frame, or `None` once the server has closed.
        async fn try_next(&mut self) -> Option<Frame> {
            loop {
                if self.buf.len() >= 9 {
                    let len = (usize::from(self.buf[0]) << 16)
                        | (usize::from(self.buf[1]) << 8)
                        | usize::from(self.buf[2]);
                    if self.buf.len() >= 9 + len {
                        let f = self.buf.split_to(9 + len).freeze();
                        return Some(Frame {
                            kind: f[3],
                            flags: f[4],
                            id: u32::from_be_bytes([f[5], f[6], f[7], f[8]]),
                            payload: f.slice(9..),
                        });
                    }
                }
                let n = tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    self.io.read_buf(&mut self.buf),
                )
                .await
                .expect("the server answers within 5 s")
                .unwrap_or(0);
                if n == 0 {
                    return None;
                }
            }
        }

        async fn next(&mut self) -> Frame {
            self.try_next().await.expect("another frame")
        }

        /// Fields of a header block.
        fn fields(&mut self, block: &[u8]) -> Vec<(String, String)> {
            let mut out = Vec::new();
            self.decoder
                .decode_with_cb(block, |n, v| {
                    out.push((
                        String::from_utf8(n.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    ))
                })
                .unwrap();
            out
        }

        /// Reads a whole response on `id` (skipping other frames): status, body, trailers.
        async fn response(&mut self, id: u32) -> (String, Vec<u8>, Vec<(String, String)>) {
            let mut status = String::new();
            let mut body = Vec::new();
            loop {
                let f = self.next().await;
                if f.id != id {
                    continue;
                }
                match f.kind {
                    HEADERS => {
                        let fields = self.fields(&f.payload);
                        if status.is_empty() {
                            status = fields[0].1.clone();
                            if f.flags & END_STREAM != 0 {
                                return (status, body, Vec::new());
                            }
                        } else {
                            assert_ne!(f.flags & END_STREAM, 0, "trailers end the stream");
                            return (status, body, fields);
                        }
                    }
                    DATA => {
                        body.extend_from_slice(&f.payload);
                        if f.flags & END_STREAM != 0 {
                            return (status, body, Vec::new());
                        }
                    }
                    RST_STREAM => panic!("stream {id} reset: {:?}", f.payload),
                    _ => {}
                }
            }
        }

        /// The next frame of the given kind, skipping others.
        async fn next_of(&mut self, kind: u8) -> Frame {
            loop {
                let f = self.next().await;
                if f.kind == kind {
                    return f;
                }
            }
        }

        /// The error code of the GOAWAY the server closes with.
        async fn goaway(&mut self) -> u32 {
            let f = self.next_of(GOAWAY).await;
            u32::from_be_bytes([f.payload[4], f.payload[5], f.payload[6], f.payload[7]])
        }
    }

    fn request_block(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        hpack_literal(&mut block, b":method", method.as_bytes());
        hpack_literal(&mut block, b":scheme", b"https");
        hpack_literal(&mut block, b":authority", b"berth.test");
        hpack_literal(&mut block, b":path", path.as_bytes());
        for (n, v) in extra {
            hpack_literal(&mut block, n.as_bytes(), v.as_bytes());
        }
        block
    }

    fn code(f: &Frame) -> u32 {
        u32::from_be_bytes([f.payload[0], f.payload[1], f.payload[2], f.payload[3]])
    }

    #[tokio::test]
    async fn requests_get_their_responses_with_status_length_and_body() {
        let (mut p, _) = Peer::start(&[]).await;
        p.request(1, "GET", "/nope", &[], true).await;
        let h = p.next().await;
        assert_eq!((h.kind, h.id, h.flags & END_STREAM), (HEADERS, 1, 0));
        let fields = p.fields(&h.payload);
        assert_eq!(fields[0], (":status".into(), "404".into()));
        assert!(fields.contains(&("content-length".into(), "9".into())));
        let d = p.next().await;
        assert_eq!((d.kind, d.id, d.flags), (DATA, 1, END_STREAM));
        assert_eq!(&d.payload[..], b"not found");
        // HEAD: the same head, no body.
        p.request(3, "HEAD", "/nope", &[], true).await;
        let h = p.next().await;
        assert_eq!(
            (h.kind, h.id, h.flags & END_STREAM),
            (HEADERS, 3, END_STREAM)
        );
        // Streams interleave: the second answers while the first still waits.
        p.request(5, "GET", "/pending", &[], true).await;
        p.request(7, "GET", "/stream/25", &[], true).await;
        let (status, body, _) = p.response(7).await;
        assert_eq!((status.as_str(), body.len()), ("200", 25));
    }

    #[tokio::test]
    async fn request_bodies_flow_past_the_window_as_the_handler_reads() {
        // The client's windows are wide open for the answer.
        let (mut p, _) = Peer::start(&[(SETTINGS_INITIAL_WINDOW_SIZE, 1 << 30)]).await;
        p.send(WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes())
            .await;
        let body: Vec<u8> = (0..3 * STREAM_WINDOW as usize).map(|i| i as u8).collect();
        let len = body.len().to_string();
        p.request(1, "POST", "/echo", &[("content-length", &len)], false)
            .await;
        // Send as the windows allow; the server hands window back as the handler reads.
        let (mut stream_window, mut conn_window) =
            (i64::from(STREAM_WINDOW), i64::from(CONN_WINDOW));
        let mut sent = 0;
        let mut response = Vec::new();
        let mut done = false;
        while !done {
            while sent < body.len() && stream_window > 0 && conn_window > 0 {
                let n = (body.len() - sent).min(16_384).min(stream_window as usize);
                let last = sent + n == body.len();
                p.send(
                    DATA,
                    if last { END_STREAM } else { 0 },
                    1,
                    &body[sent..sent + n],
                )
                .await;
                sent += n;
                stream_window -= n as i64;
                conn_window -= n as i64;
            }
            let f = p.next().await;
            match f.kind {
                WINDOW_UPDATE if f.id == 0 => conn_window += i64::from(code(&f)),
                WINDOW_UPDATE => stream_window += i64::from(code(&f)),
                HEADERS => assert_eq!(p.fields(&f.payload)[0].1, "200"),
                DATA => {
                    response.extend_from_slice(&f.payload);
                    done = f.flags & END_STREAM != 0;
                }
                other => panic!("unexpected frame {other}"),
            }
        }
        assert_eq!(response, body);
    }

    #[tokio::test]
    async fn responses_wait_for_the_clients_window() {
        let (mut p, _) = Peer::start(&[(SETTINGS_INITIAL_WINDOW_SIZE, 15)]).await;
        p.request(1, "GET", "/stream/40", &[], true).await;
        assert_eq!(p.next().await.kind, HEADERS);
        let mut got = 0;
        while got < 15 {
            let d = p.next().await;
            assert_eq!(d.kind, DATA);
            got += d.payload.len();
        }
        assert_eq!(got, 15, "no more than the window");
        // A ping answered shows that nothing more was queued before it.
        p.send(PING, 0, 0, b"12345678").await;
        let f = p.next().await;
        assert_eq!(
            (f.kind, f.flags, &f.payload[..]),
            (PING, ACK, &b"12345678"[..])
        );
        p.send(WINDOW_UPDATE, 0, 1, &25u32.to_be_bytes()).await;
        let mut end = false;
        while !end {
            let d = p.next().await;
            assert_eq!(d.kind, DATA);
            got += d.payload.len();
            end = d.flags & END_STREAM != 0;
        }
        assert_eq!(got, 40);
        // A larger initial window lets waiting streams go on.
        p.request(3, "GET", "/stream/30", &[], true).await;
        assert_eq!(p.next().await.kind, HEADERS);
        assert_eq!(p.next().await.payload.len(), 10);
        assert_eq!(p.next().await.payload.len(), 5);
        p.send(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 100]).await;
        assert_eq!(p.next().await.kind, SETTINGS);
        let (_, rest, _) = p.response(3).await;
        assert_eq!(rest.len(), 15);
    }

    #[tokio::test]
    async fn header_blocks_may_be_padded_and_continued_and_bodies_end_with_trailers() {
        let (mut p, _) = Peer::start(&[]).await;
        let block = request_block("POST", "/echo", &[("x-long", &"v".repeat(100))]);
        let (a, b) = block.split_at(20);
        let mut first = vec![3u8];
        first.extend_from_slice(a);
        first.extend_from_slice(&[0, 0, 0]);
        p.send(HEADERS, PADDED, 1, &first).await;
        p.send(CONTINUATION, END_HEADERS, 1, b).await;
        p.send(DATA, 0, 1, b"body").await;
        let mut trailers = Vec::new();
        hpack_literal(&mut trailers, b"x-checksum", b"1");
        p.send(HEADERS, END_HEADERS | END_STREAM, 1, &trailers)
            .await;
        let (status, body, _) = p.response(1).await;
        assert_eq!((status.as_str(), &body[..]), ("200", &b"body"[..]));
        // Response trailers.
        p.request(3, "GET", "/trailers", &[], true).await;
        let (_, body, trailers) = p.response(3).await;
        assert_eq!(body, b"hi");
        assert_eq!(trailers, vec![("grpc-status".to_string(), "0".to_string())]);
    }

    #[tokio::test]
    async fn malformed_requests_are_reset_and_the_connection_goes_on() {
        let (mut p, _) = Peer::start(&[]).await;
        for (id, block) in [
            (1, request_block("GET", "/nope", &[("X-Upper", "1")])),
            (
                3,
                request_block("GET", "/nope", &[("connection", "keep-alive")]),
            ),
            (5, request_block("GET", "", &[])),
            (7, request_block("GET", "/nope", &[("te", "gzip")])),
        ] {
            p.send(HEADERS, END_HEADERS | END_STREAM, id, &block).await;
            let f = p.next().await;
            assert_eq!((f.kind, f.id, code(&f)), (RST_STREAM, id, PROTOCOL_ERROR));
        }
        // A body longer than its content-length.
        p.request(9, "POST", "/echo", &[("content-length", "2")], false)
            .await;
        p.send(DATA, END_STREAM, 9, b"abc").await;
        let f = p.next_of(RST_STREAM).await;
        assert_eq!((f.id, code(&f)), (9, PROTOCOL_ERROR));
        // An even stream id (the server's kind) is a connection error.
        p.request(11, "GET", "/nope", &[], true).await;
        assert_eq!(p.response(11).await.0, "404");
        p.request(13, "GET", "/nope", &[], true).await;
        p.request(2, "GET", "/nope", &[], true).await;
        assert_eq!(p.goaway().await, PROTOCOL_ERROR);
    }

    #[tokio::test]
    async fn protocol_errors_end_the_connection_with_goaway() {
        // Not the preface.
        let (mut p, _) = Peer::raw().await;
        p.io.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(p.goaway().await, PROTOCOL_ERROR);
        assert!(p.try_next().await.is_none());
        assert!(p.server.await.unwrap().is_ok());
        // A first frame other than SETTINGS.
        let (mut p, _) = Peer::raw().await;
        p.io.write_all(PREFACE).await.unwrap();
        p.send(PING, 0, 0, b"12345678").await;
        assert_eq!(p.goaway().await, PROTOCOL_ERROR);
        // Frames larger than allowed; DATA on stream 0; a wrong-sized PING; a zero
        // WINDOW_UPDATE; CONTINUATION out of place; a bad header block.
        let cases: [(u8, u8, u32, Vec<u8>, u32); 6] = [
            (DATA, 0, 1, vec![0; MAX_FRAME_RECV + 1], FRAME_SIZE_ERROR),
            (DATA, 0, 0, b"x".to_vec(), PROTOCOL_ERROR),
            (PING, 0, 0, b"1234".to_vec(), FRAME_SIZE_ERROR),
            (
                WINDOW_UPDATE,
                0,
                0,
                0u32.to_be_bytes().to_vec(),
                PROTOCOL_ERROR,
            ),
            (CONTINUATION, END_HEADERS, 1, vec![], PROTOCOL_ERROR),
            (
                HEADERS,
                END_HEADERS,
                1,
                vec![0xff, 0xff, 0xff, 0xff, 0xff],
                COMPRESSION_ERROR,
            ),
        ];
        for (kind, flags, id, payload, expected) in cases {
            let (mut p, _) = Peer::start(&[]).await;
            p.send(kind, flags, id, &payload).await;
            assert_eq!(p.goaway().await, expected, "frame type {kind}");
        }
    }

    #[tokio::test]
    async fn resets_and_panics_end_only_their_stream() {
        let (mut p, dropped) = Peer::start(&[]).await;
        p.request(1, "GET", "/pending", &[], true).await;
        tokio::task::yield_now().await;
        p.send(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()).await;
        p.request(3, "GET", "/panic", &[], true).await;
        let f = p.next_of(RST_STREAM).await;
        assert_eq!((f.id, code(&f)), (3, INTERNAL_ERROR));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the reset handler was dropped"
        );
        p.request(5, "GET", "/nope", &[], true).await;
        assert_eq!(p.response(5).await.0, "404");
    }

    #[tokio::test]
    async fn streams_beyond_the_limit_are_refused_and_rapid_resets_cut_off() {
        let (mut p, dropped) = Peer::start(&[]).await;
        for i in 0..=MAX_STREAMS as u32 {
            p.request(2 * i + 1, "GET", "/pending", &[], true).await;
        }
        let f = p.next_of(RST_STREAM).await;
        assert_eq!(
            (f.id, code(&f)),
            (2 * MAX_STREAMS as u32 + 1, REFUSED_STREAM)
        );
        // Cancel them, then open and cancel faster than any real client.
        for i in 0..MAX_STREAMS as u32 {
            p.send(RST_STREAM, 0, 2 * i + 1, &CANCEL.to_be_bytes())
                .await;
        }
        let first = 2 * MAX_STREAMS as u32 + 3;
        let mut burst = Out {
            buf: Vec::new(),
            written: 0,
            window: 0,
            max_frame: 16_384,
        };
        for id in (first..).step_by(2).take(2 * RESETS_PER_SECOND as usize) {
            let block = request_block("GET", "/pending", &[]);
            burst.header_block(id, &block, true);
            burst.reset(id, CANCEL);
        }
        // The server may close before it has read them all.
        let _ = p.io.write_all(&burst.buf).await;
        let code = p.goaway().await;
        assert_eq!(code, ENHANCE_YOUR_CALM);
        assert!(p.server.await.unwrap().is_ok());
        assert!(
            dropped.load(Ordering::SeqCst) >= MAX_STREAMS,
            "every handler dropped"
        );
    }

    #[tokio::test]
    async fn shutdown_sends_goaway_and_lets_open_streams_finish() {
        let (mut p, _) = Peer::start(&[(SETTINGS_INITIAL_WINDOW_SIZE, 5)]).await;
        p.request(1, "GET", "/stream/20", &[], true).await;
        assert_eq!(p.next().await.kind, HEADERS);
        assert_eq!(p.next().await.payload.len(), 5);
        p.stop.take().unwrap().send(()).unwrap();
        let g = p.next_of(GOAWAY).await;
        assert_eq!(
            &g.payload[..8],
            &[0, 0, 0, 1, 0, 0, 0, 0],
            "last stream 1, no error"
        );
        // New streams are ignored; the open one finishes once it may.
        p.request(3, "GET", "/nope", &[], true).await;
        p.send(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes()).await;
        let (_, rest, _) = p.response(1).await;
        assert_eq!(rest.len(), 15);
        assert!(
            p.try_next().await.is_none(),
            "closed once the streams ended"
        );
        assert!(p.server.await.unwrap().is_ok());
    }

    /// Any sequence of frames after a proper start: the server answers, resets or closes,
    /// and never panics; once the client has gone, the connection ends.
    fn survives(frames: Vec<(u8, u8, u8, Vec<u8>)>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut p, _) = Peer::start(&[]).await;
            let mut bytes = Vec::new();
            let mut out = Out {
                buf: Vec::new(),
                written: 0,
                window: 0,
                max_frame: 16_384,
            };
            for (kind, flags, id, payload) in frames {
                // Mostly real frame types and low stream ids, some valid requests.
                let kind = kind % 11;
                let id = u32::from(id % 8);
                if kind == 10 {
                    let block = request_block("POST", "/echo", &[]);
                    out.header_block(2 * id + 1, &block, flags & 1 == 1);
                } else {
                    out.head(payload.len(), kind, flags, id);
                    out.buf.extend_from_slice(&payload);
                }
            }
            bytes.extend_from_slice(&out.buf);
            let _ = p.io.write_all(&bytes).await;
            let _ = p.io.shutdown().await;
            // Drain what the server says until it closes.
            while p.try_next().await.is_some() {}
            let ended = tokio::time::timeout(std::time::Duration::from_secs(5), p.server).await;
            assert!(ended.expect("the connection ends").is_ok(), "no panic");
        });
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        #[test]
        fn arbitrary_frames_never_panic_the_connection(
            frames in proptest::collection::vec(
                (
                    proptest::num::u8::ANY,
                    proptest::num::u8::ANY,
                    proptest::num::u8::ANY,
                    proptest::collection::vec(proptest::num::u8::ANY, 0..24),
                ),
                0..12,
            )
        ) {
            survives(frames);
        }
    }

    #[test]
    fn hpack_integers_use_their_prefix_and_continue_in_7_bit_groups() {
        let mut out = Vec::new();
        hpack_int(&mut out, 0, 7, 126);
        hpack_int(&mut out, 0, 7, 127);
        hpack_int(&mut out, 0, 7, 1337);
        assert_eq!(out, vec![126, 127, 0, 127, 0xba, 0x09]);
        let mut block = Vec::new();
        let mut headers = HeaderMap::new();
        headers.insert("x-long", HeaderValue::from_str(&"v".repeat(300)).unwrap());
        headers.insert("connection", HeaderValue::from_static("close"));
        block.extend(encode_headers(Some(200), &headers, Some(3)));
        let mut fields = Vec::new();
        loona_hpack::Decoder::new()
            .decode_with_cb(&block, |n, v| fields.push((n.to_vec(), v.len())))
            .unwrap();
        assert_eq!(
            fields,
            vec![
                (b":status".to_vec(), 3),
                (b"x-long".to_vec(), 300),
                (b"content-length".to_vec(), 1)
            ]
        );
    }
}
