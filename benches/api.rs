//! `cargo bench --bench api`: the API server's figures as one JSON object on stdout,
//! measured against the real `berth` binary over HTTPS with keep-alive:
//!
//! - cold start to `/readyz`, then idle RSS and CPU;
//! - durable creates/s with 1, 32 and 64 connections;
//! - create, GET and LIST (1,000 objects) latency p50/p99;
//! - watch latency (create call → event at each watcher) with 1,000 open watches of
//!   ConfigMaps: every watch sees every event, over HTTP/2 (one connection, as Go clients
//!   and informers in one process do) and over HTTP/1.1 (a connection per watch); and
//!   the watches spread over 100 namespaces, 10 seeing each event (`watch_http2_spread`);
//!   and one watch alone, its writes as far apart as in the first case
//!   (`watch_http2_one`): the floor that fan-out adds to, since a server that idles
//!   between writes pays the machine's wake-up and disk latencies in each of them;
//!   besides every delivery, per write the first and the last of its deliveries, and the
//!   create calls themselves. The HTTP/2 watches are read by a lean client of the bench's
//!   own (as a load generator such as h2load reads), so that the client's work does not
//!   take the machine's second core from the server; `watch_http2_reqwest` reads them
//!   through reqwest (hyper's client) instead;
//! - custom resources (`crds`): the time from a CustomResourceDefinition's create to its
//!   group version answering in discovery, and creates/s at 32 connections of objects of
//!   a definition with a 30-field schema (validated, pruned and defaulted) and two CEL
//!   rules beside
//!   ConfigMaps' in the same run;
//! - RSS after all that, and how many ConfigMaps the store then holds;
//! - for reference, etcd's own durable put rate through its HTTP gateway at 32
//!   connections, when an `etcd` binary is on PATH (Debian: `apt-get install etcd-server`).
//!
//! `BERTH_BENCH_QUICK=1` shrinks every phase; `BERTH_BENCH_ONLY=watch` (or `idle`,
//! `creates`, `latency`, `crds`, `etcd`, comma-separated) runs only those phases;
//! `BERTH_BENCH_BIN=path/to/berth` measures another build of the server (to compare two).

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{Unit, phase, quick};

use base64::Engine;
use futures_util::StreamExt;
use serde_json::{Value, json};

fn percentiles(samples: Vec<Duration>) -> Value {
    common::percentiles(samples, Unit::Millis)
}

use common::{Server, start};

fn client(ca: &str) -> reqwest::Client {
    common::https::client_with(ca, false)
}

fn client_with(ca: &str, h2: bool) -> reqwest::Client {
    common::https::client_with(ca, h2)
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"bench": "yes"}},
           "data": {"payload": "x".repeat(512)}})
}

async fn create_rate(s: &Server, connections: usize, ns: &str) -> f64 {
    let url = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    create_rate_of(s, connections, url, cm).await
}

/// Creates/s at `connections` of the objects `make` makes, posted to `url`.
async fn create_rate_of(
    s: &Server,
    connections: usize,
    url: String,
    make: fn(&str) -> Value,
) -> f64 {
    let run = Duration::from_millis(if quick() { 500 } else { 3000 });
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let http = client(&s.ca);
        let url = url.clone();
        let token = s.token.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < run {
                let r = http
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&make(&format!("c{c}-{n}")))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 201);
                let _ = r.bytes().await;
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// A definition of group `group` whose kind has 30 fields of every type and two CEL rules.
fn definition(group: &str) -> Value {
    let mut fields = serde_json::Map::new();
    for i in 0..10 {
        fields.insert(format!("s{i}"), json!({"type": "string", "maxLength": 64}));
        fields.insert(
            format!("n{i}"),
            json!({"type": "integer", "minimum": 0, "default": 1}),
        );
        fields.insert(format!("b{i}"), json!({"type": "boolean"}));
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": fields, "x-kubernetes-validations": [
                        {"rule": "self.n1 <= self.n9", "message": "n1 must not exceed n9"},
                        {"rule": "self.s0.startsWith('some') && size(self.s1) < 32"},
                    ]},
                }}},
            }],
        },
    })
}

fn widget(name: &str) -> Value {
    let mut spec = serde_json::Map::new();
    for i in 0..10 {
        spec.insert(format!("s{i}"), json!("some text"));
        spec.insert(format!("n{i}"), json!(i));
        spec.insert(format!("b{i}"), json!(i % 2 == 0));
    }
    json!({"apiVersion": "bench0.example.com/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": spec})
}

/// Definition create to discovery, and custom resource creates beside ConfigMaps'.
async fn custom_resources(s: &Server, c: &reqwest::Client) -> Value {
    let n = if quick() { 5 } else { 20 };
    let mut served = Vec::new();
    for i in 0..n {
        let group = format!("bench{i}.example.com");
        let t = Instant::now();
        let r = s
            .req(
                c,
                reqwest::Method::POST,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            )
            .json(&definition(&group))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
        loop {
            let r = s
                .req(c, reqwest::Method::GET, &format!("/apis/{group}/v1"))
                .send()
                .await
                .unwrap();
            if r.status().is_success() {
                break;
            }
        }
        served.push(t.elapsed());
    }
    ensure_namespace(s, c, "cr-rate").await;
    ensure_namespace(s, c, "cm-rate").await;
    let cms = create_rate(s, 32, "cm-rate").await;
    let url = format!(
        "{}/apis/bench0.example.com/v1/namespaces/cr-rate/widgets",
        s.url
    );
    let crs = create_rate_of(s, 32, url, widget).await;
    json!({
        "definition_to_discovery": percentiles(served),
        "creates_per_s_32_connections": {"custom_30_fields_2_cel_rules": crs, "configmaps": cms, "ratio": crs / cms},
    })
}

async fn ensure_namespace(s: &Server, c: &reqwest::Client, ns: &str) {
    let r = s
        .req(c, reqwest::Method::POST, "/api/v1/namespaces")
        .json(&json!({"metadata": {"name": ns}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

async fn latencies(s: &Server) -> Value {
    let c = client(&s.ca);
    ensure_namespace(s, &c, "lat").await;
    let n = if quick() { 200 } else { 1000 };
    let mut creates = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let r = s
            .req(
                &c,
                reqwest::Method::POST,
                "/api/v1/namespaces/lat/configmaps",
            )
            .json(&cm(&format!("l{i}")))
            .send()
            .await
            .unwrap();
        let _ = r.bytes().await;
        creates.push(t.elapsed());
    }
    let mut gets = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let r = s
            .req(
                &c,
                reqwest::Method::GET,
                &format!("/api/v1/namespaces/lat/configmaps/l{}", i % n),
            )
            .send()
            .await
            .unwrap();
        let _ = r.bytes().await;
        gets.push(t.elapsed());
    }
    let mut lists = Vec::new();
    for _ in 0..if quick() { 20 } else { 200 } {
        let t = Instant::now();
        let r = s
            .req(
                &c,
                reqwest::Method::GET,
                "/api/v1/namespaces/lat/configmaps",
            )
            .send()
            .await
            .unwrap();
        let body = r.bytes().await.unwrap();
        lists.push(t.elapsed());
        assert!(body.len() > n * 500);
    }
    json!({
        "create": percentiles(creates),
        "get": percentiles(gets),
        format!("list_{n}"): percentiles(lists),
    })
}

/// How the watches of [`watch_latency`] reach the server.
#[derive(Clone, Copy, PartialEq)]
enum Transport {
    /// One HTTP/2 connection, read by a lean client of our own (see [`lean_h2_watches`]).
    H2Lean,
    /// One HTTP/2 connection through reqwest (hyper's client).
    H2Reqwest,
    /// A connection per watch, through reqwest.
    H1,
}

/// Finds the bench object's sequence number in each whole event line of `chunk` (a line
/// may begin in an earlier chunk: `partial` holds its start) without decoding the event,
/// so that the client's own work stays small next to the server's.
fn scan_lines(chunk: &[u8], partial: &mut Vec<u8>, mut each: impl FnMut(usize)) {
    let mut rest = chunk;
    while let Some(end) = memchr::memchr(b'\n', rest) {
        let line = if partial.is_empty() {
            &rest[..end]
        } else {
            partial.extend_from_slice(&rest[..end]);
            &partial[..]
        };
        let at = memchr::memmem::find(line, b"\"name\":\"w").expect("a bench object");
        each(
            line[at + 9..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .fold(0usize, |n, b| n * 10 + usize::from(b - b'0')),
        );
        partial.clear();
        rest = &rest[end + 1..];
    }
    partial.extend_from_slice(rest);
}

/// Create → event latency at each watcher of `watchers` open watches on one resource,
/// spread evenly over `namespaces` namespaces; each write goes to one namespace, so
/// `watchers / namespaces` watches see each event. One namespace measures fan-out to every
/// watch; many measure how the open watches weigh on the ones an event is for. The writes
/// are `pause` apart.
async fn watch_latency(
    s: &Server,
    watchers: usize,
    transport: Transport,
    namespaces: usize,
    pause: Duration,
) -> Value {
    let c = client_with(&s.ca, transport == Transport::H2Reqwest);
    let run = format!(
        "watch-{}-{watchers}-{namespaces}",
        match transport {
            Transport::H2Lean => "h2",
            Transport::H2Reqwest => "h2r",
            Transport::H1 => "h1",
        }
    );
    let ns = |i: usize| format!("{run}-{}", i % namespaces);
    for i in 0..namespaces {
        ensure_namespace(s, &c, &ns(i)).await;
    }
    // Every watch sees `per_watch` events.
    let per_watch = (if quick() { 20 } else { 100 } / namespaces).max(5);
    let writes = per_watch * namespaces;
    let base = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..writes).map(|_| AtomicU64::new(0)).collect());
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(watchers);
    let path = |i: usize| {
        format!(
            "/api/v1/namespaces/{}/configmaps?watch=true&resourceVersion=0",
            ns(i)
        )
    };
    let mut tasks = Vec::new();
    if transport == Transport::H2Lean {
        tasks.push(tokio::spawn(lean_h2_watches(
            s.url.clone(),
            s.ca.clone(),
            s.token.clone(),
            (0..watchers).map(path).collect(),
            per_watch,
            base,
            sent.clone(),
            ready_tx,
        )));
    } else {
        for i in 0..watchers {
            let r = s.req(&c, reqwest::Method::GET, &path(i)).send();
            let sent = sent.clone();
            let ready = ready_tx.clone();
            tasks.push(tokio::spawn(async move {
                let resp = r.await.unwrap();
                let _ = ready.send(()).await;
                let mut stream = resp.bytes_stream();
                let mut partial = Vec::new();
                let mut lat = Vec::with_capacity(per_watch);
                while lat.len() < per_watch {
                    let chunk = stream.next().await.unwrap().unwrap();
                    let now = base.elapsed();
                    scan_lines(&chunk, &mut partial, |seq| {
                        let t0 = sent[seq].load(Ordering::Acquire);
                        lat.push((seq, now - Duration::from_nanos(t0)));
                    });
                }
                lat
            }));
        }
    }
    for _ in 0..watchers {
        ready_rx.recv().await.unwrap();
    }
    let (_, cpu_before) = s.usage();
    let client_before = common::cpu_seconds("self");
    let wall = Instant::now();
    // The writer has a connection of its own: the watches may fill the first one's streams.
    let c = client(&s.ca);
    let mut calls = Vec::with_capacity(writes);
    for seq in 0..writes {
        let call = Instant::now();
        sent[seq].store(base.elapsed().as_nanos() as u64, Ordering::Release);
        let r = s
            .req(
                &c,
                reqwest::Method::POST,
                &format!("/api/v1/namespaces/{}/configmaps", ns(seq)),
            )
            .json(&cm(&format!("w{seq}")))
            .send()
            .await
            .unwrap();
        let _ = r.bytes().await;
        calls.push(call.elapsed());
        tokio::time::sleep(pause).await;
    }
    // Every delivery, and per write the first and the last of its deliveries.
    let mut all = Vec::new();
    let mut first = vec![Duration::MAX; writes];
    let mut last = vec![Duration::ZERO; writes];
    for t in tasks {
        for (seq, d) in t.await.unwrap() {
            first[seq] = first[seq].min(d);
            last[seq] = last[seq].max(d);
            all.push(d);
        }
    }
    let (_, cpu_after) = s.usage();
    let client_cpu = common::cpu_seconds("self") - client_before;
    let deliveries = (watchers * per_watch) as f64;
    json!({
        "watchers": watchers,
        "namespaces": namespaces,
        "watchers_per_event": watchers / namespaces,
        "pause_between_writes_ms": pause.as_secs_f64() * 1e3,
        "transport": match transport {
            Transport::H2Lean => "HTTP/2, one connection, a lean client",
            Transport::H2Reqwest => "HTTP/2, one connection, reqwest",
            Transport::H1 => "HTTP/1.1, a connection each, reqwest",
        },
        "latency": percentiles(all),
        // The create calls themselves, for comparison: an event cannot arrive before its
        // write is durable.
        "create_call": percentiles(calls),
        // How one write spreads over its watches: when the first of them has it, and when
        // the last has.
        "first_delivery": percentiles(first),
        "last_delivery": percentiles(last),
        "server_cpu_us_per_delivery": (cpu_after - cpu_before) * 1e6 / deliveries,
        "server_cpu_us_per_write": (cpu_after - cpu_before) * 1e6 / writes as f64,
        "server_cpu_share_of_a_core": (cpu_after - cpu_before) / wall.elapsed().as_secs_f64(),
        // The bench's own client shares the machine: what it takes is not the server's.
        "client_cpu_us_per_delivery": client_cpu * 1e6 / deliveries,
    })
}

/// Many watches on one HTTP/2 connection, read the way a load generator such as h2load
/// reads: frames parsed in place in one task, no task or buffer per stream. A general
/// client (reqwest, through hyper) spends about as much CPU per delivered event as the
/// server does, and on a 2-core machine the two compete; this one measures the server.
/// It speaks the protocol properly: the preface and settings, acknowledgements, flow
/// control (windows opened wide and topped up), HPACK-decoded response heads.
#[allow(clippy::too_many_arguments)]
async fn lean_h2_watches(
    url: String,
    ca: String,
    token: String,
    paths: Vec<String>,
    per_watch: usize,
    base: Instant,
    sent: Arc<Vec<AtomicU64>>,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Vec<(usize, Duration)> {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const DATA: u8 = 0;
    const HEADERS: u8 = 1;
    const RST_STREAM: u8 = 3;
    const SETTINGS: u8 = 4;
    const PING: u8 = 6;
    const GOAWAY: u8 = 7;
    const WINDOW_UPDATE: u8 = 8;
    fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, id: u32, payload: &[u8]) {
        let len = payload.len() as u32;
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(payload);
    }
    fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        // Literal without indexing, new name; lengths below 127 fit the 7-bit prefix.
        assert!(name.len() < 127 && value.len() < 127);
        out.extend_from_slice(&[0, name.len() as u8]);
        out.extend_from_slice(name);
        out.push(value.len() as u8);
        out.extend_from_slice(value);
    }

    let authority = url.trim_start_matches("https://").to_string();
    let host = authority.rsplit_once(':').unwrap().0.to_string();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut io = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(rustls::pki_types::ServerName::try_from(host).unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(io.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    // Windows as wide as allowed: no stream waits for an update during the run.
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(
        &mut out,
        SETTINGS,
        0,
        0,
        &[0, 2, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff],
    );
    frame(
        &mut out,
        WINDOW_UPDATE,
        0,
        0,
        &(0x7fff_ffff_u32 - 65_535).to_be_bytes(),
    );
    let bearer = format!("Bearer {token}");
    for (i, path) in paths.iter().enumerate() {
        let mut block = Vec::new();
        literal(&mut block, b":method", b"GET");
        literal(&mut block, b":scheme", b"https");
        literal(&mut block, b":authority", authority.as_bytes());
        literal(&mut block, b":path", path.as_bytes());
        literal(&mut block, b"authorization", bearer.as_bytes());
        // END_STREAM | END_HEADERS
        frame(&mut out, HEADERS, 0x5, 2 * i as u32 + 1, &block);
    }
    io.write_all(&out).await.unwrap();

    let mut decoder = loona_hpack::Decoder::new();
    let mut partial: Vec<Vec<u8>> = vec![Vec::new(); paths.len()];
    let mut got = vec![0usize; paths.len()];
    let (mut opened, mut finished) = (0, 0);
    let mut unacknowledged = 0usize;
    let mut lat = Vec::with_capacity(paths.len() * per_watch);
    let mut buf = bytes::BytesMut::with_capacity(256 * 1024);
    while finished < paths.len() {
        if io.read_buf(&mut buf).await.unwrap() == 0 {
            panic!("the server closed the connection");
        }
        let now = base.elapsed();
        let mut reply = Vec::new();
        while buf.len() >= 9 {
            let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let f = buf.split_to(9 + len);
            let (kind, flags) = (f[3], f[4]);
            let id = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) & 0x7fff_ffff;
            let payload = &f[9..];
            let watch = (id as usize).saturating_sub(1) / 2;
            match kind {
                DATA => {
                    assert_eq!(flags & 0x8, 0, "unpadded frames");
                    unacknowledged += len;
                    scan_lines(payload, &mut partial[watch], |seq| {
                        let t0 = sent[seq].load(Ordering::Acquire);
                        lat.push((seq, now - Duration::from_nanos(t0)));
                        got[watch] += 1;
                        if got[watch] == per_watch {
                            finished += 1;
                        }
                    });
                }
                HEADERS => {
                    assert_eq!(flags & 0x4, 0x4, "a response head in one frame");
                    let mut status = Vec::new();
                    decoder
                        .decode_with_cb(payload, |n, v| {
                            if &*n == b":status" {
                                status = v.to_vec();
                            }
                        })
                        .unwrap();
                    assert_eq!(status, b"200", "watch {watch} answered");
                    opened += 1;
                    ready.try_send(()).unwrap();
                }
                SETTINGS if flags & 1 == 0 => frame(&mut reply, SETTINGS, 1, 0, &[]),
                PING if flags & 1 == 0 => frame(&mut reply, PING, 1, 0, payload),
                RST_STREAM | GOAWAY => panic!("the server ended a watch (frame type {kind})"),
                _ => {}
            }
        }
        // Top the connection's window up long before it could run out.
        if unacknowledged >= 1 << 30 {
            frame(
                &mut reply,
                WINDOW_UPDATE,
                0,
                0,
                &(unacknowledged as u32).to_be_bytes(),
            );
            unacknowledged = 0;
        }
        if !reply.is_empty() {
            io.write_all(&reply).await.unwrap();
        }
    }
    assert_eq!(opened, paths.len());
    lat
}

/// etcd's durable puts/s through its HTTP gateway, if an etcd binary is available.
async fn etcd_rate(connections: usize) -> Value {
    let Ok(path) = which("etcd") else {
        return json!({"skipped": "no etcd on PATH (Debian: apt-get install etcd-server)"});
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let peer = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(path)
        .args(["--data-dir"])
        .arg(dir.path())
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let put = format!("{url}/v3/kv/put");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = http
            .post(&put)
            .json(&json!({"key": "a2V5", "value": "dg=="}))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "etcd did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = Duration::from_millis(if quick() { 500 } else { 3000 });
    let value = base64::engine::general_purpose::STANDARD.encode("x".repeat(512));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let http = reqwest::Client::new();
        let put = put.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < run {
                let key = base64::engine::general_purpose::STANDARD.encode(format!("/k/{c}/{n}"));
                let r = http
                    .post(&put)
                    .json(&json!({"key": key, "value": value}))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                let _ = r.bytes().await;
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    json!({"connections": connections, "puts_per_s": rate})
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        })
        .ok_or(())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let s = start().await;
        let mut out = serde_json::Map::new();
        out.insert("cold_start_to_readyz_ms".into(), json!(s.cold_start_ms));
        if phase("idle") {
            // Let start-up settle, then watch CPU for a while.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (_, cpu0) = s.usage();
            let idle = Duration::from_secs(if quick() { 2 } else { 10 });
            tokio::time::sleep(idle).await;
            let (rss, cpu1) = s.usage();
            let cpu_percent = (cpu1 - cpu0) / idle.as_secs_f64() * 100.0;
            out.insert(
                "idle".into(),
                json!({"rss_mib": rss, "cpu_percent": cpu_percent}),
            );
        }
        let c = client(&s.ca);
        if phase("creates") {
            let mut creates = serde_json::Map::new();
            for connections in [1, 32, 64] {
                let ns = format!("rate-{connections}");
                ensure_namespace(&s, &c, &ns).await;
                let rate = create_rate(&s, connections, &ns).await;
                creates.insert(format!("connections_{connections}"), json!(rate));
            }
            out.insert("creates_per_s".into(), Value::Object(creates));
        }
        if phase("latency") {
            out.insert("latency".into(), latencies(&s).await);
        }
        if phase("crds") {
            out.insert("custom_resources".into(), custom_resources(&s, &c).await);
        }
        if phase("watch") {
            let n = std::env::var("BERTH_BENCH_WATCHERS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(if quick() { 100 } else { 1000 });
            // Time for each event to reach its watches before the next write.
            let pause = |per_event: usize| Duration::from_millis(20 * per_event as u64 / 1000 + 2);
            out.insert(
                "watch_http2".into(),
                watch_latency(&s, n, Transport::H2Lean, 1, pause(n)).await,
            );
            out.insert(
                "watch_http2_spread".into(),
                watch_latency(&s, n, Transport::H2Lean, 100, pause(n / 100)).await,
            );
            out.insert(
                "watch_http2_one".into(),
                watch_latency(&s, 1, Transport::H2Lean, 1, pause(n)).await,
            );
            out.insert(
                "watch_http2_reqwest".into(),
                watch_latency(&s, n, Transport::H2Reqwest, 1, pause(n)).await,
            );
            if std::env::var_os("BERTH_BENCH_SKIP_H1").is_none() {
                out.insert(
                    "watch_http1".into(),
                    watch_latency(&s, n, Transport::H1, 1, pause(n)).await,
                );
            }
        }
        out.insert("rss_after_load_mib".into(), json!(s.usage().0));
        // What that memory holds: the ConfigMaps the phases left in the store.
        let page: Value = s
            .req(&c, reqwest::Method::GET, "/api/v1/configmaps?limit=1")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let stored = page["items"].as_array().map_or(0, Vec::len) as u64
            + page["metadata"]["remainingItemCount"].as_u64().unwrap_or(0);
        out.insert("configmaps_after_load".into(), json!(stored));
        if phase("etcd") {
            out.insert("etcd_reference".into(), etcd_rate(32).await);
        }
        Value::Object(out)
    });
    println!("{out}");
}
