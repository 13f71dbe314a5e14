//! The downward API's values of a pod: its fields and its containers' resources, as
//! environment variables and `downwardAPI` files show them.

use crate::types::json::str_at;
use serde_json::Value;

/// The addresses of a pod as the downward API shows them: its node's and its own, the
/// primary (IPv4) one first (the node's too with the host's network).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ips<'a> {
    pub host: &'a str,
    pub pods: &'a [String],
}

/// A downward-API field of the pod.
pub(super) fn field_value(pod: &Value, path: &str, ips: &Ips) -> String {
    if let Some(label) = path
        .strip_prefix("metadata.labels['")
        .and_then(|p| p.strip_suffix("']"))
    {
        return str_at(
            pod,
            &format!("/metadata/labels/{}", label.replace('/', "~1")),
        )
        .into();
    }
    if let Some(a) = path
        .strip_prefix("metadata.annotations['")
        .and_then(|p| p.strip_suffix("']"))
    {
        return str_at(
            pod,
            &format!("/metadata/annotations/{}", a.replace('/', "~1")),
        )
        .into();
    }
    match path {
        "metadata.name" => str_at(pod, "/metadata/name").into(),
        "metadata.namespace" => str_at(pod, "/metadata/namespace").into(),
        "metadata.uid" => str_at(pod, "/metadata/uid").into(),
        "spec.nodeName" => str_at(pod, "/spec/nodeName").into(),
        "spec.serviceAccountName" => str_at(pod, "/spec/serviceAccountName").into(),
        "status.hostIP" | "status.hostIPs" => ips.host.into(),
        "status.podIP" => ips.pods.first().cloned().unwrap_or_default(),
        // As the kubelet gives them: every address, separated by commas.
        "status.podIPs" => ips.pods.join(","),
        _ => String::new(),
    }
}

/// A container's resource for the downward API, in units of `divisor` (rounded up); an
/// unset limit is the node's capacity, an unset request 0.
pub(super) fn resource_value(pod: &Value, r: &Value) -> Result<String, String> {
    let container = str_at(r, "/containerName");
    let resource = str_at(r, "/resource");
    let c = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| pod["spec"][*l].as_array().into_iter().flatten())
        .find(|c| c["name"] == container)
        .ok_or_else(|| format!("resourceFieldRef names no container {container:?}"))?;
    let (kind, what) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource {resource:?}"))?;
    let set = c
        .pointer(&format!("/resources/{kind}/{what}"))
        .and_then(|q| match q {
            Value::String(s) => quantity(s),
            Value::Number(n) => n.as_f64(),
            _ => None,
        });
    let value = match (set, kind, what) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => {
            std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
        }
        (None, "limits", "memory") => super::machine_memory_bytes() as f64,
        _ => 0.0,
    };
    let divisor = match &r["divisor"] {
        Value::String(s) => quantity(s).ok_or_else(|| format!("bad divisor {s:?}"))?,
        Value::Number(n) => n.as_f64().unwrap_or(1.0),
        _ => 1.0,
    };
    if divisor <= 0.0 {
        return Err("the divisor must be positive".into());
    }
    Ok(format!("{}", (value / divisor).ceil() as i64))
}

/// A Kubernetes quantity (`100m`, `1.5`, `64Mi`, `1G`, `1e3`) as a number.
fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_references() {
        let pods = ["10.42.0.7".to_string(), "fd42::7".to_string()];
        let ips = Ips {
            host: "1.2.3.4",
            pods: &pods,
        };
        let pod = json!({"metadata": {"name": "p", "namespace": "n", "labels": {"app.io/x": "y"}},
                         "spec": {"nodeName": "node"}});
        assert_eq!(field_value(&pod, "metadata.name", &ips), "p");
        assert_eq!(field_value(&pod, "metadata.labels['app.io/x']", &ips), "y");
        assert_eq!(field_value(&pod, "status.podIP", &ips), "10.42.0.7");
        assert_eq!(
            field_value(&pod, "status.podIPs", &ips),
            "10.42.0.7,fd42::7"
        );
        assert_eq!(field_value(&pod, "status.hostIPs", &ips), "1.2.3.4");
        assert_eq!(field_value(&pod, "status.hostIP", &ips), "1.2.3.4");
        assert_eq!(field_value(&pod, "spec.nodeName", &ips), "node");
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity("100m"), Some(0.1));
        assert_eq!(quantity("2"), Some(2.0));
        assert_eq!(quantity("1Gi"), Some(1073741824.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("1k"), Some(1000.0));
        assert_eq!(quantity("x"), None);
    }
}
