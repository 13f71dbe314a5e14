//! The workloads' describers: ReplicationControllers, ReplicaSets, DaemonSets,
//! StatefulSets, Jobs, CronJobs and Deployments.

use std::collections::BTreeMap;

use serde_json::Value;

use super::pod_spec::describe_pod_template;
use super::{
    Clock, Out, annotations_multiline, controlled_by, controller_uid, describe_events,
    format_labels, int, int_or_string, labels_multiline, labels_multiline_simple, labels_string,
    list, name_and_namespace, opt_text, text,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::{Selector, map_at};

/// Phase counts of pods: running, waiting (pending), succeeded, failed.
pub(super) fn phase_counts<'a>(pods: impl Iterator<Item = &'a Value>) -> [usize; 4] {
    let mut counts = [0; 4];
    for p in pods {
        match text(p, "/status/phase") {
            "Running" => counts[0] += 1,
            "Pending" => counts[1] += 1,
            "Succeeded" => counts[2] += 1,
            "Failed" => counts[3] += 1,
            _ => {}
        }
    }
    counts
}

pub(super) fn matches_selector(pod: &Value, selector: &BTreeMap<String, String>) -> bool {
    Selector::from_map(selector).matches(&map_at(pod, "/metadata/labels"))
}

/// A ReplicaSet's selector as a label selector query.
pub(super) fn rs_selector(rs: &Value) -> String {
    rs.pointer("/spec/selector")
        .map(crate::types::labels::format_label_selector)
        .unwrap_or_default()
}

/// `kubectl describe rc`. `pods` are the pods the RC's selector picks; only those the RC
/// controls are counted.
pub fn replication_controller(
    rc: &Value,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let selector = map_at(rc, "/spec/selector");
    replicated(
        rc,
        &format_labels(&selector),
        &Selector::from_map(&selector),
        None,
        pods,
        events,
        clock,
    )
}

/// `kubectl describe rs`: an RC's text, with the LabelSelector as kubectl formats it and
/// the controller that owns the set.
pub fn replica_set(rs: &Value, pods: &[Value], events: Option<&[Value]>, clock: &Clock) -> String {
    let selector = rs
        .pointer("/spec/selector")
        .and_then(|s| Selector::from_label_selector(s).ok())
        .unwrap_or_default();
    let shown = Some(rs_selector(rs))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<none>".into());
    let owner = controlled_by(rs);
    replicated(rs, &shown, &selector, owner.as_deref(), pods, events, clock)
}

/// `kubectl describe daemonset`: the node counts of its status and its pods by phase.
pub fn daemon_set(ds: &Value, pods: &[Value], events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    // As current kubectl (1.37) prints it; older ones named no namespace here.
    out.w(0, &format!("Name:\t{}\n", text(ds, "/metadata/name")));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(ds, "/metadata/namespace")),
    );
    out.w(0, &format!("Selector:\t{}\n", rs_selector(ds)));
    let node_selector = labels_string(&map_at(ds, "/spec/template/spec/nodeSelector"));
    out.w(
        0,
        &format!(
            "Node-Selector:\t{}\n",
            if node_selector.is_empty() {
                "<none>"
            } else {
                &node_selector
            }
        ),
    );
    labels_multiline_simple(&mut out, "Labels", &map_at(ds, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(ds, "/metadata/annotations"),
    );
    let n = |p: &str| int(ds, p).unwrap_or(0);
    for (what, field) in [
        (
            "Desired Number of Nodes Scheduled",
            "desiredNumberScheduled",
        ),
        (
            "Current Number of Nodes Scheduled",
            "currentNumberScheduled",
        ),
        (
            "Number of Nodes Scheduled with Up-to-date Pods",
            "updatedNumberScheduled",
        ),
        (
            "Number of Nodes Scheduled with Available Pods",
            "numberAvailable",
        ),
        ("Number of Nodes Misscheduled", "numberMisscheduled"),
    ] {
        out.w(0, &format!("{what}: {}\n", n(&format!("/status/{field}"))));
    }
    let uid = text(ds, "/metadata/uid");
    let owned = pods.iter().filter(|p| controller_uid(p) == Some(uid));
    let [running, waiting, succeeded, failed] = phase_counts(owned);
    out.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    describe_pod_template(&mut out, &ds["spec"]["template"], clock);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe statefulset`: its replicas, update strategy, pods by phase, pod
/// template and claim templates.
pub fn stateful_set(
    sts: &Value,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, sts);
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(sts, "/metadata/creationTimestamp"))
        ),
    );
    out.w(0, &format!("Selector:\t{}\n", rs_selector(sts)));
    labels_multiline_simple(&mut out, "Labels", &map_at(sts, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(sts, "/metadata/annotations"),
    );
    let service = text(sts, "/spec/serviceName");
    if !service.is_empty() {
        out.w(0, &format!("Service Name:\t{service}\n"));
    }
    let policy = text(sts, "/spec/podManagementPolicy");
    if !policy.is_empty() {
        out.w(0, &format!("Pod Management Policy:\t{policy}\n"));
    }
    out.w(
        0,
        &format!(
            "Replicas:\t{} desired | {} total\n",
            int(sts, "/spec/replicas").unwrap_or(1),
            int(sts, "/status/replicas").unwrap_or(0)
        ),
    );
    out.w(
        0,
        &format!(
            "Update Strategy:\t{}\n",
            text(sts, "/spec/updateStrategy/type")
        ),
    );
    if let Some(partition) = int(sts, "/spec/updateStrategy/rollingUpdate/partition") {
        out.w(1, &format!("Partition:\t{partition}\n"));
        if let Some(v) = sts
            .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
            .filter(|v| !v.is_null())
        {
            let shown = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            out.w(1, &format!("MaxUnavailable:\t{shown}\n"));
        }
    }
    if let Some(retention) = sts
        .pointer("/spec/persistentVolumeClaimRetentionPolicy")
        .filter(|v| v.is_object())
    {
        out.w(0, "Persistent Volume Claim Retention Policy:\n");
        out.w(
            1,
            &format!("WhenDeleted:\t{}\n", text(retention, "/whenDeleted")),
        );
        out.w(
            1,
            &format!("WhenScaled:\t{}\n", text(retention, "/whenScaled")),
        );
    }
    let uid = text(sts, "/metadata/uid");
    let owned = pods.iter().filter(|p| controller_uid(p) == Some(uid));
    let [running, waiting, succeeded, failed] = phase_counts(owned);
    out.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    describe_pod_template(&mut out, &sts["spec"]["template"], clock);
    let claims = sts
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty());
    match claims {
        None => out.w(0, "Volume Claims:\t<none>\n"),
        Some(claims) => {
            out.w(0, "Volume Claims:\n");
            for c in claims {
                out.w(1, &format!("Name:\t{}\n", text(c, "/metadata/name")));
                let class = c
                    .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                    .or_else(|| c.pointer("/spec/storageClassName"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                out.w(1, &format!("StorageClass:\t{class}\n"));
                labels_multiline(
                    &mut out,
                    "  ",
                    "Labels",
                    "\t",
                    &map_at(c, "/metadata/labels"),
                );
                labels_multiline(
                    &mut out,
                    "  ",
                    "Annotations",
                    "\t",
                    &map_at(c, "/metadata/annotations"),
                );
                let capacity =
                    opt_text(c, "/spec/resources/requests/storage").unwrap_or("<default>");
                out.w(1, &format!("Capacity:\t{capacity}\n"));
                let modes: Vec<&str> = c
                    .pointer("/spec/accessModes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                out.w(1, &format!("Access Modes:\t[{}]\n", modes.join(" ")));
            }
        }
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// Seconds between two RFC 3339 timestamps.
fn seconds_between(from: &str, to: &str) -> Option<i64> {
    let a: jiff::Timestamp = from.parse().ok()?;
    let b: jiff::Timestamp = to.parse().ok()?;
    Some(b.as_second() - a.as_second())
}

/// `capIndexesListOrNone`: a list of indexes cut after the first comma past 50
/// characters.
fn cap_indexes(indexes: &str, soft_limit: usize) -> String {
    if indexes.is_empty() {
        return "<none>".into();
    }
    match indexes
        .char_indices()
        .skip(soft_limit)
        .find(|(_, c)| *c == ',')
    {
        Some((i, _)) => format!("{}...", &indexes[..=i]),
        None => indexes.to_string(),
    }
}

/// `kubectl describe job`.
pub fn job(job: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, job);
    out.w(0, &format!("Selector:\t{}\n", rs_selector(job)));
    labels_multiline_simple(&mut out, "Labels", &map_at(job, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(job, "/metadata/annotations"),
    );
    if let Some(owner) = controlled_by(job) {
        out.w(0, &format!("Controlled By:\t{owner}\n"));
    }
    if let Some(p) = int(job, "/spec/parallelism") {
        out.w(0, &format!("Parallelism:\t{p}\n"));
    }
    match int(job, "/spec/completions") {
        Some(c) => out.w(0, &format!("Completions:\t{c}\n")),
        None => out.w(0, "Completions:\t<unset>\n"),
    }
    if let Some(mode) = opt_text(job, "/spec/completionMode") {
        out.w(0, &format!("Completion Mode:\t{mode}\n"));
    }
    if let Some(suspend) = job.pointer("/spec/suspend").and_then(Value::as_bool) {
        out.w(0, &format!("Suspend:\t{suspend}\n"));
    }
    if let Some(limit) = int(job, "/spec/backoffLimit") {
        out.w(0, &format!("Backoff Limit:\t{limit}\n"));
    }
    if let Some(ttl) = int(job, "/spec/ttlSecondsAfterFinished") {
        out.w(0, &format!("TTL Seconds After Finished:\t{ttl}\n"));
    }
    let start = opt_text(job, "/status/startTime");
    let done = opt_text(job, "/status/completionTime");
    if start.is_some() {
        out.w(0, &format!("Start Time:\t{}\n", clock.rfc1123z(start)));
    }
    if done.is_some() {
        out.w(0, &format!("Completed At:\t{}\n", clock.rfc1123z(done)));
    }
    if let Some(secs) = start.zip(done).and_then(|(a, b)| seconds_between(a, b)) {
        out.w(
            0,
            &format!("Duration:\t{}\n", crate::types::human_duration(secs)),
        );
    }
    if let Some(d) = int(job, "/spec/activeDeadlineSeconds") {
        out.w(0, &format!("Active Deadline Seconds:\t{d}s\n"));
    }
    let n = |p: &str| int(job, p).unwrap_or(0);
    let (active, succeeded, failed) = (
        n("/status/active"),
        n("/status/succeeded"),
        n("/status/failed"),
    );
    match int(job, "/status/ready") {
        None => out.w(
            0,
            &format!("Pods Statuses:\t{active} Active / {succeeded} Succeeded / {failed} Failed\n"),
        ),
        Some(ready) => out.w(
            0,
            &format!(
                "Pods Statuses:\t{active} Active ({ready} Ready) / {succeeded} Succeeded / {failed} Failed\n"
            ),
        ),
    }
    if opt_text(job, "/spec/completionMode") == Some("Indexed") {
        let indexes = text(job, "/status/completedIndexes");
        out.w(
            0,
            &format!("Completed Indexes:\t{}\n", cap_indexes(indexes, 50)),
        );
    }
    describe_pod_template(&mut out, &job["spec"]["template"], clock);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe cronjob`.
pub fn cron_job(cj: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, cj);
    labels_multiline_simple(&mut out, "Labels", &map_at(cj, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(cj, "/metadata/annotations"),
    );
    out.w(0, &format!("Schedule:\t{}\n", text(cj, "/spec/schedule")));
    out.w(
        0,
        &format!(
            "Concurrency Policy:\t{}\n",
            text(cj, "/spec/concurrencyPolicy")
        ),
    );
    let suspend = match cj.pointer("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    out.w(0, &format!("Suspend:\t{suspend}\n"));
    match cj.pointer("/spec/timeZone").and_then(Value::as_str) {
        Some(zone) => out.w(0, &format!("Time Zone:\t{zone}\n")),
        None => out.w(0, "Time Zone:\t<unset>\n"),
    }
    let or_unset =
        |v: Option<i64>, unit: &str| v.map_or("<unset>".to_string(), |v| format!("{v}{unit}"));
    out.w(
        0,
        &format!(
            "Successful Job History Limit:\t{}\n",
            or_unset(int(cj, "/spec/successfulJobsHistoryLimit"), "")
        ),
    );
    out.w(
        0,
        &format!(
            "Failed Job History Limit:\t{}\n",
            or_unset(int(cj, "/spec/failedJobsHistoryLimit"), "")
        ),
    );
    out.w(
        0,
        &format!(
            "Starting Deadline Seconds:\t{}\n",
            or_unset(int(cj, "/spec/startingDeadlineSeconds"), "s")
        ),
    );
    let spec = &cj["spec"]["jobTemplate"]["spec"];
    match spec.get("selector").filter(|s| !s.is_null()) {
        Some(sel) => out.w(
            0,
            &format!(
                "Selector:\t{}\n",
                crate::types::labels::format_label_selector(sel)
            ),
        ),
        None => out.w(0, "Selector:\t<unset>\n"),
    }
    out.w(
        0,
        &format!(
            "Parallelism:\t{}\n",
            or_unset(int(spec, "/parallelism"), "")
        ),
    );
    out.w(
        0,
        &format!(
            "Completions:\t{}\n",
            or_unset(int(spec, "/completions"), "")
        ),
    );
    if let Some(d) = int(spec, "/activeDeadlineSeconds") {
        out.w(0, &format!("Active Deadline Seconds:\t{d}s\n"));
    }
    describe_pod_template(&mut out, &spec["template"], clock);
    match opt_text(cj, "/status/lastScheduleTime") {
        Some(t) => out.w(
            0,
            &format!("Last Schedule Time:\t{}\n", clock.rfc1123z(Some(t))),
        ),
        None => out.w(0, "Last Schedule Time:\t<unset>\n"),
    }
    let active: Vec<&str> = list(cj, "/status/active")
        .iter()
        .map(|r| text(r, "/name"))
        .collect();
    if active.is_empty() {
        out.w(0, "Active Jobs:\t<none>\n");
    } else {
        out.w(0, &format!("Active Jobs:\t{}\n", active.join(", ")));
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe deployment`. `rss` are the ReplicaSets its selector picks; only
/// those it controls are shown, the one with its template as the new one.
pub fn deployment(d: &Value, rss: &[Value], events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, d);
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(d, "/metadata/creationTimestamp"))
        ),
    );
    labels_multiline_simple(&mut out, "Labels", &map_at(d, "/metadata/labels"));
    annotations_multiline(&mut out, "Annotations", &map_at(d, "/metadata/annotations"));
    out.w(0, &format!("Selector:\t{}\n", rs_selector(d)));
    let n = |p: &str| int(d, p).unwrap_or(0);
    out.w(
        0,
        &format!(
            "Replicas:\t{} desired | {} updated | {} total | {} available | {} unavailable\n",
            int(d, "/spec/replicas").unwrap_or(1),
            n("/status/updatedReplicas"),
            n("/status/replicas"),
            n("/status/availableReplicas"),
            n("/status/unavailableReplicas"),
        ),
    );
    out.w(
        0,
        &format!("StrategyType:\t{}\n", text(d, "/spec/strategy/type")),
    );
    out.w(
        0,
        &format!("MinReadySeconds:\t{}\n", n("/spec/minReadySeconds")),
    );
    if let Some(ru) = d
        .pointer("/spec/strategy/rollingUpdate")
        .filter(|r| r.is_object())
    {
        out.w(
            0,
            &format!(
                "RollingUpdateStrategy:\t{} max unavailable, {} max surge\n",
                int_or_string(&ru["maxUnavailable"]),
                int_or_string(&ru["maxSurge"])
            ),
        );
    }
    describe_pod_template(&mut out, &d["spec"]["template"], clock);
    conditions_with_reasons(&mut out, d);
    let uid = text(d, "/metadata/uid");
    let mut owned: Vec<&Value> = rss
        .iter()
        .filter(|rs| controller_uid(rs) == Some(uid))
        .collect();
    owned.sort_by(|a, b| {
        text(a, "/metadata/creationTimestamp")
            .cmp(text(b, "/metadata/creationTimestamp"))
            .then(text(a, "/metadata/name").cmp(text(b, "/metadata/name")))
    });
    if !owned.is_empty() {
        let new = owned.iter().position(|rs| {
            crate::types::same_template_ignoring_hash(
                &rs["spec"]["template"],
                &d["spec"]["template"],
            )
        });
        let shown = |sets: Vec<&Value>| {
            if sets.is_empty() {
                return "<none>".to_string();
            }
            sets.iter()
                .map(|rs| {
                    format!(
                        "{} ({}/{} replicas created)",
                        text(rs, "/metadata/name"),
                        int(rs, "/status/replicas").unwrap_or(0),
                        int(rs, "/spec/replicas").unwrap_or(0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let old: Vec<&Value> = owned
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new)
            .map(|(_, rs)| *rs)
            .collect();
        out.w(0, &format!("OldReplicaSets:\t{}\n", shown(old)));
        out.w(
            0,
            &format!(
                "NewReplicaSet:\t{}\n",
                shown(new.map(|i| owned[i]).into_iter().collect())
            ),
        );
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// A workload's conditions: type, status and reason of each.
fn conditions_with_reasons(out: &mut Out, obj: &Value) {
    let conditions = list(obj, "/status/conditions");
    if conditions.is_empty() {
        return;
    }
    out.w(0, "Conditions:\n  Type\tStatus\tReason\n");
    out.w(1, "----\t------\t------\n");
    for c in conditions {
        out.w(
            1,
            &format!(
                "{} \t{}\t{}\n",
                text(c, "/type"),
                text(c, "/status"),
                text(c, "/reason")
            ),
        );
    }
}

/// The describer of a kind that keeps replicas of a pod template.
fn replicated(
    rc: &Value,
    shown_selector: &str,
    selector: &Selector,
    controlled_by: Option<&str>,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, rc);
    out.w(0, &format!("Selector:\t{shown_selector}\n"));
    labels_multiline_simple(&mut out, "Labels", &map_at(rc, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(rc, "/metadata/annotations"),
    );
    if let Some(owner) = controlled_by {
        out.w(0, &format!("Controlled By:\t{owner}\n"));
    }
    out.w(
        0,
        &format!(
            "Replicas:\t{} current / {} desired\n",
            int(rc, "/status/replicas").unwrap_or(0),
            int(rc, "/spec/replicas").unwrap_or(1)
        ),
    );
    let uid = text(rc, "/metadata/uid");
    let owned = pods.iter().filter(|p| {
        selector.matches(&map_at(p, "/metadata/labels")) && controller_uid(p) == Some(uid)
    });
    let [running, waiting, succeeded, failed] = phase_counts(owned);
    out.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    describe_pod_template(&mut out, &rc["spec"]["template"], clock);
    conditions_with_reasons(&mut out, rc);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::describe::tests::{assert_text, clock, running_pod};
    use serde_json::json;

    #[test]
    fn a_replication_controller_counts_only_the_pods_it_controls() {
        let rc = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-web",
                "labels": {"app": "web"}},
            "spec": {"replicas": 1, "selector": {"app": "web"},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "busybox",
                        "ports": [{"containerPort": 80, "protocol": "TCP"},
                                  {"containerPort": 443, "protocol": "TCP"}]}]}}},
            "status": {"replicas": 1}
        });
        let events = vec![json!({"type": "Normal", "reason": "SuccessfulCreate",
            "message": "Created pod: web-1", "source": {"component": "replication-controller"},
            "count": 1, "firstTimestamp": "2026-11-30T20:59:58Z",
            "lastTimestamp": "2026-11-30T20:59:58Z"})];
        let mut orphan = running_pod();
        orphan["metadata"]["ownerReferences"] = json!([]);
        let out = replication_controller(&rc, &[running_pod(), orphan], Some(&events), &clock());
        let expected = [
            "Name:         web",
            "Namespace:    default",
            "Selector:     app=web",
            "Labels:       app=web",
            "Annotations:  <none>",
            "Replicas:     1 current / 1 desired",
            "Pods Status:  1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
            "Pod Template:",
            "  Labels:  app=web",
            "  Containers:",
            "   app:",
            "    Image:         busybox",
            "    Ports:         80/TCP, 443/TCP",
            "    Host Ports:    0/TCP, 0/TCP",
            "    Environment:   <none>",
            "    Mounts:        <none>",
            "  Volumes:         <none>",
            "  Node-Selectors:  <none>",
            "  Tolerations:     <none>",
            "Events:",
            "  Type    Reason            Age   From                    Message",
            "  ----    ------            ----  ----                    -------",
            "  Normal  SuccessfulCreate  5m2s  replication-controller  Created pod: web-1",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_job_names_its_counts_and_indexes_as_kubectl() {
        assert_eq!(cap_indexes("", 50), "<none>");
        assert_eq!(cap_indexes("1,3-5", 50), "1,3-5");
        let long: Vec<String> = (0..40).map(|i| (i * 2).to_string()).collect();
        let capped = cap_indexes(&long.join(","), 50);
        assert!(capped.ends_with(",..."), "{capped}");
        assert!(capped.len() > 50 && capped.len() < 60, "{capped}");
        let job = json!({
            "metadata": {"name": "pi", "namespace": "default",
                         "ownerReferences": [{"kind": "CronJob", "name": "tick", "controller": true}]},
            "spec": {"parallelism": 2, "completions": 4, "completionMode": "Indexed",
                     "suspend": false, "backoffLimit": 6, "template": {"spec": {"containers": []}}},
            "status": {"startTime": "2026-12-03T10:00:00Z", "completionTime": "2026-12-03T10:01:30Z",
                       "active": 1, "ready": 1, "succeeded": 3, "completedIndexes": "0-2"},
        });
        let text = job_text(&job);
        for want in [
            "Controlled By:  CronJob/tick",
            "Completion Mode:  Indexed",
            "Duration:  90s",
            "Pods Statuses:  1 Active (1 Ready) / 3 Succeeded / 0 Failed",
            "Completed Indexes:  0-2",
        ] {
            let squeezed: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let want: String = want.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(squeezed.contains(&want), "{want} in {text}");
        }
    }

    fn job_text(j: &Value) -> String {
        job(j, None, &Clock::system())
    }
}
