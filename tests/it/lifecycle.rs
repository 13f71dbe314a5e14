//! Container lifecycle hooks and termination (§5.4, §14): postStart runs after the start
//! and a failing one kills the container; preStop runs before SIGTERM within the grace
//! period; a grace period of 0 still gives the process SIGTERM and 2 s.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::node::{PODS, container, pod, pod_until, server};
use crate::support::{TestServer, eventually};

/// The events of a pod with this reason, once there is one (events are recorded in the
/// background).
pub(crate) async fn events(s: &TestServer, pod: &str, reason: &str) -> Vec<Value> {
    eventually(30, &format!("a {reason} event"), || async {
        let (_, list) = s
            .get(&format!(
                "/api/v1/namespaces/default/events?fieldSelector=reason%3D{reason}"
            ))
            .await;
        let found: Vec<Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == pod)
            .cloned()
            .collect();
        if found.is_empty() {
            Err(list.to_string())
        } else {
            Ok(found)
        }
    })
    .await
}

#[tokio::test]
async fn pre_stop_runs_before_sigterm_and_post_start_after_the_start() {
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // On SIGTERM the container copies what preStop wrote: it exists only if preStop ran
    // first.
    let mut p = pod(
        "hooked",
        "Always",
        &format!("trap 'cp {d}/pre {d}/seen-at-term; exit 0' TERM; while :; do sleep 0.1; done"),
    );
    p["spec"]["containers"][0]["lifecycle"] = json!({
        "postStart": {"exec": {"command": ["sh", "-c", format!("echo $HOSTNAME > {d}/post")]}},
        "preStop": {"exec": {"command": ["sh", "-c", format!("echo pre > {d}/pre")]}},
    });
    let (code, out) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{out}");
    pod_until(&s, "hooked", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    // postStart ran in the container's environment.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("post")).unwrap(),
        "hooked\n"
    );
    crate::node::delete_pod(&s, "hooked").await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("seen-at-term")).unwrap(),
        "pre\n"
    );
    let killing = events(&s, "hooked", "Killing").await;
    assert!(
        killing
            .iter()
            .any(|e| e["message"] == "Stopping container main"),
        "{killing:?}"
    );
}

#[tokio::test]
async fn a_failing_post_start_hook_kills_the_container_and_policy_restarts_it() {
    let s = server().await;
    let mut p = pod("badstart", "Always", "exec sleep 7901");
    p["spec"]["containers"][0]["lifecycle"] =
        json!({"postStart": {"exec": {"command": ["sh", "-c", "echo no way; exit 2"]}}});
    s.post(PODS, p).await;
    let p = pod_until(&s, "badstart", "restarted after the hook failed", |p| {
        container(p)["restartCount"].as_u64() >= Some(1)
    })
    .await;
    // Killed by SIGTERM (the sleep does not trap it): 143.
    assert_eq!(
        container(&p)["lastState"]["terminated"]["exitCode"],
        143,
        "{p}"
    );
    let failed = events(&s, "badstart", "FailedPostStartHook").await;
    let message = failed[0]["message"].as_str().unwrap();
    assert!(message.starts_with("PostStartHook failed"), "{message}");
    assert!(message.contains("no way"), "{message}");
    assert_eq!(failed[0]["type"], "Warning");
    crate::node::delete_pod(&s, "badstart").await;
}

#[tokio::test]
async fn a_failing_pre_stop_hook_is_reported_and_termination_goes_on() {
    let s = server().await;
    let mut p = pod("badstop", "Always", "exec sleep 7902");
    p["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["/nonexistent/hook"]}}});
    s.post(PODS, p).await;
    pod_until(&s, "badstop", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    crate::node::delete_pod(&s, "badstop").await;
    let failed = events(&s, "badstop", "FailedPreStopHook").await;
    let message = failed[0]["message"].as_str().unwrap();
    assert!(message.starts_with("PreStopHook failed"), "{message}");
    assert!(message.contains("/nonexistent/hook"), "{message}");
}

#[tokio::test]
async fn a_container_ignoring_sigterm_is_killed_when_the_grace_period_ends() {
    let s = server().await;
    let mut p = pod(
        "stubborn",
        "Always",
        "trap '' TERM; sleep 7903 & wait; sleep 7903",
    );
    p["spec"]["terminationGracePeriodSeconds"] = json!(3);
    s.post(PODS, p).await;
    pod_until(&s, "stubborn", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let rv = s.get(&format!("{PODS}/stubborn")).await.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = s
        .watch(&format!(
            "{PODS}?watch=true&fieldSelector=metadata.name%3Dstubborn&resourceVersion={rv}"
        ))
        .await;
    let began = Instant::now();
    s.delete(&format!("{PODS}/stubborn")).await;
    let mut last = Value::Null;
    loop {
        let ev = w.next_change().await;
        if ev["type"] == "DELETED" {
            break;
        }
        last = ev["object"].clone();
    }
    // SIGKILL only once the 3 s have passed.
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(
        container(&last)["state"]["terminated"]["exitCode"],
        137,
        "{last}"
    );
    assert_eq!(last["status"]["phase"], "Failed", "{last}");
}

#[tokio::test]
async fn a_grace_period_of_zero_still_gives_sigterm_and_two_seconds() {
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let mut p = pod(
        "hasty",
        "Always",
        &format!(
            "trap 'echo term > {d}/term; sleep 1; echo done > {d}/done; exit 0' TERM; \
             while :; do sleep 0.1; done"
        ),
    );
    p["spec"]["terminationGracePeriodSeconds"] = json!(0);
    s.post(PODS, p).await;
    pod_until(&s, "hasty", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    s.delete(&format!("{PODS}/hasty")).await;
    // Grace 0 removes the object at once; the node still stops the process gently.
    eventually(30, "the handler finished", || async {
        std::fs::read_to_string(dir.path().join("done")).map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("term")).unwrap(),
        "term\n"
    );
}
