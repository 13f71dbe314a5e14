//! An autoscaler's metrics: each one's spec read, its resource metrics fetched through the
//! API, its proposal and status entry; the highest proposal of all, or why there is none.
//! The metric specs are the autoscaler's typed `MetricSpec`s; the PodMetrics listed and
//! the pods stay JSON (see the module above).

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricTarget};
use serde_json::{Value, json};

use super::calculator::{Goal, Metrics, decimal_milli, pod_metrics, resource_replicas};
use super::{Condition, Controller, Target, set};
use crate::client::{Kind, ListParams, catalog};
use crate::types::labels::Selector;
use crate::types::quantity::Quantity;

/// Why a metric gave no replica count: the error, and the condition it leaves.
#[derive(Debug)]
struct MetricError {
    message: String,
    condition: Condition,
}

/// A resource metric's spec: the resource, the container (for `ContainerResource`), the
/// goal, and the status field it reports under.
struct ResourceSpec<'a> {
    name: &'a str,
    container: Option<&'a str>,
    target: Option<&'a MetricTarget>,
    field: &'static str,
}

impl Controller {
    /// `computeReplicasForMetrics`: the highest proposal of the metrics that could be
    /// read, with the metric that made it; `None` when none could, or some failed and the
    /// rest would scale down. The first error, when any metric failed.
    pub(super) async fn replicas_for_metrics(
        &self,
        original: &Value,
        hpa: &mut Value,
        target: &Target,
        specs: &[MetricSpec],
        statuses: &mut Vec<Value>,
        now: Timestamp,
    ) -> (Option<i64>, String, Option<String>) {
        let selector = if target.selector.is_empty() {
            self.recorder
                .warning(original, "SelectorRequired", "selector is required")
                .await;
            set(
                hpa,
                (
                    "ScalingActive",
                    "False",
                    "InvalidSelector".into(),
                    "the HPA target's scale is missing a selector".into(),
                ),
            );
            return (None, String::new(), None);
        } else {
            match Selector::parse(&target.selector) {
                Ok(s) => s,
                Err(e) => {
                    let message = format!(
                        "couldn't convert selector into a corresponding internal selector object: {e}"
                    );
                    self.recorder
                        .warning(original, "InvalidSelector", &message)
                        .await;
                    set(
                        hpa,
                        ("ScalingActive", "False", "InvalidSelector".into(), message),
                    );
                    return (None, String::new(), None);
                }
            }
        };
        let (mut replicas, mut metric) = (0i64, String::new());
        let mut invalid = 0usize;
        let mut first: Option<MetricError> = None;
        for spec in specs {
            match self
                .replicas_for_metric(spec, target, &selector, &target.selector, now)
                .await
            {
                Ok((proposal, name, status)) => {
                    statuses.push(status);
                    if replicas == 0 || proposal > replicas {
                        replicas = proposal;
                        metric = name;
                    }
                }
                Err(e) => {
                    statuses.push(json!({"type": ""}));
                    self.recorder
                        .warning(original, &e.condition.2, &e.message)
                        .await;
                    invalid += 1;
                    first.get_or_insert(e);
                }
            }
        }
        let error = first.as_ref().map(|e| {
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {}",
                specs.len(),
                e.message
            )
        });
        if invalid >= specs.len() || (invalid > 0 && replicas < target.replicas) {
            if let Some(e) = first {
                set(hpa, e.condition);
            }
            return (None, String::new(), error);
        }
        set(
            hpa,
            (
                "ScalingActive",
                "True",
                "ValidMetricFound".into(),
                format!("the HPA was able to successfully calculate a replica count from {metric}"),
            ),
        );
        (Some(replicas), metric, error)
    }

    /// `computeReplicasForMetric`: one metric's proposal, the name it goes by and its
    /// status entry.
    async fn replicas_for_metric(
        &self,
        spec: &MetricSpec,
        target: &Target,
        selector: &Selector,
        selector_text: &str,
        now: Timestamp,
    ) -> std::result::Result<(i64, String, Value), MetricError> {
        let kind = spec.type_.as_str();
        let unable = |reason: &str, message: String| MetricError {
            condition: (
                "ScalingActive",
                "False",
                reason.to_string(),
                format!("the HPA was unable to compute the replica count: {message}"),
            ),
            message,
        };
        let resource = match kind {
            "Resource" => {
                let source = spec.resource.as_ref();
                ResourceSpec {
                    name: source.map_or("", |s| s.name.as_str()),
                    container: None,
                    target: source.map(|s| &s.target),
                    field: "resource",
                }
            }
            "ContainerResource" => {
                let source = spec.container_resource.as_ref();
                ResourceSpec {
                    name: source.map_or("", |s| s.name.as_str()),
                    container: source.map(|s| s.container.as_str()),
                    target: source.map(|s| &s.target),
                    field: "containerResource",
                }
            }
            "Pods" | "Object" | "External" => {
                let (api, what, reason) = match kind {
                    "Pods" => ("custom.metrics.k8s.io", "pods", "FailedGetPodsMetric"),
                    "Object" => ("custom.metrics.k8s.io", "object", "FailedGetObjectMetric"),
                    _ => (
                        "external.metrics.k8s.io",
                        "external",
                        "FailedGetExternalMetric",
                    ),
                };
                let metric = match kind {
                    "Pods" => spec.pods.as_ref().map(|p| &p.metric),
                    "Object" => spec.object.as_ref().map(|o| &o.metric),
                    _ => spec.external.as_ref().map(|e| &e.metric),
                };
                let name = metric.map_or("", |m| m.name.as_str());
                return Err(unable(
                    reason,
                    format!(
                        "failed to get {what} metric value: unable to get metric {name}: no metrics API ({api}) is served; berth serves resource metrics (cpu, memory) only"
                    ),
                ));
            }
            other => {
                let message = format!("unknown metric source type {other:?}");
                return Err(unable("InvalidMetricSourceType", message));
            }
        };
        let (reason, prefix) = if kind == "Resource" {
            (
                "FailedGetResourceMetric",
                format!("failed to get {} resource metric value", resource.name),
            )
        } else {
            (
                "FailedGetContainerResourceMetric",
                format!(
                    "failed to get {} container resource metric value",
                    resource.name
                ),
            )
        };
        let fail = |e: String| unable(reason, format!("{prefix}: {e}"));
        let average = resource
            .target
            .and_then(|t| t.average_value.as_ref())
            .and_then(|q| q.0.parse::<Quantity>().ok());
        let utilization = resource.target.and_then(|t| t.average_utilization);
        let goal = if let Some(avg) = average {
            Goal::Average(avg.milli() as i64)
        } else if let Some(u) = utilization {
            Goal::Utilization(u.into())
        } else {
            return Err(fail(
                "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into(),
            ));
        };
        let what = match goal {
            Goal::Utilization(_) => "utilization",
            Goal::Average(_) => "usage",
        };
        let wrap = |e: String| fail(format!("failed to get {} {what}: {e}", resource.name));
        let ns = target.namespace.as_str();
        let metrics = self
            .resource_metrics(ns, selector_text, resource.name, resource.container)
            .await
            .map_err(|e| {
                wrap(format!(
                    "unable to get metrics for resource {}: {e}",
                    resource.name
                ))
            })?;
        let all = self.pods.list_namespace(ns);
        let pods: Vec<&Value> = all
            .iter()
            .map(|p| &**p)
            .filter(|p| selector.matches(&crate::types::labels::map_at(p, "/metadata/labels")))
            .collect();
        let p = resource_replicas(
            target.replicas,
            goal,
            metrics,
            &pods,
            resource.name,
            resource.container,
            now,
        )
        .map_err(wrap)?;
        let mut current = json!({"averageValue": decimal_milli(p.average)});
        if let Some(u) = p.utilization {
            current["averageUtilization"] = json!(u);
        }
        let mut source = json!({"name": resource.name, "current": current});
        if let Some(c) = resource.container {
            source["container"] = json!(c);
        }
        let name = match (goal, kind) {
            (Goal::Average(_), _) => format!("{} resource", resource.name),
            (_, "ContainerResource") => format!(
                "{} container resource utilization (percentage of request)",
                resource.name
            ),
            _ => format!(
                "{} resource utilization (percentage of request)",
                resource.name
            ),
        };
        Ok((
            p.replicas,
            name,
            json!({"type": kind, resource.field: source}),
        ))
    }

    /// `GetResourceMetric`: the pods' usage, from the resource metrics API.
    async fn resource_metrics(
        &self,
        ns: &str,
        selector: &str,
        resource: &str,
        container: Option<&str>,
    ) -> std::result::Result<Metrics, String> {
        let params = ListParams {
            label_selector: Some(selector.to_string()),
            field_selector: None,
        };
        let list = self
            .client
            .list(catalog::of(Kind::PodMetrics), Some(ns), &params)
            .await
            .map_err(|e| format!("unable to fetch metrics from resource metrics API: {e}"))?;
        if list.items.is_empty() {
            return Err("no metrics returned from resource metrics API".into());
        }
        pod_metrics(&list.items, resource, container)
            .map_err(|e| format!("failed to get container metrics: {e}"))
    }
}
