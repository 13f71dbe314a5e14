//! Ownership of a controller's children, shared by the controllers that keep objects from a
//! template (the replication manager's pods, the deployment controller's ReplicaSets, the
//! statefulset controller's pods and revisions): who controls an object, and claiming —
//! adopting orphans that match the selector, releasing owned objects that stopped matching
//! (`ControllerRefManager` upstream).
//!
//! Children stay JSON, read through [`crate::types::json`]: they are listed from informers
//! on every sync (a ReplicaSet's pods, say), where decoding each would cost more than the
//! few fields read.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Result;
use crate::client::informer::Informer;
use crate::client::{Client, Patch, Resource};
use crate::types::labels;

pub use crate::types::json::str_at;
use crate::types::json::{array_at, bool_at};

pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

/// The ownerReference that marks `obj`'s managing controller.
pub fn controller_ref(obj: &Value) -> Option<&Value> {
    array_at(obj, "/metadata/ownerReferences")
        .iter()
        .find(|r| bool_at(r, "/controller"))
}

/// The group of an apiVersion (empty for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// A kind that controls children: how its ownerReferences name it.
#[derive(Debug, Clone, Copy)]
pub struct OwnerKind {
    pub api_version: &'static str,
    pub kind_name: &'static str,
}

impl OwnerKind {
    /// The key (`namespace/name`) of the object of this kind that controls `child`.
    pub fn key_of_controller(self, child: &Value) -> Option<String> {
        let r = controller_ref(child)?;
        let same_group = group_of(str_at(r, "/apiVersion")) == group_of(self.api_version);
        (str_at(r, "/kind") == self.kind_name && same_group).then(|| {
            format!(
                "{}/{}",
                str_at(child, "/metadata/namespace"),
                str_at(r, "/name")
            )
        })
    }

    /// The ownerReference that makes `owner` a child's managing controller.
    pub fn controlled_by(self, owner: &Value) -> Value {
        json!({
            "apiVersion": self.api_version,
            "kind": self.kind_name,
            "name": str_at(owner, "/metadata/name"),
            "uid": str_at(owner, "/metadata/uid"),
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }
}

/// One owner claiming its children.
pub struct Claim<'a> {
    pub client: &'a Client,
    pub kind: OwnerKind,
    /// The owner's own resource, to read it fresh before adopting.
    pub owners: &'a Resource,
    pub children: &'a Informer,
    pub owner: &'a Value,
    pub selector: &'a labels::Selector,
}

impl Claim<'_> {
    /// Adopts matching orphans and releases owned children that stopped matching; returns
    /// the children the owner controls. Mirror pods belong to the node that runs their
    /// static pod and are never adopted.
    pub async fn run(&self) -> Result<Vec<Arc<Value>>> {
        self.run_filtered(|_| true).await
    }

    /// [`Claim::run`] for children that also pass `member` (a StatefulSet's pods are
    /// those named after it): the others are neither adopted nor kept.
    pub async fn run_filtered(&self, member: impl Fn(&Value) -> bool) -> Result<Vec<Arc<Value>>> {
        let owner = self.owner;
        let ns = str_at(owner, "/metadata/namespace");
        let uid = str_at(owner, "/metadata/uid");
        let mut owned = Vec::new();
        let mut fresh_checked = false;
        for child in self.children.list_namespace(ns) {
            let matches = self
                .selector
                .matches(&labels::map_at(&child, "/metadata/labels"))
                && member(&child);
            match controller_ref(&child) {
                Some(r) if str_at(r, "/uid") == uid => {
                    if matches {
                        owned.push(child);
                    } else if !is_deleting(&child) {
                        self.release(&child, uid).await?;
                    }
                }
                Some(_) => {}
                None if matches
                    && !is_deleting(&child)
                    && !is_deleting(owner)
                    && !crate::types::is_mirror_pod(&child) =>
                {
                    // Adopt only for an owner that still exists as we know it.
                    if !fresh_checked {
                        let live = self
                            .client
                            .get(self.owners, Some(ns), str_at(owner, "/metadata/name"))
                            .await?;
                        if str_at(&live, "/metadata/uid") != uid || is_deleting(&live) {
                            return Ok(owned);
                        }
                        fresh_checked = true;
                    }
                    match self.adopt(&child).await {
                        Ok(adopted) => owned.push(Arc::new(adopted)),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                None => {}
            }
        }
        Ok(owned)
    }

    async fn adopt(&self, child: &Value) -> crate::client::Result<Value> {
        let mut refs = array_at(child, "/metadata/ownerReferences").to_vec();
        refs.push(self.kind.controlled_by(self.owner));
        self.set_owner_refs(child, json!(refs)).await
    }

    async fn release(&self, child: &Value, uid: &str) -> Result<()> {
        let refs: Vec<&Value> = array_at(child, "/metadata/ownerReferences")
            .iter()
            .filter(|r| str_at(r, "/uid") != uid)
            .collect();
        match self.set_owner_refs(child, json!(refs)).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces a child's ownerReferences if it is still the one we looked at.
    async fn set_owner_refs(&self, child: &Value, refs: Value) -> crate::client::Result<Value> {
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": str_at(child, "/metadata/uid")},
            {"op": "test", "path": "/metadata/resourceVersion", "value": str_at(child, "/metadata/resourceVersion")},
            {"op": "add", "path": "/metadata/ownerReferences", "value": refs},
        ]);
        let ns = str_at(child, "/metadata/namespace");
        let name = str_at(child, "/metadata/name");
        self.client
            .patch(
                self.children.resource(),
                Some(ns),
                name,
                &Patch::Json(patch),
            )
            .await
            .map_err(|e| match e {
                // A failed test means the child changed under us: look again.
                crate::client::Error::BadRequest(m) | crate::client::Error::Invalid(m)
                    if m.contains("test") =>
                {
                    crate::client::Error::Conflict(m)
                }
                e => e,
            })
    }
}
