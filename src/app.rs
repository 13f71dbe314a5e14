//! The `berth serve` process: opens the data directory, runs until told to stop, and
//! shuts everything down in order.

use std::future::Future;
use std::path::PathBuf;
use std::time::Instant;

use crate::store::{self, Store};

/// The data directory used when none is given: `/var/lib/berth` for root, otherwise
/// `$XDG_DATA_HOME/berth` or `~/.local/share/berth`.
pub fn default_data_dir() -> PathBuf {
    if is_root() {
        return PathBuf::from("/var/lib/berth");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("berth");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/berth"),
        None => PathBuf::from(".berth"),
    }
}

fn is_root() -> bool {
    // The effective uid is the owner of /proc/self; no libc call needed.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Runs the cluster on `config` until `shutdown` completes.
pub async fn serve(config: store::Config, shutdown: impl Future<Output = ()>) -> store::Result<()> {
    let started = Instant::now();
    let data_dir = config.data_dir.clone();
    let store = Store::open(config).await?;
    tracing::info!(
        data_dir = %data_dir.display(),
        revision = store.revision(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        "store ready"
    );
    tracing::warn!("the HTTP API is not served yet: this build runs the object store only");
    shutdown.await;
    tracing::info!("shutting down");
    store.close().await
}
