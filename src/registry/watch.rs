//! Watches of one resource: initial events (for "from now" watches and streaming lists),
//! label, field and namespace filters (an object that stops matching is DELETED for the
//! watcher), bookmarks, and the 410 rules.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Error, Registry, Resource, Result, parse_rv};
use crate::store::{self, EventKind};
use crate::types::{fields, labels};

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// `None`, `""` or `"0"`: from now, starting with the current objects as ADDED.
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    /// Streaming list: the current objects, a bookmark marking their end, then changes.
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
    pub label: labels::Selector,
    pub field: fields::Selector,
}

/// One event of a watch.
#[derive(Debug)]
pub enum WatchEvent {
    Added(Bytes),
    Modified(Bytes),
    Deleted(Bytes),
    Bookmark(Bytes),
    /// The watch cannot continue (history compacted); it ends after this.
    Error(Error),
}

impl WatchEvent {
    /// The event type as the watch protocol names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark(_) => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        }
    }
}

/// Which objects a list or watch selects.
pub(super) struct Filter {
    strategy: std::sync::Arc<dyn super::strategy::Strategy>,
    label: labels::Selector,
    field: fields::Selector,
}

#[derive(serde::Deserialize, Default)]
struct MetaOnly {
    #[serde(default)]
    metadata: Meta,
}

#[derive(serde::Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Filter {
    pub(super) fn new(
        res: &Resource,
        label: &labels::Selector,
        field: &fields::Selector,
    ) -> Result<Self> {
        Registry::check_field_selector(res, field)?;
        Ok(Self {
            strategy: res.strategy.clone(),
            label: label.clone(),
            field: field.clone(),
        })
    }

    /// No selector: everything under the key prefix matches.
    pub(super) fn is_trivial(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    pub(super) fn matches_bytes(&self, obj: &[u8]) -> Result<bool> {
        if self.is_trivial() {
            return Ok(true);
        }
        let needs_full = self
            .field
            .terms
            .iter()
            .any(|t| !matches!(t.field.as_str(), "metadata.name" | "metadata.namespace"));
        if needs_full {
            let v: Value = serde_json::from_slice(obj)
                .map_err(|e| Error::Internal(format!("stored object: {e}")))?;
            return Ok(self.matches_value(&v));
        }
        let m: MetaOnly = serde_json::from_slice(obj)
            .map_err(|e| Error::Internal(format!("stored object: {e}")))?;
        Ok(self.label.matches(&m.metadata.labels)
            && self.field.matches(|f| match f {
                "metadata.name" => Some(m.metadata.name.clone()),
                "metadata.namespace" => Some(m.metadata.namespace.clone()),
                _ => None,
            }))
    }

    pub(super) fn matches_value(&self, v: &Value) -> bool {
        let labels: BTreeMap<String, String> = v
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        self.label.matches(&labels)
            && self.field.matches(|f| match f {
                "metadata.name" => v
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                "metadata.namespace" => v
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                other => self.strategy.field_value(v, other),
            })
    }
}

/// A running watch; [`Watch::next`] yields its events.
pub struct Watch {
    res: Arc<Resource>,
    filter: Filter,
    initial: VecDeque<Bytes>,
    /// The bookmark that ends the initial events of a streaming list.
    end_of_initial: Option<Bytes>,
    inner: store::Watch,
    done: bool,
}

impl Watch {
    pub(super) fn start(
        reg: &Registry,
        res: &Arc<Resource>,
        namespace: Option<&str>,
        opts: WatchOptions,
    ) -> Result<Self> {
        // Converted kinds are filtered in their stored form.
        Registry::check_field_selector(res, &opts.field)?;
        let stored_res = super::convert::stored_resource(res);
        let stored: &Resource = stored_res.as_deref().unwrap_or(res);
        let field = super::convert::stored_selector(res, &opts.field);
        let filter = Filter::new(stored, &opts.label, &field)?;
        let namespace = namespace.or(opts.field.required("metadata.namespace"));
        let prefix = res.scope_prefix(if res.namespaced { namespace } else { None });
        let rv = opts
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty() && *rv != "0")
            .map(parse_rv)
            .transpose()?;
        let streaming = opts.send_initial_events == Some(true);
        if streaming {
            if opts.resource_version_match.as_deref() != Some("NotOlderThan") {
                return Err(reg_invalid_send_initial(
                    "sendInitialEvents is only supported with resourceVersionMatch=NotOlderThan",
                ));
            }
            if !opts.allow_bookmarks {
                return Err(reg_invalid_send_initial(
                    "sendInitialEvents requires allowWatchBookmarks=true",
                ));
            }
        } else if opts.resource_version_match.is_some() {
            return Err(Error::BadRequest(
                "resourceVersionMatch is only allowed on watches together with sendInitialEvents=true".into(),
            ));
        }
        // Initial events: a streaming list, or a plain watch "from now" (unless the
        // client explicitly asked for none).
        let initial_wanted = streaming || (rv.is_none() && opts.send_initial_events != Some(false));
        let progress_every = opts.allow_bookmarks.then_some(reg.bookmark_every);
        let (initial, after) = if initial_wanted {
            let (items, revision) = reg.store.list(&prefix);
            let mut initial = VecDeque::new();
            for (_, r) in items {
                if filter.matches_bytes(&r.value)? {
                    initial.push_back(r.value);
                }
            }
            (initial, revision)
        } else {
            let after = match rv {
                Some(rv) => rv,
                None => reg.store.revision(),
            };
            let compacted = reg.store.compacted();
            if after < compacted {
                return Err(Error::Expired(format!(
                    "too old resource version: {after} ({compacted})"
                )));
            }
            (VecDeque::new(), after)
        };
        let inner = reg.store.watch(store::WatchOptions {
            prefix,
            after: Some(after),
            progress_every,
        })?;
        let end_of_initial = streaming.then(|| bookmark(res, after, true));
        Ok(Self {
            res: res.clone(),
            filter,
            initial,
            end_of_initial,
            inner,
            done: false,
        })
    }

    /// The next event; `None` when the watch has ended.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next event; `Ready(None)` when the watch has ended.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(obj) = self.initial.pop_front() {
            return Poll::Ready(Some(WatchEvent::Added(self.served(&obj))));
        }
        if let Some(b) = self.end_of_initial.take() {
            return Poll::Ready(Some(WatchEvent::Bookmark(b)));
        }
        loop {
            let event = match std::task::ready!(self.inner.poll_next(cx)) {
                None => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Some(store::WatchEvent::Compacted { compacted }) => {
                    self.done = true;
                    WatchEvent::Error(Error::Expired(format!(
                        "too old resource version: {} ({compacted})",
                        self.inner.revision()
                    )))
                }
                Some(store::WatchEvent::Progress(rev)) => {
                    WatchEvent::Bookmark(bookmark(&self.res, rev, false))
                }
                Some(store::WatchEvent::Event(e)) => match self.translate(&e) {
                    None => continue,
                    Some(WatchEvent::Added(o)) => WatchEvent::Added(self.served(&o)),
                    Some(WatchEvent::Modified(o)) => WatchEvent::Modified(self.served(&o)),
                    Some(WatchEvent::Deleted(o)) => WatchEvent::Deleted(self.served(&o)),
                    Some(other) => other,
                },
            };
            return Poll::Ready(Some(event));
        }
    }

    /// A stored object as this watch's resource serves it.
    fn served(&self, obj: &Bytes) -> Bytes {
        super::convert::served(&self.res, obj)
    }

    /// A store event as this watcher sees it through its filter.
    fn translate(&self, e: &store::Event) -> Option<WatchEvent> {
        let now = |b: &Bytes| self.filter.matches_bytes(b).unwrap_or(false);
        match e.kind {
            EventKind::Created => now(&e.object).then(|| WatchEvent::Added(e.object.clone())),
            EventKind::Deleted => {
                let was = e.prev.as_ref().is_some_and(|p| now(&p.value));
                was.then(|| WatchEvent::Deleted(e.object.clone()))
            }
            EventKind::Updated => {
                let is = now(&e.object);
                let was = e.prev.as_ref().is_some_and(|p| now(&p.value));
                match (was, is) {
                    (true, true) => Some(WatchEvent::Modified(e.object.clone())),
                    (false, true) => Some(WatchEvent::Added(e.object.clone())),
                    (true, false) => {
                        // Left the selection: its last matching state, at this revision.
                        let prev = &e.prev.as_ref().expect("was matching").value;
                        Some(WatchEvent::Deleted(
                            store::restamp(prev, e.revision).unwrap_or_else(|_| prev.clone()),
                        ))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

fn reg_invalid_send_initial(msg: &str) -> Error {
    Error::Invalid {
        group: "".into(),
        kind: "ListOptions".into(),
        name: String::new(),
        causes: vec![super::Cause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {msg}"),
            field: "sendInitialEvents".into(),
        }],
    }
}

/// A bookmark: an empty object of the kind that carries only a resourceVersion.
fn bookmark(res: &Resource, revision: u64, end_of_initial: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if end_of_initial {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let v = json!({"kind": res.kind_name, "apiVersion": res.api_version(), "metadata": meta});
    Bytes::from(serde_json::to_vec(&v).expect("JSON serializes"))
}
