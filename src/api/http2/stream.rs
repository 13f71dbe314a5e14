//! A stream: its waker, which queues it on its connection; its request body as it arrives;
//! its handler and response body polled in place and framed as the windows allow.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};

use axum::body::Body;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::Body as _;

use super::frame::{INTERNAL_ERROR, Out};
use super::headers::encode_headers;
use super::{FRAMES_PER_POLL, Handling};

/// Streams by id. Ids come from the client but are unique per connection, and a lookup
/// happens for every frame a stream sends: a multiplicative hash instead of SipHash.
pub(super) type StreamMap = HashMap<u32, Stream, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
pub(super) struct IdHasher(u64);

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

/// What wakes the connection: its streams, and request bodies handing window back.
pub(super) struct Wakes {
    pub(super) conn: AtomicWaker,
    pub(super) ready: Mutex<Vec<u32>>,
    /// Bytes of request bodies consumed (or dropped), by stream.
    pub(super) released: Mutex<Vec<(u32, usize)>>,
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
pub(super) struct Node {
    pub(super) id: u32,
    pub(super) queued: AtomicBool,
    pub(super) wakes: Weak<Wakes>,
}

impl Wake for Node {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel)
            && let Some(w) = self.wakes.upgrade()
        {
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

/// A request body as the connection receives it.
#[derive(Default)]
pub(super) struct Inbound {
    pub(super) chunks: VecDeque<Bytes>,
    pub(super) end: bool,
    /// The stream was reset or the connection ended before the body did.
    pub(super) broken: bool,
    /// The handler dropped the body: what arrives is handed back at once.
    pub(super) dropped: bool,
    pub(super) waker: Option<Waker>,
}

/// The body of a request that came over HTTP/2.
pub(super) struct RequestBody {
    pub(super) id: u32,
    pub(super) state: Arc<Mutex<Inbound>>,
    pub(super) wakes: Weak<Wakes>,
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

pub(super) enum Phase {
    Handling(Handling),
    Sending(Body),
}

pub(super) struct Stream {
    pub(super) node: Arc<Node>,
    pub(super) waker: Waker,
    /// While the client may still send the request body.
    pub(super) inbound: Option<Arc<Mutex<Inbound>>>,
    /// What the client may still send on this stream.
    pub(super) recv_window: i64,
    /// Bytes of the body still to come, if the request said `content-length`.
    pub(super) remaining: Option<u64>,
    /// A HEAD request: the response has no body.
    pub(super) head: bool,
    pub(super) phase: Phase,
    /// What we may still send on this stream.
    pub(super) send_window: i64,
    /// Data made but not yet sent for want of window, and whether it ends the stream.
    pub(super) pending: Option<(Bytes, bool)>,
    /// Waiting for window.
    pub(super) blocked: bool,
}

/// What polling a stream came to.
pub(super) enum Step {
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
pub(super) fn poll_stream(out: &mut Out, id: u32, s: &mut Stream) -> Step {
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
    if let Some((data, end)) = s.pending.take()
        && let Some(step) = send(out, id, &mut s.send_window, &mut s.pending, data, end)
    {
        return step;
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
