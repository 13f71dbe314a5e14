//! The upstream `[sig-network]` Conformance tests (kubernetes/kubernetes
//! `test/e2e/network/`: `service.go`, `endpointslice.go`, `service_latency.go`) ported
//! to berth as `conformance_apps.rs` ports `[sig-apps]`'s: one test per upstream test,
//! named after it, following its steps and assertions (API calls, watch events, status
//! subresource, Endpoints and EndpointSlices the controllers write) against a real
//! server.
//!
//! What stands in for what upstream has:
//! - Pods get no address from a pod network here: the tests set their status (phase,
//!   `podIP`, Ready) themselves, as `endpoints.rs` does, where upstream waits for the
//!   kubelet.
//! - The `kubernetes` Service, which a cluster has long before a test starts, is made by
//!   a controller moments after the server starts: the tests that read it wait for it
//!   ([`api_service`]).
//! - Where upstream then checks that traffic reaches the pods through the Service (an
//!   exec pod curling the cluster IP, a DNS lookup of the ExternalName), the port keeps
//!   the API part: the objects and fields the proxy and DNS read. `podnet.rs`,
//!   `proxy.rs` and `dns.rs` test the traffic itself.
//!
//! Not ported:
//! - The Ingress, IngressClass and NetworkPolicy API tests (`ingress.go`,
//!   `ingressclass.go`, `netpol/`): `networking.k8s.io` is not served.
//! - EndpointSliceMirroring and the proxy subresource tests (`endpointslicemirroring.go`,
//!   `proxy.go`): `endpoints.rs` and `api_proxy.rs` cover them.
//! - Those that are all traffic, with nothing left once it is taken out: Services
//!   "should be able to create a functioning NodePort service" and the session affinity
//!   ones, `dns.go`, `networking.go` (Granular Checks) and `hostport.go`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestServer, WatchReader, eventually};

const PODS: &str = "/api/v1/namespaces/default/pods";
const SERVICES: &str = "/api/v1/namespaces/default/services";
const ENDPOINTS: &str = "/api/v1/namespaces/default/endpoints";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";

const SERVICE_NAME: &str = "kubernetes.io%2Fservice-name";

// ---------------------------------------------------------------------------------------
// Helpers.

async fn create_namespace(s: &TestServer, name: &str) {
    let (code, out) = s
        .post("/api/v1/namespaces", json!({"metadata": {"name": name}}))
        .await;
    assert_eq!(code, 201, "{out}");
}

async fn create(s: &TestServer, collection: &str, obj: Value) -> Value {
    let (code, out) = s.post(collection, obj).await;
    assert_eq!(code, 201, "create in {collection}: {out}");
    out
}

/// Reads events until `accept` takes one (`watchtools.Until`), failing after `secs`.
async fn until(
    w: &mut WatchReader,
    secs: u64,
    what: &str,
    mut accept: impl FnMut(&Value) -> bool,
) -> Value {
    let wait = async {
        loop {
            let e = w.next_change().await;
            if accept(&e) {
                return e;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: no such event in {secs} s"))
}

/// A new watch of `collection` from `rv` with the label selector `labels`, read until
/// `accept` takes an event, as upstream's `watchtools.Until(ctx, listRV, w, cond)`
/// replays from the list it made first.
async fn until_from(
    s: &TestServer,
    collection: &str,
    labels: &str,
    rv: &str,
    what: &str,
    accept: impl FnMut(&Value) -> bool,
) -> Value {
    let mut w = s
        .watch(&format!(
            "{collection}?watch=true&resourceVersion={rv}&labelSelector={labels}"
        ))
        .await;
    until(&mut w, 30, what, accept).await
}

fn list_rv(list: &Value) -> String {
    list["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list has a resourceVersion")
        .to_string()
}

/// A pod with one container with `ports`, labelled `labels`.
fn pod(name: &str, labels: Value, ports: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "container1", "image": "i", "ports": ports}]}})
}

/// Plays the kubelet: the pod runs at `ip` and is ready.
async fn set_running(s: &TestServer, pod: &str, ip: &str) -> Value {
    let (code, out) = s
        .patch(
            &format!("{PODS}/{pod}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": "True",
                                "lastTransitionTime": berth::types::now()}]}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    out
}

/// The slices labelled with the Service's name.
async fn slices_of(s: &TestServer, svc: &str) -> Vec<Value> {
    let (code, list) = s
        .get(&format!("{SLICES}?labelSelector={SERVICE_NAME}%3D{svc}"))
        .await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

/// The `kubernetes` Service in `default`, once the server has made it.
async fn api_service(s: &TestServer) -> Value {
    eventually(30, "the kubernetes Service is made", || async {
        match s.get(&format!("{SERVICES}/kubernetes")).await {
            (200, svc) => Ok(svc),
            (_, other) => Err(other.to_string()),
        }
    })
    .await
}

/// `validateEndpointsPortsOrFail`: waits until the Service's Endpoints and slices hold
/// exactly the pods `want` names, each with its ports (sorted).
async fn validate_endpoints_ports(s: &TestServer, svc: &str, want: &[(&str, &[i64])]) {
    let want: Vec<(String, Vec<i64>)> = want
        .iter()
        .map(|(pod, ports)| (pod.to_string(), ports.to_vec()))
        .collect();
    // (pod, ports) of the Endpoints' subsets and of the slices, merged by pod.
    fn by_pod(pairs: impl Iterator<Item = (String, i64)>) -> Vec<(String, Vec<i64>)> {
        let mut m = std::collections::BTreeMap::<String, Vec<i64>>::new();
        for (pod, port) in pairs {
            m.entry(pod).or_default().push(port);
        }
        m.into_iter()
            .map(|(pod, mut ports)| {
                ports.sort();
                (pod, ports)
            })
            .collect()
    }
    eventually(30, &format!("{svc} exposes {want:?}"), || async {
        let (_, ep) = s.get(&format!("{ENDPOINTS}/{svc}")).await;
        let from_endpoints = by_pod(items(&ep["subsets"]).iter().flat_map(|ss| {
            let ports: Vec<i64> = items(&ss["ports"])
                .iter()
                .map(|p| p["port"].as_i64().unwrap())
                .collect();
            items(&ss["addresses"])
                .iter()
                .flat_map(|a| {
                    let pod = a["targetRef"]["name"].as_str().unwrap_or("").to_string();
                    ports.iter().map(move |p| (pod.clone(), *p))
                })
                .collect::<Vec<_>>()
        }));
        let from_slices = by_pod(slices_of(s, svc).await.iter().flat_map(|slice| {
            let ports: Vec<i64> = items(&slice["ports"])
                .iter()
                .map(|p| p["port"].as_i64().unwrap())
                .collect();
            items(&slice["endpoints"])
                .iter()
                .filter(|e| e["conditions"]["ready"] == true)
                .flat_map(|e| {
                    let pod = e["targetRef"]["name"].as_str().unwrap_or("").to_string();
                    ports.iter().map(move |p| (pod.clone(), *p))
                })
                .collect::<Vec<_>>()
        }));
        if from_endpoints == want && from_slices == want {
            Ok(())
        } else {
            Err(format!(
                "Endpoints {from_endpoints:?}, slices {from_slices:?}"
            ))
        }
    })
    .await;
}

/// `e2epod.DeletePodOrFail`, with the kubelet's confirmation played by a zero grace
/// period.
async fn delete_pod(s: &TestServer, name: &str) {
    let (code, out) = s
        .call(
            reqwest::Method::DELETE,
            &format!("{PODS}/{name}"),
            Some(json!({"gracePeriodSeconds": 0})),
        )
        .await;
    assert_eq!(code, 200, "{out}");
}

fn items(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// `ensurePodTargetRef`.
fn ensure_pod_target_ref(pod: &Value, target: &Value) {
    assert_eq!(target["kind"], "Pod", "{target}");
    assert_eq!(
        target["namespace"], pod["metadata"]["namespace"],
        "{target}"
    );
    assert_eq!(target["name"], pod["metadata"]["name"], "{target}");
    assert_eq!(target["uid"], pod["metadata"]["uid"], "{target}");
}

/// `expectEndpointsAndSlices`: waits until the Service's Endpoints have `num_subsets`
/// subsets and its slices (at least `num_slices`) the pods' addresses, then checks their
/// ports and target references.
async fn expect_endpoints_and_slices(
    s: &TestServer,
    svc: &Value,
    pods: &[&Value],
    num_subsets: usize,
    num_slices: usize,
    named_port: bool,
) {
    let name = svc["metadata"]["name"].as_str().unwrap();
    let svc_ports = items(&svc["spec"]["ports"]);
    let slices = eventually(30, &format!("{name}'s slices match"), || async {
        let got = slices_of(s, name).await;
        let endpoints: usize = got.iter().map(|e| items(&e["endpoints"]).len()).sum();
        if !got.is_empty() && got.len() >= num_slices && endpoints >= pods.len() {
            Ok(got)
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    let endpoints = eventually(30, &format!("{name}'s Endpoints match"), || async {
        let (code, ep) = s.get(&format!("{ENDPOINTS}/{name}")).await;
        let subsets = items(&ep["subsets"]);
        let ips: usize = subsets
            .iter()
            .map(|ss| items(&ss["addresses"]).len() + items(&ss["notReadyAddresses"]).len())
            .sum();
        if code == 200 && subsets.len() == num_subsets && ips == pods.len() {
            Ok(ep)
        } else {
            Err(format!("{code} {ep}"))
        }
    })
    .await;
    let by_ip = |ip: &str| -> &Value {
        pods.iter()
            .find(|p| p["status"]["podIP"] == ip)
            .unwrap_or_else(|| panic!("unexpected address with IP {ip}"))
    };
    // The port a named target port resolves to in `pod`, when the pod declares it.
    let named = |pod: &Value| -> Option<i64> {
        items(&pod["spec"]["containers"][0]["ports"])
            .iter()
            .find(|p| p["name"] == svc_ports[0]["targetPort"])
            .map(|p| p["containerPort"].as_i64().unwrap())
    };
    assert_eq!(endpoints["metadata"]["name"], name);
    for subset in items(&endpoints["subsets"]) {
        let ports = items(&subset["ports"]);
        assert_eq!(ports.len(), svc_ports.len(), "{subset}");
        if !named_port {
            for (got, want) in ports.iter().zip(&svc_ports) {
                assert_eq!(got["name"], want["name"], "{subset}");
                assert_eq!(got["protocol"], want["protocol"], "{subset}");
                assert_eq!(got["port"], want["targetPort"], "{subset}");
            }
        }
        for field in ["addresses", "notReadyAddresses"] {
            for address in items(&subset[field]) {
                let pod = by_ip(address["ip"].as_str().unwrap());
                ensure_pod_target_ref(pod, &address["targetRef"]);
                if named_port && let Some(port) = named(pod) {
                    assert_eq!(ports[0]["port"], port, "{subset}");
                    assert_eq!(ports[0]["name"], svc_ports[0]["name"], "{subset}");
                }
            }
        }
    }
    if pods.is_empty() {
        assert_eq!(slices.len(), 1, "{slices:?}");
    }
    let mut addresses = std::collections::BTreeSet::new();
    for slice in &slices {
        let ports = items(&slice["ports"]);
        if pods.is_empty() {
            assert!(ports.is_empty(), "{slice}");
        } else {
            assert_eq!(ports.len(), svc_ports.len(), "{slice}");
        }
        if !named_port {
            for (got, want) in ports.iter().zip(&svc_ports) {
                assert_eq!(got["name"], want["name"], "{slice}");
                assert_eq!(got["protocol"], want["protocol"], "{slice}");
                assert_eq!(got["port"], want["targetPort"], "{slice}");
            }
        }
        for endpoint in items(&slice["endpoints"]) {
            let ip = endpoint["addresses"][0].as_str().expect("an address");
            addresses.insert(ip.to_string());
            let pod = by_ip(ip);
            ensure_pod_target_ref(pod, &endpoint["targetRef"]);
            if named_port && let Some(port) = named(pod) {
                assert_eq!(ports[0]["port"], port, "{slice}");
                assert_eq!(ports[0]["name"], svc_ports[0]["name"], "{slice}");
            }
        }
    }
    assert_eq!(addresses.len(), pods.len(), "{slices:?}");
}

/// `e2eservice.TestJig.SanityCheckService` for the type `kind`.
fn sanity_check_service(svc: &Value, kind: &str) {
    let spec = &svc["spec"];
    assert_eq!(spec["type"], kind, "{svc}");
    let cluster_ip = spec["clusterIP"].as_str().unwrap_or("");
    if kind == "ExternalName" {
        assert!(
            cluster_ip.is_empty(),
            "an ExternalName has no cluster IP: {svc}"
        );
        assert!(
            spec["clusterIPs"].as_array().is_none_or(|a| a.is_empty()),
            "{svc}"
        );
    } else {
        assert!(
            !cluster_ip.is_empty() && cluster_ip != "None",
            "a {kind} Service has a cluster IP: {svc}"
        );
        assert_eq!(spec["clusterIPs"][0], cluster_ip, "{svc}");
    }
    for port in items(&spec["ports"]) {
        let node_port = port["nodePort"].as_i64().unwrap_or(0);
        if kind == "NodePort" {
            assert!(
                (30000..=32767).contains(&node_port),
                "a node port from the range: {svc}"
            );
        } else {
            assert_eq!(node_port, 0, "no node port: {svc}");
        }
    }
    if kind != "ExternalName" {
        assert!(
            spec["externalName"].as_str().is_none_or(str::is_empty),
            "{svc}"
        );
    }
}

/// `jig.UpdateService`: reads the Service, changes it and writes it back.
async fn update_service(s: &TestServer, name: &str, change: impl Fn(&mut Value)) -> Value {
    let path = format!("{SERVICES}/{name}");
    let (code, mut svc) = s.get(&path).await;
    assert_eq!(code, 200, "{svc}");
    change(&mut svc);
    let (code, out) = s.put(&path, svc).await;
    assert_eq!(code, 200, "update of {name}: {out}");
    out
}

// ---------------------------------------------------------------------------------------
// Services (service.go).

/// `[sig-network] Services should provide secure master service [Conformance]`.
#[tokio::test]
async fn services_should_provide_secure_master_service() {
    let s = TestServer::start().await;
    let svc = api_service(&s).await;
    assert_eq!(svc["spec"]["ports"][0]["port"], 443, "{svc}");
}

/// `[sig-network] Services should find a service from listing all namespaces
/// [Conformance]`.
#[tokio::test]
async fn services_should_find_a_service_from_listing_all_namespaces() {
    let s = TestServer::start().await;
    api_service(&s).await;
    let (code, list) = s.get("/api/v1/services").await;
    assert_eq!(code, 200, "{list}");
    assert!(
        items(&list["items"]).iter().any(|svc| {
            svc["metadata"]["name"] == "kubernetes" && svc["metadata"]["namespace"] == "default"
        }),
        "could not find service 'kubernetes' in service list in all namespaces: {list}"
    );
}

/// `[sig-network] Services should test the lifecycle of an Endpoint [Conformance]`.
#[tokio::test]
async fn services_should_test_the_lifecycle_of_an_endpoint() {
    let s = TestServer::start().await;
    let labels = "test-endpoint-static%3Dtrue";
    let is_ours = |e: &Value| e["object"]["metadata"]["labels"]["test-endpoint-static"] == "true";
    let (code, list) = s
        .get(&format!("/api/v1/endpoints?labelSelector={labels}"))
        .await;
    assert_eq!(code, 200, "{list}");
    let rv = list_rv(&list);

    // creating an Endpoint
    create(
        &s,
        ENDPOINTS,
        json!({"metadata": {"name": "testservice",
                            "labels": {"test-endpoint-static": "true"}},
               "subsets": [{"addresses": [{"ip": "10.0.0.24"}],
                            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]}),
    )
    .await;
    // waiting for available Endpoint
    until_from(&s, ENDPOINTS, labels, &rv, "ADDED", |e| {
        e["type"] == "ADDED" && is_ours(e)
    })
    .await;

    // listing all Endpoints
    let (code, list) = s
        .get(&format!("/api/v1/endpoints?labelSelector={labels}"))
        .await;
    assert_eq!(code, 200, "{list}");
    let mut found = items(&list["items"])
        .into_iter()
        .find(|e| e["metadata"]["name"] == "testservice" && e["metadata"]["namespace"] == "default")
        .expect("unable to find Endpoint Service in list of Endpoints");

    // updating the Endpoint
    found["metadata"]["labels"]["test-service"] = json!("updated");
    let (code, out) = s.put(&format!("{ENDPOINTS}/testservice"), found).await;
    assert_eq!(code, 200, "failed to update Endpoint with new label: {out}");
    until_from(&s, ENDPOINTS, labels, &list_rv(&list), "MODIFIED", |e| {
        e["type"] == "MODIFIED" && is_ours(e)
    })
    .await;

    // fetching the Endpoint
    let (code, endpoints) = s.get(&format!("{ENDPOINTS}/testservice")).await;
    assert_eq!(code, 200, "{endpoints}");
    assert_eq!(endpoints["metadata"]["labels"]["test-service"], "updated");

    // patching the Endpoint
    let (code, out) = s
        .patch(
            &format!("{ENDPOINTS}/testservice"),
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"test-service": "patched"}},
                   "subsets": [{"addresses": [{"ip": "10.0.0.25"}],
                                "ports": [{"name": "http-test", "port": 8080}]}]}),
        )
        .await;
    assert_eq!(code, 200, "failed to patch Endpoint: {out}");
    let rv = endpoints["metadata"]["resourceVersion"].as_str().unwrap();
    until_from(&s, ENDPOINTS, labels, rv, "MODIFIED", |e| {
        e["type"] == "MODIFIED" && is_ours(e)
    })
    .await;

    // fetching the Endpoint
    let (code, endpoints) = s.get(&format!("{ENDPOINTS}/testservice")).await;
    assert_eq!(code, 200, "{endpoints}");
    assert_eq!(endpoints["metadata"]["labels"]["test-service"], "patched");
    let subset = &endpoints["subsets"][0];
    assert_eq!(subset["addresses"][0]["ip"], "10.0.0.25", "{endpoints}");
    assert_eq!(subset["ports"][0]["name"], "http-test", "{endpoints}");
    assert_eq!(subset["ports"][0]["port"], 8080, "{endpoints}");

    // deleting the Endpoint by Collection
    let (code, out) = s
        .delete(&format!("{ENDPOINTS}?labelSelector={labels}"))
        .await;
    assert_eq!(code, 200, "failed to delete Endpoint by Collection: {out}");
    // waiting for Endpoint deletion
    let rv = endpoints["metadata"]["resourceVersion"].as_str().unwrap();
    until_from(&s, ENDPOINTS, labels, rv, "DELETED", |e| {
        e["type"] == "DELETED" && is_ours(e)
    })
    .await;

    // fetching the Endpoint
    let (code, _) = s.get(&format!("{ENDPOINTS}/testservice")).await;
    assert_eq!(code, 404, "should not be able to fetch Endpoint");
}

/// `[sig-network] Services should complete a service status lifecycle [Conformance]`.
#[tokio::test]
async fn services_should_complete_a_service_status_lifecycle() {
    let s = TestServer::start().await;
    let name = "test-service-x7k2p";
    let labels = "test-service-static%3Dtrue";
    let is_ours = |e: &Value| {
        let m = &e["object"]["metadata"];
        m["name"] == name && m["namespace"] == "default"
    };
    let (code, list) = s
        .get(&format!("/api/v1/services?labelSelector={labels}"))
        .await;
    assert_eq!(code, 200, "{list}");
    let rv = list_rv(&list);

    // creating a Service
    create(
        &s,
        SERVICES,
        json!({"metadata": {"name": name, "labels": {"test-service-static": "true"}},
               "spec": {"type": "ClusterIP",
                        "ports": [{"name": "http", "protocol": "TCP", "port": 80,
                                   "targetPort": 80}]}}),
    )
    .await;
    // watching for the Service to be added
    until_from(&s, SERVICES, labels, &rv, "the Service is added", |e| {
        is_ours(e) && e["object"]["metadata"]["labels"]["test-service-static"] == "true"
    })
    .await;

    // Getting /status
    let (code, status) = s.get(&format!("{SERVICES}/{name}/status")).await;
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["kind"], "Service", "{status}");
    assert_eq!(status["metadata"]["name"], name, "{status}");

    // patching the ServiceStatus
    let (code, out) = s
        .patch(
            &format!("{SERVICES}/{name}/status"),
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                   "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}),
        )
        .await;
    assert_eq!(code, 200, "Could not patch service status: {out}");
    // watching for the Service to be patched
    let e = until_from(&s, SERVICES, labels, &rv, "the status is patched", |e| {
        is_ours(e) && e["object"]["metadata"]["annotations"]["patchedstatus"] == "true"
    })
    .await;
    assert_eq!(
        e["object"]["status"]["loadBalancer"]["ingress"][0]["ip"], "203.0.113.1",
        "{e}"
    );

    // updating the ServiceStatus (retry.RetryOnConflict)
    let mut tries = 0;
    let updated = loop {
        let (code, mut to_update) = s.get(&format!("{SERVICES}/{name}")).await;
        assert_eq!(code, 200, "Unable to retrieve service {name}: {to_update}");
        let mut conditions = items(&to_update["status"]["conditions"]);
        conditions.push(
            json!({"type": "StatusUpdate", "status": "True", "reason": "E2E",
                               "message": "Set from e2e test",
                               "lastTransitionTime": berth::types::now()}),
        );
        to_update["status"]["conditions"] = json!(conditions);
        let (code, updated) = s.put(&format!("{SERVICES}/{name}/status"), to_update).await;
        tries += 1;
        if code != 409 || tries == 5 {
            assert_eq!(code, 200, "Failed to UpdateStatus: {updated}");
            break updated;
        }
    };
    // The patched ingress is the client's: no controller takes it away.
    assert_eq!(
        updated["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "203.0.113.1"}]),
        "{updated}"
    );
    // watching for the Service to be updated
    until_from(&s, SERVICES, labels, &rv, "the status is updated", |e| {
        is_ours(e)
            && e["object"]["metadata"]["annotations"]["patchedstatus"] == "true"
            && items(&e["object"]["status"]["conditions"]).iter().any(|c| {
                c["type"] == "StatusUpdate"
                    && c["reason"] == "E2E"
                    && c["message"] == "Set from e2e test"
            })
    })
    .await;

    // patching the service
    let (code, out) = s
        .patch(
            &format!("{SERVICES}/{name}"),
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"test-service": "patched"}}}),
        )
        .await;
    assert_eq!(code, 200, "failed to patch service: {out}");
    // watching for the Service to be patched
    until_from(&s, SERVICES, labels, &rv, "the Service is patched", |e| {
        is_ours(e) && e["object"]["metadata"]["labels"]["test-service"] == "patched"
    })
    .await;

    // deleting the service
    let (code, out) = s.delete(&format!("{SERVICES}/{name}")).await;
    assert_eq!(code, 200, "failed to delete the Service: {out}");
    // watching for the Service to be deleted
    until_from(&s, SERVICES, labels, &rv, "the Service is deleted", |e| {
        e["type"] == "DELETED"
            && is_ours(e)
            && e["object"]["metadata"]["labels"]["test-service-static"] == "true"
    })
    .await;
}

/// `[sig-network] Services should delete a collection of services [Conformance]`.
#[tokio::test]
async fn services_should_delete_a_collection_of_services() {
    let s = TestServer::start().await;
    let ns = "services-1";
    create_namespace(&s, ns).await;
    let collection = format!("/api/v1/namespaces/{ns}/services");

    // creating a collection of services
    for (name, label, port) in [
        ("e2e-svc-a-4fx8q", "delete", 8001),
        ("e2e-svc-b-pl2wz", "delete", 8002),
        ("e2e-svc-c-9rmtd", "keep", 8003),
    ] {
        create(
            &s,
            &collection,
            json!({"metadata": {"name": name, "labels": {"e2e-test-service": label}},
                   "spec": {"type": "ClusterIP",
                            "ports": [{"name": "http", "protocol": "TCP", "port": port,
                                       "targetPort": port}]}}),
        )
        .await;
    }
    let (code, list) = s.get(&collection).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(
        items(&list["items"]).len(),
        3,
        "Required count of services out of sync"
    );

    // deleting service collection
    let (code, out) = s
        .delete(&format!(
            "{collection}?labelSelector=e2e-test-service%3Ddelete"
        ))
        .await;
    assert_eq!(code, 200, "failed to delete service collection: {out}");

    let (code, list) = s.get(&collection).await;
    assert_eq!(code, 200, "{list}");
    let left = items(&list["items"]);
    assert_eq!(left.len(), 1, "Required count of services out of sync");
    assert_eq!(left[0]["metadata"]["name"], "e2e-svc-c-9rmtd");
}

/// `[sig-network] Services should serve a basic endpoint from pods [Conformance]`: the
/// Endpoints and slices follow the pods (`validateEndpointsPortsOrFail`); the traffic
/// through the Service is not checked here.
#[tokio::test]
async fn services_should_serve_a_basic_endpoint_from_pods() {
    let s = TestServer::start().await;
    let svc = "endpoint-test2";
    let labels = json!({"foo": "bar", "baz": "blah"});
    // creating service endpoint-test2
    create(
        &s,
        SERVICES,
        json!({"metadata": {"name": svc},
               "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 80}]}}),
    )
    .await;
    // waiting for the service to expose no endpoints
    validate_endpoints_ports(&s, svc, &[]).await;

    // creating pod pod1 (and the kubelet starting it)
    create(
        &s,
        PODS,
        pod("pod1", labels.clone(), json!([{"containerPort": 80}])),
    )
    .await;
    set_running(&s, "pod1", "10.1.0.31").await;
    validate_endpoints_ports(&s, svc, &[("pod1", &[80])]).await;

    create(
        &s,
        PODS,
        pod("pod2", labels.clone(), json!([{"containerPort": 80}])),
    )
    .await;
    set_running(&s, "pod2", "10.1.0.32").await;
    validate_endpoints_ports(&s, svc, &[("pod1", &[80]), ("pod2", &[80])]).await;

    // deleting the pods
    delete_pod(&s, "pod1").await;
    validate_endpoints_ports(&s, svc, &[("pod2", &[80])]).await;
    delete_pod(&s, "pod2").await;
    validate_endpoints_ports(&s, svc, &[]).await;
}

/// `[sig-network] Services should serve multiport endpoints from pods [Conformance]`: the
/// named target ports resolve to each pod's own port.
#[tokio::test]
async fn services_should_serve_multiport_endpoints_from_pods() {
    let s = TestServer::start().await;
    let svc = "multi-endpoint-test";
    let labels = json!({"foo": "bar"});
    create(
        &s,
        SERVICES,
        json!({"metadata": {"name": svc},
               "spec": {"selector": labels,
                        "ports": [{"name": "portname1", "port": 80, "targetPort": "svc1"},
                                  {"name": "portname2", "port": 81, "targetPort": "svc2"}]}}),
    )
    .await;
    validate_endpoints_ports(&s, svc, &[]).await;

    create(
        &s,
        PODS,
        pod(
            "pod1",
            labels.clone(),
            json!([{"name": "svc1", "containerPort": 100}]),
        ),
    )
    .await;
    set_running(&s, "pod1", "10.1.0.41").await;
    validate_endpoints_ports(&s, svc, &[("pod1", &[100])]).await;

    create(
        &s,
        PODS,
        pod(
            "pod2",
            labels.clone(),
            json!([{"name": "svc2", "containerPort": 101}]),
        ),
    )
    .await;
    set_running(&s, "pod2", "10.1.0.42").await;
    validate_endpoints_ports(&s, svc, &[("pod1", &[100]), ("pod2", &[101])]).await;

    delete_pod(&s, "pod1").await;
    validate_endpoints_ports(&s, svc, &[("pod2", &[101])]).await;
    delete_pod(&s, "pod2").await;
    validate_endpoints_ports(&s, svc, &[]).await;
}

/// `[sig-network] Services should serve endpoints on same port and different protocols
/// [Conformance]`: the Endpoints and slices carry both ports with their protocols
/// (`validateEndpointsPortsWithProtocolsOrFail`); the traffic is not checked here.
#[tokio::test]
async fn services_should_serve_endpoints_on_same_port_and_different_protocols() {
    let s = TestServer::start().await;
    let svc = "multiprotocol-test";
    let labels = json!({"testid": "multiprotocol-test-1f2b9"});
    create(
        &s,
        SERVICES,
        json!({"metadata": {"name": svc},
               "spec": {"selector": labels,
                        "ports": [
                            {"name": "portname1", "port": 80, "targetPort": "svc1",
                             "protocol": "TCP"},
                            {"name": "portname2", "port": 80, "targetPort": "svc2",
                             "protocol": "UDP"}]}}),
    )
    .await;
    create(
        &s,
        PODS,
        pod(
            "pod1",
            labels.clone(),
            json!([{"name": "svc1", "containerPort": 100, "protocol": "TCP"},
                   {"name": "svc2", "containerPort": 100, "protocol": "UDP"}]),
        ),
    )
    .await;
    set_running(&s, "pod1", "10.1.0.7").await;

    // fullPortsByPodName{pod1: containerPorts}
    let mut want = vec![
        ("portname1".to_string(), 100, "TCP".to_string()),
        ("portname2".to_string(), 100, "UDP".to_string()),
    ];
    want.sort();
    let ports_of = |ports: &Value| {
        let mut got: Vec<(String, i64, String)> = items(ports)
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or("").to_string(),
                    p["port"].as_i64().unwrap_or(0),
                    p["protocol"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        got.sort();
        got
    };
    eventually(30, "the Endpoints hold pod1 with both ports", || async {
        let (code, ep) = s.get(&format!("{ENDPOINTS}/{svc}")).await;
        let subsets = items(&ep["subsets"]);
        let ok = code == 200
            && subsets.len() == 1
            && subsets[0]["addresses"][0]["ip"] == "10.1.0.7"
            && subsets[0]["addresses"][0]["targetRef"]["name"] == "pod1"
            && ports_of(&subsets[0]["ports"]) == want;
        if ok { Ok(()) } else { Err(ep.to_string()) }
    })
    .await;
    eventually(30, "the slices hold pod1 with both ports", || async {
        let got = slices_of(&s, svc).await;
        let ok = got.len() == 1
            && got[0]["endpoints"][0]["addresses"][0] == "10.1.0.7"
            && ports_of(&got[0]["ports"]) == want;
        if ok { Ok(()) } else { Err(format!("{got:?}")) }
    })
    .await;
}

/// `[sig-network] Services should be able to change the type from ExternalName to
/// ClusterIP [Conformance]`.
#[tokio::test]
async fn services_should_be_able_to_change_the_type_from_external_name_to_cluster_ip() {
    let s = TestServer::start().await;
    let name = "externalname-service";
    // creating a service externalname-service with the type=ExternalName
    let svc = create(&s, SERVICES, external_name_service(name)).await;
    sanity_check_service(&svc, "ExternalName");
    // changing the ExternalName service to type=ClusterIP
    let svc = update_service(&s, name, |svc| {
        svc["spec"]["type"] = json!("ClusterIP");
        svc["spec"]["externalName"] = json!("");
        svc["spec"]["ports"] =
            json!([{"port": 80, "name": "http", "protocol": "TCP", "targetPort": 80}]);
    })
    .await;
    sanity_check_service(&svc, "ClusterIP");
}

/// `[sig-network] Services should be able to change the type from ExternalName to
/// NodePort [Conformance]`.
#[tokio::test]
async fn services_should_be_able_to_change_the_type_from_external_name_to_node_port() {
    let s = TestServer::start().await;
    let name = "externalname-service";
    let svc = create(&s, SERVICES, external_name_service(name)).await;
    sanity_check_service(&svc, "ExternalName");
    // changing the ExternalName service to type=NodePort
    let svc = update_service(&s, name, |svc| {
        svc["spec"]["type"] = json!("NodePort");
        svc["spec"]["externalName"] = json!("");
        svc["spec"]["ports"] =
            json!([{"port": 80, "name": "http", "protocol": "TCP", "targetPort": 80}]);
    })
    .await;
    sanity_check_service(&svc, "NodePort");
}

/// `[sig-network] Services should be able to change the type from ClusterIP to
/// ExternalName [Conformance]`: the update leaves the cluster IP as it read it, and the
/// server drops it with the type.
#[tokio::test]
async fn services_should_be_able_to_change_the_type_from_cluster_ip_to_external_name() {
    let s = TestServer::start().await;
    let name = "clusterip-service";
    // creating a service clusterip-service with the type=ClusterIP
    let svc = create(&s, SERVICES, tcp_service(name, "ClusterIP")).await;
    sanity_check_service(&svc, "ClusterIP");
    // creating service externalsvc (the target of the ExternalName)
    create(&s, SERVICES, tcp_service("externalsvc", "ClusterIP")).await;
    // changing the ClusterIP service to type=ExternalName
    let svc = update_service(&s, name, |svc| {
        svc["spec"]["type"] = json!("ExternalName");
        svc["spec"]["externalName"] = json!("externalsvc.default.svc.cluster.local");
    })
    .await;
    sanity_check_service(&svc, "ExternalName");
    assert_eq!(
        svc["spec"]["externalName"],
        "externalsvc.default.svc.cluster.local"
    );
}

/// `[sig-network] Services should be able to change the type from NodePort to
/// ExternalName [Conformance]`.
#[tokio::test]
async fn services_should_be_able_to_change_the_type_from_node_port_to_external_name() {
    let s = TestServer::start().await;
    let name = "nodeport-service";
    // creating a service nodeport-service with the type=NodePort
    let svc = create(&s, SERVICES, tcp_service(name, "NodePort")).await;
    sanity_check_service(&svc, "NodePort");
    create(&s, SERVICES, tcp_service("externalsvc", "ClusterIP")).await;
    // changing the NodePort service to type=ExternalName
    let svc = update_service(&s, name, |svc| {
        svc["spec"]["type"] = json!("ExternalName");
        svc["spec"]["externalName"] = json!("externalsvc.default.svc.cluster.local");
    })
    .await;
    sanity_check_service(&svc, "ExternalName");
}

/// `jig.CreateExternalNameService`'s Service.
fn external_name_service(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"testid": name}},
           "spec": {"selector": {"testid": name}, "type": "ExternalName",
                    "externalName": "foo.example.com"}})
}

/// `jig.CreateTCPService`'s Service of the type `kind`.
fn tcp_service(name: &str, kind: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"testid": name}},
           "spec": {"selector": {"testid": name}, "type": kind,
                    "ports": [{"protocol": "TCP", "port": 80}]}})
}

// ---------------------------------------------------------------------------------------
// Service endpoints latency (service_latency.go).

/// `[sig-network] Service endpoints latency should not be very high [Conformance]`: 200
/// Services, 50 made at a time, each selecting one running pod; the time from a Service's
/// create to its Endpoints listing the pod has a median under 20 s and a 99th percentile
/// under 50 s. Upstream's pod comes from a ReplicationController; here it is made
/// directly, its status set by the test.
#[tokio::test]
async fn service_endpoints_latency_should_not_be_very_high() {
    use futures_util::StreamExt;
    use std::collections::HashMap;
    use std::time::Instant;

    const TOTAL: usize = 200;
    const IN_PARALLEL: usize = 50;
    let s = TestServer::start().await;
    create(
        &s,
        PODS,
        pod(
            "svc-latency-rc-x",
            json!({"name": "svc-latency-rc"}),
            json!([]),
        ),
    )
    .await;
    set_running(&s, "svc-latency-rc-x", "10.1.0.61").await;

    let (code, list) = s.get(ENDPOINTS).await;
    assert_eq!(code, 200, "{list}");
    let mut w = s
        .watch(&format!(
            "{ENDPOINTS}?watch=true&resourceVersion={}",
            list_rv(&list)
        ))
        .await;
    let started = std::sync::Mutex::new(HashMap::<String, Instant>::new());
    let creates = futures_util::stream::iter(0..TOTAL)
        .map(|i| {
            let started = &started;
            let s = &s;
            async move {
                let name = format!("latency-svc-{i:03}");
                started.lock().unwrap().insert(name.clone(), Instant::now());
                create(
                    s,
                    SERVICES,
                    json!({"metadata": {"name": name},
                           "spec": {"selector": {"name": "svc-latency-rc"},
                                    "ports": [{"port": 80, "targetPort": 9376}]}}),
                )
                .await;
            }
        })
        .buffer_unordered(IN_PARALLEL)
        .collect::<Vec<()>>();
    let seen = async {
        let mut seen = HashMap::<String, Instant>::new();
        while seen.len() < TOTAL {
            let e = w.next_change().await;
            let ep = &e["object"];
            let name = ep["metadata"]["name"].as_str().unwrap_or("").to_string();
            let ready = items(&ep["subsets"])
                .iter()
                .any(|ss| !items(&ss["addresses"]).is_empty());
            if name.starts_with("latency-svc-") && ready {
                seen.entry(name).or_insert_with(Instant::now);
            }
        }
        seen
    };
    let (_, seen) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(creates, seen)
    })
    .await
    .expect("every Service's Endpoints list the pod");

    let started = started.into_inner().unwrap();
    let mut latencies: Vec<Duration> = seen
        .iter()
        .map(|(name, at)| at.duration_since(started[name]))
        .collect();
    latencies.sort();
    let percentile = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    let (p50, p90, p99) = (percentile(50), percentile(90), percentile(99));
    eprintln!("Latencies: p50 {p50:?}, p90 {p90:?}, p99 {p99:?}");
    assert!(p50 <= Duration::from_secs(20), "p50 {p50:?} is too high");
    assert!(p99 <= Duration::from_secs(50), "p99 {p99:?} is too high");
}

// ---------------------------------------------------------------------------------------
// EndpointSlice (endpointslice.go).

/// `[sig-network] EndpointSlice should have Endpoints and EndpointSlices pointing to API
/// Server [Conformance]`.
#[tokio::test]
async fn endpoint_slice_should_have_endpoints_and_endpoint_slices_pointing_to_api_server() {
    let s = TestServer::start().await;
    api_service(&s).await;
    let (endpoints, slices) = eventually(30, "the API server's endpoints", || async {
        let (code, ep) = s.get(&format!("{ENDPOINTS}/kubernetes")).await;
        let slices = slices_of(&s, "kubernetes").await;
        if code == 200 && !items(&ep["subsets"]).is_empty() && !slices.is_empty() {
            Ok((ep, slices))
        } else {
            Err(format!("{code} {ep} {slices:?}"))
        }
    })
    .await;
    // endpointSlicesEqual: the same addresses and ports, in the slices of the family of
    // the Service.
    let mut ep_addresses = std::collections::BTreeSet::new();
    let mut ep_ports = std::collections::BTreeSet::new();
    for subset in items(&endpoints["subsets"]) {
        for field in ["addresses", "notReadyAddresses"] {
            for a in items(&subset[field]) {
                ep_addresses.insert(a["ip"].as_str().unwrap().to_string());
            }
        }
        for p in items(&subset["ports"]) {
            ep_ports.insert(p["port"].as_i64().unwrap());
        }
    }
    let mut slice_addresses = std::collections::BTreeSet::new();
    let mut slice_ports = std::collections::BTreeSet::new();
    for slice in slices.iter().filter(|s| s["addressType"] == "IPv4") {
        for e in items(&slice["endpoints"]) {
            for a in items(&e["addresses"]) {
                slice_addresses.insert(a.as_str().unwrap().to_string());
            }
        }
        for p in items(&slice["ports"]) {
            if let Some(port) = p["port"].as_i64() {
                slice_ports.insert(port);
            }
        }
    }
    assert_eq!(slice_addresses, ep_addresses, "{endpoints} {slices:?}");
    assert_eq!(slice_ports, ep_ports, "{endpoints} {slices:?}");
}

/// `[sig-network] EndpointSlice should create and delete Endpoints and EndpointSlices for
/// a Service with a selector specified [Conformance]`.
#[tokio::test]
async fn endpoint_slice_should_create_and_delete_endpoints_and_endpoint_slices_for_a_service_with_a_selector_specified()
 {
    let s = TestServer::start().await;
    let name = "example-empty-selector";
    create(
        &s,
        SERVICES,
        json!({"metadata": {"name": name},
               "spec": {"selector": {"does-not-match-anything":
                                     "endpoints-and-endpoint-slices-should-still-be-created"},
                        "ports": [{"name": "example", "port": 80, "protocol": "TCP"}]}}),
    )
    .await;
    // Expect Endpoints resource to be created.
    eventually(30, "the Endpoints are created", || async {
        match s.get(&format!("{ENDPOINTS}/{name}")).await {
            (200, _) => Ok(()),
            (_, other) => Err(other.to_string()),
        }
    })
    .await;
    // Expect EndpointSlice resource to be created.
    let slice = eventually(30, "a slice is created", || async {
        match slices_of(&s, name).await.first() {
            Some(slice) => Ok(slice.clone()),
            None => Err("none".to_string()),
        }
    })
    .await;
    // Ensure EndpointSlice has expected values.
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io",
        "{slice}"
    );
    assert!(items(&slice["endpoints"]).is_empty(), "{slice}");

    let (code, out) = s.delete(&format!("{SERVICES}/{name}")).await;
    assert_eq!(code, 200, "error deleting Service: {out}");
    // Expect Endpoints resource to be deleted when Service is.
    eventually(30, "the Endpoints are deleted", || async {
        match s.get(&format!("{ENDPOINTS}/{name}")).await {
            (404, _) => Ok(()),
            (code, other) => Err(format!("{code} {other}")),
        }
    })
    .await;
    // Expect EndpointSlice resource to be deleted when Service is.
    eventually(90, "the slices are deleted", || async {
        let left = slices_of(&s, name).await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
}

/// `[sig-network] EndpointSlice should create Endpoints and EndpointSlices for Pods
/// matching a Service [Conformance]`.
#[tokio::test]
async fn endpoint_slice_should_create_endpoints_and_endpoint_slices_for_pods_matching_a_service() {
    let s = TestServer::start().await;
    create(
        &s,
        PODS,
        pod(
            "pod1",
            json!({"pod1": "on", "shared12": "on"}),
            json!([{"name": "example-name", "containerPort": 3000}]),
        ),
    )
    .await;
    create(
        &s,
        PODS,
        pod(
            "pod2",
            json!({"pod2": "on", "shared12": "on"}),
            json!([{"name": "example-name", "containerPort": 3001},
                   {"name": "other-port", "containerPort": 3002}]),
        ),
    )
    .await;
    let svc = |name: &str, selector: Value, port: Value| {
        json!({"metadata": {"name": name},
               "spec": {"selector": selector, "publishNotReadyAddresses": true,
                        "ports": [port]}})
    };
    let svc1 = create(
        &s,
        SERVICES,
        svc(
            "example-int-port",
            json!({"pod1": "on"}),
            json!({"name": "example", "port": 80, "targetPort": 3000, "protocol": "TCP"}),
        ),
    )
    .await;
    let svc2 = create(
        &s,
        SERVICES,
        svc(
            "example-named-port",
            json!({"shared12": "on"}),
            json!({"name": "http", "port": 80, "targetPort": "example-name",
                   "protocol": "TCP"}),
        ),
    )
    .await;
    let svc3 = create(
        &s,
        SERVICES,
        svc(
            "example-no-match",
            json!({"pod3": "on"}),
            json!({"name": "example-no-match", "port": 80, "targetPort": 8080,
                   "protocol": "TCP"}),
        ),
    )
    .await;
    // The pods get their IPs (from the kubelet upstream).
    let pod1 = set_running(&s, "pod1", "10.1.0.11").await;
    let pod2 = set_running(&s, "pod2", "10.1.0.12").await;

    // referencing a single matching pod
    expect_endpoints_and_slices(&s, &svc1, &[&pod1], 1, 1, false).await;
    // referencing matching pods with named port
    expect_endpoints_and_slices(&s, &svc2, &[&pod1, &pod2], 2, 2, true).await;
    // creating empty Endpoints and EndpointSlices for no matching Pods
    expect_endpoints_and_slices(&s, &svc3, &[], 0, 1, false).await;

    // recreating EndpointSlices after they've been deleted
    for slice in slices_of(&s, "example-named-port").await {
        let name = slice["metadata"]["name"].as_str().unwrap();
        let (code, out) = s.delete(&format!("{SLICES}/{name}")).await;
        assert_eq!(code, 200, "{out}");
    }
    expect_endpoints_and_slices(&s, &svc2, &[&pod1, &pod2], 2, 2, true).await;
}

/// `[sig-network] EndpointSlice should support creating EndpointSlice API operations
/// [Conformance]`.
#[tokio::test]
async fn endpoint_slice_should_support_creating_endpoint_slice_api_operations() {
    let s = TestServer::start().await;
    let unique = "endpointslice-2817";
    let labels = format!("special-label%3D{unique}");
    let template = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"generateName": "e2e-example-ing", "labels": {"special-label": unique}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["1.2.3.4", "5.6.7.8"]},
                      {"addresses": ["2.2.3.4", "6.6.7.8"]}]});

    // getting /apis
    let (code, groups) = s.get("/apis").await;
    assert_eq!(code, 200, "{groups}");
    assert!(
        items(&groups["groups"])
            .iter()
            .any(|g| g["name"] == "discovery.k8s.io"
                && items(&g["versions"]).iter().any(|v| v["version"] == "v1")),
        "expected discovery API group/version, got {groups}"
    );
    // getting /apis/discovery.k8s.io
    let (code, group) = s.get("/apis/discovery.k8s.io").await;
    assert_eq!(code, 200, "{group}");
    assert!(
        items(&group["versions"])
            .iter()
            .any(|v| v["version"] == "v1"),
        "expected discovery API version, got {group}"
    );
    // getting /apis/discovery.k8s.io/v1
    let (code, resources) = s.get("/apis/discovery.k8s.io/v1").await;
    assert_eq!(code, 200, "{resources}");
    assert!(
        items(&resources["resources"])
            .iter()
            .any(|r| r["name"] == "endpointslices"),
        "expected endpointslices, got {resources}"
    );

    // creating
    create(&s, SLICES, template.clone()).await;
    create(&s, SLICES, template.clone()).await;
    let created = create(&s, SLICES, template).await;
    let name = created["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("e2e-example-ing"), "{created}");
    let path = format!("{SLICES}/{name}");

    // getting
    let (code, queried) = s.get(&path).await;
    assert_eq!(code, 200, "{queried}");
    assert_eq!(queried["metadata"]["uid"], created["metadata"]["uid"]);

    // listing
    let (code, list) = s.get(&format!("{SLICES}?labelSelector={labels}")).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(
        items(&list["items"]).len(),
        3,
        "filtered list should have 3 items"
    );

    // watching
    let mut w = s
        .watch(&format!(
            "{SLICES}?watch=true&resourceVersion={}&labelSelector={labels}",
            list_rv(&list)
        ))
        .await;

    // cluster-wide listing
    let (code, cluster_list) = s
        .get(&format!(
            "/apis/discovery.k8s.io/v1/endpointslices?labelSelector={labels}"
        ))
        .await;
    assert_eq!(code, 200, "{cluster_list}");
    assert_eq!(
        items(&cluster_list["items"]).len(),
        3,
        "filtered list should have 3 items"
    );
    // cluster-wide watching
    s.watch(&format!(
        "/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={}&labelSelector={labels}",
        list_rv(&list)
    ))
    .await;

    // patching
    let (code, patched) = s
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {"patched": "true"}}}),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        patched["metadata"]["annotations"]["patched"], "true",
        "patched object should have the applied annotation"
    );
    let rv = |o: &Value| {
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(
        rv(&patched) > rv(&created),
        "patched object should have a larger resource version"
    );

    // updating
    let (code, mut to_update) = s.get(&path).await;
    assert_eq!(code, 200, "{to_update}");
    to_update["metadata"]["annotations"]["updated"] = json!("true");
    let (code, updated) = s.put(&path, to_update).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        updated["metadata"]["annotations"]["updated"], "true",
        "updated object should have the applied annotation"
    );

    // waiting for watch events with expected annotations
    until(&mut w, 30, "the patched slice", |e| {
        assert_eq!(e["type"], "MODIFIED", "{e}");
        assert_eq!(e["object"]["kind"], "EndpointSlice", "{e}");
        e["object"]["metadata"]["annotations"]["patched"] == "true"
    })
    .await;

    // deleting
    let (code, out) = s.delete(&path).await;
    assert_eq!(code, 200, "{out}");
    let (code, _) = s.get(&path).await;
    assert_eq!(code, 404, "expected 404");
    let (code, list) = s.get(&format!("{SLICES}?labelSelector={labels}")).await;
    assert_eq!(code, 200, "{list}");
    let left = items(&list["items"]);
    assert_eq!(left.len(), 2, "filtered list should have 2 items");
    assert!(
        left.iter().all(|e| e["metadata"]["name"] != name.as_str()),
        "listing after deleting createdEPS"
    );

    // deleting a collection
    let (code, out) = s.delete(&format!("{SLICES}?labelSelector={labels}")).await;
    assert_eq!(code, 200, "{out}");
    let (code, list) = s.get(&format!("{SLICES}?labelSelector={labels}")).await;
    assert_eq!(code, 200, "{list}");
    assert!(
        items(&list["items"]).is_empty(),
        "filtered list should have 0 items"
    );
}

/// `[sig-network] EndpointSlice should support a Service with multiple ports specified
/// in multiple EndpointSlices [Conformance]`: the selector-less Service and its two
/// hand-made slices (same address, one port each) are accepted and left as they are —
/// the controller neither adds a slice of its own nor touches those another manager
/// owns; the traffic through both ports is not checked here.
#[tokio::test]
async fn endpoint_slice_should_support_a_service_with_multiple_ports_specified_in_multiple_endpoint_slices()
 {
    let s = TestServer::start().await;
    let name = "example-custom-endpoints";
    let svc = create(
        &s,
        SERVICES,
        json!({"metadata": {"name": name},
               "spec": {"ports": [{"name": "port80", "port": 80, "protocol": "TCP"},
                                  {"name": "port81", "port": 81, "protocol": "TCP"}]}}),
    )
    .await;
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty())
    );
    create(
        &s,
        PODS,
        json!({"metadata": {"name": "pod-handle-http-request"},
               "spec": {"containers": [
                   {"name": "container-handle-8090-request", "image": "i",
                    "ports": [{"containerPort": 8090, "protocol": "TCP"}]},
                   {"name": "container-handle-9090-request", "image": "i",
                    "ports": [{"containerPort": 9090, "protocol": "TCP"}]}]}}),
    )
    .await;
    let pod = set_running(&s, "pod-handle-http-request", "10.1.0.21").await;
    let ip = pod["status"]["podIP"].as_str().unwrap();

    // creating
    let slice = |port_name: &str, port: u16| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"generateName": "e2e-custom-slice",
                         "labels": {"kubernetes.io/service-name": name,
                                    "endpointslice.kubernetes.io/managed-by": "e2e-testdefault"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}]})
    };
    create(&s, SLICES, slice("port80", 8090)).await;
    create(&s, SLICES, slice("port81", 9090)).await;

    // What the proxy reads for the Service: both slices, as made, and no other.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut got: Vec<(String, i64)> = slices_of(&s, name)
        .await
        .iter()
        .map(|e| {
            assert_eq!(e["endpoints"][0]["addresses"][0], ip, "{e}");
            assert_eq!(
                e["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
                "e2e-testdefault"
            );
            (
                e["ports"][0]["name"].as_str().unwrap().to_string(),
                e["ports"][0]["port"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![("port80".to_string(), 8090), ("port81".to_string(), 9090)]
    );
}

/// `[sig-network] EndpointSlice should support a Service with multiple endpoint IPs
/// specified in multiple EndpointSlices [Conformance]`: as the test before, with one
/// address in each slice.
#[tokio::test]
async fn endpoint_slice_should_support_a_service_with_multiple_endpoint_ips_specified_in_multiple_endpoint_slices()
 {
    let s = TestServer::start().await;
    let name = "example-custom-endpoints";
    create(
        &s,
        SERVICES,
        json!({"metadata": {"name": name},
               "spec": {"ports": [{"name": "port80", "port": 80, "protocol": "TCP"},
                                  {"name": "port81", "port": 81, "protocol": "TCP"}]}}),
    )
    .await;
    let mut ips = Vec::new();
    for (pod_name, ip) in [
        ("pod1-handle-http-request", "10.1.0.51"),
        ("pod2-handle-http-request", "10.1.0.52"),
    ] {
        create(
            &s,
            PODS,
            json!({"metadata": {"name": pod_name},
                   "spec": {"containers": [
                       {"name": "container-handle-8090-request", "image": "i",
                        "ports": [{"containerPort": 8090, "protocol": "TCP"}]}]}}),
        )
        .await;
        let pod = set_running(&s, pod_name, ip).await;
        ips.push(pod["status"]["podIP"].as_str().unwrap().to_string());
    }

    // creating
    for (ip, port_name) in ips.iter().zip(["port80", "port81"]) {
        create(
            &s,
            SLICES,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"generateName": "e2e-custom-slice",
                             "labels": {"kubernetes.io/service-name": name,
                                        "endpointslice.kubernetes.io/managed-by":
                                            "e2e-testdefault"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
                "ports": [{"name": port_name, "port": 8090, "protocol": "TCP"}]}),
        )
        .await;
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut got: Vec<(String, String, i64)> = slices_of(&s, name)
        .await
        .iter()
        .map(|e| {
            (
                e["ports"][0]["name"].as_str().unwrap().to_string(),
                e["endpoints"][0]["addresses"][0]
                    .as_str()
                    .unwrap()
                    .to_string(),
                e["ports"][0]["port"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("port80".to_string(), ips[0].clone(), 8090),
            ("port81".to_string(), ips[1].clone(), 8090)
        ]
    );
}
