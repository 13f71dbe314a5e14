//! PodDisruptionBudget rules that the eviction subresource and the disruption controller
//! share: which pods a budget selects and its `DisruptionAllowed` condition.

use serde_json::{Value, json};

use super::labels;

/// The condition a budget carries.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";

/// Whether a budget selects `pod`: same namespace, and a selector that parses, is not
/// empty (an empty one selects nothing) and matches.
pub fn selects(pdb: &Value, pod: &Value) -> bool {
    let ns = |v: &Value| v.pointer("/metadata/namespace").cloned();
    if ns(pdb) != ns(pod) {
        return false;
    }
    pdb.pointer("/spec/selector")
        .and_then(|s| labels::Selector::from_label_selector(s).ok())
        .is_some_and(|sel| !sel.is_empty() && sel.matches(&labels::map_at(pod, "/metadata/labels")))
}

/// The state and reason the condition has for the status's `disruptionsAllowed`
/// (`UpdateDisruptionAllowedCondition`).
pub fn allowed_state(status: &Value) -> (&'static str, &'static str) {
    if status["disruptionsAllowed"].as_i64().unwrap_or(0) > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    }
}

/// Sets the DisruptionAllowed condition of a budget's status as `meta.SetStatusCondition`
/// does: the transition time moves only with the state; `observedGeneration` is the
/// status's.
pub fn set_condition(status: &mut Value, state: &str, reason: &str, message: &str) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let observed = status["observedGeneration"].clone();
    let list = status["conditions"].as_array_mut().expect("made an array");
    let mut cond = json!({
        "type": DISRUPTION_ALLOWED,
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": super::now(),
    });
    if observed.is_number() {
        cond["observedGeneration"] = observed;
    }
    match list.iter_mut().find(|c| c["type"] == DISRUPTION_ALLOWED) {
        Some(cur) => {
            if cur["status"] == state {
                cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
            }
            *cur = cond;
        }
        None => list.push(cond),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_selector_selects_no_pod() {
        let pod = json!({"metadata": {"namespace": "default", "labels": {"app": "web"}}});
        let mut b = json!({"metadata": {"namespace": "default"}, "spec": {"selector": {}}});
        assert!(!selects(&b, &pod));
        b["spec"]["selector"] = json!({"matchLabels": {"app": "web"}});
        assert!(selects(&b, &pod));
        b["metadata"]["namespace"] = json!("other");
        assert!(!selects(&b, &pod));
    }

    #[test]
    fn the_condition_follows_the_disruptions_allowed() {
        let mut status = json!({"disruptionsAllowed": 1, "observedGeneration": 3});
        let (state, reason) = allowed_state(&status);
        set_condition(&mut status, state, reason, "");
        let c = &status["conditions"][0];
        assert_eq!(
            (&c["status"], &c["reason"], &c["observedGeneration"]),
            (&json!("True"), &json!("SufficientPods"), &json!(3))
        );
        status["disruptionsAllowed"] = json!(0);
        let (state, reason) = allowed_state(&status);
        set_condition(&mut status, state, reason, "");
        assert_eq!(status["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(status["conditions"][0]["reason"], "InsufficientPods");
    }
}
