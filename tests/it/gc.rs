//! The garbage collector and the namespace controller end to end over HTTPS: each deletion
//! propagation policy, dependents of owners that do not exist, owners across namespaces,
//! custom kinds as owners and dependents, and deleting a namespace with content of
//! several kinds.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

fn ns_path(ns: &str, plural: &str) -> String {
    format!("/api/v1/namespaces/{ns}/{plural}")
}

/// An ownerReference to `owner`.
fn owner_ref(owner: &Value, block: bool) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    })
}

fn meta(name: &str, owners: &[Value]) -> Value {
    json!({"name": name, "ownerReferences": owners})
}

/// Creates an object (answer 201) and returns it.
async fn create(s: &TestServer, path: &str, body: Value) -> Value {
    let (code, made) = s.post(path, body).await;
    assert_eq!(code, 201, "create in {path}: {made}");
    made
}

async fn configmap(s: &TestServer, ns: &str, name: &str, owners: &[Value]) -> Value {
    create(
        s,
        &ns_path(ns, "configmaps"),
        json!({"metadata": meta(name, owners), "data": {"k": "v"}}),
    )
    .await
}

async fn secret(s: &TestServer, ns: &str, name: &str, owners: &[Value]) -> Value {
    create(
        s,
        &ns_path(ns, "secrets"),
        json!({"metadata": meta(name, owners), "stringData": {"k": "v"}}),
    )
    .await
}

async fn pod(s: &TestServer, ns: &str, name: &str, owners: &[Value]) -> Value {
    create(
        s,
        &ns_path(ns, "pods"),
        json!({"metadata": meta(name, owners),
               "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}}),
    )
    .await
}

async fn namespace(s: &TestServer, name: &str) -> Value {
    create(s, "/api/v1/namespaces", json!({"metadata": {"name": name}})).await
}

/// Deletes with a propagation policy in the DeleteOptions body; returns the answer.
async fn delete_with(s: &TestServer, path: &str, policy: &str) -> Value {
    let (code, body) = s
        .call(
            Method::DELETE,
            path,
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy})),
        )
        .await;
    assert_eq!(code, 200, "delete {path} ({policy}): {body}");
    body
}

/// Waits until `path` answers 404.
async fn gone(s: &TestServer, path: &str) {
    eventually(20, &format!("{path} is deleted"), || async {
        match s.get(path).await {
            (404, _) => Ok(()),
            (code, v) => Err(format!("{code}: {v}")),
        }
    })
    .await;
}

/// The object at `path`, which must exist.
async fn live(s: &TestServer, path: &str) -> Value {
    let (code, v) = s.get(path).await;
    assert_eq!(code, 200, "{path} exists: {v}");
    v
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["uid"].as_str().unwrap().to_string())
        .collect()
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().unwrap().to_string()
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn background_deletion_collects_dependents_whose_owners_are_all_gone() {
    let s = TestServer::start().await;
    let owner = configmap(&s, "default", "owner", &[]).await;
    let keeper = configmap(&s, "default", "keeper", &[]).await;
    secret(&s, "default", "only-child", &[owner_ref(&owner, false)]).await;
    pod(&s, "default", "worker", &[owner_ref(&owner, true)]).await;
    configmap(
        &s,
        "default",
        "shared",
        &[owner_ref(&owner, false), owner_ref(&keeper, false)],
    )
    .await;

    let (code, _) = s.delete(&ns_path("default", "configmaps/owner")).await;
    assert_eq!(code, 200);
    gone(&s, &ns_path("default", "secrets/only-child")).await;
    gone(&s, &ns_path("default", "pods/worker")).await;
    // Still owned by the keeper: it stays, without the reference to the owner that went.
    let shared = ns_path("default", "configmaps/shared");
    eventually(20, "shared loses the reference to the owner", || async {
        let v = live(&s, &shared).await;
        match owner_uids(&v) {
            uids if uids == [uid(&keeper)] => Ok(()),
            uids => Err(format!("{uids:?}")),
        }
    })
    .await;
    live(&s, &ns_path("default", "configmaps/keeper")).await;
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_blocking_dependents_are_gone() {
    let s = TestServer::start().await;
    let top = configmap(&s, "default", "top", &[]).await;
    let mid = configmap(&s, "default", "mid", &[owner_ref(&top, true)]).await;
    // The leaf holds the whole chain until its own finalizer goes.
    create(
        &s,
        &ns_path("default", "secrets"),
        json!({"metadata": {"name": "leaf", "finalizers": ["example.com/hold"],
                            "ownerReferences": [owner_ref(&mid, true)]}}),
    )
    .await;
    secret(&s, "default", "loose", &[owner_ref(&top, false)]).await;

    let top_path = ns_path("default", "configmaps/top");
    let answer = delete_with(&s, &top_path, "Foreground").await;
    assert!(answer["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(finalizers(&answer), ["foregroundDeletion"]);

    // Non-blocking dependents are deleted too; the middle is deleted in the foreground
    // because it has dependents of its own.
    gone(&s, &ns_path("default", "secrets/loose")).await;
    let leaf_path = ns_path("default", "secrets/leaf");
    eventually(20, "the leaf is being deleted", || async {
        let leaf = live(&s, &leaf_path).await;
        if leaf["metadata"]["deletionTimestamp"].is_string() {
            Ok(())
        } else {
            Err(leaf.to_string())
        }
    })
    .await;
    let mid_now = live(&s, &ns_path("default", "configmaps/mid")).await;
    assert_eq!(finalizers(&mid_now), ["foregroundDeletion"], "{mid_now}");
    let top_now = live(&s, &top_path).await;
    assert_eq!(finalizers(&top_now), ["foregroundDeletion"], "{top_now}");

    // The leaf's owner lets it go: the chain completes from the bottom up.
    let (code, v) = s
        .patch(
            &leaf_path,
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    gone(&s, &leaf_path).await;
    gone(&s, &ns_path("default", "configmaps/mid")).await;
    gone(&s, &top_path).await;
}

/// Upstream's conformance test "Garbage collector should not be blocked by dependency
/// circle": pod1 is owned by pod3, pod2 by pod1 and pod3 by pod2, each reference blocking;
/// pod1 deleted in the foreground takes all three with it.
#[tokio::test]
async fn an_ownership_cycle_deleted_in_the_foreground_is_collected() {
    let s = TestServer::start().await;
    let mut pods = Vec::new();
    for name in ["pod1", "pod2", "pod3"] {
        pods.push(pod(&s, "default", name, &[]).await);
    }
    for (dependent, owner) in [(0, 2), (1, 0), (2, 1)] {
        let path = ns_path("default", &format!("pods/pod{}", dependent + 1));
        let mut r = owner_ref(&pods[owner], true);
        r["controller"] = json!(true);
        let (code, v) = s
            .patch(
                &path,
                "application/strategic-merge-patch+json",
                json!({"metadata": {"ownerReferences": [r]}}),
            )
            .await;
        assert_eq!(code, 200, "{v}");
    }
    let (code, v) = s
        .call(
            Method::DELETE,
            &ns_path("default", "pods/pod1"),
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1",
                        "propagationPolicy": "Foreground",
                        "preconditions": {"uid": uid(&pods[0])}})),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    eventually(60, "every pod of the cycle is deleted", || async {
        let (_, list) = s.get(&ns_path("default", "pods")).await;
        match list["items"].as_array() {
            Some(items) if items.is_empty() => Ok(()),
            _ => Err(list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{} {}", p["metadata"]["name"], p["metadata"]))
                .collect::<Vec<_>>()
                .join("\n")),
        }
    })
    .await;
}

#[tokio::test]
async fn foreground_deletion_keeps_dependents_that_have_other_owners() {
    let s = TestServer::start().await;
    let going = configmap(&s, "default", "going", &[]).await;
    let staying = configmap(&s, "default", "staying", &[]).await;
    configmap(
        &s,
        "default",
        "both",
        &[owner_ref(&going, true), owner_ref(&staying, false)],
    )
    .await;
    delete_with(&s, &ns_path("default", "configmaps/going"), "Foreground").await;
    gone(&s, &ns_path("default", "configmaps/going")).await;
    let both = live(&s, &ns_path("default", "configmaps/both")).await;
    assert_eq!(owner_uids(&both), [uid(&staying)]);
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_removes_the_reference() {
    let s = TestServer::start().await;
    let parent = configmap(&s, "default", "parent", &[]).await;
    let other = configmap(&s, "default", "other", &[]).await;
    secret(&s, "default", "a", &[owner_ref(&parent, true)]).await;
    pod(
        &s,
        "default",
        "b",
        &[owner_ref(&parent, false), owner_ref(&other, false)],
    )
    .await;

    let parent_path = ns_path("default", "configmaps/parent");
    let answer = delete_with(&s, &parent_path, "Orphan").await;
    assert_eq!(finalizers(&answer), ["orphan"]);
    gone(&s, &parent_path).await;
    // The references went before the finalizer did, so nothing will collect them now.
    let a = live(&s, &ns_path("default", "secrets/a")).await;
    assert!(a["metadata"].get("ownerReferences").is_none(), "{a}");
    let b = live(&s, &ns_path("default", "pods/b")).await;
    assert_eq!(owner_uids(&b), [uid(&other)]);
}

#[tokio::test]
async fn a_dependent_whose_owner_uid_does_not_exist_is_collected() {
    let s = TestServer::start().await;
    let real = configmap(&s, "default", "real", &[]).await;
    let mut wrong_uid = owner_ref(&real, false);
    wrong_uid["uid"] = json!("00000000-0000-4000-8000-000000000001");
    let mut no_such = owner_ref(&real, false);
    no_such["name"] = json!("ghost");
    no_such["uid"] = json!("00000000-0000-4000-8000-000000000002");
    secret(&s, "default", "wrong-uid", &[wrong_uid]).await;
    secret(&s, "default", "no-such", &[no_such]).await;
    secret(&s, "default", "fine", &[owner_ref(&real, false)]).await;

    // An owner deleted and re-created under the same name is another owner.
    let phoenix = configmap(&s, "default", "phoenix", &[]).await;
    secret(&s, "default", "of-phoenix", &[owner_ref(&phoenix, false)]).await;
    let (code, _) = s.delete(&ns_path("default", "configmaps/phoenix")).await;
    assert_eq!(code, 200);
    let reborn = configmap(&s, "default", "phoenix", &[]).await;
    assert_ne!(uid(&reborn), uid(&phoenix));

    gone(&s, &ns_path("default", "secrets/wrong-uid")).await;
    gone(&s, &ns_path("default", "secrets/no-such")).await;
    gone(&s, &ns_path("default", "secrets/of-phoenix")).await;
    live(&s, &ns_path("default", "secrets/fine")).await;
    live(&s, &ns_path("default", "configmaps/phoenix")).await;
}

#[tokio::test]
async fn owners_are_looked_up_in_the_dependents_namespace_or_the_cluster_scope() {
    let s = TestServer::start().await;
    namespace(&s, "left").await;
    namespace(&s, "right").await;
    // A namespaced owner in another namespace is no owner at all.
    let elsewhere = configmap(&s, "left", "owner", &[]).await;
    secret(&s, "right", "misplaced", &[owner_ref(&elsewhere, false)]).await;
    gone(&s, &ns_path("right", "secrets/misplaced")).await;
    live(&s, &ns_path("left", "configmaps/owner")).await;
    eventually(20, "a warning event about the namespace", || async {
        let (_, list) = s.get(&ns_path("right", "events")).await;
        let reasons: Vec<Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["reason"].clone())
            .collect();
        if reasons.iter().any(|r| r == "OwnerRefInvalidNamespace") {
            Ok(())
        } else {
            Err(format!("{reasons:?}"))
        }
    })
    .await;

    // A cluster-scoped owner owns across namespaces.
    let node = create(
        &s,
        "/api/v1/nodes",
        json!({"metadata": {"name": "gc-node"}}),
    )
    .await;
    secret(&s, "right", "on-node", &[owner_ref(&node, false)]).await;
    secret(&s, "left", "also-on-node", &[owner_ref(&node, false)]).await;
    let (code, _) = s.delete("/api/v1/nodes/gc-node").await;
    assert_eq!(code, 200);
    gone(&s, &ns_path("right", "secrets/on-node")).await;
    gone(&s, &ns_path("left", "secrets/also-on-node")).await;
}

#[tokio::test]
async fn deleting_a_namespace_empties_it_then_removes_it() {
    let s = TestServer::start().await;
    namespace(&s, "doomed").await;
    let bystander = configmap(&s, "default", "bystander", &[]).await;
    configmap(&s, "doomed", "cm", &[]).await;
    secret(&s, "doomed", "secret", &[]).await;
    pod(&s, "doomed", "pod", &[]).await;
    create(
        &s,
        &ns_path("doomed", "serviceaccounts"),
        json!({"metadata": {"name": "sa"}}),
    )
    .await;
    create(
        &s,
        "/apis/coordination.k8s.io/v1/namespaces/doomed/leases",
        json!({"metadata": {"name": "lease"}, "spec": {"holderIdentity": "x"}}),
    )
    .await;
    create(
        &s,
        &ns_path("doomed", "events"),
        json!({"metadata": {"name": "ev"}, "reason": "Test", "message": "m", "type": "Normal",
               "involvedObject": {"kind": "Pod", "namespace": "doomed", "name": "pod"}}),
    )
    .await;
    let rc = create(
        &s,
        &ns_path("doomed", "replicationcontrollers"),
        json!({"metadata": {"name": "rc"},
               "spec": {"replicas": 0, "selector": {"app": "rc"},
                        "template": {"metadata": {"labels": {"app": "rc"}},
                                     "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    )
    .await;
    // Would be orphaned by a plain delete of its RC; the namespace takes it anyway.
    pod(&s, "doomed", "rc-pod", &[owner_ref(&rc, true)]).await;
    create(
        &s,
        &ns_path("doomed", "configmaps"),
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .await;

    let (code, ns) = s.delete("/api/v1/namespaces/doomed").await;
    assert_eq!(code, 200, "{ns}");
    assert_eq!(ns["status"]["phase"], "Terminating");
    let (code, refused) = s
        .post(
            &ns_path("doomed", "configmaps"),
            json!({"metadata": {"name": "late"}}),
        )
        .await;
    assert_eq!(code, 403, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains(
            "unable to create new content in namespace doomed because it is being terminated"
        ),
        "{refused}"
    );

    // Everything goes but the object held by a finalizer, and the namespace says so.
    let kinds = [
        ns_path("doomed", "configmaps"),
        ns_path("doomed", "secrets"),
        ns_path("doomed", "pods"),
        ns_path("doomed", "serviceaccounts"),
        ns_path("doomed", "events"),
        ns_path("doomed", "replicationcontrollers"),
        "/apis/coordination.k8s.io/v1/namespaces/doomed/leases".to_string(),
    ];
    eventually(20, "only the held object is left", || async {
        let mut left = Vec::new();
        for path in &kinds {
            let (_, list) = s.get(path).await;
            for item in list["items"].as_array().into_iter().flatten() {
                left.push(format!("{path} {}", item["metadata"]["name"]));
            }
        }
        if left.len() == 1 && left[0].ends_with("\"held\"") {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let held = eventually(
        20,
        "the namespace names the finalizer it waits for",
        || async {
            let ns = live(&s, "/api/v1/namespaces/doomed").await;
            let cond = berth::types::condition(&ns, "NamespaceFinalizersRemaining").cloned();
            match cond {
                Some(c) if c["status"] == "True" => Ok(c),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        held["message"]
            .as_str()
            .unwrap()
            .contains("example.com/hold in 1 resource instances"),
        "{held}"
    );

    let (code, v) = s
        .patch(
            &ns_path("doomed", "configmaps/held"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    gone(&s, "/api/v1/namespaces/doomed").await;
    let still = live(&s, &ns_path("default", "configmaps/bystander")).await;
    assert_eq!(uid(&still), uid(&bystander));
}

#[tokio::test]
async fn an_empty_namespace_is_deleted_at_once() {
    let s = TestServer::start().await;
    namespace(&s, "empty").await;
    let (code, _) = s.delete("/api/v1/namespaces/empty").await;
    assert_eq!(code, 200);
    gone(&s, "/api/v1/namespaces/empty").await;
    // The name is free again.
    namespace(&s, "empty").await;
}

#[tokio::test]
async fn deletions_waiting_at_a_restart_finish_after_it() {
    let s = TestServer::start().await;
    let owner = configmap(&s, "default", "owner", &[]).await;
    let hold = json!(["example.com/hold"]);
    create(
        &s,
        &ns_path("default", "secrets"),
        json!({"metadata": {"name": "blocker", "finalizers": hold,
                            "ownerReferences": [owner_ref(&owner, true)]}}),
    )
    .await;
    delete_with(&s, &ns_path("default", "configmaps/owner"), "Foreground").await;
    namespace(&s, "closing").await;
    create(
        &s,
        &ns_path("closing", "configmaps"),
        json!({"metadata": {"name": "held", "finalizers": hold}}),
    )
    .await;
    let (code, _) = s.delete("/api/v1/namespaces/closing").await;
    assert_eq!(code, 200);
    let blocker = ns_path("default", "secrets/blocker");
    eventually(20, "the blocker is being deleted", || async {
        let b = live(&s, &blocker).await;
        if b["metadata"]["deletionTimestamp"].is_string() {
            Ok(())
        } else {
            Err(b.to_string())
        }
    })
    .await;

    let s = TestServer::start_in(s.stop().await, |_| {}).await;
    let release = json!({"metadata": {"finalizers": null}});
    for path in [blocker.clone(), ns_path("closing", "configmaps/held")] {
        let (code, v) = s
            .patch(&path, "application/merge-patch+json", release.clone())
            .await;
        assert_eq!(code, 200, "{path}: {v}");
    }
    gone(&s, &blocker).await;
    gone(&s, &ns_path("default", "configmaps/owner")).await;
    gone(&s, "/api/v1/namespaces/closing").await;
}

/// A namespaced custom kind, `widgets.gc.example.com`, with a second served version.
fn widgets() -> Value {
    let schema = json!({"openAPIV3Schema": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.gc.example.com"},
        "spec": {
            "group": "gc.example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema},
                {"name": "v2", "served": true, "storage": false, "schema": schema},
            ],
        },
    })
}

const WIDGETS: &str = "/apis/gc.example.com/v1/namespaces/default/widgets";

async fn widget(s: &TestServer, name: &str, owners: &[Value]) -> Value {
    create(
        s,
        WIDGETS,
        json!({"apiVersion": "gc.example.com/v1", "kind": "Widget",
               "metadata": meta(name, owners), "spec": {"size": 1}}),
    )
    .await
}

#[tokio::test]
async fn custom_objects_own_and_depend_like_built_in_ones() {
    // The definition is made after the server (and its collector) started.
    let s = TestServer::start().await;
    create(
        &s,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widgets(),
    )
    .await;
    // A custom object owns a ConfigMap: deleting it collects the ConfigMap.
    let owner = widget(&s, "owner", &[]).await;
    configmap(&s, "default", "of-widget", &[owner_ref(&owner, false)]).await;
    // A ConfigMap owns a custom object, named by the definition's other version.
    let cm = configmap(&s, "default", "owns-widget", &[]).await;
    let mut by_v2 = owner_ref(&owner, false);
    by_v2["apiVersion"] = json!("gc.example.com/v2");
    let shared = configmap(&s, "default", "shared", &[by_v2, owner_ref(&cm, false)]).await;
    widget(&s, "of-configmap", &[owner_ref(&cm, false)]).await;

    delete_with(&s, &format!("{WIDGETS}/owner"), "Background").await;
    gone(&s, &ns_path("default", "configmaps/of-widget")).await;
    // The reference by another version names the same owner: it goes from "shared",
    // which its other owner keeps.
    eventually(20, "shared loses the reference to the widget", || async {
        let now = live(&s, &ns_path("default", "configmaps/shared")).await;
        if owner_uids(&now) == [uid(&cm)] {
            Ok(())
        } else {
            Err(now.to_string())
        }
    })
    .await;
    assert_eq!(
        uid(&shared),
        uid(&live(&s, &ns_path("default", "configmaps/shared")).await)
    );

    delete_with(
        &s,
        &ns_path("default", "configmaps/owns-widget"),
        "Background",
    )
    .await;
    gone(&s, &format!("{WIDGETS}/of-configmap")).await;

    // Foreground: a custom owner waits for its blocking dependents.
    let top = widget(&s, "top", &[]).await;
    create(
        &s,
        &ns_path("default", "secrets"),
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"],
                            "ownerReferences": [owner_ref(&top, true)]}}),
    )
    .await;
    let answer = delete_with(&s, &format!("{WIDGETS}/top"), "Foreground").await;
    assert_eq!(finalizers(&answer), ["foregroundDeletion"]);
    let held = ns_path("default", "secrets/held");
    eventually(20, "the held secret is being deleted", || async {
        let now = live(&s, &held).await;
        if now["metadata"]["deletionTimestamp"].is_string() {
            Ok(())
        } else {
            Err(now.to_string())
        }
    })
    .await;
    live(&s, &format!("{WIDGETS}/top")).await;
    let (code, v) = s
        .patch(
            &held,
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    gone(&s, &held).await;
    gone(&s, &format!("{WIDGETS}/top")).await;
    s.stop().await;
}

#[tokio::test]
async fn custom_kinds_served_at_start_are_collected_after_a_restart() {
    let s = TestServer::start().await;
    create(
        &s,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widgets(),
    )
    .await;
    let owner = widget(&s, "owner", &[]).await;
    configmap(&s, "default", "of-widget", &[owner_ref(&owner, false)]).await;
    let s = TestServer::start_in(s.stop().await, |_| {}).await;
    delete_with(&s, &format!("{WIDGETS}/owner"), "Background").await;
    gone(&s, &ns_path("default", "configmaps/of-widget")).await;
    s.stop().await;
}
