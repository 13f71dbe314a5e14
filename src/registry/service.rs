//! Services: their defaults and rules, their Table cells, and the cluster IPs and node
//! ports they are given. berth keeps Services as the API server does, so that manifests
//! and clients that carry them work (`kubectl cluster-info` lists them); the service
//! proxy (`net::proxy`) carries their traffic.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use super::strategy::{BoxFuture, Strategy, WriteGuard};
use super::{Cause, Error, Part, Registry};

/// The strategy of Services: their defaults and rules, and the addresses and node ports
/// they are given, chosen under one lock so that no two get the same.
pub struct Service;

impl Strategy for Service {
    fn default(&self, obj: &mut Value) {
        default(obj)
    }
    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate(obj, causes)
    }
    fn prepare_update(&self, old: &Value, _incoming: Option<&Value>, merged: &mut Value) {
        drop_type_dependent_fields(old, merged)
    }
    fn before_write<'r: 'a, 'a>(
        &'a self,
        reg: &'r Registry,
        key: Option<&'a str>,
        old: Option<&'a Value>,
        obj: &'a mut Value,
        part: Part,
        causes: &'a mut Vec<Cause>,
    ) -> BoxFuture<'a, Result<Option<WriteGuard<'r>>, Error>> {
        Box::pin(async move {
            if part != Part::Main {
                return Ok(None);
            }
            if let Some(old) = old {
                keep_allocated(old, obj, causes);
            }
            reg.allocate_service(key, obj).await.map(Some)
        })
    }
}

/// Cluster IPs come from 10.96.0.0/16 (the start of kubeadm's default range); the first
/// two addresses are not handed out, as Kubernetes keeps `.1` for its own service, nor
/// is the DNS Service's (`.10`): they are given only to Services that ask for them.
const CLUSTER_IPS: (u32, u32) = (u32::from_be_bytes([10, 96, 0, 0]), 1 << 16);

pub use crate::types::{DNS_SERVICE_IP, KUBERNETES_SERVICE_IP};

/// Node ports, as Kubernetes' default range.
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

const TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

fn spec(obj: &Value) -> &Value {
    obj.get("spec").unwrap_or(&Value::Null)
}

fn kind_of(obj: &Value) -> &str {
    spec(obj)["type"].as_str().unwrap_or("ClusterIP")
}

fn has_node_ports(obj: &Value) -> bool {
    matches!(kind_of(obj), "NodePort" | "LoadBalancer")
}

/// The defaults the API server fills in.
pub fn default(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let spec = m.entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let kind = spec
        .entry("type")
        .or_insert_with(|| json!("ClusterIP"))
        .as_str()
        .unwrap_or("ClusterIP")
        .to_string();
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if kind != "ExternalName" {
        spec.entry("internalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            // A node port of 0 (as typed clients send it) asks for one to be chosen.
            if p.get("nodePort").is_some_and(|n| n.is_null() || n == 0) {
                p.remove("nodePort");
            }
            p.entry("protocol").or_insert_with(|| json!("TCP"));
            // An unset target port is the port, and so is the zero value typed clients
            // send for it (0 or ""), as Kubernetes defaults it.
            let unset = p
                .get("targetPort")
                .is_none_or(|t| t.is_null() || *t == 0 || *t == "");
            if let (true, Some(port)) = (unset, p.get("port").cloned()) {
                p.insert("targetPort".into(), port);
            }
        }
    }
}

/// The rules beyond the schema.
pub fn validate(obj: &Value, causes: &mut Vec<Cause>) {
    let spec = spec(obj);
    let kind = kind_of(obj);
    if !TYPES.contains(&kind) {
        causes.push(Cause::not_supported("spec.type", kind, TYPES));
    }
    if kind == "ExternalName" {
        if spec["externalName"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required("spec.externalName"));
        }
        let ip = spec["clusterIP"].as_str().is_some_and(|ip| !ip.is_empty());
        let ips = spec["clusterIPs"].as_array().is_some_and(|a| !a.is_empty());
        if ip || ips {
            causes.push(Cause::forbidden(
                "spec.clusterIPs",
                "may not be set for ExternalName services",
            ));
        }
        return;
    }
    let ports = spec["ports"].as_array().map_or(&[][..], Vec::as_slice);
    if ports.is_empty() {
        causes.push(Cause::required("spec.ports"));
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = |f: &str| format!("spec.ports[{i}].{f}");
        match p["port"].as_i64() {
            Some(1..=65535) => {}
            _ => causes.push(Cause::invalid(
                &at("port"),
                &p["port"],
                "must be between 1 and 65535, inclusive",
            )),
        }
        let protocol = p["protocol"].as_str().unwrap_or("TCP");
        if !PROTOCOLS.contains(&protocol) {
            causes.push(Cause::not_supported(&at("protocol"), protocol, PROTOCOLS));
        }
        let name = p["name"].as_str().unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(&at("name")));
        } else if !name.is_empty() && !names.insert(name) {
            causes.push(Cause {
                reason: "FieldValueDuplicate".into(),
                message: format!("Duplicate value: {name:?}"),
                field: at("name"),
            });
        }
        match &p["targetPort"] {
            Value::Number(n) if !matches!(n.as_i64(), Some(1..=65535)) => {
                causes.push(Cause::invalid(
                    &at("targetPort"),
                    &p["targetPort"],
                    "must be between 1 and 65535, inclusive",
                ));
            }
            _ => {}
        }
        if let Some(node_port) = p.get("nodePort").filter(|n| !n.is_null()) {
            let in_range = node_port
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .is_some_and(|n| NODE_PORTS.contains(&n));
            if !has_node_ports(obj) {
                causes.push(Cause::forbidden(
                    &at("nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            } else if !in_range {
                causes.push(Cause::invalid(
                    &at("nodePort"),
                    node_port,
                    "provided port is not in the valid range. The range of valid ports is 30000-32767",
                ));
            }
        }
    }
    validate_source_ranges(spec, kind, causes);
    match spec["clusterIP"].as_str() {
        None | Some("") | Some("None") => {}
        Some(ip) if cluster_ip_index(ip).is_none() => causes.push(Cause::invalid(
            "spec.clusterIP",
            &json!(ip),
            "provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/16",
        )),
        Some(_) => {}
    }
}

/// `spec.loadBalancerSourceRanges`, as upstream: only for a LoadBalancer, and each a
/// CIDR (IPv4 or IPv6; padding with spaces is allowed, a historical accident upstream
/// keeps). The field path is upstream's, capital L included.
fn validate_source_ranges(spec: &Value, kind: &str, causes: &mut Vec<Cause>) {
    let ranges = spec["loadBalancerSourceRanges"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    if ranges.is_empty() {
        return;
    }
    let path = "spec.LoadBalancerSourceRanges";
    if kind != "LoadBalancer" {
        causes.push(Cause::forbidden(
            path,
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    for (i, r) in ranges.iter().enumerate() {
        let ok = r
            .as_str()
            .is_some_and(|r| r.trim().parse::<ipnet::IpNet>().is_ok());
        if !ok {
            causes.push(Cause::invalid(
                &format!("{path}[{i}]"),
                r,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
}

/// The index of `ip` in the cluster IP range, if it is a valid IPv4 address there.
fn cluster_ip_index(ip: &str) -> Option<u32> {
    let ip: Ipv4Addr = ip.parse().ok()?;
    let offset = u32::from(ip).checked_sub(CLUSTER_IPS.0)?;
    (offset < CLUSTER_IPS.1).then_some(offset)
}

impl Registry {
    /// Gives a Service (`key`, when it exists already) the cluster IP and node ports it
    /// needs, checking those it names against every other Service. The guard returned
    /// must be held until the Service is written.
    async fn allocate_service(
        &self,
        key: Option<&str>,
        svc: &mut Value,
    ) -> Result<WriteGuard<'_>, Error> {
        let res = super::catalog::of(super::Kind::Service);
        let guard = self.services.lock().await;
        let mut taken = Taken::default();
        let (all, _) = self.store.list(&res.scope_prefix(None));
        for (k, rec) in all {
            if Some(&*k) != key {
                taken.add(&super::parse(&rec.value)?);
            }
        }
        allocate(svc, &taken).map_err(|cause| {
            Self::invalid(res, super::meta_str(svc, "name").unwrap_or(""), vec![cause])
        })?;
        Ok(guard)
    }
}

/// What the other Services hold.
#[derive(Debug, Default)]
struct Taken {
    ips: HashSet<u32>,
    node_ports: HashSet<u64>,
}

impl Taken {
    /// Notes what `svc` holds.
    fn add(&mut self, svc: &Value) {
        if let Some(i) = spec(svc)["clusterIP"].as_str().and_then(cluster_ip_index) {
            self.ips.insert(i);
        }
        for p in spec(svc)["ports"].as_array().into_iter().flatten() {
            if let Some(n) = p["nodePort"].as_u64() {
                self.node_ports.insert(n);
            }
        }
    }
}

/// Gives `svc` a cluster IP and node ports where it needs them and names none, and checks
/// that those it names are free.
fn allocate(svc: &mut Value, taken: &Taken) -> Result<(), Cause> {
    let kind = kind_of(svc).to_string();
    let wants_node_ports = has_node_ports(svc);
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if kind != "ExternalName" {
        let ip = match spec.get("clusterIP").and_then(Value::as_str) {
            None | Some("") => {
                let dns = cluster_ip_index(DNS_SERVICE_IP);
                let free = (2..CLUSTER_IPS.1 - 1)
                    .find(|i| !taken.ips.contains(i) && Some(*i) != dns)
                    .ok_or_else(|| {
                        Cause::invalid(
                            "spec.clusterIP",
                            &Value::Null,
                            "no cluster IP is left in 10.96.0.0/16; delete a Service first",
                        )
                    })?;
                Ipv4Addr::from(CLUSTER_IPS.0 + free).to_string()
            }
            Some("None") => "None".to_string(),
            Some(ip) => {
                if cluster_ip_index(ip).is_some_and(|i| taken.ips.contains(&i)) {
                    return Err(Cause::invalid(
                        "spec.clusterIP",
                        &json!(ip),
                        "provided IP is already allocated",
                    ));
                }
                ip.to_string()
            }
        };
        set_addresses(spec, ip);
    }
    if wants_node_ports {
        let mut used = taken.node_ports.clone();
        let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
        let ports: Vec<&mut Map<String, Value>> = ports
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
            .collect();
        // The ports named first, then the free ones for the rest.
        for (i, p) in ports.iter().enumerate() {
            if let Some(n) = p.get("nodePort").and_then(Value::as_u64)
                && !used.insert(n)
            {
                return Err(Cause::invalid(
                    &format!("spec.ports[{i}].nodePort"),
                    &json!(n),
                    "provided port is already allocated",
                ));
            }
        }
        for (i, p) in ports.into_iter().enumerate() {
            match p.get("nodePort").and_then(Value::as_u64) {
                Some(_) => {}
                None => {
                    let free = NODE_PORTS
                        .map(u64::from)
                        .find(|n| !used.contains(n))
                        .ok_or_else(|| {
                            Cause::invalid(
                                &format!("spec.ports[{i}].nodePort"),
                                &Value::Null,
                                "no node port is left in 30000-32767; delete a Service first",
                            )
                        })?;
                    used.insert(free);
                    p.insert("nodePort".into(), json!(free));
                }
            }
        }
    }
    Ok(())
}

fn set_addresses(spec: &mut Map<String, Value>, ip: String) {
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.insert("clusterIP".into(), json!(ip));
    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    spec.entry("ipFamilyPolicy")
        .or_insert_with(|| json!("SingleStack"));
}

/// What a change of type leaves behind that the new type has no use for and the client
/// did not change, dropped as kube-apiserver drops it (`dropTypeDependentFields`): the
/// cluster IP and its families of a Service that becomes an ExternalName, the node ports
/// of one that needs none (unless it names new ones), the external traffic policy of one
/// no longer reached from outside, and an ExternalName's internal traffic policy. An
/// update that reads a Service and writes it back with another type (as `kubectl edit`
/// and typed clients do) carries all of them.
fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    let needs_ip = |v: &Value| kind_of(v) != "ExternalName";
    let external = |v: &Value| {
        has_node_ports(v)
            || (kind_of(v) == "ClusterIP"
                && spec(v)["externalIPs"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty()))
    };
    let node_ports = |v: &Value| -> HashSet<u64> {
        spec(v)["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["nodePort"].as_u64())
            .filter(|n| *n != 0)
            .collect()
    };
    let drop_ip = needs_ip(old) && !needs_ip(new);
    let drop_node_ports =
        has_node_ports(old) && !has_node_ports(new) && node_ports(new).is_subset(&node_ports(old));
    let drop_etp = external(old) && !external(new);
    let was = spec(old).clone();
    let external_name = kind_of(new) == "ExternalName";
    let is_lb = kind_of(new) == "LoadBalancer";
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let same = |spec: &Map<String, Value>, f: &str| spec.get(f) == was.get(f);
    if drop_ip {
        let ip_unset = spec
            .get("clusterIP")
            .is_none_or(|ip| ip.is_null() || ip == "");
        if ip_unset || (same(spec, "clusterIP") && same(spec, "clusterIPs")) {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        for f in ["ipFamilies", "ipFamilyPolicy"] {
            if same(spec, f) {
                spec.remove(f);
            }
        }
    }
    if drop_node_ports {
        let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
        for p in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
    if drop_etp && same(spec, "externalTrafficPolicy") {
        spec.remove("externalTrafficPolicy");
    }
    if kind_of(old) == "LoadBalancer" && !is_lb && same(spec, "allocateLoadBalancerNodePorts") {
        spec.remove("allocateLoadBalancerNodePorts");
    }
    if external_name {
        spec.remove("internalTrafficPolicy");
    }
}

/// An update keeps what the Service was given when the new spec does not name it (as a
/// replaced manifest usually does not) and its type still uses it, and may not change
/// its cluster IP.
fn keep_allocated(old: &Value, new: &mut Value, causes: &mut Vec<Cause>) {
    let was = spec(old);
    let (needs_ip, needs_node_ports) = (kind_of(new) != "ExternalName", has_node_ports(new));
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let old_ip = was["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty() && needs_ip);
    match (old_ip, spec.get("clusterIP").and_then(Value::as_str)) {
        (Some(_), None | Some("")) => {
            for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                if let Some(v) = was.get(f) {
                    spec.insert(f.into(), v.clone());
                }
            }
        }
        (Some(ip), Some(now)) if now != ip => causes.push(Cause::invalid(
            "spec.clusterIP",
            &json!(now),
            "field is immutable",
        )),
        _ => {}
    }
    let old_ports = was["ports"].as_array().map_or(&[][..], Vec::as_slice);
    let ports = spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .filter(|_| needs_node_ports);
    for p in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
        if p.get("nodePort").is_some_and(|n| !n.is_null()) {
            continue;
        }
        let same = old_ports
            .iter()
            .find(|o| o["port"] == p["port"] && o["protocol"] == p["protocol"]);
        if let Some(n) = same
            .and_then(|o| o.get("nodePort"))
            .filter(|n| !n.is_null())
        {
            p.insert("nodePort".into(), n.clone());
        }
    }
}

/// TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S) and SELECTOR, as kubectl prints them.
pub fn cells(v: &Value) -> Vec<String> {
    let spec = spec(v);
    let kind = kind_of(v);
    let cluster_ip = spec["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let ingress: Vec<&str> = v
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
        .collect();
    let mut external: Vec<&str> = spec["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    external.extend(ingress);
    let external = match (kind, external.is_empty()) {
        ("ExternalName", _) => spec["externalName"].as_str().unwrap_or("").to_string(),
        ("LoadBalancer", true) => "<pending>".into(),
        (_, true) => "<none>".into(),
        (_, false) => external.join(","),
    };
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let port = p["port"].as_i64().unwrap_or(0);
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(n) => format!("{port}:{n}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect();
    let selector: Vec<String> = spec["selector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    vec![
        kind.to_string(),
        cluster_ip.to_string(),
        external,
        if ports.is_empty() {
            "<none>".into()
        } else {
            ports.join(",")
        },
        if selector.is_empty() {
            "<none>".into()
        } else {
            selector.join(",")
        },
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_kubernetes_service_holds_the_address_kept_for_it() {
        assert_eq!(
            super::cluster_ip_index(super::KUBERNETES_SERVICE_IP),
            Some(1)
        );
    }

    #[test]
    fn the_dns_services_address_is_given_only_to_who_asks_for_it() {
        let mut taken = Taken::default();
        for _ in 2..12 {
            let mut s = svc(json!({"ports": [{"port": 80}]}));
            allocate(&mut s, &taken).unwrap();
            assert_ne!(s["spec"]["clusterIP"], DNS_SERVICE_IP);
            taken.add(&s);
        }
        assert_eq!(taken.ips.len(), 10);
        let mut dns = svc(json!({"clusterIP": DNS_SERVICE_IP, "ports": [{"port": 53}]}));
        allocate(&mut dns, &taken).unwrap();
        assert_eq!(dns["spec"]["clusterIP"], DNS_SERVICE_IP);
    }

    use super::*;

    fn svc(spec: Value) -> Value {
        let mut v = json!({"metadata": {"name": "s"}, "spec": spec});
        default(&mut v);
        v
    }

    #[test]
    fn services_get_defaults_addresses_and_node_ports() {
        let mut taken = Taken::default();
        let mut a = svc(json!({"ports": [{"port": 80}], "selector": {"app": "a"}}));
        allocate(&mut a, &taken).unwrap();
        assert_eq!(a["spec"]["clusterIP"], "10.96.0.2");
        assert_eq!(a["spec"]["clusterIPs"], json!(["10.96.0.2"]));
        assert_eq!(
            a["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        taken.add(&a);
        let mut b = svc(json!({"type": "NodePort", "ports": [
            {"name": "web", "port": 80, "nodePort": 0},
            {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30000}]}));
        allocate(&mut b, &taken).unwrap();
        assert_eq!(b["spec"]["clusterIP"], "10.96.0.3");
        assert_eq!(b["spec"]["ports"][0]["nodePort"], 30001);
        assert_eq!(
            cells(&b),
            [
                "NodePort",
                "10.96.0.3",
                "<none>",
                "80:30001/TCP,53:30000/UDP",
                "<none>"
            ]
        );
        taken.add(&b);
        // What another holds is refused by name.
        let mut c = svc(json!({"clusterIP": "10.96.0.2", "ports": [{"port": 1}]}));
        assert_eq!(
            allocate(&mut c, &taken).unwrap_err().field,
            "spec.clusterIP"
        );
        let mut d = svc(json!({"type": "NodePort", "ports": [{"port": 1, "nodePort": 30001}]}));
        assert_eq!(
            allocate(&mut d, &taken).unwrap_err().field,
            "spec.ports[0].nodePort"
        );
        // Headless and external-name services hold no address.
        let mut h = svc(json!({"clusterIP": "None", "ports": [{"port": 1}]}));
        allocate(&mut h, &taken).unwrap();
        assert_eq!(h["spec"]["clusterIPs"], json!(["None"]));
        let mut e = svc(json!({"type": "ExternalName", "externalName": "db.example"}));
        allocate(&mut e, &taken).unwrap();
        assert!(e["spec"].get("clusterIP").is_none());
        assert_eq!(cells(&e)[2], "db.example");
    }

    #[test]
    fn service_rules_are_checked() {
        let fields = |spec: Value| {
            let mut causes = Vec::new();
            validate(&svc(spec), &mut causes);
            causes.into_iter().map(|c| c.field).collect::<Vec<_>>()
        };
        assert!(fields(json!({"ports": [{"port": 80}]})).is_empty());
        assert_eq!(fields(json!({})), ["spec.ports"]);
        assert_eq!(
            fields(json!({"type": "ExternalName"})),
            ["spec.externalName"]
        );
        assert_eq!(
            fields(json!({"type": "Weird", "ports": [{"port": 70000, "protocol": "XTP"}]})),
            [
                "spec.type",
                "spec.ports[0].port",
                "spec.ports[0].protocol",
                "spec.ports[0].targetPort"
            ]
        );
        assert_eq!(
            fields(json!({"ports": [{"port": 1}, {"port": 2}]})),
            ["spec.ports[0].name", "spec.ports[1].name"]
        );
        assert_eq!(
            fields(json!({"ports": [{"port": 1, "nodePort": 30005}]})),
            ["spec.ports[0].nodePort"]
        );
        assert_eq!(
            fields(json!({"clusterIP": "192.168.1.1", "ports": [{"port": 1}]})),
            ["spec.clusterIP"]
        );
        let lb = |ranges: Value| {
            json!({"type": "LoadBalancer", "ports": [{"port": 1}],
                   "loadBalancerSourceRanges": ranges})
        };
        assert!(fields(lb(json!([" 10.0.0.0/8", "192.0.2.1/32 ", "2001:db8::/64"]))).is_empty());
        assert_eq!(
            fields(lb(json!(["10.0.0.0/8", "10.0.0.1", "10.0.0.0/33", 7]))),
            [
                "spec.LoadBalancerSourceRanges[1]",
                "spec.LoadBalancerSourceRanges[2]",
                "spec.LoadBalancerSourceRanges[3]"
            ]
        );
        assert_eq!(
            fields(json!({"ports": [{"port": 1}], "loadBalancerSourceRanges": ["10.0.0.0/8"]})),
            ["spec.LoadBalancerSourceRanges"]
        );
    }

    #[test]
    fn an_update_keeps_the_address_and_ports_it_was_given() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.9",
            "clusterIPs": ["10.96.0.9"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30010}]}});
        let mut new = json!({"spec": {"type": "NodePort",
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]}});
        let mut causes = Vec::new();
        keep_allocated(&old, &mut new, &mut causes);
        assert!(causes.is_empty());
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.9");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30010);
        assert!(new["spec"]["ports"][1].get("nodePort").is_none());
        let mut moved = json!({"spec": {"clusterIP": "10.96.0.10"}});
        keep_allocated(&old, &mut moved, &mut causes);
        assert_eq!(causes[0].field, "spec.clusterIP");
    }

    #[test]
    fn a_change_of_type_drops_what_the_new_type_has_no_use_for() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.9",
            "clusterIPs": ["10.96.0.9"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30010}]}});
        // Read and written back as an ExternalName: no address, node port or policies.
        let mut new = old.clone();
        new["spec"]["type"] = json!("ExternalName");
        new["spec"]["externalName"] = json!("db.example");
        drop_type_dependent_fields(&old, &mut new);
        let mut causes = Vec::new();
        keep_allocated(&old, &mut new, &mut causes);
        validate(&new, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        let spec = new["spec"].as_object().unwrap();
        for f in [
            "clusterIP",
            "clusterIPs",
            "ipFamilies",
            "ipFamilyPolicy",
            "externalTrafficPolicy",
            "internalTrafficPolicy",
        ] {
            assert!(!spec.contains_key(f), "{f} is left: {new}");
        }
        assert!(new["spec"]["ports"][0].get("nodePort").is_none(), "{new}");

        // NodePort to ClusterIP keeps the address and drops the node port.
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        drop_type_dependent_fields(&old, &mut new);
        keep_allocated(&old, &mut new, &mut causes);
        validate(&new, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.9");
        assert!(new["spec"]["ports"][0].get("nodePort").is_none(), "{new}");
        assert!(new["spec"].get("externalTrafficPolicy").is_none(), "{new}");

        // A node port the client names anew is its own: kept, and refused for the type.
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        new["spec"]["ports"][0]["nodePort"] = json!(30011);
        drop_type_dependent_fields(&old, &mut new);
        validate(&new, &mut causes);
        assert_eq!(
            causes.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["spec.ports[0].nodePort"]
        );
    }

    #[test]
    fn an_external_name_has_no_cluster_ip() {
        let mut causes = Vec::new();
        validate(
            &svc(json!({"type": "ExternalName", "externalName": "db.example",
                        "clusterIP": "10.96.0.9"})),
            &mut causes,
        );
        assert_eq!(
            causes.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["spec.clusterIPs"]
        );
    }
}
