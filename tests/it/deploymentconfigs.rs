//! DeploymentConfigs (`apps.openshift.io/v1`) over HTTP: create, read, list, watch,
//! update, patch and delete; defaults, validation messages and generation rules; discovery,
//! OpenAPI and Table output; and the status, scale, instantiate, rollback and log
//! subresources. No DC controller runs here: tests create the deployments (RCs) it would.

use serde_json::{Value, json};

use crate::support::TestServer;

const DCS: &str = "/apis/apps.openshift.io/v1/namespaces/default/deploymentconfigs";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const MERGE: &str = "application/merge-patch+json";

fn dc(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps.openshift.io/v1",
        "kind": "DeploymentConfig",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "command": ["sh", "-c", "echo hello; sleep 30"]}]},
            },
        },
    })
}

/// A server without controllers: these tests play the DC and deployer controllers
/// themselves, to check what the API alone does.
async fn bare() -> TestServer {
    TestServer::start_with(|c| c.run_controllers = false).await
}

/// The deployment (RC) the DC controller would make for version `version` of `dc`.
fn deployment(dc: &Value, version: i64, phase: &str) -> Value {
    let name = dc["metadata"]["name"].as_str().unwrap();
    let rc = format!("{name}-{version}");
    let mut template = dc["spec"]["template"].clone();
    template["metadata"]["labels"]["deploymentconfig"] = json!(name);
    template["metadata"]["labels"]["deployment"] = json!(rc);
    let mut selector = dc["spec"]["selector"].clone();
    selector["deploymentconfig"] = json!(name);
    selector["deployment"] = json!(rc);
    json!({
        "metadata": {
            "name": rc,
            "labels": {"openshift.io/deployment-config.name": name},
            "annotations": {
                "openshift.io/deployment-config.name": name,
                "openshift.io/deployment-config.latest-version": version.to_string(),
                "openshift.io/deployment.phase": phase,
                "openshift.io/encoded-deployment-config": dc.to_string(),
            },
        },
        "spec": {"replicas": 0, "selector": selector, "template": template},
    })
}

async fn create(s: &TestServer, body: Value) -> Value {
    let (code, obj) = s.post(DCS, body).await;
    assert_eq!(code, 201, "{obj}");
    obj
}

#[tokio::test]
async fn deployment_configs_are_created_with_defaults_listed_watched_updated_and_deleted() {
    let s = bare().await;
    let mut body = dc("web", "busybox");
    body["status"] = json!({"latestVersion": 7});
    let created = create(&s, body).await;
    assert_eq!(created["metadata"]["generation"], 1);
    assert_eq!(
        created["status"]["latestVersion"], 0,
        "the client's status is dropped"
    );
    let spec = &created["spec"];
    assert_eq!(spec["triggers"], json!([{"type": "ConfigChange"}]));
    assert_eq!(spec["selector"], json!({"app": "web"}));
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["strategy"]["type"], "Rolling");
    assert_eq!(spec["strategy"]["rollingParams"]["maxSurge"], "25%");
    assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");

    let (code, got) = s.get(&format!("{DCS}/web")).await;
    assert_eq!((code, &got), (200, &created));
    let (code, list) = s.get(DCS).await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "DeploymentConfigList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, all) = s.get("/apis/apps.openshift.io/v1/deploymentconfigs").await;
    assert_eq!(all["items"][0]["metadata"]["name"], "web");

    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = s
        .watch(&format!("{DCS}?watch=true&resourceVersion={rv}"))
        .await;

    // A label-only change keeps the generation; a spec change bumps it.
    let (code, labelled) = s
        .patch(
            &format!("{DCS}/web"),
            MERGE,
            json!({"metadata": {"labels": {"tier": "front"}}}),
        )
        .await;
    assert_eq!(code, 200, "{labelled}");
    assert_eq!(labelled["metadata"]["generation"], 1);
    let e = w.next_change().await;
    assert_eq!(
        (
            e["type"].as_str(),
            &e["object"]["metadata"]["labels"]["tier"]
        ),
        (Some("MODIFIED"), &json!("front"))
    );

    let mut put = labelled.clone();
    put["spec"]["replicas"] = json!(3);
    put["status"]["latestVersion"] = json!(5);
    let (code, updated) = s.put(&format!("{DCS}/web"), put).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["generation"], 2);
    assert_eq!(updated["spec"]["replicas"], 3);
    assert_eq!(updated["status"]["latestVersion"], 0, "only +1 is accepted");

    // latestVersion + 1 through the main resource starts a deployment and bumps generation.
    let mut put = updated.clone();
    put["status"]["latestVersion"] = json!(1);
    let (code, bumped) = s.put(&format!("{DCS}/web"), put).await;
    assert_eq!(code, 200, "{bumped}");
    assert_eq!(bumped["status"]["latestVersion"], 1);
    assert_eq!(bumped["metadata"]["generation"], 3);

    // A stale resourceVersion is a conflict.
    let (code, st) = s.put(&format!("{DCS}/web"), updated).await;
    assert_eq!(code, 409, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );

    let (code, _) = s.delete(&format!("{DCS}/web")).await;
    assert_eq!(code, 200);
    let (code, _) = s.get(&format!("{DCS}/web")).await;
    assert_eq!(code, 404);
    loop {
        let e = w.next_change().await;
        if e["type"] == "DELETED" {
            break;
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn invalid_deployment_configs_are_refused_with_the_spec_messages() {
    let s = bare().await;
    let mut body = dc("bad", "busybox");
    body["spec"]["replicas"] = json!(-1);
    body["spec"]["strategy"] =
        json!({"type": "Rolling", "rollingParams": {"maxSurge": 0, "maxUnavailable": 0}});
    body["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    body["spec"]["triggers"] = json!([{"type": "ImageChange", "imageChangeParams": {
        "containerNames": ["app"], "from": {"name": "nostream"}}}]);
    let (code, st) = s.post(DCS, body).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["kind"], "DeploymentConfig");
    assert_eq!(st["details"]["group"], "apps.openshift.io");
    let message = st["message"].as_str().unwrap();
    assert!(
        message.starts_with("DeploymentConfig.apps.openshift.io \"bad\" is invalid: ["),
        "{message}"
    );
    let causes: Vec<(String, String)> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().into(),
                c["message"].as_str().unwrap().into(),
            )
        })
        .collect();
    for (f, m) in [
        (
            "spec.replicas",
            "Invalid value: -1: replicas cannot be negative",
        ),
        (
            "spec.strategy.rollingParams.maxUnavailable",
            "Invalid value: 0: cannot be 0 when maxSurge is 0 as well",
        ),
        (
            "spec.template.spec.restartPolicy",
            "Unsupported value: \"Never\": supported values: \"Always\"",
        ),
        (
            "spec.triggers[0].imageChangeParams.from.name",
            "Invalid value: \"nostream\": must be in the form of <name>:<tag>",
        ),
    ] {
        assert!(
            causes.contains(&(f.into(), m.into())),
            "{f}: {m} not in {causes:?}"
        );
    }
    // A missing template, and a field the schema does not know under Strict.
    let (code, st) = s
        .post(DCS, json!({"metadata": {"name": "empty"}, "spec": {}}))
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("spec.template: Required value"),
        "{st}"
    );
    let mut typo = dc("typo", "busybox");
    typo["spec"]["replicaz"] = json!(1);
    let (code, st) = s.post(&format!("{DCS}?fieldValidation=Strict"), typo).await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.replicaz\""),
        "{st}"
    );
    s.stop().await;
}

#[tokio::test]
async fn the_status_subresource_keeps_the_spec_and_refuses_decrements() {
    let s = bare().await;
    let created = create(&s, dc("web", "busybox")).await;
    let mut body = created.clone();
    body["spec"]["replicas"] = json!(9);
    body["status"]["latestVersion"] = json!(4);
    body["status"]["observedGeneration"] = json!(1);
    let (code, out) = s.put(&format!("{DCS}/web/status"), body).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["status"]["latestVersion"], 4);
    assert_eq!(out["spec"]["replicas"], 2);
    assert_eq!(
        out["metadata"]["generation"], 1,
        "status writes never bump generation"
    );
    let (code, st) = s
        .patch(
            &format!("{DCS}/web/status"),
            MERGE,
            json!({"status": {"latestVersion": 3}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "status.latestVersion");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Invalid value: 3: latestVersion cannot be decremented"
    );
    let (code, st) = s
        .patch(
            &format!("{DCS}/web/status"),
            MERGE,
            json!({"status": {"replicas": -1}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Invalid value: -1: must be greater than or equal to 0"
    );
    s.stop().await;
}

#[tokio::test]
async fn discovery_and_openapi_describe_deployment_configs() {
    let s = bare().await;
    let (_, groups) = s.get("/apis").await;
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "apps.openshift.io")
        .expect("the group is listed");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "apps.openshift.io/v1"
    );
    let (code, g) = s.get("/apis/apps.openshift.io").await;
    assert_eq!(code, 200, "{g}");
    let (_, list) = s.get("/apis/apps.openshift.io/v1").await;
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for n in [
        "deploymentconfigs",
        "deploymentconfigs/status",
        "deploymentconfigs/scale",
        "deploymentconfigs/instantiate",
        "deploymentconfigs/rollback",
        "deploymentconfigs/log",
    ] {
        assert!(names.contains(&n), "{n} not in {names:?}");
    }
    let r = &list["resources"][0];
    assert_eq!(r["kind"], "DeploymentConfig");
    assert_eq!(r["shortNames"], json!(["dc"]));
    assert_eq!(r["categories"], json!(["all"]));
    assert_eq!(r["namespaced"], true);

    let (code, doc) = s.get("/openapi/v3/apis/apps.openshift.io/v1").await;
    assert_eq!(code, 200, "{doc}");
    let item =
        &doc["paths"]["/apis/apps.openshift.io/v1/namespaces/{namespace}/deploymentconfigs/{name}"];
    let params: Vec<&str> = item["patch"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(params.contains(&"fieldValidation"), "{params:?}");
    let schema = &doc["components"]["schemas"]["com.github.openshift.api.apps.v1.DeploymentConfig"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "apps.openshift.io", "version": "v1", "kind": "DeploymentConfig"}])
    );
    let spec =
        &doc["components"]["schemas"]["com.github.openshift.api.apps.v1.DeploymentConfigSpec"];
    assert!(spec["properties"]["triggers"].is_object(), "{spec}");
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.PodTemplateSpec"].is_object());
    s.stop().await;
}

#[tokio::test]
async fn the_table_shows_revision_desired_current_and_triggers() {
    let s = bare().await;
    create(&s, dc("web", "busybox")).await;
    let mut test = dc("check", "busybox");
    test["spec"]["test"] = json!(true);
    test["spec"]["triggers"] = json!([]);
    create(&s, test).await;
    s.patch(
        &format!("{DCS}/web/status"),
        MERGE,
        json!({"status": {"latestVersion": 3, "updatedReplicas": 2}}),
    )
    .await;
    let resp = s
        .req(reqwest::Method::GET, DCS)
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap();
    let table: Value = resp.json().await.unwrap();
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        ["Name", "Revision", "Desired", "Current", "Triggered By"]
    );
    let rows: Vec<&Value> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["cells"])
        .collect();
    assert!(
        rows.contains(&&json!(["web", 3, "2", 2, "config"])),
        "{rows:?}"
    );
    assert!(
        rows.contains(&&json!(["check", 0, "2 (during test)", 0, ""])),
        "{rows:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_replicas() {
    let s = bare().await;
    create(&s, dc("web", "busybox")).await;
    let (code, scale) = s.get(&format!("{DCS}/web/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=web,deploymentconfig=web");
    let mut body = scale.clone();
    body["spec"]["replicas"] = json!(5);
    let (code, out) = s.put(&format!("{DCS}/web/scale"), body).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["spec"]["replicas"], 5);
    let (code, out) = s
        .patch(
            &format!("{DCS}/web/scale"),
            MERGE,
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let (_, got) = s.get(&format!("{DCS}/web")).await;
    assert_eq!(got["spec"]["replicas"], 1);
    assert_eq!(
        got["metadata"]["generation"], 3,
        "each scale is a spec change"
    );
    // A stale Scale is a conflict.
    let (code, _) = s.put(&format!("{DCS}/web/scale"), scale.clone()).await;
    assert_eq!(code, 409);
    // So is a patch naming a stale resourceVersion; a patch naming none applies to
    // whatever was written meanwhile.
    let (code, _) = s
        .patch(
            &format!("{DCS}/web/scale"),
            MERGE,
            json!({"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]},
                   "spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(code, 409);
    let (code, out) = s
        .patch(
            &format!("{DCS}/web"),
            MERGE,
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = s
        .patch(
            &format!("{DCS}/web/scale"),
            MERGE,
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let (code, st) = s
        .patch(
            &format!("{DCS}/web/scale"),
            MERGE,
            json!({"spec": {"replicas": -2}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    let (code, st) = s
        .patch(
            &format!("{DCS}/nope/scale"),
            MERGE,
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(code, 404, "{st}");
    assert_eq!(st["message"], "scale.extensions \"nope\" not found");
    s.stop().await;
}

async fn instantiate(s: &TestServer, name: &str, body: Value) -> (u16, Value) {
    s.post(&format!("{DCS}/{name}/instantiate"), body).await
}

#[tokio::test]
async fn instantiate_starts_a_new_version_with_its_cause() {
    let s = bare().await;
    let created = create(&s, dc("web", "busybox")).await;
    let req = |force: bool| {
        json!({"kind": "DeploymentRequest", "apiVersion": "apps.openshift.io/v1",
        "name": "web", "latest": true, "force": force})
    };
    let (code, out) = instantiate(&s, "web", req(false)).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["status"]["latestVersion"], 1);
    assert_eq!(
        out["status"]["details"],
        json!({"message": "config change", "causes": [{"type": "ConfigChange"}]})
    );
    assert_eq!(out["metadata"]["generation"], 2);

    // The deployment of version 1 does not exist yet: its 404.
    let (code, st) = instantiate(&s, "web", req(false)).await;
    assert_eq!(code, 404, "{st}");
    assert_eq!(st["message"], "replicationcontrollers \"web-1\" not found");

    // Once it exists with the same template, nothing changed: 204, nothing written.
    let (code, rc) = s.post(RCS, deployment(&out, 1, "Complete")).await;
    assert_eq!(code, 201, "{rc}");
    let (code, _) = instantiate(&s, "web", req(false)).await;
    assert_eq!(code, 204);
    let (_, same) = s.get(&format!("{DCS}/web")).await;
    assert_eq!(same["status"]["latestVersion"], 1);

    // Forced: a manual change.
    let (code, out) = instantiate(&s, "web", req(true)).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["status"]["latestVersion"], 2);
    assert_eq!(
        out["status"]["details"],
        json!({"message": "manual change", "causes": [{"type": "Manual"}]})
    );

    // Request validation and paused configs.
    let (code, st) = instantiate(&s, "web", json!({"name": ""})).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Invalid value: \"\": name of the deployment config is missing"
    );
    let (code, _) = instantiate(&s, "web", json!({"name": "other"})).await;
    assert_eq!(code, 400);
    let (code, _) = instantiate(&s, "nope", json!({"name": "nope"})).await;
    assert_eq!(code, 404);
    s.patch(
        &format!("{DCS}/web"),
        MERGE,
        json!({"spec": {"paused": true}}),
    )
    .await;
    let (code, st) = instantiate(&s, "web", req(true)).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["message"],
        "DeploymentRequest.apps.openshift.io \"web\" is invalid: spec.paused: Invalid value: true: deployment config \"web\" is paused - unpause to request a new deployment"
    );
    let _ = created;
    s.stop().await;
}

#[tokio::test]
async fn rollback_returns_the_old_template_and_a_put_stores_it() {
    let s = bare().await;
    let v1 = create(&s, dc("web", "busybox:1")).await;
    let rollback = |revision: i64| {
        json!({"kind": "DeploymentConfigRollback", "apiVersion": "apps.openshift.io/v1",
        "name": "web", "spec": {"revision": revision, "includeTemplate": true}})
    };
    let (code, st) = s.post(&format!("{DCS}/web/rollback"), rollback(0)).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Invalid value: \"web\": cannot rollback an undeployed config"
    );

    // Version 1 with busybox:1, version 2 with busybox:2, as the DC controller would make.
    let (_, d1) = instantiate(&s, "web", json!({"name": "web", "force": true})).await;
    s.post(RCS, deployment(&d1, 1, "Complete")).await;
    let (code, st) = s.post(&format!("{DCS}/web/rollback"), rollback(0)).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Invalid value: \"web\": no previous deployment exists for \"default/web\""
    );
    let (code, v2) = s
        .patch(&format!("{DCS}/web"), "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "busybox:2"}]))
        .await;
    assert_eq!(code, 200, "{v2}");
    let (code, d2) = instantiate(&s, "web", json!({"name": "web"})).await;
    assert_eq!(code, 201, "{d2}");
    assert_eq!(d2["status"]["details"]["message"], "config change");
    s.post(RCS, deployment(&d2, 2, "Complete")).await;

    let (code, st) = s.post(&format!("{DCS}/web/rollback"), rollback(2)).await;
    assert_eq!(code, 422);
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Invalid value: \"web\": version 2 is already the latest"
    );
    let (code, st) = s.post(&format!("{DCS}/web/rollback"), rollback(-1)).await;
    assert_eq!(code, 422);
    assert_eq!(st["details"]["causes"][0]["field"], "spec.revision");
    let (code, st) = s.post(&format!("{DCS}/web/rollback"), rollback(7)).await;
    assert_eq!(code, 422);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("\"web-7\" not found"),
        "{st}"
    );

    let (code, back) = s.post(&format!("{DCS}/web/rollback"), rollback(0)).await;
    assert_eq!(code, 201, "{back}");
    assert_eq!(
        back["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:1"
    );
    assert_eq!(back["status"]["latestVersion"], 3);
    let (_, stored) = s.get(&format!("{DCS}/web")).await;
    assert_eq!(
        stored["status"]["latestVersion"], 2,
        "a rollback is not stored"
    );
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:2"
    );

    let (code, saved) = s.put(&format!("{DCS}/web"), back).await;
    assert_eq!(code, 200, "{saved}");
    assert_eq!(saved["status"]["latestVersion"], 3);
    assert_eq!(
        saved["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:1"
    );
    assert!(
        saved["metadata"]["generation"].as_i64().unwrap()
            > stored["metadata"]["generation"].as_i64().unwrap()
    );
    let _ = v1;
    s.stop().await;
}

async fn dc_log(s: &TestServer, name: &str, query: &str) -> (u16, String) {
    s.text(&format!("{DCS}/{name}/log{query}")).await
}

#[tokio::test]
async fn the_log_subresource_explains_what_is_missing() {
    let s = bare().await;
    let (code, text) = dc_log(&s, "web", "").await;
    assert_eq!(code, 404, "{text}");
    assert!(
        text.contains("deploymentconfig.apps.openshift.io \\\"web\\\" not found"),
        "{text}"
    );
    create(&s, dc("web", "busybox")).await;
    let (code, text) = dc_log(&s, "web", "").await;
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("no deployment exists for deploymentConfig \\\"web\\\""),
        "{text}"
    );
    let (_, d1) = instantiate(&s, "web", json!({"name": "web", "force": true})).await;
    let (code, text) = dc_log(&s, "web", "?version=3").await;
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("invalid version for deploymentConfig \\\"web\\\": 3"),
        "{text}"
    );
    let (code, text) = dc_log(&s, "web", "?previous=true").await;
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("no previous deployment exists for deploymentConfig \\\"web\\\""),
        "{text}"
    );
    let (code, text) = dc_log(&s, "web", "?version=0").await;
    assert_eq!(code, 422, "{text}");
    assert!(
        text.contains("deployment version must be greater than 0"),
        "{text}"
    );

    // A new deployment has no deployer pod yet: nowait answers at once with nothing.
    s.post(RCS, deployment(&d1, 1, "New")).await;
    let (code, text) = dc_log(&s, "web", "?nowait=true").await;
    assert_eq!((code, text.as_str()), (200, ""));
    // A running deployment without its deployer pod: the pod's 404.
    s.patch(
        &format!("{RCS}/web-1"),
        MERGE,
        json!({"metadata": {"annotations": {"openshift.io/deployment.phase": "Running"}}}),
    )
    .await;
    let (code, text) = dc_log(&s, "web", "").await;
    assert_eq!(code, 404, "{text}");
    assert!(
        text.contains("pods \\\"web-1-deploy\\\" not found"),
        "{text}"
    );
    s.stop().await;
}

#[tokio::test]
async fn the_log_of_a_deployment_is_its_deployer_pods_then_an_application_pods() {
    // The whole machinery: controllers, a node agent, a real deployer process.
    let s = crate::node::server().await;
    let mut web = dc("web", "busybox");
    web["spec"]["replicas"] = json!(1);
    web["spec"]["template"]["spec"]["containers"][0]["command"] =
        json!(["sh", "-c", "echo hello; exec sleep 9711"]);
    create(&s, web).await;
    crate::support::eventually(60, "version 1 completes", || async {
        let (_, rc) = s.get(&format!("{RCS}/web-1")).await;
        match rc["metadata"]["annotations"]["openshift.io/deployment.phase"].as_str() {
            Some("Complete") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (_, deployer) = s
        .text(&format!("{}/web-1-deploy/log", crate::node::PODS))
        .await;
    assert!(deployer.contains("--> Success"), "{deployer}");
    // Complete: the log is an application pod's.
    let text = crate::support::eventually(30, "an application pod's log", || async {
        let (code, text) = dc_log(&s, "web", "").await;
        if code == 200 && text == "hello\n" {
            Ok(text)
        } else {
            Err(format!("{code} {text}"))
        }
    })
    .await;
    assert_eq!(text, "hello\n");
    s.delete(&format!("{DCS}/web")).await;
    crate::support::eventually(60, "the DC's pods are gone", || async {
        let (_, list) = s.get(crate::node::PODS).await;
        if list["items"].as_array().is_some_and(Vec::is_empty) {
            Ok(())
        } else {
            Err(list["items"].to_string())
        }
    })
    .await;
}

/// `deployment(...)` owned by `dc` as the DC controller makes it (§9).
fn owned_deployment(dc: &Value, version: i64) -> Value {
    let mut rc = deployment(dc, version, "Complete");
    rc["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
        "name": dc["metadata"]["name"], "uid": dc["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    }]);
    rc
}

#[tokio::test]
async fn deleting_a_config_deletes_its_deployments_unless_they_are_orphaned() {
    let s = TestServer::start().await;
    // Manual only: the deployments are the test's, not the DC controller's.
    let manual = |name: &str| {
        let mut d = dc(name, "busybox");
        d["spec"]["triggers"] = json!([]);
        d
    };
    let web = create(&s, manual("web")).await;
    let (code, rc) = s.post(RCS, owned_deployment(&web, 1)).await;
    assert_eq!(code, 201, "{rc}");
    let (code, _) = s.delete(&format!("{DCS}/web")).await;
    assert_eq!(code, 200);
    crate::support::eventually(20, "the deployment is collected", || async {
        let (code, rc) = s.get(&format!("{RCS}/web-1")).await;
        if code == 404 {
            Ok(())
        } else {
            Err(rc["metadata"].to_string())
        }
    })
    .await;

    let api = create(&s, manual("api")).await;
    s.post(RCS, owned_deployment(&api, 1)).await;
    let (code, st) = s
        .call(
            reqwest::Method::DELETE,
            &format!("{DCS}/api"),
            Some(
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}),
            ),
        )
        .await;
    assert_eq!(code, 200, "{st}");
    crate::support::eventually(
        20,
        "the config is gone and its deployment released",
        || async {
            let (dc_code, _) = s.get(&format!("{DCS}/api")).await;
            let (code, rc) = s.get(&format!("{RCS}/api-1")).await;
            let released = rc["metadata"]["ownerReferences"]
                .as_array()
                .is_none_or(Vec::is_empty);
            if dc_code == 404 && code == 200 && released {
                Ok(())
            } else {
                Err(format!("{dc_code} {code} {}", rc["metadata"]))
            }
        },
    )
    .await;
    s.stop().await;
}
