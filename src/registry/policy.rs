//! The policy/v1 kinds' rules: PodDisruptionBudgets (`ValidatePodDisruptionBudget*`) and
//! the `pods/eviction` subresource, which deletes a pod only when the disruption budgets
//! that cover it allow (`pkg/registry/core/pod/storage/eviction.go` upstream): the budget
//! is checked and decremented, and the pod recorded in its `disruptedPods`, in one
//! optimistic write of the budget's status, retried on a conflict; the pod is then marked
//! with the `DisruptionTarget` condition and deleted.

use crate::types::json::int_at;
use serde_json::{Value, json};

use super::catalog::{self, Kind};
use super::strategy::Strategy;
use super::{Cause, DeleteOptions, Error, ListOptions, Part, Registry, Result, WriteOptions};
use crate::types::disruption;

/// How many evictions a budget may have approved that its controller has not seen yet.
const MAX_DISRUPTED_PODS: usize = 2000;
/// How often an eviction re-reads after a conflicting write (upstream's 20 steps).
const RETRIES: usize = 20;
const UNHEALTHY_POLICIES: [&str; 2] = ["AlwaysAllow", "IfHealthyBudget"];
const NEEDS_BUDGET_MESSAGE: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";

/// policy/v1 PodDisruptionBudget: how many of the pods it selects may be disrupted at
/// once; the disruption controller writes its status.
pub struct PodDisruptionBudget;

impl Strategy for PodDisruptionBudget {
    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            // The fields Go writes without omitempty.
            m.insert(
                "status".into(),
                json!({"disruptionsAllowed": 0, "currentHealthy": 0,
                       "desiredHealthy": 0, "expectedPods": 0}),
            );
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
            return;
        };
        let set = |f: &str| spec.get(f).filter(|v| !v.is_null());
        if set("minAvailable").is_some() && set("maxUnavailable").is_some() {
            causes.push(Cause::invalid(
                "spec",
                spec,
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        for f in ["minAvailable", "maxUnavailable"] {
            if let Some(v) = set(f) {
                super::apps::positive_int_or_percent(v, &format!("spec.{f}"), causes);
            }
        }
        if let Some(sel) = set("selector") {
            super::apps::validate_label_selector(sel, "spec.selector", causes);
        }
        if let Some(p) = set("unhealthyPodEvictionPolicy") {
            let p = p.as_str().unwrap_or("");
            if !UNHEALTHY_POLICIES.contains(&p) {
                causes.push(Cause::not_supported(
                    "spec.unhealthyPodEvictionPolicy",
                    p,
                    &UNHEALTHY_POLICIES,
                ));
            }
        }
    }

    fn validate_update(&self, _old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part == Part::Main {
            return;
        }
        // `ValidatePodDisruptionBudgetStatusUpdate`.
        for f in [
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
        ] {
            if let Some(v) = new.pointer(&format!("/status/{f}"))
                && v.as_i64().is_none_or(|n| n < 0)
            {
                causes.push(Cause::invalid(
                    &format!("status.{f}"),
                    v,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}

/// Whether the pod's `Ready` condition is true (`IsPodReady`).
pub fn is_pod_ready(pod: &Value) -> bool {
    crate::types::condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

/// Pods whose eviction needs no budget: finished, not yet running or already being
/// deleted (`canIgnorePDB`).
fn can_ignore_budget(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed" | "Pending")
    ) || pod.pointer("/metadata/deletionTimestamp").is_some()
}

/// Whether a deletion must be of the pod as last read (`shouldEnforceResourceVersion`).
fn enforce_resource_version(pod: &Value) -> bool {
    !matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) && pod.pointer("/metadata/deletionTimestamp").is_none()
}

fn too_many_requests(message: String, retry_after: u64) -> Error {
    Error::TooManyRequests {
        message: NEEDS_BUDGET_MESSAGE.into(),
        cause: Some(Cause {
            reason: "DisruptionBudget".into(),
            message,
            field: String::new(),
        }),
        retry_after,
    }
}

fn still_processing(pdb: &str) -> Error {
    too_many_requests(
        format!("The disruption budget {pdb} is still being processed by the server."),
        10,
    )
}

fn budget_forbidden(pdb: &str, why: &str) -> Error {
    Error::Forbidden(format!(
        "poddisruptionbudgets.policy {pdb:?} is forbidden: {why}"
    ))
}

/// The Status an accepted eviction answers with.
fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// Evicts pod `name` of `ns` as the `pods/eviction` subresource does: `body` is a policy
/// Eviction (v1 or v1beta1) whose `deleteOptions` the deletion honours.
pub async fn evict(
    reg: &Registry,
    ns: &str,
    name: &str,
    body: &Value,
    opts: &WriteOptions,
) -> Result<Value> {
    let api_version = body["apiVersion"].as_str().unwrap_or("");
    if body["kind"] != "Eviction" || !matches!(api_version, "policy/v1" | "policy/v1beta1") {
        return Err(Error::BadRequest(format!(
            "not a Eviction object: {} {}",
            api_version,
            body["kind"].as_str().unwrap_or("")
        )));
    }
    if body.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return Err(Error::BadRequest(
            "name in URL does not match name in Eviction object".into(),
        ));
    }
    let mut delete = match body.get("deleteOptions").filter(|d| !d.is_null()) {
        Some(d) => DeleteOptions::from_json(d)?,
        None => DeleteOptions::default(),
    };
    delete.dry_run |= opts.dry_run;
    let pods = catalog::of(Kind::Pod);
    let own_precondition = delete.resource_version.is_some();
    // Pods that need no budget are deleted at once, of the version read.
    let mut pod = Value::Null;
    for attempt in 0..RETRIES {
        pod = super::parse(&reg.get(pods, Some(ns), name)?)?;
        if !can_ignore_budget(&pod) {
            break;
        }
        let mut d = delete.clone();
        if enforce_resource_version(&pod) && !own_precondition {
            d.resource_version = pod["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string);
        }
        match mark_and_delete(reg, ns, name, d).await {
            Ok(()) => return Ok(success()),
            Err(Error::Conflict { .. }) if !own_precondition && attempt + 1 < RETRIES => continue,
            Err(e) => return Err(e),
        }
    }
    let budgets = catalog::of(Kind::PodDisruptionBudget);
    let list = reg.list(budgets, Some(ns), &ListOptions::default()).await?;
    let mut matching = Vec::new();
    for item in &list.items {
        let pdb = super::parse(item)?;
        if disruption::selects(&pdb, &pod) {
            matching.push(pdb);
        }
    }
    if matching.len() > 1 {
        return Err(Error::Unsupported(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
        ));
    }
    let mut pinned = false;
    let mut budget_name = String::new();
    if let Some(mut pdb) = matching.pop() {
        budget_name = pdb["metadata"]["name"].as_str().unwrap_or("").to_string();
        let unhealthy_allowed = !is_pod_ready(&pod)
            && (pdb.pointer("/spec/unhealthyPodEvictionPolicy") == Some(&json!("AlwaysAllow"))
                || (int_at(&pdb, "/status/currentHealthy")
                    >= int_at(&pdb, "/status/desiredHealthy")
                    && int_at(&pdb, "/status/desiredHealthy") > 0));
        if unhealthy_allowed {
            // It counts for nothing; delete it only as it was when judged so.
            pinned = true;
        } else {
            let mut done = false;
            for _ in 0..RETRIES {
                match check_and_decrement(reg, name, &pdb, delete.dry_run).await {
                    Ok(()) => {
                        done = true;
                        break;
                    }
                    Err(Error::Conflict { .. }) => {
                        pdb = super::parse(&reg.get(budgets, Some(ns), &budget_name)?)?;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !done {
                return Err(Error::Timeout(format!(
                    "couldn't update PodDisruptionBudget {budget_name:?} due to conflicts"
                )));
            }
        }
    }
    let mut d = delete;
    if pinned && !own_precondition {
        d.resource_version = pod["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
    }
    match mark_and_delete(reg, ns, name, d).await {
        Ok(()) => Ok(success()),
        Err(Error::Conflict { .. }) if pinned && !own_precondition => {
            Err(still_processing(&budget_name))
        }
        Err(e) => Err(e),
    }
}

/// The condition an evicted pod carries from the eviction on (`DisruptionTarget`), so that
/// whoever sees it fail knows why (a Job's pod failure policy, say).
fn disruption_target() -> Value {
    json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
           "message": "Eviction API: evicting"})
}

/// Marks the pod with [`disruption_target`] in a write of its status, then deletes it
/// (`addConditionAndDeletePod`). The write honours the deletion's preconditions, and a
/// resourceVersion precondition then names the version that write made; without one, a
/// concurrent write is retried. A dry run only deletes (as a dry run).
async fn mark_and_delete(reg: &Registry, ns: &str, name: &str, mut d: DeleteOptions) -> Result<()> {
    let pods = catalog::of(Kind::Pod);
    let mut attempts = 0;
    while !d.dry_run {
        attempts += 1;
        let mut pod = super::parse(&reg.get(pods, Some(ns), name)?)?;
        let meta = |f: &str| pod["metadata"][f].as_str().unwrap_or("").to_string();
        let (uid, rv) = (meta("uid"), meta("resourceVersion"));
        let stale = |want: &Option<String>, have: &str| {
            want.as_deref().is_some_and(|w| !w.is_empty() && w != have)
        };
        if stale(&d.uid, &uid) || stale(&d.resource_version, &rv) {
            return Err(Registry::conflict(pods, name));
        }
        crate::types::set_condition(&mut pod, disruption_target());
        match reg
            .update(
                pods,
                Some(ns),
                name,
                pod,
                Part::Status,
                &WriteOptions::default(),
            )
            .await
        {
            Ok(w) => {
                if d.resource_version.is_some() {
                    let written = super::parse(&w.object)?;
                    d.resource_version = written["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                }
                break;
            }
            Err(Error::Conflict { .. }) if d.resource_version.is_none() && attempts < RETRIES => {}
            Err(e) => return Err(e),
        }
    }
    reg.delete(pods, Some(ns), name, &d).await.map(|_| ())
}

/// Takes one disruption from the budget and records the pod as disrupted, in one write
/// of the budget's status as it was read (`checkAndDecrement`).
async fn check_and_decrement(reg: &Registry, pod: &str, pdb: &Value, dry_run: bool) -> Result<()> {
    let name = pdb["metadata"]["name"].as_str().unwrap_or("");
    if int_at(pdb, "/status/observedGeneration") < int_at(pdb, "/metadata/generation") {
        return Err(still_processing(name));
    }
    let allowed = int_at(pdb, "/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(budget_forbidden(
            name,
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted = pdb
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(budget_forbidden(
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int_at(pdb, "/status/desiredHealthy"),
                int_at(pdb, "/status/currentHealthy"),
            ),
            0,
        ));
    }
    if dry_run {
        return Ok(());
    }
    let mut next = pdb.clone();
    let status = &mut next["status"];
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed - 1 == 0 {
        let (state, reason) = disruption::allowed_state(status);
        disruption::set_condition(status, state, reason, "");
    }
    if !status["disruptedPods"].is_object() {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][pod] = json!(crate::types::now());
    let ns = pdb["metadata"]["namespace"].as_str();
    reg.update(
        catalog::of(Kind::PodDisruptionBudget),
        ns,
        name,
        next,
        Part::Status,
        &WriteOptions::default(),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(obj: &Value) -> Vec<String> {
        let mut causes = Vec::new();
        PodDisruptionBudget.validate(obj, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn pdb(spec: Value) -> Value {
        json!({"metadata": {"name": "b", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn a_budget_sets_one_of_min_available_and_max_unavailable() {
        let sel = json!({"matchLabels": {"app": "web"}});
        assert!(fields(&pdb(json!({"minAvailable": 2, "selector": sel}))).is_empty());
        assert!(fields(&pdb(json!({"maxUnavailable": "50%", "selector": sel}))).is_empty());
        let both = fields(&pdb(json!({"minAvailable": 1, "maxUnavailable": 1})));
        assert_eq!(both.len(), 1, "{both:?}");
        assert!(
            both[0].ends_with("minAvailable and maxUnavailable cannot be both set"),
            "{both:?}"
        );
        assert_eq!(
            fields(&pdb(json!({"minAvailable": -1}))),
            ["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            fields(&pdb(json!({"maxUnavailable": "120%"}))),
            ["spec.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%"]
        );
        assert!(
            fields(&pdb(json!({"minAvailable": "half"})))[0]
                .starts_with("spec.minAvailable: Invalid value: \"half\": a valid percent string")
        );
        assert!(
            fields(&pdb(json!({"unhealthyPodEvictionPolicy": "Sometimes"})))[0]
                .starts_with("spec.unhealthyPodEvictionPolicy: Unsupported value: \"Sometimes\"")
        );
    }

    #[test]
    fn pods_not_running_skip_the_budget() {
        for (phase, skip) in [
            ("Pending", true),
            ("Running", false),
            ("Succeeded", true),
            ("Failed", true),
        ] {
            let pod = json!({"metadata": {}, "status": {"phase": phase}});
            assert_eq!(can_ignore_budget(&pod), skip, "{phase}");
        }
        let deleting = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"},
                              "status": {"phase": "Running"}});
        assert!(can_ignore_budget(&deleting));
        assert!(!enforce_resource_version(&deleting));
    }
}
