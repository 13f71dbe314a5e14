//! The back-off before new pods: consecutive failures since the last success (10 s
//! doubling to 6 min) and, per index, the failed pod whose replacement waits.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::{
    Controller, FAILURE_COUNT_AT, IGNORED_FAILURE_COUNT_AT, JobView, Sync, annotation_count,
    finished_time, has_finalizer, index_of, is_pod_failed, uid,
};

const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);

const MAX_BACKOFF: Duration = Duration::from_secs(360);

/// Consecutive failures since the last success, per Job (`backoffRecord`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Backoff {
    pub(super) failures: u32,
    pub(super) last_failure: Option<Timestamp>,
}

pub(super) fn backoff_left(failures: u32, last: Option<Timestamp>, now: Timestamp) -> Duration {
    let (Some(last), true) = (last, failures > 0) else {
        return Duration::ZERO;
    };
    let mut delay = DEFAULT_BACKOFF;
    for _ in 1..failures {
        delay *= 2;
        if delay >= MAX_BACKOFF {
            delay = MAX_BACKOFF;
            break;
        }
    }
    let elapsed = now.duration_since(last);
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    delay.saturating_sub(elapsed)
}

impl Controller {
    /// The backoff record after this sync's newly finished pods (`newBackoffRecord`);
    /// stored when the status that counts them is written.
    pub(super) fn next_backoff(
        &self,
        key: &str,
        succeeded: &[&Arc<Value>],
        failed: &[&Arc<Value>],
    ) -> Backoff {
        let mut b = self
            .backoff
            .lock()
            .expect("backoff lock")
            .get(key)
            .copied()
            .unwrap_or_default();
        let mut failed_times: Vec<Timestamp> =
            failed.iter().filter_map(|p| finished_time(p)).collect();
        failed_times.sort();
        let last_success = succeeded.iter().filter_map(|p| finished_time(p)).max();
        match last_success {
            None => {
                if let Some(&last) = failed_times.last() {
                    b.failures += failed_times.len() as u32;
                    b.last_failure = Some(last);
                }
            }
            Some(success) => {
                b = Backoff::default();
                for t in failed_times.iter().rev().take_while(|t| **t > success) {
                    b.last_failure.get_or_insert(*t);
                    b.failures += 1;
                }
            }
        }
        b
    }

    /// `getPodsWithDelayedDeletionPerIndex`.
    pub(super) fn delayed_per_index(
        &self,
        job: &JobView,
        s: &Sync,
        active: &[Arc<Value>],
    ) -> HashMap<i64, Arc<Value>> {
        let c = job.completions().unwrap_or(0);
        let active_ix: HashSet<i64> = active.iter().filter_map(|p| index_of(p, c)).collect();
        let failed_ix = s.failed_indexes.clone().unwrap_or_default();
        let mut out: HashMap<i64, Arc<Value>> = HashMap::new();
        for p in s.pods.iter().filter(|p| {
            has_finalizer(p) && !s.expected_removed.contains(uid(p)) && is_pod_failed(p, &job.spec)
        }) {
            let Some(ix) = index_of(p, c) else { continue };
            if s.succeeded_indexes.contains(&ix)
                || failed_ix.contains(&ix)
                || active_ix.contains(&ix)
            {
                continue;
            }
            let absolute = |p: &Value| {
                annotation_count(p, FAILURE_COUNT_AT)
                    + annotation_count(p, IGNORED_FAILURE_COUNT_AT)
            };
            match out.get(&ix) {
                Some(last)
                    if !(absolute(last) <= absolute(p)
                        && finished_time(p) >= finished_time(last)) => {}
                _ => {
                    out.insert(ix, p.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_ten_seconds_to_six_minutes() {
        let t: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |s: i64| t.checked_add(jiff::SignedDuration::from_secs(s)).unwrap();
        assert_eq!(backoff_left(0, Some(t), t), Duration::ZERO);
        assert_eq!(backoff_left(1, Some(t), at(4)), Duration::from_secs(6));
        assert_eq!(backoff_left(3, Some(t), at(10)), Duration::from_secs(30));
        assert_eq!(backoff_left(20, Some(t), t), MAX_BACKOFF);
        assert_eq!(backoff_left(1, Some(t), at(11)), Duration::ZERO);
    }
}
