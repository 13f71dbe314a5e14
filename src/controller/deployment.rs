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

//!
//! A sync decodes its Deployment once as a k8s-openapi `Deployment`, and its sets (a
//! revision history: few) as `ReplicaSet`s, reading typed fields from then on; a write
//! starts from the object as stored (JSON: every field of it kept) and the object it
//! answers is decoded again. Pod templates stay JSON: they are compared, hashed and
//! copied as they are.

use crate::types::meta::Meta;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::claim::{Claim, OwnerKind, controller_ref, str_at};
use super::replication::{label_selector, spec_label_selector};
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, DeleteParams, Kind, catalog};
use crate::types::json::array_at;

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

/// An IntOrString resolved against `total` as
/// [`crate::types::scaled_int_or_percent`] resolves its JSON (`GetScaledValueFromIntOrPercent`):
/// a number as is, a percentage rounded up or down; absent or malformed is 0.
pub(super) fn scaled_int_or_percent(v: Option<&IntOrString>, total: i64, round_up: bool) -> i64 {
    let v = v.map(|v| match v {
        IntOrString::Int(n) => Value::from(*n),
        IntOrString::String(s) => Value::from(s.as_str()),
    });
    crate::types::scaled_int_or_percent(v.as_ref(), total, round_up)
}

/// A count as the API leaves it out: 0.
fn count(n: Option<i32>) -> i64 {
    n.map_or(0, i64::from)
}

/// The annotation `key` of an object being written (JSON).
fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn set_annotation(obj: &mut Value, key: &str, value: String) {
    let annotations = &mut obj["metadata"]["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[key] = json!(value);
}

/// The pod template of a Deployment or ReplicaSet, as JSON: compared, hashed and copied
/// as it is stored.
fn template_of(obj: &Value) -> &Value {
    &obj["spec"]["template"]
}

/// `spec.replicas`, 0 when absent.
fn replicas(d: &Deployment) -> i64 {
    count(d.spec.replicas)
}

fn paused(d: &Deployment) -> bool {
    d.spec.paused == Some(true)
}

fn min_ready_seconds(d: &Deployment) -> i64 {
    count(d.spec.min_ready_seconds)
}

fn deadline_seconds(d: &Deployment) -> Option<i64> {
    d.spec.progress_deadline_seconds.map(i64::from)
}

/// The Progressing condition of the Deployment as stored.
fn progressing_condition(d: &Deployment) -> Option<&DeploymentCondition> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some("Progressing"))
}

/// A ReplicaSet of the Deployment: as stored (JSON, what its writes start from) and read
/// (decoded from it; again after each write).
struct Set {
    obj: Value,
    rs: ReplicaSet,
}

impl Meta for Set {
    fn meta(&self) -> &ObjectMeta {
        &self.rs.metadata
    }
}

impl Set {
    fn new(obj: Value) -> Result<Self> {
        Ok(Set {
            rs: decode(&obj)?,
            obj,
        })
    }

    /// `spec.replicas`, 0 when absent.
    fn replicas(&self) -> i64 {
        count(self.rs.spec.replicas)
    }

    fn min_ready_seconds(&self) -> i64 {
        count(self.rs.spec.min_ready_seconds)
    }

    fn status_replicas(&self) -> i64 {
        self.rs.status.as_ref().map_or(0, |s| i64::from(s.replicas))
    }

    fn ready(&self) -> i64 {
        count(self.rs.status.as_ref().and_then(|s| s.ready_replicas))
    }

    fn available(&self) -> i64 {
        count(self.rs.status.as_ref().and_then(|s| s.available_replicas))
    }

    fn observed_generation(&self) -> i64 {
        self.rs
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .unwrap_or(0)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.rs.metadata.annotation(key)
    }

    fn revision(&self) -> i64 {
        self.annotation(REVISION)
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    }

    fn created(&self) -> Option<&Time> {
        self.rs.metadata.creation_timestamp.as_ref()
    }

    fn is_active(&self) -> bool {
        self.replicas() > 0
    }

    /// Its `ReplicaFailure` condition as the Deployment carries it.
    fn failure(&self) -> Option<Value> {
        let c = self
            .rs
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_.as_deref() == Some("ReplicaFailure"))?;
        Some(json!({
            "type": "ReplicaFailure",
            "status": c.status,
            "lastUpdateTime": c.last_transition_time,
            "lastTransitionTime": c.last_transition_time,
            "reason": c.reason,
            "message": c.message,
        }))
    }
}

/// Oldest first, by creation and then name (`ReplicaSetsByCreationTimestamp`).
fn by_creation(a: &Set, b: &Set) -> std::cmp::Ordering {
    a.created().cmp(&b.created()).then(a.name().cmp(b.name()))
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
    fn of(d: &Deployment) -> Self {
        let replicas = replicas(d);
        let strategy = d.spec.strategy.as_ref();
        let recreate = strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate");
        if recreate {
            return Bounds {
                replicas,
                surge: 0,
                unavailable: 0,
                recreate,
            };
        }
        let ru = strategy.and_then(|s| s.rolling_update.as_ref());
        let surge = scaled_int_or_percent(ru.and_then(|r| r.max_surge.as_ref()), replicas, true);
        let mut unavailable =
            scaled_int_or_percent(ru.and_then(|r| r.max_unavailable.as_ref()), replicas, false);
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

/// The size the new ReplicaSet may grow to now, with `current` replicas in all sets
/// (`NewRSNewReplicas`).
fn new_rs_replicas(b: Bounds, current: i64, new_size: i64) -> i64 {
    if b.recreate {
        return b.replicas;
    }
    let max_total = b.replicas + b.surge;
    if current >= max_total {
        return new_size;
    }
    let up = (max_total - current).min(b.replicas - new_size);
    new_size + up.max(0)
}

/// The share of a scaling of the Deployment that falls to one set (`GetProportion`).
fn proportion(rs: &Set, b: Bounds, status_replicas: i64, to_add: i64, added: i64) -> i64 {
    if rs.replicas() == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if b.replicas == 0 {
        -rs.replicas()
    } else {
        let target = b.replicas + b.surge;
        let annotated = rs
            .annotation(MAX_REPLICAS)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(status_replicas)
            .max(1);
        let size = (rs.replicas() * target) as f64 / annotated as f64;
        size.round() as i64 - rs.replicas()
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

/// The condition of `kind` of a status being written.
fn get_condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    array_at(status, "/conditions")
        .iter()
        .find(|c| str_at(c, "/type") == kind)
}

fn remove_condition(status: &mut Value, kind: &str) {
    let Some(status) = status.as_object_mut() else {
        return;
    };
    if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        list.retain(|c| str_at(c, "/type") != kind);
        if list.is_empty() {
            status.remove("conditions");
        }
    }
}

/// `SetDeploymentCondition`: the same status and reason change nothing; the same status
/// keeps its transition time.
fn set_condition(status: &mut Value, mut cond: Value) {
    let kind = str_at(&cond, "/type").to_string();
    if let Some(cur) = get_condition(status, &kind) {
        let same_status = str_at(cur, "/status") == str_at(&cond, "/status");
        if same_status && str_at(cur, "/reason") == str_at(&cond, "/reason") {
            return;
        }
        if same_status {
            cond["lastTransitionTime"] = cur.get("lastTransitionTime").cloned().unwrap_or_default();
        }
    }
    remove_condition(status, &kind);
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    status["conditions"]
        .as_array_mut()
        .expect("made an array")
        .push(cond);
}

fn has_deadline(d: &Deployment) -> bool {
    deadline_seconds(d).is_some_and(|s| s < i64::from(i32::MAX))
}

fn progressing_reason(d: &Deployment) -> Option<&str> {
    progressing_condition(d).and_then(|c| c.reason.as_deref())
}

/// The figures of a Deployment's status that its progress is judged by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Figures {
    replicas: i64,
    updated: i64,
    ready: i64,
    available: i64,
    observed_generation: i64,
}

impl Figures {
    /// Those of the status as stored.
    fn stored(d: &Deployment) -> Self {
        let Some(status) = d.status.as_ref() else {
            return Self::default();
        };
        Figures {
            replicas: count(status.replicas),
            updated: count(status.updated_replicas),
            ready: count(status.ready_replicas),
            available: count(status.available_replicas),
            observed_generation: status.observed_generation.unwrap_or(0),
        }
    }
}

/// `DeploymentComplete`.
fn complete(d: &Deployment, status: &Figures) -> bool {
    let n = replicas(d);
    status.updated == n
        && status.replicas == n
        && status.available == n
        && status.observed_generation >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: more updated, ready or available pods, or fewer old ones.
fn progressing(d: &Deployment, status: &Figures) -> bool {
    let old = Figures::stored(d);
    let olds = |s: &Figures| s.replicas - s.updated;
    status.updated > old.updated
        || olds(status) < olds(&old)
        || status.ready > old.ready
        || status.available > old.available
}

/// How long since the stored Progressing condition last moved, against the deadline:
/// `Some` of what is left, `None` when there is no deadline to watch.
fn deadline_left(d: &Deployment) -> Option<Duration> {
    let cond = progressing_condition(d)?;
    let secs = deadline_seconds(d)?;
    let moved = cond.last_update_time.as_ref()?;
    let age = k8s_openapi::jiff::Timestamp::now().as_second() - moved.0.as_second();
    Some(Duration::from_secs((secs - age).max(0) as u64))
}

/// `DeploymentTimedOut`, of the Progressing condition as stored (a sync that judges it
/// has not touched it).
fn timed_out(d: &Deployment) -> bool {
    if !has_deadline(d) {
        return false;
    }
    match progressing_reason(d) {
        None | Some("NewReplicaSetAvailable") => false,
        Some("ProgressDeadlineExceeded") => true,
        Some(_) => deadline_left(d).is_some_and(|left| left.is_zero()),
    }
}

/// The status of the Deployment from its sets (`calculateStatus`): the stored one (JSON,
/// every field of it kept) with the sets' figures and the Available condition; and those
/// figures.
fn calculate_status(s: &Sync, all: &[&Set], new: Option<&Set>) -> (Value, Figures) {
    let sum = |f: fn(&Set) -> i64| -> i64 { all.iter().map(|rs| f(rs)).sum() };
    let available = sum(Set::available);
    let total = sum(Set::replicas);
    let figures = Figures {
        replicas: sum(Set::status_replicas),
        updated: new.map_or(0, Set::status_replicas),
        ready: sum(Set::ready),
        available,
        observed_generation: s.d.metadata.generation.unwrap_or(0),
    };
    let mut status = match s.obj.get("status") {
        Some(status @ Value::Object(_)) => status.clone(),
        _ => json!({}),
    };
    let fields = status.as_object_mut().expect("an object");
    fields.insert("observedGeneration".into(), json!(s.d.metadata.generation));
    for (field, n) in [
        ("replicas", figures.replicas),
        ("updatedReplicas", figures.updated),
        ("readyReplicas", figures.ready),
        ("availableReplicas", available),
        ("unavailableReplicas", (total - available).max(0)),
    ] {
        // As Go's omitempty.
        if n == 0 {
            fields.remove(field);
        } else {
            fields.insert(field.into(), json!(n));
        }
    }
    if available >= s.b.replicas - s.b.unavailable {
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
    (status, figures)
}

#[derive(Clone)]
struct Controller {
    client: Client,
    deployments: Informer,
    rss: Informer,
    pods: Informer,
    recorder: Recorder,
}

/// One sync of one Deployment: its object as last written (JSON, what writes start from)
/// and read (decoded from it; again after each write), and its bounds.
struct Sync {
    obj: Value,
    d: Deployment,
    b: Bounds,
}

impl Sync {
    /// The object a write answered, read again.
    fn written(&mut self, obj: Value) -> Result<()> {
        self.d = decode(&obj)?;
        self.obj = obj;
        Ok(())
    }
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.deployments.get(&key) else {
            return Ok(Action::Done);
        };
        let d: Deployment = decode(&obj)?;
        let selector = label_selector(&d.spec.selector);
        if selector.is_empty() {
            self.recorder
                .warning(
                    &obj,
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
            owner: &obj,
            selector: &selector,
        }
        .run()
        .await?;
        let mut rss: Vec<Set> = rss
            .iter()
            .map(|rs| Set::new((**rs).clone()))
            .collect::<Result<_>>()?;
        rss.sort_by(by_creation);
        let mut s = Sync {
            b: Bounds::of(&d),
            d,
            obj: (*obj).clone(),
        };
        if s.d.metadata.deletion_timestamp.is_some() {
            let (new, old) = self.sets(&mut s, rss, false).await?;
            self.sync_status(&mut s, new.as_ref(), &old).await?;
            return Ok(Action::Done);
        }
        self.check_paused(&mut s).await?;
        let paused = paused(&s.d);
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
    fn scaling_event(&self, s: &Sync, rss: &[Set]) -> bool {
        rss.iter()
            .filter(|rs| rs.is_active())
            .filter_map(|rs| rs.annotation(DESIRED_REPLICAS)?.parse::<i64>().ok())
            .any(|desired| desired != s.b.replicas)
    }

    /// Splits the sets into the new one and the old ones, bringing the new one's revision
    /// and the Deployment's up to date; makes the new one when `create` and it is missing
    /// (`getAllReplicaSetsAndSyncRevision`).
    async fn sets(
        &self,
        s: &mut Sync,
        rss: Vec<Set>,
        create: bool,
    ) -> Result<(Option<Set>, Vec<Set>)> {
        let template = without_hash(template_of(&s.obj));
        let mut new = None;
        let mut old = Vec::new();
        for rs in rss {
            if new.is_none() && without_hash(template_of(&rs.obj)) == template {
                new = Some(rs);
            } else {
                old.push(rs);
            }
        }
        let next_revision = old.iter().map(Set::revision).max().unwrap_or(0) + 1;
        let new = match new {
            Some(rs) => Some(self.sync_new(s, rs, next_revision).await?),
            None if create => Some(self.create_new(s, &old, next_revision).await?),
            None => None,
        };
        Ok((new, old))
    }

    /// Brings an existing new set's annotations and `minReadySeconds` up to date.
    async fn sync_new(&self, s: &mut Sync, rs: Set, next_revision: i64) -> Result<Set> {
        let mut copy = rs.obj.clone();
        let mut changed = new_rs_annotations(&s.d, &mut copy, next_revision, true, s.b);
        let min_ready = min_ready_seconds(&s.d);
        if rs.min_ready_seconds() != min_ready {
            copy["spec"]["minReadySeconds"] = json!(min_ready);
            changed = true;
        }
        let rs = if changed {
            Set::new(self.client.update(self.rss.resource(), &copy).await?)?
        } else {
            rs
        };
        let rev = rs.annotation(REVISION).unwrap_or("").to_string();
        self.set_revision(s, &rev).await?;
        if has_deadline(&s.d) && progressing_condition(&s.d).is_none() {
            let message = format!("Found new replica set {:?}", rs.name());
            self.set_progressing(s, "True", "FoundNewReplicaSet", message)
                .await?;
        }
        Ok(rs)
    }

    /// Makes the new set, sized by what the strategy allows now. Its template and
    /// selector are the Deployment's, copied as JSON, with the hash label.
    async fn create_new(&self, s: &mut Sync, old: &[Set], next_revision: i64) -> Result<Set> {
        let d = &s.d;
        let collisions = d
            .status
            .as_ref()
            .and_then(|st| st.collision_count)
            .and_then(|c| u32::try_from(c).ok());
        let hash = template_hash(template_of(&s.obj), collisions);
        let mut template = template_of(&s.obj).clone();
        if !template["metadata"].is_object() {
            template["metadata"] = json!({});
        }
        if !template["metadata"]["labels"].is_object() {
            template["metadata"]["labels"] = json!({});
        }
        template["metadata"]["labels"][HASH_LABEL] = json!(hash);
        let mut selector = s.obj["spec"]["selector"].clone();
        if !selector["matchLabels"].is_object() {
            selector["matchLabels"] = json!({});
        }
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let rs_name = format!("{}-{}", d.metadata.name(), hash);
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let mut rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name,
                "namespace": ns,
                "labels": template["metadata"]["labels"],
                "ownerReferences": [DEPLOYMENTS.controlled_by(&s.obj)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": min_ready_seconds(d),
                "selector": selector,
                "template": template,
            },
        });
        new_rs_annotations(d, &mut rs, next_revision, false, s.b);
        // The new set, yet to be made, has none.
        let current: i64 = old.iter().map(Set::replicas).sum();
        let size = new_rs_replicas(s.b, current, 0);
        rs["spec"]["replicas"] = json!(size);
        let made = match self
            .client
            .create(self.rss.resource(), Some(&ns), &rs)
            .await
        {
            Ok(made) => Set::new(made)?,
            Err(e) if e.is_already_exists() => {
                let existing = self
                    .client
                    .get(self.rss.resource(), Some(&ns), &rs_name)
                    .await?;
                let uid = d.metadata.uid.as_deref().unwrap_or("");
                let ours = controller_ref(&existing).is_some_and(|r| str_at(r, "/uid") == uid);
                if ours && without_hash(template_of(&existing)) == without_hash(template_of(&s.obj))
                {
                    // Made by an earlier sync that the cache has not shown yet.
                    return Set::new(existing);
                }
                let mut status = s.obj.get("status").cloned().unwrap_or_default();
                status["collisionCount"] = json!(collisions.unwrap_or(0) + 1);
                self.write_status(s, status).await?;
                return Err(super::Error::Other(format!(
                    "replica set {rs_name:?} exists with another template: hashing again"
                )));
            }
            Err(e) => {
                let message = format!("Failed to create new replica set {rs_name:?}: {e}");
                self.recorder
                    .warning(&s.obj, "FailedCreate", &message)
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
                .normal(
                    &s.obj,
                    "ScalingReplicaSet",
                    &format!("Scaled up replica set {} from 0 to {size}", made.name()),
                )
                .await;
        }
        self.set_revision(s, &next_revision.to_string()).await?;
        if has_deadline(&s.d) {
            let message = format!("Created new replica set {:?}", made.name());
            self.set_progressing(s, "True", "NewReplicaSetCreated", message)
                .await?;
        }
        Ok(made)
    }

    /// Sets the Deployment's revision annotation to its new set's.
    async fn set_revision(&self, s: &mut Sync, rev: &str) -> Result<()> {
        if rev.is_empty() || s.d.metadata.annotation(REVISION) == Some(rev) {
            return Ok(());
        }
        let mut d = s.obj.clone();
        set_annotation(&mut d, REVISION, rev.to_string());
        let written = self.client.update(self.deployments.resource(), &d).await?;
        s.written(written)
    }

    /// Sets the Progressing condition and writes the status.
    async fn set_progressing(
        &self,
        s: &mut Sync,
        status: &str,
        reason: &str,
        message: String,
    ) -> Result<()> {
        let mut st = match s.obj.get("status") {
            Some(st @ Value::Object(_)) => st.clone(),
            _ => json!({}),
        };
        set_condition(&mut st, condition("Progressing", status, reason, message));
        self.write_status(s, st).await
    }

    /// Writes the Deployment's status when it changed.
    async fn write_status(&self, s: &mut Sync, status: Value) -> Result<()> {
        if s.obj.get("status") == Some(&status) {
            return Ok(());
        }
        let mut d = s.obj.clone();
        d["status"] = status;
        let written = self
            .client
            .update_status(self.deployments.resource(), &d)
            .await?;
        s.written(written)
    }

    /// Sets a set's size (and the replica annotations); records the scaling. Returns
    /// whether the size changed.
    async fn scale(&self, s: &Sync, rs: &mut Set, size: i64, how: &str) -> Result<bool> {
        let from = rs.replicas();
        let desired = s.b.replicas.to_string();
        let max = (s.b.replicas + s.b.surge).to_string();
        let annotations_stale = rs.annotation(DESIRED_REPLICAS) != Some(desired.as_str())
            || rs.annotation(MAX_REPLICAS) != Some(max.as_str());
        if from == size && !annotations_stale {
            return Ok(false);
        }
        let mut copy = rs.obj.clone();
        copy["spec"]["replicas"] = json!(size);
        set_annotation(&mut copy, DESIRED_REPLICAS, desired);
        set_annotation(&mut copy, MAX_REPLICAS, max);
        *rs = Set::new(self.client.update(self.rss.resource(), &copy).await?)?;
        if from != size {
            self.recorder
                .normal(
                    &s.obj,
                    "ScalingReplicaSet",
                    &format!(
                        "Scaled {how} replica set {} from {from} to {size}",
                        rs.name()
                    ),
                )
                .await;
        }
        Ok(from != size)
    }

    async fn scale_auto(&self, s: &Sync, rs: &mut Set, size: i64) -> Result<bool> {
        let how = if size > rs.replicas() { "up" } else { "down" };
        self.scale(s, rs, size, how).await
    }

    /// A paused Deployment or a change of replicas: sizes the sets, nothing more (`sync`).
    async fn sync(&self, s: &mut Sync, rss: Vec<Set>, paused: bool) -> Result<Action> {
        let (mut new, mut old) = self.sets(s, rss, false).await?;
        self.scale_sets(s, new.as_mut(), &mut old).await?;
        if paused {
            self.cleanup(s, &old).await?;
        }
        self.sync_status(s, new.as_ref(), &old).await?;
        Ok(Action::Done)
    }

    /// Spreads the Deployment's replicas over its sets (`scale`).
    async fn scale_sets(&self, s: &Sync, mut new: Option<&mut Set>, old: &mut [Set]) -> Result<()> {
        // One active set (or none: the newest) takes all replicas.
        let active_count = old.iter().filter(|rs| rs.is_active()).count()
            + new.as_ref().is_some_and(|n| n.is_active()) as usize;
        if active_count <= 1 {
            let target: Option<&mut Set> = if new.as_ref().is_some_and(|n| n.is_active()) {
                new
            } else if let Some(rs) = old.iter_mut().find(|rs| rs.is_active()) {
                Some(rs)
            } else if new.is_some() {
                new
            } else {
                old.iter_mut().max_by(|a, b| by_creation(a, b))
            };
            if let Some(rs) = target
                && rs.replicas() != s.b.replicas
            {
                self.scale_auto(s, rs, s.b.replicas).await?;
            }
            return Ok(());
        }
        // A saturated new set: the old ones go.
        if let Some(n) = new.as_deref() {
            let saturated = n.annotation(DESIRED_REPLICAS) == Some(&s.b.replicas.to_string())
                && n.replicas() == s.b.replicas
                && n.available() == s.b.replicas;
            if saturated {
                for rs in old.iter_mut().filter(|rs| rs.is_active()) {
                    self.scale(s, rs, 0, "down").await?;
                }
                return Ok(());
            }
        }
        if s.b.recreate {
            return Ok(());
        }
        // Proportional scaling of every active set.
        let status_replicas = Figures::stored(&s.d).replicas;
        let mut sets: Vec<&mut Set> = old.iter_mut().filter(|rs| rs.is_active()).collect();
        if let Some(n) = new.take().filter(|n| n.is_active()) {
            sets.push(n);
        }
        let total: i64 = sets.iter().map(|rs| rs.replicas()).sum();
        let allowed = if s.b.replicas > 0 {
            s.b.replicas + s.b.surge
        } else {
            0
        };
        let to_add = allowed - total;
        let how = if to_add > 0 { "up" } else { "down" };
        // Bigger sets first; among equals, newer first when growing, older when shrinking.
        sets.sort_by(|a, b| {
            b.replicas().cmp(&a.replicas()).then_with(|| {
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
            sizes.push(rs.replicas() + p);
        }
        if let Some(first) = sizes.first_mut()
            && to_add != 0
        {
            *first = (*first + to_add - added).max(0);
        }
        for (rs, size) in sets.into_iter().zip(sizes) {
            self.scale(s, rs, size, how).await?;
        }
        Ok(())
    }

    /// `rolloutRolling`.
    async fn rollout_rolling(&self, s: &mut Sync, rss: Vec<Set>) -> Result<Action> {
        let (new, mut old) = self.sets(s, rss, true).await?;
        let mut new = new.expect("create makes the new set");
        // Grow the new set.
        let want = s.b.replicas;
        let scaled_up = if new.replicas() > want {
            self.scale(s, &mut new, want, "down").await?
        } else if new.replicas() < want {
            let current = old.iter().map(Set::replicas).sum::<i64>() + new.replicas();
            let size = new_rs_replicas(s.b, current, new.replicas());
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
        if complete(&s.d, &Figures::stored(&s.d)) {
            self.cleanup(s, &old).await?;
        }
        self.rollout_status(s, Some(&new), &old).await
    }

    /// Scales old sets down as far as availability allows, their unavailable pods first
    /// (`reconcileOldReplicaSets`). Returns whether any was scaled.
    async fn shrink_old(&self, s: &Sync, new: &Set, old: &mut [Set]) -> Result<bool> {
        let old_pods: i64 = old.iter().map(Set::replicas).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + new.replicas();
        let min_available = s.b.replicas - s.b.unavailable;
        let new_unavailable = new.replicas() - new.available();
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
            let unhealthy = rs.replicas() - rs.available();
            if rs.replicas() == 0 || unhealthy <= 0 {
                continue;
            }
            let n = (max_down - cleaned).min(unhealthy);
            let size = rs.replicas() - n;
            self.scale(s, rs, size, "down").await?;
            cleaned += n;
        }
        // Then as many available ones as keep the minimum available.
        let available: i64 = old
            .iter()
            .chain(std::iter::once(new))
            .map(Set::available)
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let budget = available - min_available;
            for rs in old.iter_mut() {
                if scaled >= budget {
                    break;
                }
                if rs.replicas() == 0 {
                    continue;
                }
                let n = rs.replicas().min(budget - scaled);
                let size = rs.replicas() - n;
                self.scale(s, rs, size, "down").await?;
                scaled += n;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// `rolloutRecreate`.
    async fn rollout_recreate(&self, s: &mut Sync, rss: Vec<Set>) -> Result<Action> {
        let (new, mut old) = self.sets(s, rss, false).await?;
        let mut scaled = false;
        for rs in old.iter_mut().filter(|rs| rs.is_active()) {
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
                let next_revision = old.iter().map(Set::revision).max().unwrap_or(0) + 1;
                self.create_new(s, &old, next_revision).await?
            }
        };
        if new.replicas() != s.b.replicas {
            self.scale_auto(s, &mut new, s.b.replicas).await?;
        }
        if complete(&s.d, &Figures::stored(&s.d)) {
            self.cleanup(s, &old).await?;
        }
        self.rollout_status(s, Some(&new), &old).await
    }

    /// Whether any pod of an old set has yet to finish (`oldPodsRunning`). Pods are read
    /// as JSON: the namespace's every one is looked at.
    fn old_pods_running(&self, new: Option<&Set>, old: &[Set]) -> bool {
        if old.iter().any(|rs| rs.status_replicas() > 0) {
            return true;
        }
        let new_uid = new.map(Set::uid);
        let uids: Vec<&str> = old
            .iter()
            .map(Set::uid)
            .filter(|u| Some(*u) != new_uid)
            .collect();
        let ns = old.first().map(Set::namespace).unwrap_or("");
        self.pods.list_namespace(ns).iter().any(|pod| {
            controller_ref(pod).is_some_and(|r| uids.contains(&str_at(r, "/uid")))
                && !matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
        })
    }

    /// Deletes the oldest empty sets beyond `revisionHistoryLimit` (`cleanupDeployment`).
    async fn cleanup(&self, s: &Sync, old: &[Set]) -> Result<()> {
        let Some(limit) = s.d.spec.revision_history_limit else {
            return Ok(());
        };
        let mut alive: Vec<&Set> = old
            .iter()
            .filter(|rs| rs.rs.metadata.deletion_timestamp.is_none())
            .collect();
        let extra = alive.len() as i64 - i64::from(limit);
        if extra <= 0 {
            return Ok(());
        }
        alive.sort_by(|a, b| a.revision().cmp(&b.revision()).then(by_creation(a, b)));
        for rs in alive.into_iter().take(extra as usize) {
            if rs.status_replicas() != 0
                || rs.replicas() != 0
                || rs.rs.metadata.generation.unwrap_or(0) > rs.observed_generation()
            {
                continue;
            }
            let params = DeleteParams {
                uid: Some(rs.uid().to_string()),
                ..DeleteParams::default()
            };
            match self
                .client
                .delete(
                    self.rss.resource(),
                    Some(rs.namespace()),
                    rs.name(),
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
        let marked = reason == Some("DeploymentPaused");
        let (reason, message) = match (paused(&s.d), marked) {
            (true, false) => ("DeploymentPaused", "Deployment is paused"),
            (false, true) => ("DeploymentResumed", "Deployment is resumed"),
            _ => return Ok(()),
        };
        self.set_progressing(s, "Unknown", reason, message.into())
            .await
    }

    /// The status alone (`syncDeploymentStatus`).
    async fn sync_status(&self, s: &mut Sync, new: Option<&Set>, old: &[Set]) -> Result<()> {
        let mut all: Vec<&Set> = old.iter().collect();
        all.extend(new);
        let (status, _) = calculate_status(s, &all, new);
        self.write_status(s, status).await
    }

    /// The status with the progress made (`syncRolloutStatus`); asks to look again when
    /// the deadline could pass with no event to tell.
    async fn rollout_status(&self, s: &mut Sync, new: Option<&Set>, old: &[Set]) -> Result<Action> {
        let mut all: Vec<&Set> = old.iter().collect();
        all.extend(new);
        let (mut status, figures) = calculate_status(s, &all, new);
        let d = &s.d;
        if !has_deadline(d) {
            remove_condition(&mut status, "Progressing");
        }
        let current = progressing_condition(d);
        let done = figures.replicas == figures.updated
            && current.is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"));
        let subject = |what: &str| match new {
            Some(rs) => format!("ReplicaSet {:?} {what}.", rs.name()),
            None => format!("Deployment {:?} {what}.", d.metadata.name()),
        };
        if has_deadline(d) && !done {
            if complete(d, &figures) {
                set_condition(
                    &mut status,
                    condition(
                        "Progressing",
                        "True",
                        "NewReplicaSetAvailable",
                        subject("has successfully progressed"),
                    ),
                );
            } else if progressing(d, &figures) {
                let mut cond = condition(
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    subject("is progressing"),
                );
                if current.is_some_and(|c| c.status.as_deref() == Some("True")) {
                    // The stored condition, as the status being written still has it.
                    if let Some(c) = get_condition(&status, "Progressing") {
                        cond["lastTransitionTime"] =
                            c.get("lastTransitionTime").cloned().unwrap_or_default();
                    }
                }
                remove_condition(&mut status, "Progressing");
                set_condition(&mut status, cond);
            } else if timed_out(d) {
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
        if s.obj.get("status") == Some(&status) {
            // Nothing moved: look again when the deadline would pass.
            let stuck = has_deadline(d)
                && !complete(d, &figures)
                && current.is_some_and(|c| c.reason.as_deref() != Some("ProgressDeadlineExceeded"));
            if stuck && let Some(left) = deadline_left(d) {
                return Ok(Action::RequeueAfter(left + Duration::from_secs(1)));
            }
            return Ok(Action::Done);
        }
        self.write_status(s, status).await?;
        Ok(Action::Done)
    }
}

/// The `ReplicaFailure` of the new set, else of an old one, as the Deployment's.
fn replica_failure(new: Option<&Set>, old: &[Set]) -> Option<Value> {
    new.and_then(Set::failure)
        .or_else(|| old.iter().find_map(Set::failure))
}

/// Copies the Deployment's annotations to a set being written and gives it the next
/// revision, keeping the revisions it had as history (a rollback); a set about to be made
/// gets the replica annotations too (`SetNewReplicaSetAnnotations`). Returns whether
/// anything changed.
fn new_rs_annotations(d: &Deployment, rs: &mut Value, next: i64, exists: bool, b: Bounds) -> bool {
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if NOT_COPIED.contains(&k.as_str()) || annotation(rs, k) == Some(v.as_str()) {
            continue;
        }
        set_annotation(rs, k, v.clone());
        changed = true;
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
    // A Recreate rollout waits for the old pods to be gone.
    let recreating = {
        let (deployments, rss) = (deployments.clone(), rss.clone());
        move |pod: &Value| -> Option<String> {
            let rs = rss.get(&REPLICA_SETS.key_of_controller(pod)?)?;
            let key = DEPLOYMENTS.key_of_controller(&rs)?;
            let d = deployments.get(&key)?;
            (str_at(&d, "/spec/strategy/type") == "Recreate").then_some(key)
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
        .owns_or_adopts(
            &rss,
            DEPLOYMENTS,
            runtime::selecting(&deployments, spec_label_selector),
        )
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
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(replicas: i64, surge: Value, unavailable: Value) -> Deployment {
        decode(
            &json!({"metadata": {"name": "web"}, "spec": {"replicas": replicas, "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}}),
        )
        .unwrap()
    }

    fn rs(replicas: i64, max: Option<i64>) -> Set {
        let mut rs = json!({"metadata": {"name": "rs"}, "spec": {"replicas": replicas}});
        if let Some(m) = max {
            rs["metadata"]["annotations"] = json!({MAX_REPLICAS: m.to_string()});
        }
        Set::new(rs).unwrap()
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
        let b = Bounds::of(&decode(&recreate).unwrap());
        assert!(b.recreate);
        assert_eq!((b.surge, b.unavailable), (0, 0));
    }

    #[test]
    fn the_new_set_grows_within_the_surge() {
        let b = Bounds::of(&d(10, json!(3), json!(2)));
        // An old set of 10 and a new one of 0, of 8 and 3, of 8 and 5.
        assert_eq!(new_rs_replicas(b, 10, 0), 3);
        assert_eq!(new_rs_replicas(b, 8 + 3, 3), 5);
        assert_eq!(new_rs_replicas(b, 8 + 5, 5), 5, "at the limit");
    }

    #[test]
    fn a_scale_is_shared_by_the_sets_sizes() {
        // Upstream's proportional scaling e2e: 8 + 5 of 10 (+3 surge) scaled to 30.
        let b = Bounds::of(&d(30, json!(3), json!(2)));
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
        let deploy = decode(&json!({"metadata": {"annotations": {
            "kubernetes.io/change-cause": "undo",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        }}}))
        .unwrap();
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
