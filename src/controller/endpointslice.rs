//! The endpoint slice controller: the EndpointSlices of each Service with a selector, as
//! kube-controller-manager's (`pkg/controller/endpointslice`, its reconciler in
//! `staging/src/k8s.io/endpointslice`) keeps them. Every selected pod with an address
//! is an endpoint (`addresses` of each of the Service's IP families, `conditions`,
//! `nodeName`, `targetRef`, `hostname` when the pod names the Service as its subdomain);
//! endpoints are grouped by their resolved ports (a named `targetPort` is looked up in
//! each pod's containers) and address type, and each group is cut into slices of at most
//! `MAX_ENDPOINTS_PER_SLICE` (upstream's `--max-endpoints-per-slice` default); as
//! upstream, an endpoint stays in the slice that holds it and new ones fill the slices
//! with room first ([`arrange`]). A Service without endpoints keeps one empty
//! placeholder slice. A Service without selector is
//! left alone; the slices of a deleted Service go with it by their owner reference.
//!
//! Slices are made with `generateName` `<service>-`, labelled `kubernetes.io/service-name`
//! and `endpointslice.kubernetes.io/managed-by`, and written only when they differ from
//! what they should be. The Service's current slices are read through the client rather
//! than the informer, so that a slice made a moment ago is seen and never made twice;
//! the informer only queues the Service when one of its slices changes.
//!
//! The Service is decoded once as a k8s-openapi `Service`; pods stay JSON, read through
//! [`crate::types::json`]. The pure parts (`endpoint_of`, `ports_of`, `desired`) are
//! shared with the endpoints controller ([`super::endpoint`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::claim::OwnerKind;
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, DeleteParams, Kind, ListParams, Resource, catalog, split_key};
use crate::types::json::{array_at, str_at};
use crate::types::labels::{self, Selector};
use crate::types::meta::Meta;

/// The most endpoints the controller puts in one slice (`--max-endpoints-per-slice`).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// The label naming a slice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label naming who manages a slice, and this controller's value of it.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// The label upstream sets on what belongs to a headless Service.
pub const HEADLESS: &str = "service.kubernetes.io/headless";

const SERVICE: OwnerKind = OwnerKind {
    api_version: "v1",
    kind_name: "Service",
};

/// The selector of a Service, `None` when it has none (such a Service's endpoints are
/// somebody else's).
pub(super) fn selector_of(svc: &Service) -> Option<Selector> {
    let map = svc.spec.as_ref()?.selector.as_ref()?;
    (!map.is_empty()).then(|| Selector::from_map(map))
}

/// The pods of `pods` that `svc` selects.
pub(super) fn selected<'a>(svc: &Service, pods: &'a [Arc<Value>]) -> Vec<&'a Value> {
    let Some(selector) = selector_of(svc) else {
        return Vec::new();
    };
    pods.iter()
        .map(AsRef::as_ref)
        .filter(|p| selector.matches(&labels::map_at(p, "/metadata/labels")))
        .collect()
}

/// Whether a pod has ended (`Succeeded` or `Failed`): it is no endpoint.
pub(super) fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

/// The pod's addresses (`status.podIPs`, else `status.podIP`).
pub(super) fn pod_ips(pod: &Value) -> Vec<&str> {
    let ips: Vec<&str> = array_at(pod, "/status/podIPs")
        .iter()
        .map(|ip| str_at(ip, "/ip"))
        .filter(|ip| !ip.is_empty())
        .collect();
    if !ips.is_empty() {
        return ips;
    }
    let ip = str_at(pod, "/status/podIP");
    if ip.is_empty() { vec![] } else { vec![ip] }
}

/// The address type of an IP.
fn family_of(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}

/// The address types of a Service's endpoints: its `ipFamilies`, IPv4 when it names
/// none (as a single-stack cluster).
fn address_types(svc: &Service) -> Vec<&'static str> {
    let families = svc.spec.as_ref().and_then(|s| s.ip_families.as_ref());
    let mut out: Vec<&'static str> = families
        .into_iter()
        .flatten()
        .filter_map(|f| match f.as_str() {
            "IPv4" => Some("IPv4"),
            "IPv6" => Some("IPv6"),
            _ => None,
        })
        .collect();
    if out.is_empty() {
        out.push("IPv4");
    }
    out
}

/// `ShouldSetHostname`: the pod names a hostname and the Service as its subdomain.
pub(super) fn hostname_for(pod: &Value, svc: &Service) -> Option<String> {
    let hostname = str_at(pod, "/spec/hostname");
    (!hostname.is_empty()
        && str_at(pod, "/spec/subdomain") == svc.metadata.name()
        && str_at(pod, "/metadata/namespace") == svc.metadata.namespace())
    .then(|| hostname.to_string())
}

/// `FindPort`: the pod's port that a Service port's `targetPort` names: a number as it
/// is, a name looked up among the containers' ports of the same protocol.
pub(super) fn find_port(pod: &Value, port: &ServicePort) -> Option<i32> {
    match port.target_port.as_ref() {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            array_at(pod, "/spec/containers")
                .iter()
                .flat_map(|c| array_at(c, "/ports"))
                .find(|p| {
                    str_at(p, "/name") == name
                        && (str_at(p, "/protocol") == protocol
                            || (str_at(p, "/protocol").is_empty() && protocol == "TCP"))
                })
                .and_then(|p| p["containerPort"].as_i64())
                .and_then(|n| i32::try_from(n).ok())
        }
    }
}

/// `getEndpointPorts`: the Service's ports as this pod serves them; a port whose target
/// the pod does not have is left out.
pub(super) fn ports_of(pod: &Value, svc: &Service) -> Vec<EndpointPort> {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(EndpointPort {
                port: Some(find_port(pod, p)?),
                name: Some(p.name.clone().unwrap_or_default()),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect()
}

/// `podToEndpoint`: the endpoint of a pod at `address`. Serving is the pod's readiness;
/// ready is serving and not terminating, unless the Service publishes addresses that
/// are not ready.
pub(super) fn endpoint_of(pod: &Value, svc: &Service, address: &str) -> Endpoint {
    let serving = crate::types::is_pod_ready(pod);
    let terminating = !pod["metadata"]["deletionTimestamp"].is_null();
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let node = str_at(pod, "/spec/nodeName");
    Endpoint {
        addresses: vec![address.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(publish || (serving && !terminating)),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        node_name: (!node.is_empty()).then(|| node.to_string()),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some(str_at(pod, "/metadata/namespace").to_string()),
            name: Some(str_at(pod, "/metadata/name").to_string()),
            uid: Some(str_at(pod, "/metadata/uid").to_string()),
            ..ObjectReference::default()
        }),
        hostname: hostname_for(pod, svc),
        ..Endpoint::default()
    }
}

/// The content of one slice: what the controller compares and writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    pub address_type: &'static str,
    pub ports: Vec<EndpointPort>,
    pub endpoints: Vec<Endpoint>,
}

impl Slice {
    fn json_ports(&self) -> Value {
        serde_json::to_value(&self.ports).unwrap_or(Value::Null)
    }
    fn json_endpoints(&self) -> Value {
        serde_json::to_value(&self.endpoints).unwrap_or(Value::Null)
    }

    /// Whether the stored slice `have` holds exactly this.
    fn is_held_by(&self, have: &Value) -> bool {
        let ports = match &have["ports"] {
            Value::Null => json!([]),
            p => p.clone(),
        };
        let endpoints = match &have["endpoints"] {
            Value::Null => json!([]),
            e => e.clone(),
        };
        str_at(have, "/addressType") == self.address_type
            && ports == self.json_ports()
            && endpoints == self.json_endpoints()
    }
}

/// The slices `svc` should have, for the pods of its namespace (`pods`, in any order):
/// endpoints of each address type grouped by their ports, in pod name order, cut every
/// `max` endpoints; one empty IPv4 slice when there is no endpoint at all.
pub fn desired(svc: &Service, pods: &[&Value], max: usize) -> Vec<Slice> {
    let mut pods: Vec<&Value> = pods.iter().copied().filter(|p| !is_terminal(p)).collect();
    pods.sort_by_key(|p| str_at(p, "/metadata/name"));
    // (address type, ports as JSON) → endpoints, in a stable order.
    type Group = (Vec<EndpointPort>, Vec<Endpoint>);
    let mut groups: BTreeMap<(&'static str, String), Group> = BTreeMap::new();
    for pod in pods {
        let ips = pod_ips(pod);
        if ips.is_empty() {
            continue;
        }
        let ports = ports_of(pod, svc);
        let ports_key = serde_json::to_string(&ports).unwrap_or_default();
        for family in address_types(svc) {
            let Some(ip) = ips.iter().find(|ip| family_of(ip) == family) else {
                continue;
            };
            groups
                .entry((family, ports_key.clone()))
                .or_insert_with(|| (ports.clone(), Vec::new()))
                .1
                .push(endpoint_of(pod, svc, ip));
        }
    }
    let mut out = Vec::new();
    for ((address_type, _), (ports, endpoints)) in groups {
        for chunk in endpoints.chunks(max.max(1)) {
            out.push(Slice {
                address_type,
                ports: ports.clone(),
                endpoints: chunk.to_vec(),
            });
        }
    }
    if out.is_empty() {
        out.push(Slice {
            address_type: "IPv4",
            ports: Vec::new(),
            endpoints: Vec::new(),
        });
    }
    out
}

/// Which endpoint an endpoint of a stored slice is: its pod and address.
fn endpoint_key(e: &Value) -> (String, String) {
    (
        str_at(e, "/targetRef/name").to_string(),
        str_at(e, "/addresses/0").to_string(),
    )
}

fn typed_key(e: &Endpoint) -> (String, String) {
    let pod = e.target_ref.as_ref().and_then(|r| r.name.clone());
    (
        pod.unwrap_or_default(),
        e.addresses.first().cloned().unwrap_or_default(),
    )
}

/// Where the wanted slices go, given the stored ones (`have`): each `(Some(i), slice)`
/// is what `have[i]` must hold, each `(None, slice)` a slice to make; a stored slice
/// named nowhere is deleted. As upstream's reconciler, an endpoint stays in the slice
/// that holds it (its content updated), new endpoints fill the slices of their ports
/// that have room, then new slices; a slice left without endpoints is rewritten into one
/// that would be made, or deleted.
pub fn arrange(have: &[Value], want: Vec<Slice>, max: usize) -> Vec<(Option<usize>, Slice)> {
    let max = max.max(1);
    // The wanted endpoints of each (address type, ports), every group once.
    let mut groups: Vec<Slice> = Vec::new();
    for slice in want {
        match groups
            .iter_mut()
            .find(|g| g.address_type == slice.address_type && g.ports == slice.ports)
        {
            Some(g) => g.endpoints.extend(slice.endpoints),
            None => groups.push(slice),
        }
    }
    let mut used = BTreeSet::new();
    let mut out: Vec<(Option<usize>, Slice)> = Vec::new();
    for group in groups {
        let mut wanted: BTreeMap<(String, String), Endpoint> = group
            .endpoints
            .iter()
            .map(|e| (typed_key(e), e.clone()))
            .collect();
        let first = out.len();
        let ports = serde_json::to_value(&group.ports).unwrap_or(Value::Null);
        for (i, h) in have.iter().enumerate() {
            let same_ports = match &h["ports"] {
                Value::Null => ports == json!([]),
                p => *p == ports,
            };
            if used.contains(&i) || str_at(h, "/addressType") != group.address_type || !same_ports {
                continue;
            }
            let kept: Vec<Endpoint> = array_at(h, "/endpoints")
                .iter()
                .filter_map(|e| wanted.remove(&endpoint_key(e)))
                .collect();
            if kept.is_empty() {
                continue;
            }
            used.insert(i);
            out.push((
                Some(i),
                Slice {
                    endpoints: kept,
                    ..group.clone()
                },
            ));
        }
        let mut rest = wanted.into_values();
        for (_, slice) in &mut out[first..] {
            while slice.endpoints.len() < max {
                let Some(e) = rest.next() else { break };
                slice.endpoints.push(e);
            }
        }
        let rest: Vec<Endpoint> = rest.collect();
        let placeholder = group.endpoints.is_empty();
        for chunk in rest.chunks(max) {
            out.push((
                None,
                Slice {
                    endpoints: chunk.to_vec(),
                    ..group.clone()
                },
            ));
        }
        if placeholder {
            // Kept as it is when a stored slice is it already.
            let held = (0..have.len()).find(|i| !used.contains(i) && group.is_held_by(&have[*i]));
            if let Some(i) = held {
                used.insert(i);
            }
            out.push((held, group));
        }
    }
    // Rather than make a slice and delete another, rewrite the one to delete.
    for (at, slice) in &mut out {
        if at.is_none() {
            *at = (0..have.len()).find(|i| {
                !used.contains(i) && str_at(&have[*i], "/addressType") == slice.address_type
            });
            if let Some(i) = *at {
                used.insert(i);
            }
        }
    }
    out
}

/// The labels of a Service's slices (and Endpoints): the Service's own, and whether it
/// is headless.
pub(super) fn service_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    if headless {
        labels.insert(HEADLESS.into(), String::new());
    } else {
        labels.remove(HEADLESS);
    }
    labels
}

fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = service_labels(svc);
    labels.insert(SERVICE_NAME.into(), svc.metadata.name().into());
    labels.insert(MANAGED_BY.into(), CONTROLLER_NAME.into());
    labels
}

fn owner_ref(svc: &Service) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "name": svc.metadata.name(), "uid": svc.metadata.uid(),
           "controller": true, "blockOwnerDeletion": true})
}

/// Whether the slice `have` is one this controller keeps for `svc`.
fn is_ours(have: &Value, svc: &Service) -> bool {
    let labels = &have["metadata"]["labels"];
    labels[MANAGED_BY] == CONTROLLER_NAME && labels[SERVICE_NAME] == svc.metadata.name()
}

/// What the slices a controller keeps for one object carry besides their content.
#[derive(Default)]
pub(super) struct SliceMeta {
    /// The name of a new slice starts so.
    pub generate_name: String,
    pub labels: Value,
    /// Set and compared only when given (the mirroring controller copies them).
    pub annotations: Option<Value>,
    /// The controller reference to the object they belong to.
    pub owner: Value,
}

/// Carries out `plan` ([`arrange`]) over the stored slices `have` in `ns`: a stored
/// slice is rewritten only when its content or `meta` differ, a new one made, and the
/// stored ones the plan names nowhere deleted (one gone already, or changed since it
/// was read, is left to the next round).
pub(super) async fn write_plan(
    client: &Client,
    res: &Resource,
    ns: &str,
    have: &[Value],
    plan: Vec<(Option<usize>, Slice)>,
    meta: &SliceMeta,
) -> Result<()> {
    let owners = json!([meta.owner]);
    let annotations_of = |v: &Value| match &v["metadata"]["annotations"] {
        Value::Null => json!({}),
        a => a.clone(),
    };
    let taken: BTreeSet<usize> = plan.iter().filter_map(|(i, _)| *i).collect();
    for (at, slice) in plan {
        match at {
            Some(i) => {
                let h = &have[i];
                if slice.is_held_by(h)
                    && h["metadata"]["labels"] == meta.labels
                    && meta
                        .annotations
                        .as_ref()
                        .is_none_or(|a| annotations_of(h) == *a)
                    && h["metadata"]["ownerReferences"] == owners
                {
                    continue;
                }
                let mut obj = h.clone();
                obj["metadata"]["labels"] = meta.labels.clone();
                if let Some(a) = &meta.annotations {
                    obj["metadata"]["annotations"] = a.clone();
                }
                obj["metadata"]["ownerReferences"] = owners.clone();
                obj["addressType"] = json!(slice.address_type);
                obj["ports"] = slice.json_ports();
                obj["endpoints"] = slice.json_endpoints();
                client.update(res, &obj).await?;
            }
            None => {
                let mut obj = json!({
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "generateName": meta.generate_name,
                        "namespace": ns,
                        "labels": meta.labels,
                        "ownerReferences": owners,
                    },
                    "addressType": slice.address_type,
                    "ports": slice.json_ports(),
                    "endpoints": slice.json_endpoints(),
                });
                if let Some(a) = &meta.annotations {
                    obj["metadata"]["annotations"] = a.clone();
                }
                client.create(res, Some(ns), &obj).await?;
            }
        }
    }
    for (i, extra) in have.iter().enumerate() {
        if taken.contains(&i) {
            continue;
        }
        let params = DeleteParams {
            uid: Some(str_at(extra, "/metadata/uid").to_string()),
            ..DeleteParams::default()
        };
        match client
            .delete(res, Some(ns), str_at(extra, "/metadata/name"), &params)
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

struct Controller {
    client: Client,
    services: Informer,
    pods: Informer,
    slices: Informer,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.services.get(&key) else {
            // Its slices go with it, by their owner reference.
            return Ok(Action::Done);
        };
        let svc: Service = decode(&obj)?;
        if svc.metadata.is_deleting() || selector_of(&svc).is_none() {
            return Ok(Action::Done);
        }
        let (ns, _) = split_key(&key);
        let ns = ns.unwrap_or_default();
        let pods = self.pods.list_namespace(ns);
        let want = desired(&svc, &selected(&svc, &pods), MAX_ENDPOINTS_PER_SLICE);
        let res = self.slices.resource();
        let selector = format!(
            "{SERVICE_NAME}={},{MANAGED_BY}={CONTROLLER_NAME}",
            svc.metadata.name()
        );
        let params = ListParams {
            label_selector: Some(selector),
            field_selector: None,
        };
        let mut have: Vec<Value> = self
            .client
            .list(res, Some(ns), &params)
            .await?
            .items
            .into_iter()
            .filter(|s| is_ours(s, &svc) && str_at(s, "/metadata/deletionTimestamp").is_empty())
            .collect();
        have.sort_by(|a, b| str_at(a, "/metadata/name").cmp(str_at(b, "/metadata/name")));
        let meta = SliceMeta {
            generate_name: format!("{}-", svc.metadata.name()),
            labels: json!(slice_labels(&svc)),
            annotations: None,
            owner: owner_ref(&svc),
        };
        let plan = arrange(&have, want, MAX_ENDPOINTS_PER_SLICE);
        write_plan(&self.client, res, ns, &have, plan, &meta).await?;
        Ok(Action::Done)
    }
}

/// A pod's change queues the Services that select it, before and after.
pub(super) fn pod_to_services(
    services: &Informer,
) -> impl Fn(Change<'_>, &super::Queue) + Send + Sync + 'static {
    let selecting = runtime::selecting(services, |svc| {
        Selector::from_map(&labels::map_at(svc, "/spec/selector"))
    });
    move |change, queue| {
        let mut keys = BTreeSet::new();
        if let Change::Updated { old, .. } = change {
            keys.extend(selecting(old));
        }
        keys.extend(selecting(change.object()));
        for key in keys {
            queue.add(key);
        }
    }
}

/// Registers the endpoint slice controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let services = ctx.informers.get(catalog::of(Kind::Service));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let slices = ctx.informers.get(catalog::of(Kind::EndpointSlice));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        services: services.clone(),
        pods: pods.clone(),
        slices: slices.clone(),
    });
    runtime::Controller::new("endpointslice")
        .reconciles(&services)
        .watches(&pods, pod_to_services(&services))
        .owns(&slices, SERVICE)
        .workers(2)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn service(spec: Value) -> Service {
        decode(
            &json!({"metadata": {"name": "web", "namespace": "default", "uid": "s1"},
                       "spec": spec}),
        )
        .unwrap()
    }

    pub(crate) fn pod(name: &str, ip: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"),
                         "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    fn conditions(e: &Endpoint) -> (bool, bool, bool) {
        let c = e.conditions.clone().unwrap();
        (c.ready.unwrap(), c.serving.unwrap(), c.terminating.unwrap())
    }

    #[test]
    fn conditions_follow_readiness_and_termination() {
        let svc = service(json!({"selector": {"app": "web"}}));
        let ready = pod("a", "10.0.0.1", true);
        let mut leaving = pod("b", "10.0.0.2", true);
        leaving["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert_eq!(
            conditions(&endpoint_of(&ready, &svc, "10.0.0.1")),
            (true, true, false)
        );
        assert_eq!(
            conditions(&endpoint_of(&leaving, &svc, "10.0.0.2")),
            (false, true, true)
        );
        let unready = pod("c", "10.0.0.3", false);
        assert_eq!(
            conditions(&endpoint_of(&unready, &svc, "10.0.0.3")),
            (false, false, false)
        );
        let publish =
            service(json!({"selector": {"app": "web"}, "publishNotReadyAddresses": true}));
        assert_eq!(
            conditions(&endpoint_of(&leaving, &publish, "10.0.0.2")),
            (true, true, true)
        );
        let e = endpoint_of(&ready, &svc, "10.0.0.1");
        assert_eq!(e.node_name.as_deref(), Some("n1"));
        assert_eq!(e.target_ref.unwrap().uid.as_deref(), Some("u-a"));
        assert_eq!(e.hostname, None);
    }

    #[test]
    fn a_pod_in_the_services_subdomain_gets_its_hostname() {
        let svc = service(json!({"selector": {"app": "web"}, "clusterIP": "None"}));
        let mut p = pod("a", "10.0.0.1", true);
        p["spec"]["hostname"] = json!("a-0");
        p["spec"]["subdomain"] = json!("other");
        assert_eq!(hostname_for(&p, &svc), None);
        p["spec"]["subdomain"] = json!("web");
        assert_eq!(hostname_for(&p, &svc).as_deref(), Some("a-0"));
    }

    #[test]
    fn target_ports_resolve_by_number_and_by_container_port_name() {
        let svc = service(json!({"selector": {"app": "web"}, "ports": [
            {"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"},
            {"name": "raw", "port": 81, "protocol": "TCP", "targetPort": 9000},
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"},
            {"name": "gone", "port": 82, "protocol": "TCP", "targetPort": "nope"},
            {"name": "dns-tcp", "port": 54, "protocol": "TCP", "targetPort": "dns"}]}));
        let ports = ports_of(&pod("a", "10.0.0.1", true), &svc);
        let got: Vec<(String, i32, String)> = ports
            .into_iter()
            .map(|p| (p.name.unwrap(), p.port.unwrap(), p.protocol.unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("web".to_string(), 8080, "TCP".to_string()),
                ("raw".to_string(), 9000, "TCP".to_string()),
                ("dns".to_string(), 53, "UDP".to_string()),
            ]
        );
    }

    #[test]
    fn endpoints_are_cut_into_slices_of_at_most_max() {
        let svc = service(json!({"selector": {"app": "web"},
            "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 8080}]}));
        let pods: Vec<Value> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i:03}"),
                    &format!("10.0.{}.{}", i / 200, i % 200 + 1),
                    i % 2 == 0,
                )
            })
            .collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let slices = desired(&svc, &refs, 100);
        let sizes: Vec<usize> = slices.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert!(
            slices
                .iter()
                .all(|s| s.address_type == "IPv4" && s.ports.len() == 1)
        );
        assert_eq!(
            slices[0].endpoints[0]
                .target_ref
                .as_ref()
                .unwrap()
                .name
                .as_deref(),
            Some("p000")
        );
    }

    #[test]
    fn dual_stack_pods_give_a_slice_per_family_of_the_service() {
        let mut a = pod("a", "10.42.0.2", true);
        a["status"]["podIPs"] = json!([{"ip": "10.42.0.2"}, {"ip": "fd42::2"}]);
        let refs = [&a];
        let families = |svc: &Service| -> Vec<(&'static str, Vec<String>)> {
            desired(svc, &refs, 100)
                .into_iter()
                .map(|s| {
                    let ips = s
                        .endpoints
                        .iter()
                        .flat_map(|e| e.addresses.clone())
                        .collect();
                    (s.address_type, ips)
                })
                .collect()
        };
        // A single-stack IPv4 Service (berth's Services all are): IPv4 slices only.
        let v4 = service(json!({"selector": {"app": "web"}, "ipFamilies": ["IPv4"]}));
        assert_eq!(families(&v4), [("IPv4", vec!["10.42.0.2".to_string()])]);
        // A headless Service asking for both families: one slice of each.
        let dual = service(json!({"selector": {"app": "web"}, "clusterIP": "None",
            "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]}));
        assert_eq!(
            families(&dual),
            [
                ("IPv4", vec!["10.42.0.2".to_string()]),
                ("IPv6", vec!["fd42::2".to_string()])
            ]
        );
    }

    /// A stored slice (as the server keeps it) of `slice`.
    fn stored(slice: &Slice) -> Value {
        json!({"addressType": slice.address_type, "ports": slice.json_ports(),
               "endpoints": slice.json_endpoints()})
    }

    #[test]
    fn endpoints_stay_in_their_slices_and_new_ones_fill_the_room_there_is() {
        let svc = service(json!({"selector": {"app": "web"},
            "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 8080}]}));
        let pods: Vec<Value> = (1..=150)
            .map(|i| {
                pod(
                    &format!("p{i:03}"),
                    &format!("10.0.{}.{}", i / 200, i % 200 + 1),
                    true,
                )
            })
            .collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let have: Vec<Value> = desired(&svc, &refs, 100).iter().map(stored).collect();
        assert_eq!(have.len(), 2);
        // A pod that sorts first joins the slice with room; the full one is untouched.
        let first = pod("p000", "10.0.9.9", true);
        let more: Vec<&Value> = refs.iter().copied().chain([&first]).collect();
        let plan = arrange(&have, desired(&svc, &more, 100), 100);
        let changed: Vec<Option<usize>> = plan
            .iter()
            .filter(|(at, s)| at.is_none_or(|i| !s.is_held_by(&have[i])))
            .map(|(at, _)| *at)
            .collect();
        assert_eq!(changed, [Some(1)]);
        assert_eq!(
            plan.iter().map(|(_, s)| s.endpoints.len()).sum::<usize>(),
            151
        );
        // A pod gone leaves its slice only; with every pod gone, one slice is kept empty.
        let fewer: Vec<&Value> = refs[1..].to_vec();
        let plan = arrange(&have, desired(&svc, &fewer, 100), 100);
        let changed: Vec<usize> = plan
            .iter()
            .filter(|(at, s)| !s.is_held_by(&have[at.unwrap()]))
            .map(|(at, _)| at.unwrap())
            .collect();
        assert_eq!(changed, [0]);
        let plan = arrange(&have, desired(&svc, &[], 100), 100);
        assert_eq!(plan.len(), 1);
        assert!(plan[0].0.is_some() && plan[0].1.endpoints.is_empty());
    }

    #[test]
    fn pods_without_address_or_ended_are_no_endpoints_and_none_leaves_a_placeholder() {
        let svc = service(json!({"selector": {"app": "web"}}));
        let mut done = pod("a", "10.0.0.1", false);
        done["status"]["phase"] = json!("Succeeded");
        let waiting = pod("b", "", false);
        let slices = desired(&svc, &[&done, &waiting], 100);
        assert_eq!(
            slices,
            [Slice {
                address_type: "IPv4",
                ports: vec![],
                endpoints: vec![]
            }]
        );
    }

    #[test]
    fn pods_whose_named_ports_differ_go_to_different_slices() {
        let svc = service(json!({"selector": {"app": "web"},
            "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"}]}));
        let a = pod("a", "10.0.0.1", true);
        let mut b = pod("b", "10.0.0.2", true);
        b["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(9090);
        let slices = desired(&svc, &[&a, &b], 100);
        assert_eq!(slices.len(), 2);
        assert_ne!(slices[0].ports, slices[1].ports);
    }

    #[test]
    fn a_service_without_selector_selects_nothing() {
        let svc = service(json!({}));
        assert!(selector_of(&svc).is_none());
        let pods = vec![Arc::new(pod("a", "10.0.0.1", true))];
        assert!(selected(&svc, &pods).is_empty());
    }
}
