//! Pulls end to end: Debian's `docker-registry` (the reference registry) started here on
//! loopback, plain HTTP or with TLS (a CA made here) and basic auth; images built here
//! from busybox-static pushed to it with `skopeo`; pods of those images pulled by the
//! node and run by the `oci` runtime. Nothing leaves the machine. Without root,
//! docker-registry or skopeo the tests say so and pass.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::node::{PODS, delete_pod, node_settings};
use crate::oci::{
    Entry, arch, busybox_base, busybox_image, digest, free_port, image_blobs, layer,
    layout_archive, wait_logs,
};
use crate::support::{TestServer, eventually};

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn can_run() -> bool {
    let ok = rustix::process::geteuid().is_root()
        && have("docker-registry")
        && have("skopeo")
        && have("htpasswd");
    if !ok {
        eprintln!("skipped: pulls need root, docker-registry, skopeo and htpasswd");
    }
    ok
}

/// A docker-registry on a loopback port, stopped (by its PID) when dropped.
struct Registry {
    child: Child,
    host: String,
    dir: tempfile::TempDir,
    /// The CA (PEM file) of a TLS registry.
    ca: Option<PathBuf>,
    creds: Option<(String, String)>,
}

impl Registry {
    fn start(tls: bool, auth: bool) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
            dir.path().join("data").display()
        );
        let mut ca = None;
        if tls {
            let (ca_pem, ca_key) = berth::api::tls::ensure_ca(dir.path()).unwrap();
            let (cert, key) =
                berth::api::tls::serving_cert(&ca_key, &["127.0.0.1".to_string()]).unwrap();
            std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
            std::fs::write(dir.path().join("tls.key"), key).unwrap();
            let ca_file = dir.path().join("certs/ca.crt");
            std::fs::create_dir_all(ca_file.parent().unwrap()).unwrap();
            std::fs::write(&ca_file, ca_pem).unwrap();
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("tls.crt").display(),
                dir.path().join("tls.key").display()
            ));
            ca = Some(ca_file);
        }
        let mut creds = None;
        if auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", "puller", "s3cret"])
                .output()
                .unwrap();
            std::fs::write(dir.path().join("htpasswd"), out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: berth-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
            creds = Some(("puller".to_string(), "s3cret".to_string()));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log")).unwrap())
            .spawn()
            .unwrap();
        let r = Registry {
            child,
            host,
            dir,
            ca,
            creds,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(&r.host).is_ok() {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("the registry did not start: {}", r.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Pushes an archive of the tests' images as `repo:tag`.
    fn push(&self, archive: &[u8], name_in_archive: &str, repo_tag: &str, extra: &[&str]) {
        let file = self.dir.path().join("push.tar");
        std::fs::write(&file, archive).unwrap();
        let mut cmd = Command::new("skopeo");
        cmd.args(["copy", "--quiet", "--insecure-policy"])
            .args(extra);
        match &self.ca {
            Some(ca) => cmd.arg("--dest-cert-dir").arg(ca.parent().unwrap()),
            None => cmd.arg("--dest-tls-verify=false"),
        };
        if let Some((u, p)) = &self.creds {
            cmd.arg("--dest-creds").arg(format!("{u}:{p}"));
        }
        let out = cmd
            .arg(format!("oci-archive:{}:{name_in_archive}", file.display()))
            .arg(format!("docker://{}/{repo_tag}", self.host))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "skopeo copy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// How many times a blob was fetched whole (GET answered 200), by its request log.
    fn blob_gets(&self, digest: &str) -> usize {
        self.log()
            .lines()
            .filter(|l| {
                l.contains("msg=\"response completed\"")
                    && l.contains("http.request.method=GET")
                    && l.contains(&format!("/blobs/{digest}"))
                    && l.contains("http.response.status=200")
            })
            .count()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn server_with(registries: &str) -> TestServer {
    let r = berth::image::pull::Registries::parse(registries).unwrap();
    TestServer::start_with(|c| {
        c.node = Some(node_settings(crate::node::NODE, |n| {
            n.runtime = berth::app::DefaultRuntime::Oci;
            n.agent.registries = r;
        }))
    })
    .await
}

fn events(list: &Value, reason: &str) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The layers of the image the node stored under `image`.
fn stored_layers(s: &TestServer, image: &str) -> Vec<String> {
    let name = berth::image::reference::normalize(image).unwrap();
    berth::image::Store::at(&berth::image::store_dir(s.dir.path()))
        .image(&name)
        .map(|i| i.layers.into_iter().map(|l| l.digest).collect())
        .unwrap_or_default()
}

/// The image the node stored under `image`.
fn stored_image(s: &TestServer, image: &str) -> berth::image::Image {
    let name = berth::image::reference::normalize(image).unwrap();
    berth::image::Store::at(&berth::image::store_dir(s.dir.path()))
        .image(&name)
        .unwrap()
}

/// An OCI archive whose `name` is an index of one image per `(architecture, layers)`
/// (uncompressed tars, gzipped here), each with the config `{"Env": ["PATH=/bin"]}`.
fn index_archive(name: &str, images: &[(&str, Vec<Vec<u8>>)]) -> Vec<u8> {
    let mut files = Vec::new();
    let manifests: Vec<Value> = images
        .iter()
        .map(|(arch, layers)| image_blobs(&mut files, arch, layers, json!({"Env": ["PATH=/bin"]})))
        .collect();
    let inner = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }))
    .unwrap();
    files.push((
        format!(
            "blobs/sha256/{}",
            digest(&inner).trim_start_matches("sha256:")
        ),
        inner.clone(),
    ));
    let top = json!({"mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": digest(&inner), "size": inner.len()});
    layout_archive(files, name, top)
}

/// A one-file layer.
fn file_layer(path: &str, content: &[u8]) -> Vec<u8> {
    layer(&[Entry::Dir("etc/"), Entry::File(path, content, 0o644)])
}

/// A registry on loopback speaking plain HTTP needs no configuration; twenty pods of one
/// image share one pull; the events say what was pulled and how big it is.
#[tokio::test]
async fn pods_of_an_image_on_a_loopback_registry_share_one_pull() {
    if !can_run() {
        return;
    }
    let registry = Registry::start(false, false);
    let archive = busybox_image("example.com/pulled:1", json!({"Env": ["PATH=/bin"]}));
    // As Docker schema 2 (the layers gzip, as the archive has them).
    registry.push(
        &archive,
        "example.com/pulled:1",
        "tools:1",
        &["--format", "v2s2"],
    );
    let s = server_with("{}").await;
    let image = format!("{}/tools:1", registry.host);
    let (code, d) = s
        .post(
            "/apis/apps/v1/namespaces/default/deployments",
            json!({
                "metadata": {"name": "many"},
                "spec": {"replicas": 20, "selector": {"matchLabels": {"app": "many"}},
                    "template": {"metadata": {"labels": {"app": "many"}},
                        "spec": {"terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "main", "image": image,
                                "command": ["sleep", "3600"]}]}}},
            }),
        )
        .await;
    assert_eq!(code, 201, "{d}");
    eventually(120, "the deployment is available", || async {
        let (_, d) = s
            .get("/apis/apps/v1/namespaces/default/deployments/many")
            .await;
        match d["status"]["availableReplicas"] == 20 {
            true => Ok(()),
            false => Err(d["status"].to_string()),
        }
    })
    .await;
    let layers = stored_layers(&s, &image);
    assert_eq!(layers.len(), 2, "{layers:?}");
    let stored = stored_image(&s, &image);
    let manifest = berth::image::Store::at(&berth::image::store_dir(s.dir.path()))
        .read_blob(&stored.manifest)
        .unwrap();
    assert!(
        String::from_utf8_lossy(&manifest)
            .contains("application/vnd.docker.distribution.manifest.v2+json"),
        "{}",
        String::from_utf8_lossy(&manifest)
    );
    assert!(
        stored.layers.iter().all(|l| l.media_type.ends_with("gzip")),
        "{stored:?}"
    );
    for l in layers {
        assert_eq!(registry.blob_gets(&l), 1, "layer {l}: {}", registry.log());
    }
    let (_, list) = s.get("/api/v1/namespaces/default/events").await;
    let pulled = events(&list, "Pulled");
    assert!(
        pulled.iter().any(
            |m| m.starts_with(&format!("Successfully pulled image \"{image}\" in "))
                && m.contains(" including waiting). Image size: ")
        ),
        "{pulled:?}"
    );
    assert!(!events(&list, "Pulling").is_empty());
    let (code, _) = s
        .delete("/apis/apps/v1/namespaces/default/deployments/many")
        .await;
    assert_eq!(code, 200);
    eventually(60, "the pods are gone", || async {
        let (_, l) = s.get(PODS).await;
        match l["items"].as_array().map_or(0, Vec::len) {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
    s.stop().await;
}

/// A registry with TLS of its own CA and basic auth: the registries file gives the CA,
/// the pod's pull secret the credentials; without them the pod waits in ErrImagePull.
/// `berth image pull` takes the same path.
#[tokio::test]
async fn a_private_registry_is_pulled_from_with_its_ca_and_a_pull_secret() {
    if !can_run() {
        return;
    }
    let registry = Registry::start(true, true);
    let archive = busybox_image("example.com/private:1", json!({"Env": ["PATH=/bin"]}));
    registry.push(
        &archive,
        "example.com/private:1",
        "team/app:2",
        &["--dest-compress-format", "zstd"],
    );
    let ca = registry.ca.clone().unwrap();
    let file = format!(
        "configs:\n  \"{}\":\n    tls:\n      ca_file: {}\n",
        registry.host,
        ca.display()
    );
    let s = server_with(&file).await;
    let image = format!("{}/team/app:2", registry.host);
    let pod = |name: &str, secret: bool| {
        let mut spec = json!({"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}]});
        if secret {
            spec["imagePullSecrets"] = json!([{"name": "pull"}]);
        }
        json!({"metadata": {"name": name}, "spec": spec})
    };
    let (code, p) = s.post(PODS, pod("anonymous", false)).await;
    assert_eq!(code, 201, "{p}");
    let w = crate::node::pod_until(&s, "anonymous", "ErrImagePull", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    })
    .await;
    let message = w["status"]["containerStatuses"][0]["state"]["waiting"]["message"].to_string();
    assert!(message.contains("Not authorized"), "{message}");
    use base64::Engine;
    let config =
        json!({"auths": {registry.host.clone(): {"username": "puller", "password": "s3cret"}}});
    let (code, sec) = s
        .post(
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "pull"}, "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD
                    .encode(config.to_string())}}),
        )
        .await;
    assert_eq!(code, 201, "{sec}");
    let (code, p) = s.post(PODS, pod("private", true)).await;
    assert_eq!(code, 201, "{p}");
    crate::node::pod_until(&s, "private", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let stored = stored_image(&s, &image);
    assert!(
        stored.layers.iter().all(|l| l.media_type.ends_with("zstd")),
        "{stored:?}"
    );
    // A pod naming no pull secret gets its service account's (the image forgotten first,
    // so that it is pulled again).
    let (code, sa) = s
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "builder"}, "imagePullSecrets": [{"name": "pull"}]}),
        )
        .await;
    assert_eq!(code, 201, "{sa}");
    let name = berth::image::reference::normalize(&image).unwrap();
    berth::image::Store::at(&berth::image::store_dir(s.dir.path()))
        .remove_image(&name)
        .unwrap();
    let mut by_account = pod("by-account", false);
    by_account["spec"]["serviceAccountName"] = json!("builder");
    let (code, p) = s.post(PODS, by_account).await;
    assert_eq!(code, 201, "{p}");
    crate::node::pod_until(&s, "by-account", "running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    delete_pod(&s, "by-account").await;
    delete_pod(&s, "private").await;
    delete_pod(&s, "anonymous").await;
    // The command line: with the file and the credentials, and without the CA.
    let dir = tempfile::tempdir().unwrap();
    let regfile = dir.path().join("registries.yaml");
    std::fs::write(&regfile, &file).unwrap();
    let pull = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["image", "pull", &image, "--data-dir"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap()
    };
    let out = pull(&["--creds", "puller:s3cret"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("certificate"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The credentials from the registries file this time.
    let with_auth = format!("{file}    auth: {{username: puller, password: s3cret}}\n");
    std::fs::write(&regfile, with_auth).unwrap();
    let out = pull(&["--registries", regfile.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with(&format!("pulled {image} (")), "{said}");
    s.stop().await;
}

/// Mirrors are tried in order before the origin (a dead one, one that has the image, one
/// that has not); an index is resolved to this machine's platform; whiteouts of a pulled
/// layer hide the file below; `Always` takes what the tag names now.
#[tokio::test]
async fn mirrors_indexes_whiteouts_and_always() {
    if !can_run() {
        return;
    }
    let (origin, mirror) = (Registry::start(false, false), Registry::start(false, false));
    let dead = format!("127.0.0.1:{}", free_port());
    let platform_image = |marker: &[u8]| {
        index_archive(
            "multi",
            &[
                (
                    "s390x",
                    vec![busybox_base(), file_layer("etc/platform", b"foreign\n")],
                ),
                (
                    arch(),
                    vec![
                        busybox_base(),
                        file_layer("etc/image-release", b"release\n"),
                        file_layer("etc/platform", marker),
                        layer(&[
                            Entry::Dir("etc/"),
                            Entry::File("etc/.wh.image-release", b"", 0o644),
                        ]),
                    ],
                ),
            ],
        )
    };
    mirror.push(
        &platform_image(b"from-mirror\n"),
        "multi",
        "app:1",
        &["--all"],
    );
    origin.push(
        &platform_image(b"from-origin\n"),
        "multi",
        "app:1",
        &["--all"],
    );
    origin.push(
        &platform_image(b"only-origin\n"),
        "multi",
        "other:1",
        &["--all"],
    );
    let file = format!(
        "mirrors:\n  \"{}\":\n    endpoint: [\"http://{dead}\", \"http://{}\"]\n",
        origin.host, mirror.host
    );
    let s = server_with(&file).await;
    let script = "cat /etc/platform; if test -e /etc/image-release; then echo release=yes; else echo release=no; fi; echo done; exec sleep 3600";
    let pod = |name: &str, image: String, policy: &str| {
        json!({"metadata": {"name": name}, "spec": {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": policy,
                "command": ["sh", "-c", script]}]}})
    };
    let runs = |name: &'static str, image: String, policy: &'static str, want: &'static str| {
        let s = &s;
        async move {
            let (code, p) = s.post(PODS, pod(name, image, policy)).await;
            assert_eq!(code, 201, "{p}");
            let said = wait_logs(s, name, "main", "done").await;
            assert_eq!(said, format!("{want}\nrelease=no\ndone\n"), "{name}");
        }
    };
    runs(
        "mirrored",
        format!("{}/app:1", origin.host),
        "IfNotPresent",
        "from-mirror",
    )
    .await;
    runs(
        "fallback",
        format!("{}/other:1", origin.host),
        "IfNotPresent",
        "only-origin",
    )
    .await;
    // The tag moves on at the origin (and its mirror): Always pulls it again.
    mirror.push(&platform_image(b"moved\n"), "multi", "app:1", &["--all"]);
    runs("again", format!("{}/app:1", origin.host), "Always", "moved").await;
    for p in ["mirrored", "fallback", "again"] {
        delete_pod(&s, p).await;
    }
    s.stop().await;
}

/// `len` bytes no compressor shrinks.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A TCP proxy on loopback in front of `backend` that cuts every connection once it has
/// carried `cut_after` bytes back (a registry dying mid-pull), until told otherwise.
struct Cutter {
    port: u16,
    cut_after: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Cutter {
    async fn start(backend: String, cut_after: u64) -> Cutter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(cut_after));
        let limit = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (backend, limit) = (backend.clone(), limit.clone());
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(server) = tokio::net::TcpStream::connect(&backend).await else {
                        return;
                    };
                    let (mut sr, mut sw) = server.into_split();
                    let (mut cr, mut cw) = client.split();
                    let up = async {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    };
                    let down = async {
                        let mut buf = vec![0u8; 16 << 10];
                        let mut carried = 0u64;
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            carried += n as u64;
                            if carried > limit.load(std::sync::atomic::Ordering::SeqCst) {
                                return;
                            }
                            if cw.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    tokio::select! { () = up => {}, () = down => {} }
                });
            }
        });
        Cutter {
            port,
            cut_after: cut,
            task,
        }
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the store holds under `data`: its blobs, and anything left in its scratch space.
fn store_state(data: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let names = |d: &str| -> Vec<String> {
        std::fs::read_dir(berth::image::store_dir(data).join(d))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    (names("blobs/sha256"), names("tmp"))
}

/// A registry cut off mid-pull, a blob that is not its digest, and a disk that fills up
/// mid-pull each fail the pull and leave nothing half-written in the store; the next pull
/// starts over and succeeds.
#[tokio::test]
async fn a_pull_cut_off_corrupted_or_out_of_space_leaves_nothing_half_written() {
    if !can_run() {
        return;
    }
    let registry = Registry::start(false, false);
    let big = layer(&[Entry::File("noise", &noise(24 << 20, 7), 0o644)]);
    let top = crate::oci::archive("big", &[busybox_base(), big], json!({"Env": ["PATH=/bin"]}));
    registry.push(&top, "big", "big:1", &[]);
    let cutter = Cutter::start(registry.host.clone(), 1 << 20).await;
    let image = format!("127.0.0.1:{}/big:1", cutter.port);
    let dir = tempfile::tempdir().unwrap();
    let pull = |data: &std::path::Path, image: &str| {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["image", "pull", image, "--data-dir"])
            .arg(data)
            .output()
            .unwrap()
    };
    // Cut off after 1 MiB of any answer.
    let out = tokio::task::spawn_blocking({
        let (d, i) = (dir.path().to_path_buf(), image.clone());
        move || pull(&d, &i)
    })
    .await
    .unwrap();
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (blobs, tmp) = store_state(dir.path());
    assert!(tmp.is_empty(), "{tmp:?}");
    let layers_kept = blobs.len();
    // Whole again: the pull starts over and completes.
    cutter
        .cut_after
        .store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
    let out = tokio::task::spawn_blocking({
        let (d, i) = (dir.path().to_path_buf(), image.clone());
        move || pull(&d, &i)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (blobs, tmp) = store_state(dir.path());
    assert!(
        tmp.is_empty() && blobs.len() > layers_kept,
        "{blobs:?} {tmp:?}"
    );

    // A blob in the registry that is not what its digest says: refused, not stored.
    let blobs_dir = registry
        .dir
        .path()
        .join("data/docker/registry/v2/blobs/sha256");
    let victim = std::fs::read_dir(&blobs_dir)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|d| d.path().join("data"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let out = pull(fresh.path(), &format!("{}/big:1", registry.host));
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("digest"), "{said}");
    let corrupted = victim
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (blobs, tmp) = store_state(fresh.path());
    assert!(
        !blobs.contains(&corrupted) && tmp.is_empty(),
        "{blobs:?} {tmp:?}"
    );
    bytes[mid] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();

    // A data directory that fills up mid-pull (a small tmpfs), then grows.
    let small = tempfile::tempdir().unwrap();
    let mount = |opts: &str| {
        Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                opts,
                "berth-test",
                small.path().to_str().unwrap(),
            ])
            .status()
            .unwrap()
            .success()
    };
    assert!(mount("size=12m"));
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(small.path());
    let out = pull(small.path(), &format!("{}/big:1", registry.host));
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("No space left"), "{said}");
    let (_, tmp) = store_state(small.path());
    assert!(tmp.is_empty(), "{tmp:?}");
    assert!(
        Command::new("mount")
            .args(["-o", "remount,size=256m", small.path().to_str().unwrap()])
            .status()
            .unwrap()
            .success()
    );
    let out = pull(small.path(), &format!("{}/big:1", registry.host));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A token service in front of a registry, as Docker Hub's: every request without the
/// bearer token is answered 401 with a `Bearer` challenge naming the token endpoint,
/// which hands the token out for the right basic credentials.
struct TokenFront {
    port: u16,
    tokens_issued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TokenFront {
    async fn start(backend: String) -> TokenFront {
        use axum::body::Body;
        use axum::http::{Request, Response, StatusCode};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let issued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = issued.clone();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let handler = move |req: Request<Body>| {
            let (backend, counter, http) = (backend.clone(), counter.clone(), http.clone());
            async move {
                let auth = req
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                if req.uri().path() == "/token" {
                    use base64::Engine;
                    let want = format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode("puller:s3cret")
                    );
                    let scoped = req.uri().query().unwrap_or("").contains("scope=repository");
                    if auth != want || !scoped {
                        return Response::builder()
                            .status(StatusCode::UNAUTHORIZED)
                            .body(Body::from("{\"details\":\"bad credentials\"}"))
                            .unwrap();
                    }
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    return Response::new(Body::from(
                        json!({"token": "tok-1", "expires_in": 300}).to_string(),
                    ));
                }
                if auth != "Bearer tok-1" {
                    return Response::builder()
                        .status(StatusCode::UNAUTHORIZED)
                        .header(
                            "www-authenticate",
                            format!(
                                "Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"berth-test\""
                            ),
                        )
                        .body(Body::from("{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}"))
                        .unwrap();
                }
                let mut fwd = http.request(
                    req.method().clone(),
                    format!("http://{backend}{}", req.uri()),
                );
                for name in ["accept", "range"] {
                    if let Some(v) = req.headers().get(name) {
                        fwd = fwd.header(name, v.clone());
                    }
                }
                let r = fwd.send().await.unwrap();
                let mut out = Response::builder().status(r.status().as_u16());
                for name in ["content-type", "docker-content-digest", "content-length"] {
                    if let Some(v) = r.headers().get(name) {
                        out = out.header(name, v.as_bytes());
                    }
                }
                out.body(Body::from_stream(r.bytes_stream())).unwrap()
            }
        };
        let app = axum::Router::new().fallback(handler);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TokenFront {
            port,
            tokens_issued: issued,
            task,
        }
    }
}

impl Drop for TokenFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The bearer token flow (Docker Hub's): the challenge, the token fetched with the pull
/// secret's credentials, then the pull with the token; wrong credentials are refused.
#[tokio::test]
async fn a_registry_behind_a_token_service_is_pulled_from_with_a_bearer_token() {
    if !can_run() {
        return;
    }
    let registry = Registry::start(false, false);
    registry.push(
        &busybox_image("example.com/hub:1", json!({"Env": ["PATH=/bin"]})),
        "example.com/hub:1",
        "library/app:3",
        &[],
    );
    let front = TokenFront::start(registry.host.clone()).await;
    let image = format!("127.0.0.1:{}/library/app:3", front.port);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let pull = move |creds: &str| {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["image", "pull", &image, "--creds", creds, "--data-dir"])
            .arg(&data)
            .output()
            .unwrap()
    };
    let out = tokio::task::spawn_blocking({
        let pull = pull.clone();
        move || pull("puller:wrong")
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("bad credentials"), "{said}");
    let out = tokio::task::spawn_blocking(move || pull("puller:s3cret"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        front
            .tokens_issued
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1
    );
}
