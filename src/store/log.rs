//! The log engine: the store's bytes on disk.
//!
//! Why not sled, which berth used before: sled 0.34 keeps values above its inline size
//! in files of their own that its segment collection does not reclaim, and keeps memory
//! it allocated for large values after they are removed, even after the database is
//! dropped. Measured against sled alone, 200 writes of a 400 KB value (with its 800 KB
//! event) took the process from 35 to 230 MB and the directory past 1.2 GB, and after a
//! failed flush (a full disk) sled never took a write again. The store already keeps
//! every object in memory and made commits durable with its own journal, so what it
//! needs from disk is a log and a checkpoint of the live objects, which this is.
//!
//! A store directory holds
//! - `base-<revision>`: every object, the schema version, the compaction floor and the
//!   first log generation the base does not cover, as of `revision`; written whole to a
//!   temporary file, synced and renamed into place, so a crash leaves the old base or the
//!   new one, never half of one;
//! - `log-<generation>`: preallocated files of records, one per commit, each appended and
//!   synced (`pwrite` + `fdatasync`) before its commit is acknowledged;
//! - `lock`: locked (`flock`) while a process has the store open.
//!
//! A record is `len u32 LE | crc32 u32 LE | payload`, the payload one of
//! `1 | schema u32 | revision u64 | segment` (a commit: its events, which end at
//! `revision`; schema 0 leaves the schema version as it is) or `2 | floor u64` (the
//! compaction floor). A zero length ends a file's records: the rest is preallocated.
//!
//! Opening reads the newest base and replays the records after its revision. The records
//! are also the event log: an index of each commit's record (revisions, time, file,
//! offset) serves watches resumed from disk. Compaction drops the index below the floor,
//! and a log file goes once each of its events is at or below the floor and a base has
//! been written after it. When only the base holds files back, and they add up to half
//! the live data (or two log files), a new base is written from the live objects, which the
//! backend shares with the store's cache by reference count. This is the online
//! reclamation of the engine (as etcd's defragmentation): the disk holds the live
//! objects once, the retained history, and a bounded amount of history not yet folded
//! into a base.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;

use super::backend::{Backend, CommitBatch, Event, EventKind, Meta, RawEntry, Record};
use super::segment::{decode_segment, encode_segment, segment_header};
use super::{Error, Result};

/// Bytes before a record's payload.
const HEADER: usize = 8;
const COMMIT: u8 = 1;
const FLOOR: u8 = 2;
const BASE_MAGIC: &[u8; 8] = b"BERTHBS1";

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::from_io(context, source)
}

fn corrupt(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Backend {
        context: format!("read store file {}", path.display()),
        message: format!(
            "{message}; restore a backup from the data directory's backups/ with `berth snapshot restore`"
        ),
    }
}

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("log-{generation:020}"))
}

fn base_path(dir: &Path, revision: u64) -> PathBuf {
    dir.join(format!("base-{revision:020}"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("sync directory {}", dir.display())))
}

/// The numbered files `<prefix><n>` in `dir`, in order of their number.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(io(format!("list {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("list {}", dir.display())))?;
        let name = entry.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|g| g.parse().ok())
        {
            out.push((n, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Creates log file `generation`, reserves its space and makes its name durable.
fn create_log(dir: &Path, generation: u64, bytes: u64) -> Result<File> {
    let path = log_path(dir, generation);
    let context = format!("create store log {}", path.display());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io(context.clone()))?;
    let made = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, bytes)
        .map_err(std::io::Error::from);
    if let Err(e) = made {
        // A file system without fallocate grows the file instead; a full one is full.
        if Error::is_no_space(&e) {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(Error::from_io(context, e));
        }
    }
    if let Err(e) = file.sync_all().and_then(|()| File::open(dir)?.sync_all()) {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(Error::from_io(context, e));
    }
    Ok(file)
}

/// `buf` := a record with `payload` (given in parts).
fn encode_record(buf: &mut Vec<u8>, parts: &[&[u8]]) -> Result<()> {
    let size: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(size).map_err(|_| Error::Backend {
        context: "write store log".into(),
        message: "a commit of more than 4 GiB".into(),
    })?;
    buf.clear();
    buf.reserve(HEADER + size);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    for p in parts {
        buf.extend_from_slice(p);
    }
    let crc = crc32fast::hash(&buf[HEADER..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A record's payload, as read back.
enum Payload<'a> {
    Commit {
        schema: u32,
        revision: u64,
        segment: &'a [u8],
    },
    Floor(u64),
}

fn parse_payload(p: &[u8]) -> Option<Payload<'_>> {
    match *p.first()? {
        COMMIT if p.len() >= 13 => Some(Payload::Commit {
            schema: u32::from_be_bytes(p[1..5].try_into().ok()?),
            revision: u64::from_be_bytes(p[5..13].try_into().ok()?),
            segment: &p[13..],
        }),
        FLOOR if p.len() == 9 => Some(Payload::Floor(u64::from_be_bytes(p[1..9].try_into().ok()?))),
        _ => None,
    }
}

/// The whole records of a file's `bytes`: `(offset, payload)` in order, and whether they
/// end in a record cut short or damaged (a write that was never acknowledged) rather than
/// at the end mark.
fn records(bytes: &[u8]) -> (Vec<(u64, &[u8])>, bool) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while bytes.len() - at >= HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len == 0 {
            return (out, false);
        }
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            return (out, true);
        };
        if crc32fast::hash(payload) != crc {
            return (out, true);
        }
        out.push((at as u64, payload));
        at += HEADER + len;
    }
    (out, bytes[at..].iter().any(|b| *b != 0))
}

/// Where one commit's record is.
#[derive(Debug, Clone, Copy)]
struct Loc {
    first: u64,
    count: u32,
    time_ms: u64,
    generation: u64,
    offset: u64,
    len: u32,
}

impl Loc {
    fn last(&self) -> u64 {
        self.first + u64::from(self.count) - 1
    }
}

struct LogFile {
    file: Arc<File>,
    /// The highest revision of a commit in it (0: none).
    last: u64,
    /// Its size on disk.
    size: u64,
}

/// The event log's index and the files it points into.
struct Index {
    commits: VecDeque<Loc>,
    files: BTreeMap<u64, LogFile>,
    /// The newest base: its revision, size, and the first generation it does not cover.
    base_revision: u64,
    base_bytes: u64,
    base_generation: u64,
}

/// The file being written, and the state that commits change.
struct Writer {
    generation: u64,
    file: Arc<File>,
    offset: u64,
    buf: Vec<u8>,
    meta: Meta,
    /// A write failed at this offset and its header is not known to be zeroed yet.
    broken: Option<u64>,
    /// The next file, being made ready off the write path ...
    spare: Option<std::thread::JoinHandle<Result<File>>>,
    /// ... or made.
    ready: Option<File>,
}

pub(super) struct LogBackend {
    dir: PathBuf,
    /// Space reserved per log file.
    file_bytes: u64,
    writer: Mutex<Writer>,
    index: RwLock<Index>,
    /// Every current object; changed only with the writer held.
    live: Mutex<HashMap<Arc<str>, Record>>,
    /// Held while a base is written or files are removed.
    maintenance: Mutex<()>,
    /// Bytes of every file of the store (the spare one included).
    disk_bytes: Arc<AtomicU64>,
    /// The directory's lock (`flock`), let go at [`Backend::close`].
    lock: Mutex<Option<File>>,
}

/// What a base file holds.
struct Base {
    meta: Meta,
    generation: u64,
    objects: Vec<(Arc<str>, Record)>,
}

fn write_base(dir: &Path, base: &Base) -> Result<u64> {
    let path = base_path(dir, base.meta.revision);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let context = format!("write store base {}", path.display());
    let written = (|| -> std::io::Result<u64> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 16, file);
        let mut crc = crc32fast::Hasher::new();
        let mut put = |out: &mut BufWriter<File>, b: &[u8]| -> std::io::Result<()> {
            crc.update(b);
            out.write_all(b)
        };
        put(&mut out, BASE_MAGIC)?;
        put(&mut out, &base.meta.schema.to_be_bytes())?;
        put(&mut out, &base.meta.revision.to_be_bytes())?;
        put(&mut out, &base.meta.compacted.to_be_bytes())?;
        put(&mut out, &base.generation.to_be_bytes())?;
        put(&mut out, &(base.objects.len() as u64).to_be_bytes())?;
        for (key, record) in &base.objects {
            put(&mut out, &(key.len() as u32).to_be_bytes())?;
            put(&mut out, key.as_bytes())?;
            put(&mut out, &record.revision.to_be_bytes())?;
            put(&mut out, &(record.value.len() as u32).to_be_bytes())?;
            put(&mut out, &record.value)?;
        }
        let sum = crc.finalize();
        out.write_all(&sum.to_be_bytes())?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(file.metadata()?.len())
    })();
    let size = match written {
        Ok(size) => size,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::from_io(context, e));
        }
    };
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::from_io(context, e));
    }
    sync_dir(dir)?;
    Ok(size)
}

fn read_base(path: &Path) -> Result<Base> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io(format!("read {}", path.display())))?;
    let bad = |what: &str| corrupt(path, format!("the store's base is damaged ({what})"));
    if bytes.len() < 48 || &bytes[..8] != BASE_MAGIC {
        return Err(bad("no header"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body) != u32::from_be_bytes(sum.try_into().expect("4 bytes")) {
        return Err(bad("checksum"));
    }
    let mut r = super::segment::Reader(&body[8..]);
    let schema = r.u32()?;
    let revision = r.u64()?;
    let compacted = r.u64()?;
    let generation = r.u64()?;
    let count = r.u64()?;
    let mut objects = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let len = r.u32()? as usize;
        let key = std::str::from_utf8(r.take(len)?).map_err(|_| bad("key"))?;
        let rev = r.u64()?;
        let len = r.u32()? as usize;
        let value = Bytes::copy_from_slice(r.take(len)?);
        objects.push((
            Arc::from(key),
            Record {
                revision: rev,
                value,
            },
        ));
    }
    if !r.0.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(Base {
        meta: Meta {
            schema,
            revision,
            compacted,
        },
        generation,
        objects,
    })
}

fn apply<'a>(live: &mut HashMap<Arc<str>, Record>, events: impl IntoIterator<Item = &'a Event>) {
    for e in events {
        match e.kind {
            EventKind::Deleted => {
                live.remove(&e.key);
            }
            EventKind::Created | EventKind::Updated => {
                live.insert(
                    e.key.clone(),
                    Record {
                        revision: e.revision,
                        value: e.object.clone(),
                    },
                );
            }
        }
    }
}

impl LogBackend {
    /// Opens (or creates) the store in `dir`, with log files of `file_bytes`.
    pub(super) fn open(dir: &Path, file_bytes: u64) -> Result<Self> {
        super::create_private_dir(dir)?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("lock"))
            .map_err(io(format!("open {}", dir.join("lock").display())))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(Error::InUse {
                dir: dir.display().to_string(),
            });
        }
        // Leftovers of a base write that a crash cut short.
        for entry in std::fs::read_dir(dir).map_err(io(format!("list {}", dir.display())))? {
            let entry = entry.map_err(io(format!("list {}", dir.display())))?;
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let bases = numbered(dir, "base-")?;
        let base = match bases.last() {
            Some((_, path)) => read_base(path)?,
            None => Base {
                meta: Meta::default(),
                generation: 0,
                objects: Vec::new(),
            },
        };
        let base_bytes = match bases.last() {
            Some((_, path)) => std::fs::metadata(path).map_or(0, |m| m.len()),
            None => 0,
        };
        for (_, path) in bases.iter().rev().skip(1) {
            let _ = std::fs::remove_file(path);
        }
        let mut meta = base.meta;
        let mut live: HashMap<Arc<str>, Record> = base.objects.into_iter().collect();
        let mut commits = VecDeque::new();
        let mut files = BTreeMap::new();
        let logs = numbered(dir, "log-")?;
        let mut torn_in: Option<PathBuf> = None;
        let mut replayed = 0usize;
        for (generation, path) in &logs {
            let mut bytes = Vec::new();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .and_then(|mut f| f.read_to_end(&mut bytes).map(|_| f))
                .map_err(io(format!("read {}", path.display())))?;
            // A file's records end at a record a crash cut short; the next start began a
            // new file. A damaged record anywhere else leaves a gap in the revisions,
            // which the replay below refuses.
            let (found, torn) = records(&bytes);
            if torn {
                torn_in = Some(path.clone());
            }
            if found.is_empty() {
                drop(file);
                std::fs::remove_file(path).map_err(io(format!("remove {}", path.display())))?;
                continue;
            }
            let mut last = 0;
            for (offset, payload) in found {
                match parse_payload(payload) {
                    Some(Payload::Floor(floor)) => meta.compacted = meta.compacted.max(floor),
                    Some(Payload::Commit {
                        schema,
                        revision,
                        segment,
                    }) => {
                        let (time_ms, count) =
                            segment_header(segment).map_err(|e| corrupt(path, e))?;
                        let first = (revision + 1)
                            .checked_sub(u64::from(count))
                            .ok_or_else(|| corrupt(path, "a commit before revision 1"))?;
                        if revision > meta.revision {
                            if first != meta.revision + 1 {
                                return Err(corrupt(
                                    path,
                                    format!(
                                        "it continues at revision {first}, but the store holds up to {}",
                                        meta.revision
                                    ),
                                ));
                            }
                            let events =
                                decode_segment(first, segment).map_err(|e| corrupt(path, e))?;
                            apply(&mut live, &events);
                            meta.revision = revision;
                            replayed += 1;
                        }
                        if schema != 0 && revision >= meta.revision {
                            meta.schema = schema;
                        }
                        if count > 0 {
                            last = last.max(revision);
                            commits.push_back(Loc {
                                first,
                                count,
                                time_ms,
                                generation: *generation,
                                offset,
                                len: payload.len() as u32,
                            });
                        }
                    }
                    None => return Err(corrupt(path, "a record of an unknown kind")),
                }
            }
            files.insert(
                *generation,
                LogFile {
                    file: Arc::new(file),
                    last,
                    size: bytes.len() as u64,
                },
            );
        }
        if let Some(path) = &torn_in {
            tracing::warn!(
                file = %path.display(),
                "dropped a record of the store's log that a crash cut short (never acknowledged)"
            );
        }
        if replayed > 0 {
            tracing::debug!(
                records = replayed,
                revision = meta.revision,
                "replayed the store's log"
            );
        }
        while commits
            .front()
            .is_some_and(|l: &Loc| l.last() <= meta.compacted)
        {
            commits.pop_front();
        }
        let generation = logs
            .last()
            .map_or(base.generation, |(g, _)| g + 1)
            .max(base.generation);
        let file = Arc::new(create_log(dir, generation, file_bytes)?);
        files.insert(
            generation,
            LogFile {
                file: file.clone(),
                last: 0,
                size: file_bytes,
            },
        );
        let disk = base_bytes + files.values().map(|f| f.size).sum::<u64>();
        let me = Self {
            dir: dir.to_path_buf(),
            file_bytes,
            writer: Mutex::new(Writer {
                generation,
                file,
                offset: 0,
                buf: Vec::new(),
                meta,
                broken: None,
                spare: None,
                ready: None,
            }),
            index: RwLock::new(Index {
                commits,
                files,
                base_revision: base.meta.revision,
                base_bytes,
                base_generation: base.generation,
            }),
            live: Mutex::new(live),
            maintenance: Mutex::new(()),
            disk_bytes: Arc::new(AtomicU64::new(disk)),
            lock: Mutex::new(Some(lock)),
        };
        {
            let mut w = me.writer.lock().expect("writer lock");
            me.prepare_spare(&mut w);
        }
        me.remove_covered(meta.compacted)?;
        Ok(me)
    }

    /// Starts making the file after the current one ready.
    fn prepare_spare(&self, w: &mut Writer) {
        let (dir, generation, bytes) = (self.dir.clone(), w.generation + 1, self.file_bytes);
        let disk = self.disk_bytes.clone();
        w.spare = std::thread::Builder::new()
            .name("berth-store-file".into())
            .spawn(move || {
                let file = create_log(&dir, generation, bytes)?;
                disk.fetch_add(bytes, Ordering::AcqRel);
                Ok(file)
            })
            .ok();
    }

    /// Moves the writer on to the next file.
    fn rotate(&self, w: &mut Writer) -> Result<()> {
        let generation = w.generation + 1;
        let ready = w.ready.take().or_else(|| {
            w.spare
                .take()
                .and_then(|t| t.join().ok())
                .and_then(|r| r.ok())
        });
        let file = match ready {
            Some(f) => f,
            None => {
                let f = create_log(&self.dir, generation, self.file_bytes)?;
                self.disk_bytes.fetch_add(self.file_bytes, Ordering::AcqRel);
                f
            }
        };
        let file = Arc::new(file);
        self.index.write().expect("index lock").files.insert(
            generation,
            LogFile {
                file: file.clone(),
                last: 0,
                size: self.file_bytes,
            },
        );
        w.generation = generation;
        w.file = file;
        w.offset = 0;
        self.prepare_spare(w);
        Ok(())
    }

    /// Zeroes the header of a write that failed, so that no later reader takes it for a
    /// record; until that succeeds no more writes go to the log.
    fn heal(&self, w: &mut Writer) -> Result<()> {
        let Some(at) = w.broken else { return Ok(()) };
        w.file
            .write_all_at(&[0; HEADER], at)
            .and_then(|()| w.file.sync_data())
            .map_err(io(format!(
                "clear a failed write in {}",
                log_path(&self.dir, w.generation).display()
            )))?;
        w.broken = None;
        Ok(())
    }

    /// Appends `payload` as one record, synced when `sync`; returns its offset.
    fn append(&self, w: &mut Writer, parts: &[&[u8]], sync: bool) -> Result<u64> {
        self.heal(w)?;
        let mut buf = std::mem::take(&mut w.buf);
        let encoded = encode_record(&mut buf, parts);
        let result = encoded.and_then(|()| {
            let len = buf.len() as u64;
            if w.offset > 0 && w.offset + len > self.file_bytes {
                self.rotate(w)?;
            }
            let at = w.offset;
            let written = w
                .file
                .write_all_at(&buf, at)
                .and_then(|()| if sync { w.file.sync_data() } else { Ok(()) });
            if let Err(e) = written {
                w.broken = Some(at);
                let _ = self.heal(w);
                return Err(Error::from_io(
                    format!(
                        "write store log {}",
                        log_path(&self.dir, w.generation).display()
                    ),
                    e,
                ));
            }
            w.offset += len;
            if w.offset > self.file_bytes {
                // A record larger than the reserve grew the file.
                let mut idx = self.index.write().expect("index lock");
                if let Some(f) = idx.files.get_mut(&w.generation)
                    && w.offset > f.size
                {
                    self.disk_bytes
                        .fetch_add(w.offset - f.size, Ordering::AcqRel);
                    f.size = w.offset;
                }
            }
            Ok(at)
        });
        if buf.capacity() <= 1 << 20 {
            w.buf = buf;
        }
        result
    }

    fn commit_batch(&self, batch: &CommitBatch<'_>, sync: bool) -> Result<()> {
        // Encoded before the lock: a commit holds it only to write.
        let segment = encode_segment(batch.events);
        let schema = batch.schema.unwrap_or(0);
        let mut w = self.writer.lock().expect("writer lock");
        let offset = self.append(
            &mut w,
            &[
                &[COMMIT],
                &schema.to_be_bytes(),
                &batch.revision.to_be_bytes(),
                &segment,
            ],
            sync,
        )?;
        w.meta.revision = batch.revision;
        if let Some(s) = batch.schema {
            w.meta.schema = s;
        }
        apply(
            &mut self.live.lock().expect("live lock"),
            batch.events.iter().map(|e| &**e),
        );
        if let Some(first) = batch.events.first() {
            let mut idx = self.index.write().expect("index lock");
            if let Some(f) = idx.files.get_mut(&w.generation) {
                f.last = batch.revision;
            }
            idx.commits.push_back(Loc {
                first: first.revision,
                count: batch.events.len() as u32,
                time_ms: first.time_ms,
                generation: w.generation,
                offset,
                len: (13 + segment.len()) as u32,
            });
        }
        Ok(())
    }

    /// Reads the payload of the record at `loc`.
    fn read(&self, file: &File, loc: &Loc) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; HEADER + loc.len as usize];
        let path = log_path(&self.dir, loc.generation);
        file.read_exact_at(&mut buf, loc.offset)
            .map_err(io(format!("read {}", path.display())))?;
        let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        if crc32fast::hash(&buf[HEADER..]) != crc {
            return Err(corrupt(&path, "a record does not match its checksum"));
        }
        buf.drain(..HEADER);
        Ok(buf)
    }

    /// The segment of the commit at `loc`.
    fn segment_of(&self, file: &File, loc: &Loc) -> Result<Vec<u8>> {
        let mut payload = self.read(file, loc)?;
        match parse_payload(&payload) {
            Some(Payload::Commit { .. }) => {
                payload.drain(..13);
                Ok(payload)
            }
            _ => Err(corrupt(
                &log_path(&self.dir, loc.generation),
                "the index points at no commit",
            )),
        }
    }

    /// The commits from the one that holds revision `from` on, with their files.
    fn locs_from(&self, from: u64, limit: usize) -> Vec<(Arc<File>, Loc)> {
        let idx = self.index.read().expect("index lock");
        let start = idx.commits.partition_point(|l| l.last() < from);
        idx.commits
            .range(start..)
            .take(limit)
            .filter_map(|l| idx.files.get(&l.generation).map(|f| (f.file.clone(), *l)))
            .collect()
    }

    /// Writes a new base of the live objects now.
    fn rebase(&self) -> Result<()> {
        let base = {
            let w = self.writer.lock().expect("writer lock");
            let live = self.live.lock().expect("live lock");
            let mut objects: Vec<_> = live.iter().map(|(k, r)| (k.clone(), r.clone())).collect();
            drop(live);
            objects.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            Base {
                meta: w.meta,
                generation: w.generation,
                objects,
            }
        };
        let size = write_base(&self.dir, &base)?;
        drop(base.objects);
        let old = {
            let mut idx = self.index.write().expect("index lock");
            let old = (idx.base_revision, idx.base_bytes);
            idx.base_revision = base.meta.revision;
            idx.base_bytes = size;
            idx.base_generation = base.generation;
            old
        };
        self.disk_bytes.fetch_add(size, Ordering::AcqRel);
        if old.0 != base.meta.revision {
            let path = base_path(&self.dir, old.0);
            if path.exists() {
                std::fs::remove_file(&path).map_err(io(format!("remove {}", path.display())))?;
            }
        }
        self.disk_bytes.fetch_sub(old.1, Ordering::AcqRel);
        tracing::debug!(
            revision = base.meta.revision,
            bytes = size,
            "store base written"
        );
        Ok(())
    }

    /// Removes the log files that hold nothing the base and the retained history need,
    /// writing a new base first when that frees enough.
    fn remove_covered(&self, floor: u64) -> Result<()> {
        let _m = self.maintenance.lock().expect("maintenance lock");
        let current = self.writer.lock().expect("writer lock").generation;
        let held_by_base: u64 = {
            let idx = self.index.read().expect("index lock");
            idx.files
                .range(idx.base_generation..current)
                .filter(|(_, f)| f.last <= floor)
                .map(|(_, f)| f.size)
                .sum()
        };
        let base_bytes = self.index.read().expect("index lock").base_bytes;
        if held_by_base > 0 && held_by_base >= (base_bytes / 2).max(2 * self.file_bytes) {
            self.rebase()?;
        }
        let gone: Vec<(u64, u64)> = {
            let mut idx = self.index.write().expect("index lock");
            let limit = idx.base_generation.min(current);
            let ids: Vec<u64> = idx
                .files
                .range(..limit)
                .filter(|(_, f)| f.last <= floor)
                .map(|(g, _)| *g)
                .collect();
            ids.into_iter()
                .filter_map(|g| idx.files.remove(&g).map(|f| (g, f.size)))
                .collect()
        };
        for (generation, size) in gone {
            let path = log_path(&self.dir, generation);
            std::fs::remove_file(&path).map_err(io(format!("remove {}", path.display())))?;
            self.disk_bytes.fetch_sub(size, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Fills an empty backend with a base and the history `segments` (first revision,
    /// segment), all at or below `meta.revision`.
    fn install(
        &self,
        meta: Meta,
        objects: Vec<(Arc<str>, Record)>,
        segments: Vec<(u64, Vec<u8>)>,
    ) -> Result<()> {
        let mut w = self.writer.lock().expect("writer lock");
        if w.meta.revision != 0 || !self.live.lock().expect("live lock").is_empty() {
            return Err(Error::Backend {
                context: "load store".into(),
                message: "the store is not empty".into(),
            });
        }
        let base = Base {
            meta,
            generation: w.generation,
            objects,
        };
        let size = write_base(&self.dir, &base)?;
        {
            let mut idx = self.index.write().expect("index lock");
            idx.base_revision = meta.revision;
            idx.base_bytes = size;
            idx.base_generation = w.generation;
        }
        self.disk_bytes.fetch_add(size, Ordering::AcqRel);
        *self.live.lock().expect("live lock") = base.objects.into_iter().collect();
        w.meta = meta;
        for (first, segment) in segments {
            let (time_ms, count) = segment_header(&segment)?;
            if count == 0 {
                continue;
            }
            let revision = first + u64::from(count) - 1;
            let offset = self.append(
                &mut w,
                &[
                    &[COMMIT],
                    &0u32.to_be_bytes(),
                    &revision.to_be_bytes(),
                    &segment,
                ],
                false,
            )?;
            let mut idx = self.index.write().expect("index lock");
            if let Some(f) = idx.files.get_mut(&w.generation) {
                f.last = f.last.max(revision);
            }
            idx.commits.push_back(Loc {
                first,
                count,
                time_ms,
                generation: w.generation,
                offset,
                len: (13 + segment.len()) as u32,
            });
        }
        w.file.sync_data().map_err(io("sync store log"))?;
        Ok(())
    }
}

#[cfg(test)]
impl LogBackend {
    /// Waits for the spare file to be ready, so that the disk is as accounted.
    fn settle(&self) {
        let mut w = self.writer.lock().expect("writer lock");
        if let Some(t) = w.spare.take() {
            w.ready = Some(t.join().expect("spare thread").expect("spare file"));
        }
    }
}

impl Drop for LogBackend {
    fn drop(&mut self) {
        let w = self.writer.get_mut().expect("writer lock");
        if let Some(spare) = w.spare.take() {
            let _ = spare.join();
        }
    }
}

impl Backend for LogBackend {
    fn meta(&self) -> Result<Meta> {
        Ok(self.writer.lock().expect("writer lock").meta)
    }

    fn objects(&self) -> Result<Vec<(Arc<str>, Record)>> {
        let live = self.live.lock().expect("live lock");
        let mut out: Vec<_> = live.iter().map(|(k, r)| (k.clone(), r.clone())).collect();
        drop(live);
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn write(&self, batch: &CommitBatch<'_>) -> Result<()> {
        self.commit_batch(batch, false)
    }

    fn commit(&self, batch: &CommitBatch<'_>) -> Result<()> {
        self.commit_batch(batch, true)
    }

    fn events(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        let Some(start) = after.checked_add(1) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        // A commit holds at least one event, so `limit` commits are enough.
        for (file, loc) in self.locs_from(start, limit) {
            let segment = self.segment_of(&file, &loc)?;
            for e in decode_segment(loc.first, &segment)? {
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
        let idx = self.index.read().expect("index lock");
        let at = idx.commits.partition_point(|l| l.last() < revision);
        Ok(idx
            .commits
            .get(at)
            .filter(|l| l.first <= revision)
            .map(|l| l.time_ms))
    }

    fn event_bytes_floor(&self, budget: u64) -> Result<(u64, u64)> {
        let idx = self.index.read().expect("index lock");
        let mut bytes = 0u64;
        for l in idx.commits.iter().rev() {
            let size = HEADER as u64 + u64::from(l.len);
            if bytes + size > budget {
                return Ok((l.last(), bytes));
            }
            bytes += size;
        }
        Ok((0, bytes))
    }

    fn set_compacted(&self, floor: u64) -> Result<()> {
        let mut w = self.writer.lock().expect("writer lock");
        self.append(&mut w, &[&[FLOOR], &floor.to_be_bytes()], true)?;
        w.meta.compacted = w.meta.compacted.max(floor);
        Ok(())
    }

    fn drop_events(&self, floor: u64, limit: usize) -> Result<usize> {
        let n = {
            let mut idx = self.index.write().expect("index lock");
            let mut n = 0;
            while n < limit && idx.commits.front().is_some_and(|l| l.last() <= floor) {
                idx.commits.pop_front();
                n += 1;
            }
            n
        };
        if n < limit {
            self.remove_covered(floor)?;
        }
        Ok(n)
    }

    fn raw_entries(&self) -> Box<dyn Iterator<Item = Result<RawEntry>> + '_> {
        let meta = match self.meta() {
            Ok(m) => m,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        let metas = super::segment::meta_entries(&meta);
        let objects = match self.objects() {
            Ok(o) => o,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        let objects = objects
            .into_iter()
            .map(|(k, r)| Ok(super::segment::object_entry(&k, &r)));
        let events = self
            .locs_from(0, usize::MAX)
            .into_iter()
            .map(move |(file, loc)| {
                let segment = self.segment_of(&file, &loc)?;
                Ok((super::segment::event_key(loc.first).to_vec(), segment))
            });
        Box::new(metas.into_iter().map(Ok).chain(events).chain(objects))
    }

    fn load_raw(&self, entries: &mut dyn Iterator<Item = Result<RawEntry>>) -> Result<()> {
        let mut parsed = super::segment::Parsed::default();
        for entry in entries {
            let (k, v) = entry?;
            parsed.add(&k, v)?;
        }
        let super::segment::Parsed {
            meta,
            objects,
            segments,
        } = parsed;
        self.install(meta, objects, segments)
    }

    fn flush(&self) -> Result<()> {
        let w = self.writer.lock().expect("writer lock");
        w.file.sync_data().map_err(io("sync store log"))
    }

    fn close(&self) -> Result<()> {
        let flushed = self.flush();
        // Closing the file drops its `flock`.
        drop(self.lock.lock().expect("lock lock").take());
        flushed
    }

    fn disk_bytes(&self) -> u64 {
        self.disk_bytes.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(revision: u64, name: &str, kind: EventKind, size: usize) -> Arc<Event> {
        Arc::new(Event {
            revision,
            key: Arc::from(format!("/t/{name}")),
            kind,
            object: Bytes::from(vec![b'x'; size]),
            prev: None,
            time_ms: revision * 10,
        })
    }

    fn commit(b: &LogBackend, events: &[Arc<Event>]) {
        b.commit(&CommitBatch {
            revision: events.last().unwrap().revision,
            events,
            schema: None,
        })
        .unwrap();
    }

    fn names(b: &LogBackend) -> Vec<String> {
        b.objects()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect()
    }

    fn revs(b: &LogBackend, after: u64, limit: usize) -> Vec<u64> {
        b.events(after, limit)
            .unwrap()
            .iter()
            .map(|e| e.revision)
            .collect()
    }

    #[test]
    fn commits_survive_a_reopen_and_reads_follow_commit_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("s");
        {
            let b = LogBackend::open(&d, 4096).unwrap();
            commit(
                &b,
                &[
                    ev(1, "a", EventKind::Created, 10),
                    ev(2, "b", EventKind::Created, 10),
                    ev(3, "c", EventKind::Created, 10),
                ],
            );
            commit(&b, &[ev(4, "b", EventKind::Deleted, 10)]);
            commit(
                &b,
                &[
                    ev(5, "d", EventKind::Created, 10),
                    ev(6, "a", EventKind::Updated, 20),
                ],
            );
            assert_eq!(revs(&b, 0, 100), [1, 2, 3, 4, 5, 6]);
        }
        let b = LogBackend::open(&d, 4096).unwrap();
        assert_eq!(b.meta().unwrap().revision, 6);
        assert_eq!(names(&b), ["/t/a", "/t/c", "/t/d"]);
        assert_eq!(b.objects().unwrap()[0].1.revision, 6);
        assert_eq!(revs(&b, 1, 100), [2, 3, 4, 5, 6]);
        assert_eq!(revs(&b, 2, 2), [3, 4]);
        assert_eq!(revs(&b, 6, 100), Vec::<u64>::new());
        assert_eq!(b.event_time(2).unwrap(), Some(10));
        assert_eq!(b.event_time(6).unwrap(), Some(50));
        assert_eq!(b.event_time(7).unwrap(), None);
        // Floor 2 keeps the first commit (it reaches 3); floor 4 drops two commits.
        assert_eq!(b.drop_events(2, 100).unwrap(), 0);
        assert_eq!(b.drop_events(4, 100).unwrap(), 2);
        assert_eq!(revs(&b, 4, 100), [5, 6]);
        assert_eq!(b.event_time(3).unwrap(), None);
    }

    #[test]
    fn a_record_cut_short_or_damaged_ends_the_log() {
        let mut one = Vec::new();
        encode_record(&mut one, &[&[FLOOR], &7u64.to_be_bytes()]).unwrap();
        let mut whole = one.clone();
        whole.extend(&one);
        assert_eq!(records(&whole).0.len(), 2);
        let mut padded = whole.clone();
        padded.extend([0; 64]);
        assert_eq!((records(&padded).0.len(), records(&padded).1), (2, false));
        let cut = &whole[..whole.len() - 3];
        assert_eq!((records(cut).0.len(), records(cut).1), (1, true));
        let mut damaged = whole.clone();
        let last = damaged.len() - 2;
        damaged[last] ^= 0x40;
        assert_eq!((records(&damaged).0.len(), records(&damaged).1), (1, true));
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("s");
        {
            let b = LogBackend::open(&d, 1 << 20).unwrap();
            commit(&b, &[ev(1, "a", EventKind::Created, 10)]);
            commit(&b, &[ev(2, "b", EventKind::Created, 10)]);
        }
        // Damage the last record of the newest written file.
        let (_, path) = numbered(&d, "log-")
            .unwrap()
            .into_iter()
            .rev()
            .find(|(_, p)| std::fs::read(p).unwrap().iter().any(|b| *b != 0))
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let (found, _) = records(&bytes);
        let (at, payload) = found[1];
        let mut damaged = bytes.clone();
        damaged[at as usize + HEADER + payload.len() - 1] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        let b = LogBackend::open(&d, 1 << 20).unwrap();
        assert_eq!(b.meta().unwrap().revision, 1);
        assert_eq!(names(&b), ["/t/a"]);
        // And it goes on from there.
        commit(&b, &[ev(2, "c", EventKind::Created, 10)]);
        drop(b);
        let b = LogBackend::open(&d, 1 << 20).unwrap();
        assert_eq!(names(&b), ["/t/a", "/t/c"]);
    }

    #[test]
    fn compaction_reclaims_the_disk_of_what_it_drops() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("s");
        let b = LogBackend::open(&d, 64 << 10).unwrap();
        // One object of 40 KB rewritten 200 times: 8 MB of history for 40 KB of data.
        for rev in 1..=200u64 {
            let kind = if rev == 1 {
                EventKind::Created
            } else {
                EventKind::Updated
            };
            commit(&b, &[ev(rev, "big", kind, 40_000)]);
        }
        let before = b.disk_bytes();
        assert!(before > 8_000_000, "{before}");
        b.set_compacted(195).unwrap();
        while b.drop_events(195, 10).unwrap() > 0 {}
        b.settle();
        let after = b.disk_bytes();
        let on_disk: u64 = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(after, on_disk, "accounted as on disk");
        // The base (40 KB), the files of the last five events, the current and spare ones.
        assert!(after < 1_000_000, "{before} -> {after}");
        assert_eq!(revs(&b, 195, 100), [196, 197, 198, 199, 200]);
        drop(b);
        let b = LogBackend::open(&d, 64 << 10).unwrap();
        assert_eq!(
            b.meta().unwrap(),
            Meta {
                schema: 0,
                revision: 200,
                compacted: 195
            }
        );
        assert_eq!(b.objects().unwrap()[0].1.revision, 200);
        assert_eq!(revs(&b, 195, 100), [196, 197, 198, 199, 200]);
    }

    #[test]
    fn raw_entries_round_trip_into_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let a = LogBackend::open(&dir.path().join("a"), 4096).unwrap();
        commit(
            &a,
            &[
                ev(1, "a", EventKind::Created, 10),
                ev(2, "b", EventKind::Created, 10),
            ],
        );
        commit(&a, &[ev(3, "a", EventKind::Deleted, 10)]);
        a.set_compacted(2).unwrap();
        while a.drop_events(2, 10).unwrap() > 0 {}
        let b = LogBackend::open(&dir.path().join("b"), 4096).unwrap();
        b.load_raw(&mut a.raw_entries()).unwrap();
        drop(b);
        let b = LogBackend::open(&dir.path().join("b"), 4096).unwrap();
        assert_eq!(b.meta().unwrap(), a.meta().unwrap());
        assert_eq!(b.objects().unwrap(), a.objects().unwrap());
        assert_eq!(b.events(0, 10).unwrap(), a.events(0, 10).unwrap());
        assert_eq!(revs(&b, 0, 10), [3]);
    }

    #[test]
    fn a_second_opener_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _a = LogBackend::open(dir.path(), 4096).unwrap();
        assert!(matches!(
            LogBackend::open(dir.path(), 4096),
            Err(Error::InUse { .. })
        ));
    }

    #[test]
    fn a_closed_store_lets_the_next_opener_in_while_still_held() {
        let dir = tempfile::tempdir().unwrap();
        let a = LogBackend::open(dir.path(), 4096).unwrap();
        a.close().unwrap();
        // `a` is still alive (a task of the old server may hold the store a moment).
        let b = LogBackend::open(dir.path(), 4096).unwrap();
        assert_eq!(b.meta().unwrap(), a.meta().unwrap());
        assert!(matches!(
            LogBackend::open(dir.path(), 4096),
            Err(Error::InUse { .. })
        ));
    }
}
