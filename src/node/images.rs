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
    pub sandbox: crate::runtime::oci::Sandbox,
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
            sandbox: security.sandbox.clone(),
        },
    })
}
