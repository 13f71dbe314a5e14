//! `oc describe dc`: DeploymentConfigs with their latest deployments, in oc's own
//! format.

use std::collections::BTreeMap;

use serde_json::Value;

use super::pod_spec::describe_pod_template;
use super::workloads::{matches_selector, phase_counts};
use super::{
    Clock, Out, describe_events, flag, int, labels_string, list, oc_age, opt_text, parse_time,
    plain, text,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::map_at;
use crate::types::openshift;

/// How many deployments `oc describe dc` shows, the latest included.
const MAX_DISPLAY_DEPLOYMENTS: usize = 3;
/// How many of the DC's events it shows.
const MAX_DISPLAY_EVENTS: usize = 8;

/// oc's `formatString`: `label:` then the value, one tab-led line per line of it.
fn oc_string(out: &mut Out, label: &str, value: &str) {
    let value = if value.is_empty() { "<none>" } else { value };
    out.raw(&format!("{label}:"));
    for line in value.split('\n') {
        out.raw(&format!("\t{line}\n"));
    }
}

/// oc's `formatMapStringString`: the first pair on the label's line, the rest below.
fn oc_map(out: &mut Out, label: &str, map: &BTreeMap<String, String>) {
    if map.is_empty() {
        oc_string(out, label, "");
        return;
    }
    for (i, (k, v)) in map.iter().enumerate() {
        if i == 0 {
            oc_string(out, label, &format!("{k}={v}"));
        } else {
            out.raw(&format!("\t{k}={v}\n"));
        }
    }
}

/// oc's `multilineStringArray(" ", "\t  ", args...)`.
fn oc_multiline_args(args: &[Value]) -> String {
    args.iter()
        .map(|a| {
            let s = plain(a);
            let s = s.strip_suffix('\n').unwrap_or(&s);
            if s.contains('\n') {
                format!("\n\t  {}", s.split('\n').collect::<Vec<_>>().join("\n\t  "))
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// oc's `formatLabels(convertEnv(env))`: `k=v,...` sorted, an empty value as `<none>`.
fn oc_env(env: &[Value]) -> String {
    let map: BTreeMap<String, String> = env
        .iter()
        .map(|e| {
            let v = text(e, "/value");
            let v = if v.is_empty() { "<none>" } else { v };
            (text(e, "/name").to_string(), v.to_string())
        })
        .collect();
    labels_string(&map)
}

fn oc_hook(out: &mut Out, prefix: &str, hook: &Value, indent: &str) {
    let policy = text(hook, "/failurePolicy");
    if let Some(exec) = hook.get("execNewPod").filter(|e| e.is_object()) {
        out.raw(&format!(
            "{indent}{prefix} hook (pod type, failure policy: {policy}):\n"
        ));
        out.raw(&format!(
            "{indent}  Container:\t{}\n",
            text(exec, "/containerName")
        ));
        out.raw(&format!(
            "{indent}  Command:\t{}\n",
            oc_multiline_args(list(exec, "/command"))
        ));
        let env = list(exec, "/env");
        if !env.is_empty() {
            out.raw(&format!("{indent}  Env:\t{}\n", oc_env(env)));
        }
    }
    let tags = list(hook, "/tagImages");
    if !tags.is_empty() {
        out.raw(&format!(
            "{indent}{prefix} hook (tag images, failure policy: {policy}):\n"
        ));
        for t in tags {
            out.raw(&format!(
                "{indent}  Tag:\tcontainer {} to {} {} {}\n",
                text(t, "/containerName"),
                text(t, "/to/kind"),
                text(t, "/to/name"),
                text(t, "/to/namespace")
            ));
        }
    }
}

fn oc_strategy(out: &mut Out, strategy: &Value, indent: &str) {
    if let Some(custom) = strategy.get("customParams").filter(|c| c.is_object()) {
        let image = text(custom, "/image");
        let image = if image.is_empty() { "<default>" } else { image };
        out.raw(&format!("{indent}Image:\t{image}\n"));
        let env = list(custom, "/environment");
        if !env.is_empty() {
            out.raw(&format!("{indent}Environment:\t{}\n", oc_env(env)));
        }
        let command = list(custom, "/command");
        if !command.is_empty() {
            out.raw(&format!(
                "{indent}Command:\t{}\n",
                oc_multiline_args(command)
            ));
        }
    }
    let hooks: &[(&str, &str)] = &[
        ("/recreateParams/pre", "Pre-deployment"),
        ("/recreateParams/mid", "Mid-deployment"),
        ("/recreateParams/post", "Post-deployment"),
        ("/rollingParams/pre", "Pre-deployment"),
        ("/rollingParams/post", "Post-deployment"),
    ];
    for (pointer, prefix) in hooks {
        if let Some(hook) = strategy.pointer(pointer).filter(|h| h.is_object()) {
            oc_hook(out, prefix, hook, indent);
        }
    }
}

fn oc_triggers(out: &mut Out, triggers: &[Value]) {
    if triggers.is_empty() {
        oc_string(out, "Triggers", "<none>");
        return;
    }
    let mut shown = Vec::new();
    for t in triggers {
        match text(t, "/type") {
            "ConfigChange" => shown.push("Config".to_string()),
            "ImageChange" => {
                let from = text(t, "/imageChangeParams/from/name");
                if !from.is_empty() {
                    let (name, tag) = from.split_once(':').unwrap_or((from, ""));
                    let tag = if tag.is_empty() { "latest" } else { tag };
                    shown.push(format!(
                        "Image({name}@{tag}, auto={})",
                        flag(t, "/imageChangeParams/automatic")
                    ));
                }
            }
            _ => {}
        }
    }
    oc_string(out, "Triggers", &shown.join(", "));
}

/// oc's `printDeploymentRc`: one `Deployment #N:` block.
fn oc_deployment(
    out: &mut Out,
    rc: &Value,
    pods: &[Value],
    header: &str,
    verbose: bool,
    clock: &Clock,
) {
    out.raw(&format!("{header}:\n"));
    if verbose {
        out.raw(&format!("\tName:\t{}\n", text(rc, "/metadata/name")));
    }
    out.raw(&format!(
        "\tCreated:\t{} ago\n",
        oc_age_since(clock, opt_text(rc, "/metadata/creationTimestamp")).to_lowercase()
    ));
    out.raw(&format!(
        "\tStatus:\t{}\n",
        openshift::annotation(rc, openshift::DEPLOYMENT_PHASE_ANNOTATION).unwrap_or("")
    ));
    if let Some(replicas) = int(rc, "/spec/replicas") {
        out.raw(&format!(
            "\tReplicas:\t{} current / {replicas} desired\n",
            int(rc, "/status/replicas").unwrap_or(0)
        ));
    }
    if verbose {
        let selector = map_at(rc, "/spec/selector");
        out.raw(&format!("\tSelector:\t{}\n", labels_string(&selector)));
        out.raw(&format!(
            "\tLabels:\t{}\n",
            labels_string(&map_at(rc, "/metadata/labels"))
        ));
        let selected = pods.iter().filter(|p| matches_selector(p, &selector));
        let [running, waiting, succeeded, failed] = phase_counts(selected);
        out.raw(&format!(
                "\tPods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
            ),
        );
    }
}

/// `appsutil.DeploymentVersionFor`: the version annotation, -1 when absent or invalid.
fn oc_version(rc: &Value) -> i64 {
    openshift::annotation(rc, openshift::DEPLOYMENT_VERSION_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

fn oc_age_since(clock: &Clock, timestamp: Option<&str>) -> String {
    let seconds = timestamp
        .and_then(parse_time)
        .map(|t| clock.seconds_since(t))
        .unwrap_or(0);
    oc_age(seconds)
}

/// `oc describe dc`: the DC, its pod template, its latest deployment and up to two older
/// ones, and its most recent events. `rcs` are the RCs labelled with the DC's name, `pods`
/// the pods their selectors pick (for `Pods Status`), `events` the DC's events in the
/// order the server listed them (`None` with `--show-events=false`).
pub fn deployment_config(
    dc: &Value,
    rcs: &[Value],
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    let name = text(dc, "/metadata/name");
    oc_string(&mut out, "Name", name);
    let namespace = text(dc, "/metadata/namespace");
    if !namespace.is_empty() {
        oc_string(&mut out, "Namespace", namespace);
    }
    if let Some(created) = opt_text(dc, "/metadata/creationTimestamp").filter(|c| !c.is_empty()) {
        out.raw(&format!(
            "Created:\t{} ago\n",
            oc_age_since(clock, Some(created))
        ));
    }
    oc_map(&mut out, "Labels", &map_at(dc, "/metadata/labels"));
    let mut annotations = map_at(dc, "/metadata/annotations");
    if let Some(description) = annotations.remove("description").filter(|d| !d.is_empty()) {
        oc_string(&mut out, "Description", &description);
    }
    oc_map(&mut out, "Annotations", &annotations);

    let latest_version = int(dc, "/status/latestVersion").unwrap_or(0);
    if latest_version == 0 {
        oc_string(&mut out, "Latest Version", "Not deployed");
    } else {
        oc_string(&mut out, "Latest Version", &latest_version.to_string());
    }
    oc_string(
        &mut out,
        "Selector",
        &labels_string(&map_at(dc, "/spec/selector")),
    );
    let test = if flag(dc, "/spec/test") {
        " (test, will be scaled down between deployments)"
    } else {
        ""
    };
    oc_string(
        &mut out,
        "Replicas",
        &format!("{}{test}", int(dc, "/spec/replicas").unwrap_or(0)),
    );
    if flag(dc, "/spec/paused") {
        oc_string(&mut out, "Paused", "yes");
    }
    oc_triggers(&mut out, list(dc, "/spec/triggers"));
    let strategy = &dc["spec"]["strategy"];
    oc_string(&mut out, "Strategy", text(strategy, "/type"));
    oc_strategy(&mut out, strategy, "  ");
    if let Some(min_ready) = int(dc, "/spec/minReadySeconds").filter(|m| *m > 0) {
        oc_string(&mut out, "MinReadySeconds", &min_ready.to_string());
    }
    out.raw("Template:\n");
    describe_pod_template(&mut out, &dc["spec"]["template"], clock);
    out.raw("\n");

    let latest_name = openshift::deployment_name(name, latest_version);
    // The active deployment: the newest Complete one.
    let active = rcs
        .iter()
        .filter(|rc| openshift::deployment_phase(rc) == openshift::Phase::Complete)
        .max_by_key(|rc| openshift::deployment_version(rc))
        .filter(|rc| openshift::deployment_version(rc) > 0)
        .map(|rc| text(rc, "/metadata/name"));
    let latest = rcs
        .iter()
        .find(|rc| text(rc, "/metadata/name") == latest_name);
    match latest {
        None => oc_string(&mut out, "Latest Deployment", "<none>"),
        Some(rc) => {
            let header = format!("Deployment #{} (latest)", oc_version(rc));
            let verbose = active == Some(latest_name.as_str()) || rcs.len() == 1;
            oc_deployment(&mut out, rc, pods, &header, verbose, clock);
            // Older deployments, newest first by creation time then name.
            let mut sorted: Vec<&Value> = rcs.iter().collect();
            sorted.sort_by(|a, b| {
                let created =
                    |v: &Value| opt_text(v, "/metadata/creationTimestamp").and_then(parse_time);
                created(b)
                    .cmp(&created(a))
                    .then_with(|| text(b, "/metadata/name").cmp(text(a, "/metadata/name")))
            });
            let mut shown = 1;
            for rc in sorted {
                let rc_name = text(rc, "/metadata/name");
                let of_dc = openshift::annotation(rc, openshift::DEPLOYMENT_CONFIG_ANNOTATION)
                    == Some(name);
                if rc_name != latest_name && of_dc {
                    let header = format!("Deployment #{}", oc_version(rc));
                    oc_deployment(&mut out, rc, pods, &header, active == Some(rc_name), clock);
                    shown += 1;
                }
                if shown == MAX_DISPLAY_DEPLOYMENTS {
                    break;
                }
            }
        }
    }

    if let Some(events) = events {
        // The last ones listed, newest listed first; DescribeEvents sorts them again.
        let recent: Vec<Value> = events
            .iter()
            .rev()
            .take(MAX_DISPLAY_EVENTS)
            .cloned()
            .collect();
        out.raw("\n");
        describe_events(&mut out, &recent, clock);
    }
    out.finish(Layout::TABS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::describe::tests::{assert_text, clock};
    use serde_json::json;

    fn simple_dc() -> Value {
        json!({
            "metadata": {"name": "deployment-simple", "namespace": "test", "uid": "u-dc",
                         "creationTimestamp": "2026-11-30T21:00:00Z", "generation": 2},
            "spec": {
                "replicas": 1,
                "selector": {"name": "deployment-simple"},
                "strategy": {"type": "Rolling", "activeDeadlineSeconds": 21600,
                    "rollingParams": {"intervalSeconds": 1, "updatePeriodSeconds": 1,
                        "timeoutSeconds": 600, "maxSurge": "25%", "maxUnavailable": "25%"}},
                "triggers": [{"type": "ConfigChange"}],
                "revisionHistoryLimit": 10,
                "template": {
                    "metadata": {"labels": {"name": "deployment-simple"}},
                    "spec": {"containers": [{
                        "name": "myapp", "image": "busybox",
                        "command": ["sleep", "infinity"],
                        "env": [{"name": "TRY", "value": "ONCE"}],
                        "readinessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 1,
                            "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
                    }]}
                }
            },
            "status": {"latestVersion": 2, "replicas": 1}
        })
    }

    fn deployment(version: i64, created: &str, replicas: i64, phase: &str) -> Value {
        let name = format!("deployment-simple-{version}");
        json!({
            "metadata": {
                "name": name, "namespace": "test", "uid": format!("u-rc-{version}"),
                "creationTimestamp": created,
                "labels": {"openshift.io/deployment-config.name": "deployment-simple"},
                "annotations": {
                    "openshift.io/deployment-config.name": "deployment-simple",
                    "openshift.io/deployment-config.latest-version": version.to_string(),
                    "openshift.io/deployment.phase": phase
                }
            },
            "spec": {"replicas": replicas, "selector": {"deployment": name,
                "deploymentconfig": "deployment-simple", "name": "deployment-simple"}},
            "status": {"replicas": replicas}
        })
    }

    fn dc_events() -> Vec<Value> {
        let event = |reason: &str, message: &str, at: &str| {
            json!({"type": "Normal", "reason": reason, "message": message,
                   "source": {"component": "deploymentconfig-controller"}, "count": 1,
                   "firstTimestamp": at, "lastTimestamp": at})
        };
        vec![
            event(
                "DeploymentCreated",
                "Created new replication controller \"deployment-simple-1\" for version 1",
                "2026-11-30T21:00:00Z",
            ),
            event(
                "DeploymentCreated",
                "Created new replication controller \"deployment-simple-2\" for version 2",
                "2026-11-30T21:03:00Z",
            ),
            event(
                "ReplicationControllerScaled",
                "Scaled replication controller \"deployment-simple-1\" from 1 to 0",
                "2026-11-30T21:03:20Z",
            ),
        ]
    }

    fn hooked_dc() -> Value {
        json!({
            "metadata": {"name": "deployment-test", "namespace": "test",
                "creationTimestamp": "2026-11-30T21:04:59Z",
                "labels": {"app": "t", "tier": "back"},
                "annotations": {"description": "A test deployment", "team": "edge"}},
            "spec": {
                "replicas": 2, "test": true, "paused": true, "minReadySeconds": 5,
                "selector": {"app": "t"},
                "strategy": {"type": "Rolling",
                    "customParams": {"environment": [{"name": "A", "value": "1"}],
                        "command": ["/bin/sh", "-c", "openshift-deploy"]},
                    "rollingParams": {"pre": {"failurePolicy": "Abort", "execNewPod": {
                        "containerName": "myapp", "command": ["/bin/echo", "test pre hook executed"],
                        "env": [{"name": "X", "value": "y"}]}},
                        "post": {"failurePolicy": "Ignore", "tagImages": [{"containerName": "myapp",
                            "to": {"kind": "ImageStreamTag", "name": "app:prod", "namespace": "test"}}]}}},
                "triggers": [{"type": "ConfigChange"}, {"type": "ImageChange",
                    "imageChangeParams": {"automatic": true, "containerNames": ["myapp"],
                        "from": {"kind": "ImageStreamTag", "name": "app:latest"}}}],
                "template": {"metadata": {"labels": {"app": "t"}},
                    "spec": {"containers": [{"name": "myapp", "image": "busybox"}]}}
            },
            "status": {"latestVersion": 0}
        })
    }

    #[test]
    fn a_deployment_config_after_a_config_change_reads_like_oc() {
        // Scenario 4's end state: version 2 complete and active, version 1 scaled down.
        let rcs = vec![
            deployment(1, "2026-11-30T21:00:00Z", 0, "Complete"),
            deployment(2, "2026-11-30T21:03:00Z", 1, "Complete"),
        ];
        let app = json!({"metadata": {"name": "deployment-simple-2-abcde", "labels": {
            "deployment": "deployment-simple-2", "deploymentconfig": "deployment-simple",
            "name": "deployment-simple"}}, "status": {"phase": "Running"}});
        let out = deployment_config(&simple_dc(), &rcs, &[app], Some(&dc_events()), &clock());
        let expected = [
            "Name:\t\tdeployment-simple",
            "Namespace:\ttest",
            "Created:\t5 minutes ago",
            "Labels:\t\t<none>",
            "Annotations:\t<none>",
            "Latest Version:\t2",
            "Selector:\tname=deployment-simple",
            "Replicas:\t1",
            "Triggers:\tConfig",
            "Strategy:\tRolling",
            "Template:",
            "Pod Template:",
            "  Labels:\tname=deployment-simple",
            "  Containers:",
            "   myapp:",
            "    Image:\tbusybox",
            "    Port:\t<none>",
            "    Host Port:\t<none>",
            "    Command:",
            "      sleep",
            "      infinity",
            "    Readiness:\texec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3",
            "    Environment:",
            "      TRY:\t\tONCE",
            "    Mounts:\t\t<none>",
            "  Volumes:\t\t<none>",
            "  Node-Selectors:\t<none>",
            "  Tolerations:\t\t<none>",
            "",
            "Deployment #2 (latest):",
            "\tName:\t\tdeployment-simple-2",
            "\tCreated:\t2 minutes ago",
            "\tStatus:\t\tComplete",
            "\tReplicas:\t1 current / 1 desired",
            "\tSelector:\tdeployment=deployment-simple-2,deploymentconfig=deployment-simple,name=deployment-simple",
            "\tLabels:\t\topenshift.io/deployment-config.name=deployment-simple",
            "\tPods Status:\t1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
            "Deployment #1:",
            "\tCreated:\t5 minutes ago",
            "\tStatus:\t\tComplete",
            "\tReplicas:\t0 current / 0 desired",
            "",
            "Events:",
            "  Type\t\tReason\t\t\t\tAge\tFrom\t\t\t\tMessage",
            "  ----\t\t------\t\t\t\t----\t----\t\t\t\t-------",
            "  Normal\tDeploymentCreated\t\t5m\tdeploymentconfig-controller\tCreated new replication controller \"deployment-simple-1\" for version 1",
            "  Normal\tDeploymentCreated\t\t2m\tdeploymentconfig-controller\tCreated new replication controller \"deployment-simple-2\" for version 2",
            "  Normal\tReplicationControllerScaled\t100s\tdeploymentconfig-controller\tScaled replication controller \"deployment-simple-1\" from 1 to 0",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
        // Scenario 32's lines.
        for line in [
            "Latest Version:\t2",
            "Triggers:\tConfig",
            "Strategy:\tRolling",
            "Deployment #2 (latest):",
            "\tStatus:\t\tComplete",
            "\tReplicas:\t1 current / 1 desired",
            "Deployment #1:",
            "\tReplicas:\t0 current / 0 desired",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?}");
        }
    }

    #[test]
    fn an_undeployed_test_dc_shows_hooks_custom_params_and_no_deployment() {
        let out = deployment_config(&hooked_dc(), &[], &[], Some(&[]), &clock());
        let expected = [
            "Name:\t\tdeployment-test",
            "Namespace:\ttest",
            "Created:\t1 second ago",
            "Labels:\t\tapp=t",
            "\t\ttier=back",
            "Description:\tA test deployment",
            "Annotations:\tteam=edge",
            "Latest Version:\tNot deployed",
            "Selector:\tapp=t",
            "Replicas:\t2 (test, will be scaled down between deployments)",
            "Paused:\t\tyes",
            "Triggers:\tConfig, Image(app@latest, auto=true)",
            "Strategy:\tRolling",
            "  Image:\t<default>",
            "  Environment:\tA=1",
            "  Command:\t/bin/sh -c openshift-deploy",
            "  Pre-deployment hook (pod type, failure policy: Abort):",
            "    Container:\tmyapp",
            "    Command:\t/bin/echo test pre hook executed",
            "    Env:\tX=y",
            "  Post-deployment hook (tag images, failure policy: Ignore):",
            "    Tag:\t\tcontainer myapp to ImageStreamTag app:prod test",
            "MinReadySeconds:\t5",
            "Template:",
            "Pod Template:",
            "  Labels:\tapp=t",
            "  Containers:",
            "   myapp:",
            "    Image:\t\tbusybox",
            "    Port:\t\t<none>",
            "    Host Port:\t\t<none>",
            "    Environment:\t<none>",
            "    Mounts:\t\t<none>",
            "  Volumes:\t\t<none>",
            "  Node-Selectors:\t<none>",
            "  Tolerations:\t\t<none>",
            "",
            "Latest Deployment:\t<none>",
            "",
            "Events:\t<none>",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_dc_shows_at_most_two_older_deployments_and_eight_events() {
        let rcs: Vec<Value> = (1..=5)
            .map(|v| {
                let phase = if v == 5 { "Running" } else { "Complete" };
                deployment(v, &format!("2026-11-30T21:0{v}:00Z"), 1, phase)
            })
            .collect();
        let mut dc = simple_dc();
        dc["status"]["latestVersion"] = json!(5);
        let events: Vec<Value> = (0..10)
            .map(|i| {
                json!({"type": "Normal", "reason": format!("R{i}"), "message": "m",
                    "source": {"component": "c"}, "count": 1,
                    "firstTimestamp": format!("2026-11-30T21:00:{i:02}Z"),
                    "lastTimestamp": format!("2026-11-30T21:00:{i:02}Z")})
            })
            .collect();
        let out = deployment_config(&dc, &rcs, &[], Some(&events), &clock());
        let headers: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("Deployment #"))
            .collect();
        assert_eq!(
            headers,
            [
                "Deployment #5 (latest):",
                "Deployment #4:",
                "Deployment #3:"
            ]
        );
        // The running latest is not the active one, so only #4 (newest complete) is verbose.
        let names: Vec<&str> = out.lines().filter(|l| l.starts_with("\tName:")).collect();
        assert_eq!(names, ["\tName:\t\tdeployment-simple-4"]);
        let reasons: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("  Normal\t"))
            .map(|l| l.split('\t').next().unwrap_or(""))
            .collect();
        assert_eq!(reasons, ["R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9"]);
    }

    #[test]
    fn a_dc_whose_latest_rc_is_missing_shows_no_deployments() {
        let rcs = [deployment(1, "2026-11-30T21:00:00Z", 1, "Complete")];
        let mut dc = simple_dc();
        dc["status"]["latestVersion"] = json!(2);
        let out = deployment_config(&dc, &rcs, &[], None, &clock());
        assert!(
            out.ends_with("Tolerations:\t\t<none>\n\nLatest Deployment:\t<none>\n"),
            "{out}"
        );
    }

    #[test]
    fn the_only_deployment_is_shown_in_full_even_while_running() {
        let rcs = [deployment(1, "2026-11-30T21:04:00Z", 1, "Running")];
        let mut dc = simple_dc();
        dc["status"]["latestVersion"] = json!(1);
        let out = deployment_config(&dc, &rcs, &[], Some(&[]), &clock());
        let tail = [
            "Deployment #1 (latest):",
            "\tName:\t\tdeployment-simple-1",
            "\tCreated:\tabout a minute ago",
            "\tStatus:\t\tRunning",
            "\tReplicas:\t1 current / 1 desired",
            "\tSelector:\tdeployment=deployment-simple-1,deploymentconfig=deployment-simple,name=deployment-simple",
            "\tLabels:\t\topenshift.io/deployment-config.name=deployment-simple",
            "\tPods Status:\t0 Running / 0 Waiting / 0 Succeeded / 0 Failed",
            "",
            "Events:\t<none>",
            "",
        ]
        .join("\n");
        assert!(out.ends_with(&tail), "{out}");
    }
}
