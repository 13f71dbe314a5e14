//! The node's network: every pod's own network namespace wired to the bridge `berth0`
//! with an address from the node's pod CIDR, and one of its IPv6 pod CIDR too when the
//! network is dual-stack ([`pod`], [`ipam`], [`link`]), Services
//! programmed into the kernel as kube-proxy's nftables mode does ([`proxy`]), and the
//! cluster's DNS ([`dns`]).

pub mod dns;
pub mod proxy;

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// What the node's network is made of; `berth serve` flags set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The pods' addresses (`--pod-cidr`, default 10.42.0.0/16); the bridge takes the
    /// first one, pods the others.
    pub pod_cidr: Ipv4Net,
    /// The pods' IPv6 addresses of a dual-stack network (the second CIDR of
    /// `--pod-cidr`); the bridge takes the first one. IPv4 stays the primary family.
    pub pod_cidr_v6: Option<Ipv6Net>,
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
            pod_cidr_v6: None,
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

    /// The bridge's own IPv6 address, the first of the IPv6 pod CIDR (when there is one).
    pub fn gateway_v6(&self) -> Option<Ipv6Addr> {
        let net = self.pod_cidr_v6?;
        Some(Ipv6Addr::from(u128::from(net.network()) + 1))
    }
}

/// The pod CIDRs of `--pod-cidr`: an IPv4 one, and an IPv6 one after it for a
/// dual-stack network (`10.42.0.0/16,fd42::/64`), as Kubernetes' `--cluster-cidr`
/// takes them. Each is truncated to its network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCidrs {
    pub v4: Ipv4Net,
    pub v6: Option<Ipv6Net>,
}

/// The longest IPv4 prefix a pod CIDR may have: a /30 leaves one pod address (the
/// network, the gateway and the broadcast address are never given).
pub const MAX_PREFIX_V4: u8 = 30;
/// The shortest IPv6 prefix of a node's pod CIDR: a /64, the size of every IPv6 link
/// (RFC 7421) and of the range Kubernetes gives each node out of a cluster's IPv6 CIDR
/// (`--node-cidr-mask-size-ipv6`). A cluster-sized range (`fd42::/56` of k3s) is not a
/// node's; one /64 of it is.
pub const MIN_PREFIX_V6: u8 = 64;
/// The longest: a /120 holds 254 pod addresses, room above the kubelet's 110 pods for
/// addresses handed out round-robin.
pub const MAX_PREFIX_V6: u8 = 120;

impl std::str::FromStr for PodCidrs {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        const USAGE: &str = "give an IPv4 CIDR, or an IPv4 and an IPv6 CIDR separated by a comma (10.42.0.0/16,fd42::/64)";
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        if parts.is_empty() || parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(USAGE.to_string());
        }
        let mut v4: Option<Ipv4Net> = None;
        let mut v6: Option<Ipv6Net> = None;
        for part in &parts {
            match part.parse::<ipnet::IpNet>() {
                Ok(ipnet::IpNet::V4(net)) if v4.is_none() => v4 = Some(net.trunc()),
                Ok(ipnet::IpNet::V6(net)) if v6.is_none() => v6 = Some(net.trunc()),
                Ok(_) => {
                    return Err(
                        "two CIDRs of one family: give at most one IPv4 and one IPv6 CIDR".into(),
                    );
                }
                Err(e) => return Err(format!("{part} is not a CIDR ({e}): {USAGE}")),
            }
        }
        let Some(v4) = v4 else {
            return Err(format!(
                "an IPv6-only pod network is not supported yet, as Services are IPv4; make it dual-stack with an IPv4 CIDR first (10.42.0.0/16,{text})"
            ));
        };
        if parts[0].contains(':') {
            return Err(format!(
                "the IPv4 CIDR comes first, IPv4 being the pod network's primary family while Services are IPv4 ({v4},{})",
                v6.map(|n| n.to_string()).unwrap_or_default()
            ));
        }
        if v4.prefix_len() > MAX_PREFIX_V4 {
            return Err(format!(
                "{v4} leaves no address for pods: give a prefix of /{MAX_PREFIX_V4} or shorter"
            ));
        }
        if let Some(net) = v6 {
            let addr = net.network();
            if net.prefix_len() < MIN_PREFIX_V6 {
                return Err(format!(
                    "{net} is larger than one node's pod range: give a /{MIN_PREFIX_V6} of it ({}/{MIN_PREFIX_V6}), or a longer prefix up to /{MAX_PREFIX_V6}",
                    addr
                ));
            }
            if net.prefix_len() > MAX_PREFIX_V6 {
                return Err(format!(
                    "{net} holds too few pod addresses: give a prefix from /{MIN_PREFIX_V6} to /{MAX_PREFIX_V6}"
                ));
            }
            let special = addr.is_multicast()
                || addr.is_unicast_link_local()
                || addr.is_loopback()
                || addr.is_unspecified()
                || addr.to_ipv4_mapped().is_some();
            if special {
                return Err(format!(
                    "{net} is no range of unicast addresses for pods: use a unique local range (fd00::/8, e.g. fd42::/64) or a global one routed to this machine"
                ));
            }
        }
        Ok(PodCidrs { v4, v6 })
    }
}

impl std::fmt::Display for PodCidrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.v6 {
            Some(v6) => write!(f, "{},{v6}", self.v4),
            None => write!(f, "{}", self.v4),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PodCidrs, String> {
        text.parse()
    }

    #[test]
    fn pod_cidrs_take_an_ipv4_and_an_optional_ipv6_range() {
        let one = parse("10.42.0.0/16").unwrap();
        assert_eq!(one.v4.to_string(), "10.42.0.0/16");
        assert_eq!(one.v6, None);
        let two = parse("10.42.1.7/16, fd42:0:0:1::9/64").unwrap();
        assert_eq!(two.v4.to_string(), "10.42.0.0/16", "truncated");
        assert_eq!(two.v6.unwrap().to_string(), "fd42:0:0:1::/64");
        assert_eq!(two.to_string(), "10.42.0.0/16,fd42:0:0:1::/64");
        assert!(parse("10.42.0.0/16,fd42::/120").is_ok());
    }

    #[test]
    fn pod_cidrs_refuse_what_cannot_work_saying_what_to_give() {
        let err = |text: &str| parse(text).unwrap_err();
        assert!(
            err("fd42::/64").contains("IPv6-only"),
            "{}",
            err("fd42::/64")
        );
        assert!(err("fd42::/64,10.42.0.0/16").contains("IPv4 CIDR comes first"));
        assert!(err("10.1.0.0/16,10.2.0.0/16").contains("two CIDRs of one family"));
        assert!(err("10.1.0.0/16,fd1::/64,fd2::/64").contains("an IPv4 and an IPv6 CIDR"));
        assert!(err("10.1.0.0/16,").contains("an IPv4 and an IPv6 CIDR"));
        assert!(err("10.1.0.0").contains("is not a CIDR"));
        assert!(err("10.1.0.0/31").contains("leaves no address"));
        let large = err("10.42.0.0/16,fd42::/56");
        assert!(large.contains("give a /64 of it (fd42::/64)"), "{large}");
        assert!(err("10.42.0.0/16,fd42::/121").contains("too few"));
        assert!(err("10.42.0.0/16,fe80::/64").contains("unique local"));
        assert!(err("10.42.0.0/16,ff02::/64").contains("unique local"));
    }

    #[test]
    fn the_gateways_are_the_first_addresses() {
        let config = Config {
            pod_cidr_v6: Some("fd42::/64".parse().unwrap()),
            ..Config::default()
        };
        assert_eq!(config.gateway(), Ipv4Addr::new(10, 42, 0, 1));
        assert_eq!(config.gateway_v6(), Some("fd42::1".parse().unwrap()));
        assert_eq!(Config::default().gateway_v6(), None);
    }
}
