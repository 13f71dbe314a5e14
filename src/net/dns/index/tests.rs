//! The index's answers for each kind of Service and name, and how changes reach them.

use super::*;
use hickory_server::proto::rr::RData;
use serde_json::json;

fn ns(name: &str) -> Value {
    json!({"metadata": {"name": name}})
}

fn service(name: &str, spec: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

fn slice(name: &str, svc: &str, endpoints: Value, ports: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    })
}

fn index() -> Index {
    let index = Index::new("cluster.local").unwrap();
    index.namespace_changed(Change::Added(&ns("shop")));
    index.namespace_changed(Change::Added(&ns("empty")));
    index.set_synced();
    index
}

fn ask(index: &Index, name: &str, qtype: RecordType) -> Answer {
    index.lookup(&LowerName::from_str(name).unwrap(), qtype)
}

/// The answer as text: `NXDOMAIN`, `NODATA`, `SERVFAIL`, `FORWARD`, or its records'
/// data (then `+` and the additional records' data).
fn text(answer: Answer) -> String {
    let show = |records: &[Record]| {
        records
            .iter()
            .map(|r| format!("{} {}", r.name, r.data))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match answer {
        Answer::Set(set) if set.answers.is_empty() => "NODATA".into(),
        Answer::Set(set) if set.additionals.is_empty() => show(&set.answers),
        Answer::Set(set) => format!("{} + {}", show(&set.answers), show(&set.additionals)),
        Answer::Made(records) => show(&records),
        Answer::Alias(cname, target) => format!("{} -> {target}", show(&cname.answers)),
        Answer::NoData => "NODATA".into(),
        Answer::NxDomain => "NXDOMAIN".into(),
        Answer::NotReady => "SERVFAIL".into(),
        Answer::Elsewhere => "FORWARD".into(),
    }
}

fn q(index: &Index, name: &str, qtype: RecordType) -> String {
    text(ask(index, name, qtype))
}

#[test]
fn a_cluster_ip_service_has_its_address_its_ports_and_a_ptr() {
    let index = index();
    index.service_changed(Change::Added(&service(
        "web",
        json!({"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"], "ports": [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"port": 9000}]}),
    )));
    let svc = "web.shop.svc.cluster.local.";
    assert_eq!(q(&index, svc, RecordType::A), format!("{svc} 10.96.0.20"));
    // Case does not matter.
    assert_eq!(
        q(&index, "WEB.Shop.SVC.Cluster.Local.", RecordType::A),
        format!("{svc} 10.96.0.20")
    );
    assert_eq!(q(&index, svc, RecordType::AAAA), "NODATA");
    assert_eq!(q(&index, svc, RecordType::TXT), "NODATA");
    assert_eq!(
        q(&index, &format!("_http._tcp.{svc}"), RecordType::SRV),
        format!("_http._tcp.{svc} 0 100 80 {svc} + {svc} 10.96.0.20")
    );
    assert_eq!(
        q(&index, &format!("_dns._udp.{svc}"), RecordType::SRV),
        format!("_dns._udp.{svc} 0 100 53 {svc} + {svc} 10.96.0.20")
    );
    // The port's name exists with no A record; a port of another protocol is no name.
    assert_eq!(
        q(&index, &format!("_http._tcp.{svc}"), RecordType::A),
        "NODATA"
    );
    assert_eq!(
        q(&index, &format!("_http._udp.{svc}"), RecordType::SRV),
        "NXDOMAIN"
    );
    assert_eq!(
        q(&index, &format!("_nope._tcp.{svc}"), RecordType::SRV),
        "NXDOMAIN"
    );
    // SRV of the Service's own name: every port, unnamed too.
    assert_eq!(
        q(&index, svc, RecordType::SRV),
        format!(
            "{svc} 0 33 80 {svc}, {svc} 0 33 53 {svc}, {svc} 0 33 9000 {svc} + {svc} 10.96.0.20"
        )
    );
    assert_eq!(
        q(&index, "20.0.96.10.in-addr.arpa.", RecordType::PTR),
        format!("20.0.96.10.in-addr.arpa. {svc}")
    );
    assert_eq!(
        q(&index, "20.0.96.10.in-addr.arpa.", RecordType::A),
        "NODATA"
    );
    // An address the cluster does not have is the upstream's to answer.
    assert_eq!(
        q(&index, "21.0.96.10.in-addr.arpa.", RecordType::PTR),
        "FORWARD"
    );
    assert_eq!(
        q(&index, "nope.shop.svc.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
}

#[test]
fn a_headless_service_answers_with_its_ready_endpoints() {
    let index = index();
    index.service_changed(Change::Added(&service(
        "db",
        json!({"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}),
    )));
    let svc = "db.shop.svc.cluster.local.";
    // No ready endpoint: NXDOMAIN, as the specification says.
    assert_eq!(q(&index, svc, RecordType::A), "NXDOMAIN");
    index.slice_changed(Change::Added(&slice(
        "db-abc",
        "db",
        json!([
            {"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.42.0.6"], "conditions": {}},
            {"addresses": ["10.42.0.7"], "hostname": "db-2", "conditions": {"ready": false}},
        ]),
        json!([{"name": "pg", "port": 15432, "protocol": "TCP"}]),
    )));
    assert_eq!(
        q(&index, svc, RecordType::A),
        format!("{svc} 10.42.0.5, {svc} 10.42.0.6")
    );
    assert_eq!(q(&index, svc, RecordType::AAAA), "NODATA");
    // Each ready endpoint by its hostname, or its address with dashes.
    assert_eq!(
        q(&index, &format!("db-0.{svc}"), RecordType::A),
        format!("db-0.{svc} 10.42.0.5")
    );
    assert_eq!(
        q(&index, &format!("10-42-0-6.{svc}"), RecordType::A),
        format!("10-42-0-6.{svc} 10.42.0.6")
    );
    assert_eq!(
        q(&index, &format!("db-0.{svc}"), RecordType::AAAA),
        "NODATA"
    );
    assert_eq!(q(&index, &format!("db-2.{svc}"), RecordType::A), "NXDOMAIN");
    // SRV: each ready endpoint on the endpoints' port, its address in the additional
    // section.
    assert_eq!(
        q(&index, &format!("_pg._tcp.{svc}"), RecordType::SRV),
        format!(
            "_pg._tcp.{svc} 0 50 15432 db-0.{svc}, _pg._tcp.{svc} 0 50 15432 10-42-0-6.{svc} \
             + db-0.{svc} 10.42.0.5, 10-42-0-6.{svc} 10.42.0.6"
        )
    );
    assert_eq!(
        q(&index, "5.0.42.10.in-addr.arpa.", RecordType::PTR),
        format!("5.0.42.10.in-addr.arpa. db-0.{svc}")
    );
    assert_eq!(
        q(&index, "6.0.42.10.in-addr.arpa.", RecordType::PTR),
        format!("6.0.42.10.in-addr.arpa. 10-42-0-6.{svc}")
    );
    assert_eq!(
        q(&index, "7.0.42.10.in-addr.arpa.", RecordType::PTR),
        "FORWARD"
    );

    // The endpoint goes: its names and PTR go with it.
    index.slice_changed(Change::Updated {
        old: &json!({}),
        new: &slice(
            "db-abc",
            "db",
            json!([{"addresses": ["10.42.0.6"]}]),
            json!([{"name": "pg", "port": 15432, "protocol": "TCP"}]),
        ),
    });
    assert_eq!(q(&index, &format!("db-0.{svc}"), RecordType::A), "NXDOMAIN");
    assert_eq!(
        q(&index, "5.0.42.10.in-addr.arpa.", RecordType::PTR),
        "FORWARD"
    );
    assert_eq!(q(&index, svc, RecordType::A), format!("{svc} 10.42.0.6"));
    // The slice goes: NXDOMAIN again.
    index.slice_changed(Change::Deleted(&slice(
        "db-abc",
        "db",
        json!([]),
        json!([]),
    )));
    assert_eq!(q(&index, svc, RecordType::A), "NXDOMAIN");
    assert_eq!(
        q(&index, "6.0.42.10.in-addr.arpa.", RecordType::PTR),
        "FORWARD"
    );
}

#[test]
fn endpoints_of_a_cluster_ip_service_have_names_and_ptrs_too() {
    let index = index();
    index.service_changed(Change::Added(&service(
        "web",
        json!({"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}),
    )));
    index.slice_changed(Change::Added(&slice(
        "web-1",
        "web",
        json!([{"addresses": ["10.42.0.9"]}]),
        json!([{"name": "http", "port": 8080}]),
    )));
    let svc = "web.shop.svc.cluster.local.";
    assert_eq!(
        q(&index, &format!("10-42-0-9.{svc}"), RecordType::A),
        format!("10-42-0-9.{svc} 10.42.0.9")
    );
    assert_eq!(
        q(&index, "9.0.42.10.in-addr.arpa.", RecordType::PTR),
        format!("9.0.42.10.in-addr.arpa. 10-42-0-9.{svc}")
    );
    // The Service's SRV is its own port, not the endpoints'.
    assert_eq!(
        q(&index, &format!("_http._tcp.{svc}"), RecordType::SRV),
        format!("_http._tcp.{svc} 0 100 80 {svc} + {svc} 10.96.0.20")
    );
    // A slice relabelled to another Service leaves this one.
    index.slice_changed(Change::Updated {
        old: &json!({}),
        new: &slice(
            "web-1",
            "other",
            json!([{"addresses": ["10.42.0.9"]}]),
            json!([]),
        ),
    });
    assert_eq!(
        q(&index, &format!("10-42-0-9.{svc}"), RecordType::A),
        "NXDOMAIN"
    );
    // The Service goes: its names and PTR go.
    index.service_changed(Change::Deleted(&service("web", json!({}))));
    assert_eq!(q(&index, svc, RecordType::A), "NXDOMAIN");
    assert_eq!(
        q(&index, "20.0.96.10.in-addr.arpa.", RecordType::PTR),
        "FORWARD"
    );
    assert_eq!(index.services(), 0);
}

#[test]
fn dual_stack_services_have_aaaa_and_ip6_ptr() {
    let index = index();
    index.service_changed(Change::Added(&service(
        "v6",
        json!({"clusterIP": "10.96.0.30", "clusterIPs": ["10.96.0.30", "fd00:96::30"],
               "ports": [{"port": 80}]}),
    )));
    let svc = "v6.shop.svc.cluster.local.";
    assert_eq!(
        q(&index, svc, RecordType::AAAA),
        format!("{svc} fd00:96::30")
    );
    let ptr = reverse_name("fd00:96::30".parse().unwrap()).to_string();
    assert!(ptr.ends_with(".6.9.0.0.0.0.d.f.ip6.arpa."), "{ptr}");
    assert_eq!(q(&index, &ptr, RecordType::PTR), format!("{ptr} {svc}"));
    // Upper-case nibbles are the same name.
    assert_eq!(
        q(&index, &ptr.replace(".d.f.", ".D.F."), RecordType::PTR),
        format!("{ptr} {svc}")
    );
    assert_eq!(
        reverse_ip(&Name::from_ascii(&ptr).unwrap()),
        Some("fd00:96::30".parse().unwrap())
    );
}

#[test]
fn an_external_name_service_is_an_alias() {
    let index = index();
    index.service_changed(Change::Added(&service(
        "ext",
        json!({"type": "ExternalName", "externalName": "db.example.org"}),
    )));
    let svc = "ext.shop.svc.cluster.local.";
    assert_eq!(
        q(&index, svc, RecordType::A),
        format!("{svc} db.example.org. -> db.example.org.")
    );
    assert_eq!(
        q(&index, svc, RecordType::CNAME),
        format!("{svc} db.example.org. -> db.example.org.")
    );
    assert_eq!(q(&index, svc, RecordType::SRV), "NODATA");
    assert_eq!(q(&index, &format!("x.{svc}"), RecordType::A), "NXDOMAIN");
    // An address is no name to alias.
    index.service_changed(Change::Updated {
        old: &json!({}),
        new: &service(
            "ext",
            json!({"type": "ExternalName", "externalName": "192.0.2.1"}),
        ),
    });
    assert_eq!(q(&index, svc, RecordType::A), "NXDOMAIN");
}

#[test]
fn namespaces_the_zone_and_its_version_are_names_without_records() {
    let index = index();
    assert_eq!(
        q(&index, "shop.svc.cluster.local.", RecordType::A),
        "NODATA"
    );
    assert_eq!(
        q(&index, "empty.svc.cluster.local.", RecordType::A),
        "NODATA"
    );
    assert_eq!(
        q(&index, "gone.svc.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
    assert_eq!(
        q(&index, "x.gone.svc.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
    assert_eq!(q(&index, "svc.cluster.local.", RecordType::A), "NODATA");
    assert_eq!(q(&index, "pod.cluster.local.", RecordType::A), "NODATA");
    assert_eq!(q(&index, "cluster.local.", RecordType::A), "NODATA");
    assert!(
        q(&index, "cluster.local.", RecordType::SOA)
            .starts_with("cluster.local. ns.dns.cluster.local. hostmaster.cluster.local. ")
    );
    assert_eq!(q(&index, "other.cluster.local.", RecordType::A), "NXDOMAIN");
    assert_eq!(
        q(&index, "a.b.c.d.e.f.svc.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
    assert_eq!(
        q(&index, "dns-version.cluster.local.", RecordType::TXT),
        "dns-version.cluster.local. 1.1.0"
    );
    assert_eq!(
        q(&index, "dns-version.cluster.local.", RecordType::A),
        "NODATA"
    );
    index.namespace_changed(Change::Deleted(&ns("empty")));
    assert_eq!(
        q(&index, "empty.svc.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
}

#[test]
fn pods_are_named_by_their_address_in_existing_namespaces() {
    let index = index();
    assert_eq!(
        q(&index, "10-42-0-5.shop.pod.cluster.local.", RecordType::A),
        "10-42-0-5.shop.pod.cluster.local. 10.42.0.5"
    );
    assert_eq!(
        q(
            &index,
            "10-42-0-5.shop.pod.cluster.local.",
            RecordType::AAAA
        ),
        "NODATA"
    );
    assert_eq!(
        q(&index, "fd00--5.shop.pod.cluster.local.", RecordType::AAAA),
        "fd00--5.shop.pod.cluster.local. fd00::5"
    );
    assert_eq!(
        q(&index, "10-42-0-5.gone.pod.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
    assert_eq!(
        q(&index, "web.shop.pod.cluster.local.", RecordType::A),
        "NXDOMAIN"
    );
    assert_eq!(
        q(&index, "shop.pod.cluster.local.", RecordType::A),
        "NODATA"
    );
}

#[test]
fn other_names_are_forwarded_and_the_zone_waits_for_its_lists() {
    let index = Index::new("Cluster.Local.").unwrap();
    assert_eq!(q(&index, "example.org.", RecordType::A), "FORWARD");
    assert_eq!(q(&index, "local.", RecordType::A), "FORWARD");
    assert_eq!(q(&index, "cluster.local.", RecordType::SOA), "SERVFAIL");
    index.set_synced();
    assert_eq!(q(&index, "x.svc.cluster.local.", RecordType::A), "NXDOMAIN");
    assert!(Index::new("").is_err());
    assert!(Index::new("a..b").is_err());
}

#[test]
fn another_cluster_domain_is_served() {
    let index = Index::new("edge.internal").unwrap();
    index.namespace_changed(Change::Added(&ns("shop")));
    index.set_synced();
    index.service_changed(Change::Added(&service(
        "web",
        json!({"clusterIP": "10.96.0.20", "ports": [{"port": 80}]}),
    )));
    assert_eq!(
        q(&index, "web.shop.svc.edge.internal.", RecordType::A),
        "web.shop.svc.edge.internal. 10.96.0.20"
    );
    assert_eq!(
        q(&index, "web.shop.svc.cluster.local.", RecordType::A),
        "FORWARD"
    );
    let Answer::Set(set) = ask(&index, "web.shop.svc.edge.internal.", RecordType::A) else {
        panic!("a set");
    };
    assert_eq!(set.answers[0].ttl, TTL);
    assert!(matches!(set.answers[0].data, RData::A(_)));
}

#[test]
fn a_dual_stack_headless_service_answers_a_and_aaaa_from_its_slice_of_each_family() {
    let index = index();
    index.service_changed(Change::Added(&service(
        "db",
        json!({"clusterIP": "None", "ipFamilies": ["IPv4", "IPv6"],
               "ports": [{"name": "pg", "port": 5432}]}),
    )));
    let endpoint = |ip: &str| json!([{"addresses": [ip], "hostname": "db-0"}]);
    let ports = json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]);
    index.slice_changed(Change::Added(&slice(
        "db-v4",
        "db",
        endpoint("10.42.0.5"),
        ports.clone(),
    )));
    let mut v6 = slice("db-v6", "db", endpoint("fd42::5"), ports);
    v6["addressType"] = json!("IPv6");
    index.slice_changed(Change::Added(&v6));
    let svc = "db.shop.svc.cluster.local.";
    assert_eq!(q(&index, svc, RecordType::A), format!("{svc} 10.42.0.5"));
    assert_eq!(q(&index, svc, RecordType::AAAA), format!("{svc} fd42::5"));
    let host = format!("db-0.{svc}");
    assert_eq!(q(&index, &host, RecordType::A), format!("{host} 10.42.0.5"));
    assert_eq!(
        q(&index, &host, RecordType::AAAA),
        format!("{host} fd42::5")
    );
    // Its pod by the IPv6 address's name, and the address's PTR.
    assert_eq!(
        q(&index, "fd42--5.shop.pod.cluster.local.", RecordType::AAAA),
        "fd42--5.shop.pod.cluster.local. fd42::5"
    );
    let ptr = reverse_name("fd42::5".parse().unwrap()).to_string();
    assert_eq!(q(&index, &ptr, RecordType::PTR), format!("{ptr} {host}"));
}
