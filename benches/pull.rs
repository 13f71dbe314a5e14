//! `cargo bench --bench pull`: pulling an image from a registry, as one JSON object on
//! stdout. Debian's `docker-registry` is started on loopback (plain HTTP) and an image of
//! ≈ 100 MB (busybox-static and four layers of 24 MiB that do not compress) is pushed to
//! it with `skopeo`; then, each N times (3; 1 with `BERTH_BENCH_QUICK=1`) into an empty
//! directory:
//!
//! - berth: `berth image pull` (the node's code path: fetch, verify, unpack every layer);
//! - the anchor: `skopeo copy docker://… oci:…` then `umoci unpack` of the same image
//!   (Debian's packages), the nearest pair of tools that does the same work.
//!
//! Reported: the median of each, berth's time over the anchor's (goal ≤ 1.0), and the
//! peak RSS of each (the kernel's high-water mark, read while the process runs). Needs
//! root, docker-registry, skopeo and umoci; without them it says so in its output.

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::quick;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn digest(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn tar_of(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// An OCI archive of the image `name`: busybox-static, then four layers of noise.
fn image_archive(name: &str) -> (Vec<u8>, u64) {
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed");
    let mut tars = vec![tar_of(&[("bin/busybox", &busybox, 0o755)])];
    for i in 0..4u64 {
        tars.push(tar_of(&[(
            &format!("data/{i}"),
            &noise(24 << 20, i + 1),
            0o644,
        )]));
    }
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let mut descs = Vec::new();
    let mut size = 0u64;
    for t in &tars {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(t).unwrap();
        let gz = gz.finish().unwrap();
        size += gz.len() as u64;
        descs.push(
            json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": digest(&gz), "size": gz.len()}),
        );
        files.push((blob(&digest(&gz)), gz));
    }
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let diff_ids: Vec<String> = tars.iter().map(|t| digest(t)).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": arch, "os": "linux", "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    files.push((blob(&digest(&config)), config.clone()));
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": digest(&config), "size": config.len()},
        "layers": descs,
    }))
    .unwrap();
    files.push((blob(&digest(&manifest)), manifest.clone()));
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(&manifest), "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": name}}],
    }))
    .unwrap();
    files.push(("index.json".into(), index));
    files.push((
        "oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in &files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data.as_slice()).unwrap();
    }
    (b.into_inner().unwrap(), size)
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd` to its end: how long it took and its peak RSS in KiB (VmHWM, read while
/// it runs).
fn timed(cmd: &mut Command) -> (Duration, u64) {
    let began = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0u64;
    loop {
        if let Some(hwm) = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
        {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            assert!(status.success(), "{cmd:?}: {err}");
            return (began.elapsed(), peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run() -> Value {
    if !rustix::process::geteuid().is_root()
        || !["docker-registry", "skopeo", "umoci"]
            .iter()
            .all(|p| have(p))
        || !Path::new("/bin/busybox").exists()
    {
        return json!({"skipped": "needs root, docker-registry, skopeo, umoci and busybox-static"});
    }
    let n = if quick() { 1 } else { 3 };
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let config = format!(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
        dir.path().join("registry").display()
    );
    std::fs::write(dir.path().join("config.yml"), config).unwrap();
    let _registry = Registry(
        Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    while std::net::TcpStream::connect(&host).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (archive, size) = image_archive("big");
    let file = dir.path().join("big.tar");
    std::fs::write(&file, archive).unwrap();
    let image = format!("{host}/bench/big:1");
    timed(
        Command::new("skopeo")
            .args([
                "copy",
                "--quiet",
                "--insecure-policy",
                "--dest-tls-verify=false",
            ])
            .arg(format!("oci-archive:{}:big", file.display()))
            .arg(format!("docker://{image}")),
    );
    let berth =
        std::env::var_os("BERTH_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_berth").into());
    let (mut ours, mut anchor) = (Vec::new(), Vec::new());
    let (mut ours_rss, mut skopeo_rss, mut umoci_rss) = (0, 0, 0);
    for i in 0..n {
        let data = dir.path().join(format!("berth-{i}"));
        let (t, rss) = timed(
            Command::new(&berth)
                .args(["image", "pull", &image, "--data-dir"])
                .arg(&data),
        );
        ours.push(t);
        ours_rss = ours_rss.max(rss);
        let _ = std::fs::remove_dir_all(&data);
        let layout = dir.path().join(format!("oci-{i}"));
        let (t1, rss1) = timed(
            Command::new("skopeo")
                .args([
                    "copy",
                    "--quiet",
                    "--insecure-policy",
                    "--src-tls-verify=false",
                ])
                .arg(format!("docker://{image}"))
                .arg(format!("oci:{}:big", layout.display())),
        );
        let bundle = dir.path().join(format!("bundle-{i}"));
        let (t2, rss2) = timed(
            Command::new("umoci")
                .args(["unpack", "--image"])
                .arg(format!("{}:big", layout.display()))
                .arg(&bundle),
        );
        anchor.push(t1 + t2);
        skopeo_rss = skopeo_rss.max(rss1);
        umoci_rss = umoci_rss.max(rss2);
        let _ = std::fs::remove_dir_all(&layout);
        let _ = std::fs::remove_dir_all(&bundle);
    }
    let (ours, anchor) = (median(ours), median(anchor));
    json!({
        "image_bytes": size,
        "runs": n,
        "berth_pull_and_unpack_ms": ours.as_secs_f64() * 1e3,
        "skopeo_copy_and_umoci_unpack_ms": anchor.as_secs_f64() * 1e3,
        "berth_over_anchor": ours.as_secs_f64() / anchor.as_secs_f64(),
        "berth_peak_rss_kib": ours_rss,
        "skopeo_peak_rss_kib": skopeo_rss,
        "umoci_peak_rss_kib": umoci_rss,
    })
}

fn main() {
    println!("{}", json!({ "pull": run() }));
}
