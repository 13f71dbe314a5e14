//! Resource metrics against a real server: `metrics.k8s.io` NodeMetrics and PodMetrics
//! measured from the cgroups of real containers (a CPU-bound container held to its CFS
//! quota, a container holding memory), with label selectors, a missing pod's 404 and
//! the 405 of a write.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const NODE: &str = "metrics-node";
const PODS: &str = "/api/v1/namespaces/default/pods";
const POD_METRICS: &str = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods";

/// A server measuring each second: a window of ten CFS periods (100 ms), so that the
/// periods cut at its two ends (up to a quota each, when the busy process was held back
/// by a loaded machine) move a 300m rate by at most a tenth.
pub(crate) async fn server() -> TestServer {
    TestServer::start_with(|c| {
        c.node = Some(crate::node::node_settings(NODE, |n| {
            n.agent.metrics_every = Duration::from_secs(1);
        }))
    })
    .await
}

/// A window (`850ms`, `1.002s`) in milliseconds.
fn window_ms(w: &str) -> f64 {
    match w.strip_suffix("ms") {
        Some(ms) => ms.parse().unwrap(),
        None => w.strip_suffix('s').unwrap().parse::<f64>().unwrap() * 1e3,
    }
}

/// A pod that burns CPU while `flag` exists (the test's temporary directory: it stops
/// with the test, the node agent leaves pods running when a server stops), then sleeps.
pub(crate) fn burner(name: &str, labels: Value, cpu_limit: &str, flag: &std::path::Path) -> Value {
    let script = format!(
        "while [ -e {} ]; do :; done; exec sleep 3600",
        flag.display()
    );
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox",
                "command": ["sh", "-c", script],
                "resources": {"requests": {"cpu": "100m", "memory": "16Mi"},
                              "limits": {"cpu": cpu_limit}}}],
        },
    })
}

/// A quantity in thousandths (`250m`, `1`, `1234n`, `12Ki`).
pub(crate) fn milli(q: &str) -> f64 {
    let (num, scale) = match q {
        q if q.ends_with('n') => (&q[..q.len() - 1], 1e-6),
        q if q.ends_with('u') => (&q[..q.len() - 1], 1e-3),
        q if q.ends_with('m') => (&q[..q.len() - 1], 1.0),
        q if q.ends_with("Ki") => (&q[..q.len() - 2], 1024e3),
        q if q.ends_with("Mi") => (&q[..q.len() - 2], 1048576e3),
        q => (q, 1e3),
    };
    num.parse::<f64>().unwrap() * scale
}

#[tokio::test]
async fn pods_and_nodes_are_measured_from_their_cgroups() {
    if crate::resources::hierarchy("memory").is_none() {
        return;
    }
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("burn");
    std::fs::write(&flag, "").unwrap();
    for pod in [
        burner("burn", json!({"app": "burn"}), "300m", &flag),
        json!({
            "metadata": {"name": "hold", "labels": {"app": "hold"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main",
                "image": "busybox", "command": ["sh", "-c",
                "x=$(head -c 24000000 /dev/zero | tr '\\0' a); echo held; sleep 3600"]}]},
        }),
    ] {
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        let (code, out) = s.post(PODS, pod).await;
        assert_eq!(code, 201, "{out}");
        crate::node::pod_until(&s, &name, "running", |p| p["status"]["phase"] == "Running").await;
    }
    // The CPU-bound container is held to its 300m quota; the other holds 24 MB. Judged
    // over a whole window between two samples: the first rate, over the ~200 ms from
    // the container's start, may span three periods' quota (450m) and says nothing.
    let burn = eventually(60, "the busy pod's usage nears its quota", || async {
        let (code, m) = s.get(&format!("{POD_METRICS}/burn")).await;
        let cpu = m["containers"][0]["usage"]["cpu"].as_str().map(milli);
        let window = m["window"].as_str().map(window_ms);
        match (cpu, window) {
            (Some(c), Some(w)) if code == 200 && c > 150.0 && w >= 900.0 => Ok(m),
            _ => Err(format!("{code} {m}")),
        }
    })
    .await;
    assert_eq!(burn["kind"], "PodMetrics");
    assert_eq!(burn["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(burn["metadata"]["labels"]["app"], "burn");
    assert_eq!(burn["containers"][0]["name"], "main");
    let cpu = milli(burn["containers"][0]["usage"]["cpu"].as_str().unwrap());
    assert!(cpu < 400.0, "the CFS quota holds it to 300m: {burn}");
    assert!(burn["window"].as_str().unwrap().ends_with('s'), "{burn}");
    eventually(60, "the memory held is seen", || async {
        let (_, m) = s.get(&format!("{POD_METRICS}/hold")).await;
        match m["containers"][0]["usage"]["memory"].as_str().map(milli) {
            Some(mem) if mem / 1e3 > 20e6 => Ok(()),
            _ => Err(m.to_string()),
        }
    })
    .await;
    // Label selectors pick among them.
    let (_, list) = s
        .get(&format!("{POD_METRICS}?labelSelector=app%3Dhold"))
        .await;
    assert_eq!(list["kind"], "PodMetricsList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hold"]);
    // The node: at least what its pods use, with the node's labels.
    let (code, node) = s
        .get(&format!("/apis/metrics.k8s.io/v1beta1/nodes/{NODE}"))
        .await;
    assert_eq!(code, 200, "{node}");
    assert_eq!(node["kind"], "NodeMetrics");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    assert!(
        milli(node["usage"]["cpu"].as_str().unwrap()) > 100.0,
        "{node}"
    );
    assert!(
        milli(node["usage"]["memory"].as_str().unwrap()) / 1e3 > 24e6,
        "{node}"
    );
    // Discovery names the group, and the kinds take no writes.
    let (_, group) = s.get("/apis/metrics.k8s.io/v1beta1").await;
    let verbs: Vec<Value> = group["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["verbs"].clone())
        .collect();
    assert_eq!(verbs, [json!(["get", "list"]), json!(["get", "list"])]);
    let (code, status) = s
        .post(POD_METRICS, json!({"metadata": {"name": "x"}}))
        .await;
    assert_eq!(code, 405, "{status}");
    assert_eq!(status["reason"], "MethodNotAllowed");
    let (code, status) = s.delete(&format!("{POD_METRICS}/burn")).await;
    assert_eq!(code, 405, "{status}");
    let (code, status) = s.get(&format!("{POD_METRICS}/nothing")).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(
        status["message"],
        "pods.metrics.k8s.io \"nothing\" not found"
    );
    // A deleted pod is no longer measured.
    crate::node::delete_pod(&s, "hold").await;
    eventually(30, "the deleted pod's metrics go", || async {
        match s.get(&format!("{POD_METRICS}/hold")).await {
            (404, _) => Ok(()),
            (code, m) => Err(format!("{code} {m}")),
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn a_new_pod_is_measured_as_it_starts_not_a_resolution_later() {
    if crate::resources::hierarchy("memory").is_none() {
        return;
    }
    // A resolution far longer than the test: only the start of the pod can measure it.
    let s = TestServer::start_with(|c| {
        c.node = Some(crate::node::node_settings(NODE, |n| {
            n.agent.metrics_every = Duration::from_secs(600);
        }))
    })
    .await;
    crate::node::run_pod(&s, crate::node::pod("fresh", "Always", "exec sleep 7950")).await;
    let m = eventually(10, "the new pod's metrics are served", || async {
        match s.get(&format!("{POD_METRICS}/fresh")).await {
            (200, m) => Ok(m),
            (_, other) => Err(other.to_string()),
        }
    })
    .await;
    let c = &m["containers"][0];
    assert_eq!(c["name"], "main", "{m}");
    assert!(
        c["usage"]["memory"]
            .as_str()
            .is_some_and(|q| milli(q) > 0.0),
        "{m}"
    );
    assert!(c["usage"]["cpu"].as_str().is_some(), "{m}");
}
