//! Probes end to end (acceptance scenarios 7, 8, 10, 11 and 12 of the node-agent spec):
//! real containers, real probe targets, the conditions and events a user sees.

use std::time::Duration;

use serde_json::{Value, json};

use crate::lifecycle::events;
use crate::node::{PODS, container, pod, pod_until, server};
use crate::support::TestServer;

fn ready(p: &Value) -> Option<&Value> {
    berth::types::condition(p, "Ready")
}

fn time(v: &Value) -> jiff::Timestamp {
    v.as_str().unwrap().parse().unwrap()
}

async fn delete_all(s: &TestServer, names: &[&str]) {
    for name in names {
        crate::node::delete_pod(s, name).await;
    }
}

#[tokio::test]
async fn readiness_waits_for_its_initial_delay() {
    let s = server().await;
    let mut p = pod("delayed", "Always", "exec sleep 7601");
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["true"]}, "initialDelaySeconds": 3, "periodSeconds": 1,
    });
    s.post(PODS, p).await;
    let before = pod_until(&s, "delayed", "running, not ready", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let r = ready(&before).unwrap();
    assert_eq!(
        (&r["status"], &r["reason"], &r["message"]),
        (
            &json!("False"),
            &json!("ContainersNotReady"),
            &json!("containers with unready status: [main]")
        ),
        "{before}"
    );
    let after = pod_until(&s, "delayed", "ready", |p| {
        ready(p).is_some_and(|c| c["status"] == "True")
    })
    .await;
    let started = time(&container(&after)["state"]["running"]["startedAt"]);
    let became = time(&ready(&after).unwrap()["lastTransitionTime"]);
    assert!(
        became >= started + jiff::SignedDuration::from_secs(3),
        "ready at {became}, started at {started}"
    );
    let cr = berth::types::condition(&after, "ContainersReady").unwrap();
    assert_eq!(cr["status"], "True");
    assert_eq!(container(&after)["restartCount"], 0);
    delete_all(&s, &["delayed"]).await;
}

#[tokio::test]
async fn http_probes_follow_the_status_code() {
    let s = server().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("ok"), "fine").unwrap();
    // One container serves files; one pod probes a file that is there, one a missing one.
    let script = format!(
        "cd {} && exec python3 -m http.server {port} --bind 127.0.0.1",
        root.path().display()
    );
    let mut server_pod = pod("web", "Always", &script);
    server_pod["spec"]["containers"][0]["readinessProbe"] = json!({
        "httpGet": {"path": "/ok", "port": "http"}, "periodSeconds": 1,
    });
    server_pod["spec"]["containers"][0]["ports"] = json!([{"name": "http", "containerPort": port}]);
    s.post(PODS, server_pod).await;
    pod_until(&s, "web", "ready through /ok", |p| {
        ready(p).is_some_and(|c| c["status"] == "True")
    })
    .await;
    let mut missing = pod("web-missing", "Always", "exec sleep 7602");
    missing["spec"]["containers"][0]["readinessProbe"] = json!({
        "httpGet": {"path": "/missing", "port": port}, "periodSeconds": 1,
    });
    s.post(PODS, missing).await;
    let failed = events(&s, "web-missing", "Unhealthy").await;
    assert_eq!(
        failed[0]["message"],
        "Readiness probe failed: HTTP probe failed with statuscode: 404"
    );
    let (_, p) = s.get(&format!("{PODS}/web-missing")).await;
    assert_eq!(container(&p)["ready"], false, "{p}");
    delete_all(&s, &["web", "web-missing"]).await;
}

#[tokio::test]
async fn a_startup_probe_holds_liveness_back_until_it_passes() {
    let s = server().await;
    let flag = s.dir.path().join("started");
    let mut p = pod("slow", "Always", "exec sleep 7603");
    p["spec"]["containers"][0]["startupProbe"] = json!({
        "exec": {"command": ["cat", flag.to_str().unwrap()]},
        "periodSeconds": 1, "failureThreshold": 30,
    });
    p["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["/bin/false"]}, "periodSeconds": 1, "failureThreshold": 1,
    });
    s.post(PODS, p).await;
    pod_until(&s, "slow", "running", |p| p["status"]["phase"] == "Running").await;
    // Several startup periods pass: not started, not ready, and liveness does not act.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, p) = s.get(&format!("{PODS}/slow")).await;
    let c = container(&p);
    assert_eq!(
        (&c["started"], &c["ready"], &c["restartCount"]),
        (&json!(false), &json!(false), &json!(0)),
        "{p}"
    );
    std::fs::write(&flag, "yes").unwrap();
    // Started, then the failing liveness probe restarts it.
    pod_until(&s, "slow", "restarted by liveness once started", |p| {
        container(p)["restartCount"].as_u64() >= Some(1)
    })
    .await;

    let mut never = pod("never", "Always", "exec sleep 7604");
    never["spec"]["containers"][0]["startupProbe"] = json!({
        "exec": {"command": ["/bin/false"]}, "periodSeconds": 1, "failureThreshold": 3,
    });
    s.post(PODS, never).await;
    pod_until(&s, "never", "restarted by the startup probe", |p| {
        container(p)["restartCount"].as_u64() >= Some(1)
    })
    .await;
    let killing = events(&s, "never", "Killing").await;
    assert!(
        killing
            .iter()
            .any(|e| e["message"] == "Container main failed startup probe, will be restarted"),
        "{killing:?}"
    );
    delete_all(&s, &["slow", "never"]).await;
}

#[tokio::test]
async fn restarts_by_a_failing_liveness_probe_only_ever_increase() {
    let s = server().await;
    let mut p = pod("flapping", "Always", "exec sleep 7605");
    p["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["/bin/false"]}, "periodSeconds": 1, "failureThreshold": 1,
    });
    s.post(PODS, p).await;
    let mut last = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while last < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "restarts stuck at {last}"
        );
        let (_, p) = s.get(&format!("{PODS}/flapping")).await;
        let n = container(&p)["restartCount"].as_u64().unwrap_or(0);
        assert!(n >= last, "restartCount went from {last} to {n}");
        last = n;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    delete_all(&s, &["flapping"]).await;
}

#[tokio::test]
async fn the_ready_condition_names_the_containers_that_are_not_ready() {
    let s = server().await;
    let mut p = pod("pair", "Always", "exec sleep 7606");
    p["spec"]["containers"] = json!([
        {"name": "a", "image": "busybox", "command": ["sh", "-c", "exec sleep 7607"]},
        {"name": "b", "image": "busybox", "command": ["sh", "-c", "exec sleep 7608"],
         "readinessProbe": {"exec": {"command": ["/bin/false"]}, "periodSeconds": 1}},
    ]);
    s.post(PODS, p).await;
    let p = pod_until(&s, "pair", "a ready, b not", |p| {
        let cs = p["status"]["containerStatuses"].as_array();
        cs.is_some_and(|cs| cs.iter().any(|c| c["name"] == "a" && c["ready"] == true))
    })
    .await;
    let r = ready(&p).unwrap();
    assert_eq!(
        (&r["status"], &r["reason"], &r["message"]),
        (
            &json!("False"),
            &json!("ContainersNotReady"),
            &json!("containers with unready status: [b]")
        ),
        "{p}"
    );
    delete_all(&s, &["pair"]).await;
}
