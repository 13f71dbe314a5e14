//! The server side of a SPDY/3.1 port-forward session, on an upgraded HTTP/1.1
//! connection or tunnelled in WebSocket binary messages.
//!
//! The client opens streams in pairs that share a `requestID` (an older client without
//! one pairs by stream id): an `error` stream it only reads and a `data` stream; each is
//! answered with SYN_REPLY at once, and once both are there the data stream is bridged
//! to a new connection to the `port` of the pod. When the pod's side ends, the data
//! stream and then the error stream are finished (FIN); a connection that cannot be made
//! leaves its message on the error stream first. A pair not complete within 30 s is
//! given up, as by the kubelet.
//!
//! Flow control: the reader hands a data stream's bytes to its connection through a
//! bounded queue and waits when it is full, so a pod that reads slowly holds back the
//! whole session, as with the kubelet's `spdystream`; window updates are sent as the pod
//! takes the bytes. Frames to the client go through one bounded queue to one writer (it
//! owns the header compression, whose context is one for the connection). The client's
//! windows are not waited for: `spdystream`, which kubectl uses, never opens them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::spdy::{self, Decoder, Encoder, Frame, Headers, header, rst};
use super::{CHUNK, Target, relay};

/// How long the second stream of a pair may take to come.
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// Chunks from the client queued for one connection to the pod.
const INBOUND: usize = 16;
/// Frames queued for the client.
const OUTBOUND: usize = 64;
/// The most bytes of frames written to the client at once.
const BATCH: usize = 64 * 1024;
/// The most streams a client may have open at once (two per forwarded connection); more
/// are refused.
const MAX_STREAMS: usize = 1024;

/// A connection that carries a SPDY session.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// What a SPDY session runs on.
pub enum Transport {
    /// A byte stream: an HTTP/1.1 connection upgraded to SPDY/3.1.
    Bytes(Box<dyn Io>),
    /// WebSocket binary messages whose bytes, in order, are the session's.
    WebSocket(Box<WebSocket>),
}

enum Reader {
    Bytes(ReadHalf<Box<dyn Io>>),
    WebSocket(SplitStream<WebSocket>),
}

enum Writer {
    Bytes(WriteHalf<Box<dyn Io>>),
    WebSocket(SplitSink<WebSocket, Message>),
}

impl Transport {
    fn split(self) -> (Reader, Writer) {
        match self {
            Transport::Bytes(io) => {
                let (r, w) = tokio::io::split(io);
                (Reader::Bytes(r), Writer::Bytes(w))
            }
            Transport::WebSocket(ws) => {
                let (w, r) = (*ws).split();
                (Reader::WebSocket(r), Writer::WebSocket(w))
            }
        }
    }
}

impl Reader {
    /// The next bytes from the client; `None` once it is gone.
    async fn read(&mut self) -> Option<Bytes> {
        match self {
            Reader::Bytes(r) => {
                let mut buf = BytesMut::with_capacity(CHUNK);
                match r.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(buf.freeze()),
                }
            }
            Reader::WebSocket(r) => loop {
                match r.next().await? {
                    Ok(Message::Binary(b)) => return Some(b),
                    Ok(Message::Text(_)) => {
                        tracing::debug!("a text message in a SPDY tunnel: ending the session");
                        return None;
                    }
                    Ok(Message::Close(_)) | Err(_) => return None,
                    Ok(_) => {}
                }
            },
        }
    }
}

impl Writer {
    async fn write(&mut self, bytes: Bytes) -> std::io::Result<()> {
        match self {
            Writer::Bytes(w) => {
                w.write_all(&bytes).await?;
                w.flush().await
            }
            Writer::WebSocket(w) => w
                .send(Message::Binary(bytes))
                .await
                .map_err(std::io::Error::other),
        }
    }

    async fn close(&mut self) {
        match self {
            Writer::Bytes(w) => {
                let _ = w.shutdown().await;
            }
            Writer::WebSocket(w) => {
                let _ = w.close().await;
            }
        }
    }
}

/// Serves one SPDY port-forward session until the client leaves or breaks the protocol.
pub async fn serve(transport: Transport, target: Arc<Target>) {
    let (mut reader, writer) = transport.split();
    let (out, frames) = mpsc::channel(OUTBOUND);
    let writing = tokio::spawn(write_frames(frames, writer));
    let mut s = Session {
        out,
        target,
        streams: HashMap::new(),
        pairs: HashMap::new(),
        forwards: JoinSet::new(),
        last_stream: 0,
        going_away: false,
    };
    let mut decoder = Decoder::new();
    loop {
        let deadline = s.pairs.values().map(|p| p.deadline).min();
        tokio::select! {
            chunk = reader.read() => {
                let Some(chunk) = chunk else { break };
                decoder.push(&chunk);
                if let Err(e) = s.drain(&mut decoder).await {
                    tracing::debug!(error = %e, "ending a port-forward session");
                    let last_good = s.last_stream;
                    s.send(Frame::GoAway { last_good, status: spdy::goaway::PROTOCOL_ERROR }).await;
                    break;
                }
            }
            Some(ended) = s.forwards.join_next(), if !s.forwards.is_empty() => {
                if let Ok((data, error)) = ended {
                    s.streams.remove(&data);
                    s.streams.remove(&error);
                }
            }
            () = sleep_until(deadline), if deadline.is_some() => s.expire(Instant::now()).await,
        }
    }
    // The client is gone: so are its connections to the pod.
    s.forwards.shutdown().await;
    drop(s);
    let _ = tokio::time::timeout(Duration::from_secs(5), writing).await;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Writes the frames queued for the client, several at once when they come fast.
async fn write_frames(mut frames: mpsc::Receiver<Frame>, mut writer: Writer) {
    let mut encoder = Encoder::new();
    while let Some(frame) = frames.recv().await {
        let mut buf = Vec::with_capacity(CHUNK + 64);
        encoder.encode(&frame, &mut buf);
        while buf.len() < BATCH {
            match frames.try_recv() {
                Ok(frame) => encoder.encode(&frame, &mut buf),
                Err(_) => break,
            }
        }
        if writer.write(Bytes::from(buf)).await.is_err() {
            return;
        }
    }
    writer.close().await;
}

/// A stream the client opened.
enum Stream {
    /// Its bytes go to the pod; dropping `_cancel` (the stream reset, or the session
    /// over) ends its connection.
    Data {
        request: String,
        /// `None` once the client finished the stream or the pod reads no more.
        inbound: Option<mpsc::Sender<Bytes>>,
        _cancel: oneshot::Sender<()>,
    },
    /// The client only reads it.
    Error,
}

/// The two streams of one forwarded connection, while the second is awaited.
struct Pair {
    port: u16,
    data: Option<(u32, mpsc::Receiver<Bytes>, oneshot::Receiver<()>)>,
    error: Option<u32>,
    deadline: Instant,
}

struct Session {
    out: mpsc::Sender<Frame>,
    target: Arc<Target>,
    streams: HashMap<u32, Stream>,
    /// Incomplete pairs by request id.
    pairs: HashMap<String, Pair>,
    /// Each running forward; it ends with its (data, error) stream ids.
    forwards: JoinSet<(u32, u32)>,
    /// The highest stream id the client opened.
    last_stream: u32,
    /// The client said GOAWAY: it opens no more streams.
    going_away: bool,
}

impl Session {
    /// Queues a frame for the client (dropped when the writer is gone: so is the client).
    async fn send(&self, frame: Frame) {
        let _ = self.out.send(frame).await;
    }

    async fn drain(&mut self, decoder: &mut Decoder) -> Result<(), spdy::Error> {
        while let Some(frame) = decoder.next_frame()? {
            self.handle(frame).await;
        }
        Ok(())
    }

    async fn handle(&mut self, frame: Frame) {
        match frame {
            Frame::SynStream {
                stream,
                fin,
                headers,
                ..
            } => self.open(stream, fin, &headers).await,
            Frame::Data { stream, fin, data } => self.data(stream, fin, data).await,
            Frame::RstStream { stream, .. } => self.reset(stream).await,
            // The client's pings have odd ids; an even one would answer ours (none).
            Frame::Ping { id } if id % 2 == 1 => self.send(Frame::Ping { id }).await,
            Frame::GoAway { .. } => self.going_away = true,
            // SETTINGS and WINDOW_UPDATE (windows are not kept to, see above), HEADERS,
            // SYN_REPLY (this side opens no streams) and unknown types.
            _ => {}
        }
    }

    /// A new stream: checked, answered, and paired.
    async fn open(&mut self, stream: u32, fin: bool, headers: &Headers) {
        if self.going_away {
            return;
        }
        if stream.is_multiple_of(2) || stream <= self.last_stream {
            let status = if self.streams.contains_key(&stream) {
                rst::STREAM_IN_USE
            } else {
                rst::PROTOCOL_ERROR
            };
            self.send(Frame::RstStream { stream, status }).await;
            return;
        }
        self.last_stream = stream;
        if self.streams.len() >= MAX_STREAMS {
            self.send(Frame::RstStream {
                stream,
                status: rst::REFUSED_STREAM,
            })
            .await;
            return;
        }
        let (port, kind) = match check(headers) {
            Ok(checked) => checked,
            Err(e) => {
                tracing::debug!(stream, error = %e, "a port-forward stream refused");
                self.send(Frame::RstStream {
                    stream,
                    status: rst::CANCEL,
                })
                .await;
                return;
            }
        };
        // Without a request id (clients before Kubernetes 1.7), an error stream and the
        // data stream opened right after it pair.
        let request = match header(headers, "requestid") {
            Some(id) if !id.is_empty() => id.to_string(),
            _ if kind == StreamType::Error => stream.to_string(),
            _ => stream.saturating_sub(2).to_string(),
        };
        let deadline = Instant::now() + PAIR_TIMEOUT;
        let pair = self.pairs.entry(request.clone()).or_insert(Pair {
            port,
            data: None,
            error: None,
            deadline,
        });
        match kind {
            StreamType::Error if pair.error.is_none() => {
                pair.error = Some(stream);
                self.streams.insert(stream, Stream::Error);
            }
            StreamType::Data if pair.data.is_none() => {
                let (tx, rx) = mpsc::channel(INBOUND);
                let (cancel, cancelled) = oneshot::channel();
                pair.port = port;
                pair.data = Some((stream, rx, cancelled));
                let inbound = (!fin).then_some(tx);
                self.streams.insert(
                    stream,
                    Stream::Data {
                        request: request.clone(),
                        inbound,
                        _cancel: cancel,
                    },
                );
            }
            _ => {
                tracing::debug!(stream, request, "a second stream of one type for a request");
                self.send(Frame::RstStream {
                    stream,
                    status: rst::PROTOCOL_ERROR,
                })
                .await;
                return;
            }
        }
        self.send(Frame::SynReply {
            stream,
            fin: false,
            headers: Vec::new(),
        })
        .await;
        let complete = self
            .pairs
            .get(&request)
            .is_some_and(|p| p.data.is_some() && p.error.is_some());
        if complete && let Some(pair) = self.pairs.remove(&request) {
            let (Some((data, inbound, cancelled)), Some(error)) = (pair.data, pair.error) else {
                return;
            };
            let (target, out) = (self.target.clone(), self.out.clone());
            self.forwards.spawn(forward(
                target, pair.port, data, error, inbound, cancelled, out,
            ));
        }
    }

    /// Data from the client: a data stream's goes to its connection (an error stream
    /// carries none; a stream already gone takes nothing).
    async fn data(&mut self, stream: u32, fin: bool, data: Bytes) {
        let (tx, connected) = match self.streams.get(&stream) {
            Some(Stream::Data {
                request, inbound, ..
            }) => (inbound.clone(), !self.pairs.contains_key(request.as_str())),
            _ => return,
        };
        if let Some(tx) = tx.filter(|_| !data.is_empty()) {
            if !connected {
                // Not connected yet: what fits in the queue waits; more is refused.
                if tx.try_send(data).is_err() {
                    self.send(Frame::RstStream {
                        stream,
                        status: rst::FLOW_CONTROL_ERROR,
                    })
                    .await;
                    self.reset(stream).await;
                    return;
                }
            } else if tx.send(data).await.is_err() {
                // The pod reads no more.
                self.end_inbound(stream);
            }
        }
        if fin {
            self.end_inbound(stream);
        }
    }

    /// The client sends no more on `stream` (or the pod takes no more).
    fn end_inbound(&mut self, stream: u32) {
        if let Some(Stream::Data { inbound, .. }) = self.streams.get_mut(&stream) {
            *inbound = None;
        }
    }

    /// The client reset a stream: a data stream's connection ends with it; a stream still
    /// waiting for its pair takes the pair with it.
    async fn reset(&mut self, stream: u32) {
        let Some(Stream::Data { request, .. }) = self.streams.remove(&stream) else {
            return;
        };
        if let Some(pair) = self.pairs.remove(&request)
            && let Some(error) = pair.error
        {
            self.streams.remove(&error);
            self.send(fin(error)).await;
        }
    }

    /// Gives up the pairs whose second stream did not come in time.
    async fn expire(&mut self, now: Instant) {
        let late: Vec<String> = self
            .pairs
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(r, _)| r.clone())
            .collect();
        for request in late {
            let Some(pair) = self.pairs.remove(&request) else {
                continue;
            };
            if let Some(error) = pair.error {
                let message = format!("(request={request}) timed out waiting for streams");
                self.send(Frame::Data {
                    stream: error,
                    fin: false,
                    data: Bytes::from(message),
                })
                .await;
                self.send(fin(error)).await;
                self.streams.remove(&error);
            }
            if let Some((data, ..)) = pair.data {
                self.send(fin(data)).await;
                self.streams.remove(&data);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamType {
    Error,
    Data,
}

/// A new stream's port and type, checked as the kubelet checks them.
fn check(headers: &Headers) -> Result<(u16, StreamType), String> {
    let port = header(headers, "port").unwrap_or("");
    if port.is_empty() {
        return Err("\"port\" header is required".into());
    }
    let port = match port.parse::<u16>() {
        Ok(0) => return Err(format!("port {port:?} must be > 0")),
        Ok(p) => p,
        Err(e) => return Err(format!("unable to parse {port:?} as a port: {e}")),
    };
    match header(headers, "streamtype").unwrap_or("") {
        "error" => Ok((port, StreamType::Error)),
        "data" => Ok((port, StreamType::Data)),
        "" => Err("\"streamType\" header is required".into()),
        other => Err(format!("invalid stream type {other:?}")),
    }
}

/// The empty DATA frame that finishes a stream.
fn fin(stream: u32) -> Frame {
    Frame::Data {
        stream,
        fin: true,
        data: Bytes::new(),
    }
}

/// One forwarded connection: connects, relays until the pod's side ends or the client
/// resets the data stream, then finishes the streams. Ends with their ids.
async fn forward(
    target: Arc<Target>,
    port: u16,
    data: u32,
    error: u32,
    inbound: mpsc::Receiver<Bytes>,
    cancelled: oneshot::Receiver<()>,
    out: mpsc::Sender<Frame>,
) -> (u32, u32) {
    let relayed = async {
        let tcp = target.connect(port).await?;
        relay(
            tcp,
            inbound,
            &out,
            |bytes| Frame::Data {
                stream: data,
                fin: false,
                data: bytes,
            },
            |n| {
                vec![
                    Frame::WindowUpdate {
                        stream: data,
                        delta: n,
                    },
                    Frame::WindowUpdate {
                        stream: 0,
                        delta: n,
                    },
                ]
            },
        )
        .await;
        Ok::<(), String>(())
    };
    let outcome = tokio::select! {
        r = relayed => Some(r),
        _ = cancelled => None,
    };
    match outcome {
        Some(Ok(())) => {
            let _ = out.send(fin(data)).await;
        }
        Some(Err(message)) => {
            tracing::debug!(%message, "a forwarded connection failed");
            let _ = out
                .send(Frame::Data {
                    stream: error,
                    fin: false,
                    data: Bytes::from(message),
                })
                .await;
            let _ = out.send(fin(data)).await;
        }
        // The client reset the data stream: nothing more goes on it.
        None => {}
    }
    let _ = out.send(fin(error)).await;
    (data, error)
}

#[cfg(test)]
mod tests;
