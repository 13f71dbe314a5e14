//! OpenShift DeploymentConfig vocabulary shared by the API, the controllers and the
//! deployer process: the annotation and label keys on deployments (RCs), deployer and hook
//! pods, the name rules, and the parts of an encoded DeploymentConfig the deployer reads.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Annotation and label: the DC a deployment (or deployer pod) belongs to.
pub const DEPLOYMENT_CONFIG_ANNOTATION: &str = "openshift.io/deployment-config.name";
/// Label on deployments selecting them by DC (same key as the annotation).
pub const DEPLOYMENT_CONFIG_LABEL: &str = DEPLOYMENT_CONFIG_ANNOTATION;
/// The DC version a deployment was made for.
pub const DEPLOYMENT_VERSION_ANNOTATION: &str = "openshift.io/deployment-config.latest-version";
/// The DC as it was when the deployment was made (JSON).
pub const DEPLOYMENT_ENCODED_CONFIG_ANNOTATION: &str = "openshift.io/encoded-deployment-config";
/// The phase of a deployment.
pub const DEPLOYMENT_PHASE_ANNOTATION: &str = "openshift.io/deployment.phase";
/// Target replica count while a deployment runs.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "kubectl.kubernetes.io/desired-replicas";
/// The replica count of a finished deployment.
pub const DEPLOYMENT_REPLICAS_ANNOTATION: &str = "openshift.io/deployment.replicas";
/// Why a deployment exists, failed or was cancelled.
pub const DEPLOYMENT_STATUS_REASON_ANNOTATION: &str = "openshift.io/deployment.status-reason";
/// `true` once a deployment is cancelled.
pub const DEPLOYMENT_CANCELLED_ANNOTATION: &str = "openshift.io/deployment.cancelled";
/// The name of a deployment's deployer pod.
pub const DEPLOYER_POD_ANNOTATION: &str = "openshift.io/deployer-pod.name";
pub const DEPLOYER_POD_CREATED_AT_ANNOTATION: &str = "openshift.io/deployer-pod.created-at";
pub const DEPLOYER_POD_STARTED_AT_ANNOTATION: &str = "openshift.io/deployer-pod.started-at";
pub const DEPLOYER_POD_COMPLETED_AT_ANNOTATION: &str = "openshift.io/deployer-pod.completed-at";
/// On a DC (copied to its RCs): never run a deployer pod for its deployments.
pub const DEPLOYMENT_IGNORE_POD_ANNOTATION: &str = "deploy.openshift.io/deployer-pod.ignore";
/// `<from-rc>:<from-uid>` on the new deployment during a rolling update.
pub const UPDATE_SOURCE_ID_ANNOTATION: &str = "kubectl.kubernetes.io/update-source-id";
/// The replica count of the old deployment before a rolling update.
pub const ORIGINAL_REPLICAS_ANNOTATION: &str = "kubectl.kubernetes.io/original-replicas";
/// On application, deployer and hook pods: the deployment they belong to.
pub const DEPLOYMENT_ANNOTATION: &str = "openshift.io/deployment.name";
/// Label on deployer and hook pods: the deployment they work for.
pub const DEPLOYER_POD_FOR_LABEL: &str = "openshift.io/deployer-pod-for.name";
/// Label on hook pods: `hook-pre`, `hook-mid` or `hook-post`.
pub const DEPLOYER_POD_TYPE_LABEL: &str = "openshift.io/deployer-pod.type";
/// Label on application pods and in deployment selectors.
pub const DEPLOYMENT_CONFIG_POD_LABEL: &str = "deploymentconfig";
pub const DEPLOYMENT_POD_LABEL: &str = "deployment";

/// Environment of deployer and hook pods.
pub const DEPLOYMENT_NAME_ENV: &str = "OPENSHIFT_DEPLOYMENT_NAME";
pub const DEPLOYMENT_NAMESPACE_ENV: &str = "OPENSHIFT_DEPLOYMENT_NAMESPACE";

/// Deadline of deployer pods when the strategy sets none.
pub const MAX_DEPLOYMENT_DURATION_SECONDS: i64 = 21600;
/// Default timeouts of the Recreate and Rolling strategies.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 600;

/// Longest generated pod name.
const MAX_NAME_LENGTH: usize = 253;

/// Phases of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    New,
    Pending,
    Running,
    Complete,
    Failed,
}

impl Phase {
    pub fn parse(s: &str) -> Option<Phase> {
        Some(match s {
            "New" => Phase::New,
            "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Complete" => Phase::Complete,
            "Failed" => Phase::Failed,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::New => "New",
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Complete => "Complete",
            Phase::Failed => "Failed",
        }
    }

    /// The phase of a deployment (`New` when unset or unknown).
    pub fn of(rc: &Value) -> Phase {
        deployment_phase(rc)
    }
}

/// The deployment (RC) of version `version` of DC `dc`.
pub fn deployment_name(dc: &str, version: i64) -> String {
    format!("{dc}-{version}")
}

/// The deployer pod of deployment `rc`.
pub fn deployer_pod_name(rc: &str) -> String {
    pod_name(rc, "deploy")
}

/// The hook pod of deployment `rc` for hook `label` (`pre`, `mid`, `post`).
pub fn hook_pod_name(rc: &str, label: &str) -> String {
    pod_name(rc, &format!("hook-{label}"))
}

fn fnv1a32(s: &str) -> u32 {
    super::fnv1a32(&[s.as_bytes()])
}

/// `<base>-<suffix>`, shortened with a hash of `base` when longer than a name may be.
pub fn pod_name(base: &str, suffix: &str) -> String {
    let name = format!("{base}-{suffix}");
    if name.len() <= MAX_NAME_LENGTH {
        return name;
    }
    let keep = MAX_NAME_LENGTH.saturating_sub(10 + suffix.len());
    if keep == 0 {
        let mut out = format!("{}-{:08x}", cut(base, 244), fnv1a32(&name));
        out.truncate(MAX_NAME_LENGTH);
        return out;
    }
    format!("{}-{:08x}-{suffix}", cut(base, keep), fnv1a32(base))
}

fn cut(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// An annotation of an object.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The DC version of a deployment (0 when it has none).
pub fn deployment_version(rc: &Value) -> i64 {
    annotation(rc, DEPLOYMENT_VERSION_ANNOTATION)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The phase of a deployment (`New` when unset or unknown).
pub fn deployment_phase(rc: &Value) -> Phase {
    annotation(rc, DEPLOYMENT_PHASE_ANNOTATION)
        .and_then(Phase::parse)
        .unwrap_or(Phase::New)
}

/// Decodes the DC a deployment was made from.
pub fn decode_deployment_config(rc: &Value) -> Result<DeploymentConfig, String> {
    let encoded = annotation(rc, DEPLOYMENT_ENCODED_CONFIG_ANNOTATION)
        .ok_or_else(|| format!("no {DEPLOYMENT_ENCODED_CONFIG_ANNOTATION} annotation"))?;
    serde_json::from_str(encoded).map_err(|e| e.to_string())
}

/// The parts of a DeploymentConfig (`apps.openshift.io/v1`) the deployer works from.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentConfig {
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    pub spec: DeploymentConfigSpec,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentConfigSpec {
    #[serde(default)]
    pub strategy: DeploymentStrategy,
    #[serde(default)]
    pub min_ready_seconds: i32,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub test: bool,
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    #[serde(default)]
    pub template: Option<PodTemplateSpec>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStrategy {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub custom_params: Option<CustomParams>,
    #[serde(default)]
    pub recreate_params: Option<RecreateParams>,
    #[serde(default)]
    pub rolling_params: Option<RollingParams>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub active_deadline_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomParams {
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub environment: Vec<EnvVar>,
    #[serde(default)]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecreateParams {
    #[serde(default)]
    pub timeout_seconds: Option<i64>,
    #[serde(default)]
    pub pre: Option<LifecycleHook>,
    #[serde(default)]
    pub mid: Option<LifecycleHook>,
    #[serde(default)]
    pub post: Option<LifecycleHook>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingParams {
    #[serde(default)]
    pub update_period_seconds: Option<i64>,
    #[serde(default)]
    pub interval_seconds: Option<i64>,
    #[serde(default)]
    pub timeout_seconds: Option<i64>,
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default)]
    pub max_surge: Option<IntOrString>,
    #[serde(default)]
    pub pre: Option<LifecycleHook>,
    #[serde(default)]
    pub post: Option<LifecycleHook>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHook {
    #[serde(default)]
    pub failure_policy: String,
    #[serde(default)]
    pub exec_new_pod: Option<ExecNewPodHook>,
    #[serde(default)]
    pub tag_images: Vec<TagImageHook>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecNewPodHook {
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub container_name: String,
    #[serde(default)]
    pub volumes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TagImageHook {
    #[serde(default)]
    pub container_name: String,
    #[serde(default)]
    pub to: Value,
}

/// Resolves a surge or unavailability figure against `total`: a number as is, a
/// percentage rounded up (`round_up`) or down. Errors on malformed percentages.
pub fn scaled_value(v: Option<&IntOrString>, total: i64, round_up: bool) -> Result<i64, String> {
    let s = match v {
        None => return Ok(0),
        Some(IntOrString::Int(n)) => return Ok(i64::from(*n)),
        Some(IntOrString::String(s)) => Value::String(s.clone()),
    };
    if super::int_or_percent(&s).is_none() {
        return Err(format!("invalid value for IntOrString: invalid value {s}"));
    }
    Ok(super::scaled_int_or_percent(Some(&s), total, round_up))
}

/// The image of deployer pods: the node agent runs it as `berth deploy`.
pub const DEPLOYER_IMAGE: &str = "berth/deployer";

/// The DC stored in an RC's encoded-config annotation (§7.2).
pub fn decode_config(rc: &Value) -> Result<Value, String> {
    let text = annotation(rc, DEPLOYMENT_ENCODED_CONFIG_ANNOTATION)
        .ok_or_else(|| format!("annotation {DEPLOYMENT_ENCODED_CONFIG_ANNOTATION} is missing"))?;
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !v.is_object() {
        return Err("the encoded deployment config is not an object".into());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_rules() {
        assert_eq!(deployment_name("web", 3), "web-3");
        assert_eq!(deployer_pod_name("web-3"), "web-3-deploy");
        assert_eq!(hook_pod_name("web-3", "pre"), "web-3-hook-pre");
        let long = "a".repeat(250);
        let n = deployer_pod_name(&long);
        assert_eq!(n.len(), 253);
        assert!(
            n.ends_with(&format!("-{:08x}-deploy", fnv1a32(&long))),
            "{n}"
        );
        assert!(n.starts_with(&"a".repeat(253 - 10 - 6)));
        // A suffix too long on its own.
        let n = pod_name("b", &"s".repeat(260));
        assert_eq!(n.len(), 10);
        assert_eq!(
            n,
            format!("b-{:08x}", fnv1a32(&format!("b-{}", "s".repeat(260))))
        );
    }

    #[test]
    fn fnv_matches_the_reference_values() {
        assert_eq!(fnv1a32(""), 0x811c9dc5);
        assert_eq!(fnv1a32("a"), 0xe40c292c);
        assert_eq!(fnv1a32("foobar"), 0xbf9cf968);
    }

    #[test]
    fn percentages_round_as_the_strategy_says() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled_value(Some(&pct("25%")), 4, true), Ok(1));
        assert_eq!(scaled_value(Some(&pct("25%")), 5, true), Ok(2));
        assert_eq!(scaled_value(Some(&pct("25%")), 5, false), Ok(1));
        assert_eq!(scaled_value(Some(&pct("25%")), 3, false), Ok(0));
        assert_eq!(scaled_value(Some(&pct("0%")), 10, true), Ok(0));
        assert_eq!(scaled_value(Some(&IntOrString::Int(2)), 10, true), Ok(2));
        assert_eq!(scaled_value(None, 10, true), Ok(0));
        assert!(scaled_value(Some(&pct("x%")), 10, true).is_err());
    }

    #[test]
    fn the_encoded_config_decodes_from_the_deployment() {
        let dc = json!({
            "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {
                "replicas": 3,
                "strategy": {"type": "Rolling", "rollingParams": {
                    "maxSurge": "25%", "maxUnavailable": 1, "timeoutSeconds": 30,
                    "pre": {"failurePolicy": "Abort",
                            "execNewPod": {"containerName": "app", "command": ["true"]}},
                }},
                "template": {"spec": {"containers": [{"name": "app", "image": "busybox"}]}},
            },
        });
        let rc = json!({"metadata": {"annotations": {
            DEPLOYMENT_ENCODED_CONFIG_ANNOTATION: dc.to_string(),
            DEPLOYMENT_VERSION_ANNOTATION: "4",
            DEPLOYMENT_PHASE_ANNOTATION: "Complete",
        }}});
        let got = decode_deployment_config(&rc).unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some("web"));
        assert_eq!(got.spec.replicas, 3);
        let p = got.spec.strategy.rolling_params.unwrap();
        assert_eq!(p.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(p.pre.unwrap().exec_new_pod.unwrap().command, ["true"]);
        assert_eq!(deployment_version(&rc), 4);
        assert_eq!(deployment_phase(&rc), Phase::Complete);
        assert_eq!(deployment_phase(&json!({})), Phase::New);
        let bad = json!({"metadata": {"annotations": {
            DEPLOYMENT_ENCODED_CONFIG_ANNOTATION: "{not json",
        }}});
        assert!(decode_deployment_config(&bad).is_err());
        assert!(decode_deployment_config(&json!({})).is_err());
    }
}
