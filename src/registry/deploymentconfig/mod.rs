//! OpenShift DeploymentConfigs (`apps.openshift.io/v1`): the annotation and label names
//! the DC machinery shares (spec §7), the names of deployments and their pods (§8), the
//! served schema, defaults and validation, and the `instantiate` and `rollback`
//! subresources. The DC and deployer controllers build on these names.

pub mod rules;
pub mod schema;
mod subresources;

pub use subresources::RollbackRequest;

use serde_json::Value;

use super::strategy::{Acted, BoxFuture};
use super::{Cause, Part};

/// The strategy of DeploymentConfigs: their defaults and rules, a status the server
/// keeps on update, and a generation that also moves with `status.latestVersion`.
pub struct DeploymentConfig;

impl super::strategy::Strategy for DeploymentConfig {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(
            reg,
            "deploymentconfigs",
            ns,
            name,
            old,
            obj,
            "/spec/template",
        )
    }
    fn prepare_status_update(&self, old: &Value, new: &mut Value) {
        // As a Deployment's: the status writer does not relabel.
        super::strategy::keep_metadata(old, new, &["labels"]);
    }
    fn default(&self, obj: &mut Value) {
        rules::default(obj)
    }
    fn prepare_create(&self, obj: &mut Value) {
        rules::prepare_create(obj)
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        rules::validate(obj, causes)
    }
    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        rules::validate_update(old, new, causes)
    }
    fn prepare_update(&self, old: &Value, incoming: Option<&Value>, merged: &mut Value) {
        rules::keep_status_on_update(old, incoming, merged)
    }
    fn scale(&self, dc: &Value) -> super::strategy::Scale {
        super::strategy::Scale {
            replicas: dc.pointer("/spec/replicas").cloned().unwrap_or(0.into()),
            status_replicas: dc.pointer("/status/replicas").cloned().unwrap_or(0.into()),
            selector: crate::types::labels::Selector::from_map(&rules::scale_selector(dc))
                .to_string(),
        }
    }
    fn generation_changes(&self, old: &Value, new: &Value, part: Part) -> bool {
        super::spec_changed(old, new)
            || (part != Part::Status && rules::latest_version_changed(old, new))
    }
    fn act<'a>(
        &'a self,
        reg: &'a super::Registry,
        sub: &'a str,
        ns: Option<&'a str>,
        name: &'a str,
        body: &'a Value,
        _opts: &'a super::WriteOptions,
    ) -> BoxFuture<'a, Result<Acted, super::Error>> {
        let ns = ns.unwrap_or_default();
        Box::pin(async move {
            match sub {
                "instantiate" => subresources::instantiate(reg, ns, name, body).await,
                "rollback" => subresources::rollback(reg, ns, name, body),
                _ => Err(super::Error::MethodNotAllowed(format!(
                    "deploymentconfigs do not serve the subresource {sub:?}"
                ))),
            }
        })
    }
    fn missing_scale(&self, name: &str) -> Option<super::Error> {
        // OpenShift names the Scale of a missing DC by its extensions kind.
        Some(super::Error::NotFound {
            group: "extensions".into(),
            resource: "scale.extensions".into(),
            name: name.to_string(),
        })
    }
}

/// The API group of DeploymentConfigs.
pub const GROUP: &str = "apps.openshift.io";
/// `apiVersion` of DeploymentConfigs.
pub const API_VERSION: &str = "apps.openshift.io/v1";

pub use crate::types::openshift::{
    DEPLOYER_POD_ANNOTATION, DEPLOYER_POD_COMPLETED_AT_ANNOTATION,
    DEPLOYER_POD_CREATED_AT_ANNOTATION, DEPLOYER_POD_FOR_LABEL, DEPLOYER_POD_STARTED_AT_ANNOTATION,
    DEPLOYER_POD_TYPE_LABEL, DEPLOYMENT_ANNOTATION, DEPLOYMENT_CANCELLED_ANNOTATION,
    DEPLOYMENT_CONFIG_ANNOTATION, DEPLOYMENT_CONFIG_POD_LABEL,
    DEPLOYMENT_ENCODED_CONFIG_ANNOTATION, DEPLOYMENT_IGNORE_POD_ANNOTATION,
    DEPLOYMENT_PHASE_ANNOTATION, DEPLOYMENT_POD_LABEL, DEPLOYMENT_REPLICAS_ANNOTATION,
    DEPLOYMENT_STATUS_REASON_ANNOTATION, DEPLOYMENT_VERSION_ANNOTATION,
    DESIRED_REPLICAS_ANNOTATION, ORIGINAL_REPLICAS_ANNOTATION, Phase, UPDATE_SOURCE_ID_ANNOTATION,
    decode_config, deployer_pod_name, deployment_name, hook_pod_name, pod_name,
};
