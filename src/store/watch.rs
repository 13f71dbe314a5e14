//! Watch fan-out: the hub that the committer publishes to, and [`Watch`], a stream of
//! events from a revision that replays history (memory first, then the on-disk log) and
//! then follows live commits.
//!
//! Live events go through one bounded broadcast ring: publishing costs the committer the
//! same whatever the number of watchers, and a watcher that falls a whole ring behind is
//! ended with [`WatchEvent::TooSlow`] instead of holding anything up.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::backend::Event;
use super::{Error, Result, Shared};

/// Events read from history per step of a replay.
const REPLAY_CHUNK: usize = 512;

pub(super) struct Hub {
    state: Mutex<HubState>,
}

struct HubState {
    /// The most recent events, oldest first, contiguous in revision.
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    /// `None` once the store is closed.
    tx: Option<broadcast::Sender<Arc<Event>>>,
    /// Revision of the last published event.
    last: u64,
}

impl Hub {
    pub(super) fn new(revision: u64, history_cap: usize, buffer: usize) -> Self {
        let (tx, _) = broadcast::channel(buffer.max(1));
        Self {
            state: Mutex::new(HubState {
                history: VecDeque::with_capacity(history_cap.min(4096)),
                history_cap,
                tx: Some(tx),
                last: revision,
            }),
        }
    }

    /// Hands committed events to every watcher, in revision order.
    pub(super) fn publish(&self, events: &[Arc<Event>]) {
        let mut s = self.state.lock().expect("hub lock");
        for e in events {
            if s.history.len() == s.history_cap {
                s.history.pop_front();
            }
            if s.history_cap > 0 {
                s.history.push_back(e.clone());
            }
            s.last = e.revision;
            if let Some(tx) = &s.tx {
                // An error only means nobody is watching right now.
                let _ = tx.send(e.clone());
            }
        }
    }

    /// A receiver of every event after the returned revision.
    fn subscribe(&self) -> Option<(broadcast::Receiver<Arc<Event>>, u64)> {
        let s = self.state.lock().expect("hub lock");
        s.tx.as_ref().map(|tx| (tx.subscribe(), s.last))
    }

    /// Up to `limit` events after `after`, if memory still holds the one right after it.
    fn recent(&self, after: u64, limit: usize) -> Option<Vec<Arc<Event>>> {
        let s = self.state.lock().expect("hub lock");
        let first = s.history.front()?.revision;
        if first > after + 1 {
            return None;
        }
        let skip = usize::try_from(after + 1 - first).ok()?;
        Some(s.history.iter().skip(skip).take(limit).cloned().collect())
    }

    /// Ends every watch once it has drained what was published.
    pub(super) fn close(&self) {
        self.state.lock().expect("hub lock").tx = None;
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
    /// The watcher fell too far behind the writers; the watch has ended. Re-list.
    TooSlow,
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
    rx: broadcast::Receiver<Arc<Event>>,
    prefix: String,
    /// Every event at or below this revision has been looked at.
    seen: u64,
    /// Events above this revision arrive through `rx`; those up to it come from history.
    live_from: u64,
    pending: VecDeque<Arc<Event>>,
    progress_every: Option<Duration>,
    quiet_since: Instant,
    done: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watchers.dec();
    }
}

impl Watch {
    pub(super) fn start(shared: &Arc<Shared>, opts: WatchOptions) -> Result<Self> {
        let (rx, last) = shared.hub.subscribe().ok_or(Error::Closed)?;
        shared.metrics.watchers.inc();
        Ok(Self {
            watchers: shared.metrics.watchers.clone(),
            shared: Arc::downgrade(shared),
            rx,
            prefix: opts.prefix,
            seen: opts.after.unwrap_or(last),
            live_from: last,
            pending: VecDeque::new(),
            progress_every: opts.progress_every,
            quiet_since: Instant::now(),
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
                self.seen = e.revision;
                if e.key.starts_with(&self.prefix) {
                    return Some(self.emit(e));
                }
                continue;
            }
            if self.seen < self.live_from {
                match self.replay().await {
                    Ok(()) => continue,
                    Err(end) => {
                        self.done = true;
                        return end;
                    }
                }
            }
            let received = match self.progress_every {
                None => self.rx.recv().await,
                Some(every) => {
                    match tokio::time::timeout_at(self.quiet_since + every, self.rx.recv()).await {
                        Ok(r) => r,
                        Err(_) => {
                            self.quiet_since = Instant::now();
                            return Some(WatchEvent::Progress(self.seen));
                        }
                    }
                }
            };
            match received {
                Ok(e) if e.revision <= self.seen => continue,
                Ok(e) => {
                    debug_assert_eq!(e.revision, self.seen + 1, "live events are contiguous");
                    self.seen = e.revision;
                    if e.key.starts_with(&self.prefix) {
                        return Some(self.emit(e));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.done = true;
                    return Some(WatchEvent::TooSlow);
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.done = true;
                    return None;
                }
            }
        }
    }

    fn emit(&mut self, e: Arc<Event>) -> WatchEvent {
        self.quiet_since = Instant::now();
        WatchEvent::Event(e)
    }

    /// Loads the next piece of history into `pending`, or says how the watch ends.
    async fn replay(&mut self) -> Result<(), Option<WatchEvent>> {
        let Some(shared) = self.shared.upgrade() else {
            return Err(None);
        };
        let compacted = shared.compacted();
        if self.seen < compacted {
            return Err(Some(WatchEvent::Compacted { compacted }));
        }
        let after = self.seen;
        let events = match shared.hub.recent(after, REPLAY_CHUNK) {
            Some(events) => events,
            None => {
                let backend = shared.backend.clone();
                drop(shared);
                let read = tokio::task::spawn_blocking(move || backend.events(after, REPLAY_CHUNK))
                    .await
                    .map_err(|_| None)?;
                match read {
                    Ok(events) => events.into_iter().map(Arc::new).collect(),
                    Err(e) => {
                        tracing::error!(error = %e, "watch: read event log");
                        return Err(None);
                    }
                }
            }
        };
        // History must continue exactly where the watch stands; anything else means it
        // was compacted away while we read.
        let contiguous = events
            .iter()
            .enumerate()
            .all(|(i, e)| e.revision == after + 1 + i as u64);
        if events.is_empty() || !contiguous {
            let compacted = self.shared.upgrade().map_or(after + 1, |s| s.compacted());
            return Err(Some(WatchEvent::Compacted { compacted }));
        }
        self.pending.extend(events);
        Ok(())
    }
}
