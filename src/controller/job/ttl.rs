//! The TTL-after-finished controller: a finished Job with `ttlSecondsAfterFinished` is
//! deleted (foreground) that long after it finished.

use crate::types::meta::Meta;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::{Controller, JobView};
use crate::client::{DeleteParams, Propagation};
use crate::controller::{Action, Result};

impl Controller {
    /// For a finished Job with `ttlSecondsAfterFinished` (`ttl`), finished at `finished`
    /// (its finished condition's last transition): when it is due.
    pub(super) fn ttl_action(&self, ttl: Option<i64>, finished: Option<Timestamp>) -> Action {
        let (Some(ttl), Some(finished)) = (ttl, finished) else {
            return Action::Done;
        };
        let due = finished
            .checked_add(jiff::SignedDuration::from_secs(ttl))
            .unwrap_or(finished);
        let left = Duration::try_from(due.duration_since(self.now())).unwrap_or(Duration::ZERO);
        Action::RequeueAfter(left)
    }

    /// The TTL-after-finished controller's sync: deletes a due Job (foreground, so its
    /// pods go first).
    pub(super) async fn expire(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(shared) = self.jobs.get(&key) else {
            return Ok(Action::Done);
        };
        let job = JobView::decode(&shared)?;
        if job.is_deleting() {
            return Ok(Action::Done);
        }
        match self.ttl_action(job.ttl(), job.finished_at()) {
            Action::RequeueAfter(d) if !d.is_zero() => Ok(Action::RequeueAfter(d)),
            Action::Done => Ok(Action::Done),
            Action::RequeueAfter(_) => {
                // Check the live object: its TTL may have changed since the cache saw it.
                let live = match self
                    .client
                    .get(self.jobs.resource(), Some(job.namespace()), job.name())
                    .await
                {
                    Ok(j) => j,
                    Err(e) if e.is_not_found() => return Ok(Action::Done),
                    Err(e) => return Err(e.into()),
                };
                let live = JobView::decode(&live)?;
                if let Action::RequeueAfter(d) = self.ttl_action(live.ttl(), live.finished_at()) {
                    if !d.is_zero() {
                        return Ok(Action::RequeueAfter(d));
                    }
                } else {
                    return Ok(Action::Done);
                }
                let params = DeleteParams {
                    propagation: Some(Propagation::Foreground),
                    uid: Some(live.uid().to_string()),
                    resource_version: live.meta.resource_version.clone(),
                    ..DeleteParams::default()
                };
                match self
                    .client
                    .delete(
                        self.jobs.resource(),
                        Some(live.namespace()),
                        live.name(),
                        &params,
                    )
                    .await
                {
                    Ok(_) => Ok(Action::Done),
                    Err(e) if e.is_not_found() => Ok(Action::Done),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }
}
