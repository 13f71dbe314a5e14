//! What a container's spec asks of the runtime: its resources and its pod's, who it runs
//! as and how it is hardened, and the hash that tells a changed spec.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::runtime::Resources;
use crate::types::quantity::Quantity;

/// What a whole pod may use, as kubelet sizes the pod's cgroup: a limit only when every
/// container has one (the app containers' sum, or an init container's if larger); the
/// cpu weight from the requests likewise.
/// Who a container runs as, from its security context over its pod's.
pub(super) fn security(pod: &Value, c: &Value) -> crate::node::images::Security {
    let pick = |key: &str| {
        c.pointer(&format!("/securityContext/{key}"))
            .or_else(|| pod.pointer(&format!("/spec/securityContext/{key}")))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    crate::node::images::Security {
        run_as_user: pick("runAsUser"),
        run_as_group: pick("runAsGroup"),
        supplemental_groups: pod
            .pointer("/spec/securityContext/supplementalGroups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .filter_map(|n| u32::try_from(n).ok())
            .collect(),
        hardening: hardening(pod, c),
    }
}

/// The namespaces a pod's containers share: of the host's, what the pod asks for; a
/// network namespace of its own when the node has a pod network and the pod does not
/// use the host's.
pub(super) fn sandbox(pod: &Value, pod_network: bool) -> crate::runtime::oci::Sandbox {
    let flag = |key: &str| pod.pointer(key) == Some(&Value::Bool(true));
    let host_network = flag("/spec/hostNetwork");
    crate::runtime::oci::Sandbox {
        host_network,
        network: pod_network && !host_network,
        host_ipc: flag("/spec/hostIPC"),
        host_pid: flag("/spec/hostPID"),
        share_pids: flag("/spec/shareProcessNamespace"),
    }
}

/// What a container's security context asks of its process and root filesystem.
fn hardening(pod: &Value, c: &Value) -> crate::runtime::oci::Hardening {
    let sc = &c["securityContext"];
    let names = |key: &str| -> Vec<String> {
        sc.pointer(&format!("/capabilities/{key}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let seccomp = sc
        .pointer("/seccompProfile/type")
        .or_else(|| pod.pointer("/spec/securityContext/seccompProfile/type"))
        .and_then(Value::as_str);
    crate::runtime::oci::Hardening {
        privileged: sc["privileged"] == true,
        add: names("add"),
        drop: names("drop"),
        read_only_root: sc["readOnlyRootFilesystem"] == true,
        no_new_privileges: sc["allowPrivilegeEscalation"] == false,
        seccomp_runtime_default: seccomp == Some("RuntimeDefault"),
    }
}

pub(super) fn pod_resources(pod: &Value) -> Resources {
    let list = |field: &str| -> Vec<Resources> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .map(resources)
            .collect()
    };
    let (apps, inits) = (list("containers"), list("initContainers"));
    let total = |get: fn(&Resources) -> Option<u64>, all: bool| -> Option<u64> {
        let each = |rs: &[Resources]| -> Option<Vec<u64>> {
            if all {
                rs.iter().map(get).collect()
            } else {
                Some(rs.iter().filter_map(get).collect())
            }
        };
        let sum: u64 = each(&apps)?.iter().sum();
        let peak = each(&inits)?.into_iter().max().unwrap_or(0);
        Some(sum.max(peak)).filter(|n| *n > 0)
    };
    Resources {
        memory_limit_bytes: total(|r| r.memory_limit_bytes, true),
        cpu_limit_millis: total(|r| r.cpu_limit_millis, true),
        cpu_request_millis: total(|r| r.cpu_request_millis.or(r.cpu_limit_millis), false),
    }
}

/// A container's resources as the runtime takes them. A quantity that does not parse
/// (the API validates them) counts as not given.
pub(super) fn resources(c: &Value) -> Resources {
    let get = |path: &str| {
        c.pointer(path)
            .and_then(Value::as_str)
            .and_then(|q| q.parse::<Quantity>().ok())
    };
    let whole = |q: Quantity| u64::try_from(q.value()).ok();
    let milli = |q: Quantity| u64::try_from(q.milli()).ok();
    // A limit of zero is no limit (as the container runtimes read it).
    let limit = |n: u64| (n > 0).then_some(n);
    Resources {
        memory_limit_bytes: get("/resources/limits/memory")
            .and_then(whole)
            .and_then(limit),
        cpu_limit_millis: get("/resources/limits/cpu").and_then(milli).and_then(limit),
        cpu_request_millis: get("/resources/requests/cpu").and_then(milli),
    }
}

/// A stable hash of a container's spec: a different hash means "changed, restart".
pub(super) fn spec_hash(container: &Value) -> String {
    let digest = Sha256::digest(serde_json::to_vec(container).unwrap_or_default());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resources_are_read_in_kernel_units() {
        let c = json!({"resources": {"limits": {"memory": "32Mi", "cpu": "1500m"},
                                     "requests": {"cpu": "0.25", "memory": "1Gi"}}});
        assert_eq!(
            resources(&c),
            Resources {
                memory_limit_bytes: Some(32 << 20),
                cpu_limit_millis: Some(1500),
                cpu_request_millis: Some(250),
            }
        );
        assert_eq!(resources(&json!({})), Resources::default());
        assert!(!resources(&json!({"resources": {"limits": {"memory": "lots"}}})).any_limit());
        assert!(
            !resources(&json!({"resources": {"limits": {"memory": "0", "cpu": "0"}}})).any_limit()
        );
    }

    #[test]
    fn a_pod_is_limited_only_when_every_container_is() {
        let c = |limits: Value, requests: Value| json!({"name": "c", "resources": {"limits": limits, "requests": requests}});
        let pod = json!({"spec": {
            "containers": [c(json!({"memory": "64Mi", "cpu": "1"}), json!({"cpu": "100m"})),
                           c(json!({"memory": "32Mi"}), json!({}))],
            "initContainers": [c(json!({"memory": "128Mi", "cpu": "2"}), json!({}))],
        }});
        assert_eq!(
            pod_resources(&pod),
            Resources {
                memory_limit_bytes: Some(128 << 20),
                cpu_limit_millis: None,
                cpu_request_millis: Some(2000),
            },
            "the init container needs the most memory; one app container has no cpu limit"
        );
        let apps = json!({"spec": {"containers": [
            c(json!({"memory": "64Mi"}), json!({})), c(json!({"memory": "32Mi"}), json!({}))
        ]}});
        assert_eq!(pod_resources(&apps).memory_limit_bytes, Some(96 << 20));
        assert_eq!(pod_resources(&apps).cpu_request_millis, None);
    }

    #[test]
    fn a_changed_container_has_another_hash() {
        let a = json!({"name": "c", "image": "x:1"});
        let b = json!({"name": "c", "image": "x:2"});
        assert_ne!(spec_hash(&a), spec_hash(&b));
        assert_eq!(spec_hash(&a), spec_hash(&a.clone()));
    }
}
