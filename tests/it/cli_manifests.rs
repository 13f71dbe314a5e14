//! `berth create|apply|delete|wait` against a real server: kubectl's texts and exit codes,
//! the last-applied annotation and three-way patches, cascades, and waiting by watch.

use std::path::Path;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::node::{self, PODS};
use crate::support::{CliRun, TestServer, eventually, within};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Runs `berth ARGS` in `dir` (so manifests are named as given), with `stdin` piped in.
async fn berth_in(s: &TestServer, dir: &Path, args: &[&str], stdin: Option<&str>) -> CliRun {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"));
    cmd.args(args)
        .current_dir(dir)
        .env("KUBECONFIG", s.kubeconfig())
        .env_remove("BERTH_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    let o = within(120, child.wait_with_output()).await.unwrap();
    CliRun {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[track_caller]
fn ok(run: &CliRun, stdout: &str) {
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, stdout, ""),
        "{run:?}"
    );
}

#[track_caller]
fn fails(run: &CliRun, stdout: &str, stderr: &str) {
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (1, stdout, stderr),
        "{run:?}"
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn pod_yaml(name: &str, image: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n{labels}spec:\n  \
         containers:\n  - name: main\n    image: {image}\n    command: [\"sleep\", \"1\"]\n"
    )
}

fn cm_yaml(name: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n{data}")
}

async fn exists(s: &TestServer, path: &str) -> bool {
    match s.get(path).await.0 {
        200 => true,
        404 => false,
        c => panic!("GET {path}: {c}"),
    }
}

#[tokio::test]
async fn create_prints_each_object_and_carries_on_past_existing_ones() {
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "f.yaml",
        &format!(
            "{}---\n{}",
            pod_yaml("a", "busybox", "    app: web\n"),
            cm_yaml("b", "  k: v\n")
        ),
    );
    ok(
        &berth_in(&s, d, &["create", "-f", "f.yaml"], None).await,
        "pod/a created\nconfigmap/b created\n",
    );
    assert!(exists(&s, &format!("{PODS}/a")).await);
    // Create does not record the manifest.
    let (_, cm) = s.get(&format!("{CMS}/b")).await;
    assert!(
        cm["metadata"]["annotations"][LAST_APPLIED].is_null(),
        "{cm}"
    );

    // Existing objects are refused one by one; the new one is still created.
    write(
        d,
        "g.yaml",
        &format!(
            "{}---\n{}---\n{}",
            pod_yaml("a", "busybox", "    app: web\n"),
            cm_yaml("c", "  k: v\n"),
            cm_yaml("b", "  k: v\n"),
        ),
    );
    fails(
        &berth_in(&s, d, &["create", "-f", "g.yaml"], None).await,
        "configmap/c created\n",
        "Error from server (AlreadyExists): error when creating \"g.yaml\": pods \"a\" already exists\n\
         Error from server (AlreadyExists): error when creating \"g.yaml\": configmaps \"b\" already exists\n",
    );
    assert!(exists(&s, &format!("{CMS}/c")).await);

    // Dry runs: the client prints only, the server checks but stores nothing.
    write(d, "d.yaml", &cm_yaml("d", "  k: v\n"));
    ok(
        &berth_in(&s, d, &["create", "-f", "d.yaml", "--dry-run=client"], None).await,
        "configmap/d created (dry run)\n",
    );
    ok(
        &berth_in(&s, d, &["create", "-f", "d.yaml", "--dry-run=server"], None).await,
        "configmap/d created (server dry run)\n",
    );
    assert!(!exists(&s, &format!("{CMS}/d")).await);
    // The server's dry run still refuses what exists.
    fails(
        &berth_in(&s, d, &["create", "-f", "f.yaml", "--dry-run=server"], None).await,
        "",
        "Error from server (AlreadyExists): error when creating \"f.yaml\": pods \"a\" already exists\n\
         Error from server (AlreadyExists): error when creating \"f.yaml\": configmaps \"b\" already exists\n",
    );

    // JSON from standard input, a List unpacked, -o name, --save-config.
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "e1"}, "data": {"k": "1"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "e2"}, "data": {"k": "2"}},
    ]});
    ok(
        &berth_in(
            &s,
            d,
            &["create", "-f", "-", "-o", "name", "--save-config"],
            Some(&list.to_string()),
        )
        .await,
        "configmap/e1\nconfigmap/e2\n",
    );
    let (_, e1) = s.get(&format!("{CMS}/e1")).await;
    assert_eq!(
        e1["metadata"]["annotations"][LAST_APPLIED],
        "{\"apiVersion\":\"v1\",\"data\":{\"k\":\"1\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{},\"name\":\"e1\",\"namespace\":\"default\"}}\n"
    );

    // Directories: manifests only, subdirectories with -R; generateName honoured.
    write(d, "dir/one.yaml", &cm_yaml("r1", "  k: v\n"));
    write(d, "dir/notes.txt", "not a manifest");
    write(
        d,
        "dir/sub/two.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-"}}"#,
    );
    ok(
        &berth_in(&s, d, &["create", "-f", "dir"], None).await,
        "configmap/r1 created\n",
    );
    let run = berth_in(&s, d, &["create", "-R", "-f", "dir"], None).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout.starts_with("configmap/gen-") && run.stdout.ends_with(" created\n"),
        "{run:?}"
    );
    assert_eq!(
        run.stderr,
        "Error from server (AlreadyExists): error when creating \"dir/one.yaml\": configmaps \"r1\" already exists\n"
    );

    // A namespace in the manifest wins over the context's, and must agree with -n.
    s.post("/api/v1/namespaces", json!({"metadata": {"name": "other"}}))
        .await;
    write(
        d,
        "ns.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: n1\n  namespace: other\n",
    );
    ok(
        &berth_in(&s, d, &["create", "-f", "ns.yaml"], None).await,
        "configmap/n1 created\n",
    );
    assert!(exists(&s, "/api/v1/namespaces/other/configmaps/n1").await);
    fails(
        &berth_in(&s, d, &["create", "-f", "ns.yaml", "-n", "default"], None).await,
        "",
        "error: the namespace from the provided object \"other\" does not match the namespace \
         \"default\". You must pass '--namespace=other' to perform this operation.\n",
    );
    s.stop().await;
}

#[tokio::test]
async fn manifest_errors_name_the_file() {
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "bad.yaml", "apiVersion: v1\nkind: [Pod\n");
    let run = berth_in(&s, d, &["create", "-f", "bad.yaml"], None).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with("error: error parsing bad.yaml: "),
        "{run:?}"
    );

    write(
        d,
        "foo.yaml",
        "apiVersion: v1\nkind: Foo\nmetadata:\n  name: x\n",
    );
    for verb in ["create", "apply"] {
        fails(
            &berth_in(&s, d, &[verb, "-f", "foo.yaml"], None).await,
            "",
            "error: resource mapping not found for name: \"x\" namespace: \"\" from \"foo.yaml\": \
             no matches for kind \"Foo\" in version \"v1\"\nensure CRDs are installed first\n",
        );
    }
    write(d, "nokind.yaml", "apiVersion: v1\nmetadata:\n  name: x\n");
    fails(
        &berth_in(&s, d, &["apply", "-f", "nokind.yaml"], None).await,
        "",
        "error: error validating \"nokind.yaml\": error validating data: kind not set; if you \
         choose to ignore these errors, turn validation off with --validate=false\n",
    );
    fails(
        &berth_in(&s, d, &["create", "-f", "nope.yaml"], None).await,
        "",
        "error: the path \"nope.yaml\" does not exist\n",
    );
    fails(
        &berth_in(&s, d, &["apply"], None).await,
        "",
        "error: must specify one of -f and -k\n",
    );
    write(d, "empty.yaml", "---\n");
    fails(
        &berth_in(&s, d, &["apply", "-f", "empty.yaml"], None).await,
        "",
        "error: no objects passed to apply\n",
    );
    // The server's validation is strict about unknown fields.
    write(
        d,
        "typo.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: t\n  bogusField: 1\n",
    );
    let run = berth_in(&s, d, &["create", "-f", "typo.yaml"], None).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("Error from server (BadRequest): error when creating \"typo.yaml\": ")
            && run.stderr.contains("bogusField"),
        "{run:?}"
    );
    // --validate=warn accepts them, with the server's warning on standard error.
    let run = berth_in(
        &s,
        d,
        &[
            "create",
            "-f",
            "typo.yaml",
            "--validate=warn",
            "--dry-run=server",
        ],
        None,
    )
    .await;
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            0,
            "configmap/t created (server dry run)\n",
            "Warning: unknown field \"metadata.bogusField\"\n"
        ),
        "{run:?}"
    );
    // --validate=false asks the server to drop unknown fields.
    ok(
        &berth_in(
            &s,
            d,
            &["apply", "-f", "typo.yaml", "--validate=false"],
            None,
        )
        .await,
        "configmap/t created\n",
    );
    let (_, t) = s.get(&format!("{CMS}/t")).await;
    assert!(t["metadata"]["bogusField"].is_null(), "{t}");
    fails(
        &berth_in(
            &s,
            d,
            &["create", "-f", "typo.yaml", "--validate=maybe"],
            None,
        )
        .await,
        "",
        "error: invalid - validate option \"maybe\"; must be one of: strict (or true), warn, \
         ignore (or false)\n",
    );
    s.stop().await;
}

#[tokio::test]
async fn apply_creates_configures_and_leaves_unchanged_objects() {
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "app.yaml",
        &format!(
            "{}---\n{}",
            pod_yaml("web", "busybox:1", "    app: web\n    tier: fe\n"),
            cm_yaml("conf", "  a: \"1\"\n  b: \"2\"\n"),
        ),
    );
    ok(
        &berth_in(&s, d, &["apply", "-f", "app.yaml"], None).await,
        "pod/web created\nconfigmap/conf created\n",
    );
    let (_, cm) = s.get(&format!("{CMS}/conf")).await;
    assert_eq!(
        cm["metadata"]["annotations"][LAST_APPLIED],
        "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"1\",\"b\":\"2\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{},\"name\":\"conf\",\"namespace\":\"default\"}}\n"
    );
    // The server's defaults inside the containers do not count as changes.
    ok(
        &berth_in(&s, d, &["apply", "-f", "app.yaml"], None).await,
        "pod/web unchanged\nconfigmap/conf unchanged\n",
    );

    // Someone else adds a label; the manifest drops one label and a key, changes the image.
    let (code, _) = s
        .patch(
            &format!("{PODS}/web"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"owner": "ops"}}}),
        )
        .await;
    assert_eq!(code, 200);
    write(
        d,
        "app.yaml",
        &format!(
            "{}---\n{}",
            pod_yaml("web", "busybox:2", "    app: web\n"),
            cm_yaml("conf", "  a: \"1\"\n"),
        ),
    );
    ok(
        &berth_in(
            &s,
            d,
            &["apply", "-f", "app.yaml", "--dry-run=server"],
            None,
        )
        .await,
        "pod/web configured (server dry run)\nconfigmap/conf configured (server dry run)\n",
    );
    assert_eq!(
        s.get(&format!("{CMS}/conf")).await.1["data"],
        json!({"a": "1", "b": "2"})
    );
    ok(
        &berth_in(&s, d, &["apply", "-f", "app.yaml"], None).await,
        "pod/web configured\nconfigmap/conf configured\n",
    );
    let (_, pod) = s.get(&format!("{PODS}/web")).await;
    assert_eq!(
        pod["metadata"]["labels"],
        json!({"app": "web", "owner": "ops"})
    );
    assert_eq!(pod["spec"]["containers"][0]["image"], "busybox:2");
    assert!(
        pod["spec"]["containers"][0]["imagePullPolicy"].is_string(),
        "{pod}"
    );
    assert_eq!(
        s.get(&format!("{CMS}/conf")).await.1["data"],
        json!({"a": "1"})
    );
    ok(
        &berth_in(&s, d, &["apply", "-f", "app.yaml"], None).await,
        "pod/web unchanged\nconfigmap/conf unchanged\n",
    );

    // An object made by create has no last-applied configuration: apply warns, adds it.
    write(d, "plain.yaml", &cm_yaml("plain", "  a: \"1\"\n"));
    ok(
        &berth_in(&s, d, &["create", "-f", "plain.yaml"], None).await,
        "configmap/plain created\n",
    );
    write(d, "plain.yaml", &cm_yaml("plain", "  a: \"2\"\n"));
    let run = berth_in(&s, d, &["apply", "-f", "plain.yaml"], None).await;
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "configmap/plain configured\n"),
        "{run:?}"
    );
    assert_eq!(
        run.stderr,
        "Warning: resource configmaps/plain is missing the \
         kubectl.kubernetes.io/last-applied-configuration annotation which is required by \
         berth apply. berth apply should only be used on resources created declaratively by \
         either berth create --save-config or berth apply. The missing annotation will be \
         patched automatically.\n"
    );
    let (_, plain) = s.get(&format!("{CMS}/plain")).await;
    assert!(plain["metadata"]["annotations"][LAST_APPLIED].is_string());
    ok(
        &berth_in(&s, d, &["apply", "-f", "plain.yaml"], None).await,
        "configmap/plain unchanged\n",
    );

    // A DeploymentConfig: nested templates and lists patched by key, re-applied unchanged.
    let dc = "apiVersion: apps.openshift.io/v1\nkind: DeploymentConfig\nmetadata:\n  name: api\n\
              spec:\n  replicas: 0\n  selector:\n    app: api\n  template:\n    metadata:\n      \
              labels:\n        app: api\n    spec:\n      containers:\n      - name: main\n        \
              image: busybox:1\n        env:\n        - name: A\n          value: \"1\"\n";
    write(d, "dc.yaml", dc);
    ok(
        &berth_in(&s, d, &["apply", "-f", "dc.yaml"], None).await,
        "deploymentconfig.apps.openshift.io/api created\n",
    );
    ok(
        &berth_in(&s, d, &["apply", "-f", "dc.yaml"], None).await,
        "deploymentconfig.apps.openshift.io/api unchanged\n",
    );
    write(d, "dc.yaml", &dc.replace("value: \"1\"", "value: \"2\""));
    ok(
        &berth_in(&s, d, &["apply", "-f", "dc.yaml"], None).await,
        "deploymentconfig.apps.openshift.io/api configured\n",
    );
    let (_, got) = s
        .get("/apis/apps.openshift.io/v1/namespaces/default/deploymentconfigs/api")
        .await;
    assert_eq!(
        got["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "2"}])
    );

    // Server-side apply: created, then updated, by the field manager.
    write(d, "ssa.yaml", &cm_yaml("ssa", "  a: \"1\"\n"));
    ok(
        &berth_in(&s, d, &["apply", "--server-side", "-f", "ssa.yaml"], None).await,
        "configmap/ssa serverside-applied\n",
    );
    write(d, "ssa.yaml", &cm_yaml("ssa", "  b: \"2\"\n"));
    ok(
        &berth_in(&s, d, &["apply", "--server-side", "-f", "ssa.yaml"], None).await,
        "configmap/ssa serverside-applied\n",
    );
    let (_, ssa) = s.get(&format!("{CMS}/ssa")).await;
    assert_eq!(ssa["data"], json!({"b": "2"}), "{ssa}");
    assert_eq!(ssa["metadata"]["managedFields"][0]["manager"], "kubectl");
    assert!(ssa["metadata"]["annotations"][LAST_APPLIED].is_null());
    fails(
        &berth_in(
            &s,
            d,
            &[
                "apply",
                "--server-side",
                "--dry-run=client",
                "-f",
                "ssa.yaml",
            ],
            None,
        )
        .await,
        "",
        "error: --dry-run=client doesn't work with --server-side (did you mean \
         --dry-run=server instead?)\n",
    );

    // A patch the server refuses reads like kubectl's.
    write(
        d,
        "bad.yaml",
        &pod_yaml("web", "busybox:2", "    app: \"not a label value!\"\n"),
    );
    let run = berth_in(&s, d, &["apply", "-f", "bad.yaml"], None).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("Error from server (Invalid): error when applying patch:\n{"),
        "{run:?}"
    );
    assert!(
        run.stderr.contains(
            "\nto:\nResource: \"/v1, Resource=pods\", GroupVersionKind: \"/v1, Kind=Pod\"\n\
             Name: \"web\", Namespace: \"default\"\nfor: \"bad.yaml\": error when patching \"bad.yaml\": "
        ),
        "{run:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn delete_by_name_file_and_selector_with_kubectls_texts() {
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, tier) in [("c1", "a"), ("c2", "a"), ("c3", "b"), ("c4", "b")] {
        let (code, _) = s
            .post(
                CMS,
                json!({"metadata": {"name": name, "labels": {"tier": tier}}}),
            )
            .await;
        assert_eq!(code, 201);
    }
    ok(
        &berth_in(&s, d, &["delete", "configmap", "c1"], None).await,
        "configmap \"c1\" deleted from default namespace\n",
    );
    assert!(!exists(&s, &format!("{CMS}/c1")).await);

    // Missing objects are errors, unless ignored; the others are still deleted.
    fails(
        &berth_in(&s, d, &["delete", "cm/nope", "cm/c2"], None).await,
        "configmap \"c2\" deleted from default namespace\n",
        "Error from server (NotFound): configmaps \"nope\" not found\n",
    );
    ok(
        &berth_in(&s, d, &["delete", "cm", "nope", "--ignore-not-found"], None).await,
        "",
    );

    // Dry runs leave the object.
    ok(
        &berth_in(&s, d, &["delete", "cm", "c3", "--dry-run=server"], None).await,
        "configmap \"c3\" deleted (server dry run) from default namespace\n",
    );
    ok(
        &berth_in(&s, d, &["delete", "cm", "c3", "--dry-run"], None).await,
        "configmap \"c3\" deleted (dry run) from default namespace\n",
    );
    assert!(exists(&s, &format!("{CMS}/c3")).await);

    // By selector; nothing left to match.
    ok(
        &berth_in(&s, d, &["delete", "cm", "-l", "tier=b", "-o", "name"], None).await,
        "configmap/c3\nconfigmap/c4\n",
    );
    ok(
        &berth_in(&s, d, &["delete", "cm", "-l", "tier=b"], None).await,
        "No resources found\n",
    );

    // By manifest.
    write(d, "m.yaml", &cm_yaml("m1", "  k: v\n"));
    berth_in(&s, d, &["create", "-f", "m.yaml"], None).await;
    ok(
        &berth_in(&s, d, &["delete", "-f", "m.yaml"], None).await,
        "configmap \"m1\" deleted from default namespace\n",
    );

    // Cluster-scoped objects have no namespace in the text.
    s.post("/api/v1/namespaces", json!({"metadata": {"name": "gone"}}))
        .await;
    ok(
        &berth_in(
            &s,
            d,
            &["delete", "namespace", "gone", "--wait=false"],
            None,
        )
        .await,
        "namespace \"gone\" deleted\n",
    );

    // Several failures are printed one a line, without a prefix each, like kubectl's.
    for name in ["w1", "w2"] {
        assert_eq!(
            s.post(CMS, json!({"metadata": {"name": name}})).await.0,
            201
        );
    }
    fails(
        &berth_in(
            &s,
            d,
            &[
                "wait",
                "--for=condition=Ready",
                "cm/w1",
                "cm/w2",
                "--timeout=1s",
            ],
            None,
        )
        .await,
        "",
        "timed out waiting for the condition on configmaps/w1\n\
         timed out waiting for the condition on configmaps/w2\n",
    );
    fails(
        &berth_in(&s, d, &["wait", "cm/w1"], None).await,
        "",
        "error: unrecognized condition: \"\"\n",
    );
    // Waiting for an object to appear, and for a jsonpath value to change.
    let waiter = berth_in(
        &s,
        d,
        &["wait", "--for=create", "cm/late", "--timeout=30s"],
        None,
    );
    let changer = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(
            s.post(CMS, json!({"metadata": {"name": "late"}})).await.0,
            201
        );
    };
    let (waited, ()) = tokio::join!(waiter, changer);
    ok(&waited, "configmap/late condition met\n");
    for name in ["c5", "c6"] {
        let (code, _) = s
            .post(
                CMS,
                json!({"metadata": {"name": name, "labels": {"tier": "a"}}, "data": {"k": "1"}}),
            )
            .await;
        assert_eq!(code, 201);
    }
    let waiter = berth_in(
        &s,
        d,
        &[
            "wait",
            "--for=jsonpath={.data.k}=2",
            "cm",
            "-l",
            "tier=a",
            "--timeout=30s",
        ],
        None,
    );
    let changer = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for name in ["c5", "c6"] {
            s.patch(
                &format!("{CMS}/{name}"),
                "application/merge-patch+json",
                json!({"data": {"k": "2"}}),
            )
            .await;
        }
    };
    let (waited, ()) = tokio::join!(waiter, changer);
    let mut lines: Vec<&str> = waited.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        (waited.code, lines, waited.stderr.as_str()),
        (
            0,
            vec!["configmap/c5 condition met", "configmap/c6 condition met"],
            ""
        ),
        "{waited:?}"
    );
    fails(
        &berth_in(
            &s,
            d,
            &["wait", "--for=delete", "cm", "-l", "tier=none"],
            None,
        )
        .await,
        "",
        "error: no matching resources found\n",
    );

    // Argument mistakes.
    fails(
        &berth_in(&s, d, &["delete", "cm"], None).await,
        "",
        "error: resource(s) were provided, but no name was specified\n",
    );
    fails(
        &berth_in(&s, d, &["delete"], None).await,
        "",
        "error: You must provide one or more resources by argument or filename.\n\
         Example resource specifications include:\n   '-f rsrc.yaml'\n   \
         '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'\n",
    );
    fails(
        &berth_in(&s, d, &["delete", "cm", "x", "--cascade=sideways"], None).await,
        "",
        "error: invalid cascade value (sideways). Must be \"background\", \"foreground\", or \
         \"orphan\"\n",
    );
    s.stop().await;
}

fn rc(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"app": name},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        },
    })
}

async fn pods_of(s: &TestServer, app: &str) -> Vec<Value> {
    s.get(&format!("{PODS}?labelSelector=app%3D{app}")).await.1["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn delete_cascades_as_asked() {
    // No node: the RCs' pods stay pending and go at once when deleted.
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in ["keep", "fore"] {
        assert_eq!(s.post(RCS, rc(name)).await.0, 201);
        eventually(30, "two pods", || async {
            let n = pods_of(&s, name).await.len();
            (n == 2).then_some(()).ok_or(n.to_string())
        })
        .await;
    }
    ok(
        &berth_in(&s, d, &["delete", "rc", "keep", "--cascade=orphan"], None).await,
        "replicationcontroller \"keep\" deleted from default namespace\n",
    );
    // Orphaned pods stay, without their owner.
    let pods = pods_of(&s, "keep").await;
    assert_eq!(pods.len(), 2);
    eventually(30, "owner references dropped", || async {
        let owned = pods_of(&s, "keep")
            .await
            .iter()
            .filter(|p| p["metadata"]["ownerReferences"].is_array())
            .count();
        (owned == 0).then_some(()).ok_or(owned.to_string())
    })
    .await;

    // Foreground: the command returns once the RC is gone, which is after its pods.
    ok(
        &berth_in(
            &s,
            d,
            &["delete", "rc", "fore", "--cascade=foreground"],
            None,
        )
        .await,
        "replicationcontroller \"fore\" deleted from default namespace\n",
    );
    assert!(!exists(&s, &format!("{RCS}/fore")).await);
    assert!(pods_of(&s, "fore").await.is_empty());

    let mut texts: Vec<String> = pods_of(&s, "keep")
        .await
        .iter()
        .map(|p| {
            format!(
                "pod \"{}\" deleted from default namespace\n",
                p["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    texts.sort();
    ok(
        &berth_in(&s, d, &["delete", "pods", "--all", "--now"], None).await,
        &texts.concat(),
    );
    assert!(pods_of(&s, "keep").await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn wait_and_delete_follow_running_pods_by_watch() {
    let s = node::server().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut p = node::pod("w1", "Always", "exec sleep 8251");
    p["metadata"]["labels"] = json!({"app": "waiter"});
    assert_eq!(s.post(PODS, p).await.0, 201);

    ok(
        &berth_in(
            &s,
            d,
            &["wait", "--for=condition=Ready", "pod/w1", "--timeout=60s"],
            None,
        )
        .await,
        "pod/w1 condition met\n",
    );
    ok(
        &berth_in(
            &s,
            d,
            &[
                "wait",
                "--for=jsonpath={.status.phase}=Running",
                "pods",
                "-l",
                "app=waiter",
            ],
            None,
        )
        .await,
        "pod/w1 condition met\n",
    );
    fails(
        &berth_in(
            &s,
            d,
            &[
                "wait",
                "--for=condition=Ready=false",
                "pod",
                "w1",
                "--timeout=1s",
            ],
            None,
        )
        .await,
        "",
        "error: timed out waiting for the condition on pods/w1\n",
    );
    fails(
        &berth_in(&s, d, &["wait", "--for=condition=Ready", "pod/nope"], None).await,
        "",
        "Error from server (NotFound): pods \"nope\" not found\n",
    );
    ok(
        &berth_in(&s, d, &["wait", "--for=delete", "pod/nope"], None).await,
        "",
    );
    fails(
        &berth_in(&s, d, &["wait", "--for=later", "pod/w1"], None).await,
        "",
        "error: unrecognized condition: \"later\"\n",
    );

    // One client waits for the deletion another one makes; delete itself returns only
    // once the pod (terminated within its 2 s grace period) is gone.
    let waiter = berth_in(
        &s,
        d,
        &["wait", "--for=delete", "pod/w1", "--timeout=60s"],
        None,
    );
    let deleter = async {
        // Let the waiter start watching first.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        berth_in(&s, d, &["delete", "pod", "w1"], None).await
    };
    let (waited, deleted) = tokio::join!(waiter, deleter);
    ok(&deleted, "pod \"w1\" deleted from default namespace\n");
    ok(&waited, "pod/w1 condition met\n");
    assert!(!exists(&s, &format!("{PODS}/w1")).await);
    eventually(30, "no process left", || async {
        let n = node::processes_with("sleep 8251");
        (n == 0).then_some(()).ok_or(n.to_string())
    })
    .await;
    s.stop().await;
}
