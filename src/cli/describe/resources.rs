//! Quantities and resource lists as Kubernetes prints and sums them: a pod's requests,
//! limits and QoS class.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{list, opt_text, plain};
use crate::types::quantity::Quantity;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuantityFormat {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A quantity with the format of its suffix, printed in canonical form (`100m`, `128Mi`,
/// `1500m`, `2`, `1k`), as `resource.Quantity.String()` does.
#[derive(Debug, Clone, Copy)]
pub(super) struct Amount {
    value: Quantity,
    format: QuantityFormat,
}

impl Amount {
    pub(super) const ZERO: Amount = Amount {
        value: Quantity::ZERO,
        format: QuantityFormat::DecimalSi,
    };

    pub(super) fn parse(v: &Value) -> Option<Amount> {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        let value: Quantity = s.trim().parse().ok()?;
        let format = if s.ends_with('i') {
            QuantityFormat::BinarySi
        } else if s.contains(['e', 'E']) {
            QuantityFormat::DecimalExponent
        } else {
            QuantityFormat::DecimalSi
        };
        Some(Amount { value, format })
    }

    /// The sum, in the format of `self` (Go's `Quantity.Add`).
    pub(super) fn add(self, other: Amount) -> Amount {
        Amount {
            value: Quantity::from_milli(self.value.milli() + other.value.milli()),
            format: self.format,
        }
    }

    pub(super) fn milli(self) -> i128 {
        self.value.milli()
    }

    pub(super) fn units(self) -> i128 {
        self.value.value()
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let milli = self.value.milli();
        if milli == 0 {
            return f.write_str("0");
        }
        let sign = if milli < 0 { "-" } else { "" };
        let milli = milli.abs();
        if milli % 1000 != 0 {
            return write!(f, "{sign}{milli}m");
        }
        let units = milli / 1000;
        if self.format == QuantityFormat::BinarySi && units >= 1024 {
            const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            for (i, suffix) in SUFFIXES.iter().enumerate().rev() {
                let unit = 1024i128.pow(i as u32 + 1);
                if units % unit == 0 {
                    return write!(f, "{sign}{}{suffix}", units / unit);
                }
            }
            return write!(f, "{sign}{units}");
        }
        for exp in [18u32, 15, 12, 9, 6, 3] {
            let unit = 10i128.pow(exp);
            if units % unit == 0 {
                let suffix = match (self.format, exp) {
                    (QuantityFormat::DecimalExponent, e) => format!("e{e}"),
                    (_, 3) => "k".to_string(),
                    (_, 6) => "M".to_string(),
                    (_, 9) => "G".to_string(),
                    (_, 12) => "T".to_string(),
                    (_, 15) => "P".to_string(),
                    _ => "E".to_string(),
                };
                return write!(f, "{sign}{}{suffix}", units / unit);
            }
        }
        write!(f, "{sign}{units}")
    }
}

/// A resource list (`requests`, `capacity`) by resource name.
pub(super) fn resource_list(v: &Value, pointer: &str) -> BTreeMap<String, Amount> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, q)| Some((k.clone(), Amount::parse(q)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The raw text of each entry of a resource list, by name.
pub(super) fn resource_texts(v: &Value, pointer: &str) -> BTreeMap<String, String> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, q)| {
                    let shown = Amount::parse(q)
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| plain(q));
                    (k.clone(), shown)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `resourcehelper.PodRequestsAndLimits`: containers summed, each init container taken
/// when larger, the pod overhead added.
pub(super) fn pod_requests_and_limits(
    pod: &Value,
) -> (BTreeMap<String, Amount>, BTreeMap<String, Amount>) {
    let mut reqs = BTreeMap::new();
    let mut limits = BTreeMap::new();
    fn add_all(into: &mut BTreeMap<String, Amount>, from: BTreeMap<String, Amount>) {
        for (name, q) in from {
            match into.get(&name).copied() {
                Some(have) => {
                    into.insert(name, have.add(q));
                }
                None => {
                    into.insert(name, q);
                }
            }
        }
    }
    fn max_all(into: &mut BTreeMap<String, Amount>, from: BTreeMap<String, Amount>) {
        for (name, q) in from {
            match into.get(&name) {
                Some(have) if have.milli() >= q.milli() => {}
                _ => {
                    into.insert(name, q);
                }
            }
        }
    }
    for c in list(pod, "/spec/containers") {
        add_all(&mut reqs, resource_list(c, "/resources/requests"));
        add_all(&mut limits, resource_list(c, "/resources/limits"));
    }
    for c in list(pod, "/spec/initContainers") {
        max_all(&mut reqs, resource_list(c, "/resources/requests"));
        max_all(&mut limits, resource_list(c, "/resources/limits"));
    }
    let overhead = resource_list(pod, "/spec/overhead");
    if !overhead.is_empty() {
        add_all(&mut reqs, overhead.clone());
        for (name, q) in overhead {
            if let Some(have) = limits.get(&name).copied() {
                limits.insert(name, have.add(q));
            }
        }
    }
    (reqs, limits)
}

/// `qos.GetPodQOS`: the recorded class, else computed from the containers' resources.
pub(super) fn qos_class(pod: &Value) -> String {
    if let Some(class) = opt_text(pod, "/status/qosClass").filter(|c| !c.is_empty()) {
        return class.to_string();
    }
    let mut requests: BTreeMap<String, i128> = BTreeMap::new();
    let mut limits: BTreeMap<String, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = list(pod, "/spec/containers")
        .iter()
        .chain(list(pod, "/spec/initContainers"));
    for c in containers {
        for (name, q) in resource_list(c, "/resources/requests") {
            if (name == "cpu" || name == "memory") && q.milli() > 0 {
                *requests.entry(name).or_default() += q.milli();
            }
        }
        let mut found = BTreeSet::new();
        for (name, q) in resource_list(c, "/resources/limits") {
            if (name == "cpu" || name == "memory") && q.milli() > 0 {
                found.insert(name.clone());
                *limits.entry(name).or_default() += q.milli();
            }
        }
        if !(found.contains("cpu") && found.contains("memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort".to_string();
    }
    if guaranteed {
        guaranteed = requests.iter().all(|(name, r)| limits.get(name) == Some(r));
    }
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed".to_string()
    } else {
        "Burstable".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_print_in_canonical_form() {
        let shown = |s: &str| Amount::parse(&json!(s)).expect("a quantity").to_string();
        assert_eq!(shown("100m"), "100m");
        assert_eq!(shown("0.5"), "500m");
        assert_eq!(shown("2000m"), "2");
        assert_eq!(shown("128Mi"), "128Mi");
        assert_eq!(shown("1024Mi"), "1Gi");
        assert_eq!(shown("1536Mi"), "1536Mi");
        assert_eq!(shown("1000Ki"), "1000Ki");
        assert_eq!(shown("1000"), "1k");
        assert_eq!(shown("1200"), "1200");
        assert_eq!(shown("128M"), "128M");
        assert_eq!(shown("1e3"), "1e3");
        assert_eq!(shown("0"), "0");
        let sum = Amount::parse(&json!("64Mi"))
            .and_then(|a| Some(a.add(Amount::parse(&json!("64Mi"))?)))
            .expect("quantities");
        assert_eq!(sum.to_string(), "128Mi");
    }

    #[test]
    fn qos_class_is_computed_when_the_status_has_none() {
        let with = |resources: Value| json!({"spec": {"containers": [{"name": "a", "resources": resources}]}});
        assert_eq!(qos_class(&with(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&with(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        let both = json!({"cpu": "1", "memory": "1Gi"});
        assert_eq!(
            qos_class(&with(json!({"requests": both, "limits": both}))),
            "Guaranteed"
        );
    }
}
