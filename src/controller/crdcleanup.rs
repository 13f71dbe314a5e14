//! Deleting a CustomResourceDefinition: while it is `Terminating`, its objects are deleted
//! (in every namespace), and once none is left its cleanup finalizer is removed, which
//! completes its deletion and stops serving its kind. Objects held by finalizers of their
//! own are waited for: the informer of the kind ([`super::custom`]) tells of each
//! deletion, which brings the definition back to the queue.
//!
//! A reconcile decodes its definition once as a k8s-openapi `CustomResourceDefinition`;
//! the custom objects it deletes stay JSON (they have no type), read through
//! [`crate::types::json`].

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;

use super::custom::KindChange;
use super::{Action, Context, Queue, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, DeleteParams, ListParams};
use crate::client::{Kind, catalog};
use crate::types::CRD_CLEANUP_FINALIZER as CLEANUP_FINALIZER;
use crate::types::json::str_at;
use crate::types::meta::Meta;

#[derive(Clone)]
struct Cleanup {
    client: Client,
    definitions: Informer,
}

impl Cleanup {
    async fn reconcile(self: Arc<Self>, name: String) -> Result<Action> {
        let Some(crd) = self.definitions.get(&name) else {
            return Ok(Action::Done);
        };
        let crd: CustomResourceDefinition = decode(&crd)?;
        let finalizers = crd.metadata.finalizers.as_deref().unwrap_or_default();
        if !crd.metadata.is_deleting() || !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            return Ok(Action::Done);
        }
        let storage = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map_or("", |v| v.name.as_str());
        let (group, plural) = (crd.spec.group.as_str(), crd.spec.names.plural.as_str());
        if let Some(res) = self.client.resolve(group, storage, plural).await? {
            let params = ListParams::default();
            let objects = self.client.list(&res, None, &params).await?.items;
            for obj in &objects {
                let ns = str_at(obj, "/metadata/namespace");
                match self
                    .client
                    .delete(
                        &res,
                        Some(ns).filter(|ns| !ns.is_empty()),
                        str_at(obj, "/metadata/name"),
                        &DeleteParams::default(),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if !self
                .client
                .list(&res, None, &params)
                .await?
                .items
                .is_empty()
            {
                // Some wait for finalizers of their own; their deletions bring it back.
                return Ok(Action::Done);
            }
        }
        let kept: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != CLEANUP_FINALIZER)
            .collect();
        let patch = json!({"metadata": {
            "finalizers": kept,
            "resourceVersion": crd.metadata.resource_version,
        }});
        match self
            .client
            .patch(
                self.definitions.resource(),
                None,
                &name,
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

/// Registers the cleanup controller's handler and starts its worker.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let definitions = ctx
        .informers
        .get(catalog::of(Kind::CustomResourceDefinition));
    let queue = Queue::new();
    // A followed kind's first list, and each deletion of one of its objects, bring its
    // definition back.
    ctx.custom.on_change({
        let queue = queue.clone();
        move |change| {
            let KindChange::Followed { res, informer, .. } = change else {
                return;
            };
            let definition = format!("{}.{}", res.plural, res.group);
            {
                let (queue, definition) = (queue.clone(), definition.clone());
                informer.on_change(move |change| {
                    if matches!(change, Change::Deleted(_)) {
                        queue.add(definition.clone());
                    }
                });
            }
            let queue = queue.clone();
            change.when_listed(move || queue.add(definition));
        }
    });
    let cleanup = Arc::new(Cleanup {
        client: ctx.client.clone(),
        definitions: definitions.clone(),
    });
    runtime::Controller::new("crd-cleanup")
        .with_queue(queue)
        .watches(&definitions, |change, queue| {
            if !matches!(change, Change::Deleted(_)) {
                queue.add(str_at(change.object(), "/metadata/name").to_string());
            }
        })
        .run_with(sup, cleanup, Cleanup::reconcile);
}
