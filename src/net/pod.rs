//! Pods' networks: the node's bridge (made at start, with the kernel settings a bridged
//! pod network needs), and for each pod that does not use the host's network an address
//! from the pod CIDR and a veth pair from its sandbox's network namespace to the bridge.
//! What a pod had goes with it: its veth (the pod's end with it) and its address.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::Config;
use super::ipam::{self, Ipam};
use super::link::{self, Links};

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
        cidr: ipnet::Ipv4Net,
        route: ipnet::Ipv4Net,
        link: String,
    },
}

/// The node's pod network.
pub struct PodNetwork {
    config: Config,
    links: Links,
    bridge: u32,
    ipam: Ipam,
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
    /// makes the bridge with the gateway address, turns on IPv4 forwarding and the
    /// netfilter hooks for bridged traffic (so Services' rules see pod-to-pod packets),
    /// and opens the address records in `data_dir/net/ipam`.
    pub async fn open(config: Config, data_dir: &Path) -> Result<PodNetwork, Error> {
        let links = Links::open()?;
        let existing = links.link(&config.bridge).await?.map(|l| l.header.index);
        if let Some((route, index)) = links
            .overlapping_routes(config.pod_cidr, existing)
            .await?
            .into_iter()
            .next()
        {
            return Err(Error::Overlap {
                cidr: config.pod_cidr,
                route,
                link: links.name_of(index).await,
            });
        }
        let gateway = config.gateway();
        let bridge = links
            .ensure_bridge(&config.bridge, gateway, config.pod_cidr)
            .await?;
        // Cluster IPs are routed to the bridge, so this machine's own connections to them
        // reach the Services' rules even without a default route, and nothing of the
        // range is ever sent toward an uplink.
        links.ensure_route(config.service_cidr, bridge).await?;
        link::sysctl("net/ipv4/ip_forward", "1")?;
        if Path::new("/proc/sys/net/bridge").exists() {
            link::sysctl("net/bridge/bridge-nf-call-iptables", "1")?;
        } else {
            tracing::warn!(
                "this kernel has no br_netfilter: a pod reaching another pod on this node through a Service may not get its replies"
            );
        }
        let ipam = Ipam::open(&ipam_dir(data_dir), config.pod_cidr, gateway)?;
        tracing::info!(bridge = %config.bridge, cidr = %config.pod_cidr, %gateway, "pod network ready");
        Ok(PodNetwork {
            config,
            links,
            bridge,
            ipam,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The address of pod `uid`, if it has one.
    pub fn address_of(&self, pod_uid: &str) -> Option<Ipv4Addr> {
        self.ipam.get(pod_uid)
    }

    /// Wires the network namespace that the process `holder` (the pod's sandbox) is in
    /// to the bridge; returns the pod's address. Done again, it does nothing.
    pub async fn attach(&self, pod_uid: &str, holder: i32) -> Result<Ipv4Addr, Error> {
        let ip = self.ipam.allocate(pod_uid)?;
        let netns = PathBuf::from(format!("/proc/{holder}/ns/net"));
        let wired = self
            .links
            .attach(
                self.bridge,
                &host_veth(pod_uid),
                &netns,
                ip,
                self.config.pod_cidr,
                self.config.gateway(),
            )
            .await;
        if let Err(e) = wired {
            // Nothing half-made stays: the next attempt starts afresh.
            let _ = self.links.delete(&host_veth(pod_uid)).await;
            return Err(e.into());
        }
        Ok(ip)
    }

    /// Removes what pod `uid` had: its veth and its address.
    pub async fn detach(&self, pod_uid: &str) -> Result<(), Error> {
        self.links.delete(&host_veth(pod_uid)).await?;
        if let Some(ip) = self.ipam.release(pod_uid) {
            tracing::debug!(pod = pod_uid, %ip, "pod address freed");
        }
        Ok(())
    }

    /// Removes what pods not in `live` had (pods that went while berth was down).
    pub async fn retain(&self, live: &HashSet<String>) {
        for uid in self.ipam.holders() {
            if !live.contains(&uid) {
                if let Err(e) = self.detach(&uid).await {
                    tracing::warn!(pod = %uid, error = %e, "could not remove a gone pod's network");
                }
            }
        }
    }
}

/// Where a node keeps its pods' address records.
pub fn ipam_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("net").join("ipam")
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
}
