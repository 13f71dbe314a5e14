//! Lifecycle hooks: execNewPod hook pods (created from a template container, watched to
//! the end, their logs streamed into the deployer's output) with the Abort, Retry and
//! Ignore failure policies. tagImages needs image streams, which this cluster lacks.

use std::io::Write;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::{Deployer, by_name, name_of, pods, say};
use crate::client::watcher::{Event as WatchEvent, Watcher};
use crate::types::openshift::{self as os, ExecNewPodHook, LifecycleHook};

/// How long to wait for the rest of a finished hook container's log.
const LOG_DRAIN: Duration = Duration::from_secs(10);

/// Runs hook `label` of deployment `rc`, applying its failure policy.
pub(super) async fn run(
    d: &Deployer,
    hook: &LifecycleHook,
    rc: &Value,
    label: &str,
) -> super::Result<()> {
    let ns = &d.ns;
    let rc_name = name_of(rc);
    let dc = d.config_ref();
    let outcome = match &hook.exec_new_pod {
        Some(exec) => {
            let message = format!(
                "Running {label}-hook (\"{}\") for rc {ns}/{rc_name}",
                exec.command.join(" ")
            );
            d.recorder.normal(&dc, "Started", &message).await;
            exec_new_pod(d, hook, exec, rc, label).await
        }
        None if !hook.tag_images.is_empty() => Err(super::fail!(
            "tagImages hooks are not supported: this cluster has no image streams"
        )),
        None => Err(super::fail!("the hook has no action")),
    };
    match outcome {
        Ok(()) => {
            let message = format!("The {label}-hook for rc {ns}/{rc_name} completed successfully");
            d.recorder.normal(&dc, "Completed", &message).await;
            Ok(())
        }
        Err(e) if hook.failure_policy == "Ignore" => {
            let message = format!(
                "The {label}-hook failed: {e:#} (ignore), rollout of {ns}/{rc_name} will continue"
            );
            d.recorder.warning(&dc, "Failed", &message).await;
            Ok(())
        }
        Err(e) => {
            let message =
                format!("The {label}-hook failed: {e:#}, aborting rollout of {ns}/{rc_name}");
            d.recorder.warning(&dc, "Failed", &message).await;
            Err(super::fail!(
                "the {label} hook failed: {e:#}, aborting rollout of {ns}/{rc_name}"
            ))
        }
    }
}

/// Merges env lists by name: entries of `over` replace those of `base`.
fn merge_env(base: &[Value], over: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = base.to_vec();
    for e in over {
        match out.iter_mut().find(|b| b["name"] == e["name"]) {
            Some(b) => *b = e.clone(),
            None => out.push(e.clone()),
        }
    }
    out
}

/// Adds `extra` entries to `map` without replacing existing keys.
fn add_missing(map: &mut Map<String, Value>, extra: &std::collections::BTreeMap<String, String>) {
    for (k, v) in extra {
        map.entry(k.clone()).or_insert_with(|| json!(v));
    }
}

/// The hook pod of §15.2 for deployment `rc`.
pub(crate) fn hook_pod(
    d_ns: &str,
    hook: &LifecycleHook,
    exec: &ExecNewPodHook,
    rc: &Value,
    label: &str,
    strategy: &os::DeploymentStrategy,
    deadline_seconds: i64,
) -> super::Result<Value> {
    let rc_name = name_of(rc);
    let template = &rc["spec"]["template"];
    let base = template["spec"]["containers"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["name"] == exec.container_name.as_str())
        })
        .ok_or_else(|| {
            super::fail!(
                "no container named '{}' found in rc template",
                exec.container_name
            )
        })?;
    let volumes: Vec<Value> = template["spec"]["volumes"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| {
                    v["name"]
                        .as_str()
                        .is_some_and(|n| exec.volumes.iter().any(|w| w == n))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mounts: Vec<Value> = base["volumeMounts"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter(|m| volumes.iter().any(|v| v["name"] == m["name"]))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let hook_env: Vec<Value> = exec
        .env
        .iter()
        .map(|e| serde_json::to_value(e).expect("EnvVar serializes"))
        .collect();
    let mut env = merge_env(
        base["env"].as_array().map(Vec::as_slice).unwrap_or(&[]),
        &hook_env,
    );
    env.push(json!({"name": os::DEPLOYMENT_NAME_ENV, "value": rc_name}));
    env.push(json!({"name": os::DEPLOYMENT_NAMESPACE_ENV, "value": d_ns}));

    let mut container = json!({"name": "lifecycle", "command": exec.command, "env": env});
    for key in [
        "image",
        "imagePullPolicy",
        "workingDir",
        "resources",
        "securityContext",
    ] {
        if !base[key].is_null() {
            container[key] = base[key].clone();
        }
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
    }
    let restart = if hook.failure_policy == "Retry" {
        "OnFailure"
    } else {
        "Never"
    };
    let mut spec = json!({
        "containers": [container],
        "restartPolicy": restart,
        "activeDeadlineSeconds": deadline_seconds.max(1),
        "terminationGracePeriodSeconds": 10,
    });
    if !volumes.is_empty() {
        spec["volumes"] = json!(volumes);
    }
    for key in ["nodeSelector", "imagePullSecrets", "securityContext"] {
        if !template["spec"][key].is_null() {
            spec[key] = template["spec"][key].clone();
        }
    }
    let mut labels = Map::new();
    labels.insert(os::DEPLOYER_POD_FOR_LABEL.into(), json!(rc_name));
    labels.insert(
        os::DEPLOYER_POD_TYPE_LABEL.into(),
        json!(format!("hook-{label}")),
    );
    add_missing(&mut labels, &strategy.labels);
    let mut annotations = Map::new();
    annotations.insert(os::DEPLOYMENT_ANNOTATION.into(), json!(rc_name));
    add_missing(&mut annotations, &strategy.annotations);
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": os::hook_pod_name(rc_name, label),
            "namespace": d_ns,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }))
}

/// Streams the log of the hook container into stdout until it ends.
fn stream_logs(d: &Deployer, pod: &str, follow: bool) -> JoinHandle<()> {
    let client = d.client.clone();
    let (ns, pod) = (d.ns.clone(), pod.to_string());
    tokio::spawn(async move {
        let mut stream = match client.logs(&ns, &pod, Some("lifecycle"), follow).await {
            Ok(s) => s,
            Err(e) => {
                say(format_args!(
                    "warning: Unable to retrieve hook logs from {pod}: {e}"
                ));
                return;
            }
        };
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(&bytes);
                    let _ = out.flush();
                }
                Err(e) => {
                    say(format_args!(
                        "warning: Unable to read all logs from {pod}, continuing: {e}"
                    ));
                    return;
                }
            }
        }
    })
}

async fn drain(task: Option<JoinHandle<()>>) {
    if let Some(mut t) = task
        && tokio::time::timeout(LOG_DRAIN, &mut t).await.is_err()
    {
        t.abort();
    }
}

/// Creates (or finds) the hook pod and follows it to its end.
async fn exec_new_pod(
    d: &Deployer,
    hook: &LifecycleHook,
    exec: &ExecNewPodHook,
    rc: &Value,
    label: &str,
) -> super::Result<()> {
    let ns = d.ns.clone();
    let strategy = &d.config.spec.strategy;
    let limit = strategy
        .active_deadline_seconds
        .unwrap_or(os::MAX_DEPLOYMENT_DURATION_SECONDS);
    let elapsed = jiff::Timestamp::now().duration_since(d.started).as_secs();
    let pod = hook_pod(&ns, hook, exec, rc, label, strategy, limit - elapsed)?;
    let name = name_of(&pod).to_string();
    let created = match d.client.create(pods(), Some(&ns), &pod).await {
        Ok(_) => {
            say(format_args!("--> {label}: Running hook pod ..."));
            true
        }
        Err(e) if e.is_already_exists() => false,
        Err(e) => {
            return Err(super::fail!(
                "couldn't create lifecycle pod for {ns}/{}: {e}",
                name_of(rc)
            ));
        }
    };
    let retrying = hook.failure_policy == "Retry";
    let mut watcher = Watcher::new(d.client.clone(), pods(), Some(&ns), by_name(&name));
    let mut seen_running = false;
    let mut restarts = 0;
    let mut logs: Option<JoinHandle<()>> = None;
    let mut logs_read = false;
    // Whether the pod was there when first listed (it must be).
    let mut listed = false;
    let last = loop {
        let pod = match watcher.next().await {
            WatchEvent::Restarted(items) => match items.into_iter().next() {
                Some(p) => {
                    listed = true;
                    p
                }
                None if !listed => {
                    return Err(super::fail!("pods \"{name}\" not found"));
                }
                None => {
                    let msg = format!("{label}: pod/{name}[{ns}] unexpectedly deleted");
                    say(format_args!("--> {msg}"));
                    return Err(super::Error::Failed(msg));
                }
            },
            WatchEvent::Applied(p) => p,
            WatchEvent::Deleted(_) => {
                let msg = format!("{label}: pod/{name}[{ns}] unexpectedly deleted");
                say(format_args!("--> {msg}"));
                return Err(super::Error::Failed(msg));
            }
        };
        // A pod being deleted is as good as gone (its container is being stopped).
        if pod.pointer("/metadata/deletionTimestamp").is_some()
            && pod["status"]["phase"] != "Succeeded"
        {
            drain(logs.take()).await;
            let msg = format!("{label}: pod/{name}[{ns}] unexpectedly deleted");
            say(format_args!("--> {msg}"));
            return Err(super::Error::Failed(msg));
        }
        let restart_count = pod
            .pointer("/status/containerStatuses/0/restartCount")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        match pod["status"]["phase"].as_str().unwrap_or("") {
            "Running" => {
                // A restarted container (restartPolicy OnFailure) is a retry, also when
                // the first run ended before it was seen.
                let retry = retrying && restart_count > restarts;
                if !seen_running || retry {
                    seen_running = true;
                    logs_read = true;
                    drain(logs.take()).await;
                    if retry {
                        restarts = restart_count;
                        say(format_args!(
                            "--> {label}: Retrying hook pod (retry #{restart_count})"
                        ));
                    }
                    logs = Some(stream_logs(d, &name, true));
                }
            }
            phase @ ("Succeeded" | "Failed") => {
                if retrying && restart_count > restarts {
                    // The retry ran to its end between two updates of the pod.
                    say(format_args!(
                        "--> {label}: Retrying hook pod (retry #{restart_count})"
                    ));
                }
                if !created && !seen_running {
                    if phase == "Succeeded" {
                        say(format_args!("--> {label}: Hook pod already succeeded"));
                        return Ok(());
                    }
                } else if !created {
                    say(format_args!("--> {label}: Hook pod is already running ..."));
                }
                if !logs_read {
                    logs = Some(stream_logs(d, &name, false));
                }
                break pod;
            }
            _ => {}
        }
    };
    drain(logs.take()).await;
    if last["status"]["phase"] == "Failed" {
        say(format_args!("--> {label}: Failed"));
        let message = last["status"]["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| failure_of(&last));
        return Err(super::Error::Failed(message));
    }
    say(format_args!("--> {label}: Success"));
    Ok(())
}

/// What a failed hook pod's container says about its end.
fn failure_of(pod: &Value) -> String {
    let term = pod
        .pointer("/status/containerStatuses/0/state/terminated")
        .cloned()
        .unwrap_or(Value::Null);
    match term["exitCode"].as_i64() {
        Some(code) => format!(
            "pod {} failed: the hook container exited with code {code}{}",
            name_of(pod),
            term["reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        None => format!("pod {} failed", name_of(pod)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_pod_is_built_from_the_template_container() {
        let rc = json!({
            "metadata": {"name": "web-2"},
            "spec": {"template": {"spec": {
                "nodeSelector": {"disk": "ssd"},
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "other", "emptyDir": {}}],
                "containers": [{
                    "name": "app", "image": "busybox", "workingDir": "/w",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/d"},
                                     {"name": "other", "mountPath": "/o"}],
                }],
            }}},
        });
        let exec: ExecNewPodHook = serde_json::from_value(json!({
            "containerName": "app", "command": ["sh", "-c", "true"],
            "env": [{"name": "B", "value": "3"}], "volumes": ["data", "missing"],
        }))
        .unwrap();
        let hook = LifecycleHook {
            failure_policy: "Retry".into(),
            exec_new_pod: Some(exec.clone()),
            tag_images: vec![],
        };
        let mut strategy = os::DeploymentStrategy::default();
        strategy.labels.insert("team".into(), "a".into());
        strategy
            .labels
            .insert(os::DEPLOYER_POD_FOR_LABEL.into(), "x".into());
        let pod = hook_pod("ns", &hook, &exec, &rc, "pre", &strategy, 100).unwrap();
        assert_eq!(pod["metadata"]["name"], "web-2-hook-pre");
        assert_eq!(
            pod["metadata"]["labels"][os::DEPLOYER_POD_FOR_LABEL],
            "web-2"
        );
        assert_eq!(
            pod["metadata"]["labels"][os::DEPLOYER_POD_TYPE_LABEL],
            "hook-pre"
        );
        assert_eq!(pod["metadata"]["labels"]["team"], "a");
        assert_eq!(
            pod["metadata"]["annotations"][os::DEPLOYMENT_ANNOTATION],
            "web-2"
        );
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "OnFailure");
        assert_eq!(spec["activeDeadlineSeconds"], 100);
        assert_eq!(spec["terminationGracePeriodSeconds"], 10);
        assert_eq!(spec["nodeSelector"]["disk"], "ssd");
        assert_eq!(spec["volumes"], json!([{"name": "data", "emptyDir": {}}]));
        let c = &spec["containers"][0];
        assert_eq!(c["name"], "lifecycle");
        assert_eq!(c["image"], "busybox");
        assert_eq!(c["workingDir"], "/w");
        assert_eq!(c["command"], json!(["sh", "-c", "true"]));
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "data", "mountPath": "/d"}])
        );
        assert_eq!(
            c["env"],
            json!([
                {"name": "A", "value": "1"}, {"name": "B", "value": "3"},
                {"name": "OPENSHIFT_DEPLOYMENT_NAME", "value": "web-2"},
                {"name": "OPENSHIFT_DEPLOYMENT_NAMESPACE", "value": "ns"},
            ])
        );
        let never = LifecycleHook {
            failure_policy: "Abort".into(),
            ..hook.clone()
        };
        let pod = hook_pod("ns", &never, &exec, &rc, "post", &strategy, -5).unwrap();
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["activeDeadlineSeconds"], 1);
        let missing = ExecNewPodHook {
            container_name: "nope".into(),
            ..exec
        };
        let err = hook_pod("ns", &hook, &missing, &rc, "pre", &strategy, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no container named 'nope' found in rc template"
        );
    }
}
