//! The upstream `[sig-apps]` Conformance tests (kubernetes/kubernetes
//! `test/conformance/testdata/conformance.yaml`, their code in `test/e2e/apps/`) ported
//! to berth: one test per upstream test, named after it, following its steps and
//! assertions (API calls, watch events, status and scale subresources, conditions) against
//! a real server whose node agent runs the pods as processes.
//!
//! What stands in for what upstream has:
//! - Images are not pulled: every container gets a `command`. A server image is played by
//!   [`SERVE`] (a process that lives well past the test and then ends, since the agent
//!   leaves pods running when it stops); an image that cannot be pulled by [`MISSING`], a
//!   command that cannot start, so its pods never become ready.
//! - httpd's HTTP readiness probe (`setHTTPProbe`), broken and restored by moving its
//!   `index.html` away through `kubectl exec`, is an exec probe that fails while a file
//!   named after the pod's uid exists in the test's directory ([`set_probe`],
//!   [`break_probe`]): a new pod, like a new container, starts healthy.
//! - Markers that upstream's Job pods keep in a hostPath or emptyDir volume are files in
//!   the test's directory, which the process runtime's containers see as the host does.
//! - CronJob schedules of every minute (`*/1 * * * ?`) are `@every` a second or two, so
//!   the schedule-driven tests (two of them `[Slow]`) take seconds instead of minutes.
//! - Waits that upstream makes with fixed sleeps (`confirmStatefulPodCount`, 10 s) check
//!   for a few seconds.
//! - The one test that wants two schedulable nodes (DaemonSet rollback) gets a second Node
//!   object whose agent the test plays, as `daemonsets.rs` does.
//!
//! Not ported, because they need an image's server answering over the network:
//! - `[sig-apps] ReplicaSet should serve a basic image on each replica with a public image
//!   [Conformance]`: the pod must answer HTTP with its hostname (serve-hostname).
//! - `[sig-apps] ReplicationController should serve a basic image on each replica with a
//!   public image [Conformance]`: the same, through the RC's pods.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::node::pod_until;
use crate::support::{TestServer, WatchReader, eventually, within};

const PODS: &str = "/api/v1/namespaces/default/pods";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const SERVICES: &str = "/api/v1/namespaces/default/services";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const RSS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const DSS: &str = "/apis/apps/v1/namespaces/default/daemonsets";
const STSS: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const REVISIONS: &str = "/apis/apps/v1/namespaces/default/controllerrevisions";
const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const CRON_JOBS: &str = "/apis/batch/v1/namespaces/default/cronjobs";
const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

const HTTPD: &str = "registry.k8s.io/e2e-test-images/httpd:2.4.38-4";
const NEW_HTTPD: &str = "registry.k8s.io/e2e-test-images/httpd:2.4.39-4";
const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.53";
const PAUSE: &str = "registry.k8s.io/pause:3.10";
const NGINX: &str = "registry.k8s.io/e2e-test-images/nginx:1.14-4";
const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1";

/// What a server image runs here.
const SERVE: &str = "exec sleep 300";
/// What an image that cannot be pulled runs here: nothing starts.
const MISSING: &str = "/nonexistent/image-entrypoint";

const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";

// ---------------------------------------------------------------------------------------
// The cluster and plain API calls.

/// A server with a node agent named `node` (unique per test), once the node is Ready.
async fn cluster(node: &str) -> TestServer {
    cluster_tuned(node, |_| {}).await
}

async fn cluster_tuned(node: &str, tune: impl FnOnce(&mut berth::app::NodeSettings)) -> TestServer {
    let s = TestServer::start_with(|c| c.node = Some(crate::node::node_settings(node, tune))).await;
    eventually(30, "the node is Ready", || async {
        let (_, n) = s.get(&format!("/api/v1/nodes/{node}")).await;
        match berth::types::condition(&n, "Ready") {
            Some(c) if c["status"] == "True" => Ok(()),
            _ => Err(n["status"].to_string()),
        }
    })
    .await;
    s
}

fn q(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn by_label(selector: &str) -> String {
    format!("labelSelector={}", q(selector))
}

fn by_field(selector: &str) -> String {
    format!("fieldSelector={}", q(selector))
}

/// The cluster-wide path of a namespaced collection.
fn all_ns(collection: &str) -> String {
    collection.replace("/namespaces/default", "")
}

async fn create(s: &TestServer, collection: &str, body: Value) -> Value {
    let (code, out) = s.post(collection, body).await;
    assert_eq!(code, 201, "create in {collection}: {out}");
    out
}

async fn read(s: &TestServer, path: &str) -> Value {
    let (code, out) = s.get(path).await;
    assert_eq!(code, 200, "GET {path}: {out}");
    out
}

async fn replace(s: &TestServer, path: &str, body: Value) -> Value {
    let (code, out) = s.put(path, body).await;
    assert_eq!(code, 200, "PUT {path}: {out}");
    out
}

async fn patch(s: &TestServer, path: &str, kind: &str, body: Value) -> Value {
    let (code, out) = s.patch(path, kind, body).await;
    assert_eq!(code, 200, "PATCH {path}: {out}");
    out
}

/// Reads `get`, changes it with `change` and writes it to `put`, again on a conflict
/// (`retry.RetryOnConflict`, the `Update…WithRetries` helpers).
async fn update_at(s: &TestServer, get: &str, put: &str, change: impl Fn(&mut Value)) -> Value {
    for _ in 0..20 {
        let mut obj = read(s, get).await;
        change(&mut obj);
        let (code, out) = s.put(put, obj).await;
        match code {
            200 => return out,
            409 => continue,
            _ => panic!("PUT {put}: {code} {out}"),
        }
    }
    panic!("PUT {put}: still conflicting")
}

async fn update(s: &TestServer, path: &str, change: impl Fn(&mut Value)) -> Value {
    update_at(s, path, path, change).await
}

async fn delete_collection(s: &TestServer, collection: &str, selector: &str, options: Value) {
    let path = if selector.is_empty() {
        collection.to_string()
    } else {
        format!("{collection}?{}", by_label(selector))
    };
    let (code, out) = s.call(reqwest::Method::DELETE, &path, Some(options)).await;
    assert_eq!(code, 200, "DELETE {path}: {out}");
}

async fn list(s: &TestServer, collection: &str, selector: &str) -> Value {
    if selector.is_empty() {
        read(s, collection).await
    } else {
        read(s, &format!("{collection}?{}", by_label(selector))).await
    }
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn names(objs: &[Value]) -> Vec<String> {
    let mut n: Vec<String> = objs.iter().map(name).collect();
    n.sort();
    n
}

fn uid(o: &Value) -> String {
    o["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn int(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn text<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn label<'a>(o: &'a Value, key: &str) -> &'a str {
    o["metadata"]["labels"][key].as_str().unwrap_or("")
}

fn annotation<'a>(o: &'a Value, key: &str) -> &'a str {
    o["metadata"]["annotations"][key].as_str().unwrap_or("")
}

fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    berth::types::condition(o, kind)
}

fn has_condition(o: &Value, kind: &str, status: &str, reason: Option<&str>) -> bool {
    condition(o, kind)
        .is_some_and(|c| c["status"] == status && reason.is_none_or(|r| c["reason"] == r))
}

/// The uid of the object's controller (`metav1.GetControllerOf`).
fn controller_uid(o: &Value) -> Option<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?["uid"]
        .as_str()
}

fn controlled_by(o: &Value, owner: &Value) -> bool {
    controller_uid(o) == Some(owner["metadata"]["uid"].as_str().unwrap_or("-"))
}

/// The label selector of `spec.selector.matchLabels` (or an RC's `spec.selector`).
fn selector_of(owner: &Value) -> String {
    let sel = &owner["spec"]["selector"];
    let labels = sel.get("matchLabels").unwrap_or(sel);
    let mut parts: Vec<String> = labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    parts.sort();
    parts.join(",")
}

/// Five random characters from `utilrand.String`'s alphabet.
fn rand5() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(5);
    let mut n = h.finish();
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| {
            let c = alphabet[(n % alphabet.len() as u64) as usize];
            n /= alphabet.len() as u64;
            c as char
        })
        .collect()
}

/// Now to the second, as `metav1.Now().Rfc3339Copy()` puts it on the wire.
fn now_seconds() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .unwrap()
        .to_string()
}

fn same_time(a: &Value, b: &str) -> bool {
    let parse = |s: &str| s.parse::<jiff::Timestamp>().ok();
    a.as_str().and_then(parse).is_some() && a.as_str().and_then(parse) == parse(b)
}

// ---------------------------------------------------------------------------------------
// Watches.

/// Reads events until `accept` takes one (`watchtools.Until`), failing after `secs`.
async fn until(
    w: &mut WatchReader,
    secs: u64,
    what: &str,
    mut accept: impl FnMut(&Value) -> bool,
) -> Value {
    let wait = async {
        loop {
            let e = w.next_change().await;
            if accept(&e) {
                return e;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: no such event in {secs} s"))
}

async fn watch_from(s: &TestServer, collection: &str, query: &str, rv: &str) -> WatchReader {
    s.watch(&format!(
        "{collection}?watch=true&resourceVersion={rv}&{query}"
    ))
    .await
}

/// A new watch from `rv` read until `accept` takes an event, as upstream's
/// `watchtools.Until(ctx, listRV, w, cond)` replays from the list it made first.
async fn until_from(
    s: &TestServer,
    collection: &str,
    query: &str,
    rv: &str,
    secs: u64,
    what: &str,
    accept: impl FnMut(&Value) -> bool,
) -> Value {
    let mut w = watch_from(s, collection, query, rv).await;
    until(&mut w, secs, what, accept).await
}

// ---------------------------------------------------------------------------------------
// Pods.

fn serve() -> Value {
    json!(["sh", "-c", SERVE])
}

/// A container of `image` that runs [`SERVE`].
fn runs(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image, "command": serve(), "securityContext": {}})
}

fn is_ready(p: &Value) -> bool {
    has_condition(p, "Ready", "True", None)
}

fn live(p: &Value) -> bool {
    p["metadata"]["deletionTimestamp"].is_null()
}

fn phase(p: &Value) -> &str {
    text(p, "/status/phase")
}

fn node_of(p: &Value) -> &str {
    text(p, "/spec/nodeName")
}

fn image_of(template_owner: &Value) -> &str {
    text(template_owner, "/spec/template/spec/containers/0/image")
}

fn summary(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {} ready={} deleting={}",
                name(p),
                phase(p),
                is_ready(p),
                !live(p)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

async fn pods(s: &TestServer, selector: &str) -> Vec<Value> {
    items(&list(s, PODS, selector).await)
}

/// `e2epod.VerifyPodsRunning`: `n` live pods labelled `selector`, all of them running.
async fn pods_running(s: &TestServer, selector: &str, n: usize) -> Vec<Value> {
    eventually(60, &format!("{n} pods {selector} running"), || async {
        let live: Vec<Value> = pods(s, selector).await.into_iter().filter(live).collect();
        if live.len() == n && live.iter().all(|p| phase(p) == "Running") {
            Ok(live)
        } else {
            Err(summary(&live))
        }
    })
    .await
}

async fn pod_gone(s: &TestServer, name: &str) {
    eventually(60, &format!("pod {name} is gone"), || async {
        match s.get(&format!("{PODS}/{name}")).await {
            (404, _) => Ok(()),
            (_, p) => Err(p["status"].to_string()),
        }
    })
    .await;
}

/// A bare pod labelled `labels` whose container is `name` of `image`.
fn pod(name: &str, labels: Value, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [runs(name, image)]},
    })
}

/// Updates a pod with `change`, again on a conflict (`PodClient.Update`).
async fn update_pod(s: &TestServer, name: &str, change: impl Fn(&mut Value)) -> Value {
    update(s, &format!("{PODS}/{name}"), change).await
}

/// The readiness probe standing for httpd's `/index.html` one (`setHTTPProbe`): ready
/// while `dir` has no `broken-<pod uid>` file.
fn set_probe(template_owner: &mut Value, dir: &Path) {
    let c = &mut template_owner["spec"]["template"]["spec"]["containers"][0];
    c["env"] =
        json!([{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]);
    c["readinessProbe"] = json!({
        "exec": {"command": ["sh", "-c", format!("test ! -e {}/broken-$POD_UID", dir.display())]},
        "periodSeconds": 1, "successThreshold": 1, "failureThreshold": 1,
    });
}

/// `breakPodHTTPProbe`: the pod's probe fails from now on.
fn break_probe(dir: &Path, pod: &Value) {
    std::fs::write(dir.join(format!("broken-{}", uid(pod))), "").unwrap();
}

/// `restorePodHTTPProbe`.
fn restore_probe(dir: &Path, pod: &Value) {
    let _ = std::fs::remove_file(dir.join(format!("broken-{}", uid(pod))));
}

/// `json.Marshal(autoscalingv1.Scale{Spec: {Replicas: n}})`, the body upstream's tests
/// patch a scale subresource with.
fn scale_patch(n: i64) -> Value {
    json!({"metadata": {"creationTimestamp": null}, "spec": {"replicas": n}, "status": {"replicas": 0}})
}

/// The scale steps the Deployment, ReplicaSet and StatefulSet tests share: "getting scale
/// subresource" (1 of 1), "updating a scale subresource" (to 2, unconditionally) and
/// "Patch a scale subresource" (to 4), each seen in the object's `spec.replicas`.
async fn scale_round_trip(s: &TestServer, path: &str) {
    let scale = read(s, &format!("{path}/scale")).await;
    assert_eq!(scale["kind"], "Scale", "{scale}");
    assert_eq!(int(&scale, "/spec/replicas"), 1, "{scale}");
    assert_eq!(int(&scale, "/status/replicas"), 1, "{scale}");
    let mut put = scale.clone();
    put["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    put["spec"]["replicas"] = json!(2);
    let result = replace(s, &format!("{path}/scale"), put).await;
    assert_eq!(int(&result, "/spec/replicas"), 2, "{result}");
    assert_eq!(int(&read(s, path).await, "/spec/replicas"), 2);
    patch(s, &format!("{path}/scale"), STRATEGIC, scale_patch(4)).await;
    assert_eq!(int(&read(s, path).await, "/spec/replicas"), 4);
}

fn has_e2e_condition(o: &Value) -> bool {
    o["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "StatusUpdate"
                && c["reason"] == "E2E"
                && c["message"] == "Set from e2e test"
        })
    })
}

/// The status steps the workload kinds share: "Getting /status", "updating the … Status"
/// (a `StatusUpdate` condition appended, as the typed client writes it), "watching for the
/// … status to be updated", "patching the … Status" with `patch` and "watching for the …
/// status to be patched", both watches from `list_rv` as upstream's.
async fn status_round_trip(
    s: &TestServer,
    collection: &str,
    obj: &str,
    selector: &str,
    list_rv: &str,
    condition: Value,
    patch_body: Value,
) {
    let path = format!("{collection}/{obj}");
    let got = read(s, &format!("{path}/status")).await;
    assert_eq!(name(&got), obj, "{got}");
    let updated = update_at(s, &path, &format!("{path}/status"), |o| {
        if !o["status"]["conditions"].is_array() {
            o["status"]["conditions"] = json!([]);
        }
        o["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(condition.clone());
    })
    .await;
    assert!(has_e2e_condition(&updated), "{}", updated["status"]);
    let found = |e: &Value| {
        e["object"]["metadata"]["name"] == obj && e["object"]["metadata"]["namespace"] == "default"
    };
    until_from(
        s,
        collection,
        &by_label(selector),
        list_rv,
        60,
        "the status updated",
        |e| found(e) && has_e2e_condition(&e["object"]),
    )
    .await;
    patch(s, &format!("{path}/status"), MERGE, patch_body).await;
    until_from(
        s,
        collection,
        &by_label(selector),
        list_rv,
        60,
        "the status patched",
        |e| found(e) && condition_in(&e["object"], "StatusPatched"),
    )
    .await;
}

fn condition_in(o: &Value, kind: &str) -> bool {
    condition(o, kind).is_some()
}

// ---------------------------------------------------------------------------------------
// Deployments and ReplicaSets.

/// `e2edeployment.NewDeployment`.
fn deployment(
    name: &str,
    replicas: i64,
    labels: Value,
    container: &str,
    image: &str,
    strategy: &str,
) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": strategy},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [runs(container, image)]},
            },
        },
    })
}

/// `newRS` of `replica_set.go`.
fn replica_set(name: &str, replicas: i64, labels: Value, container: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "replicas": replicas,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [runs(container, image)]},
            },
        },
    })
}

/// The Deployment's ReplicaSets: the new one (its template, hash aside) and the old ones
/// (`testutil.GetAllReplicaSets`).
async fn replica_sets_of(s: &TestServer, d: &Value) -> (Option<Value>, Vec<Value>) {
    let owned: Vec<Value> = items(&list(s, RSS, &selector_of(d)).await)
        .into_iter()
        .filter(|rs| controlled_by(rs, d))
        .collect();
    let (new, old): (Vec<Value>, Vec<Value>) = owned.into_iter().partition(|rs| {
        berth::types::same_template_ignoring_hash(&rs["spec"]["template"], &d["spec"]["template"])
    });
    (new.into_iter().next(), old)
}

const REVISION: &str = "deployment.kubernetes.io/revision";

/// `WaitForDeploymentRevisionAndImage`.
async fn wait_revision_and_image(s: &TestServer, d: &str, revision: &str, image: &str) {
    eventually(
        60,
        &format!("{d} at revision {revision} of {image}"),
        || async {
            let dep = read(s, &format!("{DEPLOYS}/{d}")).await;
            let (new, _) = replica_sets_of(s, &dep).await;
            let Some(rs) = new else {
                return Err("no new replica set".to_string());
            };
            let ok = annotation(&dep, REVISION) == revision
                && annotation(&rs, REVISION) == revision
                && image_of(&dep) == image
                && image_of(&rs) == image;
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "deployment {} {}, replica set {} {}",
                    annotation(&dep, REVISION),
                    image_of(&dep),
                    annotation(&rs, REVISION),
                    image_of(&rs)
                ))
            }
        },
    )
    .await;
}

/// `deploymentutil.DeploymentComplete`.
fn deployment_complete(d: &Value) -> bool {
    let want = int(d, "/spec/replicas");
    int(d, "/status/updatedReplicas") == want
        && int(d, "/status/replicas") == want
        && int(d, "/status/availableReplicas") == want
        && int(d, "/status/observedGeneration") >= int(d, "/metadata/generation")
}

/// `WaitForDeploymentComplete`.
async fn wait_complete(s: &TestServer, d: &str) -> Value {
    eventually(90, &format!("{d} complete"), || async {
        let dep = read(s, &format!("{DEPLOYS}/{d}")).await;
        if deployment_complete(&dep) {
            Ok(dep)
        } else {
            Err(dep["status"].to_string())
        }
    })
    .await
}

async fn wait_observed(s: &TestServer, d: &str, generation: i64) {
    eventually(
        60,
        &format!("{d} generation {generation} observed"),
        || async {
            let dep = read(s, &format!("{DEPLOYS}/{d}")).await;
            if int(&dep, "/status/observedGeneration") >= generation {
                Ok(())
            } else {
                Err(dep["status"].to_string())
            }
        },
    )
    .await;
}

/// A replica set's `spec.replicas` reaching `n` once its generation is observed
/// (`waitForReplicaSetTargetSpecReplicas`).
async fn wait_rs_spec_replicas(s: &TestServer, rs: &str, n: i64) -> Value {
    eventually(60, &format!("{rs} wants {n}"), || async {
        let r = read(s, &format!("{RSS}/{rs}")).await;
        if int(&r, "/status/observedGeneration") >= int(&r, "/metadata/generation")
            && int(&r, "/spec/replicas") == n
        {
            Ok(r)
        } else {
            Err(format!(
                "spec {} status {}",
                r["spec"]["replicas"], r["status"]
            ))
        }
    })
    .await
}

/// `waitForReplicaSetDesiredReplicas`: as many pods as wanted.
async fn wait_rs_desired(s: &TestServer, rs: &str) {
    eventually(60, &format!("{rs} has its replicas"), || async {
        let r = read(s, &format!("{RSS}/{rs}")).await;
        if int(&r, "/status/observedGeneration") >= int(&r, "/metadata/generation")
            && int(&r, "/status/replicas") == int(&r, "/spec/replicas")
        {
            Ok(())
        } else {
            Err(format!(
                "spec {} status {}",
                r["spec"]["replicas"], r["status"]
            ))
        }
    })
    .await;
}

fn ensure_replicas(rs: &Value, n: i64) {
    assert_eq!(int(rs, "/spec/replicas"), n, "{}", rs["spec"]);
    assert_eq!(int(rs, "/status/replicas"), n, "{}", rs["status"]);
}

// ---------------------------------------------------------------------------------------
// Deployment

/// [sig-apps] Deployment should run the lifecycle of a Deployment [Conformance]
#[tokio::test]
async fn deployment_should_run_the_lifecycle_of_a_deployment() {
    let s = cluster("ca-deploy-lifecycle").await;
    let static_sel = "test-deployment-static=true";
    let path = format!("{DEPLOYS}/test-deployment");
    let start = list(&s, &all_ns(DEPLOYS), static_sel).await;
    let rv0 = rv(&start);
    let ours = |o: &Value| {
        o["metadata"]["name"] == "test-deployment" && label(o, "test-deployment-static") == "true"
    };
    let watched = |what: &str| format!("deployment {what}");

    // creating a Deployment
    let labels = json!({"test-deployment-static": "true"});
    let mut d = deployment(
        "test-deployment",
        2,
        labels,
        "test-deployment",
        AGNHOST,
        "RollingUpdate",
    );
    d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(1);
    create(&s, DEPLOYS, d.clone()).await;
    let q = by_label(static_sel);
    until_from(&s, DEPLOYS, &q, &rv0, 30, &watched("added"), |e| {
        e["type"] == "ADDED" && ours(&e["object"])
    })
    .await;
    // waiting for all Replicas to be Ready
    until_from(&s, DEPLOYS, &q, &rv0, 60, &watched("ready"), |e| {
        ours(&e["object"]) && int(&e["object"], "/status/readyReplicas") == 2
    })
    .await;

    // patching the Deployment
    patch(
        &s,
        &path,
        STRATEGIC,
        json!({
            "metadata": {"labels": {"test-deployment": "patched"}},
            "spec": {"replicas": 1, "template": {"spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "test-deployment", "image": PAUSE}],
            }}},
        }),
    )
    .await;
    until_from(&s, DEPLOYS, &q, &rv0, 30, &watched("modified"), |e| {
        e["type"] == "MODIFIED" && ours(&e["object"])
    })
    .await;
    // waiting for Replicas to scale
    until_from(&s, DEPLOYS, &q, &rv0, 60, &watched("scaled to 1"), |e| {
        let o = &e["object"];
        ours(o)
            && int(o, "/status/readyReplicas") == 1
            && int(o, "/status/updatedReplicas") == 1
            && int(o, "/status/unavailableReplicas") == 0
            && image_of(o) == PAUSE
            && int(o, "/spec/template/spec/terminationGracePeriodSeconds") == 2
    })
    .await;

    // listing Deployments
    let found = items(&list(&s, &all_ns(DEPLOYS), static_sel).await)
        .iter()
        .any(|d| ours(d) && d["metadata"]["namespace"] == "default");
    assert!(found, "the Deployment is listed");

    // updating the Deployment: the typed object first created, without resourceVersion,
    // kind or apiVersion, as the dynamic client sends it
    let mut upd = d.clone();
    let o = upd.as_object_mut().unwrap();
    o.remove("apiVersion");
    o.remove("kind");
    upd["metadata"]["creationTimestamp"] = Value::Null;
    upd["metadata"]["labels"]["test-deployment"] = json!("updated");
    upd["spec"]["template"]["spec"]["containers"][0]["image"] = json!(HTTPD);
    upd["spec"]["replicas"] = json!(2);
    upd["status"] = json!({});
    replace(&s, &path, upd).await;
    until_from(&s, DEPLOYS, &q, &rv0, 30, &watched("modified"), |e| {
        e["type"] == "MODIFIED" && ours(&e["object"])
    })
    .await;

    // fetching the DeploymentStatus
    let st = read(&s, &format!("{path}/status")).await;
    assert_eq!(image_of(&st), HTTPD, "failed to update image");
    assert_eq!(
        label(&st, "test-deployment"),
        "updated",
        "failed to update labels"
    );
    until_from(&s, DEPLOYS, &q, &rv0, 60, &watched("updated"), |e| {
        let o = &e["object"];
        ours(o)
            && int(o, "/status/readyReplicas") == 2
            && int(o, "/status/updatedReplicas") == 2
            && int(o, "/status/unavailableReplicas") == 0
    })
    .await;

    // patching the DeploymentStatus: the labels of a status write are not the status's
    patch(
        &s,
        &format!("{path}/status"),
        STRATEGIC,
        json!({
            "metadata": {"labels": {"test-deployment": "patched-status"}},
            "status": {"readyReplicas": 0, "availableReplicas": 0},
        }),
    )
    .await;
    until_from(&s, DEPLOYS, &q, &rv0, 30, &watched("modified"), |e| {
        e["type"] == "MODIFIED" && ours(&e["object"])
    })
    .await;
    let st = read(&s, &format!("{path}/status")).await;
    assert_eq!(image_of(&st), HTTPD, "failed to update image");
    assert_eq!(
        label(&st, "test-deployment"),
        "updated",
        "failed to update labels"
    );
    until_from(&s, DEPLOYS, &q, &rv0, 60, &watched("ready again"), |e| {
        let o = &e["object"];
        ours(o)
            && int(o, "/status/readyReplicas") == 2
            && int(o, "/status/updatedReplicas") == 2
            && int(o, "/status/unavailableReplicas") == 0
            && image_of(o) == HTTPD
    })
    .await;

    // deleting the Deployment
    delete_collection(&s, DEPLOYS, static_sel, json!({"gracePeriodSeconds": 1})).await;
    until_from(&s, DEPLOYS, &q, &rv0, 60, &watched("deleted"), |e| {
        e["type"] == "DELETED" && ours(&e["object"])
    })
    .await;
}

/// [sig-apps] Deployment should validate Deployment Status endpoints [Conformance]
#[tokio::test]
async fn deployment_should_validate_deployment_status_endpoints() {
    let s = cluster("ca-deploy-status").await;
    let d_name = format!("test-deployment-{}", rand5());
    let selector = "e2e=testing";
    let start = list(&s, &all_ns(DEPLOYS), selector).await;

    // creating a Deployment
    let labels = json!({"name": "httpd", "e2e": "testing"});
    create(
        &s,
        DEPLOYS,
        deployment(&d_name, 1, labels, "httpd", HTTPD, "RollingUpdate"),
    )
    .await;
    wait_revision_and_image(&s, &d_name, "1", HTTPD).await;
    wait_complete(&s, &d_name).await;

    status_round_trip(
        &s,
        DEPLOYS,
        &d_name,
        selector,
        &rv(&start),
        json!({"type": "StatusUpdate", "status": "True", "lastUpdateTime": null,
               "lastTransitionTime": null, "reason": "E2E", "message": "Set from e2e test"}),
        json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
    )
    .await;
}

/// [sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]
#[tokio::test]
async fn deployment_rolling_update_deployment_should_delete_old_pods_and_create_new_ones() {
    let s = cluster("ca-deploy-rolling").await;
    // a replica set to be adopted, at a revision of its own
    let rs_labels = json!({"name": "sample-pod", "pod": "httpd"});
    let mut rs = replica_set(
        "test-rolling-update-controller",
        1,
        rs_labels,
        "httpd",
        HTTPD,
    );
    rs["metadata"]["annotations"] = json!({REVISION: "3546343826724305832"});
    create(&s, RSS, rs).await;
    pods_running(&s, "name=sample-pod", 1).await;

    // a deployment to delete the webserver pods and bring up agnhost ones
    let d = deployment(
        "test-rolling-update-deployment",
        1,
        json!({"name": "sample-pod"}),
        "agnhost",
        AGNHOST,
        "RollingUpdate",
    );
    create(&s, DEPLOYS, d).await;
    // the next revision from the one the adopted replica set has
    wait_revision_and_image(
        &s,
        "test-rolling-update-deployment",
        "3546343826724305833",
        AGNHOST,
    )
    .await;
    let dep = wait_complete(&s, "test-rolling-update-deployment").await;
    // one old replica set: the one adopted
    let (_, old) = replica_sets_of(&s, &dep).await;
    assert_eq!(names(&old), ["test-rolling-update-controller"]);
}

/// [sig-apps] Deployment RecreateDeployment should delete old pods and create new ones [Conformance]
#[tokio::test]
async fn deployment_recreate_deployment_should_delete_old_pods_and_create_new_ones() {
    let s = cluster("ca-deploy-recreate").await;
    let name = "test-recreate-deployment";
    let d = deployment(
        name,
        1,
        json!({"name": "sample-pod-3"}),
        "agnhost",
        AGNHOST,
        "Recreate",
    );
    create(&s, DEPLOYS, d).await;
    wait_revision_and_image(&s, name, "1", AGNHOST).await;
    wait_complete(&s, name).await;

    // a new rollout: webserver pods instead of agnhost ones
    let updated = update(&s, &format!("{DEPLOYS}/{name}"), |d| {
        let c = &mut d["spec"]["template"]["spec"]["containers"][0];
        c["name"] = json!("httpd");
        c["image"] = json!(HTTPD);
    })
    .await;
    // watchRecreateDeployment: new pods never run alongside old ones
    let mut w = watch_from(
        &s,
        DEPLOYS,
        &by_field(&format!("metadata.name={name}")),
        &rv(&updated),
    )
    .await;
    let mut broken = None;
    until(&mut w, 120, "the recreate rollout done", |e| {
        let d = &e["object"];
        let (updated, replicas) = (
            int(d, "/status/updatedReplicas"),
            int(d, "/status/replicas"),
        );
        if updated > 0 && replicas != updated && broken.is_none() {
            broken = Some(d["status"].clone());
        }
        int(d, "/spec/replicas") == replicas
            && int(d, "/spec/replicas") == updated
            && int(d, "/metadata/generation") <= int(d, "/status/observedGeneration")
    })
    .await;
    assert_eq!(broken, None, "new pods ran alongside old pods");
}

/// [sig-apps] Deployment deployment should delete old replica sets [Conformance]
#[tokio::test]
async fn deployment_deployment_should_delete_old_replica_sets() {
    let s = cluster("ca-deploy-cleanup").await;
    let rs_labels = json!({"name": "cleanup-pod", "pod": "httpd"});
    create(
        &s,
        RSS,
        replica_set("test-cleanup-controller", 1, rs_labels, "httpd", HTTPD),
    )
    .await;
    pods_running(&s, "name=cleanup-pod", 1).await;

    // one pod only is made from now on, the agnhost one: the old replica set makes none
    // when the deployment adds the pod-template-hash label to its selector
    let all = read(&s, PODS).await;
    let mut w = watch_from(&s, PODS, "", &rv(&all)).await;
    let added = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let seen = added.clone();
    let watcher = tokio::spawn(async move {
        loop {
            let e = w.next_change().await;
            if e["type"] == "ADDED" {
                seen.lock().unwrap().push(e["object"].clone());
            }
        }
    });
    let mut d = deployment(
        "test-cleanup-deployment",
        1,
        json!({"name": "cleanup-pod"}),
        "agnhost",
        AGNHOST,
        "RollingUpdate",
    );
    d["spec"]["revisionHistoryLimit"] = json!(0);
    create(&s, DEPLOYS, d).await;

    // waiting for the deployment's history to be cleaned up
    eventually(60, "no old replica sets", || async {
        let dep = read(&s, &format!("{DEPLOYS}/test-cleanup-deployment")).await;
        let (_, old) = replica_sets_of(&s, &dep).await;
        if old.is_empty() {
            Ok(())
        } else {
            Err(format!("{:?}", names(&old)))
        }
    })
    .await;
    eventually(30, "the new pod seen made", || async {
        let n = added.lock().unwrap().len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    watcher.abort();
    let added = added.lock().unwrap().clone();
    assert_eq!(added.len(), 1, "only one pod made: {}", summary(&added));
    assert_eq!(added[0]["spec"]["containers"][0]["name"], "agnhost");
}

/// [sig-apps] Deployment deployment should support rollover [Conformance]
///
/// The image that cannot be pulled is [`MISSING`]; minReadySeconds is 2 rather than 10.
#[tokio::test]
async fn deployment_deployment_should_support_rollover() {
    let s = cluster("ca-deploy-rollover").await;
    let rs_labels = json!({"name": "rollover-pod", "pod": "httpd"});
    create(
        &s,
        RSS,
        replica_set("test-rollover-controller", 1, rs_labels, "httpd", HTTPD),
    )
    .await;
    pods_running(&s, "name=rollover-pod", 1).await;
    // the replica set ready before it is adopted
    eventually(60, "the replica set ready", || async {
        let rs = read(&s, &format!("{RSS}/test-rollover-controller")).await;
        if int(&rs, "/status/readyReplicas") == int(&rs, "/spec/replicas") {
            Ok(())
        } else {
            Err(rs["status"].to_string())
        }
    })
    .await;

    // a deployment that cannot finish: its image does not exist
    let d_name = "test-rollover-deployment";
    let stuck = "gcr.io/google_samples/gb-redisslave:nonexistent";
    let mut d = deployment(
        d_name,
        1,
        json!({"name": "rollover-pod"}),
        "redis-slave",
        stuck,
        "RollingUpdate",
    );
    d["spec"]["template"]["spec"]["containers"][0]["command"] = json!([MISSING]);
    d["spec"]["strategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 1});
    d["spec"]["minReadySeconds"] = json!(2);
    let created = create(&s, DEPLOYS, d).await;
    let generation = int(&created, "/metadata/generation");
    // it scales up and down: updatedReplicas >= 1
    eventually(60, "updated replicas", || async {
        let dep = read(&s, &format!("{DEPLOYS}/{d_name}")).await;
        if int(&dep, "/status/observedGeneration") >= generation
            && int(&dep, "/status/updatedReplicas") >= 1
        {
            Ok(())
        } else {
            Err(dep["status"].to_string())
        }
    })
    .await;
    wait_revision_and_image(&s, d_name, "1", stuck).await;
    let old_rs = read(&s, &format!("{RSS}/test-rollover-controller")).await;
    ensure_replicas(&old_rs, 1);
    let dep = read(&s, &format!("{DEPLOYS}/{d_name}")).await;
    let first_new = replica_sets_of(&s, &dep)
        .await
        .0
        .expect("the new replica set");
    let first_new = eventually(30, "the new replica set made its pod", || async {
        let rs = read(&s, &format!("{RSS}/{}", name(&first_new))).await;
        if int(&rs, "/status/replicas") == 1 {
            Ok(rs)
        } else {
            Err(rs["status"].to_string())
        }
    })
    .await;
    ensure_replicas(&first_new, 1);

    // the deployment is stuck; a new image rolls over both replica sets
    let updated = update(&s, &format!("{DEPLOYS}/{d_name}"), |d| {
        let c = &mut d["spec"]["template"]["spec"]["containers"][0];
        c["name"] = json!("agnhost");
        c["image"] = json!(AGNHOST);
        c["command"] = serve();
    })
    .await;
    wait_observed(&s, d_name, int(&updated, "/metadata/generation")).await;
    wait_revision_and_image(&s, d_name, "2", AGNHOST).await;
    wait_complete_and_check_rolling(&s, d_name).await;
    ensure_replicas(
        &read(&s, &format!("{RSS}/test-rollover-controller")).await,
        0,
    );
    ensure_replicas(&read(&s, &format!("{RSS}/{}", name(&first_new))).await, 0);
}

/// `WaitForDeploymentCompleteAndCheckRolling`: complete, and never more pods wanted than
/// replicas plus surge nor fewer available than replicas minus unavailable meanwhile.
async fn wait_complete_and_check_rolling(s: &TestServer, d: &str) {
    eventually(90, &format!("{d} complete, rolling"), || async {
        let dep = read(s, &format!("{DEPLOYS}/{d}")).await;
        if deployment_complete(&dep) {
            return Ok(());
        }
        let replicas = int(&dep, "/spec/replicas");
        let surge = int(&dep, "/spec/strategy/rollingUpdate/maxSurge");
        let unavailable = int(&dep, "/spec/strategy/rollingUpdate/maxUnavailable");
        let (new, old) = replica_sets_of(s, &dep).await;
        let total: i64 = old
            .iter()
            .chain(new.iter())
            .map(|rs| int(rs, "/spec/replicas"))
            .sum();
        assert!(
            total <= replicas + surge,
            "{total} pods wanted, more than {replicas} + {surge}"
        );
        let available = int(&dep, "/status/availableReplicas");
        assert!(
            available >= replicas - unavailable,
            "{available} available, fewer than {replicas} - {unavailable}"
        );
        Err(dep["status"].to_string())
    })
    .await;
}

/// [sig-apps] Deployment deployment should support proportional scaling [Conformance]
///
/// The image `webserver:404` is [`MISSING`].
#[tokio::test]
async fn deployment_deployment_should_support_proportional_scaling() {
    let s = cluster("ca-deploy-proportional").await;
    let d_name = "webserver-deployment";
    let mut d = deployment(
        d_name,
        10,
        json!({"name": "httpd"}),
        "httpd",
        HTTPD,
        "RollingUpdate",
    );
    d["spec"]["strategy"]["rollingUpdate"] = json!({"maxSurge": 3, "maxUnavailable": 2});
    let created = create(&s, DEPLOYS, d).await;
    wait_observed(&s, d_name, int(&created, "/metadata/generation")).await;
    pods_running(&s, "name=httpd", 10).await;
    let dep = wait_complete(&s, d_name).await;
    let first = replica_sets_of(&s, &dep)
        .await
        .0
        .expect("the first replica set");
    let first = name(&first);

    // an image that does not exist blocks the new replica set: a partial rollout
    let updated = update(&s, &format!("{DEPLOYS}/{d_name}"), |d| {
        let c = &mut d["spec"]["template"]["spec"]["containers"][0];
        c["image"] = json!("webserver:404");
        c["command"] = json!([MISSING]);
    })
    .await;
    wait_observed(&s, d_name, int(&updated, "/metadata/generation")).await;
    // the first rollout's replica set keeps replicas - maxUnavailable = 8 available
    eventually(60, "8 available in the first replica set", || async {
        let rs = read(&s, &format!("{RSS}/{first}")).await;
        if int(&rs, "/status/availableReplicas") == 8 {
            Ok(())
        } else {
            Err(rs["status"].to_string())
        }
    })
    .await;
    wait_rs_spec_replicas(&s, &first, 8).await;
    wait_rs_desired(&s, &first).await;
    // the second: replicas + maxSurge - 8 = 5 wanted, none available
    let dep = read(&s, &format!("{DEPLOYS}/{d_name}")).await;
    let second = replica_sets_of(&s, &dep)
        .await
        .0
        .expect("the second replica set");
    let second = name(&second);
    assert_eq!(
        int(
            &read(&s, &format!("{RSS}/{second}")).await,
            "/status/availableReplicas"
        ),
        0
    );
    wait_rs_spec_replicas(&s, &second, 5).await;
    wait_rs_desired(&s, &second).await;
    let dep = read(&s, &format!("{DEPLOYS}/{d_name}")).await;
    assert!(
        int(&dep, "/status/availableReplicas") >= 8,
        "{}",
        dep["status"]
    );

    // scaled to 30: 8 + 20 * 8/13 = 20 and 5 + 20 * 5/13 = 13
    update(&s, &format!("{DEPLOYS}/{d_name}"), |d| {
        d["spec"]["replicas"] = json!(30)
    })
    .await;
    wait_rs_spec_replicas(&s, &first, 20).await;
    wait_rs_spec_replicas(&s, &second, 13).await;
}

/// [sig-apps] Deployment Deployment should have a working scale subresource [Conformance]
#[tokio::test]
async fn deployment_deployment_should_have_a_working_scale_subresource() {
    let s = cluster("ca-deploy-scale").await;
    let name = "test-new-deployment";
    create(
        &s,
        DEPLOYS,
        deployment(
            name,
            1,
            json!({"name": "httpd"}),
            "httpd",
            HTTPD,
            "RollingUpdate",
        ),
    )
    .await;
    wait_revision_and_image(&s, name, "1", HTTPD).await;
    wait_complete(&s, name).await;
    scale_round_trip(&s, &format!("{DEPLOYS}/{name}")).await;
}

// ---------------------------------------------------------------------------------------
// ReplicaSet

/// Waits until pod `pod` is controlled by `owner` or gone (adopted, or replaced).
async fn adopted_or_deleted(s: &TestServer, pod: &str, owner: &Value) {
    eventually(60, &format!("pod {pod} adopted"), || async {
        match s.get(&format!("{PODS}/{pod}")).await {
            (404, _) => Ok(()),
            (_, p) if controlled_by(&p, owner) => Ok(()),
            (_, p) => Err(p["metadata"]["ownerReferences"].to_string()),
        }
    })
    .await;
}

async fn released(s: &TestServer, pod: &str, owner: &Value) {
    pod_until(s, pod, &format!("pod {pod} released"), |p| {
        !controlled_by(p, owner)
    })
    .await;
}

/// `e2epod.PodsCreated`: `n` live pods labelled `name=<name>`.
async fn pods_created(s: &TestServer, name: &str, n: usize) -> Vec<Value> {
    eventually(60, &format!("{n} pods of {name}"), || async {
        let live: Vec<Value> = pods(s, &format!("name={name}"))
            .await
            .into_iter()
            .filter(live)
            .collect();
        if live.len() == n {
            Ok(live)
        } else {
            Err(summary(&live))
        }
    })
    .await
}

/// [sig-apps] ReplicaSet should adopt matching pods on creation and release no longer matching pods [Conformance]
#[tokio::test]
async fn replica_set_should_adopt_matching_pods_on_creation_and_release_no_longer_matching_pods() {
    let s = cluster("ca-rs-adopt").await;
    let rs_name = "pod-adoption-release";
    // a Pod with a 'name' label is created
    create(&s, PODS, pod(rs_name, json!({"name": rs_name}), HTTPD)).await;
    pod_until(&s, rs_name, "the pod running", |p| phase(p) == "Running").await;
    // a replicaset with a matching selector is created
    let rs = create(
        &s,
        RSS,
        replica_set(rs_name, 1, json!({"name": rs_name}), rs_name, HTTPD),
    )
    .await;
    adopted_or_deleted(&s, rs_name, &rs).await;
    // the matched label of one of its pods changes
    let p = name(&pods_created(&s, rs_name, 1).await[0]);
    update_pod(&s, &p, |p| {
        p["metadata"]["labels"] = json!({"name": "not-matching-name"})
    })
    .await;
    released(&s, &p, &rs).await;
}

/// [sig-apps] ReplicaSet Replicaset should have a working scale subresource [Conformance]
#[tokio::test]
async fn replica_set_replicaset_should_have_a_working_scale_subresource() {
    let s = cluster("ca-rs-scale").await;
    let labels = json!({"name": "sample-pod", "pod": "httpd"});
    create(&s, RSS, replica_set("test-rs", 1, labels, "httpd", HTTPD)).await;
    pods_running(&s, "name=sample-pod", 1).await;
    eventually(30, "the replica set counts its pod", || async {
        let rs = read(&s, &format!("{RSS}/test-rs")).await;
        if int(&rs, "/status/replicas") == 1 {
            Ok(())
        } else {
            Err(rs["status"].to_string())
        }
    })
    .await;
    scale_round_trip(&s, &format!("{RSS}/test-rs")).await;
}

/// [sig-apps] ReplicaSet Replace and Patch tests [Conformance]
///
/// The container the patch adds (upstream: `pause`, by its image alone) has a command.
#[tokio::test]
async fn replica_set_replace_and_patch_tests() {
    let s = cluster("ca-rs-replace").await;
    let selector = "test-rs=patched";
    let start = list(&s, &all_ns(RSS), selector).await;
    let labels = json!({"name": "sample-pod", "pod": "httpd"});
    create(&s, RSS, replica_set("test-rs", 1, labels, "httpd", HTTPD)).await;
    pods_running(&s, "name=sample-pod", 1).await;

    // scaling up the replicaset
    update(&s, &format!("{RSS}/test-rs"), |rs| {
        rs["spec"]["replicas"] = json!(2)
    })
    .await;
    // patching the ReplicaSet: a container named after it, which goes first
    patch(
        &s,
        &format!("{RSS}/test-rs"),
        STRATEGIC,
        json!({
            "metadata": {"labels": {"test-rs": "patched"}},
            "spec": {"replicas": 3, "template": {"spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "test-rs", "image": PAUSE, "command": serve()}],
            }}},
        }),
    )
    .await;
    until_from(
        &s,
        RSS,
        &by_label(selector),
        &rv(&start),
        60,
        "the replica set patched and ready",
        |e| {
            let o = &e["object"];
            name(o) == "test-rs"
                && label(o, "test-rs") == "patched"
                && int(o, "/status/readyReplicas") == 3
                && int(o, "/status/availableReplicas") == 3
                && image_of(o) == PAUSE
                && int(o, "/spec/template/spec/terminationGracePeriodSeconds") == 0
        },
    )
    .await;
}

/// [sig-apps] ReplicaSet should list and delete a collection of ReplicaSets [Conformance]
#[tokio::test]
async fn replica_set_should_list_and_delete_a_collection_of_replica_sets() {
    let s = cluster("ca-rs-collection").await;
    let e2e = rand5();
    let labels = json!({"name": "sample-pod", "pod": "httpd", "e2e": e2e});
    create(&s, RSS, replica_set("test-rs", 3, labels, "httpd", HTTPD)).await;
    pods_running(&s, "name=sample-pod", 3).await;
    read(&s, &format!("{RSS}/test-rs")).await;
    let selector = format!("e2e={e2e}");
    assert_eq!(
        items(&list(&s, &all_ns(RSS), &selector).await).len(),
        1,
        "filtered list"
    );
    delete_collection(&s, RSS, &selector, json!({"gracePeriodSeconds": 1})).await;
    assert!(
        items(&list(&s, &all_ns(RSS), &selector).await).is_empty(),
        "no replica sets left"
    );
}

/// [sig-apps] ReplicaSet should validate Replicaset Status endpoints [Conformance]
#[tokio::test]
async fn replica_set_should_validate_replicaset_status_endpoints() {
    let s = cluster("ca-rs-status").await;
    let selector = "name=sample-pod,pod=httpd";
    let start = list(&s, &all_ns(RSS), selector).await;
    let labels = json!({"name": "sample-pod", "pod": "httpd"});
    create(&s, RSS, replica_set("test-rs", 1, labels, "httpd", HTTPD)).await;
    pods_running(&s, "name=sample-pod", 1).await;
    status_round_trip(
        &s,
        RSS,
        "test-rs",
        selector,
        &rv(&start),
        json!({"type": "StatusUpdate", "status": "True", "lastTransitionTime": null,
               "reason": "E2E", "message": "Set from e2e test"}),
        json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// ReplicationController

/// `newRC` of `rc.go`.
fn replication_controller(
    name: &str,
    replicas: i64,
    labels: Value,
    container: &str,
    image: &str,
) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [runs(container, image)]},
            },
        },
    })
}

/// [sig-apps] ReplicationController should adopt matching pods on creation [Conformance]
#[tokio::test]
async fn replication_controller_should_adopt_matching_pods_on_creation() {
    let s = cluster("ca-rc-adopt").await;
    let rc_name = "pod-adoption";
    create(&s, PODS, pod(rc_name, json!({"name": rc_name}), HTTPD)).await;
    pod_until(&s, rc_name, "the pod running", |p| phase(p) == "Running").await;
    let mut rc = replication_controller(rc_name, 1, json!({"name": rc_name}), rc_name, HTTPD);
    rc["spec"]["selector"] = json!({"name": rc_name});
    let rc = create(&s, RCS, rc).await;
    adopted_or_deleted(&s, rc_name, &rc).await;
}

/// [sig-apps] ReplicationController should release no longer matching pods [Conformance]
#[tokio::test]
async fn replication_controller_should_release_no_longer_matching_pods() {
    let s = cluster("ca-rc-release").await;
    let rc_name = "pod-release";
    let mut rc = replication_controller(rc_name, 1, json!({"name": rc_name}), rc_name, HTTPD);
    rc["spec"]["selector"] = json!({"name": rc_name});
    let rc = create(&s, RCS, rc).await;
    let p = name(&pods_created(&s, rc_name, 1).await[0]);
    update_pod(&s, &p, |p| {
        p["metadata"]["labels"] = json!({"name": "not-matching-name"})
    })
    .await;
    released(&s, &p, &rc).await;
}

/// [sig-apps] ReplicationController should test the lifecycle of a ReplicationController [Conformance]
#[tokio::test]
async fn replication_controller_should_test_the_lifecycle_of_a_replication_controller() {
    let s = cluster("ca-rc-lifecycle").await;
    let selector = "test-rc-static=true";
    let path = format!("{RCS}/rc-test");
    let is_rc = |o: &Value| name(o) == "rc-test" && o["metadata"]["namespace"] == "default";
    // WatchEventSequenceVerifier: one watch from a list, the events of each step recorded
    let start = list(&s, RCS, selector).await;
    let mut w = watch_from(&s, RCS, &by_label(selector), &rv(&start)).await;
    let mut seen = Vec::new();

    // creating a ReplicationController
    create(
        &s,
        RCS,
        json!({
            "apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": "rc-test", "labels": {"test-rc-static": "true"}},
            "spec": {
                "replicas": 1,
                "selector": {"test-rc-static": "true"},
                "template": {
                    "metadata": {"name": "rc-test", "labels": {"test-rc-static": "true"}},
                    "spec": {"containers": [runs("rc-test", NGINX)]},
                },
            },
        }),
    )
    .await;
    let e = until(&mut w, 60, "rc added", |e| e["type"] == "ADDED").await;
    seen.push(e["type"].clone());
    // waiting for available Replicas
    until(&mut w, 60, "one ready replica", |e| {
        int(&e["object"], "/status/replicas") == 1
            && int(&e["object"], "/status/readyReplicas") == 1
    })
    .await;

    // patching ReplicationController
    let patched = patch(
        &s,
        &path,
        STRATEGIC,
        json!({"metadata": {"labels": {"test-rc": "patched"}}}),
    )
    .await;
    assert_eq!(label(&patched, "test-rc"), "patched", "failed to patch RC");
    let e = until(&mut w, 60, "rc modified", |e| e["type"] == "MODIFIED").await;
    seen.push(e["type"].clone());

    // patching ReplicationController status
    let st = patch(
        &s,
        &format!("{path}/status"),
        STRATEGIC,
        json!({"status": {"readyReplicas": 0, "availableReplicas": 0}}),
    )
    .await;
    assert_eq!(
        int(&st, "/status/readyReplicas"),
        0,
        "readyReplicas patched to 0"
    );
    let e = until(&mut w, 60, "rc modified", |e| e["type"] == "MODIFIED").await;
    seen.push(e["type"].clone());
    // waiting for available Replicas
    until(&mut w, 60, "one replica", |e| {
        int(&e["object"], "/status/replicas") == 1
    })
    .await;
    // fetching ReplicationController status
    let st = read(&s, &format!("{path}/status")).await;
    assert_eq!(int(&st, "/status/replicas"), 1);

    // patching ReplicationController scale
    patch(&s, &format!("{path}/scale"), STRATEGIC, scale_patch(2)).await;
    let e = until(&mut w, 60, "rc modified", |e| e["type"] == "MODIFIED").await;
    seen.push(e["type"].clone());
    // waiting for ReplicationController's scale to be the max amount
    until(&mut w, 60, "two ready replicas", |e| {
        let o = &e["object"];
        is_rc(o) && int(o, "/status/replicas") == 2 && int(o, "/status/readyReplicas") == 2
    })
    .await;

    // fetching ReplicationController; ensuring that it's patched
    let mut rc = read(&s, &path).await;
    assert_eq!(
        label(&rc, "test-rc"),
        "patched",
        "the label of the earlier patch"
    );
    // updating ReplicationController status
    rc["status"]["availableReplicas"] = json!(1);
    rc["status"]["readyReplicas"] = json!(1);
    replace(&s, &format!("{path}/status"), rc).await;
    let e = until(&mut w, 60, "rc modified", |e| e["type"] == "MODIFIED").await;
    seen.push(e["type"].clone());

    // listing all ReplicationControllers
    let rcs = items(&list(&s, &all_ns(RCS), selector).await);
    assert!(!rcs.is_empty(), "a ReplicationController listed");
    assert!(
        rcs.iter().any(|o| is_rc(o)
            && label(o, "test-rc-static") == "true"
            && label(o, "test-rc") == "patched"),
        "{rcs:?}"
    );

    // deleting ReplicationControllers by collection
    delete_collection(&s, RCS, selector, json!({})).await;
    let e = until(&mut w, 60, "rc deleted", |e| e["type"] == "DELETED").await;
    seen.push(e["type"].clone());
    assert_eq!(
        seen,
        [
            "ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"
        ]
    );
}

/// [sig-apps] ReplicationController should get and update a ReplicationController scale [Conformance]
#[tokio::test]
async fn replication_controller_should_get_and_update_a_replication_controller_scale() {
    let s = cluster("ca-rc-scale").await;
    let name = format!("e2e-rc-{}", rand5());
    let path = format!("{RCS}/{name}");
    create(
        &s,
        RCS,
        replication_controller(&name, 1, json!({"name": name}), "httpd", HTTPD),
    )
    .await;
    let replicas = |n: i64| {
        let path = path.clone();
        let s = &s;
        async move {
            eventually(60, &format!("{n} replicas"), || async {
                let rc = read(s, &path).await;
                if int(&rc, "/status/replicas") == n {
                    Ok(())
                } else {
                    Err(rc["status"].to_string())
                }
            })
            .await
        }
    };
    replicas(1).await;
    let mut scale = read(&s, &format!("{path}/scale")).await;
    assert_eq!(int(&scale, "/status/replicas"), 1, "{scale}");
    scale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    scale["spec"]["replicas"] = json!(2);
    replace(&s, &format!("{path}/scale"), scale).await;
    replicas(2).await;
}

/// [sig-apps] ReplicationController should surface a failure condition on a common issue like exceeded quota [Conformance]
#[tokio::test]
#[ignore = "berth serves no ResourceQuotas (no quota admission, no quota controller), so nothing limits the RC's pods and no ReplicaFailure condition is set"]
async fn replication_controller_should_surface_a_failure_condition_on_a_common_issue_like_exceeded_quota()
 {
    let s = cluster("ca-rc-quota").await;
    let name = "condition-test";
    // a quota that allows only two pods to run in the namespace
    create(
        &s,
        "/api/v1/namespaces/default/resourcequotas",
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
               "spec": {"hard": {"pods": "2"}}}),
    )
    .await;
    eventually(60, "the quota synced", || async {
        let q = read(
            &s,
            &format!("/api/v1/namespaces/default/resourcequotas/{name}"),
        )
        .await;
        if q["status"]["hard"]["pods"] == "2" {
            Ok(())
        } else {
            Err(q["status"].to_string())
        }
    })
    .await;
    // an rc that asks for more than the allowed pod quota
    let rc = create(
        &s,
        RCS,
        replication_controller(name, 3, json!({"name": name}), "httpd", HTTPD),
    )
    .await;
    let generation = int(&rc, "/metadata/generation");
    eventually(60, "the ReplicaFailure condition", || async {
        let rc = read(&s, &format!("{RCS}/{name}")).await;
        if int(&rc, "/status/observedGeneration") >= generation
            && condition_in(&rc, "ReplicaFailure")
        {
            Ok(())
        } else {
            Err(rc["status"].to_string())
        }
    })
    .await;
    // scaling down to satisfy the quota
    let rc = update(&s, &format!("{RCS}/{name}"), |rc| {
        rc["spec"]["replicas"] = json!(2)
    })
    .await;
    let generation = int(&rc, "/metadata/generation");
    eventually(60, "no ReplicaFailure condition", || async {
        let rc = read(&s, &format!("{RCS}/{name}")).await;
        if int(&rc, "/status/observedGeneration") >= generation
            && !condition_in(&rc, "ReplicaFailure")
        {
            Ok(())
        } else {
            Err(rc["status"].to_string())
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// DaemonSet

const DS_NAME_LABEL: &str = "daemonset-name";
const DS_COLOR_LABEL: &str = "daemonset-color";
const DS_HASH: &str = "controller-revision-hash";

/// `newDaemonSetWithLabel` (`e2edaemonset.NewDaemonSet`): container `app` on port 9376.
fn daemon_set_with_label(name: &str, image: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "app", "image": image, "command": serve(),
                                    "ports": [{"containerPort": 9376}], "securityContext": {}}],
                    "securityContext": {},
                },
            },
        },
    })
}

/// `newDaemonSet`: the same without labels of its own.
fn daemon_set(name: &str, image: &str, labels: Value) -> Value {
    let mut ds = daemon_set_with_label(name, image, labels);
    ds["metadata"].as_object_mut().unwrap().remove("labels");
    ds
}

/// The nodes a pod of `ds` should run on (`e2edaemonset.SchedulableNodes`): those its node
/// selector matches that carry no taint it does not tolerate (a daemon pod tolerates the
/// node conditions' `node.kubernetes.io/` ones).
async fn schedulable_nodes(s: &TestServer, ds: &Value) -> Vec<String> {
    let selector = ds["spec"]["template"]["spec"]["nodeSelector"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<String> = items(&read(s, "/api/v1/nodes").await)
        .iter()
        .filter(|n| {
            selector
                .iter()
                .all(|(k, v)| n["metadata"]["labels"][k] == *v)
        })
        .filter(|n| {
            n["spec"]["taints"].as_array().is_none_or(|ts| {
                ts.iter().all(|t| {
                    t["effect"] == "PreferNoSchedule"
                        || t["key"]
                            .as_str()
                            .is_some_and(|k| k.starts_with("node.kubernetes.io/"))
                })
            })
        })
        .map(name)
        .collect();
    out.sort();
    out
}

/// `checkDaemonPodOnNodes`: exactly one available pod of `ds` on each of `nodes`, and
/// none on any other node.
async fn daemon_pods_on(s: &TestServer, ds: &Value, nodes: &[String]) -> Result<(), String> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for p in items(&read(s, PODS).await) {
        if controlled_by(&p, ds) && live(&p) && is_ready(&p) {
            *count.entry(node_of(&p).to_string()).or_default() += 1;
        }
    }
    let ok = nodes.iter().all(|n| count.get(n) == Some(&1)) && count.len() == nodes.len();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "available pods per node {count:?}, want one on each of {nodes:?}"
        ))
    }
}

async fn wait_daemon_pods_on(s: &TestServer, ds: &str, nodes: &[&str]) {
    let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    eventually(60, &format!("{ds} runs on {nodes:?}"), || async {
        let d = read(s, &format!("{DSS}/{ds}")).await;
        daemon_pods_on(s, &d, &nodes).await
    })
    .await;
}

/// `checkRunningOnAllNodes`.
async fn wait_running_on_all_nodes(s: &TestServer, ds: &str) {
    eventually(60, &format!("{ds} runs on every node"), || async {
        let d = read(s, &format!("{DSS}/{ds}")).await;
        let nodes = schedulable_nodes(s, &d).await;
        if nodes.is_empty() {
            return Err("no nodes".into());
        }
        daemon_pods_on(s, &d, &nodes).await
    })
    .await;
}

/// `e2edaemonset.CheckDaemonStatus`: as many scheduled and ready as desired.
async fn check_daemon_status(s: &TestServer, ds: &str) {
    eventually(30, &format!("{ds} status"), || async {
        let d = read(s, &format!("{DSS}/{ds}")).await;
        let desired = int(&d, "/status/desiredNumberScheduled");
        if desired == int(&d, "/status/currentNumberScheduled")
            && desired == int(&d, "/status/numberReady")
        {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
}

/// `setDaemonSetNodeLabels`: the node's `daemonset-` labels replaced by `labels`.
async fn set_daemon_set_node_labels(s: &TestServer, node: &str, labels: Value) -> Value {
    update(s, &format!("/api/v1/nodes/{node}"), |n| {
        let mut l = n["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        l.retain(|k, _| !k.starts_with("daemonset-"));
        for (k, v) in labels.as_object().unwrap() {
            l.insert(k.clone(), v.clone());
        }
        n["metadata"]["labels"] = Value::Object(l);
    })
    .await
}

fn daemon_set_labels(node: &Value) -> usize {
    node["metadata"]["labels"].as_object().map_or(0, |l| {
        l.keys().filter(|k| k.starts_with("daemonset-")).count()
    })
}

/// The daemon set's ControllerRevisions, by its labels.
async fn daemon_histories(s: &TestServer, selector: &str) -> Vec<Value> {
    items(&list(s, REVISIONS, selector).await)
}

/// `waitForHistoryCreated`.
async fn wait_histories(s: &TestServer, selector: &str, n: usize) {
    eventually(60, &format!("{n} revisions"), || async {
        let h = daemon_histories(s, selector).await;
        if h.len() == n {
            Ok(())
        } else {
            Err(format!("{:?}", names(&h)))
        }
    })
    .await;
}

/// `curHistory`: the one revision holding the daemon set's template.
async fn current_history(s: &TestServer, selector: &str, ds: &Value) -> Value {
    let data = berth::controller::history::data_of(ds);
    let mut cur: Vec<Value> = daemon_histories(s, selector)
        .await
        .into_iter()
        .filter(|h| h["data"] == data)
        .collect();
    assert_eq!(cur.len(), 1, "one current revision");
    cur.remove(0)
}

/// `checkDaemonSetPodsLabels`: every pod carries `hash`.
async fn check_pods_hash(s: &TestServer, selector: &str, hash: &str) {
    let ps = pods(s, selector).await;
    assert!(!ps.is_empty());
    for p in &ps {
        assert_eq!(label(p, DS_HASH), hash, "{}", name(p));
    }
}

/// `checkDaemonPodsImageAndAvailability`: every node runs an updated pod, and never more
/// than `max_unavailable` pods unavailable.
async fn wait_daemon_image(
    s: &TestServer,
    ds: &str,
    image: &str,
    max_unavailable: usize,
    fake: Option<&FakeNode<'_>>,
) {
    eventually(90, &format!("{ds} pods of {image} everywhere"), || async {
        if let Some(f) = fake {
            f.tick(s).await;
        }
        let d = read(s, &format!("{DSS}/{ds}")).await;
        let mut unavailable = 0;
        let mut updated: BTreeMap<String, usize> = BTreeMap::new();
        for p in items(&read(s, PODS).await) {
            if !live(&p) || !controlled_by(&p, &d) {
                continue;
            }
            if text(&p, "/spec/containers/0/image") == image {
                *updated.entry(node_of(&p).to_string()).or_default() += 1;
            }
            if !is_ready(&p) {
                unavailable += 1;
            }
        }
        assert!(
            unavailable <= max_unavailable,
            "{unavailable} pods unavailable, more than {max_unavailable}"
        );
        let nodes = schedulable_nodes(s, &d).await;
        if nodes.iter().all(|n| updated.contains_key(n)) {
            Ok(())
        } else {
            Err(format!(
                "updated pods per node {updated:?}, nodes {nodes:?}"
            ))
        }
    })
    .await;
}

/// The agent of a Node with no agent of its own, played by the test: terminating pods
/// bound to it are finished, and those of `ready_image` become Running and Ready.
struct FakeNode<'a> {
    node: &'a str,
    ready_image: &'a str,
}

impl FakeNode<'_> {
    async fn tick(&self, s: &TestServer) {
        for p in items(&read(s, PODS).await) {
            if node_of(&p) != self.node {
                continue;
            }
            if !live(&p) {
                let (code, out) = s
                    .delete(&format!("{PODS}/{}?gracePeriodSeconds=0", name(&p)))
                    .await;
                assert!(code == 200 || code == 404, "{out}");
            } else if !is_ready(&p) && text(&p, "/spec/containers/0/image") == self.ready_image {
                let (code, out) = s
                    .patch(
                        &format!("{PODS}/{}/status", name(&p)),
                        MERGE,
                        json!({"status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": berth::types::now()}
                        ]}}),
                    )
                    .await;
                assert!(code == 200 || code == 404, "{out}");
            }
        }
    }
}

/// [sig-apps] Daemon set [Serial] should run and stop simple daemon [Conformance]
#[tokio::test]
async fn daemon_set_should_run_and_stop_simple_daemon() {
    let s = cluster("ca-ds-simple").await;
    let labels = json!({DS_NAME_LABEL: "daemon-set"});
    create(&s, DSS, daemon_set("daemon-set", HTTPD, labels)).await;
    // daemon pods launch on every node of the cluster
    wait_running_on_all_nodes(&s, "daemon-set").await;
    check_daemon_status(&s, "daemon-set").await;
    // a daemon pod stopped is revived
    let p = pods(&s, "daemonset-name=daemon-set").await.remove(0);
    let (code, out) = s.delete(&format!("{PODS}/{}", name(&p))).await;
    assert_eq!(code, 200, "{out}");
    wait_running_on_all_nodes(&s, "daemon-set").await;
    let revived = pods(&s, "daemonset-name=daemon-set").await;
    assert!(
        revived.iter().any(|q| live(q) && uid(q) != uid(&p)),
        "{}",
        summary(&revived)
    );
}

/// [sig-apps] Daemon set [Serial] should run and stop complex daemon [Conformance]
#[tokio::test]
async fn daemon_set_should_run_and_stop_complex_daemon() {
    let node = "ca-ds-complex";
    let s = cluster(node).await;
    let mut ds = daemon_set("daemon-set", HTTPD, json!({DS_NAME_LABEL: "daemon-set"}));
    ds["spec"]["template"]["spec"]["nodeSelector"] = json!({DS_COLOR_LABEL: "blue"});
    create(&s, DSS, ds).await;
    // initially no daemon pods run on any node
    wait_daemon_pods_on(&s, "daemon-set", &[]).await;

    // the node labelled blue gets a daemon pod
    let blue = set_daemon_set_node_labels(&s, node, json!({DS_COLOR_LABEL: "blue"})).await;
    assert_eq!(daemon_set_labels(&blue), 1);
    wait_daemon_pods_on(&s, "daemon-set", &[node]).await;
    check_daemon_status(&s, "daemon-set").await;

    // the node labelled green loses it
    let green = set_daemon_set_node_labels(&s, node, json!({DS_COLOR_LABEL: "green"})).await;
    wait_daemon_pods_on(&s, "daemon-set", &[]).await;

    // the daemon set's node selector green, and its update strategy RollingUpdate
    patch(
        &s,
        &format!("{DSS}/daemon-set"),
        STRATEGIC,
        json!({"spec": {"template": {"spec": {"nodeSelector": {DS_COLOR_LABEL: label(&green, DS_COLOR_LABEL)}}},
                        "updateStrategy": {"type": "RollingUpdate"}}}),
    )
    .await;
    assert_eq!(daemon_set_labels(&green), 1);
    wait_daemon_pods_on(&s, "daemon-set", &[node]).await;
    check_daemon_status(&s, "daemon-set").await;
}

/// [sig-apps] Daemon set [Serial] should retry creating failed daemon pods [Conformance]
#[tokio::test]
async fn daemon_set_should_retry_creating_failed_daemon_pods() {
    let s = cluster("ca-ds-failed").await;
    create(
        &s,
        DSS,
        daemon_set("daemon-set", HTTPD, json!({DS_NAME_LABEL: "daemon-set"})),
    )
    .await;
    wait_running_on_all_nodes(&s, "daemon-set").await;
    check_daemon_status(&s, "daemon-set").await;

    // a daemon pod's phase set to Failed: the daemon pod is revived
    let mut p = pods(&s, "daemonset-name=daemon-set").await.remove(0);
    let failed = name(&p);
    p["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    p["status"]["phase"] = json!("Failed");
    replace(&s, &format!("{PODS}/{failed}/status"), p).await;
    wait_running_on_all_nodes(&s, "daemon-set").await;
    // the failed daemon pod completely deleted
    pod_gone(&s, &failed).await;
}

/// [sig-apps] Daemon set [Serial] should update pod when spec was updated and update strategy is RollingUpdate [Conformance]
#[tokio::test]
async fn daemon_set_should_update_pod_when_spec_was_updated_and_update_strategy_is_rolling_update()
{
    let s = cluster("ca-ds-rolling").await;
    let selector = "daemonset-name=daemon-set";
    let mut ds = daemon_set("daemon-set", HTTPD, json!({DS_NAME_LABEL: "daemon-set"}));
    ds["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
    create(&s, DSS, ds).await;
    wait_running_on_all_nodes(&s, "daemon-set").await;

    // history and labels
    let ds = read(&s, &format!("{DSS}/daemon-set")).await;
    wait_histories(&s, selector, 1).await;
    let cur = current_history(&s, selector, &ds).await;
    assert_eq!(cur["revision"], 1);
    check_pods_hash(&s, selector, label(&cur, DS_HASH)).await;

    // the daemon pods' image updated
    patch(
        &s,
        &format!("{DSS}/daemon-set"),
        STRATEGIC,
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": AGNHOST}]}}}}),
    )
    .await;
    wait_daemon_image(&s, "daemon-set", AGNHOST, 1, None).await;
    wait_running_on_all_nodes(&s, "daemon-set").await;

    let ds = read(&s, &format!("{DSS}/daemon-set")).await;
    wait_histories(&s, selector, 2).await;
    let cur = current_history(&s, selector, &ds).await;
    assert_eq!(cur["revision"], 2);
    check_pods_hash(&s, selector, label(&cur, DS_HASH)).await;
}

/// [sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]
///
/// Upstream wants two schedulable nodes: the second one here is a Node object whose agent
/// the test plays ([`FakeNode`]); the image that does not exist is [`MISSING`] on the real
/// node, and never made ready on the played one.
#[tokio::test]
async fn daemon_set_should_rollback_without_unnecessary_restarts() {
    let s = cluster("ca-ds-rollback").await;
    let fake = "ca-ds-rollback-2";
    crate::daemonsets::make_node(&s, fake, json!({}), json!([])).await;
    let play = FakeNode {
        node: fake,
        ready_image: HTTPD,
    };
    let selector = "daemonset-name=daemon-set";
    // a RollingUpdate DaemonSet
    let mut ds = daemon_set("daemon-set", HTTPD, json!({DS_NAME_LABEL: "daemon-set"}));
    ds["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
    let ds = create(&s, DSS, ds).await;
    eventually(60, "daemon pods on both nodes", || async {
        play.tick(&s).await;
        let nodes = schedulable_nodes(&s, &ds).await;
        if nodes.len() < 2 {
            return Err(format!("nodes {nodes:?}"));
        }
        daemon_pods_on(&s, &ds, &nodes).await
    })
    .await;

    // a rollout that cannot finish: its image does not exist
    let new_image = "foo:non-existent";
    update(&s, &format!("{DSS}/daemon-set"), |d| {
        let c = &mut d["spec"]["template"]["spec"]["containers"][0];
        c["image"] = json!(new_image);
        c["command"] = json!([MISSING]);
    })
    .await;
    // in the middle of the rollout
    eventually(60, "a pod of the new image", || async {
        play.tick(&s).await;
        let ps = pods(&s, selector).await;
        if ps
            .iter()
            .any(|p| text(p, "/spec/containers/0/image") == new_image)
        {
            Ok(())
        } else {
            Err(summary(&ps))
        }
    })
    .await;
    let (mut existing, mut new) = (Vec::new(), Vec::new());
    for p in pods(&s, selector).await {
        match text(&p, "/spec/containers/0/image") {
            HTTPD => existing.push(p),
            i if i == new_image => new.push(p),
            i => panic!("unexpected pod of {i}"),
        }
    }
    assert!(!existing.is_empty(), "with two nodes an old pod is left");
    assert!(!new.is_empty());

    // rolled back before the rollout is complete
    update(&s, &format!("{DSS}/daemon-set"), |d| {
        let c = &mut d["spec"]["template"]["spec"]["containers"][0];
        c["image"] = json!(HTTPD);
        c["command"] = serve();
    })
    .await;
    wait_daemon_image(&s, "daemon-set", HTTPD, 1, Some(&play)).await;
    // the old pods of the rollout were not restarted
    let after_pods = pods(&s, selector).await;
    let after: Vec<String> = after_pods.iter().map(name).collect();
    let show = |ps: &[Value]| {
        ps.iter()
            .map(|p| {
                format!(
                    "{} {} {} {} del={} ready={}",
                    name(p),
                    node_of(p),
                    text(p, "/spec/containers/0/image"),
                    label(p, DS_HASH),
                    !live(p),
                    is_ready(p)
                )
            })
            .collect::<Vec<_>>()
    };
    for p in &existing {
        assert!(
            after.contains(&name(p)),
            "pod {} restarted: {:?} / existing {:?} new {:?}",
            name(p),
            show(&after_pods),
            show(&existing),
            show(&new)
        );
    }
}

/// [sig-apps] Daemon set [Serial] should list and delete a collection of DaemonSets [Conformance]
#[tokio::test]
async fn daemon_set_should_list_and_delete_a_collection_of_daemon_sets() {
    let s = cluster("ca-ds-collection").await;
    let selector = "daemonset-name=daemon-set";
    create(
        &s,
        DSS,
        daemon_set_with_label("daemon-set", HTTPD, json!({DS_NAME_LABEL: "daemon-set"})),
    )
    .await;
    wait_running_on_all_nodes(&s, "daemon-set").await;
    check_daemon_status(&s, "daemon-set").await;
    assert_eq!(
        items(&list(&s, &all_ns(DSS), selector).await).len(),
        1,
        "filtered list"
    );
    delete_collection(&s, DSS, selector, json!({"gracePeriodSeconds": 1})).await;
    assert!(
        items(&list(&s, &all_ns(DSS), selector).await).is_empty(),
        "no daemon sets left"
    );
}

/// [sig-apps] Daemon set [Serial] should verify changes to a daemon set status [Conformance]
#[tokio::test]
async fn daemon_set_should_verify_changes_to_a_daemon_set_status() {
    let s = cluster("ca-ds-status").await;
    let selector = "daemonset-name=daemon-set";
    let start = list(&s, &all_ns(DSS), selector).await;
    create(
        &s,
        DSS,
        daemon_set_with_label("daemon-set", HTTPD, json!({DS_NAME_LABEL: "daemon-set"})),
    )
    .await;
    wait_running_on_all_nodes(&s, "daemon-set").await;
    check_daemon_status(&s, "daemon-set").await;
    // the patch is a marshalled DaemonSet holding the condition, as upstream sends it
    status_round_trip(
        &s,
        DSS,
        "daemon-set",
        selector,
        &rv(&start),
        json!({"type": "StatusUpdate", "status": "True", "lastTransitionTime": null,
               "reason": "E2E", "message": "Set from e2e test"}),
        json!({
            "metadata": {"creationTimestamp": null},
            "spec": {"selector": null, "template": {"metadata": {"creationTimestamp": null},
                     "spec": {"containers": null}}, "updateStrategy": {}},
            "status": {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                       "desiredNumberScheduled": 0, "numberReady": 0,
                       "conditions": [{"type": "StatusPatched", "status": "True", "lastTransitionTime": null}]},
        }),
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// ControllerRevision

/// [sig-apps] ControllerRevision [Serial] should manage the lifecycle of a ControllerRevision [Conformance]
#[tokio::test]
async fn controller_revision_should_manage_the_lifecycle_of_a_controller_revision() {
    let s = cluster("ca-cr-lifecycle").await;
    let ds_name = format!("e2e-{}-daemon-set", rand5());
    let ds_selector = format!("daemonset-name={ds_name}");
    let count = |n: usize| {
        let sel = ds_selector.clone();
        let s = &s;
        async move {
            eventually(60, &format!("{n} ControllerRevisions"), || async {
                let revs = items(&list(s, REVISIONS, &sel).await);
                if revs.len() == n {
                    Ok(())
                } else {
                    Err(format!("{:?}", names(&revs)))
                }
            })
            .await
        }
    };

    create(
        &s,
        DSS,
        daemon_set_with_label(&ds_name, HTTPD, json!({"daemonset-name": ds_name})),
    )
    .await;
    wait_running_on_all_nodes(&s, &ds_name).await;
    check_daemon_status(&s, &ds_name).await;
    assert_eq!(
        items(&list(&s, &all_ns(DSS), &ds_selector).await).len(),
        1,
        "filtered list"
    );
    let ds = read(&s, &format!("{DSS}/{ds_name}")).await;

    // listing all ControllerRevisions with the label, across namespaces
    let revs = items(&list(&s, &all_ns(REVISIONS), &ds_selector).await);
    assert_eq!(revs.len(), 1, "{:?}", names(&revs));
    let oref = &revs[0]["metadata"]["ownerReferences"][0];
    assert!(
        oref["kind"] == "DaemonSet" && oref["uid"] == ds["metadata"]["uid"],
        "{oref}"
    );
    let initial = read(&s, &format!("{REVISIONS}/{}", name(&revs[0]))).await;
    let initial_name = name(&initial);

    // patching the ControllerRevision
    let patched = patch(
        &s,
        &format!("{REVISIONS}/{initial_name}"),
        STRATEGIC,
        json!({"metadata": {"labels": {initial_name.clone(): "patched"}}}),
    )
    .await;
    assert_eq!(label(&patched, &initial_name), "patched");

    // a new ControllerRevision, named by the hash of the template with a new grace period
    let mut template = ds["spec"]["template"].clone();
    template["spec"]["terminationGracePeriodSeconds"] = json!(1);
    let collisions = ds["status"]["collisionCount"].as_u64().map(|c| c as u32);
    let hash = berth::controller::deployment::template_hash(&template, collisions);
    let mut labels = template["metadata"]["labels"].clone();
    labels[DS_HASH] = json!(hash);
    let mut new_rev = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {
            "name": format!("{ds_name}-{hash}"),
            "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds_name,
                                 "uid": ds["metadata"]["uid"], "controller": true,
                                 "blockOwnerDeletion": true}],
        },
        "data": initial["data"],
        "revision": int(&initial, "/revision") + 1,
    });
    if ds["metadata"]["annotations"].is_object() {
        new_rev["metadata"]["annotations"] = ds["metadata"]["annotations"].clone();
    }
    create(&s, REVISIONS, new_rev).await;
    count(2).await;

    // deleting the first ControllerRevision
    let (code, out) = s.delete(&format!("{REVISIONS}/{initial_name}")).await;
    assert_eq!(code, 200, "{out}");
    count(1).await;

    // updating the one left
    let current = items(&read(&s, REVISIONS).await).remove(0);
    let current_name = name(&current);
    let updated = update(&s, &format!("{REVISIONS}/{current_name}"), |r| {
        r["metadata"]["labels"][current_name.as_str()] = json!("updated");
    })
    .await;
    assert_eq!(label(&updated, &current_name), "updated");

    // another ControllerRevision, by patching the DaemonSet
    patch(
        &s,
        &format!("{DSS}/{ds_name}"),
        STRATEGIC,
        json!({"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 1}}},
               "updateStrategy": {"type": "RollingUpdate"}}),
    )
    .await;
    count(2).await;

    // removing the updated one by DeleteCollection
    delete_collection(&s, REVISIONS, &format!("{current_name}=updated"), json!({})).await;
    count(1).await;
    let left = items(&read(&s, REVISIONS).await);
    assert_eq!(int(&left[0], "/revision"), 3, "{}", left[0]);
}

// ---------------------------------------------------------------------------------------
// StatefulSet

const STS_REVISION: &str = "controller-revision-hash";

fn sts_labels() -> Value {
    json!({"foo": "bar", "baz": "blah"})
}

/// `e2estatefulset.NewStatefulSet` without mounts: container `webserver` of httpd.
fn stateful_set(name: &str, replicas: i64, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "replicas": replicas,
            "template": {
                "metadata": {"labels": labels, "annotations": {}},
                "spec": {"containers": [runs("webserver", HTTPD)]},
            },
            "updateStrategy": {"type": "RollingUpdate"},
            "volumeClaimTemplates": [],
            "serviceName": "test",
        },
    })
}

/// The headless Service the StatefulSet tests make first (`CreateServiceSpec`).
async fn headless_service(s: &TestServer, labels: Value) {
    create(
        s,
        SERVICES,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "test"},
               "spec": {"selector": labels, "clusterIP": "None",
                        "ports": [{"port": 80, "name": "http", "protocol": "TCP"}]}}),
    )
    .await;
}

fn ordinal(p: &Value) -> i64 {
    name(p)
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// `e2estatefulset.GetPodList`, sorted by ordinal.
async fn set_pods(s: &TestServer, ss: &Value) -> Vec<Value> {
    let mut ps = pods(s, &selector_of(ss)).await;
    ps.sort_by_key(ordinal);
    ps
}

/// `WaitForRunning(n, ready)`: `n` pods, all running, ready or not as asked.
async fn wait_set_running(s: &TestServer, ss: &Value, n: usize, ready: bool) -> Vec<Value> {
    eventually(
        90,
        &format!("{n} pods of {} running, ready={ready}", name(ss)),
        || async {
            let ps = set_pods(s, ss).await;
            assert!(
                ps.len() <= n,
                "too many pods scheduled, expected {n}: {}",
                summary(&ps)
            );
            if ps.len() == n
                && ps
                    .iter()
                    .all(|p| phase(p) == "Running" && is_ready(p) == ready)
            {
                Ok(ps)
            } else {
                Err(summary(&ps))
            }
        },
    )
    .await
}

/// `waitForStatus`: the set's generation observed.
async fn wait_set_status(s: &TestServer, ss: &str) -> Value {
    eventually(60, &format!("{ss} observed"), || async {
        let o = read(s, &format!("{STSS}/{ss}")).await;
        if int(&o, "/status/observedGeneration") >= int(&o, "/metadata/generation") {
            Ok(o)
        } else {
            Err(o["status"].to_string())
        }
    })
    .await
}

async fn wait_set_field(s: &TestServer, ss: &str, field: &str, n: i64) {
    eventually(60, &format!("{ss} {field} {n}"), || async {
        let o = read(s, &format!("{STSS}/{ss}")).await;
        if int(&o, "/status/observedGeneration") >= int(&o, "/metadata/generation")
            && int(&o, &format!("/status/{field}")) == n
        {
            Ok(())
        } else {
            Err(o["status"].to_string())
        }
    })
    .await;
}

/// `WaitForPodReady` / `waitForPodNotReady` of one pod of the set.
async fn wait_set_pod_ready(s: &TestServer, pod: &str, ready: bool) {
    pod_until(s, pod, &format!("{pod} ready={ready}"), |p| {
        is_ready(p) == ready
    })
    .await;
}

/// `waitForRollingUpdate`: the update revision is the current one, every pod made.
async fn wait_rolling_update(s: &TestServer, ss: &str) -> (Value, Vec<Value>) {
    eventually(120, &format!("{ss} rolled"), || async {
        let o = read(s, &format!("{STSS}/{ss}")).await;
        let ps = set_pods(s, &o).await;
        if ps.len() >= int(&o, "/spec/replicas") as usize
            && text(&o, "/status/updateRevision") == text(&o, "/status/currentRevision")
        {
            Ok((o, ps))
        } else {
            Err(format!("{} {}", o["status"], summary(&ps)))
        }
    })
    .await
}

/// `waitForPartitionedRollingUpdate`: the pods from the partition up at the update
/// revision.
async fn wait_partitioned_update(s: &TestServer, ss: &str) -> (Value, Vec<Value>) {
    eventually(120, &format!("{ss} rolled to its partition"), || async {
        let o = read(s, &format!("{STSS}/{ss}")).await;
        let ps = set_pods(s, &o).await;
        let replicas = int(&o, "/spec/replicas") as usize;
        let partition = int(&o, "/spec/updateStrategy/rollingUpdate/partition") as usize;
        if ps.len() < replicas {
            return Err(summary(&ps));
        }
        if partition == 0
            && text(&o, "/status/updateRevision") != text(&o, "/status/currentRevision")
        {
            return Err(o["status"].to_string());
        }
        let update = text(&o, "/status/updateRevision");
        if (partition..replicas).all(|i| label(&ps[i], STS_REVISION) == update) {
            Ok((o, ps))
        } else {
            Err(format!("{} {}", o["status"], summary(&ps)))
        }
    })
    .await
}

/// Checks each pod is of the current revision and image below the partition, of the
/// update revision and image from it on.
fn check_partition(
    ps: &[Value],
    partition: usize,
    (old, current): (&str, &str),
    (new, update): (&str, &str),
) {
    for (i, p) in ps.iter().enumerate() {
        let (image, revision) = if i < partition {
            (old, current)
        } else {
            (new, update)
        };
        assert_eq!(
            text(p, "/spec/containers/0/image"),
            image,
            "pod {}",
            name(p)
        );
        assert_eq!(label(p, STS_REVISION), revision, "pod {}", name(p));
    }
}

async fn delete_set_pod(s: &TestServer, ss: &str, i: i64) {
    let (code, out) = s.delete(&format!("{PODS}/{ss}-{i}")).await;
    assert_eq!(code, 200, "{out}");
}

async fn set_replicas(s: &TestServer, ss: &str, n: i64) {
    update(s, &format!("{STSS}/{ss}"), |o| {
        o["spec"]["replicas"] = json!(n)
    })
    .await;
}

/// `confirmStatefulPodCount(count, hard)`: the set keeps `count` pods for a while.
async fn confirm_pod_count(s: &TestServer, ss: &Value, count: usize, secs: u64) {
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < end {
        let ps = set_pods(s, ss).await;
        assert_eq!(
            ps.len(),
            count,
            "{} scaled unexpectedly: {}",
            name(ss),
            summary(&ps)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should perform rolling updates and roll backs of template modifications [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_should_perform_rolling_updates_and_roll_backs_of_template_modifications()
 {
    let s = cluster("ca-sts-rollback").await;
    let dir = tempfile::tempdir().unwrap();
    headless_service(&s, sts_labels()).await;
    let mut ss = stateful_set("ss2", 3, sts_labels());
    set_probe(&mut ss, dir.path());
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/ss2")).await;
    wait_set_running(&s, &set, 3, true).await;
    let set = wait_set_status(&s, "ss2").await;
    let (current, update_rev) = (
        text(&set, "/status/currentRevision").to_string(),
        text(&set, "/status/updateRevision").to_string(),
    );
    assert_eq!(
        current, update_rev,
        "created with the update revision the current one"
    );
    let ps = set_pods(&s, &set).await;
    for p in &ps {
        assert_eq!(label(p, STS_REVISION), current, "pod {}", name(p));
    }
    break_probe(dir.path(), &ps[1]);
    wait_set_pod_ready(&s, &name(&ps[1]), false).await;

    // updating the template's image
    update(&s, &format!("{STSS}/ss2"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(NEW_HTTPD);
    })
    .await;
    // creating a new revision
    let set = wait_set_status(&s, "ss2").await;
    let (current, update_rev) = (
        text(&set, "/status/currentRevision").to_string(),
        text(&set, "/status/updateRevision").to_string(),
    );
    assert_ne!(
        current, update_rev,
        "the current revision is not the update one during a rolling update"
    );

    // updating the pods in reverse ordinal order
    let ps = set_pods(&s, &set).await;
    restore_probe(dir.path(), &ps[1]);
    wait_set_pod_ready(&s, &name(&ps[1]), true).await;
    let (set, ps) = wait_rolling_update(&s, "ss2").await;
    assert_eq!(text(&set, "/status/currentRevision"), update_rev);
    for p in &ps {
        assert_eq!(
            text(p, "/spec/containers/0/image"),
            NEW_HTTPD,
            "pod {}",
            name(p)
        );
        assert_eq!(label(p, STS_REVISION), update_rev, "pod {}", name(p));
    }

    // rolling back to the previous revision
    break_probe(dir.path(), &ps[1]);
    wait_set_pod_ready(&s, &name(&ps[1]), false).await;
    let prior = current;
    update(&s, &format!("{STSS}/ss2"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(HTTPD);
    })
    .await;
    let set = wait_set_status(&s, "ss2").await;
    let (current, update_rev) = (
        text(&set, "/status/currentRevision").to_string(),
        text(&set, "/status/updateRevision").to_string(),
    );
    assert_eq!(
        prior, update_rev,
        "the prior revision is the update one during a roll back"
    );
    assert_ne!(
        current, update_rev,
        "the current revision is not the update one during a roll back"
    );

    // rolling back in reverse ordinal order
    let ps = set_pods(&s, &set).await;
    restore_probe(dir.path(), &ps[1]);
    wait_set_pod_ready(&s, &name(&ps[1]), true).await;
    let (set, ps) = wait_rolling_update(&s, "ss2").await;
    assert_eq!(text(&set, "/status/currentRevision"), prior);
    for p in &ps {
        assert_eq!(
            text(p, "/spec/containers/0/image"),
            HTTPD,
            "pod {}",
            name(p)
        );
        assert_eq!(label(p, STS_REVISION), prior, "pod {}", name(p));
    }
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should perform canary updates and phased rolling updates of template modifications [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_should_perform_canary_updates_and_phased_rolling_updates_of_template_modifications()
 {
    let s = cluster("ca-sts-canary").await;
    let dir = tempfile::tempdir().unwrap();
    headless_service(&s, sts_labels()).await;
    let mut ss = stateful_set("ss2", 3, sts_labels());
    set_probe(&mut ss, dir.path());
    ss["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 3}});
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/ss2")).await;
    wait_set_running(&s, &set, 3, true).await;
    let set = wait_set_status(&s, "ss2").await;
    let current = text(&set, "/status/currentRevision").to_string();
    assert_eq!(current, text(&set, "/status/updateRevision"));
    let ps = set_pods(&s, &set).await;
    for p in &ps {
        assert_eq!(label(p, STS_REVISION), current, "pod {}", name(p));
    }

    // updating the template's image
    update(&s, &format!("{STSS}/ss2"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(NEW_HTTPD);
    })
    .await;
    // creating a new revision
    let set = wait_set_status(&s, "ss2").await;
    let update_rev = text(&set, "/status/updateRevision").to_string();
    assert_ne!(current, update_rev);
    // not applying an update when the partition is greater than the number of replicas
    let ps = set_pods(&s, &set).await;
    check_partition(&ps, 3, (HTTPD, &current), (NEW_HTTPD, &update_rev));

    // performing a canary update
    let partition = |n: i64| {
        move |o: &mut Value| {
            o["spec"]["updateStrategy"] =
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": n}});
        }
    };
    update(&s, &format!("{STSS}/ss2"), partition(2)).await;
    let (_, ps) = wait_partitioned_update(&s, "ss2").await;
    check_partition(&ps, 2, (HTTPD, &current), (NEW_HTTPD, &update_rev));

    // restoring pods to the correct revision when they are deleted
    delete_set_pod(&s, "ss2", 0).await;
    delete_set_pod(&s, "ss2", 2).await;
    let set = read(&s, &format!("{STSS}/ss2")).await;
    wait_set_running(&s, &set, 3, true).await;
    let ps = set_pods(&s, &set).await;
    check_partition(&ps, 2, (HTTPD, &current), (NEW_HTTPD, &update_rev));

    // performing a phased rolling update
    let mut set = set;
    for i in (0..2).rev() {
        update(&s, &format!("{STSS}/ss2"), partition(i)).await;
        let (o, ps) = wait_partitioned_update(&s, "ss2").await;
        check_partition(&ps, i as usize, (HTTPD, &current), (NEW_HTTPD, &update_rev));
        set = o;
    }
    assert_eq!(
        text(&set, "/status/currentRevision"),
        update_rev,
        "the update complete"
    );
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Scaling should happen in predictable order and halt if any stateful pod is unhealthy [Slow] [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_scaling_should_happen_in_predictable_order_and_halt_if_any_stateful_pod_is_unhealthy()
 {
    let s = cluster("ca-sts-order").await;
    let dir = tempfile::tempdir().unwrap();
    let labels = sts_labels();
    headless_service(&s, labels.clone()).await;
    let selector = "baz=blah,foo=bar";
    // pods made in order
    let start = list(&s, PODS, selector).await;
    let mut w = watch_from(&s, PODS, &by_label(selector), &rv(&start)).await;
    let up = tokio::spawn(async move {
        let mut expected = vec!["ss-0", "ss-1", "ss-2"];
        while !expected.is_empty() {
            let e = w.next_change().await;
            if e["type"] == "ADDED" && e["object"]["metadata"]["name"] == expected[0] {
                expected.remove(0);
            }
        }
    });

    let mut ss = stateful_set("ss", 1, labels);
    set_probe(&mut ss, dir.path());
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/ss")).await;
    let ps = wait_set_running(&s, &set, 1, true).await;

    // scaling up halts with an unhealthy stateful pod
    for p in &ps {
        break_probe(dir.path(), p);
    }
    wait_set_running(&s, &set, 1, false).await;
    wait_set_field(&s, "ss", "readyReplicas", 0).await;
    set_replicas(&s, "ss", 3).await;
    confirm_pod_count(&s, &set, 1, 3).await;

    // scaling up to 3 once healthy
    for p in &ps {
        restore_probe(dir.path(), p);
    }
    let ps = wait_set_running(&s, &set, 3, true).await;
    within(60, up).await.unwrap();

    // scaling down halts with an unhealthy stateful pod, and goes in reverse order
    let start = list(&s, PODS, selector).await;
    let mut w = watch_from(&s, PODS, &by_label(selector), &rv(&start)).await;
    let down = tokio::spawn(async move {
        let mut expected = vec!["ss-2", "ss-1", "ss-0"];
        while !expected.is_empty() {
            let e = w.next_change().await;
            if e["type"] == "DELETED" && e["object"]["metadata"]["name"] == expected[0] {
                expected.remove(0);
            }
        }
    });
    for p in &ps {
        break_probe(dir.path(), p);
    }
    wait_set_field(&s, "ss", "readyReplicas", 0).await;
    wait_set_running(&s, &set, 3, false).await;
    set_replicas(&s, "ss", 0).await;
    confirm_pod_count(&s, &set, 3, 3).await;

    // scaling down to 0 once healthy
    for p in &ps {
        restore_probe(dir.path(), p);
    }
    eventually(90, "no pods left", || async {
        let ps = set_pods(&s, &set).await;
        if ps.is_empty() {
            Ok(())
        } else {
            Err(summary(&ps))
        }
    })
    .await;
    within(60, down).await.unwrap();
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Burst scaling should run to completion even with unhealthy pods [Slow] [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_burst_scaling_should_run_to_completion_even_with_unhealthy_pods()
 {
    let s = cluster("ca-sts-burst").await;
    let dir = tempfile::tempdir().unwrap();
    headless_service(&s, sts_labels()).await;
    let mut ss = stateful_set("ss", 1, sts_labels());
    ss["spec"]["podManagementPolicy"] = json!("Parallel");
    set_probe(&mut ss, dir.path());
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/ss")).await;
    let ps = wait_set_running(&s, &set, 1, true).await;

    // scaling up does not halt with an unhealthy stateful pod
    for p in &ps {
        break_probe(dir.path(), p);
    }
    wait_set_running(&s, &set, 1, false).await;
    wait_set_field(&s, "ss", "readyReplicas", 0).await;
    set_replicas(&s, "ss", 3).await;
    eventually(60, "3 pods while one is unhealthy", || async {
        let ps = set_pods(&s, &set).await;
        if ps.len() == 3 {
            Ok(())
        } else {
            Err(summary(&ps))
        }
    })
    .await;

    // all 3 running once healthy
    for p in &ps {
        restore_probe(dir.path(), p);
    }
    let ps = wait_set_running(&s, &set, 3, true).await;

    // scaling down does not halt with unhealthy stateful pods
    for p in &ps {
        break_probe(dir.path(), p);
    }
    wait_set_field(&s, "ss", "readyReplicas", 0).await;
    wait_set_running(&s, &set, 3, false).await;
    set_replicas(&s, "ss", 0).await;
    eventually(60, "no pods while they are unhealthy", || async {
        let ps = set_pods(&s, &set).await;
        if ps.is_empty() {
            Ok(())
        } else {
            Err(summary(&ps))
        }
    })
    .await;
    for p in &ps {
        restore_probe(dir.path(), p);
    }
    wait_set_field(&s, "ss", "replicas", 0).await;
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Should recreate evicted statefulset [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_should_recreate_evicted_statefulset() {
    let node = "ca-sts-evicted";
    let s = cluster(node).await;
    s.allow_privileged("default").await;
    headless_service(&s, sts_labels()).await;
    // a pod with a conflicting host port
    let conflicting = json!({"hostPort": 21017, "containerPort": 21017, "name": "conflict"});
    let mut p = pod("test-pod", json!({}), HTTPD);
    p["metadata"].as_object_mut().unwrap().remove("labels");
    p["spec"]["containers"][0]["name"] = json!("webserver");
    p["spec"]["containers"][0]["ports"] = json!([conflicting]);
    p["spec"]["nodeName"] = json!(node);
    create(&s, PODS, p).await;
    pod_until(&s, "test-pod", "test-pod running", |p| {
        phase(p) == "Running"
    })
    .await;

    // a statefulset with the conflicting port, on the same node
    let mut ss = stateful_set("ss", 1, sts_labels());
    ss["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([conflicting]);
    ss["spec"]["template"]["spec"]["nodeName"] = json!(node);
    create(&s, STSS, ss).await;

    // the stateful pod is rejected, and deleted and made again at least once
    let field = by_field("metadata.name=ss-0");
    let pl = read(&s, &format!("{PODS}?{field}")).await;
    let mut initial = items(&pl).first().map(uid).unwrap_or_default();
    let mut w = watch_from(&s, PODS, &field, &rv(&pl)).await;
    until(&mut w, 60, "ss-0 deleted", |e| {
        if e["type"] == "DELETED" {
            return !initial.is_empty();
        }
        initial = uid(&e["object"]);
        false
    })
    .await;

    // the conflicting pod removed, the stateful pod runs again, anew
    let (code, out) = s
        .delete(&format!("{PODS}/test-pod?gracePeriodSeconds=0"))
        .await;
    assert_eq!(code, 200, "{out}");
    pod_until(&s, "ss-0", "ss-0 made again and running", |p| {
        phase(p) == "Running" && uid(p) != initial
    })
    .await;
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should have a working scale subresource [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_should_have_a_working_scale_subresource() {
    let s = cluster("ca-sts-scale").await;
    let dir = tempfile::tempdir().unwrap();
    headless_service(&s, sts_labels()).await;
    let mut ss = stateful_set("ss", 1, sts_labels());
    set_probe(&mut ss, dir.path());
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/ss")).await;
    wait_set_running(&s, &set, 1, true).await;
    wait_set_status(&s, "ss").await;
    wait_set_field(&s, "ss", "replicas", 1).await;
    scale_round_trip(&s, &format!("{STSS}/ss")).await;
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should list, patch and delete a collection of StatefulSets [Conformance]
///
/// The container the patch adds (upstream: `pause`, by its image alone) has a command.
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_should_list_patch_and_delete_a_collection_of_stateful_sets()
 {
    let s = cluster("ca-sts-collection").await;
    let dir = tempfile::tempdir().unwrap();
    headless_service(&s, sts_labels()).await;
    let labels = json!({"name": "sample-pod", "pod": "httpd"});
    let mut ss = stateful_set("test-ss", 1, labels);
    set_probe(&mut ss, dir.path());
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/test-ss")).await;
    wait_set_running(&s, &set, 1, true).await;
    wait_set_status(&s, "test-ss").await;

    // patching the StatefulSet (upstream spells one field `TerminationGracePeriodSeconds`,
    // an unknown field the server drops)
    patch(
        &s,
        &format!("{STSS}/test-ss"),
        STRATEGIC,
        json!({
            "metadata": {"labels": {"test-ss": "patched"}},
            "spec": {"replicas": 2, "template": {"spec": {
                "TerminationGracePeriodSeconds": 1,
                "containers": [{"name": "test-ss", "image": PAUSE, "command": serve()}],
            }}},
        }),
    )
    .await;
    let set = read(&s, &format!("{STSS}/test-ss")).await;
    assert_eq!(
        int(&set, "/spec/replicas"),
        2,
        "statefulset should have 2 replicas"
    );
    assert_eq!(
        image_of(&set),
        PAUSE,
        "statefulset not using the patch's image"
    );
    wait_set_running(&s, &set, 2, true).await;
    wait_set_status(&s, "test-ss").await;

    // listing all StatefulSets
    let selector = "test-ss=patched";
    assert_eq!(
        items(&list(&s, &all_ns(STSS), selector).await).len(),
        1,
        "filtered list"
    );
    // deleting all of them
    delete_collection(&s, STSS, selector, json!({"gracePeriodSeconds": 1})).await;
    assert!(
        items(&list(&s, &all_ns(STSS), selector).await).is_empty(),
        "no statefulsets left"
    );
}

/// [sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should validate Statefulset Status endpoints [Conformance]
#[tokio::test]
async fn stateful_set_basic_stateful_set_functionality_should_validate_statefulset_status_endpoints()
 {
    let s = cluster("ca-sts-status").await;
    let dir = tempfile::tempdir().unwrap();
    headless_service(&s, sts_labels()).await;
    let selector = "e2e=testing";
    let start = list(&s, &all_ns(STSS), selector).await;
    let mut ss = stateful_set("ss", 1, sts_labels());
    set_probe(&mut ss, dir.path());
    create(&s, STSS, ss).await;
    let set = read(&s, &format!("{STSS}/ss")).await;
    wait_set_running(&s, &set, 1, true).await;
    wait_set_status(&s, "ss").await;

    // patching the Statefulset to include a label
    patch(
        &s,
        &format!("{STSS}/ss"),
        STRATEGIC,
        json!({"metadata": {"labels": {"e2e": "testing"}}}),
    )
    .await;
    status_round_trip(
        &s,
        STSS,
        "ss",
        selector,
        &rv(&start),
        json!({"type": "StatusUpdate", "status": "True", "lastTransitionTime": null,
               "reason": "E2E", "message": "Set from e2e test"}),
        json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Job

/// `e2ejob.NewTestJob` / `NewTestJobOnNode`: a Job whose pods (label `job=<name>`) do
/// `behavior`. Markers that upstream keeps in a volume are files in `dir`: one for all
/// pods when they are bound to `node` (upstream's hostPath), one per pod otherwise (its
/// emptyDir).
#[allow(clippy::too_many_arguments)]
fn test_job(
    behavior: &str,
    name: &str,
    restart: &str,
    parallelism: i64,
    completions: i64,
    backoff: i64,
    dir: &Path,
    node: Option<&str>,
) -> Value {
    let d = dir.display();
    let marker = if node.is_some() {
        format!("{d}/foo")
    } else {
        format!("{d}/foo-$POD_UID")
    };
    let (script, grace) = match behavior {
        "notTerminate" => (SERVE.to_string(), None),
        "fail" => ("exit 1".to_string(), None),
        "succeed" => ("exit 0".to_string(), None),
        // upstream gives no command: busybox's default shell exits 0
        "succeeded" => ("true".to_string(), None),
        "failOddSucceedEven" => (
            "if [ $(expr ${JOB_COMPLETION_INDEX} % 2) -ne 0 ]; then exit 1; else exit 0; fi"
                .to_string(),
            None,
        ),
        "failOnce" => (
            format!("if [ -r {marker} ]; then exit 0; else touch {marker}; exit 1; fi"),
            None,
        ),
        "notTerminateOncePerIndex" => (
            format!(
                "if [ -r {d}/foo-$JOB_COMPLETION_INDEX ]; then exit 0; else touch {d}/foo-$JOB_COMPLETION_INDEX; exec sleep 300; fi"
            ),
            Some(1),
        ),
        other => panic!("no job behavior {other}"),
    };
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": completions,
            "backoffLimit": backoff,
            "manualSelector": false,
            "template": {
                "metadata": {"labels": {"job": name}},
                "spec": {
                    "restartPolicy": restart,
                    "containers": [{"name": "c", "image": BUSYBOX, "command": ["sh", "-c", script],
                                    "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
                                    "securityContext": {}}],
                },
            },
        },
    });
    if let Some(g) = grace {
        job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(g);
    }
    if let Some(n) = node {
        job["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    job
}

async fn job_pods(s: &TestServer, job: &str) -> Vec<Value> {
    pods(s, &format!("job={job}")).await
}

/// `WaitForJobPodsRunning`: exactly `n` pods of the job running.
async fn wait_job_pods_running(s: &TestServer, job: &str, n: usize) -> Vec<Value> {
    eventually(60, &format!("{n} pods of {job} running"), || async {
        let ps = job_pods(s, job).await;
        let running: Vec<Value> = ps
            .iter()
            .filter(|p| phase(p) == "Running")
            .cloned()
            .collect();
        if running.len() == n {
            Ok(running)
        } else {
            Err(summary(&ps))
        }
    })
    .await
}

/// `WaitForJobCondition`: the condition True, with `reason` if one is given.
async fn wait_job_condition(s: &TestServer, job: &str, kind: &str, reason: Option<&str>) -> Value {
    eventually(120, &format!("job {job} {kind} {reason:?}"), || async {
        let j = read(s, &format!("{JOBS}/{job}")).await;
        if has_condition(&j, kind, "True", reason) {
            Ok(j)
        } else {
            Err(j["status"].to_string())
        }
    })
    .await
}

/// `WaitForJobComplete`: `completions` succeeded, then the Complete condition.
async fn wait_job_complete(s: &TestServer, job: &str, reason: &str, completions: i64) -> Value {
    eventually(
        120,
        &format!("job {job} {completions} succeeded"),
        || async {
            let j = read(s, &format!("{JOBS}/{job}")).await;
            if int(&j, "/status/succeeded") == completions {
                Ok(())
            } else {
                Err(j["status"].to_string())
            }
        },
    )
    .await;
    wait_job_condition(s, job, "Complete", Some(reason)).await
}

/// `WaitForJobFailed`.
async fn wait_job_failed(s: &TestServer, job: &str) -> Value {
    wait_job_condition(s, job, "Failed", None).await
}

/// The counts upstream checks are zero once a job is done (`ready` and `terminating`
/// present as 0).
fn assert_job_settled(j: &Value) {
    let st = &j["status"];
    assert_eq!(int(j, "/status/active"), 0, "{st}");
    assert_eq!(st["ready"], 0, "{st}");
    assert_eq!(st["terminating"], 0, "{st}");
}

/// [sig-apps] Job should adopt matching orphans and release non-matching pods [Conformance]
#[tokio::test]
async fn job_should_adopt_matching_orphans_and_release_non_matching_pods() {
    let s = cluster("ca-job-adopt").await;
    let dir = tempfile::tempdir().unwrap();
    let job = create(
        &s,
        JOBS,
        test_job(
            "notTerminate",
            "adopt-release",
            "Never",
            2,
            4,
            6,
            dir.path(),
            None,
        ),
    )
    .await;
    wait_job_pods_running(&s, "adopt-release", 2).await;

    // orphaning one of the job's pods
    let ps = job_pods(&s, "adopt-release").await;
    assert_eq!(ps.len(), 2, "{}", summary(&ps));
    let pod = name(&ps[0]);
    update_pod(&s, &pod, |p| {
        p["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
    })
    .await;
    // the job readopts it
    pod_until(&s, &pod, "readopted", |p| {
        let Some(r) = p["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["controller"] == true))
        else {
            return false;
        };
        assert!(
            r["kind"] == "Job"
                && r["name"] == "adopt-release"
                && r["uid"] == job["metadata"]["uid"],
            "wrong controllerRef {r}"
        );
        true
    })
    .await;

    // removing the labels from the job's pod: the job releases it
    update_pod(&s, &pod, |p| {
        p["metadata"].as_object_mut().unwrap().remove("labels");
    })
    .await;
    pod_until(&s, &pod, "released", |p| controller_uid(p).is_none()).await;
}

/// [sig-apps] Job should allow to use a pod failure policy to ignore failure matching on DisruptionTarget condition [Conformance]
#[tokio::test]
async fn job_should_allow_to_use_a_pod_failure_policy_to_ignore_failure_matching_on_disruption_target_condition()
 {
    let node = "ca-job-disruption";
    let s = cluster(node).await;
    let dir = tempfile::tempdir().unwrap();
    let job_name = "evicted-pod-ignore-on-disruption-condition";
    let mut job = test_job(
        "notTerminateOncePerIndex",
        job_name,
        "Never",
        3,
        3,
        2,
        dir.path(),
        Some(node),
    );
    job["spec"]["completionMode"] = json!("Indexed");
    job["spec"]["podFailurePolicy"] = json!({"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]});
    create(&s, JOBS, job).await;
    // all the pods ready
    eventually(60, "3 ready", || async {
        let j = read(&s, &format!("{JOBS}/{job_name}")).await;
        if j["status"]["ready"] == 3 {
            Ok(())
        } else {
            Err(j["status"].to_string())
        }
    })
    .await;
    let running: Vec<Value> = job_pods(&s, job_name)
        .await
        .into_iter()
        .filter(|p| phase(p) == "Running")
        .collect();
    assert_eq!(running.len(), 3, "the running pods match parallelism");

    // evicting all the pods, together
    let evictions = running.iter().map(|p| {
        let (s, pod) = (&s, name(p));
        async move {
            let (code, out) = evict(s, &pod).await;
            assert!(code == 200 || code == 201, "evict {pod}: {code} {out}");
            pod_gone(s, &pod).await;
        }
    });
    futures_util::future::join_all(evictions).await;
    wait_job_complete(&s, job_name, "CompletionsReached", 3).await;
}

/// [sig-apps] Job should allow to use the pod failure policy on exit code to fail the job early [Conformance]
#[tokio::test]
async fn job_should_allow_to_use_the_pod_failure_policy_on_exit_code_to_fail_the_job_early() {
    let node = "ca-job-failjob";
    let s = cluster(node).await;
    let dir = tempfile::tempdir().unwrap();
    let mut job = test_job(
        "failOnce",
        "pod-failure-failjob",
        "Never",
        2,
        4,
        6,
        dir.path(),
        Some(node),
    );
    job["spec"]["podFailurePolicy"] = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}},
    ]});
    create(&s, JOBS, job).await;
    wait_job_failed(&s, "pod-failure-failjob").await;
}

/// [sig-apps] Job should apply changes to a job status [Conformance]
#[tokio::test]
async fn job_should_apply_changes_to_a_job_status() {
    let s = cluster("ca-job-status").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "suspend-false-to-true";
    let path = format!("{JOBS}/{name}");
    let job = create(
        &s,
        JOBS,
        test_job("notTerminate", name, "Never", 2, 4, 6, dir.path(), None),
    )
    .await;
    wait_job_pods_running(&s, name, 2).await;

    // patching /status
    let now1 = now_seconds();
    let patched = patch(
        &s,
        &format!("{path}/status"),
        MERGE,
        json!({"metadata": {"annotations": {"patchedstatus": "true"}},
               "status": {"conditions": [{"type": "CustomConditionType", "status": "True",
                                          "lastProbeTime": null, "lastTransitionTime": now1}]}}),
    )
    .await;
    let c = condition(&patched, "CustomConditionType").expect("the patched condition");
    assert!(same_time(&c["lastTransitionTime"], &now1), "{c}");
    assert_eq!(
        annotation(&patched, "patchedstatus"),
        "true",
        "the patched annotation"
    );

    // updating /status
    let now2 = loop {
        let t = now_seconds();
        if t != now1 {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let updated = update_at(&s, &path, &format!("{path}/status"), |j| {
        let cs = j["status"]["conditions"]
            .as_array_mut()
            .expect("conditions");
        let c = cs
            .iter_mut()
            .find(|c| c["type"] == "CustomConditionType")
            .expect("the patched object does not have the required condition");
        c["lastTransitionTime"] = json!(now2);
    })
    .await;
    let c = condition(&updated, "CustomConditionType").expect("the updated condition");
    assert!(same_time(&c["lastTransitionTime"], &now2), "{c}");

    // get /status
    let st = read(&s, &format!("{path}/status")).await;
    assert_eq!(uid(&st), uid(&job));
}

/// [sig-apps] Job should create pods for an Indexed job with completion indexes and specified hostname [Conformance]
#[tokio::test]
async fn job_should_create_pods_for_an_indexed_job_with_completion_indexes_and_specified_hostname()
{
    let s = cluster("ca-job-indexed").await;
    let dir = tempfile::tempdir().unwrap();
    let mut job = test_job("succeed", "indexed-job", "Never", 2, 4, 6, dir.path(), None);
    job["spec"]["completionMode"] = json!("Indexed");
    create(&s, JOBS, job).await;
    wait_job_complete(&s, "indexed-job", "CompletionsReached", 4).await;
    let mut indexes = Vec::new();
    for p in job_pods(&s, "indexed-job").await {
        if phase(&p) != "Succeeded" {
            continue;
        }
        let ix: i64 = annotation(&p, "batch.kubernetes.io/job-completion-index")
            .parse()
            .expect("an index");
        assert_eq!(text(&p, "/spec/hostname"), format!("indexed-job-{ix}"));
        indexes.push(ix);
    }
    indexes.sort();
    indexes.dedup();
    assert_eq!(indexes, [0, 1, 2, 3]);
}

/// [sig-apps] Job should delete a job [Conformance]
#[tokio::test]
async fn job_should_delete_a_job() {
    let s = cluster("ca-job-delete").await;
    let dir = tempfile::tempdir().unwrap();
    create(
        &s,
        JOBS,
        test_job("notTerminate", "foo", "Never", 2, 4, 6, dir.path(), None),
    )
    .await;
    wait_job_pods_running(&s, "foo", 2).await;
    // DeleteResourceAndWaitForGC: deleted in the background, its pods gone
    let (code, out) = s
        .delete(&format!("{JOBS}/foo?propagationPolicy=Background"))
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(60, "the job's pods gone", || async {
        let ps = job_pods(&s, "foo").await;
        if ps.is_empty() {
            Ok(())
        } else {
            Err(summary(&ps))
        }
    })
    .await;
    let (code, _) = s.get(&format!("{JOBS}/foo")).await;
    assert_eq!(code, 404, "the job was deleted");
}

/// [sig-apps] Job should manage the lifecycle of a job [Conformance]
#[tokio::test]
async fn job_should_manage_the_lifecycle_of_a_job() {
    let s = cluster("ca-job-lifecycle").await;
    let dir = tempfile::tempdir().unwrap();
    let job_name = format!("e2e-{}", rand5());
    let selector = format!("e2e-job-label={job_name}");
    let path = format!("{JOBS}/{job_name}");
    let start = list(&s, JOBS, &selector).await;
    let q = by_label(&selector);

    // creating a suspended job
    let mut job = test_job("succeed", &job_name, "Never", 2, 4, 6, dir.path(), None);
    job["metadata"]["labels"] = json!({"e2e-job-label": job_name});
    job["spec"]["suspend"] = json!(true);
    let created = create(&s, JOBS, job).await;
    let created_rv: u64 = rv(&created).parse().expect("a valid resource version");

    // patching the job
    let patched = patch(
        &s,
        &path,
        STRATEGIC,
        json!({"metadata": {"labels": {job_name.clone(): "patched"}}}),
    )
    .await;
    let patched_rv: u64 = rv(&patched).parse().unwrap();
    assert!(
        created_rv < patched_rv,
        "the patched object has a larger resource version"
    );
    until_from(&s, JOBS, &q, &rv(&start), 30, "the job patched", |e| {
        e["type"] == "MODIFIED"
            && name(&e["object"]) == job_name
            && label(&e["object"], &job_name) == "patched"
    })
    .await;
    assert_eq!(label(&patched, &job_name), "patched");

    // updating the job
    let before = read(&s, &path).await;
    let updated = update(&s, &path, |j| {
        j["spec"]["suspend"] = json!(false);
        if !j["metadata"]["annotations"].is_object() {
            j["metadata"]["annotations"] = json!({});
        }
        j["metadata"]["annotations"]["updated"] = json!("true");
    })
    .await;
    until_from(&s, JOBS, &q, &rv(&before), 30, "the job updated", |e| {
        e["type"] == "MODIFIED"
            && name(&e["object"]) == job_name
            && annotation(&e["object"], "updated") == "true"
    })
    .await;
    assert_eq!(annotation(&updated, "updated"), "true");

    // listing all jobs with the label selector
    let jobs = items(&list(&s, &all_ns(JOBS), &selector).await);
    assert_eq!(jobs.len(), 1, "the job listed");

    // waiting for the job to complete
    wait_job_complete(&s, &job_name, "CompletionsReached", 4).await;

    // deleting a job collection with the label selector
    delete_collection(
        &s,
        JOBS,
        &selector,
        json!({"propagationPolicy": "Background"}),
    )
    .await;
    until_from(&s, JOBS, &q, &rv(&updated), 60, "the job deleted", |e| {
        e["type"] == "DELETED"
            && name(&e["object"]) == job_name
            && label(&e["object"], "e2e-job-label") == job_name
    })
    .await;
    assert!(
        items(&list(&s, &all_ns(JOBS), &selector).await).is_empty(),
        "no jobs left"
    );
}

/// [sig-apps] Job should run a job to completion when tasks sometimes fail and are locally restarted [Conformance]
///
/// The node agent restarts a failed container after 200 ms rather than after its default
/// first back-off of 10 s.
#[tokio::test]
async fn job_should_run_a_job_to_completion_when_tasks_sometimes_fail_and_are_locally_restarted() {
    let s = cluster_tuned("ca-job-local-restart", |n| {
        n.agent.backoff_initial = Duration::from_millis(200);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    create(
        &s,
        JOBS,
        test_job(
            "failOnce",
            "fail-once-local",
            "OnFailure",
            2,
            4,
            6,
            dir.path(),
            None,
        ),
    )
    .await;
    wait_job_complete(&s, "fail-once-local", "CompletionsReached", 4).await;
}

/// [sig-apps] Job with successPolicy should succeeded when all indexes succeeded [Conformance]
#[tokio::test]
async fn job_with_success_policy_should_succeeded_when_all_indexes_succeeded() {
    let s = cluster("ca-job-success-all").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "with-success-policy-all-index-succeeded";
    let mut job = test_job("succeeded", name, "Never", 2, 2, 6, dir.path(), None);
    job["spec"]["completionMode"] = json!("Indexed");
    job["spec"]["successPolicy"] = json!({"rules": [{"succeededCount": 2}]});
    create(&s, JOBS, job).await;
    wait_job_condition(&s, name, "SuccessCriteriaMet", Some("SuccessPolicy")).await;
    wait_job_complete(&s, name, "SuccessPolicy", 2).await;
    let j = read(&s, &format!("{JOBS}/{name}")).await;
    assert_job_settled(&j);
    assert_eq!(int(&j, "/status/failed"), 0);
}

/// [sig-apps] Job with successPolicy succeededIndexes rule should succeeded even when some indexes remain pending [Conformance]
#[tokio::test]
async fn job_with_success_policy_succeeded_indexes_rule_should_succeeded_even_when_some_indexes_remain_pending()
 {
    let s = cluster("ca-job-success-indexes").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "with-success-policy-succeeded-indexed";
    let mut job = test_job(
        "failOddSucceedEven",
        name,
        "Never",
        2,
        5,
        6,
        dir.path(),
        None,
    );
    job["spec"]["completionMode"] = json!("Indexed");
    job["spec"]["successPolicy"] = json!({"rules": [{"succeededIndexes": "0"}]});
    create(&s, JOBS, job).await;
    wait_job_condition(&s, name, "SuccessCriteriaMet", Some("SuccessPolicy")).await;
    wait_job_complete(&s, name, "SuccessPolicy", 1).await;
    let j = read(&s, &format!("{JOBS}/{name}")).await;
    assert_eq!(j["status"]["completedIndexes"], "0");
    assert_job_settled(&j);
}

/// [sig-apps] Job with successPolicy succeededCount rule should succeeded even when some indexes remain pending [Conformance]
#[tokio::test]
async fn job_with_success_policy_succeeded_count_rule_should_succeeded_even_when_some_indexes_remain_pending()
 {
    let s = cluster("ca-job-success-count").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "with-success-policy-succeeded-count";
    let mut job = test_job(
        "failOddSucceedEven",
        name,
        "Never",
        2,
        5,
        i64::from(i32::MAX),
        dir.path(),
        None,
    );
    job["spec"]["completionMode"] = json!("Indexed");
    job["spec"]["successPolicy"] = json!({"rules": [{"succeededCount": 1}]});
    create(&s, JOBS, job).await;
    wait_job_condition(&s, name, "SuccessCriteriaMet", Some("SuccessPolicy")).await;
    wait_job_complete(&s, name, "SuccessPolicy", 1).await;
    let j = read(&s, &format!("{JOBS}/{name}")).await;
    assert_eq!(j["status"]["completedIndexes"], "0");
    assert_job_settled(&j);
}

/// [sig-apps] Job should execute all indexes despite some failing when using backoffLimitPerIndex [Conformance]
#[tokio::test]
async fn job_should_execute_all_indexes_despite_some_failing_when_using_backoff_limit_per_index() {
    let s = cluster("ca-job-per-index").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "with-backoff-limit-per-index";
    let mut job = test_job(
        "failOddSucceedEven",
        name,
        "Never",
        2,
        4,
        6,
        dir.path(),
        None,
    );
    job["spec"].as_object_mut().unwrap().remove("backoffLimit");
    job["spec"]["backoffLimitPerIndex"] = json!(1);
    job["spec"]["completionMode"] = json!("Indexed");
    create(&s, JOBS, job).await;
    wait_job_failed(&s, name).await;
    let j = read(&s, &format!("{JOBS}/{name}")).await;
    assert_eq!(j["status"]["failedIndexes"], "1,3", "{}", j["status"]);
    assert_eq!(j["status"]["completedIndexes"], "0,2", "{}", j["status"]);
    assert_eq!(int(&j, "/status/failed"), 4);
    assert_eq!(int(&j, "/status/succeeded"), 2);
}

/// [sig-apps] Job should terminate job execution when the number of failed indexes exceeds maxFailedIndexes [Conformance]
#[tokio::test]
async fn job_should_terminate_job_execution_when_the_number_of_failed_indexes_exceeds_max_failed_indexes()
 {
    let s = cluster("ca-job-max-failed").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "with-max-failed-indexes";
    let mut job = test_job("fail", name, "Never", 1, 4, 6, dir.path(), None);
    job["spec"].as_object_mut().unwrap().remove("backoffLimit");
    job["spec"]["backoffLimitPerIndex"] = json!(0);
    job["spec"]["maxFailedIndexes"] = json!(0);
    job["spec"]["completionMode"] = json!("Indexed");
    create(&s, JOBS, job).await;
    wait_job_failed(&s, name).await;
    let j = read(&s, &format!("{JOBS}/{name}")).await;
    assert_eq!(j["status"]["failedIndexes"], "0", "{}", j["status"]);
    assert_eq!(int(&j, "/status/failed"), 1, "{}", j["status"]);
}

/// [sig-apps] Job should mark indexes as failed when the FailIndex action is matched in podFailurePolicy [Conformance]
#[tokio::test]
async fn job_should_mark_indexes_as_failed_when_the_fail_index_action_is_matched_in_pod_failure_policy()
 {
    let s = cluster("ca-job-fail-index").await;
    let dir = tempfile::tempdir().unwrap();
    let name = "matching-fail-index-action";
    let mut job = test_job(
        "failOddSucceedEven",
        name,
        "Never",
        2,
        2,
        6,
        dir.path(),
        None,
    );
    job["spec"].as_object_mut().unwrap().remove("backoffLimit");
    job["spec"]["backoffLimitPerIndex"] = json!(1);
    job["spec"]["podFailurePolicy"] = json!({"rules": [
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}},
    ]});
    job["spec"]["completionMode"] = json!("Indexed");
    create(&s, JOBS, job).await;
    wait_job_failed(&s, name).await;
    let j = read(&s, &format!("{JOBS}/{name}")).await;
    assert_eq!(j["status"]["failedIndexes"], "1", "{}", j["status"]);
    assert_eq!(j["status"]["completedIndexes"], "0", "{}", j["status"]);
    assert_eq!(int(&j, "/status/failed"), 1);
    assert_eq!(int(&j, "/status/succeeded"), 1);
}

// ---------------------------------------------------------------------------------------
// CronJob

/// `newTestCronJob`: one pod per Job, restarted on failure, running `command`.
fn cron_job(
    name: &str,
    schedule: &str,
    policy: &str,
    command: Value,
    limits: Option<(i64, i64)>,
) -> Value {
    let mut cj = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": policy,
            "jobTemplate": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 1,
                "template": {"spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [{"name": "c", "image": BUSYBOX, "command": command}],
                }},
            }},
        },
    });
    if let Some((ok, failed)) = limits {
        cj["spec"]["successfulJobsHistoryLimit"] = json!(ok);
        cj["spec"]["failedJobsHistoryLimit"] = json!(failed);
    }
    cj
}

fn sleep_command() -> Value {
    json!(["sleep", "300"])
}

fn job_finished(j: &Value) -> bool {
    has_condition(j, "Complete", "True", None) || has_condition(j, "Failed", "True", None)
}

/// `filterActiveJobs`: the jobs not finished.
async fn active_jobs(s: &TestServer) -> Vec<Value> {
    items(&read(s, JOBS).await)
        .into_iter()
        .filter(|j| !job_finished(j))
        .collect()
}

/// `waitForActiveJobs`: at least `n` in the cron job's `status.active`. Jobs are named
/// by the minute they were scheduled for, as upstream names them, so the runs of an
/// `@every` schedule within one minute are one job: a second can take a whole minute,
/// and the wait allows two.
async fn wait_active_jobs(s: &TestServer, cj: &str, n: usize) -> Value {
    eventually(120, &format!("{n} active jobs of {cj}"), || async {
        let c = read(s, &format!("{CRON_JOBS}/{cj}")).await;
        let active = c["status"]["active"].as_array().map_or(0, Vec::len);
        if active >= n {
            Ok(c)
        } else {
            Err(c["status"].to_string())
        }
    })
    .await
}

async fn delete_cron_job(s: &TestServer, cj: &str) {
    let (code, out) = s
        .delete(&format!("{CRON_JOBS}/{cj}?propagationPolicy=Background"))
        .await;
    assert_eq!(code, 200, "{out}");
}

/// [sig-apps] CronJob should schedule multiple jobs concurrently [Conformance]
#[tokio::test]
async fn cron_job_should_schedule_multiple_jobs_concurrently() {
    let s = cluster("ca-cron-concurrent").await;
    create(
        &s,
        CRON_JOBS,
        cron_job("concurrent", "@every 2s", "Allow", sleep_command(), None),
    )
    .await;
    // more than one job running at a time
    wait_active_jobs(&s, "concurrent", 2).await;
    assert!(
        active_jobs(&s).await.len() >= 2,
        "at least two running jobs"
    );
    delete_cron_job(&s, "concurrent").await;
}

/// [sig-apps] CronJob should not schedule jobs when suspended [Slow] [Conformance]
#[tokio::test]
async fn cron_job_should_not_schedule_jobs_when_suspended() {
    let s = cluster("ca-cron-suspended").await;
    let mut cj = cron_job("suspended", "@every 1s", "Allow", sleep_command(), None);
    cj["spec"]["suspend"] = json!(true);
    create(&s, CRON_JOBS, cj).await;
    // no jobs scheduled, for a few of the schedule's periods
    let end = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < end {
        let c = read(&s, &format!("{CRON_JOBS}/suspended")).await;
        assert!(
            c["status"]["active"].as_array().is_none_or(Vec::is_empty),
            "{}",
            c["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(items(&read(&s, JOBS).await).is_empty(), "no jobs");
    delete_cron_job(&s, "suspended").await;
}

/// [sig-apps] CronJob should not schedule new jobs when ForbidConcurrent [Slow] [Conformance]
#[tokio::test]
async fn cron_job_should_not_schedule_new_jobs_when_forbid_concurrent() {
    let s = cluster("ca-cron-forbid").await;
    create(
        &s,
        CRON_JOBS,
        cron_job("forbid", "@every 1s", "Forbid", sleep_command(), None),
    )
    .await;
    // a job scheduled, exactly one
    let c = wait_active_jobs(&s, "forbid", 1).await;
    assert_eq!(c["status"]["active"].as_array().map_or(0, Vec::len), 1);
    assert_eq!(active_jobs(&s).await.len(), 1, "exactly one running job");
    // no more jobs scheduled over a few of the schedule's periods
    let end = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < end {
        let c = read(&s, &format!("{CRON_JOBS}/forbid")).await;
        assert!(
            c["status"]["active"].as_array().map_or(0, Vec::len) < 2,
            "{}",
            c["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    delete_cron_job(&s, "forbid").await;
}

/// [sig-apps] CronJob should replace jobs when ReplaceConcurrent [Conformance]
#[tokio::test]
async fn cron_job_should_replace_jobs_when_replace_concurrent() {
    let s = cluster("ca-cron-replace").await;
    create(
        &s,
        CRON_JOBS,
        cron_job("replace", "@every 2s", "Replace", sleep_command(), None),
    )
    .await;
    let c = wait_active_jobs(&s, "replace", 1).await;
    assert_eq!(
        c["status"]["active"].as_array().map_or(0, Vec::len),
        1,
        "exactly one scheduled"
    );
    let jobs = items(&read(&s, JOBS).await);
    let active: Vec<&Value> = jobs.iter().filter(|j| !job_finished(j)).collect();
    assert_eq!(active.len(), 1, "exactly one running job");
    let first = name(active[0]);
    // the job replaced by a new one, never two alive at once
    eventually(60, "the job replaced", || async {
        let alive: Vec<Value> = items(&read(&s, JOBS).await)
            .into_iter()
            .filter(live)
            .collect();
        assert!(
            alive.len() <= 1,
            "more than one job is running: {:?}",
            names(&alive)
        );
        match alive.first() {
            Some(j) if name(j) != first => Ok(()),
            _ => Err(format!("{:?}", names(&alive))),
        }
    })
    .await;
    delete_cron_job(&s, "replace").await;
}

/// [sig-apps] CronJob should support CronJob API operations [Conformance]
#[tokio::test]
async fn cron_job_should_support_cron_job_api_operations() {
    let s = cluster("ca-cron-api").await;
    let unique = format!("cronjob-{}", rand5());
    let selector = format!("special-label={unique}");
    let mut template = cron_job(
        "test-api",
        "* */1 * * ?",
        "Allow",
        json!(["/bin/true"]),
        Some((1, 0)),
    );
    template["metadata"]["labels"] = json!({"special-label": unique});

    // creating, getting, listing
    let created = create(&s, CRON_JOBS, template.clone()).await;
    let got = read(&s, &format!("{CRON_JOBS}/test-api")).await;
    assert_eq!(uid(&got), uid(&created));
    let cjs = list(&s, CRON_JOBS, &selector).await;
    assert_eq!(items(&cjs).len(), 1, "filtered list should have 1 item");
    // watching
    let mut w = watch_from(&s, CRON_JOBS, &by_label(&selector), &rv(&cjs)).await;
    // cluster-wide listing and watching
    assert_eq!(
        items(&list(&s, &all_ns(CRON_JOBS), &selector).await).len(),
        1
    );
    let _cluster_watch = watch_from(&s, &all_ns(CRON_JOBS), &by_label(&selector), &rv(&cjs)).await;

    // patching, updating
    let patched = patch(
        &s,
        &format!("{CRON_JOBS}/test-api"),
        MERGE,
        json!({"metadata": {"annotations": {"patched": "true"}}}),
    )
    .await;
    assert_eq!(annotation(&patched, "patched"), "true");
    let updated = update(&s, &format!("{CRON_JOBS}/test-api"), |c| {
        c["metadata"]["annotations"]["updated"] = json!("true");
    })
    .await;
    assert_eq!(annotation(&updated, "updated"), "true");
    // watch events with the expected annotations, every one a modification
    until(&mut w, 30, "the patched annotation watched", |e| {
        assert_eq!(e["type"], "MODIFIED", "{e}");
        annotation(&e["object"], "patched") == "true"
    })
    .await;

    // patching /status
    let now1 = now_seconds();
    let st = patch(
        &s,
        &format!("{CRON_JOBS}/test-api/status"),
        MERGE,
        json!({"metadata": {"annotations": {"patchedstatus": "true"}}, "status": {"lastScheduleTime": now1}}),
    )
    .await;
    assert!(
        same_time(&st["status"]["lastScheduleTime"], &now1),
        "{}",
        st["status"]
    );
    assert_eq!(
        annotation(&st, "patchedstatus"),
        "true",
        "the patched annotation"
    );
    // updating /status
    let now2 = now_seconds();
    let st = update_at(
        &s,
        &format!("{CRON_JOBS}/test-api"),
        &format!("{CRON_JOBS}/test-api/status"),
        |c| {
            c["status"]["lastScheduleTime"] = json!(now2);
        },
    )
    .await;
    assert!(
        same_time(&st["status"]["lastScheduleTime"], &now2),
        "{}",
        st["status"]
    );
    // get /status
    let st = read(&s, &format!("{CRON_JOBS}/test-api/status")).await;
    assert_eq!(uid(&st), uid(&created));

    // deleting: gone, or held by a finalizer
    let expect_finalizer = |c: &Value| {
        assert!(!c["metadata"]["deletionTimestamp"].is_null(), "{c}");
        assert!(
            c["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty()),
            "{c}"
        );
    };
    template["metadata"]["name"] = json!("for-removal");
    create(&s, CRON_JOBS, template).await;
    let (code, out) = s.delete(&format!("{CRON_JOBS}/for-removal")).await;
    assert_eq!(code, 200, "{out}");
    match s.get(&format!("{CRON_JOBS}/for-removal")).await {
        (200, c) => expect_finalizer(&c),
        (404, _) => {}
        (code, out) => panic!("expected 404, got {code} {out}"),
    }
    // deleting a collection
    delete_collection(&s, CRON_JOBS, &selector, json!({})).await;
    let left = items(&list(&s, CRON_JOBS, &selector).await);
    assert!(left.len() <= 2, "{:?}", names(&left));
    for c in &left {
        expect_finalizer(c);
    }
}

// ---------------------------------------------------------------------------------------
// DisruptionController

const DEFAULT_LABELS: &str = "foo=bar";

/// `createPDBMinAvailableOrDie`, then `waitForPdbToBeProcessed`.
async fn create_pdb_min_available(s: &TestServer, ns: &str, name: &str, min: Value, labels: Value) {
    create(
        s,
        &format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": ns, "labels": labels},
               "spec": {"selector": {"matchLabels": {"foo": "bar"}}, "minAvailable": min}}),
    )
    .await;
    wait_pdb_processed(s, ns, name).await;
}

/// `waitForPdbToBeProcessed`: its generation observed.
async fn wait_pdb_processed(s: &TestServer, ns: &str, name: &str) -> Value {
    let path = format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}");
    eventually(60, &format!("pdb {name} processed"), || async {
        let p = read(s, &path).await;
        if int(&p, "/status/observedGeneration") >= int(&p, "/metadata/generation") {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
    .await
}

/// `createPodsOrDie`: pods `pod-<i>` labelled foo=bar.
async fn create_pods(s: &TestServer, n: usize) {
    for i in 0..n {
        let mut p = pod(&format!("pod-{i}"), json!({"foo": "bar"}), PAUSE);
        p["spec"]["containers"][0]["name"] = json!("donothing");
        p["spec"]["restartPolicy"] = json!("Always");
        create(s, PODS, p).await;
    }
}

/// `waitForPodsOrDie`: at least `n` of the foo=bar pods ready.
async fn wait_pods_ready(s: &TestServer, n: usize) {
    eventually(60, &format!("{n} pods ready"), || async {
        let ps = pods(s, DEFAULT_LABELS).await;
        let ready = ps.iter().filter(|p| is_ready(p) && live(p)).count();
        if ps.len() >= n && ready >= n {
            Ok(())
        } else {
            Err(summary(&ps))
        }
    })
    .await;
}

/// `locateRunningPod`: a ready pod of the namespace.
async fn locate_running_pod(s: &TestServer) -> Value {
    eventually(60, "a ready pod", || async {
        let ps = items(&read(s, PODS).await);
        ps.iter()
            .find(|p| is_ready(p) && live(p))
            .cloned()
            .ok_or_else(|| summary(&ps))
    })
    .await
}

/// `createReplicaSetOrDie`: `rs` of `n` foo=bar pods.
async fn create_pdb_replica_set(s: &TestServer, n: i64) {
    let mut rs = replica_set("rs", n, json!({"foo": "bar"}), "donothing", PAUSE);
    rs["metadata"].as_object_mut().unwrap().remove("labels");
    rs["spec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("terminationGracePeriodSeconds");
    create(s, RSS, rs).await;
}

async fn evict(s: &TestServer, pod: &str) -> (u16, Value) {
    s.post(
        &format!("{PODS}/{pod}/eviction"),
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
               "metadata": {"name": pod, "namespace": "default"}}),
    )
    .await
}

fn budget_refused(code: u16, out: &Value) -> bool {
    code == 429
        && out["details"]["causes"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "DisruptionBudget"))
}

/// [sig-apps] DisruptionController Listing PodDisruptionBudgets for all namespaces should list and delete a collection of PodDisruptionBudgets [Conformance]
#[tokio::test]
async fn disruption_controller_listing_pod_disruption_budgets_for_all_namespaces_should_list_and_delete_a_collection_of_pod_disruption_budgets()
 {
    let s = cluster("ca-pdb-collection").await;
    let other = "disruption-2";
    create(
        &s,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}),
    )
    .await;
    let special = json!({"foo_pdb": "bar_pdb"});
    let selector = "foo_pdb=bar_pdb";
    create_pdb_min_available(&s, "default", "foo", json!(2), special.clone()).await;
    create_pdb_min_available(&s, "default", "foo2", json!("1%"), special.clone()).await;
    create_pdb_min_available(&s, other, "foo3", json!(2), special).await;

    // listing the PDBs across all namespaces, then in one
    assert_eq!(
        names(&items(&list(&s, &all_ns(PDBS), selector).await)),
        ["foo", "foo2", "foo3"]
    );
    assert_eq!(
        names(&items(&list(&s, PDBS, selector).await)),
        ["foo", "foo2"]
    );
    // deleting the namespace's collection
    delete_collection(&s, PDBS, "", json!({})).await;
    eventually(60, "the PDB collection deleted", || async {
        let left = items(&read(&s, PDBS).await);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{:?}", names(&left)))
        }
    })
    .await;
}

/// [sig-apps] DisruptionController should create a PodDisruptionBudget [Conformance]
#[tokio::test]
async fn disruption_controller_should_create_a_pod_disruption_budget() {
    let s = cluster("ca-pdb-create").await;
    let path = format!("{PDBS}/foo");
    create_pdb_min_available(&s, "default", "foo", json!("1%"), json!({"foo": "bar"})).await;
    // updating the pdb
    let updated = update(&s, &path, |p| p["spec"]["minAvailable"] = json!("2%")).await;
    assert_eq!(updated["spec"]["minAvailable"], "2%");
    wait_pdb_processed(&s, "default", "foo").await;
    // patching it (read through /status first, as upstream does)
    read(&s, &format!("{path}/status")).await;
    let patched = patch(&s, &path, MERGE, json!({"spec": {"minAvailable": "3%"}})).await;
    assert_eq!(patched["spec"]["minAvailable"], "3%");
    wait_pdb_processed(&s, "default", "foo").await;
    // deleting it
    let (code, out) = s.delete(&path).await;
    assert_eq!(code, 200, "{out}");
    eventually(60, "the pdb deleted", || async {
        match s.get(&path).await {
            (404, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
}

/// [sig-apps] DisruptionController should observe PodDisruptionBudget status updated [Conformance]
#[tokio::test]
async fn disruption_controller_should_observe_pod_disruption_budget_status_updated() {
    let s = cluster("ca-pdb-observe").await;
    create_pdb_min_available(&s, "default", "foo", json!(1), json!({"foo": "bar"})).await;
    create_pods(&s, 3).await;
    wait_pods_ready(&s, 3).await;
    eventually(60, "disruptions allowed", || async {
        let p = read(&s, &format!("{PDBS}/foo")).await;
        if int(&p, "/status/disruptionsAllowed") > 0 {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
}

/// [sig-apps] DisruptionController should update/patch PodDisruptionBudget status [Conformance]
#[tokio::test]
async fn disruption_controller_should_update_patch_pod_disruption_budget_status() {
    let s = cluster("ca-pdb-status").await;
    let path = format!("{PDBS}/foo");
    create_pdb_min_available(&s, "default", "foo", json!(1), json!({"foo": "bar"})).await;
    // updating the status: DisruptedPods shows an update through the API at once (the pod
    // must exist, or the controller drops it)
    create_pods(&s, 1).await;
    wait_pods_ready(&s, 1).await;
    let pod = name(&locate_running_pod(&s).await);
    update_at(&s, &path, &format!("{path}/status"), |p| {
        p["status"]["disruptedPods"] = json!({pod.clone(): berth::types::now()});
    })
    .await;
    wait_pdb_processed(&s, "default", "foo").await;
    let st = read(&s, &format!("{path}/status")).await;
    assert!(
        st["status"]["disruptedPods"].get(&pod).is_some(),
        "{}",
        st["status"]
    );

    // patching the status: a merge patch that empties DisruptedPods
    read(&s, &format!("{path}/status")).await;
    let patched = patch(
        &s,
        &format!("{path}/status"),
        MERGE,
        json!({"status": {"disruptedPods": null}}),
    )
    .await;
    assert!(
        patched["status"]["disruptedPods"]
            .as_object()
            .is_none_or(|m| m.is_empty()),
        "{}",
        patched["status"]
    );
    wait_pdb_processed(&s, "default", "foo").await;
}

/// [sig-apps] DisruptionController should block an eviction until the PDB is updated to allow it [Conformance]
#[tokio::test]
async fn disruption_controller_should_block_an_eviction_until_the_pdb_is_updated_to_allow_it() {
    let s = cluster("ca-pdb-block").await;
    let path = format!("{PDBS}/foo");
    // a pdb that targets all three pods of a replica set
    create_pdb_min_available(&s, "default", "foo", json!(3), json!({"foo": "bar"})).await;
    create_pdb_replica_set(&s, 3).await;

    // first a pod that shouldn't be evictable
    wait_pods_ready(&s, 3).await;
    let pod = name(&locate_running_pod(&s).await);
    let (code, out) = evict(&s, &pod).await;
    assert!(
        budget_refused(code, &out),
        "eviction should fail with DisruptionBudget cause: {code} {out}"
    );

    // the pdb updated to allow one eviction
    update(&s, &path, |p| p["spec"]["minAvailable"] = json!(2)).await;
    wait_pdb_processed(&s, "default", "foo").await;
    // the same pod is evictable now
    wait_pods_ready(&s, 3).await;
    eventually(60, "the pdb observes 3 healthy pods", || async {
        let p = read(&s, &path).await;
        if int(&p, "/status/currentHealthy") == 3 && int(&p, "/status/desiredHealthy") == 2 {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let (code, out) = evict(&s, &pod).await;
    assert!(
        code == 200 || code == 201,
        "the eviction is now allowed: {code} {out}"
    );

    // the pdb patched to disallow evictions
    patch(
        &s,
        &path,
        MERGE,
        json!({"spec": {"minAvailable": null, "maxUnavailable": 0}}),
    )
    .await;
    wait_pdb_processed(&s, "default", "foo").await;
    wait_pods_ready(&s, 3).await;
    let pod = name(&locate_running_pod(&s).await);
    let (code, out) = evict(&s, &pod).await;
    assert!(
        budget_refused(code, &out),
        "eviction should fail with DisruptionBudget cause: {code} {out}"
    );

    // the pdb deleted: the pod is evictable
    let (code, out) = s.delete(&path).await;
    assert_eq!(code, 200, "{out}");
    eventually(60, "the pdb deleted", || async {
        match s.get(&path).await {
            (404, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
    wait_pods_ready(&s, 3).await;
    let (code, out) = evict(&s, &pod).await;
    assert!(
        code == 200 || code == 201,
        "the eviction is now allowed: {code} {out}"
    );
}
