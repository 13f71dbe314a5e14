//! The controller runtime: the [`Controller`] builder every controller is wired with (what
//! it watches and how a change maps to the keys it reconciles, the wait for full caches,
//! the workers and what they do with a reconcile's outcome), in the spirit of
//! kube-runtime's `Controller::new(..).owns(..).watches(..).run(..)`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Queue;
use super::claim::{OwnerKind, is_deleting};
use super::expectations::Expectations;
use crate::client::informer::{Change, Informer};
use crate::client::{self, Client};
use crate::supervisor::Supervisor;
use crate::types::labels;
use serde_json::Value;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the key is added again.
    Done,
    /// Look again after this long (a timeout that no watch can announce).
    RequeueAfter(Duration),
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] client::Error),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `obj` as its k8s-openapi type (or a typed view of a custom kind), decoded once at a
/// reconcile's entry so that the rest reads typed fields, not JSON paths where a typo
/// reads nothing. An object the server stored always decodes; one that does not is a
/// failure of its key, named with the object.
pub fn decode<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<T> {
    T::deserialize(obj).map_err(|e| {
        Error::Other(format!(
            "{} {}: cannot be read as {}: {e}",
            obj["kind"].as_str().unwrap_or("object"),
            client::key_of(obj),
            std::any::type_name::<T>()
                .rsplit("::")
                .next()
                .unwrap_or_default(),
        ))
    })
}

/// What the workers do with a key whose reconcile lost a race (a write answered 409
/// Conflict: somebody wrote first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Look again soon, once the caches have caught up: the first retry waits 5 ms,
    /// repeats back off. Not worth a warning.
    RetrySoon,
    /// As any other failure: retried with the key's backoff, and logged.
    Backoff,
}

/// A future that resolves once something a controller needs before its first reconcile
/// is ready (beyond its informers' first lists).
pub type Ready = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One controller's wiring. Built by saying what it reconciles, owns and watches, then
/// [`Controller::run`] under the supervisor.
#[must_use = "a controller does nothing until it runs"]
pub struct Controller {
    name: &'static str,
    queue: Queue,
    /// Informers whose first list must be in before the first reconcile: a controller
    /// acting on a half-filled cache would create what exists or miss what it must wait
    /// for.
    informers: Vec<Informer>,
    ready: Vec<Arc<dyn Fn() -> Ready + Send + Sync>>,
    workers: usize,
    on_conflict: OnConflict,
}

impl Controller {
    /// A controller named `name` (its tasks' and log lines' name), with a queue of its
    /// own and one worker.
    pub fn new(name: &'static str) -> Self {
        Controller {
            name,
            queue: Queue::new(),
            informers: Vec::new(),
            ready: Vec::new(),
            workers: 1,
            on_conflict: OnConflict::RetrySoon,
        }
    }

    /// Feeds the controller from `queue` instead of a queue of its own (one its
    /// reconciler also adds to).
    pub fn with_queue(mut self, queue: Queue) -> Self {
        self.queue = queue;
        self
    }

    /// Its queue, for a reconciler that queues keys itself.
    pub fn queue(&self) -> Queue {
        self.queue.clone()
    }

    /// Reconciles the objects of `primary`: each change of one queues its key.
    pub fn reconciles(self, primary: &Informer) -> Self {
        self.watches(primary, |change, queue| {
            queue.add(client::key_of(change.object()))
        })
    }

    /// [`Controller::reconciles`], and a deleted object's `expectations` are forgotten.
    pub fn reconciles_expecting(self, primary: &Informer, expectations: &Expectations) -> Self {
        let expectations = expectations.clone();
        self.watches(primary, move |change, queue| {
            let key = client::key_of(change.object());
            if let Change::Deleted(_) = change {
                expectations.forget(&key);
            }
            queue.add(key);
        })
    }

    /// `children` are controlled by objects of `owner` (their controller
    /// ownerReference): a child's change queues the key of its controller, and of the
    /// one it had before when that changed.
    pub fn owns(self, children: &Informer, owner: OwnerKind) -> Self {
        self.watches(children, move |change, queue| {
            to_owners(
                change,
                queue,
                owner,
                None::<fn(&Value) -> Vec<String>>,
                None,
            )
        })
    }

    /// [`Controller::owns`], and an orphan child (no controller) that is added, or
    /// updated in its labels or just released, queues the owners `matching` names: those
    /// whose selector may adopt it.
    pub fn owns_or_adopts(
        self,
        children: &Informer,
        owner: OwnerKind,
        matching: impl Fn(&Value) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.watches(children, move |change, queue| {
            to_owners(change, queue, owner, Some(&matching), None)
        })
    }

    /// [`Controller::owns_or_adopts`] for a controller that counts its own writes
    /// (kube's `ControllerExpectations`): a child added, one whose deletion starts, and
    /// one deleted without that being seen first each settle one expected creation or
    /// deletion of its controller.
    pub fn owns_or_adopts_expecting(
        self,
        children: &Informer,
        owner: OwnerKind,
        matching: impl Fn(&Value) -> Vec<String> + Send + Sync + 'static,
        expectations: &Expectations,
    ) -> Self {
        let expectations = expectations.clone();
        self.watches(children, move |change, queue| {
            to_owners(change, queue, owner, Some(&matching), Some(&expectations))
        })
    }

    /// Each change of `informer` goes to `map`, which queues the keys it concerns.
    /// `map` runs on the informer's writer: it must be quick.
    pub fn watches(
        self,
        informer: &Informer,
        map: impl Fn(Change<'_>, &Queue) + Send + Sync + 'static,
    ) -> Self {
        let queue = self.queue.clone();
        informer.on_change(move |change| map(change, &queue));
        self.waits_for(informer)
    }

    /// Waits for `informer`'s first list before the first reconcile, without mapping its
    /// changes to keys (the reconciler reads it).
    pub fn waits_for(mut self, informer: &Informer) -> Self {
        let known = self.informers.iter().any(|i| i.same(informer));
        if !known {
            self.informers.push(informer.clone());
        }
        self
    }

    /// Waits for what `ready` makes resolve before the first reconcile (each start of
    /// the controller makes a new one).
    pub fn waits_until(mut self, ready: impl Fn() -> Ready + Send + Sync + 'static) -> Self {
        self.ready.push(Arc::new(ready));
        self
    }

    /// Runs this many workers (one by default).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// What a conflict does ([`OnConflict::RetrySoon`] by default).
    pub fn on_conflict(mut self, policy: OnConflict) -> Self {
        self.on_conflict = policy;
        self
    }

    /// Runs the controller under `sup`: once every informer has its first list, its
    /// workers call `reconcile` with the keys from its queue until shutdown. A panic
    /// in a reconcile counts as a failure; a panic elsewhere restarts the controller.
    pub fn run<F, Fut>(self, sup: &mut Supervisor, reconcile: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action>> + Send + 'static,
    {
        let reconcile = Arc::new(reconcile);
        let Controller {
            name,
            queue,
            informers,
            ready,
            workers,
            on_conflict,
        } = self;
        sup.spawn(name, move |cancel| {
            let (queue, informers, ready, reconcile) = (
                queue.clone(),
                informers.clone(),
                ready.clone(),
                reconcile.clone(),
            );
            async move {
                let all: Vec<&Informer> = informers.iter().collect();
                if !synced(&all, &cancel).await {
                    return;
                }
                for ready in &ready {
                    tokio::select! {
                        () = ready() => {}
                        () = cancel.cancelled() => return,
                    }
                }
                let work = Work {
                    name,
                    queue,
                    workers,
                    on_conflict,
                };
                work.run(cancel, move |key| reconcile(key)).await;
            }
        });
    }

    /// [`Controller::run`] with the controller's own state, handed to each reconcile as
    /// an `Arc` (kube-runtime's context): `.run_with(sup, state, State::reconcile)` for
    /// `async fn reconcile(self: Arc<Self>, key: String) -> Result<Action>`.
    pub fn run_with<S, F, Fut>(self, sup: &mut Supervisor, state: Arc<S>, reconcile: F)
    where
        S: Send + Sync + 'static,
        F: Fn(Arc<S>, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action>> + Send + 'static,
    {
        self.run(sup, move |key| reconcile(state.clone(), key));
    }
}

/// The `matching` of [`Controller::owns_or_adopts`] for owners that select their children
/// by labels: the objects of `owners` in the child's namespace whose selector
/// (`selector_of`, an empty one selecting nothing) matches the child's labels.
pub fn selecting(
    owners: &Informer,
    selector_of: impl Fn(&Value) -> labels::Selector + Send + Sync + 'static,
) -> impl Fn(&Value) -> Vec<String> + Send + Sync + 'static {
    let owners = owners.clone();
    move |child: &Value| {
        let labels = labels::map_at(child, "/metadata/labels");
        let ns = crate::types::json::str_at(child, "/metadata/namespace");
        owners
            .list_namespace(ns)
            .iter()
            .filter(|owner| {
                let selector = selector_of(owner);
                !selector.is_empty() && selector.matches(&labels)
            })
            .map(|owner| client::key_of(owner))
            .collect()
    }
}

/// Queues the owner of a changed child (and its former one), or the owners that may adopt
/// it when it is an orphan; settles the owner's `expectations` the change meets.
fn to_owners(
    change: Change<'_>,
    queue: &Queue,
    owner: OwnerKind,
    matching: Option<impl Fn(&Value) -> Vec<String>>,
    expectations: Option<&Expectations>,
) {
    let now = owner.key_of_controller(change.object());
    if let (Some(key), Some(expectations)) = (&now, expectations) {
        match change {
            Change::Added(_) => expectations.observed(key, 1, 0),
            Change::Updated { old, new } if is_deleting(new) && !is_deleting(old) => {
                expectations.observed(key, 0, 1);
            }
            Change::Deleted(child) if !is_deleting(child) => expectations.observed(key, 0, 1),
            _ => {}
        }
    }
    let mut adoptable = matches!(change, Change::Added(_));
    if let Change::Updated { old, new } = change {
        let was = owner.key_of_controller(old);
        adoptable =
            was.is_some() || old.pointer("/metadata/labels") != new.pointer("/metadata/labels");
        if let Some(was) = was.filter(|w| now.as_ref() != Some(w)) {
            queue.add(was);
        }
    }
    match (now, matching) {
        (Some(key), _) => queue.add(key),
        (None, Some(matching)) if adoptable => {
            for key in matching(change.object()) {
                queue.add(key);
            }
        }
        (None, _) => {}
    }
}

/// Waits until every informer has its first list. False if cancelled.
async fn synced(informers: &[&Informer], cancel: &CancellationToken) -> bool {
    let all = async {
        for informer in informers {
            informer.synced().await;
        }
    };
    tokio::select! {
        () = all => true,
        () = cancel.cancelled() => false,
    }
}

/// The workers of one controller.
pub(super) struct Work {
    pub name: &'static str,
    pub queue: Queue,
    pub workers: usize,
    pub on_conflict: OnConflict,
}

impl Work {
    /// Runs `reconcile` on keys from the queue until `cancel`.
    pub(super) async fn run<F, Fut>(self, cancel: CancellationToken, reconcile: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action>> + Send + 'static,
    {
        let Work {
            name,
            queue,
            workers,
            on_conflict,
        } = self;
        let reconcile = Arc::new(reconcile);
        let mut set = JoinSet::new();
        for _ in 0..workers.max(1) {
            let queue = queue.clone();
            let reconcile = reconcile.clone();
            set.spawn(async move {
                while let Some(key) = queue.next().await {
                    // A panicking reconcile must not take its worker (and the key,
                    // marked in progress) with it: it counts as a failure and is retried.
                    let outcome = std::panic::AssertUnwindSafe(reconcile(key.clone()))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|panic| {
                            let what = panic
                                .downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| panic.downcast_ref::<String>().cloned())
                                .unwrap_or_else(|| "a panic".into());
                            Err(Error::Other(format!("reconcile panicked: {what}")))
                        });
                    match outcome {
                        Ok(Action::Done) => queue.forget(&key),
                        Ok(Action::RequeueAfter(d)) => {
                            queue.forget(&key);
                            queue.add_after(key.clone(), d);
                        }
                        Err(Error::Client(e))
                            if e.is_conflict() && on_conflict == OnConflict::RetrySoon =>
                        {
                            tracing::debug!(controller = name, %key, "conflict; requeued");
                            queue.retry(&key);
                        }
                        Err(e) => {
                            tracing::warn!(
                                controller = name,
                                %key,
                                error = %e,
                                failures = queue.failures(&key) + 1,
                                "reconcile failed; retrying with backoff"
                            );
                            queue.retry(&key);
                        }
                    }
                    queue.done(&key);
                    // An in-process reconcile may finish without ever waiting; let the
                    // informers (and everything else on this thread) run between keys.
                    tokio::task::yield_now().await;
                }
            });
        }
        cancel.cancelled().await;
        queue.shut_down();
        while set.join_next().await.is_some() {}
    }
}

/// Starts an informer's writer under the supervisor.
pub fn run_informer(sup: &mut Supervisor, client: &Client, informer: Informer) {
    let client = client.clone();
    let name = informer.resource().plural.clone();
    sup.spawn(name, move |cancel| {
        informer.clone().run(client.clone(), cancel)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn work(queue: &Queue, workers: usize) -> Work {
        Work {
            name: "test",
            queue: queue.clone(),
            workers,
            on_conflict: OnConflict::RetrySoon,
        }
    }

    /// The keys `to_owners` queues for `change`, sorted.
    async fn owners_of(change: Change<'_>, adopt: bool) -> Vec<String> {
        const OWNER: OwnerKind = OwnerKind {
            api_version: "apps/v1",
            kind_name: "ReplicaSet",
        };
        let queue = Queue::new();
        let matching = |_: &Value| vec!["ns/adopter".to_string()];
        to_owners(change, &queue, OWNER, adopt.then_some(matching), None);
        let mut keys = Vec::new();
        for _ in 0..queue.len() {
            let k = queue.next().await.expect("a queued key");
            queue.done(&k);
            keys.push(k);
        }
        keys.sort();
        keys
    }

    fn child(owner: Option<&str>, app: &str) -> Value {
        let refs: Vec<Value> = owner
            .map(|name| {
                serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": name, "uid": "u", "controller": true})
            })
            .into_iter()
            .collect();
        serde_json::json!({"metadata": {"namespace": "ns", "name": "p",
            "labels": {"app": app}, "ownerReferences": refs}})
    }

    #[tokio::test]
    async fn a_childs_change_queues_its_owner_its_former_owner_or_those_that_may_adopt_it() {
        let (a, b, orphan) = (
            child(Some("a"), "x"),
            child(Some("b"), "x"),
            child(None, "x"),
        );
        assert_eq!(owners_of(Change::Added(&a), true).await, ["ns/a"]);
        assert_eq!(owners_of(Change::Deleted(&a), true).await, ["ns/a"]);
        // Moved from one owner to another: both look again.
        let moved = Change::Updated { old: &a, new: &b };
        assert_eq!(owners_of(moved, false).await, ["ns/a", "ns/b"]);
        // An orphan added, released or relabeled may be adopted; a deleted one not.
        assert_eq!(
            owners_of(Change::Added(&orphan), true).await,
            ["ns/adopter"]
        );
        let released = Change::Updated {
            old: &a,
            new: &orphan,
        };
        assert_eq!(owners_of(released, true).await, ["ns/a", "ns/adopter"]);
        let relabeled = child(None, "y");
        let relabel = Change::Updated {
            old: &orphan,
            new: &relabeled,
        };
        assert_eq!(owners_of(relabel, true).await, ["ns/adopter"]);
        let same = Change::Updated {
            old: &orphan,
            new: &orphan,
        };
        assert!(owners_of(same, true).await.is_empty());
        assert!(owners_of(Change::Deleted(&orphan), true).await.is_empty());
        // Without adoption (`owns`), orphans concern nobody.
        assert!(owners_of(Change::Added(&orphan), false).await.is_empty());
    }

    #[test]
    fn a_childs_creation_and_deletion_settle_its_owners_expectations_once() {
        const OWNER: OwnerKind = OwnerKind {
            api_version: "apps/v1",
            kind_name: "ReplicaSet",
        };
        let queue = Queue::new();
        let expectations = Expectations::default();
        let seen = |change: Change<'_>| {
            to_owners(
                change,
                &queue,
                OWNER,
                None::<fn(&Value) -> Vec<String>>,
                Some(&expectations),
            )
        };
        let a = child(Some("a"), "x");
        let mut deleting = a.clone();
        deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        expectations.expect("ns/a", 1, 2);
        assert!(!expectations.satisfied("ns/a"));
        seen(Change::Added(&a));
        // The deletion is seen as it starts, and not counted again when it ends.
        seen(Change::Updated {
            old: &a,
            new: &deleting,
        });
        seen(Change::Updated {
            old: &deleting,
            new: &deleting,
        });
        seen(Change::Deleted(&deleting));
        assert!(!expectations.satisfied("ns/a"));
        // A child deleted without its deletion seen first counts when it goes.
        seen(Change::Deleted(&a));
        assert!(expectations.satisfied("ns/a"));
        // Orphans settle nobody's.
        expectations.expect("ns/a", 1, 0);
        seen(Change::Added(&child(None, "x")));
        assert!(!expectations.satisfied("ns/a"));
    }

    #[test]
    fn objects_decode_to_their_types_and_a_bad_one_is_named() {
        use k8s_openapi::api::batch::v1::Job;
        let job: Job = decode(&serde_json::json!({
            "kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"parallelism": 2, "template": {"spec": {"containers": []}}},
        }))
        .unwrap();
        assert_eq!(job.spec.unwrap().parallelism, Some(2));
        let bad = decode::<Job>(&serde_json::json!({
            "kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"parallelism": "two"},
        }))
        .unwrap_err()
        .to_string();
        assert!(
            bad.starts_with("Job ns/j: cannot be read as Job: "),
            "{bad}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_is_restarted() {
        let mut sup = Supervisor::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        sup.spawn("flaky", move |cancel| {
            let r = r.clone();
            async move {
                if r.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("broken on purpose");
                }
                cancel.cancelled().await;
            }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        sup.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_reconcile_is_retried_by_the_same_worker() {
        let queue = Queue::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let cancel = CancellationToken::new();
        let runner = tokio::spawn(work(&queue, 1).run(cancel.clone(), move |_key| {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("broken on purpose");
                }
                Ok(Action::Done)
            }
        }));
        queue.add("k");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        queue.add("other");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "the worker lives on");
        cancel.cancel();
        runner.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn workers_retry_failures_and_requeue_after() {
        let queue = Queue::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let cancel = CancellationToken::new();
        let runner = tokio::spawn(work(&queue, 2).run(cancel.clone(), move |key| {
            let c = c.clone();
            async move {
                let n = c.fetch_add(1, Ordering::SeqCst);
                match (key.as_str(), n) {
                    ("k", 0) => Err(Error::Other("first try fails".into())),
                    ("k", 1) => Ok(Action::RequeueAfter(Duration::from_secs(10))),
                    _ => Ok(Action::Done),
                }
            }
        }));
        queue.add("k");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "retried after the failure");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "requeued after 10 s");
        cancel.cancel();
        runner.await.unwrap();
    }
}
