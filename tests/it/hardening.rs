//! A server bad clients cannot stall: slow and idle connections are cut, connections
//! and requests in flight are capped, deep YAML and overflowing numbers are refused.
//! No test here asserts how long something took: each counts answers, and the timeouts
//! are only guards against a hang.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{TestServer, eventually, within};

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A server with the API alone, its limits tuned by `tune`.
async fn server(tune: impl FnOnce(&mut berth::api::Limits)) -> TestServer {
    TestServer::start_with(|c| {
        c.run_controllers = false;
        tune(&mut c.limits);
    })
    .await
}

/// A raw TLS connection (HTTP/1.1) to the server.
async fn connect(s: &TestServer) -> std::io::Result<Tls> {
    let addr = s.url.trim_start_matches("https://").to_string();
    let tcp = tokio::net::TcpStream::connect(&addr).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    crate::exec::tls(&s.ca_pem).connect(name, tcp).await
}

/// Whether the server has closed `conn` (reads end or fail) within `secs`.
async fn closed_within(conn: &mut Tls, secs: u64) -> bool {
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    read.await.is_ok()
}

async fn ready(s: &TestServer) -> bool {
    let r = s.client.get(format!("{}/readyz", s.url)).send().await;
    r.is_ok_and(|r| r.status() == StatusCode::OK)
}

#[tokio::test]
async fn slowloris_connections_are_cut_while_another_client_is_served() {
    let s = server(|l| l.header_read = Duration::from_secs(1)).await;
    // Twenty clients each send a request's head a byte at a time, never finishing it.
    let mut attackers = Vec::new();
    for _ in 0..20 {
        let mut conn = connect(&s).await.unwrap();
        conn.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        attackers.push(tokio::spawn(async move {
            // Until the server cuts it: a header byte every 100 ms.
            for _ in 0..600 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if conn.write_all(b"X").await.is_err() || conn.flush().await.is_err() {
                    return true;
                }
                let mut buf = [0u8; 64];
                if let Ok(r) =
                    tokio::time::timeout(Duration::from_millis(1), conn.read(&mut buf)).await
                    && matches!(r, Ok(0) | Err(_))
                {
                    return true;
                }
            }
            false
        }));
    }
    // Meanwhile another client is answered, again and again.
    let mut answered = 0;
    while answered < 10 {
        assert!(ready(&s).await, "the other client is served");
        answered += 1;
    }
    for a in attackers {
        assert!(
            within(90, a).await.unwrap(),
            "a slowloris connection was cut"
        );
    }
    assert!(ready(&s).await);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_and_a_busy_one_is_not() {
    let s = server(|l| l.idle = Duration::from_secs(1)).await;
    let mut conn = connect(&s).await.unwrap();
    let req = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
    // Requests one after the other on the same connection are answered.
    for _ in 0..3 {
        conn.write_all(req).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = within(10, conn.read(&mut buf)).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    }
    // Then left idle: the server closes it.
    assert!(
        closed_within(&mut conn, 60).await,
        "the idle connection was closed"
    );
    assert!(ready(&s).await);
}

#[tokio::test]
async fn connections_are_capped_per_client_address() {
    let s = server(|l| l.connections_per_address = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(&s).await.unwrap());
    }
    // A fourth from the same address is closed at once: no handshake.
    assert!(
        connect(&s).await.is_err(),
        "a fourth connection was refused"
    );
    // One closed frees its place.
    drop(held.pop());
    eventually(30, "a connection is accepted again", || async {
        connect(&s).await.map(drop).map_err(|e| e.to_string())
    })
    .await;
}

/// A request body that is sent only when `release` is dropped or sent to.
fn held_body(release: tokio::sync::oneshot::Receiver<Vec<u8>>) -> reqwest::Body {
    let stream = futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(release.await.unwrap_or_default())
    });
    reqwest::Body::wrap_stream(stream)
}

#[tokio::test]
async fn writes_over_the_in_flight_cap_are_answered_429_with_retry_after() {
    let s = server(|l| {
        l.max_mutating_requests_inflight = 1;
        l.max_requests_inflight = 2;
    })
    .await;
    let path = format!("{}/api/v1/namespaces/default/configmaps", s.url);
    let cm = |name: &str| json!({"metadata": {"name": name}, "data": {"a": "b"}});
    // One write in flight: its body is still on its way. (Over HTTP/1.1: an HTTP/2
    // client may hold a request's head back until its body starts.)
    let hold = || {
        let (release, held) = tokio::sync::oneshot::channel::<Vec<u8>>();
        let first = tokio::spawn(
            crate::support::https1_client(&s.ca_pem)
                .post(&path)
                .bearer_auth(&s.token)
                .header("Content-Type", "application/json")
                .body(held_body(held))
                .send(),
        );
        (release, first)
    };
    let (mut release, mut first) = hold();
    let mut tries = 0;
    let refused = loop {
        tries += 1;
        assert!(tries < 1000, "a second write was never refused");
        // A name of its own each time: one may go through before the first is sent.
        let r = s
            .req(Method::POST, "/api/v1/namespaces/default/configmaps")
            .json(&json!({"metadata": {"generateName": "second-"}}))
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            break r;
        }
        assert_eq!(r.status(), StatusCode::CREATED);
        // The held write lost the race for the slot (it was answered 429): again.
        if first.is_finished() {
            (release, first) = hold();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    let status: Value = refused.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["code"], 429);
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    // Reads have slots of their own, and watches take none.
    let r = s
        .req(Method::GET, "/api/v1/namespaces/default/configmaps")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let mut watches = Vec::new();
    for _ in 0..3 {
        let w = s
            .req(Method::GET, "/api/v1/namespaces/default/configmaps?watch=1")
            .send()
            .await
            .unwrap();
        assert_eq!(w.status(), StatusCode::OK);
        watches.push(w);
    }
    assert!(ready(&s).await);
    // The first write done, writes go through again.
    release
        .send(serde_json::to_vec(&cm("first")).unwrap())
        .unwrap();
    let first = within(30, first).await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let r = s
        .req(Method::POST, "/api/v1/namespaces/default/configmaps")
        .json(&cm("third"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn yaml_nested_deeper_than_json_may_is_refused_and_others_are_served() {
    let s = server(|_| {}).await;
    let n = 20_000;
    let deep = format!(
        "{{\"metadata\": {{\"name\": \"deep\"}}, \"data\": {}1{}}}",
        "[".repeat(n),
        "]".repeat(n)
    );
    let create = "/api/v1/namespaces/default/configmaps";
    let apply = "/api/v1/namespaces/default/configmaps/deep?fieldManager=t";
    let sent = [
        (Method::POST, create, "application/yaml"),
        (Method::POST, create, "application/json"),
        (Method::PATCH, apply, "application/apply-patch+yaml"),
    ];
    let attacks: Vec<_> = sent
        .iter()
        .cycle()
        .take(9)
        .map(|(method, path, ct)| {
            s.req(method.clone(), path)
                .header("Content-Type", *ct)
                .body(deep.clone())
                .send()
        })
        .collect();
    let attacks = futures_util::future::join_all(attacks);
    let (answers, served) = tokio::join!(attacks, async {
        let mut served = 0;
        for _ in 0..5 {
            served += usize::from(ready(&s).await);
        }
        served
    });
    assert_eq!(served, 5);
    for (r, (_, _, ct)) in answers.into_iter().zip(sent.iter().cycle()) {
        let r = r.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{ct}");
        let status: Value = r.json().await.unwrap();
        let message = status["message"].as_str().unwrap();
        assert!(
            message.contains("recursion limit") || message.contains("nested more than 128"),
            "{ct}: {message}"
        );
    }
    // A body within the limit is taken.
    let fine = "metadata:\n  name: fine\ndata:\n  a: '[[[[[['\n";
    let r = s
        .req(Method::POST, create)
        .header("Content-Type", "application/yaml")
        .body(fine)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn overflowing_numbers_are_clamped_or_refused_never_a_500() {
    let s = server(|_| {}).await;
    let status = |path: String, method: Method| {
        let req = s.req(method, &path);
        async move { req.send().await.unwrap().status() }
    };
    // A watch's timeout past any deadline: cut to the longest allowed.
    let w = s
        .req(
            Method::GET,
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=18446744073709551615",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(w.status(), StatusCode::OK);
    drop(w);
    for (path, code) in [
        ("/api/v1/configmaps?watch=1&timeoutSeconds=-1", 400),
        ("/api/v1/configmaps?watch=1&timeoutSeconds=soon", 400),
        ("/api/v1/configmaps?limit=99999999999999999999", 400),
        ("/api/v1/configmaps?limit=9223372036854775807", 200),
        (
            "/api/v1/configmaps?resourceVersion=18446744073709551615",
            504,
        ),
        (
            "/api/v1/configmaps?resourceVersion=99999999999999999999",
            400,
        ),
    ] {
        assert_eq!(
            status(path.to_string(), Method::GET).await.as_u16(),
            code,
            "{path}"
        );
    }
    // A pod on a node is deleted gracefully: the longest grace period is cut to ten
    // years, from the query or the body.
    for name in ["by-query", "by-body"] {
        let pod = json!({"metadata": {"name": name}, "spec": {"nodeName": "elsewhere",
            "containers": [{"name": "c", "image": "busybox"}]}});
        let r = s
            .req(Method::POST, "/api/v1/namespaces/default/pods")
            .json(&pod)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let r = s
        .req(
            Method::DELETE,
            "/api/v1/namespaces/default/pods/by-query?gracePeriodSeconds=9223372036854775807",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let pod: Value = r.json().await.unwrap();
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 315_360_000);
    let r = s
        .req(Method::DELETE, "/api/v1/namespaces/default/pods/by-body")
        .json(&json!({"kind": "DeleteOptions", "apiVersion": "v1",
            "gracePeriodSeconds": 9_223_372_036_854_775_807i64}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let pod: Value = r.json().await.unwrap();
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 315_360_000);
    let code = status(
        "/api/v1/namespaces/default/pods/by-body?gracePeriodSeconds=9223372036854775808".into(),
        Method::DELETE,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_negative_limit_lists_everything() {
    let s = server(|_| {}).await;
    for i in 0..3 {
        let r = s
            .req(Method::POST, "/api/v1/namespaces/default/configmaps")
            .json(&json!({"metadata": {"name": format!("cm{i}")}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    for limit in ["-1", "0"] {
        let r = s
            .req(
                Method::GET,
                &format!("/api/v1/namespaces/default/configmaps?limit={limit}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let list: Value = r.json().await.unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 3);
        assert!(list["metadata"].get("continue").is_none());
    }
}
