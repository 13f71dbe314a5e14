//! The `kube-dns` Service in `kube-system`: how pods find the cluster DNS, as kubeadm's
//! CoreDNS add-on publishes it. It holds the DNS Service's cluster IP (10.96.0.10, which
//! the allocator gives no other Service), ports `dns` (53/UDP) and `dns-tcp` (53/TCP)
//! onto the port the in-process DNS server answers on, and is made again when deleted
//! and set right when its ports or labels are changed. Its Endpoints and EndpointSlice
//! (both named `kube-dns`) point at the server's address; the Service has no selector,
//! so the endpoints controllers leave them to this one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::selfendpoints::SelfEndpoints;
use super::{Action, Context, Queue, Result, Supervisor, decode, runtime};
use crate::client::Client;
use crate::client::informer::Informer;
use crate::client::{Kind, catalog};
use crate::types::json::str_at;
use crate::types::meta::Meta;

const NAMESPACE: &str = "kube-system";
const NAME: &str = "kube-dns";

/// Where the cluster DNS is: what `kube-system/kube-dns` publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsService {
    /// The Service's cluster IP (`net::Config::dns_service_ip`).
    pub cluster_ip: String,
    /// The address and port the DNS server answers on (UDP and TCP): the endpoint.
    pub address: SocketAddr,
}

/// The labels the Service carries (kubeadm's, with the name kube-dns had).
fn labels() -> BTreeMap<String, String> {
    [
        ("k8s-app", "kube-dns"),
        ("kubernetes.io/cluster-service", "true"),
        ("kubernetes.io/name", "KubeDNS"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The ports the Service must have: `dns` on 53/UDP and `dns-tcp` on 53/TCP, onto the
/// DNS server's port `target`.
fn dns_ports(target: u16) -> Vec<ServicePort> {
    [("dns", "UDP"), ("dns-tcp", "TCP")]
        .into_iter()
        .map(|(name, protocol)| ServicePort {
            name: Some(name.into()),
            port: 53,
            protocol: Some(protocol.into()),
            target_port: Some(IntOrString::Int(target.into())),
            ..ServicePort::default()
        })
        .collect()
}

/// Whether `have` are [`dns_ports`] in the fields this controller sets.
fn are_dns_ports(have: &[ServicePort], target: u16) -> bool {
    let want = dns_ports(target);
    have.len() == want.len()
        && have.iter().zip(&want).all(|(h, w)| {
            (&h.name, h.port, &h.protocol, &h.target_port)
                == (&w.name, w.port, &w.protocol, &w.target_port)
        })
}

struct Controller {
    client: Client,
    services: Informer,
    endpoints: Informer,
    slices: Informer,
    dns: DnsService,
}

impl Controller {
    async fn reconcile(self: Arc<Self>, _key: String) -> Result<Action> {
        // The server's port under both names.
        let port = self.dns.address.port();
        let endpoint = SelfEndpoints {
            namespace: NAMESPACE,
            name: NAME,
            ip: &self.dns.address.ip().to_string(),
            ports: json!([{"name": "dns", "port": port, "protocol": "UDP"},
                          {"name": "dns-tcp", "port": port, "protocol": "TCP"}]),
        };
        endpoint
            .keep(&self.client, &self.endpoints, &self.slices)
            .await?;
        self.keep_service().await
    }

    async fn keep_service(&self) -> Result<Action> {
        let target = self.dns.address.port();
        let Some(current) = self.services.get(&format!("{NAMESPACE}/{NAME}")) else {
            let svc = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels()},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": self.dns.cluster_ip,
                    "sessionAffinity": "None",
                    "ports": dns_ports(target),
                },
            });
            return match self
                .client
                .create(self.services.resource(), Some(NAMESPACE), &svc)
                .await
            {
                Ok(_) => Ok(Action::Done),
                Err(e) if e.is_already_exists() => Ok(Action::Done),
                Err(e) => Err(e.into()),
            };
        };
        let current: Service = decode(&current)?;
        if current.metadata.is_deleting() {
            return Ok(Action::Done);
        }
        let ip = current.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
        if ip != Some(self.dns.cluster_ip.as_str()) {
            // A cluster IP never changes: the Service must be made again to move.
            tracing::warn!(
                have = ip.unwrap_or_default(),
                want = %self.dns.cluster_ip,
                "kube-system/kube-dns has another cluster IP than the pods' nameserver; delete it and it is made again"
            );
        }
        let ports = current.spec.as_ref().and_then(|s| s.ports.as_deref());
        let have_labels = current.metadata.labels.clone().unwrap_or_default();
        let labels_ok = labels().iter().all(|(k, v)| have_labels.get(k) == Some(v));
        if are_dns_ports(ports.unwrap_or_default(), target) && labels_ok {
            return Ok(Action::Done);
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version,
                         "labels": labels()},
            "spec": {"ports": dns_ports(target)},
        });
        match self
            .client
            .patch(
                self.services.resource(),
                Some(NAMESPACE),
                NAME,
                &crate::client::Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => Ok(Action::Done),
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) => Err(e.into()),
        }
    }
}

/// Registers the controller's handlers and starts its worker, when the cluster DNS runs.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let Some(dns) = ctx.config.dns.clone() else {
        return;
    };
    let services = ctx.informers.get(catalog::of(Kind::Service));
    let endpoints = ctx.informers.get(catalog::of(Kind::Endpoints));
    let slices = ctx.informers.get(catalog::of(Kind::EndpointSlice));
    let controller = Arc::new(Controller {
        client: ctx.client.clone(),
        services: services.clone(),
        endpoints: endpoints.clone(),
        slices: slices.clone(),
        dns,
    });
    let ours = |change: crate::client::informer::Change<'_>, queue: &Queue| {
        let obj = change.object();
        if str_at(obj, "/metadata/namespace") == NAMESPACE && str_at(obj, "/metadata/name") == NAME
        {
            queue.add(NAME.to_string());
        }
    };
    let queue = Queue::new();
    let first = queue.clone();
    runtime::Controller::new("kube-dns-service")
        .with_queue(queue)
        .watches(&services, ours)
        .watches(&endpoints, ours)
        .watches(&slices, ours)
        // Looked at once the cache is filled, whether or not it holds the Service.
        .waits_until(move || {
            let queue = first.clone();
            Box::pin(async move { queue.add(NAME.to_string()) })
        })
        .run_with(sup, controller, Controller::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_are_dns_over_udp_and_tcp_onto_the_servers_port() {
        assert_eq!(
            serde_json::to_value(dns_ports(5353)).unwrap(),
            json!([{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
                   {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 5353}])
        );
        let mut have = dns_ports(53);
        assert!(are_dns_ports(&have, 53));
        assert!(!are_dns_ports(&have, 5353));
        have[0].node_port = Some(30053);
        assert!(
            are_dns_ports(&have, 53),
            "fields it does not set are not compared"
        );
        have.pop();
        assert!(!are_dns_ports(&have, 53));
    }
}
