//! `rollout status|history|undo|restart` for the kinds whose history is kept in
//! ControllerRevisions (DaemonSets and StatefulSets), with the texts and exit codes of
//! kubectl (`kubectl/pkg/polymorphichelpers`: the daemon set and statefulset status
//! viewers, the controlled history viewer and the rollbackers).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::client::{Kind, ListParams, Patch, Resource, catalog};

use super::tabwriter::{Layout, align};
use super::{CliError, Conn, out};

const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// A kind with ControllerRevision history, as a rollout names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revisioned {
    DaemonSet,
    StatefulSet,
}

impl Revisioned {
    fn resource(self) -> &'static Arc<Resource> {
        catalog::of(match self {
            Revisioned::DaemonSet => Kind::DaemonSet,
            Revisioned::StatefulSet => Kind::StatefulSet,
        })
    }

    /// `daemonset.apps/<name>`, as kubectl names the object it acted on.
    fn named(self, name: &str) -> String {
        match self {
            Revisioned::DaemonSet => format!("daemonset.apps/{name}"),
            Revisioned::StatefulSet => format!("statefulset.apps/{name}"),
        }
    }
}

/// The kind and name of `ds/NAME`, `statefulset/NAME`, ... — `None` for another kind.
pub fn revisioned(arg: &str) -> Option<(Revisioned, &str)> {
    let (kind, name) = arg.split_once('/')?;
    let kind = match kind.strip_suffix(".apps").unwrap_or(kind) {
        "ds" | "daemonset" | "daemonsets" => Revisioned::DaemonSet,
        "sts" | "statefulset" | "statefulsets" => Revisioned::StatefulSet,
        _ => return None,
    };
    Some((kind, name)).filter(|(_, n)| !n.is_empty())
}

fn n(obj: &Value, p: &str) -> i64 {
    obj.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

/// kubectl's daemon set status viewer: a line, and whether the rollout is done.
fn observe_daemon_set(ds: &Value) -> Result<(String, bool), CliError> {
    if ds.pointer("/spec/updateStrategy/type") != Some(&json!("RollingUpdate")) {
        return Err(CliError::msg(
            "rollout status is only available for RollingUpdate strategy type",
        ));
    }
    let name = ds["metadata"]["name"].as_str().unwrap_or_default();
    if n(ds, "/metadata/generation") > n(ds, "/status/observedGeneration") {
        return Ok((
            "Waiting for daemon set spec update to be observed...".into(),
            false,
        ));
    }
    let desired = n(ds, "/status/desiredNumberScheduled");
    let updated = n(ds, "/status/updatedNumberScheduled");
    let available = n(ds, "/status/numberAvailable");
    Ok(if updated < desired {
        (
            format!(
                "Waiting for daemon set {name:?} rollout to finish: {updated} out of {desired} new pods have been updated..."
            ),
            false,
        )
    } else if available < desired {
        (
            format!(
                "Waiting for daemon set {name:?} rollout to finish: {available} of {desired} updated pods are available..."
            ),
            false,
        )
    } else {
        (format!("daemon set {name:?} successfully rolled out"), true)
    })
}

/// kubectl's statefulset status viewer: a line, and whether the rollout is done.
fn observe_stateful_set(sts: &Value) -> Result<(String, bool), CliError> {
    if sts.pointer("/spec/updateStrategy/type") != Some(&json!("RollingUpdate")) {
        return Err(CliError::msg(
            "rollout status is only available for RollingUpdate strategy type",
        ));
    }
    let observed = n(sts, "/status/observedGeneration");
    if observed == 0 || n(sts, "/metadata/generation") > observed {
        return Ok((
            "Waiting for statefulset spec update to be observed...".into(),
            false,
        ));
    }
    let replicas = sts.pointer("/spec/replicas").and_then(Value::as_i64);
    let ready = n(sts, "/status/readyReplicas");
    if let Some(r) = replicas.filter(|r| ready < *r) {
        return Ok((
            format!("Waiting for {} pods to be ready...", r - ready),
            false,
        ));
    }
    let updated = n(sts, "/status/updatedReplicas");
    // kubectl reads any rolling update with its parameters as a partitioned one.
    if let Some(ru) = sts
        .pointer("/spec/updateStrategy/rollingUpdate")
        .filter(|r| r.is_object())
    {
        let partition = ru.get("partition").and_then(Value::as_i64);
        if let (Some(r), Some(p)) = (replicas, partition)
            && updated < r - p
        {
            return Ok((
                format!(
                    "Waiting for partitioned roll out to finish: {updated} out of {} new pods have been updated...",
                    r - p
                ),
                false,
            ));
        }
        return Ok((
            format!("partitioned roll out complete: {updated} new pods have been updated..."),
            true,
        ));
    }
    let s = |p: &str| sts.pointer(p).and_then(Value::as_str).unwrap_or("");
    if s("/status/updateRevision") != s("/status/currentRevision") {
        return Ok((
            format!(
                "waiting for statefulset rolling update to complete {updated} pods at revision {}...",
                s("/status/updateRevision")
            ),
            false,
        ));
    }
    Ok((
        format!(
            "statefulset rolling update complete {} pods at revision {}...",
            n(sts, "/status/currentReplicas"),
            s("/status/currentRevision")
        ),
        true,
    ))
}

async fn get(conn: &Conn, kind: Revisioned, name: &str) -> Result<Value, CliError> {
    conn.client
        .get(kind.resource(), Some(&conn.namespace), name)
        .await
        .map_err(|e| conn.error(e))
}

/// `rollout status ds/NAME` or `sts/NAME`.
pub async fn status(
    conn: &Conn,
    kind: Revisioned,
    name: &str,
    watch: bool,
) -> Result<i32, CliError> {
    let obj = get(conn, kind, name).await?;
    let observe = match kind {
        Revisioned::DaemonSet => observe_daemon_set,
        Revisioned::StatefulSet => observe_stateful_set,
    };
    let mut last = String::new();
    let show = |obj: &Value| -> Option<Result<i32, CliError>> {
        match observe(obj) {
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
    super::rollout::follow(conn, kind.resource(), &obj, show).await
}

/// The objects of `kind` that `owner` controls, found by its selector.
pub async fn controlled(conn: &Conn, owner: &Value, kind: Kind) -> Result<Vec<Value>, CliError> {
    let selector = owner
        .pointer("/spec/selector")
        .map(crate::types::labels::format_label_selector)
        .unwrap_or_default();
    let params = ListParams {
        label_selector: Some(selector),
        field_selector: None,
    };
    let uid = &owner["metadata"]["uid"];
    Ok(conn
        .client
        .list(catalog::of(kind), Some(&conn.namespace), &params)
        .await
        .map_err(|e| conn.error(e))?
        .items
        .into_iter()
        .filter(|child| {
            child["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r["controller"] == true && &r["uid"] == uid)
                })
        })
        .collect())
}

/// The revisions `owner` controls, oldest first (`controlledHistory`).
async fn revisions(conn: &Conn, owner: &Value) -> Result<Vec<Value>, CliError> {
    let mut revs = controlled(conn, owner, Kind::ControllerRevision).await?;
    revs.sort_by_key(|r| n(r, "/revision"));
    Ok(revs)
}

/// The template a revision holds.
fn template_of(rev: &Value) -> Value {
    let mut t = rev
        .pointer("/data/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    t
}

/// `rollout history ds/NAME` or `sts/NAME` (`--revision=N` shows that revision's
/// template).
pub async fn history(
    conn: &Conn,
    kind: Revisioned,
    name: &str,
    revision: Option<i64>,
) -> Result<i32, CliError> {
    let obj = get(conn, kind, name).await?;
    let revs = revisions(conn, &obj).await?;
    let entries: Vec<(i64, &Value, Value)> = revs
        .iter()
        .map(|r| (n(r, "/revision"), r, template_of(r)))
        .collect();
    show_history(&kind.named(name), &entries, revision)
}

/// kubectl's history viewer over `(revision, object, template)` entries, oldest first:
/// with `--revision=N` that revision's template, else the table of revisions and their
/// change causes.
pub fn show_history(
    named: &str,
    entries: &[(i64, &Value, Value)],
    revision: Option<i64>,
) -> Result<i32, CliError> {
    if let Some(want) = revision.filter(|r| *r > 0) {
        let Some((_, _, template)) = entries.iter().find(|(r, _, _)| *r == want) else {
            return Err(CliError::msg(format!(
                "unable to find the specified revision {want}"
            )));
        };
        out(&format!(
            "{named} with revision #{want}\n{}",
            super::describe::pod_template(template, &super::describe::Clock::system())
        ));
        return Ok(0);
    }
    if entries.is_empty() {
        out("No rollout history found.\n");
        return Ok(0);
    }
    let mut table = String::from("REVISION\tCHANGE-CAUSE\n");
    for (rev, obj, _) in entries {
        let cause = obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(CHANGE_CAUSE))
            .and_then(Value::as_str)
            .unwrap_or("<none>");
        table.push_str(&format!("{rev}\t{cause}\n"));
    }
    out(&format!("{named} \n{}\n", align(Layout::DESCRIBE, &table)));
    Ok(0)
}

/// `rollout undo ds/NAME` or `sts/NAME`: writes an older revision's template back with
/// the revision's own patch (kubectl's daemon set and statefulset rollbackers).
pub async fn undo(
    conn: &Conn,
    kind: Revisioned,
    name: &str,
    to_revision: i64,
) -> Result<i32, CliError> {
    let obj = get(conn, kind, name).await?;
    let revs = revisions(conn, &obj).await?;
    let target = if to_revision > 0 {
        revs.iter()
            .find(|r| n(r, "/revision") == to_revision)
            .ok_or_else(|| {
                CliError::msg(format!(
                    "unable to find specified revision {to_revision} in history"
                ))
            })?
    } else {
        if revs.len() < 2 {
            return Err(CliError::msg("no last revision to roll back to"));
        }
        &revs[revs.len() - 2]
    };
    if template_of(target) == obj["spec"]["template"] {
        out(&format!(
            "{} skipped rollback (current template already matches revision {})\n",
            kind.named(name),
            n(target, "/revision")
        ));
        return Ok(0);
    }
    let patch = Patch::Strategic(target["data"].clone());
    conn.client
        .patch(kind.resource(), Some(&conn.namespace), name, &patch)
        .await
        .map_err(|e| conn.error(e))?;
    out(&format!("{} rolled back\n", kind.named(name)));
    Ok(0)
}

/// `rollout restart ds/NAME` or `sts/NAME`.
pub async fn restart(conn: &Conn, kind: Revisioned, name: &str) -> Result<i32, CliError> {
    get(conn, kind, name).await?;
    stamp_restart(conn, kind.resource(), name, &kind.named(name)).await
}

/// Restarts every pod of a workload by stamping its template
/// (`kubectl.kubernetes.io/restartedAt`); `named` is how the answer names it.
pub async fn stamp_restart(
    conn: &Conn,
    res: &Arc<Resource>,
    name: &str,
    named: &str,
) -> Result<i32, CliError> {
    let now = crate::types::now();
    let patch = Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": now,
    }}}}}));
    conn.client
        .patch(res, Some(&conn.namespace), name, &patch)
        .await
        .map_err(|e| conn.error(e))?;
    out(&format!("{named} restarted\n"));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_set_status_lines_are_kubectls() {
        let ds = |status: Value| {
            json!({"metadata": {"name": "agent", "generation": 2},
                   "spec": {"updateStrategy": {"type": "RollingUpdate"}}, "status": status})
        };
        let line = |v: Value| observe_daemon_set(&v).unwrap();
        assert_eq!(
            line(ds(json!({"observedGeneration": 1}))).0,
            "Waiting for daemon set spec update to be observed..."
        );
        assert_eq!(
            line(ds(json!({"observedGeneration": 2, "desiredNumberScheduled": 2,
                           "updatedNumberScheduled": 1}))),
            (
                "Waiting for daemon set \"agent\" rollout to finish: 1 out of 2 new pods have been updated...".into(),
                false
            )
        );
        assert_eq!(
            line(ds(
                json!({"observedGeneration": 2, "desiredNumberScheduled": 2,
                           "updatedNumberScheduled": 2, "numberAvailable": 1})
            ))
            .0,
            "Waiting for daemon set \"agent\" rollout to finish: 1 of 2 updated pods are available..."
        );
        assert_eq!(
            line(ds(
                json!({"observedGeneration": 2, "desiredNumberScheduled": 2,
                           "updatedNumberScheduled": 2, "numberAvailable": 2})
            )),
            ("daemon set \"agent\" successfully rolled out".into(), true)
        );
        let mut on_delete = ds(json!({}));
        on_delete["spec"]["updateStrategy"]["type"] = json!("OnDelete");
        assert!(observe_daemon_set(&on_delete).is_err());
    }

    #[test]
    fn the_stateful_set_status_lines_are_kubectls() {
        let sts = |partition: i64, status: Value| {
            json!({"metadata": {"name": "web", "generation": 2},
                   "spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate",
                            "rollingUpdate": {"partition": partition}}},
                   "status": status})
        };
        let line = |v: Value| observe_stateful_set(&v).unwrap();
        assert_eq!(
            line(sts(0, json!({}))).0,
            "Waiting for statefulset spec update to be observed..."
        );
        assert_eq!(
            line(sts(0, json!({"observedGeneration": 2, "readyReplicas": 1}))).0,
            "Waiting for 2 pods to be ready..."
        );
        let ready = |extra: Value| {
            let mut st = json!({"observedGeneration": 2, "readyReplicas": 3});
            for (k, v) in extra.as_object().unwrap() {
                st[k] = v.clone();
            }
            st
        };
        assert_eq!(
            line(sts(2, ready(json!({"updatedReplicas": 0})))),
            (
                "Waiting for partitioned roll out to finish: 0 out of 1 new pods have been updated...".into(),
                false
            )
        );
        assert_eq!(
            line(sts(2, ready(json!({"updatedReplicas": 1})))),
            (
                "partitioned roll out complete: 1 new pods have been updated...".into(),
                true
            )
        );
        assert_eq!(
            line(sts(0, ready(json!({"updatedReplicas": 3})))),
            (
                "partitioned roll out complete: 3 new pods have been updated...".into(),
                true
            )
        );
        // Without rollingUpdate parameters kubectl compares the revisions.
        let plain = |status: Value| {
            let mut v = sts(0, status);
            v["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
            v
        };
        let (a, b) = ("web-a", "web-b");
        assert_eq!(
            line(plain(ready(
                json!({"updatedReplicas": 1, "currentRevision": a, "updateRevision": b})
            ))),
            (
                "waiting for statefulset rolling update to complete 1 pods at revision web-b..."
                    .into(),
                false
            )
        );
        assert_eq!(
            line(plain(ready(
                json!({"currentReplicas": 3, "currentRevision": b, "updateRevision": b})
            ))),
            (
                "statefulset rolling update complete 3 pods at revision web-b...".into(),
                true
            )
        );
    }

    #[test]
    fn kinds_are_named_as_kubectl_names_them() {
        assert_eq!(
            revisioned("ds/agent"),
            Some((Revisioned::DaemonSet, "agent"))
        );
        assert_eq!(
            revisioned("statefulsets.apps/web"),
            Some((Revisioned::StatefulSet, "web"))
        );
        assert_eq!(revisioned("sts/"), None);
        assert_eq!(revisioned("deploy/agent"), None);
        assert_eq!(Revisioned::StatefulSet.named("web"), "statefulset.apps/web");
    }
}
