//! Mount points that a container's volumes need and this machine lacks, made without
//! touching this machine's filesystem (a command on this machine has no root filesystem
//! of its own to make them in).
//!
//! In the container's own mount namespace, the nearest directory that exists above a
//! missing mount point is *shadowed*: a small tmpfs (with the directory's mode and owner)
//! is mounted over it, holding a stand-in for each of its entries (a directory, an empty
//! file, or the same symbolic link), and each original entry is bind-mounted onto its
//! stand-in with everything mounted below it, read-only where it was. The missing path is
//! then made in the tmpfs. The container sees all it saw before plus the mount point;
//! new entries it makes right in the shadowed directory stay in the tmpfs (and go with
//! the namespace), while everything below the directory's entries is the machine's own.
//!
//! A directory is shadowed once: a mount point below a shadow's tmpfs, or inside a
//! writable volume (as container engines make them), is made right there. Shadowing `/`
//! moves this process's root onto the tmpfs (a mount over the root is not seen through
//! the root otherwise); `setns` into the namespace (exec, probes) finds it, as it starts
//! at the topmost mount over the namespace's root.
//!
//! This uses the kernel's mount API (`fsopen`, `open_tree`, `move_mount`: Linux 5.2) and
//! the mount ids of `statx` (Linux 5.8).

use std::ffi::{CStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, StatVfsMountFlags, StatxFlags};
use rustix::mount::{
    FsMountFlags, FsOpenFlags, FsPickFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags,
};

/// The size of a shadow's tmpfs: its stand-ins are empty, so it holds little more than
/// what the container itself writes next to them.
const SHADOW_SIZE: &str = "16m";

/// The mount points made in one mount namespace, and what was mounted there. Volumes are
/// mounted outer paths first, each after [`MountPoints::make`] and followed by
/// [`MountPoints::mounted`]; [`MountPoints::finish`] comes last.
#[derive(Default)]
pub struct MountPoints {
    shadows: Vec<Shadow>,
    /// Where volumes were mounted.
    volumes: Vec<PathBuf>,
}

/// A tmpfs mounted over a directory.
struct Shadow {
    root: OwnedFd,
    /// The tmpfs's device: what lies in it (in any copy of its mount) has this one.
    dev: u64,
    /// Whether the directory was read-only, as the tmpfs will be once every mount point
    /// in it is made.
    read_only: bool,
}

impl MountPoints {
    /// Makes sure `target` exists to mount something on: a directory when `dir`, else an
    /// empty file (with the directories above it). What exists is left as it is.
    pub fn make(&mut self, target: &Path, dir: bool) -> io::Result<()> {
        let Some((base, missing)) = locate(target)? else {
            return Ok(());
        };
        let at = match self.ours(&base)? {
            true => rustix::fs::open(
                &base,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| fail(format!("open {}", base.display()), e))?,
            false => self.shadow(&base)?,
        };
        create(at, &missing, dir)
    }

    /// Records that a volume is mounted at `target`.
    pub fn mounted(&mut self, target: &Path) {
        self.volumes.push(target.to_path_buf());
    }

    /// Makes the shadows of read-only directories read-only.
    pub fn finish(self) -> io::Result<()> {
        for s in self.shadows.iter().filter(|s| s.read_only) {
            // The tmpfs itself, so every copy of its mount is read-only too.
            let fs = rustix::mount::fspick(
                &s.root,
                "",
                FsPickFlags::FSPICK_EMPTY_PATH | FsPickFlags::FSPICK_CLOEXEC,
            )
            .map_err(|e| fail("pick a shadow's tmpfs".into(), e))?;
            rustix::mount::fsconfig_set_flag(&fs, "ro")
                .and_then(|()| rustix::mount::fsconfig_reconfigure(&fs))
                .map_err(|e| fail("make a shadow's tmpfs read-only".into(), e))?;
        }
        Ok(())
    }

    /// Whether the directory `dir` lies in what this namespace mounted and may be
    /// written: a shadow's tmpfs, or a writable volume.
    fn ours(&self, dir: &Path) -> io::Result<bool> {
        let st = rustix::fs::stat(dir).map_err(|e| fail(format!("stat {}", dir.display()), e))?;
        if self.shadows.iter().any(|s| s.dev == st.st_dev) {
            return Ok(true);
        }
        let mount_id = |p: &Path| {
            rustix::fs::statx(CWD, p, AtFlags::empty(), StatxFlags::MNT_ID)
                .ok()
                .filter(|s| s.stx_mask & StatxFlags::MNT_ID.bits() != 0)
                .map(|s| s.stx_mnt_id)
        };
        // Without mount ids (before Linux 5.8) nothing counts as a volume: the directory
        // is shadowed, which never writes anywhere.
        let Some(id) = mount_id(dir) else {
            return Ok(false);
        };
        if !self.volumes.iter().any(|v| mount_id(v) == Some(id)) {
            return Ok(false);
        }
        let flags = rustix::fs::statvfs(dir)
            .map_err(|e| fail(format!("statvfs {}", dir.display()), e))?
            .f_flag;
        Ok(!flags.contains(StatVfsMountFlags::RDONLY))
    }

    /// Mounts a tmpfs over `dir` standing in for what `dir` holds; returns its root.
    fn shadow(&mut self, dir: &Path) -> io::Result<OwnedFd> {
        let what = |s: &str| format!("shadow {}: {s}", dir.display());
        let original = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| fail(what("open"), e))?;
        let st = rustix::fs::fstat(&original).map_err(|e| fail(what("stat"), e))?;
        let flags = rustix::fs::fstatvfs(&original)
            .map_err(|e| fail(what("statvfs"), e))?
            .f_flag;
        let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)
            .map_err(|e| fail(what("open a tmpfs (the mount API needs Linux 5.2)"), e))?;
        for (key, value) in [
            ("size", SHADOW_SIZE.to_string()),
            ("mode", format!("{:o}", st.st_mode & 0o7777)),
            ("uid", st.st_uid.to_string()),
            ("gid", st.st_gid.to_string()),
        ] {
            rustix::mount::fsconfig_set_string(&fs, key, value)
                .map_err(|e| fail(what(&format!("set the tmpfs's {key}")), e))?;
        }
        rustix::mount::fsconfig_create(&fs).map_err(|e| fail(what("create a tmpfs"), e))?;
        let mut attrs = MountAttrFlags::empty();
        for (had, attr) in [
            (StatVfsMountFlags::NOSUID, MountAttrFlags::MOUNT_ATTR_NOSUID),
            (StatVfsMountFlags::NODEV, MountAttrFlags::MOUNT_ATTR_NODEV),
            (StatVfsMountFlags::NOEXEC, MountAttrFlags::MOUNT_ATTR_NOEXEC),
        ] {
            if flags.contains(had) {
                attrs |= attr;
            }
        }
        let root = rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs)
            .map_err(|e| fail(what("mount a tmpfs"), e))?;
        rustix::mount::move_mount(
            &root,
            "",
            &original,
            "",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
        )
        .map_err(|e| fail(what("mount the tmpfs over it"), e))?;
        populate(&original, &root).map_err(|e| io::Error::other(what(&e.to_string())))?;
        if dir == Path::new("/") {
            enter_root(&root).map_err(|e| fail(what("enter the new root"), e))?;
        }
        let dev = rustix::fs::fstat(&root)
            .map_err(|e| fail(what("stat the tmpfs"), e))?
            .st_dev;
        let at = root.try_clone()?;
        self.shadows.push(Shadow {
            root,
            dev,
            read_only: flags.contains(StatVfsMountFlags::RDONLY),
        });
        Ok(at)
    }
}

fn fail(what: String, e: rustix::io::Errno) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Finds where `target` stops existing: the directory that exists above it (the real
/// one, symbolic links resolved as the kernel resolves them in this process's root) and
/// the names missing below it. None: `target` exists.
fn locate(target: &Path) -> io::Result<Option<(PathBuf, Vec<OsString>)>> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    if !target.is_absolute() {
        return Err(invalid(format!(
            "{} is not an absolute path",
            target.display()
        )));
    }
    let parts: Vec<Component> = target.components().collect();
    let mut at = PathBuf::from("/");
    for (i, part) in parts.iter().enumerate() {
        let name = match part {
            Component::Normal(name) => name,
            // `at` has no symbolic links in it: going up is taking its last name off.
            Component::ParentDir => {
                at.pop();
                continue;
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        };
        let next = at.join(name);
        match fs::symlink_metadata(&next) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let missing: Vec<OsString> = parts[i..]
                    .iter()
                    .map(|p| match p {
                        Component::Normal(n) => Ok(n.to_os_string()),
                        _ => Err(invalid(format!(
                            "{} goes up from a directory that does not exist",
                            target.display()
                        ))),
                    })
                    .collect::<io::Result<_>>()?;
                return Ok(Some((at, missing)));
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", next.display()))),
            Ok(m) if m.file_type().is_symlink() => {
                at = fs::canonicalize(&next).map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => io::Error::new(
                        e.kind(),
                        format!("{} is a symbolic link to nothing", next.display()),
                    ),
                    _ => io::Error::new(e.kind(), format!("{}: {e}", next.display())),
                })?;
            }
            Ok(_) => at = next,
        }
        let more = parts[i + 1..]
            .iter()
            .any(|p| matches!(p, Component::Normal(_) | Component::ParentDir));
        if more && !at.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", at.display()),
            ));
        }
    }
    Ok(None)
}

/// Makes `missing` below the directory `at`: directories, then the last one as a
/// directory when `dir`, else as an empty file. Nothing is followed: all of it is new.
fn create(mut at: OwnedFd, missing: &[OsString], dir: bool) -> io::Result<()> {
    let at_fd = |name: &OsString, e| fail(format!("make {}", name.to_string_lossy()), e);
    for (i, name) in missing.iter().enumerate() {
        if i + 1 == missing.len() && !dir {
            return rustix::fs::openat(
                &at,
                name.as_os_str(),
                OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map(drop)
            .map_err(|e| at_fd(name, e));
        }
        match rustix::fs::mkdirat(&at, name.as_os_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(at_fd(name, e)),
        }
        at = rustix::fs::openat(
            &at,
            name.as_os_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| at_fd(name, e))?;
    }
    Ok(())
}

/// Gives the tmpfs `root` a stand-in for each entry of the directory `original`, with the
/// entry (and what is mounted below it) bind-mounted onto it.
fn populate(original: &OwnedFd, root: &OwnedFd) -> io::Result<()> {
    let dir = rustix::fs::Dir::read_from(original).map_err(|e| fail("list".into(), e))?;
    for entry in dir {
        let entry = entry.map_err(|e| fail("list".into(), e))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let what = |s: &str| format!("{s} {}", name.to_string_lossy());
        let st = match rustix::fs::statat(original, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since it was listed.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(fail(what("stat"), e)),
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let to = rustix::fs::readlinkat(original, name, Vec::new())
                    .map_err(|e| fail(what("read the link"), e))?;
                rustix::fs::symlinkat(to.as_c_str(), root, name)
                    .map_err(|e| fail(what("make the link"), e))?;
                let (uid, gid) = (
                    rustix::fs::Uid::from_raw(st.st_uid),
                    rustix::fs::Gid::from_raw(st.st_gid),
                );
                rustix::fs::chownat(root, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| fail(what("own the link"), e))?;
            }
            FileType::Directory => {
                rustix::fs::mkdirat(root, name, Mode::from_raw_mode(0o755))
                    .map_err(|e| fail(what("make a directory for"), e))?;
                bind(original, name, root).map_err(|e| fail(what("bind-mount"), e))?;
            }
            // Files, devices, sockets and pipes: the original itself, on an empty file.
            _ => {
                rustix::fs::openat(
                    root,
                    name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )
                .map_err(|e| fail(what("make a file for"), e))?;
                bind(original, name, root).map_err(|e| fail(what("bind-mount"), e))?;
            }
        }
    }
    Ok(())
}

/// Bind-mounts the entry `name` of `from` with every mount below it (each keeping its
/// flags, read-only among them) onto the entry `name` of `to`.
fn bind(from: &OwnedFd, name: &CStr, to: &OwnedFd) -> rustix::io::Result<()> {
    let tree = rustix::mount::open_tree(
        from,
        name,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )?;
    rustix::mount::move_mount(&tree, "", to, name, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
}

/// Makes the tmpfs mounted over `/` this process's root (what it starts sees it as `/`),
/// keeping its working directory.
fn enter_root(root: &OwnedFd) -> rustix::io::Result<()> {
    let cwd = rustix::fs::open(
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::process::fchdir(root)?;
    rustix::process::chroot(".")?;
    rustix::process::fchdir(cwd.as_fd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Mount;
    use serde::{Deserialize, Serialize};
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn the_directory_above_a_missing_mount_point_is_found_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir(base.join("real")).unwrap();
        fs::write(base.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("nothing"), base.join("dangling")).unwrap();
        let names = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(locate(&base.join("real")).unwrap(), None);
        assert_eq!(locate(&base.join("link")).unwrap(), None);
        assert_eq!(locate(&base.join("file")).unwrap(), None);
        assert_eq!(
            locate(&base.join("a/b")).unwrap(),
            Some((base.clone(), names(&["a", "b"])))
        );
        // A link is followed to where it points: the mount lands there.
        assert_eq!(
            locate(&base.join("link/x/y")).unwrap(),
            Some((base.join("real"), names(&["x", "y"])))
        );
        assert_eq!(
            locate(&base.join("real/../link/./z")).unwrap(),
            Some((base.join("real"), names(&["z"])))
        );
        assert_eq!(locate(Path::new("/")).unwrap(), None);
        for wrong in ["dangling/x", "file/x", "a/../b"] {
            assert!(locate(&base.join(wrong)).is_err(), "{wrong}");
        }
        assert!(locate(Path::new("relative/x")).is_err());
    }

    #[test]
    fn missing_names_are_made_as_directories_and_a_last_file() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
        };
        let names = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        create(open(), &names(&["a", "b"]), true).unwrap();
        create(open(), &names(&["a", "c", "f.conf"]), false).unwrap();
        assert!(dir.path().join("a/b").is_dir());
        assert_eq!(fs::read(dir.path().join("a/c/f.conf")).unwrap(), b"");
    }

    /// What the helper does in a process of its own.
    #[derive(Serialize, Deserialize)]
    struct Plan {
        cwd: PathBuf,
        /// Made read-only bind mounts of themselves first (in the helper's namespace).
        read_only: Vec<PathBuf>,
        mounts: Vec<Mount>,
        script: String,
    }

    const HELPER_ENV: &str = "BERTH_MOUNTPOINT_HELPER";

    /// Not a test: the process in which [`missing_mount_points_never_reach_the_host`]
    /// mounts. It is a throwaway process that enters a mount namespace of its own, so
    /// nothing it mounts, shadows or enters as its root is seen by anything else.
    #[test]
    #[ignore = "run by missing_mount_points_never_reach_the_host"]
    fn helper_in_a_mount_namespace() {
        let Ok(plan) = std::env::var(HELPER_ENV) else {
            return;
        };
        let plan: Plan = serde_json::from_str(&plan).unwrap();
        std::env::set_current_dir(&plan.cwd).unwrap();
        crate::runtime::shim::enter_mounts(&[]).unwrap();
        for p in &plan.read_only {
            use rustix::mount::{MountFlags, mount_bind, mount_remount};
            mount_bind(p, p).unwrap();
            mount_remount(p, MountFlags::BIND | MountFlags::RDONLY, "").unwrap();
        }
        crate::runtime::shim::enter_mounts(&plan.mounts).unwrap();
        // The working directory is kept (the shim keeps its records through it).
        fs::write("record", "kept").unwrap();
        let status = Command::new("sh")
            .arg("-c")
            .arg(&plan.script)
            .status()
            .unwrap();
        std::process::exit(status.code().unwrap_or(1));
    }

    /// Removes what a test made outside its temporary directories, even when it fails
    /// (nothing, when all goes well).
    struct Remove(Vec<PathBuf>);

    impl Drop for Remove {
        fn drop(&mut self) {
            for p in &self.0 {
                let _ = fs::remove_dir_all(p).or_else(|_| fs::remove_file(p));
            }
        }
    }

    /// Kills the helper if the test ends before it does.
    struct Helper(std::process::Child);

    impl Drop for Helper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("berth-test-"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn missing_mount_points_never_reach_the_host() {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tag = format!(
            "berth-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        // Under `/` itself, under a directory of the host's root filesystem, under /dev
        // (devices, sockets, mounts below it) and under /var/run (a link to /run).
        let top = Path::new("/").join(&tag);
        let nested = Path::new("/var/lib").join(&tag);
        let dev = Path::new("/dev").join(&tag);
        let run = fs::canonicalize("/var/run").unwrap().join(&tag);
        let _remove = Remove(vec![top.clone(), nested.clone(), dev.clone(), run.clone()]);
        for p in [&top, &nested, &dev, &run] {
            assert!(!p.exists(), "{} exists before the test", p.display());
        }
        let tmp = tempfile::tempdir().unwrap();
        let t = fs::canonicalize(tmp.path()).unwrap();
        let (vol, conf, rw, ro, cwd) = (
            t.join("vol"),
            t.join("conf"),
            t.join("rw"),
            t.join("ro"),
            t.join("instance"),
        );
        let ro_vol = t.join("ro-vol");
        for d in [
            &vol,
            &rw.join("locked"),
            &rw.join("open"),
            &ro,
            &cwd,
            &ro_vol,
        ] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(ro_vol.join("a"), "in-ro-vol").unwrap();
        fs::write(&conf, "conf-text").unwrap();
        fs::write(ro.join("kept"), "kept-text").unwrap();
        let mount = |source: &Path, target: PathBuf| Mount {
            source: source.to_path_buf(),
            target,
            read_only: false,
        };
        let mounts = vec![
            mount(&vol, top.join("vol")),
            mount(&conf, top.join("etc/app.conf")),
            mount(&vol, top.join("vol/inner/z")),
            mount(&vol, nested.join("x")),
            mount(&vol, dev.join("x")),
            mount(&vol, Path::new("/var/run").join(&tag).join("x")),
            mount(&vol, rw.join("new/x")),
            mount(&vol, ro.join("new/y")),
            // A read-only volume cannot hold a mount point: it is shadowed too.
            Mount {
                read_only: true,
                ..mount(&ro_vol, top.join("ro-vol"))
            },
            mount(&vol, top.join("ro-vol/sub/w")),
        ];
        let (top_s, nested_s, dev_s, rw_s, ro_s) = (
            top.display(),
            nested.display(),
            dev.display(),
            rw.display(),
            ro.display(),
        );
        let script = format!(
            "echo begin; echo hi > {top_s}/vol/f; cat {top_s}/vol/f
             cat {top_s}/etc/app.conf; echo
             cat {nested_s}/x/f
             ls {top_s}/vol/inner
             test -c /dev/null && echo > /dev/null && test -d /dev/pts && echo dev-kept
             cat {dev_s}/x/f
             cat /var/run/{tag}/x/f
             touch {rw_s}/locked/f 2>/dev/null || echo locked-read-only
             touch {rw_s}/open/f && echo open-writable
             touch {rw_s}/made && echo shadow-writable
             touch {ro_s}/other 2>/dev/null || echo shadow-read-only
             cat {ro_s}/kept; echo
             touch {ro_s}/new/y/w && echo volume-writable
             cat {top_s}/ro-vol/a; echo; ls {top_s}/ro-vol/sub
             touch {top_s}/ro-vol/b 2>/dev/null || echo ro-vol-read-only
             echo root; ls -A /; echo var-lib; ls -A /var/lib; echo end
             echo pid $$; read line"
        );
        let plan = Plan {
            cwd: cwd.clone(),
            read_only: vec![rw.join("locked"), ro.clone()],
            mounts,
            script,
        };
        let (root_before, var_lib_before) =
            (listing(Path::new("/")), listing(nested.parent().unwrap()));
        let mut helper = Helper(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "runtime::mountpoint::tests::helper_in_a_mount_namespace",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(HELPER_ENV, serde_json::to_string(&plan).unwrap())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let out = BufReader::new(helper.0.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        let pid: i32 = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("{e}: the helper said {lines:#?}"));
            if let Some(pid) = line.strip_prefix("pid ") {
                break pid.parse().unwrap();
            }
            lines.push(line);
        };
        // A process that joins the namespace (exec, probes) sees it as the container does.
        let joined = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let mut cmd = tokio::process::Command::new("sh");
                cmd.arg("-c")
                    .arg(format!("cat {top_s}/vol/f; pwd; ls -d /usr"));
                crate::runtime::join_namespaces(&mut cmd, pid, Some(&top)).unwrap();
                cmd.output().await.unwrap()
            });
        assert_eq!(
            String::from_utf8_lossy(&joined.stdout),
            format!("hi\n{top_s}\n/usr\n"),
            "{}",
            String::from_utf8_lossy(&joined.stderr)
        );
        helper.0.stdin.take().unwrap().write_all(b"\n").unwrap();
        assert!(helper.0.wait().unwrap().success(), "{lines:#?}");
        let text = lines.join("\n");
        // After what the test harness says of the helper.
        let (_, text) = text.split_once("begin\n").unwrap();
        let (checks, rest) = text.split_once("\nroot\n").unwrap();
        assert_eq!(
            checks,
            "hi\nconf-text\nhi\nz\ndev-kept\nhi\nhi\nlocked-read-only\nopen-writable\n\
             shadow-writable\nshadow-read-only\nkept-text\nvolume-writable\nin-ro-vol\nw\n\
             ro-vol-read-only"
        );
        let (root, rest) = rest.split_once("\nvar-lib\n").unwrap();
        let (var_lib, _) = rest.split_once("\nend").unwrap();
        // The container sees what the host has, and its mount points.
        for (seen, before) in [(root, &root_before), (var_lib, &var_lib_before)] {
            let seen: Vec<&str> = seen.lines().collect();
            assert!(seen.contains(&tag.as_str()), "{seen:?}");
            for name in before {
                assert!(
                    seen.contains(&name.as_str()),
                    "{name} is missing in {seen:?}"
                );
            }
        }
        // The host has none of it, and what went through to it went to the originals.
        for p in [
            &top,
            &nested,
            &dev,
            &run,
            &rw.join("new"),
            &rw.join("made"),
            &ro.join("new"),
        ] {
            assert!(!p.exists(), "{} was made on the host", p.display());
        }
        assert!(!ro.join("other").exists());
        assert_eq!(listing(&ro_vol), ["a"]);
        assert!(rw.join("open/f").exists());
        assert!(!rw.join("locked/f").exists());
        assert_eq!(fs::read_to_string(vol.join("f")).unwrap(), "hi\n");
        // A mount point inside a volume is made in the volume, as container engines do.
        assert!(vol.join("inner/z").is_dir());
        assert_eq!(fs::read_to_string(cwd.join("record")).unwrap(), "kept");
    }
}
