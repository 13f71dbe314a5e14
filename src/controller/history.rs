//! A controller's template history in ControllerRevisions, shared by the daemon set and
//! the statefulset controllers (`pkg/controller/history` upstream).
//!
//! Each revision holds its owner's template as the strategic merge patch that puts it
//! back (`{"spec": {"template": {..., "$patch": "replace"}}}`), a `revision` number and
//! the owner as its controller. [`History::record`] finds the revision of the owner's
//! template or makes it: an equal older one is renumbered to the next number (a
//! rollback), equal duplicates go, and a name taken by another template bumps the
//! owner's `status.collisionCount` and hashes again. [`History::truncate`] keeps
//! `revisionHistoryLimit` revisions among those no longer live.
//!
//! The owner comes as an [`Owner`]: its metadata and collision count typed, its template
//! JSON (hashed and copied as it is stored). Revisions stay JSON: their data is compared
//! and written byte for byte, and a renumbered one is written back whole.

use crate::types::meta::Meta;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};

use super::claim::{Claim, OwnerKind};
use super::{Error, Result, decode};
use crate::client::informer::Informer;
use crate::client::{Client, DeleteParams, Resource};
use crate::types::json::{int_at, str_at};
use crate::types::labels;

/// One owner's history.
pub struct History<'a> {
    pub client: &'a Client,
    pub kind: OwnerKind,
    /// The owner's own resource (to adopt, and to record a collision in its status).
    pub owners: &'a Resource,
    pub revisions: &'a Informer,
    /// The label a revision carries its hash under.
    pub hash_label: &'static str,
    /// Whether a new revision copies its owner's annotations (as the daemon set
    /// controller's do).
    pub annotations: bool,
}

/// The owner of a history, as its controller decoded it.
pub struct Owner<'a> {
    /// The owner as stored: its template is hashed and copied from it.
    pub obj: &'a Value,
    pub meta: &'a ObjectMeta,
    /// The labels of its pod template.
    pub template_labels: Option<&'a BTreeMap<String, String>>,
    /// `status.collisionCount`.
    pub collision_count: Option<i32>,
}

impl Meta for Owner<'_> {
    fn meta(&self) -> &ObjectMeta {
        self.meta
    }
}

impl Owner<'_> {
    /// The collision count the hash takes (a negative one is none).
    fn collisions(&self) -> Option<u32> {
        self.collision_count.and_then(|c| u32::try_from(c).ok())
    }
}

/// `status.collisionCount` of an owner as read back from the API, alone.
fn stored_collision_count(obj: &Value) -> Result<Option<i64>> {
    #[derive(Deserialize)]
    struct Stored {
        status: Option<StoredStatus>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct StoredStatus {
        collision_count: Option<i64>,
    }
    let stored: Stored = decode(obj)?;
    Ok(stored.status.and_then(|s| s.collision_count))
}

/// A JSON pointer's escaping of one key (`~` as `~0`, `/` as `~1`).
fn pointer_key(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The revision data of an owner: its template as the patch that puts it back
/// (`getPatch`).
pub fn data_of(owner: &Value) -> Value {
    let mut template = owner.pointer("/spec/template").cloned().unwrap_or_default();
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The template a revision holds (what [`data_of`] stored).
pub fn template_of(rev: &Value) -> Value {
    let mut template = rev
        .pointer("/data/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(t) = template.as_object_mut() {
        t.remove("$patch");
    }
    template
}

/// Revisions oldest first, by their number then name.
pub fn sort(revs: &mut [Value]) {
    revs.sort_by(|a, b| {
        int_at(a, "/revision")
            .cmp(&int_at(b, "/revision"))
            .then_with(|| str_at(a, "/metadata/name").cmp(str_at(b, "/metadata/name")))
    });
}

impl History<'_> {
    fn hash_of<'v>(&self, rev: &'v Value) -> &'v str {
        str_at(
            rev,
            &format!("/metadata/labels/{}", pointer_key(self.hash_label)),
        )
    }

    /// The revisions `owner` controls, adopting and releasing by its selector, oldest
    /// first; a revision without its hash label is given its name as the hash.
    pub async fn list(&self, owner: &Value, selector: &labels::Selector) -> Result<Vec<Value>> {
        let owned = Claim {
            client: self.client,
            kind: self.kind,
            owners: self.owners,
            children: self.revisions,
            owner,
            selector,
        }
        .run()
        .await?;
        let mut out = Vec::with_capacity(owned.len());
        for rev in owned {
            let mut rev = (*rev).clone();
            if self.hash_of(&rev).is_empty() {
                let name = str_at(&rev, "/metadata/name").to_string();
                if !rev["metadata"]["labels"].is_object() {
                    rev["metadata"]["labels"] = json!({});
                }
                rev["metadata"]["labels"][self.hash_label] = json!(name);
                rev = self.client.update(self.revisions.resource(), &rev).await?;
            }
            out.push(rev);
        }
        sort(&mut out);
        Ok(out)
    }

    /// The revision of `owner`'s template, made or renumbered when needed, and the other
    /// revisions of `revs` (`constructHistory`, `getStatefulSetRevisions`).
    pub async fn record(&self, owner: &Owner<'_>, revs: Vec<Value>) -> Result<(Value, Vec<Value>)> {
        let data = data_of(owner.obj);
        let (mut current, old): (Vec<Value>, Vec<Value>) =
            revs.into_iter().partition(|r| r.get("data") == Some(&data));
        let next = old
            .iter()
            .map(|r| int_at(r, "/revision"))
            .max()
            .unwrap_or(0)
            + 1;
        current.sort_by_key(|r| std::cmp::Reverse(int_at(r, "/revision")));
        let mut current = current.into_iter();
        let cur = match current.next() {
            None => self.snapshot(owner, next).await?,
            Some(mut cur) => {
                // Duplicates of the current revision go (`dedupCurHistories`).
                for dup in current {
                    self.delete(&dup).await?;
                }
                if int_at(&cur, "/revision") < next {
                    cur["revision"] = json!(next);
                    cur = self.client.update(self.revisions.resource(), &cur).await?;
                }
                cur
            }
        };
        Ok((cur, old))
    }

    /// Makes the revision of the owner's template; a name taken by another template bumps
    /// the collision count.
    async fn snapshot(&self, owner: &Owner<'_>, revision: i64) -> Result<Value> {
        let collisions = owner.collisions();
        let template = owner.obj.pointer("/spec/template").unwrap_or(&Value::Null);
        let hash = super::deployment::template_hash(template, collisions);
        let rev_name = format!("{}-{hash}", owner.name());
        let mut labels = json!(owner.template_labels.cloned().unwrap_or_default());
        labels[self.hash_label] = json!(hash);
        let ns = owner.namespace().to_string();
        let mut metadata = json!({
            "name": rev_name,
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [self.kind.controlled_by(owner.obj)],
        });
        if let Some(a) = owner.meta.annotations.as_ref().filter(|_| self.annotations) {
            metadata["annotations"] = json!(a);
        }
        let data = data_of(owner.obj);
        let rev = json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": metadata,
            "data": data,
            "revision": revision,
        });
        let res = self.revisions.resource();
        match self.client.create(res, Some(&ns), &rev).await {
            Ok(made) => Ok(made),
            Err(e) if e.is_already_exists() => {
                let existing = self.client.get(res, Some(&ns), &rev_name).await?;
                if existing.get("data") == Some(&data) {
                    return Ok(existing);
                }
                let mut live = self
                    .client
                    .get(self.owners, Some(&ns), owner.name())
                    .await?;
                if stored_collision_count(&live)? == owner.collision_count.map(i64::from) {
                    live["status"]["collisionCount"] = json!(collisions.unwrap_or(0) + 1);
                    self.client.update_status(self.owners, &live).await?;
                }
                Err(Error::Other(format!(
                    "controller revision {rev_name:?} exists with another template: hashing again"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes one revision, if it is still the one we saw.
    pub async fn delete(&self, rev: &Value) -> Result<()> {
        let params = DeleteParams {
            uid: Some(str_at(rev, "/metadata/uid").to_string()),
            ..DeleteParams::default()
        };
        let ns = str_at(rev, "/metadata/namespace");
        let name = str_at(rev, "/metadata/name");
        match self
            .client
            .delete(self.revisions.resource(), Some(ns), name, &params)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the oldest of `old` beyond `limit` that are not `live` (`cleanupHistory`,
    /// `truncateHistory`); a negative limit keeps them all.
    pub async fn truncate(
        &self,
        limit: i64,
        old: &[Value],
        live: impl Fn(&Value) -> bool,
    ) -> Result<()> {
        if limit < 0 {
            return Ok(());
        }
        let mut history: Vec<&Value> = old.iter().filter(|r| !live(r)).collect();
        let extra = history.len() as i64 - limit;
        if extra <= 0 {
            return Ok(());
        }
        history.sort_by_key(|r| int_at(r, "/revision"));
        for rev in history.into_iter().take(extra as usize) {
            self.delete(rev).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_is_the_template_as_a_replacing_patch_and_gives_it_back() {
        let owner = json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {}}}});
        let data = data_of(&owner);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            template_of(&json!({"data": data})),
            owner["spec"]["template"]
        );
    }

    #[test]
    fn revisions_sort_by_number_then_name() {
        let mut revs = vec![
            json!({"metadata": {"name": "b"}, "revision": 2}),
            json!({"metadata": {"name": "c"}, "revision": 1}),
            json!({"metadata": {"name": "a"}, "revision": 2}),
        ];
        sort(&mut revs);
        let names: Vec<&str> = revs.iter().map(|r| str_at(r, "/metadata/name")).collect();
        assert_eq!(names, ["c", "a", "b"]);
    }
}
