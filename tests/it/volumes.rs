//! Pod volumes with real processes: emptyDir shared by containers, configMap (refreshed
//! after an update), secret modes, downwardAPI, read-only and hostPath mounts, the
//! service-account token, mounts seen by exec probes, what happens without mount
//! namespaces, and the OnFailure acceptance scenario with a counter in an emptyDir.
//!
//! Mount points are temporary directories of the test: the container sees the volume
//! there, the host keeps seeing an empty directory. A mount point the host lacks is the
//! container's only: the host never sees it.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::node::pod_until;
use crate::support::{TestServer, eventually};

const PODS: &str = "/api/v1/namespaces/default/pods";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

async fn server_with(mount_namespaces: bool) -> TestServer {
    crate::node::server_tuned(|n| {
        // Volumes are refreshed at each sync: a short resync shows updates quickly.
        n.agent.resync_every = Duration::from_secs(1);
        n.agent.mount_namespaces = mount_namespaces;
    })
    .await
}

async fn server() -> TestServer {
    server_with(true).await
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn pod(name: &str, policy: &str, script: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}],
        },
    })
}

fn waiting(p: &Value, i: usize) -> &Value {
    &p["status"]["containerStatuses"][i]["state"]["waiting"]
}

async fn log(s: &TestServer, name: &str, container: &str) -> String {
    let resp = s
        .req(
            reqwest::Method::GET,
            &format!("{PODS}/{name}/log?container={container}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "log of {name}/{container}");
    resp.text().await.unwrap()
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).unwrap().next().is_none()
}

#[tokio::test]
async fn an_empty_dir_is_shared_by_the_containers_and_removed_with_the_pod() {
    let s = server().await;
    let mnt = tempfile::tempdir().unwrap();
    let m = path(mnt.path());
    let mut p = pod("share", "Never", "");
    p["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    p["spec"]["containers"] = json!([
        {"name": "writer", "image": "busybox",
         "command": ["sh", "-c", format!("echo from-writer > {m}/msg")],
         "volumeMounts": [{"name": "scratch", "mountPath": m}]},
        {"name": "reader", "image": "busybox",
         "command": ["sh", "-c", format!("while [ ! -s {m}/msg ]; do sleep 0.1; done; cat {m}/msg")],
         "volumeMounts": [{"name": "scratch", "mountPath": m}]},
    ]);
    let (code, made) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{made}");
    pod_until(&s, "share", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(log(&s, "share", "reader").await, "from-writer\n");
    // The containers saw the volume; the host still sees its empty directory.
    assert!(is_empty_dir(mnt.path()));
    let uid = made["metadata"]["uid"].as_str().unwrap();
    let volume = s.dir.path().join(format!("pods/{uid}/.volumes/scratch"));
    assert_eq!(
        std::fs::read_to_string(volume.join("msg")).unwrap(),
        "from-writer\n"
    );
    crate::node::delete_pod(&s, "share").await;
    eventually(30, "the volume is removed with the pod", || async {
        if volume.exists() {
            Err("still there".to_string())
        } else {
            Ok(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_config_map_volume_waits_for_its_config_map_and_follows_its_updates() {
    let s = server().await;
    let mnt = tempfile::tempdir().unwrap();
    let m = path(mnt.path());
    let mut p = pod(
        "conf",
        "Always",
        &format!("while :; do echo \"greeting=$(cat {m}/greeting)\"; sleep 0.2; done"),
    );
    p["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": "settings"}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "cfg", "mountPath": m}]);
    // The probe runs in the container's mount namespace: on the host, the file is not there.
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["cat", format!("{m}/greeting")]},
        "periodSeconds": 1,
    });
    s.post(PODS, p).await;
    let blocked = pod_until(&s, "conf", "waiting for its ConfigMap", |p| {
        waiting(p, 0)["reason"] == "CreateContainerConfigError"
    })
    .await;
    assert_eq!(
        waiting(&blocked, 0)["message"],
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"settings\" not found"
    );
    let events = s.events_of("conf").await;
    assert!(
        events.iter().any(|(r, m)| r == "FailedMount"
            && m == "MountVolume.SetUp failed for volume \"cfg\" : configmap \"settings\" not found"),
        "{events:?}"
    );

    let (code, cm) = s
        .post(
            CONFIGMAPS,
            json!({"metadata": {"name": "settings"}, "data": {"greeting": "v1"}}),
        )
        .await;
    assert_eq!(code, 201, "{cm}");
    pod_until(&s, "conf", "running and ready", |p| {
        berth::types::condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    eventually(30, "the file in the log", || async {
        let text = log(&s, "conf", "c").await;
        if text.contains("greeting=v1\n") {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    assert!(is_empty_dir(mnt.path()));

    let (code, _) = s
        .patch(
            &format!("{CONFIGMAPS}/settings"),
            "application/merge-patch+json",
            json!({"data": {"greeting": "v2"}}),
        )
        .await;
    assert_eq!(code, 200);
    eventually(30, "the update in the file", || async {
        let text = log(&s, "conf", "c").await;
        if text.contains("greeting=v2\n") {
            Ok(())
        } else {
            Err(text.lines().last().unwrap_or("").to_string())
        }
    })
    .await;
    // kubectl exec joins the container's mounts too (when kubectl is at hand).
    let kubeconfig = s.dir.path().join("kubeconfig");
    match tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["exec", "conf", "--", "cat", &format!("{m}/greeting")])
        .output()
        .await
    {
        Ok(out) => {
            assert!(out.status.success(), "{out:?}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), "v2");
        }
        Err(e) => eprintln!("kubectl exec not checked: {e}"),
    }
    crate::node::delete_pod(&s, "conf").await;
}

#[tokio::test]
async fn a_volume_may_cover_berths_own_directory_and_hold_the_working_directory() {
    let s = server().await;
    let mnt = tempfile::tempdir().unwrap();
    let m = path(mnt.path());
    let data = path(s.dir.path()).to_string();
    s.post(
        CONFIGMAPS,
        json!({"metadata": {"name": "greeting"}, "data": {"hello": "hi"}}),
    )
    .await;
    // The emptyDir hides berth's data directory from the container, and with it the
    // configMap volume's source: both still mount, and the shim still keeps its records.
    let mut p = pod(
        "covered",
        "Never",
        &format!("cat hello; echo; pwd; ls -A {data} | wc -l"),
    );
    p["spec"]["volumes"] = json!([
        {"name": "cfg", "configMap": {"name": "greeting"}},
        {"name": "scratch", "emptyDir": {}},
    ]);
    p["spec"]["containers"][0]["workingDir"] = json!(m);
    p["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "scratch", "mountPath": data},
        {"name": "cfg", "mountPath": m},
    ]);
    s.post(PODS, p).await;
    pod_until(&s, "covered", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(log(&s, "covered", "c").await, format!("hi\n{m}\n0\n"));
    crate::node::delete_pod(&s, "covered").await;
}

#[tokio::test]
async fn secret_downward_api_and_read_only_mounts() {
    let s = server().await;
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let [sec, down, ro, single] = [0, 1, 2, 3].map(|i| path(dirs[i].path()).to_string());
    let (code, made) = s
        .post(
            "/api/v1/namespaces/default/secrets",
            // base64 of "s3cret" and "admin".
            json!({"metadata": {"name": "creds"}, "data": {"password": "czNjcmV0", "user": "YWRtaW4="}}),
        )
        .await;
    assert_eq!(code, 201, "{made}");
    let script = format!(
        "stat -L -c %a {sec}/password; cat {sec}/password; echo; \
         test -e {sec}/user && echo user-too || echo only-items; \
         cat {down}/labels; echo; cat {down}/name; echo; \
         stat -L -c %a {down}/name; \
         touch {ro}/x 2>/dev/null && echo writable || echo refused; \
         cat {single}/user.txt; echo"
    );
    let mut p = pod("files", "Never", &script);
    p["metadata"]["labels"] = json!({"app": "files", "tier": "back"});
    p["spec"]["volumes"] = json!([
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400,
                                     "items": [{"key": "password", "path": "password"}]}},
        {"name": "meta", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o600},
        ]}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "all-creds", "secret": {"secretName": "creds"}},
    ]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "creds", "mountPath": sec, "readOnly": true},
        {"name": "meta", "mountPath": down},
        {"name": "scratch", "mountPath": ro, "readOnly": true},
        // One key of the whole secret, as a file (its mount point is the container's only).
        {"name": "all-creds", "mountPath": format!("{single}/user.txt"), "subPath": "user"},
    ]);
    s.post(PODS, p).await;
    pod_until(&s, "files", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(
        log(&s, "files", "c").await,
        "400\ns3cret\nonly-items\napp=\"files\"\ntier=\"back\"\nfiles\n600\nrefused\nadmin\n"
    );
    // The file mount point was never made on the host.
    assert!(is_empty_dir(dirs[3].path()));
    crate::node::delete_pod(&s, "files").await;
}

/// Removes what a test made outside its temporary directories, even when it fails
/// (nothing, when all goes well).
struct Remove(Vec<std::path::PathBuf>);

impl Drop for Remove {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

#[tokio::test]
async fn a_mount_point_the_host_lacks_is_never_made_on_the_host() {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let tag = format!(
        "berth-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    // Right under `/`, under a directory of the host's, and the termination message's
    // file under /dev.
    let top = Path::new("/").join(&tag);
    let nested = Path::new("/var/lib").join(&tag);
    let dev = Path::new("/dev").join(&tag);
    let _remove = Remove(vec![top.clone(), nested.clone(), dev.clone()]);
    assert!(!top.exists() && !nested.exists() && !dev.exists());
    let (t, n, d) = (path(&top), path(&nested), path(&dev));
    let s = server().await;
    let mut p = pod(
        "nowhere",
        "OnFailure",
        &format!(
            "echo from-pod > {t}/vol/f && cat {n}/x/f && ls -d /usr && ls / | grep -c {tag}; \
             sleep 600"
        ),
    );
    p["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "scratch", "mountPath": format!("{t}/vol")},
        {"name": "scratch", "mountPath": format!("{n}/x")},
    ]);
    // Probes join the container's mounts: they see its mount points too.
    p["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["cat", format!("{t}/vol/f")]},
        "periodSeconds": 1,
    });
    p["spec"]["containers"].as_array_mut().unwrap().push(json!({
        "name": "done", "image": "busybox",
        "command": ["sh", "-c", format!("echo bye > {d}/termination-log")],
        "terminationMessagePath": format!("{d}/termination-log"),
    }));
    let (code, made) = s.post(PODS, p).await;
    assert_eq!(code, 201, "{made}");
    let status = |p: &Value, name: &str| {
        p["status"]["containerStatuses"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    pod_until(&s, "nowhere", "c ready, done with a message", |p| {
        status(p, "c")["ready"] == true
            && status(p, "done")["state"]["terminated"]["message"] == "bye\n"
    })
    .await;
    assert_eq!(log(&s, "nowhere", "c").await, "from-pod\n/usr\n1\n");
    for p in [&top, &nested, &dev] {
        assert!(!p.exists(), "{} was made on the host", p.display());
    }
    let uid = made["metadata"]["uid"].as_str().unwrap();
    let volume = s.dir.path().join(format!("pods/{uid}/.volumes/scratch"));
    assert_eq!(
        std::fs::read_to_string(volume.join("f")).unwrap(),
        "from-pod\n"
    );
    crate::node::delete_pod(&s, "nowhere").await;
    assert!(!top.exists() && !nested.exists() && !dev.exists());
}

#[tokio::test]
async fn host_paths_are_shared_with_the_host_and_checked_by_type() {
    let s = server().await;
    s.allow_privileged("default").await;
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("in"), "from-host\n").unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let m = path(mnt.path());
    let mut p = pod(
        "hosted",
        "Never",
        &format!("cat {m}/in; echo from-pod > {m}/out"),
    );
    p["spec"]["volumes"] =
        json!([{"name": "h", "hostPath": {"path": path(host.path()), "type": "Directory"}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "h", "mountPath": m}]);
    s.post(PODS, p).await;
    pod_until(&s, "hosted", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(log(&s, "hosted", "c").await, "from-host\n");
    assert_eq!(
        std::fs::read_to_string(host.path().join("out")).unwrap(),
        "from-pod\n"
    );
    assert!(is_empty_dir(mnt.path()));

    let mut wrong = pod("wrong-type", "Never", "true");
    wrong["spec"]["volumes"] =
        json!([{"name": "h", "hostPath": {"path": path(host.path()), "type": "File"}}]);
    wrong["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "h", "mountPath": m}]);
    s.post(PODS, wrong).await;
    let p = pod_until(&s, "wrong-type", "a failed type check", |p| {
        waiting(p, 0)["reason"] == "CreateContainerConfigError"
    })
    .await;
    let expected = format!(
        "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: {} is not a file",
        path(host.path())
    );
    assert_eq!(waiting(&p, 0)["message"], expected.as_str());
    assert_eq!(p["status"]["phase"], "Pending");
    let events = s.events_of("wrong-type").await;
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "FailedMount" && *m == expected),
        "{events:?}"
    );
    for name in ["hosted", "wrong-type"] {
        crate::node::delete_pod(&s, name).await;
    }
}

#[tokio::test]
async fn the_service_account_token_authenticates_as_the_account() {
    let s = server().await;
    let script =
        format!("cat {SA_DIR}/token; echo; cat {SA_DIR}/namespace; echo; cat {SA_DIR}/ca.crt");
    s.post(PODS, pod("who", "Never", &script)).await;
    pod_until(&s, "who", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    let text = log(&s, "who", "c").await;
    let mut lines = text.lines();
    let token = lines.next().unwrap().to_string();
    assert_eq!(lines.next(), Some("default"));
    let ca: String = lines.map(|l| format!("{l}\n")).collect();
    assert_eq!(ca.trim(), s.ca_pem.trim());

    let as_account = |path: &str| {
        s.client
            .get(format!("{}{path}", s.url))
            .bearer_auth(&token)
            .send()
    };
    // Authenticated as the account, which RBAC grants discovery only.
    let resp = as_account("/api").await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = as_account(CONFIGMAPS).await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let status: serde_json::Value = resp.json().await.unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("User \"system:serviceaccount:default:default\""),
        "{status}"
    );
    // A bound token: of the pod, for the API, for an hour.
    let claims = jwt_claims(&token);
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "who", "{claims}");
    assert_eq!(
        claims["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3607
    );
    // A projection asks for its own audience and lifetime.
    let mut projected = pod("projected", "Never", "cat /var/run/vault/token");
    projected["spec"]["volumes"] = json!([{"name": "vault", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 600}}]}}]);
    projected["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "vault", "mountPath": "/var/run/vault"}]);
    s.post(PODS, projected).await;
    pod_until(&s, "projected", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    let claims = jwt_claims(log(&s, "projected", "c").await.trim());
    assert_eq!(claims["aud"], json!(["vault"]), "{claims}");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        600
    );
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "projected");

    let mut off = pod(
        "no-token",
        "Never",
        &format!("test -e {SA_DIR}/token && echo mounted || echo absent"),
    );
    off["spec"]["automountServiceAccountToken"] = json!(false);
    s.post(PODS, off).await;
    pod_until(&s, "no-token", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(log(&s, "no-token", "c").await, "absent\n");
    for name in ["who", "no-token", "projected"] {
        crate::node::delete_pod(&s, name).await;
    }
    // The pod's token ended with it.
    let resp = as_account(CONFIGMAPS).await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
}

/// The claims of a JWT, unchecked.
fn jwt_claims(token: &str) -> serde_json::Value {
    use base64::Engine;
    let part = token
        .split('.')
        .nth(1)
        .unwrap_or_else(|| panic!("not a JWT: {token}"));
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn without_mount_namespaces_a_pod_with_mounts_is_a_config_error() {
    let s = server_with(false).await;
    let mnt = tempfile::tempdir().unwrap();
    let mut p = pod("needs-mounts", "Never", "true");
    p["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    p["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "scratch", "mountPath": path(mnt.path())}]);
    s.post(PODS, p).await;
    let p = pod_until(&s, "needs-mounts", "a config error", |p| {
        waiting(p, 0)["reason"] == "CreateContainerConfigError"
    })
    .await;
    let message = waiting(&p, 0)["message"].as_str().unwrap();
    assert!(
        message.contains(path(mnt.path())) && message.contains("berth to run as root"),
        "{message}"
    );
    assert_eq!(p["status"]["phase"], "Pending");

    // A pod without mounts runs, without the service-account token.
    s.post(
        PODS,
        pod(
            "plain",
            "Never",
            &format!("test -e {SA_DIR}/token && echo mounted || echo absent"),
        ),
    )
    .await;
    pod_until(&s, "plain", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(log(&s, "plain", "c").await, "absent\n");
    for name in ["needs-mounts", "plain"] {
        crate::node::delete_pod(&s, name).await;
    }
}

/// Acceptance scenario 3: fails twice, then succeeds (restarted at once, then after 10 s).
#[tokio::test]
async fn on_failure_restarts_until_success_with_a_counter_in_an_empty_dir() {
    let s = server().await;
    let mnt = tempfile::tempdir().unwrap();
    let m = path(mnt.path());
    let script = format!(
        "n=$(cat {m}/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > {m}/count; \
         echo run $n; [ $n -ge 3 ]"
    );
    let mut p = pod("counter", "OnFailure", &script);
    p["spec"]["volumes"] = json!([{"name": "state", "emptyDir": {}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "state", "mountPath": m}]);
    s.post(PODS, p).await;
    let seen = std::sync::Mutex::new(Vec::<(String, String, i64)>::new());
    let done = eventually(90, "Succeeded after two restarts", || async {
        let (_, p) = s.get(&format!("{PODS}/counter")).await;
        let phase = p["status"]["phase"].as_str().unwrap_or("").to_string();
        let c = &p["status"]["containerStatuses"][0];
        let reason = c["state"]["waiting"]["reason"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let restarts = c["restartCount"].as_i64().unwrap_or(-1);
        seen.lock().unwrap().push((phase.clone(), reason, restarts));
        if phase == "Succeeded" {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let c = &done["status"]["containerStatuses"][0];
    assert_eq!(c["restartCount"], 2, "{c}");
    assert_eq!(c["state"]["terminated"]["exitCode"], 0, "{c}");
    assert_ne!(c["lastState"]["terminated"]["exitCode"], 0, "{c}");
    assert!(c["lastState"]["terminated"]["exitCode"].is_i64(), "{c}");
    let seen = seen.into_inner().unwrap();
    // The first restart is immediate, the second waits 10 s (§6): that wait was seen,
    // with the pod Running.
    assert!(
        seen.iter()
            .any(|(ph, r, n)| ph == "Running" && r == "CrashLoopBackOff" && *n == 1),
        "{seen:?}"
    );
    // Once it ran, the pod never left Running before it succeeded.
    let first_run = seen.iter().position(|(ph, _, _)| ph == "Running").unwrap();
    assert!(
        seen[first_run..]
            .iter()
            .all(|(ph, _, _)| ph == "Running" || ph == "Succeeded"),
        "{seen:?}"
    );
    assert_eq!(log(&s, "counter", "c").await, "run 3\n");
    crate::node::delete_pod(&s, "counter").await;
}
