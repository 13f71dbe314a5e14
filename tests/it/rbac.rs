//! RBAC end to end: service accounts refused with kube-apiserver's 403 texts until a
//! binding grants them, cluster-wide bindings, aggregation into the default roles, the
//! escalation and bind checks, impersonation, and the access reviews (`kubectl auth
//! can-i`, `--list`, `whoami`).

use serde_json::{Value, json};

use crate::accounts::token;
use crate::support::{TestServer, cause_fields, eventually};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// Sends a request with `token` (and extra headers); the code and the JSON answer.
async fn call_as(
    s: &TestServer,
    token: &str,
    headers: &[(&str, &str)],
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = s
        .client
        .request(method, format!("{}{path}", s.url))
        .bearer_auth(token);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (code, v)
}

async fn get_as(s: &TestServer, token: &str, path: &str) -> (u16, Value) {
    call_as(s, token, &[], reqwest::Method::GET, path, None).await
}

async fn post_as(s: &TestServer, token: &str, path: &str, body: Value) -> (u16, Value) {
    call_as(s, token, &[], reqwest::Method::POST, path, Some(body)).await
}

/// A namespace `ns` and the token of its `default` service account.
async fn account(s: &TestServer, ns: &str) -> String {
    let (code, out) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": ns}}))
        .await;
    assert_eq!(code, 201, "{out}");
    token(s, ns, "default").await.0
}

fn sa(ns: &str) -> Value {
    json!({"kind": "ServiceAccount", "name": "default", "namespace": ns})
}

async fn created(s: &TestServer, path: &str, body: Value) {
    let (code, out) = s.post(path, body).await;
    assert_eq!(code, 201, "{out}");
}

#[tokio::test]
async fn a_service_account_reads_secrets_only_once_a_role_binding_grants_it() {
    let s = TestServer::start().await;
    let tok = account(&s, "team").await;
    let (code, st) = get_as(&s, &tok, "/api/v1/namespaces/team/secrets").await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(st["reason"], "Forbidden");
    assert_eq!(
        st["message"],
        "secrets is forbidden: User \"system:serviceaccount:team:default\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team\""
    );
    assert_eq!(st["details"], json!({"kind": "secrets"}));
    let (code, st) = get_as(&s, &tok, "/api/v1/namespaces/team/secrets/default-token").await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "secrets \"default-token\" is forbidden: User \"system:serviceaccount:team:default\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team\""
    );
    assert_eq!(
        st["details"],
        json!({"name": "default-token", "kind": "secrets"})
    );
    // Discovery is everyone's; the metrics are not.
    for path in ["/api", "/apis", "/api/v1", "/apis/apps/v1", "/openapi/v2"] {
        let (code, out) = get_as(&s, &tok, path).await;
        assert_eq!(code, 200, "{path}: {out}");
    }
    let (code, st) = get_as(&s, &tok, "/metrics").await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "forbidden: User \"system:serviceaccount:team:default\" cannot get path \"/metrics\""
    );

    created(
        &s,
        &format!("{RBAC}/namespaces/team/roles"),
        json!({"metadata": {"name": "secret-reader"},
               "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"]}]}),
    )
    .await;
    created(
        &s,
        &format!("{RBAC}/namespaces/team/rolebindings"),
        json!({"metadata": {"name": "read-secrets"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secret-reader"},
               "subjects": [sa("team")]}),
    )
    .await;
    let (code, list) = get_as(&s, &tok, "/api/v1/namespaces/team/secrets").await;
    assert_eq!(code, 200, "{list}");
    let (code, _) = get_as(&s, &tok, "/api/v1/namespaces/default/secrets").await;
    assert_eq!(code, 403);
    let (code, _) = call_as(
        &s,
        &tok,
        &[],
        reqwest::Method::DELETE,
        "/api/v1/namespaces/team/secrets/default-token",
        None,
    )
    .await;
    assert_eq!(code, 403);
    // Taking the binding away takes the right away.
    let (code, out) = s
        .delete(&format!("{RBAC}/namespaces/team/rolebindings/read-secrets"))
        .await;
    assert_eq!(code, 200, "{out}");
    let (code, _) = get_as(&s, &tok, "/api/v1/namespaces/team/secrets").await;
    assert_eq!(code, 403);
}

#[tokio::test]
async fn a_cluster_role_binding_grants_in_every_namespace() {
    let s = TestServer::start().await;
    let tok = account(&s, "ops").await;
    let (code, _) = get_as(&s, &tok, "/api/v1/pods").await;
    assert_eq!(code, 403);
    created(
        &s,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": "pod-lister"},
               "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods", "nodes"]}]}),
    )
    .await;
    created(
        &s,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": "ops-lists-pods"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-lister"},
               "subjects": [sa("ops")]}),
    )
    .await;
    for path in [
        "/api/v1/pods",
        "/api/v1/namespaces/default/pods",
        "/api/v1/nodes",
    ] {
        let (code, out) = get_as(&s, &tok, path).await;
        assert_eq!(code, 200, "{path}: {out}");
    }
    let (code, _) = get_as(&s, &tok, "/api/v1/namespaces/default/pods/x").await;
    assert_eq!(code, 403);
    // kubectl's table of the bindings.
    let table = s.table(&format!("{RBAC}/clusterrolebindings")).await;
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "ops-lists-pods")
        .unwrap()
        .clone();
    assert_eq!(row["cells"][1], "ClusterRole/pod-lister");
    assert_eq!(row["cells"][5], "ops/default");
}

#[tokio::test]
async fn default_roles_are_made_and_custom_roles_aggregate_into_view() {
    let s = TestServer::start().await;
    let (code, admin) = s.get(&format!("{RBAC}/clusterroles/cluster-admin")).await;
    assert_eq!(code, 200, "{admin}");
    assert_eq!(
        admin["metadata"]["labels"]["kubernetes.io/bootstrapping"],
        "rbac-defaults"
    );
    assert_eq!(
        admin["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"],
        "true"
    );
    // view, edit and admin take in the aggregated roles (edit holds view's rules).
    eventually(30, "view, edit and admin aggregated", || async {
        for role in ["view", "edit", "admin"] {
            let (_, r) = s.get(&format!("{RBAC}/clusterroles/{role}")).await;
            let text = r["rules"].to_string();
            if !text.contains("\"configmaps\"") {
                return Err(format!("{role}: {r}"));
            }
        }
        Ok(())
    })
    .await;
    created(
        &s,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": "widget-viewer",
                            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
               "rules": [{"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}]}),
    )
    .await;
    for role in ["view", "edit", "admin"] {
        eventually(30, "the widget rule aggregated", || async {
            let (_, r) = s.get(&format!("{RBAC}/clusterroles/{role}")).await;
            if r["rules"].to_string().contains("widgets") {
                Ok(())
            } else {
                Err(r.to_string())
            }
        })
        .await;
    }
    // A service account bound to view reads what view reads, and no Secret.
    let tok = account(&s, "viewers").await;
    created(
        &s,
        &format!("{RBAC}/namespaces/viewers/rolebindings"),
        json!({"metadata": {"name": "view"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [sa("viewers")]}),
    )
    .await;
    let (code, _) = get_as(&s, &tok, "/api/v1/namespaces/viewers/configmaps").await;
    assert_eq!(code, 200);
    let (code, _) = get_as(&s, &tok, "/api/v1/namespaces/viewers").await;
    assert_eq!(code, 200);
    let (code, _) = get_as(&s, &tok, "/api/v1/namespaces/viewers/secrets").await;
    assert_eq!(code, 403);
}

#[tokio::test]
async fn roles_and_bindings_are_validated_as_upstream() {
    let s = TestServer::start().await;
    let (code, st) = s
        .post(
            &format!("{RBAC}/clusterroles"),
            json!({"metadata": {"name": "bad"},
                   "rules": [{"apiGroups": [""], "resources": ["pods"]}, {"verbs": ["get"]}]}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause_fields(&st),
        ["rules[0].verbs", "rules[1].apiGroups", "rules[1].resources"]
    );
    let (code, st) = s
        .post(
            &format!("{RBAC}/namespaces/default/rolebindings"),
            json!({"metadata": {"name": "bad"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Pod", "name": "x"},
                   "subjects": [{"kind": "Robot", "name": "r"}]}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(cause_fields(&st), ["roleRef.kind", "subjects[0].kind"]);
    created(
        &s,
        &format!("{RBAC}/namespaces/default/rolebindings"),
        json!({"metadata": {"name": "b"},
               "roleRef": {"kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": "jane"}]}),
    )
    .await;
    let (_, b) = s
        .get(&format!("{RBAC}/namespaces/default/rolebindings/b"))
        .await;
    assert_eq!(b["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(b["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    let mut changed = b.clone();
    changed["roleRef"]["name"] = json!("edit");
    let (code, st) = s
        .put(
            &format!("{RBAC}/namespaces/default/rolebindings/b"),
            changed,
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("cannot change roleRef"),
        "{st}"
    );
}

#[tokio::test]
async fn escalation_is_refused_and_binding_needs_the_role_or_bind() {
    let s = TestServer::start().await;
    let tok = account(&s, "dev").await;
    // The account is the namespace's admin.
    created(
        &s,
        &format!("{RBAC}/namespaces/dev/rolebindings"),
        json!({"metadata": {"name": "admin"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
               "subjects": [sa("dev")]}),
    )
    .await;
    eventually(30, "admin aggregated", || async {
        let (code, out) = get_as(&s, &tok, &format!("{RBAC}/namespaces/dev/roles")).await;
        if code == 200 {
            Ok(())
        } else {
            Err(out.to_string())
        }
    })
    .await;
    let roles = format!("{RBAC}/namespaces/dev/roles");
    let (code, out) = post_as(
        &s,
        &tok,
        &roles,
        json!({"metadata": {"name": "cm-reader"},
               "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]}),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    let (code, st) = post_as(
        &s,
        &tok,
        &roles,
        json!({"metadata": {"name": "node-reader"},
               "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]}]}),
    )
    .await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "roles.rbac.authorization.k8s.io \"node-reader\" is forbidden: user \"system:serviceaccount:dev:default\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\"]}"
    );
    assert_eq!(
        st["details"],
        json!({"name": "node-reader", "group": "rbac.authorization.k8s.io", "kind": "roles"})
    );
    // Binding a role it holds is fine; cluster-admin it does not hold.
    let bindings = format!("{RBAC}/namespaces/dev/rolebindings");
    let bind = |name: &str, role: &str| {
        json!({"metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"kind": "User", "name": "jane"}]})
    };
    let (code, out) = post_as(&s, &tok, &bindings, bind("jane-views", "view")).await;
    assert_eq!(code, 201, "{out}");
    let (code, st) = post_as(&s, &tok, &bindings, bind("jane-rules", "cluster-admin")).await;
    assert_eq!(code, 403, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("rolebindings.rbac.authorization.k8s.io \"jane-rules\" is forbidden: user \"system:serviceaccount:dev:default\""),
        "{st}"
    );
    // With `bind` on cluster-admin, it may.
    created(
        &s,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": "binder"},
               "rules": [{"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"],
                          "resources": ["clusterroles"], "resourceNames": ["cluster-admin"]}]}),
    )
    .await;
    created(
        &s,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": "dev-binds"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "binder"},
               "subjects": [sa("dev")]}),
    )
    .await;
    let (code, out) = post_as(&s, &tok, &bindings, bind("jane-rules", "cluster-admin")).await;
    assert_eq!(code, 201, "{out}");
}

#[tokio::test]
async fn impersonation_is_allowed_to_who_may_impersonate() {
    let s = TestServer::start().await;
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (code, me) = call_as(
        &s,
        &s.token,
        &[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Uid", "42"),
        ],
        reqwest::Method::POST,
        whoami,
        Some(review.clone()),
    )
    .await;
    assert_eq!(code, 201, "{me}");
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "jane", "uid": "42", "groups": ["dev", "system:authenticated"]})
    );
    let (code, st) = call_as(
        &s,
        &s.token,
        &[("Impersonate-User", "jane")],
        reqwest::Method::GET,
        "/api/v1/namespaces/default/pods",
        None,
    )
    .await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    // A service account, as a service account: its groups come with it.
    let tok = account(&s, "imp").await;
    let (code, me) = call_as(
        &s,
        &s.token,
        &[("Impersonate-User", "system:serviceaccount:imp:default")],
        reqwest::Method::POST,
        whoami,
        Some(review.clone()),
    )
    .await;
    assert_eq!(code, 201, "{me}");
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:imp",
            "system:authenticated"
        ])
    );
    // The service account itself may not impersonate.
    let (code, st) = call_as(
        &s,
        &tok,
        &[("Impersonate-User", "jane")],
        reqwest::Method::POST,
        whoami,
        Some(review),
    )
    .await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "users \"jane\" is forbidden: User \"system:serviceaccount:imp:default\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // kubectl --as.
    if let Some(kubectl) = crate::portforward::kubectl() {
        let out = tokio::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(s.kubeconfig())
            .args([
                "auth",
                "whoami",
                "--as=jane",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ])
            .output()
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "jane", "{out:?}");
    }
}

#[tokio::test]
async fn access_reviews_answer_from_rbac() {
    let s = TestServer::start().await;
    let tok = account(&s, "rev").await;
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let can = |verb: &'static str, resource: &'static str| {
        let (s, tok) = (&s, tok.clone());
        async move {
            let (code, r) = post_as(
                s,
                &tok,
                ssar,
                json!({"spec": {"resourceAttributes": {"namespace": "rev", "verb": verb,
                    "resource": resource}}}),
            )
            .await;
            assert_eq!(code, 201, "{r}");
            r["status"]["allowed"].as_bool().unwrap()
        }
    };
    assert!(!can("get", "secrets").await);
    created(
        &s,
        &format!("{RBAC}/namespaces/rev/rolebindings"),
        json!({"metadata": {"name": "edit"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
               "subjects": [sa("rev")]}),
    )
    .await;
    eventually(30, "edit grants secrets", || async {
        if can("get", "secrets").await {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    assert!(!can("create", "roles").await);
    // The rules behind the answers (kubectl auth can-i --list).
    let (code, r) = post_as(
        &s,
        &tok,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
               "spec": {"namespace": "rev"}}),
    )
    .await;
    assert_eq!(code, 201, "{r}");
    let rules = r["status"]["resourceRules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["resources"].to_string().contains("\"secrets\"")
                && r["verbs"].to_string().contains("\"get\"")),
        "{r}"
    );
    assert!(
        r["status"]["nonResourceRules"]
            .to_string()
            .contains("/healthz"),
        "{r}"
    );
    // SubjectAccessReview: the admin may ask about anyone; the account may not ask.
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:rev:default", "groups": ["system:serviceaccounts"],
                 "resourceAttributes": {"namespace": "rev", "verb": "delete", "resource": "secrets"}}});
    let (code, r) = s.post(sar, body.clone()).await;
    assert_eq!(code, 201, "{r}");
    assert_eq!(r["status"]["allowed"], true, "{r}");
    let (code, st) = post_as(&s, &tok, sar, body).await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "subjectaccessreviews.authorization.k8s.io is forbidden: User \"system:serviceaccount:rev:default\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
    );
    let (code, st) = s
        .post(
            sar,
            json!({"spec": {"nonResourceAttributes": {"path": "/x", "verb": "get"}}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    // kubectl auth can-i, as the account through impersonation.
    if let Some(kubectl) = crate::portforward::kubectl() {
        let can_i = |args: &'static [&'static str]| {
            let (kubectl, config) = (kubectl.clone(), s.kubeconfig());
            async move {
                let out = tokio::process::Command::new(kubectl)
                    .arg("--kubeconfig")
                    .arg(config)
                    .args([
                        "auth",
                        "can-i",
                        "--as=system:serviceaccount:rev:default",
                        "-n",
                        "rev",
                    ])
                    .args(args)
                    .output()
                    .await
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            }
        };
        assert_eq!(can_i(&["get", "secrets"]).await, "yes");
        assert_eq!(can_i(&["get", "nodes"]).await, "no");
        let list = can_i(&["--list"]).await;
        assert!(list.contains("secrets"), "{list}");
        assert!(
            list.contains("selfsubjectaccessreviews.authorization.k8s.io"),
            "{list}"
        );
    }
}
