//! The deployment controller: rolls each Deployment's pod template out through
//! ReplicaSets, as kube-controller-manager's (`pkg/controller/deployment`) does.
//!
//! The ReplicaSet whose template equals the Deployment's (the `pod-template-hash` label
//! aside) is the new one; it is made when missing, named by a hash of the template, and
//! carries the revision (`deployment.kubernetes.io/revision`, one more than any old one's).
//! `RollingUpdate` grows the new set while all sets together stay within
//! `replicas + maxSurge`, and shrinks old sets (unavailable pods first) while at least
//! `replicas - maxUnavailable` pods stay available; `Recreate` scales every old set to
//! zero, waits until their pods are gone, then scales the new one up. A change of
//! `replicas` mid-rollout is spread over the active sets in proportion to their size.
//! A paused Deployment is only scaled. Old sets beyond `revisionHistoryLimit` that hold
//! no pods are deleted. The status counts the sets' pods, and the `Available` and
//! `Progressing` conditions carry the upstream reasons, including
//! `ProgressDeadlineExceeded` after `progressDeadlineSeconds` without progress.
//! Rollbacks are client-side, as in kubectl: the template of an old set is written back,
//! and that set becomes the new one with the next revision.

use crate::types::json::int_at;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::claim::{Claim, OwnerKind, controller_ref, is_deleting, str_at};
use super::{Action, Context, Result, Supervisor, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, DeleteParams, Kind, catalog, key_of};
use crate::types::labels;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
pub const HASH_LABEL: &str = "pod-template-hash";
/// Annotations of a Deployment that its ReplicaSets do not copy.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];
const WORKERS: usize = 5;

const DEPLOYMENTS: OwnerKind = OwnerKind {
    api_version: "apps/v1",
    kind_name: "Deployment",
};
const REPLICA_SETS: OwnerKind = OwnerKind {
    api_version: "apps/v1",
    kind_name: "ReplicaSet",
};

fn replicas(obj: &Value) -> i64 {
    int_at(obj, "/spec/replicas")
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn set_annotation(obj: &mut Value, key: &str, value: String) {
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][key] = json!(value);
}

fn revision(rs: &Value) -> i64 {
    annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn name(obj: &Value) -> &str {
    str_at(obj, "/metadata/name")
}

fn created(obj: &Value) -> &str {
    str_at(obj, "/metadata/creationTimestamp")
}

/// Oldest first, by creation and then name (`ReplicaSetsByCreationTimestamp`).
fn by_creation(a: &Value, b: &Value) -> std::cmp::Ordering {
    created(a).cmp(created(b)).then(name(a).cmp(name(b)))
}

fn is_active(rs: &Value) -> bool {
    replicas(rs) > 0
}

/// A template without the `pod-template-hash` label (`EqualIgnoreHash`).
fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
        if labels.is_empty() {
            t["metadata"]
                .as_object_mut()
                .expect("metadata is an object")
                .remove("labels");
        }
    }
    if t.get("metadata").is_some_and(|m| m == &json!({})) {
        t.as_object_mut().expect("an object").remove("metadata");
    }
    t
}

/// The `pod-template-hash` of a template: FNV-1a over its canonical JSON (and the
/// collision count), spelled with the alphabet of upstream's `SafeEncodeString`.
pub fn template_hash(template: &Value, collisions: Option<u32>) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    let count = collisions.map(u32::to_le_bytes);
    let h = crate::types::fnv1a32(&[&json, count.as_ref().map_or(&[][..], |c| &c[..])]);
    crate::types::safe_encode(&h.to_string())
}

/// How far a Deployment may go over and under its replicas (`ResolveFenceposts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bounds {
    replicas: i64,
    surge: i64,
    unavailable: i64,
    recreate: bool,
}

impl Bounds {
    fn of(d: &Value) -> Self {
        let replicas = replicas(d);
        let recreate = d.pointer("/spec/strategy/type") == Some(&json!("Recreate"));
        if recreate {
            return Bounds {
                replicas,
                surge: 0,
                unavailable: 0,
                recreate,
            };
        }
        let ru = d.pointer("/spec/strategy/rollingUpdate");
        let at = |f: &str| ru.and_then(|r| r.get(f));
        let surge = crate::types::scaled_int_or_percent(at("maxSurge"), replicas, true);
        let mut unavailable =
            crate::types::scaled_int_or_percent(at("maxUnavailable"), replicas, false);
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        Bounds {
            replicas,
            surge,
            // `MaxUnavailable`: never more than the replicas.
            unavailable: if replicas == 0 {
                0
            } else {
                unavailable.min(replicas)
            },
            recreate,
        }
    }
}

/// The size the new ReplicaSet may grow to now (`NewRSNewReplicas`).
fn new_rs_replicas(b: Bounds, all: &[&Value], new_size: i64) -> i64 {
    if b.recreate {
        return b.replicas;
    }
    let current: i64 = all.iter().map(|rs| replicas(rs)).sum();
    let max_total = b.replicas + b.surge;
    if current >= max_total {
        return new_size;
    }
    let up = (max_total - current).min(b.replicas - new_size);
    new_size + up.max(0)
}

/// The share of a scaling of the Deployment that falls to one set (`GetProportion`).
fn proportion(rs: &Value, b: Bounds, status_replicas: i64, to_add: i64, added: i64) -> i64 {
    if replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if b.replicas == 0 {
        -replicas(rs)
    } else {
        let target = b.replicas + b.surge;
        let annotated = annotation(rs, MAX_REPLICAS)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(status_replicas)
            .max(1);
        let size = (replicas(rs) * target) as f64 / annotated as f64;
        size.round() as i64 - replicas(rs)
    };
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// A condition as the Deployment carries it.
fn condition(kind: &str, status: &str, reason: &str, message: String) -> Value {
    let now = crate::types::now();
    json!({
        "type": kind,
        "status": status,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    })
}

fn get_condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn remove_condition(status: &mut Value, kind: &str) {
    if let Some(list) = status["conditions"].as_array_mut() {
        list.retain(|c| c["type"] != kind);
        if list.is_empty() {
            status
                .as_object_mut()
                .expect("status is an object")
                .remove("conditions");
        }
    }
}

/// `SetDeploymentCondition`: the same status and reason change nothing; the same status
/// keeps its transition time.
fn set_condition(status: &mut Value, mut cond: Value) {
    if let Some(cur) = get_condition(status, cond["type"].as_str().unwrap_or("")) {
        if cur["status"] == cond["status"] && cur["reason"] == cond["reason"] {
            return;
        }
        if cur["status"] == cond["status"] {
            cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    remove_condition(status, cond["type"].as_str().unwrap_or(""));
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    status["conditions"]
        .as_array_mut()
        .expect("made an array")
        .push(cond);
}

fn has_deadline(d: &Value) -> bool {
    d.pointer("/spec/progressDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|s| s < i64::from(i32::MAX))
}

fn progressing_reason(d: &Value) -> Option<&str> {
    get_condition(&d["status"], "Progressing").and_then(|c| c["reason"].as_str())
}

/// `DeploymentComplete`.
fn complete(d: &Value, status: &Value) -> bool {
    let n = replicas(d);
    int_at(status, "/updatedReplicas") == n
        && int_at(status, "/replicas") == n
        && int_at(status, "/availableReplicas") == n
        && int_at(status, "/observedGeneration") >= int_at(d, "/metadata/generation")
}

/// `DeploymentProgressing`: more updated, ready or available pods, or fewer old ones.
fn progressing(d: &Value, status: &Value) -> bool {
    let old = &d["status"];
    let olds = |s: &Value| int_at(s, "/replicas") - int_at(s, "/updatedReplicas");
    int_at(status, "/updatedReplicas") > int_at(old, "/updatedReplicas")
        || olds(status) < olds(old)
        || int_at(status, "/readyReplicas") > int_at(old, "/readyReplicas")
        || int_at(status, "/availableReplicas") > int_at(old, "/availableReplicas")
}

/// How long since the Progressing condition last moved, against the deadline: `Some` of
/// what is left, `None` when there is no deadline to watch.
fn deadline_left(d: &Value, status: &Value) -> Option<Duration> {
    let cond = get_condition(status, "Progressing")?;
    let secs = d.pointer("/spec/progressDeadlineSeconds")?.as_i64()?;
    let age = crate::types::age_seconds(cond["lastUpdateTime"].as_str()?)?;
    Some(Duration::from_secs((secs - age).max(0) as u64))
}

/// `DeploymentTimedOut`.
fn timed_out(d: &Value, status: &Value) -> bool {
    if !has_deadline(d) {
        return false;
    }
    match get_condition(status, "Progressing").and_then(|c| c["reason"].as_str()) {
        None | Some("NewReplicaSetAvailable") => false,
        Some("ProgressDeadlineExceeded") => true,
        Some(_) => deadline_left(d, status).is_some_and(|left| left.is_zero()),
    }
}

/// The status of the Deployment from its sets (`calculateStatus`).
fn calculate_status(d: &Value, all: &[&Value], new: Option<&Value>, b: Bounds) -> Value {
    let sum = |p: &str| -> i64 { all.iter().map(|rs| int_at(rs, p)).sum() };
    let available = sum("/status/availableReplicas");
    let total = sum("/spec/replicas");
    let mut status = d.get("status").cloned().unwrap_or_else(|| json!({}));
    if !status.is_object() {
        status = json!({});
    }
    status["observedGeneration"] = d["metadata"]["generation"].clone();
    status["replicas"] = json!(sum("/status/replicas"));
    status["updatedReplicas"] = json!(new.map_or(0, |rs| int_at(rs, "/status/replicas")));
    status["readyReplicas"] = json!(sum("/status/readyReplicas"));
    status["availableReplicas"] = json!(available);
    status["unavailableReplicas"] = json!((total - available).max(0));
    for zero in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
    ] {
        // As Go's omitempty.
        if status[zero] == 0 {
            status.as_object_mut().expect("an object").remove(zero);
        }
    }
    if available >= b.replicas - b.unavailable {
        set_condition(
            &mut status,
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            ),
        );
    } else {
        set_condition(
            &mut status,
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            ),
        );
    }
    status
}

#[derive(Clone)]
struct Controller {
    client: Client,
    deployments: Informer,
    rss: Informer,
    pods: Informer,
    recorder: Recorder,
}

/// One sync of one Deployment: its object as last written and its sets.
struct Sync {
    d: Value,
    b: Bounds,
}

impl Controller {
    async fn reconcile(&self, key: String) -> Result<Action> {
        let Some(d) = self.deployments.get(&key) else {
            return Ok(Action::Done);
        };
        let d = (*d).clone();
        let selector = d
            .pointer("/spec/selector")
            .and_then(|s| labels::Selector::from_label_selector(s).ok())
            .unwrap_or_default();
        if selector.is_empty() {
            self.recorder
                .event(
                    &d,
                    EventType::Warning,
                    "SelectingAll",
                    "This deployment is selecting all pods. A non-empty selector is required.",
                )
                .await;
            return Ok(Action::Done);
        }
        let rss = Claim {
            client: &self.client,
            kind: DEPLOYMENTS,
            owners: self.deployments.resource(),
            children: &self.rss,
            owner: &d,
            selector: &selector,
        }
        .run()
        .await?;
        let mut rss: Vec<Value> = rss.iter().map(|rs| (**rs).clone()).collect();
        rss.sort_by(by_creation);
        let mut s = Sync {
            b: Bounds::of(&d),
            d,
        };
        if is_deleting(&s.d) {
            let (new, old) = self.sets(&mut s, rss, false).await?;
            self.sync_status(&mut s, new.as_ref(), &old).await?;
            return Ok(Action::Done);
        }
        self.check_paused(&mut s).await?;
        let paused = s.d.pointer("/spec/paused") == Some(&json!(true));
        if paused || self.scaling_event(&s, &rss) {
            return self.sync(&mut s, rss, paused).await;
        }
        if s.b.recreate {
            self.rollout_recreate(&mut s, rss).await
        } else {
            self.rollout_rolling(&mut s, rss).await
        }
    }

    /// Whether the Deployment's replicas changed since its active sets were sized.
    fn scaling_event(&self, s: &Sync, rss: &[Value]) -> bool {
        rss.iter()
            .filter(|rs| is_active(rs))
            .filter_map(|rs| annotation(rs, DESIRED_REPLICAS)?.parse::<i64>().ok())
            .any(|desired| desired != s.b.replicas)
    }

    /// Splits the sets into the new one and the old ones, bringing the new one's revision
    /// and the Deployment's up to date; makes the new one when `create` and it is missing
    /// (`getAllReplicaSetsAndSyncRevision`).
    async fn sets(
        &self,
        s: &mut Sync,
        rss: Vec<Value>,
        create: bool,
    ) -> Result<(Option<Value>, Vec<Value>)> {
        let template = without_hash(&s.d["spec"]["template"]);
        let mut new = None;
        let mut old = Vec::new();
        for rs in rss {
            if new.is_none() && without_hash(&rs["spec"]["template"]) == template {
                new = Some(rs);
            } else {
                old.push(rs);
            }
        }
        let next_revision = old.iter().map(revision).max().unwrap_or(0) + 1;
        let new = match new {
            Some(rs) => Some(self.sync_new(s, rs, next_revision).await?),
            None if create => Some(self.create_new(s, &old, next_revision).await?),
            None => None,
        };
        Ok((new, old))
    }

    /// Brings an existing new set's annotations and `minReadySeconds` up to date.
    async fn sync_new(&self, s: &mut Sync, rs: Value, next_revision: i64) -> Result<Value> {
        let mut copy = rs.clone();
        let mut changed = new_rs_annotations(&s.d, &mut copy, next_revision, true, s.b);
        let min_ready = s.d["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        if int_at(&copy, "/spec/minReadySeconds") != min_ready {
            copy["spec"]["minReadySeconds"] = json!(min_ready);
            changed = true;
        }
        let rs = if changed {
            self.client.update(self.rss.resource(), &copy).await?
        } else {
            rs
        };
        let rev = annotation(&rs, REVISION).unwrap_or("").to_string();
        self.set_revision(s, &rev).await?;
        if has_deadline(&s.d) && get_condition(&s.d["status"], "Progressing").is_none() {
            let message = format!("Found new replica set {:?}", name(&rs));
            self.set_progressing(s, "True", "FoundNewReplicaSet", message)
                .await?;
        }
        Ok(rs)
    }

    /// Makes the new set, sized by what the strategy allows now.
    async fn create_new(&self, s: &mut Sync, old: &[Value], next_revision: i64) -> Result<Value> {
        let d = &s.d;
        let collisions = d
            .pointer("/status/collisionCount")
            .and_then(Value::as_u64)
            .map(|c| c as u32);
        let hash = template_hash(&d["spec"]["template"], collisions);
        let mut template = d["spec"]["template"].clone();
        if !template["metadata"].is_object() {
            template["metadata"] = json!({});
        }
        if !template["metadata"]["labels"].is_object() {
            template["metadata"]["labels"] = json!({});
        }
        template["metadata"]["labels"][HASH_LABEL] = json!(hash);
        let mut selector = d["spec"]["selector"].clone();
        if !selector["matchLabels"].is_object() {
            selector["matchLabels"] = json!({});
        }
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let rs_name = format!("{}-{}", name(d), hash);
        let mut rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name,
                "namespace": str_at(d, "/metadata/namespace"),
                "labels": template["metadata"]["labels"],
                "ownerReferences": [DEPLOYMENTS.controlled_by(d)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": d["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
                "selector": selector,
                "template": template,
            },
        });
        new_rs_annotations(d, &mut rs, next_revision, false, s.b);
        let mut all: Vec<&Value> = old.iter().collect();
        all.push(&rs);
        let size = new_rs_replicas(s.b, &all, 0);
        rs["spec"]["replicas"] = json!(size);
        let ns = str_at(d, "/metadata/namespace").to_string();
        let made = match self
            .client
            .create(self.rss.resource(), Some(&ns), &rs)
            .await
        {
            Ok(made) => made,
            Err(e) if e.is_already_exists() => {
                let existing = self
                    .client
                    .get(self.rss.resource(), Some(&ns), &rs_name)
                    .await?;
                let ours =
                    controller_ref(&existing).is_some_and(|r| r["uid"] == d["metadata"]["uid"]);
                if ours
                    && without_hash(&existing["spec"]["template"])
                        == without_hash(&d["spec"]["template"])
                {
                    // Made by an earlier sync that the cache has not shown yet.
                    return Ok(existing);
                }
                let mut status = s.d["status"].clone();
                status["collisionCount"] = json!(collisions.unwrap_or(0) + 1);
                self.write_status(s, status).await?;
                return Err(super::Error::Other(format!(
                    "replica set {rs_name:?} exists with another template: hashing again"
                )));
            }
            Err(e) => {
                let message = format!("Failed to create new replica set {rs_name:?}: {e}");
                self.recorder
                    .event(&s.d, EventType::Warning, "FailedCreate", &message)
                    .await;
                if has_deadline(&s.d) {
                    self.set_progressing(s, "False", "ReplicaSetCreateError", message)
                        .await?;
                }
                return Err(e.into());
            }
        };
        if size > 0 {
            self.recorder
                .event(
                    &s.d,
                    EventType::Normal,
                    "ScalingReplicaSet",
                    &format!("Scaled up replica set {} from 0 to {size}", name(&made)),
                )
                .await;
        }
        self.set_revision(s, &next_revision.to_string()).await?;
        if has_deadline(&s.d) {
            let message = format!("Created new replica set {:?}", name(&made));
            self.set_progressing(s, "True", "NewReplicaSetCreated", message)
                .await?;
        }
        Ok(made)
    }

    /// Sets the Deployment's revision annotation to its new set's.
    async fn set_revision(&self, s: &mut Sync, rev: &str) -> Result<()> {
        if rev.is_empty() || annotation(&s.d, REVISION) == Some(rev) {
            return Ok(());
        }
        let mut d = s.d.clone();
        set_annotation(&mut d, REVISION, rev.to_string());
        s.d = self.client.update(self.deployments.resource(), &d).await?;
        Ok(())
    }

    /// Sets the Progressing condition and writes the status.
    async fn set_progressing(
        &self,
        s: &mut Sync,
        status: &str,
        reason: &str,
        message: String,
    ) -> Result<()> {
        let mut st = s.d["status"].clone();
        if !st.is_object() {
            st = json!({});
        }
        set_condition(&mut st, condition("Progressing", status, reason, message));
        self.write_status(s, st).await
    }

    /// Writes the Deployment's status when it changed.
    async fn write_status(&self, s: &mut Sync, status: Value) -> Result<()> {
        if s.d.get("status") == Some(&status) {
            return Ok(());
        }
        let mut d = s.d.clone();
        d["status"] = status;
        s.d = self
            .client
            .update_status(self.deployments.resource(), &d)
            .await?;
        Ok(())
    }

    /// Sets a set's size (and the replica annotations); records the scaling. Returns
    /// whether the size changed.
    async fn scale(&self, s: &Sync, rs: &mut Value, size: i64, how: &str) -> Result<bool> {
        let from = replicas(rs);
        let desired = s.b.replicas.to_string();
        let max = (s.b.replicas + s.b.surge).to_string();
        let annotations_stale = annotation(rs, DESIRED_REPLICAS) != Some(desired.as_str())
            || annotation(rs, MAX_REPLICAS) != Some(max.as_str());
        if from == size && !annotations_stale {
            return Ok(false);
        }
        let mut copy = rs.clone();
        copy["spec"]["replicas"] = json!(size);
        set_annotation(&mut copy, DESIRED_REPLICAS, desired);
        set_annotation(&mut copy, MAX_REPLICAS, max);
        *rs = self.client.update(self.rss.resource(), &copy).await?;
        if from != size {
            self.recorder
                .event(
                    &s.d,
                    EventType::Normal,
                    "ScalingReplicaSet",
                    &format!(
                        "Scaled {how} replica set {} from {from} to {size}",
                        name(rs)
                    ),
                )
                .await;
        }
        Ok(from != size)
    }

    async fn scale_auto(&self, s: &Sync, rs: &mut Value, size: i64) -> Result<bool> {
        let how = if size > replicas(rs) { "up" } else { "down" };
        self.scale(s, rs, size, how).await
    }

    /// A paused Deployment or a change of replicas: sizes the sets, nothing more (`sync`).
    async fn sync(&self, s: &mut Sync, rss: Vec<Value>, paused: bool) -> Result<Action> {
        let (mut new, mut old) = self.sets(s, rss, false).await?;
        self.scale_sets(s, new.as_mut(), &mut old).await?;
        if paused {
            self.cleanup(s, &old).await?;
        }
        self.sync_status(s, new.as_ref(), &old).await?;
        Ok(Action::Done)
    }

    /// Spreads the Deployment's replicas over its sets (`scale`).
    async fn scale_sets(
        &self,
        s: &Sync,
        mut new: Option<&mut Value>,
        old: &mut [Value],
    ) -> Result<()> {
        // One active set (or none: the newest) takes all replicas.
        let active_count = old.iter().filter(|rs| is_active(rs)).count()
            + new.as_ref().is_some_and(|n| is_active(n)) as usize;
        if active_count <= 1 {
            let target: Option<&mut Value> = if new.as_ref().is_some_and(|n| is_active(n)) {
                new
            } else if let Some(rs) = old.iter_mut().find(|rs| is_active(rs)) {
                Some(rs)
            } else if new.is_some() {
                new
            } else {
                old.iter_mut().max_by(|a, b| by_creation(a, b))
            };
            if let Some(rs) = target {
                if replicas(rs) != s.b.replicas {
                    self.scale_auto(s, rs, s.b.replicas).await?;
                }
            }
            return Ok(());
        }
        // A saturated new set: the old ones go.
        if let Some(n) = new.as_deref() {
            let saturated = annotation(n, DESIRED_REPLICAS) == Some(&s.b.replicas.to_string())
                && replicas(n) == s.b.replicas
                && int_at(n, "/status/availableReplicas") == s.b.replicas;
            if saturated {
                for rs in old.iter_mut().filter(|rs| is_active(rs)) {
                    self.scale(s, rs, 0, "down").await?;
                }
                return Ok(());
            }
        }
        if s.b.recreate {
            return Ok(());
        }
        // Proportional scaling of every active set.
        let status_replicas = int_at(&s.d, "/status/replicas");
        let mut sets: Vec<&mut Value> = old.iter_mut().filter(|rs| is_active(rs)).collect();
        if let Some(n) = new.take().filter(|n| is_active(n)) {
            sets.push(n);
        }
        let total: i64 = sets.iter().map(|rs| replicas(rs)).sum();
        let allowed = if s.b.replicas > 0 {
            s.b.replicas + s.b.surge
        } else {
            0
        };
        let to_add = allowed - total;
        let how = if to_add > 0 { "up" } else { "down" };
        // Bigger sets first; among equals, newer first when growing, older when shrinking.
        sets.sort_by(|a, b| {
            replicas(b).cmp(&replicas(a)).then_with(|| {
                if to_add > 0 {
                    by_creation(b, a)
                } else {
                    by_creation(a, b)
                }
            })
        });
        let mut added = 0;
        let mut sizes = Vec::with_capacity(sets.len());
        for rs in &sets {
            let p = if to_add != 0 {
                proportion(rs, s.b, status_replicas, to_add, added)
            } else {
                0
            };
            added += p;
            sizes.push(replicas(rs) + p);
        }
        if let Some(first) = sizes.first_mut() {
            if to_add != 0 {
                *first = (*first + to_add - added).max(0);
            }
        }
        for (rs, size) in sets.into_iter().zip(sizes) {
            self.scale(s, rs, size, how).await?;
        }
        Ok(())
    }

    /// `rolloutRolling`.
    async fn rollout_rolling(&self, s: &mut Sync, rss: Vec<Value>) -> Result<Action> {
        let (new, mut old) = self.sets(s, rss, true).await?;
        let mut new = new.expect("create makes the new set");
        // Grow the new set.
        let want = s.b.replicas;
        let scaled_up = if replicas(&new) > want {
            self.scale(s, &mut new, want, "down").await?
        } else if replicas(&new) < want {
            let mut all: Vec<&Value> = old.iter().collect();
            all.push(&new);
            let size = new_rs_replicas(s.b, &all, replicas(&new));
            self.scale(s, &mut new, size, "up").await?
        } else {
            false
        };
        if scaled_up {
            return self.rollout_status(s, Some(&new), &old).await;
        }
        if self.shrink_old(s, &new, &mut old).await? {
            return self.rollout_status(s, Some(&new), &old).await;
        }
        if complete(&s.d, &s.d["status"]) {
            self.cleanup(s, &old).await?;
        }
        self.rollout_status(s, Some(&new), &old).await
    }

    /// Scales old sets down as far as availability allows, their unavailable pods first
    /// (`reconcileOldReplicaSets`). Returns whether any was scaled.
    async fn shrink_old(&self, s: &Sync, new: &Value, old: &mut [Value]) -> Result<bool> {
        let old_pods: i64 = old.iter().map(replicas).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + replicas(new);
        let min_available = s.b.replicas - s.b.unavailable;
        let new_unavailable = replicas(new) - int_at(new, "/status/availableReplicas");
        let max_down = all_pods - min_available - new_unavailable;
        if max_down <= 0 {
            return Ok(false);
        }
        old.sort_by(by_creation);
        // Unhealthy replicas first: they do not count for availability.
        let mut cleaned = 0;
        for rs in old.iter_mut() {
            if cleaned >= max_down {
                break;
            }
            let unhealthy = replicas(rs) - int_at(rs, "/status/availableReplicas");
            if replicas(rs) == 0 || unhealthy <= 0 {
                continue;
            }
            let n = (max_down - cleaned).min(unhealthy);
            let size = replicas(rs) - n;
            self.scale(s, rs, size, "down").await?;
            cleaned += n;
        }
        // Then as many available ones as keep the minimum available.
        let available: i64 = old
            .iter()
            .chain(std::iter::once(new))
            .map(|rs| int_at(rs, "/status/availableReplicas"))
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let budget = available - min_available;
            for rs in old.iter_mut() {
                if scaled >= budget {
                    break;
                }
                if replicas(rs) == 0 {
                    continue;
                }
                let n = replicas(rs).min(budget - scaled);
                let size = replicas(rs) - n;
                self.scale(s, rs, size, "down").await?;
                scaled += n;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// `rolloutRecreate`.
    async fn rollout_recreate(&self, s: &mut Sync, rss: Vec<Value>) -> Result<Action> {
        let (new, mut old) = self.sets(s, rss, false).await?;
        let mut scaled = false;
        for rs in old.iter_mut().filter(|rs| is_active(rs)) {
            scaled |= self.scale(s, rs, 0, "down").await?;
        }
        if scaled {
            return self.rollout_status(s, new.as_ref(), &old).await;
        }
        if self.old_pods_running(new.as_ref(), &old) {
            return self.rollout_status(s, new.as_ref(), &old).await;
        }
        let mut new = match new {
            Some(n) => n,
            None => {
                let next_revision = old.iter().map(revision).max().unwrap_or(0) + 1;
                self.create_new(s, &old, next_revision).await?
            }
        };
        if replicas(&new) != s.b.replicas {
            self.scale_auto(s, &mut new, s.b.replicas).await?;
        }
        if complete(&s.d, &s.d["status"]) {
            self.cleanup(s, &old).await?;
        }
        self.rollout_status(s, Some(&new), &old).await
    }

    /// Whether any pod of an old set has yet to finish (`oldPodsRunning`).
    fn old_pods_running(&self, new: Option<&Value>, old: &[Value]) -> bool {
        if old.iter().any(|rs| int_at(rs, "/status/replicas") > 0) {
            return true;
        }
        let new_uid = new.map(|n| str_at(n, "/metadata/uid"));
        let uids: Vec<&str> = old
            .iter()
            .map(|rs| str_at(rs, "/metadata/uid"))
            .filter(|u| Some(*u) != new_uid)
            .collect();
        let ns = old
            .first()
            .map(|rs| str_at(rs, "/metadata/namespace"))
            .unwrap_or("");
        self.pods.list_namespace(ns).iter().any(|pod| {
            controller_ref(pod).is_some_and(|r| uids.iter().any(|u| r["uid"] == *u))
                && !matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
        })
    }

    /// Deletes the oldest empty sets beyond `revisionHistoryLimit` (`cleanupDeployment`).
    async fn cleanup(&self, s: &Sync, old: &[Value]) -> Result<()> {
        let Some(limit) =
            s.d.pointer("/spec/revisionHistoryLimit")
                .and_then(Value::as_i64)
        else {
            return Ok(());
        };
        let mut alive: Vec<&Value> = old.iter().filter(|rs| !is_deleting(rs)).collect();
        let extra = alive.len() as i64 - limit;
        if extra <= 0 {
            return Ok(());
        }
        alive.sort_by(|a, b| revision(a).cmp(&revision(b)).then(by_creation(a, b)));
        for rs in alive.into_iter().take(extra as usize) {
            if int_at(rs, "/status/replicas") != 0
                || replicas(rs) != 0
                || int_at(rs, "/metadata/generation") > int_at(rs, "/status/observedGeneration")
            {
                continue;
            }
            let params = DeleteParams {
                uid: Some(str_at(rs, "/metadata/uid").to_string()),
                ..DeleteParams::default()
            };
            match self
                .client
                .delete(
                    self.rss.resource(),
                    Some(str_at(rs, "/metadata/namespace")),
                    name(rs),
                    &params,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The Progressing condition of a paused or resumed Deployment.
    async fn check_paused(&self, s: &mut Sync) -> Result<()> {
        if !has_deadline(&s.d) {
            return Ok(());
        }
        let reason = progressing_reason(&s.d);
        if reason == Some("ProgressDeadlineExceeded") {
            return Ok(());
        }
        let paused = s.d.pointer("/spec/paused") == Some(&json!(true));
        let marked = reason == Some("DeploymentPaused");
        let (reason, message) = match (paused, marked) {
            (true, false) => ("DeploymentPaused", "Deployment is paused"),
            (false, true) => ("DeploymentResumed", "Deployment is resumed"),
            _ => return Ok(()),
        };
        self.set_progressing(s, "Unknown", reason, message.into())
            .await
    }

    /// The status alone (`syncDeploymentStatus`).
    async fn sync_status(&self, s: &mut Sync, new: Option<&Value>, old: &[Value]) -> Result<()> {
        let mut all: Vec<&Value> = old.iter().collect();
        all.extend(new);
        let status = calculate_status(&s.d, &all, new, s.b);
        self.write_status(s, status).await
    }

    /// The status with the progress made (`syncRolloutStatus`); asks to look again when
    /// the deadline could pass with no event to tell.
    async fn rollout_status(
        &self,
        s: &mut Sync,
        new: Option<&Value>,
        old: &[Value],
    ) -> Result<Action> {
        let mut all: Vec<&Value> = old.iter().collect();
        all.extend(new);
        let mut status = calculate_status(&s.d, &all, new, s.b);
        let d = &s.d;
        if !has_deadline(d) {
            remove_condition(&mut status, "Progressing");
        }
        let current = get_condition(&d["status"], "Progressing");
        let done = int_at(&status, "/replicas") == int_at(&status, "/updatedReplicas")
            && current.is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        let subject = |what: &str| match new {
            Some(rs) => format!("ReplicaSet {:?} {what}.", name(rs)),
            None => format!("Deployment {:?} {what}.", name(d)),
        };
        if has_deadline(d) && !done {
            if complete(d, &status) {
                set_condition(
                    &mut status,
                    condition(
                        "Progressing",
                        "True",
                        "NewReplicaSetAvailable",
                        subject("has successfully progressed"),
                    ),
                );
            } else if progressing(d, &status) {
                let mut cond = condition(
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    subject("is progressing"),
                );
                if let Some(c) = current.filter(|c| c["status"] == "True") {
                    cond["lastTransitionTime"] = c["lastTransitionTime"].clone();
                }
                remove_condition(&mut status, "Progressing");
                set_condition(&mut status, cond);
            } else if timed_out(d, &status) {
                set_condition(
                    &mut status,
                    condition(
                        "Progressing",
                        "False",
                        "ProgressDeadlineExceeded",
                        subject("has timed out progressing"),
                    ),
                );
            }
        }
        match replica_failure(new, old) {
            Some(c) => set_condition(&mut status, c),
            None => remove_condition(&mut status, "ReplicaFailure"),
        }
        if d.get("status") == Some(&status) {
            // Nothing moved: look again when the deadline would pass.
            let stuck = has_deadline(d)
                && !complete(d, &status)
                && current.is_some_and(|c| c["reason"] != "ProgressDeadlineExceeded");
            if stuck {
                if let Some(left) = deadline_left(d, &d["status"]) {
                    return Ok(Action::RequeueAfter(left + Duration::from_secs(1)));
                }
            }
            return Ok(Action::Done);
        }
        self.write_status(s, status).await?;
        Ok(Action::Done)
    }
}

/// The `ReplicaFailure` of the new set, else of an old one, as the Deployment's.
fn replica_failure(new: Option<&Value>, old: &[Value]) -> Option<Value> {
    let failure = |rs: &Value| {
        rs.pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == "ReplicaFailure")
            .map(|c| {
                json!({
                    "type": "ReplicaFailure",
                    "status": c["status"],
                    "lastUpdateTime": c["lastTransitionTime"],
                    "lastTransitionTime": c["lastTransitionTime"],
                    "reason": c["reason"],
                    "message": c["message"],
                })
            })
    };
    new.and_then(failure)
        .or_else(|| old.iter().find_map(failure))
}

/// Copies the Deployment's annotations to a set and gives it the next revision, keeping
/// the revisions it had as history (a rollback); a set about to be made gets the replica
/// annotations too (`SetNewReplicaSetAnnotations`). Returns whether anything changed.
fn new_rs_annotations(d: &Value, rs: &mut Value, next: i64, exists: bool, b: Bounds) -> bool {
    let mut changed = false;
    if let Some(annotations) = d
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for (k, v) in annotations {
            if NOT_COPIED.contains(&k.as_str()) || annotation(rs, k) == v.as_str() {
                continue;
            }
            set_annotation(rs, k, v.as_str().unwrap_or("").to_string());
            changed = true;
        }
    }
    let had = annotation(rs, REVISION).map(str::to_string);
    let old: i64 = had.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
    if old < next {
        set_annotation(rs, REVISION, next.to_string());
        changed = true;
        if let Some(had) = had.filter(|h| !h.is_empty()) {
            let history = match annotation(rs, REVISION_HISTORY).filter(|h| !h.is_empty()) {
                Some(h) => format!("{h},{had}"),
                None => had,
            };
            set_annotation(rs, REVISION_HISTORY, history);
        }
    }
    if !exists {
        set_annotation(rs, DESIRED_REPLICAS, b.replicas.to_string());
        set_annotation(rs, MAX_REPLICAS, (b.replicas + b.surge).to_string());
        changed = true;
    }
    changed
}

/// Registers the deployment controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let deployments = ctx.informers.get(catalog::of(Kind::Deployment));
    let rss = ctx.informers.get(catalog::of(Kind::ReplicaSet));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    // An orphan goes to every Deployment of its namespace whose selector matches it.
    let matching = {
        let deployments = deployments.clone();
        move |rs: &Value| {
            let labels = labels::map_at(rs, "/metadata/labels");
            deployments
                .list_namespace(str_at(rs, "/metadata/namespace"))
                .iter()
                .filter(|d| {
                    let sel = d
                        .pointer("/spec/selector")
                        .and_then(|s| labels::Selector::from_label_selector(s).ok())
                        .unwrap_or_default();
                    !sel.is_empty() && sel.matches(&labels)
                })
                .map(|d| key_of(d))
                .collect()
        }
    };
    // A Recreate rollout waits for the old pods to be gone.
    let recreating = {
        let (deployments, rss) = (deployments.clone(), rss.clone());
        move |pod: &Value| -> Option<String> {
            let rs = rss.get(&REPLICA_SETS.key_of_controller(pod)?)?;
            let key = DEPLOYMENTS.key_of_controller(&rs)?;
            let d = deployments.get(&key)?;
            (d.pointer("/spec/strategy/type") == Some(&json!("Recreate"))).then_some(key)
        }
    };
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        deployments: deployments.clone(),
        rss: rss.clone(),
        pods: pods.clone(),
        recorder: ctx.recorder("deployment-controller"),
    });
    runtime::Controller::new("deployment-controller")
        .reconciles(&deployments)
        .owns_or_adopts(&rss, DEPLOYMENTS, matching)
        .watches(&pods, move |change, queue| {
            let finished = match change {
                Change::Deleted(_) => true,
                Change::Updated { old, new } => {
                    str_at(old, "/status/phase") != str_at(new, "/status/phase")
                }
                Change::Added(_) => false,
            };
            if let Some(key) = finished.then(|| recreating(change.object())).flatten() {
                queue.add(key);
            }
        })
        .workers(WORKERS)
        .run(sup, move |key| {
            let controller = controller.clone();
            async move { controller.reconcile(key).await }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(replicas: i64, surge: Value, unavailable: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": {"replicas": replicas, "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}})
    }

    fn rs(replicas: i64, max: Option<i64>) -> Value {
        let mut rs = json!({"metadata": {"name": "rs"}, "spec": {"replicas": replicas}});
        if let Some(m) = max {
            rs["metadata"]["annotations"] = json!({MAX_REPLICAS: m.to_string()});
        }
        rs
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailability_down() {
        let b = Bounds::of(&d(3, json!("25%"), json!("25%")));
        assert_eq!((b.surge, b.unavailable), (1, 0));
        let b = Bounds::of(&d(10, json!(3), json!(2)));
        assert_eq!((b.surge, b.unavailable), (3, 2));
        // Both zero after rounding: one may be unavailable.
        let b = Bounds::of(&d(1, json!("10%"), json!("10%")));
        assert_eq!((b.surge, b.unavailable), (1, 0));
        let b = Bounds::of(&d(2, json!(0), json!("10%")));
        assert_eq!((b.surge, b.unavailable), (0, 1));
        let recreate = json!({"spec": {"replicas": 4, "strategy": {"type": "Recreate"}}});
        let b = Bounds::of(&recreate);
        assert!(b.recreate);
        assert_eq!((b.surge, b.unavailable), (0, 0));
    }

    #[test]
    fn the_new_set_grows_within_the_surge() {
        let b = Bounds::of(&d(10, json!(3), json!(2)));
        let (old, new) = (rs(10, None), rs(0, None));
        assert_eq!(new_rs_replicas(b, &[&old, &new], 0), 3);
        let (old, new) = (rs(8, None), rs(3, None));
        assert_eq!(new_rs_replicas(b, &[&old, &new], 3), 5);
        let (old, new) = (rs(8, None), rs(5, None));
        assert_eq!(new_rs_replicas(b, &[&old, &new], 5), 5, "at the limit");
    }

    #[test]
    fn a_scale_is_shared_by_the_sets_sizes() {
        // Upstream's proportional scaling e2e: 8 + 5 of 10 (+3 surge) scaled to 30.
        let mut scaled = d(30, json!(3), json!(2));
        scaled["status"] = json!({"replicas": 13});
        let b = Bounds::of(&scaled);
        let to_add = 33 - 13;
        let first = proportion(&rs(8, Some(13)), b, 13, to_add, 0);
        assert_eq!(first, 12);
        let second = proportion(&rs(5, Some(13)), b, 13, to_add, first);
        assert_eq!(second, 8);
        // Scaling to zero takes every replica away.
        let zero = Bounds::of(&d(0, json!(3), json!(2)));
        assert_eq!(proportion(&rs(4, Some(13)), zero, 13, -13, 0), -4);
    }

    #[test]
    fn the_template_hash_ignores_key_order_and_counts_collisions() {
        let a = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        let b: Value = serde_json::from_str(
            r#"{"spec": {"x": 1}, "metadata": {"labels": {"b": "2", "a": "1"}}}"#,
        )
        .unwrap();
        assert_eq!(template_hash(&a, None), template_hash(&b, None));
        assert_ne!(template_hash(&a, None), template_hash(&a, Some(1)));
        let h = template_hash(&a, None);
        assert!(
            h.bytes()
                .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)),
            "{h}"
        );
        let with_hash =
            json!({"metadata": {"labels": {"a": "1", "b": "2", HASH_LABEL: h}}, "spec": {"x": 1}});
        assert_eq!(without_hash(&with_hash), a);
    }

    #[test]
    fn conditions_keep_their_transition_time_while_their_status_holds() {
        let mut status = json!({});
        let mut first = condition("Progressing", "True", "ReplicaSetUpdated", "a".into());
        first["lastTransitionTime"] = json!("2026-01-01T00:00:00Z");
        set_condition(&mut status, first);
        set_condition(
            &mut status,
            condition("Progressing", "True", "NewReplicaSetAvailable", "b".into()),
        );
        let c = get_condition(&status, "Progressing").unwrap();
        assert_eq!(c["reason"], "NewReplicaSetAvailable");
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        set_condition(
            &mut status,
            condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                "c".into(),
            ),
        );
        let c = get_condition(&status, "Progressing").unwrap();
        assert_ne!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        // The same status and reason change nothing, not even the message.
        set_condition(
            &mut status,
            condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                "d".into(),
            ),
        );
        assert_eq!(
            get_condition(&status, "Progressing").unwrap()["message"],
            "c"
        );
    }

    #[test]
    fn a_rolled_back_set_keeps_its_old_revisions() {
        let b = Bounds::of(&d(3, json!(1), json!(0)));
        let deploy = json!({"metadata": {"annotations": {
            "kubernetes.io/change-cause": "undo",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        }}});
        let mut set = json!({"metadata": {"annotations": {REVISION: "1"}}});
        assert!(new_rs_annotations(&deploy, &mut set, 3, true, b));
        let ann = &set["metadata"]["annotations"];
        assert_eq!(ann[REVISION], "3");
        assert_eq!(ann[REVISION_HISTORY], "1");
        assert_eq!(ann["kubernetes.io/change-cause"], "undo");
        assert!(
            ann.get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert!(
            !new_rs_annotations(&deploy, &mut set, 3, true, b),
            "nothing more to do"
        );
    }
}
