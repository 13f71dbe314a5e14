//! Pods' host ports, as the CNI `portmap` plugin gives them to kubelet's pods: traffic
//! to a port of the node (`hostPort`, on `hostIP` or on every local address) is sent to
//! the pod's address and `containerPort`. Pure: what a pod asks for ([`host_ports`]) and
//! the table's objects for it ([`fragment`]); [`super::table`] keeps them with the
//! Services'.
//!
//! A pod's host ports are programmed while it is on this node, has its own network (not
//! `hostNetwork`: such a pod listens on the node itself), has an IPv4 address and has
//! not finished; those of its containers count, not of its init containers (as kubelet
//! gives them to the runtime). Each is two map elements: the verdict map of its
//! destination (`hostport-ips` by address, protocol and port, `hostport-any` by
//! protocol and port) leads to the shared chain of its protocol, which DNATs through the
//! target map (`hostport-targets-tcp`, …) keyed by the address and port. Traffic from
//! the node itself is masqueraded (so 127.0.0.1 works, with `route_localnet`), a pod
//! reaching its own host port too (the `hairpin` set); traffic from other pods and from
//! outside keeps its source, as with `portmap`.

use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Pod;

use super::model::{Options, Proto, Target};
use super::rules::{Dest, Fragment, Map, Shared};

/// One host port of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    /// `hostIP`, or `None` for every local address (unset or `0.0.0.0`).
    pub host_ip: Option<Ipv4Addr>,
    pub proto: Proto,
    pub port: u16,
    /// The pod's address and the container's port.
    pub target: Target,
}

impl HostPort {
    /// Where its traffic arrives.
    pub fn dest(&self) -> Dest {
        match self.host_ip {
            Some(ip) => Dest::HostIp(ip, self.proto, self.port),
            None => Dest::HostPort(self.proto, self.port),
        }
    }
}

/// The pod's IPv4 address: `status.podIP`, or the first IPv4 one of `status.podIPs`.
fn pod_ipv4(pod: &Pod) -> Option<Ipv4Addr> {
    let status = pod.status.as_ref()?;
    let first = status.pod_ip.iter().map(String::as_str);
    let all = status.pod_ips.iter().flatten().map(|p| p.ip.as_str());
    first
        .chain(all)
        .find_map(|ip| ip.parse::<Ipv4Addr>().ok())
        .filter(|ip| !ip.is_unspecified())
}

/// The host ports to program for `pod` on this node (none when it has none, is another
/// node's, is on the host's network, has no IPv4 address or has finished).
pub fn host_ports(pod: &Pod, opts: &Options) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    if spec.node_name.as_deref() != Some(opts.node_name.as_str()) || spec.host_network == Some(true)
    {
        return Vec::new();
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Vec::new();
    }
    let Some(ip) = pod_ipv4(pod) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
    {
        let Some(port) = p
            .host_port
            .and_then(|h| u16::try_from(h).ok())
            .filter(|h| *h != 0)
        else {
            continue;
        };
        let Some(container_port) = u16::try_from(p.container_port).ok().filter(|c| *c != 0) else {
            continue;
        };
        let Some(proto) = Proto::parse(p.protocol.as_deref()) else {
            continue;
        };
        if proto == Proto::Sctp && !opts.sctp {
            continue;
        }
        // An IPv6 `hostIP` is for another family (`portmap` skips it too); one that is
        // not an address is left out.
        let host_ip = match p.host_ip.as_deref().filter(|h| !h.is_empty()) {
            None => None,
            Some(h) => match h.parse::<IpAddr>() {
                Ok(IpAddr::V4(v4)) if v4.is_unspecified() => None,
                Ok(IpAddr::V4(v4)) => Some(v4),
                Ok(IpAddr::V6(_)) | Err(_) => continue,
            },
        };
        out.push(HostPort {
            host_ip,
            proto,
            port,
            target: Target {
                ip,
                port: container_port,
            },
        });
    }
    out.sort();
    out.dedup();
    out
}

/// The objects of one pod's host ports. `taken` says whether a destination is another
/// pod's already (that host port is then left out, and returned).
pub fn fragment(ports: &[HostPort], taken: impl Fn(&Dest) -> bool) -> (Fragment, Vec<Dest>) {
    let mut f = Fragment::default();
    let mut refused = Vec::new();
    for hp in ports {
        let d = hp.dest();
        if !f.claim(d, &taken, &mut refused) {
            continue;
        }
        let (verdicts, targets, chain) = match hp.host_ip {
            Some(_) => (
                Map::HostPortIps,
                Map::HostPortTargets(hp.proto),
                Shared::HostPort(hp.proto),
            ),
            None => (
                Map::HostPortAny,
                Map::HostPortAnyTargets(hp.proto),
                Shared::HostPortAny(hp.proto),
            ),
        };
        f.put(verdicts, d.to_string(), format!("goto {}", chain.name()));
        f.put(
            targets,
            d.endpoint_key(),
            format!("{} . {}", hp.target.ip, hp.target.port),
        );
        f.shared.insert(chain);
        f.hairpin.insert(hp.target.ip);
    }
    (f, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::proxy::model::tests::opts;
    use serde_json::{Value, json};

    fn pod(spec: Value, status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn running(ip: &str) -> Value {
        json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]})
    }

    fn hp(host_ip: Option<&str>, proto: Proto, port: u16, target: u16) -> HostPort {
        HostPort {
            host_ip: host_ip.map(|h| h.parse().unwrap()),
            proto,
            port,
            target: Target {
                ip: "10.42.0.5".parse().unwrap(),
                port: target,
            },
        }
    }

    #[test]
    fn a_pods_host_ports_on_an_address_or_every_one() {
        let spec = json!({"nodeName": "n1",
            "initContainers": [{"name": "i", "ports": [{"containerPort": 1, "hostPort": 1}]}],
            "containers": [
                {"name": "a", "ports": [
                    {"containerPort": 8080, "hostPort": 80},
                    {"containerPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "0.0.0.0"},
                    {"containerPort": 9000, "hostPort": 9000, "protocol": "SCTP"}]},
                {"name": "b", "ports": [
                    {"containerPort": 8443, "hostPort": 443, "hostIP": "127.0.0.1"},
                    {"containerPort": 8444, "hostPort": 444, "hostIP": "::1"},
                    {"containerPort": 8445, "hostPort": 445, "hostIP": "nonsense"},
                    {"containerPort": 8446, "hostPort": 446, "protocol": "QUIC"}]}]});
        let got = host_ports(&pod(spec.clone(), running("10.42.0.5")), &opts());
        assert_eq!(
            got,
            [
                hp(None, Proto::Tcp, 80, 8080),
                hp(None, Proto::Udp, 53, 53),
                hp(None, Proto::Sctp, 9000, 9000),
                hp(Some("127.0.0.1"), Proto::Tcp, 443, 8443),
            ]
        );
        let no_sctp = Options {
            sctp: false,
            ..opts()
        };
        let got = host_ports(&pod(spec, running("10.42.0.5")), &no_sctp);
        assert_eq!(got.len(), 3, "SCTP only where the kernel has it: {got:?}");
    }

    #[test]
    fn only_running_pods_of_this_node_with_their_own_network_and_address() {
        let spec = |extra: Value| {
            let mut s = json!({"nodeName": "n1", "containers": [{"name": "a",
                "ports": [{"containerPort": 8080, "hostPort": 80}]}]});
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            s
        };
        let count = |spec: Value, status: Value| host_ports(&pod(spec, status), &opts()).len();
        assert_eq!(count(spec(json!({})), running("10.42.0.5")), 1);
        assert_eq!(
            count(spec(json!({"nodeName": "n2"})), running("10.42.0.5")),
            0
        );
        assert_eq!(
            count(spec(json!({"hostNetwork": true})), running("10.42.0.5")),
            0
        );
        assert_eq!(count(spec(json!({})), json!({"phase": "Pending"})), 0);
        for phase in ["Succeeded", "Failed"] {
            let mut status = running("10.42.0.5");
            status["phase"] = json!(phase);
            assert_eq!(count(spec(json!({})), status), 0, "{phase}");
        }
        // Dual stack, the IPv6 address first: the IPv4 one.
        let dual = json!({"phase": "Running", "podIP": "fd00::5",
                          "podIPs": [{"ip": "fd00::5"}, {"ip": "10.42.0.5"}]});
        let got = host_ports(&pod(spec(json!({})), dual), &opts());
        assert_eq!(got, [hp(None, Proto::Tcp, 80, 8080)]);
    }

    #[test]
    fn a_host_port_is_two_elements_a_shared_chain_and_a_hairpin_address() {
        let ports = [
            hp(None, Proto::Tcp, 80, 8080),
            hp(Some("192.0.2.1"), Proto::Udp, 53, 5353),
        ];
        let (f, refused) = fragment(&ports, |_| false);
        assert!(refused.is_empty());
        let elements: Vec<String> = f
            .elements
            .iter()
            .map(|((m, k), v)| format!("{} {k} : {v}", m.name()))
            .collect();
        assert_eq!(
            elements,
            [
                "hostport-ips 192.0.2.1 . udp . 53 : goto hostport-udp",
                "hostport-any tcp . 80 : goto hostport-any-tcp",
                "hostport-targets-udp 192.0.2.1 . 53 : 10.42.0.5 . 5353",
                "hostport-any-targets-tcp 80 : 10.42.0.5 . 8080",
            ]
        );
        assert_eq!(
            f.shared.iter().map(|s| s.name()).collect::<Vec<_>>(),
            ["hostport-udp", "hostport-any-tcp"]
        );
        assert_eq!(
            f.hairpin.into_iter().collect::<Vec<_>>(),
            ["10.42.0.5".parse::<Ipv4Addr>().unwrap()]
        );
        // A destination another pod holds is left out.
        let (f, refused) = fragment(&ports, |d| *d == Dest::HostPort(Proto::Tcp, 80));
        assert_eq!(refused, [Dest::HostPort(Proto::Tcp, 80)]);
        assert_eq!(f.dests.len(), 1);
    }
}
