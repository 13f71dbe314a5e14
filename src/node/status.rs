//! A pod's status from what the runtime reports: container statuses (state, last state,
//! restarts, readiness), the phase, the conditions the agent owns, start time, addresses
//! and QoS class — the rules of the node-agent spec (§3, §4, §8), as pure functions.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use crate::runtime::{ContainerStatus, State};

/// Why a container waits, when the agent knows better than "ContainerCreating".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// What the status is built from.
pub struct Inputs<'a> {
    pub pod: &'a Value,
    /// Every instance the runtime holds for the pod.
    pub instances: &'a [ContainerStatus],
    /// Containers that wait for a reason of the agent's (back-off, config errors).
    pub waiting: &'a HashMap<String, Waiting>,
    pub node_ip: &'a str,
    /// The pod's own addresses, the primary (IPv4) one first (the node's with the
    /// host's network; none while its network is not made yet).
    pub pod_ips: &'a [String],
    /// The pod is being terminated by the agent.
    pub terminating: bool,
    /// Probe verdicts of running containers: (ready, started). A container missing here
    /// is ready and started once it runs (it has no probes).
    pub probed: &'a HashMap<String, (bool, bool)>,
}

/// The instances of one container, oldest attempt first.
pub(super) fn instances_of<'a>(all: &'a [ContainerStatus], name: &str) -> Vec<&'a ContainerStatus> {
    let mut v: Vec<&ContainerStatus> = all.iter().filter(|s| s.id.name == name).collect();
    v.sort_by_key(|s| s.id.attempt);
    v
}

fn terminated(s: &ContainerStatus) -> Value {
    let (code, reason) = match s.state {
        State::Unknown => (137, "ContainerStatusUnknown"),
        _ if s.error.is_some() => (s.exit_code.unwrap_or(128), "ContainerCannotRun"),
        _ => {
            let code = s.exit_code.unwrap_or(0);
            let reason = match &s.reason {
                Some(r) => r.as_str(),
                None if code == 0 => "Completed",
                None => "Error",
            };
            (code, reason)
        }
    };
    let mut t = json!({
        "exitCode": code,
        "reason": reason,
        "containerID": format!("process://{}", s.id),
    });
    if let Some(sig) = s.signal {
        t["signal"] = json!(sig);
    }
    if let Some(m) = s.error.as_ref().or(s.message.as_ref()) {
        t["message"] = json!(m);
    }
    if s.state == State::Unknown {
        t["message"] = json!("The container could not be located when the pod was terminated");
    }
    // A container that never started did so when it ended (rather than no time at all,
    // which clients print as the year 1).
    if let Some(at) = s.started_at.as_ref().or(s.finished_at.as_ref()) {
        t["startedAt"] = json!(second(at));
    }
    if let Some(at) = &s.finished_at {
        t["finishedAt"] = json!(second(at));
    }
    t
}

/// A timestamp truncated to whole seconds (API statuses carry second precision).
fn second(ts: &str) -> String {
    ts.parse::<jiff::Timestamp>()
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| ts.to_string())
}

/// The status of one container.
/// The status of container `spec`; `probes` says whether its probe verdicts count (app
/// containers) or not (init containers).
fn container_status(inp: &Inputs<'_>, spec: &Value, default_reason: &str, probes: bool) -> Value {
    let name = spec["name"].as_str().unwrap_or("");
    let instances = instances_of(inp.instances, name);
    let waiting = inp.waiting.get(name);
    let probed = if probes { inp.probed.get(name) } else { None };
    let latest = instances.last().copied();
    let mut cs = json!({
        "name": name,
        "image": spec["image"],
        "imageID": "",
        "restartCount": latest.map_or(0, |l| l.id.attempt),
        "ready": false,
        "started": false,
    });
    let wait = |w: Option<&Waiting>| match w {
        Some(w) => json!({"waiting": {"reason": w.reason, "message": w.message}}),
        None => json!({"waiting": {"reason": default_reason}}),
    };
    match latest {
        None => cs["state"] = wait(waiting),
        Some(l) => {
            cs["containerID"] = json!(format!("process://{}", l.id));
            match l.state {
                State::Running => {
                    cs["state"] = json!({"running": {"startedAt": second(l.started_at.as_deref().unwrap_or(&l.created_at))}});
                    let (ready, started) = probed.copied().unwrap_or((true, true));
                    // An init container that runs to completion is ready once it has
                    // completed, as the kubelet's probe manager says (a sidecar, one
                    // that restarts Always, is ready while it runs).
                    cs["ready"] = json!(ready && (probes || spec["restartPolicy"] == "Always"));
                    cs["started"] = json!(started);
                }
                State::Created => cs["state"] = json!({"waiting": {"reason": default_reason}}),
                State::Exited | State::Unknown => match waiting {
                    // Waiting to restart: the dead instance is the last state.
                    Some(w) => {
                        cs["state"] =
                            json!({"waiting": {"reason": w.reason, "message": w.message}});
                        cs["lastState"] = json!({"terminated": terminated(l)});
                    }
                    None => cs["state"] = json!({"terminated": terminated(l)}),
                },
            }
            // As the kubelet: the instance before the latest is the last state, also
            // once the latest has ended (a pod that succeeded after restarts).
            if cs.get("lastState").is_none() && instances.len() > 1 {
                let prev = instances[instances.len() - 2];
                cs["lastState"] = json!({"terminated": terminated(prev)});
            }
        }
    }
    if cs.get("lastState").is_none() {
        cs["lastState"] = json!({});
    }
    if !probes && exit_code(&cs) == Some(0) {
        cs["ready"] = json!(true);
    }
    cs
}

fn state_is(cs: &Value, state: &str) -> bool {
    cs["state"].get(state).is_some()
}

fn exit_code(cs: &Value) -> Option<i64> {
    cs.pointer("/state/terminated/exitCode")
        .and_then(Value::as_i64)
}

/// The pod phase (§4).
fn phase(
    policy: &str,
    init: &[Value],
    app: &[Value],
    terminating: bool,
    previous: Option<&str>,
) -> &'static str {
    if matches!(previous, Some("Succeeded")) {
        return "Succeeded";
    }
    if matches!(previous, Some("Failed")) {
        return "Failed";
    }
    let app_started = app.iter().any(|c| {
        state_is(c, "running") || state_is(c, "terminated") || c["restartCount"].as_i64() > Some(0)
    });
    let init_failed = init.iter().any(|c| exit_code(c).is_some_and(|e| e != 0));
    let init_pending = init.iter().any(|c| exit_code(c) != Some(0));
    if init_failed && policy == "Never" {
        return "Failed";
    }
    let waiting = app
        .iter()
        .any(|c| state_is(c, "waiting") && c["lastState"].get("terminated").is_none());
    if (init_pending && !app_started) || waiting {
        return "Pending";
    }
    let running = app.iter().filter(|c| state_is(c, "running")).count();
    if running > 0 {
        return "Running";
    }
    let stopped: Vec<&Value> = app
        .iter()
        .filter(|c| state_is(c, "terminated") || c["lastState"].get("terminated").is_some())
        .collect();
    if stopped.is_empty() {
        return "Pending";
    }
    let code = |c: &Value| {
        exit_code(c).or_else(|| {
            c.pointer("/lastState/terminated/exitCode")
                .and_then(Value::as_i64)
        })
    };
    let all_succeeded = stopped.iter().all(|c| code(c) == Some(0));
    if terminating {
        return if all_succeeded { "Succeeded" } else { "Failed" };
    }
    match policy {
        "Always" => "Running",
        _ if all_succeeded => "Succeeded",
        "Never" => "Failed",
        _ => "Running",
    }
}

/// `[a b]`, as the Go kubelet prints a list of names.
fn go_list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

/// The pod's status as the agent reports it.
pub fn build(inp: &Inputs<'_>) -> Value {
    let pod = inp.pod;
    let spec = &pod["spec"];
    let policy = spec["restartPolicy"].as_str().unwrap_or("Always");
    let none = Vec::new();
    let init_specs = spec["initContainers"].as_array().unwrap_or(&none);
    let app_specs = spec["containers"].as_array().unwrap_or(&none);
    let init: Vec<Value> = init_specs
        .iter()
        .map(|c| container_status(inp, c, "PodInitializing", false))
        .collect();
    let inits_done = init.iter().all(|c| exit_code(c) == Some(0));
    let app_default = if inits_done {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let app: Vec<Value> = app_specs
        .iter()
        .map(|c| container_status(inp, c, app_default, true))
        .collect();
    let previous = pod.pointer("/status/phase").and_then(Value::as_str);
    let phase = phase(policy, &init, &app, inp.terminating, previous);

    let mut status = json!({
        "phase": phase,
        "hostIP": inp.node_ip,
        "hostIPs": [{"ip": inp.node_ip}],
        "startTime": pod.pointer("/status/startTime").cloned().unwrap_or_else(|| json!(crate::types::now())),
        "containerStatuses": app,
        "qosClass": qos_class(spec),
    });
    if let Some(primary) = inp.pod_ips.first() {
        status["podIP"] = json!(primary);
        let all: Vec<Value> = inp.pod_ips.iter().map(|ip| json!({"ip": ip})).collect();
        status["podIPs"] = Value::Array(all);
    }
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    // Conditions: others' are kept, the agent's are computed; transition times move only
    // when a status changes.
    let mut holder = json!({"status": {"conditions": pod.pointer("/status/conditions").cloned().unwrap_or_else(|| json!([]))}});
    for c in conditions(phase, init_specs, &init, &app) {
        crate::types::set_condition(&mut holder, c);
    }
    status["conditions"] = holder["status"]["conditions"].take();
    status
}

/// Whether the agent owns this pod condition (`PodConditionsByKubelet`): the ones
/// [`build`] computes; others' it keeps as they are.
pub fn owns_condition(c: &Value) -> bool {
    matches!(
        c["type"].as_str(),
        Some("PodScheduled" | "Initialized" | "ContainersReady" | "Ready")
    )
}

fn conditions(phase: &str, init_specs: &[Value], init: &[Value], app: &[Value]) -> Vec<Value> {
    let cond = |kind: &str, ok: bool, reason: &str, message: String| {
        let mut c = json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null});
        if !reason.is_empty() {
            c["reason"] = json!(reason);
        }
        if !message.is_empty() {
            c["message"] = json!(message);
        }
        c
    };
    let app_started = app
        .iter()
        .any(|c| c["started"] == true || c["restartCount"].as_i64() > Some(0));
    let incomplete: Vec<String> = init
        .iter()
        .filter(|c| exit_code(c) != Some(0))
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    let initialized = if phase == "Succeeded" {
        cond("Initialized", true, "PodCompleted", String::new())
    } else if init_specs.is_empty() || incomplete.is_empty() || app_started {
        cond("Initialized", true, "", String::new())
    } else {
        cond(
            "Initialized",
            false,
            "ContainersNotInitialized",
            format!(
                "containers with incomplete status: {}",
                go_list(&incomplete)
            ),
        )
    };
    let unready: Vec<String> = app
        .iter()
        .filter(|c| c["ready"] != true)
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    let ready = match phase {
        "Succeeded" => cond("ContainersReady", false, "PodCompleted", String::new()),
        "Failed" => cond("ContainersReady", false, "PodFailed", String::new()),
        _ if app.is_empty() => cond(
            "ContainersReady",
            false,
            "UnknownContainerStatuses",
            String::new(),
        ),
        _ if unready.is_empty() => cond("ContainersReady", true, "", String::new()),
        _ => cond(
            "ContainersReady",
            false,
            "ContainersNotReady",
            format!("containers with unready status: {}", go_list(&unready)),
        ),
    };
    let mut pod_ready = ready.clone();
    pod_ready["type"] = json!("Ready");
    vec![
        cond("PodScheduled", true, "", String::new()),
        initialized,
        ready,
        pod_ready,
    ]
}

/// `Guaranteed`, `Burstable` or `BestEffort` (§2.2).
pub fn qos_class(spec: &Value) -> &'static str {
    let all: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect();
    let res = |c: &Value, kind: &str| -> BTreeMap<String, String> {
        c.pointer(&format!("/resources/{kind}"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| matches!(k.as_str(), "cpu" | "memory"))
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    if all
        .iter()
        .all(|c| res(c, "requests").is_empty() && res(c, "limits").is_empty())
    {
        return "BestEffort";
    }
    let guaranteed = all.iter().all(|c| {
        let limits = res(c, "limits");
        let requests = res(c, "requests");
        limits.contains_key("cpu")
            && limits.contains_key("memory")
            && (requests.is_empty() || requests == limits)
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ContainerId;

    fn inst(name: &str, attempt: u32, state: State, code: Option<i32>) -> ContainerStatus {
        ContainerStatus {
            id: ContainerId {
                pod_uid: "u".into(),
                name: name.into(),
                attempt,
            },
            hash: "h".into(),
            image: "i".into(),
            state,
            created_at: "2026-01-01T00:00:00Z".into(),
            started_at: Some("2026-01-01T00:00:01.5Z".into()),
            finished_at: code.map(|_| "2026-01-01T00:00:02Z".into()),
            exit_code: code,
            signal: None,
            error: None,
            reason: None,
            message: None,
            pid: Some(1),
        }
    }

    fn pod(policy: &str) -> Value {
        json!({"spec": {"restartPolicy": policy, "containers": [{"name": "a", "image": "i"}]},
               "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}})
    }

    fn build_with(
        pod: &Value,
        instances: &[ContainerStatus],
        waiting: &HashMap<String, Waiting>,
    ) -> Value {
        build(&Inputs {
            pod,
            instances,
            waiting,
            node_ip: "10.0.0.1",
            pod_ips: &["10.0.0.1".to_string()],
            terminating: false,
            probed: &HashMap::new(),
        })
    }

    fn cond<'a>(st: &'a Value, kind: &str) -> &'a Value {
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn a_pod_with_nothing_started_is_pending_and_creating() {
        let st = build_with(&pod("Always"), &[], &HashMap::new());
        assert_eq!(st["phase"], "Pending");
        assert_eq!(
            st["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ContainerCreating"
        );
        assert_eq!(cond(&st, "Ready")["status"], "False");
        assert_eq!(
            cond(&st, "Ready")["message"],
            "containers with unready status: [a]"
        );
        assert_eq!(st["qosClass"], "BestEffort");
        assert_eq!(st["podIP"], "10.0.0.1");
    }

    #[test]
    fn a_dual_stack_pod_lists_both_addresses_ipv4_first() {
        let ips = ["10.42.0.5".to_string(), "fd42::5".to_string()];
        let st = build(&Inputs {
            pod: &pod("Always"),
            instances: &[],
            waiting: &HashMap::new(),
            node_ip: "10.0.0.1",
            pod_ips: &ips,
            terminating: false,
            probed: &HashMap::new(),
        });
        assert_eq!(st["podIP"], "10.42.0.5");
        assert_eq!(
            st["podIPs"],
            json!([{"ip": "10.42.0.5"}, {"ip": "fd42::5"}])
        );
        assert_eq!(st["hostIPs"], json!([{"ip": "10.0.0.1"}]));
        let none = build(&Inputs {
            pod: &pod("Always"),
            instances: &[],
            waiting: &HashMap::new(),
            node_ip: "10.0.0.1",
            pod_ips: &[],
            terminating: false,
            probed: &HashMap::new(),
        });
        assert!(none.get("podIP").is_none() && none.get("podIPs").is_none());
    }

    #[test]
    fn a_running_container_makes_the_pod_running_and_ready() {
        let st = build_with(
            &pod("Always"),
            &[inst("a", 0, State::Running, None)],
            &HashMap::new(),
        );
        assert_eq!(st["phase"], "Running");
        let cs = &st["containerStatuses"][0];
        assert_eq!(cs["state"]["running"]["startedAt"], "2026-01-01T00:00:01Z");
        assert_eq!(cs["ready"], true);
        assert_eq!(cs["containerID"], "process://u/a/0");
        assert_eq!(cond(&st, "Ready")["status"], "True");
        assert_eq!(cond(&st, "ContainersReady")["status"], "True");
    }

    #[test]
    fn exits_decide_the_phase_by_restart_policy() {
        let ok = [inst("a", 0, State::Exited, Some(0))];
        let bad = [inst("a", 0, State::Exited, Some(2))];
        assert_eq!(
            build_with(&pod("Never"), &ok, &HashMap::new())["phase"],
            "Succeeded"
        );
        assert_eq!(
            build_with(&pod("Never"), &bad, &HashMap::new())["phase"],
            "Failed"
        );
        assert_eq!(
            build_with(&pod("OnFailure"), &ok, &HashMap::new())["phase"],
            "Succeeded"
        );
        assert_eq!(
            build_with(&pod("Always"), &ok, &HashMap::new())["phase"],
            "Running"
        );
        let st = build_with(&pod("Never"), &bad, &HashMap::new());
        let t = &st["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(2), Some("Error"))
        );
        assert_eq!(cond(&st, "Ready")["reason"], "PodFailed");
    }

    #[test]
    fn a_crash_looping_container_waits_with_its_last_state() {
        let mut waiting = HashMap::new();
        waiting.insert(
            "a".to_string(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 10s restarting failed container=a pod=p_ns(u)".into(),
            },
        );
        let instances = [
            inst("a", 0, State::Exited, Some(1)),
            inst("a", 1, State::Exited, Some(1)),
        ];
        let st = build_with(&pod("Always"), &instances, &waiting);
        let cs = &st["containerStatuses"][0];
        assert_eq!(cs["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(cs["restartCount"], 1);
        assert_eq!(st["phase"], "Running");
    }

    #[test]
    fn an_oom_kill_is_the_reason_a_container_ended() {
        let mut killed = inst("a", 0, State::Exited, Some(137));
        killed.signal = Some(9);
        killed.reason = Some("OOMKilled".into());
        let st = build_with(&pod("Never"), &[killed], &HashMap::new());
        let t = &st["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(137), Some("OOMKilled"))
        );
        assert_eq!(st["phase"], "Failed");
    }

    #[test]
    fn a_restarted_container_shows_the_previous_exit_as_last_state() {
        let instances = [
            inst("a", 0, State::Exited, Some(3)),
            inst("a", 1, State::Running, None),
        ];
        let st = build_with(&pod("Always"), &instances, &HashMap::new());
        let cs = &st["containerStatuses"][0];
        assert!(cs["state"]["running"].is_object());
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 3);
        assert_eq!(cs["restartCount"], 1);
    }

    #[test]
    fn init_containers_gate_the_app_containers() {
        let p = json!({"spec": {"restartPolicy": "Always",
            "initContainers": [{"name": "setup", "image": "i"}],
            "containers": [{"name": "a", "image": "i"}]}});
        let st = build_with(
            &p,
            &[inst("setup", 0, State::Running, None)],
            &HashMap::new(),
        );
        assert_eq!(st["phase"], "Pending");
        assert_eq!(
            st["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert_eq!(
            cond(&st, "Initialized")["message"],
            "containers with incomplete status: [setup]"
        );
        let done = [
            inst("setup", 0, State::Exited, Some(0)),
            inst("a", 0, State::Running, None),
        ];
        let st = build_with(&p, &done, &HashMap::new());
        assert_eq!(st["phase"], "Running");
        assert_eq!(cond(&st, "Initialized")["status"], "True");
    }

    #[test]
    fn terminal_phases_stick_and_start_time_is_kept() {
        let mut p = pod("Always");
        p["status"]["phase"] = json!("Failed");
        p["status"]["startTime"] = json!("2020-01-01T00:00:00Z");
        let st = build_with(&p, &[inst("a", 0, State::Running, None)], &HashMap::new());
        assert_eq!(st["phase"], "Failed");
        assert_eq!(st["startTime"], "2020-01-01T00:00:00Z");
    }

    #[test]
    fn qos_classes() {
        let c = |r: Value| json!({"containers": [{"name": "a", "resources": r}]});
        assert_eq!(qos_class(&c(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&c(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&c(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
    }
}
