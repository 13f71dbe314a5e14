//! Taints and tolerations: reading them from nodes and pods, and whether a toleration
//! tolerates a taint (the rule the scheduler and the node lifecycle controller share).

use k8s_openapi::api::core::v1::{Taint, Toleration};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The taint the node lifecycle controller puts on a node whose heartbeat stopped.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node that is not Ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint that stands for `spec.unschedulable` (a pod tolerating it may still go there).
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

pub const NO_SCHEDULE: &str = "NoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";

/// The entries of the list at `pointer` that decode; broken ones are skipped (the schema
/// check on write keeps them out in practice).
fn list_at<T: DeserializeOwned>(obj: &Value, pointer: &str) -> Vec<T> {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| serde_json::from_value(i.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A node's `spec.taints`.
pub fn of_node(node: &Value) -> Vec<Taint> {
    list_at(node, "/spec/taints")
}

/// A pod's `spec.tolerations`.
pub fn tolerations_of(pod: &Value) -> Vec<Toleration> {
    list_at(pod, "/spec/tolerations")
}

/// Whether `t` tolerates `taint`: the effects match (an empty effect matches all), the keys
/// match (an empty key matches all, with `Exists`), and for `Equal` (the default) the
/// values match.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// The first of `tolerations` that tolerates `taint`.
pub fn first_tolerating<'a>(
    tolerations: &'a [Toleration],
    taint: &Taint,
) -> Option<&'a Toleration> {
    tolerations.iter().find(|t| tolerates(t, taint))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        serde_json::from_value(json!({"key": key, "value": value, "effect": effect})).unwrap()
    }

    fn tol(v: Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn equal_needs_the_same_key_value_and_effect() {
        let t = taint("dedicated", "gpu", NO_SCHEDULE);
        let exact = tol(
            json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}),
        );
        assert!(tolerates(&exact, &t));
        let default_operator = tol(json!({"key": "dedicated", "value": "gpu"}));
        assert!(
            tolerates(&default_operator, &t),
            "Equal is the default, empty effect matches all"
        );
        let other_value = tol(json!({"key": "dedicated", "value": "cpu"}));
        assert!(!tolerates(&other_value, &t));
        let other_effect = tol(json!({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}));
        assert!(!tolerates(&other_effect, &t));
        let other_key = tol(json!({"key": "team", "value": "gpu"}));
        assert!(!tolerates(&other_key, &t));
        let empty_value = tol(json!({"key": "bare", "operator": "Equal"}));
        assert!(tolerates(&empty_value, &taint("bare", "", NO_SCHEDULE)));
    }

    #[test]
    fn exists_ignores_the_value_and_an_empty_key_tolerates_everything() {
        let t = taint("dedicated", "gpu", NO_EXECUTE);
        assert!(tolerates(
            &tol(json!({"key": "dedicated", "operator": "Exists"})),
            &t
        ));
        assert!(!tolerates(
            &tol(json!({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"})),
            &t
        ));
        let everything = tol(json!({"operator": "Exists"}));
        assert!(tolerates(&everything, &t));
        assert!(tolerates(&everything, &taint(UNREACHABLE, "", NO_SCHEDULE)));
        let every_no_execute = tol(json!({"operator": "Exists", "effect": "NoExecute"}));
        assert!(tolerates(&every_no_execute, &t));
        assert!(!tolerates(&every_no_execute, &taint("x", "", NO_SCHEDULE)));
        assert!(!tolerates(
            &tol(json!({"key": "dedicated", "operator": "Gt"})),
            &t
        ));
    }

    #[test]
    fn lists_are_read_from_objects_and_the_first_match_wins() {
        let node = json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"},
            {"effect": 7},
            {"key": "b", "value": "1", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}
        ]}});
        let taints = of_node(&node);
        assert_eq!(taints.len(), 2, "the broken entry is skipped");
        assert!(taints[1].time_added.is_some());
        let pod = json!({"spec": {"tolerations": [
            {"key": "b", "operator": "Exists", "tolerationSeconds": 5},
            {"operator": "Exists"}
        ]}});
        let tols = tolerations_of(&pod);
        assert_eq!(
            first_tolerating(&tols, &taints[1])
                .unwrap()
                .toleration_seconds,
            Some(5)
        );
        assert_eq!(first_tolerating(&tols, &taints[0]).unwrap().key, None);
        assert!(of_node(&json!({})).is_empty());
    }
}
