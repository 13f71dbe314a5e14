//! The sled engine of berth's earlier releases: the only file in berth that names sled.
//! A store it kept is converted to the log engine ([`super::log`]) when berth opens it
//! ([`convert`]); tests use it to make such stores.
//!
//! One tree holds everything in the layout of [`super::segment`], so that a group
//! commit is a single atomic `apply_batch`.
//!
//! Opening blocks its thread while sled lets go of a lock: it waits on the wall clock
//! (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::backend::{Backend, CommitBatch, Event, EventKind, Meta, RawEntry, Record};
use super::segment::{
    COMPACTED, OBJECT, REVISION, SCHEMA, corrupt, decode_segment, encode_segment, event_key,
    object_key, segment_header, segment_start,
};
use super::{Error, Result};

pub struct SledBackend {
    db: sled::Db,
}

fn backend_err(context: impl Into<String>) -> impl FnOnce(sled::Error) -> Error {
    let context = context.into();
    move |e| match e {
        sled::Error::Io(source) => Error::Io { context, source },
        other => Error::Backend {
            context,
            message: other.to_string(),
        },
    }
}

fn is_lock_error(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock)
        || e.to_string().contains("lock")
}

impl SledBackend {
    /// Opens (or creates) the database in `dir` with a page cache of `cache_bytes`.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
        // sled's background threads release the directory lock a moment after the last
        // handle is dropped, so a reopen in the same process may briefly find it taken.
        let mut delay = std::time::Duration::from_millis(5);
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            let opened = sled::Config::new()
                .path(dir)
                .cache_capacity(cache_bytes)
                .flush_every_ms(None)
                .mode(sled::Mode::HighThroughput)
                .open();
            match opened {
                Ok(db) => return Ok(Self { db }),
                Err(e) if is_lock_error(&e) => {
                    if std::time::Instant::now() >= give_up {
                        return Err(Error::InUse {
                            dir: dir.display().to_string(),
                        });
                    }
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(backend_err(format!("open store in {}", dir.display()))(e)),
            }
        }
    }

    fn read_u64(&self, key: &[u8]) -> Result<u64> {
        match self
            .db
            .get(key)
            .map_err(backend_err("read store metadata"))?
        {
            None => Ok(0),
            Some(v) => Ok(u64::from_be_bytes(
                v.as_ref().try_into().map_err(|_| corrupt("metadata"))?,
            )),
        }
    }
}

/// The entries a commit writes (`None`: removes), in order, the revision last.
fn changes<'a>(
    batch: &'a CommitBatch<'_>,
    segment: Option<&'a [u8]>,
) -> impl Iterator<Item = (Vec<u8>, Option<sled::IVec>)> + 'a {
    let objects = batch.events.iter().map(|e| match e.kind {
        EventKind::Deleted => (object_key(&e.key), None),
        EventKind::Created | EventKind::Updated => {
            let mut v = Vec::with_capacity(8 + e.object.len());
            v.extend_from_slice(&e.revision.to_be_bytes());
            v.extend_from_slice(&e.object);
            (object_key(&e.key), Some(v.into()))
        }
    });
    let log = batch.events.first().zip(segment).map(|(first, segment)| {
        debug_assert!(
            batch
                .events
                .iter()
                .enumerate()
                .all(|(i, e)| e.revision == first.revision + i as u64),
            "a commit's revisions are consecutive"
        );
        (event_key(first.revision).to_vec(), Some(segment.into()))
    });
    let schema = batch
        .schema
        .map(|s| (SCHEMA.to_vec(), Some(s.to_be_bytes()[..].into())));
    objects.chain(log).chain(schema).chain(std::iter::once((
        REVISION.to_vec(),
        Some(batch.revision.to_be_bytes()[..].into()),
    )))
}

/// Whether `dir` holds a store that sled kept.
pub(super) fn is_sled_store(dir: &Path) -> bool {
    dir.join("conf").is_file() && dir.join("db").is_file()
}

/// `dir` with `suffix` added to its name.
fn sibling(dir: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = dir.as_os_str().to_os_string();
    name.push(suffix);
    name.into()
}

/// Converts the sled store in `dir`, with what its journal holds, to the log engine, in
/// place; finishes or undoes a conversion that a crash interrupted. The new store is
/// built beside the old one and swapped in by two renames; the old one goes last.
pub(super) fn convert(dir: &Path, file_bytes: u64) -> Result<()> {
    let staging = sibling(dir, ".converting");
    let old = sibling(dir, ".sled");
    let io = |context: String| move |source| Error::Io { context, source };
    if !dir.exists() && old.exists() {
        // Between the two renames: the staged store is whole.
        let from = if staging.exists() { &staging } else { &old };
        std::fs::rename(from, dir).map_err(io(format!("rename {}", from.display())))?;
    }
    if is_sled_store(dir) {
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .map_err(io(format!("remove {}", staging.display())))?;
        }
        let sled = SledBackend::open(dir, 16 << 20)?;
        super::journal::recover(&sled, dir)?;
        let meta = sled.meta()?;
        {
            let log = super::log::LogBackend::open(&staging, file_bytes)?;
            log.load_raw(&mut sled.raw_entries())?;
        }
        drop(sled);
        std::fs::rename(dir, &old).map_err(io(format!("rename {}", dir.display())))?;
        std::fs::rename(&staging, dir).map_err(io(format!("rename {}", staging.display())))?;
        if let Some(parent) = dir.parent() {
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(io(format!("sync {}", parent.display())))?;
        }
        tracing::info!(
            dir = %dir.display(),
            revision = meta.revision,
            "converted the store from sled to the log engine"
        );
    }
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(io(format!("remove {}", old.display())))?;
    }
    Ok(())
}

impl Backend for SledBackend {
    fn meta(&self) -> Result<Meta> {
        let schema = match self
            .db
            .get(SCHEMA)
            .map_err(backend_err("read schema version"))?
        {
            None => 0,
            Some(v) => u32::from_be_bytes(v.as_ref().try_into().map_err(|_| corrupt("schema"))?),
        };
        Ok(Meta {
            schema,
            revision: self.read_u64(REVISION)?,
            compacted: self.read_u64(COMPACTED)?,
        })
    }

    fn objects(&self) -> Result<Vec<(Arc<str>, Record)>> {
        let mut out = Vec::new();
        for kv in self.db.scan_prefix(OBJECT) {
            let (k, v) = kv.map_err(backend_err("load objects"))?;
            let key = std::str::from_utf8(&k[OBJECT.len()..]).map_err(|_| corrupt("object"))?;
            if v.len() < 8 {
                return Err(corrupt("object"));
            }
            let revision = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
            out.push((
                Arc::from(key),
                Record {
                    revision,
                    value: Bytes::copy_from_slice(&v[8..]),
                },
            ));
        }
        Ok(out)
    }

    fn write(&self, batch: &CommitBatch<'_>) -> Result<()> {
        let segment = batch.events.first().map(|_| encode_segment(batch.events));
        let mut b = sled::Batch::default();
        for (key, value) in changes(batch, segment.as_deref()) {
            match value {
                Some(v) => b.insert(key, v),
                None => b.remove(key),
            }
        }
        self.db.apply_batch(b).map_err(backend_err("write batch"))?;
        Ok(())
    }

    fn events(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        let Some(start) = after.checked_add(1) else {
            return Ok(Vec::new());
        };
        // Begin with the segment that holds `start`, which may begin before it.
        let from = match self.db.range(event_key(0)..=event_key(start)).next_back() {
            Some(kv) => kv.map_err(backend_err("read event log"))?.0.to_vec(),
            None => event_key(0).to_vec(),
        };
        let mut out = Vec::new();
        for kv in self.db.range(from..=event_key(u64::MAX).to_vec()) {
            let (k, v) = kv.map_err(backend_err("read event log"))?;
            for e in decode_segment(segment_start(&k)?, &v)? {
                if e.revision > after {
                    out.push(e);
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
        }
        Ok(out)
    }

    fn event_time(&self, revision: u64) -> Result<Option<u64>> {
        let Some(kv) = self
            .db
            .range(event_key(0)..=event_key(revision))
            .next_back()
        else {
            return Ok(None);
        };
        let (k, v) = kv.map_err(backend_err("read event log"))?;
        let (time, count) = segment_header(&v)?;
        Ok((revision < segment_start(&k)? + u64::from(count)).then_some(time))
    }

    fn event_bytes_floor(&self, budget: u64) -> Result<(u64, u64)> {
        let mut bytes = 0u64;
        for kv in self.db.range(event_key(0)..=event_key(u64::MAX)).rev() {
            let (k, v) = kv.map_err(backend_err("read event log"))?;
            let size = (k.len() + v.len()) as u64;
            if bytes + size > budget {
                // This segment, and all below it, go.
                let (_, count) = segment_header(&v)?;
                return Ok((segment_start(&k)? + u64::from(count).max(1) - 1, bytes));
            }
            bytes += size;
        }
        Ok((0, bytes))
    }

    fn set_compacted(&self, floor: u64) -> Result<()> {
        self.db
            .insert(COMPACTED, &floor.to_be_bytes()[..])
            .map_err(backend_err("record compaction"))?;
        self.flush()
    }

    fn drop_events(&self, floor: u64, limit: usize) -> Result<usize> {
        let mut b = sled::Batch::default();
        let mut n = 0;
        for kv in self.db.range(event_key(0)..=event_key(floor)).take(limit) {
            let (k, v) = kv.map_err(backend_err("compact event log"))?;
            let (_, count) = segment_header(&v)?;
            // A segment goes only once all of it is at or below the floor.
            if segment_start(&k)? + u64::from(count) > floor + 1 {
                break;
            }
            b.remove(k);
            n += 1;
        }
        if n > 0 {
            self.db
                .apply_batch(b)
                .map_err(backend_err("compact event log"))?;
        }
        Ok(n)
    }

    fn raw_entries(&self) -> Box<dyn Iterator<Item = Result<RawEntry>> + '_> {
        Box::new(self.db.iter().map(|kv| {
            kv.map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(backend_err("read store"))
        }))
    }

    fn load_raw(&self, entries: &mut dyn Iterator<Item = Result<RawEntry>>) -> Result<()> {
        let mut b = sled::Batch::default();
        let mut pending = 0usize;
        for kv in entries {
            let (k, v) = kv?;
            pending += k.len() + v.len();
            b.insert(k, v);
            if pending > 8 << 20 {
                self.db
                    .apply_batch(std::mem::take(&mut b))
                    .map_err(backend_err("load entries"))?;
                pending = 0;
            }
        }
        self.db
            .apply_batch(b)
            .map_err(backend_err("load entries"))?;
        self.flush()
    }

    fn flush(&self) -> Result<()> {
        self.db
            .flush()
            .map_err(backend_err("flush store to disk"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_compaction_respect_segment_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let b = SledBackend::open(dir.path(), 1 << 20).unwrap();
        // Three commits: revisions 1-3, 4, 5-6.
        let ev = |rev: u64| {
            Arc::new(Event {
                revision: rev,
                key: Arc::from(format!("/k/{rev}")),
                kind: EventKind::Created,
                object: Bytes::from_static(b"{}"),
                prev: None,
                time_ms: rev * 10,
            })
        };
        for revs in [1..=3u64, 4..=4, 5..=6] {
            let events: Vec<_> = revs.clone().map(ev).collect();
            let revision = *revs.end();
            b.commit(&CommitBatch {
                revision,
                events: &events,
                schema: None,
            })
            .unwrap();
        }
        let revs = |after, limit| -> Vec<u64> {
            b.events(after, limit)
                .unwrap()
                .iter()
                .map(|e| e.revision)
                .collect()
        };
        assert_eq!(revs(0, 100), [1, 2, 3, 4, 5, 6]);
        assert_eq!(revs(1, 100), [2, 3, 4, 5, 6]);
        assert_eq!(revs(2, 2), [3, 4]);
        assert_eq!(revs(6, 100), Vec::<u64>::new());
        assert_eq!(b.event_time(2).unwrap(), Some(10));
        assert_eq!(b.event_time(6).unwrap(), Some(50));
        assert_eq!(b.event_time(7).unwrap(), None);
        // Floor 2 drops nothing (the first segment reaches 3); floor 4 drops two segments.
        assert_eq!(b.drop_events(2, 100).unwrap(), 0);
        assert_eq!(b.drop_events(4, 100).unwrap(), 2);
        assert_eq!(revs(4, 100), [5, 6]);
        assert_eq!(b.event_time(3).unwrap(), None);
    }
}
