//! The node's network: every pod's own network namespace wired to the bridge `berth0`
//! with an address from the node's pod CIDR ([`pod`], [`ipam`], [`link`]), Services
//! programmed into the kernel as kube-proxy's nftables mode does ([`proxy`]), and the
//! cluster's DNS ([`dns`]).

pub mod dns;
pub mod proxy;

use std::net::Ipv4Addr;

/// What the node's network is made of; `berth serve` flags set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The pods' addresses (`--pod-cidr`, default 10.42.0.0/16); the bridge takes the
    /// first one, pods the others.
    pub pod_cidr: ipnet::Ipv4Net,
    /// The Services' cluster IPs (10.96.0.0/16).
    pub service_cidr: ipnet::Ipv4Net,
    /// The bridge every pod's veth is attached to.
    pub bridge: String,
    /// berth's own nftables table (family `ip`).
    pub table: String,
    /// The cluster's DNS domain (`--cluster-domain`).
    pub cluster_domain: String,
    /// The cluster IP of the DNS Service (`kube-system/kube-dns`).
    pub dns_service_ip: Ipv4Addr,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pod_cidr: "10.42.0.0/16".parse().expect("a valid CIDR"),
            service_cidr: "10.96.0.0/16".parse().expect("a valid CIDR"),
            bridge: "berth0".to_string(),
            table: "berth".to_string(),
            cluster_domain: "cluster.local".to_string(),
            dns_service_ip: Ipv4Addr::new(10, 96, 0, 10),
        }
    }
}

impl Config {
    /// The bridge's own address: the first of the pod CIDR (the pods' gateway).
    pub fn gateway(&self) -> Ipv4Addr {
        let first = u32::from(self.pod_cidr.network()) + 1;
        Ipv4Addr::from(first)
    }
}

/// This machine's address toward its default route (its primary address), if it has
/// one: the address a UDP socket connected toward a documentation address (TEST-NET-1,
/// RFC 5737) would send from. Connecting a UDP socket sends nothing.
pub fn primary_address() -> Option<Ipv4Addr> {
    let socket = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).ok()?;
    match socket.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

pub mod ipam;
pub mod link;
pub mod pod;
