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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::time::Instant;

use super::backend::Event;
use super::{Error, Result, Shared};

/// Events read from history per step of a replay.
const REPLAY_CHUNK: usize = 512;

pub(super) struct Hub {
    state: Mutex<HubState>,
    /// Revision of the last published event. Stored after the prefixes' `shared_latest`, so
    /// that a watcher that reads it first and then its prefix's `shared_latest` misses
    /// nothing.
    last: AtomicU64,
    /// Set (under the lock) once the store has closed.
    closed: AtomicBool,
}

struct HubState {
    /// The most recent events, oldest first, contiguous in revision.
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    /// Live watchers by the key prefix they watch.
    waiting: HashMap<Arc<str>, Waiting>,
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

impl Hub {
    pub(super) fn new(revision: u64, history_cap: usize) -> Self {
        Self {
            state: Mutex::new(HubState {
                history: VecDeque::with_capacity(history_cap.min(4096)),
                history_cap,
                waiting: HashMap::new(),
            }),
            last: AtomicU64::new(revision),
            closed: AtomicBool::new(false),
        }
    }

    /// Records committed events (in revision order) and wakes the watchers they are for.
    pub(super) fn publish(&self, events: &[Arc<Event>]) {
        let Some(newest) = events.last() else {
            return;
        };
        let mut wake = Vec::new();
        {
            let mut s = self.state.lock().expect("hub lock");
            if s.history_cap > 0 {
                for e in events {
                    if s.history.len() == s.history_cap {
                        s.history.pop_front();
                    }
                    s.history.push_back(e.clone());
                }
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
        for waker in wake {
            waker.wake();
        }
    }

    /// Registers a live watcher of `prefix`; returns the revision it goes live after and
    /// the prefix's latest revision, which the hub keeps current while the watcher is in.
    fn join(&self, prefix: &Arc<str>, waker: &Arc<AtomicWaker>) -> Option<(u64, Arc<AtomicU64>)> {
        let mut s = self.state.lock().expect("hub lock");
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let last = self.last.load(Ordering::Acquire);
        let w = s.waiting.entry(prefix.clone()).or_insert_with(|| Waiting {
            touched: VecDeque::new(),
            complete_since: last,
            shared_latest: Arc::new(AtomicU64::new(last)),
            waiters: Vec::new(),
        });
        w.waiters.push(waker.clone());
        Some((last, w.shared_latest.clone()))
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
    fn live(&self, prefix: &str, seen: u64, into: &mut VecDeque<Arc<Event>>) -> Live {
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
    pending: VecDeque<Arc<Event>>,
    progress_every: Option<Duration>,
    quiet_since: Instant,
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
        let prefix: Arc<str> = opts.prefix.into();
        let waker = Arc::new(AtomicWaker::new());
        let (last, latest) = shared.hub.join(&prefix, &waker).ok_or(Error::Closed)?;
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
            pending: VecDeque::new(),
            progress_every: opts.progress_every,
            quiet_since: Instant::now(),
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
        if self.done {
            return None;
        }
        loop {
            if let Some(e) = self.pending.pop_front() {
                // A live read has already moved `seen` past what it queued.
                self.seen = self.seen.max(e.revision);
                if e.key.starts_with(&*self.prefix) {
                    return Some(self.emit(e));
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
                    match self.replay().await {
                        Ok(()) => continue,
                        Err(end) => {
                            self.done = true;
                            return end;
                        }
                    }
                }
                Live::Closed => {
                    self.done = true;
                    return None;
                }
                Live::CaughtUp(upto) => self.seen = upto,
            }
            if self.progress_due {
                self.progress_due = false;
                self.quiet_since = Instant::now();
                return Some(WatchEvent::Progress(self.seen));
            }
            match self.progress_every {
                None => self.wait().await,
                Some(every) => {
                    if tokio::time::timeout_at(self.quiet_since + every, self.wait())
                        .await
                        .is_err()
                    {
                        self.progress_due = true;
                    }
                }
            }
        }
    }

    /// Until the hub has something under this watch's prefix past what it has seen.
    async fn wait(&self) {
        std::future::poll_fn(|cx| {
            self.waker.register(cx.waker());
            match self.hub.caught_up(&self.latest, self.seen) {
                Some(Live::CaughtUp(_)) => std::task::Poll::Pending,
                _ => std::task::Poll::Ready(()),
            }
        })
        .await
    }

    fn emit(&mut self, e: Arc<Event>) -> WatchEvent {
        if self.progress_every.is_some() {
            self.quiet_since = Instant::now();
            self.progress_due = false;
        }
        WatchEvent::Event(e)
    }

    /// Loads the next piece of history into `pending`, or says how the watch ends.
    async fn replay(&mut self) -> Result<(), Option<WatchEvent>> {
        let Some(shared) = self.shared.upgrade() else {
            return Err(None);
        };
        match history(shared, self.seen).await {
            Ok(History::Events(events)) => {
                self.pending.extend(events);
                Ok(())
            }
            Ok(History::Compacted(compacted)) => Err(Some(WatchEvent::Compacted { compacted })),
            Err(e) => {
                tracing::error!(error = %e, "watch: read event log");
                Err(None)
            }
        }
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
