//! Pod Security admission: the upstream Pod Security Standards (`privileged`, `baseline`,
//! `restricted`) checked against every pod, and warned of for the pod templates of the
//! workloads, by the levels a namespace's `pod-security.kubernetes.io/enforce|warn|audit`
//! labels name (as kube-apiserver's `PodSecurity` plugin, after
//! `k8s.io/pod-security-admission/policy`).
//!
//! berth enforces `baseline` where a namespace says nothing (upstream's default is
//! `privileged`): a pod gets host namespaces, `hostPath` volumes, host ports, privileged
//! containers or added capabilities only in a namespace labelled for it. `kube-system`,
//! where berth's own components live, is `privileged` unless labelled otherwise.
//!
//! The checks are those of the latest policy version: a `-version` label is validated and
//! shown in messages, but an older version is judged by the newest rules. Audit
//! violations go to the log (berth keeps no audit log).

use std::collections::BTreeSet;

use serde_json::Value;

use super::catalog::{self, Kind};
use super::{Error, Registry};

/// The label prefix of the three modes.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// The modes a namespace labels, in the order they are applied.
pub const MODES: [&str; 3] = ["enforce", "audit", "warn"];

/// A Pod Security Standard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A level at a policy version (`latest` or `v1.N`), as a namespace's labels give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelVersion {
    pub level: Level,
    pub version: String,
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// Whether `v` is a policy version a label may name.
fn valid_version(v: &str) -> bool {
    v == "latest"
        || v.strip_prefix("v1.").is_some_and(|minor| {
            !minor.is_empty()
                && minor.bytes().all(|b| b.is_ascii_digit())
                && (minor == "0" || !minor.starts_with('0'))
        })
}

/// The problems with a namespace's Pod Security labels, as (label, value, what is
/// wanted) for a validation error.
pub fn label_errors(labels: &serde_json::Map<String, Value>) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for mode in MODES {
        let key = format!("{LABEL_PREFIX}{mode}");
        if let Some(v) = labels.get(&key).and_then(Value::as_str)
            && Level::parse(v).is_none()
        {
            out.push((
                key,
                v.to_string(),
                "must be one of privileged, baseline, restricted".into(),
            ));
        }
        let key = format!("{LABEL_PREFIX}{mode}-version");
        if let Some(v) = labels.get(&key).and_then(Value::as_str)
            && !valid_version(v)
        {
            out.push((key, v.to_string(), "must be \"latest\" or \"v1.x\"".into()));
        }
    }
    out
}

/// The level a namespace gives `mode`: its labels', else berth's default (`baseline` to
/// enforce, except in `kube-system`; nothing to warn or audit).
pub fn level(namespace: &str, labels: Option<&Value>, mode: &str) -> Option<LevelVersion> {
    let label = |suffix: &str| {
        labels
            .and_then(|l| l.get(format!("{LABEL_PREFIX}{mode}{suffix}")))
            .and_then(Value::as_str)
    };
    let level = match label("").and_then(Level::parse) {
        Some(l) => l,
        None if mode == "enforce" && namespace != "kube-system" => Level::Baseline,
        None => return None,
    };
    let version = label("-version")
        .filter(|v| valid_version(v))
        .unwrap_or("latest");
    Some(LevelVersion {
        level,
        version: version.to_string(),
    })
}

/// One failed check: the reason and its detail, as upstream words them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: &'static str,
    pub detail: String,
}

/// The violations as upstream lists them: `reason (detail), reason (detail)`.
pub fn summary(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.to_string()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The message of a pod `enforce` refuses (after `pods "x" is forbidden: `).
pub fn forbidden(lv: &LevelVersion, violations: &[Violation]) -> String {
    format!("violates PodSecurity \"{lv}\": {}", summary(violations))
}

/// The warning of a pod or template that `warn` names.
pub fn warning(lv: &LevelVersion, violations: &[Violation]) -> String {
    format!(
        "would violate PodSecurity \"{lv}\": {}",
        summary(violations)
    )
}

/// The capabilities `baseline` lets a container add (the container runtimes' defaults).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The sysctls `baseline` allows (namespaced, and safe for a pod to set).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The SELinux types `baseline` allows.
const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The volume sources `restricted` allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// `container "a"` or `containers "a", "b"`.
fn containers(names: &[String]) -> String {
    format!(
        "{} {}",
        if names.len() == 1 {
            "container"
        } else {
            "containers"
        },
        join_quoted(names)
    )
}

fn join_quoted<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|s| format!("{:?}", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every container of a pod spec (init, regular, ephemeral), with its name and its
/// security context.
fn visit(spec: &Value) -> Vec<(String, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| spec[*f].as_array().into_iter().flatten())
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                &c["securityContext"],
            )
        })
        .collect()
}

/// The violations of a pod (its metadata and spec) at `level`.
pub fn check(level: Level, meta: &Value, spec: &Value) -> Vec<Violation> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let restricted = level == Level::Restricted;
    let windows = spec.pointer("/os/name").and_then(Value::as_str) == Some("windows");
    let cs = visit(spec);
    let pod_sc = &spec["securityContext"];
    let mut out = Vec::new();
    let mut push = |reason: &'static str, detail: String| out.push(Violation { reason, detail });

    // Baseline, in upstream's order (by check name); at `restricted`, hostPath volumes,
    // baseline capabilities and the baseline seccomp check give way to their stronger
    // restricted forms.
    if restricted {
        let missing: Vec<String> = cs
            .iter()
            .filter(|(_, sc)| sc["allowPrivilegeEscalation"] != Value::Bool(false))
            .map(|(n, _)| n.clone())
            .collect();
        if !missing.is_empty() && !windows {
            push(
                "allowPrivilegeEscalation != false",
                format!(
                    "{} must set securityContext.allowPrivilegeEscalation=false",
                    containers(&missing)
                ),
            );
        }
    }
    apparmor(meta, pod_sc, &cs, &mut push);
    if !restricted {
        let mut names = Vec::new();
        let mut caps = BTreeSet::new();
        for (n, sc) in &cs {
            let bad: Vec<&str> = sc
                .pointer("/capabilities/add")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|c| !BASELINE_CAPABILITIES.contains(c))
                .collect();
            if !bad.is_empty() {
                names.push(n.clone());
                caps.extend(bad);
            }
        }
        if !names.is_empty() {
            push(
                "non-default capabilities",
                format!(
                    "{} must not include {} in securityContext.capabilities.add",
                    containers(&names),
                    join_quoted(&caps)
                ),
            );
        }
    } else if !windows {
        let mut no_drop = Vec::new();
        let mut adding = Vec::new();
        let mut caps = BTreeSet::new();
        for (n, sc) in &cs {
            let list = |f: &str| -> Vec<&str> {
                sc.pointer(&format!("/capabilities/{f}"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect()
            };
            if !list("drop").contains(&"ALL") {
                no_drop.push(n.clone());
            }
            let bad: Vec<&str> = list("add")
                .into_iter()
                .filter(|c| *c != "NET_BIND_SERVICE")
                .collect();
            if !bad.is_empty() {
                adding.push(n.clone());
                caps.extend(bad);
            }
        }
        let mut details = Vec::new();
        if !no_drop.is_empty() {
            details.push(format!(
                "{} must set securityContext.capabilities.drop=[\"ALL\"]",
                containers(&no_drop)
            ));
        }
        if !adding.is_empty() {
            details.push(format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers(&adding),
                join_quoted(&caps)
            ));
        }
        if !details.is_empty() {
            push("unrestricted capabilities", details.join("; "));
        }
    }
    let hosts: Vec<&str> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|f| spec[*f] == Value::Bool(true))
        .collect();
    if !hosts.is_empty() {
        push(
            "host namespaces",
            hosts
                .iter()
                .map(|h| format!("{h}=true"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    let volumes: Vec<&Value> = spec["volumes"].as_array().into_iter().flatten().collect();
    if !restricted {
        let host_paths: Vec<&str> = volumes
            .iter()
            .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
            .map(|v| v["name"].as_str().unwrap_or(""))
            .collect();
        if !host_paths.is_empty() {
            push(
                "hostPath volumes",
                format!(
                    "{} {}",
                    if host_paths.len() == 1 {
                        "volume"
                    } else {
                        "volumes"
                    },
                    join_quoted(&host_paths)
                ),
            );
        }
    }
    let mut port_users = Vec::new();
    let mut ports = Vec::new();
    for c in ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| spec[*f].as_array().into_iter().flatten())
    {
        let used: Vec<i64> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|p| *p != 0)
            .collect();
        if !used.is_empty() {
            port_users.push(c["name"].as_str().unwrap_or("").to_string());
            ports.extend(used.iter().map(ToString::to_string));
        }
    }
    if !port_users.is_empty() {
        let one = port_users.len() == 1;
        push(
            "hostPort",
            format!(
                "{} {} {} {}",
                containers(&port_users),
                if one { "uses" } else { "use" },
                if ports.len() == 1 {
                    "hostPort"
                } else {
                    "hostPorts"
                },
                ports.join(", ")
            ),
        );
    }
    let privileged: Vec<String> = cs
        .iter()
        .filter(|(_, sc)| sc["privileged"] == Value::Bool(true))
        .map(|(n, _)| n.clone())
        .collect();
    if !privileged.is_empty() {
        push(
            "privileged",
            format!(
                "{} must not set securityContext.privileged=true",
                containers(&privileged)
            ),
        );
    }
    let mut unmasked = Vec::new();
    let mut mounts = BTreeSet::new();
    for (n, sc) in &cs {
        if let Some(m) = sc["procMount"].as_str().filter(|m| *m != "Default") {
            unmasked.push(n.clone());
            mounts.insert(m);
        }
    }
    if !unmasked.is_empty() {
        push(
            "procMount",
            format!(
                "{} must not set securityContext.procMount to {}",
                containers(&unmasked),
                join_quoted(&mounts)
            ),
        );
    }
    if restricted {
        let bad: Vec<&str> = volumes
            .iter()
            .filter_map(|v| {
                let source = v
                    .as_object()?
                    .iter()
                    .find(|(k, val)| *k != "name" && !val.is_null())?
                    .0;
                (!RESTRICTED_VOLUMES.contains(&source.as_str())).then_some(source.as_str())
            })
            .collect();
        let names: Vec<&str> = volumes
            .iter()
            .filter(|v| {
                v.as_object().is_some_and(|o| {
                    o.iter().any(|(k, val)| {
                        k != "name" && !val.is_null() && !RESTRICTED_VOLUMES.contains(&k.as_str())
                    })
                })
            })
            .map(|v| v["name"].as_str().unwrap_or(""))
            .collect();
        if !names.is_empty() {
            let types: BTreeSet<&str> = bad.into_iter().collect();
            let one = names.len() == 1;
            push(
                "restricted volume types",
                format!(
                    "{} {} {} restricted volume {} {}",
                    if one { "volume" } else { "volumes" },
                    join_quoted(&names),
                    if one { "uses" } else { "use" },
                    if types.len() == 1 { "type" } else { "types" },
                    join_quoted(&types)
                ),
            );
        }
        if !windows {
            run_as_non_root(pod_sc, &cs, &mut push);
        }
        run_as_user(pod_sc, &cs, &mut push);
    }
    selinux(pod_sc, &cs, &mut push);
    seccomp(restricted && !windows, pod_sc, &cs, &mut push);
    let sysctls: Vec<&str> = pod_sc["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|s| !SAFE_SYSCTLS.contains(s))
        .collect();
    if !sysctls.is_empty() {
        push("forbidden sysctls", sysctls.join(", "));
    }
    let host_process =
        |sc: &Value| sc.pointer("/windowsOptions/hostProcess") == Some(&Value::Bool(true));
    let hp: Vec<String> = cs
        .iter()
        .filter(|(_, sc)| host_process(sc))
        .map(|(n, _)| n.clone())
        .collect();
    if host_process(pod_sc) || !hp.is_empty() {
        push(
            "hostProcess",
            format!(
                "{} must not set securityContext.windowsOptions.hostProcess=true",
                subjects(host_process(pod_sc), &hp)
            ),
        );
    }
    out
}

/// `pod`, `containers "a"` or `pod and containers "a"`.
fn subjects(pod: bool, names: &[String]) -> String {
    match (pod, names.is_empty()) {
        (true, true) => "pod".into(),
        (false, _) => containers(names),
        (true, false) => format!("pod and {}", containers(names)),
    }
}

fn apparmor(
    meta: &Value,
    pod_sc: &Value,
    cs: &[(String, &Value)],
    push: &mut impl FnMut(&'static str, String),
) {
    let mut bad = Vec::new();
    let allowed_type = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    if let Some(t) = pod_sc
        .pointer("/appArmorProfile/type")
        .and_then(Value::as_str)
        .filter(|t| !allowed_type(t))
    {
        bad.push(format!(
            "pod must not set securityContext.appArmorProfile.type to {t:?}"
        ));
    }
    for (n, sc) in cs {
        if let Some(t) = sc
            .pointer("/appArmorProfile/type")
            .and_then(Value::as_str)
            .filter(|t| !allowed_type(t))
        {
            bad.push(format!(
                "container {n:?} must not set securityContext.appArmorProfile.type to {t:?}"
            ));
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        for (k, v) in annotations {
            let v = v.as_str().unwrap_or("");
            if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && v != "runtime/default"
                && !v.starts_with("localhost/")
            {
                bad.push(format!("{k}={v:?}"));
            }
        }
    }
    if !bad.is_empty() {
        push("forbidden AppArmor profiles", bad.join(", "));
    }
}

fn run_as_non_root(
    pod_sc: &Value,
    cs: &[(String, &Value)],
    push: &mut impl FnMut(&'static str, String),
) {
    let pod_true = pod_sc["runAsNonRoot"] == Value::Bool(true);
    let mut details = Vec::new();
    if pod_sc["runAsNonRoot"] == Value::Bool(false) {
        details.push("pod must not set securityContext.runAsNonRoot=false".to_string());
    }
    let explicit_false: Vec<String> = cs
        .iter()
        .filter(|(_, sc)| sc["runAsNonRoot"] == Value::Bool(false))
        .map(|(n, _)| n.clone())
        .collect();
    if !explicit_false.is_empty() {
        details.push(format!(
            "{} must not set securityContext.runAsNonRoot=false",
            containers(&explicit_false)
        ));
    }
    if !pod_true {
        let unset: Vec<String> = cs
            .iter()
            .filter(|(_, sc)| sc["runAsNonRoot"].is_null())
            .map(|(n, _)| n.clone())
            .collect();
        if !unset.is_empty() {
            details.push(format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers(&unset)
            ));
        }
    }
    if !details.is_empty() {
        push("runAsNonRoot != true", details.join("; "));
    }
}

fn run_as_user(
    pod_sc: &Value,
    cs: &[(String, &Value)],
    push: &mut impl FnMut(&'static str, String),
) {
    let mut details = Vec::new();
    if pod_sc["runAsUser"].as_i64() == Some(0) {
        details.push("pod must not set runAsUser=0".to_string());
    }
    let root: Vec<String> = cs
        .iter()
        .filter(|(_, sc)| sc["runAsUser"].as_i64() == Some(0))
        .map(|(n, _)| n.clone())
        .collect();
    if !root.is_empty() {
        details.push(format!("{} must not set runAsUser=0", containers(&root)));
    }
    if !details.is_empty() {
        push("runAsUser=0", details.join("; "));
    }
}

fn selinux(pod_sc: &Value, cs: &[(String, &Value)], push: &mut impl FnMut(&'static str, String)) {
    let mut types = BTreeSet::new();
    let mut users = BTreeSet::new();
    let mut roles = BTreeSet::new();
    let mut judge = |sc: &Value| -> bool {
        let o = &sc["seLinuxOptions"];
        let mut bad = false;
        if let Some(t) = o["type"].as_str().filter(|t| !SELINUX_TYPES.contains(t)) {
            types.insert(t.to_string());
            bad = true;
        }
        if let Some(u) = o["user"].as_str().filter(|u| !u.is_empty()) {
            users.insert(u.to_string());
            bad = true;
        }
        if let Some(r) = o["role"].as_str().filter(|r| !r.is_empty()) {
            roles.insert(r.to_string());
            bad = true;
        }
        bad
    };
    let pod_bad = judge(pod_sc);
    let names: Vec<String> = cs
        .iter()
        .filter(|(_, sc)| judge(sc))
        .map(|(n, _)| n.clone())
        .collect();
    if !pod_bad && names.is_empty() {
        return;
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        what.push(format!(
            "{} {}",
            if types.len() == 1 { "type" } else { "types" },
            join_quoted(&types)
        ));
    }
    if !users.is_empty() {
        what.push(format!("user {}", join_quoted(&users)));
    }
    if !roles.is_empty() {
        what.push(format!("role {}", join_quoted(&roles)));
    }
    push(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            subjects(pod_bad, &names),
            what.join("; ")
        ),
    );
}

fn seccomp(
    restricted: bool,
    pod_sc: &Value,
    cs: &[(String, &Value)],
    push: &mut impl FnMut(&'static str, String),
) {
    let kind = |sc: &Value| {
        sc.pointer("/seccompProfile/type")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let allowed = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut details = Vec::new();
    let pod = kind(pod_sc);
    let pod_ok = pod.as_deref().is_some_and(allowed);
    match pod.as_deref() {
        Some("Unconfined") => details.push(
            "pod must not set securityContext.seccompProfile.type to \"Unconfined\"".to_string(),
        ),
        Some(t) if restricted && !allowed(t) => details.push(format!(
            "pod must not set securityContext.seccompProfile.type to {t:?}"
        )),
        _ => {}
    }
    let mut bad = Vec::new();
    let mut bad_types = BTreeSet::new();
    let mut unset = Vec::new();
    for (n, sc) in cs {
        match kind(sc) {
            Some(t) if t == "Unconfined" || (restricted && !allowed(&t)) => {
                bad.push(n.clone());
                bad_types.insert(t);
            }
            None if restricted && !pod_ok => unset.push(n.clone()),
            _ => {}
        }
    }
    if !bad.is_empty() {
        details.push(format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            containers(&bad),
            join_quoted(&bad_types)
        ));
    }
    if !unset.is_empty() {
        details.push(format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers(&unset)
        ));
    }
    if !details.is_empty() {
        push("seccompProfile", details.join("; "));
    }
}

/// The labels of namespace `ns` as stored (none when it has none or is missing).
fn namespace_labels(reg: &Registry, ns: &str) -> Option<Value> {
    let rec = reg.store.get(&catalog::of(Kind::Namespace).key(None, ns))?;
    let obj: Value = serde_json::from_slice(&rec.value).ok()?;
    Some(obj.pointer("/metadata/labels")?.clone())
}

/// The images of a pod spec's containers, in order (an update that changes one is
/// judged again, as upstream: the rest of a pod's spec cannot change what is checked).
fn images(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| spec[*f].as_array().into_iter().flatten())
        .map(|c| &c["image"])
        .collect()
}

/// Pod Security admission of a write of `obj` (`old` before an update) whose pod is at
/// `at` (`""`: the object is a pod, refused when the namespace's `enforce` level is
/// broken; else the pointer to a workload's pod template, only warned of). Returns the
/// warnings for the answer. `warn` is the `enforce` level where a namespace does not
/// label it, so a workload whose pods would be refused says so when it is written.
pub(super) fn admit(
    reg: &Registry,
    plural: &str,
    ns: Option<&str>,
    name: &str,
    old: Option<&Value>,
    obj: &Value,
    at: &str,
) -> Result<Vec<String>, Error> {
    let (Some(ns), Some(spec)) = (ns, obj.pointer(&format!("{at}/spec"))) else {
        return Ok(Vec::new());
    };
    let meta = obj
        .pointer(&format!("{at}/metadata"))
        .unwrap_or(&Value::Null);
    let pod = at.is_empty();
    if let Some(old) = old {
        let old_spec = old.pointer(&format!("{at}/spec"));
        let unchanged = if pod {
            old_spec.is_some_and(|o| images(o) == images(spec))
        } else {
            old_spec == Some(spec) && old.pointer(&format!("{at}/metadata")) == Some(meta)
        };
        if unchanged {
            return Ok(Vec::new());
        }
    }
    let labels = namespace_labels(reg, ns);
    let enforce = level(ns, labels.as_ref(), "enforce");
    let mut warnings = Vec::new();
    let mut judged: Vec<(LevelVersion, Vec<Violation>)> = Vec::new();
    let mut judge = |lv: &LevelVersion| -> Vec<Violation> {
        if let Some((_, v)) = judged.iter().find(|(l, _)| l.level == lv.level) {
            return v.clone();
        }
        let v = check(lv.level, meta, spec);
        judged.push((lv.clone(), v.clone()));
        v
    };
    if let Some(lv) = &enforce {
        let v = judge(lv);
        if pod && !v.is_empty() {
            return Err(Error::Forbidden(format!(
                "{plural} {name:?} is forbidden: {}",
                forbidden(lv, &v)
            )));
        }
    }
    if let Some(lv) = level(ns, labels.as_ref(), "audit") {
        let v = judge(&lv);
        if !v.is_empty() {
            tracing::info!(
                namespace = ns,
                name,
                resource = plural,
                "pod security audit: would violate PodSecurity \"{lv}\": {}",
                summary(&v)
            );
        }
    }
    if let Some(lv) = level(ns, labels.as_ref(), "warn").or(enforce) {
        let v = judge(&lv);
        if !v.is_empty() {
            warnings.push(warning(&lv, &v));
        }
    }
    Ok(warnings)
}

/// The pods this many at most are judged when a namespace's `enforce` level changes.
const NAMESPACE_PODS_JUDGED: usize = 3000;

/// The warnings of a namespace's new `enforce` level: the pods it runs that the level
/// would refuse, grouped by what they break, as upstream words them.
pub(super) fn namespace_warnings(reg: &Registry, old: Option<&Value>, new: &Value) -> Vec<String> {
    let Some(ns) = new.pointer("/metadata/name").and_then(Value::as_str) else {
        return Vec::new();
    };
    let was = old.and_then(|o| level(ns, o.pointer("/metadata/labels"), "enforce"));
    let Some(now) = level(ns, new.pointer("/metadata/labels"), "enforce") else {
        return Vec::new();
    };
    if old.is_none() || was.as_ref() == Some(&now) || now.level == Level::Privileged {
        return Vec::new();
    }
    let pods = catalog::of(Kind::Pod);
    let (records, _) = reg.store.list(&pods.key(Some(ns), ""));
    // Pods breaking the same rules share a line: (their summary, first pod, how many).
    let mut groups: Vec<(String, String, usize)> = Vec::new();
    for (_, rec) in records.iter().take(NAMESPACE_PODS_JUDGED) {
        let Ok(pod) = serde_json::from_slice::<Value>(&rec.value) else {
            continue;
        };
        let v = check(now.level, &pod["metadata"], &pod["spec"]);
        if v.is_empty() {
            continue;
        }
        let reasons = v.iter().map(|v| v.reason).collect::<Vec<_>>().join(", ");
        let name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        match groups.iter_mut().find(|g| g.0 == reasons) {
            Some(g) => g.2 += 1,
            None => groups.push((reasons, name.to_string(), 1)),
        }
    }
    if groups.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "existing pods in namespace {ns:?} violate the new PodSecurity enforce level \"{now}\""
    )];
    for (reasons, first, n) in groups {
        out.push(match n {
            1 => format!("{first}: {reasons}"),
            2 => format!("{first} (and 1 other pod): {reasons}"),
            n => format!("{first} (and {} other pods): {reasons}", n - 1),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reasons(level: Level, spec: Value) -> Vec<String> {
        check(level, &json!({}), &spec)
            .into_iter()
            .map(|v| format!("{} ({})", v.reason, v.detail))
            .collect()
    }

    #[test]
    fn baseline_refuses_host_access_and_allows_a_plain_pod() {
        let plain = json!({"containers": [{"name": "a", "image": "x"}]});
        assert!(check(Level::Baseline, &json!({}), &plain).is_empty());
        let host = json!({
            "hostNetwork": true, "hostPID": true,
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}],
            "containers": [
                {"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}],
                 "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}},
                {"name": "b", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
            ]
        });
        assert_eq!(
            reasons(Level::Baseline, host),
            [
                r#"non-default capabilities (containers "a", "b" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)"#,
                "host namespaces (hostNetwork=true, hostPID=true)",
                r#"hostPath volumes (volume "root")"#,
                r#"hostPort (container "a" uses hostPort 8080)"#,
                r#"privileged (container "a" must not set securityContext.privileged=true)"#,
            ]
        );
    }

    #[test]
    fn restricted_wants_a_locked_down_container() {
        let plain = json!({"volumes": [{"name": "h", "hostPath": {"path": "/x"}}],
            "containers": [{"name": "a", "image": "x"}]});
        assert_eq!(
            reasons(Level::Restricted, plain),
            [
                r#"allowPrivilegeEscalation != false (container "a" must set securityContext.allowPrivilegeEscalation=false)"#,
                r#"unrestricted capabilities (container "a" must set securityContext.capabilities.drop=["ALL"])"#,
                r#"restricted volume types (volume "h" uses restricted volume type "hostPath")"#,
                r#"runAsNonRoot != true (pod or container "a" must set securityContext.runAsNonRoot=true)"#,
                r#"seccompProfile (pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
            ]
        );
        let locked = json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "c", "configMap": {"name": "x"}}],
            "containers": [{"name": "a", "image": "x", "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]
        });
        assert!(check(Level::Restricted, &json!({}), &locked).is_empty());
        assert!(check(Level::Privileged, &json!({}), &json!({"hostNetwork": true})).is_empty());
    }

    #[test]
    fn sysctls_seccomp_and_root_users() {
        let spec = json!({
            "securityContext": {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"},
                "sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
            "containers": [{"name": "a", "image": "x"}]
        });
        let got = reasons(Level::Baseline, spec.clone());
        assert_eq!(
            got,
            [
                r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#,
                "forbidden sysctls (kernel.msgmax)",
            ]
        );
        let got = reasons(Level::Restricted, spec);
        assert!(
            got.contains(&"runAsUser=0 (pod must not set runAsUser=0)".to_string()),
            "{got:?}"
        );
    }

    #[test]
    fn namespace_labels_give_the_levels() {
        let labels = json!({"pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/warn-version": "v1.30"});
        assert_eq!(
            level("dev", Some(&labels), "enforce").unwrap().to_string(),
            "baseline:latest"
        );
        assert_eq!(
            level("dev", Some(&labels), "warn").unwrap().to_string(),
            "restricted:v1.30"
        );
        assert!(level("dev", Some(&labels), "audit").is_none());
        assert_eq!(
            level("kube-system", None, "enforce"),
            None,
            "kube-system is privileged unless labelled"
        );
        let bad = json!({"pod-security.kubernetes.io/enforce": "strict",
            "pod-security.kubernetes.io/audit-version": "v1.07"});
        let errs = label_errors(bad.as_object().unwrap());
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(valid_version("v1.0") && valid_version("latest") && !valid_version("v2.1"));
    }
}
