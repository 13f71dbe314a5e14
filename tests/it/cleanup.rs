//! Nothing left behind: a dropped test server ends its pods, `berth node reset` ends the
//! pods of a stopped berth (and only that berth's), a container's leftovers end with it,
//! and `berth node leftovers` finds a deliberate leak.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::node::{NODE, PODS, node_settings, pod_until, run_pod};
use crate::support::{DataDir, TestServer};

/// The live processes whose command line is exactly `cmdline` (arguments joined by
/// spaces), with their start times so a reused pid is not mistaken for one of them.
fn processes(cmdline: &str) -> Vec<(i32, u64)> {
    berth::runtime::reset::scan()
        .into_iter()
        .filter(|p| !p.zombie)
        .filter(|p| {
            let raw = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            text.trim() == cmdline
        })
        .map(|p| (p.pid, p.start_ticks))
        .collect()
}

/// Whether any of `procs` still runs.
fn any_alive(procs: &[(i32, u64)]) -> bool {
    let now = berth::runtime::reset::scan();
    procs.iter().any(|(pid, ticks)| {
        now.iter()
            .any(|p| p.pid == *pid && p.start_ticks == *ticks && !p.zombie)
    })
}

/// A pod whose container starts `sleep MARK` three ways: in a session of its own, in the
/// background of its process group, and as itself; its second container ignores SIGTERM.
fn stubborn_pod(name: &str, mark: u32) -> Value {
    let sleep = format!("sleep {mark}");
    json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "tree", "image": "busybox", "command": ["sh", "-c",
                    format!("setsid {sleep} & {sleep} & exec {sleep}")]},
                {"name": "deaf", "image": "busybox", "command": ["sh", "-c",
                    format!("trap '' TERM; {sleep} & wait")]},
            ],
        },
    })
}

/// Waits until `count` processes run `sleep MARK`; returns them.
async fn sleeping(mark: u32, count: usize) -> Vec<(i32, u64)> {
    crate::support::eventually(30, &format!("{count} × sleep {mark} run"), || async {
        let found = processes(&format!("sleep {mark}"));
        if found.len() >= count {
            Ok(found)
        } else {
            Err(format!("{found:?}"))
        }
    })
    .await
}

fn berth(args: &[&str]) -> crate::support::CliRun {
    let o = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .env_remove("BERTH_DATA_DIR")
        .output()
        .unwrap();
    crate::support::CliRun {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test]
async fn a_dropped_server_ends_every_process_its_pods_started() {
    // Without cgroups, so that only the process tree below each shim finds them.
    let s = TestServer::start_with(|c| {
        c.node = Some(node_settings(NODE, |n| n.cgroups = false));
    })
    .await;
    run_pod(&s, stubborn_pod("stubborn", 7911)).await;
    let procs = sleeping(7911, 4).await;
    let root = s.dir.path().join("pods");
    let found = berth::runtime::reset::leftovers_of(&root);
    for (pid, _) in &procs {
        assert!(
            found.processes.iter().any(|(p, _)| p == pid),
            "{pid} is found: {found}"
        );
    }
    drop(s);
    assert!(!any_alive(&procs), "every sleep ended: {procs:?}");
}

#[tokio::test]
async fn what_a_container_leaves_running_ends_with_it() {
    let s = crate::node::server().await;
    let (code, out) = s
        .post(
            PODS,
            crate::node::pod("brief", "Never", "setsid sleep 7912 & sleep 7912 & exit 0"),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    pod_until(&s, "brief", "the pod succeeds", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(
        processes("sleep 7912"),
        vec![],
        "its children ended with it"
    );
}

#[tokio::test]
async fn berth_node_reset_ends_the_pods_of_a_stopped_berth_and_no_others() {
    let other = crate::node::server().await;
    run_pod(
        &other,
        crate::node::pod("bystander", "Always", "exec sleep 7913"),
    )
    .await;
    let bystander = sleeping(7913, 1).await;

    let s = TestServer::start_with(|c| c.node = Some(node_settings("resetting", |_| {}))).await;
    let mut p = stubborn_pod("stubborn", 7914);
    p["spec"]["nodeName"] = json!("resetting");
    run_pod(&s, p).await;
    let procs = sleeping(7914, 4).await;
    let data = s.dir.path().to_path_buf();
    let cgroups = berth::runtime::reset::cgroup_parents(&data.join("pods"));

    // Refused while the server runs.
    let refused = berth(&["node", "reset", "--data-dir", path(&data)]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("is in use by berth (pid"),
        "{refused:?}"
    );
    assert!(any_alive(&procs));

    // Stopped, its pods run on, as they would for the next berth to adopt.
    let dir: DataDir = s.stop().await;
    assert!(any_alive(&procs), "pods outlive a stopped berth");
    let listed = berth(&["node", "leftovers", "--data-dir", path(&data)]);
    assert_eq!(listed.code, 1, "{listed:?}");
    assert!(listed.stdout.contains("sleep 7914"), "{listed:?}");

    let reset = berth(&["node", "reset", "--data-dir", path(&data)]);
    assert_eq!(reset.code, 0, "{reset:?}");
    assert!(reset.stdout.starts_with("ended "), "{reset:?}");
    assert!(!any_alive(&procs), "every process of its pods ended");
    for c in &cgroups {
        assert!(!c.exists(), "{} is removed", c.display());
    }
    let clean = berth(&["node", "leftovers", "--data-dir", path(&data)]);
    assert_eq!(
        (clean.code, clean.stdout.as_str()),
        (0, "nothing left behind\n")
    );
    let again = berth(&["node", "reset", "--data-dir", path(&data)]);
    assert_eq!(
        (again.code, again.stdout.as_str()),
        (0, "nothing was running\n")
    );

    // The other berth's pod was not touched.
    assert!(any_alive(&bystander), "the other berth's pod runs on");
    let (_, p) = other.get(&format!("{PODS}/bystander")).await;
    assert_eq!(p["status"]["phase"], "Running");
    drop(dir);
}

#[tokio::test]
async fn the_leak_check_names_a_deliberate_leak() {
    use berth::runtime::Runtime;
    let data = DataDir::new();
    let root = data.path().join("pods");
    {
        // A runtime that is dropped without being closed: its container runs on.
        let rt = berth::runtime::process::ProcessRuntime::open(
            &root,
            Path::new(env!("CARGO_BIN_EXE_berth")),
            berth::runtime::shim::Rotation::default(),
        )
        .unwrap();
        let spec = crate::runtime::spec("leak", "c", "setsid sleep 7915 & exec sleep 7915");
        rt.start(&spec).await.unwrap();
    }
    let procs = sleeping(7915, 2).await;
    let mine = berth(&["node", "leftovers", "--data-dir", path(data.path())]);
    assert_eq!(mine.code, 1, "{mine:?}");
    for (pid, _) in &procs {
        assert!(
            mine.stdout.contains(&format!("process {pid}: sleep 7915")),
            "{mine:?}"
        );
    }
    let machine = berth(&["node", "leftovers"]);
    assert_eq!(machine.code, 1, "{machine:?}");
    assert!(machine.stdout.contains("sleep 7915"), "{machine:?}");

    let reset = berth(&["node", "reset", "--data-dir", path(data.path())]);
    assert_eq!(reset.code, 0, "{reset:?}");
    assert!(!any_alive(&procs));
    let clean = berth(&["node", "leftovers", "--data-dir", path(data.path())]);
    assert_eq!(
        (clean.code, clean.stdout.as_str()),
        (0, "nothing left behind\n")
    );
}
