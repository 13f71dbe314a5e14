//! The `process` runtime: each container instance is a process group started by a `berth
//! shim` (see [`super::shim`]), with its records and log under
//! `ROOT/<pod uid>/<container>/<attempt>/`, and the pod's volumes under
//! `ROOT/<pod uid>/.volumes/<volume>`. Exits are pushed as events: the runtime waits
//! on the shims it started, and on the shims it adopted after a restart through a pidfd,
//! so nothing polls.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;
use tokio::sync::broadcast;
use tokio::task::JoinSet;

use super::cgroup::Cgroups;
use super::shim::{
    self, CGROUP_FILE, EXIT_FILE, Exit, LOG_FILE, PID_FILE, Rotation, SHIM_FILE, Started,
};
use super::{ContainerId, ContainerSpec, ContainerStatus, Error, Event, Result, Runtime, State};

const SPEC_FILE: &str = "spec.json";
/// The pod's sandbox (`berth pause --sandbox`), beside its containers (a dot name is no
/// container name).
const SANDBOX: &str = ".sandbox";
/// The pid of the process that holds the sandbox's namespaces.
const HOLDER_FILE: &str = "holder.pid";
/// The pod's volumes, beside its containers (a dot name is no container name).
const VOLUMES_DIR: &str = ".volumes";
/// How long a shim may take to start its container.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a SIGKILLed process group may take to be reported gone.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    spec: ContainerSpec,
    created_at: String,
}

struct Inner {
    root: PathBuf,
    shim: PathBuf,
    rotation: Rotation,
    /// The cgroups containers run in, or why there are none.
    cgroups: Result<Cgroups, String>,
    events: broadcast::Sender<Event>,
    /// Instances whose exit is being waited for.
    watched: Mutex<HashSet<ContainerId>>,
    tasks: Mutex<JoinSet<()>>,
    /// How containers of images run (none: this runtime runs commands only).
    runc: std::sync::OnceLock<Runc>,
    /// Set once the runtime is closed: nothing starts any more. Held while a container
    /// is being launched, so a close waits for a launch under way and then ends it too.
    closed: Mutex<bool>,
}

/// runc, which runs the containers of images: the program and the state directory of
/// its own that berth gives it (`--root`), one per data directory.
#[derive(Debug, Clone)]
pub struct Runc {
    pub program: PathBuf,
    pub root: PathBuf,
}

/// The process runtime; cheap to clone.
#[derive(Clone)]
pub struct ProcessRuntime {
    inner: Arc<Inner>,
}

fn alive(record: &Started) -> bool {
    shim::start_ticks(record.pid).is_some_and(|t| t == record.start_ticks)
}

fn now() -> String {
    crate::types::now()
}

impl ProcessRuntime {
    /// Opens the runtime's state under `root`, starting containers through `shim_program`
    /// (the berth binary). Instances whose shims still run are adopted. Must be called
    /// within a tokio runtime.
    pub fn open(root: &Path, shim_program: &Path, rotation: Rotation) -> Result<Self> {
        let none = Err("the runtime was opened without cgroups".to_string());
        Self::open_with_cgroups(root, shim_program, rotation, none)
    }

    /// As [`open`](Self::open), running containers in `cgroups` (an error says why there
    /// are none: containers then run without their limits).
    pub fn open_with_cgroups(
        root: &Path,
        shim_program: &Path,
        rotation: Rotation,
        cgroups: Result<Cgroups, String>,
    ) -> Result<Self> {
        fs::create_dir_all(root).map_err(|e| Error::io(format!("create {}", root.display()), e))?;
        super::reset::id(root)
            .map_err(|e| Error::io(format!("give {} its identity", root.display()), e))?;
        let rt = ProcessRuntime {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                shim: shim_program.to_path_buf(),
                rotation,
                cgroups,
                events: broadcast::channel(1024).0,
                watched: Mutex::new(HashSet::new()),
                tasks: Mutex::new(JoinSet::new()),
                closed: Mutex::new(false),
                runc: std::sync::OnceLock::new(),
            }),
        };
        let pods = rt.pods()?;
        for uid in &pods {
            for status in rt.pod_status(uid)? {
                if matches!(status.state, State::Running | State::Created) {
                    rt.adopt(&status.id);
                }
            }
        }
        if let Ok(cgroups) = &rt.inner.cgroups {
            let swept = cgroups.sweep(&pods.into_iter().collect());
            if swept > 0 {
                tracing::info!(
                    swept,
                    "removed the empty cgroups of pods this node no longer has"
                );
            }
        }
        Ok(rt)
    }

    fn dir(&self, id: &ContainerId) -> PathBuf {
        self.inner
            .root
            .join(&id.pod_uid)
            .join(&id.name)
            .join(id.attempt.to_string())
    }

    /// Reads an instance's exit record and tells the agent it ended.
    fn exited(inner: &Inner, id: ContainerId) {
        inner.watched.lock().expect("watched lock").remove(&id);
        let _ = inner.events.send(Event::Exited(id));
    }

    /// Waits, through a pidfd, for the shim of an instance this process did not start.
    fn adopt(&self, id: &ContainerId) {
        let dir = self.dir(id);
        let Some(rec) = shim::read_record::<Started>(&dir, SHIM_FILE) else {
            return;
        };
        if !alive(&rec)
            || !self
                .inner
                .watched
                .lock()
                .expect("watched lock")
                .insert(id.clone())
        {
            return;
        }
        let Some(pid) = Pid::from_raw(rec.pid) else {
            return;
        };
        let fd = match pidfd_open(pid, PidfdFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "cannot watch an adopted shim");
                return;
            }
        };
        let inner = self.inner.clone();
        let id = id.clone();
        self.inner
            .tasks
            .lock()
            .expect("tasks lock")
            .spawn(async move {
                // `AsyncFd::new` is deprecated because a caller could close the descriptor
                // while it is registered; here the AsyncFd owns the OwnedFd, so it cannot.
                #[allow(deprecated)]
                let registered = tokio::io::unix::AsyncFd::new(fd);
                if let Ok(fd) = registered {
                    let _ = fd.readable().await;
                }
                Self::exited(&inner, id);
            });
        tracing::info!(container = %self.dir_name(&dir), "adopted a running container");
    }

    /// Closes the runtime: nothing starts any more, and every container it holds ends
    /// (see [`super::reset`]: the shims, their process groups, whatever is in the
    /// runtime's cgroups, which are removed). The records stay. Running it again finds
    /// nothing to end.
    pub fn close(&self) -> Result<super::reset::Report> {
        *self.inner.closed.lock().expect("closed lock") = true;
        super::reset::reset(&self.inner.root).map_err(|e| {
            Error::io(
                format!("end the containers of {}", self.inner.root.display()),
                e,
            )
        })
    }

    /// Runs the containers of images (those whose spec has a root filesystem) with
    /// `runc`; set once.
    pub fn set_runc(&self, runc: Runc) {
        let _ = self.inner.runc.set(runc);
    }

    /// Whether containers of images can run here.
    pub fn runs_images(&self) -> bool {
        self.inner.runc.get().is_some()
    }

    /// The spec an instance was started with.
    pub fn spec(&self, id: &ContainerId) -> Option<ContainerSpec> {
        shim::read_record::<Record>(&self.dir(id), SPEC_FILE).map(|r| r.spec)
    }

    fn dir_name(&self, dir: &Path) -> String {
        dir.strip_prefix(&self.inner.root)
            .unwrap_or(dir)
            .display()
            .to_string()
    }

    fn status_of(&self, id: ContainerId) -> Option<ContainerStatus> {
        let dir = self.dir(&id);
        let rec: Record = shim::read_record(&dir, SPEC_FILE)?;
        let started: Option<Started> = shim::read_record(&dir, PID_FILE);
        let exit: Option<Exit> = shim::read_record(&dir, EXIT_FILE);
        let shim_alive = shim::read_record::<Started>(&dir, SHIM_FILE).is_some_and(|s| alive(&s));
        let state = match (&exit, &started) {
            (Some(_), _) => State::Exited,
            (None, Some(s)) if shim_alive || alive(s) => State::Running,
            (None, None) if shim_alive => State::Created,
            _ => State::Unknown,
        };
        Some(ContainerStatus {
            hash: rec.spec.hash.clone(),
            image: rec.spec.image.clone(),
            state,
            created_at: rec.created_at,
            started_at: started.as_ref().map(|s| s.started_at.clone()),
            finished_at: exit.as_ref().map(|e| e.finished_at.clone()),
            exit_code: exit.as_ref().map(|e| e.exit_code),
            signal: exit.as_ref().and_then(|e| e.signal),
            error: exit.as_ref().and_then(|e| e.error.clone()),
            reason: exit.as_ref().and_then(|e| e.reason.clone()),
            message: exit.as_ref().and_then(|e| e.message.clone()),
            // A container of an image is its init process (in its own namespaces), once
            // runc has made it; its shim's child is runc.
            pid: fs::read_to_string(dir.join(super::oci::PID_FILE))
                .ok()
                .and_then(|p| p.trim().parse().ok())
                .or(started.map(|s| s.pid)),
            id,
        })
    }

    /// Signals an instance's process group, if it is still the process we started.
    fn signal(&self, id: &ContainerId, sig: Signal) -> Result<bool> {
        let dir = self.dir(id);
        let Some(started) = shim::read_record::<Started>(&dir, PID_FILE) else {
            return Ok(false);
        };
        if !alive(&started) {
            return Ok(false);
        }
        let Some(pid) = Pid::from_raw(started.pid) else {
            return Ok(false);
        };
        match kill_process_group(pid, sig) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::SRCH) => Ok(false),
            Err(e) => Err(Error::io(format!("signal container {id}"), e.into())),
        }
    }
}

fn list_dir(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        // Dot names (the pod's volumes) are no containers.
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

impl ProcessRuntime {
    /// Records an instance and starts its shim; returns the shim's stdout, which closes
    /// once the container runs.
    fn launch(
        &self,
        spec: &ContainerSpec,
        holder: Option<i32>,
    ) -> Result<(ContainerId, tokio::process::ChildStdout)> {
        let id = ContainerId {
            pod_uid: spec.pod_uid.clone(),
            name: spec.name.clone(),
            attempt: spec.attempt,
        };
        let dir = self.dir(&id);
        if dir.join(SPEC_FILE).exists() {
            return Err(Error::Invalid(format!("container {id} exists already")));
        }
        if dir.exists() {
            // A start cut short before its spec was recorded (berth was killed): the shim
            // starts only after that, so nothing of it runs and it starts afresh.
            tracing::info!(container = %id, "starting over a start that was cut short");
            fs::remove_dir_all(&dir)
                .map_err(|e| Error::io(format!("remove {}", dir.display()), e))?;
        }
        fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        let record = Record {
            spec: spec.clone(),
            created_at: now(),
        };
        shim::write_record(&dir, SPEC_FILE, &record)
            .map_err(|e| Error::io(format!("record container {id}"), e))?;
        // The termination message's file: the container's own, bind-mounted at its path.
        let mut mounts = spec.mounts.clone();
        if let Some(target) = &spec.termination_message.path {
            let file = dir.join(shim::TERMINATION_LOG);
            fs::write(&file, b"")
                .and_then(|()| {
                    use std::os::unix::fs::PermissionsExt;
                    // Any user the container runs as may write it.
                    fs::set_permissions(&file, fs::Permissions::from_mode(0o666))
                })
                .map_err(|e| Error::io(format!("create {}", file.display()), e))?;
            mounts.push(super::Mount {
                source: file,
                target: target.clone(),
                read_only: false,
            });
        }
        shim::write_record(&dir, shim::TERMINATION_FILE, &spec.termination_message)
            .map_err(|e| Error::io(format!("record the termination message of {id}"), e))?;
        let mut argv = spec.argv.clone();
        if let Some(rootfs) = &spec.rootfs {
            argv = self.bundle(spec, rootfs, &dir, &mut mounts, holder)?;
        } else if let Some(pid) = holder {
            // A command on this machine joins its sandbox's network and host name, and
            // sees the pod's /etc files over this machine's.
            if let Some(etc) = &spec.etc {
                let files = super::oci::etc_files(&dir, &spec.pod_name, Some(etc))
                    .map_err(|e| Error::io(format!("write the /etc files of {id}"), e))?;
                mounts.extend(files);
            }
            let join = shim::Join {
                pid,
                start_ticks: shim::start_ticks(pid).unwrap_or(0),
            };
            shim::write_record(&dir, shim::JOIN_FILE, &join)
                .map_err(|e| Error::io(format!("record the sandbox of {id}"), e))?;
        }
        if !mounts.is_empty() {
            let setup = shim::MountSetup {
                mounts: mounts.clone(),
                working_dir: spec.working_dir.clone(),
            };
            shim::write_record(&dir, shim::MOUNTS_FILE, &setup)
                .map_err(|e| Error::io(format!("record the mounts of {id}"), e))?;
        }
        // The sandbox's pause is charged to no pod (it is berth, not the pod's code).
        if let (Ok(cgroups), false) = (&self.inner.cgroups, spec.name == SANDBOX) {
            let placement = cgroups
                .create(
                    &id.pod_uid,
                    &id.name,
                    id.attempt,
                    &spec.resources,
                    &spec.pod_resources,
                )
                .map_err(|e| Error::io(format!("create the cgroups of container {id}"), e))?;
            shim::write_record(&dir, CGROUP_FILE, &placement)
                .map_err(|e| Error::io(format!("record the cgroups of container {id}"), e))?;
        }
        // The shim runs in the container's environment, which the container inherits.
        let mut cmd = super::command(&self.inner.shim, &spec.env, spec.working_dir.as_deref());
        cmd.arg("shim")
            .arg("--dir")
            .arg(&dir)
            .arg("--log-max-bytes")
            .arg(self.inner.rotation.max_bytes.to_string())
            .arg("--log-files")
            .arg(self.inner.rotation.files.to_string());
        for (on, flag) in [
            (spec.stdio.stdin, "--stdin"),
            (spec.stdio.stdin_once, "--stdin-once"),
            (spec.stdio.tty, "--tty"),
        ] {
            if on {
                cmd.arg(flag);
            }
        }
        cmd.arg("--")
            .args(&argv)
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(false);
        if !mounts.is_empty() {
            // The working directory may lie in a volume: the shim enters it after mounting.
            cmd.current_dir("/");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("start the shim of {id}"), e))?;
        let shim_pid = child.id().unwrap_or(0) as i32;
        let shim_rec = Started {
            pid: shim_pid,
            start_ticks: shim::start_ticks(shim_pid).unwrap_or(0),
            started_at: now(),
        };
        shim::write_record(&dir, SHIM_FILE, &shim_rec)
            .map_err(|e| Error::io(format!("record the shim of {id}"), e))?;
        self.inner
            .watched
            .lock()
            .expect("watched lock")
            .insert(id.clone());
        // The shim closes its stdout once the container runs (or could not start).
        let stdout = child.stdout.take().expect("piped");
        let inner = self.inner.clone();
        let watch_id = id.clone();
        self.inner
            .tasks
            .lock()
            .expect("tasks lock")
            .spawn(async move {
                let _ = child.wait().await;
                Self::exited(&inner, watch_id);
            });
        Ok((id, stdout))
    }
}

impl ProcessRuntime {
    /// Writes the OCI bundle of a container of an image and the record of the root
    /// filesystem its shim mounts; the container's volumes go into the bundle (`mounts`
    /// is emptied: the shim mounts none itself). Returns the command the shim runs.
    fn bundle(
        &self,
        spec: &ContainerSpec,
        rootfs: &super::oci::Rootfs,
        dir: &Path,
        mounts: &mut Vec<super::Mount>,
        holder: Option<i32>,
    ) -> Result<Vec<String>> {
        use super::oci;
        let runc = self.inner.runc.get().ok_or_else(|| {
            Error::Invalid(
                "this node cannot run containers of images: runc is not installed (install the `runc` package, then restart berth)".to_string(),
            )
        })?;
        let id = format!("{}-{}-{}", spec.pod_uid, spec.name, spec.attempt);
        let bundle = dir.join(oci::BUNDLE_DIR);
        let io = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| Error::io(what, e)
        };
        fs::create_dir_all(&bundle).map_err(io("create the container's bundle"))?;
        let mut all = oci::etc_files(dir, &spec.pod_name, spec.etc.as_ref())
            .map_err(io("write /etc files"))?;
        all.append(mounts);
        // runc puts the container in a cgroup of its own below the container's (which
        // carries the limits and outlives runc's, so its counters tell an OOM kill);
        // runc itself stays with the shim, uncharged. berth's cgroups have the same path
        // in every hierarchy. Without them, runc's goes below runc's own.
        let cgroups_path = match (&self.inner.cgroups, super::reset::id(&self.inner.root)) {
            (Ok(_), Ok(node)) => format!(
                "/{}/{node}/pod{}/{}-{}/runc",
                super::cgroup::PARENT,
                spec.pod_uid,
                spec.name,
                spec.attempt
            ),
            _ => format!("berth-{id}"),
        };
        let config =
            oci::spec(spec, rootfs, &all, &cgroups_path, holder).map_err(Error::Invalid)?;
        config
            .save(bundle.join("config.json"))
            .map_err(|e| Error::Invalid(format!("write the container's config.json: {e}")))?;
        let program = runc.program.display().to_string();
        let root = runc.root.display().to_string();
        let setup = oci::RootfsSetup {
            lower: rootfs.layers.iter().rev().cloned().collect(),
            upper: dir.join("upper"),
            work: dir.join("work"),
            target: bundle.join("rootfs"),
            cleanup: vec![
                program.clone(),
                "--root".into(),
                root.clone(),
                "delete".into(),
                "--force".into(),
                id.clone(),
            ],
        };
        shim::write_record(dir, oci::ROOTFS_FILE, &setup)
            .map_err(|e| Error::io(format!("record the root filesystem of {id}"), e))?;
        Ok(vec![
            program,
            "--root".into(),
            root,
            "run".into(),
            "--bundle".into(),
            bundle.display().to_string(),
            "--pid-file".into(),
            dir.join(oci::PID_FILE).display().to_string(),
            id,
        ])
    }
}

impl ProcessRuntime {
    /// Launches an instance unless the runtime is closed.
    fn launch_open(
        &self,
        spec: &ContainerSpec,
        holder: Option<i32>,
    ) -> Result<(ContainerId, tokio::process::ChildStdout)> {
        let closed = self.inner.closed.lock().expect("closed lock");
        if *closed {
            return Err(Error::Invalid(
                "the runtime is closed: berth is shutting down".to_string(),
            ));
        }
        self.launch(spec, holder)
    }

    /// Waits for a shim to say its container runs (or to end).
    async fn until_started(stdout: tokio::process::ChildStdout) {
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(stdout);
        let _ = tokio::time::timeout(START_TIMEOUT, reader.read_line(&mut line)).await;
    }

    /// The process holding pod `uid`'s sandbox namespaces, if its sandbox runs.
    pub fn sandbox_holder(&self, pod_uid: &str) -> Option<i32> {
        let id = ContainerId {
            pod_uid: pod_uid.to_string(),
            name: SANDBOX.to_string(),
            attempt: 0,
        };
        self.holder(&self.dir(&id))
    }

    /// The live holder of a pod sandbox's namespaces, if there is one.
    fn holder(&self, dir: &Path) -> Option<i32> {
        let shim: Started = shim::read_record(dir, SHIM_FILE)?;
        if !alive(&shim) || dir.join(EXIT_FILE).exists() {
            return None;
        }
        let pid: i32 = fs::read_to_string(dir.join(HOLDER_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    /// The pod's sandbox, started when it is not running: a `berth pause` under a shim
    /// of its own that holds the namespaces the pod's containers share. Returns the pid
    /// of the process holding them.
    async fn ensure_sandbox(&self, pod: &super::PodSandbox) -> Result<i32> {
        let sandbox = &pod.sandbox;
        let id = ContainerId {
            pod_uid: pod.pod_uid.clone(),
            name: SANDBOX.to_string(),
            attempt: 0,
        };
        let dir = self.dir(&id);
        if let Some(pid) = self.holder(&dir) {
            return Ok(pid);
        }
        if dir.exists() {
            // A sandbox that ended: a new one.
            self.end_sandbox(&pod.pod_uid);
            fs::remove_dir_all(&dir)
                .map_err(|e| Error::io(format!("remove {}", dir.display()), e))?;
        }
        let program = self.inner.shim.display().to_string();
        let mut argv = vec![
            program,
            "pause".into(),
            "--sandbox".into(),
            pod.pod_name.clone(),
            "--pid-file".into(),
            dir.join(HOLDER_FILE).display().to_string(),
        ];
        for (on, flag) in [
            (sandbox.host_network, "--host-uts"),
            (sandbox.host_ipc, "--host-ipc"),
            (sandbox.share_pids && !sandbox.host_pid, "--share-pids"),
            (sandbox.network && !sandbox.host_network, "--network"),
        ] {
            if on {
                argv.push(flag.into());
            }
        }
        let pause = ContainerSpec {
            pod_uid: pod.pod_uid.clone(),
            pod_name: pod.pod_name.clone(),
            pod_namespace: pod.pod_namespace.clone(),
            name: SANDBOX.to_string(),
            attempt: 0,
            hash: String::new(),
            image: "berth pause".into(),
            argv,
            env: Vec::new(),
            working_dir: None,
            mounts: Vec::new(),
            resources: Default::default(),
            stdio: Default::default(),
            termination_message: Default::default(),
            pod_resources: Default::default(),
            rootfs: None,
            sandbox: None,
            etc: None,
        };
        let (_, stdout) = self.launch_open(&pause, None)?;
        Self::until_started(stdout).await;
        // The holder is named once its namespaces are made (at once; a bounded wait).
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Some(pid) = self.holder(&dir) {
                return Ok(pid);
            }
            let ended = dir.join(EXIT_FILE).exists();
            if ended || tokio::time::Instant::now() > deadline {
                let why = shim::read_record::<Exit>(&dir, EXIT_FILE)
                    .and_then(|e| e.error)
                    .unwrap_or_else(|| "it did not start".to_string());
                return Err(Error::Invalid(format!(
                    "the pod's sandbox could not be made: {why}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Ends a pod's sandbox (its pause process and shim), if it runs.
    fn end_sandbox(&self, pod_uid: &str) {
        let id = ContainerId {
            pod_uid: pod_uid.to_string(),
            name: SANDBOX.to_string(),
            attempt: 0,
        };
        if let Ok(true) = self.signal(&id, Signal::KILL) {
            // Reaped by its shim at once; the shim then records the end.
            let dir = self.dir(&id);
            for _ in 0..200 {
                let gone = shim::read_record::<Started>(&dir, SHIM_FILE).is_none_or(|s| !alive(&s));
                if gone {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Runtime for ProcessRuntime {
    async fn start(&self, spec: &ContainerSpec) -> Result<ContainerId> {
        if spec.argv.is_empty() && spec.rootfs.is_none() {
            return Err(Error::Invalid(format!(
                "container {:?} has no command: the process runtime runs commands on this machine, not an image's entrypoint; give the container a `command`",
                spec.name
            )));
        }
        let holder = match &spec.sandbox {
            Some(sandbox) => Some(
                self.ensure_sandbox(&super::PodSandbox::of(spec, sandbox))
                    .await?,
            ),
            None => None,
        };
        let (id, stdout) = self.launch_open(spec, holder)?;
        Self::until_started(stdout).await;
        let _ = self.inner.events.send(Event::Started(id.clone()));
        Ok(id)
    }

    async fn stop(&self, id: &ContainerId, grace: Duration) -> Result<()> {
        let mut events = self.inner.events.subscribe();
        let gone = |events: &mut broadcast::Receiver<Event>, limit: Duration| {
            let id = id.clone();
            let dir = self.dir(&id);
            let mut events = events.resubscribe();
            async move {
                let wait = async {
                    loop {
                        if dir.join(EXIT_FILE).exists() {
                            return;
                        }
                        match events.recv().await {
                            Ok(Event::Exited(e)) if e == id => return,
                            Err(broadcast::error::RecvError::Closed) => return,
                            _ => {}
                        }
                    }
                };
                tokio::time::timeout(limit, wait).await.is_ok()
            }
        };
        if !self.signal(id, Signal::TERM)? {
            return Ok(());
        }
        if gone(&mut events, grace).await {
            return Ok(());
        }
        self.signal(id, Signal::KILL)?;
        if gone(&mut events, KILL_TIMEOUT).await {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "container {id} did not end after SIGKILL"
            )))
        }
    }

    fn pod_status(&self, pod_uid: &str) -> Result<Vec<ContainerStatus>> {
        let pod = self.inner.root.join(pod_uid);
        let mut out = Vec::new();
        for name in list_dir(&pod) {
            let mut attempts: Vec<u32> = list_dir(&pod.join(&name))
                .iter()
                .filter_map(|a| a.parse().ok())
                .collect();
            attempts.sort_unstable();
            for attempt in attempts {
                let id = ContainerId {
                    pod_uid: pod_uid.to_string(),
                    name: name.clone(),
                    attempt,
                };
                out.extend(self.status_of(id));
            }
        }
        Ok(out)
    }

    fn pods(&self) -> Result<Vec<String>> {
        Ok(list_dir(&self.inner.root))
    }

    fn remove_pod(&self, pod_uid: &str) -> Result<()> {
        let busy = self
            .pod_status(pod_uid)?
            .into_iter()
            .find(|s| matches!(s.state, State::Running | State::Created));
        if let Some(s) = busy {
            return Err(Error::Invalid(format!(
                "container {} still runs; stop it first",
                s.id
            )));
        }
        self.end_sandbox(pod_uid);
        if let Ok(cgroups) = &self.inner.cgroups
            && let Err(e) = cgroups.remove_pod(pod_uid)
        {
            tracing::warn!(pod = %pod_uid, error = %e, "could not remove a pod's cgroups");
        }
        let dir = self.inner.root.join(pod_uid);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("remove {}", dir.display()), e)),
        }
    }

    fn remove_container(&self, id: &ContainerId) -> Result<()> {
        if let Some(s) = self.status_of(id.clone())
            && matches!(s.state, State::Running | State::Created)
        {
            return Err(Error::Invalid(format!(
                "container {id} still runs; stop it first"
            )));
        }
        let dir = self.dir(id);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("remove {}", dir.display()), e)),
        }
    }

    fn volumes_dir(&self, pod_uid: &str) -> PathBuf {
        self.inner.root.join(pod_uid).join(VOLUMES_DIR)
    }

    fn log_path(&self, id: &ContainerId) -> PathBuf {
        self.dir(id).join(LOG_FILE)
    }

    fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    fn limits_unenforced(&self) -> Option<String> {
        self.inner.cgroups.as_ref().err().cloned()
    }

    fn stop_sandbox(&self, pod_uid: &str) {
        self.end_sandbox(pod_uid);
    }

    async fn sandbox(&self, pod: &super::PodSandbox) -> Result<i32> {
        self.ensure_sandbox(pod).await
    }

    fn exec_prefix(&self, id: &ContainerId) -> Vec<String> {
        let Some(runc) = self.inner.runc.get() else {
            return Vec::new();
        };
        if !self.dir(id).join(super::oci::ROOTFS_FILE).exists() {
            return Vec::new();
        }
        vec![
            runc.program.display().to_string(),
            "--root".into(),
            runc.root.display().to_string(),
            "exec".into(),
            format!("{}-{}-{}", id.pod_uid, id.name, id.attempt),
        ]
    }

    fn usage(&self, pod_uid: &str) -> Vec<(String, u32, super::cgroup::Usage)> {
        let Ok(cgroups) = &self.inner.cgroups else {
            return Vec::new();
        };
        let Ok(instances) = self.pod_status(pod_uid) else {
            return Vec::new();
        };
        instances
            .into_iter()
            .filter(|s| s.state == State::Running)
            .filter_map(|s| {
                let usage = cgroups.container_usage(pod_uid, &s.id.name, s.id.attempt)?;
                Some((s.id.name, s.id.attempt, usage))
            })
            .collect()
    }
}
