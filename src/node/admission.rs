//! Admission on the node (spec §13): before a newly bound pod starts, whether this node
//! can take it beside the pods it has admitted already — its OS, node name, host ports,
//! node selector and affinity, resources and NoExecute taints, checked in kubelet's
//! order. A rejected pod never starts; it ends `Failed` with the reason and message here.
//! Pure functions; the scheduler's fit rules are reused for what they share.

use crate::types::json::str_at;
use std::collections::HashSet;

use serde_json::Value;

use crate::types::fit::{self, Needs, Resources};
use crate::types::taints;

/// Why the node turned a pod away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `OutOfmemory`, `NodeAffinity`, … (the event's reason and the pod's).
    pub reason: String,
    /// The event's message; the pod's is `Pod was rejected: ` and this.
    pub message: String,
}

impl Rejection {
    fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Rejection {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The status of a rejected pod.
    pub fn status(&self) -> Value {
        serde_json::json!({
            "phase": "Failed",
            "reason": self.reason,
            "message": format!("Pod was rejected: {}", self.message),
        })
    }
}

/// The host ports a pod takes: (protocol, host IP, port).
fn host_ports(pod: &Value) -> Vec<(String, String, i64)> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers"] {
        for c in pod["spec"][list].as_array().into_iter().flatten() {
            for p in c["ports"].as_array().into_iter().flatten() {
                let Some(port) = p["hostPort"].as_i64().filter(|p| *p > 0) else {
                    continue;
                };
                let protocol = p["protocol"].as_str().unwrap_or("TCP").to_string();
                let ip = match p["hostIP"].as_str().unwrap_or("") {
                    "" => "0.0.0.0".to_string(),
                    ip => ip.to_string(),
                };
                out.push((protocol, ip, port));
            }
        }
    }
    out
}

/// Whether two host ports clash: same protocol and port, and the same address or a
/// wildcard on either side.
fn clash(a: &(String, String, i64), b: &(String, String, i64)) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1 == b.1 || a.1 == "0.0.0.0" || b.1 == "0.0.0.0")
}

/// Whether `node` takes `pod` beside the pods it has `admitted`. `node` is the Node
/// object with this machine's allocatable.
pub fn admit(pod: &Value, node: &Value, admitted: &[&Value]) -> Result<(), Rejection> {
    let os = str_at(pod, "/spec/os/name");
    if !os.is_empty() && os != "linux" {
        return Err(Rejection::new(
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS",
        ));
    }
    let needs = Needs::of(pod).map_err(|e| Rejection::new("UnexpectedAdmissionError", e))?;
    let mut used = Resources::default();
    for other in admitted {
        // What the API accepted and the node admitted parses; anything else counts as one pod.
        used.add(&fit::pod_requests(other).unwrap_or_else(|_| Resources::one_pod()));
    }
    let allocatable = fit::allocatable(node);
    for resource in needs.requests.names() {
        let want = needs.requests.get(resource);
        if want <= 0 {
            continue;
        }
        let (used, capacity) = (used.get(resource), allocatable.get(resource));
        if want > capacity - used {
            return Err(Rejection::new(
                format!("OutOf{resource}"),
                format!(
                    "Node didn't have enough resource: {resource}, requested: {want}, used: {used}, capacity: {capacity}"
                ),
            ));
        }
    }
    let node_name = str_at(node, "/metadata/name");
    let bound = str_at(pod, "/spec/nodeName");
    if !bound.is_empty() && bound != node_name {
        return Err(Rejection::new("NodeName", "Predicate NodeName failed"));
    }
    let taken: HashSet<(String, String, i64)> =
        admitted.iter().flat_map(|p| host_ports(p)).collect();
    if host_ports(pod)
        .iter()
        .any(|mine| taken.iter().any(|t| clash(mine, t)))
    {
        return Err(Rejection::new("NodePorts", "Predicate NodePorts failed"));
    }
    if !fit::affinity_matches(&needs, node) {
        return Err(Rejection::new(
            "NodeAffinity",
            "Predicate NodeAffinity failed",
        ));
    }
    // Only NoExecute: a NoSchedule taint keeps the scheduler away, and a pod bound here
    // directly chose to ignore it (as kubelet admits it).
    if fit::untolerated_taint(&needs, node, &[taints::NO_EXECUTE]).is_some() {
        return Err(Rejection::new(
            "TaintToleration",
            "Predicate TaintToleration failed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node() -> Value {
        json!({
            "metadata": {"name": "n1", "labels": {"disk": "ssd"}},
            "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "3"}},
        })
    }

    fn pod(spec: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "x"}],
        }});
        for (k, v) in spec.as_object().unwrap() {
            p["spec"][k] = v.clone();
        }
        p
    }

    fn asking(requests: Value) -> Value {
        pod(
            json!({"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}),
        )
    }

    fn reason(r: Result<(), Rejection>) -> String {
        r.err().map(|r| r.reason).unwrap_or_default()
    }

    #[test]
    fn resources_count_what_admitted_pods_request() {
        let n = node();
        let half = asking(json!({"cpu": "1", "memory": "512Mi"}));
        assert_eq!(admit(&half, &n, &[]), Ok(()));
        assert_eq!(admit(&half, &n, &[&half]), Ok(()), "exactly full fits");
        let e = admit(&half, &n, &[&half, &half]).unwrap_err();
        assert_eq!(e.reason, "OutOfcpu");
        assert_eq!(
            e.message,
            "Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000"
        );
        let big = asking(json!({"memory": "2Gi"}));
        let e = admit(&big, &n, &[]).unwrap_err();
        assert_eq!(e.reason, "OutOfmemory");
        assert_eq!(
            e.message,
            "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"
        );
        assert_eq!(
            e.status()["message"],
            format!("Pod was rejected: {}", e.message)
        );
        let small = pod(json!({}));
        let e = admit(&small, &n, &[&small, &small, &small]).unwrap_err();
        assert_eq!(
            (e.reason.as_str(), e.message.as_str()),
            (
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
            )
        );
        let gpu = asking(json!({"example.com/gpu": "1"}));
        assert_eq!(reason(admit(&gpu, &n, &[])), "OutOfexample.com/gpu");
        let bad = asking(json!({"cpu": "lots"}));
        assert_eq!(reason(admit(&bad, &n, &[])), "UnexpectedAdmissionError");
    }

    #[test]
    fn placement_rules_are_checked_in_order() {
        let n = node();
        let elsewhere = pod(json!({"nodeName": "n2"}));
        assert_eq!(reason(admit(&elsewhere, &n, &[])), "NodeName");
        let selective = pod(json!({"nodeSelector": {"disk": "hdd"}}));
        let e = admit(&selective, &n, &[]).unwrap_err();
        assert_eq!(
            (e.reason.as_str(), e.message.as_str()),
            ("NodeAffinity", "Predicate NodeAffinity failed")
        );
        assert_eq!(
            admit(&pod(json!({"nodeSelector": {"disk": "ssd"}})), &n, &[]),
            Ok(())
        );
        let windows = pod(json!({"os": {"name": "windows"}}));
        assert_eq!(reason(admit(&windows, &n, &[])), "PodOSNotSupported");
    }

    #[test]
    fn host_ports_clash_on_the_same_protocol_and_address() {
        let n = node();
        let web = |port: i64, ip: &str, protocol: &str| {
            pod(json!({"containers": [{"name": "c", "image": "x", "ports": [
                {"containerPort": 80, "hostPort": port, "hostIP": ip, "protocol": protocol}
            ]}]}))
        };
        let a = web(8080, "", "TCP");
        assert_eq!(reason(admit(&a, &n, &[&a])), "NodePorts");
        assert_eq!(
            reason(admit(&web(8080, "127.0.0.1", "TCP"), &n, &[&a])),
            "NodePorts",
            "the wildcard takes every address"
        );
        assert_eq!(admit(&web(8080, "", "UDP"), &n, &[&a]), Ok(()));
        assert_eq!(admit(&web(8081, "", "TCP"), &n, &[&a]), Ok(()));
        let lo = web(9000, "127.0.0.1", "TCP");
        assert_eq!(admit(&web(9000, "127.0.0.2", "TCP"), &n, &[&lo]), Ok(()));
    }

    #[test]
    fn only_no_execute_taints_turn_a_bound_pod_away() {
        let mut n = node();
        n["spec"] = json!({"taints": [{"key": "dedicated", "effect": "NoSchedule"}]});
        assert_eq!(admit(&pod(json!({})), &n, &[]), Ok(()));
        n["spec"]["taints"] = json!([{"key": "evict", "effect": "NoExecute"}]);
        assert_eq!(reason(admit(&pod(json!({})), &n, &[])), "TaintToleration");
        let tolerant = pod(json!({"tolerations": [{"key": "evict", "operator": "Exists"}]}));
        assert_eq!(admit(&tolerant, &n, &[]), Ok(()));
    }
}
