//! `pods/{name}/proxy` and `services/{name}/proxy` refusing what they must, against a
//! real server without a pod network (`podnet.rs` proxies to real pods): a pod without
//! a routable address, an unknown name, a port the Service does not have, a Service
//! without endpoints or whose Endpoints name an address no pod has, another namespace's
//! account; and discovery listing both subresources.

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const NS: &str = "/api/v1/namespaces/default";

async fn call(s: &TestServer, token: Option<&str>, path: &str) -> (u16, Value) {
    let r = s
        .client
        .get(format!("{}{path}", s.url))
        .bearer_auth(token.unwrap_or(&s.token))
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

async fn refused(s: &TestServer, path: &str, code: u16, says: &str) {
    let (got, status) = call(s, None, path).await;
    assert_eq!(got, code, "{path}: {status}");
    assert_eq!(status["kind"], "Status", "{path}: {status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{path}: {message}");
}

#[tokio::test]
async fn proxies_refuse_what_they_cannot_or_must_not_reach() {
    let s = TestServer::start().await;
    let (code, out) = s
        .post(
            &format!("{NS}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 8080}]}]}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    // No address yet, then one of the node's own: never proxied to.
    refused(
        &s,
        &format!("{NS}/pods/web/proxy/"),
        400,
        "address not allowed",
    )
    .await;
    let (code, out) = s
        .patch(
            &format!("{NS}/pods/web/status"),
            "application/merge-patch+json",
            json!({"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    refused(
        &s,
        &format!("{NS}/pods/web:8080/proxy/"),
        400,
        "address not allowed",
    )
    .await;
    refused(&s, &format!("{NS}/pods/nobody/proxy/"), 404, "not found").await;
    refused(
        &s,
        &format!("{NS}/pods/ftp:web:21/proxy/"),
        400,
        "invalid pods request",
    )
    .await;
    refused(
        &s,
        &format!("{NS}/pods/web:http/proxy/"),
        400,
        "invalid port",
    )
    .await;

    // A Service: unknown, a port it does not have, no endpoints yet.
    refused(
        &s,
        &format!("{NS}/services/nothing/proxy/"),
        404,
        "not found",
    )
    .await;
    let (code, out) = s
        .post(
            &format!("{NS}/services"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "manual"},
                   "spec": {"ports": [{"name": "http", "port": 80}]}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    refused(
        &s,
        &format!("{NS}/services/manual:81/proxy/"),
        503,
        "no service port 81",
    )
    .await;
    refused(
        &s,
        &format!("{NS}/services/manual/proxy/"),
        503,
        "no endpoints available",
    )
    .await;
    // Endpoints written by hand that name an address no pod has: not followed.
    let (code, out) = s
        .post(
            &format!("{NS}/endpoints"),
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
                   "subsets": [{"addresses": [{"ip": "10.1.2.3"}],
                                "ports": [{"name": "http", "port": 80}]}]}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    refused(
        &s,
        &format!("{NS}/services/manual:80/proxy/"),
        503,
        "no endpoints available",
    )
    .await;
    refused(
        &s,
        &format!("{NS}/services/manual:http/proxy/x"),
        503,
        "no endpoints available",
    )
    .await;

    // Another namespace's account may not proxy into this one.
    let (code, out) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": "other"}}))
        .await;
    assert_eq!(code, 201, "{out}");
    let (token, _) = crate::accounts::token(&s, "other", "default").await;
    for path in [
        format!("{NS}/pods/web/proxy/"),
        format!("{NS}/services/manual/proxy/"),
    ] {
        let (code, status) = call(&s, Some(&token), &path).await;
        assert_eq!(code, 403, "{path}: {status}");
    }

    // Discovery names both.
    let resources = eventually(5, "discovery", || async {
        let (code, list) = s.get("/api/v1").await;
        if code == 200 {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"pods/proxy"), "{names:?}");
    assert!(names.contains(&"services/proxy"), "{names:?}");
}
