//! Ending everything a runtime started, and finding what it left. A runtime's root
//! directory (`DATA/pods`) carries an identity ([`ID_FILE`]) that names its cgroups
//! (`berth/<id>` in each hierarchy), so that one berth's reset never touches another's
//! pods on the same machine. What belongs to a root:
//! - every live shim of its instance directories and everything below it (a shim is a
//!   child subreaper, so what its container leaves behind stays below it);
//! - every live container's process group, and what is below its members;
//! - every process in the root's cgroups, wherever in the process tree it moved;
//! - every mount below the root.
//!
//! `berth node reset`, `berth serve --stop-pods-on-exit`, the test harnesses and the shim
//! itself (for what its container leaves when it ends) use it.
//!
//! Processes end in two steps. Every process found is stopped (SIGSTOP) and the search runs
//! again until it finds nothing new: a stopped process cannot fork, and a child forked just
//! before keeps its stopped parent, so the set closes. Then all are SIGKILLed at once.
//! Killing each as it is found would let a child forked in between escape to init, out of
//! reach.
//!
//! All of it is blocking code (run on a thread of its own or before any runtime) that
//! waits on the wall clock, so it uses `std::time::Instant`.
#![allow(clippy::disallowed_types)]

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

use super::cgroup::{Layout, PARENT};
use super::shim::{self, PID_FILE, SHIM_FILE, Started};

/// The file in a runtime's root that holds its identity.
pub const ID_FILE: &str = ".berth-id";

/// How long a reset may take to end the processes it found.
const END_LIMIT: Duration = Duration::from_secs(20);
/// How long a cgroup whose last process is being reaped may refuse to go.
const CGROUP_LIMIT: Duration = Duration::from_secs(5);

/// The identity of the runtime rooted at `root`, made at its first use.
pub fn id(root: &Path) -> io::Result<String> {
    if let Some(id) = read_id(root) {
        return Ok(id);
    }
    fs::create_dir_all(root)?;
    let mut raw = [0u8; 6];
    getrandom::fill(&mut raw).map_err(|e| io::Error::other(e.to_string()))?;
    let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    shim::write_record(root, ID_FILE, &id)?;
    Ok(id)
}

/// The identity of the runtime rooted at `root`, if it ever had one.
pub fn read_id(root: &Path) -> Option<String> {
    shim::read_record::<String>(root, ID_FILE)
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// One process of this machine, from `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// Start time in clock ticks since boot: tells a reused pid apart.
    pub start_ticks: u64,
    /// Ended, waiting to be reaped by its parent.
    pub zombie: bool,
}

fn parse_stat(pid: i32, stat: &str) -> Option<Proc> {
    // The command name may hold spaces and parentheses; fields follow the last ')'.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Proc {
        pid,
        zombie: matches!(*rest.first()?, "Z" | "X"),
        ppid: rest.get(1)?.parse().ok()?,
        pgid: rest.get(2)?.parse().ok()?,
        start_ticks: rest.get(19)?.parse().ok()?,
    })
}

fn read_proc(pid: i32) -> Option<Proc> {
    parse_stat(pid, &fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process of this machine.
pub fn scan() -> Vec<Proc> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_proc)
        .collect()
}

/// `roots` and every process below them.
pub fn with_descendants(procs: &[Proc], roots: impl IntoIterator<Item = i32>) -> HashSet<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut out = HashSet::new();
    let mut todo: Vec<i32> = roots.into_iter().collect();
    while let Some(pid) = todo.pop() {
        if out.insert(pid) {
            todo.extend(children.get(&pid).into_iter().flatten());
        }
    }
    out
}

/// This process and its ancestors: never ended, whatever a search finds.
fn spared() -> HashSet<i32> {
    let mut out = HashSet::new();
    let mut pid = std::process::id() as i32;
    while pid > 0 && out.insert(pid) {
        pid = read_proc(pid).map_or(0, |p| p.ppid);
    }
    out
}

fn signal(pid: i32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = kill_process(pid, sig);
    }
}

/// Whether `pid` is still the process that started at `ticks` and has not ended.
fn running(pid: i32, ticks: u64) -> bool {
    read_proc(pid).is_some_and(|p| p.start_ticks == ticks && !p.zombie)
}

/// Stops what `select` finds among this machine's processes until it finds nothing new,
/// then kills them all and waits (up to `limit`) until they are gone. Returns how many
/// processes were ended. This process and its ancestors are never touched.
pub fn end(mut select: impl FnMut(&[Proc]) -> HashSet<i32>, limit: Duration) -> usize {
    let spared = spared();
    let deadline = Instant::now() + limit;
    let mut held: HashMap<i32, u64> = HashMap::new();
    loop {
        let procs = scan();
        let found: Vec<&Proc> = {
            let wanted = select(&procs);
            procs
                .iter()
                .filter(|p| wanted.contains(&p.pid) && !p.zombie)
                .filter(|p| !spared.contains(&p.pid) && !held.contains_key(&p.pid))
                .collect()
        };
        if found.is_empty() || Instant::now() >= deadline {
            break;
        }
        for p in found {
            signal(p.pid, Signal::STOP);
            held.insert(p.pid, p.start_ticks);
        }
    }
    for (&pid, &ticks) in &held {
        if running(pid, ticks) {
            signal(pid, Signal::KILL);
        }
    }
    while Instant::now() < deadline && held.iter().any(|(&p, &t)| running(p, t)) {
        std::thread::sleep(Duration::from_millis(5));
    }
    held.len()
}

/// The instance directories of a root: `ROOT/<pod uid>/<container>/<attempt>`.
fn instances(root: &Path) -> Vec<PathBuf> {
    let dirs = |d: &Path| -> Vec<PathBuf> {
        fs::read_dir(d)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            // The pod's volumes are no container (its sandbox, `.sandbox`, is one).
            .filter(|e| e.file_name() != ".volumes")
            .map(|e| e.path())
            .collect()
    };
    dirs(root)
        .iter()
        .flat_map(|pod| dirs(pod))
        .flat_map(|c| dirs(&c))
        .collect()
}

/// The cgroups of the runtime rooted at `root`: `berth/<id>` in each hierarchy of this
/// machine that has it.
pub fn cgroup_parents(root: &Path) -> Vec<PathBuf> {
    let Some(id) = read_id(root) else {
        return Vec::new();
    };
    let Ok(layout) = Layout::detect() else {
        return Vec::new();
    };
    layout
        .hierarchies
        .iter()
        .map(|h| h.mount.join(PARENT).join(&id))
        .filter(|d| d.is_dir())
        .collect()
}

/// Every cgroup at and below `dir`, deepest first.
fn cgroup_tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
    {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(cgroup_tree(&e.path()));
        }
    }
    out.push(dir.to_path_buf());
    out
}

fn cgroup_procs(dirs: &[PathBuf]) -> HashSet<i32> {
    dirs.iter()
        .flat_map(|d| cgroup_tree(d))
        .flat_map(|d| {
            fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The processes of the containers of the runtime rooted at `root`.
pub fn processes_of(root: &Path, procs: &[Proc]) -> HashSet<i32> {
    let live = |rec: &Started| {
        procs
            .iter()
            .any(|p| p.pid == rec.pid && p.start_ticks == rec.start_ticks && !p.zombie)
    };
    let mut roots: HashSet<i32> = cgroup_procs(&cgroup_parents(root));
    for dir in instances(root) {
        let shim_alive = shim::read_record::<Started>(&dir, SHIM_FILE).filter(live);
        if let Some(s) = &shim_alive {
            roots.insert(s.pid);
        }
        // The container's process group, while its leader is the process the shim
        // started (then the group's number is surely its): members that left the tree
        // below the shim (an earlier shim's, or one killed) are still found. Without
        // the leader, a group of that number may be another's.
        if let Some(c) = shim::read_record::<Started>(&dir, PID_FILE).filter(live) {
            roots.extend(procs.iter().filter(|p| p.pgid == c.pid).map(|p| p.pid));
        }
    }
    with_descendants(procs, roots)
}

/// Every mount point at or below `root`, deepest first.
fn mounts_below(root: &Path) -> Vec<PathBuf> {
    let Ok(root) = root.canonicalize() else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(&root))
        .collect();
    out.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    out.dedup();
    out
}

/// The mount points of this process's mount namespace.
fn mount_points() -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(super::cgroup::unescape(m)))
        .collect()
}

/// What a reset ended and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub processes: usize,
    pub cgroups: usize,
    pub mounts: usize,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Report::default() {
            return write!(f, "nothing was running");
        }
        write!(
            f,
            "ended {} processes, removed {} cgroups, unmounted {} mounts",
            self.processes, self.cgroups, self.mounts
        )
    }
}

/// Ends every container of the runtime rooted at `root` (its shims, their process groups
/// and whatever is in its cgroups), unmounts what is mounted below the root and removes
/// its cgroups. The records stay, so a later berth on the root sees its containers
/// ended. Nothing of another root is touched; running it again finds nothing.
pub fn reset(root: &Path) -> io::Result<Report> {
    let mut report = Report {
        processes: end(|procs| processes_of(root, procs), END_LIMIT),
        ..Report::default()
    };
    // What runc keeps of the containers of images (its state, its cgroups) goes with
    // them, their processes ended.
    for dir in instances(root) {
        if let Some(setup) =
            super::shim::read_record::<super::oci::RootfsSetup>(&dir, super::oci::ROOTFS_FILE)
        {
            super::oci::clean_up(&setup);
        }
    }
    for m in mounts_below(root) {
        match rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH) {
            Ok(()) => report.mounts += 1,
            Err(e) => {
                return Err(io::Error::other(format!("unmount {}: {e}", m.display())));
            }
        }
    }
    for parent in cgroup_parents(root) {
        for dir in cgroup_tree(&parent) {
            let deadline = Instant::now() + CGROUP_LIMIT;
            loop {
                match fs::remove_dir(&dir) {
                    Ok(()) => {
                        report.cgroups += 1;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    // A process being reaped still counts for a moment.
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => {
                        return Err(io::Error::other(format!(
                            "remove the cgroup {}: {e}",
                            dir.display()
                        )));
                    }
                }
            }
        }
    }
    Ok(report)
}

/// What berth left on this machine (or of one runtime root): processes, cgroups, mounts,
/// and the network namespaces, links and nftables tables named as berth's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Each process's pid and command line.
    pub processes: Vec<(i32, String)>,
    pub cgroups: Vec<PathBuf>,
    pub mounts: Vec<PathBuf>,
    pub network_namespaces: Vec<String>,
    pub links: Vec<String>,
    pub nftables: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        *self == Leftovers::default()
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return writeln!(f, "nothing left behind");
        }
        for (pid, cmd) in &self.processes {
            writeln!(f, "process {pid}: {cmd}")?;
        }
        for c in &self.cgroups {
            writeln!(f, "cgroup {}", c.display())?;
        }
        for m in &self.mounts {
            writeln!(f, "mount {}", m.display())?;
        }
        for n in &self.network_namespaces {
            writeln!(f, "network namespace {n}")?;
        }
        for l in &self.links {
            writeln!(f, "link {l}")?;
        }
        for t in &self.nftables {
            writeln!(f, "nftables table {t}")?;
        }
        Ok(())
    }
}

fn command_line(pid: i32) -> String {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    text.trim().to_string()
}

fn described(pids: HashSet<i32>, procs: &[Proc]) -> Vec<(i32, String)> {
    let mut out: Vec<(i32, String)> = procs
        .iter()
        .filter(|p| pids.contains(&p.pid) && !p.zombie)
        .map(|p| (p.pid, command_line(p.pid)))
        .collect();
    out.sort();
    out
}

/// What the runtime rooted at `root` left: processes, cgroups and mounts.
pub fn leftovers_of(root: &Path) -> Leftovers {
    let procs = scan();
    let mut pids = processes_of(root, &procs);
    pids.retain(|p| !spared().contains(p));
    Leftovers {
        processes: described(pids, &procs),
        cgroups: cgroup_parents(root)
            .iter()
            .flat_map(|p| cgroup_tree(p))
            .collect(),
        mounts: mounts_below(root),
        ..Leftovers::default()
    }
}

/// Whether a name is one berth (or its tests) give their network objects.
fn berths_name(name: &str) -> bool {
    name.starts_with("berth") || name.starts_with("bt")
}

fn names_in(dir: &str) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| berths_name(n))
        .collect();
    out.sort();
    out
}

/// What every berth left on this machine: processes in berth's cgroups or below a shim,
/// mounts below a runtime's root, and network namespaces, links and nftables tables
/// named as berth's. Empty cgroups are not counted (they hold nothing).
pub fn leftovers_on_this_machine() -> Leftovers {
    let procs = scan();
    let parents: Vec<PathBuf> = Layout::detect()
        .map(|l| l.hierarchies.iter().map(|h| h.mount.join(PARENT)).collect())
        .unwrap_or_default();
    let mut roots = cgroup_procs(&parents);
    roots.extend(procs.iter().map(|p| p.pid).filter(|&pid| {
        let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut args = raw.split(|b| *b == 0).skip(1);
        args.next() == Some(b"shim") && args.next() == Some(b"--dir")
    }));
    let mut pids = with_descendants(&procs, roots);
    let spared = spared();
    pids.retain(|p| !spared.contains(p));
    let mounts = mount_points()
        .into_iter()
        .filter(|m| m.ancestors().skip(1).any(|a| a.join(ID_FILE).is_file()))
        .collect();
    Leftovers {
        processes: described(pids, &procs),
        cgroups: Vec::new(),
        mounts,
        network_namespaces: names_in("/run/netns"),
        links: names_in("/sys/class/net"),
        nftables: nftables(),
    }
}

/// The nftables tables named as berth's (`nft list tables`; none without `nft`).
fn nftables() -> Vec<String> {
    let Ok(out) = std::process::Command::new("nft")
        .args(["list", "tables"])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("table")).then_some(())?;
            let (family, name) = (words.next()?, words.next()?);
            berths_name(name).then(|| format!("{family} {name}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_odd_command_names() {
        let line = "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 1 2 3";
        let p = parse_stat(4242, line).unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.pgid, p.start_ticks, p.zombie),
            (4242, 1, 4240, 987654, false)
        );
        let z = parse_stat(7, "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").unwrap();
        assert!(z.zombie);
        assert_eq!(parse_stat(7, "7 (x) Z"), None);
    }

    #[test]
    fn descendants_follow_parents_down_and_only_down() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            pgid: pid,
            start_ticks: 1,
            zombie: false,
        };
        let procs = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 1), p(21, 20)];
        let mut got: Vec<i32> = with_descendants(&procs, [10]).into_iter().collect();
        got.sort();
        assert_eq!(got, vec![10, 11, 12]);
    }

    #[test]
    fn an_identity_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pods");
        assert_eq!(read_id(&root), None);
        let first = id(&root).unwrap();
        assert_eq!(first.len(), 12);
        assert_eq!(id(&root).unwrap(), first);
        assert_eq!(read_id(&root), Some(first));
    }

    #[test]
    fn a_stopped_and_killed_tree_is_gone_and_the_caller_is_spared() {
        // A shell with a child in a session of its own: both end, the test does not.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 300 & sleep 300"])
            .spawn()
            .unwrap();
        let me = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        let tree = loop {
            let t = with_descendants(&scan(), [me]);
            if t.len() >= 3 || Instant::now() > deadline {
                break t;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(tree.len() >= 3, "{tree:?}");
        let ended = end(
            |procs| {
                let mut s = with_descendants(procs, [me]);
                s.insert(std::process::id() as i32);
                s
            },
            Duration::from_secs(10),
        );
        assert!(ended >= 3, "{ended}");
        let _ = child.wait();
        for pid in tree {
            assert!(read_proc(pid).is_none_or(|p| p.zombie), "{pid} lives");
        }
    }
}
