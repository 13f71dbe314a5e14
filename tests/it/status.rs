//! The agent's status reporting through the API (§9): a failed status write is retried, a
//! foreign edit is written over, and a pod re-created under the same name never receives
//! the old pod's status.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Value, json};

use crate::node::{PODS, container, pod, pod_until, server};
use crate::support::{TestServer, eventually};

/// A plain-HTTP proxy in front of a server that answers the first `fail` status writes
/// with 409 Conflict instead of passing them on, as a conflicting writer would cause.
struct FaultyProxy {
    url: String,
    failed: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Upstream {
    base: String,
    client: reqwest::Client,
    fail: usize,
    failed: Arc<AtomicUsize>,
}

async fn forward(State(up): State<Upstream>, req: Request) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    if req.method() == axum::http::Method::PATCH
        && path.contains("/pods/")
        && path.split('?').next().unwrap_or("").ends_with("/status")
        && up.failed.fetch_add(1, Ordering::SeqCst) < up.fail
    {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "Conflict", "code": 409,
            "message": "Operation cannot be fulfilled: the object has been modified"});
        return Response::builder()
            .status(409)
            .header("content-type", "application/json")
            .body(Body::from(status.to_string()))
            .unwrap();
    }
    let mut out = up
        .client
        .request(req.method().clone(), format!("{}{path}", up.base));
    for (k, v) in req.headers() {
        if k != "host" && k != "content-length" {
            out = out.header(k, v);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .unwrap();
    let answer = out.body(body).send().await.unwrap();
    let mut resp = Response::builder().status(answer.status().as_u16());
    for (k, v) in answer.headers() {
        if k != "content-length" && k != "transfer-encoding" {
            resp = resp.header(k, v);
        }
    }
    // Streamed, so watches pass through as they happen.
    resp.body(Body::from_stream(answer.bytes_stream())).unwrap()
}

impl FaultyProxy {
    async fn start(s: &TestServer, fail: usize) -> Self {
        let failed = Arc::new(AtomicUsize::new(0));
        let up = Upstream {
            base: s.url.clone(),
            client: crate::support::https_client(&s.ca_pem),
            fail,
            failed: failed.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(up);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        FaultyProxy { url, failed }
    }
}

#[tokio::test]
async fn a_status_write_that_fails_is_retried_within_the_retry_delay() {
    // The API server runs no agent; one runs beside it and talks to it over HTTP.
    let s = TestServer::start_with(|_| {}).await;
    let proxy = FaultyProxy::start(&s, 1).await;
    let client = berth::client::Client::http(&proxy.url, &s.ca_pem, &s.token).unwrap();
    let runtime = berth::runtime::process::ProcessRuntime::open(
        &s.dir.path().join("agent"),
        std::path::Path::new(env!("CARGO_BIN_EXE_berth")),
        berth::runtime::shim::Rotation::default(),
    )
    .unwrap();
    let mut config = berth::node::Config::new("remote", "127.0.0.1");
    config.retry_after = Duration::from_secs(1);
    let mut sup = berth::supervisor::Supervisor::new();
    berth::node::start(&mut sup, &client, runtime, config);
    let mut p = pod("retried", "Always", "exec sleep 7501");
    p["spec"]["nodeName"] = json!("remote");
    let (code, out) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{out}");
    // The first write was refused; the status arrives all the same.
    let p = pod_until(&s, "retried", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    assert!(proxy.failed.load(Ordering::SeqCst) >= 2, "{p}");
    crate::node::delete_pod(&s, "retried").await;
    sup.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_pod_re_created_under_the_same_name_never_gets_the_old_status() {
    let s = server().await;
    let old = crate::node::run_pod(&s, pod("again", "Always", "exec sleep 7502")).await;
    let old_uid = old["metadata"]["uid"].as_str().unwrap().to_string();
    // Forced away and made again at once, with a command that never starts.
    let forced = s
        .req(reqwest::Method::DELETE, &format!("{PODS}/again"))
        .json(&json!({"gracePeriodSeconds": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(forced.status().as_u16(), 200);
    let mut fresh = pod("again", "Always", "exec sleep 7503");
    fresh["spec"]["containers"][0]["env"] =
        json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]);
    let (code, made) = s.post(PODS, fresh).await;
    assert_eq!(code, 201, "{made}");
    let rv = made["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = s
        .watch(&format!(
            "{PODS}?watch=true&fieldSelector=metadata.name%3Dagain&resourceVersion={rv}"
        ))
        .await;
    // The new pod reaches its own state (a config error), and no status of the old one
    // ever shows on it meanwhile.
    loop {
        let ev = crate::support::within(30, w.next_change()).await;
        let text = ev["object"]["status"].to_string();
        assert!(!text.contains(&old_uid), "{ev}");
        assert_ne!(ev["object"]["status"]["phase"], "Running", "{ev}");
        if container(&ev["object"])["state"]["waiting"]["reason"] == "CreateContainerConfigError" {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, now) = s.get(&format!("{PODS}/again")).await;
    assert!(!now["status"].to_string().contains(&old_uid), "{now}");
    s.delete(&format!("{PODS}/again")).await;
}

#[tokio::test]
async fn a_status_write_for_another_pod_of_the_same_name_is_refused() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let (_, made) = s.post(PODS, pod("named", "Always", "true")).await;
    let (code, out) = s
        .patch(
            &format!("{PODS}/named/status"),
            "application/merge-patch+json",
            json!({"metadata": {"uid": "not-this-one"}, "status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(code, 409, "{out}");
    assert_eq!(
        out["message"],
        format!(
            "Operation cannot be fulfilled on pods \"named\": Precondition failed: UID in precondition: not-this-one, UID in object meta: {}",
            made["metadata"]["uid"].as_str().unwrap()
        )
    );
    let same: Value =
        json!({"metadata": {"uid": made["metadata"]["uid"]}, "status": {"phase": "Running"}});
    let (code, out) = s
        .patch(
            &format!("{PODS}/named/status"),
            "application/merge-patch+json",
            same,
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

/// Starts a node agent beside the server, talking to it over HTTPS, on the runtime state
/// in `state` (so a second agent adopts what the first left running).
fn remote_agent(
    s: &TestServer,
    name: &str,
    state: &std::path::Path,
) -> berth::supervisor::Supervisor {
    let client = berth::client::Client::http(&s.url, &s.ca_pem, &s.token).unwrap();
    let runtime = berth::runtime::process::ProcessRuntime::open(
        state,
        std::path::Path::new(env!("CARGO_BIN_EXE_berth")),
        berth::runtime::shim::Rotation::default(),
    )
    .unwrap();
    let mut config = berth::node::Config::new(name, "127.0.0.1");
    config.lease_every = Duration::from_millis(500);
    let mut sup = berth::supervisor::Supervisor::new();
    berth::node::start(&mut sup, &client, runtime, config);
    sup
}

fn node_ready(n: &Value) -> Value {
    berth::types::condition(n, "Ready")
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_silent_node_goes_unknown_its_pods_are_evicted_and_it_recovers() {
    let s = TestServer::start_with(|c| c.controllers.node_grace = Duration::from_secs(3)).await;
    let state = s.dir.path().join("agent");
    let agent = remote_agent(&s, "quiet", &state);
    let node_path = "/api/v1/nodes/quiet";
    let mut brief = pod("brief", "Always", "exec sleep 7701");
    brief["spec"]["nodeName"] = json!("quiet");
    brief["spec"]["tolerations"] = json!([{"key": "node.kubernetes.io/unreachable",
        "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]);
    let mut lasting = pod("lasting", "Always", "exec sleep 7702");
    lasting["spec"]["nodeName"] = json!("quiet");
    for p in [brief, lasting] {
        let (code, out) = s.post(PODS, p).await;
        assert_eq!(code, 201, "{out}");
    }
    let before = pod_until(&s, "lasting", "ready", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    pod_until(&s, "brief", "ready", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;

    // The agent stops; its containers keep running.
    agent.shutdown(Duration::from_secs(5)).await;
    let node = eventually(30, "the node is unknown", || async {
        let (_, n) = s.get(node_path).await;
        if node_ready(&n)["status"] == "Unknown" {
            Ok(n)
        } else {
            Err(n.to_string())
        }
    })
    .await;
    let r = node_ready(&node);
    assert_eq!(r["reason"], "NodeStatusUnknown", "{node}");
    assert_eq!(
        r["message"], "Kubelet stopped posting node status.",
        "{node}"
    );
    eventually(30, "the unreachable taint", || async {
        let (_, n) = s.get(node_path).await;
        let tainted = n["spec"]["taints"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute")
        });
        if tainted {
            Ok(())
        } else {
            Err(n["spec"].to_string())
        }
    })
    .await;
    pod_until(&s, "lasting", "not ready", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "False")
    })
    .await;
    pod_until(&s, "brief", "evicted after its own toleration", |p| {
        p["metadata"]["deletionTimestamp"].is_string()
    })
    .await;

    // The agent comes back: ready again, untainted, the evicted pod finished, the other
    // adopted as it ran.
    let agent = remote_agent(&s, "quiet", &state);
    eventually(30, "the node is ready and untainted", || async {
        let (_, n) = s.get(node_path).await;
        let untainted = n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty());
        if node_ready(&n)["status"] == "True" && untainted {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;
    eventually(30, "the evicted pod is gone", || async {
        match s.get(&format!("{PODS}/brief")).await {
            (404, _) => Ok(()),
            (_, p) => Err(p["status"].to_string()),
        }
    })
    .await;
    let after = pod_until(&s, "lasting", "ready again", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        container(&after)["containerID"],
        container(&before)["containerID"]
    );
    assert_eq!(container(&after)["restartCount"], 0);
    crate::node::delete_pod(&s, "lasting").await;
    agent.shutdown(Duration::from_secs(5)).await;
}
