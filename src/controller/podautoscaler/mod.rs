//! The horizontal pod autoscaler controller, as kube-controller-manager's
//! (`pkg/controller/podautoscaler`): every sync period it reads each
//! HorizontalPodAutoscaler's target through its `scale` (replicas and selector), works out
//! a replica count from each metric, stabilizes and limits it, writes the new scale, and
//! records what it saw in the status (`currentMetrics`, `currentReplicas`,
//! `desiredReplicas`, `lastScaleTime`) and its conditions (`AbleToScale`,
//! `ScalingActive`, `ScalingLimited`), with the upstream reasons, messages and events.
//!
//! Resource metrics (`Resource` and `ContainerResource`, CPU and memory) come from
//! `metrics.k8s.io` PodMetrics, which the node agents measure; the utilisation of a pod is
//! its usage over the sum of its containers' requests, as the replica calculator's. Pods
//! being deleted or failed are ignored, pending pods and CPU samples of pods not yet
//! settled count as unready, and pods without metrics are assumed at 100 % on the way
//! down and 0 % on the way up, so an incomplete view never moves the scale the wrong way.
//! A change within the tolerance (10 %) is no change. `Pods`, `Object` and `External`
//! metrics need a custom or external metrics API, which berth does not serve; such a
//! metric is reported as failing, as upstream reports it without an adapter.
//!
//! Without `behavior` a scale-down takes the highest recommendation of the last five
//! minutes (`--horizontal-pod-autoscaler-downscale-stabilization`) and a scale-up at most
//! doubles (at least four); with `behavior` its windows, policies and select policies
//! rule, over the scale events this controller made. Recommendations and scale events are
//! kept in memory per autoscaler, as upstream's are: a restart begins them afresh.
//!
//! Each sync decodes the autoscaler once as its k8s-openapi type
//! (`autoscaling/v2` `HorizontalPodAutoscaler`) and reads its spec from that; the status
//! it writes is built on a JSON copy, as the conditions are. Pods and PodMetrics stay
//! JSON: the pods are listed from the informer on every sync (decoding each would cost
//! for nothing read but labels, phase, conditions and requests), and `metrics.k8s.io` has
//! no k8s-openapi type.
//!
//! A new autoscaler, or one whose spec changed, is synced at once; every sync asks to be
//! run again after the sync period (15 s), failed or not: a metric that cannot be read is
//! a condition and an event, not a reason to hurry.

mod behavior;
mod calculator;
mod metrics;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, HorizontalPodAutoscaler};
use serde_json::{Value, json};

use self::behavior::{History, Rules};
use super::{Action, Context, Result, Supervisor, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::Recorder;
use crate::client::{Client, Kind, Resource, catalog, key_of};
use crate::types::clock::Clock;
use crate::types::json::int_at;
use crate::types::meta::Meta;

const WORKERS: usize = 2;

/// The sync period and the scale-down stabilization window.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub sync: Duration,
    pub downscale_window: Duration,
}

/// A condition to set: type, status, reason, message.
type Condition = (&'static str, &'static str, String, String);

/// Sets a condition on the autoscaler being synced.
fn set(hpa: &mut Value, (kind, status, reason, message): Condition) {
    crate::types::set_condition(
        hpa,
        json!({"type": kind, "status": status, "reason": reason, "message": message}),
    );
}

#[derive(Clone)]
struct Controller {
    client: Client,
    hpas: Informer,
    pods: Informer,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
    timing: Timing,
    history: Arc<Mutex<HashMap<String, History>>>,
}

/// The scale of a target: its resource, replicas and selector.
struct Target {
    res: Arc<Resource>,
    namespace: String,
    replicas: i64,
    selector: String,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(hpa) = self.hpas.get(&key) else {
            self.history.lock().expect("history lock").remove(&key);
            return Ok(Action::Done);
        };
        self.sync(&key, &hpa).await?;
        Ok(Action::RequeueAfter(self.timing.sync))
    }

    /// `reconcileAutoscaler`. Only a conflict writing the status is an error: everything
    /// else the autoscaler's conditions and events say, and the next sync tries again.
    async fn sync(&self, key: &str, original: &Value) -> Result<()> {
        let typed: HorizontalPodAutoscaler = runtime::decode(original)?;
        let spec = typed.spec;
        let mut hpa = original.clone();
        let ns = typed.metadata.namespace().to_string();
        let now = self.clock.now();
        let target = match self.target(&ns, &spec.scale_target_ref).await {
            Ok(t) => t,
            Err(e) => {
                self.recorder.warning(original, "FailedGetScale", &e).await;
                set(
                    &mut hpa,
                    (
                        "AbleToScale",
                        "False",
                        "FailedGetScale".into(),
                        format!(
                            "the HPA controller was unable to get the target's current scale: {e}"
                        ),
                    ),
                );
                return self.write_status(original, hpa).await;
            }
        };
        set(
            &mut hpa,
            (
                "AbleToScale",
                "True",
                "SucceededGetScale".into(),
                "the HPA controller was able to get the target's current scale".into(),
            ),
        );
        let current = target.replicas;
        {
            let mut history = self.history.lock().expect("history lock");
            let h = history.entry(key.to_string()).or_default();
            if h.recommendations.is_empty() {
                h.record(None, current, now);
            }
        }
        let min = spec.min_replicas.map_or(1, i64::from);
        let max = i64::from(spec.max_replicas);
        let mut statuses = Vec::new();
        let (desired, reason) = if current == 0 && min != 0 {
            set(
                &mut hpa,
                (
                    "ScalingActive",
                    "False",
                    "ScalingDisabled".into(),
                    "scaling is disabled since the replica count of the target is zero".into(),
                ),
            );
            (current, String::new())
        } else if current > max {
            (
                max,
                "Current number of replicas above Spec.MaxReplicas".into(),
            )
        } else if current < min {
            (
                min,
                "Current number of replicas below Spec.MinReplicas".into(),
            )
        } else {
            let specs = spec.metrics.as_deref().unwrap_or_default();
            let (proposed, metric, errors) = self
                .replicas_for_metrics(original, &mut hpa, &target, specs, &mut statuses, now)
                .await;
            let Some(proposed) = proposed else {
                self.set_replicas_and_metrics(&mut hpa, current, None, statuses);
                self.write_status(original, hpa).await?;
                if let Some(e) = errors {
                    self.recorder
                        .warning(original, "FailedComputeMetricsReplicas", &e)
                        .await;
                }
                return Ok(());
            };
            let mut reason = String::new();
            if proposed > current {
                reason = format!("{metric} above target");
            }
            if proposed < current {
                reason = "All metrics below target".into();
            }
            let desired = self.normalize(
                key,
                &mut hpa,
                spec.behavior.as_ref(),
                (current, proposed),
                (min, max),
                now,
            );
            (desired, reason)
        };
        let rescale = desired != current;
        if rescale {
            let scaled = self
                .client
                .scale(&target.res, Some(&ns), &spec.scale_target_ref.name, desired)
                .await;
            if let Err(e) = scaled {
                self.recorder
                    .warning(
                        original,
                        "FailedRescale",
                        &format!("New size: {desired}; reason: {reason}; error: {e}"),
                    )
                    .await;
                set(
                    &mut hpa,
                    (
                        "AbleToScale",
                        "False",
                        "FailedUpdateScale".into(),
                        format!("the HPA controller was unable to update the target scale: {e}"),
                    ),
                );
                self.set_replicas_and_metrics(&mut hpa, current, None, statuses);
                return self.write_status(original, hpa).await;
            }
            set(
                &mut hpa,
                (
                    "AbleToScale",
                    "True",
                    "SucceededRescale".into(),
                    format!("the HPA controller was able to update the target scale to {desired}"),
                ),
            );
            self.recorder
                .normal(
                    original,
                    "SuccessfulRescale",
                    &format!("New size: {desired}; reason: {reason}"),
                )
                .await;
            if let Some(behavior) = &spec.behavior {
                let (up, down) = Rules::of(behavior);
                let mut history = self.history.lock().expect("history lock");
                history
                    .entry(key.to_string())
                    .or_default()
                    .store_event(&up, &down, current, desired, now);
            }
            tracing::info!(hpa = %key, from = current, to = desired, %reason, "rescaled");
        }
        let desired = if rescale { desired } else { current };
        self.set_replicas_and_metrics(&mut hpa, current, Some(desired), statuses);
        if rescale {
            hpa["status"]["lastScaleTime"] = json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        self.write_status(original, hpa).await
    }

    /// `setStatus` / `setCurrentReplicasAndMetricsInStatus`: the figures of this sync
    /// (the desired count stays when it was not worked out).
    fn set_replicas_and_metrics(
        &self,
        hpa: &mut Value,
        current: i64,
        desired: Option<i64>,
        statuses: Vec<Value>,
    ) {
        let status = &mut hpa["status"];
        status["currentReplicas"] = json!(current);
        if let Some(d) = desired {
            status["desiredReplicas"] = json!(d);
        } else if status.get("desiredReplicas").is_none() {
            status["desiredReplicas"] = json!(0);
        }
        if let Some(m) = status.as_object_mut() {
            if statuses.is_empty() {
                m.remove("currentMetrics");
            } else {
                m.insert("currentMetrics".into(), Value::Array(statuses));
            }
        }
    }

    /// `updateStatusIfNeeded`.
    async fn write_status(&self, original: &Value, hpa: Value) -> Result<()> {
        if hpa.get("status") == original.get("status") {
            return Ok(());
        }
        match self.client.update_status(self.hpas.resource(), &hpa).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The target's scale, or why it cannot be read (as the message says it).
    async fn target(
        &self,
        ns: &str,
        r: &CrossVersionObjectReference,
    ) -> std::result::Result<Target, String> {
        let (kind, name) = (r.kind.as_str(), r.name.as_str());
        let api_version = r.api_version.as_deref().unwrap_or("");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let builtin = catalog::RESOURCES
            .iter()
            .find(|res| res.group == group && res.kind_name == kind && res.scale)
            .cloned();
        let res = match builtin {
            Some(res) => res,
            None => self
                .client
                .custom_resources()
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .find(|res| res.group == group && res.kind_name == kind && res.scale)
                .ok_or_else(|| format!("no matches for kind {kind:?} in group {group:?}"))?,
        };
        let obj = self
            .client
            .get(&res, Some(ns), name)
            .await
            .map_err(|e| e.to_string())?;
        let scale = res.strategy.scale(&obj);
        Ok(Target {
            namespace: ns.to_string(),
            replicas: scale.replicas.as_i64().unwrap_or(0),
            selector: scale.selector,
            res,
        })
    }
}

/// Registers the autoscaler's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let timing = Timing {
        sync: ctx.config.hpa_sync,
        downscale_window: ctx.config.hpa_downscale_window,
    };
    let hpas = ctx
        .informers
        .get(catalog::of(Kind::HorizontalPodAutoscaler));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        hpas: hpas.clone(),
        pods: pods.clone(),
        recorder: ctx.recorder("horizontal-pod-autoscaler"),
        clock: ctx.clock.clone(),
        timing,
        history: Arc::default(),
    });
    runtime::Controller::new("horizontal-pod-autoscaler")
        .watches(&hpas, |change, queue| match change {
            Change::Added(o) | Change::Deleted(o) => queue.add(key_of(o)),
            // Its own status writes come back as updates; only a new spec is news.
            Change::Updated { old, new } => {
                if int_at(old, "/metadata/generation") != int_at(new, "/metadata/generation") {
                    queue.add(key_of(new));
                }
            }
        })
        .waits_for(&pods)
        .workers(WORKERS)
        .run_with(sup, c, Controller::reconcile);
}
