//! The scheduler: binds each pending pod (no `spec.nodeName`, ours by `schedulerName`) to
//! a Ready node it fits (see [`fit`]), or marks it `PodScheduled=False/Unschedulable` with
//! kube-scheduler's message and a `FailedScheduling` event.
//!
//! What is placed on each node is tracked from the pod informer (bound, unfinished pods)
//! plus the pods this scheduler bound that the informer does not show bound yet
//! ("assumed"), so pods bound in quick succession never double-book a node. Choosing a
//! node and assuming the pod on it happen under one lock. Pods that fit nowhere wait in a
//! set until something that may make room happens (a node added or changed in what the
//! checks read, a placed pod deleted or finished, a binding undone); then they are all
//! queued again. No timers.
//!
//! What the scheduler reads of the pod being scheduled beyond the fit (its namespace, uid
//! and the claims its volumes name) is decoded once into a small view, [`Scheduling`]:
//! the whole `Pod`, its status and managed fields among it, would be decoded for nothing
//! at every attempt. The claims it names are decoded as `PersistentVolumeClaim`s. Nodes stay JSON, as
//! [`fit`] reads them: every node is checked on every attempt, and the same rules serve
//! the node agent's admission and the daemon set controller. So do the pods the informer
//! handlers see on every change, and what a pod asks for, which [`fit`] reads too.

use crate::types::fit;
use crate::types::json::str_at;
use crate::types::meta::Meta;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Volume};
use serde::Deserialize;
use serde_json::{Value, json};

use super::claim::is_deleting;
use super::{Action, Context, Error, Queue, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{self, key_of, split_key};
use crate::client::{Kind, catalog};

/// The name pods use to ask for this scheduler (the default).
pub const NAME: &str = "default-scheduler";
const WORKERS: usize = 2;

/// A pod's claim on a node.
#[derive(Debug, Clone)]
struct Placed {
    uid: String,
    node: String,
    requests: fit::Resources,
}

#[derive(Default)]
struct State {
    /// Pods the informer shows bound and not finished, by key.
    bound: HashMap<String, Placed>,
    /// Pods bound by us that the informer does not show bound yet, by key.
    assumed: HashMap<String, Placed>,
    /// Pods that fit no node at their last attempt.
    unschedulable: HashSet<String>,
}

/// What one attempt decided.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Bound by us already; the informer will show it.
    InFlight,
    /// Bind to this node (the pod is assumed there meanwhile).
    Bind(String),
    /// Fits nowhere, for this reason.
    Unfit(String),
}

impl State {
    /// What is placed on each node, by node name.
    fn usage(&self) -> HashMap<String, fit::Resources> {
        let mut out: HashMap<String, fit::Resources> = HashMap::new();
        for p in self.bound.values().chain(self.assumed.values()) {
            out.entry(p.node.clone()).or_default().add(&p.requests);
        }
        out
    }

    /// Follows a change the pod informer applied; returns whether room was freed.
    fn observe(&mut self, change: Change<'_>) -> bool {
        let pod = change.object();
        let key = key_of(pod);
        match change {
            Change::Deleted(_) => {
                self.unschedulable.remove(&key);
                let bound = self.bound.remove(&key).is_some();
                self.assumed.remove(&key).is_some() || bound
            }
            Change::Added(_) | Change::Updated { .. } => match placed(pod) {
                Some(p) => {
                    self.assumed.remove(&key);
                    self.bound.insert(key, p);
                    false
                }
                None => self.bound.remove(&key).is_some(),
            },
        }
    }

    /// Picks a node for the pod and assumes it there, or records that it waits.
    fn decide(
        &mut self,
        key: &str,
        uid: &str,
        needs: fit::Needs,
        nodes: &[Arc<Value>],
    ) -> Decision {
        match self.assumed.get(key) {
            Some(a) if a.uid == uid => return Decision::InFlight,
            // Left from an earlier pod of the same name.
            Some(_) => {
                self.assumed.remove(key);
            }
            None => {}
        }
        match fit::choose(&needs, nodes, &self.usage()) {
            Ok(node) => {
                self.unschedulable.remove(key);
                self.assumed.insert(
                    key.to_string(),
                    Placed {
                        uid: uid.to_string(),
                        node: node.clone(),
                        requests: needs.requests,
                    },
                );
                Decision::Bind(node)
            }
            Err(message) => {
                self.unschedulable.insert(key.to_string());
                Decision::Unfit(message)
            }
        }
    }
}

/// The state and the queue, which the informer handlers share with the workers. The
/// handlers hold only this (never the informers), so nothing forms a cycle that would
/// keep the client, and with it the store, alive after shutdown.
#[derive(Default)]
struct Book {
    state: Mutex<State>,
    queue: Queue,
}

struct Scheduler {
    ctx: Context,
    pods: Informer,
    nodes: Informer,
    claims: Informer,
    recorder: Recorder,
    book: Arc<Book>,
}

/// Registers the scheduler's informer handlers and spawns its loop.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let s = Arc::new(Scheduler {
        ctx: ctx.clone(),
        pods: ctx.informers.get(catalog::of(Kind::Pod)),
        nodes: ctx.informers.get(catalog::of(Kind::Node)),
        claims: ctx.informers.get(catalog::of(Kind::PersistentVolumeClaim)),
        recorder: ctx.recorder(NAME),
        book: Arc::default(),
    });
    let (on_pod, on_node, on_claim) = (s.book.clone(), s.book.clone(), s.book.clone());
    // The handlers queue through the book; placing pods before the caches are full would
    // undercount what nodes hold.
    runtime::Controller::new("scheduler")
        .with_queue(s.book.queue.clone())
        .watches(&s.pods, move |c, _| on_pod.pod_changed(c))
        .watches(&s.nodes, move |c, _| on_node.node_changed(c))
        // A claim made, bound or gone may be what a waiting pod needs.
        .watches(&s.claims, move |c, _| {
            let matters = match c {
                Change::Updated { old, new } => old.get("status") != new.get("status"),
                _ => true,
            };
            if matters {
                on_claim.retry_unschedulable();
            }
        })
        .workers(WORKERS)
        .run_with(sup, s, |c, key| async move { c.reconcile(&key).await });
}

fn is_finished(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

/// Whether this scheduler should place `pod` now.
pub fn wants_scheduling(pod: &Value) -> bool {
    str_at(pod, "/spec/nodeName").is_empty()
        && !is_deleting(pod)
        && !is_finished(pod)
        && matches!(str_at(pod, "/spec/schedulerName"), "" | NAME)
}

/// The claim of a pod that is bound and not finished. A request that does not parse
/// counts as nothing but the pod itself (it was placed anyway).
fn placed(pod: &Value) -> Option<Placed> {
    let node = str_at(pod, "/spec/nodeName");
    if node.is_empty() || is_finished(pod) {
        return None;
    }
    let requests = fit::pod_requests(pod).unwrap_or_else(|e| {
        tracing::warn!(pod = %key_of(pod), error = %e, "requests of a bound pod do not parse");
        fit::Resources::one_pod()
    });
    Some(Placed {
        uid: str_at(pod, "/metadata/uid").to_string(),
        node: node.to_string(),
        requests,
    })
}

/// A client error with what was being done; conflicts stay conflicts (requeue now).
fn context(what: String, e: client::Error) -> Error {
    if e.is_conflict() {
        Error::Client(e)
    } else {
        Error::Other(format!("{what}: {e}"))
    }
}

impl Book {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("scheduler state lock")
    }

    /// Queues every pod that waits for room.
    fn retry_unschedulable(&self) {
        let keys: Vec<String> = self.state().unschedulable.drain().collect();
        if !keys.is_empty() {
            tracing::debug!(
                pods = keys.len(),
                "room may have appeared; retrying waiting pods"
            );
        }
        for k in keys {
            self.queue.add(k);
        }
    }

    fn pod_changed(&self, change: Change<'_>) {
        let freed = self.state().observe(change);
        if freed {
            self.retry_unschedulable();
        }
        let attempt = match change {
            Change::Added(p) => wants_scheduling(p),
            // Our own status writes change nothing the checks read: no new attempt.
            Change::Updated { old, new } => {
                wants_scheduling(new)
                    && (!wants_scheduling(old) || old.get("spec") != new.get("spec"))
            }
            Change::Deleted(_) => false,
        };
        if attempt {
            self.queue.add(key_of(change.object()));
        }
    }

    fn node_changed(&self, change: Change<'_>) {
        let may_help = match change {
            Change::Added(_) => true,
            Change::Updated { old, new } => fit::may_help(old, new),
            Change::Deleted(_) => false,
        };
        if may_help {
            self.retry_unschedulable();
        }
    }
}

/// What the scheduler reads of the pod it schedules beyond the fit.
#[derive(Debug, Default, Deserialize)]
struct Scheduling {
    #[serde(default)]
    metadata: SchedulingMeta,
    #[serde(default)]
    spec: SchedulingSpec,
}

#[derive(Debug, Default, Deserialize)]
struct SchedulingMeta {
    namespace: Option<String>,
    uid: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct SchedulingSpec {
    volumes: Option<Vec<Volume>>,
}

impl Scheduler {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(pod) = self.pods.get(key) else {
            return Ok(Action::Done);
        };
        if !wants_scheduling(&pod) {
            self.book.state().unschedulable.remove(key);
            return Ok(Action::Done);
        }
        let typed: Scheduling = decode(&pod)?;
        let uid = typed.metadata.uid.as_deref().unwrap_or("");
        let needs = match fit::Needs::of(&pod) {
            Ok(n) => n,
            Err(problem) => {
                let message = format!("pod {key} cannot be scheduled: {problem}");
                return self.unschedulable(uid, key, &message).await;
            }
        };
        if let Some(problem) = self.claim_problem(&typed)? {
            self.book.state().unschedulable.insert(key.to_string());
            let nodes = self.nodes.list().len();
            let message = format!("0/{nodes} nodes are available: {problem}.");
            return self.unschedulable(uid, key, &message).await;
        }
        let decision = {
            // Choosing and assuming under one lock, so two workers never book the same
            // room; the nodes are read under it too, so a node change after the read finds
            // the pod in the waiting set.
            let mut st = self.book.state();
            let nodes = self.nodes.list();
            st.decide(key, uid, needs, &nodes)
        };
        match decision {
            Decision::InFlight => Ok(Action::Done),
            Decision::Bind(node) => self.bind(&pod, key, &node).await,
            Decision::Unfit(message) => self.unschedulable(uid, key, &message).await,
        }
    }

    /// Why the pod's claims keep it from any node (the volume binding filter): a claim
    /// that does not exist, is being deleted, or is bound to no volume (nothing
    /// provisions volumes yet, so every claim binds immediately or never).
    fn claim_problem(&self, pod: &Scheduling) -> Result<Option<String>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let volumes = pod.spec.volumes.as_deref();
        let mut unbound = false;
        for v in volumes.unwrap_or_default() {
            let Some(source) = &v.persistent_volume_claim else {
                continue;
            };
            let claim_name = &source.claim_name;
            let Some(claim) = self.claims.get(&format!("{ns}/{claim_name}")) else {
                return Ok(Some(format!(
                    "persistentvolumeclaim {claim_name:?} not found"
                )));
            };
            let claim: PersistentVolumeClaim = decode(&claim)?;
            if claim.metadata.is_deleting() {
                return Ok(Some(format!(
                    "persistentvolumeclaim {claim_name:?} is being deleted"
                )));
            }
            let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
            unbound |= phase != Some("Bound");
        }
        Ok(unbound.then(|| "pod has unbound immediate PersistentVolumeClaims".to_string()))
    }

    async fn bind(&self, pod: &Value, key: &str, node: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.unwrap_or("default");
        match self.ctx.client.bind(ns, name, node).await {
            Ok(()) => {
                tracing::debug!(pod = %key, node, "scheduled");
                let message = format!("Successfully assigned {key} to {node}");
                self.recorder.normal(pod, "Scheduled", &message).await;
                Ok(Action::Done)
            }
            Err(e) => {
                self.book.state().assumed.remove(key);
                // The room it held is free again.
                self.book.retry_unschedulable();
                if e.is_not_found() {
                    return Ok(Action::Done);
                }
                if e.is_conflict() {
                    // Bound by someone else or being deleted: nothing to do. Otherwise a
                    // racing write: look again.
                    let res = catalog::of(Kind::Pod);
                    let now = self.ctx.client.get(res, Some(ns), name).await;
                    return match now {
                        Ok(p) if !wants_scheduling(&p) => Ok(Action::Done),
                        Err(g) if g.is_not_found() => Ok(Action::Done),
                        _ => Err(Error::Client(e)),
                    };
                }
                Err(context(format!("pod {key}: bind to node {node}"), e))
            }
        }
    }

    /// Reports that the pod (of `uid`) fits nowhere: the `PodScheduled` condition and an
    /// event.
    async fn unschedulable(&self, uid: &str, key: &str, message: &str) -> Result<Action> {
        let res = catalog::of(Kind::Pod);
        let (ns, name) = split_key(key);
        let mut fresh = match self.ctx.client.get(res, ns, name).await {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(Action::Done),
            Err(e) => return Err(context(format!("pod {key}: read"), e)),
        };
        if str_at(&fresh, "/metadata/uid") != uid || !wants_scheduling(&fresh) {
            // Changed meanwhile; its own update brings it back if it still waits.
            return Ok(Action::Done);
        }
        let condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
        });
        if crate::types::set_condition(&mut fresh, condition) {
            fresh = self
                .ctx
                .client
                .update_status(res, &fresh)
                .await
                .map_err(|e| context(format!("pod {key}: set PodScheduled"), e))?;
        }
        tracing::debug!(pod = %key, message, "unschedulable");
        self.recorder
            .warning(&fresh, "FailedScheduling", message)
            .await;
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unbound_live_pods_of_this_scheduler_are_wanted() {
        let base = json!({"metadata": {"name": "p"}, "spec": {"schedulerName": NAME}, "status": {"phase": "Pending"}});
        assert!(wants_scheduling(&base));
        let mut unnamed = base.clone();
        unnamed["spec"] = json!({});
        assert!(wants_scheduling(&unnamed));
        let mut other = base.clone();
        other["spec"]["schedulerName"] = json!("my-scheduler");
        assert!(!wants_scheduling(&other));
        let mut bound = base.clone();
        bound["spec"]["nodeName"] = json!("n");
        assert!(!wants_scheduling(&bound));
        let mut deleting = base.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(!wants_scheduling(&deleting));
        for phase in ["Succeeded", "Failed"] {
            let mut done = base.clone();
            done["status"]["phase"] = json!(phase);
            assert!(!wants_scheduling(&done));
        }
    }

    #[test]
    fn finished_or_unbound_pods_hold_no_room() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        });
        let p = placed(&pod).unwrap();
        assert_eq!((p.node.as_str(), p.requests.get("cpu")), ("n", 1000));
        let mut done = pod.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert!(placed(&done).is_none());
        let mut unbound = pod.clone();
        unbound["spec"]["nodeName"] = json!("");
        assert!(placed(&unbound).is_none());
        let mut broken = pod.clone();
        broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("much");
        assert_eq!(placed(&broken).unwrap().requests.get(fit::PODS), 1);
        let mut st = State::default();
        st.bound.insert("d/a".into(), p.clone());
        st.assumed.insert("d/b".into(), p);
        assert_eq!(st.usage()["n"].get("cpu"), 2000);
    }

    fn node(name: &str, cpu: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": cpu, "pods": "10"}
            }
        }))
    }

    fn pod(name: &str, uid: &str, node: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "d", "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "600m"}}}]},
            "status": {"phase": "Pending"}
        })
    }

    fn needs(p: &Value) -> fit::Needs {
        fit::Needs::of(p).unwrap()
    }

    #[test]
    fn assumed_pods_hold_their_room_until_the_informer_shows_them_bound() {
        let nodes = [node("n", "1")];
        let mut st = State::default();
        let a = pod("a", "ua", "");
        let b = pod("b", "ub", "");
        assert_eq!(
            st.decide("d/a", "ua", needs(&a), &nodes),
            Decision::Bind("n".into())
        );
        assert_eq!(
            st.decide("d/a", "ua", needs(&a), &nodes),
            Decision::InFlight
        );
        // The binding of a is not seen yet; b must not get its room.
        assert_eq!(
            st.decide("d/b", "ub", needs(&b), &nodes),
            Decision::Unfit("0/1 nodes are available: 1 Insufficient cpu.".into())
        );
        assert!(st.unschedulable.contains("d/b"));
        // The informer shows a bound: the claim moves, the room stays taken.
        let a_bound = pod("a", "ua", "n");
        assert!(!st.observe(Change::Updated {
            old: &a,
            new: &a_bound
        }));
        assert!(st.assumed.is_empty());
        assert_eq!(st.usage()["n"].get("cpu"), 600);
        assert!(matches!(
            st.decide("d/b", "ub", needs(&b), &nodes),
            Decision::Unfit(_)
        ));
        // a finishes: room is freed, b fits.
        let mut a_done = a_bound.clone();
        a_done["status"]["phase"] = json!("Succeeded");
        assert!(st.observe(Change::Updated {
            old: &a_bound,
            new: &a_done
        }));
        assert_eq!(
            st.decide("d/b", "ub", needs(&b), &nodes),
            Decision::Bind("n".into())
        );
    }

    #[test]
    fn deleting_a_placed_pod_frees_room_and_stale_claims_are_dropped() {
        let nodes = [node("n", "1")];
        let mut st = State::default();
        let a = pod("a", "ua", "");
        assert_eq!(
            st.decide("d/a", "ua", needs(&a), &nodes),
            Decision::Bind("n".into())
        );
        // Deleted before the informer saw it bound: its claim goes with it.
        assert!(st.observe(Change::Deleted(&a)));
        assert!(st.usage().is_empty());
        // A claim left by an earlier pod of the same name does not block the new one.
        assert_eq!(
            st.decide("d/a", "ua", needs(&a), &nodes),
            Decision::Bind("n".into())
        );
        let again = pod("a", "ua2", "");
        assert_eq!(
            st.decide("d/a", "ua2", needs(&again), &nodes),
            Decision::Bind("n".into())
        );
        // Pods that were never placed free nothing.
        let c = pod("c", "uc", "");
        assert!(!st.observe(Change::Added(&c)));
        assert!(!st.observe(Change::Deleted(&c)));
        let bound = pod("x", "ux", "n");
        assert!(!st.observe(Change::Added(&bound)));
        assert!(st.observe(Change::Deleted(&bound)));
    }
}
