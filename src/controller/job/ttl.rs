//! The TTL-after-finished controller: a finished Job with `ttlSecondsAfterFinished` is
//! deleted (foreground) that long after it finished.

use std::time::Duration;

use serde_json::Value;

use super::{Controller, finished_condition, int, parse_time, uid};
use crate::client::{DeleteParams, Propagation};
use crate::controller::claim::{is_deleting, str_at};
use crate::controller::{Action, Result};

impl Controller {
    /// For a finished Job with `ttlSecondsAfterFinished`: when it is due.
    pub(super) fn ttl_action(&self, job: &Value) -> Action {
        let Some(ttl) = int(job, "/spec/ttlSecondsAfterFinished") else {
            return Action::Done;
        };
        let Some(kind) = finished_condition(job) else {
            return Action::Done;
        };
        let Some(finished) = crate::types::condition(job, kind)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .and_then(parse_time)
        else {
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
    pub(super) async fn expire(&self, key: String) -> Result<Action> {
        let Some(job) = self.jobs.get(&key) else {
            return Ok(Action::Done);
        };
        if is_deleting(&job) {
            return Ok(Action::Done);
        }
        match self.ttl_action(&job) {
            Action::RequeueAfter(d) if !d.is_zero() => Ok(Action::RequeueAfter(d)),
            Action::Done => Ok(Action::Done),
            Action::RequeueAfter(_) => {
                // Check the live object: its TTL may have changed since the cache saw it.
                let live = match self
                    .client
                    .get(
                        self.jobs.resource(),
                        Some(str_at(&job, "/metadata/namespace")),
                        str_at(&job, "/metadata/name"),
                    )
                    .await
                {
                    Ok(j) => j,
                    Err(e) if e.is_not_found() => return Ok(Action::Done),
                    Err(e) => return Err(e.into()),
                };
                if let Action::RequeueAfter(d) = self.ttl_action(&live) {
                    if !d.is_zero() {
                        return Ok(Action::RequeueAfter(d));
                    }
                } else {
                    return Ok(Action::Done);
                }
                let params = DeleteParams {
                    propagation: Some(Propagation::Foreground),
                    uid: Some(uid(&live).to_string()),
                    resource_version: live
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .map(String::from),
                    ..DeleteParams::default()
                };
                match self
                    .client
                    .delete(
                        self.jobs.resource(),
                        Some(str_at(&live, "/metadata/namespace")),
                        str_at(&live, "/metadata/name"),
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
