//! Deletion: one object (at once, or marked and held back by its finalizers, dependents
//! or a grace period) and collections.

use super::*;

/// The longest grace period a deletion waits (ten years): a longer one, however a client
/// or a pod's spec says it, is cut to it, so that its deadline is always a time.
pub const MAX_GRACE_PERIOD: i64 = 10 * 365 * 24 * 3600;

impl Registry {
    /// Deletes an object, or marks it for deletion when finalizers hold it back.
    /// Returns the object's last state.
    pub async fn delete(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Bytes> {
        if let Some(stored) = convert::stored_resource(res) {
            return Box::pin(self.converted_delete(res, &stored, namespace, name, opts)).await;
        }
        let ns = Self::scope(res, namespace)?;
        res.strategy.check_delete(name)?;
        let key = res.key(ns, name);
        let expect_rv = opts.resource_version.as_deref().map(parse_rv).transpose()?;
        for _ in 0..UPDATE_RETRIES {
            let cur = self
                .store
                .get(&key)
                .ok_or_else(|| Self::not_found(res, name))?;
            let mut obj = parse(&cur.value)?;
            if let Some(uid) = &opts.uid {
                let have = meta_str(&obj, "uid").unwrap_or("");
                if have != uid {
                    return Err(Self::uid_mismatch(res, name, uid, have));
                }
            }
            if let Some(rv) = expect_rv
                && rv != cur.revision
            {
                return Err(Error::Conflict {
                    group: res.group.clone(),
                    resource: res.qualified_plural(),
                    name: name.to_string(),
                    message: format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        cur.revision
                    ),
                });
            }
            if let Some(grace) = res.strategy.graceful_deletion(&obj, opts) {
                // However long a client (or a pod's spec) asks for, the deadline is a time.
                let grace = grace.min(MAX_GRACE_PERIOD);
                // A pod a node runs is marked; the node stops its containers within the
                // grace period, then deletes it for good (with a grace period of 0).
                let current = meta(&obj)
                    .and_then(|m| m.get("deletionGracePeriodSeconds"))
                    .and_then(Value::as_i64);
                if current.is_some_and(|c| c <= grace) {
                    return Ok(cur.value);
                }
                let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
                let m = meta_mut(&mut obj)?;
                m.insert(
                    "deletionTimestamp".into(),
                    json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
                );
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                if opts.dry_run {
                    return Ok(to_bytes(&obj));
                }
                match self
                    .mark_deleted(res, &key, name, &obj, cur.revision)
                    .await?
                {
                    Some(marked) => return Ok(marked),
                    None => continue,
                }
            }
            let policy = opts
                .propagation
                .or_else(|| res.strategy.default_propagation());
            let m = meta_mut(&mut obj)?;
            let mut fins = finalizers(m);
            let had_dependent_finalizer = fins
                .iter()
                .any(|f| f == "orphan" || f == "foregroundDeletion");
            let wanted = match policy {
                Some(Propagation::Orphan) => Some("orphan"),
                Some(Propagation::Foreground) => Some("foregroundDeletion"),
                _ => None,
            };
            // A dependent policy only matters while there may be dependents; the garbage
            // collector removes these finalizers once it has handled them.
            if let Some(f) = wanted
                && !had_dependent_finalizer
                && self.has_dependents(m)
            {
                fins.push(f.to_string());
            }
            if !fins.is_empty() || res.strategy.holds_deletion(&obj) {
                let m = meta_mut(&mut obj)?;
                m.insert("finalizers".into(), json!(fins));
                if !m.contains_key("deletionTimestamp") {
                    m.insert("deletionTimestamp".into(), json!(crate::types::now()));
                    m.insert("deletionGracePeriodSeconds".into(), json!(0));
                }
                res.strategy.mark_deleting(&mut obj);
                let old = parse(&cur.value)?;
                if same_object(&old, &obj) || opts.dry_run {
                    return Ok(if opts.dry_run {
                        to_bytes(&obj)
                    } else {
                        cur.value
                    });
                }
                match self
                    .mark_deleted(res, &key, name, &obj, cur.revision)
                    .await?
                {
                    Some(marked) => return Ok(marked),
                    None => continue,
                }
            }
            if opts.dry_run {
                return Ok(cur.value);
            }
            match self
                .store
                .delete(&key, Preconditions::revision(cur.revision))
                .await?
            {
                Outcome::Written(r) => {
                    res.strategy.after_write(self, &r.value, true);
                    return Ok(r.value);
                }
                Outcome::Conflict(_) => continue,
                Outcome::NotFound => return Err(Self::not_found(res, name)),
                Outcome::AlreadyExists(_) => {
                    return Err(Error::Internal("unexpected store outcome".into()));
                }
            }
        }
        Err(Self::conflict(res, name))
    }

    /// Stores an object marked for deletion (kept for finalizers or its node); `None`
    /// when a concurrent write came first and the caller should look again.
    async fn mark_deleted(
        &self,
        res: &Resource,
        key: &str,
        name: &str,
        obj: &Value,
        revision: u64,
    ) -> Result<Option<Bytes>> {
        match self
            .store
            .update(key, to_bytes(obj), Preconditions::revision(revision))
            .await?
        {
            Outcome::Written(r) => {
                res.strategy.after_write(self, &r.value, false);
                Ok(Some(r.value))
            }
            Outcome::Conflict(_) => Ok(None),
            Outcome::NotFound => Err(Self::not_found(res, name)),
            Outcome::AlreadyExists(_) => Err(Error::Internal("unexpected store outcome".into())),
        }
    }

    /// Whether any object names the object with metadata `m` as its owner.
    fn has_dependents(&self, m: &Map<String, Value>) -> bool {
        let Some(uid) = m.get("uid").and_then(Value::as_str) else {
            return false;
        };
        let needle = format!("\"uid\":\"{uid}\"");
        let (all, _) = self.store.list("/registry/");
        all.iter().any(|(_, r)| {
            // Cheap pre-check on the bytes, then a real look at ownerReferences.
            memchr::memmem::find(&r.value, needle.as_bytes()).is_some()
                && serde_json::from_slice::<Value>(&r.value).is_ok_and(|v| {
                    v.pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|refs| refs.iter().any(|o| o["uid"] == uid))
                })
        })
    }

    /// Deletes every object that matches `list` options; returns their last states.
    pub async fn delete_collection(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<List> {
        if let Some(stored) = convert::stored_resource(res) {
            return Box::pin(self.converted_delete_collection(res, &stored, namespace, list, opts))
                .await;
        }
        let mut page = self
            .list(
                res,
                namespace,
                &ListOptions {
                    limit: None,
                    continue_token: None,
                    ..list.clone()
                },
            )
            .await?;
        let mut deleted = Vec::with_capacity(page.items.len());
        for item in std::mem::take(&mut page.items) {
            let obj = parse(&item)?;
            let name = meta_str(&obj, "name").unwrap_or_default().to_string();
            let ns = meta_str(&obj, "namespace").map(str::to_string);
            match self.delete(res, ns.as_deref(), &name, opts).await {
                Ok(last) => deleted.push(last),
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        page.items = deleted;
        page.revision = self.store.revision();
        Ok(page)
    }
}
