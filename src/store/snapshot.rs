//! Snapshots: a whole store in one file, for `berth snapshot save|restore` and for the
//! backups taken before migrations.
//!
//! Format: the magic `BERTHSN1`, then each raw entry as `key_len u32 | key | value_len u32 |
//! value` (big-endian), then `u32::MAX | entry count u64 | CRC-32 of everything before`.
//! A snapshot is written to a temporary file and renamed, so a crash never leaves half a
//! snapshot under the final name; a restore checks the checksum before it puts the store
//! in place.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::backend::{Backend, Meta, RawEntry};
use super::{Error, Result, store_dir};

const MAGIC: &[u8; 8] = b"BERTHSN1";
const END: u32 = u32::MAX;

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    pub entries: u64,
    pub revision: u64,
    pub schema: u32,
}

fn snap_err(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Snapshot {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// Saves the store of `data_dir` (which no running berth may hold) to `file`.
pub fn save(data_dir: &Path, file: &Path) -> Result<Info> {
    let dir = store_dir(data_dir);
    let backend = super::open_backend(&dir, super::Config::new(data_dir).log_file_bytes)?;
    let meta = backend.meta()?;
    let entries = write(&backend, file)?;
    Ok(info(entries, meta))
}

fn info(entries: u64, meta: Meta) -> Info {
    Info {
        entries,
        revision: meta.revision,
        schema: meta.schema,
    }
}

/// A new file readable by its owner only: a snapshot holds every Secret of the cluster.
fn private_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An older file of that name keeps its mode through `open`: set it.
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// Writes every entry of `backend` to `file`; returns the number of entries.
pub(super) fn write(backend: &dyn Backend, file: &Path) -> Result<u64> {
    let io = |e: std::io::Error| snap_err(file, e);
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io)?;
    }
    let tmp = temp_path(file);
    let result = (|| {
        let mut out = Crc(
            BufWriter::new(private_file(&tmp).map_err(io)?),
            crc32fast::Hasher::new(),
        );
        out.write_all(MAGIC).map_err(io)?;
        let mut count = 0u64;
        for entry in backend.raw_entries() {
            let (k, v) = entry?;
            for part in [&k, &v] {
                let len =
                    u32::try_from(part.len()).map_err(|_| snap_err(file, "entry too large"))?;
                out.write_all(&len.to_be_bytes()).map_err(io)?;
                out.write_all(part).map_err(io)?;
            }
            count += 1;
        }
        out.write_all(&END.to_be_bytes()).map_err(io)?;
        out.write_all(&count.to_be_bytes()).map_err(io)?;
        let crc = out.1.clone().finalize();
        let mut w = out.0;
        w.write_all(&crc.to_be_bytes()).map_err(io)?;
        let f = w.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        Ok(count)
    })();
    match result {
        Ok(count) => {
            fs::rename(&tmp, file).map_err(io)?;
            sync_parent(file);
            Ok(count)
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Restores `file` as the store of `data_dir`, which must not hold a store yet.
pub fn restore(file: &Path, data_dir: &Path) -> Result<Info> {
    let target = store_dir(data_dir);
    if target.exists() {
        return Err(snap_err(
            file,
            format!(
                "{} already holds a store; restore into an empty --data-dir, or move {} away first",
                data_dir.display(),
                target.display()
            ),
        ));
    }
    // The data directory the snapshot makes is its owner's alone, as `berth serve`
    // requires.
    super::create_private_dir(data_dir)?;
    let staging = data_dir.join("store.restoring");
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| snap_err(file, e))?;
    }
    let result = (|| {
        let backend =
            super::log::LogBackend::open(&staging, super::Config::new(data_dir).log_file_bytes)?;
        let mut reader = Entries::open(file)?;
        backend.load_raw(&mut reader)?;
        let entries = reader.finish()?;
        let meta = backend.meta()?;
        backend.flush()?;
        Ok(info(entries, meta))
    })();
    match result {
        Ok(info) => {
            fs::rename(&staging, &target).map_err(|e| snap_err(file, e))?;
            sync_parent(&target);
            Ok(info)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

fn temp_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    file.with_file_name(name)
}

fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
}

/// A writer that checksums what passes through it.
struct Crc<W>(W, crc32fast::Hasher);

impl<W: Write> Write for Crc<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.1.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Reads a snapshot's entries, checksumming as it goes.
struct Entries {
    path: PathBuf,
    r: BufReader<File>,
    crc: crc32fast::Hasher,
    count: u64,
    /// The count recorded at the end, once reached.
    end: Option<u64>,
    failed: bool,
}

impl Entries {
    fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| snap_err(path, e))?;
        let mut me = Self {
            path: path.to_path_buf(),
            r: BufReader::new(f),
            crc: crc32fast::Hasher::new(),
            count: 0,
            end: None,
            failed: false,
        };
        let mut magic = [0u8; 8];
        if me.read(&mut magic).is_err() || &magic != MAGIC {
            return Err(snap_err(path, "not a berth snapshot (bad magic)"));
        }
        Ok(me)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<()> {
        self.r.read_exact(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                snap_err(&self.path, "truncated file")
            } else {
                snap_err(&self.path, e)
            }
        })?;
        self.crc.update(buf);
        Ok(())
    }

    fn read_u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn read_part(&mut self, len: u32) -> Result<Vec<u8>> {
        // Grow as data arrives rather than trusting the length up front.
        let mut out = Vec::new();
        let mut left = len as usize;
        let mut chunk = [0u8; 8192];
        while left > 0 {
            let n = left.min(chunk.len());
            self.read(&mut chunk[..n])?;
            out.extend_from_slice(&chunk[..n]);
            left -= n;
        }
        Ok(out)
    }

    fn next_entry(&mut self) -> Result<Option<RawEntry>> {
        let klen = self.read_u32()?;
        if klen == END {
            let mut b = [0u8; 8];
            self.read(&mut b)?;
            self.end = Some(u64::from_be_bytes(b));
            return Ok(None);
        }
        let k = self.read_part(klen)?;
        let vlen = self.read_u32()?;
        let v = self.read_part(vlen)?;
        self.count += 1;
        Ok(Some((k, v)))
    }

    /// Checks the trailer once every entry has been read; returns the entry count.
    fn finish(mut self) -> Result<u64> {
        let Some(recorded) = self.end else {
            return Err(snap_err(&self.path, "truncated file"));
        };
        let want = self.crc.clone().finalize();
        let mut b = [0u8; 4];
        self.r
            .read_exact(&mut b)
            .map_err(|_| snap_err(&self.path, "truncated file"))?;
        if u32::from_be_bytes(b) != want || recorded != self.count {
            return Err(snap_err(
                &self.path,
                "checksum mismatch: the file is damaged",
            ));
        }
        if self
            .r
            .read(&mut [0u8; 1])
            .map_err(|e| snap_err(&self.path, e))?
            != 0
        {
            return Err(snap_err(&self.path, "trailing bytes after the end"));
        }
        Ok(self.count)
    }
}

impl Iterator for Entries {
    type Item = Result<RawEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.end.is_some() {
            return None;
        }
        match self.next_entry() {
            Ok(entry) => entry.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
