//! The `file` pod source: static pods read from a manifest path (a file, or a directory of
//! one pod per file, YAML or JSON), given the defaults a node gives them, checked as the
//! API would check them, and delivered as complete sets whenever the path changes
//! (inotify) and at least every scan interval.

use crate::types::json::str_at;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::inotify;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Which source a pod came from (`file` or `api`).
pub const SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// A static pod's hash (its uid), copied to its mirror pod.
pub const HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// When the agent first saw a pod.
pub const SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
pub use crate::types::MIRROR_ANNOTATION;

/// The source name of static pods.
pub const FILE_SOURCE: &str = "file";

/// One scan of the manifest path: the pods to run and the ones refused.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scan {
    pub pods: Vec<Value>,
    /// A refused pod (for the event's object) and why (the event's message).
    pub rejected: Vec<(Value, String)>,
}

/// `<name>_<namespace>`: a pod's name on this node, the same for a static pod and its
/// mirror.
pub fn full_name(pod: &Value) -> String {
    format!(
        "{}_{}",
        str_at(pod, "/metadata/name"),
        str_at(pod, "/metadata/namespace")
    )
}

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Whether the API shows `pod` as the mirror of a static pod.
pub fn is_mirror(pod: &Value) -> bool {
    crate::types::is_mirror_pod(pod)
}

/// Whether `pod` was read from a manifest file.
pub fn is_static(pod: &Value) -> bool {
    annotation(pod, SOURCE_ANNOTATION) == Some(FILE_SOURCE) && !is_mirror(pod)
}

/// The hash of a static pod (its `config.hash`), or of the static pod a mirror reflects.
pub fn hash_of(pod: &Value) -> &str {
    if is_mirror(pod) {
        annotation(pod, MIRROR_ANNOTATION).unwrap_or("")
    } else {
        annotation(pod, HASH_ANNOTATION).unwrap_or("")
    }
}

/// The uid of a static pod as read: a hash of its content, this node and its file, so
/// identical content keeps its uid (across restarts too) and any change gives a new one.
/// (The kubelet takes an MD5 of the same inputs; SHA-256 cut to the same 128 bits here.)
pub fn static_uid(raw: &Value, node: &str, path: &Path) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(raw).unwrap_or_default());
    h.update(format!("host:{node}").as_bytes());
    h.update(format!("file:{}", path.display()).as_bytes());
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Gives a pod read from `path` the defaults of a static pod on `node` (§10.2).
pub fn with_defaults(raw: Value, node: &str, path: &Path) -> Value {
    let mut pod = raw;
    if !pod.is_object() {
        return pod;
    }
    let uid = match str_at(&pod, "/metadata/uid") {
        "" => static_uid(&pod, node, path),
        given => given.to_string(),
    };
    crate::client::default_pod(&mut pod);
    let m = pod.as_object_mut().expect("checked");
    m.insert("apiVersion".into(), json!("v1"));
    m.insert("kind".into(), json!("Pod"));
    let meta = m.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let name = meta["name"].as_str().unwrap_or("").to_string();
    meta["uid"] = json!(uid);
    if !name.is_empty() {
        meta["name"] = json!(format!("{name}-{}", node.to_ascii_lowercase()));
    }
    if meta["namespace"].as_str().is_none_or(str::is_empty) {
        meta["namespace"] = json!("default");
    }
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"][HASH_ANNOTATION] = json!(uid);
    meta["annotations"][SOURCE_ANNOTATION] = json!(FILE_SOURCE);
    let spec = m.entry("spec").or_insert_with(|| json!({}));
    if spec.is_object() {
        spec["nodeName"] = json!(node);
        let tolerations = spec
            .as_object_mut()
            .expect("checked")
            .entry("tolerations")
            .or_insert_with(|| json!([]));
        if let Some(list) = tolerations.as_array_mut() {
            // Never evicted by the node's NoExecute taints.
            list.push(json!({"operator": "Exists", "effect": "NoExecute"}));
        }
    }
    m.insert("status".into(), json!({"phase": "Pending"}));
    pod
}

/// The files a manifest path names: the path itself, or the visible regular files of a
/// directory in name order (sub-directories are not descended).
fn manifest_files(path: &Path) -> Vec<PathBuf> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    if meta.is_file() {
        return vec![path.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        tracing::warn!(path = %path.display(), "can't read the manifest directory");
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let p = e.path();
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => Some(p),
                Ok(m) if m.is_dir() => {
                    tracing::debug!(path = %p.display(), "Not recursing into manifest path");
                    None
                }
                _ => None,
            }
        })
        .collect();
    files.sort();
    files
}

/// `<name>.<namespace>`, with placeholders for what is missing (how refused pods are named).
fn ident(pod: &Value) -> String {
    let name = match str_at(pod, "/metadata/name") {
        "" => "<empty-name>",
        n => n,
    };
    let ns = match str_at(pod, "/metadata/namespace") {
        "" => "<empty-namespace>",
        n => n,
    };
    format!("{name}.{ns}")
}

/// Drops the pods that fail validation and the second of two with one full name (§12.2).
pub fn filter_invalid(pods: Vec<Value>, source: &str) -> Scan {
    let mut out = Scan::default();
    let mut names = std::collections::HashSet::new();
    for (i, pod) in pods.into_iter().enumerate() {
        let message = match crate::client::validate_pod(&pod) {
            Err(e) => {
                tracing::warn!(
                    "Pod[{}] ({}) from {source} failed validation, ignoring: {e}",
                    i + 1,
                    ident(&pod)
                );
                format!(
                    "Error validating pod {} from {source}, ignoring: {e}",
                    ident(&pod)
                )
            }
            Ok(()) if !names.insert(full_name(&pod)) => {
                let message = format!(
                    "Error validating pod {} from {source} due to duplicate pod name {:?}, ignoring",
                    ident(&pod),
                    str_at(&pod, "/metadata/name")
                );
                tracing::warn!("{message}");
                message
            }
            Ok(()) => {
                out.pods.push(pod);
                continue;
            }
        };
        out.rejected.push((pod, message));
    }
    out
}

/// Reads every manifest under `path` as static pods of `node`.
pub fn scan(path: &Path, node: &str) -> Scan {
    let mut pods = Vec::new();
    for file in manifest_files(path) {
        let parsed = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_yaml_ng::from_str::<Value>(&text).map_err(|e| e.to_string()));
        match parsed {
            Ok(raw) if raw.is_object() => pods.push(with_defaults(raw, node, &file)),
            Ok(_) => {
                tracing::warn!(
                    "Can't process manifest file {:?}: not a pod object",
                    file.display().to_string()
                );
            }
            Err(e) => {
                tracing::warn!(
                    "Can't process manifest file {:?}: {e}",
                    file.display().to_string()
                );
            }
        }
    }
    filter_invalid(pods, FILE_SOURCE)
}

/// An inotify watch of the manifest path (the directory, or the file's directory).
fn watch_path(path: &Path) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    let dir = if path.is_dir() { path } else { path.parent()? };
    let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).ok()?;
    inotify::add_watch(
        &fd,
        dir,
        inotify::WatchFlags::CLOSE_WRITE
            | inotify::WatchFlags::MODIFY
            | inotify::WatchFlags::CREATE
            | inotify::WatchFlags::DELETE
            | inotify::WatchFlags::MOVED_TO
            | inotify::WatchFlags::MOVED_FROM
            | inotify::WatchFlags::DELETE_SELF
            | inotify::WatchFlags::MOVE_SELF,
    )
    .ok()?;
    // The AsyncFd owns the descriptor, so it cannot be closed while registered.
    #[allow(deprecated)]
    let registered = tokio::io::unix::AsyncFd::new(fd);
    registered.ok()
}

/// Waits for a change under a watch (all pending notifications are consumed); never
/// returns without one.
async fn changed(watch: Option<&tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>) {
    let Some(w) = watch else {
        return std::future::pending().await;
    };
    if !crate::runtime::logs::changed(w).await {
        std::future::pending::<()>().await;
    }
}

/// Sends a [`Scan`] of `path` now, whenever the path changes and every `every`, when it
/// differs from the last one sent, until cancelled.
pub async fn watch(
    path: PathBuf,
    node: String,
    every: Duration,
    tx: mpsc::Sender<Scan>,
    cancel: CancellationToken,
) {
    let mut last: Option<Scan> = None;
    let mut watch = None;
    loop {
        if watch.is_none() {
            // (Again each round: the directory may appear later.)
            watch = watch_path(&path);
        }
        let (p, n) = (path.clone(), node.clone());
        let scan = tokio::task::spawn_blocking(move || scan(&p, &n))
            .await
            .unwrap_or_default();
        if last.as_ref() != Some(&scan) {
            last = Some(scan.clone());
            if tx.send(scan).await.is_err() {
                return;
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
            () = changed(watch.as_ref()) => {
                // A file is often written in steps: let them settle, then read once.
                tokio::time::sleep(Duration::from_millis(100)).await;
                // Drain what came meanwhile (this scan sees it).
                let _ = tokio::time::timeout(Duration::ZERO, changed(watch.as_ref())).await;
                if !path.exists() {
                    watch = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(name: &str, container: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: {container}\n    image: busybox\n    command: [sleep, '600']\n"
        )
    }

    #[test]
    fn a_static_pod_gets_the_node_defaults() {
        let raw: Value = serde_yaml_ng::from_str(&manifest("web", "c")).unwrap();
        let pod = with_defaults(raw.clone(), "N1", Path::new("/m/web.yaml"));
        assert_eq!(pod["metadata"]["name"], "web-n1");
        assert_eq!(pod["metadata"]["namespace"], "default");
        assert_eq!(pod["spec"]["nodeName"], "N1");
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        assert_eq!(uid.len(), 32);
        assert_eq!(pod["metadata"]["annotations"][HASH_ANNOTATION], uid);
        assert_eq!(pod["metadata"]["annotations"][SOURCE_ANNOTATION], "file");
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["spec"]["restartPolicy"], "Always", "API defaults too");
        assert!(
            pod["spec"]["tolerations"]
                .as_array()
                .unwrap()
                .contains(&json!({"operator": "Exists", "effect": "NoExecute"}))
        );
        assert!(is_static(&pod) && !is_mirror(&pod));
        assert_eq!(hash_of(&pod), uid);
    }

    #[test]
    fn the_uid_follows_content_node_and_file() {
        let raw: Value = serde_yaml_ng::from_str(&manifest("web", "c")).unwrap();
        let a = static_uid(&raw, "n1", Path::new("/m/web.yaml"));
        assert_eq!(a, static_uid(&raw.clone(), "n1", Path::new("/m/web.yaml")));
        assert_ne!(a, static_uid(&raw, "n2", Path::new("/m/web.yaml")));
        assert_ne!(a, static_uid(&raw, "n1", Path::new("/m/other.yaml")));
        let edited: Value = serde_yaml_ng::from_str(&manifest("web", "d")).unwrap();
        assert_ne!(a, static_uid(&edited, "n1", Path::new("/m/web.yaml")));
        let given = with_defaults(
            json!({"metadata": {"name": "x", "uid": "fixed"}, "spec": {}}),
            "n1",
            Path::new("/m/x"),
        );
        assert_eq!(given["metadata"]["uid"], "fixed");
    }

    #[test]
    fn a_directory_is_read_in_name_order_without_hidden_files_or_sub_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.yaml"), manifest("b", "c")).unwrap();
        std::fs::write(
            dir.path().join("a.json"),
            json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
                .to_string(),
        )
        .unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), manifest("hidden", "c")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/s.yaml"), manifest("s", "c")).unwrap();
        std::fs::write(dir.path().join("junk.yaml"), "{{{ not yaml").unwrap();
        let scan = scan(dir.path(), "n1");
        let names: Vec<&str> = scan
            .pods
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a-n1", "b-n1"]);
        assert!(scan.rejected.is_empty());
        // A single file works as the path too; a missing path is an empty set.
        assert_eq!(super::scan(&dir.path().join("b.yaml"), "n1").pods.len(), 1);
        assert_eq!(super::scan(&dir.path().join("none"), "n1"), Scan::default());
    }

    #[test]
    fn invalid_and_duplicate_pods_are_refused_with_the_kubelet_messages() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("1-bad.yaml"), manifest("bad", "Bad_Name")).unwrap();
        std::fs::write(dir.path().join("2-web.yaml"), manifest("web", "c")).unwrap();
        std::fs::write(dir.path().join("3-web.yaml"), manifest("web", "d")).unwrap();
        let scan = scan(dir.path(), "n1");
        assert_eq!(scan.pods.len(), 1);
        assert_eq!(scan.pods[0]["spec"]["containers"][0]["name"], "c");
        let messages: Vec<&str> = scan.rejected.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(messages.len(), 2);
        assert!(
            messages[0].starts_with("Error validating pod bad-n1.default from file, ignoring: "),
            "{}",
            messages[0]
        );
        assert!(
            messages[0].contains("spec.containers[0].name"),
            "{}",
            messages[0]
        );
        assert_eq!(
            messages[1],
            "Error validating pod web-n1.default from file due to duplicate pod name \"web-n1\", ignoring"
        );
        assert_eq!(ident(&json!({})), "<empty-name>.<empty-namespace>");
    }
}
