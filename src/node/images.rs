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
