//! The Table printers of the networking.k8s.io kinds, with kubectl's columns:
//! Ingresses, IngressClasses and NetworkPolicies.

use serde_json::{Value, json};

use super::{Column, age, col, or_none, s};

fn name() -> Column {
    col("Name", 0, "Name must be unique within a namespace.")
}

fn age_column() -> Column {
    col("Age", 0, "The time since the object was created.")
}

pub(super) fn ingress_columns() -> Vec<Column> {
    vec![
        name(),
        col("Class", 0, "The name of the IngressClass resource."),
        col(
            "Hosts",
            0,
            "Hosts that incoming requests are matched against before the ingress rule",
        ),
        col(
            "Address",
            0,
            "Address is a list containing ingress points for the load-balancer",
        ),
        col("Ports", 0, "Ports of TLS configurations that open"),
        age_column(),
    ]
}

/// The rules' hosts, at most three (kubectl's `formatHosts`); `*` when none names one.
fn hosts(v: &Value) -> String {
    const MAX: usize = 3;
    let rules = v
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        if let Some(h) = rule["host"].as_str().filter(|h| !h.is_empty())
            && !more
        {
            list.push(h);
        }
    }
    if list.is_empty() {
        return "*".into();
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", rules.len() - MAX)
    } else {
        joined
    }
}

/// The load balancer's addresses, shortened past 16 characters as kubectl does.
fn addresses(v: &Value) -> String {
    let all: Vec<&str> = v
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i["ip"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| i["hostname"].as_str().filter(|s| !s.is_empty()))
        })
        .collect();
    let r = all.join(",");
    if r.len() > 16 {
        format!("{}...", &r[..13])
    } else {
        r
    }
}

pub(super) fn ingress_cells(v: &Value) -> Vec<Value> {
    let tls = v
        .pointer("/spec/tls")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    vec![
        json!(s(v, "/metadata/name")),
        json!(or_none(s(v, "/spec/ingressClassName"))),
        json!(hosts(v)),
        json!(addresses(v)),
        json!(if tls { "80, 443" } else { "80" }),
        json!(age(v, "/metadata/creationTimestamp")),
    ]
}

pub(super) fn ingress_class_columns() -> Vec<Column> {
    vec![
        name(),
        col(
            "Controller",
            0,
            "Controller that is responsible for handling this class",
        ),
        col(
            "Parameters",
            0,
            "A reference to a resource with additional parameters",
        ),
        age_column(),
    ]
}

pub(super) fn ingress_class_cells(v: &Value) -> Vec<Value> {
    let parameters = match v.pointer("/spec/parameters").filter(|p| p.is_object()) {
        None => "<none>".to_string(),
        Some(p) => {
            let kind = p["kind"].as_str().unwrap_or("");
            let name = p["name"].as_str().unwrap_or("");
            match p["apiGroup"].as_str().filter(|g| !g.is_empty()) {
                Some(group) => format!("{kind}.{group}/{name}"),
                None => format!("{kind}/{name}"),
            }
        }
    };
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/spec/controller")),
        json!(parameters),
        json!(age(v, "/metadata/creationTimestamp")),
    ]
}

pub(super) fn network_policy_columns() -> Vec<Column> {
    vec![
        name(),
        col(
            "Pod-Selector",
            0,
            "Selector to select the pods that the network policy applies to",
        ),
        age_column(),
    ]
}

pub(super) fn network_policy_cells(v: &Value) -> Vec<Value> {
    let selector = crate::types::labels::format_label_selector(
        v.pointer("/spec/podSelector").unwrap_or(&json!({})),
    );
    vec![
        json!(s(v, "/metadata/name")),
        json!(or_none(selector)),
        json!(age(v, "/metadata/creationTimestamp")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingresses_print_their_class_hosts_addresses_and_ports() {
        let ing = json!({"metadata": {"name": "web"},
            "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.com"]}],
                     "rules": [{"host": "a.com"}, {"host": "b.com"}, {}, {"host": "c.com"}, {"host": "d.com"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.168.10.10"}, {"hostname": "lb.example.com"}]}}});
        let cells = ingress_cells(&ing);
        assert_eq!(cells[1], "nginx");
        assert_eq!(cells[2], "a.com,b.com,c.com + 2 more...");
        assert_eq!(cells[3], "192.168.10.10...");
        assert_eq!(cells[4], "80, 443");
        let bare = ingress_cells(&json!({"metadata": {"name": "x"}, "spec": {"rules": [{}]}}));
        assert_eq!(
            bare[1..5],
            [json!("<none>"), json!("*"), json!(""), json!("80")]
        );
    }

    #[test]
    fn classes_print_their_parameters_and_policies_their_selector() {
        let c = json!({"spec": {"controller": "a.com/x",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"}}});
        assert_eq!(
            ingress_class_cells(&c)[2],
            "IngressParameters.k8s.example.com/p"
        );
        let p = json!({"spec": {"podSelector": {"matchLabels": {"app": "web"}}}});
        assert_eq!(network_policy_cells(&p)[1], "app=web");
        assert_eq!(
            network_policy_cells(&json!({"spec": {"podSelector": {}}}))[1],
            "<none>"
        );
    }
}
