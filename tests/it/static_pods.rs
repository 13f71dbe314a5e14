//! Static pods and the agent's endpoints against a real server: manifests in a temporary
//! directory run as real processes without the API, are mirrored into it (a deleted
//! mirror comes back, an edited manifest replaces pod and mirror, a removed file stops
//! both), invalid and duplicate manifests are refused with events, and the agent's
//! endpoints answer through the node proxy, accepting a mirror pod's uid.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::node::processes_with;
use crate::support::{TestServer, eventually};

const NODE: &str = "n1";
const MIRROR: &str = "/api/v1/namespaces/default/pods/web-n1";
const PROXY: &str = "/api/v1/nodes/n1/proxy";

async fn server(manifests: &Path, scan_every: Duration) -> TestServer {
    server_in(crate::support::DataDir::new(), manifests, scan_every).await
}

async fn server_in(
    data: crate::support::DataDir,
    manifests: &Path,
    scan_every: Duration,
) -> TestServer {
    let dir = manifests.to_path_buf();
    TestServer::start_in(data, move |c| {
        c.node = Some(crate::node::node_settings(NODE, |n| {
            n.agent.pod_manifest_path = Some(dir);
            n.agent.manifest_scan_every = scan_every;
        }))
    })
    .await
}

/// A manifest of pod `name` whose container `c` prints `greeting` and sleeps as `marker`.
fn manifest(name: &str, greeting: &str, marker: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo $GREETING; exec sleep {marker}']
    env:
    - name: GREETING
      value: {greeting}
"
    )
}

/// Writes a file as editors do: a hidden temporary file renamed into place.
fn put(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

async fn processes_become(marker: &str, n: usize) {
    eventually(30, &format!("{n} processes of {marker}"), || async {
        match processes_with(marker) {
            got if got == n => Ok(()),
            got => Err(format!("{got}")),
        }
    })
    .await;
}

/// The mirror pod once `check` accepts it.
async fn mirror_until(s: &TestServer, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    eventually(30, what, || async {
        let (code, p) = s.get(MIRROR).await;
        if code == 200 && check(&p) {
            Ok(p)
        } else {
            Err(format!("{code} {p}"))
        }
    })
    .await
}

fn annotation<'a>(p: &'a Value, key: &str) -> &'a str {
    p["metadata"]["annotations"][key].as_str().unwrap_or("")
}

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

/// A GET or POST through the node proxy: the code and the body as text.
async fn proxy(s: &TestServer, method: reqwest::Method, path: &str) -> (u16, String) {
    let resp = s
        .req(method, &format!("{PROXY}/{path}"))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// An exec through the node proxy over WebSocket (`v5.channel.k8s.io`): the stdout
/// and the final status sent on channel 3.
async fn ws_exec(s: &TestServer, path: &str) -> (String, Value) {
    use tokio::io::AsyncReadExt;
    let resp = crate::support::https1_client(&s.ca_pem)
        .request(reqwest::Method::GET, format!("{}{PROXY}/{path}", s.url))
        .bearer_auth(&s.token)
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 101, "{:?}", resp.text().await);
    let mut io = resp.upgrade().await.unwrap();
    // The server closes after the status: read every frame it sent.
    let mut raw = Vec::new();
    let _ = crate::support::within(30, io.read_to_end(&mut raw)).await;
    let (mut out, mut status, mut i) = (Vec::new(), Value::Null, 0);
    while i + 2 <= raw.len() {
        let opcode = raw[i] & 0x0f;
        let mut len = (raw[i + 1] & 0x7f) as usize;
        i += 2;
        if len == 126 {
            len = u16::from_be_bytes([raw[i], raw[i + 1]]) as usize;
            i += 2;
        } else if len == 127 {
            len = u64::from_be_bytes(raw[i..i + 8].try_into().unwrap()) as usize;
            i += 8;
        }
        let payload = &raw[i..i + len];
        i += len;
        match (opcode, payload.first()) {
            (2, Some(1)) => out.extend_from_slice(&payload[1..]),
            (2, Some(3)) => status = serde_json::from_slice(&payload[1..]).unwrap(),
            (8, _) => break,
            _ => {}
        }
    }
    (String::from_utf8(out).unwrap(), status)
}

#[tokio::test]
async fn a_static_pod_runs_without_the_api_and_is_mirrored_into_it() {
    let manifests = tempfile::tempdir().unwrap();
    put(
        manifests.path(),
        "web.yaml",
        &manifest("web", "one", "7401"),
    );
    // Only the change notification can be this quick: the rescan is a minute away.
    let s = server(manifests.path(), Duration::from_secs(60)).await;
    let first = mirror_until(&s, "a running mirror pod", running).await;
    assert_eq!(first["spec"]["nodeName"], NODE);
    assert_eq!(annotation(&first, "kubernetes.io/config.source"), "file");
    let hash = annotation(&first, "kubernetes.io/config.hash").to_string();
    assert_eq!(hash.len(), 32, "{first}");
    assert_eq!(annotation(&first, "kubernetes.io/config.mirror"), hash);
    assert_ne!(
        first["metadata"]["uid"],
        hash.as_str(),
        "the API gives the mirror its own uid"
    );
    let seen = annotation(&first, "kubernetes.io/config.seen");
    assert!(seen.parse::<jiff::Timestamp>().is_ok(), "{first}");
    assert!(
        first["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .contains(&json!({"operator": "Exists", "effect": "NoExecute"})),
        "{first}"
    );
    processes_become("sleep 7401", 2).await;
    // Its log, through the API, by the mirror pod.
    let (code, log) = s.get(&format!("{MIRROR}/log")).await;
    assert_eq!((code, log), (200, json!("one\n")));

    // A deleted mirror pod comes back; the process runs on untouched.
    let started = first["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].clone();
    let (code, gone) = s.delete(MIRROR).await;
    assert_eq!(code, 200, "{gone}");
    let second = mirror_until(&s, "a new mirror pod", |p| {
        p["metadata"]["uid"] != first["metadata"]["uid"] && running(p)
    })
    .await;
    assert_eq!(annotation(&second, "kubernetes.io/config.mirror"), hash);
    let c = &second["status"]["containerStatuses"][0];
    assert_eq!(
        (&c["state"]["running"]["startedAt"], &c["restartCount"]),
        (&started, &json!(0))
    );
    assert_eq!(processes_with("sleep 7401"), 2);

    // An edited manifest: new containers, a new mirror with the new hash.
    put(
        manifests.path(),
        "web.yaml",
        &manifest("web", "two", "7402"),
    );
    let third = mirror_until(&s, "the mirror of the edited manifest", |p| {
        annotation(p, "kubernetes.io/config.hash") != hash && running(p)
    })
    .await;
    assert_eq!(
        annotation(&third, "kubernetes.io/config.mirror"),
        annotation(&third, "kubernetes.io/config.hash")
    );
    processes_become("sleep 7401", 0).await;
    processes_become("sleep 7402", 2).await;
    let (_, log) = s.get(&format!("{MIRROR}/log")).await;
    assert_eq!(log, json!("two\n"));

    // The file goes: so do the process and the mirror pod.
    std::fs::remove_file(manifests.path().join("web.yaml")).unwrap();
    processes_become("sleep 7402", 0).await;
    eventually(30, "the mirror pod is deleted", || async {
        match s.get(MIRROR).await {
            (404, _) => Ok(()),
            (code, p) => Err(format!("{code} {p}")),
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn a_static_pod_is_adopted_not_restarted_when_berth_restarts() {
    let manifests = tempfile::tempdir().unwrap();
    put(
        manifests.path(),
        "web.yaml",
        &manifest("web", "one", "7410"),
    );
    let s = server(manifests.path(), Duration::from_secs(20)).await;
    let before = mirror_until(&s, "a running mirror pod", running).await;
    processes_become("sleep 7410", 2).await;
    let data = s.stop().await;
    assert_eq!(processes_with("sleep 7410"), 2, "containers outlive berth");

    let s = server_in(data, manifests.path(), Duration::from_secs(20)).await;
    // The same content is the same pod: its container is adopted, its mirror kept.
    eventually(30, "the agent has the static pod again", || async {
        let (_, pods) = proxy(&s, reqwest::Method::GET, "pods").await;
        if pods.contains("web-n1") {
            Ok(())
        } else {
            Err(pods)
        }
    })
    .await;
    // Give a wrong restart the time to show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = mirror_until(&s, "the mirror pod again", running).await;
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    let started =
        |p: &Value| p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].clone();
    assert_eq!(started(&after), started(&before));
    assert_eq!(after["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(processes_with("sleep 7410"), 2);

    std::fs::remove_file(manifests.path().join("web.yaml")).unwrap();
    processes_become("sleep 7410", 0).await;
    s.stop().await;
}

#[tokio::test]
async fn agent_endpoints_take_the_mirror_pods_uid() {
    let manifests = tempfile::tempdir().unwrap();
    put(
        manifests.path(),
        "web.yaml",
        &manifest("web", "hello", "7403"),
    );
    let s = server(manifests.path(), Duration::from_secs(20)).await;
    let mirror = mirror_until(&s, "a running mirror pod", running).await;
    let mirror_uid = mirror["metadata"]["uid"].as_str().unwrap();

    let (code, out) = proxy(
        &s,
        reqwest::Method::POST,
        &format!("run/default/web-n1/{mirror_uid}/c?cmd=echo%20hi"),
    )
    .await;
    assert_eq!((code, out.as_str()), (200, "hi\n"));
    let (code, out) = proxy(
        &s,
        reqwest::Method::GET,
        &format!("podStatus?podNamespace=default&podID=web-n1&UID={mirror_uid}"),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["phase"], "Running");
    assert!(
        status["containerStatuses"][0]["state"]["running"].is_object(),
        "{status}"
    );
    // Exec finds the pod by the mirror's uid and runs in its container's environment.
    let (out, status) = ws_exec(
        &s,
        &format!("exec/default/web-n1/{mirror_uid}/c?command=sh&command=-c&command=echo%20$GREETING&output=1"),
    )
    .await;
    assert_eq!(
        (out.as_str(), &status["status"]),
        ("hello\n", &json!("Success"))
    );
    let (_, status) = ws_exec(
        &s,
        &format!(
            "exec/default/web-n1/{mirror_uid}/c?command=sh&command=-c&command=exit%203&stdout=1"
        ),
    )
    .await;
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3");
    let (_, status) = ws_exec(&s, "exec/default/web-n1/nope?command=true&stdout=1").await;
    assert_eq!(
        status["message"], "container not found (\"nope\")",
        "{status}"
    );
    let (code, out) = proxy(
        &s,
        reqwest::Method::GET,
        &format!("exec/default/web-n1/{mirror_uid}/c?command=true&stdout=1"),
    )
    .await;
    assert_eq!(code, 400, "without the upgrade: {out}");
    let (code, out) = proxy(
        &s,
        reqwest::Method::GET,
        "exec/default/web-n1/not-a-uid/c?command=true&stdout=1",
    )
    .await;
    assert_eq!((code, out.as_str()), (404, "pod does not exist\n"));
    let (code, out) = proxy(&s, reqwest::Method::GET, "containerLogs/default/web-n1/c").await;
    assert_eq!((code, out.as_str()), (200, "hello\n"));

    std::fs::remove_file(manifests.path().join("web.yaml")).unwrap();
    processes_become("sleep 7403", 0).await;
    s.stop().await;
}

#[tokio::test]
async fn invalid_and_duplicate_manifests_are_refused_with_events() {
    let manifests = tempfile::tempdir().unwrap();
    let dir = manifests.path();
    put(
        dir,
        "a-bad.yaml",
        &manifest("bad", "x", "7404").replace("name: c", "name: Bad_Name"),
    );
    put(dir, "b-web.yaml", &manifest("web", "first", "7405"));
    put(dir, "c-web.yaml", &manifest("web", "second", "7406"));
    put(dir, ".hidden.yaml", &manifest("hidden", "x", "7407"));
    std::fs::create_dir(dir.join("sub")).unwrap();
    put(
        &dir.join("sub"),
        "inner.yaml",
        &manifest("inner", "x", "7408"),
    );
    let s = server(dir, Duration::from_secs(1)).await;
    mirror_until(&s, "the first web pod runs", running).await;
    processes_become("sleep 7405", 2).await;
    let events = eventually(30, "FailedValidation events", || async {
        let (_, list) = s.get("/api/v1/namespaces/default/events").await;
        let messages: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "FailedValidation" && e["type"] == "Warning")
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect();
        if messages.len() >= 2 {
            Ok(messages)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    assert!(
        events.iter().any(|m| m
            .starts_with("Error validating pod bad-n1.default from file, ignoring: ")
            && m.contains("Bad_Name")),
        "{events:?}"
    );
    assert!(
        events.iter().any(|m| m
            == "Error validating pod web-n1.default from file due to duplicate pod name \"web-n1\", ignoring"),
        "{events:?}"
    );
    // A few rescans later, still nothing else runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for marker in ["sleep 7404", "sleep 7406", "sleep 7407", "sleep 7408"] {
        assert_eq!(processes_with(marker), 0, "{marker}");
    }
    let (_, pods) = s.get("/api/v1/namespaces/default/pods").await;
    let names: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["web-n1"]);

    for f in ["a-bad.yaml", "b-web.yaml", "c-web.yaml"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    processes_become("sleep 7405", 0).await;
    s.stop().await;
}

#[tokio::test]
async fn the_agent_endpoints_answer_through_the_node_proxy() {
    let manifests = tempfile::tempdir().unwrap();
    let s = server(manifests.path(), Duration::from_secs(20)).await;
    let (code, ns) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": "t"}}))
        .await;
    assert_eq!(code, 201, "{ns}");
    let pod = json!({
        "metadata": {"name": "p"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo started; exec sleep 7409"]}],
        },
    });
    let (code, made) = s.post("/api/v1/namespaces/t/pods", pod).await;
    assert_eq!(code, 201, "{made}");
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    processes_become("sleep 7409", 2).await;

    let (code, out) = proxy(&s, reqwest::Method::GET, "healthz").await;
    assert_eq!((code, out.as_str()), (200, "ok\n"));
    let (code, out) = proxy(&s, reqwest::Method::GET, "pods").await;
    assert_eq!(code, 200);
    let desired: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(desired["kind"], "PodList");
    assert!(
        desired["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["uid"] == uid.as_str()),
        "{desired}"
    );
    let (code, out) = proxy(&s, reqwest::Method::GET, "runningpods/").await;
    assert_eq!(code, 200);
    let running: Value = serde_json::from_str(&out).unwrap();
    let mine = running["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["uid"] == uid.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{running}"));
    assert_eq!(
        (&mine["metadata"]["name"], &mine["metadata"]["namespace"]),
        (&json!("p"), &json!("t"))
    );
    assert_eq!(mine["spec"]["containers"][0]["name"], "c");

    let (code, out) = proxy(&s, reqwest::Method::POST, "run/t/p/c?cmd=echo%20hi").await;
    assert_eq!((code, out.as_str()), (200, "hi\n"));
    let (code, out) = proxy(
        &s,
        reqwest::Method::POST,
        "run/t/p/c?cmd=ls%20/nothing-here",
    )
    .await;
    assert_eq!(code, 500, "{out}");
    assert!(
        out.starts_with("Internal Error: command [\"ls\" \"/nothing-here\"] exited with "),
        "{out}"
    );
    assert!(
        out.contains("nothing-here"),
        "stderr is in the output: {out}"
    );
    let (code, out) = proxy(&s, reqwest::Method::POST, "run/t/nobody/c?cmd=true").await;
    assert_eq!((code, out.as_str()), (404, "Pod does not exist\n"));
    let (code, out) = proxy(&s, reqwest::Method::GET, "podStatus?podNamespace=t").await;
    assert_eq!(
        (code, out.as_str()),
        (400, "Missing 'podID=' query entry.\n")
    );
    let (code, out) = proxy(
        &s,
        reqwest::Method::GET,
        "podStatus?podNamespace=t&podID=nobody",
    )
    .await;
    assert_eq!((code, out.as_str()), (404, "Pod does not exist\n"));
    let (code, out) = proxy(&s, reqwest::Method::GET, "containerLogs/t/p/c?tailLines=1").await;
    assert_eq!((code, out.as_str()), (200, "started\n"));
    let (code, out) = proxy(&s, reqwest::Method::GET, "containerLogs/t/nobody/c").await;
    assert_eq!(
        (code, out.as_str()),
        (404, "pod \"nobody_t\" does not exist\n")
    );
    // Another node, or none: not this agent.
    let (code, status) = s.get("/api/v1/nodes/n2/proxy/pods").await;
    assert_eq!(code, 404, "{status}");
    // Admins only: a service account is refused.
    let (token, _) = crate::accounts::token(&s, "t", "default").await;
    let resp = s
        .client
        .get(format!("{}{PROXY}/pods", s.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(
        status["message"],
        "nodes \"n1\" is forbidden: User \"system:serviceaccount:t:default\" cannot get resource \"nodes/proxy\" in API group \"\" at the cluster scope"
    );

    s.delete("/api/v1/namespaces/t/pods/p").await;
    processes_become("sleep 7409", 0).await;
    s.stop().await;
}

#[tokio::test]
async fn the_api_keeps_mirror_annotations_and_deletes_mirror_pods_at_once() {
    let s = TestServer::start().await;
    let pods = "/api/v1/namespaces/default/pods";
    let bound = |name: &str, annotations: Value| {
        json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "busybox"}]},
        })
    };
    let mirror = bound("m", json!({"kubernetes.io/config.mirror": "h1"}));
    let (code, made) = s.post(pods, mirror).await;
    assert_eq!(code, 201, "{made}");
    let (code, plain) = s.post(pods, bound("plain", json!({}))).await;
    assert_eq!(code, 201, "{plain}");

    let merge = "application/merge-patch+json";
    let change = json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "h2"}}});
    let (code, st) = s.patch(&format!("{pods}/m"), merge, change.clone()).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Forbidden: may not remove or update mirror pod annotation"
    );
    let remove = json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": null}}});
    let (code, _) = s.patch(&format!("{pods}/m"), merge, remove).await;
    assert_eq!(code, 422);
    let (code, st) = s.patch(&format!("{pods}/plain"), merge, change).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"][0]["message"],
        "Forbidden: may not add mirror pod annotation"
    );
    let labels = json!({"metadata": {"labels": {"a": "b"}}});
    let (code, st) = s.patch(&format!("{pods}/m"), merge, labels).await;
    assert_eq!(code, 200, "other changes are fine: {st}");

    // A bound pod waits for its node; a mirror pod goes at once.
    let (code, _) = s.delete(&format!("{pods}/plain")).await;
    assert_eq!(code, 200);
    let (_, still) = s.get(&format!("{pods}/plain")).await;
    assert!(
        still["metadata"]["deletionTimestamp"].is_string(),
        "{still}"
    );
    let (code, _) = s.delete(&format!("{pods}/m")).await;
    assert_eq!(code, 200);
    let (code, _) = s.get(&format!("{pods}/m")).await;
    assert_eq!(code, 404);
}
