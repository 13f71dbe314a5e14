//! The job controller: runs each Job's pods to completion, as kube-controller-manager's
//! (`pkg/controller/job`) does.
//!
//! A Job keeps up to `parallelism` pods running until `completions` of them succeeded
//! (or, without `completions`, until one did and the rest finished); `Indexed` Jobs give
//! each pod a completion index (annotation, label, hostname, `JOB_COMPLETION_INDEX`) and
//! count succeeded indexes. Failures count against `backoffLimit` (or, per index, against
//! `backoffLimitPerIndex`), after `podFailurePolicy` had its say (`FailJob`, `FailIndex`,
//! `Ignore`, `Count`); a failed pod is replaced after an exponential delay (10 s doubling
//! to 6 min). `activeDeadlineSeconds` fails a Job that ran too long (one requeue at the
//! deadline, no polling); `suspend` deletes the running pods and resumes later.
//!
//! Every pod carries the `batch.kubernetes.io/job-tracking` finalizer, and a finished pod
//! is counted in three steps that each survive a crash: its uid goes into
//! `status.uncountedTerminatedPods` (one status write), its finalizer is removed, and then
//! the uid moves into `succeeded`/`failed`. Whatever step a restart interrupts, the next
//! sync finishes it without counting a pod twice or losing one. The terminal condition
//! (`Complete` / `Failed`) follows an interim `SuccessCriteriaMet` / `FailureTarget` once
//! no pod is uncounted or still terminating.
//!
//! The TTL-after-finished controller is here too: a finished Job with
//! `ttlSecondsAfterFinished` is deleted (foreground) that long after it finished.

mod backoff;
mod failure;
mod indexes;
mod pods;
mod status;
mod ttl;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use self::backoff::Backoff;
use self::failure::{is_index_failed, match_failure_policy, past_backoff_limit_on_failure};
use self::indexes::{match_success_policy, parse_indexes};
use self::status::{Cond, ensure_condition, uncounted};
use super::claim::{Claim, OwnerKind, is_deleting, str_at};
use super::expectations::Expectations;
use super::{Action, Context, Queue, Result, Supervisor, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, Kind, catalog, key_of};
use crate::types::clock::Clock;
use crate::types::labels;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
const IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
const WORKERS: usize = 5;

const JOBS: OwnerKind = OwnerKind {
    api_version: "batch/v1",
    kind_name: "Job",
};

fn int(obj: &Value, pointer: &str) -> Option<i64> {
    obj.pointer(pointer).and_then(Value::as_i64)
}

fn has_finalizer(pod: &Value) -> bool {
    pod.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

fn uid(obj: &Value) -> &str {
    str_at(obj, "/metadata/uid")
}

fn phase(pod: &Value) -> &str {
    str_at(pod, "/status/phase")
}

fn is_ready(pod: &Value) -> bool {
    crate::types::is_pod_ready(pod)
}

fn is_active(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !is_deleting(pod)
}

fn is_terminating(pod: &Value) -> bool {
    is_deleting(pod) && !matches!(phase(pod), "Succeeded" | "Failed")
}

fn is_indexed(job: &Value) -> bool {
    str_at(job, "/spec/completionMode") == "Indexed"
}

fn completions(job: &Value) -> Option<i64> {
    int(job, "/spec/completions")
}

fn suspended(job: &Value) -> bool {
    job.pointer("/spec/suspend")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn per_index_limit(job: &Value) -> Option<i64> {
    int(job, "/spec/backoffLimitPerIndex")
}

/// Only pods that failed are replaced (not those still terminating).
fn only_replace_failed(job: &Value) -> bool {
    str_at(job, "/spec/podReplacementPolicy") == "Failed"
        || job
            .pointer("/spec/podFailurePolicy")
            .is_some_and(|p| !p.is_null())
}

/// `isPodFailed`: failed, or (unless only failed pods are replaced) deleted before it
/// could succeed.
fn is_pod_failed(pod: &Value, job: &Value) -> bool {
    phase(pod) == "Failed"
        || (!only_replace_failed(job) && is_deleting(pod) && phase(pod) != "Succeeded")
}

/// A pod's completion index, if it has a valid one below `completions`.
fn index_of(pod: &Value, completions: i64) -> Option<i64> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(COMPLETION_INDEX))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&i| i >= 0 && i < completions)
}

fn annotation_count(pod: &Value, key: &str) -> i64 {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn finished_condition(job: &Value) -> Option<&str> {
    ["Complete", "Failed"]
        .into_iter()
        .find(|t| crate::types::condition(job, t).is_some_and(|c| c["status"] == "True"))
}

fn has_true_condition(job: &Value, kind: &str) -> bool {
    crate::types::condition(job, kind).is_some_and(|c| c["status"] == "True")
}

fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// `getFinishedTime`: the latest container finish, else when Ready went False, else the
/// deletion time less its grace, else the creation time.
fn finished_time(pod: &Value) -> Option<Timestamp> {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let from_containers = statuses.filter(|s| !s.is_empty()).and_then(|s| {
        s.iter().try_fold(None::<Timestamp>, |latest, c| {
            let t = c
                .pointer("/state/terminated/finishedAt")
                .and_then(Value::as_str)
                .and_then(parse_time)?;
            Some(Some(latest.map_or(t, |l| l.max(t))))
        })
    });
    if let Some(Some(t)) = from_containers {
        return Some(t);
    }
    if let Some(c) = crate::types::condition(pod, "Ready").filter(|c| c["status"] == "False") {
        if let Some(t) = c["lastTransitionTime"].as_str().and_then(parse_time) {
            return Some(t);
        }
    }
    if let Some(t) = pod
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_time)
    {
        let grace = int(pod, "/metadata/deletionGracePeriodSeconds").unwrap_or(0);
        return t.checked_sub(jiff::SignedDuration::from_secs(grace)).ok();
    }
    pod.pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_time)
}

/// What one sync found.
struct Sync {
    pods: Vec<Arc<Value>>,
    uncounted_succeeded: HashSet<String>,
    uncounted_failed: HashSet<String>,
    expected_removed: HashSet<String>,
    terminating: i64,
    ready: i64,
    succeeded: i64,
    finished: Option<Cond>,
    prev_succeeded_indexes: BTreeSet<i64>,
    succeeded_indexes: BTreeSet<i64>,
    failed_indexes: Option<BTreeSet<i64>>,
    /// Per index, the failed pod whose finalizer stays until its replacement exists
    /// (it carries the failure count the replacement inherits).
    delayed: HashMap<i64, Arc<Value>>,
}

#[derive(Clone)]
struct Controller {
    client: Client,
    jobs: Informer,
    pods: Informer,
    expectations: Expectations,
    /// Per Job, the pods whose finalizer removal is asked for but not yet seen.
    removing: Arc<Mutex<HashMap<String, HashSet<String>>>>,
    backoff: Arc<Mutex<HashMap<String, Backoff>>>,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
    queue: Queue,
}

impl Controller {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn now_str(&self) -> String {
        let t = self.now();
        Timestamp::from_second(t.as_second())
            .unwrap_or(t)
            .to_string()
    }

    fn expected_removed(&self, key: &str) -> HashSet<String> {
        self.removing
            .lock()
            .expect("finalizer expectations lock")
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    async fn reconcile(&self, key: String) -> Result<Action> {
        let Some(shared) = self.jobs.get(&key) else {
            self.expectations.forget(&key);
            self.removing.lock().expect("lock").remove(&key);
            self.backoff.lock().expect("lock").remove(&key);
            return Ok(Action::Done);
        };
        let mut job = (*shared).clone();
        if finished_condition(&job).is_some() {
            self.backoff.lock().expect("lock").remove(&key);
            // Pods still holding the finalizer (a crash between the last steps) let go.
            for pod in self.owned_pods(&job) {
                if has_finalizer(&pod) {
                    self.remove_finalizer(&pod).await?;
                }
            }
            return Ok(self.ttl_action(&job));
        }
        let mode = str_at(&job, "/spec/completionMode");
        if !mode.is_empty() && mode != "NonIndexed" && mode != "Indexed" {
            self.recorder
                .event(
                    &job,
                    EventType::Warning,
                    "UnknownCompletionMode",
                    "Skipped Job sync because completion mode is unknown",
                )
                .await;
            return Ok(Action::Done);
        }
        if !job["status"].is_object() {
            job["status"] = json!({});
        }
        let satisfied = self.expectations.satisfied(&key);
        let selector = job
            .pointer("/spec/selector")
            .and_then(|s| labels::Selector::from_label_selector(s).ok())
            .unwrap_or_default();
        if selector.is_empty() {
            return Ok(Action::Done);
        }
        let pods = Claim {
            client: &self.client,
            kind: JOBS,
            owners: self.jobs.resource(),
            children: &self.pods,
            owner: &job,
            selector: &selector,
        }
        .run()
        .await?;
        let uids = |f: &str| -> HashSet<String> { uncounted(&job, f).into_iter().collect() };
        let mut s = Sync {
            uncounted_succeeded: uids("succeeded"),
            uncounted_failed: uids("failed"),
            expected_removed: self.expected_removed(&key),
            terminating: pods.iter().filter(|p| is_terminating(p)).count() as i64,
            ready: pods.iter().filter(|p| is_active(p) && is_ready(p)).count() as i64,
            succeeded: 0,
            finished: None,
            prev_succeeded_indexes: BTreeSet::new(),
            succeeded_indexes: BTreeSet::new(),
            failed_indexes: None,
            delayed: HashMap::new(),
            pods,
        };
        let active: Vec<Arc<Value>> = s.pods.iter().filter(|p| is_active(p)).cloned().collect();
        let mut n_active = active.len() as i64;
        let counting = |p: &Value| {
            has_finalizer(p)
                && !s.expected_removed.contains(uid(p))
                && (!is_indexed(&job) || index_of(p, completions(&job).unwrap_or(0)).is_some())
        };
        let new_succeeded: Vec<&Arc<Value>> = s
            .pods
            .iter()
            .filter(|p| {
                counting(p) && !s.uncounted_succeeded.contains(uid(p)) && phase(p) == "Succeeded"
            })
            .collect();
        let new_failed: Vec<&Arc<Value>> = s
            .pods
            .iter()
            .filter(|p| {
                counting(p) && !s.uncounted_failed.contains(uid(p)) && is_pod_failed(p, &job)
            })
            .collect();
        s.succeeded = int(&job, "/status/succeeded").unwrap_or(0)
            + new_succeeded.len() as i64
            + s.uncounted_succeeded.len() as i64;
        let counted_failures = new_failed
            .iter()
            .filter(|p| match_failure_policy(&job, p).1)
            .count() as i64;
        let failed = int(&job, "/status/failed").unwrap_or(0)
            + counted_failures
            + s.uncounted_failed.len() as i64;
        let now = self.now();
        let now_str = self.now_str();
        if job.pointer("/status/startTime").is_none_or(Value::is_null) && !suspended(&job) {
            job["status"]["startTime"] = json!(now_str);
        }
        let backoff = self.next_backoff(&key, &new_succeeded, &new_failed);
        let mut requeue: Option<Duration> = None;

        // Has it finished, and how?
        if let Some(ft) =
            crate::types::condition(&job, "FailureTarget").filter(|c| c["status"] == "True")
        {
            s.finished = Some(Cond {
                kind: "Failed",
                reason: ft["reason"].as_str().unwrap_or("").into(),
                message: ft["message"].as_str().unwrap_or("").into(),
            });
        } else if let Some(sc) =
            crate::types::condition(&job, "SuccessCriteriaMet").filter(|c| c["status"] == "True")
        {
            s.finished = Some(Cond {
                kind: "Complete",
                reason: sc["reason"].as_str().unwrap_or("").into(),
                message: sc["message"].as_str().unwrap_or("").into(),
            });
        } else if let Some(message) = s
            .pods
            .iter()
            .filter(|p| is_pod_failed(p, &job))
            .find_map(|p| match_failure_policy(&job, p).0)
        {
            s.finished = Some(Cond::failure("PodFailurePolicy", &message));
        }
        let limit = int(&job, "/spec/backoffLimit").unwrap_or(6);
        if s.finished.is_none() {
            if failed > limit || past_backoff_limit_on_failure(&job, &s.pods, limit) {
                s.finished = Some(Cond::failure(
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            } else if let Some(left) = self.deadline_left(&job, now) {
                if left.is_zero() {
                    s.finished = Some(Cond::failure(
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                    ));
                } else {
                    requeue = Some(left);
                }
            }
        }
        if is_indexed(&job) {
            let c = completions(&job).unwrap_or(0);
            s.prev_succeeded_indexes = parse_indexes(str_at(&job, "/status/completedIndexes"), c);
            let mut all = s.prev_succeeded_indexes.clone();
            all.extend(
                s.pods
                    .iter()
                    .filter(|p| phase(p) == "Succeeded" && has_finalizer(p))
                    .filter_map(|p| index_of(p, c)),
            );
            s.succeeded_indexes = all;
            s.succeeded = s.succeeded_indexes.len() as i64;
            if let Some(per_index) = per_index_limit(&job) {
                let mut failed_ix = parse_indexes(str_at(&job, "/status/failedIndexes"), c);
                failed_ix.extend(
                    s.pods
                        .iter()
                        .filter(|p| has_finalizer(p) && is_index_failed(&job, p, per_index))
                        .filter_map(|p| index_of(p, c)),
                );
                if s.finished.is_none() {
                    let max = int(&job, "/spec/maxFailedIndexes");
                    if max.is_some_and(|m| failed_ix.len() as i64 > m) {
                        s.finished = Some(Cond::failure(
                            "MaxFailedIndexesExceeded",
                            "Job has exceeded the specified maximal number of failed indexes",
                        ));
                    } else if !failed_ix.is_empty()
                        && (failed_ix.len() + s.succeeded_indexes.len()) as i64 >= c
                    {
                        s.finished = Some(Cond::failure("FailedIndexes", "Job has failed indexes"));
                    }
                }
                s.failed_indexes = Some(failed_ix);
                s.delayed = self.delayed_per_index(&job, &s, &active);
            }
            if s.finished.is_none() {
                if let Some(message) = match_success_policy(&job, &s.succeeded_indexes, c) {
                    s.finished = Some(Cond {
                        kind: "SuccessCriteriaMet",
                        reason: "SuccessPolicy".into(),
                        message,
                    });
                }
            }
        }
        let mut suspend_changed = false;
        if s.finished.is_some() {
            let (deleted_ready, deleted, err) = self.delete_pods(&job, &active, false).await;
            if deleted != n_active || !satisfied {
                s.finished = None;
            }
            n_active -= deleted;
            s.terminating += deleted;
            s.ready -= deleted_ready;
            if let Some(e) = err {
                return Err(e.into());
            }
        } else {
            let mut managed = false;
            if satisfied && !is_deleting(&job) {
                let (after, wait) = self.manage(&key, &job, &mut s, &active, backoff).await?;
                n_active = after;
                if let Some(w) = wait {
                    requeue = Some(requeue.map_or(w, |r| r.min(w)));
                }
                managed = true;
            }
            let complete = match completions(&job) {
                None => s.succeeded > 0 && n_active == 0,
                Some(c) => s.succeeded >= c && n_active == 0,
            };
            if complete {
                s.finished = Some(Cond::success());
            } else if managed {
                if suspended(&job) {
                    if ensure_condition(
                        &mut job,
                        "Suspended",
                        "True",
                        "JobSuspended",
                        "Job suspended",
                        &now_str,
                    ) {
                        suspend_changed = true;
                        self.recorder
                            .event(&job, EventType::Normal, "Suspended", "Job suspended")
                            .await;
                    }
                } else if ensure_condition(
                    &mut job,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    &now_str,
                ) {
                    suspend_changed = true;
                    self.recorder
                        .event(&job, EventType::Normal, "Resumed", "Job resumed")
                        .await;
                    // The deadline counts from the resumption.
                    job["status"]["startTime"] = json!(now_str);
                }
            }
        }
        let needs = suspend_changed
            || int(&job, "/status/active").unwrap_or(0) != n_active
            || int(&job, "/status/ready") != Some(s.ready)
            || int(&job, "/status/terminating") != Some(s.terminating);
        job["status"]["active"] = json!(n_active);
        job["status"]["ready"] = json!(s.ready);
        job["status"]["terminating"] = json!(s.terminating);
        let needs = needs || shared["status"]["startTime"] != job["status"]["startTime"];
        self.track(&key, &mut job, &mut s, needs, backoff).await?;
        Ok(match requeue {
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }

    fn owned_pods(&self, job: &Value) -> Vec<Arc<Value>> {
        self.pods
            .list_namespace(str_at(job, "/metadata/namespace"))
            .into_iter()
            .filter(|p| super::claim::controller_ref(p).is_some_and(|r| r["uid"] == uid(job)))
            .collect()
    }

    fn deadline_left(&self, job: &Value, now: Timestamp) -> Option<Duration> {
        let secs = int(job, "/spec/activeDeadlineSeconds")?;
        if suspended(job) {
            return None;
        }
        let start = parse_time(str_at(job, "/status/startTime"))?;
        let end = start
            .checked_add(jiff::SignedDuration::from_secs(secs))
            .ok()?;
        let left = end.duration_since(now);
        Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
    }

    /// A pod with the finalizer whose Job is gone (or finished) lets go of it.
    async fn release_orphan(&self, key: String) -> Result<Action> {
        let Some(pod) = self.pods.get(&key) else {
            return Ok(Action::Done);
        };
        if !has_finalizer(&pod) {
            return Ok(Action::Done);
        }
        if let Some(r) = super::claim::controller_ref(&pod) {
            if r["kind"] != "Job" || r["apiVersion"] != "batch/v1" {
                return Ok(Action::Done);
            }
            let job_key = format!(
                "{}/{}",
                str_at(&pod, "/metadata/namespace"),
                r["name"].as_str().unwrap_or("")
            );
            if let Some(job) = self.jobs.get(&job_key) {
                if uid(&job) == r["uid"].as_str().unwrap_or("")
                    && finished_condition(&job).is_none()
                {
                    return Ok(Action::Done);
                }
            }
        }
        self.remove_finalizer(&pod).await?;
        Ok(Action::Done)
    }
}

pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let jobs = ctx.informers.get(catalog::of(Kind::Job));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let ttl = runtime::Controller::new("ttl-after-finished-controller").waits_for(&jobs);
    let orphans = runtime::Controller::new("job-orphans")
        .waits_for(&jobs)
        .waits_for(&pods);
    let (ttl_queue, orphan_queue) = (ttl.queue(), orphans.queue());
    let expectations = Expectations::default();
    let removing: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();
    let jobs_changed = {
        let expectations = expectations.clone();
        move |change: Change<'_>, queue: &Queue| {
            let key = key_of(change.object());
            if let Change::Deleted(_) = change {
                expectations.forget(&key);
            }
            if change
                .object()
                .pointer("/spec/ttlSecondsAfterFinished")
                .is_some()
            {
                ttl_queue.add(key.clone());
            }
            queue.add(key);
        }
    };
    let matching = {
        let jobs = jobs.clone();
        move |queue: &Queue, pod: &Value| {
            let l = labels::map_at(pod, "/metadata/labels");
            for j in jobs.list_namespace(str_at(pod, "/metadata/namespace")) {
                let sel = j
                    .pointer("/spec/selector")
                    .and_then(|s| labels::Selector::from_label_selector(s).ok())
                    .unwrap_or_default();
                if !sel.is_empty() && sel.matches(&l) {
                    queue.add(key_of(&j));
                }
            }
        }
    };
    let observed_removal = {
        let removing = removing.clone();
        move |owner: &str, pod: &Value| {
            if let Some(set) = removing.lock().expect("lock").get_mut(owner) {
                set.remove(uid(pod));
            }
        }
    };
    let pods_changed = {
        let expectations = expectations.clone();
        move |change: Change<'_>, queue: &Queue| {
            let pod = change.object();
            let owner = JOBS.key_of_controller(pod);
            match change {
                Change::Added(p) => match &owner {
                    Some(o) => {
                        expectations.observed(o, 1, 0);
                        queue.add(o.clone());
                    }
                    None => matching(queue, p),
                },
                Change::Updated { old, new } => {
                    let was = JOBS.key_of_controller(old);
                    if let Some(w) = was.as_ref().filter(|w| Some(*w) != owner.as_ref()) {
                        queue.add(w.clone());
                    }
                    if let Some(o) = &owner {
                        if is_deleting(new) && !is_deleting(old) {
                            expectations.observed(o, 0, 1);
                        }
                        if has_finalizer(old) && !has_finalizer(new) {
                            observed_removal(o, new);
                        }
                        queue.add(o.clone());
                    } else if was.is_some()
                        || old.pointer("/metadata/labels") != new.pointer("/metadata/labels")
                    {
                        matching(queue, new);
                    }
                }
                Change::Deleted(p) => {
                    if let Some(o) = &owner {
                        if !is_deleting(p) {
                            expectations.observed(o, 0, 1);
                        }
                        observed_removal(o, p);
                        queue.add(o.clone());
                    }
                }
            }
            if has_finalizer(pod) && !matches!(change, Change::Deleted(_)) {
                orphan_queue.add(key_of(pod));
            }
        }
    };
    let jobs_controller = runtime::Controller::new("job-controller")
        .watches(&jobs, jobs_changed)
        .watches(&pods, pods_changed)
        .workers(WORKERS);
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        jobs,
        pods,
        expectations,
        removing,
        backoff: Arc::default(),
        recorder: ctx.recorder("job-controller"),
        clock: ctx.clock.clone(),
        queue: jobs_controller.queue(),
    });
    let c2 = c.clone();
    jobs_controller.run(sup, move |key| {
        let c = c2.clone();
        async move { c.reconcile(key).await }
    });
    let c2 = c.clone();
    orphans.run(sup, move |key| {
        let c = c2.clone();
        async move { c.release_orphan(key).await }
    });
    ttl.run(sup, move |key| {
        let c = c.clone();
        async move { c.expire(key).await }
    });
}
