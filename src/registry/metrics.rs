//! `metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics, served as metrics-server serves
//! them: made when read from the [`Board`] the node agents record into (nothing is
//! stored), with the labels of the Node or Pod they describe, so label selectors and
//! `kubectl top` work as upstream. Both kinds are only read (`get`, `list`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::Registry;
use super::catalog::{Kind, of};
use super::strategy::Strategy;
use super::table::{Column, Printer};
use crate::types::metrics::{Board, Rate};

/// The API version both kinds are served at.
pub const API_VERSION: &str = "metrics.k8s.io/v1beta1";
const PREFIX: &str = "io.k8s.metrics.pkg.apis.metrics.v1beta1.";

/// CPU in nanocores as a canonical decimal quantity (`250m`, `1`, `1234567n`).
pub fn cpu_quantity(nanocores: u64) -> String {
    match nanocores {
        0 => "0".into(),
        n if n % 1_000_000_000 == 0 => format!("{}", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}m", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}u", n / 1_000),
        n => format!("{n}n"),
    }
}

/// Bytes as a canonical binary quantity (`12Mi`, `2748180Ki`, `1000`).
pub fn memory_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut value, mut suffix) = (bytes, "");
    for s in SUFFIXES {
        if value == 0 || value % 1024 != 0 {
            break;
        }
        value /= 1024;
        suffix = s;
    }
    format!("{value}{suffix}")
}

/// A duration as Go's `time.Duration` prints it (`15.002s`, `1m0.5s`, `500ms`).
pub fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, rest) = (ms / 3_600_000, ms / 60_000 % 60, ms % 60_000);
    let secs = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let frac = format!("{:03}", rest % 1000);
        format!("{}.{}s", rest / 1000, frac.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

fn usage(rate: &Rate) -> Value {
    json!({
        "cpu": cpu_quantity(rate.cpu_nanocores),
        "memory": memory_quantity(rate.memory_bytes),
    })
}

fn timestamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The metadata of a stored object (its labels and uid), if it exists.
fn stored_meta(reg: &Registry, kind: Kind, namespace: Option<&str>, name: &str) -> Option<Value> {
    let res = of(kind);
    let rec = reg.store().get(&res.key(namespace, name))?;
    #[derive(serde::Deserialize)]
    struct Only {
        metadata: Value,
    }
    serde_json::from_slice::<Only>(&rec.value)
        .ok()
        .map(|o| o.metadata)
}

fn labels_of(meta: &Value) -> Value {
    meta.get("labels")
        .filter(|l| l.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// What the board holds of `board`'s nodes, as NodeMetrics objects.
fn node_objects(reg: &Registry, board: &Board) -> Vec<Value> {
    let now = crate::types::now();
    board
        .nodes()
        .into_iter()
        .filter_map(|n| {
            let meta = stored_meta(reg, Kind::Node, None, &n.name)?;
            Some(json!({
                "kind": "NodeMetrics",
                "apiVersion": API_VERSION,
                "metadata": {
                    "name": n.name,
                    "creationTimestamp": now,
                    "labels": labels_of(&meta),
                },
                "timestamp": timestamp(n.timestamp),
                "window": go_duration(n.window_ms),
                "usage": usage(&n.usage),
            }))
        })
        .collect()
}

fn pod_objects(reg: &Registry, board: &Board, namespace: Option<&str>) -> Vec<Value> {
    let now = crate::types::now();
    board
        .pods(namespace)
        .into_iter()
        .filter_map(|p| {
            // The pod as the API has it now: gone or made again under its name, it shows
            // no more (a static pod shows under its mirror pod).
            let meta = stored_meta(reg, Kind::Pod, Some(&p.namespace), &p.name)?;
            let mirror = meta
                .pointer("/annotations/kubernetes.io~1config.mirror")
                .is_some();
            if !mirror && meta.get("uid").and_then(Value::as_str) != Some(p.uid.as_str()) {
                return None;
            }
            let containers: Vec<Value> = p
                .containers
                .iter()
                .map(|(name, rate)| json!({"name": name, "usage": usage(rate)}))
                .collect();
            Some(json!({
                "kind": "PodMetrics",
                "apiVersion": API_VERSION,
                "metadata": {
                    "name": p.name,
                    "namespace": p.namespace,
                    "creationTimestamp": now,
                    "labels": labels_of(&meta),
                },
                "timestamp": timestamp(p.timestamp),
                "window": go_duration(p.window_ms),
                "containers": containers,
            }))
        })
        .collect()
}

/// NodeMetrics: each node's usage over its last window.
pub struct NodeMetrics;

impl Strategy for NodeMetrics {
    fn live(&self, reg: &Registry, _namespace: Option<&str>) -> Option<Vec<Value>> {
        Some(node_objects(reg, reg.metrics()))
    }
}

/// PodMetrics: each pod's usage over its last window, per container.
pub struct PodMetrics;

impl Strategy for PodMetrics {
    fn live(&self, reg: &Registry, namespace: Option<&str>) -> Option<Vec<Value>> {
        Some(pod_objects(reg, reg.metrics(), namespace))
    }
}

/// The Table of both kinds: name, CPU, memory and window (a pod's usage summed over its
/// containers).
pub struct MetricsTable;

impl Printer for MetricsTable {
    fn columns(&self) -> Vec<Column> {
        let col = |name: &'static str, description: &'static str| Column {
            name: name.into(),
            kind: "string".into(),
            priority: 0,
            description: description.into(),
        };
        vec![
            col("Name", "Name must be unique within a namespace."),
            col("CPU", "The CPU used, in cores."),
            col("Memory", "The memory working set, in bytes."),
            col("Window", "The window over which usage was measured."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
        let usages: Vec<&Value> = match obj.get("containers").and_then(Value::as_array) {
            Some(containers) => containers.iter().map(|c| &c["usage"]).collect(),
            None => vec![&obj["usage"]],
        };
        let sum = |key: &str, of: fn(crate::types::quantity::Quantity) -> i128| -> i128 {
            usages
                .iter()
                .filter_map(|u| u[key].as_str())
                .filter_map(|q| q.parse::<crate::types::quantity::Quantity>().ok())
                .map(of)
                .sum()
        };
        let cpu = format!("{}m", sum("cpu", |q| q.milli()));
        let memory = memory_quantity(sum("memory", |q| q.value()).max(0) as u64);
        vec![
            json!(text("/metadata/name")),
            json!(cpu),
            json!(memory),
            json!(text("/window")),
        ]
    }
}

/// The schema names.
pub fn node_schema_name() -> String {
    format!("{PREFIX}NodeMetrics")
}

pub fn pod_schema_name() -> String {
    format!("{PREFIX}PodMetrics")
}

/// The hand-written schemas (no Rust type of them exists in k8s-openapi).
pub fn definitions() -> Map<String, Value> {
    let meta = super::schema::reference("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
    let quantity = super::schema::reference("io.k8s.apimachinery.pkg.api.resource.Quantity");
    let string = |d: &str| json!({"type": "string", "description": d});
    let resource_list = json!({
        "type": "object",
        "description": "The memory usage is the memory working set.",
        "additionalProperties": quantity,
    });
    let time = json!({"type": "string", "format": "date-time", "description": "The following fields define time interval from which metrics were collected from the interval [Timestamp-Window, Timestamp]."});
    let window = string("Duration of the interval metrics were collected over.");
    let mut defs = BTreeMap::new();
    defs.insert(
        "NodeMetrics",
        json!({
            "description": "NodeMetrics sets resource usage metrics of a node.",
            "type": "object",
            "required": ["timestamp", "window", "usage"],
            "properties": {
                "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
                "kind": string("Kind is a string value representing the REST resource this object represents."),
                "metadata": meta,
                "timestamp": time,
                "window": window,
                "usage": resource_list,
            },
        }),
    );
    defs.insert(
        "ContainerMetrics",
        json!({
            "description": "ContainerMetrics sets resource usage metrics of a container.",
            "type": "object",
            "required": ["name", "usage"],
            "properties": {
                "name": string("Container name corresponding to the one from pod.spec.containers."),
                "usage": resource_list,
            },
        }),
    );
    defs.insert(
        "PodMetrics",
        json!({
            "description": "PodMetrics sets resource usage metrics of a pod.",
            "type": "object",
            "required": ["timestamp", "window", "containers"],
            "properties": {
                "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
                "kind": string("Kind is a string value representing the REST resource this object represents."),
                "metadata": meta,
                "timestamp": time,
                "window": window,
                "containers": {
                    "type": "array",
                    "description": "Metrics for all containers are collected within the same time window.",
                    "items": super::schema::reference(&format!("{PREFIX}ContainerMetrics")),
                    "x-kubernetes-list-type": "atomic",
                },
            },
        }),
    );
    defs.into_iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), v))
        .collect()
}

/// What the schemas refer to among the generated ones.
pub fn add_referenced(generator: &mut schemars::SchemaGenerator) {
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::api::resource::Quantity>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_durations_print_as_upstream() {
        assert_eq!(cpu_quantity(329_087_452), "329087452n");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(5_000), "5u");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(memory_quantity(2_748_180 * 1024), "2748180Ki");
        assert_eq!(memory_quantity(12 << 20), "12Mi");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(go_duration(20_064), "20.064s");
        assert_eq!(go_duration(15_000), "15s");
        assert_eq!(go_duration(15_500), "15.5s");
        assert_eq!(go_duration(60_500), "1m0.5s");
        assert_eq!(go_duration(500), "500ms");
        assert_eq!(go_duration(3_725_000), "1h2m5s");
    }

    #[test]
    fn the_table_sums_a_pods_containers() {
        let pod = json!({"metadata": {"name": "web"}, "window": "15s", "containers": [
            {"name": "a", "usage": {"cpu": "250m", "memory": "1Mi"}},
            {"name": "b", "usage": {"cpu": "500000000n", "memory": "1024Ki"}},
        ]});
        assert_eq!(
            MetricsTable.cells(&pod),
            vec![json!("web"), json!("750m"), json!("2Mi"), json!("15s")]
        );
        let node = json!({"metadata": {"name": "n1"}, "window": "15.5s",
            "usage": {"cpu": "1199894300n", "memory": "1426684Ki"}});
        assert_eq!(
            MetricsTable.cells(&node),
            vec![
                json!("n1"),
                json!("1200m"),
                json!("1426684Ki"),
                json!("15.5s")
            ]
        );
    }

    #[test]
    fn every_reference_names_a_schema() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        add_referenced(&mut generator);
        let mut all = generator.take_definitions(true);
        all.extend(definitions());
        let defs = Value::Object(definitions());
        let mut out = Vec::new();
        crate::registry::schema::references(&defs, &mut out);
        for r in out {
            assert!(all.contains_key(r), "{r} is not defined");
        }
    }
}
