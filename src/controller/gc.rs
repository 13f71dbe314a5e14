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
//!
//! The collector handles objects of every kind, so only their metadata is typed: a
//! reconcile decodes the object and each owner it reads as a [`graph::Object`] (an
//! `ObjectMeta`) once; the lists searched for an owner's dependents stay JSON, read
//! through [`crate::types::json`], and only the dependents found are decoded.

mod graph;

use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};

use super::custom::{CustomKinds, KindChange};
use super::{Action, Context, Error, Queue, Result, Supervisor, decode, runtime};
use crate::client::informer::Change;
use crate::client::recorder::Recorder;
use crate::client::{self, Client, DeleteParams, ListParams, Patch, Propagation};
use crate::client::{Kind, Resource, catalog};
use crate::types::json::{array_at, str_at};
use crate::types::meta::Meta;

use graph::{FOREGROUND, Graph, Identity, ORPHAN, Object};

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
        .run_with(
            sup,
            collector,
            |c, uid| async move { c.reconcile(&uid).await },
        );
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

/// The uid of an informer's object, compared between two versions of it.
fn uid_of(obj: &Value) -> &str {
    str_at(obj, "/metadata/uid")
}

/// Whether a listed object (JSON, of any kind) names `uid` as an owner.
fn names_owner(obj: &Value, uid: &str) -> bool {
    array_at(obj, "/metadata/ownerReferences")
        .iter()
        .any(|r| str_at(r, "/uid") == uid)
}

fn blocks(obj: &Object, uid: &str) -> bool {
    obj.owner_refs()
        .iter()
        .any(|r| r.uid == uid && r.block_owner_deletion == Some(true))
}

/// `configmap ns/name`, as messages name objects.
fn describe(res: &Resource, obj: &Object) -> String {
    format!("{} {}", res.singular, key(obj))
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn key(obj: &Object) -> String {
    match obj.namespace() {
        "" => obj.name().to_string(),
        ns => format!("{ns}/{}", obj.name()),
    }
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
    fn resource_of_ref(&self, r: &OwnerReference) -> Option<Arc<Resource>> {
        let (api_version, kind) = (r.api_version.as_str(), r.kind.as_str());
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
        let typed: Object = decode(&obj)?;
        if typed.metadata.uid.as_deref() != Some(uid) {
            // Re-created under the same name: the informers will tell of both.
            return Ok(Action::Done);
        }
        if typed.is_deleting() {
            if typed.deleting_with(ORPHAN) {
                self.orphan_dependents(&id, &typed).await?;
                return self.remove_finalizer(&id, &typed, ORPHAN).await;
            }
            if typed.deleting_with(FOREGROUND) {
                return self.finish_foreground(&id, &typed).await;
            }
            // Already going; nothing to collect.
            return Ok(Action::Done);
        }
        self.collect(&id, &obj, &typed).await
    }

    /// Deletes `obj` (read as `typed`) if none of its owners is left to keep it.
    async fn collect(&self, id: &Identity, obj: &Value, typed: &Object) -> Result<Action> {
        let refs = typed.owner_refs();
        if refs.is_empty() {
            return Ok(Action::Done);
        }
        let mut solid = 0;
        let mut stale: Vec<&str> = Vec::new();
        let mut waiting = false;
        for r in refs {
            match self.owner_state(id, obj, r).await? {
                OwnerState::Solid => solid += 1,
                OwnerState::Absent => stale.push(r.uid.as_str()),
                OwnerState::Waiting => {
                    waiting = true;
                    stale.push(r.uid.as_str());
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
            let keep: Vec<&OwnerReference> = refs
                .iter()
                .filter(|r| !stale.contains(&r.uid.as_str()))
                .collect();
            let patch = json!({"metadata": {
                "resourceVersion": resource_version(typed),
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
        let uid = typed.uid();
        let policy = if waiting && self.graph().has_dependents(uid) {
            // Its owner waits for the whole tree below it. A dependent already deleting in
            // the foreground may be waiting for that same owner (an ownership cycle): the
            // references of this object stop blocking first, so that its owners need not
            // wait for it, as kube-controller-manager's collector does.
            if self.graph().has_foreground_dependent(uid) {
                self.unblock_owners(id, typed).await?;
            }
            Propagation::Foreground
        } else if typed.has_finalizer(ORPHAN) {
            Propagation::Orphan
        } else if typed.has_finalizer(FOREGROUND) {
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
    async fn unblock_owners(&self, id: &Identity, obj: &Object) -> Result<()> {
        let refs = obj.owner_refs();
        if !refs.iter().any(|r| r.block_owner_deletion == Some(true)) {
            return Ok(());
        }
        let unblocked: Vec<OwnerReference> = refs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if r.block_owner_deletion == Some(true) {
                    r.block_owner_deletion = Some(false);
                }
                r
            })
            .collect();
        let patch = json!({"metadata": {
            "resourceVersion": resource_version(obj),
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
    async fn owner_state(
        &self,
        id: &Identity,
        obj: &Value,
        r: &OwnerReference,
    ) -> Result<OwnerState> {
        let (kind, name, uid) = (r.kind.as_str(), r.name.as_str(), r.uid.as_str());
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
        let owner: Object = decode(&owner)?;
        Ok(if owner.metadata.uid.as_deref() != Some(uid) {
            if let Some(ns) = ns {
                self.check_other_namespace(obj, r, &res, ns).await;
            }
            OwnerState::Absent
        } else if owner.deleting_with(FOREGROUND) {
            OwnerState::Waiting
        } else {
            OwnerState::Solid
        })
    }

    /// Reports a namespaced owner that exists, but in another namespace than its
    /// dependent.
    async fn check_other_namespace(
        &self,
        obj: &Value,
        r: &OwnerReference,
        res: &Resource,
        ns: &str,
    ) {
        let elsewhere = self.graph().identity(&r.uid).is_some_and(|o| {
            o.res.kind_name == res.kind_name
                && o.res.group == res.group
                && o.name == r.name
                && o.namespace.as_deref() != Some(ns)
        });
        if elsewhere {
            self.invalid_namespace(obj, r, ns).await;
        }
    }

    async fn invalid_namespace(&self, obj: &Value, r: &OwnerReference, ns: &str) {
        let message = format!(
            "ownerRef [{}/{}, namespace: {ns}, name: {}, uid: {}] does not exist in namespace {ns:?}",
            r.api_version, r.kind, r.name, r.uid,
        );
        self.recorder
            .warning(obj, "OwnerRefInvalidNamespace", &message)
            .await;
    }

    /// Deletes the dependents of an owner deleting in the foreground; drops its finalizer
    /// once no blocking dependent is left.
    async fn finish_foreground(&self, id: &Identity, owner: &Object) -> Result<Action> {
        let uid = owner.uid();
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
    async fn orphan_dependents(&self, id: &Identity, owner: &Object) -> Result<()> {
        let uid = owner.uid();
        for (res, d) in self.live_dependents(id, uid).await? {
            let keep: Vec<&OwnerReference> =
                d.owner_refs().iter().filter(|r| r.uid != uid).collect();
            let refs = if keep.is_empty() {
                Value::Null
            } else {
                json!(keep)
            };
            let patch = json!({"metadata": {
                "resourceVersion": resource_version(&d),
                "ownerReferences": refs,
            }});
            let ns = Some(d.namespace()).filter(|ns| !ns.is_empty());
            match self
                .client
                .patch(&res, ns, d.name(), &Patch::Merge(patch))
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
    /// dependents are in its namespace; a cluster-scoped owner's may be anywhere. The
    /// lists stay JSON; only the dependents found are decoded.
    async fn live_dependents(
        &self,
        owner: &Identity,
        uid: &str,
    ) -> Result<Vec<(Arc<Resource>, Object)>> {
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
            for d in list.items.iter().filter(|d| names_owner(d, uid)) {
                out.push((res.clone(), decode(d)?));
            }
        }
        Ok(out)
    }

    /// Removes `finalizer` from an object being deleted; the registry completes the
    /// deletion when it was the last.
    async fn remove_finalizer(
        &self,
        id: &Identity,
        obj: &Object,
        finalizer: &str,
    ) -> Result<Action> {
        let rest: Vec<&String> = obj
            .finalizers()
            .iter()
            .filter(|f| *f != finalizer)
            .collect();
        let patch = json!({"metadata": {
            "resourceVersion": resource_version(obj),
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

/// The resourceVersion a write is made on, `""` (no precondition) when absent.
fn resource_version(obj: &Object) -> &str {
    obj.metadata.resource_version.as_deref().unwrap_or("")
}
