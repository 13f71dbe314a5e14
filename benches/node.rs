//! `cargo bench --bench node`: the node agent's figures as one JSON object on stdout,
//! measured against the real `berth` binary with its node agent and process runtime.
//!
//! - pod create → `Running` latency p50/p99 over N pods (200; 20 with
//!   `BERTH_BENCH_QUICK=1`), each `sleep`, created one after another;
//! - then N more with an exec readiness probe of period 1 s: create → `Ready`;
//! - berth's RSS growth per running pod, and the shims' RSS and PSS per pod (each
//!   container runs under a `berth shim` process of its own).
//!
//! - `network` (as root): pod create → Ready with its address in `status.podIP`, over
//!   N pods (100; 20 quick), with the pod network and, in the same run, without it
//!   (`--no-pod-network`), both in a network namespace the bench makes (never the
//!   machine's own).
//!
//! Every pod is deleted (and its processes stopped) before the server stops.
//! `BERTH_BENCH_ONLY=pods` or `=network` runs one part.

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use berth::client::{Client, DeleteParams, Event, ListParams, WatchParams};
use berth::registry::{Kind, catalog};
use common::{Unit, percentiles, quick, start_with};
use serde_json::{Value, json};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Proportional set size: private pages plus a fair share of shared ones (the binary's
/// code is one copy in memory however many shims run it).
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Pids of the processes whose command line names `marker`.
fn pids_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// What a pod of [`create_and_wait`] waits for.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    /// Phase Running.
    Running,
    /// The Ready condition under an exec readiness probe of period 1 s.
    ReadyWithProbe,
    /// The Ready condition (no probe) with its address in `status.podIP`.
    ReadyWithAddress,
}

/// Creates `n` pods `<prefix>-<i>` one after another and returns, per pod, the time from
/// its create call to what `until` names, and how many got there.
async fn create_and_wait(
    c: &Client,
    prefix: &str,
    n: usize,
    until: Until,
) -> (Vec<Duration>, usize) {
    let pods = catalog::of(Kind::Pod);
    let reached: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watcher = {
        let (c, reached) = (c.clone(), reached.clone());
        tokio::spawn(async move {
            let mut w = c
                .watch(pods, Some("default"), &WatchParams::default())
                .await
                .unwrap();
            while let Some(Ok(ev)) = w.next().await {
                if let Event::Added(p) | Event::Modified(p) = ev {
                    let ready = || {
                        berth::types::condition(&p, "Ready").is_some_and(|c| c["status"] == "True")
                    };
                    let there = match until {
                        Until::Running => p["status"]["phase"] == "Running",
                        Until::ReadyWithProbe => ready(),
                        Until::ReadyWithAddress => {
                            ready() && p["status"]["podIP"].as_str().is_some_and(|a| !a.is_empty())
                        }
                    };
                    if there {
                        let name = p["metadata"]["name"].as_str().unwrap().to_string();
                        reached
                            .lock()
                            .unwrap()
                            .entry(name)
                            .or_insert_with(Instant::now);
                    }
                }
            }
        })
    };
    let mut sent = HashMap::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let mut container =
            json!({"name": "main", "image": "busybox", "command": ["sleep", "86401"]});
        if until == Until::ReadyWithProbe {
            container["readinessProbe"] =
                json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
        }
        let pod = json!({
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
        });
        sent.insert(name, Instant::now());
        c.create(pods, Some("default"), &pod).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let count = |r: &Mutex<HashMap<String, Instant>>| {
        r.lock()
            .unwrap()
            .keys()
            .filter(|k| sent.contains_key(*k))
            .count()
    };
    while count(&reached) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    watcher.abort();
    let got = count(&reached);
    let latencies = reached
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(name, at)| sent.get(name).map(|t| at.duration_since(*t)))
        .collect();
    (latencies, got)
}

async fn run() -> Value {
    let n = if quick() { 20 } else { 200 };
    // Room for every pod of the run (the default is Kubernetes' 110).
    let s = start_with(&["--max-pods", "500"]).await;
    let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
    let pods = catalog::of(Kind::Pod);
    // Wait for the node to register.
    let nodes = catalog::of(Kind::Node);
    while c
        .list(nodes, None, &ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_kib(s.child.id());

    let (latencies, ran) = create_and_wait(&c, "bench", n, Until::Running).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_loaded = rss_kib(s.child.id());
    let shims: Vec<u32> = pids_with("shim --dir")
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("86401"))
        })
        .collect();
    let shim_rss: u64 = shims.iter().map(|p| rss_kib(*p)).sum();
    let shim_pss: u64 = shims.iter().map(|p| pss_kib(*p)).sum();

    // With an exec readiness probe (period 1 s): create -> Ready.
    let (ready_latencies, readied) = create_and_wait(&c, "probed", n, Until::ReadyWithProbe).await;

    // Clean up: every pod deleted and its processes gone before the server stops.
    for i in 0..n * 2 {
        let name = if i < n {
            format!("bench-{i}")
        } else {
            format!("probed-{}", i - n)
        };
        let _ = c
            .delete(pods, Some("default"), &name, &DeleteParams::default())
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pids_with("sleep 86401").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    json!({
        "pods": n,
        "pods_running": ran,
        "create_to_running": percentiles(latencies, Unit::Millis),
        "pods_ready_with_probe": readied,
        "create_to_ready_with_exec_readiness_probe": percentiles(ready_latencies, Unit::Millis),
        "berth_rss_kib_per_running_pod": (rss_loaded.saturating_sub(rss_before)) as f64 / n as f64,
        "shim_rss_kib_per_pod": shim_rss as f64 / shims.len().max(1) as f64,
        "shim_pss_kib_per_pod": shim_pss as f64 / shims.len().max(1) as f64,
        "shims_seen": shims.len(),
    })
}

/// Waits until the server's node is Ready.
async fn node_ready(c: &Client) {
    let nodes = catalog::of(Kind::Node);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = c.list(nodes, None, &ListParams::default()).await.unwrap();
        if list
            .items
            .iter()
            .any(|n| berth::types::condition(n, "Ready").is_some_and(|c| c["status"] == "True"))
        {
            return;
        }
        assert!(Instant::now() < deadline, "the node did not get ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pod create → Ready with its address, with the pod network (a network namespace, a
/// veth on the bridge, an address from IPAM, the sandbox holding it) and, in the same
/// run and namespace, without it (`--no-pod-network`: the pod shares the node's
/// address) — the network's share of a pod's start. Runs in a network namespace of the
/// bench's own (as root), on a thread of its own that entered it.
fn network() -> Value {
    std::thread::spawn(|| {
        let ns = common::enter_new_netns();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = rt.block_on(async {
            let n = if quick() { 20 } else { 100 };
            let mut out = serde_json::Map::new();
            for (key, prefix, flags) in [
                ("with_pod_network", "net", &["--max-pods", "500"][..]),
                (
                    "without_pod_network",
                    "nonet",
                    &["--max-pods", "500", "--no-pod-network"][..],
                ),
            ] {
                let s = common::start_in(Some(&ns.0), flags).await;
                let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
                node_ready(&c).await;
                let (latencies, got) =
                    create_and_wait(&c, prefix, n, Until::ReadyWithAddress).await;
                out.insert(
                    key.to_string(),
                    json!({"pods": n, "pods_ready": got,
                           "create_to_ready": percentiles(latencies, Unit::Millis)}),
                );
                // Dropping the server ends its pods (`berth node reset`).
                drop(s);
            }
            Value::Object(out)
        });
        drop(ns);
        out
    })
    .join()
    .unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut out = serde_json::Map::new();
    if common::phase("pods") {
        out = match rt.block_on(run()) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
    }
    let root = rustix::process::geteuid().is_root();
    if common::phase("network") && root {
        out.insert("network".into(), network());
    }
    println!("{}", json!({ "node": out }));
}
