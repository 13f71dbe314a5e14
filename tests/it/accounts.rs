//! Service accounts and their tokens, and events (aggregation, rate limit, expiry),
//! against a real server.

use base64::Engine;
use berth::client::Client;
use berth::client::recorder::{EventType, Recorder};
use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

/// A legacy token of `namespace/account`, asked for as upstream has it since 1.24: a
/// Secret `<account>-token` of type `kubernetes.io/service-account-token` naming the
/// account (made when missing), which the controller fills. Returns it with its Secret.
pub async fn token(s: &TestServer, namespace: &str, account: &str) -> (String, Value) {
    // The account first: a token Secret naming none is removed.
    let sa = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}");
    eventually(20, "the account", || async {
        match s.get(&sa).await {
            (200, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
    let path = format!("/api/v1/namespaces/{namespace}/secrets/{account}-token");
    if s.get(&path).await.0 == 404 {
        let (code, out) = s
            .post(
                &format!("/api/v1/namespaces/{namespace}/secrets"),
                json!({"metadata": {"name": format!("{account}-token"),
                    "annotations": {"kubernetes.io/service-account.name": account}},
                    "type": "kubernetes.io/service-account-token"}),
            )
            .await;
        assert!(code == 201 || code == 409, "{out}");
    }
    let secret = eventually(20, "a token Secret filled", || async {
        let (code, secret) = s.get(&path).await;
        if code == 200 && secret["data"]["token"].is_string() {
            Ok(secret)
        } else {
            Err(secret.to_string())
        }
    })
    .await;
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["token"].as_str().unwrap())
        .unwrap();
    (String::from_utf8(raw).unwrap(), secret)
}

async fn get_as(s: &TestServer, token: &str, path: &str) -> (u16, Value) {
    let resp = s
        .client
        .get(format!("{}{path}", s.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap())
}

#[tokio::test]
async fn every_namespace_gets_a_default_account_and_legacy_tokens_only_when_asked() {
    let s = TestServer::start().await;
    let (code, _) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
        .await;
    assert_eq!(code, 201);
    let (_, secret) = token(&s, "team", "default").await;
    let (code, sa) = s
        .get("/api/v1/namespaces/team/serviceaccounts/default")
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"],
        sa["metadata"]["uid"]
    );
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"],
        sa["metadata"]["uid"]
    );
    assert_eq!(
        secret["data"]["ca.crt"]
            .as_str()
            .map(|c| base64::engine::general_purpose::STANDARD.decode(c).unwrap()),
        Some(s.ca_pem.as_bytes().to_vec())
    );
    // No account gets one it did not ask for.
    let (code, _) = s
        .get("/api/v1/namespaces/team/secrets/deployer-token")
        .await;
    assert_eq!(code, 404);
    // One naming an account that is not there is removed.
    let (code, out) = s
        .post(
            "/api/v1/namespaces/team/secrets",
            json!({"metadata": {"name": "ghost-token",
                "annotations": {"kubernetes.io/service-account.name": "ghost"}},
                "type": "kubernetes.io/service-account-token"}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    eventually(20, "the ghost's token Secret goes", || async {
        match s.get("/api/v1/namespaces/team/secrets/ghost-token").await {
            (404, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
    // The namespaces made at first start have one too.
    token(&s, "kube-system", "default").await;
    // A deleted default account comes back.
    let (code, _) = s
        .delete("/api/v1/namespaces/team/serviceaccounts/default")
        .await;
    assert_eq!(code, 200);
    eventually(20, "the default account is made again", || async {
        let (code, again) = s
            .get("/api/v1/namespaces/team/serviceaccounts/default")
            .await;
        if code == 200 && again["metadata"]["uid"] != sa["metadata"]["uid"] {
            Ok(())
        } else {
            Err(again.to_string())
        }
    })
    .await;
}

#[tokio::test]
async fn a_service_account_token_works_where_rbac_binds_it() {
    let s = TestServer::start().await;
    s.post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
        .await;
    let (tok, _) = token(&s, "team", "default").await;
    // Without a binding it may do nothing but discovery and its reviews.
    let (code, st) = get_as(&s, &tok, "/api/v1/namespaces/team/configmaps").await;
    assert_eq!(code, 403, "{st}");
    let (code, st) = s
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
            json!({"metadata": {"name": "edit"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "edit"},
                   "subjects": [{"kind": "ServiceAccount", "name": "default"}]}),
        )
        .await;
    assert_eq!(code, 201, "{st}");
    eventually(30, "edit aggregated", || async {
        let (code, list) = get_as(&s, &tok, "/api/v1/namespaces/team/configmaps").await;
        if code == 200 {
            Ok(())
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let (code, list) = get_as(&s, &tok, "/api/v1/namespaces/team/configmaps").await;
    assert_eq!(code, 200, "{list}");
    let (code, ns) = get_as(&s, &tok, "/api/v1/namespaces/team").await;
    assert_eq!(code, 200, "{ns}");
    let (code, st) = get_as(&s, &tok, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(st["reason"], "Forbidden");
    assert_eq!(
        st["message"],
        "configmaps is forbidden: User \"system:serviceaccount:team:default\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    let (code, st) = get_as(&s, &tok, "/api/v1/namespaces").await;
    assert_eq!(code, 403, "{st}");
    let (code, st) = get_as(&s, &tok, "/api/v1/pods").await;
    assert_eq!(code, 403, "{st}");
    // Writes in its own namespace go through the same checks as anyone's.
    let c = Client::http(&s.url, &s.ca_pem, &tok).unwrap();
    let cms = berth::registry::catalog::of(berth::registry::Kind::ConfigMap);
    c.create(cms, Some("team"), &json!({"metadata": {"name": "mine"}}))
        .await
        .unwrap();
    let denied = c
        .create(
            cms,
            Some("default"),
            &json!({"metadata": {"name": "theirs"}}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(denied, berth::client::Error::Forbidden(_)),
        "{denied:?}"
    );
    // It can ask who it is and what it may do (kubectl auth whoami, auth can-i).
    let review = |token: String, path: &'static str, body: Value| {
        let s = &s;
        async move {
            let r = s
                .client
                .post(format!("{}{path}", s.url))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (code, me) = review(
        tok.clone(),
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await;
    assert_eq!(code, 201, "{me}");
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:team:default"
    );
    let can = |namespace: &'static str, verb: &'static str| {
        let tok = tok.clone();
        async move {
            let (code, r) = review(
                tok,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                json!({"spec": {"resourceAttributes": {"namespace": namespace, "verb": verb,
                    "resource": "pods"}}}),
            )
            .await;
            assert_eq!(code, 201, "{r}");
            r["status"]["allowed"].as_bool().unwrap()
        }
    };
    assert!(can("team", "create").await);
    assert!(!can("default", "list").await);
    // And the rules behind those answers (kubectl auth can-i --list).
    let rules = |token: String, namespace: &'static str| {
        let review = &review;
        async move {
            let (code, r) = review(
                token,
                "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                       "spec": {"namespace": namespace}}),
            )
            .await;
            assert_eq!(code, 201, "{r}");
            assert_eq!(r["status"]["incomplete"], false);
            r["status"].clone()
        }
    };
    let everything = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]});
    let own = rules(tok.clone(), "team").await;
    assert!(
        own["resourceRules"].to_string().contains("\"configmaps\""),
        "{own}"
    );
    let elsewhere = rules(tok.clone(), "default").await;
    assert!(
        !elsewhere["resourceRules"]
            .to_string()
            .contains("\"configmaps\""),
        "{elsewhere}"
    );
    assert!(
        elsewhere["resourceRules"].as_array().unwrap().contains(
            &json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]})
        ),
        "{elsewhere}"
    );
    assert!(
        elsewhere["nonResourceRules"]
            .to_string()
            .contains("\"/healthz\""),
        "{elsewhere}"
    );
    let admin = rules(s.token.clone(), "default").await;
    assert!(
        admin["resourceRules"]
            .as_array()
            .unwrap()
            .contains(&everything),
        "{admin}"
    );
    assert!(
        admin["nonResourceRules"]
            .as_array()
            .unwrap()
            .contains(&json!({"verbs": ["*"], "nonResourceURLs": ["*"]})),
        "{admin}"
    );
    let (code, _) = review(
        tok,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        json!({"spec": {}}),
    )
    .await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn deleting_the_token_secret_revokes_the_token() {
    let s = TestServer::start().await;
    s.post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
        .await;
    let (old, _) = token(&s, "team", "default").await;
    let (code, _) = s
        .delete("/api/v1/namespaces/team/secrets/default-token")
        .await;
    assert_eq!(code, 200);
    let (code, _) = get_as(&s, &old, "/api").await;
    assert_eq!(code, 401);
    // No other is made unasked; asked again, a new one works.
    let (code, _) = s.get("/api/v1/namespaces/team/secrets/default-token").await;
    assert_eq!(code, 404);
    let (new, _) = token(&s, "team", "default").await;
    assert_ne!(new, old);
    let (code, _) = get_as(&s, &new, "/api").await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn repeated_events_aggregate_and_each_object_is_rate_limited() {
    let s = TestServer::start().await;
    let c = Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let (_, cm) = s
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "noisy"}}),
        )
        .await;
    let rec = Recorder::new(c, "test-component", Some("host-1"));
    for _ in 0..3 {
        rec.event(&cm, EventType::Warning, "Flapping", "it flapped")
            .await;
    }
    rec.event(&cm, EventType::Normal, "Calm", "it is calm")
        .await;
    let (_, list) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dnoisy")
        .await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    let flap = items.iter().find(|e| e["reason"] == "Flapping").unwrap();
    assert_eq!(flap["count"], 3);
    assert_eq!(flap["series"]["count"], 3);
    assert_eq!(flap["source"]["component"], "test-component");
    assert_eq!(flap["source"]["host"], "host-1");
    assert_eq!(flap["involvedObject"]["uid"], cm["metadata"]["uid"]);
    assert!(flap["firstTimestamp"].as_str().unwrap() <= flap["lastTimestamp"].as_str().unwrap());
    // 4 spent of a burst of 25: 30 more distinct events, and only 21 get through.
    for i in 0..30 {
        rec.event(&cm, EventType::Normal, "Step", &format!("step {i}"))
            .await;
    }
    let (_, list) = s
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DStep")
        .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 21);
}

#[tokio::test]
async fn events_expire_after_their_ttl() {
    let s = TestServer::start_with(|c| c.controllers.event_ttl = std::time::Duration::from_secs(1))
        .await;
    let (code, ev) = s
        .post(
            "/api/v1/namespaces/default/events",
            json!({
                "metadata": {"name": "short-lived"},
                "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "default"},
                "reason": "Test", "message": "m", "type": "Normal",
                "lastTimestamp": berth::types::now(),
            }),
        )
        .await;
    assert_eq!(code, 201, "{ev}");
    eventually(20, "the event expires", || async {
        let (code, _) = s.get("/api/v1/namespaces/default/events/short-lived").await;
        if code == 404 {
            Ok(())
        } else {
            Err(code.to_string())
        }
    })
    .await;
}

/// Asks for a token of `account` in `default` with the TokenRequest `spec`.
async fn token_request(s: &TestServer, account: &str, spec: Value) -> (u16, Value) {
    s.post(
        &format!("/api/v1/namespaces/default/serviceaccounts/{account}/token"),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}),
    )
    .await
}

#[tokio::test]
async fn bound_tokens_carry_an_audience_an_expiry_and_end_with_what_they_are_bound_to() {
    let s = TestServer::start().await;
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let (code, out) = s
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "robot"}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    // A token for the API: a signed JWT naming the account, an hour by default.
    let (code, tr) = token_request(&s, "robot", json!({})).await;
    assert_eq!(code, 201, "{tr}");
    assert_eq!(tr["kind"], "TokenRequest");
    assert_eq!(tr["spec"]["expirationSeconds"], 3600);
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
    assert_eq!(
        claims["iss"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );
    let resp = s
        .client
        .post(format!("{}{whoami}", s.url))
        .bearer_auth(&token)
        .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let review: Value = resp.json().await.unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"],
        "system:serviceaccount:default:robot"
    );
    let (code, out) = get_as(&s, &token, "/api").await;
    assert_eq!(code, 200, "{out}");
    // One for another audience is no key to the API; nor is one signed by another key.
    let (_, tr) = token_request(&s, "robot", json!({"audiences": ["vault"]})).await;
    let vault = tr["status"]["token"].as_str().unwrap();
    assert_eq!(get_as(&s, vault, "/api").await.0, 401);
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged_claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(claims.to_string().replace("robot", "default"));
    parts[1] = &forged_claims;
    let forged = parts.join(".");
    assert_eq!(get_as(&s, &forged, "/api").await.0, 401);
    // Bound to a pod: valid while the pod is, not after.
    let (code, pod) = s
        .post(
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": "holder"}, "spec": {"containers": [
                {"name": "a", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(code, 201, "{pod}");
    let bind = |uid: &str| {
        json!({"expirationSeconds": 600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "holder", "uid": uid}})
    };
    let (code, out) = token_request(&s, "robot", bind("not-its-uid")).await;
    assert_eq!(code, 409, "{out}");
    let (code, tr) =
        token_request(&s, "robot", bind(pod["metadata"]["uid"].as_str().unwrap())).await;
    assert_eq!(code, 201, "{tr}");
    let pod_token = tr["status"]["token"].as_str().unwrap().to_string();
    assert_eq!(get_as(&s, &pod_token, "/api").await.0, 200);
    let (code, _) = s
        .delete("/api/v1/namespaces/default/pods/holder?gracePeriodSeconds=0")
        .await;
    assert_eq!(code, 200);
    eventually(20, "the pod's token ends with it", || async {
        match get_as(&s, &pod_token, "/api").await {
            (401, _) => Ok(()),
            (code, out) => Err(format!("{code} {out}")),
        }
    })
    .await;
    // Bad requests say what is wrong.
    let (code, out) = token_request(&s, "robot", json!({"expirationSeconds": 60})).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("may not specify a duration less than 10 minutes"),
        "{out}"
    );
    let (code, out) = token_request(
        &s,
        "robot",
        json!({"boundObjectRef": {"kind": "ConfigMap", "name": "x"}}),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(token_request(&s, "nobody", json!({})).await.0, 404);
    // The key outlives a restart; deleting the account revokes its tokens.
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, |_| {}).await;
    assert_eq!(get_as(&s, &token, "/api").await.0, 200);
    let (code, _) = s
        .delete("/api/v1/namespaces/default/serviceaccounts/robot")
        .await;
    assert_eq!(code, 200);
    let (code, _) = s
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "robot"}}),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(get_as(&s, &token, "/api").await.0, 401);
    s.stop().await;
}
