//! `berth image` end to end, as a user runs it: archives made here (an OCI archive with a
//! gzip and a zstd layer, a whiteout and an opaque directory; a docker archive) imported
//! into a data directory, listed, inspected and removed; a blob that is not its digest
//! and a disk that fills up mid-import leave nothing half-written behind.

use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn berth(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "berth failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn digest(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

/// A tar of `(path, data)` files; a path ending in `/` is a directory.
fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        if path.ends_with('/') {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
        } else {
            h.set_mode(0o755);
            h.set_size(data.len() as u64);
        }
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b).unwrap();
    gz.finish().unwrap()
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// An OCI archive of one image named `name`: each layer given as (blob, uncompressed
/// tar). With `lie`, the first blob's bytes differ from its digest.
fn oci_archive(name: &str, layers: &[(Vec<u8>, Vec<u8>)], lie: bool) -> Vec<u8> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let mut descs = Vec::new();
    for (i, (bytes, _)) in layers.iter().enumerate() {
        let mut stored = bytes.clone();
        if lie && i == 0 {
            stored.push(0);
        }
        files.push((blob(&digest(bytes)), stored));
        descs.push(
            json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                          "digest": digest(bytes), "size": bytes.len()}),
        );
    }
    let diff_ids: Vec<String> = layers.iter().map(|(_, tar)| digest(tar)).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": arch(), "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Entrypoint": ["/bin/hello"], "WorkingDir": "/srv"},
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
    // An index for several platforms, as registries serve: only this machine's is taken.
    let other = if arch() == "amd64" { "arm64" } else { "amd64" };
    let platforms = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": format!("sha256:{}", "0".repeat(64)), "size": 1,
             "platform": {"os": "linux", "architecture": other}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": digest(&manifest), "size": manifest.len(),
             "platform": {"os": "linux", "architecture": arch()}},
        ],
    }))
    .unwrap();
    files.push((blob(&digest(&platforms)), platforms.clone()));
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
                       "digest": digest(&platforms), "size": platforms.len(),
                       "annotations": {"org.opencontainers.image.ref.name": name}}],
    }))
    .unwrap();
    files.push(("index.json".into(), index));
    files.push((
        "oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    tar_of(&refs)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn images_are_imported_listed_inspected_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let base = tar_of(&[
        ("bin/", b""),
        ("bin/hello", b"#!/bin/sh\necho hello\n"),
        ("etc/", b""),
        ("etc/old", b"x"),
        ("srv/", b""),
        ("srv/cache/", b""),
        ("srv/cache/stale", b"x"),
    ]);
    let top = tar_of(&[
        ("etc/.wh.old", b""),
        ("srv/cache/.wh..wh..opq", b""),
        ("srv/cache/fresh", b"y"),
    ]);
    let archive = oci_archive(
        "registry.example:5000/demo/hello:1.0",
        &[
            (gzip(&base), base.clone()),
            (zstd::stream::encode_all(&top[..], 3).unwrap(), top.clone()),
        ],
        false,
    );
    let oci = dir.path().join("hello.oci.tar.gz");
    std::fs::write(&oci, gzip(&archive)).unwrap();
    let out = ok(&berth(&data, &["image", "import", oci.to_str().unwrap()]));
    assert!(
        out.starts_with("imported registry.example:5000/demo/hello:1.0 ("),
        "{out}"
    );

    let ls = ok(&berth(&data, &["image", "ls"]));
    let rows: Vec<Vec<&str>> = ls.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["IMAGE", "TAG", "IMAGE", "ID", "SIZE"], "{ls}");
    assert_eq!(
        rows[1][..2],
        ["registry.example:5000/demo/hello", "1.0"],
        "{ls}"
    );

    let inspect: Value = serde_json::from_str(&ok(&berth(
        &data,
        &["image", "inspect", "registry.example:5000/demo/hello:1.0"],
    )))
    .unwrap();
    assert_eq!(
        inspect["imageConfig"]["config"]["Entrypoint"],
        json!(["/bin/hello"])
    );
    let layers = inspect["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[0]["diffId"], digest(&base));
    // Each layer is a tree of its own, the whiteouts in overlayfs' form.
    let layer_dir = |l: &Value| {
        data.join("oci/layers/sha256")
            .join(l["diffId"].as_str().unwrap().trim_start_matches("sha256:"))
    };
    let lower = layer_dir(&layers[0]);
    assert_eq!(
        std::fs::read_to_string(lower.join("bin/hello")).unwrap(),
        "#!/bin/sh\necho hello\n"
    );
    let upper = layer_dir(&layers[1]);
    assert!(upper.join("srv/cache/fresh").exists());
    if is_root() {
        let old = std::fs::symlink_metadata(upper.join("etc/old")).unwrap();
        assert!(old.file_type().is_char_device());
        let mut v = [0u8; 2];
        let n = rustix::fs::lgetxattr(upper.join("srv/cache"), "trusted.overlay.opaque", &mut v)
            .unwrap();
        assert_eq!(&v[..n], b"y");
    }

    // A docker archive, tagged twice; both names share its layer.
    let layer = tar_of(&[("bin/tool", b"tool")]);
    let config = serde_json::to_vec(&json!({
        "architecture": arch(), "os": "linux", "config": {"Cmd": ["/bin/tool"]},
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!([{
        "Config": "config.json", "RepoTags": ["tool:2", "example.org/tools/tool:2"],
        "Layers": ["abc/layer.tar"],
    }]))
    .unwrap();
    let saved = dir.path().join("tool.tar");
    std::fs::write(
        &saved,
        tar_of(&[
            ("config.json", &config),
            ("abc/", b""),
            ("abc/layer.tar", &layer),
            ("manifest.json", &manifest),
        ]),
    )
    .unwrap();
    let out = ok(&berth(&data, &["image", "import", saved.to_str().unwrap()]));
    assert_eq!(out.lines().count(), 2, "{out}");
    let ls = ok(&berth(&data, &["image", "ls"]));
    assert!(ls.contains("docker.io/library/tool "), "{ls}");
    assert!(ls.contains("example.org/tools/tool "), "{ls}");

    // Removing one name keeps the layer the other still uses; removing both frees it.
    ok(&berth(&data, &["image", "rm", "tool:2"]));
    let tool_layer = data
        .join("oci/layers/sha256")
        .join(digest(&layer).trim_start_matches("sha256:"));
    assert!(tool_layer.exists());
    let out = ok(&berth(&data, &["image", "rm", "example.org/tools/tool:2"]));
    assert!(out.contains("freed"), "{out}");
    assert!(!tool_layer.exists());
    // An unknown or malformed name is a clear error.
    let missing = berth(&data, &["image", "rm", "nothing:here"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("docker.io/library/nothing:here not found")
    );
    let bad = berth(&data, &["image", "inspect", "UPPER/Case"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be lowercase"));
}

#[test]
fn a_blob_that_is_not_its_digest_is_refused_and_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let l = tar_of(&[("x", b"y")]);
    let file = dir.path().join("lying.tar");
    std::fs::write(&file, oci_archive("liar:1", &[(gzip(&l), l.clone())], true)).unwrap();
    let out = berth(&data, &["image", "import", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not what its digest says"), "{err}");
    let ls = ok(&berth(&data, &["image", "ls"]));
    assert_eq!(ls.lines().count(), 1, "{ls}");
    let count = |d: &str| std::fs::read_dir(data.join("oci").join(d)).unwrap().count();
    assert_eq!(count("tmp"), 0);
    assert_eq!(count("layers/sha256"), 0);
}

/// A data directory on a tmpfs of 1 MiB: an image of 2 MiB cannot fit, the import fails
/// with the disk's error, and no half blob or half layer stays for a later import to trust.
#[test]
fn a_disk_that_fills_up_mid_import_leaves_no_half_write() {
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("small");
    std::fs::create_dir(&data).unwrap();
    rustix::mount::mount(
        "berth-test",
        &data,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        Some(c"size=1m"),
    )
    .unwrap();
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(self.0, rustix::mount::UnmountFlags::DETACH);
        }
    }
    let _unmount = Unmount(&data);
    // Incompressible bytes, so the blob is as large as the file.
    let mut big = vec![0u8; 2 << 20];
    let mut x: u32 = 1;
    for b in big.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    // Random bytes fill the disk with the blob; zeros pass as a small blob and fill it
    // when the layer is applied.
    for (name, content) in [("random", big), ("zeros", vec![0u8; 2 << 20])] {
        let l = tar_of(&[("big", &content)]);
        let file = dir.path().join(format!("{name}.tar"));
        let image = format!("{name}:1");
        std::fs::write(&file, oci_archive(&image, &[(gzip(&l), l.clone())], false)).unwrap();
        let out = berth(&data, &["image", "import", file.to_str().unwrap()]);
        assert!(!out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("No space left on device"), "{name}: {err}");
        let count = |d: &str| std::fs::read_dir(data.join("oci").join(d)).unwrap().count();
        assert_eq!(count("tmp"), 0, "{name}: nothing half-written stays");
        assert_eq!(count("layers/sha256"), 0, "{name}");
        assert_eq!(count("images"), 0, "{name}");
        for blob in std::fs::read_dir(data.join("oci/blobs/sha256")).unwrap() {
            let blob = blob.unwrap();
            let bytes = std::fs::read(blob.path()).unwrap();
            let hex = blob.file_name().into_string().unwrap();
            assert_eq!(
                digest(&bytes),
                format!("sha256:{hex}"),
                "a stored blob is whole"
            );
        }
    }
    // The store is as good as before: an image that fits goes in.
    let l = tar_of(&[("small", b"fits")]);
    let file = dir.path().join("small.tar");
    std::fs::write(
        &file,
        oci_archive("small:1", &[(gzip(&l), l.clone())], false),
    )
    .unwrap();
    ok(&berth(&data, &["image", "import", file.to_str().unwrap()]));
    ok(&berth(&data, &["image", "prune"]));
}

/// The names the node's status lists for its images.
async fn node_image_names(s: &crate::support::TestServer) -> Result<Vec<String>, String> {
    let (_, nodes) = s.get(&format!("/api/v1/nodes/{}", crate::node::NODE)).await;
    let images = nodes["status"]["images"].clone();
    let names: Vec<String> = images
        .as_array()
        .ok_or_else(|| format!("no images: {nodes}"))?
        .iter()
        .flat_map(|i| i["names"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    Ok(names)
}

/// `DATA/images` as k3s's `agent/images`: an archive moved or written there is imported
/// with no command, at once (inotify), and the Node's `status.images` lists it, with its
/// repository digest, as the kubelet lists images.
#[tokio::test]
async fn archives_put_into_the_images_directory_are_imported_and_listed_by_the_node() {
    use crate::support::eventually;
    let s = crate::node::server().await;
    let incoming = s.dir.path().join("images");
    eventually(30, "the images directory is made", || async {
        if incoming.is_dir() {
            Ok(())
        } else {
            let entries: Vec<_> = std::fs::read_dir(s.dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            Err(format!("the data directory holds {entries:?}"))
        }
    })
    .await;
    let layer = tar_of(&[("bin/tool", b"1")]);
    let config = serde_json::to_vec(&json!({
        "architecture": arch(), "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
    }))
    .unwrap();
    let archive = |tag: &str| {
        let manifest = serde_json::to_vec(&json!([{
            "Config": "config.json", "RepoTags": [tag], "Layers": ["l/layer.tar"],
        }]))
        .unwrap();
        tar_of(&[
            ("config.json", &config),
            ("l/", b""),
            ("l/layer.tar", &layer),
            ("manifest.json", &manifest),
        ])
    };
    // Moved in, as a finished download is.
    let part = s.dir.path().join("moved.tar.part");
    std::fs::write(&part, archive("example/moved:1")).unwrap();
    std::fs::rename(&part, incoming.join("moved.tar")).unwrap();
    let names = eventually(30, "the node lists the moved-in image", || async {
        let names = node_image_names(&s).await?;
        if names.iter().any(|n| n == "docker.io/example/moved:1") {
            Ok(names)
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("docker.io/example/moved@sha256:")),
        "{names:?}"
    );
    // Written in place.
    std::fs::write(incoming.join("written.tar"), archive("example/written:2")).unwrap();
    eventually(30, "the node lists the written image", || async {
        let names = node_image_names(&s).await?;
        if names.iter().any(|n| n == "docker.io/example/written:2") {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
    // Not an archive: left alone.
    std::fs::write(incoming.join("README"), b"notes").unwrap();
    let listed = ok(&berth(s.dir.path(), &["image", "ls"]));
    assert_eq!(listed.lines().count(), 3, "{listed}");
    s.stop().await;
}

/// The pause image is berth's own `pause`: a pod of it runs with nothing pulled and no
/// command, and `berth pause` ends with 0 on SIGTERM, as the pause image's does.
#[tokio::test]
async fn a_pause_container_runs_without_a_pull_and_stops_on_sigterm() {
    let s = crate::node::server().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "sandbox"},
        "spec": {"terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}});
    let (code, out) = s.post(pods, pod).await;
    assert_eq!(code, 201, "{out}");
    let running = crate::node::pod_until(&s, "sandbox", "the pause pod runs", |p| {
        p["status"]["containerStatuses"][0]["state"]["running"].is_object()
    })
    .await;
    assert_eq!(running["status"]["phase"], "Running");
    let (code, _) = s.delete(&format!("{pods}/sandbox")).await;
    assert_eq!(code, 200);
    crate::support::eventually(60, "the pause pod is gone", || async {
        let (code, p) = s.get(&format!("{pods}/sandbox")).await;
        if code == 404 {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    s.stop().await;
}

#[test]
fn berth_pause_waits_for_sigterm_and_exits_0() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("pause")
        .spawn()
        .unwrap();
    // Once it catches SIGTERM (its SigCgt mask says so), the signal is its to handle.
    let id = child.id();
    let catches_term = || {
        let status = std::fs::read_to_string(format!("/proc/{id}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (15 - 1)) != 0)
    };
    while !catches_term() {
        assert!(child.try_wait().unwrap().is_none(), "pause waits");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
