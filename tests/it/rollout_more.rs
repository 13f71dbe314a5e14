//! More DeploymentConfig acceptance scenarios end to end (`deploymentconfigs.md` §22):
//! generation bookkeeping, retried hook logs, rollback, minReadySeconds, cancellation by
//! the controller and after success, adoption after an orphaning delete, unresolved
//! images, a deployer pod that goes missing, a DC deleted mid-rollout and berth restarted
//! mid-rollout. The API is driven with the subresources and patches the `oc` verbs use.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::node::{node_settings, processes_with, server};
use crate::rollout::{
    DCS, PODS, RCS, check_invariants, condition, dc, delete_dc, deployer_log, deployment_ends,
    phase, progressing, rc, simple,
};
use crate::support::{TestServer, eventually};

const EVENTS: &str = "/api/v1/namespaces/default/events";
const MERGE: &str = "application/merge-patch+json";

/// The events about object `name` as (reason, type, message, source component).
async fn events_about(s: &TestServer, name: &str) -> Vec<(String, String, String, String)> {
    let (_, events) = s.get(EVENTS).await;
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&e["reason"]),
                s(&e["type"]),
                s(&e["message"]),
                s(&e["source"]["component"]),
            )
        })
        .collect()
}

/// Waits for an event about `name` with exactly this reason, type, message and source.
async fn expect_event(
    s: &TestServer,
    name: &str,
    reason: &str,
    kind: &str,
    message: &str,
    source: &str,
) {
    let want = (
        reason.to_string(),
        kind.to_string(),
        message.to_string(),
        source.to_string(),
    );
    eventually(30, &format!("event {reason} about {name}"), || async {
        let seen = events_about(s, name).await;
        if seen.contains(&want) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
}

/// Waits until deployment `name` is in phase `want`.
async fn deployment_in(s: &TestServer, name: &str, want: &str) -> Value {
    eventually(90, &format!("{name} is {want}"), || async {
        let (code, rc) = rc(s, name).await;
        if code == 200 && phase(&rc) == want {
            Ok(rc)
        } else {
            Err(format!("{code} {}", phase(&rc)))
        }
    })
    .await
}

/// The deployments of DC `name` and the pods of the namespace.
async fn rcs_and_pods(s: &TestServer, name: &str) -> (Vec<Value>, Vec<Value>) {
    let (_, rcs) = s
        .get(&format!(
            "{RCS}?labelSelector=openshift.io%2Fdeployment-config.name%3D{name}"
        ))
        .await;
    let (_, pods) = s.get(PODS).await;
    (
        rcs["items"].as_array().cloned().unwrap_or_default(),
        pods["items"].as_array().cloned().unwrap_or_default(),
    )
}

/// Running `berth deploy` processes of this build carrying out deployment `rc`.
fn deployer_processes(rc: &str) -> usize {
    let ours = std::fs::canonicalize(env!("CARGO_BIN_EXE_berth")).unwrap();
    let want = format!("OPENSHIFT_DEPLOYMENT_NAME={rc}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            exe.is_ok_and(|e| e == ours)
                && args.get(1) == Some(&&b"deploy"[..])
                && environ.split(|b| *b == 0).any(|v| v == want.as_bytes())
        })
        .count()
}

/// Waits until no container process with `marker` and no deployer of `rcs` runs.
async fn nothing_runs(marker: &str, rcs: &[&str]) {
    eventually(30, "no process is left", || async {
        let app = processes_with(marker);
        let deployers: usize = rcs.iter().map(|r| deployer_processes(r)).sum();
        if app == 0 && deployers == 0 {
            Ok(())
        } else {
            Err(format!("{app} app processes, {deployers} deployers"))
        }
    })
    .await;
}

fn template_env(marker: &str, env: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{
        "name": "myapp", "image": "busybox",
        "command": ["sh", "-c", format!("exec sleep {marker}")],
        "env": env,
        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
    }]}}}})
}

/// The DeploymentRequest `oc rollout latest` sends.
fn rollout_latest(name: &str) -> Value {
    json!({"kind": "DeploymentRequest", "apiVersion": "apps.openshift.io/v1",
           "name": name, "latest": true, "force": true})
}

// Scenario 10.
#[tokio::test]
async fn generation_follows_scale_and_rollout_latest() {
    let s = server().await;
    let mut d = simple("generation-test", "8101");
    d["spec"]["strategy"]["rollingParams"] = json!({"pre": {"failurePolicy": "Abort",
        "execNewPod": {"containerName": "myapp", "command": ["/bin/echo", "test pre hook executed"]}}});
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    eventually(10, "generation 1, version 1", || async {
        let d = dc(&s, "generation-test").await;
        if d["metadata"]["generation"] == 1 && d["status"]["latestVersion"] == 1 {
            Ok(())
        } else {
            Err(format!("{} {}", d["metadata"], d["status"]))
        }
    })
    .await;
    deployment_ends(&s, "generation-test-1", "Complete").await;

    let (code, scale) = s
        .patch(
            &format!("{DCS}/generation-test/scale"),
            MERGE,
            json!({"spec": {"replicas": 2}}),
        )
        .await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(dc(&s, "generation-test").await["metadata"]["generation"], 2);

    let (code, out) = s
        .post(
            &format!("{DCS}/generation-test/instantiate"),
            rollout_latest("generation-test"),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["metadata"]["generation"], 3);
    assert_eq!(out["status"]["latestVersion"], 2);
    assert_eq!(out["status"]["details"]["message"], "manual change");
    eventually(30, "generation 3 observed", || async {
        let d = dc(&s, "generation-test").await;
        if d["status"]["observedGeneration"].as_i64() >= Some(3) {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    let second = deployment_ends(&s, "generation-test-2", "Complete").await;
    assert_eq!(
        second["metadata"]["annotations"]["openshift.io/deployment.status-reason"],
        "manual change"
    );
    assert_eq!(second["spec"]["replicas"], 2);
    let log = deployer_log(&s, "generation-test-2").await;
    assert!(log.contains("test pre hook executed"), "{log}");
    // The hook's events (§15.1), from the deployer, about the DC.
    expect_event(
        &s,
        "generation-test",
        "Started",
        "Normal",
        "Running pre-hook (\"/bin/echo test pre hook executed\") for rc default/generation-test-2",
        "generation-test-2-deploy",
    )
    .await;
    expect_event(
        &s,
        "generation-test",
        "Completed",
        "Normal",
        "The pre-hook for rc default/generation-test-2 completed successfully",
        "generation-test-2-deploy",
    )
    .await;
    delete_dc(&s, "generation-test").await;
    nothing_runs("sleep 8101", &["generation-test-1", "generation-test-2"]).await;
    s.stop().await;
}

// Scenario 12.
#[tokio::test]
async fn a_retried_hook_shows_its_retries_in_the_dc_log() {
    let s = server().await;
    let mut d = simple("hook", "8102");
    d["spec"]["strategy"]["rollingParams"] = json!({"pre": {"failurePolicy": "Retry",
        "execNewPod": {"containerName": "myapp",
                       "command": ["/bin/sh", "-c", "echo pre hook logs; exit 1"]}}});
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    eventually(60, "the hook pod restarted", || async {
        let (_, p) = s.get(&format!("{PODS}/hook-1-hook-pre")).await;
        if p["status"]["containerStatuses"][0]["restartCount"].as_i64() > Some(0) {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let log = eventually(60, "the DC log shows the retry", || async {
        let (code, log) = s.text(&format!("{DCS}/hook/log")).await;
        if code == 200
            && [
                "--> pre: Running hook pod ...",
                "pre hook logs",
                "--> pre: Retrying hook pod (retry #1)",
            ]
            .iter()
            .all(|l| log.contains(l))
        {
            Ok(log)
        } else {
            Err(format!("{code} {log}"))
        }
    })
    .await;
    let first = log.find("pre hook logs").unwrap();
    let retry = log.find("--> pre: Retrying hook pod (retry #1)").unwrap();
    assert!(first < retry, "{log}");
    let (_, rc) = rc(&s, "hook-1").await;
    assert_eq!(phase(&rc), "Running", "the hook keeps retrying");
    expect_event(
        &s,
        "hook",
        "Started",
        "Normal",
        "Running pre-hook (\"/bin/sh -c echo pre hook logs; exit 1\") for rc default/hook-1",
        "hook-1-deploy",
    )
    .await;
    assert!(
        !events_about(&s, "hook")
            .await
            .iter()
            .any(|e| e.0 == "Failed"),
        "a retried hook does not fail"
    );
    delete_dc(&s, "hook").await;
    nothing_runs("sleep 8102", &["hook-1"]).await;
    s.stop().await;
}

/// `oc rollout undo [--to-revision=N]`: POST the rollback, PUT the DC it returns. The
/// PUT carries the resourceVersion the rollback was made from, so a status write of the
/// DC controller in between is a conflict: the verb then starts over, as a client of
/// optimistic concurrency does.
async fn undo(s: &TestServer, name: &str, revision: i64) -> Value {
    for _ in 0..5 {
        let (code, back) = s
            .post(
                &format!("{DCS}/{name}/rollback"),
                json!({"kind": "DeploymentConfigRollback", "apiVersion": "apps.openshift.io/v1",
                       "name": name, "spec": {"revision": revision, "includeTemplate": true}}),
            )
            .await;
        assert_eq!(code, 201, "{back}");
        let (code, saved) = s.put(&format!("{DCS}/{name}"), back).await;
        match code {
            200 => return saved,
            409 => continue,
            _ => panic!("{code} {saved}"),
        }
    }
    panic!("the rollback of {name} conflicted five times");
}

// Scenario 13.
#[tokio::test]
async fn rollout_undo_rolls_out_the_previous_template_again() {
    let s = server().await;
    let (code, out) = s.post(DCS, simple("undo", "8103")).await;
    assert_eq!(code, 201, "{out}");
    let first = deployment_ends(&s, "undo-1", "Complete").await;
    let (code, out) = s
        .patch(
            &format!("{DCS}/undo"),
            MERGE,
            template_env("8103", json!([{"name": "TRY", "value": "TWICE"}])),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    deployment_ends(&s, "undo-2", "Complete").await;
    let (code, out) = s
        .post(&format!("{DCS}/undo/instantiate"), rollout_latest("undo"))
        .await;
    assert_eq!(code, 201, "{out}");
    let third = deployment_ends(&s, "undo-3", "Complete").await;

    // `oc rollout undo`: the rollback of revision latest-1, then a PUT of the result.
    let saved = undo(&s, "undo", 0).await;
    assert_eq!(saved["status"]["latestVersion"], 4);
    let fourth = deployment_ends(&s, "undo-4", "Complete").await;
    let template = |rc: &Value| {
        berth::controller::deploymentconfig::decode_dc(rc).unwrap()["spec"]["template"].clone()
    };
    assert_eq!(template(&fourth), template(&third));

    // And once more back to the first template (revision 1 explicitly).
    let saved = undo(&s, "undo", 1).await;
    assert_eq!(saved["status"]["latestVersion"], 5);
    let fifth = deployment_ends(&s, "undo-5", "Complete").await;
    assert_eq!(template(&fifth), template(&first));
    assert_ne!(template(&fifth), template(&third));
    let (_, pods) = s
        .get(&format!("{PODS}?labelSelector=deployment%3Dundo-5"))
        .await;
    let env = &pods["items"][0]["spec"]["containers"][0]["env"];
    assert!(env.as_array().is_none_or(Vec::is_empty), "{env}");
    delete_dc(&s, "undo").await;
    nothing_runs(
        "sleep 8103",
        &["undo-1", "undo-2", "undo-3", "undo-4", "undo-5"],
    )
    .await;
    s.stop().await;
}

// Scenario 17.
#[tokio::test]
async fn min_ready_seconds_hold_back_availability_and_completion() {
    let s = server().await;
    let mut d = simple("minreadytest", "8104");
    d["spec"]["replicas"] = json!(2);
    d["spec"]["minReadySeconds"] = json!(60);
    d["spec"].as_object_mut().unwrap().remove("triggers");
    // Every write of the deployment, in order: its availability and its phase are
    // written apart, so the order in which they change shows.
    let mut watch = s
        .req(reqwest::Method::GET, &format!("{RCS}?watch=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status().as_u16(), 200);
    let t0 = Instant::now();
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    let mut ready_not_available = false;
    let mut available_at = None;
    let mut buf: Vec<u8> = Vec::new();
    'watch: loop {
        let chunk = tokio::time::timeout(Duration::from_secs(150), watch.chunk())
            .await
            .expect("the deployment changes")
            .unwrap()
            .expect("the watch stays open");
        buf.extend_from_slice(&chunk);
        while let Some(at) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            let rc = &event["object"];
            if rc["metadata"]["name"] != "minreadytest-1" {
                continue;
            }
            let ready = rc["status"]["readyReplicas"].as_i64().unwrap_or(0);
            let available = rc["status"]["availableReplicas"].as_i64().unwrap_or(0);
            let terminal = matches!(phase(rc), "Complete" | "Failed");
            assert_ne!(phase(rc), "Failed", "{rc}");
            if ready == 2 && available < ready && !terminal {
                ready_not_available = true;
            }
            if available == 2 && available_at.is_none() {
                assert!(!terminal, "available only once complete: {rc}");
                available_at = Some(t0.elapsed());
            }
            if phase(rc) == "Complete" {
                assert!(
                    available_at.is_some(),
                    "complete before available == 2: {rc}"
                );
                break 'watch;
            }
        }
    }
    drop(watch);
    assert!(ready_not_available, "ready pods were not yet available");
    let at = available_at.unwrap();
    // Conditions' times are whole seconds (as in Kubernetes), so a pod ready a fraction
    // into a second counts as ready since its start: up to a second early.
    assert!(at >= Duration::from_secs(59), "available after {at:?}");
    delete_dc(&s, "minreadytest").await;
    nothing_runs("sleep 8104", &["minreadytest-1"]).await;
    s.stop().await;
}

/// Creates *simple* with minReadySeconds `min_ready` and waits until version 1 runs.
async fn running_first_version(s: &TestServer, name: &str, marker: &str, min_ready: i64) {
    let mut d = simple(name, marker);
    d["spec"]["minReadySeconds"] = json!(min_ready);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    // Progressing says `NewReplicationControllerCreated` until the deployment moves on,
    // which it may do before a poll sees it.
    eventually(30, "version 1 created", || async {
        let d = dc(s, name).await;
        let reason = condition(&d, "Progressing")["reason"].clone();
        if d["status"]["latestVersion"] == 1
            && (reason == "NewReplicationControllerCreated"
                || reason == "ReplicationControllerUpdated")
        {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    deployment_in(s, &format!("{name}-1"), "Running").await;
}

// Scenario 21.
#[tokio::test]
async fn a_config_change_during_a_rollout_cancels_it() {
    let s = server().await;
    keeping_invariants(&s, "superseded", async {
        running_first_version(&s, "superseded", "8105", 60).await;
        let (code, out) = s
            .patch(
                &format!("{DCS}/superseded"),
                MERGE,
                json!({"spec": {"minReadySeconds": 0,
                                "template": {"metadata": {"annotations": {"foo": "bar"}}}}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        let failed = deployment_ends(&s, "superseded-1", "Failed").await;
        let a = &failed["metadata"]["annotations"];
        assert_eq!(
            a["openshift.io/deployment.status-reason"],
            "newer deployment was found running"
        );
        assert_eq!(a["openshift.io/deployment.cancelled"], "true");
        deployment_in(&s, "superseded-2", "Running").await;
        assert_eq!(dc(&s, "superseded").await["status"]["latestVersion"], 2);
        expect_event(
            &s,
            "superseded",
            "DeploymentCancelled",
            "Normal",
            "Cancelled deployment \"superseded-1\" superceded by version 2",
            "deploymentconfig-controller",
        )
        .await;
        expect_event(
            &s,
            "superseded",
            "RolloutCancelled",
            "Normal",
            "Rollout for \"default/superseded-1\" cancelled",
            "deployer-controller",
        )
        .await;
        expect_event(
            &s,
            "superseded",
            "DeploymentCreated",
            "Normal",
            "Created new replication controller \"superseded-2\" for version 2",
            "deploymentconfig-controller",
        )
        .await;
        expect_event(
            &s,
            "superseded",
            "DeploymentAwaitingCancellation",
            "Normal",
            "Deployment of version 2 awaiting cancellation of older running deployments",
            "deploymentconfig-controller",
        )
        .await;
        deployment_ends(&s, "superseded-2", "Complete").await;
        let d = progressing(&s, "superseded", "NewReplicationControllerAvailable").await;
        assert_eq!(
            condition(&d, "Progressing")["message"],
            "replication controller \"superseded-2\" successfully rolled out"
        );
        let (code, _) = s.get(&format!("{PODS}/superseded-1-deploy")).await;
        assert_eq!(code, 404, "the cancelled deployer pod is deleted");
    })
    .await;
    delete_dc(&s, "superseded").await;
    nothing_runs("sleep 8105", &["superseded-1", "superseded-2"]).await;
    s.stop().await;
}

// Scenario 22.
#[tokio::test]
async fn a_cancel_after_the_deployer_succeeded_leaves_the_deployment_complete() {
    let s = server().await;
    keeping_invariants(&s, "late-cancel", async {
        let mut d = simple("late-cancel", "8106");
        d["spec"]["minReadySeconds"] = json!(3);
        let (code, out) = s.post(DCS, d).await;
        assert_eq!(code, 201, "{out}");
        eventually(60, "the deployer succeeded", || async {
            let (_, p) = s.get(&format!("{PODS}/late-cancel-1-deploy")).await;
            if p["status"]["phase"] == "Succeeded" {
                Ok(())
            } else {
                Err(p["status"].to_string())
            }
        })
        .await;
        let (code, out) = s
            .patch(
                &format!("{RCS}/late-cancel-1"),
                MERGE,
                json!({"metadata": {"annotations": {
                    "openshift.io/deployment.cancelled": "true",
                    "openshift.io/deployment.status-reason": "cancelled by the user"}}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        let (code, out) = s
            .patch(
                &format!("{DCS}/late-cancel"),
                MERGE,
                json!({"spec": {"template": {"metadata": {"annotations": {"foo": "bar"}}}}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        eventually(
            60,
            "version 1 complete, its cancellation undone",
            || async {
                let (_, rc) = rc(&s, "late-cancel-1").await;
                let a = &rc["metadata"]["annotations"];
                if phase(&rc) == "Complete"
                    && a.get("openshift.io/deployment.cancelled").is_none()
                    && a.get("openshift.io/deployment.status-reason").is_none()
                {
                    Ok(())
                } else {
                    Err(rc["metadata"].to_string())
                }
            },
        )
        .await;
        expect_event(
            &s,
            "late-cancel",
            "FailedCancellation",
            "Warning",
            "Succeeded before cancel recorded",
            "deployer-controller",
        )
        .await;
        eventually(90, "version 2 completes, never failing", || async {
            let (code, second) = rc(&s, "late-cancel-2").await;
            assert_ne!(phase(&second), "Failed", "{second}");
            let (_, first) = rc(&s, "late-cancel-1").await;
            assert_eq!(phase(&first), "Complete", "{first}");
            if code == 200 && phase(&second) == "Complete" {
                Ok(())
            } else {
                Err(phase(&second).to_string())
            }
        })
        .await;
        assert_eq!(dc(&s, "late-cancel").await["status"]["latestVersion"], 2);
        // Told once: the passes after the cancellation was undone have nothing to tell.
        let (_, events) = s.get(EVENTS).await;
        let told: Vec<&Value> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "FailedCancellation")
            .collect();
        assert_eq!(told.len(), 1, "{told:?}");
        assert_eq!(told[0]["count"], 1, "{told:?}");
    })
    .await;
    delete_dc(&s, "late-cancel").await;
    nothing_runs("sleep 8106", &["late-cancel-1", "late-cancel-2"]).await;
    s.stop().await;
}

// Scenario 23.
#[tokio::test]
async fn deployments_left_by_an_orphaning_delete_are_adopted_by_the_new_dc() {
    let s = server().await;
    keeping_invariants(&s, "orphans", async {
        let (code, out) = s.post(DCS, simple("orphans", "8107")).await;
        assert_eq!(code, 201, "{out}");
        deployment_ends(&s, "orphans-1", "Complete").await;
        let (code, patched) = s
            .patch(
                &format!("{DCS}/orphans"),
                MERGE,
                json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}}),
            )
            .await;
        assert_eq!(code, 200, "{patched}");
        assert_eq!(patched["status"]["latestVersion"], 1);
        deployment_ends(&s, "orphans-2", "Complete").await;
        let uids = |rcs: &[Value]| {
            let mut u: Vec<String> = rcs
                .iter()
                .map(|r| r["metadata"]["uid"].as_str().unwrap_or("").to_string())
                .collect();
            u.sort();
            u
        };
        let before = eventually(30, "both deployments settled", || async {
            let (rcs, _) = rcs_and_pods(&s, "orphans").await;
            let (_, first) = rc(&s, "orphans-1").await;
            if rcs.len() == 2 && first["status"]["replicas"] == 0 {
                Ok(rcs)
            } else {
                Err(format!("{} rcs", rcs.len()))
            }
        })
        .await;

        let (code, out) = s
            .call(
                reqwest::Method::DELETE,
                &format!("{DCS}/orphans"),
                Some(
                    json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}),
                ),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        eventually(30, "the DC is gone", || async {
            match s.get(&format!("{DCS}/orphans")).await {
                (404, _) => Ok(()),
                (code, d) => Err(format!("{code} {}", d["metadata"])),
            }
        })
        .await;
        let orphaned = eventually(30, "the deployments have no owner", || async {
            let (rcs, _) = rcs_and_pods(&s, "orphans").await;
            if rcs.len() == 2
                && rcs.iter().all(|r| {
                    r["metadata"]["ownerReferences"]
                        .as_array()
                        .is_none_or(Vec::is_empty)
                })
            {
                Ok(rcs)
            } else {
                Err(format!("{rcs:?}"))
            }
        })
        .await;
        assert_eq!(uids(&orphaned), uids(&before));

        // The same object again: the deployments are adopted and the version catches up.
        let mut again = patched.clone();
        again.as_object_mut().unwrap().remove("status");
        let meta = again["metadata"].as_object_mut().unwrap();
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            meta.remove(k);
        }
        let (code, made) = s.post(DCS, again).await;
        assert_eq!(code, 201, "{made}");
        assert_eq!(made["status"]["latestVersion"], 0);
        eventually(30, "version 2 adopted and available", || async {
            let d = dc(&s, "orphans").await;
            if d["status"]["latestVersion"] == 2
                && d["status"]["availableReplicas"] == d["spec"]["replicas"]
            {
                Ok(())
            } else {
                Err(d["status"].to_string())
            }
        })
        .await;
        let (rcs, _) = rcs_and_pods(&s, "orphans").await;
        assert_eq!(uids(&rcs), uids(&before), "no new deployment");
        assert!(
            rcs.iter()
                .all(|r| r["metadata"]["ownerReferences"][0]["uid"] == made["metadata"]["uid"]),
            "{rcs:?}"
        );

        let (code, out) = s
            .patch(
                &format!("{DCS}/orphans/scale"),
                MERGE,
                json!({"spec": {"replicas": 3}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        eventually(60, "three replicas available", || async {
            let d = dc(&s, "orphans").await;
            if d["status"]["availableReplicas"] == 3 && d["status"]["latestVersion"] == 2 {
                Ok(())
            } else {
                Err(d["status"].to_string())
            }
        })
        .await;
        let (code, out) = s
            .patch(
                &format!("{DCS}/orphans"),
                MERGE,
                json!({"spec": {"template": {"metadata": {"labels": {"rev": "3"}}}}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        let third = deployment_ends(&s, "orphans-3", "Complete").await;
        assert_eq!(third["spec"]["replicas"], 3);
    })
    .await;
    delete_dc(&s, "orphans").await;
    nothing_runs("sleep 8107", &["orphans-1", "orphans-2", "orphans-3"]).await;
    s.stop().await;
}

// Scenario 24.
#[tokio::test]
async fn a_dc_waiting_for_an_image_creates_no_deployment() {
    let s = server().await;
    let mut d = simple("unresolved", "8108");
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
    let (code, st) = s.post(DCS, d.clone()).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap_or("")
            .contains("spec.template.spec.containers[0].image: Required value"),
        "{st}"
    );
    d["spec"]["triggers"] = json!([
        {"type": "ConfigChange"},
        {"type": "ImageChange", "imageChangeParams": {
            "automatic": true, "containerNames": ["myapp"],
            "from": {"kind": "ImageStreamTag", "name": "app:latest"}}},
    ]);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    let observed = |generation: i64| {
        let s = &s;
        async move {
            eventually(30, &format!("generation {generation} observed"), || async {
                let d = dc(s, "unresolved").await;
                if d["status"]["observedGeneration"] == generation {
                    Ok(d)
                } else {
                    Err(d["status"].to_string())
                }
            })
            .await
        }
    };
    let d = observed(1).await;
    assert_eq!(d["status"]["latestVersion"], 0);
    let (code, out) = s
        .patch(
            &format!("{DCS}/unresolved/scale"),
            MERGE,
            json!({"spec": {"replicas": 2}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    observed(2).await;
    // An image of its own does not resolve the trigger: still no deployment.
    let (code, out) = s
        .patch(
            &format!("{DCS}/unresolved"),
            MERGE,
            template_env("8108", json!([])),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let d = observed(3).await;
    assert_eq!(d["status"]["latestVersion"], 0);
    let (code, st) = s
        .post(
            &format!("{DCS}/unresolved/instantiate"),
            rollout_latest("unresolved"),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    assert_eq!(
        st["message"],
        "cannot trigger a deployment for \"unresolved\" because it contains unresolved images"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rcs, pods) = rcs_and_pods(&s, "unresolved").await;
    assert!(rcs.is_empty(), "{rcs:?}");
    assert!(pods.is_empty(), "{pods:?}");
    assert_eq!(dc(&s, "unresolved").await["status"]["latestVersion"], 0);
    delete_dc(&s, "unresolved").await;

    // A trigger that claims an image while the container still has none: a version may
    // be asked for, but no deployment of an empty image is ever made.
    let mut d = simple("claimed", "8108");
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(" ");
    d["spec"]["triggers"] = json!([{"type": "ImageChange", "imageChangeParams": {
        "automatic": true, "containerNames": ["myapp"], "lastTriggeredImage": "busybox",
        "from": {"kind": "ImageStreamTag", "name": "app:latest"}}}]);
    let triggers = d["spec"]["triggers"].clone();
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    // (A create clears triggered images; an update keeps them.)
    let (code, out) = s
        .patch(
            &format!("{DCS}/claimed"),
            MERGE,
            json!({"spec": {"triggers": triggers}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["spec"]["triggers"][0]["imageChangeParams"]["lastTriggeredImage"],
        "busybox"
    );
    let (code, out) = s
        .post(
            &format!("{DCS}/claimed/instantiate"),
            rollout_latest("claimed"),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["status"]["latestVersion"], 1);
    eventually(30, "the new generation observed", || async {
        let d = dc(&s, "claimed").await;
        if d["status"]["observedGeneration"] == d["metadata"]["generation"] {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rcs, pods) = rcs_and_pods(&s, "claimed").await;
    assert!(rcs.is_empty(), "{rcs:?}");
    assert!(pods.is_empty(), "{pods:?}");
    delete_dc(&s, "claimed").await;
    s.stop().await;
}

// Scenario 28.
#[tokio::test]
async fn a_deleted_deployer_pod_fails_the_rollout_and_the_previous_one_comes_back() {
    let s = server().await;
    keeping_invariants(&s, "lost", async {
        let (code, out) = s.post(DCS, simple("lost", "8109")).await;
        assert_eq!(code, 201, "{out}");
        deployment_ends(&s, "lost-1", "Complete").await;
        // Recreate takes the old pods down first; pods of the new version take a minute to
        // count as available, so the deployer is still busy when its pod goes.
        let mut patch = template_env("8109", json!([{"name": "V", "value": "2"}]));
        patch["spec"]["strategy"] = json!({"type": "Recreate", "rollingParams": null});
        patch["spec"]["minReadySeconds"] = json!(60);
        let (code, out) = s.patch(&format!("{DCS}/lost"), MERGE, patch).await;
        assert_eq!(code, 200, "{out}");
        eventually(60, "version 2 runs with version 1 scaled down", || async {
            let (_, second) = rc(&s, "lost-2").await;
            let (_, first) = rc(&s, "lost-1").await;
            if phase(&second) == "Running"
                && first["spec"]["replicas"] == 0
                && second["spec"]["replicas"] == 1
            {
                Ok(())
            } else {
                Err(format!("{} {}", phase(&second), first["spec"]))
            }
        })
        .await;
        let (code, out) = s.delete(&format!("{PODS}/lost-2-deploy")).await;
        assert_eq!(code, 200, "{out}");
        let failed = deployment_ends(&s, "lost-2", "Failed").await;
        assert_eq!(
            failed["metadata"]["annotations"]["openshift.io/deployment.status-reason"],
            "deployer pod no longer exists"
        );
        expect_event(
            &s,
            "lost",
            "Failed",
            "Warning",
            "Deployer pod \"lost-2-deploy\" has gone missing",
            "deployer-controller",
        )
        .await;
        eventually(60, "version 1 is back and version 2 is gone", || async {
            let (_, first) = rc(&s, "lost-1").await;
            let (_, second) = rc(&s, "lost-2").await;
            if first["spec"]["replicas"] == 1
                && first["status"]["replicas"] == 1
                && second["spec"]["replicas"] == 0
            {
                Ok(())
            } else {
                Err(format!("{} {}", first["status"], second["spec"]))
            }
        })
        .await;
        expect_event(
            &s,
            "lost",
            "ReplicationControllerScaled",
            "Normal",
            "Scaled replication controller \"lost-1\" from 0 to 1",
            "deploymentconfig-controller",
        )
        .await;
        expect_event(
            &s,
            "lost",
            "ReplicationControllerScaled",
            "Normal",
            "Scaled replication controller \"lost-2\" from 1 to 0",
            "deploymentconfig-controller",
        )
        .await;
        let d = progressing(&s, "lost", "ProgressDeadlineExceeded").await;
        assert_eq!(
            condition(&d, "Progressing")["message"],
            "replication controller \"lost-2\" has failed progressing"
        );
    })
    .await;
    delete_dc(&s, "lost").await;
    nothing_runs("sleep 8109", &["lost-1", "lost-2"]).await;
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_dc_mid_rollout_leaves_nothing_behind() {
    let s = server().await;
    running_first_version(&s, "midway", "8110", 60).await;
    eventually(10, "the deployer process runs", || async {
        match deployer_processes("midway-1") {
            1 => Ok(()),
            n => Err(format!("{n} deployers")),
        }
    })
    .await;
    eventually(30, "the app pod runs", || async {
        match processes_with("sleep 8110") {
            0 => Err("no app process yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    delete_dc(&s, "midway").await;
    nothing_runs("sleep 8110", &["midway-1"]).await;
    let (rcs, pods) = rcs_and_pods(&s, "midway").await;
    assert!(rcs.is_empty() && pods.is_empty(), "{rcs:?} {pods:?}");
    s.stop().await;
}

/// Runs `body` while checking §12's invariants over DC `dc` every 50 ms; a broken
/// invariant fails the test.
async fn keeping_invariants<T>(
    s: &TestServer,
    dc: &str,
    body: impl std::future::Future<Output = T>,
) -> T {
    let watch = async {
        loop {
            let (rcs, pods) = rcs_and_pods(s, dc).await;
            if let Err(e) = check_invariants(&rcs, &pods) {
                panic!("invariant broken: {e}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        () = watch => unreachable!(),
        out = body => out,
    }
}

/// Checks §12 and that deployment `rc` has at most one deployer pod and process.
async fn one_deployer_at_most(s: &TestServer, dc: &str, rc: &str) -> Result<(), String> {
    let (rcs, pods) = rcs_and_pods(s, dc).await;
    check_invariants(&rcs, &pods)?;
    let deployer_pods = pods
        .iter()
        .filter(|p| p["metadata"]["labels"]["openshift.io/deployer-pod-for.name"] == rc)
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-deploy"))
        })
        .count();
    let processes = deployer_processes(rc);
    if deployer_pods > 1 || processes > 1 {
        return Err(format!(
            "{deployer_pods} deployer pods, {processes} deployer processes for {rc}"
        ));
    }
    Ok(())
}

/// Polls `one_deployer_at_most` until `done` holds, panicking on a broken invariant.
async fn watch_until<F, Fut>(s: &TestServer, dc: &str, rc: &str, secs: u64, what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Err(e) = one_deployer_at_most(s, dc, rc).await {
            panic!("invariant broken: {e}");
        }
        if done().await {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not after {secs} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_berth_restarted_mid_rollout_ends_the_rollout_cleanly() {
    let s = server().await;
    let mut d = simple("restarted", "8111");
    d["spec"]["replicas"] = json!(2);
    d["spec"]["minReadySeconds"] = json!(12);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    watch_until(
        &s,
        "restarted",
        "restarted-1",
        60,
        "version 1 runs",
        || async { phase(&rc(&s, "restarted-1").await.1) == "Running" },
    )
    .await;
    // (Its process may still be the shim about to start it.)
    eventually(10, "the deployer process runs", || async {
        match deployer_processes("restarted-1") {
            1 => Ok(()),
            n => Err(format!("{n} deployers")),
        }
    })
    .await;
    let addr = s.url.trim_start_matches("https://").to_string();
    let dir = s.stop().await;
    // berth is down; its deployer is not (it waits for the pods to be available), and
    // there is only one.
    assert_eq!(deployer_processes("restarted-1"), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(deployer_processes("restarted-1"), 1);
    // Back on the same address (as `berth serve --listen` would be), where the running
    // deployer and its pods find the API again.
    let s = TestServer::start_at(dir, &addr, |c| {
        c.node = Some(node_settings("test-node", |_| {}))
    })
    .await;
    watch_until(
        &s,
        "restarted",
        "restarted-1",
        120,
        "version 1 ends",
        || async { matches!(phase(&rc(&s, "restarted-1").await.1), "Complete" | "Failed") },
    )
    .await;
    // The deployer waited for the API to come back, and finished the rollout.
    let (_, first) = rc(&s, "restarted-1").await;
    let ended = phase(&first).to_string();
    assert_eq!(ended, "Complete", "{first}");
    let log = deployer_log(&s, "restarted-1").await;
    assert!(log.trim_end().ends_with("--> Success"), "{log}");
    eventually(30, "the deployer process is gone", || async {
        match deployer_processes("restarted-1") {
            0 => Ok(()),
            n => Err(format!("{n} deployers")),
        }
    })
    .await;
    // The DC agrees with the deployment's end.
    let want = if ended == "Complete" {
        "NewReplicationControllerAvailable"
    } else {
        "ProgressDeadlineExceeded"
    };
    eventually(30, "the DC reports the end of the rollout", || async {
        let d = dc(&s, "restarted").await;
        if condition(&d, "Progressing")["reason"] == want
            && d["status"]["observedGeneration"] == d["metadata"]["generation"]
        {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    // Whichever way it ended, the next version rolls out on the restarted berth.
    let (code, out) = s
        .post(
            &format!("{DCS}/restarted/instantiate"),
            rollout_latest("restarted"),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    watch_until(
        &s,
        "restarted",
        "restarted-2",
        120,
        "version 2 completes",
        || async { phase(&rc(&s, "restarted-2").await.1) == "Complete" },
    )
    .await;
    eprintln!("version 1 ended {ended} across the restart");
    delete_dc(&s, "restarted").await;
    nothing_runs("sleep 8111", &["restarted-1", "restarted-2"]).await;
    s.stop().await;
}

// Scenario 27, as the server sees `oc rollout retry`: the deployer pods of the failed
// deployment are deleted, then the deployment is reset to New.
#[tokio::test]
async fn a_failed_deployment_reset_to_new_gets_a_new_deployer() {
    let s = server().await;
    // A failing hook fails the deployment early: well within the strategy's timeout,
    // past which a deployment reset to New fails at once (§11.3).
    let mut d = simple("retried", "8112");
    d["spec"]["strategy"]["rollingParams"] = json!({"pre": {
        "failurePolicy": "Abort",
        "execNewPod": {"containerName": "myapp", "command": ["/bin/false"]},
    }});
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    deployment_ends(&s, "retried-1", "Failed").await;
    let (_, first) = s.get(&format!("{PODS}/retried-1-deploy")).await;
    let first_uid = first["metadata"]["uid"].clone();
    let (_, pods) = s
        .get(&format!(
            "{PODS}?labelSelector=openshift.io%2Fdeployer-pod-for.name%3Dretried-1"
        ))
        .await;
    for p in pods["items"].as_array().unwrap() {
        let name = p["metadata"]["name"].as_str().unwrap();
        let (code, out) = s.delete(&format!("{PODS}/{name}")).await;
        assert_eq!(code, 200, "{out}");
    }
    let (code, out) = s
        .patch(
            &format!("{RCS}/retried-1"),
            MERGE,
            json!({"metadata": {"annotations": {
                "openshift.io/deployment.phase": "New",
                "openshift.io/deployment.status-reason": null,
                "openshift.io/deployment.cancelled": null}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    // A deployer pod of its own runs (not the old one on its way out), and fails the same
    // way; at no time are there two.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ran = false;
    loop {
        if let Err(e) = one_deployer_at_most(&s, "retried", "retried-1").await {
            panic!("invariant broken: {e}");
        }
        let (code, p) = s.get(&format!("{PODS}/retried-1-deploy")).await;
        // The new deployer may run and fail between two polls: any phase past Pending
        // shows it ran.
        if code == 200
            && p["metadata"]["uid"] != first_uid
            && matches!(p["status"]["phase"].as_str(), Some("Running" | "Failed"))
        {
            ran = true;
        }
        let (_, rc) = rc(&s, "retried-1").await;
        if ran && phase(&rc) == "Failed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the retried deployment: {} {}",
            phase(&rc),
            p["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = deployer_log(&s, "retried-1").await;
    assert!(log.contains("--> pre: Failed"), "{log}");
    let (_, rc) = rc(&s, "retried-1").await;
    assert_eq!(rc["spec"]["replicas"], 0);
    delete_dc(&s, "retried").await;
    nothing_runs("sleep 8112", &["retried-1"]).await;
    s.stop().await;
}

#[tokio::test]
async fn a_berth_restarted_as_a_rollout_starts_ends_the_rollout_cleanly() {
    let s = server().await;
    let mut d = simple("early", "8113");
    d["spec"]["replicas"] = json!(2);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    // Stopped as soon as the deployment exists: its deployer pod may or may not be made.
    eventually(30, "version 1 exists", || async {
        match rc(&s, "early-1").await {
            (200, rc) => Ok(phase(&rc).to_string()),
            (code, _) => Err(code.to_string()),
        }
    })
    .await;
    let addr = s.url.trim_start_matches("https://").to_string();
    let dir = s.stop().await;
    assert!(deployer_processes("early-1") <= 1);
    let s = TestServer::start_at(dir, &addr, |c| {
        c.node = Some(node_settings("test-node", |_| {}))
    })
    .await;
    watch_until(&s, "early", "early-1", 120, "version 1 ends", || async {
        matches!(phase(&rc(&s, "early-1").await.1), "Complete" | "Failed")
    })
    .await;
    let (_, first) = rc(&s, "early-1").await;
    eprintln!("version 1 ended {} across the restart", phase(&first));
    eventually(30, "the DC observed the end", || async {
        let d = dc(&s, "early").await;
        let reason = condition(&d, "Progressing")["reason"].clone();
        if reason == "NewReplicationControllerAvailable" || reason == "ProgressDeadlineExceeded" {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    delete_dc(&s, "early").await;
    nothing_runs("sleep 8113", &["early-1"]).await;
    s.stop().await;
}
