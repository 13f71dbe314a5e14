//! The sled backend: the only file in berth that names sled.
//!
//! One tree holds everything, so that a group commit can be a single atomic `apply_batch`
//! (or, behind the journal, a run of writes that ends with the revision):
//!
//! | key                     | value                                         |
//! |-------------------------|-----------------------------------------------|
//! | `m/schema`              | schema version, u32 big-endian                |
//! | `m/rev`                 | revision of the last commit, u64 big-endian   |
//! | `m/compacted`           | compaction floor, u64 big-endian              |
//! | `o/<key>`               | revision (u64 BE) then the object's JSON      |
//! | `e/<revision u64 BE>`   | a segment: the events of one commit, from this revision on (see [`encode_segment`]) |
//!
//! Keeping a whole commit's events in one entry makes the log cost one insert per group
//! commit instead of one per write.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::backend::{Backend, CommitBatch, Event, EventKind, Meta, RawEntry, Record};
use super::{Error, Result};

const SCHEMA: &[u8] = b"m/schema";
const REVISION: &[u8] = b"m/rev";
const COMPACTED: &[u8] = b"m/compacted";
const OBJECT: &[u8] = b"o/";
const EVENT: &[u8] = b"e/";

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

fn corrupt(what: &str) -> Error {
    Error::Backend {
        context: "read store".into(),
        message: format!("corrupt {what} record"),
    }
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

    /// Writes a commit's changes one by one, its revision last, with `segment` (its events
    /// as [`encode_segment`] gives them) as the log entry. A crash may keep part of the
    /// commit but never its revision without all of it, so this is only for a writer that
    /// keeps the commit durably elsewhere and writes it again after a crash: the journal.
    /// It spares sled's atomic batch, which sends two buffer writes to sled's I/O threads
    /// every time.
    pub(super) fn write_in_order(&self, batch: &CommitBatch<'_>, segment: &[u8]) -> Result<()> {
        for (key, value) in changes(batch, Some(segment)) {
            match value {
                Some(v) => self.db.insert(key, v),
                None => self.db.remove(key),
            }
            .map_err(backend_err("write commit"))?;
        }
        Ok(())
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

fn object_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(OBJECT.len() + key.len());
    k.extend_from_slice(OBJECT);
    k.extend_from_slice(key.as_bytes());
    k
}

fn event_key(revision: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[..2].copy_from_slice(EVENT);
    k[2..].copy_from_slice(&revision.to_be_bytes());
    k
}

/// `time u64 | count u32`, then each event as
/// `kind u8 | key_len u32 | key | object_len u32 | object | prev_rev u64 [| prev_len u32 | prev]`
/// (`prev_rev` 0 when there is no previous object). The events of a segment have
/// consecutive revisions starting at the segment's key, and share one commit time.
pub(super) fn encode_segment(events: &[Arc<Event>]) -> Vec<u8> {
    let size: usize = events
        .iter()
        .map(|e| 29 + e.key.len() + e.object.len() + e.prev.as_ref().map_or(0, |p| p.value.len()))
        .sum();
    let mut out = Vec::with_capacity(12 + size);
    out.extend_from_slice(&events.first().map_or(0, |e| e.time_ms).to_be_bytes());
    out.extend_from_slice(&(events.len() as u32).to_be_bytes());
    for e in events {
        out.push(match e.kind {
            EventKind::Created => 0,
            EventKind::Updated => 1,
            EventKind::Deleted => 2,
        });
        out.extend_from_slice(&(e.key.len() as u32).to_be_bytes());
        out.extend_from_slice(e.key.as_bytes());
        out.extend_from_slice(&(e.object.len() as u32).to_be_bytes());
        out.extend_from_slice(&e.object);
        match &e.prev {
            None => out.extend_from_slice(&0u64.to_be_bytes()),
            Some(p) => {
                out.extend_from_slice(&p.revision.to_be_bytes());
                out.extend_from_slice(&(p.value.len() as u32).to_be_bytes());
                out.extend_from_slice(&p.value);
            }
        }
    }
    out
}

/// The commit time and number of events of a segment.
fn segment_header(b: &[u8]) -> Result<(u64, u32)> {
    let mut r = Reader(b);
    Ok((r.u64()?, r.u32()?))
}

pub(super) fn decode_segment(first: u64, b: &[u8]) -> Result<Vec<Event>> {
    let mut r = Reader(b);
    let time_ms = r.u64()?;
    let count = r.u32()?;
    let mut out = Vec::with_capacity(count.min(4096) as usize);
    for i in 0..u64::from(count) {
        let kind = match r.take(1)?[0] {
            0 => EventKind::Created,
            1 => EventKind::Updated,
            2 => EventKind::Deleted,
            _ => return Err(corrupt("event")),
        };
        let key_len = r.u32()? as usize;
        let key = std::str::from_utf8(r.take(key_len)?).map_err(|_| corrupt("event"))?;
        let obj_len = r.u32()? as usize;
        let object = Bytes::copy_from_slice(r.take(obj_len)?);
        let prev_rev = r.u64()?;
        let prev = if prev_rev == 0 {
            None
        } else {
            let len = r.u32()? as usize;
            Some(Record {
                revision: prev_rev,
                value: Bytes::copy_from_slice(r.take(len)?),
            })
        };
        out.push(Event {
            revision: first + i,
            key: Arc::from(key),
            kind,
            object,
            prev,
            time_ms,
        });
    }
    if !r.0.is_empty() {
        return Err(corrupt("event"));
    }
    Ok(out)
}

fn segment_start(k: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(
        k.get(2..10)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| corrupt("event"))?,
    ))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(corrupt("event"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
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

    fn events() -> Vec<Arc<Event>> {
        [
            None,
            Some(Record {
                revision: 3,
                value: Bytes::from_static(b"{\"a\":1}"),
            }),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, prev)| {
            Arc::new(Event {
                revision: 9 + i as u64,
                key: Arc::from(format!("/registry/pods/default/{i}")),
                kind: if prev.is_some() {
                    EventKind::Updated
                } else {
                    EventKind::Created
                },
                object: Bytes::from_static(b"{\"b\":2}"),
                prev,
                time_ms: 1234,
            })
        })
        .collect()
    }

    #[test]
    fn segments_round_trip_through_their_encoding() {
        let want = events();
        let got = decode_segment(9, &encode_segment(&want)).unwrap();
        assert_eq!(got, want.iter().map(|e| (**e).clone()).collect::<Vec<_>>());
        assert_eq!(segment_header(&encode_segment(&want)).unwrap(), (1234, 2));
    }

    #[test]
    fn damaged_segments_are_errors_not_panics() {
        let bytes = encode_segment(&events());
        for n in 0..bytes.len() {
            assert!(
                decode_segment(9, &bytes[..n]).is_err(),
                "prefix of {n} bytes"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_segment(9, &longer).is_err());
    }

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
