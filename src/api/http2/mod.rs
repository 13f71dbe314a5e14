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

mod conn;
mod frame;
mod headers;
mod stream;

use std::future::Future;
use std::io;
use std::pin::Pin;

use axum::body::Body;
use axum::http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};

use self::conn::Conn;

/// What a client sends first.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
/// Streams all clients together may cancel per second; past it, a connection that
/// cancels one more is closed (many connections each under the limit above).
const GLOBAL_RESETS_PER_SECOND: u32 = 10_000;
/// CONTINUATION frames one header block may take: a 1 MiB block in frames of the
/// default 16 KiB is 64 (empty frames would otherwise cost us a read each, unbounded).
const MAX_CONTINUATIONS: usize = 128;

/// The reset budget all of the process's connections share, per second.
struct ResetBudget {
    /// The second (since the first reset) the count is of, and the count.
    window: std::sync::Mutex<(Option<tokio::time::Instant>, u32)>,
}

impl ResetBudget {
    /// Takes one reset at `now`; false when the budget of this second is spent.
    fn take(&self, now: tokio::time::Instant) -> bool {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        match w.0 {
            Some(start) if now.duration_since(start) < std::time::Duration::from_secs(1) => {}
            _ => *w = (Some(now), 0),
        }
        w.1 += 1;
        w.1 <= GLOBAL_RESETS_PER_SECOND
    }
}

static GLOBAL_RESETS: ResetBudget = ResetBudget {
    window: std::sync::Mutex::new((None, 0)),
};

type Handling = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// Serves one HTTP/2 connection until the client closes it, a connection error, or
/// `shutdown` completes and the streams then open have ended. `io` must have been
/// negotiated as `h2`; the client's preface is expected first.
///
/// `limits` gives the connection's timeouts: the preface (and first SETTINGS) must come
/// within `h2_preface`; after `h2_ping_after` without a frame from the client a PING is
/// sent, and without a frame within `h2_ping_timeout` after it the connection is
/// closed; a connection without streams for `idle` is sent a GOAWAY and closed.
pub async fn serve_connection<IO, H, F>(
    io: IO,
    handler: H,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: super::Limits,
) -> io::Result<()>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Request<Body>) -> F,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    tracing::trace!("serving an HTTP/2 connection");
    let timing = conn::Timing {
        preface: limits.h2_preface,
        idle: limits.idle,
        ping_after: limits.h2_ping_after,
        ping_timeout: limits.h2_ping_timeout,
    };
    let mut conn = Conn::new(io, Box::pin(shutdown), timing);
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

#[cfg(test)]
mod tests {
    use super::frame::*;
    use super::headers::hpack_literal;
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};
    use bytes::{Bytes, BytesMut};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
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
            Self::start_with(settings, crate::api::Limits::default()).await
        }

        async fn start_with(
            settings: &[(u16, u32)],
            limits: crate::api::Limits,
        ) -> (Self, Arc<AtomicUsize>) {
            let (mut p, dropped) = Self::raw_with(limits).await;
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
            Self::raw_with(crate::api::Limits::default()).await
        }

        async fn raw_with(limits: crate::api::Limits) -> (Self, Arc<AtomicUsize>) {
            let (client, server) = tokio::io::duplex(1 << 22);
            let dropped = Arc::new(AtomicUsize::new(0));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let h = handler(dropped.clone());
            let server = tokio::spawn(serve_connection(
                server,
                h,
                async move {
                    let _ = stopped.await;
                },
                limits,
            ));
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

    /// Timeouts short enough for the frames' 5 s read timeout (time is paused).
    fn quick() -> crate::api::Limits {
        crate::api::Limits {
            h2_preface: std::time::Duration::from_secs(1),
            h2_ping_after: std::time::Duration::from_secs(2),
            h2_ping_timeout: std::time::Duration::from_secs(1),
            idle: std::time::Duration::from_secs(3),
            ..crate::api::Limits::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_sends_no_preface_in_time_is_closed() {
        let (mut p, _) = Peer::raw_with(quick()).await;
        p.io.write_all(&PREFACE[..5]).await.unwrap();
        let started = tokio::time::Instant::now();
        while p.try_next().await.is_some() {}
        assert_eq!(started.elapsed(), std::time::Duration::from_secs(1));
        p.server.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_is_pinged_and_an_idle_one_sent_away() {
        let (mut p, _) = Peer::start_with(&[], quick()).await;
        let ping = p.next().await;
        assert_eq!((ping.kind, ping.flags, ping.id), (PING, 0, 0));
        p.send(PING, ACK, 0, &ping.payload).await;
        // No streams for 3 s: a GOAWAY, then the end.
        assert_eq!(p.goaway().await, NO_ERROR);
        assert!(p.try_next().await.is_none());
        p.server.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_answer_a_ping_is_closed_with_its_streams() {
        let (mut p, dropped) = Peer::start_with(&[], quick()).await;
        p.request(1, "GET", "/pending", &[], true).await;
        // Streams open: not idle, but pinged after 2 s of silence, then closed.
        p.next_of(PING).await;
        while let Some(f) = p.try_next().await {
            assert_ne!(f.kind, GOAWAY, "a dead peer gets no GOAWAY");
        }
        p.server.await.unwrap().unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_answers_its_pings_stays_open_while_streams_are() {
        let (mut p, _) = Peer::start_with(&[], quick()).await;
        p.request(1, "GET", "/pending", &[], true).await;
        for _ in 0..5 {
            let ping = p.next_of(PING).await;
            p.send(PING, ACK, 0, &ping.payload).await;
        }
        assert!(!p.server.is_finished());
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
    async fn a_flood_of_empty_continuation_frames_is_cut_off() {
        let (mut p, _) = Peer::start(&[]).await;
        let block = request_block("GET", "/pending", &[]);
        p.send(HEADERS, END_STREAM, 1, &block).await;
        let mut flood = Vec::new();
        for _ in 0..=MAX_CONTINUATIONS {
            flood.extend_from_slice(&[0, 0, 0, CONTINUATION, 0, 0, 0, 0, 1]);
        }
        // The server may close before it has read them all.
        let _ = p.io.write_all(&flood).await;
        assert_eq!(p.goaway().await, ENHANCE_YOUR_CALM);
    }

    #[test]
    fn the_servers_reset_budget_is_shared_and_renewed_each_second() {
        let budget = ResetBudget {
            window: std::sync::Mutex::new((None, 0)),
        };
        let start = tokio::time::Instant::now();
        for _ in 0..GLOBAL_RESETS_PER_SECOND {
            assert!(budget.take(start));
        }
        assert!(!budget.take(start + std::time::Duration::from_millis(500)));
        assert!(budget.take(start + std::time::Duration::from_millis(1001)));
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
}
