//! The cluster's own kinds: Nodes (with their pods' requests and limits) and Namespaces
//! (with their ResourceQuotas and LimitRanges).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::resources::{Amount, pod_requests_and_limits, resource_list, resource_texts};
use super::{
    Clock, Out, annotations_multiline, describe_events, flag, labels_multiline_simple, list,
    opt_text, plain, taints_multiline, text,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::map_at;

// ---------------------------------------------------------------------------------------
// Nodes

const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
const NODE_ROLE_LABEL: &str = "kubernetes.io/role";

/// `kubectl describe node`. `lease` is the node's Lease in `kube-node-lease`, `pods` its
/// pods (terminated ones are left out here), `events` those about the node.
pub fn node(
    node: &Value,
    lease: Option<&Value>,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    let name = text(node, "/metadata/name");
    out.w(0, &format!("Name:\t{name}\n"));
    let labels = map_at(node, "/metadata/labels");
    let roles: BTreeSet<String> = labels
        .iter()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix(NODE_ROLE_PREFIX) {
                (!role.is_empty()).then(|| role.to_string())
            } else if k == NODE_ROLE_LABEL && !v.is_empty() {
                Some(v.clone())
            } else {
                None
            }
        })
        .collect();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    out.w(0, &format!("Roles:\t{roles}\n"));
    labels_multiline_simple(&mut out, "Labels", &labels);
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(node, "/metadata/annotations"),
    );
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(node, "/metadata/creationTimestamp"))
        ),
    );
    taints_multiline(&mut out, "Taints", list(node, "/spec/taints"));
    out.w(
        0,
        &format!("Unschedulable:\t{}\n", flag(node, "/spec/unschedulable")),
    );
    out.w(0, "Lease:\n");
    let lease_field = |pointer: &str, time: bool| match lease.and_then(|l| opt_text(l, pointer)) {
        None => "<unset>".to_string(),
        Some(v) if time => clock.rfc1123z(Some(v)),
        Some(v) => v.to_string(),
    };
    out.w(
        1,
        &format!(
            "HolderIdentity:\t{}\n",
            lease_field("/spec/holderIdentity", false)
        ),
    );
    out.w(
        1,
        &format!("AcquireTime:\t{}\n", lease_field("/spec/acquireTime", true)),
    );
    out.w(
        1,
        &format!("RenewTime:\t{}\n", lease_field("/spec/renewTime", true)),
    );
    let conditions = list(node, "/status/conditions");
    if !conditions.is_empty() {
        out.w(
            0,
            "Conditions:\n  Type\tStatus\tLastHeartbeatTime\tLastTransitionTime\tReason\tMessage\n",
        );
        out.w(
            1,
            "----\t------\t-----------------\t------------------\t------\t-------\n",
        );
        for c in conditions {
            out.w(
                1,
                &format!(
                    "{} \t{} \t{} \t{} \t{} \t{}\n",
                    text(c, "/type"),
                    text(c, "/status"),
                    clock.rfc1123z(opt_text(c, "/lastHeartbeatTime")),
                    clock.rfc1123z(opt_text(c, "/lastTransitionTime")),
                    text(c, "/reason"),
                    text(c, "/message"),
                ),
            );
        }
    }
    out.w(0, "Addresses:\n");
    for a in list(node, "/status/addresses") {
        out.w(
            1,
            &format!("{}:\t{}\n", text(a, "/type"), text(a, "/address")),
        );
    }
    for (pointer, title) in [
        ("/status/capacity", "Capacity"),
        ("/status/allocatable", "Allocatable"),
    ] {
        let resources = resource_texts(node, pointer);
        if !resources.is_empty() {
            out.w(0, &format!("{title}:\n"));
            for (r, q) in resources {
                out.w(0, &format!("  {r}:\t{q}\n"));
            }
        }
    }
    out.w(0, "System Info:\n");
    for (field, title) in [
        ("machineID", "Machine ID"),
        ("systemUUID", "System UUID"),
        ("bootID", "Boot ID"),
        ("kernelVersion", "Kernel Version"),
        ("osImage", "OS Image"),
        ("operatingSystem", "Operating System"),
        ("architecture", "Architecture"),
        ("containerRuntimeVersion", "Container Runtime Version"),
        ("kubeletVersion", "Kubelet Version"),
        ("kubeProxyVersion", "Kube-Proxy Version"),
    ] {
        let value = text(node, &format!("/status/nodeInfo/{field}"));
        // kubectl 1.37 leaves out the deprecated kube-proxy version when it is empty.
        if field == "kubeProxyVersion" && value.is_empty() {
            continue;
        }
        out.w(0, &format!("  {title}:\t{value}\n"));
    }
    let cidr = text(node, "/spec/podCIDR");
    if !cidr.is_empty() {
        out.w(0, &format!("PodCIDR:\t{cidr}\n"));
    }
    let cidrs: Vec<String> = list(node, "/spec/podCIDRs").iter().map(plain).collect();
    if !cidrs.is_empty() {
        out.w(0, &format!("PodCIDRs:\t{}\n", cidrs.join(",")));
    }
    let provider = text(node, "/spec/providerID");
    if !provider.is_empty() {
        out.w(0, &format!("ProviderID:\t{provider}\n"));
    }
    let running: Vec<&Value> = pods
        .iter()
        .filter(|p| {
            text(p, "/spec/nodeName") == name
                && !matches!(text(p, "/status/phase"), "Succeeded" | "Failed")
        })
        .collect();
    describe_node_resource(&mut out, node, &running, clock);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// Integer percentage as kubectl computes it (`int64(float64(a) / float64(b) * 100)`).
fn percent(part: i128, whole: i128) -> i64 {
    if whole == 0 {
        return 0;
    }
    (part as f64 / whole as f64 * 100.0) as i64
}

/// `describeNodeResource`: the non-terminated pods table and the allocated totals.
fn describe_node_resource(out: &mut Out, node: &Value, pods: &[&Value], clock: &Clock) {
    out.w(
        0,
        &format!("Non-terminated Pods:\t({} in total)\n", pods.len()),
    );
    out.w(
        1,
        "Namespace\tName\t\tCPU Requests\tCPU Limits\tMemory Requests\tMemory Limits\tAge\n",
    );
    out.w(
        1,
        "---------\t----\t\t------------\t----------\t---------------\t-------------\t---\n",
    );
    let mut allocatable = resource_list(node, "/status/allocatable");
    if allocatable.is_empty() {
        allocatable = resource_list(node, "/status/capacity");
    }
    let alloc = |r: &str| allocatable.get(r).copied().unwrap_or(Amount::ZERO);
    let (cpu_alloc, mem_alloc) = (alloc("cpu").milli(), alloc("memory").units());
    let get = |m: &BTreeMap<String, Amount>, r: &str| m.get(r).copied().unwrap_or(Amount::ZERO);
    let mut total_reqs: BTreeMap<String, Amount> = BTreeMap::new();
    let mut total_limits: BTreeMap<String, Amount> = BTreeMap::new();
    for pod in pods {
        let (reqs, limits) = pod_requests_and_limits(pod);
        let (cpu_req, cpu_lim) = (get(&reqs, "cpu"), get(&limits, "cpu"));
        let (mem_req, mem_lim) = (get(&reqs, "memory"), get(&limits, "memory"));
        out.w(
            1,
            &format!(
                "{}\t{}\t\t{cpu_req} ({}%)\t{cpu_lim} ({}%)\t{mem_req} ({}%)\t{mem_lim} ({}%)\t{}\n",
                text(pod, "/metadata/namespace"),
                text(pod, "/metadata/name"),
                percent(cpu_req.milli(), cpu_alloc),
                percent(cpu_lim.milli(), cpu_alloc),
                percent(mem_req.units(), mem_alloc),
                percent(mem_lim.units(), mem_alloc),
                clock.since(opt_text(pod, "/metadata/creationTimestamp")),
            ),
        );
        for (total, part) in [(&mut total_reqs, reqs), (&mut total_limits, limits)] {
            for (r, q) in part {
                let sum = match total.get(&r) {
                    Some(have) => have.add(q),
                    None => q,
                };
                total.insert(r, sum);
            }
        }
    }
    out.w(
        0,
        "Allocated resources:\n  (Total limits may be over 100 percent, i.e., overcommitted.)\n",
    );
    out.w(1, "Resource\tRequests\tLimits\n");
    out.w(1, "--------\t--------\t------\n");
    let row = |out: &mut Out, r: &str, in_milli: bool| {
        let (req, lim) = (get(&total_reqs, r), get(&total_limits, r));
        let (req_n, lim_n, whole) = if in_milli {
            (req.milli(), lim.milli(), alloc(r).milli())
        } else {
            (req.units(), lim.units(), alloc(r).units())
        };
        out.w(
            1,
            &format!(
                "{r}\t{req} ({}%)\t{lim} ({}%)\n",
                percent(req_n, whole),
                percent(lim_n, whole)
            ),
        );
    };
    row(out, "cpu", true);
    row(out, "memory", false);
    row(out, "ephemeral-storage", false);
    let huge_pages: Vec<&String> = allocatable
        .keys()
        .filter(|r| r.starts_with("hugepages-"))
        .collect();
    for r in huge_pages {
        row(out, r, false);
    }
    let extended: Vec<&String> = allocatable
        .keys()
        .filter(|r| {
            !r.starts_with("hugepages-")
                && !matches!(r.as_str(), "cpu" | "memory" | "ephemeral-storage" | "pods")
        })
        .collect();
    for r in extended {
        out.w(
            1,
            &format!("{r}\t{}\t{}\n", get(&total_reqs, r), get(&total_limits, r)),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Namespaces

/// `kubectl describe namespace`. `quotas` and `limit_ranges` are the namespace's
/// ResourceQuotas and LimitRanges, `None` when the server does not serve those types
/// (kubectl then leaves their sections out).
pub fn namespace(
    ns: &Value,
    quotas: Option<&[Value]>,
    limit_ranges: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    out.w(0, &format!("Name:\t{}\n", text(ns, "/metadata/name")));
    labels_multiline_simple(&mut out, "Labels", &map_at(ns, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(ns, "/metadata/annotations"),
    );
    out.w(0, &format!("Status:\t{}\n", text(ns, "/status/phase")));
    let conditions = list(ns, "/status/conditions");
    if !conditions.is_empty() {
        out.w(0, "Conditions:\n");
        out.w(1, "Type\tStatus\tLastTransitionTime\tReason\tMessage\n");
        out.w(1, "----\t------\t------------------\t------\t-------\n");
        for c in conditions {
            out.w(
                1,
                &format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    text(c, "/type"),
                    text(c, "/status"),
                    clock.rfc1123z(opt_text(c, "/lastTransitionTime")),
                    text(c, "/reason"),
                    text(c, "/message"),
                ),
            );
        }
    }
    if let Some(quotas) = quotas {
        out.w(0, "\n");
        describe_quotas(&mut out, quotas);
    }
    if let Some(limit_ranges) = limit_ranges {
        out.w(0, "\n");
        describe_limit_ranges(&mut out, limit_ranges);
    }
    out.finish(Layout::DESCRIBE)
}

/// `DescribeResourceQuotas`: each quota's used and hard amounts.
fn describe_quotas(out: &mut Out, quotas: &[Value]) {
    if quotas.is_empty() {
        out.w(0, "No resource quota.\n");
        return;
    }
    let mut sorted: Vec<&Value> = quotas.iter().collect();
    sorted.sort_by(|a, b| text(a, "/metadata/name").cmp(text(b, "/metadata/name")));
    out.w(0, "Resource Quotas\n");
    for q in sorted {
        out.w(1, &format!("Name:\t{}\n", text(q, "/metadata/name")));
        let mut scopes: Vec<String> = list(q, "/spec/scopes").iter().map(plain).collect();
        if !scopes.is_empty() {
            scopes.sort();
            out.w(1, &format!("Scopes:\t{}\n", scopes.join(", ")));
            for scope in &scopes {
                if let Some(help) = quota_scope_help(scope) {
                    out.w(1, &format!("* {help}\n"));
                }
            }
        }
        out.w(1, "Resource\tUsed\tHard\n");
        out.w(1, "--------\t---\t---\n");
        let hard = resource_texts(q, "/status/hard");
        let used = resource_texts(q, "/status/used");
        for (name, h) in &hard {
            let u = used.get(name).map(String::as_str).unwrap_or("0");
            out.w(1, &format!("{name}\t{u}\t{h}\n"));
        }
    }
}

fn quota_scope_help(scope: &str) -> Option<&'static str> {
    Some(match scope {
        "Terminating" => {
            "Matches all pods that have an active deadline. These pods have a limited lifespan on a node before being actively terminated by the system."
        }
        "NotTerminating" => {
            "Matches all pods that do not have an active deadline. These pods usually include long running pods whose container command is not expected to terminate."
        }
        "BestEffort" => {
            "Matches all pods that do not have resource requirements set. These pods have a best effort quality of service."
        }
        "NotBestEffort" => {
            "Matches all pods that have at least one resource requirement set. These pods have a burstable or guaranteed quality of service."
        }
        _ => return None,
    })
}

/// `DescribeLimitRanges`: one row per limit type and resource.
fn describe_limit_ranges(out: &mut Out, ranges: &[Value]) {
    if ranges.is_empty() {
        out.w(0, "No LimitRange resource.\n");
        return;
    }
    out.w(
        0,
        "Resource Limits\n Type\tResource\tMin\tMax\tDefault Request\tDefault Limit\tMax Limit/Request Ratio\n",
    );
    out.w(
        0,
        " ----\t--------\t---\t---\t---------------\t-------------\t-----------------------\n",
    );
    for range in ranges {
        for item in list(range, "/spec/limits") {
            let columns = [
                resource_texts(item, "/min"),
                resource_texts(item, "/max"),
                resource_texts(item, "/defaultRequest"),
                resource_texts(item, "/default"),
                resource_texts(item, "/maxLimitRequestRatio"),
            ];
            let names: BTreeSet<&String> = columns.iter().flat_map(|c| c.keys()).collect();
            for name in names {
                let cell = |i: usize| columns[i].get(name).map(String::as_str).unwrap_or("-");
                out.w(
                    0,
                    &format!(
                        " {}\t{name}\t{}\t{}\t{}\t{}\t{}\n",
                        text(item, "/type"),
                        cell(0),
                        cell(1),
                        cell(2),
                        cell(3),
                        cell(4)
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::describe::tests::{assert_text, clock, running_pod};
    use serde_json::json;

    #[test]
    fn a_node_shows_its_pods_requests_and_limits_against_allocatable() {
        let n = json!({
            "metadata": {"name": "berth", "creationTimestamp": "2026-11-30T20:00:00Z",
                "labels": {"kubernetes.io/hostname": "berth",
                    "node-role.kubernetes.io/control-plane": ""},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"podCIDR": "10.88.0.0/16", "podCIDRs": ["10.88.0.0/16"]},
            "status": {
                "capacity": {"cpu": "2", "memory": "4026300Ki", "pods": "110",
                    "ephemeral-storage": "41152812Ki"},
                "allocatable": {"cpu": "2", "memory": "4026300Ki", "pods": "110",
                    "ephemeral-storage": "41152812Ki"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "berth is posting ready status",
                    "lastHeartbeatTime": "2026-11-30T21:04:50Z",
                    "lastTransitionTime": "2026-11-30T20:00:05Z"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"},
                    {"type": "Hostname", "address": "berth"}],
                "nodeInfo": {"machineID": "m1", "systemUUID": "s1", "bootID": "b1",
                    "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "operatingSystem": "linux", "architecture": "amd64",
                    "containerRuntimeVersion": "berth://0.1.0", "kubeletVersion": "v1.31.0",
                    "kubeProxyVersion": ""}
            }
        });
        let lease = json!({"spec": {"holderIdentity": "berth",
            "renewTime": "2026-11-30T21:04:58.000000Z"}});
        let mut p = running_pod();
        p["spec"]["containers"][0]["resources"]["limits"] =
            json!({"cpu": "500m", "memory": "128Mi"});
        let mut done = running_pod();
        done["metadata"]["name"] = json!("web-0");
        done["status"]["phase"] = json!("Succeeded");
        let out = node(&n, Some(&lease), &[p, done], Some(&[]), &clock());
        let expected = [
            "Name:               berth",
            "Roles:              control-plane",
            "Labels:             kubernetes.io/hostname=berth",
            "                    node-role.kubernetes.io/control-plane=",
            "Annotations:        node.alpha.kubernetes.io/ttl: 0",
            "CreationTimestamp:  Mon, 30 Nov 2026 20:00:00 +0000",
            "Taints:             <none>",
            "Unschedulable:      false",
            "Lease:",
            "  HolderIdentity:  berth",
            "  AcquireTime:     <unset>",
            "  RenewTime:       Mon, 30 Nov 2026 21:04:58 +0000",
            "Conditions:",
            "  Type    Status  LastHeartbeatTime                 LastTransitionTime                Reason         Message",
            "  ----    ------  -----------------                 ------------------                ------         -------",
            "  Ready   True    Mon, 30 Nov 2026 21:04:50 +0000   Mon, 30 Nov 2026 20:00:05 +0000   KubeletReady   berth is posting ready status",
            "Addresses:",
            "  InternalIP:  10.0.0.5",
            "  Hostname:    berth",
            "Capacity:",
            "  cpu:                2",
            "  ephemeral-storage:  41152812Ki",
            "  memory:             4026300Ki",
            "  pods:               110",
            "Allocatable:",
            "  cpu:                2",
            "  ephemeral-storage:  41152812Ki",
            "  memory:             4026300Ki",
            "  pods:               110",
            "System Info:",
            "  Machine ID:                 m1",
            "  System UUID:                s1",
            "  Boot ID:                    b1",
            "  Kernel Version:             6.1.0",
            "  OS Image:                   Debian GNU/Linux 12 (bookworm)",
            "  Operating System:           linux",
            "  Architecture:               amd64",
            "  Container Runtime Version:  berth://0.1.0",
            "  Kubelet Version:            v1.31.0",
            "PodCIDR:                      10.88.0.0/16",
            "PodCIDRs:                     10.88.0.0/16",
            "Non-terminated Pods:          (1 in total)",
            "  Namespace                   Name     CPU Requests  CPU Limits  Memory Requests  Memory Limits  Age",
            "  ---------                   ----     ------------  ----------  ---------------  -------------  ---",
            "  default                     web-1    100m (5%)     500m (25%)  64Mi (1%)        128Mi (3%)     5m2s",
            "Allocated resources:",
            "  (Total limits may be over 100 percent, i.e., overcommitted.)",
            "  Resource           Requests   Limits",
            "  --------           --------   ------",
            "  cpu                100m (5%)  500m (25%)",
            "  memory             64Mi (1%)  128Mi (3%)",
            "  ephemeral-storage  0 (0%)     0 (0%)",
            "Events:              <none>",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_namespace_has_no_quota_and_no_limit_range() {
        let ns = json!({"metadata": {"name": "default",
            "labels": {"kubernetes.io/metadata.name": "default"}}, "status": {"phase": "Active"}});
        let out = namespace(&ns, Some(&[]), Some(&[]), &clock());
        let expected = [
            "Name:         default",
            "Labels:       kubernetes.io/metadata.name=default",
            "Annotations:  <none>",
            "Status:       Active",
            "",
            "No resource quota.",
            "",
            "No LimitRange resource.",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_namespace_lists_its_quotas_and_limit_ranges_or_leaves_unserved_ones_out() {
        let ns = json!({"metadata": {"name": "team"}, "status": {"phase": "Active"}});
        assert_eq!(
            namespace(&ns, None, None, &clock()),
            "Name:         team\nLabels:       <none>\nAnnotations:  <none>\nStatus:       Active\n"
        );
        let quota = json!({"metadata": {"name": "q"}, "spec": {"scopes": ["BestEffort"]},
            "status": {"hard": {"pods": "10", "requests.cpu": "2"}, "used": {"pods": "3"}}});
        let limits = json!({"spec": {"limits": [{"type": "Container",
            "max": {"cpu": "1"}, "default": {"cpu": "500m", "memory": "256Mi"}}]}});
        let out = namespace(&ns, Some(&[quota]), Some(&[limits]), &clock());
        let expected = [
            "Name:         team",
            "Labels:       <none>",
            "Annotations:  <none>",
            "Status:       Active",
            "",
            "Resource Quotas",
            "  Name:    q",
            "  Scopes:  BestEffort",
            "  * Matches all pods that do not have resource requirements set. These pods have a best effort quality of service.",
            "  Resource      Used  Hard",
            "  --------      ---   ---",
            "  pods          3     10",
            "  requests.cpu  0     2",
            "",
            "Resource Limits",
            " Type       Resource  Min  Max  Default Request  Default Limit  Max Limit/Request Ratio",
            " ----       --------  ---  ---  ---------------  -------------  -----------------------",
            " Container  cpu       -    1    -                500m           -",
            " Container  memory    -    -    -                256Mi          -",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }
}
