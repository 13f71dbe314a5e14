//! API object helpers shared by every layer above the store: timestamps, name and label
//! syntax, label and field selectors, quantities, taints and tolerations. Imports nothing
//! else from the crate.

pub mod accounts;
pub mod clock;
pub mod cron;
pub mod disruption;
pub mod fields;
pub mod fit;
pub mod json;
pub mod labels;
pub mod meta;
pub mod metrics;
pub mod names;
pub mod openshift;
pub mod private;
pub mod quantity;
pub mod taints;
pub mod tls;

/// The current time as an API timestamp (RFC 3339, UTC, whole seconds). Every object
/// timestamp comes from here.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The current time with microseconds (RFC 3339, UTC), as MicroTime fields use.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The condition of `kind` in `obj.status.conditions`, if any.
pub fn condition<'a>(obj: &'a serde_json::Value, kind: &str) -> Option<&'a serde_json::Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Whether a pod's `Ready` condition is `True` (`IsPodReady`).
pub fn is_pod_ready(pod: &serde_json::Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

/// How long until a ready pod is available after `min_ready` seconds of readiness
/// (`IsPodAvailable`): zero when it is, `None` when it is not ready.
pub fn until_pod_available(pod: &serde_json::Value, min_ready: i64) -> Option<std::time::Duration> {
    let c = condition(pod, "Ready").filter(|c| c["status"] == "True")?;
    if min_ready <= 0 {
        return Some(std::time::Duration::ZERO);
    }
    let age = c["lastTransitionTime"]
        .as_str()
        .and_then(age_seconds)
        .unwrap_or(0);
    Some(std::time::Duration::from_secs(
        (min_ready - age).max(0) as u64
    ))
}

/// Sets a condition in `obj.status.conditions` (replacing the one of the same type).
/// `lastTransitionTime` moves only when the status changes; returns whether anything did.
pub fn set_condition(obj: &mut serde_json::Value, mut cond: serde_json::Value) -> bool {
    use serde_json::{Value, json};
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    let status = &mut obj["status"];
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let list = status["conditions"].as_array_mut().expect("made an array");
    let pos = list.iter().position(|c| c["type"] == cond["type"]);
    let transition = match pos.map(|i| &list[i]) {
        Some(old) if old["status"] == cond["status"] => old.get("lastTransitionTime").cloned(),
        _ => None,
    };
    if cond.get("lastTransitionTime").is_none() {
        cond["lastTransitionTime"] = transition.unwrap_or_else(|| Value::String(now()));
    }
    match pos {
        Some(i) if list[i] == cond => false,
        Some(i) => {
            list[i] = cond;
            true
        }
        None => {
            list.push(cond);
            true
        }
    }
}

/// What `/version` answers, and what the client reports as its own version.
pub fn version_info() -> serde_json::Value {
    serde_json::json!({
        "major": "1",
        "minor": "37",
        "gitVersion": kubernetes_version(),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }),
    })
}

/// The Kubernetes version berth serves, as `/version` and its nodes report it.
pub fn kubernetes_version() -> String {
    format!("v1.37.0+berth-{}", env!("CARGO_PKG_VERSION"))
}

/// FNV-1a, 32 bits, over `parts` one after the other.
pub fn fnv1a32(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .flat_map(|p| p.iter())
        .fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
        })
}

/// A string spelled with the alphabet of upstream's `rand.SafeEncodeString` (no vowels, no
/// look-alike digits), as the workload controllers name what they hash.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// The label the workload controllers add to their sets' pod templates and selectors.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// Whether two pod templates are the same apart from their `pod-template-hash` label
/// (`EqualIgnoreHash`), reading both in place; absent labels or metadata are empty ones.
pub fn same_template_ignoring_hash(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::{Map, Value};
    /// Equal apart from `key`, which `inner` compares (absent and non-objects as empty).
    fn except(
        a: Option<&Value>,
        b: Option<&Value>,
        key: &str,
        inner: &dyn Fn(Option<&Value>, Option<&Value>) -> bool,
    ) -> bool {
        let empty = Map::new();
        let (am, bm) = match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => (x, y),
            (Some(Value::Object(x)), None) => (x, &empty),
            (None, Some(Value::Object(y))) => (&empty, y),
            (None, None) => return true,
            (x, y) => return x == y,
        };
        let rest = |m: &Map<String, Value>| m.keys().filter(|k| *k != key).count();
        rest(am) == rest(bm)
            && am
                .iter()
                .filter(|(k, _)| *k != key)
                .all(|(k, v)| bm.get(k) == Some(v))
            && inner(am.get(key), bm.get(key))
    }
    except(Some(a), Some(b), "metadata", &|ma, mb| {
        except(ma, mb, "labels", &|la, lb| {
            except(la, lb, POD_TEMPLATE_HASH_LABEL, &|_, _| true)
        })
    })
}

/// A copy of a pod template without its `pod-template-hash` label, as a rollback writes
/// it back to its Deployment.
pub fn template_without_hash(template: &serde_json::Value) -> serde_json::Value {
    let mut t = template.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(serde_json::Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    t
}

/// An IntOrString that is a number or a percentage `"N%"` (`IsValidPercent`): the figure
/// and whether it is a percentage; `None` when it is neither.
pub fn int_or_percent(v: &serde_json::Value) -> Option<(i64, bool)> {
    match v {
        serde_json::Value::Number(n) => n.as_i64().map(|n| (n, false)),
        serde_json::Value::String(s) => {
            let digits = s.strip_suffix('%')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok().map(|n| (n, true))
        }
        _ => None,
    }
}

/// An IntOrString resolved against `total` (`GetScaledValueFromIntOrPercent`): a number
/// as is, a percentage of `total` rounded up or down; absent or malformed is 0.
pub fn scaled_int_or_percent(v: Option<&serde_json::Value>, total: i64, round_up: bool) -> i64 {
    match v.and_then(int_or_percent) {
        None => 0,
        Some((n, false)) => n,
        Some((pct, true)) => {
            let num = pct * total;
            if round_up {
                (num + 99).div_euclid(100)
            } else {
                num.div_euclid(100)
            }
        }
    }
}

/// Seconds since an API timestamp, if it parses.
pub fn age_seconds(timestamp: &str) -> Option<i64> {
    let t: jiff::Timestamp = timestamp.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - t.as_second())
}

/// A duration the way kubectl prints ages: `45s`, `12m`, `3h15m`, `5d`.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=599 => format!("{}m{}s", s / 60, s % 60).replace("m0s", "m"),
        600..=10799 => format!("{}m", s / 60),
        10800..=28799 => {
            let (h, m) = (s / 3600, (s % 3600) / 60);
            if m == 0 {
                format!("{h}h")
            } else {
                format!("{h}h{m}m")
            }
        }
        28800..=172799 => format!("{}h", s / 3600),
        _ => {
            let d = s / 86400;
            let h = (s % 86400) / 3600;
            if d < 8 && h > 0 {
                format!("{d}d{h}h")
            } else {
                format!("{d}d")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(180), "3m");
        assert_eq!(human_duration(720), "12m");
        assert_eq!(human_duration(3 * 3600 + 15 * 60), "3h15m");
        assert_eq!(human_duration(10 * 3600), "10h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
    }

    #[test]
    fn timestamps_round_trip() {
        let t = now();
        assert!(t.ends_with('Z') && t.len() == 20, "{t}");
        assert!(age_seconds(&t).unwrap().abs() <= 1);
        assert!(now_micro().contains('.'));
    }
}

#[cfg(test)]
mod condition_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_condition_keeps_the_transition_time_while_status_holds() {
        let mut pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
        ]}});
        let changed = set_condition(
            &mut pod,
            json!({"type": "Ready", "status": "True", "reason": "Fine"}),
        );
        assert!(changed);
        let c = condition(&pod, "Ready").unwrap();
        assert_eq!(c["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert!(!set_condition(
            &mut pod,
            json!({"type": "Ready", "status": "True", "reason": "Fine"})
        ));
        assert!(set_condition(
            &mut pod,
            json!({"type": "Ready", "status": "False"})
        ));
        assert_ne!(
            condition(&pod, "Ready").unwrap()["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert!(set_condition(
            &mut pod,
            json!({"type": "PodScheduled", "status": "True"})
        ));
        assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 2);
    }
}

/// The annotation that marks a mirror pod (its value is the static pod's hash).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Whether a pod is the mirror of a static pod (a node runs it from a file; the API
/// only shows it).
pub fn is_mirror_pod(pod: &serde_json::Value) -> bool {
    pod.pointer("/metadata/annotations")
        .and_then(serde_json::Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// The cluster IP of the `kubernetes` Service in `default`: the first address of the
/// Services' range (10.96.0.0/16).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The cluster IP of the DNS Service `kube-system/kube-dns` (kubeadm's: the tenth of the
/// Services' range); no other Service is given it.
pub const DNS_SERVICE_IP: &str = "10.96.0.10";

/// The finalizer that holds a CustomResourceDefinition until its objects are gone.
pub const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The data directory used when none is given: `/var/lib/berth` for root, otherwise
/// `$XDG_DATA_HOME/berth` or `~/.local/share/berth`.
pub fn default_data_dir() -> std::path::PathBuf {
    if is_root() {
        return std::path::PathBuf::from("/var/lib/berth");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return std::path::PathBuf::from(xdg).join("berth");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => std::path::PathBuf::from(home).join(".local/share/berth"),
        None => std::path::PathBuf::from(".berth"),
    }
}

fn is_root() -> bool {
    // The effective uid is the owner of /proc/self; no libc call needed.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }
    #[cfg(not(unix))]
    {
        false
    }
}
