//! The parts of a pod spec that pods and pod templates share (containers with their
//! probes, env and mounts; volumes; topology spread) and the pod template workloads show.

use std::fmt::Write as _;

use serde_json::Value;

use super::resources::{Amount, resource_list, resource_texts};
use super::{
    Clock, Out, annotations_multiline, flag, go_slice, go_sort, int, int_or_string,
    labels_multiline_simple, list, opt_text, plain, text, tolerations_multiline,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::{Selector, map_at};

/// Resolves a `fieldRef` env var from the pod (only metadata fields resolve, as in
/// kubectl's `fieldpath.ExtractFieldPathAsString`).
fn field_ref_value(pod: &Value, path: &str) -> String {
    let quoted_map = |pointer: &str| {
        map_at(pod, pointer)
            .iter()
            .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match path {
        "metadata.name" => text(pod, "/metadata/name").to_string(),
        "metadata.namespace" => text(pod, "/metadata/namespace").to_string(),
        "metadata.uid" => text(pod, "/metadata/uid").to_string(),
        "metadata.labels" => quoted_map("/metadata/labels"),
        "metadata.annotations" => quoted_map("/metadata/annotations"),
        _ => {
            let subscript = |prefix: &str| {
                path.strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix("['"))
                    .and_then(|r| r.strip_suffix("']"))
                    .map(str::to_string)
            };
            if let Some(key) = subscript("metadata.labels") {
                map_at(pod, "/metadata/labels")
                    .get(&key)
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                map_at(pod, "/metadata/annotations")
                    .get(&key)
                    .cloned()
                    .unwrap_or_default()
            } else {
                String::new()
            }
        }
    }
}

/// `resourcehelper.ExtractContainerResourceValue` for `resourceFieldRef` env vars.
fn resource_field_value(container: &Value, field: &Value) -> String {
    let resource = text(field, "/resource");
    let divisor = field
        .get("divisor")
        .and_then(Amount::parse)
        .filter(|d| d.milli() != 0);
    let (list_name, name) = match resource.split_once('.') {
        Some((l, n)) => (l, n),
        None => return String::new(),
    };
    let pointer = match list_name {
        "limits" => "/resources/limits",
        "requests" => "/resources/requests",
        _ => return String::new(),
    };
    let q = resource_list(container, pointer)
        .get(name)
        .copied()
        .unwrap_or(Amount::ZERO);
    let ceil_div = |n: i128, d: i128| {
        if d == 0 { 0 } else { (n + d - 1).div_euclid(d) }
    };
    match name {
        "cpu" => {
            let d = divisor.map(Amount::milli).unwrap_or(1000);
            ceil_div(q.milli(), d).to_string()
        }
        _ => {
            let d = divisor.map(Amount::units).unwrap_or(1);
            ceil_div(q.units(), d).to_string()
        }
    }
}

/// `DescribeProbe`, as kubectl 1.37 prints it:
/// `exec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3`.
/// Like every field here, unset numbers print as Go's zero values: the server defaults
/// them.
fn describe_probe(probe: &Value) -> String {
    let attrs = format!(
        "delay={}s timeout={}s period={}s successThreshold={} failureThreshold={}",
        int(probe, "/initialDelaySeconds").unwrap_or(0),
        int(probe, "/timeoutSeconds").unwrap_or(0),
        int(probe, "/periodSeconds").unwrap_or(0),
        int(probe, "/successThreshold").unwrap_or(0),
        int(probe, "/failureThreshold").unwrap_or(0),
    );
    if let Some(exec) = probe.get("exec").filter(|v| v.is_object()) {
        return format!("exec {} {attrs}", go_slice(list(exec, "/command")));
    }
    if let Some(get) = probe.get("httpGet").filter(|v| v.is_object()) {
        let scheme = text(get, "/scheme").to_lowercase();
        let host = text(get, "/host");
        let port = get.get("port").map(int_or_string).unwrap_or_default();
        let host = if port.is_empty() {
            host.to_string()
        } else if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let path = text(get, "/path");
        // net/url's String() for scheme, host and path.
        let mut url = String::new();
        if !scheme.is_empty() {
            let _ = write!(url, "{scheme}:");
        }
        if (!scheme.is_empty() || !host.is_empty()) && (!host.is_empty() || !path.is_empty()) {
            let _ = write!(url, "//{host}");
        }
        if !path.is_empty() && !path.starts_with('/') && !host.is_empty() {
            url.push('/');
        }
        url.push_str(path);
        return format!("http-get {url} {attrs}");
    }
    if let Some(tcp) = probe.get("tcpSocket").filter(|v| v.is_object()) {
        let port = tcp.get("port").map(int_or_string).unwrap_or_default();
        return format!("tcp-socket {}:{port} {attrs}", text(tcp, "/host"));
    }
    if let Some(grpc) = probe.get("grpc").filter(|v| v.is_object()) {
        return format!(
            "grpc <pod>:{} {} {attrs}",
            int(grpc, "/port").unwrap_or(0),
            text(grpc, "/service")
        );
    }
    format!("unknown {attrs}")
}

fn describe_state(out: &mut Out, name: &str, state: &Value, clock: &Clock) {
    if let Some(running) = state.get("running").filter(|v| v.is_object()) {
        out.w(2, &format!("{name}:\tRunning\n"));
        out.w(
            3,
            &format!(
                "Started:\t{}\n",
                clock.rfc1123z(opt_text(running, "/startedAt"))
            ),
        );
    } else if let Some(waiting) = state.get("waiting").filter(|v| v.is_object()) {
        out.w(2, &format!("{name}:\tWaiting\n"));
        let reason = text(waiting, "/reason");
        if !reason.is_empty() {
            out.w(3, &format!("Reason:\t{reason}\n"));
        }
    } else if let Some(t) = state.get("terminated").filter(|v| v.is_object()) {
        out.w(2, &format!("{name}:\tTerminated\n"));
        let reason = text(t, "/reason");
        if !reason.is_empty() {
            out.w(3, &format!("Reason:\t{reason}\n"));
        }
        let message = text(t, "/message");
        if !message.is_empty() {
            out.w(3, &format!("Message:\t{message}\n"));
        }
        out.w(
            3,
            &format!("Exit Code:\t{}\n", int(t, "/exitCode").unwrap_or(0)),
        );
        if let Some(signal) = int(t, "/signal").filter(|s| *s > 0) {
            out.w(3, &format!("Signal:\t{signal}\n"));
        }
        out.w(
            3,
            &format!("Started:\t{}\n", clock.rfc1123z(opt_text(t, "/startedAt"))),
        );
        out.w(
            3,
            &format!(
                "Finished:\t{}\n",
                clock.rfc1123z(opt_text(t, "/finishedAt"))
            ),
        );
    } else {
        out.w(2, &format!("{name}:\tWaiting\n"));
    }
}

pub(super) fn describe_resources(out: &mut Out, resources: &Value, level: usize) {
    let limits = resource_texts(resources, "/limits");
    if !limits.is_empty() {
        out.w(level, "Limits:\n");
    }
    for (name, q) in &limits {
        out.w(level + 1, &format!("{name}:\t{q}\n"));
    }
    let requests = resource_texts(resources, "/requests");
    if !requests.is_empty() {
        out.w(level, "Requests:\n");
    }
    for (name, q) in &requests {
        out.w(level + 1, &format!("{name}:\t{q}\n"));
    }
}

/// Where env vars with a `fieldRef` get their values: the pod, or nothing for templates.
type Resolver<'a> = Option<&'a Value>;

/// `describeContainers`.
pub(super) fn describe_containers(
    out: &mut Out,
    label: &str,
    containers: &[Value],
    statuses: &[Value],
    resolver: Resolver<'_>,
    space: &str,
    clock: &Clock,
) {
    let none = if containers.is_empty() { " <none>" } else { "" };
    out.w(0, &format!("{space}{label}:{none}\n"));
    let name_indent = if space.is_empty() { "" } else { " " };
    for c in containers {
        let name = text(c, "/name");
        let status = statuses.iter().find(|s| text(s, "/name") == name);
        out.w(1, &format!("{name_indent}{name}:\n"));
        if let Some(s) = status {
            out.w(2, &format!("Container ID:\t{}\n", text(s, "/containerID")));
        }
        out.w(2, &format!("Image:\t{}\n", text(c, "/image")));
        if let Some(s) = status {
            out.w(2, &format!("Image ID:\t{}\n", text(s, "/imageID")));
        }
        let ports = list(c, "/ports");
        let protocol = |p: &Value| text(p, "/protocol").to_string();
        let port_list: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}", int(p, "/containerPort").unwrap_or(0), protocol(p)))
            .collect();
        let host_list: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}", int(p, "/hostPort").unwrap_or(0), protocol(p)))
            .collect();
        let (ports, host_ports) = (port_list.join(", "), host_list.join(", "));
        let or_none = |s: &str| {
            if s.is_empty() {
                "<none>".to_string()
            } else {
                s.to_string()
            }
        };
        if ports.contains(',') {
            out.w(2, &format!("Ports:\t{ports}\n"));
        } else {
            out.w(2, &format!("Port:\t{}\n", or_none(&ports)));
        }
        if host_ports.contains(',') {
            out.w(2, &format!("Host Ports:\t{host_ports}\n"));
        } else {
            out.w(2, &format!("Host Port:\t{}\n", or_none(&host_ports)));
        }
        if let Some(kind) = opt_text(c, "/securityContext/seccompProfile/type") {
            out.w(2, &format!("SeccompProfile:\t{kind}\n"));
            if kind == "Localhost" {
                out.w(
                    3,
                    &format!(
                        "LocalhostProfile:\t{}\n",
                        text(c, "/securityContext/seccompProfile/localhostProfile")
                    ),
                );
            }
        }
        for (field, title) in [("/command", "Command"), ("/args", "Args")] {
            let items = list(c, field);
            if !items.is_empty() {
                out.w(2, &format!("{title}:\n"));
                for item in items {
                    for line in plain(item).split('\n') {
                        out.w(3, &format!("{line}\n"));
                    }
                }
            }
        }
        if let Some(s) = status {
            describe_state(out, "State", &s["state"], clock);
            if s.pointer("/lastState/terminated")
                .is_some_and(Value::is_object)
            {
                describe_state(out, "Last State", &s["lastState"], clock);
            }
            let ready = if flag(s, "/ready") { "True" } else { "False" };
            out.w(2, &format!("Ready:\t{ready}\n"));
            out.w(
                2,
                &format!("Restart Count:\t{}\n", int(s, "/restartCount").unwrap_or(0)),
            );
        }
        describe_resources(out, &c["resources"], 2);
        for (field, title) in [
            ("livenessProbe", "Liveness"),
            ("readinessProbe", "Readiness"),
            ("startupProbe", "Startup"),
        ] {
            if let Some(probe) = c.get(field).filter(|p| p.is_object()) {
                out.w(2, &format!("{title}:\t{}\n", describe_probe(probe)));
            }
        }
        let env_from = list(c, "/envFrom");
        if !env_from.is_empty() {
            out.w(2, "Environment Variables from:\n");
            for e in env_from {
                let (from, r) = if e.get("configMapRef").is_some_and(Value::is_object) {
                    ("ConfigMap", &e["configMapRef"])
                } else if e.get("secretRef").is_some_and(Value::is_object) {
                    ("Secret", &e["secretRef"])
                } else {
                    ("", &Value::Null)
                };
                let optional = flag(r, "/optional");
                let prefix = text(e, "/prefix");
                let name = text(r, "/name");
                if prefix.is_empty() {
                    out.w(3, &format!("{name}\t{from}\tOptional: {optional}\n"));
                } else {
                    out.w(
                        3,
                        &format!("{name}\t{from} with prefix '{prefix}'\tOptional: {optional}\n"),
                    );
                }
            }
        }
        let env = list(c, "/env");
        let none = if env.is_empty() { "\t<none>" } else { "" };
        out.w(2, &format!("Environment:{none}\n"));
        for e in env {
            let name = text(e, "/name");
            let from = &e["valueFrom"];
            if !from.is_object() {
                for (i, line) in text(e, "/value").split('\n').enumerate() {
                    if i == 0 {
                        out.w(3, &format!("{name}:\t{line}\n"));
                    } else {
                        out.w(3, &format!("\t{line}\n"));
                    }
                }
                continue;
            }
            if let Some(f) = from.get("fieldRef").filter(|v| v.is_object()) {
                let path = text(f, "/fieldPath");
                let value = resolver
                    .map(|pod| field_ref_value(pod, path))
                    .unwrap_or_default();
                out.w(
                    3,
                    &format!("{name}:\t{value} ({}:{path})\n", text(f, "/apiVersion")),
                );
            } else if let Some(f) = from.get("resourceFieldRef").filter(|v| v.is_object()) {
                let resource = text(f, "/resource");
                let mut value = resource_field_value(c, f);
                if value == "0" && (resource == "limits.cpu" || resource == "limits.memory") {
                    value = "node allocatable".to_string();
                }
                out.w(3, &format!("{name}:\t{value} ({resource})\n"));
            } else if let Some(f) = from.get("secretKeyRef").filter(|v| v.is_object()) {
                out.w(
                    3,
                    &format!(
                        "{name}:\t<set to the key '{}' in secret '{}'>\tOptional: {}\n",
                        text(f, "/key"),
                        text(f, "/name"),
                        flag(f, "/optional")
                    ),
                );
            } else if let Some(f) = from.get("configMapKeyRef").filter(|v| v.is_object()) {
                out.w(
                    3,
                    &format!(
                        "{name}:\t<set to the key '{}' of config map '{}'>\tOptional: {}\n",
                        text(f, "/key"),
                        text(f, "/name"),
                        flag(f, "/optional")
                    ),
                );
            }
        }
        let mounts = list(c, "/volumeMounts");
        let none = if mounts.is_empty() { "\t<none>" } else { "" };
        out.w(2, &format!("Mounts:{none}\n"));
        let mut sorted: Vec<&Value> = mounts.iter().collect();
        go_sort(&mut sorted, |a, b| {
            text(a, "/mountPath") < text(b, "/mountPath")
        });
        for m in sorted {
            let mut flags = vec![if flag(m, "/readOnly") { "ro" } else { "rw" }.to_string()];
            let sub = text(m, "/subPath");
            if !sub.is_empty() {
                flags.push(format!("path={}", Value::String(sub.to_string())));
            }
            out.w(
                3,
                &format!(
                    "{} from {} ({})\n",
                    text(m, "/mountPath"),
                    text(m, "/name"),
                    flags.join(",")
                ),
            );
        }
        let devices = list(c, "/volumeDevices");
        if !devices.is_empty() {
            out.w(2, &format!("Devices:{none}\n"));
            let mut sorted: Vec<&Value> = devices.iter().collect();
            go_sort(&mut sorted, |a, b| {
                text(a, "/devicePath") < text(b, "/devicePath")
            });
            for d in sorted {
                out.w(
                    3,
                    &format!("{} from {}\n", text(d, "/devicePath"), text(d, "/name")),
                );
            }
        }
    }
}

/// `describeVolumes` for the volume types berth runs; others print `<unknown>`.
pub(super) fn describe_volumes(out: &mut Out, volumes: &[Value], space: &str) {
    if volumes.is_empty() {
        out.w(0, &format!("{space}Volumes:\t<none>\n"));
        return;
    }
    out.w(0, &format!("{space}Volumes:\n"));
    let name_indent = if space.is_empty() { "" } else { " " };
    for v in volumes {
        out.w(1, &format!("{name_indent}{}:\n", text(v, "/name")));
        let source = |key: &str| v.get(key).filter(|s| s.is_object());
        if let Some(s) = source("hostPath") {
            let kind = opt_text(s, "/type").unwrap_or("<none>");
            out.w(
                2,
                &format!(
                    "Type:\tHostPath (bare host directory volume)\n    Path:\t{}\n    HostPathType:\t{kind}\n",
                    text(s, "/path")
                ),
            );
        } else if let Some(s) = source("emptyDir") {
            let limit = s
                .get("sizeLimit")
                .and_then(Amount::parse)
                .filter(|q| q.milli() > 0)
                .map(|q| q.to_string())
                .unwrap_or_else(|| "<unset>".to_string());
            out.w(
                2,
                &format!(
                    "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n    Medium:\t{}\n    SizeLimit:\t{limit}\n",
                    text(s, "/medium")
                ),
            );
        } else if let Some(s) = source("secret") {
            out.w(
                2,
                &format!(
                    "Type:\tSecret (a volume populated by a Secret)\n    SecretName:\t{}\n    Optional:\t{}\n",
                    text(s, "/secretName"),
                    flag(s, "/optional")
                ),
            );
        } else if let Some(s) = source("configMap") {
            out.w(
                2,
                &format!(
                    "Type:\tConfigMap (a volume populated by a ConfigMap)\n    Name:\t{}\n    Optional:\t{}\n",
                    text(s, "/name"),
                    flag(s, "/optional")
                ),
            );
        } else if let Some(s) = source("nfs") {
            out.w(
                2,
                &format!(
                    "Type:\tNFS (an NFS mount that lasts the lifetime of a pod)\n    Server:\t{}\n    Path:\t{}\n    ReadOnly:\t{}\n",
                    text(s, "/server"),
                    text(s, "/path"),
                    flag(s, "/readOnly")
                ),
            );
        } else if let Some(s) = source("persistentVolumeClaim") {
            out.w(
                2,
                &format!(
                    "Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)\n    ClaimName:\t{}\n    ReadOnly:\t{}\n",
                    text(s, "/claimName"),
                    flag(s, "/readOnly")
                ),
            );
        } else if let Some(s) = source("downwardAPI") {
            out.w(
                2,
                "Type:\tDownwardAPI (a volume populated by information about the pod)\n    Items:\n",
            );
            for item in list(s, "/items") {
                let path = text(item, "/path");
                if let Some(f) = item.get("fieldRef").filter(|f| f.is_object()) {
                    out.w(3, &format!("{} -> {path}\n", text(f, "/fieldPath")));
                }
                if let Some(f) = item.get("resourceFieldRef").filter(|f| f.is_object()) {
                    out.w(3, &format!("{} -> {path}\n", text(f, "/resource")));
                }
            }
        } else if let Some(s) = source("projected") {
            out.w(
                2,
                "Type:\tProjected (a volume that contains injected data from multiple sources)\n",
            );
            for src in list(s, "/sources") {
                if let Some(x) = src.get("secret").filter(|x| x.is_object()) {
                    out.w(
                        2,
                        &format!(
                            "SecretName:\t{}\n    Optional:\t{}\n",
                            text(x, "/name"),
                            flag(x, "/optional")
                        ),
                    );
                } else if src.get("downwardAPI").is_some_and(Value::is_object) {
                    out.w(2, "DownwardAPI:\ttrue\n");
                } else if let Some(x) = src.get("configMap").filter(|x| x.is_object()) {
                    out.w(
                        2,
                        &format!(
                            "ConfigMapName:\t{}\n    Optional:\t{}\n",
                            text(x, "/name"),
                            flag(x, "/optional")
                        ),
                    );
                } else if let Some(x) = src.get("serviceAccountToken").filter(|x| x.is_object()) {
                    out.w(
                        2,
                        &format!(
                            "TokenExpirationSeconds:\t{}\n",
                            int(x, "/expirationSeconds").unwrap_or(0)
                        ),
                    );
                }
            }
        } else {
            out.w(1, "<unknown>\n");
        }
    }
}

/// `describeTopologySpreadConstraints`.
pub(super) fn describe_topology_spread(out: &mut Out, constraints: &[Value], space: &str) {
    if constraints.is_empty() {
        return;
    }
    let mut sorted: Vec<&Value> = constraints.iter().collect();
    go_sort(&mut sorted, |a, b| {
        text(a, "/topologyKey") < text(b, "/topologyKey")
    });
    out.w(0, &format!("{space}Topology Spread Constraints:\t"));
    for (i, c) in sorted.into_iter().enumerate() {
        if i != 0 {
            out.w(0, space);
            out.w(0, "\t");
        }
        out.w(
            0,
            &format!(
                "{}:{} when max skew {} is exceeded",
                text(c, "/topologyKey"),
                text(c, "/whenUnsatisfiable"),
                int(c, "/maxSkew").unwrap_or(0)
            ),
        );
        if let Some(sel) = c.get("labelSelector").filter(|s| s.is_object()) {
            out.w(0, &format!(" for selector {}", format_label_selector(sel)));
        }
        out.w(0, "\n");
    }
}

/// `metav1.FormatLabelSelector`.
fn format_label_selector(sel: &Value) -> String {
    match Selector::from_label_selector(sel) {
        Ok(s) if s.is_empty() => "<none>".to_string(),
        Ok(s) => s.to_string(),
        Err(_) => "<error>".to_string(),
    }
}

/// kubectl's `DescribePodTemplate` (also used by `oc describe dc`).
pub(super) fn describe_pod_template(out: &mut Out, template: &Value, clock: &Clock) {
    out.w(0, "Pod Template:\n");
    if !template.is_object() {
        out.w(1, "<unset>");
        return;
    }
    labels_multiline_simple(out, "  Labels", &map_at(template, "/metadata/labels"));
    let annotations = map_at(template, "/metadata/annotations");
    if !annotations.is_empty() {
        annotations_multiline(out, "  Annotations", &annotations);
    }
    let account = text(template, "/spec/serviceAccountName");
    if !account.is_empty() {
        out.w(1, &format!("Service Account:\t{account}\n"));
    }
    let init = list(template, "/spec/initContainers");
    if !init.is_empty() {
        describe_containers(out, "Init Containers", init, &[], None, "  ", clock);
    }
    let containers = list(template, "/spec/containers");
    describe_containers(out, "Containers", containers, &[], None, "  ", clock);
    describe_volumes(out, list(template, "/spec/volumes"), "  ");
    describe_topology_spread(out, list(template, "/spec/topologySpreadConstraints"), "  ");
    let priority_class = text(template, "/spec/priorityClassName");
    if !priority_class.is_empty() {
        out.w(1, &format!("Priority Class Name:\t{priority_class}\n"));
    }
    labels_multiline_simple(
        out,
        "  Node-Selectors",
        &map_at(template, "/spec/nodeSelector"),
    );
    tolerations_multiline(out, "  Tolerations", list(template, "/spec/tolerations"));
}

/// The pod template description alone, as `oc rollout history --revision=N` prints it.
pub fn pod_template(template: &Value, clock: &Clock) -> String {
    let mut out = Out::default();
    describe_pod_template(&mut out, template, clock);
    out.finish(Layout::DESCRIBE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_describe_their_action_and_timing() {
        let http = json!({"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "initialDelaySeconds": 5, "timeoutSeconds": 2, "periodSeconds": 3,
            "successThreshold": 1, "failureThreshold": 4});
        assert_eq!(
            describe_probe(&http),
            "http-get http://:8080/healthz delay=5s timeout=2s period=3s successThreshold=1 failureThreshold=4"
        );
        let tcp = json!({"tcpSocket": {"port": "web"}});
        assert_eq!(
            describe_probe(&tcp),
            "tcp-socket :web delay=0s timeout=0s period=0s successThreshold=0 failureThreshold=0"
        );
        let exec = json!({"exec": {"command": ["/bin/sh", "-c", "true"]}});
        assert!(describe_probe(&exec).starts_with("exec [/bin/sh -c true] delay=0s"));
    }
}
