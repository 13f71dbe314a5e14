//! `GET deploymentconfigs/{name}/log` (DeploymentLogOptions, spec §6.3): the log of a
//! deployment: its deployer pod while it runs or after it failed, an application pod
//! once it completed. Waiting for the deployment, its deployer pod or its pods follows
//! watches, never polls; the pod logs themselves come from [`super::logs`].

use std::time::Duration;

use axum::response::Response;
use serde_json::{Value, json};

use super::AppState;
use super::error::Error;
use super::resources::{Query, flag};
use crate::registry::deploymentconfig::{Phase, deployer_pod_name, deployment_name};
use crate::registry::{self, Cause, Kind, WatchEvent, WatchOptions, catalog};
use crate::types::{fields, labels};

/// How long the log waits for each step (the deployment, the deployer pod, a pod).
const WAIT: Duration = Duration::from_secs(60);

fn number(q: &Query, name: &str) -> Result<Option<i64>, Error> {
    q.get(name)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| Error::BadRequest(format!("{name} must be a number, not {v:?}")))
        })
        .transpose()
}

/// §5.4: the rules of DeploymentLogOptions.
fn validate(name: &str, q: &Query) -> Result<(), Error> {
    let mut causes = Vec::new();
    if let Some(t) = number(q, "tailLines")?.filter(|t| *t < 0) {
        causes.push(Cause::invalid(
            "tailLines",
            &json!(t),
            "must be greater than or equal to 0",
        ));
    }
    for f in ["limitBytes", "sinceSeconds"] {
        if let Some(n) = number(q, f)?.filter(|n| *n < 1) {
            causes.push(Cause::invalid(f, &json!(n), "must be greater than 0"));
        }
    }
    if q.contains_key("sinceSeconds") && q.contains_key("sinceTime") {
        causes.push(Cause::forbidden(
            "",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    let version = number(q, "version")?;
    if let Some(v) = version.filter(|v| *v <= 0) {
        causes.push(Cause::invalid(
            "version",
            &json!(v),
            "deployment version must be greater than 0",
        ));
    }
    if version.is_some() && flag(q, "previous") {
        causes.push(Cause::invalid(
            "previous",
            &json!(true),
            "cannot use previous when a version is specified",
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Error::Registry(registry::Error::Invalid {
            group: registry::deploymentconfig::GROUP.into(),
            kind: "DeploymentLogOptions".into(),
            name: name.to_string(),
            causes,
        }))
    }
}

fn parse(bytes: &[u8]) -> Result<Value, Error> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::Registry(registry::Error::Internal(format!("stored object: {e}"))))
}

/// Follows `res` objects selected by `field` and `label` until `done` picks a result from
/// the current set (the watch starts with every current object), or `WAIT` passes.
async fn wait_for<T>(
    state: &AppState,
    kind: Kind,
    ns: &str,
    field: &str,
    label: labels::Selector,
    mut done: impl FnMut(&[Value]) -> Option<T>,
) -> Result<Option<T>, Error> {
    let opts = WatchOptions {
        field: fields::Selector::parse(field).map_err(Error::BadRequest)?,
        label,
        ..Default::default()
    };
    let mut w = state.registry.watch(catalog::of(kind), Some(ns), opts)?;
    let mut current: Vec<Value> = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = match tokio::time::timeout_at(deadline, w.next()).await {
            Ok(Some(e)) => e,
            Ok(None) | Err(_) => return Ok(None),
        };
        let (obj, gone) = match event {
            WatchEvent::Added(b) | WatchEvent::Modified(b) => (parse(&b)?, false),
            WatchEvent::Deleted(b) => (parse(&b)?, true),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => return Err(e.into()),
        };
        let uid = obj.pointer("/metadata/uid").cloned();
        current.retain(|o| o.pointer("/metadata/uid").cloned() != uid);
        if !gone {
            current.push(obj);
        }
        if let Some(t) = done(&current) {
            return Ok(Some(t));
        }
    }
}

fn phase_of_pod(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The sort key of §6.3 "best application pod": smaller is better.
fn pod_rank(pod: &Value) -> (u8, u8, u8, String, i64, String) {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = match phase_of_pod(pod) {
        "Running" => 0,
        "Unknown" => 1,
        "Pending" => 2,
        _ => 3,
    };
    let ready = crate::types::condition(pod, "Ready");
    let is_ready = ready.is_some_and(|c| c["status"] == "True");
    let ready_since = ready
        .filter(|_| is_ready)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or("9999")
        .to_string();
    let restarts: i64 = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    let created = pod
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    (
        u8::from(!bound),
        phase,
        u8::from(!is_ready),
        ready_since,
        -restarts,
        created,
    )
}

/// The options a pod log takes from DeploymentLogOptions (`previous` means the previous
/// deployment here, not a previous container).
fn pod_query(q: &Query) -> Query {
    q.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "previous" | "version" | "nowait"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn pod_log(state: &AppState, pod: &Value, q: &Query) -> Result<Response, Error> {
    super::logs::serve(state.node.as_deref(), pod, &pod_query(q))
}

/// The log of the best application pod of a completed deployment.
async fn application_log(
    state: &AppState,
    ns: &str,
    rc: &Value,
    q: &Query,
) -> Result<Response, Error> {
    let selector = labels::Selector::from_map(&labels::map_at(rc, "/spec/selector"));
    let best = wait_for(state, Kind::Pod, ns, "", selector, |pods| {
        pods.iter().min_by_key(|p| pod_rank(p)).cloned()
    })
    .await?;
    let rc_name = rc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    match best {
        Some(pod) => pod_log(state, &pod, q),
        None => Err(Error::Registry(registry::Error::Timeout(format!(
            "timed out waiting for a pod of deployment {rc_name}"
        )))),
    }
}

/// Serves the log of a deployment of DC `name`.
pub async fn serve(state: &AppState, ns: &str, name: &str, q: &Query) -> Result<Response, Error> {
    validate(name, q)?;
    let reg = &state.registry;
    let stored = reg
        .get(catalog::of(Kind::DeploymentConfig), Some(ns), name)
        .map_err(|e| match e {
            // The log names the kind in the singular (§6.3).
            registry::Error::NotFound { .. } => registry::Error::NotFound {
                group: registry::deploymentconfig::GROUP.into(),
                resource: "deploymentconfig.apps.openshift.io".into(),
                name: name.to_string(),
            },
            other => other,
        })?;
    let dc = parse(&stored)?;
    let latest = dc
        .pointer("/status/latestVersion")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if latest == 0 {
        return Err(Error::BadRequest(format!(
            "no deployment exists for deploymentConfig {name:?}"
        )));
    }
    let version = match number(q, "version")? {
        Some(v) if v > latest => {
            return Err(Error::BadRequest(format!(
                "invalid version for deploymentConfig {name:?}: {v}"
            )));
        }
        Some(v) => v,
        None if flag(q, "previous") => {
            if latest - 1 < 1 {
                return Err(Error::BadRequest(format!(
                    "no previous deployment exists for deploymentConfig {name:?}"
                )));
            }
            latest - 1
        }
        None => latest,
    };
    let rc_name = deployment_name(name, version);
    let rcs = catalog::of(Kind::ReplicationController);
    let by_name = |n: &str| format!("metadata.name={n}");
    let found = wait_for(
        state,
        Kind::ReplicationController,
        ns,
        &by_name(&rc_name),
        labels::Selector::default(),
        |rcs| rcs.first().cloned(),
    )
    .await?;
    let mut rc = match found {
        Some(rc) => rc,
        None => {
            return Err(Error::Registry(registry::Error::NotFound {
                group: "".into(),
                resource: rcs.qualified_plural(),
                name: rc_name,
            }));
        }
    };
    let deployer = deployer_pod_name(&rc_name);
    if matches!(Phase::of(&rc), Phase::New | Phase::Pending) {
        if flag(q, "nowait") {
            return Ok(super::logs::text(String::new()));
        }
        let started = wait_for(
            state,
            Kind::Pod,
            ns,
            &by_name(&deployer),
            labels::Selector::default(),
            |pods| {
                pods.first()
                    .filter(|p| matches!(phase_of_pod(p), "Running" | "Succeeded" | "Failed"))
                    .cloned()
            },
        )
        .await?;
        if started.is_none() {
            return Err(Error::BadRequest(format!(
                "failed to run deployer pod {deployer}: timed out waiting for the pod to start"
            )));
        }
        let moved = wait_for(
            state,
            Kind::ReplicationController,
            ns,
            &by_name(&rc_name),
            labels::Selector::default(),
            |rcs| {
                rcs.first()
                    .filter(|rc| !matches!(Phase::of(rc), Phase::New | Phase::Pending))
                    .cloned()
            },
        )
        .await?;
        rc = moved.ok_or_else(|| {
            Error::Registry(registry::Error::Timeout(format!(
                "timed out waiting for deployment {rc_name} to start"
            )))
        })?;
    }
    match Phase::of(&rc) {
        Phase::Complete => application_log(state, ns, &rc, q).await,
        _ => {
            let pod = parse(&reg.get(catalog::of(Kind::Pod), Some(ns), &deployer)?)?;
            pod_log(state, &pod, q)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_options_follow_the_spec_rules() {
        let e = validate("web", &query(&[("version", "0"), ("previous", "true")])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("version: Invalid value: 0: deployment version must be greater than 0"),
            "{text}"
        );
        assert!(
            text.contains(
                "previous: Invalid value: true: cannot use previous when a version is specified"
            ),
            "{text}"
        );
        assert!(validate("web", &query(&[("limitBytes", "0")])).is_err());
        assert!(validate("web", &query(&[("version", "2"), ("follow", "true")])).is_ok());
    }

    #[test]
    fn the_best_pod_is_bound_running_and_ready() {
        let pending = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Pending"}});
        let running = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        let unbound = json!({"status": {"phase": "Running"}});
        let mut pods = [pending, unbound, running.clone()];
        pods.sort_by_key(pod_rank);
        assert_eq!(pods[0], running);
    }
}
