//! OpenShift DeploymentConfigs (`apps.openshift.io/v1`): the annotation and label names
//! the DC machinery shares (spec §7), the names of deployments and their pods (§8), the
//! served schema, defaults and validation, and the `instantiate` and `rollback`
//! subresources. The DC and deployer controllers build on these names.

pub mod rules;
pub mod schema;
mod subresources;

pub use subresources::{Instantiated, RollbackRequest, decode_config};

/// The API group of DeploymentConfigs.
pub const GROUP: &str = "apps.openshift.io";
/// `apiVersion` of DeploymentConfigs.
pub const API_VERSION: &str = "apps.openshift.io/v1";

/// §7.1: on a DC, copied to its RCs; the deployer controller leaves such RCs alone.
pub const DEPLOYER_POD_IGNORE_ANNOTATION: &str = "deploy.openshift.io/deployer-pod.ignore";
/// §7.2: the DC an RC belongs to (annotation and label).
pub const DEPLOYMENT_CONFIG_ANNOTATION: &str = "openshift.io/deployment-config.name";
/// §7.2: the DC version an RC deploys.
pub const LATEST_VERSION_ANNOTATION: &str = "openshift.io/deployment-config.latest-version";
/// §7.2: the whole DC as it was when the RC was made.
pub const ENCODED_CONFIG_ANNOTATION: &str = "openshift.io/encoded-deployment-config";
/// §7.2: the phase of a deployment (New, Pending, Running, Complete, Failed).
pub const PHASE_ANNOTATION: &str = "openshift.io/deployment.phase";
/// §7.2: the replica count the deployment is heading for.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "kubectl.kubernetes.io/desired-replicas";
/// §7.2: `0` at creation; the final target once Complete.
pub const DEPLOYMENT_REPLICAS_ANNOTATION: &str = "openshift.io/deployment.replicas";
/// §7.2: why the deployment exists, later why it failed or was cancelled.
pub const STATUS_REASON_ANNOTATION: &str = "openshift.io/deployment.status-reason";
/// §7.2: `true` when the deployment was cancelled.
pub const CANCELLED_ANNOTATION: &str = "openshift.io/deployment.cancelled";
/// §7.2: the name of the deployer pod of an RC.
pub const DEPLOYER_POD_ANNOTATION: &str = "openshift.io/deployer-pod.name";
/// §7.2: timestamps of the deployer pod.
pub const DEPLOYER_POD_CREATED_AT_ANNOTATION: &str = "openshift.io/deployer-pod.created-at";
pub const DEPLOYER_POD_STARTED_AT_ANNOTATION: &str = "openshift.io/deployer-pod.started-at";
pub const DEPLOYER_POD_COMPLETED_AT_ANNOTATION: &str = "openshift.io/deployer-pod.completed-at";
/// §7.2: `<from-rc>:<from-uid>` during a rolling update.
pub const UPDATE_SOURCE_ID_ANNOTATION: &str = "kubectl.kubernetes.io/update-source-id";
/// §7.2: an old RC's replica count before a rolling update.
pub const ORIGINAL_REPLICAS_ANNOTATION: &str = "kubectl.kubernetes.io/original-replicas";
/// §7.3: on application pods, the RC that made them.
pub const DEPLOYMENT_ANNOTATION: &str = "openshift.io/deployment.name";
/// §7.3: label of application pods and RC selectors naming the DC.
pub const DEPLOYMENT_CONFIG_LABEL: &str = "deploymentconfig";
/// §7.3: label of application pods and RC selectors naming the RC.
pub const DEPLOYMENT_LABEL: &str = "deployment";
/// §7.4: label of deployer and hook pods naming their RC.
pub const DEPLOYER_POD_FOR_LABEL: &str = "openshift.io/deployer-pod-for.name";
/// §7.4: label of hook pods (`hook-pre`, `hook-mid`, `hook-post`).
pub const DEPLOYER_POD_TYPE_LABEL: &str = "openshift.io/deployer-pod.type";

/// The deployment phases of §2.7, as the phase annotation spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    New,
    Pending,
    Running,
    Complete,
    Failed,
}

impl Phase {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "New" => Self::New,
            "Pending" => Self::Pending,
            "Running" => Self::Running,
            "Complete" => Self::Complete,
            "Failed" => Self::Failed,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "New",
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Complete => "Complete",
            Self::Failed => "Failed",
        }
    }

    /// The phase of an RC (a deployment); `New` when the annotation is absent or unknown.
    pub fn of(rc: &serde_json::Value) -> Self {
        rc.pointer("/metadata/annotations")
            .and_then(|a| a.get(PHASE_ANNOTATION))
            .and_then(serde_json::Value::as_str)
            .and_then(Self::parse)
            .unwrap_or(Self::New)
    }
}

/// §8: the RC of version `version` of DC `dc`.
pub fn deployment_name(dc: &str, version: i64) -> String {
    format!("{dc}-{version}")
}

/// §8: the deployer pod of RC `rc`.
pub fn deployer_pod_name(rc: &str) -> String {
    pod_name(rc, "deploy")
}

/// §8: a hook pod of RC `rc` (`suffix` is `hook-pre`, `hook-mid` or `hook-post`).
pub fn hook_pod_name(rc: &str, suffix: &str) -> String {
    pod_name(rc, suffix)
}

/// FNV-1a, 32 bits.
fn fnv32a(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Cuts `s` to at most `n` bytes (names are ASCII).
fn cut(s: &str, n: usize) -> &str {
    &s[..s.len().min(n)]
}

/// §8: `<base>-<suffix>`, shortened with a hash of `base` to stay within 253 characters.
pub fn pod_name(base: &str, suffix: &str) -> String {
    const MAX: usize = 253;
    let name = format!("{base}-{suffix}");
    if name.len() <= MAX {
        return name;
    }
    let hash = format!("{:08x}", fnv32a(base));
    if suffix.len() + 10 > MAX {
        let whole = format!("{}-{:08x}", cut(base, 244), fnv32a(&name));
        return cut(&whole, MAX).to_string();
    }
    let prefix = cut(base, MAX - 10 - suffix.len());
    format!("{prefix}-{hash}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployments_and_their_pods_are_named_after_the_config() {
        assert_eq!(deployment_name("web", 3), "web-3");
        assert_eq!(deployer_pod_name("web-3"), "web-3-deploy");
        assert_eq!(hook_pod_name("web-3", "hook-pre"), "web-3-hook-pre");
    }

    #[test]
    fn long_pod_names_are_cut_and_hashed() {
        let base = "a".repeat(250);
        let name = deployer_pod_name(&base);
        assert_eq!(name.len(), 253);
        assert!(name.ends_with("-deploy"));
        let hash = format!("-{:08x}-deploy", fnv32a(&base));
        assert!(name.ends_with(&hash), "{name}");
        let long_suffix = "s".repeat(250);
        let whole = format!("abc-{long_suffix}");
        assert_eq!(
            pod_name("abc", &long_suffix),
            format!("abc-{:08x}", fnv32a(&whole))
        );
        assert_eq!(fnv32a(""), 0x811c_9dc5);
    }

    #[test]
    fn phases_read_from_the_annotation() {
        let rc = serde_json::json!({"metadata": {"annotations": {PHASE_ANNOTATION: "Running"}}});
        assert_eq!(Phase::of(&rc), Phase::Running);
        assert_eq!(Phase::of(&serde_json::json!({})), Phase::New);
    }
}
