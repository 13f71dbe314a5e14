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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::claim::{Claim, OwnerKind, is_deleting, str_at};
use super::expectations::Expectations;
use super::replication::{deletion_order, slow_start};
use super::{Action, Context, Queue, Result, Supervisor};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, DeleteParams, Kind, Patch, Propagation, catalog, key_of};
use crate::types::clock::Clock;
use crate::types::labels;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
const IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
/// Pods counted per status write at most (keeps the uid lists small).
const MAX_UNCOUNTED: usize = 500;
/// Pods created or deleted in one sync at most.
const BURST: usize = 500;
const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(360);
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

/// What the pod failure policy says of a failed pod: the Job's failure message (a
/// `FailJob` rule), whether the failure counts, and the action of the rule that matched.
fn match_failure_policy(job: &Value, pod: &Value) -> (Option<String>, bool, Option<String>) {
    let Some(rules) = job
        .pointer("/spec/podFailurePolicy/rules")
        .and_then(Value::as_array)
    else {
        return (None, true, None);
    };
    let statuses = |f: &str| {
        pod.pointer(&format!("/status/{f}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let containers: Vec<Value> = statuses("containerStatuses")
        .into_iter()
        .chain(statuses("initContainerStatuses"))
        .collect();
    for (i, rule) in rules.iter().enumerate() {
        let action = rule["action"].as_str().unwrap_or("");
        let matched: Option<String> = if let Some(req) =
            rule.get("onExitCodes").filter(|v| !v.is_null())
        {
            let values: Vec<i64> = req["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let name = req["containerName"].as_str();
            containers.iter().find_map(|c| {
                let code = c.pointer("/state/terminated/exitCode")?.as_i64()?;
                if code == 0 || name.is_some_and(|n| n != str_at(c, "/name")) {
                    return None;
                }
                let hit = match req["operator"].as_str() {
                    Some("In") => values.contains(&code),
                    Some("NotIn") => !values.contains(&code),
                    _ => false,
                };
                hit.then(|| {
                    format!(
                        "Container {} for pod {}/{} failed with exit code {code} matching {action} rule at index {i}",
                        str_at(c, "/name"),
                        str_at(pod, "/metadata/namespace"),
                        str_at(pod, "/metadata/name"),
                    )
                })
            })
        } else if let Some(patterns) = rule["onPodConditions"].as_array() {
            let conditions = statuses("conditions");
            conditions.iter().find_map(|c| {
                patterns
                    .iter()
                    .any(|p| p["type"] == c["type"] && p["status"] == c["status"])
                    .then(|| {
                        format!(
                            "Pod {}/{} has condition {} matching {action} rule at index {i}",
                            str_at(pod, "/metadata/namespace"),
                            str_at(pod, "/metadata/name"),
                            c["type"].as_str().unwrap_or(""),
                        )
                    })
            })
        } else {
            None
        };
        if let Some(message) = matched {
            return match action {
                "Ignore" => (None, false, Some(action.into())),
                "FailJob" => (Some(message), true, Some(action.into())),
                "Count" | "FailIndex" => (None, true, Some(action.into())),
                _ => continue,
            };
        }
    }
    (None, true, None)
}

/// Indexes as Kubernetes writes them: `1,3-5,7`.
pub fn format_indexes(set: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last = iter.next().expect("peeked");
        }
        out.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    out.join(",")
}

/// The indexes of `1,3-5,7` below `completions` (a bad part is skipped, as upstream).
pub fn parse_indexes(s: &str, completions: i64) -> BTreeSet<i64> {
    let mut set = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) else {
            continue;
        };
        set.extend((a.max(0)..=b.min(completions - 1)).filter(|_| a <= b));
    }
    set
}

/// `matchSuccessPolicy`: the first rule of the Job's success policy that its succeeded
/// indexes meet, as the message of its `SuccessCriteriaMet` (`Matched rules at index 0`).
/// A rule with indexes needs all of them, or `succeededCount` of them; a rule with a count
/// alone needs that many indexes.
fn match_success_policy(
    job: &Value,
    succeeded: &BTreeSet<i64>,
    completions: i64,
) -> Option<String> {
    let rules = job.pointer("/spec/successPolicy/rules")?.as_array()?;
    if succeeded.is_empty() {
        return None;
    }
    rules.iter().enumerate().find_map(|(i, rule)| {
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        let met = match rule.get("succeededIndexes").and_then(Value::as_str) {
            Some(text) => {
                let wanted = parse_indexes(text, completions);
                let have = wanted.intersection(succeeded).count() as i64;
                !wanted.is_empty()
                    && match count {
                        Some(n) => have >= n,
                        None => have == wanted.len() as i64,
                    }
            }
            None => count.is_some_and(|n| succeeded.len() as i64 >= n),
        };
        met.then(|| format!("Matched rules at index {i}"))
    })
}

/// A terminal or interim condition of a Job.
#[derive(Debug, Clone)]
struct Cond {
    kind: &'static str,
    reason: String,
    message: String,
}

impl Cond {
    fn failure(reason: &str, message: &str) -> Self {
        Cond {
            kind: "FailureTarget",
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn success() -> Self {
        Cond {
            kind: "SuccessCriteriaMet",
            reason: "CompletionsReached".into(),
            message: "Reached expected number of succeeded pods".into(),
        }
    }
}

/// Sets a condition of `kind`, as `ensureJobConditionStatus` (a False one is never
/// added); returns whether the list changed.
fn ensure_condition(
    job: &mut Value,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    if !job["status"]["conditions"].is_array() {
        job["status"]["conditions"] = json!([]);
    }
    let list = job["status"]["conditions"]
        .as_array_mut()
        .expect("an array");
    let fresh = json!({
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    });
    if let Some(c) = list.iter_mut().find(|c| c["type"] == kind) {
        if c["status"] != status || c["reason"] != reason || c["message"] != message {
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

/// Consecutive failures since the last success, per Job (`backoffRecord`).
#[derive(Debug, Clone, Copy, Default)]
struct Backoff {
    failures: u32,
    last_failure: Option<Timestamp>,
}

fn backoff_left(failures: u32, last: Option<Timestamp>, now: Timestamp) -> Duration {
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

    /// The backoff record after this sync's newly finished pods (`newBackoffRecord`);
    /// stored when the status that counts them is written.
    fn next_backoff(
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
    fn delayed_per_index(
        &self,
        job: &Value,
        s: &Sync,
        active: &[Arc<Value>],
    ) -> HashMap<i64, Arc<Value>> {
        let c = completions(job).unwrap_or(0);
        let active_ix: HashSet<i64> = active.iter().filter_map(|p| index_of(p, c)).collect();
        let failed_ix = s.failed_indexes.clone().unwrap_or_default();
        let mut out: HashMap<i64, Arc<Value>> = HashMap::new();
        for p in s.pods.iter().filter(|p| {
            has_finalizer(p) && !s.expected_removed.contains(uid(p)) && is_pod_failed(p, job)
        }) {
            let Some(ix) = index_of(p, c) else { continue };
            if s.succeeded_indexes.contains(&ix)
                || failed_ix.contains(&ix)
                || active_ix.contains(&ix)
            {
                continue;
            }
            let absolute = |p: &Value| {
                annotation_count(p, FAILURE_COUNT) + annotation_count(p, IGNORED_FAILURE_COUNT)
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

    /// `manageJob`: deletes surplus pods or creates missing ones. Returns the active count
    /// after it and, if creations wait for a back-off, how long.
    async fn manage(
        &self,
        key: &str,
        job: &Value,
        s: &mut Sync,
        active: &[Arc<Value>],
        backoff: Backoff,
    ) -> Result<(i64, Option<Duration>)> {
        let mut n_active = active.len() as i64;
        if suspended(job) {
            let (ready, deleted, err) = self.delete_pods(job, active, true).await;
            s.terminating += deleted;
            s.ready -= ready;
            if let Some(e) = err {
                return Err(e.into());
            }
            return Ok((n_active - deleted, None));
        }
        let parallelism = int(job, "/spec/parallelism").unwrap_or(1).max(0);
        let want = match completions(job) {
            None if s.succeeded > 0 => n_active,
            None => parallelism,
            Some(c) => (c - s.succeeded).clamp(0, parallelism),
        };
        let mut victims: Vec<Arc<Value>> = Vec::new();
        let mut rest: Vec<Arc<Value>> = active.to_vec();
        if is_indexed(job) {
            // Pods without a valid index, and all but one pod of an index, go.
            let c = completions(job).unwrap_or(0);
            rest.sort_by(|a, b| deletion_order(a, b));
            let mut kept: HashMap<i64, usize> = HashMap::new();
            let mut keep = vec![true; rest.len()];
            for (i, p) in rest.iter().enumerate() {
                match index_of(p, c) {
                    None => keep[i] = false,
                    Some(ix) => {
                        if let Some(prev) = kept.insert(ix, i) {
                            keep[prev] = false;
                        }
                    }
                }
            }
            let (mut stay, mut go) = (Vec::new(), Vec::new());
            for (p, k) in rest.into_iter().zip(keep) {
                if k { stay.push(p) } else { go.push(p) }
            }
            victims = go;
            rest = stay;
        }
        let at_least = (n_active - want).max(0) as usize;
        if victims.len() < at_least {
            rest.sort_by(|a, b| deletion_order(a, b));
            victims.extend(rest.into_iter().take(at_least - victims.len()));
        }
        victims.truncate(BURST);
        if !victims.is_empty() {
            self.expectations.expect(key, 0, victims.len() as i64);
            let (ready, deleted, err) = self.delete_pods(job, &victims, true).await;
            self.expectations
                .observed(key, 0, victims.len() as i64 - deleted);
            s.terminating += deleted;
            s.ready -= ready;
            if let Some(e) = err {
                return Err(e.into());
            }
            return Ok((n_active - deleted, None));
        }
        let terminating = if only_replace_failed(job) {
            s.terminating
        } else {
            0
        };
        let mut diff = want - terminating - n_active;
        if diff <= 0 {
            return Ok((n_active, None));
        }
        let now = self.now();
        if per_index_limit(job).is_none() {
            let left = backoff_left(backoff.failures, backoff.last_failure, now);
            if !left.is_zero() {
                return Ok((n_active, Some(left)));
            }
        }
        diff = diff.min(BURST as i64);
        let mut indexes: Vec<Option<i64>> = vec![None; diff as usize];
        if is_indexed(job) {
            let c = completions(job).unwrap_or(0);
            let mut taken: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p, c)).collect();
            if only_replace_failed(job) {
                taken.extend(
                    s.pods
                        .iter()
                        .filter(|p| is_terminating(p))
                        .filter_map(|p| index_of(p, c)),
                );
            }
            taken.extend(s.failed_indexes.iter().flatten().copied());
            taken.extend(s.succeeded_indexes.iter().copied());
            let mut pending: Vec<i64> = (0..c)
                .filter(|i| !taken.contains(i))
                .take(diff as usize)
                .collect();
            if per_index_limit(job).is_some() {
                let mut min_wait: Option<Duration> = None;
                pending.retain(|ix| {
                    let wait = s.delayed.get(ix).map_or(Duration::ZERO, |p| {
                        backoff_left(
                            (annotation_count(p, FAILURE_COUNT) + 1) as u32,
                            finished_time(p),
                            now,
                        )
                    });
                    if wait.is_zero() {
                        true
                    } else {
                        min_wait = Some(min_wait.map_or(wait, |m| m.min(wait)));
                        false
                    }
                });
                if pending.is_empty() {
                    return Ok((n_active, min_wait));
                }
            }
            indexes = pending.into_iter().map(Some).collect();
            diff = indexes.len() as i64;
        }
        let template = pod_template(job);
        self.expectations.expect(key, diff, 0);
        let ns = str_at(job, "/metadata/namespace").to_string();
        let (created, err) = slow_start(diff as usize, |i| {
            let mut pod = template.clone();
            let ns = ns.clone();
            let index = indexes.get(i).copied().flatten();
            if let Some(ix) = index {
                with_index(&mut pod, job, ix, s.delayed.get(&ix).map(|p| &**p));
            }
            async move {
                let made = self
                    .client
                    .create(self.pods.resource(), Some(&ns), &pod)
                    .await?;
                self.recorder
                    .event(
                        job,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", str_at(&made, "/metadata/name")),
                    )
                    .await;
                Ok(())
            }
        })
        .await;
        self.expectations.observed(key, diff - created as i64, 0);
        n_active += created as i64;
        if let Some(e) = err {
            self.recorder
                .event(
                    job,
                    EventType::Warning,
                    "FailedCreate",
                    &format!("Error creating: {e}"),
                )
                .await;
            return Err(e.into());
        }
        Ok((n_active, None))
    }

    /// Deletes pods (keeping or dropping their finalizer). Returns how many of them were
    /// ready, how many went, and the first error.
    async fn delete_pods(
        &self,
        job: &Value,
        pods: &[Arc<Value>],
        drop_finalizer: bool,
    ) -> (i64, i64, Option<crate::client::Error>) {
        let results = futures_util::future::join_all(pods.iter().map(|p| async move {
            if drop_finalizer && has_finalizer(p) {
                self.remove_finalizer(p).await?;
            }
            let params = DeleteParams {
                uid: Some(uid(p).to_string()),
                ..DeleteParams::default()
            };
            match self
                .client
                .delete(
                    self.pods.resource(),
                    Some(str_at(p, "/metadata/namespace")),
                    str_at(p, "/metadata/name"),
                    &params,
                )
                .await
            {
                Ok(_) => {
                    self.recorder
                        .event(
                            job,
                            EventType::Normal,
                            "SuccessfulDelete",
                            &format!("Deleted pod: {}", str_at(p, "/metadata/name")),
                        )
                        .await;
                    Ok(())
                }
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e),
            }
        }))
        .await;
        let mut ready = 0;
        let mut deleted = 0;
        let mut first = None;
        for (p, r) in pods.iter().zip(results) {
            match r {
                Ok(()) => {
                    deleted += 1;
                    ready += i64::from(is_ready(p));
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        (ready, deleted, first)
    }

    /// Removes the tracking finalizer from a pod if it still has it.
    async fn remove_finalizer(&self, pod: &Value) -> crate::client::Result<()> {
        let Some(i) = pod
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .and_then(|f| f.iter().position(|f| f == TRACKING_FINALIZER))
        else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{i}");
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
            {"op": "test", "path": path, "value": TRACKING_FINALIZER},
            {"op": "remove", "path": path},
        ]);
        match self
            .client
            .patch(
                self.pods.resource(),
                Some(str_at(pod, "/metadata/namespace")),
                str_at(pod, "/metadata/name"),
                &Patch::Json(patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            // The list moved under us: read the pod again and retry once.
            Err(crate::client::Error::Invalid(_) | crate::client::Error::BadRequest(_)) => {
                let fresh = match self
                    .client
                    .get(
                        self.pods.resource(),
                        Some(str_at(pod, "/metadata/namespace")),
                        str_at(pod, "/metadata/name"),
                    )
                    .await
                {
                    Ok(p) => p,
                    Err(e) if e.is_not_found() => return Ok(()),
                    Err(e) => return Err(e),
                };
                if uid(&fresh) != uid(pod) || !has_finalizer(&fresh) {
                    return Ok(());
                }
                Box::pin(self.remove_finalizer(&fresh)).await
            }
            Err(e) => Err(e),
        }
    }

    /// `trackJobStatusAndRemoveFinalizers`: records the finished pods as uncounted, takes
    /// their finalizers, counts them, and sets the terminal condition once nothing is
    /// left to count.
    async fn track(
        &self,
        key: &str,
        job: &mut Value,
        s: &mut Sync,
        mut needs_flush: bool,
        backoff: Backoff,
    ) -> Result<()> {
        let indexed = is_indexed(job);
        let c = completions(job).unwrap_or(0);
        let mut with_finalizer: HashSet<String> = s
            .pods
            .iter()
            .filter(|p| has_finalizer(p) && !s.expected_removed.contains(uid(p)))
            .map(|p| uid(p).to_string())
            .collect();
        if clean_uncounted(job, &with_finalizer) {
            needs_flush = true;
        }
        let mut to_remove: Vec<Arc<Value>> = Vec::new();
        let mut new_indexes: Vec<i64> = Vec::new();
        let mut uncounted_s = uncounted(job, "succeeded");
        let mut uncounted_f = uncounted(job, "failed");
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
            let failed = is_pod_failed(pod, job);
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
                if !s.uncounted_failed.contains(&id) && valid && match_failure_policy(job, pod).1 {
                    needs_flush = true;
                    uncounted_f.push(id);
                }
            }
            if new_indexes.len() + uncounted_s.len() + uncounted_f.len() >= MAX_UNCOUNTED {
                capped = true;
                break;
            }
        }
        job["status"]["uncountedTerminatedPods"] =
            json!({"succeeded": uncounted_s, "failed": uncounted_f});
        if indexed {
            s.succeeded_indexes.extend(new_indexes);
            let text = format_indexes(&s.succeeded_indexes);
            if job["status"]["completedIndexes"] != text {
                needs_flush = true;
            }
            job["status"]["succeeded"] = json!(s.succeeded_indexes.len());
            job["status"]["completedIndexes"] = json!(text);
            if let Some(f) = &s.failed_indexes {
                let text = json!(format_indexes(f));
                if job["status"]["failedIndexes"] != text {
                    job["status"]["failedIndexes"] = text;
                    needs_flush = true;
                }
            }
        }
        let now = self.now_str();
        // The interim condition goes in before any finalizer is removed.
        if let Some(f) = s.finished.clone() {
            if matches!(f.kind, "FailureTarget" | "SuccessCriteriaMet") {
                if !has_true_condition(job, f.kind) {
                    ensure_condition(job, f.kind, "True", &f.reason, &f.message, &now);
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
        }
        if needs_flush {
            *job = self.write_status(job).await?;
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
            if clean_uncounted(job, &with_finalizer) {
                needs_flush = true;
            }
            if let Some(e) = first_err {
                if needs_flush {
                    self.write_status(job).await?;
                }
                return Err(e.into());
            }
        }
        let finished = !capped && self.enact_finished(job, s, &now);
        if finished {
            needs_flush = true;
        }
        if needs_flush {
            *job = self.write_status(job).await?;
            if finished {
                self.record_finished(job, s).await;
                if let Some(after) = match self.ttl_action(job) {
                    Action::RequeueAfter(d) => Some(d),
                    Action::Done => None,
                } {
                    self.queue.add_after(key.to_string(), after);
                }
            }
        }
        Ok(())
    }

    fn can_remove(&self, job: &Value, s: &Sync, pod: &Value, failed: bool) -> bool {
        if is_deleting(job) || s.finished.is_some() || phase(pod) == "Succeeded" {
            return true;
        }
        if !failed {
            return false;
        }
        if per_index_limit(job).is_some() {
            if let Some(ix) = index_of(pod, completions(job).unwrap_or(0)) {
                if s.delayed.get(&ix).is_some_and(|p| uid(p) == uid(pod)) {
                    return false;
                }
            }
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
            job["status"]["completionTime"] = json!(now);
        }
        true
    }

    async fn record_finished(&self, job: &Value, s: &Sync) {
        let Some(f) = &s.finished else { return };
        if f.kind == "Complete" {
            if completions(job).is_some_and(|c| int(job, "/status/succeeded").unwrap_or(0) > c) {
                self.recorder
                    .event(
                        job,
                        EventType::Warning,
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached",
                    )
                    .await;
            }
            self.recorder
                .event(job, EventType::Normal, "Completed", "Job completed")
                .await;
        } else {
            self.recorder
                .event(job, EventType::Warning, &f.reason, &f.message)
                .await;
        }
    }

    async fn write_status(&self, job: &Value) -> Result<Value> {
        Ok(self.client.update_status(self.jobs.resource(), job).await?)
    }

    /// For a finished Job with `ttlSecondsAfterFinished`: when it is due.
    fn ttl_action(&self, job: &Value) -> Action {
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
    async fn expire(&self, key: String) -> Result<Action> {
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

/// The uids in `status.uncountedTerminatedPods.<list>`.
fn uncounted(job: &Value, list: &str) -> Vec<String> {
    job.pointer(&format!("/status/uncountedTerminatedPods/{list}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
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
            let n = int(job, &format!("/status/{counter}")).unwrap_or(0);
            job["status"][counter] = json!(n + (all.len() - keep.len()) as i64);
            if !job["status"]["uncountedTerminatedPods"].is_object() {
                job["status"]["uncountedTerminatedPods"] = json!({});
            }
            job["status"]["uncountedTerminatedPods"][list] = json!(keep);
        }
    }
    changed
}

/// `isIndexFailed`: a counted failure of an index past its own limit, or a `FailIndex`
/// rule.
fn is_index_failed(job: &Value, pod: &Value, per_index: i64) -> bool {
    if !is_pod_failed(pod, job) {
        return false;
    }
    let (_, counts, action) = match_failure_policy(job, pod);
    if action.as_deref() == Some("FailIndex") {
        return true;
    }
    counts && annotation_count(pod, FAILURE_COUNT) >= per_index
}

/// `pastBackoffLimitOnFailure`: for `restartPolicy: OnFailure`, the restarts of the
/// running pods' containers count as failures.
fn past_backoff_limit_on_failure(job: &Value, pods: &[Arc<Value>], limit: i64) -> bool {
    if str_at(job, "/spec/template/spec/restartPolicy") != "OnFailure" {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .flat_map(|p| {
            ["initContainerStatuses", "containerStatuses"]
                .into_iter()
                .flat_map(move |f| {
                    p.pointer(&format!("/status/{f}"))
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
        })
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// A new pod from the Job's template, with the tracking finalizer.
fn pod_template(job: &Value) -> Value {
    let template = &job["spec"]["template"];
    let mut meta = json!({
        "generateName": format!("{}-", str_at(job, "/metadata/name")),
        "namespace": str_at(job, "/metadata/namespace"),
        "ownerReferences": [JOBS.controlled_by(job)],
    });
    for field in ["labels", "annotations"] {
        if let Some(v) = template.pointer(&format!("/metadata/{field}")) {
            meta[field] = v.clone();
        }
    }
    let mut finalizers: Vec<Value> = template
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(json!(TRACKING_FINALIZER));
    }
    meta["finalizers"] = json!(finalizers);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
}

/// An Indexed Job's pod for index `ix`: the annotation and label, hostname, the
/// `JOB_COMPLETION_INDEX` variable, its generated name and (with per-index limits) the
/// failure count it inherits from the pod it replaces.
fn with_index(pod: &mut Value, job: &Value, ix: i64, replaced: Option<&Value>) {
    let name = str_at(job, "/metadata/name");
    let meta = &mut pod["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["annotations"][COMPLETION_INDEX] = json!(ix.to_string());
    meta["labels"][COMPLETION_INDEX] = json!(ix.to_string());
    // `podGenerateNameWithIndex`: the prefix leaves room for the random suffix.
    let mut prefix = format!("{name}-{ix}-");
    if prefix.len() > 58 {
        let keep = 58 - (ix.to_string().len() + 2);
        prefix = format!("{}-{ix}-", &name[..keep.min(name.len())]);
    }
    meta["generateName"] = json!(prefix);
    if per_index_limit(job).is_some() {
        let (mut failures, mut ignored) = (0, 0);
        if let Some(old) = replaced {
            failures = annotation_count(old, FAILURE_COUNT);
            ignored = annotation_count(old, IGNORED_FAILURE_COUNT);
            if match_failure_policy(job, old).1 {
                failures += 1;
            } else {
                ignored += 1;
            }
        }
        meta["annotations"][FAILURE_COUNT] = json!(failures.to_string());
        if ignored > 0 {
            meta["annotations"][IGNORED_FAILURE_COUNT] = json!(ignored.to_string());
        }
    }
    pod["spec"]["hostname"] = json!(format!("{name}-{ix}"));
    let env = json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": format!("metadata.annotations['{COMPLETION_INDEX}']")
    }}});
    for list in ["initContainers", "containers"] {
        for c in pod["spec"][list].as_array_mut().into_iter().flatten() {
            if !c["env"].is_array() {
                c["env"] = json!([]);
            }
            let vars = c["env"].as_array_mut().expect("an array");
            if !vars.iter().any(|v| v["name"] == "JOB_COMPLETION_INDEX") {
                vars.push(env.clone());
            }
        }
    }
}

pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let jobs = ctx.informers.get(catalog::of(Kind::Job));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let queue = Queue::new();
    let ttl_queue = Queue::new();
    let orphans = Queue::new();
    let expectations = Expectations::default();
    let removing: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();
    {
        let (queue, ttl_queue, expectations) =
            (queue.clone(), ttl_queue.clone(), expectations.clone());
        jobs.on_change(move |change| {
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
        });
    }
    {
        let (queue, orphans, expectations, removing) = (
            queue.clone(),
            orphans.clone(),
            expectations.clone(),
            removing.clone(),
        );
        let jobs = jobs.clone();
        let matching = move |queue: &Queue, pod: &Value| {
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
        };
        let observed_removal = move |owner: &str, pod: &Value| {
            if let Some(set) = removing.lock().expect("lock").get_mut(owner) {
                set.remove(uid(pod));
            }
        };
        pods.on_change(move |change| {
            let pod = change.object();
            let owner = JOBS.key_of_controller(pod);
            match change {
                Change::Added(p) => match &owner {
                    Some(o) => {
                        expectations.observed(o, 1, 0);
                        queue.add(o.clone());
                    }
                    None => matching(&queue, p),
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
                        matching(&queue, new);
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
                orphans.add(key_of(pod));
            }
        });
    }
    let controller = Controller {
        client: ctx.client.clone(),
        jobs,
        pods,
        expectations,
        removing,
        backoff: Arc::default(),
        recorder: ctx.recorder("job-controller"),
        clock: ctx.clock.clone(),
        queue: queue.clone(),
    };
    let c = controller.clone();
    sup.spawn("job-controller", move |cancel| {
        let (c, queue) = (c.clone(), queue.clone());
        async move {
            if !super::synced(&[&c.jobs, &c.pods], &cancel).await {
                return;
            }
            let c2 = c.clone();
            super::run("job-controller", queue, WORKERS, cancel, move |key| {
                let c = c2.clone();
                async move { c.reconcile(key).await }
            })
            .await;
        }
    });
    let c = controller.clone();
    sup.spawn("job-orphans", move |cancel| {
        let (c, orphans) = (c.clone(), orphans.clone());
        async move {
            if !super::synced(&[&c.jobs, &c.pods], &cancel).await {
                return;
            }
            let c2 = c.clone();
            super::run("job-orphans", orphans, 1, cancel, move |key| {
                let c = c2.clone();
                async move { c.release_orphan(key).await }
            })
            .await;
        }
    });
    sup.spawn("ttl-after-finished-controller", move |cancel| {
        let (c, ttl_queue) = (controller.clone(), ttl_queue.clone());
        async move {
            if !super::synced(&[&c.jobs], &cancel).await {
                return;
            }
            let c2 = c.clone();
            super::run(
                "ttl-after-finished-controller",
                ttl_queue,
                1,
                cancel,
                move |key| {
                    let c = c2.clone();
                    async move { c.expire(key).await }
                },
            )
            .await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_policy_is_met_by_the_first_rule_its_indexes_satisfy() {
        let job = |rules: Value| json!({"spec": {"successPolicy": {"rules": rules}}});
        let done: BTreeSet<i64> = [0, 2, 3].into_iter().collect();
        let m = |rules: Value| match_success_policy(&job(rules), &done, 5);
        assert_eq!(
            m(json!([{"succeededIndexes": "0,2"}])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(
            m(json!([{"succeededIndexes": "0-1"}])),
            None,
            "1 has not succeeded"
        );
        assert_eq!(
            m(json!([{"succeededIndexes": "0-1"}, {"succeededIndexes": "1-4", "succeededCount": 2}])).as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(m(json!([{"succeededCount": 4}])), None);
        assert_eq!(
            m(json!([{"succeededCount": 3}])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(match_success_policy(&json!({"spec": {}}), &done, 5), None);
    }

    #[test]
    fn indexes_are_written_as_intervals() {
        let set: BTreeSet<i64> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(format_indexes(&set), "0-2,4,6-7");
        assert_eq!(parse_indexes("0-2,4,6-7", 10), set);
        assert_eq!(parse_indexes("1,3-9", 5), [1, 3, 4].into_iter().collect());
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }

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

    fn failed_pod(code: i64, conditions: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "status": {
            "phase": "Failed", "conditions": conditions,
            "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": code}}}],
        }})
    }

    #[test]
    fn the_pod_failure_policy_decides_as_upstream() {
        let job = json!({"spec": {"podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        ]}}});
        let (msg, counts, action) = match_failure_policy(&job, &failed_pod(42, json!([])));
        assert_eq!(
            msg.as_deref(),
            Some(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
            )
        );
        assert!(counts);
        assert_eq!(action.as_deref(), Some("FailJob"));
        let (msg, counts, _) = match_failure_policy(
            &job,
            &failed_pod(42, json!([{"type": "DisruptionTarget", "status": "True"}])),
        );
        assert!(msg.is_none() && !counts, "an ignored disruption");
        assert_eq!(
            match_failure_policy(&job, &failed_pod(1, json!([]))),
            (None, true, None)
        );
        assert_eq!(
            match_failure_policy(&job, &failed_pod(3, json!([])))
                .2
                .as_deref(),
            Some("Count")
        );
    }

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

    #[test]
    fn an_indexed_pod_knows_its_index() {
        let job = json!({"metadata": {"name": "work", "namespace": "ns", "uid": "u"},
            "spec": {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1,
                "template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let mut pod = pod_template(&job);
        let old = json!({"metadata": {"annotations": {FAILURE_COUNT: "0"}}, "status": {"phase": "Failed"}});
        with_index(&mut pod, &job, 2, Some(&old));
        assert_eq!(pod["metadata"]["generateName"], "work-2-");
        assert_eq!(pod["metadata"]["annotations"][COMPLETION_INDEX], "2");
        assert_eq!(pod["metadata"]["annotations"][FAILURE_COUNT], "1");
        assert_eq!(pod["metadata"]["labels"][COMPLETION_INDEX], "2");
        assert_eq!(pod["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(pod["spec"]["hostname"], "work-2");
        assert_eq!(
            pod["spec"]["containers"][0]["env"][0]["name"],
            "JOB_COMPLETION_INDEX"
        );
        assert_eq!(index_of(&pod, 3), Some(2));
        assert_eq!(index_of(&pod, 2), None);
    }
}
