//! The cluster DNS, in process, as the Kubernetes DNS specification describes it
//! (`kubernetes/dns`, `docs/specification.md`, the records CoreDNS's `kubernetes`
//! plugin gives): for each Service, `<svc>.<ns>.svc.<domain>` (A/AAAA of its cluster
//! IPs; of its ready endpoints when headless; a CNAME for an ExternalName), SRV
//! `_<port>._<proto>.<svc>.<ns>.svc.<domain>` of its named ports, each endpoint as
//! `<hostname>.<svc>.<ns>.svc.<domain>` (the pod's `hostname` in the Service's
//! `subdomain`, else its address with dashes), PTR of the cluster IPs and the endpoints'
//! addresses, pods as `a-b-c-d.<ns>.pod.<domain>`, and `dns-version.<domain>` TXT.
//! Other names go to the upstream servers ([`forward`]). Pods' `/etc/resolv.conf` is
//! [`resolv::resolv_conf`].
//!
//! The server is hickory-server's, listening on UDP and TCP, with a request handler of
//! our own ([`server`]) that answers from an in-memory [`index`] kept by informers of
//! Services, EndpointSlices and Namespaces.

pub mod forward;
pub mod index;
pub mod resolv;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::client::informer::Informer;
use crate::client::{Client, Kind, catalog};
use crate::supervisor::Supervisor;

pub use forward::Upstream;
pub use resolv::{ClusterDns, PodDns, ResolvConf, pod_dns, resolv_conf};

/// How long a TCP connection may sit idle between questions.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// How many answers wait to be written to one TCP connection.
const TCP_BACKLOG: usize = 32;
/// How many times a free port is sought for UDP and TCP together.
const PORT_TRIES: usize = 20;

/// What the cluster DNS serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// The addresses to answer on, each over UDP and TCP; port 0 takes a free port (the
    /// same for both protocols).
    pub listen: Vec<SocketAddr>,
    /// The cluster domain (`--cluster-domain`, `cluster.local`).
    pub domain: String,
    /// Where other names are resolved.
    pub upstream: Upstream,
}

/// Why the DNS server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Domain(#[from] index::BadDomain),
    #[error("serve DNS on {address} over {protocol}: {source}{}", hint(source))]
    Listen {
        address: SocketAddr,
        protocol: &'static str,
        source: std::io::Error,
    },
    #[error("no address to serve DNS on was given")]
    NoAddress,
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another DNS server, such as systemd-resolved or dnsmasq, holds it: stop it, or choose another address)"
        }
        std::io::ErrorKind::PermissionDenied => {
            " (ports below 1024 need root or CAP_NET_BIND_SERVICE)"
        }
        _ => "",
    }
}

/// The running DNS server.
pub struct Dns {
    addresses: Vec<SocketAddr>,
    index: Arc<index::Index>,
    informers: Arc<[Informer]>,
}

impl Dns {
    /// Where it answers (UDP and TCP alike), with the ports it took.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// How many Services it answers for.
    pub fn services(&self) -> usize {
        self.index.services()
    }

    /// Waits until the cluster's names are known (until then they are SERVFAIL).
    pub async fn synced(&self) {
        for informer in self.informers.iter() {
            informer.synced().await;
        }
        self.index.set_synced();
    }
}

/// Binds UDP and TCP on `address`, on the same port.
fn bind(address: SocketAddr) -> Result<(std::net::UdpSocket, std::net::TcpListener), Error> {
    let listen = |protocol, source| Error::Listen {
        address,
        protocol,
        source,
    };
    let mut tries = 0;
    loop {
        let udp = std::net::UdpSocket::bind(address).map_err(|e| listen("UDP", e))?;
        let at = udp.local_addr().map_err(|e| listen("UDP", e))?;
        match std::net::TcpListener::bind(at) {
            Ok(tcp) => {
                udp.set_nonblocking(true).map_err(|e| listen("UDP", e))?;
                tcp.set_nonblocking(true).map_err(|e| listen("TCP", e))?;
                return Ok((udp, tcp));
            }
            // The free UDP port is taken for TCP: another.
            Err(e)
                if address.port() == 0
                    && e.kind() == std::io::ErrorKind::AddrInUse
                    && tries < PORT_TRIES =>
            {
                tries += 1;
            }
            Err(e) => return Err(listen("TCP", e)),
        }
    }
}

/// Starts the cluster DNS: binds every address of `config` (so that an address taken
/// is an error here), then answers under `sup` from informers of `client`.
pub fn start(sup: &mut Supervisor, client: &Client, config: DnsConfig) -> Result<Dns, Error> {
    if config.listen.is_empty() {
        return Err(Error::NoAddress);
    }
    let index = Arc::new(index::Index::new(&config.domain)?);
    let mut sockets = Vec::new();
    for address in &config.listen {
        sockets.push(bind(*address)?);
    }
    let addresses: Vec<SocketAddr> = sockets
        .iter()
        .map(|(udp, _)| udp.local_addr().expect("a bound socket has an address"))
        .collect();
    let forwarder = Arc::new(forward::Forwarder::new(config.upstream, addresses.clone()));

    let services = Informer::new(catalog::of(Kind::Service));
    let slices = Informer::new(catalog::of(Kind::EndpointSlice));
    let namespaces = Informer::metadata_only(catalog::of(Kind::Namespace));
    let i = index.clone();
    services.on_change(move |change| i.service_changed(change));
    let i = index.clone();
    slices.on_change(move |change| i.slice_changed(change));
    let i = index.clone();
    namespaces.on_change(move |change| i.namespace_changed(change));
    let informers: Arc<[Informer]> = Arc::new([services, slices, namespaces]);
    for informer in informers.iter() {
        let (informer, client) = (informer.clone(), client.clone());
        let name = format!("dns-{}", informer.resource().plural);
        sup.spawn(name, move |cancel| {
            informer.clone().run(client.clone(), cancel)
        });
    }

    let sockets = Arc::new(sockets);
    let (i, f, inf) = (index.clone(), forwarder, informers.clone());
    sup.spawn("dns-server", move |cancel| {
        let handler = server::Handler {
            index: i.clone(),
            forwarder: f.clone(),
            informers: inf.clone(),
        };
        let sockets = sockets.clone();
        async move {
            let mut server = hickory_server::Server::new(handler);
            for (udp, tcp) in sockets.iter() {
                // Copies of the bound sockets, so that a restart serves them again.
                let udp = udp.try_clone().and_then(tokio::net::UdpSocket::from_std);
                let tcp = tcp.try_clone().and_then(tokio::net::TcpListener::from_std);
                match (udp, tcp) {
                    (Ok(udp), Ok(tcp)) => {
                        server.register_socket(udp);
                        server.register_listener(tcp, TCP_IDLE, TCP_BACKLOG);
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        tracing::error!(error = %e, "the DNS server cannot use its sockets");
                        return;
                    }
                }
            }
            let stop = server.shutdown_token().clone();
            tokio::select! {
                done = server.block_until_done() => {
                    if let Err(e) = done {
                        tracing::error!(error = %e, "the DNS server stopped");
                    }
                }
                () = cancel.cancelled() => stop.cancel(),
            }
        }
    });
    tracing::info!(addresses = ?addresses, domain = %config.domain, "serving the cluster DNS");
    Ok(Dns {
        addresses,
        index,
        informers,
    })
}
