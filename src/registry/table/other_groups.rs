//! The Table printers of the smaller groups' kinds: PodDisruptionBudgets, Leases,
//! RuntimeClasses, PriorityClasses, CustomResourceDefinitions and DeploymentConfigs.

use serde_json::{Value, json};

use super::{Column, age, col, s};

pub(super) fn definition_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        Column {
            kind: std::borrow::Cow::Borrowed("date"),
            ..col("Created At", 0, "The time the definition was created.")
        },
    ]
}

pub(super) fn definition_cells(v: &Value) -> Vec<Value> {
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/metadata/creationTimestamp")),
    ]
}

pub(super) fn lease_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Holder", 0, "The holder of the lease."), age]
}

pub(super) fn runtime_class_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col(
            "Handler",
            0,
            "The name of the runtime that runs the pods of this class.",
        ),
        age,
    ]
}

pub(super) fn priority_class_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        Column {
            kind: std::borrow::Cow::Borrowed("integer"),
            ..col("Value", 0, "The value of this priority class.")
        },
        Column {
            kind: std::borrow::Cow::Borrowed("boolean"),
            ..col(
                "Global-Default",
                0,
                "Whether this is the priority of pods that name no class.",
            )
        },
        col("Age", 0, "The time since the object was created."),
        col(
            "PreemptionPolicy",
            0,
            "Whether pods of this class may preempt pods of lower priority.",
        ),
    ]
}

pub(super) fn priority_class_cells(v: &Value) -> Vec<Value> {
    vec![
        json!(s(v, "/metadata/name")),
        json!(v["value"].as_i64().unwrap_or(0)),
        json!(v["globalDefault"] == true),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(s(v, "/preemptionPolicy")),
    ]
}

pub(super) fn deployment_config_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    vec![
        name,
        col(
            "Revision",
            0,
            "The latest version of the deployment config.",
        ),
        col("Desired", 0, "Number of desired pods."),
        col("Current", 0, "Number of pods of the latest version."),
        col("Triggered By", 0, "What starts a new deployment."),
    ]
}

pub(super) fn pod_disruption_budget_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col(
            "Min Available",
            0,
            "The minimum number or percentage of available pods this budget requires.",
        ),
        col(
            "Max Unavailable",
            0,
            "The maximum number or percentage of unavailable pods this budget requires.",
        ),
        col(
            "Allowed Disruptions",
            0,
            "Calculated number of pods that may be disrupted at this time.",
        ),
        age,
    ]
}

pub(super) fn pod_disruption_budget_cells(v: &Value) -> Vec<Value> {
    let figure = |p: &str| match v.pointer(p) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".into(),
    };
    vec![
        json!(s(v, "/metadata/name")),
        json!(figure("/spec/minAvailable")),
        json!(figure("/spec/maxUnavailable")),
        json!(
            v.pointer("/status/disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
        json!(age(v, "/metadata/creationTimestamp")),
    ]
}

pub(super) fn lease_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![name, json!(s(v, "/spec/holderIdentity")), json!(created)]
}

pub(super) fn runtime_class_cells(v: &Value) -> Vec<Value> {
    let created = age(v, "/metadata/creationTimestamp");
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/handler")),
        json!(created),
    ]
}

pub(super) fn deployment_config_cells(v: &Value) -> Vec<Value> {
    crate::registry::deploymentconfig::rules::cells(v)
}
