//! The endpoints controller: the legacy core/v1 Endpoints of each Service with a
//! selector, as kube-controller-manager's (`pkg/controller/endpoint`) keeps them. One
//! Endpoints named like the Service: each selected pod with an address of the Service's
//! first IP family is a ready address (or a not-ready one, when the pod is not Ready and
//! the Service does not publish such addresses), with the Service's ports as that pod
//! serves them; addresses with the same ports make one subset (`RepackSubsets`).
//! Terminating pods are left out unless the Service publishes not-ready addresses. Past
//! 1000 addresses the rest are dropped (ready ones kept first) and the Endpoints say so
//! in `endpoints.kubernetes.io/over-capacity: truncated`.
//!
//! The Endpoints carry the Service's labels and `endpoints.kubernetes.io/managed-by:
//! endpoint-controller`; they are written only when they differ, and deleted with their
//! Service when this controller manages them. A Service without selector is left alone:
//! the `kubernetes` Service's Endpoints are kept by [`super::apiservice`]. The current
//! Endpoints are read through the client, so a write of a moment ago is seen.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Service};
use serde_json::{Value, json};

use super::endpointslice::{
    endpoint_of, is_terminal, pod_ips, pod_to_services, ports_of, selected, selector_of,
    service_labels,
};
use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::Informer;
use crate::client::{Client, DeleteParams, Kind, catalog, key_of, split_key};
use crate::types::json::str_at;
use crate::types::meta::Meta;

/// The most addresses one Endpoints holds (`maxCapacity`).
pub const MAX_CAPACITY: usize = 1000;
/// The annotation that says addresses were dropped, and its value.
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// The label naming who manages an Endpoints, and this controller's value of it.
pub const MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";
pub const CONTROLLER_NAME: &str = "endpoint-controller";

/// The subsets `svc` should have for the pods it selects (`pods`), and whether some
/// addresses were dropped past [`MAX_CAPACITY`].
pub fn subsets(svc: &Service, pods: &[&Value]) -> (Vec<EndpointSubset>, bool) {
    let spec = svc.spec.clone().unwrap_or_default();
    let publish = spec.publish_not_ready_addresses.unwrap_or(false);
    let family = spec
        .ip_families
        .as_ref()
        .and_then(|f| f.first())
        .map_or("IPv4", String::as_str);
    let has_ports = spec.ports.as_ref().is_some_and(|p| !p.is_empty());
    // The ports (as JSON, sorted) → (ports, ready, not ready).
    type Group = (
        Vec<EndpointPort>,
        Vec<EndpointAddress>,
        Vec<EndpointAddress>,
    );
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for pod in pods {
        let terminating = !pod["metadata"]["deletionTimestamp"].is_null();
        if is_terminal(pod) || (terminating && !publish) {
            continue;
        }
        let want_v6 = family == "IPv6";
        let Some(ip) = pod_ips(pod)
            .into_iter()
            .find(|ip| ip.contains(':') == want_v6)
        else {
            continue;
        };
        let e = endpoint_of(pod, svc, ip);
        let address = EndpointAddress {
            ip: ip.to_string(),
            hostname: e.hostname,
            node_name: e.node_name,
            target_ref: e.target_ref,
        };
        let mut ports: Vec<EndpointPort> = ports_of(pod, svc)
            .into_iter()
            .map(|p| EndpointPort {
                name: p.name.filter(|n| !n.is_empty()),
                port: p.port.unwrap_or_default(),
                protocol: p.protocol,
                app_protocol: p.app_protocol,
            })
            .collect();
        if has_ports && ports.is_empty() {
            // None of the Service's target ports is on this pod.
            continue;
        }
        ports.sort_by(|a, b| (&a.name, a.port).cmp(&(&b.name, b.port)));
        let key = serde_json::to_string(&ports).unwrap_or_default();
        let group = groups
            .entry(key)
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if publish || crate::types::is_pod_ready(pod) {
            group.1.push(address);
        } else {
            group.2.push(address);
        }
    }
    let mut room = MAX_CAPACITY;
    let mut truncated = false;
    let mut keep = |list: &mut Vec<EndpointAddress>| {
        list.sort_by(|a, b| a.ip.cmp(&b.ip));
        if list.len() > room {
            list.truncate(room);
            truncated = true;
        }
        room -= list.len();
    };
    // Ready addresses first, then the others, while there is room.
    for (_, ready, _) in groups.values_mut() {
        keep(ready);
    }
    for (_, _, not_ready) in groups.values_mut() {
        keep(not_ready);
    }
    let out = groups
        .into_values()
        .filter(|(_, ready, not_ready)| !ready.is_empty() || !not_ready.is_empty())
        .map(|(ports, ready, not_ready)| EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then_some(ports),
        })
        .collect();
    (out, truncated)
}

struct Controller {
    client: Client,
    services: Informer,
    pods: Informer,
    endpoints: Informer,
}

fn is_ours(ep: &Value) -> bool {
    ep["metadata"]["labels"][MANAGED_BY] == CONTROLLER_NAME
}

impl Controller {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let (ns, name) = split_key(&key);
        let ns = ns.unwrap_or_default();
        let res = self.endpoints.resource();
        let current = match self.client.get(res, Some(ns), name).await {
            Ok(ep) => Some(ep),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        };
        let Some(obj) = self.services.get(&key) else {
            // The Service is gone: so are the Endpoints this controller kept for it.
            if let Some(ep) = current.filter(is_ours) {
                let params = DeleteParams {
                    uid: Some(str_at(&ep, "/metadata/uid").to_string()),
                    ..DeleteParams::default()
                };
                match self.client.delete(res, Some(ns), name, &params).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(Action::Done);
        };
        let svc: Service = decode(&obj)?;
        if svc.metadata.is_deleting() || selector_of(&svc).is_none() {
            return Ok(Action::Done);
        }
        let pods = self.pods.list_namespace(ns);
        let (subsets, truncated) = subsets(&svc, &selected(&svc, &pods));
        let subsets = serde_json::to_value(&subsets).unwrap_or(Value::Null);
        let mut labels = service_labels(&svc);
        labels.insert(MANAGED_BY.into(), CONTROLLER_NAME.into());
        let labels = json!(labels);
        let Some(mut ep) = current else {
            let mut ep = json!({
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "subsets": subsets,
            });
            if truncated {
                ep["metadata"]["annotations"] = json!({OVER_CAPACITY: "truncated"});
            }
            return match self.client.create(res, Some(ns), &ep).await {
                // Made meanwhile: its change queues this key again.
                Err(e) if e.is_already_exists() => Ok(Action::Done),
                other => other.map(|_| Action::Done).map_err(Into::into),
            };
        };
        let have_subsets = match &ep["subsets"] {
            Value::Null => json!([]),
            s => s.clone(),
        };
        let have_truncated = ep["metadata"]["annotations"][OVER_CAPACITY] == "truncated";
        if have_subsets == subsets
            && ep["metadata"]["labels"] == labels
            && have_truncated == truncated
        {
            return Ok(Action::Done);
        }
        ep["subsets"] = subsets;
        ep["metadata"]["labels"] = labels;
        if truncated {
            ep["metadata"]["annotations"][OVER_CAPACITY] = json!("truncated");
        } else if let Some(a) = ep["metadata"]["annotations"].as_object_mut() {
            a.remove(OVER_CAPACITY);
        }
        self.client.update(res, &ep).await?;
        Ok(Action::Done)
    }
}

/// Registers the endpoints controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let services = ctx.informers.get(catalog::of(Kind::Service));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let endpoints = ctx.informers.get(catalog::of(Kind::Endpoints));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        services: services.clone(),
        pods: pods.clone(),
        endpoints: endpoints.clone(),
    });
    runtime::Controller::new("endpoint")
        .reconciles(&services)
        .watches(&pods, pod_to_services(&services))
        // Endpoints changed by someone else are set right again.
        .watches(&endpoints, |change, queue| {
            if is_ours(change.object()) {
                queue.add(key_of(change.object()));
            }
        })
        .workers(2)
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Service {
        decode(&json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})).unwrap()
    }

    fn pod(name: &str, ip: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    fn ips(list: &Option<Vec<EndpointAddress>>) -> Vec<&str> {
        list.iter().flatten().map(|a| a.ip.as_str()).collect()
    }

    #[test]
    fn ready_and_not_ready_pods_share_a_subset_and_terminating_ones_are_left_out() {
        let svc = service(
            json!({"ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"}]}),
        );
        let mut leaving = pod("c", "10.0.0.3", true);
        leaving["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        let (pods, waiting) = (
            [
                pod("b", "10.0.0.2", true),
                pod("a", "10.0.0.1", false),
                leaving,
            ],
            pod("d", "", true),
        );
        let refs: Vec<&Value> = pods.iter().chain([&waiting]).collect();
        let (subsets, truncated) = subsets(&svc, &refs);
        assert!(!truncated);
        assert_eq!(subsets.len(), 1);
        assert_eq!(ips(&subsets[0].addresses), ["10.0.0.2"]);
        assert_eq!(ips(&subsets[0].not_ready_addresses), ["10.0.0.1"]);
        let port = &subsets[0].ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("web"), 8080));

        let publish = service(json!({"publishNotReadyAddresses": true,
            "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 9000}]}));
        let (subsets, _) = super::subsets(&publish, &refs);
        assert_eq!(
            ips(&subsets[0].addresses),
            ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        );
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 9000);
    }

    #[test]
    fn past_1000_addresses_ready_ones_are_kept_and_the_rest_dropped() {
        let svc = service(json!({"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}));
        let pods: Vec<Value> = (0..1100)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.{}.{}.1", i / 200, i % 200),
                    i < 100,
                )
            })
            .collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let (subsets, truncated) = subsets(&svc, &refs);
        assert!(truncated);
        assert_eq!(ips(&subsets[0].addresses).len(), 100);
        assert_eq!(ips(&subsets[0].not_ready_addresses).len(), 900);
    }

    #[test]
    fn a_headless_service_without_ports_lists_addresses_alone() {
        let svc = service(json!({"clusterIP": "None"}));
        let p = pod("a", "10.0.0.1", true);
        let (subsets, _) = subsets(&svc, &[&p]);
        assert_eq!(ips(&subsets[0].addresses), ["10.0.0.1"]);
        assert!(subsets[0].ports.is_none());
    }
}
