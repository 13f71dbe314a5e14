//! The replication manager against a real server: convergence, scaling, adoption and
//! release, status, and failures. No node agent runs here; tests play its part by writing
//! pod status.

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn rc(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"app": name},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    })
}

/// The live pods labelled `app=<app>`.
async fn pods(s: &TestServer, app: &str) -> Vec<Value> {
    let (code, list) = s.get(&format!("{PODS}?labelSelector=app%3D{app}")).await;
    assert_eq!(code, 200, "{list}");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

fn controller_uid(pod: &Value) -> Option<String> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["uid"].as_str())
        .map(str::to_string)
}

/// Waits for exactly `n` live pods of `app`, all controlled by `uid`.
async fn converged(s: &TestServer, app: &str, uid: &str, n: usize) -> Vec<Value> {
    eventually(20, &format!("{n} pods of {app}"), || async {
        let ps = pods(s, app).await;
        let owned = ps
            .iter()
            .filter(|p| controller_uid(p).as_deref() == Some(uid))
            .count();
        if ps.len() == n && owned == n {
            Ok(ps)
        } else {
            Err(format!("{} pods, {owned} owned", ps.len()))
        }
    })
    .await
}

async fn status_field(s: &TestServer, rc: &str, field: &str, want: i64) -> Value {
    eventually(20, &format!("status.{field} = {want}"), || async {
        let (_, obj) = s.get(&format!("{RCS}/{rc}")).await;
        if obj["status"][field] == want {
            Ok(obj)
        } else {
            Err(obj["status"].to_string())
        }
    })
    .await
}

/// Marks a pod Running and Ready, as a node agent would.
async fn set_ready(s: &TestServer, pod: &str) {
    let (code, out) = s
        .patch(
            &format!("{PODS}/{pod}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": berth::types::now()}
            ]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

#[tokio::test]
async fn an_rc_replaces_pods_deleted_by_hand() {
    let s = TestServer::start().await;
    let (code, made) = s.post(RCS, rc("web", 3)).await;
    assert_eq!(code, 201, "{made}");
    let uid = made["metadata"]["uid"].as_str().unwrap();
    let first = converged(&s, "web", uid, 3).await;
    let victim = name(&first[0]);
    assert!(victim.starts_with("web-"), "{victim}");
    let (code, _) = s.delete(&format!("{PODS}/{victim}")).await;
    assert_eq!(code, 200);
    let after = converged(&s, "web", uid, 3).await;
    assert!(after.iter().all(|p| name(p) != victim));
    let st = status_field(&s, "web", "replicas", 3).await;
    assert_eq!(
        st["status"]["observedGeneration"],
        st["metadata"]["generation"]
    );
    assert_eq!(st["status"]["fullyLabeledReplicas"], 3);
}

#[tokio::test]
async fn scaling_up_and_down_keeps_the_ready_pods() {
    let s = TestServer::start().await;
    let (_, made) = s.post(RCS, rc("scale", 1)).await;
    let uid = made["metadata"]["uid"].as_str().unwrap();
    converged(&s, "scale", uid, 1).await;
    // Up through the scale subresource.
    let (code, out) = s
        .put(
            &format!("{RCS}/scale/scale"),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                   "metadata": {"name": "scale", "namespace": "default"},
                   "spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let four = converged(&s, "scale", uid, 4).await;
    let ready: Vec<String> = four.iter().take(2).map(name).collect();
    for p in &ready {
        set_ready(&s, p).await;
    }
    status_field(&s, "scale", "readyReplicas", 2).await;
    // Down through the spec: the pods that are not ready go first.
    let (code, out) = s
        .patch(
            &format!("{RCS}/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 2}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let two = converged(&s, "scale", uid, 2).await;
    let mut left: Vec<String> = two.iter().map(name).collect();
    left.sort();
    let mut want = ready.clone();
    want.sort();
    assert_eq!(left, want);
    status_field(&s, "scale", "replicas", 2).await;
    // And to zero.
    s.patch(
        &format!("{RCS}/scale"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 0}}),
    )
    .await;
    converged(&s, "scale", uid, 0).await;
}

#[tokio::test]
async fn orphans_are_adopted_and_pods_that_stop_matching_are_released() {
    let s = TestServer::start().await;
    let stray = json!({
        "metadata": {"name": "stray", "labels": {"app": "adopt"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    let (code, _) = s.post(PODS, stray).await;
    assert_eq!(code, 201);
    let (_, made) = s.post(RCS, rc("adopt", 1)).await;
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    eventually(20, "the stray pod is adopted", || async {
        let (_, p) = s.get(&format!("{PODS}/stray")).await;
        match controller_uid(&p) {
            Some(u) if u == uid => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    converged(&s, "adopt", &uid, 1).await;
    // Relabel it: released, and replaced.
    let (code, out) = s
        .patch(
            &format!("{PODS}/stray"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"app": "elsewhere"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(20, "the relabelled pod is released", || async {
        let (_, p) = s.get(&format!("{PODS}/stray")).await;
        match controller_uid(&p) {
            None => Ok(()),
            Some(u) => Err(u),
        }
    })
    .await;
    let replaced = converged(&s, "adopt", &uid, 1).await;
    assert_ne!(name(&replaced[0]), "stray");
}

#[tokio::test]
async fn available_replicas_wait_for_min_ready_seconds() {
    let s = TestServer::start().await;
    let mut spec = rc("avail", 2);
    spec["spec"]["minReadySeconds"] = json!(1);
    let (_, made) = s.post(RCS, spec).await;
    let uid = made["metadata"]["uid"].as_str().unwrap();
    for p in converged(&s, "avail", uid, 2).await {
        set_ready(&s, &name(&p)).await;
    }
    status_field(&s, "avail", "readyReplicas", 2).await;
    // Nothing changes after the pods became ready: only the requeue can count them.
    status_field(&s, "avail", "availableReplicas", 2).await;
}

#[tokio::test]
async fn create_failures_set_replica_failure_until_they_stop() {
    let s = TestServer::start().await;
    let mut spec = rc("fails", 1);
    spec["spec"]["template"]["spec"]["serviceAccountName"] = json!("builder");
    let (code, made) = s.post(RCS, spec).await;
    assert_eq!(code, 201, "{made}");
    let uid = made["metadata"]["uid"].as_str().unwrap();
    let failing = eventually(20, "a ReplicaFailure condition", || async {
        let (_, obj) = s.get(&format!("{RCS}/fails")).await;
        let cond = obj["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "ReplicaFailure"))
            .cloned();
        cond.ok_or_else(|| obj["status"].to_string())
    })
    .await;
    assert_eq!(failing["status"], "True");
    assert_eq!(failing["reason"], "FailedCreate");
    let message = failing["message"].as_str().unwrap();
    assert!(
        message.contains("serviceaccount \"builder\" not found"),
        "{message}"
    );
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedCreate")
        .await;
    let ev = &events["items"][0];
    assert_eq!(ev["involvedObject"]["name"], "fails", "{events}");
    assert_eq!(ev["type"], "Warning");
    // Once the account exists the retries succeed and the condition goes.
    let (code, _) = s
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "builder"}}),
        )
        .await;
    assert_eq!(code, 201);
    converged(&s, "fails", uid, 1).await;
    eventually(20, "the condition is cleared", || async {
        let (_, obj) = s.get(&format!("{RCS}/fails")).await;
        if obj["status"]["conditions"].is_null() {
            Ok(())
        } else {
            Err(obj["status"].to_string())
        }
    })
    .await;
}

#[tokio::test]
async fn a_restart_neither_creates_nor_deletes_pods_twice() {
    let s = TestServer::start().await;
    let (_, made) = s.post(RCS, rc("steady", 3)).await;
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    let before: Vec<String> = converged(&s, "steady", &uid, 3)
        .await
        .iter()
        .map(name)
        .collect();
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, |_| {}).await;
    // A change after the restart proves the manager has synced and acted.
    s.patch(
        &format!("{RCS}/steady"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 4}}),
    )
    .await;
    let after: Vec<String> = converged(&s, "steady", &uid, 4)
        .await
        .iter()
        .map(name)
        .collect();
    assert!(
        before.iter().all(|b| after.contains(b)),
        "{before:?} {after:?}"
    );
    // The event of a create follows the create; wait for the fourth.
    eventually(20, "four SuccessfulCreate events", || async {
        let (_, events) = s
            .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DSuccessfulCreate,involvedObject.name%3Dsteady")
            .await;
        match events["items"].as_array().unwrap().len() {
            4 => Ok(()),
            n if n < 4 => Err(format!("{n} so far")),
            n => panic!("{n} pods were created: {events}"),
        }
    })
    .await;
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DSuccessfulDelete")
        .await;
    assert!(events["items"].as_array().unwrap().is_empty(), "{events}");
}

const RSS: &str = "/apis/apps/v1/namespaces/default/replicasets";

fn rs(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [name]}]},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    })
}

/// A ReplicaSet is kept by the same manager as an RC: its pods, its scale, its status,
/// adoption by a selector expression and an RC's pods left alone.
#[tokio::test]
async fn a_replica_set_keeps_its_pods_like_an_rc() {
    let s = TestServer::start().await;
    // An RC's pod with the same labels is not the ReplicaSet's to adopt.
    let (code, made) = s.post(RCS, rc("rs-web", 1)).await;
    assert_eq!(code, 201, "{made}");
    let rc_uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    converged(&s, "rs-web", &rc_uid, 1).await;
    let (code, made) = s.post(RCS, rc("other", 0)).await;
    assert_eq!(code, 201, "{made}");
    let (code, made) = s.post(RSS, rs("rs-web", 2)).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["metadata"]["generation"], 1);
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    let pods = eventually(20, "two pods of the ReplicaSet", || async {
        let ps = pods(&s, "rs-web").await;
        let mine: Vec<Value> = ps
            .iter()
            .filter(|p| controller_uid(p).as_deref() == Some(&uid))
            .cloned()
            .collect();
        let rcs = ps
            .iter()
            .filter(|p| controller_uid(p).as_deref() == Some(&rc_uid))
            .count();
        if mine.len() == 2 && rcs == 1 {
            Ok(mine)
        } else {
            Err(format!("{} of the set, {rcs} of the RC", mine.len()))
        }
    })
    .await;
    let owner = &pods[0]["metadata"]["ownerReferences"][0];
    assert_eq!(owner["apiVersion"], "apps/v1");
    assert_eq!(owner["kind"], "ReplicaSet");
    for p in &pods {
        set_ready(&s, &name(p)).await;
    }
    let st = eventually(20, "two ready replicas", || async {
        let (_, st) = s.get(&format!("{RSS}/rs-web")).await;
        if st["status"]["readyReplicas"] == 2 && st["status"]["availableReplicas"] == 2 {
            Ok(st)
        } else {
            Err(st["status"].to_string())
        }
    })
    .await;
    assert_eq!(st["status"]["observedGeneration"], 1);
    // The scale subresource speaks of the selector as a string, and scales it.
    let (code, scale) = s.get(&format!("{RSS}/rs-web/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["status"]["selector"], "app in (rs-web)");
    let (code, out) = s
        .patch(
            &format!("{RSS}/rs-web/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    converged_by(&s, "rs-web", &uid, 1).await;
    // Bad specs are refused with the upstream causes.
    let mut bad = rs("bad", 1);
    bad["spec"]["template"]["metadata"]["labels"] = json!({"app": "elsewhere"});
    let (code, st) = s.post(RSS, bad).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["field"],
        "spec.template.metadata.labels"
    );
    let changed = json!({"spec": {"selector": {"matchLabels": {"app": "rs-web", "x": "y"}}}});
    let (code, st) = s
        .patch(
            &format!("{RSS}/rs-web"),
            "application/merge-patch+json",
            changed,
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{st}"
    );
    // Deleting it takes its pods along (apps/v1 deletes dependents in the background).
    let (code, _) = s.delete(&format!("{RSS}/rs-web")).await;
    assert_eq!(code, 200);
    converged_by(&s, "rs-web", &uid, 0).await;
    s.stop().await;
}

/// Waits until exactly `n` live pods of `app` are controlled by `uid`, whatever else
/// carries the label.
async fn converged_by(s: &TestServer, app: &str, uid: &str, n: usize) {
    eventually(20, &format!("{n} pods of {app} by {uid}"), || async {
        let owned = pods(s, app)
            .await
            .iter()
            .filter(|p| controller_uid(p).as_deref() == Some(uid))
            .count();
        if owned == n {
            Ok(())
        } else {
            Err(format!("{owned}"))
        }
    })
    .await;
}

/// ControllerRevisions are stored history: their data is kept as written, and kubectl's
/// columns name the controller that owns them.
#[tokio::test]
async fn controller_revisions_keep_their_data() {
    let s = TestServer::start().await;
    let revs = "/apis/apps/v1/namespaces/default/controllerrevisions";
    // A real owner, so that the garbage collector keeps its revision.
    let (code, owner) = s
        .post(
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
                   "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        )
        .await;
    assert_eq!(code, 201, "{owner}");
    let uid = owner["metadata"]["uid"].clone();
    let rev = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "web-5d4f", "labels": {"app": "web"}, "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "StatefulSet", "name": "web", "uid": uid, "controller": true}]},
        "data": {"spec": {"template": {"metadata": {"labels": {"app": "web"}}}}},
        "revision": 3});
    let (code, made) = s.post(revs, rev).await;
    assert_eq!(code, 201, "{made}");
    let table = s
        .req(reqwest::Method::GET, revs)
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "web-5d4f")
        .unwrap_or_else(|| panic!("web-5d4f in {table}"));
    let cells = &row["cells"];
    assert_eq!(cells[1], "statefulset.apps/web", "{table}");
    assert_eq!(cells[2], 3);
    let (code, st) = s
        .patch(
            &format!("{revs}/web-5d4f"),
            "application/merge-patch+json",
            json!({"data": {"spec": {"x": 1}}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "data");
    let (code, st) = s
        .post(revs, json!({"metadata": {"name": "empty"}, "revision": 1}))
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "data", "{st}");
    s.stop().await;
}

/// As the upstream ReplicaSet conformance tests drive them: conditions a client writes
/// through `/status` (update and merge patch) stay beside the controller's own fields,
/// the scale is replaced and patched (strategic) through `/scale`, and a collection goes
/// by label selector.
#[tokio::test]
async fn replica_set_status_scale_and_collection_endpoints_work_as_upstream() {
    let s = TestServer::start().await;
    let mut set = rs("test-rs", 1);
    set["metadata"]["labels"] = json!({"e2e": "abc"});
    let (code, made) = s.post(RSS, set).await;
    assert_eq!(code, 201, "{made}");
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    converged_by(&s, "test-rs", &uid, 1).await;
    // As the upstream test: read, change, write, again on a conflict (the controller
    // writes the status too).
    let put_again = |path: String, change: fn(&mut Value)| {
        let s = &s;
        async move {
            for _ in 0..20 {
                let (code, mut obj) = s.get(&path).await;
                assert_eq!(code, 200, "{obj}");
                change(&mut obj);
                let (code, out) = s.put(&path, obj).await;
                if code != 409 {
                    return (code, out);
                }
            }
            panic!("{path}: a conflict every time");
        }
    };
    let (code, out) = put_again(format!("{RSS}/test-rs/status"), |st| {
        st["status"]["conditions"] = json!([{"type": "StatusUpdate", "status": "True",
            "reason": "E2E", "message": "Set from e2e test"}]);
    })
    .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = s
        .patch(
            &format!("{RSS}/test-rs/status"),
            "application/merge-patch+json",
            json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    // A reconcile after the scale below keeps the client's condition.
    let (code, out) = put_again(format!("{RSS}/test-rs/scale"), |scale| {
        scale["spec"]["replicas"] = json!(2);
    })
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["spec"]["replicas"], 2);
    let (code, out) = s
        .patch(
            &format!("{RSS}/test-rs/scale"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    converged_by(&s, "test-rs", &uid, 4).await;
    let st = eventually(
        20,
        "the status counts 4 and keeps the patched condition",
        || async {
            let (_, rs) = s.get(&format!("{RSS}/test-rs")).await;
            let kept = rs["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "StatusPatched"));
            if rs["status"]["replicas"] == 4 && kept {
                Ok(rs)
            } else {
                Err(rs["status"].to_string())
            }
        },
    )
    .await;
    assert_eq!(st["spec"]["replicas"], 4);
    let (code, list) = s
        .get("/apis/apps/v1/replicasets?labelSelector=e2e%3Dabc")
        .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (code, out) = s.delete(&format!("{RSS}?labelSelector=e2e%3Dabc")).await;
    assert_eq!(code, 200, "{out}");
    let (_, list) = s
        .get("/apis/apps/v1/replicasets?labelSelector=e2e%3Dabc")
        .await;
    assert!(list["items"].as_array().unwrap().is_empty(), "{list}");
    converged_by(&s, "test-rs", &uid, 0).await;
    s.stop().await;
}
