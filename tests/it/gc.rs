//! The namespace controller end to end over HTTPS: deleting a namespace with content of
//! several kinds.

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

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().unwrap().to_string()
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
