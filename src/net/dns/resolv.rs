//! A pod's `/etc/resolv.conf`, as the kubelet forms it (`pkg/kubelet/network/dns`):
//! the base the pod's `dnsPolicy` picks (the cluster's DNS, the host's resolv.conf, or
//! nothing), its `dnsConfig` merged in, and the kubelet's limits applied (3 nameservers,
//! 32 search domains of at most 253 characters, 2048 characters of search line). Written
//! as the container runtimes write it: `search`, `nameserver` lines, `options`.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use crate::types::json::{array_at, str_at};

/// The options of every pod that uses the cluster's DNS.
pub const DEFAULT_OPTIONS: &[&str] = &["ndots:5"];
/// The most nameservers a resolver reads (`MaxDNSNameservers`).
pub const MAX_NAMESERVERS: usize = 3;
/// The most search domains (`MaxDNSSearchPathsExpanded`).
pub const MAX_SEARCHES: usize = 32;
/// The longest search line, its domains joined by spaces (`MaxDNSSearchListCharsExpanded`).
pub const MAX_SEARCH_CHARS: usize = 2048;
/// The longest search domain: glibc aborts on longer ones (`DNS1123SubdomainMaxLength`).
pub const MAX_SEARCH_DOMAIN: usize = 253;

/// What a resolv.conf says, as the kubelet parses it: `nameserver` lines accumulate, the
/// last `search` line and the last `options` line win; a search domain's trailing dot
/// is dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parses the text of a resolv.conf file.
    pub fn parse(text: &str) -> Self {
        let mut out = ResolvConf::default();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => out.nameservers.extend(fields.next().map(str::to_string)),
                Some("search") => {
                    out.searches = fields
                        .map(|s| s.trim_end_matches('.').to_string())
                        .collect()
                }
                Some("options") => out.options = fields.map(str::to_string).collect(),
                _ => {}
            }
        }
        out
    }

    /// The nameservers as socket addresses on port 53; those that are no IP address (a
    /// link-local one with a zone, say) are left out.
    pub fn servers(&self) -> Vec<SocketAddr> {
        self.nameservers
            .iter()
            .filter_map(|s| s.parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, 53))
            .collect()
    }

    /// The file's text: `search`, then a `nameserver` line each, then `options`, as
    /// containerd and CRI-O write it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            let _ = writeln!(out, "search {}", self.searches.join(" "));
        }
        for ns in &self.nameservers {
            let _ = writeln!(out, "nameserver {ns}");
        }
        if !self.options.is_empty() {
            let _ = writeln!(out, "options {}", self.options.join(" "));
        }
        out
    }
}

/// What the cluster's DNS is to its pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDns {
    /// The DNS Service's cluster IP (`kube-system/kube-dns`); empty: there is no cluster
    /// DNS, and pods that ask for it get the host's (with a warning).
    pub servers: Vec<IpAddr>,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
}

impl From<&crate::net::Config> for ClusterDns {
    fn from(c: &crate::net::Config) -> Self {
        ClusterDns {
            servers: vec![IpAddr::V4(c.dns_service_ip)],
            domain: c.cluster_domain.clone(),
        }
    }
}

/// A pod's DNS settings and what the kubelet would warn of while forming them (its
/// `DNSConfigForming` and `MissingClusterDNS` events).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDns {
    pub conf: ResolvConf,
    pub warnings: Vec<String>,
}

/// How a pod resolves names, from its `dnsPolicy` and `hostNetwork`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Cluster,
    Host,
    Nothing,
}

fn base_of(pod: &Value) -> Base {
    let host_network = pod.pointer("/spec/hostNetwork") == Some(&Value::Bool(true));
    match str_at(pod, "/spec/dnsPolicy") {
        "None" => Base::Nothing,
        "ClusterFirstWithHostNet" => Base::Cluster,
        "Default" => Base::Host,
        // A pod on the host's network that asks for ClusterFirst gets the host's, as
        // the kubelet gives it (ClusterFirstWithHostNet is how to ask for the cluster's).
        _ if host_network => Base::Host,
        // ClusterFirst, the API's default (and what the kubelet falls back to).
        _ => Base::Cluster,
    }
}

/// Appends what is not there yet, in order.
fn extend_unique(into: &mut Vec<String>, more: impl IntoIterator<Item = String>) {
    for s in more {
        if !into.contains(&s) {
            into.push(s);
        }
    }
}

/// The options of `base` with those of a `dnsConfig` set over them: a name given again
/// takes the new value in its place; new names follow.
fn merge_options(base: &mut Vec<String>, given: &[Value]) {
    for option in given {
        let name = str_at(option, "/name");
        if name.is_empty() {
            continue;
        }
        let line = match option.get("value").and_then(Value::as_str) {
            Some(v) if !v.is_empty() => format!("{name}:{v}"),
            _ => name.to_string(),
        };
        let at = base.iter().position(|o| o.split(':').next() == Some(name));
        match at {
            Some(i) => base[i] = line,
            None => base.push(line),
        }
    }
}

/// The kubelet's limits on search domains (`formDNSSearchFitsLimits`).
fn fit_searches(searches: &mut Vec<String>, warnings: &mut Vec<String>) {
    let mut cut = false;
    if searches.len() > MAX_SEARCHES {
        searches.truncate(MAX_SEARCHES);
        cut = true;
    }
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_DOMAIN);
    cut |= searches.len() != before;
    let line = |s: &[String]| s.iter().map(String::len).sum::<usize>() + s.len().saturating_sub(1);
    while line(searches) > MAX_SEARCH_CHARS {
        searches.pop();
        cut = true;
    }
    if cut {
        warnings.push(format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            searches.join(" ")
        ));
    }
}

/// A pod's DNS settings, as the kubelet forms them from its `dnsPolicy`, `hostNetwork`
/// and `dnsConfig`, the host's resolv.conf (`host`, the node's `--resolv-conf`) and the
/// cluster's DNS.
pub fn pod_dns(pod: &Value, host: &ResolvConf, cluster: &ClusterDns) -> PodDns {
    let mut warnings = Vec::new();
    let mut conf = match base_of(pod) {
        Base::Nothing => ResolvConf::default(),
        Base::Cluster if !cluster.servers.is_empty() => {
            let ns = str_at(pod, "/metadata/namespace");
            let mut searches = Vec::new();
            if !cluster.domain.is_empty() {
                searches = vec![
                    format!("{ns}.svc.{}", cluster.domain),
                    format!("svc.{}", cluster.domain),
                    cluster.domain.clone(),
                ];
            }
            extend_unique(&mut searches, host.searches.iter().cloned());
            ResolvConf {
                nameservers: cluster.servers.iter().map(IpAddr::to_string).collect(),
                searches,
                options: DEFAULT_OPTIONS.iter().map(|o| o.to_string()).collect(),
            }
        }
        Base::Cluster => {
            warnings.push(
                "the node has no cluster DNS configured and cannot give the pod the \"ClusterFirst\" policy; falling back to \"Default\"".to_string(),
            );
            host.clone()
        }
        Base::Host => host.clone(),
    };
    if let Some(config) = pod.pointer("/spec/dnsConfig").filter(|c| c.is_object()) {
        let strings = |at: &str| {
            array_at(config, at)
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let mut nameservers = Vec::new();
        extend_unique(&mut nameservers, conf.nameservers);
        extend_unique(&mut nameservers, strings("/nameservers"));
        conf.nameservers = nameservers;
        let mut searches = Vec::new();
        extend_unique(&mut searches, conf.searches);
        extend_unique(&mut searches, strings("/searches"));
        conf.searches = searches;
        merge_options(&mut conf.options, array_at(config, "/options"));
    }
    if conf.nameservers.len() > MAX_NAMESERVERS {
        conf.nameservers.truncate(MAX_NAMESERVERS);
        warnings.push(format!(
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
            conf.nameservers.join(" ")
        ));
    }
    fit_searches(&mut conf.searches, &mut warnings);
    PodDns { conf, warnings }
}

/// A pod's `/etc/resolv.conf`: [`pod_dns`], written out.
pub fn resolv_conf(pod: &Value, host: &ResolvConf, cluster: &ClusterDns) -> String {
    pod_dns(pod, host, cluster).conf.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOST: &str = "# made by the network manager\n\
        nameserver 192.0.2.53\n\
        nameserver 192.0.2.54\n\
        search old.example\n\
        search lan corp.example.\n\
        options timeout:2 attempts:3\n\
        domain ignored.example\n";

    fn cluster() -> ClusterDns {
        ClusterDns::from(&crate::net::Config::default())
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": spec})
    }

    fn conf(spec: Value) -> String {
        resolv_conf(&pod(spec), &ResolvConf::parse(HOST), &cluster())
    }

    #[test]
    fn the_hosts_file_is_read_as_the_kubelet_reads_it() {
        let host = ResolvConf::parse(HOST);
        assert_eq!(host.nameservers, ["192.0.2.53", "192.0.2.54"]);
        assert_eq!(host.searches, ["lan", "corp.example"]);
        assert_eq!(host.options, ["timeout:2", "attempts:3"]);
        assert_eq!(
            host.servers(),
            [
                "192.0.2.53:53".parse().unwrap(),
                "192.0.2.54:53".parse().unwrap()
            ]
        );
        let odd = ResolvConf::parse("nameserver fe80::1%eth0\nnameserver ::1\nnameserver\n");
        assert_eq!(odd.servers(), ["[::1]:53".parse().unwrap()]);
    }

    #[test]
    fn cluster_first_uses_the_cluster_dns_and_the_namespaces_search_path() {
        let want = "search shop.svc.cluster.local svc.cluster.local cluster.local lan corp.example\n\
                    nameserver 10.96.0.10\n\
                    options ndots:5\n";
        assert_eq!(conf(json!({"dnsPolicy": "ClusterFirst"})), want);
        // The API's default policy is ClusterFirst.
        assert_eq!(conf(json!({})), want);
        // Another cluster domain.
        let other = ClusterDns {
            servers: vec!["10.43.0.10".parse().unwrap()],
            domain: "edge.internal".into(),
        };
        assert_eq!(
            resolv_conf(&pod(json!({})), &ResolvConf::default(), &other),
            "search shop.svc.edge.internal svc.edge.internal edge.internal\n\
             nameserver 10.43.0.10\n\
             options ndots:5\n"
        );
    }

    #[test]
    fn host_network_pods_get_the_hosts_unless_they_ask_for_the_cluster() {
        let host = "search lan corp.example\n\
                    nameserver 192.0.2.53\n\
                    nameserver 192.0.2.54\n\
                    options timeout:2 attempts:3\n";
        assert_eq!(
            conf(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirst"})),
            host
        );
        assert_eq!(
            conf(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"})),
            "search shop.svc.cluster.local svc.cluster.local cluster.local lan corp.example\n\
             nameserver 10.96.0.10\n\
             options ndots:5\n"
        );
        // Without the host's network, ClusterFirstWithHostNet is ClusterFirst.
        assert_eq!(
            conf(json!({"dnsPolicy": "ClusterFirstWithHostNet"})),
            conf(json!({"dnsPolicy": "ClusterFirst"}))
        );
    }

    #[test]
    fn default_is_the_hosts_resolv_conf() {
        assert_eq!(
            conf(json!({"dnsPolicy": "Default"})),
            "search lan corp.example\n\
             nameserver 192.0.2.53\n\
             nameserver 192.0.2.54\n\
             options timeout:2 attempts:3\n"
        );
    }

    #[test]
    fn none_is_only_the_pods_dns_config() {
        assert_eq!(conf(json!({"dnsPolicy": "None"})), "");
        assert_eq!(
            conf(json!({"dnsPolicy": "None", "dnsConfig": {
                "nameservers": ["1.2.3.4"],
                "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
            }})),
            "search ns1.svc.cluster-domain.example my.dns.search.suffix\n\
             nameserver 1.2.3.4\n\
             options ndots:2 edns0\n"
        );
    }

    #[test]
    fn dns_config_is_merged_into_the_policys_settings() {
        assert_eq!(
            conf(json!({"dnsPolicy": "ClusterFirst", "dnsConfig": {
                "nameservers": ["10.96.0.10", "192.0.2.1"],
                "searches": ["lan", "extra.example"],
                "options": [{"name": "ndots", "value": "1"}, {"name": "single-request-reopen"},
                            {"name": "timeout", "value": ""}],
            }})),
            "search shop.svc.cluster.local svc.cluster.local cluster.local lan corp.example extra.example\n\
             nameserver 10.96.0.10\n\
             nameserver 192.0.2.1\n\
             options ndots:1 single-request-reopen timeout\n"
        );
        assert_eq!(
            conf(json!({"dnsPolicy": "Default", "dnsConfig": {
                "options": [{"name": "attempts", "value": "5"}],
            }})),
            "search lan corp.example\n\
             nameserver 192.0.2.53\n\
             nameserver 192.0.2.54\n\
             options timeout:2 attempts:5\n"
        );
    }

    #[test]
    fn limits_are_applied_as_the_kubelet_applies_them() {
        let got = pod_dns(
            &pod(json!({"dnsPolicy": "Default", "dnsConfig": {
                "nameservers": ["192.0.2.1", "192.0.2.2"],
            }})),
            &ResolvConf::parse(HOST),
            &cluster(),
        );
        assert_eq!(
            got.conf.nameservers,
            ["192.0.2.53", "192.0.2.54", "192.0.2.1"]
        );
        assert_eq!(got.warnings.len(), 1);
        assert!(got.warnings[0].contains("Nameserver limits"));

        // 40 search domains: 32 are kept, the cluster's first.
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let got = pod_dns(
            &pod(json!({"dnsConfig": {"searches": many}})),
            &ResolvConf::default(),
            &cluster(),
        );
        assert_eq!(got.conf.searches.len(), MAX_SEARCHES);
        assert_eq!(got.conf.searches[0], "shop.svc.cluster.local");
        assert_eq!(got.conf.searches[31], "d28.example");
        assert!(got.warnings[0].contains("Search Line limits"));

        // Too long a domain is dropped; too long a line loses its last domains.
        let long = format!("{}.example", "a".repeat(250));
        let wide: Vec<String> = (0..20)
            .map(|i| format!("{i:02}{}", "b".repeat(120)))
            .collect();
        let mut searches = vec![long];
        searches.extend(wide);
        let got = pod_dns(
            &pod(json!({"dnsPolicy": "None", "dnsConfig": {"searches": searches}})),
            &ResolvConf::default(),
            &cluster(),
        );
        assert!(got.conf.searches.iter().all(|s| s.len() == 122));
        assert!(got.conf.searches.join(" ").len() <= MAX_SEARCH_CHARS);
        assert_eq!(got.conf.searches.len(), 16);
        assert_eq!(got.warnings.len(), 1);
    }

    #[test]
    fn without_a_cluster_dns_cluster_first_falls_back_to_the_hosts() {
        let none = ClusterDns {
            servers: vec![],
            domain: "cluster.local".into(),
        };
        let got = pod_dns(&pod(json!({})), &ResolvConf::parse(HOST), &none);
        assert_eq!(got.conf, ResolvConf::parse(HOST));
        assert!(got.warnings[0].contains("no cluster DNS"));
    }
}
