//! The Endpoints and the EndpointSlice of a Service whose one endpoint is berth itself
//! (the API server's `kubernetes`, the cluster DNS's `kube-dns`): both named as the
//! Service, pointing at one address with the given ports, made when missing and set
//! right when changed. Such Services have no selector, so the endpoints controllers
//! leave these objects to the controller that keeps the Service.

use serde_json::{Value, json};

use super::Result;
use super::endpointslice::SERVICE_NAME;
use crate::client::Client;
use crate::client::informer::Informer;

/// Where a Service's one endpoint is.
pub(super) struct SelfEndpoints<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub ip: &'a str,
    /// The endpoint's ports: `[{"name", "port", "protocol"}]`.
    pub ports: Value,
}

impl SelfEndpoints<'_> {
    /// Keeps the Endpoints (through `endpoints`' resource) and the EndpointSlice
    /// (through `slices`') as they must be.
    pub async fn keep(
        &self,
        client: &Client,
        endpoints: &Informer,
        slices: &Informer,
    ) -> Result<()> {
        let want = json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": self.ip}], "ports": self.ports}],
        });
        self.keep_object(client, endpoints, want, &["subsets"])
            .await?;
        let family = if self.ip.contains(':') {
            "IPv6"
        } else {
            "IPv4"
        };
        let want = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {SERVICE_NAME: self.name}},
            "addressType": family,
            "endpoints": [{"addresses": [self.ip], "conditions": {"ready": true}}],
            "ports": self.ports,
        });
        self.keep_object(client, slices, want, &["addressType", "endpoints", "ports"])
            .await
    }

    /// Makes the object `want`, or sets the top-level `fields` of the one there is to
    /// want's when they differ (one whose `addressType`, which never changes, differs
    /// is made again).
    async fn keep_object(
        &self,
        client: &Client,
        res: &Informer,
        want: Value,
        fields: &[&str],
    ) -> Result<()> {
        let (res, ns, name) = (res.resource(), Some(self.namespace), self.name);
        let mut current = match client.get(res, ns, name).await {
            Ok(v) => v,
            Err(e) if e.is_not_found() => {
                return match client.create(res, ns, &want).await {
                    Err(e) if !e.is_already_exists() => Err(e.into()),
                    _ => Ok(()),
                };
            }
            Err(e) => return Err(e.into()),
        };
        if fields.iter().all(|f| current[f] == want[f]) {
            return Ok(());
        }
        if current.get("addressType").is_some() && current["addressType"] != want["addressType"] {
            match client.delete(res, ns, name, &Default::default()).await {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
            client.create(res, ns, &want).await?;
            return Ok(());
        }
        for f in fields {
            current[f] = want[f].clone();
        }
        client.update(res, &current).await?;
        Ok(())
    }
}
