//! The `oci` runtime end to end: images built here from busybox-static (nothing is
//! pulled) are imported into the node's store, and pods run from them through runc, each
//! container in its image's root filesystem. These tests need root and runc (`.ci/run`
//! installs runc and busybox-static); without root they say so and pass.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::node::{PODS, delete_pod, node_settings};
use crate::support::{TestServer, eventually};

pub(crate) fn digest(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

/// One entry of an image layer.
pub(crate) enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
    Link(&'a str, &'a str),
}

pub(crate) fn layer(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        match e {
            Entry::Dir(path) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Entry::File(path, data, mode) => {
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, *data).unwrap();
            }
            Entry::Link(path, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, path, target).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

pub(crate) fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// An OCI archive of the image `name` made of `layers` (uncompressed tars, lowest first)
/// whose config's `config` is `config`.
pub(crate) fn archive(name: &str, layers: &[Vec<u8>], config: Value) -> Vec<u8> {
    let mut files = Vec::new();
    let manifest = image_blobs(&mut files, arch(), layers, config);
    layout_archive(files, name, manifest)
}

/// Puts one image's blobs (gzipped `layers`, its config with `config`, its manifest) into
/// `files`; returns the manifest's descriptor, with its platform.
pub(crate) fn image_blobs(
    files: &mut Vec<(String, Vec<u8>)>,
    arch: &str,
    layers: &[Vec<u8>],
    config: Value,
) -> Value {
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let mut descs = Vec::new();
    for tar in layers {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(tar).unwrap();
        let bytes = gz.finish().unwrap();
        descs.push(
            json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": digest(&bytes), "size": bytes.len()}),
        );
        files.push((blob(&digest(&bytes)), bytes));
    }
    let diff_ids: Vec<String> = layers.iter().map(|t| digest(t)).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": arch, "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    files.push((blob(&digest(&config)), config.clone()));
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(&config), "size": config.len()},
        "layers": descs,
    }))
    .unwrap();
    files.push((blob(&digest(&manifest)), manifest.clone()));
    json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": digest(&manifest), "size": manifest.len(),
        "platform": {"architecture": arch, "os": "linux"}})
}

/// The OCI layout of `files` as a tar, its index naming `top` (a manifest's or a nested
/// index's descriptor) `name`.
pub(crate) fn layout_archive(
    mut files: Vec<(String, Vec<u8>)>,
    name: &str,
    mut top: Value,
) -> Vec<u8> {
    top["annotations"] = json!({"org.opencontainers.image.ref.name": name});
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [top],
    }))
    .unwrap();
    files.push(("index.json".into(), index));
    files.push((
        "oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in &files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

/// The applets the tests' images carry, as links to busybox.
const APPLETS: [&str; 17] = [
    "sh", "cat", "echo", "hostname", "id", "ls", "ps", "sleep", "test", "touch", "wc", "grep",
    "tr", "readlink", "head", "stty", "httpd",
];

/// An image of busybox-static: a base layer with busybox, its applets, `/etc/passwd`
/// and `/etc/group`; a second layer with `/etc/image-release`; the config `config`.
pub(crate) fn busybox_image(name: &str, config: Value) -> Vec<u8> {
    let top = vec![Entry::File(
        "etc/image-release",
        b"berth test image 1\n",
        0o644,
    )];
    archive(name, &[busybox_base(), layer(&top)], config)
}

/// The base layer of the tests' images (uncompressed): busybox, its applets,
/// `/etc/passwd` and `/etc/group`.
pub(crate) fn busybox_base() -> Vec<u8> {
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed");
    let links: Vec<(String, String)> = APPLETS
        .iter()
        .map(|a| (format!("bin/{a}"), "busybox".to_string()))
        .collect();
    let mut base = vec![
        Entry::Dir("bin/"),
        Entry::Dir("etc/"),
        Entry::Dir("tmp/"),
        Entry::File("bin/busybox", &busybox, 0o755),
        Entry::File(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n",
            0o644,
        ),
        Entry::File(
            "etc/group",
            b"root:x:0:\napp:x:1000:\nwheel:x:10:app\n",
            0o644,
        ),
    ];
    for (path, target) in &links {
        base.push(Entry::Link(path, target));
    }
    layer(&base)
}

pub(crate) fn import(data: &Path, name: &str, archive: &[u8]) {
    let file = data.join(format!("{}.tar", name.replace(['/', ':'], "_")));
    std::fs::write(&file, archive).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["image", "import"])
        .arg(&file)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server whose node runs pods with the oci runtime, or none when this is not root.
async fn server() -> Option<TestServer> {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: the oci runtime needs root");
        return None;
    }
    let s = TestServer::start_with(|c| {
        c.node = Some(node_settings(crate::node::NODE, |n| {
            n.runtime = berth::app::DefaultRuntime::Oci;
        }))
    })
    .await;
    Some(s)
}

pub(crate) async fn logs(s: &TestServer, pod: &str, container: &str) -> String {
    let r = s
        .req(
            reqwest::Method::GET,
            &format!("{PODS}/{pod}/log?container={container}"),
        )
        .send()
        .await
        .unwrap();
    r.text().await.unwrap()
}

pub(crate) async fn wait_logs(s: &TestServer, pod: &str, container: &str, want: &str) -> String {
    eventually(60, &format!("{pod}/{container} says {want:?}"), || async {
        let got = logs(s, pod, container).await;
        match got.contains(want) {
            true => Ok(()),
            false => Err(got),
        }
    })
    .await;
    logs(s, pod, container).await
}

/// Mounts below the data directory that this machine still has.
fn mounts_below(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&dir)))
        .map(str::to_string)
        .collect()
}

/// The cgroups of pod `uid` in any hierarchy of this machine (runc makes a container's
/// path in every one, berth's memory and cpu ones and the others).
fn cgroups_of_pod(uid: &Value) -> Vec<String> {
    let name = format!("pod{}", uid.as_str().unwrap());
    let mut found = Vec::new();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        if !after.starts_with("cgroup") {
            continue;
        }
        let Some(mount) = before.split(' ').nth(4) else {
            continue;
        };
        let mut stack = vec![Path::new(mount).join("berth")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    match e.file_name().to_str() == Some(name.as_str()) {
                        true => found.push(e.path().display().to_string()),
                        false => stack.push(e.path()),
                    }
                }
            }
        }
    }
    found
}

#[tokio::test]
async fn a_pod_of_an_image_runs_in_the_images_files_as_the_image_says() {
    let Some(s) = server().await else { return };
    let script = "echo started; hostname; cat /etc/image-release; \
        if test -e /usr/bin/cargo; then echo host-visible; else echo host-hidden; fi; \
        echo dir=$(pwd) greeting=$GREETING; echo pid=$$ procs=$(ls /proc | grep -c '^[0-9]'); \
        exec sleep 3600";
    import(
        s.dir.path(),
        "example.com/tools:1",
        &busybox_image(
            "example.com/tools:1",
            json!({"Entrypoint": ["/bin/sh", "-c"], "Cmd": [script],
                "Env": ["PATH=/bin", "GREETING=from-image"], "WorkingDir": "/tmp"}),
        ),
    );
    let pod = json!({
        "metadata": {"name": "from-image"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "securityContext": {"supplementalGroups": [5]},
            "containers": [
                // No command: the image's entrypoint and cmd.
                // Ready only when its exec probe reads the image's file.
                {"name": "main", "image": "example.com/tools:1",
                 "readinessProbe": {"exec": {"command": ["cat", "/etc/image-release"]},
                    "periodSeconds": 1}},
                // A command of the pod's, a user of the image's by number, and an
                // environment variable over the image's.
                {"name": "user", "image": "example.com/tools:1",
                 "command": ["sh", "-c", "echo user=$(id -u):$(id -g) groups=$(id -G) greeting=$GREETING; exec sleep 3600"],
                 "env": [{"name": "GREETING", "value": "from-pod"}],
                 "securityContext": {"runAsUser": 1000}},
                // On a terminal of its own (`kubectl run -it`).
                {"name": "term", "image": "example.com/tools:1", "tty": true, "stdin": true,
                 "command": ["sh", "-c", "test -t 0 && test -t 1 && echo main-on-a-tty; exec sleep 3600"]},
            ],
        },
    });
    let (code, p) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{p}");
    let said = wait_logs(&s, "from-image", "main", "procs=").await;
    assert!(said.contains("started\nfrom-image\n"), "{said}");
    assert!(said.contains("berth test image 1"), "{said}");
    assert!(said.contains("host-hidden"), "{said}");
    assert!(said.contains("dir=/tmp greeting=from-image"), "{said}");
    // Its own PID namespace: the shell is its first process, and it sees only itself and
    // what it started to count (this machine has more).
    let procs: u32 = said
        .split("pid=1 procs=")
        .nth(1)
        .and_then(|r| r.lines().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(procs <= 4, "{said}");
    wait_logs(&s, "from-image", "term", "main-on-a-tty").await;
    let said = wait_logs(&s, "from-image", "user", "user=").await;
    assert!(
        said.contains("user=1000:1000 groups=1000 5 10 greeting=from-pod"),
        "{said}"
    );
    eventually(30, "the pod runs, ready", || async {
        let (_, p) = s.get(&format!("{PODS}/from-image")).await;
        let ready = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        match p["status"]["phase"] == "Running" && ready {
            true => Ok(()),
            false => Err(p["status"].to_string()),
        }
    })
    .await;
    // A command run in the container (`kubectl exec`) runs in all of it: its files, its
    // host name, its PID namespace, its user.
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("command", "sh")
        .append_pair("command", "-c")
        .append_pair(
            "command",
            "hostname; cat /etc/image-release; echo pid1=$(cat /proc/1/comm); id -u",
        )
        .append_pair("container", "user")
        .append_pair("stdout", "true")
        .append_pair("stderr", "true")
        .finish();
    let mut c = crate::exec::Client::connect(
        &s,
        &format!("{PODS}/from-image/exec?{query}"),
        "v4.channel.k8s.io",
    )
    .await;
    let status = c.finish().await;
    let out = c.out();
    assert_eq!(
        out,
        "from-image\nberth test image 1\npid1=sleep\n1000\n",
        "{}",
        String::from_utf8_lossy(&status)
    );
    // On a terminal (`kubectl exec -t`).
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("command", "sh")
        .append_pair("command", "-c")
        .append_pair("command", "test -t 0 && test -t 1 && echo on-a-tty")
        .append_pair("container", "main")
        .append_pair("stdin", "true")
        .append_pair("stdout", "true")
        .append_pair("tty", "true")
        .finish();
    let mut c = crate::exec::Client::connect(
        &s,
        &format!("{PODS}/from-image/exec?{query}"),
        "v4.channel.k8s.io",
    )
    .await;
    let status = c.finish().await;
    assert!(
        c.out().contains("on-a-tty"),
        "{} {}",
        c.out(),
        String::from_utf8_lossy(&status)
    );
    delete_pod(&s, "from-image").await;
    let left = cgroups_of_pod(&p["metadata"]["uid"]);
    assert!(left.is_empty(), "{left:?}");
    // Nothing of the containers stays: no mount, no state of runc's.
    let left = mounts_below(s.dir.path());
    assert!(left.is_empty(), "{left:?}");
    let runc_state: Vec<_> = std::fs::read_dir(s.dir.path().join("runc"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(runc_state.is_empty(), "{runc_state:?}");
    s.stop().await;
}

/// The waiting reason of a pod's first container, once it is `reason`.
async fn waits_in(s: &TestServer, pod: &str, reason: &str) -> Value {
    eventually(60, &format!("{pod} waits in {reason}"), || async {
        let (_, p) = s.get(&format!("{PODS}/{pod}")).await;
        let waiting = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        match waiting["reason"] == reason {
            true => Ok(waiting),
            false => Err(p["status"].to_string()),
        }
    })
    .await
}

#[tokio::test]
async fn a_pod_of_an_image_that_cannot_be_had_waits_and_is_taken_once_imported() {
    let Some(s) = server().await else { return };
    let pod = |name: &str, policy: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 2, "containers": [{"name": "main",
                "image": "127.0.0.1:9/late:1", "imagePullPolicy": policy,
                "command": ["sleep", "3600"]}]},
        })
    };
    for (name, policy) in [("missing", "IfNotPresent"), ("never", "Never")] {
        let (code, p) = s.post(PODS, pod(name, policy)).await;
        assert_eq!(code, 201, "{p}");
    }
    // Nothing answers on the registry's port (discard, on loopback).
    let w = waits_in(&s, "missing", "ErrImagePull").await;
    assert!(
        w["message"].as_str().is_some_and(|m| m
            .starts_with("Failed to pull image \"127.0.0.1:9/late:1\": https://127.0.0.1:9: ")
            && m.contains("; http://127.0.0.1:9: ")),
        "{w}"
    );
    // As the kubelet's events: the pull, its error, then the reason.
    eventually(30, "the pull's events", || async {
        let events = s.events_of("missing").await;
        let has = |reason: &str, m: &dyn Fn(&str) -> bool| {
            events.iter().any(|(r, msg)| r == reason && m(msg))
        };
        let all = has("Pulling", &|_| true)
            && has("Failed", &|m| m.starts_with("Failed to pull image "))
            && has("Failed", &|m| m == "Error: ErrImagePull");
        match all {
            true => Ok(()),
            false => Err(format!("{events:?}")),
        }
    })
    .await;
    let w = waits_in(&s, "never", "ErrImageNeverPull").await;
    assert!(
        w["message"]
            .as_str()
            .is_some_and(|m| m.contains("is not present with pull policy of Never")),
        "{w}"
    );
    // Tried again, it backs off; imported meanwhile, it runs.
    let w = waits_in(&s, "missing", "ImagePullBackOff").await;
    assert_eq!(
        w["message"],
        "Back-off pulling image \"127.0.0.1:9/late:1\""
    );
    import(
        s.dir.path(),
        "127.0.0.1:9/late:1",
        &busybox_image("127.0.0.1:9/late:1", json!({"Env": ["PATH=/bin"]})),
    );
    crate::node::pod_until(&s, "missing", "the pod runs once imported", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    delete_pod(&s, "missing").await;
    delete_pod(&s, "never").await;
    s.stop().await;
}

/// A container's security context, checked from inside it: capabilities, no_new_privs,
/// seccomp, a read-only root filesystem, masked /proc paths and privileged mode.
#[tokio::test]
async fn the_security_context_holds_inside_the_container() {
    let Some(s) = server().await else { return };
    s.allow_privileged("default").await;
    import(
        s.dir.path(),
        "example.com/tools:2",
        &busybox_image("example.com/tools:2", json!({"Env": ["PATH=/bin"]})),
    );
    // A device of this machine's that runc gives no container of its own accord.
    let defaults = [
        "null", "zero", "full", "random", "urandom", "tty", "ptmx", "console",
    ];
    let device = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .filter(|e| {
            use std::os::unix::fs::FileTypeExt;
            e.file_type().is_ok_and(|t| t.is_char_device())
        })
        .filter_map(|e| e.file_name().into_string().ok())
        .find(|n| !defaults.contains(&n.as_str()) && !n.starts_with("tty"))
        .expect("a character device");
    let report = format!(
        "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \\t' | tr '\\n' ' '; \
        if test -e /dev/{device}; then echo device=yes; else echo device=no; fi; \
        echo timer_list=$(cat /proc/timer_list | wc -c); \
        if touch /written 2>/dev/null; then echo root=rw; else echo root=ro; fi; \
        echo done; exec sleep 3600"
    );
    let container = |name: &str, sc: Value| {
        json!({"name": name, "image": "example.com/tools:2",
            "command": ["sh", "-c", report], "securityContext": sc})
    };
    let pod = json!({
        "metadata": {"name": "secured"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                container("plain", json!({})),
                container("hardened", json!({
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "seccompProfile": {"type": "RuntimeDefault"},
                })),
                container("privileged", json!({"privileged": true})),
            ],
        },
    });
    let (code, p) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{p}");
    // containerd's default set; no no_new_privs, no filter; /proc's timer list masked.
    let said = wait_logs(&s, "secured", "plain", "done").await;
    assert!(
        said.contains("CapEff:00000000a80425fb NoNewPrivs:0 Seccomp:0"),
        "{said}"
    );
    assert!(said.contains("device=no\ntimer_list=0\nroot=rw"), "{said}");
    let said = wait_logs(&s, "secured", "hardened", "done").await;
    assert!(
        said.contains("CapEff:0000000000000400 NoNewPrivs:1 Seccomp:2"),
        "{said}"
    );
    assert!(said.contains("root=ro"), "{said}");
    // Privileged: every capability berth has itself.
    let bounding = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:").map(|h| h.trim().to_string()))
        .unwrap();
    let said = wait_logs(&s, "secured", "privileged", "done").await;
    assert!(said.contains(&format!("CapEff:{bounding} ")), "{said}");
    assert!(said.contains("NoNewPrivs:0 Seccomp:0"), "{said}");
    assert!(!said.contains("timer_list=0\n"), "{said}");
    assert!(said.contains("device=yes"), "{said}");
    delete_pod(&s, "secured").await;
    let left = mounts_below(s.dir.path());
    assert!(left.is_empty(), "{left:?}");
    s.stop().await;
}

/// What a container says of its namespaces, as `key=value` words.
fn words(said: &str) -> std::collections::HashMap<String, String> {
    said.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A pod is a sandbox: its containers share the IPC and UTS namespaces its pause holds,
/// and the PID namespace with shareProcessNamespace (the pause is their first process);
/// hostNetwork, hostIPC and hostPID keep this machine's.
#[tokio::test]
async fn a_pods_containers_share_its_sandbox_and_the_host_only_when_asked() {
    let Some(s) = server().await else { return };
    s.allow_privileged("default").await;
    import(
        s.dir.path(),
        "example.com/tools:3",
        &busybox_image("example.com/tools:3", json!({"Env": ["PATH=/bin"]})),
    );
    let report = "echo ipc=$(readlink /proc/self/ns/ipc) pid=$(readlink /proc/self/ns/pid) \
        uts=$(hostname) init=$(cat /proc/1/comm) end=1; exec sleep 3600";
    let container = |name: &str| json!({"name": name, "image": "example.com/tools:3", "command": ["sh", "-c", report]});
    let pod = |name: &str, extra: Value| {
        let mut p = json!({
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 2,
                "containers": [container("a"), container("b")]},
        });
        for (k, v) in extra.as_object().unwrap() {
            p["spec"][k] = v.clone();
        }
        p
    };
    let host = |ns: &str| {
        std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .unwrap()
            .display()
            .to_string()
    };
    for p in [
        pod("sharing", json!({"shareProcessNamespace": true})),
        pod("apart", json!({})),
        pod(
            "hosty",
            json!({"hostNetwork": true, "hostIPC": true, "hostPID": true}),
        ),
    ] {
        let (code, p) = s.post(PODS, p).await;
        assert_eq!(code, 201, "{p}");
    }
    let a = words(&wait_logs(&s, "sharing", "a", "end=1").await);
    let b = words(&wait_logs(&s, "sharing", "b", "end=1").await);
    assert_eq!(
        (a["ipc"].as_str(), a["uts"].as_str()),
        (b["ipc"].as_str(), "sharing")
    );
    assert_ne!(a["ipc"], host("ipc"));
    assert_eq!(a["pid"], b["pid"], "{a:?} {b:?}");
    assert_ne!(a["pid"], host("pid"));
    assert_eq!(
        a["init"], "berth",
        "the pod's pause is the first process: {a:?}"
    );
    // Without shareProcessNamespace: IPC shared, each container its own PID namespace.
    let a = words(&wait_logs(&s, "apart", "a", "end=1").await);
    let b = words(&wait_logs(&s, "apart", "b", "end=1").await);
    assert_eq!(a["ipc"], b["ipc"]);
    assert_ne!(a["pid"], b["pid"]);
    assert_eq!((a["init"].as_str(), a["uts"].as_str()), ("sh", "apart"));
    // This machine's namespaces and host name, when asked.
    let h = words(&wait_logs(&s, "hosty", "a", "end=1").await);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(h["uts"], hostname.trim());
    assert_eq!(h["ipc"], host("ipc"));
    assert_eq!(h["pid"], host("pid"));
    for name in ["sharing", "apart", "hosty"] {
        delete_pod(&s, name).await;
    }
    let left = mounts_below(s.dir.path());
    assert!(left.is_empty(), "{left:?}");
    s.stop().await;
}

/// Both runtimes on one node: the node's RuntimeClasses name both, and a pod of the
/// `process` class runs its command on this machine, image or none.
#[tokio::test]
async fn a_pod_of_the_process_class_runs_its_command_on_this_machine() {
    let Some(s) = server().await else { return };
    eventually(30, "the node's RuntimeClasses", || async {
        let (_, list) = s.get("/apis/node.k8s.io/v1/runtimeclasses").await;
        let mut names: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["handler"].as_str().map(str::to_string))
            .collect();
        names.sort();
        match names == ["oci", "process"] {
            true => Ok(()),
            false => Err(list.to_string()),
        }
    })
    .await;
    let marker = s.dir.path().join("made-on-this-machine");
    let pod = json!({
        "metadata": {"name": "on-host"},
        "spec": {
            "runtimeClassName": "process",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "example.com/absent:1",
                "command": ["sh", "-c", format!("touch {}", marker.display())]}],
        },
    });
    let (code, p) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{p}");
    eventually(30, "the pod succeeds", || async {
        let (_, p) = s.get(&format!("{PODS}/on-host")).await;
        match p["status"]["phase"] == "Succeeded" {
            true => Ok(()),
            false => Err(p["status"].to_string()),
        }
    })
    .await;
    assert!(marker.exists());
    delete_pod(&s, "on-host").await;
    s.stop().await;
}

/// The node's behaviours, for containers of images: volumes (a ConfigMap read-only, a
/// hostPath), restarts with CrashLoopBackOff and the previous instance's log, preStop on
/// deletion, and a memory limit that ends in OOMKilled.
#[tokio::test]
async fn restarts_volumes_hooks_and_limits_hold_for_containers_of_images() {
    let Some(s) = server().await else { return };
    s.allow_privileged("default").await;
    import(
        s.dir.path(),
        "example.com/tools:4",
        &busybox_image("example.com/tools:4", json!({"Env": ["PATH=/bin"]})),
    );
    let (code, cm) = s
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "settings"}, "data": {"mode": "fast"}}),
        )
        .await;
    assert_eq!(code, 201, "{cm}");
    let host = tempfile::tempdir().unwrap();
    let pod = json!({
        "metadata": {"name": "lives"},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "volumes": [
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "out", "hostPath": {"path": host.path()}},
            ],
            "containers": [
                {"name": "crash", "image": "example.com/tools:4",
                 "command": ["sh", "-c", "echo run; exit 3"]},
                {"name": "reader", "image": "example.com/tools:4",
                 "command": ["sh", "-c", "cat /etc/settings/mode; \
                    if touch /etc/settings/y 2>/dev/null; then echo cm=rw; else echo cm=ro; fi; \
                    echo ok; exec sleep 3600"],
                 "volumeMounts": [
                    {"name": "settings", "mountPath": "/etc/settings", "readOnly": true},
                    {"name": "out", "mountPath": "/out"}],
                 "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo pre > /out/pre"]}}}},
            ],
        },
    });
    let (code, p) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{p}");
    let said = wait_logs(&s, "lives", "reader", "ok").await;
    assert!(said.contains("fastcm=ro\nok"), "{said}");
    eventually(60, "the crashing container backs off", || async {
        let (_, p) = s.get(&format!("{PODS}/lives")).await;
        let crash = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "crash")
            .cloned()
            .unwrap_or_default();
        let backing_off = crash["state"]["waiting"]["reason"] == "CrashLoopBackOff";
        let exited = crash["lastState"]["terminated"]["exitCode"] == 3;
        match backing_off && exited && crash["restartCount"].as_u64() >= Some(1) {
            true => Ok(()),
            false => Err(crash.to_string()),
        }
    })
    .await;
    let r = s
        .req(
            reqwest::Method::GET,
            &format!("{PODS}/lives/log?container=crash&previous=true"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "run\n");
    delete_pod(&s, "lives").await;
    assert_eq!(
        std::fs::read_to_string(host.path().join("pre")).unwrap(),
        "pre\n",
        "preStop ran inside the container before it was stopped"
    );
    // A memory limit, enforced through the container's cgroups.
    let hog = json!({
        "metadata": {"name": "hog"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "example.com/tools:4",
                "command": ["sh", "-c", "head -c 200m /dev/zero | tail"],
                "resources": {"limits": {"memory": "32Mi"}}}],
        },
    });
    let (code, p) = s.post(PODS, hog).await;
    assert_eq!(code, 201, "{p}");
    eventually(60, "the hog is OOMKilled", || async {
        let (_, p) = s.get(&format!("{PODS}/hog")).await;
        let t = p["status"]["containerStatuses"][0]["state"]["terminated"].clone();
        match p["status"]["phase"] == "Failed" {
            true => Ok(()),
            false => Err(t.to_string()),
        }
    })
    .await;
    let (_, p) = s.get(&format!("{PODS}/hog")).await;
    let last = p["status"]["containerStatuses"][0]["state"]["terminated"].clone();
    assert_eq!(
        (last["reason"].as_str(), last["exitCode"].as_i64()),
        (Some("OOMKilled"), Some(137)),
        "{last}"
    );
    // A finished pod's sandbox goes at once, not when the pod is deleted.
    eventually(30, "the finished pod's sandbox stops", || async {
        match crate::node::processes_with("--sandbox hog ") {
            0 => Ok(()),
            n => Err(format!("{n} running")),
        }
    })
    .await;
    delete_pod(&s, "hog").await;
    let left = mounts_below(s.dir.path());
    assert!(left.is_empty(), "{left:?}");
    s.stop().await;
}

/// Processes whose command line is `argv` (space-separated): a container's process, in
/// a PID namespace of its own, is no child of a shim's as the process runtime's are.
fn running(argv: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).replace('\0', " ").trim_end() == argv)
        .count()
}

/// A berth restarted while containers of images run adopts them: the same container,
/// nothing started twice, and stopped when its pod is deleted.
#[tokio::test]
async fn a_restarted_berth_adopts_containers_of_images() {
    let Some(s) = server().await else { return };
    import(
        s.dir.path(),
        "example.com/tools:5",
        &busybox_image("example.com/tools:5", json!({"Env": ["PATH=/bin"]})),
    );
    let pod = json!({
        "metadata": {"name": "steady"},
        "spec": {"terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "example.com/tools:5",
                "command": ["sleep", "7401"]}]},
    });
    let before = crate::node::run_pod(&s, pod).await;
    let status = |p: &Value| p["status"]["containerStatuses"][0].clone();
    let id = status(&before)["containerID"].clone();
    let started = status(&before)["state"]["running"]["startedAt"].clone();
    // (Running once runc runs: its container's process follows at once.)
    eventually(10, "the container's process runs", || async {
        match running("sleep 7401") {
            1 => Ok(()),
            n => Err(format!("{n}")),
        }
    })
    .await;
    let dir = s.stop().await;
    // berth is down; the container is not.
    assert_eq!(running("sleep 7401"), 1);
    let s = TestServer::start_in(dir, |c| {
        c.node = Some(node_settings(crate::node::NODE, |n| {
            n.runtime = berth::app::DefaultRuntime::Oci;
        }))
    })
    .await;
    s.patch(
        &format!("{PODS}/steady"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"after": "restart"}}}),
    )
    .await;
    let after = crate::node::pod_until(&s, "steady", "the same container, adopted", |p| {
        p["metadata"]["labels"]["after"] == "restart" && status(p)["containerID"] == id
    })
    .await;
    assert_eq!(status(&after)["restartCount"], 0);
    assert_eq!(status(&after)["state"]["running"]["startedAt"], started);
    assert_eq!(running("sleep 7401"), 1, "nothing runs twice");
    delete_pod(&s, "steady").await;
    assert_eq!(running("sleep 7401"), 0);
    let left = mounts_below(s.dir.path());
    assert!(left.is_empty(), "{left:?}");
    s.stop().await;
}

/// A free port on loopback (the containers keep the host's network until pods get their own).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What the process runtime is tested for, for containers of images: probes of each kind
/// reach into the container (an exec probe reads the image's files, httpGet and tcpSocket
/// reach its server), a `subPath` mount of one key, `kubectl attach` to a shell on a
/// terminal, and `kubectl logs -f` following a container as it writes.
#[tokio::test]
async fn containers_of_images_are_probed_attached_to_and_followed() {
    let Some(s) = server().await else { return };
    import(
        s.dir.path(),
        "example.com/tools:6",
        &busybox_image("example.com/tools:6", json!({"Env": ["PATH=/bin"]})),
    );
    let (code, cm) = s
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "site"},
                "data": {"index.html": "hello from a key\n", "other": "not mounted"}}),
        )
        .await;
    assert_eq!(code, 201, "{cm}");
    let port = free_port();
    let pod = json!({
        "metadata": {"name": "served"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "volumes": [{"name": "site", "configMap": {"name": "site"}}],
            "containers": [
                {"name": "web", "image": "example.com/tools:6",
                 "command": ["httpd", "-f", "-p", port.to_string(), "-h", "/www"],
                 "volumeMounts": [{"name": "site", "mountPath": "/www/index.html",
                    "subPath": "index.html"}],
                 // Only the image has /etc/image-release; the host has no /www.
                 "startupProbe": {"exec": {"command": ["sh", "-c",
                    "test -f /etc/image-release && ls /www"]}, "periodSeconds": 1},
                 "readinessProbe": {"httpGet": {"path": "/index.html", "port": port},
                    "periodSeconds": 1},
                 "livenessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}},
                {"name": "shell", "image": "example.com/tools:6", "command": ["sh"],
                 "stdin": true, "tty": true},
                {"name": "ticker", "image": "example.com/tools:6",
                 "command": ["sh", "-c",
                    "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.2; done"]},
            ],
        },
    });
    let (code, p) = s.post(PODS, pod).await;
    assert_eq!(code, 201, "{p}");
    let ready = crate::node::pod_until(&s, "served", "every container ready", |p| {
        p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|c| c.len() == 3 && c.iter().all(|c| c["ready"] == true))
    })
    .await;
    let web = ready["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "web")
        .unwrap()
        .clone();
    assert_eq!(web["restartCount"], 0, "{web}");
    assert_eq!(web["started"], true, "{web}");
    // The key, and only it, is the file the server serves.
    let page = crate::support::https_client(&s.ca_pem)
        .get(format!("http://127.0.0.1:{port}/index.html"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(page, "hello from a key\n");
    // Attach to the shell's terminal: it runs in the image, at the size asked for.
    let mut c = crate::exec::Client::connect(
        &s,
        &format!("{PODS}/served/attach?container=shell&stdin=true&stdout=true&tty=true"),
        "v5.channel.k8s.io",
    )
    .await;
    c.resize(61, 19).await;
    c.send(0, b"stty size; hostname; cat /etc/image-release\n")
        .await;
    c.until_out("berth test image 1").await;
    let out = c.out();
    assert!(out.contains("19 61") && out.contains("served"), "{out}");
    drop(c);
    // Follow the ticker: ticks written after the request arrive on it.
    let mut r = s
        .req(
            reqwest::Method::GET,
            &format!("{PODS}/served/log?container=ticker&follow=true"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let first = String::from_utf8(r.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    let last = |text: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix("tick-")?.parse::<u64>().ok())
            .max()
    };
    let seen = last(&first).expect("ticks");
    let mut text = first;
    while last(&text) < Some(seen + 5) {
        let chunk = crate::support::within(20, r.chunk()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream stays open"),
        ));
    }
    drop(r);
    delete_pod(&s, "served").await;
    let left = cgroups_of_pod(&p["metadata"]["uid"]);
    assert!(left.is_empty(), "{left:?}");
    let left = mounts_below(s.dir.path());
    assert!(left.is_empty(), "{left:?}");
    s.stop().await;
}

/// Image garbage collection past its high threshold (here: 1 %, so any disk is past it):
/// the images no pod uses go, the one a pod runs stays, and since the disk cannot get
/// down to the low threshold (0 %) the Node gets an `ImageGCFailed` event.
#[tokio::test]
async fn image_garbage_collection_removes_unused_images_and_says_when_it_falls_short() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: the oci runtime needs root");
        return;
    }
    let s = TestServer::start_with(|c| {
        c.node = Some(node_settings(crate::node::NODE, |n| {
            n.runtime = berth::app::DefaultRuntime::Oci;
            n.agent.image_gc = berth::node::GcThresholds { high: 1, low: 0 };
            n.agent.image_gc_every = std::time::Duration::from_millis(300);
            // Long enough for the pod below to be on the node before its image may go.
            n.agent.image_gc_min_age = std::time::Duration::from_secs(5);
        }))
    })
    .await;
    for name in ["example.com/used:1", "example.com/unused:1"] {
        import(
            s.dir.path(),
            name,
            &busybox_image(name, json!({"Env": ["PATH=/bin"]})),
        );
    }
    let pod = json!({"metadata": {"name": "user"}, "spec": {"terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "example.com/used:1", "command": ["sleep", "3600"]}]}});
    crate::node::run_pod(&s, pod).await;
    let store = berth::image::Store::at(&berth::image::store_dir(s.dir.path()));
    eventually(30, "the unused image is removed", || async {
        let names: Vec<String> = store.images().into_iter().map(|i| i.name).collect();
        match names == ["example.com/used:1"] {
            true => Ok(()),
            false => Err(format!("{names:?}")),
        }
    })
    .await;
    eventually(30, "the node is told it fell short", || async {
        let (_, list) = s
            .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DNode")
            .await;
        let found = list["items"].as_array().into_iter().flatten().any(|e| {
            e["reason"] == "ImageGCFailed"
                && e["type"] == "Warning"
                && e["message"].as_str().is_some_and(|m| {
                    m.starts_with(
                        "Failed to garbage collect required amount of images. Attempted to free ",
                    )
                })
        });
        match found {
            true => Ok(()),
            false => Err(list["items"].to_string()),
        }
    })
    .await;
    // What the running container needs is all still there.
    let used = store.image("example.com/used:1").unwrap();
    for l in &used.layers {
        assert!(store.layer_path(&l.diff_id).unwrap().exists());
    }
    delete_pod(&s, "user").await;
    s.stop().await;
}
