//! `kubectl describe pod`.

use serde_json::Value;

use super::pod_spec::{
    describe_containers, describe_resources, describe_topology_spread, describe_volumes,
};
use super::resources::qos_class;
use super::{
    Clock, Out, annotations_multiline, controlled_by, describe_events, int,
    labels_multiline_simple, list, name_and_namespace, opt_text, text, tolerations_multiline,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::map_at;

/// `kubectl describe pod`. `events` is `None` with `--show-events=false`.
pub fn pod(pod: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, pod);
    if let Some(priority) = int(pod, "/spec/priority") {
        out.w(0, &format!("Priority:\t{priority}\n"));
    }
    let priority_class = text(pod, "/spec/priorityClassName");
    if !priority_class.is_empty() {
        out.w(0, &format!("Priority Class Name:\t{priority_class}\n"));
    }
    let runtime_class = text(pod, "/spec/runtimeClassName");
    if !runtime_class.is_empty() {
        out.w(0, &format!("Runtime Class Name:\t{runtime_class}\n"));
    }
    let account = text(pod, "/spec/serviceAccountName");
    if !account.is_empty() {
        out.w(0, &format!("Service Account:\t{account}\n"));
    }
    let node = text(pod, "/spec/nodeName");
    if node.is_empty() {
        out.w(0, "Node:\t<none>\n");
    } else {
        out.w(
            0,
            &format!("Node:\t{node}/{}\n", text(pod, "/status/hostIP")),
        );
    }
    if let Some(start) = opt_text(pod, "/status/startTime") {
        out.w(
            0,
            &format!("Start Time:\t{}\n", clock.rfc1123z(Some(start))),
        );
    }
    labels_multiline_simple(&mut out, "Labels", &map_at(pod, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(pod, "/metadata/annotations"),
    );
    let phase = text(pod, "/status/phase");
    let deletion = opt_text(pod, "/metadata/deletionTimestamp");
    if deletion.is_some() && phase != "Failed" && phase != "Succeeded" {
        out.w(
            0,
            &format!("Status:\tTerminating (lasts {})\n", clock.since(deletion)),
        );
        out.w(
            0,
            &format!(
                "Termination Grace Period:\t{}s\n",
                int(pod, "/metadata/deletionGracePeriodSeconds").unwrap_or(0)
            ),
        );
    } else {
        out.w(0, &format!("Status:\t{phase}\n"));
    }
    for (field, title) in [("/status/reason", "Reason"), ("/status/message", "Message")] {
        let value = text(pod, field);
        if !value.is_empty() {
            out.w(0, &format!("{title}:\t{value}\n"));
        }
    }
    if let Some(kind) = opt_text(pod, "/spec/securityContext/seccompProfile/type") {
        out.w(0, &format!("SeccompProfile:\t{kind}\n"));
        if kind == "Localhost" {
            out.w(
                0,
                &format!(
                    "LocalhostProfile:\t{}\n",
                    text(pod, "/spec/securityContext/seccompProfile/localhostProfile")
                ),
            );
        }
    }
    out.w(0, &format!("IP:\t{}\n", text(pod, "/status/podIP")));
    let ips = list(pod, "/status/podIPs");
    if ips.is_empty() {
        out.w(0, "IPs:\t<none>\n");
    } else {
        out.w(0, "IPs:\n");
        for ip in ips {
            out.w(1, &format!("IP:\t{}\n", text(ip, "/ip")));
        }
    }
    if let Some(owner) = controlled_by(pod) {
        out.w(0, &format!("Controlled By:\t{owner}\n"));
    }
    let nominated = text(pod, "/status/nominatedNodeName");
    if !nominated.is_empty() {
        out.w(0, &format!("NominatedNodeName:\t{nominated}\n"));
    }
    if pod.pointer("/spec/resources").is_some_and(Value::is_object) {
        out.w(0, "Resources:\n");
        describe_resources(&mut out, &pod["spec"]["resources"], 1);
    }
    let init = list(pod, "/spec/initContainers");
    if !init.is_empty() {
        describe_containers(
            &mut out,
            "Init Containers",
            init,
            list(pod, "/status/initContainerStatuses"),
            Some(pod),
            "",
            clock,
        );
    }
    describe_containers(
        &mut out,
        "Containers",
        list(pod, "/spec/containers"),
        list(pod, "/status/containerStatuses"),
        Some(pod),
        "",
        clock,
    );
    let ephemeral = list(pod, "/spec/ephemeralContainers");
    if !ephemeral.is_empty() {
        describe_containers(
            &mut out,
            "Ephemeral Containers",
            ephemeral,
            list(pod, "/status/ephemeralContainerStatuses"),
            Some(pod),
            "",
            clock,
        );
    }
    let conditions = list(pod, "/status/conditions");
    let gates = list(pod, "/spec/readinessGates");
    if !gates.is_empty() {
        out.w(0, "Readiness Gates:\n  Type\tStatus\n");
        for g in gates {
            let kind = text(g, "/conditionType");
            let status = conditions
                .iter()
                .find(|c| text(c, "/type") == kind)
                .map(|c| text(c, "/status").to_string())
                .unwrap_or_else(|| "<none>".to_string());
            out.w(1, &format!("{kind} \t{status} \n"));
        }
    }
    if !conditions.is_empty() {
        out.w(0, "Conditions:\n  Type\tStatus\n");
        for c in conditions {
            out.w(
                1,
                &format!("{} \t{} \n", text(c, "/type"), text(c, "/status")),
            );
        }
    }
    describe_volumes(&mut out, list(pod, "/spec/volumes"), "");
    out.w(0, &format!("QoS Class:\t{}\n", qos_class(pod)));
    labels_multiline_simple(
        &mut out,
        "Node-Selectors",
        &map_at(pod, "/spec/nodeSelector"),
    );
    tolerations_multiline(&mut out, "Tolerations", list(pod, "/spec/tolerations"));
    describe_topology_spread(&mut out, list(pod, "/spec/topologySpreadConstraints"), "");
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

    fn pod_events() -> Vec<Value> {
        vec![
            json!({"type": "Normal", "reason": "Started", "message": "Started container app",
                   "source": {"component": "kubelet"}, "count": 3,
                   "firstTimestamp": "2026-11-30T21:00:02Z", "lastTimestamp": "2026-11-30T21:02:30Z"}),
            json!({"type": "Normal", "reason": "Scheduled", "message": "Successfully assigned default/web-1 to berth",
                   "source": {"component": "default-scheduler"}, "count": 1,
                   "firstTimestamp": "2026-11-30T21:00:00Z", "lastTimestamp": "2026-11-30T21:00:00Z"}),
        ]
    }

    #[test]
    fn a_running_pod_with_a_readiness_probe_and_two_events_reads_like_kubectl() {
        let out = pod(&running_pod(), Some(&pod_events()), &clock());
        let expected = [
            "Name:             web-1",
            "Namespace:        default",
            "Priority:         0",
            "Service Account:  default",
            "Node:             berth/10.0.0.5",
            "Start Time:       Mon, 30 Nov 2026 21:00:00 +0000",
            "Labels:           app=web",
            "                  tier=front",
            "Annotations:      note: hello",
            "Status:           Running",
            "IP:               10.88.0.7",
            "IPs:",
            "  IP:           10.88.0.7",
            "Controlled By:  ReplicationController/web",
            "Containers:",
            "  app:",
            "    Container ID:  berth://0123abcd",
            "    Image:         busybox",
            "    Image ID:      busybox",
            "    Port:          8080/TCP",
            "    Host Port:     0/TCP",
            "    Command:",
            "      sleep",
            "      infinity",
            "    State:          Running",
            "      Started:      Mon, 30 Nov 2026 21:00:02 +0000",
            "    Ready:          True",
            "    Restart Count:  0",
            "    Requests:",
            "      cpu:      100m",
            "      memory:   64Mi",
            "    Readiness:  exec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3",
            "    Environment:",
            "      MODE:  fast",
            "      POD:   web-1 (v1:metadata.name)",
            "    Mounts:",
            "      /data from data (rw)",
            "Conditions:",
            "  Type              Status",
            "  Initialized       True ",
            "  Ready             True ",
            "  ContainersReady   True ",
            "  PodScheduled      True ",
            "Volumes:",
            "  data:",
            "    Type:        EmptyDir (a temporary directory that shares a pod's lifetime)",
            "    Medium:      ",
            "    SizeLimit:   <unset>",
            "QoS Class:       Burstable",
            "Node-Selectors:  <none>",
            "Tolerations:     node.kubernetes.io/not-ready:NoExecute op=Exists for 300s",
            "                 node.kubernetes.io/unreachable:NoExecute op=Exists for 300s",
            "Events:",
            "  Type    Reason     Age                    From               Message",
            "  ----    ------     ----                   ----               -------",
            "  Normal  Scheduled  5m                     default-scheduler  Successfully assigned default/web-1 to berth",
            "  Normal  Started    2m30s (x3 over 4m58s)  kubelet            Started container app",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_restarted_container_shows_its_last_state_and_a_deleted_pod_is_terminating() {
        let mut p = running_pod();
        p["status"]["containerStatuses"][0]["restartCount"] = json!(2);
        p["status"]["containerStatuses"][0]["lastState"] = json!({"terminated": {
            "exitCode": 137, "reason": "Error", "startedAt": "2026-11-30T21:00:02Z",
            "finishedAt": "2026-11-30T21:01:00Z"}});
        p["metadata"]["deletionTimestamp"] = json!("2026-11-30T21:05:30Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        let out = pod(&p, None, &clock());
        let text = out.replace(' ', "");
        for wanted in [
            "Status:Terminating(lasts<invalid>)",
            "TerminationGracePeriod:30s",
            "LastState:Terminated",
            "Reason:Error",
            "ExitCode:137",
            "Started:Mon,30Nov202621:00:02+0000",
            "Finished:Mon,30Nov202621:01:00+0000",
            "RestartCount:2",
        ] {
            assert!(
                text.lines().any(|l| l == wanted),
                "missing {wanted:?} in\n{out}"
            );
        }
        assert!(!out.contains("Events:"), "no events section without events");
    }
}
