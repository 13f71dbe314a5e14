//! The bytes of the store's records, shared by its engines: a commit's events as one
//! segment, and the raw entries of snapshots (the layout below, which berth's first
//! engine kept its tree in and snapshot files still carry).
//!
//! | key                     | value                                         |
//! |-------------------------|-----------------------------------------------|
//! | `m/schema`              | schema version, u32 big-endian                |
//! | `m/rev`                 | revision of the last commit, u64 big-endian   |
//! | `m/compacted`           | compaction floor, u64 big-endian              |
//! | `o/<key>`               | revision (u64 BE) then the object's JSON      |
//! | `e/<revision u64 BE>`   | a segment: the events of one commit, from this revision on |

use std::sync::Arc;

use bytes::Bytes;

use super::backend::{Event, EventKind, Meta, RawEntry, Record};
use super::{Error, Result};

pub(super) const SCHEMA: &[u8] = b"m/schema";
pub(super) const REVISION: &[u8] = b"m/rev";
pub(super) const COMPACTED: &[u8] = b"m/compacted";
pub(super) const OBJECT: &[u8] = b"o/";
pub(super) const EVENT: &[u8] = b"e/";

pub(super) fn corrupt(what: &str) -> Error {
    Error::Backend {
        context: "read store".into(),
        message: format!("corrupt {what} record"),
    }
}

pub(super) fn object_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(OBJECT.len() + key.len());
    k.extend_from_slice(OBJECT);
    k.extend_from_slice(key.as_bytes());
    k
}

pub(super) fn event_key(revision: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[..2].copy_from_slice(EVENT);
    k[2..].copy_from_slice(&revision.to_be_bytes());
    k
}

/// The raw entries of a store's bookkeeping.
pub(super) fn meta_entries(meta: &Meta) -> Vec<RawEntry> {
    vec![
        (COMPACTED.to_vec(), meta.compacted.to_be_bytes().to_vec()),
        (REVISION.to_vec(), meta.revision.to_be_bytes().to_vec()),
        (SCHEMA.to_vec(), meta.schema.to_be_bytes().to_vec()),
    ]
}

/// The raw entry of one object.
pub(super) fn object_entry(key: &str, record: &Record) -> RawEntry {
    let mut v = Vec::with_capacity(8 + record.value.len());
    v.extend_from_slice(&record.revision.to_be_bytes());
    v.extend_from_slice(&record.value);
    (object_key(key), v)
}

/// A store read back from raw entries.
#[derive(Default)]
pub(super) struct Parsed {
    pub(super) meta: Meta,
    pub(super) objects: Vec<(Arc<str>, Record)>,
    /// `(first revision, segment)` of each retained commit.
    pub(super) segments: Vec<(u64, Vec<u8>)>,
}

impl Parsed {
    pub(super) fn add(&mut self, k: &[u8], v: Vec<u8>) -> Result<()> {
        let u64_of = |v: &[u8], what| -> Result<u64> {
            Ok(u64::from_be_bytes(v.try_into().map_err(|_| corrupt(what))?))
        };
        if k == SCHEMA {
            self.meta.schema = u32::from_be_bytes(v[..].try_into().map_err(|_| corrupt("schema"))?);
        } else if k == REVISION {
            self.meta.revision = u64_of(&v, "metadata")?;
        } else if k == COMPACTED {
            self.meta.compacted = u64_of(&v, "metadata")?;
        } else if let Some(key) = k.strip_prefix(OBJECT) {
            let key = std::str::from_utf8(key).map_err(|_| corrupt("object"))?;
            if v.len() < 8 {
                return Err(corrupt("object"));
            }
            self.objects.push((
                Arc::from(key),
                Record {
                    revision: u64_of(&v[..8], "object")?,
                    value: Bytes::copy_from_slice(&v[8..]),
                },
            ));
        } else if k.starts_with(EVENT) {
            segment_header(&v)?;
            self.segments.push((segment_start(k)?, v));
        } else {
            return Err(corrupt("unknown"));
        }
        Ok(())
    }
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
pub(super) fn segment_header(b: &[u8]) -> Result<(u64, u32)> {
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

pub(super) fn segment_start(k: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(
        k.get(2..10)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| corrupt("event"))?,
    ))
}

pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(corrupt("event"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
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
}
