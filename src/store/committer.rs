//! The committer: the one owner of the write path. It takes every write waiting in its
//! queue, checks preconditions against the cache (and the batch so far), assigns
//! revisions, persists the batch with one atomic, durable commit (group commit), then
//! updates the cache, publishes the events in revision order and acknowledges.
//!
//! The committer thread runs it for the writes in its queue. A write that finds the store
//! quiet runs it on its own thread instead, sparing two thread wake-ups ([`WritePath`]).
//!
//! The committer runs on a thread of its own and times real disk writes: wall-clock time
//! (`std::time::Instant`) is what it measures.
#![allow(clippy::disallowed_types)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

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
    path: Arc<WritePath>,
    rx: mpsc::Receiver<Request>,
    max_batch: usize,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("berth-store-commit".into())
        .spawn(move || run(&path, rx, max_batch))
        .map_err(|source| Error::Io {
            context: "start the store's committer thread".into(),
            source,
        })
}

/// The committer thread: commits what waits in the queue, a batch at a time.
fn run(path: &WritePath, mut rx: mpsc::Receiver<Request>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let mut committer = path.committer.lock().expect("committer lock");
        if let Some(close) = path.commit(&mut committer, &mut batch) {
            drop(committer);
            rx.close();
            // Answer writes that raced with the close.
            while let Ok(r) = rx.try_recv() {
                if let Request::Write { reply, .. } = r {
                    let _ = reply.send(Err(Error::Closed));
                }
            }
            let _ = close.send(());
            return;
        }
    }
}

/// A commit that holds its thread longer than this (a slow disk's flush) is better left to
/// the committer thread than done on a thread of the async runtime.
const QUICK_COMMIT: Duration = Duration::from_millis(2);

/// The write path: the committer's state, which one thread at a time holds to commit:
/// the committer thread for a batch from its queue, or a writer that found the store quiet.
pub(super) struct WritePath {
    committer: Mutex<Committer>,
    /// Writes submitted so far. A write that sees it move while it yields was not alone.
    submitted: AtomicU64,
    /// The last commit was of one write, and quick.
    quiet: AtomicBool,
}

impl WritePath {
    /// `wake_bytes`: bytes of new history after which compaction is woken (0: never).
    pub(super) fn new(shared: Arc<Shared>, revision: u64, quota: u64, wake_bytes: u64) -> Self {
        Self {
            committer: Mutex::new(Committer {
                shared,
                revision,
                last_time: 0,
                quota,
                wake_bytes,
                woken_at: 0,
                closed: false,
            }),
            submitted: AtomicU64::new(0),
            quiet: AtomicBool::new(true),
        }
    }

    /// Commits `op` on the calling thread when the store is quiet, and gives it back
    /// otherwise; `queued` tells whether writes wait in the committer thread's queue.
    ///
    /// Handing a lone write to the committer thread and being woken by it again costs
    /// two thread wake-ups, which on a small machine take about as long as the disk's
    /// flush. Writes that come together, from concurrent requests or several from one
    /// task, still go to the queue and share one flush: a write yields once first, and
    /// leaves the commit to the committer thread if any other write came meanwhile.
    pub(super) async fn commit_if_quiet(
        &self,
        op: Op,
        queued: impl Fn() -> bool,
    ) -> Result<Result<Outcome>, Op> {
        let ticket = self.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        if queued() || !self.quiet.load(Ordering::Acquire) {
            return Err(op);
        }
        tokio::task::yield_now().await;
        if self.submitted.load(Ordering::Acquire) != ticket
            || queued()
            || !self.quiet.load(Ordering::Acquire)
        {
            return Err(op);
        }
        let mut committer = match self.committer.try_lock() {
            Ok(c) => c,
            Err(TryLockError::WouldBlock) => return Err(op),
            Err(TryLockError::Poisoned(_)) => return Ok(Err(Error::Closed)),
        };
        if committer.closed {
            return Ok(Err(Error::Closed));
        }
        let (reply, mut outcome) = oneshot::channel();
        let close = self.commit(&mut committer, &mut vec![Request::Write { op, reply }]);
        debug_assert!(close.is_none(), "a close only comes through the queue");
        Ok(outcome.try_recv().unwrap_or(Err(Error::Closed)))
    }

    /// Commits `batch` and notes whether the store is quiet; returns the reply of a close
    /// request found in it.
    fn commit(
        &self,
        committer: &mut Committer,
        batch: &mut Vec<Request>,
    ) -> Option<oneshot::Sender<()>> {
        let lone = batch.len() == 1;
        let started = Instant::now();
        let close = committer.commit(batch);
        self.quiet
            .store(lone && started.elapsed() < QUICK_COMMIT, Ordering::Release);
        close
    }
}

struct Committer {
    shared: Arc<Shared>,
    revision: u64,
    last_time: u64,
    /// Bytes on disk past which only deletions are taken (0: no quota).
    quota: u64,
    /// Bytes of history after which compaction is woken rather than left to its tick, so
    /// that large writes never take the log far past its bound (0: never).
    wake_bytes: u64,
    /// The hub's published bytes when compaction was last woken.
    woken_at: u64,
    /// A close was committed: no more writes.
    closed: bool,
}

impl Committer {
    /// Commits one batch; returns the reply of a close request found in it.
    fn commit(&mut self, batch: &mut Vec<Request>) -> Option<oneshot::Sender<()>> {
        let mut close = None;
        let mut overlay: HashMap<Arc<str>, Option<Record>> = HashMap::new();
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut replies = Vec::with_capacity(batch.len());
        let time_ms = now_ms().max(self.last_time);
        let mut revision = self.revision;
        let used = self.shared.backend.disk_bytes();
        self.shared.metrics.disk_bytes.set(used as i64);
        let over_quota = (self.quota > 0 && used >= self.quota).then_some(Error::Quota {
            used,
            quota: self.quota,
        });
        if over_quota.is_some() {
            self.shared.compact_now.notify_one();
        }
        for request in batch.drain(..) {
            let (op, reply) = match request {
                Request::Close { reply } => {
                    close = Some(reply);
                    self.closed = true;
                    continue;
                }
                Request::Write { op, reply } => (op, reply),
            };
            if let Some(over) = &over_quota
                && !matches!(op, Op::Delete { .. })
            {
                let _ = reply.send(Err(over.duplicate()));
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
                // Nothing of the batch is in the log (the backend clears a failed write), so
                // its revisions are free again and later writes may go ahead.
                tracing::error!(error = %e, "store commit failed");
                for (reply, _) in replies {
                    let _ = reply.send(Err(e.duplicate()));
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
            // The hub has just counted the bytes it published.
            let appended = self.shared.hub.appended();
            if self.wake_bytes > 0 && appended - self.woken_at >= self.wake_bytes {
                self.woken_at = appended;
                self.shared.compact_now.notify_one();
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Config, Store};

    fn op(name: &str) -> Op {
        let key = format!("/configmaps/default/{name}");
        let value = serde_json::to_vec(&serde_json::json!({
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
        }))
        .unwrap();
        Op::Create {
            template: crate::store::prepare(&key, value.into()).unwrap(),
            key: Arc::from(key),
        }
    }

    /// Group commits so far, from the store's metrics.
    fn commits(store: &Store) -> u64 {
        let mut registry = prometheus_client::registry::Registry::default();
        store.metrics().register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("berth_store_commit_batch_size_count "))
            .unwrap()
            .parse()
            .unwrap()
    }

    #[tokio::test]
    #[expect(
        clippy::await_holding_lock,
        reason = "the held lock stands for a commit under way"
    )]
    async fn a_lone_write_on_a_quiet_store_is_committed_by_its_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(Config::new(dir.path())).await.unwrap();
        let path = &store.write_path;
        let before = store.revision();
        let Ok(Ok(Outcome::Written(r))) = path.commit_if_quiet(op("a"), || false).await else {
            panic!("a lone write on a quiet store was not committed by its writer");
        };
        assert_eq!(r.revision, before + 1);
        assert!(store.get("/configmaps/default/a").is_some());

        // Writes waiting in the queue, or a slow last commit, leave it to the committer.
        assert!(path.commit_if_quiet(op("b"), || true).await.is_err());
        path.quiet.store(false, Ordering::Release);
        assert!(path.commit_if_quiet(op("b"), || false).await.is_err());
        path.quiet.store(true, Ordering::Release);
        // So does a commit under way.
        let held = path.committer.lock().unwrap();
        assert!(path.commit_if_quiet(op("b"), || false).await.is_err());
        drop(held);
        assert_eq!(store.revision(), before + 1);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn writes_from_one_task_are_not_committed_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(Config::new(dir.path())).await.unwrap();
        let path = &store.write_path;
        // The first sees the second arrive while it yields, and leaves the commit to the
        // committer thread (the second would find it queued there).
        let (a, _) = tokio::join!(
            path.commit_if_quiet(op("a"), || false),
            path.commit_if_quiet(op("b"), || false),
        );
        assert!(
            a.is_err(),
            "the first of two writes from one task was committed alone"
        );

        // Through the store: they share the committer thread's flushes.
        let before = commits(&store);
        let writes = (0..32).map(|i| {
            let store = store.clone();
            async move {
                store
                    .create(&format!("/configmaps/default/w{i}"), op_bytes(i))
                    .await
            }
        });
        for w in futures_util::future::join_all(writes).await {
            assert!(matches!(w.unwrap(), Outcome::Written(_)));
        }
        // Committed inline, they would take 32. How many batches the committer thread
        // makes depends on when the sending task is preempted: leave room for a busy
        // machine.
        let flushes = commits(&store) - before;
        assert!(
            flushes <= 16,
            "32 writes from one task took {flushes} commits"
        );
        store.close().await.unwrap();
    }

    fn op_bytes(i: usize) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "kind": "ConfigMap",
            "metadata": {"name": format!("w{i}"), "namespace": "default"},
        }))
        .unwrap()
    }
}
