//! The image store in the data directory: content-addressed blobs (manifests, configs,
//! compressed layers), each layer applied once into a directory named by its diff ID
//! (an overlayfs lower layer), and the images by name.
//!
//! ```text
//! ROOT/blobs/sha256/HEX        a blob, its name its digest
//! ROOT/layers/sha256/HEX/      a layer applied, named by its diff ID
//! ROOT/images/HEX.json         an image (HEX: the digest of its name)
//! ROOT/tmp/                    writes under way; emptied when the store opens
//! ```
//!
//! Every write lands in `tmp/` first and is renamed into place only once complete, synced
//! and verified (a blob's digest, a layer's diff ID): a crash or a full disk mid-write
//! leaves nothing a later reader trusts. Blobs and layers are immutable once in place, so
//! two writers of the same one (two pulls, an import beside a pull, another process) race
//! harmlessly: the second rename finds it there and drops its own copy.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::layer;
use super::{Error, Result};

/// One layer of an image: the blob it comes in and the tree it makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Layer {
    /// `sha256:HEX` of the blob (compressed or not).
    pub digest: String,
    pub media_type: String,
    pub size: u64,
    /// `sha256:HEX` of the uncompressed tar.
    pub diff_id: String,
}

/// An image by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// The normalized reference (`docker.io/library/busybox:latest`).
    pub name: String,
    /// The digest of the manifest the image was made from (`name@digest` pulls it again).
    pub manifest: String,
    /// The digest of the image's config: its ID, as the kubelet reports `imageID`.
    pub config: String,
    pub layers: Vec<Layer>,
    /// Where it came from: `import FILE` or `pull`.
    pub source: String,
    /// When it was stored (RFC 3339).
    pub stored_at: String,
}

impl Image {
    /// The bytes its blobs take (what `berth image ls` and node status report).
    pub fn size(&self) -> u64 {
        self.layers.iter().map(|l| l.size).sum()
    }
}

/// What a prune removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub blobs: usize,
    pub layers: usize,
    pub bytes: u64,
}

pub struct Store {
    root: PathBuf,
}

/// `HEX` of `sha256:HEX`, when it is one (anything else is no name of a file here).
fn sha256_hex(digest: &str) -> Result<&str> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(hex)
        }
        _ => Err(Error::Invalid(format!(
            "{digest:?} is not a sha256 digest (sha256: and 64 lowercase hex digits)"
        ))),
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// Syncs a directory, so that the renames into it last.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Store {
    /// Opens (or makes) the store under `root`, dropping what a crash left in `tmp/`: the
    /// writes of processes that are gone (another process's writes under way stay).
    pub fn open(root: &Path) -> Result<Store> {
        let store = Store {
            root: root.to_path_buf(),
        };
        for dir in ["blobs/sha256", "layers/sha256", "images", "tmp"] {
            let d = store.root.join(dir);
            fs::create_dir_all(&d).map_err(io_err(format!("create {}", d.display())))?;
        }
        for e in fs::read_dir(store.root.join("tmp"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let writer = name.split('-').nth(1).and_then(|p| p.parse::<i32>().ok());
            let alive = writer
                .and_then(rustix::process::Pid::from_raw)
                .is_some_and(|pid| {
                    !matches!(
                        rustix::process::test_kill_process(pid),
                        Err(rustix::io::Errno::SRCH)
                    )
                });
            if !alive {
                let path = e.path();
                let removed = if e.file_type().is_ok_and(|t| t.is_dir()) {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                removed.map_err(io_err(format!("remove {}", path.display())))?;
            }
        }
        Ok(store)
    }

    /// The store under `root` for reading only: nothing is made or cleaned.
    pub fn at(root: &Path) -> Store {
        Store {
            root: root.to_path_buf(),
        }
    }

    /// The images as a node's status lists them (the kubelet's `status.images`): one
    /// entry per image ID with its names and repository digests, the largest first, at
    /// most `max`.
    pub fn node_images(&self, max: usize) -> Vec<(Vec<String>, u64)> {
        let mut by_id: std::collections::BTreeMap<String, (Vec<String>, u64)> =
            std::collections::BTreeMap::new();
        for img in self.images() {
            let entry = by_id
                .entry(img.config.clone())
                .or_insert_with(|| (Vec::new(), img.size()));
            let repo = img.name.split(['@']).next().unwrap_or(&img.name);
            let repo = match repo.rfind(':') {
                Some(i) if !repo[i..].contains('/') => &repo[..i],
                _ => repo,
            };
            if img.name != img.config {
                entry.0.push(format!("{repo}@{}", img.manifest));
                entry.0.push(img.name.clone());
            }
        }
        let mut out: Vec<(Vec<String>, u64)> = by_id
            .into_values()
            .filter(|(names, _)| !names.is_empty())
            .map(|(mut names, size)| {
                // As the kubelet: the repository digests, then the tags.
                names.sort_by(|a, b| (!a.contains('@'), a).cmp(&(!b.contains('@'), b)));
                names.dedup();
                (names, size)
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out.truncate(max);
        out
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A fresh place under `tmp/` (a file or a directory to be), named after the process
    /// that writes it: `WHAT-PID-UUID`.
    pub fn scratch(&self, what: &str) -> PathBuf {
        self.root.join("tmp").join(format!(
            "{what}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    pub fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("blobs/sha256").join(sha256_hex(digest)?))
    }

    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.exists())
    }

    /// Writes the blob read from `r`, checking it against `expected` when given; returns
    /// its digest and size.
    pub fn write_blob(&self, expected: Option<&str>, mut r: impl Read) -> Result<(String, u64)> {
        if let Some(d) = expected {
            sha256_hex(d)?;
        }
        let tmp = self.scratch("blob");
        let mut f = File::create(&tmp).map_err(io_err(format!("create {}", tmp.display())))?;
        let mut hash = Sha256::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 256 << 10];
        let copied: io::Result<()> = (|| {
            loop {
                let n = r.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hash.update(&buf[..n]);
                f.write_all(&buf[..n])?;
                size += n as u64;
            }
            f.sync_all()
        })();
        if let Err(e) = copied {
            let _ = fs::remove_file(&tmp);
            return Err(Error::Io {
                context: "write a blob".into(),
                source: e,
            });
        }
        let digest = format!("sha256:{:x}", hash.finalize());
        if let Some(want) = expected
            && want != digest
        {
            let _ = fs::remove_file(&tmp);
            return Err(Error::DigestMismatch {
                what: "blob".into(),
                expected: want.to_string(),
                got: digest,
            });
        }
        let dst = self.blob_path(&digest)?;
        fs::rename(&tmp, &dst).map_err(io_err(format!("store blob {digest}")))?;
        sync_dir(dst.parent().expect("blob dir")).map_err(io_err("sync the blobs"))?;
        Ok((digest, size))
    }

    /// A blob's bytes (manifests and configs: small ones).
    pub fn read_blob(&self, digest: &str) -> Result<Vec<u8>> {
        let p = self.blob_path(digest)?;
        fs::read(&p).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound(format!("blob {digest}")),
            _ => Error::Io {
                context: format!("read blob {digest}"),
                source: e,
            },
        })
    }

    pub fn layer_path(&self, diff_id: &str) -> Result<PathBuf> {
        Ok(self.root.join("layers/sha256").join(sha256_hex(diff_id)?))
    }

    /// The directory of the layer `l`, applying its blob first if it is not there yet.
    pub fn ensure_layer(&self, l: &Layer) -> Result<PathBuf> {
        let dst = self.layer_path(&l.diff_id)?;
        if dst.exists() {
            return Ok(dst);
        }
        let blob = self.blob_path(&l.digest)?;
        let f = File::open(&blob).map_err(io_err(format!("open layer blob {}", l.digest)))?;
        let tmp = self.scratch("layer");
        fs::create_dir(&tmp).map_err(io_err(format!("create {}", tmp.display())))?;
        let applied = match layer::apply(f, &tmp) {
            Ok(a) => a,
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return Err(Error::Io {
                    context: format!("apply layer {}", l.digest),
                    source: e,
                });
            }
        };
        if applied.diff_id != l.diff_id {
            let _ = fs::remove_dir_all(&tmp);
            return Err(Error::DigestMismatch {
                what: format!("layer {} (its diff ID)", l.digest),
                expected: l.diff_id.clone(),
                got: applied.diff_id,
            });
        }
        // Everything written reaches the disk before the layer is trusted.
        let synced = File::open(&tmp).and_then(|d| rustix::fs::syncfs(&d).map_err(Into::into));
        synced.map_err(io_err("sync a layer"))?;
        match fs::rename(&tmp, &dst) {
            Ok(()) => {}
            // Another writer put it there first: the same content.
            Err(_) if dst.exists() => {
                let _ = fs::remove_dir_all(&tmp);
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return Err(Error::Io {
                    context: format!("store layer {}", l.diff_id),
                    source: e,
                });
            }
        }
        sync_dir(dst.parent().expect("layer dir")).map_err(io_err("sync the layers"))?;
        Ok(dst)
    }

    fn image_path(&self, name: &str) -> PathBuf {
        let key = format!("{:x}", Sha256::digest(name.as_bytes()));
        self.root.join("images").join(format!("{key}.json"))
    }

    /// Records (or replaces) the image of `img.name`.
    pub fn put_image(&self, img: &Image) -> Result<()> {
        let tmp = self.scratch("image");
        let bytes = serde_json::to_vec_pretty(img).expect("an image serializes");
        let written = File::create(&tmp).and_then(|mut f| {
            f.write_all(&bytes)?;
            f.sync_all()
        });
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(Error::Io {
                context: format!("record image {}", img.name),
                source: e,
            });
        }
        let dst = self.image_path(&img.name);
        fs::rename(&tmp, &dst).map_err(io_err(format!("record image {}", img.name)))?;
        sync_dir(&self.root.join("images")).map_err(io_err("sync the images"))
    }

    pub fn image(&self, name: &str) -> Option<Image> {
        let bytes = fs::read(self.image_path(name)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every image, by name.
    pub fn images(&self) -> Vec<Image> {
        let mut out: Vec<Image> = fs::read_dir(self.root.join("images"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice(&fs::read(e.path()).ok()?).ok())
            .collect();
        out.sort_by(|a: &Image, b| a.name.cmp(&b.name));
        out
    }

    /// Forgets the image `name` (its blobs and layers go with the next prune); whether
    /// there was one.
    pub fn remove_image(&self, name: &str) -> Result<bool> {
        match fs::remove_file(self.image_path(name)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::Io {
                context: format!("remove image {name}"),
                source: e,
            }),
        }
    }

    /// Removes the blobs and layers no image names, except those of `keep` (layers in use
    /// by running containers).
    pub fn prune(&self, keep: &[String]) -> Result<Pruned> {
        let images = self.images();
        let mut blobs: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut layers: std::collections::HashSet<String> = keep.iter().cloned().collect();
        for img in &images {
            blobs.insert(img.manifest.clone());
            blobs.insert(img.config.clone());
            for l in &img.layers {
                blobs.insert(l.digest.clone());
                layers.insert(l.diff_id.clone());
            }
        }
        let mut pruned = Pruned::default();
        for (dir, names, is_layer) in [
            ("blobs/sha256", &blobs, false),
            ("layers/sha256", &layers, true),
        ] {
            for e in fs::read_dir(self.root.join(dir))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = format!("sha256:{}", e.file_name().to_string_lossy());
                if names.contains(&name) {
                    continue;
                }
                let path = e.path();
                if is_layer {
                    pruned.bytes += du(&path);
                    fs::remove_dir_all(&path).map_err(io_err(format!("remove layer {name}")))?;
                    pruned.layers += 1;
                } else {
                    pruned.bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
                    fs::remove_file(&path).map_err(io_err(format!("remove blob {name}")))?;
                    pruned.blobs += 1;
                }
            }
        }
        Ok(pruned)
    }
}

/// The bytes of the regular files under `path`.
fn du(path: &Path) -> u64 {
    let Ok(m) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !m.is_dir() {
        return if m.is_file() { m.len() } else { 0 };
    }
    fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| du(&e.path()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer_of(store: &Store, tar: &[u8]) -> Layer {
        let (digest, size) = store.write_blob(None, tar).unwrap();
        Layer {
            digest,
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size,
            diff_id: format!("sha256:{:x}", Sha256::digest(tar)),
        }
    }

    fn tar_with(path: &str, data: &str) -> Vec<u8> {
        crate::image::archive::tests::layer_tar(&[(path, data)])
    }

    #[test]
    fn a_blob_is_stored_by_its_digest_and_a_wrong_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let want = format!("sha256:{:x}", Sha256::digest(b"hello"));
        let (digest, size) = store.write_blob(Some(&want), &b"hello"[..]).unwrap();
        assert_eq!((digest.as_str(), size), (want.as_str(), 5));
        assert_eq!(store.read_blob(&want).unwrap(), b"hello");
        let wrong = format!("sha256:{:x}", Sha256::digest(b"other"));
        let err = store.write_blob(Some(&wrong), &b"hello!"[..]).unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
        assert!(!store.has_blob(&wrong));
        // Nothing half-written is left behind.
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert!(
            store
                .write_blob(Some("sha256:../../etc"), &b""[..])
                .is_err()
        );
        assert!(store.blob_path("md5:abc").is_err());
    }

    #[test]
    fn a_layer_is_applied_once_and_a_wrong_diff_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let l = layer_of(&store, &tar_with("etc/motd", "hi\n"));
        let at = store.ensure_layer(&l).unwrap();
        assert_eq!(fs::read_to_string(at.join("etc/motd")).unwrap(), "hi\n");
        // Again: the same directory, not applied anew.
        fs::write(at.join("marker"), "").unwrap();
        assert!(store.ensure_layer(&l).unwrap().join("marker").exists());
        let mut bad = layer_of(&store, &tar_with("x", "y"));
        bad.diff_id = format!("sha256:{:x}", Sha256::digest(b"not it"));
        let err = store.ensure_layer(&bad).unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
        assert!(!store.layer_path(&bad.diff_id).unwrap().exists());
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn what_a_crash_left_in_tmp_is_dropped_and_prune_keeps_what_images_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let kept = layer_of(&store, &tar_with("a", "1"));
        let gone = layer_of(&store, &tar_with("b", "2"));
        store.ensure_layer(&kept).unwrap();
        store.ensure_layer(&gone).unwrap();
        let (config, _) = store.write_blob(None, &b"{}"[..]).unwrap();
        let (manifest, _) = store.write_blob(None, &b"{\"m\":1}"[..]).unwrap();
        let img = Image {
            name: "docker.io/library/kept:1".into(),
            manifest,
            config,
            layers: vec![kept.clone()],
            source: "test".into(),
            stored_at: "2026-01-01T00:00:00Z".into(),
        };
        store.put_image(&img).unwrap();
        assert_eq!(store.image(&img.name), Some(img.clone()));
        let listed = Store::at(dir.path()).node_images(50);
        assert_eq!(listed.len(), 1);
        assert_eq!(
            listed[0].0,
            [
                format!("docker.io/library/kept@{}", img.manifest),
                "docker.io/library/kept:1".to_string()
            ]
        );
        assert_eq!(listed[0].1, kept.size);
        // A write of a process that is gone is dropped; one of a live process stays.
        fs::write(dir.path().join("tmp/blob-999999999-half"), "half").unwrap();
        fs::write(dir.path().join("tmp/blob-nopid"), "half").unwrap();
        let live = store.scratch("blob");
        fs::write(&live, "under way").unwrap();
        let store = Store::open(dir.path()).unwrap();
        let left: Vec<_> = fs::read_dir(dir.path().join("tmp"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left, std::slice::from_ref(&live));
        fs::remove_file(&live).unwrap();
        let pruned = store.prune(&[]).unwrap();
        assert_eq!((pruned.blobs, pruned.layers), (1, 1));
        assert!(store.ensure_layer(&kept).is_ok());
        assert!(!store.has_blob(&gone.digest));
        assert!(!store.layer_path(&gone.diff_id).unwrap().exists());
        // A layer a container uses stays even when its image goes.
        assert!(store.remove_image(&img.name).unwrap());
        assert!(!store.remove_image(&img.name).unwrap());
        let pruned = store.prune(std::slice::from_ref(&kept.diff_id)).unwrap();
        assert_eq!((pruned.blobs, pruned.layers), (3, 0));
        assert!(store.layer_path(&kept.diff_id).unwrap().exists());
        assert!(store.images().is_empty());
    }
}
