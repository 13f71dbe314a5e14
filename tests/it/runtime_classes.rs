//! node.k8s.io/v1 RuntimeClass end to end: validation with field paths, the immutable
//! handler, kubectl's Table, and the RuntimeClass admission of pods (a missing class is
//! refused; a class's overhead and scheduling become the pod's).

use serde_json::json;

use crate::support::{TestServer, cause_fields, column_names};

const RCS: &str = "/apis/node.k8s.io/v1/runtimeclasses";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn pod(name: &str, class: &str) -> serde_json::Value {
    json!({"metadata": {"name": name},
           "spec": {"runtimeClassName": class,
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}})
}

#[tokio::test]
async fn runtime_classes_are_validated_and_admit_the_pods_that_name_them() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let (code, out) = s
        .post(
            RCS,
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                   "metadata": {"name": "sandboxed"}, "handler": "Not_A_Label",
                   "overhead": {"podFixed": {"memory": "-1Mi"}}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        cause_fields(&out),
        ["handler", "overhead.podFixed[memory]"],
        "{out}"
    );
    let (code, out) = s
        .post(
            RCS,
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                   "metadata": {"name": "sandboxed"}, "handler": "sandboxed",
                   "overhead": {"podFixed": {"memory": "64Mi", "cpu": "250m"}},
                   "scheduling": {"nodeSelector": {"sandbox": "yes"},
                                  "tolerations": [{"key": "sandbox", "operator": "Exists"}]}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    // The handler never changes.
    let (code, out) = s
        .patch(
            &format!("{RCS}/sandboxed"),
            "application/merge-patch+json",
            json!({"handler": "other"}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(out["details"]["causes"][0]["field"], "handler");
    assert_eq!(
        out["details"]["causes"][0]["message"],
        "Invalid value: \"other\": field is immutable"
    );
    // kubectl's columns.
    let t = s.table(RCS).await;
    assert_eq!(column_names(&t), ["Name", "Handler", "Age"]);
    let row = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "sandboxed")
        .expect("the class is listed");
    assert_eq!(row["cells"][1], "sandboxed");

    // A pod of a class that does not exist is refused.
    let (code, out) = s.post(PODS, pod("lost", "nowhere")).await;
    assert_eq!(code, 403, "{out}");
    assert_eq!(
        out["message"],
        "pod rejected: RuntimeClass \"nowhere\" not found"
    );
    // A pod of the class gets its overhead, node selector and toleration.
    let (code, p) = s.post(PODS, pod("boxed", "sandboxed")).await;
    assert_eq!(code, 201, "{p}");
    assert_eq!(
        p["spec"]["overhead"],
        json!({"memory": "64Mi", "cpu": "250m"})
    );
    assert_eq!(p["spec"]["nodeSelector"], json!({"sandbox": "yes"}));
    let tolerations = p["spec"]["tolerations"].as_array().unwrap();
    assert!(
        tolerations.contains(&json!({"key": "sandbox", "operator": "Exists"})),
        "{p}"
    );
    // A pod that contradicts the class is refused with upstream's words.
    let mut other = pod("clash", "sandboxed");
    other["spec"]["nodeSelector"] = json!({"sandbox": "no"});
    let (code, out) = s.post(PODS, other).await;
    assert_eq!(code, 403, "{out}");
    assert_eq!(
        out["message"],
        "pod rejected: conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"
    );
    // An overhead without a class to give it, as upstream refuses it.
    let mut other = pod("unclassed", "");
    other["spec"]
        .as_object_mut()
        .unwrap()
        .remove("runtimeClassName");
    other["spec"]["overhead"] = json!({"memory": "1Mi"});
    let (code, out) = s.post(PODS, other).await;
    assert_eq!(code, 403, "{out}");
    assert_eq!(
        out["message"],
        "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    );
    let mut other = pod("heavy", "sandboxed");
    other["spec"]["overhead"] = json!({"memory": "1Gi"});
    let (code, out) = s.post(PODS, other).await;
    assert_eq!(code, 403, "{out}");
    assert_eq!(
        out["message"],
        "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
    );
    s.stop().await;
}

/// The node makes the RuntimeClass of its runtime (`process`); a pod of it runs, and a pod
/// whose class names a handler the node lacks waits in ContainerCreating with upstream's
/// `FailedCreatePodSandBox` event.
#[tokio::test]
async fn the_node_runs_pods_of_its_handler_and_holds_back_the_others() {
    let s = crate::node::server().await;
    let class = crate::support::eventually(30, "the node's RuntimeClass", || async {
        let (code, rc) = s.get(&format!("{RCS}/process")).await;
        if code == 200 {
            Ok(rc)
        } else {
            Err(rc.to_string())
        }
    })
    .await;
    assert_eq!(class["handler"], "process");
    let mut running = pod("plain", "process");
    running["spec"]["containers"][0]["command"] = json!(["sleep", "3600"]);
    let (code, out) = s.post(PODS, running).await;
    assert_eq!(code, 201, "{out}");
    crate::node::pod_until(&s, "plain", "the pod of the process class runs", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let (code, out) = s
        .post(
            RCS,
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                   "metadata": {"name": "gvisor"}, "handler": "runsc"}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let (code, out) = s.post(PODS, pod("held", "gvisor")).await;
    assert_eq!(code, 201, "{out}");
    let held = crate::node::pod_until(&s, "held", "the pod waits for its sandbox", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    })
    .await;
    assert_eq!(held["status"]["phase"], "Pending");
    let want = (
        "FailedCreatePodSandBox".to_string(),
        "Failed to create pod sandbox: no runtime for \"runsc\" is configured".to_string(),
    );
    crate::support::eventually(30, "the sandbox event", || async {
        let events = s.events_of("held").await;
        if events.contains(&want) {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    for name in ["plain", "held"] {
        s.delete(&format!("{PODS}/{name}?gracePeriodSeconds=0"))
            .await;
    }
    s.stop().await;
}
