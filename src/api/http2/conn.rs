//! One connection's state machine: the frames read and answered, settings, flow control
//! both ways, header blocks gathered into requests, streams opened, run and reset.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;

use axum::body::Body;
use axum::http::Request;
use bytes::{Bytes, BytesMut};
use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{
    ACK, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, GOAWAY, HEADERS, NO_ERROR, Out, PING, PRIORITY,
    PRIORITY_FLAG, PROTOCOL_ERROR, PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, SETTINGS,
    SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE, STREAM_CLOSED, WINDOW_UPDATE,
    strip_padding,
};
use super::headers::Head;
use super::stream::{
    Inbound, Node, Phase, RequestBody, Step, Stream, StreamMap, Wakes, poll_stream,
};
use super::{
    CONN_WINDOW, Handling, IDLE_BUFFER, MAX_CONTINUATIONS, MAX_FRAME_RECV, MAX_HEADER_LIST,
    MAX_STREAMS, MAX_WINDOW, PREFACE, RESETS_PER_SECOND, STREAM_WINDOW, STREAMS_PER_TURN,
    TURNS_PER_POLL, WRITE_HIGH,
};

/// A connection error: the GOAWAY code and what it says.
#[derive(Debug)]
struct ConnError(u32, &'static str);

/// A header block being gathered from HEADERS and CONTINUATION frames.
struct Gathering {
    id: u32,
    end_stream: bool,
    block: BytesMut,
    /// CONTINUATION frames so far: empty ones grow no block, so the block's size alone
    /// does not bound them.
    frames: usize,
}

/// A connection's timeouts (see [`super::serve_connection`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub preface: Duration,
    pub idle: Duration,
    pub ping_after: Duration,
    pub ping_timeout: Duration,
}

/// Where a connection stands with its timeouts.
struct Clock {
    timing: Timing,
    started: Instant,
    /// When bytes last came from the client, or the socket last took ours.
    heard: Instant,
    /// When a stream was last open.
    active: Instant,
    /// When our unanswered PING was sent.
    ping_sent: Option<Instant>,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

/// The payload of the PINGs the server sends.
const PING_PAYLOAD: [u8; 8] = *b"berthkap";

pub(super) struct Conn<IO> {
    pub(super) io: IO,
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
    clock: Clock,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<IO> {
    pub(super) fn new(
        io: IO,
        shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
        timing: Timing,
    ) -> Self {
        let now = Instant::now();
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
            resets: (now, 0),
            clock: Clock {
                timing,
                started: now,
                heard: now,
                active: now,
                ping_sent: None,
                sleep: Box::pin(tokio::time::sleep_until(now + timing.preface)),
            },
        }
    }

    /// Acts on the timeouts that have passed (a late preface or PING answer ends the
    /// connection, an idle one is sent a GOAWAY, a quiet one a PING), and sets the timer
    /// for the next.
    fn timeouts(&mut self, cx: &mut Context<'_>) {
        if !self.streams.is_empty() {
            self.clock.active = Instant::now();
        }
        // A PING sent makes a later deadline; a timer found expired is acted on: at most
        // a few rounds.
        for _ in 0..4 {
            let now = Instant::now();
            let c = &self.clock;
            let t = c.timing;
            let preface = c.started + t.preface;
            let ping = match c.ping_sent {
                Some(sent) => sent + t.ping_timeout,
                None => c.heard + t.ping_after,
            };
            let idle = (!self.closing && self.streams.is_empty()).then_some(c.active + t.idle);
            let next = if self.got_settings {
                idle.map_or(ping, |idle| idle.min(ping))
            } else {
                preface
            };
            if next > now {
                if self.clock.sleep.deadline() != next {
                    self.clock.sleep.as_mut().reset(next);
                }
                if self.clock.sleep.as_mut().poll(cx).is_ready() {
                    // The clock moved past it meanwhile: act on it.
                    continue;
                }
                return;
            }
            tracing::trace!(?next, "an HTTP/2 connection's timeout passed");
            if !self.got_settings {
                tracing::debug!("no HTTP/2 preface in time: closing the connection");
                self.done = true;
                return;
            }
            if idle.is_some_and(|i| i <= now) {
                tracing::debug!("HTTP/2 connection idle: closing it");
                self.go_away(NO_ERROR, "idle");
                return;
            }
            if self.clock.ping_sent.is_some() {
                tracing::debug!("no answer to a PING in time: closing the connection");
                self.done = true;
                return;
            }
            self.out.head(8, PING, 0, 0);
            self.out.buf.extend_from_slice(&PING_PAYLOAD);
            self.clock.ping_sent = Some(now);
        }
        // Rounds spent with the timer still expired: look again on the next poll.
        cx.waker().wake_by_ref();
    }

    /// The client was heard from (bytes read).
    fn heard(&mut self) {
        self.clock.heard = Instant::now();
        self.clock.ping_sent = None;
    }

    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        handler: &dyn Fn(Request<Body>) -> Handling,
    ) -> Poll<io::Result<()>> {
        self.wakes.conn.register(cx.waker());
        if !self.shutdown_seen && self.shutdown.as_mut().poll(cx).is_ready() {
            self.shutdown_seen = true;
            self.go_away(NO_ERROR, "server shutting down");
        }
        if !self.done {
            self.timeouts(cx);
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
                    self.heard();
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
            if let Some(g) = &self.gathering
                && (kind != CONTINUATION || id != g.id)
            {
                return Err(ConnError(PROTOCOL_ERROR, "expected CONTINUATION"));
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
        if !payload.len().is_multiple_of(6) {
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
            // Many connections each under that limit: the process's budget is shared,
            // and a connection that resets past it is closed.
            if !super::GLOBAL_RESETS.take(now) {
                return Err(ConnError(
                    ENHANCE_YOUR_CALM,
                    "too many streams reset on this server",
                ));
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
        if let Some(s) = self.streams.get_mut(&id)
            && s.inbound.is_some()
        {
            s.recv_window += n as i64;
            self.out.window_update(id, n as u32);
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
                frames: 0,
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
        g.frames += 1;
        if g.frames > MAX_CONTINUATIONS {
            return Err(ConnError(ENHANCE_YOUR_CALM, "too many CONTINUATION frames"));
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
        if id.is_multiple_of(2) {
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
                    if let Some(s) = self.streams.remove(&id)
                        && s.inbound.is_some()
                    {
                        // The response is whole; the rest of the request is not needed.
                        self.out.reset(id, NO_ERROR);
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
                Poll::Ready(Ok(n)) => {
                    self.out.written += n;
                    // The client is taking what we send: no PING needed for a while (but
                    // one sent is still waiting for its answer).
                    self.clock.heard = Instant::now();
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.buf.clear();
        self.out.written = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }
}
