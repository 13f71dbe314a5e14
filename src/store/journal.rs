//! The write-ahead journal: what makes a commit durable.
//!
//! sled makes its writes durable with `flush`, which hands the bytes to sled's I/O thread
//! pool, wakes every idle thread of the pool for it, and waits to be woken in turn. One
//! commit then costs about three times a plain `fdatasync`. Here a commit goes to sled
//! without a flush and, as one checksummed record, to a preallocated journal file that the
//! committer writes and syncs itself: one `pwrite` and one `fdatasync`, no thread hops.
//!
//! Every few seconds (or megabytes) the committer moves on to a fresh file and a
//! checkpoint thread flushes sled, off the write path; once sled holds everything the old
//! file holds, the file goes. Opening the store replays the records that sled does not
//! hold yet, so a crash loses no acknowledged write and never leaves half of one: a record
//! is whole and its checksum matches, or it was never acknowledged and is dropped.
//!
//! A file `journal-<generation>` in the store's directory is a run of records
//! `len u32 LE | crc32 u32 LE | first revision u64 BE | segment`, the segment being the
//! commit's events as the event log keeps them. A zero length ends the file: the rest is
//! preallocated and unwritten.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::backend::{Backend, CommitBatch, Event, Meta, RawEntry, Record};
use super::sled_backend::{SledBackend, decode_segment, encode_segment};
use super::{Error, Result};

/// A file's records are checkpointed at the latest this long after its first one.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(2);
/// Bytes before a record's payload.
const HEADER: usize = 8;

/// A backend whose commits are made durable by the journal.
pub(super) struct Journaled {
    inner: Arc<SledBackend>,
    dir: PathBuf,
    writer: Mutex<Writer>,
    spare: Arc<Spare>,
    checkpoints: Mutex<Option<(mpsc::Sender<Checkpoint>, std::thread::JoinHandle<()>)>>,
    /// Space reserved per file; past it a checkpoint is due.
    file_bytes: u64,
    /// A commit failed: what sled holds is in doubt, so the journal stays for the next start.
    failed: AtomicBool,
}

/// The file being written.
struct Writer {
    file: File,
    generation: u64,
    /// Where the next record goes.
    offset: u64,
    /// When the file's first record was written.
    first_at: Option<Instant>,
    buf: Vec<u8>,
}

/// The next file, made ready off the write path, and whether a checkpoint is running.
struct Spare {
    next: Mutex<Option<(u64, File)>>,
    busy: AtomicBool,
}

/// Work for the checkpoint thread: flush sled, drop file `done`, ready file `next`.
struct Checkpoint {
    done: u64,
    next: u64,
}

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

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("sync directory {}", dir.display())))
}

/// Creates file `generation`, reserves its space and makes its name durable.
fn create(dir: &Path, generation: u64, bytes: u64) -> Result<File> {
    let path = file_path(dir, generation);
    let context = format!("create journal {}", path.display());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io(context.clone()))?;
    // Reserved space makes each sync cheaper; a file system without it grows the file.
    let _ = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, bytes);
    file.sync_all().map_err(io(context))?;
    sync_dir(dir)?;
    Ok(file)
}

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

impl Journaled {
    /// Replays the journal in `dir` into `inner` (which the caller has just opened there)
    /// and starts a new one, checkpointed whenever it passes `file_bytes`.
    pub(super) fn open(inner: Arc<SledBackend>, dir: &Path, file_bytes: u64) -> Result<Self> {
        let generation = recover(inner.as_ref(), dir)?;
        let file = create(dir, generation, file_bytes)?;
        let next = create(dir, generation + 1, file_bytes)?;
        let spare = Arc::new(Spare {
            next: Mutex::new(Some((generation + 1, next))),
            busy: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let thread = {
            let (inner, dir, spare) = (inner.clone(), dir.to_path_buf(), spare.clone());
            std::thread::Builder::new()
                .name("berth-store-checkpoint".into())
                .spawn(move || checkpoints(inner.as_ref(), &dir, file_bytes, &spare, rx))
                .map_err(io("start the store's checkpoint thread"))?
        };
        Ok(Self {
            inner,
            dir: dir.to_path_buf(),
            writer: Mutex::new(Writer {
                file,
                generation,
                offset: 0,
                first_at: None,
                buf: Vec::new(),
            }),
            spare,
            checkpoints: Mutex::new(Some((tx, thread))),
            file_bytes,
            failed: AtomicBool::new(false),
        })
    }

    /// Writes a commit (its first revision and its events' `segment`) as one record and
    /// syncs it.
    fn append(&self, w: &mut Writer, first: u64, segment: &[u8]) -> Result<()> {
        encode_record(&mut w.buf, first, segment)?;
        let written = w
            .file
            .write_all_at(&w.buf, w.offset)
            .and_then(|()| w.file.sync_data());
        if let Err(source) = written {
            let path = file_path(&self.dir, w.generation);
            return Err(Error::Io {
                context: format!("write journal {}", path.display()),
                source,
            });
        }
        w.offset += w.buf.len() as u64;
        if w.buf.capacity() > 1 << 20 {
            w.buf = Vec::new();
        }
        w.first_at.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Moves on to the spare file and has the current one checkpointed, when it is due
    /// and no checkpoint is running.
    fn maybe_rotate(&self, w: &mut Writer) {
        let due = w.offset >= self.file_bytes
            || w.first_at.is_some_and(|t| t.elapsed() >= CHECKPOINT_EVERY);
        if !due || self.spare.busy.load(Ordering::Acquire) {
            return;
        }
        let Some((generation, file)) = self.spare.next.lock().expect("spare lock").take() else {
            return;
        };
        let done = std::mem::replace(&mut w.generation, generation);
        w.file = file;
        w.offset = 0;
        w.first_at = None;
        self.spare.busy.store(true, Ordering::Release);
        if let Some((tx, _)) = &*self.checkpoints.lock().expect("checkpoint lock") {
            let _ = tx.send(Checkpoint {
                done,
                next: generation + 1,
            });
        }
    }
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

/// The checkpoint thread: runs until the journal is dropped.
fn checkpoints(
    backend: &dyn Backend,
    dir: &Path,
    file_bytes: u64,
    spare: &Spare,
    rx: mpsc::Receiver<Checkpoint>,
) {
    for Checkpoint { done, next } in rx {
        match backend.flush() {
            Ok(()) => {
                let path = file_path(dir, done);
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(file = %path.display(), error = %e, "could not remove a checkpointed journal file");
                }
            }
            // The file stays; the next start replays it.
            Err(e) => tracing::error!(error = %e, "store checkpoint failed"),
        }
        match create(dir, next, file_bytes) {
            Ok(file) => *spare.next.lock().expect("spare lock") = Some((next, file)),
            Err(e) => tracing::error!(error = %e, "could not make the next journal file ready"),
        }
        spare.busy.store(false, Ordering::Release);
    }
}

impl Drop for Journaled {
    fn drop(&mut self) {
        if let Some((tx, thread)) = self.checkpoints.get_mut().expect("checkpoint lock").take() {
            drop(tx);
            let _ = thread.join();
        }
        // With everything in sled on disk, no file is needed any more.
        if !self.failed.load(Ordering::Acquire) && self.inner.flush().is_ok() {
            if let Ok(found) = files(&self.dir) {
                for (_, path) in found {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

impl Backend for Journaled {
    fn meta(&self) -> Result<Meta> {
        self.inner.meta()
    }

    fn objects(&self) -> Result<Vec<(Arc<str>, Record)>> {
        self.inner.objects()
    }

    fn write(&self, batch: &CommitBatch<'_>) -> Result<()> {
        self.inner.write(batch)
    }

    fn commit(&self, batch: &CommitBatch<'_>) -> Result<()> {
        if batch.schema.is_some() || batch.events.is_empty() {
            // Migrations: rare, and their schema mark is not journaled.
            return self.inner.commit(batch);
        }
        let first = batch.events[0].revision;
        let segment = encode_segment(batch.events);
        let mut w = self.writer.lock().expect("journal lock");
        // The journal first: once the record is on disk the commit survives a crash, and
        // sled is only its faster copy.
        let written = self
            .append(&mut w, first, &segment)
            .and_then(|()| self.inner.write_in_order(batch, &segment));
        if written.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        written?;
        self.maybe_rotate(&mut w);
        Ok(())
    }

    fn events(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.inner.events(after, limit)
    }

    fn event_time(&self, revision: u64) -> Result<Option<u64>> {
        self.inner.event_time(revision)
    }

    fn event_bytes_floor(&self, budget: u64) -> Result<(u64, u64)> {
        self.inner.event_bytes_floor(budget)
    }

    fn set_compacted(&self, floor: u64) -> Result<()> {
        self.inner.set_compacted(floor)
    }

    fn drop_events(&self, floor: u64, limit: usize) -> Result<usize> {
        self.inner.drop_events(floor, limit)
    }

    fn raw_entries(&self) -> Box<dyn Iterator<Item = Result<RawEntry>> + '_> {
        self.inner.raw_entries()
    }

    fn load_raw(&self, entries: &mut dyn Iterator<Item = Result<RawEntry>>) -> Result<()> {
        self.inner.load_raw(entries)
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
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
