//! The `kubernetes` Service in `default`: how pods find the API server, as kube-apiserver's
//! own service controller keeps it. It holds the first cluster IP (kept for it), port 443
//! named `https` onto the port the API serves on, and is made again when deleted and set
//! right when its ports are changed.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Action, Context, Queue, Result, Supervisor, runtime};
use crate::client::Client;
use crate::client::informer::Informer;
use crate::client::{Kind, catalog};
use crate::types::KUBERNETES_SERVICE_IP;

const NAMESPACE: &str = "default";
const NAME: &str = "kubernetes";

#[derive(Clone)]
struct ApiService {
    client: Client,
    services: Informer,
    port: u16,
}

impl ApiService {
    /// The ports the Service must have.
    fn ports(&self) -> Value {
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.port}])
    }

    async fn reconcile(&self) -> Result<Action> {
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
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        let ports = self.ports();
        let same = current.pointer("/spec/ports").is_some_and(|have| {
            have.as_array().map(Vec::len) == Some(1)
                && ["name", "port", "protocol", "targetPort"]
                    .iter()
                    .all(|f| have[0][f] == ports[0][f])
        });
        if same {
            return Ok(Action::Done);
        }
        let patch = json!({
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"ports": ports},
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
    let controller = Arc::new(ApiService {
        client: ctx.client.clone(),
        services: services.clone(),
        port,
    });
    let queue = Queue::new();
    let first = queue.clone();
    runtime::Controller::new("kubernetes-service")
        .with_queue(queue)
        .watches(&services, |change, queue| {
            let m = &change.object()["metadata"];
            if m["namespace"] == NAMESPACE && m["name"] == NAME {
                queue.add(NAME.to_string());
            }
        })
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
