//! The actions of core kinds' subresources that are writes of their own: a pod's
//! `binding` (how the scheduler places it) and a namespace's `finalize` (how the
//! namespace controller lets it go). Their strategies carry them out ([`Strategy::act`]).
//!
//! [`Strategy::act`]: super::strategy::Strategy::act

use serde_json::{Value, json};

use super::strategy::Acted;
use super::{Cause, Error, Part, Registry, Resource, Result, WriteOptions, meta};

/// `POST pods/{name}/binding`: binds the pod to the node the Binding names, setting
/// `spec.nodeName` and the `PodScheduled` condition in one write. Answers a Status.
pub(super) async fn bind(
    reg: &Registry,
    res: &Resource,
    namespace: &str,
    name: &str,
    body: &Value,
    opts: &WriteOptions,
) -> Result<Acted> {
    let node = body
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if opts.dry_run {
        reg.get(res, Some(namespace), name)?;
    } else {
        bind_to(reg, res, namespace, name, node).await?;
    }
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success", "code": 201,
    });
    Ok(Acted::Created(format!("{status}\n").into()))
}

async fn bind_to(
    reg: &Registry,
    res: &Resource,
    namespace: &str,
    name: &str,
    node: &str,
) -> Result<()> {
    if node.is_empty() {
        return Err(Registry::invalid(
            res,
            name,
            vec![Cause::required("target.name")],
        ));
    }
    let key = res.key(Some(namespace), name);
    let opts = WriteOptions::default();
    let change = |old: &Value| {
        let mut pod = old.clone();
        if meta(old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
            return Err(Error::Conflict {
                group: res.group.clone(),
                resource: res.qualified_plural(),
                name: name.to_string(),
                message: "the pod is being deleted".into(),
            });
        }
        match old.pointer("/spec/nodeName").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => {
                return Err(Error::Conflict {
                    group: res.group.clone(),
                    resource: res.qualified_plural(),
                    name: name.to_string(),
                    message: format!("pod {name} is already assigned to node {n:?}"),
                });
            }
            _ => {}
        }
        pod["spec"]["nodeName"] = json!(node);
        crate::types::set_condition(&mut pod, json!({"type": "PodScheduled", "status": "True"}));
        Ok(pod)
    };
    reg.update_with(res, &key, name, None, &opts, change, Part::All)
        .await?;
    Ok(())
}

/// `PUT namespaces/{name}/finalize`: replaces the namespace's finalizers; a namespace
/// being deleted goes once none are left.
pub(super) async fn finalize(
    reg: &Registry,
    res: &Resource,
    name: &str,
    body: &Value,
) -> Result<Acted> {
    let finalizers = body
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or_else(|| json!([]));
    if !finalizers.is_array() {
        return Err(Registry::invalid(
            res,
            name,
            vec![Cause::invalid(
                "spec.finalizers",
                &finalizers,
                "must be a list",
            )],
        ));
    }
    let key = res.key(None, name);
    let change = |old: &Value| {
        let mut ns = old.clone();
        ns["spec"]["finalizers"] = finalizers.clone();
        Ok(ns)
    };
    let written = reg
        .update_with(
            res,
            &key,
            name,
            None,
            &WriteOptions::default(),
            change,
            Part::All,
        )
        .await?;
    Ok(Acted::Written(written))
}
