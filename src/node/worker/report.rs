//! Reporting the pod's status: written unless the API already shows it, to the mirror pod
//! for a static pod, as a patch that leaves what others own.

use serde_json::{Value, json};

use super::{Worker, str_at};
use crate::client::Patch;
use crate::client::{Kind, catalog};
use crate::node::status;
use crate::runtime::Runtime;

impl<R: Runtime + Clone> Worker<R> {
    /// Writes the status unless the API already shows it.
    ///
    /// The agent is the source of truth: a status someone else changed in the API is
    /// written back at the next sync (which that change itself triggers). One the API
    /// already shows is not sent again.
    pub(super) async fn write_status(&mut self, pod: &Value, mut st: Value) {
        if matches!(st["phase"].as_str(), Some("Succeeded" | "Failed")) {
            self.end_finished_sandbox().await;
        }
        self.reported = Some(st.clone());
        if pod.get("status").is_some_and(|api| covers(api, &st)) {
            return;
        }
        // A static pod's status goes to its mirror pod, once there is a current one.
        let target = if crate::node::manifests::is_static(pod) {
            if !self.shared.pods.has_current_mirror(pod) {
                return;
            }
            match self.shared.pods.mirror_of(pod) {
                Some(m) => str_at(&m, "/metadata/uid").to_string(),
                None => return,
            }
        } else {
            self.uid.clone()
        };
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let patch = status_patch(&target, st.take());
        match self
            .shared
            .client
            .patch_status(
                catalog::of(Kind::Pod),
                Some(ns),
                name,
                &Patch::Strategic(patch.clone()),
            )
            .await
        {
            Ok(_) => {}
            // Gone, or the name now belongs to another pod: nothing to report to.
            Err(e) if e.is_not_found() || self.replaced(&e) => {}
            Err(e) => {
                // Left unwritten: the retry sync sends it again.
                tracing::warn!(pod = %Self::full_name(pod), error = %e, "could not write the pod status");
                self.retry = true;
            }
        }
    }

    /// Whether a write failed because the pod's name now belongs to another pod.
    fn replaced(&self, e: &crate::client::Error) -> bool {
        e.is_conflict() && e.to_string().contains("UID in precondition")
    }

    /// Writes the last computed status over a status someone else changed.
    pub(super) async fn reconcile(&mut self, pod: &Value) {
        if let Some(st) = self.reported.clone() {
            self.write_status(pod, st).await;
        }
    }
}

/// The strategic merge patch that writes status `st` of the pod with uid `uid`: fields of
/// the API status the agent does not own stay, the rest are replaced. Of the conditions
/// only the agent's go, merged by type with every field named (null for one a condition
/// has not): another writer's (the DisruptionTarget of an eviction) stays, however old
/// the agent's copy of the pod. The uid makes the write fail on a pod re-created under
/// the same name.
fn status_patch(uid: &str, mut st: Value) -> Value {
    if let Some(cs) = st.get_mut("conditions").and_then(Value::as_array_mut) {
        cs.retain(status::owns_condition);
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            for field in ["reason", "message", "lastProbeTime", "lastTransitionTime"] {
                c.entry(field).or_insert(Value::Null);
            }
        }
    }
    json!({"metadata": {"uid": uid}, "status": st})
}

/// Whether `api` already holds every field of `ours` with the same value (fields only
/// `api` has are someone else's and do not matter).
fn covers(api: &Value, ours: &Value) -> bool {
    match (api, ours) {
        (Value::Object(a), Value::Object(o)) => o
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| covers(av, v)) || v.is_null()),
        (a, o) => a == o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_patch_writes_only_the_agents_conditions_and_all_their_fields() {
        let st = json!({"phase": "Failed", "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": "t"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        ]});
        let patch = status_patch("u1", st);
        assert_eq!(patch["metadata"]["uid"], "u1");
        assert_eq!(
            patch["status"]["conditions"],
            json!([{"type": "Ready", "status": "False", "reason": "PodFailed",
                    "lastTransitionTime": "t", "message": null, "lastProbeTime": null}])
        );
    }

    #[test]
    fn a_status_is_covered_when_the_api_holds_all_of_it() {
        let ours = json!({"phase": "Running", "containerStatuses": [{"ready": true}], "x": null});
        let api = json!({"phase": "Running", "containerStatuses": [{"ready": true}], "other": 1});
        assert!(covers(&api, &ours));
        let edited = json!({"phase": "Pending", "containerStatuses": [{"ready": true}]});
        assert!(!covers(&edited, &ours));
    }
}
