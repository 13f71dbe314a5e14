//! The deployer process (`berth deploy`) against a real server with the node agent: the
//! test creates the deployments (RCs) a DC controller would, runs the deployer as a real
//! process, and checks what it did to the RCs and pods and what it printed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth::client::watcher::{Event, Watcher};
use berth::client::{Client, ListParams};
use berth::registry::{Kind, catalog};
use berth::types::openshift as os;
use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const NS: &str = "default";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// A server whose deployments are the tests' own: the tests create the deployments a DC
/// controller would and run the deployer themselves.
async fn server() -> TestServer {
    TestServer::start_with(|c| {
        c.controllers.deployments = false;
        c.node = Some(crate::node::node_settings("deployer-node", |n| {
            n.agent.backoff_initial = Duration::from_secs(1);
            n.cgroups = false;
        }));
    })
    .await
}

/// A DC named `name` whose container `app` sleeps (its marker is `marker`).
fn dc(name: &str, replicas: i64, strategy: Value, marker: u32) -> Value {
    json!({
        "apiVersion": "apps.openshift.io/v1",
        "kind": "DeploymentConfig",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
        "spec": {
            "replicas": replicas,
            "selector": {"name": name},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "containers": [{
                        "name": "app", "image": "busybox",
                        "command": ["sleep", format!("{marker}")],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }],
                },
            },
        },
    })
}

/// The RC of version `version` of `dc` as the DC controller makes it (§9), with `replicas`
/// replicas, in `phase`; `desired` is set while the deployment is to run.
async fn deployment(
    s: &TestServer,
    dc: &Value,
    version: i64,
    phase: &str,
    replicas: i64,
    desired: Option<i64>,
) -> Value {
    let name = dc["metadata"]["name"].as_str().unwrap();
    let rc = os::deployment_name(name, version);
    let mut annotations = json!({
        os::DEPLOYMENT_CONFIG_ANNOTATION: name,
        os::DEPLOYMENT_ENCODED_CONFIG_ANNOTATION: dc.to_string(),
        os::DEPLOYMENT_PHASE_ANNOTATION: phase,
        os::DEPLOYMENT_VERSION_ANNOTATION: version.to_string(),
        os::DEPLOYMENT_REPLICAS_ANNOTATION: replicas.to_string(),
    });
    if let Some(d) = desired {
        annotations[os::DESIRED_REPLICAS_ANNOTATION] = json!(d.to_string());
    }
    let mut template = dc["spec"]["template"].clone();
    template["metadata"]["labels"]["deploymentconfig"] = json!(name);
    template["metadata"]["labels"]["deployment"] = json!(rc);
    template["metadata"]["annotations"] = json!({
        os::DEPLOYMENT_ANNOTATION: rc,
        os::DEPLOYMENT_CONFIG_ANNOTATION: name,
        os::DEPLOYMENT_VERSION_ANNOTATION: version.to_string(),
    });
    let body = json!({
        "metadata": {
            "name": rc,
            "labels": {os::DEPLOYMENT_CONFIG_LABEL: name},
            "annotations": annotations,
        },
        "spec": {
            "replicas": replicas,
            "selector": {"name": name, "deploymentconfig": name, "deployment": rc},
            "minReadySeconds": dc["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
            "template": template,
        },
    });
    let (code, made) = s.post(RCS, body).await;
    assert_eq!(code, 201, "{made}");
    made
}

async fn rc(s: &TestServer, name: &str) -> Value {
    let (code, rc) = s.get(&format!("{RCS}/{name}")).await;
    assert_eq!(code, 200, "{rc}");
    rc
}

/// Waits until all `n` replicas of RC `name` are available.
async fn available(s: &TestServer, name: &str, n: i64) {
    eventually(60, &format!("{name} has {n} available pods"), || async {
        let rc = rc(s, name).await;
        if rc["status"]["availableReplicas"].as_i64().unwrap_or(0) == n
            && rc["status"]["replicas"] == n
        {
            Ok(())
        } else {
            Err(rc["status"].to_string())
        }
    })
    .await;
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `berth deploy` for `rc` with `args` until it exits.
async fn deploy(s: &TestServer, rc: &str, args: &[&str]) -> Run {
    let ca = s.dir.path().join("deployer-ca.crt");
    std::fs::write(&ca, &s.ca_pem).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("deploy")
            .args(["--server", &s.url, &format!("--token={}", s.token)])
            .arg("--ca")
            .arg(&ca)
            .args(["--namespace", NS, "--deployment", rc])
            .args(args)
            .env("BERTH_LOG", "warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the deployer finishes")
    .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!(
        "deploy {rc} {args:?} → {}\n{}{}",
        run.code, run.stdout, run.stderr
    );
    run
}

fn assert_lines(run: &Run, lines: &[&str]) {
    let mut rest = run.stdout.as_str();
    for line in lines {
        let at = rest
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} not in order in:\n{}", run.stdout));
        rest = &rest[at + line.len()..];
    }
}

/// Scales every RC of the namespace to zero and deletes all pods, so no process outlives
/// the test.
async fn cleanup(s: &TestServer) {
    let (_, list) = s.get(RCS).await;
    for rc in list["items"].as_array().unwrap() {
        let name = rc["metadata"]["name"].as_str().unwrap();
        s.patch(
            &format!("{RCS}/{name}"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 0}}),
        )
        .await;
    }
    eventually(60, "all pods are gone", || async {
        let (_, list) = s.get(PODS).await;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        for p in &items {
            if p["metadata"]["deletionTimestamp"].is_null() {
                let name = p["metadata"]["name"].as_str().unwrap();
                s.delete(&format!("{PODS}/{name}")).await;
            }
        }
        if items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} pods left", items.len()))
        }
    })
    .await;
}

/// Watches the pods of `app` during a rollout and calls `check` with the pods alive now
/// (not being deleted, not finished) after every change; collects what `check` objects to.
fn monitor(
    s: &TestServer,
    app: &str,
    check: impl Fn(&[&Value]) -> Option<String> + Send + 'static,
) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let client = Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let selection = ListParams {
        label_selector: Some(format!("name={app}")),
        field_selector: None,
    };
    let mut w = Watcher::new(client, catalog::of(Kind::Pod), Some(NS), selection);
    let problems = Arc::new(Mutex::new(Vec::new()));
    let seen = problems.clone();
    let task = tokio::spawn(async move {
        let mut pods: BTreeMap<String, Value> = BTreeMap::new();
        loop {
            match w.next().await {
                Event::Restarted(items) => {
                    pods = items
                        .into_iter()
                        .map(|p| (p["metadata"]["name"].as_str().unwrap().to_string(), p))
                        .collect();
                }
                Event::Applied(p) => {
                    pods.insert(p["metadata"]["name"].as_str().unwrap().to_string(), p);
                }
                Event::Deleted(p) => {
                    pods.remove(p["metadata"]["name"].as_str().unwrap());
                }
            }
            let alive: Vec<&Value> = pods
                .values()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .collect();
            if let Some(problem) = check(&alive) {
                seen.lock().unwrap().push(problem);
            }
        }
    });
    (problems, task)
}

fn of_deployment<'a>(pods: &[&'a Value], rc: &str) -> Vec<&'a Value> {
    pods.iter()
        .copied()
        .filter(|p| p["metadata"]["labels"]["deployment"] == rc)
        .collect()
}

fn is_ready(p: &Value) -> bool {
    berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
}

#[tokio::test]
async fn recreate_scales_the_old_deployment_down_then_the_new_one_up() {
    let s = server().await;
    let config = dc(
        "web",
        2,
        json!({"type": "Recreate", "recreateParams": {"timeoutSeconds": 60}}),
        9301,
    );
    // A failed older deployment still running, the last complete one, the new one.
    deployment(&s, &config, 1, "Failed", 1, Some(1)).await;
    deployment(&s, &config, 2, "Complete", 2, None).await;
    available(&s, "web-2", 2).await;
    deployment(&s, &config, 3, "Running", 0, Some(2)).await;
    let older = deploy(&s, "web-1", &[]).await;
    assert_eq!(older.code, 1, "{}{}", older.stdout, older.stderr);
    assert!(
        older
            .stderr
            .contains("error: deployment web-1 is older than web-2"),
        "{}",
        older.stderr
    );
    // A warning about the new deployment, to be passed on to the DC.
    let (code, ev) = s
        .post(
            "/api/v1/namespaces/default/events",
            json!({
                "metadata": {"name": "web-3.warning"},
                "involvedObject": {"kind": "ReplicationController", "namespace": NS,
                                   "name": "web-3", "apiVersion": "v1"},
                "type": "Warning", "reason": "SomethingOdd", "message": "looks odd",
                "source": {"component": "test"},
            }),
        )
        .await;
    assert_eq!(code, 201, "{ev}");
    // New pods only once no old pod is left.
    let (problems, watch) = monitor(&s, "web", |alive| {
        let old = [of_deployment(alive, "web-1"), of_deployment(alive, "web-2")].concat();
        let new = of_deployment(alive, "web-3");
        (!old.is_empty() && !new.is_empty())
            .then(|| format!("{} old and {} new pods at once", old.len(), new.len()))
    });

    let run = deploy(&s, "web-3", &[]).await;
    watch.abort();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> Scaled older deployment web-1 down\n",
            "--> Scaling web-2 down to zero\n",
            "--> Scaling web-3 to 1 before performing acceptance check\n",
            "--> Scaling web-3 to 2\n",
            "-->  SomethingOdd: web-3 looks odd\n",
            "--> Success\n",
        ],
    );
    assert_eq!(problems.lock().unwrap().as_slice(), &[] as &[String]);
    assert_eq!(rc(&s, "web-1").await["spec"]["replicas"], 0);
    assert_eq!(rc(&s, "web-2").await["spec"]["replicas"], 0);
    let new = rc(&s, "web-3").await;
    assert_eq!(new["spec"]["replicas"], 2);
    assert_eq!(new["status"]["availableReplicas"], 2);
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DDeploymentConfig")
        .await;
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "SomethingOdd" && e["involvedObject"]["name"] == "web"),
        "{events}"
    );
    cleanup(&s).await;
}

#[tokio::test]
async fn rolling_keeps_within_surge_and_availability() {
    let s = server().await;
    // desired 4 with 25%/25%: at most 5 pods, at least 3 ready.
    let config = dc(
        "roll",
        4,
        json!({"type": "Rolling", "rollingParams": {
            "updatePeriodSeconds": 1, "intervalSeconds": 1, "timeoutSeconds": 60,
            "maxSurge": "25%", "maxUnavailable": "25%",
        }}),
        9302,
    );
    // New pods become ready a little after they start, and available a second later.
    let mut config = config;
    config["spec"]["minReadySeconds"] = json!(1);
    config["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] =
        json!({"exec": {"command": ["true"]}, "initialDelaySeconds": 1, "periodSeconds": 1});
    deployment(&s, &config, 1, "Complete", 4, None).await;
    available(&s, "roll-1", 4).await;
    deployment(&s, &config, 2, "Running", 0, Some(4)).await;
    let (problems, watch) = monitor(&s, "roll", |alive| {
        let ready = alive.iter().filter(|p| is_ready(p)).count();
        if alive.len() > 5 {
            Some(format!("{} pods alive", alive.len()))
        } else if ready < 3 {
            Some(format!("only {ready} pods ready"))
        } else {
            None
        }
    });

    let started = std::time::Instant::now();
    let run = deploy(&s, "roll-2", &[]).await;
    let took = started.elapsed();
    watch.abort();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> Scaling up roll-2 from 0 to 4, scaling down roll-1 from 4 to 0 (keep 3 pods \
             available, don't exceed 5 pods)\n",
            "    Scaling roll-2 up to 1\n",
            "    Scaling roll-1 down to 3\n",
            "--> Success\n",
        ],
    );
    assert!(
        run.stdout.contains("    Scaling roll-1 down to 0\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("    Scaling roll-2 up to 4\n"),
        "{}",
        run.stdout
    );
    assert_eq!(problems.lock().unwrap().as_slice(), &[] as &[String]);
    let old = rc(&s, "roll-1").await;
    assert_eq!(old["spec"]["replicas"], 0);
    assert_eq!(
        old["metadata"]["annotations"][os::ORIGINAL_REPLICAS_ANNOTATION],
        "4"
    );
    let new = rc(&s, "roll-2").await;
    assert_eq!(new["spec"]["replicas"], 4);
    assert_eq!(new["status"]["replicas"], 4);
    let annotations = &new["metadata"]["annotations"];
    assert!(
        annotations[os::DESIRED_REPLICAS_ANNOTATION].is_null(),
        "{annotations}"
    );
    assert!(
        annotations[os::UPDATE_SOURCE_ID_ANNOTATION].is_null(),
        "{annotations}"
    );
    // The update period is an upper bound: steps follow readiness, not the clock alone.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    cleanup(&s).await;
}

fn with_pre_hook(policy: &str, script: &str) -> Value {
    json!({"type": "Recreate", "recreateParams": {"timeoutSeconds": 60, "pre": {
        "failurePolicy": policy,
        "execNewPod": {"containerName": "app", "command": ["sh", "-c", script],
                       "env": [{"name": "WHO", "value": "hook"}], "volumes": ["data"]},
    }}})
}

#[tokio::test]
async fn a_failing_pre_hook_with_abort_fails_the_deployment() {
    let s = server().await;
    let config = dc(
        "broken",
        1,
        with_pre_hook(
            "Abort",
            "echo $WHO says no for $OPENSHIFT_DEPLOYMENT_NAME; exit 3",
        ),
        9303,
    );
    deployment(&s, &config, 1, "Running", 0, Some(1)).await;
    let run = deploy(&s, "broken-1", &[]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_lines(
        &run,
        &[
            "--> pre: Running hook pod ...\n",
            "hook says no for broken-1\n",
            "--> pre: Failed\n",
        ],
    );
    assert!(!run.stdout.contains("--> Success"), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("error: pre hook failed: the pre hook failed: ")
            && run
                .stderr
                .contains(", aborting rollout of default/broken-1"),
        "{}",
        run.stderr
    );
    // The hook pod as §15.2 makes it; the deployment never scaled up.
    let (code, hook) = s.get(&format!("{PODS}/broken-1-hook-pre")).await;
    assert_eq!(code, 200);
    assert_eq!(hook["status"]["phase"], "Failed");
    assert_eq!(hook["spec"]["restartPolicy"], "Never");
    assert_eq!(
        hook["metadata"]["labels"][os::DEPLOYER_POD_FOR_LABEL],
        "broken-1"
    );
    assert_eq!(
        hook["metadata"]["labels"][os::DEPLOYER_POD_TYPE_LABEL],
        "hook-pre"
    );
    assert_eq!(
        hook["metadata"]["annotations"][os::DEPLOYMENT_ANNOTATION],
        "broken-1"
    );
    assert_eq!(hook["spec"]["containers"][0]["name"], "lifecycle");
    assert_eq!(rc(&s, "broken-1").await["spec"]["replicas"], 0);
    // The hook's failure is recorded on the DC.
    let (_, events) = s.get("/api/v1/namespaces/default/events").await;
    let failed = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == "Failed" && e["involvedObject"]["kind"] == "DeploymentConfig");
    let failed = failed.expect("a Failed event on the DC");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .starts_with("The pre-hook failed: "),
        "{failed}"
    );
    cleanup(&s).await;
}

#[tokio::test]
async fn an_ignored_hook_failure_lets_the_deployment_go_on() {
    let s = server().await;
    let config = dc(
        "lenient",
        1,
        with_pre_hook("Ignore", "echo ignored; exit 1"),
        9304,
    );
    deployment(&s, &config, 1, "Running", 0, Some(1)).await;
    let run = deploy(&s, "lenient-1", &[]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> pre: Running hook pod ...\n",
            "ignored\n",
            "--> pre: Failed\n",
            "--> Scaling lenient-1 to 1\n",
            "--> Success\n",
        ],
    );
    assert_eq!(rc(&s, "lenient-1").await["status"]["availableReplicas"], 1);
    cleanup(&s).await;
}

#[tokio::test]
async fn a_retry_hook_is_restarted_until_it_succeeds() {
    let s = server().await;
    // Fails the first time, succeeds once its volume remembers the try.
    let script = "if [ -e /data/tried ]; then echo second try; sleep 1; exit 0; fi; \
                  touch /data/tried; echo first try; exit 1";
    let config = dc("retry", 1, with_pre_hook("Retry", script), 9305);
    deployment(&s, &config, 1, "Running", 0, Some(1)).await;
    let run = deploy(&s, "retry-1", &[]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> pre: Running hook pod ...\n",
            "--> pre: Retrying hook pod (retry #1)\n",
            "second try\n",
            "--> pre: Success\n",
            "--> Scaling retry-1 to 1\n",
            "--> Success\n",
        ],
    );
    let (_, hook) = s.get(&format!("{PODS}/retry-1-hook-pre")).await;
    assert_eq!(hook["spec"]["restartPolicy"], "OnFailure");
    assert_eq!(hook["status"]["phase"], "Succeeded");
    assert!(
        hook["status"]["containerStatuses"][0]["restartCount"]
            .as_i64()
            .unwrap()
            >= 1
    );
    cleanup(&s).await;
}

#[tokio::test]
async fn until_stops_where_asked_and_a_second_run_finishes() {
    let s = server().await;
    let config = dc(
        "staged",
        2,
        json!({"type": "Rolling", "rollingParams": {"timeoutSeconds": 60, "pre": {
            "failurePolicy": "Abort",
            "execNewPod": {"containerName": "app", "command": ["echo", "pre hook ran"]},
        }}}),
        9306,
    );
    deployment(&s, &config, 1, "Running", 0, Some(2)).await;

    // Missing names are refused before anything happens.
    let bare = deploy(&s, "", &[]).await;
    assert_eq!(bare.code, 1, "{}", bare.stderr);
    assert!(
        bare.stderr
            .contains("error: --deployment or OPENSHIFT_DEPLOYMENT_NAME is required"),
        "{}",
        bare.stderr
    );

    // As `openshift-deploy`, configured from the environment.
    let bin = tempfile::tempdir().unwrap();
    let link = bin.path().join("openshift-deploy");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_berth"), &link).unwrap();
    let ca = s.dir.path().join("deployer-ca.crt");
    std::fs::write(&ca, &s.ca_pem).unwrap();
    let out = tokio::process::Command::new(&link)
        .args(["--until=start"])
        .env("OPENSHIFT_DEPLOYMENT_NAME", "staged-1")
        .env("OPENSHIFT_DEPLOYMENT_NAMESPACE", NS)
        .env("OPENSHIFT_MASTER", &s.url)
        .env("BEARER_TOKEN", &s.token)
        .env("OPENSHIFT_CA_FILE", &ca)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "--> Ready to start deployment\n"
    );

    let run = deploy(&s, "staged-1", &["--until=pre"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> pre: Running hook pod ...\n",
            "pre hook ran\n",
            "--> pre: Success\n",
            "--> pre hook succeeded\n",
        ],
    );
    assert_eq!(rc(&s, "staged-1").await["spec"]["replicas"], 0);

    let run = deploy(&s, "staged-1", &["--until=50%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> pre: Hook pod already succeeded\n",
            "--> Scaling staged-1 to 2\n",
            "--> Reached 50%\n",
        ],
    );
    assert!(!run.stdout.contains("Running hook pod"), "{}", run.stdout);
    assert!(!run.stdout.contains("--> Success"), "{}", run.stdout);
    assert_eq!(rc(&s, "staged-1").await["status"]["availableReplicas"], 2);

    let run = deploy(&s, "staged-1", &[]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &["--> pre: Hook pod already succeeded\n", "--> Success\n"],
    );

    // A second version rolls; `--until=0%` stops before the rollout starts.
    s.patch(
        &format!("{RCS}/staged-1"),
        "application/merge-patch+json",
        json!({"metadata": {"annotations": {
            os::DEPLOYMENT_PHASE_ANNOTATION: "Complete",
            os::DESIRED_REPLICAS_ANNOTATION: null,
        }}}),
    )
    .await;
    let done = deploy(&s, "staged-1", &[]).await;
    assert_eq!(done.code, 1);
    assert!(
        done.stderr
            .contains("error: deployment staged-1 has already run to completion"),
        "{}",
        done.stderr
    );
    deployment(&s, &config, 2, "Running", 0, Some(2)).await;
    let run = deploy(&s, "staged-2", &["--until=0%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &["--> pre: Success\n", "--> Reached 0% (before rollout)\n"],
    );
    let run = deploy(&s, "staged-2", &["--until=50%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> Scaling up staged-2 from 0 to 2",
            "--> Reached 50% (currently ",
        ],
    );
    assert_eq!(
        rc(&s, "staged-2").await["metadata"]["annotations"][os::UPDATE_SOURCE_ID_ANNOTATION],
        format!(
            "staged-1:{}",
            rc(&s, "staged-1").await["metadata"]["uid"]
                .as_str()
                .unwrap()
        )
    );
    let run = deploy(&s, "staged-2", &[]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(&run, &["--> Success\n"]);
    assert_eq!(rc(&s, "staged-1").await["spec"]["replicas"], 0);
    assert_eq!(rc(&s, "staged-2").await["spec"]["replicas"], 2);
    cleanup(&s).await;
}

#[tokio::test]
async fn pods_that_never_become_ready_fail_the_deployment() {
    let s = server().await;
    let ready = dc(
        "stuck",
        2,
        json!({"type": "Rolling", "rollingParams": {"timeoutSeconds": 8, "maxSurge": 1,
                                                     "maxUnavailable": 0}}),
        9307,
    );
    let mut never = ready.clone();
    never["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] =
        json!({"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1});

    // The first rollout waits for availability, then gives up.
    deployment(&s, &never, 1, "Running", 0, Some(2)).await;
    let run = deploy(&s, "stuck-1", &[]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_lines(&run, &["--> Scaling stuck-1 to 2\n"]);
    assert!(
        run.stderr.contains(
            "error: update acceptor rejected stuck-1: pods for rc 'default/stuck-1' took \
             longer than 8 seconds to become available"
        ),
        "{}",
        run.stderr
    );

    // A rolling update towards pods that never get ready makes no progress past the
    // surge, and times out; the old pods stay.
    s.patch(
        &format!("{RCS}/stuck-1"),
        "application/merge-patch+json",
        json!({"metadata": {"annotations": {os::DEPLOYMENT_PHASE_ANNOTATION: "Failed"}},
               "spec": {"replicas": 0}}),
    )
    .await;
    deployment(&s, &ready, 2, "Complete", 2, None).await;
    available(&s, "stuck-2", 2).await;
    deployment(&s, &never, 3, "Running", 0, Some(2)).await;
    let run = deploy(&s, "stuck-3", &[]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_lines(
        &run,
        &[
            "--> Scaling up stuck-3 from 0 to 2, scaling down stuck-2 from 2 to 0 (keep 2 pods \
             available, don't exceed 3 pods)\n",
            "    Scaling stuck-3 up to 1\n",
        ],
    );
    assert!(
        !run.stdout.contains("Scaling stuck-2 down"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("error: timed out waiting for any update progress to be made"),
        "{}",
        run.stderr
    );
    assert_eq!(rc(&s, "stuck-2").await["spec"]["replicas"], 2);
    cleanup(&s).await;
}

/// The deployer pod of §11.5 for `rc` running `command` (the deployer itself when
/// empty), with its credentials from the `deployer` service account's token mount.
fn deployer_pod(s: &TestServer, rc: &str, command: &[&str], path: &std::path::Path) -> Value {
    let command: Vec<String> = if command.is_empty() {
        vec![env!("CARGO_BIN_EXE_berth").into(), "deploy".into()]
    } else {
        command.iter().map(|c| c.to_string()).collect()
    };
    let search = format!(
        "{}:{}",
        path.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    json!({
        "metadata": {
            "name": os::deployer_pod_name(rc),
            "labels": {os::DEPLOYER_POD_FOR_LABEL: rc},
            "annotations": {os::DEPLOYMENT_ANNOTATION: rc},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "serviceAccountName": "deployer",
            "containers": [{
                "name": "deployment",
                "image": "berth/deployer",
                "command": command,
                "env": [
                    {"name": "PATH", "value": search},
                    {"name": "OPENSHIFT_MASTER", "value": s.url},
                    {"name": "BERTH_LOG", "value": "warn"},
                    {"name": os::DEPLOYMENT_NAME_ENV, "value": rc},
                    {"name": os::DEPLOYMENT_NAMESPACE_ENV, "value": NS},
                ],
            }],
        },
    })
}

#[tokio::test]
async fn a_custom_strategy_runs_the_deployer_in_stages_inside_its_pod() {
    // Every namespace has a `deployer` service account (its token is waited for below).
    let s = server().await;
    // The deployer's other name, on the PATH of the deployer pod.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_berth"),
        bin.path().join("openshift-deploy"),
    )
    .unwrap();
    let config = dc(
        "custom-deployment",
        2,
        json!({
            "type": "Rolling",
            "rollingParams": {"timeoutSeconds": 60, "pre": {
                "failurePolicy": "Abort",
                "execNewPod": {"containerName": "app",
                               "command": ["/bin/echo", "test pre hook executed"]},
            }},
            "customParams": {"command": ["/bin/sh", "-c",
                "set -e; openshift-deploy --until=50%; echo Halfway; openshift-deploy; \
                 echo Finished"]},
        }),
        9308,
    );
    deployment(&s, &config, 1, "Running", 0, Some(2)).await;
    let script = config["spec"]["strategy"]["customParams"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect::<Vec<_>>();
    // The service account must exist before the pod can get a token of it.
    eventually(30, "the deployer account", || async {
        match s
            .get("/api/v1/namespaces/default/serviceaccounts/deployer")
            .await
        {
            (200, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
    let (code, made) = s
        .post(
            PODS,
            deployer_pod(&s, "custom-deployment-1", &script, bin.path()),
        )
        .await;
    assert_eq!(code, 201, "{made}");
    let pod = eventually(120, "the deployer pod finishes", || async {
        let (_, p) = s.get(&format!("{PODS}/custom-deployment-1-deploy")).await;
        match p["status"]["phase"].as_str() {
            Some("Succeeded" | "Failed") => Ok(p),
            _ => Err(p["status"].to_string()),
        }
    })
    .await;
    let (_, log) = s
        .get(&format!("{PODS}/custom-deployment-1-deploy/log"))
        .await;
    let log = log.as_str().unwrap_or_default().to_string();
    assert_eq!(pod["status"]["phase"], "Succeeded", "{log}");
    let run = Run {
        code: 0,
        stdout: log,
        stderr: String::new(),
    };
    assert_lines(
        &run,
        &[
            "--> pre: Running hook pod ...\n",
            "test pre hook executed\n",
            "--> pre: Success\n",
            "--> Scaling custom-deployment-1 to 2\n",
            "--> Reached 50%\n",
            "Halfway\n",
            "--> pre: Hook pod already succeeded\n",
            "--> Success\n",
            "Finished\n",
        ],
    );
    let rc = rc(&s, "custom-deployment-1").await;
    assert_eq!(rc["status"]["availableReplicas"], 2);
    cleanup(&s).await;
}

fn echo_hook(text: &str) -> Value {
    json!({"failurePolicy": "Abort",
           "execNewPod": {"containerName": "app", "command": ["echo", text]}})
}

#[tokio::test]
async fn recreate_runs_mid_and_post_hooks_in_their_places() {
    let s = server().await;
    let config = dc(
        "phased",
        1,
        json!({"type": "Recreate", "recreateParams": {
            "timeoutSeconds": 60,
            "mid": echo_hook("mid hook says hi"),
            "post": echo_hook("post hook says bye"),
        }}),
        9309,
    );
    deployment(&s, &config, 1, "Complete", 1, None).await;
    available(&s, "phased-1", 1).await;
    deployment(&s, &config, 2, "Running", 0, Some(1)).await;

    let run = deploy(&s, "phased-2", &["--until=0%"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> Scaling phased-1 down to zero\n",
            "--> Reached 0% (no running pods)\n",
        ],
    );
    assert!(!run.stdout.contains("mid"), "{}", run.stdout);
    assert_eq!(rc(&s, "phased-1").await["status"]["replicas"], 0);

    let run = deploy(&s, "phased-2", &["--until=mid"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> mid: Running hook pod ...\n",
            "mid hook says hi\n",
            "--> mid: Success\n",
            "--> mid hook succeeded\n",
        ],
    );
    assert_eq!(rc(&s, "phased-2").await["spec"]["replicas"], 0);

    let run = deploy(&s, "phased-2", &[]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_lines(
        &run,
        &[
            "--> mid: Hook pod already succeeded\n",
            "--> Scaling phased-2 to 1 before performing acceptance check\n",
            "--> post: Running hook pod ...\n",
            "post hook says bye\n",
            "--> post: Success\n",
            "--> Success\n",
        ],
    );
    let (_, post) = s.get(&format!("{PODS}/phased-2-hook-post")).await;
    assert_eq!(
        post["metadata"]["labels"][os::DEPLOYER_POD_TYPE_LABEL],
        "hook-post"
    );
    // Hook outcomes are events of the DC.
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dphased")
        .await;
    let messages: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    for want in [
        "Running mid-hook (\"echo mid hook says hi\") for rc default/phased-2",
        "The mid-hook for rc default/phased-2 completed successfully",
        "The post-hook for rc default/phased-2 completed successfully",
    ] {
        assert!(messages.contains(&want), "{want:?} not in {messages:?}");
    }
    cleanup(&s).await;
}

#[tokio::test]
async fn a_hook_pod_deleted_under_the_deployer_fails_it() {
    let s = server().await;
    let config = dc(
        "vanishing",
        1,
        json!({"type": "Recreate", "recreateParams": {"pre": {
            "failurePolicy": "Abort",
            "execNewPod": {"containerName": "app", "command": ["sleep", "9310"]},
        }}}),
        9311,
    );
    deployment(&s, &config, 1, "Running", 0, Some(1)).await;
    let run = {
        let deployer = deploy(&s, "vanishing-1", &[]);
        let delete = async {
            eventually(60, "the hook pod runs", || async {
                let (_, p) = s.get(&format!("{PODS}/vanishing-1-hook-pre")).await;
                if p["status"]["phase"] == "Running" {
                    Ok(())
                } else {
                    Err(p["status"].to_string())
                }
            })
            .await;
            let (code, _) = s.delete(&format!("{PODS}/vanishing-1-hook-pre")).await;
            assert_eq!(code, 200);
        };
        tokio::join!(deployer, delete).0
    };
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_lines(
        &run,
        &["--> pre: pod/vanishing-1-hook-pre[default] unexpectedly deleted\n"],
    );
    assert!(
        run.stderr.contains(
            "error: pre hook failed: the pre hook failed: pre: pod/vanishing-1-hook-pre[default] \
             unexpectedly deleted, aborting rollout of default/vanishing-1"
        ),
        "{}",
        run.stderr
    );

    // tagImages hooks need image streams, which this cluster does not have.
    let tagging = dc(
        "tagging",
        1,
        json!({"type": "Recreate", "recreateParams": {"pre": {
            "failurePolicy": "Abort",
            "tagImages": [{"containerName": "app",
                           "to": {"kind": "ImageStreamTag", "name": "app:latest"}}],
        }}}),
        9312,
    );
    deployment(&s, &tagging, 1, "Running", 0, Some(1)).await;
    let run = deploy(&s, "tagging-1", &[]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("not supported"), "{}", run.stderr);
    cleanup(&s).await;
}
