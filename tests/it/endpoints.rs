//! Endpoints and EndpointSlices against a real server: the slices and the Endpoints of a
//! Service follow its pods' addresses, readiness and termination, their labels and
//! named ports, and go with the Service; invalid objects are refused with a 422; and
//! `berth get` prints them. No node agent runs here: the tests set pods' status
//! themselves.

use serde_json::{Value, json};

use crate::support::{TestServer, cause_fields, eventually};

const PODS: &str = "/api/v1/namespaces/default/pods";
const SERVICES: &str = "/api/v1/namespaces/default/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
const ENDPOINTS: &str = "/api/v1/namespaces/default/endpoints";

fn service(name: &str, ports: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"selector": {"app": name}, "ports": ports}})
}

async fn make_pod(s: &TestServer, name: &str, app: &str, finalizer: bool) {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "i",
                 "ports": [{"name": "http", "containerPort": 8080}]}]}});
    if finalizer {
        pod["metadata"]["finalizers"] = json!(["example.com/hold"]);
    }
    let (code, out) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{out}");
}

async fn set_status(s: &TestServer, pod: &str, ip: &str, ready: bool) {
    let state = if ready { "True" } else { "False" };
    let (code, out) = s
        .patch(
            &format!("{PODS}/{pod}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": state,
                                "lastTransitionTime": berth::types::now()}]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

/// The slices of a Service.
async fn slices(s: &TestServer, svc: &str) -> Vec<Value> {
    let (code, list) = s
        .get(&format!(
            "{SLICES}?labelSelector=kubernetes.io%2Fservice-name%3D{svc}"
        ))
        .await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

/// (pod name, address, ready, serving, terminating) of every endpoint of the Service's
/// slices, sorted.
fn endpoints_of(slices: &[Value]) -> Vec<(String, String, bool, bool, bool)> {
    let mut out: Vec<_> = slices
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .map(|e| {
            let c = &e["conditions"];
            (
                e["targetRef"]["name"].as_str().unwrap().to_string(),
                e["addresses"][0].as_str().unwrap().to_string(),
                c["ready"] == true,
                c["serving"] == true,
                c["terminating"] == true,
            )
        })
        .collect();
    out.sort();
    out
}

/// Waits until the Service's slices hold exactly `want`.
async fn slices_hold(
    s: &TestServer,
    svc: &str,
    want: &[(&str, &str, bool, bool, bool)],
) -> Vec<Value> {
    let want: Vec<(String, String, bool, bool, bool)> = want
        .iter()
        .map(|(n, a, r, sv, t)| (n.to_string(), a.to_string(), *r, *sv, *t))
        .collect();
    eventually(20, &format!("{svc}'s slices hold {want:?}"), || async {
        let got = slices(s, svc).await;
        if endpoints_of(&got) == want {
            Ok(got)
        } else {
            Err(format!("{:?}", endpoints_of(&got)))
        }
    })
    .await
}

/// (ready addresses, not-ready addresses) of the Service's Endpoints, sorted.
async fn endpoints_addresses(s: &TestServer, svc: &str) -> (Vec<String>, Vec<String>) {
    let (code, ep) = s.get(&format!("{ENDPOINTS}/{svc}")).await;
    if code != 200 {
        return (vec!["<missing>".into()], vec![]);
    }
    let mut ready = Vec::new();
    let mut not_ready = Vec::new();
    for ss in ep["subsets"].as_array().cloned().unwrap_or_default() {
        let ports: Vec<String> = ss["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| p["port"].to_string())
            .collect();
        for (field, out) in [
            ("addresses", &mut ready),
            ("notReadyAddresses", &mut not_ready),
        ] {
            for a in ss[field].as_array().cloned().unwrap_or_default() {
                out.push(format!("{}:{}", a["ip"].as_str().unwrap(), ports.join("+")));
            }
        }
    }
    ready.sort();
    not_ready.sort();
    (ready, not_ready)
}

async fn endpoints_hold(s: &TestServer, svc: &str, ready: &[&str], not_ready: &[&str]) {
    let want = (
        ready.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        not_ready.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    eventually(20, &format!("{svc}'s Endpoints hold {want:?}"), || async {
        let got = endpoints_addresses(s, svc).await;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn slices_follow_the_pods_readiness_termination_and_labels() {
    let s = TestServer::start().await;
    let (code, out) = s
        .post(
            SERVICES,
            service(
                "web",
                json!([{"name": "web", "port": 80, "targetPort": "http"}]),
            ),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    // No pods yet: one empty placeholder slice.
    let placeholder = eventually(20, "a placeholder slice", || async {
        let got = slices(&s, "web").await;
        if got.len() == 1 {
            Ok(got)
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    let meta = &placeholder[0]["metadata"];
    assert!(meta["name"].as_str().unwrap().starts_with("web-"), "{meta}");
    assert_eq!(
        meta["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(meta["ownerReferences"][0]["kind"], "Service");
    assert_eq!(meta["ownerReferences"][0]["controller"], true);

    make_pod(&s, "a", "web", false).await;
    make_pod(&s, "b", "web", true).await;
    // A pod without an address is no endpoint yet.
    set_status(&s, "a", "10.1.0.1", true).await;
    set_status(&s, "b", "10.1.0.2", false).await;
    let got = slices_hold(
        &s,
        "web",
        &[
            ("a", "10.1.0.1", true, true, false),
            ("b", "10.1.0.2", false, false, false),
        ],
    )
    .await;
    assert_eq!(got.len(), 1, "the placeholder is reused: {got:?}");
    // The named target port resolves to the container's port.
    assert_eq!(
        got[0]["ports"],
        json!([{"name": "web", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(got[0]["addressType"], "IPv4");
    endpoints_hold(&s, "web", &["10.1.0.1:8080"], &["10.1.0.2:8080"]).await;

    // b becomes ready, then is deleted: a finalizer holds it, terminating and serving.
    set_status(&s, "b", "10.1.0.2", true).await;
    slices_hold(
        &s,
        "web",
        &[
            ("a", "10.1.0.1", true, true, false),
            ("b", "10.1.0.2", true, true, false),
        ],
    )
    .await;
    let (code, out) = s.delete(&format!("{PODS}/b")).await;
    assert_eq!(code, 200, "{out}");
    slices_hold(
        &s,
        "web",
        &[
            ("a", "10.1.0.1", true, true, false),
            ("b", "10.1.0.2", false, true, true),
        ],
    )
    .await;
    // The Endpoints leave a terminating pod out.
    endpoints_hold(&s, "web", &["10.1.0.1:8080"], &[]).await;

    // a leaves the selector.
    let (code, out) = s
        .patch(
            &format!("{PODS}/a"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"app": "other"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    slices_hold(&s, "web", &[("b", "10.1.0.2", false, true, true)]).await;
    endpoints_hold(&s, "web", &[], &[]).await;

    // The Service goes, its slices and Endpoints with it.
    let (code, out) = s.delete(&format!("{SERVICES}/web")).await;
    assert_eq!(code, 200, "{out}");
    eventually(20, "web's slices and Endpoints are gone", || async {
        let left = slices(&s, "web").await.len();
        let (code, _) = s.get(&format!("{ENDPOINTS}/web")).await;
        if left == 0 && code == 404 {
            Ok(())
        } else {
            Err(format!("{left} slices, Endpoints {code}"))
        }
    })
    .await;
    let (code, out) = s
        .patch(
            &format!("{PODS}/b"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

#[tokio::test]
async fn a_service_without_selector_is_left_alone_and_kubernetes_has_endpoints() {
    let s = TestServer::start().await;
    let (code, out) = s
        .post(
            SERVICES,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "manual"},
                   "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    // The API server's own Service points at the API.
    let ep = eventually(20, "the kubernetes Endpoints", || async {
        let (code, ep) = s.get(&format!("{ENDPOINTS}/kubernetes")).await;
        if code == 200 {
            Ok(ep)
        } else {
            Err(ep.to_string())
        }
    })
    .await;
    let port: u16 = s.url.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], port);
    assert_eq!(ep["subsets"][0]["ports"][0]["name"], "https");
    // Its slice is written just after the Endpoints.
    let kube = eventually(20, "the kubernetes EndpointSlice", || async {
        let kube = slices(&s, "kubernetes").await;
        if kube.is_empty() {
            Err("no slice yet".to_string())
        } else {
            Ok(kube)
        }
    })
    .await;
    assert_eq!(kube.len(), 1, "{kube:?}");
    assert_eq!(kube[0]["endpoints"][0]["addresses"][0], "127.0.0.1");
    // Nothing was made for the Service without selector.
    assert!(slices(&s, "manual").await.is_empty());
    let (code, _) = s.get(&format!("{ENDPOINTS}/manual")).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn invalid_slices_and_endpoints_are_refused_with_their_causes() {
    let s = TestServer::start().await;
    let (code, status) = s
        .post(
            SLICES,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "bad"},
                   "endpoints": [{"addresses": ["not-an-ip"]}, {"addresses": []}],
                   "ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        cause_fields(&status),
        ["addressType", "endpoints[1].addresses", "ports[1].name"]
    );
    let (code, status) = s
        .post(
            SLICES,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "v4"}, "addressType": "IPv4",
                   "endpoints": [{"addresses": ["fd00::1"]}]}),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("endpoints[0].addresses[0]")
            && message.contains("must be a valid IPv4 address"),
        "{message}"
    );
    let (code, made) = s
        .post(
            SLICES,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "good"}, "addressType": "IPv4",
                   "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}]}),
        )
        .await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["ports"][0]["protocol"], "TCP");
    let (code, status) = s
        .patch(
            &format!("{SLICES}/good"),
            "application/merge-patch+json",
            json!({"addressType": "IPv6"}),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{status}"
    );
    let (code, status) = s
        .post(
            ENDPOINTS,
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "bad"},
                   "subsets": [{"addresses": [{"ip": "300.0.0.1"}], "ports": [{"port": 80}]}]}),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(cause_fields(&status), ["subsets[0].addresses[0].ip"]);

    // kubectl's columns, through `berth get`.
    let run = s.berth(&["get", "endpointslices"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let header: Vec<&str> = run
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]);
    let good = run.stdout.lines().find(|l| l.starts_with("good ")).unwrap();
    let cells: Vec<&str> = good.split_whitespace().collect();
    assert_eq!(cells[..4], ["good", "IPv4", "80", "10.0.0.1"]);
    let run = s.berth(&["get", "ep"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let header: Vec<&str> = run
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "ENDPOINTS", "AGE"]);
    let run = s.berth(&["api-resources", "-o", "name"]).await;
    assert!(
        run.stdout.lines().any(|l| l == "endpoints")
            && run
                .stdout
                .lines()
                .any(|l| l == "endpointslices.discovery.k8s.io"),
        "{run:?}"
    );
}

#[tokio::test]
async fn more_than_100_endpoints_take_a_second_slice() {
    let s = TestServer::start().await;
    let (code, out) = s
        .post(
            SERVICES,
            service("many", json!([{"port": 80, "targetPort": 8080}])),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    for i in 0..101 {
        let name = format!("p{i:03}");
        make_pod(&s, &name, "many", false).await;
        set_status(
            &s,
            &name,
            &format!("10.2.{}.{}", i / 100, i % 100 + 1),
            true,
        )
        .await;
    }
    eventually(30, "101 endpoints in slices of 100 and 1", || async {
        let got = slices(&s, "many").await;
        let mut sizes: Vec<usize> = got
            .iter()
            .map(|s| s["endpoints"].as_array().map_or(0, Vec::len))
            .collect();
        sizes.sort();
        if sizes == [1, 100] {
            Ok(())
        } else {
            Err(format!("{sizes:?}"))
        }
    })
    .await;
    eventually(20, "101 ready addresses in the Endpoints", || async {
        let (ready, _) = endpoints_addresses(&s, "many").await;
        if ready.len() == 101 {
            Ok(())
        } else {
            Err(ready.len().to_string())
        }
    })
    .await;
}

/// The upstream conformance case ("EndpointSliceMirroring should mirror a custom
/// Endpoints resource through create update and delete"), and a selector added to the
/// Service ending the mirror.
#[tokio::test]
async fn endpoints_of_a_service_without_selector_are_mirrored_into_slices() {
    let s = TestServer::start().await;
    let (code, out) = s
        .post(
            SERVICES,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                   "spec": {"ports": [{"name": "pg", "port": 5432}]}}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let (code, out) = s
        .post(
            ENDPOINTS,
            json!({"apiVersion": "v1", "kind": "Endpoints",
                   "metadata": {"name": "db", "labels": {"team": "data"},
                                "annotations": {"note": "outside"}},
                   "subsets": [{"addresses": [{"ip": "10.1.2.3"}],
                                "notReadyAddresses": [{"ip": "10.1.2.4"}],
                                "ports": [{"name": "pg", "port": 5432}]}]}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let mirrored = |want: Vec<(&'static str, bool)>| {
        let s = &s;
        async move {
            eventually(
                20,
                &format!("db's mirrored slices hold {want:?}"),
                || async {
                    let got = slices(s, "db").await;
                    let mut have: Vec<(String, bool)> = got
                        .iter()
                        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
                        .map(|e| {
                            let ip = e["addresses"][0].as_str().unwrap_or_default().to_string();
                            (ip, e["conditions"]["ready"] == true)
                        })
                        .collect();
                    have.sort();
                    let want: Vec<(String, bool)> =
                        want.iter().map(|(a, r)| (a.to_string(), *r)).collect();
                    if have == want {
                        Ok(got)
                    } else {
                        Err(format!("{have:?}"))
                    }
                },
            )
            .await
        }
    };
    let got = mirrored(vec![("10.1.2.3", true), ("10.1.2.4", false)]).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let slice = &got[0];
    let labels = &slice["metadata"]["labels"];
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"],
        "endpointslicemirroring-controller.k8s.io"
    );
    assert_eq!(labels["team"], "data");
    assert_eq!(slice["metadata"]["annotations"]["note"], "outside");
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Endpoints");
    assert_eq!(slice["ports"][0]["port"], 5432);
    assert_eq!(slice["addressType"], "IPv4");

    // Updated: the slice follows, in place.
    let (code, mut ep) = s.get(&format!("{ENDPOINTS}/db")).await;
    assert_eq!(code, 200);
    ep["subsets"] =
        json!([{"addresses": [{"ip": "10.2.3.4"}], "ports": [{"name": "pg", "port": 5432}]}]);
    let (code, out) = s.put(&format!("{ENDPOINTS}/db"), ep).await;
    assert_eq!(code, 200, "{out}");
    let got = mirrored(vec![("10.2.3.4", true)]).await;
    assert_eq!(got[0]["metadata"]["uid"], slice["metadata"]["uid"]);

    // Deleted: the slices go.
    let (code, out) = s.delete(&format!("{ENDPOINTS}/db")).await;
    assert_eq!(code, 200, "{out}");
    mirrored(vec![]).await;

    // Made again, then the Service gains a selector: the endpoint slice controller's
    // slices replace the mirror.
    let (code, out) = s
        .post(
            ENDPOINTS,
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "db"},
                   "subsets": [{"addresses": [{"ip": "10.3.3.3"}], "ports": [{"port": 5432}]}]}),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    mirrored(vec![("10.3.3.3", true)]).await;
    let (code, out) = s
        .patch(
            &format!("{SERVICES}/db"),
            "application/merge-patch+json",
            json!({"spec": {"selector": {"app": "db"}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    eventually(20, "only the controller's placeholder slice", || async {
        let got = slices(&s, "db").await;
        let managers: Vec<&str> = got
            .iter()
            .map(|s| {
                s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"]
                    .as_str()
                    .unwrap_or_default()
            })
            .collect();
        if managers == ["endpointslice-controller.k8s.io"] {
            Ok(())
        } else {
            Err(format!("{managers:?}"))
        }
    })
    .await;
}
