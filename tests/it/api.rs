//! The API server end to end over HTTPS: authentication, discovery, CRUD with Kubernetes
//! semantics, errors as Status, subresources, patches, finalizers, watches, restarts.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestServer, eventually, https_client, within};

/// The bare API, as these tests pin down: no controllers writing meanwhile (the
/// controllers have tests of their own).
async fn bare() -> TestServer {
    TestServer::start_with(|c| c.run_controllers = false).await
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

fn rc(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"app": name},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}}}})
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn requests_without_a_valid_token_get_401_but_health_is_open() {
    let s = bare().await;
    let anon = https_client(&s.ca_pem);
    for path in ["/healthz", "/livez", "/readyz"] {
        let r = anon.get(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    let v: Value = anon
        .get(format!("{}/version", s.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["major"], "1");
    for token in [None, Some("wrong")] {
        let mut r = anon.get(format!("{}/api/v1/namespaces", s.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "Unauthorized");
        assert_eq!(body["code"], 401);
    }
    let (code, _) = s.get("/api/v1/namespaces").await;
    assert_eq!(code, 200);
    s.stop().await;
}

#[tokio::test]
async fn discovery_is_served_aggregated_and_legacy() {
    let s = bare().await;
    let aggregated =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    for path in ["/api", "/apis"] {
        let r = s
            .req(Method::GET, path)
            .header("Accept", aggregated)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers()["content-type"],
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["kind"], "APIGroupDiscoveryList");
        if path == "/api" {
            let resources = &v["items"][0]["versions"][0]["resources"];
            let pods = resources
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["resource"] == "pods")
                .unwrap();
            assert_eq!(pods["shortNames"], json!(["po"]));
            assert_eq!(pods["categories"], json!(["all"]));
            assert_eq!(pods["scope"], "Namespaced");
            let rcs = resources
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["resource"] == "replicationcontrollers")
                .unwrap();
            let subs: Vec<&str> = rcs["subresources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["subresource"].as_str().unwrap())
                .collect();
            assert_eq!(subs, ["scale", "status"]);
            let eviction = pods["subresources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["subresource"] == "eviction")
                .unwrap();
            // kubectl drain reads the Eviction's version from here.
            assert_eq!(
                eviction["responseKind"],
                json!({"group": "policy", "version": "v1", "kind": "Eviction"})
            );
            let pods: Vec<&str> = pods["subresources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["subresource"].as_str().unwrap())
                .collect();
            assert_eq!(
                pods,
                [
                    "status",
                    "attach",
                    "binding",
                    "eviction",
                    "exec",
                    "log",
                    "portforward",
                    "proxy"
                ]
            );
            assert!(v["items"][0]["metadata"].get("name").is_none());
        } else {
            assert_eq!(v["items"][0]["metadata"]["name"], "apps");
        }
    }
    let (_, legacy) = s.get("/api").await;
    assert_eq!(legacy["kind"], "APIVersions");
    let (_, groups) = s.get("/apis").await;
    assert_eq!(
        groups["groups"][0]["preferredVersion"]["groupVersion"],
        "apps/v1"
    );
    let (_, core) = s.get("/api/v1").await;
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"pods")
            && names.contains(&"pods/status")
            && names.contains(&"replicationcontrollers/scale")
    );
    let (code, _) = s.get("/apis/coordination.k8s.io/v1").await;
    assert_eq!(code, 200);
    let (code, st) = s.get("/apis/nothing.example/v1").await;
    assert_eq!((code, st["reason"].as_str()), (404, Some("NotFound")));
    // The review APIs that `kubectl auth` posts to are listed too, create-only.
    let r = s
        .req(Method::GET, "/apis")
        .header("Accept", aggregated)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    let authz = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "authorization.k8s.io")
        .expect("authorization.k8s.io in aggregated discovery");
    let ssar = &authz["versions"][0]["resources"][0];
    assert_eq!(
        (ssar["resource"].as_str(), ssar["scope"].as_str()),
        (Some("selfsubjectaccessreviews"), Some("Cluster"))
    );
    assert_eq!(ssar["verbs"], json!(["create"]));
    let (code, legacy) = s.get("/apis/authentication.k8s.io/v1").await;
    assert_eq!(code, 200);
    assert_eq!(legacy["resources"][0]["name"], "selfsubjectreviews");
    assert_eq!(legacy["resources"][0]["kind"], "SelfSubjectReview");
    let (code, group) = s.get("/apis/authentication.k8s.io").await;
    assert_eq!((code, group["kind"].as_str()), (200, Some("APIGroup")));
    // With a trailing slash, the same answers (as kube-apiserver gives them).
    for (path, kind) in [
        ("/api/", "APIVersions"),
        ("/apis/", "APIGroupList"),
        ("/api/v1/", "APIResourceList"),
        ("/apis/coordination.k8s.io/", "APIGroup"),
        ("/apis/coordination.k8s.io/v1/", "APIResourceList"),
    ] {
        let (code, v) = s.get(path).await;
        assert_eq!((code, v["kind"].as_str()), (200, Some(kind)), "{path}");
    }
    // OpenAPI v2 documents every kind in JSON; in gnostic's protobuf it is empty.
    let (code, v2) = s.get("/openapi/v2").await;
    assert_eq!((code, v2["swagger"].as_str()), (200, Some("2.0")), "{v2}");
    assert!(v2["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    let r = s
        .req(Method::GET, "/openapi/v2")
        .header(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    let pb = r.bytes().await.unwrap();
    // Field 1 (swagger) = "2.0", then field 2 (info), and an empty field 8 (paths) last.
    assert_eq!(&pb[..5], b"\x0a\x032.0");
    assert_eq!(&pb[pb.len() - 2..], b"\x42\x00");
    // A path nobody serves answers kube-apiserver's Status, byte for byte.
    let r = s
        .req(Method::GET, "/apis/nothing.example/v1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(
        r.text().await.unwrap(),
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#,
            "\n"
        )
    );
    s.stop().await;
}

#[tokio::test]
async fn create_get_list_update_delete_follow_kubernetes_rules() {
    let s = bare().await;
    let (code, created) = s.post(CMS, cm("a", json!({"app": "web"}))).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["namespace"], "default");
    assert_eq!(created["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let (code, again) = s.post(CMS, cm("a", json!({}))).await;
    assert_eq!(code, 409);
    assert_eq!(again["reason"], "AlreadyExists");
    assert_eq!(again["message"], "configmaps \"a\" already exists");

    let (code, got) = s.get(&format!("{CMS}/a")).await;
    assert_eq!((code, &got), (200, &created));

    // generateName
    let (code, gen_) = s
        .post(
            CMS,
            json!({"metadata": {"generateName": "gen-"}, "data": {}}),
        )
        .await;
    assert_eq!(code, 201);
    let name = gen_["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // Update: stale resourceVersion conflicts; no-op keeps the resourceVersion.
    let mut changed = created.clone();
    changed["data"]["k"] = json!("v2");
    let (code, updated) = s.put(&format!("{CMS}/a"), changed.clone()).await;
    assert_eq!(code, 200, "{updated}");
    assert!(rv(&updated) > rv(&created));
    let (code, conflict) = s.put(&format!("{CMS}/a"), changed).await;
    assert_eq!(code, 409);
    assert_eq!(conflict["reason"], "Conflict");
    assert!(
        conflict["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
    let (code, same) = s.put(&format!("{CMS}/a"), updated.clone()).await;
    assert_eq!(code, 200);
    assert_eq!(
        rv(&same),
        rv(&updated),
        "a write that changes nothing keeps the resourceVersion"
    );

    // Name in the body must match the URL.
    let mut wrong = updated.clone();
    wrong["metadata"]["name"] = json!("b");
    let (code, st) = s.put(&format!("{CMS}/a"), wrong).await;
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")));

    let (code, gone) = s.delete(&format!("{CMS}/a")).await;
    assert_eq!(code, 200);
    assert_eq!(gone["metadata"]["name"], "a");
    let (code, nf) = s.get(&format!("{CMS}/a")).await;
    assert_eq!(code, 404);
    assert_eq!(nf["message"], "configmaps \"a\" not found");
    assert_eq!(nf["details"], json!({"name": "a", "kind": "configmaps"}));
    let (code, _) = s.delete(&format!("{CMS}/a")).await;
    assert_eq!(code, 404);
    s.stop().await;
}

#[tokio::test]
async fn lists_select_by_label_and_field_and_page_with_continue() {
    let s = bare().await;
    for (i, app) in ["web", "web", "db", "web", "cache"].iter().enumerate() {
        let (code, _) = s
            .post(
                CMS,
                cm(&format!("cm-{i}"), json!({"app": app, "i": i.to_string()})),
            )
            .await;
        assert_eq!(code, 201);
    }
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, all) = s.get(CMS).await;
    assert_eq!(all["kind"], "ConfigMapList");
    assert_eq!(all["apiVersion"], "v1");
    assert!(rv(&all) > 0);
    assert_eq!(names(&all).len(), 5);
    for (sel, want) in [
        ("app%3Dweb", vec!["cm-0", "cm-1", "cm-3"]),
        ("app%20in%20(db,cache)", vec!["cm-2", "cm-4"]),
        ("app!%3Dweb,i", vec!["cm-2", "cm-4"]),
        ("!app", vec![]),
    ] {
        let (code, v) = s.get(&format!("{CMS}?labelSelector={sel}")).await;
        assert_eq!(code, 200, "{sel}: {v}");
        assert_eq!(names(&v), want, "{sel}");
    }
    let (_, v) = s
        .get(&format!("{CMS}?fieldSelector=metadata.name%3Dcm-3"))
        .await;
    assert_eq!(names(&v), ["cm-3"]);
    let (code, v) = s.get(&format!("{CMS}?fieldSelector=data.k%3Dv")).await;
    assert_eq!(code, 400);
    assert_eq!(v["message"], "field label not supported: data.k");
    let (code, v) = s.get(&format!("{CMS}?labelSelector=app%20in%20(")).await;
    assert_eq!((code, v["reason"].as_str()), (400, Some("BadRequest")));

    // Paging with a selector: two at a time until no continue token.
    let mut seen = Vec::new();
    let mut path = format!("{CMS}?labelSelector=app%3Dweb&limit=2");
    loop {
        let (code, page) = s.get(&path).await;
        assert_eq!(code, 200);
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(c) => path = format!("{CMS}?labelSelector=app%3Dweb&limit=2&continue={c}"),
            None => break,
        }
    }
    assert_eq!(seen, ["cm-0", "cm-1", "cm-3"]);
    // Without a selector each page tells how many objects follow it.
    let mut remaining = Vec::new();
    let mut path = format!("{CMS}?limit=2");
    loop {
        let (_, page) = s.get(&path).await;
        remaining.push(page["metadata"]["remainingItemCount"].as_u64());
        match page["metadata"]["continue"].as_str() {
            Some(c) => path = format!("{CMS}?limit=2&continue={c}"),
            None => break,
        }
    }
    assert_eq!(remaining, [Some(3), Some(1), None]);
    // With a selector that number is unknown, as Kubernetes leaves it.
    let (_, page) = s
        .get(&format!("{CMS}?labelSelector=app%3Dweb&limit=1"))
        .await;
    assert!(page["metadata"]["continue"].is_string());
    assert!(
        page["metadata"].get("remainingItemCount").is_none(),
        "{page}"
    );
    let (code, _) = s.get(&format!("{CMS}?limit=2&continue=garbage")).await;
    assert_eq!(code, 400);

    // Across namespaces, and a namespace list.
    let (_, v) = s.get("/api/v1/configmaps").await;
    assert_eq!(names(&v).len(), 5);
    let (_, v) = s.get("/api/v1/namespaces").await;
    assert_eq!(
        names(&v),
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    s.stop().await;
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx_status() {
    let s = bare().await;
    // Invalid objects: every problem, with field paths.
    let (code, v) = s
        .post("/api/v1/namespaces/default/pods", json!({"metadata": {"name": "Bad_Name", "labels": {"-x": "y"}}, "spec": {"containers": []}}))
        .await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["reason"], "Invalid");
    assert_eq!(v["details"]["kind"], "Pod");
    let fields: Vec<&str> = v["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["metadata.name", "metadata.labels", "spec.containers"]
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("Pod \"Bad_Name\" is invalid: [")
    );

    let (code, v) = s.post(CMS, json!({"metadata": {}})).await;
    assert_eq!(
        (code, v["details"]["causes"][0]["field"].as_str()),
        (422, Some("metadata.name"))
    );

    // Not JSON, not an object, the wrong kind, a namespace mismatch.
    let r = s
        .req(Method::POST, CMS)
        .header("Content-Type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["kind"], "Status");
    let (code, _) = s.post(CMS, json!([1, 2])).await;
    assert_eq!(code, 400);
    let (code, v) = s
        .post(CMS, json!({"kind": "Pod", "metadata": {"name": "x"}}))
        .await;
    assert_eq!(code, 400, "{v}");
    let (code, _) = s
        .post(
            CMS,
            json!({"metadata": {"name": "x", "namespace": "other"}}),
        )
        .await;
    assert_eq!(code, 400);
    // Media types, sizes, methods, paths.
    let r = s
        .req(Method::POST, CMS)
        .header("Content-Type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let r = s
        .req(Method::PATCH, &format!("{CMS}/x"))
        .header("Content-Type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let big = json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(3 * 1024 * 1024 + 10)}});
    let (code, v) = s.post(CMS, big).await;
    assert_eq!(
        (code, v["reason"].as_str()),
        (413, Some("RequestEntityTooLarge"))
    );
    // Nor can writes grow an object past that size, a patch at a time… (A pod template's
    // environment, as Kubernetes bounds a ConfigMap's data to 1 MiB.)
    let half = "x".repeat(2 * 1024 * 1024);
    let rcs = "/api/v1/namespaces/default/replicationcontrollers";
    let env = "/spec/template/spec/containers/0/env";
    let mut big = rc("half", 0);
    big["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": half}]);
    let (code, v) = s.post(rcs, big).await;
    assert_eq!(code, 201, "{v}");
    let before = v["metadata"]["resourceVersion"].clone();
    let (code, v) = s
        .patch(
            &format!("{rcs}/half"),
            "application/json-patch+json",
            json!([{"op": "add", "path": format!("{env}/-"), "value": {"name": "B", "value": half}}]),
        )
        .await;
    assert_eq!(
        (code, v["reason"].as_str()),
        (413, Some("RequestEntityTooLarge")),
        "{}",
        v["message"]
    );
    // …or by a JSON patch that copies what it has over and over.
    let doubling: Vec<Value> = (0..30)
        .map(|_| json!({"op": "copy", "from": format!("{env}/0"), "path": format!("{env}/-")}))
        .collect();
    let (code, v) = s
        .patch(
            &format!("{rcs}/half"),
            "application/json-patch+json",
            Value::Array(doubling),
        )
        .await;
    assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")), "{v}");
    let (_, v) = s.get(&format!("{rcs}/half")).await;
    assert_eq!(v["metadata"]["resourceVersion"], before);
    assert_eq!(v.pointer(env).unwrap().as_array().unwrap().len(), 1);
    let (code, _) = s
        .call(Method::POST, &format!("{CMS}/x"), Some(json!({})))
        .await;
    assert_eq!(code, 405);
    // Empty apiVersion and kind read as absent, as Kubernetes' decoder reads them; others
    // must match the URL's.
    let (code, v) = s
        .post(
            CMS,
            json!({"apiVersion": "", "kind": "", "metadata": {"name": "typeless"}}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        (v["apiVersion"].as_str(), v["kind"].as_str()),
        (Some("v1"), Some("ConfigMap"))
    );
    for (body, message) in [
        (
            json!({"apiVersion": "v2"}),
            "the API version in the data (v2) does not match the expected API version (v1)",
        ),
        (
            json!({"kind": "Pod"}),
            "the kind in the data (Pod) does not match the expected kind (ConfigMap)",
        ),
        (
            json!({"apiVersion": 1}),
            "apiVersion must be a string, not 1",
        ),
    ] {
        let (code, v) = s.post(CMS, body).await;
        assert_eq!((code, v["message"].as_str()), (400, Some(message)));
    }
    let (code, _) = s.get("/api/v1/namespaces/default/widgets").await;
    assert_eq!(code, 404);
    let (code, _) = s.get("/nothing/here").await;
    assert_eq!(code, 404);
    // A namespace that does not exist.
    let (code, v) = s
        .post("/api/v1/namespaces/nope/configmaps", cm("x", json!({})))
        .await;
    assert_eq!(code, 404);
    assert_eq!(v["message"], "namespaces \"nope\" not found");
    s.stop().await;
}

/// A status write keeps the metadata it carries, as kube-apiserver's status strategies
/// do, but for what the kind resets (a Deployment's labels, a Pod's owners) and what no
/// update changes (uid, creation time, generation); an object being deleted gains no
/// finalizer through its status either.
#[tokio::test]
async fn a_status_write_keeps_the_metadata_it_carries_but_what_the_kind_resets() {
    let s = bare().await;
    let merge = "application/merge-patch+json";
    let rcs = "/api/v1/namespaces/default/replicationcontrollers";
    let (code, created) = s.post(rcs, rc("meta", 1)).await;
    assert_eq!(code, 201, "{created}");
    let (code, v) = s
        .patch(
            &format!("{rcs}/meta/status"),
            merge,
            json!({"metadata": {"annotations": {"seen": "yes"}, "labels": {"tier": "a"},
                                "uid": created["metadata"]["uid"],
                                "creationTimestamp": "2001-01-01T00:00:00Z",
                                "generation": 9},
                   "spec": {"replicas": 5},
                   "status": {"replicas": 1}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["annotations"]["seen"], "yes");
    assert_eq!(v["metadata"]["labels"]["tier"], "a");
    assert_eq!(v["status"]["replicas"], 1);
    assert_eq!(v["spec"]["replicas"], 1, "the spec is not a status write's");
    assert_eq!(v["metadata"]["generation"], 1);
    assert_eq!(
        v["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    // A stale resourceVersion is a conflict, as for any write.
    let mut stale = created.clone();
    stale["metadata"]["annotations"] = json!({"stale": "1"});
    let (code, _) = s.put(&format!("{rcs}/meta/status"), stale).await;
    assert_eq!(code, 409);

    // A Deployment's status writer does not relabel it.
    let deploys = "/apis/apps/v1/namespaces/default/deployments";
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "meta", "labels": {"app": "meta"}},
        "spec": {"selector": {"matchLabels": {"app": "meta"}},
            "template": {"metadata": {"labels": {"app": "meta"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    let (code, out) = s.post(deploys, d).await;
    assert_eq!(code, 201, "{out}");
    let (code, v) = s
        .patch(
            &format!("{deploys}/meta/status"),
            merge,
            json!({"metadata": {"labels": {"app": "other"}, "annotations": {"seen": "yes"}},
                   "status": {"replicas": 0, "observedGeneration": 1}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["labels"], json!({"app": "meta"}));
    assert_eq!(v["metadata"]["annotations"]["seen"], "yes");
    assert_eq!(v["status"]["observedGeneration"], 1);

    // Nor does a Pod's name its owners.
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "meta"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}});
    let (code, p) = s.post(pods, pod).await;
    assert_eq!(code, 201, "{p}");
    let owner = json!([{"apiVersion": "v1", "kind": "ReplicationController", "name": "meta",
                        "uid": created["metadata"]["uid"]}]);
    let (code, v) = s
        .patch(
            &format!("{pods}/meta/status"),
            merge,
            json!({"metadata": {"ownerReferences": owner, "labels": {"seen": "yes"}},
                   "status": {"message": "hi"}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert!(v["metadata"].get("ownerReferences").is_none(), "{v}");
    assert_eq!(v["metadata"]["labels"]["seen"], "yes");
    assert_eq!(v["status"]["message"], "hi");

    // An object being deleted may lose finalizers through its status, never gain one.
    let (code, _) = s
        .patch(
            &format!("{rcs}/meta"),
            merge,
            json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = s.delete(&format!("{rcs}/meta")).await;
    assert_eq!(code, 200);
    let (code, v) = s
        .patch(
            &format!("{rcs}/meta/status"),
            merge,
            json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
        )
        .await;
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("no new finalizers"),
        "{v}"
    );
    let (code, v) = s
        .patch(
            &format!("{rcs}/meta/status"),
            merge,
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let (code, _) = s.get(&format!("{rcs}/meta")).await;
    assert_eq!(code, 404, "the last finalizer gone, the deletion completes");
    s.stop().await;
}

#[tokio::test]
async fn status_and_spec_are_written_separately_and_generation_tracks_spec() {
    // The bare API: no replication manager writing the status meanwhile.
    let s = bare().await;
    let path = "/api/v1/namespaces/default/replicationcontrollers";
    let (code, created) = s.post(path, rc("web", 2)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["generation"], 1);
    assert_eq!(created["status"], json!({"replicas": 0}));

    // The main resource ignores status.
    let mut o = created.clone();
    o["status"] = json!({"replicas": 7});
    o["metadata"]["labels"] = json!({"app": "web", "extra": "1"});
    let (_, v) = s.put(&format!("{path}/web"), o).await;
    assert_eq!(v["status"]["replicas"], 0);
    assert_eq!(
        v["metadata"]["generation"], 1,
        "a metadata change keeps the generation"
    );

    // The status subresource ignores everything but status.
    let mut o = v.clone();
    o["status"] = json!({"replicas": 2, "readyReplicas": 1});
    o["spec"]["replicas"] = json!(9);
    let (code, v) = s.put(&format!("{path}/web/status"), o).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"]["readyReplicas"], 1);
    assert_eq!(v["spec"]["replicas"], 2);
    assert_eq!(v["metadata"]["generation"], 1);
    // Even a spec that would not be valid: what is checked is what is stored.
    let (code, v) = s
        .patch(
            &format!("{path}/web/status"),
            "application/merge-patch+json",
            json!({"spec": {"selector": null, "template": {"spec": {"containers": null}}},
                   "status": {"replicas": 2, "readyReplicas": 2}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"]["readyReplicas"], 2);
    assert_eq!(v["spec"]["selector"], json!({"app": "web"}));

    // A spec change bumps the generation.
    let (_, v) = s
        .patch(
            &format!("{path}/web"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(v["metadata"]["generation"], 2);
    assert_eq!(v["status"]["readyReplicas"], 2);

    // Scale: get, merge-patch, and PUT without a Content-Type.
    let (_, sc) = s.get(&format!("{path}/web/scale")).await;
    assert_eq!(sc["kind"], "Scale");
    assert_eq!(sc["apiVersion"], "autoscaling/v1");
    assert_eq!(
        (
            sc["spec"]["replicas"].as_i64(),
            sc["status"]["selector"].as_str()
        ),
        (Some(3), Some("app=web"))
    );
    let (code, sc) = s
        .patch(
            &format!("{path}/web/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!((code, sc["spec"]["replicas"].as_i64()), (200, Some(5)));
    let mut put = sc.clone();
    put["spec"]["replicas"] = json!(1);
    let r = s
        .req(Method::PUT, &format!("{path}/web/scale"))
        .body(serde_json::to_vec(&put).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (code, st) = s.put(&format!("{path}/web/scale"), put).await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (409, Some("Conflict")),
        "the Scale's resourceVersion is now stale"
    );
    let (_, v) = s.get(&format!("{path}/web")).await;
    assert_eq!(v["spec"]["replicas"], 1);
    s.stop().await;
}

#[tokio::test]
async fn patches_merge_json_and_reject_what_they_cannot_apply() {
    let s = bare().await;
    s.post(CMS, cm("p", json!({"app": "web", "tier": "fe"})))
        .await;
    let (code, v) = s
        .patch(
            &format!("{CMS}/p"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"tier": null, "x": "1"}}, "data": {"k2": "v2"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(v["metadata"]["labels"], json!({"app": "web", "x": "1"}));
    assert_eq!(v["data"], json!({"k": "v", "k2": "v2"}));
    let (code, v) = s.patch(&format!("{CMS}/p"), "application/json-patch+json", json!([{"op": "replace", "path": "/data/k", "value": "new"}, {"op": "remove", "path": "/data/k2"}])).await;
    assert_eq!(code, 200);
    assert_eq!(v["data"], json!({"k": "new"}));
    let (code, v) = s
        .patch(
            &format!("{CMS}/p"),
            "application/json-patch+json",
            json!([{"op": "remove", "path": "/data/none"}]),
        )
        .await;
    // As Kubernetes: a well-formed patch that cannot apply is unprocessable.
    assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")));
    // Also when it fails after an append to a list it then moves away, and nothing of it
    // is kept.
    let (code, v) = s
        .patch(
            &format!("{CMS}/p"),
            "application/json-patch+json",
            json!([
                {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "c/d"},
                {"op": "move", "from": "/metadata/finalizers", "path": "/metadata/nope/x"},
            ]),
        )
        .await;
    assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")), "{v}");
    let (_, v) = s.get(&format!("{CMS}/p")).await;
    assert_eq!(v["metadata"].get("finalizers"), None);
    // A patch carrying a stale resourceVersion is a precondition.
    let (code, v) = s
        .patch(
            &format!("{CMS}/p"),
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": "1"}, "data": {"k": "x"}}),
        )
        .await;
    assert_eq!((code, v["reason"].as_str()), (409, Some("Conflict")));
    let (code, _) = s
        .patch(
            &format!("{CMS}/missing"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(code, 404);
    s.stop().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let s = bare().await;
    let mut o = cm("f", json!({}));
    o["metadata"]["finalizers"] = json!(["example.com/hold"]);
    s.post(CMS, o).await;
    let (code, v) = s.delete(&format!("{CMS}/f")).await;
    assert_eq!(code, 200);
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    let (code, v) = s.get(&format!("{CMS}/f")).await;
    assert_eq!(code, 200, "still there while a finalizer holds it");
    // No new finalizers on an object being deleted.
    let (code, st) = s
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.com/hold", "x.io/more"]}}),
        )
        .await;
    assert_eq!((code, st["reason"].as_str()), (422, Some("Invalid")));
    let mut w = s
        .watch(&format!(
            "{CMS}?watch=true&resourceVersion={}",
            v["metadata"]["resourceVersion"].as_str().unwrap()
        ))
        .await;
    let (code, gone) = s
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200);
    // The answer, and the watch, show the object as the write left it.
    assert!(gone["metadata"].get("finalizers").is_none(), "{gone}");
    let e = w.next_change().await;
    assert_eq!(e["type"], "DELETED");
    assert!(e["object"]["metadata"].get("finalizers").is_none(), "{e}");
    let (code, _) = s.get(&format!("{CMS}/f")).await;
    assert_eq!(
        code, 404,
        "removing the last finalizer completes the deletion"
    );

    // Delete preconditions.
    let (_, created) = s.post(CMS, cm("g", json!({}))).await;
    let wrong = json!({"preconditions": {"uid": "not-it"}});
    let (code, st) = s
        .call(Method::DELETE, &format!("{CMS}/g"), Some(wrong))
        .await;
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
    let right = json!({"preconditions": {"uid": created["metadata"]["uid"], "resourceVersion": created["metadata"]["resourceVersion"]}, "propagationPolicy": "Background"});
    let (code, _) = s
        .call(Method::DELETE, &format!("{CMS}/g"), Some(right))
        .await;
    assert_eq!(code, 200);
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_namespace_marks_it_terminating_and_closes_it() {
    let s = bare().await;
    let (code, ns) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
        .await;
    assert_eq!(code, 201);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team"
    );
    let (code, _) = s
        .post("/api/v1/namespaces/team/configmaps", cm("a", json!({})))
        .await;
    assert_eq!(code, 201);
    let (code, v) = s.delete("/api/v1/namespaces/team").await;
    assert_eq!(code, 200);
    assert_eq!(v["status"]["phase"], "Terminating");
    let (code, st) = s
        .post("/api/v1/namespaces/team/configmaps", cm("b", json!({})))
        .await;
    assert_eq!(code, 403);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("because it is being terminated")
    );
    let (code, v) = s
        .post(
            "/api/v1/namespaces",
            json!({"metadata": {"name": "Not.A.Label"}}),
        )
        .await;
    assert_eq!(code, 422, "{v}");
    s.stop().await;
}

#[tokio::test]
async fn dry_run_checks_everything_and_writes_nothing() {
    let s = bare().await;
    let (code, v) = s
        .post(&format!("{CMS}?dryRun=All"), cm("dry", json!({})))
        .await;
    assert_eq!(code, 201);
    assert_eq!(v["metadata"]["name"], "dry");
    let (code, _) = s.get(&format!("{CMS}/dry")).await;
    assert_eq!(code, 404);
    let (code, _) = s
        .post(
            &format!("{CMS}?dryRun=All"),
            json!({"metadata": {"name": "BAD"}}),
        )
        .await;
    assert_eq!(code, 422);
    let (code, _) = s
        .post(&format!("{CMS}?dryRun=Some"), cm("x", json!({})))
        .await;
    assert_eq!(code, 400);
    s.stop().await;
}

#[tokio::test]
async fn delete_collection_removes_what_the_selector_matches() {
    let s = bare().await;
    for (n, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        s.post(CMS, cm(n, json!({"app": app}))).await;
    }
    let (code, v) = s.delete(&format!("{CMS}?labelSelector=app%3Dx")).await;
    assert_eq!(code, 200);
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    let (_, left) = s.get(CMS).await;
    let names: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c"]);
    s.stop().await;
}

#[tokio::test]
async fn watches_stream_changes_from_a_resource_version() {
    let s = bare().await;
    let (_, list) = s.get(CMS).await;
    let mut w = s
        .watch(&format!("{CMS}?watch=true&resourceVersion={}", rv(&list)))
        .await;
    let (_, a) = s.post(CMS, cm("w", json!({"app": "web"}))).await;
    let e = w.next_change().await;
    assert_eq!((e["type"].as_str(), &e["object"]), (Some("ADDED"), &a));
    let (_, b) = s
        .patch(
            &format!("{CMS}/w"),
            "application/merge-patch+json",
            json!({"data": {"k": "2"}}),
        )
        .await;
    let e = w.next_change().await;
    assert_eq!((e["type"].as_str(), &e["object"]), (Some("MODIFIED"), &b));
    let (_, c) = s.delete(&format!("{CMS}/w")).await;
    let e = w.next_change().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        c["metadata"]["resourceVersion"]
    );
    assert!(rv(&e["object"]) > rv(&b));

    // Resuming from the first event's revision replays the rest.
    let mut again = s
        .watch(&format!("{CMS}?watch=1&resourceVersion={}", rv(&a)))
        .await;
    assert_eq!(again.next_change().await["type"], "MODIFIED");
    assert_eq!(again.next_change().await["type"], "DELETED");
    s.stop().await;
}

#[tokio::test]
async fn a_watch_without_a_resource_version_starts_with_the_current_objects() {
    let s = bare().await;
    s.post(CMS, cm("x", json!({}))).await;
    s.post(CMS, cm("y", json!({}))).await;
    let mut w = s.watch(&format!("{CMS}?watch=true")).await;
    let mut names = Vec::new();
    for _ in 0..2 {
        let e = w.next_change().await;
        assert_eq!(e["type"], "ADDED");
        names.push(
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(names, ["x", "y"]);
    s.post(CMS, cm("z", json!({}))).await;
    assert_eq!(w.next_change().await["object"]["metadata"]["name"], "z");
    // Booleans read as Kubernetes reads them: a bare `?watch` (or any value but 0 and
    // false) watches; `0` and `false` list.
    for watch in ["watch", "watch=yes", "watch=True"] {
        let mut w = s.watch(&format!("{CMS}?{watch}")).await;
        assert_eq!(w.next_change().await["type"], "ADDED", "{watch}");
    }
    for list in ["watch=0", "watch=FALSE"] {
        let (code, v) = s.get(&format!("{CMS}?{list}")).await;
        assert_eq!(
            (code, v["kind"].as_str()),
            (200, Some("ConfigMapList")),
            "{list}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn a_label_watch_sees_objects_enter_and_leave_its_selection() {
    let s = bare().await;
    s.post(CMS, cm("l", json!({"app": "db"}))).await;
    let (_, list) = s.get(CMS).await;
    let mut w = s
        .watch(&format!(
            "{CMS}?watch=true&labelSelector=app%3Dweb&resourceVersion={}",
            rv(&list)
        ))
        .await;
    s.patch(
        &format!("{CMS}/l"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "web"}}}),
    )
    .await;
    assert_eq!(w.next_change().await["type"], "ADDED");
    s.patch(
        &format!("{CMS}/l"),
        "application/merge-patch+json",
        json!({"data": {"k": "9"}}),
    )
    .await;
    assert_eq!(w.next_change().await["type"], "MODIFIED");
    let (_, left) = s
        .patch(
            &format!("{CMS}/l"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"app": "db"}}}),
        )
        .await;
    let e = w.next_change().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(
        e["object"]["metadata"]["labels"]["app"], "web",
        "the last state that matched"
    );
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        left["metadata"]["resourceVersion"]
    );
    s.stop().await;
}

#[tokio::test]
async fn streaming_lists_end_their_initial_events_with_a_bookmark() {
    let s = bare().await;
    s.post(CMS, cm("one", json!({}))).await;
    s.post(CMS, cm("two", json!({}))).await;
    let mut w = s
        .watch(&format!("{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dtwo&timeoutSeconds=30"))
        .await;
    let e = w.next().await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("two"))
    );
    let b = w.next().await.unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(b["object"]["kind"], "ConfigMap");
    s.delete(&format!("{CMS}/one")).await;
    s.delete(&format!("{CMS}/two")).await;
    let e = w.next_change().await;
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("two"))
    );

    // Without NotOlderThan the request is refused, never ignored.
    let r = s
        .req(
            Method::GET,
            &format!("{CMS}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["details"]["causes"][0]["field"], "sendInitialEvents");
    s.stop().await;
}

#[tokio::test]
async fn idle_watches_get_bookmarks_when_they_allow_them() {
    let s = TestServer::start_with(|c| {
        c.run_controllers = false;
        c.bookmark_every = std::time::Duration::from_millis(100);
    })
    .await;
    let (_, list) = s.get(CMS).await;
    let mut w = s
        .watch(&format!(
            "{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
            rv(&list)
        ))
        .await;
    let b = w.next().await.unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["apiVersion"], "v1");
    assert!(rv(&b["object"]) >= rv(&list));
    s.stop().await;
}

#[tokio::test]
async fn watches_end_at_their_timeout() {
    let s = bare().await;
    let mut w = s
        .watch(&format!(
            "{CMS}?watch=true&timeoutSeconds=1&resourceVersion=0"
        ))
        .await;
    assert!(
        within(10, w.next()).await.is_none(),
        "the server ends the stream after timeoutSeconds"
    );
    // 0 is no timeout: the stream stays open for what comes next.
    let mut w = s.watch(&format!("{CMS}?watch=true&timeoutSeconds=0")).await;
    s.post(CMS, cm("later", json!({}))).await;
    let e = within(10, w.next()).await.expect("the stream is open");
    assert_eq!(e["object"]["metadata"]["name"], "later");
    s.stop().await;
}

#[tokio::test]
async fn an_expired_continue_is_410_with_a_token_that_goes_on_at_the_latest_revision() {
    let s = TestServer::start_with(|c| {
        c.run_controllers = false;
        c.store.retain_events = 2;
        c.store.retain_for = std::time::Duration::ZERO;
        c.store.compact_every = std::time::Duration::from_millis(20);
    })
    .await;
    for i in 0..6 {
        s.post(CMS, cm(&format!("c{i}"), json!({}))).await;
    }
    let (code, page) = s.get(&format!("{CMS}?limit=2")).await;
    assert_eq!(code, 200, "{page}");
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    // Writes move the revision on; the retention policy drops the page's snapshot.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut i = 0;
    let (code, st) = loop {
        s.post(CMS, cm(&format!("d{i}"), json!({}))).await;
        i += 1;
        let (code, st) = s.get(&format!("{CMS}?limit=2&continue={token}")).await;
        if code != 200 || std::time::Instant::now() > deadline {
            break (code, st);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(code, 410, "{st}");
    assert_eq!(st["reason"], "Expired");
    let fresh = st["metadata"]["continue"]
        .as_str()
        .expect("a new token")
        .to_string();
    // It goes on after c1, at the latest revision.
    let (code, next) = s.get(&format!("{CMS}?limit=2&continue={fresh}")).await;
    assert_eq!(code, 200, "{next}");
    let names: Vec<&str> = next["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c2", "c3"], "{next}");
    assert_ne!(
        next["metadata"]["resourceVersion"],
        page["metadata"]["resourceVersion"]
    );
    s.stop().await;
}

#[tokio::test]
async fn a_watch_from_compacted_history_is_410_expired() {
    let s = TestServer::start_with(|c| {
        c.run_controllers = false;
        c.store.retain_events = 2;
        c.store.retain_for = std::time::Duration::ZERO;
        c.store.compact_every = std::time::Duration::from_millis(20);
    })
    .await;
    for i in 0..6 {
        s.post(CMS, cm(&format!("c{i}"), json!({}))).await;
    }
    // The retention policy runs on its own; wait for it to drop revision 3.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (code, st) = loop {
        let (code, st) = s
            .get(&format!(
                "{CMS}?watch=true&resourceVersion=2&timeoutSeconds=1"
            ))
            .await;
        if code != 200 || std::time::Instant::now() > deadline {
            break (code, st);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(code, 410, "{st}");
    assert_eq!(st["reason"], "Expired");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version: 2")
    );
    s.stop().await;
}

#[tokio::test]
async fn objects_survive_a_restart_and_the_token_keeps_working() {
    let s = bare().await;
    let (_, created) = s.post(CMS, cm("keep", json!({"app": "x"}))).await;
    let token = s.token.clone();
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, |c| c.run_controllers = false).await;
    assert_eq!(s.token, token);
    let (code, got) = s.get(&format!("{CMS}/keep")).await;
    assert_eq!((code, got), (200, created));
    let kubeconfig = std::fs::read_to_string(s.dir.path().join("kubeconfig")).unwrap();
    assert!(kubeconfig.contains(&format!("server: {}", s.url)));
    assert!(kubeconfig.contains(&format!("token: {token}")));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in ["kubeconfig", "admin.token"] {
            let mode = std::fs::metadata(s.dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn field_validation_refuses_warns_or_drops_unknown_fields() {
    let s = bare().await;
    let bad = json!({"metadata": {"name": "typo", "bogusField": 1}, "data": {"k": "v"}});
    let (code, st) = s
        .post(&format!("{CMS}?fieldValidation=Strict"), bad.clone())
        .await;
    assert_eq!(code, 400);
    assert_eq!(
        st["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"metadata.bogusField\""
    );
    let r = s
        .req(Method::POST, &format!("{CMS}?fieldValidation=Warn"))
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        r.headers()["warning"],
        "299 - \"unknown field \\\"metadata.bogusField\\\"\""
    );
    let v: Value = r.json().await.unwrap();
    assert!(
        v["metadata"].get("bogusField").is_none(),
        "unknown fields are never stored"
    );
    // Types are checked whatever the mode, together with the semantic rules.
    let (code, st) = s
        .post(
            "/api/v1/namespaces/default/replicationcontrollers?fieldValidation=Ignore",
            json!({"metadata": {"name": "r"}, "spec": {"replicas": "three", "selector": {"app": "x"},
                "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"spec.replicas") && fields.contains(&"spec.template.metadata.labels"),
        "{fields:?}"
    );
    let (code, _) = s
        .post(&format!("{CMS}?fieldValidation=Loose"), cm("x", json!({})))
        .await;
    assert_eq!(code, 400);
    // A patch that adds an unknown field is refused under Strict too.
    let (code, _) = s
        .patch(
            &format!("{CMS}/typo?fieldValidation=Strict"),
            "application/merge-patch+json",
            json!({"spec": {"x": 1}}),
        )
        .await;
    assert_eq!(code, 400);
    s.stop().await;
}

#[tokio::test]
async fn openapi_v3_documents_describe_every_group_version() {
    let s = bare().await;
    let (code, root) = s.get("/openapi/v3").await;
    assert_eq!(code, 200);
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="));
    assert!(root["paths"]["apis/coordination.k8s.io/v1"].is_object());
    let r = s.req(Method::GET, &url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.0.0");
    let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    let r = s
        .req(Method::GET, &url)
        .header("If-None-Match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
    let (code, _) = s.get("/openapi/v3/apis/nothing/v1").await;
    assert_eq!(code, 404);
    // v2 is the same in Swagger 2.0: typed parameters, a body parameter, v2 references.
    let r = s.req(Method::GET, "/openapi/v2").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let v2: Value = r.json().await.unwrap();
    let create = &v2["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["post"];
    let body = create["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["in"] == "body")
        .unwrap();
    assert_eq!(
        body["schema"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.ConfigMap"
    );
    assert_eq!(
        create["responses"]["201"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.ConfigMap"
    );
    let limit = &v2["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap()
        .clone();
    assert_eq!(limit["type"], "integer", "{limit}");
    assert!(!v2.to_string().contains("#/components/schemas/"));
    let r = s
        .req(Method::GET, "/openapi/v2")
        .header("If-None-Match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
    s.stop().await;
}

#[tokio::test]
async fn strategic_merge_patches_merge_containers_by_name() {
    let s = bare().await;
    let path = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [
        {"name": "main", "image": "registry.example/app:1"},
        {"name": "side", "image": "registry.example/side:1"}]}});
    let (code, _) = s.post(path, pod).await;
    assert_eq!(code, 201);
    let (code, v) = s
        .patch(
            &format!("{path}/web"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
                            "containers": [{"name": "main", "image": "registry.example/app:2"}]}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"]["containers"][0]["image"],
        "registry.example/app:2"
    );
    assert_eq!(
        v["spec"]["containers"][1]["image"],
        "registry.example/side:1"
    );
    assert_eq!(
        v["spec"]["containers"][1]["terminationMessagePath"],
        "/dev/termination-log"
    );
    s.stop().await;
}

#[tokio::test]
async fn tables_are_served_for_lists_objects_and_watches() {
    let s = bare().await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let (_, created) = s
        .post(
            "/api/v1/namespaces/default/replicationcontrollers",
            rc("fe", 3),
        )
        .await;
    let r = s
        .req(
            Method::GET,
            "/api/v1/namespaces/default/replicationcontrollers",
        )
        .header("Accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["kind"], "Table");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Desired",
            "Current",
            "Ready",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(t["rows"][0]["cells"][0], "fe");
    assert_eq!(t["rows"][0]["cells"][1], 3);
    assert_eq!(
        t["rows"][0]["object"]["metadata"]["uid"],
        created["metadata"]["uid"]
    );
    assert_eq!(
        t["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    let r = s
        .req(
            Method::GET,
            "/api/v1/namespaces/default/replicationcontrollers/fe",
        )
        .header("Accept", accept)
        .send()
        .await
        .unwrap();
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);

    // Plain JSON for clients that do not ask (curl).
    let (_, plain) = s
        .get("/api/v1/namespaces/default/replicationcontrollers")
        .await;
    assert_eq!(plain["kind"], "ReplicationControllerList");

    let resp = s
        .req(
            Method::GET,
            &format!(
                "/api/v1/namespaces/default/replicationcontrollers?watch=true&resourceVersion={}",
                rv(&created)
            ),
        )
        .header("Accept", accept)
        .send()
        .await
        .unwrap();
    let mut w = crate::support::WatchReader::new(resp);
    s.patch(
        "/api/v1/namespaces/default/replicationcontrollers/fe",
        "application/merge-patch+json",
        json!({"spec": {"replicas": 4}}),
    )
    .await;
    let e = w.next_change().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["kind"], "Table");
    assert_eq!(e["object"]["rows"][0]["cells"][1], 4);
    s.stop().await;
}

#[tokio::test]
async fn server_side_apply_merges_custom_lists_by_their_list_types() {
    let s = bare().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "routers.net.example.com"},
        "spec": {
            "group": "net.example.com",
            "scope": "Namespaced",
            "names": {"plural": "routers", "singular": "router", "kind": "Router"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port", "protocol"],
                        "items": {"type": "object", "required": ["port"], "properties": {
                            "port": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"},
                            "name": {"type": "string"},
                        }}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                        "items": {"type": "string"}},
                    "hops": {"type": "array", "items": {"type": "string"}},
                }}},
            }}}],
        },
    });
    let (code, v) = s
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let path = "/apis/net.example.com/v1/namespaces/default/routers/r";
    let apply = |manager: &'static str, body: &'static str| {
        s.req(Method::PATCH, &format!("{path}?fieldManager={manager}"))
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body)
            .send()
    };
    let head = "apiVersion: net.example.com/v1\nkind: Router\nmetadata:\n  name: r\n";
    let alice: &'static str = Box::leak(
        format!("{head}spec:\n  ports:\n  - {{port: 53, name: dns}}\n  - {{port: 53, protocol: UDP}}\n  tags: [a]\n  hops: [x]\n")
            .into_boxed_str(),
    );
    let r = apply("alice", alice).await.unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());
    // Bob adds a port and a tag: map lists merge by their keys, sets by value.
    let bob: &'static str = Box::leak(
        format!("{head}spec:\n  ports:\n  - {{port: 80}}\n  tags: [b]\n").into_boxed_str(),
    );
    let r = apply("bob", bob).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    let ports: Vec<(i64, String)> = v["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                p["protocol"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            (53, "TCP".to_string()),
            (53, "UDP".to_string()),
            (80, "TCP".to_string())
        ],
        "{v}"
    );
    assert_eq!(v["spec"]["tags"], json!(["a", "b"]), "{v}");
    let bobs = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "bob")
        .unwrap()
        .clone();
    assert!(
        bobs["fieldsV1"]["f:spec"]["f:ports"]["k:{\"port\":80,\"protocol\":\"TCP\"}"].is_object(),
        "{bobs}"
    );
    // An atomic list is replaced whole; Alice dropping a port removes only hers.
    let alice2: &'static str = Box::leak(
        format!("{head}spec:\n  ports:\n  - {{port: 53, name: dns}}\n  tags: [a]\n  hops: [x]\n")
            .into_boxed_str(),
    );
    let r = apply("alice", alice2).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    let ports: Vec<i64> = v["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [53, 80], "{v}");
    // A field the schema does not declare is refused, whatever the field validation.
    let typo: &'static str =
        Box::leak(format!("{head}spec:\n  hops: [x]\n  hopz: [y]\n").into_boxed_str());
    let r = apply("alice", typo).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let st: Value = r.json().await.unwrap();
    assert_eq!(
        st["message"],
        "failed to create typed patch object (net.example.com/v1, Kind=Router): .spec.hopz: field not declared in schema",
        "{st}"
    );
    s.stop().await;
}

#[tokio::test]
async fn server_side_apply_creates_merges_and_reports_conflicts() {
    let s = bare().await;
    let apply = |manager: &str, force: bool, body: &str| {
        let mut path = format!("{CMS}/sa?fieldManager={manager}");
        if force {
            path.push_str("&force=true");
        }
        s.req(Method::PATCH, &path)
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body.to_string())
            .send()
    };
    let r = apply(
        "alice",
        false,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sa\ndata:\n  a: '1'\n  b: '2'\n",
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["metadata"]["managedFields"][0]["manager"], "alice");
    assert_eq!(
        v["metadata"]["managedFields"][0]["fieldsV1"]["f:data"]["f:a"],
        json!({})
    );
    let r = apply("bob", false, "data:\n  a: 'x'\n").await.unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let st: Value = r.json().await.unwrap();
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("conflict with \"alice\" using v1: .data.a"),
        "{st}"
    );
    let r = apply("bob", true, "data:\n  a: 'x'\n").await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // alice drops b from her configuration: it goes; a is bob's now and stays.
    let r = apply("alice", false, "{\"data\": {}}").await.unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"], json!({"a": "x"}), "{v}");
    let r = apply("", false, "data: {}\n").await.unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let st: Value = r.json().await.unwrap();
    assert_eq!(st["details"]["causes"][0]["field"], "fieldManager", "{st}");
    let r = apply("alice", false, "data: [unclosed\n").await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    s.stop().await;
}

/// Built-in lists merge in an apply by their list map keys, a key left out taking the
/// type's default: a Service's ports by port and protocol, so 53/TCP and 53/UDP are two.
#[tokio::test]
async fn server_side_apply_merges_built_in_lists_by_their_map_keys() {
    let s = bare().await;
    let svcs = "/api/v1/namespaces/default/services";
    let apply = |manager: &'static str, body: &'static str| {
        s.req(
            Method::PATCH,
            &format!("{svcs}/dns?fieldManager={manager}&fieldValidation=Strict"),
        )
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body)
        .send()
    };
    let r = apply(
        "tcp",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: dns\nspec:\n  ports:\n  - name: dns-tcp\n    port: 53\n",
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = r.json().await.unwrap();
    let fields = &v["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:ports"];
    assert!(
        fields.get(r#"k:{"port":53,"protocol":"TCP"}"#).is_some(),
        "{fields}"
    );
    let r = apply(
        "udp",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: dns\nspec:\n  ports:\n  - name: dns-udp\n    port: 53\n    protocol: UDP\n",
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    let ports: Vec<(&str, &str)> = v["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["protocol"].as_str().unwrap()))
        .collect();
    assert_eq!(ports, [("dns-tcp", "TCP"), ("dns-udp", "UDP")], "{v}");
    // Each manager owns its own port: dropping it removes only that one.
    let r = apply(
        "tcp",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: dns\nspec:\n  selector:\n    app: dns\n",
    )
    .await
    .unwrap();
    let v: Value = r.json().await.unwrap();
    let names: Vec<&str> = v["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dns-udp"], "{v}");
    s.stop().await;
}

#[tokio::test]
async fn metrics_count_requests_commits_and_watches() {
    let s = bare().await;
    s.post(CMS, cm("m", json!({}))).await;
    s.get(&format!("{CMS}/nope")).await;
    let _w = s
        .watch(&format!("{CMS}?watch=true&resourceVersion=0"))
        .await;
    let r = s.req(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = r.text().await.unwrap();
    for want in [
        "apiserver_request_total{verb=\"POST\",resource=\"configmaps\",code=\"201\"} 1",
        "apiserver_request_total{verb=\"GET\",resource=\"configmaps\",code=\"404\"} 1",
        "apiserver_request_duration_seconds_count{verb=\"POST\",resource=\"configmaps\"} 1",
        "apiserver_watch_streams 1",
        "berth_store_commit_duration_seconds_count",
        "berth_store_commit_batch_size_bucket",
        "berth_store_watchers",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(!text.contains("# EOF"), "{text}");
    assert!(
        text.contains("# TYPE apiserver_request_total counter"),
        "{text}"
    );
    // What Prometheus offers, it gets.
    let r = s
        .req(Method::GET, "/metrics")
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = r.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE apiserver_request counter"), "{text}");
    let anon = https_client(&s.ca_pem);
    let r = anon.get(format!("{}/metrics", s.url)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    s.stop().await;
}

#[tokio::test]
async fn stopping_the_server_ends_open_watches() {
    let s = bare().await;
    let mut w = s
        .watch(&format!("{CMS}?watch=true&resourceVersion=0"))
        .await;
    let stopped = tokio::spawn(s.stop());
    assert!(
        within(20, w.next()).await.is_none(),
        "the watch ends cleanly"
    );
    within(30, stopped).await.unwrap();
}

#[tokio::test]
async fn yaml_bodies_are_accepted_and_protobuf_of_unknown_kinds_is_refused_with_advice() {
    let s = bare().await;
    let r = s
        .req(Method::POST, CMS)
        .header("Content-Type", "application/yaml")
        .body("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let r = s
        .req(Method::POST, CMS)
        .header("Content-Type", "application/yaml")
        .body("metadata: [unclosed\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = s
        .req(Method::POST, CMS)
        .header("Content-Type", "application/vnd.kubernetes.protobuf")
        .body(&b"k8s\x00\x0a\x18\x0a\x0eexample.com/v1\x12\x06Widget\x12\x00"[..])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let st: Value = r.json().await.unwrap();
    let message = st["message"].as_str().unwrap();
    assert!(
        message.contains("kubectl apply -f") && message.contains("\"Widget\""),
        "{st}"
    );
    let r = s
        .req(Method::POST, CMS)
        .header("Content-Type", "application/vnd.kubernetes.protobuf")
        .body(&b"k8s\x00\x0a"[..])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    s.stop().await;
}

#[tokio::test]
async fn events_are_served_as_core_v1_and_events_k8s_io_v1_alike() {
    let s = bare().await;
    let core = "/api/v1/namespaces/default/events";
    let v1 = "/apis/events.k8s.io/v1/namespaces/default/events";
    let (code, made) = s
        .post(core, json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "reason": "Pulled", "message": "image pulled", "type": "Normal", "count": 2,
            "source": {"component": "kubelet"}}))
        .await;
    assert_eq!(code, 201, "{made}");
    let (code, seen) = s.get(&format!("{v1}/e1")).await;
    assert_eq!(code, 200);
    assert_eq!(seen["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen["regarding"]["name"], "web");
    assert_eq!(seen["note"], "image pulled");
    assert_eq!(seen["deprecatedCount"], 2);
    assert_eq!(seen["deprecatedSource"]["component"], "kubelet");
    assert_eq!(
        seen["metadata"]["resourceVersion"],
        made["metadata"]["resourceVersion"]
    );

    // Written through events.k8s.io, read through core.
    let (code, v) = s
        .post(
            v1,
            json!({"metadata": {"name": "e2"}, "regarding": {"kind": "Node", "name": "n1"},
            "reason": "Ready", "note": "node is ready", "type": "Normal", "action": "Check",
            "reportingController": "berth/node", "reportingInstance": "n1",
            "eventTime": "2026-01-01T00:00:00.000000Z"}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["apiVersion"], "events.k8s.io/v1");
    let (_, c) = s.get(&format!("{core}/e2")).await;
    assert_eq!(
        (c["involvedObject"]["name"].as_str(), c["message"].as_str()),
        (Some("n1"), Some("node is ready"))
    );
    assert_eq!(c["reportingComponent"], "berth/node");

    // Field selectors in each version's names; patches in the served form.
    let (_, l) = s
        .get(&format!("{v1}?fieldSelector=regarding.name%3Dweb"))
        .await;
    assert_eq!(l["kind"], "EventList");
    assert_eq!(l["apiVersion"], "events.k8s.io/v1");
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    let (_, l) = s
        .get(&format!("{core}?fieldSelector=involvedObject.name%3Dn1"))
        .await;
    assert_eq!(l["items"][0]["metadata"]["name"], "e2");
    let (code, p) = s
        .patch(
            &format!("{v1}/e2"),
            "application/merge-patch+json",
            json!({"note": "still ready"}),
        )
        .await;
    assert_eq!((code, p["note"].as_str()), (200, Some("still ready")));
    let (code, st) = s
        .post(
            &format!("{v1}?fieldValidation=Strict"),
            json!({"metadata": {"name": "e3"}, "message": "core field"}),
        )
        .await;
    assert_eq!(code, 400, "{st}");

    // A watch through events.k8s.io sees core writes converted.
    let mut w = s
        .watch(&format!("{v1}?watch=true&resourceVersion={}", rv(&p)))
        .await;
    s.delete(&format!("{core}/e1")).await;
    let e = w.next_change().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["regarding"]["name"], "web");
    let (code, _) = s.get("/openapi/v3/apis/events.k8s.io/v1").await;
    assert_eq!(code, 200);
    s.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_a_status_and_never_hurt_the_server() {
    let s = bare().await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let cases: Vec<(Method, String, &str, Vec<u8>)> = vec![
        (
            Method::POST,
            CMS.into(),
            "application/json",
            b"\xff\xfe\x00garbage".to_vec(),
        ),
        (
            Method::POST,
            CMS.into(),
            "application/json",
            deep.clone().into_bytes(),
        ),
        (
            Method::POST,
            CMS.into(),
            "application/json",
            b"{\"metadata\":{\"name\":\"x\"},\"data\":{\"k\":1e999}}".to_vec(),
        ),
        (
            Method::POST,
            CMS.into(),
            "application/json",
            b"{\"metadata\":{\"name\":7}}".to_vec(),
        ),
        (
            Method::POST,
            CMS.into(),
            "application/json",
            b"{\"metadata\":{\"name\":\"x\",\"labels\":[1]}}".to_vec(),
        ),
        (
            Method::POST,
            CMS.into(),
            "application/yaml",
            b"a: &a [*a]\n".to_vec(),
        ),
        (
            Method::PUT,
            format!("{CMS}/x"),
            "application/json",
            b"null".to_vec(),
        ),
        (
            Method::PATCH,
            format!("{CMS}/x"),
            "application/json-patch+json",
            deep.into_bytes(),
        ),
        (
            Method::PATCH,
            format!("{CMS}/x"),
            "application/merge-patch+json",
            b"".to_vec(),
        ),
        (
            Method::PATCH,
            format!("{CMS}/x"),
            "application/strategic-merge-patch+json",
            b"{\"$patch\":\"explode\"}".to_vec(),
        ),
        (
            Method::GET,
            // A negative limit lists everything (as in Kubernetes); one past 64 bits is
            // refused.
            format!("{CMS}?limit=18446744073709551616"),
            "application/json",
            vec![],
        ),
        (
            Method::GET,
            format!("{CMS}?labelSelector=%ff%fe"),
            "application/json",
            vec![],
        ),
        (
            Method::GET,
            format!("{CMS}?watch=true&resourceVersion=abc"),
            "application/json",
            vec![],
        ),
        (
            Method::GET,
            format!("{CMS}?watch=true&timeoutSeconds=-5"),
            "application/json",
            vec![],
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/configmaps/%ff".into(),
            "application/json",
            vec![],
        ),
        (
            Method::DELETE,
            format!("{CMS}/x"),
            "application/json",
            b"{\"propagationPolicy\":\"Sideways\"}".to_vec(),
        ),
        (
            Method::DELETE,
            format!("{CMS}/x"),
            "application/json",
            b"[[[".to_vec(),
        ),
    ];
    for (method, path, ct, body) in cases {
        let r = s
            .req(method.clone(), &path)
            .header("Content-Type", ct)
            .body(body)
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert!((400..500).contains(&code), "{method} {path}: {code} {text}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not a Status: {text}"));
        assert_eq!(v["kind"], "Status", "{method} {path}");
    }
    let (code, _) = s.get("/readyz").await;
    assert_eq!(code, 200);
    let (code, _) = s.post(CMS, cm("after", json!({}))).await;
    assert_eq!(code, 201, "the server still works");
    s.stop().await;
}

#[tokio::test]
async fn a_given_certificate_is_served_instead_of_the_generated_one() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    // A key berth reads is its user's alone.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = TestServer::start_with(|c| {
        c.run_controllers = false;
        c.tls_files = Some((cert_path, key_path));
    })
    .await;
    assert_eq!(
        s.ca_pem,
        cert.pem(),
        "the kubeconfig trusts the given certificate"
    );
    let (code, _) = s.get("/api/v1/namespaces").await;
    assert_eq!(code, 200);
    assert!(
        !s.dir.path().join("ca.crt").exists(),
        "no CA is made when a certificate is given"
    );
    s.stop().await;
}

#[tokio::test]
async fn http2_clients_share_one_connection_for_requests_and_watches() {
    let s = bare().await;
    let h2 = crate::support::https2_client(&s.ca_pem);
    let r = h2
        .get(format!("{}/api/v1/namespaces", s.url))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status().as_u16(), 200);
    // Every watch shares the connection.
    let watch = |path: String| {
        let req = h2.get(format!("{}{path}", s.url)).bearer_auth(&s.token);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.version(), reqwest::Version::HTTP_2);
            crate::support::WatchReader::new(r)
        }
    };
    let mut watches = Vec::new();
    for _ in 0..20 {
        watches.push(watch(format!("{CMS}?watch=true&resourceVersion=0")).await);
    }
    // On the same connection: watches that end at their timeout, and a watch of another
    // namespace.
    let mut short = Vec::new();
    for _ in 0..5 {
        short.push(watch(format!("{CMS}?watch=true&timeoutSeconds=1")).await);
    }
    let mut elsewhere =
        watch("/api/v1/namespaces/kube-system/configmaps?watch=true&resourceVersion=0".into())
            .await;
    let create = |ns: &str, name: &str| {
        h2.post(format!("{}/api/v1/namespaces/{ns}/configmaps", s.url))
            .bearer_auth(&s.token)
            .json(&cm(name, json!({})))
            .send()
    };
    assert_eq!(
        create("default", "h2").await.unwrap().status().as_u16(),
        201
    );
    for w in watches.iter_mut().chain(&mut short) {
        let e = w.next_change().await;
        assert_eq!(
            (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some("h2"))
        );
    }
    for w in &mut short {
        assert!(w.next().await.is_none(), "the watch ends at its timeout");
    }
    // The others carry on, each seeing only its own namespace.
    assert_eq!(
        create("kube-system", "there")
            .await
            .unwrap()
            .status()
            .as_u16(),
        201
    );
    assert_eq!(
        create("default", "h2-2").await.unwrap().status().as_u16(),
        201
    );
    for w in &mut watches {
        assert_eq!(w.next_change().await["object"]["metadata"]["name"], "h2-2");
    }
    assert_eq!(
        elsewhere.next_change().await["object"]["metadata"]["name"],
        "there"
    );
    s.stop().await;
}

#[tokio::test]
async fn apply_changes_nothing_twice_and_reaches_status_and_scale() {
    let s = bare().await;
    let rcs = "/api/v1/namespaces/default/replicationcontrollers";
    let apply = |path: String, body: String| {
        s.req(Method::PATCH, &path)
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body)
            .send()
    };
    let manifest = serde_json::to_string(&rc("ap", 1)).unwrap();
    let r = apply(format!("{rcs}/ap?fieldManager=ctl"), manifest.clone())
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let first: Value = r.json().await.unwrap();
    // The same configuration again: no write, no new resourceVersion, no event.
    let mut w = s
        .watch(&format!("{rcs}?watch=true&resourceVersion={}", rv(&first)))
        .await;
    let r = apply(format!("{rcs}/ap?fieldManager=ctl"), manifest)
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let again: Value = r.json().await.unwrap();
    assert_eq!(rv(&again), rv(&first));
    assert_eq!(
        again["metadata"]["managedFields"],
        first["metadata"]["managedFields"]
    );

    // A controller applies the status it owns; the spec stays as it is.
    let status = json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "ap"}, "spec": {"replicas": 9},
        "status": {"replicas": 1, "readyReplicas": 1}});
    let r = apply(
        format!("{rcs}/ap/status?fieldManager=rc-controller&force=true"),
        status.to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"]["readyReplicas"], 1, "{v}");
    assert_eq!(v["spec"]["replicas"], 1);
    let managed = v["metadata"]["managedFields"].as_array().unwrap();
    let own = managed
        .iter()
        .find(|e| e["manager"] == "rc-controller")
        .expect("the status manager's entry");
    assert_eq!(own["subresource"], "status");
    assert_eq!(own["fieldsV1"]["f:status"]["f:readyReplicas"], json!({}));
    assert!(own["fieldsV1"].get("f:spec").is_none(), "{own}");
    // The first event the watch sees is this status write, not the idle apply.
    let e = w.next_change().await;
    assert_eq!(e["object"]["status"]["readyReplicas"], 1, "{e}");
    // The status of an object that is not there is not created.
    let mut missing = status.clone();
    missing["metadata"]["name"] = json!("nope");
    let r = apply(
        format!("{rcs}/nope/status?fieldManager=rc-controller"),
        missing.to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 404);

    // The scale subresource takes an applied Scale.
    let r = apply(
        format!("{rcs}/ap/scale?fieldManager=hpa"),
        "apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: ap\nspec:\n  replicas: 3\n"
            .into(),
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(3))
    );
    s.stop().await;
}

#[tokio::test]
async fn kubernetes_answers_for_secrets_patches_namespaces_and_versions() {
    let s = bare().await;
    // stringData is written into data and never stored.
    let (code, v) = s
        .post(
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "sd"}, "data": {"a": "eA=="},
                "stringData": {"b": "hello"}}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["data"], json!({"a": "eA==", "b": "aGVsbG8="}));
    assert!(v.get("stringData").is_none(), "{v}");

    // A JSON patch that does not hold is 422; one that is not a patch is 400.
    s.post(CMS, cm("jp", json!({}))).await;
    let (code, st) = s
        .patch(
            &format!("{CMS}/jp"),
            "application/json-patch+json",
            json!([{"op": "test", "path": "/data/k", "value": "other"}]),
        )
        .await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (422, Some("Invalid")),
        "{st}"
    );
    let (code, _) = s
        .patch(
            &format!("{CMS}/jp"),
            "application/json-patch+json",
            json!({"op": "nonsense"}),
        )
        .await;
    assert_eq!(code, 400);
    // Nor may a patch rename the object.
    let (code, st) = s
        .patch(
            &format!("{CMS}/jp"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/metadata/name", "value": "other"}]),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains("does not match"),
        "{st}"
    );

    // The namespaces Kubernetes keeps cannot be deleted, not even in a dry run.
    for ns in ["default", "kube-system", "kube-public"] {
        for query in ["", "?dryRun=All"] {
            let (code, st) = s.delete(&format!("/api/v1/namespaces/{ns}{query}")).await;
            assert_eq!(code, 403, "{ns}{query}: {st}");
            assert!(
                st["message"]
                    .as_str()
                    .unwrap()
                    .contains("may not be deleted")
            );
        }
    }
    // Collections of a namespaced kind are written in a namespace; namespaces are
    // deleted one by one.
    // A 405 names the methods that are served there (RFC 9110).
    let item = "/api/v1/namespaces/default/pods/p";
    for (method, path, allow) in [
        (Method::DELETE, "/api/v1/configmaps", "GET"),
        (Method::POST, "/api/v1/configmaps", "GET"),
        (Method::DELETE, "/api/v1/namespaces", "GET, POST"),
        (Method::TRACE, CMS, "GET, POST, DELETE"),
        (Method::POST, &format!("{CMS}/x"), "GET, PUT, PATCH, DELETE"),
        (Method::DELETE, &format!("{item}/status"), "GET, PUT, PATCH"),
        (Method::GET, &format!("{item}/binding"), "POST"),
        (Method::POST, &format!("{item}/log"), "GET"),
    ] {
        let r = s
            .req(method.clone(), path)
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&cm("x", json!({}))).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405, "{method} {path}");
        assert_eq!(r.headers()["allow"], allow, "{method} {path}");
        let st: Value = r.json().await.unwrap();
        assert_eq!(st["reason"], "MethodNotAllowed", "{method} {path}");
    }
    assert_eq!(s.get(CMS).await.1["items"].as_array().unwrap().len(), 1);
    let (_, disc) = s.get("/api/v1").await;
    let namespaces = disc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces")
        .unwrap();
    assert!(
        !namespaces["verbs"]
            .as_array()
            .unwrap()
            .contains(&json!("deletecollection"))
    );

    // A field given twice is refused as strictly as an unknown one, or warned about.
    let twice = r#"{"metadata": {"name": "dup-MODE"}, "data": {"a": "1", "a": "2"}}"#;
    for (mode, code, warned) in [
        ("Strict", 400, false),
        ("Warn", 201, true),
        ("Ignore", 201, false),
    ] {
        let r = s
            .req(Method::POST, &format!("{CMS}?fieldValidation={mode}"))
            .header("Content-Type", "application/json")
            .body(twice.replace("MODE", &mode.to_lowercase()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), code, "{mode}");
        let warning = r
            .headers()
            .get("warning")
            .map(|w| w.to_str().unwrap().to_string());
        assert_eq!(warning.is_some(), warned, "{mode}: {warning:?}");
        let v: Value = r.json().await.unwrap();
        let said = if warned {
            warning.unwrap()
        } else {
            v.to_string()
        };
        if code == 400 || warned {
            assert!(
                said.contains(r#"duplicate field \"data.a\""#),
                "{mode}: {said}"
            );
        } else {
            assert_eq!(v["data"]["a"], "2");
        }
    }
    // So is one in a merge or strategic patch; the Strict one changes nothing.
    for (kind, mode, code, warned) in [
        ("merge", "Strict", 400, false),
        ("strategic-merge", "Strict", 400, false),
        ("merge", "Warn", 200, true),
    ] {
        let r = s
            .req(
                Method::PATCH,
                &format!("{CMS}/dup-ignore?fieldValidation={mode}"),
            )
            .header("Content-Type", format!("application/{kind}-patch+json"))
            .body(r#"{"data": {"b": "1", "b": "2"}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), code, "{kind} {mode}");
        let warning = r.headers().get("warning").cloned();
        let v: Value = r.json().await.unwrap();
        let said = match &warning {
            Some(w) => w.to_str().unwrap().to_string(),
            None => v.to_string(),
        };
        assert_eq!(warning.is_some(), warned, "{kind} {mode}: {said}");
        assert!(
            said.contains(r#"duplicate field \"data.b\""#),
            "{kind} {mode}: {said}"
        );
    }
    let (_, v) = s.get(&format!("{CMS}/dup-ignore")).await;
    assert_eq!(v["data"]["b"], "2", "only the warned patch was made: {v}");

    // A pod's spec is fixed but for its images and a few more.
    let pods = "/api/v1/namespaces/default/pods";
    let (code, v) = s
        .post(
            pods,
            json!({"metadata": {"name": "fixed"}, "spec": {"automountServiceAccountToken": false,
                "containers": [{"name": "main", "image": "x:1", "command": ["sleep", "9"]}]}}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let (code, st) = s
        .patch(
            &format!("{pods}/fixed"),
            "application/merge-patch+json",
            json!({"spec": {"restartPolicy": "Never"}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "spec");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("pod updates may not change fields")
    );
    let (code, v) = s
        .patch(
            &format!("{pods}/fixed"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"containers": [{"name": "main", "image": "x:2"}]}}),
        )
        .await;
    assert_eq!(
        (code, &v["spec"]["containers"][0]["image"]),
        (200, &json!("x:2"))
    );

    // A resourceVersion the store has not reached is "too large", as clients check it.
    let (code, st) = s
        .get(&format!(
            "{CMS}?resourceVersion=999999&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(code, 504, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Too large resource version")
    );
    assert_eq!(
        st["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    s.stop().await;
}

#[tokio::test]
async fn the_pages_of_a_list_show_one_moment() {
    let s = bare().await;
    for i in 0..5 {
        s.post(CMS, cm(&format!("pg{i}"), json!({}))).await;
    }
    let (_, first) = s.get(&format!("{CMS}?limit=2")).await;
    let at = first["metadata"]["resourceVersion"].clone();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // Writes while the client pages: to an object still to come, one removed, one new.
    s.patch(
        &format!("{CMS}/pg3"),
        "application/merge-patch+json",
        json!({"data": {"k": "changed"}}),
    )
    .await;
    s.delete(&format!("{CMS}/pg2")).await;
    s.post(CMS, cm("pg25", json!({}))).await;
    let mut names = Vec::new();
    let mut token = Some(token);
    while let Some(t) = token {
        let (code, page) = s.get(&format!("{CMS}?limit=2&continue={t}")).await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["metadata"]["resourceVersion"], at);
        for item in page["items"].as_array().unwrap() {
            names.push(item["metadata"]["name"].as_str().unwrap().to_string());
            assert_eq!(item["data"]["k"], "v", "{item}");
        }
        token = page["metadata"]["continue"].as_str().map(str::to_string);
    }
    assert_eq!(names, ["pg2", "pg3", "pg4"]);
    // The same moment, asked for exactly.
    let (code, exact) = s
        .get(&format!(
            "{CMS}?resourceVersion={}&resourceVersionMatch=Exact",
            at.as_str().unwrap()
        ))
        .await;
    assert_eq!(code, 200, "{exact}");
    assert_eq!(exact["items"].as_array().unwrap().len(), 5);
    assert_eq!(exact["metadata"]["resourceVersion"], at);
    // Requests Kubernetes does not take.
    for query in [
        format!(
            "resourceVersion=1&continue={}",
            first["metadata"]["continue"].as_str().unwrap()
        ),
        "resourceVersionMatch=Bogus&resourceVersion=1".into(),
        "resourceVersionMatch=Exact".into(),
        "resourceVersionMatch=Exact&resourceVersion=0".into(),
    ] {
        let (code, st) = s.get(&format!("{CMS}?{query}")).await;
        assert!(code == 400 || code == 422, "{query}: {code} {st}");
    }
    s.stop().await;
}

#[tokio::test]
async fn an_unset_boolean_field_selects_as_false() {
    let s = bare().await;
    for node in [
        json!({"metadata": {"name": "free"}}),
        json!({"metadata": {"name": "cordoned"}, "spec": {"unschedulable": true}}),
    ] {
        let (code, v) = s.post("/api/v1/nodes", node).await;
        assert_eq!(code, 201, "{v}");
    }
    for (selector, want) in [
        ("spec.unschedulable=false", vec!["free"]),
        ("spec.unschedulable=true", vec!["cordoned"]),
        ("spec.unschedulable!=true", vec!["free"]),
    ] {
        let (code, list) = s
            .get(&format!("/api/v1/nodes?fieldSelector={selector}"))
            .await;
        assert_eq!(code, 200, "{list}");
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, want, "{selector}");
    }
    s.stop().await;
}

#[tokio::test]
async fn the_kubernetes_service_points_at_the_api_and_is_kept_so() {
    let s = TestServer::start().await;
    let path = "/api/v1/namespaces/default/services/kubernetes";
    let port: u64 = s.url.rsplit(':').next().unwrap().parse().unwrap();
    let want_ports = json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]);
    let until_right = |old_uid: Value| {
        let want_ports = want_ports.clone();
        let s = &s;
        async move {
            eventually(20, "the kubernetes Service as it should be", || async {
                let (code, v) = s.get(path).await;
                if code == 200
                    && v["metadata"]["uid"] != old_uid
                    && v["spec"]["ports"] == want_ports
                {
                    Ok(v)
                } else {
                    Err(v.to_string())
                }
            })
            .await
        }
    };
    let svc = until_right(Value::Null).await;
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["metadata"]["labels"]["provider"], "kubernetes");
    // Its ports changed by hand are set right again.
    let (code, v) = s
        .patch(
            path,
            "application/merge-patch+json",
            json!({"spec": {"ports": [{"name": "https", "port": 8443, "targetPort": 1}]}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let again = until_right(Value::Null).await;
    assert_eq!(again["metadata"]["uid"], svc["metadata"]["uid"]);
    // Deleted, it comes back.
    let (code, _) = s.delete(path).await;
    assert_eq!(code, 200);
    let back = until_right(svc["metadata"]["uid"].clone()).await;
    assert_eq!(back["spec"]["clusterIP"], "10.96.0.1");
    s.stop().await;
}

#[tokio::test]
async fn a_strategic_merge_patch_merges_service_ports_by_port() {
    let s = bare().await;
    let svcs = "/api/v1/namespaces/default/services";
    let (code, v) = s
        .post(
            svcs,
            json!({"metadata": {"name": "web"}, "spec": {"ports": [
                {"name": "http", "port": 80, "targetPort": 8080},
                {"name": "https", "port": 443, "targetPort": 8443},
            ]}}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = s
        .patch(
            &format!("{svcs}/web"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let ports = v["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2, "{v}");
    assert_eq!(
        (ports[0]["name"].as_str(), &ports[0]["targetPort"]),
        (Some("http"), &json!(9090))
    );
    assert_eq!(ports[1]["targetPort"], 8443);
    s.stop().await;
}

#[tokio::test]
async fn services_are_given_addresses_and_keep_them() {
    let s = bare().await;
    let svcs = "/api/v1/namespaces/default/services";
    let svc = |name: &str, spec: Value| json!({"metadata": {"name": name}, "spec": spec});
    let (code, web) = s
        .post(
            svcs,
            svc(
                "web",
                json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{web}");
    let ip = web["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.96."), "{web}");
    assert_eq!(web["spec"]["type"], "ClusterIP");
    assert_eq!(web["spec"]["ports"][0]["protocol"], "TCP");
    let (code, np) = s
        .post(
            svcs,
            svc(
                "np",
                json!({"type": "NodePort", "ports": [{"port": 53, "protocol": "UDP"}]}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{np}");
    assert_ne!(np["spec"]["clusterIP"], web["spec"]["clusterIP"]);
    let node_port = np["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&node_port));
    // Addresses another Service holds are refused.
    let (code, st) = s
        .post(
            svcs,
            svc("clash", json!({"clusterIP": ip, "ports": [{"port": 1}]})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "spec.clusterIP");
    let (code, _) = s.post(svcs, svc("bad", json!({}))).await;
    assert_eq!(code, 422);
    // A replace that does not name the address keeps it; one that moves it is refused.
    let mut replaced = svc(
        "web",
        json!({"selector": {"app": "web2"}, "ports": [{"port": 80}]}),
    );
    replaced["metadata"]["resourceVersion"] = web["metadata"]["resourceVersion"].clone();
    let (code, v) = s.put(&format!("{svcs}/web"), replaced).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"]["clusterIP"], ip.as_str());
    let (code, st) = s
        .patch(
            &format!("{svcs}/web"),
            "application/merge-patch+json",
            json!({"spec": {"clusterIP": "10.96.9.9"}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    // kubectl's columns, and what `kubectl cluster-info` asks for.
    let table = s.table(svcs).await;
    let names = crate::support::column_names(&table);
    assert_eq!(
        names,
        [
            "Name",
            "Type",
            "Cluster-IP",
            "External-IP",
            "Port(s)",
            "Age",
            "Selector"
        ]
    );
    let row = &table["rows"][0]["cells"];
    assert_eq!(row[4], format!("53:{node_port}/UDP"));
    let (code, list) = s
        .get("/api/v1/namespaces/kube-system/services?labelSelector=kubernetes.io%2Fcluster-service%3Dtrue")
        .await;
    assert_eq!((code, list["items"].as_array().unwrap().len()), (200, 0));
    // The address is free again once the Service is gone.
    s.delete(&format!("{svcs}/web")).await;
    let (code, again) = s
        .post(
            svcs,
            svc("again", json!({"clusterIP": ip, "ports": [{"port": 1}]})),
        )
        .await;
    assert_eq!(code, 201, "{again}");
    s.stop().await;
}

#[tokio::test]
async fn imperative_writes_own_their_fields_against_appliers() {
    let s = bare().await;
    let r = s
        .req(Method::POST, &format!("{CMS}?fieldManager=kubectl-create"))
        .json(&json!({"metadata": {"name": "own"}, "data": {"a": "b"}}))
        .send()
        .await
        .unwrap();
    let made: Value = r.json().await.unwrap();
    assert_eq!(
        made["metadata"]["managedFields"][0]["manager"],
        "kubectl-create"
    );
    assert_eq!(made["metadata"]["managedFields"][0]["operation"], "Update");
    // A curl patch without fieldManager is named after the client.
    let r = s
        .req(Method::PATCH, &format!("{CMS}/own"))
        .header("Content-Type", "application/merge-patch+json")
        .header("User-Agent", "curl/8.5.0")
        .body(r#"{"data": {"x": "1"}}"#)
        .send()
        .await
        .unwrap();
    let patched: Value = r.json().await.unwrap();
    let managers: Vec<&str> = patched["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["kubectl-create", "curl"]);
    // An apply of another value for a field someone set is a conflict; forced, it wins.
    let apply = |force: bool| {
        s.req(
            Method::PATCH,
            &format!(
                "{CMS}/own?fieldManager=ssa{}",
                if force { "&force=true" } else { "" }
            ),
        )
        .header("Content-Type", "application/apply-patch+yaml")
        .body("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: own\ndata:\n  a: c\n")
        .send()
    };
    let r = apply(false).await.unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let st: Value = r.json().await.unwrap();
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("conflict with \"kubectl-create\""),
        "{st}"
    );
    let r = apply(true).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"], json!({"a": "c", "x": "1"}));
    // A write that changes nothing changes no managedFields either.
    let r = s
        .req(Method::PATCH, &format!("{CMS}/own?fieldManager=again"))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"data": {"x": "1"}}"#)
        .send()
        .await
        .unwrap();
    let same: Value = r.json().await.unwrap();
    assert_eq!(same["metadata"], v["metadata"]);
    s.stop().await;
}

#[tokio::test]
async fn answers_are_yaml_when_asked_and_406_before_anything_when_nothing_fits() {
    let s = bare().await;
    let yaml = |m: Method, path: &str| s.req(m, path).header("Accept", "application/yaml");
    // A create answered in YAML.
    let r = yaml(Method::POST, CMS)
        .json(&cm("y", json!({"a": "b"})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(r.headers()["content-type"], "application/yaml");
    let created: Value = serde_yaml_ng::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(created["metadata"]["labels"]["a"], "b");
    // A get and a list, the same objects as in JSON.
    let r = yaml(Method::GET, &format!("{CMS}/y")).send().await.unwrap();
    let got: Value = serde_yaml_ng::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(got, s.get(&format!("{CMS}/y")).await.1);
    let r = yaml(Method::GET, CMS).send().await.unwrap();
    let text = r.text().await.unwrap();
    assert!(text.starts_with("apiVersion: v1\n"), "{text}");
    let list: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    // Errors too are Status objects in YAML.
    let r = yaml(Method::GET, &format!("{CMS}/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let st: Value = serde_yaml_ng::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("NotFound"))
    );

    // Nothing berth can answer in: 406, and the create never happens.
    let r = s
        .req(Method::POST, CMS)
        .header("Accept", "application/xml")
        .json(&cm("x", json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 406);
    let st: Value = r.json().await.unwrap();
    assert_eq!(st["reason"], "NotAcceptable");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("application/json, application/yaml"),
        "{st}"
    );
    assert_eq!(s.get(&format!("{CMS}/x")).await.0, 404);
    // A watch is JSON lines only.
    let r = yaml(Method::GET, &format!("{CMS}?watch=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 406);
    s.stop().await;
}

#[tokio::test]
async fn the_legacy_watch_paths_watch_a_collection_or_one_object() {
    let s = bare().await;
    s.post(CMS, cm("a", json!({}))).await;
    s.post(CMS, cm("b", json!({}))).await;
    let name = |e: &Value| {
        e["object"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The collection, from the start: both.
    let mut all = s
        .watch("/api/v1/watch/namespaces/default/configmaps?resourceVersion=0")
        .await;
    let mut seen = vec![
        name(&all.next_change().await),
        name(&all.next_change().await),
    ];
    seen.sort();
    assert_eq!(seen, ["a", "b"]);
    // One object: only its own events, also with a selector of the caller's.
    let mut one = s
        .watch("/api/v1/watch/namespaces/default/configmaps/b?fieldSelector=metadata.namespace%3Ddefault")
        .await;
    s.post(CMS, cm("c", json!({}))).await;
    let (code, _) = s
        .patch(
            &format!("{CMS}/b"),
            "application/merge-patch+json",
            json!({"data": {"k": "w"}}),
        )
        .await;
    assert_eq!(code, 200);
    // Without a resourceVersion the watch begins with the object as it is.
    for want in ["ADDED", "MODIFIED"] {
        let e = one.next_change().await;
        assert_eq!((e["type"].as_str(), name(&e)), (Some(want), "b".into()));
    }
    assert_eq!(name(&all.next_change().await), "c");
    // Not for writes, and not for subresources.
    let (code, _) = s
        .post(
            "/api/v1/watch/namespaces/default/configmaps",
            cm("d", json!({})),
        )
        .await;
    assert_eq!(code, 404);
    let (code, _) = s
        .get("/api/v1/watch/namespaces/default/pods/x/status")
        .await;
    assert_eq!(code, 404);
    s.stop().await;
}

#[tokio::test]
async fn pod_templates_tables_reviews_and_discovery_answer_as_upstream() {
    let s = bare().await;
    // PodTemplates are stored, defaulted and printed.
    let (code, pt) = s
        .post(
            "/api/v1/namespaces/default/podtemplates",
            json!({"metadata": {"name": "t"}, "template": {"metadata": {"labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "main", "image": "registry.example/web:1"}]}}}),
        )
        .await;
    assert_eq!(code, 201, "{pt}");
    assert_eq!(pt["template"]["spec"]["restartPolicy"], "Always", "{pt}");
    let r = s
        .req(Method::GET, "/api/v1/namespaces/default/podtemplates")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap();
    let table: Value = r.json().await.unwrap();
    assert_eq!(
        table["rows"][0]["cells"],
        json!(["t", "main", "registry.example/web:1", "app=web"]),
        "{table}"
    );
    let (code, _) = s
        .post(
            "/api/v1/namespaces/default/podtemplates",
            json!({"metadata": {"name": "bad"}, "template": {"spec": {"containers": [{"name": "main"}]}}}),
        )
        .await;
    assert_eq!(code, 422);
    // A review is no object a Table shows.
    let r = s
        .req(
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        )
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .json(
            &json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                      "spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 406);
    let st: Value = r.json().await.unwrap();
    assert_eq!(
        st["message"],
        "the resource selfsubjectaccessreviews.authorization.k8s.io does not support being converted to a Table"
    );
    // Discovery tells each resource's storage version hash.
    let (_, v1) = s.get("/api/v1").await;
    let cms = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "configmaps")
        .unwrap();
    assert_eq!(cms["storageVersionHash"], "qFsyl6wFWjQ=");
    // A definition's versions are ordered as Kubernetes prefers them.
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let (code, v) = s
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json!({"metadata": {"name": "things.order.example.com"}, "spec": {
            "group": "order.example.com", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": true, "schema": schema},
                {"name": "v2", "served": true, "storage": false, "schema": schema},
                {"name": "v10alpha1", "served": true, "storage": false, "schema": schema},
            ]}}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let (_, group) = s.get("/apis/order.example.com").await;
    assert_eq!(group["preferredVersion"]["version"], "v2", "{group}");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v2", "v1beta1", "v10alpha1"]);
    s.stop().await;
}

/// The conformance suite's RuntimeClass discovery steps, with the Accept header its Go
/// client sends: the group is listed under /apis, read back as an APIGroup naming
/// node.k8s.io/v1 (in JSON, which the client decodes), and its version lists
/// runtimeclasses.
#[tokio::test]
async fn the_runtime_class_group_is_discovered_as_the_go_client_reads_it() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let (_, groups) = s.get("/apis").await;
    let node = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "node.k8s.io")
        .expect("node.k8s.io under /apis");
    assert_eq!(node["versions"][0]["version"], "v1", "{node}");
    for accept in [
        "application/vnd.kubernetes.protobuf, */*",
        "application/vnd.kubernetes.protobuf,application/json",
        "application/json, */*",
    ] {
        let r = s
            .req(Method::GET, "/apis/node.k8s.io")
            .header("Accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{accept}");
        assert_eq!(r.headers()["content-type"], "application/json", "{accept}");
        let group: Value = r.json().await.unwrap();
        assert_eq!(
            (group["apiVersion"].as_str(), group["kind"].as_str()),
            (Some("v1"), Some("APIGroup")),
            "{group}"
        );
        assert_eq!(group["name"], "node.k8s.io");
        assert_eq!(
            group["versions"],
            json!([{"groupVersion": "node.k8s.io/v1", "version": "v1"}])
        );
        assert_eq!(group["preferredVersion"]["version"], "v1");
    }
    let (code, list) = s.get("/apis/node.k8s.io/v1").await;
    assert_eq!(code, 200);
    assert!(
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "runtimeclasses"),
        "{list}"
    );
    s.stop().await;
}
