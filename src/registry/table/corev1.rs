//! Table printers of the core (v1) kinds: pods, pod templates, replication controllers,
//! namespaces, nodes, events, config maps, secrets, service accounts, services, claims.

use serde_json::{Value, json};

use super::{Column, age, col, container_fields, count, or_none, s};

pub(super) fn events_v1_event_cells(v: &Value) -> Vec<Value> {
    event_cells(&crate::registry::convert::event_to_stored(v))
}

pub(super) fn pod_columns() -> Vec<Column> {
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

pub(super) fn replication_controller_columns() -> Vec<Column> {
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

pub(super) fn namespace_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Status", 0, "The phase of the namespace."), age]
}

pub(super) fn node_columns() -> Vec<Column> {
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

pub(super) fn event_columns() -> Vec<Column> {
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

pub(super) fn pod_template_columns() -> Vec<Column> {
    vec![
        col("Template", 0, "Name must be unique within a namespace."),
        col("Containers", 0, "Names of the containers of the template."),
        col("Images", 0, "Images of the containers of the template."),
        col("Pod Labels", 0, "The labels of the template's pods."),
    ]
}

pub(super) fn pod_template_cells(v: &Value) -> Vec<Value> {
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

pub(super) fn config_map_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Data", 0, "Number of entries."), age]
}

pub(super) fn secret_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![
        name,
        col("Type", 0, "The type of the secret."),
        col("Data", 0, "Number of entries."),
        age,
    ]
}

pub(super) fn service_account_columns() -> Vec<Column> {
    let name = col("Name", 0, "Name must be unique within a namespace.");
    let age = col("Age", 0, "The time since the object was created.");
    vec![name, col("Secrets", 0, "Number of secrets."), age]
}

pub(super) fn service_columns() -> Vec<Column> {
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

pub(super) fn pod_cells(v: &Value) -> Vec<Value> {
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

pub(super) fn claim_columns() -> Vec<Column> {
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
pub(super) fn claim_cells(v: &Value) -> Vec<Value> {
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

pub(super) fn replication_controller_cells(v: &Value) -> Vec<Value> {
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

pub(super) fn namespace_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![name, json!(s(v, "/status/phase")), json!(created)]
}

pub(super) fn node_cells(v: &Value) -> Vec<Value> {
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

pub(super) fn event_cells(v: &Value) -> Vec<Value> {
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

pub(super) fn config_map_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![
        name,
        json!(count(v, "/data") + count(v, "/binaryData")),
        json!(created),
    ]
}

pub(super) fn secret_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![
        name,
        json!(s(v, "/type")),
        json!(count(v, "/data")),
        json!(created),
    ]
}

pub(super) fn service_account_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    vec![name, json!(count(v, "/secrets")), json!(created)]
}

pub(super) fn service_cells(v: &Value) -> Vec<Value> {
    let name = json!(s(v, "/metadata/name"));
    let created = age(v, "/metadata/creationTimestamp");
    {
        let mut row = vec![name];
        row.extend(
            crate::registry::service::cells(v)
                .into_iter()
                .map(Value::String),
        );
        row.insert(5, json!(created));
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
