//! The cluster DNS end to end: a real server with its controllers, `net::dns::start` on
//! loopback, Services, pods and namespaces made through the API, and every record type
//! asked over UDP and TCP with hickory's client. Names outside the cluster go to an
//! upstream server of the test's own on loopback, never to this machine's resolvers.
//! No node agent runs: the tests set pods' addresses and readiness themselves.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use berth::net::dns::{self, DnsConfig, Upstream};
use berth::supervisor::Supervisor;
use hickory_server::net::client::{Client, ClientHandle};
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::net::tcp::TcpClientStream;
use hickory_server::net::udp::UdpClientStream;
use hickory_server::proto::op::{Message, ResponseCode};
use hickory_server::proto::rr::rdata::A;
use hickory_server::proto::rr::{DNSClass, Name, RData, Record, RecordType};
use serde_json::{Value, json};

use crate::support::{TestServer, eventually, within};

/// A DNS server of the test's own on loopback: `example.org` has A 192.0.2.80, every
/// other name is NXDOMAIN. Stops when dropped.
struct FakeUpstream {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeUpstream {
    async fn start() -> Self {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let mut answer = Message::response(query.metadata.id, query.metadata.op_code);
                answer.metadata.recursion_available = true;
                answer.queries = query.queries.clone();
                let q = &query.queries[0];
                if q.name().to_ascii().eq_ignore_ascii_case("example.org.") {
                    if q.query_type() == RecordType::A {
                        answer.add_answer(Record::from_rdata(
                            q.name().clone(),
                            60,
                            RData::A(A(std::net::Ipv4Addr::new(192, 0, 2, 80))),
                        ));
                    }
                } else {
                    answer.metadata.response_code = ResponseCode::NXDomain;
                }
                let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
            }
        });
        FakeUpstream { address, task }
    }
}

/// One answer, as text.
#[derive(Debug)]
struct Reply {
    code: ResponseCode,
    authoritative: bool,
    /// `name data` of each answer record.
    answers: Vec<String>,
    additionals: Vec<String>,
    /// Whether the authority section holds the zone's SOA.
    soa: bool,
}

fn show(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| format!("{} {}", r.name, r.data))
        .collect()
}

/// Asks the DNS server at `server` over UDP, or TCP.
async fn ask(server: SocketAddr, tcp: bool, name: &str, qtype: RecordType) -> Reply {
    let provider = TokioRuntimeProvider::default();
    let (mut client, background) = if tcp {
        let (stream, handle) =
            TcpClientStream::new(server, None, Some(Duration::from_secs(5)), provider);
        let stream = stream.await.expect("a TCP connection to the DNS server");
        let (client, background) = Client::<TokioRuntimeProvider>::new(stream, handle);
        (client, tokio::spawn(background))
    } else {
        let stream = UdpClientStream::builder(server, provider)
            .with_timeout(Some(Duration::from_secs(5)))
            .build();
        let (client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
        (client, tokio::spawn(background))
    };
    let response = client
        .query(Name::from_ascii(name).unwrap(), DNSClass::IN, qtype)
        .await
        .unwrap_or_else(|e| panic!("{name} {qtype}: {e}"));
    background.abort();
    Reply {
        code: response.metadata.response_code,
        authoritative: response.metadata.authoritative,
        answers: show(&response.answers),
        additionals: show(&response.additionals),
        soa: response
            .authorities
            .iter()
            .any(|r| r.record_type() == RecordType::SOA),
    }
}

/// Asks over UDP and TCP, checks both answer alike, and returns the UDP one.
async fn both(server: SocketAddr, name: &str, qtype: RecordType) -> Reply {
    let udp = ask(server, false, name, qtype).await;
    let tcp = ask(server, true, name, qtype).await;
    assert_eq!(
        (udp.code, &udp.answers, &udp.additionals, udp.soa),
        (tcp.code, &tcp.answers, &tcp.additionals, tcp.soa),
        "{name} {qtype} over UDP and TCP"
    );
    udp
}

/// Waits until `name` has answers of `qtype` (the server learns of changes through
/// its informers).
async fn answered(server: SocketAddr, name: &str, qtype: RecordType, count: usize) -> Reply {
    eventually(
        10,
        &format!("{name} {qtype} has {count} answers"),
        || async {
            let reply = ask(server, false, name, qtype).await;
            if reply.answers.len() == count {
                Ok(reply)
            } else {
                Err(format!("{reply:?}"))
            }
        },
    )
    .await
}

fn no_data(reply: &Reply) -> bool {
    reply.code == ResponseCode::NoError && reply.answers.is_empty() && reply.soa
}

fn nx_domain(reply: &Reply) -> bool {
    reply.code == ResponseCode::NXDomain && reply.answers.is_empty() && reply.soa
}

/// A cluster DNS on a free loopback port of `server`'s cluster.
async fn start_dns(s: &TestServer, sup: &mut Supervisor, upstream: Upstream) -> dns::Dns {
    let client = berth::client::Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let dns = dns::start(
        sup,
        &client,
        DnsConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            domain: "cluster.local".into(),
            upstream,
        },
    )
    .unwrap();
    within(10, dns.synced()).await;
    dns
}

async fn create(s: &TestServer, path: &str, obj: Value) -> Value {
    let (code, out) = s.post(path, obj).await;
    assert_eq!(code, 201, "{out}");
    out
}

async fn ready_pod(s: &TestServer, name: &str, ip: &str, ready: bool) {
    let pods = "/api/v1/namespaces/shop/pods";
    create(
        s,
        pods,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"app": "db"}},
               "spec": {"hostname": name, "subdomain": "db",
                        "containers": [{"name": "c", "image": "i",
                                        "ports": [{"name": "pg", "containerPort": 5432}]}]}}),
    )
    .await;
    let state = if ready { "True" } else { "False" };
    let (code, out) = s
        .patch(
            &format!("{pods}/{name}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": state,
                                "lastTransitionTime": berth::types::now()}]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

const SVC: &str = "svc.cluster.local.";

#[tokio::test]
async fn services_endpoints_pods_and_other_names_answer_over_udp_and_tcp() {
    let s = TestServer::start_with(|c| {
        c.controllers.dns = Some(berth::controller::dnsservice::DnsService {
            cluster_ip: berth::types::DNS_SERVICE_IP.into(),
            address: "127.0.0.1:5353".parse().unwrap(),
        })
    })
    .await;
    let upstream = FakeUpstream::start().await;
    let mut sup = Supervisor::new();
    let d = start_dns(&s, &mut sup, Upstream::Servers(vec![upstream.address])).await;
    let server = d.addresses()[0];

    create(
        &s,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
    )
    .await;
    let services = "/api/v1/namespaces/shop/services";
    let web = create(
        &s,
        services,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                  {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
    )
    .await;
    let web_ip = web["spec"]["clusterIP"].as_str().unwrap().to_string();
    create(
        &s,
        services,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
               "spec": {"clusterIP": "None", "selector": {"app": "db"},
                        "ports": [{"name": "pg", "port": 5432, "targetPort": "pg"}]}}),
    )
    .await;
    create(
        &s,
        services,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext"},
               "spec": {"type": "ExternalName", "externalName": "example.org"}}),
    )
    .await;
    create(
        &s,
        services,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "alias"},
               "spec": {"type": "ExternalName", "externalName": "web.shop.svc.cluster.local"}}),
    )
    .await;
    ready_pod(&s, "db-0", "10.42.0.5", true).await;
    ready_pod(&s, "db-1", "10.42.0.6", true).await;
    ready_pod(&s, "db-2", "10.42.0.7", false).await;

    // A ClusterIP Service: A, NODATA for AAAA, SRV of its named ports, PTR.
    let web_name = format!("web.shop.{SVC}");
    let reply = answered(server, &web_name, RecordType::A, 1).await;
    assert!(reply.authoritative);
    let reply = both(server, &web_name, RecordType::A).await;
    assert_eq!(reply.answers, [format!("{web_name} {web_ip}")]);
    assert!(no_data(&both(server, &web_name, RecordType::AAAA).await));
    let reply = both(server, &format!("_http._tcp.{web_name}"), RecordType::SRV).await;
    assert_eq!(
        reply.answers,
        [format!("_http._tcp.{web_name} 0 100 80 {web_name}")]
    );
    assert_eq!(reply.additionals, [format!("{web_name} {web_ip}")]);
    let reply = both(server, &format!("_dns._udp.{web_name}"), RecordType::SRV).await;
    assert_eq!(
        reply.answers,
        [format!("_dns._udp.{web_name} 0 100 53 {web_name}")]
    );
    assert!(nx_domain(
        &both(server, &format!("_dns._tcp.{web_name}"), RecordType::SRV).await
    ));
    let octets: Vec<&str> = web_ip.split('.').rev().collect();
    let ptr = format!("{}.in-addr.arpa.", octets.join("."));
    let reply = both(server, &ptr, RecordType::PTR).await;
    assert_eq!(reply.answers, [format!("{ptr} {web_name}")]);

    // A headless Service: its ready pods, by hostname (the endpoint slice controller
    // fills it from the pods' hostname and subdomain), with SRV and PTR.
    let db = format!("db.shop.{SVC}");
    let reply = answered(server, &db, RecordType::A, 2).await;
    let mut got = reply.answers.clone();
    got.sort();
    assert_eq!(got, [format!("{db} 10.42.0.5"), format!("{db} 10.42.0.6")]);
    let reply = both(server, &format!("db-0.{db}"), RecordType::A).await;
    assert_eq!(reply.answers, [format!("db-0.{db} 10.42.0.5")]);
    assert!(nx_domain(
        &both(server, &format!("db-2.{db}"), RecordType::A).await
    ));
    let reply = both(server, &format!("_pg._tcp.{db}"), RecordType::SRV).await;
    let mut got = reply.answers.clone();
    got.sort();
    assert_eq!(
        got,
        [
            format!("_pg._tcp.{db} 0 50 5432 db-0.{db}"),
            format!("_pg._tcp.{db} 0 50 5432 db-1.{db}"),
        ]
    );
    assert_eq!(reply.additionals.len(), 2);
    let reply = both(server, "6.0.42.10.in-addr.arpa.", RecordType::PTR).await;
    assert_eq!(
        reply.answers,
        [format!("6.0.42.10.in-addr.arpa. db-1.{db}")]
    );
    // The not-ready pod becomes ready: it is answered.
    let (code, out) = s
        .patch(
            "/api/v1/namespaces/shop/pods/db-2/status",
            "application/merge-patch+json",
            json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                                              "lastTransitionTime": berth::types::now()}]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    answered(server, &db, RecordType::A, 3).await;
    answered(server, &format!("db-2.{db}"), RecordType::A, 1).await;

    // ExternalName Services: a CNAME, followed upstream or inside the cluster.
    let ext = format!("ext.shop.{SVC}");
    let reply = both(server, &ext, RecordType::A).await;
    assert_eq!(
        reply.answers,
        [
            format!("{ext} example.org."),
            "example.org. 192.0.2.80".to_string()
        ]
    );
    assert!(no_data(&both(server, &ext, RecordType::SRV).await));
    let alias = format!("alias.shop.{SVC}");
    let reply = both(server, &alias, RecordType::A).await;
    assert_eq!(
        reply.answers,
        [
            format!("{alias} {web_name}"),
            format!("{web_name} {web_ip}")
        ]
    );

    // Pods by address, the schema version, the zone, namespaces, unknown names.
    let pod = "10-42-0-9.shop.pod.cluster.local.";
    assert_eq!(
        both(server, pod, RecordType::A).await.answers,
        [format!("{pod} 10.42.0.9")]
    );
    assert!(no_data(&both(server, pod, RecordType::AAAA).await));
    let pod6 = "fd00--9.shop.pod.cluster.local.";
    assert_eq!(
        both(server, pod6, RecordType::AAAA).await.answers,
        [format!("{pod6} fd00::9")]
    );
    assert!(nx_domain(
        &both(
            server,
            "10-42-0-9.nowhere.pod.cluster.local.",
            RecordType::A
        )
        .await
    ));
    assert_eq!(
        both(server, "dns-version.cluster.local.", RecordType::TXT)
            .await
            .answers,
        ["dns-version.cluster.local. 1.1.0"]
    );
    assert_eq!(
        both(server, "cluster.local.", RecordType::SOA)
            .await
            .answers
            .len(),
        1
    );
    assert!(no_data(
        &both(server, &format!("shop.{SVC}"), RecordType::A).await
    ));
    assert!(nx_domain(
        &both(server, &format!("nowhere.{SVC}"), RecordType::A).await
    ));
    assert!(nx_domain(
        &both(server, &format!("nope.shop.{SVC}"), RecordType::A).await
    ));

    // The DNS Service itself, kept by its controller.
    let kube_dns = format!("kube-dns.kube-system.{SVC}");
    let reply = answered(server, &kube_dns, RecordType::A, 1).await;
    assert_eq!(reply.answers, [format!("{kube_dns} 10.96.0.10")]);
    let reply = both(server, &format!("_dns._udp.{kube_dns}"), RecordType::SRV).await;
    assert_eq!(
        reply.answers,
        [format!("_dns._udp.{kube_dns} 0 100 53 {kube_dns}")]
    );
    let (code, svc) = s
        .get("/api/v1/namespaces/kube-system/services/kube-dns")
        .await;
    assert_eq!(code, 200, "{svc}");
    assert_eq!(svc["metadata"]["labels"]["k8s-app"], "kube-dns");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
               {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 5353}])
    );
    let (code, slice) = s
        .get("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices/kube-dns")
        .await;
    assert_eq!(code, 200, "{slice}");
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["127.0.0.1"]));
    assert_eq!(slice["ports"][0]["port"], 5353);
    let (code, endpoints) = s
        .get("/api/v1/namespaces/kube-system/endpoints/kube-dns")
        .await;
    assert_eq!(code, 200, "{endpoints}");
    assert_eq!(
        endpoints["subsets"][0]["addresses"][0]["ip"],
        json!("127.0.0.1")
    );
    // Deleted, it is made again.
    let (code, out) = s
        .delete("/api/v1/namespaces/kube-system/services/kube-dns")
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(10, "kube-dns is made again", || async {
        let (code, svc) = s
            .get("/api/v1/namespaces/kube-system/services/kube-dns")
            .await;
        match (code, svc["metadata"]["deletionTimestamp"].is_null()) {
            (200, true) => Ok(()),
            _ => Err(format!("{code} {svc}")),
        }
    })
    .await;

    // Other names go upstream, its NXDOMAIN relayed.
    let reply = both(server, "example.org.", RecordType::A).await;
    assert_eq!(reply.code, ResponseCode::NoError);
    assert!(!reply.authoritative);
    assert_eq!(reply.answers, ["example.org. 192.0.2.80"]);
    let reply = both(server, "nothing.example.org.", RecordType::A).await;
    assert_eq!(reply.code, ResponseCode::NXDomain);

    // A Service deleted is a name no more.
    let (code, out) = s.delete(&format!("{services}/web")).await;
    assert_eq!(code, 200, "{out}");
    eventually(10, "web is gone", || async {
        let reply = ask(server, false, &web_name, RecordType::A).await;
        match reply.code {
            ResponseCode::NXDomain => Ok(()),
            _ => Err(format!("{reply:?}")),
        }
    })
    .await;
    sup.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn without_an_upstream_that_answers_other_names_are_servfail_in_time() {
    let s = TestServer::start().await;
    let mut sup = Supervisor::new();
    // None at all: at once.
    let none = start_dns(&s, &mut sup, Upstream::Servers(vec![])).await;
    let started = Instant::now();
    let reply = ask(none.addresses()[0], false, "example.org.", RecordType::A).await;
    assert_eq!(reply.code, ResponseCode::ServFail);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // The cluster's names are answered all the same (once the API's Service is made).
    let kubernetes = "kubernetes.default.svc.cluster.local.";
    answered(none.addresses()[0], kubernetes, RecordType::A, 1).await;
    let reply = ask(none.addresses()[0], true, kubernetes, RecordType::A).await;
    assert_eq!(reply.answers, [format!("{kubernetes} 10.96.0.1")]);

    // Nothing listening there (an upstream that is down): at once too.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let down = start_dns(&s, &mut sup, Upstream::Servers(vec![closed])).await;
    let started = Instant::now();
    let reply = ask(down.addresses()[0], false, "example.org.", RecordType::A).await;
    assert_eq!(reply.code, ResponseCode::ServFail);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );

    // One that never answers: SERVFAIL once the forwarding deadline passes, well before
    // a client's own time-out (5 s here).
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mute = start_dns(
        &s,
        &mut sup,
        Upstream::Servers(vec![silent.local_addr().unwrap()]),
    )
    .await;
    let started = Instant::now();
    let reply = ask(mute.addresses()[0], false, "example.org.", RecordType::A).await;
    assert_eq!(reply.code, ResponseCode::ServFail);
    let took = started.elapsed();
    assert!(
        took >= dns::forward::DEADLINE - Duration::from_millis(100)
            && took < dns::forward::DEADLINE + Duration::from_secs(1),
        "{took:?}"
    );
    sup.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn upstream_servers_come_from_a_resolv_conf_and_a_taken_port_is_an_error() {
    let s = TestServer::start().await;
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolv.conf");
    // A resolv.conf's servers are on port 53, which the test does not take; one that
    // names no server leaves no upstream (its parsing and re-reading are unit-tested).
    std::fs::write(&path, "search example\n").unwrap();
    let mut sup = Supervisor::new();
    let from_file = start_dns(&s, &mut sup, Upstream::ResolvConf(path.clone())).await;
    let reply = ask(
        from_file.addresses()[0],
        false,
        "example.org.",
        RecordType::A,
    )
    .await;
    assert_eq!(reply.code, ResponseCode::ServFail);
    let listed = start_dns(&s, &mut sup, Upstream::Servers(vec![upstream.address])).await;
    let reply = ask(listed.addresses()[0], true, "example.org.", RecordType::A).await;
    assert_eq!(reply.answers, ["example.org. 192.0.2.80"]);

    // An address already served is refused with the reason.
    let client = berth::client::Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let err = dns::start(
        &mut sup,
        &client,
        DnsConfig {
            listen: vec![listed.addresses()[0]],
            domain: "cluster.local".into(),
            upstream: Upstream::Servers(vec![]),
        },
    )
    .err()
    .expect("a taken port");
    assert!(err.to_string().contains("another DNS server"), "{err}");
    sup.shutdown(Duration::from_secs(5)).await;
}
