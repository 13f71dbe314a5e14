//! `cargo bench --bench dns`: the cluster DNS's figures as one JSON object on stdout,
//! measured with `dnsperf` (Debian's package `dnsperf`; without it the bench says so
//! and measures nothing).
//!
//! The DNS server runs in this process (`net::dns::start` on a loopback port, the
//! store and registry in process too) over 1,000 Services (100 with
//! `BERTH_BENCH_QUICK=1`): nine in ten with a cluster IP and two named ports, one in
//! ten headless with an EndpointSlice of four ready endpoints. The questions mix
//! Services' A, SRV of a named port, headless A, an endpoint's A, PTR of a cluster IP
//! and NXDOMAIN names. Then:
//!
//! - `steady`: dnsperf at 10,000 questions/s for 5 s (2 s quick): questions/s answered,
//!   p50/p99 latency (goal: p99 under 1 ms), lost questions;
//! - `max`: dnsperf unlimited for 3 s (1 s quick): the most questions/s answered.
//!
//! Nothing is forwarded: the server has no upstream, and no question names one. Each
//! phase also reports the machine's load average as it starts: on a machine whose
//! cores other work holds, the tail latency is the scheduler's (run the bench under
//! `chrt -f 10` to see the server's own).

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use berth::client::{Client, Kind, catalog};
use berth::net::dns::{DnsConfig, Upstream};
use berth::supervisor::Supervisor;
use common::{phase, quick};
use serde_json::{Value, json};

const NAMESPACE: &str = "bench";

/// Whether `program` is on the PATH.
fn installed(program: &str) -> bool {
    Command::new(program).arg("-h").output().is_ok()
}

/// Makes the Services (and the headless ones' slices); returns the cluster IPs made.
async fn populate(client: &Client, n: usize) -> Vec<String> {
    let namespaces = catalog::of(Kind::Namespace);
    client
        .create(
            namespaces,
            None,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        )
        .await
        .unwrap();
    let services = catalog::of(Kind::Service);
    let slices = catalog::of(Kind::EndpointSlice);
    let mut ips = Vec::new();
    for i in 0..n {
        if i % 10 == 9 {
            let name = format!("hl-{i}");
            let svc = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name},
                "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}});
            client
                .create(services, Some(NAMESPACE), &svc)
                .await
                .unwrap();
            let endpoints: Vec<Value> = (0..4)
                .map(|e| {
                    json!({"addresses": [format!("10.42.{}.{}", i / 200, (i % 200) + e + 1)],
                           "hostname": format!("ep-{e}"), "conditions": {"ready": true}})
                })
                .collect();
            let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-1"),
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4", "endpoints": endpoints,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]});
            client
                .create(slices, Some(NAMESPACE), &slice)
                .await
                .unwrap();
        } else {
            let svc = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("svc-{i}")},
                "spec": {"ports": [{"name": "http", "port": 80},
                                   {"name": "dns", "port": 53, "protocol": "UDP"}]}});
            let made = client
                .create(services, Some(NAMESPACE), &svc)
                .await
                .unwrap();
            ips.push(made["spec"]["clusterIP"].as_str().unwrap().to_string());
        }
    }
    ips
}

/// dnsperf's input: `name type` lines, a mix of the cluster's questions.
fn questions(n: usize, ips: &[String]) -> String {
    let zone = format!("{NAMESPACE}.svc.cluster.local");
    let mut out = String::new();
    for line in 0..n.max(100) * 2 {
        let i = line % n;
        let svc = if i % 10 == 9 { i - 1 } else { i };
        let headless = (i / 10) * 10 + 9;
        let headless = if headless < n { headless } else { 9 };
        let q = match line % 10 {
            0..=4 => format!("svc-{svc}.{zone} A"),
            5 => format!("_http._tcp.svc-{svc}.{zone} SRV"),
            6 => format!("hl-{headless}.{zone} A"),
            7 => format!("ep-{}.hl-{headless}.{zone} A", line % 4),
            8 => {
                let ip = &ips[line % ips.len()];
                let mut octets: Vec<&str> = ip.split('.').collect();
                octets.reverse();
                format!("{}.in-addr.arpa PTR", octets.join("."))
            }
            _ => format!("missing-{i}.{zone} A"),
        };
        out.push_str(&q);
        out.push('\n');
    }
    out
}

/// Runs dnsperf against `server` for `seconds`, at most `qps` questions/s (0: as many
/// as it can), and reads its summary and, per question, its latency (`-v`).
fn dnsperf(server: SocketAddr, input: &std::path::Path, seconds: u64, qps: u64) -> Value {
    // The machine's load as the phase starts: the tail latency is the scheduler's
    // when other work holds the cores.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok());
    let mut cmd = Command::new("dnsperf");
    cmd.args([
        "-s",
        &server.ip().to_string(),
        "-p",
        &server.port().to_string(),
    ])
    .arg("-d")
    .arg(input)
    .args([
        "-l",
        &seconds.to_string(),
        "-c",
        "4",
        "-T",
        "1",
        "-q",
        "200",
        "-t",
        "2",
    ]);
    if qps > 0 {
        cmd.args(["-Q", &qps.to_string()]);
    }
    cmd.arg("-v");
    let out = cmd.output().expect("dnsperf runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut latencies: Vec<f64> = Vec::new();
    let mut codes: std::collections::BTreeMap<String, u64> = Default::default();
    let mut summary = serde_json::Map::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("> ") {
            // `> NOERROR name type latency`
            let mut fields = rest.split_whitespace();
            if let Some(code) = fields.next() {
                // `T`: no answer within dnsperf's time-out.
                let code = if code == "T" { "lost" } else { code };
                *codes.entry(code.to_string()).or_default() += 1;
            }
            if let Some(latency) = rest.split_whitespace().last().and_then(|l| l.parse().ok()) {
                latencies.push(latency);
            }
            continue;
        }
        let line = line.trim();
        for (label, key) in [
            ("Queries sent:", "queries_sent"),
            ("Queries completed:", "queries_completed"),
            ("Queries lost:", "queries_lost"),
            ("Queries per second:", "queries_per_second"),
            ("Average Latency (s):", "average_latency_s"),
        ] {
            if let Some(value) = line.strip_prefix(label) {
                let first = value.split_whitespace().next().unwrap_or("");
                if let Ok(n) = first.parse::<f64>() {
                    summary.insert(key.into(), json!(n));
                }
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if latencies.is_empty() {
            return Value::Null;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        json!(latencies[i] * 1e3)
    };
    summary.insert("target_qps".into(), json!(qps));
    summary.insert("load_average_1m".into(), json!(load));
    summary.insert(
        "cores".into(),
        json!(std::thread::available_parallelism().map_or(0, |n| n.get())),
    );
    summary.insert("seconds".into(), json!(seconds));
    summary.insert("p50_ms".into(), at(0.50));
    summary.insert("p99_ms".into(), at(0.99));
    summary.insert("p999_ms".into(), at(0.999));
    summary.insert("rcodes".into(), json!(codes));
    if !out.status.success() {
        summary.insert(
            "error".into(),
            json!(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        );
    }
    Value::Object(summary)
}

async fn run() -> Value {
    let n = if quick() { 100 } else { 1000 };
    let dir = {
        use std::os::unix::fs::PermissionsExt;
        tempfile::Builder::new()
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap()
    };
    let store = berth::store::Store::open(berth::store::Config::new(dir.path()))
        .await
        .unwrap();
    let registry = berth::registry::Registry::new(store);
    let client = Client::local(registry.clone());
    let ips = populate(&client, n).await;

    let mut sup = Supervisor::new();
    let dns = berth::net::dns::start(
        &mut sup,
        &client,
        DnsConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            domain: "cluster.local".into(),
            upstream: Upstream::Servers(vec![]),
        },
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(60), dns.synced())
        .await
        .unwrap();
    // `kubernetes` is not made here: the index holds exactly the bench's Services.
    assert_eq!(dns.services(), n);
    let server = dns.addresses()[0];
    let input = dir.path().join("questions.txt");
    std::fs::write(&input, questions(n, &ips)).unwrap();

    let mut out = serde_json::Map::new();
    out.insert("services".into(), json!(n));
    let (steady, max) = if quick() { (2, 1) } else { (5, 3) };
    if phase("steady") {
        let input = input.clone();
        let r = tokio::task::spawn_blocking(move || dnsperf(server, &input, steady, 10_000))
            .await
            .unwrap();
        out.insert("steady".into(), r);
    }
    if phase("max") {
        let input = input.clone();
        let r = tokio::task::spawn_blocking(move || dnsperf(server, &input, max, 0))
            .await
            .unwrap();
        out.insert("max".into(), r);
    }
    sup.shutdown(Duration::from_secs(5)).await;
    registry.store().clone().close().await.unwrap();
    Value::Object(out)
}

fn main() {
    if !installed("dnsperf") {
        eprintln!(
            "dnsperf is not installed: `apt-get install -y dnsperf` to measure the cluster DNS; skipping"
        );
        println!(
            "{}",
            json!({"dns": {"skipped": "dnsperf is not installed"}})
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(run());
    println!("{}", json!({ "dns": out }));
}
