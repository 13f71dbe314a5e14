//! The proxy's commands for given Services and EndpointSlices, exactly.

use serde_json::{Value, json};
use tokio::time::Instant;

use super::model::tests::{opts, service, slice};
use super::model::{all_ports, service_ports};
use super::rules::{self, Layout};
use super::table::{STALE_AFTER, Table};
use super::*;

fn layout() -> Layout {
    Layout::new(&crate::net::Config::default())
}

fn ep(ip: &str, node: &str) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": node})
}

fn http_slice(service: &str, endpoints: Value) -> EndpointSlice {
    slice(
        service,
        &format!("{service}-1"),
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}]),
        endpoints,
    )
}

/// The commands after the table's fixed part, for a table made whole from `services`.
fn full(services: &[Service], slices: &[EndpointSlice]) -> (Table, Vec<String>) {
    let mut t = Table::new(layout());
    let ports = all_ports(services, slices, &opts());
    let mut by_service: std::collections::BTreeMap<String, Vec<(PortName, ServicePort)>> =
        Default::default();
    for (name, sp) in ports {
        by_service
            .entry(name.service())
            .or_default()
            .push((name, sp));
    }
    for (key, ports) in &by_service {
        assert!(t.set_service(key, ports).is_empty());
    }
    let c = t.commands(Instant::now());
    assert_eq!(
        c[..3],
        [
            "add table ip berth",
            "delete table ip berth",
            "add table ip berth"
        ]
    );
    let base = rules::base(&layout());
    assert_eq!(c[3..3 + base.len()], base[..]);
    (t, c[3 + base.len()..].to_vec())
}

/// Sets one Service's ports from `svc` and `slices`.
fn set(t: &mut Table, svc: &Service, slices: &[EndpointSlice]) {
    let key = format!(
        "default/{}",
        svc.metadata.name.as_deref().unwrap_or_default()
    );
    t.set_service(&key, &service_ports(svc, slices.iter(), &opts()));
}

const INTERNAL_2: [&str; 3] = [
    "add chain ip berth internal-tcp-2",
    "add rule ip berth internal-tcp-2 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
    "add rule ip berth internal-tcp-2 meta l4proto tcp dnat ip addr . port to ip daddr . th dport . numgen random mod 2 map @endpoints-tcp",
];

fn web() -> Service {
    service(
        "web",
        json!({"clusterIP": "10.96.0.5", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
    )
}

#[test]
fn the_fixed_part_hooks_the_chains_and_guards_the_addresses() {
    let base = rules::base(&layout());
    for want in [
        "add map ip berth service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
        "add chain ip berth nat-prerouting { type nat hook prerouting priority -100; policy accept; }",
        "add rule ip berth guard ip daddr 10.96.0.0/16 reject",
        "add rule ip berth filter-postrouting ip daddr 10.42.0.0/16 oifname != \"berth0\" drop",
        "add rule ip berth nat-postrouting ip saddr 10.42.0.0/16 ip daddr != 10.42.0.0/16 oifname != \"berth0\" masquerade",
        "add rule ip berth services fib daddr type local meta l4proto . th dport vmap @service-nodeports",
        "add rule ip berth masquerading ct status dnat ip saddr . ip daddr @hairpin jump mark-for-masquerade",
    ] {
        assert!(base.iter().any(|c| c == want), "{want}\nnot in\n{base:#?}");
    }
}

#[test]
fn a_cluster_ip_is_map_elements_and_a_shared_chain() {
    let s = http_slice("web", json!([ep("10.42.0.2", "n1"), ep("10.42.0.3", "n2")]));
    let (_, c) = full(&[web()], &[s]);
    let mut want: Vec<&str> = INTERNAL_2.to_vec();
    want.extend([
        "add element ip berth service-ips { 10.96.0.5 . tcp . 80 : goto internal-tcp-2 }",
        "add element ip berth endpoints-tcp { 10.96.0.5 . 80 . 0 : 10.42.0.2 . 8080, 10.96.0.5 . 80 . 1 : 10.42.0.3 . 8080 }",
        "add element ip berth hairpin { 10.42.0.2 . 10.42.0.2, 10.42.0.3 . 10.42.0.3 }",
    ]);
    assert_eq!(c, want);
}

#[test]
fn node_ports_and_load_balancer_ips_are_external_destinations() {
    let mut svc = service(
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.7",
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
    );
    svc.status = serde_json::from_value(
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}),
    )
    .unwrap();
    let s = http_slice("lb", json!([ep("10.42.0.2", "n1")]));
    let (_, c) = full(&[svc], &[s]);
    assert_eq!(
        c,
        [
            "add chain ip berth external-tcp-1",
            "add chain ip berth internal-tcp-1",
            "add chain ip berth nodeport-tcp-1",
            "add rule ip berth external-tcp-1 jump mark-for-masquerade",
            "add rule ip berth external-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . th dport . numgen random mod 1 map @endpoints-tcp",
            "add rule ip berth internal-tcp-1 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
            "add rule ip berth internal-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . th dport . numgen random mod 1 map @endpoints-tcp",
            "add rule ip berth nodeport-tcp-1 jump mark-for-masquerade",
            "add rule ip berth nodeport-tcp-1 meta l4proto tcp dnat ip addr . port to th dport . numgen random mod 1 map @nodeport-endpoints-tcp",
            "add element ip berth service-ips { 10.96.0.7 . tcp . 80 : goto internal-tcp-1, 192.0.2.1 . tcp . 80 : goto external-tcp-1 }",
            "add element ip berth service-nodeports { tcp . 30080 : goto nodeport-tcp-1 }",
            "add element ip berth endpoints-tcp { 10.96.0.7 . 80 . 0 : 10.42.0.2 . 8080, 192.0.2.1 . 80 . 0 : 10.42.0.2 . 8080 }",
            "add element ip berth nodeport-endpoints-tcp { 30080 . 0 : 10.42.0.2 . 8080 }",
            "add element ip berth hairpin { 10.42.0.2 . 10.42.0.2 }",
        ]
    );
}

#[test]
fn services_without_endpoints_are_rejected_and_headless_ones_get_nothing() {
    let empty = service(
        "empty",
        json!({"type": "NodePort", "clusterIP": "10.96.0.8",
               "ports": [{"name": "http", "port": 80, "nodePort": 30081}]}),
    );
    let headless = service(
        "headless",
        json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}),
    );
    let external = service(
        "ext",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    );
    let s = http_slice("headless", json!([ep("10.42.0.2", "n1")]));
    let (t, c) = full(&[empty, headless, external], &[s]);
    assert_eq!(
        c,
        [
            "add element ip berth no-endpoint-services { 10.96.0.8 . tcp . 80 : goto reject-chain }",
            "add element ip berth no-endpoint-nodeports { tcp . 30081 : goto reject-chain }",
        ]
    );
    assert_eq!(t.len(), 1);
}

#[test]
fn local_policies_use_this_nodes_endpoints_and_drop_without_them() {
    let svc = service(
        "loc",
        json!({"type": "NodePort", "clusterIP": "10.96.0.9",
               "internalTrafficPolicy": "Local", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "nodePort": 30082}]}),
    );
    let s = http_slice("loc", json!([ep("10.42.0.2", "n1"), ep("10.42.0.3", "n2")]));
    let (_, c) = full(std::slice::from_ref(&svc), &[s]);
    assert_eq!(
        c,
        [
            "add chain ip berth internal-tcp-1",
            "add chain ip berth nodeport-local-tcp-2-1",
            "add rule ip berth internal-tcp-1 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
            "add rule ip berth internal-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . th dport . numgen random mod 1 map @endpoints-tcp",
            "add rule ip berth nodeport-local-tcp-2-1 ip saddr 10.42.0.0/16 meta l4proto tcp dnat ip addr . port to th dport . numgen random mod 2 map @nodeport-endpoints-tcp",
            "add rule ip berth nodeport-local-tcp-2-1 fib saddr type local jump mark-for-masquerade",
            "add rule ip berth nodeport-local-tcp-2-1 fib saddr type local meta l4proto tcp dnat ip addr . port to th dport . numgen random mod 2 map @nodeport-endpoints-tcp",
            "add rule ip berth nodeport-local-tcp-2-1 meta l4proto tcp dnat ip addr . port to th dport . numgen random mod 1 map @nodeport-local-endpoints-tcp",
            "add element ip berth service-ips { 10.96.0.9 . tcp . 80 : goto internal-tcp-1 }",
            "add element ip berth service-nodeports { tcp . 30082 : goto nodeport-local-tcp-2-1 }",
            "add element ip berth endpoints-tcp { 10.96.0.9 . 80 . 0 : 10.42.0.2 . 8080 }",
            "add element ip berth nodeport-endpoints-tcp { 30082 . 0 : 10.42.0.2 . 8080, 30082 . 1 : 10.42.0.3 . 8080 }",
            "add element ip berth nodeport-local-endpoints-tcp { 30082 . 0 : 10.42.0.2 . 8080 }",
            "add element ip berth hairpin { 10.42.0.2 . 10.42.0.2, 10.42.0.3 . 10.42.0.3 }",
        ]
    );
    // Only another node's endpoint: cluster IP traffic is dropped, node port traffic
    // from pods and the node still reaches it.
    let s = http_slice("loc", json!([ep("10.42.0.3", "n2")]));
    let (_, c) = full(&[svc], &[s]);
    assert_eq!(
        c,
        [
            "add chain ip berth nodeport-local-tcp-1-0",
            "add rule ip berth nodeport-local-tcp-1-0 ip saddr 10.42.0.0/16 meta l4proto tcp dnat ip addr . port to th dport . numgen random mod 1 map @nodeport-endpoints-tcp",
            "add rule ip berth nodeport-local-tcp-1-0 fib saddr type local jump mark-for-masquerade",
            "add rule ip berth nodeport-local-tcp-1-0 fib saddr type local meta l4proto tcp dnat ip addr . port to th dport . numgen random mod 1 map @nodeport-endpoints-tcp",
            "add element ip berth service-nodeports { tcp . 30082 : goto nodeport-local-tcp-1-0 }",
            "add element ip berth no-endpoint-services { 10.96.0.9 . tcp . 80 : drop }",
            "add element ip berth no-endpoint-nodeports { tcp . 30082 : drop }",
            "add element ip berth nodeport-endpoints-tcp { 30082 . 0 : 10.42.0.3 . 8080 }",
            "add element ip berth hairpin { 10.42.0.3 . 10.42.0.3 }",
        ]
    );
}

#[test]
fn session_affinity_keeps_a_chain_and_a_timed_set_per_endpoint() {
    let svc = service(
        "sticky",
        json!({"clusterIP": "10.96.0.6", "sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
               "ports": [{"name": "http", "port": 80}]}),
    );
    let s = http_slice(
        "sticky",
        json!([ep("10.42.0.2", "n1"), ep("10.42.0.3", "n1")]),
    );
    let (_, c) = full(&[svc], &[s]);
    let sets: Vec<&String> = c.iter().filter(|c| c.starts_with("add set")).collect();
    assert_eq!(sets.len(), 2, "{c:#?}");
    assert!(sets[0].ends_with("{ type ipv4_addr; flags dynamic,timeout; timeout 60s; }"));
    let chain = c
        .iter()
        .find_map(|c| c.strip_prefix("add chain ip berth service-"))
        .expect("a chain of the Service");
    assert!(chain.ends_with("-default/sticky/tcp/http"), "{chain}");
    let rules: Vec<&str> = c
        .iter()
        .filter_map(|c| c.strip_prefix(&format!("add rule ip berth service-{chain} ")))
        .collect();
    assert_eq!(rules.len(), 4, "{rules:#?}");
    assert_eq!(
        rules[0],
        "ip daddr 10.96.0.6 tcp dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade"
    );
    assert!(rules[1].starts_with("ip saddr @affinity-") && rules[1].contains(" goto endpoint-"));
    assert!(rules[3].starts_with("numgen random mod 2 vmap { 0 : goto endpoint-"));
    let endpoint_rules: Vec<&String> = c
        .iter()
        .filter(|c| c.starts_with("add rule ip berth endpoint-"))
        .collect();
    assert_eq!(endpoint_rules.len(), 4);
    assert!(
        endpoint_rules[0].contains(" update @affinity-")
            && endpoint_rules[0].ends_with(" { ip saddr }")
    );
    assert!(
        endpoint_rules
            .iter()
            .any(|r| r.ends_with("meta l4proto tcp dnat to 10.42.0.3:8080"))
    );
    assert!(c.contains(&format!(
        "add element ip berth service-ips {{ 10.96.0.6 . tcp . 80 : goto service-{chain} }}"
    )));
}

#[test]
fn a_change_is_only_its_delta_and_unused_chains_go_later() {
    let s = http_slice("web", json!([ep("10.42.0.2", "n1"), ep("10.42.0.3", "n2")]));
    let (mut t, _) = full(&[web()], &[s]);
    assert_eq!(
        t.commands(Instant::now()),
        Vec::<String>::new(),
        "nothing changed"
    );

    // One endpoint replaced: two elements.
    let s = http_slice("web", json!([ep("10.42.0.2", "n1"), ep("10.42.0.4", "n2")]));
    set(&mut t, &web(), &[s]);
    assert_eq!(
        t.commands(Instant::now()),
        [
            "delete element ip berth endpoints-tcp { 10.96.0.5 . 80 . 1 }",
            "delete element ip berth hairpin { 10.42.0.3 . 10.42.0.3 }",
            "add element ip berth endpoints-tcp { 10.96.0.5 . 80 . 1 : 10.42.0.4 . 8080 }",
            "add element ip berth hairpin { 10.42.0.4 . 10.42.0.4 }",
        ]
    );

    // One endpoint fewer: another shared chain; the unused one is flushed now and
    // deleted once it has been unused for a while.
    let s = http_slice("web", json!([ep("10.42.0.2", "n1")]));
    set(&mut t, &web(), &[s]);
    let now = Instant::now();
    assert_eq!(
        t.commands(now),
        [
            "add chain ip berth internal-tcp-1",
            "add rule ip berth internal-tcp-1 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
            "add rule ip berth internal-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . th dport . numgen random mod 1 map @endpoints-tcp",
            "delete element ip berth service-ips { 10.96.0.5 . tcp . 80 }",
            "delete element ip berth endpoints-tcp { 10.96.0.5 . 80 . 1 }",
            "delete element ip berth hairpin { 10.42.0.4 . 10.42.0.4 }",
            "add element ip berth service-ips { 10.96.0.5 . tcp . 80 : goto internal-tcp-1 }",
            "flush chain ip berth internal-tcp-2",
        ]
    );
    assert_eq!(t.next_cleanup(), Some(now + STALE_AFTER));
    assert_eq!(t.commands(now), Vec::<String>::new());
    assert_eq!(
        t.commands(now + STALE_AFTER),
        ["delete chain ip berth internal-tcp-2"]
    );
    assert_eq!(t.next_cleanup(), None);

    // Back to two before the chain went: it is filled again, not made.
    let s = http_slice("web", json!([ep("10.42.0.2", "n1")]));
    set(&mut t, &web(), &[s]);
    let two = http_slice("web", json!([ep("10.42.0.2", "n1"), ep("10.42.0.3", "n1")]));
    set(&mut t, &web(), &[two]);
    let c = t.commands(now);
    assert_eq!(c[..3], INTERNAL_2[..], "{c:#?}");

    // The Service deleted: its elements go, and the chain later.
    t.set_service("default/web", &[]);
    assert_eq!(
        t.commands(now),
        [
            "delete element ip berth service-ips { 10.96.0.5 . tcp . 80 }",
            "delete element ip berth endpoints-tcp { 10.96.0.5 . 80 . 0, 10.96.0.5 . 80 . 1 }",
            "delete element ip berth hairpin { 10.42.0.2 . 10.42.0.2, 10.42.0.3 . 10.42.0.3 }",
            "flush chain ip berth internal-tcp-2",
        ]
    );
    assert!(t.is_empty());
}

#[test]
fn a_destination_another_service_holds_is_refused() {
    let a = service(
        "a",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.11", "externalIPs": ["192.0.2.1"],
               "ports": [{"name": "http", "port": 80, "nodePort": 30090}]}),
    );
    let b = service(
        "b",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.12", "externalIPs": ["192.0.2.1"],
               "ports": [{"name": "http", "port": 80, "nodePort": 30091}]}),
    );
    let mut t = Table::new(layout());
    t.set_service("default/a", &service_ports(&a, [].iter(), &opts()));
    let refused = t.set_service("default/b", &service_ports(&b, [].iter(), &opts()));
    assert_eq!(refused.len(), 1);
    assert_eq!(
        (refused[0].dest.as_str(), refused[0].holder.as_str()),
        ("192.0.2.1 . tcp . 80", "default/a")
    );
    let c = t.commands(Instant::now());
    assert!(c.contains(&"add element ip berth no-endpoint-services { 10.96.0.11 . tcp . 80 : goto reject-chain, 192.0.2.1 . tcp . 80 : goto reject-chain, 10.96.0.12 . tcp . 80 : goto reject-chain }".to_string()), "{c:#?}");
}

#[test]
fn services_and_slices_the_proxy_cannot_read_are_left_out() {
    let odd = [
        service(
            "a",
            json!({"clusterIP": "10.96.0.20", "ports": [{"port": 0}]}),
        ),
        service(
            "b",
            json!({"clusterIP": "not-an-ip", "ports": [{"port": 80}]}),
        ),
        service("c", json!({"clusterIP": "::1", "ports": [{"port": 80}]})),
        service("d", json!({})),
    ];
    let s = slice(
        "a",
        "a-1",
        json!([{"port": 70000}]),
        json!([{"addresses": ["10.42.0.300"]}]),
    );
    let (t, c) = full(&odd, &[s]);
    assert!(c.is_empty(), "{c:#?}");
    assert!(t.is_empty());
}

#[test]
fn tracked_objects_follow_the_informers_changes() {
    let mut tr = Tracked::default();
    let svc = json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "web", "namespace": "default"},
                     "spec": {"clusterIP": "10.96.0.5", "ports": [{"name": "http", "port": 80}]}});
    let sl = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "web-1", "namespace": "default",
                                 "labels": {"kubernetes.io/service-name": "web"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": [{"addresses": ["10.42.0.2"]}]});
    tr.on_service(Change::Added(&svc));
    tr.on_slice(Change::Added(&sl));
    assert_eq!(
        std::mem::take(&mut tr.dirty)
            .into_iter()
            .collect::<Vec<_>>(),
        ["default/web"]
    );
    let ports = tr.ports("default/web", &opts());
    assert_eq!(ports[0].1.cluster.len(), 1);
    // Relabelled to another Service: both change.
    let mut moved = sl.clone();
    moved["metadata"]["labels"]["kubernetes.io/service-name"] = json!("api");
    tr.on_slice(Change::Updated {
        old: &sl,
        new: &moved,
    });
    assert_eq!(
        std::mem::take(&mut tr.dirty)
            .into_iter()
            .collect::<Vec<_>>(),
        ["default/api", "default/web"]
    );
    assert!(tr.ports("default/web", &opts())[0].1.cluster.is_empty());
    tr.on_service(Change::Deleted(&svc));
    assert!(tr.ports("default/web", &opts()).is_empty());
}

fn host_port(host_ip: Option<&str>, proto: Proto, port: u16, pod_ip: &str, to: u16) -> HostPort {
    HostPort {
        host_ip: host_ip.map(|h| h.parse().unwrap()),
        proto,
        port,
        target: Target {
            ip: pod_ip.parse().unwrap(),
            port: to,
        },
    }
}

#[test]
fn host_ports_come_before_services_on_the_nodes_own_addresses() {
    let base = rules::base(&layout());
    let at = |want: &str| {
        base.iter()
            .position(|c| c == want)
            .unwrap_or_else(|| panic!("{want}\nnot in\n{base:#?}"))
    };
    for hook in ["nat-prerouting", "nat-output"] {
        assert!(
            at(&format!("add rule ip berth {hook} jump hostports"))
                < at(&format!("add rule ip berth {hook} jump services"))
        );
    }
    for want in [
        "add map ip berth hostport-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
        "add map ip berth hostport-any { type inet_proto . inet_service : verdict; }",
        "add map ip berth hostport-targets-udp { typeof ip daddr . th dport : ip daddr . udp dport; }",
        "add map ip berth hostport-any-targets-sctp { typeof th dport : ip daddr . sctp dport; }",
        "add rule ip berth hostports fib daddr type != local return",
        "add rule ip berth hostports ip daddr . meta l4proto . th dport vmap @hostport-ips",
        "add rule ip berth hostports meta l4proto . th dport vmap @hostport-any",
    ] {
        at(want);
    }
}

#[test]
fn a_pods_host_ports_are_elements_and_go_with_it() {
    let s = http_slice("web", json!([ep("10.42.0.2", "n1")]));
    let (mut t, _) = full(&[web()], &[s]);
    let ports = [
        host_port(None, Proto::Tcp, 80, "10.42.0.2", 8080),
        host_port(Some("127.0.0.1"), Proto::Tcp, 81, "10.42.0.2", 8081),
    ];
    assert!(t.set_pod("default/a", &ports).is_empty());
    assert_eq!(t.pods(), 1);
    // The pod is also the Service's endpoint: its hairpin element is there already.
    assert_eq!(
        t.commands(Instant::now()),
        [
            "add chain ip berth hostport-any-tcp",
            "add chain ip berth hostport-tcp",
            "add rule ip berth hostport-any-tcp fib saddr type local jump mark-for-masquerade",
            "add rule ip berth hostport-any-tcp meta l4proto tcp dnat ip addr . port to th dport map @hostport-any-targets-tcp",
            "add rule ip berth hostport-tcp fib saddr type local jump mark-for-masquerade",
            "add rule ip berth hostport-tcp meta l4proto tcp dnat ip addr . port to ip daddr . th dport map @hostport-targets-tcp",
            "add element ip berth hostport-ips { 127.0.0.1 . tcp . 81 : goto hostport-tcp }",
            "add element ip berth hostport-any { tcp . 80 : goto hostport-any-tcp }",
            "add element ip berth hostport-targets-tcp { 127.0.0.1 . 81 : 10.42.0.2 . 8081 }",
            "add element ip berth hostport-any-targets-tcp { 80 : 10.42.0.2 . 8080 }",
        ]
    );
    // A status update that changes nothing changes nothing.
    assert!(t.set_pod("default/a", &ports).is_empty());
    assert_eq!(t.commands(Instant::now()), Vec::<String>::new());
    // The pod gets another address (a new sandbox): only the targets change.
    let moved = ports.map(|p| HostPort {
        target: Target {
            ip: "10.42.0.3".parse().unwrap(),
            ..p.target
        },
        ..p
    });
    t.set_pod("default/a", &moved);
    assert_eq!(
        t.commands(Instant::now()),
        [
            "delete element ip berth hostport-targets-tcp { 127.0.0.1 . 81 }",
            "delete element ip berth hostport-any-targets-tcp { 80 }",
            "add element ip berth hairpin { 10.42.0.3 . 10.42.0.3 }",
            "add element ip berth hostport-targets-tcp { 127.0.0.1 . 81 : 10.42.0.3 . 8081 }",
            "add element ip berth hostport-any-targets-tcp { 80 : 10.42.0.3 . 8080 }",
        ]
    );
    // The pod goes: its elements now, its chains a moment later; the Service's
    // endpoint keeps its hairpin element.
    t.set_pod("default/a", &[]);
    let now = Instant::now();
    assert_eq!(
        t.commands(now),
        [
            "delete element ip berth hairpin { 10.42.0.3 . 10.42.0.3 }",
            "delete element ip berth hostport-ips { 127.0.0.1 . tcp . 81 }",
            "delete element ip berth hostport-any { tcp . 80 }",
            "delete element ip berth hostport-targets-tcp { 127.0.0.1 . 81 }",
            "delete element ip berth hostport-any-targets-tcp { 80 }",
            "flush chain ip berth hostport-any-tcp",
            "flush chain ip berth hostport-tcp",
        ]
    );
    assert_eq!(t.pods(), 0);
    assert_eq!(
        t.commands(now + STALE_AFTER),
        [
            "delete chain ip berth hostport-any-tcp",
            "delete chain ip berth hostport-tcp"
        ]
    );
}

#[test]
fn a_whole_table_has_the_pods_host_ports_after_the_services() {
    let mut t = Table::new(layout());
    t.set_pod(
        "default/dns",
        &[host_port(
            Some("192.0.2.1"),
            Proto::Udp,
            53,
            "10.42.0.9",
            5353,
        )],
    );
    t.set_service(
        "default/web",
        &service_ports(
            &web(),
            [http_slice("web", json!([ep("10.42.0.2", "n1")]))].iter(),
            &opts(),
        ),
    );
    let c = t.commands(Instant::now());
    let base = rules::base(&layout()).len();
    let elements: Vec<&str> = c[3 + base..]
        .iter()
        .filter(|c| c.starts_with("add element"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        elements,
        [
            "add element ip berth service-ips { 10.96.0.5 . tcp . 80 : goto internal-tcp-1 }",
            "add element ip berth endpoints-tcp { 10.96.0.5 . 80 . 0 : 10.42.0.2 . 8080 }",
            "add element ip berth hairpin { 10.42.0.2 . 10.42.0.2, 10.42.0.9 . 10.42.0.9 }",
            "add element ip berth hostport-ips { 192.0.2.1 . udp . 53 : goto hostport-udp }",
            "add element ip berth hostport-targets-udp { 192.0.2.1 . 53 : 10.42.0.9 . 5353 }",
        ]
    );
}

#[test]
fn a_host_port_another_pod_holds_is_refused_until_it_lets_go() {
    let pod = |name: &str, ip: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"nodeName": "n1", "containers": [{"name": "c",
                   "ports": [{"containerPort": 8080, "hostPort": 80}]}]},
               "status": {"phase": "Running", "podIP": ip}})
    };
    let (a, b) = (pod("a", "10.42.0.2"), pod("b", "10.42.0.3"));
    let mut tr = Tracked::default();
    assert!(tr.on_pod(Change::Added(&b), &opts()));
    assert!(tr.on_pod(Change::Added(&a), &opts()));
    let mut t = Table::new(layout());
    sync_pods(&mut tr, &mut t);
    t.commands(Instant::now());
    assert_eq!(
        tr.refused_pods.iter().collect::<Vec<_>>(),
        ["default/b"],
        "the first in order holds it"
    );
    // The holder goes while nothing else changes: the refused pod gets the port.
    assert!(tr.on_pod(Change::Deleted(&a), &opts()));
    sync_pods(&mut tr, &mut t);
    assert!(tr.refused_pods.is_empty());
    assert_eq!(
        t.commands(Instant::now()),
        [
            "delete element ip berth hairpin { 10.42.0.2 . 10.42.0.2 }",
            "delete element ip berth hostport-any-targets-tcp { 80 }",
            "add element ip berth hairpin { 10.42.0.3 . 10.42.0.3 }",
            "add element ip berth hostport-any-targets-tcp { 80 : 10.42.0.3 . 8080 }",
        ]
    );
    // One pod hands its port to another in one sync, whatever their order.
    let c = pod("c", "10.42.0.4");
    let mut b_elsewhere = b.clone();
    b_elsewhere["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(81);
    assert!(tr.on_pod(Change::Added(&c), &opts()));
    assert!(tr.on_pod(
        Change::Updated {
            old: &b,
            new: &b_elsewhere
        },
        &opts()
    ));
    sync_pods(&mut tr, &mut t);
    assert!(tr.refused_pods.is_empty(), "{:?}", tr.refused_pods);
    let c = t.commands(Instant::now());
    assert!(
        c.contains(&"add element ip berth hostport-any-targets-tcp { 80 : 10.42.0.4 . 8080, 81 : 10.42.0.3 . 8080 }".to_string()),
        "{c:#?}"
    );
}

#[test]
fn pods_without_host_ports_or_changes_to_them_wake_nothing() {
    let mut tr = Tracked::default();
    let plain = json!({"metadata": {"name": "p", "namespace": "default"},
                       "spec": {"nodeName": "n1", "containers": [{"name": "c",
                           "ports": [{"containerPort": 8080}]}]},
                       "status": {"phase": "Running", "podIP": "10.42.0.2"}});
    assert!(!tr.on_pod(Change::Added(&plain), &opts()));
    let mut with = plain.clone();
    with["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(80);
    let mut pending = with.clone();
    pending["status"] = json!({"phase": "Pending"});
    assert!(
        !tr.on_pod(Change::Added(&pending), &opts()),
        "no address yet"
    );
    assert!(tr.on_pod(
        Change::Updated {
            old: &pending,
            new: &with
        },
        &opts()
    ));
    let mut ready = with.clone();
    ready["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    assert!(!tr.on_pod(
        Change::Updated {
            old: &with,
            new: &ready
        },
        &opts()
    ));
    let mut done = ready.clone();
    done["status"]["phase"] = json!("Succeeded");
    assert!(tr.on_pod(
        Change::Updated {
            old: &ready,
            new: &done
        },
        &opts()
    ));
    assert!(tr.host_ports.is_empty());
    assert!(!tr.on_pod(Change::Deleted(&done), &opts()));
}

fn guarded_lb(ranges: Value) -> Service {
    let mut svc = service(
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.7",
               "externalIPs": ["192.0.2.9"],
               "loadBalancerSourceRanges": ranges,
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
    );
    svc.status = serde_json::from_value(
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}),
    )
    .unwrap();
    svc
}

fn firewall_commands(c: &[String]) -> Vec<&str> {
    c.iter()
        .map(String::as_str)
        .filter(|c| c.contains("firewall"))
        .collect()
}

#[test]
fn source_ranges_guard_the_load_balancer_ips_before_dnat() {
    let base = rules::base(&layout());
    for want in [
        "add map ip berth firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
        "add chain ip berth filter-prerouting-pre-dnat { type filter hook prerouting priority -110; policy accept; }",
        "add chain ip berth filter-output-pre-dnat { type filter hook output priority -110; policy accept; }",
        "add rule ip berth filter-prerouting-pre-dnat ct state new jump firewall-check",
        "add rule ip berth filter-output-pre-dnat ct state new jump firewall-check",
        "add rule ip berth firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips",
    ] {
        assert!(base.iter().any(|c| c == want), "{want}\nnot in\n{base:#?}");
    }

    // Padded, overlapping, IPv6 and unreadable ranges: the IPv4 ones, merged. Only the
    // load balancer IP is guarded, not the external IP, the cluster IP or the node port.
    let ranges = json!([
        " 10.0.0.0/8",
        "10.1.0.0/16 ",
        "198.51.100.7/32",
        "2001:db8::/64",
        "x"
    ]);
    let s = http_slice("lb", json!([ep("10.42.0.2", "n1")]));
    let (mut t, c) = full(&[guarded_lb(ranges)], std::slice::from_ref(&s));
    let chain = "firewall-272798AB-default/lb/tcp/http";
    assert_eq!(
        firewall_commands(&c),
        [
            format!("add chain ip berth {chain}"),
            format!("add rule ip berth {chain} ip saddr != {{ 10.0.0.0/8, 198.51.100.7/32 }} drop"),
            format!("add element ip berth firewall-ips {{ 192.0.2.1 . tcp . 80 : goto {chain} }}"),
        ]
    );

    // Other ranges: the chain is rewritten, in one transaction, nothing else.
    set(
        &mut t,
        &guarded_lb(json!(["203.0.113.0/24"])),
        std::slice::from_ref(&s),
    );
    assert_eq!(
        t.commands(Instant::now()),
        [
            format!("flush chain ip berth {chain}"),
            format!("add rule ip berth {chain} ip saddr != {{ 203.0.113.0/24 }} drop"),
        ]
    );

    // Without endpoints the firewall stays (kube-proxy's too): the rejection is for the
    // allowed sources.
    set(&mut t, &guarded_lb(json!(["203.0.113.0/24"])), &[]);
    let c = t.commands(Instant::now());
    assert!(firewall_commands(&c).is_empty(), "{c:#?}");

    // No IPv4 range left (only IPv6): no firewall, as kube-proxy, which filters by the
    // ranges of the Service's family. Its element goes now, its chain later.
    set(&mut t, &guarded_lb(json!(["2001:db8::/64"])), &[s]);
    let now = Instant::now();
    let c = t.commands(now);
    assert_eq!(
        firewall_commands(&c),
        [
            "delete element ip berth firewall-ips { 192.0.2.1 . tcp . 80 }".to_string(),
            format!("flush chain ip berth {chain}"),
        ]
    );
    assert_eq!(
        t.commands(now + STALE_AFTER),
        [format!("delete chain ip berth {chain}")]
    );
}

#[test]
fn source_ranges_are_for_load_balancers_only() {
    let mut svc = guarded_lb(json!(["10.0.0.0/8"]));
    svc.spec.as_mut().unwrap().type_ = Some("NodePort".into());
    let s = http_slice("lb", json!([ep("10.42.0.2", "n1")]));
    let (_, c) = full(&[svc], &[s]);
    assert!(firewall_commands(&c).is_empty(), "{c:#?}");
}
