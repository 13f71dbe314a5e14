//! `cargo bench --bench oci`: the `oci` runtime's figures as one JSON object on stdout,
//! measured against the real `berth` binary with runc (Debian's `runc`) and an image of
//! Debian's `busybox-static` made here and imported (nothing is pulled):
//!
//! - the floor: `runc run` of a prepared bundle whose process is `true`, start to end,
//!   p50/p99 over N runs (100; 20 with `BERTH_BENCH_QUICK=1`);
//! - pod create → `Running` with the image in the store, p50/p99 over N pods, each
//!   `sleep`, created one after another;
//! - berth's RSS idle with no container and with 20 containers running.
//!
//! Needs root, runc and busybox-static; without them it says so in its output. Every pod
//! is deleted (and its processes stopped) before the server stops.

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use berth::client::{Client, DeleteParams, Event, ListParams, WatchParams};
use berth::registry::{Kind, catalog};
use common::{Unit, percentiles, quick, start_with};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const IMAGE: &str = "example.com/bench:1";

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

fn running(argv: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).replace('\0', " ").trim_end() == argv)
        .count()
}

fn digest(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

/// A tar header of root's, every numeric field set.
fn header() -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    h.set_mode(0o755);
    h
}

/// An OCI archive of busybox-static with `sh`, `sleep` and `true`.
fn image_archive() -> Vec<u8> {
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed");
    let mut layer = tar::Builder::new(Vec::new());
    let mut h = header();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    layer.append_data(&mut h, "bin/", &[][..]).unwrap();
    let mut h = header();
    h.set_mode(0o755);
    h.set_size(busybox.len() as u64);
    layer
        .append_data(&mut h, "bin/busybox", busybox.as_slice())
        .unwrap();
    for applet in ["sh", "sleep", "true"] {
        let mut h = header();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        layer
            .append_link(&mut h, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let tar = layer.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    let gz = gz.finish().unwrap();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::to_vec(&json!({
        "architecture": arch, "os": "linux", "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [digest(&tar)]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(&gz), "size": gz.len()}],
    }))
    .unwrap();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": digest(&manifest), "size": manifest.len(),
                       "annotations": {"org.opencontainers.image.ref.name": IMAGE}}],
    }))
    .unwrap();
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let files = [
        (blob(&digest(&gz)), gz.clone()),
        (blob(&digest(&config)), config.clone()),
        (blob(&digest(&manifest)), manifest.clone()),
        ("index.json".to_string(), index),
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
    ];
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in &files {
        let mut h = header();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

/// `runc run` of a prepared bundle (busybox's `true`, read-only root), `n` times.
fn runc_floor(n: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    let rootfs = bundle.join("rootfs/bin");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", rootfs.join("true")).unwrap();
    let status = Command::new("runc")
        .arg("spec")
        .current_dir(&bundle)
        .status()
        .unwrap();
    assert!(status.success(), "runc spec");
    let path = bundle.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["process"]["terminal"] = json!(false);
    config["process"]["args"] = json!(["/bin/true"]);
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let root = dir.path().join("state");
    (0..n)
        .map(|i| {
            let t = Instant::now();
            let status = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["run", "--bundle"])
                .arg(&bundle)
                .arg(format!("floor-{i}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "runc run");
            t.elapsed()
        })
        .collect()
}

/// Creates `n` pods `<prefix>-<i>` of the image one after another; per pod, the time
/// from its create call to its phase Running.
async fn create_and_wait(c: &Client, prefix: &str, n: usize) -> (Vec<Duration>, usize) {
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
                if let Event::Added(p) | Event::Modified(p) = ev
                    && p["status"]["phase"] == "Running"
                {
                    let name = p["metadata"]["name"].as_str().unwrap().to_string();
                    reached
                        .lock()
                        .unwrap()
                        .entry(name)
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    let mut sent = HashMap::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let pod = json!({
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "main", "image": IMAGE, "command": ["sleep", "86402"]}]},
        });
        sent.insert(name, Instant::now());
        c.create(pods, Some("default"), &pod).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
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
    let root = rustix::process::geteuid().is_root();
    let runc = Command::new("runc").arg("--version").output().is_ok();
    if !root || !runc || !std::path::Path::new("/bin/busybox").exists() {
        return json!({"skipped": "needs root, runc and busybox-static"});
    }
    let n = if quick() { 20 } else { 100 };
    let floor = runc_floor(n);
    let s = start_with(&["--max-pods", "500", "--default-runtime", "oci"]).await;
    let archive = s.data_dir().join("bench-image.tar");
    std::fs::write(&archive, image_archive()).unwrap();
    let imported = Command::new(
        std::env::var_os("BERTH_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_berth").into()),
    )
    .args(["image", "import"])
    .arg(&archive)
    .arg("--data-dir")
    .arg(s.data_dir())
    .status()
    .unwrap();
    assert!(imported.success(), "berth image import");
    let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
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
    let rss_idle = rss_kib(s.child.id());
    // 20 containers running, then the rest of the N.
    let (mut latencies, mut ran) = create_and_wait(&c, "twenty", 20).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_twenty = rss_kib(s.child.id());
    if n > 20 {
        let (more, more_ran) = create_and_wait(&c, "more", n - 20).await;
        latencies.extend(more);
        ran += more_ran;
    }
    let pods = catalog::of(Kind::Pod);
    for (prefix, count) in [("twenty", 20), ("more", n.saturating_sub(20))] {
        for i in 0..count {
            let _ = c
                .delete(
                    pods,
                    Some("default"),
                    &format!("{prefix}-{i}"),
                    &DeleteParams::default(),
                )
                .await;
        }
    }
    // Gone from the API once the node has stopped each pod's containers and sandbox.
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline
        && (running("sleep 86402") > 0
            || !c
                .list(pods, Some("default"), &ListParams::default())
                .await
                .map(|l| l.items.is_empty())
                .unwrap_or(false))
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    json!({
        "pods": n,
        "pods_running": ran,
        "runc_run_of_a_prepared_bundle": percentiles(floor, Unit::Millis),
        "create_to_running": percentiles(latencies, Unit::Millis),
        "berth_rss_kib_idle": rss_idle,
        "berth_rss_kib_with_20_containers": rss_twenty,
        "berth_rss_kib_growth_with_20_containers": rss_twenty.saturating_sub(rss_idle),
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(run());
    println!("{}", json!({ "oci": out }));
}
