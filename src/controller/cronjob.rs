//! The cronjob controller: makes each CronJob's Jobs on its schedule, as
//! kube-controller-manager's (`pkg/controller/cronjob`, the v2 controller) does.
//!
//! Each sync reconciles `status.active` with the Jobs the CronJob controls (finished ones
//! leave it, `SawCompletedJob`; vanished ones too, `MissingJob`), deletes finished Jobs
//! beyond the history limits, then looks for the most recent schedule time not yet
//! acted on, read in `spec.timeZone`: past `startingDeadlineSeconds` it is missed
//! (`MissSchedule`); with `Forbid` and a Job still active it is skipped
//! (`JobAlreadyActive`); with `Replace` the active Jobs go first; otherwise the Job
//! `NAME-<minutes since the epoch>` is made from the template. Then it sleeps until the
//! next schedule time: one requeue, no polling. Time comes from the injected clock, so
//! tests move it instead of waiting for minutes to pass.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::claim::{OwnerKind, controller_ref, is_deleting};
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::Informer;
use crate::client::recorder::Recorder;
use crate::client::{Client, DeleteParams, Kind, Propagation, catalog};
use crate::types::clock::Clock;
use crate::types::cron;
use crate::types::json::str_at;

pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// More missed start times than this are reported (and only the latest is run).
const TOO_MANY_MISSED: usize = 100;
const WORKERS: usize = 5;

const CRON_JOBS: OwnerKind = OwnerKind {
    api_version: "batch/v1",
    kind_name: "CronJob",
};

fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

fn seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// The finished condition of a Job (`Complete` or `Failed`), if any. The CronJob's Jobs
/// stay JSON, read a field at a time, not decoded whole at each sync.
fn finished(job: &Value) -> Option<&'static str> {
    ["Complete", "Failed"]
        .into_iter()
        .find(|t| crate::types::condition(job, t).is_some_and(|c| str_at(c, "/status") == "True"))
}

/// What a sync writes into a CronJob's status; the rest of it stays as stored.
struct Edit {
    /// `status.active`, always written.
    active: Vec<ObjectReference>,
    last_successful_time: Option<String>,
    last_schedule_time: Option<String>,
    /// Whether anything was found to write (the status is written only then, and only
    /// if it differs).
    changed: bool,
}

/// What the schedule asks for at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The most recent schedule time not yet acted on.
    pub scheduled: Option<Timestamp>,
    /// How many schedule times were passed over (more than [`TOO_MANY_MISSED`] is
    /// reported as such).
    pub missed: usize,
    /// The next schedule time after `now`.
    pub next: Option<Timestamp>,
}

/// `mostRecentScheduleTime`: the schedule times after the last one acted on (or the
/// creation, or the starting deadline, whichever is latest), up to `now`.
pub fn due(
    sched: &cron::Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    deadline: Option<i64>,
    now: Timestamp,
) -> Due {
    let mut from = earliest;
    if let Some(d) = deadline
        && let Ok(limit) = now.checked_sub(jiff::SignedDuration::from_secs(d))
    {
        from = from.max(limit);
    }
    let mut scheduled = None;
    let mut missed = 0;
    let mut t = from;
    while let Some(n) = sched.next_after(t, tz).filter(|n| *n <= now) {
        missed += 1;
        scheduled = Some(n);
        t = n;
        if missed > TOO_MANY_MISSED {
            // Jump to the latest time before `now` rather than walking every minute of
            // a long outage.
            if let cron::Schedule::Fields(_) = sched {
                let mut probe = now
                    .checked_sub(jiff::SignedDuration::from_secs(366 * 86400))
                    .unwrap_or(t)
                    .max(t);
                while let Some(n) = sched.next_after(probe, tz).filter(|n| *n <= now) {
                    scheduled = Some(n);
                    probe = n;
                }
            }
            break;
        }
    }
    Due {
        scheduled,
        missed,
        next: sched.next_after(now, tz),
    }
}

/// A CronJob's Job name for a schedule time (`getJobName`).
pub fn job_name(cron_job: &str, scheduled: Timestamp) -> String {
    format!("{cron_job}-{}", scheduled.as_second() / 60)
}

#[derive(Clone)]
struct Controller {
    client: Client,
    cron_jobs: Informer,
    jobs: Informer,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(shared) = self.cron_jobs.get(&key) else {
            return Ok(Action::Done);
        };
        let cron_job: CronJob = decode(&shared)?;
        let meta = cron_job.metadata;
        let spec = cron_job.spec;
        let status = cron_job.status.unwrap_or_default();
        let ns = meta.namespace.clone().unwrap_or_default();
        let uid = meta.uid.clone().unwrap_or_default();
        let children: Vec<Arc<Value>> = self
            .jobs
            .list_namespace(&ns)
            .into_iter()
            .filter(|j| controller_ref(j).is_some_and(|r| str_at(r, "/uid") == uid))
            .collect();
        let mut edit = Edit {
            active: status.active.clone().unwrap_or_default(),
            last_successful_time: None,
            last_schedule_time: None,
            changed: false,
        };
        let mut last_success = status.last_successful_time.as_ref().map(|t| t.0);
        let in_active = |active: &[ObjectReference], uid: &str| {
            active.iter().any(|r| r.uid.as_deref() == Some(uid))
        };
        for child in &children {
            let name = str_at(child, "/metadata/name");
            let child_uid = str_at(child, "/metadata/uid");
            match (in_active(&edit.active, child_uid), finished(child)) {
                (false, None) => {
                    self.recorder
                        .warning(
                            &shared,
                            "UnexpectedJob",
                            &format!(
                                "Saw a job that the controller did not create or forgot: {name}"
                            ),
                        )
                        .await;
                }
                (true, Some(cond)) => {
                    edit.active.retain(|r| r.uid.as_deref() != Some(child_uid));
                    edit.changed = true;
                    self.recorder
                        .normal(
                            &shared,
                            "SawCompletedJob",
                            &format!("Saw completed job: {name}, condition: {cond}"),
                        )
                        .await;
                }
                _ => {}
            }
            if finished(child) == Some("Complete") {
                let done = str_at(child, "/status/completionTime");
                if let Some(t) = parse_time(done).filter(|t| last_success < Some(*t)) {
                    edit.last_successful_time = Some(done.to_string());
                    last_success = Some(t);
                    edit.changed = true;
                }
            }
        }
        // Active Jobs that are gone (asked of the API: the cache may not show a new one yet).
        let before = edit.active.len();
        let mut kept = Vec::new();
        for r in std::mem::take(&mut edit.active) {
            let r_uid = r.uid.as_deref();
            let here = children
                .iter()
                .any(|j| Some(str_at(j, "/metadata/uid")) == r_uid);
            let name = r.name.clone().unwrap_or_default();
            let gone = !here
                && match self
                    .client
                    .get(self.jobs.resource(), Some(&ns), &name)
                    .await
                {
                    Ok(j) => Some(str_at(&j, "/metadata/uid")) != r_uid,
                    Err(e) if e.is_not_found() => true,
                    Err(e) => return Err(e.into()),
                };
            if gone {
                self.recorder
                    .normal(
                        &shared,
                        "MissingJob",
                        &format!("Active job went missing: {name}"),
                    )
                    .await;
            } else {
                kept.push(r);
            }
        }
        edit.changed |= kept.len() != before;
        edit.active = kept;
        if self.cleanup(&shared, &spec, &ns, &children).await? {
            edit.changed = true;
        }
        if meta.deletion_timestamp.is_some() {
            return self.finish(&shared, edit, None).await;
        }
        let tz = match spec.time_zone.as_deref() {
            None => TimeZone::system(),
            Some(name) => match jiff::tz::db().get(name) {
                Ok(tz) => tz,
                Err(e) => {
                    self.recorder
                        .warning(
                            &shared,
                            "UnknownTimeZone",
                            &format!("invalid timeZone: {name:?}: {e}"),
                        )
                        .await;
                    return self.finish(&shared, edit, None).await;
                }
            },
        };
        if spec.suspend.unwrap_or(false) {
            return self.finish(&shared, edit, None).await;
        }
        let schedule = spec.schedule.as_str();
        let sched = match cron::parse(schedule) {
            Ok(s) => s,
            Err(e) => {
                self.recorder
                    .warning(
                        &shared,
                        "InvalidSchedule",
                        &format!("unparseable schedule: {schedule:?} : {e}"),
                    )
                    .await;
                return self.finish(&shared, edit, None).await;
            }
        };
        let now = self.clock.now();
        let earliest = status
            .last_schedule_time
            .as_ref()
            .or(meta.creation_timestamp.as_ref())
            .map_or(now, |t| t.0);
        let deadline = spec.starting_deadline_seconds;
        let due = due(&sched, &tz, earliest, deadline, now);
        let wake = due.next.map(|n| {
            Duration::try_from(n.duration_since(now)).unwrap_or(Duration::ZERO)
                + Duration::from_millis(100)
        });
        if due.missed > TOO_MANY_MISSED {
            self.recorder
                .warning(&shared, "TooManyMissedTimes",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                )
                .await;
        }
        let Some(scheduled) = due.scheduled else {
            return self.finish(&shared, edit, wake).await;
        };
        if let Some(d) = deadline {
            let late = scheduled
                .checked_add(jiff::SignedDuration::from_secs(d))
                .is_ok_and(|t| t < now);
            if late {
                let at = jiff::fmt::rfc2822::to_string(&scheduled.to_zoned(TimeZone::UTC))
                    .unwrap_or_default();
                self.recorder
                    .warning(
                        &shared,
                        "MissSchedule",
                        &format!("Missed scheduled time to start a job: {at}"),
                    )
                    .await;
                return self.finish(&shared, edit, wake).await;
            }
        }
        let name = job_name(meta.name.as_deref().unwrap_or(""), scheduled);
        if edit.active.iter().any(|r| r.name.as_ref() == Some(&name))
            || children.iter().any(|j| str_at(j, "/metadata/name") == name)
        {
            return self.finish(&shared, edit, wake).await;
        }
        let policy = spec.concurrency_policy.as_deref().unwrap_or("");
        let running = edit.active.iter().any(|r| r.name.is_some());
        if policy == "Forbid" && running {
            self.recorder
                .normal(&shared, "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid",
                )
                .await;
            return self.finish(&shared, edit, wake).await;
        }
        if policy == "Replace" && running {
            for r in std::mem::take(&mut edit.active) {
                let name = r.name.as_deref().unwrap_or("");
                self.delete_job(&shared, &ns, name, r.uid.as_deref())
                    .await?;
            }
            edit.changed = true;
        }
        let job = job_from_template(&shared, &meta, &spec, &name, scheduled, &tz);
        match self
            .client
            .create(self.jobs.resource(), Some(&ns), &job)
            .await
        {
            Ok(made) => {
                self.recorder
                    .normal(&shared, "SuccessfulCreate", &format!("Created job {name}"))
                    .await;
                edit.active.push(ObjectReference {
                    kind: Some("Job".into()),
                    api_version: Some("batch/v1".into()),
                    namespace: Some(ns.clone()),
                    name: Some(name.clone()),
                    uid: Some(str_at(&made, "/metadata/uid").into()),
                    resource_version: Some(str_at(&made, "/metadata/resourceVersion").into()),
                    field_path: None,
                });
            }
            Err(e) if e.is_already_exists() => {
                // Made by an earlier sync whose status write was lost: its record follows.
            }
            Err(e) => {
                self.recorder
                    .warning(&shared, "FailedCreate", &format!("Error creating job: {e}"))
                    .await;
                self.finish(&shared, edit, None).await?;
                return Err(e.into());
            }
        }
        edit.last_schedule_time = Some(seconds(scheduled));
        edit.changed = true;
        self.finish(&shared, edit, wake).await
    }

    /// Writes the status if it changed; then sleeps until the next schedule time. The
    /// status is written as stored JSON with the edited fields set (no typed round trip).
    async fn finish(&self, old: &Value, edit: Edit, wake: Option<Duration>) -> Result<Action> {
        if edit.changed {
            let mut status = match old.get("status") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            status.insert("active".into(), json!(edit.active));
            if let Some(t) = edit.last_successful_time {
                status.insert("lastSuccessfulTime".into(), json!(t));
            }
            if let Some(t) = edit.last_schedule_time {
                status.insert("lastScheduleTime".into(), json!(t));
            }
            let status = Value::Object(status);
            if old.get("status") != Some(&status) {
                let mut cj = old.clone();
                cj.as_object_mut()
                    .expect("a CronJob is an object")
                    .insert("status".into(), status);
                self.client
                    .update_status(self.cron_jobs.resource(), &cj)
                    .await?;
            }
        }
        Ok(wake.map_or(Action::Done, Action::RequeueAfter))
    }

    async fn delete_job(&self, cj: &Value, ns: &str, name: &str, uid: Option<&str>) -> Result<()> {
        let params = DeleteParams {
            propagation: Some(Propagation::Background),
            uid: uid.map(String::from),
            ..DeleteParams::default()
        };
        match self
            .client
            .delete(self.jobs.resource(), Some(ns), name, &params)
            .await
        {
            Ok(_) => {
                self.recorder
                    .normal(cj, "SuccessfulDelete", &format!("Deleted job {name}"))
                    .await;
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                self.recorder
                    .warning(cj, "FailedDelete", &format!("Deleted job: {e}"))
                    .await;
                Err(e.into())
            }
        }
    }

    /// Deletes the oldest finished Jobs beyond the history limits; returns whether any
    /// went.
    async fn cleanup(
        &self,
        cj: &Value,
        spec: &CronJobSpec,
        ns: &str,
        children: &[Arc<Value>],
    ) -> Result<bool> {
        let mut any = false;
        for (cond, limit) in [
            ("Complete", spec.successful_jobs_history_limit),
            ("Failed", spec.failed_jobs_history_limit),
        ] {
            let Some(limit) = limit else {
                continue;
            };
            let mut done: Vec<&Arc<Value>> = children
                .iter()
                .filter(|j| finished(j) == Some(cond) && !is_deleting(j))
                .collect();
            let started = |j: &Value| {
                let start = str_at(j, "/status/startTime");
                if start.is_empty() {
                    parse_time(str_at(j, "/metadata/creationTimestamp"))
                } else {
                    parse_time(start)
                }
            };
            done.sort_by_key(|j| started(j));
            let extra = done.len().saturating_sub(limit.max(0) as usize);
            for j in done.into_iter().take(extra) {
                self.delete_job(
                    cj,
                    ns,
                    str_at(j, "/metadata/name"),
                    Some(str_at(j, "/metadata/uid")),
                )
                .await?;
                any = true;
            }
        }
        Ok(any)
    }
}

/// `getJobFromTemplate2`: the Job for one schedule time. Its spec is the template's as
/// stored (JSON): a typed round trip would rewrite what the server receives.
fn job_from_template(
    cj: &Value,
    meta: &ObjectMeta,
    spec: &CronJobSpec,
    name: &str,
    scheduled: Timestamp,
    tz: &TimeZone,
) -> Value {
    let template = spec.job_template.metadata.as_ref();
    let labels = template.and_then(|m| m.labels.clone()).unwrap_or_default();
    let mut annotations = template
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    let at = Timestamp::from_second(scheduled.as_second())
        .unwrap_or(scheduled)
        .to_zoned(tz.clone());
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        at.strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string()
            .replace("+00:00", "Z"),
    );
    let job_spec = cj
        .pointer("/spec/jobTemplate/spec")
        .cloned()
        .unwrap_or_default();
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name,
        "namespace": meta.namespace.as_deref().unwrap_or(""),
        "ownerReferences": [CRON_JOBS.controlled_by(cj)],
        "labels": labels,
        "annotations": annotations,
    }, "spec": job_spec})
}

pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let cron_jobs = ctx.informers.get(catalog::of(Kind::CronJob));
    let jobs = ctx.informers.get(catalog::of(Kind::Job));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        cron_jobs: cron_jobs.clone(),
        jobs: jobs.clone(),
        recorder: ctx.recorder("cronjob-controller"),
        clock: ctx.clock.clone(),
    });
    runtime::Controller::new("cronjob-controller")
        .reconciles(&cron_jobs)
        .owns(&jobs, CRON_JOBS)
        .workers(WORKERS)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests;
