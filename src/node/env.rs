//! A container's environment: its variables from `env` and `envFrom` (ConfigMaps, Secrets,
//! the downward API), and the `$(VAR)` expansion of values, commands and sub-paths.

use crate::types::json::str_at;
use serde_json::Value;

use super::Config;
use super::downward;
use crate::client::{Client, Kind, catalog};

/// Resolves a container's environment; a missing reference is a config error.
pub(super) async fn resolve(
    client: &Client,
    config: &Config,
    pod: &Value,
    c: &Value,
) -> Result<Vec<(String, String)>, String> {
    let ns = str_at(pod, "/metadata/namespace");
    let pod_ips = config.pod_ips(pod);
    // As in Kubernetes, HOSTNAME is the pod's name unless the spec sets it.
    let mut out = vec![(
        "HOSTNAME".to_string(),
        str_at(pod, "/metadata/name").to_string(),
    )];
    // Where the API is, as Kubernetes tells every container (its "kubernetes"
    // service), so in-cluster clients find it; the container's own env may override.
    if let Some((host, port)) = &config.api {
        out.extend([
            ("KUBERNETES_SERVICE_HOST".to_string(), host.clone()),
            ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
            (
                "KUBERNETES_SERVICE_PORT_HTTPS".to_string(),
                port.to_string(),
            ),
            (
                "KUBERNETES_PORT".to_string(),
                format!("tcp://{host}:{port}"),
            ),
        ]);
    }
    let lookup = |kind: Kind, name: &str| {
        let client = client.clone();
        let name = name.to_string();
        let ns = ns.to_string();
        async move { client.get(catalog::of(kind), Some(&ns), &name).await }
    };
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        for (kind, key) in [
            (Kind::ConfigMap, "configMapRef"),
            (Kind::Secret, "secretRef"),
        ] {
            let Some(r) = from.get(key) else { continue };
            let name = r["name"].as_str().unwrap_or("");
            match lookup(kind, name).await {
                Ok(obj) => out.extend(
                    data(&obj, kind)
                        .into_iter()
                        .map(|(k, v)| (format!("{prefix}{k}"), v)),
                ),
                Err(_) if r["optional"] == true => {}
                Err(e) => return Err(format!("{key} {name:?}: {e}")),
            }
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or("").to_string();
        if let Some(v) = e["value"].as_str() {
            out.push((name, expand(v, &out)));
            continue;
        }
        let Some(from) = e.get("valueFrom") else {
            out.push((name, String::new()));
            continue;
        };
        if let Some(f) = from.get("fieldRef") {
            let path = f["fieldPath"].as_str().unwrap_or("");
            out.push((
                name,
                downward::field_value(pod, path, &config.ips(&pod_ips)),
            ));
        } else if let Some(r) = from.get("resourceFieldRef") {
            // As the downward API's files: in units of the divisor, an unset limit
            // the node's capacity; the container is this one unless named.
            let mut r = r.clone();
            if r["containerName"].as_str().is_none_or(str::is_empty) {
                r["containerName"] = c["name"].clone();
            }
            out.push((name, downward::resource_value(pod, &r)?));
        } else {
            for (kind, key) in [
                (Kind::ConfigMap, "configMapKeyRef"),
                (Kind::Secret, "secretKeyRef"),
            ] {
                let Some(r) = from.get(key) else { continue };
                let obj_name = r["name"].as_str().unwrap_or("");
                let k = r["key"].as_str().unwrap_or("");
                let value = match lookup(kind, obj_name).await {
                    Ok(obj) => data(&obj, kind)
                        .into_iter()
                        .find(|(dk, _)| dk == k)
                        .map(|(_, v)| v),
                    Err(_) => None,
                };
                match value {
                    Some(v) => out.push((name.clone(), v)),
                    None if r["optional"] == true => {}
                    None => {
                        let what = if kind == Kind::ConfigMap {
                            "configmap"
                        } else {
                            "secret"
                        };
                        return Err(format!("couldn't find key {k} in {what} {ns}/{obj_name}"));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The string values of a ConfigMap's or Secret's data.
fn data(obj: &Value, kind: Kind) -> Vec<(String, String)> {
    use base64::Engine;
    let Some(m) = obj["data"].as_object() else {
        return Vec::new();
    };
    m.iter()
        .filter_map(|(k, v)| {
            let s = v.as_str()?;
            let value = if kind == Kind::Secret {
                let raw = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
                String::from_utf8(raw).ok()?
            } else {
                s.to_string()
            };
            Some((k.clone(), value))
        })
        .collect()
}

/// `$(VAR)` references to variables defined before; `$$` escapes.
pub(super) fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(end) => {
                    let name = &tail[..end];
                    match env.iter().rev().find(|(k, _)| k == name) {
                        Some((_, v)) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_from_earlier_ones() {
        let env = vec![("A".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
    }
}
