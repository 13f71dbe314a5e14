//! The seam between the store's logic and the bytes on disk: the [`Backend`] trait and the
//! records that cross it. The committer decides every write; a backend only persists what
//! it is handed, atomically and durably, and reads it back.

use std::sync::Arc;

use bytes::Bytes;

use super::Result;

/// One object as stored: its value and the revision of its last write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub revision: u64,
    pub value: Bytes,
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Updated,
    Deleted,
}

/// One committed change, as the event log keeps it and watchers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub revision: u64,
    pub key: Arc<str>,
    pub kind: EventKind,
    /// The object after the change; for a deletion its last state, stamped with the
    /// revision of the deletion.
    pub object: Bytes,
    /// The object before the change (updates and deletions).
    pub prev: Option<Record>,
    /// Commit time, milliseconds since the Unix epoch; never decreases along revisions.
    pub time_ms: u64,
}

/// The store's bookkeeping that lives beside the objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// Storage schema version (number of applied migrations); 0 for a new directory.
    pub schema: u32,
    /// Revision of the last committed write.
    pub revision: u64,
    /// Every event at or below this revision has been dropped from the log.
    pub compacted: u64,
}

/// Everything one group commit writes: the events (in revision order) imply the object
/// changes, and `revision` is the new global revision.
pub struct CommitBatch<'a> {
    pub revision: u64,
    pub events: &'a [Arc<Event>],
    /// Set by migrations: the schema version reached with this batch.
    pub schema: Option<u32>,
}

/// One raw stored entry: key and value bytes as the backend keeps them.
pub type RawEntry = (Vec<u8>, Vec<u8>);

/// Persistent storage for the store. Implementations must make [`Backend::write`]
/// atomic (all of a batch or nothing survives a crash) and [`Backend::flush`] make every
/// write that returned before it durable.
pub trait Backend: Send + Sync + 'static {
    fn meta(&self) -> Result<Meta>;
    /// Every current object, in key order.
    fn objects(&self) -> Result<Vec<(Arc<str>, Record)>>;
    /// Writes a batch atomically; it is durable once a later [`Backend::flush`] returns.
    fn write(&self, batch: &CommitBatch<'_>) -> Result<()>;
    /// Writes a batch atomically and durably.
    fn commit(&self, batch: &CommitBatch<'_>) -> Result<()> {
        self.write(batch)?;
        self.flush()
    }
    /// Up to `limit` events with revisions above `after`, in revision order.
    fn events(&self, after: u64, limit: usize) -> Result<Vec<Event>>;
    /// The commit time of the event at `revision`, if it is still in the log.
    fn event_time(&self, revision: u64) -> Result<Option<u64>>;
    /// The revision at and below which events must go for those above it to take at
    /// most `budget` bytes (0 when all of them fit), and the bytes of those above it.
    /// Reads from the newest down, no further than the budget.
    fn event_bytes_floor(&self, budget: u64) -> Result<(u64, u64)>;
    /// Durably records the compaction floor.
    fn set_compacted(&self, floor: u64) -> Result<()>;
    /// Drops up to `limit` events at or below `floor`; returns how many were dropped.
    fn drop_events(&self, floor: u64, limit: usize) -> Result<usize>;
    /// Every stored entry in its raw form, for snapshots and backups.
    fn raw_entries(&self) -> Box<dyn Iterator<Item = Result<RawEntry>> + '_>;
    /// Adds raw entries (as given by [`Backend::raw_entries`]) to an empty backend.
    fn load_raw(&self, entries: &mut dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>)
    -> Result<()>;
    /// Makes everything written so far durable.
    fn flush(&self) -> Result<()>;
    /// The last call, once nothing writes any more: makes everything durable and lets
    /// go of the data directory, so that a berth started on it at once can open it even
    /// while a task of this one still holds the store.
    fn close(&self) -> Result<()> {
        self.flush()
    }
    /// Bytes the store takes on disk.
    fn disk_bytes(&self) -> u64 {
        0
    }
}
