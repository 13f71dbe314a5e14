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
use serde_json::{Value, json};

use super::claim::{OwnerKind, controller_ref, is_deleting, str_at};
use super::{Action, Context, Result, Supervisor, runtime};
use crate::client::informer::Informer;
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, DeleteParams, Kind, Propagation, catalog};
use crate::types::clock::Clock;
use crate::types::cron;

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

/// The finished condition of a Job (`Complete` or `Failed`), if any.
fn finished(job: &Value) -> Option<&'static str> {
    ["Complete", "Failed"]
        .into_iter()
        .find(|t| crate::types::condition(job, t).is_some_and(|c| c["status"] == "True"))
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
    if let Some(d) = deadline {
        if let Ok(limit) = now.checked_sub(jiff::SignedDuration::from_secs(d)) {
            from = from.max(limit);
        }
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
    async fn reconcile(&self, key: String) -> Result<Action> {
        let Some(shared) = self.cron_jobs.get(&key) else {
            return Ok(Action::Done);
        };
        let mut cj = (*shared).clone();
        if !cj["status"].is_object() {
            cj["status"] = json!({});
        }
        let ns = str_at(&cj, "/metadata/namespace").to_string();
        let uid = str_at(&cj, "/metadata/uid").to_string();
        let children: Vec<Arc<Value>> = self
            .jobs
            .list_namespace(&ns)
            .into_iter()
            .filter(|j| controller_ref(j).is_some_and(|r| r["uid"] == uid))
            .collect();
        let mut changed = false;
        let mut active: Vec<Value> = cj["status"]["active"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let in_active =
            |active: &[Value], j: &Value| active.iter().any(|r| r["uid"] == j["metadata"]["uid"]);
        for child in &children {
            let name = str_at(child, "/metadata/name");
            match (in_active(&active, child), finished(child)) {
                (false, None) => {
                    self.recorder
                        .event(
                            &cj,
                            EventType::Warning,
                            "UnexpectedJob",
                            &format!(
                                "Saw a job that the controller did not create or forgot: {name}"
                            ),
                        )
                        .await;
                }
                (true, Some(cond)) => {
                    active.retain(|r| r["uid"] != child["metadata"]["uid"]);
                    changed = true;
                    self.recorder
                        .event(
                            &cj,
                            EventType::Normal,
                            "SawCompletedJob",
                            &format!("Saw completed job: {name}, condition: {cond}"),
                        )
                        .await;
                }
                _ => {}
            }
            if finished(child) == Some("Complete") {
                let done = child
                    .pointer("/status/completionTime")
                    .and_then(Value::as_str);
                let last = cj
                    .pointer("/status/lastSuccessfulTime")
                    .and_then(Value::as_str);
                if let Some(done) = done {
                    if last.and_then(parse_time) < parse_time(done) {
                        cj["status"]["lastSuccessfulTime"] = json!(done);
                        changed = true;
                    }
                }
            }
        }
        // Active Jobs that are gone (asked of the API: the cache may not show a new one yet).
        let before = active.len();
        let mut kept = Vec::new();
        for r in active {
            let here = children.iter().any(|j| j["metadata"]["uid"] == r["uid"]);
            let name = r["name"].as_str().unwrap_or("").to_string();
            let gone = !here
                && match self
                    .client
                    .get(self.jobs.resource(), Some(&ns), &name)
                    .await
                {
                    Ok(j) => j["metadata"]["uid"] != r["uid"],
                    Err(e) if e.is_not_found() => true,
                    Err(e) => return Err(e.into()),
                };
            if gone {
                self.recorder
                    .event(
                        &cj,
                        EventType::Normal,
                        "MissingJob",
                        &format!("Active job went missing: {name}"),
                    )
                    .await;
            } else {
                kept.push(r);
            }
        }
        let active = kept;
        changed |= active.len() != before;
        cj["status"]["active"] = json!(active);
        if self.cleanup(&cj, &children).await? {
            changed = true;
        }
        if is_deleting(&cj) {
            return self.finish(&shared, cj, changed, None).await;
        }
        let tz = match cj.pointer("/spec/timeZone").and_then(Value::as_str) {
            None => TimeZone::system(),
            Some(name) => match jiff::tz::db().get(name) {
                Ok(tz) => tz,
                Err(e) => {
                    self.recorder
                        .event(
                            &cj,
                            EventType::Warning,
                            "UnknownTimeZone",
                            &format!("invalid timeZone: {name:?}: {e}"),
                        )
                        .await;
                    return self.finish(&shared, cj, changed, None).await;
                }
            },
        };
        if cj
            .pointer("/spec/suspend")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            return self.finish(&shared, cj, changed, None).await;
        }
        let schedule = str_at(&cj, "/spec/schedule").to_string();
        let sched = match cron::parse(&schedule) {
            Ok(s) => s,
            Err(e) => {
                self.recorder
                    .event(
                        &cj,
                        EventType::Warning,
                        "InvalidSchedule",
                        &format!("unparseable schedule: {schedule:?} : {e}"),
                    )
                    .await;
                return self.finish(&shared, cj, changed, None).await;
            }
        };
        let now = self.clock.now();
        let earliest = cj
            .pointer("/status/lastScheduleTime")
            .and_then(Value::as_str)
            .or_else(|| {
                cj.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
            })
            .and_then(parse_time)
            .unwrap_or(now);
        let deadline = cj
            .pointer("/spec/startingDeadlineSeconds")
            .and_then(Value::as_i64);
        let due = due(&sched, &tz, earliest, deadline, now);
        let wake = due.next.map(|n| {
            Duration::try_from(n.duration_since(now)).unwrap_or(Duration::ZERO)
                + Duration::from_millis(100)
        });
        if due.missed > TOO_MANY_MISSED {
            self.recorder
                .event(
                    &cj,
                    EventType::Warning,
                    "TooManyMissedTimes",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                )
                .await;
        }
        let Some(scheduled) = due.scheduled else {
            return self.finish(&shared, cj, changed, wake).await;
        };
        if let Some(d) = deadline {
            let late = scheduled
                .checked_add(jiff::SignedDuration::from_secs(d))
                .is_ok_and(|t| t < now);
            if late {
                let at = jiff::fmt::rfc2822::to_string(&scheduled.to_zoned(TimeZone::UTC))
                    .unwrap_or_default();
                self.recorder
                    .event(
                        &cj,
                        EventType::Warning,
                        "MissSchedule",
                        &format!("Missed scheduled time to start a job: {at}"),
                    )
                    .await;
                return self.finish(&shared, cj, changed, wake).await;
            }
        }
        let name = job_name(str_at(&cj, "/metadata/name"), scheduled);
        let active_names = |cj: &Value| -> Vec<String> {
            cj["status"]["active"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["name"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        if active_names(&cj).contains(&name)
            || children.iter().any(|j| str_at(j, "/metadata/name") == name)
        {
            return self.finish(&shared, cj, changed, wake).await;
        }
        let policy = str_at(&cj, "/spec/concurrencyPolicy");
        let running = !active_names(&cj).is_empty();
        if policy == "Forbid" && running {
            self.recorder
                .event(
                    &cj,
                    EventType::Normal,
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid",
                )
                .await;
            return self.finish(&shared, cj, changed, wake).await;
        }
        if policy == "Replace" && running {
            for r in cj["status"]["active"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                self.delete_job(&cj, r["name"].as_str().unwrap_or(""), r["uid"].as_str())
                    .await?;
            }
            cj["status"]["active"] = json!([]);
            changed = true;
        }
        let job = job_from_template(&cj, &name, scheduled, &tz);
        match self
            .client
            .create(self.jobs.resource(), Some(&ns), &job)
            .await
        {
            Ok(made) => {
                self.recorder
                    .event(
                        &cj,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created job {name}"),
                    )
                    .await;
                let mut list = cj["status"]["active"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                list.push(json!({
                    "kind": "Job", "apiVersion": "batch/v1", "namespace": ns, "name": name,
                    "uid": made["metadata"]["uid"], "resourceVersion": made["metadata"]["resourceVersion"],
                }));
                cj["status"]["active"] = json!(list);
            }
            Err(e) if e.is_already_exists() => {
                // Made by an earlier sync whose status write was lost: its record follows.
            }
            Err(e) => {
                self.recorder
                    .event(
                        &cj,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("Error creating job: {e}"),
                    )
                    .await;
                self.finish(&shared, cj, changed, None).await?;
                return Err(e.into());
            }
        }
        cj["status"]["lastScheduleTime"] = json!(seconds(scheduled));
        self.finish(&shared, cj, true, wake).await
    }

    /// Writes the status if it changed; then sleeps until the next schedule time.
    async fn finish(
        &self,
        old: &Value,
        cj: Value,
        changed: bool,
        wake: Option<Duration>,
    ) -> Result<Action> {
        if changed && old["status"] != cj["status"] {
            self.client
                .update_status(self.cron_jobs.resource(), &cj)
                .await?;
        }
        Ok(wake.map_or(Action::Done, Action::RequeueAfter))
    }

    async fn delete_job(&self, cj: &Value, name: &str, uid: Option<&str>) -> Result<()> {
        let params = DeleteParams {
            propagation: Some(Propagation::Background),
            uid: uid.map(String::from),
            ..DeleteParams::default()
        };
        match self
            .client
            .delete(
                self.jobs.resource(),
                Some(str_at(cj, "/metadata/namespace")),
                name,
                &params,
            )
            .await
        {
            Ok(_) => {
                self.recorder
                    .event(
                        cj,
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("Deleted job {name}"),
                    )
                    .await;
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                self.recorder
                    .event(
                        cj,
                        EventType::Warning,
                        "FailedDelete",
                        &format!("Deleted job: {e}"),
                    )
                    .await;
                Err(e.into())
            }
        }
    }

    /// Deletes the oldest finished Jobs beyond the history limits; returns whether any
    /// went.
    async fn cleanup(&self, cj: &Value, children: &[Arc<Value>]) -> Result<bool> {
        let mut any = false;
        for (cond, field) in [
            ("Complete", "successfulJobsHistoryLimit"),
            ("Failed", "failedJobsHistoryLimit"),
        ] {
            let Some(limit) = cj
                .pointer(&format!("/spec/{field}"))
                .and_then(Value::as_i64)
            else {
                continue;
            };
            let mut done: Vec<&Arc<Value>> = children
                .iter()
                .filter(|j| finished(j) == Some(cond) && !is_deleting(j))
                .collect();
            let started = |j: &Value| {
                j.pointer("/status/startTime")
                    .or_else(|| j.pointer("/metadata/creationTimestamp"))
                    .and_then(Value::as_str)
                    .and_then(parse_time)
            };
            done.sort_by_key(|j| started(j));
            let extra = done.len().saturating_sub(limit.max(0) as usize);
            for j in done.into_iter().take(extra) {
                self.delete_job(
                    cj,
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

/// `getJobFromTemplate2`: the Job for one schedule time.
fn job_from_template(cj: &Value, name: &str, scheduled: Timestamp, tz: &TimeZone) -> Value {
    let template = &cj["spec"]["jobTemplate"];
    let mut meta = json!({
        "name": name,
        "namespace": str_at(cj, "/metadata/namespace"),
        "ownerReferences": [CRON_JOBS.controlled_by(cj)],
        "labels": template.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({})),
        "annotations": template.pointer("/metadata/annotations").cloned().unwrap_or_else(|| json!({})),
    });
    let at = Timestamp::from_second(scheduled.as_second())
        .unwrap_or(scheduled)
        .to_zoned(tz.clone());
    meta["annotations"][SCHEDULED_TIMESTAMP] = json!(
        at.strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string()
            .replace("+00:00", "Z")
    );
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": template["spec"]})
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
        .run(sup, move |key| {
            let c = controller.clone();
            async move { c.reconcile(key).await }
        });
}

#[cfg(test)]
mod tests;
