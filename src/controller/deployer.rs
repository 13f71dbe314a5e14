//! The deployer controller's decisions (spec `deploymentconfigs.md` §11): the phase
//! machine of a deployment (ReplicationController), the phase its deployer pod suggests,
//! what one pass over a deployment does (start a deployer pod, follow it, fail when it
//! goes missing or times out, carry out a cancellation), and the deployer pod itself.
//! Pure functions over the API objects; the controller loop applies them.

use crate::types::meta::Meta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ReplicationController;
use serde_json::{Map, Value, json};

use super::dcview::{self, DeploymentConfig};
use super::deploymentconfig::{decode_dc, is_cancelled, phase_of};
use super::{Action, Context, Error, Queue, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, DeleteParams, Patch, key_of};
use crate::client::{Kind, catalog};
use crate::types::json::{array_at, str_at};
use crate::types::openshift::{self as os, deployer_pod_name};

pub use crate::types::openshift::DEPLOYER_IMAGE;
pub const DEPLOYER_POD_GONE: &str = "deployer pod no longer exists";
pub const UNABLE_TO_CREATE: &str = "unable to create deployer pod";
pub const UNRELATED_POD: &str =
    "unrelated pod with the same name as this deployment is already running";
/// A key handled after this many requeues is on its last chance (§11.1).
pub const LAST_CHANCE_REQUEUES: u32 = 13;

/// Whether `from → to` is a move of the phase machine (§11.2).
pub fn allowed(from: &str, to: &str) -> bool {
    matches!(
        (from, to),
        ("New", "Pending" | "Running" | "Complete" | "Failed")
            | ("Pending", "Running" | "Complete" | "Failed")
            | ("Running", "Complete" | "Failed")
    )
}

/// The phase a deployer pod's phase stands for.
pub fn suggested(pod: &Value) -> &'static str {
    match str_at(pod, "/status/phase") {
        "Pending" => "Pending",
        "Running" => "Running",
        "Succeeded" => "Complete",
        "Failed" => "Failed",
        _ => "New",
    }
}

/// An event to record about a deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Something the pass asks the loop to do to pods.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    /// Create the deployer pod (then the RC moves to Pending).
    CreateDeployer(Value),
    /// Delete every pod labelled as this deployment's deployer or hook.
    DeleteDeployerPods,
    /// Give deployer-labelled pods without owners the ownerReference to the RC.
    OwnDeployerPods,
}

/// What one pass over a deployment decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// The phase to move to (written only when the move is allowed).
    pub next: String,
    /// Annotations to set (null removes).
    pub annotations: Map<String, Value>,
    pub acts: Vec<Act>,
    pub events: Vec<Event>,
    /// Wait and retry (the deployer pod may not be in the cache yet).
    pub retry: Option<String>,
    /// A Complete deployment whose cancellation came after its deployer succeeded: the
    /// annotations undo the cancellation although the phase stays.
    pub uncancel: bool,
}

/// A deployment as a pass reads it: the RC decoded once at the pass's entry, the RC as
/// stored (a pass writes it back with its changes; the deployer pod copies fields of its
/// template), and the view of the DC encoded in it.
pub struct Deployment<'a> {
    pub obj: &'a Value,
    pub rc: ReplicationController,
    /// The zero view when the encoded DC cannot be read (as the JSON reads of a missing
    /// one gave).
    pub dc: DeploymentConfig,
}

impl Meta for Deployment<'_> {
    fn meta(&self) -> &ObjectMeta {
        &self.rc.metadata
    }
}

impl<'a> Deployment<'a> {
    pub fn read(obj: &'a Value) -> Result<Self> {
        Ok(Deployment {
            obj,
            rc: decode(obj)?,
            dc: dcview::encoded(obj).unwrap_or_default(),
        })
    }

    fn phase(&self) -> &'static str {
        dcview::phase(&self.rc.metadata)
    }
}

/// A label of an object that stays JSON.
fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/labels")?.get(key)?.as_str()
}

/// Everything a pass looks at besides the RC.
pub struct Seen<'a> {
    pub deployer: Option<&'a Value>,
    /// The key is about to be dropped: decide rather than wait.
    pub last_chance: bool,
    pub now: jiff::Timestamp,
    /// The environment the deployer gets to reach the API (before the deployment's own).
    pub env: &'a [Value],
}

/// The strategy timeout of a DC in seconds (§11.3): Rolling/Recreate `timeoutSeconds`,
/// Custom 600; 0 or less means none.
fn timeout_seconds(dc: &DeploymentConfig) -> i64 {
    let s = &dc.spec.strategy;
    let t = match s.type_.as_str() {
        "Recreate" => s.recreate_params.as_ref().and_then(|p| p.timeout_seconds),
        "Custom" => None,
        _ => s.rolling_params.as_ref().and_then(|p| p.timeout_seconds),
    };
    t.unwrap_or(600)
}

/// The first terminated container's finish time of a pod.
fn finished_at(pod: &Value) -> Option<Value> {
    array_at(pod, "/status/containerStatuses")
        .iter()
        .map(|c| str_at(c, "/state/terminated/finishedAt"))
        .find(|t| !t.is_empty())
        .map(|t| json!(t))
}

/// Whether a pod is being deleted.
fn terminating(pod: &Value) -> bool {
    !str_at(pod, "/metadata/deletionTimestamp").is_empty()
}

/// One pass over a deployment (§11.3).
pub fn plan(rc: &Deployment<'_>, seen: &Seen<'_>) -> Plan {
    let current = rc.phase().to_string();
    let rc_name = rc.name().to_string();
    let ns = rc.namespace();
    let cancelled = dcview::cancelled(&rc.rc.metadata);
    let mut p = Plan {
        next: current.clone(),
        ..Plan::default()
    };
    // A deployer pod on its way out that has not succeeded will not finish the
    // deployment: once the deployment runs, it counts as gone already (its container,
    // stopped by the deletion, would otherwise pass for a deployer that failed).
    let deployer = seen.deployer.filter(|pod| {
        !(matches!(current.as_str(), "Pending" | "Running")
            && terminating(pod)
            && suggested(pod) != "Complete")
    });
    if let Some(pod) = deployer {
        p.next = suggested(pod).to_string();
        match p.next.as_str() {
            "Complete" => {
                if cancelled {
                    p.annotations
                        .insert(os::DEPLOYMENT_CANCELLED_ANNOTATION.into(), Value::Null);
                    p.annotations
                        .insert(os::DEPLOYMENT_STATUS_REASON_ANNOTATION.into(), Value::Null);
                    p.events.push(Event {
                        warning: true,
                        reason: "FailedCancellation",
                        message: "Succeeded before cancel recorded".into(),
                    });
                }
                if let Some(t) = finished_at(pod) {
                    p.annotations
                        .insert(os::DEPLOYER_POD_COMPLETED_AT_ANNOTATION.into(), t);
                }
                let target = dcview::annotation(&rc.rc.metadata, os::DESIRED_REPLICAS_ANNOTATION)
                    .map(str::to_string)
                    .unwrap_or_else(|| replicas(&rc.rc).to_string());
                p.annotations
                    .insert(os::DEPLOYMENT_REPLICAS_ANNOTATION.into(), json!(target));
                p.annotations
                    .insert(os::DESIRED_REPLICAS_ANNOTATION.into(), Value::Null);
            }
            "Failed" => {
                if let Some(t) = finished_at(pod) {
                    p.annotations
                        .insert(os::DEPLOYER_POD_COMPLETED_AT_ANNOTATION.into(), t);
                }
            }
            _ => {}
        }
    }
    let note_pod = |p: &mut Plan, pod: &Value| {
        p.annotations.insert(
            os::DEPLOYER_POD_ANNOTATION.into(),
            json!(deployer_pod_name(&rc_name)),
        );
        let created = str_at(pod, "/metadata/creationTimestamp");
        if !created.is_empty() {
            p.annotations.insert(
                os::DEPLOYER_POD_CREATED_AT_ANNOTATION.into(),
                json!(created),
            );
        }
        let started = str_at(pod, "/status/startTime");
        if !started.is_empty() {
            p.annotations.insert(
                os::DEPLOYER_POD_STARTED_AT_ANNOTATION.into(),
                json!(started),
            );
        }
    };
    match current.as_str() {
        "New" => {
            if cancelled {
                p.next = "Pending".into();
                p.acts.push(Act::DeleteDeployerPods);
                return p;
            }
            let timeout = timeout_seconds(&rc.dc);
            let created = rc.rc.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let expired = timeout > 0
                && created.is_some_and(|c| {
                    seen.now.duration_since(c) > jiff::SignedDuration::from_secs(timeout)
                });
            if expired {
                p.next = "Failed".into();
                p.annotations.insert(
                    os::DEPLOYMENT_STATUS_REASON_ANNOTATION.into(),
                    json!(UNABLE_TO_CREATE),
                );
                p.events.push(Event {
                    warning: true,
                    reason: "RolloutTimeout",
                    message: format!(
                        "Rollout for \"{ns}/{rc_name}\" failed to create deployer pod (timeoutSeconds: {timeout}s)"
                    ),
                });
                return p;
            }
            match deployer {
                None => {
                    if dcview::annotation(&rc.rc.metadata, os::DEPLOYMENT_IGNORE_POD_ANNOTATION)
                        .is_some()
                    {
                        p.next = current;
                        return p;
                    }
                    p.acts.push(Act::CreateDeployer(deployer_pod(rc, seen.env)));
                    // Pending once the pod is made (the loop moves it there).
                    p.next = current;
                }
                Some(pod) if terminating(pod) => {
                    // A deployer of an earlier attempt (the retry verb deletes it, then
                    // resets the deployment to New): its deletion requeues the deployment,
                    // which then gets a deployer pod of its own.
                    p.next = current;
                }
                Some(pod) => {
                    if os::annotation(pod, os::DEPLOYMENT_ANNOTATION) != Some(rc_name.as_str()) {
                        p.next = "Failed".into();
                        p.annotations.insert(
                            os::DEPLOYMENT_STATUS_REASON_ANNOTATION.into(),
                            json!(UNRELATED_POD),
                        );
                        p.events.push(Event {
                            warning: true,
                            reason: "FailedCreate",
                            message: format!(
                                "Error creating deployer pod since another pod with the same name ({:?}) exists",
                                str_at(pod, "/metadata/name")
                            ),
                        });
                    } else {
                        note_pod(&mut p, pod);
                        if !allowed("Pending", &p.next) {
                            p.next = "Pending".into();
                        }
                    }
                }
            }
        }
        "Pending" | "Running" => match deployer {
            None => {
                p.next = "Failed".into();
                if !cancelled {
                    if current == "Pending" && !seen.last_chance {
                        p.retry = Some(format!(
                            "deployer pod {:?} not found",
                            deployer_pod_name(&rc_name)
                        ));
                        p.next = current;
                        return p;
                    }
                    p.annotations.insert(
                        os::DEPLOYMENT_STATUS_REASON_ANNOTATION.into(),
                        json!(DEPLOYER_POD_GONE),
                    );
                    p.events.push(Event {
                        warning: true,
                        reason: "Failed",
                        message: format!(
                            "Deployer pod {:?} has gone missing",
                            deployer_pod_name(&rc_name)
                        ),
                    });
                }
            }
            Some(_) if cancelled => p.acts.push(Act::DeleteDeployerPods),
            Some(_) => p.acts.push(Act::OwnDeployerPods),
        },
        "Failed" => {
            if cancelled {
                p.acts.push(Act::DeleteDeployerPods);
            } else {
                p.acts.push(Act::OwnDeployerPods);
            }
        }
        "Complete" if cancelled && p.next == "Complete" => {
            // Cancelled after the deployer succeeded (and after the deployment was
            // recorded Complete): only the cancellation is undone.
            p.annotations.retain(|k, _| {
                k == os::DEPLOYMENT_CANCELLED_ANNOTATION
                    || k == os::DEPLOYMENT_STATUS_REASON_ANNOTATION
            });
            p.uncancel = true;
        }
        _ => {}
    }
    p
}

/// The RC after a pass: when the phase may move, the new phase with the pass's
/// annotations, and for a test DC that finished, no replicas. `None` when nothing
/// changes.
pub fn apply(rc: &Deployment<'_>, p: &Plan) -> Option<Value> {
    // The annotations of a pass go with a move of the phase, never alone (§11.3), but
    // for undoing a cancellation that came too late.
    let uncancel = p.uncancel && rc.phase() == "Complete";
    if !allowed(rc.phase(), &p.next) && !uncancel {
        return None;
    }
    // The stored RC with the pass's changes: fields no type names stay as they are.
    let mut out = rc.obj.clone();
    let mut anns = out["metadata"]["annotations"]
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    for (k, v) in &p.annotations {
        if v.is_null() {
            anns.remove(k);
        } else {
            anns.insert(k.clone(), v.clone());
        }
    }
    anns.insert(os::DEPLOYMENT_PHASE_ANNOTATION.into(), json!(p.next));
    let terminal = matches!(p.next.as_str(), "Complete" | "Failed");
    if terminal && rc.dc.spec.test && replicas(&rc.rc) > 0 {
        out["spec"]["replicas"] = json!(0);
    }
    out["metadata"]["annotations"] = Value::Object(anns);
    (out != *rc.obj).then_some(out)
}

/// An RC's `spec.replicas` (0 when unset).
fn replicas(rc: &ReplicationController) -> i64 {
    rc.spec
        .as_ref()
        .and_then(|s| s.replicas)
        .map_or(0, i64::from)
}

/// The deployer pod of a deployment (§11.5, §7.4).
pub fn deployer_pod(rc: &Deployment<'_>, env: &[Value]) -> Value {
    let rc_name = rc.name();
    let ns = rc.namespace();
    let strategy = &rc.dc.spec.strategy;
    let custom = strategy.custom_params.clone().unwrap_or_default();
    let mut vars: Vec<Value> = custom.environment;
    let given = |vars: &[Value], name: &str| {
        vars.iter()
            .any(|v| v.get("name").and_then(Value::as_str) == Some(name))
    };
    for v in env {
        let name = str_at(v, "/name");
        let small = str_at(v, "/value").len() <= 128_000;
        if !given(&vars, name) && small {
            vars.push(v.clone());
        }
    }
    vars.push(json!({"name": "OPENSHIFT_DEPLOYMENT_NAME", "value": rc_name}));
    vars.push(json!({"name": "OPENSHIFT_DEPLOYMENT_NAMESPACE", "value": ns}));
    let image = Some(custom.image.as_str())
        .filter(|i| !i.is_empty())
        .unwrap_or(DEPLOYER_IMAGE);
    let mut container = json!({
        "name": "deployment",
        "image": image,
        "env": vars,
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    if !custom.command.is_empty() {
        container["command"] = json!(custom.command);
    }
    if let Some(resources) = strategy.resources.as_ref().filter(|r| r.is_object()) {
        container["resources"] = resources.clone();
    }
    let mut labels = Map::new();
    labels.insert(os::DEPLOYER_POD_FOR_LABEL.into(), json!(rc_name));
    let mut annotations = Map::new();
    annotations.insert(os::DEPLOYMENT_ANNOTATION.into(), json!(rc_name));
    annotations.insert(os::DEPLOYMENT_CONFIG_ANNOTATION.into(), json!(rc.dc.name()));
    for (from, into) in [
        (&strategy.labels, &mut labels),
        (&strategy.annotations, &mut annotations),
    ] {
        for (k, v) in from {
            into.entry(k.clone()).or_insert_with(|| json!(v));
        }
    }
    let mut spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 10,
        "activeDeadlineSeconds": strategy.active_deadline_seconds.unwrap_or(21600),
        "serviceAccountName": "deployer",
        "shareProcessNamespace": false,
        "containers": [container],
    });
    // The template's fields go over as stored.
    let template = rc.obj.pointer("/spec/template/spec");
    for field in [
        "dnsPolicy",
        "dnsConfig",
        "enableServiceLinks",
        "imagePullSecrets",
        "tolerations",
        "nodeSelector",
    ] {
        if let Some(v) = template.and_then(|t| t.get(field)) {
            spec[field] = v.clone();
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": deployer_pod_name(rc_name),
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "ReplicationController",
                "name": rc_name,
                "uid": rc.rc.metadata.uid,
            }],
        },
        "spec": spec,
    })
}

const WORKERS: usize = 2;

#[derive(Clone)]
struct Controller {
    client: Client,
    rcs: Informer,
    pods: Informer,
    queue: Queue,
    recorder: Recorder,
}

impl Controller {
    /// Events go to the DC the deployment was made from, else to the deployment.
    async fn event(&self, rc: &Value, e: &Event) {
        let mut about = decode_dc(rc).unwrap_or_else(|_| rc.clone());
        if about["kind"].is_null() {
            about["kind"] = json!("DeploymentConfig");
        }
        let kind = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder
            .event(&about, kind, e.reason, &e.message)
            .await;
    }

    /// The pods labelled as this deployment's deployer or hooks.
    fn deployer_pods(&self, rc: &Deployment<'_>) -> Vec<Arc<Value>> {
        let name = rc.name();
        self.pods
            .list_namespace(rc.namespace())
            .into_iter()
            .filter(|p| label(p, os::DEPLOYER_POD_FOR_LABEL) == Some(name))
            .collect()
    }

    /// Creates the deployer pod. One that exists already for this deployment (made by
    /// an earlier pass the pod informer has not shown yet) is taken as made; one of
    /// another deployment stays an error, and the next pass fails the deployment.
    async fn create_deployer(
        &self,
        rc: &Deployment<'_>,
        pod: &Value,
    ) -> crate::client::Result<Value> {
        let pods = catalog::of(Kind::Pod);
        let ns = rc.namespace();
        match self.client.create(pods, Some(ns), pod).await {
            Err(e) if e.is_already_exists() => {
                let existing = self
                    .client
                    .get(pods, Some(ns), str_at(pod, "/metadata/name"))
                    .await?;
                let ours = os::annotation(&existing, os::DEPLOYMENT_ANNOTATION) == Some(rc.name());
                if ours { Ok(existing) } else { Err(e) }
            }
            other => other,
        }
    }

    async fn act(&self, rc: &Deployment<'_>, act: &Act, p: &mut Plan) -> Result<()> {
        let pods = catalog::of(Kind::Pod);
        let ns = rc.namespace();
        match act {
            Act::CreateDeployer(pod) => match self.create_deployer(rc, pod).await {
                Ok(made) => {
                    p.annotations.insert(
                        os::DEPLOYER_POD_ANNOTATION.into(),
                        json!(str_at(&made, "/metadata/name")),
                    );
                    let created = str_at(&made, "/metadata/creationTimestamp");
                    if !created.is_empty() {
                        p.annotations.insert(
                            os::DEPLOYER_POD_CREATED_AT_ANNOTATION.into(),
                            json!(created),
                        );
                    }
                    p.next = "Pending".into();
                }
                Err(e) => {
                    let event = Event {
                        warning: true,
                        reason: "FailedCreate",
                        message: format!("Error creating deployer pod: {e}"),
                    };
                    self.event(rc.obj, &event).await;
                    return Err(e.into());
                }
            },
            Act::DeleteDeployerPods => {
                let params = DeleteParams::default();
                for pod in self.deployer_pods(rc) {
                    let name = str_at(&pod, "/metadata/name");
                    match self.client.delete(pods, Some(ns), name, &params).await {
                        Ok(_) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Act::OwnDeployerPods => {
                let owner = json!([{"apiVersion": "v1", "kind": "ReplicationController",
                    "name": rc.rc.metadata.name, "uid": rc.rc.metadata.uid}]);
                for pod in self.deployer_pods(rc) {
                    if !array_at(&pod, "/metadata/ownerReferences").is_empty() {
                        continue;
                    }
                    let patch = json!({"metadata": {"ownerReferences": owner}});
                    let name = str_at(&pod, "/metadata/name");
                    match self
                        .client
                        .patch(pods, Some(ns), name, &Patch::Merge(patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(())
    }

    /// One pass over a deployment (§11.3).
    async fn handle(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.rcs.get(&key) else {
            return Ok(Action::Done);
        };
        let rc = Deployment::read(&obj)?;
        let (ns, name) = (rc.namespace(), rc.name());
        let deployer = self.pods.get(&format!("{ns}/{}", deployer_pod_name(name)));
        let env: Vec<Value> = Vec::new();
        let seen = Seen {
            deployer: deployer.as_deref(),
            last_chance: self.queue.failures(&key) >= LAST_CHANCE_REQUEUES,
            now: jiff::Timestamp::now(),
            env: &env,
        };
        let mut plan = plan(&rc, &seen);
        for act in plan.acts.clone() {
            self.act(&rc, &act, &mut plan).await?;
        }
        if let Some(why) = plan.retry {
            return Err(Error::Other(why));
        }
        if let Some(updated) = apply(&rc, &plan) {
            let written = self
                .client
                .update(catalog::of(Kind::ReplicationController), &updated)
                .await?;
            // The events tell what the write did: recorded once it is done, so that a
            // pass retried after a conflict does not tell it twice.
            for e in &plan.events {
                self.event(&written, e).await;
            }
            if is_cancelled(&written) && phase_of(&written) == "Failed" {
                let event = Event {
                    warning: false,
                    reason: "RolloutCancelled",
                    message: format!("Rollout for \"{ns}/{name}\" cancelled"),
                };
                self.event(&written, &event).await;
            }
        }
        Ok(Action::Done)
    }
}

/// Starts the deployer controller.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    if super::deploymentconfig::resource().is_none() {
        return;
    }
    let rcs = ctx.informers.get(catalog::of(Kind::ReplicationController));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let queue = Queue::new();
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        rcs: rcs.clone(),
        pods: pods.clone(),
        queue: queue.clone(),
        recorder: ctx.recorder("deployer-controller"),
    });
    runtime::Controller::new("deployer-controller")
        .with_queue(queue)
        // The deployments: RCs made for a DeploymentConfig.
        .watches(&rcs, |change, queue| {
            let rc = match change {
                Change::Added(rc) | Change::Updated { new: rc, .. } => rc,
                Change::Deleted(_) => return,
            };
            if os::annotation(rc, os::DEPLOYMENT_CONFIG_ANNOTATION).is_some() {
                queue.add(key_of(rc));
            }
        })
        // A pod's change (not a repeat in the same resourceVersion) goes to the
        // deployment it is for.
        .watches(&pods, |change, queue| {
            let pod = match change {
                Change::Updated { old, new } => {
                    if str_at(old, "/metadata/resourceVersion")
                        == str_at(new, "/metadata/resourceVersion")
                    {
                        return;
                    }
                    new
                }
                Change::Added(pod) | Change::Deleted(pod) => pod,
            };
            if let Some(rc) = os::annotation(pod, os::DEPLOYMENT_ANNOTATION) {
                queue.add(format!("{}/{rc}", str_at(pod, "/metadata/namespace")));
            }
        })
        .workers(WORKERS)
        .run_with(sup, controller, Controller::handle);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::dcview::Dc;
    use crate::controller::deploymentconfig::deployment_for;

    fn dc() -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": 2, "strategy": {"type": "Recreate",
                       "recreateParams": {"timeoutSeconds": 60},
                       "labels": {"team": "a", "openshift.io/deployer-pod-for.name": "no"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}],
                                           "nodeSelector": {"disk": "ssd"}}}},
            "status": {"latestVersion": 1},
        })
    }

    fn rc(phase: &str) -> Value {
        let dc = dc();
        let mut rc = deployment_for(&Dc::decode(&dc).unwrap()).unwrap();
        rc["metadata"]["uid"] = json!("rc-uid");
        rc["metadata"]["creationTimestamp"] = json!("2026-11-30T12:00:00Z");
        rc["metadata"]["annotations"][os::DEPLOYMENT_PHASE_ANNOTATION] = json!(phase);
        rc
    }

    fn read(rc: &Value) -> Deployment<'_> {
        Deployment::read(rc).unwrap()
    }

    fn pod(phase: &str) -> Value {
        let mut p = deployer_pod(&read(&rc("New")), &[]);
        p["metadata"]["creationTimestamp"] = json!("2026-11-30T12:00:01Z");
        p["status"] = json!({"phase": phase, "startTime": "2026-11-30T12:00:02Z",
            "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-11-30T12:00:09Z"}}}]});
        p
    }

    fn seen(deployer: Option<&Value>, secs: i64) -> Seen<'_> {
        Seen {
            deployer,
            last_chance: false,
            now: "2026-11-30T12:00:00Z".parse::<jiff::Timestamp>().unwrap()
                + jiff::SignedDuration::from_secs(secs),
            env: &[],
        }
    }

    #[test]
    fn the_phase_machine_only_moves_forward() {
        assert!(allowed("New", "Complete"));
        assert!(allowed("Pending", "Running"));
        assert!(!allowed("Running", "Pending"));
        assert!(!allowed("Complete", "Failed"));
        assert!(!allowed("Failed", "New"));
    }

    #[test]
    fn a_new_deployment_gets_a_deployer_pod_then_follows_it() {
        let p = plan(&read(&rc("New")), &seen(None, 1));
        let [Act::CreateDeployer(made)] = p.acts.as_slice() else {
            panic!("{p:?}")
        };
        assert_eq!(made["metadata"]["name"], "web-1-deploy");
        assert_eq!(
            made["metadata"]["labels"][os::DEPLOYER_POD_FOR_LABEL],
            "web-1"
        );
        assert_eq!(made["metadata"]["labels"]["team"], "a");
        assert_eq!(made["metadata"]["ownerReferences"][0]["uid"], "rc-uid");
        assert_eq!(made["spec"]["nodeSelector"]["disk"], "ssd");
        assert_eq!(made["spec"]["serviceAccountName"], "deployer");
        let env = &made["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["value"], "web-1");
        assert_eq!(env[1]["value"], "ns");
        // The pod runs: Running; it succeeds: Complete with the final replicas.
        let running = pod("Running");
        let p = plan(&read(&rc("Pending")), &seen(Some(&running), 3));
        assert_eq!(p.next, "Running");
        assert_eq!(p.acts, vec![Act::OwnDeployerPods]);
        let done = pod("Succeeded");
        let p = plan(&read(&rc("Running")), &seen(Some(&done), 9));
        assert_eq!(p.next, "Complete");
        let after = apply(&read(&rc("Running")), &p).unwrap();
        let a = &after["metadata"]["annotations"];
        assert_eq!(a[os::DEPLOYMENT_PHASE_ANNOTATION], "Complete");
        assert_eq!(a[os::DEPLOYMENT_REPLICAS_ANNOTATION], "2");
        assert!(a.get(os::DESIRED_REPLICAS_ANNOTATION).is_none());
        assert_eq!(
            a[os::DEPLOYER_POD_COMPLETED_AT_ANNOTATION],
            "2026-11-30T12:00:09Z"
        );
        // A finished deployment does not move again.
        let p = plan(&read(&after), &seen(Some(&done), 10));
        assert_eq!(apply(&read(&after), &p), None);
    }

    #[test]
    fn missing_or_foreign_deployer_pods_and_timeouts_fail_the_deployment() {
        let p = plan(&read(&rc("Pending")), &seen(None, 2));
        assert!(p.retry.is_some(), "the cache may lag: wait once");
        let mut last = seen(None, 2);
        last.last_chance = true;
        let p = plan(&read(&rc("Pending")), &last);
        assert_eq!(p.next, "Failed");
        assert_eq!(
            p.annotations[os::DEPLOYMENT_STATUS_REASON_ANNOTATION],
            DEPLOYER_POD_GONE
        );
        assert_eq!(
            p.events[0].message,
            "Deployer pod \"web-1-deploy\" has gone missing"
        );
        let p = plan(&read(&rc("Running")), &seen(None, 2));
        assert_eq!(p.next, "Failed");
        let mut foreign = pod("Running");
        foreign["metadata"]["annotations"][os::DEPLOYMENT_ANNOTATION] = json!("other");
        let p = plan(&read(&rc("New")), &seen(Some(&foreign), 2));
        assert_eq!(p.next, "Failed");
        assert_eq!(
            p.annotations[os::DEPLOYMENT_STATUS_REASON_ANNOTATION],
            UNRELATED_POD
        );
        let p = plan(&read(&rc("New")), &seen(None, 61));
        assert_eq!(p.next, "Failed");
        assert_eq!(
            p.events[0].message,
            "Rollout for \"ns/web-1\" failed to create deployer pod (timeoutSeconds: 60s)"
        );
    }

    #[test]
    fn a_cancelled_deployment_loses_its_deployer_pods() {
        let mut cancelled = rc("Running");
        cancelled["metadata"]["annotations"][os::DEPLOYMENT_CANCELLED_ANNOTATION] = json!("true");
        let running = pod("Running");
        let p = plan(&read(&cancelled), &seen(Some(&running), 2));
        assert_eq!(p.acts, vec![Act::DeleteDeployerPods]);
        // Once they are gone it fails, without a "gone missing" event.
        let p = plan(&read(&cancelled), &seen(None, 3));
        assert_eq!(p.next, "Failed");
        assert!(p.events.is_empty());
        // Succeeding before the cancel is recorded wins.
        let done = pod("Succeeded");
        let p = plan(&read(&cancelled), &seen(Some(&done), 4));
        assert_eq!(p.next, "Complete");
        assert_eq!(p.events[0].reason, "FailedCancellation");
        let after = apply(&read(&cancelled), &p).unwrap();
        assert!(!is_cancelled(&after));
    }

    #[test]
    fn a_cancel_recorded_after_completion_is_undone_and_the_phase_stays() {
        let mut done = rc("Running");
        let succeeded = pod("Succeeded");
        done = apply(
            &read(&done),
            &plan(&read(&done), &seen(Some(&succeeded), 9)),
        )
        .unwrap();
        done["spec"]["replicas"] = json!(3);
        let mut late = done.clone();
        let a = &mut late["metadata"]["annotations"];
        a[os::DEPLOYMENT_CANCELLED_ANNOTATION] = json!("true");
        a[os::DEPLOYMENT_STATUS_REASON_ANNOTATION] = json!("cancelled by the user");
        let p = plan(&read(&late), &seen(Some(&succeeded), 20));
        assert_eq!(p.events[0].reason, "FailedCancellation");
        assert_eq!(p.events[0].message, "Succeeded before cancel recorded");
        let after = apply(&read(&late), &p).unwrap();
        assert_eq!(after, done, "only the cancellation is undone");
        // Not cancelled: a Complete deployment is left alone.
        let p = plan(&read(&done), &seen(Some(&succeeded), 21));
        assert!(p.events.is_empty());
        assert_eq!(apply(&read(&done), &p), None);
    }

    #[test]
    fn a_deployer_pod_being_deleted_counts_as_gone_unless_it_succeeded() {
        let mut stopping = pod("Failed");
        stopping["metadata"]["deletionTimestamp"] = json!("2026-11-30T12:00:05Z");
        for phase in ["Pending", "Running"] {
            let mut last = seen(Some(&stopping), 6);
            last.last_chance = phase == "Pending";
            let p = plan(&read(&rc(phase)), &last);
            assert_eq!(p.next, "Failed");
            assert_eq!(
                p.annotations[os::DEPLOYMENT_STATUS_REASON_ANNOTATION],
                DEPLOYER_POD_GONE
            );
            assert_eq!(p.events[0].reason, "Failed");
        }
        // A deployer that succeeded before its deletion completed the deployment.
        let mut succeeded = pod("Succeeded");
        succeeded["metadata"]["deletionTimestamp"] = json!("2026-11-30T12:00:05Z");
        let p = plan(&read(&rc("Running")), &seen(Some(&succeeded), 6));
        assert_eq!(p.next, "Complete");
        // A deployment reset to New (retried) waits for the old deployer to go, then
        // gets a new one.
        let p = plan(&read(&rc("New")), &seen(Some(&stopping), 6));
        assert_eq!(p.next, "New");
        assert!(p.acts.is_empty() && p.events.is_empty() && p.retry.is_none());
        assert_eq!(apply(&read(&rc("New")), &p), None);
        let p = plan(&read(&rc("New")), &seen(None, 7));
        assert!(matches!(p.acts.as_slice(), [Act::CreateDeployer(_)]));
        // Cancelled: the deletion is ours, no "gone missing".
        let mut cancelled = rc("Running");
        cancelled["metadata"]["annotations"][os::DEPLOYMENT_CANCELLED_ANNOTATION] = json!("true");
        let p = plan(&read(&cancelled), &seen(Some(&stopping), 6));
        assert_eq!(p.next, "Failed");
        assert!(p.events.is_empty());
    }

    #[test]
    fn the_ignore_annotation_keeps_a_deployment_new() {
        let mut rc = rc("New");
        rc["metadata"]["annotations"][os::DEPLOYMENT_IGNORE_POD_ANNOTATION] = json!("true");
        let p = plan(&read(&rc), &seen(None, 1));
        assert!(p.acts.is_empty());
        assert_eq!(apply(&read(&rc), &p), None);
    }
}
