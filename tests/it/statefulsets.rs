//! The statefulset controller against a real server: pods with stable names made in
//! order (or all at once with `Parallel`) and removed in reverse, their claims, rolling
//! updates with a partition and maxUnavailable, OnDelete, history and rollback, the
//! retention policy, failed pods replaced, and bad specs. No node agent runs here: the
//! node is a Node object, and the tests play its agent (and a volume provisioner) by
//! marking bound pods ready, finishing the deletions of terminating ones and binding
//! claims. `tests/it/recovery.rs` rolls one out with real pods across a kill -9.

use serde_json::{Value, json};

use crate::daemonsets::{all_pods, event_messages, make_node, tick, tick_seen};
use crate::support::{TestServer, eventually};

const STSS: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const REVISIONS: &str = "/apis/apps/v1/namespaces/default/controllerrevisions";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";
const REVISION: &str = "controller-revision-hash";

fn stateful_set(name: &str, replicas: i64, extra: Value) -> Value {
    let mut s = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "v1"}]},
            },
        },
    });
    for (k, v) in extra.as_object().unwrap() {
        s["spec"][k] = v.clone();
    }
    s
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

fn image_of(pod: &Value) -> &str {
    pod["spec"]["containers"][0]["image"].as_str().unwrap_or("")
}

fn deleting(p: &Value) -> bool {
    !p["metadata"]["deletionTimestamp"].is_null()
}

async fn create(s: &TestServer, set: Value) {
    let (code, out) = s.post(STSS, set).await;
    assert_eq!(code, 201, "{out}");
}

/// The names of the live pods of `app`, sorted.
async fn live_names(s: &TestServer, app: &str) -> Vec<String> {
    let mut names: Vec<String> = all_pods(s, app)
        .await
        .iter()
        .filter(|p| !deleting(p))
        .map(name)
        .collect();
    names.sort();
    names
}

/// Plays a provisioner: binds every pending claim.
async fn bind_claims(s: &TestServer) {
    let (_, list) = s.get(CLAIMS).await;
    for c in list["items"].as_array().unwrap() {
        if c["status"]["phase"] == "Bound" || deleting(c) {
            continue;
        }
        let (code, out) = s
            .patch(
                &format!("{CLAIMS}/{}/status", name(c)),
                "application/merge-patch+json",
                json!({"status": {"phase": "Bound"}}),
            )
            .await;
        assert!(code == 200 || code == 404, "{out}");
    }
}

async fn get_set(s: &TestServer, set: &str) -> Value {
    let (code, obj) = s.get(&format!("{STSS}/{set}")).await;
    assert_eq!(code, 200, "{obj}");
    obj
}

/// Waits until `replicas` pods run the template's revision and the status says so.
async fn rolled_out(s: &TestServer, set: &str, replicas: i64) -> Value {
    eventually(30, &format!("{set} rolled out"), || async {
        bind_claims(s).await;
        tick(s, set, |_| true).await;
        let obj = get_set(s, set).await;
        let st = &obj["status"];
        let done = st["observedGeneration"] == obj["metadata"]["generation"]
            && st["replicas"] == replicas
            && (replicas == 0 || st["readyReplicas"] == replicas)
            && st["currentRevision"] == st["updateRevision"]
            && live_names(s, set).await.len() as i64 == replicas;
        if done { Ok(obj) } else { Err(st.to_string()) }
    })
    .await
}

async fn set_image(s: &TestServer, set: &str, image: &str) {
    let (code, out) = s
        .patch(
            &format!("{STSS}/{set}"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

async fn scale(s: &TestServer, set: &str, replicas: i64) {
    let (code, out) = s
        .patch(
            &format!("{STSS}/{set}/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": replicas}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

async fn revisions_of(s: &TestServer, app: &str) -> Vec<(String, i64)> {
    let (_, list) = s
        .get(&format!("{REVISIONS}?labelSelector=app%3D{app}"))
        .await;
    let mut out: Vec<(String, i64)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (name(r), r["revision"].as_i64().unwrap()))
        .collect();
    out.sort_by_key(|r| r.1);
    out
}

#[tokio::test]
async fn ordered_ready_makes_pods_one_by_one_and_removes_them_in_reverse() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({}), json!([])).await;
    let claims = json!([{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    create(
        &s,
        stateful_set("web", 3, json!({"volumeClaimTemplates": claims})),
    )
    .await;

    // Only web-0 and its claim exist until web-0 is ready; its claim waits to be bound.
    eventually(
        10,
        "web-0 is unschedulable on its unbound claim",
        || async {
            let pods = all_pods(&s, "web").await;
            let msg = pods
                .iter()
                .find(|p| name(p) == "web-0")
                .and_then(|p| p["status"]["conditions"].as_array().cloned())
                .and_then(|cs| cs.into_iter().find(|c| c["type"] == "PodScheduled"))
                .map(|c| c["message"].to_string())
                .unwrap_or_default();
            if msg.contains("pod has unbound immediate PersistentVolumeClaims") {
                Ok(())
            } else {
                Err(format!("{msg} / {:?}", live_names(&s, "web").await))
            }
        },
    )
    .await;
    assert_eq!(live_names(&s, "web").await, ["web-0"]);
    let (code, claim) = s.get(&format!("{CLAIMS}/data-web-0")).await;
    assert_eq!(code, 200, "{claim}");
    assert_eq!(claim["metadata"]["labels"]["app"], "web");
    assert_eq!(claim["status"]["phase"], "Pending");

    bind_claims(&s).await;
    eventually(10, "web-0 is bound to n1", || async {
        let pods = all_pods(&s, "web").await;
        match pods.iter().find(|p| name(p) == "web-0") {
            Some(p) if p["spec"]["nodeName"] == "n1" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Not ready yet: web-1 waits.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(live_names(&s, "web").await, ["web-0"]);

    // Ready one at a time: each is made only after the one before it is ready.
    for (ready, want) in [
        ("web-0", vec!["web-0", "web-1"]),
        ("web-1", vec!["web-0", "web-1", "web-2"]),
    ] {
        eventually(10, &format!("{want:?} after {ready} is ready"), || async {
            bind_claims(&s).await;
            tick(&s, "web", |p| name(p).as_str() <= ready).await;
            let got = live_names(&s, "web").await;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
    }
    let obj = rolled_out(&s, "web", 3).await;
    let pods = all_pods(&s, "web").await;
    let web1 = pods.iter().find(|p| name(p) == "web-1").unwrap();
    assert_eq!(web1["spec"]["hostname"], "web-1");
    assert_eq!(web1["spec"]["subdomain"], "web");
    assert_eq!(
        web1["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
        "web-1"
    );
    assert_eq!(
        web1["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
        "1"
    );
    assert_eq!(
        web1["metadata"]["labels"][REVISION],
        obj["status"]["currentRevision"]
    );
    assert_eq!(
        web1["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "data-web-1"
    );
    let st = &obj["status"];
    assert_eq!(st["availableReplicas"], 3);
    assert_eq!(st["currentReplicas"], 3);
    assert_eq!(st["updatedReplicas"], 3);
    assert_eq!(st["collisionCount"], 0);
    let revs = revisions_of(&s, "web").await;
    assert_eq!(revs.len(), 1, "{revs:?}");
    assert_eq!(revs[0].0, st["updateRevision"].as_str().unwrap());
    let events = event_messages(&s, "web").await;
    for want in [
        "SuccessfulCreate create Claim data-web-0 Pod web-0 in StatefulSet web success",
        "SuccessfulCreate create Pod web-0 in StatefulSet web successful",
        "SuccessfulCreate create Pod web-2 in StatefulSet web successful",
    ] {
        assert!(events.iter().any(|e| e == want), "{want} in {events:?}");
    }

    // Scaling down removes the highest ordinal first and waits for it to be gone.
    scale(&s, "web", 1).await;
    eventually(10, "web-2 goes first", || async {
        let pods = all_pods(&s, "web").await;
        let terminating: Vec<String> = pods.iter().filter(|p| deleting(p)).map(name).collect();
        if terminating == ["web-2"] {
            Ok(())
        } else {
            Err(format!("{terminating:?}"))
        }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !all_pods(&s, "web")
            .await
            .iter()
            .any(|p| name(p) == "web-1" && deleting(p))
    );
    rolled_out(&s, "web", 1).await;
    assert_eq!(live_names(&s, "web").await, ["web-0"]);
    // Retain: the claims stay.
    for c in ["data-web-1", "data-web-2"] {
        let (code, _) = s.get(&format!("{CLAIMS}/{c}")).await;
        assert_eq!(code, 200, "{c} is kept");
    }
    let events = event_messages(&s, "web").await;
    assert!(
        events
            .iter()
            .any(|e| e == "SuccessfulDelete delete Pod web-2 in StatefulSet web successful"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_rolling_update_respects_the_partition_then_goes_down_the_ordinals() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({}), json!([])).await;
    let partitioned =
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}});
    create(&s, stateful_set("db", 3, partitioned)).await;
    let first = rolled_out(&s, "db", 3).await;
    let rev1 = first["status"]["currentRevision"]
        .as_str()
        .unwrap()
        .to_string();

    set_image(&s, "db", "v2").await;
    // Only the ordinals at or above the partition are updated.
    let obj = eventually(20, "db-2 updated, the others kept", || async {
        tick(&s, "db", |_| true).await;
        let obj = get_set(&s, "db").await;
        let pods = all_pods(&s, "db").await;
        let images: Vec<(String, String)> = pods
            .iter()
            .filter(|p| !deleting(p))
            .map(|p| (name(p), image_of(p).to_string()))
            .collect();
        let st = &obj["status"];
        let want = [("db-0", "v1"), ("db-1", "v1"), ("db-2", "v2")];
        let ok = images.len() == 3
            && want
                .iter()
                .all(|(n, i)| images.iter().any(|(a, b)| a == n && b == i))
            && st["updatedReplicas"] == 1
            && st["readyReplicas"] == 3;
        if ok {
            Ok(obj)
        } else {
            Err(format!("{images:?} {st}"))
        }
    })
    .await;
    assert_eq!(obj["status"]["currentRevision"], rev1.as_str());
    assert_ne!(obj["status"]["updateRevision"], rev1.as_str());
    assert_eq!(obj["status"]["currentReplicas"], 2);

    // Lowering the partition rolls the rest, highest ordinal first, one at a time.
    let (code, out) = s
        .patch(
            &format!("{STSS}/db"),
            "application/merge-patch+json",
            json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let order = std::sync::Mutex::new(Vec::new());
    let done = eventually(30, "db rolled to v2", || async {
        // Deletions are recorded from the same list the agents' stand-in finishes them
        // from, so none can turn terminating and be finished unseen between two lists.
        let (_, finished) = tick_seen(&s, "db", |_| true).await;
        {
            let mut order = order.lock().unwrap();
            for n in finished {
                if !order.contains(&n) {
                    order.push(n);
                }
            }
        }
        let obj = get_set(&s, "db").await;
        let st = &obj["status"];
        if st["currentRevision"] == st["updateRevision"] && st["updatedReplicas"] == 3 {
            Ok(obj)
        } else {
            Err(st.to_string())
        }
    })
    .await;
    assert_eq!(*order.lock().unwrap(), ["db-1", "db-0"]);
    let rev2 = done["status"]["updateRevision"]
        .as_str()
        .unwrap()
        .to_string();
    for p in all_pods(&s, "db").await {
        assert_eq!(image_of(&p), "v2");
        assert_eq!(p["metadata"]["labels"][REVISION], rev2.as_str());
    }

    // Going back to v1 reuses its revision under the next number.
    set_image(&s, "db", "v1").await;
    let back = rolled_out(&s, "db", 3).await;
    assert_eq!(back["status"]["currentRevision"], rev1.as_str());
    assert_eq!(revisions_of(&s, "db").await, [(rev2, 2), (rev1, 3)]);
}

#[tokio::test]
async fn parallel_pods_come_and_go_together_and_max_unavailable_rolls_several() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({}), json!([])).await;
    let extra = json!({
        "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
    });
    create(&s, stateful_set("cache", 4, extra)).await;
    // All four are made without any being ready.
    eventually(10, "four pods at once", || async {
        let got = live_names(&s, "cache").await;
        if got.len() == 4 {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    rolled_out(&s, "cache", 4).await;

    set_image(&s, "cache", "v2").await;
    // Two go at once, the highest ordinals first.
    let terminating = eventually(10, "two pods replaced at once", || async {
        let mut t: Vec<String> = all_pods(&s, "cache")
            .await
            .iter()
            .filter(|p| deleting(p))
            .map(name)
            .collect();
        t.sort();
        if t.len() == 2 {
            Ok(t)
        } else {
            Err(format!("{t:?}"))
        }
    })
    .await;
    assert_eq!(terminating, ["cache-2", "cache-3"]);
    rolled_out(&s, "cache", 4).await;
    for p in all_pods(&s, "cache").await {
        assert_eq!(image_of(&p), "v2");
    }

    // Scaling down to zero deletes them all at once.
    scale(&s, "cache", 0).await;
    eventually(10, "all four terminating", || async {
        let n = all_pods(&s, "cache")
            .await
            .iter()
            .filter(|p| deleting(p))
            .count();
        if n == 4 { Ok(()) } else { Err(n.to_string()) }
    })
    .await;
    rolled_out(&s, "cache", 0).await;
}

#[tokio::test]
async fn on_delete_replaces_only_deleted_pods_and_failed_pods_are_made_again() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({}), json!([])).await;
    create(
        &s,
        stateful_set("od", 2, json!({"updateStrategy": {"type": "OnDelete"}})),
    )
    .await;
    rolled_out(&s, "od", 2).await;
    set_image(&s, "od", "v2").await;
    let obj = eventually(10, "the update revision is recorded", || async {
        let obj = get_set(&s, "od").await;
        let st = &obj["status"];
        if st["observedGeneration"] == 2 && st["currentRevision"] != st["updateRevision"] {
            Ok(obj)
        } else {
            Err(st.to_string())
        }
    })
    .await;
    assert_eq!(obj["status"]["currentReplicas"], 2);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        all_pods(&s, "od")
            .await
            .iter()
            .all(|p| image_of(p) == "v1" && !deleting(p))
    );

    let (code, out) = s.delete(&format!("{PODS}/od-1?gracePeriodSeconds=0")).await;
    assert_eq!(code, 200, "{out}");
    eventually(10, "od-1 made again at v2", || async {
        tick(&s, "od", |_| true).await;
        let pods = all_pods(&s, "od").await;
        let images: Vec<(String, String)> = pods
            .iter()
            .map(|p| (name(p), image_of(p).to_string()))
            .collect();
        let want = vec![
            ("od-0".to_string(), "v1".to_string()),
            ("od-1".into(), "v2".into()),
        ];
        let mut sorted = images.clone();
        sorted.sort();
        if sorted == want {
            Ok(())
        } else {
            Err(format!("{images:?}"))
        }
    })
    .await;

    // A failed pod is deleted and made again under the same name.
    let pods = all_pods(&s, "od").await;
    let od0 = pods.iter().find(|p| name(p) == "od-0").unwrap();
    let uid = od0["metadata"]["uid"].clone();
    let (code, out) = s
        .patch(
            &format!("{PODS}/od-0/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Failed"}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(10, "od-0 made again", || async {
        tick(&s, "od", |_| true).await;
        let pods = all_pods(&s, "od").await;
        match pods.iter().find(|p| name(p) == "od-0") {
            Some(p) if p["metadata"]["uid"] != uid && p["status"]["phase"] == "Running" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn the_retention_policy_deletes_claims_on_scale_down_and_with_the_set() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({}), json!([])).await;
    let claims = json!([{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    let extra = json!({
        "podManagementPolicy": "Parallel",
        "volumeClaimTemplates": claims,
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
    });
    create(&s, stateful_set("kv", 3, extra)).await;
    let obj = rolled_out(&s, "kv", 3).await;
    let uid = obj["metadata"]["uid"].clone();
    let (_, claim) = s.get(&format!("{CLAIMS}/data-kv-2")).await;
    assert_eq!(claim["metadata"]["ownerReferences"][0]["uid"], uid);
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["kind"],
        "StatefulSet"
    );

    scale(&s, "kv", 1).await;
    rolled_out(&s, "kv", 1).await;
    eventually(20, "the claims of the removed pods are gone", || async {
        tick(&s, "kv", |_| true).await;
        let (_, list) = s.get(CLAIMS).await;
        let mut names: Vec<String> = list["items"].as_array().unwrap().iter().map(name).collect();
        names.sort();
        if names == ["data-kv-0"] {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;

    let (code, out) = s.delete(&format!("{STSS}/kv")).await;
    assert_eq!(code, 200, "{out}");
    eventually(20, "the last claim goes with the set", || async {
        tick(&s, "kv", |_| true).await;
        let (code, c) = s.get(&format!("{CLAIMS}/data-kv-0")).await;
        if code == 404 {
            Ok(())
        } else {
            Err(c.to_string())
        }
    })
    .await;
}

#[tokio::test]
async fn revision_history_is_pruned_to_its_limit() {
    let s = TestServer::start().await;
    make_node(&s, "n1", json!({}), json!([])).await;
    create(&s, stateful_set("h", 1, json!({"revisionHistoryLimit": 1}))).await;
    rolled_out(&s, "h", 1).await;
    for image in ["v2", "v3", "v4"] {
        set_image(&s, "h", image).await;
        rolled_out(&s, "h", 1).await;
    }
    eventually(10, "two revisions kept", || async {
        let revs = revisions_of(&s, "h").await;
        let numbers: Vec<i64> = revs.iter().map(|r| r.1).collect();
        if numbers == [3, 4] {
            Ok(())
        } else {
            Err(format!("{revs:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn bad_stateful_sets_are_refused_with_field_paths() {
    let s = TestServer::start().await;
    let cases = [
        (
            json!({"selector": {"matchLabels": {"app": "other"}}}),
            "spec.template.metadata.labels",
        ),
        (
            json!({"podManagementPolicy": "Sometimes"}),
            "spec.podManagementPolicy",
        ),
        (
            json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": -1}}}),
            "spec.updateStrategy.rollingUpdate.partition",
        ),
        (
            json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}),
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
        ),
        (
            json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}),
            "spec.volumeClaimTemplates[0].spec.resources[storage]",
        ),
        (
            json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Shred"}}),
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
        ),
    ];
    for (extra, field) in cases {
        let (code, out) = s.post(STSS, stateful_set("bad", 1, extra.clone())).await;
        assert_eq!(code, 422, "{extra}: {out}");
        assert_eq!(out["kind"], "Status");
        let fields: Vec<&str> = out["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{field} in {out}");
    }
    create(&s, stateful_set("ok", 1, json!({}))).await;
    let (code, out) = s
        .patch(
            &format!("{STSS}/ok"),
            "application/merge-patch+json",
            json!({"spec": {"serviceName": "other"}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("updates to statefulset spec for fields other than"),
        "{out}"
    );
    let (code, scale) = s.get(&format!("{STSS}/ok/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "app=ok");
}
