//! The root CA publisher: a ConfigMap `kube-root-ca.crt` in every live namespace holding
//! the CA that signed the API's serving certificate (`ca.crt`) and the description
//! annotation, kept as upstream's `root-ca-cert-publisher` keeps it: made again when
//! deleted, put back when changed. Pods (and the conformance suite's set-up) read it to
//! trust the API server.
//!
//! A reconcile decodes its namespace and the published map as their k8s-openapi types
//! (`Namespace`, `ConfigMap`); the watch handlers read the informers' JSON through
//! [`crate::types::json`].

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use serde_json::{Value, json};

use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, Kind, ListParams, Patch, catalog};
use crate::types::json::str_at;
use crate::types::meta::Meta;

const WORKERS: usize = 1;
/// The ConfigMap's name in every namespace.
pub const NAME: &str = "kube-root-ca.crt";
/// The key of the CA bundle in it.
pub const KEY: &str = "ca.crt";
const DESCRIPTION_KEY: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

#[derive(Clone)]
struct Publisher {
    client: Client,
    ca: String,
    namespaces: Informer,
    maps: Informer,
}

fn is_live(ns: &Namespace) -> bool {
    let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
    !ns.metadata.is_deleting() && phase != Some("Terminating")
}

impl Publisher {
    async fn reconcile(self: Arc<Self>, ns: String) -> Result<Action> {
        let live = match self.namespaces.get(&ns) {
            Some(n) => is_live(&decode(&n)?),
            None => false,
        };
        if !live {
            return Ok(Action::Done);
        }
        let data = json!({ KEY: self.ca });
        let res = self.maps.resource();
        match self.maps.get(&format!("{ns}/{NAME}")) {
            None => {
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": ns,
                                 "annotations": {DESCRIPTION_KEY: DESCRIPTION}},
                    "data": data,
                });
                match self.client.create(res, Some(&ns), &cm).await {
                    Ok(_) => Ok(Action::Done),
                    // The namespace went or started terminating; the informer brings
                    // a map made meanwhile back here.
                    Err(e) if e.is_already_exists() => Ok(Action::Done),
                    Err(crate::client::Error::Forbidden(_) | crate::client::Error::NotFound(_)) => {
                        Ok(Action::Done)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Some(cm) => {
                let cm: ConfigMap = decode(&cm)?;
                let described = cm
                    .metadata
                    .annotation(DESCRIPTION_KEY)
                    .is_some_and(|d| !d.is_empty());
                let published = BTreeMap::from([(KEY.to_string(), self.ca.clone())]);
                if cm.data.as_ref() == Some(&published) && described {
                    return Ok(Action::Done);
                }
                // The data becomes the CA alone, on the version read.
                let mut fixed: serde_json::Map<String, Value> = cm
                    .data
                    .iter()
                    .flatten()
                    .map(|(k, _)| (k.clone(), Value::Null))
                    .collect();
                fixed.insert(KEY.into(), json!(self.ca));
                let patch = json!({
                    "metadata": {
                        "resourceVersion": cm.metadata.resource_version,
                        "annotations": {DESCRIPTION_KEY: DESCRIPTION},
                    },
                    "data": fixed,
                });
                match self
                    .client
                    .patch(res, Some(&ns), NAME, &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => {}
                    // Gone or changed meanwhile: the informer brings it back here.
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => return Err(e.into()),
                }
                Ok(Action::Done)
            }
        }
    }
}

/// Registers the publisher's handlers and starts it, when the cluster has a CA to publish.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let Some(ca) = ctx.config.root_ca.clone() else {
        return;
    };
    let namespaces = ctx.informers.get(catalog::of(Kind::Namespace));
    // Only the published maps: a cache of every ConfigMap would hold all their data.
    let maps = Informer::with_selection(
        catalog::of(Kind::ConfigMap),
        ListParams {
            field_selector: Some(format!("metadata.name={NAME}")),
            ..ListParams::default()
        },
    );
    let publisher = Arc::new(Publisher {
        client: ctx.client.clone(),
        ca,
        namespaces: namespaces.clone(),
        maps: maps.clone(),
    });
    runtime::Controller::new("root-ca-publisher")
        .watches(&namespaces, |change, queue| {
            if !matches!(change, Change::Deleted(_)) {
                let name = str_at(change.object(), "/metadata/name");
                if !name.is_empty() {
                    queue.add(name);
                }
            }
        })
        .watches(&maps, |change, queue| {
            let ns = str_at(change.object(), "/metadata/namespace");
            if !ns.is_empty() {
                queue.add(ns);
            }
        })
        .workers(WORKERS)
        .run_with(sup, publisher, Publisher::reconcile);
    // The maps' informer is this controller's own (not one of the shared ones), run once
    // its handler is registered.
    let client = ctx.client.clone();
    sup.spawn("root-ca-maps", move |cancel| {
        maps.clone().run(client.clone(), cancel)
    });
}
