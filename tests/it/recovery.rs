//! Recovery of the real binary: `berth serve` killed with SIGKILL while pods run comes
//! back on the same data directory and adopts the very same processes: none restarted,
//! none duplicated, none left behind.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
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
    /// The latest warnings and errors berth logged, for the message of a failed wait.
    warnings: Arc<Mutex<VecDeque<String>>>,
    data: PathBuf,
}

impl Drop for Served {
    /// A test that fails leaves no berth behind, nor the containers it ran: their
    /// processes would be counted by the next test.
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Err(e) = berth::app::reset_node(&self.data) {
            eprintln!(
                "could not end the containers of {}: {e}",
                self.data.display()
            );
        }
    }
}

impl Served {
    /// Starts `berth serve` on `dir` and waits until it is ready.
    fn start(dir: &Path) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
            // Not this machine's network: the pod network's tests run in namespaces.
            .env("BERTH_NO_POD_NETWORK", "true")
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--node-name",
                "kill-node",
                // Its pods run their commands: none has an image in the store.
                "--default-runtime",
                "process",
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
        let warnings = Arc::new(Mutex::new(VecDeque::new()));
        let kept = warnings.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    let mut kept = kept.lock().unwrap();
                    if kept.len() == 40 {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            }
        });
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
            warnings,
            data: dir.to_path_buf(),
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

/// Each pod's name, phase, deletion mark and container states: what a failed wait shows.
async fn pods_summary(served: &Served) -> String {
    let (_, list) = served.call(reqwest::Method::GET, PODS, None).await;
    let pods = list["items"].as_array().cloned().unwrap_or_default();
    let each: Vec<String> = pods
        .iter()
        .map(|p| {
            format!(
                "{} {} deleting={} {}",
                p["metadata"]["name"],
                p["status"]["phase"],
                p["metadata"]["deletionTimestamp"],
                p["status"]["containerStatuses"]
            )
        })
        .collect();
    let warnings: Vec<String> = served.warnings.lock().unwrap().iter().cloned().collect();
    format!(
        "{}; berth warned: {}",
        each.join("; "),
        warnings.join(" | ")
    )
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
    let dir = crate::support::private_dir();
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

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// A Deployment's status as `kubectl rollout status` reads it: rolled out when every
/// replica is updated and available and none is old.
fn rolled_out(d: &Value) -> bool {
    let st = &d["status"];
    let want = &d["spec"]["replicas"];
    st["observedGeneration"] == d["metadata"]["generation"]
        && &st["updatedReplicas"] == want
        && &st["replicas"] == want
        && &st["availableReplicas"] == want
}

/// kill -9 of berth in the middle of a rolling update: the rollout completes after the
/// restart, with exactly the pods of the new template running and none of the old.
#[tokio::test]
async fn a_rollout_interrupted_by_sigkill_completes_after_the_restart() {
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let mut first = Served::start(&data);
    let deployment = |arg: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "roll"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "roll"}},
                "template": {
                    "metadata": {"labels": {"app": "roll"}},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                        {"name": "c", "image": "busybox", "command": ["sleep", arg]}]},
                },
            },
        })
    };
    let (code, out) = first
        .call(reqwest::Method::POST, DEPLOYS, Some(deployment("7811")))
        .await;
    assert_eq!(code, 201, "{out}");
    eventually(60, "three pods of the first template", || async {
        let (_, d) = first
            .call(reqwest::Method::GET, &format!("{DEPLOYS}/roll"), None)
            .await;
        let pids = pids_of(&["sleep", "7811"]);
        if rolled_out(&d) && pids.len() == 3 {
            Ok(())
        } else {
            Err(format!("{} {pids:?}", d["status"]))
        }
    })
    .await;
    let (code, out) = first
        .call(
            reqwest::Method::PUT,
            &format!("{DEPLOYS}/roll"),
            Some(deployment("7812")),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    // Mid-rollout: the new template runs somewhere, the old one still does.
    eventually(60, "the rollout under way", || async {
        let (new, old) = (pids_of(&["sleep", "7812"]), pids_of(&["sleep", "7811"]));
        if !new.is_empty() && !old.is_empty() {
            Ok(())
        } else {
            Err(format!("{new:?} {old:?}"))
        }
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = Served::start(&data);
    eventually(90, "the rollout completed", || async {
        let (_, d) = second
            .call(reqwest::Method::GET, &format!("{DEPLOYS}/roll"), None)
            .await;
        let (new, old) = (pids_of(&["sleep", "7812"]), pids_of(&["sleep", "7811"]));
        if rolled_out(&d) && new.len() == 3 && old.is_empty() {
            Ok(())
        } else {
            let pods = pods_summary(&second).await;
            Err(format!(
                "{} new {new:?} old {old:?}; pods {pods}",
                d["status"]
            ))
        }
    })
    .await;
    let (_, rss) = second
        .call(
            reqwest::Method::GET,
            "/apis/apps/v1/namespaces/default/replicasets",
            None,
        )
        .await;
    let sizes: Vec<i64> = rss["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rs| rs["spec"]["replicas"].as_i64().unwrap())
        .collect();
    assert_eq!(sizes.len(), 2, "one set per template: {rss}");
    assert_eq!(sizes.iter().sum::<i64>(), 3, "{sizes:?}");
    // Still exactly three after a while: nothing duplicated.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pids_of(&["sleep", "7812"]).len(), 3);

    second
        .call(reqwest::Method::DELETE, &format!("{DEPLOYS}/roll"), None)
        .await;
    eventually(60, "the pods and their processes are gone", || async {
        let left = pids_of(&["sleep", "7812"]);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status();
    second.child.wait().unwrap();
}

const STSS: &str = "/apis/apps/v1/namespaces/default/statefulsets";

/// kill -9 of berth in the middle of a StatefulSet's rolling update: after the restart
/// the update goes on down the ordinals and completes, one process per ordinal, all of
/// the new template.
#[tokio::test]
async fn a_stateful_set_update_interrupted_by_sigkill_completes_after_the_restart() {
    async fn status(served: &Served) -> Value {
        let path = format!("{STSS}/db");
        served.call(reqwest::Method::GET, &path, None).await.1
    }
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let mut first = Served::start(&data);
    let set = |arg: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 3,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                        {"name": "c", "image": "busybox", "command": ["sleep", arg]}]},
                },
            },
        })
    };
    let (code, out) = first
        .call(reqwest::Method::POST, STSS, Some(set("7821")))
        .await;
    assert_eq!(code, 201, "{out}");
    eventually(60, "three pods of the first template", || async {
        let st = status(&first).await["status"].clone();
        let pids = pids_of(&["sleep", "7821"]);
        if st["readyReplicas"] == 3 && pids.len() == 3 {
            Ok(())
        } else {
            Err(format!("{st} {pids:?}"))
        }
    })
    .await;
    let (code, out) = first
        .call(
            reqwest::Method::PUT,
            &format!("{STSS}/db"),
            Some(set("7822")),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(60, "the update under way", || async {
        let (new, old) = (pids_of(&["sleep", "7822"]), pids_of(&["sleep", "7821"]));
        if !new.is_empty() && !old.is_empty() {
            Ok(())
        } else {
            Err(format!("{new:?} {old:?}"))
        }
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = Served::start(&data);
    let done = eventually(90, "the update completed", || async {
        let obj = status(&second).await;
        let st = &obj["status"];
        let (new, old) = (pids_of(&["sleep", "7822"]), pids_of(&["sleep", "7821"]));
        let complete = st["observedGeneration"] == obj["metadata"]["generation"]
            && st["updatedReplicas"] == 3
            && st["readyReplicas"] == 3
            && st["currentRevision"] == st["updateRevision"];
        if complete && new.len() == 3 && old.is_empty() {
            Ok(obj)
        } else {
            let pods = pods_summary(&second).await;
            Err(format!("{st} new {new:?} old {old:?}; pods {pods}"))
        }
    })
    .await;
    let (_, pods) = second
        .call(
            reqwest::Method::GET,
            "/api/v1/namespaces/default/pods?labelSelector=app%3Ddb",
            None,
        )
        .await;
    let mut names: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let rev = &p["metadata"]["labels"]["controller-revision-hash"];
            assert_eq!(rev, &done["status"]["updateRevision"], "{p}");
            p["metadata"]["name"].as_str().unwrap()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["db-0", "db-1", "db-2"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pids_of(&["sleep", "7822"]).len(), 3);

    second
        .call(reqwest::Method::DELETE, &format!("{STSS}/db"), None)
        .await;
    eventually(60, "the pods and their processes are gone", || async {
        let left = pids_of(&["sleep", "7822"]);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status();
    second.child.wait().unwrap();
}

const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";

/// kill -9 of berth in the middle of a Job: after the restart the Job completes, and
/// every completion is counted exactly once (no pod counted twice, none lost and run
/// again).
#[tokio::test]
async fn a_job_interrupted_by_sigkill_counts_every_completion_once() {
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let mut first = Served::start(&data);
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "count"},
        "spec": {
            "completions": 8,
            "parallelism": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "command": ["sleep", "0.4"]}]}},
        },
    });
    let (code, out) = first.call(reqwest::Method::POST, JOBS, Some(job)).await;
    assert_eq!(code, 201, "{out}");
    eventually(60, "some completions counted", || async {
        let (_, j) = first
            .call(reqwest::Method::GET, &format!("{JOBS}/count"), None)
            .await;
        let done = j["status"]["succeeded"].as_i64().unwrap_or(0);
        if done >= 2 {
            Ok(())
        } else {
            Err(j["status"].to_string())
        }
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = Served::start(&data);
    let j = eventually(90, "the job complete", || async {
        let (_, j) = second
            .call(reqwest::Method::GET, &format!("{JOBS}/count"), None)
            .await;
        let complete = j["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
        });
        if complete {
            Ok(j)
        } else {
            Err(j["status"].to_string())
        }
    })
    .await;
    assert_eq!(j["status"]["succeeded"], 8, "{}", j["status"]);
    let (_, pods) = second
        .call(
            reqwest::Method::GET,
            &format!("{PODS}?labelSelector=batch.kubernetes.io%2Fjob-name%3Dcount"),
            None,
        )
        .await;
    let phases: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["status"]["phase"].as_str().unwrap_or(""))
        .collect();
    // One Succeeded pod per completion; a pod the crash cut short may have failed, and
    // then it is counted as a failure, once.
    let count = |phase: &str| phases.iter().filter(|p| **p == phase).count() as i64;
    assert_eq!(count("Succeeded"), 8, "one pod per completion: {phases:?}");
    assert_eq!(
        j["status"]["failed"].as_i64().unwrap_or(0),
        count("Failed"),
        "every failure counted once: {phases:?} {}",
        j["status"]
    );
    assert_eq!(phases.len() as i64, 8 + count("Failed"), "{phases:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status();
    second.child.wait().unwrap();
}
