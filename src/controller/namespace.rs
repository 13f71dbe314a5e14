//! The namespace lifecycle controller: empties a namespace being deleted, then removes the
//! `kubernetes` finalizer from its `spec.finalizers` so the registry can delete it.
//!
//! A reconcile deletes (in the background) every object of every namespaced kind in the
//! namespace. Objects held by finalizers of their own are left to whoever owns the
//! finalizer; the namespace waits for them, saying so in its status conditions
//! (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, and
//! `NamespaceDeletionContentFailure` when deletes fail, as Kubernetes does). Deletions
//! of objects inside a terminating namespace bring it back to the queue (custom objects'
//! too, told by the informers of [`super::custom`]); the finalizer goes after a pass
//! that finds the namespace empty.
//!
//! A reconcile decodes its namespace once as a k8s-openapi `Namespace` to read it, and
//! writes back the object as read (finalize, status conditions), so fields this version
//! does not know survive. The contents stay JSON, read through [`crate::types::json`]:
//! they are objects of every kind, custom ones among them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};

use super::claim::is_deleting;
use super::custom::KindChange;
use super::{Action, Context, Error, Queue, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, DeleteParams, ListParams, Propagation};
use crate::client::{Kind, Resource, catalog};
use crate::types::json::{array_at, str_at};
use crate::types::meta::Meta;
use crate::types::set_condition;

const NAME: &str = "namespace-controller";
const WORKERS: usize = 2;
/// The spec finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";

/// The kinds a namespace holds: every namespaced kind but the views of other kinds'
/// objects in another version (events.k8s.io Events, autoscaling/v1 autoscalers).
fn contents() -> impl Iterator<Item = &'static std::sync::Arc<Resource>> {
    catalog::RESOURCES
        .iter()
        .filter(|r| r.namespaced && r.conversion.is_none())
}

fn name_of(obj: &Value) -> &str {
    str_at(obj, "/metadata/name")
}

/// Registers the handlers and spawns the controller.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let queue = Queue::new();
    let namespaces = ctx.informers.get(catalog::of(Kind::Namespace));
    let mut controller = runtime::Controller::new(NAME)
        .with_queue(queue.clone())
        .watches(&namespaces, |change, queue| match change {
            Change::Added(ns) | Change::Updated { new: ns, .. } if is_deleting(ns) => {
                queue.add(name_of(ns));
            }
            _ => {}
        });
    // A deletion is only seen as an event by an informer that has listed; until then a
    // pass could wait for an event that never comes: every kind's informer is waited for.
    for res in contents() {
        let informer = ctx.informers.metadata(res);
        controller = controller.watches(&informer, deletions_in(&namespaces));
    }
    {
        let namespaces = namespaces.clone();
        ctx.custom.on_change(move |change| {
            let KindChange::Followed { res, informer, .. } = change else {
                return;
            };
            if !res.namespaced {
                return;
            }
            let (q, deleted) = (queue.clone(), deletions_in(&namespaces));
            informer.on_change(move |change| deleted(change, &q));
            let (q, namespaces) = (queue.clone(), namespaces.clone());
            change.when_listed(move || {
                for ns in namespaces.list().iter().filter(|n| is_deleting(n)) {
                    q.add(name_of(ns));
                }
            });
        });
    }
    let client = ctx.client.clone();
    controller.workers(WORKERS).run(sup, move |name| {
        let client = client.clone();
        async move { reconcile(&client, &name).await }
    });
}

/// What brings a namespace being deleted back to the queue: an informer telling of the
/// deletion of an object in it.
fn deletions_in(namespaces: &Informer) -> impl Fn(Change<'_>, &Queue) + Send + Sync + 'static {
    let namespaces = namespaces.clone();
    move |change, queue| {
        let Change::Deleted(obj) = change else {
            return;
        };
        let ns = str_at(obj, "/metadata/namespace");
        if ns.is_empty() {
            return;
        }
        if namespaces.get(ns).is_some_and(|n| is_deleting(&n)) {
            queue.add(ns);
        }
    }
}

/// What one pass over a namespace's contents found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Objects found (and deleted, unless already being deleted).
    pub found: usize,
    /// Objects still there after their deletion, by resource.
    pub remaining: BTreeMap<String, usize>,
    /// Finalizers holding the remaining objects, with how many objects each holds.
    pub finalizers: BTreeMap<String, usize>,
    /// Deletes or lists that failed.
    pub failures: Vec<String>,
}

impl Sweep {
    fn hold(&mut self, res: &Resource, obj: &Value) {
        *self.remaining.entry(res.plural.clone()).or_default() += 1;
        for f in array_at(obj, "/metadata/finalizers")
            .iter()
            .filter_map(Value::as_str)
        {
            *self.finalizers.entry(f.to_string()).or_default() += 1;
        }
    }

    /// The deletion conditions for the namespace's status, as Kubernetes words them.
    pub fn conditions(&self) -> Vec<Value> {
        let cond = |kind: &str, on: bool, reason: &str, message: String| {
            json!({"type": kind, "status": if on { "True" } else { "False" },
                   "reason": reason, "message": message})
        };
        let failure = if self.failures.is_empty() {
            cond(
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            )
        } else {
            cond(
                "NamespaceDeletionContentFailure",
                true,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    self.failures.len(),
                    self.failures.join(", ")
                ),
            )
        };
        let remaining = if self.remaining.is_empty() {
            cond(
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".into(),
            )
        } else {
            let parts: Vec<String> = self
                .remaining
                .iter()
                .map(|(plural, n)| format!("{plural} has {n} resource instances"))
                .collect();
            cond(
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", parts.join(", ")),
            )
        };
        let finalizers = if self.finalizers.is_empty() {
            cond(
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".into(),
            )
        } else {
            let parts: Vec<String> = self
                .finalizers
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            cond(
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    parts.join(", ")
                ),
            )
        };
        vec![failure, remaining, finalizers]
    }
}

/// Empties the namespace `name` if it is being deleted; finalizes it once empty.
pub async fn reconcile(client: &Client, name: &str) -> Result<Action> {
    let nsres = catalog::of(Kind::Namespace);
    let ns = match client.get(nsres, None, name).await {
        Ok(ns) => ns,
        Err(e) if e.is_not_found() => return Ok(Action::Done),
        Err(e) => return Err(Error::Other(format!("namespace {name}: read: {e}"))),
    };
    let namespace: Namespace = decode(&ns)?;
    let spec_finalizers = namespace
        .spec
        .and_then(|s| s.finalizers)
        .unwrap_or_default();
    if !namespace.metadata.is_deleting() || !spec_finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::Done);
    }
    let sweep = sweep(client, name).await;
    if !sweep.failures.is_empty() || !sweep.remaining.is_empty() {
        write_conditions(client, &ns, &sweep).await?;
        if !sweep.failures.is_empty() {
            return Err(Error::Other(format!(
                "namespace {name}: delete content: {}",
                sweep.failures.join("; ")
            )));
        }
        tracing::debug!(namespace = name, remaining = ?sweep.remaining, "waiting for content held by finalizers");
        return Ok(Action::Done);
    }
    if sweep.found > 0 {
        // Their deletions come back as informer events; the next pass confirms nothing
        // else appeared meanwhile.
        tracing::debug!(
            namespace = name,
            deleted = sweep.found,
            "deleted content; waiting to confirm"
        );
        return Ok(Action::Done);
    }
    let mut body = ns.clone();
    body["spec"]["finalizers"] = json!(
        spec_finalizers
            .iter()
            .filter(|f| *f != FINALIZER)
            .collect::<Vec<_>>()
    );
    match client.finalize_namespace(&body).await {
        Ok(_) => {
            tracing::info!(namespace = name, "namespace emptied; finalizer removed");
            Ok(Action::Done)
        }
        Err(e) if e.is_not_found() => Ok(Action::Done),
        Err(e) if e.is_conflict() => Err(e.into()),
        Err(e) => Err(Error::Other(format!("namespace {name}: finalize: {e}"))),
    }
}

/// Deletes every object in namespace `ns` that is not already being deleted.
async fn sweep(client: &Client, ns: &str) -> Sweep {
    let mut sweep = Sweep::default();
    let custom = match client.custom_resources().await {
        Ok(list) => list,
        Err(e) => {
            sweep
                .failures
                .push(format!("discover custom resources: {e}"));
            Vec::new()
        }
    };
    let mut kinds: Vec<&Resource> = contents().map(|r| &**r).collect();
    for r in custom.iter().filter(|r| r.namespaced) {
        // One version of each kind: they all hold the same objects.
        if !kinds
            .iter()
            .any(|k| k.group == r.group && k.plural == r.plural)
        {
            kinds.push(r);
        }
    }
    for res in kinds {
        let list = match client.list(res, Some(ns), &ListParams::default()).await {
            Ok(l) => l,
            Err(e) => {
                sweep.failures.push(format!("list {}: {e}", res.plural));
                continue;
            }
        };
        for obj in list.items {
            sweep.found += 1;
            if is_deleting(&obj) {
                sweep.hold(res, &obj);
                continue;
            }
            let params = DeleteParams {
                propagation: Some(Propagation::Background),
                uid: Some(str_at(&obj, "/metadata/uid"))
                    .filter(|u| !u.is_empty())
                    .map(str::to_string),
                ..DeleteParams::default()
            };
            match client.delete(res, Some(ns), name_of(&obj), &params).await {
                Ok(last) if is_deleting(&last) => sweep.hold(res, &last),
                Ok(_) => {}
                // Gone or replaced meanwhile: the next pass sees what is there.
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    sweep
                        .failures
                        .push(format!("delete {} {}: {e}", res.singular, name_of(&obj)))
                }
            }
        }
    }
    sweep
}

/// Puts the sweep's conditions in the namespace's status, if they changed.
async fn write_conditions(client: &Client, ns: &Value, sweep: &Sweep) -> Result<()> {
    let mut ns = ns.clone();
    let mut changed = false;
    for cond in sweep.conditions() {
        changed |= set_condition(&mut ns, cond);
    }
    if !changed {
        return Ok(());
    }
    match client
        .update_status(catalog::of(Kind::Namespace), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) if e.is_conflict() => Err(e.into()),
        Err(e) => Err(Error::Other(format!(
            "namespace {}: write conditions: {e}",
            name_of(&ns)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition<'a>(conds: &'a [Value], kind: &str) -> &'a Value {
        conds.iter().find(|c| c["type"] == kind).unwrap()
    }

    #[test]
    fn an_empty_sweep_says_everything_is_gone() {
        let conds = Sweep::default().conditions();
        for kind in [
            "NamespaceDeletionContentFailure",
            "NamespaceContentRemaining",
            "NamespaceFinalizersRemaining",
        ] {
            assert_eq!(condition(&conds, kind)["status"], "False", "{kind}");
        }
    }

    #[test]
    fn held_content_and_failures_are_named_in_the_conditions() {
        let mut sweep = Sweep::default();
        let held = json!({"metadata": {"name": "a", "finalizers": ["x.io/keep", "y.io/too"]}});
        sweep.hold(catalog::of(Kind::Pod), &held);
        sweep.hold(catalog::of(Kind::Pod), &held);
        sweep.hold(
            catalog::of(Kind::Secret),
            &json!({"metadata": {"name": "b", "finalizers": ["x.io/keep"]}}),
        );
        sweep.failures.push("delete pod c: boom".into());
        let conds = sweep.conditions();
        let remaining = condition(&conds, "NamespaceContentRemaining");
        assert_eq!(remaining["status"], "True");
        assert_eq!(
            remaining["message"],
            "Some resources are remaining: pods has 2 resource instances, secrets has 1 resource instances"
        );
        let finalizers = condition(&conds, "NamespaceFinalizersRemaining");
        assert_eq!(
            finalizers["message"],
            "Some content in the namespace has finalizers remaining: x.io/keep in 3 resource instances, y.io/too in 2 resource instances"
        );
        let failure = condition(&conds, "NamespaceDeletionContentFailure");
        assert_eq!(failure["status"], "True");
        assert_eq!(failure["reason"], "ContentDeletionFailed");
        assert!(
            failure["message"]
                .as_str()
                .unwrap()
                .contains("delete pod c: boom")
        );
    }

    #[test]
    fn the_contents_are_every_namespaced_kind_but_the_events_view() {
        let kinds: Vec<Kind> = contents().map(|r| r.kind).collect();
        assert!(kinds.contains(&Kind::Pod) && kinds.contains(&Kind::Event));
        assert!(!kinds.contains(&Kind::EventsV1Event));
        assert!(!kinds.contains(&Kind::Namespace) && !kinds.contains(&Kind::Node));
    }
}
