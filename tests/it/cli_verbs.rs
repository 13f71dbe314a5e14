//! `berth version`, `api-resources`, `label`, `annotate`, `patch`, `scale`, `logs` and
//! `events` against a real server, with kubectl's texts and exit codes.

use serde_json::json;

use crate::node::{PODS, delete_pod, pod, run_pod, server};
use crate::support::{TestServer, eventually, fails, ok};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";

#[tokio::test]
async fn version_and_api_resources_come_from_the_server() {
    let s = TestServer::start().await;
    let v = format!("v1.37.0+berth-{}", env!("CARGO_PKG_VERSION"));
    ok(
        &s.berth(&["version"]).await,
        &format!("Client Version: {v}\nServer Version: {v}\n"),
    );
    let run = s.berth(&["version", "-o", "json"]).await;
    let parsed: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(parsed["serverVersion"]["gitVersion"], v.as_str());
    assert!(
        run.stdout.starts_with("{\n    \"clientVersion\""),
        "{run:?}"
    );

    let run = s.berth(&["api-resources"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME "), "{run:?}");
    let pods = lines.iter().find(|l| l.starts_with("pods ")).unwrap();
    let cells: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(cells, ["pods", "po", "v1", "true", "Pod"]);
    let dcs = lines
        .iter()
        .find(|l| l.starts_with("deploymentconfigs "))
        .unwrap();
    assert!(
        dcs.contains(" dc ") && dcs.contains("apps.openshift.io/v1"),
        "{dcs}"
    );
    // The columns line up: every KIND starts where the header's does.
    let kind_at = lines[0].find("KIND").unwrap();
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.len() > kind_at && &l[kind_at - 1..kind_at] == " ")
    );

    let run = s
        .berth(&["api-resources", "-o", "name", "--namespaced=false"])
        .await;
    assert!(run.stdout.lines().any(|l| l == "nodes"), "{run:?}");
    assert!(!run.stdout.lines().any(|l| l == "pods"), "{run:?}");
    let run = s.berth(&["api-resources", "-o", "name"]).await;
    assert!(
        run.stdout
            .lines()
            .any(|l| l == "deploymentconfigs.apps.openshift.io"),
        "{run:?}"
    );
}

#[tokio::test]
async fn label_annotate_patch_and_scale_change_objects() {
    let s = TestServer::start().await;
    let cm = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
    assert_eq!(s.post(CMS, cm).await.0, 201);

    ok(
        &s.berth(&["label", "configmap", "c", "a=b"]).await,
        "configmap/c labeled\n",
    );
    fails(
        &s.berth(&["label", "cm/c", "a=c"]).await,
        "error: 'a' already has a value (b), and --overwrite is false\n",
    );
    ok(
        &s.berth(&["label", "cm/c", "a=c", "--overwrite"]).await,
        "configmap/c labeled\n",
    );
    ok(&s.berth(&["label", "cm", "c", "--list"]).await, "a=c\n");
    ok(
        &s.berth(&["label", "cm", "c", "a-"]).await,
        "configmap/c unlabeled\n",
    );
    ok(
        &s.berth(&["label", "cm", "c", "a-"]).await,
        "configmap/c not labeled\n",
    );
    let run = s.berth(&["label", "cm", "c", "bad key=x"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with("error: invalid label spec: "),
        "{run:?}"
    );
    ok(
        &s.berth(&["annotate", "cm", "c", "note=hello world"]).await,
        "configmap/c annotated\n",
    );
    let c = s.get(&format!("{CMS}/c")).await.1;
    assert!(
        c["metadata"]["labels"]
            .as_object()
            .is_none_or(|l| l.is_empty()),
        "{c}"
    );
    assert_eq!(c["metadata"]["annotations"]["note"], "hello world");

    ok(
        &s.berth(&[
            "patch",
            "cm",
            "c",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"w"}}"#,
        ])
        .await,
        "configmap/c patched\n",
    );
    ok(
        &s.berth(&[
            "patch",
            "cm",
            "c",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"w"}}"#,
        ])
        .await,
        "configmap/c patched (no change)\n",
    );
    ok(
        &s.berth(&[
            "patch",
            "cm/c",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/k"}]"#,
        ])
        .await,
        "configmap/c patched\n",
    );
    let data = &s.get(&format!("{CMS}/c")).await.1["data"];
    assert!(data.as_object().is_none_or(|d| d.is_empty()), "{data}");
    fails(
        &s.berth(&["patch", "cm", "nope", "--type=merge", "-p", "{}"])
            .await,
        "Error from server (NotFound): configmaps \"nope\" not found\n",
    );
    fails(
        &s.berth(&["patch", "cm", "c", "--type=other", "-p", "{}"])
            .await,
        "error: --type must be one of [json merge strategic], not \"other\"\n",
    );

    let rc = json!({
        "metadata": {"name": "r"},
        "spec": {"replicas": 0, "selector": {"app": "r"}, "template": {
            "metadata": {"labels": {"app": "r"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    });
    assert_eq!(s.post(RCS, rc).await.0, 201);
    ok(
        &s.berth(&["scale", "rc", "r", "--replicas=2"]).await,
        "replicationcontroller/r scaled\n",
    );
    assert_eq!(s.get(&format!("{RCS}/r")).await.1["spec"]["replicas"], 2);
    fails(
        &s.berth(&["scale", "rc/r", "--replicas=3", "--current-replicas=5"])
            .await,
        "error: Expected replicas to be 5, was 2\n",
    );
    ok(
        &s.berth(&["scale", "rc/r", "--replicas=0", "--current-replicas=2"])
            .await,
        "replicationcontroller/r scaled\n",
    );
    fails(
        &s.berth(&["scale", "cm/c", "--replicas=1"]).await,
        "error: cannot scale configmaps: it has no scale subresource\n",
    );

    // The RC controller recorded what it did; `events` lists it.
    let run = s.berth(&["events"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.starts_with("LAST SEEN   TYPE      REASON   "),
        "{run:?}"
    );
    assert!(run.stdout.contains("ReplicationController/r"), "{run:?}");
    let run = s
        .berth(&["events", "--for", "rc/r", "--types=Warning"])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr, "No events found in default namespace.\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_reads_pods_and_the_pods_of_replication_controllers() {
    let s = server().await;
    run_pod(
        &s,
        pod("talker", "Always", "echo one; echo two; exec sleep 8301"),
    )
    .await;
    eventually(30, "the log has both lines", || async {
        let run = s.berth(&["logs", "talker"]).await;
        (run.stdout == "one\ntwo\n")
            .then_some(())
            .ok_or(format!("{run:?}"))
    })
    .await;
    ok(&s.berth(&["logs", "pod/talker", "--tail=1"]).await, "two\n");
    ok(&s.berth(&["logs", "talker", "main"]).await, "one\ntwo\n");
    let run = s.berth(&["logs", "talker", "--timestamps"]).await;
    assert!(
        run.stdout
            .lines()
            .all(|l| l.ends_with(" one") || l.ends_with(" two")),
        "{run:?}"
    );
    fails(
        &s.berth(&["logs", "nope"]).await,
        "Error from server (NotFound): pods \"nope\" not found\n",
    );

    // exec passes output, errors and the exit code through.
    let run = s
        .berth(&[
            "exec",
            "talker",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ])
        .await;
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (3, "out\n", "err\ncommand terminated with exit code 3\n")
    );
    ok(
        &s.berth(&["exec", "pod/talker", "-c", "main", "--", "true"])
            .await,
        "",
    );
    let run = s.berth(&["exec", "-t", "talker", "--", "echo", "hi"]).await;
    assert_eq!((run.code, run.stdout.as_str()), (0, "hi\n"), "{run:?}");
    assert!(run.stderr.starts_with("Unable to use a TTY"), "{run:?}");
    fails(
        &s.berth(&["exec", "nope", "--", "true"]).await,
        "Error from server (NotFound): pods \"nope\" not found\n",
    );
    // On a terminal (a pseudo-terminal made by util-linux's `script`), `-it` puts it in
    // raw mode and the command gets the terminal's size.
    let line = format!(
        "stty rows 40 cols 100; {} exec -it talker -- sh -c 'stty size; exit 4'",
        env!("CARGO_BIN_EXE_berth")
    );
    let o = tokio::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("KUBECONFIG", s.kubeconfig())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let o = crate::support::within(30, o).await.unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("40 100\r\n"), "{text}");
    assert!(
        text.contains("command terminated with exit code 4"),
        "{text}"
    );

    // Standard input reaches the command, and its end ends the command's input.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "exec",
            "-i",
            "talker",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z; echo done",
        ])
        .env("KUBECONFIG", s.kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"hello\n").await.unwrap();
    }
    let o = crate::support::within(30, child.wait_with_output())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "HELLO\ndone\n");
    assert_eq!(o.status.code(), Some(0));

    // A followed log ends when the pod's container does.
    let mut p = pod("counter", "Never", "echo a; sleep 1; echo b");
    p["spec"]["containers"][0]["name"] = json!("c");
    assert_eq!(s.post(PODS, p).await.0, 201);
    crate::node::pod_until(&s, "counter", "started", |p| {
        p["status"]["phase"] != "Pending"
    })
    .await;
    ok(&s.berth(&["logs", "-f", "counter"]).await, "a\nb\n");
    delete_pod(&s, "talker").await;
    delete_pod(&s, "counter").await;
}
