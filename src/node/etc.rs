//! A pod's files in `/etc` that the agent writes for a pod with a network of its own: the
//! kubelet's managed hosts file (localhost, the pod's own name at each of its addresses,
//! with its subdomain's name when it has one, and its `hostAliases`) and its resolver
//! settings.

use serde_json::Value;

use crate::types::json::str_at;

/// The pod's `/etc/hosts`, as the kubelet writes it: a line for each of `pod_ips`.
pub(super) fn hosts(pod: &Value, pod_ips: &[String], cluster_domain: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    let name = match str_at(pod, "/spec/hostname") {
        "" => str_at(pod, "/metadata/name"),
        h => h,
    };
    for pod_ip in pod_ips.iter().filter(|ip| !ip.is_empty()) {
        match str_at(pod, "/spec/subdomain") {
            "" => out.push_str(&format!("{pod_ip}\t{name}\n")),
            sub => {
                let ns = str_at(pod, "/metadata/namespace");
                out.push_str(&format!(
                    "{pod_ip}\t{name}.{sub}.{ns}.svc.{cluster_domain}\t{name}\n"
                ));
            }
        }
    }
    let aliases = pod["spec"]["hostAliases"].as_array();
    if aliases.is_some_and(|a| !a.is_empty()) {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases.into_iter().flatten() {
            let names: Vec<&str> = a["hostnames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            out.push_str(&format!("{}\t{}\n", str_at(a, "/ip"), names.join("\t")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_hosts_file_names_the_pod_its_subdomain_and_aliases() {
        let pod = json!({"metadata": {"name": "web-0", "namespace": "shop"},
                         "spec": {"hostname": "web-0", "subdomain": "web",
                                  "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db", "db.local"]}]}});
        let text = hosts(&pod, &["10.42.0.9".into()], "cluster.local");
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            text.contains("10.42.0.9\tweb-0.web.shop.svc.cluster.local\tweb-0\n"),
            "{text}"
        );
        assert!(
            text.ends_with("# Entries added by HostAliases.\n10.1.2.3\tdb\tdb.local\n"),
            "{text}"
        );
        let plain = json!({"metadata": {"name": "a", "namespace": "d"}, "spec": {}});
        assert!(hosts(&plain, &["10.42.0.2".into()], "cluster.local").ends_with("10.42.0.2\ta\n"));
    }

    #[test]
    fn a_dual_stack_pod_has_a_line_for_each_address() {
        let pod = json!({"metadata": {"name": "web-0", "namespace": "shop"},
                         "spec": {"hostname": "web-0", "subdomain": "web"}});
        let text = hosts(
            &pod,
            &["10.42.0.9".into(), "fd42::9".into()],
            "cluster.local",
        );
        assert!(
            text.ends_with(
                "10.42.0.9\tweb-0.web.shop.svc.cluster.local\tweb-0\n\
                 fd42::9\tweb-0.web.shop.svc.cluster.local\tweb-0\n"
            ),
            "{text}"
        );
    }
}
