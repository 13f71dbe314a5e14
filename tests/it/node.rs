//! The node agent with the process runtime against a real server: node registration and
//! lease, pods run as real processes, exit codes and phases, restarts with back-off,
//! environment, config errors, and deletion stopping the processes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

pub(crate) const PODS: &str = "/api/v1/namespaces/default/pods";
pub(crate) const NODE: &str = "test-node";

/// A node agent named `name` for this machine that runs containers through the test's
/// own berth binary, its lease renewed every 500 ms, then tuned by `tune`.
pub(crate) fn node_settings(
    name: &str,
    tune: impl FnOnce(&mut berth::app::NodeSettings),
) -> berth::app::NodeSettings {
    let mut agent = berth::node::Config::new(name, "127.0.0.1");
    agent.lease_every = Duration::from_millis(500);
    let mut node = berth::app::NodeSettings {
        agent,
        shim_program: env!("CARGO_BIN_EXE_berth").into(),
        cgroups: true,
        stop_pods_on_exit: false,
        runtime: berth::app::DefaultRuntime::Process,
        network: None,
    };
    tune(&mut node);
    node
}

/// A server with a node agent [`node_settings`] tuned by `tune`.
pub(crate) async fn server_tuned(tune: impl FnOnce(&mut berth::app::NodeSettings)) -> TestServer {
    TestServer::start_with(|c| c.node = Some(node_settings(NODE, tune))).await
}

pub(crate) async fn server() -> TestServer {
    server_tuned(|_| {}).await
}

pub(crate) fn pod(name: &str, policy: &str, script: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}],
        },
    })
}

/// Deletes a pod and waits until the agent has stopped it and removed it.
pub(crate) async fn delete_pod(s: &TestServer, name: &str) {
    s.delete(&format!("{PODS}/{name}")).await;
    eventually(30, &format!("pod {name} is gone"), || async {
        match s.get(&format!("{PODS}/{name}")).await {
            (404, _) => Ok(()),
            (_, p) => Err(p["status"].to_string()),
        }
    })
    .await;
}

/// Creates a pod and waits until it runs.
pub(crate) async fn run_pod(s: &TestServer, pod: Value) -> Value {
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let (code, out) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{out}");
    pod_until(s, &name, "running", |p| p["status"]["phase"] == "Running").await
}

/// Waits until `check` accepts the pod.
pub(crate) async fn pod_until(
    s: &TestServer,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(60, what, || async {
        let (code, p) = s.get(&format!("{PODS}/{name}")).await;
        if code == 200 && check(&p) {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
    .await
}

pub(crate) fn container(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]
}

/// Processes of this build's containers whose command line contains `marker`: shims run
/// by this test binary's `berth`, and their children. (Containers of other builds on the
/// same machine, with the same commands, do not count.)
pub(crate) fn processes_with(marker: &str) -> usize {
    let ours = std::fs::canonicalize(env!("CARGO_BIN_EXE_berth")).unwrap();
    let procs: Vec<(i32, i32, String)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((
                pid,
                ppid,
                String::from_utf8_lossy(&cmdline).replace('\0', " "),
            ))
        })
        .collect();
    let me = std::process::id() as i32;
    let ppid_of = |pid: i32| {
        procs
            .iter()
            .find(|(p, _, _)| *p == pid)
            .map(|(_, pp, _)| *pp)
    };
    let is_shim = |pid: i32| {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == ours)
            && procs
                .iter()
                .any(|(p, _, c)| *p == pid && c.contains(" shim "))
    };
    // Ours: a shim of this build, or started (exec) by this test process, or below one.
    let ours = |pid: i32| {
        let mut at = Some(pid);
        for _ in 0..8 {
            match at {
                Some(p) if p == me || is_shim(p) => return true,
                Some(p) if p > 1 => at = ppid_of(p),
                _ => return false,
            }
        }
        false
    };
    procs
        .iter()
        .filter(|(pid, _, cmd)| cmd.contains(marker) && ours(*pid))
        .count()
}

#[tokio::test]
async fn the_node_registers_ready_and_keeps_its_lease() {
    let s = server().await;
    let node = eventually(20, "the node is registered", || async {
        let (code, n) = s.get(&format!("/api/v1/nodes/{NODE}")).await;
        if code == 200 {
            Ok(n)
        } else {
            Err(n.to_string())
        }
    })
    .await;
    let ready = berth::types::condition(&node, "Ready").unwrap();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "KubeletReady");
    assert!(node["status"]["allocatable"]["cpu"].is_string());
    assert_eq!(node["status"]["allocatable"]["pods"], "110");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    // The node agent is the server's own: it reports the server's version.
    let (_, version) = s.get("/version").await;
    assert_eq!(
        node["status"]["nodeInfo"]["kubeletVersion"],
        version["gitVersion"]
    );
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}");
    let first = eventually(20, "a lease", || async {
        let (code, l) = s.get(&path).await;
        if code == 200 {
            Ok(l)
        } else {
            Err(l.to_string())
        }
    })
    .await;
    eventually(20, "the lease is renewed", || async {
        let (_, l) = s.get(&path).await;
        if l["spec"]["renewTime"] != first["spec"]["renewTime"] {
            Ok(())
        } else {
            Err(l.to_string())
        }
    })
    .await;
}

#[tokio::test]
async fn a_pod_runs_as_a_process_and_stops_when_deleted() {
    let s = server().await;
    let (code, made) = s.post(PODS, pod("web", "Always", "exec sleep 7301")).await;
    assert_eq!(code, 201, "{made}");
    let p = pod_until(&s, "web", "the pod runs and is ready", |p| {
        p["status"]["phase"] == "Running"
            && berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(p["spec"]["nodeName"], NODE);
    assert_eq!(p["status"]["podIP"], "127.0.0.1");
    assert!(p["status"]["startTime"].is_string());
    let c = container(&p);
    assert!(c["state"]["running"]["startedAt"].is_string(), "{c}");
    assert_eq!(c["restartCount"], 0);
    assert!(c["containerID"].as_str().unwrap().starts_with("process://"));
    // The container and the shim that watches it.
    assert_eq!(processes_with("sleep 7301"), 2);
    let (code, _) = s.delete(&format!("{PODS}/web")).await;
    assert_eq!(code, 200);
    eventually(30, "the process is stopped", || async {
        match processes_with("sleep 7301") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}

#[tokio::test]
async fn exit_codes_decide_the_phase() {
    let s = server().await;
    s.post(PODS, pod("ok", "Never", "exit 0")).await;
    s.post(PODS, pod("bad", "Never", "echo failing >&2; exit 3"))
        .await;
    let ok = pod_until(&s, "ok", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(container(&ok)["state"]["terminated"]["reason"], "Completed");
    let bad = pod_until(&s, "bad", "Failed", |p| p["status"]["phase"] == "Failed").await;
    let t = &container(&bad)["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(3), Some("Error"))
    );
    let ready = berth::types::condition(&bad, "Ready").unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PodFailed"))
    );
}

#[tokio::test]
async fn a_crashing_container_is_restarted_then_backs_off() {
    let s = server().await;
    s.post(PODS, pod("crash", "Always", "exit 1")).await;
    let p = pod_until(&s, "crash", "CrashLoopBackOff", |p| {
        container(p)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    let c = container(&p);
    assert!(c["restartCount"].as_i64().unwrap() >= 1, "{c}");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    let message = c["state"]["waiting"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("back-off 10s restarting failed container=main pod=crash_default("),
        "{message}"
    );
    assert_eq!(p["status"]["phase"], "Running");
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DBackOff")
        .await;
    assert_eq!(
        events["items"][0]["involvedObject"]["name"], "crash",
        "{events}"
    );
}

#[tokio::test]
async fn the_environment_is_resolved_and_missing_references_are_config_errors() {
    let s = server().await;
    s.post(
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "settings"}, "data": {"mode": "fast"}}),
    )
    .await;
    let mut p = pod("env", "Never", "echo \"$GREETING $POD $MODE $(echo ok)\"");
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "GREETING", "value": "hello"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
    ]);
    let (_, made) = s.post(PODS, p).await;
    pod_until(&s, "env", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    let uid = made["metadata"]["uid"].as_str().unwrap();
    let log = std::fs::read_to_string(s.dir.path().join(format!("pods/{uid}/main/0/log"))).unwrap();
    assert!(log.contains(" stdout F hello env fast ok\n"), "{log}");

    let mut missing = pod("missing", "Never", "true");
    missing["spec"]["containers"][0]["env"] = json!([
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nope"}}},
    ]);
    s.post(PODS, missing).await;
    let p = pod_until(&s, "missing", "a config error", |p| {
        container(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    })
    .await;
    assert_eq!(
        container(&p)["state"]["waiting"]["message"],
        "couldn't find key nope in configmap default/settings"
    );
    assert_eq!(p["status"]["phase"], "Pending");
    // The error is told in a Warning event too, as the kubelet does.
    let want = (
        "Failed".to_string(),
        "Error: couldn't find key nope in configmap default/settings".to_string(),
    );
    eventually(30, "the Failed event", || async {
        let events = s.events_of("missing").await;
        if events.contains(&want) {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;

    let mut no_command = pod("image-only", "Always", "");
    no_command["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("command");
    s.post(PODS, no_command).await;
    let p = pod_until(&s, "image-only", "a config error", |p| {
        container(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    })
    .await;
    let message = container(&p)["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("images are not pulled"), "{message}");
}

async fn log(s: &TestServer, name: &str, query: &str) -> (u16, String) {
    s.text(&format!("{PODS}/{name}/log{query}")).await
}

#[tokio::test]
async fn logs_are_served_with_tail_timestamps_previous_and_follow() {
    let s = server().await;
    s.post(
        PODS,
        pod(
            "talker",
            "Never",
            "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three",
        ),
    )
    .await;
    pod_until(&s, "talker", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    let (code, text) = log(&s, "talker", "").await;
    assert_eq!((code, text.as_str()), (200, "one\ntwo\nthree\n"));
    let (_, text) = log(&s, "talker", "?tailLines=1").await;
    assert_eq!(text, "three\n");
    let (_, text) = log(&s, "talker", "?timestamps=true&limitBytes=200").await;
    let first = text.lines().next().unwrap();
    let (ts, rest) = first.split_once(' ').unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{first}");
    assert_eq!(rest, "one");
    let (code, text) = log(&s, "talker", "?sinceSeconds=0").await;
    assert_eq!(code, 422, "{text}");
    let (code, st) = s
        .get(&format!("{PODS}/talker/exec?command=true&stdout=true"))
        .await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        "cannot exec into a container in a completed pod; current phase is Succeeded"
    );
    let (code, text) = log(&s, "talker", "?container=nope").await;
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("container nope is not valid for pod talker"),
        "{text}"
    );
    let (code, text) = log(&s, "talker", "?previous=true").await;
    assert_eq!(code, 400);
    assert!(
        text.contains("previous terminated container \\\"main\\\""),
        "{text}"
    );

    // A restarted container's previous instance.
    s.post(PODS, pod("again", "Always", "echo attempt; exit 1"))
        .await;
    pod_until(&s, "again", "a restart", |p| {
        container(p)["restartCount"].as_i64() >= Some(1)
    })
    .await;
    let (code, text) = log(&s, "again", "?previous=true").await;
    assert_eq!((code, text.as_str()), (200, "attempt\n"));

    // Follow: lines as they come, and the end with the container.
    s.post(PODS, pod("slow", "Never", "echo a; sleep 1; echo b"))
        .await;
    pod_until(&s, "slow", "running", |p| p["status"]["phase"] == "Running").await;
    let resp = s
        .req(
            reqwest::Method::GET,
            &format!("{PODS}/slow/log?follow=true"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = crate::support::within(20, resp.text()).await.unwrap();
    assert_eq!(body, "a\nb\n");
}

#[tokio::test]
async fn readiness_follows_its_probe_and_a_failing_liveness_probe_restarts() {
    let s = server().await;
    let flag = s.dir.path().join("ready-flag");
    let mut p = pod("gated", "Always", "exec sleep 7302");
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["test", "-f", flag.to_str().unwrap()]},
        "periodSeconds": 1,
    });
    s.post(PODS, p).await;
    let running = pod_until(&s, "gated", "running, not ready", |p| {
        p["status"]["phase"] == "Running"
            && berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assert_eq!(container(&running)["ready"], false);
    assert_eq!(container(&running)["started"], true);
    std::fs::write(&flag, b"").unwrap();
    pod_until(&s, "gated", "ready once the probe passes", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    std::fs::remove_file(&flag).unwrap();
    pod_until(&s, "gated", "not ready again", |p| {
        container(p)["ready"] == false
    })
    .await;

    let mut sick = pod("sick", "Always", "exec sleep 7303");
    sick["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["sh", "-c", "echo broken; exit 1"]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    });
    s.post(PODS, sick).await;
    pod_until(&s, "sick", "restarted by the liveness probe", |p| {
        container(p)["restartCount"].as_i64() >= Some(1)
    })
    .await;
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dsick")
        .await;
    let messages: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        messages.contains(&"Liveness probe failed: broken"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"Container main failed liveness probe, will be restarted"),
        "{messages:?}"
    );
    for name in ["gated", "sick"] {
        s.delete(&format!("{PODS}/{name}")).await;
    }
    eventually(30, "the processes are stopped", || async {
        match processes_with("sleep 7302") + processes_with("sleep 7303") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_deleted_pod_stops_gracefully_and_ends_in_a_terminal_phase() {
    let s = server().await;
    let script = "trap 'echo bye; exit 0' TERM; while :; do sleep 0.1; done";
    let (_, made) = s.post(PODS, pod("polite", "Always", script)).await;
    pod_until(&s, "polite", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let rv = made["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = s
        .watch(&format!(
            "{PODS}?watch=true&fieldSelector=metadata.name%3Dpolite&resourceVersion={rv}"
        ))
        .await;
    let (code, marked) = s.delete(&format!("{PODS}/polite")).await;
    assert_eq!(code, 200, "{marked}");
    // Bound to a node: marked, not gone; the node finishes the deletion.
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 2);
    let mut phases = Vec::new();
    loop {
        let ev = w.next_change().await;
        if ev["type"] == "DELETED" {
            break;
        }
        phases.push(
            ev["object"]["status"]["phase"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    // The container ended on SIGTERM with exit 0: Succeeded, written before the delete.
    assert_eq!(
        phases.last().map(String::as_str),
        Some("Succeeded"),
        "{phases:?}"
    );
    let (code, _) = s.get(&format!("{PODS}/polite")).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn graceful_deletion_can_be_shortened_and_forced() {
    // No agent: the test plays the node, so the marks stay until forced.
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    for name in ["bound", "loose"] {
        let (code, _) = s.post(PODS, pod(name, "Always", "true")).await;
        assert_eq!(code, 201);
    }
    let (code, out) = s
        .post(
            &format!("{PODS}/bound/binding"),
            json!({"target": {"kind": "Node", "name": "elsewhere"}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let (_, marked) = s.delete(&format!("{PODS}/bound")).await;
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 2);
    let shorter = s
        .req(reqwest::Method::DELETE, &format!("{PODS}/bound"))
        .json(&json!({"gracePeriodSeconds": 1}))
        .send()
        .await
        .unwrap();
    let shorter: Value = shorter.json().await.unwrap();
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 1);
    let (code, _) = s.get(&format!("{PODS}/bound")).await;
    assert_eq!(code, 200, "still there until the node is done");
    let forced = s
        .req(reqwest::Method::DELETE, &format!("{PODS}/bound"))
        .json(&json!({"gracePeriodSeconds": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(forced.status().as_u16(), 200);
    let (code, _) = s.get(&format!("{PODS}/bound")).await;
    assert_eq!(code, 404);
    // A pod no node runs goes at once.
    s.delete(&format!("{PODS}/loose")).await;
    let (code, _) = s.get(&format!("{PODS}/loose")).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn exec_refuses_what_it_cannot_do_with_kubernetes_messages() {
    let s = server().await;
    s.post(PODS, pod("box", "Always", "exec sleep 7304")).await;
    pod_until(&s, "box", "running", |p| p["status"]["phase"] == "Running").await;
    // Without a WebSocket upgrade.
    let (code, st) = s
        .get(&format!("{PODS}/box/exec?command=true&stdout=true"))
        .await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("v5.channel.k8s.io"),
        "{st}"
    );
    let (code, st) = s.get(&format!("{PODS}/box/exec?command=true")).await;
    assert_eq!(code, 400, "{st}");
    assert_eq!(
        st["message"],
        "you must specify at least 1 of stdin, stdout, stderr"
    );
    let (code, st) = s.get(&format!("{PODS}/box/exec")).await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        "you must specify at least one command for the container"
    );
    let (code, st) = s
        .get(&format!(
            "{PODS}/box/exec?command=true&stdout=true&container=other"
        ))
        .await;
    assert_eq!(code, 400);
    assert_eq!(st["message"], "container other is not valid for pod box");
    let (code, _) = s
        .get(&format!("{PODS}/nobody/exec?command=true&stdout=true"))
        .await;
    assert_eq!(code, 404);
    s.delete(&format!("{PODS}/box")).await;
    eventually(30, "the process is stopped", || async {
        match processes_with("sleep 7304") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_restarted_berth_adopts_running_containers_and_starts_none_twice() {
    let s = server().await;
    let before = crate::node::run_pod(&s, pod("steady", "Always", "exec sleep 7305")).await;
    let id = container(&before)["containerID"].clone();
    let started = container(&before)["state"]["running"]["startedAt"].clone();
    let start_time = before["status"]["startTime"].clone();
    assert_eq!(processes_with("sleep 7305"), 2);
    let dir = s.stop().await;
    // berth is down; the container is not.
    assert_eq!(processes_with("sleep 7305"), 2);
    let s = TestServer::start_in(dir, |c| c.node = Some(node_settings(NODE, |_| {}))).await;
    // A change to the pod makes the new agent sync it; the status must say the same.
    s.patch(
        &format!("{PODS}/steady"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"after": "restart"}}}),
    )
    .await;
    let after = pod_until(&s, "steady", "the same container, adopted", |p| {
        p["metadata"]["labels"]["after"] == "restart" && container(p)["containerID"] == id
    })
    .await;
    assert_eq!(container(&after)["restartCount"], 0);
    assert_eq!(container(&after)["state"]["running"]["startedAt"], started);
    assert_eq!(after["status"]["startTime"], start_time);
    assert_eq!(processes_with("sleep 7305"), 2, "nothing runs twice");
    s.delete(&format!("{PODS}/steady")).await;
    eventually(30, "the adopted container is stopped on delete", || async {
        match processes_with("sleep 7305") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_pod_past_its_active_deadline_is_stopped_and_failed() {
    let s = server().await;
    let mut p = pod("limited", "Always", "exec sleep 7306");
    p["spec"]["activeDeadlineSeconds"] = json!(2);
    s.post(PODS, p).await;
    let failed = pod_until(&s, "limited", "Failed past the deadline", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded");
    assert_eq!(
        failed["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    assert!(
        container(&failed)["state"]["terminated"].is_object(),
        "{failed}"
    );
    eventually(30, "the process is stopped", || async {
        match processes_with("sleep 7306") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DDeadlineExceeded")
        .await;
    assert_eq!(
        events["items"][0]["involvedObject"]["name"], "limited",
        "{events}"
    );
}

#[tokio::test]
async fn a_steady_pod_is_not_rewritten_and_a_foreign_status_is_corrected() {
    let s = server().await;
    s.post(PODS, pod("calm", "Always", "exec sleep 7307")).await;
    let settled = pod_until(&s, "calm", "running and ready", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(settled["status"]["phase"], "Running");
    // A label change makes the agent sync the pod; its status is what the API shows, so
    // nothing more is written: the label change stays the last write.
    let (_, relabelled) = s
        .patch(
            &format!("{PODS}/calm"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, later) = s.get(&format!("{PODS}/calm")).await;
    assert_eq!(
        later["metadata"]["resourceVersion"], relabelled["metadata"]["resourceVersion"],
        "the agent wrote a status nobody changed"
    );
    // Someone else writes a wrong status: the agent writes its own back.
    let (code, _) = s
        .patch(
            &format!("{PODS}/calm/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Pending"}}),
        )
        .await;
    assert_eq!(code, 200);
    pod_until(&s, "calm", "Running again", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    s.delete(&format!("{PODS}/calm")).await;
    eventually(30, "the process is stopped", || async {
        match processes_with("sleep 7307") {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
}
