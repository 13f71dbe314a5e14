//! The job controller against a real server with a real node agent: pods of the process
//! runtime run to completion, and the Job counts them (completions and parallelism,
//! Indexed Jobs, back-off limits, the pod failure policy, deadlines, suspension, the TTL
//! after finishing) with upstream's conditions and events; bad specs get a 422.

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const PODS: &str = "/api/v1/namespaces/default/pods";

async fn server(node: &str) -> TestServer {
    TestServer::start_with(|c| c.node = Some(crate::node::node_settings(node, |_| {}))).await
}

fn job(name: &str, script: &str, spec: Value) -> Value {
    let mut j = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}],
            }},
        },
    });
    for (k, v) in spec.as_object().unwrap() {
        j["spec"][k] = v.clone();
    }
    j
}

fn condition<'a>(j: &'a Value, kind: &str) -> Option<&'a Value> {
    j["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Waits until the Job has the terminal condition `kind` (True) and returns it.
async fn finished(s: &TestServer, name: &str, kind: &str) -> Value {
    eventually(90, &format!("job {name} {kind}"), || async {
        let (_, j) = s.get(&format!("{JOBS}/{name}")).await;
        match condition(&j, kind) {
            Some(c) if c["status"] == "True" => Ok(j),
            _ => Err(j["status"].to_string()),
        }
    })
    .await
}

async fn pods_of(s: &TestServer, job: &str) -> Vec<Value> {
    let (code, list) = s
        .get(&format!(
            "{PODS}?labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}"
        ))
        .await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

async fn reasons(s: &TestServer, name: &str) -> Vec<String> {
    let (_, events) = s
        .get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name},involvedObject.kind%3DJob"
        ))
        .await;
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["reason"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_job_runs_its_completions_in_parallel_and_counts_each_once() {
    let s = server("jobs-node-1").await;
    let (code, out) = s
        .post(
            JOBS,
            job(
                "work",
                "sleep 0.2",
                json!({"completions": 4, "parallelism": 2}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let labels = &out["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["batch.kubernetes.io/job-name"], "work");
    assert_eq!(
        out["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        out["metadata"]["uid"]
    );
    let j = finished(&s, "work", "Complete").await;
    let st = &j["status"];
    assert_eq!(st["succeeded"], 4, "{st}");
    assert_eq!(st["failed"].as_i64().unwrap_or(0), 0);
    assert_eq!(st["active"], 0);
    assert!(
        st["completionTime"].is_string() && st["startTime"].is_string(),
        "{st}"
    );
    let sc = condition(&j, "SuccessCriteriaMet").expect("the interim condition");
    assert_eq!(sc["reason"], "CompletionsReached");
    assert_eq!(
        condition(&j, "Complete").unwrap()["message"],
        "Reached expected number of succeeded pods"
    );
    assert_eq!(
        st["uncountedTerminatedPods"],
        json!({"succeeded": [], "failed": []})
    );
    let pods = pods_of(&s, "work").await;
    assert_eq!(pods.len(), 4, "exactly the completions ran");
    for p in &pods {
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert!(
            p["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty()),
            "{p}"
        );
    }
    let ev = eventually(10, "events", || async {
        let ev = reasons(&s, "work").await;
        if ev.iter().any(|e| e == "Completed Job completed") {
            Ok(ev)
        } else {
            Err(format!("{ev:?}"))
        }
    })
    .await;
    assert_eq!(
        ev.iter()
            .filter(|e| e.starts_with("SuccessfulCreate Created pod: work-"))
            .count(),
        4,
        "{ev:?}"
    );
    // Deleting the Job takes its pods.
    let (code, _) = s
        .delete(&format!("{JOBS}/work?propagationPolicy=Foreground"))
        .await;
    assert_eq!(code, 200);
    eventually(60, "the pods gone", || async {
        let left = pods_of(&s, "work").await.len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await;
}

#[tokio::test]
async fn an_indexed_job_gives_each_pod_its_index() {
    let s = server("jobs-node-2").await;
    let script = r#"test "$JOB_COMPLETION_INDEX" -ge 0 && test "$JOB_COMPLETION_INDEX" -lt 3"#;
    let (code, out) = s
        .post(
            JOBS,
            job(
                "ix",
                script,
                json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let j = finished(&s, "ix", "Complete").await;
    assert_eq!(j["status"]["completedIndexes"], "0-2", "{}", j["status"]);
    assert_eq!(j["status"]["succeeded"], 3);
    let mut seen: Vec<String> = pods_of(&s, "ix")
        .await
        .iter()
        .map(|p| {
            let ix = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(
                p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
                ix.as_str()
            );
            assert_eq!(p["spec"]["hostname"], format!("ix-{ix}"));
            assert!(
                p["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("ix-{ix}-"))
            );
            ix
        })
        .collect();
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);
}

#[tokio::test]
async fn failures_past_the_backoff_limit_fail_the_job() {
    let s = server("jobs-node-3").await;
    let (code, out) = s
        .post(JOBS, job("fails", "exit 3", json!({"backoffLimit": 0})))
        .await;
    assert_eq!(code, 201, "{out}");
    let j = finished(&s, "fails", "Failed").await;
    let failed = condition(&j, "Failed").unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded");
    assert_eq!(
        failed["message"],
        "Job has reached the specified backoff limit"
    );
    assert_eq!(
        condition(&j, "FailureTarget").unwrap()["reason"],
        "BackoffLimitExceeded"
    );
    assert_eq!(j["status"]["failed"], 1);
    assert!(j["status"]["completionTime"].is_null());
    eventually(10, "the warning", || async {
        let ev = reasons(&s, "fails").await;
        if ev
            .iter()
            .any(|e| e == "BackoffLimitExceeded Job has reached the specified backoff limit")
        {
            Ok(())
        } else {
            Err(format!("{ev:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn a_fail_job_rule_ends_the_job_at_once() {
    let s = server("jobs-node-4").await;
    let spec = json!({"backoffLimit": 6, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
    ]}});
    let (code, out) = s.post(JOBS, job("pfp", "exit 42", spec)).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["spec"]["podReplacementPolicy"], "Failed");
    let j = finished(&s, "pfp", "Failed").await;
    let failed = condition(&j, "Failed").unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy");
    let msg = failed["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Container main for pod default/pfp-")
            && msg.ends_with("failed with exit code 42 matching FailJob rule at index 0"),
        "{msg}"
    );
    assert_eq!(pods_of(&s, "pfp").await.len(), 1, "no retry after FailJob");
}

#[tokio::test]
async fn a_failed_index_does_not_stop_the_others() {
    let s = server("jobs-node-5").await;
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed", "backoffLimitPerIndex": 0});
    let (code, out) = s
        .post(
            JOBS,
            job("perix", r#"test "$JOB_COMPLETION_INDEX" != 1"#, spec),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let j = finished(&s, "perix", "Failed").await;
    assert_eq!(condition(&j, "Failed").unwrap()["reason"], "FailedIndexes");
    assert_eq!(j["status"]["failedIndexes"], "1", "{}", j["status"]);
    assert_eq!(j["status"]["completedIndexes"], "0,2");
    assert_eq!(j["status"]["failed"], 1);
}

#[tokio::test]
async fn a_job_past_its_deadline_fails_and_its_pods_stop() {
    let s = server("jobs-node-6").await;
    let (code, out) = s
        .post(
            JOBS,
            job("slow", "sleep 3600", json!({"activeDeadlineSeconds": 2})),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let j = finished(&s, "slow", "Failed").await;
    let failed = condition(&j, "Failed").unwrap();
    assert_eq!(failed["reason"], "DeadlineExceeded");
    assert_eq!(
        failed["message"],
        "Job was active longer than specified deadline"
    );
    assert_eq!(j["status"]["active"], 0);
    eventually(30, "the pod stopped", || async {
        let running: Vec<Value> = pods_of(&s, "slow")
            .await
            .into_iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .collect();
        if running.is_empty() {
            Ok(())
        } else {
            Err(format!("{running:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn a_suspended_job_waits_until_resumed() {
    let s = server("jobs-node-7").await;
    let (code, out) = s
        .post(JOBS, job("later", "true", json!({"suspend": true})))
        .await;
    assert_eq!(code, 201, "{out}");
    let j = eventually(30, "suspended", || async {
        let (_, j) = s.get(&format!("{JOBS}/later")).await;
        match condition(&j, "Suspended") {
            Some(c) if c["status"] == "True" => Ok(j),
            _ => Err(j["status"].to_string()),
        }
    })
    .await;
    assert_eq!(
        condition(&j, "Suspended").unwrap()["reason"],
        "JobSuspended"
    );
    assert!(
        j["status"]["startTime"].is_null(),
        "a suspended Job has not started"
    );
    assert!(pods_of(&s, "later").await.is_empty());
    let (code, out) = s
        .patch(
            &format!("{JOBS}/later"),
            "application/merge-patch+json",
            json!({"spec": {"suspend": false}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let j = finished(&s, "later", "Complete").await;
    let c = condition(&j, "Suspended").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("JobResumed"))
    );
    let ev = reasons(&s, "later").await;
    assert!(
        ev.contains(&"Suspended Job suspended".to_string()),
        "{ev:?}"
    );
    assert!(ev.contains(&"Resumed Job resumed".to_string()), "{ev:?}");
}

#[tokio::test]
async fn a_finished_job_with_a_ttl_is_deleted() {
    let s = server("jobs-node-8").await;
    let (code, out) = s
        .post(
            JOBS,
            job("brief", "true", json!({"ttlSecondsAfterFinished": 1})),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    eventually(60, "the job deleted after its ttl", || async {
        let (code, j) = s.get(&format!("{JOBS}/brief")).await;
        if code == 404 {
            Ok(())
        } else {
            Err(j["status"].to_string())
        }
    })
    .await;
    eventually(30, "its pod gone", || async {
        let left = pods_of(&s, "brief").await.len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left}"))
        }
    })
    .await;
}

#[tokio::test]
async fn bad_jobs_get_a_422_naming_their_fields() {
    let s = TestServer::start().await;
    let mut bad = job(
        "bad",
        "true",
        json!({"completionMode": "Indexed", "completions": null, "parallelism": -1}),
    );
    bad["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    let (code, out) = s.post(JOBS, bad).await;
    assert_eq!(code, 422, "{out}");
    let fields = crate::support::cause_fields(&out);
    for f in [
        "spec.parallelism",
        "spec.completions",
        "spec.template.spec.restartPolicy",
    ] {
        assert!(fields.contains(&f), "{f} in {out}");
    }
    // The template of a started Job cannot change.
    let (code, _) = s.post(JOBS, job("fixed", "true", json!({}))).await;
    assert_eq!(code, 201);
    let (code, out) = s
        .patch(
            &format!("{JOBS}/fixed"),
            "application/merge-patch+json",
            json!({"spec": {"template": {"spec": {"activeDeadlineSeconds": 5}}}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("spec.template: Invalid value"),
        "{out}"
    );
}

const CRON_JOBS: &str = "/apis/batch/v1/namespaces/default/cronjobs";

fn cron_job(name: &str, schedule: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
        }}}}},
    })
}

/// The one test on the real clock: the next minute makes a Job, which runs and is seen
/// completed (the schedule logic itself is tested on a manual clock beside the code).
#[tokio::test]
async fn a_cron_job_runs_on_the_next_minute() {
    let s = server("jobs-node-9").await;
    let (code, out) = s.post(CRON_JOBS, cron_job("minutely", "* * * * *")).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(out["spec"]["successfulJobsHistoryLimit"], 3);
    let cj = eventually(90, "a job run and seen completed", || async {
        let (_, cj) = s.get(&format!("{CRON_JOBS}/minutely")).await;
        if cj["status"]["lastSuccessfulTime"].is_string() {
            Ok(cj)
        } else {
            Err(cj["status"].to_string())
        }
    })
    .await;
    let last: jiff::Timestamp = cj["status"]["lastScheduleTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(last.as_second() % 60, 0, "on the minute");
    let (_, jobs) = s.get(JOBS).await;
    let job = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["metadata"]["ownerReferences"][0]["name"] == "minutely")
        .cloned()
        .expect("the cron job's job");
    assert_eq!(
        job["metadata"]["name"],
        format!("minutely-{}", last.as_second() / 60)
    );
    assert!(
        job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
            .is_string()
    );
}

#[tokio::test]
async fn a_cron_job_with_a_bad_schedule_gets_a_422() {
    let s = TestServer::start().await;
    let mut bad = cron_job("bad", "61 * * * *");
    bad["spec"]["timeZone"] = json!("Nowhere/Special");
    bad["spec"]["concurrencyPolicy"] = json!("Sometimes");
    let (code, out) = s.post(CRON_JOBS, bad).await;
    assert_eq!(code, 422, "{out}");
    let fields: Vec<&str> = out["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["spec.schedule", "spec.timeZone", "spec.concurrencyPolicy"],
        "{out}"
    );
}
