//! Links, addresses and routes, through rtnetlink (the `rtnetlink` crate, as podman's
//! netavark uses it): the node's bridge, and each pod's veth pair — the pod's end made
//! directly inside the pod's network namespace as `eth0`, the node's end attached to the
//! bridge in hairpin mode (a pod reaching itself through a Service gets its packets
//! back). Inside a pod's namespace the work is done by a thread that entered it, with a
//! netlink socket of its own opened there.
//!
//! IPv6 addresses (of a dual-stack network) are added without duplicate address
//! detection (`IFA_F_NODAD`): the addresses are berth's to hand out, unique by its
//! records, and a tentative address could not be used for the second or so that
//! detection takes.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::Path;

use futures_util::TryStreamExt;
use ipnet::{IpNet, Ipv4Net};
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags};
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteType,
};
use rtnetlink::{
    Handle, LinkBridge, LinkBridgePort, LinkMessageBuilder, LinkUnspec, LinkVeth,
    RouteMessageBuilder,
};

/// The name of a pod's interface inside its namespace.
pub const POD_INTERFACE: &str = "eth0";
/// The MTU of the bridge and of every pod's veth.
const MTU: u32 = 1500;
/// `ENODEV`, `ENOENT` and `EEXIST`, as netlink reports them.
const ENODEV: i32 = 19;
const ENOENT: i32 = 2;
const EEXIST: i32 = 17;

/// Why a netlink step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Netlink {
        context: String,
        source: rtnetlink::Error,
    },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("{0}")]
    Invalid(String),
}

fn netlink(context: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> Error {
    let context = context.into();
    move |source| Error::Netlink { context, source }
}

fn code(e: &rtnetlink::Error) -> i32 {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.raw_code().abs(),
        _ => 0,
    }
}

/// An address of a pod's `eth0`: the address, its range's prefix length, and the
/// gateway (the bridge's address of the family) its default route goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodAddress {
    pub ip: IpAddr,
    pub prefix: u8,
    pub gateway: IpAddr,
}

/// A netlink connection in the namespace it was opened in.
#[derive(Clone)]
pub struct Links {
    handle: Handle,
}

impl Links {
    /// A connection in this thread's network namespace, served by a task of the current
    /// tokio runtime.
    pub fn open() -> Result<Links, Error> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|source| Error::Io {
            context: "open a netlink socket".into(),
            source,
        })?;
        tokio::spawn(connection);
        Ok(Links { handle })
    }

    /// The link named `name`, if there is one.
    pub async fn link(&self, name: &str) -> Result<Option<LinkMessage>, Error> {
        let found = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute()
            .try_next()
            .await;
        match found {
            Ok(link) => Ok(link),
            Err(e) if code(&e) == ENODEV => Ok(None),
            Err(e) => Err(netlink(format!("look up link {name}"))(e)),
        }
    }

    /// The bridge `name` with `addresses` (each with its prefix length), made and
    /// brought up if missing. Returns its index.
    pub async fn ensure_bridge(
        &self,
        name: &str,
        addresses: &[(IpAddr, u8)],
    ) -> Result<u32, Error> {
        let link = match self.link(name).await? {
            Some(link) => link,
            None => {
                let add = self
                    .handle
                    .link()
                    .add(LinkBridge::new(name).mtu(MTU).build())
                    .execute()
                    .await;
                match add {
                    Ok(()) => {}
                    // Made meanwhile by another berth starting: take it.
                    Err(e) if code(&e) == EEXIST => {}
                    Err(e) => return Err(netlink(format!("create the bridge {name}"))(e)),
                }
                self.link(name).await?.ok_or_else(|| {
                    Error::Invalid(format!("the bridge {name} vanished as it was made"))
                })?
            }
        };
        let index = link.header.index;
        let is_bridge = link.attributes.iter().any(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos.iter().any(|i| {
                matches!(i, rtnetlink::packet_route::link::LinkInfo::Kind(k)
                    if *k == rtnetlink::packet_route::link::InfoKind::Bridge)
            }),
            _ => false,
        });
        if !is_bridge {
            return Err(Error::Invalid(format!(
                "a link named {name} exists and is not a bridge: remove it, or run berth with another bridge"
            )));
        }
        for &(ip, prefix) in addresses {
            if ip.is_ipv6() {
                enable_ipv6(name)?;
            }
            self.ensure_address(index, ip, prefix, &format!("the bridge {name}"))
                .await?;
        }
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(netlink(format!("bring the bridge {name} up")))?;
        Ok(index)
    }

    /// Gives the link `index` (`what`, for messages) the address `ip`/`prefix` unless it
    /// has it; an IPv6 address without duplicate address detection.
    async fn ensure_address(
        &self,
        index: u32,
        ip: IpAddr,
        prefix: u8,
        what: &str,
    ) -> Result<(), Error> {
        if self.has_address(index, ip).await? {
            return Ok(());
        }
        let mut add = self.handle.address().add(index, ip, prefix);
        if ip.is_ipv6() {
            let message = add.message_mut();
            message.header.flags = AddressHeaderFlags::Nodad;
            message
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        match add.execute().await {
            Ok(()) => Ok(()),
            Err(e) if code(&e) == EEXIST => Ok(()),
            Err(e) => Err(netlink(format!("give {what} the address {ip}/{prefix}"))(e)),
        }
    }

    async fn has_address(&self, index: u32, ip: IpAddr) -> Result<bool, Error> {
        let mut addrs = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute();
        while let Some(a) = addrs.try_next().await.map_err(netlink("list addresses"))? {
            let has = a.attributes.iter().any(|attr| {
                matches!(attr, AddressAttribute::Local(v) | AddressAttribute::Address(v) if *v == ip)
            });
            if has {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The routes of the main table of `cidr`'s family that overlap `cidr` and leave
    /// through another link than `own` (the bridge): `(destination, link index)`. The
    /// default route overlaps everything and is not counted.
    pub async fn overlapping_routes(
        &self,
        cidr: IpNet,
        own: Option<u32>,
    ) -> Result<Vec<(IpNet, u32)>, Error> {
        let mut out = Vec::new();
        for r in self.routes(cidr.network().is_ipv6()).await? {
            let h = &r.header;
            if h.table != RouteHeader::RT_TABLE_MAIN
                || h.kind != RouteType::Unicast
                || h.destination_prefix_length == 0
            {
                continue;
            }
            let mut dst = None;
            for a in &r.attributes {
                match a {
                    RouteAttribute::Destination(RouteAddress::Inet(ip)) => {
                        dst = Some(IpAddr::V4(*ip));
                    }
                    RouteAttribute::Destination(RouteAddress::Inet6(ip)) => {
                        dst = Some(IpAddr::V6(*ip));
                    }
                    _ => {}
                }
            }
            let Some(dst) = dst else { continue };
            let Ok(net) = IpNet::new(dst, h.destination_prefix_length) else {
                continue;
            };
            let oif = oif_of(&r);
            if overlaps(net, cidr) && Some(oif) != own {
                out.push((net, oif));
            }
        }
        Ok(out)
    }

    /// The routes of this namespace of one family (IPv6 when `v6`).
    async fn routes(&self, v6: bool) -> Result<Vec<RouteMessage>, Error> {
        let query = if v6 {
            RouteMessageBuilder::<Ipv6Addr>::new().build()
        } else {
            RouteMessageBuilder::<Ipv4Addr>::new().build()
        };
        self.handle
            .route()
            .get(query)
            .execute()
            .try_collect()
            .await
            .map_err(netlink("list routes"))
    }

    /// The links that have IPv6 routes learned from router advertisements (a host whose
    /// IPv6 default route comes from its router), by index.
    pub async fn links_with_ra_routes(&self) -> Result<Vec<u32>, Error> {
        let mut out: Vec<u32> = self
            .routes(true)
            .await?
            .iter()
            .filter(|r| r.header.protocol == RouteProtocol::Ra)
            .map(oif_of)
            .filter(|i| *i != 0)
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// A route of `cidr` through the link `index` (scope link), added unless there.
    pub async fn ensure_route(&self, cidr: Ipv4Net, index: u32) -> Result<(), Error> {
        let route = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(cidr.network(), cidr.prefix_len())
            .output_interface(index)
            .scope(rtnetlink::packet_route::route::RouteScope::Link)
            .build();
        match self.handle.route().add(route).execute().await {
            Ok(()) => Ok(()),
            Err(e) if code(&e) == EEXIST => Ok(()),
            Err(e) => Err(netlink(format!("route {cidr} to the bridge"))(e)),
        }
    }

    /// The name of the link with index `index` (for messages).
    pub async fn name_of(&self, index: u32) -> String {
        let found = self
            .handle
            .link()
            .get()
            .match_index(index)
            .execute()
            .try_next()
            .await;
        found
            .ok()
            .flatten()
            .and_then(|l| {
                l.attributes.into_iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n),
                    _ => None,
                })
            })
            .unwrap_or_else(|| format!("#{index}"))
    }

    /// Wires the network namespace `netns` (a `/proc/PID/ns/net` path) to the bridge
    /// `bridge`: a veth pair, `host_name` on the bridge, `eth0` in the namespace with
    /// `addresses`, loopback up and a default route of each address's family through
    /// its gateway. Nothing is done when the namespace already has its `eth0` with all
    /// of `addresses` and `host_name` exists.
    pub async fn attach(
        &self,
        bridge: u32,
        host_name: &str,
        netns: &Path,
        addresses: &[PodAddress],
    ) -> Result<(), Error> {
        let ns = File::open(netns).map_err(|source| Error::Io {
            context: format!("open the network namespace {}", netns.display()),
            source,
        })?;
        let host = self.link(host_name).await?;
        let ips: Vec<IpAddr> = addresses.iter().map(|a| a.ip).collect();
        let wired = in_namespace(&ns, move |links| async move {
            let Some(eth) = links.link(POD_INTERFACE).await? else {
                return Ok(false);
            };
            for ip in ips {
                if !links.has_address(eth.header.index, ip).await? {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await?;
        if wired && host.is_some() {
            return Ok(());
        }
        if host.is_some() {
            // Left from another namespace (a sandbox made again): it goes.
            self.delete(host_name).await?;
        }
        let peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name(POD_INTERFACE.to_string())
            .mtu(MTU)
            .setns_by_fd(ns.as_raw_fd())
            .build();
        let mut veth = LinkVeth::new(host_name, POD_INTERFACE).mtu(MTU);
        veth = veth.set_info_data(rtnetlink::packet_route::link::InfoData::Veth(
            rtnetlink::packet_route::link::InfoVeth::Peer(peer),
        ));
        self.handle
            .link()
            .add(veth.build())
            .execute()
            .await
            .map_err(netlink(format!("create the veth pair {host_name}")))?;
        let index = self
            .link(host_name)
            .await?
            .ok_or_else(|| Error::Invalid(format!("the veth {host_name} vanished as it was made")))?
            .header
            .index;
        self.handle
            .link()
            .set(
                LinkUnspec::new_with_index(index)
                    .controller(bridge)
                    .up()
                    .build(),
            )
            .execute()
            .await
            .map_err(netlink(format!("attach {host_name} to the bridge")))?;
        self.handle
            .link()
            .set_port(LinkBridgePort::new(index).hairpin(true).build())
            .execute()
            .await
            .map_err(netlink(format!("set hairpin mode on {host_name}")))?;
        let addresses = addresses.to_vec();
        in_namespace(&ns, move |links| async move {
            links.configure_pod(&addresses).await.map(|()| true)
        })
        .await?;
        Ok(())
    }

    /// Inside a pod's namespace: `eth0` gets `addresses`, it and loopback go up, and the
    /// default route of each family goes through its gateway.
    async fn configure_pod(&self, addresses: &[PodAddress]) -> Result<(), Error> {
        let eth = self
            .link(POD_INTERFACE)
            .await?
            .ok_or_else(|| Error::Invalid("the pod's eth0 is missing".into()))?
            .header
            .index;
        if addresses.iter().any(|a| a.ip.is_ipv6()) {
            enable_ipv6(POD_INTERFACE)?;
        }
        for a in addresses {
            self.ensure_address(eth, a.ip, a.prefix, "eth0").await?;
        }
        for name in ["lo", POD_INTERFACE] {
            let index = self
                .link(name)
                .await?
                .ok_or_else(|| Error::Invalid(format!("the pod has no {name}")))?
                .header
                .index;
            self.handle
                .link()
                .set(LinkUnspec::new_with_index(index).up().build())
                .execute()
                .await
                .map_err(netlink(format!("bring {name} up")))?;
        }
        for a in addresses {
            let route = match a.gateway {
                IpAddr::V4(gateway) => RouteMessageBuilder::<Ipv4Addr>::new()
                    .gateway(gateway)
                    .output_interface(eth)
                    .build(),
                IpAddr::V6(gateway) => RouteMessageBuilder::<Ipv6Addr>::new()
                    .gateway(gateway)
                    .output_interface(eth)
                    .build(),
            };
            match self.handle.route().add(route).execute().await {
                Ok(()) => {}
                Err(e) if code(&e) == EEXIST => {}
                Err(e) => return Err(netlink(format!("route through {}", a.gateway))(e)),
            }
        }
        Ok(())
    }

    /// Deletes the link `name` (and a veth's peer with it); a missing one is no error.
    pub async fn delete(&self, name: &str) -> Result<(), Error> {
        let Some(link) = self.link(name).await? else {
            return Ok(());
        };
        match self.handle.link().del(link.header.index).execute().await {
            Ok(()) => Ok(()),
            Err(e) if code(&e) == ENODEV || code(&e) == ENOENT => Ok(()),
            Err(e) => Err(netlink(format!("delete {name}"))(e)),
        }
    }
}

/// Runs `f` with a netlink connection opened inside the network namespace `ns`, on a
/// thread of its own that entered it (the caller's threads stay where they are).
async fn in_namespace<T, F, Fut>(ns: &File, f: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(Links) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let ns = ns.try_clone().map_err(|source| Error::Io {
        context: "hold the pod's network namespace".into(),
        source,
    })?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("berth-netns".into())
        .spawn(move || {
            let run = || -> Result<T, Error> {
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&ns),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| Error::Io {
                    context: "enter the pod's network namespace".into(),
                    source: e.into(),
                })?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                    .map_err(|source| Error::Io {
                        context: "start a runtime in the pod's namespace".into(),
                        source,
                    })?;
                rt.block_on(async move { f(Links::open()?).await })
            };
            let _ = tx.send(run());
        })
        .map_err(|source| Error::Io {
            context: "start a thread for the pod's namespace".into(),
            source,
        })?;
    rx.await
        .map_err(|_| Error::Invalid("the pod namespace's thread ended early".into()))?
}

/// The link a route leaves through (0: none named).
fn oif_of(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        })
        .unwrap_or(0)
}

/// Whether two ranges share an address.
pub fn overlaps(a: IpNet, b: IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Whether this kernel has IPv6 (not turned off with `ipv6.disable=1`).
pub fn kernel_has_ipv6() -> bool {
    Path::new("/proc/sys/net/ipv6").exists()
}

/// Turns IPv6 on for the link `name` of the calling thread's network namespace if it
/// was off (`disable_ipv6`, which a namespace takes from its defaults), so it can take
/// IPv6 addresses.
pub fn enable_ipv6(name: &str) -> Result<(), Error> {
    let key = format!("net/ipv6/conf/{name}/disable_ipv6");
    let path = Path::new("/proc/sys").join(&key);
    match std::fs::read_to_string(&path) {
        Ok(v) if v.trim() == "1" => sysctl(&key, "0"),
        Ok(_) => Ok(()),
        Err(source) => Err(Error::Io {
            context: format!(
                "read {}: this kernel may have IPv6 turned off; drop the IPv6 CIDR of --pod-cidr",
                key.replace('/', ".")
            ),
            source,
        }),
    }
}

/// Sets a sysctl of this network namespace (`net/ipv4/ip_forward`, ...).
pub fn sysctl(key: &str, value: &str) -> Result<(), Error> {
    let path = Path::new("/proc/sys").join(key);
    std::fs::write(&path, value).map_err(|source| Error::Io {
        context: format!("set {} to {value}", key.replace('/', ".")),
        source,
    })
}
