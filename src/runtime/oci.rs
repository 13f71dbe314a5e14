//! The `oci` runtime's bundles: what a container of an image needs besides its shim. The
//! agent resolves the image (its layers and its config: entrypoint, cmd, env, working
//! directory, user) into the container's [`Rootfs`]; the runtime writes an OCI bundle —
//! `config.json` made with the `oci-spec` crate's runtime types — and a [`RootfsSetup`]
//! record; the shim mounts the root filesystem (overlayfs: the image's layers read-only
//! below, an upper and a work directory of the container's own above) in a mount
//! namespace of its own, so the mount ends with the shim whatever happens, and runs
//! `runc run` on the bundle, which it supervises as it supervises a process.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capability, LinuxCapabilitiesBuilder, LinuxNamespaceType, Mount as OciMount, MountBuilder,
    Spec, UserBuilder,
};
use serde::{Deserialize, Serialize};

use super::ContainerSpec;

/// The bundle's directory, in the instance's directory.
pub const BUNDLE_DIR: &str = "bundle";
/// The container's init process, as runc writes it once the container runs.
pub const PID_FILE: &str = "container.pid";
/// What the shim mounts before it runs the container (a [`RootfsSetup`]).
pub const ROOTFS_FILE: &str = "rootfs";

/// The image part of a container, as the agent resolved it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rootfs {
    /// The image's unpacked layers, lowest first.
    pub layers: Vec<PathBuf>,
    pub uid: u32,
    pub gid: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
    /// What its security context asks beyond the user.
    #[serde(default)]
    pub hardening: Hardening,
}

/// The namespaces of a pod's sandbox: its containers share the IPC and UTS namespaces
/// (host name: the pod's) that the pod's pause process holds, and its PID namespace with
/// `shareProcessNamespace`; `hostNetwork` keeps this machine's network and host name,
/// `hostIPC` and `hostPID` its IPC and PID namespaces. With `network`, the sandbox has a
/// network namespace of its own, which the node wires to the pod network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(default)]
    pub host_network: bool,
    #[serde(default)]
    pub network: bool,
    #[serde(default)]
    pub host_ipc: bool,
    #[serde(default)]
    pub host_pid: bool,
    #[serde(default)]
    pub share_pids: bool,
}

/// Makes the namespaces of a pod's sandbox and holds them (`berth pause --sandbox`): new
/// UTS (named `hostname`) and IPC namespaces, with `new_net` a network namespace (empty:
/// the node wires it), and with `new_pid` a PID namespace whose
/// first process is `holder` (a plain `berth pause`, started here), which is then the
/// process that holds them all. Writes the holder's pid to `pid_file` and returns the
/// holder when there is one of its own. Must run while this process has one thread.
pub fn hold_namespaces(
    hostname: Option<&str>,
    new_ipc: bool,
    new_net: bool,
    new_pid: bool,
    holder: &[String],
    pid_file: &Path,
) -> io::Result<Option<std::process::Child>> {
    use rustix::thread::UnshareFlags;
    let mut flags = UnshareFlags::empty();
    if hostname.is_some() {
        flags |= UnshareFlags::NEWUTS;
    }
    if new_ipc {
        flags |= UnshareFlags::NEWIPC;
    }
    if new_net {
        flags |= UnshareFlags::NEWNET;
    }
    if new_pid {
        flags |= UnshareFlags::NEWPID;
    }
    // SAFETY: no CLONE_FILES among the flags, so no file descriptor table is unshared;
    // the caller has started no thread yet.
    #[allow(unsafe_code)]
    unsafe { rustix::thread::unshare_unsafe(flags) }
        .map_err(|e| io::Error::other(format!("make the pod's namespaces: {e}")))?;
    if let Some(name) = hostname {
        rustix::system::sethostname(name.as_bytes())
            .map_err(|e| io::Error::other(format!("set the host name {name:?}: {e}")))?;
    }
    let (pid, child) = match (new_pid, holder.split_first()) {
        (true, Some((program, args))) => {
            let child = std::process::Command::new(program).args(args).spawn()?;
            (child.id(), Some(child))
        }
        _ => (std::process::id(), None),
    };
    fs::write(pid_file, pid.to_string())?;
    Ok(child)
}

/// A container's security context, as far as its process and root filesystem go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hardening {
    /// Every capability, no masked paths, no seccomp filter.
    #[serde(default)]
    pub privileged: bool,
    /// Capabilities added to and dropped from the default set (`ALL` allowed), as named
    /// in the pod (`NET_ADMIN` or `CAP_NET_ADMIN`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
    #[serde(default)]
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation: false`: the process and its children never gain
    /// privileges (no_new_privs).
    #[serde(default)]
    pub no_new_privileges: bool,
    /// `seccompProfile: RuntimeDefault`: berth's default profile.
    #[serde(default)]
    pub seccomp_runtime_default: bool,
}

/// Every capability this runtime knows, by name, in the kernel's order (the index is
/// the capability's number).
const ALL_CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities this process may hand on (its bounding set): a container cannot
/// get more than its runtime has.
fn bounding() -> HashSet<Capability> {
    let bits = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapBnd:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .unwrap_or(u64::MAX);
    ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .filter_map(|(_, n)| capability(n).ok())
        .collect()
}

fn capability(name: &str) -> Result<Capability, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
        format!("unknown capability {name:?}: name one of Linux's, as NET_ADMIN or CAP_NET_ADMIN")
    })
}

impl Hardening {
    /// The capabilities the container's process gets (never more than `bounding`, the
    /// runtime's own).
    pub fn capabilities(&self) -> Result<HashSet<Capability>, String> {
        self.capabilities_within(&bounding())
    }

    fn capabilities_within(
        &self,
        bounding: &HashSet<Capability>,
    ) -> Result<HashSet<Capability>, String> {
        if self.privileged {
            return Ok(bounding.clone());
        }
        let all = |names: &[String]| names.iter().any(|n| n.eq_ignore_ascii_case("ALL"));
        let mut caps: HashSet<Capability> = match all(&self.drop) {
            true => HashSet::new(),
            false => DEFAULT_CAPABILITIES.into_iter().collect(),
        };
        if all(&self.add) {
            caps.extend(bounding.iter().copied());
        } else {
            for n in &self.add {
                caps.insert(capability(n)?);
            }
        }
        for n in self.drop.iter().filter(|n| !n.eq_ignore_ascii_case("ALL")) {
            caps.remove(&capability(n)?);
        }
        caps.retain(|c| bounding.contains(c));
        Ok(caps)
    }
}

/// The system calls berth's default seccomp profile refuses (`EPERM`), by the capability
/// that lets a container make them anyway (none: always refused). In the spirit of
/// containerd's default profile, as a deny list: what reaches into the kernel, other
/// processes or the machine as a whole.
const SECCOMP_DENIED: [(Option<Capability>, &[&str]); 6] = [
    (
        None,
        &[
            "acct",
            "add_key",
            "keyctl",
            "request_key",
            "kexec_file_load",
            "kexec_load",
            "lookup_dcookie",
            "nfsservctl",
            "open_by_handle_at",
            "perf_event_open",
            "quotactl",
            "swapon",
            "swapoff",
            "sysfs",
            "_sysctl",
            "uselib",
            "userfaultfd",
            "ustat",
            "vm86",
            "vm86old",
            "get_kernel_syms",
            "query_module",
            "create_module",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "move_mount",
            "open_tree",
        ],
    ),
    (
        Some(Capability::SysAdmin),
        &[
            "bpf",
            "clone3",
            "fanotify_init",
            "mount",
            "name_to_handle_at",
            "pivot_root",
            "setns",
            "umount",
            "umount2",
            "unshare",
            "lookup_dcookie",
        ],
    ),
    (
        Some(Capability::SysModule),
        &["delete_module", "finit_module", "init_module"],
    ),
    (
        Some(Capability::SysPtrace),
        &["kcmp", "process_vm_readv", "process_vm_writev", "ptrace"],
    ),
    (
        Some(Capability::SysTime),
        &["clock_adjtime", "clock_settime", "settimeofday", "stime"],
    ),
    (Some(Capability::SysBoot), &["reboot"]),
];

/// berth's default seccomp profile for a container with `caps`.
fn seccomp_profile(caps: &HashSet<Capability>) -> Result<oci_spec::runtime::LinuxSeccomp, String> {
    let mut denied: Vec<&str> = SECCOMP_DENIED
        .iter()
        .filter(|(cap, _)| cap.is_none_or(|c| !caps.contains(&c)))
        .flat_map(|(_, names)| names.iter().copied())
        .collect();
    denied.sort_unstable();
    denied.dedup();
    // clone3 is refused with ENOSYS, so that C libraries fall back to clone (whose
    // namespace flags a container without CAP_SYS_ADMIN cannot use anyway).
    let (enosys, eperm): (Vec<&str>, Vec<&str>) = denied.into_iter().partition(|n| *n == "clone3");
    let mut syscalls = vec![serde_json::json!({
        "names": eperm, "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
    })];
    if !enosys.is_empty() {
        syscalls.push(serde_json::json!({
            "names": enosys, "action": "SCMP_ACT_ERRNO", "errnoRet": 38,
        }));
    }
    serde_json::from_value(serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": syscalls,
    }))
    .map_err(|e| format!("the default seccomp profile: {e}"))
}

/// What the shim of an `oci` container mounts, and how it cleans up after `runc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootfsSetup {
    /// Lower directories, the top layer first (as overlayfs takes them).
    pub lower: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Where the root filesystem is mounted (the bundle's `rootfs`).
    pub target: PathBuf,
    /// Run once the container has ended, whatever way (`runc delete --force`), so no
    /// state or cgroup of runc's stays behind.
    pub cleanup: Vec<String>,
}

/// What an image's config says about running it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `KEY=value` entries.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

impl ImageConfig {
    /// Reads the parts that matter from an image config blob.
    pub fn parse(bytes: &[u8]) -> Result<ImageConfig, String> {
        let c: oci_spec::image::ImageConfiguration = serde_json::from_slice(bytes)
            .map_err(|e| format!("the image's config cannot be read: {e}"))?;
        let Some(config) = c.config() else {
            return Ok(ImageConfig::default());
        };
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        Ok(ImageConfig {
            entrypoint: config.entrypoint().clone().unwrap_or_default(),
            cmd: config.cmd().clone().unwrap_or_default(),
            env: config.env().clone().unwrap_or_default(),
            working_dir: nonempty(config.working_dir()),
            user: nonempty(config.user()),
        })
    }
}

/// The command line of a container, as Kubernetes combines the pod's `command` and `args`
/// with the image's entrypoint and cmd: `command` replaces the entrypoint and drops the
/// cmd; `args` replace the cmd.
pub fn argv(image: &ImageConfig, command: &[String], args: &[String]) -> Vec<String> {
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => image.entrypoint.iter().chain(args).cloned().collect(),
        (true, true) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
    }
}

/// The file at `path` (absolute, in the image) as the layers make it: the topmost layer
/// that has it or hides it (an OCI whiteout) decides.
fn layered_file(layers: &[PathBuf], path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.trim_start_matches('/'));
    for layer in layers.iter().rev() {
        let candidate = layer.join(rel);
        if fs::symlink_metadata(&candidate).is_ok() {
            return Some(candidate);
        }
        let name = rel.file_name()?.to_string_lossy();
        let whiteout = layer
            .join(rel.parent().unwrap_or(Path::new("")))
            .join(format!(".wh.{name}"));
        if fs::symlink_metadata(whiteout).is_ok() {
            return None;
        }
    }
    None
}

/// Entries of a colon-separated database (`/etc/passwd`, `/etc/group`) of the image.
fn entries(layers: &[PathBuf], path: &str) -> Vec<Vec<String>> {
    let Some(file) = layered_file(layers, path) else {
        return Vec::new();
    };
    // A symbolic link in an image points into the image, never onto this machine.
    if fs::symlink_metadata(&file).is_ok_and(|m| m.file_type().is_symlink()) {
        return Vec::new();
    }
    fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').map(str::to_string).collect())
        .collect()
}

/// The user a container runs as: `run_as_user`/`run_as_group` (the pod's security
/// context) over the image's `USER` (`name`, `uid`, `name:group`, `uid:gid`), names looked
/// up in the image's `/etc/passwd` and `/etc/group`; root by default. The groups the user
/// belongs to in the image and `supplemental` are added.
pub fn resolve_user(
    layers: &[PathBuf],
    image_user: Option<&str>,
    run_as_user: Option<u32>,
    run_as_group: Option<u32>,
    supplemental: &[u32],
) -> Result<(u32, u32, Vec<u32>), String> {
    let (user, group) = match image_user {
        Some(u) => match u.split_once(':') {
            Some((u, g)) => (Some(u.to_string()), Some(g.to_string())),
            None => (Some(u.to_string()), None),
        },
        None => (None, None),
    };
    let passwd = entries(layers, "/etc/passwd");
    let groups = entries(layers, "/etc/group");
    let field = |e: &Vec<String>, i: usize| e.get(i).cloned().unwrap_or_default();
    let (uid, mut gid, name) = match (run_as_user, &user) {
        (Some(uid), _) => {
            let entry = passwd.iter().find(|e| field(e, 2) == uid.to_string());
            let gid = entry.and_then(|e| field(e, 3).parse().ok()).unwrap_or(0);
            (uid, gid, entry.map(|e| field(e, 0)))
        }
        (None, Some(u)) if u.parse::<u32>().is_ok() => {
            let uid: u32 = u.parse().expect("checked");
            let entry = passwd.iter().find(|e| field(e, 2) == *u);
            let gid = entry.and_then(|e| field(e, 3).parse().ok()).unwrap_or(0);
            (uid, gid, entry.map(|e| field(e, 0)))
        }
        (None, Some(u)) => {
            let entry = passwd.iter().find(|e| field(e, 0) == *u).ok_or_else(|| {
                format!("the image's user {u:?} is not in its /etc/passwd: give the container a runAsUser, or fix the image")
            })?;
            let uid = field(entry, 2)
                .parse()
                .map_err(|_| format!("the image's /etc/passwd gives user {u:?} no numeric uid"))?;
            let gid = field(entry, 3).parse().unwrap_or(0);
            (uid, gid, Some(u.clone()))
        }
        (None, None) => (0, 0, Some("root".to_string())),
    };
    if let Some(g) = &group {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => groups
                .iter()
                .find(|e| field(e, 0) == *g)
                .and_then(|e| field(e, 2).parse().ok())
                .ok_or_else(|| format!("the image's group {g:?} is not in its /etc/group"))?,
        };
    }
    if let Some(g) = run_as_group {
        gid = g;
    }
    let mut extra: Vec<u32> = Vec::new();
    if let Some(name) = name {
        for e in &groups {
            let members = field(e, 3);
            if members.split(',').any(|m| m == name)
                && let Ok(g) = field(e, 2).parse::<u32>()
                && g != gid
                && !extra.contains(&g)
            {
                extra.push(g);
            }
        }
    }
    for g in supplemental {
        if !extra.contains(g) {
            extra.push(*g);
        }
    }
    Ok((uid, gid, extra))
}

/// The capabilities a container gets by default (containerd's set).
pub const DEFAULT_CAPABILITIES: [Capability; 14] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<OciMount, String> {
    let mut options = vec!["rbind".to_string(), "rprivate".to_string()];
    if read_only {
        options.push("ro".to_string());
    }
    MountBuilder::default()
        .destination(target)
        .typ("bind")
        .source(source)
        .options(options)
        .build()
        .map_err(|e| format!("mount {}: {e}", target.display()))
}

/// The `config.json` of a container: its process (argv, env, working directory, user,
/// capabilities), its root filesystem (`rootfs` in the bundle), the pod's name as host
/// name, its own mount, PID, IPC and UTS namespaces (the host's network), the usual
/// kernel file systems, `files` (`/etc/hosts` and the like) and its volumes bind-mounted,
/// and `cgroups_path` (relative: runc makes it below its own cgroup, which the shim has
/// placed in the container's). `holder` is the process that holds the pod's sandbox
/// namespaces, which the container joins.
pub fn spec(
    c: &ContainerSpec,
    rootfs: &Rootfs,
    mounts: &[super::Mount],
    cgroups_path: &str,
    holder: Option<i32>,
) -> Result<Spec, String> {
    let mut spec = Spec::default();
    let mut process = spec.process().clone().unwrap_or_default();
    process.set_args(Some(c.argv.clone()));
    let mut env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !c.env.iter().any(|(k, _)| k == "PATH") {
        env.insert(0, format!("PATH={}", super::DEFAULT_PATH));
    }
    if !c.env.iter().any(|(k, _)| k == "HOSTNAME") {
        env.push(format!("HOSTNAME={}", c.pod_name));
    }
    process.set_env(Some(env));
    process.set_cwd(c.working_dir.clone().unwrap_or_else(|| PathBuf::from("/")));
    let mut user = UserBuilder::default()
        .uid(rootfs.uid)
        .gid(rootfs.gid)
        .build()
        .map_err(|e| format!("user: {e}"))?;
    if !rootfs.additional_gids.is_empty() {
        user.set_additional_gids(Some(rootfs.additional_gids.clone()));
    }
    process.set_user(user);
    let hardening = &rootfs.hardening;
    let caps = hardening.capabilities()?;
    process.set_capabilities(Some(
        LinuxCapabilitiesBuilder::default()
            .bounding(caps.clone())
            .effective(caps.clone())
            .permitted(caps.clone())
            // None inherited, none ambient (as containerd): a process of another user
            // starts without capabilities.
            .inheritable(HashSet::new())
            .ambient(HashSet::new())
            .build()
            .map_err(|e| format!("capabilities: {e}"))?,
    ));
    // Kubernetes lets a process gain privileges (setuid binaries) unless told otherwise.
    process.set_no_new_privileges(Some(hardening.no_new_privileges && !hardening.privileged));
    process.set_rlimits(None);
    // On a terminal, runc gives the container one of its own and joins it to the one
    // the shim started runc on.
    process.set_terminal(Some(c.stdio.tty));
    spec.set_process(Some(process));
    let mut root = spec.root().clone().unwrap_or_default();
    root.set_path(PathBuf::from("rootfs"));
    root.set_readonly(Some(hardening.read_only_root));
    spec.set_root(Some(root));
    let sandbox = c.sandbox.clone().unwrap_or_default();
    // With this machine's network, its host name too (as the kubelet does).
    spec.set_hostname((!sandbox.host_network).then(|| c.pod_name.clone()));
    let mut all = spec.mounts().clone().unwrap_or_default();
    // Outer paths first, so a volume inside another one lands on top of it.
    let mut ordered: Vec<&super::Mount> = mounts.iter().collect();
    ordered.sort_by_key(|m| m.target.components().count());
    if hardening.privileged {
        for m in all
            .iter_mut()
            .filter(|m| m.destination() == Path::new("/sys"))
        {
            let options = m.options().clone().unwrap_or_default();
            m.set_options(Some(options.into_iter().filter(|o| o != "ro").collect()));
        }
    }
    for m in ordered {
        all.push(bind(&m.source, &m.target, m.read_only)?);
    }
    spec.set_mounts(Some(all));
    let mut linux = spec.linux().clone().unwrap_or_default();
    let join = |typ: LinuxNamespaceType, file: &str| {
        let mut n = oci_spec::runtime::LinuxNamespace::default();
        n.set_typ(typ);
        if let Some(pid) = holder {
            n.set_path(Some(PathBuf::from(format!("/proc/{pid}/ns/{file}"))));
        }
        n
    };
    let mut namespaces = vec![join(LinuxNamespaceType::Mount, "mnt")];
    namespaces[0].set_path(None);
    // The sandbox's network when it has one of its own, else the host's; the host's
    // cgroup view as the process runtime gives it.
    if !sandbox.host_network {
        namespaces.push(join(LinuxNamespaceType::Uts, "uts"));
        if sandbox.network {
            namespaces.push(join(LinuxNamespaceType::Network, "net"));
        }
    }
    if !sandbox.host_ipc {
        namespaces.push(join(LinuxNamespaceType::Ipc, "ipc"));
    }
    if !sandbox.host_pid {
        let mut pid = join(LinuxNamespaceType::Pid, "pid");
        if !sandbox.share_pids {
            pid.set_path(None);
        }
        namespaces.push(pid);
    }
    linux.set_namespaces(Some(namespaces));
    linux.set_cgroups_path(Some(PathBuf::from(cgroups_path)));
    if hardening.privileged {
        // Nothing of /proc is hidden from a privileged container, /sys is writable, and
        // it has this machine's devices with access to every device (as containerd
        // gives it).
        linux.set_masked_paths(None);
        linux.set_readonly_paths(None);
        linux.set_devices(Some(host_devices(Path::new("/dev"))));
        let mut resources = linux.resources().clone().unwrap_or_default();
        let mut all = oci_spec::runtime::LinuxDeviceCgroup::default();
        all.set_allow(true);
        all.set_access(Some("rwm".to_string()));
        resources.set_devices(Some(vec![all]));
        linux.set_resources(Some(resources));
    } else if hardening.seccomp_runtime_default {
        linux.set_seccomp(Some(seccomp_profile(&caps)?));
    }
    spec.set_linux(Some(linux));
    Ok(spec)
}

/// The character and block devices below `dev` (this machine's `/dev`), as a privileged
/// container gets them: the directories of other file systems (`pts`, `shm`, `mqueue`)
/// and symbolic links are left out; runc makes the container's own `/dev/pts` and
/// `/dev/shm`.
pub fn host_devices(dev: &Path) -> Vec<oci_spec::runtime::LinuxDevice> {
    use oci_spec::runtime::{LinuxDevice, LinuxDeviceType};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    const SKIP: [&str; 4] = ["pts", "shm", "mqueue", "fd"];
    let mut out = Vec::new();
    let mut stack = vec![dev.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(meta) = fs::symlink_metadata(e.path()) else {
                continue;
            };
            let t = meta.file_type();
            let typ = if t.is_char_device() {
                LinuxDeviceType::C
            } else if t.is_block_device() {
                LinuxDeviceType::B
            } else {
                if t.is_dir() && !(dir == dev && SKIP.iter().any(|s| e.file_name() == *s)) {
                    stack.push(e.path());
                }
                continue;
            };
            // The device's path in the container is its path below /dev.
            let Ok(inside) = e
                .path()
                .strip_prefix(dev)
                .map(|p| Path::new("/dev").join(p))
            else {
                continue;
            };
            let rdev = meta.rdev();
            let mut d = LinuxDevice::default();
            d.set_path(inside);
            d.set_typ(typ);
            d.set_major(rustix::fs::major(rdev) as i64);
            d.set_minor(rustix::fs::minor(rdev) as i64);
            d.set_file_mode(Some(meta.mode() & 0o7777));
            d.set_uid(Some(meta.uid()));
            d.set_gid(Some(meta.gid()));
            out.push(d);
        }
    }
    out.sort_by(|a, b| a.path().cmp(b.path()));
    out
}

/// The files every container of a pod finds in `/etc`, written into `dir`: `hosts`,
/// `hostname` and `resolv.conf` — the agent's (`etc`) when it made them, else localhost
/// and the pod's name, and this machine's resolvers. Returns them as mounts.
pub fn etc_files(
    dir: &Path,
    pod_name: &str,
    etc: Option<&super::EtcFiles>,
) -> io::Result<Vec<super::Mount>> {
    let (hosts, resolv) = match etc {
        Some(etc) => (etc.hosts.clone().into_bytes(), etc.resolv_conf.clone().into_bytes()),
        None => (
            format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{pod_name}\n"
            )
            .into_bytes(),
            fs::read("/etc/resolv.conf").unwrap_or_default(),
        ),
    };
    let files: [(&str, Vec<u8>); 3] = [
        ("hosts", hosts),
        ("hostname", format!("{pod_name}\n").into_bytes()),
        ("resolv.conf", resolv),
    ];
    let mut out = Vec::new();
    for (name, content) in files {
        let path = dir.join(name);
        fs::write(&path, content)?;
        out.push(super::Mount {
            source: path,
            target: PathBuf::from("/etc").join(name),
            read_only: false,
        });
    }
    Ok(out)
}

/// Runs the clean-up of `setup` (`runc delete --force`: runc's state and cgroups of the
/// container), whatever became of the container; best effort.
pub fn clean_up(setup: &RootfsSetup) {
    let Some((program, args)) = setup.cleanup.split_first() else {
        return;
    };
    let _ = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Mounts the root filesystem of `setup`: overlayfs, the layers read-only below. The
/// lower directories are given relative to their common parent (entered first), so many
/// layers fit in the one page the mount options may take.
pub fn mount_rootfs(setup: &RootfsSetup) -> io::Result<()> {
    use rustix::mount::{MountFlags, mount};
    let fail = |what: String| move |e: rustix::io::Errno| io::Error::other(format!("{what}: {e}"));
    for dir in [&setup.upper, &setup.work, &setup.target] {
        fs::create_dir_all(dir)?;
    }
    let parent = setup
        .lower
        .first()
        .and_then(|l| l.parent())
        .filter(|p| setup.lower.iter().all(|l| l.parent() == Some(*p)));
    let lower: Vec<String> = match parent {
        Some(p) => {
            std::env::set_current_dir(p)?;
            setup
                .lower
                .iter()
                .map(|l| l.file_name().unwrap_or_default().to_string_lossy().into())
                .collect()
        }
        None => setup
            .lower
            .iter()
            .map(|l| l.display().to_string())
            .collect(),
    };
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.join(":"),
        setup.upper.display(),
        setup.work.display()
    );
    let options = std::ffi::CString::new(options)
        .map_err(|_| io::Error::other("a layer's path holds a NUL byte"))?;
    let mounted = mount(
        "overlay",
        &setup.target,
        "overlay",
        MountFlags::empty(),
        Some(options.as_c_str()),
    )
    .map_err(fail(format!(
        "mount the root filesystem at {}",
        setup.target.display()
    )));
    std::env::set_current_dir("/")?;
    mounted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_and_args_combine_with_the_image_as_kubernetes_does() {
        let image = ImageConfig {
            entrypoint: s(&["/entry"]),
            cmd: s(&["--default"]),
            ..Default::default()
        };
        assert_eq!(argv(&image, &[], &[]), s(&["/entry", "--default"]));
        assert_eq!(argv(&image, &[], &s(&["x"])), s(&["/entry", "x"]));
        assert_eq!(argv(&image, &s(&["sh"]), &[]), s(&["sh"]));
        assert_eq!(
            argv(&image, &s(&["sh"]), &s(&["-c", "true"])),
            s(&["sh", "-c", "true"])
        );
        let no_entry = ImageConfig {
            cmd: s(&["sh"]),
            ..Default::default()
        };
        assert_eq!(argv(&no_entry, &[], &[]), s(&["sh"]));
    }

    #[test]
    fn an_image_config_is_read_for_what_running_it_needs() {
        let blob =
            br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},
            "config":{"Entrypoint":["/bin/sh"],"Cmd":["-c","echo hi"],"Env":["PATH=/bin","A=b"],
            "WorkingDir":"/srv","User":"app"}}"#;
        let c = ImageConfig::parse(blob).unwrap();
        assert_eq!(c.entrypoint, s(&["/bin/sh"]));
        assert_eq!(c.cmd, s(&["-c", "echo hi"]));
        assert_eq!(c.env, s(&["PATH=/bin", "A=b"]));
        assert_eq!(c.working_dir.as_deref(), Some("/srv"));
        assert_eq!(c.user.as_deref(), Some("app"));
        assert!(ImageConfig::parse(b"{").is_err());
    }

    #[test]
    fn capabilities_are_added_dropped_and_bounded_by_the_runtimes() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let every: HashSet<Capability> = ALL_CAPABILITIES
            .iter()
            .map(|n| capability(n).unwrap())
            .collect();
        let plain = Hardening::default().capabilities_within(&every).unwrap();
        assert_eq!(plain, DEFAULT_CAPABILITIES.into_iter().collect());
        let h = Hardening {
            drop: names(&["ALL"]),
            add: names(&["NET_BIND_SERVICE", "CAP_SYS_TIME"]),
            ..Default::default()
        };
        assert_eq!(
            h.capabilities_within(&every).unwrap(),
            [Capability::NetBindService, Capability::SysTime]
                .into_iter()
                .collect()
        );
        let h = Hardening {
            drop: names(&["kill", "MKNOD"]),
            ..Default::default()
        };
        let got = h.capabilities_within(&every).unwrap();
        assert!(!got.contains(&Capability::Kill) && !got.contains(&Capability::Mknod));
        assert_eq!(got.len(), DEFAULT_CAPABILITIES.len() - 2);
        // Privileged is everything the runtime has, and no more.
        let mut bounded = every.clone();
        bounded.remove(&Capability::SysResource);
        let h = Hardening {
            privileged: true,
            ..Default::default()
        };
        assert_eq!(h.capabilities_within(&bounded).unwrap(), bounded);
        let bad = Hardening {
            add: names(&["FLY"]),
            ..Default::default()
        };
        assert!(bad.capabilities_within(&every).unwrap_err().contains("FLY"));
    }

    #[test]
    fn a_privileged_container_gets_this_machines_devices() {
        let devices = host_devices(Path::new("/dev"));
        let null = devices
            .iter()
            .find(|d| d.path() == Path::new("/dev/null"))
            .expect("/dev/null");
        assert_eq!(
            (null.typ(), null.major(), null.minor()),
            (oci_spec::runtime::LinuxDeviceType::C, 1, 3)
        );
        assert!(!devices.iter().any(|d| d.path().starts_with("/dev/pts")));
    }

    #[test]
    fn users_are_looked_up_in_the_images_files_top_layer_first() {
        let dir = tempfile::tempdir().unwrap();
        let (low, high) = (dir.path().join("low"), dir.path().join("high"));
        fs::create_dir_all(low.join("etc")).unwrap();
        fs::create_dir_all(high.join("etc")).unwrap();
        fs::write(low.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        fs::write(
            high.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n",
        )
        .unwrap();
        fs::write(
            low.join("etc/group"),
            "root:x:0:\napp:x:1001:\nwheel:x:10:app\n",
        )
        .unwrap();
        let layers = vec![low.clone(), high.clone()];
        assert_eq!(
            resolve_user(&layers, Some("app"), None, None, &[]).unwrap(),
            (1000, 1001, vec![10])
        );
        assert_eq!(
            resolve_user(&layers, Some("1000:wheel"), None, None, &[5]).unwrap(),
            (1000, 10, vec![5])
        );
        assert_eq!(
            resolve_user(&layers, None, Some(7), Some(8), &[]).unwrap(),
            (7, 8, vec![])
        );
        assert_eq!(
            resolve_user(&layers, None, None, None, &[]).unwrap(),
            (0, 0, vec![])
        );
        let err = resolve_user(&layers, Some("nobody"), None, None, &[]).unwrap_err();
        assert!(err.contains("not in its /etc/passwd"), "{err}");
        // A whiteout in the top layer hides the file below.
        fs::remove_file(high.join("etc/passwd")).unwrap();
        fs::write(high.join("etc/.wh.passwd"), "").unwrap();
        assert!(resolve_user(&layers, Some("app"), None, None, &[]).is_err());
    }
}
