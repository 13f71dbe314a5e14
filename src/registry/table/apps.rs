//! The Table printers of the apps/v1 kinds: deployments, replica sets, controller
//! revisions, stateful sets and daemon sets.

use serde_json::{Value, json};

use super::corev1::replication_controller_cells;
use super::{Column, age, col, container_fields, or_none, s};

pub(super) fn controller_revision_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col("Controller", 0, "Controller of the object."),
        Column {
            kind: std::borrow::Cow::Borrowed("integer"),
            ..col("Revision", 0, "Revision of the ControllerRevision.")
        },
        col("Age", 0, "The time since the object was created."),
    ]
}

/// kubectl's printer: the controller as `<kind>.<group>/<name>`.
pub(super) fn controller_revision_cells(v: &Value) -> Vec<Value> {
    let controller = v
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r["controller"] == true)
        .map_or_else(
            || "<none>".to_string(),
            |r| {
                let api_version = r["apiVersion"].as_str().unwrap_or("");
                let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
                format!(
                    "{}.{group}/{}",
                    r["kind"].as_str().unwrap_or("").to_ascii_lowercase(),
                    r["name"].as_str().unwrap_or("")
                )
            },
        );
    vec![
        json!(s(v, "/metadata/name")),
        json!(controller),
        json!(v["revision"].as_i64().unwrap_or(0)),
        json!(age(v, "/metadata/creationTimestamp")),
    ]
}

pub(super) fn stateful_set_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col("Ready", 0, "Number of the pod with ready state"),
        col("Age", 0, "The time since the object was created."),
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
    ]
}

pub(super) fn stateful_set_cells(v: &Value) -> Vec<Value> {
    let n = |p: &str| v.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let join = |f: &str| container_fields(v, "/spec/template/spec/containers", f);
    vec![
        json!(s(v, "/metadata/name")),
        json!(format!(
            "{}/{}",
            n("/status/readyReplicas"),
            n("/spec/replicas")
        )),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
    ]
}

pub(super) fn deployment_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col("Ready", 0, "Number of the pod with ready state."),
        col(
            "Up-to-date",
            0,
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
        ),
        col(
            "Available",
            0,
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
        ),
        age,
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
        col(
            "Selector",
            1,
            "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
        ),
    ]
}

pub(super) fn deployment_cells(v: &Value) -> Vec<Value> {
    let n = |p: &str| v.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let join = |f: &str| container_fields(v, "/spec/template/spec/containers", f);
    vec![
        json!(s(v, "/metadata/name")),
        json!(format!(
            "{}/{}",
            n("/status/readyReplicas"),
            n("/spec/replicas")
        )),
        json!(n("/status/updatedReplicas")),
        json!(n("/status/availableReplicas")),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
        json!(crate::registry::apps::selector_string(
            v.pointer("/spec/selector")
        )),
    ]
}

pub(super) fn daemon_set_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col(
            "Desired",
            0,
            "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
        ),
        col(
            "Current",
            0,
            "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
        ),
        col(
            "Ready",
            0,
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
        ),
        col(
            "Up-to-date",
            0,
            "The total number of nodes that are running updated daemon pod",
        ),
        col(
            "Available",
            0,
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
        ),
        col(
            "Node Selector",
            0,
            "NodeSelector is a selector which must be true for the pod to fit on a node.",
        ),
        age,
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
        col(
            "Selector",
            1,
            "A label query over pods that are managed by the daemon set.",
        ),
    ]
}

pub(super) fn daemon_set_cells(v: &Value) -> Vec<Value> {
    let n = |p: &str| v.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let join = |f: &str| container_fields(v, "/spec/template/spec/containers", f);
    // `labels.FormatLabels`: sorted by key.
    let mut selector: Vec<(String, String)> = v
        .pointer("/spec/template/spec/nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect();
    selector.sort();
    let node_selector: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    vec![
        json!(s(v, "/metadata/name")),
        json!(n("/status/desiredNumberScheduled")),
        json!(n("/status/currentNumberScheduled")),
        json!(n("/status/numberReady")),
        json!(n("/status/updatedNumberScheduled")),
        json!(n("/status/numberAvailable")),
        json!(or_none(node_selector.join(","))),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
        json!(crate::registry::apps::selector_string(
            v.pointer("/spec/selector")
        )),
    ]
}

pub(super) fn replica_set_cells(v: &Value) -> Vec<Value> {
    let mut cells = replication_controller_cells(v);
    if let Some(selector) = cells.last_mut() {
        *selector = json!(crate::registry::apps::selector_string(
            v.pointer("/spec/selector")
        ));
    }
    cells
}
