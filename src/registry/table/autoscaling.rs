//! The Table printers of HorizontalPodAutoscalers (autoscaling/v2, and v1 through it),
//! with the TARGETS column as kubectl makes it.

use serde_json::{Value, json};

use super::{Column, age, col, s};

pub(super) fn autoscaler_columns() -> Vec<Column> {
    let integer = |c: Column| Column {
        kind: std::borrow::Cow::Borrowed("integer"),
        ..c
    };
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col(
            "Reference",
            0,
            "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.",
        ),
        col(
            "Targets",
            0,
            "metrics contains the specifications for which to use to calculate the desired replica count.",
        ),
        col(
            "MinPods",
            0,
            "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
        ),
        integer(col(
            "MaxPods",
            0,
            "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
        )),
        integer(col(
            "Replicas",
            0,
            "currentReplicas is current number of replicas of pods managed by this autoscaler.",
        )),
        col("Age", 0, "The time since the object was created."),
    ]
}

pub(super) fn autoscaler_cells(v: &Value) -> Vec<Value> {
    let min = match v.pointer("/spec/minReplicas").and_then(Value::as_i64) {
        Some(n) => n.to_string(),
        None => "<unset>".into(),
    };
    vec![
        json!(s(v, "/metadata/name")),
        json!(format!(
            "{}/{}",
            s(v, "/spec/scaleTargetRef/kind"),
            s(v, "/spec/scaleTargetRef/name")
        )),
        json!(autoscaler_targets(v)),
        json!(min),
        json!(
            v.pointer("/spec/maxReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
        json!(
            v.pointer("/status/currentReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
        json!(age(v, "/metadata/creationTimestamp")),
    ]
}

pub(super) fn autoscaler_v1_cells(v: &Value) -> Vec<Value> {
    autoscaler_cells(&crate::registry::autoscaling::v1_to_v2(v))
}

/// The TARGETS column as kubectl's `formatHPAMetrics` makes it: each metric's current
/// value over its target (`cpu: 42%/50%`), `<unknown>` until the controller has measured
/// it, at most two of them and a count of the rest.
fn autoscaler_targets(v: &Value) -> String {
    const SHOWN: usize = 2;
    let specs = v
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses = v
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let text = |x: Option<&Value>| match x {
        Some(Value::String(q)) => Some(q.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let unknown = || "<unknown>".to_string();
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let kind = spec.get("type").and_then(Value::as_str).unwrap_or("");
            let field = match kind {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                "External" => "external",
                _ => return "<unknown type>".into(),
            };
            let target = spec.pointer(&format!("/{field}/target"));
            let current = statuses
                .get(i)
                .and_then(|st| st.get(field))
                .and_then(|st| st.get("current"));
            let at = |c: Option<&Value>, key: &str| text(c.and_then(|c| c.get(key)));
            match kind {
                "Resource" | "ContainerResource" => {
                    let name = spec
                        .pointer(&format!("/{field}/name"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if let Some(avg) = at(target, "averageValue") {
                        let now = at(current, "averageValue").unwrap_or_else(unknown);
                        format!("{name}: {now}/{avg}")
                    } else {
                        let now = at(current, "averageUtilization")
                            .map_or_else(unknown, |n| format!("{n}%"));
                        let goal = at(target, "averageUtilization")
                            .map_or_else(|| "<auto>".into(), |n| format!("{n}%"));
                        format!("{name}: {now}/{goal}")
                    }
                }
                "Pods" => {
                    let now = at(current, "averageValue").unwrap_or_else(unknown);
                    let goal = at(target, "averageValue").unwrap_or_default();
                    format!("{now}/{goal}")
                }
                _ => {
                    if let Some(avg) = at(target, "averageValue") {
                        let now = at(current, "averageValue").unwrap_or_else(unknown);
                        format!("{now}/{avg} (avg)")
                    } else {
                        let now = at(current, "value").unwrap_or_else(unknown);
                        let goal = at(target, "value").unwrap_or_default();
                        format!("{now}/{goal}")
                    }
                }
            }
        })
        .collect();
    if list.len() > SHOWN {
        format!(
            "{} + {} more...",
            list[..SHOWN].join(", "),
            list.len() - SHOWN
        )
    } else {
        list.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autoscaler_targets_print_as_kubectl_prints_them() {
        let hpa = |metrics: Value, current: Value| json!({"spec": {"metrics": metrics}, "status": {"currentMetrics": current}});
        let cpu = json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}});
        let mem = json!({"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "100Mi"}}});
        let pods = json!({"type": "Pods", "pods": {"metric": {"name": "qps"},
            "target": {"type": "AverageValue", "averageValue": "10"}}});
        assert_eq!(autoscaler_targets(&hpa(json!([]), json!([]))), "<none>");
        assert_eq!(
            autoscaler_targets(&hpa(json!([cpu]), json!(null))),
            "cpu: <unknown>/50%"
        );
        let measured = json!([{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 42, "averageValue": "42m"}}}]);
        assert_eq!(
            autoscaler_targets(&hpa(json!([cpu]), measured.clone())),
            "cpu: 42%/50%"
        );
        assert_eq!(
            autoscaler_targets(&hpa(json!([cpu, mem, pods]), measured)),
            "cpu: 42%/50%, memory: <unknown>/100Mi + 1 more..."
        );
        let row = autoscaler_cells(&json!({
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3},
        }));
        assert_eq!(row[1], "Deployment/web");
        assert_eq!(
            (&row[3], &row[4], &row[5]),
            (&json!("<unset>"), &json!(3), &json!(0))
        );
    }
}
