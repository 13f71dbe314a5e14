//! The node lifecycle controller: watches node heartbeats (Leases in `kube-node-lease`)
//! and, for a node silent longer than the grace period, sets its conditions to `Unknown`,
//! taints it `node.kubernetes.io/unreachable` (NoSchedule and NoExecute), marks its pods
//! not Ready and evicts them once their toleration of the NoExecute taint runs out. A node
//! whose lease is fresh again loses the taints.
//!
//! Deadlines (the lease going stale, a pod's eviction) are wall-clock times computed from
//! the objects; the reconcile asks to be run again at the nearest one, and any change of
//! the node, its lease or a pod on an unreachable node runs it at once.
//!
//! Events: `NodeNotReady` (Normal) on the node when its Ready condition goes Unknown;
//! `NodeNotReady` (Warning, "Node is not ready") on each pod marked not Ready;
//! `TaintManagerEviction` (Normal, "Marking for deletion Pod ns/name") on each pod evicted.
//!
//! The node and its lease are decoded once as their k8s-openapi types (`Node`, `Lease`)
//! and judged from those; the taints and conditions it writes are set on the JSON object
//! it read for the write, from typed taints. Pods stay JSON, read through `types::json`:
//! every pod of the cluster is scanned for a lost node and on every pod change.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::claim::is_deleting;
use super::{Action, Context, Error, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{self, DeleteParams, key_of};
use crate::client::{Kind, catalog};
use crate::types::json::{array_at, str_at};
use crate::types::taints::{self, NO_EXECUTE, NO_SCHEDULE, UNREACHABLE};

/// Where nodes keep their heartbeat Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The component that records this controller's events.
pub const COMPONENT: &str = "node-controller";
const WORKERS: usize = 2;

struct Controller {
    ctx: Context,
    nodes: Informer,
    leases: Informer,
    pods: Informer,
    recorder: Recorder,
}

/// Registers the controller's informer handlers and spawns its loop.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let c = std::sync::Arc::new(Controller {
        ctx: ctx.clone(),
        nodes: ctx.informers.get(catalog::of(Kind::Node)),
        leases: ctx.informers.get(catalog::of(Kind::Lease)),
        pods: ctx.informers.get(catalog::of(Kind::Pod)),
        recorder: ctx.recorder(COMPONENT),
    });
    let nodes = c.nodes.clone();
    runtime::Controller::new("nodelifecycle")
        .reconciles(&c.nodes)
        // Judging a node before its lease is in the cache would find it silent: the
        // leases are waited for too.
        .watches(&c.leases, |change, queue| {
            let lease = change.object();
            if str_at(lease, "/metadata/namespace") == LEASE_NAMESPACE {
                queue.add(str_at(lease, "/metadata/name"));
            }
        })
        .watches(&c.pods, move |change, queue| {
            // A pod (new or changed) on an unreachable node is marked and timed.
            let node = str_at(change.object(), "/spec/nodeName");
            if !matches!(change, Change::Deleted(_))
                && !node.is_empty()
                && nodes
                    .get(node)
                    .is_some_and(|n| is_tainted_unreachable(&taints::of_node(&n)))
            {
                queue.add(node);
            }
        })
        .workers(WORKERS)
        .run_with(sup, c, |c, name| async move { c.reconcile(&name).await });
}

/// When a node last showed it is alive: its lease's renewal (or acquisition, or creation),
/// but never before the node itself was created, so a node re-created under an old
/// lease gets a whole grace period.
pub fn last_heartbeat(node: &Node, lease: Option<&Lease>) -> Option<Timestamp> {
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let renewed = lease.and_then(|l| {
        let spec = l.spec.as_ref();
        spec.and_then(|s| s.renew_time.as_ref())
            .or_else(|| spec.and_then(|s| s.acquire_time.as_ref()))
            .map(|t| t.0)
            .or_else(|| l.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    created.max(renewed)
}

/// A node's heartbeat, judged at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Heard from recently; silent from `stale_at` on.
    Fresh { stale_at: Timestamp },
    /// Silent for longer than the grace period.
    Lost,
}

pub fn health(last: Timestamp, grace: Duration, now: Timestamp) -> Health {
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    let stale_at = last.checked_add(grace).unwrap_or(Timestamp::MAX);
    if now >= stale_at {
        Health::Lost
    } else {
        Health::Fresh { stale_at }
    }
}

/// How long from `now` until `at` (zero once it passed).
pub fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

const UNKNOWN_REASON: &str = "NodeStatusUnknown";
const UNKNOWN_MESSAGE: &str = "Kubelet stopped posting node status.";

/// Sets every condition of a silent node to `Unknown` (conditions already Unknown keep
/// their reason); a node that never posted a Ready condition gets one. Returns whether
/// anything changed.
pub fn mark_conditions_unknown(node: &mut Value) -> bool {
    let current = array_at(node, "/status/conditions").to_vec();
    let mut changed = false;
    for old in current.iter().filter(|c| str_at(c, "/status") != "Unknown") {
        let mut c = old.clone();
        c["status"] = json!("Unknown");
        c["reason"] = json!(UNKNOWN_REASON);
        c["message"] = json!(UNKNOWN_MESSAGE);
        if let Some(m) = c.as_object_mut() {
            // The status changed, so the transition time moves.
            m.remove("lastTransitionTime");
        }
        changed |= crate::types::set_condition(node, c);
    }
    if !current.iter().any(|c| str_at(c, "/type") == "Ready") {
        changed |= crate::types::set_condition(
            node,
            json!({
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusNeverUpdated",
                "message": "Kubelet never posted node status.",
            }),
        );
    }
    changed
}

/// A node's `spec.taints`.
fn taints_of(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// A node's `status.conditions`.
fn conditions_of(node: &Node) -> &[NodeCondition] {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// The status of a node's condition of type `kind`.
fn condition_status<'a>(node: &'a Node, kind: &str) -> Option<&'a str> {
    conditions_of(node)
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.as_str())
}

/// Sets `spec.taints` of the node object about to be written.
fn set_taints(node: &mut Value, list: &[Taint]) {
    node["spec"]["taints"] = serde_json::to_value(list).unwrap_or_else(|_| json!([]));
}

/// A taint stamped `now` (an RFC 3339 time; none when it does not parse).
fn taint(key: &str, effect: &str, now: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        time_added: now.parse().ok().map(Time),
        value: None,
    }
}

fn is_unreachable_taint(t: &Taint) -> bool {
    t.key == UNREACHABLE && (t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE)
}

pub fn is_tainted_unreachable(taints: &[Taint]) -> bool {
    taints.iter().any(is_unreachable_taint)
}

/// Adds the unreachable taints a node lacks, stamped `now`. Returns whether any was added.
pub fn add_unreachable_taints(node: &mut Value, now: &str) -> bool {
    let mut list = taints::of_node(node);
    let mut changed = false;
    for effect in [NO_SCHEDULE, NO_EXECUTE] {
        if !list
            .iter()
            .any(|t| t.key == UNREACHABLE && t.effect == effect)
        {
            list.push(taint(UNREACHABLE, effect, now));
            changed = true;
        }
    }
    if changed {
        set_taints(node, &list);
    }
    changed
}

/// The NoSchedule taints a node's conditions call for (Kubernetes' taint-by-condition):
/// memory, disk and pid pressure, and a Ready condition that is False.
const CONDITION_TAINTS: [(&str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    ("Ready", "False", "node.kubernetes.io/not-ready"),
];

/// The condition taint keys that the conditions call for, given each condition's status.
fn wanted_condition_taints<'a>(status: impl Fn(&str) -> Option<&'a str>) -> Vec<&'static str> {
    CONDITION_TAINTS
        .iter()
        .filter(|(kind, want, _)| status(kind) == Some(*want))
        .map(|(_, _, key)| *key)
        .collect()
}

/// `taints` with the condition taints made to be `want`, new ones stamped `now`.
fn with_condition_taints(taints: &[Taint], want: &[&str], now: &str) -> Vec<Taint> {
    let mut list = taints.to_vec();
    list.retain(|t| {
        let ours = CONDITION_TAINTS.iter().any(|(_, _, k)| t.key == *k) && t.effect == NO_SCHEDULE;
        !ours || want.contains(&t.key.as_str())
    });
    for key in want {
        if !list
            .iter()
            .any(|t| t.key == *key && t.effect == NO_SCHEDULE)
        {
            list.push(taint(key, NO_SCHEDULE, now));
        }
    }
    list
}

/// Adds and removes the condition taints to match the node's conditions. Returns whether
/// anything changed.
pub fn sync_condition_taints(node: &mut Value, now: &str) -> bool {
    let want = wanted_condition_taints(|kind| {
        crate::types::condition(node, kind).map(|c| str_at(c, "/status"))
    });
    let before = taints::of_node(node);
    let after = with_condition_taints(&before, &want, now);
    let changed = after != before;
    if changed {
        set_taints(node, &after);
    }
    changed
}

/// Whether the node's condition taints differ from what its conditions call for.
fn condition_taints_stale(node: &Node) -> bool {
    let want = wanted_condition_taints(|kind| condition_status(node, kind));
    let before = taints_of(node);
    with_condition_taints(before, &want, "") != before
}

/// Removes the unreachable taints. Returns whether there were any.
pub fn remove_unreachable_taints(node: &mut Value) -> bool {
    let mut list = taints::of_node(node);
    let before = list.len();
    list.retain(|t| !is_unreachable_taint(t));
    let changed = before != list.len();
    if changed {
        set_taints(node, &list);
    }
    changed
}

/// When the node's unreachable NoExecute taint was added.
pub fn unreachable_since(taints: &[Taint]) -> Option<Timestamp> {
    taints
        .iter()
        .find(|t| t.key == UNREACHABLE && t.effect == NO_EXECUTE)
        .and_then(|t| t.time_added.as_ref())
        .map(|t| t.0)
}

/// When a pod on an unreachable node goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Its toleration of the taint has no time limit.
    Never,
    At(Timestamp),
}

/// A pod's eviction time on a node tainted unreachable at `tainted_at`: the first of its
/// tolerations that tolerates `unreachable:NoExecute` decides (`tolerationSeconds` after
/// the taint, or never without them); a pod with no such toleration gets `default` (what
/// the DefaultTolerationSeconds admission would have given it).
pub fn eviction(pod: &Value, tainted_at: Timestamp, default: Duration) -> Eviction {
    let taint = k8s_openapi::api::core::v1::Taint {
        key: UNREACHABLE.into(),
        effect: NO_EXECUTE.into(),
        ..Default::default()
    };
    let tolerations = taints::tolerations_of(pod);
    let after = match taints::first_tolerating(&tolerations, &taint) {
        None => SignedDuration::try_from(default).unwrap_or(SignedDuration::MAX),
        Some(t) => match t.toleration_seconds {
            None => return Eviction::Never,
            Some(s) => SignedDuration::from_secs(s.max(0)),
        },
    };
    Eviction::At(tainted_at.checked_add(after).unwrap_or(Timestamp::MAX))
}

fn is_live_on(pod: &Value, node: &str) -> bool {
    str_at(pod, "/spec/nodeName") == node
        && !is_deleting(pod)
        && !matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

/// A client error with what was being done; conflicts stay conflicts (requeue now).
fn context(what: String, e: client::Error) -> Error {
    if e.is_conflict() {
        Error::Client(e)
    } else {
        Error::Other(format!("{what}: {e}"))
    }
}

impl Controller {
    async fn reconcile(&self, name: &str) -> Result<Action> {
        let Some(node) = self.nodes.get(name) else {
            return Ok(Action::Done);
        };
        let node: Node = decode(&node)?;
        let lease: Option<Lease> = match self.leases.get(&format!("{LEASE_NAMESPACE}/{name}")) {
            Some(l) => Some(decode(&l)?),
            None => None,
        };
        let Some(last) = last_heartbeat(&node, lease.as_ref()) else {
            tracing::warn!(node = name, "no time to judge the node's heartbeat by");
            return Ok(Action::Done);
        };
        let now = Timestamp::now();
        match health(last, self.ctx.config.node_grace, now) {
            Health::Fresh { stale_at } => {
                if is_tainted_unreachable(taints_of(&node)) {
                    self.untaint(name).await?;
                }
                if condition_taints_stale(&node) {
                    self.taint_by_conditions(name).await?;
                }
                Ok(Action::RequeueAfter(until(now, stale_at)))
            }
            Health::Lost => self.lost(name, now).await,
        }
    }

    /// The node is heard from again: it may take pods (the node agent posts Ready itself).
    async fn untaint(&self, name: &str) -> Result<()> {
        let res = catalog::of(Kind::Node);
        let mut node = match self.ctx.client.get(res, None, name).await {
            Ok(n) => n,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(context(format!("node {name}: read"), e)),
        };
        if remove_unreachable_taints(&mut node) {
            self.ctx
                .client
                .update(res, &node)
                .await
                .map_err(|e| context(format!("node {name}: remove unreachable taints"), e))?;
            tracing::info!(node = name, "lease renewed; unreachable taints removed");
        }
        Ok(())
    }

    /// Makes the node's condition taints match its conditions (pressure, not ready).
    async fn taint_by_conditions(&self, name: &str) -> Result<()> {
        let res = catalog::of(Kind::Node);
        let mut node = match self.ctx.client.get(res, None, name).await {
            Ok(n) => n,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(context(format!("node {name}: read"), e)),
        };
        if sync_condition_taints(&mut node, &crate::types::now()) {
            self.ctx
                .client
                .update(res, &node)
                .await
                .map_err(|e| context(format!("node {name}: taint by conditions"), e))?;
        }
        Ok(())
    }

    async fn lost(&self, name: &str, now: Timestamp) -> Result<Action> {
        let res = catalog::of(Kind::Node);
        let mut node = match self.ctx.client.get(res, None, name).await {
            Ok(n) => n,
            Err(e) if e.is_not_found() => return Ok(Action::Done),
            Err(e) => return Err(context(format!("node {name}: read"), e)),
        };
        let was_unknown = crate::types::condition(&node, "Ready")
            .is_some_and(|c| str_at(c, "/status") == "Unknown");
        if mark_conditions_unknown(&mut node) {
            node = self
                .ctx
                .client
                .update_status(res, &node)
                .await
                .map_err(|e| context(format!("node {name}: set conditions Unknown"), e))?;
            if !was_unknown {
                tracing::warn!(node = name, "heartbeat lost; node status is now Unknown");
                self.recorder
                    .normal(
                        &node,
                        "NodeNotReady",
                        &format!("Node {name} status is now: NodeNotReady"),
                    )
                    .await;
            }
        }
        if add_unreachable_taints(&mut node, &crate::types::now()) {
            node = self
                .ctx
                .client
                .update(res, &node)
                .await
                .map_err(|e| context(format!("node {name}: add unreachable taints"), e))?;
        }
        let tainted_at = unreachable_since(&taints::of_node(&node)).unwrap_or(now);
        let mut next: Option<Timestamp> = None;
        for pod in self.pods.list() {
            if !is_live_on(&pod, name) {
                continue;
            }
            self.mark_not_ready(&pod).await?;
            if crate::types::is_mirror_pod(&pod) {
                // Its node runs it from a file whatever the API says: never evicted.
                continue;
            }
            match eviction(&pod, tainted_at, self.ctx.config.eviction_timeout) {
                Eviction::Never => {}
                Eviction::At(at) if at <= now => self.evict(&pod).await?,
                Eviction::At(at) => next = Some(next.map_or(at, |n| n.min(at))),
            }
        }
        Ok(match next {
            Some(at) => Action::RequeueAfter(until(now, at)),
            None => Action::Done,
        })
    }

    async fn mark_not_ready(&self, pod: &Value) -> Result<()> {
        let ready = crate::types::condition(pod, "Ready");
        if ready.is_some_and(|c| str_at(c, "/status") == "False") {
            return Ok(());
        }
        let key = key_of(pod);
        let res = catalog::of(Kind::Pod);
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let mut fresh = match self.ctx.client.get(res, Some(ns), name).await {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(context(format!("pod {key}: read"), e)),
        };
        let mut cond = crate::types::condition(&fresh, "Ready")
            .cloned()
            .unwrap_or_else(|| json!({"type": "Ready"}));
        cond["status"] = json!("False");
        if let Some(m) = cond.as_object_mut() {
            m.remove("lastTransitionTime");
        }
        if crate::types::set_condition(&mut fresh, cond) {
            let fresh = self
                .ctx
                .client
                .update_status(res, &fresh)
                .await
                .map_err(|e| context(format!("pod {key}: set Ready=False"), e))?;
            self.recorder
                .warning(&fresh, "NodeNotReady", "Node is not ready")
                .await;
        }
        Ok(())
    }

    async fn evict(&self, pod: &Value) -> Result<()> {
        let key = key_of(pod);
        let res = catalog::of(Kind::Pod);
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        tracing::info!(pod = %key, node = str_at(pod, "/spec/nodeName"), "evicting from an unreachable node");
        self.recorder
            .normal(
                pod,
                "TaintManagerEviction",
                &format!("Marking for deletion Pod {key}"),
            )
            .await;
        let params = DeleteParams {
            // Only this pod, not a new one of the same name.
            uid: Some(str_at(pod, "/metadata/uid").to_string()),
            ..DeleteParams::default()
        };
        match self.ctx.client.delete(res, Some(ns), name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(context(format!("pod {key}: evict"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The typed object a test's JSON stands for.
    fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
        serde_json::from_value(v.clone()).unwrap()
    }

    #[test]
    fn the_heartbeat_is_the_lease_renewal_but_never_before_the_node() {
        let node = json!({"metadata": {"name": "n", "creationTimestamp": "2024-01-01T00:00:00Z"}});
        assert_eq!(
            last_heartbeat(&typed(&node), None),
            Some(t("2024-01-01T00:00:00Z"))
        );
        let lease = json!({
            "metadata": {"creationTimestamp": "2024-01-01T00:00:01Z"},
            "spec": {"renewTime": "2024-01-01T00:05:00.123456Z", "acquireTime": "2024-01-01T00:00:02.000000Z"}
        });
        assert_eq!(
            last_heartbeat(&typed(&node), Some(&typed(&lease))),
            Some(t("2024-01-01T00:05:00.123456Z"))
        );
        let acquired = json!({"spec": {"acquireTime": "2024-01-01T00:00:02.000000Z"}});
        assert_eq!(
            last_heartbeat(&typed(&node), Some(&typed(&acquired))),
            Some(t("2024-01-01T00:00:02Z"))
        );
        let old = json!({"spec": {"renewTime": "2023-01-01T00:00:00.000000Z"}});
        assert_eq!(
            last_heartbeat(&typed(&node), Some(&typed(&old))),
            Some(t("2024-01-01T00:00:00Z")),
            "a lease older than the node does not count"
        );
        assert_eq!(last_heartbeat(&Node::default(), None), None);
    }

    #[test]
    fn a_node_is_lost_once_the_grace_period_passed() {
        let last = t("2024-01-01T00:00:00Z");
        let grace = Duration::from_secs(40);
        assert_eq!(
            health(last, grace, t("2024-01-01T00:00:39.5Z")),
            Health::Fresh {
                stale_at: t("2024-01-01T00:00:40Z")
            }
        );
        assert_eq!(health(last, grace, t("2024-01-01T00:00:40Z")), Health::Lost);
        assert_eq!(health(last, grace, t("2024-01-02T00:00:00Z")), Health::Lost);
        assert_eq!(
            until(t("2024-01-01T00:00:39.5Z"), t("2024-01-01T00:00:40Z")),
            Duration::from_millis(500)
        );
        assert_eq!(
            until(t("2024-01-01T00:00:41Z"), t("2024-01-01T00:00:40Z")),
            Duration::ZERO
        );
    }

    #[test]
    fn conditions_go_unknown_once_and_a_silent_node_gets_a_ready_condition() {
        let mut node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
            {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2024-01-01T00:00:00Z"}
        ]}});
        assert!(mark_conditions_unknown(&mut node));
        let ready = crate::types::condition(&node, "Ready").unwrap();
        assert_eq!(ready["status"], "Unknown");
        assert_eq!(ready["reason"], "NodeStatusUnknown");
        assert_eq!(ready["message"], "Kubelet stopped posting node status.");
        assert_eq!(ready["lastHeartbeatTime"], "2024-01-01T00:00:00Z", "kept");
        assert_ne!(ready["lastTransitionTime"], "2024-01-01T00:00:00Z", "moved");
        let memory = crate::types::condition(&node, "MemoryPressure").unwrap();
        assert_eq!(memory["status"], "Unknown");
        assert!(
            !mark_conditions_unknown(&mut node),
            "a second pass changes nothing"
        );

        let mut silent = json!({"metadata": {"name": "n"}});
        assert!(mark_conditions_unknown(&mut silent));
        let ready = crate::types::condition(&silent, "Ready").unwrap();
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("Unknown"), Some("NodeStatusNeverUpdated"))
        );
        assert!(!mark_conditions_unknown(&mut silent));
    }

    #[test]
    fn unreachable_taints_are_added_once_and_removed_alone() {
        let mut node = json!({"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}});
        assert!(!is_tainted_unreachable(&taints::of_node(&node)));
        assert!(add_unreachable_taints(&mut node, "2024-01-01T00:01:00Z"));
        assert!(is_tainted_unreachable(&taints::of_node(&node)));
        assert_eq!(node["spec"]["taints"].as_array().unwrap().len(), 3);
        assert!(!add_unreachable_taints(&mut node, "2024-01-01T00:02:00Z"));
        assert_eq!(
            unreachable_since(&taints::of_node(&node)),
            Some(t("2024-01-01T00:01:00Z"))
        );
        assert!(remove_unreachable_taints(&mut node));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
        );
        assert!(!remove_unreachable_taints(&mut node));
        let mut bare = json!({"metadata": {"name": "n"}});
        assert!(!remove_unreachable_taints(&mut bare));
        assert!(add_unreachable_taints(&mut bare, "2024-01-01T00:01:00Z"));
        assert_eq!(
            unreachable_since(&taints::of_node(&bare)),
            Some(t("2024-01-01T00:01:00Z"))
        );
    }

    fn pod_tolerating(tolerations: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"tolerations": tolerations}})
    }

    #[test]
    fn eviction_waits_for_the_pods_own_toleration_or_the_default() {
        let at = t("2024-01-01T00:00:00Z");
        let default = Duration::from_secs(300);
        let none = json!({"metadata": {"name": "p"}, "spec": {}});
        assert_eq!(
            eviction(&none, at, default),
            Eviction::At(t("2024-01-01T00:05:00Z"))
        );
        let thirty = pod_tolerating(json!([{
            "key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30
        }]));
        assert_eq!(
            eviction(&thirty, at, default),
            Eviction::At(t("2024-01-01T00:00:30Z"))
        );
        let forever = pod_tolerating(json!([{"key": UNREACHABLE, "operator": "Exists"}]));
        assert_eq!(eviction(&forever, at, default), Eviction::Never);
        let everything = pod_tolerating(json!([{"operator": "Exists"}]));
        assert_eq!(eviction(&everything, at, default), Eviction::Never);
        let negative = pod_tolerating(json!([{
            "key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -5
        }]));
        assert_eq!(eviction(&negative, at, default), Eviction::At(at), "now");
        let other = pod_tolerating(json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}
        ]));
        assert_eq!(
            eviction(&other, at, default),
            Eviction::At(t("2024-01-01T00:05:00Z")),
            "tolerations of other taints or effects do not count"
        );
        let first_wins = pod_tolerating(json!([
            {"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 10},
            {"operator": "Exists"}
        ]));
        assert_eq!(
            eviction(&first_wins, at, default),
            Eviction::At(t("2024-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn only_live_pods_of_the_node_are_handled() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        assert!(is_live_on(&pod, "n"));
        assert!(!is_live_on(&pod, "m"));
        let mut done = pod.clone();
        done["status"]["phase"] = json!("Failed");
        assert!(!is_live_on(&done, "n"));
        let mut going = pod.clone();
        going["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(!is_live_on(&going, "n"));
    }

    #[test]
    fn conditions_taint_the_node_and_untaint_it_when_they_clear() {
        let mut node = json!({
            "spec": {"taints": [{"key": "mine", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "True"},
                {"type": "DiskPressure", "status": "False"},
                {"type": "Ready", "status": "False"},
            ]},
        });
        assert!(condition_taints_stale(&typed(&node)));
        assert!(sync_condition_taints(&mut node, "t"));
        let keys: Vec<&str> = node["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["key"].as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "mine",
                "node.kubernetes.io/memory-pressure",
                "node.kubernetes.io/not-ready"
            ]
        );
        assert!(
            !sync_condition_taints(&mut node, "later"),
            "nothing more to do"
        );
        node["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        assert!(sync_condition_taints(&mut node, "t"));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "mine", "effect": "NoSchedule"}])
        );
    }
}
