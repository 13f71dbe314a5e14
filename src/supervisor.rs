//! The supervisor: the owner of every long-running task of the process (informers,
//! controllers, the node agent's loops). A task that panics or ends early is restarted
//! with a backoff; shutdown cancels them all and waits for them.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Owns every long-running task of the process.
pub struct Supervisor {
    set: JoinSet<()>,
    cancel: CancellationToken,
}

const RESTART_FIRST: Duration = Duration::from_millis(100);
const RESTART_MAX: Duration = Duration::from_secs(30);

impl Supervisor {
    pub fn new() -> Self {
        Supervisor {
            set: JoinSet::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// The token every task watches to stop.
    pub fn token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Runs `make()` until cancelled; a run that panics or ends early is logged and
    /// started again after a backoff that doubles up to 30 s.
    pub fn spawn<F, Fut>(&mut self, name: impl Into<std::borrow::Cow<'static, str>>, make: F)
    where
        F: Fn(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let cancel = self.cancel.clone();
        let name = name.into();
        self.set.spawn(async move {
            let mut backoff = RESTART_FIRST;
            loop {
                let run = tokio::spawn(make(cancel.child_token()));
                let outcome = run.await;
                if cancel.is_cancelled() {
                    return;
                }
                match outcome {
                    Ok(()) => tracing::error!(task = %name, "ended unexpectedly; restarting"),
                    Err(e) => tracing::error!(task = %name, error = %e, "panicked; restarting"),
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = cancel.cancelled() => return,
                }
                backoff = (backoff * 2).min(RESTART_MAX);
            }
        });
    }

    /// Stops every task and waits for them (at most `grace`).
    pub async fn shutdown(mut self, grace: Duration) {
        self.cancel.cancel();
        let all = async { while self.set.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("controllers still stopping after {grace:?}; aborting them");
            self.set.abort_all();
        }
    }
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}
