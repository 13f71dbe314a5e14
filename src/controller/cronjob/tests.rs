//! The cronjob controller against a real registry, with a manual clock: schedules are
//! checked by moving time forward, never by waiting for it.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::*;
use crate::client::{Client, ListParams, Patch, catalog};
use crate::controller::{Config, Context, run_informer};
use crate::registry::Registry;
use crate::supervisor::Supervisor;
use crate::types::clock::Manual;

struct Harness {
    client: Client,
    clock: Manual,
    _sup: Supervisor,
    _dir: tempfile::TempDir,
}

async fn harness(at: Timestamp) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(crate::store::Config::new(dir.path().join("data")))
        .await
        .unwrap();
    let client = Client::local(Registry::new(store));
    let clock = Manual::at(at);
    let mut ctx = Context::new(client.clone(), Config::default());
    ctx.clock = Arc::new(clock.clone());
    let mut sup = Supervisor::new();
    start(&ctx, &mut sup);
    for informer in ctx.informers.all() {
        run_informer(&mut sup, &client, informer);
    }
    Harness {
        client,
        clock,
        _sup: sup,
        _dir: dir,
    }
}

fn cron_job(name: &str, schedule: &str, extra: Value) -> Value {
    let mut cj = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i", "command": ["true"]}],
        }}}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        cj["spec"][k] = v.clone();
    }
    cj
}

impl Harness {
    async fn create(&self, cj: Value) -> Value {
        self.client
            .create(catalog::of(Kind::CronJob), Some("default"), &cj)
            .await
            .unwrap()
    }

    async fn jobs(&self, cj: &str) -> Vec<Value> {
        let list = self
            .client
            .list(
                catalog::of(Kind::Job),
                Some("default"),
                &ListParams::default(),
            )
            .await
            .unwrap();
        let mut jobs: Vec<Value> = list
            .items
            .into_iter()
            .filter(|j| {
                j.pointer("/metadata/ownerReferences/0/name") == Some(&json!(cj))
                    && j.pointer("/metadata/deletionTimestamp").is_none()
            })
            .collect();
        jobs.sort_by_key(|j| j["metadata"]["name"].as_str().unwrap().to_string());
        jobs
    }

    /// Waits (in real time, briefly) until `check` holds.
    async fn until<T>(&self, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        for _ in 0..500 {
            if let Some(t) = check().await {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// Moves the clock and makes the controller look again.
    async fn advance_and_touch(&self, cj: &str, by: i64) {
        self.clock.advance(SignedDuration::from_secs(by));
        self.client
            .patch(
                catalog::of(Kind::CronJob),
                Some("default"),
                cj,
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"touched": self.clock.now().to_string()}}}),
                ),
            )
            .await
            .unwrap();
    }

    async fn complete(&self, job: &Value, kind: &str) {
        let mut j = self
            .client
            .get(
                catalog::of(Kind::Job),
                Some("default"),
                job["metadata"]["name"].as_str().unwrap(),
            )
            .await
            .unwrap();
        let now = Timestamp::now().to_string();
        j["status"] = json!({"startTime": now, "completionTime": now, "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}]});
        self.client
            .update_status(catalog::of(Kind::Job), &j)
            .await
            .unwrap();
    }

    async fn reasons(&self) -> Vec<String> {
        let list = self
            .client
            .list(
                catalog::of(Kind::Event),
                Some("default"),
                &ListParams::default(),
            )
            .await
            .unwrap();
        list.items
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["reason"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                )
            })
            .collect()
    }
}

fn later(secs: i64) -> Timestamp {
    Timestamp::now()
        .checked_add(SignedDuration::from_secs(secs))
        .unwrap()
}

#[test]
fn the_due_time_is_the_latest_unmet_one() {
    let t = |s: &str| s.parse::<Timestamp>().unwrap();
    let every5 = cron::parse("*/5 * * * *").unwrap();
    let utc = TimeZone::UTC;
    let d = due(
        &every5,
        &utc,
        t("2026-01-01T10:01:00Z"),
        None,
        t("2026-01-01T10:12:00Z"),
    );
    assert_eq!(d.scheduled, Some(t("2026-01-01T10:10:00Z")));
    assert_eq!(d.missed, 2);
    assert_eq!(d.next, Some(t("2026-01-01T10:15:00Z")));
    // Nothing since the last one.
    let d = due(
        &every5,
        &utc,
        t("2026-01-01T10:10:00Z"),
        None,
        t("2026-01-01T10:12:00Z"),
    );
    assert_eq!(d.scheduled, None);
    // A starting deadline ignores what is older than it.
    let d = due(
        &every5,
        &utc,
        t("2026-01-01T10:01:00Z"),
        Some(60),
        t("2026-01-01T10:12:00Z"),
    );
    assert_eq!(d.scheduled, None);
    // A long outage is reported, and only its last time runs.
    let every1 = cron::parse("* * * * *").unwrap();
    let d = due(
        &every1,
        &utc,
        t("2026-01-01T00:00:00Z"),
        None,
        t("2026-01-03T00:00:30Z"),
    );
    assert!(d.missed > TOO_MANY_MISSED);
    assert_eq!(d.scheduled, Some(t("2026-01-03T00:00:00Z")));
    assert_eq!(
        job_name("hello", t("2026-01-03T00:00:00Z")),
        "hello-29456640"
    );
}

#[tokio::test]
async fn a_due_schedule_makes_its_job_and_forbid_waits_for_it() {
    let h = harness(later(301)).await;
    h.create(cron_job(
        "tick",
        "*/5 * * * *",
        json!({"concurrencyPolicy": "Forbid"}),
    ))
    .await;
    let first = h
        .until("the first job", async || {
            h.jobs("tick").await.into_iter().next()
        })
        .await;
    let name = first["metadata"]["name"].as_str().unwrap().to_string();
    let minutes: i64 = name.strip_prefix("tick-").unwrap().parse().unwrap();
    assert_eq!(minutes % 5, 0, "named for its schedule time: {name}");
    let stamp = first["metadata"]["annotations"][SCHEDULED_TIMESTAMP]
        .as_str()
        .unwrap();
    assert_eq!(
        stamp.parse::<Timestamp>().unwrap().as_second(),
        minutes * 60
    );
    assert_eq!(first["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    let cj = h
        .until("the status", async || {
            let cj = h
                .client
                .get(catalog::of(Kind::CronJob), Some("default"), "tick")
                .await
                .ok()?;
            (cj["status"]["active"].as_array()?.len() == 1).then_some(cj)
        })
        .await;
    assert_eq!(cj["status"]["active"][0]["name"], name.as_str());
    // Five minutes on, the first still runs: Forbid skips this one.
    h.advance_and_touch("tick", 300).await;
    h.until("the skip", async || {
        h.reasons().await.iter().any(|r| r == "JobAlreadyActive Not starting job because prior execution is running and concurrency policy is Forbid").then_some(())
    })
    .await;
    assert_eq!(h.jobs("tick").await.len(), 1);
    // Once it completes, the skipped schedule time (still within reach) gets its Job.
    h.complete(&first, "Complete").await;
    let cj = h
        .until("the completed job seen and the next one made", async || {
            let cj = h
                .client
                .get(catalog::of(Kind::CronJob), Some("default"), "tick")
                .await
                .ok()?;
            let active = cj["status"]["active"].as_array()?;
            (cj["status"]["lastSuccessfulTime"].is_string()
                && active.len() == 1
                && active[0]["name"] != name.as_str())
            .then_some(cj)
        })
        .await;
    assert_eq!(h.jobs("tick").await.len(), 2);
    let seen = format!("SawCompletedJob Saw completed job: {name}, condition: Complete");
    assert!(h.reasons().await.contains(&seen));
    let next: i64 = cj["status"]["active"][0]["name"]
        .as_str()
        .unwrap()
        .strip_prefix("tick-")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(next, minutes + 5);
    assert!(
        h.reasons()
            .await
            .iter()
            .filter(|r| r.starts_with("SuccessfulCreate Created job tick-"))
            .count()
            == 2
    );
}

#[tokio::test]
async fn replace_swaps_the_running_job_and_history_is_trimmed() {
    let h = harness(later(301)).await;
    h.create(cron_job(
        "swap",
        "*/5 * * * *",
        json!({"concurrencyPolicy": "Replace", "successfulJobsHistoryLimit": 1}),
    ))
    .await;
    let first = h
        .until("the first job", async || {
            h.jobs("swap").await.into_iter().next()
        })
        .await;
    h.advance_and_touch("swap", 300).await;
    let second = h
        .until("the replacement", async || {
            let jobs = h.jobs("swap").await;
            (jobs.len() == 1 && jobs[0]["metadata"]["uid"] != first["metadata"]["uid"])
                .then(|| jobs[0].clone())
        })
        .await;
    let deleted = format!(
        "SuccessfulDelete Deleted job {}",
        first["metadata"]["name"].as_str().unwrap()
    );
    assert!(h.reasons().await.contains(&deleted));
    // Two finished jobs and a limit of one: the older goes.
    h.complete(&second, "Complete").await;
    h.advance_and_touch("swap", 300).await;
    let third = h
        .until("a third job", async || {
            h.jobs("swap")
                .await
                .into_iter()
                .find(|j| j["metadata"]["uid"] != second["metadata"]["uid"])
        })
        .await;
    h.complete(&third, "Complete").await;
    h.until("the history trimmed", async || {
        let jobs = h.jobs("swap").await;
        (jobs.len() == 1 && jobs[0]["metadata"]["uid"] == third["metadata"]["uid"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_suspended_or_late_cron_job_starts_nothing() {
    let h = harness(later(3601)).await;
    h.create(cron_job("paused", "@hourly", json!({"suspend": true})))
        .await;
    // Past its starting deadline: the missed hour is not run.
    h.create(cron_job(
        "late",
        "@hourly",
        json!({"startingDeadlineSeconds": 10}),
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.jobs("paused").await.is_empty());
    assert!(h.jobs("late").await.is_empty());
    // Resumed, the hour that passed is due.
    h.client
        .patch(
            catalog::of(Kind::CronJob),
            Some("default"),
            "paused",
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    h.until("the resumed job", async || {
        h.jobs("paused").await.into_iter().next()
    })
    .await;
}
