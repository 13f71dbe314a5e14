//! The SPDY session against a client written here, over an in-memory connection, with
//! servers on loopback as the pod's ports.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::TcpListener;

use super::*;
use crate::api::portforward::spdy::{Decoder, Encoder};

/// The pod: on loopback, as pods share their node's network.
fn target() -> Arc<Target> {
    Arc::new(Target::new(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "status": {"podIP": "127.0.0.1"},
    })))
}

/// A port of the pod that echoes what it reads until the end, then closes.
async fn echo() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

/// A port nobody listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Client {
    r: ReadHalf<DuplexStream>,
    w: WriteHalf<DuplexStream>,
    enc: Encoder,
    dec: Decoder,
    /// Window updates seen (they come between the frames the tests look for).
    credited: u64,
}

fn start() -> Client {
    let (client, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve(Transport::Bytes(Box::new(server)), target()));
    let (r, w) = tokio::io::split(client);
    Client {
        r,
        w,
        enc: Encoder::new(),
        dec: Decoder::new(),
        credited: 0,
    }
}

fn stream_headers(kind: &str, port: u16, request: &str) -> Headers {
    let mut h = vec![
        ("streamtype".to_string(), kind.to_string()),
        ("port".to_string(), port.to_string()),
    ];
    if !request.is_empty() {
        h.push(("requestid".to_string(), request.to_string()));
    }
    h
}

impl Client {
    async fn send(&mut self, frame: Frame) {
        let mut buf = Vec::new();
        self.enc.encode(&frame, &mut buf);
        self.w.write_all(&buf).await.unwrap();
    }

    /// Opens a stream as kubectl does and waits for its reply.
    async fn open(&mut self, stream: u32, headers: Headers) {
        self.send(Frame::SynStream {
            stream,
            associated: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers,
        })
        .await;
        assert_eq!(
            self.next().await,
            Some(Frame::SynReply {
                stream,
                fin: false,
                headers: Vec::new()
            })
        );
    }

    /// The next frame but window updates; `None` once the server closed.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            match self.dec.next_frame().unwrap() {
                Some(Frame::WindowUpdate { stream: 0, delta }) => self.credited += u64::from(delta),
                Some(Frame::WindowUpdate { .. }) => {}
                Some(f) => return Some(f),
                None => {
                    let mut buf = vec![0u8; 16 * 1024];
                    let n = tokio::time::timeout(Duration::from_secs(60), self.r.read(&mut buf))
                        .await
                        .expect("a frame in time")
                        .unwrap();
                    if n == 0 {
                        return None;
                    }
                    self.dec.push(&buf[..n]);
                }
            }
        }
    }

    /// Reads data of `stream` until `len` bytes came.
    async fn read_data(&mut self, stream: u32, len: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < len {
            match self.next().await {
                Some(Frame::Data {
                    stream: s, data, ..
                }) if s == stream => got.extend_from_slice(&data),
                other => panic!("waiting for data on {stream}: {other:?}"),
            }
        }
        got
    }
}

fn data(stream: u32, fin: bool, bytes: &'static [u8]) -> Frame {
    Frame::Data {
        stream,
        fin,
        data: Bytes::from_static(bytes),
    }
}

#[tokio::test]
async fn a_pair_is_bridged_to_the_pods_port_and_finished_with_it() {
    let port = echo().await;
    let mut c = start();
    c.open(1, stream_headers("error", port, "0")).await;
    // kubectl finishes its side of the error stream at once.
    c.send(data(1, true, b"")).await;
    c.open(3, stream_headers("data", port, "0")).await;
    c.send(data(3, false, b"hello")).await;
    assert_eq!(c.read_data(3, 5).await, b"hello");
    // The client's end half-closes: the echo answers, sees the end and closes.
    c.send(data(3, true, b"bye")).await;
    assert_eq!(c.read_data(3, 3).await, b"bye");
    assert_eq!(c.next().await, Some(data(3, true, b"")));
    assert_eq!(c.next().await, Some(data(1, true, b"")));
    // The client answers pings.
    c.send(Frame::Ping { id: 1 }).await;
    assert_eq!(c.next().await, Some(Frame::Ping { id: 1 }));
}

#[tokio::test]
async fn a_refused_connection_is_told_on_its_error_stream_and_others_go_on() {
    let (refused, port) = (closed_port(), echo().await);
    let mut c = start();
    c.open(1, stream_headers("error", refused, "0")).await;
    c.open(3, stream_headers("data", refused, "0")).await;
    let Some(Frame::Data {
        stream: 1,
        fin: false,
        data: message,
    }) = c.next().await
    else {
        panic!("the error comes on the error stream");
    };
    let message = String::from_utf8_lossy(&message).into_owned();
    assert!(
        message.starts_with(&format!(
            "error forwarding port {refused} to pod web_default, uid u1: failed to connect to 127.0.0.1:{refused}: "
        )),
        "{message}"
    );
    assert_eq!(c.next().await, Some(data(3, true, b"")));
    assert_eq!(c.next().await, Some(data(1, true, b"")));
    // The session carries on: a second pair, and without request ids (older clients).
    c.open(5, stream_headers("error", port, "")).await;
    c.open(7, stream_headers("data", port, "")).await;
    c.send(data(7, false, b"still here")).await;
    assert_eq!(c.read_data(7, 10).await, b"still here");
}

#[tokio::test]
async fn streams_without_a_valid_port_or_type_are_reset() {
    let mut c = start();
    let syn = |stream, headers| Frame::SynStream {
        stream,
        associated: 0,
        priority: 0,
        fin: false,
        unidirectional: false,
        headers,
    };
    c.send(syn(1, stream_headers("data", 0, "0"))).await;
    c.send(syn(3, stream_headers("bogus", 80, "0"))).await;
    c.send(syn(5, vec![("streamtype".into(), "data".into())]))
        .await;
    // Stream ids of the client are odd and rise.
    c.send(syn(4, stream_headers("data", 80, "1"))).await;
    c.send(syn(5, stream_headers("data", 80, "1"))).await;
    let mut resets = Vec::new();
    for _ in 0..5 {
        match c.next().await {
            Some(Frame::RstStream { stream, status }) => resets.push((stream, status)),
            other => panic!("a reset, not {other:?}"),
        }
    }
    assert_eq!(
        resets,
        [
            (1, rst::CANCEL),
            (3, rst::CANCEL),
            (5, rst::CANCEL),
            (4, rst::PROTOCOL_ERROR),
            (5, rst::PROTOCOL_ERROR)
        ]
    );
}

#[tokio::test]
async fn a_reset_data_stream_closes_its_connection() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let (closed_tx, closed) = oneshot::channel();
    tokio::spawn(async move {
        let (mut conn, _) = l.accept().await.unwrap();
        conn.write_all(b"hi").await.unwrap();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest).await;
        let _ = closed_tx.send(rest);
    });
    let mut c = start();
    c.open(1, stream_headers("error", port, "9")).await;
    c.open(3, stream_headers("data", port, "9")).await;
    assert_eq!(c.read_data(3, 2).await, b"hi");
    c.send(Frame::RstStream {
        stream: 3,
        status: rst::CANCEL,
    })
    .await;
    // As kubectl waits for: the error stream ends, with nothing on it.
    assert_eq!(c.next().await, Some(data(1, true, b"")));
    let rest = tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .unwrap()
        .unwrap();
    assert!(rest.is_empty());
}

#[tokio::test]
async fn a_large_transfer_flows_with_bounded_buffers_and_window_updates() {
    let port = echo().await;
    let mut c = start();
    c.open(1, stream_headers("error", port, "0")).await;
    c.open(3, stream_headers("data", port, "0")).await;
    let payload: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    // Sent in kubectl's 32 KiB frames while the echo is read.
    let mut frames = Vec::new();
    for chunk in payload.chunks(32 * 1024) {
        c.enc.encode(
            &Frame::Data {
                stream: 3,
                fin: false,
                data: Bytes::copy_from_slice(chunk),
            },
            &mut frames,
        );
    }
    let mut w = c.w;
    let writer = tokio::spawn(async move {
        w.write_all(&frames).await.unwrap();
        w
    });
    c.w = tokio::io::split(tokio::io::duplex(1).0).1;
    let echoed = c.read_data(3, payload.len()).await;
    assert!(echoed == payload, "the bytes come back as sent");
    writer.await.unwrap();
    assert!(
        c.credited >= payload.len() as u64 - u64::from(spdy::DEFAULT_WINDOW),
        "the session window was opened as the pod took the bytes: {}",
        c.credited
    );
}

#[tokio::test(start_paused = true)]
async fn a_pair_whose_second_stream_never_comes_is_given_up() {
    let mut c = start();
    c.open(1, stream_headers("error", 80, "4")).await;
    let Some(Frame::Data {
        stream: 1, data, ..
    }) = c.next().await
    else {
        panic!("a message on the error stream");
    };
    assert_eq!(data, "(request=4) timed out waiting for streams");
    assert_eq!(c.next().await, Some(data_fin(1)));
}

fn data_fin(stream: u32) -> Frame {
    data(stream, true, b"")
}
