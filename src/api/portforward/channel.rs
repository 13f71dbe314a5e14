//! Port forwarding over the WebSocket channel protocol (`v4.channel.k8s.io`, its base64
//! variant, or no protocol named), as the kubelet serves it: one connection per port
//! asked for in the query, the n-th on data channel 2n and error channel 2n+1. Both
//! channels of a port start with its number (two bytes, little-endian); the client
//! writes only on data channels. The session closes when every connection has ended
//! (one that could not be made leaves its message on its error channel), or as soon as
//! the client leaves.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::super::exec::Protocol;
use super::{Target, relay};

/// Chunks from the client queued for one connection to the pod.
const INBOUND: usize = 16;
/// Frames queued for the client.
const OUTBOUND: usize = 64;

pub async fn serve(socket: WebSocket, protocol: Protocol, ports: Vec<u16>, target: Arc<Target>) {
    let (mut sink, mut incoming) = socket.split();
    for (i, port) in ports.iter().enumerate() {
        for channel in [data_channel(i), data_channel(i) + 1] {
            if sink
                .send(protocol.frame(channel, &port.to_le_bytes()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    let (out, mut frames) = mpsc::channel::<(u8, Bytes)>(OUTBOUND);
    let mut inbound = Vec::with_capacity(ports.len());
    let mut forwards = JoinSet::new();
    for (i, port) in ports.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel(INBOUND);
        inbound.push(Some(tx));
        let (target, out) = (target.clone(), out.clone());
        forwards.spawn(async move {
            let data = data_channel(i);
            match target.connect(port).await {
                Ok(tcp) => relay(tcp, rx, &out, |bytes| (data, bytes), |_| Vec::new()).await,
                Err(message) => {
                    tracing::debug!(%message, "a forwarded connection failed");
                    let _ = out.send((data + 1, Bytes::from(message))).await;
                }
            }
        });
    }
    drop(out);
    let mut reading = tokio::spawn(async move {
        while let Some(Ok(msg)) = incoming.next().await {
            if let Message::Close(_) = msg {
                break;
            }
            let Some((channel, data)) = protocol.decode(&msg) else {
                continue;
            };
            // Error channels are the server's to write.
            if channel % 2 == 1 || data.is_empty() {
                continue;
            }
            let i = usize::from(channel / 2);
            let Some(Some(tx)) = inbound.get(i).cloned() else {
                continue;
            };
            if tx.send(data).await.is_err() {
                // The pod reads no more.
                inbound[i] = None;
            }
        }
    });
    loop {
        tokio::select! {
            frame = frames.recv() => match frame {
                Some((channel, data)) => {
                    if sink.send(protocol.frame(channel, &data)).await.is_err() {
                        break;
                    }
                }
                // Every connection has ended.
                None => break,
            },
            // The client left.
            _ = &mut reading => break,
        }
    }
    forwards.shutdown().await;
    reading.abort();
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: 1000,
            reason: "".into(),
        })))
        .await;
}

/// The data channel of the `i`-th port (its error channel is the next).
fn data_channel(i: usize) -> u8 {
    (2 * i) as u8
}
