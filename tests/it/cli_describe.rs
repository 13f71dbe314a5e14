//! `berth describe ...` against a real server: the binary fetches the object, its events
//! and related objects, and prints what kubectl and oc print for them.

use serde_json::{Value, json};

use berth::cli::describe::{self, Clock};

use crate::support::TestServer;

const PODS: &str = "/api/v1/namespaces/default/pods";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const EVENTS: &str = "/api/v1/namespaces/default/events";
const DCS: &str = "/apis/apps.openshift.io/v1/namespaces/default/deploymentconfigs";

/// A server without controllers: the objects stay exactly as the tests write them.
async fn server() -> TestServer {
    TestServer::start_with(|c| c.run_controllers = false).await
}

async fn create(s: &TestServer, path: &str, body: Value) -> Value {
    let (code, obj) = s.post(path, body).await;
    assert_eq!(code, 201, "create at {path}: {obj}");
    obj
}

/// Writes `status` into the object at `path` through its status subresource.
async fn set_status(s: &TestServer, path: &str, status: Value) -> Value {
    let (_, mut obj) = s.get(path).await;
    obj["status"] = status;
    let (code, obj) = s.put(&format!("{path}/status"), obj).await;
    assert_eq!(code, 200, "status of {path}: {obj}");
    obj
}

/// An event about `obj`, first seen at `first` and `count` times up to `last`.
async fn event(
    s: &TestServer,
    obj: &Value,
    name: &str,
    reason: &str,
    message: &str,
    (first, last, count): (&str, &str, i64),
) {
    let involved = json!({
        "kind": obj["kind"], "apiVersion": obj["apiVersion"],
        "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
        "uid": obj["metadata"]["uid"],
    });
    create(
        s,
        EVENTS,
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": involved,
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "tester"},
            "firstTimestamp": first, "lastTimestamp": last, "count": count,
        }),
    )
    .await;
}

/// The events of the namespace about the object named `name`, as the server lists them.
async fn events_about(s: &TestServer, name: &str) -> Vec<Value> {
    let (_, list) = s
        .get(&format!(
            "{EVENTS}?fieldSelector=involvedObject.name%3D{name}"
        ))
        .await;
    list["items"].as_array().cloned().unwrap_or_default()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_pod_prints_kubectls_layout_with_the_pods_own_events() {
    let s = server().await;
    let pod = create(
        &s,
        PODS,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"containers": [{
                "name": "app", "image": "busybox", "command": ["sleep", "infinity"],
                "readinessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 1,
                    "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
            }]},
        }),
    )
    .await;
    let other = create(
        &s,
        PODS,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-10"},
               "spec": {"containers": [{"name": "app", "image": "busybox"}]}}),
    )
    .await;
    // Long ago, so the ages only change once a day.
    let old = ("2020-01-01T00:00:00Z", "2020-01-01T00:00:00Z", 1);
    let repeated = ("2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z", 3);
    event(
        &s,
        &pod,
        "web-1.a",
        "Scheduled",
        "Successfully assigned default/web-1 to berth",
        old,
    )
    .await;
    event(
        &s,
        &pod,
        "web-1.b",
        "BackOff",
        "Back-off restarting",
        repeated,
    )
    .await;
    event(&s, &other, "web-10.a", "Scheduled", "not about web-1", old).await;

    let run = s.berth(&["describe", "pod", "web-1"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let (_, fetched) = s.get(&format!("{PODS}/web-1")).await;
    let events = events_about(&s, "web-1").await;
    assert_eq!(events.len(), 2);
    let expected = describe::pod(&fetched, Some(&events), &Clock::system());
    assert_eq!(run.stdout, expected);
    let out = lines(&run.stdout);
    assert_eq!(out[0], "Name:             web-1");
    assert!(out.contains(&"Status:           Pending"), "{}", run.stdout);
    assert!(
        out.contains(
            &"    Readiness:    exec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3"
        ),
        "{}",
        run.stdout
    );
    let rows: Vec<&&str> = out.iter().filter(|l| l.starts_with("  Normal")).collect();
    assert_eq!(rows.len(), 2, "{}", run.stdout);
    assert!(
        rows[0].contains("Scheduled")
            && rows[0].ends_with("Successfully assigned default/web-1 to berth")
    );
    assert!(rows[1].contains("(x3 over ") && rows[1].ends_with("Back-off restarting"));

    // Without events, and by the TYPE/NAME form.
    let run = s
        .berth(&["describe", "pod/web-1", "--show-events=false"])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, describe::pod(&fetched, None, &Clock::system()));

    // A name that is no object's is tried as a prefix: both pods, each followed by an
    // empty line as kubectl prints them.
    let run = s.berth(&["describe", "pods", "web"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let names: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("Name:"))
        .collect();
    assert_eq!(
        names,
        ["Name:             web-1", "Name:             web-10"]
    );
    assert!(
        run.stdout.contains("\n\nName:             web-10\n") && run.stdout.ends_with("\n\n"),
        "{}",
        run.stdout
    );

    let run = s.berth(&["describe", "pod", "nothing"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        run.stderr.trim(),
        "Error from server (NotFound): pods \"nothing\" not found"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_rc_counts_the_pods_it_controls_by_phase() {
    let s = server().await;
    let rc = create(
        &s,
        RCS,
        json!({
            "apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"app": "web"}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "busybox",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}]}]},
            }},
        }),
    )
    .await;
    set_status(&s, &format!("{RCS}/web"), json!({"replicas": 2})).await;
    let owner = json!([{"apiVersion": "v1", "kind": "ReplicationController", "name": "web",
        "uid": rc["metadata"]["uid"], "controller": true}]);
    for (name, phase, owned) in [
        ("web-a", "Running", true),
        ("web-b", "Pending", true),
        ("stray", "Running", false),
    ] {
        let owners = if owned { owner.clone() } else { json!([]) };
        create(
            &s,
            PODS,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": owners},
                "spec": {"containers": [{"name": "app", "image": "busybox"}]}}),
        )
        .await;
        set_status(&s, &format!("{PODS}/{name}"), json!({"phase": phase})).await;
    }
    let created = ("2020-01-01T00:00:00Z", "2020-01-01T00:00:00Z", 1);
    event(
        &s,
        &rc,
        "web.a",
        "SuccessfulCreate",
        "Created pod: web-a",
        created,
    )
    .await;

    let run = s.berth(&["describe", "rc", "web"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let out = lines(&run.stdout);
    assert_eq!(
        out[..8],
        [
            "Name:         web",
            "Namespace:    default",
            "Selector:     app=web",
            "Labels:       app=web",
            "Annotations:  <none>",
            "Replicas:     2 current / 2 desired",
            "Pods Status:  1 Running / 1 Waiting / 0 Succeeded / 0 Failed",
            "Pod Template:",
        ]
    );
    assert!(
        out.contains(&"    Port:          8080/TCP"),
        "{}",
        run.stdout
    );
    let rows: Vec<&&str> = out.iter().filter(|l| l.starts_with("  Normal")).collect();
    assert_eq!(rows.len(), 1, "{}", run.stdout);
    assert!(
        rows[0].ends_with("tester  Created pod: web-a"),
        "{}",
        rows[0]
    );
    s.stop().await;
}

fn deployment(version: i64, replicas: i64) -> Value {
    let name = format!("deployment-simple-{version}");
    json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {
            "name": name,
            "labels": {"openshift.io/deployment-config.name": "deployment-simple"},
            "annotations": {
                "openshift.io/deployment-config.name": "deployment-simple",
                "openshift.io/deployment-config.latest-version": version.to_string(),
                "openshift.io/deployment.phase": "Complete",
            },
        },
        "spec": {
            "replicas": replicas,
            "selector": {"deployment": name, "deploymentconfig": "deployment-simple",
                "name": "deployment-simple"},
            "template": {
                "metadata": {"labels": {"deployment": name,
                    "deploymentconfig": "deployment-simple", "name": "deployment-simple"}},
                "spec": {"containers": [{"name": "myapp", "image": "busybox"}]},
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_dc_shows_the_latest_and_older_deployments_and_the_dcs_events() {
    let s = server().await;
    let dc = create(
        &s,
        DCS,
        json!({
            "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
            "metadata": {"name": "deployment-simple"},
            "spec": {
                "replicas": 1,
                "selector": {"name": "deployment-simple"},
                "template": {
                    "metadata": {"labels": {"name": "deployment-simple"}},
                    "spec": {"containers": [{
                        "name": "myapp", "image": "busybox", "command": ["sleep", "infinity"],
                        "env": [{"name": "TRY", "value": "ONCE"}],
                        "readinessProbe": {"exec": {"command": ["true"]}},
                    }]},
                },
            },
        }),
    )
    .await;
    let dc_path = format!("{DCS}/deployment-simple");
    let mut status = dc["status"].clone();
    status["latestVersion"] = json!(2);
    set_status(&s, &dc_path, status).await;
    create(&s, RCS, deployment(1, 0)).await;
    create(&s, RCS, deployment(2, 1)).await;
    set_status(
        &s,
        &format!("{RCS}/deployment-simple-2"),
        json!({"replicas": 1}),
    )
    .await;
    create(
        &s,
        PODS,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "deployment-simple-2-x", "labels": {
                "deployment": "deployment-simple-2", "deploymentconfig": "deployment-simple",
                "name": "deployment-simple"}},
            "spec": {"containers": [{"name": "myapp", "image": "busybox"}]}}),
    )
    .await;
    set_status(
        &s,
        &format!("{PODS}/deployment-simple-2-x"),
        json!({"phase": "Running"}),
    )
    .await;
    let at = |t: &'static str| (t, t, 1);
    event(
        &s,
        &dc,
        "deployment-simple.a",
        "DeploymentCreated",
        "Created new replication controller \"deployment-simple-1\" for version 1",
        at("2020-01-01T00:00:00Z"),
    )
    .await;
    event(
        &s,
        &dc,
        "deployment-simple.b",
        "DeploymentCreated",
        "Created new replication controller \"deployment-simple-2\" for version 2",
        at("2020-01-01T00:05:00Z"),
    )
    .await;

    let run = s.berth(&["describe", "dc", "deployment-simple"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let out = lines(&run.stdout);
    // Scenario 32.
    for line in [
        "Latest Version:\t2",
        "Triggers:\tConfig",
        "Strategy:\tRolling",
        "  Labels:\tname=deployment-simple",
        "Deployment #2 (latest):",
        "\tName:\t\tdeployment-simple-2",
        "\tStatus:\t\tComplete",
        "\tReplicas:\t1 current / 1 desired",
        "\tPods Status:\t1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
        "Deployment #1:",
        "\tReplicas:\t0 current / 0 desired",
        "Events:",
    ] {
        assert!(out.contains(&line), "missing {line:?} in\n{}", run.stdout);
    }
    let latest = out.iter().position(|l| *l == "Deployment #2 (latest):");
    let older = out.iter().position(|l| *l == "Deployment #1:");
    assert!(latest < older, "{}", run.stdout);
    let rows: Vec<&&str> = out.iter().filter(|l| l.starts_with("  Normal")).collect();
    assert_eq!(rows.len(), 2, "{}", run.stdout);
    assert!(rows[0].ends_with("\"deployment-simple-1\" for version 1"));
    assert!(rows[1].ends_with("\"deployment-simple-2\" for version 2"));

    // The same text as the describer gives for what the server holds.
    let (_, dc) = s.get(&dc_path).await;
    let (_, rcs) = s
        .get(&format!(
            "{RCS}?labelSelector=openshift.io%2Fdeployment-config.name%3Ddeployment-simple"
        ))
        .await;
    let (_, pods) = s.get(PODS).await;
    let events = events_about(&s, "deployment-simple").await;
    let expected = describe::deployment_config(
        &dc,
        rcs["items"].as_array().unwrap(),
        pods["items"].as_array().unwrap(),
        Some(&events),
        &Clock::system(),
    );
    // The ages of "Created:" lines may tick between the two renderings; compare the rest.
    let steady = |t: &str| {
        t.lines()
            .filter(|l| !l.contains("Created:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(steady(&run.stdout), steady(&expected));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_node_namespace_and_config_map_print_kubectls_sections() {
    let s = server().await;
    create(
        &s,
        "/api/v1/nodes",
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "edge-1", "labels": {"kubernetes.io/hostname": "edge-1"}},
        }),
    )
    .await;
    set_status(
        &s,
        "/api/v1/nodes/edge-1",
        json!({
            "capacity": {"cpu": "2", "memory": "2Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "2Gi", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b",
                "kernelVersion": "6.1", "osImage": "linux", "containerRuntimeVersion": "berth",
                "kubeletVersion": "v1.31.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": "amd64"},
        }),
    )
    .await;
    create(
        &s,
        PODS,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-edge"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "app", "image": "busybox",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}),
    )
    .await;

    let run = s.berth(&["describe", "node", "edge-1"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let out = lines(&run.stdout);
    for line in [
        "Roles:              <none>",
        "Unschedulable:      false",
        "Lease:",
        "  HolderIdentity:  <unset>",
        "Non-terminated Pods:          (1 in total)",
        "  cpu                500m (25%)   0 (0%)",
        "  memory             256Mi (12%)  0 (0%)",
        "Events:              <none>",
    ] {
        assert!(out.contains(&line), "missing {line:?} in\n{}", run.stdout);
    }
    assert!(
        out.iter()
            .any(|l| l.starts_with("  default                     on-edge    500m (25%)")),
        "{}",
        run.stdout
    );

    let run = s.berth(&["describe", "namespace", "default"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    // berth serves no ResourceQuotas or LimitRanges: kubectl then prints no such sections.
    assert_eq!(
        run.stdout,
        "Name:         default\n\
         Labels:       kubernetes.io/metadata.name=default\n\
         Annotations:  <none>\n\
         Status:       Active\n"
    );

    // A config map shows its data; a type with no objects says so on stderr.
    create(
        &s,
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
            "data": {"mode": "fast"}}),
    )
    .await;
    let run = s
        .berth(&["describe", "cm", "settings", "--show-events=false"])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout,
        "Name:         settings\n\
         Namespace:    default\n\
         Labels:       <none>\n\
         Annotations:  <none>\n\
         \n\
         Data\n\
         ====\n\
         mode:\n\
         ----\n\
         fast\n\
         \n\
         \n\
         BinaryData\n\
         ====\n\
         \n"
    );
    let run = s
        .berth(&["describe", "lease", "-n", "kube-node-lease"])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stderr,
        "No resources found in kube-node-lease namespace.\n"
    );
    s.stop().await;
}
