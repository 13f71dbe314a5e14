//! The Table printers of the batch/v1 kinds: jobs and cron jobs, as kubectl prints them.

use serde_json::{Value, json};

use super::{Column, age, col, container_fields, count, or_none, s};
use crate::types::human_duration;

pub(super) fn job_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col("Status", 0, "Status of the job."),
        col(
            "Completions",
            0,
            "The number of pods which reached phase Succeeded.",
        ),
        col("Duration", 0, "Time required to complete the job."),
        col("Age", 0, "The time since the object was created."),
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
        col(
            "Selector",
            1,
            "A label query over pods that should match the pod count.",
        ),
    ]
}

fn has_condition(v: &Value, kind: &str) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

/// kubectl's `printJob`.
pub(super) fn job_cells(v: &Value) -> Vec<Value> {
    let n = |p: &str| v.pointer(p).and_then(Value::as_i64);
    let succeeded = n("/status/succeeded").unwrap_or(0);
    let completions = match (n("/spec/completions"), n("/spec/parallelism")) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, Some(p)) if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    };
    let stamp = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    let duration = match (stamp("/status/startTime"), stamp("/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => {
            human_duration(jiff::Timestamp::now().as_second() - start.as_second())
        }
        (Some(start), Some(end)) => human_duration(end.as_second() - start.as_second()),
    };
    let status = if has_condition(v, "Complete") {
        "Complete"
    } else if has_condition(v, "Failed") {
        "Failed"
    } else if v.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has_condition(v, "Suspended") {
        "Suspended"
    } else if has_condition(v, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(v, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let join = |f: &str| container_fields(v, "/spec/template/spec/containers", f);
    vec![
        json!(s(v, "/metadata/name")),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
        json!(crate::registry::apps::selector_string(
            v.pointer("/spec/selector")
        )),
    ]
}

pub(super) fn cron_job_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col(
            "Schedule",
            0,
            "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
        ),
        col(
            "Timezone",
            0,
            "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
        ),
        Column {
            kind: std::borrow::Cow::Borrowed("boolean"),
            ..col(
                "Suspend",
                0,
                "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
            )
        },
        Column {
            kind: std::borrow::Cow::Borrowed("integer"),
            ..col("Active", 0, "A list of pointers to currently running jobs.")
        },
        col(
            "Last Schedule",
            0,
            "Information when was the last time the job was successfully scheduled.",
        ),
        col("Age", 0, "The time since the object was created."),
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
        col(
            "Selector",
            1,
            "A label query over pods that should match the pod count.",
        ),
    ]
}

/// kubectl's `printCronJob`.
pub(super) fn cron_job_cells(v: &Value) -> Vec<Value> {
    let last = match v
        .pointer("/status/lastScheduleTime")
        .and_then(Value::as_str)
    {
        Some(_) => age(v, "/status/lastScheduleTime"),
        None => "<none>".into(),
    };
    let join = |f: &str| container_fields(v, "/spec/jobTemplate/spec/template/spec/containers", f);
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/spec/schedule")),
        json!(or_none(s(v, "/spec/timeZone"))),
        // kubectl's printBoolPtr.
        json!(
            if v.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
                "True"
            } else {
                "False"
            }
        ),
        json!(count(v, "/status/active")),
        json!(last),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
        json!(crate::registry::apps::selector_string(
            v.pointer("/spec/jobTemplate/spec/selector")
        )),
    ]
}
