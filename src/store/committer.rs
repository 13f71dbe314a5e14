//! The committer: the one thread that owns the write path. It takes every write waiting
//! in its queue, checks preconditions against the cache (and the batch so far), assigns
//! revisions, persists the batch with one atomic, durable commit (group commit), then
//! updates the cache, publishes the events in revision order and acknowledges.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::backend::{CommitBatch, Event, EventKind, Record};
use super::stamp::{self, Template};
use super::{Error, Outcome, Preconditions, Result, Shared, now_ms};

pub(super) enum Op {
    Create {
        key: Arc<str>,
        template: Template,
    },
    Update {
        key: Arc<str>,
        template: Template,
        pre: Preconditions,
    },
    Delete {
        key: Arc<str>,
        pre: Preconditions,
        /// The state the deletion records, if not the stored one.
        last: Option<Template>,
    },
}

impl Op {
    fn key(&self) -> &Arc<str> {
        match self {
            Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key,
        }
    }
}

pub(super) enum Request {
    Write {
        op: Op,
        reply: oneshot::Sender<Result<Outcome>>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

pub(super) fn spawn(
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Request>,
    max_batch: usize,
    revision: u64,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("berth-store-commit".into())
        .spawn(move || Committer::new(shared, revision).run(rx, max_batch))
        .map_err(|source| Error::Io {
            context: "start the store's committer thread".into(),
            source,
        })
}

struct Committer {
    shared: Arc<Shared>,
    revision: u64,
    last_time: u64,
    /// Set after a commit failed: what is on disk is no longer known, so no more writes.
    failed: Option<String>,
}

impl Committer {
    fn new(shared: Arc<Shared>, revision: u64) -> Self {
        Self {
            shared,
            revision,
            last_time: 0,
            failed: None,
        }
    }

    fn run(mut self, mut rx: mpsc::Receiver<Request>, max_batch: usize) {
        let mut batch = Vec::with_capacity(max_batch);
        while let Some(first) = rx.blocking_recv() {
            batch.push(first);
            while batch.len() < max_batch {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            if let Some(close) = self.commit(&mut batch) {
                rx.close();
                // Answer writes that raced with the close.
                while let Ok(r) = rx.try_recv() {
                    if let Request::Write { reply, .. } = r {
                        let _ = reply.send(Err(Error::Closed));
                    }
                }
                drop(self);
                let _ = close.send(());
                return;
            }
        }
    }

    /// Commits one batch; returns the reply of a close request found in it.
    fn commit(&mut self, batch: &mut Vec<Request>) -> Option<oneshot::Sender<()>> {
        let mut close = None;
        let mut overlay: HashMap<Arc<str>, Option<Record>> = HashMap::new();
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut replies = Vec::with_capacity(batch.len());
        let time_ms = now_ms().max(self.last_time);
        let mut revision = self.revision;
        for request in batch.drain(..) {
            let (op, reply) = match request {
                Request::Close { reply } => {
                    close = Some(reply);
                    continue;
                }
                Request::Write { op, reply } => (op, reply),
            };
            if let Some(why) = &self.failed {
                let _ = reply.send(Err(Error::Failed(why.clone())));
                continue;
            }
            let key = op.key().clone();
            let current = match overlay.get(&key) {
                Some(c) => c.clone(),
                None => self.shared.cache.get(&key),
            };
            match decide(op, current, revision + 1, time_ms) {
                Decision::Reject(outcome) => replies.push((reply, outcome)),
                Decision::Write(event) => {
                    revision = event.revision;
                    let record = Record {
                        revision,
                        value: event.object.clone(),
                    };
                    let after = (event.kind != EventKind::Deleted).then(|| record.clone());
                    overlay.insert(key, after);
                    events.push(Arc::new(event));
                    replies.push((reply, Outcome::Written(record)));
                }
            }
        }
        if !events.is_empty() {
            let started = std::time::Instant::now();
            let result = self.shared.backend.commit(&CommitBatch {
                revision,
                events: &events,
                schema: None,
            });
            if let Err(e) = result {
                tracing::error!(error = %e, "store commit failed; refusing further writes");
                let why = e.to_string();
                self.failed = Some(why.clone());
                for (reply, _) in replies {
                    let _ = reply.send(Err(Error::Failed(why.clone())));
                }
                return close;
            }
            let m = &self.shared.metrics;
            m.commit_seconds.observe(started.elapsed().as_secs_f64());
            m.batch_size.observe(events.len() as f64);
            self.revision = revision;
            self.last_time = time_ms;
            self.shared.cache.apply(&events, revision);
            self.shared.hub.publish(&events);
        }
        for (reply, outcome) in replies {
            let _ = reply.send(Ok(outcome));
        }
        close
    }
}

enum Decision {
    Write(Event),
    Reject(Outcome),
}

/// Whether `op` may be applied to `current`, and the event it makes at `revision`.
fn decide(op: Op, current: Option<Record>, revision: u64, time_ms: u64) -> Decision {
    let event = |key: Arc<str>, kind, object, prev| Event {
        revision,
        key,
        kind,
        object,
        prev,
        time_ms,
    };
    match (op, current) {
        (Op::Create { key, template }, None) => Decision::Write(event(
            key,
            EventKind::Created,
            template.stamp(revision),
            None,
        )),
        (Op::Create { .. }, Some(cur)) => Decision::Reject(Outcome::AlreadyExists(cur)),
        (Op::Update { .. } | Op::Delete { .. }, None) => Decision::Reject(Outcome::NotFound),
        (Op::Update { key, template, pre }, Some(cur)) => {
            if !holds(&pre, &cur) {
                return Decision::Reject(Outcome::Conflict(cur));
            }
            Decision::Write(event(
                key,
                EventKind::Updated,
                template.stamp(revision),
                Some(cur),
            ))
        }
        (Op::Delete { key, pre, last }, Some(cur)) => {
            if !holds(&pre, &cur) {
                return Decision::Reject(Outcome::Conflict(cur));
            }
            // The deleted object's last state carries the deletion's revision.
            let last = match last.map_or_else(|| stamp::prepare(cur.value.clone()), Ok) {
                Ok(t) => t.stamp(revision),
                Err(_) => cur.value.clone(),
            };
            Decision::Write(event(key, EventKind::Deleted, last, Some(cur)))
        }
    }
}

fn holds(pre: &Preconditions, cur: &Record) -> bool {
    if pre.revision.is_some_and(|r| r != cur.revision) {
        return false;
    }
    match &pre.uid {
        None => true,
        Some(uid) => stamp::uid(&cur.value).as_deref() == Some(uid.as_str()),
    }
}
