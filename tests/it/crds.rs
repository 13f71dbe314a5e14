//! CustomResourceDefinitions end to end: a definition is served at once (discovery,
//! OpenAPI, routing), its objects are validated, pruned and defaulted by its schema, its
//! versions convert, its status subresource and printer columns work, bad definitions are
//! refused with the upstream causes, CEL rules hold on creates and updates, and deleting
//! it deletes its objects first.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const CTS: &str = "/apis/stable.example.com/v1/namespaces/default/crontabs";

fn crontabs() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab",
                      "shortNames": ["ct"], "categories": ["all"]},
            "versions": [
                {
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    }},
                    "selectableFields": [{"jsonPath": ".spec.image"}],
                    "additionalPrinterColumns": [
                        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    ],
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {
                                "cronSpec": {"type": "string", "pattern": "^[0-9*/ ]+$"},
                                "image": {"type": "string"},
                                "replicas": {"type": "integer", "minimum": 1, "default": 1},
                                "port": {"x-kubernetes-int-or-string": true},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            }},
                            "status": {"type": "object", "properties": {
                                "ready": {"type": "boolean"},
                                "replicas": {"type": "integer"},
                                "selector": {"type": "string"},
                            }},
                        },
                    }},
                },
                {
                    "name": "v2", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    }},
                },
            ],
        },
    })
}

fn crontab(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
           "metadata": {"name": name}, "spec": spec})
}

async fn established(s: &TestServer) -> Value {
    let (code, crd) = s.post(CRDS, crontabs()).await;
    assert_eq!(code, 201, "{crd}");
    crd
}

#[tokio::test]
async fn a_definition_is_established_and_served_at_once() {
    let s = TestServer::start().await;
    let crd = established(&s).await;
    let conditions: Vec<(&str, &str)> = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        conditions,
        [("NamesAccepted", "True"), ("Established", "True")]
    );
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "CronTab");
    assert_eq!(
        crd["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );
    // Legacy discovery: the group with both versions, v2 preferred (as Kubernetes
    // orders versions).
    let (code, group) = s.get("/apis/stable.example.com").await;
    assert_eq!(code, 200, "{group}");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v2", "v1"]);
    assert_eq!(group["preferredVersion"]["version"], "v2");
    let (_, list) = s.get("/apis/stable.example.com/v1").await;
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["crontabs", "crontabs/scale", "crontabs/status"]);
    assert_eq!(list["resources"][0]["shortNames"], json!(["ct"]));
    assert_eq!(list["resources"][0]["categories"], json!(["all"]));
    // Aggregated discovery lists it too.
    let r = s
        .req(Method::GET, "/apis")
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .send()
        .await
        .unwrap();
    let agg: Value = r.json().await.unwrap();
    let ours = agg["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "stable.example.com")
        .expect("the group in aggregated discovery");
    assert_eq!(ours["versions"][0]["resources"][0]["resource"], "crontabs");
    // OpenAPI: a document for the group version, with the kind's schema.
    let (_, root) = s.get("/openapi/v3").await;
    let url = root["paths"]["apis/stable.example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("a document for stable.example.com/v1")
        .to_string();
    let (code, doc) = s.get(&url).await;
    assert_eq!(code, 200);
    let schema = &doc["components"]["schemas"]["com.example.stable.v1.CronTab"];
    assert_eq!(
        schema["properties"]["spec"]["properties"]["replicas"]["default"],
        1
    );
    assert!(
        doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object()
    );
    assert!(
        doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]
            .is_object()
    );
    // A second definition with the same names is refused.
    let mut clash = crontabs();
    clash["metadata"]["name"] = json!("crons.stable.example.com");
    clash["spec"]["names"]["plural"] = json!("crons");
    clash["spec"]["names"]["singular"] = json!("cron");
    let (code, st) = s.post(CRDS, clash).await;
    assert_eq!(code, 422, "{st}");
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.names.kind", "spec.names.shortNames"]);
    s.stop().await;
}

#[tokio::test]
async fn objects_are_validated_pruned_defaulted_and_converted() {
    let s = TestServer::start().await;
    established(&s).await;
    // Unknown fields are dropped with a warning; defaults are filled in.
    let r = s
        .req(Method::POST, CTS)
        .json(&crontab(
            "a",
            json!({"cronSpec": "* * * * */5", "image": "img", "bogus": 1, "port": "http",
                   "extra": {"anything": {"goes": true}}}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let warning = r.headers()["warning"].to_str().unwrap().to_string();
    assert!(
        warning.contains("unknown field") && warning.contains("spec.bogus"),
        "{warning}"
    );
    let a: Value = r.json().await.unwrap();
    assert!(a["spec"].get("bogus").is_none(), "{a}");
    assert_eq!(a["spec"]["replicas"], 1);
    assert_eq!(a["spec"]["port"], "http");
    assert_eq!(a["spec"]["extra"]["anything"]["goes"], true);
    assert_eq!(a["metadata"]["generation"], 1);
    // Strict field validation refuses them instead.
    let (code, st) = s
        .post(
            &format!("{CTS}?fieldValidation=Strict"),
            crontab("b", json!({"bogus": 1})),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.bogus\""),
        "{st}"
    );
    // Values the schema refuses, each named.
    let (code, st) = s
        .post(
            CTS,
            crontab("c", json!({"cronSpec": "nope", "replicas": 0, "port": 1.5})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    let mut fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    fields.sort();
    assert_eq!(fields, ["spec.cronSpec", "spec.port", "spec.replicas"]);
    assert_eq!(st["details"]["group"], "stable.example.com");
    // In kube-apiserver's words.
    let messages: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap())
        .collect();
    assert!(
        messages.contains(
            &"Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
        ),
        "{st}"
    );
    assert!(
        messages
            .contains(&"Invalid value: \"nope\": spec.cronSpec in body should match '^[0-9*/ ]+$'"),
        "{st}"
    );
    // The other version serves the same object under its own apiVersion.
    let (code, v2) = s
        .get("/apis/stable.example.com/v2/namespaces/default/crontabs/a")
        .await;
    assert_eq!(code, 200, "{v2}");
    assert_eq!(v2["apiVersion"], "stable.example.com/v2");
    assert_eq!(v2["spec"]["image"], "img");
    let mut changed = v2.clone();
    changed["spec"]["image"] = json!("img2");
    let (code, put) = s
        .put(
            "/apis/stable.example.com/v2/namespaces/default/crontabs/a",
            changed,
        )
        .await;
    assert_eq!(code, 200, "{put}");
    assert_eq!(put["apiVersion"], "stable.example.com/v2");
    let (_, v1) = s.get(&format!("{CTS}/a")).await;
    assert_eq!(v1["apiVersion"], "stable.example.com/v1");
    assert_eq!(v1["spec"]["image"], "img2");
    assert_eq!(v1["metadata"]["generation"], 2);
    // Merge and JSON patches apply; a strategic merge patch is refused as upstream.
    let (code, p) = s
        .patch(
            &format!("{CTS}/a"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!((code, &p["spec"]["replicas"]), (200, &json!(3)), "{p}");
    let (code, p) = s
        .patch(
            &format!("{CTS}/a"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]),
        )
        .await;
    assert_eq!((code, &p["spec"]["replicas"]), (200, &json!(4)), "{p}");
    let (code, st) = s
        .patch(
            &format!("{CTS}/a"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (415, Some("UnsupportedMediaType")),
        "{st}"
    );
    s.stop().await;
}

#[tokio::test]
async fn status_printer_columns_and_selectable_fields_work_like_built_in_kinds() {
    let s = TestServer::start().await;
    established(&s).await;
    // With a status subresource, a create's status is dropped and a main update keeps it.
    let mut obj = crontab("a", json!({"cronSpec": "* * * * *", "image": "one"}));
    obj["status"] = json!({"ready": true});
    let (code, a) = s.post(CTS, obj).await;
    assert_eq!(code, 201, "{a}");
    assert!(a.get("status").is_none(), "{a}");
    let mut with_status = a.clone();
    with_status["status"] = json!({"ready": true});
    let (code, st) = s.put(&format!("{CTS}/a/status"), with_status).await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["status"]["ready"], true);
    assert_eq!(st["metadata"]["generation"], 1);
    // Unlike a built-in kind's, a custom object's status write changes its status only;
    // its resourceVersion is still a precondition.
    let (code, st) = s
        .patch(
            &format!("{CTS}/a/status"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"seen": "yes"}, "annotations": {"seen": "yes"}},
                   "status": {"replicas": 2}}),
        )
        .await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["status"]["replicas"], 2);
    assert!(st["metadata"].get("labels").is_none(), "{st}");
    assert!(st["metadata"].get("annotations").is_none(), "{st}");
    let mut stale = a.clone();
    stale["status"] = json!({"ready": false});
    let (code, out) = s.put(&format!("{CTS}/a/status"), stale).await;
    assert_eq!(code, 409, "{out}");
    let mut main = st.clone();
    main["status"] = json!({"ready": false});
    main["spec"]["image"] = json!("two");
    let (code, m) = s.put(&format!("{CTS}/a"), main).await;
    assert_eq!(code, 200, "{m}");
    assert_eq!(m["status"]["ready"], true);
    assert_eq!(m["metadata"]["generation"], 2);
    s.post(
        CTS,
        crontab("b", json!({"cronSpec": "1 * * * *", "image": "other"})),
    )
    .await;
    // The printer columns in a server-side Table.
    let r = s
        .req(Method::GET, CTS)
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap();
    let t: Value = r.json().await.unwrap();
    let columns: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Name", "Spec", "Replicas"]);
    assert_eq!(t["rows"][0]["cells"], json!(["a", "* * * * *", 1]));
    // A selectable field selects; one the definition does not name is refused.
    let (code, list) = s
        .get(&format!("{CTS}?fieldSelector=spec.image=other"))
        .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["metadata"]["name"], "b");
    let (code, _) = s.get(&format!("{CTS}?fieldSelector=spec.cronSpec=x")).await;
    assert_eq!(code, 400);
    // Label selectors and paging as for any kind.
    let (_, page) = s.get(&format!("{CTS}?limit=1")).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["metadata"]["continue"].is_string(), "{page}");
    s.stop().await;
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_the_definitions_paths() {
    let s = TestServer::start().await;
    established(&s).await;
    let (code, a) = s.post(CTS, crontab("a", json!({"replicas": 2}))).await;
    assert_eq!(code, 201, "{a}");
    let mut st = a.clone();
    st["status"] = json!({"replicas": 1, "selector": "app=a"});
    let (code, v) = s.put(&format!("{CTS}/a/status"), st).await;
    assert_eq!(code, 200, "{v}");
    let (code, scale) = s.get(&format!("{CTS}/a/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=a"}));
    let (code, v) = s
        .patch(
            &format!("{CTS}/a/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!((code, &v["spec"]["replicas"]), (200, &json!(5)), "{v}");
    let (_, a) = s.get(&format!("{CTS}/a")).await;
    assert_eq!(a["spec"]["replicas"], 5);
    // A scale with paths outside .spec and .status is refused.
    let mut bad = crontabs();
    bad["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] = json!(".replicas");
    bad["metadata"]["name"] = json!("crontabs.other.example.com");
    bad["spec"]["group"] = json!("other.example.com");
    let (code, st) = s.post(CRDS, bad).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["field"],
        "spec.versions[0].subresources.scale.specReplicasPath"
    );
    s.stop().await;
}

#[tokio::test]
async fn watches_see_custom_objects_change() {
    let s = TestServer::start().await;
    established(&s).await;
    let mut w = s.watch(&format!("{CTS}?watch=true")).await;
    s.post(CTS, crontab("a", json!({"image": "one"}))).await;
    let added = w.next().await.expect("an event");
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["spec"]["replicas"], 1);
    s.delete(&format!("{CTS}/a")).await;
    let deleted = w.next().await.expect("an event");
    assert_eq!(deleted["type"], "DELETED");
    s.stop().await;
}

#[tokio::test]
async fn bad_definitions_are_refused_with_the_reasons() {
    let s = TestServer::start().await;
    type Change = fn(&mut Value);
    let cases: Vec<(Change, &str)> = vec![
        (
            |c| c["metadata"]["name"] = json!("wrong.stable.example.com"),
            "metadata.name",
        ),
        (|c| c["spec"]["group"] = json!("nodot"), "spec.group"),
        (|c| c["spec"]["scope"] = json!("Everywhere"), "spec.scope"),
        (
            |c| c["spec"]["versions"][1]["storage"] = json!(true),
            "spec.versions",
        ),
        (
            |c| {
                c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
                    json!({"properties": {}})
            },
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
        ),
        (
            |c| {
                c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
                    json!([{"rule": "self.spec.replicas >"}])
            },
            "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule",
        ),
        (
            |c| {
                c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
                    json!([{"rule": "url(self.image).getHost() != ''"}])
            },
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule",
        ),
        (
            |c| c["spec"]["conversion"] = json!({"strategy": "Webhook"}),
            "spec.conversion.strategy",
        ),
        (
            |c| c["spec"]["versions"][1]["schema"] = Value::Null,
            "spec.versions[1].schema.openAPIV3Schema",
        ),
    ];
    for (change, field) in cases {
        let mut crd = crontabs();
        change(&mut crd);
        let (code, st) = s.post(CRDS, crd).await;
        assert_eq!(code, 422, "{field}: {st}");
        let fields: Vec<&str> = st["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert!(fields.contains(&field), "{field}: {st}");
    }
    // A definition in a group of berth's own kinds.
    let mut crd = crontabs();
    crd["spec"]["group"] = json!("apps.openshift.io");
    crd["metadata"]["name"] = json!("crontabs.apps.openshift.io");
    let (code, st) = s.post(CRDS, crd).await;
    assert_eq!(code, 422, "{st}");
    // None of them is served.
    let (code, _) = s.get("/apis/stable.example.com/v1").await;
    assert_eq!(code, 404);
    // The scope of a served definition cannot change.
    let crd = established(&s).await;
    let mut changed = crd.clone();
    changed["spec"]["scope"] = json!("Cluster");
    let (code, st) = s
        .put(&format!("{CRDS}/crontabs.stable.example.com"), changed)
        .await;
    assert_eq!(code, 422, "{st}");
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_definition_deletes_its_objects_then_stops_serving_it() {
    let s = TestServer::start().await;
    established(&s).await;
    for name in ["a", "b"] {
        let (code, v) = s.post(CTS, crontab(name, json!({"image": "x"}))).await;
        assert_eq!(code, 201, "{v}");
    }
    // One object holds its own finalizer a while.
    let (code, v) = s
        .patch(
            &format!("{CTS}/b"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let (code, crd) = s
        .delete(&format!("{CRDS}/crontabs.stable.example.com"))
        .await;
    assert_eq!(code, 200, "{crd}");
    let terminating = eventually(20, "the definition is terminating", || async {
        let (_, crd) = s.get(&format!("{CRDS}/crontabs.stable.example.com")).await;
        let t = berth::types::condition(&crd, "Terminating").cloned();
        t.ok_or_else(|| crd.to_string())
    })
    .await;
    assert_eq!(terminating["reason"], "InstanceDeletionInProgress");
    // No new objects while it goes.
    let (code, st) = s.post(CTS, crontab("c", json!({}))).await;
    assert_eq!(code, 405, "{st}");
    eventually(20, "a is deleted", || async {
        let (code, v) = s.get(&format!("{CTS}/a")).await;
        if code == 404 {
            Ok(())
        } else {
            Err(v.to_string())
        }
    })
    .await;
    // The definition waits for b's finalizer.
    let (code, _) = s.get(&format!("{CRDS}/crontabs.stable.example.com")).await;
    assert_eq!(code, 200);
    let (code, v) = s
        .patch(
            &format!("{CTS}/b"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": []}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    eventually(
        20,
        "the definition is gone and its kind no longer served",
        || async {
            let (code, v) = s.get(&format!("{CRDS}/crontabs.stable.example.com")).await;
            let (served, _) = s.get("/apis/stable.example.com/v1").await;
            if code == 404 && served == 404 {
                Ok(())
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn definitions_are_served_again_after_a_restart() {
    let s = TestServer::start().await;
    established(&s).await;
    s.post(CTS, crontab("a", json!({"image": "x"}))).await;
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, |_| {}).await;
    let (code, a) = s.get(&format!("{CTS}/a")).await;
    assert_eq!(code, 200, "{a}");
    assert_eq!(a["spec"]["replicas"], 1);
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_custom_objects() {
    let s = TestServer::start().await;
    established(&s).await;
    let (code, v) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
        .await;
    assert_eq!(code, 201, "{v}");
    let team = "/apis/stable.example.com/v1/namespaces/team/crontabs";
    for name in ["a", "b"] {
        let (code, v) = s.post(team, crontab(name, json!({"image": "x"}))).await;
        assert_eq!(code, 201, "{v}");
    }
    let (code, v) = s
        .patch(
            &format!("{team}/b"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let (code, _) = s.delete("/api/v1/namespaces/team").await;
    assert_eq!(code, 200);
    // b waits for its finalizer, and the namespace says so.
    let ns = eventually(20, "the namespace names what remains", || async {
        let (_, ns) = s.get("/api/v1/namespaces/team").await;
        let remaining = berth::types::condition(&ns, "NamespaceContentRemaining").cloned();
        match remaining {
            Some(c) if c["status"] == "True" => Ok(c),
            _ => Err(ns.to_string()),
        }
    })
    .await;
    assert!(
        ns["message"].as_str().unwrap().contains("crontabs has 1"),
        "{ns}"
    );
    let (code, _) = s.get(&format!("{team}/a")).await;
    assert_eq!(code, 404);
    s.patch(
        &format!("{team}/b"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": []}}),
    )
    .await;
    eventually(20, "the namespace is gone", || async {
        let (code, ns) = s.get("/api/v1/namespaces/team").await;
        if code == 404 {
            Ok(())
        } else {
            Err(ns.to_string())
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn deep_or_huge_custom_objects_get_a_clear_4xx() {
    let s = TestServer::start().await;
    established(&s).await;
    let nested = |depth: usize| {
        let mut v = json!("leaf");
        for _ in 0..depth {
            v = json!({ "x": v });
        }
        v
    };
    // Deep but within what JSON parsing takes: kept, under a field that keeps anything.
    let (code, v) = s
        .post(CTS, crontab("deep", json!({"extra": nested(100)})))
        .await;
    assert_eq!(code, 201, "{v}");
    // Deeper than any parser here goes: refused, and the server goes on.
    let body = format!(
        r#"{{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{{"name":"deeper"}},"spec":{{"extra":{}{}}}}}"#,
        r#"{"x":"#.repeat(5000),
        "}".repeat(5000)
    );
    let r = s
        .req(Method::POST, CTS)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // Larger than any object may be.
    let big = "x".repeat(4 << 20);
    let r = s
        .req(Method::POST, CTS)
        .json(&crontab("big", json!({"image": big})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let (code, _) = s.get(&format!("{CTS}/deep")).await;
    assert_eq!(code, 200);
    s.stop().await;
}

#[tokio::test]
async fn defaults_a_schema_gains_later_show_when_objects_are_read() {
    let s = TestServer::start().await;
    let crd = established(&s).await;
    let (code, a) = s.post(CTS, crontab("a", json!({"image": "x"}))).await;
    assert_eq!(code, 201, "{a}");
    assert!(a["spec"].get("cronSpec").is_none());
    // The definition gains a default for cronSpec.
    let mut changed = crd.clone();
    changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["cronSpec"]["default"] = json!("0 * * * *");
    let (code, v) = s
        .put(&format!("{CRDS}/crontabs.stable.example.com"), changed)
        .await;
    assert_eq!(code, 200, "{v}");
    let (_, got) = s.get(&format!("{CTS}/a")).await;
    assert_eq!(got["spec"]["cronSpec"], "0 * * * *", "{got}");
    let (_, list) = s.get(CTS).await;
    assert_eq!(list["items"][0]["spec"]["cronSpec"], "0 * * * *");
    let mut w = s
        .watch(&format!("{CTS}?watch=true&resourceVersion=0"))
        .await;
    let added = w.next().await.expect("an event");
    assert_eq!(added["object"]["spec"]["cronSpec"], "0 * * * *");
    s.stop().await;
}

/// A definition whose schema has CEL rules: on a field, on the spec, a transition rule.
fn with_rules() -> Value {
    let mut crd = crontabs();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]["maxReplicas"] = json!({"type": "integer"});
    spec["properties"]["image"]["x-kubernetes-validations"] = json!([
        {"rule": "self == oldSelf", "message": "image is immutable"},
    ]);
    spec["x-kubernetes-validations"] = json!([
        {"rule": "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
         "messageExpression": "'replicas ' + string(self.replicas) + ' is above ' + string(self.maxReplicas)",
         "fieldPath": ".replicas"},
        {"rule": "self.cronSpec.split(' ').size() == 5", "reason": "FieldValueForbidden"},
    ]);
    crd
}

#[tokio::test]
async fn cel_rules_hold_on_creates_and_updates() {
    let s = TestServer::start().await;
    let (code, crd) = s.post(CRDS, with_rules()).await;
    assert_eq!(code, 201, "{crd}");
    let causes = |st: &Value| -> Vec<(String, String)> {
        st["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["field"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let good =
        json!({"cronSpec": "* * * * */5", "image": "web:1", "replicas": 2, "maxReplicas": 3});
    let (code, ct) = s.post(CTS, crontab("good", good)).await;
    assert_eq!(code, 201, "{ct}");
    // Both spec rules fail, each with its own message, field and reason.
    let bad = json!({"cronSpec": "* *", "image": "web:1", "replicas": 5, "maxReplicas": 3});
    let (code, st) = s.post(CTS, crontab("bad", bad)).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["reason"], "Invalid", "{st}");
    let got = causes(&st);
    assert!(
        got.contains(&(
            "spec.replicas".into(),
            "Invalid value: replicas 5 is above 3".into()
        )),
        "{st}"
    );
    assert!(
        got.contains(&(
            "spec".into(),
            "Forbidden: failed rule: self.cronSpec.split(' ').size() == 5".into()
        )),
        "{st}"
    );
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("replicas 5 is above 3"),
        "{st}"
    );
    // Nothing was written.
    let (code, _) = s.get(&format!("{CTS}/bad")).await;
    assert_eq!(code, 404);
    // The transition rule: the image cannot change, other fields can.
    let at = format!("{CTS}/good");
    let merge = "application/merge-patch+json";
    let (code, st) = s
        .patch(&at, merge, json!({"spec": {"image": "web:2"}}))
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        causes(&st),
        [(
            "spec.image".to_string(),
            "Invalid value: \"web:2\": image is immutable".to_string()
        )],
        "{st}"
    );
    let (code, st) = s.patch(&at, merge, json!({"spec": {"replicas": 3}})).await;
    assert_eq!(code, 200, "{st}");
    let (code, st) = s.patch(&at, merge, json!({"spec": {"replicas": 4}})).await;
    assert_eq!(code, 422, "{st}");
    // A dry run is checked the same way; a server-side apply too.
    let (code, _) = s
        .patch(
            &format!("{at}?dryRun=All"),
            merge,
            json!({"spec": {"replicas": 9}}),
        )
        .await;
    assert_eq!(code, 422);
    let apply = crontab(
        "good",
        json!({"cronSpec": "* * * * */5", "image": "web:1", "replicas": 7, "maxReplicas": 3}),
    );
    let (code, st) = s
        .patch(
            &format!("{at}?fieldManager=me&force=true"),
            "application/apply-patch+yaml",
            apply,
        )
        .await;
    assert_eq!(code, 422, "{st}");
    // A rule tightened later does not lock objects that were valid: an update that leaves
    // the spec as it is passes, one that changes it must meet the rule.
    let (_, mut crd) = s.get(&format!("{CRDS}/crontabs.stable.example.com")).await;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
        [0]["rule"] = json!("self.replicas <= 1");
    let (code, st) = s
        .put(&format!("{CRDS}/crontabs.stable.example.com"), crd)
        .await;
    assert_eq!(code, 200, "{st}");
    let (code, st) = s
        .patch(
            &at,
            merge,
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        )
        .await;
    assert_eq!(code, 200, "{st}");
    let (code, st) = s.patch(&at, merge, json!({"spec": {"replicas": 2}})).await;
    assert_eq!(code, 422, "{st}");
    s.stop().await;
}

#[tokio::test]
async fn openapi_v2_publishes_definitions_as_they_come_and_go() {
    let s = TestServer::start().await;
    let name = "com.example.stable.v1.CronTab";
    let (_, v2) = s.get("/openapi/v2").await;
    assert!(v2["definitions"].get(name).is_none());
    let crd = established(&s).await;
    let (_, v2) = s.get("/openapi/v2").await;
    let def = &v2["definitions"][name];
    assert_eq!(
        def["properties"]["spec"]["properties"]["replicas"],
        json!({"type": "integer", "minimum": 1, "default": 1}),
        "{def}"
    );
    assert_eq!(
        def["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(
        def["properties"]["metadata"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Standard object's metadata")
    );
    // What keeps unknown fields is open in v2; a root that keeps them is only an object.
    let extra = &def["properties"]["spec"]["properties"]["extra"];
    assert!(extra.get("type").is_none(), "{extra}");
    let v2def = &v2["definitions"]["com.example.stable.v2.CronTab"];
    assert_eq!(v2def["type"], "object");
    assert!(v2def.get("properties").is_none(), "{v2def}");
    assert!(
        v2["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]["get"]
            .is_object()
    );
    // A version no longer served leaves.
    let mut changed = crd.clone();
    changed["spec"]["versions"][1]["served"] = json!(false);
    let (code, st) = s
        .put(&format!("{CRDS}/crontabs.stable.example.com"), changed)
        .await;
    assert_eq!(code, 200, "{st}");
    let (_, v2) = s.get("/openapi/v2").await;
    assert!(
        v2["definitions"]
            .get("com.example.stable.v2.CronTab")
            .is_none()
    );
    assert!(v2["definitions"].get(name).is_some());
    s.stop().await;
}

#[tokio::test]
async fn a_definitions_conditions_are_whatever_their_writers_make_them() {
    let s = TestServer::start().await;
    established(&s).await;
    let at = format!("{CRDS}/crontabs.stable.example.com/status");
    let (code, st) = s
        .patch(
            &at,
            "application/json-patch+json",
            json!([{"op": "add", "path": "/status/conditions/-", "value": {"message": "patched"}}]),
        )
        .await;
    assert_eq!(code, 200, "{st}");
    let conditions = st["status"]["conditions"].as_array().unwrap();
    assert!(conditions.contains(&json!({"message": "patched"})), "{st}");
    // An enum outside its values is reported as upstream does.
    let mut crd = crontabs();
    crd["metadata"]["name"] = json!("feelings.stable.example.com");
    crd["spec"]["names"] = json!({"plural": "feelings", "singular": "feeling", "kind": "Feeling"});
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["mood"] =
        json!({"type": "string", "enum": ["Great", "Down"]});
    let (code, st) = s.post(CRDS, crd).await;
    assert_eq!(code, 201, "{st}");
    let (code, st) = s
        .post(
            "/apis/stable.example.com/v1/namespaces/default/feelings",
            json!({"apiVersion": "stable.example.com/v1", "kind": "Feeling",
                   "metadata": {"name": "f"}, "spec": {"mood": "NonExistentValue"}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains(
            r#"spec.mood: Unsupported value: "NonExistentValue": supported values: "Great", "Down""#
        ),
        "{st}"
    );
    s.stop().await;
}

#[tokio::test]
async fn cluster_scoped_objects_without_a_status_subresource_keep_a_generation() {
    let s = TestServer::start().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.cluster.example.com"},
        "spec": {
            "group": "cluster.example.com",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                }}}}],
        },
    });
    let (code, c) = s.post(CRDS, crd).await;
    assert_eq!(code, 201, "{c}");
    const GS: &str = "/apis/cluster.example.com/v1/gadgets";
    let obj = json!({"apiVersion": "cluster.example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"size": 1}, "status": {"ok": false}});
    let (code, g) = s.post(GS, obj).await;
    assert_eq!(code, 201, "{g}");
    assert_eq!(g["metadata"]["generation"], 1);
    assert!(g["metadata"].get("namespace").is_none(), "{g}");
    // Without a status subresource the status is written with the rest.
    assert_eq!(g["status"]["ok"], false);
    let merge = "application/merge-patch+json";
    let (code, p) = s
        .patch(
            &format!("{GS}/g"),
            merge,
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(code, 200, "{p}");
    assert_eq!(
        p["metadata"]["generation"], 1,
        "metadata alone moves nothing"
    );
    let (_, p) = s
        .patch(&format!("{GS}/g"), merge, json!({"status": {"ok": true}}))
        .await;
    assert_eq!(p["status"]["ok"], true);
    assert_eq!(p["metadata"]["generation"], 2, "{p}");
    let (_, p) = s
        .patch(&format!("{GS}/g"), merge, json!({"spec": {"size": 2}}))
        .await;
    assert_eq!(p["metadata"]["generation"], 3, "{p}");
    // A namespaced path for a cluster-scoped kind is not served.
    let (code, _) = s
        .get("/apis/cluster.example.com/v1/namespaces/default/gadgets/g")
        .await;
    assert_eq!(code, 404);
    s.stop().await;
}

/// The upstream field validation test of a custom object whose YAML gives a key twice
/// under fields kept unknown: applied strictly it is refused, naming the line.
#[tokio::test]
async fn yaml_keys_given_twice_are_refused_by_line_or_warned_about() {
    let s = TestServer::start().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "noxus.mygroup.example.com"},
        "spec": {
            "group": "mygroup.example.com",
            "scope": "Cluster",
            "names": {"plural": "noxus", "singular": "noxu", "kind": "Noxu"},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "foo": {"type": "string"},
                            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                                "items": {"type": "object", "required": ["containerPort", "protocol"],
                                    "properties": {"containerPort": {"type": "integer", "format": "int32"},
                                        "name": {"type": "string"}, "protocol": {"type": "string"}}}},
                        }},
                }}}}],
        },
    });
    let (code, c) = s.post(CRDS, crd).await;
    assert_eq!(code, 201, "{c}");
    let body = "\napiVersion: mygroup.example.com/v1beta1\nkind: Noxu\nmetadata:\n  name: mytest\n  finalizers:\n  - test-finalizer\nspec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n  cronSpec: \"* * * * */5\"\n  ports:\n  - name: x\n    containerPort: 80\n    protocol: TCP";
    let path = "/apis/mygroup.example.com/v1beta1/noxus/mytest";
    let apply = |mode: &'static str| {
        s.req(
            Method::PATCH,
            &format!("{path}?fieldManager=field_validation_mgr&fieldValidation={mode}"),
        )
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body)
        .send()
    };
    let r = apply("Strict").await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let said = r.text().await.unwrap();
    assert!(
        said.contains(r#"line 11: key \"foo\" already set in map"#),
        "{said}"
    );
    let (code, _) = s.get(path).await;
    assert_eq!(code, 404, "nothing was written");
    // Warned about, the last is kept.
    let r = apply("Warn").await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let warning = r.headers()["warning"].to_str().unwrap().to_string();
    assert!(
        warning.contains(r#"line 11: key \"foo\" already set in map"#),
        "{warning}"
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["spec"]["foo"], "foo2");
    // So is a create of a YAML body.
    let r = s
        .req(
            Method::POST,
            "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        )
        .header("Content-Type", "application/yaml")
        .body("metadata:\n  name: twice\ndata:\n  a: '1'\n  a: '2'\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let said = r.text().await.unwrap();
    assert!(
        said.contains(r#"cannot be handled as a ConfigMap: strict decoding error: error converting YAML to JSON: yaml: unmarshal errors:\n  line 5: key \"a\" already set in map"#),
        "{said}"
    );
    s.stop().await;
}

/// The upstream field validation tests of custom objects, applied strictly in the
/// version that is served but not stored (as the conformance fixture's two-version
/// definition has it): a valid object is applied, and unknown fields at the root, in
/// the metadata and in an embedded object's metadata are refused as the typed patch
/// names them.
#[tokio::test]
async fn strict_apply_in_a_version_not_stored_names_undeclared_fields() {
    let s = TestServer::start().await;
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {
                        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                        "spec": {"type": "object"}}},
                "foo": {"type": "string"},
                "cronSpec": {"type": "string",
                    "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                    "items": {"type": "object", "required": ["containerPort", "protocol"],
                        "properties": {"containerPort": {"type": "integer", "format": "int32"},
                            "hostIP": {"type": "string"},
                            "hostPort": {"type": "integer", "format": "int32"},
                            "name": {"type": "string"}, "protocol": {"type": "string"}}}},
            }},
    }}});
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage,
            "subresources": {"status": {}}, "schema": schema})
    };
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "fookqza.mygroup.example.com"},
        "spec": {
            "group": "mygroup.example.com",
            "scope": "Cluster",
            "names": {"plural": "fookqza", "singular": "fookqz", "kind": "fookqz",
                "listKind": "fookqzList"},
            "versions": [version("v1beta1", false), version("v1", true)],
        },
    });
    let (code, c) = s.post(CRDS, crd).await;
    assert_eq!(code, 201, "{c}");
    let path = "/apis/mygroup.example.com/v1beta1/fookqza/mytest";
    let apply = |body: String| {
        s.req(
            Method::PATCH,
            &format!("{path}?fieldManager=field_validation_mgr&fieldValidation=Strict"),
        )
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body)
        .send()
    };
    let head =
        "\napiVersion: mygroup.example.com/v1beta1\nkind: fookqz\nmetadata:\n  name: mytest\n";
    let tail = "  foo: foo1\n  cronSpec: \"* * * * */5\"\n  ports:\n  - name: x\n    containerPort: 80\n    protocol: TCP";
    // Unknown fields at the root.
    let r = apply(format!(
        "{head}  finalizers:\n  - test-finalizer\nunknownField: unknown\nspec:\n{tail}"
    ))
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let said = r.text().await.unwrap();
    assert!(
        said.contains(".unknownField: field not declared in schema"),
        "{said}"
    );
    // Unknown metadata, of the object and of the object it embeds.
    let r = apply(format!(
        "{head}  unknownMeta: unknown\n  finalizers:\n  - test-finalizer\nspec:\n  template:\n    apiVersion: foo/v1\n    kind: Sub\n    metadata:\n        unknownSubMeta: unknown\n        name: subobject\n        namespace: default\n{tail}"
    ))
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let said = r.text().await.unwrap();
    assert!(
        said.contains(".metadata.unknownMeta: field not declared in schema")
            && said
                .contains(".spec.template.metadata.unknownSubMeta: field not declared in schema"),
        "{said}"
    );
    let (code, _) = s.get(path).await;
    assert_eq!(code, 404, "nothing was written");
    // A valid object is applied, and applied again with a change.
    let valid = format!("{head}  finalizers:\n  - test-finalizer\nspec:\n{tail}");
    let r = apply(valid.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["apiVersion"], "mygroup.example.com/v1beta1", "{v}");
    assert_eq!(v["spec"]["ports"][0]["containerPort"], 80, "{v}");
    let r = apply(valid.replace("foo: foo1", "foo: foo2"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (code, v) = s.get("/apis/mygroup.example.com/v1/fookqza/mytest").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"]["foo"], "foo2", "{v}");
    s.stop().await;
}
