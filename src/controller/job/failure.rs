//! A Job's failures: what its pod failure policy says of a failed pod, when an index has
//! failed for good, and when `OnFailure` restarts pass the backoff limit.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::JobSpec;
use serde_json::Value;

use super::{FAILURE_COUNT_AT, annotation_count, is_pod_failed, phase};
use crate::types::json::{array_at, int_at, str_at};

/// A pod's container statuses, then its init containers' (JSON: read for a field or
/// two, not decoded).
fn container_statuses(pod: &Value) -> impl Iterator<Item = &Value> {
    array_at(pod, "/status/containerStatuses")
        .iter()
        .chain(array_at(pod, "/status/initContainerStatuses"))
}

/// What the pod failure policy says of a failed pod: the Job's failure message (a
/// `FailJob` rule), whether the failure counts, and the action of the rule that matched.
pub(super) fn match_failure_policy(
    spec: &JobSpec,
    pod: &Value,
) -> (Option<String>, bool, Option<String>) {
    let Some(policy) = &spec.pod_failure_policy else {
        return (None, true, None);
    };
    for (i, rule) in policy.rules.iter().enumerate() {
        let action = rule.action.as_str();
        let matched: Option<String> = if let Some(req) = &rule.on_exit_codes {
            let name = req.container_name.as_deref();
            container_statuses(pod).find_map(|c| {
                let code = int_at(c, "/state/terminated/exitCode");
                if code == 0 || name.is_some_and(|n| n != str_at(c, "/name")) {
                    return None;
                }
                let listed = req.values.iter().any(|&v| i64::from(v) == code);
                let hit = match req.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
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
        } else if let Some(patterns) = &rule.on_pod_conditions {
            array_at(pod, "/status/conditions").iter().find_map(|c| {
                let (kind, status) = (str_at(c, "/type"), str_at(c, "/status"));
                patterns
                    .iter()
                    .any(|p| p.type_ == kind && p.status.as_deref() == Some(status))
                    .then(|| {
                        format!(
                            "Pod {}/{} has condition {kind} matching {action} rule at index {i}",
                            str_at(pod, "/metadata/namespace"),
                            str_at(pod, "/metadata/name"),
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
pub(super) fn is_index_failed(spec: &JobSpec, pod: &Value, per_index: i64) -> bool {
    if !is_pod_failed(pod, spec) {
        return false;
    }
    let (_, counts, action) = match_failure_policy(spec, pod);
    if action.as_deref() == Some("FailIndex") {
        return true;
    }
    counts && annotation_count(pod, FAILURE_COUNT_AT) >= per_index
}

/// `pastBackoffLimitOnFailure`: for `restartPolicy: OnFailure`, the restarts of the
/// running pods' containers count as failures.
pub(super) fn past_backoff_limit_on_failure(
    spec: &JobSpec,
    pods: &[Arc<Value>],
    limit: i64,
) -> bool {
    let restart_policy = spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.restart_policy.as_deref());
    if restart_policy != Some("OnFailure") {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .flat_map(|p| container_statuses(p))
        .map(|c| int_at(c, "/restartCount"))
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
        let job: JobSpec = serde_json::from_value(json!({"template": {}, "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        ]}}))
        .unwrap();
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
