//! Upstream conformance and e2e tests outside `[sig-apps]` whose findings berth fixed,
//! ported as `conformance_apps.rs` ports those: one test per upstream test, named after
//! it, with its steps and assertions against a real server.
//! - `[sig-auth] ServiceAccounts should guarantee kube-root-ca.crt exist in any namespace
//!   [Conformance]` (`test/e2e/auth/service_accounts.go`);
//! - `[sig-storage] ConfigMap should be immutable if `immutable` field is set
//!   [Conformance]` and its Secret twin (`test/e2e/common/storage/{configmap,secrets}_volume.go`);
//! - `[sig-node] Sysctls should reject invalid sysctls` (`test/e2e/common/node/sysctl.go`);
//! - the Services of `test/e2e/network/service.go`, which leave `targetPort` out (or send
//!   the zero value typed clients send);
//! - `[sig-apps] StatefulSet` specs whose containers mount their claim templates' volumes,
//!   as every StatefulSet with storage does (`test/e2e/framework/statefulset`'s `NewStatefulSet`).

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const ROOT_CA: &str = "kube-root-ca.crt";

async fn create_namespace(s: &TestServer, name: &str) {
    let (code, out) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": name}}))
        .await;
    assert_eq!(code, 201, "{out}");
}

#[tokio::test]
async fn service_accounts_should_guarantee_kube_root_ca_crt_exist_in_any_namespace() {
    let s = TestServer::start().await;
    create_namespace(&s, "rootca").await;
    let path = format!("/api/v1/namespaces/rootca/configmaps/{ROOT_CA}");
    let got = eventually(30, "the root CA map is published", || async {
        match s.get(&path).await {
            (200, cm) => Ok(cm),
            (_, other) => Err(other.to_string()),
        }
    })
    .await;
    assert_eq!(got["data"]["ca.crt"], s.ca_pem.as_str());
    assert!(
        got["metadata"]["annotations"]["kubernetes.io/description"]
            .as_str()
            .is_some_and(|d| d.contains("verify the kube-apiserver")),
        "{got}"
    );
    // Every namespace has it, the ones made at start too.
    for ns in ["default", "kube-system"] {
        eventually(30, &format!("{ns} has the map"), || async {
            match s
                .get(&format!("/api/v1/namespaces/{ns}/configmaps/{ROOT_CA}"))
                .await
            {
                (200, _) => Ok(()),
                (_, other) => Err(other.to_string()),
            }
        })
        .await;
    }

    let (code, out) = s
        .call(
            reqwest::Method::DELETE,
            &path,
            Some(json!({"gracePeriodSeconds": 0})),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(30, "a new root ca configmap is created", || async {
        match s.get(&path).await {
            (200, cm) if cm["metadata"]["uid"] != got["metadata"]["uid"] => Ok(()),
            (_, other) => Err(other.to_string()),
        }
    })
    .await;

    // An update without a resourceVersion, as the upstream test makes it.
    let (code, out) = s
        .put(
            &path,
            json!({"metadata": {"name": ROOT_CA}, "data": {"ca.crt": ""}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(30, "the root ca configmap is reconciled", || async {
        let (_, cm) = s.get(&path).await;
        match cm["data"]["ca.crt"].as_str() {
            Some(v) if !v.is_empty() => Ok(()),
            _ => Err(cm.to_string()),
        }
    })
    .await;
}

/// The steps of the upstream tests of an immutable ConfigMap or Secret at `collection`:
/// `data` changes while mutable, not once immutable, nor back to mutable; metadata still
/// changes and the object can be deleted.
async fn immutable_object(s: &TestServer, collection: &str, mut obj: Value, value: &str) {
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let path = format!("{collection}/{name}");
    let (code, out) = s.post(collection, obj.clone()).await;
    assert_eq!(code, 201, "{out}");
    obj = out;
    obj["data"]["data-4"] = json!(value);
    let (code, out) = s.put(&path, obj).await;
    assert_eq!(code, 200, "data can be updated: {out}");
    obj = out;
    obj["immutable"] = json!(true);
    let (code, out) = s.put(&path, obj).await;
    assert_eq!(code, 200, "marked immutable: {out}");
    obj = out;

    let mut changed = obj.clone();
    changed["data"]["data-5"] = json!(value);
    let (code, out) = s.put(&path, changed).await;
    assert_eq!(code, 422, "data can't be updated: {out}");
    assert_eq!(out["reason"], "Invalid", "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("data: Forbidden: field is immutable when `immutable` is set"),
        "{out}"
    );

    let (_, mut current) = s.get(&path).await;
    current["immutable"] = json!(false);
    let (code, out) = s.put(&path, current).await;
    assert_eq!(code, 422, "can't be switched back to mutable: {out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("immutable: Forbidden: field is immutable when `immutable` is set"),
        "{out}"
    );

    let (_, mut current) = s.get(&path).await;
    current["metadata"]["labels"] = json!({"label1": "value1"});
    let (code, out) = s.put(&path, current).await;
    assert_eq!(code, 200, "metadata can be changed: {out}");
    let (code, out) = s.delete(&path).await;
    assert_eq!(code, 200, "an immutable object can be deleted: {out}");
}

#[tokio::test]
async fn configmap_should_be_immutable_if_immutable_field_is_set() {
    let s = TestServer::start().await;
    let cm = json!({
        "metadata": {"name": "configmap-test-immutable"},
        "data": {"data-1": "value-1", "data-2": "value-2", "data-3": "value-3"},
    });
    immutable_object(&s, "/api/v1/namespaces/default/configmaps", cm, "value-4").await;
}

#[tokio::test]
async fn secrets_should_be_immutable_if_immutable_field_is_set() {
    let s = TestServer::start().await;
    let b64 = "dmFsdWUtMQo=";
    let secret = json!({
        "metadata": {"name": "secret-test-immutable"},
        "data": {"data-1": b64, "data-2": b64, "data-3": b64},
    });
    immutable_object(&s, "/api/v1/namespaces/default/secrets", secret, b64).await;
    // A Secret's type never changes.
    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, out) = s
        .post(
            secrets,
            json!({"metadata": {"name": "typed"}, "type": "Opaque"}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let mut retyped = out;
    retyped["type"] = json!("example.com/other");
    let (code, out) = s.put(&format!("{secrets}/typed"), retyped).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("type: Invalid value: \"example.com/other\": field is immutable"),
        "{out}"
    );
}

#[tokio::test]
async fn sysctls_should_reject_invalid_sysctls() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let pod = json!({
        "metadata": {"name": "sysctl-invalid"},
        "spec": {
            "securityContext": {"sysctls": [
                {"name": "foo-", "value": "bar"},
                {"name": "kernel.shmmax", "value": "100000000"},
                {"name": "safe-and-unsafe", "value": "100000000"},
                {"name": "bar..", "value": "42"},
            ]},
            "containers": [{"name": "test-container", "image": "busybox", "command": ["true"]}],
        },
    });
    let (code, out) = s.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 422, "{out}");
    let message = out["message"].as_str().unwrap();
    assert!(message.contains(r#"Invalid value: "foo-""#), "{message}");
    assert!(message.contains(r#"Invalid value: "bar..""#), "{message}");
    assert!(!message.contains("safe-and-unsafe"), "{message}");
    assert!(!message.contains("kernel.shmmax"), "{message}");
    // A name given twice is a duplicate; slashes separate segments too.
    let pod = json!({
        "metadata": {"name": "sysctl-twice"},
        "spec": {
            "securityContext": {"sysctls": [
                {"name": "net/ipv4/ip_local_port_range", "value": "1024 65535"},
                {"name": "kernel.shm_rmid_forced", "value": "1"},
                {"name": "kernel.shm_rmid_forced", "value": "0"},
            ]},
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
        },
    });
    let (code, out) = s.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        crate::support::cause_fields(&out),
        ["spec.securityContext.sysctls[2].name"],
        "{out}"
    );
}

#[tokio::test]
async fn a_service_without_a_target_port_targets_its_port() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let services = "/api/v1/namespaces/default/services";
    for (name, port) in [
        ("absent", json!({"name": "http", "port": 80})),
        ("zero", json!({"name": "http", "port": 81, "targetPort": 0})),
        (
            "empty",
            json!({"name": "http", "port": 82, "targetPort": ""}),
        ),
    ] {
        let svc = json!({"metadata": {"name": name}, "spec": {"ports": [port.clone()]}});
        let (code, out) = s.post(services, svc).await;
        assert_eq!(code, 201, "{name}: {out}");
        assert_eq!(
            out["spec"]["ports"][0]["targetPort"], port["port"],
            "{name}: {out}"
        );
    }
}

#[tokio::test]
async fn a_stateful_set_mounts_the_volumes_of_its_claim_templates() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let sts = json!({
        "metadata": {"name": "web"},
        "spec": {
            "serviceName": "nginx",
            "replicas": 1,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{
                    "name": "nginx", "image": "registry.k8s.io/nginx-slim:0.8",
                    "volumeMounts": [{"name": "www", "mountPath": "/usr/share/nginx/html"}],
                }]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "www"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    });
    let stss = "/apis/apps/v1/namespaces/default/statefulsets";
    let (code, out) = s.post(stss, sts.clone()).await;
    assert_eq!(code, 201, "{out}");
    // A mount of neither a volume nor a claim template is still refused.
    let mut wrong = sts;
    wrong["metadata"]["name"] = json!("wrong");
    wrong["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = json!("nope");
    let (code, out) = s.post(stss, wrong).await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        crate::support::cause_fields(&out),
        ["spec.template.spec.containers[0].volumeMounts[0].name"]
    );
}

#[tokio::test]
async fn a_status_body_ends_with_a_newline_as_kube_apiserver_writes_it() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let resp = s
        .req(
            reqwest::Method::GET,
            "/api/v1/namespaces/default/configmaps/missing",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body = resp.text().await.unwrap();
    assert!(body.starts_with(r#"{"kind":"Status""#), "{body}");
    assert!(body.ends_with("}\n"), "{body:?}");
}

/// Runs `pod` (its container printing its environment) to completion; returns its log.
async fn output_of(s: &TestServer, pod: Value) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let (code, out) = s.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 201, "{out}");
    crate::node::pod_until(s, &name, "the pod succeeds", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    let (code, log) = s
        .text(&format!("/api/v1/namespaces/default/pods/{name}/log"))
        .await;
    assert_eq!(code, 200, "{log}");
    log
}

#[tokio::test]
async fn secrets_should_be_consumable_from_pods_in_env_vars() {
    let s = crate::node::server().await;
    let secret = json!({
        "metadata": {"name": "secret-test"},
        "data": {"data-1": "dmFsdWUtMQ==", "data-2": "dmFsdWUtMg=="},
    });
    let (code, out) = s.post("/api/v1/namespaces/default/secrets", secret).await;
    assert_eq!(code, 201, "{out}");
    let pod = json!({
        "metadata": {"name": "pod-secrets-env"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "secret-env-test", "image": "busybox", "command": ["sh", "-c", "env"],
                "env": [{"name": "SECRET_DATA", "valueFrom": {"secretKeyRef":
                    {"name": "secret-test", "key": "data-1"}}}],
            }],
        },
    });
    let log = output_of(&s, pod).await;
    assert!(log.lines().any(|l| l == "SECRET_DATA=value-1"), "{log}");
    // envFrom with a prefix, as "should be consumable via the environment".
    let pod = json!({
        "metadata": {"name": "pod-secrets-envfrom"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                // `env` itself: the host's dash would drop names with '-' on its way.
                "name": "env-test", "image": "busybox", "command": ["env"],
                "envFrom": [{"secretRef": {"name": "secret-test"}},
                            {"prefix": "p-", "secretRef": {"name": "secret-test"}}],
            }],
        },
    });
    let log = output_of(&s, pod).await;
    for line in [
        "data-1=value-1",
        "data-2=value-2",
        "p-data-1=value-1",
        "p-data-2=value-2",
    ] {
        assert!(log.lines().any(|l| l == line), "{line} in {log}");
    }
}

#[tokio::test]
async fn downward_api_should_provide_container_limits_and_requests_as_env_vars() {
    let s = crate::node::server().await;
    let env = json!([
        {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
        {"name": "CPU_REQUEST", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
        {"name": "MEMORY_REQUEST", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
    ]);
    let pod = |name: &str, resources: Value| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "dapi-container", "image": "busybox",
                                "command": ["sh", "-c", "env"], "env": env,
                                "resources": resources}],
            },
        })
    };
    let resources = json!({
        "requests": {"cpu": "250m", "memory": "32Mi"},
        "limits": {"cpu": "1250m", "memory": "64Mi"},
    });
    let log = output_of(&s, pod("downward-api-limits", resources)).await;
    for line in [
        "CPU_LIMIT=2",
        "MEMORY_LIMIT=67108864",
        "CPU_REQUEST=1",
        "MEMORY_REQUEST=33554432",
    ] {
        assert!(log.lines().any(|l| l == line), "{line} in {log}");
    }
    // Without limits: the node's allocatable.
    let log = output_of(&s, pod("downward-api-defaults", json!({}))).await;
    for var in ["CPU_LIMIT", "MEMORY_LIMIT"] {
        let value = log
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{var}=")))
            .unwrap_or_else(|| panic!("{var} in {log}"));
        assert!(value.parse::<u64>().is_ok_and(|v| v >= 1), "{var}={value}");
    }
}

#[tokio::test]
async fn init_container_should_invoke_init_containers_on_a_restart_never_pod() {
    let s = crate::node::server().await;
    let pod = json!({
        "metadata": {"name": "pod-init", "labels": {"name": "foo"}},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [
                {"name": "init1", "image": "busybox", "command": ["/bin/true"]},
                {"name": "init2", "image": "busybox", "command": ["/bin/true"]},
            ],
            "containers": [{"name": "run1", "image": "busybox", "command": ["/bin/true"]}],
        },
    });
    let (code, out) = s.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 201, "{out}");
    let end = crate::node::pod_until(&s, "pod-init", "the pod succeeds", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    let initialized = berth::types::condition(&end, "Initialized").unwrap();
    assert_eq!(initialized["status"], "True", "{end}");
    let statuses = end["status"]["initContainerStatuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 2, "{end}");
    for status in statuses {
        assert_eq!(status["ready"], true, "{status}");
        assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{status}");
    }
}

const PRIORITY_CLASSES: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";

#[tokio::test]
async fn priority_classes_are_served_built_in_and_resolved_into_pods_priority() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let pods = "/api/v1/namespaces/default/pods";
    // The built-in classes, as every cluster has them.
    for (name, value) in [
        ("system-node-critical", 2_000_001_000i64),
        ("system-cluster-critical", 2_000_000_000),
    ] {
        let (code, pc) = s.get(&format!("{PRIORITY_CLASSES}/{name}")).await;
        assert_eq!(code, 200, "{pc}");
        assert_eq!(pc["value"], value);
        assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
        let (code, out) = s.delete(&format!("{PRIORITY_CLASSES}/{name}")).await;
        assert_eq!(code, 403, "built-in classes stay: {out}");
    }
    let table = s.table(PRIORITY_CLASSES).await;
    assert_eq!(
        crate::support::column_names(&table),
        ["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"]
    );

    let class = |name: &str, value: i64, default: bool| json!({"metadata": {"name": name}, "value": value, "globalDefault": default});
    let (code, out) = s.post(PRIORITY_CLASSES, class("high", 1000, false)).await;
    assert_eq!(code, 201, "{out}");
    let pod = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "busybox", "command": ["true"]}]);
        json!({"metadata": {"name": name}, "spec": spec})
    };
    let (code, out) = s
        .post(pods, pod("important", json!({"priorityClassName": "high"})))
        .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["spec"]["priority"], 1000);
    assert_eq!(out["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    let (code, out) = s
        .post(
            pods,
            pod(
                "critical",
                json!({"priorityClassName": "system-node-critical"}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["spec"]["priority"], 2_000_001_000i64);
    let (code, out) = s.post(pods, pod("plain", json!({}))).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["spec"]["priority"], 0);
    let (code, out) = s
        .post(pods, pod("lost", json!({"priorityClassName": "nope"})))
        .await;
    assert_eq!(code, 403, "{out}");
    assert_eq!(
        out["message"],
        "pods \"lost\" is forbidden: no PriorityClass with name nope was found"
    );
    let (code, out) = s
        .post(
            pods,
            pod("liar", json!({"priorityClassName": "high", "priority": 7})),
        )
        .await;
    assert_eq!(code, 403, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("the integer value of priority (7) must not be provided in pod spec"),
        "{out}"
    );

    // One global default, given to pods that name no class.
    let (code, out) = s.post(PRIORITY_CLASSES, class("usual", 10, true)).await;
    assert_eq!(code, 201, "{out}");
    let (code, out) = s.post(PRIORITY_CLASSES, class("another", 20, true)).await;
    assert_eq!(code, 403, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains(
            "PriorityClass usual is already marked as default. Only one default can exist"
        ),
        "{out}"
    );
    let (code, out) = s.post(pods, pod("defaulted", json!({}))).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["spec"]["priority"], 10);
    assert_eq!(out["spec"]["priorityClassName"], "usual");

    // The rules of the kind.
    let (_, mut high) = s.get(&format!("{PRIORITY_CLASSES}/high")).await;
    high["value"] = json!(2000);
    let (code, out) = s.put(&format!("{PRIORITY_CLASSES}/high"), high).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("value: Forbidden: may not be changed in an update."),
        "{out}"
    );
    let (code, out) = s
        .post(PRIORITY_CLASSES, class("too-high", 1_000_000_001, false))
        .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(crate::support::cause_fields(&out), ["value"], "{out}");
    let (code, out) = s
        .post(PRIORITY_CLASSES, class("system-mine", 5, false))
        .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        crate::support::cause_fields(&out),
        ["metadata.name"],
        "{out}"
    );
}

/// The terminated state of the only container of the pod made of `container`, once the
/// pod reaches `phase` (the Container Runtime blackbox tests' `matchTerminationMessage`).
async fn terminated_as(s: &TestServer, name: &str, container: Value, phase: &str) -> Value {
    let pod = json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    });
    let (code, out) = s.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 201, "{out}");
    let p = crate::node::pod_until(s, name, &format!("the pod is {phase}"), |p| {
        p["status"]["phase"] == phase
    })
    .await;
    p["status"]["containerStatuses"][0]["state"]["terminated"].clone()
}

#[tokio::test]
async fn container_runtime_should_report_termination_message_as_the_kubelet_does() {
    let s = crate::node::server().await;
    let busybox = |script: &str| {
        json!({"name": "termination-message-container", "image": "busybox",
               "command": ["/bin/sh", "-c", script]})
    };
    // if TerminationMessagePath is set as non-root user and at a non-default path
    let mut c = busybox("echo -n DONE > /dev/termination-custom-log");
    c["terminationMessagePath"] = json!("/dev/termination-custom-log");
    let t = terminated_as(&s, "custom-path", c, "Succeeded").await;
    assert_eq!(t["message"], "DONE", "{t}");
    // from log output if TerminationMessagePolicy FallbackToLogsOnError is set
    let mut c = busybox("echo -n DONE; /bin/false");
    c["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    let t = terminated_as(&s, "from-logs", c, "Failed").await;
    assert_eq!(t["message"], "DONE", "{t}");
    // as empty when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set
    let mut c = busybox("echo -n DONE; /bin/true");
    c["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    let t = terminated_as(&s, "empty", c, "Succeeded").await;
    assert_eq!(t.get("message"), None, "{t}");
    // from file when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set
    let mut c = busybox("echo -n OK > /dev/termination-log");
    c["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    let t = terminated_as(&s, "from-file", c, "Succeeded").await;
    assert_eq!(t["message"], "OK", "{t}");
    // Each container has a file of its own: the host's path is not written.
    let host = std::fs::read("/dev/termination-log").unwrap_or_default();
    assert!(
        !host.starts_with(b"OK"),
        "the host's /dev/termination-log is untouched"
    );
}

#[tokio::test]
async fn a_container_that_cannot_run_says_why_and_when() {
    let s = crate::node::server().await;
    // No command, and an image the node does not have: the message says what to do.
    let pod = json!({
        "metadata": {"name": "no-command"},
        "spec": {"containers": [{"name": "c", "image": "example.com/app:1"}]},
    });
    let (code, out) = s.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(code, 201, "{out}");
    let p = crate::node::pod_until(&s, "no-command", "the pod waits", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    })
    .await;
    let message = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("\"example.com/app:1\" is not in this node's store")
            && message.ends_with("give the container a command"),
        "{message}"
    );
    // A command that cannot start: terminated with a start time (when it was tried), not
    // none, which clients print as the year 1.
    let t = terminated_as(
        &s,
        "cannot-start",
        json!({"name": "c", "image": "busybox", "command": ["/nonexistent/program"]}),
        "Failed",
    )
    .await;
    assert_eq!(t["reason"], "ContainerCannotRun", "{t}");
    assert!(
        t["startedAt"]
            .as_str()
            .is_some_and(|at| at.starts_with("20")),
        "{t}"
    );
    assert_eq!(t["startedAt"], t["finishedAt"], "{t}");
}
