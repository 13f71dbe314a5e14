//! The deployment controller against a real server: rolling updates within their surge
//! and availability bounds, Recreate, rollback, proportional scaling, pause, history
//! limits, the progress deadline and bad specs. No node agent runs here; the tests play
//! its part by marking pods ready (the agent-driven rollout is in `recovery`).

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const RSS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    })
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
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

/// A new image for the Deployment's container, as `kubectl set image` sends it.
async fn set_image(s: &TestServer, d: &str, image: &str) -> Value {
    let (code, out) = s
        .patch(
            &format!("{DEPLOYS}/{d}"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    out
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

/// Plays the node agent once: every live pod of `app` that `ready` picks becomes Running
/// and Ready. Returns the live pods as they were.
async fn tick(s: &TestServer, app: &str, ready: impl Fn(&Value) -> bool) -> Vec<Value> {
    let live = pods(s, app).await;
    for p in live.iter().filter(|p| !is_ready(p) && ready(p)) {
        let (code, out) = s
            .patch(
                &format!("{PODS}/{}/status", name(p)),
                "application/merge-patch+json",
                json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": berth::types::now()}
                ]}}),
            )
            .await;
        assert!(code == 200 || code == 404, "{out}");
    }
    live
}

async fn rss_of(s: &TestServer, app: &str) -> Vec<Value> {
    let (code, list) = s.get(&format!("{RSS}?labelSelector=app%3D{app}")).await;
    assert_eq!(code, 200, "{list}");
    let mut items = list["items"].as_array().unwrap().clone();
    items.sort_by_key(|rs| {
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
            .as_str()
            .unwrap_or("0")
            .parse::<i64>()
            .unwrap()
    });
    items
}

fn condition<'a>(d: &'a Value, kind: &str) -> &'a Value {
    d["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// Waits, playing the agent with `ready`, until the Deployment is rolled out: every
/// replica updated and available, none old.
async fn rolled_out(s: &TestServer, d: &str, ready: impl Fn(&Value) -> bool) -> Value {
    eventually(30, &format!("{d} rolled out"), || async {
        tick(s, d, &ready).await;
        let (_, obj) = s.get(&format!("{DEPLOYS}/{d}")).await;
        let st = &obj["status"];
        let want = &obj["spec"]["replicas"];
        let done = st["observedGeneration"] == obj["metadata"]["generation"]
            && &st["updatedReplicas"] == want
            && &st["replicas"] == want
            && &st["availableReplicas"] == want
            && condition(&obj, "Progressing")["reason"] == "NewReplicaSetAvailable";
        if done { Ok(obj) } else { Err(st.to_string()) }
    })
    .await
}

#[tokio::test]
async fn a_rolling_update_keeps_within_surge_and_availability() {
    let s = TestServer::start().await;
    let (code, made) = s.post(DEPLOYS, deployment("web", 3, "v1")).await;
    assert_eq!(code, 201, "{made}");
    // Defaults as upstream.
    assert_eq!(made["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(made["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(made["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(made["spec"]["progressDeadlineSeconds"], 600);
    let d = rolled_out(&s, "web", |_| true).await;
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let available = condition(&d, "Available");
    assert_eq!(available["status"], "True");
    assert_eq!(available["reason"], "MinimumReplicasAvailable");
    let rss = rss_of(&s, "web").await;
    assert_eq!(rss.len(), 1);
    let hash = rss[0]["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(name(&rss[0]), format!("web-{hash}"));
    assert_eq!(
        rss[0]["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(
        rss[0]["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    let ann = &rss[0]["metadata"]["annotations"];
    assert_eq!(ann["deployment.kubernetes.io/desired-replicas"], "3");
    assert_eq!(ann["deployment.kubernetes.io/max-replicas"], "4");
    let (_, scale) = s.get(&format!("{DEPLOYS}/web/scale")).await;
    assert_eq!(scale["status"]["selector"], "app=web");

    // A new image: 25% of 3 is one pod over (rounded up) and none under (rounded down).
    let out = set_image(&s, "web", "v2").await;
    assert_eq!(out["metadata"]["generation"], 2);
    eventually(30, "every pod on v2", || async {
        let live = tick(&s, "web", |_| true).await;
        assert!(
            live.len() <= 4,
            "more than replicas + maxSurge: {}",
            live.len()
        );
        let ready = live.iter().filter(|p| is_ready(p)).count();
        let v2 = live.iter().filter(|p| image_of(p) == "v2").count();
        if live.len() == 3 && v2 == 3 && ready == 3 {
            Ok(())
        } else {
            Err(format!("{} live, {v2} on v2", live.len()))
        }
    })
    .await;
    let d = rolled_out(&s, "web", |_| true).await;
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    let rss = rss_of(&s, "web").await;
    assert_eq!(rss.len(), 2);
    assert_eq!(rss[0]["spec"]["replicas"], 0, "the old set is kept, empty");
    assert_eq!(rss[1]["spec"]["replicas"], 3);
    // The controller told what it did, in upstream's words.
    let (_, events) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dweb")
        .await;
    let messages: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "ScalingReplicaSet")
        .filter_map(|e| e["message"].as_str())
        .collect();
    let first = format!("Scaled up replica set {} from 0 to 3", name(&rss[0]));
    assert!(messages.contains(&first.as_str()), "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with(&format!("Scaled down replica set {}", name(&rss[0])))),
        "{messages:?}"
    );

    // A rollback as `kubectl rollout undo` makes it: the old set's template written back.
    let mut template = rss[0]["spec"]["template"].clone();
    template["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("pod-template-hash");
    let (code, out) = s
        .patch(
            &format!("{DEPLOYS}/web"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/template", "value": template}]),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let d = rolled_out(&s, "web", |_| true).await;
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    let rss = rss_of(&s, "web").await;
    assert_eq!(rss.len(), 2, "the first set is reused, not copied");
    let back = &rss[1];
    assert_eq!(
        back["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(
        back["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"],
        "1"
    );
    assert!(pods(&s, "web").await.iter().all(|p| image_of(p) == "v1"));
    s.stop().await;
}

#[tokio::test]
async fn recreate_waits_for_the_old_pods_before_starting_new_ones() {
    let s = TestServer::start().await;
    let mut d = deployment("batch", 2, "v1");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    let (code, made) = s.post(DEPLOYS, d).await;
    assert_eq!(code, 201, "{made}");
    assert!(made["spec"]["strategy"].get("rollingUpdate").is_none());
    rolled_out(&s, "batch", |_| true).await;
    set_image(&s, "batch", "v2").await;
    eventually(30, "only v2 pods", || async {
        let live = tick(&s, "batch", |_| true).await;
        let v1 = live.iter().filter(|p| image_of(p) == "v1").count();
        let v2 = live.iter().filter(|p| image_of(p) == "v2").count();
        assert!(
            v1 == 0 || v2 == 0,
            "old and new pods at once: {v1} and {v2}"
        );
        if v2 == 2 {
            Ok(())
        } else {
            Err(format!("{v1} v1, {v2} v2"))
        }
    })
    .await;
    rolled_out(&s, "batch", |_| true).await;
    // Recreate with rollingUpdate parameters is refused.
    let (code, st) = s
        .patch(
            &format!("{DEPLOYS}/batch"),
            "application/merge-patch+json",
            json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 1}}}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["field"],
        "spec.strategy.rollingUpdate"
    );
    s.stop().await;
}

/// Upstream's "deployment should support proportional scaling": a scale mid-rollout is
/// spread over the old and new sets by their size.
#[tokio::test]
async fn scaling_mid_rollout_is_proportional() {
    let s = TestServer::start().await;
    let mut d = deployment("prop", 10, "v1");
    d["spec"]["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}});
    let (code, made) = s.post(DEPLOYS, d).await;
    assert_eq!(code, 201, "{made}");
    rolled_out(&s, "prop", |_| true).await;
    // An image whose pods never become ready: the rollout stops at its bounds.
    set_image(&s, "prop", "broken").await;
    let never = |p: &Value| image_of(p) != "broken";
    eventually(30, "8 old and 5 new replicas", || async {
        tick(&s, "prop", never).await;
        let sizes: Vec<i64> = rss_of(&s, "prop")
            .await
            .iter()
            .map(|rs| rs["spec"]["replicas"].as_i64().unwrap())
            .collect();
        if sizes == [8, 5] {
            Ok(())
        } else {
            Err(format!("{sizes:?}"))
        }
    })
    .await;
    let (code, out) = s
        .patch(
            &format!("{DEPLOYS}/prop/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 30}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    // 8 + 20 * 8/13 = 20 and 5 + 20 * 5/13 = 13.
    eventually(30, "20 old and 13 new replicas", || async {
        tick(&s, "prop", never).await;
        let sizes: Vec<i64> = rss_of(&s, "prop")
            .await
            .iter()
            .map(|rs| rs["spec"]["replicas"].as_i64().unwrap())
            .collect();
        if sizes == [20, 13] {
            Ok(())
        } else {
            Err(format!("{sizes:?}"))
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn a_paused_deployment_rolls_out_on_resume_and_old_sets_are_pruned() {
    let s = TestServer::start().await;
    let mut d = deployment("hist", 1, "v1");
    d["spec"]["revisionHistoryLimit"] = json!(1);
    let (code, made) = s.post(DEPLOYS, d).await;
    assert_eq!(code, 201, "{made}");
    rolled_out(&s, "hist", |_| true).await;
    for v in ["v2", "v3"] {
        set_image(&s, "hist", v).await;
        rolled_out(&s, "hist", |_| true).await;
    }
    eventually(30, "one old set kept", || async {
        let rss = rss_of(&s, "hist").await;
        let images: Vec<&str> = rss
            .iter()
            .map(|rs| {
                rs["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        if images == ["v2", "v3"] {
            Ok(())
        } else {
            Err(format!("{images:?}"))
        }
    })
    .await;

    // Paused: a template change makes no new set until resumed.
    let (code, out) = s
        .patch(
            &format!("{DEPLOYS}/hist"),
            "application/merge-patch+json",
            json!({"spec": {"paused": true}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(30, "the paused condition", || async {
        let (_, d) = s.get(&format!("{DEPLOYS}/hist")).await;
        let c = condition(&d, "Progressing");
        if c["reason"] == "DeploymentPaused" && c["status"] == "Unknown" {
            Ok(())
        } else {
            Err(c.to_string())
        }
    })
    .await;
    set_image(&s, "hist", "v4").await;
    eventually(30, "the paused generation observed", || async {
        let (_, d) = s.get(&format!("{DEPLOYS}/hist")).await;
        if d["status"]["observedGeneration"] == d["metadata"]["generation"] {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    assert!(
        rss_of(&s, "hist")
            .await
            .iter()
            .all(|rs| rs["spec"]["template"]["spec"]["containers"][0]["image"] != "v4"),
        "no set for a paused template"
    );
    let (code, out) = s
        .patch(
            &format!("{DEPLOYS}/hist"),
            "application/merge-patch+json",
            json!({"spec": {"paused": false}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    rolled_out(&s, "hist", |_| true).await;
    assert!(pods(&s, "hist").await.iter().all(|p| image_of(p) == "v4"));
    s.stop().await;
}

#[tokio::test]
async fn a_rollout_without_progress_exceeds_its_deadline() {
    let s = TestServer::start().await;
    let mut d = deployment("stuck", 2, "v1");
    d["spec"]["progressDeadlineSeconds"] = json!(2);
    let (code, made) = s.post(DEPLOYS, d).await;
    assert_eq!(code, 201, "{made}");
    // No pod ever becomes ready.
    let d = eventually(30, "the deadline exceeded", || async {
        let (_, d) = s.get(&format!("{DEPLOYS}/stuck")).await;
        let c = condition(&d, "Progressing");
        if c["reason"] == "ProgressDeadlineExceeded" {
            Ok(d)
        } else {
            Err(c.to_string())
        }
    })
    .await;
    let c = condition(&d, "Progressing");
    assert_eq!(c["status"], "False");
    let rs = &rss_of(&s, "stuck").await[0];
    assert_eq!(
        c["message"],
        format!("ReplicaSet {:?} has timed out progressing.", name(rs))
    );
    assert_eq!(
        condition(&d, "Available")["reason"],
        "MinimumReplicasUnavailable"
    );
    s.stop().await;
}

#[tokio::test]
async fn bad_deployments_are_refused_with_field_paths() {
    let s = TestServer::start().await;
    let cases = [
        (
            json!({"template": {"metadata": {"labels": {"app": "other"}}}}),
            "spec.template.metadata.labels",
            "`selector` does not match template `labels`",
        ),
        (
            json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}),
            "spec.strategy.rollingUpdate.maxUnavailable",
            "may not be 0 when `maxSurge` is 0",
        ),
        (
            json!({"strategy": {"rollingUpdate": {"maxUnavailable": "150%"}}}),
            "spec.strategy.rollingUpdate.maxUnavailable",
            "must not be greater than 100%",
        ),
        (
            json!({"strategy": {"rollingUpdate": {"maxSurge": "x%"}}}),
            "spec.strategy.rollingUpdate.maxSurge",
            "a valid percent string",
        ),
        (
            json!({"strategy": {"type": "Blue"}}),
            "spec.strategy.type",
            "Unsupported value: \"Blue\"",
        ),
        (
            json!({"minReadySeconds": 30, "progressDeadlineSeconds": 10}),
            "spec.progressDeadlineSeconds",
            "must be greater than minReadySeconds",
        ),
        (
            json!({"replicas": -1}),
            "spec.replicas",
            "must be greater than or equal to 0",
        ),
        (
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}}),
            "spec.selector.matchExpressions[0].values",
            "must be specified",
        ),
    ];
    for (spec, field, message) in cases {
        let mut d = deployment("bad", 1, "v1");
        json_patch::merge(&mut d["spec"], &spec);
        let (code, st) = s.post(DEPLOYS, d).await;
        assert_eq!(code, 422, "{spec}: {st}");
        let causes = st["details"]["causes"].as_array().unwrap();
        assert!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["message"].as_str().unwrap().contains(message)),
            "{spec}: {st}"
        );
    }
    let (code, made) = s.post(DEPLOYS, deployment("fixed", 1, "v1")).await;
    assert_eq!(code, 201, "{made}");
    let (code, st) = s
        .patch(
            &format!("{DEPLOYS}/fixed"),
            "application/merge-patch+json",
            json!({"spec": {"selector": {"matchLabels": {"app": "fixed", "tier": "x"}},
                "template": {"metadata": {"labels": {"tier": "x"}}}}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("spec.selector: Invalid value"),
        "{st}"
    );
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{st}"
    );
    s.stop().await;
}

#[tokio::test]
async fn pods_count_as_available_only_after_min_ready_seconds() {
    let s = TestServer::start().await;
    let mut d = deployment("slow", 1, "v1");
    d["spec"]["minReadySeconds"] = json!(2);
    let (code, made) = s.post(DEPLOYS, d).await;
    assert_eq!(code, 201, "{made}");
    let ready = eventually(30, "a ready pod", || async {
        let live = tick(&s, "slow", |_| true).await;
        if live.iter().any(is_ready) {
            Ok(())
        } else {
            Err(format!("{} pods", live.len()))
        }
    });
    ready.await;
    let (_, early) = s.get(&format!("{DEPLOYS}/slow")).await;
    assert!(
        early["status"]["availableReplicas"].is_null(),
        "available before minReadySeconds: {}",
        early["status"]
    );
    let d = rolled_out(&s, "slow", |_| true).await;
    assert_eq!(condition(&d, "Available")["status"], "True");
    let rss = rss_of(&s, "slow").await;
    assert_eq!(rss[0]["spec"]["minReadySeconds"], 2, "the set carries it");
    s.stop().await;
}
