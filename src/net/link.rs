//! Links, addresses and routes, through rtnetlink (the `rtnetlink` crate, as podman's
//! netavark uses it): the node's bridge, and each pod's veth pair — the pod's end made
//! directly inside the pod's network namespace as `eth0`, the node's end attached to the
//! bridge in hairpin mode (a pod reaching itself through a Service gets its packets
//! back). Inside a pod's namespace the work is done by a thread that entered it, with a
//! netlink socket of its own opened there.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::Path;

use futures_util::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteType};
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

    /// The bridge `name` with the address `gateway` in `cidr`, made and brought up if
    /// missing. Returns its index.
    pub async fn ensure_bridge(
        &self,
        name: &str,
        gateway: Ipv4Addr,
        cidr: Ipv4Net,
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
        if !self.has_address(index, gateway).await? {
            match self
                .handle
                .address()
                .add(index, IpAddr::V4(gateway), cidr.prefix_len())
                .execute()
                .await
            {
                Ok(()) => {}
                Err(e) if code(&e) == EEXIST => {}
                Err(e) => {
                    return Err(netlink(format!(
                        "give the bridge {name} the address {gateway}"
                    ))(e));
                }
            }
        }
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(netlink(format!("bring the bridge {name} up")))?;
        Ok(index)
    }

    async fn has_address(&self, index: u32, ip: Ipv4Addr) -> Result<bool, Error> {
        let mut addrs = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute();
        while let Some(a) = addrs.try_next().await.map_err(netlink("list addresses"))? {
            let has = a.attributes.iter().any(|attr| {
                matches!(attr, AddressAttribute::Local(IpAddr::V4(v)) | AddressAttribute::Address(IpAddr::V4(v)) if *v == ip)
            });
            if has {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The routes of the main table that overlap `cidr` and leave through another link
    /// than `own` (the bridge): `(destination, link index)`. The default route overlaps
    /// everything and is not counted.
    pub async fn overlapping_routes(
        &self,
        cidr: Ipv4Net,
        own: Option<u32>,
    ) -> Result<Vec<(Ipv4Net, u32)>, Error> {
        let mut routes = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute();
        let mut out = Vec::new();
        while let Some(r) = routes.try_next().await.map_err(netlink("list routes"))? {
            let h = &r.header;
            if h.table != RouteHeader::RT_TABLE_MAIN
                || h.kind != RouteType::Unicast
                || h.destination_prefix_length == 0
            {
                continue;
            }
            let mut dst = None;
            let mut oif = 0;
            for a in &r.attributes {
                match a {
                    RouteAttribute::Destination(RouteAddress::Inet(ip)) => dst = Some(*ip),
                    RouteAttribute::Oif(i) => oif = *i,
                    _ => {}
                }
            }
            let Some(dst) = dst else { continue };
            let Ok(net) = Ipv4Net::new(dst, h.destination_prefix_length) else {
                continue;
            };
            let overlaps = net.contains(&cidr.network()) || cidr.contains(&net.network());
            if overlaps && Some(oif) != own {
                out.push((net, oif));
            }
        }
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
    /// `ip` in `cidr`, loopback up and the default route through `gateway`. Nothing is
    /// done when the namespace already has its `eth0` with `ip` and `host_name` exists.
    pub async fn attach(
        &self,
        bridge: u32,
        host_name: &str,
        netns: &Path,
        ip: Ipv4Addr,
        cidr: Ipv4Net,
        gateway: Ipv4Addr,
    ) -> Result<(), Error> {
        let ns = File::open(netns).map_err(|source| Error::Io {
            context: format!("open the network namespace {}", netns.display()),
            source,
        })?;
        let host = self.link(host_name).await?;
        let wired = in_namespace(&ns, move |links| async move {
            let Some(eth) = links.link(POD_INTERFACE).await? else {
                return Ok(false);
            };
            links.has_address(eth.header.index, ip).await
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
        in_namespace(&ns, move |links| async move {
            links.configure_pod(ip, cidr, gateway).await.map(|()| true)
        })
        .await?;
        Ok(())
    }

    /// Inside a pod's namespace: `eth0` gets `ip`, it and loopback go up, and the
    /// default route goes through `gateway`.
    async fn configure_pod(
        &self,
        ip: Ipv4Addr,
        cidr: Ipv4Net,
        gateway: Ipv4Addr,
    ) -> Result<(), Error> {
        let eth = self
            .link(POD_INTERFACE)
            .await?
            .ok_or_else(|| Error::Invalid("the pod's eth0 is missing".into()))?
            .header
            .index;
        if !self.has_address(eth, ip).await? {
            self.handle
                .address()
                .add(eth, IpAddr::V4(ip), cidr.prefix_len())
                .execute()
                .await
                .map_err(netlink(format!("give eth0 the address {ip}")))?;
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
        let route = RouteMessageBuilder::<Ipv4Addr>::new()
            .gateway(gateway)
            .output_interface(eth)
            .build();
        match self.handle.route().add(route).execute().await {
            Ok(()) => Ok(()),
            Err(e) if code(&e) == EEXIST => Ok(()),
            Err(e) => Err(netlink(format!("route through {gateway}"))(e)),
        }
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

/// Sets a sysctl of this network namespace (`net/ipv4/ip_forward`, ...).
pub fn sysctl(key: &str, value: &str) -> Result<(), Error> {
    let path = Path::new("/proc/sys").join(key);
    std::fs::write(&path, value).map_err(|source| Error::Io {
        context: format!("set {} to {value}", key.replace('/', ".")),
        source,
    })
}
