//! `pods/{name}/portforward`: TCP connections to a pod's ports, as `kubectl port-forward`
//! and the other clients open them. Three protocols, chosen by the request:
//!
//! - SPDY/3.1 tunnelled in WebSocket binary messages (subprotocol
//!   `SPDY/3.1+portforward.k8s.io`), which kubectl speaks from 1.31 on;
//! - SPDY/3.1 over an upgraded HTTP/1.1 connection (`Upgrade: SPDY/3.1`,
//!   `X-Stream-Protocol-Version: portforward.k8s.io`), older kubectl's and the fallback;
//! - the WebSocket channel protocol (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io` or
//!   none) with the ports in the query (`ports=8080,9090` or repeated), which the Python
//!   client and browsers speak.
//!
//! In SPDY, each forwarded connection is a pair of client-made streams with the headers
//! `streamType` (`error` or `data`), `port` and `requestID` ([`session`]). In the channel
//! protocol, the n-th port has a data channel 2n and an error channel 2n+1, each starting
//! with the port number in two bytes, little-endian ([`channel`]). Either way a data
//! stream is bridged to one TCP connection to the pod ([`relay`]), and a connection that
//! cannot be made reports the kubelet's message on its error stream, leaving the other
//! streams be. Every buffer on the way is bounded: a slow reader on either side holds
//! the other back.

mod channel;
mod session;
pub mod spdy;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::error::Error;
use super::exec::Protocol;
use crate::types::json::str_at;

/// The port-forward protocol inside SPDY.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// The prefix of a WebSocket subprotocol that tunnels SPDY.
pub const TUNNEL_PREFIX: &str = "SPDY/3.1+";
/// The header that names the stream protocols of a SPDY upgrade.
pub const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// How long a connection to a pod's port may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most ports one channel-protocol session forwards (each takes two channels, whose
/// numbers must stay below the base64 protocol's last digit).
const MAX_PORTS: usize = 100;

/// The most bytes read from a pod's connection at once, so the most a frame carries.
const CHUNK: usize = 32 * 1024;

/// Where a forwarded connection to `port` of `pod` goes: the pod's address as its node
/// reaches it. Today a pod shares its node's network, so `status.podIP` is the node's own
/// address.
pub fn pod_address(pod: &Value, port: u16) -> Result<SocketAddr, String> {
    let ip = str_at(pod, "/status/podIP");
    if ip.is_empty() {
        return Err("the pod has no IP address yet".into());
    }
    let ip: IpAddr = ip
        .parse()
        .map_err(|e| format!("the pod's IP address {ip:?} is not one: {e}"))?;
    Ok(SocketAddr::new(ip, port))
}

/// The pod a port-forward session reaches.
pub struct Target {
    pod: Value,
    /// The pod's own network namespace, when it has one: connections are made from
    /// inside it to its loopback, as the kubelet does, so a server listening only on
    /// 127.0.0.1 in the pod is reached too.
    netns: Option<std::path::PathBuf>,
}

impl Target {
    pub fn new(pod: Value) -> Self {
        Target { pod, netns: None }
    }

    pub fn with_netns(mut self, netns: Option<std::path::PathBuf>) -> Self {
        self.netns = netns;
        self
    }

    /// Connects to `port` of the pod; the error is the message its error stream carries,
    /// in the kubelet's words.
    async fn connect(&self, port: u16) -> Result<TcpStream, String> {
        let name = format!(
            "{}_{}",
            str_at(&self.pod, "/metadata/name"),
            str_at(&self.pod, "/metadata/namespace")
        );
        let uid = str_at(&self.pod, "/metadata/uid");
        let failed =
            |e: String| format!("error forwarding port {port} to pod {name}, uid {uid}: {e}");
        if let Some(netns) = &self.netns {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            return connect_in(netns.clone(), addr)
                .await
                .inspect(|tcp| {
                    let _ = tcp.set_nodelay(true);
                })
                .map_err(|e| failed(format!("failed to connect to localhost:{port} inside the pod's network namespace: {e}")));
        }
        let addr = pod_address(&self.pod, port).map_err(failed)?;
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => {
                let _ = tcp.set_nodelay(true);
                Ok(tcp)
            }
            Ok(Err(e)) => Err(failed(format!("failed to connect to {addr}: {e}"))),
            Err(_) => Err(failed(format!(
                "failed to connect to {addr}: no answer in {} s",
                CONNECT_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// Connects to `addr` from inside the network namespace `netns`: a thread of its own
/// enters it and makes the socket there (a socket stays in the namespace it was made in).
async fn connect_in(netns: std::path::PathBuf, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("berth-portforward".into())
        .spawn(move || {
            let run = || -> std::io::Result<std::net::TcpStream> {
                let ns = std::fs::File::open(&netns)?;
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&ns),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )?;
                let tcp = std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
                tcp.set_nonblocking(true)?;
                Ok(tcp)
            };
            let _ = tx.send(run());
        })?;
    let tcp = rx
        .await
        .map_err(|_| std::io::Error::other("the connecting thread ended early"))??;
    TcpStream::from_std(tcp)
}

/// The ports of a channel-protocol request: `ports` (the API's name) or `port` (the
/// kubelet's), repeated or comma-separated.
pub fn ports(query: Option<&str>) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if k != "ports" && k != "port" {
            continue;
        }
        if v.is_empty() {
            return Err(format!("query parameter {k:?} cannot be empty"));
        }
        for p in v.split(',') {
            match p.trim().parse::<u16>() {
                Ok(0) => return Err(format!("port {p:?} must be > 0")),
                Ok(n) => ports.push(n),
                Err(e) => return Err(format!("unable to parse {p:?} as a port: {e}")),
            }
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"ports\" is required".into());
    }
    if ports.len() > MAX_PORTS {
        return Err(format!(
            "at most {MAX_PORTS} ports can be forwarded at once"
        ));
    }
    Ok(ports)
}

/// The protocols a request offers in `header`, comma-separated or repeated.
fn offered(headers: &HeaderMap, name: impl header::AsHeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

fn upgrade_to(headers: &HeaderMap) -> String {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Serves a port-forward request to `target`: the upgrade its headers ask for, then the
/// session on the upgraded connection.
pub async fn serve(
    parts: &mut Parts,
    query: Option<&str>,
    target: Target,
) -> Result<Response, Error> {
    let upgrade = upgrade_to(&parts.headers);
    let target = Arc::new(target);
    if upgrade == "websocket" {
        let offered = offered(&parts.headers, header::SEC_WEBSOCKET_PROTOCOL);
        // kubectl's tunnel if offered, else a channel protocol, the client's first served
        // offer (none named: binary channels).
        let tunnel = offered
            .iter()
            .find(|p| p.strip_prefix(TUNNEL_PREFIX) == Some(PROTOCOL));
        let (channels, selected) = match tunnel {
            Some(t) => (None, Some(t.clone())),
            None if offered.is_empty() => (Some((Protocol::V4, ports(query))), None),
            None => {
                let served = [Protocol::V4, Protocol::V4Base64];
                let Some(p) = offered
                    .iter()
                    .find_map(|o| served.into_iter().find(|p| p.name() == o))
                else {
                    return Err(Error::BadRequest(format!(
                        "requested protocol(s) are not supported: [{}]; supports [{}{PROTOCOL} {} {}]",
                        offered.join(" "),
                        TUNNEL_PREFIX,
                        Protocol::V4.name(),
                        Protocol::V4Base64.name()
                    )));
                };
                (Some((p, ports(query))), Some(p.name().to_string()))
            }
        };
        let channels = match channels {
            Some((protocol, ports)) => Some((protocol, ports.map_err(Error::BadRequest)?)),
            None => None,
        };
        let mut ws = WebSocketUpgrade::from_request_parts(parts, &())
            .await
            .map_err(|e| Error::BadRequest(format!("not a WebSocket upgrade: {e}")))?;
        if let Some(Ok(p)) = selected.as_deref().map(HeaderValue::from_str) {
            ws.set_selected_protocol(p);
        }
        let answer = ws.on_upgrade(move |socket| async move {
            match channels {
                Some((protocol, ports)) => channel::serve(socket, protocol, ports, target).await,
                None => {
                    let transport = session::Transport::WebSocket(Box::new(socket));
                    session::serve(transport, target).await
                }
            }
        });
        return Ok(answer.into_response());
    }
    if upgrade.contains("spdy/3.1") {
        let asked = offered(&parts.headers, PROTOCOL_HEADER);
        if !asked.iter().any(|p| p == PROTOCOL) {
            return Err(Error::Forbidden(format!(
                "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{PROTOCOL}]",
                asked.join(" ")
            )));
        }
        let Some(on_upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
            return Err(Error::BadRequest(
                "unable to upgrade: SPDY/3.1 needs an HTTP/1.1 connection".into(),
            ));
        };
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let io = hyper_util::rt::TokioIo::new(upgraded);
                    session::serve(session::Transport::Bytes(Box::new(io)), target).await;
                }
                Err(e) => tracing::debug!(error = %e, "the SPDY upgrade did not complete"),
            }
        });
        let mut answer = Response::new(Body::empty());
        *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = answer.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        h.insert(PROTOCOL_HEADER, HeaderValue::from_static(PROTOCOL));
        return Ok(answer);
    }
    Err(Error::BadRequest(format!(
        "port forwarding needs an upgrade: a WebSocket offering {TUNNEL_PREFIX}{PROTOCOL}, {} or {} (with the ports in the query), or SPDY/3.1 with {PROTOCOL_HEADER}: {PROTOCOL}",
        Protocol::V4.name(),
        Protocol::V4Base64.name()
    )))
}

/// Copies between a client's stream and a pod's connection until the pod's side ends:
/// what the client sends comes through `inbound` (its end half-closes the connection),
/// what the pod sends goes to `out` through `data`; `credit` makes what tells the client
/// that the pod took bytes (SPDY's window updates). A client that sends faster than the
/// pod reads fills `inbound` and waits; a pod that sends faster than the client reads
/// fills `out` and waits.
async fn relay<T: Send>(
    tcp: TcpStream,
    mut inbound: mpsc::Receiver<Bytes>,
    out: &mpsc::Sender<T>,
    data: impl Fn(Bytes) -> T,
    credit: impl Fn(u32) -> Vec<T>,
) {
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let up = async {
        let mut taken = 0u32;
        while let Some(bytes) = inbound.recv().await {
            if to_pod.write_all(&bytes).await.is_err() {
                // The pod reads no more: what the client sends from now on is dropped.
                return;
            }
            taken += bytes.len() as u32;
            if taken >= spdy::DEFAULT_WINDOW / 2 {
                for t in credit(taken) {
                    if out.send(t).await.is_err() {
                        return;
                    }
                }
                taken = 0;
            }
        }
        // The client sends no more: neither will the connection.
        let _ = to_pod.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from_pod.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if out
                        .send(data(Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    };
    tokio::pin!(up);
    tokio::pin!(down);
    let mut up_done = false;
    loop {
        tokio::select! {
            () = &mut up, if !up_done => up_done = true,
            () = &mut down => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_the_pods_address_as_its_node_sees_it() {
        let pod = serde_json::json!({"status": {"podIP": "10.42.0.7"}});
        assert_eq!(
            pod_address(&pod, 8080).unwrap(),
            "10.42.0.7:8080".parse().unwrap()
        );
        let v6 = serde_json::json!({"status": {"podIP": "fd00::7"}});
        assert_eq!(
            pod_address(&v6, 80).unwrap(),
            "[fd00::7]:80".parse().unwrap()
        );
        assert!(pod_address(&serde_json::json!({"status": {}}), 80).is_err());
    }

    #[test]
    fn ports_come_repeated_or_comma_separated() {
        assert_eq!(
            ports(Some("ports=80,8080&ports=9090")).unwrap(),
            [80, 8080, 9090]
        );
        assert_eq!(ports(Some("port=81")).unwrap(), [81]);
        assert!(ports(Some("ports=0")).unwrap_err().contains("must be > 0"));
        assert!(
            ports(Some("ports=x"))
                .unwrap_err()
                .contains("unable to parse")
        );
        assert_eq!(
            ports(None).unwrap_err(),
            "query parameter \"ports\" is required"
        );
    }
}
