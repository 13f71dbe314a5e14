//! `berth get` against a real server, laid out and formatted as kubectl prints: server
//! Tables, several kinds, labels, every `-o` format, errors and `-w`. The server runs no
//! node agent, so the pods stay Pending and no container outlives a test.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{CliRun, TestServer, within};

const PODS: &str = "/api/v1/namespaces/default/pods";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";

fn pod(name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}})
}

async fn fixtures(s: &TestServer) {
    for (name, app) in [("web-1", "web"), ("database-0", "db")] {
        let (code, body) = s.post(PODS, pod(name, app)).await;
        assert_eq!(code, 201, "{body}");
    }
    let rc = json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"app": "frontend"},
            "template": {"metadata": {"labels": {"app": "frontend"}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}});
    let (code, body) = s.post(RCS, rc).await;
    assert_eq!(code, 201, "{body}");
}

/// The output with each line's trailing age (`0s`, `12s`) replaced by `AGE`, since ages
/// move while a test runs; the age is the last column of these tables.
fn aged(text: &str) -> String {
    text.lines()
        .map(|l| {
            let age_start = l.trim_end_matches(|c: char| c.is_ascii_digit() || c == 's');
            let age = &l[age_start.len()..];
            if !age.is_empty() && age.ends_with('s') && age.len() > 1 && age_start.ends_with(' ') {
                format!("{age_start}AGE")
            } else {
                l.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect()
}

#[track_caller]
fn ok(run: &CliRun) -> &str {
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
    &run.stdout
}

#[tokio::test]
async fn get_lays_out_server_tables_like_kubectl() {
    let s = TestServer::start().await;
    fixtures(&s).await;

    let run = s.berth(&["get", "pods"]).await;
    assert_eq!(
        aged(ok(&run)),
        "NAME         READY   STATUS    RESTARTS   AGE\n\
         database-0   0/1     Pending   0          AGE\n\
         web-1        0/1     Pending   0          AGE\n"
    );

    let run = s
        .berth(&["get", "po", "-l", "app=web", "--show-labels", "-L", "app"])
        .await;
    let out = ok(&run);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "NAME    READY   STATUS    RESTARTS   AGE   APP   LABELS"
    );
    assert!(
        lines[1].starts_with("web-1   0/1     Pending   0          "),
        "{out}"
    );
    assert!(lines[1].ends_with("   web   app=web"), "{out}");
    assert_eq!(lines.len(), 2, "{out}");

    let run = s.berth(&["get", "pods,rc", "--no-headers"]).await;
    assert_eq!(
        aged(ok(&run)),
        "pod/database-0   0/1   Pending   0     AGE\n\
         pod/web-1        0/1   Pending   0     AGE\n\
         replicationcontroller/web   0     0     0     AGE\n"
    );

    let run = s.berth(&["get", "pods,rc"]).await;
    assert_eq!(
        aged(ok(&run)),
        "NAME             READY   STATUS    RESTARTS   AGE\n\
         pod/database-0   0/1     Pending   0          AGE\n\
         pod/web-1        0/1     Pending   0          AGE\n\
         \n\
         NAME                        DESIRED   CURRENT   READY   AGE\n\
         replicationcontroller/web   0         0         0       AGE\n"
    );

    let run = s.berth(&["get", "pods", "-A", "-o", "wide"]).await;
    let out = ok(&run);
    assert!(
        out.starts_with("NAMESPACE   NAME         READY   STATUS    RESTARTS   AGE   IP       NODE     NOMINATED NODE   READINESS GATES\n"),
        "{out}"
    );
    assert!(
        out.contains("\ndefault     web-1        0/1     Pending   0          "),
        "{out}"
    );
    assert!(
        out.ends_with("<none>   <none>   <none>           <none>\n"),
        "{out}"
    );

    let run = s.berth(&["get", "rc", "-n", "nothing-here"]).await;
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, "", "No resources found in nothing-here namespace.\n")
    );

    let run = s.berth(&["get", "pod", "web-1", "missing"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        run.stderr,
        "Error from server (NotFound): pods \"missing\" not found\n"
    );
    assert!(
        run.stdout
            .starts_with("NAME    READY   STATUS    RESTARTS   AGE\nweb-1   "),
        "{run:?}"
    );

    let run = s
        .berth(&["get", "pod", "missing", "--ignore-not-found"])
        .await;
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, "", "")
    );

    let run = s.berth(&["get", "pods", "-o", "xml"]).await;
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: unable to match a printer suitable for the output format \"xml\", allowed \
         formats are: custom-columns,custom-columns-file,go-template,go-template-file,json,\
         jsonpath,jsonpath-as-json,jsonpath-file,name,template,templatefile,wide,yaml\n"
    );
}

#[tokio::test]
async fn get_prints_every_output_format() {
    let s = TestServer::start().await;
    fixtures(&s).await;
    let (_, stored) = s.get(&format!("{PODS}/web-1")).await;

    let run = s.berth(&["get", "pods", "-o", "name"]).await;
    assert_eq!(ok(&run), "pod/database-0\npod/web-1\n");
    let run = s.berth(&["get", "rc/web", "pod/web-1", "-o", "name"]).await;
    assert_eq!(ok(&run), "replicationcontroller/web\npod/web-1\n");

    // One named object prints as itself, in kubectl's JSON layout.
    let run = s.berth(&["get", "pod", "web-1", "-o", "json"]).await;
    let out = ok(&run);
    assert!(
        out.starts_with(
            "{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"Pod\",\n    \"metadata\": {\n"
        ),
        "{out}"
    );
    assert_eq!(serde_json::from_str::<Value>(out).unwrap(), stored);

    // YAML reads back as the same object; timestamps are quoted as go-yaml quotes them.
    let run = s.berth(&["get", "pod", "web-1", "-o", "yaml"]).await;
    let out = ok(&run);
    assert!(
        out.starts_with("apiVersion: v1\nkind: Pod\nmetadata:\n"),
        "{out}"
    );
    let created = stored["metadata"]["creationTimestamp"].as_str().unwrap();
    assert!(
        out.contains(&format!("  creationTimestamp: \"{created}\"\n")),
        "{out}"
    );
    assert!(
        out.contains("  containers:\n  - command:\n    - sleep\n    - \"3600\"\n"),
        "{out}"
    );
    let back: Value = serde_yaml_ng::from_str(out).unwrap();
    assert_eq!(back, stored);

    // Several objects come in kubectl's List.
    let run = s.berth(&["get", "pods", "-o", "json"]).await;
    let list: Value = serde_json::from_str(ok(&run)).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["metadata"], json!({"resourceVersion": ""}));
    assert_eq!(list["items"][1], stored);

    let run = s
        .berth(&["get", "pods", "-o", "jsonpath={.items[*].metadata.name}"])
        .await;
    assert_eq!(ok(&run), "database-0 web-1");
    let template =
        r#"jsonpath={range .items[*]}{.metadata.name}{"\t"}{.metadata.labels}{"\n"}{end}"#;
    let run = s.berth(&["get", "pods", "-o", template]).await;
    assert_eq!(
        ok(&run),
        "database-0\t{\"app\":\"db\"}\nweb-1\t{\"app\":\"web\"}\n"
    );
    let run = s
        .berth(&[
            "get",
            "pod",
            "web-1",
            "-o",
            "jsonpath={.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(ok(&run), "busybox");
    let run = s
        .berth(&["get", "pod", "web-1", "-o", "jsonpath={.status.nothing}"])
        .await;
    assert_eq!(ok(&run), "");
    let run = s
        .berth(&[
            "get",
            "pod",
            "web-1",
            "-o",
            "jsonpath={.status.nothing}",
            "--allow-missing-template-keys=false",
        ])
        .await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with(
            "error: error executing jsonpath \"{.status.nothing}\": Error executing template: \
             nothing is not found. Printing more information for debugging the template:\n"
        ),
        "{run:?}"
    );
    let run = s
        .berth(&["get", "pods", "-o", "jsonpath={.items[0].metadata.name"])
        .await;
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (
            1,
            "error: error parsing jsonpath {.items[0].metadata.name, unclosed action\n"
        )
    );

    let run = s
        .berth(&[
            "get",
            "pods",
            "-o",
            "custom-columns=NAME:.metadata.name,APP:metadata.labels.app,NODE:{.spec.nodeName}",
        ])
        .await;
    assert_eq!(
        ok(&run),
        "NAME         APP   NODE\ndatabase-0   db    <none>\nweb-1        web   <none>\n"
    );
}

#[tokio::test]
async fn get_watch_prints_changes_in_the_same_columns() {
    let s = TestServer::start().await;
    fixtures(&s).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["get", "pods", "-w", "--output-watch-events"])
        .env("KUBECONFIG", s.kubeconfig())
        .env_remove("BERTH_LOG")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || within(60, lines.next_line()).await.unwrap().unwrap();
    assert_eq!(
        aged(&(next().await + "\n")),
        "EVENT      NAME         READY   STATUS    RESTARTS   AGE\n"
    );
    assert_eq!(
        aged(&(next().await + "\n")),
        "ADDED      database-0   0/1     Pending   0          AGE\n"
    );
    assert_eq!(
        aged(&(next().await + "\n")),
        "ADDED      web-1        0/1     Pending   0          AGE\n"
    );
    let (code, _) = s.post(PODS, pod("w", "web")).await;
    assert_eq!(code, 201);
    assert_eq!(
        aged(&(next().await + "\n")),
        "ADDED      w            0/1     Pending   0          AGE\n"
    );
    s.delete(&format!("{PODS}/w")).await;
    // An unscheduled pod goes at once; one on a node would show Terminating first.
    loop {
        let line = next().await;
        if line.starts_with("DELETED    w            0/1     ") || line.contains(" Terminating ") {
            break;
        }
        assert!(line.starts_with("MODIFIED   w "), "{line}");
    }
    child.kill().await.unwrap();
}

#[tokio::test]
async fn get_watch_of_one_object_in_another_format() {
    let s = TestServer::start().await;
    fixtures(&s).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "get",
            "pod",
            "web-1",
            "-w",
            "-o",
            "jsonpath={.metadata.labels.app}{\"\\n\"}",
        ])
        .env("KUBECONFIG", s.kubeconfig())
        .env_remove("BERTH_LOG")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || within(60, lines.next_line()).await.unwrap().unwrap();
    assert_eq!(next().await, "web");
    // A change of another pod is not printed; one of web-1 is.
    for (name, app) in [("database-0", "other"), ("web-1", "changed")] {
        let (code, body) = s
            .patch(
                &format!("{PODS}/{name}"),
                "application/merge-patch+json",
                json!({"metadata": {"labels": {"app": app}}}),
            )
            .await;
        assert_eq!(code, 200, "{body}");
    }
    assert_eq!(next().await, "changed");
    child.kill().await.unwrap();
}
