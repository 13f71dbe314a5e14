//! Server-side printing: the `meta.k8s.io/v1` Table of a list or object, with the columns
//! kubectl users know per kind (`-o wide` columns have priority 1).

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
    ($($name:ident: $columns:ident, $cells:ident;)*) => {
        $(pub const $name: Fixed = Fixed { columns: $columns, cells: $cells };)*
    };
}

printers! {
    POD: pod_columns, pod_cells;
    REPLICATION_CONTROLLER: replication_controller_columns, replication_controller_cells;
    REPLICA_SET: replication_controller_columns, replica_set_cells;
    DEPLOYMENT: deployment_columns, deployment_cells;
    CONTROLLER_REVISION: controller_revision_columns, controller_revision_cells;
    JOB: job_columns, job_cells;
    CRON_JOB: cron_job_columns, cron_job_cells;
    STATEFUL_SET: stateful_set_columns, stateful_set_cells;
    PERSISTENT_VOLUME_CLAIM: claim_columns, claim_cells;
    NAMESPACE: namespace_columns, namespace_cells;
    NODE: node_columns, node_cells;
    EVENT: event_columns, event_cells;
    EVENTS_V1_EVENT: event_columns, events_v1_event_cells;
    CONFIG_MAP: config_map_columns, config_map_cells;
    POD_TEMPLATE: pod_template_columns, pod_template_cells;
    SECRET: secret_columns, secret_cells;
    SERVICE_ACCOUNT: service_account_columns, service_account_cells;
    SERVICE: service_columns, service_cells;
    LEASE: lease_columns, lease_cells;
    DEPLOYMENT_CONFIG: deployment_config_columns, deployment_config_cells;
    CUSTOM_RESOURCE_DEFINITION: definition_columns, definition_cells;
    NAME_ONLY: name_columns, name_cells;
    DAEMON_SET: daemon_set_columns, daemon_set_cells;
    POD_DISRUPTION_BUDGET: pod_disruption_budget_columns, pod_disruption_budget_cells;
    HORIZONTAL_POD_AUTOSCALER: autoscaler_columns, autoscaler_cells;
    HORIZONTAL_POD_AUTOSCALER_V1: autoscaler_columns, autoscaler_v1_cells;
    RUNTIME_CLASS: runtime_class_columns, runtime_class_cells;
    PRIORITY_CLASS: priority_class_columns, priority_class_cells;
}

fn name_columns() -> Vec<Column> {
    vec![col("Name", 0, "Name must be unique within a namespace.")]
}

fn name_cells(v: &Value) -> Vec<Value> {
    vec![json!(s(v, "/metadata/name"))]
}

fn definition_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        Column {
            kind: std::borrow::Cow::Borrowed("date"),
            ..col("Created At", 0, "The time the definition was created.")
        },
    ]
}

fn definition_cells(v: &Value) -> Vec<Value> {
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/metadata/creationTimestamp")),
    ]
}

fn events_v1_event_cells(v: &Value) -> Vec<Value> {
    event_cells(&super::convert::event_to_stored(v))
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

fn pod_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col(
            "Ready",
            0,
            "The number of containers that are ready, out of all.",
        ),
        col(
            "Status",
            0,
            "The aggregate state of the containers in this pod.",
        ),
        col(
            "Restarts",
            0,
            "The number of times the containers were restarted.",
        ),
        age,
        col("IP", 1, "IP address allocated to the pod."),
        col("Node", 1, "Name of the node the pod runs on."),
        col("Nominated Node", 1, "Node the pod may preempt onto."),
        col("Readiness Gates", 1, "Readiness gates of the pod."),
    ]
}

fn replication_controller_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col("Desired", 0, "Number of desired pods."),
        col("Current", 0, "Number of actual pods."),
        col("Ready", 0, "Number of ready pods."),
        age,
        col("Containers", 1, "Names of the containers of the template."),
        col("Images", 1, "Images of the containers of the template."),
        col("Selector", 1, "The label selector of the pods."),
    ]
}

fn namespace_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Status", 0, "The phase of the namespace."), age]
}

fn node_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col("Status", 0, "The readiness of the node."),
        col("Roles", 0, "The roles of the node."),
        age,
        col("Version", 0, "The version the node agent reports."),
        col("Internal-IP", 1, "Internal address of the node."),
        col("External-IP", 1, "External address of the node."),
        col("OS-Image", 1, "Operating system of the node."),
        col("Kernel-Version", 1, "Kernel of the node."),
        col(
            "Container-Runtime",
            1,
            "Runtime that runs the node's containers.",
        ),
    ]
}

fn event_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    vec![
        col("Last Seen", 0, "Time since the event was last seen."),
        col("Type", 0, "Normal or Warning."),
        col("Reason", 0, "Why the event happened."),
        col("Object", 0, "The object the event is about."),
        col("Message", 0, "What happened."),
        col("Subobject", 1, "The part of the object the event is about."),
        col("Source", 1, "The component that reported the event."),
        col("First Seen", 1, "Time since the event was first seen."),
        col("Count", 1, "How often the event was seen."),
        Column {
            priority: 1,
            ..name
        },
    ]
}

fn pod_template_columns() -> Vec<Column> {
    vec![
        col("Template", 0, "Name must be unique within a namespace."),
        col("Containers", 0, "Names of the containers of the template."),
        col("Images", 0, "Images of the containers of the template."),
        col("Pod Labels", 0, "The labels of the template's pods."),
    ]
}

fn pod_template_cells(v: &Value) -> Vec<Value> {
    let labels = pairs(v, "/template/metadata/labels");
    vec![
        json!(s(v, "/metadata/name")),
        json!(container_fields(v, "/template/spec/containers", "name")),
        json!(container_fields(v, "/template/spec/containers", "image")),
        json!(if labels.is_empty() {
            "<none>".into()
        } else {
            labels
        }),
    ]
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

/// The string map at `pointer` as `k=v,k2=v2`.
fn pairs(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(",")
}

fn config_map_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Data", 0, "Number of entries."), age]
}

fn secret_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col("Type", 0, "The type of the secret."),
        col("Data", 0, "Number of entries."),
        age,
    ]
}

fn service_account_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Secrets", 0, "Number of secrets."), age]
}

fn service_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col("Type", 0, "The type of service."),
        col("Cluster-IP", 0, "The cluster IP of the service."),
        col("External-IP", 0, "The external IPs of the service."),
        col("Port(s)", 0, "The ports the service serves."),
        age,
        col(
            "Selector",
            1,
            "The label selector of the pods behind the service.",
        ),
    ]
}

fn lease_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Holder", 0, "The holder of the lease."), age]
}

fn runtime_class_columns() -> Vec<Column> {
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

fn priority_class_columns() -> Vec<Column> {
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

fn priority_class_cells(v: &Value) -> Vec<Value> {
    vec![
        json!(s(v, "/metadata/name")),
        json!(v["value"].as_i64().unwrap_or(0)),
        json!(v["globalDefault"] == true),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(s(v, "/preemptionPolicy")),
    ]
}

fn deployment_config_columns() -> Vec<Column> {
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

/// The STATUS column, as kubectl's printer makes it: init containers first
/// (`Init:1/2`, `Init:CrashLoopBackOff`, `Init:ExitCode:1`), then the containers'
/// waiting or terminated reasons, then the phase.
fn pod_status(v: &Value) -> String {
    let phase = s(v, "/status/phase");
    let mut reason = s(v, "/status/reason");
    if reason.is_empty() {
        reason = phase.clone();
    }
    let ended = |c: &Value, prefix: &str| {
        let t = &c["state"]["terminated"];
        let why = s(t, "/reason");
        if !why.is_empty() {
            format!("{prefix}{why}")
        } else if let Some(signal) = t["signal"].as_i64().filter(|n| *n != 0) {
            format!("{prefix}Signal:{signal}")
        } else {
            format!("{prefix}ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0))
        }
    };
    let inits = v
        .pointer("/status/initContainerStatuses")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let init_specs = v
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        let terminated = c["state"].get("terminated").is_some_and(|t| t.is_object());
        let sidecar = init_specs
            .iter()
            .any(|spec| spec["name"] == c["name"] && spec["restartPolicy"] == "Always");
        let waiting = s(c, "/state/waiting/reason");
        if terminated && c["state"]["terminated"]["exitCode"].as_i64() == Some(0) {
            continue;
        }
        if sidecar && c["started"] == true {
            continue;
        }
        reason = if terminated {
            ended(c, "Init:")
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", init_specs.len().max(inits.len()))
        };
        initializing = true;
        break;
    }
    let initialized = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Initialized" && c["status"] == "True")
        });
    if !initializing || initialized {
        let mut running = false;
        let statuses = v
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for c in statuses.iter().rev() {
            let waiting = s(c, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting;
            } else if c["state"].get("terminated").is_some_and(|t| t.is_object()) {
                reason = ended(c, "");
            } else if c["ready"] == true && c["state"].get("running").is_some() {
                running = true;
            }
        }
        // A pod with a container still running is not Completed.
        if reason == "Completed" && running {
            let ready = v
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            reason = if ready { "Running" } else { "NotReady" }.into();
        }
    }
    if v.pointer("/metadata/deletionTimestamp").is_some() {
        if s(v, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    reason
}

fn pod_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    {
        let total = count(v, "/spec/containers");
        let statuses = v
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array);
        let ready = statuses.map_or(0, |cs| cs.iter().filter(|c| c["ready"] == true).count());
        let restarts: i64 = statuses.map_or(0, |cs| {
            cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
        });
        let gates = count(v, "/spec/readinessGates");
        vec![
            name,
            json!(format!("{ready}/{total}")),
            json!(pod_status(v)),
            json!(restarts),
            json!(created),
            json!(or_none(s(v, "/status/podIP"))),
            json!(or_none(s(v, "/spec/nodeName"))),
            json!(or_none(s(v, "/status/nominatedNodeName"))),
            json!(if gates == 0 {
                "<none>".to_string()
            } else {
                format!("0/{gates}")
            }),
        ]
    }
}

fn controller_revision_columns() -> Vec<Column> {
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
fn controller_revision_cells(v: &Value) -> Vec<Value> {
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

fn stateful_set_columns() -> Vec<Column> {
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

fn stateful_set_cells(v: &Value) -> Vec<Value> {
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

fn claim_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col(
            "Status",
            0,
            "phase represents the current phase of PersistentVolumeClaim.",
        ),
        col(
            "Volume",
            0,
            "volumeName is the binding reference to the PersistentVolume backing this claim.",
        ),
        col(
            "Capacity",
            0,
            "capacity represents the actual resources of the underlying volume.",
        ),
        col(
            "Access Modes",
            0,
            "accessModes contains the actual access modes the volume backing the PVC has.",
        ),
        col("StorageClass", 0, "StorageClass of the pvc"),
        col(
            "VolumeAttributesClass",
            0,
            "VolumeAttributesClass of the pvc",
        ),
        col("Age", 0, "The time since the object was created."),
        col(
            "VolumeMode",
            1,
            "volumeMode defines what type of volume is required by the claim.",
        ),
    ]
}

/// kubectl's printer: the capacity only of a bound claim, the access modes short.
fn claim_cells(v: &Value) -> Vec<Value> {
    let phase = if v.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating".to_string()
    } else {
        s(v, "/status/phase")
    };
    let volume = s(v, "/spec/volumeName");
    let capacity = if volume.is_empty() {
        String::new()
    } else {
        s(v, "/status/capacity/storage")
    };
    let modes: Vec<&str> = v
        .pointer("/status/accessModes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| match m.as_str()? {
            "ReadWriteOnce" => Some("RWO"),
            "ReadOnlyMany" => Some("ROX"),
            "ReadWriteMany" => Some("RWX"),
            "ReadWriteOncePod" => Some("RWOP"),
            _ => None,
        })
        .collect();
    let class = v
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str)
        .or_else(|| {
            v.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                .and_then(Value::as_str)
        })
        .unwrap_or("");
    let unset = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("<unset>")
            .to_string()
    };
    vec![
        json!(s(v, "/metadata/name")),
        json!(phase),
        json!(volume),
        json!(capacity),
        json!(modes.join(",")),
        json!(class),
        json!(unset("/spec/volumeAttributesClassName")),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(unset("/spec/volumeMode")),
    ]
}

fn deployment_columns() -> Vec<Column> {
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

fn deployment_cells(v: &Value) -> Vec<Value> {
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
        json!(super::apps::selector_string(v.pointer("/spec/selector"))),
    ]
}

fn daemon_set_columns() -> Vec<Column> {
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

fn daemon_set_cells(v: &Value) -> Vec<Value> {
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
        json!(super::apps::selector_string(v.pointer("/spec/selector"))),
    ]
}

fn pod_disruption_budget_columns() -> Vec<Column> {
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

fn pod_disruption_budget_cells(v: &Value) -> Vec<Value> {
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

fn autoscaler_columns() -> Vec<Column> {
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

fn autoscaler_cells(v: &Value) -> Vec<Value> {
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

fn autoscaler_v1_cells(v: &Value) -> Vec<Value> {
    autoscaler_cells(&super::autoscaling::v1_to_v2(v))
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

fn job_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col("Status", 0, "Status of the job."),
        col(
            "Completions",
            0,
            "The number of pods which reached phase Succeeded.",
        ),
        col("Duration", 0, "Time required to complete the job."),
        col("Age", 0, "The time since the object was created."),
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
        col(
            "Selector",
            1,
            "A label query over pods that should match the pod count.",
        ),
    ]
}

fn has_condition(v: &Value, kind: &str) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

/// kubectl's `printJob`.
fn job_cells(v: &Value) -> Vec<Value> {
    let n = |p: &str| v.pointer(p).and_then(Value::as_i64);
    let succeeded = n("/status/succeeded").unwrap_or(0);
    let completions = match (n("/spec/completions"), n("/spec/parallelism")) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, Some(p)) if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    };
    let stamp = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    let duration = match (stamp("/status/startTime"), stamp("/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => {
            human_duration(jiff::Timestamp::now().as_second() - start.as_second())
        }
        (Some(start), Some(end)) => human_duration(end.as_second() - start.as_second()),
    };
    let status = if has_condition(v, "Complete") {
        "Complete"
    } else if has_condition(v, "Failed") {
        "Failed"
    } else if v.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has_condition(v, "Suspended") {
        "Suspended"
    } else if has_condition(v, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(v, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let join = |f: &str| container_fields(v, "/spec/template/spec/containers", f);
    vec![
        json!(s(v, "/metadata/name")),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
        json!(super::apps::selector_string(v.pointer("/spec/selector"))),
    ]
}

fn cron_job_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col(
            "Schedule",
            0,
            "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
        ),
        col(
            "Timezone",
            0,
            "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
        ),
        Column {
            kind: std::borrow::Cow::Borrowed("boolean"),
            ..col(
                "Suspend",
                0,
                "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
            )
        },
        Column {
            kind: std::borrow::Cow::Borrowed("integer"),
            ..col("Active", 0, "A list of pointers to currently running jobs.")
        },
        col(
            "Last Schedule",
            0,
            "Information when was the last time the job was successfully scheduled.",
        ),
        col("Age", 0, "The time since the object was created."),
        col("Containers", 1, "Names of each container in the template."),
        col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
        col(
            "Selector",
            1,
            "A label query over pods that should match the pod count.",
        ),
    ]
}

/// kubectl's `printCronJob`.
fn cron_job_cells(v: &Value) -> Vec<Value> {
    let last = match v
        .pointer("/status/lastScheduleTime")
        .and_then(Value::as_str)
    {
        Some(_) => age(v, "/status/lastScheduleTime"),
        None => "<none>".into(),
    };
    let join = |f: &str| container_fields(v, "/spec/jobTemplate/spec/template/spec/containers", f);
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/spec/schedule")),
        json!(or_none(s(v, "/spec/timeZone"))),
        // kubectl's printBoolPtr.
        json!(
            if v.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
                "True"
            } else {
                "False"
            }
        ),
        json!(count(v, "/status/active")),
        json!(last),
        json!(age(v, "/metadata/creationTimestamp")),
        json!(join("name")),
        json!(join("image")),
        json!(super::apps::selector_string(
            v.pointer("/spec/jobTemplate/spec/selector")
        )),
    ]
}

fn replica_set_cells(v: &Value) -> Vec<Value> {
    let mut cells = replication_controller_cells(v);
    if let Some(selector) = cells.last_mut() {
        *selector = json!(super::apps::selector_string(v.pointer("/spec/selector")));
    }
    cells
}

fn replication_controller_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    {
        let join = |f: &str| container_fields(v, "/spec/template/spec/containers", f);
        let selector = pairs(v, "/spec/selector");
        vec![
            name,
            json!(
                v.pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            ),
            json!(
                v.pointer("/status/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            ),
            json!(
                v.pointer("/status/readyReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            ),
            json!(created),
            json!(join("name")),
            json!(join("image")),
            json!(selector),
        ]
    }
}

fn namespace_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![name, json!(s(v, "/status/phase")), json!(created)]
}

fn node_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    {
        let ready = v
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .map(|c| match c["status"].as_str() {
                Some("True") => "Ready",
                Some("False") => "NotReady",
                _ => "Unknown",
            })
            .unwrap_or("Unknown");
        let mut status = ready.to_string();
        if v.pointer("/spec/unschedulable") == Some(&json!(true)) {
            status.push_str(",SchedulingDisabled");
        }
        let roles: Vec<String> = v
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|l| {
                l.keys()
                    .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let address = |t: &str| {
            v.pointer("/status/addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|x| x["type"] == t))
                .and_then(|x| x["address"].as_str())
                .unwrap_or("<none>")
                .to_string()
        };
        vec![
            name,
            json!(status),
            json!(or_none(roles.join(","))),
            json!(created),
            json!(s(v, "/status/nodeInfo/kubeletVersion")),
            json!(address("InternalIP")),
            json!(address("ExternalIP")),
            json!(or_none(s(v, "/status/nodeInfo/osImage"))),
            json!(or_none(s(v, "/status/nodeInfo/kernelVersion"))),
            json!(or_none(s(v, "/status/nodeInfo/containerRuntimeVersion"))),
        ]
    }
}

fn event_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    {
        let last = [
            "/lastTimestamp",
            "/eventTime",
            "/firstTimestamp",
            "/metadata/creationTimestamp",
        ]
        .iter()
        .find(|p| {
            v.pointer(p)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
        })
        .map_or_else(|| "<unknown>".to_string(), |p| age(v, p));
        let object = format!(
            "{}/{}",
            s(v, "/involvedObject/kind").to_lowercase(),
            s(v, "/involvedObject/name")
        );
        let source = {
            let c = s(v, "/source/component");
            let h = s(v, "/source/host");
            if h.is_empty() { c } else { format!("{c}, {h}") }
        };
        vec![
            json!(last),
            json!(s(v, "/type")),
            json!(s(v, "/reason")),
            json!(object),
            json!(s(v, "/message")),
            json!(s(v, "/involvedObject/fieldPath")),
            json!(source),
            json!(age(v, "/firstTimestamp")),
            json!(v.pointer("/count").and_then(Value::as_i64).unwrap_or(1)),
            name,
        ]
    }
}

fn config_map_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![
        name,
        json!(count(v, "/data") + count(v, "/binaryData")),
        json!(created),
    ]
}

fn secret_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![
        name,
        json!(s(v, "/type")),
        json!(count(v, "/data")),
        json!(created),
    ]
}

fn service_account_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![name, json!(count(v, "/secrets")), json!(created)]
}

fn service_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    {
        let mut row = vec![name];
        row.extend(super::service::cells(v).into_iter().map(Value::String));
        row.insert(5, json!(created));
        row
    }
}

fn lease_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![name, json!(s(v, "/spec/holderIdentity")), json!(created)]
}

fn runtime_class_cells(v: &Value) -> Vec<Value> {
    let created = age(v, "/metadata/creationTimestamp");
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/handler")),
        json!(created),
    ]
}

fn deployment_config_cells(v: &Value) -> Vec<Value> {
    super::deploymentconfig::rules::cells(v)
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
    fn pod_status_reads_init_containers_and_exits_as_kubectl_does() {
        let status = |status: Value| {
            let pod = json!({"spec": {"initContainers": [{"name": "i1"}, {"name": "i2"}],
                "containers": [{"name": "a"}]}, "status": status});
            pod_status(&pod)
        };
        let done = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        assert_eq!(
            status(json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "state": done}, {"name": "i2", "state": {"running": {}}}]})),
            "Init:1/2"
        );
        assert_eq!(
            status(json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})),
            "Init:CrashLoopBackOff"
        );
        assert_eq!(
            status(json!({"phase": "Failed", "initContainerStatuses": [
                {"name": "i1", "state": {"terminated": {"exitCode": 3}}}]})),
            "Init:ExitCode:3"
        );
        assert_eq!(
            status(json!({"phase": "Running", "initContainerStatuses": [
                {"name": "i1", "state": done}, {"name": "i2", "state": done}],
                "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]})),
            "Signal:9"
        );
        let mut gone = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}});
        assert_eq!(pod_status(&gone), "Terminating");
        gone["status"]["phase"] = json!("Succeeded");
        assert_eq!(pod_status(&gone), "Succeeded");
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
