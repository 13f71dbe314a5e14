//! Writes the files of a projected volume (configMap, secret, downwardAPI, projected) the
//! way the kubelet's AtomicWriter does, so a reader never sees half an update: the files
//! go into a fresh timestamped directory `..<time>`, the symlink `..data` is pointed at it
//! by a rename, and each user-visible name is a symlink through `..data`
//! (`key -> ..data/key`). The previous timestamped directory is removed afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// One file of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// The files of a volume by their relative path (`a` or `dir/b`).
pub type Payload = BTreeMap<String, File>;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Checks a path of a payload: relative, no `..` element, not starting with `..`.
pub fn check_path(path: &str) -> io::Result<()> {
    if path.is_empty() {
        return Err(invalid("the path is empty".into()));
    }
    if path.starts_with("..") {
        return Err(invalid(format!("the path {path:?} starts with '..'")));
    }
    for c in Path::new(path).components() {
        match c {
            Component::Normal(_) => {}
            Component::ParentDir => {
                return Err(invalid(format!("the path {path:?} contains '..'")));
            }
            _ => return Err(invalid(format!("the path {path:?} must be relative"))),
        }
    }
    Ok(())
}

/// The first element of a payload path: the name that is visible in the volume.
fn top(path: &str) -> &str {
    path.split('/')
        .find(|s| !s.is_empty() && *s != ".")
        .unwrap_or(path)
}

/// Whether the directory `dir` holds exactly `payload`.
fn holds(dir: &Path, payload: &Payload) -> bool {
    let same = payload.iter().all(|(path, f)| {
        let p = dir.join(path);
        fs::symlink_metadata(&p)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o7777 == f.mode)
            && fs::read(&p).is_ok_and(|d| d == f.data)
    });
    same && count_files(dir) == payload.len()
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok())
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => count_files(&e.path()),
                Ok(_) => 1,
                Err(_) => 0,
            })
            .sum()
    })
}

/// Makes `dir` hold `payload`; returns whether anything changed.
pub fn write(dir: &Path, payload: &Payload) -> io::Result<bool> {
    for path in payload.keys() {
        check_path(path)?;
    }
    let context = |what: &str, p: &Path| {
        let (what, p) = (what.to_string(), p.display().to_string());
        move |e: io::Error| io::Error::new(e.kind(), format!("{what} {p}: {e}"))
    };
    fs::create_dir_all(dir).map_err(context("create", dir))?;
    let old = fs::read_link(dir.join(DATA)).ok();
    let unchanged = old.as_ref().is_some_and(|o| holds(&dir.join(o), payload));
    if !unchanged {
        // `..2006_01_02_15_04_05.<nanoseconds>`, as the kubelet names them.
        let now = jiff::Timestamp::now();
        let mut name = format!(
            "..{}.{:09}",
            now.strftime("%Y_%m_%d_%H_%M_%S"),
            now.subsec_nanosecond()
        );
        while dir.join(&name).exists() {
            name.push('0');
        }
        let fresh = dir.join(&name);
        fs::create_dir(&fresh).map_err(context("create", &fresh))?;
        fs::set_permissions(&fresh, fs::Permissions::from_mode(0o755))
            .map_err(context("chmod", &fresh))?;
        for (path, f) in payload {
            let p = fresh.join(path);
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).map_err(context("create", parent))?;
            }
            fs::write(&p, &f.data).map_err(context("write", &p))?;
            fs::set_permissions(&p, fs::Permissions::from_mode(f.mode))
                .map_err(context("chmod", &p))?;
        }
        let tmp = dir.join(DATA_TMP);
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).map_err(context("link", &tmp))?;
        fs::rename(&tmp, dir.join(DATA)).map_err(context("rename", &tmp))?;
    }
    // The visible names: one symlink through `..data` per top-level name, none other.
    let wanted: BTreeSet<&str> = payload.keys().map(|p| top(p)).collect();
    for name in &wanted {
        let link = dir.join(name);
        if fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA).join(name), &link)
                .map_err(context("link", &link))?;
        }
    }
    for entry in fs::read_dir(dir).map_err(context("read", dir))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("..") || wanted.contains(name.as_str()) {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            fs::remove_file(entry.path()).map_err(context("remove", &entry.path()))?;
        }
    }
    if let (false, Some(old)) = (unchanged, old) {
        let old = dir.join(old);
        fs::remove_dir_all(&old).map_err(context("remove", &old))?;
    }
    Ok(!unchanged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> File {
        File {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn timestamped(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("..") && n != DATA)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn files_are_visible_through_data_and_updates_swap_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut p = Payload::new();
        p.insert("a".into(), file("one", 0o644));
        p.insert("sub/b".into(), file("two", 0o600));
        assert!(write(d, &p).unwrap());
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "one");
        assert_eq!(fs::read_to_string(d.join("sub/b")).unwrap(), "two");
        assert_eq!(fs::read_link(d.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(
            fs::read_link(d.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        let b = fs::metadata(d.join("sub/b")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(b, 0o600);
        let first = fs::read_link(d.join(DATA)).unwrap();
        assert_eq!(timestamped(d), vec![first.to_string_lossy().to_string()]);

        // The same payload again changes nothing.
        assert!(!write(d, &p).unwrap());
        assert_eq!(fs::read_link(d.join(DATA)).unwrap(), first);

        // An update: new content, a key gone, a key added; the old directory goes.
        let mut q = Payload::new();
        q.insert("a".into(), file("uno", 0o644));
        q.insert("c".into(), file("three", 0o400));
        assert!(write(d, &q).unwrap());
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "uno");
        assert_eq!(fs::read_to_string(d.join("c")).unwrap(), "three");
        assert!(fs::symlink_metadata(d.join("sub")).is_err());
        let second = fs::read_link(d.join(DATA)).unwrap();
        assert_ne!(second, first);
        assert_eq!(timestamped(d), vec![second.to_string_lossy().to_string()]);

        // A mode change alone is a change.
        q.insert("c".into(), file("three", 0o440));
        assert!(write(d, &q).unwrap());
        // An empty payload leaves an empty volume.
        assert!(write(d, &Payload::new()).unwrap());
        let visible: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| !n.starts_with(".."))
            .collect();
        assert!(visible.is_empty(), "{visible:?}");
    }

    #[test]
    fn paths_that_leave_the_volume_are_refused() {
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "..data", "..x/y"] {
            assert!(check_path(bad).is_err(), "{bad:?}");
            let dir = tempfile::tempdir().unwrap();
            let mut p = Payload::new();
            p.insert(bad.into(), file("x", 0o644));
            assert!(write(dir.path(), &p).is_err(), "{bad:?}");
        }
        for good in ["a", "a/b", "a.b/c..d", ".hidden"] {
            assert!(check_path(good).is_ok(), "{good:?}");
        }
    }
}
