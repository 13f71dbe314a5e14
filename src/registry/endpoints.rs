//! The rules of core/v1 Endpoints and discovery.k8s.io/v1 EndpointSlices, the network
//! addresses behind a Service, as the API server checks them (`ValidateEndpoints`,
//! `ValidateEndpointSlice`): an EndpointSlice's address type (required, one of `IPv4`,
//! `IPv6` and `FQDN`, never changed), at most 1000 endpoints of 1 to 100 addresses each,
//! valid for the type, at most 100 ports with unique DNS-label names; an Endpoints'
//! subsets with valid IP addresses and named ports.
//!
//! One departure: upstream refuses loopback and link-local endpoint addresses, but a
//! berth pod shares its node's network and the node's address may be `127.0.0.1`, so
//! only unspecified and multicast addresses are refused.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{Value, json};

use super::strategy::{Strategy, immutable};
use super::{Cause, Part};
use crate::types::names;

/// The most endpoints one slice holds (`maxEndpoints`).
pub const MAX_SLICE_ENDPOINTS: usize = 1000;
/// The most addresses one endpoint of a slice has (`maxAddresses`).
const MAX_ADDRESSES: usize = 100;
/// The most ports one slice has (`maxPorts`).
const MAX_PORTS: usize = 100;

const ADDRESS_TYPES: &[&str] = &["IPv4", "IPv6", "FQDN"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

fn too_many(field: &str, have: usize, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany".into(),
        message: format!("Too many: {have}: must have at most {max} items"),
        field: field.into(),
    }
}

fn duplicate(field: &str, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {}", json!(value)),
        field: field.into(),
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[][..], Vec::as_slice)
}

/// Fills in each port's protocol (`TCP`), as the API's defaults do.
fn default_protocols(ports: &mut Value) {
    if let Some(ports) = ports.as_array_mut() {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
        }
    }
}

/// Problems with `ip` as an endpoint's address of `family` (`None`: either).
fn ip_errors(ip: &str, family: Option<&str>) -> Option<&'static str> {
    let Ok(parsed) = ip.parse::<IpAddr>() else {
        return Some(match family {
            Some("IPv4") => "must be a valid IPv4 address",
            Some("IPv6") => "must be a valid IPv6 address",
            _ => "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        });
    };
    match (family, parsed) {
        (Some("IPv4"), IpAddr::V6(_)) => Some("must be a valid IPv4 address"),
        (Some("IPv6"), IpAddr::V4(_)) => Some("must be a valid IPv6 address"),
        _ if parsed.is_unspecified() => Some("may not be unspecified (0.0.0.0)"),
        _ if parsed.is_multicast() => Some("may not be in the multicast range"),
        _ => None,
    }
}

fn check_names(
    value: &Value,
    field: &str,
    check: fn(&str) -> Vec<String>,
    causes: &mut Vec<Cause>,
) {
    if let Some(s) = value.as_str() {
        for msg in check(s) {
            causes.push(Cause::invalid(field, value, &msg));
        }
    }
}

/// A port's number, 1 to 65535.
fn check_port_number(port: &Value, field: &str, causes: &mut Vec<Cause>) {
    if !port.is_null() && !port.as_u64().is_some_and(|n| (1..=65535).contains(&n)) {
        causes.push(Cause::invalid(
            field,
            port,
            "must be between 1 and 65535, inclusive",
        ));
    }
}

/// The ports of a slice or of a subset: names that are DNS labels, unique (and given when
/// `names_required`), numbers and protocols.
fn check_ports(ports: &[Value], path: &str, names_required: bool, causes: &mut Vec<Cause>) {
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = |f: &str| format!("{path}[{i}].{f}");
        let name = p["name"].as_str().unwrap_or("");
        if name.is_empty() {
            if names_required {
                causes.push(Cause::required(&at("name")));
            }
        } else {
            check_names(&p["name"], &at("name"), names::dns1123_label, causes);
        }
        if !seen.insert(name) {
            causes.push(duplicate(&at("name"), name));
        }
        check_port_number(&p["port"], &at("port"), causes);
        if let Some(protocol) = p["protocol"].as_str()
            && !PROTOCOLS.contains(&protocol)
        {
            causes.push(Cause::not_supported(&at("protocol"), protocol, PROTOCOLS));
        }
    }
}

/// The strategy of discovery.k8s.io/v1 EndpointSlices.
pub struct EndpointSlice;

impl Strategy for EndpointSlice {
    fn default(&self, obj: &mut Value) {
        if let Some(ports) = obj.get_mut("ports") {
            default_protocols(ports);
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_slice(obj, causes)
    }
    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        immutable(old, new, "/addressType", "addressType", causes);
    }
    /// A slice has no spec: any change beyond its metadata moves its generation.
    fn generation_changes(&self, old: &Value, new: &Value, _part: Part) -> bool {
        let content = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        };
        content(old) != content(new)
    }
}

/// `ValidateEndpointSlice`, beyond the schema.
pub fn validate_slice(obj: &Value, causes: &mut Vec<Cause>) {
    let family = match obj["addressType"].as_str() {
        None | Some("") => {
            causes.push(Cause::required("addressType"));
            None
        }
        Some(t) if !ADDRESS_TYPES.contains(&t) => {
            causes.push(Cause::not_supported("addressType", t, ADDRESS_TYPES));
            None
        }
        Some(t) => Some(t),
    };
    let endpoints = items(&obj["endpoints"]);
    if endpoints.len() > MAX_SLICE_ENDPOINTS {
        causes.push(too_many("endpoints", endpoints.len(), MAX_SLICE_ENDPOINTS));
    }
    for (i, e) in endpoints.iter().enumerate() {
        let at = |f: &str| format!("endpoints[{i}].{f}");
        let addresses = items(&e["addresses"]);
        if addresses.is_empty() {
            causes.push(Cause::required_with(
                &at("addresses"),
                "must contain at least 1 address",
            ));
        } else if addresses.len() > MAX_ADDRESSES {
            causes.push(too_many(&at("addresses"), addresses.len(), MAX_ADDRESSES));
        }
        for (j, a) in addresses.iter().enumerate() {
            let field = format!("{}[{j}]", at("addresses"));
            let text = a.as_str().unwrap_or("");
            match family {
                Some("FQDN") => check_names(a, &field, names::dns1123_subdomain, causes),
                Some(_) => {
                    if let Some(why) = ip_errors(text, family) {
                        causes.push(Cause::invalid(&field, a, why));
                    }
                }
                None => {}
            }
        }
        check_names(
            &e["hostname"],
            &at("hostname"),
            names::dns1123_label,
            causes,
        );
        check_names(
            &e["nodeName"],
            &at("nodeName"),
            names::dns1123_subdomain,
            causes,
        );
    }
    let ports = items(&obj["ports"]);
    if ports.len() > MAX_PORTS {
        causes.push(too_many("ports", ports.len(), MAX_PORTS));
    }
    check_ports(ports, "ports", false, causes);
}

/// The strategy of core/v1 Endpoints.
pub struct Endpoints;

impl Strategy for Endpoints {
    fn default(&self, obj: &mut Value) {
        if let Some(subsets) = obj.get_mut("subsets").and_then(Value::as_array_mut) {
            for s in subsets {
                if let Some(ports) = s.get_mut("ports") {
                    default_protocols(ports);
                }
            }
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_endpoints(obj, causes)
    }
}

/// `ValidateEndpoints`, beyond the schema.
pub fn validate_endpoints(obj: &Value, causes: &mut Vec<Cause>) {
    for (i, s) in items(&obj["subsets"]).iter().enumerate() {
        let path = format!("subsets[{i}]");
        let ready = items(&s["addresses"]);
        let not_ready = items(&s["notReadyAddresses"]);
        if ready.is_empty() && not_ready.is_empty() {
            causes.push(Cause::required_with(
                &path,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (list, name) in [(ready, "addresses"), (not_ready, "notReadyAddresses")] {
            for (j, a) in list.iter().enumerate() {
                let at = |f: &str| format!("{path}.{name}[{j}].{f}");
                match a["ip"].as_str() {
                    None | Some("") => causes.push(Cause::required(&at("ip"))),
                    Some(ip) => {
                        if let Some(why) = ip_errors(ip, None) {
                            causes.push(Cause::invalid(&at("ip"), &a["ip"], why));
                        }
                    }
                }
                check_names(
                    &a["hostname"],
                    &at("hostname"),
                    names::dns1123_label,
                    causes,
                );
                check_names(
                    &a["nodeName"],
                    &at("nodeName"),
                    names::dns1123_subdomain,
                    causes,
                );
            }
        }
        let ports = items(&s["ports"]);
        check_ports(ports, &format!("{path}.ports"), ports.len() > 1, causes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice_causes(obj: Value) -> Vec<String> {
        let mut causes = Vec::new();
        validate_slice(&obj, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_slice_needs_a_known_address_type_and_addresses_of_that_type() {
        assert_eq!(slice_causes(json!({})), ["addressType: Required value"]);
        assert_eq!(
            slice_causes(json!({"addressType": "IPv5"})),
            [r#"addressType: Unsupported value: "IPv5": supported values: "IPv4", "IPv6", "FQDN""#]
        );
        let ok = json!({"addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "hostname": "web-0", "nodeName": "n1"}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": 81}]});
        assert!(slice_causes(ok).is_empty());
        let bad = slice_causes(json!({"addressType": "IPv4", "endpoints": [
            {"addresses": ["fd00::1"]}, {"addresses": []}, {"addresses": ["nope"]}]}));
        assert_eq!(
            bad,
            [
                r#"endpoints[0].addresses[0]: Invalid value: "fd00::1": must be a valid IPv4 address"#,
                "endpoints[1].addresses: Required value: must contain at least 1 address",
                r#"endpoints[2].addresses[0]: Invalid value: "nope": must be a valid IPv4 address"#,
            ]
        );
        assert!(
            slice_causes(
                json!({"addressType": "FQDN", "endpoints": [{"addresses": ["a.example"]}]})
            )
            .is_empty()
        );
    }

    #[test]
    fn a_slice_holds_at_most_1000_endpoints_100_addresses_and_100_ports() {
        let addresses: Vec<String> = (0..101)
            .map(|i| format!("10.0.0.{}", i % 250 + 1))
            .collect();
        let ports: Vec<Value> = (0..101)
            .map(|i| json!({"name": format!("p{i}"), "port": 80}))
            .collect();
        let endpoints = vec![json!({"addresses": ["10.0.0.1"]}); 1001];
        let causes = slice_causes(json!({"addressType": "IPv4",
            "endpoints": endpoints, "ports": ports}));
        assert_eq!(
            causes,
            [
                "endpoints: Too many: 1001: must have at most 1000 items",
                "ports: Too many: 101: must have at most 100 items",
            ]
        );
        let causes = slice_causes(json!({"addressType": "IPv4",
            "endpoints": [{"addresses": addresses}]}));
        assert_eq!(
            causes,
            ["endpoints[0].addresses: Too many: 101: must have at most 100 items"]
        );
    }

    #[test]
    fn port_names_are_unique_dns_labels() {
        let causes = slice_causes(json!({"addressType": "IPv4", "ports": [
            {"name": "http", "port": 80}, {"name": "http", "port": 81},
            {"name": "Bad_Name", "port": 0}]}));
        assert_eq!(causes.len(), 3, "{causes:?}");
        assert!(causes[0].starts_with(r#"ports[1].name: Duplicate value: "http""#));
        assert!(causes[1].starts_with("ports[2].name: Invalid value"));
        assert!(causes[2].starts_with("ports[2].port: Invalid value: 0"));
    }

    #[test]
    fn the_address_type_never_changes() {
        let mut causes = Vec::new();
        EndpointSlice.validate_update(
            &json!({"addressType": "IPv4"}),
            &json!({"addressType": "IPv6"}),
            Part::Main,
            &mut causes,
        );
        assert_eq!(
            causes[0].message,
            r#"Invalid value: "IPv6": field is immutable"#
        );
    }

    #[test]
    fn endpoints_subsets_need_valid_ips_and_named_ports_when_several() {
        let mut causes = Vec::new();
        validate_endpoints(
            &json!({"subsets": [
                {"addresses": [{"ip": "10.1.2.3"}], "notReadyAddresses": [{"ip": "300.1.1.1"}],
                 "ports": [{"port": 80}, {"name": "b", "port": 81}]},
                {"ports": [{"port": 80}]},
            ]}),
            &mut causes,
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "subsets[0].notReadyAddresses[0].ip",
                "subsets[0].ports[0].name",
                "subsets[1]"
            ]
        );
    }
}
