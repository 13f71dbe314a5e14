//! The scheduler and the node lifecycle controller against a real server over HTTPS:
//! unschedulable pods say why and are bound once a node fits, selectors and taints steer
//! pods, quick arrivals never overbook a node, and a node whose lease stops is marked
//! Unknown, tainted and emptied.

use std::time::Duration;

use berth::client::{Client, DeleteParams, ListParams};
use berth::registry::{Kind, catalog};
use berth::types::{condition, now_micro, set_condition};
use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

fn client(s: &TestServer) -> Client {
    Client::http(&s.url, &s.ca_pem, &s.token).unwrap()
}

/// A Ready node with `allocatable`, plus `spec` and `labels` as given.
async fn make_node(
    c: &Client,
    name: &str,
    allocatable: Value,
    spec: Value,
    labels: Value,
) -> Value {
    make_node_with_ready(c, name, allocatable, spec, labels, "True").await
}

async fn make_node_with_ready(
    c: &Client,
    name: &str,
    allocatable: Value,
    spec: Value,
    labels: Value,
    ready: &str,
) -> Value {
    let nodes = catalog::of(Kind::Node);
    let status = json!({
        "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                        "lastHeartbeatTime": berth::types::now()}],
        "allocatable": allocatable,
        "capacity": allocatable,
    });
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": status,
    });
    let made = c.create(nodes, None, &node).await.unwrap();
    if made["status"] == status {
        return made;
    }
    // Status is a subresource: a create may not keep it.
    let mut made = made;
    made["status"] = status;
    c.update_status(nodes, &made).await.unwrap()
}

fn resources(cpu: &str, memory: &str) -> Value {
    json!({"cpu": cpu, "memory": memory, "pods": "110"})
}

async fn renew_lease(c: &Client, node: &str) {
    let leases = catalog::of(Kind::Lease);
    let ns = Some("kube-node-lease");
    match c.get(leases, ns, node).await {
        Ok(mut lease) => {
            lease["spec"]["renewTime"] = json!(now_micro());
            c.update(leases, &lease).await.unwrap();
        }
        Err(e) if e.is_not_found() => {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 2, "renewTime": now_micro()},
            });
            c.create(leases, ns, &lease).await.unwrap();
        }
        Err(e) => panic!("read lease {node}: {e}"),
    }
}

/// A pod with one container asking for `cpu`, and `spec` merged in.
fn pod(name: &str, cpu: &str, spec: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
                                 "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]},
    });
    if let (Some(dst), Value::Object(extra)) = (p["spec"].as_object_mut(), spec) {
        dst.extend(extra);
    }
    p
}

async fn create_pod(c: &Client, p: &Value) -> Value {
    c.create(catalog::of(Kind::Pod), Some("default"), p)
        .await
        .unwrap()
}

async fn get_pod(c: &Client, name: &str) -> Option<Value> {
    match c.get(catalog::of(Kind::Pod), Some("default"), name).await {
        Ok(p) => Some(p),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("get pod {name}: {e}"),
    }
}

/// Waits until pod `name` is `PodScheduled=False/Unschedulable` with `message`.
async fn wait_unschedulable(c: &Client, name: &str, message: &str) {
    eventually(
        20,
        &format!("pod {name} is unschedulable: {message}"),
        || async {
            let p = get_pod(c, name).await.ok_or("gone")?;
            let cond = condition(&p, "PodScheduled")
                .cloned()
                .unwrap_or(Value::Null);
            if cond["status"] == "False"
                && cond["reason"] == "Unschedulable"
                && cond["message"] == message
            {
                Ok(())
            } else {
                Err(format!("{cond} nodeName={}", p["spec"]["nodeName"]))
            }
        },
    )
    .await;
}

/// Waits until pod `name` is bound to `node` with `PodScheduled=True`.
async fn wait_bound(c: &Client, name: &str, node: &str) {
    eventually(20, &format!("pod {name} is bound to {node}"), || async {
        let p = get_pod(c, name).await.ok_or("gone")?;
        let scheduled = condition(&p, "PodScheduled").is_some_and(|c| c["status"] == "True");
        if p["spec"]["nodeName"] == node && scheduled {
            Ok(())
        } else {
            Err(format!(
                "nodeName={} status={}",
                p["spec"]["nodeName"], p["status"]
            ))
        }
    })
    .await;
}

/// Events in `default` about `object` with `reason`.
async fn events(c: &Client, object: &str, reason: &str) -> Vec<Value> {
    let params = ListParams {
        field_selector: Some(format!("involvedObject.name={object},reason={reason}")),
        ..ListParams::default()
    };
    c.list(catalog::of(Kind::Event), Some("default"), &params)
        .await
        .unwrap()
        .items
}

async fn wait_event(c: &Client, object: &str, reason: &str, message: &str) -> Value {
    eventually(
        20,
        &format!("a {reason} event on {object}: {message}"),
        || async {
            let evs = events(c, object, reason).await;
            evs.iter()
                .find(|e| e["message"] == message)
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        evs.iter().map(|e| &e["message"]).collect::<Vec<_>>()
                    )
                })
        },
    )
    .await
}

#[tokio::test]
async fn an_unschedulable_pod_says_why_and_is_bound_once_a_fitting_ready_node_appears() {
    let s = TestServer::start().await;
    let c = client(&s);
    create_pod(&c, &pod("web", "500m", json!({}))).await;

    let none = "no nodes available to schedule pods";
    wait_unschedulable(&c, "web", none).await;
    let ev = wait_event(&c, "web", "FailedScheduling", none).await;
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["source"]["component"], "default-scheduler");

    make_node(&c, "small", resources("100m", "1Gi"), json!({}), json!({})).await;
    let short = "0/1 nodes are available: 1 Insufficient cpu.";
    wait_unschedulable(&c, "web", short).await;
    wait_event(&c, "web", "FailedScheduling", short).await;

    // A node that is not Ready does not count as a place to go.
    make_node_with_ready(
        &c,
        "sick",
        resources("4", "8Gi"),
        json!({}),
        json!({}),
        "False",
    )
    .await;
    let both = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were not ready.";
    wait_unschedulable(&c, "web", both).await;

    make_node(&c, "big", resources("2", "4Gi"), json!({}), json!({})).await;
    wait_bound(&c, "web", "big").await;
    let ev = wait_event(
        &c,
        "web",
        "Scheduled",
        "Successfully assigned default/web to big",
    )
    .await;
    assert_eq!(ev["type"], "Normal");
}

#[tokio::test]
async fn node_selectors_and_taints_decide_where_pods_go() {
    let s = TestServer::start().await;
    let c = client(&s);
    let res = resources("4", "8Gi");
    let taint = json!({"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]});
    make_node(&c, "fast", res.clone(), taint, json!({"disk": "ssd"})).await;
    make_node(&c, "slow", res.clone(), json!({}), json!({"disk": "hdd"})).await;
    make_node_with_ready(
        &c,
        "down",
        res.clone(),
        json!({}),
        json!({"disk": "ssd"}),
        "False",
    )
    .await;

    create_pod(
        &c,
        &pod("picky", "100m", json!({"nodeSelector": {"disk": "ssd"}})),
    )
    .await;
    let tolerant = json!({
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]
    });
    create_pod(&c, &pod("tolerant", "100m", tolerant)).await;
    create_pod(&c, &pod("plain", "100m", json!({}))).await;
    let affine = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["slow"]}]}
        ]
    }}}});
    create_pod(&c, &pod("affine", "100m", affine)).await;
    let other = json!({"schedulerName": "someone-else"});
    create_pod(&c, &pod("not-ours", "100m", other)).await;

    wait_bound(&c, "tolerant", "fast").await;
    wait_bound(&c, "plain", "slow").await;
    wait_bound(&c, "affine", "slow").await;
    wait_unschedulable(
        &c,
        "picky",
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
         1 node(s) had untolerated taint {dedicated: db}, 1 node(s) were not ready.",
    )
    .await;

    // Lifting the taint lets the waiting pod in.
    let nodes = catalog::of(Kind::Node);
    let mut fast = c.get(nodes, None, "fast").await.unwrap();
    fast["spec"]["taints"] = json!([]);
    c.update(nodes, &fast).await.unwrap();
    wait_bound(&c, "picky", "fast").await;

    let theirs = get_pod(&c, "not-ours").await.unwrap();
    assert!(theirs["spec"]["nodeName"].is_null(), "{theirs}");
    assert!(condition(&theirs, "PodScheduled").is_none(), "{theirs}");
}

#[tokio::test]
async fn pods_arriving_together_never_overbook_a_node_and_get_room_as_it_frees() {
    let s = TestServer::start().await;
    let c = client(&s);
    make_node(&c, "only", resources("1", "4Gi"), json!({}), json!({})).await;
    let names: Vec<String> = (0..6).map(|i| format!("burst-{i}")).collect();
    let creates = names.iter().map(|n| {
        let c = c.clone();
        let p = pod(n, "300m", json!({}));
        async move { create_pod(&c, &p).await }
    });
    futures_util::future::join_all(creates).await;

    let short = "0/1 nodes are available: 1 Insufficient cpu.";
    let count = |want_bound: usize, want_waiting: usize| {
        let c = c.clone();
        let names = names.clone();
        async move {
            let mut bound = Vec::new();
            let mut waiting = 0;
            for n in &names {
                let Some(p) = get_pod(&c, n).await else {
                    continue;
                };
                if p["spec"]["nodeName"].is_string() {
                    bound.push(n.clone());
                } else if condition(&p, "PodScheduled").is_some_and(|c| c["message"] == short) {
                    waiting += 1;
                }
            }
            if bound.len() == want_bound && waiting == want_waiting {
                Ok(bound)
            } else {
                Err(format!(
                    "{} bound ({bound:?}), {waiting} waiting",
                    bound.len()
                ))
            }
        }
    };
    let bound = eventually(20, "3 pods bound and 3 waiting", || count(3, 3)).await;

    // A bound pod goes away: one waiting pod takes its room, no more. (No agent runs
    // this node to finish a graceful deletion, so the pod is deleted at once.)
    c.delete(
        catalog::of(Kind::Pod),
        Some("default"),
        &bound[0],
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    let bound = eventually(20, "3 bound, 2 waiting after a delete", || count(3, 2)).await;

    // A bound pod finishes: its room is free too.
    let pods = catalog::of(Kind::Pod);
    let mut done = get_pod(&c, &bound[0]).await.unwrap();
    done["status"]["phase"] = json!("Succeeded");
    c.update_status(pods, &done).await.unwrap();
    eventually(20, "4 bound (one finished), 1 waiting", || count(4, 1)).await;
}

/// Sets a pod's Ready condition to True, as a node agent would.
async fn mark_ready(c: &Client, name: &str) {
    let pods = catalog::of(Kind::Pod);
    let mut p = get_pod(c, name).await.unwrap();
    p["status"]["phase"] = json!("Running");
    set_condition(&mut p, json!({"type": "Ready", "status": "True"}));
    c.update_status(pods, &p).await.unwrap();
}

fn unreachable_taints(node: &Value) -> Vec<(String, bool)> {
    node["spec"]["taints"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter(|t| t["key"] == UNREACHABLE)
                .map(|t| {
                    (
                        t["effect"].as_str().unwrap_or("").to_string(),
                        t["timeAdded"].is_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_node_whose_lease_stops_goes_unknown_is_tainted_and_its_pods_are_evicted() {
    let s = TestServer::start_with(|c| {
        c.controllers.node_grace = Duration::from_secs(3);
        c.controllers.eviction_timeout = Duration::from_secs(5);
    })
    .await;
    let c = client(&s);
    let nodes = catalog::of(Kind::Node);
    make_node(&c, "w1", resources("4", "8Gi"), json!({}), json!({})).await;
    renew_lease(&c, "w1").await;

    let on_w1 = |tolerations: Value| json!({"nodeName": "w1", "tolerations": tolerations});
    create_pod(&c, &pod("plain", "100m", on_w1(json!([])))).await;
    let brief = json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]);
    create_pod(&c, &pod("brief", "100m", on_w1(brief))).await;
    let forever = json!([{"key": UNREACHABLE, "operator": "Exists"}]);
    create_pod(&c, &pod("forever", "100m", on_w1(forever))).await;
    // A mirror pod (of a static pod w1 runs from a file) is never evicted.
    let mut mirror = pod("mirror", "100m", on_w1(json!([])));
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "h"});
    create_pod(&c, &mirror).await;
    for p in ["plain", "brief", "forever", "mirror"] {
        mark_ready(&c, p).await;
    }

    // While the lease is fresh nothing happens.
    renew_lease(&c, "w1").await;
    let node = c.get(nodes, None, "w1").await.unwrap();
    assert_eq!(condition(&node, "Ready").unwrap()["status"], "True");
    assert!(unreachable_taints(&node).is_empty());

    // The lease stops: the node goes Unknown and is tainted.
    let node = eventually(20, "w1 goes Unknown and is tainted", || async {
        let n = c.get(nodes, None, "w1").await.unwrap();
        let ready = condition(&n, "Ready").cloned().unwrap_or(Value::Null);
        let mut taints = unreachable_taints(&n);
        taints.sort();
        let want = vec![
            ("NoExecute".to_string(), true),
            ("NoSchedule".to_string(), true),
        ];
        if ready["status"] == "Unknown" && taints == want {
            Ok(n)
        } else {
            Err(format!("ready={ready} taints={taints:?}"))
        }
    })
    .await;
    let ready = condition(&node, "Ready").unwrap();
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    wait_event(
        &c,
        "w1",
        "NodeNotReady",
        "Node w1 status is now: NodeNotReady",
    )
    .await;

    // Its pods are marked not Ready.
    for p in ["plain", "forever"] {
        eventually(20, &format!("pod {p} is not Ready"), || async {
            let pod = get_pod(&c, p).await.ok_or("gone")?;
            let r = condition(&pod, "Ready").cloned().unwrap_or(Value::Null);
            if r["status"] == "False" {
                Ok(())
            } else {
                Err(r.to_string())
            }
        })
        .await;
    }
    wait_event(&c, "brief", "NodeNotReady", "Node is not ready").await;

    // The pod tolerating one second goes first; the default (5 s) comes later.
    // Evicted: deleted, and (bound to a node, with no agent to finish it) Terminating.
    eventually(20, "pod brief is evicted", || async {
        match get_pod(&c, "brief").await {
            None => Ok(()),
            Some(p) if p["metadata"]["deletionTimestamp"].is_string() => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    assert!(
        get_pod(&c, "plain")
            .await
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null()),
        "plain went with brief, before its 5 s"
    );
    wait_event(
        &c,
        "brief",
        "TaintManagerEviction",
        "Marking for deletion Pod default/brief",
    )
    .await;
    // Evicted: deleted, and (bound to a node, with no agent to finish it) Terminating.
    eventually(20, "pod plain is evicted", || async {
        match get_pod(&c, "plain").await {
            None => Ok(()),
            Some(p) if p["metadata"]["deletionTimestamp"].is_string() => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    wait_event(
        &c,
        "plain",
        "TaintManagerEviction",
        "Marking for deletion Pod default/plain",
    )
    .await;

    // The lease is renewed: the taints go; the pod tolerating forever stayed.
    renew_lease(&c, "w1").await;
    eventually(20, "w1 loses the unreachable taints", || async {
        let n = c.get(nodes, None, "w1").await.unwrap();
        let taints = unreachable_taints(&n);
        if taints.is_empty() {
            Ok(())
        } else {
            Err(format!("{taints:?}"))
        }
    })
    .await;
    assert!(
        get_pod(&c, "forever")
            .await
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null()),
        "a pod tolerating forever stays"
    );
    assert!(
        get_pod(&c, "mirror")
            .await
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null()),
        "a mirror pod stays"
    );
}

#[tokio::test]
async fn a_node_that_never_had_a_lease_is_judged_from_its_creation() {
    let s = TestServer::start_with(|c| c.controllers.node_grace = Duration::from_secs(1)).await;
    let c = client(&s);
    make_node(&c, "silent", resources("4", "8Gi"), json!({}), json!({})).await;
    eventually(20, "silent goes Unknown", || async {
        let n = c
            .get(catalog::of(Kind::Node), None, "silent")
            .await
            .unwrap();
        let ready = condition(&n, "Ready").cloned().unwrap_or(Value::Null);
        if ready["status"] == "Unknown" && !unreachable_taints(&n).is_empty() {
            Ok(())
        } else {
            Err(ready.to_string())
        }
    })
    .await;
    // New pods stay off it.
    create_pod(&c, &pod("late", "100m", json!({}))).await;
    wait_unschedulable(
        &c,
        "late",
        "0/1 nodes are available: 1 node(s) were not ready.",
    )
    .await;
}
