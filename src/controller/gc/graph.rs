//! The garbage collector's in-memory ownership graph: every object the informers hold,
//! by uid, with its owners, and for every owner uid (seen or only named) the uids of its
//! dependents. Fed by informer change handlers; each change answers which uids the
//! collector should look at again. Pure bookkeeping: reconciles read the live objects.
//!
//! Objects are of every kind, so only their metadata is typed: each change decodes it once
//! as an [`Object`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde_json::Value;

use crate::client::Resource;
use crate::controller::decode;
use crate::types::meta::Meta;

/// The finalizer that makes a deletion wait for the blocking dependents.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that makes a deletion release the dependents first.
pub const ORPHAN: &str = "orphan";

/// One reference from a dependent to an owner, as far as the graph cares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    uid: String,
    api_version: String,
    kind: String,
    name: String,
    /// `blockOwnerDeletion: true`: a foreground deletion of the owner waits for it.
    block: bool,
}

/// An object the informers hold.
#[derive(Debug, Clone)]
struct Node {
    res: Arc<Resource>,
    namespace: Option<String>,
    name: String,
    owners: Vec<Owner>,
    /// Has a deletionTimestamp.
    deleting: bool,
    /// Has a deletionTimestamp and the `foregroundDeletion` finalizer.
    foreground: bool,
}

impl Node {
    /// Whether the reference `o` of a dependent in namespace `ns` finds this object: the
    /// same kind and name, and cluster-scoped or in the dependent's namespace. A uid the
    /// reference cannot reach is, for the dependent, an owner that does not exist.
    fn is_named_by(&self, o: &Owner, ns: Option<&str>) -> bool {
        // Any version of the group names it: objects are the same in every version.
        let group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.res.kind_name == o.kind
            && self.res.group == group
            && self.name == o.name
            && (self.namespace.is_none() || self.namespace.as_deref() == ns)
    }
}

/// Where an object lives: enough to read it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub res: Arc<Resource>,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.res.singular, self.name),
            None => write!(f, "{} {}", self.res.singular, self.name),
        }
    }
}

/// The ownership graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    /// Owner uid → dependent uids. An owner may be absent from `nodes` (deleted, never
    /// seen, or a uid that never existed); its dependents are still listed here.
    dependents: HashMap<String, BTreeSet<String>>,
}

/// An object of any kind as the collector reads it: its metadata, decoded once; the rest
/// is never read (what it writes back is built from the metadata).
///
/// Only the metadata fields a metadata informer keeps ([`KEPT_METADATA`]) are decoded:
/// the pods' informer holds whole objects, and their labels, annotations and managed
/// fields, decoded at every change, are much of a pod's weight. (Whole metadata here and
/// whole pods in the scheduler took the controllers bench's 1,000-pod scale-up from a
/// median 1.87 to 2.0 s of server CPU.)
///
/// [`KEPT_METADATA`]: crate::client::informer::KEPT_METADATA
#[derive(Debug, Default, Deserialize)]
pub struct Object {
    #[serde(default, deserialize_with = "kept_metadata")]
    pub metadata: ObjectMeta,
}

/// The fields of [`crate::client::informer::KEPT_METADATA`], all the collector reads.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kept {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    creation_timestamp: Option<Time>,
    resource_version: Option<String>,
    generation: Option<i64>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

fn kept_metadata<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let k = Option::<Kept>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: k.name,
        namespace: k.namespace,
        uid: k.uid,
        creation_timestamp: k.creation_timestamp,
        resource_version: k.resource_version,
        generation: k.generation,
        owner_references: k.owner_references,
        finalizers: k.finalizers,
        deletion_timestamp: k.deletion_timestamp,
        deletion_grace_period_seconds: k.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    })
}

impl Meta for Object {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Object {
    /// The metadata of `obj`; an object whose metadata cannot be read has none (no uid:
    /// the graph and the collector pass it by).
    pub fn of(obj: &Value) -> Object {
        decode(obj).unwrap_or_else(|e| {
            tracing::warn!("garbage collector: {e}");
            Object::default()
        })
    }

    /// Whether it carries `finalizer`, being deleted or not.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers().iter().any(|f| f == finalizer)
    }

    /// Whether it is being deleted and carries `finalizer`.
    pub fn deleting_with(&self, finalizer: &str) -> bool {
        self.is_deleting() && self.has_finalizer(finalizer)
    }

    /// `metadata.finalizers`.
    pub fn finalizers(&self) -> &[String] {
        self.metadata.finalizers.as_deref().unwrap_or_default()
    }

    /// `metadata.ownerReferences`.
    pub fn owner_refs(&self) -> &[OwnerReference] {
        self.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
    }
}

fn uid_of(obj: &Object) -> Option<&str> {
    Some(obj.uid()).filter(|u| !u.is_empty())
}

fn owners_of(obj: &Object) -> Vec<Owner> {
    let mut out: Vec<Owner> = Vec::new();
    for r in obj.owner_refs() {
        let uid = r.uid.as_str();
        if uid.is_empty() {
            continue;
        }
        let block = r.block_owner_deletion == Some(true);
        // Two references to one uid: the graph keeps one edge, blocking if either is.
        match out.iter_mut().find(|o| o.uid == uid) {
            Some(o) => o.block |= block,
            None => out.push(Owner {
                uid: uid.to_string(),
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                block,
            }),
        }
    }
    out
}

impl Graph {
    /// Records an object as added or changed; returns the uids to look at again.
    pub fn observe(&mut self, res: &Arc<Resource>, obj: &Value) -> Vec<String> {
        let obj = Object::of(obj);
        let Some(uid) = uid_of(&obj) else {
            return Vec::new();
        };
        let node = Node {
            res: res.clone(),
            namespace: Some(obj.namespace())
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            name: obj.name().to_string(),
            owners: owners_of(&obj),
            deleting: obj.is_deleting(),
            foreground: obj.deleting_with(FOREGROUND),
        };
        let mut wake = BTreeSet::new();
        // The object itself: its deletion has dependents to handle, or one of its owners
        // may be gone or waiting for it.
        if obj.deleting_with(FOREGROUND) || obj.deleting_with(ORPHAN) {
            wake.insert(uid.to_string());
        }
        if node.owners.iter().any(|o| {
            self.nodes
                .get(&o.uid)
                .is_none_or(|n| n.foreground || !n.is_named_by(o, node.namespace.as_deref()))
        }) {
            wake.insert(uid.to_string());
        }
        let old = self.nodes.insert(uid.to_string(), node);
        let old_owners = old.map(|n| n.owners).unwrap_or_default();
        let new_owners = self.nodes[uid].owners.clone();
        for o in &old_owners {
            if !new_owners.iter().any(|n| n.uid == o.uid) {
                self.unlink(&o.uid, uid);
            }
        }
        for o in &new_owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.to_string());
        }
        // Owners waiting for their dependents: this one may have stopped blocking.
        if old_owners != new_owners {
            wake.extend(self.waiting(old_owners.iter().chain(&new_owners)));
        }
        wake.into_iter().collect()
    }

    /// Records an object as deleted; returns the uids to look at again.
    pub fn forget(&mut self, obj: &Value) -> Vec<String> {
        let obj = Object::of(obj);
        let Some(uid) = uid_of(&obj) else {
            return Vec::new();
        };
        let owners = match self.nodes.remove(uid) {
            Some(n) => n.owners,
            None => owners_of(&obj),
        };
        for o in &owners {
            self.unlink(&o.uid, uid);
        }
        // Its dependents may have lost their last owner; its owners may be waiting for it.
        let mut wake: BTreeSet<String> = self.dependents.get(uid).cloned().unwrap_or_default();
        wake.extend(self.waiting(owners.iter()));
        wake.into_iter().collect()
    }

    /// Where the object `uid` lives, if the informers hold it.
    pub fn identity(&self, uid: &str) -> Option<Identity> {
        self.nodes.get(uid).map(|n| Identity {
            res: n.res.clone(),
            namespace: n.namespace.clone(),
            name: n.name.clone(),
        })
    }

    /// The uids of the objects that name `uid` as an owner.
    pub fn dependents(&self, uid: &str) -> Vec<String> {
        self.dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The dependents of `uid` that are not known to be deleted already.
    pub fn undeleted_dependents(&self, uid: &str) -> Vec<String> {
        self.dependents(uid)
            .into_iter()
            .filter(|d| self.nodes.get(d).is_some_and(|n| !n.deleting))
            .collect()
    }

    /// Whether a dependent of `uid` is itself deleting in the foreground: were `uid` to
    /// block its owners and wait for that dependent, the two could wait for each other.
    pub fn has_foreground_dependent(&self, uid: &str) -> bool {
        self.dependents.get(uid).is_some_and(|d| {
            d.iter()
                .any(|d| self.nodes.get(d).is_some_and(|n| n.foreground))
        })
    }

    /// Whether any object names `uid` as an owner.
    pub fn has_dependents(&self, uid: &str) -> bool {
        self.dependents.get(uid).is_some_and(|d| !d.is_empty())
    }

    /// The dependents of `uid` whose reference blocks its foreground deletion.
    pub fn blocking(&self, uid: &str) -> Vec<String> {
        self.dependents(uid)
            .into_iter()
            .filter(|d| {
                self.nodes
                    .get(d)
                    .is_some_and(|n| n.owners.iter().any(|o| o.uid == uid && o.block))
            })
            .collect()
    }

    /// How many objects the graph holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    /// Those of `owners` that are known and deleting in the foreground.
    fn waiting<'a>(&self, owners: impl Iterator<Item = &'a Owner>) -> Vec<String> {
        owners
            .filter(|o| self.nodes.get(&o.uid).is_some_and(|n| n.foreground))
            .map(|o| o.uid.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Kind, catalog};
    use serde_json::json;

    /// A ConfigMap in namespace `ns` named after its uid, owned by ConfigMaps named
    /// after theirs.
    fn cm(uid: &str, owners: &[(&str, bool)]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|(u, block)| {
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": u, "uid": u,
                       "blockOwnerDeletion": block})
            })
            .collect();
        json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid, "ownerReferences": refs}})
    }

    fn deleting(mut obj: Value, finalizer: &str) -> Value {
        obj["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        obj["metadata"]["finalizers"] = json!([finalizer]);
        obj
    }

    fn res() -> &'static Arc<Resource> {
        catalog::of(Kind::ConfigMap)
    }

    #[test]
    fn a_dependent_of_an_owner_never_seen_is_looked_at() {
        let mut g = Graph::default();
        assert_eq!(g.observe(res(), &cm("d1", &[("o1", false)])), ["d1"]);
        assert_eq!(g.dependents("o1"), ["d1"]);
        assert!(g.has_dependents("o1"));
        let id = g.identity("d1").unwrap();
        assert_eq!(
            (id.namespace.as_deref(), id.name.as_str()),
            (Some("ns"), "d1")
        );
    }

    #[test]
    fn a_dependent_of_a_known_owner_waits_until_the_owner_goes() {
        let mut g = Graph::default();
        let owner = cm("o1", &[]);
        assert!(g.observe(res(), &owner).is_empty());
        assert!(g.observe(res(), &cm("d1", &[("o1", false)])).is_empty());
        assert!(g.observe(res(), &cm("e1", &[("o1", true)])).is_empty());
        assert_eq!(g.forget(&owner), ["d1", "e1"]);
        // The owner's dependents stay listed until they go or drop the reference.
        assert_eq!(g.dependents("o1"), ["d1", "e1"]);
        assert!(g.identity("o1").is_none());
        assert!(g.forget(&cm("d1", &[("o1", false)])).is_empty());
        assert!(g.observe(res(), &cm("e1", &[])).is_empty());
        assert!(!g.has_dependents("o1"));
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn a_foreground_owner_is_woken_by_its_dependents_changing_and_going() {
        let mut g = Graph::default();
        let owner = cm("o1", &[]);
        g.observe(res(), &owner);
        g.observe(res(), &cm("d1", &[("o1", true)]));
        g.observe(res(), &cm("e1", &[("o1", false)]));
        assert_eq!(g.observe(res(), &deleting(owner, FOREGROUND)), ["o1"]);
        assert_eq!(g.blocking("o1"), ["d1"]);
        g.observe(res(), &deleting(cm("e1", &[("o1", false)]), "x.io/y"));
        assert_eq!(g.undeleted_dependents("o1"), ["d1"]);
        // A new dependent of an owner being deleted in the foreground is looked at.
        assert_eq!(g.observe(res(), &cm("f1", &[("o1", false)])), ["f1", "o1"]);
        // Dropping the reference wakes the owner, and so does going away.
        assert_eq!(g.observe(res(), &cm("d1", &[])), ["o1"]);
        assert!(g.blocking("o1").is_empty());
        assert_eq!(g.forget(&cm("e1", &[("o1", false)])), ["o1"]);
        // A change that keeps the references does not wake it.
        let mut f = cm("f1", &[("o1", false)]);
        f["data"] = json!({"k": "v"});
        assert_eq!(g.observe(res(), &f), ["f1"]);
    }

    #[test]
    fn a_reference_that_cannot_reach_a_known_uid_is_looked_at() {
        let mut g = Graph::default();
        g.observe(res(), &cm("o1", &[]));
        let mut elsewhere = cm("d1", &[("o1", false)]);
        elsewhere["metadata"]["namespace"] = json!("other");
        assert_eq!(g.observe(res(), &elsewhere), ["d1"]);
        let mut renamed = cm("d2", &[("o1", false)]);
        renamed["metadata"]["ownerReferences"][0]["name"] = json!("not-o1");
        assert_eq!(g.observe(res(), &renamed), ["d2"]);
        let mut other_kind = cm("d3", &[("o1", false)]);
        other_kind["metadata"]["ownerReferences"][0]["kind"] = json!("Secret");
        assert_eq!(g.observe(res(), &other_kind), ["d3"]);
        assert!(g.observe(res(), &cm("d4", &[("o1", false)])).is_empty());
    }

    #[test]
    fn an_orphaning_owner_is_looked_at() {
        let mut g = Graph::default();
        let owner = cm("o1", &[]);
        g.observe(res(), &owner);
        assert_eq!(g.observe(res(), &deleting(owner, ORPHAN)), ["o1"]);
        // A finalizer of someone else is not the collector's business.
        assert!(
            g.observe(res(), &deleting(cm("p1", &[]), "x.io/y"))
                .is_empty()
        );
    }

    #[test]
    fn two_references_to_one_owner_are_one_edge_that_blocks_if_either_does() {
        let mut g = Graph::default();
        g.observe(res(), &cm("o1", &[]));
        g.observe(res(), &cm("d1", &[("o1", false), ("o1", true)]));
        assert_eq!(g.dependents("o1"), ["d1"]);
        assert_eq!(g.blocking("o1"), ["d1"]);
    }

    #[test]
    fn objects_without_a_uid_are_ignored() {
        let mut g = Graph::default();
        assert!(
            g.observe(res(), &json!({"metadata": {"name": "x"}}))
                .is_empty()
        );
        assert!(g.forget(&json!({"metadata": {"name": "x"}})).is_empty());
        assert_eq!(g.len(), 0);
    }
}
