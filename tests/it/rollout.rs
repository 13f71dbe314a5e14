//! DeploymentConfigs rolled out end to end (acceptance scenarios of
//! `deploymentconfigs.md` §22): the DC controller creates deployments, the deployer
//! controller starts deployer pods, and real `berth deploy` processes scale the
//! deployments while the node agent runs their pods.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::node::server;
use crate::support::{TestServer, eventually};

pub(crate) const DCS: &str = "/apis/apps.openshift.io/v1/namespaces/default/deploymentconfigs";
pub(crate) const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
pub(crate) const PODS: &str = "/api/v1/namespaces/default/pods";

/// The *simple* fixture: one replica, Rolling, a readiness probe that passes.
pub(crate) fn simple(name: &str, marker: &str) -> Value {
    json!({
        "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"name": name},
            "triggers": [{"type": "ConfigChange"}],
            "strategy": {"type": "Rolling"},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "myapp", "image": "busybox",
                        "command": ["sh", "-c", format!("exec sleep {marker}")],
                        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                    }],
                },
            },
        },
    })
}

pub(crate) async fn dc(s: &TestServer, name: &str) -> Value {
    s.get(&format!("{DCS}/{name}")).await.1
}

pub(crate) async fn rc(s: &TestServer, name: &str) -> (u16, Value) {
    s.get(&format!("{RCS}/{name}")).await
}

pub(crate) fn phase(rc: &Value) -> &str {
    rc["metadata"]["annotations"]["openshift.io/deployment.phase"]
        .as_str()
        .unwrap_or("")
}

pub(crate) fn condition<'a>(dc: &'a Value, kind: &str) -> &'a Value {
    dc["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// Waits until the Progressing condition of DC `name` has `reason`; returns the DC.
pub(crate) async fn progressing(s: &TestServer, name: &str, reason: &str) -> Value {
    eventually(60, &format!("{name} Progressing {reason}"), || async {
        let d = dc(s, name).await;
        if condition(&d, "Progressing")["reason"] == reason {
            Ok(d)
        } else {
            Err(d["status"].to_string())
        }
    })
    .await
}

/// Waits until deployment `name` reaches `want` (Complete or Failed).
pub(crate) async fn deployment_ends(s: &TestServer, name: &str, want: &str) -> Value {
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

pub(crate) async fn deployer_log(s: &TestServer, rc: &str) -> String {
    s.text(&format!("{PODS}/{rc}-deploy/log")).await.1
}

/// Deletes a DC and waits until it, its deployments and their pods are gone.
pub(crate) async fn delete_dc(s: &TestServer, name: &str) {
    s.delete(&format!("{DCS}/{name}")).await;
    eventually(60, "the DC and everything of it are gone", || async {
        let (code, _) = s.get(&format!("{DCS}/{name}")).await;
        let (_, rcs) = s
            .get(&format!(
                "{RCS}?labelSelector=openshift.io%2Fdeployment-config.name%3D{name}"
            ))
            .await;
        let (_, pods) = s.get(PODS).await;
        let left: Vec<&str> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .filter(|n| n.starts_with(&format!("{name}-")))
            .collect();
        let rcs_left = rcs["items"].as_array().map_or(0, Vec::len);
        if code == 404 && rcs_left == 0 && left.is_empty() {
            Ok(())
        } else {
            Err(format!("dc {code}, {rcs_left} rcs, pods {left:?}"))
        }
    })
    .await;
}

/// §12's invariants over the deployments of one DC and the pods of the namespace.
pub(crate) fn check_invariants(rcs: &[Value], pods: &[Value]) -> Result<(), String> {
    let mut by_version: BTreeMap<i64, &Value> = BTreeMap::new();
    for rc in rcs {
        let v = rc["metadata"]["annotations"]["openshift.io/deployment-config.latest-version"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        by_version.insert(v, rc);
    }
    let active: Vec<i64> = by_version
        .iter()
        .filter(|(_, rc)| matches!(phase(rc), "Pending" | "Running"))
        .map(|(v, _)| *v)
        .collect();
    if active.len() > 1 {
        return Err(format!("more than one deployment in flight: {active:?}"));
    }
    for (v, rc) in &by_version {
        if matches!(phase(rc), "New" | "Pending" | "Running") {
            for (older, orc) in by_version.range(..v) {
                if !matches!(phase(orc), "Complete" | "Failed") {
                    return Err(format!(
                        "version {older} is {} while {v} is {}",
                        phase(orc),
                        phase(rc)
                    ));
                }
            }
        }
    }
    for p in pods {
        let Some(owner) = p["metadata"]["labels"]["openshift.io/deployer-pod-for.name"].as_str()
        else {
            continue;
        };
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        let ok = name == format!("{owner}-deploy")
            || ["-hook-pre", "-hook-mid", "-hook-post"]
                .iter()
                .any(|s| name == format!("{owner}{s}"));
        if !ok {
            return Err(format!("stray deployer-labelled pod {name}"));
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_first_rollout_completes_and_a_template_change_rolls_out_again() {
    let s = server().await;
    // The deployer account is made moments after start: a deployer pod asked for before
    // it is refused with a warning (and made again), which this test counts.
    crate::support::eventually(30, "the deployer account", || async {
        match s
            .get("/api/v1/namespaces/default/serviceaccounts/deployer")
            .await
        {
            (200, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
    let (code, out) = s.post(DCS, simple("deployment-simple", "7951")).await;
    assert_eq!(code, 201, "{out}");
    let done = deployment_ends(&s, "deployment-simple-1", "Complete").await;
    let a = &done["metadata"]["annotations"];
    assert_eq!(
        a["openshift.io/deployment-config.name"],
        "deployment-simple"
    );
    assert_eq!(a["openshift.io/deployment.replicas"], "1");
    assert_eq!(done["spec"]["replicas"], 1);
    let owner = &done["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["controller"]),
        (&json!("DeploymentConfig"), &json!(true))
    );
    let (_, deployer) = s.get(&format!("{PODS}/deployment-simple-1-deploy")).await;
    assert_eq!(deployer["spec"]["restartPolicy"], "Never");
    assert_eq!(deployer["spec"]["containers"][0]["name"], "deployment");
    assert_eq!(deployer["status"]["phase"], "Succeeded", "{deployer}");
    let d = eventually(30, "the DC status", || async {
        let d = dc(&s, "deployment-simple").await;
        let p = condition(&d, "Progressing");
        if d["status"]["availableReplicas"] == 1
            && p["reason"] == "NewReplicationControllerAvailable"
        {
            Ok(d)
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    assert_eq!(d["status"]["latestVersion"], 1);
    assert_eq!(d["status"]["replicas"], 1);
    assert_eq!(d["status"]["updatedReplicas"], 1);
    assert_eq!(d["status"]["unavailableReplicas"], 0);
    assert_eq!(
        d["status"]["observedGeneration"],
        d["metadata"]["generation"]
    );
    assert_eq!(
        condition(&d, "Available")["message"],
        "Deployment config has minimum availability."
    );
    assert_eq!(
        condition(&d, "Progressing")["message"],
        "replication controller \"deployment-simple-1\" successfully rolled out"
    );
    let log = deployer_log(&s, "deployment-simple-1").await;
    assert!(log.trim_end().ends_with("--> Success"), "{log}");
    let (_, pods) = s
        .get(&format!(
            "{PODS}?labelSelector=deployment%3Ddeployment-simple-1"
        ))
        .await;
    assert_eq!(pods["items"].as_array().unwrap().len(), 1, "{pods}");
    // A rollout without trouble warns of nothing (a deployer pod made twice did).
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=type%3DWarning")
        .await;
    let warnings: Vec<&Value> = events["items"].as_array().unwrap().iter().collect();
    assert!(warnings.is_empty(), "{warnings:?}");

    // A template change: version 2 rolls out, version 1 ends at 0 replicas.
    let (code, out) = s
        .patch(
            &format!("{DCS}/deployment-simple"),
            "application/merge-patch+json",
            json!({"spec": {"template": {"spec": {"containers": [{
                "name": "myapp", "image": "busybox",
                "command": ["sh", "-c", "exec sleep 7952"],
                "env": [{"name": "TRY", "value": "ONCE"}],
                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
            }]}}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let second = deployment_ends(&s, "deployment-simple-2", "Complete").await;
    assert_eq!(
        second["metadata"]["annotations"]["openshift.io/deployment.status-reason"],
        "config change"
    );
    eventually(30, "version 1 is scaled down", || async {
        let (_, first) = rc(&s, "deployment-simple-1").await;
        if first["spec"]["replicas"] == 0 && first["status"]["replicas"] == 0 {
            Ok(())
        } else {
            Err(first["status"].to_string())
        }
    })
    .await;
    delete_dc(&s, "deployment-simple").await;
}

#[tokio::test]
async fn a_deployment_with_the_ignore_annotation_stays_new() {
    let s = server().await;
    let mut d = simple("database", "7953");
    d["metadata"]["annotations"] = json!({"deploy.openshift.io/deployer-pod.ignore": "true"});
    d["spec"].as_object_mut().unwrap().remove("triggers");
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    let d = eventually(30, "version 1 created", || async {
        let d = dc(&s, "database").await;
        if d["status"]["latestVersion"] == 1
            && condition(&d, "Progressing")["reason"] == "NewReplicationControllerCreated"
        {
            Ok(d)
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    assert_eq!(d["status"]["latestVersion"], 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, rc) = rc(&s, "database-1").await;
    assert_eq!(phase(&rc), "New");
    let (code, _) = s.get(&format!("{PODS}/database-1-deploy")).await;
    assert_eq!(code, 404);
    delete_dc(&s, "database").await;
}

#[tokio::test]
async fn a_failing_abort_hook_fails_the_rollout_and_deleting_the_dc_removes_everything() {
    let s = server().await;
    let mut d = simple("brokendeployment", "7954");
    d["spec"]["strategy"]["rollingParams"] = json!({"pre": {
        "failurePolicy": "Abort",
        "execNewPod": {"containerName": "myapp", "command": ["/bin/false"]},
    }});
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    deployment_ends(&s, "brokendeployment-1", "Failed").await;
    let d = progressing(&s, "brokendeployment", "ProgressDeadlineExceeded").await;
    assert_eq!(condition(&d, "Progressing")["status"], "False");
    for pod in ["brokendeployment-1-deploy", "brokendeployment-1-hook-pre"] {
        let (code, p) = s.get(&format!("{PODS}/{pod}")).await;
        assert_eq!(code, 200, "{pod}");
        assert_eq!(p["status"]["phase"], "Failed", "{p}");
    }
    delete_dc(&s, "brokendeployment").await;
}

#[tokio::test]
async fn config_changes_in_a_row_keep_the_invariants_and_the_last_one_wins() {
    let s = server().await;
    let (code, out) = s.post(DCS, simple("stress", "7955")).await;
    assert_eq!(code, 201, "{out}");
    let watch = async {
        loop {
            let (_, rcs) = s
                .get(&format!(
                    "{RCS}?labelSelector=openshift.io%2Fdeployment-config.name%3Dstress"
                ))
                .await;
            let (_, pods) = s.get(PODS).await;
            let rcs = rcs["items"].as_array().cloned().unwrap_or_default();
            let pods = pods["items"].as_array().cloned().unwrap_or_default();
            if let Err(e) = check_invariants(&rcs, &pods) {
                panic!("invariant broken: {e}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let changes = async {
        // Scenario 5: a random mix of template changes, `rollout cancel` and waiting for
        // the latest deployment to run, then one more change. The seed is printed so that
        // a failure can be replayed.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        println!("scenario 5 seed {seed}");
        let mut state = seed | 1;
        let mut next = move || {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let change = |i: u64| {
            let s = &s;
            async move {
                let (code, out) = s
                    .patch(
                        &format!("{DCS}/stress"),
                        "application/json-patch+json",
                        json!([{"op": "add", "path": "/spec/template/spec/containers/0/env",
                            "value": [{"name": "TRY", "value": i.to_string()}]}]),
                    )
                    .await;
                assert_eq!(code, 200, "{out}");
            }
        };
        for i in 0..15 {
            match next() % 3 {
                0 => change(i).await,
                1 => {
                    let run = s.berth(&["rollout", "cancel", "dc/stress"]).await;
                    let tolerated = [
                        "the object has been modified",
                        "there have been no replication controllers",
                        "there is a meaningful conflict",
                    ];
                    assert!(
                        run.code == 0 || tolerated.iter().any(|t| run.stderr.contains(t)),
                        "{run:?}"
                    );
                }
                _ => {
                    eventually(60, "the latest deployment runs", || async {
                        let d = dc(&s, "stress").await;
                        let v = d["status"]["latestVersion"].as_i64().unwrap_or(0);
                        let (_, rc) = rc(&s, &format!("stress-{v}")).await;
                        match phase(&rc) {
                            "Running" | "Complete" | "Failed" => Ok(()),
                            other => Err(format!("{v}: {other}")),
                        }
                    })
                    .await;
                }
            }
        }
        change(15).await;
        let latest = eventually(60, "the last version completes", || async {
            let d = dc(&s, "stress").await;
            let v = d["status"]["latestVersion"].as_i64().unwrap_or(0);
            let (_, rc) = rc(&s, &format!("stress-{v}")).await;
            if phase(&rc) == "Complete" {
                Ok(rc)
            } else {
                Err(format!("{v}: {}", phase(&rc)))
            }
        })
        .await;
        eventually(30, "the last version has the replica", || async {
            let name = latest["metadata"]["name"].as_str().unwrap();
            let (_, rc) = rc(&s, name).await;
            if rc["spec"]["replicas"] == 1 && rc["status"]["replicas"] == 1 {
                Ok(())
            } else {
                Err(rc["status"].to_string())
            }
        })
        .await;
    };
    tokio::select! {
        () = watch => unreachable!(),
        () = changes => {}
    }
    delete_dc(&s, "stress").await;
}

#[tokio::test]
async fn a_custom_strategy_calls_openshift_deploy_in_stages() {
    let s = server().await;
    let mut d = simple("custom-deployment", "7956");
    d["spec"]["replicas"] = json!(2);
    d["spec"]["strategy"] = json!({
        "type": "Rolling",
        "rollingParams": {"pre": {"failurePolicy": "Abort", "execNewPod": {
            "containerName": "myapp", "command": ["/bin/echo", "test pre hook executed"]}}},
        "customParams": {"command": ["/bin/sh", "-c",
            "set -e; openshift-deploy --until=50%; echo Halfway; openshift-deploy; echo Finished"]},
    });
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    deployment_ends(&s, "custom-deployment-1", "Complete").await;
    let log = deployer_log(&s, "custom-deployment-1").await;
    let mut at = 0;
    for line in [
        "--> pre: Running hook pod ...",
        "test pre hook executed",
        "--> Scaling custom-deployment-1 to 2",
        "--> Reached 50%",
        "Halfway",
        "--> Success",
        "Finished",
    ] {
        let found = log[at..]
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} in order in:\n{log}"));
        at += found + line.len();
    }
    delete_dc(&s, "custom-deployment").await;
}

#[tokio::test]
async fn a_test_deployment_rolls_out_then_keeps_no_replicas() {
    let s = server().await;
    let mut d = simple("deployment-test", "7957");
    d["spec"]["replicas"] = json!(2);
    d["spec"]["test"] = json!(true);
    d["spec"]["strategy"]["rollingParams"] = json!({"pre": {"failurePolicy": "Abort",
        "execNewPod": {"containerName": "myapp", "command": ["/bin/echo", "test pre hook executed"]}}});
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    deployment_ends(&s, "deployment-test-1", "Complete").await;
    let log = deployer_log(&s, "deployment-test-1").await;
    for line in ["deployment-test-1 to 2", "--> pre: Success", "--> Success"] {
        assert!(log.contains(line), "{line:?} in:\n{log}");
    }
    eventually(30, "the test deployment keeps no replicas", || async {
        let (_, rc) = rc(&s, "deployment-test-1").await;
        if rc["spec"]["replicas"] == 0 && rc["status"]["replicas"].as_i64().unwrap_or(0) == 0 {
            Ok(())
        } else {
            Err(format!(
                "{} / {}",
                rc["spec"]["replicas"], rc["status"]["replicas"]
            ))
        }
    })
    .await;
    delete_dc(&s, "deployment-test").await;
}

#[tokio::test]
async fn deployments_are_released_and_adopted_by_their_label() {
    let s = server().await;
    let mut d = simple("deployment-simple", "7958");
    d["spec"]["replicas"] = json!(3);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    let done = deployment_ends(&s, "deployment-simple-1", "Complete").await;
    let owner = &done["metadata"]["ownerReferences"][0];
    assert_eq!(owner["apiVersion"], "apps.openshift.io/v1");
    assert_eq!(owner["blockOwnerDeletion"], true);
    let label = |value: &str| json!({"metadata": {"labels": {"openshift.io/deployment-config.name": value}}});
    let path = format!("{RCS}/deployment-simple-1");
    let patch = |v: Value| s.patch(&path, "application/merge-patch+json", v);
    let (code, out) = patch(label("deployment-simple-detached")).await;
    assert_eq!(code, 200, "{out}");
    eventually(30, "released", || async {
        let (_, rc) = rc(&s, "deployment-simple-1").await;
        let d = dc(&s, "deployment-simple").await;
        let owned = rc["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|r| r.iter().any(|o| o["controller"] == true));
        if !owned
            && d["status"]["availableReplicas"] == 0
            && d["status"]["unavailableReplicas"] == 0
        {
            Ok(())
        } else {
            Err(format!("{} {}", rc["metadata"], d["status"]))
        }
    })
    .await;
    let (code, out) = patch(label("deployment-simple")).await;
    assert_eq!(code, 200, "{out}");
    eventually(30, "adopted again", || async {
        let (_, rc) = rc(&s, "deployment-simple-1").await;
        let d = dc(&s, "deployment-simple").await;
        let owned = rc["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|r| r.iter().any(|o| o["controller"] == true));
        if owned && d["status"]["availableReplicas"] == 3 && d["status"]["unavailableReplicas"] == 0
        {
            Ok(())
        } else {
            Err(format!("{} {}", rc["metadata"], d["status"]))
        }
    })
    .await;
    delete_dc(&s, "deployment-simple").await;
}

#[tokio::test]
async fn old_deployments_beyond_the_history_limit_are_pruned() {
    let s = server().await;
    let mut d = simple("history-limit", "7959");
    d["spec"]["revisionHistoryLimit"] = json!(3);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    deployment_ends(&s, "history-limit-1", "Complete").await;
    for i in 2..=8 {
        let (code, out) = s
            .patch(
                &format!("{DCS}/history-limit"),
                "application/merge-patch+json",
                json!({"spec": {"template": {"metadata": {"annotations": {"a": i.to_string()}}}}}),
            )
            .await;
        assert_eq!(code, 200, "{out}");
        deployment_ends(&s, &format!("history-limit-{i}"), "Complete").await;
    }
    eventually(30, "three old deployments are kept", || async {
        let (_, rcs) = s
            .get(&format!(
                "{RCS}?labelSelector=openshift.io%2Fdeployment-config.name%3Dhistory-limit"
            ))
            .await;
        let mut names: Vec<String> = rcs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        if names
            == [
                "history-limit-5",
                "history-limit-6",
                "history-limit-7",
                "history-limit-8",
            ]
        {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
    delete_dc(&s, "history-limit").await;
}

#[tokio::test]
async fn pods_that_never_become_ready_fail_the_rollout_and_lose_their_replicas() {
    let s = server().await;
    let mut d = simple("readiness", "7960");
    d["spec"]["strategy"]["rollingParams"] = json!({"timeoutSeconds": 3});
    d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] =
        json!({"exec": {"command": ["/bin/false"]}, "periodSeconds": 1, "failureThreshold": 1});
    d["spec"].as_object_mut().unwrap().remove("triggers");
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    deployment_ends(&s, "readiness-1", "Failed").await;
    let d = progressing(&s, "readiness", "ProgressDeadlineExceeded").await;
    assert_eq!(
        condition(&d, "Progressing")["message"],
        "replication controller \"readiness-1\" has failed progressing"
    );
    let log = deployer_log(&s, "readiness-1").await;
    assert!(
        log.contains("error: update acceptor rejected readiness-1: pods for rc 'default/readiness-1' took longer than 3 seconds to become available"),
        "{log}"
    );
    eventually(30, "the failed deployment is scaled down", || async {
        let (_, rc) = rc(&s, "readiness-1").await;
        if rc["spec"]["replicas"] == 0 {
            Ok(())
        } else {
            Err(rc["spec"].to_string())
        }
    })
    .await;
    delete_dc(&s, "readiness").await;
}

#[tokio::test]
async fn a_cancelled_deployment_fails_and_a_new_version_rolls_out() {
    let s = server().await;
    let mut d = simple("cancelled", "7961");
    // Pods take long to count as available: the first rollout is still running when it
    // is cancelled.
    d["spec"]["minReadySeconds"] = json!(60);
    let (code, out) = s.post(DCS, d).await;
    assert_eq!(code, 201, "{out}");
    eventually(60, "version 1 runs", || async {
        let (_, rc) = rc(&s, "cancelled-1").await;
        if phase(&rc) == "Running" {
            Ok(())
        } else {
            Err(phase(&rc).to_string())
        }
    })
    .await;
    let (code, out) = s
        .patch(
            &format!("{RCS}/cancelled-1"),
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {
                "openshift.io/deployment.cancelled": "true",
                "openshift.io/deployment.status-reason": "cancelled by the user"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = s
        .patch(
            &format!("{DCS}/cancelled"),
            "application/merge-patch+json",
            json!({"spec": {"minReadySeconds": 0,
                            "template": {"metadata": {"annotations": {"foo": "bar"}}}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let failed = deployment_ends(&s, "cancelled-1", "Failed").await;
    assert_eq!(
        failed["metadata"]["annotations"]["openshift.io/deployment.status-reason"],
        "cancelled by the user"
    );
    deployment_ends(&s, "cancelled-2", "Complete").await;
    let d = dc(&s, "cancelled").await;
    assert_eq!(d["status"]["latestVersion"], 2);
    delete_dc(&s, "cancelled").await;
}
