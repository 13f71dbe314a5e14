//! `cargo bench --bench store_pressure`: the store under a steady stream of writes, with
//! etcd fed the same writes in the same run. One JSON object on stdout.
//!
//! Both get `OBJECTS` objects of 4 KiB (ConfigMaps through berth's API; keys through
//! etcd's gRPC gateway), then updates of them, round robin, at `RATE` writes per second
//! for `SECONDS`, from 16 concurrent clients. Reported for each: resident memory and bytes
//! on disk (allocated blocks) when the load ends, and for berth the peak RSS and its RSS
//! after a burst of large writes (400 updates of a 400 KB ConfigMap, the measurement of
//! the issue that bounded the store), before and 10 s after; for etcd, its `db` after its
//! own compaction (to the last revision) and defragmentation, the anchor; for berth, its
//! store after a restart that compacts to one retained event, the same footing.
//!
//! berth keeps its default retention (10,000 events or 5 minutes, at most 64 MiB), so its
//! disk holds that history while etcd's compacted `db` holds none.
//!
//! Environment: `BERTH_BENCH_OBJECTS` (10000), `BERTH_BENCH_RATE` (writes/s, 1000),
//! `BERTH_BENCH_SECONDS` (120; the 10 minutes shortened, the same for both),
//! `BERTH_BENCH_QUICK=1` (1,000 objects, 15 s), `BERTH_BENCH_ETCD` (the etcd binary,
//! `etcd` on the PATH; Debian's `etcd-server`; without one etcd's half is skipped).

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

mod common;

use common::quick;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const CLIENTS: usize = 16;

/// Resident memory of `pid` in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Bytes allocated on disk under `path`.
fn disk_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| disk_bytes(&e.path()))
                    .sum()
            })
            .unwrap_or(0)
    } else {
        meta.blocks() * 512
    }
}

/// One write: object `i` with a payload that changes with `round`.
fn payload(i: u64, round: u64) -> String {
    let mut s = format!("{i}-{round}-");
    s.push_str(&"x".repeat(4096 - s.len()));
    s
}

/// Runs `writes` (object index, round) through `write` from [`CLIENTS`] clients, at most
/// `rate` per second (0: as fast as they go). Returns the writes done.
async fn drive<F, Fut>(writes: Vec<(u64, u64)>, rate: u64, write: F) -> u64
where
    F: Fn(u64, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let write = Arc::new(write);
    let queue = Arc::new(std::sync::Mutex::new(writes.into_iter()));
    let start = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (write, queue, done) = (write.clone(), queue.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().unwrap().next();
                let Some((i, round)) = next else { break };
                let n = done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                if rate > 0 {
                    let due = start + Duration::from_secs_f64(n as f64 / rate as f64);
                    tokio::time::sleep_until(due.into()).await;
                }
                assert!(write(i, round).await, "write {i} round {round}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(std::sync::atomic::Ordering::Acquire)
}

/// Writes as (object index, round).
type Writes = Vec<(u64, u64)>;

fn plan(objects: u64, rate: u64, seconds: u64) -> (Writes, Writes) {
    let creates = (0..objects).map(|i| (i, 0)).collect();
    let updates = (0..rate * seconds)
        .map(|n| (n % objects, 1 + n / objects))
        .collect();
    (creates, updates)
}

async fn berth(objects: u64, rate: u64, seconds: u64) -> Value {
    let server = common::start_with(&["--no-node"]).await;
    let pid = server.child.id();
    let client = common::https::client_with(&server.ca, false);
    let (url, token) = (server.url.clone(), server.token.clone());
    let put = move |i: u64, round: u64| {
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        async move {
            let body = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": "default"},
                "data": {"d": payload(i, round)},
            });
            let req = if round == 0 {
                client.post(format!("{url}/api/v1/namespaces/default/configmaps"))
            } else {
                client.put(format!("{url}/api/v1/namespaces/default/configmaps/cm-{i}"))
            };
            req.bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    };
    let (creates, updates) = plan(objects, rate, seconds);
    let rss_start = rss_mib(pid);
    drive(creates, 0, put.clone()).await;
    let rss_loaded = rss_mib(pid);
    let peak = Arc::new(std::sync::Mutex::new(rss_loaded));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let r = rss_mib(pid);
                let mut p = peak.lock().unwrap();
                *p = p.max(r);
            }
        })
    };
    let started = Instant::now();
    let n = drive(updates, rate, put).await;
    let elapsed = started.elapsed().as_secs_f64();
    sampler.abort();
    let store = server.data_dir().join("store");
    let steady = json!({
        "rss_mib": rss_mib(pid),
        "peak_rss_mib": *peak.lock().unwrap(),
        "disk_bytes": disk_bytes(&store),
        "updates": n,
        "updates_per_s": n as f64 / elapsed,
    });
    // The burst: one ConfigMap of 400 KB rewritten 400 times.
    let client = common::https::client_with(&server.ca, false);
    let big = |round: u64| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big", "namespace": "default"},
            "data": {"d": format!("{round}{}", "y".repeat(400_000))},
        })
    };
    let before_burst = rss_mib(pid);
    for round in 0..400u64 {
        let req = if round == 0 {
            client.post(format!(
                "{}/api/v1/namespaces/default/configmaps",
                server.url
            ))
        } else {
            client.put(format!(
                "{}/api/v1/namespaces/default/configmaps/big",
                server.url
            ))
        };
        let r = req
            .bearer_auth(&server.token)
            .json(&big(round))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "burst write {round}");
    }
    let after_burst = rss_mib(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let burst = json!({
        "rss_mib_before": before_burst,
        "rss_mib_after": after_burst,
        "rss_mib_10s_later": rss_mib(pid),
        "disk_bytes_10s_later": disk_bytes(&store),
    });
    // As etcd is compacted to its last revision below: berth restarted on the same data
    // with a retention of one event, compacting every second.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let mut server = server;
    let _ = server.child.wait();
    let mut again = Command::new(
        std::env::var_os("BERTH_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_berth").into()),
    )
    .args([
        "serve",
        "--no-node",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(server.data_dir())
    .args(["--store-retain-events", "1", "--store-retain-seconds", "0"])
    .args(["--store-compaction-interval", "1"])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Settled: the same size three seconds running (compaction ticks every second).
    let mut compacted = disk_bytes(&store);
    let mut same = 0;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = disk_bytes(&store);
        same = if now == compacted { same + 1 } else { 0 };
        compacted = now;
        if same == 3 {
            break;
        }
    }
    let rss_compacted = rss_mib(again.id());
    let _ = again.kill();
    let _ = again.wait();
    json!({
        "rss_mib_start": rss_start,
        "rss_mib_loaded": rss_loaded,
        "steady": steady,
        "burst": burst,
        "disk_bytes_after_compaction": compacted,
        "rss_mib_after_restart_and_compaction": rss_compacted,
    })
}

struct Etcd {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_etcd(bin: &str) -> Option<Etcd> {
    let dir = tempfile::tempdir().unwrap();
    let (client_port, peer_port) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let child = Command::new(bin)
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.path().join("data"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("bench={peer}")])
        .args(["--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let etcd = Etcd { child, url, dir };
    let c = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = c.get(format!("{}/health", etcd.url)).send().await
            && r.status().is_success()
        {
            return Some(etcd);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

async fn etcd(bin: &str, objects: u64, rate: u64, seconds: u64) -> Value {
    let Some(etcd) = start_etcd(bin).await else {
        return json!({"skipped": format!("{bin} did not start")});
    };
    let pid = etcd.child.id();
    let client = reqwest::Client::new();
    let url = etcd.url.clone();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let put = move |i: u64, round: u64| {
        let (client, url) = (client.clone(), url.clone());
        let body = json!({
            "key": b64(&format!("/registry/configmaps/default/cm-{i}")),
            "value": b64(&payload(i, round)),
        });
        async move {
            client
                .post(format!("{url}/v3/kv/put"))
                .json(&body)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    };
    let (creates, updates) = plan(objects, rate, seconds);
    let rss_start = rss_mib(pid);
    drive(creates, 0, put.clone()).await;
    let rss_loaded = rss_mib(pid);
    let started = Instant::now();
    let n = drive(updates, rate, put).await;
    let elapsed = started.elapsed().as_secs_f64();
    let data = etcd.dir.path().join("data");
    let steady = json!({
        "rss_mib": rss_mib(pid),
        "disk_bytes": disk_bytes(&data),
        "updates": n,
        "updates_per_s": n as f64 / elapsed,
    });
    let c = reqwest::Client::new();
    let status: Value = c
        .post(format!("{}/v3/kv/range", etcd.url))
        .json(&json!({"key": b64("/"), "limit": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let revision: u64 = status["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let compacted = c
        .post(format!("{}/v3/kv/compaction", etcd.url))
        .json(&json!({"revision": revision.to_string(), "physical": true}))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    let defragmented = c
        .post(format!("{}/v3/maintenance/defragment", etcd.url))
        .json(&json!({}))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    let db = data.join("member/snap/db");
    json!({
        "rss_mib_start": rss_start,
        "rss_mib_loaded": rss_loaded,
        "steady": steady,
        "compacted": compacted,
        "defragmented": defragmented,
        "db_bytes_after_compaction_and_defrag": std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0),
        "rss_mib_after_defrag": rss_mib(pid),
    })
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let objects = env_or("BERTH_BENCH_OBJECTS", if quick() { 1_000 } else { 10_000 });
    let rate = env_or("BERTH_BENCH_RATE", 1_000);
    let seconds = env_or("BERTH_BENCH_SECONDS", if quick() { 15 } else { 120 });
    let bin = std::env::var("BERTH_BENCH_ETCD").unwrap_or_else(|_| "etcd".into());
    let berth = berth(objects, rate, seconds).await;
    let etcd = etcd(&bin, objects, rate, seconds).await;
    let ratio = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => json!(a / b),
        _ => Value::Null,
    };
    let out = json!({
        "objects": objects,
        "object_bytes": 4096,
        "rate_per_s": rate,
        "seconds": seconds,
        "berth": berth,
        "etcd": etcd,
        "disk_berth_over_etcd_compacted": ratio(&berth["disk_bytes_after_compaction"], &etcd["db_bytes_after_compaction_and_defrag"]),
        "disk_berth_steady_over_etcd_compacted": ratio(&berth["steady"]["disk_bytes"], &etcd["db_bytes_after_compaction_and_defrag"]),
        "disk_berth_over_etcd_steady": ratio(&berth["steady"]["disk_bytes"], &etcd["steady"]["disk_bytes"]),
        "rss_berth_over_etcd": ratio(&berth["steady"]["rss_mib"], &etcd["steady"]["rss_mib"]),
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
