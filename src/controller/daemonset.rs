//! The daemon set controller: keeps one pod of each DaemonSet's template on every node
//! that should run it, as kube-controller-manager's (`pkg/controller/daemon`) does.
//!
//! Whether a node should run a daemon pod is decided by the scheduler's pure rules
//! ([`fit`]): the template's node selector and required node affinity, and its
//! tolerations of the node's NoSchedule and NoExecute taints (a pod that only tolerates
//! NoExecute may stay where it runs). Daemon pods tolerate what upstream adds
//! (not-ready and unreachable NoExecute; disk, memory and pid pressure, unschedulable
//! and, with the host network, network-unavailable NoSchedule) and are pinned to their
//! node by a required node affinity `metadata.name In [node]`; the scheduler binds them.
//!
//! The template's history is kept in ControllerRevisions (named `<ds>-<hash>`, the hash
//! as a Deployment's `pod-template-hash`, labelled `controller-revision-hash`, pruned to
//! `revisionHistoryLimit` among those no pod uses); each pod carries the hash of the
//! revision it was made from. `RollingUpdate` deletes old pods while no more than
//! `maxUnavailable` nodes are without an available pod, or, with `maxSurge`, starts the
//! new pod beside the old one and deletes the old one once the new one is available;
//! `OnDelete` only replaces pods that are gone. Failed pods are deleted (with a backoff
//! per node), surplus pods on a node too. The status counts nodes as upstream.
//!
//! Nodes coming, going or changing their labels, taints or schedulability queue every
//! DaemonSet; pods and revisions queue their owner. Expectations cover the window in
//! which the pods just created or deleted are not in the cache yet. Pods bound to a node
//! that no longer exists are deleted at once (upstream leaves them to the pod GC, which
//! berth does not have).
//!
//! A sync decodes its DaemonSet once as a k8s-openapi `DaemonSet` and reads typed fields
//! from then on; its pods and the nodes stay JSON (their few fields read through
//! accessors), and what is written starts from JSON: the pod template is copied as
//! stored, the status write starts from the stored set.

use crate::types::meta::Meta;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetStatus};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::claim::{Claim, OwnerKind, is_deleting};
use super::expectations::Expectations;
use super::history::{self, History};
use super::podcontrol;
use super::replication::{label_selector, spec_label_selector};
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, DeleteParams, Kind, catalog, key_of};
use crate::types::json::{array_at, str_at};
use crate::types::{fit, labels, taints};

/// The label that names the revision a daemon pod (and a revision) was made from.
pub const HASH_LABEL: &str = "controller-revision-hash";
const WORKERS: usize = 2;
/// The backoff of a node whose daemon pod keeps failing.
const FAILED_BACKOFF_START: Duration = Duration::from_secs(1);
const FAILED_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

const DAEMON_SETS: OwnerKind = OwnerKind {
    api_version: "apps/v1",
    kind_name: "DaemonSet",
};

fn name(obj: &Value) -> &str {
    str_at(obj, "/metadata/name")
}

/// A DaemonSet as a sync reads it: decoded once from the stored object, which stays at
/// hand as JSON for what is written from it (events name it, pods copy its template, the
/// status write starts from a copy of it).
struct Ds<'a> {
    obj: &'a Value,
    meta: ObjectMeta,
    spec: DaemonSetSpec,
    status: Option<DaemonSetStatus>,
}

impl Meta for Ds<'_> {
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
}

impl<'a> Ds<'a> {
    fn decode(obj: &'a Value) -> Result<Self> {
        let ds: DaemonSet = decode(obj)?;
        Ok(Ds {
            obj,
            meta: ds.metadata,
            spec: ds.spec,
            status: ds.status,
        })
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

    /// The template's pod spec.
    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.template.spec.as_ref()
    }
}

fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

fn is_ready(pod: &Value) -> bool {
    crate::types::is_pod_ready(pod)
}

fn until_available(pod: &Value, min_ready: i64) -> Option<Duration> {
    crate::types::until_pod_available(pod, min_ready)
}

fn is_available(pod: &Value, min_ready: i64) -> bool {
    until_available(pod, min_ready).is_some_and(|d| d.is_zero())
}

fn hash_of(obj: &Value) -> &str {
    str_at(obj, &format!("/metadata/labels/{HASH_LABEL}"))
}

const PINNED_TERMS: &str =
    "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";

/// Scheduled pods first, then oldest, then by name (`podByCreationTimestampAndPhase`).
fn by_age(a: &Value, b: &Value) -> std::cmp::Ordering {
    let bound = |p: &Value| str_at(p, "/spec/nodeName").is_empty();
    bound(a)
        .cmp(&bound(b))
        .then(
            str_at(a, "/metadata/creationTimestamp").cmp(str_at(b, "/metadata/creationTimestamp")),
        )
        .then(name(a).cmp(name(b)))
}

/// The node a daemon pod is for: its node, else the one its affinity pins it to
/// (`GetTargetNodeName`).
fn target_node(pod: &Value) -> Option<&str> {
    let bound = str_at(pod, "/spec/nodeName");
    if !bound.is_empty() {
        return Some(bound);
    }
    array_at(pod, PINNED_TERMS).iter().find_map(|t| {
        array_at(t, "/matchFields").iter().find_map(|r| {
            let values = array_at(r, "/values");
            (str_at(r, "/key") == "metadata.name"
                && str_at(r, "/operator") == "In"
                && values.len() == 1)
                .then(|| values[0].as_str())
                .flatten()
        })
    })
}

/// The tolerations every daemon pod has (`AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations(host_network: bool) -> Vec<Value> {
    let t = |key: &str, effect: &str| json!({"key": key, "operator": "Exists", "effect": effect});
    let mut out = vec![
        t(taints::NOT_READY, taints::NO_EXECUTE),
        t(taints::UNREACHABLE, taints::NO_EXECUTE),
        t("node.kubernetes.io/disk-pressure", taints::NO_SCHEDULE),
        t("node.kubernetes.io/memory-pressure", taints::NO_SCHEDULE),
        t("node.kubernetes.io/pid-pressure", taints::NO_SCHEDULE),
        t(taints::UNSCHEDULABLE, taints::NO_SCHEDULE),
    ];
    if host_network {
        out.push(t(
            "node.kubernetes.io/network-unavailable",
            taints::NO_SCHEDULE,
        ));
    }
    out
}

/// The pod spec of the DaemonSet's template with the daemon tolerations added (those
/// already there kept once).
fn daemon_pod_spec(ds: &Ds) -> Value {
    // Copied as stored: every field kept.
    let mut spec = ds
        .obj
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let host_network = ds.pod_spec().and_then(|s| s.host_network) == Some(true);
    if !spec["tolerations"].is_array() {
        spec["tolerations"] = json!([]);
    }
    let list = spec["tolerations"].as_array_mut().expect("made an array");
    for t in daemon_tolerations(host_network) {
        let same = |x: &Value| {
            ["key", "operator", "value", "effect"]
                .iter()
                .all(|f| x.get(*f).unwrap_or(&Value::Null) == t.get(*f).unwrap_or(&Value::Null))
        };
        if !list.iter().any(same) {
            list.push(t);
        }
    }
    spec
}

/// Sets the required node affinity to `metadata.name In [node]`, in place of the
/// template's required terms (`ReplaceDaemonSetPodNodeNameNodeAffinity`).
fn pin_to_node(spec: &mut Value, node: &str) {
    let term = json!({"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]},
    ]}]});
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    if !spec["affinity"]["nodeAffinity"].is_object() {
        spec["affinity"]["nodeAffinity"] = json!({});
    }
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = term;
}

/// Whether `node` should run the DaemonSet's pod, and whether a pod already there may
/// keep running (`NodeShouldRunDaemonPod`), by the scheduler's rules.
fn should_run(ds: &Ds, node: &Value) -> (bool, bool) {
    let wanted = ds
        .pod_spec()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    if !wanted.is_empty() && wanted != name(node) {
        return (false, false);
    }
    let mut pod = json!({"spec": daemon_pod_spec(ds)});
    pod["spec"]["nodeName"] = json!(name(node));
    let Ok(needs) = fit::Needs::of(&pod) else {
        return (false, false);
    };
    if !fit::affinity_matches(&needs, node) {
        return (false, false);
    }
    let effects = [taints::NO_SCHEDULE, taints::NO_EXECUTE];
    if fit::untolerated_taint(&needs, node, &effects).is_none() {
        return (true, true);
    }
    let evicting = fit::untolerated_taint(&needs, node, &[taints::NO_EXECUTE]);
    (false, evicting.is_none())
}

/// The update strategy's bounds for `desired` nodes (`updatedDesiredNodeCounts`).
fn bounds(ds: &Ds, desired: i64) -> (i64, i64) {
    let ru = ds
        .spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.rolling_update.as_ref());
    let scaled = |v| super::deployment::scaled_int_or_percent(v, desired, true);
    let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()));
    let mut unavailable = scaled(ru.and_then(|r| r.max_unavailable.as_ref()));
    if desired > 0 && surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// One node's daemon pods (not being deleted) split into the updated one and the old
/// one; `None` when there are more than one of either (`findUpdatedPodsOnNode`).
fn updated_and_old<'p>(
    pods: &[&'p Value],
    hash: &str,
) -> Option<(Option<&'p Value>, Option<&'p Value>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods.iter().filter(|p| !is_deleting(p)) {
        let slot = if hash_of(pod) == hash {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(*pod);
    }
    Some((new, old))
}

/// What one sync decided for the nodes.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Nodes to make a pod for.
    create: Vec<String>,
    /// Pods to delete, by name.
    delete: Vec<String>,
    /// Failed pods found: (pod, node), each deleted unless its node is backing off.
    failed: Vec<(String, String)>,
}

/// What each node needs (`podsShouldBeOnNode`); `pods` holds the daemon pods of each
/// node.
fn plan_node(ds: &Ds, node: &Value, pods: Option<&Vec<&Value>>, hash: &str, plan: &mut Plan) {
    let (run, keep) = should_run(ds, node);
    let node_name = name(node);
    let surge = ds.rolling() && bounds(ds, 1).0 > 0;
    match pods {
        None if run => plan.create.push(node_name.to_string()),
        Some(pods) if keep => {
            let mut running = Vec::new();
            for pod in pods.iter().filter(|p| !is_deleting(p)) {
                match str_at(pod, "/status/phase") {
                    "Failed" => plan
                        .failed
                        .push((name(pod).to_string(), node_name.to_string())),
                    "Succeeded" => plan.delete.push(name(pod).to_string()),
                    _ => running.push(*pod),
                }
            }
            running.sort_by(|a, b| by_age(a, b));
            if !surge {
                // A node that still has a pod of the set (being deleted, or failed) gets
                // its new one once that is gone: one pod per node at a time.
                if running.len() > 1 {
                    plan.delete
                        .extend(running[1..].iter().map(|p| name(p).to_string()));
                }
                return;
            }
            if running.len() <= 1 {
                if running.is_empty() && run {
                    plan.create.push(node_name.to_string());
                }
                return;
            }
            // Surging: the oldest new pod and the oldest old one may live together while
            // the new one is not yet available and the old one is ready.
            let (mut newest, mut oldest) = (None, None);
            for pod in running {
                let slot = if hash_of(pod) == hash {
                    &mut newest
                } else {
                    &mut oldest
                };
                if slot.is_none() {
                    *slot = Some(pod);
                } else {
                    plan.delete.push(name(pod).to_string());
                }
            }
            if let (Some(new), Some(old)) = (newest, oldest) {
                let min_ready = ds.min_ready();
                if !is_ready(old) || is_available(new, min_ready) {
                    plan.delete.push(name(old).to_string());
                }
            }
        }
        Some(pods) if !keep => plan.delete.extend(
            pods.iter()
                .filter(|p| !is_deleting(p))
                .map(|p| name(p).to_string()),
        ),
        _ => {}
    }
}

/// The rolling update's choices (`rollingUpdate`): old pods to delete and, when surging,
/// nodes to start a new pod on beside the old one.
fn plan_rolling(
    ds: &Ds,
    nodes: &[Arc<Value>],
    by_node: &BTreeMap<String, Vec<&Value>>,
    hash: &str,
) -> Plan {
    let min_ready = ds.min_ready();
    let mut wanted: BTreeMap<&str, (bool, &[&Value])> = BTreeMap::new();
    let mut desired = 0;
    for node in nodes {
        if should_run(ds, node).0 {
            desired += 1;
            wanted.insert(name(node), (true, &[]));
        }
    }
    for (node, pods) in by_node {
        let run = nodes
            .iter()
            .find(|n| name(n) == node)
            .is_some_and(|n| should_run(ds, n).0);
        wanted.insert(node.as_str(), (run, pods.as_slice()));
    }
    let (max_surge, max_unavailable) = bounds(ds, desired);
    let mut plan = Plan::default();
    if max_surge == 0 {
        let mut unavailable = 0;
        let mut replace = Vec::new();
        let mut candidates = Vec::new();
        for (_, pods) in wanted.values() {
            let Some((new, old)) = updated_and_old(pods, hash) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => {
                    if !is_available(new, min_ready) {
                        unavailable += 1;
                    }
                }
                (None, Some(old)) => {
                    if !is_available(old, min_ready) {
                        replace.push(name(old).to_string());
                    } else if unavailable < max_unavailable {
                        candidates.push(name(old).to_string());
                    }
                }
            }
        }
        let room = (max_unavailable - unavailable).clamp(0, candidates.len() as i64) as usize;
        plan.delete = replace;
        plan.delete.extend(candidates.into_iter().take(room));
        return plan;
    }
    let mut surging = 0;
    let mut available = 0;
    let mut allowed = Vec::new();
    let mut candidates = Vec::new();
    let mut sunset = Vec::new();
    for (node, (run, pods)) in &wanted {
        let Some((new, old)) = updated_and_old(pods, hash) else {
            surging += 1;
            continue;
        };
        if let Some(p) = old.or(new)
            && is_available(p, min_ready)
        {
            available += 1;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !is_available(old, min_ready) {
                    if *run {
                        allowed.push(node.to_string());
                    } else {
                        plan.delete.push(name(old).to_string());
                    }
                } else if !*run {
                    sunset.push(name(old).to_string());
                } else if surging < max_surge {
                    candidates.push(node.to_string());
                }
            }
            (Some(new), Some(old)) => {
                if is_available(new, min_ready) {
                    plan.delete.push(name(old).to_string());
                } else {
                    surging += 1;
                }
            }
        }
    }
    // Pods on nodes that no longer want one go only while the rest stay available.
    let deletable = (available - desired).clamp(0, sunset.len() as i64) as usize;
    plan.delete.extend(sunset.into_iter().take(deletable));
    let room = (max_surge - surging).clamp(0, candidates.len() as i64) as usize;
    plan.create = allowed;
    plan.create.extend(candidates.into_iter().take(room));
    plan
}

/// The per-node backoff of failed daemon pods.
#[derive(Default)]
struct Backoff {
    next: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl Backoff {
    /// Whether a failed pod on this node may be deleted now; else how long to wait.
    fn wait(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let mut next = self.next.lock().expect("backoff lock");
        match next.get(key).copied() {
            Some((at, _)) if at > now => Some(at - now),
            Some((_, step)) => {
                let step = (step * 2).min(FAILED_BACKOFF_MAX);
                next.insert(key.to_string(), (now + step, step));
                None
            }
            None => {
                next.insert(
                    key.to_string(),
                    (now + FAILED_BACKOFF_START, FAILED_BACKOFF_START),
                );
                None
            }
        }
    }

    fn forget_daemon_set(&self, prefix: &str) {
        self.next
            .lock()
            .expect("backoff lock")
            .retain(|k, _| !k.starts_with(prefix));
    }
}

#[derive(Clone)]
struct Controller {
    client: Client,
    daemon_sets: Informer,
    pods: Informer,
    nodes: Informer,
    revisions: Informer,
    expectations: Expectations,
    backoff: Arc<Backoff>,
    recorder: Recorder,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.daemon_sets.get(&key) else {
            self.expectations.forget(&key);
            self.backoff.forget_daemon_set(&format!("{key}/"));
            return Ok(Action::Done);
        };
        let ds = Ds::decode(&obj)?;
        let selector = label_selector(&ds.spec.selector);
        if selector.is_empty() {
            self.recorder
                .warning(
                    ds.obj,
                    "SelectingAll",
                    "This daemon set is selecting all pods. A non-empty selector is required.",
                )
                .await;
            return Ok(Action::Done);
        }
        if ds.meta.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let nodes = self.nodes.list();
        let revs = self.history().list(ds.obj, &selector).await?;
        let owner = history::Owner {
            obj: ds.obj,
            meta: &ds.meta,
            template_labels: ds
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref()),
            collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        };
        let (cur, old) = self.history().record(&owner, revs).await?;
        let hash = hash_of(&cur).to_string();
        let pods = self.claim_pods(&ds, &selector).await?;
        let mut next = None;
        if self.expectations.satisfied(&key) {
            next = self.manage(&key, &ds, &nodes, &pods, &hash).await?;
            if ds.rolling() && self.expectations.satisfied(&key) {
                let by_node = group_by_node(&pods);
                let plan = plan_rolling(&ds, &nodes, &by_node, &hash);
                self.sync_nodes(&key, &ds, &plan.delete, &plan.create, &hash)
                    .await?;
            }
            if self.expectations.satisfied(&key) {
                self.cleanup_history(&ds, &old, &pods).await?;
            }
        }
        let wait = self.update_status(&ds, &nodes, &pods, &hash).await?;
        Ok(match next.into_iter().chain(wait).min() {
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }

    /// The pods this DaemonSet controls, adopting and releasing by its selector.
    async fn claim_pods(&self, ds: &Ds<'_>, selector: &labels::Selector) -> Result<Vec<Value>> {
        let owned = Claim {
            client: &self.client,
            kind: DAEMON_SETS,
            owners: self.daemon_sets.resource(),
            children: &self.pods,
            owner: ds.obj,
            selector,
        }
        .run()
        .await?;
        Ok(owned.iter().map(|p| (**p).clone()).collect())
    }

    /// Brings the pods on each node to what it needs (`manage`); returns when to look
    /// again for a node whose failed pod is backing off.
    async fn manage(
        &self,
        key: &str,
        ds: &Ds<'_>,
        nodes: &[Arc<Value>],
        pods: &[Value],
        hash: &str,
    ) -> Result<Option<Duration>> {
        let by_node = group_by_node(pods);
        let mut plan = Plan::default();
        for node in nodes {
            plan_node(ds, node, by_node.get(name(node)), hash, &mut plan);
        }
        let mut wait: Option<Duration> = None;
        for (pod, node) in std::mem::take(&mut plan.failed) {
            match self.backoff.wait(&format!("{key}/{node}")) {
                Some(d) => wait = Some(wait.map_or(d, |w| w.min(d))),
                None => {
                    let message = format!(
                        "Found failed daemon pod {}/{pod} on node {node}, will try to kill it",
                        ds.namespace()
                    );
                    self.recorder
                        .warning(ds.obj, "FailedDaemonPod", &message)
                        .await;
                    plan.delete.push(pod);
                }
            }
        }
        // Pods for nodes that are gone: unscheduled ones go, and bound ones too (no
        // kubelet will ever finish them).
        let mut orphans = Vec::new();
        for (node, on_node) in &by_node {
            if nodes.iter().any(|n| name(n) == node) {
                continue;
            }
            for pod in on_node.iter().filter(|p| !is_deleting(p)) {
                orphans.push(name(pod).to_string());
            }
        }
        self.sync_nodes(key, ds, &plan.delete, &plan.create, hash)
            .await?;
        self.delete_pods(key, ds, &orphans, Some(0)).await?;
        self.report_placement(ds, nodes, pods).await;
        Ok(wait)
    }

    /// A `FailedPlacement` event for each daemon pod the scheduler could not place.
    async fn report_placement(&self, ds: &Ds<'_>, nodes: &[Arc<Value>], pods: &[Value]) {
        for pod in pods.iter().filter(|p| !is_deleting(p)) {
            let Some(cond) = crate::types::condition(pod, "PodScheduled") else {
                continue;
            };
            if str_at(cond, "/status") != "False" || str_at(cond, "/reason") != "Unschedulable" {
                continue;
            }
            let Some(node) = target_node(pod) else {
                continue;
            };
            if !nodes.iter().any(|n| name(n) == node) {
                continue;
            }
            let message = format!(
                "failed to place pod on {node:?}: {}",
                str_at(cond, "/message")
            );
            self.recorder
                .warning(ds.obj, "FailedPlacement", &message)
                .await;
        }
    }

    /// Creates a pod for each node of `create` and deletes the pods of `delete`
    /// (`syncNodes`).
    async fn sync_nodes(
        &self,
        key: &str,
        ds: &Ds<'_>,
        delete: &[String],
        create: &[String],
        hash: &str,
    ) -> Result<()> {
        self.delete_pods(key, ds, delete, None).await?;
        if create.is_empty() {
            return Ok(());
        }
        let ns = ds.namespace();
        let pods = self.pods.resource();
        self.expectations.expect(key, create.len() as i64, 0);
        for (i, node) in create.iter().enumerate() {
            let pod = new_pod(ds, node, hash);
            match podcontrol::create(&self.client, &self.recorder, pods, ds.obj, ns, &pod).await {
                Ok(_) => {}
                Err(e) => {
                    // None of the rest will be made now: stop expecting them.
                    self.expectations
                        .observed(key, (create.len() - i) as i64, 0);
                    self.recorder
                        .warning(ds.obj, "FailedCreate", &format!("Error creating: {e}"))
                        .await;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    async fn delete_pods(
        &self,
        key: &str,
        ds: &Ds<'_>,
        names: &[String],
        grace: Option<i64>,
    ) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let ns = ds.namespace();
        let pods = self.pods.resource();
        self.expectations.expect(key, 0, names.len() as i64);
        for pod in names {
            let params = DeleteParams {
                grace_period_seconds: grace,
                ..DeleteParams::default()
            };
            match podcontrol::delete(
                &self.client,
                &self.recorder,
                pods,
                ds.obj,
                (ns, pod),
                &params,
            )
            .await
            {
                Ok(()) => {}
                Err(e) if e.is_not_found() => self.expectations.observed(key, 0, 1),
                Err(e) => {
                    self.expectations.observed(key, 0, 1);
                    self.recorder
                        .warning(ds.obj, "FailedDelete", &format!("Error deleting: {e}"))
                        .await;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    fn history(&self) -> History<'_> {
        History {
            client: &self.client,
            kind: DAEMON_SETS,
            owners: self.daemon_sets.resource(),
            revisions: &self.revisions,
            hash_label: HASH_LABEL,
            annotations: true,
        }
    }

    /// Deletes the oldest revisions beyond `revisionHistoryLimit` that no pod uses
    /// (`cleanupHistory`).
    async fn cleanup_history(&self, ds: &Ds<'_>, old: &[Value], pods: &[Value]) -> Result<()> {
        let limit = ds.spec.revision_history_limit.map_or(10, i64::from);
        let live: Vec<&str> = pods.iter().map(hash_of).collect();
        self.history()
            .truncate(limit, old, |rev| live.contains(&hash_of(rev)))
            .await
    }

    /// Writes the status from the nodes and their pods (`updateDaemonSetStatus`); returns
    /// when a ready pod becomes available.
    async fn update_status(
        &self,
        ds: &Ds<'_>,
        nodes: &[Arc<Value>],
        pods: &[Value],
        hash: &str,
    ) -> Result<Option<Duration>> {
        let by_node = group_by_node(pods);
        let min_ready = ds.min_ready();
        let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
        let (mut ready, mut available, mut updated) = (0, 0, 0);
        let mut wait: Option<Duration> = None;
        for node in nodes {
            let (run, _) = should_run(ds, node);
            let on_node = by_node.get(name(node)).filter(|p| !p.is_empty());
            if !run {
                misscheduled += on_node.is_some() as i64;
                continue;
            }
            desired += 1;
            let Some(on_node) = on_node else {
                continue;
            };
            current += 1;
            let mut sorted = on_node.clone();
            sorted.sort_by(|a, b| by_age(a, b));
            let pod = sorted[0];
            if is_ready(pod) {
                ready += 1;
                match until_available(pod, min_ready) {
                    Some(d) if d.is_zero() => available += 1,
                    Some(d) => {
                        let d = d + Duration::from_millis(100);
                        wait = Some(wait.map_or(d, |w| w.min(d)));
                    }
                    None => {}
                }
            }
            if hash_of(pod) == hash {
                updated += 1;
            }
        }
        let mut status = ds.obj.get("status").cloned().unwrap_or_else(|| json!({}));
        if !status.is_object() {
            status = json!({});
        }
        status["desiredNumberScheduled"] = json!(desired);
        status["currentNumberScheduled"] = json!(current);
        status["numberMisscheduled"] = json!(misscheduled);
        status["numberReady"] = json!(ready);
        status["observedGeneration"] = json!(ds.meta.generation);
        let m = status.as_object_mut().expect("an object");
        // As Go's omitempty leaves them out.
        for (field, n) in [
            ("updatedNumberScheduled", updated),
            ("numberAvailable", available),
            ("numberUnavailable", desired - available),
        ] {
            if n == 0 {
                m.remove(field);
            } else {
                m.insert(field.into(), json!(n));
            }
        }
        if ds.obj.get("status") != Some(&status) {
            let mut copy = ds.obj.clone();
            copy["status"] = status;
            self.client
                .update_status(self.daemon_sets.resource(), &copy)
                .await?;
        }
        Ok(wait)
    }
}

/// The daemon pods by the node they are for (pods finished and being deleted left out,
/// as upstream's `getNodesToDaemonPods`).
fn group_by_node(pods: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for pod in pods {
        if is_terminal(pod) && is_deleting(pod) {
            continue;
        }
        if let Some(node) = target_node(pod) {
            out.entry(node.to_string()).or_default().push(pod);
        }
    }
    out
}

/// A daemon pod for `node` (`CreatePodTemplate` with the node affinity).
fn new_pod(ds: &Ds, node: &str, hash: &str) -> Value {
    // Copied as stored: every field kept.
    let mut metadata = ds
        .obj
        .pointer("/spec/template/metadata")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    metadata["labels"][HASH_LABEL] = json!(hash);
    metadata["generateName"] = json!(format!("{}-", ds.name()));
    metadata["ownerReferences"] = json!([DAEMON_SETS.controlled_by(ds.obj)]);
    if let Some(m) = metadata.as_object_mut() {
        m.remove("name");
        m.remove("namespace");
    }
    let mut spec = daemon_pod_spec(ds);
    pin_to_node(&mut spec, node);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// Whether a node change may change which DaemonSets it should run.
fn node_matters(old: &Value, new: &Value) -> bool {
    ["/metadata/labels", "/spec/taints", "/spec/unschedulable"]
        .iter()
        .any(|p| old.pointer(p) != new.pointer(p))
}

/// Registers the daemon set controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let daemon_sets = ctx.informers.get(catalog::of(Kind::DaemonSet));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let nodes = ctx.informers.get(catalog::of(Kind::Node));
    let revisions = ctx.informers.get(catalog::of(Kind::ControllerRevision));
    let expectations = Expectations::default();
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        daemon_sets: daemon_sets.clone(),
        pods: pods.clone(),
        nodes: nodes.clone(),
        revisions: revisions.clone(),
        expectations: expectations.clone(),
        backoff: Arc::default(),
        recorder: ctx.recorder("daemonset-controller"),
    });
    let all = daemon_sets.clone();
    runtime::Controller::new("daemonset")
        .reconciles_expecting(&daemon_sets, &expectations)
        // Every DaemonSet looks again when a node comes, goes or changes what decides it.
        .watches(&nodes, move |change, queue| {
            let matters = match change {
                Change::Added(_) | Change::Deleted(_) => true,
                Change::Updated { old, new } => node_matters(old, new),
            };
            if matters {
                for ds in all.list() {
                    queue.add(key_of(&ds));
                }
            }
        })
        // The pods' changes also settle what the controller expects to see.
        .owns_or_adopts_expecting(
            &pods,
            DAEMON_SETS,
            runtime::selecting(&daemon_sets, spec_label_selector),
            &expectations,
        )
        .watches(&revisions, |change, queue| {
            let old = match change {
                // A revision made with its controller is only observed (`addHistory`):
                // the set uses it at its next sync, whoever made it.
                Change::Added(_) => return,
                Change::Updated { old, .. } => DAEMON_SETS.key_of_controller(old),
                Change::Deleted(_) => None,
            };
            let now = DAEMON_SETS.key_of_controller(change.object());
            for owner in old.into_iter().chain(now) {
                queue.add(owner);
            }
        })
        .workers(WORKERS)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(spec: Value) -> Value {
        let mut d = json!({
            "metadata": {"name": "agent", "namespace": "default", "uid": "u1"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "updateStrategy": {"type": "RollingUpdate",
                                   "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        });
        if let (Some(dst), Value::Object(extra)) = (d["spec"].as_object_mut(), spec) {
            dst.extend(extra);
        }
        d
    }

    fn view(d: &Value) -> Ds<'_> {
        Ds::decode(d).unwrap()
    }

    fn node(name: &str, labels: Value, taints: Value) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}))
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"app": "agent", HASH_LABEL: hash},
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
        })
    }

    #[test]
    fn nodes_run_daemon_pods_by_selector_and_taints() {
        let d = ds(json!({}));
        assert_eq!(
            should_run(&view(&d), &node("a", json!({}), json!([]))),
            (true, true)
        );
        let no_schedule = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
        assert_eq!(
            should_run(&view(&d), &node("b", json!({}), no_schedule)),
            (false, true),
            "a running pod may stay on a NoSchedule taint"
        );
        let no_execute = json!([{"key": "dedicated", "effect": "NoExecute"}]);
        assert_eq!(
            should_run(&view(&d), &node("c", json!({}), no_execute)),
            (false, false)
        );
        // The daemon tolerations: a cordoned, not-ready node still runs it.
        let cordoned = json!([{"key": taints::UNSCHEDULABLE, "effect": "NoSchedule"},
                              {"key": taints::NOT_READY, "effect": "NoExecute"}]);
        assert_eq!(
            should_run(&view(&d), &node("d", json!({}), cordoned)),
            (true, true)
        );
        let mut picky = ds(json!({}));
        picky["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        assert_eq!(
            should_run(&view(&picky), &node("e", json!({}), json!([]))),
            (false, false)
        );
        assert!(should_run(&view(&picky), &node("f", json!({"disk": "ssd"}), json!([]))).0);
    }

    #[test]
    fn a_daemon_pod_is_pinned_to_its_node_and_tolerates_what_upstream_adds() {
        let mut d = ds(json!({}));
        d["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
        d["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]}}});
        let p = new_pod(&view(&d), "n1", "abc");
        assert_eq!(p["metadata"]["generateName"], "agent-");
        assert_eq!(p["metadata"]["labels"][HASH_LABEL], "abc");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
        assert_eq!(target_node(&p), Some("n1"));
        let keys: Vec<&str> = p["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys.len(), 7, "{keys:?}");
        assert!(keys.contains(&"node.kubernetes.io/network-unavailable"));
        assert_eq!(
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!({"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
        );
        // Adding them again adds nothing.
        let mut again = d.clone();
        again["spec"]["template"]["spec"] = p["spec"].clone();
        assert_eq!(
            daemon_pod_spec(&view(&again))["tolerations"]
                .as_array()
                .unwrap()
                .len(),
            7
        );
    }

    #[test]
    fn rolling_without_surge_replaces_up_to_max_unavailable_nodes() {
        let d = ds(json!({"updateStrategy": {"type": "RollingUpdate",
                          "rollingUpdate": {"maxUnavailable": 2, "maxSurge": 0}}}));
        let nodes: Vec<Arc<Value>> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| node(n, json!({}), json!([])))
            .collect();
        let pods: Vec<Value> = vec![
            pod("pa", "a", "old", true),
            pod("pb", "b", "old", true),
            pod("pc", "c", "old", false),
            pod("pd", "d", "new", true),
        ];
        let by_node = group_by_node(&pods);
        let plan = plan_rolling(&view(&d), &nodes, &by_node, "new");
        // The unavailable old pod goes at once, and two available ones fit the budget.
        assert_eq!(plan.delete, ["pc", "pa", "pb"]);
        assert!(plan.create.is_empty());
        // A new pod not yet available takes one of the two.
        let pods: Vec<Value> = vec![
            pod("pa", "a", "old", true),
            pod("pb", "b", "old", true),
            pod("pd", "d", "new", false),
        ];
        let by_node = group_by_node(&pods);
        let plan = plan_rolling(&view(&d), &nodes[..], &by_node, "new");
        // Node c has no pod (unavailable), d's new pod is not available: no room.
        assert!(plan.delete.is_empty(), "{plan:?}");
    }

    #[test]
    fn rolling_with_surge_starts_new_pods_beside_old_ones() {
        let d = ds(json!({"updateStrategy": {"type": "RollingUpdate",
                          "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}}));
        let nodes: Vec<Arc<Value>> = ["a", "b"]
            .iter()
            .map(|n| node(n, json!({}), json!([])))
            .collect();
        let pods = vec![pod("pa", "a", "old", true), pod("pb", "b", "old", true)];
        let plan = plan_rolling(&view(&d), &nodes, &group_by_node(&pods), "new");
        assert_eq!(plan.create, ["a"], "one surge at a time");
        assert!(plan.delete.is_empty());
        let pods = vec![
            pod("pa", "a", "old", true),
            pod("na", "a", "new", true),
            pod("pb", "b", "old", true),
        ];
        let plan = plan_rolling(&view(&d), &nodes, &group_by_node(&pods), "new");
        assert_eq!(
            plan.delete,
            ["pa"],
            "the old pod goes once the new one is available"
        );
        assert_eq!(plan.create, ["b"]);
        // The manage loop keeps both while the new one is not available.
        let pods = vec![pod("pa", "a", "old", true), pod("na", "a", "new", false)];
        let by_node = group_by_node(&pods);
        let mut plan = Plan::default();
        plan_node(&view(&d), &nodes[0], by_node.get("a"), "new", &mut plan);
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn surplus_and_finished_pods_on_a_node_go() {
        let d = ds(json!({}));
        let n = node("a", json!({}), json!([]));
        let mut done = pod("p0", "a", "h", false);
        done["status"]["phase"] = json!("Succeeded");
        let mut newer = pod("p2", "a", "h", true);
        newer["metadata"]["creationTimestamp"] = json!("2024-02-01T00:00:00Z");
        let pods = vec![pod("p1", "a", "h", true), newer, done];
        let by_node = group_by_node(&pods);
        let mut plan = Plan::default();
        plan_node(&view(&d), &n, by_node.get("a"), "h", &mut plan);
        assert_eq!(plan.delete, ["p0", "p2"]);
        let mut plan = Plan::default();
        plan_node(&view(&d), &n, None, "h", &mut plan);
        assert_eq!(plan.create, ["a"]);
        // A pod being deleted, or a failed one, holds the node's place until it is gone.
        let mut going = pod("p3", "a", "old", true);
        going["metadata"]["deletionTimestamp"] = json!("2024-03-01T00:00:00Z");
        let mut failed = pod("p4", "a", "h", false);
        failed["status"]["phase"] = json!("Failed");
        for held in [going, failed] {
            let pods = vec![held];
            let by_node = group_by_node(&pods);
            let mut plan = Plan::default();
            plan_node(&view(&d), &n, by_node.get("a"), "h", &mut plan);
            assert!(plan.create.is_empty(), "{plan:?}");
        }
    }
}
