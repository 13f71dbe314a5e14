//! The DeploymentConfig controller's decisions (spec `deploymentconfigs.md` §9, §10): the
//! deployment (ReplicationController) a DC gets for a version, when a ConfigChange trigger
//! fires, the status and conditions computed from the owned deployments, which
//! deployments to scale once the latest one finished, and which old ones history
//! cleanup deletes. Pure functions over the API objects, so every rule is unit-tested;
//! the controller loop applies them through the client.

use crate::types::json::str_at;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Action, Context, Error, Result, Supervisor, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, DeleteParams, Patch, Propagation};
use crate::client::{Kind, Resource, catalog};
use crate::types::openshift as os;

pub const NEWER_RUNNING: &str = "newer deployment was found running";

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The version a deployment was made for (its latest-version annotation; 0 if none).
pub fn version_of(rc: &Value) -> i64 {
    os::deployment_version(rc)
}

/// A deployment's phase (`New` when it has none).
pub fn phase_of(rc: &Value) -> &'static str {
    os::deployment_phase(rc).as_str()
}

pub fn is_finished(rc: &Value) -> bool {
    matches!(phase_of(rc), "Complete" | "Failed")
}

/// Marked cancelled (`true` in any case).
pub fn is_cancelled(rc: &Value) -> bool {
    annotation(rc, os::DEPLOYMENT_CANCELLED_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The DC encoded in a deployment when it was made.
pub fn decode_dc(rc: &Value) -> Result<Value, String> {
    os::decode_config(rc)
}

fn int(v: &Value, p: &str) -> i64 {
    v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

/// The deployment (RC) of `dc` at its `status.latestVersion` (§9).
pub fn deployment_for(dc: &Value) -> Result<Value, String> {
    let name = str_at(dc, "/metadata/name");
    let ns = str_at(dc, "/metadata/namespace");
    let version = int(dc, "/status/latestVersion");
    let rc_name = os::deployment_name(name, version);
    let encoded = serde_json::to_string(dc).map_err(|e| e.to_string())?;
    let mut labels = dc["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(os::DEPLOYMENT_CONFIG_ANNOTATION.into(), json!(name));
    let mut annotations = Map::new();
    annotations.insert(os::DEPLOYMENT_CONFIG_ANNOTATION.into(), json!(name));
    annotations.insert(
        os::DEPLOYMENT_ENCODED_CONFIG_ANNOTATION.into(),
        json!(encoded),
    );
    annotations.insert(os::DEPLOYMENT_PHASE_ANNOTATION.into(), json!("New"));
    annotations.insert(
        os::DEPLOYMENT_VERSION_ANNOTATION.into(),
        json!(version.to_string()),
    );
    annotations.insert(
        os::DESIRED_REPLICAS_ANNOTATION.into(),
        json!(int(dc, "/spec/replicas").to_string()),
    );
    annotations.insert(os::DEPLOYMENT_REPLICAS_ANNOTATION.into(), json!("0"));
    let message = str_at(dc, "/status/details/message");
    if !message.is_empty() {
        annotations.insert(
            os::DEPLOYMENT_STATUS_REASON_ANNOTATION.into(),
            json!(message),
        );
    }
    if let Some(v) = dc["metadata"]["annotations"].get(os::DEPLOYMENT_IGNORE_POD_ANNOTATION) {
        annotations.insert(os::DEPLOYMENT_IGNORE_POD_ANNOTATION.into(), v.clone());
    }
    let mut template = dc["spec"]["template"].clone();
    if !template.is_object() {
        return Err("the deployment config has no template".into());
    }
    let mut selector = dc["spec"]["selector"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (k, v) in [
        (os::DEPLOYMENT_CONFIG_POD_LABEL, name),
        (os::DEPLOYMENT_POD_LABEL, rc_name.as_str()),
    ] {
        selector.insert(k.into(), json!(v));
        template["metadata"]["labels"][k] = json!(v);
    }
    for (k, v) in [
        (os::DEPLOYMENT_ANNOTATION, rc_name.clone()),
        (os::DEPLOYMENT_CONFIG_ANNOTATION, name.to_string()),
        (os::DEPLOYMENT_VERSION_ANNOTATION, version.to_string()),
    ] {
        template["metadata"]["annotations"][k] = json!(v);
    }
    for c in template["spec"]["containers"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if let Some(image) = c["image"].as_str() {
            c["image"] = json!(image.trim());
        }
    }
    let mut spec = json!({
        "replicas": 0,
        "selector": selector,
        "template": template,
    });
    if let Some(m) = dc["spec"]["minReadySeconds"].as_i64().filter(|m| *m > 0) {
        spec["minReadySeconds"] = json!(m);
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {
            "name": rc_name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "apps.openshift.io/v1",
                "kind": "DeploymentConfig",
                "name": name,
                "uid": dc["metadata"]["uid"],
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    }))
}

/// What the triggers say (§10.4).
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// Nothing to do.
    None,
    /// Wait (initial ImageChange triggers without images).
    Skip,
    /// A new version, with these `status.details`.
    Fire(Value),
}

fn has_trigger(dc: &Value, kind: &str) -> bool {
    dc["spec"]["triggers"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["type"] == kind))
}

fn config_change() -> Value {
    json!({"message": "config change", "causes": [{"type": "ConfigChange"}]})
}

fn images(template: &Value) -> Vec<&str> {
    template["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["image"].as_str())
        .collect()
}

/// Whether the DC's triggers ask for a new version, given its latest deployment.
pub fn evaluate_triggers(dc: &Value, latest: Option<&Value>) -> Result<Trigger, String> {
    if dc["spec"]["paused"] == true {
        return Ok(Trigger::None);
    }
    let (config, image) = (
        has_trigger(dc, "ConfigChange"),
        has_trigger(dc, "ImageChange"),
    );
    if !config && !image {
        return Ok(Trigger::None);
    }
    if int(dc, "/status/latestVersion") == 0 {
        if image {
            let all_resolved = dc["spec"]["triggers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["type"] == "ImageChange")
                .all(|t| {
                    t.pointer("/imageChangeParams/lastTriggeredImage")
                        .and_then(Value::as_str)
                        .is_some_and(|i| !i.is_empty())
                });
            return Ok(if all_resolved {
                Trigger::Fire(config_change())
            } else {
                Trigger::Skip
            });
        }
        return Ok(Trigger::Fire(config_change()));
    }
    let Some(latest) = latest else {
        return Ok(Trigger::None);
    };
    if image {
        let had = images(&latest["spec"]["template"]);
        let changed: Vec<Value> = images(&dc["spec"]["template"])
            .into_iter()
            .filter(|i| !had.contains(&i.trim()))
            .map(|i| {
                json!({"type": "ImageChange",
                       "imageTrigger": {"from": {"kind": "DockerImage", "name": i}}})
            })
            .collect();
        if !changed.is_empty() {
            return Ok(Trigger::Fire(
                json!({"message": "image change", "causes": changed}),
            ));
        }
    }
    if config {
        let then = decode_dc(latest)?;
        if then["spec"]["template"] != dc["spec"]["template"] {
            return Ok(Trigger::Fire(config_change()));
        }
    }
    Ok(Trigger::None)
}

/// `maxSurge` and `maxUnavailable` of a Rolling strategy against `replicas`: surge rounds
/// up, unavailable down; both 0 makes unavailable 1. Other strategies: (0, 0).
pub fn surge_and_unavailable(dc: &Value, replicas: i64) -> (i64, i64) {
    if dc["spec"]["strategy"]["type"] != "Rolling" {
        return (0, 0);
    }
    let params = &dc["spec"]["strategy"]["rollingParams"];
    let resolve = |v: &Value, up: bool| -> i64 {
        match v {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                Some(pct) if up => (pct * replicas + 99) / 100,
                Some(pct) => pct * replicas / 100,
                None => s.parse().unwrap_or(0),
            },
            _ => 0,
        }
    };
    let surge = resolve(&params["maxSurge"], true);
    let unavailable = resolve(&params["maxUnavailable"], false);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// One condition to set on a DC.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub kind: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Sets a condition the DC way (§10.8): same status and reason → unchanged; same status,
/// other reason → replaced keeping lastTransitionTime; otherwise replaced.
fn set_condition(conds: &mut Vec<Value>, c: &Condition, now: &str) {
    let pos = conds.iter().position(|x| x["type"] == c.kind);
    let mut new = json!({
        "type": c.kind, "status": c.status, "lastUpdateTime": now,
        "lastTransitionTime": now, "message": c.message,
    });
    if !c.reason.is_empty() {
        new["reason"] = json!(c.reason);
    }
    match pos {
        Some(i) => {
            let old = &conds[i];
            if old["status"] == c.status && str_at(old, "/reason") == c.reason {
                return;
            }
            if old["status"] == c.status {
                new["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            conds[i] = new;
        }
        None => conds.push(new),
    }
}

fn remove_condition(conds: &mut Vec<Value>, kind: &str) {
    conds.retain(|c| c["type"] != kind);
}

/// The highest-version owned deployment whose version is `status.latestVersion`.
pub fn latest_of<'a>(dc: &Value, owned: &'a [Value]) -> Option<&'a Value> {
    let version = int(dc, "/status/latestVersion");
    owned
        .iter()
        .max_by_key(|rc| version_of(rc))
        .filter(|rc| version > 0 && version_of(rc) == version)
}

/// The DC's status from its owned deployments (§10.5, §10.8, §10.9). `observe` says
/// whether `observedGeneration` advances; `extra` is set last.
pub fn compute_status(
    dc: &Value,
    owned: &[Value],
    observe: bool,
    extra: Option<&Condition>,
    now: &str,
) -> Value {
    let sum = |p: &str| owned.iter().map(|rc| int(rc, p)).sum::<i64>();
    let replicas = sum("/status/replicas");
    let available = sum("/status/availableReplicas");
    let latest = latest_of(dc, owned);
    let updated = latest.map_or(0, |rc| int(rc, "/status/replicas"));
    let stored = &dc["status"];
    let mut status = stored.as_object().cloned().unwrap_or_default();
    if observe {
        status.insert(
            "observedGeneration".into(),
            json!(int(dc, "/metadata/generation")),
        );
    }
    status.insert("replicas".into(), json!(replicas));
    status.insert("readyReplicas".into(), json!(sum("/status/readyReplicas")));
    status.insert("availableReplicas".into(), json!(available));
    status.insert(
        "unavailableReplicas".into(),
        json!((sum("/spec/replicas") - available).max(0)),
    );
    status.insert("updatedReplicas".into(), json!(updated));
    status.entry("latestVersion").or_insert_with(|| json!(0));
    let mut conds: Vec<Value> = stored["conditions"].as_array().cloned().unwrap_or_default();
    let desired = int(dc, "/spec/replicas");
    let (_, unavailable) = surge_and_unavailable(dc, desired);
    let avail = if available >= desired - unavailable && available > 0 {
        Condition {
            kind: "Available",
            status: "True",
            reason: "",
            message: "Deployment config has minimum availability.".into(),
        }
    } else {
        Condition {
            kind: "Available",
            status: "False",
            reason: "",
            message: "Deployment config does not have minimum availability.".into(),
        }
    };
    set_condition(&mut conds, &avail, now);
    let progressing = conds
        .iter()
        .find(|c| c["type"] == "Progressing")
        .map(|c| str_at(c, "/reason").to_string());
    let paused = dc["spec"]["paused"] == true;
    if paused {
        if !matches!(
            progressing.as_deref(),
            Some("DeploymentConfigPaused" | "ProgressDeadlineExceeded")
        ) {
            set_condition(
                &mut conds,
                &Condition {
                    kind: "Progressing",
                    status: "Unknown",
                    reason: "DeploymentConfigPaused",
                    message: "Deployment config is paused".into(),
                },
                now,
            );
        }
    } else {
        if progressing.as_deref() == Some("DeploymentConfigPaused") {
            set_condition(
                &mut conds,
                &Condition {
                    kind: "Progressing",
                    status: "Unknown",
                    reason: "DeploymentConfigResumed",
                    message: "Deployment config is resumed".into(),
                },
                now,
            );
        }
        if let Some(rc) = latest {
            let rc_name = str_at(rc, "/metadata/name");
            let by_phase = match phase_of(rc) {
                "Pending" => Some(Condition {
                    kind: "Progressing",
                    status: "Unknown",
                    reason: "",
                    message: format!(
                        "replication controller {rc_name:?} is waiting for pod \"{rc_name}-deploy\" to run"
                    ),
                }),
                "Running" => {
                    let old_updated = int(stored, "/updatedReplicas");
                    let old_old = int(stored, "/replicas") - old_updated;
                    let progressed = updated > old_updated || replicas - updated < old_old;
                    if progressed {
                        remove_condition(&mut conds, "Progressing");
                        Some(Condition {
                            kind: "Progressing",
                            status: "True",
                            reason: "ReplicationControllerUpdated",
                            message: format!("replication controller {rc_name:?} is progressing"),
                        })
                    } else {
                        None
                    }
                }
                "Failed" if is_cancelled(rc) => Some(Condition {
                    kind: "Progressing",
                    status: "False",
                    reason: "RolloutCancelled",
                    message: format!("rollout of replication controller {rc_name:?} was cancelled"),
                }),
                "Failed" => Some(Condition {
                    kind: "Progressing",
                    status: "False",
                    reason: "ProgressDeadlineExceeded",
                    message: format!("replication controller {rc_name:?} has failed progressing"),
                }),
                "Complete" => Some(Condition {
                    kind: "Progressing",
                    status: "True",
                    reason: "NewReplicationControllerAvailable",
                    message: format!("replication controller {rc_name:?} successfully rolled out"),
                }),
                _ => None,
            };
            if let Some(c) = by_phase {
                set_condition(&mut conds, &c, now);
            }
        }
    }
    if let Some(c) = extra {
        set_condition(&mut conds, c, now);
    }
    status.insert("conditions".into(), json!(conds));
    Value::Object(status)
}

/// A scale of one deployment once the latest has finished (§10.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    pub name: String,
    pub from: i64,
    pub to: i64,
}

/// The owned deployment with the highest version that is Complete.
pub fn active_of(owned: &[Value]) -> Option<&Value> {
    owned
        .iter()
        .filter(|rc| phase_of(rc) == "Complete")
        .max_by_key(|rc| version_of(rc))
}

/// Which deployments to resize: the active one to `spec.replicas`, all others to 0 (all
/// to 0 for a test DC).
pub fn scales(dc: &Value, owned: &[Value]) -> Vec<Scale> {
    let active = active_of(owned).map(|rc| str_at(rc, "/metadata/name").to_string());
    let test = dc["spec"]["test"] == true;
    let mut out = Vec::new();
    for rc in owned {
        let name = str_at(rc, "/metadata/name");
        let to = if !test && active.as_deref() == Some(name) {
            int(dc, "/spec/replicas")
        } else {
            0
        };
        let from = int(rc, "/spec/replicas");
        if from != to {
            out.push(Scale {
                name: name.to_string(),
                from,
                to,
            });
        }
    }
    out
}

/// The old deployments history cleanup deletes now (§10.7), oldest first.
pub fn to_prune(dc: &Value, owned: &[Value]) -> Vec<String> {
    let Some(limit) = dc["spec"]["revisionHistoryLimit"].as_i64() else {
        return Vec::new();
    };
    let latest = int(dc, "/status/latestVersion");
    let mut candidates: Vec<&Value> = match active_of(owned).map(version_of) {
        Some(active) => owned.iter().filter(|rc| version_of(rc) < active).collect(),
        None => owned.iter().filter(|rc| version_of(rc) != latest).collect(),
    };
    candidates.sort_by_key(|rc| version_of(rc));
    let extra = candidates.len().saturating_sub(limit.max(0) as usize);
    candidates[..extra]
        .iter()
        .filter(|rc| int(rc, "/spec/replicas") == 0)
        .map(|rc| str_at(rc, "/metadata/name").to_string())
        .collect()
}

/// Whether a template has a container without an image (never deployed).
pub fn has_unresolved_image(dc: &Value) -> bool {
    dc["spec"]["template"]["spec"]["containers"]
        .as_array()
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["image"].as_str().is_none_or(|i| i.trim().is_empty()))
        })
}

/// Labels as a map, for selectors.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    crate::types::labels::map_at(obj, "/metadata/labels")
}

/// The DeploymentConfig resource, when the API serves it.
pub fn resource() -> Option<&'static std::sync::Arc<Resource>> {
    catalog::find("apps.openshift.io", "v1", "deploymentconfigs")
}

const WORKERS: usize = 2;

#[derive(Clone)]
struct Controller {
    client: Client,
    dcs: Informer,
    rcs: Informer,
    recorder: Recorder,
    res: &'static Resource,
}

fn now() -> String {
    crate::types::now()
}

/// Whether `rc` names `dc` (uid) as its controller.
fn controlled_by<'a>(rc: &'a Value, uid: &str) -> Option<&'a Value> {
    rc["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true && r["uid"] == uid)
}

fn has_controller(rc: &Value) -> bool {
    rc["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true))
}

impl Controller {
    fn rcs_res() -> &'static Resource {
        catalog::of(Kind::ReplicationController)
    }

    /// The deployments this DC owns after adopting and releasing (§10.2).
    async fn claim(&self, dc: &Value) -> Result<Vec<Value>> {
        let ns = str_at(dc, "/metadata/namespace");
        let name = str_at(dc, "/metadata/name");
        let uid = str_at(dc, "/metadata/uid");
        let mut owned = Vec::new();
        for rc in self.rcs.list_namespace(ns) {
            let matches = labels_of(&rc)
                .get(os::DEPLOYMENT_CONFIG_ANNOTATION)
                .map(String::as_str)
                == Some(name);
            let rc_name = str_at(&rc, "/metadata/name");
            if controlled_by(&rc, uid).is_some() {
                if matches {
                    owned.push((*rc).clone());
                    continue;
                }
                let refs: Vec<Value> = rc["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["uid"] != uid)
                    .cloned()
                    .collect();
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": rc["metadata"]["resourceVersion"]}});
                match self
                    .client
                    .patch(Self::rcs_res(), Some(ns), rc_name, &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || matches!(e, crate::client::Error::Invalid(_)) => {
                    }
                    Err(e) => return Err(e.into()),
                }
            } else if matches && !has_controller(&rc) {
                // Adopt only for a DC that is still there and not being deleted.
                let fresh = self.client.get(self.res, Some(ns), name).await?;
                if str_at(&fresh, "/metadata/uid") != uid
                    || fresh.pointer("/metadata/deletionTimestamp").is_some()
                {
                    return Err(Error::Other(format!(
                        "deployment config {ns}/{name} is gone or being deleted; not adopting {rc_name}"
                    )));
                }
                let mut refs = rc["metadata"]["ownerReferences"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                refs.push(
                    json!({"apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
                    "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}),
                );
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": rc["metadata"]["resourceVersion"]}});
                let adopted = self
                    .client
                    .patch(Self::rcs_res(), Some(ns), rc_name, &Patch::Merge(patch))
                    .await?;
                owned.push(adopted);
            }
        }
        Ok(owned)
    }

    /// Writes the status computed from `owned` unless the DC already shows it.
    async fn update_status(
        &self,
        dc: &Value,
        owned: &[Value],
        observe: bool,
        extra: Option<&Condition>,
    ) -> Result<()> {
        let status = compute_status(dc, owned, observe, extra, &now());
        if status == dc["status"] {
            return Ok(());
        }
        let mut updated = dc.clone();
        updated["status"] = status;
        self.client.update_status(self.res, &updated).await?;
        Ok(())
    }

    /// Marks the unfinished deployments cancelled; true if any was still in flight.
    async fn cancel_running(&self, dc: &Value, owned: &[Value]) -> Result<bool> {
        let version = int(dc, "/status/latestVersion");
        let mut in_flight = false;
        for rc in owned.iter().filter(|rc| !is_finished(rc)) {
            in_flight = true;
            if is_cancelled(rc) {
                continue;
            }
            let ns = str_at(rc, "/metadata/namespace");
            let name = str_at(rc, "/metadata/name");
            let patch = json!({"metadata": {"annotations": {
                os::DEPLOYMENT_CANCELLED_ANNOTATION: "true", os::DEPLOYMENT_STATUS_REASON_ANNOTATION: NEWER_RUNNING}}});
            match self
                .client
                .patch(Self::rcs_res(), Some(ns), name, &Patch::Merge(patch))
                .await
            {
                Ok(_) => {
                    let message =
                        format!("Cancelled deployment {name:?} superceded by version {version}");
                    self.recorder
                        .event(dc, EventType::Normal, "DeploymentCancelled", &message)
                        .await;
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    let message = format!(
                        "Failed to cancel deployment {name:?} superceded by version {version}: {e}"
                    );
                    self.recorder
                        .event(
                            dc,
                            EventType::Warning,
                            "DeploymentCancellationFailed",
                            &message,
                        )
                        .await;
                    return Err(e.into());
                }
            }
        }
        Ok(in_flight)
    }

    /// Deletes the old deployments beyond the history limit; an error says which failed.
    async fn cleanup(&self, dc: &Value, owned: &[Value]) -> std::result::Result<(), String> {
        let ns = str_at(dc, "/metadata/namespace");
        let params = DeleteParams {
            propagation: Some(Propagation::Background),
            ..Default::default()
        };
        let mut errors = Vec::new();
        for name in to_prune(dc, owned) {
            match self
                .client
                .delete(Self::rcs_res(), Some(ns), &name, &params)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("[{}]", errors.join(", ")))
        }
    }

    /// The latest deployment finished: capacity to the last Complete one (§10.6).
    async fn reconcile_finished(&self, dc: &Value, mut owned: Vec<Value>) -> Result<()> {
        let ns = str_at(dc, "/metadata/namespace");
        for Scale { name, from, to } in scales(dc, &owned) {
            let patch = json!({"spec": {"replicas": to}});
            match self
                .client
                .patch(Self::rcs_res(), Some(ns), &name, &Patch::Merge(patch))
                .await
            {
                Ok(rc) => {
                    let message =
                        format!("Scaled replication controller {name:?} from {from} to {to}");
                    self.recorder
                        .event(
                            dc,
                            EventType::Normal,
                            "ReplicationControllerScaled",
                            &message,
                        )
                        .await;
                    if let Some(slot) = owned
                        .iter_mut()
                        .find(|o| str_at(o, "/metadata/name") == name)
                    {
                        *slot = rc;
                    }
                }
                Err(e) => {
                    let message = format!(
                        "Failed to scale replication controler {name:?} from {from} to {to}: {e}"
                    );
                    self.recorder
                        .event(
                            dc,
                            EventType::Warning,
                            "ReplicationControllerScaleFailed",
                            &message,
                        )
                        .await;
                    return Err(e.into());
                }
            }
        }
        if let Err(e) = self.cleanup(dc, &owned).await {
            let message = format!("Couldn't clean up replication controllers: {e}");
            self.recorder
                .event(
                    dc,
                    EventType::Warning,
                    "ReplicationControllerCleanupFailed",
                    &message,
                )
                .await;
        }
        self.update_status(dc, &owned, true, None).await
    }

    /// Creates the deployment of the latest version (§10.3 step 10).
    async fn create_deployment(&self, dc: &Value, mut owned: Vec<Value>) -> Result<()> {
        let ns = str_at(dc, "/metadata/namespace");
        let name = str_at(dc, "/metadata/name");
        let version = int(dc, "/status/latestVersion");
        let rc = deployment_for(dc).map_err(|e| {
            Error::Other(format!(
                "couldn't make deployment from (potentially invalid) deployment config {ns}/{name}: {e}"
            ))
        })?;
        let rc_name = str_at(&rc, "/metadata/name").to_string();
        let failed = match self.client.create(Self::rcs_res(), Some(ns), &rc).await {
            Ok(made) => {
                let message =
                    format!("Created new replication controller {rc_name:?} for version {version}");
                self.recorder
                    .event(dc, EventType::Normal, "DeploymentCreated", &message)
                    .await;
                owned.push(made);
                if let Err(e) = self.cleanup(dc, &owned).await {
                    let message = format!("Couldn't clean up deployments: {e}");
                    self.recorder
                        .event(dc, EventType::Warning, "DeploymentCleanupFailed", &message)
                        .await;
                }
                let created = Condition {
                    kind: "Progressing",
                    status: "True",
                    reason: "NewReplicationControllerCreated",
                    message,
                };
                return self.update_status(dc, &owned, true, Some(&created)).await;
            }
            Err(e) if e.is_already_exists() => {
                let existing = self.client.get(Self::rcs_res(), Some(ns), &rc_name).await?;
                let uid = str_at(dc, "/metadata/uid");
                if controlled_by(&existing, uid).is_some()
                    || (!has_controller(&existing)
                        && labels_of(&existing)
                            .get(os::DEPLOYMENT_CONFIG_ANNOTATION)
                            .map(String::as_str)
                            == Some(name))
                {
                    // Ours (or ours to adopt): the caches have not caught up yet.
                    return Err(Error::Other(format!(
                        "caches for RC {ns}/{rc_name} are stale, waiting to catch up"
                    )));
                }
                format!("deployment {ns}/{rc_name} already exists and it couldn't be adopted")
            }
            Err(e) => e.to_string(),
        };
        let message = format!("Couldn't deploy version {version}: {failed}");
        self.recorder
            .event(dc, EventType::Warning, "DeploymentCreationFailed", &message)
            .await;
        let condition = Condition {
            kind: "Progressing",
            status: "False",
            reason: "ReplicationControllerCreateError",
            message: failed.clone(),
        };
        self.update_status(dc, &owned, true, Some(&condition))
            .await?;
        Err(Error::Other(failed))
    }

    /// One pass over a DC (§10.3).
    async fn handle(&self, key: String) -> Result<Action> {
        let Some(dc) = self.dcs.get(&key) else {
            return Ok(Action::Done);
        };
        let mut dc = (*dc).clone();
        let no_triggers = dc["spec"]["triggers"].as_array().is_none_or(Vec::is_empty);
        if int(&dc, "/status/latestVersion") == 0 && no_triggers {
            self.update_status(&dc, &[], true, None).await?;
            return Ok(Action::Done);
        }
        let owned = self.claim(&dc).await?;
        if dc.pointer("/metadata/deletionTimestamp").is_some() {
            self.update_status(&dc, &owned, true, None).await?;
            return Ok(Action::Done);
        }
        if dc["spec"]["paused"] == true {
            if let Err(e) = self.cleanup(&dc, &owned).await {
                let message = format!("Couldn't clean up deployments: {e}");
                self.recorder
                    .event(&dc, EventType::Warning, "DeploymentCleanupFailed", &message)
                    .await;
            }
            self.update_status(&dc, &owned, true, None).await?;
            return Ok(Action::Done);
        }
        let latest_version = int(&dc, "/status/latestVersion");
        let highest = owned.iter().map(version_of).max().unwrap_or(0);
        if highest > latest_version {
            // Deployments of an earlier DC of this name: catch the version up, one a pass.
            dc["status"]["latestVersion"] = json!(latest_version + 1);
            self.client.update_status(self.res, &dc).await?;
            return Ok(Action::Done);
        }
        let latest = latest_of(&dc, &owned).cloned();
        if latest.is_none() && self.cancel_running(&dc, &owned).await? {
            let message = format!(
                "Deployment of version {latest_version} awaiting cancellation of older running deployments"
            );
            self.recorder
                .event(
                    &dc,
                    EventType::Normal,
                    "DeploymentAwaitingCancellation",
                    &message,
                )
                .await;
            return Err(Error::Other(message));
        }
        if has_unresolved_image(&dc) {
            self.update_status(&dc, &owned, true, None).await?;
            return Ok(Action::Done);
        }
        match evaluate_triggers(&dc, latest.as_ref()).map_err(Error::Other)? {
            Trigger::Skip => {
                self.update_status(&dc, &owned, true, None).await?;
                return Ok(Action::Done);
            }
            Trigger::Fire(details) => {
                dc["status"]["latestVersion"] = json!(latest_version + 1);
                dc["status"]["details"] = details;
                self.client.update_status(self.res, &dc).await?;
                return Ok(Action::Done);
            }
            Trigger::None => {}
        }
        match latest {
            Some(l) if !is_finished(&l) => {
                self.update_status(&dc, &owned, false, None).await?;
            }
            Some(_) => self.reconcile_finished(&dc, owned).await?,
            None => self.create_deployment(&dc, owned).await?,
        }
        Ok(Action::Done)
    }
}

/// Starts the DeploymentConfig controller (when the API serves DeploymentConfigs).
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let Some(res) = resource() else {
        return;
    };
    let dcs = ctx.informers.get(res);
    let rcs = ctx.informers.get(catalog::of(Kind::ReplicationController));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        dcs: dcs.clone(),
        rcs: rcs.clone(),
        recorder: ctx.recorder("deploymentconfig-controller"),
        res,
    });
    let known = dcs.clone();
    runtime::Controller::new("deploymentconfig-controller")
        .reconciles(&dcs)
        // An RC's change (not a repeat in the same resourceVersion) goes to the
        // DeploymentConfig it was made for, if there is one.
        .watches(&rcs, move |change, queue| {
            let rc = match change {
                Change::Updated { old, new } => {
                    if old["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"] {
                        return;
                    }
                    new
                }
                Change::Added(rc) | Change::Deleted(rc) => rc,
            };
            let Some(dc) = rc["metadata"]["annotations"][os::DEPLOYMENT_CONFIG_ANNOTATION].as_str()
            else {
                return;
            };
            let key = format!("{}/{dc}", str_at(rc, "/metadata/namespace"));
            if known.get(&key).is_some() {
                queue.add(key);
            }
        })
        .workers(WORKERS)
        .run(sup, move |key| {
            let controller = controller.clone();
            async move { controller.handle(key).await }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-30T12:00:00Z";

    fn dc() -> Value {
        json!({
            "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "generation": 3,
                         "labels": {"app": "web"}},
            "spec": {
                "replicas": 3,
                "selector": {"app": "web"},
                "triggers": [{"type": "ConfigChange"}],
                "strategy": {"type": "Rolling", "rollingParams": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": " img:1 "}]}},
            },
            "status": {"latestVersion": 2, "details": {"message": "config change"}},
        })
    }

    fn rc(version: i64, phase: &str, replicas: i64) -> Value {
        let mut d = dc();
        d["status"]["latestVersion"] = json!(version);
        let mut rc = deployment_for(&d).unwrap();
        rc["metadata"]["annotations"][os::DEPLOYMENT_PHASE_ANNOTATION] = json!(phase);
        rc["spec"]["replicas"] = json!(replicas);
        rc["status"] = json!({"replicas": replicas, "readyReplicas": replicas,
                              "availableReplicas": replicas});
        rc
    }

    #[test]
    fn the_deployment_of_a_version_is_the_dc_at_that_version() {
        let rc = deployment_for(&dc()).unwrap();
        assert_eq!(rc["metadata"]["name"], "web-2");
        assert_eq!(
            rc["metadata"]["labels"][os::DEPLOYMENT_CONFIG_ANNOTATION],
            "web"
        );
        assert_eq!(rc["metadata"]["labels"]["app"], "web");
        let a = &rc["metadata"]["annotations"];
        assert_eq!(a[os::DEPLOYMENT_PHASE_ANNOTATION], "New");
        assert_eq!(a[os::DEPLOYMENT_VERSION_ANNOTATION], "2");
        assert_eq!(a[os::DESIRED_REPLICAS_ANNOTATION], "3");
        assert_eq!(a[os::DEPLOYMENT_REPLICAS_ANNOTATION], "0");
        assert_eq!(a[os::DEPLOYMENT_STATUS_REASON_ANNOTATION], "config change");
        assert_eq!(decode_dc(&rc).unwrap(), dc());
        assert_eq!(rc["spec"]["replicas"], 0);
        assert_eq!(
            rc["spec"]["selector"],
            json!({"app": "web", "deploymentconfig": "web", "deployment": "web-2"})
        );
        let t = &rc["spec"]["template"];
        assert_eq!(t["metadata"]["labels"]["deployment"], "web-2");
        assert_eq!(
            t["metadata"]["annotations"][os::DEPLOYMENT_ANNOTATION],
            "web-2"
        );
        assert_eq!(t["spec"]["containers"][0]["image"], "img:1");
        let owner = &rc["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["uid"], &owner["controller"]),
            (&json!("DeploymentConfig"), &json!("u1"), &json!(true))
        );
        assert_eq!(version_of(&rc), 2);
        assert_eq!(phase_of(&rc), "New");
    }

    #[test]
    fn only_a_template_change_fires_the_config_change_trigger() {
        let mut d = dc();
        d["status"]["latestVersion"] = json!(0);
        assert!(matches!(evaluate_triggers(&d, None), Ok(Trigger::Fire(_))));
        let d = dc();
        assert_eq!(evaluate_triggers(&d, None), Ok(Trigger::None));
        let latest = deployment_for(&d).unwrap();
        assert_eq!(evaluate_triggers(&d, Some(&latest)), Ok(Trigger::None));
        let mut scaled = d.clone();
        scaled["spec"]["replicas"] = json!(9);
        assert_eq!(evaluate_triggers(&scaled, Some(&latest)), Ok(Trigger::None));
        let mut changed = d.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}]);
        assert_eq!(
            evaluate_triggers(&changed, Some(&latest)),
            Ok(Trigger::Fire(config_change()))
        );
        let mut manual = changed.clone();
        manual["spec"]["triggers"] = json!([]);
        assert_eq!(evaluate_triggers(&manual, Some(&latest)), Ok(Trigger::None));
        let mut paused = changed;
        paused["spec"]["paused"] = json!(true);
        assert_eq!(evaluate_triggers(&paused, Some(&latest)), Ok(Trigger::None));
    }

    #[test]
    fn surge_rounds_up_and_unavailable_down() {
        let mut d = dc();
        assert_eq!(surge_and_unavailable(&d, 3), (1, 0));
        assert_eq!(surge_and_unavailable(&d, 10), (3, 2));
        d["spec"]["strategy"]["rollingParams"] = json!({"maxSurge": 0, "maxUnavailable": "10%"});
        assert_eq!(surge_and_unavailable(&d, 3), (0, 1));
        d["spec"]["strategy"]["type"] = json!("Recreate");
        assert_eq!(surge_and_unavailable(&d, 3), (0, 0));
    }

    #[test]
    fn status_sums_the_deployments_and_follows_the_latest_phase() {
        let owned = vec![rc(1, "Complete", 0), rc(2, "Running", 2)];
        let st = compute_status(&dc(), &owned, true, None, NOW);
        assert_eq!(st["observedGeneration"], 3);
        assert_eq!(st["replicas"], 2);
        assert_eq!(st["updatedReplicas"], 2);
        assert_eq!(st["unavailableReplicas"], 0);
        let cond = |st: &Value, t: &str| {
            st["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .cloned()
                .unwrap_or(Value::Null)
        };
        // 2 of 3 with 0 unavailable allowed: not available.
        assert_eq!(cond(&st, "Available")["status"], "False");
        let p = cond(&st, "Progressing");
        assert_eq!(
            (&p["status"], &p["reason"]),
            (&json!("True"), &json!("ReplicationControllerUpdated"))
        );
        // The same state again: nothing changes, so a stored status is not rewritten.
        let mut again = dc();
        again["status"] = st.clone();
        assert_eq!(compute_status(&again, &owned, true, None, "later"), st);
        let done = vec![rc(1, "Complete", 0), rc(2, "Complete", 3)];
        let st = compute_status(&again, &done, true, None, NOW);
        assert_eq!(cond(&st, "Available")["status"], "True");
        assert_eq!(
            cond(&st, "Progressing")["message"],
            "replication controller \"web-2\" successfully rolled out"
        );
        let mut paused = again.clone();
        paused["spec"]["paused"] = json!(true);
        let st = compute_status(&paused, &done, true, None, NOW);
        assert_eq!(cond(&st, "Progressing")["reason"], "DeploymentConfigPaused");
        let mut resumed = dc();
        resumed["status"] = st;
        let st = compute_status(&resumed, &done, true, None, NOW);
        assert_eq!(
            cond(&st, "Progressing")["reason"],
            "NewReplicationControllerAvailable"
        );
        let mut cancelled = rc(2, "Failed", 0);
        cancelled["metadata"]["annotations"][os::DEPLOYMENT_CANCELLED_ANNOTATION] = json!("True");
        let st = compute_status(&dc(), &[cancelled], false, None, NOW);
        assert_eq!(cond(&st, "Progressing")["reason"], "RolloutCancelled");
        assert!(st.get("observedGeneration").is_none());
    }

    #[test]
    fn the_last_complete_deployment_gets_the_replicas_and_the_rest_none() {
        let owned = vec![rc(1, "Complete", 3), rc(2, "Failed", 2)];
        assert_eq!(
            scales(&dc(), &owned),
            vec![Scale {
                name: "web-2".into(),
                from: 2,
                to: 0
            }]
        );
        let mut test = dc();
        test["spec"]["test"] = json!(true);
        assert_eq!(scales(&test, &owned).len(), 2);
    }

    #[test]
    fn history_cleanup_keeps_the_limit_and_skips_what_still_runs() {
        let mut d = dc();
        d["spec"]["revisionHistoryLimit"] = json!(1);
        d["status"]["latestVersion"] = json!(4);
        let owned = vec![
            rc(1, "Complete", 0),
            rc(2, "Complete", 1),
            rc(3, "Complete", 0),
            rc(4, "Complete", 3),
        ];
        // Candidates 1..3 (older than the active 4); two too many: 1 goes, 2 still runs.
        assert_eq!(to_prune(&d, &owned), vec!["web-1".to_string()]);
        d["spec"]
            .as_object_mut()
            .unwrap()
            .remove("revisionHistoryLimit");
        assert!(to_prune(&d, &owned).is_empty());
    }
}
