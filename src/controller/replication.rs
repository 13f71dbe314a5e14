//! The replication manager: keeps `spec.replicas` pods of each ReplicationController,
//! and, as the ReplicaSet controller, of each ReplicaSet (one implementation, two kinds:
//! an [`Owner`] says how each names itself and reads its selector).
//!
//! It adopts orphans that match the selector and releases owned pods that stop matching;
//! creates missing pods in slow-start batches (1, 2, 4, …) so that a broken template fails
//! fast; deletes surplus pods in order (unscheduled, pending, not ready, then newest first);
//! and reports `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`
//! (after `minReadySeconds`), `observedGeneration` and a `ReplicaFailure` condition.
//! Expectations remember the creations and deletions it asked for until the pod informer
//! has seen them, so that a sync on a stale cache never creates or deletes twice.
//!
//! A sync decodes its RC or ReplicaSet once, as the k8s-openapi type of its kind, into
//! the few figures the two kinds share ([`Replicated`]); pods stay JSON, read through
//! [`crate::types::json`] (a sync looks at every pod of its controller).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::claim::{Claim, OwnerKind, is_deleting, str_at};
use super::expectations::Expectations;
use super::podcontrol;
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::Informer;
use crate::client::recorder::Recorder;
use crate::client::{Client, DeleteParams};
use crate::client::{Kind, catalog};
use crate::types::json::{array_at, int_at};
use crate::types::labels;

/// Pods created or deleted in one sync at most (as kube-controller-manager's burst).
const BURST: usize = 500;
const WORKERS: usize = 5;

/// A kind whose objects keep a number of pods from a template.
#[derive(Debug, Clone, Copy)]
struct Owner {
    kind: Kind,
    api_version: &'static str,
    kind_name: &'static str,
    /// The selector is a LabelSelector (`matchLabels`, `matchExpressions`), not a map.
    label_selector: bool,
    /// The controller's name, and the component its events come from.
    name: &'static str,
    component: &'static str,
}

const REPLICATION_CONTROLLERS: Owner = Owner {
    kind: Kind::ReplicationController,
    api_version: "v1",
    kind_name: "ReplicationController",
    label_selector: false,
    name: "replication-manager",
    component: "replication-controller",
};

const REPLICA_SETS: Owner = Owner {
    kind: Kind::ReplicaSet,
    api_version: "apps/v1",
    kind_name: "ReplicaSet",
    label_selector: true,
    name: "replicaset-controller",
    component: "replicaset-controller",
};

impl Owner {
    fn controls(self) -> OwnerKind {
        OwnerKind {
            api_version: self.api_version,
            kind_name: self.kind_name,
        }
    }
}

#[derive(Clone)]
struct Manager {
    owner: Owner,
    client: Client,
    rcs: Informer,
    pods: Informer,
    expectations: Expectations,
    recorder: Recorder,
}

fn labels_of(obj: &Value, pointer: &str) -> BTreeMap<String, String> {
    labels::map_at(obj, pointer)
}

fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

fn is_active(pod: &Value) -> bool {
    !is_terminal(pod) && !is_deleting(pod)
}

fn is_ready(pod: &Value) -> bool {
    crate::types::is_pod_ready(pod)
}

/// How long `pod` has been ready, if it is.
fn ready_for(pod: &Value) -> Option<Duration> {
    let c = crate::types::condition(pod, "Ready").filter(|c| str_at(c, "/status") == "True")?;
    let age = crate::types::age_seconds(str_at(c, "/lastTransitionTime"))?;
    Some(Duration::from_secs(age.max(0) as u64))
}

/// A LabelSelector (`matchLabels`, `matchExpressions`) as a selector, as
/// [`labels::Selector::from_label_selector`] reads one; one with an unknown operator
/// selects nothing (validation refuses it).
pub(super) fn label_selector(sel: &LabelSelector) -> labels::Selector {
    use labels::Requirement;
    let mut requirements: Vec<Requirement> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let (key, values) = (e.key.clone(), e.values.clone().unwrap_or_default());
        requirements.push(match e.operator.as_str() {
            "In" => Requirement::In(key, values),
            "NotIn" => Requirement::NotIn(key, values),
            "Exists" => Requirement::Exists(key),
            "DoesNotExist" => Requirement::NotExists(key),
            _ => return labels::Selector::default(),
        });
    }
    labels::Selector { requirements }
}

/// `spec.selector` of an object read alone, without decoding the rest: the handlers that
/// find a child's owners look at every candidate of a namespace per event.
fn spec_selector<S: DeserializeOwned>(obj: &Value) -> Option<S> {
    #[derive(Deserialize)]
    struct Selecting<S> {
        spec: Option<SelectingSpec<S>>,
    }
    #[derive(Deserialize)]
    struct SelectingSpec<S> {
        selector: Option<S>,
    }
    Selecting::<S>::deserialize(obj).ok()?.spec?.selector
}

/// The LabelSelector of a ReplicaSet or Deployment read alone, as a selector; one that
/// does not parse selects nothing.
pub(super) fn spec_label_selector(obj: &Value) -> labels::Selector {
    spec_selector::<LabelSelector>(obj)
        .map(|s| label_selector(&s))
        .unwrap_or_default()
}

/// The selector of an RC (a map) or a ReplicaSet (a LabelSelector) read alone; one that
/// does not parse selects nothing.
fn selector_of(owner: Owner, rc: &Value) -> labels::Selector {
    if owner.label_selector {
        spec_label_selector(rc)
    } else {
        labels::Selector::from_map(&spec_selector(rc).unwrap_or_default())
    }
}

/// What a sync reads of its RC or ReplicaSet: the fields the two kinds share, from the
/// k8s-openapi type of its kind, decoded once at the sync's entry.
struct Replicated {
    selector: labels::Selector,
    /// `spec.replicas`, 1 when absent (as defaulted), never below 0.
    replicas: usize,
    min_ready: Duration,
    template_labels: BTreeMap<String, String>,
    generation: Option<i64>,
    deleting: bool,
}

impl Replicated {
    fn decode(owner: Owner, rc: &Value) -> Result<Self> {
        Ok(if owner.label_selector {
            let ReplicaSet { metadata, spec, .. } = decode(rc)?;
            let selector = label_selector(&spec.selector);
            Self::of(
                metadata,
                selector,
                spec.replicas,
                spec.min_ready_seconds,
                spec.template,
            )
        } else {
            let ReplicationController { metadata, spec, .. } = decode(rc)?;
            let spec = spec.unwrap_or_default();
            let selector = labels::Selector::from_map(&spec.selector.unwrap_or_default());
            Self::of(
                metadata,
                selector,
                spec.replicas,
                spec.min_ready_seconds,
                spec.template,
            )
        })
    }

    fn of(
        metadata: ObjectMeta,
        selector: labels::Selector,
        replicas: Option<i32>,
        min_ready_seconds: Option<i32>,
        template: Option<PodTemplateSpec>,
    ) -> Self {
        Self {
            selector,
            replicas: replicas.unwrap_or(1).max(0) as usize,
            min_ready: Duration::from_secs(min_ready_seconds.unwrap_or(0).max(0) as u64),
            template_labels: template
                .and_then(|t| t.metadata?.labels)
                .unwrap_or_default(),
            generation: metadata.generation,
            deleting: metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The order in which surplus pods go: the ones that cost least to lose first.
pub(super) fn deletion_order(a: &Value, b: &Value) -> Ordering {
    let scheduled = |p: &Value| !str_at(p, "/spec/nodeName").is_empty();
    let phase_rank = |p: &Value| match str_at(p, "/status/phase") {
        "Pending" | "" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let restarts = |p: &Value| {
        array_at(p, "/status/containerStatuses")
            .iter()
            .map(|c| int_at(c, "/restartCount"))
            .max()
            .unwrap_or(0)
    };
    scheduled(a)
        .cmp(&scheduled(b))
        .then(phase_rank(a).cmp(&phase_rank(b)))
        .then(is_ready(a).cmp(&is_ready(b)))
        .then(restarts(b).cmp(&restarts(a)))
        // Newer pods first: a later creationTimestamp sorts earlier.
        .then(
            str_at(b, "/metadata/creationTimestamp").cmp(str_at(a, "/metadata/creationTimestamp")),
        )
}

/// A new pod from `rc`'s template, copied as JSON: every field of it, whether
/// k8s-openapi knows it or not.
fn pod_from_template(owner: Owner, rc: &Value) -> Value {
    let template = &rc["spec"]["template"];
    let mut meta = json!({
        "generateName": format!("{}-", str_at(rc, "/metadata/name")),
        "namespace": str_at(rc, "/metadata/namespace"),
        "ownerReferences": [owner.controls().controlled_by(rc)],
    });
    for field in ["labels", "annotations"] {
        if let Some(v) = template.pointer(&format!("/metadata/{field}")) {
            meta[field] = v.clone();
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template["spec"],
    })
}

/// Slow start: batches of 1, 2, 4 … until `total` are created or a batch has an error.
/// `create` is given the number of its attempt (0, 1, …). Returns how many were created
/// and the first error.
pub(super) async fn slow_start<F, Fut>(
    total: usize,
    create: F,
) -> (usize, Option<crate::client::Error>)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = crate::client::Result<()>>,
{
    let mut done = 0;
    let mut batch = 1;
    while done < total {
        let n = batch.min(total - done);
        let first = done;
        let results = futures_util::future::join_all((first..first + n).map(&create)).await;
        let ok = results.iter().filter(|r| r.is_ok()).count();
        done += ok;
        if let Some(e) = results.into_iter().find_map(|r| r.err()) {
            return (done, Some(e));
        }
        batch *= 2;
    }
    (done, None)
}

impl Manager {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(rc) = self.rcs.get(&key) else {
            self.expectations.forget(&key);
            return Ok(Action::Done);
        };
        let view = Replicated::decode(self.owner, &rc)?;
        if view.selector.is_empty() {
            // Validation forbids this; never manage every pod of a namespace.
            return Ok(Action::Done);
        }
        let owned = Claim {
            client: &self.client,
            kind: self.owner.controls(),
            owners: self.rcs.resource(),
            children: &self.pods,
            owner: &rc,
            selector: &view.selector,
        }
        .run()
        .await?;
        let active: Vec<&Arc<Value>> = owned.iter().filter(|p| is_active(p)).collect();
        let want = view.replicas;
        let mut failure: Option<String> = None;
        if self.expectations.satisfied(&key) && !view.deleting {
            if active.len() < want {
                let n = (want - active.len()).min(BURST);
                self.expectations.expect(&key, n as i64, 0);
                let template = pod_from_template(self.owner, &rc);
                let ns = str_at(&rc, "/metadata/namespace");
                let (created, err) = slow_start(n, |_| async {
                    let pods = self.pods.resource();
                    podcontrol::create(&self.client, &self.recorder, pods, &rc, ns, &template)
                        .await?;
                    Ok(())
                })
                .await;
                // The pods never created will never be observed.
                self.expectations.observed(&key, (n - created) as i64, 0);
                if let Some(e) = err {
                    let message = format!("Error creating: {e}");
                    self.recorder.warning(&rc, "FailedCreate", &message).await;
                    failure = Some(message);
                }
            } else if active.len() > want {
                let n = (active.len() - want).min(BURST);
                let mut victims: Vec<&Arc<Value>> = active.clone();
                victims.sort_by(|a, b| deletion_order(a, b));
                victims.truncate(n);
                self.expectations.expect(&key, 0, n as i64);
                let results =
                    futures_util::future::join_all(victims.iter().map(|p| self.delete_pod(&rc, p)))
                        .await;
                let failed = results.iter().filter(|r| r.is_err()).count();
                self.expectations.observed(&key, 0, failed as i64);
                if let Some(e) = results.into_iter().find_map(|r| r.err()) {
                    failure = Some(format!("Error deleting: {e}"));
                }
            }
        }
        let requeue = self
            .update_status(&rc, &view, &active, failure.as_deref())
            .await?;
        // Waiting on its own writes: look again when the wait is given up at the latest.
        let requeue = match (requeue, self.expectations.pending_for(&key)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(message) = failure {
            return Err(super::Error::Other(message));
        }
        Ok(match requeue {
            Some(after) => Action::RequeueAfter(after),
            None => Action::Done,
        })
    }

    async fn delete_pod(&self, rc: &Value, pod: &Value) -> crate::client::Result<()> {
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let params = DeleteParams {
            uid: Some(str_at(pod, "/metadata/uid").to_string()),
            ..DeleteParams::default()
        };
        let pods = self.pods.resource();
        match podcontrol::delete(&self.client, &self.recorder, pods, rc, (ns, name), &params).await
        {
            // Already gone: its deletion will still be observed.
            Err(e) if e.is_not_found() => Ok(()),
            done => done,
        }
    }

    /// Writes the status when it changed; returns when to look again for pods that will
    /// become available after `minReadySeconds`. The status written is the one stored
    /// (JSON: every field of it kept) with the figures and condition of this sync.
    async fn update_status(
        &self,
        rc: &Value,
        view: &Replicated,
        active: &[&Arc<Value>],
        failure: Option<&str>,
    ) -> Result<Option<Duration>> {
        let min_ready = view.min_ready;
        let mut fully = 0;
        let mut ready = 0;
        let mut available = 0;
        let mut next: Option<Duration> = None;
        for pod in active {
            let labels = labels_of(pod, "/metadata/labels");
            if view
                .template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            {
                fully += 1;
            }
            if is_ready(pod) {
                ready += 1;
                match ready_for(pod) {
                    Some(d) if d >= min_ready => available += 1,
                    Some(d) => {
                        let wait = min_ready - d + Duration::from_millis(100);
                        next = Some(next.map_or(wait, |n: Duration| n.min(wait)));
                    }
                    None => available += min_ready.is_zero() as usize,
                }
            }
        }
        let mut status = match rc.get("status") {
            Some(Value::Object(status)) => status.clone(),
            _ => Map::new(),
        };
        for (field, value) in [
            ("replicas", json!(active.len())),
            ("fullyLabeledReplicas", json!(fully)),
            ("readyReplicas", json!(ready)),
            ("availableReplicas", json!(available)),
            ("observedGeneration", json!(view.generation)),
        ] {
            status.insert(field.into(), value);
        }
        let status = match failure {
            Some(message) => {
                let mut obj = json!({"status": status});
                crate::types::set_condition(
                    &mut obj,
                    json!({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message}),
                );
                obj["status"].take()
            }
            None => {
                if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
                    list.retain(|c| str_at(c, "/type") != "ReplicaFailure");
                    if list.is_empty() {
                        status.remove("conditions");
                    }
                }
                Value::Object(status)
            }
        };
        if rc.get("status") != Some(&status) {
            let mut updated = rc.clone();
            updated["status"] = status;
            match self
                .client
                .update_status(self.rcs.resource(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(next)
    }
}

/// Registers the replication manager's and the ReplicaSet controller's handlers and
/// starts their workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    keep(ctx, sup, REPLICATION_CONTROLLERS);
    keep(ctx, sup, REPLICA_SETS);
}

fn keep(ctx: &Context, sup: &mut Supervisor, owner: Owner) {
    let rcs = ctx.informers.get(catalog::of(owner.kind));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let expectations = Expectations::default();
    // Orphans go to every RC of their namespace whose selector matches them.
    let matching = runtime::selecting(&rcs, move |rc| selector_of(owner, rc));
    let manager = Arc::new(Manager {
        owner,
        client: ctx.client.clone(),
        rcs: rcs.clone(),
        pods: pods.clone(),
        expectations: expectations.clone(),
        recorder: ctx.recorder(owner.component),
    });
    // The pods' changes also settle what the manager expects to see (so it creates and
    // deletes no more than once per count it is short or over).
    runtime::Controller::new(owner.name)
        .reconciles_expecting(&rcs, &expectations)
        .owns_or_adopts_expecting(&pods, owner.controls(), matching, &expectations)
        .workers(WORKERS)
        .run_with(sup, manager, Manager::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    fn pod(name: &str, node: &str, phase: &str, ready: bool, created: &str) -> Value {
        json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        })
    }

    #[test]
    fn surplus_pods_go_unscheduled_then_pending_then_not_ready_then_newest() {
        let mut pods = [
            pod("old-ready", "n", "Running", true, "2024-01-01T00:00:00Z"),
            pod("new-ready", "n", "Running", true, "2024-01-02T00:00:00Z"),
            pod("not-ready", "n", "Running", false, "2024-01-01T00:00:00Z"),
            pod("pending", "n", "Pending", false, "2024-01-01T00:00:00Z"),
            pod("unscheduled", "", "Pending", false, "2024-01-01T00:00:00Z"),
        ];
        pods.sort_by(deletion_order);
        let names: Vec<&str> = pods
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "unscheduled",
                "pending",
                "not-ready",
                "new-ready",
                "old-ready"
            ]
        );
    }

    #[tokio::test]
    async fn slow_start_doubles_batches_and_stops_at_the_first_failing_batch() {
        let calls = AtomicUsize::new(0);
        let (created, err) = slow_start(100, |_| async {
            let n = calls.fetch_add(1, AtomicOrdering::SeqCst);
            if n >= 5 {
                Err(crate::client::Error::Invalid("broken template".into()))
            } else {
                Ok(())
            }
        })
        .await;
        // Batches 1, 2, then 4 of which 2 fail: 7 calls, 5 created, no more batches.
        assert_eq!(calls.load(AtomicOrdering::SeqCst), 7);
        assert_eq!(created, 5);
        assert!(err.is_some());
        let (created, err) = slow_start(10, |_| async { Ok(()) }).await;
        assert_eq!((created, err.is_none()), (10, true));
    }

    #[test]
    fn pods_from_the_template_are_owned_by_their_controller() {
        let rc = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": 2, "selector": {"app": "web"}, "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }},
        });
        let pod = pod_from_template(REPLICATION_CONTROLLERS, &rc);
        assert_eq!(pod["metadata"]["generateName"], "web-");
        assert_eq!(pod["metadata"]["labels"]["app"], "web");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            REPLICATION_CONTROLLERS
                .controls()
                .key_of_controller(&pod)
                .as_deref(),
            Some("ns/web")
        );
        assert_eq!(
            REPLICA_SETS.controls().key_of_controller(&pod),
            None,
            "another kind's pod"
        );
        assert_eq!(pod["spec"]["containers"][0]["name"], "c");
    }
}
