//! The unit tests of the core kinds' strategies (`registry::strategy`).

use super::*;

#[test]
fn a_pod_update_changes_images_deadlines_and_tolerations_only() {
    let old = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}],
        "tolerations": [{"key": "k", "operator": "Exists"}], "restartPolicy": "Always",
        "schedulingGates": [{"name": "g"}]}});
    let check = |change: &dyn Fn(&mut Value)| {
        let mut new = old.clone();
        change(&mut new);
        let mut causes = Vec::new();
        validate_pod_update(&old, &new, &mut causes);
        causes.iter().map(|c| c.field.clone()).collect::<Vec<_>>()
    };
    let allowed: [&dyn Fn(&mut Value); 5] = [
        &|p| p["spec"]["containers"][0]["image"] = json!("x:2"),
        &|p| p["spec"]["activeDeadlineSeconds"] = json!(30),
        &|p| {
            p["spec"]["tolerations"]
                .as_array_mut()
                .unwrap()
                .push(json!({"key": "z"}))
        },
        &|p| p["spec"]["schedulingGates"] = json!([]),
        &|p| p["metadata"] = json!({"labels": {"a": "b"}}),
    ];
    for change in allowed {
        assert!(check(change).is_empty());
    }
    let refused: [&dyn Fn(&mut Value); 5] = [
        &|p| p["spec"]["restartPolicy"] = json!("Never"),
        &|p| p["spec"]["containers"][0]["command"] = json!(["true"]),
        &|p| {
            p["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "b"}))
        },
        &|p| p["spec"]["tolerations"] = json!([]),
        &|p| p["spec"]["nodeName"] = json!("n"),
    ];
    for change in refused {
        assert_eq!(check(change), ["spec"]);
    }
}

#[test]
fn pod_specs_are_checked_as_the_api_server_checks_them() {
    let fields = |spec: Value| {
        let mut causes = Vec::new();
        Pod.validate(&json!({"spec": spec}), &mut causes);
        causes.into_iter().map(|c| c.field).collect::<Vec<_>>()
    };
    let good = json!({"volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": "x"}],
        "containers": [{"name": "main", "image": "x", "imagePullPolicy": "Never",
            "ports": [{"containerPort": 80, "protocol": "UDP"}],
            "env": [{"name": "my.var-1", "value": "v"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]});
    assert!(fields(good).is_empty());
    let bad = json!({"volumes": [{"name": "v"}, {"name": "v"}],
        "initContainers": [{"name": "main", "image": "x"}],
        "containers": [{"name": "main", "image": "x", "imagePullPolicy": "Sometimes",
            "ports": [{"containerPort": 70000, "protocol": "XTP"}],
            "env": [{"name": "1bad=x"}],
            "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}],
        "dnsPolicy": "Whatever"});
    assert_eq!(
        fields(bad),
        [
            "spec.volumes[1].name",
            "spec.containers[0].name",
            "spec.containers[0].imagePullPolicy",
            "spec.containers[0].ports[0].containerPort",
            "spec.containers[0].ports[0].protocol",
            "spec.containers[0].env[0].name",
            "spec.containers[0].volumeMounts[0].name",
            "spec.dnsPolicy",
        ]
    );
}

#[test]
fn data_sizes_keys_and_lease_times_are_checked() {
    let fields = |kind: &dyn Strategy, obj: Value| {
        let mut causes = Vec::new();
        kind.validate(&obj, &mut causes);
        causes.into_iter().map(|c| c.field).collect::<Vec<_>>()
    };
    let big = "x".repeat(MAX_DATA_BYTES);
    assert_eq!(fields(&ConfigMap, json!({"data": {"a": big}})), ["data"]);
    assert_eq!(
        fields(
            &ConfigMap,
            json!({"data": {"a": "1"}, "binaryData": {"a": "eA=="}})
        ),
        ["data[a]"]
    );
    assert_eq!(
        fields(&Lease, json!({"spec": {"renewTime": "not-a-time"}})),
        ["spec.renewTime"]
    );
    assert!(
        fields(
            &Lease,
            json!({"spec": {"renewTime": "2026-12-01T05:00:00.123456Z"}})
        )
        .is_empty()
    );
}

#[test]
fn secret_string_data_goes_into_data_and_nodes_get_a_spec() {
    let mut s = json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eA=="},
        "stringData": {"b": "new", "c": "ü"}});
    Secret.default(&mut s);
    assert_eq!(
        s,
        json!({"metadata": {"name": "s"}, "type": "Opaque",
            "data": {"a": "eA==", "b": "bmV3", "c": "w7w="}})
    );
    let mut only = json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
    Secret.default(&mut only);
    assert_eq!(only["data"], json!({"k": "dg=="}));
    let mut node = json!({"metadata": {"name": "n"}, "spec": null});
    Node.default(&mut node);
    assert_eq!(node["spec"], json!({}));
}

#[test]
fn pods_get_their_defaults_and_image_pull_policy() {
    let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
         "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 5}},
        {"name": "b", "image": "nginx:1.27"},
        {"name": "c", "image": "registry:5000/x:latest"},
    ]}});
    Pod.default(&mut pod);
    assert_eq!(pod["spec"]["restartPolicy"], "Always");
    assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(
        pod["spec"]["containers"][1]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(pod["spec"]["containers"][2]["imagePullPolicy"], "Always");
    let probe = &pod["spec"]["containers"][0]["readinessProbe"];
    assert_eq!(
        (
            &probe["timeoutSeconds"],
            &probe["periodSeconds"],
            &probe["successThreshold"],
            &probe["failureThreshold"],
            &probe["httpGet"]["scheme"],
            &probe["httpGet"]["path"],
        ),
        (
            &json!(1),
            &json!(5),
            &json!(1),
            &json!(3),
            &json!("HTTP"),
            &json!("/")
        )
    );
    assert_eq!(pod["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
}

#[test]
fn replication_controllers_default_their_selector_from_the_template() {
    let mut rc = json!({"metadata": {"name": "r"}, "spec": {"template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "a", "image": "x:1"}]}}}});
    ReplicationController.default(&mut rc);
    assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(rc["spec"]["replicas"], 1);
    assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
    let mut causes = Vec::new();
    ReplicationController.validate(&rc, &mut causes);
    assert!(causes.is_empty(), "{causes:?}");
    rc["spec"]["selector"] = json!({"app": "db"});
    ReplicationController.validate(&rc, &mut causes);
    assert_eq!(causes[0].field, "spec.template.metadata.labels");
}

#[test]
fn pod_specs_need_named_containers_with_images() {
    let mut causes = Vec::new();
    Pod.validate(&json!({"spec": {"containers": []}}), &mut causes);
    assert_eq!(causes[0].field, "spec.containers");
    causes.clear();
    Pod.validate(
        &json!({"spec": {"containers": [{"name": "a"}, {"name": "a", "image": "x"}]}}),
        &mut causes,
    );
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        ["spec.containers[0].image", "spec.containers[1].name"]
    );
}

#[test]
fn field_values_are_read_by_path() {
    let ev = json!({"involvedObject": {"name": "web"}, "source": {"component": "kubelet"}});
    assert_eq!(
        Event.field_value(&ev, "involvedObject.name").as_deref(),
        Some("web")
    );
    assert_eq!(Event.field_value(&ev, "source").as_deref(), Some("kubelet"));
    let node = json!({"spec": {"unschedulable": true}});
    assert_eq!(
        Node.field_value(&node, "spec.unschedulable").as_deref(),
        Some("true")
    );
    for node in [json!({"spec": {}}), json!({})] {
        assert_eq!(
            Node.field_value(&node, "spec.unschedulable").as_deref(),
            Some("false")
        );
    }
    let pod = json!({"spec": {}});
    assert_eq!(
        Pod.field_value(&pod, "spec.hostNetwork").as_deref(),
        Some("false")
    );
    assert_eq!(Pod.field_value(&pod, "spec.nodeName"), None);
}
