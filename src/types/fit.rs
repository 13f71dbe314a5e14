//! The scheduler's pure half: what a pod asks for, whether a node can take it (and if not,
//! why), which fitting node is best, and the message that sums up why no node fits. No
//! I/O and no clocks, so every rule is tested here.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};
use serde_json::Value;

use crate::types::quantity::Quantity;
use crate::types::taints;

/// The `pods` resource: how many pods a node takes.
pub const PODS: &str = "pods";
const CPU: &str = "cpu";
const MEMORY: &str = "memory";

/// Amounts per resource name, in the unit each is compared in: millicores for `cpu`,
/// whole units (bytes, counts) for the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources(BTreeMap<String, i128>);

impl Resources {
    /// What a pod with no requests takes: one of the node's `pods`.
    pub fn one_pod() -> Resources {
        let mut r = Resources::default();
        r.set(PODS, 1);
        r
    }

    /// The resources named, in name order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> i128 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn add(&mut self, other: &Resources) {
        for (name, amount) in &other.0 {
            *self.0.entry(name.clone()).or_insert(0) += amount;
        }
    }

    /// Each resource becomes the larger of the two.
    fn max_with(&mut self, other: &Resources) {
        for (name, amount) in &other.0 {
            let mine = self.0.entry(name.clone()).or_insert(0);
            *mine = (*mine).max(*amount);
        }
    }

    fn set(&mut self, name: &str, amount: i128) {
        self.0.insert(name.to_string(), amount);
    }

    /// A resource list (`{"cpu": "100m", …}`), strictly: a quantity that does not parse
    /// is an error naming it.
    fn parse(list: Option<&Value>, path: &str) -> Result<Resources, String> {
        let mut out = Resources::default();
        if let Some(Value::Object(m)) = list {
            for (name, q) in m {
                let text = q
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| q.to_string());
                let q: Quantity = text.parse().map_err(|e| format!("{path}[{name}]: {e}"))?;
                out.set(name, amount(name, q));
            }
        }
        Ok(out)
    }
}

/// A quantity of `resource` in the unit it is compared in.
fn amount(resource: &str, q: Quantity) -> i128 {
    if resource == CPU {
        q.milli()
    } else {
        q.value()
    }
}

/// What one container asks for. A resource with a limit but no request asks for its
/// limit (what the API server's defaulting does in Kubernetes).
fn container_requests(c: &Value, path: &str) -> Result<Resources, String> {
    let mut req = Resources::parse(
        c.pointer("/resources/requests"),
        &format!("{path}.resources.requests"),
    )?;
    let limits = Resources::parse(
        c.pointer("/resources/limits"),
        &format!("{path}.resources.limits"),
    )?;
    for (name, limit) in limits.0 {
        req.0.entry(name).or_insert(limit);
    }
    Ok(req)
}

/// What a pod asks of a node: its containers' requests summed, at least each init
/// container's (plus the sidecars started before it), plus the pod overhead, plus one
/// `pods`.
pub fn pod_requests(pod: &Value) -> Result<Resources, String> {
    let list = |field: &str| {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let mut running = Resources::default();
    for (i, c) in list("containers").iter().enumerate() {
        running.add(&container_requests(c, &format!("spec.containers[{i}]"))?);
    }
    // Sidecars (init containers that keep running) add to the total and to every later
    // init container's peak.
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, c) in list("initContainers").iter().enumerate() {
        let req = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        if c["restartPolicy"] == "Always" {
            sidecars.add(&req);
            init_peak.max_with(&sidecars);
        } else {
            let mut peak = req;
            peak.add(&sidecars);
            init_peak.max_with(&peak);
        }
    }
    running.add(&sidecars);
    running.max_with(&init_peak);
    running.add(&Resources::parse(
        pod.pointer("/spec/overhead"),
        "spec.overhead",
    )?);
    running.set(PODS, 1);
    Ok(running)
}

/// A node's `status.allocatable`. A quantity that does not parse counts as none of that
/// resource (and is logged): the node cannot promise what it cannot state.
pub fn allocatable(node: &Value) -> Resources {
    let node_name = node
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut out = Resources::default();
    if let Some(Value::Object(m)) = node.pointer("/status/allocatable") {
        for (name, q) in m {
            match q.as_str().unwrap_or("").parse::<Quantity>() {
                Ok(q) => out.set(name, amount(name, q)),
                Err(e) => tracing::warn!(
                    node = node_name,
                    error = %e,
                    "allocatable {name} does not parse; counting none"
                ),
            }
        }
    }
    out
}

/// Why one node cannot take a pod. Displayed as kube-scheduler words it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unfit {
    NotReady,
    Unschedulable,
    Taint { key: String, value: String },
    Affinity,
    TooManyPods,
    Insufficient(String),
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NotReady => f.write_str("node(s) were not ready"),
            Unfit::Unschedulable => f.write_str("node(s) were unschedulable"),
            Unfit::Taint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Unfit::Affinity => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            Unfit::TooManyPods => f.write_str("Too many pods"),
            Unfit::Insufficient(resource) => write!(f, "Insufficient {resource}"),
        }
    }
}

/// A pod's scheduling constraints, read once per attempt.
#[derive(Debug, Clone)]
pub struct Needs {
    pub requests: Resources,
    tolerations: Vec<Toleration>,
    node_selector: BTreeMap<String, String>,
    /// `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`, when set.
    required_terms: Option<Vec<NodeSelectorTerm>>,
}

impl Needs {
    /// Reads a pod's needs; a request that does not parse or an affinity that does not
    /// decode is an error the pod's condition reports.
    pub fn of(pod: &Value) -> Result<Needs, String> {
        let node_selector = pod
            .pointer("/spec/nodeSelector")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let required = pod
            .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution");
        let required_terms = match required {
            None | Some(Value::Null) => None,
            Some(r) => Some(
                serde_json::from_value::<Option<Vec<NodeSelectorTerm>>>(
                    r.get("nodeSelectorTerms").cloned().unwrap_or(Value::Null),
                )
                .map_err(|e| format!("spec.affinity.nodeAffinity: {e}"))?
                .unwrap_or_default(),
            ),
        };
        Ok(Needs {
            requests: pod_requests(pod)?,
            tolerations: taints::tolerations_of(pod),
            node_selector,
            required_terms,
        })
    }

    fn tolerates(&self, taint: &Taint) -> bool {
        taints::first_tolerating(&self.tolerations, taint).is_some()
    }
}

fn labels_of(node: &Value) -> BTreeMap<&str, &str> {
    node.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// One node selector requirement against a value lookup (labels or fields).
fn requirement_matches<'a>(
    req: &NodeSelectorRequirement,
    get: impl Fn(&str) -> Option<&'a str>,
) -> bool {
    let value = get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    let listed = |v: &str| values.iter().any(|x| x == v);
    match req.operator.as_str() {
        "In" => value.is_some_and(listed),
        "NotIn" => value.is_none_or(|v| !listed(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(bound)) if op == "Gt" => v > bound,
                (Ok(v), Ok(bound)) => v < bound,
                _ => false,
            }
        }
        _ => false,
    }
}

/// One term: all its label expressions and field expressions hold. An empty term
/// matches nothing.
fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<&str, &str>, name: &str) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, |k| labels.get(k).copied()))
        && fields
            .iter()
            .all(|r| requirement_matches(r, |k| (k == "metadata.name").then_some(name)))
}

/// The first taint of `node` with one of `effects` that the pod does not tolerate.
pub fn untolerated_taint(needs: &Needs, node: &Value, effects: &[&str]) -> Option<Taint> {
    taints::of_node(node)
        .into_iter()
        .find(|t| effects.contains(&t.effect.as_str()) && !needs.tolerates(t))
}

/// `spec.nodeSelector` and the required node affinity (terms ORed; none matches nothing).
pub fn affinity_matches(needs: &Needs, node: &Value) -> bool {
    let labels = labels_of(node);
    let name = node
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let selected = needs
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k.as_str()) == Some(&v.as_str()));
    selected
        && needs
            .required_terms
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| term_matches(t, &labels, name)))
}

pub fn is_ready(node: &Value) -> bool {
    crate::types::condition(node, "Ready").is_some_and(|c| c["status"] == "True")
}

/// Whether `node` can take a pod with `needs`, given what pods on it already request.
/// Checks run in kube-scheduler's order and stop at the first that fails; the resource
/// check names every resource that is short.
pub fn check(needs: &Needs, node: &Value, used: &Resources) -> Result<(), Vec<Unfit>> {
    if !is_ready(node) {
        return Err(vec![Unfit::NotReady]);
    }
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        let cordon = Taint {
            key: taints::UNSCHEDULABLE.into(),
            effect: taints::NO_SCHEDULE.into(),
            ..Taint::default()
        };
        if !needs.tolerates(&cordon) {
            return Err(vec![Unfit::Unschedulable]);
        }
    }
    if let Some(t) = untolerated_taint(needs, node, &[taints::NO_SCHEDULE, taints::NO_EXECUTE]) {
        return Err(vec![Unfit::Taint {
            key: t.key,
            value: t.value.unwrap_or_default(),
        }]);
    }
    if !affinity_matches(needs, node) {
        return Err(vec![Unfit::Affinity]);
    }
    let free = allocatable(node);
    let mut short = Vec::new();
    for (name, &want) in &needs.requests.0 {
        if want <= 0 {
            continue;
        }
        if want > free.get(name) - used.get(name) {
            short.push(if name == PODS {
                Unfit::TooManyPods
            } else {
                Unfit::Insufficient(name.clone())
            });
        }
    }
    if short.is_empty() { Ok(()) } else { Err(short) }
}

/// How much room `node` keeps for cpu and memory once the pod is on it (0–100, higher is
/// emptier): kube-scheduler's "least allocated" score.
fn score(needs: &Needs, node: &Value, used: &Resources) -> i128 {
    let free = allocatable(node);
    let parts: Vec<i128> = [CPU, MEMORY]
        .iter()
        .filter(|r| free.get(r) > 0)
        .map(|r| {
            let left = free.get(r) - used.get(r) - needs.requests.get(r);
            left.max(0) * 100 / free.get(r)
        })
        .collect();
    if parts.is_empty() {
        0
    } else {
        parts.iter().sum::<i128>() / parts.len() as i128
    }
}

/// The best node for a pod among `nodes` (by name order on equal scores), or the message
/// saying why none fits. `used` holds what is already placed on each node, by name.
pub fn choose(
    needs: &Needs,
    nodes: &[Arc<Value>],
    used: &HashMap<String, Resources>,
) -> Result<String, String> {
    let none = Resources::default();
    let mut best: Option<(i128, &str)> = None;
    let mut reasons = Vec::new();
    for node in nodes {
        let name = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if node.pointer("/metadata/deletionTimestamp").is_some() {
            reasons.push(Unfit::NotReady);
            continue;
        }
        let on_node = used.get(name).unwrap_or(&none);
        match check(needs, node, on_node) {
            Ok(()) => {
                let s = score(needs, node, on_node);
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, name));
                }
            }
            Err(why) => reasons.extend(why),
        }
    }
    match best {
        Some((_, name)) => Ok(name.to_string()),
        None => Err(failure_message(nodes.len(), reasons)),
    }
}

/// kube-scheduler's summary: `0/3 nodes are available: 1 Insufficient memory, 2 node(s)
/// didn't match Pod's node affinity/selector.` Each reason is counted over the nodes, and
/// the `count reason` strings are sorted as text (as kube-scheduler sorts them).
pub fn failure_message(nodes: usize, reasons: impl IntoIterator<Item = Unfit>) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let mut counts: BTreeMap<Unfit, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_insert(0) += 1;
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{nodes} nodes are available: {}.", parts.join(", "))
}

/// Whether a node change may let a waiting pod fit: what the checks read changed.
pub fn may_help(old: &Value, new: &Value) -> bool {
    [
        "/metadata/labels",
        "/spec/taints",
        "/spec/unschedulable",
        "/status/allocatable",
    ]
    .iter()
    .any(|p| old.pointer(p) != new.pointer(p))
        || is_ready(old) != is_ready(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "x"}]);
        }
        json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
    }

    fn container(requests: Value) -> Value {
        json!({"name": "c", "image": "x", "resources": {"requests": requests}})
    }

    fn node(name: &str, extra: Value) -> Value {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}
            }
        });
        merge(&mut n, extra);
        n
    }

    fn merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    fn needs(spec: Value) -> Needs {
        Needs::of(&pod(spec)).unwrap()
    }

    fn used(cpu: i128, memory: i128, pods: i128) -> Resources {
        let mut r = Resources::default();
        r.set(CPU, cpu);
        r.set(MEMORY, memory);
        r.set(PODS, pods);
        r
    }

    #[test]
    fn requests_sum_containers_and_take_the_init_peak() {
        let p = pod(json!({
            "containers": [
                container(json!({"cpu": "100m", "memory": "64Mi"})),
                container(json!({"cpu": "200m", "example.com/gpu": "1"})),
            ],
            "initContainers": [container(json!({"cpu": "500m", "memory": "32Mi"}))],
            "overhead": {"memory": "1Mi"}
        }));
        let r = pod_requests(&p).unwrap();
        assert_eq!(
            r.get(CPU),
            500,
            "the init container needs more than the app"
        );
        assert_eq!(
            r.get(MEMORY),
            (64 << 20) + (1 << 20),
            "the app needs more; plus overhead"
        );
        assert_eq!(r.get("example.com/gpu"), 1);
        assert_eq!(r.get(PODS), 1);
    }

    #[test]
    fn sidecars_add_to_the_total_and_limits_stand_in_for_requests() {
        let p = pod(json!({
            "containers": [{"name": "app", "image": "x", "resources": {"limits": {"cpu": "1"}}}],
            "initContainers": [
                {"name": "side", "image": "x", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "100m"}}},
                container(json!({"cpu": "1050m"})),
            ]
        }));
        let r = pod_requests(&p).unwrap();
        // Running: 1 (the limit) + 100m; the init step: 1050m + the 100m sidecar.
        assert_eq!(r.get(CPU), 1150);
        let bad = pod(json!({"containers": [container(json!({"cpu": "lots"}))]}));
        let e = pod_requests(&bad).unwrap_err();
        assert!(
            e.contains("spec.containers[0].resources.requests[cpu]"),
            "{e}"
        );
    }

    #[test]
    fn a_node_must_be_ready_and_not_cordoned() {
        let n = needs(json!({}));
        let none = Resources::default();
        assert_eq!(check(&n, &node("a", json!({})), &none), Ok(()));
        let not_ready = node(
            "a",
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
        );
        assert_eq!(check(&n, &not_ready, &none), Err(vec![Unfit::NotReady]));
        let no_conditions = node("a", json!({"status": {"conditions": []}}));
        assert_eq!(check(&n, &no_conditions, &none), Err(vec![Unfit::NotReady]));
        let cordoned = node("a", json!({"spec": {"unschedulable": true}}));
        assert_eq!(check(&n, &cordoned, &none), Err(vec![Unfit::Unschedulable]));
        let tolerant = needs(json!({"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
        ]}));
        assert_eq!(check(&tolerant, &cordoned, &none), Ok(()));
    }

    #[test]
    fn node_selector_must_match_every_label() {
        let n = node(
            "a",
            json!({"metadata": {"labels": {"disk": "ssd", "zone": "z1"}}}),
        );
        let none = Resources::default();
        assert!(check(&needs(json!({"nodeSelector": {"disk": "ssd"}})), &n, &none).is_ok());
        assert!(
            check(
                &needs(json!({"nodeSelector": {"disk": "ssd", "zone": "z1"}})),
                &n,
                &none
            )
            .is_ok()
        );
        assert_eq!(
            check(
                &needs(json!({"nodeSelector": {"disk": "ssd", "zone": "z2"}})),
                &n,
                &none
            ),
            Err(vec![Unfit::Affinity])
        );
        assert_eq!(
            check(&needs(json!({"nodeSelector": {"gpu": "yes"}})), &n, &none),
            Err(vec![Unfit::Affinity])
        );
    }

    fn with_terms(terms: Value) -> Needs {
        needs(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }}}))
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> Value {
        json!({"key": key, "operator": op, "values": values})
    }

    #[test]
    fn node_affinity_operators_hold_on_labels() {
        let n = node(
            "a",
            json!({"metadata": {"labels": {"disk": "ssd", "cores": "8"}}}),
        );
        let fits = |terms: Value| affinity_matches(&with_terms(terms), &n);
        assert!(fits(
            json!([{"matchExpressions": [expr("disk", "In", &["hdd", "ssd"])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("disk", "In", &["hdd"])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("nope", "In", &["ssd"])]}])
        ));
        assert!(fits(
            json!([{"matchExpressions": [expr("disk", "NotIn", &["hdd"])]}])
        ));
        assert!(fits(
            json!([{"matchExpressions": [expr("nope", "NotIn", &["hdd"])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("disk", "NotIn", &["ssd"])]}])
        ));
        assert!(fits(
            json!([{"matchExpressions": [expr("disk", "Exists", &[])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("nope", "Exists", &[])]}])
        ));
        assert!(fits(
            json!([{"matchExpressions": [expr("nope", "DoesNotExist", &[])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("disk", "DoesNotExist", &[])]}])
        ));
        assert!(fits(
            json!([{"matchExpressions": [expr("cores", "Gt", &["4"])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("cores", "Gt", &["8"])]}])
        ));
        assert!(fits(
            json!([{"matchExpressions": [expr("cores", "Lt", &["16"])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("cores", "Lt", &["8"])]}])
        ));
        assert!(
            !fits(json!([{"matchExpressions": [expr("disk", "Gt", &["4"])]}])),
            "not a number"
        );
        assert!(!fits(
            json!([{"matchExpressions": [expr("cores", "Gt", &["1", "2"])]}])
        ));
        assert!(!fits(
            json!([{"matchExpressions": [expr("disk", "Matches", &["ssd"])]}])
        ));
    }

    #[test]
    fn node_affinity_ands_expressions_and_ors_terms() {
        let n = node(
            "a",
            json!({"metadata": {"labels": {"disk": "ssd", "zone": "z1"}}}),
        );
        let fits = |terms: Value| affinity_matches(&with_terms(terms), &n);
        let ssd = expr("disk", "In", &["ssd"]);
        let z2 = expr("zone", "In", &["z2"]);
        assert!(
            !fits(json!([{"matchExpressions": [ssd, z2]}])),
            "expressions are ANDed"
        );
        assert!(
            fits(json!([{"matchExpressions": [z2]}, {"matchExpressions": [ssd]}])),
            "terms are ORed"
        );
        assert!(!fits(json!([{}])), "an empty term matches nothing");
        assert!(!fits(json!([])), "no terms match nothing");
        assert!(fits(
            json!([{"matchFields": [expr("metadata.name", "In", &["a"])]}])
        ));
        assert!(!fits(
            json!([{"matchFields": [expr("metadata.name", "In", &["b"])]}])
        ));
        assert!(fits(
            json!([{"matchFields": [expr("metadata.name", "NotIn", &["b"])]}])
        ));
        assert!(!fits(
            json!([{"matchFields": [expr("metadata.uid", "Exists", &[])]}])
        ));
        assert!(fits(json!([{
            "matchExpressions": [expr("zone", "In", &["z1"])],
            "matchFields": [expr("metadata.name", "In", &["a"])]
        }])));
        // Both the selector and the affinity must hold.
        let both = needs(json!({
            "nodeSelector": {"disk": "hdd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", &["z1"])]}]
            }}}
        }));
        assert!(!affinity_matches(&both, &n));
    }

    #[test]
    fn taints_need_tolerations_except_prefer_no_schedule() {
        let none = Resources::default();
        let tainted = node(
            "a",
            json!({"spec": {"taints": [
                {"key": "soft", "effect": "PreferNoSchedule"},
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "evict", "effect": "NoExecute"}
            ]}}),
        );
        assert_eq!(
            check(&needs(json!({})), &tainted, &none),
            Err(vec![Unfit::Taint {
                key: "dedicated".into(),
                value: "gpu".into()
            }])
        );
        let one = needs(json!({"tolerations": [{"key": "dedicated", "value": "gpu"}]}));
        assert_eq!(
            check(&one, &tainted, &none),
            Err(vec![Unfit::Taint {
                key: "evict".into(),
                value: String::new()
            }])
        );
        let both = needs(json!({"tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            {"key": "evict", "operator": "Exists"}
        ]}));
        assert_eq!(check(&both, &tainted, &none), Ok(()));
        let all = needs(json!({"tolerations": [{"operator": "Exists"}]}));
        assert_eq!(check(&all, &tainted, &none), Ok(()));
    }

    #[test]
    fn resources_count_what_is_already_placed() {
        let n = node(
            "a",
            json!({"status": {"allocatable": {"example.com/gpu": "1", "pods": "3"}}}),
        );
        let asks =
            needs(json!({"containers": [container(json!({"cpu": "500m", "memory": "1Gi"}))]}));
        assert_eq!(
            check(&asks, &n, &used(1500, 3 << 30, 2)),
            Ok(()),
            "exactly full fits"
        );
        assert_eq!(
            check(&asks, &n, &used(1501, 3 << 30, 2)),
            Err(vec![Unfit::Insufficient("cpu".into())])
        );
        assert_eq!(
            check(&asks, &n, &used(1600, (3 << 30) + 1, 3)),
            Err(vec![
                Unfit::Insufficient("cpu".into()),
                Unfit::Insufficient("memory".into()),
                Unfit::TooManyPods
            ])
        );
        let gpus = needs(json!({"containers": [container(json!({"example.com/gpu": "2"}))]}));
        assert_eq!(
            check(&gpus, &n, &Resources::default()),
            Err(vec![Unfit::Insufficient("example.com/gpu".into())])
        );
        let unknown = needs(json!({"containers": [container(json!({"example.com/fpga": "1"}))]}));
        assert_eq!(
            check(&unknown, &n, &Resources::default()),
            Err(vec![Unfit::Insufficient("example.com/fpga".into())]),
            "a resource the node does not offer at all is short"
        );
        let nothing = needs(json!({"containers": [container(json!({"cpu": "0"}))]}));
        assert_eq!(
            check(&nothing, &n, &used(2000, 4 << 30, 0)),
            Ok(()),
            "zero always fits"
        );
        let mut no_pods = node("b", json!({}));
        no_pods["status"]["allocatable"]
            .as_object_mut()
            .unwrap()
            .remove("pods");
        assert_eq!(
            check(&nothing, &no_pods, &Resources::default()),
            Err(vec![Unfit::TooManyPods])
        );
    }

    #[test]
    fn messages_count_reasons_over_nodes_like_kube_scheduler() {
        assert_eq!(
            failure_message(0, []),
            "no nodes available to schedule pods"
        );
        assert_eq!(
            failure_message(1, [Unfit::Insufficient("cpu".into())]),
            "0/1 nodes are available: 1 Insufficient cpu."
        );
        assert_eq!(
            failure_message(
                3,
                [
                    Unfit::Affinity,
                    Unfit::Insufficient("memory".into()),
                    Unfit::Affinity
                ]
            ),
            "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match Pod's node affinity/selector."
        );
        assert_eq!(
            failure_message(
                2,
                [
                    Unfit::Insufficient("cpu".into()),
                    Unfit::Insufficient("memory".into()),
                    Unfit::Taint {
                        key: "k".into(),
                        value: "v".into()
                    }
                ]
            ),
            "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint {k: v}."
        );
        assert_eq!(
            failure_message(
                2,
                [Unfit::NotReady, Unfit::Unschedulable, Unfit::TooManyPods]
            ),
            "0/2 nodes are available: 1 Too many pods, 1 node(s) were not ready, 1 node(s) were unschedulable."
        );
    }

    #[test]
    fn choose_prefers_the_emptiest_node_and_explains_failures() {
        let nodes: Vec<Arc<Value>> = vec![
            Arc::new(node("a", json!({"metadata": {"labels": {"disk": "hdd"}}}))),
            Arc::new(node("b", json!({}))),
            Arc::new(node(
                "c",
                json!({"status": {"allocatable": {"cpu": "100m"}}}),
            )),
        ];
        let asks = needs(json!({"containers": [container(json!({"cpu": "500m"}))]}));
        let mut placed = HashMap::new();
        assert_eq!(
            choose(&asks, &nodes, &placed),
            Ok("a".to_string()),
            "ties go by name"
        );
        placed.insert("a".to_string(), used(1000, 0, 1));
        assert_eq!(choose(&asks, &nodes, &placed), Ok("b".to_string()));
        let ssd = needs(json!({
            "nodeSelector": {"disk": "hdd"},
            "containers": [container(json!({"cpu": "1500m"}))]
        }));
        assert_eq!(
            choose(&ssd, &nodes, &placed),
            Err("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector.".into())
        );
        assert_eq!(
            choose(&asks, &[], &placed),
            Err("no nodes available to schedule pods".into())
        );
    }

    #[test]
    fn only_node_changes_the_checks_read_may_help() {
        let a = node("a", json!({}));
        let mut heartbeat = a.clone();
        heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2024-01-01T00:00:00Z");
        assert!(!may_help(&a, &heartbeat));
        let mut bigger = a.clone();
        bigger["status"]["allocatable"]["cpu"] = json!("4");
        assert!(may_help(&a, &bigger));
        let mut untainted = a.clone();
        untainted["spec"]["taints"] = json!([]);
        assert!(may_help(&a, &untainted));
        let mut unready = a.clone();
        unready["status"]["conditions"][0]["status"] = json!("False");
        assert!(may_help(&unready, &a));
        let mut relabelled = a.clone();
        relabelled["metadata"]["labels"]["disk"] = json!("ssd");
        assert!(may_help(&a, &relabelled));
    }
}
