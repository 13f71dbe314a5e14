//! Request bodies in Kubernetes' protobuf encoding, as typed clients and kubectl's generators
//! send them: decoded, then created, updated and deleted exactly like JSON; answers stay JSON.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestServer;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// A body kubectl sent, by name, from the server's recordings.
fn recorded(name: &str) -> &'static str {
    include_str!("../../src/api/protobuf_kubectl.hex")
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no recording {name}"))
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A varint field.
fn num(number: u64, v: i64) -> Vec<u8> {
    [varint(number << 3), varint(v as u64)].concat()
}

/// A length-delimited field.
fn ld(number: u64, b: impl AsRef<[u8]>) -> Vec<u8> {
    let b = b.as_ref();
    [varint(number << 3 | 2), varint(b.len() as u64), b.to_vec()].concat()
}

fn entry(number: u64, k: &str, v: &str) -> Vec<u8> {
    ld(number, [ld(1, k), ld(2, v)].concat())
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [ld(1, api_version), ld(2, kind)].concat();
    [&b"k8s\0"[..], &ld(1, type_meta), &ld(2, raw)].concat()
}

/// ObjectMeta{name, resourceVersion} as Go writes it: every string, empty or not.
fn meta(name: &str, resource_version: &str) -> Vec<u8> {
    [
        ld(1, name),
        ld(2, ""),
        ld(3, ""),
        ld(5, ""),
        ld(6, resource_version),
        num(7, 0),
        ld(8, ""),
    ]
    .concat()
}

/// Sends a protobuf body; returns the code, the Content-Type and the JSON answer.
async fn send(s: &TestServer, method: Method, path: &str, body: Vec<u8>) -> (u16, String, Value) {
    let r = s
        .req(method, path)
        .header("Content-Type", PROTOBUF)
        .header(
            "Accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    (code, ct, r.json().await.unwrap())
}

#[tokio::test]
async fn kubectl_generator_bodies_create_their_objects() {
    let s = TestServer::start().await;
    let (code, ct, v) = send(&s, Method::POST, CMS, hex(recorded("KUBECTL_CONFIGMAP"))).await;
    assert_eq!((code, ct.as_str()), (201, "application/json"), "{v}");
    assert_eq!(v["data"], json!({"a": "b", "c": "d"}));
    assert!(v["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let (_, got) = s.get(&format!("{CMS}/x")).await;
    assert_eq!(got["data"], json!({"a": "b", "c": "d"}));

    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, _, v) = send(&s, Method::POST, secrets, hex(recorded("KUBECTL_SECRET"))).await;
    assert_eq!(code, 201, "{v}");
    let (_, got) = s.get(&format!("{secrets}/s")).await;
    assert_eq!(got["data"], json!({"k": "dg=="}), "v in base64");
    assert_eq!(got["type"], "Opaque", "defaulted as for JSON");

    let (code, _, v) = send(
        &s,
        Method::POST,
        "/api/v1/namespaces",
        hex(recorded("KUBECTL_NAMESPACE")),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["status"]["phase"], "Active");
    let accounts = "/api/v1/namespaces/default/serviceaccounts";
    let (code, _, v) = send(
        &s,
        Method::POST,
        accounts,
        hex(recorded("KUBECTL_SERVICE_ACCOUNT")),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["name"], "sa");
    s.stop().await;
}

#[tokio::test]
async fn protobuf_updates_are_checked_like_json() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let cm = |rv: &str, value: &str| {
        envelope(
            "v1",
            "ConfigMap",
            &[ld(1, meta("settings", rv)), entry(2, "mode", value)].concat(),
        )
    };
    let (code, _, v) = send(&s, Method::POST, CMS, cm("", "fast")).await;
    assert_eq!(code, 201, "{v}");
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("{CMS}/settings");
    let (code, _, v) = send(&s, Method::PUT, &path, cm(&rv, "slow")).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["data"]["mode"], "slow");
    let (code, _, v) = send(&s, Method::PUT, &path, cm(&rv, "stale")).await;
    assert_eq!((code, v["reason"].as_str()), (409, Some("Conflict")), "{v}");
    // The kind must still match the resource of the path.
    let secret = envelope("v1", "Secret", &ld(1, meta("wrong", "")));
    let (code, _, v) = send(&s, Method::POST, CMS, secret).await;
    assert_eq!((code, v["kind"].as_str()), (400, Some("Status")), "{v}");
    let (_, got) = s.get(&path).await;
    assert_eq!(got["data"]["mode"], "slow");
    s.stop().await;
}

#[tokio::test]
async fn a_protobuf_pod_gets_the_defaults_and_validation_of_json() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let pods = "/api/v1/namespaces/default/pods";
    let container = [
        ld(1, "main"),
        ld(2, "busybox"),
        ld(3, "sh"),
        ld(3, "-c"),
        ld(3, "echo hi"),
        ld(8, ""),
        ld(13, ""),
        num(16, 0),
    ]
    .concat();
    let spec = [ld(2, container), ld(3, "Never"), ld(6, "")].concat();
    let pod = envelope(
        "v1",
        "Pod",
        &[ld(1, meta("p", "")), ld(2, spec), ld(3, "")].concat(),
    );
    let (code, _, v) = send(&s, Method::POST, pods, pod).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        v["spec"]["containers"][0]["command"],
        json!(["sh", "-c", "echo hi"])
    );
    assert_eq!(v["spec"]["restartPolicy"], "Never");
    assert_eq!(
        v["spec"]["dnsPolicy"], "ClusterFirst",
        "an empty string is unset"
    );
    assert_eq!(v["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(v["spec"]["containers"][0]["resources"], json!({}));
    assert_eq!(v["status"]["phase"], "Pending");

    // The scheduler's binding, as a typed client sends it: Binding{metadata, target}.
    let target = [ld(1, "Node"), ld(3, "n1")].concat();
    let binding = envelope(
        "v1",
        "Binding",
        &[ld(1, meta("p", "")), ld(2, target)].concat(),
    );
    let (code, _, v) = send(&s, Method::POST, &format!("{pods}/p/binding"), binding).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        s.get(&format!("{pods}/p")).await.1["spec"]["nodeName"],
        "n1"
    );

    let empty = envelope(
        "v1",
        "Pod",
        &[ld(1, meta("bad", "")), ld(2, ld(3, "Never"))].concat(),
    );
    let (code, _, v) = send(&s, Method::POST, pods, empty).await;
    assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")), "{v}");
    assert_eq!(v["details"]["causes"][0]["field"], "spec.containers");
    s.stop().await;
}

#[tokio::test]
async fn protobuf_delete_options_are_honoured() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let (code, v) = s
        .post(CMS, json!({"metadata": {"name": "x"}, "data": {"k": "v"}}))
        .await;
    assert_eq!(code, 201, "{v}");
    let path = format!("{CMS}/x");
    let delete = |raw: Vec<u8>| envelope("v1", "DeleteOptions", &raw);
    // preconditions{uid}
    let (code, _, v) = send(
        &s,
        Method::DELETE,
        &path,
        delete(ld(2, ld(1, "not-its-uid"))),
    )
    .await;
    assert_eq!(code, 409, "{v}");
    // dryRun: [All]
    let (code, _, v) = send(&s, Method::DELETE, &path, delete(ld(5, "All"))).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(s.get(&path).await.0, 200, "a dry run deletes nothing");
    // gracePeriodSeconds: 0, as kubectl drain sends it
    let (code, _, v) = send(&s, Method::DELETE, &path, delete(num(1, 0))).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(s.get(&path).await.0, 404);
    // Another kind is not a delete's body.
    let (code, _, v) = send(
        &s,
        Method::DELETE,
        &path,
        hex(recorded("KUBECTL_CONFIGMAP")),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    s.stop().await;
}

#[tokio::test]
async fn broken_and_unknown_protobuf_bodies_get_a_status() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let mut cut = hex(recorded("KUBECTL_CONFIGMAP"));
    cut.truncate(40);
    let (code, ct, v) = send(&s, Method::POST, CMS, cut).await;
    assert_eq!((code, ct.as_str()), (400, "application/json"));
    assert_eq!(v["reason"], "BadRequest");
    assert!(v["message"].as_str().unwrap().contains("protobuf"), "{v}");

    // Custom kinds have no protobuf encoding.
    let unknown = envelope("example.com/v1", "Widget", &ld(1, meta("d", "")));
    let (code, _, v) = send(&s, Method::POST, CMS, unknown).await;
    assert_eq!(
        (code, v["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("\"Widget\"") && message.contains("JSON"),
        "{message}"
    );

    let (code, _, v) = send(&s, Method::POST, CMS, b"{\"metadata\":{}}".to_vec()).await;
    assert_eq!(code, 400, "JSON labelled as protobuf: {v}");
    assert!(s.get(CMS).await.1["items"].as_array().unwrap().is_empty());
    s.stop().await;
}

/// `kubectl create deployment web --image=busybox -- sleep 3600` as kubectl sends it:
/// gogo-protobuf writes every non-pointer scalar (stdin, tty, hostNetwork, generation, ...)
/// even when it is zero.
fn kubectl_deployment(resource_version: &str) -> Vec<u8> {
    let container = [
        ld(1, "busybox"),
        ld(2, "busybox"),
        ld(3, "sleep"),
        ld(3, "3600"),
        ld(5, ""),
        ld(8, ""),
        ld(13, ""),
        ld(14, ""),
        num(16, 0),
        num(17, 0),
        num(18, 0),
        ld(20, ""),
    ]
    .concat();
    let pod_spec = [
        ld(2, container),
        ld(3, ""),
        ld(6, ""),
        ld(8, ""),
        ld(9, ""),
        ld(10, ""),
        num(11, 0),
        num(12, 0),
        num(13, 0),
        ld(16, ""),
        ld(17, ""),
        ld(19, ""),
        ld(24, ""),
    ]
    .concat();
    let labels = entry(11, "app", "web");
    let template = [
        ld(1, [meta("", ""), labels.clone()].concat()),
        ld(2, pod_spec),
    ]
    .concat();
    let spec = [
        num(1, 1),
        ld(2, entry(1, "app", "web")),
        ld(3, template),
        ld(4, ld(1, "")),
        num(5, 0),
        num(7, 0),
    ]
    .concat();
    let status: Vec<u8> = [1, 2, 3, 4, 5, 7].iter().flat_map(|n| num(*n, 0)).collect();
    let metadata = [meta("web", resource_version), labels].concat();
    envelope(
        "apps/v1",
        "Deployment",
        &[ld(1, metadata), ld(2, spec), ld(3, status)].concat(),
    )
}

#[tokio::test]
async fn a_protobuf_deployment_is_stored_as_its_json_twin_is() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let deploys = "/apis/apps/v1/namespaces/default/deployments";
    let (code, _, v) = send(&s, Method::POST, deploys, kubectl_deployment("")).await;
    assert_eq!(code, 201, "{v}");
    let pod_spec = &v["spec"]["template"]["spec"];
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_eq!(pod_spec.get(key), None, "{key}: {pod_spec}");
    }
    for key in ["stdin", "stdinOnce", "tty"] {
        assert_eq!(
            pod_spec["containers"][0].get(key),
            None,
            "{key}: {pod_spec}"
        );
    }
    assert_eq!(
        v["spec"]["template"]["metadata"],
        json!({"labels": {"app": "web"}})
    );
    assert_eq!(v["metadata"]["generation"], 1);

    // The same Deployment from a JSON client (what `kubectl create deployment -o json`
    // prints) is no change of spec: the generation stays.
    let rv = v["metadata"]["resourceVersion"].as_str().unwrap();
    let twin = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "resourceVersion": rv},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "busybox", "image": "busybox",
                                         "command": ["sleep", "3600"], "resources": {}}]},
            },
            "strategy": {},
        },
        "status": {},
    });
    let (code, v) = s.put(&format!("{deploys}/web"), twin).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["generation"], 1, "{v}");
    // And so is the protobuf body again.
    let rv = v["metadata"]["resourceVersion"].as_str().unwrap();
    let path = format!("{deploys}/web");
    let (code, _, v) = send(&s, Method::PUT, &path, kubectl_deployment(rv)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["generation"], 1, "{v}");
    s.stop().await;
}

/// Every built-in kind decodes from protobuf, not a chosen few: the upstream conformance
/// suite's Go client sends PodTemplates, RuntimeClasses and PriorityClasses so.
#[tokio::test]
async fn kinds_beyond_kubectls_decode_from_protobuf() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let container = [ld(1, "main"), ld(2, "busybox")].concat();
    let template = [ld(1, meta("", "")), ld(2, ld(2, container))].concat();
    let body = envelope(
        "v1",
        "PodTemplate",
        &[ld(1, meta("tpl", "")), ld(2, template)].concat(),
    );
    let path = "/api/v1/namespaces/default/podtemplates";
    let (code, _, v) = send(&s, Method::POST, path, body).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["template"]["spec"]["containers"][0]["image"], "busybox");
    // Defaulted as a JSON body would be.
    assert_eq!(v["template"]["spec"]["restartPolicy"], "Always", "{v}");

    let body = envelope(
        "node.k8s.io/v1",
        "RuntimeClass",
        &[ld(1, meta("sandboxed", "")), ld(2, "runc")].concat(),
    );
    let (code, _, v) = send(
        &s,
        Method::POST,
        "/apis/node.k8s.io/v1/runtimeclasses",
        body,
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["handler"], "runc");

    let body = envelope(
        "scheduling.k8s.io/v1",
        "PriorityClass",
        &[
            ld(1, meta("high", "")),
            num(2, 1000),
            num(3, 0),
            ld(4, "for the tests"),
        ]
        .concat(),
    );
    let path = "/apis/scheduling.k8s.io/v1/priorityclasses";
    let (code, _, v) = send(&s, Method::POST, path, body).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        (v["value"].as_i64(), v["description"].as_str()),
        (Some(1000), Some("for the tests"))
    );
    // Validated as JSON is: a value above a billion is for the system's classes only.
    let body = envelope(
        "scheduling.k8s.io/v1",
        "PriorityClass",
        &[ld(1, meta("too-high", "")), num(2, 2_000_000_000)].concat(),
    );
    let (code, _, v) = send(&s, Method::POST, path, body).await;
    assert_eq!(code, 422, "{v}");

    // networking.k8s.io/v1: an IngressClass (spec field 1, its controller).
    let body = envelope(
        "networking.k8s.io/v1",
        "IngressClass",
        &[
            ld(1, meta("nginx", "")),
            ld(2, ld(1, "k8s.io/ingress-nginx")),
        ]
        .concat(),
    );
    let path = "/apis/networking.k8s.io/v1/ingressclasses";
    let (code, _, v) = send(&s, Method::POST, path, body).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["controller"], "k8s.io/ingress-nginx");

    // An Ingress as `kubectl create ingress` sends it: the rule's value (Go's inlined
    // IngressRuleValue, field 2) is the rule's own `http` in JSON.
    let port = ld(2, num(2, 80));
    let backend = ld(2, ld(4, [ld(1, "web"), port].concat()));
    let path = ld(1, [ld(1, "/"), backend, ld(3, "Prefix")].concat());
    let rule = [ld(1, "web.example.com"), ld(2, ld(1, path))].concat();
    let body = envelope(
        "networking.k8s.io/v1",
        "Ingress",
        &[ld(1, meta("web", "")), ld(2, ld(3, rule))].concat(),
    );
    let path = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
    let (code, _, v) = send(&s, Method::POST, path, body).await;
    assert_eq!(code, 201, "{v}");
    let rule = &v["spec"]["rules"][0];
    assert_eq!(rule["host"], "web.example.com", "{v}");
    assert_eq!(
        rule["http"]["paths"][0]["backend"]["service"]["port"]["number"], 80,
        "{v}"
    );
    s.stop().await;
}
