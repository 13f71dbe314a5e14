//! `cargo bench --bench net`: the service proxy's figures as one JSON object on stdout,
//! measured in network namespaces the bench makes (never the machine's own), as root.
//!
//! - `program`: 1,000 Services × 3 endpoints written whole in one transaction (into a
//!   fresh namespace, then again over the existing table, as a restart does), and one
//!   change among them (one endpoint replaced) as a partial sync through the running
//!   `nft -i`; goals: < 50 ms whole, < 5 ms a change;
//! - `json`: the same table through nft's JSON, as the `nftables` crate would send it
//!   (listed with `nft -j`, read into the crate's types, written back, loaded into a
//!   fresh table): whether nft takes it, and how long that takes;
//! - `latency`: connect + request + answer through a cluster IP against the pod's own
//!   address, alternating, from another pod (median and p99; goal: ratio ≤ 1.05).

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use berth::net::proxy::model::{self, Options};
use berth::net::proxy::{Layout, Nft, Table};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

mod common;
#[path = "../tests/it/netlab.rs"]
mod netlab;

use common::{Unit, percentiles, quick};
use netlab::{Lab, TCP_PORT, in_netns};

const NODE: &str = "bench-node";

fn service(i: usize) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{i}"), "namespace": "default"},
        "spec": {"clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 2),
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// Service `i`'s slice; `shift` moves its endpoints (a change).
fn slice(i: usize, shift: usize) -> EndpointSlice {
    let endpoints: Vec<Value> = (0..3)
        .map(|e| {
            let n = i * 3 + e + shift;
            json!({"addresses": [format!("10.42.{}.{}", n / 250, n % 250 + 2)],
                   "nodeName": NODE, "conditions": {"ready": true}})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{i}-1"), "namespace": "default",
                     "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

fn layout(lab: &Lab) -> Layout {
    Layout {
        table: "berth".into(),
        pod_cidr: "10.42.0.0/16".parse().unwrap(),
        service_cidr: "10.96.0.0/16".parse().unwrap(),
        bridge: lab.bridge.clone(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn program(n: usize) -> Value {
    let lab = Lab::new(0);
    let opts = Options {
        node_name: NODE.into(),
        sctp: false,
    };
    let services: Vec<Service> = (0..n).map(service).collect();
    let slices: Vec<EndpointSlice> = (0..n).map(|i| slice(i, 0)).collect();
    let built = Instant::now();
    let mut table = Table::new(layout(&lab));
    for (i, svc) in services.iter().enumerate() {
        let ports = model::service_ports(svc, [&slices[i]], &opts);
        table.set_service(&format!("default/svc-{i}"), &ports);
    }
    let commands = table.commands(tokio::time::Instant::now());
    let build_ms = ms(built.elapsed());
    let bytes: usize = commands.iter().map(|c| c.len() + 1).sum();
    let mut nft = Nft::new(lab.nft());

    let t = Instant::now();
    nft.run(&commands).await.unwrap();
    let fresh = t.elapsed();
    let mut again = Vec::new();
    for _ in 0..if quick() { 2 } else { 5 } {
        let t = Instant::now();
        nft.run(&commands).await.unwrap();
        again.push(t.elapsed());
    }
    again.sort();
    // The whole table again through the `nft -i` that stays running (started before).
    nft.run_in_session(&["list tables".to_string()])
        .await
        .unwrap();
    let mut in_session = Vec::new();
    for _ in 0..if quick() { 2 } else { 5 } {
        let t = Instant::now();
        nft.run_in_session(&commands).await.unwrap();
        in_session.push(t.elapsed());
    }
    in_session.sort();

    // One change at a time: a Service's endpoints move by one.
    let mut changes = Vec::new();
    let mut change_commands = 0;
    let rounds = if quick() { 10 } else { 100 };
    let mut shifted = vec![false; n];
    for r in 0..rounds {
        let i = (r * 37) % n;
        shifted[i] = !shifted[i];
        let shift = usize::from(shifted[i]) * 3 * n;
        let t = Instant::now();
        let ports = model::service_ports(&services[i], [&slice(i, shift)], &opts);
        table.set_service(&format!("default/svc-{i}"), &ports);
        let c = table.commands(tokio::time::Instant::now());
        change_commands = c.len();
        nft.run_in_session(&c).await.unwrap();
        changes.push(t.elapsed());
    }
    let first_change = changes.remove(0);

    let json = through_json(&lab, &nft).await;
    json!({
        "services": n,
        "endpoints": n * 3,
        "commands": commands.len(),
        "script_bytes": bytes,
        "build_ms": build_ms,
        "transactions_whole": 1,
        "whole_fresh_ms": ms(fresh),
        "whole_again_ms_median": ms(again[again.len() / 2]),
        "whole_again_in_session_ms_median": ms(in_session[in_session.len() / 2]),
        "one_change": percentiles(changes, Unit::Millis),
        "one_change_commands": change_commands,
        "first_change_ms_with_nft_i_start": ms(first_change),
        "json": json,
    })
}

/// The table as nft's JSON through the `nftables` crate's types, loaded into a fresh
/// table of another name.
async fn through_json(lab: &Lab, nft: &Nft) -> Value {
    let listed = nft
        .output(&["-j", "list", "table", "ip", "berth"])
        .await
        .unwrap();
    let _ = lab;
    let typed: Result<nftables::schema::Nftables, _> = serde_json::from_str(&listed);
    let (crate_reads, text) = match typed {
        Ok(t) => (json!(true), serde_json::to_string(&t).unwrap()),
        // nft's own JSON then, as the crate would have to write it.
        Err(e) => (json!(e.to_string()), listed),
    };
    let mut out = load_json(&text);
    out["crate_reads_the_listing"] = crate_reads;
    out
}

/// Loads nft JSON into another namespace's empty table, as a first sync would.
fn load_json(text: &str) -> Value {
    let other = Lab::new(0);
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", &other.node, "nft", "-j", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let t = Instant::now();
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let took = t.elapsed();
    drop(other);
    let err = String::from_utf8_lossy(&out.stderr);
    json!({
        "json_bytes": text.len(),
        "nft_loads_it": out.status.success(),
        "exit": out.status.code(),
        "signal": std::os::unix::process::ExitStatusExt::signal(&out.status),
        "ms": ms(took),
        "error": err.lines().next().unwrap_or(""),
    })
}

/// One connect + request + answer.
fn round_trip(to: SocketAddr) -> Duration {
    let t = Instant::now();
    let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(2)).unwrap();
    c.write_all(b"hi").unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let d = t.elapsed();
    assert!(!out.is_empty());
    d
}

async fn latency() -> Value {
    let lab = Lab::new(2);
    let mut table = Table::new(Layout {
        pod_cidr: lab.pod_cidr.parse().unwrap(),
        ..layout(&lab)
    });
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]},
    }))
    .unwrap();
    let eps: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": TCP_PORT, "protocol": "TCP"}],
        "endpoints": [{"addresses": [lab.pods[0].ip.to_string()], "conditions": {"ready": true}}],
    }))
    .unwrap();
    let opts = Options {
        node_name: NODE.into(),
        sctp: false,
    };
    table.set_service("default/web", &model::service_ports(&svc, [&eps], &opts));
    let nft = Nft::new(lab.nft());
    nft.run(&table.commands(tokio::time::Instant::now()))
        .await
        .unwrap();
    let n = if quick() { 300 } else { 3000 };
    let direct_to = SocketAddr::from((lab.pods[0].ip, TCP_PORT));
    let service_to: SocketAddr = "10.96.0.10:80".parse().unwrap();
    let (direct, through) = in_netns(&lab.pods[1].ns, || {
        for _ in 0..50 {
            round_trip(direct_to);
            round_trip(service_to);
        }
        let (mut direct, mut through) = (Vec::new(), Vec::new());
        for _ in 0..n {
            direct.push(round_trip(direct_to));
            through.push(round_trip(service_to));
        }
        (direct, through)
    });
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let ratio = median(&through).as_secs_f64() / median(&direct).as_secs_f64();
    json!({
        "round_trips": n,
        "direct": percentiles(direct, Unit::Micros),
        "cluster_ip": percentiles(through, Unit::Micros),
        "median_ratio": ratio,
    })
}

fn main() {
    if !netlab::available() {
        println!("{}", json!({"net": {"skipped": "needs root, ip and nft"}}));
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let mut out = serde_json::Map::new();
        if common::phase("program") {
            out.insert("program".into(), program(1000).await);
        }
        if common::phase("latency") {
            out.insert("latency".into(), latency().await);
        }
        Value::Object(out)
    });
    println!("{}", json!({ "net": out }));
}
