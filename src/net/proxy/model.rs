//! What the proxy programs, read from the typed API objects: each port of each Service
//! with the endpoints its traffic may go to, as kube-proxy's `ServicePortMap` and
//! `EndpointsMap` with `CategorizeEndpoints` make them. Pure: no kernel, no API.
//!
//! A Service is proxied when it has a cluster IP (not `None`, so not headless) and is not
//! an `ExternalName`; each of its ports is one [`ServicePort`], keyed by its
//! [`PortName`]. Its endpoints come from the EndpointSlices labelled
//! `kubernetes.io/service-name` with its name (IPv4 slices only: the node's network is
//! IPv4), matched to the port by the port's name and protocol. Ready endpoints are used;
//! when none is ready, those serving while terminating are (kube-proxy's fallback, so
//! a rolling update keeps its last pods reachable). `Local` traffic policies use the
//! endpoints whose `nodeName` is this node.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that names an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 h).
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10800;

/// A transport protocol a Service port may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    /// The API's spelling (`TCP`), `None` for anything else.
    pub fn parse(s: Option<&str>) -> Option<Proto> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Proto::Tcp),
            "UDP" => Some(Proto::Udp),
            "SCTP" => Some(Proto::Sctp),
            _ => None,
        }
    }

    /// nftables' spelling (`tcp`).
    pub fn nft(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }
}

/// One port of one Service: `namespace/name:port` over a protocol, as kube-proxy's
/// `ServicePortName`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortName {
    pub namespace: String,
    pub name: String,
    /// The port's name (empty for a Service's only, unnamed port).
    pub port: String,
    pub proto: Proto,
}

impl PortName {
    /// The Service's key, `namespace/name`.
    pub fn service(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for PortName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}:{}/{}",
            self.namespace,
            self.name,
            self.port,
            self.proto.nft()
        )
    }
}

/// Where an endpoint is reached: its address and the port of the slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// What the proxy needs of one Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    pub cluster_ip: Ipv4Addr,
    pub port: u16,
    /// The node port (`NodePort` and `LoadBalancer` Services).
    pub node_port: Option<u16>,
    /// Addresses that are external destinations of the Service: its load balancer's
    /// ingress IPs (`ipMode` VIP) and `spec.externalIPs`.
    pub external_ips: Vec<Ipv4Addr>,
    /// Of those, the load balancer's ingress IPs: the ones `source_ranges` guards.
    pub lb_ips: Vec<Ipv4Addr>,
    /// `spec.loadBalancerSourceRanges` (IPv4 ones, overlaps merged): the sources
    /// allowed to reach `lb_ips`; empty, every source.
    pub source_ranges: Vec<Ipv4Net>,
    /// `sessionAffinity: ClientIP`'s timeout in seconds.
    pub affinity: Option<u32>,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// `externalTrafficPolicy: Local` (for a Service with external destinations).
    pub external_local: bool,
    /// The endpoints of the `Cluster` policy.
    pub cluster: Vec<Target>,
    /// The endpoints on this node, for the `Local` policies.
    pub local: Vec<Target>,
}

impl ServicePort {
    /// Whether traffic from outside reaches it (a node port or an external address).
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty()
    }

    /// The endpoints internal (cluster IP) traffic goes to.
    pub fn internal(&self) -> &[Target] {
        if self.internal_local {
            &self.local
        } else {
            &self.cluster
        }
    }
}

/// What decides which ports are proxied.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's name: `Local` policies use the endpoints on it.
    pub node_name: String,
    /// Whether the kernel has SCTP; without it, SCTP ports are left out.
    pub sctp: bool,
}

/// One endpoint of a slice as the proxy reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    target: Target,
    ready: bool,
    serving_terminating: bool,
    local: bool,
}

/// The ports of `svc` with their endpoints from `slices` (the Service's own slices,
/// those labelled with its name), or nothing for a Service the proxy leaves alone
/// (headless, ExternalName, no valid IPv4 cluster IP).
pub fn service_ports<'a>(
    svc: &Service,
    slices: impl IntoIterator<Item = &'a EndpointSlice> + Clone,
    opts: &Options,
) -> Vec<(PortName, ServicePort)> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
    if kind == "ExternalName" {
        return Vec::new();
    }
    let Some(cluster_ip) = spec
        .cluster_ip
        .as_deref()
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        .filter(|ip| !ip.is_unspecified())
    else {
        return Vec::new();
    };
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let node_ports = matches!(kind, "NodePort" | "LoadBalancer");
    let mut external_ips: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let mut lb_ips = Vec::new();
    let mut source_ranges = Vec::new();
    if kind == "LoadBalancer" {
        // As kube-proxy: trimmed (the API allows padding), other families and what
        // does not parse left out.
        let ranges: Vec<Ipv4Net> = spec
            .load_balancer_source_ranges
            .iter()
            .flatten()
            .filter_map(|r| r.trim().parse::<Ipv4Net>().ok())
            .map(|r| r.trunc())
            .collect();
        source_ranges = Ipv4Net::aggregate(&ranges);
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        for i in ingress.into_iter().flatten() {
            // `Proxy` means the load balancer delivers to the node itself: its address
            // is not the proxy's to capture.
            if i.ip_mode.as_deref().is_some_and(|m| m != "VIP") {
                continue;
            }
            if let Some(ip) = i.ip.as_deref().and_then(|ip| ip.parse().ok()) {
                external_ips.push(ip);
                lb_ips.push(ip);
            }
        }
    }
    external_ips.sort();
    external_ips.dedup();
    lb_ips.sort();
    lb_ips.dedup();
    let affinity = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_SECONDS)
    });
    let internal_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let external_local = spec.external_traffic_policy.as_deref() == Some("Local");
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Some(proto) = Proto::parse(p.protocol.as_deref()) else {
            continue;
        };
        if proto == Proto::Sctp && !opts.sctp {
            continue;
        }
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        if port == 0 {
            continue;
        }
        let port_name = p.name.clone().unwrap_or_default();
        let node_port = p
            .node_port
            .filter(|_| node_ports)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n != 0);
        let candidates = candidates(slices.clone(), &port_name, proto, &opts.node_name);
        let mut sp = ServicePort {
            cluster_ip,
            port,
            node_port,
            external_ips: external_ips.clone(),
            lb_ips: lb_ips.clone(),
            source_ranges: source_ranges.clone(),
            affinity,
            internal_local,
            external_local: false,
            cluster: pick(&candidates, false),
            local: pick(&candidates, true),
        };
        sp.external_local = external_local && sp.externally_accessible();
        out.push((
            PortName {
                namespace: namespace.clone(),
                name: name.clone(),
                port: port_name,
                proto,
            },
            sp,
        ));
    }
    out
}

/// The endpoints of `slices` for the port named `port` over `proto`, each address once.
fn candidates<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port: &str,
    proto: Proto,
    node: &str,
) -> Vec<Candidate> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let number = slice.ports.iter().flatten().find_map(|p| {
            let same_name = p.name.as_deref().unwrap_or("") == port;
            let same_proto = Proto::parse(p.protocol.as_deref()) == Some(proto);
            (same_name && same_proto)
                .then_some(p.port)
                .flatten()
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n != 0)
        });
        let Some(number) = number else {
            continue;
        };
        for e in slice.endpoints.iter().flatten() {
            // kube-proxy uses an endpoint's first address only.
            let Some(ip) = e.addresses.first().and_then(|a| a.parse::<Ipv4Addr>().ok()) else {
                continue;
            };
            let target = Target { ip, port: number };
            if !seen.insert(target) {
                continue;
            }
            let c = e.conditions.as_ref();
            // Unset `ready` and `serving` mean ready; unset `terminating`, not terminating.
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            out.push(Candidate {
                target,
                ready,
                serving_terminating: serving && terminating,
                local: e.node_name.as_deref() == Some(node),
            });
        }
    }
    out.sort();
    out
}

/// The endpoints to use (only this node's with `local`): the ready ones, else those
/// serving while terminating.
fn pick(candidates: &[Candidate], local: bool) -> Vec<Target> {
    let mine = || candidates.iter().filter(move |c| !local || c.local);
    let ready: Vec<Target> = mine().filter(|c| c.ready).map(|c| c.target).collect();
    if !ready.is_empty() {
        return ready;
    }
    mine()
        .filter(|c| c.serving_terminating)
        .map(|c| c.target)
        .collect()
}

/// Every proxied port of `services`, with their endpoints from `slices`: the whole
/// model, for a full sync or a test.
pub fn all_ports(
    services: &[Service],
    slices: &[EndpointSlice],
    opts: &Options,
) -> BTreeMap<PortName, ServicePort> {
    let mut by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        {
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            by_service.entry((ns, svc.clone())).or_default().push(s);
        }
    }
    let mut out = BTreeMap::new();
    for svc in services {
        let key = (
            svc.metadata.namespace.clone().unwrap_or_default(),
            svc.metadata.name.clone().unwrap_or_default(),
        );
        let mine = by_service.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        out.extend(service_ports(svc, mine.iter().copied(), opts));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    pub fn service(name: &str, spec: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }))
        .unwrap()
    }

    pub fn slice(service: &str, name: &str, ports: Value, endpoints: Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                         "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    pub fn opts() -> Options {
        Options {
            node_name: "n1".into(),
            sctp: true,
        }
    }

    fn t(ip: &str, port: u16) -> Target {
        Target {
            ip: ip.parse().unwrap(),
            port,
        }
    }

    #[test]
    fn ready_endpoints_are_used_and_serving_terminating_ones_only_without_them() {
        let svc = service(
            "web",
            json!({"clusterIP": "10.96.0.5", "ports": [{"name": "http", "port": 80}]}),
        );
        let ports = json!([{"name": "http", "port": 8080, "protocol": "TCP"}]);
        let s = slice(
            "web",
            "web-1",
            ports.clone(),
            json!([
                {"addresses": ["10.42.0.2"], "conditions": {"ready": true}, "nodeName": "n1"},
                {"addresses": ["10.42.0.3"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["10.42.0.4"], "conditions": {"ready": false, "serving": false}},
                {"addresses": ["not-an-ip"]},
            ]),
        );
        let got = all_ports(std::slice::from_ref(&svc), &[s], &opts());
        let (name, sp) = got.first_key_value().unwrap();
        assert_eq!(name.to_string(), "default/web:http/tcp");
        assert_eq!(sp.cluster, vec![t("10.42.0.2", 8080)]);
        assert_eq!(sp.local, vec![t("10.42.0.2", 8080)]);

        let leaving = slice(
            "web",
            "web-1",
            ports,
            json!([
                {"addresses": ["10.42.0.3"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["10.42.0.4"], "conditions": {"ready": false, "serving": false, "terminating": true}},
            ]),
        );
        let got = all_ports(&[svc], &[leaving], &opts());
        let sp = got.values().next().unwrap();
        assert_eq!(sp.cluster, vec![t("10.42.0.3", 8080)]);
        assert!(sp.local.is_empty(), "no endpoint on this node");
    }

    #[test]
    fn headless_external_name_and_unknown_protocols_are_left_alone() {
        let headless = service("h", json!({"clusterIP": "None", "ports": [{"port": 80}]}));
        let external = service(
            "x",
            json!({"type": "ExternalName", "externalName": "example.com"}),
        );
        let sctp = service(
            "s",
            json!({"clusterIP": "10.96.0.9", "ports": [
                {"name": "a", "port": 80, "protocol": "SCTP"},
                {"name": "b", "port": 81, "protocol": "QUIC"},
                {"name": "c", "port": 82, "protocol": "UDP"}]}),
        );
        let no_sctp = Options {
            sctp: false,
            ..opts()
        };
        let got = all_ports(&[headless, external, sctp.clone()], &[], &no_sctp);
        let names: Vec<String> = got.keys().map(ToString::to_string).collect();
        assert_eq!(names, ["default/s:c/udp"]);
        let got = all_ports(&[sctp], &[], &opts());
        assert_eq!(got.len(), 2, "SCTP where the kernel has it");
    }

    #[test]
    fn load_balancer_ingress_node_ports_affinity_and_policies() {
        let mut svc = service(
            "lb",
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.7",
                   "externalIPs": ["192.0.2.9"],
                   "sessionAffinity": "ClientIP",
                   "externalTrafficPolicy": "Local",
                   "internalTrafficPolicy": "Local",
                   "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        svc.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [
            {"ip": "192.0.2.1", "ipMode": "VIP"},
            {"ip": "192.0.2.2", "ipMode": "Proxy"},
            {"hostname": "lb.example.com"}]}}))
        .unwrap();
        let got = all_ports(&[svc], &[], &opts());
        let sp = got.values().next().unwrap();
        assert_eq!(sp.node_port, Some(30080));
        assert_eq!(
            sp.external_ips,
            [
                "192.0.2.1".parse::<Ipv4Addr>().unwrap(),
                "192.0.2.9".parse().unwrap()
            ]
        );
        assert_eq!(sp.affinity, Some(DEFAULT_AFFINITY_SECONDS));
        assert!(sp.internal_local && sp.external_local);

        let cluster_ip = service(
            "c",
            json!({"clusterIP": "10.96.0.8", "externalTrafficPolicy": "Local",
                   "ports": [{"port": 80, "nodePort": 30081}]}),
        );
        let got = all_ports(&[cluster_ip], &[], &opts());
        let sp = got.values().next().unwrap();
        assert_eq!(sp.node_port, None, "a ClusterIP Service has no node port");
        assert!(!sp.external_local, "nor external traffic");
    }

    #[test]
    fn slices_match_ports_by_name_and_protocol() {
        let svc = service(
            "dns",
            json!({"clusterIP": "10.96.0.10", "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
        );
        let s = slice(
            "dns",
            "dns-1",
            json!([{"name": "dns", "port": 5353, "protocol": "UDP"},
                   {"name": "dns-tcp", "port": 5354, "protocol": "TCP"}]),
            json!([{"addresses": ["10.42.0.9"]}]),
        );
        let other = slice(
            "web",
            "web-1",
            json!([{"name": "dns", "port": 1, "protocol": "UDP"}]),
            json!([{"addresses": ["10.42.0.1"]}]),
        );
        let got = all_ports(&[svc], &[s, other], &opts());
        let found: Vec<(String, Vec<Target>)> = got
            .iter()
            .map(|(k, v)| (k.to_string(), v.cluster.clone()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "default/dns:dns/udp".to_string(),
                    vec![t("10.42.0.9", 5353)]
                ),
                (
                    "default/dns:dns-tcp/tcp".to_string(),
                    vec![t("10.42.0.9", 5354)]
                ),
            ]
        );
    }
}
