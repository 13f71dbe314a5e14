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

use crate::types::meta::Meta;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;
use serde_json::Value;

use self::backoff::Backoff;
use self::failure::{is_index_failed, match_failure_policy, past_backoff_limit_on_failure};
use self::indexes::{match_success_policy, parse_indexes};
use self::status::{Cond, ensure_condition, status_mut};
use super::claim::{Claim, OwnerKind, controller_ref, is_deleting};
use super::expectations::Expectations;
use super::{Action, Context, Queue, Result, Supervisor, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, Kind, catalog, key_of};
use crate::types::clock::Clock;
use crate::types::json::{array_at, int_at, str_at};
use crate::types::labels;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
const IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
/// The pod annotations above as JSON pointers (`/` in a key is written `~1`).
const COMPLETION_INDEX_AT: &str = "/metadata/annotations/batch.kubernetes.io~1job-completion-index";
const FAILURE_COUNT_AT: &str = "/metadata/annotations/batch.kubernetes.io~1job-index-failure-count";
const IGNORED_FAILURE_COUNT_AT: &str =
    "/metadata/annotations/batch.kubernetes.io~1job-index-ignored-failure-count";
const WORKERS: usize = 5;

const JOBS: OwnerKind = OwnerKind {
    api_version: "batch/v1",
    kind_name: "Job",
};

/// A Job as a sync reads it: decoded once from the stored object, which stays at hand as
/// JSON for what is written from it (events name it, new pods copy its template's pod
/// spec, the status write starts from a copy of it).
struct JobView<'a> {
    raw: &'a Value,
    meta: ObjectMeta,
    spec: JobSpec,
    status: JobStatus,
}

impl Meta for JobView<'_> {
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
}

impl<'a> JobView<'a> {
    fn decode(raw: &'a Value) -> Result<Self> {
        let job: Job = runtime::decode(raw)?;
        Ok(JobView {
            raw,
            meta: job.metadata,
            spec: job.spec.unwrap_or_default(),
            status: job.status.unwrap_or_default(),
        })
    }

    fn is_indexed(&self) -> bool {
        self.spec.completion_mode.as_deref() == Some("Indexed")
    }

    fn completions(&self) -> Option<i64> {
        self.spec.completions.map(i64::from)
    }

    fn suspended(&self) -> bool {
        self.spec.suspend.unwrap_or(false)
    }

    fn per_index_limit(&self) -> Option<i64> {
        self.spec.backoff_limit_per_index.map(i64::from)
    }

    fn ttl(&self) -> Option<i64> {
        self.spec.ttl_seconds_after_finished.map(i64::from)
    }

    /// The first condition of `kind`.
    fn condition(&self, kind: &str) -> Option<&JobCondition> {
        self.status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind)
    }

    fn has_true_condition(&self, kind: &str) -> bool {
        self.condition(kind).is_some_and(|c| c.status == "True")
    }

    /// The finished condition (`Complete` or `Failed`), if it is true.
    fn finished(&self) -> Option<&JobCondition> {
        ["Complete", "Failed"]
            .into_iter()
            .filter_map(|t| self.condition(t))
            .find(|c| c.status == "True")
    }

    /// When it finished: its finished condition's last transition.
    fn finished_at(&self) -> Option<Timestamp> {
        self.finished()?.last_transition_time.as_ref().map(|t| t.0)
    }

    /// The uids in `status.uncountedTerminatedPods.succeeded` and `.failed`.
    fn uncounted(&self) -> (HashSet<String>, HashSet<String>) {
        let u = self.status.uncounted_terminated_pods.as_ref();
        let set = |l: Option<&Vec<String>>| l.into_iter().flatten().cloned().collect();
        (
            set(u.and_then(|u| u.succeeded.as_ref())),
            set(u.and_then(|u| u.failed.as_ref())),
        )
    }
}

/// What the watch handlers read of a Job (serde skips the rest).
#[derive(Deserialize, Default)]
struct Watched {
    spec: Option<WatchedSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedSpec {
    selector: Option<LabelSelector>,
    ttl_seconds_after_finished: Option<i64>,
}

impl Watched {
    fn of(job: &Value) -> Self {
        Self::deserialize(job).unwrap_or_default()
    }
}

/// A Job's pod selector (the empty selector, matching nothing here, if it has none).
fn selector_of(selector: Option<&LabelSelector>) -> labels::Selector {
    selector
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|s| labels::Selector::from_label_selector(&s).ok())
        .unwrap_or_default()
}

fn has_finalizer(pod: &Value) -> bool {
    array_at(pod, "/metadata/finalizers")
        .iter()
        .any(|f| f == TRACKING_FINALIZER)
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

/// Only pods that failed are replaced (not those still terminating).
fn only_replace_failed(spec: &JobSpec) -> bool {
    spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some()
}

/// `isPodFailed`: failed, or (unless only failed pods are replaced) deleted before it
/// could succeed.
fn is_pod_failed(pod: &Value, spec: &JobSpec) -> bool {
    phase(pod) == "Failed"
        || (!only_replace_failed(spec) && is_deleting(pod) && phase(pod) != "Succeeded")
}

/// A pod's completion index, if it has a valid one below `completions`.
fn index_of(pod: &Value, completions: i64) -> Option<i64> {
    str_at(pod, COMPLETION_INDEX_AT)
        .parse::<i64>()
        .ok()
        .filter(|&i| i >= 0 && i < completions)
}

/// A count kept in the pod annotation at `pointer` (0 if none).
fn annotation_count(pod: &Value, pointer: &str) -> i64 {
    str_at(pod, pointer).parse().unwrap_or(0)
}

/// The finished condition (`Complete` or `Failed`) of a Job kept as JSON, if it is true:
/// a status as written, or a Job read outside its own sync.
fn finished_condition(job: &Value) -> Option<&Value> {
    ["Complete", "Failed"]
        .into_iter()
        .filter_map(|t| crate::types::condition(job, t))
        .find(|c| str_at(c, "/status") == "True")
}

fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// `getFinishedTime`: the latest container finish, else when Ready went False, else the
/// deletion time less its grace, else the creation time.
fn finished_time(pod: &Value) -> Option<Timestamp> {
    let statuses = array_at(pod, "/status/containerStatuses");
    if !statuses.is_empty() {
        let latest = statuses.iter().try_fold(None::<Timestamp>, |latest, c| {
            let t = parse_time(str_at(c, "/state/terminated/finishedAt"))?;
            Some(Some(latest.map_or(t, |l| l.max(t))))
        });
        if let Some(Some(t)) = latest {
            return Some(t);
        }
    }
    if let Some(c) =
        crate::types::condition(pod, "Ready").filter(|c| str_at(c, "/status") == "False")
        && let Some(t) = parse_time(str_at(c, "/lastTransitionTime"))
    {
        return Some(t);
    }
    if let Some(t) = parse_time(str_at(pod, "/metadata/deletionTimestamp")) {
        let grace = int_at(pod, "/metadata/deletionGracePeriodSeconds");
        return t.checked_sub(jiff::SignedDuration::from_secs(grace)).ok();
    }
    parse_time(str_at(pod, "/metadata/creationTimestamp"))
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

    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(shared) = self.jobs.get(&key) else {
            self.expectations.forget(&key);
            self.removing.lock().expect("lock").remove(&key);
            self.backoff.lock().expect("lock").remove(&key);
            return Ok(Action::Done);
        };
        let job = JobView::decode(&shared)?;
        if job.finished().is_some() {
            self.backoff.lock().expect("lock").remove(&key);
            // Pods still holding the finalizer (a crash between the last steps) let go.
            for pod in self.owned_pods(&job) {
                if has_finalizer(&pod) {
                    self.remove_finalizer(&pod).await?;
                }
            }
            return Ok(self.ttl_action(job.ttl(), job.finished_at()));
        }
        let mode = job.spec.completion_mode.as_deref().unwrap_or("");
        if !mode.is_empty() && mode != "NonIndexed" && mode != "Indexed" {
            self.recorder
                .warning(
                    job.raw,
                    "UnknownCompletionMode",
                    "Skipped Job sync because completion mode is unknown",
                )
                .await;
            return Ok(Action::Done);
        }
        // The body of the status writes: the stored object, its status changed in place.
        let mut obj = (*shared).clone();
        status_mut(&mut obj);
        let satisfied = self.expectations.satisfied(&key);
        let selector = selector_of(job.spec.selector.as_ref());
        if selector.is_empty() {
            return Ok(Action::Done);
        }
        let pods = Claim {
            client: &self.client,
            kind: JOBS,
            owners: self.jobs.resource(),
            children: &self.pods,
            owner: job.raw,
            selector: &selector,
        }
        .run()
        .await?;
        let (uncounted_succeeded, uncounted_failed) = job.uncounted();
        let mut s = Sync {
            uncounted_succeeded,
            uncounted_failed,
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
                && (!job.is_indexed() || index_of(p, job.completions().unwrap_or(0)).is_some())
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
                counting(p) && !s.uncounted_failed.contains(uid(p)) && is_pod_failed(p, &job.spec)
            })
            .collect();
        s.succeeded = job.status.succeeded.map_or(0, i64::from)
            + new_succeeded.len() as i64
            + s.uncounted_succeeded.len() as i64;
        let counted_failures = new_failed
            .iter()
            .filter(|p| match_failure_policy(&job.spec, p).1)
            .count() as i64;
        let failed = job.status.failed.map_or(0, i64::from)
            + counted_failures
            + s.uncounted_failed.len() as i64;
        let now = self.now();
        let now_str = self.now_str();
        let mut start_time = job.status.start_time.as_ref().map(|t| t.0);
        if start_time.is_none() && !job.suspended() {
            status_mut(&mut obj).insert("startTime".into(), now_str.clone().into());
            start_time = parse_time(&now_str);
        }
        let backoff = self.next_backoff(&key, &new_succeeded, &new_failed);
        let mut requeue: Option<Duration> = None;

        // Has it finished, and how?
        let interim = |kind: &'static str, c: &JobCondition| Cond {
            kind,
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        };
        if let Some(ft) = job
            .condition("FailureTarget")
            .filter(|c| c.status == "True")
        {
            s.finished = Some(interim("Failed", ft));
        } else if let Some(sc) = job
            .condition("SuccessCriteriaMet")
            .filter(|c| c.status == "True")
        {
            s.finished = Some(interim("Complete", sc));
        } else if let Some(message) = s
            .pods
            .iter()
            .filter(|p| is_pod_failed(p, &job.spec))
            .find_map(|p| match_failure_policy(&job.spec, p).0)
        {
            s.finished = Some(Cond::failure("PodFailurePolicy", &message));
        }
        let limit = job.spec.backoff_limit.map_or(6, i64::from);
        if s.finished.is_none() {
            if failed > limit || past_backoff_limit_on_failure(&job.spec, &s.pods, limit) {
                s.finished = Some(Cond::failure(
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            } else if let Some(left) = self.deadline_left(&job, start_time, now) {
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
        if job.is_indexed() {
            let c = job.completions().unwrap_or(0);
            let completed = job.status.completed_indexes.as_deref().unwrap_or("");
            s.prev_succeeded_indexes = parse_indexes(completed, c);
            let mut all = s.prev_succeeded_indexes.clone();
            all.extend(
                s.pods
                    .iter()
                    .filter(|p| phase(p) == "Succeeded" && has_finalizer(p))
                    .filter_map(|p| index_of(p, c)),
            );
            s.succeeded_indexes = all;
            s.succeeded = s.succeeded_indexes.len() as i64;
            if let Some(per_index) = job.per_index_limit() {
                let failed = job.status.failed_indexes.as_deref().unwrap_or("");
                let mut failed_ix = parse_indexes(failed, c);
                failed_ix.extend(
                    s.pods
                        .iter()
                        .filter(|p| has_finalizer(p) && is_index_failed(&job.spec, p, per_index))
                        .filter_map(|p| index_of(p, c)),
                );
                if s.finished.is_none() {
                    let max = job.spec.max_failed_indexes.map(i64::from);
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
            if s.finished.is_none()
                && let Some(message) = match_success_policy(&job.spec, &s.succeeded_indexes, c)
            {
                s.finished = Some(Cond {
                    kind: "SuccessCriteriaMet",
                    reason: "SuccessPolicy".into(),
                    message,
                });
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
            if satisfied && !job.is_deleting() {
                let (after, wait) = self.manage(&key, &job, &mut s, &active, backoff).await?;
                n_active = after;
                if let Some(w) = wait {
                    requeue = Some(requeue.map_or(w, |r| r.min(w)));
                }
                managed = true;
            }
            let complete = match job.completions() {
                None => s.succeeded > 0 && n_active == 0,
                Some(c) => s.succeeded >= c && n_active == 0,
            };
            if complete {
                s.finished = Some(Cond::success());
            } else if managed {
                if job.suspended() {
                    if ensure_condition(
                        &mut obj,
                        "Suspended",
                        "True",
                        "JobSuspended",
                        "Job suspended",
                        &now_str,
                    ) {
                        suspend_changed = true;
                        self.recorder
                            .normal(&obj, "Suspended", "Job suspended")
                            .await;
                    }
                } else if ensure_condition(
                    &mut obj,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    &now_str,
                ) {
                    suspend_changed = true;
                    self.recorder.normal(&obj, "Resumed", "Job resumed").await;
                    // The deadline counts from the resumption.
                    status_mut(&mut obj).insert("startTime".into(), now_str.clone().into());
                }
            }
        }
        let needs = suspend_changed
            || job.status.active.map_or(0, i64::from) != n_active
            || job.status.ready.map(i64::from) != Some(s.ready)
            || job.status.terminating.map(i64::from) != Some(s.terminating);
        let status = status_mut(&mut obj);
        status.insert("active".into(), n_active.into());
        status.insert("ready".into(), s.ready.into());
        status.insert("terminating".into(), s.terminating.into());
        let needs =
            needs || str_at(job.raw, "/status/startTime") != str_at(&obj, "/status/startTime");
        self.track(&key, &job, &mut obj, &mut s, needs, backoff)
            .await?;
        Ok(match requeue {
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }

    fn owned_pods(&self, job: &JobView) -> Vec<Arc<Value>> {
        self.pods
            .list_namespace(job.namespace())
            .into_iter()
            .filter(|p| controller_ref(p).is_some_and(|r| str_at(r, "/uid") == job.uid()))
            .collect()
    }

    fn deadline_left(
        &self,
        job: &JobView,
        start_time: Option<Timestamp>,
        now: Timestamp,
    ) -> Option<Duration> {
        let secs = job.spec.active_deadline_seconds?;
        if job.suspended() {
            return None;
        }
        let end = start_time?
            .checked_add(jiff::SignedDuration::from_secs(secs))
            .ok()?;
        let left = end.duration_since(now);
        Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
    }

    /// A pod with the finalizer whose Job is gone (or finished) lets go of it.
    async fn release_orphan(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(pod) = self.pods.get(&key) else {
            return Ok(Action::Done);
        };
        if !has_finalizer(&pod) {
            return Ok(Action::Done);
        }
        if let Some(r) = controller_ref(&pod) {
            if str_at(r, "/kind") != "Job" || str_at(r, "/apiVersion") != "batch/v1" {
                return Ok(Action::Done);
            }
            let job_key = format!(
                "{}/{}",
                str_at(&pod, "/metadata/namespace"),
                str_at(r, "/name")
            );
            // The Job is only looked at here: two fields, read without decoding it.
            if let Some(job) = self.jobs.get(&job_key)
                && uid(&job) == str_at(r, "/uid")
                && finished_condition(&job).is_none()
            {
                return Ok(Action::Done);
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
    let ttl_of = move |change: Change<'_>, _: &Queue| {
        let spec = Watched::of(change.object()).spec;
        if spec.is_some_and(|s| s.ttl_seconds_after_finished.is_some()) {
            ttl_queue.add(key_of(change.object()));
        }
    };
    let matching = runtime::selecting(&jobs, |j| {
        let spec = Watched::of(j).spec;
        selector_of(spec.as_ref().and_then(|s| s.selector.as_ref()))
    });
    // A tracked pod whose finalizer is gone (or the pod itself) is no longer being
    // removed: said before its job is queued, which the next handler does.
    let finalizers = {
        let removing = removing.clone();
        move |change: Change<'_>, _: &Queue| {
            let pod = change.object();
            let removed = match change {
                Change::Updated { old, new } => has_finalizer(old) && !has_finalizer(new),
                Change::Deleted(_) => true,
                Change::Added(_) => false,
            };
            if removed
                && let Some(owner) = JOBS.key_of_controller(pod)
                && let Some(set) = removing.lock().expect("lock").get_mut(&owner)
            {
                set.remove(uid(pod));
            }
            if has_finalizer(pod) && !matches!(change, Change::Deleted(_)) {
                orphan_queue.add(key_of(pod));
            }
        }
    };
    let jobs_controller = runtime::Controller::new("job-controller")
        .reconciles_expecting(&jobs, &expectations)
        .watches(&jobs, ttl_of)
        .watches(&pods, finalizers)
        .owns_or_adopts_expecting(&pods, JOBS, matching, &expectations)
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
    jobs_controller.run_with(sup, c.clone(), Controller::reconcile);
    orphans.run_with(sup, c.clone(), Controller::release_orphan);
    ttl.run_with(sup, c, Controller::expire);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_annotation_pointers_name_the_annotations() {
        for (key, at) in [
            (COMPLETION_INDEX, COMPLETION_INDEX_AT),
            (FAILURE_COUNT, FAILURE_COUNT_AT),
            (IGNORED_FAILURE_COUNT, IGNORED_FAILURE_COUNT_AT),
        ] {
            let pod = json!({"metadata": {"annotations": {key: "7"}}});
            assert_eq!(annotation_count(&pod, at), 7, "{key}");
        }
    }
}
