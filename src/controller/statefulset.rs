//! The statefulset controller: keeps a StatefulSet's pods, one per ordinal with a stable
//! name (`<set>-<ordinal>`), hostname and subdomain, each with its own claims, as
//! kube-controller-manager's (`pkg/controller/statefulset`) does.
//!
//! A pass (`updateStatefulSet` upstream) sorts the set's pods into the ordinals it keeps
//! (`spec.ordinals.start` onwards, `spec.replicas` of them) and the condemned ones
//! beyond. With `OrderedReady` pods are made in ascending order, each only when those
//! before it are running, ready and available, and condemned ones go in descending order
//! one at a time; `Parallel` makes and deletes them all at once. A failed or succeeded pod
//! is deleted and made again. Before a pod is made its claims are made from
//! `volumeClaimTemplates` (`<template>-<set>-<ordinal>`, kept when the pod goes); the
//! `persistentVolumeClaimRetentionPolicy` is carried out through owner references on the
//! claims (to the set for `whenDeleted: Delete`, to a condemned pod for `whenScaled:
//! Delete`), which the garbage collector follows.
//!
//! Templates are kept as ControllerRevisions ([`History`], labelled
//! `controller.kubernetes.io/hash`); every pod carries the name of the revision it was
//! made from in `controller-revision-hash`. `status.currentRevision` is the revision the
//! pods below the partition keep; `status.updateRevision` the one of the template.
//! `RollingUpdate` deletes, from the highest ordinal down to `partition`, up to
//! `maxUnavailable` pods of an older revision at a time while no more than that many are
//! unavailable (the pass makes them again at the update revision); `OnDelete` replaces
//! only pods that are gone. When every pod is updated and ready the update revision
//! becomes the current one.
//!
//! What upstream's update of an existing pod would also mend (its hostname, subdomain and
//! volumes) lives in the pod spec, which the API keeps immutable; berth mends the identity
//! labels and the claims' owners only.
//!
//! A pass decodes its set once as a k8s-openapi `StatefulSet` and reads typed fields from
//! then on; its pods stay JSON (their few fields read through accessors), and what is
//! written starts from JSON: pod templates and claim templates are copied as stored, the
//! status write starts from the stored set.

use crate::types::meta::Meta;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetSpec, StatefulSetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::claim::{Claim, OwnerKind, is_deleting};
use super::history::{self, History};
use super::replication::{label_selector, spec_label_selector};
use super::{Action, Context, Queue, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, DeleteParams, Kind, catalog, key_of};
use crate::types::json::{array_at, str_at};

/// The label that names the revision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// The label that names a pod of a StatefulSet (for a Service to select one).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label that carries a pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label a revision carries its hash under.
const HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// A debugging override: a pod annotated `false` is not ready to the controller.
const INITIALIZED_ANNOTATION: &str = "pod.beta.kubernetes.io/initialized";
const WORKERS: usize = 2;

const STATEFUL_SETS: OwnerKind = OwnerKind {
    api_version: "apps/v1",
    kind_name: "StatefulSet",
};

fn name(obj: &Value) -> &str {
    str_at(obj, "/metadata/name")
}

/// A label's JSON pointer in an object's metadata (`/` in a key is written `~1`).
fn label_at(key: &str) -> String {
    format!(
        "/metadata/labels/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

/// A StatefulSet as a pass reads it: decoded once from the stored object, which stays at
/// hand as JSON for what is written from it (events name it, pods and claims copy its
/// templates, the status write starts from a copy of it).
struct Set<'a> {
    obj: &'a Value,
    meta: ObjectMeta,
    spec: StatefulSetSpec,
    status: StatefulSetStatus,
}

impl Meta for Set<'_> {
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
}

impl<'a> Set<'a> {
    fn decode(obj: &'a Value) -> Result<Self> {
        let set: StatefulSet = decode(obj)?;
        Ok(Set {
            obj,
            meta: set.metadata,
            spec: set.spec,
            status: set.status.unwrap_or_default(),
        })
    }

    fn start_ordinal(&self) -> i64 {
        self.spec
            .ordinals
            .as_ref()
            .and_then(|o| o.start)
            .map_or(0, i64::from)
    }

    fn replicas(&self) -> i64 {
        i64::from(self.spec.replicas.unwrap_or(1)).max(0)
    }

    fn in_range(&self, pod: &Value) -> bool {
        let o = ordinal(pod);
        let start = self.start_ordinal();
        o >= start && o < start + self.replicas()
    }

    fn min_ready(&self) -> i64 {
        self.spec.min_ready_seconds.map_or(0, i64::from)
    }

    fn rolling(&self) -> bool {
        self.spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.type_.as_deref())
            == Some("RollingUpdate")
    }

    fn rolling_update(&self) -> Option<&RollingUpdateStatefulSetStrategy> {
        self.spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
    }

    /// The claim templates, as stored: claims copy them.
    fn claim_templates(&self) -> &'a [Value] {
        claim_templates(self.obj)
    }
}

/// The set and ordinal a pod's name gives (`getParentNameAndOrdinal`).
pub fn parent_and_ordinal(pod_name: &str) -> Option<(&str, i64)> {
    let (parent, digits) = pod_name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ordinal = digits.parse::<i32>().ok()?;
    Some((parent, i64::from(ordinal)))
}

fn ordinal(pod: &Value) -> i64 {
    parent_and_ordinal(name(pod)).map_or(-1, |(_, o)| o)
}

fn phase(pod: &Value) -> &str {
    str_at(pod, "/status/phase")
}

fn revision_of(pod: &Value) -> &str {
    str_at(pod, &label_at(REVISION_LABEL))
}

/// Running and ready, unless the debugging annotation says otherwise.
fn is_running_and_ready(pod: &Value) -> bool {
    if phase(pod) != "Running" || !crate::types::is_pod_ready(pod) {
        return false;
    }
    let held = str_at(
        pod,
        &format!(
            "/metadata/annotations/{}",
            INITIALIZED_ANNOTATION.replace('/', "~1")
        ),
    );
    held != "false"
}

/// How long until a running, ready pod is available; `None` when it is not ready.
fn until_available(pod: &Value, min_ready: i64) -> Option<Duration> {
    if !is_running_and_ready(pod) {
        return None;
    }
    crate::types::until_pod_available(pod, min_ready)
}

fn is_available(pod: &Value, min_ready: i64) -> bool {
    until_available(pod, min_ready).is_some_and(|d| d.is_zero())
}

fn is_unavailable(pod: &Value, min_ready: i64) -> bool {
    !is_available(pod, min_ready) || is_deleting(pod)
}

fn claim_name(template: &Value, set: &Set, ordinal: i64) -> String {
    format!("{}-{}-{ordinal}", name(template), set.name())
}

/// A stored set's claim templates.
fn claim_templates(set: &Value) -> &[Value] {
    array_at(set, "/spec/volumeClaimTemplates")
}

/// Whether a pod is named, labelled and addressed as its ordinal of `set`
/// (`identityMatches`).
fn identity_matches(set: &Set, pod: &Value) -> bool {
    let Some((parent, o)) = parent_and_ordinal(name(pod)) else {
        return false;
    };
    parent == set.name()
        && str_at(pod, "/metadata/namespace") == set.namespace()
        && str_at(pod, &label_at(POD_NAME_LABEL)) == name(pod)
        && str_at(pod, &label_at(POD_INDEX_LABEL)) == o.to_string()
}

/// A pod's metadata as its ordinal wants it: the identity labels.
fn mend_identity(pod: &mut Value) {
    let o = ordinal(pod);
    let pod_name = name(pod).to_string();
    if !pod["metadata"]["labels"].is_object() {
        pod["metadata"]["labels"] = json!({});
    }
    pod["metadata"]["labels"][POD_NAME_LABEL] = json!(pod_name);
    pod["metadata"]["labels"][POD_INDEX_LABEL] = json!(o.to_string());
}

/// The pod of `ordinal` from `set` at the revision `revision` names (whose pod template
/// is `template`): the template with the identity, the claims as volumes and the set as
/// controller (`newStatefulSetPod`).
fn new_pod(set: &Set, template: &Value, ordinal: i64, revision: &str) -> Value {
    let mut metadata = template
        .get("metadata")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let pod_name = format!("{}-{ordinal}", set.name());
    if let Some(m) = metadata.as_object_mut() {
        m.remove("generateName");
        m.insert("name".into(), json!(pod_name));
        m.insert("namespace".into(), json!(set.namespace()));
        m.insert(
            "ownerReferences".into(),
            json!([STATEFUL_SETS.controlled_by(set.obj)]),
        );
    }
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata});
    pod["spec"] = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    mend_identity(&mut pod);
    pod["metadata"]["labels"][REVISION_LABEL] = json!(revision);
    pod["spec"]["hostname"] = json!(pod_name);
    if let Some(service) = set.spec.service_name.as_deref().filter(|s| !s.is_empty()) {
        pod["spec"]["subdomain"] = json!(service);
    }
    // The claims' volumes replace the template's volumes of the same name (`updateStorage`).
    let templates = set.claim_templates();
    let mut volumes: Vec<Value> = templates
        .iter()
        .map(|t| {
            json!({
                "name": name(t),
                "persistentVolumeClaim": {"claimName": claim_name(t, set, ordinal)},
            })
        })
        .collect();
    for v in array_at(&pod, "/spec/volumes") {
        if !templates.iter().any(|t| name(t) == str_at(v, "/name")) {
            volumes.push(v.clone());
        }
    }
    if !volumes.is_empty() {
        pod["spec"]["volumes"] = json!(volumes);
    }
    pod
}

/// The claim of `template` for `ordinal` (`getPersistentVolumeClaims`): labelled with the
/// set's selector.
fn new_claim(set: &Set, template: &Value, ordinal: i64) -> Value {
    let mut metadata = template
        .get("metadata")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    metadata["name"] = json!(claim_name(template, set, ordinal));
    metadata["namespace"] = json!(set.namespace());
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    for (k, v) in set.spec.selector.match_labels.iter().flatten() {
        metadata["labels"][k] = json!(v);
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

fn plain_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
    })
}

/// The owner references a claim of `pod` should have under the set's retention policy,
/// if they differ from what it has (`updateClaimOwnerRefForSetAndPod`): the set owns it
/// for `whenDeleted: Delete`, a condemned pod for `whenScaled: Delete` (and then the set
/// no longer does, so that a scale down deletes it and a deletion of the set does not
/// race it).
fn wanted_owners(set: &Set, pod: &Value, claim: &Value) -> Option<Value> {
    let policy = set.spec.persistent_volume_claim_retention_policy.as_ref();
    let when_scaled = policy.and_then(|p| p.when_scaled.as_deref()) == Some("Delete");
    let when_deleted = policy.and_then(|p| p.when_deleted.as_deref()) == Some("Delete");
    let condemned = !set.in_range(pod);
    let (by_set, by_pod) = match (when_scaled, when_deleted) {
        (false, false) => (false, false),
        (false, true) => (true, false),
        (true, false) => (false, condemned),
        (true, true) => (!condemned, condemned),
    };
    let set_uid = set.uid();
    let pod_uid = str_at(pod, "/metadata/uid");
    let refs = array_at(claim, "/metadata/ownerReferences");
    fn uid(r: &Value) -> &str {
        str_at(r, "/uid")
    }
    let has = |u: &str| refs.iter().any(|r| uid(r) == u);
    if has(set_uid) == by_set && (pod_uid.is_empty() || has(pod_uid) == by_pod) {
        return None;
    }
    let mut out: Vec<Value> = refs
        .iter()
        .filter(|r| uid(r) != set_uid && (pod_uid.is_empty() || uid(r) != pod_uid))
        .cloned()
        .collect();
    if by_set {
        out.push(plain_ref("apps/v1", "StatefulSet", set.name(), set_uid));
    }
    if by_pod && !pod_uid.is_empty() {
        out.push(plain_ref("v1", "Pod", name(pod), pod_uid));
    }
    Some(json!(out))
}

/// The pods' counts as the status reports them (`computeReplicaStatus`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    replicas: i64,
    ready: i64,
    available: i64,
    current: i64,
    updated: i64,
}

fn count<'a>(
    pods: impl IntoIterator<Item = &'a Value>,
    min_ready: i64,
    current: &str,
    update: &str,
) -> Counts {
    let mut c = Counts::default();
    for pod in pods {
        c.replicas += 1;
        if is_running_and_ready(pod) {
            c.ready += 1;
            if is_available(pod, min_ready) {
                c.available += 1;
            }
        }
        if !is_deleting(pod) {
            let rev = revision_of(pod);
            c.current += i64::from(rev == current);
            c.updated += i64::from(rev == update);
        }
    }
    c
}

/// The status a pass leaves, the way upstream's struct serialises (zero counts left out
/// but `replicas` and `availableReplicas`).
fn status_of(set: &Set, counts: Counts, current: &str, update: &str) -> Value {
    let mut current = current;
    let mut current_replicas = counts.current;
    // `completeRollingUpdate`.
    if set.rolling() && counts.updated == counts.replicas && counts.ready == counts.replicas {
        current_replicas = counts.updated;
        current = update;
    }
    let mut status = json!({
        "observedGeneration": set.meta.generation,
        "replicas": counts.replicas,
        "availableReplicas": counts.available,
        "currentRevision": current,
        "updateRevision": update,
        "collisionCount": set.status.collision_count.unwrap_or(0),
    });
    for (field, n) in [
        ("readyReplicas", counts.ready),
        ("currentReplicas", current_replicas),
        ("updatedReplicas", counts.updated),
    ] {
        if n != 0 {
            status[field] = json!(n);
        }
    }
    // Conditions are not the controller's; keep what others wrote, as stored.
    if let Some(c) = set.obj.pointer("/status/conditions") {
        status["conditions"] = c.clone();
    }
    status
}

/// What a pass did with one pod, the way `processReplica` answers.
enum Step {
    /// Go on with the next pod.
    Next,
    /// Stop here (in `OrderedReady`): the pod is being made, replaced or waited for.
    Stop,
}

#[derive(Clone)]
struct Controller {
    client: Client,
    sets: Informer,
    pods: Informer,
    claims: Informer,
    revisions: Informer,
    recorder: Recorder,
}

/// One pass over one set.
struct Pass<'a> {
    c: &'a Controller,
    /// The set as it is.
    set: &'a Set<'a>,
    /// The pod templates of its current and its update revision.
    current_template: Value,
    update_template: Value,
    current: String,
    update: String,
    /// Pods deleted in this pass (by name), which the status no longer counts as current
    /// or updated.
    deleted: Vec<String>,
    /// When a pod becomes available, if one is waited for.
    wait: Option<Duration>,
}

impl Controller {
    fn history(&self) -> History<'_> {
        History {
            client: &self.client,
            kind: STATEFUL_SETS,
            owners: self.sets.resource(),
            revisions: &self.revisions,
            hash_label: HASH_LABEL,
            annotations: false,
        }
    }

    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.sets.get(&key) else {
            return Ok(Action::Done);
        };
        let set = Set::decode(&obj)?;
        if set.meta.deletion_timestamp.is_some() {
            // The garbage collector takes the pods, revisions and owned claims.
            return Ok(Action::Done);
        }
        let selector = label_selector(&set.spec.selector);
        if selector.is_empty() {
            return Ok(Action::Done);
        }
        let history = self.history();
        let revs = history.list(set.obj, &selector).await?;
        let owner = history::Owner {
            obj: set.obj,
            meta: &set.meta,
            template_labels: set
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref()),
            collision_count: set.status.collision_count,
        };
        let (update_rev, others) = history.record(&owner, revs).await?;
        let wanted = set.status.current_revision.as_deref().unwrap_or("");
        let current_rev = others
            .iter()
            .find(|r| name(r) == wanted)
            .cloned()
            .unwrap_or_else(|| update_rev.clone());
        let set_name = set.name().to_string();
        let pods = Claim {
            client: &self.client,
            kind: STATEFUL_SETS,
            owners: self.sets.resource(),
            children: &self.pods,
            owner: set.obj,
            selector: &selector,
        }
        .run_filtered(|p| parent_and_ordinal(name(p)).is_some_and(|(s, _)| s == set_name))
        .await?;
        let pods: Vec<Value> = pods.iter().map(|p| (**p).clone()).collect();
        let mut pass = Pass {
            c: &self,
            set: &set,
            current_template: history::template_of(&current_rev),
            update_template: history::template_of(&update_rev),
            current: name(&current_rev).to_string(),
            update: name(&update_rev).to_string(),
            deleted: Vec::new(),
            wait: None,
        };
        let outcome = pass.run(&pods).await;
        // The status is written even when the pass stopped on an error.
        let min = set.min_ready();
        let mut counts = count(&pods, min, &pass.current, &pass.update);
        // What this pass deleted no longer counts as current or updated.
        for pod in pods
            .iter()
            .filter(|p| pass.deleted.iter().any(|d| d == name(p)))
        {
            counts.current -= i64::from(revision_of(pod) == pass.current);
            counts.updated -= i64::from(revision_of(pod) == pass.update);
        }
        let status = status_of(&set, counts, &pass.current, &pass.update);
        self.write_status(&set, status).await?;
        outcome?;
        let live: Vec<&str> = pods.iter().map(revision_of).collect();
        let limit = set.spec.revision_history_limit.map_or(10, i64::from);
        let (current, update) = (pass.current.clone(), pass.update.clone());
        history
            .truncate(limit, &others, |r| {
                name(r) == current || name(r) == update || live.contains(&name(r))
            })
            .await?;
        Ok(pass.wait.map_or(Action::Done, Action::RequeueAfter))
    }

    async fn write_status(&self, set: &Set<'_>, status: Value) -> Result<()> {
        let old = set.obj.get("status").cloned().unwrap_or_else(|| json!({}));
        if old == status {
            return Ok(());
        }
        let mut copy = set.obj.clone();
        copy["status"] = status;
        match self.client.update_status(self.sets.resource(), &copy).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn pod_event(&self, set: &Set<'_>, verb: &str, pod: &str, error: Option<String>) {
        let title = format!("{}{}", verb[..1].to_uppercase(), &verb[1..]);
        let (set_name, set) = (set.name(), set.obj);
        match error {
            None => {
                let message = format!("{verb} Pod {pod} in StatefulSet {set_name} successful");
                self.recorder
                    .normal(set, &format!("Successful{title}"), &message)
                    .await;
            }
            Some(e) => {
                let message =
                    format!("{verb} Pod {pod} in StatefulSet {set_name} failed error: {e}");
                self.recorder
                    .warning(set, &format!("Failed{title}"), &message)
                    .await;
            }
        }
    }

    async fn claim_event(
        &self,
        set: &Set<'_>,
        verb: &str,
        claim: &str,
        pod: &str,
        error: Option<String>,
    ) {
        let title = format!("{}{}", verb[..1].to_uppercase(), &verb[1..]);
        let (set_name, set) = (set.name(), set.obj);
        match error {
            None => {
                let message =
                    format!("{verb} Claim {claim} Pod {pod} in StatefulSet {set_name} success");
                self.recorder
                    .normal(set, &format!("Successful{title}"), &message)
                    .await;
            }
            Some(e) => {
                let message = format!(
                    "{verb} Claim {claim} for Pod {pod} in StatefulSet {set_name} failed error: {e}"
                );
                self.recorder
                    .warning(set, &format!("Failed{title}"), &message)
                    .await;
            }
        }
    }
}

impl Pass<'_> {
    fn monotonic(&self) -> bool {
        self.set.spec.pod_management_policy.as_deref() != Some("Parallel")
    }

    /// Notes when a ready pod becomes available, to look again then.
    fn wait_for(&mut self, pod: &Value) {
        if let Some(d) = until_available(pod, self.set.min_ready()).filter(|d| !d.is_zero()) {
            let d = d + Duration::from_millis(100);
            self.wait = Some(self.wait.map_or(d, |w| w.min(d)));
        }
    }

    async fn run(&mut self, pods: &[Value]) -> Result<()> {
        let set = self.set;
        let start = set.start_ordinal();
        let count = set.replicas();
        let mut slots: Vec<Option<&Value>> = vec![None; count as usize];
        let mut condemned: Vec<&Value> = Vec::new();
        for pod in pods {
            let o = ordinal(pod);
            if set.in_range(pod) {
                slots[(o - start) as usize] = Some(pod);
            } else if o >= 0 {
                condemned.push(pod);
            }
        }
        condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
        let min = set.min_ready();
        let first_unavailable = slots
            .iter()
            .flatten()
            .copied()
            .chain(condemned.iter().rev().copied())
            .find(|p| is_unavailable(p, min))
            .map(|p| name(p).to_string());
        let monotonic = self.monotonic();

        for (i, slot) in slots.iter().enumerate() {
            let step = match slot {
                Some(pod) => self.replica(pod, monotonic).await?,
                None => self.create(start + i as i64, monotonic).await?,
            };
            if matches!(step, Step::Stop) && monotonic {
                return Ok(());
            }
        }
        for pod in &condemned {
            self.fix_claims(pod).await?;
        }
        for pod in &condemned {
            if is_deleting(pod) {
                if monotonic {
                    return Ok(());
                }
                continue;
            }
            let first = first_unavailable.as_deref() == Some(name(pod));
            if monotonic && is_unavailable(pod, min) && !first {
                // Waiting for the first unhealthy pod before scaling down further.
                return Ok(());
            }
            self.delete(pod).await?;
            if monotonic {
                return Ok(());
            }
        }
        if !set.rolling() {
            return Ok(());
        }
        self.roll(&slots).await
    }

    /// Makes the pod of `ordinal` (and its claims) at the revision its ordinal takes
    /// (`newVersionedStatefulSetPod`).
    async fn create(&mut self, ordinal: i64, monotonic: bool) -> Result<Step> {
        // The revisions differ in their templates only: the strategy is the set's.
        let set = self.set;
        let at_current = match set.rolling_update() {
            None => set.rolling() && ordinal < set.status.current_replicas.map_or(0, i64::from),
            Some(ru) => ordinal < ru.partition.map_or(0, i64::from),
        };
        let (template, revision) = if at_current {
            (&self.current_template, &self.current)
        } else {
            (&self.update_template, &self.update)
        };
        let pod = new_pod(set, template, ordinal, revision);
        if !self.create_claims(&pod).await? {
            return Ok(Step::Stop);
        }
        let ns = set.namespace();
        let pod_name = name(&pod).to_string();
        match self
            .c
            .client
            .create(self.c.pods.resource(), Some(ns), &pod)
            .await
        {
            Ok(_) => {
                self.c.pod_event(self.set, "create", &pod_name, None).await;
            }
            // Made by an earlier pass the cache does not show yet: its arrival brings us back.
            Err(e) if e.is_already_exists() => return Ok(Step::Stop),
            Err(e) => {
                self.c
                    .pod_event(self.set, "create", &pod_name, Some(e.to_string()))
                    .await;
                return Err(e.into());
            }
        }
        Ok(if monotonic { Step::Stop } else { Step::Next })
    }

    /// Makes the claims a pod mounts that do not exist (`createPersistentVolumeClaims`);
    /// false while one of them is still being deleted.
    async fn create_claims(&self, pod: &Value) -> Result<bool> {
        let set = self.set;
        let ns = set.namespace();
        let o = ordinal(pod);
        let res = self.c.claims.resource();
        for template in set.claim_templates() {
            let claim_name = claim_name(template, set, o);
            if let Some(existing) = self.c.claims.get(&format!("{ns}/{claim_name}")) {
                if is_deleting(&existing) {
                    tracing::debug!(claim = %claim_name, "waiting for a claim being deleted");
                    return Ok(false);
                }
                continue;
            }
            let mut claim = new_claim(set, template, o);
            if let Some(refs) = wanted_owners(set, pod, &claim) {
                claim["metadata"]["ownerReferences"] = refs;
            }
            match self.c.client.create(res, Some(ns), &claim).await {
                Ok(_) => {
                    self.c
                        .claim_event(set, "create", &claim_name, name(pod), None)
                        .await;
                }
                Err(e) if e.is_already_exists() => {}
                Err(e) => {
                    self.c
                        .claim_event(set, "create", &claim_name, name(pod), Some(e.to_string()))
                        .await;
                    return Err(e.into());
                }
            }
        }
        Ok(true)
    }

    /// Gives a pod's claims the owners the retention policy wants
    /// (`UpdatePodClaimForRetentionPolicy`).
    async fn fix_claims(&self, pod: &Value) -> Result<()> {
        let ns = self.set.namespace();
        let res = self.c.claims.resource();
        for template in self.set.claim_templates() {
            let key = format!("{ns}/{}", claim_name(template, self.set, ordinal(pod)));
            let Some(claim) = self.c.claims.get(&key) else {
                continue;
            };
            if is_deleting(&claim) {
                continue;
            }
            let Some(refs) = wanted_owners(self.set, pod, &claim) else {
                continue;
            };
            let mut claim = (*claim).clone();
            claim["metadata"]["ownerReferences"] = refs;
            match self.c.client.update(res, &claim).await {
                Ok(_) => {
                    self.c
                        .claim_event(self.set, "update", name(&claim), name(pod), None)
                        .await;
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// One living pod of the set (`processReplica`).
    async fn replica(&mut self, pod: &Value, monotonic: bool) -> Result<Step> {
        if matches!(phase(pod), "Failed" | "Succeeded") {
            if !is_deleting(pod) {
                self.delete(pod).await?;
            }
            // Made again once the informer shows it gone.
            return Ok(Step::Stop);
        }
        if phase(pod) == "Pending" && !self.create_claims(pod).await? {
            return Ok(Step::Stop);
        }
        if monotonic {
            if is_deleting(pod) || !is_running_and_ready(pod) {
                return Ok(Step::Stop);
            }
            if !is_available(pod, self.set.min_ready()) {
                self.wait_for(pod);
                return Ok(Step::Stop);
            }
        } else {
            self.wait_for(pod);
        }
        if !is_deleting(pod) {
            self.fix_claims(pod).await?;
            if !identity_matches(self.set, pod) {
                let mut mended = pod.clone();
                mend_identity(&mut mended);
                match self.c.client.update(self.c.pods.resource(), &mended).await {
                    Ok(_) => self.c.pod_event(self.set, "update", name(pod), None).await,
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => {
                        self.c
                            .pod_event(self.set, "update", name(pod), Some(e.to_string()))
                            .await;
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(Step::Next)
    }

    /// Deletes one pod of the set, if it is still the one we saw.
    async fn delete(&mut self, pod: &Value) -> Result<()> {
        let params = DeleteParams {
            uid: Some(str_at(pod, "/metadata/uid").to_string()),
            ..DeleteParams::default()
        };
        let ns = self.set.namespace();
        let res = self.c.pods.resource();
        match self
            .c
            .client
            .delete(res, Some(ns), name(pod), &params)
            .await
        {
            Ok(_) => {
                self.deleted.push(name(pod).to_string());
                self.c.pod_event(self.set, "delete", name(pod), None).await;
                Ok(())
            }
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => {
                self.c
                    .pod_event(self.set, "delete", name(pod), Some(e.to_string()))
                    .await;
                Err(e.into())
            }
        }
    }

    /// The rolling update once every kept pod is healthy
    /// (`updateStatefulSetAfterInvariantEstablished`): from the highest ordinal down to the
    /// partition, deletes pods of an older revision while at most `maxUnavailable` are
    /// unavailable.
    async fn roll(&mut self, slots: &[Option<&Value>]) -> Result<()> {
        let set = self.set;
        let ru = set.rolling_update();
        let partition = ru.and_then(|r| r.partition).map_or(0, i64::from);
        let total = slots.len() as i64;
        let max_unavailable = match ru.and_then(|r| r.max_unavailable.as_ref()) {
            Some(v) => super::deployment::scaled_int_or_percent(Some(v), total, false).max(1),
            None => 1,
        };
        let min = set.min_ready();
        let unavailable = slots
            .iter()
            .filter(|p| p.is_none_or(|p| is_unavailable(p, min)))
            .count() as i64;
        if unavailable > max_unavailable {
            return Ok(());
        }
        let mut budget = max_unavailable - unavailable;
        for i in (0..slots.len()).rev() {
            if budget <= 0 || (i as i64) < partition {
                break;
            }
            let Some(pod) = slots[i] else {
                continue;
            };
            if revision_of(pod) != self.update && !is_deleting(pod) {
                self.delete(pod).await?;
                budget -= 1;
            }
        }
        Ok(())
    }
}

/// Registers the statefulset controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let sets = ctx.informers.get(catalog::of(Kind::StatefulSet));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let claims = ctx.informers.get(catalog::of(Kind::PersistentVolumeClaim));
    let revisions = ctx.informers.get(catalog::of(Kind::ControllerRevision));
    // A claim that goes may be one a pod waits to make again.
    let claim_deleted = {
        let sets = sets.clone();
        move |change: Change<'_>, queue: &Queue| {
            if !matches!(change, Change::Deleted(_)) {
                return;
            }
            let claim = change.object();
            let claim_name = name(claim);
            for set in sets.list_namespace(str_at(claim, "/metadata/namespace")) {
                let ours = claim_templates(&set).iter().any(|t| {
                    let prefix = format!("{}-{}-", name(t), name(&set));
                    claim_name
                        .strip_prefix(&prefix)
                        .is_some_and(|o| o.bytes().all(|b| b.is_ascii_digit()))
                });
                if ours {
                    queue.add(key_of(&set));
                }
            }
        }
    };
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        sets: sets.clone(),
        pods: pods.clone(),
        claims: claims.clone(),
        revisions: revisions.clone(),
        recorder: ctx.recorder("statefulset-controller"),
    });
    runtime::Controller::new("statefulset")
        .reconciles(&sets)
        // Orphans that a set's selector matches may be adopted.
        .owns_or_adopts(
            &pods,
            STATEFUL_SETS,
            runtime::selecting(&sets, spec_label_selector),
        )
        .owns_or_adopts(
            &revisions,
            STATEFUL_SETS,
            runtime::selecting(&sets, spec_label_selector),
        )
        .watches(&claims, claim_deleted)
        .workers(WORKERS)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(spec: Value) -> Value {
        let mut s = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 2},
            "spec": {
                "replicas": 3,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}],
                             "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "emptyDir": {}}]},
                },
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            },
        });
        if let (Some(m), Some(extra)) = (s["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                m.insert(k.clone(), v.clone());
            }
        }
        s
    }

    #[test]
    fn names_give_the_parent_and_the_ordinal() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", 0)));
        assert_eq!(parent_and_ordinal("my-web-12"), Some(("my-web", 12)));
        assert_eq!(parent_and_ordinal("web-"), None);
        assert_eq!(parent_and_ordinal("web-1a"), None);
        assert_eq!(parent_and_ordinal("web"), None);
        assert_eq!(parent_and_ordinal("web-99999999999"), None);
    }

    #[test]
    fn a_new_pod_has_its_identity_claims_and_revision() {
        let s = set(json!({}));
        let sv = Set::decode(&s).unwrap();
        let p = new_pod(&sv, &s["spec"]["template"], 1, "web-abc");
        assert_eq!(p["metadata"]["name"], "web-1");
        assert_eq!(p["metadata"]["labels"][POD_NAME_LABEL], "web-1");
        assert_eq!(p["metadata"]["labels"][POD_INDEX_LABEL], "1");
        assert_eq!(p["metadata"]["labels"][REVISION_LABEL], "web-abc");
        assert_eq!(p["metadata"]["labels"]["app"], "web");
        assert_eq!(p["spec"]["hostname"], "web-1");
        assert_eq!(p["spec"]["subdomain"], "web");
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "set-uid");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        // The claim replaces the template's volume of its name; the others stay.
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 2);
        assert_eq!(vols[0]["persistentVolumeClaim"]["claimName"], "data-web-1");
        assert_eq!(vols[1]["name"], "cfg");
        assert!(identity_matches(&sv, &p));
        let c = new_claim(&sv, &s["spec"]["volumeClaimTemplates"][0], 1);
        assert_eq!(c["metadata"]["name"], "data-web-1");
        assert_eq!(c["metadata"]["labels"]["app"], "web");
        assert_eq!(c["spec"]["accessModes"][0], "ReadWriteOnce");
    }

    fn owners(set: &Value, pod: &Value, claim: &Value) -> Option<Value> {
        wanted_owners(&Set::decode(set).unwrap(), pod, claim)
    }

    #[test]
    fn the_retention_policy_decides_the_claims_owners() {
        let pod =
            |o: i64| json!({"metadata": {"name": format!("web-{o}"), "uid": format!("pod-{o}")}});
        let claim = json!({"metadata": {"name": "data-web-1"}});
        let policy = |deleted: &str, scaled: &str| {
            set(
                json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": deleted, "whenScaled": scaled}}),
            )
        };
        let uids = |refs: Option<Value>| -> Vec<String> {
            refs.map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["uid"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_else(|| vec!["unchanged".into()])
        };
        assert_eq!(
            uids(owners(&policy("Retain", "Retain"), &pod(1), &claim)),
            ["unchanged"]
        );
        assert_eq!(
            uids(owners(&policy("Delete", "Retain"), &pod(1), &claim)),
            ["set-uid"]
        );
        assert_eq!(
            uids(owners(&policy("Retain", "Delete"), &pod(1), &claim)),
            ["unchanged"]
        );
        // Ordinal 5 is beyond three replicas: condemned.
        assert_eq!(
            uids(owners(&policy("Retain", "Delete"), &pod(5), &claim)),
            ["pod-5"]
        );
        assert_eq!(
            uids(owners(&policy("Delete", "Delete"), &pod(1), &claim)),
            ["set-uid"]
        );
        let owned = json!({"metadata": {"name": "data-web-5", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "set-uid"},
            {"apiVersion": "v1", "kind": "Other", "name": "keep", "uid": "other"},
        ]}});
        assert_eq!(
            uids(owners(&policy("Delete", "Delete"), &pod(5), &owned)),
            ["other", "pod-5"]
        );
        assert_eq!(
            uids(owners(&policy("Retain", "Retain"), &pod(5), &owned)),
            ["other"]
        );
    }

    fn pod(o: i64, rev: &str, phase: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": format!("web-{o}"), "labels": {REVISION_LABEL: rev}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        })
    }

    #[test]
    fn the_status_counts_and_completes_a_rolling_update() {
        let s = set(json!({}));
        let pods = [
            pod(0, "new", "Running", true),
            pod(1, "old", "Running", true),
            pod(2, "new", "Pending", false),
        ];
        let c = count(&pods, 0, "old", "new");
        assert_eq!(
            c,
            Counts {
                replicas: 3,
                ready: 2,
                available: 2,
                current: 1,
                updated: 2
            }
        );
        let sv = Set::decode(&s).unwrap();
        let st = status_of(&sv, c, "old", "new");
        assert_eq!(st["currentRevision"], "old");
        assert_eq!(st["updateRevision"], "new");
        assert_eq!(st["currentReplicas"], 1);
        assert_eq!(st["observedGeneration"], 2);
        let done = [
            pod(0, "new", "Running", true),
            pod(1, "new", "Running", true),
        ];
        let st = status_of(&sv, count(&done, 0, "old", "new"), "old", "new");
        assert_eq!(st["currentRevision"], "new");
        assert_eq!(st["currentReplicas"], 2);
        // OnDelete never completes by itself.
        let on_delete = set(json!({"updateStrategy": {"type": "OnDelete"}}));
        let st = status_of(
            &Set::decode(&on_delete).unwrap(),
            count(&done, 0, "old", "new"),
            "old",
            "new",
        );
        assert_eq!(st["currentRevision"], "old");
        assert!(st.get("currentReplicas").is_none());
        assert_eq!(st["availableReplicas"], 2);
    }

    #[test]
    fn the_initialized_annotation_holds_readiness_back() {
        let mut p = pod(0, "r", "Running", true);
        assert!(is_running_and_ready(&p));
        p["metadata"]["annotations"] = json!({INITIALIZED_ANNOTATION: "false"});
        assert!(!is_running_and_ready(&p));
        assert!(!is_running_and_ready(&pod(0, "r", "Pending", true)));
    }
}
