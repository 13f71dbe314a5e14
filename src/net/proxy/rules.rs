//! The nftables objects one Service asks for ([`Fragment`]), made from its ports, and
//! the table's fixed part ([`base`]). Pure: [`super::table`] keeps what is in the kernel
//! and writes the commands that change it.
//!
//! The layout follows kube-proxy's nftables mode, with one change that keeps the table
//! small. kube-proxy gives every Service port a chain and every endpoint a chain, and
//! picks an endpoint with `numgen random mod N vmap { … }`, an anonymous map per
//! Service; the kernel takes about 150 µs for each anonymous map and each chain costs
//! too, so 1,000 Services took over 300 ms to load. Here the Services share a handful
//! of chains, one per kind of destination, protocol and number of endpoints
//! (`internal-tcp-3`, `external-local-tcp-3-1`, …), which pick the endpoint from a named map keyed by the
//! destination and a random number:
//!
//! ```text
//! meta l4proto tcp dnat ip addr . port to ip daddr . th dport . numgen random mod 3 map @endpoints-tcp
//! ```
//!
//! so a Service is only map elements, and a change of its endpoints only changes
//! elements. A Service with `sessionAffinity: ClientIP` keeps kube-proxy's layout (a
//! chain per endpoint, which records the client in an affinity set with a timeout),
//! since the choice must be remembered per endpoint.
//!
//! A pod that reaches itself through its Service (hairpin) is masqueraded, or it would
//! drop the answer as coming from its own address: the `hairpin` set holds each
//! endpoint's `address . address`, looked up on `saddr . daddr` after DNAT.
//!
//! `loadBalancerSourceRanges` is kube-proxy's firewall: the `firewall-check` chain,
//! hooked before DNAT for new connections, looks `address . protocol . port` up in the
//! verdict map `firewall-ips`, which leads each guarded load balancer IP to a chain of
//! its port's (`firewall-…`) that drops sources outside the ranges.
//!
//! Pods' host ports ([`super::hostport`]) are the same kind of objects: the `hostports`
//! chain, ahead of `services` in `nat-prerouting` and `nat-output`, looks local
//! destinations up in the verdict maps `hostport-ips` and `hostport-any`, which lead
//! to a shared chain per protocol (`hostport-tcp`, `hostport-any-tcp`, …) that DNATs
//! through a target map; each host port's pod address is in the `hairpin` set.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use sha2::{Digest, Sha256};

use super::model::{PortName, Proto, ServicePort, Target};

/// The table's maps and sets whose elements Services and pods' host ports own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Map {
    /// `address . protocol . port : verdict`: cluster, external and load balancer IPs.
    ServiceIps,
    /// `protocol . port : verdict`: node ports, on every local address.
    ServiceNodePorts,
    /// `address . protocol . port : verdict`: load balancer IPs whose Service has
    /// `loadBalancerSourceRanges`, to its firewall chain, checked before DNAT.
    FirewallIps,
    /// `address . protocol . port : verdict` checked before the packet is routed: reject
    /// (no endpoints at all) or drop (no endpoints for a `Local` policy).
    NoEndpointServices,
    /// The same for node ports.
    NoEndpointNodePorts,
    /// `address . port . index : endpoint address . port`, one map per protocol.
    Endpoints(Proto),
    /// The same with this node's endpoints, for `externalTrafficPolicy: Local`.
    LocalEndpoints(Proto),
    /// `port . index : endpoint address . port`, for node ports.
    NodePortEndpoints(Proto),
    /// The same with this node's endpoints.
    NodePortLocalEndpoints(Proto),
    /// The set `address . address` of every endpoint (hairpin traffic).
    Hairpin,
    /// `address . protocol . port : verdict`: host ports of pods on one address
    /// (`hostIP`).
    HostPortIps,
    /// `protocol . port : verdict`: host ports of pods on every local address.
    HostPortAny,
    /// `address . port : pod address . port`, one map per protocol.
    HostPortTargets(Proto),
    /// `port : pod address . port`, one map per protocol.
    HostPortAnyTargets(Proto),
}

const PROTOS: [Proto; 3] = [Proto::Tcp, Proto::Udp, Proto::Sctp];

impl Map {
    /// Every map and set of the table.
    pub fn all() -> Vec<Map> {
        let mut out = vec![
            Map::ServiceIps,
            Map::ServiceNodePorts,
            Map::FirewallIps,
            Map::NoEndpointServices,
            Map::NoEndpointNodePorts,
        ];
        for p in PROTOS {
            out.extend([
                Map::Endpoints(p),
                Map::LocalEndpoints(p),
                Map::NodePortEndpoints(p),
                Map::NodePortLocalEndpoints(p),
            ]);
        }
        out.push(Map::Hairpin);
        out.extend([Map::HostPortIps, Map::HostPortAny]);
        for p in PROTOS {
            out.extend([Map::HostPortTargets(p), Map::HostPortAnyTargets(p)]);
        }
        out
    }

    pub fn name(self) -> String {
        match self {
            Map::ServiceIps => "service-ips".into(),
            Map::ServiceNodePorts => "service-nodeports".into(),
            Map::FirewallIps => "firewall-ips".into(),
            Map::NoEndpointServices => "no-endpoint-services".into(),
            Map::NoEndpointNodePorts => "no-endpoint-nodeports".into(),
            Map::Endpoints(p) => format!("endpoints-{}", p.nft()),
            Map::LocalEndpoints(p) => format!("local-endpoints-{}", p.nft()),
            Map::NodePortEndpoints(p) => format!("nodeport-endpoints-{}", p.nft()),
            Map::NodePortLocalEndpoints(p) => format!("nodeport-local-endpoints-{}", p.nft()),
            Map::Hairpin => "hairpin".into(),
            Map::HostPortIps => "hostport-ips".into(),
            Map::HostPortAny => "hostport-any".into(),
            Map::HostPortTargets(p) => format!("hostport-targets-{}", p.nft()),
            Map::HostPortAnyTargets(p) => format!("hostport-any-targets-{}", p.nft()),
        }
    }

    /// Its declaration (`add map` / `add set` body). The endpoint maps are one per
    /// protocol because nft 1.0.6 cannot add a rule that uses a map whose value is
    /// declared `typeof … th dport` once that map is in the kernel; `tcp dport` with a
    /// rule matching `meta l4proto tcp` it can.
    fn declaration(self) -> String {
        let lookup = |key: &str, p: Proto| {
            format!(
                "typeof {key} . numgen random mod 1 : ip daddr . {} dport;",
                p.nft()
            )
        };
        let target = |key: &str, p: Proto| format!("typeof {key} : ip daddr . {} dport;", p.nft());
        match self {
            Map::ServiceIps | Map::FirewallIps | Map::NoEndpointServices | Map::HostPortIps => {
                "type ipv4_addr . inet_proto . inet_service : verdict;".into()
            }
            Map::ServiceNodePorts | Map::NoEndpointNodePorts | Map::HostPortAny => {
                "type inet_proto . inet_service : verdict;".into()
            }
            Map::Endpoints(p) | Map::LocalEndpoints(p) => lookup("ip daddr . th dport", p),
            Map::NodePortEndpoints(p) | Map::NodePortLocalEndpoints(p) => lookup("th dport", p),
            Map::Hairpin => "type ipv4_addr . ipv4_addr;".into(),
            Map::HostPortTargets(p) => target("ip daddr . th dport", p),
            Map::HostPortAnyTargets(p) => target("th dport", p),
        }
    }

    /// Whether it is a set (elements without a value).
    pub fn is_set(self) -> bool {
        self == Map::Hairpin
    }
}

/// A chain several Services share: it picks one of `n` endpoints (`m` of this node's)
/// from the endpoint maps of its protocol, keyed by where the packet was going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shared {
    /// Cluster IP traffic: masqueraded when it does not come from a pod.
    Internal(Proto, usize),
    /// External IP traffic, `Cluster` policy: always masqueraded.
    External(Proto, usize),
    /// External IP traffic, `Local` policy: pods and the node itself reach all `n`
    /// endpoints (the node masqueraded), others this node's `m` with their source kept.
    ExternalLocal(Proto, usize, usize),
    /// Node port traffic, `Cluster` policy.
    NodePort(Proto, usize),
    /// Node port traffic, `Local` policy.
    NodePortLocal(Proto, usize, usize),
    /// Host port traffic to one address (`hostIP`): the node's own masqueraded.
    HostPort(Proto),
    /// Host port traffic to any local address.
    HostPortAny(Proto),
}

/// The masquerade mark, kube-proxy's bit.
pub const MASQ_MARK: &str = "0x4000";
/// The chain that rejects (services without endpoints).
pub const REJECT_CHAIN: &str = "reject-chain";
const MARK_CHAIN: &str = "mark-for-masquerade";
/// The chain that sends traffic to pods' host ports.
const HOSTPORTS_CHAIN: &str = "hostports";

/// What the rules need of the node's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// berth's table, family `ip`.
    pub table: String,
    pub pod_cidr: ipnet::Ipv4Net,
    pub service_cidr: ipnet::Ipv4Net,
    /// The bridge the pods are on: pod addresses are reached through it only.
    pub bridge: String,
}

impl Layout {
    pub fn new(net: &crate::net::Config) -> Self {
        Layout {
            table: net.table.clone(),
            pod_cidr: net.pod_cidr,
            service_cidr: net.service_cidr,
            bridge: net.bridge.clone(),
        }
    }
}

fn dnat(map: Map, proto: Proto, n: usize) -> String {
    let key = match map {
        Map::NodePortEndpoints(_) | Map::NodePortLocalEndpoints(_) => "th dport",
        _ => "ip daddr . th dport",
    };
    format!(
        "meta l4proto {} dnat ip addr . port to {key} . numgen random mod {n} map @{}",
        proto.nft(),
        map.name()
    )
}

impl Shared {
    pub fn name(self) -> String {
        match self {
            Shared::Internal(p, n) => format!("internal-{}-{n}", p.nft()),
            Shared::External(p, n) => format!("external-{}-{n}", p.nft()),
            Shared::ExternalLocal(p, n, m) => format!("external-local-{}-{n}-{m}", p.nft()),
            Shared::NodePort(p, n) => format!("nodeport-{}-{n}", p.nft()),
            Shared::NodePortLocal(p, n, m) => format!("nodeport-local-{}-{n}-{m}", p.nft()),
            Shared::HostPort(p) => format!("hostport-{}", p.nft()),
            Shared::HostPortAny(p) => format!("hostport-any-{}", p.nft()),
        }
    }

    pub fn rules(self, layout: &Layout) -> Vec<String> {
        let pods = layout.pod_cidr;
        let local = |all: Map, mine: Map, p: Proto, n: usize, m: usize| {
            let mut rules = vec![
                format!("ip saddr {pods} {}", dnat(all, p, n)),
                format!("fib saddr type local jump {MARK_CHAIN}"),
                format!("fib saddr type local {}", dnat(all, p, n)),
            ];
            if m > 0 {
                rules.push(dnat(mine, p, m));
            }
            rules
        };
        match self {
            Shared::Internal(p, n) => vec![
                format!("ip saddr != {pods} jump {MARK_CHAIN}"),
                dnat(Map::Endpoints(p), p, n),
            ],
            Shared::External(p, n) => {
                vec![format!("jump {MARK_CHAIN}"), dnat(Map::Endpoints(p), p, n)]
            }
            Shared::NodePort(p, n) => vec![
                format!("jump {MARK_CHAIN}"),
                dnat(Map::NodePortEndpoints(p), p, n),
            ],
            Shared::ExternalLocal(p, n, m) => {
                local(Map::Endpoints(p), Map::LocalEndpoints(p), p, n, m)
            }
            Shared::NodePortLocal(p, n, m) => local(
                Map::NodePortEndpoints(p),
                Map::NodePortLocalEndpoints(p),
                p,
                n,
                m,
            ),
            Shared::HostPort(p) => vec![
                format!("fib saddr type local jump {MARK_CHAIN}"),
                format!(
                    "meta l4proto {} dnat ip addr . port to ip daddr . th dport map @{}",
                    p.nft(),
                    Map::HostPortTargets(p).name()
                ),
            ],
            Shared::HostPortAny(p) => vec![
                format!("fib saddr type local jump {MARK_CHAIN}"),
                format!(
                    "meta l4proto {} dnat ip addr . port to th dport map @{}",
                    p.nft(),
                    Map::HostPortAnyTargets(p).name()
                ),
            ],
        }
    }
}

/// Where traffic arrives: at a Service, an address and port or a node port on every
/// local address; at a pod's host port, a local address and port or a port on every
/// local address. Each is one Service's or pod's; a second one asking for it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dest {
    Ip(Ipv4Addr, Proto, u16),
    NodePort(Proto, u16),
    HostIp(Ipv4Addr, Proto, u16),
    HostPort(Proto, u16),
}

impl Dest {
    pub(super) fn proto(&self) -> Proto {
        match self {
            Dest::Ip(_, p, _) | Dest::NodePort(p, _) => *p,
            Dest::HostIp(_, p, _) | Dest::HostPort(p, _) => *p,
        }
    }

    /// Its key in the endpoint (or host port target) maps of its protocol, without the
    /// protocol.
    pub(super) fn endpoint_key(&self) -> String {
        match self {
            Dest::Ip(ip, _, port) | Dest::HostIp(ip, _, port) => format!("{ip} . {port}"),
            Dest::NodePort(_, port) | Dest::HostPort(_, port) => port.to_string(),
        }
    }

    /// Whether it is a port on every local address.
    fn any_address(&self) -> bool {
        matches!(self, Dest::NodePort(..) | Dest::HostPort(..))
    }
}

/// Its key in its verdict map (`address . protocol . port` or `protocol . port`).
impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dest::Ip(ip, proto, port) | Dest::HostIp(ip, proto, port) => {
                write!(f, "{ip} . {} . {port}", proto.nft())
            }
            Dest::NodePort(proto, port) | Dest::HostPort(proto, port) => {
                write!(f, "{} . {port}", proto.nft())
            }
        }
    }
}

/// What one Service (or one pod's host ports) puts in the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fragment {
    /// Map elements: `(map, key) → value` (empty for set elements).
    pub elements: BTreeMap<(Map, String), String>,
    /// Chains of its own (session affinity), with their rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Affinity sets of its own, with their timeout in seconds.
    pub sets: BTreeMap<String, u32>,
    /// The shared chains its elements lead to.
    pub shared: BTreeSet<Shared>,
    /// The endpoint addresses it needs in the hairpin set.
    pub hairpin: BTreeSet<Ipv4Addr>,
    /// The destinations it holds.
    pub dests: BTreeSet<Dest>,
}

/// A short, stable hash of `name` for chain and set names (kube-proxy's prefix, which
/// keeps names unique and tells apart names that differ in a digit).
fn hash8(name: &str) -> String {
    let d = Sha256::digest(name.as_bytes());
    d[..4].iter().map(|b| format!("{b:02X}")).collect()
}

/// `name` with only the characters nftables takes in an unquoted name.
fn clean(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Fragment {
    /// The objects of one Service's ports. `taken` says whether a destination is
    /// another Service's already (that destination is then left out).
    pub fn of(
        ports: &[(PortName, ServicePort)],
        layout: &Layout,
        taken: impl Fn(&Dest) -> bool,
    ) -> (Fragment, Vec<Dest>) {
        let mut f = Fragment::default();
        let mut refused = Vec::new();
        for (name, sp) in ports {
            f.add_port(name, sp, layout, &taken, &mut refused);
        }
        (f, refused)
    }

    pub(super) fn claim(
        &mut self,
        d: Dest,
        taken: &impl Fn(&Dest) -> bool,
        refused: &mut Vec<Dest>,
    ) -> bool {
        if taken(&d) || self.dests.contains(&d) {
            refused.push(d);
            return false;
        }
        self.dests.insert(d);
        true
    }

    pub(super) fn put(&mut self, map: Map, key: String, value: impl Into<String>) {
        self.elements.insert((map, key), value.into());
    }

    fn add_port(
        &mut self,
        name: &PortName,
        sp: &ServicePort,
        layout: &Layout,
        taken: &impl Fn(&Dest) -> bool,
        refused: &mut Vec<Dest>,
    ) {
        let proto = name.proto;
        let internal = Dest::Ip(sp.cluster_ip, proto, sp.port);
        let internal = self.claim(internal, taken, refused).then_some(internal);
        let externals: Vec<Dest> = sp
            .external_ips
            .iter()
            .map(|ip| Dest::Ip(*ip, proto, sp.port))
            .chain(sp.node_port.map(|n| Dest::NodePort(proto, n)))
            .filter(|d| self.claim(*d, taken, refused))
            .collect();
        if internal.is_none() && externals.is_empty() {
            return;
        }
        self.firewall(name, sp, &externals);
        for t in sp.cluster.iter().chain(&sp.local) {
            self.hairpin.insert(t.ip);
        }
        let has = !sp.cluster.is_empty();
        const REJECT: &str = "goto reject-chain";
        if let Some(d) = internal {
            let key = d.to_string();
            if !has {
                self.put(Map::NoEndpointServices, key, REJECT);
            } else if sp.internal().is_empty() {
                self.put(Map::NoEndpointServices, key, "drop");
            }
        }
        for d in &externals {
            let (no_endpoints, _) = no_endpoint_map(d.any_address());
            if !has {
                self.put(no_endpoints, d.to_string(), REJECT);
            } else if sp.external_local && sp.local.is_empty() {
                self.put(no_endpoints, d.to_string(), "drop");
            }
        }
        if !has {
            return;
        }
        match sp.affinity {
            None => self.shared_port(sp, internal, &externals),
            Some(timeout) => self.affinity_port(name, sp, timeout, layout, internal, &externals),
        }
    }

    /// kube-proxy's firewall for `loadBalancerSourceRanges`: each load balancer IP the
    /// port holds leads, before DNAT, to a chain of the port's that drops the sources
    /// outside the ranges. Cluster IPs, external IPs and node ports are not filtered.
    fn firewall(&mut self, name: &PortName, sp: &ServicePort, externals: &[Dest]) {
        if sp.source_ranges.is_empty() {
            return;
        }
        let guarded: Vec<&Dest> = externals
            .iter()
            .filter(|d| matches!(d, Dest::Ip(ip, ..) if sp.lb_ips.contains(ip)))
            .collect();
        if guarded.is_empty() {
            return;
        }
        let chain = format!("firewall-{}", port_base(name));
        let ranges: Vec<String> = sp.source_ranges.iter().map(ToString::to_string).collect();
        self.chains.insert(
            chain.clone(),
            vec![format!("ip saddr != {{ {} }} drop", ranges.join(", "))],
        );
        for d in guarded {
            self.put(Map::FirewallIps, d.to_string(), format!("goto {chain}"));
        }
    }

    /// A port whose endpoints are picked by the shared chains.
    fn shared_port(&mut self, sp: &ServicePort, internal: Option<Dest>, externals: &[Dest]) {
        let (n, m) = (sp.cluster.len(), sp.local.len());
        let fill = |f: &mut Fragment, map: Map, d: &Dest, targets: &[Target]| {
            for (i, t) in targets.iter().enumerate() {
                let key = format!("{} . {i}", d.endpoint_key());
                f.put(map, key, format!("{} . {}", t.ip, t.port));
            }
        };
        if let Some(d) = internal {
            let targets = sp.internal();
            if !targets.is_empty() {
                let chain = Shared::Internal(d.proto(), targets.len());
                self.put(
                    Map::ServiceIps,
                    d.to_string(),
                    format!("goto {}", chain.name()),
                );
                self.shared.insert(chain);
                fill(self, Map::Endpoints(d.proto()), &d, targets);
            }
        }
        for d in externals {
            let p = d.proto();
            let by_port = d.any_address();
            let (all, mine, chain) = match (by_port, sp.external_local) {
                (false, false) => (Map::Endpoints(p), None, Shared::External(p, n)),
                (false, true) => (
                    Map::Endpoints(p),
                    Some(Map::LocalEndpoints(p)),
                    Shared::ExternalLocal(p, n, m),
                ),
                (true, false) => (Map::NodePortEndpoints(p), None, Shared::NodePort(p, n)),
                (true, true) => (
                    Map::NodePortEndpoints(p),
                    Some(Map::NodePortLocalEndpoints(p)),
                    Shared::NodePortLocal(p, n, m),
                ),
            };
            let (_, verdicts) = no_endpoint_map(d.any_address());
            self.put(verdicts, d.to_string(), format!("goto {}", chain.name()));
            self.shared.insert(chain);
            fill(self, all, d, &sp.cluster);
            if let Some(mine) = mine {
                fill(self, mine, d, &sp.local);
            }
        }
    }

    /// A port with session affinity: kube-proxy's chains, one per policy and endpoint.
    fn affinity_port(
        &mut self,
        name: &PortName,
        sp: &ServicePort,
        timeout: u32,
        layout: &Layout,
        internal: Option<Dest>,
        externals: &[Dest],
    ) {
        let base = port_base(name);
        let cluster_chain = format!("service-{base}");
        let local_chain = format!("local-{base}");
        let external_chain = format!("external-{base}");
        let endpoint = |t: &Target| {
            let full = format!("{base}__{}/{}", t.ip, t.port);
            let h = hash8(&format!("{name}__{}:{}:{timeout}", t.ip, t.port));
            (
                format!("endpoint-{h}-{}", &full[9..]),
                format!("affinity-{h}"),
            )
        };
        let pods = layout.pod_cidr;
        let policy_chain = |f: &mut Fragment, chain: &str, targets: &[Target], internal: bool| {
            let mut rules = Vec::new();
            if internal {
                rules.push(format!(
                    "ip daddr {} {} dport {} ip saddr != {pods} jump {MARK_CHAIN}",
                    sp.cluster_ip,
                    name.proto.nft(),
                    sp.port
                ));
            }
            let mut picks = Vec::new();
            for (i, t) in targets.iter().enumerate() {
                let (ep, set) = endpoint(t);
                rules.push(format!("ip saddr @{set} goto {ep}"));
                picks.push(format!("{i} : goto {ep}"));
                f.sets.insert(set.clone(), timeout);
                f.chains.insert(
                    ep,
                    vec![
                        format!("update @{set} {{ ip saddr }}"),
                        format!(
                            "meta l4proto {} dnat to {}:{}",
                            name.proto.nft(),
                            t.ip,
                            t.port
                        ),
                    ],
                );
            }
            rules.push(format!(
                "numgen random mod {} vmap {{ {} }}",
                targets.len(),
                picks.join(", ")
            ));
            f.chains.insert(chain.to_string(), rules);
        };
        let internal_is_local = sp.internal_local;
        let cluster_internal = internal.is_some() && !internal_is_local;
        let local_internal = internal.is_some() && internal_is_local;
        if cluster_internal || !externals.is_empty() {
            policy_chain(self, &cluster_chain, &sp.cluster, cluster_internal);
        }
        let local_external = sp.external_local && !externals.is_empty();
        if !sp.local.is_empty() && (local_internal || local_external) {
            policy_chain(self, &local_chain, &sp.local, local_internal);
        }
        if let Some(d) = internal {
            let chain = if internal_is_local {
                (!sp.local.is_empty()).then_some(&local_chain)
            } else {
                Some(&cluster_chain)
            };
            if let Some(chain) = chain {
                self.put(Map::ServiceIps, d.to_string(), format!("goto {chain}"));
            }
        }
        if externals.is_empty() {
            return;
        }
        let rules = if sp.external_local {
            let mut rules = vec![
                format!("ip saddr {pods} goto {cluster_chain}"),
                format!("fib saddr type local jump {MARK_CHAIN}"),
                format!("fib saddr type local goto {cluster_chain}"),
            ];
            if !sp.local.is_empty() {
                rules.push(format!("goto {local_chain}"));
            }
            rules
        } else {
            vec![
                format!("jump {MARK_CHAIN}"),
                format!("goto {cluster_chain}"),
            ]
        };
        self.chains.insert(external_chain.clone(), rules);
        for d in externals {
            let (_, verdicts) = no_endpoint_map(d.any_address());
            self.put(verdicts, d.to_string(), format!("goto {external_chain}"));
        }
    }
}

/// The part of a port's own chain names that names the port: a hash of it, then its
/// namespace, name, protocol and port name.
fn port_base(name: &PortName) -> String {
    let base = [&*name.namespace, &name.name, name.proto.nft(), &name.port]
        .map(clean)
        .join("/");
    format!("{}-{base}", hash8(&name.to_string()))
}

/// The no-endpoint map and the verdict map of a Service's destination: a node port
/// (`by_port`) or an address.
fn no_endpoint_map(by_port: bool) -> (Map, Map) {
    if by_port {
        (Map::NoEndpointNodePorts, Map::ServiceNodePorts)
    } else {
        (Map::NoEndpointServices, Map::ServiceIps)
    }
}

/// The commands that make the table's fixed part, its maps and chains empty of
/// Services. Run after `add table; delete table; add table`, in the same transaction.
pub fn base(layout: &Layout) -> Vec<String> {
    let t = format!("ip {}", layout.table);
    let (pods, services, bridge) = (layout.pod_cidr, layout.service_cidr, &layout.bridge);
    let mut c = Vec::new();
    for m in Map::all() {
        let what = if m.is_set() { "set" } else { "map" };
        c.push(format!(
            "add {what} {t} {} {{ {} }}",
            m.name(),
            m.declaration()
        ));
    }
    let base_chains = [
        // Before DNAT (-100), as kube-proxy's `filter-prerouting-pre-dnat`: the load
        // balancer firewall sees where the packet was sent.
        (
            "filter-prerouting-pre-dnat",
            "filter hook prerouting priority -110",
        ),
        ("filter-output-pre-dnat", "filter hook output priority -110"),
        ("filter-input", "filter hook input priority -110"),
        ("filter-forward", "filter hook forward priority -110"),
        // After DNAT (-100), so that only what was not sent to an endpoint is checked.
        ("filter-output", "filter hook output priority -90"),
        ("nat-prerouting", "nat hook prerouting priority -100"),
        ("nat-output", "nat hook output priority -100"),
        ("nat-postrouting", "nat hook postrouting priority 100"),
        // Where the interface a packet leaves through is known (in `output` it is still
        // the one routed to before DNAT).
        ("filter-postrouting", "filter hook postrouting priority 100"),
    ];
    for (name, hook) in base_chains {
        c.push(format!(
            "add chain {t} {name} {{ type {hook}; policy accept; }}"
        ));
    }
    for name in [
        "firewall-check",
        "endpoints-check",
        "guard",
        REJECT_CHAIN,
        HOSTPORTS_CHAIN,
        "services",
        MARK_CHAIN,
        "masquerading",
    ] {
        c.push(format!("add chain {t} {name}"));
    }
    let rules: &[(&str, String)] = &[
        (
            "filter-prerouting-pre-dnat",
            "ct state new jump firewall-check".into(),
        ),
        (
            "filter-output-pre-dnat",
            "ct state new jump firewall-check".into(),
        ),
        (
            "firewall-check",
            "ip daddr . meta l4proto . th dport vmap @firewall-ips".into(),
        ),
        ("filter-input", "ct state new jump endpoints-check".into()),
        ("filter-forward", "ct state new jump endpoints-check".into()),
        ("filter-forward", "jump guard".into()),
        ("filter-output", "ct state new jump endpoints-check".into()),
        ("filter-output", "jump guard".into()),
        // Host ports first: a pod asked for this node's port (and the node admitted it
        // alone on it), where a Service's node port or load balancer address is the
        // same port on every node.
        ("nat-prerouting", format!("jump {HOSTPORTS_CHAIN}")),
        ("nat-prerouting", "jump services".into()),
        ("nat-output", format!("jump {HOSTPORTS_CHAIN}")),
        ("nat-output", "jump services".into()),
        ("nat-postrouting", "jump masquerading".into()),
        // Pods reach the world with the node's address.
        (
            "nat-postrouting",
            format!("ip saddr {pods} ip daddr != {pods} oifname != \"{bridge}\" masquerade"),
        ),
        (
            "endpoints-check",
            "ip daddr . meta l4proto . th dport vmap @no-endpoint-services".into(),
        ),
        (
            "endpoints-check",
            "fib daddr type local meta l4proto . th dport vmap @no-endpoint-nodeports".into(),
        ),
        // Nothing for a Service or pod address leaves through an uplink: an unallocated
        // cluster IP is refused here rather than routed out, and a pod address is only
        // reached through the bridge.
        ("guard", format!("ip daddr {services} reject")),
        (
            "filter-postrouting",
            format!("ip daddr {pods} oifname != \"{bridge}\" drop"),
        ),
        (REJECT_CHAIN, "reject".into()),
        // A host port is a port of one of the node's own addresses (a `hostIP` that is
        // not the node's would otherwise capture traffic passing through to it).
        (HOSTPORTS_CHAIN, "fib daddr type != local return".into()),
        (
            HOSTPORTS_CHAIN,
            "ip daddr . meta l4proto . th dport vmap @hostport-ips".into(),
        ),
        (
            HOSTPORTS_CHAIN,
            "meta l4proto . th dport vmap @hostport-any".into(),
        ),
        (
            "services",
            "ip daddr . meta l4proto . th dport vmap @service-ips".into(),
        ),
        (
            "services",
            "fib daddr type local meta l4proto . th dport vmap @service-nodeports".into(),
        ),
        (
            MARK_CHAIN,
            format!("meta mark set meta mark or {MASQ_MARK}"),
        ),
        (
            "masquerading",
            format!("ct status dnat ip saddr . ip daddr @hairpin jump {MARK_CHAIN}"),
        ),
        (
            "masquerading",
            format!("meta mark & {MASQ_MARK} == 0 return"),
        ),
        (
            "masquerading",
            format!("meta mark set meta mark xor {MASQ_MARK}"),
        ),
        ("masquerading", "masquerade fully-random".into()),
    ];
    for (chain, rule) in rules {
        c.push(format!("add rule {t} {chain} {rule}"));
    }
    c
}
