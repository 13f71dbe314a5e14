//! The service proxy's rules in a node's network namespace, with real traffic: pods
//! behind a cluster IP, node ports on the node's address and on 127.0.0.1, load
//! balancer ingress, hairpin, session affinity, `Local` policies, rejections, pods'
//! host ports, and the proxier itself following a real API server.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use berth::net::proxy::model::{self, Options};
use berth::net::proxy::{HostPort, Layout, Nft, Proto, Table, Target};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use crate::netlab::{Lab, TCP_PORT, UDP_PORT, available, tcp, udp};

const NODE: &str = "node-a";

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

/// The usual ports: `http` 80/TCP and `dns` 53/UDP.
fn ports() -> Value {
    json!([{"name": "http", "port": 80, "protocol": "TCP"},
           {"name": "dns", "port": 53, "protocol": "UDP"}])
}

/// The slice of `service` with the pods `pods` as endpoints (`(pod, node)`).
fn slice(lab: &Lab, service: &str, pods: &[(usize, &str)]) -> EndpointSlice {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(i, node)| {
            json!({"addresses": [lab.pods[*i].ip.to_string()], "nodeName": node,
                   "conditions": {"ready": true}})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{service}-1"), "namespace": "default",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": TCP_PORT, "protocol": "TCP"},
                  {"name": "dns", "port": UDP_PORT, "protocol": "UDP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// The proxy's table for a lab, kept as the proxier keeps it.
struct Proxy {
    table: Table,
    nft: Nft,
    opts: Options,
}

impl Proxy {
    fn new(lab: &Lab) -> Self {
        let layout = Layout {
            table: "berth".into(),
            pod_cidr: lab.pod_cidr.parse().unwrap(),
            service_cidr: "10.96.0.0/16".parse().unwrap(),
            bridge: lab.bridge.clone(),
        };
        Proxy {
            table: Table::new(layout),
            nft: Nft::new(lab.nft()),
            opts: Options {
                node_name: NODE.into(),
                sctp: berth::net::proxy::kernel_has_sctp(),
            },
        }
    }

    /// Sets the Services and syncs (whole the first time, then only the changes).
    async fn sync(&mut self, services: &[(&Service, &[EndpointSlice])]) {
        for (svc, slices) in services {
            let key = format!("default/{}", svc.metadata.name.as_deref().unwrap());
            let ports = model::service_ports(svc, slices.iter(), &self.opts);
            assert!(self.table.set_service(&key, &ports).is_empty());
        }
        self.commit().await;
    }

    /// Sets pods' host ports (`(key, ports)`) and syncs.
    async fn sync_pods(&mut self, pods: &[(&str, &[HostPort])]) {
        for (key, ports) in pods {
            assert!(self.table.set_pod(key, ports).is_empty());
        }
        self.commit().await;
    }

    async fn commit(&mut self) {
        let whole = self.table.is_full();
        let commands = self.table.commands(tokio::time::Instant::now());
        let done = if whole {
            self.nft.run(&commands).await
        } else {
            self.nft.run_in_session(&commands).await
        };
        if let Err(e) = done {
            panic!("{e}\n{}", commands.join("\n"));
        }
    }

    async fn listing(&self) -> String {
        self.nft
            .output(&["list", "table", "ip", "berth"])
            .await
            .unwrap()
    }
}

fn at(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::from((ip, port))
}

/// Who answered (`pod0`, …) and whom it saw.
fn who(answer: std::io::Result<String>) -> (String, String) {
    let answer = answer.expect("an answer");
    let (pod, peer) = answer.split_once(' ').expect("`pod peer`");
    (pod.to_string(), peer.to_string())
}

#[tokio::test]
async fn cluster_ips_node_ports_and_load_balancers_reach_the_pods() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(3);
    let mut proxy = Proxy::new(&lab);
    let web = service("web", json!({"clusterIP": "10.96.0.10", "ports": ports()}));
    let np = service(
        "np",
        json!({"type": "NodePort", "clusterIP": "10.96.0.11",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
                         {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]}),
    );
    let mut lb = service(
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.12",
               "ports": [{"name": "http", "port": 8000, "protocol": "TCP", "nodePort": 30081}]}),
    );
    lb.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [
        {"ip": lab.node_ip.to_string(), "ipMode": "VIP"}]}}))
    .unwrap();
    let web_eps = [slice(&lab, "web", &[(0, NODE), (1, NODE)])];
    let np_eps = [slice(&lab, "np", &[(0, NODE)])];
    let lb_eps = [slice(&lab, "lb", &[(1, NODE)])];
    proxy
        .sync(&[(&web, &web_eps), (&np, &np_eps), (&lb, &lb_eps)])
        .await;
    let client = &lab.pods[2];

    // A cluster IP from a pod: both endpoints answer, and see the pod's own address.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let (pod, peer) = who(tcp(&client.ns, at("10.96.0.10".parse().unwrap(), 80)));
        assert_eq!(peer, client.ip.to_string(), "pod traffic keeps its source");
        seen.insert(pod);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["pod0", "pod1"]);
    let (pod, _) = who(udp(&client.ns, at("10.96.0.10".parse().unwrap(), 53)));
    assert!(pod == "pod0" || pod == "pod1", "{pod}");
    // From the node itself.
    let (_, peer) = who(tcp(&lab.node, at("10.96.0.10".parse().unwrap(), 80)));
    assert_eq!(
        peer,
        lab.gateway.to_string(),
        "the node's traffic is masqueraded"
    );

    // Node ports: on 127.0.0.1 and on the node's address, from the node, a pod and
    // the outside.
    for (ns, ip) in [
        (&lab.node, Ipv4Addr::LOCALHOST),
        (&lab.node, lab.node_ip),
        (&client.ns, lab.node_ip),
        (&lab.outside, lab.node_ip),
    ] {
        let (pod, peer) = who(tcp(ns, at(ip, 30080)));
        assert_eq!(pod, "pod0", "node port on {ip} from {ns}");
        assert_eq!(
            peer,
            lab.gateway.to_string(),
            "masqueraded ({ip} from {ns})"
        );
    }
    let (pod, _) = who(udp(&lab.node, at(Ipv4Addr::LOCALHOST, 30053)));
    assert_eq!(pod, "pod0", "UDP node port on 127.0.0.1");

    // The load balancer's ingress (the node's address), and its node port.
    for ns in [&lab.node, &client.ns, &lab.outside] {
        assert_eq!(who(tcp(ns, at(lab.node_ip, 8000))).0, "pod1", "from {ns}");
    }
    assert_eq!(
        who(tcp(&lab.node, at(Ipv4Addr::LOCALHOST, 30081))).0,
        "pod1"
    );
}

#[tokio::test]
async fn hairpin_and_session_affinity() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(3);
    let mut proxy = Proxy::new(&lab);
    let own = service("own", json!({"clusterIP": "10.96.0.20", "ports": ports()}));
    let sticky = service(
        "sticky",
        json!({"clusterIP": "10.96.0.21", "sessionAffinity": "ClientIP", "ports": ports()}),
    );
    let own_eps = [slice(&lab, "own", &[(0, NODE)])];
    let sticky_eps = [slice(&lab, "sticky", &[(0, NODE), (1, NODE)])];
    proxy
        .sync(&[(&own, &own_eps), (&sticky, &sticky_eps)])
        .await;

    // A pod reaching itself through its Service: masqueraded, so it takes the answer.
    let (pod, peer) = who(tcp(&lab.pods[0].ns, at("10.96.0.20".parse().unwrap(), 80)));
    assert_eq!((pod.as_str(), peer), ("pod0", lab.gateway.to_string()));
    let (pod, _) = who(udp(&lab.pods[0].ns, at("10.96.0.20".parse().unwrap(), 53)));
    assert_eq!(pod, "pod0", "hairpin over UDP");

    // Session affinity: a client keeps its endpoint.
    let first = who(tcp(&lab.pods[2].ns, at("10.96.0.21".parse().unwrap(), 80))).0;
    for _ in 0..20 {
        let again = who(tcp(&lab.pods[2].ns, at("10.96.0.21".parse().unwrap(), 80))).0;
        assert_eq!(again, first, "the same endpoint every time");
    }
    // Through the sticky Service a pod may also reach itself.
    let (_, peer) = who(tcp(&lab.pods[1].ns, at("10.96.0.21".parse().unwrap(), 80)));
    assert!(
        peer == lab.pods[1].ip.to_string() || peer == lab.gateway.to_string(),
        "{peer}"
    );
}

#[tokio::test]
async fn local_policies_use_this_nodes_endpoints() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(3);
    let mut proxy = Proxy::new(&lab);
    // pod0 is on this node, pod1 "on another" (same bridge, another nodeName).
    let local = service(
        "local",
        json!({"type": "NodePort", "clusterIP": "10.96.0.30",
               "internalTrafficPolicy": "Local", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30090}]}),
    );
    let eps = [slice(&lab, "local", &[(0, NODE), (1, "node-b")])];
    proxy.sync(&[(&local, &eps)]).await;
    for _ in 0..15 {
        let (pod, _) = who(tcp(&lab.pods[2].ns, at("10.96.0.30".parse().unwrap(), 80)));
        assert_eq!(pod, "pod0", "internal Local: this node's endpoint only");
        let (pod, peer) = who(tcp(&lab.outside, at(lab.node_ip, 30090)));
        assert_eq!(pod, "pod0", "external Local: this node's endpoint only");
        assert_eq!(
            peer,
            lab.outside_ip.to_string(),
            "external Local keeps the source"
        );
    }
    // Only another node's endpoint: the cluster IP drops, the node port drops traffic
    // from outside but pods still reach the Service through it.
    let eps = [slice(&lab, "local", &[(1, "node-b")])];
    proxy.sync(&[(&local, &eps)]).await;
    let dropped = tcp(&lab.pods[2].ns, at("10.96.0.30".parse().unwrap(), 80)).unwrap_err();
    assert_eq!(dropped.kind(), std::io::ErrorKind::TimedOut, "{dropped}");
    let dropped = tcp(&lab.outside, at(lab.node_ip, 30090)).unwrap_err();
    assert_eq!(dropped.kind(), std::io::ErrorKind::TimedOut, "{dropped}");
    assert_eq!(who(tcp(&lab.pods[2].ns, at(lab.node_ip, 30090))).0, "pod1");
}

#[tokio::test]
async fn nothing_unallocated_or_without_endpoints_is_routed_out() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(1);
    let mut proxy = Proxy::new(&lab);
    let empty = service(
        "empty",
        json!({"type": "NodePort", "clusterIP": "10.96.0.40",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30100}]}),
    );
    proxy.sync(&[(&empty, &[])]).await;
    let before = lab.uplink_tx_packets();
    // Refused at once: a pod is told by an ICMP error, the node's own socket by its
    // packet being dropped on the way out (EPERM), as with kube-proxy.
    let refused = |r: std::io::Result<String>| {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::PermissionDenied
            ),
            "{e}"
        );
    };
    for ns in [&lab.pods[0].ns, &lab.node] {
        refused(tcp(ns, at("10.96.0.40".parse().unwrap(), 80)));
        refused(tcp(ns, at("10.96.0.99".parse().unwrap(), 80)));
        refused(udp(ns, at("10.96.0.99".parse().unwrap(), 53)));
    }
    refused(tcp(&lab.node, at(Ipv4Addr::LOCALHOST, 30100)));
    assert_eq!(
        lab.uplink_tx_packets(),
        before,
        "no packet for a Service address left through the uplink"
    );
    // From the outside too (the answer, an ICMP error, goes out the uplink).
    refused(tcp(&lab.outside, at(lab.node_ip, 30100)));
}

#[tokio::test]
async fn changes_are_partial_and_a_refused_transaction_changes_nothing() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(2);
    let mut proxy = Proxy::new(&lab);
    let web = service("web", json!({"clusterIP": "10.96.0.50", "ports": ports()}));
    let to = at("10.96.0.50".parse().unwrap(), 80);
    proxy
        .sync(&[(&web, &[slice(&lab, "web", &[(0, NODE)])])])
        .await;
    assert_eq!(who(tcp(&lab.node, to)).0, "pod0");
    // The endpoint moves: a partial sync, through the running nft.
    proxy
        .sync(&[(&web, &[slice(&lab, "web", &[(1, NODE)])])])
        .await;
    assert_eq!(who(tcp(&lab.node, to)).0, "pod1");

    // A transaction with a bad command at its end: refused whole.
    let before = proxy.listing().await;
    let bad = vec![
        "add element ip berth service-ips { 10.96.0.51 . tcp . 80 : goto internal-tcp-1 }"
            .to_string(),
        "add element ip berth no-such-map { 1.2.3.4 }".to_string(),
    ];
    let e = proxy.nft.run_in_session(&bad).await.unwrap_err();
    assert!(e.to_string().contains("no-such-map"), "{e}");
    let e = proxy.nft.run(&bad).await.unwrap_err();
    assert!(matches!(e, berth::net::proxy::Error::Refused(_)), "{e}");
    assert_eq!(proxy.listing().await, before, "nothing half-programmed");
    // The session goes on after a refusal.
    proxy
        .sync(&[(&web, &[slice(&lab, "web", &[(0, NODE)])])])
        .await;
    assert_eq!(who(tcp(&lab.node, to)).0, "pod0");
    // The Service goes: rejected at once, and its chain is deleted a moment later.
    proxy.sync(&[(&web, &[])]).await;
    proxy.table.set_service("default/web", &[]);
    let commands = proxy.table.commands(tokio::time::Instant::now());
    proxy.nft.run_in_session(&commands).await.unwrap();
    let e = tcp(&lab.node, to).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    assert!(proxy.listing().await.contains("chain internal-tcp-1 {"));
    let later = tokio::time::Instant::now() + berth::net::proxy::table::STALE_AFTER;
    let commands = proxy.table.commands(later);
    assert_eq!(
        commands,
        [
            "delete chain ip berth internal-tcp-1",
            "delete chain ip berth internal-udp-1"
        ]
    );
    tokio::time::sleep(berth::net::proxy::table::STALE_AFTER).await;
    proxy.nft.run_in_session(&commands).await.unwrap();
    assert!(!proxy.listing().await.contains("chain internal-tcp-1 {"));

    berth::net::proxy::remove(&lab.nft(), "berth")
        .await
        .unwrap();
    berth::net::proxy::remove(&lab.nft(), "berth")
        .await
        .unwrap();
    assert!(
        proxy
            .nft
            .output(&["list", "tables"])
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn sctp_ports_are_programmed_only_where_the_kernel_has_sctp() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(1);
    let mut proxy = Proxy::new(&lab);
    let svc = service(
        "mixed",
        json!({"clusterIP": "10.96.0.60", "ports": [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "sctp", "port": 9000, "protocol": "SCTP"}]}),
    );
    let mut eps = slice(&lab, "mixed", &[(0, NODE)]);
    eps.ports.get_or_insert_with(Vec::new).push(
        serde_json::from_value(json!({"name": "sctp", "port": 9000, "protocol": "SCTP"})).unwrap(),
    );
    proxy.sync(&[(&svc, &[eps])]).await;
    let listing = proxy.listing().await;
    if berth::net::proxy::kernel_has_sctp() {
        assert!(listing.contains("10.96.0.60 . sctp . 9000"), "{listing}");
    } else {
        eprintln!("this kernel has no SCTP: its ports are left out");
        assert!(!listing.contains("sctp . 9000"), "{listing}");
    }
    assert_eq!(
        who(tcp(&lab.node, at("10.96.0.60".parse().unwrap(), 80))).0,
        "pod0"
    );
}

#[tokio::test]
async fn the_proxier_follows_services_and_slices_from_the_api() {
    use berth::client::{Client, DeleteParams, Kind, catalog};
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(1);
    let s = crate::support::TestServer::start().await;
    let client = Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let mut sup = berth::supervisor::Supervisor::new();
    let net = berth::net::Config {
        pod_cidr: lab.pod_cidr.parse().unwrap(),
        bridge: lab.bridge.clone(),
        ..berth::net::Config::default()
    };
    let cfg = berth::net::proxy::ProxyConfig {
        net,
        node_name: NODE.into(),
        nft: lab.nft(),
    };
    berth::net::proxy::start(&mut sup, &client, cfg);
    let nft = Nft::new(lab.nft());
    let listing = || async {
        nft.output(&["list", "table", "ip", "berth"])
            .await
            .map_err(|e| e.to_string())
    };
    // The table is made at start, whole.
    crate::support::eventually(10, "the proxy's table", || async {
        listing().await.map(|_| ())
    })
    .await;
    let svc = client
        .create(
            catalog::of(Kind::Service),
            Some("default"),
            &json!({"metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}]}}),
        )
        .await
        .unwrap();
    let ip: Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
    let eps = serde_json::to_value(slice(&lab, "web", &[(0, NODE)])).unwrap();
    client
        .create(catalog::of(Kind::EndpointSlice), Some("default"), &eps)
        .await
        .unwrap();
    crate::support::eventually(10, "the Service's element", || async {
        let l = listing().await?;
        l.contains(&format!("{ip} . tcp . 80 : goto internal-tcp-1"))
            .then_some(())
            .ok_or(l)
    })
    .await;
    let node = lab.node.clone();
    let answer = tokio::task::spawn_blocking(move || tcp(&node, at(ip, 80)))
        .await
        .unwrap();
    assert_eq!(who(answer).0, "pod0");
    client
        .delete(
            catalog::of(Kind::Service),
            Some("default"),
            "web",
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    crate::support::eventually(10, "the Service's element gone", || async {
        let l = listing().await?;
        (!l.contains(&format!("{ip} . tcp"))).then_some(()).ok_or(l)
    })
    .await;
    sup.shutdown(Duration::from_secs(5)).await;
    // The rules stay when the proxy stops.
    assert!(listing().await.is_ok());
    berth::net::proxy::remove(&lab.nft(), "berth")
        .await
        .unwrap();
}

/// Host port `port` (on `host_ip`, or every local address) of pod `i` to its server.
fn host_port(lab: &Lab, i: usize, host_ip: Option<Ipv4Addr>, proto: Proto, port: u16) -> HostPort {
    let to = if proto == Proto::Udp {
        UDP_PORT
    } else {
        TCP_PORT
    };
    HostPort {
        host_ip,
        proto,
        port,
        target: Target {
            ip: lab.pods[i].ip,
            port: to,
        },
    }
}

/// Whether a request failed (refused, timed out or unreachable): nobody answered.
fn unanswered(r: std::io::Result<String>, what: &str) {
    assert!(r.is_err(), "{what}: answered {r:?}");
}

#[tokio::test]
async fn host_ports_reach_pods_from_outside_the_node_and_other_pods() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(3);
    let mut proxy = Proxy::new(&lab);
    let (node_ip, lo) = (lab.node_ip, Ipv4Addr::LOCALHOST);
    // pod0 on every address; as the conformance test, one port for three pods on
    // different addresses and protocols: 127.0.0.1 (pod1), the node's address (pod2),
    // and UDP on the node's address (pod0).
    let pod0 = [
        host_port(&lab, 0, None, Proto::Tcp, 9080),
        host_port(&lab, 0, Some(node_ip), Proto::Udp, 9081),
    ];
    let pod1 = [host_port(&lab, 1, Some(lo), Proto::Tcp, 9081)];
    let pod2 = [
        host_port(&lab, 2, Some(node_ip), Proto::Tcp, 9081),
        // Not an address of the node: nothing is captured.
        host_port(
            &lab,
            2,
            Some("192.0.2.99".parse().unwrap()),
            Proto::Tcp,
            9082,
        ),
    ];
    proxy
        .sync_pods(&[
            ("default/p0", &pod0),
            ("default/p1", &pod1),
            ("default/p2", &pod2),
        ])
        .await;
    let gateway = lab.gateway.to_string();

    // From outside: the source is kept.
    let (pod, peer) = who(tcp(&lab.outside, at(node_ip, 9080)));
    assert_eq!((pod.as_str(), peer), ("pod0", lab.outside_ip.to_string()));
    // From the node, on any of its addresses, 127.0.0.1 included: masqueraded.
    for ip in [lo, node_ip, lab.gateway] {
        let (pod, peer) = who(tcp(&lab.node, at(ip, 9080)));
        assert_eq!(
            (pod.as_str(), peer.as_str()),
            ("pod0", gateway.as_str()),
            "{ip}"
        );
    }
    // From another pod through the node's address: its own source; from the pod
    // itself (hairpin): masqueraded, so it takes its own answer.
    let (pod, peer) = who(tcp(&lab.pods[1].ns, at(node_ip, 9080)));
    assert_eq!((pod.as_str(), peer), ("pod0", lab.pods[1].ip.to_string()));
    let (pod, peer) = who(tcp(&lab.pods[0].ns, at(node_ip, 9080)));
    assert_eq!((pod.as_str(), peer.as_str()), ("pod0", gateway.as_str()));

    // One port, three pods: by address and protocol.
    assert_eq!(who(tcp(&lab.node, at(lo, 9081))).0, "pod1");
    assert_eq!(who(tcp(&lab.node, at(node_ip, 9081))).0, "pod2");
    assert_eq!(who(tcp(&lab.outside, at(node_ip, 9081))).0, "pod2");
    assert_eq!(who(tcp(&lab.pods[0].ns, at(node_ip, 9081))).0, "pod2");
    assert_eq!(who(udp(&lab.outside, at(node_ip, 9081))).0, "pod0");
    assert_eq!(who(udp(&lab.node, at(node_ip, 9081))).0, "pod0");
    // 127.0.0.1 only: not on the node's other addresses.
    unanswered(
        tcp(&lab.node, at(lab.gateway, 9081)),
        "pod1's port on the gateway",
    );
    unanswered(
        tcp(&lab.pods[0].ns, at("192.0.2.99".parse().unwrap(), 9082)),
        "a hostIP that is not the node's",
    );

    // A pod's host ports go with it; the others stay.
    proxy.sync_pods(&[("default/p0", &[])]).await;
    for (ns, ip) in [
        (&lab.node, lo),
        (&lab.node, node_ip),
        (&lab.outside, node_ip),
    ] {
        unanswered(tcp(ns, at(ip, 9080)), "a removed host port");
    }
    assert_eq!(who(tcp(&lab.node, at(lo, 9081))).0, "pod1");
    let listing = proxy.listing().await;
    assert!(!listing.contains(&lab.pods[0].ip.to_string()), "{listing}");
}

#[tokio::test]
async fn the_proxier_follows_pods_host_ports_from_the_api() {
    use berth::client::{Client, DeleteParams, Kind, Patch, catalog};
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(2);
    let s = crate::support::TestServer::start().await;
    s.allow_privileged("default").await;
    let client = Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let mut sup = berth::supervisor::Supervisor::new();
    let net = berth::net::Config {
        pod_cidr: lab.pod_cidr.parse().unwrap(),
        bridge: lab.bridge.clone(),
        ..berth::net::Config::default()
    };
    let cfg = berth::net::proxy::ProxyConfig {
        net,
        node_name: NODE.into(),
        nft: lab.nft(),
    };
    berth::net::proxy::start(&mut sup, &client, cfg);
    let nft = Nft::new(lab.nft());
    let listing = || async {
        nft.output(&["list", "map", "ip", "berth", "hostport-any-targets-tcp"])
            .await
            .map_err(|e| e.to_string())
    };
    let pods = catalog::of(Kind::Pod);
    // A pod of this node with a host port, one on the host's network, one of another
    // node; the API gives them their addresses as a node agent would.
    let pod = |name: &str, node: &str, port: u16, host_network: bool| {
        json!({"metadata": {"name": name},
               "spec": {"nodeName": node, "hostNetwork": host_network,
                        "containers": [{"name": "c", "image": "i",
                            "ports": [{"containerPort": TCP_PORT, "hostPort": port}]}]}})
    };
    let running = |ip: Ipv4Addr| {
        Patch::Merge(
            json!({"status": {"phase": "Running", "podIP": ip.to_string(),
                                       "podIPs": [{"ip": ip.to_string()}]}}),
        )
    };
    for (name, node, port, host, i) in [
        ("web", NODE, 9090, false, 0),
        ("host", NODE, 9091, true, 1),
        ("elsewhere", "node-b", 9092, false, 1),
    ] {
        client
            .create(pods, Some("default"), &pod(name, node, port, host))
            .await
            .unwrap();
        client
            .patch_status(pods, Some("default"), name, &running(lab.pods[i].ip))
            .await
            .unwrap();
    }
    crate::support::eventually(10, "the pod's host port", || async {
        let l = listing().await?;
        l.contains(&format!("9090 : {} . {TCP_PORT}", lab.pods[0].ip))
            .then_some(())
            .ok_or(l)
    })
    .await;
    let l = listing().await.unwrap();
    assert!(!l.contains("9091") && !l.contains("9092"), "{l}");
    let outside = lab.outside.clone();
    let to = at(lab.node_ip, 9090);
    let answer = tokio::task::spawn_blocking(move || tcp(&outside, to))
        .await
        .unwrap();
    assert_eq!(who(answer).0, "pod0");

    // A new address (the pod's network made again): the port follows.
    client
        .patch_status(pods, Some("default"), "web", &running(lab.pods[1].ip))
        .await
        .unwrap();
    crate::support::eventually(10, "the host port moved", || async {
        let l = listing().await?;
        l.contains(&format!("9090 : {} . {TCP_PORT}", lab.pods[1].ip))
            .then_some(())
            .ok_or(l)
    })
    .await;
    // Finished: the port goes.
    client
        .patch_status(
            pods,
            Some("default"),
            "web",
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    crate::support::eventually(10, "the finished pod's host port gone", || async {
        let l = listing().await?;
        (!l.contains("9090")).then_some(()).ok_or(l)
    })
    .await;
    // Running again (a test's stand-in for a new pod of the name), then deleted.
    client
        .patch_status(pods, Some("default"), "web", &running(lab.pods[0].ip))
        .await
        .unwrap();
    crate::support::eventually(10, "the host port back", || async {
        let l = listing().await?;
        l.contains("9090").then_some(()).ok_or(l)
    })
    .await;
    // Deleted at once (no node agent here ends it gracefully).
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    client
        .delete(pods, Some("default"), "web", &now)
        .await
        .unwrap();
    crate::support::eventually(10, "the deleted pod's host port gone", || async {
        let l = listing().await?;
        (!l.contains("9090")).then_some(()).ok_or(l)
    })
    .await;
    sup.shutdown(Duration::from_secs(5)).await;
    berth::net::proxy::remove(&lab.nft(), "berth")
        .await
        .unwrap();
}

#[tokio::test]
async fn service_lb_gives_load_balancers_the_nodes_addresses() {
    let s = crate::support::TestServer::start().await;
    let (code, _) = s
        .post("/api/v1/nodes", json!({"metadata": {"name": "n1"}}))
        .await;
    assert_eq!(code, 201);
    let (code, _) = s
        .patch(
            "/api/v1/nodes/n1/status",
            "application/merge-patch+json",
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.7"},
                                            {"type": "Hostname", "address": "n1"}]}}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = s
        .post(
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "lb"},
                   "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(code, 201);
    // Source ranges are CIDRs, on a load balancer only (as upstream's validation).
    for (spec, field) in [
        (
            json!({"type": "LoadBalancer", "ports": [{"port": 80}],
                   "loadBalancerSourceRanges": ["10.0.0.0/8", "10.0.0.300/32"]}),
            "spec.LoadBalancerSourceRanges[1]",
        ),
        (
            json!({"type": "NodePort", "ports": [{"port": 80}],
                   "loadBalancerSourceRanges": ["10.0.0.0/8"]}),
            "spec.LoadBalancerSourceRanges",
        ),
    ] {
        let (code, body) = s
            .post(
                "/api/v1/namespaces/default/services",
                json!({"metadata": {"name": "bad-ranges"}, "spec": spec}),
            )
            .await;
        assert_eq!(code, 422, "{body}");
        assert_eq!(body["details"]["causes"][0]["field"], field, "{body}");
    }
    let ingress = || async {
        let (_, svc) = s.get("/api/v1/namespaces/default/services/lb").await;
        svc["status"]["loadBalancer"]["ingress"].clone()
    };
    crate::support::eventually(10, "the load balancer's ingress", || async {
        let i = ingress().await;
        (i == json!([{"ip": "192.0.2.7", "ipMode": "VIP"}]))
            .then_some(())
            .ok_or(i.to_string())
    })
    .await;
    // No longer a load balancer: the ingress goes.
    let (code, body) = s
        .patch(
            "/api/v1/namespaces/default/services/lb",
            "application/merge-patch+json",
            json!({"spec": {"type": "NodePort", "allocateLoadBalancerNodePorts": null}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    crate::support::eventually(10, "the ingress cleared", || async {
        let i = ingress().await;
        (i.is_null() || i == json!([]))
            .then_some(())
            .ok_or(i.to_string())
    })
    .await;
}

/// A TCP request to `addr` from the namespace `ns`, sent from its address `from`: what
/// the server answered (an error after 2 s when nothing answers).
fn tcp_from(ns: &str, from: Ipv4Addr, addr: SocketAddr) -> std::io::Result<String> {
    use rustix::net::sockopt::{Timeout, set_socket_timeout};
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    use std::io::{Read, Write};
    crate::netlab::in_netns(ns, || {
        let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
        // A blocking connect gives up after the send timeout.
        set_socket_timeout(&fd, Timeout::Send, Some(Duration::from_secs(2)))?;
        set_socket_timeout(&fd, Timeout::Recv, Some(Duration::from_secs(2)))?;
        bind(&fd, &SocketAddr::from((from, 0)))?;
        connect(&fd, &addr)?;
        let mut c = std::net::TcpStream::from(fd);
        c.write_all(b"hi")?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    })
}

#[tokio::test]
async fn load_balancer_source_ranges_admit_only_their_clients() {
    if !available() {
        eprintln!("needs root, ip and nft: skipped");
        return;
    }
    let lab = Lab::new(2);
    // A second client outside, on the outside's link.
    let [a, b, c, _] = lab.outside_ip.octets();
    let other = Ipv4Addr::new(a, b, c, 3);
    crate::netlab::ip(&[
        "-n",
        &lab.outside,
        "addr",
        "add",
        &format!("{other}/24"),
        "dev",
        "eth0",
    ]);
    let lb = |ranges: Value| {
        let mut lb = service(
            "guarded",
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.20",
                   "loadBalancerSourceRanges": ranges,
                   "ports": [{"name": "http", "port": 8000, "protocol": "TCP",
                              "nodePort": 30082}]}),
        );
        lb.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [
            {"ip": lab.node_ip.to_string(), "ipMode": "VIP"}]}}))
        .unwrap();
        lb
    };
    let eps = [slice(&lab, "guarded", &[(0, NODE)])];
    let mut proxy = Proxy::new(&lab);
    let outside = lab.outside_ip;
    let ingress = at(lab.node_ip, 8000);
    proxy
        .sync(&[(&lb(json!([format!("{outside}/32")])), &eps)])
        .await;
    assert!(proxy.listing().await.contains("firewall-ips"));

    // The allowed client reaches the load balancer; the other one does not, but still
    // reaches the node port on the same address.
    assert_eq!(who(tcp_from(&lab.outside, outside, ingress)).0, "pod0");
    unanswered(
        tcp_from(&lab.outside, other, ingress),
        "a source outside the ranges",
    );
    assert_eq!(
        who(tcp_from(&lab.outside, other, at(lab.node_ip, 30082))).0,
        "pod0",
        "the node port is not filtered"
    );
    // A pod reaches the cluster IP; the load balancer address only from an allowed
    // source (as upstream, pods are clients like any other).
    let pod = &lab.pods[1];
    assert_eq!(
        who(tcp(&pod.ns, at("10.96.0.20".parse().unwrap(), 8000))).0,
        "pod0"
    );
    unanswered(tcp(&pod.ns, ingress), "a pod outside the ranges");

    // Other ranges, in a partial sync: the other client and the pods are allowed, the
    // first client no longer is.
    let ranges = json!([format!(" {other}/32"), lab.pod_cidr.clone()]);
    proxy.sync(&[(&lb(ranges), &eps)]).await;
    assert_eq!(who(tcp_from(&lab.outside, other, ingress)).0, "pod0");
    assert_eq!(who(tcp(&pod.ns, ingress)).0, "pod0");
    unanswered(
        tcp_from(&lab.outside, outside, ingress),
        "a client no longer allowed",
    );

    // No ranges: everyone.
    proxy.sync(&[(&lb(json!([])), &eps)]).await;
    for from in [outside, other] {
        assert_eq!(who(tcp_from(&lab.outside, from, ingress)).0, "pod0");
    }
}
