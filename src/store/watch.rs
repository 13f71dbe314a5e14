//! Watch fan-out: the hub that the committer publishes to, and [`Watch`], a stream of
//! events from a revision that replays history (memory first, then the on-disk log) and
//! then follows live commits.
//!
//! Live watchers wait in the hub by key prefix. A publish wakes only the watchers whose
//! prefix one of its events falls under, so a thousand open watches on other namespaces or
//! kinds cost an event nothing. Each prefix remembers the last revision that touched it:
//! a woken watcher reads just its own events from memory and skips the rest at once, and a
//! watcher that was never woken knows that nothing it missed was for it. A watcher that
//! falls behind what memory holds reads the on-disk log instead; it never holds up writers.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::time::Instant;

use super::backend::Event;
use super::{Error, Result, Shared};

/// Events read from history per step of a replay.
const REPLAY_CHUNK: usize = 512;

pub(super) struct Hub {
    state: Mutex<HubState>,
    /// Hands long wake lists to the waker thread; see [`Hub::wake`].
    waking: std::sync::OnceLock<Option<std::sync::mpsc::SyncSender<Vec<std::task::Waker>>>>,
    /// Revision of the last published event. Stored after the prefixes' `shared_latest`, so
    /// that a watcher that reads it first and then its prefix's `shared_latest` misses
    /// nothing.
    last: AtomicU64,
    /// Set (under the lock) once the store has closed.
    closed: AtomicBool,
    /// Bytes of every event published since the store opened (compaction's hint of how
    /// much the log grew).
    appended: AtomicU64,
}

struct HubState {
    /// The most recent events, oldest first, contiguous in revision.
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    /// Their bytes, and the most they may take (the newest event stays whatever it takes).
    history_bytes: u64,
    history_bytes_cap: u64,
    /// `history_bytes`, for `/metrics`.
    history_gauge: prometheus_client::metrics::gauge::Gauge,
    /// Live watchers by the key prefix they watch.
    waiting: HashMap<Arc<str>, Waiting>,
}

/// The bytes an event holds: its key, the object and the object before it.
pub(super) fn event_bytes(e: &Event) -> u64 {
    (e.key.len() + e.object.len() + e.prev.as_ref().map_or(0, |p| p.value.len())) as u64
}

/// Wake lists at least this long are handed to the waker thread (see [`Hub::wake`]).
const OFFLOAD_WAKES: usize = 32;

/// Starts the thread that wakes watchers for the hub; `None` if no thread can be made
/// (the hub then wakes them itself). It ends when the hub is dropped.
fn spawn_waker_thread() -> Option<std::sync::mpsc::SyncSender<Vec<std::task::Waker>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<std::task::Waker>>(16);
    let spawned = std::thread::Builder::new()
        .name("berth-store-wake".into())
        .spawn(move || {
            for wake in rx {
                wake.into_iter().for_each(std::task::Waker::wake);
            }
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the watch waker thread; waking inline");
            None
        }
    }
}

/// Revisions remembered per watched prefix.
const TOUCHED_CAP: usize = 4096;

/// The live watchers of one prefix.
struct Waiting {
    /// The latest revisions published under the prefix, oldest first ...
    touched: VecDeque<u64>,
    /// ... which are all of them after this revision.
    complete_since: u64,
    /// `latest()`, for the watchers to read without the lock.
    shared_latest: Arc<AtomicU64>,
    waiters: Vec<Arc<AtomicWaker>>,
}

impl Waiting {
    fn latest(&self) -> u64 {
        self.touched.back().copied().unwrap_or(self.complete_since)
    }
}

/// A watcher's queue of events to deliver. A live watcher mostly holds one event at a
/// time: that one is kept inline, so the common case touches no buffer of its own.
#[derive(Default)]
struct Pending {
    first: Option<Arc<Event>>,
    rest: VecDeque<Arc<Event>>,
}

impl Pending {
    fn push_back(&mut self, e: Arc<Event>) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(e);
        } else {
            self.rest.push_back(e);
        }
    }

    fn pop_front(&mut self) -> Option<Arc<Event>> {
        self.first.take().or_else(|| self.rest.pop_front())
    }

    fn extend(&mut self, events: impl IntoIterator<Item = Arc<Event>>) {
        for e in events {
            self.push_back(e);
        }
    }
}

/// What a live watcher finds in memory.
enum Live {
    /// Nothing more for it up to this revision.
    CaughtUp(u64),
    /// Its events up to this revision are queued.
    Filled(u64),
    /// Nothing for it up to this revision, but memory no longer holds what comes next:
    /// read the log from there.
    Behind(u64),
    /// Caught up, and the store has closed.
    Closed,
}

/// What a watcher that has seen everything under its prefix up to `seen` learns: the
/// hub's last revision, as far as it has looked, or that the store has closed.
fn quiet(closed: bool, last: u64, seen: u64) -> Live {
    if closed {
        Live::Closed
    } else {
        Live::CaughtUp(last.max(seen))
    }
}

/// What a watcher that joins the hub learns.
struct Joined {
    /// The revision it goes live after.
    last: u64,
    /// The prefix's latest revision, kept current while the watcher is in.
    latest: Arc<AtomicU64>,
    /// The hub's copy of the prefix.
    prefix: Arc<str>,
}

impl Hub {
    pub(super) fn new(
        revision: u64,
        history_cap: usize,
        history_bytes_cap: u64,
        history_gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> Self {
        Self {
            state: Mutex::new(HubState {
                history: VecDeque::with_capacity(history_cap.min(4096)),
                history_cap,
                history_bytes: 0,
                history_bytes_cap,
                history_gauge,
                waiting: HashMap::new(),
            }),
            waking: std::sync::OnceLock::new(),
            last: AtomicU64::new(revision),
            closed: AtomicBool::new(false),
            appended: AtomicU64::new(0),
        }
    }

    /// Bytes of every event published since the store opened.
    pub(super) fn appended(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
    }

    /// Wakes the watchers a publish is for. A long list, published from a thread of the
    /// async runtime (a writer that committed on its own), goes to the waker thread: a
    /// task woken from a runtime thread waits in that thread's own slot until the writer's
    /// task yields, whereas one woken from outside can start at once on an idle runtime
    /// thread. The writer's answer then does not wait behind the start of the fan-out,
    /// nor the fan-out behind the answer.
    fn wake(&self, mut wake: Vec<std::task::Waker>) {
        if wake.len() >= OFFLOAD_WAKES
            && tokio::runtime::Handle::try_current().is_ok()
            && let Some(tx) = self.waking.get_or_init(spawn_waker_thread)
        {
            match tx.try_send(wake) {
                Ok(()) => return,
                // Behind or gone: wake here rather than wait.
                Err(
                    std::sync::mpsc::TrySendError::Full(w)
                    | std::sync::mpsc::TrySendError::Disconnected(w),
                ) => wake = w,
            }
        }
        wake.into_iter().for_each(std::task::Waker::wake);
    }

    /// Drops from memory the events committed before `cutoff_ms` (they stay in the
    /// on-disk log, where a watch that needs them reads them), so that memory goes back
    /// after a burst of writes.
    /// Returns the bytes dropped.
    pub(super) fn expire(&self, cutoff_ms: u64) -> u64 {
        let mut s = self.state.lock().expect("hub lock");
        let held = s.history_bytes;
        let before = s.history.len();
        while s.history.front().is_some_and(|e| e.time_ms < cutoff_ms) {
            let gone = s.history.pop_front().expect("not empty");
            s.history_bytes -= event_bytes(&gone);
        }
        if s.history.len() != before {
            if s.history.is_empty() {
                s.history = VecDeque::new();
            } else {
                s.history.shrink_to_fit();
            }
            let now = s.history_bytes as i64;
            s.history_gauge.set(now);
        }
        held - s.history_bytes
    }

    /// Records committed events (in revision order) and wakes the watchers they are for.
    pub(super) fn publish(&self, events: &[Arc<Event>]) {
        let Some(newest) = events.last() else {
            return;
        };
        let appended: u64 = events.iter().map(|e| event_bytes(e)).sum();
        self.appended.fetch_add(appended, Ordering::Relaxed);
        let mut wake = Vec::new();
        {
            let mut s = self.state.lock().expect("hub lock");
            if s.history_cap > 0 {
                for e in events {
                    s.history_bytes += event_bytes(e);
                    s.history.push_back(e.clone());
                    while s.history.len() > s.history_cap
                        || (s.history_bytes > s.history_bytes_cap && s.history.len() > 1)
                    {
                        let gone = s.history.pop_front().expect("not empty");
                        s.history_bytes -= event_bytes(&gone);
                    }
                }
                let held = s.history_bytes as i64;
                s.history_gauge.set(held);
            }
            for (prefix, w) in s.waiting.iter_mut() {
                let mut hit = false;
                for e in events.iter().filter(|e| e.key.starts_with(&**prefix)) {
                    if w.touched.len() == TOUCHED_CAP {
                        w.complete_since = w.touched.pop_front().expect("full");
                    }
                    w.touched.push_back(e.revision);
                    hit = true;
                }
                if hit {
                    w.shared_latest.store(w.latest(), Ordering::Release);
                    wake.extend(w.waiters.iter().filter_map(|waker| waker.take()));
                }
            }
            self.last.store(newest.revision, Ordering::Release);
        }
        self.wake(wake);
    }

    /// Registers a live watcher of `prefix`. The watchers of one prefix share the hub's
    /// copy of it (and its cache line) rather than each reading a copy of its own.
    fn join(&self, prefix: &str, waker: &Arc<AtomicWaker>) -> Option<Joined> {
        let mut s = self.state.lock().expect("hub lock");
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let last = self.last.load(Ordering::Acquire);
        let prefix = match s.waiting.get_key_value(prefix) {
            Some((key, _)) => key.clone(),
            None => Arc::from(prefix),
        };
        let w = s.waiting.entry(prefix.clone()).or_insert_with(|| Waiting {
            touched: VecDeque::new(),
            complete_since: last,
            shared_latest: Arc::new(AtomicU64::new(last)),
            waiters: Vec::new(),
        });
        w.waiters.push(waker.clone());
        Some(Joined {
            last,
            latest: w.shared_latest.clone(),
            prefix,
        })
    }

    /// Without the lock: `CaughtUp` or `Closed` when nothing under the prefix (whose latest
    /// revision is `latest`) is past `seen`; `None` when there is something to read.
    fn caught_up(&self, latest: &AtomicU64, seen: u64) -> Option<Live> {
        // In this order: a publish stores the prefixes' shared latest before `last`, and the
        // close flag after every publish.
        let closed = self.closed.load(Ordering::Acquire);
        let last = self.last.load(Ordering::Acquire);
        (latest.load(Ordering::Acquire) <= seen).then(|| quiet(closed, last, seen))
    }

    fn leave(&self, prefix: &str, waker: &Arc<AtomicWaker>) {
        let mut s = self.state.lock().expect("hub lock");
        if let Some(w) = s.waiting.get_mut(prefix) {
            w.waiters.retain(|x| !Arc::ptr_eq(x, waker));
            if w.waiters.is_empty() {
                s.waiting.remove(prefix);
            }
        }
    }

    /// Queues a live watcher's next events after `seen` into `into`.
    fn live(&self, prefix: &str, seen: u64, into: &mut Pending) -> Live {
        let s = self.state.lock().expect("hub lock");
        let last = self.last.load(Ordering::Acquire);
        let Some(w) = s.waiting.get(prefix) else {
            return Live::Behind(seen);
        };
        let latest = w.latest();
        if latest <= seen {
            // Nothing after `seen` is under the prefix.
            return quiet(self.closed.load(Ordering::Acquire), last, seen);
        }
        if seen < w.complete_since {
            return Live::Behind(seen);
        }
        // The first revision after `seen` under the prefix; none before it is.
        let next = w.touched[w.touched.partition_point(|r| *r <= seen)];
        let Some(first) = s.history.front().map(|e| e.revision) else {
            return Live::Behind(next - 1);
        };
        if first > next {
            return Live::Behind(next - 1);
        }
        let skip = usize::try_from(next - first).unwrap_or(usize::MAX);
        let mut upto = next - 1;
        for e in s.history.iter().skip(skip).take(REPLAY_CHUNK) {
            if e.revision > latest {
                break;
            }
            upto = e.revision;
            if e.key.starts_with(prefix) {
                into.push_back(e.clone());
            }
        }
        if upto == latest {
            // The rest is for others.
            upto = last;
        }
        Live::Filled(upto)
    }

    /// Up to `limit` events after `after`, if memory holds the one right after it.
    /// `None` also past the newest event in memory: a commit is on disk and in the
    /// cache a moment before it is published here, and a reader that saw it in the
    /// cache must find it on disk rather than read its absence as compaction.
    fn recent(&self, after: u64, limit: usize) -> Option<Vec<Arc<Event>>> {
        let s = self.state.lock().expect("hub lock");
        let first = s.history.front()?.revision;
        if first > after + 1 || s.history.back()?.revision <= after {
            return None;
        }
        let skip = usize::try_from(after + 1 - first).ok()?;
        Some(s.history.iter().skip(skip).take(limit).cloned().collect())
    }

    /// Ends every watch once it has drained what was published.
    pub(super) fn close(&self) {
        let mut wake = Vec::new();
        {
            let s = self.state.lock().expect("hub lock");
            self.closed.store(true, Ordering::Release);
            for w in s.waiting.values() {
                wake.extend(w.waiters.iter().filter_map(|waker| waker.take()));
            }
        }
        for waker in wake {
            waker.wake();
        }
    }
}

/// What a [`Watch`] yields.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    Event(Arc<Event>),
    /// Every matching event up to this revision has been delivered (sent when the watch
    /// has been quiet for its progress interval).
    Progress(u64),
    /// The requested history is gone; the watch has ended. Re-list and watch again.
    Compacted {
        compacted: u64,
    },
}

/// How to watch.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// Only keys that start with this prefix.
    pub prefix: String,
    /// Events after this revision; `None` means from now on.
    pub after: Option<u64>,
    /// Yield [`WatchEvent::Progress`] after this long without a matching event.
    pub progress_every: Option<Duration>,
}

/// A stream of committed changes, exactly once each and in revision order.
///
/// [`Watch::poll_next`] is a plain state machine rather than an `async fn`: a response
/// body polls it directly, once per event, with nothing allocated or moved per event.
pub struct Watch {
    watchers: prometheus_client::metrics::gauge::Gauge,
    shared: Weak<Shared>,
    hub: Arc<Hub>,
    prefix: Arc<str>,
    /// What the hub wakes when an event under the prefix is published.
    waker: Arc<AtomicWaker>,
    /// The latest revision published under the prefix, kept by the hub.
    latest: Arc<AtomicU64>,
    /// Every event at or below this revision has been looked at.
    seen: u64,
    /// Events above this revision are live: the hub tells this watch of them. Those up
    /// to it are replayed from history.
    live_from: u64,
    /// Events to deliver, in revision order.
    pending: Pending,
    /// A read of history (memory or the on-disk log) in progress.
    replaying: Option<Pin<Box<dyn Future<Output = Result<History>> + Send>>>,
    progress_every: Option<Duration>,
    quiet_since: Instant,
    /// When the progress interval runs out, once armed.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The progress interval has passed: report progress once caught up.
    progress_due: bool,
    done: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watchers.dec();
        self.hub.leave(&self.prefix, &self.waker);
    }
}

impl Watch {
    pub(super) fn start(shared: &Arc<Shared>, opts: WatchOptions) -> Result<Self> {
        let waker = Arc::new(AtomicWaker::new());
        let Joined {
            last,
            latest,
            prefix,
        } = shared.hub.join(&opts.prefix, &waker).ok_or(Error::Closed)?;
        shared.metrics.watchers.inc();
        Ok(Self {
            watchers: shared.metrics.watchers.clone(),
            shared: Arc::downgrade(shared),
            hub: shared.hub.clone(),
            prefix,
            waker,
            latest,
            seen: opts.after.unwrap_or(last),
            live_from: last,
            pending: Pending::default(),
            replaying: None,
            progress_every: opts.progress_every,
            quiet_since: Instant::now(),
            timer: None,
            progress_due: false,
            done: false,
        })
    }

    /// The revision up to which this watch has looked at every event.
    pub fn revision(&self) -> u64 {
        self.seen
    }

    /// The next event; `None` once the store has closed or the watch has ended.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next event; `Ready(None)` once the store has closed or the watch has
    /// ended.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(read) = &mut self.replaying {
                let read = std::task::ready!(read.as_mut().poll(cx));
                self.replaying = None;
                match read {
                    Ok(History::Events(events)) => self.pending.extend(events),
                    Ok(History::Compacted(compacted)) => {
                        self.done = true;
                        return Poll::Ready(Some(WatchEvent::Compacted { compacted }));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "watch: read event log");
                        self.done = true;
                        return Poll::Ready(None);
                    }
                }
            }
            if let Some(e) = self.pending.pop_front() {
                // A live read has already moved `seen` past what it queued.
                self.seen = self.seen.max(e.revision);
                if e.key.starts_with(&*self.prefix) {
                    return Poll::Ready(Some(self.emit(e)));
                }
                continue;
            }
            let live = if self.seen < self.live_from {
                Live::Behind(self.seen)
            } else {
                match self.hub.caught_up(&self.latest, self.seen) {
                    Some(live) => live,
                    None => self.hub.live(&self.prefix, self.seen, &mut self.pending),
                }
            };
            match live {
                Live::Filled(upto) => {
                    self.seen = upto;
                    continue;
                }
                Live::Behind(from) => {
                    self.seen = from;
                    let Some(shared) = self.shared.upgrade() else {
                        self.done = true;
                        return Poll::Ready(None);
                    };
                    self.replaying = Some(Box::pin(history(shared, from)));
                    continue;
                }
                Live::Closed => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Live::CaughtUp(upto) => self.seen = upto,
            }
            if self.progress_due {
                self.progress_due = false;
                self.quiet_since = Instant::now();
                return Poll::Ready(Some(WatchEvent::Progress(self.seen)));
            }
            // Wait until the hub has something under the prefix past what we have seen
            // (looking once more after registering, so that no publish slips between).
            self.waker.register(cx.waker());
            if !matches!(
                self.hub.caught_up(&self.latest, self.seen),
                Some(Live::CaughtUp(_))
            ) {
                continue;
            }
            if let Some(every) = self.progress_every {
                let due = self.quiet_since + every;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                if timer.deadline() != due {
                    timer.as_mut().reset(due);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    self.progress_due = true;
                    continue;
                }
            }
            return Poll::Pending;
        }
    }

    fn emit(&mut self, e: Arc<Event>) -> WatchEvent {
        if self.progress_every.is_some() {
            self.quiet_since = Instant::now();
            self.progress_due = false;
        }
        WatchEvent::Event(e)
    }
}

/// A piece of history, as [`history`] reads it.
pub(super) enum History {
    /// The events right after the revision asked for, contiguous; never empty.
    Events(Vec<Arc<Event>>),
    /// That history is gone: compacted at and below this revision.
    Compacted(u64),
}

/// The next events after revision `after` (up to one chunk), from memory or else the
/// on-disk log. Asking past the last revision reads as compacted: callers ask only for
/// history they know exists.
pub(super) async fn history(shared: Arc<Shared>, after: u64) -> Result<History> {
    let compacted = shared.compacted();
    if after < compacted {
        return Ok(History::Compacted(compacted));
    }
    let events = match shared.hub.recent(after, REPLAY_CHUNK) {
        Some(events) => events,
        None => {
            let backend = shared.backend.clone();
            tokio::task::spawn_blocking(move || backend.events(after, REPLAY_CHUNK))
                .await
                .map_err(|_| Error::Closed)??
                .into_iter()
                .map(Arc::new)
                .collect()
        }
    };
    // History must continue exactly where the caller stands; anything else means it was
    // compacted away while we read.
    let contiguous = events
        .iter()
        .enumerate()
        .all(|(i, e)| e.revision == after + 1 + i as u64);
    if events.is_empty() || !contiguous {
        return Ok(History::Compacted(shared.compacted()));
    }
    Ok(History::Events(events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventKind;

    fn event(revision: u64) -> Arc<Event> {
        Arc::new(Event {
            revision,
            key: "/k".into(),
            kind: EventKind::Created,
            object: bytes::Bytes::new(),
            prev: None,
            time_ms: 0,
        })
    }

    #[test]
    fn pending_keeps_revision_order_across_its_inline_slot() {
        let mut q = Pending::default();
        let mut out = Vec::new();
        q.push_back(event(1));
        q.push_back(event(2));
        out.push(q.pop_front().unwrap().revision);
        // The inline slot is free, but 2 is still queued: 3 must come after it.
        q.push_back(event(3));
        q.extend([event(4), event(5)]);
        while let Some(e) = q.pop_front() {
            out.push(e.revision);
        }
        assert_eq!(out, [1, 2, 3, 4, 5]);
        q.push_back(event(6));
        assert!(q.rest.is_empty(), "a lone event stays inline");
        assert_eq!(q.pop_front().unwrap().revision, 6);
        assert!(q.pop_front().is_none());
    }
}
