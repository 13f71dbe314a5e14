//! The `berth` binary driven as a user would: serve and stop it, look at migrations, save
//! and restore snapshots.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;

fn berth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .env("BERTH_LOG", "info")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts `berth serve`, waits until the store is ready and stops it with SIGTERM.
fn serve_once(dir: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        // Not this machine's network: the pod network's tests run in namespaces of theirs.
        .env("BERTH_NO_POD_NETWORK", "true")
        .arg(dir)
        .env("BERTH_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let before: Vec<String> = lines
        .by_ref()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains(" ready"))
        .collect();
    assert!(
        child.try_wait().unwrap().is_none(),
        "berth serve never became ready: {before:?}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "berth serve exited with {status}: {before:?} {rest:?}"
    );
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
}

#[test]
fn migrate_status_snapshot_save_and_restore_work_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();

    let o = berth(&["migrate", "status", "--data-dir", data_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("storage schema version: 0"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("0001_default_namespaces"), "{}", text(&o));
    assert!(
        !data.join("store").exists(),
        "status must not create a store"
    );

    serve_once(&data);
    let o = berth(&["migrate", "status", "--data-dir", data_s]);
    assert!(
        text(&o).contains("storage schema version: 1"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("pending migrations:     none"),
        "{}",
        text(&o)
    );

    let snap = dir.path().join("cluster.snap");
    let o = berth(&[
        "snapshot",
        "save",
        snap.to_str().unwrap(),
        "--data-dir",
        data_s,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // At least the four default namespaces and the admin token (controllers may have
    // added service accounts before the server stopped).
    let revision: u64 = text(&o)
        .split("at revision ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {}", text(&o)));
    assert!(revision >= 5, "{}", text(&o));

    let restored = dir.path().join("restored");
    let o = berth(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // The restored directory serves, and is up to date.
    serve_once(&restored);
    let o = berth(&[
        "migrate",
        "status",
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(
        text(&o).contains("storage schema version: 1"),
        "{}",
        text(&o)
    );

    // Restoring over a store is refused with advice.
    let o = berth(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("already holds a store"), "{}", text(&o));

    // Garbage is not a snapshot.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"hello").unwrap();
    let o = berth(&[
        "snapshot",
        "restore",
        junk.to_str().unwrap(),
        "--data-dir",
        dir.path().join("x").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("not a berth snapshot"), "{}", text(&o));
}

#[test]
fn a_data_directory_in_use_is_refused_with_a_clear_message() {
    let dir = crate::support::private_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        // Not this machine's network: the pod network's tests run in namespaces of theirs.
        .env("BERTH_NO_POD_NETWORK", "true")
        .arg(dir.path())
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let before: Vec<String> = lines
        .by_ref()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains(" ready"))
        .collect();
    assert!(child.try_wait().unwrap().is_none(), "{before:?}");
    let o = berth(&[
        "migrate",
        "status",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "{before:?}");
    assert!(
        text(&o).contains("in use by another berth process"),
        "{}",
        text(&o)
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The data directory is berth's alone: a new one is made 0700 with its secrets 0600 and
/// the admin token never in the log; one that others may read, one another user owns and
/// a token planted with a loose mode are each refused with what to do.
#[test]
fn the_data_directory_and_its_secrets_are_berths_alone() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "serve",
            "--no-node",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .env("BERTH_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log: Vec<String> = lines
        .by_ref()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains(" ready"))
        .collect();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for secret in ["admin.token", "pki/ca.key", "kubeconfig"] {
        assert_eq!(mode(&data.join(secret)), 0o600, "{secret}");
    }
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let log = log.join("\n");
    assert!(!log.contains(token.trim()), "{log}");
    assert!(log.contains("admin.token"), "{log}");

    let serve = |data: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args([
                "serve",
                "--no-node",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(!o.status.success(), "{}", text(&o));
        text(&o)
    };
    // A token someone else could have read or written.
    std::fs::set_permissions(
        data.join("admin.token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let said = serve(&data);
    assert!(
        said.contains("admin.token must be a plain file") && said.contains("mode 0644"),
        "{said}"
    );
    std::fs::set_permissions(
        data.join("admin.token"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // A serving key others may read.
    let key = dir.path().join("tls.key");
    std::fs::write(&key, "not even a key").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "serve",
            "--no-node",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
        ])
        .arg(data.join("ca.crt"))
        .arg("--tls-key")
        .arg(&key)
        .arg("--data-dir")
        .arg(&data)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("tls.key must be a plain file"),
        "{}",
        text(&o)
    );
    // A directory others may enter.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let said = serve(&data);
    assert!(
        said.contains("has mode 0755") && said.contains("chmod 700"),
        "{said}"
    );
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A directory another user owns.
    if rustix::process::geteuid().is_root() {
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
        let said = serve(&other);
        assert!(said.contains("is owned by uid 65534"), "{said}");
    }
}

/// A `berth serve` whose stderr is read on a thread of its own, stopped by its PID.
struct Serving {
    child: std::process::Child,
    url: String,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Serving {
    fn start(data: &Path) -> Serving {
        Self::start_with(data, &[])
    }

    fn start_with(data: &Path, extra: &[&str]) -> Serving {
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args([
                "serve",
                "--no-node",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data)
            .args(extra)
            .env("BERTH_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut url = None;
        while let Ok(l) = lines.recv_timeout(std::time::Duration::from_secs(60)) {
            if let Some(u) = l.split("url=").nth(1) {
                url = Some(u.trim().to_string());
            }
            if l.contains(" ready") {
                break;
            }
        }
        Serving {
            child,
            url: url.expect("berth serve told its URL"),
            lines,
        }
    }

    /// SIGTERM, then its exit within `secs` (None: it did not exit).
    fn stop_within(&mut self, secs: u64) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A disk that fills up under the store: writes fail, and SIGTERM still ends berth in
/// bounded time (its final flush can block for ever there); every write it acknowledged
/// is there at the next start, once space is free.
/// Creates ConfigMap `name` with `bytes` of data; its answer's code and body.
async fn create_configmap(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    name: &str,
    bytes: usize,
) -> (u16, serde_json::Value) {
    let body = json!({"metadata": {"name": name}, "data": {"b": "x".repeat(bytes)}});
    match client
        .post(format!("{url}/api/v1/namespaces/default/configmaps"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
    {
        Ok(r) => (
            r.status().as_u16(),
            r.json().await.unwrap_or(serde_json::Value::Null),
        ),
        Err(_) => (0, serde_json::Value::Null),
    }
}

/// Resident memory of `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap()
        / 1024.0
}

/// Bytes allocated on disk under `path`.
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .map(|e| disk_bytes(&e.unwrap().path()))
            .sum()
    } else {
        meta.blocks() * 512
    }
}

/// Polls `check` every 200 ms for up to a minute; its last value.
async fn eventually<T>(mut check: impl FnMut() -> (bool, T)) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (done, value) = check();
        if done || std::time::Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Waits for the store's bytes on disk to come within `disk_bound` and the RSS of `pid`
/// within 24 MiB of `baseline`, and asserts both did; `after` says after what.
async fn settles_within(store: &Path, disk_bound: u64, pid: u32, baseline: f64, after: &str) {
    let disk = eventually(|| {
        let d = disk_bytes(store);
        (d <= disk_bound, d)
    })
    .await;
    assert!(
        disk <= disk_bound,
        "the store takes {disk} bytes on disk, over {disk_bound}"
    );
    let rss = eventually(|| {
        let r = rss_mib(pid);
        (r <= baseline + 24.0, r)
    })
    .await;
    assert!(
        rss <= baseline + 24.0,
        "RSS {rss:.1} MiB after {after}, {baseline:.1} MiB before"
    );
    eprintln!("RSS {baseline:.1} -> {rss:.1} MiB, store {disk} bytes");
}

/// The server settings of the pressure tests: small bounds, compaction every second and
/// a watch cache kept fresh for two, so that what they bound shows within the test.
const SMALL_BOUNDS: &[&str] = &[
    "--store-retain-mib",
    "8",
    "--store-retain-events",
    "10",
    "--store-retain-seconds",
    "0",
    "--store-watch-cache-mib",
    "4",
    "--store-watch-cache-seconds",
    "2",
    "--store-compaction-interval",
    "1",
];

/// The first measurement: one large ConfigMap rewritten again and again once grew
/// berth by hundreds of MB of memory and a GB of disk, never given back.
#[tokio::test]
async fn rewriting_a_large_object_leaves_memory_and_disk_bounded_by_the_live_data() {
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let s = Serving::start_with(&data, SMALL_BOUNDS);
    let pid = s.child.id();
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let token = token.trim();
    let ca = std::fs::read_to_string(data.join("ca.crt")).unwrap();
    let client = crate::support::https_client(&ca);
    let url = format!("{}/api/v1/namespaces/default/configmaps", s.url);
    let body = |i: u32| json!({"metadata": {"name": "big"}, "data": {"d": format!("{i}{}", "y".repeat(400_000))}});
    let r = client
        .post(&url)
        .bearer_auth(token)
        .json(&body(0))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let baseline = rss_mib(pid);
    // 150 rewrites: 60 MB of objects, 120 MB of history with the previous states.
    for i in 1..=150 {
        let r = client
            .put(format!("{url}/big"))
            .bearer_auth(token)
            .json(&body(i))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "rewrite {i}");
    }
    // The live data is one object of 400 KB. The disk holds it, at most 8 MiB of history,
    // and log files of 4 MiB: the one being written, the next one, and up to two that
    // wait for a new base.
    let store = data.join("store");
    let bound = (400 << 10) + (8 << 20) + 4 * (4 << 20) + (4 << 20);
    // Memory: what the burst held (4 MiB of watch cache, request buffers) goes back.
    settles_within(&store, bound, pid, baseline, "the burst").await;
    // And the object is whole.
    let got: serde_json::Value = client
        .get(format!("{url}/big"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(got["data"]["d"].as_str().unwrap().starts_with("150y"));
}

/// The second measurement, scaled down: many clients creating while others
/// watch, then every object deleted; memory and disk go back to what the live data needs.
#[tokio::test]
async fn after_a_burst_of_creates_and_deletes_memory_and_disk_go_back() {
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let s = Serving::start_with(&data, SMALL_BOUNDS);
    let pid = s.child.id();
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let token = token.trim().to_string();
    let ca = std::fs::read_to_string(data.join("ca.crt")).unwrap();
    let client = crate::support::https_client(&ca);
    let url = format!("{}/api/v1/namespaces/default/configmaps", s.url);
    let warm = client.get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(warm.status().as_u16(), 200);
    let baseline = rss_mib(pid);
    let mut watchers = Vec::new();
    for _ in 0..4 {
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        watchers.push(tokio::spawn(async move {
            let mut r = client
                .get(format!("{url}?watch=true"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            let mut seen = 0usize;
            while let Ok(Some(chunk)) = r.chunk().await {
                seen += chunk.iter().filter(|b| **b == b'\n').count();
            }
            seen
        }));
    }
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (client, url, token) = (client.clone(), url.clone(), token.clone());
            tokio::spawn(async move {
                for i in 0..250 {
                    let name = format!("w{w}-{i}");
                    let body = json!({"metadata": {"name": name}, "data": {"d": "z".repeat(2048)}});
                    let r = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status().as_u16(), 201);
                }
                for i in 0..250 {
                    let r = client
                        .delete(format!("{url}/w{w}-{i}"))
                        .bearer_auth(&token)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status().as_u16(), 200);
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let store = data.join("store");
    // Nothing is live but the cluster's own objects: 8 MiB of history at most, and log
    // files of 4 MiB (written, next, two waiting for a new base).
    let bound = (1 << 20) + (8 << 20) + 4 * (4 << 20) + (4 << 20);
    settles_within(&store, bound, pid, baseline, "every object was deleted").await;
    drop(s);
    for w in watchers {
        // 2,000 creates and 2,000 deletions each.
        assert!(w.await.unwrap() >= 4000);
    }
}

#[tokio::test]
async fn past_the_quota_writes_get_507_deletes_work_and_writes_resume_after_compaction() {
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let s = Serving::start_with(
        &data,
        // The default retention (10,000 events or 5 minutes): past the quota, history goes
        // first, so the deletions free space at once.
        &["--quota-backend-bytes", &(24u64 << 20).to_string()],
    );
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let token = token.trim();
    let ca = std::fs::read_to_string(data.join("ca.crt")).unwrap();
    let client = crate::support::https_client(&ca);
    let mut made = Vec::new();
    let mut refused = None;
    for i in 0..200 {
        let name = format!("cm-{i}");
        match create_configmap(&client, &s.url, token, &name, 200 << 10).await {
            (201, _) => made.push(name),
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    let (code, status) = refused.expect("writes went on past the quota");
    assert_eq!(code, 507, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("--quota-backend-bytes") && message.contains("delete"),
        "{status}"
    );
    assert!(made.len() >= 20, "the quota leaves room: {}", made.len());
    // Reads and lists go on; deletions are taken.
    let list = client
        .get(format!("{}/api/v1/namespaces/default/configmaps", s.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status().as_u16(), 200);
    for name in &made {
        let r = client
            .delete(format!(
                "{}/api/v1/namespaces/default/configmaps/{name}",
                s.url
            ))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "delete {name}");
    }
    // A refused write has compaction run at once; once it brings the store under the
    // quota, writes go through again without a restart.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match create_configmap(&client, &s.url, token, "after", 1 << 10).await {
            (201, _) => break,
            (507, _) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => panic!("writes did not resume: {other:?}"),
        }
    }
    let metrics = client
        .get(format!("{}/metrics", s.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let disk: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("berth_store_disk_bytes "))
        .expect("berth_store_disk_bytes")
        .trim()
        .parse()
        .unwrap();
    assert!(disk < 24 << 20, "under the quota again: {disk}");
}

#[tokio::test]
async fn a_full_disk_does_not_hold_shutdown_and_loses_nothing_acknowledged() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = crate::support::private_dir();
    let fs = dir.path().join("fs");
    std::fs::create_dir(&fs).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=40m,mode=0700", "berth-test"])
        .arg(&fs)
        .status()
        .unwrap();
    assert!(mounted.success());
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(fs.clone());
    let data = fs.join("data");
    let mut s = Serving::start(&data);
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let ca = std::fs::read_to_string(data.join("ca.crt")).unwrap();
    let client = crate::support::https_client(&ca);
    let create = |name: String| {
        let (client, url, token) = (client.clone(), s.url.clone(), token.trim().to_string());
        async move { create_configmap(&client, &url, &token, &name, 200 << 10).await }
    };
    let mut acknowledged = Vec::new();
    for i in 0..3 {
        assert_eq!(create(format!("before-{i}")).await.0, 201);
        acknowledged.push(format!("before-{i}"));
    }
    // Fill what is left of the disk.
    let filler = fs.join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 40 << 20]);
    let mut refused = None;
    for i in 0..100 {
        match create(format!("during-{i}")).await {
            (201, _) => acknowledged.push(format!("during-{i}")),
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    let (code, status) = refused.expect("writes went on with the disk full");
    assert_eq!(code, 507, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("disk") && message.contains("resume"),
        "{status}"
    );
    // Reads go on.
    let read = client
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps/before-0",
            s.url
        ))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(read.status().as_u16(), 200);
    // Once there is room again, writes resume without a restart.
    std::fs::remove_file(&filler).unwrap();
    let (code, status) = create("after-room".into()).await;
    assert_eq!(code, 201, "{status}");
    acknowledged.push("after-room".into());
    // And a full disk at shutdown does not hold it up.
    let _ = std::fs::write(&filler, vec![0u8; 40 << 20]);
    let exited = s.stop_within(60);
    let said: Vec<String> = s.lines.try_iter().collect();
    assert!(
        exited.is_some(),
        "berth did not exit within 60 s of SIGTERM: {said:?}"
    );
    std::fs::remove_file(&filler).unwrap();
    let s = Serving::start(&data);
    for name in &acknowledged {
        let code = client
            .get(format!(
                "{}/api/v1/namespaces/default/configmaps/{name}",
                s.url
            ))
            .bearer_auth(token.trim())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(code, 200, "{name} was acknowledged");
    }
    drop(s);
}
