//! The controllers and the runtime they share. A controller is a `reconcile(key)` function
//! fed by a [`Queue`]; informers (shared, see [`client::informer`]) enqueue keys when
//! objects change. Reconciles are level-triggered and idempotent: they read the informer
//! caches, write through the [`Client`], and answer with an [`Action`]. A conflict means
//! "requeue now"; other errors retry with the key's backoff.
//!
//! The [`Supervisor`] runs every informer and controller loop, restarts one that panics
//! (with backoff) without taking the process down, and stops them all on shutdown.
//!
//! [`client::informer`]: crate::client::informer

pub mod apiservice;
pub mod claim;
pub mod crdcleanup;
pub mod cronjob;
pub mod custom;
pub mod daemonset;
pub mod deployer;
pub mod deployment;
pub mod deploymentconfig;
pub mod disruption;
pub mod eventttl;
pub mod expectations;
pub mod gc;
pub mod history;
pub mod job;
pub mod namespace;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod queue;
pub mod replication;
pub mod rootca;
pub mod scheduler;
pub mod serviceaccount;
pub mod statefulset;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::informer::Informers;
use crate::client::recorder::Recorder;
use crate::client::{self, Client, Kind, catalog};
use crate::supervisor::Supervisor;

pub use queue::Queue;

/// Settings of the control plane.
#[derive(Debug, Clone)]
pub struct Config {
    /// A node whose lease is older than this becomes `Ready=Unknown`.
    pub node_grace: Duration,
    /// Pods on an unreachable node without a toleration of their own are evicted after
    /// this long.
    pub eviction_timeout: Duration,
    /// Events are deleted this long after they were last seen.
    pub event_ttl: Duration,
    /// Run the DeploymentConfig and deployer controllers (off only for tests that play
    /// them, to check the deployer process alone).
    pub deployments: bool,
    /// The port the API serves on, for the `kubernetes` Service; `None` keeps no such
    /// Service.
    pub api_port: Option<u16>,
    /// How often each HorizontalPodAutoscaler is synced.
    pub hpa_sync: Duration,
    /// How long an autoscaler without `behavior` (or with no scale-down window of its own)
    /// remembers its recommendations before it scales down.
    pub hpa_downscale_window: Duration,
    /// The CA (PEM) that signed the API's serving certificate, published in every
    /// namespace as the ConfigMap `kube-root-ca.crt`; `None` publishes nothing.
    pub root_ca: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_grace: Duration::from_secs(40),
            eviction_timeout: Duration::from_secs(300),
            event_ttl: Duration::from_secs(3600),
            deployments: true,
            api_port: None,
            hpa_sync: Duration::from_secs(15),
            hpa_downscale_window: Duration::from_secs(300),
            root_ca: None,
        }
    }
}

/// What every controller is given.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub informers: Informers,
    pub config: Arc<Config>,
    /// The custom kinds served now, followed by informers the controllers share.
    pub custom: custom::CustomKinds,
    /// Where the controllers read the time (a manual clock in tests).
    pub clock: Arc<dyn crate::types::clock::Clock>,
}

impl Context {
    pub fn new(client: Client, config: Config) -> Self {
        Context {
            client,
            informers: Informers::default(),
            config: Arc::new(config),
            custom: custom::CustomKinds::default(),
            clock: Arc::new(crate::types::clock::System),
        }
    }

    /// An event recorder for `component`.
    pub fn recorder(&self, component: &str) -> Recorder {
        Recorder::new(self.client.clone(), component, None)
    }
}

/// Starts every controller, then the informers they asked for.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    // Each controller registers its informer handlers before any informer runs, so none
    // misses the first list.
    if ctx.config.deployments {
        deploymentconfig::start(ctx, sup);
        deployer::start(ctx, sup);
    }
    apiservice::start(ctx, sup);
    crdcleanup::start(ctx, sup);
    cronjob::start(ctx, sup);
    daemonset::start(ctx, sup);
    disruption::start(ctx, sup);
    deployment::start(ctx, sup);
    eventttl::start(ctx, sup);
    gc::start(ctx, sup);
    job::start(ctx, sup);
    namespace::start(ctx, sup);
    nodelifecycle::start(ctx, sup);
    podautoscaler::start(ctx, sup);
    replication::start(ctx, sup);
    scheduler::start(ctx, sup);
    serviceaccount::start(ctx, sup);
    rootca::start(ctx, sup);
    statefulset::start(ctx, sup);
    let definitions = ctx
        .informers
        .metadata(catalog::of(Kind::CustomResourceDefinition));
    ctx.custom.start(&ctx.client, definitions, sup);
    for informer in ctx.informers.all() {
        run_informer(sup, &ctx.client, informer);
    }
}

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

/// Waits until every informer has its first list (a controller acting on a half-filled
/// cache would create what exists or miss what it must wait for). False if cancelled.
pub async fn synced(informers: &[&client::informer::Informer], cancel: &CancellationToken) -> bool {
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

/// Runs `reconcile` on keys from `queue` with `workers` workers until `cancel`.
pub async fn run<F, Fut>(
    name: &'static str,
    queue: Queue,
    workers: usize,
    cancel: CancellationToken,
    reconcile: F,
) where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    let reconcile = Arc::new(reconcile);
    let mut set = JoinSet::new();
    for _ in 0..workers.max(1) {
        let queue = queue.clone();
        let reconcile = reconcile.clone();
        set.spawn(async move {
            while let Some(key) = queue.next().await {
                // A panicking reconcile must not take its worker (and the key, marked in
                // progress) with it: it counts as a failure and is retried.
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
                    Err(Error::Client(e)) if e.is_conflict() => {
                        // Somebody wrote first: look again soon, once the caches have
                        // caught up (the first retry waits 5 ms, repeats back off).
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

/// Starts an informer's writer under the supervisor.
pub fn run_informer(sup: &mut Supervisor, client: &Client, informer: client::informer::Informer) {
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
        let runner = tokio::spawn(run("test", queue.clone(), 1, cancel.clone(), move |_key| {
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
        let runner = tokio::spawn(run("test", queue.clone(), 2, cancel.clone(), move |key| {
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
