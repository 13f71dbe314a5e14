//! `berth rollout ...` against a real cluster: the texts and exit codes of the
//! deploymentconfigs spec §20 (acceptance scenarios 9, 11, 13, 25–27 and 29).

use std::path::Path;

use serde_json::{Value, json};

use crate::node::server;
use crate::support::{TestServer, eventually, fails, ok};

const DCS: &str = "/apis/apps.openshift.io/v1/namespaces/default/deploymentconfigs";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// A DC whose pods are ready once the file `ready` exists, so the tests decide when a
/// rollout can complete.
fn gated(name: &str, marker: u32, ready: &Path) -> Value {
    json!({
        "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"name": name},
            "strategy": {"type": "Rolling", "rollingParams": {"timeoutSeconds": 120}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app", "image": "busybox",
                        "command": ["sh", "-c", format!("exec sleep {marker}")],
                        "readinessProbe": {
                            "exec": {"command": ["test", "-e", ready.to_str().unwrap()]},
                            "periodSeconds": 1,
                        },
                    }],
                },
            },
        },
    })
}

fn phase(rc: &Value) -> String {
    rc["metadata"]["annotations"]["openshift.io/deployment.phase"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

async fn phase_of(s: &TestServer, rc: &str) -> String {
    phase(&s.get(&format!("{RCS}/{rc}")).await.1)
}

async fn reaches(s: &TestServer, rc: &str, want: &str) {
    eventually(90, &format!("{rc} {want}"), || async {
        let p = phase_of(s, rc).await;
        (p == want).then_some(()).ok_or(p)
    })
    .await;
}

/// Deletes the DC and waits until its pods are gone, so no process outlives the test.
async fn delete_all(s: &TestServer, name: &str) {
    s.delete(&format!("{DCS}/{name}")).await;
    eventually(60, "pods gone", || async {
        let pods = s.get(PODS).await.1["items"].as_array().unwrap().len();
        (pods == 0).then_some(()).ok_or(pods.to_string())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rollout_verbs_refuse_a_paused_config_and_resume_deploys_it() {
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    std::fs::write(&ready, "").unwrap();
    let mut dc = gated("paused", 8201, &ready);
    dc["spec"]["paused"] = json!(true);
    assert_eq!(s.post(DCS, dc).await.0, 201);

    fails(
        &s.berth(&["rollout", "latest", "dc/paused"]).await,
        "error: cannot deploy a paused deployment config\n",
    );
    fails(
        &s.berth(&["rollout", "cancel", "dc/paused"]).await,
        "error: unable to cancel paused deployment default/paused\n",
    );
    fails(
        &s.berth(&["rollout", "retry", "dc/paused"]).await,
        "error: unable to retry paused deployment config \"paused\"\n",
    );
    fails(
        &s.berth(&["rollout", "undo", "dc/paused"]).await,
        "error: cannot rollback a paused config; resume it first with 'rollout resume \
         dc/paused' and try again\n",
    );
    fails(
        &s.berth(&["rollout", "pause", "dc/paused"]).await,
        "error: deploymentconfigs.apps.openshift.io \"paused\" is already paused\n",
    );
    let rcs = s.get(RCS).await.1;
    assert_eq!(rcs["items"], json!([]), "a paused config deploys nothing");

    ok(
        &s.berth(&["rollout", "resume", "dc/paused"]).await,
        "deploymentconfig.apps.openshift.io/paused resumed\n",
    );
    fails(
        &s.berth(&["rollout", "resume", "paused"]).await,
        "error: deploymentconfigs.apps.openshift.io \"paused\" is not paused\n",
    );
    let run = s.berth(&["rollout", "status", "dc/paused"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .ends_with("replication controller \"paused-1\" successfully rolled out\n"),
        "{run:?}"
    );
    assert_eq!(phase_of(&s, "paused-1").await, "Complete");

    ok(
        &s.berth(&["rollout", "pause", "deploymentconfig/paused"])
            .await,
        "deploymentconfig.apps.openshift.io/paused paused\n",
    );
    fails(
        &s.berth(&["rollout", "status", "dc/paused"]).await,
        "error: Deployment config \"paused\" is paused. Resume to continue watching the \
         status of the rollout.\n",
    );
    delete_all(&s, "paused").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rollout_verbs_start_follow_list_undo_cancel_and_retry_rollouts() {
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let path = format!("{DCS}/web");

    // Usage errors and unknown objects.
    fails(
        &s.berth(&["rollout", "latest"]).await,
        "error: one deployment config name is needed as argument.\n",
    );
    fails(
        &s.berth(&["rollout", "history", "dc/nope"]).await,
        "Error from server (NotFound): deploymentconfigs.apps.openshift.io \"nope\" not \
         found\n",
    );

    assert_eq!(s.post(DCS, gated("web", 8202, &ready)).await.0, 201);
    reaches(&s, "web-1", "Running").await;
    // `rollout status` follows the rollout until the pods are ready.
    let status = {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(["rollout", "status", "dc/web"])
            .env("KUBECONFIG", s.kubeconfig())
            .kill_on_drop(true);
        cmd.output()
    };
    let status = tokio::spawn(status);
    fails(
        &s.berth(&["rollout", "latest", "dc/web"]).await,
        "error: #1 is already in progress (Running).\n",
    );
    std::fs::write(&ready, "").unwrap();
    reaches(&s, "web-1", "Complete").await;
    let status = crate::support::within(60, status).await.unwrap().unwrap();
    let out = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{out}");
    assert!(out.starts_with("Waiting for rollout to finish: "), "{out}");
    assert!(
        out.ends_with("replication controller \"web-1\" successfully rolled out\n"),
        "{out}"
    );

    // `logs dc/NAME` reads the log subresource; the deployer's log of version 1 shows the
    // rollout.
    let run = s.berth(&["logs", "dc/web", "--version=1"]).await;
    let (code, body) = s.text(&format!("{path}/log?version=1")).await;
    assert_eq!((run.code, code), (0, 200), "{run:?}");
    assert_eq!(run.stdout, body);

    // Nothing to cancel or retry on a complete rollout.
    let run = s.berth(&["rollout", "cancel", "dc/web"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .starts_with("No rollout is in progress (latest rollout #1 complete ")
            && run.stdout.ends_with(" ago)\n"),
        "{run:?}"
    );
    fails(
        &s.berth(&["rollout", "retry", "dc/web"]).await,
        "error: rollout #1 is complete; only failed deployments can be retried.\nYou can \
         start a new deployment with 'oc rollout latest dc/web'.\n",
    );

    // A manual rollout; an instantiate that changes nothing is a no-op.
    ok(
        &s.berth(&["rollout", "latest", "dc/web"]).await,
        "deploymentconfig.apps.openshift.io/web rolled out\n",
    );
    reaches(&s, "web-2", "Complete").await;
    let rc2 = s.get(&format!("{RCS}/web-2")).await.1;
    assert_eq!(
        rc2["metadata"]["annotations"]["openshift.io/deployment.status-reason"],
        "manual change"
    );
    let req = json!({"kind": "DeploymentRequest", "apiVersion": "apps.openshift.io/v1",
        "name": "web", "latest": true, "force": false});
    let (code, _) = s.post(&format!("{path}/instantiate"), req).await;
    assert_eq!(code, 204);
    assert_eq!(s.get(&path).await.1["status"]["latestVersion"], 2);

    // A config change, then undo: version 4 has the template of version 2 (that of 1).
    let (code, _) = s
        .patch(
            &path,
            "application/json-patch+json",
            json!([{"op": "add", "path": "/spec/template/spec/containers/0/env",
                "value": [{"name": "TRY", "value": "ONCE"}]}]),
        )
        .await;
    assert_eq!(code, 200);
    reaches(&s, "web-3", "Complete").await;
    ok(
        &s.berth(&["rollout", "undo", "dc/web"]).await,
        "deploymentconfig.apps.openshift.io/web rolled back\n",
    );
    reaches(&s, "web-4", "Complete").await;
    let rc1 = s.get(&format!("{RCS}/web-1")).await.1;
    let rc4 = s.get(&format!("{RCS}/web-4")).await.1;
    let template = |rc: &Value| {
        let mut t = rc["spec"]["template"].clone();
        // The deployment's own labels differ by version.
        t["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("deployment");
        t["metadata"]["annotations"] = Value::Null;
        t
    };
    assert_eq!(template(&rc4), template(&rc1));

    let run = s.berth(&["rollout", "history", "dc/web"]).await;
    ok(
        &run,
        "deploymentconfig.apps.openshift.io/web\n\
         REVISION\tSTATUS\t\tCAUSE\n\
         1\t\tComplete\tconfig change\n\
         2\t\tComplete\tmanual change\n\
         3\t\tComplete\tconfig change\n\
         4\t\tComplete\tconfig change\n\n",
    );
    let run = s
        .berth(&["rollout", "history", "dc/web", "--revision=3"])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("Pod Template:"), "{run:?}");
    assert!(run.stdout.contains("TRY:"), "{run:?}");
    fails(
        &s.berth(&["rollout", "history", "dc/web", "--revision=9"])
            .await,
        "error: unable to find the specified revision\n",
    );

    // Cancel a rollout whose pods never get ready, then retry it.
    std::fs::remove_file(&ready).unwrap();
    ok(
        &s.berth(&["rollout", "latest", "dc/web"]).await,
        "deploymentconfig.apps.openshift.io/web rolled out\n",
    );
    reaches(&s, "web-5", "Running").await;
    ok(
        &s.berth(&["rollout", "cancel", "dc/web"]).await,
        "deploymentconfig.apps.openshift.io/web cancelling\n",
    );
    reaches(&s, "web-5", "Failed").await;
    let run = s.berth(&["rollout", "status", "dc/web"]).await;
    fails(
        &run,
        "error: rollout of replication controller \"web-5\" was cancelled\n",
    );
    let events = s
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DRolloutCancelled")
        .await
        .1;
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["message"] == "Rollout for \"default/web-5\" cancelled"),
        "{events}"
    );
    ok(
        &s.berth(&["rollout", "retry", "dc/web"]).await,
        "deploymentconfig.apps.openshift.io/web retried rollout #5\n",
    );
    std::fs::write(&ready, "").unwrap();
    reaches(&s, "web-5", "Complete").await;
    // The config's own status says so a moment after its deployment does.
    eventually(60, "dc/web says web-5 is available", || async {
        let dc = s.get(&format!("{DCS}/web")).await.1;
        let reason = dc["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing"))
            .map(|c| (c["reason"].clone(), c["message"].clone()));
        let done = reason.as_ref().is_some_and(|(r, m)| {
            r == "NewReplicationControllerAvailable" && m.as_str().unwrap_or("").contains("web-5")
        });
        done.then_some(()).ok_or(format!("{reason:?}"))
    })
    .await;
    let run = s
        .berth(&["rollout", "status", "dc/web", "--revision=5"])
        .await;
    ok(
        &run,
        "replication controller \"web-5\" successfully rolled out\n",
    );
    delete_all(&s, "web").await;
}

#[tokio::test]
async fn the_client_says_where_it_looked_when_no_cluster_answers() {
    let dir = tempfile::tempdir().unwrap();
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["rollout", "latest", "dc/x"])
        .env("KUBECONFIG", dir.path().join("missing"))
        .env("HOME", dir.path())
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: no server found in the kubeconfig"),
        "{err}"
    );
    assert!(err.contains("berth serve"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_legacy_deploy_verb_and_rollback_keep_ocs_texts() {
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    std::fs::write(&ready, "").unwrap();
    let path = format!("{DCS}/old");
    assert_eq!(s.post(DCS, gated("old", 8203, &ready)).await.0, 201);
    reaches(&s, "old-1", "Complete").await;

    let run = s.berth(&["deploy", "dc/old"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.starts_with("old deployment #1 deployed ")
            && run.stdout.ends_with(" ago - 1 pod\n"),
        "{run:?}"
    );
    let run = s.berth(&["deploy", "old", "--cancel"]).await;
    assert!(
        run.stdout
            .starts_with("No deployments are in progress (latest deployment #1 complete "),
        "{run:?}"
    );
    let run = s.berth(&["deploy", "dc/old", "--retry"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("error: rollout #1 is complete; only failed deployments can be retried."),
        "{run:?}"
    );
    ok(
        &s.berth(&["deploy", "dc/old", "--latest"]).await,
        "Started deployment #2\nUse 'oc logs -f dc/old' to track its progress.\n",
    );
    reaches(&s, "old-2", "Complete").await;

    // Rollback to the newest complete deployment before the latest, or to a version.
    ok(
        &s.berth(&["rollback", "dc/old"]).await,
        "deployment #3 rolled back to old-1\n",
    );
    reaches(&s, "old-3", "Complete").await;
    let run = s
        .berth(&["rollback", "dc/old", "--to-version=2", "--dry-run"])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("latestVersion: 4"), "{run:?}");
    let run = s.berth(&["rollback", "rc/old-2", "-o", "json"]).await;
    let dry: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(dry["status"]["latestVersion"], 4);
    assert_eq!(
        s.get(&path).await.1["status"]["latestVersion"],
        3,
        "a dry run saves nothing"
    );
    fails(
        &s.berth(&["rollback", "dc/old", "--to-version=9"]).await,
        "Error from server (Invalid): DeploymentConfigRollback.apps.openshift.io \"old\" is \
         invalid: name: Invalid value: \"old\": replicationcontrollers \"old-9\" not found\n",
    );

    // A deployment in progress: the status lines, a refused start, cancel and retry.
    std::fs::remove_file(&ready).unwrap();
    ok(
        &s.berth(&["deploy", "dc/old", "--latest"]).await,
        "Started deployment #4\nUse 'oc logs -f dc/old' to track its progress.\n",
    );
    reaches(&s, "old-4", "Running").await;
    fails(
        &s.berth(&["deploy", "dc/old", "--latest"]).await,
        "error: #4 is already in progress (Running).\nOptionally, you can cancel this \
         deployment using 'oc rollout cancel dc/old'.\n",
    );
    let run = s.berth(&["deploy", "dc/old"]).await;
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(
        lines[0].starts_with("old deployment #4 running for "),
        "{run:?}"
    );
    assert!(
        lines[1].starts_with("old deployment #3 deployed "),
        "{run:?}"
    );
    ok(
        &s.berth(&["deploy", "dc/old", "--cancel"]).await,
        "Cancelled deployment #4\n",
    );
    reaches(&s, "old-4", "Failed").await;
    ok(
        &s.berth(&["deploy", "dc/old", "--retry"]).await,
        "Retried #4\nUse 'oc logs -f dc/old' to track its progress.\n",
    );
    std::fs::write(&ready, "").unwrap();
    reaches(&s, "old-4", "Complete").await;

    // A paused config refuses them all.
    let (code, _) = s
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"paused": true}}),
        )
        .await;
    assert_eq!(code, 200);
    for (args, message) in [
        (
            &["deploy", "dc/old", "--latest"][..],
            "cannot deploy a paused deployment config",
        ),
        (
            &["deploy", "dc/old", "--cancel"][..],
            "cannot cancel a paused deployment config",
        ),
        (
            &["deploy", "dc/old", "--retry"][..],
            "cannot retry a paused deployment config",
        ),
        (
            &["rollback", "dc/old"][..],
            "cannot rollback a paused deployment config",
        ),
    ] {
        fails(&s.berth(args).await, &format!("error: {message}\n"));
    }
    delete_all(&s, "old").await;
}
