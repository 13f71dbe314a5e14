//! The daemon set controller against a real server: one pod on each node its selector,
//! affinity and taints allow, nodes coming, changing and going, rolling updates within
//! maxUnavailable or with maxSurge, OnDelete, history and bad specs. No node agent runs
//! here: the nodes are Node objects the tests make, and the tests play their agents by
//! marking bound pods ready and finishing the deletions of terminating ones.

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const DSS: &str = "/apis/apps/v1/namespaces/default/daemonsets";
const REVISIONS: &str = "/apis/apps/v1/namespaces/default/controllerrevisions";
const PODS: &str = "/api/v1/namespaces/default/pods";
const HASH: &str = "controller-revision-hash";

pub fn daemon_set(name: &str, image: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    })
}

/// A Ready node with room for pods, with `labels` and `taints`.
pub async fn make_node(s: &TestServer, name: &str, labels: Value, taints: Value) {
    let (code, made) = s
        .post(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": name, "labels": labels},
                   "spec": {"taints": taints}}),
        )
        .await;
    assert_eq!(code, 201, "{made}");
    let (code, out) = s
        .patch(
            &format!("/api/v1/nodes/{name}/status"),
            "application/merge-patch+json",
            json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "lastHeartbeatTime": berth::types::now()}],
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            }}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

fn node_of(p: &Value) -> &str {
    p["spec"]["nodeName"].as_str().unwrap_or("")
}

fn image_of(pod: &Value) -> &str {
    pod["spec"]["containers"][0]["image"].as_str().unwrap_or("")
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn deleting(p: &Value) -> bool {
    !p["metadata"]["deletionTimestamp"].is_null()
}

/// Every pod labelled `app=<app>`, terminating ones too.
pub async fn all_pods(s: &TestServer, app: &str) -> Vec<Value> {
    let (code, list) = s.get(&format!("{PODS}?labelSelector=app%3D{app}")).await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

async fn live_pods(s: &TestServer, app: &str) -> Vec<Value> {
    all_pods(s, app)
        .await
        .into_iter()
        .filter(|p| !deleting(p))
        .collect()
}

/// Plays the nodes' agents once: terminating pods are finished, and bound pods that
/// `ready` picks become Running and Ready. Returns the live pods as they were.
pub async fn tick(s: &TestServer, app: &str, ready: impl Fn(&Value) -> bool) -> Vec<Value> {
    tick_seen(s, app, ready).await.0
}

/// As [`tick`], and also names the terminating pods it finished, in the order of the
/// list it read, so that a caller recording deletions sees every one of them.
pub async fn tick_seen(
    s: &TestServer,
    app: &str,
    ready: impl Fn(&Value) -> bool,
) -> (Vec<Value>, Vec<String>) {
    let mut live = Vec::new();
    let mut finished = Vec::new();
    for p in all_pods(s, app).await {
        if deleting(&p) {
            let (code, out) = s
                .delete(&format!("{PODS}/{}?gracePeriodSeconds=0", name(&p)))
                .await;
            assert!(code == 200 || code == 404, "{out}");
            finished.push(name(&p));
            continue;
        }
        if !node_of(&p).is_empty() && !is_ready(&p) && ready(&p) {
            let (code, out) = s
                .patch(
                    &format!("{PODS}/{}/status", name(&p)),
                    "application/merge-patch+json",
                    json!({"status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": berth::types::now()}
                    ]}}),
                )
                .await;
            assert!(code == 200 || code == 404, "{out}");
        }
        live.push(p);
    }
    (live, finished)
}

/// The nodes the live pods of `app` are bound to, sorted.
async fn nodes_running(s: &TestServer, app: &str) -> Vec<String> {
    let mut nodes: Vec<String> = live_pods(s, app)
        .await
        .iter()
        .map(|p| node_of(p).to_string())
        .collect();
    nodes.sort();
    nodes
}

async fn wait_nodes(s: &TestServer, app: &str, want: &[&str]) {
    eventually(20, &format!("{app} runs on {want:?}"), || async {
        tick(s, app, |_| true).await;
        let got = nodes_running(s, app).await;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// Waits until every desired node runs an updated, available pod (playing the agents).
async fn rolled_out(s: &TestServer, ds: &str, nodes: i64) -> Value {
    eventually(30, &format!("{ds} rolled out"), || async {
        tick(s, ds, |_| true).await;
        let (_, obj) = s.get(&format!("{DSS}/{ds}")).await;
        let st = &obj["status"];
        let done = st["observedGeneration"] == obj["metadata"]["generation"]
            && st["desiredNumberScheduled"] == nodes
            && st["updatedNumberScheduled"] == nodes
            && st["numberAvailable"] == nodes
            && live_pods(s, ds).await.len() as i64 == nodes;
        if done { Ok(obj) } else { Err(st.to_string()) }
    })
    .await
}

async fn set_image(s: &TestServer, ds: &str, image: &str) {
    let (code, out) = s
        .patch(
            &format!("{DSS}/{ds}"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

pub async fn event_messages(s: &TestServer, ds: &str) -> Vec<String> {
    let (_, list) = s
        .get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{ds}"
        ))
        .await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn a_daemon_set_runs_one_pod_on_each_node_it_fits_and_follows_the_nodes() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({"disk": "ssd"}), json!([])).await;
    let dedicated = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
    make_node(&s, "n2", json!({"disk": "ssd"}), dedicated).await;
    make_node(&s, "n3", json!({}), json!([])).await;
    let mut ds = daemon_set("agent", "v1", Value::Null);
    ds["spec"].as_object_mut().unwrap().remove("updateStrategy");
    ds["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    let (code, made) = s.post(DSS, ds).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(
        made["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(made["spec"]["revisionHistoryLimit"], 10);
    // n2's taint is not tolerated, n3 lacks the label.
    wait_nodes(&s, "agent", &["n1"]).await;
    let pod = &live_pods(&s, "agent").await[0];
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchFields"][0],
        json!({"key": "metadata.name", "operator": "In", "values": ["n1"]})
    );
    assert!(
        pod["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unschedulable" && t["effect"] == "NoSchedule")
    );
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
    // The pod carries the hash of the one revision.
    let (_, revs) = s
        .get(&format!("{REVISIONS}?labelSelector=app%3Dagent"))
        .await;
    let revs = revs["items"].as_array().unwrap().clone();
    assert_eq!(revs.len(), 1, "{revs:?}");
    assert_eq!(revs[0]["revision"], 1);
    assert_eq!(
        pod["metadata"]["labels"][HASH],
        revs[0]["metadata"]["labels"][HASH]
    );
    let st = rolled_out(&s, "agent", 1).await["status"].clone();
    assert_eq!(
        (
            &st["currentNumberScheduled"],
            &st["numberReady"],
            &st["numberMisscheduled"]
        ),
        (&json!(1), &json!(1), &json!(0))
    );

    // A new node that fits gets a pod; so does a node relabelled to fit.
    make_node(&s, "n4", json!({"disk": "ssd"}), json!([])).await;
    wait_nodes(&s, "agent", &["n1", "n4"]).await;
    let (code, out) = s
        .patch(
            "/api/v1/nodes/n3",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"disk": "ssd"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    wait_nodes(&s, "agent", &["n1", "n3", "n4"]).await;
    // A node that stops fitting loses its pod, and so does a node that is gone.
    let (code, out) = s
        .patch(
            "/api/v1/nodes/n1",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"disk": null}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = s.delete("/api/v1/nodes/n4").await;
    assert_eq!(code, 200, "{out}");
    wait_nodes(&s, "agent", &["n3"]).await;
    rolled_out(&s, "agent", 1).await;
    let events = event_messages(&s, "agent").await;
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("SuccessfulCreate Created pod: agent-")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("SuccessfulDelete Deleted pod: agent-")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_rolling_update_leaves_at_most_max_unavailable_nodes_without_a_pod() {
    let s = TestServer::start().await;
    for n in ["n1", "n2", "n3"] {
        make_node(&s, n, json!({}), json!([])).await;
    }
    let (code, made) = s.post(DSS, daemon_set("agent", "v1", Value::Null)).await;
    assert_eq!(code, 201, "{made}");
    rolled_out(&s, "agent", 3).await;
    set_image(&s, "agent", "v2").await;
    eventually(30, "rolled out to v2 one node at a time", || async {
        let live = tick(&s, "agent", |_| true).await;
        let available = live.iter().filter(|p| is_ready(p)).count();
        assert!(available >= 2, "more than one node unavailable: {live:?}");
        let (_, obj) = s.get(&format!("{DSS}/agent")).await;
        let done = live.len() == 3
            && live.iter().all(|p| image_of(p) == "v2" && is_ready(p))
            && obj["status"]["updatedNumberScheduled"] == 3
            && obj["status"]["numberAvailable"] == 3;
        if done {
            Ok(())
        } else {
            Err(obj["status"].to_string())
        }
    })
    .await;
    let (_, revs) = s
        .get(&format!("{REVISIONS}?labelSelector=app%3Dagent"))
        .await;
    let mut numbers: Vec<i64> = revs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["revision"].as_i64().unwrap())
        .collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);
    // berth's rollout status and describe, as kubectl's.
    let run = s.berth(&["rollout", "status", "ds/agent"]).await;
    crate::support::ok(&run, "daemon set \"agent\" successfully rolled out\n");
    let run = s.berth(&["describe", "ds/agent"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    for line in [
        "Name:           agent",
        "Node-Selector:  <none>",
        "Desired Number of Nodes Scheduled: 3",
        "Number of Nodes Scheduled with Up-to-date Pods: 3",
        "Pods Status:  3 Running / 0 Waiting / 0 Succeeded / 0 Failed",
        "SuccessfulDelete",
    ] {
        assert!(run.stdout.contains(line), "{line:?} in:\n{}", run.stdout);
    }
    let run = s.berth(&["get", "ds"]).await;
    assert!(
        run.stdout.starts_with(
            "NAME    DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE\nagent   3         3         3       3            3           <none>"
        ),
        "{run:?}"
    );
    // The pods carry the new revision's hash.
    let newest = revs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["revision"] == 2)
        .unwrap()["metadata"]["labels"][HASH]
        .clone();
    assert!(
        live_pods(&s, "agent")
            .await
            .iter()
            .all(|p| p["metadata"]["labels"][HASH] == newest)
    );
}

#[tokio::test]
async fn a_surge_update_starts_the_new_pod_before_the_old_one_goes() {
    let s = TestServer::start().await;
    for n in ["n1", "n2"] {
        make_node(&s, n, json!({}), json!([])).await;
    }
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}});
    let (code, made) = s.post(DSS, daemon_set("agent", "v1", strategy)).await;
    assert_eq!(code, 201, "{made}");
    rolled_out(&s, "agent", 2).await;
    set_image(&s, "agent", "v2").await;
    // One node gets a new pod beside its old one; nothing goes while it is not ready.
    let surged = eventually(20, "a new pod beside an old one", || async {
        let live = tick(&s, "agent", |p| image_of(p) == "v1").await;
        let new: Vec<&Value> = live.iter().filter(|p| image_of(p) == "v2").collect();
        match new.as_slice() {
            [p] if !node_of(p).is_empty() => Ok(node_of(p).to_string()),
            _ => Err(format!("{live:?}")),
        }
    })
    .await;
    for _ in 0..10 {
        let live = tick(&s, "agent", |p| image_of(p) == "v1").await;
        assert_eq!(
            live.len(),
            3,
            "both old pods stay while the new one is unready: {live:?}"
        );
        assert_eq!(
            live.iter().filter(|p| image_of(p) == "v2").count(),
            1,
            "{live:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let on_node = all_pods(&s, "agent")
        .await
        .into_iter()
        .filter(|p| node_of(p) == surged)
        .count();
    assert_eq!(on_node, 2);
    // Ready new pods replace the old ones, one node after the other.
    eventually(30, "surged to v2", || async {
        let live = tick(&s, "agent", |_| true).await;
        assert!(
            live.iter().filter(|p| is_ready(p)).count() >= 2,
            "a node without an available pod: {live:?}"
        );
        let done = live.len() == 2 && live.iter().all(|p| image_of(p) == "v2");
        if done {
            Ok(())
        } else {
            Err(format!("{live:?}"))
        }
    })
    .await;
    rolled_out(&s, "agent", 2).await;
}

#[tokio::test]
async fn on_delete_replaces_only_the_pods_that_are_deleted() {
    let s = TestServer::start().await;
    for n in ["n1", "n2"] {
        make_node(&s, n, json!({}), json!([])).await;
    }
    let (code, made) = s
        .post(DSS, daemon_set("agent", "v1", json!({"type": "OnDelete"})))
        .await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    rolled_out(&s, "agent", 2).await;
    set_image(&s, "agent", "v2").await;
    eventually(20, "the update observed", || async {
        tick(&s, "agent", |_| true).await;
        let (_, obj) = s.get(&format!("{DSS}/agent")).await;
        let st = &obj["status"];
        let seen = st["observedGeneration"] == obj["metadata"]["generation"]
            && st["updatedNumberScheduled"].is_null()
            && st["numberAvailable"] == 2;
        if seen { Ok(()) } else { Err(st.to_string()) }
    })
    .await;
    let live = live_pods(&s, "agent").await;
    assert!(live.iter().all(|p| image_of(p) == "v1"), "{live:?}");
    let run = s.berth(&["rollout", "status", "ds/agent"]).await;
    crate::support::fails(
        &run,
        "error: rollout status is only available for RollingUpdate strategy type\n",
    );
    let victim = live.iter().find(|p| node_of(p) == "n1").unwrap();
    let (code, out) = s
        .delete(&format!("{PODS}/{}?gracePeriodSeconds=0", name(victim)))
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(20, "n1 gets a v2 pod, n2 keeps v1", || async {
        let live = tick(&s, "agent", |_| true).await;
        let image_on = |n: &str| {
            live.iter()
                .find(|p| node_of(p) == n)
                .map(|p| image_of(p).to_string())
        };
        let (one, two) = (image_on("n1"), image_on("n2"));
        if one.as_deref() == Some("v2") && two.as_deref() == Some("v1") && live.len() == 2 {
            Ok(())
        } else {
            Err(format!("{one:?} {two:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn bad_daemon_sets_are_refused_with_their_fields() {
    let s = TestServer::start().await;
    let both =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}});
    let (code, out) = s.post(DSS, daemon_set("bad", "v1", both)).await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        out["details"]["causes"][0]["field"],
        "spec.updateStrategy.rollingUpdate.maxSurge"
    );
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("may not be set when maxUnavailable is non-zero"),
        "{out}"
    );
    let mut mismatch = daemon_set("bad", "v1", Value::Null);
    mismatch["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
    let (code, out) = s.post(DSS, mismatch).await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        out["details"]["causes"][0]["field"],
        "spec.template.metadata.labels"
    );
    let mut no_selector = daemon_set("bad", "v1", Value::Null);
    no_selector["spec"]
        .as_object_mut()
        .unwrap()
        .remove("selector");
    let (code, out) = s.post(DSS, no_selector).await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(out["details"]["causes"][0]["field"], "spec.selector");
    let (code, _) = s.post(DSS, daemon_set("good", "v1", Value::Null)).await;
    assert_eq!(code, 201);
    let (code, out) = s
        .patch(
            &format!("{DSS}/good"),
            "application/merge-patch+json",
            json!({"spec": {"selector": {"matchLabels": {"app": "good", "x": "y"}},
                            "template": {"metadata": {"labels": {"app": "good", "x": "y"}}}}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(out["details"]["causes"][0]["field"], "spec.selector");
    // kubectl's columns.
    let table = s.table(DSS).await;
    let names = crate::support::column_names(&table);
    assert_eq!(
        names,
        [
            "Name",
            "Desired",
            "Current",
            "Ready",
            "Up-to-date",
            "Available",
            "Node Selector",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(table["rows"][0]["cells"][6], "<none>");
}
