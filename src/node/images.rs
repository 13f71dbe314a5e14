//! The node's incoming archives (`DATA/images`): imported at start, then whenever inotify
//! says a file was written there or moved in (no polling). The imports themselves run on
//! the blocking pool; each scan reports what it imported or why it could not.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Notify;

use rustix::fs::inotify;
use tokio_util::sync::CancellationToken;

use crate::image::{self, Store};

/// Runs until `cancel`: imports what `DATA/images` holds and what arrives there.
/// `imported` is told when images were imported (the Node's status lists them).
pub(super) async fn watch(data_dir: PathBuf, imported: Arc<Notify>, cancel: CancellationToken) {
    let incoming = image::incoming::dir(&data_dir);
    let store_dir = image::store_dir(&data_dir);
    if let Err(e) = std::fs::create_dir_all(&incoming) {
        tracing::warn!(dir = %incoming.display(), error = %e, "cannot watch for image archives");
        return;
    }
    let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
        .and_then(|fd| {
            inotify::add_watch(
                &fd,
                &incoming,
                inotify::WatchFlags::CLOSE_WRITE | inotify::WatchFlags::MOVED_TO,
            )?;
            Ok(fd)
        });
    // Without inotify the archives of the start are still imported.
    #[allow(deprecated)] // the AsyncFd owns the descriptor, so none can close it under it
    let fd = match fd
        .map_err(std::io::Error::from)
        .and_then(tokio::io::unix::AsyncFd::new)
    {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!(error = %e, "image archives arriving later are not noticed");
            None
        }
    };
    loop {
        let (store_dir, dir) = (store_dir.clone(), incoming.clone());
        let scanned = tokio::task::spawn_blocking(move || {
            Store::open(&store_dir).map(|store| image::incoming::scan(&store, &dir))
        })
        .await;
        match scanned {
            Ok(Ok(outcomes)) => {
                if outcomes.iter().any(|o| o.result.is_ok()) {
                    imported.notify_one();
                }
                for o in outcomes {
                    match o.result {
                        Ok(images) => {
                            for img in images {
                                tracing::info!(image = %img.name, file = %o.file.display(), "imported an image");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(file = %o.file.display(), error = %e, "could not import an image archive");
                        }
                    }
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot open the image store"),
            Err(e) => tracing::warn!(error = %e, "the image import ended abruptly"),
        }
        let Some(fd) = &fd else {
            cancel.cancelled().await;
            return;
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            ready = fd.readable() => {
                let Ok(mut guard) = ready else { return };
                // Drain the events: which file does not matter, the scan looks at all.
                let mut buf = [0u8; 4096];
                while rustix::io::read(fd.get_ref(), &mut buf[..]).is_ok_and(|n| n > 0) {}
                guard.clear_ready();
            }
        }
    }
}

/// Who a container runs as, as its pod says (the image's `USER` otherwise).
#[derive(Debug, Clone, Default)]
pub(super) struct Security {
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
    pub supplemental_groups: Vec<u32>,
    pub hardening: crate::runtime::oci::Hardening,
}

/// An image of the store, ready to run a container in.
pub(super) struct Resolved {
    pub config: crate::runtime::oci::ImageConfig,
    pub rootfs: crate::runtime::oci::Rootfs,
}

/// Finds `image` in the node's store and makes its layers ready (applying any not applied
/// yet); the reasons a container waits otherwise are the kubelet's.
pub(super) fn resolve(
    data_dir: &std::path::Path,
    image: &str,
    pull_policy: &str,
    security: &Security,
) -> Result<Resolved, super::status::Waiting> {
    use super::status::Waiting;
    use crate::runtime::oci;
    let waiting = |reason: &str, message: String| Waiting {
        reason: reason.into(),
        message,
    };
    let name = image::reference::normalize(image).map_err(|e| {
        waiting(
            "InvalidImageName",
            format!("Failed to apply default image tag {image:?}: couldn't parse image name {image:?}: {e}"),
        )
    })?;
    let store = Store::at(&image::store_dir(data_dir));
    let Some(img) = store.image(&name) else {
        if pull_policy == "Never" {
            return Err(waiting(
                "ErrImageNeverPull",
                format!(
                    "Container image {image:?} is not present with pull policy of Never: import it with `berth image import`"
                ),
            ));
        }
        return Err(waiting(
            "ErrImagePull",
            format!(
                "image {image:?} is not in this node's store: pull it, import it with `berth image import --data-dir DIR FILE` (an OCI or docker archive), or drop it into DIR/images"
            ),
        ));
    };
    let failed = |what: String| waiting("CreateContainerError", what);
    let config = store
        .read_blob(&img.config)
        .map_err(|e| failed(format!("read the config of image {name}: {e}")))?;
    let config = oci::ImageConfig::parse(&config).map_err(failed)?;
    let mut layers = Vec::with_capacity(img.layers.len());
    for l in &img.layers {
        layers.push(
            store
                .ensure_layer(l)
                .map_err(|e| failed(format!("unpack layer {} of image {name}: {e}", l.digest)))?,
        );
    }
    let (uid, gid, additional_gids) = oci::resolve_user(
        &layers,
        config.user.as_deref(),
        security.run_as_user,
        security.run_as_group,
        &security.supplemental_groups,
    )
    .map_err(|e| waiting("CreateContainerConfigError", e))?;
    Ok(Resolved {
        config,
        rootfs: oci::Rootfs {
            layers,
            uid,
            gid,
            additional_gids,
            hardening: security.hardening.clone(),
        },
    })
}

/// When the image store's file system is this full (percent) or more, unused images are
/// removed until it is at most `low` full: the kubelet's image garbage collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcThresholds {
    pub high: u8,
    pub low: u8,
}

impl Default for GcThresholds {
    /// The kubelet's `--image-gc-high-threshold` and `--image-gc-low-threshold`.
    fn default() -> Self {
        GcThresholds { high: 85, low: 80 }
    }
}

/// What one round of image garbage collection did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Collected {
    pub removed: Vec<String>,
    pub freed: u64,
    /// The bytes it set out to free (none when the file system was below `high`).
    pub wanted: u64,
}

/// Removes images that no pod of this node uses, the least recently used first, until
/// `wanted` bytes are freed; `used_at` says when each image was last seen in use.
/// An image stored less than `min_age` ago is not removed (the kubelet's
/// `--minimum-image-ttl-duration`): its pod may not have started yet.
pub(super) fn collect(
    store: &Store,
    in_use: &std::collections::HashSet<String>,
    used_at: &std::collections::HashMap<String, std::time::SystemTime>,
    min_age: std::time::Duration,
    wanted: u64,
) -> Collected {
    let now = std::time::SystemTime::now();
    let mut done = Collected {
        wanted,
        ..Collected::default()
    };
    let mut candidates: Vec<(std::time::SystemTime, String)> = store
        .images()
        .into_iter()
        .filter(|i| !in_use.contains(&i.name))
        .filter_map(|i| {
            let stored = i
                .stored_at
                .parse::<jiff::Timestamp>()
                .ok()
                .map(std::time::SystemTime::from)
                .unwrap_or(std::time::UNIX_EPOCH);
            if now.duration_since(stored).unwrap_or_default() < min_age {
                return None;
            }
            let at = used_at.get(&i.name).copied().unwrap_or(stored);
            Some((at, i.name))
        })
        .collect();
    candidates.sort();
    // The layers of images in use stay however the store's records change meanwhile.
    let keep: Vec<String> = store
        .images()
        .into_iter()
        .filter(|i| in_use.contains(&i.name))
        .flat_map(|i| i.layers.into_iter().map(|l| l.diff_id))
        .collect();
    for (_, name) in candidates {
        if done.freed >= wanted {
            break;
        }
        match store.remove_image(&name).and_then(|_| store.prune(&keep)) {
            Ok(p) => {
                done.freed += p.bytes;
                done.removed.push(name);
            }
            Err(e) => {
                tracing::warn!(image = %name, error = %e, "image garbage collection could not remove an image")
            }
        }
    }
    done
}

/// How full the file system of `dir` is: (its size, the bytes in use), as `df` counts.
pub(super) fn usage(dir: &std::path::Path) -> Option<(u64, u64)> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let total = st.f_blocks * st.f_frsize;
    let used = (st.f_blocks - st.f_bfree) * st.f_frsize;
    Some((total, used))
}

/// The bytes to free for `thresholds`: none below `high`, else down to `low`.
pub(super) fn to_free(total: u64, used: u64, t: GcThresholds) -> u64 {
    if total == 0 || used * 100 < total * t.high as u64 {
        return 0;
    }
    used.saturating_sub(total * t.low as u64 / 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_collection_starts_at_high_and_frees_down_to_low() {
        let t = GcThresholds::default();
        assert_eq!(to_free(1000, 849, t), 0);
        assert_eq!(to_free(1000, 850, t), 50);
        assert_eq!(to_free(1000, 990, t), 190);
        assert_eq!(to_free(0, 0, t), 0);
    }

    #[test]
    fn unused_images_go_least_recently_used_first_and_those_in_use_stay() {
        use crate::image::archive::tests::{digest, layer_tar, oci_archive};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for (name, file) in [("a", "1"), ("b", "2"), ("c", "3")] {
            let tar = layer_tar(&[(file, name)]);
            let diff_id = digest(&tar);
            let archive = oci_archive(&format!("example.com/{name}:1"), &[(tar, diff_id)], false);
            let path = dir.path().join(format!("{name}.tar"));
            std::fs::write(&path, archive).unwrap();
            crate::image::archive::import(&store, &path, None).unwrap();
        }
        let name = |n: &str| format!("example.com/{n}:1");
        let in_use = std::collections::HashSet::from([name("a")]);
        let now = std::time::SystemTime::now();
        // b was used just now, c long ago: c goes first, and one is enough for 1 byte.
        let used_at = std::collections::HashMap::from([
            (name("b"), now),
            (name("c"), now - std::time::Duration::from_secs(3600)),
        ]);
        // Stored just now: too young for a minute's minimum age.
        let young = collect(
            &store,
            &in_use,
            &used_at,
            std::time::Duration::from_secs(60),
            1,
        );
        assert!(young.removed.is_empty());
        let done = collect(&store, &in_use, &used_at, std::time::Duration::ZERO, 1);
        assert_eq!(done.removed, vec![name("c")]);
        assert!(done.freed > 0);
        let done = collect(
            &store,
            &in_use,
            &used_at,
            std::time::Duration::ZERO,
            u64::MAX,
        );
        assert_eq!(done.removed, vec![name("b")]);
        let left: Vec<String> = store.images().into_iter().map(|i| i.name).collect();
        assert_eq!(left, vec![name("a")]);
        let a = store.image(&name("a")).unwrap();
        assert!(store.layer_path(&a.layers[0].diff_id).unwrap().exists());
    }
}
