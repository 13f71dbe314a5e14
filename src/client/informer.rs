//! Informers: a cache of one resource kept current by a [`Watcher`], with one writer (its
//! `run` task) and cheap cloneable readers, and change handlers that controllers use to
//! feed their work queues. [`Informers`] shares one informer per resource among all
//! controllers.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::watcher::{Event, Watcher};
use super::{Client, ListParams, key_of};
use crate::registry::Resource;

/// A change the cache just applied.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    Added(&'a Value),
    Updated { old: &'a Value, new: &'a Value },
    Deleted(&'a Value),
}

impl<'a> Change<'a> {
    /// The object as it is now (or was, for a deletion).
    pub fn object(&self) -> &'a Value {
        match self {
            Change::Added(o) | Change::Deleted(o) => o,
            Change::Updated { new, .. } => new,
        }
    }
}

type Handler = Arc<dyn Fn(Change<'_>) + Send + Sync>;

struct Inner {
    res: Arc<Resource>,
    selection: ListParams,
    cache: RwLock<BTreeMap<String, Slot>>,
    handlers: Mutex<Vec<Handler>>,
    synced: tokio::sync::watch::Sender<bool>,
    /// Whether anyone needs more of an object than its metadata; if not, the cache keeps
    /// only `apiVersion`, `kind`, the [`KEPT_METADATA`] fields and the top-level `fields`.
    full: AtomicBool,
    fields: Mutex<Vec<&'static str>>,
}

/// The metadata fields a metadata informer keeps: who an object is, who owns it and where
/// it is in its life; what garbage collection and namespace deletion read. Labels,
/// annotations (kubectl's last-applied copy of the object among them) and managed fields
/// are left out: they can weigh more than all the rest, for every object of a kind.
pub const KEPT_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "ownerReferences",
    "finalizers",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// An object as the cache holds it: whole, or, for an informer that keeps only metadata,
/// the kept fields as compact JSON, parsed again when read. A parsed object costs a map
/// node of about 600 bytes for each JSON object in it, however few fields that holds; for
/// the garbage collector's copy of every object of every kind, the text is a fifth of that.
enum Slot {
    Whole(Arc<Value>),
    Kept(Box<[u8]>),
}

impl Slot {
    fn new(full: bool, object: &Arc<Value>) -> Self {
        if full {
            Slot::Whole(object.clone())
        } else {
            Slot::Kept(
                serde_json::to_vec(&**object)
                    .expect("JSON serializes")
                    .into_boxed_slice(),
            )
        }
    }

    fn value(&self) -> Arc<Value> {
        match self {
            Slot::Whole(v) => v.clone(),
            Slot::Kept(text) => {
                Arc::new(serde_json::from_slice(text).expect("the informer wrote this JSON itself"))
            }
        }
    }

    /// Whether the two hold the same version of an object.
    fn same_version(&self, other: &Slot) -> bool {
        match (self, other) {
            (Slot::Kept(a), Slot::Kept(b)) if a == b => true,
            _ => {
                let (a, b) = (self.value(), other.value());
                a.pointer("/metadata/resourceVersion") == b.pointer("/metadata/resourceVersion")
            }
        }
    }
}

/// One resource's cache; cheap to clone.
#[derive(Clone)]
pub struct Informer {
    inner: Arc<Inner>,
}

impl Informer {
    pub fn new(res: &Arc<Resource>) -> Self {
        Self::with_selection(res, ListParams::default())
    }

    /// An informer that keeps only what [`Informers::metadata`] keeps of each object, for
    /// a controller that starts it itself (the garbage collector, for a custom kind).
    pub fn metadata_only(res: &Arc<Resource>) -> Self {
        let informer = Self::new(res);
        informer.inner.full.store(false, Ordering::Relaxed);
        informer
    }

    /// An informer of the objects `selection` picks (a node's pods, say).
    pub fn with_selection(res: &Arc<Resource>, selection: ListParams) -> Self {
        Informer {
            inner: Arc::new(Inner {
                res: res.clone(),
                selection,
                cache: RwLock::new(BTreeMap::new()),
                handlers: Mutex::new(Vec::new()),
                synced: tokio::sync::watch::channel(false).0,
                full: AtomicBool::new(true),
                fields: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Whether `other` is this very informer (a clone of it), not just one of the same
    /// resource.
    pub fn same(&self, other: &Informer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn resource(&self) -> &Arc<Resource> {
        &self.inner.res
    }

    /// Calls `f` for every change the cache applies, in order, on the writer task. `f`
    /// must be quick (enqueue a key); it must not call back into this informer's writer.
    pub fn on_change(&self, f: impl Fn(Change<'_>) + Send + Sync + 'static) {
        self.inner
            .handlers
            .lock()
            .expect("handlers lock")
            .push(Arc::new(f));
    }

    /// The object under `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.inner
            .cache
            .read()
            .expect("cache lock")
            .get(key)
            .map(Slot::value)
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<Value>> {
        self.inner
            .cache
            .read()
            .expect("cache lock")
            .values()
            .map(Slot::value)
            .collect()
    }

    /// The objects of one namespace.
    pub fn list_namespace(&self, ns: &str) -> Vec<Arc<Value>> {
        let from = format!("{ns}/");
        let to = format!("{ns}0"); // '0' follows '/'
        self.inner
            .cache
            .read()
            .expect("cache lock")
            .range(from..to)
            .map(|(_, v)| v.value())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.inner.cache.read().expect("cache lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the first list is in the cache.
    pub async fn synced(&self) {
        let mut rx = self.inner.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub fn has_synced(&self) -> bool {
        *self.inner.synced.borrow()
    }

    fn notify(&self, change: Change<'_>) {
        let handlers: Vec<Handler> = self.inner.handlers.lock().expect("handlers lock").clone();
        for h in handlers {
            h(change);
        }
    }

    /// An object as this informer keeps it.
    fn kept(&self, o: Value) -> Value {
        if self.inner.full.load(Ordering::Relaxed) {
            return o;
        }
        let Value::Object(mut m) = o else {
            return o;
        };
        let mut out = serde_json::Map::new();
        let fields = self.inner.fields.lock().expect("fields lock");
        for field in ["apiVersion", "kind", "metadata"]
            .iter()
            .chain(fields.iter())
        {
            if let Some(v) = m.remove(*field) {
                out.insert(field.to_string(), v);
            }
        }
        if let Some(Value::Object(meta)) = out.get_mut("metadata") {
            meta.retain(|field, _| KEPT_METADATA.contains(&field.as_str()));
        }
        Value::Object(out)
    }

    /// Applies one watcher event to the cache and tells the handlers.
    fn apply(&self, ev: Event) {
        match ev {
            Event::Restarted(items) => {
                // One object at a time: parsed, trimmed, kept, dropped. The handlers hear
                // of the changes once the whole list is in, each object made again from
                // the cache as it is told, so no step holds every object parsed.
                let full = self.inner.full.load(Ordering::Relaxed);
                let fresh: BTreeMap<String, Slot> = items
                    .map(|o| {
                        let o = Arc::new(self.kept(o));
                        (key_of(&o), Slot::new(full, &o))
                    })
                    .collect();
                let keys: Vec<String> = fresh.keys().cloned().collect();
                let old =
                    std::mem::replace(&mut *self.inner.cache.write().expect("cache lock"), fresh);
                for key in &keys {
                    // The lock is not held while the handlers run.
                    let (new, was) = {
                        let cache = self.inner.cache.read().expect("cache lock");
                        let Some(new) = cache.get(key) else {
                            continue;
                        };
                        match old.get(key) {
                            None => (new.value(), None),
                            Some(was) if !was.same_version(new) => (new.value(), Some(was.value())),
                            Some(_) => continue,
                        }
                    };
                    match was {
                        None => self.notify(Change::Added(&new)),
                        Some(old) => self.notify(Change::Updated {
                            old: &old,
                            new: &new,
                        }),
                    }
                }
                let gone: Vec<&Slot> = {
                    let cache = self.inner.cache.read().expect("cache lock");
                    old.iter()
                        .filter(|(key, _)| !cache.contains_key(*key))
                        .map(|(_, was)| was)
                        .collect()
                };
                for was in gone {
                    self.notify(Change::Deleted(&was.value()));
                }
                self.inner.synced.send_replace(true);
            }
            Event::Applied(o) => {
                let new = Arc::new(self.kept(o));
                let slot = Slot::new(self.inner.full.load(Ordering::Relaxed), &new);
                let old = self
                    .inner
                    .cache
                    .write()
                    .expect("cache lock")
                    .insert(key_of(&new), slot);
                match old {
                    None => self.notify(Change::Added(&new)),
                    Some(old) => self.notify(Change::Updated {
                        old: &old.value(),
                        new: &new,
                    }),
                }
            }
            Event::Deleted(o) => {
                let o = self.kept(o);
                let gone = self
                    .inner
                    .cache
                    .write()
                    .expect("cache lock")
                    .remove(&key_of(&o))
                    .map(|s| s.value());
                self.notify(Change::Deleted(gone.as_deref().unwrap_or(&o)));
            }
        }
    }

    /// The writer: keeps the cache current until `cancel`.
    pub async fn run(self, client: Client, cancel: CancellationToken) {
        let mut watcher = Watcher::new(client, &self.inner.res, None, self.inner.selection.clone());
        loop {
            let ev = tokio::select! {
                ev = watcher.next() => ev,
                () = cancel.cancelled() => return,
            };
            self.apply(ev);
        }
    }
}

/// One informer per resource, shared by every controller.
#[derive(Clone, Default)]
pub struct Informers {
    all: Arc<Mutex<HashMap<(String, String), Informer>>>,
}

impl Informers {
    /// The informer of `res`, made on first use, with whole objects.
    pub fn get(&self, res: &Arc<Resource>) -> Informer {
        let informer = self.metadata(res);
        informer.inner.full.store(true, Ordering::Relaxed);
        informer
    }

    /// The informer of `res` for a controller that reads only objects' identity,
    /// ownership and lifecycle (the garbage collector, say): unless another controller
    /// asks for whole objects, its cache keeps only `apiVersion`, `kind` and the
    /// [`KEPT_METADATA`] fields. Informers are asked for before they run.
    pub fn metadata(&self, res: &Arc<Resource>) -> Informer {
        let key = (res.group.clone(), res.plural.clone());
        self.all
            .lock()
            .expect("informers lock")
            .entry(key)
            .or_insert_with(|| {
                let informer = Informer::new(res);
                informer.inner.full.store(false, Ordering::Relaxed);
                informer
            })
            .clone()
    }

    /// [`Informers::metadata`] that also keeps the top-level `fields` of each object (an
    /// Event's timestamps, say).
    pub fn with_fields(&self, res: &Arc<Resource>, fields: &[&'static str]) -> Informer {
        let informer = self.metadata(res);
        let mut kept = informer.inner.fields.lock().expect("fields lock");
        for field in fields {
            if !kept.contains(field) {
                kept.push(field);
            }
        }
        drop(kept);
        informer
    }

    /// Every informer asked for so far.
    pub fn all(&self) -> Vec<Informer> {
        self.all
            .lock()
            .expect("informers lock")
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Kind, catalog};
    use serde_json::json;

    fn cm(name: &str, rv: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}})
    }

    #[test]
    fn a_metadata_informer_keeps_only_metadata_unless_someone_wants_more() {
        let informers = Informers::default();
        let cms = catalog::of(Kind::ConfigMap);
        let secrets = catalog::of(Kind::Secret);
        let meta_only = informers.metadata(cms);
        // Asked for whole objects after (or before) the metadata: whole objects.
        let whole = informers.metadata(secrets);
        assert!(Arc::ptr_eq(&informers.get(secrets).inner, &whole.inner));
        assert!(Arc::ptr_eq(
            &informers.metadata(secrets).inner,
            &whole.inner
        ));
        let obj = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "ns", "uid": "u",
                                "resourceVersion": "7", "generation": 2,
                                "ownerReferences": [{"uid": "o"}], "finalizers": ["f"],
                                "deletionTimestamp": "2026-12-01T00:00:00Z",
                                "deletionGracePeriodSeconds": 0,
                                "creationTimestamp": "2026-11-30T00:00:00Z",
                                "labels": {"app": "a"},
                                "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                                "x".repeat(1000)},
                                "managedFields": [{"manager": "m"}]},
                   "data": {"big": "x".repeat(1000)}})
        };
        meta_only.apply(Event::Restarted(vec![obj("a")].into()));
        meta_only.apply(Event::Applied(obj("b")));
        whole.apply(Event::Applied(obj("c")));
        for name in ["a", "b"] {
            let kept = meta_only.get(&format!("ns/{name}")).unwrap();
            assert_eq!(
                *kept,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "namespace": "ns", "uid": "u",
                                    "resourceVersion": "7", "generation": 2,
                                    "ownerReferences": [{"uid": "o"}], "finalizers": ["f"],
                                    "deletionTimestamp": "2026-12-01T00:00:00Z",
                                    "deletionGracePeriodSeconds": 0,
                                    "creationTimestamp": "2026-11-30T00:00:00Z"}})
            );
        }
        assert_eq!(
            whole.get("ns/c").unwrap()["data"]["big"]
                .as_str()
                .unwrap()
                .len(),
            1000
        );

        // The kept copies still tell a relist what changed, and hand the handlers the
        // version they replace.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        meta_only.on_change(move |c| {
            let line = match c {
                Change::Added(o) => format!("added {}", key_of(o)),
                Change::Updated { old, new } => format!(
                    "updated {} {} -> {}",
                    key_of(new),
                    old["metadata"]["resourceVersion"],
                    new["metadata"]["resourceVersion"]
                ),
                Change::Deleted(o) => format!("deleted {}", key_of(o)),
            };
            s.lock().unwrap().push(line);
        });
        let mut newer = obj("b");
        newer["metadata"]["resourceVersion"] = json!("8");
        meta_only.apply(Event::Restarted(vec![obj("a"), newer, obj("d")].into()));
        meta_only.apply(Event::Deleted(obj("d")));
        assert_eq!(
            *seen.lock().unwrap(),
            [r#"updated ns/b "7" -> "8""#, "added ns/d", "deleted ns/d"]
        );
        assert_eq!(meta_only.list_namespace("ns").len(), 2);
        assert_eq!(meta_only.list().len(), 2);
    }

    #[test]
    fn an_informer_with_fields_keeps_them_beside_the_metadata() {
        let informers = Informers::default();
        let events = catalog::of(Kind::Event);
        let inf = informers.with_fields(events, &["lastTimestamp", "series"]);
        informers.with_fields(events, &["eventTime", "lastTimestamp"]);
        inf.apply(Event::Applied(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns", "labels": {"a": "b"}},
            "lastTimestamp": "2026-12-01T00:00:00Z",
            "eventTime": null,
            "message": "x".repeat(500),
            "involvedObject": {"kind": "Pod", "name": "p"},
        })));
        assert_eq!(
            *inf.get("ns/e").unwrap(),
            json!({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": "e", "namespace": "ns"},
                   "lastTimestamp": "2026-12-01T00:00:00Z", "eventTime": null})
        );
    }

    #[test]
    fn a_relist_reports_only_what_changed() {
        let inf = Informer::new(catalog::of(Kind::ConfigMap));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        inf.on_change(move |c| {
            let what = match c {
                Change::Added(_) => "added",
                Change::Updated { .. } => "updated",
                Change::Deleted(_) => "deleted",
            };
            s.lock()
                .unwrap()
                .push(format!("{what} {}", key_of(c.object())));
        });
        inf.apply(Event::Restarted(vec![cm("a", "1"), cm("b", "2")].into()));
        assert!(inf.has_synced());
        inf.apply(Event::Applied(cm("a", "3")));
        inf.apply(Event::Restarted(vec![cm("a", "3"), cm("c", "4")].into()));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "added ns/a",
                "added ns/b",
                "updated ns/a",
                "added ns/c",
                "deleted ns/b"
            ]
        );
        assert_eq!(inf.list_namespace("ns").len(), 2);
        assert!(inf.list_namespace("n").is_empty());
        assert_eq!(inf.get("ns/c").unwrap()["metadata"]["resourceVersion"], "4");
    }
}
