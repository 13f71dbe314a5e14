//! The disruption controller: keeps each PodDisruptionBudget's status, as
//! kube-controller-manager's (`pkg/controller/disruption`) does. The pods a budget
//! selects give `currentHealthy` (ready, not being deleted, not just evicted);
//! `minAvailable` as a number is `desiredHealthy` over the pods there are, while a
//! percentage or `maxUnavailable` is taken of `expectedPods`, the sum of the scales of the
//! pods' controllers (`getExpectedScale`: a ReplicaSet under a Deployment counts as the
//! Deployment; any kind with a scale counts by it). `disruptionsAllowed` is what is
//! healthy beyond what is desired, and the `DisruptionAllowed` condition says so
//! (`SufficientPods`, `InsufficientPods`, or `SyncFailed` with the error, when the status
//! cannot be worked out and no disruption is allowed).
//!
//! The pods an eviction put in `disruptedPods` count as gone until the controller sees
//! them deleted or two minutes pass; the reconcile asks to be run again at the earliest
//! such expiry, the only timer. Budgets and pods queue through watches.
//!
//! A sync decodes its budget once as a k8s-openapi `PodDisruptionBudget`; pods and the
//! pods' controllers stay JSON, read through [`crate::types::json`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::claim::{controller_ref, is_deleting, str_at};
use super::deployment::scaled_int_or_percent;
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, Kind, catalog, key_of};
use crate::types::disruption::{self, DISRUPTION_ALLOWED, selects};
use crate::types::json::{array_at, int_at};

/// How long an evicted pod counts as being deleted (`DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);
const WORKERS: usize = 2;

fn is_ready(pod: &Value) -> bool {
    crate::types::is_pod_ready(pod)
}

/// Seconds since a time.
fn age(t: &Time) -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second()
}

/// The disrupted pods still to be waited for and when the first of them expires
/// (`buildDisruptedPodMap`); pods being deleted or gone leave the map.
fn disrupted_pods(
    status: Option<&PodDisruptionBudgetStatus>,
    pods: &[&Value],
) -> (BTreeMap<String, Time>, Option<Duration>) {
    let mut out = BTreeMap::new();
    let mut recheck: Option<Duration> = None;
    let Some(listed) = status.and_then(|s| s.disrupted_pods.as_ref()) else {
        return (out, None);
    };
    let timeout = DELETION_TIMEOUT.as_secs() as i64;
    for pod in pods.iter().filter(|p| !is_deleting(p)) {
        let name = str_at(pod, "/metadata/name");
        let Some(at) = listed.get(name) else {
            continue;
        };
        let elapsed = age(at);
        if elapsed >= timeout {
            continue;
        }
        let left = Duration::from_secs((timeout - elapsed) as u64);
        recheck = Some(recheck.map_or(left, |r| r.min(left)));
        out.insert(name.to_string(), at.clone());
    }
    (out, recheck)
}

/// Ready pods that are neither being deleted nor just evicted (`countHealthyPods`).
fn current_healthy(pods: &[&Value], disrupted: &BTreeMap<String, Time>) -> i64 {
    pods.iter()
        .filter(|p| !is_deleting(p))
        .filter(|p| !disrupted.contains_key(str_at(p, "/metadata/name")))
        .filter(|p| is_ready(p))
        .count() as i64
}

/// `updatePdbStatus`'s figure: never below zero, and zero while nothing is expected.
fn disruptions_allowed(current: i64, desired: i64, expected: i64) -> i64 {
    if expected <= 0 {
        0
    } else {
        (current - desired).max(0)
    }
}

#[derive(Clone)]
struct Controller {
    client: Client,
    pdbs: Informer,
    pods: Informer,
    rss: Informer,
    deployments: Informer,
    rcs: Informer,
    recorder: Recorder,
}

/// Why a budget's figures could not be worked out.
struct SyncError(String);

/// A budget's figures, as its status says them.
struct Figures {
    current: i64,
    desired: i64,
    expected: i64,
    disrupted: BTreeMap<String, Time>,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(pdb) = self.pdbs.get(&key) else {
            return Ok(Action::Done);
        };
        let budget: PodDisruptionBudget = decode(&pdb)?;
        match self.try_sync(&pdb, &budget).await {
            Ok(action) => Ok(action),
            Err(Ok(e)) => Err(e),
            Err(Err(SyncError(message))) => {
                self.fail_safe(&pdb, &message).await?;
                Err(super::Error::Other(format!(
                    "pod disruption budget {key}: {message}"
                )))
            }
        }
    }

    /// `trySync`: an error of the API as it is (a conflict retries), or one of the
    /// figures' for the fail-safe.
    async fn try_sync(
        &self,
        pdb: &Value,
        budget: &PodDisruptionBudget,
    ) -> std::result::Result<Action, Result<super::Error, SyncError>> {
        let ns = budget.metadata.namespace.as_deref().unwrap_or("");
        let all = self.pods.list_namespace(ns);
        let pods: Vec<&Value> = all
            .iter()
            .map(|p| &**p)
            .filter(|p| selects(pdb, p))
            .collect();
        if pods.is_empty() {
            self.recorder
                .normal(pdb, "NoPods", "No matching pods found")
                .await;
        }
        let (expected, desired, unmanaged) = match self.expected_count(budget, &pods).await {
            Ok(figures) => figures,
            Err(Ok(e)) => return Err(Ok(e)),
            Err(Err(SyncError(why))) => {
                let message = format!("Failed to calculate the number of expected pods: {why}");
                self.recorder
                    .warning(pdb, "CalculateExpectedPodCountFailed", &message)
                    .await;
                return Err(Err(SyncError(why)));
            }
        };
        if unmanaged {
            let selector = budget.spec.as_ref().and_then(|s| s.selector.as_ref());
            let selector = crate::types::labels::format_label_selector(
                &serde_json::to_value(selector).unwrap_or_default(),
            );
            self.recorder
                .warning(pdb, "UnmanagedPods",
                    &format!(
                        "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."
                    ),
                )
                .await;
        }
        let (disrupted, recheck) = disrupted_pods(budget.status.as_ref(), &pods);
        let current = current_healthy(&pods, &disrupted);
        let figures = Figures {
            current,
            desired,
            expected,
            disrupted,
        };
        self.write_status(pdb, budget, figures).await.map_err(Ok)?;
        Ok(match recheck {
            Some(d) => Action::RequeueAfter(d + Duration::from_secs(1)),
            None => Action::Done,
        })
    }

    /// `getExpectedPodCount`: (expectedPods, desiredHealthy, whether pods without a
    /// controller were found).
    async fn expected_count(
        &self,
        budget: &PodDisruptionBudget,
        pods: &[&Value],
    ) -> std::result::Result<(i64, i64, bool), Result<super::Error, SyncError>> {
        let spec = budget.spec.as_ref();
        if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
            let (expected, unmanaged) = self.expected_scale(pods).await?;
            let max = scaled_int_or_percent(Some(max), expected, true);
            return Ok((expected, (expected - max).max(0), unmanaged));
        }
        match spec.and_then(|s| s.min_available.as_ref()) {
            Some(IntOrString::Int(n)) => Ok((pods.len() as i64, i64::from(*n), false)),
            Some(min @ IntOrString::String(_)) => {
                let (expected, unmanaged) = self.expected_scale(pods).await?;
                let min = scaled_int_or_percent(Some(min), expected, true);
                Ok((expected, min, unmanaged))
            }
            None => Ok((0, 0, false)),
        }
    }

    /// `getExpectedScale`: the sum of the scales of the pods' controllers.
    async fn expected_scale(
        &self,
        pods: &[&Value],
    ) -> std::result::Result<(i64, bool), Result<super::Error, SyncError>> {
        let mut scales: HashMap<String, i64> = HashMap::new();
        let mut unmanaged = false;
        for pod in pods {
            let Some(r) = controller_ref(pod) else {
                unmanaged = true;
                continue;
            };
            if scales.contains_key(str_at(r, "/uid")) {
                continue;
            }
            let ns = str_at(pod, "/metadata/namespace");
            match self.scale_of(ns, r).await.map_err(Ok)? {
                Some((uid, n)) => {
                    scales.insert(uid, n);
                }
                None => {
                    return Err(Err(SyncError(format!(
                        "found no controllers for pod {:?}",
                        str_at(pod, "/metadata/name")
                    ))));
                }
            }
        }
        Ok((scales.values().sum(), unmanaged))
    }

    /// The uid and desired scale of the controller `r` names, if it is one with a scale
    /// and is still the object it names (the finders of upstream).
    async fn scale_of(&self, ns: &str, r: &Value) -> Result<Option<(String, i64)>> {
        let kind = str_at(r, "/kind");
        let api_version = str_at(r, "/apiVersion");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let uid = str_at(r, "/uid");
        let name = str_at(r, "/name");
        let key = format!("{ns}/{name}");
        let cached = |informer: &Informer| informer.get(&key).map(|o| (*o).clone());
        let owner = match (group, kind) {
            ("apps" | "extensions", "ReplicaSet") => cached(&self.rss),
            ("apps" | "extensions", "Deployment") => cached(&self.deployments),
            ("", "ReplicationController") => cached(&self.rcs),
            _ => {
                let Some(res) = catalog::RESOURCES
                    .iter()
                    .find(|res| res.group == group && res.kind_name == kind && res.scale)
                else {
                    return Ok(None);
                };
                match self.client.get(res, Some(ns), name).await {
                    Ok(o) => Some(o),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let Some(owner) = owner.filter(|o| str_at(o, "/metadata/uid") == uid) else {
            return Ok(None);
        };
        // A ReplicaSet a Deployment controls counts as the Deployment.
        if kind == "ReplicaSet"
            && let Some(d) = controller_ref(&owner).filter(|d| str_at(d, "/kind") == "Deployment")
        {
            return Box::pin(self.scale_of(ns, d)).await;
        }
        let res = catalog::RESOURCES
            .iter()
            .find(|res| res.group == group && res.kind_name == kind);
        let replicas = match res {
            Some(res) => res.strategy.scale(&owner).replicas.as_i64().unwrap_or(0),
            None => int_at(&owner, "/spec/replicas"),
        };
        Ok(Some((uid.to_string(), replicas)))
    }

    /// `updatePdbStatus`: writes the figures when anything changed. The conditions
    /// written are the stored ones (JSON, as they are) with `DisruptionAllowed` set.
    async fn write_status(
        &self,
        pdb: &Value,
        budget: &PodDisruptionBudget,
        figures: Figures,
    ) -> Result<()> {
        let Figures {
            current,
            desired,
            expected,
            disrupted,
        } = figures;
        let allowed = disruptions_allowed(current, desired, expected);
        let none = PodDisruptionBudgetStatus::default();
        let old = budget.status.as_ref().unwrap_or(&none);
        let generation = budget.metadata.generation;
        let cond = old
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == DISRUPTION_ALLOWED);
        let want = disruption::allowed_state(&json!({"disruptionsAllowed": allowed}));
        let figure = |n: Option<i32>| n.map_or(0, i64::from);
        let up_to_date = figure(old.current_healthy) == current
            && figure(old.desired_healthy) == desired
            && figure(old.expected_pods) == expected
            && figure(old.disruptions_allowed) == allowed
            && old
                .disrupted_pods
                .as_ref()
                .map_or(disrupted.is_empty(), |old| *old == disrupted)
            && old.observed_generation == generation
            && cond.is_some_and(|c| c.status == want.0 && c.reason == want.1);
        if up_to_date {
            return Ok(());
        }
        let mut status = json!({
            "currentHealthy": current,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "observedGeneration": generation,
        });
        if !disrupted.is_empty() {
            status["disruptedPods"] = json!(disrupted);
        }
        let conditions = array_at(pdb, "/status/conditions");
        if !conditions.is_empty() {
            status["conditions"] = Value::from(conditions);
        }
        disruption::set_condition(&mut status, want.0, want.1, "");
        self.put_status(pdb, status).await
    }

    /// Writes `status` as the budget's status.
    async fn put_status(&self, pdb: &Value, status: Value) -> Result<()> {
        let mut copy = pdb.clone();
        copy["status"] = status;
        self.client
            .update_status(self.pdbs.resource(), &copy)
            .await?;
        Ok(())
    }

    /// `failSafe`: no disruption allowed, and the condition says why.
    async fn fail_safe(&self, pdb: &Value, message: &str) -> Result<()> {
        let mut status = match pdb.get("status") {
            Some(status @ Value::Object(_)) => status.clone(),
            _ => json!({}),
        };
        status["disruptionsAllowed"] = json!(0);
        disruption::set_condition(&mut status, "False", "SyncFailed", message);
        if pdb.get("status") == Some(&status) {
            return Ok(());
        }
        self.put_status(pdb, status).await
    }
}

/// The keys of the budgets of the pod's namespace that select it.
fn budgets_of(pdbs: &Informer, pod: &Value) -> Vec<String> {
    pdbs.list_namespace(str_at(pod, "/metadata/namespace"))
        .iter()
        .filter(|pdb| selects(pdb, pod))
        .map(|pdb| key_of(pdb))
        .collect()
}

/// Registers the disruption controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let pdbs = ctx.informers.get(catalog::of(Kind::PodDisruptionBudget));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let rss = ctx.informers.get(catalog::of(Kind::ReplicaSet));
    let deployments = ctx.informers.get(catalog::of(Kind::Deployment));
    let rcs = ctx.informers.get(catalog::of(Kind::ReplicationController));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        pdbs: pdbs.clone(),
        pods: pods.clone(),
        rss: rss.clone(),
        deployments: deployments.clone(),
        rcs: rcs.clone(),
        recorder: ctx.recorder("controllermanager"),
    });
    let budgets = pdbs.clone();
    runtime::Controller::new("disruption")
        .reconciles(&pdbs)
        // A pod's change goes to the budgets that select it (or did).
        .watches(&pods, move |change, queue| {
            let mut keys: BTreeMap<String, ()> = BTreeMap::new();
            if let Change::Updated { old, .. } = change {
                keys.extend(budgets_of(&budgets, old).into_iter().map(|k| (k, ())));
            }
            keys.extend(
                budgets_of(&budgets, change.object())
                    .into_iter()
                    .map(|k| (k, ())),
            );
            for key in keys.into_keys() {
                queue.add(key);
            }
        })
        // The pods' controllers, read for their scale.
        .waits_for(&rss)
        .waits_for(&deployments)
        .waits_for(&rcs)
        .workers(WORKERS)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
               "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    #[test]
    fn evicted_and_deleting_pods_are_not_healthy() {
        let mut deleting = pod("c", true);
        deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        let pods = [pod("a", true), pod("b", true), deleting, pod("d", false)];
        let refs: Vec<&Value> = pods.iter().collect();
        let pdb: PodDisruptionBudget = decode(&json!({"status": {"disruptedPods": {
            "b": crate::types::now(),
            "a": "2020-01-01T00:00:00Z",
            "gone": crate::types::now(),
        }}}))
        .unwrap();
        let (disrupted, recheck) = disrupted_pods(pdb.status.as_ref(), &refs);
        // a's eviction expired, gone is gone: only b is still being waited for.
        assert_eq!(disrupted.keys().collect::<Vec<_>>(), ["b"]);
        assert!(recheck.is_some_and(|d| d <= DELETION_TIMEOUT));
        assert_eq!(current_healthy(&refs, &disrupted), 1);
    }

    #[test]
    fn disruptions_allowed_never_go_below_zero_nor_above_zero_with_nothing_expected() {
        assert_eq!(disruptions_allowed(3, 2, 3), 1);
        assert_eq!(disruptions_allowed(1, 2, 3), 0);
        assert_eq!(disruptions_allowed(3, 0, 0), 0);
    }
}
