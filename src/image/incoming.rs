//! The directory of archives a node imports by itself (`DATA/images`, as k3s's
//! `agent/images`): every OCI or docker archive put there is imported, at start and
//! whenever one is written or moved in. What was imported is remembered by name, size
//! and modification time (`DATA/oci/incoming.json`), so an unchanged archive is not read
//! again at the next start: k3s re-imports its whole bundle at every boot unless told.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Error, Image, Result, Store, archive};

/// Where a data directory's incoming archives go.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("images")
}

/// Whether `path` names an archive this directory takes.
pub fn is_archive(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    !name.starts_with('.')
        && [".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    size: u64,
    mtime_ns: i128,
}

fn seen(meta: &fs::Metadata) -> Seen {
    Seen {
        size: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    }
}

/// What one scan did with one archive.
#[derive(Debug)]
pub struct Outcome {
    pub file: PathBuf,
    pub result: Result<Vec<Image>>,
}

/// Imports every archive of `incoming` not imported since it last changed.
pub fn scan(store: &Store, incoming: &Path) -> Vec<Outcome> {
    let cache_path = store.root().join("incoming.json");
    let mut cache: BTreeMap<String, Seen> = fs::read(&cache_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut files: Vec<PathBuf> = fs::read_dir(incoming)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_archive(p) && p.is_file())
        .collect();
    files.sort();
    let mut out = Vec::new();
    let mut changed = false;
    for file in files {
        let Ok(meta) = fs::metadata(&file) else {
            continue;
        };
        let key = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let now = seen(&meta);
        if cache.get(&key) == Some(&now) {
            continue;
        }
        let result = archive::import(store, &file, None);
        if result.is_ok() {
            cache.insert(key, now);
            changed = true;
        }
        out.push(Outcome { file, result });
    }
    // Archives gone from the directory are forgotten (their images stay).
    let before = cache.len();
    cache.retain(|name, _| incoming.join(name).exists());
    if (changed || cache.len() != before)
        && let Err(e) = write_cache(store, &cache_path, &cache)
    {
        tracing::warn!(error = %e, "could not remember the imported archives");
    }
    out
}

fn write_cache(store: &Store, path: &Path, cache: &BTreeMap<String, Seen>) -> Result<()> {
    let tmp = store.scratch("incoming");
    let bytes = serde_json::to_vec_pretty(cache).expect("the cache serializes");
    fs::write(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::Io {
                context: format!("write {}", path.display()),
                source: e,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::archive::tests::{docker_archive, layer_tar};

    #[test]
    fn archives_are_told_by_their_names() {
        for yes in ["a.tar", "b.TAR.GZ", "c.tgz", "d.tar.zst", "e.tzst"] {
            assert!(is_archive(Path::new(yes)), "{yes}");
        }
        for no in ["a.txt", ".a.tar", "a.tar.part", "tar"] {
            assert!(!is_archive(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn each_archive_is_imported_once_until_it_changes_and_a_bad_one_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("oci")).unwrap();
        let incoming = dir.path().join("images");
        fs::create_dir(&incoming).unwrap();
        let archive = docker_archive(&["one:1"], &[layer_tar(&[("a", "1")])]);
        fs::write(incoming.join("one.tar"), &archive).unwrap();
        fs::write(incoming.join("broken.tar"), b"not a tar at all").unwrap();
        fs::write(incoming.join("notes.txt"), b"ignored").unwrap();
        let first = scan(&store, &incoming);
        assert_eq!(first.len(), 2);
        let ok: Vec<&Outcome> = first.iter().filter(|o| o.result.is_ok()).collect();
        assert_eq!(ok.len(), 1);
        assert!(ok[0].file.ends_with("one.tar"));
        assert!(store.image("docker.io/library/one:1").is_some());
        // Unchanged: only the broken one is tried again.
        let again = scan(&store, &incoming);
        assert_eq!(again.len(), 1);
        assert!(again[0].file.ends_with("broken.tar"));
        fs::remove_file(incoming.join("broken.tar")).unwrap();
        // Rewritten with another image: imported anew.
        let archive = docker_archive(&["one:1", "two:2"], &[layer_tar(&[("a", "2")])]);
        fs::write(incoming.join("one.tar"), &archive).unwrap();
        let third = scan(&store, &incoming);
        assert_eq!(third.len(), 1);
        assert!(store.image("docker.io/library/two:2").is_some());
        assert!(scan(&store, &incoming).is_empty());
    }
}
