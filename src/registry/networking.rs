//! The networking.k8s.io/v1 kinds' rules (`pkg/apis/networking/validation` upstream):
//! Ingresses (hosts, paths with their types, backends, TLS hosts), IngressClasses (a
//! controller that is a domain-prefixed path and never changes, parameters) and
//! NetworkPolicies (peers, ports, CIDRs), with upstream's defaults, and the
//! DefaultIngressClass admission: a new Ingress that names no class gets the class
//! annotated `ingressclass.kubernetes.io/is-default-class: "true"`.
//!
//! They are stored and validated only: no ingress controller is built in, and nothing
//! enforces a NetworkPolicy yet (as on a cluster whose network plugin does not).

use serde_json::{Value, json};

use super::strategy::{BoxFuture, Strategy, WriteGuard, immutable};
use super::{Cause, Error, Part, Registry, catalog};
use crate::types::names;

const PATH_TYPES: [&str; 3] = ["Exact", "ImplementationSpecific", "Prefix"];
const POLICY_TYPES: [&str; 2] = ["Ingress", "Egress"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const SCOPES: [&str; 2] = ["Cluster", "Namespace"];
/// The longest `spec.controller` of an IngressClass.
const MAX_CONTROLLER: usize = 250;
/// Marks the IngressClass of Ingresses that name none.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The class an Ingress named before `spec.ingressClassName`.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
const INVALID_PATH_SEQUENCES: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: [&str; 2] = ["/..", "/."];
const WILDCARD_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const PORT_RANGE_MSG: &str = "must be between 1 and 65535, inclusive";

fn is_set(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn items(v: &Value, field: &str) -> Vec<Value> {
    v.get(field)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// `IsWildcardDNS1123Subdomain`: `*.` then a DNS subdomain.
fn wildcard_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    match s.strip_prefix("*.") {
        Some(rest) if names::dns1123_subdomain(rest).is_empty() => {}
        _ => errs.push(WILDCARD_MSG.to_string()),
    }
    errs
}

/// A host of a rule or of TLS: a DNS subdomain, or one with a leading `*.` label.
fn host_errors(host: &str) -> Vec<String> {
    if host.contains('*') {
        wildcard_subdomain(host)
    } else {
        names::dns1123_subdomain(host)
    }
}

/// `IsValidPortName`: an IANA service name.
pub fn port_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

fn port_number_ok(v: &Value) -> bool {
    v.as_i64().is_some_and(|n| (1..=65535).contains(&n))
}

/// `IsPathSegmentName`: what may stand as one segment of a URL path.
fn path_segment_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s == "." || s == ".." {
        errs.push(format!("may not be '{s}'"));
    }
    for bad in ["/", "%"] {
        if s.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

/// networking.k8s.io/v1 Ingress.
pub struct Ingress;

impl Strategy for Ingress {
    /// A path's missing type is this kind's to report, in upstream's words.
    fn may_leave_out(&self, field: &str) -> bool {
        field.ends_with(".pathType")
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let spec = obj.get("spec").cloned().unwrap_or(json!({}));
        validate_ingress_spec(&spec, causes);
        validate_load_balancer(obj, causes);
    }

    fn validate_create(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let annotation = obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(CLASS_ANNOTATION))
            .and_then(Value::as_str);
        let class = obj
            .pointer("/spec/ingressClassName")
            .and_then(Value::as_str);
        if let (Some(a), Some(c)) = (annotation, class)
            && a != c
        {
            causes.push(Cause::invalid(
                &format!("annotations.{CLASS_ANNOTATION}"),
                &json!(a),
                "must match `ingressClassName` when both are specified",
            ));
        }
    }

    fn before_write<'r: 'a, 'a>(
        &'a self,
        reg: &'r Registry,
        _key: Option<&'a str>,
        old: Option<&'a Value>,
        obj: &'a mut Value,
        part: Part,
        _causes: &'a mut Vec<Cause>,
    ) -> BoxFuture<'a, Result<Option<WriteGuard<'r>>, Error>> {
        let admitted = match (old, part) {
            (None, Part::Main) => admit_default_class(reg, obj),
            _ => Ok(()),
        };
        Box::pin(std::future::ready(admitted.map(|()| None)))
    }
}

/// The DefaultIngressClass admission of a new Ingress: one that names no class (neither
/// `spec.ingressClassName` nor the older annotation) gets the default class: when several
/// are marked so, the newest, and of equally new ones the one of the lowest name.
fn admit_default_class(reg: &Registry, ingress: &mut Value) -> Result<(), Error> {
    let named = is_set(ingress.pointer("/spec/ingressClassName")).is_some()
        || ingress
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(CLASS_ANNOTATION))
            .is_some();
    if named {
        return Ok(());
    }
    let res = catalog::of(catalog::Kind::IngressClass);
    let (records, _) = reg.store.list(&res.key_prefix());
    let mut defaults = Vec::new();
    for (_, r) in &records {
        let class: Value = serde_json::from_slice(&r.value)
            .map_err(|e| Error::Internal(format!("a stored IngressClass does not parse: {e}")))?;
        let marked = class
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
            .and_then(Value::as_str)
            == Some("true");
        if marked {
            defaults.push(class);
        }
    }
    // The newest; of those made in the same second, the one of the lowest name.
    let newest = defaults.into_iter().max_by(|a, b| {
        let at = |c: &Value, p: &str| {
            c.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let created = |c: &Value| at(c, "/metadata/creationTimestamp");
        let name = |c: &Value| at(c, "/metadata/name");
        created(a)
            .cmp(&created(b))
            .then_with(|| name(b).cmp(&name(a)))
    });
    if let Some(class) = newest
        && let Some(m) = ingress.as_object_mut()
    {
        let spec = m.entry("spec").or_insert_with(|| json!({}));
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("ingressClassName".into(), class["metadata"]["name"].clone());
        }
    }
    Ok(())
}

fn validate_ingress_spec(spec: &Value, causes: &mut Vec<Cause>) {
    let rules = items(spec, "rules");
    let default = is_set(spec.get("defaultBackend"));
    if rules.is_empty() && default.is_none() {
        causes.push(Cause::invalid(
            "spec",
            &Value::Null,
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = default {
        validate_backend(b, "spec.defaultBackend", causes);
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if let Some(host) = rule
            .get("host")
            .and_then(Value::as_str)
            .filter(|h| !h.is_empty())
        {
            let field = format!("{at}.host");
            if host.parse::<std::net::IpAddr>().is_ok() {
                causes.push(Cause::invalid(
                    &field,
                    &json!(host),
                    "must be a DNS name, not an IP address",
                ));
            }
            for e in host_errors(host) {
                causes.push(Cause::invalid(&field, &json!(host), &e));
            }
        }
        let Some(http) = is_set(rule.get("http")) else {
            continue;
        };
        let paths = items(http, "paths");
        if paths.is_empty() {
            causes.push(Cause::required(&format!("{at}.http.paths")));
        }
        for (j, path) in paths.iter().enumerate() {
            validate_path(path, &format!("{at}.http.paths[{j}]"), causes);
        }
    }
    for (i, tls) in items(spec, "tls").iter().enumerate() {
        for (j, host) in items(tls, "hosts").iter().enumerate() {
            let h = host.as_str().unwrap_or("");
            for e in host_errors(h) {
                causes.push(Cause::invalid(
                    &format!("spec.tls[{i}].hosts[{j}]"),
                    host,
                    &e,
                ));
            }
        }
        if let Some(secret) = tls
            .get("secretName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            for e in names::dns1123_subdomain(secret) {
                causes.push(Cause::invalid(
                    &format!("spec.tls[{i}].secretName"),
                    &json!(secret),
                    &e,
                ));
            }
        }
    }
    if let Some(class) = spec.get("ingressClassName").and_then(Value::as_str) {
        for e in names::dns1123_subdomain(class) {
            causes.push(Cause::invalid("spec.ingressClassName", &json!(class), &e));
        }
    }
}

fn validate_path(path: &Value, at: &str, causes: &mut Vec<Cause>) {
    let Some(kind) = path.get("pathType").and_then(Value::as_str) else {
        causes.push(Cause::required_with(
            &format!("{at}.pathType"),
            "pathType must be specified",
        ));
        return;
    };
    let p = path.get("path").and_then(Value::as_str).unwrap_or("");
    let field = format!("{at}.path");
    match kind {
        "Exact" | "Prefix" => {
            if !p.starts_with('/') {
                causes.push(Cause::invalid(
                    &field,
                    &json!(p),
                    "must be an absolute path",
                ));
            }
            for seq in INVALID_PATH_SEQUENCES.iter().filter(|s| p.contains(*s)) {
                causes.push(Cause::invalid(
                    &field,
                    &json!(p),
                    &format!("must not contain '{seq}'"),
                ));
            }
            for suffix in INVALID_PATH_SUFFIXES.iter().filter(|s| p.ends_with(*s)) {
                causes.push(Cause::invalid(
                    &field,
                    &json!(p),
                    &format!("cannot end with '{suffix}'"),
                ));
            }
        }
        "ImplementationSpecific" => {
            if !p.is_empty() && !p.starts_with('/') {
                causes.push(Cause::invalid(
                    &field,
                    &json!(p),
                    "must be an absolute path",
                ));
            }
        }
        other => causes.push(Cause::not_supported(
            &format!("{at}.pathType"),
            other,
            &PATH_TYPES,
        )),
    }
    let backend = path.get("backend").cloned().unwrap_or(json!({}));
    validate_backend(&backend, &format!("{at}.backend"), causes);
}

/// `validateIngressBackend`: exactly one of a Service (with a port name or number) and a
/// resource.
fn validate_backend(backend: &Value, at: &str, causes: &mut Vec<Cause>) {
    let resource = is_set(backend.get("resource"));
    let service = is_set(backend.get("service"));
    match (resource, service) {
        (Some(_), Some(_)) => causes.push(Cause::invalid(
            at,
            &json!(""),
            "cannot set both resource and service backends",
        )),
        (Some(r), None) => validate_reference(r, &format!("{at}.resource"), causes),
        (None, Some(s)) => {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                causes.push(Cause::required(&format!("{at}.service.name")));
            } else {
                for e in names::dns1035_label(name) {
                    causes.push(Cause::invalid(
                        &format!("{at}.service.name"),
                        &json!(name),
                        &e,
                    ));
                }
            }
            let port_name = s
                .pointer("/port/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            let number = s
                .pointer("/port/number")
                .filter(|n| !n.is_null() && n.as_i64() != Some(0));
            match (port_name, number) {
                (Some(_), Some(_)) => causes.push(Cause::invalid(
                    at,
                    &json!(""),
                    "cannot set both port name & port number",
                )),
                (Some(n), None) => {
                    for e in port_name_errors(n) {
                        causes.push(Cause::invalid(
                            &format!("{at}.service.port.name"),
                            &json!(n),
                            &e,
                        ));
                    }
                }
                (None, Some(n)) => {
                    if !port_number_ok(n) {
                        causes.push(Cause::invalid(
                            &format!("{at}.service.port.number"),
                            n,
                            PORT_RANGE_MSG,
                        ));
                    }
                }
                (None, None) => {
                    causes.push(Cause::required_with(at, "port name or number is required"))
                }
            }
        }
        (None, None) => causes.push(Cause::invalid(
            at,
            &json!(""),
            "resource or service backend is required",
        )),
    }
}

/// A typed reference (a backend's resource, a class's parameters): an optional API
/// group, a kind and a name.
fn validate_reference(r: &Value, at: &str, causes: &mut Vec<Cause>) {
    if let Some(group) = r.get("apiGroup").and_then(Value::as_str) {
        for e in names::dns1123_subdomain(group) {
            causes.push(Cause::invalid(&format!("{at}.apiGroup"), &json!(group), &e));
        }
    }
    for field in ["kind", "name"] {
        let v = r.get(field).and_then(Value::as_str).unwrap_or("");
        if v.is_empty() {
            causes.push(Cause::required(&format!("{at}.{field}")));
        }
        for e in path_segment_errors(v) {
            causes.push(Cause::invalid(&format!("{at}.{field}"), &json!(v), &e));
        }
    }
}

/// `ValidateIngressLoadBalancerStatus`: addresses are IPs, hostnames DNS names.
fn validate_load_balancer(obj: &Value, causes: &mut Vec<Cause>) {
    let list = obj
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array);
    for (i, lb) in list.into_iter().flatten().enumerate() {
        let at = format!("status.loadBalancer.ingress[{i}]");
        if let Some(ip) = lb
            .get("ip")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            && ip.parse::<std::net::IpAddr>().is_err()
        {
            causes.push(Cause::invalid(
                &format!("{at}.ip"),
                &json!(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
        if let Some(h) = lb
            .get("hostname")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            for e in names::dns1123_subdomain(h) {
                causes.push(Cause::invalid(&format!("{at}.hostname"), &json!(h), &e));
            }
            if h.parse::<std::net::IpAddr>().is_ok() {
                causes.push(Cause::invalid(
                    &format!("{at}.hostname"),
                    &json!(h),
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
}

/// networking.k8s.io/v1 IngressClass.
pub struct IngressClass;

impl Strategy for IngressClass {
    fn default(&self, obj: &mut Value) {
        if let Some(p) = obj
            .pointer_mut("/spec/parameters")
            .and_then(Value::as_object_mut)
            && p.get("scope").is_none_or(Value::is_null)
        {
            p.insert("scope".into(), json!("Cluster"));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let controller = obj
            .pointer("/spec/controller")
            .and_then(Value::as_str)
            .unwrap_or("");
        if controller.is_empty() {
            causes.push(Cause::required("spec.controller"));
        } else {
            if controller.len() > MAX_CONTROLLER {
                causes.push(Cause {
                    reason: "FieldValueTooLong".into(),
                    message: format!("Too long: may not be more than {MAX_CONTROLLER} bytes"),
                    field: "spec.controller".into(),
                });
            }
            domain_prefixed_path(controller, "spec.controller", causes);
        }
        if let Some(p) = is_set(obj.pointer("/spec/parameters")) {
            let at = "spec.parameters";
            validate_reference(p, at, causes);
            let scope = p.get("scope").and_then(Value::as_str);
            let namespace = p
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            match scope {
                Some("Namespace") => match namespace {
                    None => causes.push(Cause::required_with(
                        &format!("{at}.namespace"),
                        "`parameters.scope` is set to 'Namespace'",
                    )),
                    Some(ns) => {
                        for e in names::dns1123_label(ns) {
                            causes.push(Cause::invalid(&format!("{at}.namespace"), &json!(ns), &e));
                        }
                    }
                },
                Some("Cluster") => {
                    if namespace.is_some() {
                        causes.push(Cause::forbidden(
                            &format!("{at}.namespace"),
                            "`parameters.scope` is set to 'Cluster'",
                        ));
                    }
                }
                Some(other) => {
                    causes.push(Cause::not_supported(&format!("{at}.scope"), other, &SCOPES))
                }
                None => causes.push(Cause::required(&format!("{at}.scope"))),
            }
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        immutable(old, new, "/spec/controller", "spec.controller", causes);
    }
}

/// `IsDomainPrefixedPath`: a DNS subdomain, a slash and a path of URL characters.
fn domain_prefixed_path(s: &str, at: &str, causes: &mut Vec<Cause>) {
    let Some((host, path)) = s
        .split_once('/')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        causes.push(Cause::invalid(
            at,
            &json!(s),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    for e in names::dns1123_subdomain(host) {
        causes.push(Cause::invalid(at, &json!(host), &e));
    }
    let url_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !path.chars().all(url_char) {
        causes.push(Cause::invalid(
            at,
            &json!(path),
            "Invalid path: must match the regex [A-Za-z0-9/\\-._~%!$&'()*+,;=:]+ (e.g. '/', or '/foo')",
        ));
    }
}

/// networking.k8s.io/v1 NetworkPolicy.
pub struct NetworkPolicy;

impl Strategy for NetworkPolicy {
    fn default(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        for rules in ["ingress", "egress"] {
            for rule in spec
                .get_mut(rules)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                for port in rule
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(p) = port.as_object_mut()
                        && p.get("protocol").is_none_or(Value::is_null)
                    {
                        p.insert("protocol".into(), json!("TCP"));
                    }
                }
            }
        }
        let none = spec
            .get("policyTypes")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if none {
            let egress = spec
                .get("egress")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty());
            let types = if egress {
                json!(["Ingress", "Egress"])
            } else {
                json!(["Ingress"])
            };
            spec.insert("policyTypes".into(), types);
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let spec = obj.get("spec").cloned().unwrap_or(json!({}));
        match is_set(spec.get("podSelector")) {
            None => causes.push(Cause::required("spec.podSelector")),
            Some(sel) => super::apps::validate_label_selector(sel, "spec.podSelector", causes),
        }
        for (rules, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, rule) in items(&spec, rules).iter().enumerate() {
                let at = format!("spec.{rules}[{i}]");
                for (j, port) in items(rule, "ports").iter().enumerate() {
                    validate_policy_port(port, &format!("{at}.ports[{j}]"), causes);
                }
                for (j, peer) in items(rule, peers).iter().enumerate() {
                    validate_peer(peer, &format!("{at}.{peers}[{j}]"), causes);
                }
            }
        }
        let types = items(&spec, "policyTypes");
        for (i, t) in types.iter().enumerate() {
            let t = t.as_str().unwrap_or("");
            if !POLICY_TYPES.contains(&t) {
                causes.push(Cause::not_supported(
                    &format!("spec.policyTypes[{i}]"),
                    t,
                    &POLICY_TYPES,
                ));
            }
        }
        if types.len() > POLICY_TYPES.len() {
            causes.push(Cause::invalid(
                "spec.policyTypes",
                &Value::Array(types),
                "may not specify more than two policyTypes",
            ));
        }
    }
}

/// `ValidateNetworkPolicyPort`: a known protocol, a port number or name, and an end of
/// range only after a numeric port and not below it.
fn validate_policy_port(port: &Value, at: &str, causes: &mut Vec<Cause>) {
    if let Some(p) = port.get("protocol").and_then(Value::as_str)
        && !PROTOCOLS.contains(&p)
    {
        causes.push(Cause::not_supported(
            &format!("{at}.protocol"),
            p,
            &PROTOCOLS,
        ));
    }
    let end = is_set(port.get("endPort"));
    let end_field = format!("{at}.endPort");
    match is_set(port.get("port")) {
        Some(n @ Value::Number(_)) => {
            if !port_number_ok(n) {
                causes.push(Cause::invalid(&format!("{at}.port"), n, PORT_RANGE_MSG));
            }
            if let Some(e) = end {
                if e.as_i64() < n.as_i64() {
                    causes.push(Cause::invalid(
                        &end_field,
                        n,
                        "must be greater than or equal to `port`",
                    ));
                }
                if !port_number_ok(e) {
                    causes.push(Cause::invalid(&end_field, e, PORT_RANGE_MSG));
                }
            }
        }
        Some(name) => {
            if let Some(e) = end {
                causes.push(Cause::invalid(
                    &end_field,
                    e,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            let name_str = name.as_str().unwrap_or("");
            for e in port_name_errors(name_str) {
                causes.push(Cause::invalid(&format!("{at}.port"), name, &e));
            }
        }
        None => {
            if let Some(e) = end {
                causes.push(Cause::invalid(
                    &end_field,
                    e,
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
}

/// `ValidateNetworkPolicyPeer`: at least one of the selectors and an IP block, the
/// block alone.
fn validate_peer(peer: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut count = 0;
    for sel in ["podSelector", "namespaceSelector"] {
        if let Some(s) = is_set(peer.get(sel)) {
            count += 1;
            super::apps::validate_label_selector(s, &format!("{at}.{sel}"), causes);
        }
    }
    let block = is_set(peer.get("ipBlock"));
    if let Some(b) = block {
        count += 1;
        validate_ip_block(b, &format!("{at}.ipBlock"), causes);
    }
    if count == 0 {
        causes.push(Cause::required_with(at, "must specify a peer"));
    } else if block.is_some() && count > 1 {
        causes.push(Cause::forbidden(
            at,
            "may not specify both ipBlock and another peer",
        ));
    }
}

/// `ValidateIPBlock`: a CIDR, and exceptions strictly inside it.
fn validate_ip_block(block: &Value, at: &str, causes: &mut Vec<Cause>) {
    let cidr = block.get("cidr").and_then(Value::as_str).unwrap_or("");
    if cidr.is_empty() {
        causes.push(Cause::required(&format!("{at}.cidr")));
        return;
    }
    let Ok(net) = cidr.parse::<ipnet::IpNet>() else {
        causes.push(Cause::invalid(
            &format!("{at}.cidr"),
            &json!(cidr),
            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
        ));
        return;
    };
    for (i, except) in items(block, "except").iter().enumerate() {
        let field = format!("{at}.except[{i}]");
        let e = except.as_str().unwrap_or("");
        match e.parse::<ipnet::IpNet>() {
            Err(_) => causes.push(Cause::invalid(
                &field,
                except,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            )),
            Ok(inner) => {
                let strict = inner.prefix_len() > net.prefix_len()
                    && net.trunc().contains(&inner.trunc().network());
                if !strict {
                    causes.push(Cause::invalid(
                        &field,
                        except,
                        "must be a strict subset of `cidr`",
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(s: &dyn Strategy, obj: Value) -> Vec<(String, String)> {
        let mut c = Vec::new();
        s.validate(&obj, &mut c);
        c.into_iter().map(|c| (c.field, c.message)).collect()
    }

    fn fields(s: &dyn Strategy, obj: Value) -> Vec<String> {
        causes(s, obj).into_iter().map(|(f, _)| f).collect()
    }

    fn ingress(rule: Value) -> Value {
        json!({"metadata": {"name": "i"}, "spec": {"rules": [rule]}})
    }

    fn svc_path(path: &str, kind: &str) -> Value {
        json!({"path": path, "pathType": kind,
               "backend": {"service": {"name": "web", "port": {"number": 80}}}})
    }

    #[test]
    fn an_ingress_with_hosts_paths_and_services_is_valid() {
        let ok = ingress(json!({"host": "*.example.com", "http": {"paths": [
            svc_path("/", "Prefix"), svc_path("/a", "Exact"), svc_path("", "ImplementationSpecific"),
            {"path": "/r", "pathType": "Prefix", "backend": {"resource": {"apiGroup": "k8s.example.com", "kind": "StorageBucket", "name": "b"}}},
            {"path": "/n", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
        ]}}));
        assert_eq!(causes(&Ingress, ok), vec![]);
        let tls = json!({"metadata": {"name": "i"}, "spec": {
            "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
            "tls": [{"hosts": ["a.example.com", "*.b.example.com"], "secretName": "cert"}]}});
        assert_eq!(causes(&Ingress, tls), vec![]);
    }

    #[test]
    fn an_ingress_needs_rules_or_a_default_backend() {
        assert_eq!(
            fields(&Ingress, json!({"metadata": {"name": "i"}, "spec": {}})),
            ["spec"]
        );
    }

    #[test]
    fn hosts_are_dns_names_with_at_most_a_leading_wildcard() {
        for bad in ["1.2.3.4", "a.*.com", "**.com", "Upper.com", "*"] {
            let f = fields(
                &Ingress,
                ingress(json!({"host": bad, "http": {"paths": [svc_path("/", "Prefix")]}})),
            );
            assert!(
                f.iter().all(|f| f == "spec.rules[0].host") && !f.is_empty(),
                "{bad}: {f:?}"
            );
        }
        let tls = json!({"metadata": {"name": "i"}, "spec": {
            "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
            "tls": [{"hosts": ["ok.com", "*.*.com"]}]}});
        assert_eq!(fields(&Ingress, tls), ["spec.tls[0].hosts[1]"]);
    }

    #[test]
    fn paths_need_a_known_type_and_exact_and_prefix_paths_are_absolute() {
        let check = |path: Value| fields(&Ingress, ingress(json!({"http": {"paths": [path]}})));
        assert_eq!(
            check(
                json!({"path": "/", "backend": {"service": {"name": "w", "port": {"number": 1}}}})
            ),
            ["spec.rules[0].http.paths[0].pathType"]
        );
        assert_eq!(
            check(svc_path("/", "Regex")),
            ["spec.rules[0].http.paths[0].pathType"]
        );
        assert_eq!(
            check(svc_path("a", "Prefix")),
            ["spec.rules[0].http.paths[0].path"]
        );
        assert_eq!(
            check(svc_path("a", "ImplementationSpecific")),
            ["spec.rules[0].http.paths[0].path"]
        );
        assert_eq!(
            check(svc_path("/a//b", "Exact")),
            ["spec.rules[0].http.paths[0].path"]
        );
        assert_eq!(
            fields(&Ingress, ingress(json!({"http": {"paths": []}}))),
            ["spec.rules[0].http.paths"]
        );
    }

    #[test]
    fn a_backend_is_one_service_with_one_port_or_one_resource() {
        let check = |backend: Value| {
            fields(
                &Ingress,
                json!({"metadata": {"name": "i"}, "spec": {"defaultBackend": backend}}),
            )
        };
        let r = json!({"kind": "K", "name": "n"});
        assert_eq!(
            check(json!({"resource": r, "service": {"name": "w", "port": {"number": 1}}})),
            ["spec.defaultBackend"]
        );
        assert_eq!(check(json!({})), ["spec.defaultBackend"]);
        assert_eq!(
            check(json!({"service": {"name": "w", "port": {}}})),
            ["spec.defaultBackend"]
        );
        assert_eq!(
            check(json!({"service": {"name": "w", "port": {"name": "http", "number": 80}}})),
            ["spec.defaultBackend"]
        );
        assert_eq!(
            check(json!({"service": {"port": {"number": 80}}})),
            ["spec.defaultBackend.service.name"]
        );
        assert_eq!(
            check(json!({"service": {"name": "w", "port": {"number": 70000}}})),
            ["spec.defaultBackend.service.port.number"]
        );
        assert_eq!(
            check(json!({"service": {"name": "w", "port": {"name": "-http"}}})),
            ["spec.defaultBackend.service.port.name"]
        );
        assert_eq!(
            check(json!({"resource": {"name": "n"}})),
            ["spec.defaultBackend.resource.kind"]
        );
    }

    #[test]
    fn the_class_annotation_must_match_the_class_name() {
        let mut c = Vec::new();
        Ingress.validate_create(
            &json!({"metadata": {"annotations": {CLASS_ANNOTATION: "a"}},
                    "spec": {"ingressClassName": "b"}}),
            &mut c,
        );
        assert_eq!(c[0].field, "annotations.kubernetes.io/ingress.class");
    }

    fn class(controller: Value) -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"controller": controller}})
    }

    #[test]
    fn an_ingress_class_controller_is_a_domain_prefixed_path() {
        assert_eq!(
            fields(&IngressClass, class(json!("example.com/ingress"))),
            Vec::<String>::new()
        );
        for bad in [
            json!(null),
            json!("nopath"),
            json!("/x"),
            json!("Bad_Host/x"),
            json!("a.com/x y"),
        ] {
            assert_eq!(
                fields(&IngressClass, class(bad.clone())),
                ["spec.controller"],
                "{bad}"
            );
        }
        let long = format!("example.com/{}", "a".repeat(240));
        assert_eq!(
            fields(&IngressClass, class(json!(long))),
            ["spec.controller"]
        );
    }

    #[test]
    fn an_ingress_class_controller_never_changes_and_parameters_default_to_cluster() {
        let mut c = Vec::new();
        IngressClass.validate_update(
            &class(json!("a.com/x")),
            &class(json!("a.com/y")),
            Part::Main,
            &mut c,
        );
        assert_eq!(c[0].field, "spec.controller");
        assert!(c[0].message.contains("field is immutable"));
        let mut obj = json!({"spec": {"controller": "a.com/x",
            "parameters": {"kind": "K", "name": "n"}}});
        IngressClass.default(&mut obj);
        assert_eq!(obj["spec"]["parameters"]["scope"], "Cluster");
        assert_eq!(fields(&IngressClass, obj.clone()), Vec::<String>::new());
        obj["spec"]["parameters"]["scope"] = json!("Namespace");
        assert_eq!(fields(&IngressClass, obj), ["spec.parameters.namespace"]);
    }

    fn policy(spec: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": spec});
        NetworkPolicy.default(&mut p);
        p
    }

    #[test]
    fn network_policies_default_their_types_and_protocols() {
        let p = policy(json!({"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}));
        assert_eq!(p["spec"]["policyTypes"], json!(["Ingress"]));
        assert_eq!(p["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
        let p = policy(json!({"podSelector": {}, "egress": [{}]}));
        assert_eq!(p["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        let p = policy(json!({"podSelector": {}, "egress": [{}], "policyTypes": ["Egress"]}));
        assert_eq!(p["spec"]["policyTypes"], json!(["Egress"]));
        assert_eq!(fields(&NetworkPolicy, p), Vec::<String>::new());
    }

    #[test]
    fn network_policies_need_a_pod_selector_and_known_types() {
        assert_eq!(
            fields(
                &NetworkPolicy,
                json!({"spec": {"policyTypes": ["Ingress"]}})
            ),
            ["spec.podSelector"]
        );
        assert_eq!(
            fields(
                &NetworkPolicy,
                json!({"spec": {"podSelector": {}, "policyTypes": ["Sideways"]}})
            ),
            ["spec.policyTypes[0]"]
        );
    }

    #[test]
    fn policy_ports_have_a_protocol_a_range_and_an_end_only_after_a_number() {
        let check = |port: Value| {
            fields(
                &NetworkPolicy,
                policy(json!({"podSelector": {}, "ingress": [{"ports": [port]}]})),
            )
        };
        assert_eq!(
            check(json!({"port": 80, "endPort": 90})),
            Vec::<String>::new()
        );
        assert_eq!(check(json!({"port": "http"})), Vec::<String>::new());
        assert_eq!(
            check(json!({"protocol": "ICMP"})),
            ["spec.ingress[0].ports[0].protocol"]
        );
        assert_eq!(check(json!({"port": 0})), ["spec.ingress[0].ports[0].port"]);
        assert_eq!(
            check(json!({"port": 90, "endPort": 80})),
            ["spec.ingress[0].ports[0].endPort"]
        );
        assert_eq!(
            check(json!({"port": "http", "endPort": 80})),
            ["spec.ingress[0].ports[0].endPort"]
        );
        assert_eq!(
            check(json!({"endPort": 80})),
            ["spec.ingress[0].ports[0].endPort"]
        );
        assert_eq!(
            check(json!({"port": 80, "endPort": 70000})),
            ["spec.ingress[0].ports[0].endPort"]
        );
    }

    #[test]
    fn peers_name_something_and_ip_blocks_stand_alone_with_exceptions_inside() {
        let check = |peer: Value| {
            fields(
                &NetworkPolicy,
                policy(json!({"podSelector": {}, "egress": [{"to": [peer]}]})),
            )
        };
        let ok = json!({"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}});
        assert_eq!(check(ok), Vec::<String>::new());
        assert_eq!(
            check(json!({"podSelector": {}, "namespaceSelector": {"matchLabels": {"a": "b"}}})),
            Vec::<String>::new()
        );
        assert_eq!(check(json!({})), ["spec.egress[0].to[0]"]);
        assert_eq!(
            check(json!({"podSelector": {}, "ipBlock": {"cidr": "10.0.0.0/8"}})),
            ["spec.egress[0].to[0]"]
        );
        assert_eq!(
            check(json!({"ipBlock": {"cidr": "10.0.0.0/33"}})),
            ["spec.egress[0].to[0].ipBlock.cidr"]
        );
        assert_eq!(
            check(
                json!({"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24", "10.0.0.0/16", "x"]}})
            ),
            [
                "spec.egress[0].to[0].ipBlock.except[0]",
                "spec.egress[0].to[0].ipBlock.except[1]",
                "spec.egress[0].to[0].ipBlock.except[2]"
            ]
        );
    }

    #[test]
    fn port_names_are_iana_service_names() {
        assert!(port_name_errors("http").is_empty());
        assert!(port_name_errors("h-2").is_empty());
        for bad in ["", "80", "-a", "a--b", "HTTP", "a-very-long-port-name"] {
            assert!(!port_name_errors(bad).is_empty(), "{bad}");
        }
    }
}
