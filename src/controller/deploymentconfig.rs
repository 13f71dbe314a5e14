//! The DeploymentConfig controller's decisions (spec `deploymentconfigs.md` §9, §10): the
//! deployment (ReplicationController) a DC gets for a version, when a ConfigChange trigger
//! fires, the status and conditions computed from the owned deployments, which
//! deployments to scale once the latest one finished, and which old ones history
//! cleanup deletes. Pure functions over the API objects, so every rule is unit-tested;
//! the controller loop applies them through the client.

use crate::types::meta::Meta;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::dcview::{self, Dc, DeploymentConfig};
use super::{Action, Context, Error, Result, Supervisor, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, DeleteParams, Patch, Propagation};
use crate::client::{Kind, Resource, catalog};
use crate::types::json::{array_at, bool_at, int_at, str_at};
use crate::types::openshift as os;

pub const NEWER_RUNNING: &str = "newer deployment was found running";

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
    dcview::marks_cancelled(os::annotation(rc, os::DEPLOYMENT_CANCELLED_ANNOTATION))
}

/// The DC encoded in a deployment when it was made.
pub fn decode_dc(rc: &Value) -> Result<Value, String> {
    os::decode_config(rc)
}

/// The deployment (RC) of `dc` at its `status.latestVersion` (§9).
pub fn deployment_for(dc: &Dc<'_>) -> Result<Value, String> {
    let name = dc.name();
    let ns = dc.namespace();
    let version = dc.status.latest_version;
    let rc_name = os::deployment_name(name, version);
    let encoded = serde_json::to_string(dc.obj).map_err(|e| e.to_string())?;
    let mut labels = dc.metadata.labels.clone().unwrap_or_default();
    labels.insert(os::DEPLOYMENT_CONFIG_ANNOTATION.into(), name.into());
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
        json!(dc.spec.replicas.to_string()),
    );
    annotations.insert(os::DEPLOYMENT_REPLICAS_ANNOTATION.into(), json!("0"));
    let message = &dc.status.details.message;
    if !message.is_empty() {
        annotations.insert(
            os::DEPLOYMENT_STATUS_REASON_ANNOTATION.into(),
            json!(message),
        );
    }
    if let Some(v) = dcview::annotation(&dc.metadata, os::DEPLOYMENT_IGNORE_POD_ANNOTATION) {
        annotations.insert(os::DEPLOYMENT_IGNORE_POD_ANNOTATION.into(), json!(v));
    }
    let mut template = dc.spec.template.clone();
    if !template.is_object() {
        return Err("the deployment config has no template".into());
    }
    let mut selector = dc.spec.selector.clone();
    for (k, v) in [
        (os::DEPLOYMENT_CONFIG_POD_LABEL, name),
        (os::DEPLOYMENT_POD_LABEL, rc_name.as_str()),
    ] {
        selector.insert(k.into(), v.into());
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
    if dc.spec.min_ready_seconds > 0 {
        spec["minReadySeconds"] = json!(dc.spec.min_ready_seconds);
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
                "uid": dc.metadata.uid,
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

fn config_change() -> Value {
    json!({"message": "config change", "causes": [{"type": "ConfigChange"}]})
}

/// The images of a list of containers (those that have one).
fn images(containers: &[Value]) -> Vec<&str> {
    containers
        .iter()
        .filter_map(|c| c.get("image").and_then(Value::as_str))
        .collect()
}

/// Whether the DC's triggers ask for a new version, given its latest deployment.
pub fn evaluate_triggers(dc: &DeploymentConfig, latest: Option<&Value>) -> Result<Trigger, String> {
    if dc.spec.paused {
        return Ok(Trigger::None);
    }
    let (config, image) = (
        dc.has_trigger("ConfigChange"),
        dc.has_trigger("ImageChange"),
    );
    if !config && !image {
        return Ok(Trigger::None);
    }
    if dc.status.latest_version == 0 {
        if image {
            let all_resolved = dc
                .spec
                .triggers
                .iter()
                .filter(|t| t.type_ == "ImageChange")
                .all(|t| {
                    t.image_change_params
                        .as_ref()
                        .is_some_and(|p| !p.last_triggered_image.is_empty())
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
        let had = images(array_at(latest, "/spec/template/spec/containers"));
        let changed: Vec<Value> = images(array_at(&dc.spec.template, "/spec/containers"))
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
        let then = dcview::encoded(latest)?;
        if then.spec.template != dc.spec.template {
            return Ok(Trigger::Fire(config_change()));
        }
    }
    Ok(Trigger::None)
}

/// `maxSurge` and `maxUnavailable` of a Rolling strategy against `replicas`: surge rounds
/// up, unavailable down; both 0 makes unavailable 1. Other strategies: (0, 0).
pub fn surge_and_unavailable(dc: &DeploymentConfig, replicas: i64) -> (i64, i64) {
    let strategy = &dc.spec.strategy;
    if strategy.type_ != "Rolling" {
        return (0, 0);
    }
    let params = strategy.rolling_params.as_ref();
    let resolve = |v: Option<&IntOrString>, up: bool| -> i64 {
        match v {
            Some(IntOrString::Int(n)) => i64::from(*n),
            Some(IntOrString::String(s)) => {
                match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                    Some(pct) if up => (pct * replicas + 99) / 100,
                    Some(pct) => pct * replicas / 100,
                    None => s.parse().unwrap_or(0),
                }
            }
            None => 0,
        }
    };
    let surge = resolve(params.and_then(|p| p.max_surge.as_ref()), true);
    let unavailable = resolve(params.and_then(|p| p.max_unavailable.as_ref()), false);
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
    let pos = conds.iter().position(|x| str_at(x, "/type") == c.kind);
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
            let same_status = str_at(old, "/status") == c.status;
            if same_status && str_at(old, "/reason") == c.reason {
                return;
            }
            if same_status {
                new["lastTransitionTime"] =
                    old.get("lastTransitionTime").cloned().unwrap_or_default();
            }
            conds[i] = new;
        }
        None => conds.push(new),
    }
}

fn remove_condition(conds: &mut Vec<Value>, kind: &str) {
    conds.retain(|c| str_at(c, "/type") != kind);
}

/// The highest-version owned deployment whose version is `status.latestVersion`.
pub fn latest_of<'a>(dc: &DeploymentConfig, owned: &'a [Value]) -> Option<&'a Value> {
    let version = dc.status.latest_version;
    owned
        .iter()
        .max_by_key(|rc| version_of(rc))
        .filter(|rc| version > 0 && version_of(rc) == version)
}

/// The DC's status from its owned deployments (§10.5, §10.8, §10.9). `observe` says
/// whether `observedGeneration` advances; `extra` is set last.
pub fn compute_status(
    dc: &Dc<'_>,
    owned: &[Value],
    observe: bool,
    extra: Option<&Condition>,
    now: &str,
) -> Value {
    let sum = |p: &str| owned.iter().map(|rc| int_at(rc, p)).sum::<i64>();
    let replicas = sum("/status/replicas");
    let available = sum("/status/availableReplicas");
    let latest = latest_of(dc, owned);
    let updated = latest.map_or(0, |rc| int_at(rc, "/status/replicas"));
    // The stored status is what is written back: its fields the view does not name stay.
    let mut status = dc
        .obj
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if observe {
        status.insert(
            "observedGeneration".into(),
            json!(dc.metadata.generation.unwrap_or(0)),
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
    let mut conds: Vec<Value> = array_at(dc.obj, "/status/conditions").to_vec();
    let desired = dc.spec.replicas;
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
    // Setting Available left the stored Progressing condition as it was.
    let progressing = dc
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| c.reason.clone());
    if dc.spec.paused {
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
                    let old_updated = dc.status.updated_replicas;
                    let old_old = dc.status.replicas - old_updated;
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
pub fn scales(dc: &DeploymentConfig, owned: &[Value]) -> Vec<Scale> {
    let active = active_of(owned).map(|rc| str_at(rc, "/metadata/name").to_string());
    let mut out = Vec::new();
    for rc in owned {
        let name = str_at(rc, "/metadata/name");
        let to = if !dc.spec.test && active.as_deref() == Some(name) {
            dc.spec.replicas
        } else {
            0
        };
        let from = int_at(rc, "/spec/replicas");
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
pub fn to_prune(dc: &DeploymentConfig, owned: &[Value]) -> Vec<String> {
    let Some(limit) = dc.spec.revision_history_limit else {
        return Vec::new();
    };
    let latest = dc.status.latest_version;
    let mut candidates: Vec<&Value> = match active_of(owned).map(version_of) {
        Some(active) => owned.iter().filter(|rc| version_of(rc) < active).collect(),
        None => owned.iter().filter(|rc| version_of(rc) != latest).collect(),
    };
    candidates.sort_by_key(|rc| version_of(rc));
    let extra = candidates.len().saturating_sub(limit.max(0) as usize);
    candidates[..extra]
        .iter()
        .filter(|rc| int_at(rc, "/spec/replicas") == 0)
        .map(|rc| str_at(rc, "/metadata/name").to_string())
        .collect()
}

/// Whether a template has a container without an image (never deployed).
pub fn has_unresolved_image(dc: &DeploymentConfig) -> bool {
    array_at(&dc.spec.template, "/spec/containers")
        .iter()
        .any(|c| str_at(c, "/image").trim().is_empty())
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
fn controlled_by(rc: &Value, uid: &str) -> bool {
    array_at(rc, "/metadata/ownerReferences")
        .iter()
        .any(|r| bool_at(r, "/controller") && str_at(r, "/uid") == uid)
}

fn has_controller(rc: &Value) -> bool {
    array_at(rc, "/metadata/ownerReferences")
        .iter()
        .any(|r| bool_at(r, "/controller"))
}

impl Controller {
    fn rcs_res() -> &'static Resource {
        catalog::of(Kind::ReplicationController)
    }

    /// The deployments this DC owns after adopting and releasing (§10.2).
    async fn claim(&self, dc: &Dc<'_>) -> Result<Vec<Value>> {
        let (ns, name, uid) = (dc.namespace(), dc.name(), dc.uid());
        let mut owned = Vec::new();
        for rc in self.rcs.list_namespace(ns) {
            let matches = labels_of(&rc)
                .get(os::DEPLOYMENT_CONFIG_ANNOTATION)
                .map(String::as_str)
                == Some(name);
            let rc_name = str_at(&rc, "/metadata/name");
            if controlled_by(&rc, uid) {
                if matches {
                    owned.push((*rc).clone());
                    continue;
                }
                let refs: Vec<Value> = array_at(&rc, "/metadata/ownerReferences")
                    .iter()
                    .filter(|r| str_at(r, "/uid") != uid)
                    .cloned()
                    .collect();
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": str_at(&rc, "/metadata/resourceVersion")}});
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
                    || !str_at(&fresh, "/metadata/deletionTimestamp").is_empty()
                {
                    return Err(Error::Other(format!(
                        "deployment config {ns}/{name} is gone or being deleted; not adopting {rc_name}"
                    )));
                }
                let mut refs = array_at(&rc, "/metadata/ownerReferences").to_vec();
                refs.push(
                    json!({"apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
                    "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}),
                );
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": str_at(&rc, "/metadata/resourceVersion")}});
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
        dc: &Dc<'_>,
        owned: &[Value],
        observe: bool,
        extra: Option<&Condition>,
    ) -> Result<()> {
        let status = compute_status(dc, owned, observe, extra, &now());
        if dc.obj.get("status") == Some(&status) {
            return Ok(());
        }
        let mut updated = dc.obj.clone();
        updated["status"] = status;
        self.client.update_status(self.res, &updated).await?;
        Ok(())
    }

    /// Marks the unfinished deployments cancelled; true if any was still in flight.
    async fn cancel_running(&self, dc: &Dc<'_>, owned: &[Value]) -> Result<bool> {
        let version = dc.status.latest_version;
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
                        .normal(dc.obj, "DeploymentCancelled", &message)
                        .await;
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    let message = format!(
                        "Failed to cancel deployment {name:?} superceded by version {version}: {e}"
                    );
                    self.recorder
                        .warning(dc.obj, "DeploymentCancellationFailed", &message)
                        .await;
                    return Err(e.into());
                }
            }
        }
        Ok(in_flight)
    }

    /// [`Self::cleanup`], a failure recorded as the Warning event `reason`.
    async fn cleanup_or_warn(&self, dc: &Dc<'_>, owned: &[Value], reason: &str, what: &str) {
        if let Err(e) = self.cleanup(dc, owned).await {
            let message = format!("Couldn't clean up {what}: {e}");
            self.recorder.warning(dc.obj, reason, &message).await;
        }
    }

    /// Deletes the old deployments beyond the history limit; an error says which failed.
    async fn cleanup(&self, dc: &Dc<'_>, owned: &[Value]) -> std::result::Result<(), String> {
        let ns = dc.namespace();
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
    async fn reconcile_finished(&self, dc: &Dc<'_>, mut owned: Vec<Value>) -> Result<()> {
        let ns = dc.namespace();
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
                        .normal(dc.obj, "ReplicationControllerScaled", &message)
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
                        .warning(dc.obj, "ReplicationControllerScaleFailed", &message)
                        .await;
                    return Err(e.into());
                }
            }
        }
        self.cleanup_or_warn(
            dc,
            &owned,
            "ReplicationControllerCleanupFailed",
            "replication controllers",
        )
        .await;
        self.update_status(dc, &owned, true, None).await
    }

    /// Creates the deployment of the latest version (§10.3 step 10).
    async fn create_deployment(&self, dc: &Dc<'_>, mut owned: Vec<Value>) -> Result<()> {
        let (ns, name) = (dc.namespace(), dc.name());
        let version = dc.status.latest_version;
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
                    .normal(dc.obj, "DeploymentCreated", &message)
                    .await;
                owned.push(made);
                self.cleanup_or_warn(dc, &owned, "DeploymentCleanupFailed", "deployments")
                    .await;
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
                if controlled_by(&existing, dc.uid())
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
            .warning(dc.obj, "DeploymentCreationFailed", &message)
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
    async fn handle(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.dcs.get(&key) else {
            return Ok(Action::Done);
        };
        let dc = Dc::decode(&obj)?;
        let latest_version = dc.status.latest_version;
        if latest_version == 0 && dc.spec.triggers.is_empty() {
            self.update_status(&dc, &[], true, None).await?;
            return Ok(Action::Done);
        }
        let owned = self.claim(&dc).await?;
        if dc.metadata.deletion_timestamp.is_some() {
            self.update_status(&dc, &owned, true, None).await?;
            return Ok(Action::Done);
        }
        if dc.spec.paused {
            self.cleanup_or_warn(&dc, &owned, "DeploymentCleanupFailed", "deployments")
                .await;
            self.update_status(&dc, &owned, true, None).await?;
            return Ok(Action::Done);
        }
        let highest = owned.iter().map(version_of).max().unwrap_or(0);
        if highest > latest_version {
            // Deployments of an earlier DC of this name: catch the version up, one a pass.
            let mut updated = (*obj).clone();
            updated["status"]["latestVersion"] = json!(latest_version + 1);
            self.client.update_status(self.res, &updated).await?;
            return Ok(Action::Done);
        }
        let latest = latest_of(&dc, &owned).cloned();
        if latest.is_none() && self.cancel_running(&dc, &owned).await? {
            let message = format!(
                "Deployment of version {latest_version} awaiting cancellation of older running deployments"
            );
            self.recorder
                .normal(dc.obj, "DeploymentAwaitingCancellation", &message)
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
                let mut updated = (*obj).clone();
                updated["status"]["latestVersion"] = json!(latest_version + 1);
                updated["status"]["details"] = details;
                self.client.update_status(self.res, &updated).await?;
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
                    if str_at(old, "/metadata/resourceVersion")
                        == str_at(new, "/metadata/resourceVersion")
                    {
                        return;
                    }
                    new
                }
                Change::Added(rc) | Change::Deleted(rc) => rc,
            };
            let Some(dc) = os::annotation(rc, os::DEPLOYMENT_CONFIG_ANNOTATION) else {
                return;
            };
            let key = format!("{}/{dc}", str_at(rc, "/metadata/namespace"));
            if known.get(&key).is_some() {
                queue.add(key);
            }
        })
        .workers(WORKERS)
        .run_with(sup, controller, Controller::handle);
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-30T12:00:00Z";

    fn view(dc: &Value) -> Dc<'_> {
        Dc::decode(dc).unwrap()
    }

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
        let mut rc = deployment_for(&view(&d)).unwrap();
        rc["metadata"]["annotations"][os::DEPLOYMENT_PHASE_ANNOTATION] = json!(phase);
        rc["spec"]["replicas"] = json!(replicas);
        rc["status"] = json!({"replicas": replicas, "readyReplicas": replicas,
                              "availableReplicas": replicas});
        rc
    }

    #[test]
    fn the_deployment_of_a_version_is_the_dc_at_that_version() {
        let rc = deployment_for(&view(&dc())).unwrap();
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
        assert!(matches!(
            evaluate_triggers(&view(&d), None),
            Ok(Trigger::Fire(_))
        ));
        let d = dc();
        assert_eq!(evaluate_triggers(&view(&d), None), Ok(Trigger::None));
        let latest = deployment_for(&view(&d)).unwrap();
        assert_eq!(
            evaluate_triggers(&view(&d), Some(&latest)),
            Ok(Trigger::None)
        );
        let mut scaled = d.clone();
        scaled["spec"]["replicas"] = json!(9);
        assert_eq!(
            evaluate_triggers(&view(&scaled), Some(&latest)),
            Ok(Trigger::None)
        );
        let mut changed = d.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}]);
        assert_eq!(
            evaluate_triggers(&view(&changed), Some(&latest)),
            Ok(Trigger::Fire(config_change()))
        );
        let mut manual = changed.clone();
        manual["spec"]["triggers"] = json!([]);
        assert_eq!(
            evaluate_triggers(&view(&manual), Some(&latest)),
            Ok(Trigger::None)
        );
        let mut paused = changed;
        paused["spec"]["paused"] = json!(true);
        assert_eq!(
            evaluate_triggers(&view(&paused), Some(&latest)),
            Ok(Trigger::None)
        );
    }

    #[test]
    fn surge_rounds_up_and_unavailable_down() {
        let mut d = dc();
        assert_eq!(surge_and_unavailable(&view(&d), 3), (1, 0));
        assert_eq!(surge_and_unavailable(&view(&d), 10), (3, 2));
        d["spec"]["strategy"]["rollingParams"] = json!({"maxSurge": 0, "maxUnavailable": "10%"});
        assert_eq!(surge_and_unavailable(&view(&d), 3), (0, 1));
        d["spec"]["strategy"]["type"] = json!("Recreate");
        assert_eq!(surge_and_unavailable(&view(&d), 3), (0, 0));
    }

    #[test]
    fn status_sums_the_deployments_and_follows_the_latest_phase() {
        let owned = vec![rc(1, "Complete", 0), rc(2, "Running", 2)];
        let st = compute_status(&view(&dc()), &owned, true, None, NOW);
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
        assert_eq!(
            compute_status(&view(&again), &owned, true, None, "later"),
            st
        );
        let done = vec![rc(1, "Complete", 0), rc(2, "Complete", 3)];
        let st = compute_status(&view(&again), &done, true, None, NOW);
        assert_eq!(cond(&st, "Available")["status"], "True");
        assert_eq!(
            cond(&st, "Progressing")["message"],
            "replication controller \"web-2\" successfully rolled out"
        );
        let mut paused = again.clone();
        paused["spec"]["paused"] = json!(true);
        let st = compute_status(&view(&paused), &done, true, None, NOW);
        assert_eq!(cond(&st, "Progressing")["reason"], "DeploymentConfigPaused");
        let mut resumed = dc();
        resumed["status"] = st;
        let st = compute_status(&view(&resumed), &done, true, None, NOW);
        assert_eq!(
            cond(&st, "Progressing")["reason"],
            "NewReplicationControllerAvailable"
        );
        let mut cancelled = rc(2, "Failed", 0);
        cancelled["metadata"]["annotations"][os::DEPLOYMENT_CANCELLED_ANNOTATION] = json!("True");
        let st = compute_status(&view(&dc()), &[cancelled], false, None, NOW);
        assert_eq!(cond(&st, "Progressing")["reason"], "RolloutCancelled");
        assert!(st.get("observedGeneration").is_none());
    }

    #[test]
    fn the_last_complete_deployment_gets_the_replicas_and_the_rest_none() {
        let owned = vec![rc(1, "Complete", 3), rc(2, "Failed", 2)];
        assert_eq!(
            scales(&view(&dc()), &owned),
            vec![Scale {
                name: "web-2".into(),
                from: 2,
                to: 0
            }]
        );
        let mut test = dc();
        test["spec"]["test"] = json!(true);
        assert_eq!(scales(&view(&test), &owned).len(), 2);
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
        assert_eq!(to_prune(&view(&d), &owned), vec!["web-1".to_string()]);
        d["spec"]
            .as_object_mut()
            .unwrap()
            .remove("revisionHistoryLimit");
        assert!(to_prune(&view(&d), &owned).is_empty());
    }
}
