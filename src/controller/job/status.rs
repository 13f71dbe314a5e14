//! A Job's status: finished pods counted through the tracking finalizer in three
//! crash-safe steps, its conditions, and the terminal condition once nothing is left.

use crate::types::meta::Meta;
use std::collections::HashSet;
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::backoff::Backoff;
use super::failure::match_failure_policy;
use super::indexes::format_indexes;
use super::{
    Controller, JobView, Sync, finished_condition, has_finalizer, index_of, is_pod_failed,
    parse_time, phase, uid,
};
use crate::controller::{Action, Result};
use crate::types::json::{array_at, int_at, str_at};

/// Pods counted per status write at most (keeps the uid lists small).
const MAX_UNCOUNTED: usize = 500;

/// A terminal or interim condition of a Job.
#[derive(Debug, Clone)]
pub(super) struct Cond {
    pub(super) kind: &'static str,
    pub(super) reason: String,
    pub(super) message: String,
}

impl Cond {
    pub(super) fn failure(reason: &str, message: &str) -> Self {
        Cond {
            kind: "FailureTarget",
            reason: reason.into(),
            message: message.into(),
        }
    }

    pub(super) fn success() -> Self {
        Cond {
            kind: "SuccessCriteriaMet",
            reason: "CompletionsReached".into(),
            message: "Reached expected number of succeeded pods".into(),
        }
    }
}

// The status a sync writes is kept as JSON: the stored object with its status changed
// in place (a typed round trip would drop what the typed struct does not know). Reads of
// what it has written go through `types::json`.

/// The object at `key` of `obj` (made an empty one if it was none), to write into.
pub(super) fn object_mut<'a>(
    obj: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let slot = obj.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot.as_object_mut().expect("made an object")
}

/// The status of a Job's JSON, made an object if it was none.
pub(super) fn status_mut(job: &mut Value) -> &mut Map<String, Value> {
    object_mut(job.as_object_mut().expect("a Job is an object"), "status")
}

/// Sets a condition of `kind`, as `ensureJobConditionStatus` (a False one is never
/// added); returns whether the list changed.
pub(super) fn ensure_condition(
    job: &mut Value,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    let conditions = status_mut(job)
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("made an array");
    let fresh = json!({
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    });
    if let Some(c) = list.iter_mut().find(|c| str_at(c, "/type") == kind) {
        if str_at(c, "/status") != status
            || str_at(c, "/reason") != reason
            || str_at(c, "/message") != message
        {
            *c = fresh;
            return true;
        }
        return false;
    }
    if status != "False" {
        list.push(fresh);
        return true;
    }
    false
}

/// The uids in `status.uncountedTerminatedPods.<list>` of the status being written.
fn uncounted(job: &Value, list: &str) -> Vec<String> {
    array_at(job, &format!("/status/uncountedTerminatedPods/{list}"))
        .iter()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

/// Moves the uncounted uids whose pods no longer hold the finalizer into the counters
/// (`cleanUncountedPodsWithoutFinalizers`); returns whether anything moved.
fn clean_uncounted(job: &mut Value, with_finalizer: &HashSet<String>) -> bool {
    let mut changed = false;
    for (list, counter) in [("succeeded", "succeeded"), ("failed", "failed")] {
        let all = uncounted(job, list);
        let keep: Vec<String> = all
            .iter()
            .filter(|u| with_finalizer.contains(*u))
            .cloned()
            .collect();
        if keep.len() != all.len() {
            changed = true;
            let n = int_at(job, &format!("/status/{counter}"));
            let status = status_mut(job);
            status.insert(counter.into(), json!(n + (all.len() - keep.len()) as i64));
            object_mut(status, "uncountedTerminatedPods").insert(list.into(), json!(keep));
        }
    }
    changed
}

/// When the written status says the Job finished: the last transition of its true
/// `Complete` or `Failed` condition.
fn finished_at(job: &Value) -> Option<Timestamp> {
    finished_condition(job).and_then(|c| parse_time(str_at(c, "/lastTransitionTime")))
}

impl Controller {
    /// `trackJobStatusAndRemoveFinalizers`: records the finished pods as uncounted, takes
    /// their finalizers, counts them, and sets the terminal condition once nothing is
    /// left to count. `job` is the Job as the sync read it, `obj` the JSON its status is
    /// written from.
    pub(super) async fn track(
        &self,
        key: &str,
        job: &JobView<'_>,
        obj: &mut Value,
        s: &mut Sync,
        mut needs_flush: bool,
        backoff: Backoff,
    ) -> Result<()> {
        let indexed = job.is_indexed();
        let c = job.completions().unwrap_or(0);
        let mut with_finalizer: HashSet<String> = s
            .pods
            .iter()
            .filter(|p| has_finalizer(p) && !s.expected_removed.contains(uid(p)))
            .map(|p| uid(p).to_string())
            .collect();
        if clean_uncounted(obj, &with_finalizer) {
            needs_flush = true;
        }
        let mut to_remove: Vec<Arc<Value>> = Vec::new();
        let mut new_indexes: Vec<i64> = Vec::new();
        let mut uncounted_s = uncounted(obj, "succeeded");
        let mut uncounted_f = uncounted(obj, "failed");
        let mut pods = s.pods.clone();
        if indexed {
            pods.sort_by_key(|p| index_of(p, c).unwrap_or(i64::MAX));
        }
        let finished_failing = s
            .finished
            .as_ref()
            .is_some_and(|f| f.kind != "SuccessCriteriaMet" && f.kind != "Complete");
        let mut capped = false;
        for pod in &pods {
            if !has_finalizer(pod) || s.expected_removed.contains(uid(pod)) {
                continue;
            }
            let failed = is_pod_failed(pod, &job.spec);
            if !self.can_remove(job, s, pod, failed) {
                continue;
            }
            to_remove.push(pod.clone());
            let id = uid(pod).to_string();
            if phase(pod) == "Succeeded" && !s.uncounted_failed.contains(&id) {
                if indexed {
                    if let Some(ix) =
                        index_of(pod, c).filter(|ix| !s.prev_succeeded_indexes.contains(ix))
                    {
                        new_indexes.push(ix);
                        needs_flush = true;
                    }
                } else if !s.uncounted_succeeded.contains(&id) {
                    needs_flush = true;
                    uncounted_s.push(id);
                }
            } else if failed || finished_failing {
                let valid = !indexed || index_of(pod, c).is_some();
                if !s.uncounted_failed.contains(&id)
                    && valid
                    && match_failure_policy(&job.spec, pod).1
                {
                    needs_flush = true;
                    uncounted_f.push(id);
                }
            }
            if new_indexes.len() + uncounted_s.len() + uncounted_f.len() >= MAX_UNCOUNTED {
                capped = true;
                break;
            }
        }
        let status = status_mut(obj);
        status.insert(
            "uncountedTerminatedPods".into(),
            json!({"succeeded": uncounted_s, "failed": uncounted_f}),
        );
        if indexed {
            // The index lists are still as the sync read them: compare with those.
            s.succeeded_indexes.extend(new_indexes);
            let text = format_indexes(&s.succeeded_indexes);
            if job.status.completed_indexes.as_deref() != Some(text.as_str()) {
                needs_flush = true;
            }
            status.insert("succeeded".into(), json!(s.succeeded_indexes.len()));
            status.insert("completedIndexes".into(), json!(text));
            if let Some(f) = &s.failed_indexes {
                let text = format_indexes(f);
                if job.status.failed_indexes.as_deref() != Some(text.as_str()) {
                    status.insert("failedIndexes".into(), json!(text));
                    needs_flush = true;
                }
            }
        }
        let now = self.now_str();
        // The interim condition goes in before any finalizer is removed.
        if let Some(f) = s.finished.clone()
            && matches!(f.kind, "FailureTarget" | "SuccessCriteriaMet")
        {
            if !job.has_true_condition(f.kind) {
                ensure_condition(obj, f.kind, "True", &f.reason, &f.message, &now);
                needs_flush = true;
            }
            s.finished = Some(Cond {
                kind: if f.kind == "FailureTarget" {
                    "Failed"
                } else {
                    "Complete"
                },
                ..f
            });
        }
        if needs_flush {
            *obj = self.write_status(obj).await?;
            self.backoff
                .lock()
                .expect("backoff lock")
                .insert(key.to_string(), backoff);
            needs_flush = false;
        }
        // Step two: the finalizers.
        if !to_remove.is_empty() {
            {
                let mut removing = self.removing.lock().expect("lock");
                let set = removing.entry(key.to_string()).or_default();
                set.extend(to_remove.iter().map(|p| uid(p).to_string()));
            }
            let results =
                futures_util::future::join_all(to_remove.iter().map(|p| self.remove_finalizer(p)))
                    .await;
            let mut first_err = None;
            for (p, r) in to_remove.iter().zip(results) {
                match r {
                    Ok(()) => {
                        with_finalizer.remove(uid(p));
                    }
                    Err(e) => {
                        // No update will show this removal: stop expecting it.
                        if let Some(set) = self.removing.lock().expect("lock").get_mut(key) {
                            set.remove(uid(p));
                        }
                        first_err.get_or_insert(e);
                    }
                }
            }
            // Step three: count what lost its finalizer.
            if clean_uncounted(obj, &with_finalizer) {
                needs_flush = true;
            }
            if let Some(e) = first_err {
                if needs_flush {
                    self.write_status(obj).await?;
                }
                return Err(e.into());
            }
        }
        let finished = !capped && self.enact_finished(obj, s, &now);
        if finished {
            needs_flush = true;
        }
        if needs_flush {
            *obj = self.write_status(obj).await?;
            if finished {
                self.record_finished(job, obj, s).await;
                if let Some(after) = match self.ttl_action(job.ttl(), finished_at(obj)) {
                    Action::RequeueAfter(d) => Some(d),
                    Action::Done => None,
                } {
                    self.queue.add_after(key.to_string(), after);
                }
            }
        }
        Ok(())
    }

    fn can_remove(&self, job: &JobView, s: &Sync, pod: &Value, failed: bool) -> bool {
        if job.is_deleting() || s.finished.is_some() || phase(pod) == "Succeeded" {
            return true;
        }
        if !failed {
            return false;
        }
        if job.per_index_limit().is_some()
            && let Some(ix) = index_of(pod, job.completions().unwrap_or(0))
            && s.delayed.get(&ix).is_some_and(|p| uid(p) == uid(pod))
        {
            return false;
        }
        true
    }

    /// `enactJobFinished`: the terminal condition, once nothing is uncounted or still
    /// terminating.
    fn enact_finished(&self, job: &mut Value, s: &Sync, now: &str) -> bool {
        let Some(f) = &s.finished else {
            return false;
        };
        if !uncounted(job, "succeeded").is_empty()
            || !uncounted(job, "failed").is_empty()
            || s.terminating > 0
        {
            return false;
        }
        ensure_condition(job, f.kind, "True", &f.reason, &f.message, now);
        if f.kind == "Complete" {
            status_mut(job).insert("completionTime".into(), json!(now));
        }
        true
    }

    /// The events of a finished Job; `obj` is its status as written.
    async fn record_finished(&self, job: &JobView<'_>, obj: &Value, s: &Sync) {
        let Some(f) = &s.finished else { return };
        if f.kind == "Complete" {
            if job
                .completions()
                .is_some_and(|c| int_at(obj, "/status/succeeded") > c)
            {
                self.recorder
                    .warning(
                        obj,
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached",
                    )
                    .await;
            }
            self.recorder
                .normal(obj, "Completed", "Job completed")
                .await;
        } else {
            self.recorder.warning(obj, &f.reason, &f.message).await;
        }
    }

    async fn write_status(&self, job: &Value) -> Result<Value> {
        Ok(self.client.update_status(self.jobs.resource(), job).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncounted_pods_without_finalizers_move_into_the_counters() {
        let mut job = json!({"status": {"succeeded": 2, "failed": 1,
            "uncountedTerminatedPods": {"succeeded": ["a", "b"], "failed": ["c"]}}});
        let held: HashSet<String> = ["b".to_string()].into_iter().collect();
        assert!(clean_uncounted(&mut job, &held));
        assert_eq!(job["status"]["succeeded"], 3);
        assert_eq!(job["status"]["failed"], 2);
        assert_eq!(
            job["status"]["uncountedTerminatedPods"],
            json!({"succeeded": ["b"], "failed": []})
        );
        assert!(!clean_uncounted(&mut job, &held), "nothing moves twice");
    }
}
