//! networking.k8s.io/v1 end to end: discovery, the lifecycle of Ingresses, IngressClasses
//! and NetworkPolicies, upstream's validation with field paths, their defaults, the
//! default IngressClass, kubectl's tables through `berth get`, and ports of the upstream
//! API conformance tests (API steps only: no ingress controller is built in, and
//! NetworkPolicies are stored, not enforced).

use serde_json::{Value, json};

use crate::support::{CliRun, TestServer, cause_fields, column_names};

const GROUP: &str = "/apis/networking.k8s.io/v1";
const INGRESSES: &str = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
const CLASSES: &str = "/apis/networking.k8s.io/v1/ingressclasses";
const POLICIES: &str = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies";
const MERGE: &str = "application/merge-patch+json";

fn items(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

fn ingress(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name}, "spec": spec})
}

fn backend(service: &str, port: u16) -> Value {
    json!({"service": {"name": service, "port": {"number": port}}})
}

fn class(name: &str, controller: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
           "metadata": {"name": name}, "spec": {"controller": controller}})
}

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn discovery_lists_the_group_and_its_three_resources() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let (_, groups) = s.get("/apis").await;
    let group = items(&groups["groups"])
        .into_iter()
        .find(|g| g["name"] == "networking.k8s.io")
        .expect("networking.k8s.io under /apis");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "networking.k8s.io/v1"
    );
    let (code, list) = s.get(GROUP).await;
    assert_eq!(code, 200, "{list}");
    let find = |name: &str| {
        items(&list["resources"])
            .into_iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"))
    };
    let ing = find("ingresses");
    assert_eq!(
        (&ing["kind"], &ing["namespaced"], &ing["shortNames"]),
        (&json!("Ingress"), &json!(true), &json!(["ing"]))
    );
    find("ingresses/status");
    let classes = find("ingressclasses");
    assert_eq!(
        (&classes["kind"], &classes["namespaced"]),
        (&json!("IngressClass"), &json!(false))
    );
    let netpol = find("networkpolicies");
    assert_eq!(
        (
            &netpol["kind"],
            &netpol["namespaced"],
            &netpol["shortNames"]
        ),
        (&json!("NetworkPolicy"), &json!(true), &json!(["netpol"]))
    );
    // Their schemas are published.
    let (_, v2) = s.get("/openapi/v2").await;
    for kind in ["Ingress", "IngressClass", "NetworkPolicy"] {
        assert!(
            v2["definitions"][format!("io.k8s.api.networking.v1.{kind}")].is_object(),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn invalid_objects_are_refused_with_their_causes() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let refused = |code: u16, out: &Value| {
        assert_eq!(code, 422, "{out}");
        assert_eq!(out["kind"], "Status");
        assert_eq!(out["reason"], "Invalid");
    };
    // Ingress: an IP as host, a path without a type, a relative Prefix path, a backend
    // with both a service and a resource, a port without a name or number.
    let bad = ingress(
        "bad",
        json!({"rules": [
            {"host": "10.0.0.1", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web", 80)}]}},
            {"host": "*.example.com", "http": {"paths": [
                {"path": "/", "backend": backend("web", 80)},
                {"path": "rel", "pathType": "Prefix", "backend": backend("web", 80)},
                {"path": "/both", "pathType": "Exact", "backend": {
                    "service": {"name": "web", "port": {"number": 80}},
                    "resource": {"kind": "Bucket", "name": "b"}}},
                {"path": "/noport", "pathType": "Exact", "backend": {"service": {"name": "web", "port": {}}}}]}}],
            "tls": [{"hosts": ["a.*.com"]}]}),
    );
    let (code, out) = s.post(INGRESSES, bad).await;
    refused(code, &out);
    assert_eq!(
        cause_fields(&out),
        [
            "spec.rules[0].host",
            "spec.rules[1].http.paths[0].pathType",
            "spec.rules[1].http.paths[1].path",
            "spec.rules[1].http.paths[2].backend",
            "spec.rules[1].http.paths[3].backend",
            "spec.tls[0].hosts[0]",
        ],
        "{out}"
    );
    assert_eq!(
        out["details"]["causes"][0]["message"],
        "Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address"
    );
    assert_eq!(
        out["details"]["causes"][1]["message"],
        "Required value: pathType must be specified"
    );
    let (code, out) = s.post(INGRESSES, ingress("empty", json!({}))).await;
    refused(code, &out);
    assert_eq!(cause_fields(&out), ["spec"]);

    // IngressClass: a controller is required, a domain-prefixed path, and never changes.
    let (code, out) = s
        .post(CLASSES, json!({"metadata": {"name": "c"}, "spec": {}}))
        .await;
    refused(code, &out);
    assert_eq!(cause_fields(&out), ["spec.controller"]);
    let (code, out) = s.post(CLASSES, class("c", "no-path")).await;
    refused(code, &out);
    assert_eq!(
        out["details"]["causes"][0]["message"],
        "Invalid value: \"no-path\": must be a domain-prefixed path (such as \"acme.io/foo\")"
    );
    let (code, out) = s.post(CLASSES, class("c", "example.com/one")).await;
    assert_eq!(code, 201, "{out}");
    let (code, out) = s
        .patch(
            &format!("{CLASSES}/c"),
            MERGE,
            json!({"spec": {"controller": "example.com/two"}}),
        )
        .await;
    refused(code, &out);
    assert_eq!(
        out["details"]["causes"][0]["message"],
        "Invalid value: \"example.com/two\": field is immutable"
    );

    // NetworkPolicy: a pod selector is required, known protocols, an end port only after
    // a numeric port, exceptions inside their block.
    let (code, out) = s.post(POLICIES, policy("p", json!({}))).await;
    refused(code, &out);
    assert_eq!(cause_fields(&out), ["spec.podSelector"]);
    let (code, out) = s
        .post(
            POLICIES,
            policy(
                "p",
                json!({"podSelector": {}, "policyTypes": ["Ingress", "Sideways"],
                   "ingress": [{"ports": [{"protocol": "ICMP"}, {"port": "http", "endPort": 90}, {"port": 90, "endPort": 80}]}],
                   "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}},
                                      {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}),
            ),
        )
        .await;
    refused(code, &out);
    assert_eq!(
        cause_fields(&out),
        [
            "spec.ingress[0].ports[0].protocol",
            "spec.ingress[0].ports[1].endPort",
            "spec.ingress[0].ports[2].endPort",
            "spec.egress[0].to[0].ipBlock.except[0]",
            "spec.egress[0].to[1]",
            "spec.policyTypes[1]",
        ],
        "{out}"
    );
    assert_eq!(
        out["details"]["causes"][3]["message"],
        "Invalid value: \"10.1.0.0/24\": must be a strict subset of `cidr`"
    );
}

#[tokio::test]
async fn defaults_and_the_default_ingress_class() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    // NetworkPolicy: Ingress always, Egress with egress rules; a port's protocol is TCP.
    let (code, p) = s
        .post(
            POLICIES,
            policy(
                "web",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                       "ingress": [{"ports": [{"port": 80}]}], "egress": [{}]}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(p["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
    assert_eq!(p["metadata"]["generation"], 1);
    // Its generation moves with its spec only.
    let web = format!("{POLICIES}/web");
    let (_, p) = s
        .patch(&web, MERGE, json!({"metadata": {"labels": {"a": "b"}}}))
        .await;
    assert_eq!(p["metadata"]["generation"], 1, "{p}");
    let (_, p) = s
        .patch(
            &web,
            MERGE,
            json!({"spec": {"podSelector": {"matchLabels": {"app": "api"}}}}),
        )
        .await;
    assert_eq!(p["metadata"]["generation"], 2, "{p}");
    let (_, p) = s
        .post(POLICIES, policy("deny", json!({"podSelector": {}})))
        .await;
    assert_eq!(p["spec"]["policyTypes"], json!(["Ingress"]));

    // Without a default class, an Ingress names none.
    let spec = json!({"defaultBackend": backend("web", 80)});
    let (code, i) = s.post(INGRESSES, ingress("before", spec.clone())).await;
    assert_eq!(code, 201, "{i}");
    assert!(i["spec"].get("ingressClassName").is_none(), "{i}");
    // With one, a new Ingress that names no class gets it.
    let mut default = class("nginx", "k8s.io/ingress-nginx");
    default["metadata"]["annotations"] =
        json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    let (code, c) = s.post(CLASSES, default).await;
    assert_eq!(code, 201, "{c}");
    let (code, other) = s.post(CLASSES, class("other", "example.com/other")).await;
    assert_eq!(code, 201, "{other}");
    let (_, i) = s.post(INGRESSES, ingress("after", spec.clone())).await;
    assert_eq!(i["spec"]["ingressClassName"], "nginx", "{i}");
    let mut named = ingress("named", spec.clone());
    named["spec"]["ingressClassName"] = json!("other");
    let (_, i) = s.post(INGRESSES, named).await;
    assert_eq!(i["spec"]["ingressClassName"], "other");
    // The older annotation names a class too.
    let mut annotated = ingress("annotated", spec.clone());
    annotated["metadata"]["annotations"] = json!({"kubernetes.io/ingress.class": "other"});
    let (_, i) = s.post(INGRESSES, annotated).await;
    assert!(i["spec"].get("ingressClassName").is_none(), "{i}");
    // Of two default classes, the newer; of two made in the same second, the one of the
    // lower name: "a-default" either way.
    let mut second = class("a-default", "example.com/a");
    second["metadata"]["annotations"] =
        json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    assert_eq!(s.post(CLASSES, second).await.0, 201);
    let (_, i) = s.post(INGRESSES, ingress("later", spec.clone())).await;
    assert_eq!(i["spec"]["ingressClassName"], "a-default", "{i}");
    // Ingresses made before keep what they had.
    let (_, i) = s.get(&format!("{INGRESSES}/before")).await;
    assert!(i["spec"].get("ingressClassName").is_none(), "{i}");
    // A class's parameters are cluster-scoped unless they say.
    let mut with_params = class("params", "example.com/p");
    with_params["spec"]["parameters"] = json!({"kind": "Params", "name": "p"});
    let (_, c) = s.post(CLASSES, with_params).await;
    assert_eq!(c["spec"]["parameters"]["scope"], "Cluster", "{c}");
}

/// The output with each line's trailing age replaced by `AGE`.
fn aged(run: &CliRun) -> String {
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
    run.stdout
        .lines()
        .map(|l| {
            let head = l.trim_end_matches(|c: char| c.is_ascii_digit() || c == 's');
            if head.len() < l.len() && head.ends_with(' ') {
                format!("{head}AGE\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

#[tokio::test]
async fn berth_get_prints_kubectls_columns() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let mut c = class("nginx", "k8s.io/ingress-nginx");
    c["spec"]["parameters"] =
        json!({"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"});
    assert_eq!(s.post(CLASSES, c).await.0, 201);
    let web = ingress(
        "web",
        json!({"ingressClassName": "nginx",
               "tls": [{"hosts": ["a.example.com"], "secretName": "cert"}],
               "rules": [{"host": "a.example.com", "http": {"paths": [
                   {"path": "/", "pathType": "Prefix", "backend": backend("web", 80)}]}},
                         {"host": "b.example.com", "http": {"paths": [
                   {"path": "/", "pathType": "Prefix", "backend": backend("web", 80)}]}}]}),
    );
    assert_eq!(s.post(INGRESSES, web).await.0, 201);
    let (code, out) = s
        .patch(
            &format!("{INGRESSES}/web/status"),
            MERGE,
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}),
        )
        .await;
    assert_eq!(code, 200, "{out}");
    let plain = ingress("plain", json!({"defaultBackend": backend("web", 80)}));
    assert_eq!(s.post(INGRESSES, plain).await.0, 201);
    let p = policy(
        "web",
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
    );
    assert_eq!(s.post(POLICIES, p).await.0, 201);
    assert_eq!(
        s.post(POLICIES, policy("deny-all", json!({"podSelector": {}})))
            .await
            .0,
        201
    );

    assert_eq!(
        aged(&s.berth(&["get", "ing"]).await),
        "NAME    CLASS    HOSTS                         ADDRESS      PORTS     AGE\n\
         plain   <none>   *                                          80        AGE\n\
         web     nginx    a.example.com,b.example.com   192.0.2.10   80, 443   AGE\n"
    );
    assert_eq!(
        aged(&s.berth(&["get", "ingressclass"]).await),
        "NAME    CONTROLLER             PARAMETERS                            AGE\n\
         nginx   k8s.io/ingress-nginx   IngressParameters.k8s.example.com/p   AGE\n"
    );
    assert_eq!(
        aged(&s.berth(&["get", "netpol"]).await),
        "NAME       POD-SELECTOR   AGE\n\
         deny-all   <none>         AGE\n\
         web        app=web        AGE\n"
    );
    let t = s.table(CLASSES).await;
    assert_eq!(
        column_names(&t),
        ["Name", "Controller", "Parameters", "Age"]
    );
}

/// The steps the upstream API tests share: create three labelled objects, get one, list
/// them (in the namespace and across all), watch, patch and update one, and see both
/// changes in the watch. Returns the objects' names.
async fn create_get_list_watch_patch_update(
    s: &TestServer,
    path: &str,
    all: Option<&str>,
    label: &str,
    template: &Value,
) -> Vec<String> {
    let selector = format!("labelSelector={}", label.replace('=', "%3D"));
    let mut names = Vec::new();
    for _ in 0..3 {
        let (code, made) = s.post(path, template.clone()).await;
        assert_eq!(code, 201, "{made}");
        names.push(made["metadata"]["name"].as_str().unwrap().to_string());
    }
    let one = format!("{path}/{}", names[0]);
    let (code, got) = s.get(&one).await;
    assert_eq!(code, 200, "{got}");
    let (code, list) = s.get(&format!("{path}?{selector}")).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(items(&list["items"]).len(), 3, "{list}");
    if let Some(all) = all {
        let (_, list) = s.get(&format!("{all}?{selector}")).await;
        assert_eq!(items(&list["items"]).len(), 3, "{list}");
    }
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let mut watch = s
        .watch(&format!(
            "{path}?watch=true&resourceVersion={rv}&{selector}"
        ))
        .await;
    let (code, patched) = s
        .patch(
            &one,
            MERGE,
            json!({"metadata": {"annotations": {"patched": "true"}}}),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["annotations"]["patched"], "true");
    let (_, mut current) = s.get(&one).await;
    current["metadata"]["annotations"]["updated"] = json!("true");
    let (code, updated) = s.put(&one, current).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["annotations"]["updated"], "true");
    let (mut saw_patch, mut saw_update) = (false, false);
    while !(saw_patch && saw_update) {
        let e = watch.next_change().await;
        assert_eq!(e["type"], "MODIFIED", "{e}");
        let annotations = &e["object"]["metadata"]["annotations"];
        saw_patch |= annotations["patched"] == "true";
        saw_update |= annotations["updated"] == "true";
    }
    names
}

/// The shared closing steps: delete one, then the rest as a collection.
async fn delete_one_then_the_collection(s: &TestServer, path: &str, label: &str, name: &str) {
    let selector = format!("labelSelector={}", label.replace('=', "%3D"));
    let (code, out) = s.delete(&format!("{path}/{name}")).await;
    assert_eq!(code, 200, "{out}");
    let (code, _) = s.get(&format!("{path}/{name}")).await;
    assert_eq!(code, 404);
    let (_, list) = s.get(&format!("{path}?{selector}")).await;
    assert_eq!(items(&list["items"]).len(), 2, "{list}");
    let (code, out) = s.delete(&format!("{path}?{selector}")).await;
    assert_eq!(code, 200, "{out}");
    let (_, list) = s.get(&format!("{path}?{selector}")).await;
    assert_eq!(items(&list["items"]).len(), 0, "{list}");
}

/// The discovery steps of the upstream API tests: the group, its version, the resource.
async fn discovered(s: &TestServer, plural: &str) {
    let (code, groups) = s.get("/apis").await;
    assert_eq!(code, 200);
    assert!(
        items(&groups["groups"])
            .iter()
            .any(|g| g["name"] == "networking.k8s.io"
                && items(&g["versions"]).iter().any(|v| v["version"] == "v1")),
        "{groups}"
    );
    let (code, group) = s.get("/apis/networking.k8s.io").await;
    assert_eq!(code, 200, "{group}");
    assert!(
        items(&group["versions"])
            .iter()
            .any(|v| v["version"] == "v1")
    );
    let (_, resources) = s.get(GROUP).await;
    assert!(
        items(&resources["resources"])
            .iter()
            .any(|r| r["name"] == plural),
        "{resources}"
    );
}

/// [sig-network] Ingress API should support creating Ingress API operations [Conformance]
#[tokio::test]
async fn ingress_api_should_support_creating_ingress_api_operations() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let label = "special-label=ingress-8311";
    let template = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"generateName": "e2e-example-ing", "labels": {"special-label": "ingress-8311"}},
        "spec": {"defaultBackend": backend("default-backend", 8080),
            "rules": [{"host": "foo.bar.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend("test-backend", 8080)}]}}]}});
    discovered(&s, "ingresses").await;
    let names = create_get_list_watch_patch_update(
        &s,
        INGRESSES,
        Some("/apis/networking.k8s.io/v1/ingresses"),
        label,
        &template,
    )
    .await;
    let status = format!("{INGRESSES}/{}/status", names[0]);
    // patching /status
    let (code, patched) = s
        .patch(
            &status,
            MERGE,
            json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                   "status": {"loadBalancer": {"ingress": [{"ip": "169.1.1.1"}]}}}),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["annotations"]["patchedstatus"], "true");
    assert_eq!(
        patched["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "169.1.1.1"}])
    );
    // updating /status
    let (_, mut current) = s.get(&format!("{INGRESSES}/{}", names[0])).await;
    current["status"]["loadBalancer"]["ingress"] = json!([{"ip": "169.1.1.2"}]);
    let (code, updated) = s.put(&status, current).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        updated["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "169.1.1.2"}])
    );
    // A write of the main resource leaves the status as it is.
    let (_, mut current) = s.get(&format!("{INGRESSES}/{}", names[0])).await;
    current["status"] = json!({});
    let (code, out) = s.put(&format!("{INGRESSES}/{}", names[0]), current).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["status"]["loadBalancer"]["ingress"][0]["ip"],
        "169.1.1.2"
    );
    // get /status
    let (code, got) = s.get(&status).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["metadata"]["uid"], updated["metadata"]["uid"]);
    // An address that is not one is refused.
    let (code, out) = s
        .patch(
            &status,
            MERGE,
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "not-an-ip"}]}}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(cause_fields(&out), ["status.loadBalancer.ingress[0].ip"]);
    delete_one_then_the_collection(&s, INGRESSES, label, &names[0]).await;
}

/// [sig-network] IngressClass API should support creating IngressClass API operations [Conformance]
#[tokio::test]
async fn ingress_class_api_should_support_creating_ingress_class_api_operations() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let label = "ingressclass=ingressclass-4455";
    let template = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"generateName": "e2e-example-ingclass", "labels": {"ingressclass": "ingressclass-4455"}},
        "spec": {"controller": "example.com/controller",
                 "parameters": {"apiGroup": "example.com", "kind": "IngressParameters", "name": "ingress-param"}}});
    discovered(&s, "ingressclasses").await;
    let names = create_get_list_watch_patch_update(&s, CLASSES, None, label, &template).await;
    delete_one_then_the_collection(&s, CLASSES, label, &names[0]).await;
}

/// [sig-network] Netpol API should support creating NetworkPolicy API operations
/// (upstream's `network_policy_api.go`; not marked Conformance there).
#[tokio::test]
async fn netpol_api_should_support_creating_network_policy_api_operations() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let label = "special-label=netpol-3021";
    let template = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"generateName": "e2e-example-netpol", "labels": {"special-label": "netpol-3021"}},
        "spec": {"podSelector": {"matchLabels": {"pod-name": "test-pod"}},
                 "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns-name": "netpol-3021"}}}]}],
                 "policyTypes": ["Ingress"]}});
    discovered(&s, "networkpolicies").await;
    let names = create_get_list_watch_patch_update(
        &s,
        POLICIES,
        Some("/apis/networking.k8s.io/v1/networkpolicies"),
        label,
        &template,
    )
    .await;
    delete_one_then_the_collection(&s, POLICIES, label, &names[0]).await;
    // ... with endport field: a port range is kept as given.
    let mut ranged = template.clone();
    ranged["spec"]["egress"] =
        json!([{"ports": [{"protocol": "TCP", "port": 30000, "endPort": 32768}]}]);
    ranged["spec"]["policyTypes"] = json!(["Egress"]);
    let (code, made) = s.post(POLICIES, ranged).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["spec"]["egress"][0]["ports"][0]["endPort"], 32768);
}

/// What a Helm chart renders: an Ingress and a NetworkPolicy, applied and applied again.
/// (The port's protocol is given: a policy's rules are atomic lists, so a defaulted
/// protocol makes every re-apply a change, with kubectl as here.)
#[tokio::test]
async fn a_chart_with_an_ingress_and_a_network_policy_applies() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("chart.yaml");
    std::fs::write(
        &file,
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  \
         rules:\n  - host: web.example.com\n    http:\n      paths:\n      - path: /\n        \
         pathType: Prefix\n        backend:\n          service:\n            name: web\n            \
         port:\n              name: http\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
         metadata:\n  name: web\nspec:\n  podSelector:\n    matchLabels:\n      app: web\n  \
         ingress:\n  - ports:\n    - port: 8080\n      protocol: TCP\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let run = s.berth(&["apply", "-f", path]).await;
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (
            0,
            "ingress.networking.k8s.io/web created\nnetworkpolicy.networking.k8s.io/web created\n"
        ),
        "{run:?}"
    );
    let run = s.berth(&["apply", "-f", path]).await;
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (
            0,
            "ingress.networking.k8s.io/web unchanged\nnetworkpolicy.networking.k8s.io/web unchanged\n"
        ),
        "{run:?}"
    );
}
