//! Resources on the node against a real server: memory and cpu limits enforced through
//! the machine's cgroups (an OOM kill reported as `OOMKilled`, the CFS quota written),
//! limits reported as not enforced without cgroups, and admission turning away pods the
//! node cannot take.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::node::pod_until;
use crate::support::{TestServer, eventually};

const PODS: &str = "/api/v1/namespaces/default/pods";
const NODE: &str = "resources-node";
/// The cgroup under which berth puts pods (as `berth serve` names it).
use berth::runtime::cgroup::PARENT;

async fn server(tune: impl FnOnce(&mut berth::app::NodeSettings)) -> TestServer {
    TestServer::start_with(|c| c.node = Some(crate::node::node_settings(NODE, tune))).await
}

/// The hierarchy of this machine that holds `controller`, when berth can use cgroups
/// here (root, a writable hierarchy); otherwise says why the test does not apply.
pub(crate) fn hierarchy(controller: &str) -> Option<berth::runtime::cgroup::Hierarchy> {
    use berth::runtime::cgroup::{Cgroups, Layout};
    let layout = Layout::detect().ok()?;
    if let Err(why) = Cgroups::new(&layout, PARENT) {
        eprintln!("skipped: cgroups are not usable here: {why}");
        return None;
    }
    layout.with(controller).cloned()
}

fn pod(name: &str, policy: &str, script: &str, resources: Value) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script],
                            "resources": resources}],
        },
    })
}

/// The events of the pod `name` with `reason`.
async fn events(s: &TestServer, name: &str, reason: &str) -> Vec<Value> {
    let (_, list) = s
        .get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name},reason%3D{reason}"
        ))
        .await;
    list["items"].as_array().cloned().unwrap_or_default()
}

/// A pod's cgroup in `h`, under the parent of the server's node (`berth/<id>`).
fn pod_dir(h: &berth::runtime::cgroup::Hierarchy, s: &TestServer, uid: &str) -> PathBuf {
    let id = berth::runtime::reset::read_id(&s.dir.path().join("pods")).unwrap();
    h.mount.join(PARENT).join(id).join(format!("pod{uid}"))
}

#[tokio::test]
async fn a_container_past_its_memory_limit_is_oom_killed() {
    let Some(memory) = hierarchy("memory") else {
        return;
    };
    let s = server(|_| {}).await;
    // `tail` keeps the last "line" of a stream without newlines: all of it.
    let (code, created) = s
        .post(
            PODS,
            pod(
                "hog",
                "Never",
                "head -c 200m /dev/zero | tail",
                json!({"limits": {"memory": "32Mi"}}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let p = pod_until(&s, "hog", "the pod fails", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled", "{p}");
    assert_eq!(t["exitCode"], 137, "{p}");
    let dir = pod_dir(&memory, &s, &uid);
    assert!(
        dir.exists(),
        "the pod's cgroup stays while the pod is there"
    );
    assert!(
        !dir.join("main-0").exists(),
        "an ended instance's cgroup goes"
    );
    crate::node::delete_pod(&s, "hog").await;
    eventually(10, "the pod's cgroup is removed", || async {
        if dir.exists() {
            Err(dir.display().to_string())
        } else {
            Ok(())
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn cpu_and_memory_limits_are_written_to_the_containers_cgroups() {
    let (Some(cpu), Some(memory)) = (hierarchy("cpu"), hierarchy("memory")) else {
        return;
    };
    let s = server(|_| {}).await;
    let resources =
        json!({"limits": {"cpu": "250m", "memory": "64Mi"}, "requests": {"cpu": "100m"}});
    let (code, created) = s
        .post(PODS, pod("capped", "Always", "exec sleep 7401", resources))
        .await;
    assert_eq!(code, 201, "{created}");
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    pod_until(&s, "capped", "the pod runs", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let read = |h: &berth::runtime::cgroup::Hierarchy, file: &str| {
        std::fs::read_to_string(pod_dir(h, &s, &uid).join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .trim()
            .to_string()
    };
    let procs = |h: &berth::runtime::cgroup::Hierarchy| -> Vec<String> {
        read(h, "main-0/cgroup.procs")
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    };
    // The container's limits on its cgroup, and the same on the pod's (its only container).
    for at in ["main-0/", ""] {
        let file = |name: &str| format!("{at}{name}");
        match cpu.version {
            berth::runtime::cgroup::Version::V1 => {
                assert_eq!(read(&cpu, &file("cpu.cfs_quota_us")), "25000");
                assert_eq!(read(&cpu, &file("cpu.cfs_period_us")), "100000");
                assert_eq!(read(&cpu, &file("cpu.shares")), "102");
                assert_eq!(
                    read(&memory, &file("memory.limit_in_bytes")),
                    (64u64 << 20).to_string()
                );
            }
            berth::runtime::cgroup::Version::V2 => {
                assert_eq!(read(&cpu, &file("cpu.max")), "25000 100000");
                assert_eq!(
                    read(&memory, &file("memory.max")),
                    (64u64 << 20).to_string()
                );
            }
        }
    }
    // The container is in its cgroups, and only the container: its shim left them.
    for h in [&cpu, &memory] {
        let pids = procs(h);
        assert_eq!(pids.len(), 1, "{pids:?}");
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pids[0])).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert_eq!(cmdline.trim(), "sleep 7401");
    }
    crate::node::delete_pod(&s, "capped").await;
    for h in [&cpu, &memory] {
        let dir = pod_dir(h, &s, &uid);
        assert!(!dir.exists(), "{} is removed with the pod", dir.display());
    }
    s.stop().await;
}

#[tokio::test]
async fn limits_without_cgroups_are_reported_once_as_not_enforced() {
    let s = server(|n| n.cgroups = false).await;
    let limited = |name: &str| {
        json!({"name": name, "image": "busybox", "command": ["sh", "-c", "exec sleep 7402"],
               "resources": {"limits": {"memory": "64Mi"}}})
    };
    let body = json!({
        "metadata": {"name": "unlimited"},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [limited("a"), limited("b")]},
    });
    let (code, created) = s.post(PODS, body).await;
    assert_eq!(code, 201, "{created}");
    pod_until(&s, "unlimited", "both containers run", |p| {
        p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| {
                cs.len() == 2 && cs.iter().all(|c| c["state"].get("running").is_some())
            })
    })
    .await;
    let warned = eventually(20, "a warning event", || async {
        let e = events(&s, "unlimited", "LimitsNotEnforced").await;
        if e.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(e)
        }
    })
    .await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0]["type"], "Warning");
    assert_eq!(
        warned[0]["count"].as_i64().unwrap_or(1),
        1,
        "told once, not per container"
    );
    let message = warned[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Resource limits are not enforced on this node: "),
        "{message}"
    );
    crate::node::delete_pod(&s, "unlimited").await;
    s.stop().await;
}

fn bound(name: &str, script: &str, requests: Value) -> Value {
    let mut p = pod(name, "Never", script, json!({"requests": requests}));
    p["spec"]["nodeName"] = json!(NODE);
    p
}

#[tokio::test]
async fn a_pod_asking_more_memory_than_the_node_has_is_rejected() {
    let s = server(|_| {}).await;
    let (code, created) = s
        .post(
            PODS,
            bound("greedy", "echo never", json!({"memory": "64Pi"})),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    let p = pod_until(&s, "greedy", "the pod is rejected", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(p["status"]["reason"], "OutOfmemory", "{p}");
    let message = p["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Pod was rejected: Node didn't have enough resource: memory, requested: 72057594037927936, used: 0, capacity: "),
        "{message}"
    );
    assert!(
        p["status"].get("containerStatuses").is_none(),
        "never started: {p}"
    );
    let warned = eventually(20, "a warning event", || async {
        let e = events(&s, "greedy", "OutOfmemory").await;
        if e.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(e)
        }
    })
    .await;
    assert_eq!(warned[0]["type"], "Warning");
    assert!(
        warned[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Node didn't have enough resource: memory")
    );
    // A rejected pod still goes when deleted.
    crate::node::delete_pod(&s, "greedy").await;
    s.stop().await;
}

#[tokio::test]
async fn a_node_takes_no_more_pods_than_it_has_room_for() {
    let s = server(|n| n.agent.max_pods = 2).await;
    for name in ["first", "second"] {
        let (code, created) = s
            .post(PODS, bound(name, "exec sleep 7404", json!({})))
            .await;
        assert_eq!(code, 201, "{created}");
    }
    for name in ["first", "second"] {
        pod_until(&s, name, "the pod runs", |p| {
            p["status"]["phase"] == "Running"
        })
        .await;
    }
    let (code, created) = s
        .post(PODS, bound("third", "exec sleep 7404", json!({})))
        .await;
    assert_eq!(code, 201, "{created}");
    let p = pod_until(&s, "third", "the pod is rejected", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(p["status"]["reason"], "OutOfpods", "{p}");
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );
    // Room again once a pod is gone.
    crate::node::delete_pod(&s, "first").await;
    let (code, _) = s
        .post(PODS, bound("fourth", "exec sleep 7404", json!({})))
        .await;
    assert_eq!(code, 201);
    pod_until(&s, "fourth", "the pod runs", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    for name in ["second", "third", "fourth"] {
        crate::node::delete_pod(&s, name).await;
    }
    s.stop().await;
}

#[tokio::test]
async fn pods_running_when_the_agent_restarts_are_not_admitted_again() {
    let s = server(|n| n.agent.max_pods = 2).await;
    for name in ["kept-a", "kept-b"] {
        let (code, created) = s
            .post(PODS, bound(name, "exec sleep 7405", json!({})))
            .await;
        assert_eq!(code, 201, "{created}");
    }
    for name in ["kept-a", "kept-b"] {
        pod_until(&s, name, "the pod runs", |p| {
            p["status"]["phase"] == "Running"
        })
        .await;
    }
    let dir = s.stop().await;
    // The node shrinks while berth is down: what runs stays, nothing new fits.
    let s = TestServer::start_in(dir, |c| {
        c.node = Some(crate::node::node_settings(NODE, |n| n.agent.max_pods = 1))
    })
    .await;
    let (code, _) = s
        .post(PODS, bound("late", "exec sleep 7405", json!({})))
        .await;
    assert_eq!(code, 201);
    let p = pod_until(&s, "late", "the pod is rejected", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 1"
    );
    for name in ["kept-a", "kept-b"] {
        let (_, p) = s.get(&format!("{PODS}/{name}")).await;
        assert_eq!(p["status"]["phase"], "Running", "{p}");
        assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    }
    for name in ["kept-a", "kept-b", "late"] {
        crate::node::delete_pod(&s, name).await;
    }
    s.stop().await;
}
