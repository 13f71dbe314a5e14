//! OpenShift DeploymentConfigs (`apps.openshift.io/v1`): the annotation and label names
//! the DC machinery shares (spec §7), the names of deployments and their pods (§8), the
//! served schema, defaults and validation, and the `instantiate` and `rollback`
//! subresources. The DC and deployer controllers build on these names.

pub mod rules;
pub mod schema;
mod subresources;

pub use subresources::{Instantiated, RollbackRequest};

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
