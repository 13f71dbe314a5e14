//! Names that are not the cluster's go to the upstream servers: the host's (the
//! `nameserver` lines of its resolv.conf, read again when the file changes) or a list
//! given. A query is relayed as it came (a fresh random ID on a fresh socket of a random
//! port), over UDP, again over TCP when the answer is truncated; each server has
//! [`ATTEMPT`] to answer before the next is asked, and all of them together
//! [`DEADLINE`]. Edge machines are often offline: a server that refuses at once (no
//! route, nothing listening) is passed over at once, so with no server reachable, or
//! none at all, the client gets its SERVFAIL straight away rather than after its own
//! time-outs.
//!
//! This is a small forwarder of our own rather than hickory's resolver: it relays the
//! upstream's answer (its code, sections and flags) instead of resolving afresh, and it
//! keeps no cache (pods' resolvers and the upstream servers keep theirs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hickory_server::proto::op::{Message, Query};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout, timeout_at};

use super::resolv::ResolvConf;

/// How long one upstream server has to answer before the next is asked.
pub const ATTEMPT: Duration = Duration::from_millis(700);
/// How long a forwarded question may take in all before the client gets SERVFAIL.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// How often a resolv.conf is looked at again for changes (at most, and only when a
/// question is forwarded).
const RECHECK: Duration = Duration::from_secs(2);
/// The most questions forwarded at once (each holds a socket); more are SERVFAIL.
const IN_FLIGHT: usize = 1024;
/// The largest answer read (a DNS message's largest size).
const MAX_MESSAGE: usize = 65535;

/// Where names outside the cluster are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// The `nameserver` lines of this resolv.conf (the host's: `/etc/resolv.conf`),
    /// read again when it changes. No file, or no nameserver in it: no upstream.
    ResolvConf(PathBuf),
    /// These servers, in this order; none: every such question is SERVFAIL at once.
    Servers(Vec<SocketAddr>),
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream::ResolvConf(PathBuf::from("/etc/resolv.conf"))
    }
}

/// The servers of a resolv.conf as last read.
struct Read {
    servers: Arc<[SocketAddr]>,
    modified: Option<SystemTime>,
    checked: Instant,
}

/// Relays questions to the upstream servers.
pub struct Forwarder {
    upstream: Upstream,
    /// Where this server itself listens: never an upstream of its own.
    own: Vec<SocketAddr>,
    read: Mutex<Option<Read>>,
    permits: Semaphore,
}

impl Forwarder {
    pub fn new(upstream: Upstream, own: Vec<SocketAddr>) -> Self {
        let forwarder = Forwarder {
            upstream,
            own,
            read: Mutex::new(None),
            permits: Semaphore::new(IN_FLIGHT),
        };
        let servers = forwarder.servers();
        if servers.is_empty() {
            tracing::warn!(upstream = ?forwarder.upstream, "the cluster DNS has no upstream server: names outside the cluster are answered SERVFAIL (give pods a nameserver in the host's resolv.conf, or an upstream)");
        } else {
            tracing::info!(servers = ?servers, "the cluster DNS forwards other names");
        }
        forwarder
    }

    /// Whether `server` is this DNS server itself (a loop).
    fn is_own(&self, server: &SocketAddr) -> bool {
        self.own.iter().any(|own| {
            own == server
                || (own.ip().is_unspecified()
                    && own.port() == server.port()
                    && server.ip().is_loopback())
        })
    }

    /// The upstream servers now.
    pub fn servers(&self) -> Arc<[SocketAddr]> {
        let path = match &self.upstream {
            Upstream::Servers(list) => {
                return list.iter().filter(|s| !self.is_own(s)).copied().collect();
            }
            Upstream::ResolvConf(path) => path,
        };
        let mut read = self.read.lock().expect("forwarder lock");
        let now = Instant::now();
        if let Some(r) = read.as_ref().filter(|r| now < r.checked + RECHECK) {
            return r.servers.clone();
        }
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if let Some(r) = read.as_mut().filter(|r| r.modified == modified) {
            r.checked = now;
            return r.servers.clone();
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let servers: Arc<[SocketAddr]> = ResolvConf::parse(&text)
            .servers()
            .into_iter()
            .filter(|s| !self.is_own(s))
            .collect();
        if read.is_some() {
            tracing::info!(path = %path.display(), servers = ?servers, "the upstream DNS servers changed");
        }
        *read = Some(Read {
            servers: servers.clone(),
            modified,
            checked: now,
        });
        servers
    }

    /// Relays `packet` (a whole query whose question is `question`) and returns the
    /// answer, its ID the query's; `None` when no server answered in time (SERVFAIL).
    pub async fn exchange(&self, packet: &[u8], question: &[Query]) -> Option<Message> {
        let servers = self.servers();
        if servers.is_empty() || packet.len() < 12 {
            return None;
        }
        let _permit = self.permits.try_acquire().ok()?;
        let original = u16::from_be_bytes([packet[0], packet[1]]);
        let id = random_id();
        let mut packet = packet.to_vec();
        packet[..2].copy_from_slice(&id.to_be_bytes());
        let end = Instant::now() + DEADLINE;
        // Refusals in a row: when every server refused, nobody is there to ask.
        let mut refused = 0;
        for server in servers.iter().cycle() {
            let now = Instant::now();
            if now >= end || refused >= servers.len() {
                break;
            }
            let attempt = timeout(
                ATTEMPT.min(end - now),
                udp_exchange(*server, &packet, id, question),
            )
            .await;
            let mut answer = match attempt {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => {
                    tracing::debug!(%server, error = %e, "an upstream DNS server did not answer");
                    refused += 1;
                    continue;
                }
                Err(_) => {
                    refused = 0;
                    continue;
                }
            };
            if answer.metadata.truncation {
                match timeout_at(end, tcp_exchange(*server, &packet, id, question)).await {
                    Ok(Ok(whole)) => answer = whole,
                    Ok(Err(e)) => {
                        tracing::debug!(%server, error = %e, "an upstream DNS server did not answer over TCP");
                    }
                    Err(_) => {}
                }
            }
            answer.metadata.id = original;
            return Some(answer);
        }
        None
    }
}

fn random_id() -> u16 {
    let mut raw = [0u8; 2];
    // A fixed ID is no worse than any other where no randomness is to be had.
    let _ = getrandom::fill(&mut raw);
    u16::from_be_bytes(raw)
}

/// The answer to query `id` about `question`, or why it is not one.
fn check(bytes: &[u8], id: u16, question: &[Query]) -> std::io::Result<Message> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let message = Message::from_vec(bytes).map_err(|e| bad(format!("undecodable answer: {e}")))?;
    if message.metadata.id != id || message.queries != question {
        return Err(bad("an answer to another question".into()));
    }
    Ok(message)
}

async fn udp_exchange(
    server: SocketAddr,
    packet: &[u8],
    id: u16,
    question: &[Query],
) -> std::io::Result<Message> {
    let any: SocketAddr = match server {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(any).await?;
    // Connected: only the server's datagrams arrive, and a refusal is an error at once.
    socket.connect(server).await?;
    socket.send(packet).await?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let n = socket.recv(&mut buf).await?;
        match check(&buf[..n], id, question) {
            Ok(message) => return Ok(message),
            // A stray or forged datagram: wait on for the answer.
            Err(e) => tracing::debug!(%server, error = %e, "ignored a datagram"),
        }
    }
}

async fn tcp_exchange(
    server: SocketAddr,
    packet: &[u8],
    id: u16,
    question: &[Query],
) -> std::io::Result<Message> {
    let mut stream = TcpStream::connect(server).await?;
    let len = u16::try_from(packet.len()).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(packet.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(packet);
    stream.write_all(&framed).await?;
    let len = stream.read_u16().await?;
    let mut buf = vec![0u8; usize::from(len)];
    stream.read_exact(&mut buf).await?;
    check(&buf, id, question)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_come_from_the_file_and_follow_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 127.0.0.1\nnameserver 192.0.2.7\n").unwrap();
        let own = vec!["127.0.0.1:53".parse().unwrap()];
        let f = Forwarder::new(Upstream::ResolvConf(path.clone()), own);
        // Its own address is never an upstream.
        assert_eq!(&*f.servers(), ["192.0.2.7:53".parse().unwrap()]);
        // A changed file is read again once it is looked at again.
        std::fs::write(&path, "nameserver 192.0.2.8\n").unwrap();
        let far = std::time::SystemTime::now() + Duration::from_secs(10);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(far)
            .unwrap();
        f.read.lock().unwrap().as_mut().unwrap().checked = Instant::now() - RECHECK;
        assert_eq!(&*f.servers(), ["192.0.2.8:53".parse().unwrap()]);
        // No file: no server.
        let none = Forwarder::new(Upstream::ResolvConf(dir.path().join("missing")), vec![]);
        assert!(none.servers().is_empty());
        let any = Forwarder::new(
            Upstream::Servers(vec!["127.0.0.1:53".parse().unwrap()]),
            vec!["0.0.0.0:53".parse().unwrap()],
        );
        assert!(any.servers().is_empty());
    }

    #[tokio::test]
    async fn nobody_to_ask_is_an_answer_at_once() {
        let question = vec![Query::query(
            hickory_server::proto::rr::Name::from_ascii("example.org.").unwrap(),
            hickory_server::proto::rr::RecordType::A,
        )];
        let mut query = Message::query();
        query.metadata.id = 7;
        query.queries = question.clone();
        let packet = query.to_vec().unwrap();
        let none = Forwarder::new(Upstream::Servers(vec![]), vec![]);
        assert!(none.exchange(&packet, &question).await.is_none());
        // A port nobody listens on refuses at once.
        let port = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        let closed = Forwarder::new(Upstream::Servers(vec![port]), vec![]);
        let started = Instant::now();
        assert!(closed.exchange(&packet, &question).await.is_none());
        assert!(started.elapsed() < ATTEMPT, "{:?}", started.elapsed());
    }
}
