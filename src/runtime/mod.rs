//! Runtimes: what the node agent asks of the thing that runs containers. The `Runtime`
//! trait is the seam; [`process::ProcessRuntime`] runs each container as a process group
//! under a [`shim`] that outlives berth, so containers survive a restart and are adopted
//! again.

pub mod cgroup;
pub mod fake;
pub mod logs;
mod mountpoint;
pub mod oci;
pub mod process;
pub mod pty;
pub mod reset;
pub mod shim;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The PATH a container gets when its environment names none (as container engines do).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A command that runs in a container's environment: exactly `env` (plus the default
/// PATH when it names none), in `working_dir` (default `/`). The shim, exec probes and
/// `kubectl exec` all start processes this way.
pub fn command(
    program: impl AsRef<std::ffi::OsStr>,
    env: &[(String, String)],
    working_dir: Option<&std::path::Path>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(working_dir.unwrap_or(std::path::Path::new("/")));
    if !env.iter().any(|(k, _)| k == "PATH") {
        cmd.env("PATH", DEFAULT_PATH);
    }
    cmd
}

/// Makes `cmd` run in the namespaces of the container process `pid` that are not berth's
/// own — its network, host name and mount namespaces — so it sees the container's
/// volumes and network; `working_dir` is entered again after the switch (default `/`).
pub fn join_namespaces(
    cmd: &mut tokio::process::Command,
    pid: i32,
    working_dir: Option<&std::path::Path>,
) -> std::io::Result<()> {
    use rustix::thread::LinkNameSpaceType;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let ns = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let mut join = Vec::new();
    // The mount namespace last: /proc of the container's may not show the others.
    for (file, kind) in [
        ("net", LinkNameSpaceType::Network),
        ("uts", LinkNameSpaceType::HostNameAndNISDomainName),
        ("mnt", LinkNameSpaceType::Mount),
    ] {
        let theirs = format!("/proc/{pid}/ns/{file}");
        if ns(&theirs)? != ns(&format!("/proc/self/ns/{file}"))? {
            let fd = std::os::fd::OwnedFd::from(std::fs::File::open(&theirs)?);
            join.push((fd, kind));
        }
    }
    if join.is_empty() {
        return Ok(());
    }
    let dir = std::ffi::CString::new(
        working_dir
            .unwrap_or(std::path::Path::new("/"))
            .as_os_str()
            .as_bytes(),
    )
    .map_err(std::io::Error::other)?;
    // The working directory may lie in a volume: it is entered after the switch.
    cmd.current_dir("/");
    let enter = move || -> std::io::Result<()> {
        use rustix::thread::move_into_link_name_space;
        use std::os::fd::AsFd;
        for (fd, kind) in &join {
            move_into_link_name_space(fd.as_fd(), Some(*kind))?;
        }
        rustix::process::chdir(dir.as_c_str())?;
        Ok(())
    };
    // SAFETY: the closure runs in the forked child before exec and only makes system
    // calls (setns, chdir) on values prepared before the fork; it allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(enter);
    }
    Ok(())
}

/// Where a command given for a container (`kubectl exec`, an exec probe, a hook) runs:
/// through `prefix` when the runtime has one (the `oci` runtime's `runc exec`, which puts
/// it in every namespace, cgroup, user and capability set of the container), else in the
/// mount namespace of the container's process `pid`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inside {
    pub pid: Option<i32>,
    pub prefix: Vec<String>,
}

impl Inside {
    /// The command that runs `program` with `args` inside the container, in `env` and
    /// `working_dir` (those of the container's own process through a prefix); with
    /// `tty`, on the terminal it is started on.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
        env: &[(String, String)],
        working_dir: Option<&std::path::Path>,
        tty: bool,
    ) -> std::io::Result<tokio::process::Command> {
        if let Some((runner, runner_args)) = self.prefix.split_first() {
            let mut cmd = tokio::process::Command::new(runner);
            cmd.env_clear().env("PATH", DEFAULT_PATH).current_dir("/");
            // The prefix ends with what it runs in (`exec ID`): flags go before that.
            let (flags_before, target) = runner_args.split_at(runner_args.len().saturating_sub(1));
            cmd.args(flags_before);
            if tty {
                cmd.arg("--tty");
            }
            cmd.args(target).arg(program).args(args);
            return Ok(cmd);
        }
        let mut cmd = command(program, env, working_dir);
        cmd.args(args);
        if let Some(pid) = self.pid {
            join_namespaces(&mut cmd, pid, working_dir)?;
        }
        Ok(cmd)
    }
}

/// A pod's sandbox: the namespaces its containers share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSandbox {
    pub pod_uid: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub sandbox: oci::Sandbox,
}

impl PodSandbox {
    /// The sandbox of the pod of the container `spec`.
    pub fn of(spec: &ContainerSpec, sandbox: &oci::Sandbox) -> Self {
        PodSandbox {
            pod_uid: spec.pod_uid.clone(),
            pod_name: spec.pod_name.clone(),
            pod_namespace: spec.pod_namespace.clone(),
            sandbox: sandbox.clone(),
        }
    }
}

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("container {0} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One container instance to start, with everything resolved by the agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    pub pod_uid: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub name: String,
    /// Which start of this container in the pod this is (0 for the first).
    pub attempt: u32,
    /// A stable hash of the container's spec: a different hash means "changed".
    pub hash: String,
    pub image: String,
    /// `command` followed by `args`.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    /// Volumes bind-mounted into the container's own mount namespace; none means the
    /// container shares berth's mount namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// What the container may use (enforced when the runtime has cgroups).
    #[serde(default)]
    pub resources: Resources,
    /// What the whole pod may use: a limit only when every container of the pod has one.
    #[serde(default)]
    pub pod_resources: Resources,
    /// Whether the container keeps a stdin and a terminal for `kubectl attach`.
    #[serde(default)]
    pub stdio: Stdio,
    /// Where the container's termination message comes from.
    #[serde(default)]
    pub termination_message: TerminationMessage,
    /// The image the container runs in (the `oci` runtime, through runc); none: it runs
    /// its command on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<oci::Rootfs>,
    /// The pod's sandbox, whose namespaces the container joins (always for a container
    /// of an image; for a command on this machine, when its pod has a network of its
    /// own). None: the container runs in berth's network and host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<oci::Sandbox>,
    /// The pod's `/etc/hosts` and `/etc/resolv.conf`, as the agent made them for a pod
    /// with a network of its own (none: a container of an image gets loopback names and
    /// this machine's resolvers, a command on this machine this machine's files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etc: Option<EtcFiles>,
}

/// The files of a pod in `/etc` that the agent writes (the kubelet's managed hosts file
/// and the resolver configuration of its DNS policy).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcFiles {
    pub hosts: String,
    pub resolv_conf: String,
}

/// Where a container's termination message comes from (its `terminationMessagePath` and
/// `terminationMessagePolicy`): the shim reads it when the container ends (at most 4 KiB),
/// and with `fallback_to_logs` an empty message of a failed container is the tail of its
/// log (80 lines, 2 KiB at most), as the kubelet does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminationMessage {
    /// The path at which the container finds a file of its own to write the message to
    /// (none: it has none, as without mount namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    #[serde(default)]
    pub fallback_to_logs: bool,
}

/// One bind mount of a container: `source` on this machine appears at `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    #[serde(default)]
    pub read_only: bool,
}

/// A container's resources, in the units the kernel takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// `limits.memory`, in bytes.
    pub memory_limit_bytes: Option<u64>,
    /// `limits.cpu`, in millicores: a CFS quota.
    pub cpu_limit_millis: Option<u64>,
    /// `requests.cpu`, in millicores: a relative weight.
    pub cpu_request_millis: Option<u64>,
}

impl Resources {
    pub fn any_limit(&self) -> bool {
        self.memory_limit_bytes.is_some() || self.cpu_limit_millis.is_some()
    }
}

/// A container's stdin and terminal (the pod spec's `stdin`, `stdinOnce` and `tty`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stdio {
    /// The container's stdin stays open for attached clients (else it reads nothing).
    pub stdin: bool,
    /// The container's stdin closes when the first attached client closes it or leaves.
    pub stdin_once: bool,
    /// The container runs on a pseudo-terminal (stderr merged into stdout).
    pub tty: bool,
}

/// Names one container instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContainerId {
    pub pod_uid: String,
    pub name: String,
    pub attempt: u32,
}

impl std::fmt::Display for ContainerId {
    /// `<pod uid>/<container>/<attempt>`, as `containerID` shows it after `process://`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.pod_uid, self.name, self.attempt)
    }
}

/// Where an instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Asked to start, not running yet.
    Created,
    Running,
    Exited,
    /// The runtime lost track of it (its shim is gone without a record).
    Unknown,
}

/// One container instance as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    pub id: ContainerId,
    pub hash: String,
    pub image: String,
    pub state: State,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why it could not run, when it could not.
    pub error: Option<String>,
    /// Why it ended, when the runtime knows better than its exit code (`OOMKilled`).
    pub reason: Option<String>,
    /// What the container said as it ended (its termination message).
    pub message: Option<String>,
    pub pid: Option<i32>,
}

/// Something that happened to a container, pushed to the agent as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Started(ContainerId),
    Exited(ContainerId),
}

/// What the node agent needs from a runtime.
pub trait Runtime: Send + Sync + 'static {
    /// Creates and starts an instance; it runs on its own from then on.
    fn start(&self, spec: &ContainerSpec) -> impl Future<Output = Result<ContainerId>> + Send;

    /// Stops an instance: SIGTERM to its process group, SIGKILL when `grace` has passed.
    fn stop(&self, id: &ContainerId, grace: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Every instance of a pod, newest attempt last per container.
    fn pod_status(&self, pod_uid: &str) -> Result<Vec<ContainerStatus>>;

    /// The pods the runtime holds anything of (for recovery and housekeeping).
    fn pods(&self) -> Result<Vec<String>>;

    /// Forgets one exited instance: its records and logs go.
    fn remove_container(&self, id: &ContainerId) -> Result<()>;

    /// Forgets a pod whose instances have all exited: its records and logs go.
    fn remove_pod(&self, pod_uid: &str) -> Result<()>;

    /// Where the agent keeps the volumes of a pod; removed with the pod's records.
    fn volumes_dir(&self, pod_uid: &str) -> PathBuf;

    /// The current log file of an instance (older rotations beside it as `.1`, `.2` …).
    fn log_path(&self, id: &ContainerId) -> PathBuf;

    /// Start and exit events.
    fn events(&self) -> tokio::sync::broadcast::Receiver<Event>;

    /// The time on the clock the runtime stamps its records with: the agent measures
    /// back-off and run times against it.
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    /// Waits `d` on that clock (the agent's timers: back-off, retries, resyncs).
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }

    /// Why resource limits are not enforced, when they are not.
    fn limits_unenforced(&self) -> Option<String>;

    /// Ends what holds a pod's shared namespaces (its sandbox), once its containers are
    /// stopped; none is a no-op.
    fn stop_sandbox(&self, _pod_uid: &str) {}

    /// Makes a pod's sandbox unless it runs; returns the pid of the process that holds
    /// its namespaces (the node wires its network namespace).
    fn sandbox(&self, pod: &PodSandbox) -> impl Future<Output = Result<i32>> + Send {
        let _ = pod;
        std::future::ready(Err(Error::Invalid(
            "this runtime makes no pod sandboxes".to_string(),
        )))
    }

    /// The command line that runs a command inside an instance (empty: the instance's
    /// mount namespace is joined instead).
    fn exec_prefix(&self, _id: &ContainerId) -> Vec<String> {
        Vec::new()
    }

    /// What each running instance of a pod has used, by container name and attempt
    /// (none when the runtime cannot tell).
    fn usage(&self, _pod_uid: &str) -> Vec<(String, u32, cgroup::Usage)> {
        Vec::new()
    }
}
