//! Server-side printing: the `meta.k8s.io/v1` Table of a list or object, with the columns
//! kubectl users know per kind (`-o wide` columns have priority 1).

mod apps;
mod autoscaling;
mod batch;
mod corev1;
mod endpoints;
mod networking;
mod other_groups;

use bytes::Bytes;
use serde_json::{Value, json};

use super::catalog::Resource;
use crate::types::{age_seconds, human_duration};

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// The object's metadata as PartialObjectMetadata (the default).
    #[default]
    Metadata,
    Object,
}

/// How a kind's objects print: its columns and the cells of one object.
pub trait Printer: Send + Sync {
    fn columns(&self) -> Vec<Column>;
    fn cells(&self, obj: &Value) -> Vec<Value>;
}

/// A printer of a built-in kind: a function for its columns and one for its cells.
pub struct Fixed {
    columns: fn() -> Vec<Column>,
    cells: fn(&Value) -> Vec<Value>,
}

impl Printer for Fixed {
    fn columns(&self) -> Vec<Column> {
        (self.columns)()
    }
    fn cells(&self, obj: &Value) -> Vec<Value> {
        (self.cells)(obj)
    }
}

macro_rules! printers {
    ($($name:ident: $columns:path, $cells:path;)*) => {
        $(pub const $name: Fixed = Fixed { columns: $columns, cells: $cells };)*
    };
}

printers! {
    POD: corev1::pod_columns, corev1::pod_cells;
    REPLICATION_CONTROLLER: corev1::replication_controller_columns, corev1::replication_controller_cells;
    REPLICA_SET: corev1::replication_controller_columns, apps::replica_set_cells;
    DEPLOYMENT: apps::deployment_columns, apps::deployment_cells;
    CONTROLLER_REVISION: apps::controller_revision_columns, apps::controller_revision_cells;
    JOB: batch::job_columns, batch::job_cells;
    CRON_JOB: batch::cron_job_columns, batch::cron_job_cells;
    STATEFUL_SET: apps::stateful_set_columns, apps::stateful_set_cells;
    PERSISTENT_VOLUME_CLAIM: corev1::claim_columns, corev1::claim_cells;
    NAMESPACE: corev1::namespace_columns, corev1::namespace_cells;
    NODE: corev1::node_columns, corev1::node_cells;
    EVENT: corev1::event_columns, corev1::event_cells;
    EVENTS_V1_EVENT: corev1::event_columns, corev1::events_v1_event_cells;
    CONFIG_MAP: corev1::config_map_columns, corev1::config_map_cells;
    POD_TEMPLATE: corev1::pod_template_columns, corev1::pod_template_cells;
    SECRET: corev1::secret_columns, corev1::secret_cells;
    SERVICE_ACCOUNT: corev1::service_account_columns, corev1::service_account_cells;
    SERVICE: corev1::service_columns, corev1::service_cells;
    ENDPOINTS: endpoints::endpoints_columns, endpoints::endpoints_cells;
    ENDPOINT_SLICE: endpoints::slice_columns, endpoints::slice_cells;
    LEASE: other_groups::lease_columns, other_groups::lease_cells;
    DEPLOYMENT_CONFIG: other_groups::deployment_config_columns, other_groups::deployment_config_cells;
    CUSTOM_RESOURCE_DEFINITION: other_groups::definition_columns, other_groups::definition_cells;
    NAME_ONLY: name_columns, name_cells;
    DAEMON_SET: apps::daemon_set_columns, apps::daemon_set_cells;
    POD_DISRUPTION_BUDGET: other_groups::pod_disruption_budget_columns, other_groups::pod_disruption_budget_cells;
    HORIZONTAL_POD_AUTOSCALER: autoscaling::autoscaler_columns, autoscaling::autoscaler_cells;
    HORIZONTAL_POD_AUTOSCALER_V1: autoscaling::autoscaler_columns, autoscaling::autoscaler_v1_cells;
    RUNTIME_CLASS: other_groups::runtime_class_columns, other_groups::runtime_class_cells;
    PRIORITY_CLASS: other_groups::priority_class_columns, other_groups::priority_class_cells;
    INGRESS: networking::ingress_columns, networking::ingress_cells;
    INGRESS_CLASS: networking::ingress_class_columns, networking::ingress_class_cells;
    NETWORK_POLICY: networking::network_policy_columns, networking::network_policy_cells;
}

fn name_columns() -> Vec<Column> {
    vec![col("Name", 0, "Name must be unique within a namespace.")]
}

fn name_cells(v: &Value) -> Vec<Value> {
    vec![json!(s(v, "/metadata/name"))]
}

/// One column of a Table.
pub struct Column {
    pub name: std::borrow::Cow<'static, str>,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub kind: std::borrow::Cow<'static, str>,
    pub priority: u8,
    pub description: std::borrow::Cow<'static, str>,
}

const fn col(name: &'static str, priority: u8, description: &'static str) -> Column {
    use std::borrow::Cow::Borrowed;
    Column {
        name: Borrowed(name),
        kind: Borrowed("string"),
        priority,
        description: Borrowed(description),
    }
}

/// The `field` of each container of the list at `pointer`, comma-separated.
fn container_fields(v: &Value, pointer: &str, field: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c[field].as_str().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(",")
}

fn s(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn or_none(x: String) -> String {
    if x.is_empty() { "<none>".into() } else { x }
}

fn age(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .and_then(age_seconds)
        .map_or_else(|| "<unknown>".into(), human_duration)
}

fn count(v: &Value, ptr: &str) -> usize {
    match v.pointer(ptr) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn row(res: &Resource, obj: &[u8], include: IncludeObject) -> Value {
    let v: Value = serde_json::from_slice(obj).unwrap_or(Value::Null);
    let mut row = json!({"cells": res.table.cells(&v)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = partial_metadata(&v),
        IncludeObject::Object => row["object"] = v,
    }
    row
}

/// An object as a PartialObjectMetadata: its metadata alone, as metadata clients (and
/// Table rows) ask for it.
pub fn partial_metadata(v: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": v.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// [`partial_metadata`] of stored object bytes.
pub fn partial_metadata_bytes(obj: &[u8]) -> Bytes {
    let v: Value = serde_json::from_slice(obj).unwrap_or(Value::Null);
    Bytes::from(serde_json::to_vec(&partial_metadata(&v)).expect("JSON serializes"))
}

/// A Table of `items`.
pub fn table(
    res: &Resource,
    items: &[Bytes],
    revision: u64,
    continue_token: Option<&str>,
    include: IncludeObject,
) -> Bytes {
    let defs: Vec<Value> = res
        .table
        .columns()
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": if c.name == "Name" { "name" } else { "" },
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if let Some(c) = continue_token {
        meta["continue"] = json!(c);
    }
    let rows: Vec<Value> = items.iter().map(|i| row(res, i, include)).collect();
    let t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": defs,
        "rows": rows,
    });
    Bytes::from(serde_json::to_vec(&t).expect("JSON serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::catalog::{self, Kind};

    #[test]
    fn pods_print_ready_status_and_restarts() {
        let pod = json!({"metadata": {"name": "web-1", "creationTimestamp": crate::types::now()},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let t = table(
            catalog::of(Kind::Pod),
            &[Bytes::from(pod.to_string())],
            9,
            None,
            IncludeObject::Metadata,
        );
        let t: Value = serde_json::from_slice(&t).unwrap();
        assert_eq!(t["metadata"]["resourceVersion"], "9");
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "web-1");
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], 3);
        assert!(cells[4].as_str().unwrap().ends_with('s'));
        assert_eq!(cells[5], "10.0.0.5");
        assert_eq!(cells[6], "n1");
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn every_kind_has_as_many_cells_as_columns() {
        for r in catalog::RESOURCES.iter() {
            let obj = json!({"metadata": {"name": "x"}});
            assert_eq!(
                r.table.cells(&obj).len(),
                r.table.columns().len(),
                "{}",
                r.plural
            );
        }
    }
}
