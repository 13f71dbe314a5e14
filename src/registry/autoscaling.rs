//! The autoscaling/v2 kind's rules: HorizontalPodAutoscalers, with the defaults of
//! kube-apiserver (`SetDefaults_HorizontalPodAutoscaler`: one replica at least, a CPU
//! target of 80 % when no metric is named, and every unset field of a `behavior` filled
//! with the default scaling rules) and its validation (`ValidateHorizontalPodAutoscaler`).
//! The horizontal pod autoscaler controller writes the status.

use serde_json::{Value, json};

use super::Cause;
use super::strategy::Strategy;

/// The utilisation target of the CPU metric a spec without metrics gets.
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;
/// The longest stabilization window and policy period a rule may name.
const MAX_STABILIZATION_WINDOW: i64 = 3600;
const MAX_PERIOD: i64 = 1800;
const METRIC_TYPES: [&str; 5] = [
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];
const SELECT_POLICIES: [&str; 3] = ["Disabled", "Max", "Min"];
const POLICY_TYPES: [&str; 2] = ["Percent", "Pods"];

/// autoscaling/v2 HorizontalPodAutoscaler: scales its target by the metrics it names.
pub struct HorizontalPodAutoscaler;

impl Strategy for HorizontalPodAutoscaler {
    fn default(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if spec.get("minReplicas").is_none_or(Value::is_null) {
            spec.insert("minReplicas".into(), json!(1));
        }
        if spec
            .get("metrics")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            spec.insert(
                "metrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu", "target": {
                    "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]),
            );
        }
        if let Some(behavior) = spec.get_mut("behavior").filter(|b| b.is_object()) {
            let up = behavior.get("scaleUp").cloned();
            behavior["scaleUp"] = with_defaults(up, scale_up_rules());
            let down = behavior.get("scaleDown").cloned();
            behavior["scaleDown"] = with_defaults(down, scale_down_rules());
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            // The one status field Go writes without omitempty.
            m.insert("status".into(), json!({"desiredReplicas": 0}));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
            causes.push(Cause::required("spec"));
            return;
        };
        validate_spec(spec, causes);
    }
}

/// The scale-up rules a behavior gets for what it leaves out: no stabilization, and
/// the faster of four pods or doubling every 15 s (`GenerateHPAScaleUpRules`).
pub fn scale_up_rules() -> Value {
    json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15}]})
}

/// The scale-down rules a behavior gets: everything may go at once; the stabilization
/// window is left to the controller's own (`GenerateHPAScaleDownRules`).
pub fn scale_down_rules() -> Value {
    json!({"selectPolicy": "Max", "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15}]})
}

/// `copyHPAScalingRules`: the fields `from` sets, over the defaults.
fn with_defaults(from: Option<Value>, mut defaults: Value) -> Value {
    let Some(from) = from.as_ref().and_then(Value::as_object) else {
        return defaults;
    };
    for field in [
        "selectPolicy",
        "stabilizationWindowSeconds",
        "policies",
        "tolerance",
    ] {
        if let Some(v) = from.get(field).filter(|v| !v.is_null()) {
            defaults[field] = v.clone();
        }
    }
    defaults
}

fn set<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get(field).filter(|v| !v.is_null())
}

/// `validateHorizontalPodAutoscalerSpec`.
fn validate_spec(spec: &Value, causes: &mut Vec<Cause>) {
    let min = set(spec, "minReplicas");
    if let Some(m) = min
        && m.as_i64().is_none_or(|n| n < 1)
    {
        causes.push(Cause::invalid(
            "spec.minReplicas",
            m,
            "must be greater than or equal to 1",
        ));
    }
    let max = set(spec, "maxReplicas");
    let max_n = max.and_then(Value::as_i64).unwrap_or(0);
    if max_n < 1 {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            max.unwrap_or(&json!(0)),
            "must be greater than 0",
        ));
    }
    if let Some(min_n) = min.and_then(Value::as_i64)
        && max_n < min_n
    {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max_n),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    // As upstream, the metrics are checked only once the target is sound, and the
    // behavior only once the metrics are.
    let before = causes.len();
    validate_reference(spec.get("scaleTargetRef").unwrap_or(&Value::Null), causes);
    if causes.len() > before {
        return;
    }
    if let Some(metrics) = set(spec, "metrics").and_then(Value::as_array) {
        for (i, m) in metrics.iter().enumerate() {
            validate_metric(m, &format!("spec.metrics[{i}]"), causes);
        }
    }
    if causes.len() > before {
        return;
    }
    if let Some(behavior) = set(spec, "behavior") {
        for (field, name) in [
            ("scaleUp", "spec.behavior.scaleUp"),
            ("scaleDown", "spec.behavior.scaleDown"),
        ] {
            if let Some(rules) = set(behavior, field) {
                validate_rules(rules, name, causes);
            }
        }
    }
}

/// `ValidateCrossVersionObjectReference`.
fn validate_reference(r: &Value, causes: &mut Vec<Cause>) {
    for field in ["kind", "name"] {
        let path = format!("spec.scaleTargetRef.{field}");
        match r.get(field).and_then(Value::as_str).unwrap_or("") {
            "" => causes.push(Cause::required(&path)),
            v => {
                for msg in path_segment_errors(v) {
                    causes.push(Cause::invalid(&path, &json!(v), msg));
                }
            }
        }
    }
}

/// `IsValidPathSegmentName`.
fn path_segment_errors(name: &str) -> Vec<&'static str> {
    if name == "." || name == ".." {
        return vec![if name == "." {
            "may not be '.'"
        } else {
            "may not be '..'"
        }];
    }
    let mut out = Vec::new();
    if name.contains('/') {
        out.push("may not contain '/'");
    }
    if name.contains('%') {
        out.push("may not contain '%'");
    }
    out
}

/// `validateMetricSpec`, with the sources it checks.
fn validate_metric(m: &Value, path: &str, causes: &mut Vec<Cause>) {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    if ty.is_empty() {
        causes.push(Cause::required_with(
            &format!("{path}.type"),
            "must specify a metric source type",
        ));
    }
    if !METRIC_TYPES.contains(&ty) {
        causes.push(Cause::not_supported(
            &format!("{path}.type"),
            ty,
            &METRIC_TYPES,
        ));
        return;
    }
    let field = match ty {
        "ContainerResource" => "containerResource",
        "External" => "external",
        "Object" => "object",
        "Pods" => "pods",
        _ => "resource",
    };
    let present: Vec<&str> = [
        "object",
        "pods",
        "resource",
        "external",
        "containerResource",
    ]
    .into_iter()
    .filter(|f| set(m, f).is_some())
    .collect();
    match set(m, field) {
        None => causes.push(Cause::required_with(
            &format!("{path}.{field}"),
            "must populate information for the given metric source",
        )),
        Some(src) if field == "resource" || field == "containerResource" => {
            validate_resource_source(src, &format!("{path}.{field}"), field, causes)
        }
        Some(src) => {
            if let Some(t) = set(src, "target") {
                validate_target(t, &format!("{path}.{field}.target"), causes);
            }
        }
    }
    for other in present.into_iter().filter(|f| *f != field) {
        causes.push(Cause::forbidden(
            &format!("{path}.{other}"),
            "must populate the given metric source only",
        ));
    }
}

/// `validateResourceSource` and `validateContainerResourceSource`.
fn validate_resource_source(src: &Value, path: &str, field: &str, causes: &mut Vec<Cause>) {
    if src
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        causes.push(Cause::required_with(
            &format!("{path}.name"),
            "must specify a resource name",
        ));
    }
    if field == "containerResource"
        && src
            .get("container")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        causes.push(Cause::required_with(
            &format!("{path}.container"),
            "must specify a container",
        ));
    }
    let target = src.get("target").unwrap_or(&Value::Null);
    validate_target(target, &format!("{path}.target"), causes);
    let (util, avg) = (
        set(target, "averageUtilization"),
        set(target, "averageValue"),
    );
    match (util, avg) {
        (None, None) => causes.push(Cause::required_with(
            &format!("{path}.target.averageUtilization"),
            "must set either a target raw value or a target utilization",
        )),
        (Some(_), Some(_)) => causes.push(Cause::forbidden(
            &format!("{path}.target.averageValue"),
            "may not set both a target raw value and a target utilization",
        )),
        _ => {}
    }
}

/// `validateMetricTarget`.
fn validate_target(t: &Value, path: &str, causes: &mut Vec<Cause>) {
    let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
    if ty.is_empty() {
        causes.push(Cause::required_with(
            &format!("{path}.type"),
            "must specify a metric target type",
        ));
    }
    if !["Utilization", "Value", "AverageValue"].contains(&ty) {
        causes.push(Cause::invalid(
            &format!("{path}.type"),
            &json!(ty),
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    for field in ["value", "averageValue"] {
        if let Some(v) = set(t, field) {
            let positive = quantity(v).is_some_and(|q| q.milli() > 0);
            if !positive {
                causes.push(Cause::invalid(
                    &format!("{path}.{field}"),
                    v,
                    "must be positive",
                ));
            }
        }
    }
    if let Some(u) = set(t, "averageUtilization")
        && u.as_i64().is_none_or(|n| n < 1)
    {
        causes.push(Cause::invalid(
            &format!("{path}.averageUtilization"),
            u,
            "must be greater than 0",
        ));
    }
}

/// A quantity given as a string or a number.
pub fn quantity(v: &Value) -> Option<crate::types::quantity::Quantity> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.to_string().parse().ok(),
        _ => None,
    }
}

/// `validateScalingRules` and `validateScalingPolicy`.
fn validate_rules(rules: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(w) = set(rules, "stabilizationWindowSeconds") {
        match w.as_i64() {
            Some(n) if n < 0 => causes.push(Cause::invalid(
                &format!("{path}.stabilizationWindowSeconds"),
                w,
                "must be greater than or equal to zero",
            )),
            Some(n) if n > MAX_STABILIZATION_WINDOW => causes.push(Cause::invalid(
                &format!("{path}.stabilizationWindowSeconds"),
                w,
                &format!("must be less than or equal to {MAX_STABILIZATION_WINDOW}"),
            )),
            _ => {}
        }
    }
    if let Some(p) = set(rules, "selectPolicy") {
        let p = p.as_str().unwrap_or("");
        if !SELECT_POLICIES.contains(&p) {
            causes.push(Cause::not_supported(
                &format!("{path}.selectPolicy"),
                p,
                &SELECT_POLICIES,
            ));
        }
    }
    let policies = set(rules, "policies")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if policies.is_empty() {
        causes.push(Cause::required_with(
            &format!("{path}.policies"),
            "must specify at least one Policy",
        ));
    }
    for (i, p) in policies.iter().enumerate() {
        let at = format!("{path}.policies[{i}]");
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
        if !POLICY_TYPES.contains(&ty) {
            causes.push(Cause::not_supported(
                &format!("{at}.type"),
                ty,
                &POLICY_TYPES,
            ));
        }
        for field in ["value", "periodSeconds"] {
            let v = p.get(field).cloned().unwrap_or(json!(0));
            if v.as_i64().is_none_or(|n| n <= 0) {
                causes.push(Cause::invalid(
                    &format!("{at}.{field}"),
                    &v,
                    "must be greater than zero",
                ));
            }
        }
        if let Some(n) = p["periodSeconds"].as_i64().filter(|n| *n > MAX_PERIOD) {
            causes.push(Cause::invalid(
                &format!("{at}.periodSeconds"),
                &json!(n),
                &format!("must be less than or equal to {MAX_PERIOD}"),
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------
// autoscaling/v1: the same objects, with only a CPU target. What v1 cannot say (other
// metrics, their statuses, the conditions, a behavior) travels in the annotations
// kube-apiserver uses for the round trip, so a v1 client's update loses none of it.

/// The round-trip annotations of v1 (`autoscaling.alpha.kubernetes.io/…`).
pub const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
pub const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
const ROUND_TRIP: [&str; 4] = [
    METRICS_ANNOTATION,
    CURRENT_METRICS_ANNOTATION,
    CONDITIONS_ANNOTATION,
    BEHAVIOR_ANNOTATION,
];

/// autoscaling/v1 HorizontalPodAutoscalers, stored as autoscaling/v2 ones.
pub fn v1() -> super::convert::Conversion {
    super::convert::Conversion {
        stored: super::convert::Stored::Builtin(super::catalog::Kind::HorizontalPodAutoscaler),
        to_stored: Box::new(v1_to_v2),
        from_stored: Box::new(v2_to_v1),
        stored_field: str::to_string,
    }
}

/// autoscaling/v1 HorizontalPodAutoscaler: its rules are the stored v2 kind's.
pub struct HorizontalPodAutoscalerV1;
impl Strategy for HorizontalPodAutoscalerV1 {}

/// Copies the fields of `from` named in `pairs` to `to` under their other names.
fn renamed(from: &Value, pairs: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for (a, b) in pairs {
        if let Some(v) = from.get(*a).filter(|v| !v.is_null()) {
            out.insert((*b).to_string(), v.clone());
        }
    }
    out
}

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && m["resource"]["target"]["averageUtilization"].is_i64()
}

/// A v2 metric spec as v1 writes it into its annotation (`autoscalingv1.MetricSpec`).
fn metric_spec_to_v1(m: &Value) -> Value {
    let kind = m["type"].as_str().unwrap_or("");
    let mut out = json!({"type": kind});
    match kind {
        "Resource" | "ContainerResource" => {
            let field = source_field(kind).unwrap_or("resource");
            let src = &m[field];
            let mut r = renamed(src, &[("name", "name"), ("container", "container")]);
            r.extend(renamed(
                &src["target"],
                &[
                    ("averageUtilization", "targetAverageUtilization"),
                    ("averageValue", "targetAverageValue"),
                ],
            ));
            out[field] = Value::Object(r);
        }
        "Pods" => {
            let src = &m["pods"];
            let mut r = renamed(
                &src["metric"],
                &[("name", "metricName"), ("selector", "selector")],
            );
            r.extend(renamed(
                &src["target"],
                &[("averageValue", "targetAverageValue")],
            ));
            out["pods"] = Value::Object(r);
        }
        "Object" => {
            let src = &m["object"];
            let mut r = renamed(src, &[("describedObject", "target")]);
            r.extend(renamed(
                &src["metric"],
                &[("name", "metricName"), ("selector", "selector")],
            ));
            r.extend(renamed(
                &src["target"],
                &[("value", "targetValue"), ("averageValue", "averageValue")],
            ));
            out["object"] = Value::Object(r);
        }
        "External" => {
            let src = &m["external"];
            let mut r = renamed(
                &src["metric"],
                &[("name", "metricName"), ("selector", "metricSelector")],
            );
            r.extend(renamed(
                &src["target"],
                &[
                    ("value", "targetValue"),
                    ("averageValue", "targetAverageValue"),
                ],
            ));
            out["external"] = Value::Object(r);
        }
        _ => {}
    }
    out
}

/// A v1 annotation's metric spec as v2 has it.
fn metric_spec_to_v2(m: &Value) -> Value {
    let kind = m["type"].as_str().unwrap_or("");
    let mut out = json!({"type": kind});
    let target = |src: &Value, pairs: &[(&str, &str, &str)]| {
        let mut t = serde_json::Map::new();
        for (from, to, kind) in pairs {
            if let Some(v) = src.get(*from).filter(|v| !v.is_null()) {
                t.insert((*to).into(), v.clone());
                t.entry("type").or_insert(json!(kind));
            }
        }
        Value::Object(t)
    };
    match kind {
        "Resource" | "ContainerResource" => {
            let field = source_field(kind).unwrap_or("resource");
            let src = &m[field];
            let mut r = renamed(src, &[("name", "name"), ("container", "container")]);
            r.insert(
                "target".into(),
                target(
                    src,
                    &[
                        (
                            "targetAverageUtilization",
                            "averageUtilization",
                            "Utilization",
                        ),
                        ("targetAverageValue", "averageValue", "AverageValue"),
                    ],
                ),
            );
            out[field] = Value::Object(r);
        }
        "Pods" => {
            let src = &m["pods"];
            out["pods"] = json!({
                "metric": renamed(src, &[("metricName", "name"), ("selector", "selector")]),
                "target": target(src, &[("targetAverageValue", "averageValue", "AverageValue")]),
            });
        }
        "Object" => {
            let src = &m["object"];
            let mut r = renamed(src, &[("target", "describedObject")]);
            r.insert(
                "metric".into(),
                Value::Object(renamed(
                    src,
                    &[("metricName", "name"), ("selector", "selector")],
                )),
            );
            r.insert(
                "target".into(),
                target(
                    src,
                    &[
                        ("averageValue", "averageValue", "AverageValue"),
                        ("targetValue", "value", "Value"),
                    ],
                ),
            );
            out["object"] = Value::Object(r);
        }
        "External" => {
            let src = &m["external"];
            out["external"] = json!({
                "metric": renamed(src, &[("metricName", "name"), ("metricSelector", "selector")]),
                "target": target(src, &[
                    ("targetAverageValue", "averageValue", "AverageValue"),
                    ("targetValue", "value", "Value"),
                ]),
            });
        }
        _ => {}
    }
    out
}

/// A v2 metric status as v1's annotation has it, and back (`current.x` ⇄ `currentX`).
fn metric_status_to_v1(m: &Value) -> Value {
    let kind = m["type"].as_str().unwrap_or("");
    let field = source_field(kind);
    let mut out = json!({"type": kind});
    if let Some(field) = field {
        let src = &m[field];
        let mut r = renamed(
            src,
            &[
                ("name", "name"),
                ("container", "container"),
                ("describedObject", "target"),
            ],
        );
        r.extend(renamed(&src["metric"], &metric_names(kind)));
        let current = &src["current"];
        r.extend(renamed(
            current,
            &[
                ("averageUtilization", "currentAverageUtilization"),
                (
                    "averageValue",
                    if kind == "Object" {
                        "averageValue"
                    } else {
                        "currentAverageValue"
                    },
                ),
                ("value", "currentValue"),
            ],
        ));
        out[field] = Value::Object(r);
    }
    out
}

fn metric_status_to_v2(m: &Value) -> Value {
    let kind = m["type"].as_str().unwrap_or("");
    let mut out = json!({"type": kind});
    if let Some(field) = source_field(kind) {
        let src = &m[field];
        let mut r = renamed(
            src,
            &[
                ("name", "name"),
                ("container", "container"),
                ("target", "describedObject"),
            ],
        );
        let back: Vec<(&str, &str)> = metric_names(kind).iter().map(|(a, b)| (*b, *a)).collect();
        let metric = renamed(src, &back);
        if !metric.is_empty() {
            r.insert("metric".into(), Value::Object(metric));
        }
        r.insert(
            "current".into(),
            Value::Object(renamed(
                src,
                &[
                    ("currentAverageUtilization", "averageUtilization"),
                    (
                        if kind == "Object" {
                            "averageValue"
                        } else {
                            "currentAverageValue"
                        },
                        "averageValue",
                    ),
                    ("currentValue", "value"),
                ],
            )),
        );
        out[field] = Value::Object(r);
    }
    out
}

/// The field of a metric (spec or status) that holds its source.
fn source_field(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "Pods" => "pods",
        "Object" => "object",
        "External" => "external",
        _ => return None,
    })
}

fn metric_names(kind: &str) -> [(&'static str, &'static str); 2] {
    if kind == "External" {
        [("name", "metricName"), ("selector", "metricSelector")]
    } else {
        [("name", "metricName"), ("selector", "selector")]
    }
}

/// The annotation's JSON array, if it holds one.
fn annotation_list(annotations: &serde_json::Map<String, Value>, key: &str) -> Option<Vec<Value>> {
    let text = annotations.get(key)?.as_str()?;
    serde_json::from_str::<Vec<Value>>(text).ok()
}

/// The fields both versions name alike.
const SHARED_SPEC: &[(&str, &str)] = &[
    ("scaleTargetRef", "scaleTargetRef"),
    ("minReplicas", "minReplicas"),
    ("maxReplicas", "maxReplicas"),
];
const SHARED_STATUS: &[(&str, &str)] = &[
    ("observedGeneration", "observedGeneration"),
    ("lastScaleTime", "lastScaleTime"),
    ("currentReplicas", "currentReplicas"),
    ("desiredReplicas", "desiredReplicas"),
];

fn annotations_of(v: &Value) -> serde_json::Map<String, Value> {
    v.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn set_annotations(obj: &mut Value, annotations: serde_json::Map<String, Value>) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if annotations.is_empty() {
            meta.remove("annotations");
        } else {
            meta.insert("annotations".into(), Value::Object(annotations));
        }
    }
}

/// An autoscaling/v1 object as it is stored (`Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler`).
pub fn v1_to_v2(v: &Value) -> Value {
    let mut out = v.clone();
    out["apiVersion"] = json!("autoscaling/v2");
    let mut annotations = annotations_of(v);
    let spec = &v["spec"];
    let mut s = renamed(spec, SHARED_SPEC);
    let mut metrics: Vec<Value> = annotation_list(&annotations, METRICS_ANNOTATION)
        .unwrap_or_default()
        .iter()
        .map(metric_spec_to_v2)
        .collect();
    if let Some(cpu) = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|c| !c.is_null())
    {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": cpu}}}));
    }
    if !metrics.is_empty() {
        s.insert("metrics".into(), Value::Array(metrics));
    }
    if let Some(b) = annotations
        .get(BEHAVIOR_ANNOTATION)
        .and_then(Value::as_str)
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
    {
        s.insert("behavior".into(), b);
    }
    out["spec"] = Value::Object(s);
    let status = &v["status"];
    if status.is_object() {
        let mut st = renamed(status, SHARED_STATUS);
        let current = match annotation_list(&annotations, CURRENT_METRICS_ANNOTATION) {
            Some(list) => list.iter().map(metric_status_to_v2).collect(),
            None => match status
                .get("currentCPUUtilizationPercentage")
                .filter(|c| !c.is_null())
            {
                Some(cpu) => vec![json!({"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": cpu}}})],
                None => vec![],
            },
        };
        if !current.is_empty() {
            st.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(cs) = annotation_list(&annotations, CONDITIONS_ANNOTATION) {
            st.insert("conditions".into(), Value::Array(cs));
        }
        out["status"] = Value::Object(st);
    }
    for key in ROUND_TRIP {
        annotations.remove(key);
    }
    set_annotations(&mut out, annotations);
    out
}

/// A stored autoscaler as autoscaling/v1 serves it.
pub fn v2_to_v1(v: &Value) -> Value {
    let mut out = v.clone();
    out["apiVersion"] = json!("autoscaling/v1");
    let mut annotations = annotations_of(v);
    for key in ROUND_TRIP {
        annotations.remove(key);
    }
    let encode = |list: &[Value]| Value::String(serde_json::to_string(list).expect("JSON"));
    let spec = &v["spec"];
    let mut s = renamed(spec, SHARED_SPEC);
    let metrics = spec["metrics"].as_array().map_or(&[][..], Vec::as_slice);
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_utilization(m)) {
        s.insert(
            "targetCPUUtilizationPercentage".into(),
            cpu["resource"]["target"]["averageUtilization"].clone(),
        );
    }
    let others: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization(m))
        .map(metric_spec_to_v1)
        .collect();
    if !others.is_empty() {
        annotations.insert(METRICS_ANNOTATION.into(), encode(&others));
    }
    if let Some(b) = spec.get("behavior").filter(|b| b.is_object()) {
        annotations.insert(
            BEHAVIOR_ANNOTATION.into(),
            Value::String(serde_json::to_string(b).expect("JSON")),
        );
    }
    out["spec"] = Value::Object(s);
    let status = &v["status"];
    if status.is_object() {
        let mut st = renamed(status, SHARED_STATUS);
        // Both counts are always written in v1 (no `omitempty`).
        for field in ["currentReplicas", "desiredReplicas"] {
            st.entry(field).or_insert(json!(0));
        }
        let current = status["currentMetrics"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if let Some(cpu) = current
            .iter()
            .find(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu")
            && let Some(u) = cpu.pointer("/resource/current/averageUtilization")
        {
            st.insert("currentCPUUtilizationPercentage".into(), u.clone());
        }
        if !current.is_empty() {
            let list: Vec<Value> = current.iter().map(metric_status_to_v1).collect();
            annotations.insert(CURRENT_METRICS_ANNOTATION.into(), encode(&list));
        }
        if let Some(cs) = status["conditions"].as_array().filter(|c| !c.is_empty()) {
            annotations.insert(CONDITIONS_ANNOTATION.into(), encode(cs));
        }
        out["status"] = Value::Object(st);
    }
    set_annotations(&mut out, annotations);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn v1_carries_the_cpu_target_and_keeps_the_rest_in_annotations() {
        let v2 = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "annotations": {"team": "a"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory",
                        "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "External", "external": {"metric": {"name": "queue"},
                        "target": {"type": "Value", "value": "30"}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "90Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                        "current": {"averageUtilization": 75, "averageValue": "75m"}}},
                    {"type": ""},
                ],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale"}],
            },
        });
        let v1 = v2_to_v1(&v2);
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 75);
        let a = &v1["metadata"]["annotations"];
        assert_eq!(a["team"], "a");
        let others: Value = serde_json::from_str(a[METRICS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(
            others,
            json!([{"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}},
                   {"type": "External", "external": {"metricName": "queue", "targetValue": "30"}}])
        );
        let current: Value =
            serde_json::from_str(a[CURRENT_METRICS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(
            current[1],
            json!({"type": "Resource", "resource": {"name": "cpu",
                "currentAverageUtilization": 75, "currentAverageValue": "75m"}})
        );
        // Back again, nothing is lost (the CPU target goes last, as upstream puts it).
        let back = v1_to_v2(&v1);
        assert_eq!(back["metadata"]["annotations"], json!({"team": "a"}));
        let m = back["spec"]["metrics"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], v2["spec"]["metrics"][0]);
        assert_eq!(m[1], v2["spec"]["metrics"][2]);
        assert_eq!(m[2], v2["spec"]["metrics"][1]);
        assert_eq!(back["spec"]["behavior"], v2["spec"]["behavior"]);
        assert_eq!(back["status"], v2["status"]);
    }

    #[test]
    fn a_plain_v1_object_is_a_cpu_target() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                     "maxReplicas": 3, "targetCPUUtilizationPercentage": 60}});
        let v2 = v1_to_v2(&v1);
        assert_eq!(v2["apiVersion"], "autoscaling/v2");
        assert_eq!(
            v2["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 60}}}])
        );
        assert!(v2["metadata"].get("annotations").is_none());
        assert_eq!(v2_to_v1(&v2), v1);
    }

    use super::*;

    fn hpa(spec: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": spec})
    }

    fn causes(mut obj: Value) -> Vec<String> {
        HorizontalPodAutoscaler.default(&mut obj);
        let mut out = Vec::new();
        HorizontalPodAutoscaler.validate(&obj, &mut out);
        out.into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn target() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
    }

    #[test]
    fn a_bare_spec_gets_one_replica_and_the_cpu_target() {
        let mut obj = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 5}));
        HorizontalPodAutoscaler.default(&mut obj);
        assert_eq!(obj["spec"]["minReplicas"], 1);
        assert_eq!(
            obj["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu", "target":
                {"type": "Utilization", "averageUtilization": 80}}}])
        );
        // No behavior is made up where none was asked for.
        assert!(obj["spec"].get("behavior").is_none());
    }

    #[test]
    fn a_behavior_gets_what_it_leaves_out() {
        let mut obj = hpa(
            json!({"scaleTargetRef": target(), "maxReplicas": 5, "behavior": {
            "scaleDown": {"stabilizationWindowSeconds": 10}}}),
        );
        HorizontalPodAutoscaler.default(&mut obj);
        let b = &obj["spec"]["behavior"];
        assert_eq!(b["scaleUp"], scale_up_rules());
        assert_eq!(b["scaleDown"]["stabilizationWindowSeconds"], 10);
        assert_eq!(b["scaleDown"]["selectPolicy"], "Max");
        assert_eq!(b["scaleDown"]["policies"][0]["value"], 100);
    }

    #[test]
    fn bad_specs_are_refused_with_upstream_messages() {
        assert_eq!(
            causes(hpa(
                json!({"scaleTargetRef": target(), "minReplicas": 3, "maxReplicas": 2})
            )),
            ["spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"]
        );
        assert_eq!(
            causes(hpa(
                json!({"scaleTargetRef": {"kind": "Deployment"}, "maxReplicas": 0})
            )),
            [
                "spec.maxReplicas: Invalid value: 0: must be greater than 0",
                "spec.maxReplicas: Invalid value: 0: must be greater than or equal to `minReplicas`",
                "spec.scaleTargetRef.name: Required value",
            ]
        );
        let m = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization"}}}]);
        assert_eq!(
            causes(hpa(
                json!({"scaleTargetRef": target(), "maxReplicas": 2, "metrics": m})
            )),
            [
                "spec.metrics[0].resource.target.averageUtilization: Required value: must set either a target raw value or a target utilization"
            ]
        );
        let b = json!({"scaleUp": {"policies": [], "selectPolicy": "Most"}});
        assert_eq!(
            causes(hpa(
                json!({"scaleTargetRef": target(), "maxReplicas": 2, "behavior": b})
            )),
            [
                "spec.behavior.scaleUp.selectPolicy: Unsupported value: \"Most\": supported values: \"Disabled\", \"Max\", \"Min\"",
                "spec.behavior.scaleUp.policies: Required value: must specify at least one Policy",
            ]
        );
        assert!(causes(hpa(json!({"scaleTargetRef": target(), "maxReplicas": 2}))).is_empty());
    }
}
