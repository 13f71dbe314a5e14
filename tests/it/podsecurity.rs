//! Pod Security admission against a real server: `baseline` enforced where a namespace
//! says nothing (host namespaces, `hostPath`, host ports, privileged containers refused
//! with upstream's 403 text), `kube-system` privileged, `restricted` by label, `warn` as
//! `Warning` headers (for workloads' templates too), invalid labels refused, and a new
//! `enforce` level warning of the pods that break it.

use serde_json::{Value, json};

use crate::support::TestServer;

/// Sends `body` to `path`; the status, the answer and its `Warning` headers.
async fn post(s: &TestServer, path: &str, body: Value) -> (u16, Value, Vec<String>) {
    let resp = s
        .req(reqwest::Method::POST, path)
        .json(&body)
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    (code, resp.json().await.unwrap(), warnings)
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] =
            json!([{"name": "app", "image": "busybox", "command": ["sleep", "1"]}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

#[tokio::test]
async fn baseline_is_enforced_unless_a_namespace_says_otherwise() {
    let s = TestServer::start().await;
    let pods = "/api/v1/namespaces/default/pods";
    // A plain pod is fine; one that reaches the host is refused, saying why.
    let (code, out, warnings) = post(&s, pods, pod("plain", json!({}))).await;
    assert_eq!(code, 201, "{out}");
    assert!(warnings.is_empty(), "{warnings:?}");
    let host = json!({
        "hostNetwork": true,
        "volumes": [{"name": "data", "hostPath": {"path": "/"}}],
        "containers": [{"name": "app", "image": "busybox",
            "ports": [{"containerPort": 80, "hostPort": 8080}],
            "securityContext": {"privileged": true}}],
    });
    let (code, out, _) = post(&s, pods, pod("host", host.clone())).await;
    assert_eq!(code, 403, "{out}");
    assert_eq!(out["reason"], "Forbidden");
    assert_eq!(
        out["message"],
        "pods \"host\" is forbidden: violates PodSecurity \"baseline:latest\": \
         host namespaces (hostNetwork=true), hostPath volumes (volume \"data\"), \
         hostPort (container \"app\" uses hostPort 8080), \
         privileged (container \"app\" must not set securityContext.privileged=true)"
    );
    // Nor as a workload: its template is warned of when it is written.
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "hosted"},
        "spec": {"selector": {"matchLabels": {"app": "h"}}, "template": {
            "metadata": {"labels": {"app": "h"}},
            "spec": {"hostPID": true, "containers": [{"name": "app", "image": "busybox"}]}}},
    });
    let (code, out, warnings) = post(
        &s,
        "/apis/apps/v1/namespaces/default/deployments",
        deployment,
    )
    .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(
        warnings,
        [
            "299 - \"would violate PodSecurity \\\"baseline:latest\\\": host namespaces (hostPID=true)\""
        ]
    );
    // kube-system, where berth's own components live, is privileged.
    let (code, out, _) = post(
        &s,
        "/api/v1/namespaces/kube-system/pods",
        pod("host", host.clone()),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    // So is a namespace an admin labels for it.
    let (code, out, _) = post(
        &s,
        "/api/v1/namespaces",
        namespace(
            "infra",
            json!({"pod-security.kubernetes.io/enforce": "privileged"}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    let (code, out, _) = post(&s, "/api/v1/namespaces/infra/pods", pod("host", host)).await;
    assert_eq!(code, 201, "{out}");
    // A label of no level is refused.
    let (code, out, _) = post(
        &s,
        "/api/v1/namespaces",
        namespace(
            "odd",
            json!({"pod-security.kubernetes.io/enforce": "strict"}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("must be one of privileged, baseline, restricted"),
        "{out}"
    );
    s.stop().await;
}

#[tokio::test]
async fn restricted_namespaces_warn_and_enforce_by_their_labels() {
    let s = TestServer::start().await;
    let (code, out, _) = post(
        &s,
        "/api/v1/namespaces",
        namespace(
            "dev",
            json!({"pod-security.kubernetes.io/warn": "restricted"}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    let pods = "/api/v1/namespaces/dev/pods";
    // Baseline is enforced, restricted only warned of.
    let (code, out, warnings) = post(&s, pods, pod("loose", json!({}))).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for part in [
        "would violate PodSecurity \\\"restricted:latest\\\": ",
        "allowPrivilegeEscalation != false (container \\\"app\\\" must set securityContext.allowPrivilegeEscalation=false)",
        "unrestricted capabilities (container \\\"app\\\" must set securityContext.capabilities.drop=[\\\"ALL\\\"])",
        "runAsNonRoot != true",
        "seccompProfile",
    ] {
        assert!(warnings[0].contains(part), "{part} in {}", warnings[0]);
    }
    // Enforcing restricted warns of the pod that breaks it, and refuses the next one.
    let (code, out) = s
        .patch(
            "/api/v1/namespaces/dev",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let resp = s
        .req(reqwest::Method::PATCH, "/api/v1/namespaces/dev")
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"v1.30"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains(
            "existing pods in namespace \\\"dev\\\" violate the new PodSecurity enforce level \\\"restricted:v1.30\\\""
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("loose: allowPrivilegeEscalation != false, unrestricted capabilities"),
        "{warnings:?}"
    );
    let (code, out, _) = post(&s, pods, pod("loose2", json!({}))).await;
    assert_eq!(code, 403, "{out}");
    assert!(
        out["message"].as_str().unwrap().starts_with(
            "pods \"loose2\" is forbidden: violates PodSecurity \"restricted:v1.30\": allowPrivilegeEscalation != false"
        ),
        "{out}"
    );
    // A pod locked down as restricted asks is admitted.
    let locked = json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "busybox", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    });
    let (code, out, warnings) = post(&s, pods, pod("locked", locked)).await;
    assert_eq!(code, 201, "{out}");
    assert!(warnings.is_empty(), "{warnings:?}");
    s.stop().await;
}
