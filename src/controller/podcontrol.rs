//! Making and removing an owner's pods as kube-controller-manager's `RealPodControl`
//! does: the write, then on success the owner's `SuccessfulCreate` / `SuccessfulDelete`
//! event naming the pod. Failures go back to the caller, which decides how many of a
//! batch's errors become events.

use serde_json::Value;

use crate::client::recorder::Recorder;
use crate::client::{self, Client, DeleteParams, Resource};
use crate::types::json::str_at;

/// Creates `pod` in `ns` and records `SuccessfulCreate` on `owner`; answers the pod made.
pub async fn create(
    client: &Client,
    recorder: &Recorder,
    pods: &Resource,
    owner: &Value,
    ns: &str,
    pod: &Value,
) -> client::Result<Value> {
    let made = client.create(pods, Some(ns), pod).await?;
    let message = format!("Created pod: {}", str_at(&made, "/metadata/name"));
    recorder.normal(owner, "SuccessfulCreate", &message).await;
    Ok(made)
}

/// Deletes the pod `name` of `ns` and records `SuccessfulDelete` on `owner`.
pub async fn delete(
    client: &Client,
    recorder: &Recorder,
    pods: &Resource,
    owner: &Value,
    (ns, name): (&str, &str),
    params: &DeleteParams,
) -> client::Result<()> {
    client.delete(pods, Some(ns), name, params).await?;
    let message = format!("Deleted pod: {name}");
    recorder.normal(owner, "SuccessfulDelete", &message).await;
    Ok(())
}
