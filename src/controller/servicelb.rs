//! ServiceLB: the load balancer of a cluster without a cloud, as k3s's ServiceLB
//! (klipper-lb) gives one, without a pod per port. A `LoadBalancer` Service that names
//! no `loadBalancerClass` gets the nodes' InternalIP addresses as its
//! `status.loadBalancer.ingress` (`ipMode: VIP`), and the service proxy (`net::proxy`)
//! serves it on those addresses. A Service that stops being a `LoadBalancer` has that
//! ingress cleared; an ingress of a Service of another type that this controller did not
//! write (a client may set any status) is left alone, as Kubernetes' service controller
//! leaves Services it never gave a load balancer; one with a class is another
//! controller's.
//!
//! Services are reconciled by key; a Node's change queues every `LoadBalancer` Service,
//! since their ingress lists the nodes' addresses.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Node, Service};
use serde_json::json;

use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::Informer;
use crate::client::{Client, Kind, Patch, catalog, key_of, split_key};
use crate::types::json::str_at;
use crate::types::meta::Meta;

struct ServiceLb {
    client: Client,
    services: Informer,
    nodes: Informer,
}

/// The ingress `svc` should have, given the cluster's `nodes`: `Some` list for a
/// LoadBalancer Service of no class (the nodes' IPv4 InternalIPs, in order), `Some`
/// empty for a Service of another type whose ingress is (still) the one given here,
/// `None` for one with a class or with an ingress someone else wrote.
pub fn ingress_for(svc: &Service, nodes: &[Node]) -> Option<Vec<LoadBalancerIngress>> {
    let spec = svc.spec.as_ref();
    if spec.and_then(|s| s.load_balancer_class.as_ref()).is_some() {
        return None;
    }
    let ips = node_ips(nodes);
    if spec.and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
        let ours = |i: &LoadBalancerIngress| {
            i.ip_mode.as_deref() == Some("VIP")
                && i.hostname.is_none()
                && i.ip
                    .as_deref()
                    .and_then(|ip| ip.parse().ok())
                    .is_some_and(|ip| ips.contains(&ip))
        };
        let have = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        return have.is_none_or(|have| have.iter().all(ours)).then(Vec::new);
    }
    Some(
        ips.into_iter()
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip.to_string()),
                ip_mode: Some("VIP".into()),
                ..LoadBalancerIngress::default()
            })
            .collect(),
    )
}

/// The nodes' IPv4 InternalIPs, but those of nodes being deleted.
fn node_ips(nodes: &[Node]) -> BTreeSet<Ipv4Addr> {
    nodes
        .iter()
        .filter(|n| !n.metadata.is_deleting())
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

impl ServiceLb {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(obj) = self.services.get(&key) else {
            return Ok(Action::Done);
        };
        let svc: Service = decode(&obj)?;
        if svc.metadata.is_deleting() {
            return Ok(Action::Done);
        }
        let nodes: Vec<Node> = self
            .nodes
            .list()
            .iter()
            .map(|n| decode(n))
            .collect::<Result<_>>()?;
        let Some(want) = ingress_for(&svc, &nodes) else {
            return Ok(Action::Done);
        };
        let have = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.clone())
            .unwrap_or_default();
        if have == want {
            return Ok(Action::Done);
        }
        let (ns, name) = split_key(&key);
        let patch = json!({
            "metadata": {"resourceVersion": svc.metadata.resource_version},
            "status": {"loadBalancer": {"ingress": want}},
        });
        match self
            .client
            .patch_status(self.services.resource(), ns, name, &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(Action::Done),
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) => Err(e.into()),
        }
    }
}

/// Registers the controller's handlers and starts its worker.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let services = ctx.informers.get(catalog::of(Kind::Service));
    let nodes = ctx.informers.get(catalog::of(Kind::Node));
    let controller = Arc::new(ServiceLb {
        client: ctx.client.clone(),
        services: services.clone(),
        nodes: nodes.clone(),
    });
    let all = services.clone();
    runtime::Controller::new("servicelb")
        .reconciles(&services)
        .watches(&nodes, move |_, queue| {
            for svc in all.list() {
                if str_at(&svc, "/spec/type") == "LoadBalancer" {
                    queue.add(key_of(&svc));
                }
            }
        })
        .run_with(sup, controller, ServiceLb::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, addresses: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name},
                                      "status": {"addresses": addresses}}))
        .unwrap()
    }

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"},
                                      "spec": spec}))
        .unwrap()
    }

    #[test]
    fn a_load_balancer_gets_the_nodes_internal_ips() {
        let nodes = [
            node(
                "b",
                json!([{"type": "InternalIP", "address": "192.0.2.2"},
                       {"type": "Hostname", "address": "b"},
                       {"type": "InternalIP", "address": "fd00::2"}]),
            ),
            node(
                "a",
                json!([{"type": "InternalIP", "address": "192.0.2.1"},
                       {"type": "ExternalIP", "address": "198.51.100.1"}]),
            ),
        ];
        let lb = service(json!({"type": "LoadBalancer"}));
        let got = serde_json::to_value(ingress_for(&lb, &nodes)).unwrap();
        assert_eq!(
            got,
            json!([{"ip": "192.0.2.1", "ipMode": "VIP"}, {"ip": "192.0.2.2", "ipMode": "VIP"}])
        );
        let cluster_ip = service(json!({"type": "ClusterIP"}));
        assert_eq!(ingress_for(&cluster_ip, &nodes), Some(vec![]));
        // Once a LoadBalancer: the ingress given here goes.
        let mut was_lb = service(json!({"type": "ClusterIP"}));
        was_lb.status = serde_json::from_value(
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}),
        )
        .unwrap();
        assert_eq!(ingress_for(&was_lb, &nodes), Some(vec![]));
        // An ingress a client wrote (as the Service status conformance test does) stays.
        let mut set = service(json!({"type": "ClusterIP"}));
        set.status =
            serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}))
                .unwrap();
        assert_eq!(ingress_for(&set, &nodes), None);
        let classed =
            service(json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}));
        assert_eq!(ingress_for(&classed, &nodes), None);
    }
}
