//! The OpenAPI v3 schemas of the DeploymentConfig types (spec §2). k8s-openapi has no
//! OpenShift types, so they are written out here as JSON Schema, referring to the
//! Kubernetes schemas (pod template, object reference, env var, ...) by name. They are
//! served in `/openapi/v3` and enforced like every generated schema.

use serde_json::{Map, Value, json};

const PREFIX: &str = "com.github.openshift.api.apps.v1.";

/// The schema name of the DeploymentConfig kind.
pub fn name() -> String {
    format!("{PREFIX}DeploymentConfig")
}

fn r(name: &str) -> Value {
    let full = if name.starts_with("io.k8s.") {
        name.to_string()
    } else {
        format!("{PREFIX}{name}")
    };
    crate::registry::schema::reference(&full)
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn int(format: &str, description: &str) -> Value {
    json!({"type": "integer", "format": format, "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn array(items: Value, description: &str) -> Value {
    json!({"type": "array", "items": items, "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}, "description": description})
}

fn object(description: &str, props: Value) -> Value {
    json!({"type": "object", "description": description, "properties": props})
}

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const OBJECT_REFERENCE: &str = "io.k8s.api.core.v1.ObjectReference";
const ENV_VAR: &str = "io.k8s.api.core.v1.EnvVar";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const RESOURCES: &str = "io.k8s.api.core.v1.ResourceRequirements";
const POD_TEMPLATE: &str = "io.k8s.api.core.v1.PodTemplateSpec";

/// Every DeploymentConfig schema, keyed by its components name.
pub fn definitions() -> Map<String, Value> {
    let time = json!({"type": "string", "format": "date-time"});
    let defs = [
        (
            "DeploymentConfig",
            object(
                "Deployment Configs define the template for a pod and manages deploying new images or configuration changes.",
                json!({
                    "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
                    "kind": string("Kind is a string value representing the REST resource this object represents."),
                    "metadata": r(META),
                    "spec": r("DeploymentConfigSpec"),
                    "status": r("DeploymentConfigStatus"),
                }),
            ),
        ),
        (
            "DeploymentConfigSpec",
            object(
                "DeploymentConfigSpec represents the desired state of the deployment.",
                json!({
                    "strategy": r("DeploymentStrategy"),
                    "minReadySeconds": int("int32", "Minimum number of seconds for which a newly created pod should be ready without any of its container crashing, for it to be considered available."),
                    "triggers": array(r("DeploymentTriggerPolicy"), "Triggers determine how updates to a DeploymentConfig result in new deployments. If no triggers are defined, a new deployment can only occur as a result of an explicit client update to the DeploymentConfig with a new LatestVersion."),
                    "replicas": int("int32", "Replicas is the number of desired replicas."),
                    "revisionHistoryLimit": int("int32", "RevisionHistoryLimit is the number of old ReplicationControllers to retain to allow for rollbacks."),
                    "test": boolean("Test ensures that this deployment config will have zero replicas except while a deployment is running."),
                    "paused": boolean("Paused indicates that the deployment config is paused resulting in no new deployments on template changes or changes in the template caused by other triggers."),
                    "selector": string_map("Selector is a label query over pods that should match the Replicas count."),
                    "template": r(POD_TEMPLATE),
                }),
            ),
        ),
        (
            "DeploymentStrategy",
            object(
                "DeploymentStrategy describes how to perform a deployment.",
                json!({
                    "type": string("Type is the name of a deployment strategy: Recreate, Rolling or Custom."),
                    "customParams": r("CustomDeploymentStrategyParams"),
                    "recreateParams": r("RecreateDeploymentStrategyParams"),
                    "rollingParams": r("RollingDeploymentStrategyParams"),
                    "resources": r(RESOURCES),
                    "labels": string_map("Labels is a set of key, value pairs added to custom deployer and lifecycle pre/post hook pods."),
                    "annotations": string_map("Annotations is a set of key, value pairs added to custom deployer and lifecycle pre/post hook pods."),
                    "activeDeadlineSeconds": int("int64", "ActiveDeadlineSeconds is the duration in seconds that the deployer pods for this deployment config may be active on a node before the system actively tries to terminate them."),
                }),
            ),
        ),
        (
            "CustomDeploymentStrategyParams",
            object(
                "CustomDeploymentStrategyParams are the input to the Custom deployment strategy.",
                json!({
                    "image": string("Image specifies a container image which can carry out a deployment."),
                    "environment": array(r(ENV_VAR), "Environment holds the environment which will be given to the container for Image."),
                    "command": array(json!({"type": "string"}), "Command is optional and overrides CMD in the container Image."),
                }),
            ),
        ),
        (
            "RecreateDeploymentStrategyParams",
            object(
                "RecreateDeploymentStrategyParams are the input to the Recreate deployment strategy.",
                json!({
                    "timeoutSeconds": int("int64", "TimeoutSeconds is the time to wait for updates before giving up."),
                    "pre": r("LifecycleHook"),
                    "mid": r("LifecycleHook"),
                    "post": r("LifecycleHook"),
                }),
            ),
        ),
        (
            "RollingDeploymentStrategyParams",
            object(
                "RollingDeploymentStrategyParams are the input to the Rolling deployment strategy.",
                json!({
                    "updatePeriodSeconds": int("int64", "UpdatePeriodSeconds is the time to wait between individual pod updates."),
                    "intervalSeconds": int("int64", "IntervalSeconds is the time to wait between polling deployment status after update."),
                    "timeoutSeconds": int("int64", "TimeoutSeconds is the time to wait for updates before giving up."),
                    "maxUnavailable": r(INT_OR_STRING),
                    "maxSurge": r(INT_OR_STRING),
                    "pre": r("LifecycleHook"),
                    "post": r("LifecycleHook"),
                }),
            ),
        ),
        (
            "LifecycleHook",
            object(
                "LifecycleHook defines a specific deployment lifecycle action. Only one type of action may be specified at any time.",
                json!({
                    "failurePolicy": string("FailurePolicy specifies what action to take if the hook fails: Abort, Retry or Ignore."),
                    "execNewPod": r("ExecNewPodHook"),
                    "tagImages": array(r("TagImageHook"), "TagImages instructs the deployer to tag the current image referenced under a container onto an image stream tag."),
                }),
            ),
        ),
        (
            "ExecNewPodHook",
            object(
                "ExecNewPodHook is a hook implementation which runs a command in a new pod based on the specified container which is assumed to be part of the deployment template.",
                json!({
                    "command": array(json!({"type": "string"}), "Command is the action command and its arguments."),
                    "env": array(r(ENV_VAR), "Env is a set of environment variables to supply to the hook pod's container."),
                    "containerName": string("ContainerName is the name of a container in the deployment pod template whose container image will be used for the hook pod's container."),
                    "volumes": array(json!({"type": "string"}), "Volumes is a list of named volumes from the pod template which should be copied to the hook pod."),
                }),
            ),
        ),
        (
            "TagImageHook",
            object(
                "TagImageHook is a request to tag the image in a particular container onto an ImageStreamTag.",
                json!({
                    "containerName": string("ContainerName is the name of a container in the deployment config whose image value will be used as the source of the tag."),
                    "to": r(OBJECT_REFERENCE),
                }),
            ),
        ),
        (
            "DeploymentTriggerPolicy",
            object(
                "DeploymentTriggerPolicy describes a policy for a single trigger that results in a new deployment.",
                json!({
                    "type": string("Type of the trigger: ConfigChange or ImageChange."),
                    "imageChangeParams": r("DeploymentTriggerImageChangeParams"),
                }),
            ),
        ),
        (
            "DeploymentTriggerImageChangeParams",
            object(
                "DeploymentTriggerImageChangeParams represents the parameters to the ImageChange trigger.",
                json!({
                    "automatic": boolean("Automatic means that the detection of a new tag value should result in an image update inside the pod template."),
                    "containerNames": array(json!({"type": "string"}), "ContainerNames is used to restrict tag updates to the specified set of container names in a pod."),
                    "from": r(OBJECT_REFERENCE),
                    "lastTriggeredImage": string("LastTriggeredImage is the last image to be triggered."),
                }),
            ),
        ),
        (
            "DeploymentConfigStatus",
            object(
                "DeploymentConfigStatus represents the current deployment state.",
                json!({
                    "latestVersion": int("int64", "LatestVersion is used to determine whether the current deployment associated with a deployment config is out of sync."),
                    "observedGeneration": int("int64", "ObservedGeneration is the most recent generation observed by the deployment config controller."),
                    "replicas": int("int32", "Replicas is the total number of pods targeted by this deployment config."),
                    "updatedReplicas": int("int32", "UpdatedReplicas is the total number of non-terminated pods targeted by this deployment config that have the desired template spec."),
                    "availableReplicas": int("int32", "AvailableReplicas is the total number of available pods targeted by this deployment config."),
                    "unavailableReplicas": int("int32", "UnavailableReplicas is the total number of unavailable pods targeted by this deployment config."),
                    "readyReplicas": int("int32", "Total number of ready pods targeted by this deployment."),
                    "details": r("DeploymentDetails"),
                    "conditions": {
                        "type": "array", "items": r("DeploymentCondition"),
                        "description": "Conditions represents the latest available observations of a deployment config's current state.",
                        "x-kubernetes-patch-merge-key": "type", "x-kubernetes-patch-strategy": "merge",
                    },
                }),
            ),
        ),
        (
            "DeploymentDetails",
            object(
                "DeploymentDetails captures information about the causes of a deployment.",
                json!({
                    "message": string("Message is the user specified change message, if this deployment was triggered manually by the user."),
                    "causes": array(r("DeploymentCause"), "Causes are extended data associated with all the causes for creating a new deployment."),
                }),
            ),
        ),
        (
            "DeploymentCause",
            object(
                "DeploymentCause captures information about a particular cause of a deployment.",
                json!({
                    "type": string("Type of the trigger that resulted in the creation of a new deployment."),
                    "imageTrigger": r("DeploymentCauseImageTrigger"),
                }),
            ),
        ),
        (
            "DeploymentCauseImageTrigger",
            object(
                "DeploymentCauseImageTrigger represents details about the cause of a deployment originating from an image change trigger.",
                json!({"from": r(OBJECT_REFERENCE)}),
            ),
        ),
        (
            "DeploymentCondition",
            object(
                "DeploymentCondition describes the state of a deployment config at a certain point.",
                json!({
                    "type": string("Type of deployment condition."),
                    "status": string("Status of the condition, one of True, False, Unknown."),
                    "lastUpdateTime": time.clone(),
                    "lastTransitionTime": time,
                    "reason": string("The reason for the condition's last transition."),
                    "message": string("A human readable message indicating details about the transition."),
                }),
            ),
        ),
    ];
    defs.into_iter()
        .map(|(n, s)| (format!("{PREFIX}{n}"), s))
        .collect()
}

/// The Kubernetes schemas the DeploymentConfig schemas refer to, so the generator adds
/// them; returns the last one's reference, as `subschema_for` does.
pub fn add_referenced(generator: &mut schemars::SchemaGenerator) {
    use k8s_openapi::api::core::v1 as core;
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
    generator.subschema_for::<core::ObjectReference>();
    generator.subschema_for::<core::EnvVar>();
    generator.subschema_for::<core::ResourceRequirements>();
    generator.subschema_for::<core::PodTemplateSpec>();
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_names_a_schema() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        add_referenced(&mut generator);
        let mut all = generator.take_definitions(true);
        all.extend(definitions());
        let defs = Value::Object(definitions());
        let mut out = Vec::new();
        crate::registry::schema::references(&defs, &mut out);
        for r in out {
            assert!(all.contains_key(r), "{r} is not defined");
        }
    }
}
