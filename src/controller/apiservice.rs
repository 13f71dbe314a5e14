//! The `kubernetes` Service in `default`: how pods find the API server, as kube-apiserver's
//! own service controller keeps it. It holds the first cluster IP (kept for it), port 443
//! named `https` onto the port the API serves on, and is made again when deleted and set
//! right when its ports are changed. Its Endpoints and EndpointSlice (both named
//! `kubernetes`, as kube-apiserver's endpoint reconciler writes them) point at the API's
//! address and port; the Service has no selector, so the endpoints controllers leave
//! them to this one.
//!
//! A reconcile decodes the Service it finds once as a k8s-openapi `Service`; the watch
//! handler reads the informer's JSON through [`crate::types::json`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::selfendpoints::SelfEndpoints;
use super::{Action, Context, Queue, Result, Supervisor, decode, runtime};
use crate::client::Client;
use crate::client::informer::Informer;
use crate::client::{Kind, catalog};
use crate::types::KUBERNETES_SERVICE_IP;
use crate::types::json::str_at;
use crate::types::meta::Meta;

const NAMESPACE: &str = "default";
const NAME: &str = "kubernetes";

#[derive(Clone)]
struct ApiService {
    client: Client,
    services: Informer,
    endpoints: Informer,
    slices: Informer,
    port: u16,
    ip: String,
}

/// The one port the Service must have: `https` on 443 onto the API's port `target`.
fn api_port(target: u16) -> ServicePort {
    ServicePort {
        name: Some("https".into()),
        port: 443,
        protocol: Some("TCP".into()),
        target_port: Some(IntOrString::Int(target.into())),
        ..ServicePort::default()
    }
}

/// Whether `have` is [`api_port`] in the fields this controller sets.
fn is_api_port(have: &ServicePort, target: u16) -> bool {
    let want = api_port(target);
    (&have.name, have.port, &have.protocol, &have.target_port)
        == (&want.name, want.port, &want.protocol, &want.target_port)
}

impl ApiService {
    /// The ports the Service must have.
    fn ports(&self) -> Value {
        json!([api_port(self.port)])
    }

    async fn reconcile(&self) -> Result<Action> {
        let endpoint = SelfEndpoints {
            namespace: NAMESPACE,
            name: NAME,
            ip: &self.ip,
            ports: json!([{"name": "https", "port": self.port, "protocol": "TCP"}]),
        };
        endpoint
            .keep(&self.client, &self.endpoints, &self.slices)
            .await?;
        self.keep_service().await
    }

    async fn keep_service(&self) -> Result<Action> {
        let Some(current) = self.services.get(&format!("{NAMESPACE}/{NAME}")) else {
            let svc = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": NAME,
                    "namespace": NAMESPACE,
                    "labels": {"component": "apiserver", "provider": "kubernetes"},
                },
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": KUBERNETES_SERVICE_IP,
                    "sessionAffinity": "None",
                    "ports": self.ports(),
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
        let same = match current.spec.as_ref().and_then(|s| s.ports.as_deref()) {
            Some([have]) => is_api_port(have, self.port),
            _ => false,
        };
        if same {
            return Ok(Action::Done);
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"ports": self.ports()},
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

/// Registers the controller's handler and starts its worker, when the API's port is known.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let Some(port) = ctx.config.api_port else {
        return;
    };
    let services = ctx.informers.get(catalog::of(Kind::Service));
    let endpoints = ctx.informers.get(catalog::of(Kind::Endpoints));
    let slices = ctx.informers.get(catalog::of(Kind::EndpointSlice));
    let controller = Arc::new(ApiService {
        client: ctx.client.clone(),
        services: services.clone(),
        endpoints: endpoints.clone(),
        slices: slices.clone(),
        port,
        ip: ctx.config.api_ip.clone(),
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
    runtime::Controller::new("kubernetes-service")
        .with_queue(queue)
        .watches(&services, ours)
        .watches(&endpoints, ours)
        .watches(&slices, ours)
        // Looked at once the cache is filled, whether or not it holds the Service.
        .waits_until(move || {
            let queue = first.clone();
            Box::pin(async move { queue.add(NAME.to_string()) })
        })
        .run(sup, move |_key| {
            let controller = controller.clone();
            async move { controller.reconcile().await }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_https_on_443_onto_the_api_port() {
        assert_eq!(
            json!([api_port(6443)]),
            json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}])
        );
        let mut have = api_port(6443);
        assert!(is_api_port(&have, 6443));
        have.node_port = Some(30443);
        assert!(
            is_api_port(&have, 6443),
            "fields it does not set are not compared"
        );
        have.target_port = Some(IntOrString::String("6443".into()));
        assert!(!is_api_port(&have, 6443));
    }
}
