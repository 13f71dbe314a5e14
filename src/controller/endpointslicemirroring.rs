//! The endpoint slice mirroring controller, as kube-controller-manager's
//! (`pkg/controller/endpointslicemirroring`): the Endpoints that a user (or another
//! controller) writes for a Service without selector are mirrored into EndpointSlices,
//! so everything that reads slices — berth's service proxy and DNS among them — serves
//! such a Service too (the usual way to give an outside database a name and a cluster
//! IP).
//!
//! An Endpoints is mirrored when a Service of its name exists without selector, and
//! the Endpoints is neither labelled `endpointslice.kubernetes.io/skip-mirror: "true"`
//! (berth's own Services' Endpoints are) nor a leader-election record. Each address
//! becomes an endpoint (`ready` for `addresses`, not for `notReadyAddresses`, with its
//! node name, host name and target), at most [`MAX_PER_SUBSET`] of each subset;
//! endpoints are grouped by address type and ports and cut into slices of at most
//! [`MAX_PER_SUBSET`], arranged over the existing ones as the endpoint slice
//! controller does ([`super::endpointslice::arrange`]). Slices are labelled with the
//! Endpoints' labels, `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io`,
//! carry its annotations but the last-change trigger time and the last applied
//! configuration, and are controlled by the Endpoints; when mirroring stops (the
//! Endpoints or Service goes, the Service gains a selector) they are deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
use serde_json::{Value, json};

use super::endpointslice::{
    MANAGED_BY, SERVICE_NAME, Slice, SliceMeta, arrange, selector_of, write_plan,
};
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, Kind, ListParams, catalog, split_key};
use crate::types::json::str_at;
use crate::types::meta::Meta;

/// This controller's value of the managed-by label.
pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
/// The label that keeps an Endpoints from being mirrored.
pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// The most addresses mirrored of one subset, and the most endpoints of one slice
/// (`--mirroring-max-endpoints-per-subset`).
pub const MAX_PER_SUBSET: usize = 1000;
/// Annotations that stay on the Endpoints.
const NOT_COPIED: [&str; 2] = [
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];
/// Marks an Endpoints used as a leader-election lock.
const LEADER_RECORD: &str = "control-plane.alpha.kubernetes.io/leader";

/// Whether `endpoints` is to be mirrored, its Service being `svc`.
pub fn mirrored(endpoints: &Endpoints, svc: Option<&Service>) -> bool {
    let labels = endpoints.metadata.labels.as_ref();
    let skip = labels
        .and_then(|l| l.get(SKIP_MIRROR))
        .is_some_and(|v| v == "true");
    let leader = endpoints
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(LEADER_RECORD));
    let Some(svc) = svc else { return false };
    !skip && !leader && selector_of(svc).is_none() && !svc.metadata.is_deleting()
}

/// An Endpoints address as a slice's endpoint, and its address type (`None` for an
/// address that is no IP).
fn endpoint_of(address: &EndpointAddress, ready: bool) -> Option<(&'static str, Endpoint)> {
    let ip: std::net::IpAddr = address.ip.parse().ok()?;
    let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let endpoint = Endpoint {
        // Written again, in case the Endpoints' form was irregular.
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..EndpointConditions::default()
        }),
        node_name: address.node_name.clone(),
        hostname: address.hostname.clone().filter(|h| !h.is_empty()),
        target_ref: address.target_ref.clone(),
        ..Endpoint::default()
    };
    Some((family, endpoint))
}

/// The slices mirroring `endpoints`: its addresses grouped by address type and ports,
/// at most [`MAX_PER_SUBSET`] of each subset, cut every `max`.
pub fn desired(endpoints: &Endpoints, max: usize) -> Vec<Slice> {
    type Group = (Vec<EndpointPort>, Vec<Endpoint>);
    let mut groups: BTreeMap<(&'static str, String), Group> = BTreeMap::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let ports_key = serde_json::to_string(&ports).unwrap_or_default();
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| (a, false));
        for (address, ready) in ready.chain(not_ready).take(MAX_PER_SUBSET) {
            let Some((family, endpoint)) = endpoint_of(address, ready) else {
                continue;
            };
            groups
                .entry((family, ports_key.clone()))
                .or_insert_with(|| (ports.clone(), Vec::new()))
                .1
                .push(endpoint);
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
    out
}

/// The labels of a mirrored slice: the Endpoints' own, the Service's name and this
/// controller as its manager.
fn slice_labels(endpoints: &Endpoints) -> BTreeMap<String, String> {
    let mut labels = endpoints.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME.into(), endpoints.metadata.name().into());
    labels.insert(MANAGED_BY.into(), CONTROLLER_NAME.into());
    labels
}

/// The annotations of a mirrored slice: the Endpoints' own but [`NOT_COPIED`].
fn slice_annotations(endpoints: &Endpoints) -> BTreeMap<String, String> {
    let mut annotations = endpoints.metadata.annotations.clone().unwrap_or_default();
    for key in NOT_COPIED {
        annotations.remove(key);
    }
    annotations
}

struct Controller {
    client: Client,
    services: Informer,
    endpoints: Informer,
    slices: Informer,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let (ns, name) = split_key(&key);
        let ns = ns.unwrap_or_default();
        let svc: Option<Service> = self.services.get(&key).map(|s| decode(&s)).transpose()?;
        let endpoints: Option<Endpoints> =
            self.endpoints.get(&key).map(|e| decode(&e)).transpose()?;
        let res = self.slices.resource();
        let params = ListParams {
            label_selector: Some(format!(
                "{SERVICE_NAME}={name},{MANAGED_BY}={CONTROLLER_NAME}"
            )),
            field_selector: None,
        };
        let mut have: Vec<Value> = self
            .client
            .list(res, Some(ns), &params)
            .await?
            .items
            .into_iter()
            .filter(|s| str_at(s, "/metadata/deletionTimestamp").is_empty())
            .collect();
        have.sort_by(|a, b| str_at(a, "/metadata/name").cmp(str_at(b, "/metadata/name")));
        let (want, meta) = match &endpoints {
            Some(e) if mirrored(e, svc.as_ref()) && !e.metadata.is_deleting() => (
                desired(e, MAX_PER_SUBSET),
                SliceMeta {
                    generate_name: format!("{name}-"),
                    labels: json!(slice_labels(e)),
                    annotations: Some(json!(slice_annotations(e))),
                    owner: json!({"apiVersion": "v1", "kind": "Endpoints",
                        "name": e.metadata.name(), "uid": e.metadata.uid(),
                        "controller": true, "blockOwnerDeletion": true}),
                },
            ),
            _ => (Vec::new(), SliceMeta::default()),
        };
        // Nothing wanted: every mirrored slice goes.
        let plan = if want.is_empty() {
            Vec::new()
        } else {
            arrange(&have, want, MAX_PER_SUBSET)
        };
        write_plan(&self.client, res, ns, &have, plan, &meta).await?;
        Ok(Action::Done)
    }
}

/// A mirrored slice's change queues its Endpoints (by the service-name label: the
/// owner may be gone already).
fn slice_to_endpoints(change: Change<'_>, queue: &super::Queue) {
    let slice = change.object();
    if slice["metadata"]["labels"][MANAGED_BY] != CONTROLLER_NAME {
        return;
    }
    let name = slice["metadata"]["labels"][SERVICE_NAME]
        .as_str()
        .unwrap_or_default();
    if !name.is_empty() {
        queue.add(format!("{}/{name}", str_at(slice, "/metadata/namespace")));
    }
}

/// Registers the mirroring controller's handlers and starts its worker.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let services = ctx.informers.get(catalog::of(Kind::Service));
    let endpoints = ctx.informers.get(catalog::of(Kind::Endpoints));
    let slices = ctx.informers.get(catalog::of(Kind::EndpointSlice));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        services: services.clone(),
        endpoints: endpoints.clone(),
        slices: slices.clone(),
    });
    // A Service and its Endpoints share a key: either's change queues it.
    runtime::Controller::new("endpointslicemirroring")
        .reconciles(&endpoints)
        .reconciles(&services)
        .watches(&slices, slice_to_endpoints)
        .workers(1)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(v: Value) -> Endpoints {
        decode(&v).unwrap()
    }

    fn service(selector: Option<Value>) -> Service {
        let mut v = json!({"metadata": {"name": "db", "namespace": "default"}, "spec": {}});
        if let Some(s) = selector {
            v["spec"]["selector"] = s;
        }
        decode(&v).unwrap()
    }

    #[test]
    fn only_endpoints_of_a_service_without_selector_are_mirrored() {
        let e = endpoints(json!({"metadata": {"name": "db", "namespace": "default"}}));
        assert!(mirrored(&e, Some(&service(None))));
        assert!(!mirrored(&e, None));
        assert!(!mirrored(&e, Some(&service(Some(json!({"app": "db"}))))));
        let skip = endpoints(json!({"metadata": {"name": "db", "namespace": "default",
            "labels": {SKIP_MIRROR: "true"}}}));
        assert!(!mirrored(&skip, Some(&service(None))));
        let leader = endpoints(json!({"metadata": {"name": "db", "namespace": "default",
            "annotations": {LEADER_RECORD: "{}"}}}));
        assert!(!mirrored(&leader, Some(&service(None))));
    }

    #[test]
    fn addresses_become_endpoints_grouped_by_family_and_ports() {
        let e = endpoints(json!({
            "metadata": {"name": "db", "namespace": "default"},
            "subsets": [
                {"addresses": [{"ip": "10.1.2.3", "hostname": "a", "nodeName": "n1"},
                               {"ip": "fd00::1"}, {"ip": "not-an-ip"}],
                 "notReadyAddresses": [{"ip": "10.1.2.4"}],
                 "ports": [{"name": "pg", "port": 5432}]},
                {"addresses": [{"ip": "10.1.2.5"}], "ports": [{"name": "pg", "port": 5432}]},
                {"addresses": [{"ip": "10.1.2.6"}], "ports": [{"port": 53, "protocol": "UDP"}]},
            ],
        }));
        let slices = desired(&e, MAX_PER_SUBSET);
        type Summary<'a> = (&'a str, Vec<(String, bool)>, Vec<(String, i32, String)>);
        let summary: Vec<Summary> = slices
            .iter()
            .map(|s| {
                (
                    s.address_type,
                    s.endpoints
                        .iter()
                        .map(|e| {
                            (
                                e.addresses[0].clone(),
                                e.conditions.as_ref().unwrap().ready.unwrap(),
                            )
                        })
                        .collect(),
                    s.ports
                        .iter()
                        .map(|p| {
                            (
                                p.name.clone().unwrap(),
                                p.port.unwrap(),
                                p.protocol.clone().unwrap(),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        let pg = vec![("pg".to_string(), 5432, "TCP".to_string())];
        let dns = vec![(String::new(), 53, "UDP".to_string())];
        assert_eq!(
            summary,
            vec![
                ("IPv4", vec![("10.1.2.6".into(), true)], dns),
                (
                    "IPv4",
                    vec![
                        ("10.1.2.3".into(), true),
                        ("10.1.2.4".into(), false),
                        ("10.1.2.5".into(), true)
                    ],
                    pg.clone()
                ),
                ("IPv6", vec![("fd00::1".into(), true)], pg),
            ]
        );
        let first = &slices[1].endpoints[0];
        assert_eq!(
            (first.hostname.as_deref(), first.node_name.as_deref()),
            (Some("a"), Some("n1"))
        );
    }

    #[test]
    fn a_subset_is_mirrored_up_to_its_limit_and_slices_are_cut() {
        let addresses: Vec<Value> = (0..1200)
            .map(|i| json!({"ip": format!("10.9.{}.{}", i / 250, i % 250 + 1)}))
            .collect();
        let e = endpoints(json!({
            "metadata": {"name": "db", "namespace": "default"},
            "subsets": [{"addresses": addresses, "ports": [{"port": 80}]}],
        }));
        let slices = desired(&e, 400);
        assert_eq!(
            slices.iter().map(|s| s.endpoints.len()).collect::<Vec<_>>(),
            [400, 400, 200]
        );
    }

    #[test]
    fn labels_and_annotations_are_carried_but_the_trigger_time() {
        let e = endpoints(json!({"metadata": {"name": "db", "namespace": "default",
            "labels": {"team": "x", MANAGED_BY: "someone"},
            "annotations": {"note": "y", NOT_COPIED[0]: "t", NOT_COPIED[1]: "{}"}}}));
        let labels = slice_labels(&e);
        assert_eq!(labels["team"], "x");
        assert_eq!(labels[MANAGED_BY], CONTROLLER_NAME);
        assert_eq!(labels[SERVICE_NAME], "db");
        let annotations = slice_annotations(&e);
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["note"], "y");
    }
}
