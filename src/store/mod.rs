//! The object store: untyped keys and JSON objects with one global revision, durable
//! group commit (to the log engine, [`log`]), an in-memory cache for reads,
//! watches from any retained revision, compaction, migrations and snapshots.
//!
//! Contract (see ARCHITECTURE.md): every committed write gets the next revision, which is
//! stamped into the object as `metadata.resourceVersion`; a write is acknowledged only once
//! it is on disk; expected outcomes (already exists, conflict, not found) are values
//! ([`Outcome`]); watchers see every later event exactly once, in revision order, and never
//! slow writers down.

mod backend;
mod cache;
mod committer;
mod compact;
mod journal;
mod log;
pub mod migrate;
mod segment;
mod sled_backend;
pub mod snapshot;
mod stamp;
#[cfg(test)]
mod tests;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

pub use backend::{Event, EventKind, Record};
pub use stamp::{InvalidValue, revision as stored_revision};
pub use watch::{Watch, WatchEvent, WatchOptions};

use backend::Backend;
use cache::Cache;
use committer::{Op, Request};
use watch::Hub;

/// Errors of the store layer. Expected outcomes of writes are [`Outcome`]s, not errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key}: {source}")]
    InvalidValue { key: String, source: InvalidValue },
    #[error("the store is closed")]
    Closed,
    #[error(
        "{context}: the disk is full ({source}); free space on it or move the data directory elsewhere: writes resume by themselves once there is room"
    )]
    NoSpace {
        context: String,
        source: std::io::Error,
    },
    #[error(
        "the store takes {used} bytes on disk, past its quota of {quota} (--quota-backend-bytes): delete objects (deletes still work) or start berth with a larger quota; writes resume by themselves once compaction brings it under"
    )]
    Quota { used: u64, quota: u64 },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{context}: {message}")]
    Backend { context: String, message: String },
    #[error(
        "data directory {dir} is in use by another berth process; stop it first, or pass another --data-dir"
    )]
    InUse { dir: String },
    #[error(
        "data directory {dir} was written by a newer berth (storage schema v{found}, this berth knows up to v{known}); run that newer berth, or restore a backup from {dir}/backups with `berth snapshot restore`"
    )]
    NewerSchema { dir: String, found: u32, known: u32 },
    #[error("migration {number:04}: {message}")]
    Migration { number: u32, message: String },
    #[error("snapshot {path}: {message}")]
    Snapshot { path: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error in `context`: [`Error::NoSpace`] when the disk or a quota is full.
    pub(crate) fn from_io(context: impl Into<String>, source: std::io::Error) -> Self {
        let context = context.into();
        if Self::is_no_space(&source) {
            Error::NoSpace { context, source }
        } else {
            Error::Io { context, source }
        }
    }

    pub(crate) fn is_no_space(e: &std::io::Error) -> bool {
        e.kind() == std::io::ErrorKind::StorageFull
            || e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())
            || e.raw_os_error() == Some(rustix::io::Errno::DQUOT.raw_os_error())
    }

    /// The same error again, for each of the writes of a batch that failed.
    pub(crate) fn duplicate(&self) -> Self {
        let io = |e: &std::io::Error| match e.raw_os_error() {
            Some(n) => std::io::Error::from_raw_os_error(n),
            None => std::io::Error::new(e.kind(), e.to_string()),
        };
        match self {
            Error::NoSpace { context, source } => Error::NoSpace {
                context: context.clone(),
                source: io(source),
            },
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: io(source),
            },
            Error::Quota { used, quota } => Error::Quota {
                used: *used,
                quota: *quota,
            },
            Error::Closed => Error::Closed,
            other => Error::Backend {
                context: "commit".into(),
                message: other.to_string(),
            },
        }
    }

    /// What a client is told when a write is refused for want of space; `None` for
    /// other errors. Says what to do, and names no path of the server.
    pub fn out_of_space_message(&self) -> Option<String> {
        match self {
            Error::NoSpace { .. } => Some(
                "the disk of berth's data directory is full: free space on it; writes resume by themselves once there is room (reads, watches and deletions keep working)".into(),
            ),
            Error::Quota { .. } => Some(self.to_string()),
            _ => None,
        }
    }

    /// The store cannot take writes for want of space (and will once there is room).
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, Error::NoSpace { .. } | Error::Quota { .. })
    }
}

/// Tuning of a store; [`Config::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory: the database lives in `store/`, backups in `backups/`.
    pub data_dir: PathBuf,
    /// Keep at least this many of the latest events ...
    pub retain_events: u64,
    /// ... or all events of this last stretch of time, whichever keeps more ...
    pub retain_for: Duration,
    /// ... but never more than this many bytes of them (0: no bound), so that a client
    /// rewriting a large object cannot grow the log without end.
    pub retain_bytes: u64,
    /// How often the retention above is enforced.
    pub compact_every: Duration,
    /// Recent events kept in memory: live watches read them from there, and resumed ones
    /// without reading the disk. A watch that falls further behind reads the disk.
    pub history: usize,
    /// ... and at most this many bytes of them (objects and their previous states) ...
    pub history_bytes: u64,
    /// ... and none older than this (kube-apiserver's watch cache keeps 75 s of events
    /// fresh), so that the memory of a burst of writes goes back.
    pub history_for: Duration,
    /// Most writes committed by one flush.
    pub max_batch: usize,
    /// Space reserved for each file of the log.
    pub log_file_bytes: u64,
    /// Bytes on disk past which writes other than deletions are refused (0: no quota),
    /// as etcd's `--quota-backend-bytes`.
    pub quota_bytes: u64,
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            // kube-apiserver compacts etcd's history every 5 minutes.
            retain_events: 10_000,
            retain_for: Duration::from_secs(300),
            retain_bytes: 64 << 20,
            compact_every: Duration::from_secs(60),
            history: 8192,
            history_bytes: 32 << 20,
            history_for: Duration::from_secs(75),
            max_batch: 1024,
            log_file_bytes: 4 << 20,
            // etcd's default.
            quota_bytes: 2 << 30,
        }
    }

    pub(crate) fn store_dir(&self) -> PathBuf {
        store_dir(&self.data_dir)
    }
}

/// Hands the memory that a burst of work (compiling a schema, a compaction) freed back to the system:
/// glibc keeps freed memory for later use, and idle memory is a feature.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        #[allow(unsafe_code)]
        // SAFETY: malloc_trim only releases free memory of glibc's allocator.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Opens the store in `dir`, converting one that an earlier berth kept in sled.
fn open_backend(dir: &Path, log_file_bytes: u64) -> Result<log::LogBackend> {
    sled_backend::convert(dir, log_file_bytes)?;
    log::LogBackend::open(dir, log_file_bytes)
}

pub(crate) fn store_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("store")
}

/// How a write went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Committed and durable. For a deletion, the object's last state.
    Written(Record),
    /// `create` of a key that exists; the current object.
    AlreadyExists(Record),
    /// A precondition did not hold; the current object.
    Conflict(Record),
    /// `update` or `delete` of a key that does not exist.
    NotFound,
}

/// Conditions a stored object must meet for an update or deletion to go ahead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's current revision (its resourceVersion).
    pub revision: Option<u64>,
    /// The object's `metadata.uid`.
    pub uid: Option<String>,
}

impl Preconditions {
    pub fn revision(revision: u64) -> Self {
        Self {
            revision: Some(revision),
            uid: None,
        }
    }
}

/// Figures about the store, for `/metrics`.
#[derive(Clone)]
pub struct Metrics {
    /// Seconds one group commit takes (write and flush).
    pub commit_seconds: prometheus_client::metrics::histogram::Histogram,
    /// Writes per group commit.
    pub batch_size: prometheus_client::metrics::histogram::Histogram,
    /// Open watches.
    pub watchers: prometheus_client::metrics::gauge::Gauge,
    /// Bytes of the recent events held in memory for watches.
    pub history_bytes: prometheus_client::metrics::gauge::Gauge,
    /// Bytes of the event log on disk, as last measured by compaction.
    pub log_bytes: prometheus_client::metrics::gauge::Gauge,
    /// Bytes the store takes on disk, as the quota counts them.
    pub disk_bytes: prometheus_client::metrics::gauge::Gauge,
}

impl Metrics {
    fn new() -> Self {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        Self {
            commit_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            watchers: Default::default(),
            history_bytes: Default::default(),
            log_bytes: Default::default(),
            disk_bytes: Default::default(),
        }
    }

    /// Adds these figures to a Prometheus registry.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "berth_store_commit_duration_seconds",
            "Time of one durable group commit",
            self.commit_seconds.clone(),
        );
        registry.register(
            "berth_store_commit_batch_size",
            "Writes made durable by one group commit",
            self.batch_size.clone(),
        );
        registry.register(
            "berth_store_watchers",
            "Open watches on the store",
            self.watchers.clone(),
        );
        registry.register(
            "berth_store_watch_history_bytes",
            "Bytes of recent events held in memory for watches",
            self.history_bytes.clone(),
        );
        registry.register(
            "berth_store_event_log_bytes",
            "Bytes of retained history on disk, as compaction last measured it",
            self.log_bytes.clone(),
        );
        registry.register(
            "berth_store_disk_bytes",
            "Bytes the store takes on disk (its base, its log and the file made ready next), as --quota-backend-bytes counts them",
            self.disk_bytes.clone(),
        );
    }
}

/// State shared by handles, the committer, the compactor and watches.
struct Shared {
    backend: Arc<dyn Backend>,
    cache: Cache,
    hub: Arc<Hub>,
    compacted: AtomicU64,
    metrics: Metrics,
    /// Asks the compactor to run now rather than at its next tick: a write was refused
    /// for the quota, and compaction is what frees space.
    compact_now: Arc<tokio::sync::Notify>,
}

impl Shared {
    fn compacted(&self) -> u64 {
        self.compacted.load(Ordering::Acquire)
    }
}

/// A handle to an open store. Cheap to clone; [`Store::close`] shuts it down.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
    write_path: Arc<committer::WritePath>,
    tx: mpsc::Sender<Request>,
    tasks: Arc<std::sync::Mutex<Tasks>>,
}

struct Tasks {
    committer: Option<std::thread::JoinHandle<()>>,
    compactor: Option<tokio::task::JoinHandle<()>>,
    stop_compactor: Option<oneshot::Sender<()>>,
}

impl Store {
    /// Opens the store in `config.data_dir`, applying pending migrations (after a backup).
    pub async fn open(config: Config) -> Result<Self> {
        let cfg = config.clone();
        let (backend, meta, objects) = tokio::task::spawn_blocking(move || {
            create_private_dir(&cfg.data_dir)?;
            let dir = cfg.store_dir();
            let backend: Arc<dyn Backend> = Arc::new(open_backend(&dir, cfg.log_file_bytes)?);
            migrate::apply_pending(backend.as_ref(), &cfg.data_dir)?;
            let meta = backend.meta()?;
            // Finish a compaction that a crash interrupted.
            while backend.drop_events(meta.compacted, 10_000)? > 0 {}
            let objects = backend.objects()?;
            Ok::<_, Error>((backend, meta, objects))
        })
        .await
        .map_err(|e| Error::Backend {
            context: "open store".into(),
            message: e.to_string(),
        })??;
        tracing::debug!(
            revision = meta.revision,
            objects = objects.len(),
            schema = meta.schema,
            "store opened"
        );
        let metrics = Metrics::new();
        let shared = Arc::new(Shared {
            backend,
            cache: Cache::new(objects, meta.revision),
            hub: Arc::new(Hub::new(
                meta.revision,
                config.history,
                config.history_bytes,
                metrics.history_bytes.clone(),
            )),
            compacted: AtomicU64::new(meta.compacted),
            metrics,
            compact_now: Arc::new(tokio::sync::Notify::new()),
        });
        let (tx, rx) = mpsc::channel(config.max_batch.max(1) * 4);
        let write_path = Arc::new(committer::WritePath::new(
            shared.clone(),
            meta.revision,
            config.quota_bytes,
            config.retain_bytes / 4,
        ));
        let committer = committer::spawn(write_path.clone(), rx, config.max_batch.max(1))?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let compactor = tokio::spawn(compact::run(Arc::downgrade(&shared), config, stop_rx));
        Ok(Self {
            shared,
            write_path,
            tx,
            tasks: Arc::new(std::sync::Mutex::new(Tasks {
                committer: Some(committer),
                compactor: Some(compactor),
                stop_compactor: Some(stop_tx),
            })),
        })
    }

    /// The store's figures, for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The object at `key`.
    pub fn get(&self, key: &str) -> Option<Record> {
        self.shared.cache.get(key)
    }

    /// Every object whose key starts with `prefix`, in key order, and the revision the
    /// list reflects.
    pub fn list(&self, prefix: &str) -> (Vec<(Arc<str>, Record)>, u64) {
        self.shared.cache.list(prefix, None, usize::MAX)
    }

    /// Up to `limit` objects under `prefix` whose keys sort after `start_after`.
    pub fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> (Vec<(Arc<str>, Record)>, u64) {
        self.shared.cache.list(prefix, start_after, limit)
    }

    /// [`Store::list_page`], and how many objects under `prefix` follow the page.
    pub fn list_page_counted(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> (Vec<(Arc<str>, Record)>, u64, usize) {
        self.shared
            .cache
            .list_counting(prefix, start_after, limit, true)
    }

    /// Up to `limit` objects under `prefix` whose keys sort after `start_after`, as they
    /// were at `revision`: the objects now, with every later change read back from the
    /// history and undone. This is how pages of one list all show the same moment.
    /// `Ok(None)`: the history since `revision` has been compacted away.
    ///
    /// It costs the page and the changes since `revision`, not the objects in the range:
    /// of the first `limit + d` objects now, where `d` keys in the range changed since,
    /// at least `limit` are as they were then, so no later object can be in the page.
    pub async fn list_page_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: u64,
    ) -> Result<Option<Vec<(Arc<str>, Record)>>> {
        let mut changes = Changes {
            prefix,
            start_after,
            seen: revision,
            then: BTreeMap::new(),
        };
        // The changes so far first, so that the fetch below allows for them.
        if !changes.read(&self.shared, self.revision()).await? {
            return Ok(None);
        }
        // Writes that land meanwhile can change more keys than a fetch allowed for; then
        // it fetches again. Past a few rounds it takes the whole range.
        for round in 0.. {
            let allowed = changes.then.len();
            let want = if round < 4 {
                limit.saturating_add(allowed)
            } else {
                usize::MAX
            };
            let (now, current) = self.shared.cache.list(prefix, start_after, want);
            if revision >= current {
                return Ok(Some(now.into_iter().take(limit).collect()));
            }
            if !changes.read(&self.shared, current).await? {
                return Ok(None);
            }
            if let Some(page) = undo(now, want, allowed, &changes.then, limit) {
                return Ok(Some(page));
            }
        }
        unreachable!("the rounds end by taking the whole range")
    }

    /// Number of objects under `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.shared.cache.count(prefix)
    }

    /// The revision of the last committed write.
    pub fn revision(&self) -> u64 {
        self.shared.cache.revision()
    }

    /// Events at or below this revision are no longer available to watches.
    pub fn compacted(&self) -> u64 {
        self.shared.compacted()
    }

    /// Creates `key` if it does not exist.
    pub async fn create(&self, key: &str, value: impl Into<Bytes>) -> Result<Outcome> {
        let template = prepare(key, value.into())?;
        self.submit(Op::Create {
            key: Arc::from(key),
            template,
        })
        .await
    }

    /// Replaces the object at `key` if it exists and meets `pre`.
    pub async fn update(
        &self,
        key: &str,
        value: impl Into<Bytes>,
        pre: Preconditions,
    ) -> Result<Outcome> {
        let template = prepare(key, value.into())?;
        self.submit(Op::Update {
            key: Arc::from(key),
            template,
            pre,
        })
        .await
    }

    /// Deletes the object at `key` if it exists and meets `pre`.
    pub async fn delete(&self, key: &str, pre: Preconditions) -> Result<Outcome> {
        self.submit(Op::Delete {
            key: Arc::from(key),
            pre,
            last: None,
        })
        .await
    }

    /// Deletes the object at `key` if it exists and meets `pre`, as one write that leaves
    /// it as `last`: the deletion's event and answer carry `last` (stamped with the
    /// deletion's revision) rather than the object as it was stored.
    pub async fn delete_as(
        &self,
        key: &str,
        last: impl Into<Bytes>,
        pre: Preconditions,
    ) -> Result<Outcome> {
        let template = prepare(key, last.into())?;
        self.submit(Op::Delete {
            key: Arc::from(key),
            pre,
            last: Some(template),
        })
        .await
    }

    async fn submit(&self, op: Op) -> Result<Outcome> {
        let tx = &self.tx;
        let op = match self
            .write_path
            .commit_if_quiet(op, || tx.capacity() < tx.max_capacity())
            .await
        {
            Ok(result) => return result,
            Err(op) => op,
        };
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Write { op, reply })
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Watches for changes; see [`WatchOptions`].
    pub fn watch(&self, opts: WatchOptions) -> Result<Watch> {
        Watch::start(&self.shared, opts)
    }

    /// Drops the event history at and below `revision` (at most the current revision).
    /// Returns the new compaction floor.
    pub async fn compact(&self, revision: u64) -> Result<u64> {
        compact::compact_to(&self.shared, revision).await
    }

    /// Stops taking writes, finishes those already queued and ends every watch. The
    /// database itself is released when the last handle and watch are gone.
    pub async fn close(&self) -> Result<()> {
        let (committer, compactor, stop) = {
            let mut t = self.tasks.lock().expect("tasks lock");
            (
                t.committer.take(),
                t.compactor.take(),
                t.stop_compactor.take(),
            )
        };
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        if let Some(compactor) = compactor {
            let _ = compactor.await;
        }
        if let Some(committer) = committer {
            let (reply, done) = oneshot::channel();
            if self.tx.send(Request::Close { reply }).await.is_ok() {
                let _ = done.await;
            }
            tokio::task::spawn_blocking(move || committer.join())
                .await
                .ok();
        }
        self.shared.hub.close();
        self.shared.backend.close()
    }
}

/// The first `limit` objects of a range as they were before the changes in `then`, from
/// `now`, the first `want` objects of the range now; `None` if `now` may be too short:
/// more keys changed than the `allowed` it was fetched with, and it filled the fetch.
fn undo(
    now: Vec<(Arc<str>, Record)>,
    want: usize,
    allowed: usize,
    then: &BTreeMap<Arc<str>, Option<Record>>,
    limit: usize,
) -> Option<Vec<(Arc<str>, Record)>> {
    if then.len() > allowed && now.len() == want {
        return None;
    }
    let mut objects: BTreeMap<Arc<str>, Record> = now.into_iter().collect();
    for (key, before) in then {
        match before {
            Some(record) => objects.insert(key.clone(), record.clone()),
            None => objects.remove(key),
        };
    }
    Some(objects.into_iter().take(limit).collect())
}

/// The keys of a range that changed after a revision, and what each was then.
struct Changes<'a> {
    prefix: &'a str,
    start_after: Option<&'a str>,
    /// Every change up to this revision has been read.
    seen: u64,
    /// Per key, the value its first later change replaced; `None` if that change made it.
    then: BTreeMap<Arc<str>, Option<Record>>,
}

impl Changes<'_> {
    /// Reads the changes up to revision `upto`; false if history no longer holds them.
    async fn read(&mut self, shared: &Arc<Shared>, upto: u64) -> Result<bool> {
        while self.seen < upto {
            let events = match watch::history(shared.clone(), self.seen).await? {
                watch::History::Events(events) => events,
                watch::History::Compacted(_) => return Ok(false),
            };
            for e in events.iter().take_while(|e| e.revision <= upto) {
                let in_range =
                    e.key.starts_with(self.prefix) && self.start_after.is_none_or(|s| &*e.key > s);
                if in_range && !self.then.contains_key(&e.key) {
                    let before = match e.kind {
                        EventKind::Created => None,
                        EventKind::Updated | EventKind::Deleted => e.prev.clone(),
                    };
                    self.then.insert(e.key.clone(), before);
                }
            }
            self.seen = events.last().map_or(upto, |e| e.revision).min(upto);
        }
        Ok(true)
    }
}

/// `value` (a JSON object) with `metadata.resourceVersion` set to `revision`.
pub fn restamp(value: &Bytes, revision: u64) -> Result<Bytes, InvalidValue> {
    Ok(stamp::prepare(value.clone())?.stamp(revision))
}

/// Creates the data directory, readable only by its owner (it will hold credentials).
fn create_private_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let io = |source| Error::Io {
        context: format!("create data directory {}", dir.display()),
        source,
    };
    // Every directory made on the way is its owner's alone: the data directory above the
    // store is often one of them.
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    Ok(())
}

fn prepare(key: &str, value: Bytes) -> Result<stamp::Template> {
    stamp::prepare(value).map_err(|source| Error::InvalidValue {
        key: key.to_string(),
        source,
    })
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
