//! The sled backend: the only file in berth that names sled.
//!
//! One tree holds everything, so that a group commit is a single atomic `apply_batch`:
//!
//! | key                     | value                                         |
//! |-------------------------|-----------------------------------------------|
//! | `m/schema`              | schema version, u32 big-endian                |
//! | `m/rev`                 | revision of the last commit, u64 big-endian   |
//! | `m/compacted`           | compaction floor, u64 big-endian              |
//! | `o/<key>`               | revision (u64 BE) then the object's JSON      |
//! | `e/<revision u64 BE>`   | one event (see [`encode_event`])              |

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

fn corrupt(what: &str) -> Error {
    Error::Backend {
        context: "read store".into(),
        message: format!("corrupt {what} record"),
    }
}

impl SledBackend {
    /// Opens (or creates) the database in `dir` with a page cache of `cache_bytes`.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|e| {
                let in_use = matches!(&e, sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock)
                    || e.to_string().contains("lock");
                if in_use {
                    Error::InUse {
                        dir: dir.display().to_string(),
                    }
                } else {
                    backend_err(format!("open store in {}", dir.display()))(e)
                }
            })?;
        Ok(Self { db })
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

/// `time u64 | kind u8 | key_len u32 | key | object_len u32 | object | prev_rev u64 | prev`
/// with `prev_rev` 0 when there is no previous object.
fn encode_event(e: &Event) -> Vec<u8> {
    let prev_len = e.prev.as_ref().map_or(0, |p| p.value.len());
    let mut out = Vec::with_capacity(29 + e.key.len() + e.object.len() + prev_len);
    out.extend_from_slice(&e.time_ms.to_be_bytes());
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
            out.extend_from_slice(&p.value);
        }
    }
    out
}

fn decode_event(revision: u64, b: &[u8]) -> Result<Event> {
    let mut r = Reader(b);
    let time_ms = r.u64()?;
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
    let prev = (prev_rev != 0).then(|| Record {
        revision: prev_rev,
        value: Bytes::copy_from_slice(r.0),
    });
    Ok(Event {
        revision,
        key: Arc::from(key),
        kind,
        object,
        prev,
        time_ms,
    })
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

    fn commit(&self, batch: &CommitBatch<'_>) -> Result<()> {
        let mut b = sled::Batch::default();
        for e in batch.events {
            match e.kind {
                EventKind::Deleted => b.remove(object_key(&e.key)),
                EventKind::Created | EventKind::Updated => {
                    let mut v = Vec::with_capacity(8 + e.object.len());
                    v.extend_from_slice(&e.revision.to_be_bytes());
                    v.extend_from_slice(&e.object);
                    b.insert(object_key(&e.key), v);
                }
            }
            b.insert(&event_key(e.revision)[..], encode_event(e));
        }
        b.insert(REVISION, &batch.revision.to_be_bytes()[..]);
        if let Some(schema) = batch.schema {
            b.insert(SCHEMA, &schema.to_be_bytes()[..]);
        }
        self.db.apply_batch(b).map_err(backend_err("write batch"))?;
        self.flush()
    }

    fn events(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        let Some(start) = after.checked_add(1) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for kv in self
            .db
            .range(event_key(start)..=event_key(u64::MAX))
            .take(limit)
        {
            let (k, v) = kv.map_err(backend_err("read event log"))?;
            let revision = u64::from_be_bytes(k[2..].try_into().map_err(|_| corrupt("event"))?);
            out.push(decode_event(revision, &v)?);
        }
        Ok(out)
    }

    fn event_time(&self, revision: u64) -> Result<Option<u64>> {
        let v = self
            .db
            .get(event_key(revision))
            .map_err(backend_err("read event log"))?;
        v.map(|v| Reader(&v).u64()).transpose()
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
        for k in self
            .db
            .range(event_key(0)..=event_key(floor))
            .keys()
            .take(limit)
        {
            b.remove(k.map_err(backend_err("compact event log"))?);
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
    fn events_round_trip_through_their_encoding() {
        for prev in [
            None,
            Some(Record {
                revision: 3,
                value: Bytes::from_static(b"{\"a\":1}"),
            }),
        ] {
            let e = Event {
                revision: 9,
                key: Arc::from("/registry/pods/default/a"),
                kind: EventKind::Updated,
                object: Bytes::from_static(b"{\"b\":2}"),
                prev,
                time_ms: 1234,
            };
            assert_eq!(decode_event(9, &encode_event(&e)).unwrap(), e);
        }
    }

    #[test]
    fn truncated_events_are_errors_not_panics() {
        let e = Event {
            revision: 1,
            key: Arc::from("k"),
            kind: EventKind::Created,
            object: Bytes::from_static(b"{}"),
            prev: None,
            time_ms: 1,
        };
        let bytes = encode_event(&e);
        for n in 0..bytes.len() {
            assert!(decode_event(1, &bytes[..n]).is_err(), "prefix of {n} bytes");
        }
    }
}
