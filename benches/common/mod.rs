//! Helpers shared by the benchmarks: the server process, phase selection, percentiles,
//! the HTTPS client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../../tests/it/https.rs"]
pub mod https;

/// `BERTH_BENCH_QUICK=1` shrinks every phase (a smoke run).
pub fn quick() -> bool {
    std::env::var_os("BERTH_BENCH_QUICK").is_some()
}

/// Whether to run a phase: all of them, or those named in `BERTH_BENCH_ONLY`
/// (comma-separated).
pub fn phase(name: &str) -> bool {
    std::env::var("BERTH_BENCH_ONLY").map_or(true, |only| only.split(',').any(|p| p == name))
}

/// The unit percentiles are printed in.
#[derive(Clone, Copy)]
pub enum Unit {
    Micros,
    Millis,
}

/// p50 and p99 of `samples`, as `{"p50_us"|"p50_ms", "p99_…", "samples"}`.
pub fn percentiles(mut samples: Vec<Duration>, unit: Unit) -> Value {
    samples.sort();
    let (scale, suffix) = match unit {
        Unit::Micros => (1e6, "us"),
        Unit::Millis => (1e3, "ms"),
    };
    let at = |q: f64| {
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * scale
    };
    json!({
        format!("p50_{suffix}"): at(0.50),
        format!("p99_{suffix}"): at(0.99),
        "samples": samples.len(),
    })
}

/// A `berth serve` child process on a random port with a temporary data directory.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub token: String,
    pub ca: String,
    _dir: tempfile::TempDir,
    pub cold_start_ms: f64,
    /// The network namespace of the bench's own it runs in, with its pod network.
    netns: Option<String>,
}

impl Server {
    /// The server's data directory.
    #[allow(dead_code)] // not every bench imports images
    pub fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(ns) = &self.netns {
            // Its pods (and their network) end; the namespace is its maker's.
            let bin = std::env::var_os("BERTH_BENCH_BIN")
                .unwrap_or_else(|| env!("CARGO_BIN_EXE_berth").into());
            let _ = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(bin)
                .args(["node", "reset", "--data-dir"])
                .arg(self._dir.path())
                .status();
        }
    }
}

/// A network namespace of the bench's own, deleted when dropped (after the servers
/// that ran in it).
pub struct Netns(pub String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Starts the release binary and waits for `/readyz`.
pub async fn start() -> Server {
    start_with(&[]).await
}

/// [`start`] with more `serve` arguments.
pub async fn start_with(extra: &[&str]) -> Server {
    start_in(None, extra).await
}

/// Makes a network namespace of the bench's own (loopback up) and moves the calling
/// thread into it: sockets the thread opens from then on are the namespace's. A server
/// started with [`start_in`] there has its pod network without touching the machine's.
pub fn enter_new_netns() -> Netns {
    let name = format!("bb-{}", std::process::id());
    let _ = Command::new("ip")
        .args(["netns", "del", &name])
        .stderr(Stdio::null())
        .status();
    assert!(
        Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        Command::new("ip")
            .args(["netns", "exec", &name, "ip", "link", "set", "lo", "up"])
            .status()
            .unwrap()
            .success()
    );
    let ns = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&ns),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .unwrap();
    Netns(name)
}

/// [`start_with`], in network namespace `netns` (made by [`enter_new_netns`]) with the
/// pod network on; the namespace goes with the server.
pub async fn start_in(netns: Option<&str>, extra: &[&str]) -> Server {
    // berth serves only a data directory that is its user's alone.
    let dir = {
        use std::os::unix::fs::PermissionsExt;
        tempfile::Builder::new()
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap()
    };
    let started = Instant::now();
    let bin =
        std::env::var_os("BERTH_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_berth").into());
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(bin);
            c.env_remove("BERTH_NO_POD_NETWORK");
            c
        }
        None => {
            let mut c = Command::new(bin);
            // Pods share this machine's network: nothing is programmed into it.
            c.env("BERTH_NO_POD_NETWORK", "true");
            c
        }
    };
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(extra)
        // The benchmarks' pods run commands of this machine unless a bench asks otherwise.
        .args(
            (!extra
                .iter()
                .any(|a| *a == "--no-node" || *a == "--default-runtime"))
            .then_some(["--default-runtime", "process"])
            .into_iter()
            .flatten(),
        )
        .env("NO_COLOR", "1")
        .env("BERTH_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("url=").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let token = std::fs::read_to_string(dir.path().join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let ca = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
    let c = https::client_with(&ca, false);
    loop {
        if let Ok(r) = c.get(format!("{url}/readyz")).send().await
            && r.status().is_success()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cold_start_ms = started.elapsed().as_secs_f64() * 1e3;
    Server {
        child,
        url,
        token,
        ca,
        _dir: dir,
        cold_start_ms,
        netns: netns.map(str::to_string),
    }
}

impl Server {
    pub fn req(
        &self,
        c: &reqwest::Client,
        m: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        c.request(m, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// Resident memory (MiB) and CPU seconds used so far.
    pub fn usage(&self) -> (f64, f64) {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let rss_kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap();
        (rss_kb / 1024.0, cpu_seconds(&pid.to_string()))
    }
}

/// CPU seconds (user and system) that process `pid` (or `self`) has used so far.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = stat.rsplit_once(')').unwrap().1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}
