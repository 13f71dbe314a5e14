//! Stopping a pod's containers: the `Killing` event, the preStop hook within the grace
//! period, SIGTERM then SIGKILL; and the end of a deleted pod, its object removed last.

use std::time::Duration;

use serde_json::{Value, json};

use super::{MIN_GRACE, Worker, grace, hook_kind, str_at};
use crate::client::{Kind, catalog};
use crate::node::probe;
use crate::runtime::{ContainerId, Runtime, State};

impl<R: Runtime + Clone> Worker<R> {
    pub(super) async fn stop_all(&self, pod: &Value) {
        let instances = self.instances();
        let running: Vec<ContainerId> = instances
            .iter()
            .filter(|s| matches!(s.state, State::Running | State::Created))
            .map(|s| s.id.clone())
            .collect();
        let grace = grace(pod);
        let specs: Vec<&Value> = ["initContainers", "containers"]
            .iter()
            .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
            .collect();
        let stops = running.iter().map(|id| {
            let c = specs
                .iter()
                .copied()
                .find(|c| c["name"] == id.name.as_str());
            let message = format!("Stopping container {}", id.name);
            async move { self.kill(pod, c, id, grace, &message).await }
        });
        futures_util::future::join_all(stops).await;
    }

    /// Kills one running container (§14.2): event `Killing` with `message`, the preStop
    /// hook within the grace period, then SIGTERM and, when the rest of the grace period
    /// (at least 2 s) has passed, SIGKILL.
    pub(super) async fn kill(
        &self,
        pod: &Value,
        c: Option<&Value>,
        id: &ContainerId,
        grace: Duration,
        message: &str,
    ) {
        self.shared.recorder.normal(pod, "Killing", message).await;
        let began = self.shared.runtime.now();
        let hook = c.and_then(|c| c.pointer("/lifecycle/preStop").map(|h| (c, h)));
        if let (Some((c, hook)), false) = (hook, grace.is_zero()) {
            let env = match self.envs.get(&id.name) {
                Some(env) => env.clone(),
                None => self.env(pod, c).await.unwrap_or_default(),
            };
            let ran = tokio::time::timeout(
                grace,
                probe::act(hook, c, &env, &self.inside(id), &self.pod_ip(pod)),
            )
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {}s", grace.as_secs())));
            if let Err(why) = ran {
                let message = format!(
                    "PreStopHook failed: {} lifecycle hook for container {:?} in pod {:?} failed: {why}",
                    hook_kind(hook),
                    id.name,
                    Self::full_name(pod)
                );
                self.shared
                    .recorder
                    .warning(pod, "FailedPreStopHook", &message)
                    .await;
            }
        }
        let spent =
            Duration::try_from(self.shared.runtime.now().duration_since(began)).unwrap_or_default();
        let left = grace.saturating_sub(spent).max(MIN_GRACE);
        if let Err(e) = self.shared.runtime.stop(id, left).await {
            tracing::warn!(container = %id, error = %e, "could not stop a container");
        }
    }

    /// Stops the pod's containers; once nothing runs, its records go and, for a pod
    /// still in the API (graceful deletion), its object is removed.
    /// `pod` is the pod as last seen; `in_api` says whether its object is still there
    /// (graceful deletion) or already gone (force deletion, or berth was down).
    ///
    /// Returns false when something still runs or the object could not be removed: the
    /// worker tries again after `retry_after`, and nothing is reported finished meanwhile.
    pub(super) async fn terminate(&mut self, pod: Option<&Value>, in_api: bool) -> bool {
        let fallback = json!({"spec": {"terminationGracePeriodSeconds": 30}});
        let p = pod.unwrap_or(&fallback);
        self.stop_all(p).await;
        let still = self
            .instances()
            .into_iter()
            .find(|s| matches!(s.state, State::Running | State::Created));
        if let Some(s) = still {
            tracing::warn!(container = %s.id, "a container of a deleted pod is still running; trying again");
            return false;
        }
        // Its containers stopped, the pod's sandbox goes too (as the kubelet stops it).
        self.shared.runtime.stop_sandbox(&self.uid);
        self.unwire().await;
        if let (Some(pod), true) = (pod, in_api) {
            let st = self.final_status(pod);
            self.write_status(pod, st).await;
            let params = crate::client::DeleteParams {
                uid: Some(self.uid.clone()),
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let ns = str_at(pod, "/metadata/namespace");
            let name = str_at(pod, "/metadata/name");
            match self
                .shared
                .client
                .delete(catalog::of(Kind::Pod), Some(ns), name, &params)
                .await
            {
                // Gone, or the name now belongs to another pod (the uid precondition).
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    tracing::warn!(pod = %Self::full_name(pod), error = %e, "could not remove a finished pod");
                    return false;
                }
            }
        }
        if let Err(e) = self.shared.runtime.remove_pod(&self.uid) {
            tracing::warn!(pod = %self.uid, error = %e, "could not remove a pod's records");
        }
        true
    }
}
