//! `rollout status|history|pause|resume|undo|restart` for Deployments, with the texts and
//! exit codes of kubectl (`kubectl/pkg/polymorphichelpers`: the status viewer, history
//! viewer, rollbacker and restarter of apps/v1 Deployments).

use serde_json::{Value, json};

use crate::client::{Kind, Patch, Resource, catalog};

use super::{CliError, Conn, out};

const REVISION: &str = "deployment.kubernetes.io/revision";

fn deployments() -> &'static std::sync::Arc<Resource> {
    catalog::of(Kind::Deployment)
}

/// `deployment.apps/<name>`, as kubectl names the object it acted on.
fn res(name: &str) -> String {
    format!("deployment.apps/{name}")
}

/// The name of a Deployment given as `deploy/NAME`, `deployment/NAME`, ... — `None` for
/// another kind.
pub fn deployment_name(arg: &str) -> Option<&str> {
    let (kind, name) = arg.split_once('/')?;
    matches!(
        kind,
        "deploy" | "deployment" | "deployments" | "deployment.apps" | "deployments.apps"
    )
    .then_some(name)
    .filter(|n| !n.is_empty())
}

async fn get(conn: &Conn, name: &str) -> Result<Value, CliError> {
    conn.client
        .get(deployments(), Some(&conn.namespace), name)
        .await
        .map_err(|e| conn.error(e))
}

fn revision_of(rs: &Value) -> i64 {
    rs.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The ReplicaSets the Deployment controls, by revision.
async fn history_sets(conn: &Conn, d: &Value) -> Result<Vec<Value>, CliError> {
    let mut sets = super::rollout_revisions::controlled(conn, d, Kind::ReplicaSet).await?;
    sets.sort_by_key(revision_of);
    Ok(sets)
}

/// kubectl's deployment status viewer: a line, and whether the rollout is done.
fn observe(d: &Value, revision: Option<i64>) -> Result<(String, bool), CliError> {
    let name = d["metadata"]["name"].as_str().unwrap_or_default();
    if let Some(want) = revision {
        let current = d
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(REVISION))
            .and_then(Value::as_str)
            .and_then(|r| r.parse::<i64>().ok())
            .unwrap_or(0);
        if want > 0 && want != current {
            return Err(CliError::msg(format!(
                "desired revision ({want}) is different from the running revision ({current})"
            )));
        }
    }
    let n = |p: &str| d.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    if n("/metadata/generation") > n("/status/observedGeneration") {
        return Ok((
            "Waiting for deployment spec update to be observed...".into(),
            false,
        ));
    }
    let progressing = d["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing"));
    if progressing.is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
        return Err(CliError::msg(format!(
            "deployment {name:?} exceeded its progress deadline"
        )));
    }
    let desired = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let (updated, replicas, available) = (
        n("/status/updatedReplicas"),
        n("/status/replicas"),
        n("/status/availableReplicas"),
    );
    Ok(if updated < desired {
        (
            format!(
                "Waiting for deployment {name:?} rollout to finish: {updated} out of {desired} new replicas have been updated..."
            ),
            false,
        )
    } else if replicas > updated {
        (
            format!(
                "Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination...",
                replicas - updated
            ),
            false,
        )
    } else if available < updated {
        (
            format!(
                "Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available..."
            ),
            false,
        )
    } else {
        (format!("deployment {name:?} successfully rolled out"), true)
    })
}

pub async fn status(
    conn: &Conn,
    name: &str,
    revision: Option<i64>,
    watch: bool,
) -> Result<i32, CliError> {
    let d = get(conn, name).await?;
    let mut last = String::new();
    let show = |d: &Value| -> Option<Result<i32, CliError>> {
        match observe(d, revision) {
            Err(e) => Some(Err(e)),
            Ok((line, done)) => {
                if line != last || done {
                    out(&format!("{line}\n"));
                    last = line;
                }
                (done || !watch).then_some(Ok(0))
            }
        }
    };
    super::rollout::follow(conn, deployments(), &d, show).await
}

pub async fn history(conn: &Conn, name: &str, revision: Option<i64>) -> Result<i32, CliError> {
    let d = get(conn, name).await?;
    let sets = history_sets(conn, &d).await?;
    let entries: Vec<(i64, &Value, Value)> = sets
        .iter()
        .map(|rs| (revision_of(rs), rs, rs["spec"]["template"].clone()))
        .collect();
    super::rollout_revisions::show_history(&res(name), &entries, revision)
}

pub async fn pause(conn: &Conn, name: &str, pause: bool) -> Result<i32, CliError> {
    let d = get(conn, name).await?;
    if d["spec"]["paused"].as_bool().unwrap_or(false) == pause {
        return Err(CliError::msg(format!(
            "deployments.apps {name:?} is {}",
            if pause {
                "already paused"
            } else {
                "not paused"
            }
        )));
    }
    let patch = Patch::Merge(json!({"spec": {"paused": pause}}));
    conn.client
        .patch(deployments(), Some(&conn.namespace), name, &patch)
        .await
        .map_err(|e| conn.error(e))?;
    out(&format!(
        "{} {}\n",
        res(name),
        if pause { "paused" } else { "resumed" }
    ));
    Ok(0)
}

/// Writes an older revision's template back (kubectl's rollbacker: a JSON patch of the
/// template and the annotations that travel with it).
pub async fn undo(conn: &Conn, name: &str, to_revision: i64) -> Result<i32, CliError> {
    let d = get(conn, name).await?;
    if d["spec"]["paused"].as_bool().unwrap_or(false) {
        return Err(CliError::msg(
            "you cannot rollback a paused deployment; resume it first with 'berth rollout resume' and try again",
        ));
    }
    let sets = history_sets(conn, &d).await?;
    let target = if to_revision > 0 {
        sets.iter()
            .find(|rs| revision_of(rs) == to_revision)
            .ok_or_else(|| {
                CliError::msg(format!(
                    "unable to find specified revision {to_revision} in history"
                ))
            })?
    } else {
        if sets.len() < 2 {
            return Err(CliError::msg(format!(
                "no rollout history found for deployment {name:?}"
            )));
        }
        &sets[sets.len() - 2]
    };
    if crate::types::same_template_ignoring_hash(
        &target["spec"]["template"],
        &d["spec"]["template"],
    ) {
        out(&format!(
            "{} skipped rollback (current template already matches revision {})\n",
            res(name),
            revision_of(target)
        ));
        return Ok(0);
    }
    let patch = Patch::Json(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": d["metadata"]["resourceVersion"]},
        {"op": "replace", "path": "/spec/template",
         "value": crate::types::template_without_hash(&target["spec"]["template"])},
    ]));
    conn.client
        .patch(deployments(), Some(&conn.namespace), name, &patch)
        .await
        .map_err(|e| conn.error(e))?;
    out(&format!("{} rolled back\n", res(name)));
    Ok(0)
}

/// Restarts every pod by stamping the template (`kubectl.kubernetes.io/restartedAt`).
pub async fn restart(conn: &Conn, name: &str) -> Result<i32, CliError> {
    let d = get(conn, name).await?;
    if d["spec"]["paused"].as_bool().unwrap_or(false) {
        return Err(CliError::msg(
            "can't restart paused deployment (run rollout resume first)",
        ));
    }
    super::rollout_revisions::stamp_restart(conn, deployments(), name, &res(name)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(status: Value) -> Value {
        json!({"metadata": {"name": "web", "generation": 2}, "spec": {"replicas": 3},
               "status": status})
    }

    #[test]
    fn status_reads_the_counts_as_kubectl() {
        let line = |s: Value| observe(&d(s), None).unwrap();
        assert_eq!(
            line(json!({"observedGeneration": 1})).0,
            "Waiting for deployment spec update to be observed..."
        );
        assert_eq!(
            line(json!({"observedGeneration": 2, "updatedReplicas": 1, "replicas": 3})).0,
            "Waiting for deployment \"web\" rollout to finish: 1 out of 3 new replicas have been updated..."
        );
        assert_eq!(
            line(json!({"observedGeneration": 2, "updatedReplicas": 3, "replicas": 4})).0,
            "Waiting for deployment \"web\" rollout to finish: 1 old replicas are pending termination..."
        );
        assert_eq!(
            line(json!({"observedGeneration": 2, "updatedReplicas": 3, "replicas": 3, "availableReplicas": 2})).0,
            "Waiting for deployment \"web\" rollout to finish: 2 of 3 updated replicas are available..."
        );
        let done = line(
            json!({"observedGeneration": 2, "updatedReplicas": 3, "replicas": 3, "availableReplicas": 3}),
        );
        assert_eq!(
            done,
            ("deployment \"web\" successfully rolled out".into(), true)
        );
        let stuck = observe(
            &d(json!({"observedGeneration": 2, "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]})),
            None,
        );
        assert!(stuck.is_err());
    }

    #[test]
    fn deployments_are_named_with_their_kind() {
        assert_eq!(deployment_name("deploy/web"), Some("web"));
        assert_eq!(deployment_name("deployment.apps/web"), Some("web"));
        assert_eq!(deployment_name("dc/web"), None);
        assert_eq!(deployment_name("web"), None);
    }
}
