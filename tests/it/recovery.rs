//! Recovery of the real binary: `berth serve` killed with SIGKILL while pods run comes
//! back on the same data directory and adopts the very same processes: none restarted,
//! none duplicated, none left behind.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::eventually;

const PODS: &str = "/api/v1/namespaces/default/pods";

/// A `berth serve` process and a client for it.
struct Served {
    child: Child,
    url: String,
    client: reqwest::Client,
    token: String,
}

impl Served {
    /// Starts `berth serve` on `dir` and waits until it is ready.
    fn start(dir: &Path) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--node-name",
                "kill-node",
            ])
            .arg("--data-dir")
            .arg(dir)
            .env("BERTH_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut url = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(u) = line.split("url=").nth(1) {
                url = Some(u.trim().to_string());
            }
            if line.contains(" ready ") {
                break;
            }
        }
        // Keep reading the log, so berth never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
        let token = std::fs::read_to_string(dir.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Served {
            child,
            url: url.expect("berth logs its URL"),
            client: crate::support::https_client(&ca),
            token,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let code = resp.status().as_u16();
        (code, resp.json().await.unwrap_or(Value::Null))
    }

    async fn pod(&self, name: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, &format!("{PODS}/{name}"), None)
            .await
    }
}

/// The pids of processes whose command line is exactly `cmdline` (NUL-separated).
fn pids_of(cmdline: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = cmdline
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &i32| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect();
    pids.sort_unstable();
    pids
}

#[tokio::test]
async fn a_berth_killed_with_sigkill_adopts_the_same_processes_when_it_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut first = Served::start(&data);
    let pod = json!({
        "metadata": {"name": "survivor"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                  "command": ["sleep", "7801"]}]},
    });
    let (code, out) = first.call(reqwest::Method::POST, PODS, Some(pod)).await;
    assert_eq!(code, 201, "{out}");
    let before = eventually(30, "the pod runs", || async {
        let (_, p) = first.pod("survivor").await;
        if p["status"]["phase"] == "Running" {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let pids = pids_of(&["sleep", "7801"]);
    assert_eq!(pids.len(), 1, "{pids:?}");

    // SIGKILL: no shutdown, no flush beyond what the store made durable.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(
        pids_of(&["sleep", "7801"]),
        pids,
        "the container outlives berth"
    );

    let mut second = Served::start(&data);
    // A change to the pod makes the agent sync it at once and write what it sees.
    let label = second
        .client
        .patch(format!("{}{PODS}/survivor", second.url))
        .bearer_auth(&second.token)
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"after":"sigkill"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(label.status().as_u16(), 200);
    let after = eventually(30, "the same container, adopted", || async {
        let (_, p) = second.pod("survivor").await;
        let c = &p["status"]["containerStatuses"][0];
        if p["metadata"]["labels"]["after"] == "sigkill" && c["state"]["running"].is_object() {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let (b, a) = (
        &before["status"]["containerStatuses"][0],
        &after["status"]["containerStatuses"][0],
    );
    assert_eq!(a["containerID"], b["containerID"]);
    assert_eq!(a["restartCount"], 0);
    assert_eq!(
        a["state"]["running"]["startedAt"],
        b["state"]["running"]["startedAt"]
    );
    // Still the very same process, and only it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pids_of(&["sleep", "7801"]), pids);

    second
        .call(reqwest::Method::DELETE, &format!("{PODS}/survivor"), None)
        .await;
    eventually(30, "the pod and its process are gone", || async {
        let (code, _) = second.pod("survivor").await;
        let left = pids_of(&["sleep", "7801"]);
        if code == 404 && left.is_empty() {
            Ok(())
        } else {
            Err(format!("{code} {left:?}"))
        }
    })
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status();
    second.child.wait().unwrap();
}
