//! Golden outputs of the printers, compared byte for byte with what kubectl prints.

use serde_json::{Value, json};

use super::*;

fn column(name: &str, priority: i64) -> Value {
    json!({"name": name, "type": "string", "format": if name == "Name" { "name" } else { "" },
        "description": "", "priority": priority})
}

fn pod_row(
    name: &str,
    ready: &str,
    status: &str,
    restarts: i64,
    age: &str,
    ns: &str,
    labels: Value,
) -> Value {
    json!({"cells": [name, ready, status, restarts, age, "10.0.0.5", "node-1", "<none>", "<none>"],
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "labels": labels}}})
}

fn pod_table(rows: Vec<Value>) -> Value {
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "7"},
        "columnDefinitions": [column("Name", 0), column("Ready", 0), column("Status", 0),
            column("Restarts", 0), column("Age", 0), column("IP", 1), column("Node", 1),
            column("Nominated Node", 1), column("Readiness Gates", 1)],
        "rows": rows})
}

fn pods() -> Value {
    pod_table(vec![
        pod_row(
            "web-1",
            "1/1",
            "Running",
            0,
            "5s",
            "default",
            json!({"app": "web", "tier": "front"}),
        ),
        pod_row(
            "database-0",
            "0/1",
            "ContainerCreating",
            12,
            "12m",
            "prod",
            json!({}),
        ),
    ])
}

fn rc_table() -> Value {
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
        "columnDefinitions": [column("Name", 0), column("Desired", 0), column("Current", 0),
            column("Ready", 0), column("Age", 0)],
        "rows": [{"cells": ["web", 2, 2, 1, "3d1h"],
            "object": {"metadata": {"name": "web", "namespace": "default"}}}]})
}

fn opts() -> TableOptions {
    TableOptions {
        namespace: "default".into(),
        ..TableOptions::default()
    }
}

fn pods_of(t: &Value) -> KindTable<'_> {
    KindTable {
        group: "",
        kind: "Pod",
        namespaced: true,
        table: t,
    }
}

#[test]
fn a_pod_table_prints_like_kubectl_get_pods() {
    let t = pods();
    let p = table(&[pods_of(&t)], &opts());
    assert_eq!(
        p.stdout,
        "NAME         READY   STATUS              RESTARTS   AGE\n\
         web-1        1/1     Running             0          5s\n\
         database-0   0/1     ContainerCreating   12         12m\n"
    );
    assert_eq!(p.stderr, "");
}

#[test]
fn wide_adds_the_priority_columns_and_no_headers_drops_the_header() {
    let t = pods_table_one();
    let wide = TableOptions {
        wide: true,
        ..opts()
    };
    assert_eq!(
        table(&[pods_of(&t)], &wide).stdout,
        "NAME    READY   STATUS    RESTARTS   AGE   IP         NODE     NOMINATED NODE   READINESS GATES\n\
         web-1   1/1     Running   0          5s    10.0.0.5   node-1   <none>           <none>\n"
    );
    let quiet = TableOptions {
        no_headers: true,
        ..opts()
    };
    assert_eq!(
        table(&[pods_of(&t)], &quiet).stdout,
        "web-1   1/1   Running   0     5s\n"
    );
}

fn pods_table_one() -> Value {
    pod_table(vec![pod_row(
        "web-1",
        "1/1",
        "Running",
        0,
        "5s",
        "default",
        json!({"app": "web"}),
    )])
}

#[test]
fn labels_namespaces_and_label_columns_decorate_the_table() {
    let t = pods();
    let o = TableOptions {
        show_labels: true,
        all_namespaces: true,
        label_columns: vec!["app".into(), "example.com/tier".into()],
        ..opts()
    };
    assert_eq!(
        table(&[pods_of(&t)], &o).stdout,
        "NAMESPACE   NAME         READY   STATUS              RESTARTS   AGE   APP   TIER   LABELS\n\
         default     web-1        1/1     Running             0          5s    web          app=web,tier=front\n\
         prod        database-0   0/1     ContainerCreating   12         12m                <none>\n"
    );
}

#[test]
fn several_kinds_are_named_with_their_kind_and_separated_by_a_blank_line() {
    let (p, r) = (pods_table_one(), rc_table());
    let dc = json!({"columnDefinitions": [column("Name", 0), column("Revision", 0)],
        "rows": [{"cells": ["frontend", 3], "object": {"metadata": {"name": "frontend"}}}]});
    let tables = [
        pods_of(&p),
        KindTable {
            group: "",
            kind: "ReplicationController",
            namespaced: true,
            table: &r,
        },
        KindTable {
            group: "apps.openshift.io",
            kind: "DeploymentConfig",
            namespaced: true,
            table: &dc,
        },
    ];
    assert_eq!(
        table(&tables, &opts()).stdout,
        "NAME        READY   STATUS    RESTARTS   AGE\n\
         pod/web-1   1/1     Running   0          5s\n\
         \n\
         NAME                        DESIRED   CURRENT   READY   AGE\n\
         replicationcontroller/web   2         2         1       3d1h\n\
         \n\
         NAME                                          REVISION\n\
         deploymentconfig.apps.openshift.io/frontend   3\n"
    );
    let shown = TableOptions {
        show_kind: true,
        ..opts()
    };
    assert_eq!(
        table(&[pods_of(&p)], &shown).stdout,
        "NAME        READY   STATUS    RESTARTS   AGE\npod/web-1   1/1     Running   0          5s\n"
    );
}

#[test]
fn tables_of_one_kind_share_the_header_and_the_widths() {
    let a = pod_table(vec![pod_row(
        "a",
        "1/1",
        "Running",
        0,
        "5s",
        "default",
        json!({}),
    )]);
    let b = pod_table(vec![pod_row(
        "long-name-0",
        "1/1",
        "Running",
        0,
        "7s",
        "default",
        json!({}),
    )]);
    assert_eq!(
        table(&[pods_of(&a), pods_of(&b)], &opts()).stdout,
        "NAME          READY   STATUS    RESTARTS   AGE\n\
         a             1/1     Running   0          5s\n\
         long-name-0   1/1     Running   0          7s\n"
    );
}

#[test]
fn nothing_found_goes_to_stderr_like_kubectl() {
    let empty = pod_table(vec![]);
    let p = table(&[pods_of(&empty)], &opts());
    assert_eq!(p.stdout, "");
    assert_eq!(p.stderr, "No resources found in default namespace.\n");
    let all = TableOptions {
        all_namespaces: true,
        ..opts()
    };
    assert_eq!(
        table(&[pods_of(&empty)], &all).stderr,
        "No resources found\n"
    );
    let nodes = KindTable {
        group: "",
        kind: "Node",
        namespaced: false,
        table: &empty,
    };
    assert_eq!(table(&[nodes], &opts()).stderr, "No resources found\n");
    // An empty table before a full one leaves no blank line.
    let r = rc_table();
    let rcs = KindTable {
        group: "",
        kind: "ReplicationController",
        namespaced: true,
        table: &r,
    };
    assert_eq!(
        table(&[pods_of(&empty), rcs], &opts()).stdout,
        "NAME                        DESIRED   CURRENT   READY   AGE\nreplicationcontroller/web   2         2         1       3d1h\n"
    );
}

#[test]
fn cells_with_line_breaks_are_cut_and_escapes_defused() {
    let t = json!({"columnDefinitions": [column("Name", 0), column("Message", 0)],
        "rows": [{"cells": ["x", "first line\nsecond"]}, {"cells": ["y", "\u{1b}[31mred"]},
                 {"cells": ["z", null]}]});
    assert_eq!(
        table(&[pods_of(&t)], &opts()).stdout,
        "NAME   MESSAGE\nx      first line...\ny      ^[[31mred\nz      \n"
    );
}

#[test]
fn watching_keeps_the_widths_and_prints_the_header_once() {
    let mut w = WatchPrinter::new(&opts(), "", "Pod", true);
    let first = w.print(&pods_table_one(), None);
    assert_eq!(
        first,
        "NAME    READY   STATUS    RESTARTS   AGE\nweb-1   1/1     Running   0          5s\n"
    );
    // Later events may leave the column definitions out.
    let event = json!({"kind": "Table", "columnDefinitions": [],
        "rows": [pod_row("web-2", "0/1", "Pending", 0, "0s", "default", json!({}))]});
    assert_eq!(
        w.print(&event, None),
        "web-2   0/1     Pending   0          0s\n"
    );
    let same_columns = pod_table(vec![pod_row(
        "w",
        "1/1",
        "Terminating",
        0,
        "9s",
        "default",
        json!({}),
    )]);
    assert_eq!(
        w.print(&same_columns, None),
        "w       1/1     Terminating   0          9s\n"
    );
}

#[test]
fn watch_events_get_an_event_column() {
    let mut w = WatchPrinter::new(&opts(), "", "Pod", true);
    assert_eq!(
        w.print(&pods_table_one(), Some("ADDED")),
        "EVENT      NAME    READY   STATUS    RESTARTS   AGE\nADDED      web-1   1/1     Running   0          5s\n"
    );
    let event =
        json!({"rows": [pod_row("web-1", "1/1", "Running", 1, "6s", "default", json!({}))]});
    assert_eq!(
        w.print(&event, Some("MODIFIED")),
        "MODIFIED   web-1   1/1     Running   1          6s\n"
    );
}

#[test]
fn output_parses_kubectl_formats_and_refuses_others_with_its_message() {
    assert_eq!(Output::parse("").unwrap(), Output::Table);
    assert_eq!(Output::parse("wide").unwrap(), Output::Wide);
    assert_eq!(Output::parse("yaml").unwrap(), Output::Yaml);
    assert!(matches!(
        Output::parse("jsonpath={.a}").unwrap(),
        Output::JsonPath(_)
    ));
    assert!(
        matches!(Output::parse("jsonpath='{.a}'").unwrap(), Output::JsonPath(j) if j.raw() == "{.a}")
    );
    assert!(matches!(
        Output::parse("jsonpath-as-json={.a}").unwrap(),
        Output::JsonPathAsJson(_)
    ));
    assert!(matches!(
        Output::parse("custom-columns=NAME:.metadata.name,IMAGE:spec.containers[*].image").unwrap(),
        Output::CustomColumns(c) if c.len() == 2 && c[1].path.raw() == "{.spec.containers[*].image}"
    ));
    assert_eq!(
        Output::parse("xml").unwrap_err(),
        "unable to match a printer suitable for the output format \"xml\", allowed formats are: \
         custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,\
         jsonpath-as-json,jsonpath-file,name,template,templatefile,wide,yaml"
    );
    assert_eq!(
        Output::parse("jsonpath").unwrap_err(),
        "template format specified but no template given"
    );
    assert_eq!(
        Output::parse("jsonpath={.a").unwrap_err(),
        "error parsing jsonpath {.a, unclosed action"
    );
    assert_eq!(
        Output::parse("custom-columns=NAME").unwrap_err(),
        "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>"
    );
    assert!(
        Output::parse("go-template={{.a}}")
            .unwrap_err()
            .contains("Go templates")
    );
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]}})
}

#[test]
fn json_and_yaml_wrap_several_objects_in_a_list() {
    let one = document(vec![pod("a")], true);
    assert_eq!(
        json(&one),
        "{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"Pod\",\n    \"metadata\": {\n        \"name\": \"a\",\n        \"namespace\": \"default\"\n    },\n    \"spec\": {\n        \"containers\": [\n            {\n                \"image\": \"busybox\",\n                \"name\": \"app\"\n            }\n        ]\n    }\n}\n"
    );
    let empty = document(vec![], false);
    assert_eq!(
        json(&empty),
        "{\n    \"apiVersion\": \"v1\",\n    \"items\": [],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n"
    );
    assert_eq!(
        yaml(&document(vec![pod("a")], false)),
        "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n    namespace: default\n  spec:\n    containers:\n    - image: busybox\n      name: app\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"
    );
}

#[test]
fn names_are_kind_and_group_qualified() {
    let dc = json!({"apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
        "metadata": {"name": "frontend"}});
    let doc = document(vec![pod("web-1"), dc], false);
    assert_eq!(
        Output::Name.render(&doc, false).unwrap(),
        "pod/web-1\ndeploymentconfig.apps.openshift.io/frontend\n"
    );
    assert_eq!(
        name(&json!({"metadata": {"name": "x"}})).unwrap_err(),
        "missing kind for resource with name x"
    );
}

#[test]
fn jsonpath_reads_the_list_and_reports_errors_like_kubectl() {
    let doc = document(vec![pod("a"), pod("b")], false);
    let out = Output::parse("jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}").unwrap();
    assert_eq!(out.render(&doc, false).unwrap(), "a\nb\n");
    let missing = Output::parse("jsonpath={.items[0].status.podIP}").unwrap();
    assert_eq!(missing.render(&doc, false).unwrap(), "");
    let single = document(vec![json!({"kind": "Pod", "spec": {}})], true);
    let bad = JsonPath::parse("{.spec.x[0]}").unwrap();
    assert_eq!(jsonpath(&bad, &single, true, false).unwrap(), "");
    let strict = jsonpath(&bad, &single, false, false).unwrap_err();
    assert_eq!(
        strict,
        "error executing jsonpath \"{.spec.x[0]}\": Error executing template: x is not found. \
         Printing more information for debugging the template:\n\ttemplate was:\n\t\t{.spec.x[0]}\n\t\
         object given to jsonpath engine was:\n\t\tmap[string]interface {}{\"kind\":\"Pod\", \
         \"spec\":map[string]interface {}{}}\n\n"
    );
}

#[test]
fn custom_columns_line_up_and_fill_in_none() {
    let mut b = pod("b-long-name");
    b["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "side", "image": "nginx"}));
    let doc = document(vec![pod("a"), b], false);
    let out = Output::parse(
        "custom-columns=NAME:.metadata.name,IMAGES:{.spec.containers[*].image},IP:status.podIP",
    )
    .unwrap();
    assert_eq!(
        out.render(&doc, false).unwrap(),
        "NAME          IMAGES          IP\n\
         a             busybox         <none>\n\
         b-long-name   busybox,nginx   <none>\n"
    );
    assert_eq!(
        out.render(&document(vec![], false), false).unwrap(),
        "NAME   IMAGES   IP\n"
    );
    let maps = Output::parse("custom-columns=L:.metadata").unwrap();
    assert_eq!(
        maps.render(&document(vec![pod("a")], true), true).unwrap(),
        "map[name:a namespace:default]\n"
    );
}

#[test]
fn oc_ages_follow_docker_units() {
    let cases = [
        (0, "Less than a second"),
        (1, "1 second"),
        (59, "59 seconds"),
        (60, "About a minute"),
        (119, "About a minute"),
        (120, "2 minutes"),
        (3599, "59 minutes"),
        (3600, "About an hour"),
        (5399, "About an hour"),
        (5400, "2 hours"),
        (47 * 3600, "47 hours"),
        (48 * 3600, "2 days"),
        (13 * 86400, "13 days"),
        (14 * 86400, "2 weeks"),
        (59 * 86400, "8 weeks"),
        (60 * 86400, "2 months"),
        (729 * 86400, "24 months"),
        (730 * 86400, "2 years"),
    ];
    for (s, want) in cases {
        assert_eq!(oc_age(s), want, "{s} seconds");
    }
}
