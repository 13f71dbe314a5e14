//! The in-memory copy of every current object, which serves all reads. Only the committer
//! changes it, after a batch is durable, so readers never see an unacknowledged write.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use super::backend::{Event, EventKind, Record};

pub(super) struct Cache {
    inner: RwLock<Inner>,
}

struct Inner {
    objects: BTreeMap<Arc<str>, Record>,
    revision: u64,
}

impl Cache {
    pub(super) fn new(objects: Vec<(Arc<str>, Record)>, revision: u64) -> Self {
        Self {
            inner: RwLock::new(Inner {
                objects: objects.into_iter().collect(),
                revision,
            }),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<Record> {
        self.inner
            .read()
            .expect("cache lock")
            .objects
            .get(key)
            .cloned()
    }

    pub(super) fn revision(&self) -> u64 {
        self.inner.read().expect("cache lock").revision
    }

    pub(super) fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> (Vec<(Arc<str>, Record)>, u64) {
        let (items, revision, _) = self.list_counting(prefix, start_after, limit, false);
        (items, revision)
    }

    /// [`Cache::list`], and when `count_rest`, how many entries under `prefix` follow the
    /// page (else 0), at the same revision.
    pub(super) fn list_counting(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        count_rest: bool,
    ) -> (Vec<(Arc<str>, Record)>, u64, usize) {
        let inner = self.inner.read().expect("cache lock");
        let start = match start_after {
            Some(k) if k >= prefix => Bound::Excluded(k),
            _ => Bound::Included(prefix),
        };
        let mut range = inner
            .objects
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix));
        let items = range
            .by_ref()
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let rest = if count_rest { range.count() } else { 0 };
        (items, inner.revision, rest)
    }

    pub(super) fn count(&self, prefix: &str) -> usize {
        let inner = self.inner.read().expect("cache lock");
        inner
            .objects
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .count()
    }

    /// Applies a durable batch of events (in revision order).
    pub(super) fn apply(&self, events: &[Arc<Event>], revision: u64) {
        let mut inner = self.inner.write().expect("cache lock");
        for e in events {
            match e.kind {
                EventKind::Deleted => {
                    inner.objects.remove(&*e.key);
                }
                EventKind::Created | EventKind::Updated => {
                    inner.objects.insert(
                        e.key.clone(),
                        Record {
                            revision: e.revision,
                            value: e.object.clone(),
                        },
                    );
                }
            }
        }
        inner.revision = revision;
    }
}
