//! Applying one image layer (a tar stream, plain, gzip or zstd) into a directory of its own,
//! in the form overlayfs reads as a lower layer: an OCI whiteout `.wh.NAME` becomes a
//! character device 0:0 named NAME, an opaque marker `.wh..wh..opq` becomes the
//! `trusted.overlay.opaque` attribute of its directory (so the order of the tar's entries
//! does not matter), and a file keeps its mode, owner, times, extended attributes
//! (`SCHILY.xattr.*`, but never `trusted.overlay.*`, which would forge whiteouts) and hard
//! links. The `tar` crate unpacks the entries and keeps every path inside the directory;
//! devices and FIFOs, which it would write as plain files, are made here.
//!
//! The uncompressed stream is hashed as it is read: its digest is the layer's diff ID,
//! which the image's config names, so a layer that is not the one named is refused.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode};
use sha2::{Digest as _, Sha256};

/// The opaque marker of OCI layers.
const OPAQUE: &str = ".wh..wh..opq";
const WHITEOUT_PREFIX: &str = ".wh.";
/// The attribute that makes a directory of an overlay layer opaque.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// What applying a layer found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `sha256:HEX` of the uncompressed tar stream.
    pub diff_id: String,
    /// Bytes of the uncompressed stream.
    pub size: u64,
    pub entries: u64,
    pub whiteouts: u64,
}

/// A compression a layer may come in, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// Tells the compression of a stream from its first bytes (as containerd does, the
    /// media type is not trusted for it).
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// The uncompressed stream of `r`, whatever its compression.
pub fn decompress<'a, R: Read + 'a>(r: R) -> io::Result<Box<dyn Read + 'a>> {
    let mut r = BufReader::with_capacity(128 << 10, r);
    let head = r.fill_buf()?;
    Ok(match Compression::sniff(head) {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(r)?),
    })
}

/// A reader that hashes and counts what passes through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
    size: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The path of an entry relative to the layer's root: leading `/` and `.` dropped, `..`
/// refused (no entry may reach out of the layer).
fn relative(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                return Err(invalid(format!(
                    "the layer's entry {} reaches out of the layer with '..'",
                    path.display()
                )));
            }
        }
    }
    Ok(out)
}

/// Makes the directories of `rel` under `root`, refusing to pass through anything that is
/// not a directory (a symbolic link could lead out of the layer).
fn ensure_dirs(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    let mut at = root.to_path_buf();
    for c in rel.components() {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(invalid(format!(
                    "{} is not a directory in the layer",
                    rel.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(&at)?,
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

/// Removes whatever is at `path` (a file, a link, a tree), if anything.
fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Applies the layer `r` (compressed or not) into `dest`, an empty directory.
pub fn apply<R: Read>(r: R, dest: &Path) -> io::Result<Applied> {
    let mut hashing = Hashing {
        inner: decompress(r)?,
        hash: Sha256::new(),
        size: 0,
    };
    let mut applied = Applied::default();
    {
        let mut archive = tar::Archive::new(&mut hashing);
        archive.set_preserve_permissions(true);
        archive.set_preserve_ownerships(true);
        archive.set_preserve_mtime(true);
        archive.set_overwrite(true);
        for entry in archive.entries()? {
            let mut entry = entry?;
            applied.entries += 1;
            let path = entry.path()?.into_owned();
            let rel = relative(&path)?;
            let Some(name) = rel.file_name().map(OsStr::to_owned) else {
                continue; // the root itself
            };
            let parent_rel = rel.parent().unwrap_or(Path::new(""));
            if let Some(hidden) = name.as_bytes().strip_prefix(WHITEOUT_PREFIX.as_bytes()) {
                let parent = ensure_dirs(dest, parent_rel)?;
                applied.whiteouts += 1;
                if name == OPAQUE {
                    rustix::fs::lsetxattr(
                        &parent,
                        OPAQUE_XATTR,
                        b"y",
                        rustix::fs::XattrFlags::empty(),
                    )
                    .map_err(|e| {
                        io::Error::other(format!(
                            "mark {} opaque: {e} (whiteouts need berth to run as root)",
                            parent_rel.display()
                        ))
                    })?;
                } else if !hidden.is_empty() {
                    let target = parent.join(OsStr::from_bytes(hidden));
                    remove_any(&target)?;
                    rustix::fs::mknodat(
                        rustix::fs::CWD,
                        &target,
                        FileType::CharacterDevice,
                        Mode::empty(),
                        0,
                    )
                    .map_err(|e| {
                        io::Error::other(format!(
                            "make the whiteout of {}: {e} (whiteouts need berth to run as root)",
                            rel.display()
                        ))
                    })?;
                }
                continue;
            }
            let xattrs = xattrs_of(&mut entry)?;
            let kind = entry.header().entry_type();
            let special = if kind.is_character_special() {
                Some(FileType::CharacterDevice)
            } else if kind.is_block_special() {
                Some(FileType::BlockDevice)
            } else if kind.is_fifo() {
                Some(FileType::Fifo)
            } else {
                None
            };
            let target = dest.join(&rel);
            if let Some(file_type) = special {
                let header = entry.header();
                let (major, minor) = (
                    // Blank for a FIFO in some writers' headers.
                    header.device_major().ok().flatten().unwrap_or(0),
                    header.device_minor().ok().flatten().unwrap_or(0),
                );
                let mode = header.mode()? & 0o7777;
                let (uid, gid) = (header.uid()?, header.gid()?);
                ensure_dirs(dest, parent_rel)?;
                remove_any(&target)?;
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &target,
                    file_type,
                    Mode::from_raw_mode(mode),
                    rustix::fs::makedev(major, minor),
                )
                .map_err(|e| io::Error::other(format!("make {}: {e}", rel.display())))?;
                let _ = rustix::fs::chownat(
                    rustix::fs::CWD,
                    &target,
                    Some(rustix::fs::Uid::from_raw(uid as u32)),
                    Some(rustix::fs::Gid::from_raw(gid as u32)),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                );
            } else if !entry.unpack_in(dest)? {
                return Err(invalid(format!(
                    "the layer's entry {} reaches out of the layer",
                    path.display()
                )));
            }
            for (key, value) in xattrs {
                rustix::fs::lsetxattr(&target, &key, &value, rustix::fs::XattrFlags::empty())
                    .map_err(|e| {
                        io::Error::other(format!("set {key} on {}: {e}", rel.display()))
                    })?;
            }
        }
    }
    // The tar's end may leave padding unread; the diff ID is of the whole stream.
    io::copy(&mut hashing, &mut io::sink())?;
    applied.diff_id = format!("sha256:{:x}", hashing.hash.finalize());
    applied.size = hashing.size;
    Ok(applied)
}

/// The extended attributes an entry carries (`SCHILY.xattr.NAME` PAX records), without
/// those of overlayfs.
fn xattrs_of<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let Some(exts) = entry.pax_extensions()? else {
        return Ok(out);
    };
    for ext in exts {
        let ext = ext?;
        let Ok(key) = ext.key() else { continue };
        if let Some(name) = key.strip_prefix("SCHILY.xattr.")
            && !name.starts_with("trusted.overlay.")
        {
            out.push((name.to_string(), ext.value_bytes().to_vec()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

    /// A tar of `entries`: (path, kind, data or link target).
    pub(crate) fn tar_of(entries: &[(&str, char, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_mtime(1_700_000_000);
            h.set_uid(1000);
            h.set_gid(1001);
            match kind {
                'd' => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(0o755);
                    h.set_size(0);
                    b.append_data(&mut h, path, io::empty()).unwrap();
                }
                'f' => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(0o4755);
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, path, data.as_bytes()).unwrap();
                }
                'l' | 'h' => {
                    h.set_entry_type(if *kind == 'l' {
                        tar::EntryType::Symlink
                    } else {
                        tar::EntryType::Link
                    });
                    h.set_mode(0o777);
                    h.set_size(0);
                    b.append_link(&mut h, path, data).unwrap();
                }
                'p' => {
                    h.set_entry_type(tar::EntryType::Fifo);
                    h.set_mode(0o600);
                    h.set_size(0);
                    b.append_data(&mut h, path, io::empty()).unwrap();
                }
                _ => unreachable!(),
            }
        }
        b.into_inner().unwrap()
    }

    fn root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[test]
    fn files_links_modes_and_owners_are_kept_and_the_diff_id_is_the_streams() {
        let tar = tar_of(&[
            ("bin/", 'd', ""),
            ("bin/tool", 'f', "#!/bin/sh\n"),
            ("bin/alias", 'l', "tool"),
            ("bin/same", 'h', "bin/tool"),
            ("run/fifo", 'p', ""),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let applied = apply(&tar[..], dir.path()).unwrap();
        assert_eq!(
            applied.diff_id,
            format!("sha256:{:x}", Sha256::digest(&tar))
        );
        assert_eq!(applied.size, tar.len() as u64);
        assert_eq!(applied.entries, 5);
        let tool = fs::metadata(dir.path().join("bin/tool")).unwrap();
        assert_eq!(tool.permissions().mode() & 0o7777, 0o4755);
        assert_eq!(tool.mtime(), 1_700_000_000);
        assert_eq!(
            fs::read_link(dir.path().join("bin/alias")).unwrap(),
            Path::new("tool")
        );
        let same = fs::metadata(dir.path().join("bin/same")).unwrap();
        assert_eq!((same.ino(), same.nlink()), (tool.ino(), 2));
        if root() {
            assert_eq!((tool.uid(), tool.gid()), (1000, 1001));
            let fifo = fs::symlink_metadata(dir.path().join("run/fifo")).unwrap();
            assert!(fifo.file_type().is_fifo());
        }
    }

    #[test]
    fn gzip_and_zstd_layers_unpack_to_the_same_tree_and_diff_id() {
        let tar = tar_of(&[("etc/", 'd', ""), ("etc/motd", 'f', "hello\n")]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::stream::encode_all(&tar[..], 3).unwrap();
        assert_eq!(Compression::sniff(&gz), Compression::Gzip);
        assert_eq!(Compression::sniff(&zst), Compression::Zstd);
        assert_eq!(Compression::sniff(&tar), Compression::None);
        let mut ids = Vec::new();
        for blob in [&tar, &gz, &zst] {
            let dir = tempfile::tempdir().unwrap();
            ids.push(apply(&blob[..], dir.path()).unwrap().diff_id);
            assert_eq!(
                fs::read_to_string(dir.path().join("etc/motd")).unwrap(),
                "hello\n"
            );
        }
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    }

    #[test]
    fn whiteouts_become_overlay_whiteouts_and_opaque_directories() {
        if !root() {
            return; // mknod and trusted.* attributes need root
        }
        let tar = tar_of(&[
            ("etc/.wh.gone", 'f', ""),
            ("var/cache/", 'd', ""),
            ("var/cache/kept", 'f', "x"),
            ("var/cache/.wh..wh..opq", 'f', ""),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let applied = apply(&tar[..], dir.path()).unwrap();
        assert_eq!(applied.whiteouts, 2);
        let gone = fs::symlink_metadata(dir.path().join("etc/gone")).unwrap();
        assert!(gone.file_type().is_char_device());
        assert_eq!(gone.rdev(), 0);
        assert!(!dir.path().join("etc/.wh.gone").exists());
        let mut value = [0u8; 4];
        let n =
            rustix::fs::lgetxattr(dir.path().join("var/cache"), OPAQUE_XATTR, &mut value).unwrap();
        assert_eq!(&value[..n], b"y");
        // Siblings of the marker in the same layer stay, whatever their order.
        assert!(dir.path().join("var/cache/kept").exists());
        assert!(!dir.path().join("var/cache/.wh..wh..opq").exists());
    }

    #[test]
    fn entries_that_reach_out_of_the_layer_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        for entries in [
            vec![("../escape", 'f', "x")],
            vec![
                ("link", 'l', outside.path().to_str().unwrap()),
                ("link/victim", 'f', "x"),
            ],
            vec![("link", 'l', "/"), ("link/.wh.etc", 'f', "")],
        ] {
            let dir = tempfile::tempdir().unwrap();
            // `tar::Builder` itself refuses `..`, so the header is written by hand.
            let tar = if entries[0].0.starts_with("..") {
                raw_tar("../escape", b"x")
            } else {
                tar_of(&entries)
            };
            let err = apply(&tar[..], dir.path()).unwrap_err();
            assert!(!target.exists(), "{err}");
            assert!(!outside.path().join("etc").exists());
        }
    }

    #[test]
    fn overlay_attributes_in_a_layer_are_dropped() {
        if !root() {
            return;
        }
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([
            ("SCHILY.xattr.trusted.overlay.opaque", &b"y"[..]),
            ("SCHILY.xattr.user.kept", &b"1"[..]),
        ])
        .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, "d", io::empty()).unwrap();
        let tar = b.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        apply(&tar[..], dir.path()).unwrap();
        let mut value = [0u8; 4];
        assert!(rustix::fs::lgetxattr(dir.path().join("d"), OPAQUE_XATTR, &mut value).is_err());
        let n = rustix::fs::lgetxattr(dir.path().join("d"), "user.kept", &mut value);
        // tmpfs takes user.* attributes only on recent kernels.
        if let Ok(n) = n {
            assert_eq!(&value[..n], b"1");
        }
    }

    /// A one-entry ustar archive with any path, `..` included.
    fn raw_tar(path: &str, data: &[u8]) -> Vec<u8> {
        let mut h = tar::Header::new_ustar();
        h.set_uid(0);
        h.set_gid(0);
        h.as_mut_bytes()[..path.len()].copy_from_slice(path.as_bytes());
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        let mut out = h.as_bytes().to_vec();
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
        out.extend_from_slice(&[0; 1024]);
        out
    }
}
