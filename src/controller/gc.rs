//! The garbage collector: deletes objects whose owners are all gone, and carries out the
//! `foregroundDeletion` and `orphan` finalizers that the registry puts on an owner deleted
//! with those propagation policies. Informers on every kind feed an ownership [`Graph`]
//! (which uids to look at again); a reconcile takes one uid and decides from the live
//! objects, never from the cache alone.
//!
//! - An object whose owners are all absent (not found, or re-created with another uid)
//!   is deleted in the background. Owners it still has keep it, and references to absent
//!   owners or to owners deleting in the foreground are removed from it.
//! - An owner deleting in the foreground has its dependents deleted (in the foreground
//!   when they have dependents of their own) and loses the finalizer once no dependent
//!   with `blockOwnerDeletion` is left. A dependent that would wait for a dependent of
//!   its own which already deletes in the foreground (an ownership cycle) first stops
//!   blocking its owners, so the cycle unwinds.
//! - An owner deleting with `orphan` has its reference removed from every dependent, then
//!   loses the finalizer.
//!
//! A namespaced object's owner is looked up in its own namespace (or is cluster-scoped);
//! a cluster-scoped object cannot have a namespaced owner.
//!
//! Custom kinds take part like built-in ones: the shared follower of custom kinds
//! ([`super::custom`]) tells the collector of each kind newly served, whose informer then
//! feeds the graph, and of each kind no longer served, whose objects leave it.

mod graph;

use crate::types::json::str_at;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use super::custom::{CustomKinds, KindChange};
use super::{Action, Context, Error, Queue, Result, Supervisor, runtime};
use crate::client::informer::Change;
use crate::client::recorder::{EventType, Recorder};
use crate::client::{self, Client, DeleteParams, ListParams, Patch, Propagation, key_of};
use crate::client::{Kind, Resource, catalog};

use graph::{FOREGROUND, Graph, Identity, ORPHAN, deleting_with};

const NAME: &str = "garbage-collector";
const WORKERS: usize = 4;

/// Every kind whose objects can own or depend: all but the views of other kinds' objects
/// in another version (events.k8s.io Events, autoscaling/v1 autoscalers).
pub fn collected_kinds() -> impl Iterator<Item = &'static Arc<Resource>> {
    catalog::RESOURCES.iter().filter(|r| r.conversion.is_none())
}

/// What the workers share.
struct Collector {
    client: Client,
    graph: Arc<Mutex<Graph>>,
    queue: Queue,
    recorder: Recorder,
    /// The custom kinds followed now.
    custom: CustomKinds,
}

/// Registers the graph's informer handlers and spawns the collector.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let queue = Queue::new();
    let graph = Arc::new(Mutex::new(Graph::default()));
    let mut controller = runtime::Controller::new(NAME).with_queue(queue.clone());
    for res in collected_kinds() {
        controller = controller.watches(&ctx.informers.metadata(res), feeding(res, &graph));
    }
    {
        let (graph, queue) = (graph.clone(), queue.clone());
        ctx.custom.on_change(move |change| match change {
            KindChange::Followed { res, informer, .. } => {
                let (queue, feed) = (queue.clone(), feeding(res, &graph));
                informer.on_change(move |change| feed(change, &queue));
            }
            KindChange::Dropped { informer, .. } => {
                let wake: Vec<String> = {
                    let mut g = graph.lock().expect("graph lock");
                    informer.list().iter().flat_map(|o| g.forget(o)).collect()
                };
                for uid in wake {
                    queue.add(uid);
                }
            }
        });
    }
    let collector = Arc::new(Collector {
        client: ctx.client.clone(),
        graph,
        queue,
        recorder: ctx.recorder(NAME),
        custom: ctx.custom.clone(),
    });
    let ready = collector.clone();
    controller
        // Orphaning and foreground decisions need every dependent in the graph, the custom
        // kinds served at start among them.
        .waits_until(move || {
            let collector = ready.clone();
            Box::pin(async move {
                collector.custom.synced().await;
                tracing::info!(
                    objects = collector.graph().len(),
                    "garbage collector synced"
                );
            })
        })
        .workers(WORKERS)
        .run(sup, move |uid| {
            let collector = collector.clone();
            async move { collector.reconcile(&uid).await }
        });
}

/// What feeds the changes an informer of `res` applies into the graph, and the uids they
/// wake into the queue.
fn feeding(
    res: &Arc<Resource>,
    graph: &Arc<Mutex<Graph>>,
) -> impl Fn(Change<'_>, &Queue) + Send + Sync + 'static {
    let (res, graph) = (res.clone(), graph.clone());
    move |change, queue| {
        let wake = {
            let mut g = graph.lock().expect("graph lock");
            match change {
                Change::Added(o) => g.observe(&res, o),
                Change::Updated { old, new } if uid_of(old) != uid_of(new) => {
                    // Deleted and re-created between two lists: two objects.
                    let mut wake = g.forget(old);
                    wake.extend(g.observe(&res, new));
                    wake
                }
                Change::Updated { new, .. } => g.observe(&res, new),
                Change::Deleted(o) => g.forget(o),
            }
        };
        for uid in wake {
            queue.add(uid);
        }
    }
}

/// What an ownerReference points at, as far as its dependent is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    /// Exists and is not waiting for its dependents: it keeps the dependent.
    Solid,
    /// Not found, or found with another uid.
    Absent,
    /// Being deleted in the foreground: waits for its dependents to go.
    Waiting,
}

fn uid_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid").and_then(Value::as_str)
}

fn owner_refs(obj: &Value) -> &[Value] {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn names_owner(obj: &Value, uid: &str) -> bool {
    owner_refs(obj).iter().any(|r| r["uid"] == uid)
}

fn blocks(obj: &Value, uid: &str) -> bool {
    owner_refs(obj)
        .iter()
        .any(|r| r["uid"] == uid && r["blockOwnerDeletion"] == true)
}

/// `configmap ns/name`, as messages name objects.
fn describe(res: &Resource, obj: &Value) -> String {
    format!("{} {}", res.singular, key_of(obj))
}

/// A failed request in context; a conflict stays a conflict so the key is requeued now.
fn failed(what: String, e: client::Error) -> Error {
    if e.is_conflict() {
        Error::Client(e)
    } else {
        Error::Other(format!("{what}: {e}"))
    }
}

impl Collector {
    fn graph(&self) -> MutexGuard<'_, Graph> {
        self.graph.lock().expect("graph lock")
    }

    /// Every kind whose objects take part: the built-in ones and the custom ones followed.
    fn kinds(&self) -> Vec<Arc<Resource>> {
        let mut kinds: Vec<Arc<Resource>> = collected_kinds().cloned().collect();
        kinds.extend(self.custom.kinds());
        kinds
    }

    /// The served resource an ownerReference names: its version if served, else another
    /// version of its group and kind (objects are the same in every version).
    fn resource_of_ref(&self, r: &Value) -> Option<Arc<Resource>> {
        let (api_version, kind) = (str_at(r, "/apiVersion"), str_at(r, "/kind"));
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kinds = self.kinds();
        let events = catalog::of(Kind::EventsV1Event);
        let exact = kinds
            .iter()
            .chain(std::iter::once(events))
            .find(|res| res.kind_name == kind && res.api_version() == api_version);
        exact
            .or_else(|| {
                kinds
                    .iter()
                    .find(|res| res.kind_name == kind && res.group == group)
            })
            .cloned()
    }

    /// Looks at the object `uid`: its own deletion's finalizers, or its owners.
    async fn reconcile(&self, uid: &str) -> Result<Action> {
        let Some(id) = self.graph().identity(uid) else {
            // Gone from the informers; whoever depended on it was woken then.
            return Ok(Action::Done);
        };
        let obj = match self
            .client
            .get(&id.res, id.namespace.as_deref(), &id.name)
            .await
        {
            Ok(o) => o,
            Err(e) if e.is_not_found() => return Ok(Action::Done),
            Err(e) => return Err(failed(format!("{id}: read"), e)),
        };
        if uid_of(&obj) != Some(uid) {
            // Re-created under the same name: the informers will tell of both.
            return Ok(Action::Done);
        }
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            if deleting_with(&obj, ORPHAN) {
                self.orphan_dependents(&id, &obj).await?;
                return self.remove_finalizer(&id, &obj, ORPHAN).await;
            }
            if deleting_with(&obj, FOREGROUND) {
                return self.finish_foreground(&id, &obj).await;
            }
            // Already going; nothing to collect.
            return Ok(Action::Done);
        }
        self.collect(&id, &obj).await
    }

    /// Deletes `obj` if none of its owners is left to keep it.
    async fn collect(&self, id: &Identity, obj: &Value) -> Result<Action> {
        let refs = owner_refs(obj);
        if refs.is_empty() {
            return Ok(Action::Done);
        }
        let mut solid = 0;
        let mut stale: Vec<&str> = Vec::new();
        let mut waiting = false;
        for r in refs {
            match self.owner_state(id, obj, r).await? {
                OwnerState::Solid => solid += 1,
                OwnerState::Absent => stale.push(str_at(r, "/uid")),
                OwnerState::Waiting => {
                    waiting = true;
                    stale.push(str_at(r, "/uid"));
                }
            }
        }
        if stale.is_empty() {
            return Ok(Action::Done);
        }
        let what = id.to_string();
        if solid > 0 {
            // Kept by its living owners; the references to the others go so they do not
            // wait for it.
            let keep: Vec<&Value> = refs
                .iter()
                .filter(|r| !stale.contains(&str_at(r, "/uid")))
                .collect();
            let patch = json!({"metadata": {
                "resourceVersion": str_at(obj, "/metadata/resourceVersion"),
                "ownerReferences": keep,
            }});
            return match self
                .client
                .patch(
                    &id.res,
                    id.namespace.as_deref(),
                    &id.name,
                    &Patch::Merge(patch),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(object = %what, removed = ?stale, "removed references to owners that are gone or going");
                    Ok(Action::Done)
                }
                Err(e) if e.is_not_found() => Ok(Action::Done),
                Err(e) => Err(failed(format!("{what}: remove owner references"), e)),
            };
        }
        let uid = uid_of(obj).unwrap_or_default();
        let policy = if waiting && self.graph().has_dependents(uid) {
            // Its owner waits for the whole tree below it. A dependent already deleting in
            // the foreground may be waiting for that same owner (an ownership cycle): the
            // references of this object stop blocking first, so that its owners need not
            // wait for it, as kube-controller-manager's collector does.
            if self.graph().has_foreground_dependent(uid) {
                self.unblock_owners(id, obj).await?;
            }
            Propagation::Foreground
        } else if has_finalizer(obj, ORPHAN) {
            Propagation::Orphan
        } else if has_finalizer(obj, FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        let params = DeleteParams {
            propagation: Some(policy),
            uid: Some(uid.to_string()),
            ..DeleteParams::default()
        };
        match self
            .client
            .delete(&id.res, id.namespace.as_deref(), &id.name, &params)
            .await
        {
            Ok(_) => {
                tracing::info!(object = %what, ?policy, "deleted: no owner is left");
                Ok(Action::Done)
            }
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) => Err(failed(format!("{what}: delete"), e)),
        }
    }

    /// Sets `blockOwnerDeletion: false` on every blocking reference of `obj`.
    async fn unblock_owners(&self, id: &Identity, obj: &Value) -> Result<()> {
        let refs = owner_refs(obj);
        if !refs.iter().any(|r| r["blockOwnerDeletion"] == true) {
            return Ok(());
        }
        let unblocked: Vec<Value> = refs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if r["blockOwnerDeletion"] == true {
                    r["blockOwnerDeletion"] = json!(false);
                }
                r
            })
            .collect();
        let patch = json!({"metadata": {
            "resourceVersion": str_at(obj, "/metadata/resourceVersion"),
            "ownerReferences": unblocked,
        }});
        let what = id.to_string();
        match self
            .client
            .patch(
                &id.res,
                id.namespace.as_deref(),
                &id.name,
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(object = %what, "a dependent deletes in the foreground too: its owner references no longer block, so that an ownership cycle cannot wait for ever");
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(failed(format!("{what}: unblock owner references"), e)),
        }
    }

    /// Looks up the owner `r` of `obj` (which `id` locates) in the API.
    async fn owner_state(&self, id: &Identity, obj: &Value, r: &Value) -> Result<OwnerState> {
        let (kind, name, uid) = (str_at(r, "/kind"), str_at(r, "/name"), str_at(r, "/uid"));
        let Some(res) = self.resource_of_ref(r) else {
            // Not a kind this cluster serves: nothing can say it is gone.
            tracing::debug!(object = %id, kind, "owner of an unknown kind; kept");
            return Ok(OwnerState::Solid);
        };
        let ns = match (res.namespaced, id.namespace.as_deref()) {
            (false, _) => None,
            (true, Some(ns)) => Some(ns),
            (true, None) => {
                self.invalid_namespace(obj, r, "").await;
                return Ok(OwnerState::Absent);
            }
        };
        let owner = match self.client.get(&res, ns, name).await {
            Ok(o) => o,
            Err(e) if e.is_not_found() => {
                if let Some(ns) = ns {
                    self.check_other_namespace(obj, r, &res, ns).await;
                }
                return Ok(OwnerState::Absent);
            }
            Err(e) => {
                return Err(failed(format!("{id}: read owner {kind} {name}"), e));
            }
        };
        Ok(if uid_of(&owner) != Some(uid) {
            if let Some(ns) = ns {
                self.check_other_namespace(obj, r, &res, ns).await;
            }
            OwnerState::Absent
        } else if deleting_with(&owner, FOREGROUND) {
            OwnerState::Waiting
        } else {
            OwnerState::Solid
        })
    }

    /// Reports a namespaced owner that exists, but in another namespace than its
    /// dependent.
    async fn check_other_namespace(&self, obj: &Value, r: &Value, res: &Resource, ns: &str) {
        let elsewhere = self.graph().identity(str_at(r, "/uid")).is_some_and(|o| {
            o.res.kind_name == res.kind_name
                && o.res.group == res.group
                && o.name == str_at(r, "/name")
                && o.namespace.as_deref() != Some(ns)
        });
        if elsewhere {
            self.invalid_namespace(obj, r, ns).await;
        }
    }

    async fn invalid_namespace(&self, obj: &Value, r: &Value, ns: &str) {
        let message = format!(
            "ownerRef [{}/{}, namespace: {ns}, name: {}, uid: {}] does not exist in namespace {ns:?}",
            str_at(r, "/apiVersion"),
            str_at(r, "/kind"),
            str_at(r, "/name"),
            str_at(r, "/uid"),
        );
        self.recorder
            .event(
                obj,
                EventType::Warning,
                "OwnerRefInvalidNamespace",
                &message,
            )
            .await;
    }

    /// Deletes the dependents of an owner deleting in the foreground; drops its finalizer
    /// once no blocking dependent is left.
    async fn finish_foreground(&self, id: &Identity, owner: &Value) -> Result<Action> {
        let uid = uid_of(owner).unwrap_or_default();
        let (dependents, blocking) = {
            let g = self.graph();
            (g.undeleted_dependents(uid), g.blocking(uid))
        };
        // Each dependent not yet going decides for itself: it goes, or loses the
        // reference if other owners keep it.
        for d in dependents {
            self.queue.add(d);
        }
        if !blocking.is_empty() {
            tracing::debug!(object = %id, blocking = blocking.len(), "waiting for dependents");
            return Ok(Action::Done);
        }
        // The graph knows of no blocker; the API has the last word (an informer may lag).
        // A blocker found here is seen by its informer soon, which wakes this owner.
        let live = self.live_dependents(id, uid).await?;
        if let Some((res, d)) = live.iter().find(|(_, d)| blocks(d, uid)) {
            tracing::debug!(object = %id, dependent = %describe(res, d), "waiting for a dependent the informers have not shown yet");
            return Ok(Action::Done);
        }
        self.remove_finalizer(id, owner, FOREGROUND).await
    }

    /// Removes the reference to `owner` from every dependent.
    async fn orphan_dependents(&self, id: &Identity, owner: &Value) -> Result<()> {
        let uid = uid_of(owner).unwrap_or_default();
        for (res, d) in self.live_dependents(id, uid).await? {
            let keep: Vec<&Value> = owner_refs(&d).iter().filter(|r| r["uid"] != uid).collect();
            let refs = if keep.is_empty() {
                Value::Null
            } else {
                json!(keep)
            };
            let patch = json!({"metadata": {
                "resourceVersion": str_at(&d, "/metadata/resourceVersion"),
                "ownerReferences": refs,
            }});
            let key = key_of(&d);
            let (ns, name) = client::split_key(&key);
            match self
                .client
                .patch(&res, ns, name, &Patch::Merge(patch))
                .await
            {
                Ok(_) => tracing::info!(
                    object = %describe(&res, &d),
                    owner = %id,
                    "orphaned"
                ),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(failed(format!("{}: orphan", describe(&res, &d)), e)),
            }
        }
        Ok(())
    }

    /// Every object that names `uid` as an owner, read from the API. A namespaced owner's
    /// dependents are in its namespace; a cluster-scoped owner's may be anywhere.
    async fn live_dependents(
        &self,
        owner: &Identity,
        uid: &str,
    ) -> Result<Vec<(Arc<Resource>, Value)>> {
        let mut out = Vec::new();
        for res in self.kinds() {
            let ns = match (owner.res.namespaced, res.namespaced) {
                (true, false) => continue,
                (true, true) => owner.namespace.as_deref(),
                (false, _) => None,
            };
            let list = self
                .client
                .list(&res, ns, &ListParams::default())
                .await
                .map_err(|e| failed(format!("list {} for dependents", res.plural), e))?;
            out.extend(
                list.items
                    .into_iter()
                    .filter(|d| names_owner(d, uid))
                    .map(|d| (res.clone(), d)),
            );
        }
        Ok(out)
    }

    /// Removes `finalizer` from an object being deleted; the registry completes the
    /// deletion when it was the last.
    async fn remove_finalizer(
        &self,
        id: &Identity,
        obj: &Value,
        finalizer: &str,
    ) -> Result<Action> {
        let rest: Vec<&Value> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|f| *f != finalizer)
            .collect();
        let patch = json!({"metadata": {
            "resourceVersion": str_at(obj, "/metadata/resourceVersion"),
            "finalizers": rest,
        }});
        let what = id.to_string();
        match self
            .client
            .patch(
                &id.res,
                id.namespace.as_deref(),
                &id.name,
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(object = %what, finalizer, "dependents handled; finalizer removed");
                Ok(Action::Done)
            }
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) => Err(failed(format!("{what}: remove finalizer {finalizer}"), e)),
        }
    }
}

/// Whether `obj` carries `finalizer`, being deleted or not.
fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == finalizer))
}
