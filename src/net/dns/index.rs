//! The cluster's names in memory: each Service compiled, with its EndpointSlices, into
//! the records of the Kubernetes DNS specification, ready to be sent as they are.
//!
//! A change of a Service or of one of its slices compiles that Service again (under the
//! [`Sources`] lock, away from readers) and swaps it in; a query takes the read lock
//! only to clone the `Arc` of the record set that answers it, so answering allocates
//! nothing but the response. Pod names (`a-b-c-d.<ns>.pod.<zone>`) are made per query,
//! as CoreDNS's `pods insecure` mode makes them, in namespaces that exist.
//!
//! What is NXDOMAIN and what NODATA follows CoreDNS's `kubernetes` plugin: a name that
//! exists with no record of the asked type (a ClusterIP Service asked for AAAA, a
//! namespace, the zone's own name) is NODATA; a headless Service without ready
//! endpoints, an unknown Service, namespace, port or endpoint is NXDOMAIN.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, PTR, SOA, SRV, TXT};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordType};
use serde_json::Value;

use crate::client::informer::Change;
use crate::client::key_of;
use crate::types::json::{array_at, str_at};

/// The TTL of every answer (CoreDNS's `kubernetes` plugin's default; kubeadm's Corefile
/// raises it to 30, but an in-process server answers cheaply and pods see changes sooner).
pub const TTL: u32 = 5;
/// The schema version `dns-version.<zone>` answers (what CoreDNS answers).
pub const SCHEMA_VERSION: &str = "1.1.0";
/// The TTL of the schema version record (CoreDNS's).
const VERSION_TTL: u32 = 28800;
/// The label naming an EndpointSlice's Service.
const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The most labels a name below the zone has (`_port._proto.<svc>.<ns>.svc`).
const MAX_LABELS: usize = 5;

/// The records that answer one question, and what goes in the additional section.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RecordSet {
    pub answers: Vec<Record>,
    pub additionals: Vec<Record>,
}

impl RecordSet {
    fn of(answers: Vec<Record>) -> Arc<Self> {
        Arc::new(RecordSet {
            answers,
            additionals: Vec::new(),
        })
    }
}

/// What the index says of a question.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Records of the index (none: NODATA).
    Set(Arc<RecordSet>),
    /// Records made for this question.
    Made(Vec<Record>),
    /// An ExternalName Service: its CNAME, and the name to look up for A and AAAA.
    Alias(Arc<RecordSet>, Name),
    /// The name exists, without records of this type.
    NoData,
    /// No such name.
    NxDomain,
    /// A name of the zone, asked before the index has its first lists.
    NotReady,
    /// Not a name of the cluster's: for the upstream servers.
    Elsewhere,
}

/// One endpoint hostname's addresses.
#[derive(Debug, Default)]
struct Host {
    a: Arc<RecordSet>,
    aaaa: Arc<RecordSet>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ClusterIp,
    Headless,
    External,
}

/// One Service's records.
#[derive(Debug)]
struct Compiled {
    kind: Kind,
    a: Arc<RecordSet>,
    aaaa: Arc<RecordSet>,
    /// SRV of every port, for the Service's own name.
    srv: Arc<RecordSet>,
    /// The CNAME of an ExternalName Service and its target.
    alias: Option<(Arc<RecordSet>, Name)>,
    /// SRV of each named port: `_<port>._<proto>`.
    ports: Vec<(Box<str>, Box<str>, Arc<RecordSet>)>,
    /// Each ready endpoint by hostname (its `hostname`, else its address with dashes).
    hosts: HashMap<Box<str>, Host>,
    /// The PTR records this Service gives: its cluster IPs, its endpoints' addresses.
    ptrs: Vec<(IpAddr, Record)>,
}

impl Compiled {
    fn answer(&self, qtype: RecordType) -> Answer {
        if self.kind == Kind::External {
            let (cname, target) = self.alias.clone().expect("an alias is compiled");
            return match qtype {
                // As CoreDNS: SRV of an external name is not followed.
                RecordType::SRV => Answer::NoData,
                _ => Answer::Alias(cname, target),
            };
        }
        if self.kind == Kind::Headless && self.a.answers.is_empty() && self.aaaa.answers.is_empty()
        {
            // No ready endpoint: the specification's NXDOMAIN.
            return Answer::NxDomain;
        }
        match qtype {
            RecordType::A => Answer::Set(self.a.clone()),
            RecordType::AAAA => Answer::Set(self.aaaa.clone()),
            RecordType::SRV => Answer::Set(self.srv.clone()),
            _ => Answer::NoData,
        }
    }
}

/// A name of the zone from its labels (lower case, without the trailing dot).
fn name(text: &str) -> Option<Name> {
    let mut name = Name::from_ascii(text).ok()?.to_lowercase();
    name.set_fqdn(true);
    Some(name)
}

fn address_record(owner: &Name, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(owner.clone(), TTL, data)
}

/// The name of an address in the reverse zones (`4.3.2.1.in-addr.arpa.`).
pub fn reverse_name(ip: IpAddr) -> Name {
    let text = match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
        }
        IpAddr::V6(v6) => {
            let mut s = String::with_capacity(72);
            for byte in v6.octets().iter().rev() {
                s.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            s.push_str("ip6.arpa.");
            s
        }
    };
    Name::from_ascii(text).expect("a reverse name is valid")
}

/// The address a reverse name names, if it is one, written as [`reverse_name`] writes it.
fn reverse_ip(name: &Name) -> Option<IpAddr> {
    let labels: Vec<&[u8]> = name.iter().collect();
    match labels.as_slice() {
        [d, c, b, a, in_addr, arpa] if *in_addr == b"in-addr" && *arpa == b"arpa" => {
            let octet = |l: &[u8]| -> Option<u8> {
                let s = std::str::from_utf8(l).ok()?;
                let n: u8 = s.parse().ok()?;
                (n.to_string() == s).then_some(n)
            };
            Some(IpAddr::V4(Ipv4Addr::new(
                octet(a)?,
                octet(b)?,
                octet(c)?,
                octet(d)?,
            )))
        }
        [nibbles @ .., ip6, arpa] if nibbles.len() == 32 && *ip6 == b"ip6" && *arpa == b"arpa" => {
            let mut bits: u128 = 0;
            for label in nibbles.iter().rev() {
                let [c] = label else { return None };
                let nibble = (*c as char).to_digit(16)?;
                bits = (bits << 4) | u128::from(nibble);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bits)))
        }
        _ => None,
    }
}

/// The hostname of an endpoint's address that names none (`10-42-0-5`).
fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The address a pod name (`10-42-0-5`, `fd00--5`) stands for, as CoreDNS reads it.
fn undashed(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label
            .replace('-', ".")
            .parse::<Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    } else {
        label
            .replace('-', ":")
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}

/// SRV records of equal priority, each weighted 100/n, as CoreDNS weighs them.
fn weighed(mut srv: Vec<(u16, Name)>, owner: &Name) -> Vec<Record> {
    srv.dedup();
    let weight = u16::try_from(100 / srv.len().max(1)).unwrap_or(1).max(1);
    srv.into_iter()
        .map(|(port, target)| {
            Record::from_rdata(
                owner.clone(),
                TTL,
                RData::SRV(SRV::new(0, weight, port, target)),
            )
        })
        .collect()
}

/// A ready endpoint's address and the hostname it answers to.
struct Ready {
    host: String,
    ip: IpAddr,
}

/// The ready endpoints of a slice (`conditions.ready` unset counts as ready).
fn ready_of(slice: &Value) -> Vec<Ready> {
    if !matches!(str_at(slice, "/addressType"), "IPv4" | "IPv6" | "") {
        return Vec::new();
    }
    let mut out = Vec::new();
    for endpoint in array_at(slice, "/endpoints") {
        if endpoint.pointer("/conditions/ready") == Some(&Value::Bool(false)) {
            continue;
        }
        let hostname = str_at(endpoint, "/hostname").to_ascii_lowercase();
        for address in array_at(endpoint, "/addresses") {
            let Some(ip) = address.as_str().and_then(|a| a.parse::<IpAddr>().ok()) else {
                continue;
            };
            let host = if hostname.is_empty() {
                dashed(ip)
            } else {
                hostname.clone()
            };
            out.push(Ready { host, ip });
        }
    }
    out
}

/// A port of a Service or slice: name, protocol (lower case) and number.
fn ports_of(obj: &Value, at: &str) -> Vec<(String, String, u16)> {
    array_at(obj, at)
        .iter()
        .filter_map(|p| {
            let port = u16::try_from(p["port"].as_u64()?).ok()?;
            let protocol = match str_at(p, "/protocol") {
                "" => "tcp".to_string(),
                proto => proto.to_ascii_lowercase(),
            };
            Some((str_at(p, "/name").to_ascii_lowercase(), protocol, port))
        })
        .collect()
}

/// Compiles a Service and its slices (any order) into its records, under `zone`
/// (`cluster.local`, no trailing dot). `None` for a Service whose names are not valid.
fn compile(zone: &str, svc: &Value, slices: &[&Value]) -> Option<Compiled> {
    let ns = str_at(svc, "/metadata/namespace").to_ascii_lowercase();
    let svc_name = str_at(svc, "/metadata/name").to_ascii_lowercase();
    let owner = name(&format!("{svc_name}.{ns}.svc.{zone}"))?;
    let kind = match (str_at(svc, "/spec/type"), str_at(svc, "/spec/clusterIP")) {
        ("ExternalName", _) => Kind::External,
        (_, "None") => Kind::Headless,
        _ => Kind::ClusterIp,
    };
    let mut compiled = Compiled {
        kind,
        a: Arc::default(),
        aaaa: Arc::default(),
        srv: Arc::default(),
        alias: None,
        ports: Vec::new(),
        hosts: HashMap::new(),
        ptrs: Vec::new(),
    };
    if kind == Kind::External {
        let external = str_at(svc, "/spec/externalName");
        // An address is no name to alias (CoreDNS answers nothing for it).
        let target = match external.parse::<IpAddr>() {
            Ok(_) => None,
            Err(_) => name(external),
        }?;
        let cname = Record::from_rdata(owner, TTL, RData::CNAME(CNAME(target.clone())));
        compiled.alias = Some((RecordSet::of(vec![cname]), target));
        return Some(compiled);
    }

    // Every ready endpoint of every slice, once per address.
    let mut slices: Vec<&Value> = slices.to_vec();
    slices.sort_by_key(|s| str_at(s, "/metadata/name"));
    let mut seen = HashSet::new();
    let mut hosts: BTreeMap<String, (Vec<Record>, Vec<Record>)> = BTreeMap::new();
    let mut endpoint_ips = Vec::new();
    // (port name, protocol) → SRV (port, target) and the targets' addresses.
    type Srv = (Vec<(u16, Name)>, Vec<Record>);
    let mut named: BTreeMap<(String, String), Srv> = BTreeMap::new();
    let mut all: Srv = Default::default();
    for slice in &slices {
        let ready = ready_of(slice);
        let ports = ports_of(slice, "/ports");
        for Ready { host, ip } in &ready {
            let Some(target) = name(&format!("{host}.{owner}")) else {
                continue;
            };
            if !seen.insert((host.clone(), *ip)) {
                continue;
            }
            endpoint_ips.push(*ip);
            let record = address_record(&target, *ip);
            let entry = hosts.entry(host.clone()).or_default();
            match ip {
                IpAddr::V4(_) => entry.0.push(record.clone()),
                IpAddr::V6(_) => entry.1.push(record.clone()),
            }
            compiled.ptrs.push((
                *ip,
                Record::from_rdata(reverse_name(*ip), TTL, RData::PTR(PTR(target.clone()))),
            ));
            if kind == Kind::Headless {
                if !ports.is_empty() {
                    all.1.push(record.clone());
                }
                for (port_name, protocol, port) in &ports {
                    all.0.push((*port, target.clone()));
                    if !port_name.is_empty() {
                        let set = named
                            .entry((port_name.clone(), protocol.clone()))
                            .or_default();
                        set.0.push((*port, target.clone()));
                        set.1.push(record.clone());
                    }
                }
            }
        }
    }
    compiled.hosts = hosts
        .into_iter()
        .map(|(host, (a, aaaa))| {
            let host_entry = Host {
                a: RecordSet::of(a),
                aaaa: RecordSet::of(aaaa),
            };
            (host.into_boxed_str(), host_entry)
        })
        .collect();

    let mut addresses: Vec<IpAddr> = Vec::new();
    if kind == Kind::ClusterIp {
        let mut ips: Vec<&str> = array_at(svc, "/spec/clusterIPs")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if ips.is_empty() {
            ips.push(str_at(svc, "/spec/clusterIP"));
        }
        for ip in ips.iter().filter_map(|ip| ip.parse::<IpAddr>().ok()) {
            if !addresses.contains(&ip) {
                addresses.push(ip);
                compiled.ptrs.push((
                    ip,
                    Record::from_rdata(reverse_name(ip), TTL, RData::PTR(PTR(owner.clone()))),
                ));
            }
        }
        let own: Vec<Record> = addresses
            .iter()
            .map(|ip| address_record(&owner, *ip))
            .collect();
        for (port_name, protocol, port) in ports_of(svc, "/spec/ports") {
            all.0.push((port, owner.clone()));
            if !port_name.is_empty() {
                let set = named.entry((port_name, protocol)).or_default();
                set.0.push((port, owner.clone()));
                set.1 = own.clone();
            }
        }
        all.1 = own;
    } else {
        addresses = endpoint_ips;
    }
    let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = addresses.iter().partition(|ip| ip.is_ipv4());
    compiled.a = RecordSet::of(v4.iter().map(|ip| address_record(&owner, *ip)).collect());
    compiled.aaaa = RecordSet::of(v6.iter().map(|ip| address_record(&owner, *ip)).collect());
    compiled.srv = Arc::new(RecordSet {
        answers: weighed(all.0, &owner),
        additionals: all.1,
    });
    for ((port_name, protocol), (srv, additionals)) in named {
        let Some(port_owner) = name(&format!("_{port_name}._{protocol}.{owner}")) else {
            continue;
        };
        let set = RecordSet {
            answers: weighed(srv, &port_owner),
            additionals,
        };
        compiled.ports.push((
            port_name.into_boxed_str(),
            protocol.into_boxed_str(),
            Arc::new(set),
        ));
    }
    Some(compiled)
}

/// What readers see.
#[derive(Default)]
struct State {
    namespaces: HashSet<Box<str>>,
    /// Namespace → Service name → records.
    services: HashMap<Box<str>, HashMap<Box<str>, Arc<Compiled>>>,
    reverse: HashMap<IpAddr, Arc<RecordSet>>,
    /// The PTR records of each address, by the Service (`ns/name`) that gives them.
    ptr_parts: HashMap<IpAddr, BTreeMap<String, Vec<Record>>>,
}

impl State {
    /// Puts `compiled` (or nothing) in the place of the Service `key`.
    fn replace(&mut self, key: &str, ns: &str, svc: &str, compiled: Option<Compiled>) {
        let old = match &compiled {
            Some(_) => None,
            None => self.services.get_mut(ns).and_then(|m| m.remove(svc)),
        };
        let compiled = compiled.map(Arc::new);
        let old = match &compiled {
            Some(new) => self
                .services
                .entry(ns.into())
                .or_default()
                .insert(svc.into(), new.clone()),
            None => old,
        };
        if self.services.get(ns).is_some_and(HashMap::is_empty) {
            self.services.remove(ns);
        }
        let mut touched: Vec<IpAddr> = Vec::new();
        for (ip, _) in old.iter().flat_map(|o| o.ptrs.iter()) {
            if let Some(parts) = self.ptr_parts.get_mut(ip) {
                parts.remove(key);
            }
            touched.push(*ip);
        }
        for (ip, record) in compiled.iter().flat_map(|c| c.ptrs.iter()) {
            self.ptr_parts
                .entry(*ip)
                .or_default()
                .entry(key.to_string())
                .or_default()
                .push(record.clone());
            touched.push(*ip);
        }
        touched.sort();
        touched.dedup();
        for ip in touched {
            match self.ptr_parts.get(&ip) {
                Some(parts) if !parts.is_empty() => {
                    let records = parts.values().flatten().cloned().collect();
                    self.reverse.insert(ip, RecordSet::of(records));
                }
                _ => {
                    self.ptr_parts.remove(&ip);
                    self.reverse.remove(&ip);
                }
            }
        }
    }
}

/// What the index is compiled from: the Services and their slices as the informers
/// last told them.
#[derive(Default)]
struct Sources {
    services: HashMap<String, Arc<Value>>,
    /// `ns/service` → slice name → slice.
    slices: HashMap<String, BTreeMap<String, Arc<Value>>>,
    /// `ns/slice` → the `ns/service` it was filed under.
    owner: HashMap<String, String>,
}

/// The cluster's names.
pub struct Index {
    /// The cluster domain, without the trailing dot.
    domain: String,
    zone: LowerName,
    soa: Record,
    version: Arc<RecordSet>,
    state: RwLock<State>,
    sources: Mutex<Sources>,
    synced: AtomicBool,
}

/// Why an index cannot be made.
#[derive(Debug, thiserror::Error)]
#[error("the cluster domain {domain:?} is not a valid DNS name: {reason}")]
pub struct BadDomain {
    pub domain: String,
    pub reason: String,
}

impl Index {
    /// An empty index of the cluster domain `domain` (`cluster.local`).
    pub fn new(domain: &str) -> Result<Self, BadDomain> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let bad = |reason: String| BadDomain {
            domain: domain.clone(),
            reason,
        };
        if domain.is_empty() {
            return Err(bad("it is empty".into()));
        }
        let zone = name(&domain).ok_or_else(|| bad("it does not parse".into()))?;
        let soa = Record::from_rdata(
            zone.clone(),
            TTL,
            RData::SOA(SOA::new(
                name(&format!("ns.dns.{domain}")).ok_or_else(|| bad("too long".into()))?,
                name(&format!("hostmaster.{domain}")).ok_or_else(|| bad("too long".into()))?,
                // The serial of a zone that is never transferred: when the server started.
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .and_then(|d| u32::try_from(d.as_secs()).ok())
                    .unwrap_or(1),
                7200,
                1800,
                86400,
                TTL,
            )),
        );
        let version = RecordSet::of(vec![Record::from_rdata(
            name(&format!("dns-version.{domain}")).ok_or_else(|| bad("too long".into()))?,
            VERSION_TTL,
            RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()])),
        )]);
        Ok(Index {
            zone: LowerName::new(&zone),
            domain,
            soa,
            version,
            state: RwLock::default(),
            sources: Mutex::default(),
            synced: AtomicBool::new(false),
        })
    }

    /// The zone's SOA record (the authority of negative answers).
    pub fn soa(&self) -> &Record {
        &self.soa
    }

    pub fn zone(&self) -> &LowerName {
        &self.zone
    }

    /// Whether the index has its first lists; before, names of the zone are SERVFAIL.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Compiles the Service `key` again from the sources and swaps it in.
    fn recompile(&self, sources: &Sources, key: &str) {
        let (ns, svc) = key.split_once('/').unwrap_or(("", key));
        let compiled = sources.services.get(key).and_then(|svc_obj| {
            let slices: Vec<&Value> = sources
                .slices
                .get(key)
                .into_iter()
                .flat_map(|m| m.values().map(AsRef::as_ref))
                .collect();
            compile(&self.domain, svc_obj, &slices)
        });
        let (ns, svc) = (ns.to_ascii_lowercase(), svc.to_ascii_lowercase());
        self.state
            .write()
            .expect("dns index lock")
            .replace(key, &ns, &svc, compiled);
    }

    /// A Service changed.
    pub fn service_changed(&self, change: Change<'_>) {
        let obj = change.object();
        let key = key_of(obj);
        let mut sources = self.sources.lock().expect("dns sources lock");
        match change {
            Change::Deleted(_) => {
                sources.services.remove(&key);
            }
            _ => {
                sources.services.insert(key.clone(), Arc::new(obj.clone()));
            }
        }
        self.recompile(&sources, &key);
    }

    /// An EndpointSlice changed: the Services it belonged to and belongs to now are
    /// compiled again.
    pub fn slice_changed(&self, change: Change<'_>) {
        let obj = change.object();
        let ns = str_at(obj, "/metadata/namespace");
        let slice = str_at(obj, "/metadata/name").to_string();
        let key = format!("{ns}/{slice}");
        let svc = obj
            .pointer(&format!(
                "/metadata/labels/{}",
                SERVICE_NAME.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let now = match change {
            Change::Deleted(_) => None,
            _ => svc.map(|s| format!("{ns}/{s}")),
        };
        let mut sources = self.sources.lock().expect("dns sources lock");
        let before = sources.owner.remove(&key);
        if let Some(before) = &before
            && let Some(m) = sources.slices.get_mut(before)
        {
            m.remove(&slice);
            if m.is_empty() {
                sources.slices.remove(before);
            }
        }
        if let Some(now) = &now {
            sources.owner.insert(key.clone(), now.clone());
            sources
                .slices
                .entry(now.clone())
                .or_default()
                .insert(slice, Arc::new(obj.clone()));
        }
        let mut services: Vec<&String> = [&before, &now].into_iter().flatten().collect();
        services.dedup();
        for svc in services {
            self.recompile(&sources, svc);
        }
    }

    /// A Namespace changed.
    pub fn namespace_changed(&self, change: Change<'_>) {
        let name = str_at(change.object(), "/metadata/name").to_ascii_lowercase();
        let mut state = self.state.write().expect("dns index lock");
        match change {
            Change::Deleted(_) => state.namespaces.remove(name.as_str()),
            _ => state.namespaces.insert(name.into_boxed_str()),
        };
    }

    /// Answers `qtype` questions about `qname`.
    pub fn lookup(&self, qname: &LowerName, qtype: RecordType) -> Answer {
        if !self.zone.zone_of(qname) {
            return self.reverse(qname, qtype);
        }
        if !self.is_synced() {
            return Answer::NotReady;
        }
        let below = usize::from(qname.num_labels()) - usize::from(self.zone.num_labels());
        if below > MAX_LABELS {
            return Answer::NxDomain;
        }
        let mut labels: [&str; MAX_LABELS] = [""; MAX_LABELS];
        for (at, label) in qname.iter().take(below).enumerate() {
            match std::str::from_utf8(label) {
                Ok(l) => labels[at] = l,
                Err(_) => return Answer::NxDomain,
            }
        }
        let labels = &labels[..below];
        match labels {
            [] => match qtype {
                RecordType::SOA => Answer::Made(vec![self.soa.clone()]),
                _ => Answer::NoData,
            },
            ["dns-version"] => match qtype {
                RecordType::TXT => Answer::Set(self.version.clone()),
                _ => Answer::NoData,
            },
            [.., "svc"] => self.service_name(&labels[..below - 1], qtype),
            [.., "pod"] => self.pod_name(qname, &labels[..below - 1], qtype),
            _ => Answer::NxDomain,
        }
    }

    /// `[[_port._proto.|endpoint.]service.]namespace` below `svc.<zone>`.
    fn service_name(&self, labels: &[&str], qtype: RecordType) -> Answer {
        let Some((ns, rest)) = labels.split_last() else {
            return Answer::NoData;
        };
        let state = self.state.read().expect("dns index lock");
        if !state.namespaces.contains(*ns) {
            return Answer::NxDomain;
        }
        let Some((svc, rest)) = rest.split_last() else {
            return Answer::NoData;
        };
        let Some(compiled) = state.services.get(*ns).and_then(|m| m.get(*svc)) else {
            return Answer::NxDomain;
        };
        match rest {
            [] => compiled.answer(qtype),
            [endpoint] if compiled.kind != Kind::External => {
                let Some(host) = compiled.hosts.get(*endpoint) else {
                    return Answer::NxDomain;
                };
                match qtype {
                    RecordType::A => Answer::Set(host.a.clone()),
                    RecordType::AAAA => Answer::Set(host.aaaa.clone()),
                    _ => Answer::NoData,
                }
            }
            [port, protocol] if compiled.kind != Kind::External => {
                let (port, protocol) = (
                    port.strip_prefix('_').unwrap_or(port),
                    protocol.strip_prefix('_').unwrap_or(protocol),
                );
                let found = compiled
                    .ports
                    .iter()
                    .find(|(p, proto, _)| **p == *port && **proto == *protocol);
                match (found, qtype) {
                    (None, _) => Answer::NxDomain,
                    (Some((_, _, set)), RecordType::SRV) => Answer::Set(set.clone()),
                    (Some(_), _) => Answer::NoData,
                }
            }
            _ => Answer::NxDomain,
        }
    }

    /// `[a-b-c-d.]namespace` below `pod.<zone>`.
    fn pod_name(&self, qname: &LowerName, labels: &[&str], qtype: RecordType) -> Answer {
        let Some((ns, rest)) = labels.split_last() else {
            return Answer::NoData;
        };
        if !self
            .state
            .read()
            .expect("dns index lock")
            .namespaces
            .contains(*ns)
        {
            return Answer::NxDomain;
        }
        let ip = match rest {
            [] => return Answer::NoData,
            [pod] => match undashed(pod) {
                Some(ip) => ip,
                None => return Answer::NxDomain,
            },
            _ => return Answer::NxDomain,
        };
        match (ip, qtype) {
            (IpAddr::V4(_), RecordType::A) | (IpAddr::V6(_), RecordType::AAAA) => {
                Answer::Made(vec![address_record(qname, ip)])
            }
            _ => Answer::NoData,
        }
    }

    /// A PTR question of the reverse zones for an address the index knows; anything
    /// else is for the upstream servers.
    fn reverse(&self, qname: &LowerName, qtype: RecordType) -> Answer {
        let Some(ip) = reverse_ip(qname) else {
            return Answer::Elsewhere;
        };
        let state = self.state.read().expect("dns index lock");
        match (state.reverse.get(&ip), qtype) {
            (None, _) => Answer::Elsewhere,
            (Some(set), RecordType::PTR) => Answer::Set(set.clone()),
            (Some(_), _) => Answer::NoData,
        }
    }

    /// How many Services the index holds.
    pub fn services(&self) -> usize {
        let state = self.state.read().expect("dns index lock");
        state.services.values().map(HashMap::len).sum()
    }

    /// Whether `qname` is of the zone (or its name).
    pub fn is_zone_name(&self, qname: &LowerName) -> bool {
        self.zone.zone_of(qname)
    }

    /// The name as hickory parses it, for callers that hold text.
    pub fn parse(text: &str) -> Option<LowerName> {
        LowerName::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests;
