//! A Job's failures: what its pod failure policy says of a failed pod, when an index has
//! failed for good, and when `OnFailure` restarts pass the backoff limit.

use std::sync::Arc;

use serde_json::Value;

use super::{FAILURE_COUNT, annotation_count, is_pod_failed, phase};
use crate::controller::claim::str_at;

/// What the pod failure policy says of a failed pod: the Job's failure message (a
/// `FailJob` rule), whether the failure counts, and the action of the rule that matched.
pub(super) fn match_failure_policy(
    job: &Value,
    pod: &Value,
) -> (Option<String>, bool, Option<String>) {
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

/// `isIndexFailed`: a counted failure of an index past its own limit, or a `FailIndex`
/// rule.
pub(super) fn is_index_failed(job: &Value, pod: &Value, per_index: i64) -> bool {
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
pub(super) fn past_backoff_limit_on_failure(job: &Value, pods: &[Arc<Value>], limit: i64) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
