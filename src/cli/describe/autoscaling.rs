//! `kubectl describe hpa`: HorizontalPodAutoscalers' metrics, limits, behavior and
//! conditions.

use serde_json::Value;

use super::{
    Clock, Out, annotations_multiline, describe_events, int, labels_multiline_simple, list,
    name_and_namespace, opt_text, plain, text,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::map_at;

/// `kubectl describe hpa` (`describeHorizontalPodAutoscalerV2`): each metric's current
/// value over its target, the limits, the behavior, and the conditions.
pub fn horizontal_pod_autoscaler(hpa: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, hpa);
    labels_multiline_simple(&mut out, "Labels", &map_at(hpa, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(hpa, "/metadata/annotations"),
    );
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(hpa, "/metadata/creationTimestamp"))
        ),
    );
    let kind = text(hpa, "/spec/scaleTargetRef/kind");
    out.w(
        0,
        &format!(
            "Reference:\t{kind}/{}\n",
            text(hpa, "/spec/scaleTargetRef/name")
        ),
    );
    out.w(0, "Metrics:\t( current / target )\n");
    let statuses = list(hpa, "/status/currentMetrics");
    for (i, m) in list(hpa, "/spec/metrics").iter().enumerate() {
        let q = |v: &Value, p: &str| v.pointer(p).map(plain).unwrap_or_default();
        let current = |field: &str, p: &str| {
            statuses
                .get(i)
                .and_then(|s| s.get(field))
                .and_then(|s| s.pointer(p))
                .map_or_else(|| "<unknown>".to_string(), plain)
        };
        match text(m, "/type") {
            "External" => {
                let name = text(m, "/external/metric/name");
                if m.pointer("/external/target/averageValue").is_some() {
                    out.w(
                        1,
                        &format!(
                            "{name:?} (target average value):\t{} / {}\n",
                            current("external", "/current/averageValue"),
                            q(m, "/external/target/averageValue")
                        ),
                    );
                } else {
                    out.w(
                        1,
                        &format!(
                            "{name:?} (target value):\t{} / {}\n",
                            current("external", "/current/value"),
                            q(m, "/external/target/value")
                        ),
                    );
                }
            }
            "Pods" => out.w(
                1,
                &format!(
                    "{:?} on pods:\t{} / {}\n",
                    text(m, "/pods/metric/name"),
                    current("pods", "/current/averageValue"),
                    q(m, "/pods/target/averageValue")
                ),
            ),
            "Object" => {
                out.w(
                    1,
                    &format!(
                        "\"{}\" on {}/{} ",
                        text(m, "/object/metric/name"),
                        text(m, "/object/describedObject/kind"),
                        text(m, "/object/describedObject/name")
                    ),
                );
                if text(m, "/object/target/type") == "AverageValue" {
                    out.w(
                        0,
                        &format!(
                            "(target average value):\t{} / {}\n",
                            current("object", "/current/averageValue"),
                            q(m, "/object/target/averageValue")
                        ),
                    );
                } else {
                    out.w(
                        0,
                        &format!(
                            "(target value):\t{} / {}\n",
                            current("object", "/current/value"),
                            q(m, "/object/target/value")
                        ),
                    );
                }
            }
            kind @ ("Resource" | "ContainerResource") => {
                let field = if kind == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let name = text(m, &format!("/{field}/name"));
                if kind == "Resource" {
                    out.w(1, &format!("resource {name} on pods"));
                } else {
                    let container = text(m, "/containerResource/container");
                    out.w(
                        1,
                        &format!("resource {name} of container \"{container}\" on pods"),
                    );
                }
                let target = &m[field]["target"];
                if target.get("averageValue").is_some() {
                    out.w(
                        0,
                        &format!(
                            ":\t{} / {}\n",
                            current(field, "/current/averageValue"),
                            q(target, "/averageValue")
                        ),
                    );
                } else {
                    let status = statuses.get(i).and_then(|s| s.get(field));
                    let now = match status.and_then(|s| s.pointer("/current/averageUtilization")) {
                        Some(u) => format!(
                            "{}% ({})",
                            plain(u),
                            status
                                .and_then(|s| s.pointer("/current/averageValue"))
                                .map_or_else(|| "0".into(), plain)
                        ),
                        None => "<unknown>".into(),
                    };
                    let goal = target
                        .get("averageUtilization")
                        .map_or_else(|| "<auto>".into(), |u| format!("{}%", plain(u)));
                    out.w(
                        1,
                        &format!("(as a percentage of request):\t{now} / {goal}\n"),
                    );
                }
            }
            other => out.w(1, &format!("<unknown metric type {other:?}>\n")),
        }
    }
    let min = int(hpa, "/spec/minReplicas").map_or_else(|| "<unset>".into(), |n| n.to_string());
    out.w(0, &format!("Min replicas:\t{min}\n"));
    out.w(
        0,
        &format!(
            "Max replicas:\t{}\n",
            int(hpa, "/spec/maxReplicas").unwrap_or(0)
        ),
    );
    if let Some(b) = hpa.pointer("/spec/behavior").filter(|b| b.is_object()) {
        out.w(0, "Behavior:\n");
        for (title, field) in [("Scale Up", "scaleUp"), ("Scale Down", "scaleDown")] {
            let Some(rules) = b.get(field).filter(|r| r.is_object()) else {
                continue;
            };
            out.w(1, &format!("{title}:\n"));
            if let Some(w) = int(rules, "/stabilizationWindowSeconds") {
                out.w(2, &format!("Stabilization Window: {w} seconds\n"));
            }
            let policies = list(rules, "/policies");
            if !policies.is_empty() {
                let select = opt_text(rules, "/selectPolicy").unwrap_or("Max");
                out.w(2, &format!("Select Policy: {select}\n"));
                out.w(2, "Policies:\n");
                for p in policies {
                    out.w(
                        3,
                        &format!(
                            "- Type: {}\tValue: {}\tPeriod: {} seconds\n",
                            text(p, "/type"),
                            int(p, "/value").unwrap_or(0),
                            int(p, "/periodSeconds").unwrap_or(0)
                        ),
                    );
                }
            }
        }
    }
    out.w(0, &format!("{kind} pods:\t"));
    out.w(
        0,
        &format!(
            "{} current / {} desired\n",
            int(hpa, "/status/currentReplicas").unwrap_or(0),
            int(hpa, "/status/desiredReplicas").unwrap_or(0)
        ),
    );
    let conditions = list(hpa, "/status/conditions");
    if !conditions.is_empty() {
        out.w(0, "Conditions:\n");
        out.w(1, "Type\tStatus\tReason\tMessage\n");
        out.w(1, "----\t------\t------\t-------\n");
        for c in conditions {
            out.w(
                1,
                &format!(
                    "{}\t{}\t{}\t{}\n",
                    text(c, "/type"),
                    text(c, "/status"),
                    text(c, "/reason"),
                    text(c, "/message")
                ),
            );
        }
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}
