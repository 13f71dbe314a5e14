//! The work queue: keys, not objects. A key waiting is queued once however often it is
//! added; a key being worked on is never handed to a second worker, and is queued again
//! after `done` if it was added meanwhile. Failures are retried with per-key exponential
//! backoff (5 ms doubling to 1000 s, as client-go); `add_after` schedules a key for later,
//! once: a key already waiting keeps the earliest time asked for (as client-go), so a
//! controller that asks again on every change does not pile up timers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

const BACKOFF_FIRST: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1000);

#[derive(Default)]
struct State {
    ready: VecDeque<String>,
    /// Keys waiting in `ready` or to be re-queued when their worker is done.
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
    later: BinaryHeap<Reverse<(Instant, u64, String)>>,
    /// When each key in `later` is due; heap entries that do not match are superseded.
    waiting: HashMap<String, Instant>,
    seq: u64,
    shut: bool,
}

/// A work queue; cheap to clone.
#[derive(Clone, Default)]
pub struct Queue {
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
}

impl Queue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `key` (once).
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut st = self.state.lock().expect("queue lock");
        if st.shut || !st.dirty.insert(key.clone()) {
            return;
        }
        if !st.processing.contains(&key) {
            st.ready.push_back(key);
            drop(st);
            self.wake.notify_one();
        }
    }

    /// Queues `key` after `delay`, unless it already waits to be queued sooner.
    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let key = key.into();
        let at = Instant::now() + delay;
        let mut st = self.state.lock().expect("queue lock");
        if st.shut || st.waiting.get(&key).is_some_and(|due| *due <= at) {
            return;
        }
        st.waiting.insert(key.clone(), at);
        st.seq += 1;
        let seq = st.seq;
        st.later.push(Reverse((at, seq, key)));
        drop(st);
        // A sleeping worker may have to wake earlier than it planned.
        self.wake.notify_one();
    }

    /// Queues `key` again after its backoff, which doubles with each failure.
    pub fn retry(&self, key: &str) {
        let delay = {
            let mut st = self.state.lock().expect("queue lock");
            let n = st.failures.entry(key.to_string()).or_insert(0);
            let delay = backoff(*n);
            *n = n.saturating_add(1);
            delay
        };
        self.add_after(key, delay);
    }

    /// Clears `key`'s failure count.
    pub fn forget(&self, key: &str) {
        self.state.lock().expect("queue lock").failures.remove(key);
    }

    /// How many times `key` failed in a row.
    pub fn failures(&self, key: &str) -> u32 {
        self.state
            .lock()
            .expect("queue lock")
            .failures
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// The next key to work on; `None` once the queue is shut down.
    pub async fn next(&self) -> Option<String> {
        loop {
            let deadline = {
                let mut st = self.state.lock().expect("queue lock");
                if st.shut {
                    return None;
                }
                let now = Instant::now();
                while st
                    .later
                    .peek()
                    .is_some_and(|Reverse((at, _, _))| *at <= now)
                {
                    let Reverse((at, _, key)) = st.later.pop().expect("peeked");
                    if st.waiting.get(&key) != Some(&at) {
                        continue; // superseded by an earlier time
                    }
                    st.waiting.remove(&key);
                    if st.dirty.insert(key.clone()) && !st.processing.contains(&key) {
                        st.ready.push_back(key);
                    }
                }
                if let Some(key) = st.ready.pop_front() {
                    st.dirty.remove(&key);
                    st.processing.insert(key.clone());
                    if !st.ready.is_empty() {
                        // Let another worker take the next key.
                        self.wake.notify_one();
                    }
                    return Some(key);
                }
                st.later.peek().map(|Reverse((at, _, _))| *at)
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// The worker is done with `key`; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &str) {
        let mut st = self.state.lock().expect("queue lock");
        st.processing.remove(key);
        if st.dirty.contains(key) {
            st.ready.push_back(key.to_string());
            drop(st);
            self.wake.notify_one();
        }
    }

    /// Ends the queue: `next` returns `None` from now on.
    pub fn shut_down(&self) {
        self.state.lock().expect("queue lock").shut = true;
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    /// Keys waiting now (not counting those scheduled for later).
    pub fn len(&self) -> usize {
        self.state.lock().expect("queue lock").ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn backoff(failures: u32) -> Duration {
    BACKOFF_FIRST
        .checked_mul(1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX))
        .unwrap_or(BACKOFF_MAX)
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_is_queued_once_and_never_worked_on_twice_at_once() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let k = q.next().await.unwrap();
        assert_eq!(k, "a");
        // Added again while in progress: not handed out until done.
        q.add("a");
        assert_eq!(q.next().await.unwrap(), "b");
        let blocked = tokio::time::timeout(Duration::from_secs(1), q.next()).await;
        assert!(blocked.is_err(), "a key in progress was handed out again");
        q.done("a");
        assert_eq!(q.next().await.unwrap(), "a");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_exponentially_per_key() {
        let q = Queue::new();
        assert_eq!(backoff(0), Duration::from_millis(5));
        assert_eq!(backoff(1), Duration::from_millis(10));
        assert_eq!(backoff(10), Duration::from_millis(5120));
        assert_eq!(backoff(40), Duration::from_secs(1000));
        let start = Instant::now();
        for expected in [5u64, 10, 20, 40] {
            q.retry("k");
            assert_eq!(q.next().await.unwrap(), "k");
            q.done("k");
            let waited = start.elapsed();
            assert!(
                waited >= Duration::from_millis(expected),
                "retry came after {waited:?}, before {expected} ms"
            );
        }
        assert_eq!(q.failures("k"), 4);
        q.forget("k");
        assert_eq!(q.failures("k"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_waits_and_the_earliest_comes_first() {
        let q = Queue::new();
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(60));
        q.add_after("soon", Duration::from_secs(5));
        assert_eq!(q.next().await.unwrap(), "soon");
        assert!(start.elapsed() >= Duration::from_secs(5));
        assert!(start.elapsed() < Duration::from_secs(60));
        assert_eq!(q.next().await.unwrap(), "late");
        assert!(start.elapsed() >= Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_waits_once_for_the_earliest_time_asked() {
        let q = Queue::new();
        let start = Instant::now();
        q.add_after("k", Duration::from_secs(40));
        q.add_after("k", Duration::from_secs(50));
        q.add_after("k", Duration::from_secs(30));
        assert_eq!(q.next().await.unwrap(), "k");
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        q.done("k");
        let again = tokio::time::timeout(Duration::from_secs(60), q.next()).await;
        assert!(again.is_err(), "the later times were folded into the first");
        // Once it has fired, the key may wait again.
        q.add_after("k", Duration::from_secs(5));
        assert_eq!(q.next().await.unwrap(), "k");
        assert_eq!(start.elapsed(), Duration::from_secs(95));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_ends_waiting_workers() {
        let q = Queue::new();
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.next().await }
        });
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiting.await.unwrap(), None);
    }
}
