//! Pods' networks: the node's bridge (made at start, with the kernel settings a bridged
//! pod network needs), and for each pod that does not use the host's network an address
//! from the pod CIDR (and one of the IPv6 pod CIDR on a dual-stack network) and a veth
//! pair from its sandbox's network namespace to the bridge. What a pod had goes with
//! it: its veth (the pod's end with it) and its addresses.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use super::Config;
use super::ipam::{self, Ipam};
use super::link::{self, Links, PodAddress};
use super::proxy::Nft;

/// Why the pod network could not be set up or a pod wired to it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Link(#[from] link::Error),
    #[error(transparent)]
    Ipam(#[from] ipam::Error),
    #[error(
        "the pod CIDR {cidr} overlaps this machine's route to {route} via {link}: pods could not reach those addresses; choose another range with --pod-cidr"
    )]
    Overlap {
        cidr: IpNet,
        route: IpNet,
        link: String,
    },
    #[error(
        "the pod CIDR {0} is IPv6, and this kernel has IPv6 turned off (ipv6.disable=1): turn it on, or give --pod-cidr only an IPv4 CIDR"
    )]
    NoIpv6(ipnet::Ipv6Net),
    #[error("remove the table {table}: {source}")]
    Table {
        table: String,
        source: super::proxy::Error,
    },
    #[error("remove {path}: {source}")]
    Records {
        path: String,
        source: std::io::Error,
    },
}

/// The node's pod network.
pub struct PodNetwork {
    config: Config,
    links: Links,
    bridge: u32,
    ipam: Ipam<Ipv4Addr>,
    /// The IPv6 addresses of a dual-stack network.
    ipam6: Option<Ipam<Ipv6Addr>>,
}

impl std::fmt::Debug for PodNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodNetwork")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The name of the node's end of a pod's veth: `veth` and the start of its uid (at most
/// 15 bytes, as the kernel allows).
pub fn host_veth(pod_uid: &str) -> String {
    let id: String = pod_uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(11)
        .collect();
    format!("veth{id}")
}

impl PodNetwork {
    /// Sets up the node's side: refuses a pod CIDR that overlaps a route of this machine,
    /// makes the bridge with the gateway address (and the IPv6 one of a dual-stack
    /// network), turns on forwarding and the netfilter hooks for bridged traffic (so
    /// Services' rules see pod-to-pod packets), writes the IPv6 rules of a dual-stack
    /// network ([`ipv6_rules`]), and opens the address records in `data_dir/net/ipam`
    /// (and `ipam6`).
    pub async fn open(config: Config, data_dir: &Path) -> Result<PodNetwork, Error> {
        let links = Links::open()?;
        if let Some(v6) = config.pod_cidr_v6
            && !link::kernel_has_ipv6()
        {
            return Err(Error::NoIpv6(v6));
        }
        let existing = links.link(&config.bridge).await?.map(|l| l.header.index);
        let cidrs = std::iter::once(IpNet::from(config.pod_cidr))
            .chain(config.pod_cidr_v6.map(IpNet::from));
        for cidr in cidrs {
            if let Some((route, index)) = links
                .overlapping_routes(cidr, existing)
                .await?
                .into_iter()
                .next()
            {
                return Err(Error::Overlap {
                    cidr,
                    route,
                    link: links.name_of(index).await,
                });
            }
        }
        let gateway = config.gateway();
        let mut addresses = vec![(IpAddr::V4(gateway), config.pod_cidr.prefix_len())];
        if let (Some(v6), Some(gateway6)) = (config.pod_cidr_v6, config.gateway_v6()) {
            addresses.push((IpAddr::V6(gateway6), v6.prefix_len()));
        }
        let bridge = links.ensure_bridge(&config.bridge, &addresses).await?;
        // Cluster IPs are routed to the bridge, so this machine's own connections to them
        // reach the Services' rules even without a default route, and nothing of the
        // range is ever sent toward an uplink.
        links.ensure_route(config.service_cidr, bridge).await?;
        link::sysctl("net/ipv4/ip_forward", "1")?;
        if config.pod_cidr_v6.is_some() {
            keep_router_advertisements(&links).await;
            link::sysctl("net/ipv6/conf/all/forwarding", "1")?;
        }
        if Path::new("/proc/sys/net/bridge").exists() {
            link::sysctl("net/bridge/bridge-nf-call-iptables", "1")?;
        } else {
            tracing::warn!(
                "this kernel has no br_netfilter: a pod reaching another pod on this node through a Service may not get its replies"
            );
        }
        let nft = Nft::new(vec!["nft".to_string()]);
        if config.pod_cidr_v6.is_some() {
            if let Err(e) = nft.run(&ipv6_rules(&config)).await {
                tracing::warn!(error = %e, "pods' IPv6 traffic to other networks is not masqueraded, nor kept from leaving through an uplink: the IPv6 rules could not be written");
            }
        } else if ipam6_dir(data_dir).exists() {
            // Dual-stack before: its rules go (its records stay, for when it comes back).
            if let Err(e) = remove_ipv6_rules(&["nft".to_string()], &config.table).await {
                tracing::warn!(error = %e, "could not remove the IPv6 rules of an earlier dual-stack pod network");
            }
        }
        let ipam = Ipam::open(&ipam_dir(data_dir), config.pod_cidr, gateway)?;
        let ipam6 = match (config.pod_cidr_v6, config.gateway_v6()) {
            (Some(v6), Some(gateway6)) => Some(Ipam::open(&ipam6_dir(data_dir), v6, gateway6)?),
            _ => None,
        };
        tracing::info!(
            bridge = %config.bridge,
            cidr = %config.pod_cidr,
            cidr_v6 = ?config.pod_cidr_v6,
            %gateway,
            "pod network ready"
        );
        Ok(PodNetwork {
            config,
            links,
            bridge,
            ipam,
            ipam6,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The IPv4 address of pod `uid` (its primary one), if it has one.
    pub fn address_of(&self, pod_uid: &str) -> Option<Ipv4Addr> {
        self.ipam.get(pod_uid)
    }

    /// Every address of pod `uid`, IPv4 first (as `status.podIPs` lists them); none
    /// until it has its IPv4 one.
    pub fn addresses_of(&self, pod_uid: &str) -> Vec<IpAddr> {
        let Some(v4) = self.ipam.get(pod_uid) else {
            return Vec::new();
        };
        let v6 = self.ipam6.as_ref().and_then(|i| i.get(pod_uid));
        std::iter::once(IpAddr::V4(v4))
            .chain(v6.map(IpAddr::V6))
            .collect()
    }

    /// Wires the network namespace that the process `holder` (the pod's sandbox) is in
    /// to the bridge; returns the pod's addresses, IPv4 first. Done again, it does
    /// nothing.
    pub async fn attach(&self, pod_uid: &str, holder: i32) -> Result<Vec<IpAddr>, Error> {
        let ip = self.ipam.allocate(pod_uid)?;
        let mut addresses = vec![PodAddress {
            ip: IpAddr::V4(ip),
            prefix: self.config.pod_cidr.prefix_len(),
            gateway: IpAddr::V4(self.config.gateway()),
        }];
        if let (Some(ipam6), Some(v6), Some(gateway6)) = (
            &self.ipam6,
            self.config.pod_cidr_v6,
            self.config.gateway_v6(),
        ) {
            addresses.push(PodAddress {
                ip: IpAddr::V6(ipam6.allocate(pod_uid)?),
                prefix: v6.prefix_len(),
                gateway: IpAddr::V6(gateway6),
            });
        }
        let netns = PathBuf::from(format!("/proc/{holder}/ns/net"));
        let wired = self
            .links
            .attach(self.bridge, &host_veth(pod_uid), &netns, &addresses)
            .await;
        if let Err(e) = wired {
            // Nothing half-made stays: the next attempt starts afresh.
            let _ = self.links.delete(&host_veth(pod_uid)).await;
            return Err(e.into());
        }
        Ok(addresses.iter().map(|a| a.ip).collect())
    }

    /// Removes what pod `uid` had: its veth and its addresses.
    pub async fn detach(&self, pod_uid: &str) -> Result<(), Error> {
        self.links.delete(&host_veth(pod_uid)).await?;
        if let Some(ip) = self.ipam.release(pod_uid) {
            tracing::debug!(pod = pod_uid, %ip, "pod address freed");
        }
        if let Some(ip) = self.ipam6.as_ref().and_then(|i| i.release(pod_uid)) {
            tracing::debug!(pod = pod_uid, %ip, "pod address freed");
        }
        Ok(())
    }

    /// Removes what pods not in `live` had (pods that went while berth was down).
    pub async fn retain(&self, live: &HashSet<String>) {
        let mut holders: HashSet<String> = self.ipam.holders().into_iter().collect();
        holders.extend(self.ipam6.iter().flat_map(Ipam::holders));
        for uid in holders {
            if !live.contains(&uid)
                && let Err(e) = self.detach(&uid).await
            {
                tracing::warn!(pod = %uid, error = %e, "could not remove a gone pod's network");
            }
        }
    }
}

/// `berth node reset`'s part: once a data directory's pods are gone, the pod network
/// they had goes too — berth's nftables tables (`ip` and `ip6`), the bridge (with the
/// routes through it) and the address records. Only a data directory that set a pod
/// network up (it has `DATA/net`) removes anything; the answer says whether it did.
/// Runs in the caller's network namespace, the one the node served in.
pub async fn remove(config: &Config, data_dir: &Path) -> Result<bool, Error> {
    let records = data_dir.join("net");
    if !records.exists() {
        return Ok(false);
    }
    let nft = ["nft".to_string()];
    let table = |source| Error::Table {
        table: config.table.clone(),
        source,
    };
    for removed in [
        super::proxy::remove(&nft, &config.table).await,
        remove_ipv6_rules(&nft, &config.table).await,
    ] {
        match removed {
            // Without nft no table was ever made.
            Ok(()) | Err(super::proxy::Error::Spawn { .. }) => {}
            Err(e) => return Err(table(e)),
        }
    }
    Links::open()?.delete(&config.bridge).await?;
    std::fs::remove_dir_all(&records).map_err(|source| Error::Records {
        path: records.display().to_string(),
        source,
    })?;
    Ok(true)
}

/// Where a node keeps its pods' IPv4 address records.
pub fn ipam_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("net").join("ipam")
}

/// Where a node keeps its pods' IPv6 address records (of a dual-stack network).
pub fn ipam6_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("net").join("ipam6")
}

/// The IPv6 rules of a dual-stack pod network, in a table of the pod network's own
/// (family `ip6`, named as the proxy's `ip` table), written whole in one transaction
/// when the network opens and left in place when berth stops (running pods keep their
/// traffic), as the proxy's table is: pods reach other networks masqueraded, and no
/// packet for a pod address leaves through another link than the bridge, as the
/// proxy's table has it for IPv4 pod addresses.
pub fn ipv6_rules(config: &Config) -> Vec<String> {
    let Some(pods) = config.pod_cidr_v6 else {
        return Vec::new();
    };
    let t = format!("ip6 {}", config.table);
    let bridge = &config.bridge;
    vec![
        format!("add table {t}"),
        format!("delete table {t}"),
        format!("add table {t}"),
        format!(
            "add chain {t} nat-postrouting {{ type nat hook postrouting priority 100; policy accept; }}"
        ),
        format!(
            "add chain {t} filter-postrouting {{ type filter hook postrouting priority 100; policy accept; }}"
        ),
        format!(
            "add rule {t} nat-postrouting ip6 saddr {pods} ip6 daddr != {pods} oifname != \"{bridge}\" masquerade"
        ),
        format!("add rule {t} filter-postrouting ip6 daddr {pods} oifname != \"{bridge}\" drop"),
    ]
}

/// Deletes the pod network's IPv6 table `ip6 <table>` (`nft` run through the command
/// `nft`, as [`super::proxy::remove`] deletes the `ip` one); a table that is not there
/// is no error.
pub async fn remove_ipv6_rules(nft: &[String], table: &str) -> Result<(), super::proxy::Error> {
    match Nft::new(nft.to_vec())
        .run(&[format!("delete table ip6 {table}")])
        .await
    {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// With IPv6 forwarding on, the kernel ignores router advertisements on a link whose
/// `accept_ra` is 1, so a machine whose IPv6 default route its router advertises would
/// lose that route when it expires. Such links (those with routes learned from
/// advertisements) get `accept_ra` 2, which takes them even when forwarding.
async fn keep_router_advertisements(links: &Links) {
    let forwarding = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/forwarding");
    if forwarding.is_ok_and(|v| v.trim() == "1") {
        return;
    }
    let indexes = match links.links_with_ra_routes().await {
        Ok(indexes) => indexes,
        Err(e) => {
            tracing::warn!(error = %e, "could not list IPv6 routes: if this machine's IPv6 default route comes from router advertisements, set accept_ra to 2 on its link");
            return;
        }
    };
    for index in indexes {
        let name = links.name_of(index).await;
        let key = format!("net/ipv6/conf/{name}/accept_ra");
        let now = std::fs::read_to_string(Path::new("/proc/sys").join(&key));
        if now.is_ok_and(|v| v.trim() == "1") {
            match link::sysctl(&key, "2") {
                Ok(()) => {
                    tracing::info!(link = %name, "accept_ra set to 2: this machine keeps the IPv6 routes its router advertises now that it forwards IPv6")
                }
                Err(e) => {
                    tracing::warn!(link = %name, error = %e, "IPv6 forwarding is on, and this link's routes from router advertisements will expire: set its accept_ra to 2")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_veth_name_fits_the_kernels_limit() {
        let name = host_veth("0b6f3c1e-9a2d-4c1b-8f00-123456789abc");
        assert_eq!(name, "veth0b6f3c1e9a2");
        assert!(name.len() <= 15);
    }

    #[test]
    fn ipv6_rules_masquerade_egress_and_keep_pod_addresses_on_the_bridge() {
        assert!(ipv6_rules(&Config::default()).is_empty());
        let config = Config {
            pod_cidr_v6: Some("fd42::/64".parse().unwrap()),
            ..Config::default()
        };
        let rules = ipv6_rules(&config);
        // Written whole: whatever an earlier run left is replaced in one transaction.
        assert_eq!(
            rules[..3],
            [
                "add table ip6 berth",
                "delete table ip6 berth",
                "add table ip6 berth"
            ]
        );
        assert!(rules.contains(&"add rule ip6 berth nat-postrouting ip6 saddr fd42::/64 ip6 daddr != fd42::/64 oifname != \"berth0\" masquerade".to_string()), "{rules:#?}");
        assert!(rules.contains(&"add rule ip6 berth filter-postrouting ip6 daddr fd42::/64 oifname != \"berth0\" drop".to_string()), "{rules:#?}");
    }
}
