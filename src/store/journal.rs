//! The write-ahead journal of berth's earlier releases, which made the sled engine's
//! commits durable: what a crash left in it is replayed into sled before a store is
//! converted to the log engine ([`super::sled_backend::convert`]).
//!
//! A file `journal-<generation>` in the store's directory is a run of records
//! `len u32 LE | crc32 u32 LE | first revision u64 BE | segment`, the segment being the
//! commit's events as the event log keeps them. A zero length ends the file: the rest is
//! preallocated and unwritten.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::backend::{Backend, CommitBatch, Event};
use super::segment::decode_segment;
#[cfg(test)]
use super::segment::encode_segment;
#[cfg(test)]
use super::sled_backend::SledBackend;
use super::{Error, Result};

/// Bytes before a record's payload.
const HEADER: usize = 8;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

fn corrupt(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Backend {
        context: format!("replay journal {}", path.display()),
        message: message.to_string(),
    }
}

#[cfg(test)]
fn file_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("journal-{generation:020}"))
}

/// The journal files in `dir`, oldest first.
fn files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(io(format!("list {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("list {}", dir.display())))?;
        let name = entry.file_name();
        let Some(generation) = name
            .to_str()
            .and_then(|n| n.strip_prefix("journal-"))
            .and_then(|g| g.parse().ok())
        else {
            continue;
        };
        out.push((generation, entry.path()));
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
/// `buf` := the record of a commit whose first revision is `first`.
fn encode_record(buf: &mut Vec<u8>, first: u64, segment: &[u8]) -> Result<()> {
    let len = u32::try_from(8 + segment.len()).map_err(|_| Error::Backend {
        context: "write journal".into(),
        message: "a commit of more than 4 GiB".into(),
    })?;
    buf.clear();
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&first.to_be_bytes());
    buf.extend_from_slice(segment);
    let crc = crc32fast::hash(&buf[HEADER..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// One record of a journal file: the commit's first revision and its events.
struct Entry {
    first: u64,
    events: Vec<Event>,
}

/// The whole records of `bytes`, in order; stops at the end mark or at a record that was
/// cut short or does not match its checksum (a write that was never acknowledged).
fn records(path: &Path, bytes: &[u8]) -> Result<(Vec<Entry>, bool)> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= HEADER {
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        if len == 0 {
            return Ok((out, false));
        }
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return Ok((out, true));
        };
        if crc32fast::hash(payload) != crc || payload.len() < 8 {
            return Ok((out, true));
        }
        let first = u64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
        let events =
            decode_segment(first, &payload[8..]).map_err(|e| corrupt(path, e.to_string()))?;
        out.push(Entry { first, events });
        rest = &rest[HEADER + len..];
    }
    Ok((out, !rest.iter().all(|b| *b == 0)))
}

/// Replays every journal record in `dir` that `backend` does not hold yet, makes it
/// durable there and removes the journal; returns the generation to go on with.
pub(super) fn recover(backend: &dyn Backend, dir: &Path) -> Result<u64> {
    let found = files(dir)?;
    let mut revision = backend.meta()?.revision;
    let mut replayed = 0usize;
    for (i, (_, path)) in found.iter().enumerate() {
        let bytes = std::fs::read(path).map_err(io(format!("read {}", path.display())))?;
        let (entries, torn) = records(path, &bytes)?;
        for Entry { first, events } in entries {
            let Some(last) = first
                .checked_add(events.len() as u64)
                .and_then(|end| end.checked_sub(1))
                .filter(|_| !events.is_empty())
            else {
                continue;
            };
            if last <= revision {
                continue;
            }
            if first != revision + 1 {
                return Err(corrupt(
                    path,
                    format!(
                        "it continues at revision {first}, but the store holds up to {revision}; \
                         restore a backup with `berth snapshot restore`"
                    ),
                ));
            }
            let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
            backend.write(&CommitBatch {
                revision: last,
                events: &events,
                schema: None,
            })?;
            revision = last;
            replayed += 1;
        }
        if torn {
            tracing::warn!(
                file = %path.display(),
                later_files = found.len() - i - 1,
                "dropped the journal's last record: it was cut short by a crash and never acknowledged"
            );
        }
    }
    backend.flush()?;
    if replayed > 0 {
        tracing::info!(records = replayed, revision, "replayed the store's journal");
    }
    for (_, path) in &found {
        std::fs::remove_file(path).map_err(io(format!("remove {}", path.display())))?;
    }
    Ok(found.last().map_or(0, |(g, _)| g + 1))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::store::backend::EventKind;

    fn created(revision: u64, name: &str) -> Arc<Event> {
        Arc::new(Event {
            revision,
            key: Arc::from(format!("/t/{name}")),
            kind: EventKind::Created,
            object: Bytes::from(format!(r#"{{"metadata":{{"name":"{name}"}}}}"#)),
            prev: None,
            time_ms: 1,
        })
    }

    fn record(events: &[Arc<Event>]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_record(&mut buf, events[0].revision, &encode_segment(events)).unwrap();
        buf
    }

    fn revisions(bytes: &[u8]) -> (Vec<u64>, bool) {
        let (entries, torn) = records(Path::new("j"), bytes).unwrap();
        let revs = entries
            .iter()
            .flat_map(|e| e.events.iter().map(|ev| ev.revision))
            .collect();
        (revs, torn)
    }

    /// A backend in `dir` that holds revision 1 (object `a`) durably.
    fn at_revision_one(dir: &Path) -> SledBackend {
        let sled = SledBackend::open(dir, 1 << 20).unwrap();
        sled.commit(&CommitBatch {
            revision: 1,
            events: &[created(1, "a")],
            schema: None,
        })
        .unwrap();
        sled
    }

    #[test]
    fn a_record_cut_short_or_damaged_ends_the_journal() {
        let mut whole = record(&[created(1, "a"), created(2, "b")]);
        whole.extend(record(&[created(3, "c")]));
        assert_eq!(revisions(&whole), (vec![1, 2, 3], false));
        // Preallocated space after the records reads as zeros: the end mark.
        let mut padded = whole.clone();
        padded.extend([0; 64]);
        assert_eq!(revisions(&padded), (vec![1, 2, 3], false));
        // A crash in the middle of the last write.
        let cut = &whole[..whole.len() - 3];
        assert_eq!(revisions(cut), (vec![1, 2], true));
        let header_only = &whole[..whole.len() - record(&[created(3, "c")]).len() + 5];
        assert_eq!(revisions(header_only), (vec![1, 2], true));
        // A damaged byte fails the checksum.
        let mut damaged = whole.clone();
        let last = damaged.len() - 2;
        damaged[last] ^= 0x40;
        assert_eq!(revisions(&damaged), (vec![1, 2], true));
    }

    #[test]
    fn recovery_replays_what_the_backend_lacks_and_refuses_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let sled = at_revision_one(dir.path());
        // The journal holds revision 1 (already in the backend), then 2 and 3.
        let mut bytes = record(&[created(1, "a")]);
        bytes.extend(record(&[created(2, "b"), created(3, "c")]));
        std::fs::write(file_path(dir.path(), 4), &bytes).unwrap();
        assert_eq!(recover(&sled, dir.path()).unwrap(), 5);
        assert_eq!(sled.meta().unwrap().revision, 3);
        let names: Vec<_> = sled
            .objects()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(names, ["/t/a", "/t/b", "/t/c"].map(Arc::<str>::from));
        assert_eq!(sled.events(0, 10).unwrap().len(), 3);
        assert!(files(dir.path()).unwrap().is_empty(), "the journal is gone");

        // A record that does not follow what the backend holds is a lost stretch of
        // history: refuse rather than guess.
        std::fs::write(file_path(dir.path(), 5), record(&[created(7, "g")])).unwrap();
        let e = recover(&sled, dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("continues at revision 7") && e.contains("holds up to 3"),
            "{e}"
        );
        assert_eq!(sled.meta().unwrap().revision, 3);
    }

    #[test]
    fn an_offline_snapshot_holds_what_only_the_journal_held() {
        let data = tempfile::tempdir().unwrap();
        let dir = crate::store::store_dir(data.path());
        drop(at_revision_one(&dir));
        // As a crash leaves it: the last commits in the journal only.
        std::fs::write(
            file_path(&dir, 0),
            record(&[created(2, "b"), created(3, "c")]),
        )
        .unwrap();
        let file = data.path().join("out.snap");
        let info = crate::store::snapshot::save(data.path(), &file).unwrap();
        assert_eq!((info.revision, info.entries > 3), (3, true));
        assert!(files(&dir).unwrap().is_empty());
    }
}
