//! The streams of one HTTP/2 connection, run inside the connection's own task.
//!
//! hyper hands every HTTP/2 stream (the request's handler, then the piping of its response
//! body) to an executor. With tokio's, each stream is a task of its own: one watch event
//! fanned out to a thousand watches on one connection wakes a thousand tasks across the
//! workers, and they all contend for the connection's one stream table. Here the
//! connection's task polls its streams itself: waking a stream pushes it onto a ready list,
//! and the task polls the ready streams a turn at a time, the connection writing after
//! each turn, so that one event's frames to all of them leave in a few large writes and
//! the first of them leave early.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

type Stream = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Stream polls per poll of the connection's task, at most; then the connection writes
/// what they made and the task lets others run. Small enough that the first frames of one
/// event to a thousand watches leave while the rest are still being made; large enough
/// that they leave in a few large writes (64 frames are about one 64 KiB write).
const POLLS_PER_TURN: usize = 64;

struct Shared {
    /// Streams handed over since the runner last looked.
    new: Mutex<Vec<Stream>>,
    /// Slots of the streams woken since the runner last looked.
    ready: Mutex<Vec<usize>>,
    /// The connection's task.
    waker: AtomicWaker,
}

/// A stream's waker: queues its slot once until the stream is polled again.
struct Node {
    slot: usize,
    queued: AtomicBool,
    shared: Weak<Shared>,
}

impl Wake for Node {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            let first = {
                let mut ready = shared.ready.lock().expect("ready lock");
                ready.push(self.slot);
                ready.len() == 1
            };
            // Only the first of a burst wakes the runner, which takes the whole list: one
            // event to a thousand watches then costs the waker a thousand pushes and one
            // wake-up, and the runner finds them together rather than one per turn.
            if first {
                shared.waker.wake();
            }
        }
    }
}

/// The executor hyper spawns a connection's streams on.
#[derive(Clone)]
pub struct Exec(Arc<Shared>);

impl<F> hyper::rt::Executor<F> for Exec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        self.0.new.lock().expect("streams lock").push(Box::pin(fut));
        self.0.waker.wake();
    }
}

/// Runs the streams spawned on the paired [`Exec`]; poll it beside the connection (it
/// never ends by itself) and drop it with the connection.
pub struct Runner {
    shared: Arc<Shared>,
    slots: Vec<Option<(Stream, Arc<Node>, Waker)>>,
    free: Vec<usize>,
    /// Streams to poll, in the order they were woken: the ready list taken from `shared`
    /// and what the last turn left.
    batch: VecDeque<usize>,
}

/// A connection's executor and what runs the streams given to it.
pub fn pair() -> (Exec, Runner) {
    let shared = Arc::new(Shared {
        new: Mutex::new(Vec::new()),
        ready: Mutex::new(Vec::new()),
        waker: AtomicWaker::new(),
    });
    (
        Exec(shared.clone()),
        Runner {
            shared,
            slots: Vec::new(),
            free: Vec::new(),
            batch: VecDeque::new(),
        },
    )
}

impl Runner {
    /// Gives each new stream a slot and queues it for its first poll.
    fn admit(&mut self) {
        let new = std::mem::take(&mut *self.shared.new.lock().expect("streams lock"));
        for fut in new {
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            let node = Arc::new(Node {
                slot,
                queued: AtomicBool::new(true),
                shared: Arc::downgrade(&self.shared),
            });
            let waker = Waker::from(node.clone());
            self.slots[slot] = Some((fut, node, waker));
            self.batch.push_back(slot);
        }
    }
}

impl Future for Runner {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.shared.waker.register(cx.waker());
        let mut polls = 0;
        loop {
            this.admit();
            this.batch
                .extend(this.shared.ready.lock().expect("ready lock").drain(..));
            if this.batch.is_empty() {
                return Poll::Pending;
            }
            if polls >= POLLS_PER_TURN {
                // The rest waits for the next turn, after the connection has written.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            while polls < POLLS_PER_TURN {
                let Some(slot) = this.batch.pop_front() else {
                    break;
                };
                // A slot may have been freed (and even reused) since it was woken; polling
                // a stream that was not woken is harmless.
                let Some((fut, node, waker)) = this.slots.get_mut(slot).and_then(Option::as_mut)
                else {
                    continue;
                };
                node.queued.store(false, Ordering::Release);
                polls += 1;
                // A stream that panics ends alone (its peer sees it reset), as a task of
                // its own would, rather than taking the connection's other streams along.
                let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    fut.as_mut().poll(&mut Context::from_waker(waker))
                }));
                if !matches!(polled, Ok(Poll::Pending)) {
                    if polled.is_err() {
                        tracing::error!("a request's handler panicked; its stream was reset");
                    }
                    this.slots[slot] = None;
                    this.free.push(slot);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;

    #[tokio::test]
    async fn a_stream_that_panics_ends_alone() {
        let (exec, runner) = pair();
        let (tx, mut rx) = tokio::sync::mpsc::channel(10);
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        exec.execute(async move {
            let _ = go_rx.await;
            panic!("handler bug");
        });
        exec.execute(async move {
            tx.send("first").await.unwrap();
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tx.send("second").await.unwrap();
        });
        let run = tokio::spawn(runner);
        assert_eq!(rx.recv().await, Some("first"));
        go_tx.send(()).unwrap();
        assert_eq!(rx.recv().await, Some("second"));
        assert!(!run.is_finished(), "the runner went down with the stream");
        run.abort();
    }

    /// Counts the runner's wake-ups.
    struct Count(std::sync::atomic::AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_burst_wakes_the_runner_once_and_is_polled_a_turn_at_a_time() {
        let (exec, mut runner) = pair();
        let polled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let n = POLLS_PER_TURN * 2 + 10;
        for _ in 0..n {
            let (polled, mut go) = (polled.clone(), go_rx.clone());
            exec.execute(async move {
                polled.fetch_add(1, Ordering::SeqCst);
                let _ = go.wait_for(|go| *go).await;
                polled.fetch_add(1, Ordering::SeqCst);
            });
        }
        let count = Arc::new(Count(0.into()));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut turn = |expect: usize| {
            assert!(Pin::new(&mut runner).poll(&mut cx).is_pending());
            assert_eq!(polled.load(Ordering::SeqCst), expect);
        };
        // A turn polls at most POLLS_PER_TURN streams, then lets the connection write;
        // it wakes itself for the rest.
        turn(POLLS_PER_TURN);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        turn(POLLS_PER_TURN * 2);
        turn(n);
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        turn(n);
        // One event for every stream wakes the runner once.
        go_tx.send(true).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 3);
        turn(n + POLLS_PER_TURN);
        turn(n + POLLS_PER_TURN * 2);
        turn(2 * n);
    }

    #[tokio::test]
    async fn runs_what_it_is_given_and_what_wakes_again() {
        let (exec, runner) = pair();
        let (tx, mut rx) = tokio::sync::mpsc::channel(100);
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        for i in 0..50 {
            let tx = tx.clone();
            let mut go = go_rx.clone();
            exec.execute(async move {
                tx.send(i).await.unwrap();
                go.wait_for(|go| *go).await.unwrap();
                tx.send(100 + i).await.unwrap();
            });
        }
        drop(tx);
        let run = tokio::spawn(runner);
        let mut first: Vec<i32> = Vec::new();
        for _ in 0..50 {
            first.push(rx.recv().await.unwrap());
        }
        first.sort();
        assert_eq!(first, (0..50).collect::<Vec<_>>());
        go_tx.send(true).unwrap();
        let mut second = Vec::new();
        while let Some(i) = rx.recv().await {
            second.push(i);
        }
        second.sort();
        assert_eq!(second, (100..150).collect::<Vec<_>>());
        run.abort();
    }
}
