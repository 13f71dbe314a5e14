//! PodDisruptionBudgets and evictions against a real server: the disruption controller's
//! figures from the pods and their controllers' scale, evictions that the budget allows,
//! refuses (429 with upstream's Status) or cannot judge (two budgets: 500), pods not
//! running that skip the budget, the unhealthy-pod policies, and `kubectl drain` through
//! the eviction API. No node agent runs here; the tests mark pods ready themselves.

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
const RSS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn replica_set(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    })
}

fn budget(name: &str, app: &str, spec: Value) -> Value {
    let mut b = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": app}}},
    });
    if let (Some(dst), Value::Object(extra)) = (b["spec"].as_object_mut(), spec) {
        dst.extend(extra);
    }
    b
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

async fn pods(s: &TestServer, app: &str) -> Vec<Value> {
    let (code, list) = s.get(&format!("{PODS}?labelSelector=app%3D{app}")).await;
    assert_eq!(code, 200, "{list}");
    let mut items: Vec<Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect();
    items.sort_by_key(name);
    items
}

async fn set_ready(s: &TestServer, pod: &str, ready: bool) {
    let state = if ready { "True" } else { "False" };
    let (code, out) = s
        .patch(
            &format!("{PODS}/{pod}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": state, "lastTransitionTime": berth::types::now()}
            ]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

/// Waits for `n` live pods of `app` and makes them all Running and Ready.
async fn ready_pods(s: &TestServer, app: &str, n: usize) -> Vec<Value> {
    let live = eventually(20, &format!("{n} pods of {app}"), || async {
        let live = pods(s, app).await;
        if live.len() == n {
            Ok(live)
        } else {
            Err(format!("{}", live.len()))
        }
    })
    .await;
    for p in &live {
        set_ready(s, &name(p), true).await;
    }
    live
}

/// Waits until the budget's status has `want`'s figures (and its generation observed).
async fn status_is(s: &TestServer, pdb: &str, want: Value) -> Value {
    eventually(20, &format!("{pdb}'s status is {want}"), || async {
        let (_, obj) = s.get(&format!("{PDBS}/{pdb}")).await;
        let st = &obj["status"];
        let same = want.as_object().unwrap().iter().all(|(k, v)| &st[k] == v)
            && st["observedGeneration"] == obj["metadata"]["generation"];
        if same { Ok(obj) } else { Err(st.to_string()) }
    })
    .await
}

fn condition(obj: &Value) -> &Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .unwrap_or(&Value::Null)
}

async fn evict(s: &TestServer, pod: &str, version: &str) -> (u16, Value) {
    s.post(
        &format!("{PODS}/{pod}/eviction"),
        json!({"apiVersion": format!("policy/{version}"), "kind": "Eviction",
               "metadata": {"name": pod, "namespace": "default"}}),
    )
    .await
}

#[tokio::test]
async fn a_budget_counts_healthy_pods_against_its_controllers_scale() {
    let s = TestServer::start().await;
    let (code, out) = s.post(RSS, replica_set("web", 3)).await;
    assert_eq!(code, 201, "{out}");
    let (code, made) = s
        .post(PDBS, budget("web", "web", json!({"minAvailable": 2})))
        .await;
    assert_eq!(code, 201, "{made}");
    let live = ready_pods(&s, "web", 3).await;
    let obj = status_is(
        &s,
        "web",
        json!({"expectedPods": 3, "desiredHealthy": 2, "currentHealthy": 3, "disruptionsAllowed": 1}),
    )
    .await;
    let c = condition(&obj);
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("True"), &json!("SufficientPods"))
    );
    // One pod unready: nothing may be disrupted.
    set_ready(&s, &name(&live[0]), false).await;
    let obj = status_is(
        &s,
        "web",
        json!({"currentHealthy": 2, "disruptionsAllowed": 0}),
    )
    .await;
    assert_eq!(condition(&obj)["reason"], "InsufficientPods");

    // A percentage is of the Deployment's replicas, not of its set's.
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    });
    let (code, out) = s.post(DEPLOYS, deploy).await;
    assert_eq!(code, 201, "{out}");
    let (code, _) = s
        .post(PDBS, budget("api", "api", json!({"maxUnavailable": "50%"})))
        .await;
    assert_eq!(code, 201);
    ready_pods(&s, "api", 4).await;
    status_is(
        &s,
        "api",
        json!({"expectedPods": 4, "desiredHealthy": 2, "currentHealthy": 4, "disruptionsAllowed": 2}),
    )
    .await;

    // Pods of a kind without a scale cannot be counted: the budget fails safe.
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    });
    let (code, out) = s
        .post("/apis/apps/v1/namespaces/default/daemonsets", ds)
        .await;
    assert_eq!(code, 201, "{out}");
    crate::daemonsets::make_node(&s, "n1", json!({}), json!([])).await;
    ready_pods(&s, "agent", 1).await;
    let (code, _) = s
        .post(PDBS, budget("agent", "agent", json!({"maxUnavailable": 1})))
        .await;
    assert_eq!(code, 201);
    let obj = eventually(20, "agent's budget fails safe", || async {
        let (_, obj) = s.get(&format!("{PDBS}/agent")).await;
        if condition(&obj)["reason"] == "SyncFailed" {
            Ok(obj)
        } else {
            Err(obj["status"].to_string())
        }
    })
    .await;
    assert_eq!(obj["status"]["disruptionsAllowed"], 0);
    assert!(
        condition(&obj)["message"]
            .as_str()
            .unwrap()
            .starts_with("found no controllers for pod \"agent-"),
        "{obj}"
    );

    // kubectl's columns.
    let table = s.table(PDBS).await;
    let names = crate::support::column_names(&table);
    assert_eq!(
        names,
        [
            "Name",
            "Min Available",
            "Max Unavailable",
            "Allowed Disruptions",
            "Age"
        ]
    );
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "api")
        .unwrap();
    assert_eq!(row["cells"][1], "N/A");
    assert_eq!(row["cells"][2], "50%");
    assert_eq!(row["cells"][3], 2);
}

#[tokio::test]
async fn an_eviction_takes_a_disruption_and_is_refused_when_none_is_left() {
    let s = TestServer::start().await;
    let (code, _) = s.post(RSS, replica_set("web", 2)).await;
    assert_eq!(code, 201);
    let (code, _) = s
        .post(PDBS, budget("web", "web", json!({"minAvailable": 1})))
        .await;
    assert_eq!(code, 201);
    let live = ready_pods(&s, "web", 2).await;
    status_is(
        &s,
        "web",
        json!({"disruptionsAllowed": 1, "currentHealthy": 2}),
    )
    .await;
    let (_, list) = s.get(PODS).await;
    let mut w = s
        .watch(&format!(
            "{PODS}?watch=true&resourceVersion={}&fieldSelector=metadata.name%3D{}",
            list["metadata"]["resourceVersion"].as_str().unwrap(),
            name(&live[0])
        ))
        .await;
    let (code, out) = evict(&s, &name(&live[0]), "v1").await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["status"], "Success");
    let (code, _) = s.get(&format!("{PODS}/{}", name(&live[0]))).await;
    assert_eq!(code, 404, "the evicted pod is gone");
    // It was marked as disrupted by the eviction before it went.
    let gone = loop {
        let e = w.next_change().await;
        if e["type"] == "DELETED" {
            break e["object"].clone();
        }
    };
    let c = berth::types::condition(&gone, "DisruptionTarget").expect("the condition");
    assert_eq!(
        (&c["status"], &c["reason"], &c["message"]),
        (
            &json!("True"),
            &json!("EvictionByEvictionAPI"),
            &json!("Eviction API: evicting")
        )
    );
    // The budget is spent (the controller's figures count the pod gone): the other pod
    // stays.
    status_is(
        &s,
        "web",
        json!({"disruptionsAllowed": 0, "currentHealthy": 1}),
    )
    .await;
    let (code, out) = evict(&s, &name(&live[1]), "v1beta1").await;
    assert_eq!(code, 429, "{out}");
    assert_eq!(out["reason"], "TooManyRequests");
    assert_eq!(
        out["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let cause = &out["details"]["causes"][0];
    assert_eq!(cause["reason"], "DisruptionBudget");
    assert_eq!(
        cause["message"],
        "The disruption budget web needs 1 healthy pods and has 1 currently"
    );
    let (code, _) = s.get(&format!("{PODS}/{}", name(&live[1]))).await;
    assert_eq!(code, 200);
    // The replacement is Pending: a pod not running skips the budget.
    let replacement = eventually(20, "a replacement pod", || async {
        let live = pods(&s, "web").await;
        live.iter()
            .find(|p| p["status"]["phase"] == "Pending")
            .cloned()
            .ok_or_else(|| format!("{live:?}"))
    })
    .await;
    let (code, out) = evict(&s, &name(&replacement), "v1").await;
    assert_eq!(code, 201, "{out}");
    // A name that is not the pod's is refused.
    let (code, out) = s
        .post(
            &format!("{PODS}/{}/eviction", name(&live[1])),
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}),
        )
        .await;
    assert_eq!(code, 400, "{out}");
    assert_eq!(
        out["message"],
        "name in URL does not match name in Eviction object"
    );
}

#[tokio::test]
async fn two_budgets_over_one_pod_cannot_judge_an_eviction() {
    let s = TestServer::start().await;
    let (code, _) = s.post(RSS, replica_set("web", 2)).await;
    assert_eq!(code, 201);
    for b in ["a", "b"] {
        let (code, _) = s
            .post(PDBS, budget(b, "web", json!({"maxUnavailable": 1})))
            .await;
        assert_eq!(code, 201);
    }
    let live = ready_pods(&s, "web", 2).await;
    status_is(&s, "a", json!({"disruptionsAllowed": 1})).await;
    status_is(&s, "b", json!({"disruptionsAllowed": 1})).await;
    let (code, out) = evict(&s, &name(&live[0]), "v1").await;
    assert_eq!(code, 500, "{out}");
    assert_eq!(
        out["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    let (code, _) = s.get(&format!("{PODS}/{}", name(&live[0]))).await;
    assert_eq!(code, 200, "the pod stays");
}

#[tokio::test]
async fn an_unhealthy_pod_is_evicted_only_as_the_budget_policy_allows() {
    let s = TestServer::start().await;
    let (code, _) = s.post(RSS, replica_set("web", 2)).await;
    assert_eq!(code, 201);
    let (code, _) = s
        .post(PDBS, budget("web", "web", json!({"minAvailable": 2})))
        .await;
    assert_eq!(code, 201);
    let live = ready_pods(&s, "web", 2).await;
    let sick = name(&live[0]);
    set_ready(&s, &sick, false).await;
    status_is(
        &s,
        "web",
        json!({"currentHealthy": 1, "desiredHealthy": 2, "disruptionsAllowed": 0}),
    )
    .await;
    // IfHealthyBudget (the default): the budget is not met, so not even an unready pod.
    let (code, out) = evict(&s, &sick, "v1").await;
    assert_eq!(code, 429, "{out}");
    // AlwaysAllow: an unready pod may always go.
    let (code, out) = s
        .patch(
            &format!("{PDBS}/web"),
            "application/merge-patch+json",
            json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = s
        .patch(
            &format!("{PDBS}/web"),
            "application/merge-patch+json",
            json!({"spec": {"unhealthyPodEvictionPolicy": "Sometimes"}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    let (code, out) = evict(&s, &sick, "v1").await;
    assert_eq!(code, 201, "{out}");
    // Both minAvailable and maxUnavailable: 422.
    let (code, out) = s
        .post(
            PDBS,
            budget(
                "bad",
                "web",
                json!({"minAvailable": 1, "maxUnavailable": 1}),
            ),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("minAvailable and maxUnavailable cannot be both set"),
        "{out}"
    );
}

/// `kubectl drain` evicts through the API (sent in protobuf), honours the budget and
/// skips DaemonSet pods; `cordon` and `uncordon` flip the node. Needs a kubectl on the
/// PATH.
#[tokio::test]
async fn kubectl_drain_evicts_within_the_budget_and_skips_daemon_pods() {
    let Ok(kubectl) = which_kubectl() else {
        eprintln!("no kubectl on PATH: kubectl drain is not tried");
        return;
    };
    let s = TestServer::start().await;
    crate::daemonsets::make_node(&s, "n1", json!({}), json!([])).await;
    let mut rs = replica_set("web", 2);
    rs["spec"]["template"]["spec"]["nodeName"] = json!("n1");
    let (code, _) = s.post(RSS, rs).await;
    assert_eq!(code, 201);
    let ds = crate::daemonsets::daemon_set("agent", "i", Value::Null);
    let (code, out) = s
        .post("/apis/apps/v1/namespaces/default/daemonsets", ds)
        .await;
    assert_eq!(code, 201, "{out}");
    let (code, _) = s
        .post(PDBS, budget("web", "web", json!({"minAvailable": 1})))
        .await;
    assert_eq!(code, 201);
    ready_pods(&s, "web", 2).await;
    eventually(20, "the daemon pod is bound", || async {
        crate::daemonsets::tick(&s, "agent", |_| true).await;
        let p = pods(&s, "agent").await;
        if p.len() == 1 && !p[0]["spec"]["nodeName"].is_null() {
            Ok(())
        } else {
            Err(format!("{p:?}"))
        }
    })
    .await;
    status_is(&s, "web", json!({"disruptionsAllowed": 1})).await;
    let run = |args: &'static [&'static str]| {
        let kubectl = kubectl.clone();
        let config = s.kubeconfig();
        async move {
            tokio::process::Command::new(kubectl)
                .args(args)
                .env("KUBECONFIG", config)
                .kill_on_drop(true)
                .output()
                .await
                .unwrap()
        }
    };
    let out = run(&["cordon", "n1"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "node/n1 cordoned\n",
        "{out:?}"
    );
    let (_, node) = s.get("/api/v1/nodes/n1").await;
    assert_eq!(node["spec"]["unschedulable"], true);
    // The budget lets one pod go; the second waits until the first is replaced and ready,
    // which the test plays while kubectl retries.
    let drain = tokio::spawn(run(&[
        "drain",
        "n1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=60s",
    ]));
    while !drain.is_finished() {
        // The node's agent: evicted pods finish, replacements become ready.
        crate::daemonsets::tick(&s, "web", |_| true).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let out = drain.await.unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("node/n1 drained"), "{said}");
    assert!(said.contains("evicting pod default/web-"), "{said}");
    assert!(
        said.contains("Warning: ignoring DaemonSet-managed Pods: default/agent-"),
        "{said}"
    );
    assert!(
        said.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "the second eviction waited for the budget: {said}"
    );
    // The daemon pod stays.
    assert_eq!(pods(&s, "agent").await.len(), 1);
    let out = run(&["uncordon", "n1"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "node/n1 uncordoned\n",
        "{out:?}"
    );
}

fn which_kubectl() -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .ok_or(())
}
