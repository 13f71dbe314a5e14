//! Control groups: finding where the memory and cpu controllers are mounted (cgroup v1, v2
//! or the hybrid of both), a cgroup per pod and per container instance under one berth
//! parent, the limits written into them, the [`Placement`] a shim uses to put its
//! container there, the OOM kill counters read back when the container ends, and the usage
//! counters the node's resource metrics are made of (cumulative CPU time from `cpuacct`
//! under v1, `cpu.stat` under v2; the memory working set as the kubelet counts it: usage
//! less the inactive file cache).
//!
//! The parent sits at the root of each hierarchy (as kubelet's `kubepods` does): under
//! cgroup v2 a cgroup that holds processes cannot hand controllers to its children (the
//! "no internal processes" rule), and berth's own cgroup holds berth; the root is exempt.
//! Paths come from `/proc/self/mountinfo` and `/proc/self/cgroup`, so tests hand in the
//! text of both with mount points inside a temporary directory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Resources;

/// The cgroup at the root of each hierarchy under which every berth on the machine keeps
/// its pods, each runtime in a cgroup of its own named by its identity (`berth/<id>`).
pub const PARENT: &str = "berth";

/// The controllers berth uses.
const MEMORY: &str = "memory";
const CPU: &str = "cpu";
/// cgroup v1's CPU accounting controller (under v2 every cgroup counts its CPU time).
const CPUACCT: &str = "cpuacct";
/// The CFS period berth writes, in microseconds (Kubernetes' default).
const CFS_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel takes, in microseconds.
const MIN_QUOTA_US: u64 = 1_000;

/// Which cgroup interface a hierarchy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    V1,
    V2,
}

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub version: Version,
    /// Where the hierarchy is mounted.
    pub mount: PathBuf,
    /// v1: the controllers bound to it; v2: those its root offers (`cgroup.controllers`).
    pub controllers: Vec<String>,
    /// This process's own cgroup in it, as a directory.
    pub own: PathBuf,
}

/// The cgroup hierarchies this process sees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub hierarchies: Vec<Hierarchy>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
pub(super) fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Layout {
    /// The layout described by the text of `/proc/self/mountinfo` and `/proc/self/cgroup`;
    /// a v2 hierarchy's controllers are read from its `cgroup.controllers`.
    pub fn parse(mountinfo: &str, self_cgroup: &str) -> Layout {
        // (hierarchy id, controllers, path) from /proc/self/cgroup.
        let memberships: Vec<(&str, Vec<&str>, &str)> = self_cgroup
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ':');
                let id = parts.next()?;
                let controllers = parts.next()?;
                let path = parts.next()?;
                let list = controllers.split(',').filter(|c| !c.is_empty()).collect();
                Some((id, list, path))
            })
            .collect();
        let mut hierarchies = Vec::new();
        for line in mountinfo.lines() {
            let Some((before, after)) = line.split_once(" - ") else {
                continue;
            };
            let fields: Vec<&str> = before.split(' ').collect();
            let rest: Vec<&str> = after.split(' ').collect();
            let (Some(root), Some(mount), Some(fstype)) =
                (fields.get(3), fields.get(4), rest.first())
            else {
                continue;
            };
            let root = unescape(root);
            let mount = PathBuf::from(unescape(mount));
            let (version, controllers, member) = match *fstype {
                "cgroup" => {
                    // The super options name the controllers among other flags; the
                    // hierarchy's line in /proc/self/cgroup names exactly its controllers.
                    let options: Vec<&str> =
                        rest.get(2).copied().unwrap_or("").split(',').collect();
                    let member = memberships.iter().find(|(_, list, _)| {
                        !list.is_empty() && list.iter().all(|c| options.contains(c))
                    });
                    let controllers = match member {
                        Some((_, list, _)) => list.iter().map(|c| c.to_string()).collect(),
                        None => Vec::new(),
                    };
                    (Version::V1, controllers, member)
                }
                "cgroup2" => {
                    let controllers = fs::read_to_string(mount.join("cgroup.controllers"))
                        .unwrap_or_default()
                        .split_whitespace()
                        .map(str::to_string)
                        .collect();
                    let member = memberships
                        .iter()
                        .find(|(id, list, _)| *id == "0" && list.is_empty());
                    (Version::V2, controllers, member)
                }
                _ => continue,
            };
            // The cgroup path is from the hierarchy's root; the mount shows `root` of it.
            let path = member.map_or("/", |(_, _, p)| p);
            let inside = Path::new(path)
                .strip_prefix(&root)
                .unwrap_or(Path::new(path))
                .to_path_buf();
            let own = mount.join(inside.strip_prefix("/").unwrap_or(&inside));
            hierarchies.push(Hierarchy {
                version,
                mount,
                controllers,
                own,
            });
        }
        Layout { hierarchies }
    }

    /// The layout of this process.
    pub fn detect() -> io::Result<Layout> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
        let own = fs::read_to_string("/proc/self/cgroup")?;
        Ok(Layout::parse(&mountinfo, &own))
    }

    /// The hierarchy that has `controller`: a v1 one that binds it, else a v2 one that
    /// offers it.
    pub fn with(&self, controller: &str) -> Option<&Hierarchy> {
        let has = |h: &&Hierarchy| h.controllers.iter().any(|c| c == controller);
        let v1 = self
            .hierarchies
            .iter()
            .filter(|h| h.version == Version::V1)
            .find(has);
        v1.or_else(|| {
            self.hierarchies
                .iter()
                .filter(|h| h.version == Version::V2)
                .find(has)
        })
    }

    /// `v1`, `v2`, `hybrid` or `none`, for logs.
    pub fn kind(&self) -> &'static str {
        let v1 = self.hierarchies.iter().any(|h| h.version == Version::V1);
        let v2 = self.hierarchies.iter().any(|h| h.version == Version::V2);
        match (v1, v2) {
            (true, true) => "hybrid",
            (true, false) => "v1",
            (false, true) => "v2",
            (false, false) => "none",
        }
    }
}

/// One hierarchy berth uses: its version, berth's parent in it and berth's own cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Used {
    version: Version,
    parent: PathBuf,
    own: PathBuf,
    memory: bool,
    cpu: bool,
    /// Where the CPU time is counted (v1: the cpuacct hierarchy; v2: the cpu one).
    cpuacct: bool,
}

/// berth's cgroups: a parent per hierarchy that holds the memory or cpu controller.
#[derive(Debug, Clone)]
pub struct Cgroups {
    used: Vec<Used>,
    /// berth's parent in every other hierarchy. berth makes nothing there, but runc
    /// does: it places a container of an image in its cgroup path in every hierarchy
    /// (the pids, devices, freezer, ... ones and a hybrid's v2), and takes away only the
    /// last level of it, so the levels above are berth's to remove with the container.
    others: Vec<PathBuf>,
}

/// Where a container instance's cgroups are, as the shim reads it from its instance
/// directory: it enters them before starting the container and leaves again once the
/// container runs, so the container is limited from its first instruction and the shim
/// itself is never charged for it nor picked by the OOM killer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The instance's cgroup directories, one per hierarchy.
    pub dirs: Vec<PathBuf>,
    /// The cgroups the shim returns to (those it was started in).
    pub home: Vec<PathBuf>,
    /// The directory that holds the memory controller's counters, and its version.
    pub memory: (PathBuf, Version),
    /// The instance's path in the hierarchies berth does not use, where runc may have
    /// made it (removed with the instance, with whatever runc left below it).
    #[serde(default)]
    pub others: Vec<PathBuf>,
}

fn io_context(what: impl std::fmt::Display, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let path = dir.join(file);
    fs::write(&path, value)
        .map_err(|e| io_context(format!("write {value:?} to {}", path.display()), e))
}

fn create_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_context(format!("create {}", dir.display()), e)),
    }
}

/// cpu.shares from millicores (Kubernetes' conversion; at least 2).
fn shares(milli: u64) -> u64 {
    (milli * 1024 / 1000).max(2)
}

/// cpu.weight (1–10000) from cpu.shares (2–262144), as the OCI runtimes convert it.
fn weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// The CFS quota for a cpu limit in millicores.
fn quota(milli: u64) -> u64 {
    (milli * CFS_PERIOD_US / 1000).max(MIN_QUOTA_US)
}

impl Cgroups {
    /// Sets berth's parent cgroup `name` (a path below each hierarchy's root, such as
    /// `berth/<id>`) up in every hierarchy that holds the memory or cpu controller. An
    /// error says why limits cannot be enforced here.
    pub fn new(layout: &Layout, name: &str) -> Result<Cgroups, String> {
        let memory = layout
            .with(MEMORY)
            .ok_or("no cgroup hierarchy offers the memory controller")?;
        let cpu = layout
            .with(CPU)
            .ok_or("no cgroup hierarchy offers the cpu controller")?;
        let mut used: Vec<Used> = Vec::new();
        // The mount of each entry of `used`.
        let mut mounts: Vec<PathBuf> = Vec::new();
        // Under v1, CPU time is counted by cpuacct (often mounted with cpu); under v2 by
        // the cpu hierarchy itself. Without it the node reports no CPU usage.
        let cpuacct = match cpu.version {
            Version::V2 => Some(cpu),
            Version::V1 => layout.with(CPUACCT).filter(|h| h.version == Version::V1),
        };
        let wanted = [(Some(memory), MEMORY), (Some(cpu), CPU), (cpuacct, CPUACCT)];
        for (h, controller) in wanted.into_iter().filter_map(|(h, c)| h.map(|h| (h, c))) {
            let entry = match used.iter_mut().find(|u| u.parent == h.mount.join(name)) {
                Some(u) => u,
                None => {
                    mounts.push(h.mount.clone());
                    used.push(Used {
                        version: h.version,
                        parent: h.mount.join(name),
                        own: h.own.clone(),
                        memory: false,
                        cpu: false,
                        cpuacct: false,
                    });
                    used.last_mut().expect("just pushed")
                }
            };
            match controller {
                MEMORY => entry.memory = true,
                CPU => entry.cpu = true,
                _ => entry.cpuacct = true,
            }
        }
        let mut others: Vec<PathBuf> = Vec::new();
        for h in &layout.hierarchies {
            let parent = h.mount.join(name);
            if !mounts.contains(&h.mount) && !others.contains(&parent) {
                others.push(parent);
            }
        }
        let cgroups = Cgroups { used, others };
        for (u, h) in cgroups.used.iter().zip(&mounts) {
            // Each level from the hierarchy's root down to the parent hands the
            // controllers on (under v2); none of them holds a process.
            let mut dir = h.clone();
            if u.version == Version::V2 {
                cgroups.delegate(u, &dir).map_err(|e| e.to_string())?;
            }
            for part in Path::new(name).components() {
                dir.push(part);
                create_dir(&dir).map_err(|e| e.to_string())?;
                if u.version == Version::V2 {
                    cgroups.delegate(u, &dir).map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(cgroups)
    }

    /// Detects the layout of this machine and sets the parent `name` up in it.
    pub fn for_this_machine(name: &str) -> Result<Cgroups, String> {
        let layout = Layout::detect().map_err(|e| format!("read the cgroup layout: {e}"))?;
        let cgroups = Cgroups::new(&layout, name)?;
        tracing::info!(layout = layout.kind(), parents = ?cgroups.used.iter().map(|u| &u.parent).collect::<Vec<_>>(), "resource limits are enforced through cgroups");
        Ok(cgroups)
    }

    /// v2: lets the children of `dir` use the controllers berth needs.
    fn delegate(&self, u: &Used, dir: &Path) -> io::Result<()> {
        let mut wanted = Vec::new();
        if u.memory {
            wanted.push("+memory");
        }
        if u.cpu {
            wanted.push("+cpu");
        }
        write(dir, "cgroup.subtree_control", &wanted.join(" "))
    }

    fn pod_dir(u: &Used, pod_uid: &str) -> PathBuf {
        u.parent.join(format!("pod{pod_uid}"))
    }

    /// Creates the cgroups of one container instance and of its pod (with `limits` and
    /// `pod_limits` written), and says where they are.
    pub fn create(
        &self,
        pod_uid: &str,
        container: &str,
        attempt: u32,
        limits: &Resources,
        pod_limits: &Resources,
    ) -> io::Result<Placement> {
        let mut dirs = Vec::new();
        let mut memory = None;
        for u in &self.used {
            let pod = Self::pod_dir(u, pod_uid);
            create_dir(&pod)?;
            if u.version == Version::V2 {
                self.delegate(u, &pod)?;
            }
            let dir = pod.join(format!("{container}-{attempt}"));
            if let Err(e) = create_dir(&dir) {
                // Another berth's sweep may have taken the empty pod cgroup just now.
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(e);
                }
                create_dir(&pod)?;
                if u.version == Version::V2 {
                    self.delegate(u, &pod)?;
                }
                create_dir(&dir)?;
            }
            if u.memory {
                Self::limit_memory(u.version, &pod, pod_limits)?;
                Self::limit_memory(u.version, &dir, limits)?;
                memory = Some((dir.clone(), u.version));
            }
            if u.cpu {
                Self::limit_cpu(u.version, &pod, pod_limits)?;
                Self::limit_cpu(u.version, &dir, limits)?;
            }
            dirs.push(dir);
        }
        let instance = Path::new(&format!("pod{pod_uid}")).join(format!("{container}-{attempt}"));
        Ok(Placement {
            dirs,
            home: self.used.iter().map(|u| u.own.clone()).collect(),
            memory: memory.ok_or_else(|| io::Error::other("no memory cgroup"))?,
            others: self.others.iter().map(|p| p.join(&instance)).collect(),
        })
    }

    fn limit_memory(version: Version, dir: &Path, limits: &Resources) -> io::Result<()> {
        let Some(bytes) = limits.memory_limit_bytes else {
            return Ok(());
        };
        let bytes = bytes.to_string();
        match version {
            Version::V1 => {
                write(dir, "memory.limit_in_bytes", &bytes)?;
                // With swap accounting, swap must not let the container past its limit.
                if dir.join("memory.memsw.limit_in_bytes").exists() {
                    write(dir, "memory.memsw.limit_in_bytes", &bytes)?;
                }
            }
            Version::V2 => {
                write(dir, "memory.max", &bytes)?;
                if dir.join("memory.swap.max").exists() {
                    write(dir, "memory.swap.max", "0")?;
                }
            }
        }
        Ok(())
    }

    fn limit_cpu(version: Version, dir: &Path, limits: &Resources) -> io::Result<()> {
        let request = limits.cpu_request_millis.or(limits.cpu_limit_millis);
        match version {
            Version::V1 => {
                if let Some(milli) = limits.cpu_limit_millis {
                    write(dir, "cpu.cfs_period_us", &CFS_PERIOD_US.to_string())?;
                    write(dir, "cpu.cfs_quota_us", &quota(milli).to_string())?;
                }
                if let Some(milli) = request {
                    write(dir, "cpu.shares", &shares(milli).to_string())?;
                }
            }
            Version::V2 => {
                if let Some(milli) = limits.cpu_limit_millis {
                    write(dir, "cpu.max", &format!("{} {CFS_PERIOD_US}", quota(milli)))?;
                }
                if let Some(milli) = request {
                    write(dir, "cpu.weight", &weight(shares(milli)).to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Removes a pod's cgroups. Processes still in them (ones that left the container's
    /// process group) are killed first; a cgroup that cannot go yet is reported.
    pub fn remove_pod(&self, pod_uid: &str) -> io::Result<()> {
        let mut first_error = None;
        for u in &self.used {
            let pod = Self::pod_dir(u, pod_uid);
            let Ok(entries) = fs::read_dir(&pod) else {
                continue;
            };
            for entry in entries.filter_map(|e| e.ok()) {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    kill_all(&entry.path());
                    if let Err(e) = remove_dir(&entry.path()) {
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Err(e) = remove_dir(&pod) {
                first_error.get_or_insert(e);
            }
        }
        for parent in &self.others {
            if let Err(e) = remove_tree(&parent.join(format!("pod{pod_uid}"))) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// What a cgroup has used: CPU time since it was made and its memory working set now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Nanoseconds of CPU time (none when no hierarchy counts it).
    pub cpu_ns: Option<u64>,
    /// Bytes of memory in use less the inactive file cache, which the kernel can take
    /// back at once (the kubelet's and cAdvisor's working set).
    pub memory_working_set: Option<u64>,
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Used {
    fn cpu_ns(&self, dir: &Path) -> Option<u64> {
        match self.version {
            Version::V1 => read_u64(&dir.join("cpuacct.usage")),
            Version::V2 => counter(&dir.join("cpu.stat"), "usage_usec").map(|us| us * 1000),
        }
    }

    fn working_set(&self, dir: &Path) -> Option<u64> {
        let (usage, inactive) = match self.version {
            Version::V1 => (
                read_u64(&dir.join("memory.usage_in_bytes"))?,
                counter(&dir.join("memory.stat"), "total_inactive_file"),
            ),
            Version::V2 => (
                read_u64(&dir.join("memory.current"))?,
                counter(&dir.join("memory.stat"), "inactive_file"),
            ),
        };
        Some(usage.saturating_sub(inactive.unwrap_or(0)))
    }
}

impl Cgroups {
    /// What the cgroup at `rel` below berth's parent (`pod<uid>` or
    /// `pod<uid>/<container>-<attempt>`) has used; `None` when it does not exist.
    fn usage_of(&self, rel: &Path) -> Option<Usage> {
        let mut usage = Usage::default();
        let mut found = false;
        for u in &self.used {
            let dir = u.parent.join(rel);
            if !dir.is_dir() {
                continue;
            }
            found = true;
            if u.cpuacct {
                usage.cpu_ns = u.cpu_ns(&dir);
            }
            if u.memory {
                usage.memory_working_set = u.working_set(&dir);
            }
        }
        found.then_some(usage)
    }

    /// What a pod's cgroup has used, all its containers together.
    pub fn pod_usage(&self, pod_uid: &str) -> Option<Usage> {
        self.usage_of(Path::new(&format!("pod{pod_uid}")))
    }

    /// What one container instance's cgroup has used.
    pub fn container_usage(&self, pod_uid: &str, container: &str, attempt: u32) -> Option<Usage> {
        self.usage_of(&Path::new(&format!("pod{pod_uid}")).join(format!("{container}-{attempt}")))
    }
}

/// This machine's usage: CPU time of every CPU from `/proc/stat` (all but idle and iowait)
/// and memory as cAdvisor counts the root cgroup's working set (in use, page cache
/// included, less the inactive file cache) from `/proc/meminfo`.
pub fn machine_usage() -> Usage {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let hz = rustix::param::clock_ticks_per_second();
    machine_usage_from(&stat, &meminfo, hz)
}

fn machine_usage_from(stat: &str, meminfo: &str, hz: u64) -> Usage {
    let cpu_ns = stat.lines().find(|l| l.starts_with("cpu ")).and_then(|l| {
        let ticks: Vec<u64> = l
            .split_whitespace()
            .skip(1)
            .map(|t| t.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is within user).
        let busy: u64 = [0, 1, 2, 5, 6, 7]
            .iter()
            .map(|&i| ticks.get(i).copied().unwrap_or(0))
            .sum();
        (hz > 0).then(|| busy * (1_000_000_000 / hz))
    });
    let kib = |key: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    let memory_working_set = match (kib("MemTotal"), kib("MemFree")) {
        (Some(total), Some(free)) => {
            let inactive = kib("Inactive(file)").unwrap_or(0);
            Some(total.saturating_sub(free).saturating_sub(inactive) * 1024)
        }
        _ => None,
    };
    Usage {
        cpu_ns,
        memory_working_set,
    }
}

impl Cgroups {
    /// Removes the empty cgroups of pods not in `keep` (left when berth stopped before
    /// their pods were deleted); returns how many went. A pod cgroup with anything in it
    /// stays: it may be another berth's on the same machine.
    pub fn sweep(&self, keep: &std::collections::HashSet<String>) -> usize {
        let mut removed = 0;
        // What runc left in the other hierarchies: a pod's tree there goes when no
        // process is in any part of it.
        for parent in &self.others {
            let Ok(entries) = fs::read_dir(parent) else {
                continue;
            };
            for entry in entries.filter_map(|e| e.ok()) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(uid) = name.strip_prefix("pod") else {
                    continue;
                };
                let tree = tree(&entry.path());
                if !keep.contains(uid)
                    && tree.iter().all(|d| procs(d).is_empty())
                    && remove_tree(&entry.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        for u in &self.used {
            let Ok(entries) = fs::read_dir(&u.parent) else {
                continue;
            };
            for entry in entries.filter_map(|e| e.ok()) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(uid) = name.strip_prefix("pod") else {
                    continue;
                };
                let empty = fs::read_dir(entry.path()).is_ok_and(|mut d| {
                    !d.any(|e| e.is_ok_and(|e| e.file_type().is_ok_and(|t| t.is_dir())))
                });
                if !keep.contains(uid) && empty && fs::remove_dir(entry.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    }
}

/// Every cgroup at and below `dir`, deepest first (none when it does not exist).
fn tree(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .flat_map(|e| tree(&e.path()))
        .collect();
    out.push(dir.to_path_buf());
    out
}

/// Removes the cgroup `dir` and every cgroup below it; gone already is done.
fn remove_tree(dir: &Path) -> io::Result<()> {
    tree(dir).iter().try_for_each(|d| remove_dir(d))
}

fn remove_dir(dir: &Path) -> io::Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_context(format!("remove {}", dir.display()), e)),
    }
}

/// The processes in a cgroup.
fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILLs every process left in a cgroup.
fn kill_all(dir: &Path) {
    for pid in procs(dir) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A `key value` counter from a flat-keyed cgroup file.
fn counter(path: &Path, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Placement {
    fn join(dirs: &[PathBuf]) -> io::Result<()> {
        let me = std::process::id().to_string();
        for dir in dirs {
            write(dir, "cgroup.procs", &me)?;
        }
        Ok(())
    }

    /// Moves the calling process into the instance's cgroups.
    pub fn enter(&self) -> io::Result<()> {
        Self::join(&self.dirs)
    }

    /// Moves the calling process back to where it came from.
    pub fn leave(&self) -> io::Result<()> {
        Self::join(&self.home)
    }

    /// Whether the OOM killer killed a process of the instance.
    pub fn oom_killed(&self) -> bool {
        let (dir, version) = &self.memory;
        match version {
            Version::V2 => counter(&dir.join("memory.events"), "oom_kill").is_some_and(|n| n > 0),
            Version::V1 => {
                let control = dir.join("memory.oom_control");
                match counter(&control, "oom_kill") {
                    Some(n) => n > 0,
                    // Kernels before 4.13 have no counter: an OOM shows as a process
                    // under OOM at the limit.
                    None => counter(&control, "under_oom").is_some_and(|n| n > 0),
                }
            }
        }
    }

    /// Whether an instance killed by SIGKILL was killed for memory: the OOM killer's
    /// count says so, or — under v1, which counts kills only in the cgroup of the process
    /// killed (runc's, below this one, gone with it) — its limit or its pod's was hit:
    /// a limit failed a charge, or the usage's high-water mark reached it (kernels that
    /// keep no failure count).
    pub fn killed_for_memory(&self) -> bool {
        let (dir, version) = &self.memory;
        // Within this much of the limit, the limit was reached (charges come in pages
        // and batches, reclaim keeps a little below it).
        const SLACK: u64 = 1 << 20;
        let hit = |d: &Path| {
            let failed = ["memory.failcnt", "memory.memsw.failcnt"]
                .iter()
                .any(|f| read_u64(&d.join(f)).is_some_and(|n| n > 0));
            let reached = [
                ("memory.max_usage_in_bytes", "memory.limit_in_bytes"),
                (
                    "memory.memsw.max_usage_in_bytes",
                    "memory.memsw.limit_in_bytes",
                ),
            ]
            .iter()
            .any(|(max, limit)| {
                match (read_u64(&d.join(max)), read_u64(&d.join(limit))) {
                    // An unlimited cgroup's limit is near 2^63.
                    (Some(max), Some(limit)) if limit < 1 << 62 => max + SLACK >= limit,
                    _ => false,
                }
            });
            failed || reached
        };
        self.oom_killed()
            || (*version == Version::V1 && (hit(dir) || dir.parent().is_some_and(hit)))
    }

    /// Removes the instance's cgroups once nothing runs in them (best effort: what
    /// cannot go now goes with the pod).
    pub fn remove(&self) {
        for dir in &self.dirs {
            let _ = fs::remove_dir(dir);
        }
        for dir in &self.others {
            let _ = remove_tree(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake cgroupfs under a temporary directory, with the mountinfo that describes it.
    struct Fake {
        dir: tempfile::TempDir,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }

        fn mkdir(&self, rel: &str) -> PathBuf {
            let p = self.path(rel);
            fs::create_dir_all(&p).unwrap();
            p
        }

        fn read(&self, rel: &str) -> String {
            fs::read_to_string(self.path(rel))
                .unwrap_or_else(|e| panic!("{rel}: {e}"))
                .trim()
                .to_string()
        }

        /// This machine's kind of hybrid layout: v1 controllers, a v2 with only hugetlb.
        fn hybrid(&self) -> Layout {
            let base = self.dir.path().display().to_string();
            let mut mountinfo = format!("31 23 0:28 / {base} rw,relatime - tmpfs tmpfs rw\n");
            for (i, c) in ["cpu", "cpuacct", "memory", "pids"].iter().enumerate() {
                self.mkdir(c);
                mountinfo.push_str(&format!(
                    "{} 31 0:{} / {base}/{c} rw,relatime - cgroup cgroup rw,{c}\n",
                    40 + i,
                    30 + i
                ));
            }
            self.mkdir("systemd");
            mountinfo.push_str(&format!(
                "50 31 0:40 / {base}/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
            ));
            let unified = self.mkdir("unified");
            fs::write(unified.join("cgroup.controllers"), "hugetlb\n").unwrap();
            mountinfo.push_str(&format!(
                "51 31 0:41 / {base}/unified rw - cgroup2 cgroup2 rw\n"
            ));
            self.mkdir("memory/agent/1");
            let own = "9:name=systemd:/\n4:memory:/agent/1\n3:pids:/\n2:cpuacct:/\n1:cpu:/\n0::/\n";
            Layout::parse(&mountinfo, own)
        }

        fn v2(&self) -> Layout {
            let base = self.dir.path().display().to_string();
            let root = self.mkdir("cg");
            fs::write(
                root.join("cgroup.controllers"),
                "cpuset cpu io memory pids\n",
            )
            .unwrap();
            let mountinfo = format!(
                "22 1 0:20 / / rw - ext4 /dev/root rw\n\
                 30 22 0:26 / {base}/cg rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
            );
            Layout::parse(&mountinfo, "0::/system.slice/berth.service\n")
        }
    }

    fn limits() -> Resources {
        Resources {
            memory_limit_bytes: Some(32 << 20),
            cpu_limit_millis: Some(500),
            cpu_request_millis: Some(250),
        }
    }

    fn pod_limits() -> Resources {
        Resources {
            memory_limit_bytes: Some(96 << 20),
            cpu_limit_millis: Some(1500),
            cpu_request_millis: Some(1000),
        }
    }

    /// runc makes a container's path in every hierarchy and takes away only its last
    /// level: the levels above go with the instance, the pod, or the sweep.
    #[test]
    fn what_runc_makes_in_the_other_hierarchies_goes_with_the_container_and_pod() {
        let fake = Fake::new();
        let cgroups = Cgroups::new(&fake.hybrid(), "berth/n1").unwrap();
        // (No limits: a fake cgroup with files written in it is no empty directory.)
        let none = Resources::default();
        let runc_makes = |rel: &str| {
            for h in ["pids", "systemd", "unified"] {
                fake.mkdir(&format!("{h}/berth/n1/{rel}/runc"));
            }
        };
        let placement = cgroups.create("u1", "main", 0, &none, &none).unwrap();
        assert_eq!(placement.others.len(), 3, "{:?}", placement.others);
        runc_makes("podu1/main-0");
        placement.remove();
        for h in ["pids", "systemd", "unified"] {
            assert!(!fake.path(&format!("{h}/berth/n1/podu1/main-0")).exists());
            assert!(fake.path(&format!("{h}/berth/n1/podu1")).exists());
        }
        cgroups.create("u1", "main", 1, &none, &none).unwrap();
        runc_makes("podu1/main-1");
        cgroups.remove_pod("u1").unwrap();
        for h in ["pids", "systemd", "unified", "memory", "cpu"] {
            assert!(!fake.path(&format!("{h}/berth/n1/podu1")).exists(), "{h}");
        }
        // Left by a berth that stopped: swept unless the pod is kept.
        runc_makes("podu2/main-0");
        runc_makes("podu3/main-0");
        let keep = ["u3".to_string()].into_iter().collect();
        assert_eq!(cgroups.sweep(&keep), 3);
        assert!(!fake.path("pids/berth/n1/podu2").exists());
        assert!(fake.path("pids/berth/n1/podu3/main-0/runc").exists());
    }

    #[test]
    fn a_hybrid_layout_uses_the_v1_controllers() {
        let fake = Fake::new();
        let layout = fake.hybrid();
        assert_eq!(layout.kind(), "hybrid");
        let memory = layout.with("memory").unwrap();
        assert_eq!(memory.version, Version::V1);
        assert_eq!(memory.mount, fake.path("memory"));
        assert_eq!(memory.own, fake.path("memory/agent/1"));
        assert_eq!(layout.with("cpu").unwrap().mount, fake.path("cpu"));
        let systemd = layout
            .hierarchies
            .iter()
            .find(|h| h.mount == fake.path("systemd"))
            .unwrap();
        assert_eq!(systemd.controllers, vec!["name=systemd".to_string()]);
        assert_eq!(layout.with("hugetlb").unwrap().version, Version::V2);
        assert!(layout.with("io").is_none());
    }

    #[test]
    fn comounted_controllers_and_a_mount_of_a_subtree_are_understood() {
        let fake = Fake::new();
        let base = fake.dir.path().display().to_string();
        let mountinfo = format!(
            "40 31 0:30 / {base}/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             41 31 0:31 /outer {base}/memory rw - cgroup cgroup rw,noprefix,memory\n\
             42 31 0:32 / {base}/with\\040space rw - cgroup cgroup rw,pids\n"
        );
        let own = "3:pids:/\n2:memory:/outer/inner\n1:cpu,cpuacct:/a\n";
        let layout = Layout::parse(&mountinfo, own);
        let cpu = layout.with("cpuacct").unwrap();
        assert_eq!(
            cpu.controllers,
            vec!["cpu".to_string(), "cpuacct".to_string()]
        );
        assert_eq!(cpu.own, fake.path("cpu,cpuacct/a"));
        assert_eq!(layout.with("cpu"), Some(cpu));
        let memory = layout.with("memory").unwrap();
        assert_eq!(memory.controllers, vec!["memory".to_string()]);
        assert_eq!(
            memory.own,
            fake.path("memory/inner"),
            "the path is from the mount's root"
        );
        assert_eq!(layout.with("pids").unwrap().mount, fake.path("with space"));
        assert_eq!(layout.kind(), "v1");
    }

    #[test]
    fn v1_cgroups_get_limits_and_report_oom_kills() {
        let fake = Fake::new();
        let cgroups = Cgroups::new(&fake.hybrid(), "berth").unwrap();
        let placement = cgroups
            .create("u1", "app", 2, &limits(), &pod_limits())
            .unwrap();
        let (mem, cpu) = (
            fake.path("memory/berth/podu1/app-2"),
            fake.path("cpu/berth/podu1/app-2"),
        );
        let acct = fake.path("cpuacct/berth/podu1/app-2");
        assert_eq!(placement.dirs, vec![mem.clone(), cpu.clone(), acct.clone()]);
        assert_eq!(
            placement.home,
            vec![
                fake.path("memory/agent/1"),
                fake.path("cpu"),
                fake.path("cpuacct")
            ]
        );
        assert_eq!(
            fake.read("memory/berth/podu1/app-2/memory.limit_in_bytes"),
            "33554432"
        );
        assert_eq!(fake.read("cpu/berth/podu1/app-2/cpu.cfs_quota_us"), "50000");
        assert_eq!(
            fake.read("cpu/berth/podu1/app-2/cpu.cfs_period_us"),
            "100000"
        );
        assert_eq!(fake.read("cpu/berth/podu1/app-2/cpu.shares"), "256");
        // The pod's own limits, on the pod's cgroup.
        assert_eq!(
            fake.read("memory/berth/podu1/memory.limit_in_bytes"),
            (96u64 << 20).to_string()
        );
        assert_eq!(fake.read("cpu/berth/podu1/cpu.cfs_quota_us"), "150000");
        assert_eq!(fake.read("cpu/berth/podu1/cpu.shares"), "1024");
        assert!(
            !fake
                .path("memory/berth/podu1/app-2/memory.memsw.limit_in_bytes")
                .exists()
        );
        // No limits: nothing is written.
        cgroups
            .create("u1", "side", 0, &Resources::default(), &pod_limits())
            .unwrap();
        assert!(
            !fake
                .path("memory/berth/podu1/side-0/memory.limit_in_bytes")
                .exists()
        );
        assert!(
            !fake
                .path("cpu/berth/podu1/side-0/cpu.cfs_quota_us")
                .exists()
        );

        placement.enter().unwrap();
        assert_eq!(
            fake.read("memory/berth/podu1/app-2/cgroup.procs"),
            std::process::id().to_string()
        );
        placement.leave().unwrap();
        assert_eq!(
            fake.read("memory/agent/1/cgroup.procs"),
            std::process::id().to_string()
        );

        assert!(!placement.oom_killed(), "no counters yet");
        fs::write(
            mem.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        assert!(!placement.oom_killed());
        fs::write(
            mem.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        assert!(placement.oom_killed());
        fs::write(
            mem.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 1\n",
        )
        .unwrap();
        assert!(placement.oom_killed(), "older kernels: under_oom");
    }

    #[test]
    fn v1_swap_accounting_is_limited_too() {
        let fake = Fake::new();
        let layout = fake.hybrid();
        let cgroups = Cgroups::new(&layout, "berth").unwrap();
        // The kernel creates the interface files with the directory; here they are made.
        let dir = fake.mkdir("memory/berth/podu2/app-0");
        fs::write(dir.join("memory.memsw.limit_in_bytes"), "").unwrap();
        cgroups
            .create("u2", "app", 0, &limits(), &Resources::default())
            .unwrap();
        assert_eq!(
            fake.read("memory/berth/podu2/app-0/memory.memsw.limit_in_bytes"),
            "33554432"
        );
    }

    #[test]
    fn v2_cgroups_delegate_controllers_and_get_limits() {
        let fake = Fake::new();
        let layout = fake.v2();
        assert_eq!(layout.kind(), "v2");
        let h = layout.with("memory").unwrap();
        assert_eq!(h.own, fake.path("cg/system.slice/berth.service"));
        let cgroups = Cgroups::new(&layout, "berth").unwrap();
        assert_eq!(fake.read("cg/cgroup.subtree_control"), "+memory +cpu");
        assert_eq!(fake.read("cg/berth/cgroup.subtree_control"), "+memory +cpu");
        let placement = cgroups
            .create("u1", "app", 0, &limits(), &pod_limits())
            .unwrap();
        let dir = fake.path("cg/berth/podu1/app-0");
        assert_eq!(placement.dirs, vec![dir.clone()]);
        assert_eq!(placement.memory, (dir.clone(), Version::V2));
        assert_eq!(
            fake.read("cg/berth/podu1/cgroup.subtree_control"),
            "+memory +cpu"
        );
        assert_eq!(fake.read("cg/berth/podu1/app-0/memory.max"), "33554432");
        assert_eq!(fake.read("cg/berth/podu1/app-0/cpu.max"), "50000 100000");
        assert_eq!(fake.read("cg/berth/podu1/app-0/cpu.weight"), "10");
        assert_eq!(
            fake.read("cg/berth/podu1/memory.max"),
            (96u64 << 20).to_string()
        );
        assert_eq!(fake.read("cg/berth/podu1/cpu.max"), "150000 100000");
        assert_eq!(fake.read("cg/berth/podu1/cpu.weight"), "39");
        assert!(!placement.oom_killed());
        fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert!(placement.oom_killed());
        // The kernel removes interface files with the directory; here they are removed.
        for d in [&dir, &fake.path("cg/berth/podu1")] {
            for f in fs::read_dir(d).unwrap() {
                let f = f.unwrap().path();
                if f.is_file() {
                    fs::remove_file(f).unwrap();
                }
            }
        }
        cgroups.remove_pod("u1").unwrap();
        assert!(!fake.path("cg/berth/podu1").exists());
        cgroups.remove_pod("u1").unwrap();
    }

    #[test]
    fn without_a_usable_hierarchy_limits_cannot_be_enforced() {
        let fake = Fake::new();
        let none = Layout::parse("22 1 0:20 / / rw - ext4 /dev/root rw\n", "0::/\n");
        assert_eq!(none.kind(), "none");
        let e = Cgroups::new(&none, "berth").unwrap_err();
        assert!(e.contains("memory controller"), "{e}");
        // A v2 hierarchy whose controllers do not include cpu.
        let root = fake.mkdir("cg");
        fs::write(root.join("cgroup.controllers"), "memory pids\n").unwrap();
        let mountinfo = format!("30 22 0:26 / {} rw - cgroup2 cgroup2 rw\n", root.display());
        let e = Cgroups::new(&Layout::parse(&mountinfo, "0::/\n"), "berth").unwrap_err();
        assert!(e.contains("cpu controller"), "{e}");
        // A mount point that is not there: the parent cannot be made.
        let gone = format!(
            "30 22 0:26 / {}/missing rw - cgroup cgroup rw,memory,cpu\n",
            fake.dir.path().display()
        );
        let e = Cgroups::new(&Layout::parse(&gone, "1:memory,cpu:/\n"), "berth").unwrap_err();
        assert!(e.contains("missing/berth"), "{e}");
    }

    #[test]
    fn a_sweep_takes_only_empty_cgroups_of_unknown_pods() {
        let fake = Fake::new();
        let cgroups = Cgroups::new(&fake.hybrid(), "berth").unwrap();
        for d in [
            "memory/berth/podgone",
            "memory/berth/podkept",
            "memory/berth/podbusy/c-0",
        ] {
            fake.mkdir(d);
        }
        fake.mkdir("memory/berth/other");
        let keep = ["kept".to_string()].into_iter().collect();
        assert_eq!(cgroups.sweep(&keep), 1);
        assert!(!fake.path("memory/berth/podgone").exists());
        assert!(fake.path("memory/berth/podkept").exists());
        assert!(
            fake.path("memory/berth/podbusy/c-0").exists(),
            "it has a container cgroup"
        );
        assert!(fake.path("memory/berth/other").exists());
    }

    #[test]
    fn usage_is_read_from_cpuacct_and_the_memory_working_set() {
        let fake = Fake::new();
        let cgroups = Cgroups::new(&fake.hybrid(), "berth").unwrap();
        cgroups
            .create("u1", "app", 0, &limits(), &pod_limits())
            .unwrap();
        assert_eq!(cgroups.container_usage("u1", "other", 0), None);
        let write = |rel: &str, text: &str| fs::write(fake.path(rel), text).unwrap();
        write("cpuacct/berth/podu1/app-0/cpuacct.usage", "1500000000\n");
        write(
            "memory/berth/podu1/app-0/memory.usage_in_bytes",
            "10485760\n",
        );
        write(
            "memory/berth/podu1/app-0/memory.stat",
            "cache 4096\ninactive_file 1\ntotal_inactive_file 2097152\n",
        );
        assert_eq!(
            cgroups.container_usage("u1", "app", 0),
            Some(Usage {
                cpu_ns: Some(1_500_000_000),
                memory_working_set: Some(8 << 20),
            })
        );
        // The pod's cgroup without counters yet (a fake fs has none): nothing known.
        assert_eq!(cgroups.pod_usage("u1"), Some(Usage::default()));
        assert_eq!(cgroups.pod_usage("u2"), None);

        let fake = Fake::new();
        let cgroups = Cgroups::new(&fake.v2(), "berth").unwrap();
        cgroups
            .create("u1", "app", 3, &limits(), &pod_limits())
            .unwrap();
        let write = |rel: &str, text: &str| fs::write(fake.path(rel), text).unwrap();
        write("cg/berth/podu1/cpu.stat", "usage_usec 250\nuser_usec 200\n");
        write("cg/berth/podu1/memory.current", "4096\n");
        write(
            "cg/berth/podu1/memory.stat",
            "anon 4096\ninactive_file 8192\n",
        );
        assert_eq!(
            cgroups.pod_usage("u1"),
            Some(Usage {
                cpu_ns: Some(250_000),
                memory_working_set: Some(0),
            }),
            "the working set never goes below zero"
        );
    }

    #[test]
    fn the_machine_usage_counts_busy_ticks_and_memory_less_inactive_files() {
        let stat = "cpu  100 5 50 1000 20 3 2 1 40 0\ncpu0 50 2 25 500 10 1 1 0 20 0\n";
        let meminfo = "MemTotal:        1000 kB\nMemFree:          200 kB\nMemAvailable:     600 kB\nInactive(file):   300 kB\n";
        let usage = machine_usage_from(stat, meminfo, 100);
        assert_eq!(usage.cpu_ns, Some((100 + 5 + 50 + 3 + 2 + 1) * 10_000_000));
        assert_eq!(usage.memory_working_set, Some(500 * 1024));
        assert_eq!(machine_usage_from("", "", 100), Usage::default());
        let real = machine_usage();
        assert!(real.cpu_ns.is_some_and(|n| n > 0) && real.memory_working_set.is_some());
    }

    #[test]
    fn conversions_follow_kubernetes() {
        assert_eq!(shares(1000), 1024);
        assert_eq!(shares(1), 2);
        assert_eq!(weight(2), 1);
        assert_eq!(weight(262_144), 10_000);
        assert_eq!(weight(1024), 39);
        assert_eq!(quota(1), 1000, "the kernel's minimum");
        assert_eq!(quota(1500), 150_000);
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
