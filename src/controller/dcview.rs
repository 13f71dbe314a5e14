//! A typed view of a DeploymentConfig (`apps.openshift.io/v1`) for the DeploymentConfig
//! and deployer controllers: only the fields they read, each absent or `null` field
//! reading as Go's zero value, as the JSON reads it replaces did. A view is for reading
//! only: what is written back or copied whole (the status, the encoded config, the pod
//! template, a strategy's environment and resources) stays the stored JSON, since a
//! typed round trip would drop the fields the view does not name. Also the reads of a
//! deployment's (ReplicationController's) annotations once it is decoded.
//!
//! DeploymentConfigs have no k8s-openapi type; `types::openshift::DeploymentConfig` is
//! the deployer process's, which decodes the template and environments into API types.

use crate::types::meta::Meta;
use std::collections::BTreeMap;
use std::ops::Deref;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{Result, decode};
use crate::types::openshift as os;

/// Go's zero value for a `null` field, as an absent one gets through `#[serde(default)]`.
fn zero_if_null<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The fields of a DeploymentConfig the controllers read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentConfig {
    #[serde(deserialize_with = "zero_if_null")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "zero_if_null")]
    pub spec: Spec,
    #[serde(deserialize_with = "zero_if_null")]
    pub status: Status,
}

impl Meta for DeploymentConfig {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl DeploymentConfig {
    /// Whether a trigger of this type is set.
    pub fn has_trigger(&self, kind: &str) -> bool {
        self.spec.triggers.iter().any(|t| t.type_ == kind)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Spec {
    #[serde(deserialize_with = "zero_if_null")]
    pub replicas: i64,
    #[serde(deserialize_with = "zero_if_null")]
    pub selector: BTreeMap<String, String>,
    #[serde(deserialize_with = "zero_if_null")]
    pub paused: bool,
    #[serde(deserialize_with = "zero_if_null")]
    pub test: bool,
    #[serde(deserialize_with = "zero_if_null")]
    pub triggers: Vec<Trigger>,
    #[serde(deserialize_with = "zero_if_null")]
    pub strategy: Strategy,
    pub revision_history_limit: Option<i64>,
    #[serde(deserialize_with = "zero_if_null")]
    pub min_ready_seconds: i64,
    /// The pod template as stored (`Null` when absent): deployments copy it whole.
    pub template: Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Trigger {
    #[serde(rename = "type", deserialize_with = "zero_if_null")]
    pub type_: String,
    pub image_change_params: Option<ImageChangeParams>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ImageChangeParams {
    #[serde(deserialize_with = "zero_if_null")]
    pub last_triggered_image: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Strategy {
    #[serde(rename = "type", deserialize_with = "zero_if_null")]
    pub type_: String,
    pub rolling_params: Option<RollingParams>,
    pub recreate_params: Option<RecreateParams>,
    pub custom_params: Option<CustomParams>,
    /// Copied into the deployer pod's container as stored.
    pub resources: Option<Value>,
    #[serde(deserialize_with = "zero_if_null")]
    pub labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "zero_if_null")]
    pub annotations: BTreeMap<String, String>,
    pub active_deadline_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RollingParams {
    pub max_surge: Option<IntOrString>,
    pub max_unavailable: Option<IntOrString>,
    pub timeout_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RecreateParams {
    pub timeout_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CustomParams {
    #[serde(deserialize_with = "zero_if_null")]
    pub image: String,
    /// Environment variables as stored: the deployer pod gets them whole.
    #[serde(deserialize_with = "zero_if_null")]
    pub environment: Vec<Value>,
    #[serde(deserialize_with = "zero_if_null")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Status {
    #[serde(deserialize_with = "zero_if_null")]
    pub latest_version: i64,
    #[serde(deserialize_with = "zero_if_null")]
    pub replicas: i64,
    #[serde(deserialize_with = "zero_if_null")]
    pub updated_replicas: i64,
    #[serde(deserialize_with = "zero_if_null")]
    pub details: Details,
    #[serde(deserialize_with = "zero_if_null")]
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Details {
    #[serde(deserialize_with = "zero_if_null")]
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    #[serde(rename = "type", deserialize_with = "zero_if_null")]
    pub type_: String,
    #[serde(deserialize_with = "zero_if_null")]
    pub reason: String,
}

/// A DeploymentConfig as a reconcile holds it: the view, decoded once at its entry, for
/// every read (through `Deref`), and the stored object for what goes out whole (status
/// updates, the encoded config, events).
pub struct Dc<'a> {
    pub obj: &'a Value,
    view: DeploymentConfig,
}

impl<'a> Dc<'a> {
    pub fn decode(obj: &'a Value) -> Result<Self> {
        Ok(Dc {
            obj,
            view: decode(obj)?,
        })
    }
}

impl Deref for Dc<'_> {
    type Target = DeploymentConfig;

    fn deref(&self) -> &DeploymentConfig {
        &self.view
    }
}

/// The view of the DC encoded in a deployment when it was made.
pub fn encoded(rc: &Value) -> std::result::Result<DeploymentConfig, String> {
    let dc = os::decode_config(rc)?;
    DeploymentConfig::deserialize(&dc).map_err(|e| format!("the encoded deployment config: {e}"))
}

/// An annotation of a decoded object.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A decoded deployment's phase (`New` when it has none).
pub fn phase(meta: &ObjectMeta) -> &'static str {
    annotation(meta, os::DEPLOYMENT_PHASE_ANNOTATION)
        .and_then(os::Phase::parse)
        .unwrap_or(os::Phase::New)
        .as_str()
}

/// Whether a cancelled annotation of this value marks a deployment cancelled (`true` in
/// any case).
pub fn marks_cancelled(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Whether a decoded deployment is marked cancelled.
pub fn cancelled(meta: &ObjectMeta) -> bool {
    marks_cancelled(annotation(meta, os::DEPLOYMENT_CANCELLED_ANNOTATION))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_and_null_fields_read_as_zero_values() {
        let dc: DeploymentConfig = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"triggers": null, "test": null, "replicas": 2,
                     "strategy": {"type": "Rolling", "rollingParams": {"maxSurge": "25%"}},
                     "template": {"spec": {"containers": null}}},
            "status": null,
        }))
        .unwrap();
        assert_eq!((dc.name(), dc.namespace(), dc.uid()), ("web", "", ""));
        assert_eq!(dc.spec.replicas, 2);
        assert!(dc.spec.triggers.is_empty() && !dc.spec.test && !dc.spec.paused);
        let rolling = dc.spec.strategy.rolling_params.as_ref().unwrap();
        assert_eq!(rolling.max_surge, Some(IntOrString::String("25%".into())));
        assert_eq!(rolling.max_unavailable, None);
        assert_eq!(dc.spec.revision_history_limit, None);
        assert_eq!(dc.spec.template, json!({"spec": {"containers": null}}));
        assert_eq!(dc.status.latest_version, 0);
        assert!(dc.status.details.message.is_empty());
        let empty: DeploymentConfig = serde_json::from_value(json!({})).unwrap();
        assert!(empty.spec.template.is_null() && empty.spec.strategy.type_.is_empty());
    }

    #[test]
    fn a_deployments_phase_and_cancellation_come_from_its_annotations() {
        let meta = |anns: Value| -> ObjectMeta {
            serde_json::from_value(json!({"annotations": anns})).unwrap()
        };
        assert_eq!(phase(&ObjectMeta::default()), "New");
        let m = meta(json!({os::DEPLOYMENT_PHASE_ANNOTATION: "Running",
                            os::DEPLOYMENT_CANCELLED_ANNOTATION: "True"}));
        assert_eq!(phase(&m), "Running");
        assert!(cancelled(&m));
        assert!(!cancelled(&meta(
            json!({os::DEPLOYMENT_CANCELLED_ANNOTATION: "no"})
        )));
        assert_eq!(
            phase(&meta(json!({os::DEPLOYMENT_PHASE_ANNOTATION: "x"}))),
            "New"
        );
    }
}
